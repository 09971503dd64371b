"""A benchmark's rows: one row is one racer run one way, so a racer may fill several rows of one table. A row's key
is the racer's key, or ``racer:variant`` for a variant of it (``suffix:warm``: the suffix racer drafting from its
answers to the run's earlier prompts). A racer that remembers across requests
(:func:`dart_core.engine.drafter.remembers`) runs as two rows: **cold**, its plain key, a fresh empty memory at each
conversation's start, and **warm**, one memory for the whole run fed with its own earlier answers in prompt order.
Every surface that reads a row's figures (tables, ``e2e.json``, the app's standings) finds the racer and its label
here, so a later variant is one more row, not a new kind of table.

A row may also run its racer with other settings: ``racer:field=value[:field=value…]`` (``dart:max_nodes=12``,
``dart:budget=position``), a field of the racer's settings by name or flag, or ``budget`` (the tree budget's rule,
``dart_core.engine.budget``). A row that sets a size field (its tree's nodes, its chain's tokens) and no budget runs
that size fixed (budget ``off``), as a hand-picked size is meant; any other row runs under the run's budget. Such
rows race side by side with the racer's own row on the same prompts at the same moments (a racer that remembers
runs them cold)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

from dart_core.drafters.settings import check_settings
from dart_core.engine.budget import BUDGETS
from dart_core.engine.budget import OFF as BUDGET_OFF
from dart_core.racers.registry import label, racer

COLD, WARM, OFF = "cold", "warm", "off"
MEMORY_CHOICES = (COLD, WARM, "both", "all")
VARIANT_WORDS = {OFF: "no memory"}  # a variant's words in a row's label, where they differ from its key
SEPARATOR = ":"
SETTING = "="  # a variant made of settings: field=value items joined by SEPARATOR
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
    other racer and any row of settings (``racer:field=value``) as itself."""
    if memory not in MEMORY_CHOICES:
        raise ValueError(f"memory must be one of {', '.join(MEMORY_CHOICES)}, got {memory!r}")
    rows: list[str] = []
    for key in racers:
        if row_setting_items(key) or not remembers(key):
            rows.append(key)
            continue
        rows += [row_key(key, OFF)] if memory == "all" and forgets(key) else []
        rows += [key] if memory in (COLD, "both", "all") else []
        rows += [row_key(key, WARM)] if memory in (WARM, "both", "all") else []
    return rows


def row_setting_items(key: str) -> dict[str, str]:
    """The ``field=value`` items of a row of settings (``dart:max_nodes=12:budget=off``), in order; {} for any other
    row. A ValueError for a variant that mixes items with words, or names a field twice."""
    variant = row_variant(key)
    if variant is None or SETTING not in variant:
        return {}
    items: dict[str, str] = {}
    for part in variant.split(SEPARATOR):
        name, eq, value = part.partition(SETTING)
        name, value = name.strip().replace("-", "_"), value.strip()
        if not eq or not name or not value:
            raise ValueError(f"row {key!r}: {part!r} is not field=value (e.g. {row_racer(key)}:budget=position)")
        if name in items:
            raise ValueError(f"row {key!r} sets {name} twice")
        items[name] = value
    return items


def _value(kind: type, text: str, what: str) -> Any:
    if kind is bool:
        if text.lower() not in ("true", "false", "1", "0", "on", "off"):
            raise ValueError(f"{what}: expected true or false, got {text!r}")
        return text.lower() in ("true", "1", "on")
    try:
        return kind(text)
    except ValueError:
        raise ValueError(f"{what}: expected {'an integer' if kind is int else 'a number'}, got {text!r}") from None


def row_settings(key: str, base_for: Callable[[str], Any], budget: str) -> tuple[Any, str]:
    """A row's settings and tree budget rule: ``base_for(rule)`` (the racer's settings under that rule, with the
    command line's options) with the row's own items on top; ``budget`` is the run's rule, which a row keeps unless
    it names one, or sets a size field (then ``off``). A ValueError names an unknown field (and the racer's fields),
    a bad value or a bad rule."""
    items = row_setting_items(key)
    name = row_racer(key)
    rule = items.pop("budget", None)
    if rule is not None and rule not in BUDGETS:
        raise ValueError(f"row {key!r}: budget must be one of {', '.join(BUDGETS)}, got {rule!r}")
    fields = {k.name: k for k in racer(name).knobs()} | {k.flag.replace("-", "_"): k for k in racer(name).knobs()}
    unknown = [f for f in items if f not in fields]
    if unknown:
        known = ", ".join(["budget", *(k.name for k in racer(name).knobs())])
        raise ValueError(f"row {key!r}: {label(name)} has no setting {unknown[0]!r} (its settings: {known})")
    if rule is None:
        rule = BUDGET_OFF if any(fields[f].size for f in items) else budget
    base = base_for(rule)
    given = {fields[f].name: _value(fields[f].kind, v, f"row {key!r}: {f}") for f, v in items.items()}
    return (check_settings(dataclasses.replace(base, **given), f"row {key!r}:") if given else base), rule
