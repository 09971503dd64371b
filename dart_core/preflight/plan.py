"""The launch plan as data: what each piece (the target, a drafter, the N-gram store) is, where it comes from and
which files it needs (:class:`Piece`), the memory it all takes (:class:`Memory`), and every :class:`Problem` that
would stop the launch, each with its fix. Rendered for the operator by ``--check``; filled by ``checks`` and
``resources``."""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from huggingface_hub import constants

GiB = 1 << 30
EXIT_PROBLEMS = 2
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
    fast_path: str = ""  # what the fast path will be (the front end fills it in: dart_core.arena.describe_fast_path)
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    offline: bool = False
    seconds: float = 0.0
    headers: dict[tuple[str, str | None, str], dict[str, Any]] = field(default_factory=dict, repr=False)

    @property
    def ok(self) -> bool:
        return not self.problems

    def header(self, src: Any, name: str) -> dict[str, Any]:
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
        if self.fast_path:
            lines += textwrap.wrap(self.fast_path, 118, initial_indent=f"  {'fast path:':<17}",
                                   subsequent_indent=" " * 19, break_on_hyphens=False)
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


