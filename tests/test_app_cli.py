"""``python -m dart_arena``'s flags without loading a model: which target, drafters and N-gram store ``resolve`` picks
from the bundle (``--bundle``, ``$DART_ARENA_BUNDLE``, the default SmolLM2 chat bundle), the error for a missing
one, the example prompts shown on the page, and the flags the Hugging Face Spaces entry point (the root's
``app.py``, run as ``python app.py``) hands to the package."""

from __future__ import annotations

import argparse
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
from helpers_app import BUNDLE, free_port
from helpers_bundle import chat_bundle

import dart_arena.__main__
from dart_arena.__main__ import CHAT_EXAMPLES, build_parser, bundle_examples, resolve, short
from dart_core.bundle import open_bundle

REPO = Path(__file__).resolve().parent.parent
SPACES_LIMITS = ["--max-new-tokens-limit", "2048", "--race-time-limit", "180", "--max-queue", "32"]


def args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def test_default_is_the_environment_bundle_with_every_part(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    root = chat_bundle(tmp_path / "smollm2")
    monkeypatch.setenv("DART_ARENA_BUNDLE", str(root))
    src = resolve(args())
    dr = src["drafters"]
    assert src["base"] == "smollm2"  # the packaged model's name: converted into the cache at load time
    assert (dr["dart"], dr["eagle3"], src["ngram"]) == (str(root / "dart"), str(root / "eagle3"),
                                                          str(root / "ngram/small.ngram"))
    assert dr["dflash"] == dr["dflash-tree"] == str(root / "dflash")  # the bundle's one DFlash checkpoint
    assert src["bundle"].chat and src["bundle"].root == root
    src = resolve(args("--no-compare-dflash-tree"))
    assert src["drafters"]["dflash"] == str(root / "dflash") and src["drafters"]["dflash-tree"] is None


def test_bundle_flag_wins_over_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DART_ARENA_BUNDLE", str(tmp_path / "missing"))
    root = chat_bundle(tmp_path / "other")
    src = resolve(args("--bundle", str(root), "--no-compare-eagle3", "--ngram-model-name-or-path", "my.ngram"))
    dr = src["drafters"]
    assert (src["base"], dr["dart"], dr["eagle3"], src["ngram"]) == ("smollm2", str(root / "dart"), None, "my.ngram")


def test_a_bundle_without_eagle3_has_no_eagle3_column(tmp_path: Path) -> None:
    root = chat_bundle(tmp_path / "b", meta={"target": "smollm2", "mode": "chat"}, parts=False)
    src = resolve(args("--bundle", str(root)))
    dr = src["drafters"]
    assert (src["base"], dr["dart"], dr["eagle3"], src["ngram"]) == ("smollm2", None, None, None)
    with pytest.raises(SystemExit, match="has no eagle3/"):
        resolve(args("--bundle", str(root), "--compare-eagle3"))
    with pytest.raises(SystemExit, match="has no dflash/"):
        resolve(args("--bundle", str(root), "--compare-dflash-tree"))


def test_toy_bundle(monkeypatch: pytest.MonkeyPatch) -> None:
    if not (BUNDLE / "target" / "config.json").is_file():
        pytest.skip("assets/tiny is missing")
    monkeypatch.delenv("DART_ARENA_BUNDLE", raising=False)
    src = resolve(args("--bundle", str(BUNDLE)))
    dr = src["drafters"]
    assert (src["base"], dr["dart"], dr["eagle3"], src["ngram"]) == (
        str(BUNDLE / "target"), str(BUNDLE / "dart"), str(BUNDLE / "eagle3"), str(BUNDLE / "ngram/small.ngram"))
    assert not src["bundle"].chat
    assert short(src["base"]) == "assets/tiny/target"


def test_an_explicit_target_uses_no_bundle(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DART_ARENA_BUNDLE", str(tmp_path / "missing"))  # not even opened
    src = resolve(args("--base-model-name-or-path", "Qwen/Qwen3-8B", "--dart-model-name-or-path", "d"))
    dr = src["drafters"]
    assert (src["base"], dr["dart"], dr["eagle3"], src["ngram"], src["bundle"]) == ("Qwen/Qwen3-8B", "d", None,
                                                                                      None, None)
    with pytest.raises(SystemExit, match="needs --eagle3-model-name-or-path"):
        resolve(args("--base-model-name-or-path", "Qwen/Qwen3-8B", "--compare-eagle3"))


@pytest.mark.parametrize("make", ["missing", "incomplete"])
def test_missing_bundle_exits_with_path_and_build_command(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                          make: str) -> None:
    root = tmp_path / "smollm2-copy"
    if make == "incomplete":
        (root / "dart").mkdir(parents=True)
    monkeypatch.setenv("DART_ARENA_BUNDLE", str(root))
    with pytest.raises(SystemExit) as e:
        resolve(args())
    text = str(e.value.code)
    assert text.startswith("error: ") and str(root) in text
    assert f"python -m dart_core.train smollm2 --out {root}" in text and "--bundle assets/tiny" in text


def test_main_reports_a_missing_bundle_without_a_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dart_arena.__main__ import main

    assert main(["--bundle", str(tmp_path / "nope")]) == 2  # the launch path's exit code for every error
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "model bundle not found" in err and "Traceback" not in err


def test_examples_of_a_chat_bundle_are_labelled_by_category(tmp_path: Path) -> None:
    b = open_bundle(chat_bundle(tmp_path / "b"))
    examples = bundle_examples(b, limit=2)  # one per category first
    assert [p for _, p in examples] == ["Write a short story about hydroelectric dams.",
                                        "Explain ocean currents in simple terms."]
    assert examples[1][0] == "stem: Explain ocean currents in simple terms."
    assert examples[0][0].startswith("writing: Write a short story")
    assert [p for _, p in bundle_examples(b, limit=4)][2] == \
        "Write a formal letter to a newspaper editor about utilitarianism."
    long = bundle_examples(b, limit=3)[2][0]
    assert len(long) <= len("writing: ") + 48 and long.endswith("…")


def test_examples_of_the_toy_keep_their_source_labels() -> None:
    if not (BUNDLE / "prompts.jsonl").is_file():
        pytest.skip("assets/tiny is missing")
    examples = bundle_examples(open_bundle(BUNDLE))
    assert len(examples) == 4 and examples[0][0] == "bz2.py #0" and examples[0][1].startswith("\n    bz_mode")
    assert CHAT_EXAMPLES  # the examples with --base-model-name-or-path and a chat model


def test_the_page_header_says_the_default_target_is_dequantized_from_q4_1() -> None:
    from dart_arena.__main__ import origin

    text = origin("smollm2")
    assert "dequantized from the Q4_1 GGUF" in text and "differ slightly from the original bf16 weights" in text
    assert origin(str(BUNDLE / "target")) == "" and origin(None) == ""


@pytest.mark.parametrize(("app_args", "port", "expected"), [
    (None, None, [*SPACES_LIMITS, "--listen", "--server-port", "7860"]),
    ("--bundle assets/tiny --max-queue 4 --template-name 'raw'", "7861",
     [*SPACES_LIMITS, "--bundle", "assets/tiny", "--max-queue", "4", "--template-name", "raw", "--listen",
      "--server-port", "7861"]),
])
def test_the_spaces_entry_point_hands_the_package_a_public_hosts_flags(
        monkeypatch: pytest.MonkeyPatch, app_args: str | None, port: str | None, expected: list[str]) -> None:
    """``app.py`` run as a Space runs it (as ``__main__``): it calls ``dart_arena.__main__.main`` with the public
    limits first, then ``$DART_APP_ARGS`` (so they can change them), then ``--listen --server-port $PORT``."""
    calls: list[list[str] | None] = []

    def main(argv: list[str] | None = None) -> int:
        calls.append(argv)
        return 3

    monkeypatch.setattr(dart_arena.__main__, "main", main)
    for name, value in (("DART_APP_ARGS", app_args), ("PORT", port)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    monkeypatch.setenv("GRADIO_ANALYTICS_ENABLED", "False")  # app.py sets it when unset: restored after the test
    with pytest.raises(SystemExit) as ended:
        runpy.run_path(str(REPO / "app.py"), run_name="__main__")
    assert ended.value.code == 3  # main's return value is the exit status
    assert calls == [expected]
    parsed = build_parser().parse_args(expected)  # flags the package's parser takes; the Space's own win
    assert parsed.listen and parsed.max_new_tokens_limit == 2048 and parsed.race_time_limit == 180
    assert parsed.max_queue == (4 if app_args else 32) and parsed.server_port == int(port or 7860)


def test_python_app_py_checks_the_launch_as_a_space_would(tmp_path: Path) -> None:
    """``python app.py`` from the repository root, as a Space runs it, with ``--check`` (no model is loaded): the
    root file and the ``dart_arena`` package both load, and the plan names the Space's port."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DART_ARENA_BUNDLE")}
    env.update(DART_APP_ARGS=f"--bundle {BUNDLE} --check", PORT=str(port), DART_ARENA_CACHE=str(tmp_path / "cache"))
    res = subprocess.run([sys.executable, "app.py"], cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"0.0.0.0:{port}" in res.stdout + res.stderr and "Traceback" not in res.stderr
