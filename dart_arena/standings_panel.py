"""The "Measured on this host" panel: the pooled table of the last ``python -m dart_core.bench e2e`` run for the
loaded models (``dart_core.race.standings``), beside the live race, whose single prompt swings its ratios from
prompt to prompt (measured: docs/benchmarks.md#measurements-behind-design-choices). No run found (or none
readable) gives one line with the command that measures them. A row is a racer or a variant of one (a racer that
remembers: cold and warm), named by the label the run gave it; a run of two turns (MT-bench ``--turns 2``) adds its
second turns' table. Plain HTML strings, no Gradio; styled by
``dart_arena/style.css``.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dart_core import BASELINE, label
from dart_core.race import (
    ConcurrencyRun,
    PositionRun,
    Standings,
    find_concurrency_run,
    find_position_run,
    find_standings,
    row_label,
    row_racer,
)

# (summary field, column header, format); a column no row has is left out (older runs lack newer fields)
COLUMNS: list[tuple[str, str, str]] = [
    ("tau", "τ", ".2f"),
    ("tokens_per_s_wall", "tok/s (wall)", ".1f"),
    ("speedup_vs_ar", "vs AR", ".2f"),
    ("tokens_per_s", "tok/s (engine)", ".1f"),
    ("draft_acceptance_rate", "draft acceptance", ".1%"),
    ("draft_ms_per_step", "draft ms", ".2f"),
    ("search_ms_per_step", "search ms", ".2f"),
    ("verify_ms_per_step", "verify ms", ".2f"),
    ("tokens", "tokens", ",d"),
    ("verify_steps", "steps", ",d"),
]


@dataclass(frozen=True)
class StandingsPanel:
    """What the panel looks for: the loaded models' identities (``dart_core.race.standings.models_identity``),
    where runs are, the loaded device and dtype, and the command to suggest when none is found."""

    models: dict[str, Any]
    root: Path
    device: str
    dtype: str
    command: str
    position_command: str = ""  # the ``bench long`` command for these models
    concurrency_command: str = ""  # the ``bench concurrency`` command for these models

    def __call__(self) -> str:
        """The panel's HTML now (a run finished since the page was served shows on the next load)."""
        found = self.standings()
        position = position_html(self.position_run(), self.position_command)
        position += concurrency_html(self.concurrency_run(), self.concurrency_command)
        sampled = ""
        if found is not None and not found.spread:
            sampled = (f'<div class="standings-hint">Sampled figures (mean and spread over seeds): '
                       f'<code>{html.escape(self.command)} --temperature 0.7 --top-p 0.9 --seeds 3</code></div>')
        return standings_html(found, self.command, self.root, loaded=(self.device, self.dtype)) + sampled + position


    def standings(self) -> Standings | None:
        """The last e2e run for the loaded models (on the loaded device and dtype first), if any."""
        return find_standings(self.models, root=self.root, device=self.device, dtype=self.dtype)

    def position_run(self) -> PositionRun | None:
        """The last ``bench long`` run for the loaded models, if any."""
        return find_position_run(self.models, root=self.root)

    def concurrency_run(self) -> ConcurrencyRun | None:
        """The last stream-count sweep for the loaded models, if any."""
        return find_concurrency_run(self.models, root=self.root)


def concurrency_html(run: ConcurrencyRun | None, command: str) -> str:
    """Each racer's speedup over batched plain decoding per stream count and its crossover, from the last
    ``bench concurrency`` sweep for these models, or the command that makes one."""
    if run is None:
        return (f'<div class="standings-hint">Where speculation stops paying as streams are decoded together: '
                f"<code>{html.escape(command)}</code></div>" if command else "")
    head = "".join(f"<th>B={b}</th>" for b in run.streams)
    body = ""
    for m, speedups in run.speedup.items():
        if m == BASELINE:
            continue
        cross = run.crossover.get(m)
        where = f"B={cross}" if cross is not None else f"none up to B={run.streams[-1]}"
        body += (f'<tr><td class="lane-name lane-{html.escape(m)}">{html.escape(label(m))}</td>'
                 + "".join(f"<td>{_cell(v, '.2f', m, 'speedup_vs_ar')}</td>" for v in speedups)
                 + f"<td>{where}</td></tr>")
    check = f"greedy check: {run.mismatches} mismatch" + ("es" if run.mismatches != 1 else "")
    return (f'<table class="standings-table standings-concurrency"><thead><tr><th>× batched AR by streams</th>'
            f"{head}<th>stops paying at</th></tr></thead><tbody>{body}</tbody></table>"
            f'<div class="standings-command">{html.escape(run.setup)}, {check}; by '
            f"<code>{html.escape(run.command)}</code> ({html.escape(run.date)})</div>")


def shown_path(path: Path) -> str:
    """A path as the page shows it: the home directory as ``~`` (a visitor needs no user name)."""
    home = str(Path.home())
    text = str(path)
    return "~" + text[len(home):] if home not in ("", "/") and (text == home or text.startswith(home + "/")) \
        else text


def _cell(value: Any, spec: str, key: str, field: str) -> str:
    if field == "speedup_vs_ar":
        return "1.00×" if key == BASELINE else ("–" if value is None else f"{value:{spec}}×")
    if value is None or (field in ("draft_ms_per_step", "search_ms_per_step") and not value):
        return "–"
    try:
        return f"{value:{spec}}"
    except (TypeError, ValueError):
        return html.escape(str(value))


def row_cells(row: dict[str, Any]) -> str:
    """A row's name cell: its label, in its racer's lane colour."""
    key = row["key"]
    return (f'<td class="lane-name lane-{html.escape(row_racer(key))}">'
            f'{html.escape(row.get("label") or label(row_racer(key)))}</td>')


def figures_table(rows: list[dict[str, Any]], title: str = "racer", css: str = "") -> str:
    """The racers' figures, one row each, only the columns some row has."""
    columns = [c for c in COLUMNS if any(row.get(c[0]) is not None for row in rows)]
    head = "".join(f"<th>{html.escape(h)}</th>" for _, h, _ in columns)
    body = "".join("<tr>" + row_cells(row) + "".join(f"<td>{_cell(row.get(f), spec, row['key'], f)}</td>"
                                                     for f, _, spec in columns) + "</tr>"
                   for row in rows)
    classes = f"standings-table {css}".strip()
    return (f'<table class="{classes}"><thead><tr><th>{html.escape(title)}</th>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table>")


def turns_html(found: Standings) -> str:
    """The second (and later) turns of a run of several: each racer answering the follow-up question after its own
    first answer, where its context and memory hold that answer."""
    return "".join(figures_table(rows, f"turn {t} only (the follow-up, after each racer's own first answer)",
                                 "standings-turn")
                   for t, rows in found.turn_rows.items() if t != "1")


def category_html(found: Standings) -> str:
    """The run's racers × categories table (τ and speedup vs AR in each cell, the category's best racer last),
    when the run had several categories (``bench e2e`` on MT-bench or the bundle's held-out prompts)."""
    if not found.by_category:
        return ""
    keys = [row["key"] for row in found.rows]
    head = "".join(f'<th class="lane-name lane-{html.escape(row_racer(row["key"]))}">'
                   f'{html.escape(row.get("label") or label(row_racer(row["key"])))}</th>' for row in found.rows)
    body = ""
    for category, figures in found.by_category.items():
        cells = "".join(f"<td>{_cell(figures.get(k, {}).get('tau'), '.2f', k, 'tau')} · "
                        f"{_cell(figures.get(k, {}).get('speedup_vs_ar'), '.2f', k, 'speedup_vs_ar')}</td>"
                        for k in keys)
        best = found.best_by_category.get(category)
        names = {row["key"]: row.get("label") or label(row_racer(row["key"])) for row in found.rows}
        body += (f"<tr><td>{html.escape(category)}</td>{cells}"
                 f"<td>{html.escape(names.get(best, best)) if best else '–'}</td></tr>")
    return (f'<table class="standings-table standings-categories"><thead><tr><th>by kind of prompt (τ · vs AR)</th>'
            f'{head}<th>best</th></tr></thead><tbody>{body}</tbody></table>')


def position_html(run: PositionRun | None, command: str) -> str:
    """τ by output position of the last ``bench long`` run for these models (one row per racer), or the command
    that makes it."""
    if run is None:
        return (f'<div class="standings-hint">τ by position in a long answer: <code>{html.escape(command)}</code>'
                "</div>" if command else "")
    head = "".join(f"<th>{a}–{b}</th>" for a, b in run.spans)
    body = "".join(f'<tr><td class="lane-name lane-{html.escape(m)}">{html.escape(label(m))}</td>'
                   + "".join(f"<td>{_cell(t, '.2f', m, 'tau')}</td>" for t in taus) + "</tr>"
                   for m, taus in run.tau.items())
    return (f'<table class="standings-table standings-position"><thead><tr><th>τ by output position</th>{head}'
            f'</tr></thead><tbody>{body}</tbody></table><div class="standings-command">by '
            f"<code>{html.escape(run.command)}</code> ({html.escape(run.date)})</div>")


def spread_html(found: Standings) -> str:
    """A sampled run over several seeds (``bench e2e --seeds K``): each racer's mean ± spread of τ and speedup."""
    if not found.spread:
        return ""

    def cell(f: dict[str, Any] | None, spec: str) -> str:
        return "–" if not f else f"{f['mean']:{spec}} ± {f['std']:{spec}}"

    rows = "".join(f'<tr><td class="lane-name lane-{html.escape(m)}">{html.escape(label(m))}</td>'
                   f"<td>{cell(f.get('tau'), '.2f')}</td><td>{cell(f.get('speedup_vs_ar'), '.2f')}</td></tr>"
                   for m, f in found.spread.items())
    return ('<table class="standings-table standings-spread"><thead><tr><th>over the seeds</th><th>τ</th>'
            f"<th>vs AR</th></tr></thead><tbody>{rows}</tbody></table>")


def standings_html(found: Standings | None, command: str, root: Path,
                   loaded: tuple[str, str] | None = None) -> str:
    """The panel: the run's table with what it measured and how, or the hint with ``command``."""
    if found is None:
        return (f'<div class="standings-hint">No <code>bench e2e</code> run for these models in '
                f'<code>{html.escape(shown_path(root))}</code> yet: measure them on this host with '
                f'<code>{html.escape(command)}</code></div>')
    turns = f" × {found.turns} turns" if found.turns > 1 else ""
    budget = f", up to {found.max_new_tokens:,} new tokens each" if found.max_new_tokens else ""
    check = "" if found.mismatches is None else f", greedy check: {found.mismatches} mismatch" + (
        "es" if found.mismatches != 1 else "")
    facts = (f"{found.prompts} prompts{turns} ({html.escape(found.prompt_source)}){budget}, "
             f"{html.escape(found.decoding)}, {html.escape(found.dtype)} on {html.escape(found.device)}{check}; "
             f"measured {html.escape(found.date)}")
    notes = []
    if loaded is not None and not found.same_setup:
        notes.append(f"this app runs {html.escape(loaded[1])} on {html.escape(loaded[0])}: no run on that setup "
                     "was found")
    notes += [f"{html.escape(row_label(m))} left out: {html.escape(why)}" for m, why in found.hidden.items()]
    note_html = "".join(f'<div class="standings-note">{n}</div>' for n in notes)
    return (f'<div class="standings"><div class="standings-facts">{facts}</div>'
            f'{figures_table(found.rows)}{spread_html(found)}{turns_html(found)}{category_html(found)}{note_html}'
            f'<div class="standings-command">by <code>{html.escape(found.command)}</code> '
            f'(<code>{html.escape(shown_path(found.path))}</code>); tok/s include the prefill, vs AR by wall '
            "clock</div></div>")

