"""Driving a running app as its visitors do, for the benchmarks that measure the app (``in_app``, ``soak``):
start ``python -m dart_arena`` on a free port and wait until it serves, open its page in headless Chromium (Playwright
on the system's browser: /usr/bin/chromium or $DART_CHROMIUM; nothing is downloaded) or call it through
``gradio_client``, and wait for each race's line in the app's race log."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dart_core.bench.e2e import BenchError
from dart_core.racers.registry import drafting_racers

START_TIMEOUT_S = 900  # model loading (a first run converts the default bundle's target)
LOG_GRACE_S = 30  # the page shows the end, the race log must follow within this


def read_race_log(path: Path) -> list[dict[str, Any]]:
    """Every race the app logged, in order (one JSON object a line; lines end with "\\n" only: a record may hold
    characters that ``str.splitlines`` would also split at, in a log written before the app escaped them)."""
    if not path.is_file():
        return []
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").split("\n"), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            if not isinstance(rec["result"]["methods"], dict):
                raise TypeError
        except (json.JSONDecodeError, KeyError, TypeError):
            raise BenchError(f"{path}:{n}: not a race-log line (a JSON object with result.methods)") from None
        out.append(rec)
    return out


def tree_values(args: argparse.Namespace) -> list[tuple[Any, Any, Any]]:
    """(racer, knob, value) for every tree option given on the command line."""
    return [(r, k, v) for r in drafting_racers() for k in r.knobs()
            if (v := getattr(args, f"{r.dest}__{k.name}", None)) is not None]


def chromium_binary() -> str | None:
    """$DART_CHROMIUM, else the system's chromium (never a downloaded one)."""
    for candidate in (os.environ.get("DART_CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium")):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def log_tail(path: Path, lines: int = 30) -> str:
    """The last ``lines`` lines of the log at ``path`` ("" when it cannot be read), for an error message."""
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


@contextmanager
def running_app(cmd: list[str], port: int, log_path: Path) -> Iterator[str]:
    """The app as a subprocess (its own process, as users run it) until it serves; stopped afterwards."""
    with app_process(cmd, port, log_path) as (url, _):
        yield url


@contextmanager
def app_process(cmd: list[str], port: int, log_path: Path,
                ready: str = "/gradio_api/info") -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """:func:`running_app` that also gives the process (the soak benchmark reads its memory); serving means
    ``ready`` answers 200 (``/healthz``: the model is loaded too)."""
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "PYTHONUNBUFFERED": "1"}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise BenchError(f"the app exited with code {proc.returncode} before serving ({log_path}):\n"
                                 f"{log_tail(log_path)}")
            try:
                with urllib.request.urlopen(url + ready, timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise BenchError(f"the app did not serve within {START_TIMEOUT_S} s ({log_path}):\n"
                                 f"{log_tail(log_path)}")
            time.sleep(0.5)
        yield url, proc
    finally:
        stop_process(proc)


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 15) -> None:
    """Stop the app as Ctrl-C would (SIGINT: it closes its model process), killed if it has not ended in
    ``timeout`` seconds. A process that leads its own session (``start_new_session``, e.g. a shell script that
    starts the app) is signalled with its whole group, as a terminal's Ctrl-C is, so no child outlives it."""
    if proc.poll() is not None:
        return
    try:
        group = os.getpgid(proc.pid) == proc.pid
    except OSError:
        group = False

    def signal_it(sig: int) -> None:
        with suppress(ProcessLookupError):
            if group:
                os.killpg(proc.pid, sig)
            else:
                proc.send_signal(sig)

    signal_it(signal.SIGINT)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        signal_it(signal.SIGKILL)
        proc.wait(timeout=timeout)
    if group:  # the leader ended: a child still in its group is stopped with it
        signal_it(signal.SIGKILL)


# ------------------------------------------------------------------------------------------------ drivers
@dataclass
class RaceLog:
    """The app's race log, read as it grows."""

    path: Path

    def count(self) -> int:
        return len(read_race_log(self.path))

    def after(self, n: int) -> list[dict[str, Any]]:
        return read_race_log(self.path)[n:]


def _await_line(log: RaceLog, n: int, timeout: float, ended: Callable[[], bool], wait: Callable[[float], None],
                text: str) -> dict[str, Any]:
    """The race's log line once it is there and ``ended()`` says the driver saw the end too."""
    deadline, seen_end = time.monotonic() + timeout, None
    while True:
        new = log.after(n)
        done = ended()
        if new and done:
            if len(new) > 1:
                raise BenchError(f"{len(new)} races ended for one prompt: is another visitor using this app?")
            return new[0]
        if done and seen_end is None:
            seen_end = time.monotonic()
        if seen_end is not None and time.monotonic() - seen_end > LOG_GRACE_S:
            raise BenchError(f"the race of {text[:40]!r} ended but the app wrote no line to {log.path} within "
                             f"{LOG_GRACE_S} s: does `python -m dart_arena` support --race-log?")
        if time.monotonic() > deadline:
            raise BenchError(f"the race of {text[:40]!r} did not end within {timeout:g} s (--timeout)")
        wait(0.25)


def drive_page(url: str, prompts: Sequence[dict[str, str]], log: RaceLog, args: argparse.Namespace,
               binary: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Race every prompt through the page in headless Chromium, as a visitor: type, Send, wait for the end
    (the race-log line and "Done"/"Stopped" on the page), Clear. One uncounted warm-up prompt first.
    Returns the counted races' log lines and what the page did (visibility, script errors)."""
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright
    from tqdm.auto import tqdm

    status_js = "(document.querySelector('#status')?.innerText || '')"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=binary, headless=True,
                                     args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 1000})
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(url)
            page.wait_for_selector("#prompt textarea", timeout=60_000)
            controls = [(f"{r.key}-{k.flag}", v, f"--{r.key}-{k.flag}") for r, k, v in tree_values(args)
                        if k.kind is not bool]  # switches are the app's flags (app_command), not sliders
            if controls:
                page.click("#settings button.label-wrap", timeout=10_000)
                for elem_id, value, flag in controls:
                    _set_slider(page, elem_id, value, flag)
            visibility: list[str] = []

            def ended() -> bool:
                text = page.evaluate(status_js)
                return "Done" in text or "Stopped" in text

            def race(text: str) -> dict[str, Any]:
                n = log.count()
                page.fill("#prompt textarea", text)
                page.click("#send")
                rec = _await_line(log, n, args.timeout, ended, lambda s: page.wait_for_timeout(s * 1e3), text)
                visibility.append(page.evaluate("document.visibilityState"))
                page.click("#clear")
                page.wait_for_function(f"() => !{status_js}.trim()", timeout=30_000)
                return rec

            race(prompts[0]["prompt"])  # warm-up, not counted
            races = [race(p["prompt"]) for p in tqdm(prompts, desc="app (browser)", unit="prompt",
                                                       disable=args.no_progress)]
            return races, {"visible": all(v == "visible" for v in visibility), "visibility": sorted(set(visibility)),
                           "page_errors": errors}
        except PlaywrightError as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise BenchError(f"driving the page failed: {first} (the bench relies on #prompt textarea, #send, "
                             "#clear, #status and, for tree options, #settings and the sliders' ids)") from None
        finally:
            browser.close()


def _set_slider(page: Any, elem_id: str, value: Any, flag: str) -> None:
    """Type into a slider's number box (retried: a busy page can drop an edit)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    box = page.locator(f"#{elem_id} input[type=number]")
    if box.count() == 0:
        raise BenchError(f"{flag}: the page has no control #{elem_id} (not a setting the app shows)")
    for _ in range(3):
        box.fill(str(value))
        box.blur()
        try:
            page.wait_for_function("([id, v]) => Number(document.querySelector(`#${id} input[type=range]`).value) "
                                   "== Number(v)", arg=[elem_id, value], timeout=10_000)
            return
        except PlaywrightTimeout:
            continue
    raise BenchError(f"{flag}: could not set the page's control #{elem_id} to {value}")


def drive_client(url: str, prompts: Sequence[dict[str, str]], log: RaceLog,
                 args: argparse.Namespace) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The same races with no page: the app's ``/race`` endpoint through ``gradio_client`` (one session, so
    ``/clear`` between prompts as on the page). Settings are passed by their control's label."""
    from gradio_client import Client
    from tqdm.auto import tqdm

    client = Client(url, verbose=False)
    params = client.view_api(print_info=False, return_format="dict")["named_endpoints"]["/race"]["parameters"]
    by_label = {p.get("label"): p["parameter_name"] for p in params}
    wanted = {"Max new tokens": args.max_new_tokens, "Temperature": 0.0,
              **{f"{r.label} {k.label}": v for r, k, v in tree_values(args)}}
    missing = [k for k in wanted if k not in by_label]
    if missing:
        raise BenchError(f"the app's /race endpoint has no control {', '.join(map(repr, missing))}")
    kwargs = {by_label[k]: v for k, v in wanted.items()}
    prompt_param = params[0]["parameter_name"]

    def race(text: str) -> dict[str, Any]:
        n = log.count()
        job = client.submit(api_name="/race", **{prompt_param: text}, **kwargs)
        try:
            job.result(timeout=args.timeout)
        except Exception as e:  # gradio_client's AppError, a timeout, a dropped connection
            raise BenchError(f"the /race request for {text[:40]!r} failed: {type(e).__name__}: {e}") from None
        rec = _await_line(log, n, LOG_GRACE_S, lambda: True, time.sleep, text)
        client.predict(api_name="/clear")
        return rec

    race(prompts[0]["prompt"])  # warm-up, not counted
    races = [race(p["prompt"]) for p in tqdm(prompts, desc="app (no page)", unit="prompt", disable=args.no_progress)]
    return races, {"visible": None, "page_errors": []}


# ------------------------------------------------------------------------------------------------ run
