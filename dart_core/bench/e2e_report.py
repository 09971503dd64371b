"""The end-to-end benchmark's report for people: five plotly figures (τ per step with its running mean, the
latency split, tokens/s per prompt, the per-position acceptance rate, the acceptance histogram), the summary
table with the acceptance metrics (docs/metrics.md) and, for a prompt set of two or more categories, a racers ×
categories heatmap of the speedup vs AR with τ in each cell and the best racer per category, and for a run of two
turns (``--turns 2``) the same table and heatmap for each turn apart, in a self-contained ``e2e.html`` that works
offline, from the ``e2e.json`` report that ``dart_core.bench.e2e`` writes. A row is a racer or a variant of one
(``dart_core.race.rows``: ``suffix:warm``), drawn in its racer's colour, a variant hatched or dashed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dart_core.race import row_racer, row_variant
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


def turn_entries(report: dict[str, Any], turn: str | None) -> list[dict[str, Any]]:
    """The prompt entries of one turn (``"1"``, ``"2"``; None: every entry)."""
    return [e for e in report["prompts"] if turn is None or str(e.get("turn")) == turn]


def category_heatmap(report: dict[str, Any], turn: str | None = None) -> Any | None:
    """Racers (rows) × categories (columns): the colour is the speedup vs AR by wall clock (the wall-clock
    tokens/s in a run without AR), each cell says τ and the speedup, ★ marks the category's best racer
    (``best_by_category``); ``turn``: that turn's figures only (``by_turn``); None for fewer than two categories
    (the summary table says it all)."""
    import plotly.graph_objects as go

    figures = report if turn is None else report["by_turn"][turn]
    by_category = figures.get("by_category") or {}
    if len(by_category) < 2:
        return None
    methods = report["config"]["methods"]
    best = figures.get("best_by_category") or {}
    counts = category_counts(turn_entries(report, turn))
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
    title = HEATMAP_TITLE if turn is None else f"Turn {turn}: {HEATMAP_TITLE}"
    fig.update_layout(title=title, template="plotly_white", paper_bgcolor="#ffffff", plot_bgcolor="#ffffff",
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
        return racer_color(row_racer(m))

    def hatch(m: str) -> dict[str, Any]:
        return {"marker_pattern_shape": "/"} if row_variant(m) else {}

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
        f1.add_scatter(x=xs, y=mean, mode="lines", name=f"{m} running mean",
                       line={"color": color(m), "width": 2.5, "dash": "dash" if row_variant(m) else "solid"},
                       legendgroup=m)
    f1.update_layout(title=FIGURE_TITLES[0], xaxis_title="verify step (all prompts in order)",
                     yaxis_title="tokens per step", **layout)

    f2 = go.Figure()
    for part in ("draft", "search", "verify"):  # one stack per row
        f2.add_bar(x=methods, y=[summary[m][f"{part}_ms_per_step"] for m in methods], name=f"{part} ms",
                   marker_color=SPLIT_COLORS[part])
    f2.update_layout(title=FIGURE_TITLES[1], barmode="stack", yaxis_title="ms per verify step", **layout)

    f3 = go.Figure()
    multi = "by_turn" in report
    ids = [f"{e['id']} t{e['turn']}" if multi else e["id"] for e in prompts]
    for m in methods:
        f3.add_bar(x=ids, y=[e["methods"][m]["tokens_per_s_wall"] for e in prompts], name=m, marker_color=color(m),
                   **hatch(m))
    f3.update_layout(title=FIGURE_TITLES[2], barmode="group", xaxis_title="prompt id" + (" and turn" if multi else ""),
                     xaxis_type="category", yaxis_title="tokens/s (wall clock, prefill included)", **layout)

    drafting = [m for m in methods if summary[m]["num_drafts"]]
    f4 = go.Figure()
    for m in drafting:
        rates = summary[m]["per_position_acceptance_rate"]
        f4.add_scatter(x=list(range(1, len(rates) + 1)), y=rates, mode="lines+markers", name=m,
                       line={"color": color(m), "width": 2.5, "dash": "dash" if row_variant(m) else "solid"},
                       marker={"color": color(m), "size": 7},
                       hovertemplate=f"{m} position %{{x}}: %{{y:.3f}}<extra></extra>")
    f4.update_layout(title=FIGURE_TITLES[3], xaxis_title="draft position k (depth in the tree)",
                     yaxis_title="drafting steps that accepted ≥ k drafts", yaxis_range=[0, 1.02],
                     xaxis_dtick=1, **layout)

    f5 = go.Figure()
    for m in drafting:
        hist = summary[m]["acceptance_histogram"]
        f5.add_bar(x=list(range(len(hist))), y=[v / summary[m]["num_drafts"] for v in hist], name=m,
                   marker_color=color(m), **hatch(m))
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


TABLE_HEAD = ("<tr><th>row</th><th>tokens</th><th>steps</th><th>τ</th><th>drafted</th><th>accepted</th>"
              "<th>acceptance rate</th><th>mean acceptance length</th><th>tok/s eng</th><th>tok/s wall</th>"
              "<th>vs AR wall</th><th>draft ms</th><th>search ms</th><th>verify ms</th><th>memory</th></tr>")


def summary_table(summary: dict[str, dict[str, Any]], methods: list[str], labels: dict[str, str]) -> str:
    """One row per racer or variant of one: its figures and, for a row that remembers, the earlier answers its
    memory held as a generation started (mean, max)."""
    import html

    def memory(s: dict[str, Any]) -> str:
        held = s.get("memory_answers")
        return "–" if held is None else f"{held['mean']:.1f} (max {held['max']})"

    rows = "".join(
        f'<tr><td title="{html.escape(labels.get(m, m))}">{html.escape(m)}</td>'
        f"<td>{s['tokens']}</td><td>{s['verify_steps']}</td><td>{s['tau']:.2f}</td>{_acceptance_cells(s)}"
        f"<td>{s['tokens_per_s']:.1f}</td><td>{s['tokens_per_s_wall']:.1f}</td><td>{_speed(s['speedup_vs_ar'])}</td>"
        f"<td>{s['draft_ms_per_step']:.2f}</td><td>{s['search_ms_per_step']:.2f}</td>"
        f"<td>{s['verify_ms_per_step']:.2f}</td><td>{memory(s)}</td></tr>"
        for m in methods for s in [summary[m]])
    return f"<table>{TABLE_HEAD}{rows}</table>"


def category_card(report: dict[str, Any], turn: str | None = None) -> str:
    """The racers × categories heatmap with the best racer per category (of one turn when given), or nothing for
    fewer than two categories."""
    import html

    heatmap = category_heatmap(report, turn)
    if heatmap is None:
        return ""
    figures = report if turn is None else report["by_turn"][turn]
    by_category = figures["by_category"]
    winners = "; ".join(
        f"{html.escape(c)}: " + (f"<b>{html.escape(m)}</b> ({_speed(by_category[c][m]['speedup_vs_ar'])}, "
                                 f"τ {by_category[c][m]['tau']:.2f})" if m else "–")
        for c, m in figures.get("best_by_category", {}).items())
    title = HEATMAP_TITLE if turn is None else f"Turn {turn}: {HEATMAP_TITLE}"
    return (f'<div class="card"><h2>{html.escape(title)}</h2>'
            f'{heatmap.to_html(full_html=False, include_plotlyjs=False)}'
            f'<p>best racer per category (the fastest drafting racer by wall clock): {winners}</p></div>')


def turn_cards(report: dict[str, Any]) -> str:
    """For a run of several turns, each turn apart: its table and its category heatmap (the second turn: every
    row answering the follow-up after its own first answer)."""
    methods, labels = report["config"]["methods"], report["config"].get("row_labels", {})
    out = ""
    for t, figures in (report.get("by_turn") or {}).items():
        what = "the first question" if t == "1" else "the follow-up, after the row's own answer to the turn before"
        out += (f'<div class="card"><h2>Turn {t}: {what}</h2>{summary_table(figures["summary"], methods, labels)}'
                f"</div>{category_card(report, t)}")
    return out


def write_html(report: dict[str, Any], path: Path) -> None:
    """One self-contained page (plotly.js inlined, works offline): summary table + the five figures, and each turn
    apart for a run of several."""
    import html

    figs = build_figures(report)
    parts = [f.to_html(full_html=False, include_plotlyjs=(i == 0)) for i, f in enumerate(figs)]
    methods, labels = report["config"]["methods"], report["config"].get("row_labels", {})
    pooled = summary_table(report["summary"], methods, labels)
    memory_notes = "".join(f"<p>{html.escape(note)}</p>" for k, note in report["notes"].items()
                           if k.startswith("memory_") and report["config"].get("remembering"))
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
<div class="card">{'<h2>Both turns pooled</h2>' if report.get('by_turn') else ''}{pooled}{memory_notes}
<p>mismatches vs AR: {mm_text}</p><p>rounding ties vs AR (greedy_check): {tie_text}</p></div>
{category_card(report)}
{turn_cards(report)}
{''.join(f'<div class="card"><h2>{html.escape(t)}</h2>{p}</div>' for t, p in zip(FIGURE_TITLES, parts, strict=True))}
</body></html>
"""
    path.write_text(page, encoding="utf-8")
