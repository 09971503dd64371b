"""``bench e2e``'s figures as text and the figures over several seeds: the table (one row per racer or variant of
one, ``dart_core.race.rows``; pooled, then per turn), the per-category table with the best racer of each category,
and the spread of a sampled run over its seeds."""

from __future__ import annotations

import statistics
from typing import Any

from dart_core.engine.acceptance import SamplingConfig
from dart_core.race import ACCEPTANCE_HEADER, acceptance_cells, method_width, per_position_lines, row_racer
from dart_core.racers.registry import PEER, racer

SPREAD_FIGURES = ("tau", "tokens_per_s_wall", "speedup_vs_ar", "draft_acceptance_rate")


def seed_spread(by_seed: dict[str, dict[str, dict[str, Any]]], methods: list[str]) -> dict[str, dict[str, Any]]:
    """Per racer and figure: the mean, the sample standard deviation, the lowest and the highest over the seeds'
    runs (each run pooled over the whole prompt set)."""
    out: dict[str, dict[str, Any]] = {}
    for m in methods:
        out[m] = {}
        for key in SPREAD_FIGURES:
            values = [run[m][key] for run in by_seed.values() if run[m].get(key) is not None]
            out[m][key] = ({"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1
                            else 0.0, "min": min(values), "max": max(values)} if values else None)
    return out


def spread_lines(spread: dict[str, dict[str, Any]], seeds: int) -> list[str]:
    """The spread over the seeds as text: one row per racer, mean ± standard deviation."""
    def cell(f: dict[str, Any] | None, fmt: str) -> str:
        return "-" if f is None else f"{f['mean']:{fmt}} ± {f['std']:{fmt}}"

    w = method_width(spread)
    lines = [f"\nover {seeds} seeds (each run pooled over the prompts): mean ± standard deviation",
             f"{'method':<{w}} {'tau':>13} {'tok/s wall':>15} {'vs AR wall':>13} {'acceptance':>15}"]
    for m, f in spread.items():
        lines.append(f"{m:<{w}} {cell(f['tau'], '.2f'):>13} {cell(f['tokens_per_s_wall'], '.1f'):>15} "
                     f"{cell(f['speedup_vs_ar'], '.2f'):>13} {cell(f['draft_acceptance_rate'], '.3f'):>15}")
    return lines


def best_racer(figures: dict[str, dict[str, Any]]) -> str | None:
    """The drafting racer (not the baseline, not HF ``generate``: ``Racer.drafts``) with the highest
    ``speedup_vs_ar`` in ``figures`` (racer -> figures of one category; without an AR row, the highest wall-clock
    tokens/s, which ranks them alike); None without a drafting racer."""
    drafting = [m for m in figures if racer(row_racer(m)).drafts]
    return max(drafting, key=lambda m: (figures[m]["speedup_vs_ar"] or 0.0, figures[m]["tokens_per_s_wall"]),
               default=None)


def _speedup(s: dict[str, Any]) -> str:
    return f"{s['speedup_vs_ar']:.2f}x" if s["speedup_vs_ar"] else "-"


def category_lines(by_category: dict[str, dict[str, dict[str, Any]]], best: dict[str, str | None],
                   methods: list[str], counts: dict[str, int]) -> list[str]:
    """The per-category table (one row per category: each racer's τ and speedup vs AR by wall clock, the best
    racer), each drafting racer's acceptance rate and per-position acceptance per category, and one line per
    category naming its best racer. With one category (a prompt set without categories) only the best racer's
    line: the table above holds the same figures."""

    def winner(c: str) -> str:
        m = best.get(c)
        if m is None:
            return "-"
        s = by_category[c][m]
        slower = " (slower than AR)" if s["speedup_vs_ar"] is not None and s["speedup_vs_ar"] < 1 else ""
        return f"{m} {_speedup(s)} AR, tau {s['tau']:.2f}{slower}"

    if len(by_category) < 2:
        return [f"best racer: {winner(c)}" for c in by_category]
    cw = max(8, *(len(c) + 2 + len(str(counts.get(c, 0))) + 1 for c in by_category))
    cells = {c: {m: f"{by_category[c][m]['tau']:.2f} {_speedup(by_category[c][m])}" for m in methods}
             for c in by_category}
    widths = {m: max(len(m), *(len(cells[c][m]) for c in by_category)) for m in methods}
    out = ["\nby category (n prompts): tau and speedup vs AR by wall clock per racer; best: the fastest drafting "
           "racer", f"{'category':<{cw}} " + " ".join(f"{m:>{widths[m]}}" for m in methods) + "  best"]
    for c in by_category:
        name = f"{c} ({counts.get(c, 0)})"
        out.append(f"{name:<{cw}} " + " ".join(f"{cells[c][m]:>{widths[m]}}" for m in methods)
                   + f"  {best.get(c) or '-'}")
    drafting = [m for m in methods if racer(row_racer(m)).drafts]
    if drafting:
        out.append("acceptance by category (draft acceptance rate; per-position acceptance rate, k = 1, 2, ...):")
        for c in by_category:
            for m in drafting:
                f = by_category[c][m]
                if f["num_drafts"]:
                    out.append(f"  {c:<{cw}} {m:<{method_width(methods)}} {f['draft_acceptance_rate']:>6.1%}  "
                               + ", ".join(f"{r:.3f}" for r in f["per_position_acceptance_rate"]))
    out += [f"best in {c}: {winner(c)}" for c in by_category]
    return out


def print_table(summary: dict[str, dict[str, Any]], methods: list[str], n: int, sampling: SamplingConfig,
                title: str = "", labels: dict[str, str] | None = None) -> None:
    """One row per row key (a racer, or a variant of one such as ``suffix:warm``) under ``title`` (``turn 2``: the
    figures of one turn only), then the labels of rows that remember and how many earlier answers they held."""
    mode = "greedy" if sampling.greedy else f"T={sampling.temperature} top-p={sampling.top_p} top-k={sampling.top_k}"
    heading = f"{title}: " if title else ""
    print(f"\n{heading}{n} prompts, {mode}; tok/s include the prefill (eng: sum of the engine's step stopwatches, "
          "wall: clock around each generation)\nvs AR by wall tok/s; ms are means per verify step")
    w = method_width(methods)
    peer = any("speedup_vs_peer" in summary[m] for m in methods)  # llama.cpp raced: each row against it too
    print(f"{'method':<{w}} {'tokens':>7} {'steps':>6} {'tau':>6} {ACCEPTANCE_HEADER} {'tok/s eng':>9} "
          f"{'tok/s wall':>10} {'vs AR wall':>10}" + (f" {'vs ' + racer(PEER).label:>12}" if peer else "")
          + f" {'draft ms':>9} {'search ms':>10} {'verify ms':>10}")
    for m in methods:
        s = summary[m]
        speed = f"{s['speedup_vs_ar']:.2f}x" if s["speedup_vs_ar"] else "-"
        vs_peer = f" {s['speedup_vs_peer']:>11.2f}x" if s.get("speedup_vs_peer") else f" {'-':>12}"
        print(f"{m:<{w}} {s['tokens']:>7} {s['verify_steps']:>6} {s['tau']:>6.2f} {acceptance_cells(s)} "
              f"{s['tokens_per_s']:>9.1f} {s['tokens_per_s_wall']:>10.1f} {speed:>10}" + (vs_peer if peer else "")
              + f" {s['draft_ms_per_step']:>9.2f} {s['search_ms_per_step']:>10.2f} {s['verify_ms_per_step']:>10.2f}")
    for line in memory_lines(summary, methods, labels or {}):
        print(line)
    for line in per_position_lines({m: summary[m] for m in methods}):
        print(line)


def memory_lines(summary: dict[str, dict[str, Any]], methods: list[str], labels: dict[str, str]) -> list[str]:
    """One line per row that remembers: its label and the earlier answers its memory held as generations started."""
    out = []
    for m in methods:
        held = summary[m].get("memory_answers")
        if held is not None:
            out.append(f"{m} = {labels.get(m, m)}: its memory held {held['mean']:.1f} earlier answers on average "
                       f"as a generation started (at most {held['max']})")
    return out
