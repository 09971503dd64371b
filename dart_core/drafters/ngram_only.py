"""N-gram-only drafting, a model-free drafter and DART's own ablation: the native N-gram-guided tree search of
DART (``dart_core/ngram/search.py``) fed by the N-gram store alone, with no drafter forward, so a race against
DART shows what its drafter adds beyond its N-gram (``docs/drafters.md``).

What replaces the drafter's per-level top-k and its probabilities: the store's own continuations
(``NgramStore.continuations``). Level 0 holds the ``top_k`` most frequent tokens that followed the context's
longest known suffix, and level ``l`` those that followed the context extended by the store's greedy chain (the
most frequent continuation at each level before it); each level's probabilities are the store's counts
normalised over its k candidates (as DART's softmax is over its k). The search then scores every branch with
those probabilities and, from level 1 on, the store's probability of each token after that branch's own context,
so a branch that leaves the greedy chain is ranked by the store too. A level with fewer than ``top_k``
continuations is padded with zero-probability repeats, which the search ranks after every real candidate and
the verifier tries once; the chain ends at the first level whose context the store has never continued.

With the session's N-gram memory on (``dart_core/ngram/memory.py``), the continuations and the search's N-gram
term both come from the store's counts plus the memory's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from dart_core.drafters.settings import check_settings, knob
from dart_core.engine.drafter import DraftInput, Proposal
from dart_core.engine.timing import Stopwatch
from dart_core.ngram.memory import NgramMemory, RemembersNgrams
from dart_core.ngram.search import searched_proposal


@dataclass(frozen=True)
class NgramOnlySettings:
    """The store-only tree: levels, candidates per level, and DART's search settings (its defaults: beam width
    20, 60 nodes, 12 on a CPU, N-gram weight 0.5)."""

    depth: int = knob(6, 1, 32, "levels of the tree (draft tokens along a path)", flag="depth")
    top_k: int = knob(8, 1, 256, "store continuations per level", flag="top-k")
    beam_width: int = knob(20, 1, 1000, "beam width of the tree search", flag="beam")
    max_nodes: int = knob(60, 1, 512, "nodes below the root", label="tree size", flag="nodes", cpu=12, ui=True,
                          size=True)
    ngram_weight: float = knob(0.5, 0.0, 100.0, "weight of the search's N-gram term (0 = the level probabilities "
                               "alone)", flag="ngram-weight")


class StoreMissingError(ValueError):
    """The N-gram-only racer was asked for where no N-gram store is loaded."""


class NgramOnlyDrafter(RemembersNgrams):
    """The N-gram-only racer's drafter: built on any target, no checkpoint, reads no target layers; drafts from
    ``store`` (attached by ``load_arena``, shared by generations). Its per-generation state is its settings."""

    key = "ngram-only"
    label = "N-gram only"
    settings_type = NgramOnlySettings
    feature_layers: tuple[int, ...] = ()

    def __init__(self) -> None:
        self.store: Any = None  # an ``NgramStore``

    @classmethod
    def for_target(cls, target: object = None) -> NgramOnlyDrafter:
        """Built on the loaded target: it needs nothing of it (the store is attached afterwards)."""
        return cls()

    def new_state(self, settings: NgramOnlySettings | None = None) -> NgramOnlySettings:
        """Settings checked against their bounds; without a store there is nothing to draft from, so a
        generation is refused (StoreMissingError) instead of silently racing as plain decoding."""
        settings = NgramOnlySettings() if settings is None else settings
        if not isinstance(settings, NgramOnlySettings):
            raise TypeError(f"{self.label} takes NgramOnlySettings, got {type(settings).__name__}")
        if self.store is None:
            raise StoreMissingError(f"{self.label} drafts from the N-gram store alone, and no store is loaded")
        return check_settings(settings, self.label)

    def levels(self, context: np.ndarray, settings: NgramOnlySettings,
               memory: NgramMemory | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Per level, the store's candidates and their probabilities over the k (module docstring): int32 and
        float32 ``[levels, top_k]``, ``levels`` between 0 (the store never continued the context) and
        ``depth``; with ``memory``, over the store's counts plus the memory's."""
        chain = list(context[-(self.store.order - 1):]) if self.store.order > 1 else []
        tokens, probs = [], []
        summed = memory is not None and memory.held_tokens > 0
        for _ in range(settings.depth):
            ids = np.asarray(chain, dtype=np.int32)
            toks, p = (memory.continuations(self.store, ids, settings.top_k) if summed  # type: ignore[union-attr]
                       else self.store.continuations(ids, settings.top_k))
            if not len(toks):
                break
            pad = settings.top_k - len(toks)
            tokens.append(np.pad(toks, (0, pad), mode="edge"))
            probs.append(np.pad(p / p.sum(), (0, pad)))
            chain.append(int(toks[0]))
        k = settings.top_k
        return (np.asarray(tokens, dtype=np.int32).reshape(-1, k), np.asarray(probs, dtype=np.float32).reshape(-1, k))

    def propose(self, state: NgramOnlySettings, step: DraftInput) -> Proposal | None:
        """The searched tree over the store's levels, or None when the store never continued the context."""
        memory = self.active_memory()
        with Stopwatch() as clock:
            tokens, probs = self.levels(step.context, state, memory)
        if not len(tokens):
            return None
        return searched_proposal(tokens, probs, step, self.store, state, draft_ms=clock.ms, memory=memory)
