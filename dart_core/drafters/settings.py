"""How a racer's settings describe themselves: small frozen dataclasses whose fields carry their own bounds and
help (each field a :class:`Knob`, declared by :func:`knob`), so the CLI flags, the app's controls and their error
messages derive from them (:func:`knobs`, :func:`settings_for`, :func:`check_settings`). The protocol the
decoding loop talks to is the engine's: :class:`dart_core.engine.drafter.Drafter`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from dart_core.engine.budget import NODE, OFF, check_budget


# ------------------------------------------------------------------------------------------------ settings
def knob(default: Any, low: float, high: float, help: str, *, label: str | None = None, flag: str | None = None,
         cpu: Any = None, ui: bool = False, size: bool = False, cut: bool | None = None) -> Any:
    """A settings field with its bounds (inclusive) and help. ``flag``: the CLI suffix (``--<racer>-<flag>``,
    default the field name with dashes); ``cpu``: the default on a CPU when it differs; ``ui``: shown as a slider
    in the app (``label`` is its caption). A ``bool`` default makes a switch (bounds 0..1): ``--<racer>-<flag>`` /
    ``--no-<racer>-<flag>`` on the command lines, never a slider. ``size``: a field that sizes the racer's tree
    or chain, or its drafting work (the nodes; EAGLE-3's depth, a drafter forward per level), which
    :func:`shrink_for_streams` scales down under load. ``cut``: a size field whose nodes the tree budget can cut
    after drafting (default: every size field), so under an automatic budget it stays at its full default; a size
    whose drafting work comes first (EAGLE-3's depth) keeps its CPU default."""
    return field(default=default, metadata={"low": low, "high": high, "help": help, "label": label, "flag": flag,
                                            "cpu": cpu, "ui": ui, "size": size,
                                            "cut": size if cut is None else cut})


@dataclass(frozen=True)
class Knob:
    """One settings field as the CLI and the app see it."""

    name: str
    default: Any
    kind: type
    low: float
    high: float
    help: str
    label: str
    flag: str
    cpu: Any
    ui: bool
    size: bool = False
    cut: bool = False


def knobs(settings_type: type) -> Iterator[Knob]:
    """The fields of a settings dataclass made with :func:`knob`, in order."""
    for f in dataclasses.fields(settings_type):
        m = f.metadata
        if "low" not in m:
            continue
        kind = type(f.default)
        yield Knob(f.name, f.default, kind, m["low"], m["high"], m["help"], m["label"] or f.name.replace("_", " "),
                   m["flag"] or f.name.replace("_", "-"), m["cpu"], m["ui"], m.get("size", False), m.get("cut", False))


def settings_for(settings_type: type, device: str | torch.device, budget: str = NODE) -> Any:
    """The defaults for a device under a tree budget rule (``dart_core.engine.budget``): on a CPU a verify forward
    costs time in proportion to its nodes, so with the budget ``off`` some racers default to smaller trees there
    (each field's ``cpu``); under an automatic budget a size field the budget cuts stays at its full default, the
    most it cuts from each step."""
    if torch.device(device).type != "cpu":
        return settings_type()
    sized = check_budget(budget) != OFF
    return settings_type(**{k.name: k.cpu for k in knobs(settings_type) if k.cpu is not None
                            and not (sized and k.cut)})


def check_settings(settings: Any, what: str = "") -> Any:
    """Every field is a finite number of its type within its bounds, or a ValueError naming the field (and
    ``what``, e.g. the racer's label). Returns ``settings``."""
    for k in knobs(type(settings)):
        v = getattr(settings, k.name)
        name = f"{what} {k.label}".strip()
        if k.kind is bool:
            if not isinstance(v, bool):
                raise ValueError(f"{name}: expected true or false, got {v!r}")
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (k.kind is int and not isinstance(v, int)):
            raise ValueError(f"{name}: expected {'an integer' if k.kind is int else 'a number'}, got {v!r}")
        if not math.isfinite(v) or not k.low <= v <= k.high:
            raise ValueError(f"{name} must be between {k.low:g} and {k.high:g}, got {v:g}")
    return settings


def shrink_for_streams(settings: Any, streams: int) -> Any:
    """``settings`` with each size field (its tree's or chain's nodes, and the depth where every level costs a
    drafter forward) divided by the number of streams decoded together (rounded up, never below the field's lower
    bound), so the batch verifies about as many nodes per step as one stream's tree: the rule vLLM applies with a
    draft length per batch size. Settings without a size field come back as they are."""
    if streams < 1:
        raise ValueError(f"streams must be at least 1, got {streams}")
    sized = {k.name: max(int(k.low), -(-int(getattr(settings, k.name)) // streams))
             for k in knobs(type(settings)) if k.size}
    return dataclasses.replace(settings, **sized) if sized else settings
