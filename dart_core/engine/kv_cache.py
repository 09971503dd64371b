"""A KV cache layer that writes each forward's keys and values in place, for the target's states and the
distillation's batches.

transformers' ``DynamicLayer`` grows by ``torch.cat``: every forward copies every row's whole key/value history
once per layer, so a decode step's copying grows with the context (measured on a CPU:
docs/benchmarks.md#measurements-behind-design-choices). ``PreallocatedLayer`` keeps
each layer's keys and values in one buffer with room after the filled positions, writes a forward's rows there and
hands the model a view of the filled part: a stock cache layer (the model's code is untouched), which the engine
may also write into through that view (its commit moves the accepted path in place). A buffer that is full is
either refused (the distillation sizes its buffers exactly) or replaced by a larger one (``grow``: a quarter more,
at least ``GROW_MIN`` positions), so a state's copying is a bounded multiple of its length, not of its length
times its steps.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

__all__ = ["GROW_MIN", "PreallocatedLayer", "growing_cache", "row_moves"]

GROW_MIN = 256  # positions a growing buffer gains at least when it fills (a decode step adds one to a few dozen)


class PreallocatedLayer(DynamicLayer):
    """A ``DynamicLayer`` whose keys and values are written into a buffer of ``capacity`` positions, allocated on
    the first update; the model sees ``buffer[:, :, :length]``. ``batch_select_indices`` keeps some rows, ``crop``
    drops the last positions. With ``grow``, a forward that does not fit moves the filled positions into a larger
    buffer; without, it is refused."""

    def __init__(self, capacity: int, *, grow: bool = False) -> None:
        super().__init__()
        self.capacity = capacity
        self.grow = grow
        self.length = 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self._allocate(key_states.shape[0], key_states, value_states)

    def _allocate(self, rows: int, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Buffers of ``rows`` rows and ``capacity`` positions; heads, width, dtype, device as ``keys``/``values``."""
        self.device = keys.device
        self.key_buffer = keys.new_empty((rows, keys.shape[1], self.capacity, keys.shape[-1]))
        self.value_buffer = values.new_empty((rows, values.shape[1], self.capacity, values.shape[-1]))
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            if self.grow:
                self.capacity = max(self.capacity, key_states.shape[-2] + GROW_MIN)
            self.lazy_initialization(key_states, value_states)
        end = self.length + key_states.shape[-2]
        if end > self.capacity:
            if not self.grow:
                raise ValueError(f"the cache holds {self.capacity} positions; this forward needs {end}")
            self._enlarge(end + max(GROW_MIN, end // 4))
        self.key_buffer[:, :, self.length:end] = key_states
        self.value_buffer[:, :, self.length:end] = value_states
        self.length = end
        self._expose()
        return self.keys, self.values

    def _enlarge(self, capacity: int) -> None:
        """New buffers of ``capacity`` positions holding the filled ones (the old buffers go with their views)."""
        keys, values = self.keys, self.values
        self.capacity = capacity
        self._allocate(keys.shape[0], keys, values)
        self.key_buffer[:, :, : self.length] = keys
        self.value_buffer[:, :, : self.length] = values

    def _expose(self) -> None:
        """``keys``/``values``: the buffers' first ``length`` positions, the view the model attends to."""
        self.keys = self.key_buffer[:, :, : self.length]
        self.values = self.value_buffer[:, :, : self.length]

    def get_seq_length(self) -> int:
        return self.length

    def get_max_length(self) -> int:
        return -1 if self.grow else self.capacity

    def crop(self, tokens_to_remove: int) -> None:
        """Drop the last ``-tokens_to_remove`` positions (a negative count, as ``DynamicLayer.crop`` takes it)."""
        if tokens_to_remove > 0:
            raise ValueError(f"crop takes the number of positions to drop as a negative count, got {tokens_to_remove}")
        if not self.is_initialized or tokens_to_remove == 0:
            return
        self.length = max(0, self.length + tokens_to_remove)
        self._expose()

    def reset(self) -> None:
        self.length = 0
        super().reset()

    @classmethod
    def joined(cls, parts: Sequence[PreallocatedLayer], capacity: int) -> PreallocatedLayer:
        """One layer of ``capacity`` positions holding the rows of ``parts`` one after another, right-aligned: a
        part shorter than the longest starts that many columns later, its columns before zeros (left padding, which
        the mask hides; zeros, not stale memory, since a masked NaN would still reach the output)."""
        if not parts or any(not p.is_initialized for p in parts):
            raise ValueError("only filled parts can be joined")
        length = max(p.length for p in parts)
        if length > capacity:
            raise ValueError(f"the cache holds {capacity} positions; the parts hold {length}")
        rows = sum(p.keys.shape[0] for p in parts)
        layer = cls(capacity)
        layer._allocate(rows, parts[0].keys, parts[0].values)
        a = 0
        for p in parts:
            b, pad = a + p.keys.shape[0], length - p.length
            for buffer, part in ((layer.key_buffer, p.keys), (layer.value_buffer, p.values)):
                buffer[a:b, :, :pad] = 0
                buffer[a:b, :, pad:length] = part
            a = b
        layer.length = length
        layer._expose()
        return layer

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep the rows ``indices``. Increasing ones are moved up in place: only their filled positions are copied
        and nothing is allocated (a new buffer per drop cost far more on a CPU, mostly first-touch page faults;
        measured: docs/benchmarks.md#measurements-behind-design-choices); rows in another order are gathered into
        new buffers."""
        if not self.is_initialized:
            return
        rows = indices.tolist()
        if any(b <= a for a, b in itertools.pairwise(rows)):
            self.key_buffer = self.key_buffer.index_select(0, indices.to(self.key_buffer.device))
            self.value_buffer = self.value_buffer.index_select(0, indices.to(self.value_buffer.device))
            self._expose()
            return
        for dst, src, n in row_moves(rows):
            for buffer in (self.key_buffer, self.value_buffer):
                buffer[dst:dst + n, :, : self.length] = buffer[src:src + n, :, : self.length]
        self.key_buffer = self.key_buffer[: len(indices)]
        self.value_buffer = self.value_buffer[: len(indices)]
        self._expose()


def row_moves(rows: Sequence[int]) -> list[tuple[int, int, int]]:
    """(to, from, count) row-block copies that put ``rows`` (increasing) at 0, 1, ...: blocks of rows that move
    by the same offset, cut to at most that offset so that no copy reads a row another has written or overlaps
    itself; done in order, each reads rows not yet overwritten."""
    if any(b <= a for a, b in itertools.pairwise(rows)):
        raise ValueError("rows to keep must be increasing")
    moves: list[tuple[int, int, int]] = []
    dst = 0
    while dst < len(rows):
        offset = rows[dst] - dst
        end = dst + 1
        while end < len(rows) and rows[end] - end == offset:
            end += 1
        if offset:
            for a in range(dst, end, offset):
                moves.append((a, a + offset, min(offset, end - a)))
        dst = end
    return moves


def growing_cache(config: Any) -> DynamicCache:
    """transformers' ``DynamicCache`` for ``config`` with every full-attention layer a growing
    ``PreallocatedLayer`` (sliding-window and other kinds of layers stay as transformers builds them)."""
    cache = DynamicCache(config=config)
    cache.layers = [PreallocatedLayer(0, grow=True) if type(layer) is DynamicLayer else layer
                    for layer in cache.layers]
    return cache
