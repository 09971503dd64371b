"""Start ``python -m dart_arena`` on the stdlib toy bundle (``--bundle assets/tiny``: fast on a CPU; the app's default
is the SmolLM2 chat bundle) on a free localhost port for the end-to-end tests, wait until it serves, and always stop it.
The server's log goes to a file so a failure can show it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from dart_core.bench.drive import stop_process
from dart_core.racers.registry import model_free_racers

REPO = Path(__file__).resolve().parent.parent
BUNDLE = REPO / "assets" / "tiny"
MAX_NEW_TOKENS = 48
START_TIMEOUT_S = 180


@dataclass
class Server:
    url: str
    log_path: Path
    process: subprocess.Popen[bytes]

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def held_out_prompt(i: int = 5) -> str:
    """One of the bundle's held-out code prompts."""
    return json.loads((BUNDLE / "prompts.jsonl").read_text(encoding="utf-8").splitlines()[i])["prompt"]


def _stop(proc: subprocess.Popen[bytes]) -> None:
    stop_process(proc, timeout=10)


@contextmanager
def running_app(log_dir: Path, *extra: str) -> Iterator[Server]:
    """The app on the toy bundle as a subprocess (its own clean process, as users run it), ready to serve, killed
    afterwards. ``extra`` flags come last, so they win. float32: the tests compare racers' outputs token for
    token (``auto`` is bf16 on a CPU with native bf16, where near-ties may flip; its tie rule is tested on its own).
    The model-free racers are off unless ``extra`` turns them
    on: the API takes the controls by position and these tests pass DART's and EAGLE-3's (the model-free ones race
    in the app in ``test_model_free``)."""
    port = free_port()
    log_path = log_dir / f"app-{port}.log"
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "PYTHONUNBUFFERED": "1"}
    # One thread: the bundle's model is tiny, and on a shared 2-core CI box oversubscribed OpenMP threads can
    # slow every forward down a hundredfold. The tests check behaviour, not speed.
    env.setdefault("OMP_NUM_THREADS", "1")
    cmd = [sys.executable, "-m", "dart_arena", "--bundle", str(BUNDLE), "--server-port", str(port),
           "--dtype", "float32", "--max-new-tokens", str(MAX_NEW_TOKENS),
           *(f"--no-compare-{r.key}" for r in model_free_racers()), *extra]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=log_dir, stdout=log, stderr=subprocess.STDOUT, env=env)
    server = Server(f"http://127.0.0.1:{port}", log_path, proc)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the app exited with code {proc.returncode} before serving:\n{server.log()}")
            try:
                with urllib.request.urlopen(server.url + "/gradio_api/info", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the app did not serve within {START_TIMEOUT_S} s:\n{server.log()}")
            time.sleep(0.5)
        yield server
    finally:
        _stop(proc)


def artifact_dir() -> Path:
    """Where tests leave files for people to look at: $DART_ARTIFACTS, else tests/artifacts/ (git-ignored)."""
    path = Path(os.environ.get("DART_ARTIFACTS") or REPO / "tests" / "artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path
