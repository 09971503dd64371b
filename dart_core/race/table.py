"""The figures as text, for the command lines (``generate``, the benchmarks): the acceptance columns, the racer
column's width, the per-position acceptance lines, and the greedy check's verdicts (ties named as ties)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from dart_core.engine.greedy_check import Verdict

ACCEPTANCE_HEADER = f"{'drafted':>8} {'accepted':>8} {'rate':>6} {'acc len':>7}"


def method_width(names: Iterable[Any]) -> int:
    """The racer column's width: the longest racer key (``prompt-lookup``) keeps the columns aligned."""
    return max(8, *(len(str(n)) for n in names))


def acceptance_cells(figures: Mapping[str, Any]) -> str:
    """A row's acceptance columns (under ``ACCEPTANCE_HEADER``): draft tokens verified and accepted, the draft
    acceptance rate and the mean acceptance length; dashes for a racer without drafting steps."""
    if not figures["num_drafts"]:
        return f"{'-':>8} {'-':>8} {'-':>6} {'-':>7}"
    return (f"{figures['num_draft_tokens']:>8} {figures['num_accepted_tokens']:>8} "
            f"{figures['draft_acceptance_rate']:>6.1%} {figures['mean_acceptance_length']:>7.2f}")


def per_position_lines(rows: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """vLLM's "Per-position acceptance rate" line for each drafting racer in ``rows`` (name -> figures)."""
    shown = {name: f for name, f in rows.items() if f["num_drafts"]}
    if not shown:
        return []
    return ["per-position acceptance rate (share of drafting steps that accepted at least k draft tokens, k = 1, 2, "
            "...):", *(f"  {name:<12} " + ", ".join(f"{r:.3f}" for r in f["per_position_acceptance_rate"])
                       for name, f in shown.items())]


def verdict_note(verdict: Verdict | None, dtype: Any) -> str:
    """A row's note on the greedy check: nothing when identical, the tie (and where) when only a rounding tie of
    the target's best logits parts it from AR, and a plain warning for a real difference."""
    if verdict is None or verdict.kind == "identical":
        return ""
    if verdict.kind == "tie":
        return f"   tie: {verdict.describe(dtype)}"
    return f"   MISMATCH: {verdict.describe(dtype)} (greedy; please report)"
