"""``python -m app``'s flags without loading a model: which target, drafters and N-gram store ``resolve`` picks
from the bundle (``--bundle``, ``$DART_ARENA_BUNDLE``, the default SmolLM2 chat bundle), the error for a missing
one, and the example prompts shown on the page."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from helpers_app import BUNDLE
from helpers_bundle import chat_bundle

from app.__main__ import CHAT_EXAMPLES, build_parser, bundle_examples, resolve, short
from dart_core.bundle import open_bundle


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
    from app.__main__ import main

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
    from app.__main__ import origin

    text = origin("smollm2")
    assert "dequantized from the Q4_1 GGUF" in text and "differ slightly from the original bf16 weights" in text
    assert origin(str(BUNDLE / "target")) == "" and origin(None) == ""
