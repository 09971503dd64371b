"""A racer's figures from its steps, the same for every surface (the page's cards, ``generate``'s table, the
benchmarks' JSON): τ, tokens/s, the per-step split and the acceptance metrics (``RunStats``), and the speedups over
plain decoding."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dart_core.engine.loop import Step
from dart_core.engine.metrics import summarize
from dart_core.racers.registry import BASELINE, PEER


def racer_figures(steps: Sequence[Step], wall_ms: float | None = None) -> dict[str, Any]:
    """τ, tokens/s (prefill included) by the engine's stopwatches, the per-step split and the acceptance metrics
    over pooled steps (counts summed before any division); with ``wall_ms`` (the clock around the generations,
    loop glue included) also tokens/s by the wall clock."""
    st = summarize(steps)
    out: dict[str, Any] = {
        "tokens": st.new_tokens,
        "forwards": st.forwards,
        "tau": st.tau,
        "tokens_per_s": st.tokens_per_s,
        "total_ms": st.total_ms,
        "prefill_ms": st.prefill_ms,
        "draft_ms_per_step": st.draft_ms_per_step,
        "search_ms_per_step": st.search_ms_per_step,
        "verify_ms_per_step": st.verify_ms_per_step,
        **st.acceptance(),
        **tree_sizes(steps),
    }
    if wall_ms is not None:
        out["tokens_per_s_wall"] = st.new_tokens / (wall_ms / 1e3) if wall_ms > 0 else 0.0
        out["wall_ms"] = wall_ms
    return out


def tree_sizes(steps: Sequence[Step]) -> dict[str, Any]:
    """The nodes below the root verified per verify step (its mean and histogram: index k counts steps of k
    nodes, 0 a step without a draft) and drafted per step before the tree budget's cut (its mean)."""
    body = [s for s in steps if not s.prefill]
    verified = [max(s.tree_size - 1, 0) for s in body]
    drafted = [max(s.drafted_size - 1, 0) for s in body]
    hist = [0] * (max(verified, default=-1) + 1)
    for n in verified:
        hist[n] += 1
    return {"nodes_per_step": sum(verified) / len(body) if body else 0.0,
            "drafted_nodes_per_step": sum(drafted) / len(body) if body else 0.0, "nodes_histogram": hist}


def ratio(mine: float | None, ar: float | None) -> float | None:
    """``mine / ar``, None without a usable baseline."""
    return mine / ar if mine is not None and ar else None


def add_speedups(summary: Mapping[str, dict[str, Any]]) -> None:
    """Each racer's ``speedup_vs_ar`` over plain decoding's row in ``summary``: by the wall clock where the figures
    have one (the engine's stopwatches then in ``speedup_vs_ar_engine``), else by the stopwatches; where the peer
    engine raced (llama.cpp: ``registry.PEER``), each racer's ``speedup_vs_peer`` over it too, by the same clock."""
    ar = summary.get(BASELINE) or {}
    peer = summary.get(PEER)
    clock = "tokens_per_s_wall" if "tokens_per_s_wall" in ar else "tokens_per_s"
    for s in summary.values():
        if s is None:
            continue
        engine = ratio(s.get("tokens_per_s"), ar.get("tokens_per_s"))
        if "tokens_per_s_wall" in s:
            s["speedup_vs_ar"] = ratio(s["tokens_per_s_wall"], ar.get("tokens_per_s_wall"))
            s["speedup_vs_ar_engine"] = engine
        else:
            s["speedup_vs_ar"] = engine
        if peer:
            s["speedup_vs_peer"] = ratio(s.get(clock), peer.get(clock))


def summarize_racers(pooled: Mapping[str, Sequence[Step]],
                     wall_ms: Mapping[str, float] | None = None) -> dict[str, dict[str, Any]]:
    """:func:`racer_figures` per racer over its pooled steps (and summed wall clock), with the speedups."""
    summary = {m: racer_figures(steps, None if wall_ms is None else wall_ms[m]) for m, steps in pooled.items()}
    add_speedups(summary)
    return summary
