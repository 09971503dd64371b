"""Suffix decoding (Oliaro et al., arXiv 2411.04975; vLLM's ``method: "suffix"``), a model-free drafter that
remembers: each step it matches the context's most recent tokens in a suffix tree of the request itself (prompt
and answer so far) and in a global suffix tree of the racer's earlier answers, and proposes a tree of the most
frequent continuations, longer the longer the match (``docs/drafters.md``).

The global tree is a :class:`~dart_core.suffix.cache.SuffixCache` owned by whoever runs the races and handed over
with :meth:`SuffixDrafter.remembering` (the app keeps one per visitor, a benchmark one per run or a fresh one per
prompt when it measures cold); it holds only answers this racer produced, the current one as it grows (as the
reference does), never another racer's. A drafter made by :meth:`SuffixDrafter.for_target` keeps one memory of its
own for the process."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dart_core.drafters.settings import check_settings, knob
from dart_core.engine.drafter import DraftInput, Proposal
from dart_core.engine.timing import Stopwatch
from dart_core.engine.tree import DraftTree
from dart_core.suffix.cache import (
    MAX_CACHED_REQUESTS,
    MAX_SPEC_FACTOR,
    MAX_SPEC_OFFSET,
    MAX_TREE_DEPTH,
    MIN_TOKEN_PROB,
    SuffixCache,
)


@dataclass(frozen=True)
class SuffixSettings:
    """The reference's knobs with vLLM's defaults (``suffix_decoding_max_tree_depth`` …); the draft's size cap is
    vLLM's ``num_speculative_tokens`` (there: the tree depth when not given; 12 on a CPU, as the other trees)."""

    max_spec_tokens: int = knob(MAX_TREE_DEPTH, 1, 256, "most tokens drafted per step (the tree's nodes)",
                                label="draft tokens", flag="tokens", cpu=12, ui=True, size=True)
    max_tree_depth: int = knob(MAX_TREE_DEPTH, 2, 256, "longest suffix counted: the matched tokens plus the draft "
                               "below them", label="tree depth", flag="depth")
    max_spec_factor: float = knob(MAX_SPEC_FACTOR, 0.0, 64.0, "tokens drafted per matched token",
                                  label="spec factor", flag="factor")
    max_spec_offset: float = knob(MAX_SPEC_OFFSET, -64.0, 64.0, "tokens added to the draft budget",
                                  label="spec offset", flag="offset")
    min_token_prob: float = knob(MIN_TOKEN_PROB, 0.0, 1.0, "a token whose estimated probability (its path's count "
                                 "over the match's) is below this is not drafted", label="min token prob",
                                 flag="min-prob")
    tree: bool = knob(True, 0, 1, "draft a tree of the most frequent continuations (off: the most frequent chain)",
                      flag="tree")
    max_cached_requests: int = knob(MAX_CACHED_REQUESTS, -1, 10_000_000, "earlier answers the global tree keeps, "
                                    "the oldest evicted first (-1: no bound, 0: no global tree)",
                                    label="cached answers", flag="cached")


@dataclass
class SuffixState:
    """One generation: its settings, the memory it drafts from and feeds, its request there (None until the first
    step) and how much of the context the request has been given."""

    settings: SuffixSettings
    memory: SuffixCache
    request: int | None = None
    seen: int = 0

    def catch_up(self, context: np.ndarray, prompt_length: int) -> int:
        """Give the request what is new in ``context`` (the prompt first, when it starts); its id."""
        if self.request is None:
            self.memory.max_cached_requests = self.settings.max_cached_requests
            self.memory.use_depth(self.settings.max_tree_depth)
            self.request = self.memory.new_request_id()
            self.memory.start_request(self.request, context[:prompt_length])
            self.seen = prompt_length
        if len(context) > self.seen:
            self.memory.add_active_response(self.request, context[self.seen :])
            self.seen = len(context)
        return self.request


class SuffixDrafter:
    """The suffix racer's drafter: built on any target, no checkpoint, reads no target layers; drafts from and
    feeds ``memory`` (module docstring)."""

    key = "suffix"
    label = "Suffix decoding"
    settings_type = SuffixSettings
    feature_layers: tuple[int, ...] = ()
    remembers = True

    def __init__(self, memory: SuffixCache | None = None) -> None:
        self.memory = memory if memory is not None else self.new_memory()

    @classmethod
    def for_target(cls, target: object = None) -> SuffixDrafter:
        """Built on the loaded target: it needs nothing of it."""
        return cls()

    @staticmethod
    def new_memory() -> SuffixCache:
        """An empty memory (no earlier answers): what a cold run starts from."""
        return SuffixCache()

    def remembering(self, memory: SuffixCache) -> SuffixDrafter:
        """This racer drafting from and feeding ``memory`` (a visitor's, a benchmark run's)."""
        if not isinstance(memory, SuffixCache):
            raise TypeError(f"{self.label} remembers in a SuffixCache, got {type(memory).__name__}")
        return SuffixDrafter(memory)

    def new_state(self, settings: SuffixSettings | None = None) -> SuffixState:
        settings = SuffixSettings() if settings is None else settings
        if not isinstance(settings, SuffixSettings):
            raise TypeError(f"{self.label} takes SuffixSettings, got {type(settings).__name__}")
        return SuffixState(check_settings(settings, self.label), self.memory)

    def propose(self, state: SuffixState, step: DraftInput) -> Proposal | None:
        """The speculated tree below the root, or None when nothing in either tree continues the context."""
        with Stopwatch() as clock:
            context = step.context
            prompt_length = step.prompt_length if step.prompt_length is not None else len(context) - 1
            request = state.catch_up(context, prompt_length)
            s = state.settings
            draft = state.memory.speculate(request, context, max_spec_tokens=s.max_spec_tokens,
                                           max_spec_factor=s.max_spec_factor, max_spec_offset=s.max_spec_offset,
                                           min_token_prob=s.min_token_prob, use_tree_spec=s.tree)
        if not len(draft):
            return None
        tree = DraftTree(np.concatenate([context[-1:], draft.tokens]), np.concatenate([[-1], draft.parents + 1]))
        return Proposal(tree=tree, draft_ms=clock.ms, search_ms=0.0)

    def finish(self, state: SuffixState, context: np.ndarray, prompt_length: int) -> None:
        """The generation ended with ``context``: its last tokens join the memory and its request stops (its answer
        stays among the cached ones). A generation stopped before its first token leaves no trace."""
        if state.request is None and len(context) <= prompt_length:
            return
        state.catch_up(context, prompt_length)
        if state.request is not None:
            state.memory.stop_request(state.request)
