"""The figures of a run, from its :class:`~dart_core.engine.loop.Step` s: τ, speed, the time split, and the
acceptance metrics by the names vLLM prints (``docs/metrics.md`` maps them to SGLang's). One summary feeds every
surface: the CLIs, ``e2e.json`` and its report, the page's cards and the API result."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dart_core.engine.loop import Step

__all__ = ["ACCEPTANCE_FIELDS", "RunStats", "draft_depth", "summarize"]


# The acceptance figures of a run, by the names vLLM prints (docs/metrics.md maps them to SGLang's); the same dict
# (:meth:`RunStats.acceptance`) feeds the CLIs, ``e2e.json`` and its report, the page's cards and the API result.
ACCEPTANCE_FIELDS = ("verify_steps", "num_drafts", "num_draft_tokens", "num_accepted_tokens",
                     "mean_acceptance_length", "draft_acceptance_rate", "num_accepted_tokens_per_pos",
                     "per_position_acceptance_rate", "acceptance_histogram")


@dataclass(frozen=True)
class RunStats:
    """One generation's (or a pool of generations') figures: τ, speed, the time split, and the acceptance
    metrics over its **drafting steps** (docs/metrics.md).

    A drafting step is a verify step whose tree held at least one draft token below the root, which is what vLLM
    counts as a draft. The other verify steps — every AR step, a drafter that proposed nothing (no tree, or the
    root alone), and a tree cut to its root because one token of room was left — count in ``verify_steps`` and τ
    but in none of the acceptance metrics, as vLLM leaves a request without draft tokens out of its counters."""

    method: str
    new_tokens: int
    forwards: int  # verify / AR forwards after the prefill
    tau: float  # tokens per verify forward, bonus included (the paper's τ); 1.0 for AR
    tokens_per_s: float  # all emitted tokens over all measured time, prefill included
    draft_ms: float
    search_ms: float
    verify_ms: float
    prefill_ms: float
    num_drafts: int = 0  # drafting steps
    num_draft_tokens: int = 0  # draft tokens verified: each drafting step's tree nodes below the root
    num_accepted_tokens: int = 0  # draft tokens accepted (bonus tokens not included)
    drafted_step_tokens: int = 0  # tokens the drafting steps emitted (accepted drafts + bonus tokens)
    # [k] = drafting steps that accepted exactly k draft tokens, k = 0 .. the deepest draft verified
    acceptance_histogram: tuple[int, ...] = ()

    @property
    def total_ms(self) -> float:
        return self.draft_ms + self.search_ms + self.verify_ms + self.prefill_ms

    @property
    def verify_steps(self) -> int:
        """Target forwards after the prefill, drafting or not (SGLang's ``spec_verify_ct``)."""
        return self.forwards

    @property
    def draft_ms_per_step(self) -> float:
        return self.draft_ms / max(self.forwards, 1)

    @property
    def search_ms_per_step(self) -> float:
        return self.search_ms / max(self.forwards, 1)

    @property
    def verify_ms_per_step(self) -> float:
        return self.verify_ms / max(self.forwards, 1)

    @property
    def mean_acceptance_length(self) -> float | None:
        """Tokens emitted per drafting step, bonus included (vLLM's 1 + accepted / drafts: τ over the drafting
        steps); None without a drafting step."""
        return self.drafted_step_tokens / self.num_drafts if self.num_drafts else None

    @property
    def draft_acceptance_rate(self) -> float | None:
        """Accepted over verified draft tokens; None when nothing was drafted."""
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else None

    @property
    def num_accepted_tokens_per_pos(self) -> tuple[int, ...]:
        """[k - 1] = drafting steps that accepted at least k draft tokens (vLLM's per-position counter)."""
        hist = self.acceptance_histogram
        return tuple(sum(hist[k:]) for k in range(1, len(hist)))

    @property
    def per_position_acceptance_rate(self) -> tuple[float, ...]:
        """[k - 1] = the share of drafting steps that accepted at least k draft tokens: how fast a draft decays
        with depth. Its sum is ``num_accepted_tokens / num_drafts``."""
        return tuple(c / self.num_drafts for c in self.num_accepted_tokens_per_pos)

    def acceptance(self) -> dict[str, Any]:
        """The acceptance metrics as plain JSON values, by ``ACCEPTANCE_FIELDS`` (lists for the per-position
        figures and the histogram; None for a rate without a drafting step)."""
        return {name: list(v) if isinstance(v := getattr(self, name), tuple) else v for name in ACCEPTANCE_FIELDS}

    def speedup_over(self, baseline: RunStats | None) -> float | None:
        """tokens/s over the baseline's (AR's), each on its own clock; None without a usable baseline."""
        if baseline is None or baseline.tokens_per_s <= 0:
            return None
        return self.tokens_per_s / baseline.tokens_per_s


def draft_depth(step: Step) -> int:
    """The deepest draft token ``step`` verified (0: no draft). A hand-made Step without its tree counts as a
    chain of ``tree_size - 1`` drafts."""
    if step.tree is not None:
        return int(step.tree.depths.max())
    return max(step.tree_size - 1, 0)


def summarize(steps: Sequence[Step]) -> RunStats:
    """τ, tokens/s, the time split and the acceptance metrics of one generation's steps (or of several
    generations' steps pooled: every figure is a sum of counts divided at the end)."""
    if not steps:
        raise ValueError("no steps to summarize")
    body = [s for s in steps if not s.prefill]
    drafting = [s for s in body if s.tree_size > 1]
    prefill_ms = sum(s.total_ms for s in steps if s.prefill)
    new_tokens = sum(len(s.tokens) for s in steps)
    total_ms = sum(s.total_ms for s in steps)
    hist = [0] * (max((max(draft_depth(s), s.accepted) for s in drafting), default=-1) + 1)
    for s in drafting:
        hist[s.accepted] += 1
    return RunStats(
        method=steps[0].method,
        new_tokens=new_tokens,
        forwards=len(body),
        tau=sum(len(s.tokens) for s in body) / len(body) if body else 0.0,
        tokens_per_s=new_tokens / (total_ms / 1e3) if total_ms > 0 else 0.0,
        draft_ms=sum(s.draft_ms for s in body),
        search_ms=sum(s.search_ms for s in body),
        verify_ms=sum(s.verify_ms for s in body),
        prefill_ms=prefill_ms,
        num_drafts=len(drafting),
        num_draft_tokens=sum(s.tree_size - 1 for s in drafting),
        num_accepted_tokens=sum(s.accepted for s in drafting),
        drafted_step_tokens=sum(len(s.tokens) for s in drafting),
        acceptance_histogram=tuple(hist),
    )
