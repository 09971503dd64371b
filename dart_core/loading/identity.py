"""What a model reference is, as one string that changes when the model does: the key by which a benchmark run's
figures are matched to the models an app has loaded (``dart_core.race.standings``). Cheap by design (the app
computes it at start-up for a multi-gigabyte target), so no weight is read:

- a packaged model (``smollm2``): its name and the pinned sha256 of its GGUF;
- a path inside a bundle whose ``bundle.json`` records digests (``"files"``, checked when the bundle is opened):
  a sha256 over the recorded digests of its files, the same wherever the bundle lies;
- another local file or directory: a sha256 over its files' relative paths, sizes and modification times (a
  checkpoint retrained and written over the old one gets a new identity; a Hub cache snapshot's files never change);
- anything else, a Hub id: the id, with the commit of its snapshot in the local Hugging Face cache when there is one.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from dart_core.loading.bundle_digests import MANIFEST
from dart_core.loading.hub import looks_local
from dart_core.loading.packaged import packaged_model

# files whose cached snapshot names a Hub repo's commit: a checkpoint's config, else an N-gram repo's tries
_HUB_PROBES = ("config.json", "small.trie", "full.trie")


def model_identity(ref: str | os.PathLike[str] | None) -> str | None:
    """The identity of the model (or N-gram store) ``ref`` names, as described above; None for None."""
    if ref is None:
        return None
    spec = packaged_model(ref)
    if spec is not None:
        return f"packaged:{spec.name}:sha256:{spec.sha256}"
    if looks_local(ref):
        path = Path(ref).expanduser().resolve()
        recorded = _bundle_digests(path)
        if recorded is not None:
            return "sha256:" + _digest(recorded)
        if path.exists():
            return "stat:" + _digest(_stat_lines(path))
        return f"missing:{path}"
    return f"hub:{os.fspath(ref)}" + (f"@{commit}" if (commit := _cached_commit(os.fspath(ref))) else "")


def _digest(lines: list[str]) -> str:
    return hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()


def _bundle_digests(path: Path) -> list[str] | None:
    """``relative path  sha256`` of every file under ``path`` that the nearest enclosing bundle's manifest records,
    or None when no enclosing ``bundle.json`` records any of them."""
    for root in path.parents:
        manifest = root / MANIFEST
        if not manifest.is_file():
            continue
        try:
            files = json.loads(manifest.read_text(encoding="utf-8")).get("files")
        except (OSError, ValueError, AttributeError):
            return None
        if not isinstance(files, dict):
            return None
        rel = path.relative_to(root).as_posix()
        lines = sorted(f"{name[len(rel):].lstrip('/')}  {rec.get('sha256')}" for name, rec in files.items()
                       if isinstance(rec, dict) and (name == rel or name.startswith(rel + "/")))
        return lines or None
    return None


def _stat_lines(path: Path) -> list[str]:
    """``relative path  size  mtime_ns`` of ``path`` (a file) or of every file under it, hidden ones left out."""
    if path.is_file():
        st = path.stat()
        return [f"{path.name}  {st.st_size}  {st.st_mtime_ns}"]
    lines = []
    for p in sorted(path.rglob("*")):
        rel = p.relative_to(path)
        if p.is_file() and not any(part.startswith(".") for part in rel.parts):
            st = p.stat()
            lines.append(f"{rel.as_posix()}  {st.st_size}  {st.st_mtime_ns}")
    return lines


def _cached_commit(repo_id: str) -> str | None:
    """The commit of the repo's snapshot in the local Hugging Face cache (its ``main``), without the network."""
    from huggingface_hub import try_to_load_from_cache

    for name in _HUB_PROBES:
        try:
            found = try_to_load_from_cache(repo_id, name)
        except ValueError:  # not a valid repo id
            return None
        if isinstance(found, str):
            return Path(found).parent.name  # .../snapshots/<commit>/<name>
    return None
