"""The race's live plotly figures: τ per step, drafting latency per step, tokens/s over each method's own clock,
the per-position acceptance rate, and the last draft tree with its accepted path.

Figures have transparent backgrounds, mid-grey grid lines and method colours that read on white and on near-black;
``dart_arena/style.css`` recolours the axis text in the dark theme, so the plots follow the page's theme.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio

from dart_core import BASELINE, label, racer_color
from dart_core.race import Lane

TEXT = "#374151"  # light theme; style.css overrides it under .dark
GRID = "rgba(128, 128, 128, 0.22)"
HEIGHT = 300
TREE_MAX_NODES = 80  # beyond this the labels would overlap: show the accepted path and the top of the tree


def _template() -> dict[str, Any]:
    """Plotly's default template cut to what 2-D scatter plots read: the whole one (3-D, polar, geo, every trace
    type's defaults) is 7 KB of JSON in each figure, sent with every plot update and kept, with the page's last
    figures, in each visitor's Gradio session state; this is 0.9 KB and draws the same."""
    full = pio.templates["plotly"].to_plotly_json()
    unused = ("polar", "ternary", "coloraxis", "colorscale", "scene", "geo")
    return {"layout": {k: v for k, v in full["layout"].items() if k not in unused},
            "data": {"scatter": full["data"]["scatter"]}}


TEMPLATE = _template()


def color(method: str) -> str:
    return racer_color(method)


def _figure(traces: list[dict[str, Any]], title: str, x: str, y: str, *, height: int = HEIGHT,
            empty: str | None = None, xaxis: dict[str, Any] | None = None,
            yaxis: dict[str, Any] | None = None) -> go.Figure:
    """One validated construction from plain dicts (several times faster than ``update_*`` calls, which
    matters at a few UI updates per second)."""
    axis = {"showgrid": True, "gridcolor": GRID, "zerolinecolor": GRID, "linecolor": GRID}
    layout: dict[str, Any] = {
        "title": {"text": title, "x": 0.01, "xanchor": "left", "font": {"size": 14}},
        "height": height, "margin": {"l": 52, "r": 12, "t": 64, "b": 42},
        "paper_bgcolor": "rgba(0,0,0,0)", "plot_bgcolor": "rgba(0,0,0,0)", "font": {"color": TEXT, "size": 12},
        "legend": {"orientation": "h", "yanchor": "bottom", "y": 1.0, "xanchor": "right", "x": 1.0,
                   "bgcolor": "rgba(0,0,0,0)", "font": {"size": 11}},
        "hovermode": "closest", "uirevision": "race", "template": TEMPLATE,
        "xaxis": {**axis, "title": {"text": x, "standoff": 6}, **(xaxis or {})},
        "yaxis": {**axis, "title": {"text": y, "standoff": 6}, "rangemode": "tozero", **(yaxis or {})},
    }
    if empty is not None:
        layout["annotations"] = [{"text": empty, "showarrow": False, "x": 0.5, "y": 0.5, "xref": "paper",
                                  "yref": "paper", "font": {"size": 13, "color": "#9ca3af"}}]
        layout["xaxis"]["visible"] = layout["yaxis"]["visible"] = False
    return go.Figure(data=traces, layout=layout)


def _verify_steps(lane: Lane) -> list[Any]:
    return [s for s in lane.steps if not s.prefill]


def _sizes(steps: list[Any]) -> list[list[int]]:
    """Each step's nodes verified and nodes drafted (below the root): the tree budget's choice, step by step."""
    return [[max(s.tree_size - 1, 0), max(s.drafted_size - 1, 0)] for s in steps]


def tau_figure(lanes: Iterable[Lane]) -> go.Figure:
    """Tokens per verify step (accepted drafts + bonus) as dots, the running mean τ as a line."""
    traces: list[dict[str, Any]] = []
    lanes = [lane for lane in lanes if _verify_steps(lane)]
    longest = max((len(_verify_steps(lane)) for lane in lanes if lane.method != BASELINE), default=0)
    for lane in lanes:
        steps = _verify_steps(lane)
        if lane.method == BASELINE and longest:  # τ = 1 by definition: a reference line over the drafters' steps
            traces.append({"type": "scatter", "x": [1, longest], "y": [1, 1], "mode": "lines",
                           "name": f"{label(BASELINE)} (τ = 1)", "hoverinfo": "skip",
                           "line": {"color": color(BASELINE), "width": 2, "dash": "dot"}})
            continue
        ys = [len(s.tokens) for s in steps]
        xs = list(range(1, len(ys) + 1))
        mean, total = [], 0
        for k, y in enumerate(ys, 1):
            total += y
            mean.append(total / k)
        c, name = color(lane.method), lane.label
        if lane.method != BASELINE:
            traces.append({"type": "scatter", "x": xs, "y": ys, "mode": "markers", "name": f"{name} per step",
                           "legendgroup": lane.method, "showlegend": False,
                           "marker": {"color": c, "size": 5, "opacity": 0.45}, "customdata": _sizes(steps),
                           "hovertemplate": f"{name} step %{{x}}: %{{y}} tokens<br>%{{customdata[0]}} of "
                                            "%{customdata[1]} drafted nodes verified<extra></extra>"})
        traces.append({"type": "scatter", "x": xs, "y": mean, "mode": "lines", "name": name,
                       "legendgroup": lane.method,
                       "line": {"color": c, "width": 2.5, "dash": "dot" if lane.method == BASELINE else "solid"},
                       "hovertemplate": f"{name} running τ after %{{x}} steps: %{{y:.2f}}<extra></extra>"})
    return _figure(traces, "τ per step (dots) and running mean (line)", "verify step", "tokens per step",
                   empty=None if traces else "waiting for a prompt")


def latency_figure(lanes: Iterable[Lane]) -> go.Figure:
    """Drafting latency per step: draft forward(s) + tree search, per drafting method (AR drafts nothing)."""
    traces: list[dict[str, Any]] = []
    for lane in lanes:
        steps = _verify_steps(lane)
        if lane.method == BASELINE or not steps:
            continue
        traces.append({
            "type": "scatter", "x": list(range(1, len(steps) + 1)), "y": [s.draft_ms + s.search_ms for s in steps],
            "customdata": [[s.draft_ms, s.search_ms, s.verify_ms, *n] for s, n in zip(steps, _sizes(steps),
                                                                                        strict=True)],
            "mode": "lines",
            "name": f"{lane.label} draft + search", "line": {"color": color(lane.method), "width": 2, "shape": "hv"},
            "hovertemplate": (f"{lane.label} step %{{x}}: %{{y:.2f}} ms<br>draft %{{customdata[0]:.2f}} · "
                              "search %{customdata[1]:.2f} · verify %{customdata[2]:.2f} ms<br>%{customdata[3]} of "
                              "%{customdata[4]} drafted nodes verified<extra></extra>")})
    return _figure(traces, "Drafting latency per step (draft + tree search)", "verify step", "ms",
                   empty=None if traces else "waiting for a prompt")


def speed_figure(lanes: Iterable[Lane]) -> go.Figure:
    """Tokens/s so far against each method's own clock (prefill included, like the summary)."""
    traces: list[dict[str, Any]] = []
    for lane in lanes:
        if not lane.steps:
            continue
        xs, ys, ms, toks = [], [], 0.0, 0
        for s in lane.steps:
            ms += s.total_ms
            toks += len(s.tokens)
            xs.append(ms / 1e3)
            ys.append(toks / (ms / 1e3) if ms > 0 else 0.0)
        traces.append({"type": "scatter", "x": xs, "y": ys, "mode": "lines", "name": lane.label,
                       "line": {"color": color(lane.method), "width": 2.5,
                                "dash": "dot" if lane.method == BASELINE else "solid"},
                       "hovertemplate": f"{lane.label} at %{{x:.3f}} s: %{{y:.1f}} tok/s<extra></extra>"})
    return _figure(traces, "Tokens/s over time (each method's own clock)", "own time (s)", "tokens/s",
                   empty=None if traces else "waiting for a prompt")


def acceptance_figure(lanes: Iterable[Lane]) -> go.Figure:
    """Per drafting method, the share of its drafting steps that accepted at least k draft tokens, by position k
    (vLLM's per-position acceptance rate, ``RunStats.per_position_acceptance_rate``): how fast its drafts decay
    with depth."""
    traces: list[dict[str, Any]] = []
    for lane in lanes:
        st = lane.stats()
        if st is None or not st.num_drafts:
            continue
        rates = list(st.per_position_acceptance_rate)
        c = color(lane.method)
        traces.append({"type": "scatter", "x": list(range(1, len(rates) + 1)), "y": rates, "mode": "lines+markers",
                       "name": lane.label, "line": {"color": c, "width": 2.5}, "marker": {"color": c, "size": 6},
                       "customdata": list(st.num_accepted_tokens_per_pos),
                       "hovertemplate": (f"{lane.label} position %{{x}}: %{{y:.1%}} of {st.num_drafts} drafting "
                                         "steps (%{customdata}) accepted it<extra></extra>")})
    return _figure(traces, "Per-position acceptance rate", "draft position (depth)", "steps accepting ≥ k drafts",
                   empty=None if traces else "no drafts verified yet",
                   xaxis={"dtick": 1}, yaxis={"range": [0, 1.02], "tickformat": ".0%", "rangemode": "normal"})


def _tree_layout(parents: list[int]) -> tuple[list[float], list[int]]:
    """y of each node: leaves on consecutive rows in depth-first order, parents centred over their children."""
    n = len(parents)
    kids: list[list[int]] = [[] for _ in range(n)]
    for i in range(1, n):
        kids[parents[i]].append(i)
    depth = [0] * n
    for i in range(1, n):
        depth[i] = depth[parents[i]] + 1
    y = [0.0] * n
    row = 0
    stack: list[tuple[int, bool]] = [(0, False)]
    while stack:  # iterative post-order, so deep trees cannot hit the recursion limit
        node, done = stack.pop()
        if done:
            y[node] = sum(y[c] for c in kids[node]) / len(kids[node])
            continue
        if not kids[node]:
            y[node] = float(row)
            row += 1
            continue
        stack.append((node, True))
        stack.extend((c, False) for c in reversed(kids[node]))
    return y, depth


def tree_figure(step: Any | None, token_label: Callable[[int], str], *, method: str | None = None) -> go.Figure:
    """The draft tree verified by ``step`` (its ``tree`` and ``accepted_nodes``): depth left to right, the
    accepted path drawn thick in the method's colour, the other nodes grey."""
    tree = getattr(step, "tree", None)
    title = f"Last {label(method)} draft tree" if method else "Last draft tree"
    if tree is None:
        return _figure([], title, "depth", "", empty="no draft tree yet")
    parents = [int(p) for p in tree.parents]
    tokens = [int(t) for t in tree.tokens]
    accepted = {int(i) for i in step.accepted_nodes}
    keep = list(range(len(parents)))
    if len(parents) > TREE_MAX_NODES:  # the accepted path, then the first nodes (best-first order of the search)
        chosen = accepted | set(range(TREE_MAX_NODES - len(accepted)))
        for i in list(chosen):  # keep every ancestor so the kept nodes still form a tree
            while parents[i] >= 0 and parents[i] not in chosen:
                i = parents[i]
                chosen.add(i)
        keep = sorted(chosen)
    index = {old: new for new, old in enumerate(keep)}
    sub_parents = [index[parents[i]] if parents[i] >= 0 else -1 for i in keep]
    y, depth = _tree_layout(sub_parents)
    c = color(method or "")
    edges: dict[bool, tuple[list[Any], list[Any]]] = {False: ([], []), True: ([], [])}
    for new, old in enumerate(keep):
        p = sub_parents[new]
        if p < 0:
            continue
        xs, ys = edges[old in accepted and keep[p] in accepted]
        xs.extend([depth[p], depth[new], None])
        ys.extend([y[p], y[new], None])
    on = [old in accepted for old in keep]
    traces = [
        {"type": "scatter", "x": edges[False][0], "y": edges[False][1], "mode": "lines",
         "line": {"color": GRID, "width": 1.2}, "hoverinfo": "skip", "showlegend": False},
        {"type": "scatter", "x": edges[True][0], "y": edges[True][1], "mode": "lines",
         "line": {"color": c, "width": 3.5}, "hoverinfo": "skip", "showlegend": False},
        {"type": "scatter", "x": depth, "y": y, "mode": "markers+text", "text": [token_label(tokens[o]) for o in keep],
         "textposition": "middle right", "textfont": {"size": 10},
         "marker": {"size": [11 if a else 7 for a in on], "color": [c if a else "#9ca3af" for a in on]},
         "customdata": [[o, "accepted" if a else "rejected"] for o, a in zip(keep, on, strict=True)],
         "hovertemplate": "node %{customdata[0]} · depth %{x} · %{customdata[1]}<br>%{text}<extra></extra>",
         "showlegend": False},
    ]
    shown = f" (showing {len(keep)})" if len(keep) < len(parents) else ""
    return _figure(traces, f"{title}: {len(parents)} nodes{shown}, {len(accepted) - 1} accepted",
                   "depth (root = last accepted token)", "", height=max(HEIGHT, 14 * int(max(y) + 1) + 110),
                   xaxis={"dtick": 1, "range": [-0.3, max(depth) + 1.2]},
                   yaxis={"visible": False, "autorange": "reversed", "rangemode": "normal"})


def concurrency_figure(run: Any) -> go.Figure:
    """The last ``bench concurrency`` sweep (a :class:`dart_core.race.ConcurrencyRun`): each racer's speedup over
    batched plain decoding against the number of streams, the break-even line at 1."""
    traces = [{"type": "scatter", "mode": "lines+markers", "name": label(m), "x": run.streams, "y": ys,
               "line": {"color": color(m), "dash": "dot" if m == BASELINE else "solid"}}
              for m, ys in run.speedup.items()]
    return _figure(traces, f"Speedup over batched plain decoding by streams ({run.setup})", "streams decoded together",
                   "× batched AR (wall clock)", xaxis={"type": "log", "tickvals": run.streams, "dtick": None},
                   yaxis={"rangemode": "tozero"})


def category_figure(found: Any) -> go.Figure:
    """The last e2e run's racers × kinds of prompt (a :class:`dart_core.race.Standings` with ``by_category``): the
    speedup over AR as colour, τ and the speedup written in each cell."""
    categories = list(found.by_category)
    racers = [row["key"] for row in found.rows if row["key"] != BASELINE]
    z = [[found.by_category[c].get(m, {}).get("speedup_vs_ar") for c in categories] for m in racers]
    text = [[f"τ {f['tau']:.2f}<br>{f['speedup_vs_ar']:.2f}×" if (f := found.by_category[c].get(m))
             and f.get("tau") is not None and f.get("speedup_vs_ar") is not None else "" for c in categories]
            for m in racers]
    trace = {"type": "heatmap", "x": categories, "y": [label(m) for m in racers], "z": z, "text": text,
             "texttemplate": "%{text}", "colorscale": "RdYlGn", "zmid": 1.0, "colorbar": {"title": {"text": "× AR"}},
             "hovertemplate": "%{y} on %{x}: %{z:.2f}× AR<extra></extra>"}
    return _figure([trace], "Speedup over AR by kind of prompt (τ in each cell)", "kind of prompt", "",
                   height=max(HEIGHT, 60 + 48 * len(racers)), yaxis={"rangemode": "normal", "autorange": "reversed"})


def position_figure(run: Any) -> go.Figure:
    """The last ``bench long`` run (a :class:`dart_core.race.PositionRun`): each racer's τ by output position."""
    x = [f"{a}–{b}" for a, b in run.spans]
    traces = [{"type": "scatter", "mode": "lines+markers", "name": label(m), "x": x, "y": taus,
               "line": {"color": color(m), "dash": "dot" if m == BASELINE else "solid"}}
              for m, taus in run.tau.items()]
    return _figure(traces, "τ by position in a long answer", "output position (tokens)", "τ (tokens per verify step)",
                   xaxis={"type": "category"})
