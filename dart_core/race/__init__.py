"""The race, for every front end: racers side by side on one target (:class:`Race`), their lanes and score
(:class:`Scoreboard`), the figures every surface shows (:func:`racer_figures`), the tie-aware greedy verdict, the
text tables of the command lines, and the standings (the last benchmark run measured on this host)."""

from dart_core.engine.greedy_check import Verdict
from dart_core.engine.prompt import PromptError, check_prompt, check_text, context_limit
from dart_core.race.figures import add_speedups, racer_figures, summarize_racers
from dart_core.race.memories import SHARED, RacerMemories
from dart_core.race.rows import (
    COLD,
    MEMORY_CHOICES,
    MEMORY_NOTE,
    OFF,
    WARM,
    memory_rows,
    row_key,
    row_label,
    row_racer,
    row_setting_items,
    row_settings,
    row_variant,
)
from dart_core.race.run import Race
from dart_core.race.scoreboard import Lane, RaceSettings, Scoreboard
from dart_core.race.standings import (
    ConcurrencyRun,
    PositionRun,
    Standings,
    command_line,
    find_concurrency_run,
    find_position_run,
    find_standings,
    models_identity,
    results_dir,
    run_record,
    suggest_command,
)
from dart_core.race.table import ACCEPTANCE_HEADER, acceptance_cells, method_width, per_position_lines, verdict_note

__all__ = [
    "ACCEPTANCE_HEADER",
    "COLD",
    "MEMORY_CHOICES",
    "MEMORY_NOTE",
    "OFF",
    "SHARED",
    "WARM",
    "ConcurrencyRun",
    "Lane",
    "PositionRun",
    "PromptError",
    "Race",
    "RaceSettings",
    "RacerMemories",
    "Scoreboard",
    "Standings",
    "Verdict",
    "acceptance_cells",
    "add_speedups",
    "check_prompt",
    "check_text",
    "command_line",
    "context_limit",
    "find_concurrency_run",
    "find_position_run",
    "find_standings",
    "memory_rows",
    "method_width",
    "models_identity",
    "per_position_lines",
    "racer_figures",
    "results_dir",
    "row_key",
    "row_label",
    "row_racer",
    "row_setting_items",
    "row_settings",
    "row_variant",
    "run_record",
    "suggest_command",
    "summarize_racers",
    "verdict_note",
]
