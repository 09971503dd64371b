"""The graph path's static KV caches for B streams: a captured forward is bound to the memory of the cache it
writes, so caches are pooled and lent to states, one pool per streams bucket (B streams run on a cache of the next
power of two rows, the rows past them idle), and a state keeps its cache, and so its graphs, from step to step.

Streams end at different steps: the rows of the ones that ended turn idle, and once the streams left fit a smaller
bucket they move to a cache of that bucket (one copy of their committed columns), so a batch that has shrunk to one
stream runs a one-row forward again.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from transformers import StaticCache

from dart_core.engine.graphs import SlotPool, bucket
from dart_core.engine.state import TargetState

__all__ = ["GRAPH_STREAMS", "StreamSlots"]

GRAPH_STREAMS = 16  # the most streams captured (buckets 1, 2, 4, … 16 cache rows); more run on an uncaptured cache


class StreamSlots:
    """Static caches by streams bucket, each made by ``make`` and lent to one state at a time."""

    def __init__(self, make: Callable[[], StaticCache]) -> None:
        self._make = make
        self._pools: dict[int, SlotPool[StaticCache]] = {}

    @property
    def pools(self) -> dict[int, SlotPool[StaticCache]]:
        """Each bucket's pool (cache rows -> pool), for the record and the tests."""
        return self._pools

    def cache(self, slot: tuple[int, int]) -> StaticCache:
        """The static cache of ``slot`` = (streams bucket, index in that bucket's pool)."""
        return self._pools[slot[0]].slots[slot[1]]

    def lend(self, state: TargetState, streams: int) -> bool:
        """Give ``state`` a cache of ``streams``' bucket (its streams and idle rows); False past the largest bucket
        (the state keeps a cache of its own, uncaptured)."""
        rows = bucket(streams, GRAPH_STREAMS)
        if rows is None:
            return False
        pool = self._pools.get(rows)
        if pool is None:
            pool = self._pools[rows] = SlotPool(self._make)
        state.slot = (rows, pool.lend(state))
        state.cache = pool.slots[state.slot[1]]
        state.idle = rows - streams
        return True

    def keep(self, state: TargetState, idx: torch.Tensor) -> None:
        """Only the streams ``idx`` stay: their rows move to the front of the cache, in place (its graphs are bound
        to that memory), the rest turn idle; when they fit a smaller bucket, they move to a cache of that bucket
        instead and the old one goes back to its pool."""
        kept = len(idx)
        old, old_cache, width = state.slot, state.cache, state.width
        smaller = bucket(kept, GRAPH_STREAMS)
        if smaller < old[0]:
            self.lend(state, kept)
        else:
            state.idle = old[0] - kept
        for src, dst in zip(old_cache.layers, state.cache.layers, strict=True):
            if src.is_initialized:
                if not dst.is_initialized:  # a cache never used yet: its buffers at this bucket's rows
                    heads = src.keys.shape[1]
                    dst.lazy_initialization(src.keys.new_empty((smaller, heads, 1, src.keys.shape[-1])),
                                            src.values.new_empty((smaller, heads, 1, src.values.shape[-1])))
                dst.keys[:kept, :, :width].copy_(src.keys[:, :, :width].index_select(0, idx))
                dst.values[:kept, :, :width].copy_(src.values[:, :, :width].index_select(0, idx))
        if state.slot != old:
            self._pools[old[0]].give_back(old[1])
