"""The end-to-end benchmark's report for people: four plotly figures (τ per step with its running mean, the
latency split, tokens/s per prompt, the accepted-length histogram) in a self-contained ``e2e.html`` that works
offline, from the ``e2e.json`` report that ``dart_core.bench.e2e`` writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dart_core.racers.registry import color as racer_color

FIGURE_TITLES = (
    "τ per verify step (tokens per step, running mean)",
    "Latency split per step (mean ms)",
    "Tokens/s per prompt",
    "Accepted length per verify step (histogram)",
)
SPLIT_COLORS = {"draft": "#ff7f0e", "search": "#2ca02c", "verify": "#9467bd"}


def build_figures(report: dict[str, Any]) -> list[Any]:
    """The four plotly figures of the report, with an explicit light template so they read on any page."""
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

    f4 = go.Figure()
    for m in methods:
        hist = summary[m]["accept_hist"]
        total = max(sum(hist.values()), 1)
        f4.add_bar(x=[int(k) for k in hist], y=[v / total for v in hist.values()], name=m, marker_color=color(m))
    f4.update_layout(title=FIGURE_TITLES[3], barmode="group", xaxis_title="tokens per verify step (accepted + bonus)",
                     yaxis_title="fraction of steps", **layout)
    for f in (f1, f2, f3, f4):
        f.update_xaxes(**axis)
        f.update_yaxes(**axis)
    return [f1, f2, f3, f4]


def _speed(x: float | None) -> str:
    return f"{x:.2f}x" if x else "-"


def write_html(report: dict[str, Any], path: Path) -> None:
    """One self-contained page (plotly.js inlined, works offline): summary table + the four figures."""
    import html

    figs = build_figures(report)
    parts = [f.to_html(full_html=False, include_plotlyjs=(i == 0)) for i, f in enumerate(figs)]
    tables = {"all": report["summary"], **report.get("summary_per_turn", {})}
    multi = len(tables) > 1
    rows = "".join(
        f"<tr><td>{html.escape(m)}</td>" + (f"<td>{t}</td>" if multi else "") +
        f"<td>{s['tokens']}</td><td>{s['verify_steps']}</td><td>{s['tau']:.2f}</td>"
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
({env['torch_threads']} threads). Tokens/s include the prefill (engine: sum of the step stopwatches; wall: clock
around each generation); vs AR by wall tokens/s; ms are means per verify step.</p>
<div class="card"><table><tr><th>method</th>{'<th>turn</th>' if multi else ''}<th>tokens</th><th>steps</th><th>τ</th>
<th>tok/s eng</th><th>tok/s wall</th><th>vs AR wall</th>
<th>draft ms</th><th>search ms</th><th>verify ms</th></tr>{rows}</table>
<p>mismatches vs AR: {mm_text}</p><p>rounding ties vs AR (greedy_check): {tie_text}</p></div>
{''.join(f'<div class="card"><h2>{html.escape(t)}</h2>{p}</div>' for t, p in zip(FIGURE_TITLES, parts, strict=True))}
</body></html>
"""
    path.write_text(page, encoding="utf-8")
