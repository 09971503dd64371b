"""What a verify forward costs on the machine the target runs on, by the rows each stream sends: the cost side of
the automatic tree budget (:mod:`dart_core.engine.budget`).

The price of a node differs tenfold between machines, dtypes and loads, so it is measured, not assumed: a handful
of timed verify forwards of the loaded target (its device, dtype, threads, CPU kernels and fast path) after a
realistic prefix, for B streams of 1 … 64 rows each. A curve is measured the first time a batch of B streams
needs it, logged in one line, and kept in ``$DART_ARENA_CACHE/cost-curves`` under a key naming the model and the
machine, so a later start reads it back. Between the measured row counts the curve is linear.
"""

from __future__ import annotations

import hashlib
import json
import logging
import platform
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dart_core.engine.acceptance import SamplingConfig, accept
from dart_core.engine.monotone import non_increasing_fit
from dart_core.engine.timing import Stopwatch
from dart_core.engine.tree import DraftTree
from dart_core.loading.atomic import atomic_output
from dart_core.loading.hub import cache_root

log = logging.getLogger(__name__)

ROWS = (1, 2, 4, 6, 8, 12, 16, 24, 32, 64)  # rows per stream timed for a curve (the steps refine between them)
MAX_BATCH_ROWS = 512  # rows of one timed forward at most (B streams x rows): past it a curve stops
PREFIX = 192  # committed tokens per stream before the timed forwards
REPEATS = 3  # timed forwards per row count, after one warm-up
GREEDY = SamplingConfig()
VERSION = 2  # of the cached file's layout and of what a point times
REFINE_RATE = 0.2  # how far a step's measured ms moves the curve's points around it


def curve_dir() -> Path:
    """Where measured curves are kept: ``$DART_ARENA_CACHE/cost-curves``."""
    return cache_root() / "cost-curves"


def machine_words() -> str:
    """The CPU (or GPU) a curve was measured on, as one string: part of its cache key and its log line."""
    if torch.cuda.is_available():
        return f"cuda:{torch.cuda.get_device_name()}"
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"cpu:{cpu}"


class CostCurve:
    """Milliseconds of one verify step of ``streams`` streams (the forward, the acceptance and the commit, as the
    loop clocks it), by rows per stream: the points measured at load, linear between them, then refined by what
    the steps really took (:meth:`observe`). ``source``: ``measured`` or ``cache``."""

    def __init__(self, streams: int, ms_by_rows: dict[int, float], source: str = "measured",
                 refine_rate: float = REFINE_RATE, chain: bool = False) -> None:
        if streams < 1:
            raise ValueError(f"a cost curve needs at least one stream, got {streams}")
        if not ms_by_rows or min(ms_by_rows) < 1:
            raise ValueError("a cost curve needs its ms at one or more row counts of at least 1")
        bad = [r for r, ms in ms_by_rows.items() if not (np.isfinite(ms) and ms > 0)]
        if bad:
            raise ValueError(f"a cost curve's ms must be positive and finite, not at rows {bad}")
        self.streams, self.source, self.chain = streams, source, chain
        self.rows = np.array(sorted(ms_by_rows), dtype=np.float64)
        self.measured_ms = np.array([ms_by_rows[r] for r in sorted(ms_by_rows)], dtype=np.float64)
        self.points = self.measured_ms.copy()  # the curve now: measured, then refined
        self.observed = 0
        self.refine_rate = refine_rate  # 0: the curve stays as measured

    @property
    def ms_by_rows(self) -> dict[int, float]:
        return {int(r): float(ms) for r, ms in zip(self.rows, self.points, strict=True)}

    def ms(self, rows: int) -> float:
        """The step's ms at ``rows`` rows per stream: linear between points, and past the last one along the last
        segment's slope (never below the last point)."""
        xs, ys = self.rows, self.points
        if rows <= xs[-1] or len(xs) == 1:
            return float(np.interp(rows, xs, ys))
        slope = max(0.0, (ys[-1] - ys[-2]) / (xs[-1] - xs[-2]))
        return float(ys[-1] + slope * (rows - xs[-1]))

    def observe(self, rows: int, ms: float) -> None:
        """A step of ``rows`` rows per stream took ``ms``: the two points around it move toward it (by their share
        of the interpolation), and the curve stays non-decreasing. A point made too cheap by the load's noise is
        chosen, measured and corrected; the machine's drift reaches the sizes in use."""
        if not (np.isfinite(ms) and ms > 0):
            return
        xs = self.rows
        hi = int(np.clip(np.searchsorted(xs, rows), 0, len(xs) - 1))
        lo = max(hi - 1, 0)
        t = 1.0 if hi == lo else float(np.clip((rows - xs[lo]) / (xs[hi] - xs[lo]), 0.0, 1.0))
        err = ms - self.ms(rows)
        self.points[lo] += self.refine_rate * (1 - t) * err
        self.points[hi] += self.refine_rate * t * err
        self.points = np.maximum(-non_increasing_fit(-self.points, np.ones(len(xs))), 1e-3)
        self.observed += 1

    def describe(self) -> str:
        """One line: the curve in ms at a few row counts, and whether it was measured now or read back."""
        points = ", ".join(f"{r}: {ms:.1f}" for r, ms in self.ms_by_rows.items()
                           if r in (1, 4, 8, 16, 32, 64) or r == int(self.rows[-1]))
        what = "one stream's chain" if self.chain else f"{self.streams} stream(s)' trees"
        return f"verify cost, {what}, ms by rows per stream ({self.source}): {points}"

    def as_json(self) -> dict[str, Any]:
        return {"streams": self.streams, "chain": self.chain, "source": self.source, "steps_observed": self.observed,
                "measured_ms": {str(int(r)): float(ms) for r, ms in zip(self.rows, self.measured_ms, strict=True)},
                "ms_by_rows": {str(r): ms for r, ms in self.ms_by_rows.items()}}


def _tree(n: int, vocab: int, rng: np.random.Generator, chain: bool) -> DraftTree:
    """A chain of n nodes (one stream's chain needs no mask: the model's own causal attention), or a binary tree
    (past two nodes it needs the tree mask, as a branching tree does)."""
    return DraftTree(rng.integers(0, vocab, size=n), np.arange(-1, n - 1) if chain else (np.arange(n) - 1) // 2)


def measure_curve(target: Any, streams: int = 1, rows: tuple[int, ...] = ROWS, *, prefix: int = PREFIX,
                  repeats: int = REPEATS, chain: bool = False) -> CostCurve:
    """Time verify steps of ``streams`` trees (or one stream's chain) of each row count after ``prefix`` committed
    tokens per stream (each step commits its root, as a step without accepted drafts does); the median of
    ``repeats`` after a warm-up, fitted non-decreasing in the rows. Row counts whose forward would pass
    :data:`MAX_BATCH_ROWS` or the target's context (a static cache's rows on the fast path, its power-of-two
    buckets included) are left out: the curve extends past its last point along its slope."""
    rng = np.random.default_rng(0)
    limit = int(target.max_context) - 1
    commits = len(rows) * (repeats + 1)
    sizes = [n for n in rows if n * streams <= MAX_BATCH_ROWS and 1 + commits + (1 << (n - 1).bit_length()) < limit]
    sizes = sizes or [1]
    prefix = max(1, min(prefix, limit - commits - (1 << (max(sizes) - 1).bit_length()) - 1))
    state = target.new_state(streams)
    target.prefill_rows(state, [rng.integers(0, target.vocab_size, size=prefix).tolist() for _ in range(streams)],
                        ())
    times: dict[int, list[float]] = {n: [] for n in sizes}
    for _ in range(repeats + 1):  # round robin over the sizes: a machine's drift reaches every size alike
        for n in sizes:
            trees = [_tree(n, target.vocab_size, rng, chain) for _ in range(streams)]
            with Stopwatch(target.device) as sw:  # what the loop clocks: forward, acceptance, commit
                logits, _ = target.verify_rows(state, trees)
                results = [accept(t, lg, GREEDY) for t, lg in zip(trees, logits, strict=True)]
                target.commit_rows(state, [r.nodes[:1] for r in results])
            times[n].append(sw.ms)
    out = {n: max(statistics.median(t[1:]), 1e-3) for n, t in times.items()}
    # a forward of more rows never costs less: the medians' noise is smoothed by the non-decreasing fit
    fit = -non_increasing_fit(-np.asarray(list(out.values())), np.ones(len(out)))
    return CostCurve(streams, dict(zip(out, fit.tolist(), strict=True)), chain=chain)


def curve_key(target: Any, model: str | None, streams: int, chain: bool = False) -> str:
    """What a curve depends on, as one string: the model, its device, dtype and fast path, the CPU kernels chosen
    (not the timings that chose them, which differ at every load) and threads, the machine and torch; ``model``
    names the target (its identity), None: a curve not kept."""
    plan = getattr(target, "cpu_linears", None)
    parts = [f"v{VERSION}", str(model), str(target.device), str(target.dtype), str(getattr(target, "fast_path", None)),
             f"cpu kernels: {plan.summary}" if plan is not None else "",
             f"threads={torch.get_num_threads()}", machine_words(),
             f"torch={torch.__version__}", f"streams={streams}", "chain" if chain else "tree"]
    return "\n".join(parts)


@dataclass
class CostCurves:
    """The curves of one loaded target: one per batch size of branching trees (B streams always need the mask),
    each measured when first needed (or read from the cache when ``model`` names the target: its identity), and one
    stream's chain, which needs no mask and may cost less: it starts at the tree curve's points and follows its
    own steps (a separate measurement at load was lost in the machine's noise: docs/benchmarks.md). ``given``:
    curves to use instead of measuring (tests), by batch size, or by (1, True) for the chain's."""

    target: Any
    model: str | None = None
    given: dict[Any, CostCurve] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._curves: dict[tuple[int, bool], CostCurve] = {
            (k, False) if isinstance(k, int) else k: c for k, c in self.given.items()}

    def for_streams(self, streams: int, chain: bool = False) -> CostCurve:
        """The curve of a verify of ``streams`` streams' trees, or (``chain``, one stream) of one chain; without a
        chain curve of its own, a chain is priced as a tree."""
        key = (streams, chain and streams == 1)
        curve = self._curves.get(key)
        if curve is None and key[1]:  # a chain starts at the tree's price and learns its own from its steps
            tree = self.for_streams(streams)
            curve = self._curves[key] = CostCurve(streams, dict(zip(tree.rows.astype(int).tolist(),
                                                                    tree.measured_ms.tolist(), strict=True)),
                                                  f"{tree.source}, a tree's", tree.refine_rate, chain=True)
        if curve is None and streams & (streams - 1):  # between two powers of two: between their curves
            curve = self._curves[key] = self._between(streams)
        if curve is None:
            curve = self._curves[key] = self._cached_or_measured(*key)
            log.info(curve.describe())
        return curve

    def prepare(self, streams: int) -> list[CostCurve]:
        """Measure (or read back) now the curves a batch of up to ``streams`` streams will use, so that none is
        measured inside a timed run: one per power of two up to ``streams`` rounded up (a batch's streams leave it as
        they end, and the sizes between are priced between the powers' curves)."""
        out, b = [], 1
        while True:
            out.append(self.for_streams(b))
            if b >= streams:
                return out
            b *= 2

    def _between(self, streams: int) -> CostCurve:
        """A batch of ``streams`` streams, not a power of two, priced between the curves of the powers of two
        around it (linear in the streams at every row count either measured): a batch whose streams end one by one
        would otherwise measure a curve for each size it passes through."""
        lo = 1 << (streams.bit_length() - 1)
        hi = lo * 2
        low, high = self.for_streams(lo), self.for_streams(hi)
        t = (streams - lo) / (hi - lo)
        rows = sorted({int(r) for r in low.rows} | {int(r) for r in high.rows})
        points = {r: low.ms(r) + t * (high.ms(r) - low.ms(r)) for r in rows}
        return CostCurve(streams, points, f"between {lo} and {hi} streams'", low.refine_rate)

    def measured(self) -> dict[str, Any]:
        """Every curve used so far, for a benchmark's JSON and the page's run data."""
        return {f"{b}{'-chain' if chain else ''}": c.as_json() for (b, chain), c in sorted(self._curves.items())}

    def path(self, streams: int, chain: bool = False) -> Path:
        """The file that keeps a curve (named by a digest of :func:`curve_key`)."""
        key = curve_key(self.target, self.model, streams, chain)
        return curve_dir() / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.json"

    def _cached_or_measured(self, streams: int, chain: bool) -> CostCurve:
        key = curve_key(self.target, self.model, streams, chain)
        path = self.path(streams, chain)
        if self.model is not None and path.is_file():
            try:
                data = json.loads(path.read_text())
                if data.get("key") == key:
                    return CostCurve(streams, {int(r): float(ms) for r, ms in data["measured_ms"].items()},
                                     "cache", chain=chain)
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                log.warning("the cached verify cost curve %s is unreadable: measuring it again", path)
        curve = measure_curve(self.target, streams, chain=chain)
        if self.model is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                with atomic_output(path) as tmp:
                    tmp.write_text(json.dumps({"key": key, **curve.as_json()}, indent=1))
            except OSError as e:  # a read-only cache costs a measurement at the next start, nothing else
                log.warning("could not keep the verify cost curve in %s (%s)", path, e)
        return curve
