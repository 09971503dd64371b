"""Repo id or local directory → local files, through ``huggingface_hub`` (its cache, ``HF_HUB_OFFLINE``,
revisions), with errors that say which id/file is missing and how to provide it.

Also reads single tensors (a target's token embedding, which the drafters share) from any checkpoint layout:
sharded or unsharded safetensors, or ``pytorch_model.bin`` loaded with ``weights_only=True`` — never a pickle.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from huggingface_hub import constants, hf_hub_download
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HFValidationError,
    LocalEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from dart_core.loading.errors import UserError
from dart_core.loading.layouts import SAFE_SINGLE, WEIGHT_LAYOUTS


class HubFileError(UserError, FileNotFoundError):
    """A file of a local checkpoint directory or Hub repo could not be found or fetched."""


def weights_only_problem(exc: BaseException) -> str:
    """What is wrong with a ``.bin`` that ``torch.load(weights_only=True)`` refused, in one line: a pickle of more
    than tensors (the refusal names the global it met; torch's own text is a page of advice), or a damaged file."""
    import pickle
    import re

    text = str(exc)
    found = re.search(r"WeightsUnpickler error:\s*(.+?)(?:\.\s|\n|$)", text)
    if isinstance(exc, pickle.UnpicklingError) and found:
        return (f"refused by torch.load(weights_only=True): the pickle holds more than tensors ({found.group(1)}) "
                "and unpickling it could run code; re-save it as safetensors from a copy you trust")
    first = re.split(r"(?<=\.)\s", re.sub(r"\s+", " ", text).strip())[0][:300]  # its first sentence
    return f"cannot be loaded with torch.load(weights_only=True) ({type(exc).__name__}: {first}): truncated or damaged?"


def cache_root() -> Path:
    """Root of the files dart_core derives and keeps (converted N-gram stores, converted packaged models):
    ``$DART_ARENA_CACHE`` or ``~/.cache/dart_arena``."""
    return Path(os.environ.get("DART_ARENA_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "dart_arena"))


class CacheDirError(HubFileError):
    """A folder of the cache that cannot be created or written (a read-only file system, no permission)."""


def cache_dir_problem(path: Path) -> str | None:
    """Why files cannot be written under ``path`` (``None``: they can), judged by its nearest existing folder,
    without creating anything: for a launch check."""
    probe = Path(path)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is not a folder"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{probe} cannot be written"
    return None


def writable_dir(path: Path, what: str) -> Path:
    """``path`` created if need be, for ``what`` to be written into; a :class:`CacheDirError` that names it and
    says where to point the cache instead, never a bare ``[Errno 30]``."""
    problem = None
    try:
        path.mkdir(parents=True, exist_ok=True)
        problem = cache_dir_problem(path)
    except OSError as e:
        problem = f"{e.filename or path} cannot be created ({e.strerror or e})"
    if problem is not None:
        raise CacheDirError(f"{problem}, so {what} cannot be kept in {path}: point DART_ARENA_CACHE at a writable "
                            "folder (e.g. `export DART_ARENA_CACHE=$HOME/.cache/dart_arena`, or a folder on a "
                            "volume that persists), then start again")
    return path


def hub_offline() -> bool:
    """True when HF_HUB_OFFLINE is set (in huggingface_hub's constants or the environment): the Hub is not asked."""
    env = os.environ.get("HF_HUB_OFFLINE", "")
    return bool(constants.HF_HUB_OFFLINE) or env.upper() in {"1", "ON", "YES", "TRUE"}


def looks_local(ref: str | os.PathLike[str]) -> bool:
    """True for an existing path or something that can only be a path (absolute, ./, ~, not ``org/name``)."""
    s = os.fspath(ref)
    if Path(s).expanduser().exists():
        return True
    return s.startswith((os.sep, ".", "~")) or "\\" in s or s.count("/") != 1


def resolve_file(
    ref: str | os.PathLike[str],
    filename: str,
    *,
    revision: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    required: bool = True,
) -> Path | None:
    """Local path of ``filename`` in a local directory or a Hub repo (downloaded into / read from the HF cache).

    With ``required=False`` a file the repo does not have — or, offline, one the cache does not have — gives
    ``None`` so callers can try the next layout (e.g. sharded, then unsharded weights)."""
    s = os.fspath(ref)
    if looks_local(s):
        root = Path(s).expanduser()
        if not root.exists():
            raise HubFileError(f"local path {root} does not exist (and {s!r} is not a Hub repo id like 'org/name')")
        if not root.is_dir():
            raise HubFileError(f"{root} is a file; expected a checkpoint directory holding {filename}")
        path = root / filename
        if path.is_file():
            return path
        if required:
            raise HubFileError(f"{filename} not found in local directory {root}")
        return None
    rev = f" (revision {revision})" if revision else ""
    try:
        return Path(hf_hub_download(s, filename, revision=revision, cache_dir=cache_dir,
                                    local_files_only=hub_offline()))
    except HFValidationError:
        raise HubFileError(f"{s!r} is neither an existing local path nor a valid Hub repo id") from None
    except LocalEntryNotFoundError:
        if not required:
            return None
        cache = cache_dir or constants.HF_HUB_CACHE
        why = "HF_HUB_OFFLINE is set" if hub_offline() else "the Hub cannot be reached"
        raise HubFileError(
            f"{filename} of Hub repo {s}{rev} is not in the local Hugging Face cache ({cache}) and {why}. "
            f"Fetch it where there is internet (`hf download {s} {filename}`) and copy the cache over (or point "
            f"HF_HOME / HF_HUB_CACHE at it), or pass a local directory that holds the checkpoint."
        ) from None
    except EntryNotFoundError:
        if not required:
            return None
        raise HubFileError(f"Hub repo {s}{rev} has no file {filename}") from None
    except GatedRepoError:
        raise HubFileError(
            f"Hub repo {s} is gated: accept its licence on the Hub and log in (`hf auth login`)"
        ) from None
    except RepositoryNotFoundError:
        raise HubFileError(f"Hub repo {s} not found (or private: log in with `hf auth login`)") from None
    except RevisionNotFoundError:
        raise HubFileError(f"Hub repo {s} has no revision {revision!r}") from None


def resolve_first(
    ref: str | os.PathLike[str],
    filenames: Sequence[str],
    *,
    revision: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
) -> Path:
    """The first of several alternative files that the checkpoint has (e.g. model.safetensors, pytorch_model.bin)."""
    for name in filenames:
        path = resolve_file(ref, name, revision=revision, cache_dir=cache_dir, required=False)
        if path is not None:
            return path
    offline = ""
    if hub_offline() and not looks_local(ref):
        offline = " (HF_HUB_OFFLINE is set: only the local cache was searched)"
    raise HubFileError(f"{os.fspath(ref)} has none of {', '.join(filenames)}{offline}")


# every weights file of the layouts (index, then its single file), and whether it is safetensors
_WEIGHT_LAYOUTS = tuple((name, name.startswith(SAFE_SINGLE)) for layout in WEIGHT_LAYOUTS for name in layout)


def load_tensor(
    ref: str | os.PathLike[str],
    keys: Sequence[str],
    *,
    revision: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
) -> Any:
    """Read one tensor (the first of ``keys`` present) from a checkpoint without loading the rest: sharded
    layouts fetch only the shard that holds it. Returns a torch tensor."""
    import torch
    from safetensors import safe_open

    for name, is_safetensors in _WEIGHT_LAYOUTS:
        path = resolve_file(ref, name, revision=revision, cache_dir=cache_dir, required=False)
        if path is None:
            continue
        if name.endswith(".index.json"):
            try:
                weight_map = json.loads(path.read_text())["weight_map"]
            except (ValueError, KeyError, TypeError) as e:
                raise HubFileError(f"{path}: not a valid shard index ({e})") from None
            key = next((k for k in keys if k in weight_map), None)
            if key is None:
                raise HubFileError(f"{path}: none of {list(keys)} in the shard index")
            shard = resolve_file(ref, weight_map[key], revision=revision, cache_dir=cache_dir)
            assert shard is not None
            path, candidates = shard, [key]
        else:
            candidates = list(keys)
        if is_safetensors:
            try:
                with safe_open(str(path), framework="pt") as f:
                    names = set(f.keys())
                    key = next((k for k in candidates if k in names), None)
                    if key is not None:
                        return f.get_tensor(key)
            except Exception as e:  # safetensors raises its own error types for corrupt headers
                raise HubFileError(f"{path}: not a readable safetensors file ({e})") from None
        else:
            try:
                state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
            except Exception as e:  # refuses pickles that are not plain tensor dicts
                raise HubFileError(f"{path}: {weights_only_problem(e)}") from None
            if not isinstance(state, dict):
                raise HubFileError(f"{path}: expected a dict of tensors, got {type(state).__name__}")
            key = next((k for k in candidates if k in state), None)
            if key is not None:
                return state[key]
        raise HubFileError(f"{path}: none of {list(keys)} found")
    raise HubFileError(
        f"{os.fspath(ref)} has no weights ({', '.join(n for n, _ in _WEIGHT_LAYOUTS)})"
        + (" in the local cache (HF_HUB_OFFLINE is set)" if hub_offline() and not looks_local(ref) else "")
    )
