"""The automatic tree budget: each step, the drafted trees are cut where their nodes stop paying for what they cost
on this machine, down to no draft at all, for one stream or for the streams of one batch.

A node's worth is the probability that it is accepted: the product, along its path, of each node's conditional
acceptance given its parent's, which a :class:`Calibration` learns online from the racer's own steps (per depth,
by the node's own confidence: its score's step from its parent's, or its depth alone for a drafter that scores
nothing). A step's cost is the verify of the rows it sends (:mod:`dart_core.engine.cost_curve`, measured at load and
refined by what the steps really took) plus the step's drafting. The budget keeps the cut that maximizes expected
tokens per millisecond; a batch's streams share one forward whose rows per stream are its widest tree's, so the
streams' nodes compete for one cost.

Two rules rank the nodes (``BUDGETS``): ``node``, ours, by each node's calibrated probability; ``position``,
vLLM's adaptive verification, by each stream's survival probability at a depth (the running product of its
per-position acceptance estimates), a depth admitted whole. ``off`` verifies the tree as drafted. Every rule only
chooses which nodes are verified, never how they are accepted: the output stays the target's.

Learning from the whole drafted tree, not just the verified part: after a step, the tokens it emitted are the
target's own for as many positions as they run, so each drafted node whose parent matches them is labelled
(accepted iff its token matches too), verified or cut. Exact for greedy decoding; under sampling, a proxy.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from dart_core.engine.monotone import non_increasing_fit
from dart_core.engine.tree import DraftTree

if TYPE_CHECKING:  # torch-free at import: the command lines declare --budget before torch loads
    from dart_core.engine.cost_curve import CostCurves

NODE, POSITION, OFF = "node", "position", "off"
BUDGETS = (NODE, POSITION, OFF)
BUDGET_HELP = ("how each step's draft tree is sized: node (default) cuts it where its nodes stop paying, by each "
               "node's calibrated acceptance against this machine's verify cost (measured once per model and machine, "
               "kept in the cache), down to no draft at all; position: vLLM's adaptive verification rule (each "
               "stream's per-position survival probability), a depth admitted whole; off: the tree as drafted, "
               "sized by the racers' own settings (smaller trees on a CPU)")
DEPTHS = 16  # depths calibrated apart; deeper nodes share the last
# a node's confidence: how far its score falls below its parent's, binned at these steps (log-probability units)
STEP_EDGES = np.array([0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 9.0])
PRIOR_WEIGHT = 2.0  # pseudo-observations of each cell's prior
PAID_RATE = 0.2  # how fast a stream's record of what drafting paid follows its steps
PROBE_EVERY = 8  # a batch's stream whose drafting does not pay drafts again after this many steps: does it pay now?
MAX_PROBE_EVERY = 64  # each probe that does not pay doubles the wait, up to this many steps
# how much more a plain step must pay than the batch's best drafting before no stream drafts: a stream left plain
# learns nothing until it probes, so a near tie drafts
SKIP_MARGIN = 0.05
STREAM_PRIOR_WEIGHT = 8.0  # pseudo-observations a stream's per-position estimate borrows from the racer's
DEPTH_WINDOW = 8  # a stream's last cuts whose deepest kept level bounds how deep it drafts next (one level more)


def check_budget(budget: str) -> str:
    """``budget`` if it names a rule, else a ValueError listing them."""
    if budget not in BUDGETS:
        raise ValueError(f"budget must be one of {', '.join(BUDGETS)}, got {budget!r}")
    return budget


def matched_nodes(tree: DraftTree, emitted: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Which nodes of ``tree`` are labelled by the ``emitted`` tokens (their parent's path matches the emitted
    tokens and their depth is within them) and which of those match too: two boolean arrays over the nodes (the
    root neither)."""
    depths, parents, tokens = tree.depths, tree.parents, tree.tokens
    n, emitted_len = tree.size, len(emitted)
    labelled = np.zeros(n, dtype=bool)
    matched = np.zeros(n, dtype=bool)
    matched[0] = True
    for i in range(1, n):
        d = int(depths[i])
        if matched[parents[i]] and d <= emitted_len:
            labelled[i] = True
            matched[i] = int(tokens[i]) == int(emitted[d - 1])
    matched[0] = False
    return labelled, matched


class Calibration:
    """Conditional acceptance of a node given its parent's, by depth and by the node's confidence (its score's
    step below its parent's; one cell per depth for trees without scores), learned online: counts over a prior
    (the step as a probability, or one half without scores), fitted non-increasing in the step per depth."""

    def __init__(self) -> None:
        bins = len(STEP_EDGES) + 1  # the scored trees' columns; one more, the last, for trees without scores
        self.hits = np.zeros((DEPTHS, bins + 1))
        self.trials = np.zeros((DEPTHS, bins + 1))
        lower = np.concatenate([[0.0], STEP_EDGES])
        self.prior = np.concatenate([np.clip(np.exp(-lower), 0.02, 0.9), [0.5]])[None].repeat(DEPTHS, 0)
        self._fit: np.ndarray | None = None

    @staticmethod
    def cells(tree: DraftTree) -> tuple[np.ndarray, np.ndarray]:
        """Each non-root node's (depth row, confidence column)."""
        d = np.minimum(tree.depths[1:], DEPTHS) - 1
        if tree.scores is None:
            return d, np.full_like(d, len(STEP_EDGES) + 1)
        step = np.maximum(tree.scores[tree.parents[1:]] - tree.scores[1:], 0.0)
        return d, np.searchsorted(STEP_EDGES, step, side="right")

    def table(self) -> np.ndarray:
        """The fitted conditional acceptance ``[DEPTHS, columns]``: each cell's counts over its prior, the scored
        columns fitted non-increasing in the score's step per depth."""
        if self._fit is None:
            weight = self.trials + PRIOR_WEIGHT
            mean = (self.hits + PRIOR_WEIGHT * self.prior) / weight
            for d in range(DEPTHS):
                mean[d, :-1] = non_increasing_fit(mean[d, :-1], weight[d, :-1])
            self._fit = mean
        return self._fit

    def conditional(self, tree: DraftTree) -> np.ndarray:
        """Each node's conditional acceptance (root 1)."""
        d, b = self.cells(tree)
        return np.concatenate([[1.0], self.table()[d, b]])

    def path_probabilities(self, tree: DraftTree) -> np.ndarray:
        """Each node's probability of being accepted: its conditional acceptances multiplied along its path
        (parents come first, so one pass; root 1, never increasing along a path)."""
        q = self.conditional(tree)
        p = q.copy()
        for i in range(1, tree.size):
            p[i] = p[tree.parents[i]] * q[i]
        return p

    def observe(self, tree: DraftTree, labelled: np.ndarray, matched: np.ndarray) -> None:
        """Count the labelled nodes of a drafted tree (:func:`matched_nodes`)."""
        if not labelled.any():
            return
        d, b = self.cells(tree)
        keep = labelled[1:]
        np.add.at(self.trials, (d[keep], b[keep]), 1.0)
        np.add.at(self.hits, (d[keep], b[keep]), matched[1:][keep].astype(float))
        self._fit = None

    def report(self) -> dict[str, Any]:
        """Predicted against observed acceptance per depth (the cells' counts pooled), for calibration plots."""
        table = self.table()
        out = []
        for d in range(DEPTHS):
            n = float(self.trials[d].sum())
            if n:
                predicted = float((table[d] * self.trials[d]).sum() / n)
                out.append({"depth": d + 1, "labelled": int(n), "observed": float(self.hits[d].sum() / n),
                            "predicted": predicted})
        return {"by_depth": out}


@dataclass
class StreamBudget:
    """One stream's own side of the budget: its per-position acceptance counts (the ``position`` rule's
    estimates, borrowing the racer's as a prior) and what its drafting has paid lately."""

    reached: np.ndarray = field(default_factory=lambda: np.zeros(DEPTHS))
    accepted: np.ndarray = field(default_factory=lambda: np.zeros(DEPTHS))
    # what its drafting has paid lately (moving averages over its drafted steps; None before the first): tokens
    # accepted from drafts, drafting ms, rows verified; and the steps it has not drafted since
    gain: float | None = None
    draft_ms: float = 0.0
    rows: float = 1.0
    undrafted: int = 0
    probe_every: int = PROBE_EVERY  # plain steps before it drafts again to see whether drafting pays now
    # the deepest level each of its last cuts kept (0: the bare root), for :meth:`Budget.depth_limit`
    kept_depths: deque[int] = field(default_factory=lambda: deque(maxlen=DEPTH_WINDOW))


def rank_order(tree: DraftTree, probs: np.ndarray) -> np.ndarray:
    """The non-root nodes in the order the node rule keeps them: by the drafter's own score where the tree has
    scores (the search's ranking, which the calibration only prices), else by calibrated probability; each node's
    key is capped at its parent's and ties go to the lower index, so every prefix of the order is a tree."""
    key = (tree.scores if tree.scores is not None else probs).astype(np.float64).copy()
    for i in range(1, tree.size):
        key[i] = min(key[i], key[tree.parents[i]])
    return np.lexsort((np.arange(tree.size - 1), -key[1:])) + 1


def _options_node(tree: DraftTree, probs: np.ndarray) -> tuple[list[int], list[float], np.ndarray, list[bool]]:
    """Cuts of a tree under the node rule: its first n nodes in :func:`rank_order` for every n (rows n + 1, worth 1
    + their probabilities, whether they form a chain), and the order."""
    order = rank_order(tree, probs)
    worth = 1.0 + np.concatenate([[0.0], np.cumsum(probs[order])])
    depths = tree.depths[order]
    seen: set[int] = set()
    chains = [True]
    for d in depths.tolist():
        chains.append(chains[-1] and d not in seen)
        seen.add(d)
    return list(range(1, tree.size + 1)), worth.tolist(), order, chains


class Budget:
    """One racer's budget under one rule: its calibration (kept across the racer's generations in a run) and the
    target's cost curves. :meth:`cut` chooses each step's trees, :meth:`observe` learns from what the step
    emitted."""

    def __init__(self, rule: str, curves: CostCurves) -> None:
        self.rule = check_budget(rule)
        self.curves = curves
        self.calibration = Calibration()
        self.racer_reached = np.zeros(DEPTHS)
        self.racer_accepted = np.zeros(DEPTHS)
        self.sizes: list[int] = []  # nodes verified per stream per step (root excluded), for reports
        self.paid: tuple[float, float, float] | None = None  # what drafting paid the racer lately (StreamBudget)
        self.drafted_steps = 0
        self.undrafted_steps = 0  # steps a stream decoded plainly because its drafting did not pay

    def new_stream(self) -> StreamBudget:
        """A stream's side, starting from what drafting paid the racer's earlier streams."""
        stream = StreamBudget()
        if self.paid is not None:
            stream.gain, stream.draft_ms, stream.rows = self.paid
        return stream

    def drafting(self, streams: Sequence[StreamBudget]) -> list[bool]:
        """Which of a batch's streams draft this step. One stream always drafts: its cut already falls to the bare root
        when nothing pays, and a skipped step's lost tokens cost more than its drafting saves. In a batch, the drafting
        streams are chosen for the batch's rate: the streams whose drafting paid most tokens per ms lately join one by
        one while the expected tokens (one a stream, plus each drafting stream's recent gain) per ms of their drafting
        and of the verify at their width grow. The others decode plainly and save their drafting, and when none drafts
        (a plain step paying :data:`SKIP_MARGIN` more than the best drafting), the verify's width too: then the step
        costs what plain decoding's does. A stream without a record drafts; one left plain drafts again after
        :data:`PROBE_EVERY` plain steps to see whether it pays now, and each such probe that does not pay doubles its
        wait (up to :data:`MAX_PROBE_EVERY`): a probe drafts every stream that probes with it and widens the whole
        batch's verify. Why the batch's rate: the streams' drafting runs one after another and the widest tree sets
        every stream's verify, so at many streams a drafted step can cost more than the tokens it adds are worth, and no
        one stream's record shows it (measured: docs/benchmarks.md)."""
        n = len(streams)
        if self.rule == OFF or n == 1:
            return [True] * n
        curve = self.curves.for_streams(n)
        known = [i for i, s in enumerate(streams) if s.gain is not None]
        wanted = [False] * n
        order = sorted(known, key=lambda i: -streams[i].gain / max(streams[i].draft_ms, 1e-3))  # type: ignore[operator]

        def rate(members: list[bool]) -> float:
            drafting = [s for s, m in zip(streams, members, strict=True) if m]
            width = max([1, *(max(1, round(s.rows)) for s in drafting)])
            return (n + sum(s.gain or 0.0 for s in drafting)) / (sum(s.draft_ms for s in drafting) + curve.ms(width))

        plain_rate = rate(wanted)
        best, best_rate = list(wanted), 0.0
        for i in order:
            wanted[i] = True
            now = rate(wanted)
            if now >= best_rate * (1 - 1e-9):  # a tie drafts: its record stays fresh
                best, best_rate = list(wanted), now
        if plain_rate > best_rate * (1 + SKIP_MARGIN):
            best = [False] * n
        out = []
        for s, want in zip(streams, best, strict=True):
            if want or s.gain is None:
                s.undrafted, s.probe_every = 0, PROBE_EVERY
                want = True
            elif s.undrafted + 1 >= s.probe_every:  # a probe; the next waits twice as long unless this one pays
                s.undrafted, s.probe_every = 0, min(2 * s.probe_every, MAX_PROBE_EVERY)
                want = True
            else:
                s.undrafted += 1
            out.append(want)
        self.undrafted_steps += out.count(False)
        return out

    def depth_limit(self, stream: StreamBudget) -> int | None:
        """How deep ``stream`` drafts this step: one level below the deepest its last :data:`DEPTH_WINDOW` cuts
        kept, so a drafter paying a forward per level saves the levels its cuts drop, and still drafts the next
        level, where the calibration learns whether it pays (None: no cut yet, or the rule ``off``)."""
        if self.rule == OFF or not stream.kept_depths:
            return None
        return max(stream.kept_depths) + 1

    def paid_for(self, stream: StreamBudget, accepted: int, draft_ms: float, rows: int) -> None:
        """A drafted step of ``stream``: ``accepted`` drafts after ``draft_ms`` of drafting, ``rows`` verified."""
        if self.rule == OFF:
            return
        now = (float(accepted), float(draft_ms), float(rows))
        if stream.gain is None:
            stream.gain, stream.draft_ms, stream.rows = now
        else:
            stream.gain += PAID_RATE * (now[0] - stream.gain)
            stream.draft_ms += PAID_RATE * (now[1] - stream.draft_ms)
            stream.rows += PAID_RATE * (now[2] - stream.rows)
        old = self.paid or now
        self.paid = tuple(o + PAID_RATE * (n - o) for o, n in zip(old, now, strict=True))  # type: ignore[assignment]
        self.drafted_steps += 1

    def position_rates(self, stream: StreamBudget) -> np.ndarray:
        """The ``position`` rule's per-position acceptance estimates of one stream (its counts over the racer's)."""
        prior = (self.racer_accepted + 0.5 * PRIOR_WEIGHT) / (self.racer_reached + PRIOR_WEIGHT)
        w = np.minimum(self.racer_reached + PRIOR_WEIGHT, STREAM_PRIOR_WEIGHT)
        return (stream.accepted + w * prior) / (stream.reached + w)

    def _options(self, tree: DraftTree, stream: StreamBudget) -> tuple[list[int], list[float], Any, list[bool]]:
        if self.rule == NODE:
            return _options_node(tree, self.calibration.path_probabilities(tree))
        survival = np.cumprod(self.position_rates(stream))
        depths = tree.depths
        top = int(depths.max())
        per_depth = np.bincount(depths, minlength=top + 1)
        rows = np.cumsum(per_depth).tolist()
        worth = [1.0 + float(survival[: min(d, DEPTHS)].sum() + survival[-1] * max(0, d - DEPTHS))
                 for d in range(top + 1)]
        return rows, worth, None, [bool(np.all(per_depth[: d + 1] == 1)) for d in range(top + 1)]

    def cut(self, trees: Sequence[DraftTree], streams: Sequence[StreamBudget], draft_ms: float) -> list[DraftTree]:
        """The trees to verify this step: each drafted tree cut to the size that, with every stream's cut, gives
        the most expected tokens per millisecond of drafting (``draft_ms``, already spent) and verify."""
        if self.rule == OFF:
            return list(trees)
        single = len(trees) == 1  # one stream's chain needs no mask, and costs less than a tree (cost_curve)
        curve = self.curves.for_streams(len(trees))
        chain_curve = self.curves.for_streams(1, chain=True) if single else curve
        options = [self._options(t, s) for t, s in zip(trees, streams, strict=True)]
        widths = sorted({r for rows, _, _, _ in options for r in rows})
        best, best_rate = widths[0], -1.0
        for m in widths:
            worth, chain = 0.0, single
            for rows, w, _, chains in options:
                k = int(np.searchsorted(rows, m, side="right")) - 1
                worth += w[k]
                chain = chain and chains[k]
            rate = worth / (draft_ms + (chain_curve if chain else curve).ms(m))
            if rate > best_rate * (1 + 1e-9):
                best, best_rate = m, rate
        out = []
        for tree, stream, (rows, _, order, _) in zip(trees, streams, options, strict=True):
            k = int(np.searchsorted(rows, best, side="right")) - 1
            if rows[k] >= tree.size:
                out.append(tree)
            elif self.rule == NODE:
                out.append(tree.keep(np.sort(np.concatenate([[0], order[: rows[k] - 1]]))))
            else:
                out.append(tree.truncate(k))
            if tree.size > 1:  # a stream that drafted (one decoding plainly keeps its record)
                stream.kept_depths.append(int(out[-1].depths.max()))
        self.sizes.extend(t.size - 1 for t in out)
        return out

    def observe(self, drafted: DraftTree | None, stream: StreamBudget, emitted: Sequence[int]) -> None:
        """Learn from one stream's step: the tree it drafted (before the cut; None: it drafted nothing) and the
        tokens the step emitted."""
        if self.rule == OFF or drafted is None or drafted.size < 2:
            return
        labelled, matched = matched_nodes(drafted, emitted)
        self.calibration.observe(drafted, labelled, matched)
        depths = np.minimum(drafted.depths, DEPTHS)
        reached = np.zeros(DEPTHS)
        accepted = np.zeros(DEPTHS)
        for d in range(1, DEPTHS + 1):
            at = labelled & (depths == d)
            if at.any():
                reached[d - 1] = 1.0
                accepted[d - 1] = float(matched[at].any())
        stream.reached += reached
        stream.accepted += accepted
        self.racer_reached += reached
        self.racer_accepted += accepted

    def observe_forward(self, streams: int, rows: int, ms: float, chain: bool = False) -> None:
        """Follow the machine: the verify step of ``streams`` streams of ``rows`` rows (one stream's chain) took
        ``ms``."""
        if self.rule != OFF:
            self.curves.for_streams(streams, chain).observe(rows, ms)

    def report(self) -> dict[str, Any]:
        """The rule, the curves used, the calibration and the sizes chosen (a histogram), for the run data."""
        sizes = np.bincount(np.asarray(self.sizes, dtype=np.int64)) if self.sizes else np.zeros(0, dtype=np.int64)
        return {"rule": self.rule, "cost_curves": self.curves.measured(), "drafted_steps": self.drafted_steps,
                "undrafted_steps": self.undrafted_steps,
                "calibration": self.calibration.report(), "size_histogram": sizes.tolist()}
