"""Suffix decoding's cache, as the reference keeps it (``docs/drafters.md``): a local suffix tree per active
request (its prompt, then its response as it grows) and a global suffix tree of responses (only responses, one
sequence per request, kept after the request stops), bounded by ``max_cached_requests`` with the oldest evicted
when a request starts. A :class:`SuffixCache` is the racer's memory across requests: whoever runs the races owns
it (the app per visitor, a benchmark per run) and it only ever holds text its racer has produced.

It is also the public way to replay a scenario: ``start_request`` with a prompt, ``add_active_response`` with
response tokens, ``speculate`` with given knobs (a :class:`SuffixDraft`: tokens, parents, probabilities, score,
match length), ``stop_request``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dart_core._native import SuffixTree

# vLLM's defaults for ``method: "suffix"``
MAX_TREE_DEPTH = 24
MAX_CACHED_REQUESTS = 10000
MAX_SPEC_FACTOR = 1.0
MAX_SPEC_OFFSET = 0.0
MIN_TOKEN_PROB = 0.1
LOCAL = 0  # the sequence id of a local tree's one sequence (its prompt, then its response)


@dataclass(frozen=True)
class SuffixDraft:
    """One speculation: ``tokens`` continue the context (no root), ``parents[i]`` is the index in ``tokens`` of
    token i's parent (-1: the first level), ``probs[i]`` = count(pattern + path to i) / count(pattern),
    ``score`` = their sum, ``match_len`` the context tokens matched, ``source`` the tree it came from
    (``local``, ``global``; ``none`` when nothing matched)."""

    tokens: np.ndarray
    parents: np.ndarray
    probs: np.ndarray
    score: float
    match_len: int
    source: str = "none"

    def __len__(self) -> int:
        return len(self.tokens)


def speculate_tree(tree: SuffixTree, context: Sequence[int] | np.ndarray, *, max_spec_tokens: int,
                   max_spec_factor: float = MAX_SPEC_FACTOR, max_spec_offset: float = MAX_SPEC_OFFSET,
                   min_token_prob: float = MIN_TOKEN_PROB, use_tree_spec: bool = True,
                   source: str = "none") -> SuffixDraft:
    """The spec's speculate() over one tree."""
    if max_spec_tokens < 0:
        raise ValueError(f"max_spec_tokens must not be negative, got {max_spec_tokens}")
    tokens, parents, probs, score, match_len = tree.speculate(
        context, int(max_spec_tokens), float(max_spec_factor), float(max_spec_offset), float(min_token_prob),
        bool(use_tree_spec))
    return SuffixDraft(tokens, parents, probs, float(score), int(match_len), source if len(tokens) else "none")


class SuffixCache:
    """The local trees of the active requests and the global tree of responses (module docstring).
    ``max_cached_requests``: responses the global tree keeps (-1: no bound, 0: no global tree); ``max_tree_depth``:
    the longest suffix counted, so the longest pattern matched plus the draft below it."""

    def __init__(self, max_tree_depth: int = MAX_TREE_DEPTH, max_cached_requests: int = MAX_CACHED_REQUESTS) -> None:
        if max_tree_depth < 1:
            raise ValueError(f"max_tree_depth must be at least 1, got {max_tree_depth}")
        if max_cached_requests < -1:
            raise ValueError(f"max_cached_requests must be -1 (no bound), 0 (off) or more, got {max_cached_requests}")
        self.max_tree_depth = max_tree_depth
        self.max_cached_requests = max_cached_requests
        self._global = SuffixTree(max_tree_depth)
        self._cached: OrderedDict[int, None] = OrderedDict()  # request ids in the global tree, oldest first
        self._local: dict[int, SuffixTree] = {}
        self._next_id = 0

    # -------------------------------------------------------------------------------------------- requests
    def new_request_id(self) -> int:
        """An id no request of this cache has used."""
        while self._next_id in self._local or self._next_id in self._cached:
            self._next_id += 1
        self._next_id += 1
        return self._next_id - 1

    def start_request(self, request_id: int, prompt: Sequence[int] | np.ndarray) -> None:
        """A new active request: its local tree holds ``prompt``; the oldest cached response is evicted first when
        the bound is reached, and a response cached under the same id is dropped."""
        if request_id in self._local:
            raise ValueError(f"request {request_id} is already active")
        if request_id in self._cached:
            self._drop(request_id)
        if self.max_cached_requests > 0:
            while len(self._cached) >= self.max_cached_requests:
                self._drop(next(iter(self._cached)))
        if self.max_cached_requests != 0:
            self._cached[request_id] = None
        local = SuffixTree(self.max_tree_depth)
        local.extend(LOCAL, prompt)
        self._local[request_id] = local

    def add_active_response(self, request_id: int, tokens: Sequence[int] | np.ndarray) -> None:
        """Response tokens of an active request: onto its prompt in its local tree, and as its response in the
        global tree (which the request's own later steps may draft from, as in the reference)."""
        self._active(request_id).extend(LOCAL, tokens)
        if request_id in self._cached:
            self._global.extend(request_id, tokens)

    def stop_request(self, request_id: int) -> None:
        """The request ends: its local tree goes, its response stays in the global tree (within the bound)."""
        self._active(request_id)
        del self._local[request_id]

    def speculate(self, request_id: int, context: Sequence[int] | np.ndarray, *, max_spec_tokens: int | None = None,
                  max_spec_factor: float = MAX_SPEC_FACTOR, max_spec_offset: float = MAX_SPEC_OFFSET,
                  min_token_prob: float = MIN_TOKEN_PROB, use_tree_spec: bool = True) -> SuffixDraft:
        """The local tree's draft if its score is at least the global tree's, else the global one's
        (``max_spec_tokens`` None: ``max_tree_depth``, as vLLM)."""
        local = self._active(request_id)
        knobs = {"max_spec_tokens": self.max_tree_depth if max_spec_tokens is None else max_spec_tokens,
                 "max_spec_factor": max_spec_factor, "max_spec_offset": max_spec_offset,
                 "min_token_prob": min_token_prob, "use_tree_spec": use_tree_spec}
        own = speculate_tree(local, context, source="local", **knobs)
        if not self._cached:
            return own
        other = speculate_tree(self._global, context, source="global", **knobs)
        return own if own.score >= other.score else other

    # -------------------------------------------------------------------------------------------- the memory
    @property
    def active_requests(self) -> int:
        return len(self._local)

    @property
    def cached_responses(self) -> int:
        """Responses the global tree holds, the active requests' included."""
        return len(self._cached)

    @property
    def held_answers(self) -> int:
        """Responses of requests that have stopped: the earlier answers a new request can draft from."""
        return sum(1 for r in self._cached if r not in self._local)

    @property
    def held_tokens(self) -> int:
        return int(self._global.tokens)

    def response(self, request_id: int) -> np.ndarray:
        """The cached response of a request (KeyError when it is not cached)."""
        if request_id not in self._cached:
            raise KeyError(f"no response of request {request_id} is cached")
        return np.asarray(self._global.sequence(request_id)) if self._global.contains(request_id) else \
            np.zeros(0, dtype=np.int32)

    def use_depth(self, max_tree_depth: int) -> None:
        """Count suffixes up to ``max_tree_depth`` from now on: the global tree is rebuilt from the same cached
        responses (exact: the counts follow from the responses). Refused while a request is active at another
        depth."""
        if max_tree_depth == self.max_tree_depth:
            return
        if max_tree_depth < 1:
            raise ValueError(f"max_tree_depth must be at least 1, got {max_tree_depth}")
        if self._local:
            raise ValueError(f"a suffix cache with active requests at depth {self.max_tree_depth} cannot count to "
                             f"depth {max_tree_depth}: finish them first")
        rebuilt = SuffixTree(max_tree_depth)
        for r in self._cached:
            if self._global.contains(r):
                rebuilt.extend(r, self._global.sequence(r))
        self._global, self.max_tree_depth = rebuilt, max_tree_depth

    def check(self) -> None:
        """The native trees' own consistency check (tests)."""
        self._global.check()
        for tree in self._local.values():
            tree.check()

    def _drop(self, request_id: int) -> None:
        self._global.remove(request_id)
        del self._cached[request_id]

    def _active(self, request_id: int) -> SuffixTree:
        tree = self._local.get(request_id)
        if tree is None:
            raise KeyError(f"request {request_id} is not active (start it with start_request)")
        return tree
