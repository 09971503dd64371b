"""N-gram store: the Python face of the native, memory-mapped N-gram counts.

A store answers ``probability(context, tokens)`` exactly as ``docs/formats.md`` defines it. It is built from
token sequences, saved in our compact format (``native/README.md``) and memory-mapped on load; a reference
``.trie`` file is converted once (streaming, bounded memory) into a cached file of our format.
"""

from __future__ import annotations

import hashlib
import mmap
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from dart_core import _native
from dart_core.loading.atomic import atomic_output
from dart_core.loading.errors import LoadError, register_user_error
from dart_core.loading.hub import cache_root

NgramFormatError = _native.NgramFormatError
register_user_error(NgramFormatError)  # its messages name the file and the problem


class NgramFileError(LoadError, NgramFormatError):
    """A file that is not a readable N-gram store, named: a LoadError like every load failure, and still an
    NgramFormatError for callers that catch that."""

DEFAULT_CONVERT_MEMORY = 512 << 20


def as_token_array(values: Any, what: str = "tokens") -> np.ndarray:
    """Validate a 1-D sequence of token ids and return it as contiguous int32 (no silent wrap-around).

    The checks live in C++ (``native/python/token_ids.hpp``) so that ``probability``, ``count`` and the builder
    apply the very same rules without a Python round trip: ValueError for a non-1-D input, non-integer ids or
    ids outside int32 (naming the first bad one)."""
    return _native.as_token_array(values, what)


def default_cache_dir() -> Path:
    """Where converted ``.trie`` files are kept: ``$DART_ARENA_CACHE/ngram`` (default ``~/.cache/dart_arena/ngram``)."""
    return cache_root() / "ngram"


class NgramStore:
    """Read-only N-gram counts over a buffer in our format (a memory map, or bytes built in memory)."""

    def __init__(self, buffer: Any, *, path: Path | None = None, _mmap: mmap.mmap | None = None) -> None:
        self._view = _native.StoreView(buffer)
        self._buffer = buffer
        self._mmap = _mmap
        self.path = path

    # ----------------------------------------------------------------- creation
    @classmethod
    def build(cls, sequences: Iterable[Any], order: int = 3, *, min_count: int = 1,
              progress: bool = False) -> NgramStore:
        """Count every n-gram (n ≤ order) of the given token sequences; each sequence is counted on its own.
        ``min_count > 1`` drops n-grams of length ≥ 2 seen fewer times (smaller store; they read as unseen)."""
        builder = _fill_builder(sequences, order, progress, min_count)
        return cls(builder.to_blob())

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        *,
        verify: bool = False,
        cache_dir: str | os.PathLike[str] | None = None,
        tmp_dir: str | os.PathLike[str] | None = None,
        memory_budget: int = DEFAULT_CONVERT_MEMORY,
        progress: bool = True,
    ) -> NgramStore:
        """Open a store file: our format is memory-mapped as is; a reference ``.trie`` is converted once into
        ``cache_dir`` (default :func:`default_cache_dir`) and the converted file is mapped. ``verify=True`` also
        checks every byte (checksums and structure), which reads the whole file."""
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"N-gram store not found: {p}")
        with open(p, "rb") as f:
            head = f.read(8)
        if not _native.has_store_magic(head):
            try:
                p = convert_trie_cached(p, cache_dir=cache_dir, tmp_dir=tmp_dir, memory_budget=memory_budget,
                                        progress=progress)
            except NgramFormatError as e:  # most likely not a .trie at all: say what the file is not, first
                why = str(e.problem if isinstance(e, LoadError) else e)
                raise NgramFileError(p, "neither a DART N-gram store (no magic bytes) nor a valid reference .trie "
                                        f"(read as a .trie: {why})") from None
        store = cls._map(p)
        if verify:
            store.verify()
        return store

    @classmethod
    def _map(cls, path: Path) -> NgramStore:
        size = path.stat().st_size
        if size == 0:
            raise NgramFileError(path, "empty file is not an N-gram store")
        with open(path, "rb") as f:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            return cls(mm, path=path, _mmap=mm)
        except NgramFormatError as e:
            mm.close()
            raise NgramFileError(path, str(e)) from None

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the store in our format (atomically: a temporary file renamed into place)."""
        out = Path(path)
        with atomic_output(out) as tmp, open(tmp, "wb") as f:
            f.write(memoryview(self._buffer))
        return out

    def close(self) -> None:
        """Release the memory map (the store is unusable afterwards)."""
        self._view = None
        self._buffer = None
        if self._mmap is not None:
            self._mmap.close()
            self._mmap = None

    # ------------------------------------------------------------------ queries
    @property
    def order(self) -> int:
        return self._view.order

    @property
    def num_nodes(self) -> int:
        """Trie nodes, root included (the count the reference format and its paper figures use)."""
        return self._view.num_nodes

    @property
    def num_tokens(self) -> int:
        """Tokens counted (the root's count)."""
        return self._view.root_count

    @property
    def vocab_size(self) -> int:
        return self._view.vocab_size

    @property
    def file_size(self) -> int:
        return self._view.file_size

    @property
    def level_sizes(self) -> list[int]:
        return list(self._view.level_sizes)

    @property
    def native(self) -> Any:
        """The native view, for the tree search."""
        return self._view

    def probability(self, context: Any, tokens: Any) -> tuple[np.ndarray, np.ndarray]:
        """For each candidate token: (float32 probability, matched context length) per ``docs/formats.md``.

        ``context`` and ``tokens`` are 1-D sequences of int32 token ids (lists or integer arrays); they are
        validated in the native binding, as :func:`as_token_array` does, because this sits on the decoding path."""
        return self._view.probability(context, tokens)

    def continuations(self, context: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The at most ``k`` most frequent tokens that followed the longest suffix of ``context`` (up to
        ``order - 1`` tokens, at least one) the store has continuations for, by count descending (ties: smaller
        id first), with their probabilities as :meth:`probability` gives them (int32 ids, float32); empty when
        no suffix was ever continued. What a drafter without a model proposes from (the N-gram-only racer)."""
        return self._view.continuations(context, k)

    def count(self, ngram: Any) -> int:
        """How many inserted slices start with this token string (0 if never counted; ``[]`` = the root)."""
        return self._view.count(ngram)

    def verify(self) -> None:
        """Check checksums and every structural invariant; raises NgramFormatError naming the problem."""
        try:
            self._view.verify()
        except NgramFormatError as e:
            if self.path is None:
                raise
            raise NgramFileError(self.path, str(e)) from None

    def info(self) -> dict[str, Any]:
        """Sizes and layout, for ``python -m dart_core.ngram info`` and the benchmark."""
        nodes = self.num_nodes
        return {
            "path": str(self.path) if self.path else None,
            "order": self.order,
            "num_nodes": nodes,
            "num_tokens": self.num_tokens,
            "vocab_size": self.vocab_size,
            "level_sizes": self.level_sizes,
            "file_bytes": self.file_size,
            "bytes_per_node": self.file_size / max(nodes, 1),
            **self._view.layout,
        }

    def __repr__(self) -> str:
        return f"NgramStore(order={self.order}, nodes={self.num_nodes}, bytes={self.file_size}, path={self.path})"


def _fill_builder(sequences: Iterable[Any], order: int, progress: bool, min_count: int = 1) -> Any:
    if not isinstance(order, int) or not 1 <= order <= 8:
        raise ValueError(f"order must be an integer in 1..8, got {order!r}")
    if not isinstance(min_count, int) or min_count < 1:
        raise ValueError(f"min_count must be an integer >= 1, got {min_count!r}")
    builder = _native.NgramBuilder(order, min_count)
    if progress:
        from tqdm.auto import tqdm

        sequences = tqdm(sequences, desc="counting", unit="seq")
    for i, seq in enumerate(sequences):
        builder.add(seq, f"sequence {i}")
    return builder


def build_to_file(sequences: Iterable[Any], path: str | os.PathLike[str], order: int = 3, *,
                  min_count: int = 1, progress: bool = False) -> Path:
    """Build a store straight into a file (no second copy in memory); ``min_count`` as in ``build``."""
    builder = _fill_builder(sequences, order, progress, min_count)
    out = Path(path)
    with atomic_output(out) as tmp:
        builder.write_file(str(tmp))
    return out


def convert_trie(
    trie_path: str | os.PathLike[str],
    out_path: str | os.PathLike[str],
    *,
    tmp_dir: str | os.PathLike[str] | None = None,
    memory_budget: int = DEFAULT_CONVERT_MEMORY,
    progress: bool = True,
) -> dict[str, int]:
    """Stream a reference ``.trie`` into our format with bounded memory; every field is validated."""
    src = Path(trie_path)
    if not src.is_file():
        raise FileNotFoundError(f"reference .trie not found: {src}")
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    bar = None
    callback = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=src.stat().st_size, unit="B", unit_scale=True, desc=f"converting {src.name}")

        def callback(done: int, total: int, phase: str) -> None:
            bar.total = total
            bar.set_postfix_str(phase, refresh=False)
            bar.n = done
            bar.refresh()

    try:
        with atomic_output(out) as tmp:
            stats = _native.convert_trie(str(src), str(tmp), str(tmp_dir or ""), int(memory_budget), callback)
    except NgramFormatError as e:
        raise NgramFileError(src, str(e)) from None
    finally:
        if bar is not None:
            bar.close()
    return stats


def convert_trie_cached(
    trie_path: Path,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    tmp_dir: str | os.PathLike[str] | None = None,
    memory_budget: int = DEFAULT_CONVERT_MEMORY,
    progress: bool = True,
) -> Path:
    """Path of ``trie_path`` converted to our format, converting only when no cached copy matches it."""
    st = trie_path.stat()
    key = hashlib.sha256(f"{trie_path.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:20]
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    out = cache / f"{trie_path.stem}-{key}.ngram"
    if not out.exists():
        convert_trie(trie_path, out, tmp_dir=tmp_dir, memory_budget=memory_budget, progress=progress)
    return out

