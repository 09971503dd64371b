"""Prompt lookup decoding, a model-free drafter: the last n-gram of the context (prompt and text so far) is looked
up earlier in the same context, and the tokens that followed it there are proposed as a chain. The method of
``transformers``' ``prompt_lookup_num_tokens`` and vLLM's ``ngram`` speculative method, with vLLM's matching rule:
the longest n between the minimum and maximum n-gram size whose suffix occurs earlier wins, and among its
occurrences the earliest one (``docs/drafters.md``). No weights, no target layers: it pays for a few numpy
comparisons per step and gains where the output repeats its input (extraction, editing, code)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from dart_core.drafters.settings import check_settings, knob
from dart_core.engine.drafter import DraftInput, Proposal
from dart_core.engine.timing import Stopwatch
from dart_core.engine.tree import DraftTree


@dataclass(frozen=True)
class PromptLookupSettings:
    """vLLM's ``prompt_lookup_max`` / ``prompt_lookup_min`` / ``num_speculative_tokens`` (transformers'
    ``max_matching_ngram_size`` / ``prompt_lookup_num_tokens``); defaults between the two libraries' own."""

    max_ngram: int = knob(3, 1, 16, "longest context suffix (tokens) looked up earlier in the context",
                          label="max n-gram", flag="max-ngram")
    min_ngram: int = knob(1, 1, 16, "shortest suffix that counts as a match (at most the max n-gram)",
                          label="min n-gram", flag="min-ngram")
    num_tokens: int = knob(10, 1, 64, "tokens proposed after the match, as one chain", label="draft tokens",
                           flag="tokens", ui=True, size=True)

    def __post_init__(self) -> None:
        """The one rule between fields, checked wherever settings are made (CLI flags, the page, the API); each
        field's own bounds are ``check_settings``'s."""
        lo, hi = self.min_ngram, self.max_ngram
        if isinstance(lo, int) and isinstance(hi, int) and lo > hi:
            raise ValueError(f"Prompt lookup min n-gram ({lo}) must not exceed its max n-gram ({hi})")


def lookup(context: np.ndarray, settings: PromptLookupSettings) -> np.ndarray:
    """The tokens that followed the earliest earlier occurrence of the context's longest matching suffix (at most
    ``num_tokens``; empty when no suffix of ``min_ngram`` tokens or more occurs earlier). An occurrence may overlap
    the suffix itself, as in vLLM, but must be followed by at least one token."""
    ctx = np.asarray(context)
    for n in range(min(settings.max_ngram, len(ctx) - 1), settings.min_ngram - 1, -1):
        windows = sliding_window_view(ctx[:-1], n)  # windows[i] = ctx[i : i + n], followed by ctx[i + n]
        hits = np.flatnonzero((windows == ctx[-n:]).all(axis=1))
        if hits.size:
            start = int(hits[0]) + n
            return ctx[start : start + settings.num_tokens]
    return ctx[:0]


class PromptLookupDrafter:
    """The prompt lookup racer's drafter: built on any target, no checkpoint, reads no target layers. Its
    per-generation state is its settings; a step without a match proposes nothing (one plain target step)."""

    key = "prompt-lookup"
    label = "Prompt lookup"
    settings_type = PromptLookupSettings
    feature_layers: tuple[int, ...] = ()

    @classmethod
    def for_target(cls, target: object = None) -> PromptLookupDrafter:
        """Built on the loaded target: it needs nothing of it."""
        return cls()

    def new_state(self, settings: PromptLookupSettings | None = None) -> PromptLookupSettings:
        settings = PromptLookupSettings() if settings is None else settings
        if not isinstance(settings, PromptLookupSettings):
            raise TypeError(f"{self.label} takes PromptLookupSettings, got {type(settings).__name__}")
        return check_settings(settings, self.label)

    def propose(self, state: PromptLookupSettings, step: DraftInput) -> Proposal | None:
        """The chain root → the looked-up tokens, or None when nothing matches."""
        with Stopwatch() as clock:
            follow = lookup(step.context, state)
        n = len(follow)
        if not n:
            return None
        tree = DraftTree(np.concatenate([step.context[-1:], follow]), np.arange(-1, n))
        return Proposal(tree=tree, draft_ms=clock.ms, search_ms=0.0)
