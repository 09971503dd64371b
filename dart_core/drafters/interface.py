"""What the decoding loop knows of a drafter, and nothing more: a :class:`Drafter` reads some target hidden-state
layers, keeps a per-generation state, and proposes a draft tree from the step's new target features (or nothing:
plain decoding). Settings are small frozen dataclasses whose fields carry their own bounds and help, so the CLI
flags, the app's controls and their error messages derive from them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from dart_core.tree import DraftTree


@dataclass(frozen=True)
class Proposal:
    """A drafter's answer for one step: the tree to verify (its root is the last emitted token) and the time
    it took, split into the drafter's forwards and the search that turned their outputs into the tree."""

    tree: DraftTree
    draft_ms: float  # drafter forwards (DART: one; EAGLE-3: one per tree level) + top-k
    search_ms: float  # turning the drafter's outputs into the tree (DART: native N-gram search)


@dataclass(frozen=True)
class DraftInput:
    """What the loop hands a drafter each step. ``features`` are the target's hidden states (the drafter's
    ``feature_layers``, concatenated) of the rows new since its last call, ``token_ids`` the token that FOLLOWS
    each of those rows (the last one is the tree's root), ``context`` every token of prompt and output so far
    (root last), ``stop_ids`` the ids that end the generation."""

    features: torch.Tensor | None  # [n, F]; None when the drafter reads no layers
    token_ids: torch.Tensor  # [n]
    context: np.ndarray  # int32 [m]
    stop_ids: frozenset[int] = frozenset()


@runtime_checkable
class Drafter(Protocol):
    """One racer's drafting side. ``key`` names it in the registry (``dart_core.racers``)."""

    key: str
    settings_type: type
    # indices into the target's ``hidden_states`` tuple, concatenated in this order; () reads none, None the
    # target's default three (``TargetModel.feature_layers``)
    feature_layers: tuple[int, ...] | None

    def new_state(self, settings: Any = None) -> Any:
        """Per-generation state (caches, the settings of this generation); ``None`` = default settings."""
        ...

    def propose(self, state: Any, step: DraftInput) -> Proposal | None:
        """The tree to verify next, or None: the target then decodes one token on its own."""
        ...


# ------------------------------------------------------------------------------------------------ settings
def knob(default: Any, low: float, high: float, help: str, *, label: str | None = None, flag: str | None = None,
         cpu: Any = None, ui: bool = False) -> Any:
    """A settings field with its bounds (inclusive) and help. ``flag``: the CLI suffix (``--<racer>-<flag>``,
    default the field name with dashes); ``cpu``: the default on a CPU when it differs; ``ui``: shown as a slider
    in the app (``label`` is its caption)."""
    return field(default=default, metadata={"low": low, "high": high, "help": help, "label": label, "flag": flag,
                                            "cpu": cpu, "ui": ui})


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


def knobs(settings_type: type) -> Iterator[Knob]:
    """The fields of a settings dataclass made with :func:`knob`, in order."""
    for f in dataclasses.fields(settings_type):
        m = f.metadata
        if "low" not in m:
            continue
        kind = type(f.default)
        yield Knob(f.name, f.default, kind, m["low"], m["high"], m["help"], m["label"] or f.name.replace("_", " "),
                   m["flag"] or f.name.replace("_", "-"), m["cpu"], m["ui"])


def settings_for(settings_type: type, device: str | torch.device) -> Any:
    """The defaults for a device: on a CPU a verify forward costs time in proportion to its nodes, so some
    racers default to smaller trees there (each field's ``cpu``)."""
    if torch.device(device).type != "cpu":
        return settings_type()
    return settings_type(**{k.name: k.cpu for k in knobs(settings_type) if k.cpu is not None})


def check_settings(settings: Any, what: str = "") -> Any:
    """Every field is a finite number of its type within its bounds, or a ValueError naming the field (and
    ``what``, e.g. the racer's label). Returns ``settings``."""
    for k in knobs(type(settings)):
        v = getattr(settings, k.name)
        name = f"{what} {k.label}".strip()
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (k.kind is int and not isinstance(v, int)):
            raise ValueError(f"{name}: expected {'an integer' if k.kind is int else 'a number'}, got {v!r}")
        if not math.isfinite(v) or not k.low <= v <= k.high:
            raise ValueError(f"{name} must be between {k.low:g} and {k.high:g}, got {v:g}")
    return settings


@dataclass(frozen=True)
class NoSettings:
    """Plain decoding has nothing to set."""


class PlainDecoding:
    """Plain autoregressive decoding as a drafter: it reads no target layers and proposes nothing, so each step
    is one target forward of one token without hidden states (the baseline pays for nothing it does not use)."""

    key = "ar"
    settings_type = NoSettings
    feature_layers: tuple[int, ...] = ()

    def new_state(self, settings: Any = None) -> None:
        return None

    def propose(self, state: Any, step: DraftInput) -> None:
        return None
