"""Soak: does the app's memory stay flat over many visitors?

Starts ``python -m dart_arena`` (its helpers from ``python -m dart_core.bench app``) and runs ``--races`` short greedy
races through its ``/race`` endpoint, each from a fresh session (a new ``gradio_client`` Client, closed after its
race), as that many visitors would. Every ``--every`` races (and after race 0, 50 and the last) it reads the
resident memory (VmRSS in /proc/<pid>/status) of the web server and of its engine process (the server's child
that holds the model), and prints them, separately and summed, against the races run. The verdict line checks the
target of a server meant for weeks of uptime: RSS after the last race (race 300 by default) at most 25 MB above
RSS after race 50, once the per-visitor state has reached its cap. Linux only (/proc).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dart_core.bench.drive import app_process, free_port
from dart_core.bench.e2e import BenchError, reported

TARGET_MB = 25.0  # RSS after the last race at most this many MB (10^6 bytes) above RSS after race BASE_RACE
BASE_RACE = 50
FALLBACK_PROMPT = "def fibonacci(n):\n"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bundle", type=Path, default=None,
                   help="bundle the app serves (default: the app's default bundle; assets/tiny: fast)")
    p.add_argument("--races", type=int, default=300, help="races, each from a new session (default 300)")
    p.add_argument("--max-new-tokens", type=int, default=16, help="new tokens per race (default 16)")
    p.add_argument("--every", type=int, default=25, help="read the memory every N races (default 25)")
    p.add_argument("--app-args", default="", metavar="ARGS",
                   help="more flags for python -m dart_arena, one string (e.g. \"--max-sessions 64\")")
    p.add_argument("--port", type=int, default=0, help="the app's port (default: a free one)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds one race may take (default 300)")
    p.add_argument("--out", type=Path, default=None,
                   help="dir for soak.json and the app's log (default .bench/soak-<timestamp>/)")


# ------------------------------------------------------------------------------------------------ memory
def vmrss_bytes(status: str) -> int:
    """The VmRSS line of a /proc/<pid>/status text, in bytes (the kernel writes it in kB = KiB)."""
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            value, unit = line.split()[1:3]
            if unit.lower() != "kb":
                raise ValueError(f"unexpected VmRSS unit {unit!r}")
            return int(value) * 1024
    raise ValueError("no VmRSS line (a zombie or kernel thread?)")


def rss(pid: int) -> int:
    """Resident memory of ``pid`` in bytes (0 if it is gone)."""
    try:
        return vmrss_bytes(Path(f"/proc/{pid}/status").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return 0


def parent_pid(stat: str) -> int:
    """The parent pid from a /proc/<pid>/stat text (the name in parentheses may hold spaces)."""
    return int(stat[stat.rindex(")") + 2:].split()[1])


def engine_pids(server: int) -> list[int]:
    """The server's child processes but multiprocessing's resource tracker: the engine that holds the model."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if parent_pid((d / "stat").read_text(encoding="utf-8")) != server:
                continue
            cmdline = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
        if "resource_tracker" not in cmdline:
            out.append(int(d.name))
    return sorted(out)


@dataclass
class Sample:
    """The app's memory after ``races`` races, in bytes."""

    races: int
    server: int
    engine: int

    @property
    def total(self) -> int:
        return self.server + self.engine


def sample(races: int, server: int) -> Sample:
    return Sample(races, rss(server), sum(rss(p) for p in engine_pids(server)))


def sample_points(races: int, every: int) -> list[int]:
    """After which races to read the memory: 0, every ``every``, the base race of the verdict and the last."""
    points = set(range(0, races + 1, max(every, 1))) | {0, races}
    if races >= BASE_RACE:
        points.add(BASE_RACE)
    return sorted(points)


def verdict(samples: list[Sample], target_mb: float = TARGET_MB) -> tuple[bool | None, str]:
    """Is the summed RSS after the last race at most ``target_mb`` MB above that after race 50? (None: too few
    races to say.)"""
    base = next((s for s in samples if s.races == BASE_RACE), None)
    last = samples[-1] if samples else None
    if base is None or last is None or last.races <= BASE_RACE:
        return None, f"no verdict: the target compares race {BASE_RACE} with a later race (run more races)"
    grew = (last.total - base.total) / 1e6
    ok = grew <= target_mb
    return ok, (f"{'PASS' if ok else 'FAIL'}: RSS after race {last.races} is {grew:+.1f} MB from race {BASE_RACE} "
                f"(server {(last.server - base.server) / 1e6:+.1f}, engine {(last.engine - base.engine) / 1e6:+.1f}); "
                f"target: at most +{target_mb:g} MB")


def print_table(samples: list[Sample]) -> None:
    mib = 1024 * 1024
    print(f"\n{'races':>6} {'server MiB':>11} {'engine MiB':>11} {'total MiB':>10} {'vs race 0':>10}")
    for s in samples:
        print(f"{s.races:>6} {s.server / mib:>11.1f} {s.engine / mib:>11.1f} {s.total / mib:>10.1f} "
              f"{(s.total - samples[0].total) / mib:>+10.1f}")


# ------------------------------------------------------------------------------------------------ run
def prompts_of(bundle: Path | None) -> list[str]:
    """The bundle's held-out prompts (races cycle through them)."""
    from dart_core.bundle import BundleError, open_bundle

    try:
        b = open_bundle(bundle)
    except BundleError as e:
        raise BenchError(str(e)) from None
    if b.prompts is None:
        return [FALLBACK_PROMPT]
    lines = b.prompts.read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["prompt"] for line in lines if line.strip()] or [FALLBACK_PROMPT]


def race_once(url: str, prompt: str, max_new_tokens: int, timeout: float) -> dict[str, Any]:
    """One race from a new session (a new Client, closed afterwards); its "Run data" JSON."""
    from gradio_client import Client

    client = Client(url, verbose=False, download_files=False)
    try:
        params = client.view_api(print_info=False, return_format="dict")["named_endpoints"]["/race"]["parameters"]
        by_label = {p.get("label"): p["parameter_name"] for p in params}
        kwargs = {params[0]["parameter_name"]: prompt, by_label["Temperature"]: 0.0,
                  by_label["Max new tokens"]: max_new_tokens}
        out = client.submit(api_name="/race", **kwargs).result(timeout=timeout)
    finally:
        client.close()
    result = out[-1] if isinstance(out, (list, tuple)) else None
    if not isinstance(result, dict) or "methods" not in result:
        raise BenchError(f"the race of {prompt[:40]!r} gave no result: {str(out)[:300]}")
    return result


def run(args: argparse.Namespace) -> int:
    return reported(_run, args)


def _run(args: argparse.Namespace) -> int:
    if args.races < 1 or args.every < 1 or args.max_new_tokens < 1:
        raise BenchError("--races, --every and --max-new-tokens must be at least 1")
    if not Path("/proc/self/status").is_file():
        raise BenchError("the soak benchmark reads /proc (Linux only)")
    prompts = prompts_of(args.bundle)
    out = args.out or Path(".bench") / f"soak-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    port = args.port or free_port()
    cmd = [sys.executable, "-m", "dart_arena", "--server-port", str(port), "--max-new-tokens", str(args.max_new_tokens)]
    cmd += ["--bundle", str(args.bundle)] if args.bundle is not None else []
    cmd += shlex.split(args.app_args)
    print(f"starting the app: {' '.join(cmd)}")
    points = sample_points(args.races, args.every)
    samples: list[Sample] = []
    not_greedy = 0
    started = time.perf_counter()
    with app_process(cmd, port, out / "app.log") as (url, proc):
        samples.append(sample(0, proc.pid))
        for i in range(1, args.races + 1):
            result = race_once(url, prompts[(i - 1) % len(prompts)], args.max_new_tokens, args.timeout)
            matches = result.get("greedy_matches_ar")
            not_greedy += matches is not None and not all(matches.values())
            if proc.poll() is not None:
                raise BenchError(f"the app exited with code {proc.returncode} after race {i} ({out / 'app.log'})")
            if i in points:
                time.sleep(0.2)  # let the server finish the event (its last update, the session's bookkeeping)
                samples.append(sample(i, proc.pid))
                s = samples[-1]
                print(f"race {i}: server {s.server / 2**20:.1f} MiB, engine {s.engine / 2**20:.1f} MiB", flush=True)
    wall = time.perf_counter() - started
    print_table(samples)
    ok, line = verdict(samples)
    print(line)
    if not_greedy:
        print(f"WARNING: {not_greedy} greedy race(s) where a method's output differed from AR's")
    report = {"config": {"bundle": str(args.bundle) if args.bundle else None, "races": args.races,
                         "max_new_tokens": args.max_new_tokens, "every": args.every, "app_args": args.app_args,
                         "command": cmd},
              "wall_s": wall, "samples": [{**asdict(s), "total": s.total} for s in samples],
              "target_mb": TARGET_MB, "base_race": BASE_RACE, "pass": ok, "verdict": line,
              "greedy_mismatches": not_greedy}
    (out / "soak.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    print(f"{args.races} races in {wall:.0f} s; wrote {out / 'soak.json'}")
    return 0 if ok is not False else 1
