"""A race's score, whoever runs its steps: each racer's lane (steps, tokens, own clock, status), the race's
settings, the figures so far and the tie-aware greedy verdict against plain decoding. No Gradio and no model here:
:class:`~dart_core.race.run.Race` fills a scoreboard in this process, the app's model process fills one over a
pipe, ``generate`` one racer after another."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from dart_core.engine.acceptance import SamplingConfig
from dart_core.engine.greedy_check import Verdict, compare
from dart_core.engine.loop import Step
from dart_core.engine.metrics import RunStats, summarize
from dart_core.race.figures import add_speedups, racer_figures
from dart_core.racers.registry import BASELINE, label

# a lane before its first step: zero counts, no rates
NO_STEPS = RunStats(method="", new_tokens=0, forwards=0, tau=0.0, tokens_per_s=0.0, draft_ms=0.0, search_ms=0.0,
                    verify_ms=0.0, prefill_ms=0.0)
NO_FIGURES = dict.fromkeys(("forwards", "tau", "tokens_per_s", "speedup_vs_ar", "total_ms", "prefill_ms",
                            "draft_ms_per_step", "search_ms_per_step", "verify_ms_per_step"))


@dataclass(frozen=True)
class RaceSettings:
    """Everything a race needs besides the prompt; the same for every method."""

    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    max_new_tokens: int = 256
    max_length: int | None = None
    racer_settings: Mapping[str, Any] = field(default_factory=dict)  # racer key -> its settings (missing: defaults)
    seed: int = 0
    time_limit_s: float | None = None  # the host's wall-time budget per race (None: none)
    # whose memory the racers that remember draw on and feed (a visitor's, or everyone's when the host shares it;
    # dart_core.race.memories); None: fresh memories, kept by nobody
    memory_owner: str | None = None


@dataclass
class Lane:
    """One method's progress in a race: its steps, tokens, own clock and state."""

    method: str
    steps: list[Step] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    own_ms: float = 0.0  # sum of this method's own step times
    status: str = "waiting"  # waiting | running | done | stopped | error
    error: str | None = None
    memory_answers: int | None = None  # earlier answers its memory held at the start (None: it keeps no memory)

    @property
    def label(self) -> str:
        return label(self.method)

    @property
    def finished(self) -> bool:
        return self.status in ("done", "stopped", "error")

    @property
    def stop_reason(self) -> str | None:
        return self.steps[-1].stop_reason if self.steps else None

    @property
    def last_tree_step(self) -> Step | None:
        """The latest step that verified a real draft tree (None for AR). Near the token limit the engine cuts
        trees down to the room left (often to depth 1 or the root alone), so a recent deeper tree is preferred."""
        trees = [s for s in reversed(self.steps) if s.tree is not None and s.tree.size > 1]
        return next((s for s in trees if int(s.tree.depths.max()) >= 2), trees[0] if trees else None)

    def stats(self) -> RunStats | None:
        """τ (tokens per verify forward), tokens/s over the own clock (prefill included, as in the benchmark)."""
        return summarize(self.steps) if self.steps else None

    def add(self, step: Step) -> None:
        self.steps.append(step)
        self.tokens.extend(step.tokens)
        self.own_ms += step.total_ms


class Scoreboard:
    """A race's lanes and results, whoever runs its steps: :class:`Race` on a model in this process, or the app's
    model process (``dart_arena.model_process``) whose steps arrive here. ``limit`` names the host's limit that cut it
    ("time"), if any."""

    def __init__(self, methods: Sequence[str], prompts: Mapping[str, Sequence[int]],
                 settings: RaceSettings | None = None) -> None:
        self.settings = settings or RaceSettings()
        self.methods = list(methods)
        self.prompts = {m: [int(t) for t in prompts[m]] for m in self.methods}
        self.lanes = {m: Lane(m) for m in self.methods}
        self.limit: str | None = None
        self.dtype: torch.dtype = torch.float32  # the target's: how wide a rounding tie may be (greedy_check)

    @property
    def finished(self) -> bool:
        """Every lane is over: done, stopped or failed."""
        return all(lane.finished for lane in self.lanes.values())

    @property
    def stopped(self) -> bool:
        """Some lane was cut short by :meth:`stop` / :meth:`close` or a limit (not by its own end)."""
        return any(lane.status == "stopped" for lane in self.lanes.values())

    @property
    def failed(self) -> list[str]:
        """The methods that ended with an error."""
        return [m for m, lane in self.lanes.items() if lane.status == "error"]

    def speedup(self, method: str) -> float | None:
        """tokens/s of ``method`` over AR's, both on their own clocks so far (None without AR figures)."""
        ar = self.lanes.get(BASELINE)
        mine = self.lanes[method].stats()
        return mine.speedup_over(ar.stats() if ar is not None else None) if mine is not None else None

    def greedy_verdicts(self) -> dict[str, Verdict] | None:
        """Greedy only, once every lane finished normally, on one prompt for all: each method's output against
        AR's — identical, identical up to a rounding tie of the target's best logits, or a mismatch
        (``greedy_check``). Racers given different prompts (a chat whose earlier turn was sampled: each column
        continues its own answer) get no verdict: their outputs are not meant to agree."""
        ar = self.lanes.get(BASELINE)
        if not self.settings.sampling.greedy or ar is None or ar.status != "done":
            return None
        if any(p != self.prompts[BASELINE] for p in self.prompts.values()):
            return None
        if any(lane.status != "done" for lane in self.lanes.values()):
            return None
        ar_top = [t for s in ar.steps for t in s.top_logits]
        return {m: compare(ar.tokens, ar_top, lane.tokens, [t for s in lane.steps for t in s.top_logits], self.dtype)
                for m, lane in self.lanes.items() if m != BASELINE}

    def greedy_matches(self) -> dict[str, bool] | None:
        """Greedy only, once every lane finished normally: is each method's output AR's (up to a rounding tie)?"""
        verdicts = self.greedy_verdicts()
        return None if verdicts is None else {m: v.ok for m, v in verdicts.items()}

    def summary(self) -> dict[str, dict[str, Any]]:
        """Per method: status, prompt and output tokens, own clock, and :func:`~dart_core.race.figures.
        racer_figures` (τ, tokens/s, speedup vs AR, ms per step, the acceptance metrics; None before the first
        step) — plain numbers."""
        figures = {m: racer_figures(lane.steps) if lane.steps else None for m, lane in self.lanes.items()}
        add_speedups(figures)
        out: dict[str, dict[str, Any]] = {}
        for m, lane in self.lanes.items():
            f = figures[m] or {**NO_FIGURES, **NO_STEPS.acceptance()}
            out[m] = {"label": lane.label, "status": lane.status, "stop_reason": lane.stop_reason,
                      "error": lane.error, "prompt_tokens": len(self.prompts[m]), "own_ms": lane.own_ms,
                      "memory_answers": lane.memory_answers, **f, "tokens": len(lane.tokens)}
        return out
