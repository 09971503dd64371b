"""The standings: the last ``python -m dart_core.bench e2e`` run measured on this host for a set of loaded models,
read back for the app's "Measured on this host" panel (one race is one prompt; the pooled table is the verdict).

Every e2e run records in its ``e2e.json`` (``"run"``) the command that produced it, the date and the identity of
each model it loaded (:func:`dart_core.loading.identity.model_identity`: bundle digests, a packaged model's
digest, a Hub snapshot's commit, or a local checkpoint's file sizes and times). Runs are written under
:func:`results_dir` by default (``$DART_ARENA_RESULTS``, else ``$DART_ARENA_CACHE/bench``), one ``e2e-<time>/``
folder each; :func:`find_standings` reads every ``e2e.json`` there (and one directly in it), keeps those whose
target and N-gram store are the loaded ones, and picks the latest, preferring a run on the loaded device and
dtype. A racer whose checkpoint differs from the loaded one keeps its figures out of the table (named instead);
racers without a checkpoint (plain decoding, HF ``generate``) need only the target. A row is a racer or a variant of
one (``dart_core.race.rows``: a racer that remembers as its cold and warm rows), shown with the label the run gave
it; a run of two turns also gives each turn's rows apart (``by_turn``: the second turns, each racer answering the
follow-up after its own first answer). Files that cannot be read or
are not an e2e report are skipped, never an error: no run found gives a hint with the command to run.
"""

from __future__ import annotations

import json
import os
import shlex
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dart_core.bundle import Bundle, default_bundle_dir
from dart_core.loading.hub import cache_root
from dart_core.loading.identity import model_identity
from dart_core.race.rows import row_label, row_racer

REPORT = "e2e.json"
POSITION_REPORT = "long.json"  # ``bench long``: each racer by output position
CONCURRENCY_REPORT = "concurrency.json"  # ``bench concurrency``: each racer by stream count
COMMAND = ("python", "-m", "dart_core.bench", "e2e")


def results_dir() -> Path:
    """Where ``bench e2e`` writes its runs by default and the app looks for them: ``$DART_ARENA_RESULTS``, else
    ``$DART_ARENA_CACHE/bench`` (``~/.cache/dart_arena/bench``)."""
    env = os.environ.get("DART_ARENA_RESULTS")
    return Path(env).expanduser() if env else cache_root() / "bench"


def models_identity(base: str, drafters: Mapping[str, str | None], ngram: str | None,
                    small_ngram: bool = False) -> dict[str, Any]:
    """The identities of a target, its racers' checkpoints (racer key → reference; None: not loaded) and the
    N-gram store (with the trie a directory or Hub repo is read from), as a run records them and the app
    matches them."""
    store = model_identity(ngram)
    if store is not None and not Path(ngram).expanduser().is_file():  # type: ignore[arg-type]
        store += " small.trie" if small_ngram else " full.trie"
    return {"target": model_identity(base),
            "drafters": {k: model_identity(v) for k, v in drafters.items() if v is not None},
            "ngram": store}


def run_record(command: str, models: dict[str, Any]) -> dict[str, Any]:
    """The ``"run"`` block of an ``e2e.json``: the command line, the directory it ran in (its relative paths'
    base), the date (UTC, ISO 8601) and the models."""
    return {"command": command, "cwd": os.getcwd(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "models": models}


def command_line(argv: list[str], prog: tuple[str, ...] = COMMAND) -> str:
    """The command a run was started with, quoted for a shell."""
    return shlex.join([*prog, *argv])


@dataclass(frozen=True)
class Standings:
    """One e2e run's pooled table for the loaded models: ``rows`` in the run's order, each the row's key (a racer
    or a variant of one), its ``label`` and its ``summary`` figures (tau, tokens/s, speedup vs AR, ms per step,
    ...); ``hidden``: row → why it is left out (the run measured its racer with another checkpoint than the loaded
    one, or it is not loaded here); ``turn_rows``: turn ("1", "2") → the same rows over that turn only, for a run
    of several turns."""

    path: Path
    date: str
    command: str
    prompts: int
    turns: int
    prompt_source: str
    decoding: str
    max_new_tokens: int | None
    dtype: str
    device: str
    rows: list[dict[str, Any]]
    hidden: dict[str, str] = field(default_factory=dict)
    mismatches: int | None = None
    same_setup: bool = True  # run on the loaded device and dtype
    # category → racer → figures (the shown racers only) and category → best racer, when the run had several
    by_category: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    best_by_category: dict[str, str | None] = field(default_factory=dict)
    spread: dict[str, dict[str, Any]] = field(default_factory=dict)  # racer → figure → mean/std/min/max (--seeds)
    turn_rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


def find_standings(models: dict[str, Any], *, root: str | os.PathLike[str] | None = None,
                   device: str | None = None, dtype: str | None = None) -> Standings | None:
    """The last run under ``root`` (default :func:`results_dir`) for ``models`` (:func:`models_identity`), one
    on ``device`` / ``dtype`` first when given; None when there is none."""
    root = Path(root).expanduser() if root is not None else results_dir()
    found = [s for path in _reports(root) if (s := _read(path, models, device, dtype)) is not None]
    return max(found, key=lambda s: (s.same_setup, s.date), default=None)


def _reports(root: Path, name: str = REPORT) -> list[Path]:
    try:
        return [p for p in [root / name, *sorted(root.glob(f"*/{name}"))] if p.is_file()]
    except OSError:
        return []


@dataclass(frozen=True)
class PositionRun:
    """The last ``bench long`` run for the loaded models: τ per output-position bucket (``spans``) and racer."""

    path: Path
    date: str
    command: str
    spans: list[tuple[int, int]]
    tau: dict[str, list[float | None]]  # racer -> τ per span (the loaded racers only)


def find_position_run(models: dict[str, Any], *, root: str | os.PathLike[str] | None = None) -> PositionRun | None:
    """The latest ``long.json`` under ``root`` whose target and store are the loaded ones (a racer measured with
    another checkpoint left out), or None."""
    def build(path: Path, data: dict[str, Any], keep: list[str]) -> PositionRun:
        spans = [(int(b["start"]), int(b["end"])) for b in data["by_position"]]
        tau = {m: [b["racers"][m]["tau"] for b in data["by_position"]] for m in keep}
        run = data["run"]
        return PositionRun(path=path, date=str(run["date"]), command=str(run["command"]), spans=spans, tau=tau)

    return _latest(models, root, POSITION_REPORT, build)


@dataclass(frozen=True)
class ConcurrencyRun:
    """The last ``bench concurrency`` sweep for the loaded models: each racer's speedup over batched plain decoding
    and aggregate tokens/s per stream count, and its crossover (the smallest B where it no longer pays; None:
    it paid at every B swept)."""

    path: Path
    date: str
    command: str
    streams: list[int]
    speedup: dict[str, list[float | None]]  # racer -> per B in ``streams``
    tokens_per_s: dict[str, list[float | None]]
    crossover: dict[str, int | None]
    mismatches: int
    setup: str  # device and dtype, e.g. "cpu, float32"


def find_concurrency_run(models: dict[str, Any], *,
                         root: str | os.PathLike[str] | None = None) -> ConcurrencyRun | None:
    """The latest ``concurrency.json`` under ``root`` for the loaded target and store (racers measured with
    another checkpoint left out), or None."""
    def build(path: Path, data: dict[str, Any], keep: list[str]) -> ConcurrencyRun:
        streams = [int(b) for b in data["config"]["streams"]]
        by = data["by_streams"]
        series = {key: {m: [by[str(b)][m].get(key) for b in streams] for m in keep}
                  for key in ("speedup_vs_ar", "tokens_per_s")}
        cfg, run = data["config"], data["run"]
        mismatches = sum(int(f.get("mismatches") or 0) for r in by.values() for f in r.values())
        return ConcurrencyRun(path, str(run["date"]), str(run["command"]), streams, series["speedup_vs_ar"],
                              series["tokens_per_s"], {m: b for m, b in data["crossover"].items() if m in keep},
                              mismatches, f"{cfg['device']}, {cfg['dtype']}")

    return _latest(models, root, CONCURRENCY_REPORT, build)


def _latest(models: dict[str, Any], root: str | os.PathLike[str] | None, name: str,
            build: Callable[[Path, dict[str, Any], list[str]], Any]) -> Any:
    """The newest report called ``name`` under ``root`` (default :func:`results_dir`) that measured the loaded
    target and store, made by ``build(path, data, racers to show)``; None when there is none readable."""
    root = Path(root).expanduser() if root is not None else results_dir()
    found = []
    for path in _reports(root, name):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            hidden = _other_models(data["run"]["models"], models, data["config"]["methods"])
            if hidden is None:
                continue
            keep = [m for m in data["config"]["methods"] if m not in hidden]
            found.append(build(path, data, keep))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
    return max(found, key=lambda r: r.date, default=None)


# parsed reports by (path, size, mtime): a page that asks again does not parse megabytes of steps again
_CACHE: dict[tuple[str, int, int], dict[str, Any] | None] = {}


def _load(path: Path) -> dict[str, Any] | None:
    try:
        st = path.stat()
        key = (str(path), st.st_size, st.st_mtime_ns)
        if key not in _CACHE:
            data = json.loads(path.read_text(encoding="utf-8"))
            _CACHE[key] = ({k: data.get(k) for k in ("run", "config", "environment", "summary", "mismatches",
                                                     "by_category", "best_by_category", "spread", "by_turn")}
                           if isinstance(data, dict) else None)
        return _CACHE[key]
    except (OSError, ValueError, AttributeError):
        return None


def _other_models(theirs: dict[str, Any], models: dict[str, Any], racers: list[str]) -> dict[str, str] | None:
    """None when a run (which recorded the identities ``theirs``) used another target or N-gram store than
    ``models``; else its rows (``racers``: racers or variants of one) whose racer's checkpoint is not the loaded
    one, each with why it is left out."""
    if theirs["target"] != models["target"] or theirs.get("ngram") != models.get("ngram"):
        return None
    ours, recorded = models.get("drafters", {}), theirs.get("drafters", {})
    return {m: "not loaded here" if row_racer(m) not in ours else "measured with another checkpoint"
            for m in racers if row_racer(m) in recorded and recorded[row_racer(m)] != ours.get(row_racer(m))}


def _read(path: Path, models: dict[str, Any], device: str | None, dtype: str | None) -> Standings | None:
    """The run at ``path`` as standings for ``models``, or None (another target or store, or not a readable e2e
    report that records its models)."""
    data = _load(path)
    try:
        run, config, env, summary = data["run"], data["config"], data["environment"], data["summary"]  # type: ignore
        order = [m for m in config.get("methods", summary) if m in summary]
        hidden = _other_models(run["models"], models, order)
        if hidden is None:
            return None
        labels = config.get("row_labels") or {}
        rows = [{"key": m, "label": labels.get(m) or row_label(m), **summary[m]} for m in order if m not in hidden]
        if not rows:  # nothing of the loaded models' to show
            return None
        resolved = config.get("resolved", {})
        run_dtype = str(env["dtype"]).removeprefix("torch.")
        mismatches = data.get("mismatches")  # type: ignore[union-attr]
        shown = {row["key"] for row in rows}
        categories = data.get("by_category") or {}  # type: ignore[union-attr]
        by_category = ({c: {m: f for m, f in figures.items() if m in shown} for c, figures in categories.items()}
                       if len(categories) > 1 else {})
        best = {c: r if r in shown else None for c, r in (data.get("best_by_category") or {}).items()  # type: ignore
                if c in by_category}
        spread = {m: f for m, f in (data.get("spread") or {}).items() if m in shown}  # type: ignore[union-attr]
        turn_rows = {t: [{"key": row["key"], "label": row["label"], **figures["summary"][row["key"]]} for row in rows]
                     for t, figures in (data.get("by_turn") or {}).items()}  # type: ignore[union-attr]
        return Standings(
            path=path, date=str(run["date"]), command=str(run["command"]), prompts=int(config["n_prompts"]),
            turns=int(resolved.get("turns", 1)), prompt_source=_source(resolved), decoding=_decoding(config),
            max_new_tokens=config.get("max_new_tokens"), dtype=run_dtype, device=str(env["device"]), rows=rows,
            hidden=hidden, mismatches=len(mismatches) if isinstance(mismatches, list) else None,
            by_category=by_category, best_by_category=best, spread=spread, turn_rows=turn_rows,
            same_setup=(device is None or _device_type(env["device"]) == _device_type(device))
            and (dtype is None or run_dtype == dtype.removeprefix("torch.")))
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def _device_type(device: Any) -> str:
    return str(device).split(":")[0]


def _source(resolved: dict[str, Any]) -> str:
    if resolved.get("dataset"):
        return str(resolved["dataset"])
    return Path(str(resolved.get("prompts") or "prompts")).name


def _decoding(config: dict[str, Any]) -> str:
    t = config.get("temperature", 0.0) or 0.0
    if t <= 0:
        return "greedy"
    return f"T={t:g}, top-p {config.get('top_p', 1.0):g}, top-k {config.get('top_k', 0)}"


def suggest_command(base: str, drafters: Mapping[str, str | None], ngram: str | None, *, small_ngram: bool = False,
                    bundle: Bundle | None = None, device: str | None = None, dtype: str | None = None,
                    threads: int | None = None, benchmark: str = "e2e") -> str:
    """The ``bench e2e`` (or another ``benchmark``'s) command that measures these models: ``--bundle`` (no flag
    for the default bundle) with the parts loaded from elsewhere named, or without a bundle the target, drafters
    and store one by one; the device, dtype and CPU threads when given (the app's engine on a CPU leaves a core to
    the page)."""
    argv: list[str] = []
    if bundle is not None:
        argv += [] if bundle.root.resolve() == default_bundle_dir().resolve() else ["--bundle", str(bundle.root)]
        own = {k: str(v) for k, v in bundle.drafters.items()}
        store = str(bundle.ngram) if bundle.ngram is not None else None
    else:
        argv += ["--base", base]
        own, store = {}, None
    argv += [x for k, v in drafters.items() if v and v != own.get(k) for x in (f"--{k}", v)]
    if ngram and ngram != store:
        argv += ["--ngram", ngram, *(["--small-ngram"] if small_ngram else [])]
    argv += ["--device", device] if device else []
    argv += ["--dtype", dtype] if dtype and dtype != "auto" else []
    argv += ["--threads", str(threads)] if threads else []
    return command_line(argv, (*COMMAND[:-1], benchmark))
