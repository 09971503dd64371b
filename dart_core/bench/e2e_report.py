"""The end-to-end benchmark's report for people: five plotly figures (τ per step with its running mean, the
latency split, tokens/s per prompt, the per-position acceptance rate, the acceptance histogram), the summary
table with the acceptance metrics (docs/metrics.md) and, for a prompt set of two or more categories, a racers ×
categories heatmap of the speedup vs AR with τ in each cell and the best racer per category, in a self-contained
``e2e.html`` that works offline, from the ``e2e.json`` report that ``dart_core.bench.e2e`` writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dart_core.racers.registry import color as racer_color

FIGURE_TITLES = (
    "τ per verify step (tokens per step, running mean)",
    "Latency split per step (mean ms)",
    "Tokens/s per prompt",
    "Per-position acceptance rate",
    "Accepted draft tokens per drafting step (histogram)",
)
SPLIT_COLORS = {"draft": "#ff7f0e", "search": "#2ca02c", "verify": "#9467bd"}
HEATMAP_TITLE = "Speedup vs AR by category (wall clock; τ in each cell, ★ the best racer)"


def category_counts(entries: list[dict[str, Any]]) -> dict[str, int]:
    """Prompts per category (a prompt of several turns counts once), in the order of the entries."""
    seen: dict[str, set[str]] = {}
    for e in entries:
        seen.setdefault(e.get("category", "all"), set()).add(e["id"])
    return {c: len(ids) for c, ids in seen.items()}


def category_heatmap(report: dict[str, Any]) -> Any | None:
    """Racers (rows) × categories (columns): the colour is the speedup vs AR by wall clock (the wall-clock
    tokens/s in a run without AR), each cell says τ and the speedup, ★ marks the category's best racer
    (``best_by_category``); None for fewer than two categories (the summary table says it all)."""
    import plotly.graph_objects as go

    by_category = report.get("by_category") or {}
    if len(by_category) < 2:
        return None
    methods = report["config"]["methods"]
    best = report.get("best_by_category") or {}
    counts = category_counts(report["prompts"])
    cats = list(by_category)
    speedup = any(by_category[c][m]["speedup_vs_ar"] for c in cats for m in methods)
    field = "speedup_vs_ar" if speedup else "tokens_per_s_wall"
    z = [[by_category[c][m][field] for c in cats] for m in methods]
    text = [[("★ " if best.get(c) == m else "") + f"τ {by_category[c][m]['tau']:.2f}<br>"
             + (f"{by_category[c][m]['speedup_vs_ar']:.2f}×" if speedup else f"{by_category[c][m][field]:.1f} tok/s")
             for c in cats] for m in methods]
    x = [f"{c} ({counts.get(c, 0)})" for c in cats]
    scale = {"colorscale": "RdBu", "zmid": 1.0} if speedup else {"colorscale": "Viridis"}
    fig = go.Figure(go.Heatmap(z=z, x=x, y=methods, text=text, texttemplate="%{text}", **scale,
                               colorbar={"title": {"text": "× AR" if speedup else "tok/s"}},
                               hovertemplate="%{y} on %{x}: %{text}<extra></extra>"))
    fig.update_layout(title=HEATMAP_TITLE, template="plotly_white", paper_bgcolor="#ffffff", plot_bgcolor="#ffffff",
                      font={"color": "#222222"}, height=max(320, 60 + 48 * len(methods)),
                      margin={"l": 110, "r": 20, "t": 60, "b": 60}, xaxis_title="category (prompts)",
                      xaxis_type="category", yaxis_type="category", yaxis_autorange="reversed")
    return fig


def build_figures(report: dict[str, Any]) -> list[Any]:
    """The five plotly figures of the report, with an explicit light template so they read on any page."""
    import plotly.graph_objects as go

    methods = report["config"]["methods"]
    prompts = report["prompts"]
    summary = report["summary"]
    layout = {"template": "plotly_white", "paper_bgcolor": "#ffffff", "plot_bgcolor": "#ffffff",
              "font": {"color": "#222222"}, "height": 420, "margin": {"l": 60, "r": 20, "t": 60, "b": 50},
              "legend": {"bgcolor": "rgba(255,255,255,0.8)"}}
    axis = {"showgrid": True, "gridcolor": "#d0d0d0", "linecolor": "#888888", "zerolinecolor": "#bbbbbb"}

    def color(m: str) -> str:
        return racer_color(m)

    f1 = go.Figure()
    for m in methods:
        ys = [len(s["tokens"]) for e in prompts for s in e["methods"][m]["steps"] if not s["prefill"]]
        xs = list(range(1, len(ys) + 1))
        mean, acc = [], 0
        for k, y in enumerate(ys, 1):
            acc += y
            mean.append(acc / k)
        f1.add_scatter(x=xs, y=ys, mode="markers", name=f"{m} per step", marker={"color": color(m), "size": 4},
                       opacity=0.35, legendgroup=m)
        f1.add_scatter(x=xs, y=mean, mode="lines", name=f"{m} running mean", line={"color": color(m), "width": 2.5},
                       legendgroup=m)
    f1.update_layout(title=FIGURE_TITLES[0], xaxis_title="verify step (all prompts in order)",
                     yaxis_title="tokens per step", **layout)

    f2 = go.Figure()
    for part in ("draft", "search", "verify"):
        f2.add_bar(x=methods, y=[summary[m][f"{part}_ms_per_step"] for m in methods], name=f"{part} ms",
                   marker_color=SPLIT_COLORS[part])
    f2.update_layout(title=FIGURE_TITLES[1], barmode="stack", yaxis_title="ms per verify step", **layout)

    f3 = go.Figure()
    multi = "summary_per_turn" in report
    ids = [f"{e['id']} t{e['turn']}" if multi else e["id"] for e in prompts]
    for m in methods:
        f3.add_bar(x=ids, y=[e["methods"][m]["tokens_per_s_wall"] for e in prompts], name=m, marker_color=color(m))
    f3.update_layout(title=FIGURE_TITLES[2], barmode="group", xaxis_title="prompt id" + (" and turn" if multi else ""),
                     xaxis_type="category", yaxis_title="tokens/s (wall clock, prefill included)", **layout)

    drafting = [m for m in methods if summary[m]["num_drafts"]]
    f4 = go.Figure()
    for m in drafting:
        rates = summary[m]["per_position_acceptance_rate"]
        f4.add_scatter(x=list(range(1, len(rates) + 1)), y=rates, mode="lines+markers", name=m,
                       line={"color": color(m), "width": 2.5}, marker={"color": color(m), "size": 7},
                       hovertemplate=f"{m} position %{{x}}: %{{y:.3f}}<extra></extra>")
    f4.update_layout(title=FIGURE_TITLES[3], xaxis_title="draft position k (depth in the tree)",
                     yaxis_title="drafting steps that accepted ≥ k drafts", yaxis_range=[0, 1.02],
                     xaxis_dtick=1, **layout)

    f5 = go.Figure()
    for m in drafting:
        hist = summary[m]["acceptance_histogram"]
        f5.add_bar(x=list(range(len(hist))), y=[v / summary[m]["num_drafts"] for v in hist], name=m,
                   marker_color=color(m))
    f5.update_layout(title=FIGURE_TITLES[4], barmode="group", xaxis_title="draft tokens accepted in the step",
                     yaxis_title="fraction of drafting steps", xaxis_dtick=1, **layout)
    for f in (f1, f2, f3, f4, f5):
        f.update_xaxes(**axis)
        f.update_yaxes(**axis)
    return [f1, f2, f3, f4, f5]


def _acceptance_cells(s: dict[str, Any]) -> str:
    """The table's acceptance columns: draft tokens verified and accepted, rate, mean acceptance length."""
    if not s["num_drafts"]:
        return "<td>–</td>" * 4
    return (f"<td>{s['num_draft_tokens']}</td><td>{s['num_accepted_tokens']}</td>"
            f"<td>{s['draft_acceptance_rate']:.1%}</td><td>{s['mean_acceptance_length']:.2f}</td>")


def _speed(x: float | None) -> str:
    return f"{x:.2f}x" if x else "-"


def write_html(report: dict[str, Any], path: Path) -> None:
    """One self-contained page (plotly.js inlined, works offline): summary table + the five figures."""
    import html

    figs = build_figures(report)
    parts = [f.to_html(full_html=False, include_plotlyjs=(i == 0)) for i, f in enumerate(figs)]
    heatmap = category_heatmap(report)
    category_card = ""
    if heatmap is not None:
        by_category = report["by_category"]
        winners = "; ".join(
            f"{html.escape(c)}: " + (f"<b>{html.escape(m)}</b> ({_speed(by_category[c][m]['speedup_vs_ar'])}, "
                                     f"τ {by_category[c][m]['tau']:.2f})" if m else "–")
            for c, m in report.get("best_by_category", {}).items())
        category_card = (f'<div class="card"><h2>{html.escape(HEATMAP_TITLE)}</h2>'
                         f'{heatmap.to_html(full_html=False, include_plotlyjs=False)}'
                         f'<p>best racer per category (the fastest drafting racer by wall clock): {winners}</p></div>')
    tables = {"all": report["summary"], **report.get("summary_per_turn", {})}
    multi = len(tables) > 1
    rows = "".join(
        f"<tr><td>{html.escape(m)}</td>" + (f"<td>{t}</td>" if multi else "") +
        f"<td>{s['tokens']}</td><td>{s['verify_steps']}</td><td>{s['tau']:.2f}</td>{_acceptance_cells(s)}"
        f"<td>{s['tokens_per_s']:.1f}</td><td>{s['tokens_per_s_wall']:.1f}</td><td>{_speed(s['speedup_vs_ar'])}</td>"
        f"<td>{s['draft_ms_per_step']:.2f}</td><td>{s['search_ms_per_step']:.2f}</td>"
        f"<td>{s['verify_ms_per_step']:.2f}</td></tr>"
        for m in report["config"]["methods"] for t, table in tables.items() for s in [table[m]])
    def listed(found: list[dict[str, Any]] | None) -> str:
        return ("not checked" if found is None else "0" if not found else
                "; ".join(f"{x['method']} on prompt {html.escape(x['prompt_id'])}"
                          + (f" turn {x['turn']}" if "turn" in x else "") + f" at token {x['position']}"
                          for x in found))

    mm_text, tie_text = listed(report["mismatches"]), listed(report.get("ties"))
    env = report["environment"]
    machine = html.escape(env["cpu"]) + ", " if env.get("cpu") else ""
    resolved = report["config"]["resolved"]
    source = (f"prompts of {html.escape(resolved['dataset'])} ({resolved['turns']} turn(s) each)"
              if resolved.get("dataset") else "prompts")
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>DART Arena: end-to-end benchmark</title>
<style>
:root {{ color-scheme: light dark; }}
body {{ font-family: system-ui, sans-serif; margin: 24px; background: Canvas; color: CanvasText; }}
.card {{ background: #ffffff; color: #222222; border: 1px solid #999999; border-radius: 6px; padding: 8px;
         margin: 16px 0; }}
table {{ border-collapse: collapse; }} td, th {{ border: 1px solid #999999; padding: 4px 10px; text-align: right; }}
</style></head><body>
<h1>End-to-end benchmark</h1>
<p>{report['config']['n_prompts']} {source}, max {report['config']['max_new_tokens']} new tokens,
temperature {report['config']['temperature']}; torch {html.escape(env['torch'])} on {html.escape(env['device'])}
({machine}{env['torch_threads']} threads). Tokens/s include the prefill (engine: sum of the step stopwatches; wall:
clock around each generation); vs AR by wall tokens/s; ms are means per verify step. Drafted and accepted count draft
tokens over the drafting steps (verify steps with at least one draft token), pooled over the prompts; the acceptance
rate is accepted / drafted and the mean acceptance length the tokens per drafting step, bonus included (vLLM's
metrics: docs/metrics.md).</p>
<div class="card"><table><tr><th>method</th>{'<th>turn</th>' if multi else ''}<th>tokens</th><th>steps</th><th>τ</th>
<th>drafted</th><th>accepted</th><th>acceptance rate</th><th>mean acceptance length</th>
<th>tok/s eng</th><th>tok/s wall</th><th>vs AR wall</th><th>draft ms</th><th>search ms</th><th>verify ms</th></tr>
{rows}</table>
<p>mismatches vs AR: {mm_text}</p><p>rounding ties vs AR (greedy_check): {tie_text}</p></div>
{category_card}
{''.join(f'<div class="card"><h2>{html.escape(t)}</h2>{p}</div>' for t, p in zip(FIGURE_TITLES, parts, strict=True))}
</body></html>
"""
    path.write_text(page, encoding="utf-8")
