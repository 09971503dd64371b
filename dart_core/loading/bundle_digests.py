"""Each file a bundle's models load from, with its size and sha256, recorded in the bundle's ``bundle.json``
(``"files"``) and checked when the bundle is first opened.

Why: safetensors and the N-gram store carry no checksums, so flipped bits inside a drafter's tensor data loaded and
served (only NaN/Inf weights and a malformed store are refused at load). A digest catches any change. Hashing the
shipped bundles takes a fraction of a second, and a file is hashed once: a file whose size and modification time
match what was verified before (``$DART_ARENA_CACHE/verified-files.json``) is not read again.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dart_core.loading.atomic import atomic_output
from dart_core.loading.verified import read_records, stamp, write_records
from dart_core.loading.wheel_fetch import sha256_file

MANIFEST = "bundle.json"
# what is not a model file: the bundle's own description, its model card, the training logs and recipe
NOT_LOADED = {MANIFEST, "README.md", "recipe.json", "train_log.jsonl"}


class DigestError(ValueError):
    """A bundle file that is missing or is not the file its ``bundle.json`` records (the text names it)."""


def loaded_files(root: Path) -> list[str]:
    """The bundle's files the models are loaded from (relative POSIX paths, sorted): every file but
    :data:`NOT_LOADED` ones and hidden ones."""
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                  if p.is_file() and p.name not in NOT_LOADED
                  and not any(part.startswith(".") for part in p.relative_to(root).parts))


def record_digests(root: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """Write every loaded file's size and sha256 into ``root/bundle.json`` (``"files"``, created with the rest of
    the file kept); run after a bundle is built or changed on purpose. Returns the records."""
    root = Path(root)
    path = root / MANIFEST
    meta: dict[str, Any] = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    files = {rel: {"size": (root / rel).stat().st_size, "sha256": sha256_file(root / rel)}
             for rel in loaded_files(root)}
    meta["files"] = files
    with atomic_output(path) as tmp:
        tmp.write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    return files


def verify_digests(root: str | os.PathLike[str], files: Mapping[str, Any], *, rebuild: str = "") -> int:
    """Check the bundle's files against their recorded size and sha256; a :class:`DigestError` names the first
    file that is missing, has another size, or another digest. Files verified before, unchanged since (same size
    and modification time), are not read again. Returns how many files were hashed now."""
    root = Path(root).resolve()
    cache = read_records()
    hashed = 0
    fix = f"Restore it (`git checkout -- {root.name}/...` in a clone) or rebuild the bundle" + (
        f" with `{rebuild}`" if rebuild else "")
    for rel, want in files.items():
        if not isinstance(want, Mapping) or not isinstance(want.get("sha256"), str):
            raise DigestError(f"{root / MANIFEST}: the record of {rel} has no sha256. {fix}.")
        path = root / rel
        if ".." in Path(rel).parts or not path.is_file():
            raise DigestError(f"{path} is missing (the bundle's {MANIFEST} lists it). {fix}.")
        now = stamp(path)
        if want.get("size") is not None and now[0] != want["size"]:
            raise DigestError(f"{path} has {now[0]:,} bytes, but {MANIFEST} records {want['size']:,}: the file "
                              f"is damaged or was changed. {fix}.")
        key = str(path)
        if cache.get(key) == [*now, want["sha256"]]:
            continue
        digest = sha256_file(path)
        hashed += 1
        if digest != want["sha256"]:
            raise DigestError(f"{path} has sha256 {digest[:16]}…, but {MANIFEST} records {want['sha256'][:16]}…: "
                              f"the file is damaged or was changed. {fix}.")
        cache[key] = [*now, digest]
    if hashed:
        write_records(cache)
    return hashed
