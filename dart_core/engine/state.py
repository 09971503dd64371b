"""One generation's state on the target, for one stream or several: the rows of a KV cache, each with its own
committed length, and the one attention mask every forward over them takes.

Why this layout: every stream accepts a different number of draft tokens each step, so the streams' caches grow by
different amounts. They share one stock cache of ``width`` columns (a ``DynamicCache``, or the fast path's
``StaticCache``), row ``b``'s committed tokens in its first ``lengths[b]`` columns and whatever lies after them
hidden by the mask (a per-row valid length). A forward appends ``size`` columns at ``width`` for every row: a prompt
chunk, or one padded draft tree per row; position ids are per row (committed length + depth), so a column's place in
the cache never matters to RoPE. With one row, ``width`` is its length and nothing is ever hidden.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from dart_core.engine.tree import DraftTree

__all__ = ["TargetState", "prompt_blocks", "rows_mask", "tree_blocks"]


@dataclass
class TargetState:
    """The KV cache of ``rows`` streams and how many columns of each row are committed.

    After :meth:`~dart_core.engine.target.TargetModel.verify_rows` the cache also holds ``pending`` uncommitted
    columns from ``width`` on (each row's tree, padded to one size); ``trees`` remembers the trees until
    :meth:`~dart_core.engine.target.TargetModel.commit_rows` moves each row's accepted path into place.
    """

    cache: Any  # a transformers DynamicCache or StaticCache
    lengths: list[int] = field(default_factory=lambda: [0])
    width: int = 0  # columns every row has committed or hidden (the longest row's committed length)
    trees: list[DraftTree] | None = field(default=None, repr=False)
    pending: int = 0  # columns the verified trees occupy after ``width``
    slot: tuple[int, int] | None = None  # the graph path's static cache it holds: (cache rows, index in their pool)
    idle: int = 0  # cache rows past the streams' (the graph path's bucket of rows): they run padding, never read

    @property
    def rows(self) -> int:
        """Streams in the state."""
        return len(self.lengths)

    @property
    def cache_rows(self) -> int:
        """Rows every forward runs: the streams and the idle rows."""
        return self.rows + self.idle

    @property
    def cache_lengths(self) -> list[int]:
        """Each cache row's committed columns: an idle row sees its first column only (a padding query needs a key
        to see, or its softmax is all ``-inf``)."""
        return [*self.lengths, *[1] * self.idle]

    @property
    def length(self) -> int:
        """The committed tokens of a one-stream state (a state of several streams has one length per row)."""
        if self.rows != 1:
            raise ValueError(f"TargetState.length: the state holds {self.rows} streams; read lengths[b]")
        return self.lengths[0]

    @property
    def tree(self) -> DraftTree | None:
        """The verified, uncommitted tree of a one-stream state (None when nothing is pending)."""
        return self.trees[0] if self.trees is not None and self.rows == 1 else None


def rows_mask(lengths: Sequence[int], width: int, size: int, keys: int, dtype: torch.dtype, device: torch.device,
              blocks: np.ndarray | None = None) -> torch.Tensor:
    """The additive ``[rows, 1, size, keys]`` mask of ``size`` new columns appended at ``width``: row ``b`` sees its
    ``lengths[b]`` committed columns and, among the new ones, what ``blocks[b]`` (``[size, size]`` booleans, query
    by key) allows; ``blocks`` None: plain causal attention among the new columns. A caller never leaves a query row
    with nothing to see (a padding row sees the committed columns), so no row's softmax is all ``-inf``.

    Built once per forward in the model's dtype on its device, allocated at a multiple of 8 columns, so the attention
    kernels take it as it is (an unaligned mask is copied by the memory-efficient CUDA kernel in every layer);
    ``keys`` is what the model attends over (``width + size``, or the static cache's capacity)."""
    rows = len(lengths)
    mask = torch.full((rows, 1, size, -(-keys // 8) * 8), torch.finfo(dtype).min, dtype=dtype, device=device)
    mask = mask[..., :keys]
    if rows == 1:
        mask[..., : lengths[0]] = 0
    else:
        committed = torch.arange(keys, device=device)[None] < torch.tensor(list(lengths), device=device)[:, None]
        mask.masked_fill_(committed[:, None, None, :], 0.0)
    new = mask[:, 0, :, width : width + size]
    if blocks is None:
        new.masked_fill_(torch.ones((size, size), dtype=torch.bool, device=device).tril_(), 0.0)
    else:
        new.masked_fill_(torch.from_numpy(np.ascontiguousarray(blocks)).to(device), 0.0)
    return mask


def tree_blocks(trees: Sequence[DraftTree], size: int, rows: int | None = None) -> np.ndarray:
    """``[rows, size, size]``: node i of row b's tree sees its ancestors (itself included); padding nodes (past a
    tree's last node) and the rows past the trees (default: one row per tree) see none of the new columns."""
    blocks = np.zeros((len(trees) if rows is None else rows, size, size), dtype=bool)
    for b, tree in enumerate(trees):
        blocks[b, : tree.size, : tree.size] = tree.ancestor_mask()
    return blocks


def prompt_blocks(ends: Sequence[int], start: int, size: int) -> np.ndarray:
    """``[rows, size, size]`` for the prompt columns ``start .. start + size`` of rows whose prompts end at
    ``ends[b]``: causal among a row's own prompt tokens; a padding column (past the row's prompt) is seen by none,
    and a padding row sees the row's prompt tokens before it (its output is never read)."""
    causal = np.tri(size, dtype=bool)
    cols = np.arange(size)
    return np.stack([causal & (cols < end - start)[None] for end in ends])
