"""Reading a piece's metadata without reading weights: a reference (local directory or file, Hub repo, or the
local Hugging Face cache when offline) as a set of files (:class:`Source`), the JSON header of a safetensors file
(its first 8 + N bytes), and the problems that say a reference cannot be seen or lacks files, with the command
that fetches them."""

from __future__ import annotations

import json
import os
import re
import struct
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from huggingface_hub import try_to_load_from_cache
from huggingface_hub.errors import GatedRepoError, HFValidationError, RepositoryNotFoundError, RevisionNotFoundError

from dart_core.loading.hub import hub_offline, looks_local
from dart_core.loading.layouts import DTYPE_BYTES
from dart_core.preflight.plan import FileEntry, Problem, hub_cache

MAX_HEADER = 100 << 20  # a safetensors JSON header larger than this is a damaged file, not a model
ST_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "I64": 8, "I32": 4, "I16": 2,
            "I8": 1, "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1}
ST_FLOAT = {"F64", "F32", "F16", "BF16"}


# ------------------------------------------------------------------------------------------ reading metadata
class Unavailable(Exception):
    """A reference that cannot be seen at all: ``reason`` is one of bad-id, no-path, not-found, gated, revision,
    offline, unreachable; ``detail`` adds the library's words where they help."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.detail = detail


def read_safetensors_header(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The tensor table of a safetensors file — name → {dtype, shape, data_offsets} — from its first 8 + N bytes
    only (no tensor data is read); a ValueError names what is wrong (too short, a header past the end, a file
    shorter than its tensors: a truncated download)."""
    p = Path(path)
    size = p.stat().st_size
    with open(p, "rb", buffering=0) as f:  # unbuffered: not one byte past the header is read
        head = f.read(8)
        if len(head) < 8:
            raise ValueError(f"only {size} bytes: not a safetensors file")
        (n,) = struct.unpack("<Q", head)
        if n > MAX_HEADER or 8 + n > size:
            raise ValueError(f"its header claims {n} bytes in a file of {size}: damaged or not safetensors")
        try:
            header = json.loads(f.read(n))
        except ValueError as e:
            raise ValueError(f"unreadable header ({e})") from None
    if not isinstance(header, dict):
        raise ValueError("the header is not a JSON object")
    header.pop("__metadata__", None)
    end = max((int(t.get("data_offsets", [0, 0])[1]) for t in header.values() if isinstance(t, dict)), default=0)
    if 8 + n + end > size:
        raise ValueError(f"{size} bytes, but its tensors end at byte {8 + n + end}: a truncated download")
    return header


class Source:
    """One reference as a set of files, seen without reading weights: a local directory or file, a Hub repo
    through the Hub's listing (``hub``), or through the local Hugging Face cache (``cache``: HF_HUB_OFFLINE, or
    the Hub unreachable). Raises :class:`Unavailable` when the reference cannot be seen at all."""

    def __init__(self, ref: str, *, revision: str | None = None) -> None:
        self.ref = ref
        self.revision = revision
        self.files: dict[str, int | None] = {}
        self.root: Path | None = None
        self.note = ""
        path = Path(ref).expanduser()
        if looks_local(ref):
            if not path.exists():
                raise Unavailable("no-path")
            self.kind = "file" if path.is_file() else "dir"
            self.root = path if path.is_dir() else path.parent
            if path.is_file():
                self.files = {path.name: path.stat().st_size}
            else:
                self.files = {str(q.relative_to(path)): q.stat().st_size for q in path.rglob("*") if q.is_file()}
            return
        if hub_offline():
            self._from_cache(offline=True)
            return
        from huggingface_hub import HfApi

        try:
            info = HfApi().model_info(ref, revision=revision, files_metadata=True, timeout=10)
        except HFValidationError:
            raise Unavailable("bad-id") from None
        except GatedRepoError:
            raise Unavailable("gated") from None
        except RepositoryNotFoundError:
            raise Unavailable("not-found") from None
        except RevisionNotFoundError:
            raise Unavailable("revision") from None
        except Exception as e:  # network trouble: what the cache holds is what can load
            self._from_cache(offline=False, why=f"{type(e).__name__}: {e}")
            return
        self.kind = "hub"
        self.files = {s.rfilename: s.size for s in info.siblings or []}

    def _from_cache(self, *, offline: bool, why: str = "") -> None:
        self.kind = "cache"
        snap = cached_snapshot(self.ref, self.revision)
        if snap is None:
            if not offline:
                raise Unavailable("unreachable", why)
            try:  # a malformed id offline: say so rather than "not cached"
                from huggingface_hub.utils import validate_repo_id

                validate_repo_id(self.ref)
            except HFValidationError:
                raise Unavailable("bad-id") from None
            raise Unavailable("offline")
        self.root = snap
        self.files = {}
        for q in snap.rglob("*"):
            try:
                if q.is_file():
                    self.files[str(q.relative_to(snap))] = q.stat().st_size
            except OSError:  # a broken link into blobs/: not there
                continue
        if not offline:
            self.note = f"the Hub could not be reached ({why[:120]}); checked the local cache only"

    @property
    def is_hub(self) -> bool:
        return self.kind in ("hub", "cache")

    def where(self) -> str:
        if self.kind == "dir":
            return "local directory"
        if self.kind == "file":
            return "local file"
        if self.kind == "cache":
            return f"local HF cache {hub_cache()}" + (" (HF_HUB_OFFLINE)" if hub_offline() else "")
        return "Hugging Face Hub"

    def has(self, name: str) -> bool:
        return name in self.files

    def local(self, name: str) -> Path | None:
        """The file on this machine, when it is here already."""
        if self.kind in ("dir", "cache", "file"):
            assert self.root is not None
            p = self.root / name
            return p if p.is_file() else None
        found = try_to_load_from_cache(self.ref, name, revision=self.revision)
        return Path(found) if isinstance(found, str) else None

    def json(self, name: str) -> Any:
        """A small JSON file (a config, a shard index): read where it is, fetched from the Hub otherwise."""
        p = self.local(name)
        if p is None:
            from huggingface_hub import hf_hub_download

            p = Path(hf_hub_download(self.ref, name, revision=self.revision))
        return json.loads(p.read_text(encoding="utf-8"))

    def header(self, name: str) -> dict[str, Any]:
        """A safetensors file's tensor table: its header read here, or from the Hub by a ranged request."""
        p = self.local(name)
        if p is not None:
            return read_safetensors_header(p)
        from huggingface_hub import HfApi

        meta = HfApi().parse_safetensors_file_metadata(self.ref, name, revision=self.revision)
        return {k: {"dtype": t.dtype, "shape": list(t.shape)} for k, t in meta.tensors.items()}

    def entries(self, names: Iterable[str]) -> list[FileEntry]:
        return [FileEntry(n, self.files.get(n), self.local(n) is not None) for n in names]


def cached_snapshot(repo: str, revision: str | None = None) -> Path | None:
    """The cached snapshot folder of a Hub model repo (``models--org--name/snapshots/<commit>``), or None."""
    folder = hub_cache() / f"models--{repo.replace('/', '--')}"
    rev = revision or "main"
    commit: str | None = rev if re.fullmatch(r"[0-9a-f]{40}", rev) else None
    if commit is None:
        ref = folder / "refs" / rev
        if not ref.is_file():
            return None
        commit = ref.read_text().strip()
    snap = folder / "snapshots" / commit
    return snap if snap.is_dir() else None


def hf_download_line(repo: str, files: Iterable[str] = ()) -> str:
    return " ".join(["hf download", repo, *files])


def refetch(src: Source, files: list[str]) -> str:
    """How to replace damaged files: fetch them again from the Hub, or replace them in the local directory."""
    if src.is_hub:
        return hf_download_line(src.ref, files) + " --force-download"
    return f"replace {', '.join(files)} in {src.root} with an intact copy"


def unavailable_problem(role: str, ref: str, e: Unavailable, files: list[str], *, example: str = "") -> Problem:
    """The sentence and fix for a reference that cannot be seen, by why."""
    want = hf_download_line(ref, files)
    published = f" (the published one is e.g. {example})" if example and example != ref else ""
    if e.reason == "no-path":
        return Problem(f"The {role} {ref} does not exist: no such local path (and it is not a Hub repo id like "
                       "org/name).", [f"pass an existing directory or a Hub id{published}"])
    if e.reason == "bad-id":
        return Problem(f"The {role} {ref!r} is neither an existing local path nor a valid Hub repo id.",
                       [f"pass a directory or an id like org/name{published}"])
    if e.reason == "not-found":
        return Problem(f"The {role} repo {ref} was not found on the Hugging Face Hub (a typo, or a private repo).",
                       [f"check the id{published}", "for a private repo: hf auth login"])
    if e.reason == "gated":
        return Problem(f"The {role} repo {ref} is gated: its licence must be accepted on the Hub first.",
                       [f"accept it at https://huggingface.co/{ref}, then: hf auth login"])
    if e.reason == "revision":
        return Problem(f"The {role} repo {ref} has no such revision.", ["drop the revision or name one it has"])
    if e.reason == "unreachable":
        return Problem(f"The {role} {ref} is not in the local Hugging Face cache ({hub_cache()}) and the Hub cannot "
                       f"be reached ({e.detail[:160]}).", [want + "   (where there is internet)",
                                                          "check the network / HTTPS_PROXY, then --download"])
    return Problem(f"The {role} {ref} is not in the local Hugging Face cache ({hub_cache()}) and HF_HUB_OFFLINE is "
                   "set: the repo is missing there.", [want])


def missing_files_problem(role: str, src: Source, names: list[str], *, alternatives: str = "") -> Problem:
    """Files the plan needs that the repo or directory lacks (or that the offline cache lacks)."""
    listed = ", ".join(names)
    if src.kind == "cache":
        return Problem(f"The {role} {src.ref} is in the local Hugging Face cache, but without {listed}"
                       f"{alternatives}.", [hf_download_line(src.ref, names)])
    if src.kind == "hub":
        have = ", ".join(sorted(src.files)[:8]) or "no files"
        return Problem(f"The {role} repo {src.ref} on the Hub has no {listed}{alternatives} (it has: {have}).",
                       ["check that the id names the right repo"])
    return Problem(f"The {role} directory {src.ref} has no {listed}{alternatives}.",
                   ["pass the directory that holds the checkpoint"])


def tensor_bytes(header: Mapping[str, Any], dtype_bytes: int) -> tuple[int, int]:
    """(bytes once loaded in a dtype of ``dtype_bytes`` per float element, parameter count) of a tensor table."""
    total = params = 0
    for t in header.values():
        if not isinstance(t, Mapping):
            continue
        n = 1
        for d in t.get("shape", []):
            n *= int(d)
        params += n
        st = str(t.get("dtype", "F32"))
        total += n * (dtype_bytes if st in ST_FLOAT else ST_BYTES.get(st, 4))
    return total, params


def config_params(tc: Mapping[str, Any]) -> int | None:
    """A decoder's parameter count from its config alone (when no weight header can be seen)."""
    try:
        h, n, v = int(tc["hidden_size"]), int(tc["num_hidden_layers"]), int(tc["vocab_size"])
        heads = int(tc["num_attention_heads"])
        kv = int(tc.get("num_key_value_heads") or heads)
        hd = int(tc.get("head_dim") or h // heads)
        inter = int(tc.get("intermediate_size") or 4 * h)
    except (KeyError, TypeError, ValueError):
        return None
    per_layer = h * hd * (2 * heads + 2 * kv) + 3 * h * inter + 2 * h
    return n * per_layer + v * h * (1 if tc.get("tie_word_embeddings") else 2) + h


def stored_bytes_per_param(cfg: Mapping[str, Any]) -> int:
    name = str(cfg.get("torch_dtype") or cfg.get("dtype") or "float32").removeprefix("torch.")
    return DTYPE_BYTES.get(name, 4)
