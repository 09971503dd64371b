"""A benchmark's rows: one row is one racer run one way, so a racer may fill several rows of one table. A row's key
is the racer's key, or ``racer:variant`` for a variant of it (``suffix:warm``: the suffix racer drafting from its
answers to the run's earlier prompts). A racer that remembers across requests
(:func:`dart_core.engine.drafter.remembers`) runs as two rows: **cold**, its plain key, a fresh empty memory at each
conversation's start, and **warm**, one memory for the whole run fed with its own earlier answers in prompt order.
Every surface that reads a row's figures (tables, ``e2e.json``, the app's standings) finds the racer and its label
here, so a later variant (a setting, say) is one more row, not a new kind of table."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from dart_core.racers.registry import label

COLD, WARM, OFF = "cold", "warm", "off"
MEMORY_CHOICES = (COLD, WARM, "both", "all")
VARIANT_WORDS = {OFF: "no memory"}  # a variant's words in a row's label, where they differ from its key
SEPARATOR = ":"
MEMORY_NOTE = {
    COLD: "cold: the racer's memory starts empty at each conversation's start (within a conversation of two turns "
          "it holds its own first answer at the second)",
    OFF: "off (row key RACER:off, with --memory all, for a racer whose memory is an option: the N-gram memory): the "
         "racer with its memory off, drafting as without it",
    WARM: "warm (row key RACER:warm): one memory for the whole run (a fresh one for each seed's run, none of the "
          "warm-up's answers), fed with this row's own answers to the run's earlier prompts in prompt order; never "
          "another racer's or another row's answer, never the answer being raced",
}


def row_key(racer_key: str, variant: str | None = None) -> str:
    """The key of ``racer_key``'s row run as ``variant`` (None: the racer's own key)."""
    return racer_key if variant is None else f"{racer_key}{SEPARATOR}{variant}"


def row_racer(key: str) -> str:
    """The racer a row runs."""
    return key.split(SEPARATOR, 1)[0]


def row_variant(key: str) -> str | None:
    """How a row runs its racer (None: as loaded, or cold for a racer that remembers)."""
    parts = key.split(SEPARATOR, 1)
    return parts[1] if len(parts) > 1 else None


def row_label(key: str, *, remembers: bool = False) -> str:
    """A row's label for people: the racer's label, with its variant (``(cold)`` for a racer that remembers run
    from an empty memory)."""
    variant = row_variant(key) or (COLD if remembers else None)
    name = label(row_racer(key))
    return name if variant is None else f"{name} ({VARIANT_WORDS.get(variant, variant)})"


def memory_rows(racers: Iterable[str], remembers: Callable[[str], bool], memory: str = "both",
                forgets: Callable[[str], bool] = lambda key: False) -> list[str]:
    """The rows of ``racers`` in their order: a racer that remembers as its cold and/or warm row (``memory``:
    ``cold``, ``warm``, ``both``, or ``all``: both, after its row with the memory off where it ``forgets``), any
    other racer as itself."""
    if memory not in MEMORY_CHOICES:
        raise ValueError(f"memory must be one of {', '.join(MEMORY_CHOICES)}, got {memory!r}")
    rows: list[str] = []
    for key in racers:
        if not remembers(key):
            rows.append(key)
            continue
        rows += [row_key(key, OFF)] if memory == "all" and forgets(key) else []
        rows += [key] if memory in (COLD, "both", "all") else []
        rows += [row_key(key, WARM)] if memory in (WARM, "both", "all") else []
    return rows
