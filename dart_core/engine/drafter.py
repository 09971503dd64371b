"""What the decoding loop knows of a drafter, and nothing more: a :class:`Drafter` reads some target hidden-state
layers, keeps a per-generation state, and proposes a draft tree from the step's new target features (or nothing:
plain decoding, :class:`PlainDecoding`). The loop's own contract, so it lives in the engine next to the loop; the
drafters above implement it (``dart_core/drafters/``), and their settings' fields are described in
``dart_core/drafters/settings.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from dart_core.engine.tree import DraftTree


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
    """One racer's drafting side. ``key`` names it in the registry (``dart_core.racers.registry``)."""

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
