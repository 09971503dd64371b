"""``dart_core.bundle``: both bundle layouts (``bundle.json`` naming the target, the default SmolLM2 chat bundle;
``target/`` inside, the stdlib toy), the default directory, and the errors for a missing or broken bundle (naming
the path and the command that builds it). Stub files only: no model is loaded."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers_bundle import chat_bundle, toy_bundle

from dart_core import bundle as bundle_mod
from dart_core.bundle import BundleError, build_command, default_bundle_dir, open_bundle

REPO = Path(__file__).resolve().parent.parent


def test_chat_bundle_names_its_target_and_parts(tmp_path: Path) -> None:
    root = chat_bundle(tmp_path / "smollm2")
    b = open_bundle(root)
    assert (b.root, b.target, b.chat, b.name) == (root, "smollm2", True, "smollm2")
    assert b.drafters == {"dart": root / "dart", "eagle3": root / "eagle3", "dflash": root / "dflash",
                          "dflash-tree": root / "dflash"}  # registry order; the two DFlash racers share dflash/
    assert list(b.drafters) == ["dart", "eagle3", "dflash", "dflash-tree"]
    assert (b.drafter("dart"), b.ngram, b.prompts) == (root / "dart", root / "ngram/small.ngram",
                                                       root / "prompts.jsonl")


def test_chat_bundle_without_parts_has_none(tmp_path: Path) -> None:
    b = open_bundle(chat_bundle(tmp_path / "b", meta={"target": "smollm2"}, parts=False))
    assert (b.target, b.chat, b.drafters, b.ngram, b.prompts) == ("smollm2", False, {}, None, None)


def test_toy_layout_has_its_target_inside_and_completion_mode(tmp_path: Path) -> None:
    root = toy_bundle(tmp_path / "tiny")
    b = open_bundle(str(root))
    assert (b.target, b.chat, b.drafters, b.ngram) == (str(root / "target"), False, {"dart": root / "dart"}, None)
    assert b.drafter("eagle3") is None


def test_the_embedded_toy_opens_as_completion_bundle() -> None:
    toy = REPO / "assets" / "tiny"
    if not (toy / "target" / "config.json").is_file():
        pytest.skip("assets/tiny is missing")
    b = open_bundle(toy)
    assert b.target == str(toy / "target") and not b.chat
    assert set(b.drafters) == {"dart", "eagle3"} and None not in (b.ngram, b.prompts)


def test_default_dir_is_assets_smollm2_unless_the_environment_says(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    monkeypatch.delenv("DART_ARENA_BUNDLE", raising=False)
    assert default_bundle_dir() == REPO / "assets" / "smollm2"
    monkeypatch.setenv("DART_ARENA_BUNDLE", str(tmp_path / "mine"))
    assert default_bundle_dir() == tmp_path / "mine"
    chat_bundle(tmp_path / "mine")
    assert open_bundle().root == tmp_path / "mine"


def test_missing_bundle_names_path_and_build_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(BundleError) as e:
        open_bundle(missing)
    assert str(missing) in str(e.value) and f"python -m dart_core.train smollm2 --out {missing}" in str(e.value)
    assert isinstance(e.value, FileNotFoundError)  # callers catching OSError keep working
    monkeypatch.setattr(bundle_mod, "ASSETS", tmp_path)  # the default, not built yet
    monkeypatch.delenv("DART_ARENA_BUNDLE", raising=False)
    with pytest.raises(BundleError, match=re.escape("python -m dart_core.train smollm2 --out assets/smollm2")):
        open_bundle()


def test_missing_toy_names_the_toy_recipe(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match=re.escape("python -m dart_core.train all --out assets/tiny")):
        open_bundle(tmp_path / "tiny")
    assert build_command(tmp_path / "tiny") == "python -m dart_core.train all --out assets/tiny"


def test_incomplete_bundle(tmp_path: Path) -> None:
    root = tmp_path / "half"
    (root / "dart").mkdir(parents=True)
    with pytest.raises(BundleError) as e:
        open_bundle(root)
    text = str(e.value)
    assert str(root) in text and "incomplete" in text and "bundle.json" in text
    assert f"python -m dart_core.train smollm2 --out {root}" in text


@pytest.mark.parametrize(("content", "said"), [
    ("{not json", "is not valid JSON"),
    ('["smollm2"]', 'non-empty "target" string'),
    ('{"mode": "chat"}', 'non-empty "target" string'),
    ('{"target": ""}', 'non-empty "target" string'),
    ('{"target": 3}', 'non-empty "target" string'),
])
def test_bad_bundle_json(tmp_path: Path, content: str, said: str) -> None:
    root = tmp_path / "bad"
    root.mkdir()
    (root / "bundle.json").write_text(content)
    with pytest.raises(BundleError) as e:
        open_bundle(root)
    assert str(root / "bundle.json") in str(e.value) and said in str(e.value)
    assert f"python -m dart_core.train smollm2 --out {root}" in str(e.value)
