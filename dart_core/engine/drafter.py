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
    (root last), ``stop_ids`` the ids that end the generation, ``prompt_length`` how many of ``context``'s first
    tokens are the prompt (None: not told; every one but the root on the first call), ``depth_limit`` how deep the
    tree budget expects a tree to pay (a hint a drafter may take)."""

    features: torch.Tensor | None  # [n, F]; None when the drafter reads no layers
    token_ids: torch.Tensor  # [n]
    context: np.ndarray  # int32 [m]
    stop_ids: frozenset[int] = frozenset()
    prompt_length: int | None = None
    # the deepest tree level worth drafting this step (None: as deep as the settings go): the tree budget's late cuts
    # kept nothing below the level above it; a drafter that pays a forward per level (EAGLE-3) stops there
    depth_limit: int | None = None


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


def remembers(drafter: Drafter) -> bool:
    """Whether ``drafter`` keeps a memory across generations: suffix decoding's earlier answers, a searching
    drafter's N-gram memory when it is on. Such a drafter also has ``new_memory()`` (an empty memory, with
    ``held_answers``: the finished answers it holds), ``remembering(memory)`` (the same drafter drafting from and
    feeding that memory; whoever runs the races owns the memories) and ``finish(state, context, prompt_length)``
    (:func:`finish_generation`)."""
    return bool(getattr(drafter, "remembers", False))


def finish_generation(drafter: Drafter, state: Any, context: np.ndarray, prompt_length: int) -> None:
    """Tell a drafter that remembers (:func:`remembers`) that a generation has ended with ``context`` (prompt and
    the whole answer), so the answer's last tokens, which it never drafted after, are remembered too; other
    drafters are not called."""
    if remembers(drafter):
        drafter.finish(state, context, prompt_length)  # type: ignore[attr-defined]


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
