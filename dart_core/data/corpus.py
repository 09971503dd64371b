"""An offline corpus everyone has: the Python standard library sources of the running interpreter.

Used by the native benchmark (with a deterministic regex tokenizer, no training needed) and by the recipes that
train the embedded model bundle.
"""

from __future__ import annotations

import re
import sys
import sysconfig
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import numpy as np

# Identifiers, numbers, a newline with its indentation, other whitespace runs, any single other character.
_PIECE = re.compile(r"[A-Za-z_][A-Za-z_0-9]*|\d+|\n[ \t]*|[ \t]+|[^\sA-Za-z_0-9]")


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def python_version() -> str:
    return ".".join(map(str, sys.version_info[:3]))


def stdlib_files(root: Path | None = None) -> list[Path]:
    """Every ``.py`` file of the standard library (not site-packages, not the platform-generated sysconfig
    data), sorted by relative path."""
    root = root or stdlib_root()
    return sorted(
        (
            p
            for p in root.rglob("*.py")
            if "site-packages" not in p.parts
            and "__pycache__" not in p.parts
            and not p.name.startswith("_sysconfigdata")  # generated per platform: not the same everywhere
        ),
        key=lambda p: p.relative_to(root).as_posix(),
    )


def read_texts(files: Iterable[Path]) -> list[str]:
    return [p.read_text(encoding="utf-8", errors="replace") for p in files]


class RegexTokenizer:
    """Deterministic word-level tokenizer: pieces from a regex, ids by descending frequency (ties by text).

    Good enough to give an N-gram store a realistic large vocabulary (the stdlib has ~120 k distinct pieces,
    close to Qwen3's 151 k) without training anything. Unknown pieces map to ``unk_id``.
    """

    def __init__(self, vocab: list[str]) -> None:
        self.vocab = vocab
        self.ids = {piece: i for i, piece in enumerate(vocab)}
        self.unk_id = len(vocab)
        self.eos_id = len(vocab) + 1

    @classmethod
    def fit(cls, texts: Iterable[str]) -> RegexTokenizer:
        counts: Counter[str] = Counter()
        for t in texts:
            counts.update(_PIECE.findall(t))
        return cls(sorted(counts, key=lambda p: (-counts[p], p)))

    @property
    def vocab_size(self) -> int:
        return len(self.vocab) + 2

    def encode(self, text: str, *, eos: bool = True) -> np.ndarray:
        ids = [self.ids.get(p, self.unk_id) for p in _PIECE.findall(text)]
        if eos:
            ids.append(self.eos_id)
        return np.asarray(ids, dtype=np.int32)


HELDOUT_PERCENT = 5


def module_key(path: Path, root: Path | None = None) -> str:
    """The top-level module a stdlib file belongs to (``json/decoder.py`` → ``json``; ``os.py`` → ``os``)."""
    rel = path.relative_to(root or stdlib_root()).as_posix()
    top = rel.split("/", 1)[0]
    return top[:-3] if top.endswith(".py") else top


def is_heldout(module: str) -> bool:
    """Deterministic, interpreter-independent split by top-level module (a stable hash, not Python's ``hash``):
    about ``HELDOUT_PERCENT`` % of modules are held out, whole packages at a time, so no file of a held-out
    module is trained on."""
    import hashlib

    return int(hashlib.sha256(module.encode()).hexdigest()[:8], 16) % 100 < HELDOUT_PERCENT


def split_stdlib(root: Path | None = None) -> tuple[list[Path], list[Path]]:
    """(train files, held-out files) of the standard library, each sorted by relative path."""
    root = root or stdlib_root()
    train, heldout = [], []
    for p in stdlib_files(root):
        (heldout if is_heldout(module_key(p, root)) else train).append(p)
    return train, heldout
