"""The session's N-gram memory (issue 67): the N-gram counts of a racer's own earlier answers, held in memory next
to the read-only, memory-mapped store and consulted together with it. The tree search then scores a token by the
store's own rule over the SUMMED counts (store + memory; ``docs/ngram.md``), so the racer drafts what it has said
before in this session as if it were in the corpus, and the store file is never written.

A :class:`NgramMemory` is owned by whoever runs the races (``dart_core/arena.py``: ``Arena.new_memory``,
``Arena.stream(memory=)``), fed only with answers its racer has finished (never another racer's, never the answer
being raced), bounded by ``max_answers`` with the oldest evicted first. :class:`RemembersNgrams` is the memory
protocol of ``dart_core/engine/drafter.py`` (``remembers``, ``new_memory``, ``remembering``, ``finish``) for the
drafters that search with the store, on when ``load_arena(..., ngram_memory=True)`` turns it on."""

from __future__ import annotations

import copy
from collections import OrderedDict
from typing import Any

import numpy as np

from dart_core import _native
from dart_core.ngram.store import NgramStore, as_token_array

MAX_ANSWERS = 1000  # answers a memory keeps by default: a long session's, at a few MB of counts
MEMORY_NEEDS_STORE = ("--ngram-memory adds the session's answers to an N-gram store, and no N-gram store is given: "
                      "give one (--ngram FILE; the app: --ngram-model-name-or-path), or drop --ngram-memory")


class NgramMemory:
    """The N-gram counts (of ``order``, the store's) of at most ``max_answers`` finished answers, the oldest
    evicted first when a new one comes; counts are exact through additions and evictions (native
    ``native/src/ngram_overlay.hpp``)."""

    def __init__(self, order: int, max_answers: int = MAX_ANSWERS) -> None:
        if isinstance(order, bool) or not isinstance(order, (int, np.integer)) or not 1 <= order <= 8:
            raise ValueError(f"an N-gram memory's order is its store's, 1 to 8; got {order!r}")
        if isinstance(max_answers, bool) or not isinstance(max_answers, (int, np.integer)) or max_answers < 0:
            raise ValueError(f"max_answers must be a whole number >= 0 (0: remember nothing), got {max_answers!r}")
        self.max_answers = int(max_answers)
        self._overlay = _native.NgramOverlay(int(order))
        self._held: OrderedDict[int, None] = OrderedDict()  # answer ids, oldest first
        self._next_id = 0

    @property
    def order(self) -> int:
        return int(self._overlay.order)

    @property
    def held_answers(self) -> int:
        """Finished answers held: the earlier answers a new generation drafts from."""
        return len(self._held)

    @property
    def held_tokens(self) -> int:
        return int(self._overlay.tokens)

    @property
    def native(self) -> Any:
        """The native overlay, for the tree search."""
        return self._overlay

    def add(self, answer: Any) -> int | None:
        """Remember a finished answer (token ids), evicting the oldest first at the bound; its id, or None when the
        memory keeps nothing (``max_answers == 0``) or the answer is empty."""
        tokens = as_token_array(answer, "answer")
        if self.max_answers == 0 or tokens.size == 0:
            return None
        while len(self._held) >= self.max_answers:
            self.evict(next(iter(self._held)))
        answer_id = self._next_id
        self._next_id += 1
        self._overlay.add(answer_id, tokens)
        self._held[answer_id] = None
        return answer_id

    def evict(self, answer_id: int) -> None:
        """Forget one answer (KeyError when it is not held)."""
        if answer_id not in self._held:
            raise KeyError(f"the N-gram memory holds no answer {answer_id}")
        self._overlay.remove(answer_id)
        del self._held[answer_id]

    def answer_ids(self) -> list[int]:
        """The held answers' ids, oldest first."""
        return list(self._held)

    def count(self, ngram: Any) -> int:
        """The memory's own count of a token string (length 0 = every token held), as ``NgramStore.count``."""
        return int(self._overlay.count(ngram))

    def probability(self, store: NgramStore | None, context: Any, tokens: Any) -> tuple[np.ndarray, np.ndarray]:
        """``NgramStore.probability`` over the store's counts plus the memory's (``store`` None: the memory's
        alone): float32 probabilities and matched context lengths."""
        return self._overlay.probability(self._native_store(store), context, tokens)

    def continuations(self, store: NgramStore | None, context: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``NgramStore.continuations`` over the store's counts plus the memory's."""
        return self._overlay.continuations(self._native_store(store), context, int(k))

    def check(self) -> None:
        """Recount every held answer and compare with the counts (tests)."""
        self._overlay.check()

    def _native_store(self, store: NgramStore | None) -> Any:
        if store is None:
            return None
        if not isinstance(store, NgramStore):
            raise TypeError(f"store must be an NgramStore or None, got {type(store).__name__}")
        if store.order != self.order:
            raise ValueError(f"an N-gram memory of order {self.order} cannot add to a store of order {store.order}")
        return store.native

    def __repr__(self) -> str:
        return (f"NgramMemory(order={self.order}, answers={self.held_answers}/{self.max_answers}, "
                f"tokens={self.held_tokens})")


class RemembersNgrams:
    """The memory protocol (``dart_core/engine/drafter.py``: ``remembers``) for a drafter that searches with the
    N-gram store (DART, DFlash-tree, N-gram only). Off by default; :meth:`use_ngram_memory` turns it on. A drafter
    then drafts with :meth:`active_memory` (the memory it was handed, or one of its own for the process) and
    remembers each answer it finishes."""

    store: Any
    label: str
    remember_ngrams: bool = False
    ngram_memory: NgramMemory | None = None
    max_remembered_answers: int = MAX_ANSWERS

    @property
    def remembers(self) -> bool:
        return self.remember_ngrams

    def use_ngram_memory(self, on: bool = True, max_answers: int = MAX_ANSWERS) -> None:
        """Turn the session memory on (or off); it starts empty."""
        self.remember_ngrams = bool(on)
        self.max_remembered_answers = max_answers
        self.ngram_memory = None

    def new_memory(self) -> NgramMemory:
        """An empty memory of the store's order: what a cold run starts from."""
        if not self.remember_ngrams:
            raise ValueError(f"{self.label} keeps no N-gram memory (turn it on with --ngram-memory)")
        if self.store is None:
            raise ValueError(f"{self.label}'s N-gram memory adds to the N-gram store, and no store is loaded")
        return NgramMemory(self.store.order, self.max_remembered_answers)

    def remembering(self, memory: NgramMemory) -> Any:
        """The same drafter (its weights shared, not copied) drafting with and feeding ``memory``."""
        if not self.remember_ngrams:
            raise ValueError(f"{self.label} keeps no N-gram memory; it takes none")
        if not isinstance(memory, NgramMemory):
            raise TypeError(f"{self.label} remembers in an NgramMemory, got {type(memory).__name__}")
        if self.store is not None and memory.order != self.store.order:
            raise ValueError(f"an N-gram memory of order {memory.order} cannot add to {self.label}'s store of order "
                             f"{self.store.order}")
        twin = copy.copy(self)
        twin.ngram_memory = memory
        return twin

    def forgetting(self) -> Any:
        """The same drafter (its weights shared) with the memory off: it drafts with the store alone and remembers
        nothing, as without ``--ngram-memory`` (a benchmark's row beside the cold and warm ones)."""
        twin = copy.copy(self)
        twin.remember_ngrams, twin.ngram_memory = False, None
        return twin

    def active_memory(self) -> NgramMemory | None:
        """The memory this drafter drafts with and feeds (None when off); the first use of a drafter that was
        handed none makes it one of its own."""
        if not self.remember_ngrams:
            return None
        if self.ngram_memory is None:
            self.ngram_memory = self.new_memory()
        return self.ngram_memory

    def finish(self, state: Any, context: np.ndarray, prompt_length: int) -> None:
        """A generation ended with ``context``: its answer (what follows the prompt) joins the memory."""
        memory = self.active_memory()
        if memory is not None:
            memory.add(np.asarray(context)[prompt_length:])
