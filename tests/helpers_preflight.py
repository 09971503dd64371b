"""The launch check's test tools (tests/test_preflight*.py): the flags of launch/qwen3_8b_app.sh, an offline Hub
cache of its four repos at tiny shapes, a guard that fails a test when anything loads a model, and main()'s
report read back. Its fixtures are offered to every test module by tests/conftest.py."""

from __future__ import annotations

import re
import shutil
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from helpers_hub import QWEN3_8B, published_cache

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "launch" / "qwen3_8b_app.sh"


def launch_args(*extra: str, port: int | None = None) -> list[str]:
    """The flags of launch/qwen3_8b_app.sh (on the CPU unless ``extra`` says otherwise), ``extra`` last."""
    return ["--base-model-name-or-path", QWEN3_8B["target"], "--dart-model-name-or-path", QWEN3_8B["dart"],
            "--ngram-model-name-or-path", QWEN3_8B["ngram"], "--use-small-ngram", "--compare-eagle3",
            "--eagle3-model-name-or-path", QWEN3_8B["eagle3"], "--compare-dflash", "--dflash-model-name-or-path",
            QWEN3_8B["dflash"], "--compare-dflash-tree", "--dflash-tree-model-name-or-path", QWEN3_8B["dflash"],
            "--template-name", "qwen", "--device", "cpu",
            "--max-length", "4096", "--server-port", str(port or free_port()), *extra]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def fresh_log_handler(monkeypatch: pytest.MonkeyPatch) -> None:
    """main() sets up the app's log handler on the stderr of its time: give each test its own (capsys's)."""
    import logging

    monkeypatch.setattr(logging.getLogger("dart_arena"), "handlers", [])


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One offline cache with the four repos of launch/qwen3_8b_app.sh at tiny shapes (copied per test)."""
    return published_cache(tmp_path_factory.mktemp("published") / "hub")


@pytest.fixture
def hub(published: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's own copy of the published cache, offline, as the HF cache of this process."""
    cache = tmp_path / "hub"
    shutil.copytree(published, cache)
    use_cache(monkeypatch, cache, offline=True)
    return cache


def use_cache(monkeypatch: pytest.MonkeyPatch, cache: Path, *, offline: bool) -> None:
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", offline)
    if offline:
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    else:
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)


@pytest.fixture
def no_loading(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every way to load a model fails the test: the engine process, load_arena / load_target, transformers'
    from_pretrained, safetensors' readers and torch.load. Returns the calls (there must be none)."""
    import safetensors
    import safetensors.torch
    import torch
    import transformers

    import dart_arena.model_client
    import dart_core.arena

    calls: list[str] = []

    def refuse(name: str) -> Any:
        def fail(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            raise AssertionError(f"{name} was called: the check must come before any weight loads")
        return fail

    monkeypatch.setattr(dart_arena.model_client, "ProcessEngine", refuse("ProcessEngine"))
    monkeypatch.setattr(dart_core.arena, "load_arena", refuse("load_arena"))
    monkeypatch.setattr(dart_core.arena, "load_target", refuse("load_target"))
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", refuse("from_pretrained"))
    monkeypatch.setattr(safetensors, "safe_open", refuse("safe_open"))
    monkeypatch.setattr(safetensors.torch, "load_file", refuse("load_file"))
    monkeypatch.setattr(torch, "load", refuse("torch.load"))
    return calls


def run_main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str, float]:
    from dart_arena.__main__ import main

    t0 = time.perf_counter()
    code = main(argv)
    seconds = time.perf_counter() - t0
    out, err = capsys.readouterr()
    return code, out, err, seconds


def problems(err: str) -> list[str]:
    """The numbered problems of an error report, each with its fix lines."""
    return re.split(r"\n  \d+\. ", err.split("nothing was loaded:", 1)[1])[1:] if "nothing was loaded" in err else []
