"""N-gram-guided draft-tree search (``docs/tree-search.md``): the Python face of the native search.

The drafter gives, per level, its top-k candidate target tokens and their probabilities; the search grows a
beam of candidate sequences scored by the drafter's log-probabilities plus the N-gram store's log-probability
of each token after its context, and keeps the best ``max_nodes`` sequences as a
:class:`~dart_core.engine.tree.DraftTree`.
Inputs are validated here (clear ``ValueError``s); the search itself runs natively without the GIL.
:func:`searched_proposal` is the proposal it makes for a racer that drafts per-row top-k (DART, DFlash-tree, N-gram
only), timed apart from the drafting.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np

from dart_core import _native
from dart_core.engine.drafter import DraftInput, Proposal
from dart_core.engine.timing import Stopwatch
from dart_core.engine.tree import DraftTree
from dart_core.ngram.memory import NgramMemory
from dart_core.ngram.store import NgramStore, as_token_array

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1

__all__ = ["default_level_weights", "default_logit_weights", "search_tree", "searched_proposal"]


def default_level_weights(levels: int) -> np.ndarray:
    """The spec's ``level_weight[l] = (l+1)^-0.7`` as float32, bit-identical to the native defaults."""
    return _native.default_tree_weights(_count(levels, "levels", minimum=0))[0]


def default_logit_weights(levels: int) -> np.ndarray:
    """The spec's ``logit_weight[l] = 0.9^l`` as float32, bit-identical to the native defaults."""
    return _native.default_tree_weights(_count(levels, "levels", minimum=0))[1]


def _count(value: Any, what: str, *, minimum: int) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{what} must be an integer, got {value!r}")
    try:
        n = operator.index(value)
    except TypeError:
        raise ValueError(f"{what} must be an integer, got {value!r}") from None
    if n < minimum:
        raise ValueError(f"{what} must be >= {minimum}, got {n}")
    return n


def _to_numpy(x: Any) -> np.ndarray:
    """numpy view of a numpy array, a torch tensor or a nested sequence (torch itself is not imported)."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):
        x = x.detach().cpu()
        if hasattr(x, "numpy"):
            x = x.numpy()
    return np.asarray(x)


def _weights(values: Any, levels: int, what: str) -> np.ndarray | None:
    if values is None:
        return None
    arr = _to_numpy(values)
    if arr.ndim != 1 or arr.shape[0] != levels:
        raise ValueError(f"{what} must be a 1-D array of {levels} weights (one per level), got {arr.shape}")
    if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise ValueError(f"{what} must be real numbers, got dtype {arr.dtype}")
    arr = np.ascontiguousarray(arr, dtype=np.float32)
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError(f"{what} must be finite and >= 0 (negative weights break prefix closure): {arr}")
    return arr


def search_tree(
    topk_tokens: Any,
    topk_probs: Any,
    context_tokens: Any,
    store: NgramStore | None,
    *,
    beam_width: int = 20,
    max_nodes: int = 60,
    level_weights: Any = None,
    logit_weights: Any = None,
    ngram_weight: float = 0.5,
    eos_token_id: int | Any = None,
    memory: NgramMemory | None = None,
) -> DraftTree:
    """Build the draft tree of ``docs/tree-search.md``.

    ``topk_tokens`` / ``topk_probs``: ``[levels, k]`` candidate target token ids and their probabilities
    (numpy arrays or CPU torch tensors). ``context_tokens``: the prompt, its last token is the root.
    ``store``: an :class:`~dart_core.ngram.store.NgramStore` or ``None``; ``None`` or ``ngram_weight == 0`` drops
    the N-gram term.
    ``level_weights`` / ``logit_weights``: one float per level, default :func:`default_level_weights` /
    :func:`default_logit_weights`. ``eos_token_id``: an end-of-text id or a collection of them (every stop id
    of the generation): a beam candidate ending in one ranks after all others in the beam. ``memory``: an
    :class:`~dart_core.ngram.memory.NgramMemory` of the store's order whose counts are added to the store's (the
    N-gram term is the store's rule over the summed counts); None or empty: the store alone. Returns at most
    ``max_nodes`` nodes below the root, ordered by depth, then by score descending.
    """
    toks = _to_numpy(topk_tokens)
    probs = _to_numpy(topk_probs)
    if toks.ndim != 2 or probs.ndim != 2:
        raise ValueError(
            f"topk_tokens and topk_probs must be 2-D [levels, k], got shapes {toks.shape} and {probs.shape}"
        )
    if toks.shape != probs.shape:
        raise ValueError(f"topk_tokens and topk_probs have mismatched shapes {toks.shape} vs {probs.shape}")
    levels, k = toks.shape
    if levels == 0 or k == 0:
        raise ValueError(f"need at least one level and one candidate per level, got shape {toks.shape}")
    if not np.issubdtype(toks.dtype, np.integer):
        raise ValueError(f"topk_tokens must hold integer token ids, got dtype {toks.dtype}")
    if toks.dtype != np.int32 and (toks.min() < _INT32_MIN or toks.max() > _INT32_MAX):
        raise ValueError("topk_tokens hold ids outside the int32 range")
    toks = np.ascontiguousarray(toks, dtype=np.int32)
    if not np.issubdtype(probs.dtype, np.floating):
        raise ValueError(f"topk_probs must be floating point, got dtype {probs.dtype}")
    probs = np.ascontiguousarray(probs, dtype=np.float32)
    bad = ~((probs >= 0) & (probs <= 1))  # NaN included
    if bad.any():
        lvl, i = (int(v) for v in np.argwhere(bad)[0])
        raise ValueError(f"topk_probs[{lvl}, {i}] = {probs[lvl, i]} is not a probability in [0, 1] (NaN?)")

    ctx = as_token_array(_to_numpy(context_tokens), "context_tokens")
    if ctx.size == 0:
        raise ValueError("context_tokens is empty: it must hold at least the root token")

    if store is not None and not isinstance(store, NgramStore):
        raise TypeError(f"store must be a dart_core.ngram.store.NgramStore or None, got {type(store).__name__}")
    beam_width = _count(beam_width, "beam_width", minimum=1)
    max_nodes = _count(max_nodes, "max_nodes", minimum=0)
    lw = _weights(level_weights, levels, "level_weights")
    logw = _weights(logit_weights, levels, "logit_weights")
    ngw = float(ngram_weight)
    if not math.isfinite(ngw) or ngw < 0:
        raise ValueError(f"ngram_weight must be finite and >= 0, got {ngram_weight!r}")
    eos = None
    if eos_token_id is not None:
        one = isinstance(eos_token_id, (int, np.integer)) or not hasattr(eos_token_id, "__iter__")
        values = [_count(t, "eos_token_id", minimum=_INT32_MIN) for t in ([eos_token_id] if one else eos_token_id)]
        if any(t > _INT32_MAX for t in values):
            raise ValueError(f"eos_token_id {eos_token_id} holds an id outside the int32 range")
        eos = np.asarray(sorted(set(values)), dtype=np.int32) if values else None

    if memory is not None:
        if not isinstance(memory, NgramMemory):
            raise TypeError(f"memory must be a dart_core.ngram.memory.NgramMemory or None, got {type(memory).__name__}")
        if store is None:
            raise ValueError("an N-gram memory adds to the N-gram store, and store is None")
        if memory.order != store.order:
            raise ValueError(f"an N-gram memory of order {memory.order} cannot add to a store of order {store.order}")
    native_store = store.native if store is not None and ngw > 0 else None
    overlay = memory.native if memory is not None and native_store is not None else None
    tokens, parents, scores = _native.search_tree(
        toks, probs, ctx, native_store, beam_width, max_nodes, lw, logw, ngw, eos, overlay
    )
    return DraftTree(tokens, parents, scores)


def searched_proposal(tokens: np.ndarray, probs: np.ndarray, step: DraftInput, store: Any, settings: Any, *,
                      draft_ms: float, memory: NgramMemory | None = None) -> Proposal:
    """A drafter's proposal from its per-row top-k (``tokens``, ``probs``: DART's rows, DFlash-tree's block):
    the N-gram-guided tree under ``settings``' beam width, node budget and N-gram weight (the term off without a
    store; with ``memory``, over the store's counts plus the session's), its search timed apart from the drafting
    that took ``draft_ms``."""
    with Stopwatch() as search:
        tree = search_tree(tokens, probs, step.context, store, beam_width=settings.beam_width,
                           max_nodes=settings.max_nodes,
                           ngram_weight=settings.ngram_weight if store is not None else 0.0,
                           eos_token_id=step.stop_ids, memory=memory if store is not None else None)
    return Proposal(tree=tree, draft_ms=draft_ms, search_ms=search.ms)
