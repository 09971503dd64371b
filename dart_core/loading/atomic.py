"""Writing a file so that concurrent writers and readers never see each other's partial work."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_output(out: str | os.PathLike[str], mode: int = 0o644) -> Iterator[Path]:
    """A fresh, uniquely named file next to ``out`` to write into, renamed onto ``out`` (``os.replace``, atomic
    on one file system) when the block succeeds and removed when it fails. Two writers of one output (two
    processes converting one ``.trie`` into a shared cache) used to share ``out.tmp``: the first rename took the
    other's file away ("No such file or directory"). Now each has its own, the last rename wins, and a reader
    never sees a partial file."""
    out = Path(out)
    fd, name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        os.chmod(tmp, mode)  # mkstemp's 0600 would make a shared cache unreadable to other users
        yield tmp
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
