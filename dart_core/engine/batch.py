"""Several streams on one target forward: the rows of a batched KV cache, each with its own committed length.

Why this layout: every stream accepts a different number of draft tokens each step, so the streams' caches grow by
different amounts. Here they share one stock ``DynamicCache`` of ``width`` columns, row ``b``'s committed tokens in
its first ``lengths[b]`` columns and whatever lies after them hidden by the 4-D mask (a per-row valid length). A
verify appends one padded tree per row (``T`` columns, ``T`` the largest tree); the commit copies each row's
accepted path to just after its committed columns (one gather and one scatter per layer for the whole batch) and
crops the cache to the longest row. Position ids are per row (committed length + depth), so a column's place in the
cache never matters to RoPE. A row whose stream ended leaves the batch (:meth:`BatchState.keep`). Stock
``transformers`` forwards only, as in :mod:`dart_core.engine.target`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from transformers import DynamicCache

from dart_core.engine.attention import sdpa_backends
from dart_core.engine.target import TargetModel
from dart_core.engine.tree import DraftTree

__all__ = ["BatchState", "kv_bytes_per_token"]


def kv_bytes_per_token(target: TargetModel) -> int:
    """Bytes one token's keys and values take in the target's cache, over every layer."""
    cfg = target.text_config
    heads = int(getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads)
    head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)
    return 2 * int(cfg.num_hidden_layers) * heads * head_dim * target.dtype.itemsize


@dataclass
class BatchState:
    """The batched cache of ``len(lengths)`` streams: ``lengths[b]`` committed columns of row ``b``; after a
    :meth:`verify` the cache also holds each row's tree in the columns from ``width`` on, until :meth:`commit`."""

    target: TargetModel
    cache: DynamicCache
    lengths: list[int] = field(default_factory=list)
    width: int = 0  # columns every row has committed or masked (the longest row's committed length)
    trees: list[DraftTree] | None = field(default=None, repr=False)

    @classmethod
    def new(cls, target: TargetModel) -> BatchState:
        if target.static_capacity is not None:
            raise ValueError("batched decoding runs on the dynamic KV cache: load the target without the fast path "
                             "(--no-fast-path)")
        return cls(target, DynamicCache(config=target.config))

    @property
    def rows(self) -> int:
        return len(self.lengths)

    # ------------------------------------------------------------------------------------------- forwards
    def _forward(self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor,
                 layers: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One forward of ``ids`` [B, T]: float32 logits [B, T, V] and the ``layers``' features [B, T, F]."""
        t = self.target
        with torch.no_grad(), sdpa_backends(ids.device):
            out = t.model(input_ids=ids, position_ids=positions, attention_mask=mask,
                          **{t.cache_arg: self.cache}, use_cache=True, output_hidden_states=bool(layers),
                          return_dict=True)
        dev = t.feature_device
        feats = torch.cat([out.hidden_states[i].to(dev) for i in layers], dim=-1) if layers else None
        return out.logits.to(device=dev, dtype=torch.float32), feats

    def _blocked_mask(self, rows: int, keys: int) -> torch.Tensor:
        """An additive [B, 1, rows, keys] mask hiding everything, allocated at a multiple of 8 columns (as the
        single-stream masks are: the GPU kernels take it without a copy)."""
        t = self.target
        full = torch.full((self.rows, 1, rows, -(-keys // 8) * 8), torch.finfo(t.dtype).min, dtype=t.dtype,
                          device=t.device)
        return full[..., :keys]

    def prefill(self, prompts: Sequence[Sequence[int]],
                layers: Sequence[int]) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
        """Run every prompt (right-padded to the longest) into the empty cache and commit each row's own tokens.
        Returns the logits after each prompt's last token [B, V] and each prompt's features [n_b, F]."""
        if self.rows or self.cache.get_seq_length():
            raise ValueError("prefill: the batch already holds tokens; start a new BatchState")
        if not prompts or any(len(p) == 0 for p in prompts):
            raise ValueError("prefill: every stream needs a prompt of at least one token")
        t = self.target
        self.lengths = [len(p) for p in prompts]
        width = max(self.lengths)
        ids = torch.zeros((len(prompts), width), dtype=torch.long)
        for b, p in enumerate(prompts):
            ids[b, : len(p)] = torch.as_tensor(list(p), dtype=torch.long)
        positions = torch.arange(width)[None].expand(len(prompts), width)
        mask = self._blocked_mask(width, width)
        causal = torch.ones((width, width), dtype=torch.bool).tril()
        for b, n in enumerate(self.lengths):
            visible = causal.clone()
            visible[:, n:] = False  # a padding column is seen by no row
            visible[n:, :n] = True  # a padding row sees the prompt (its output is never read)
            mask[b, 0].masked_fill_(visible.to(t.device), 0.0)
        logits, feats = self._forward(ids.to(t.device), positions.to(t.device), mask, layers)
        self.width = width
        last = torch.tensor([n - 1 for n in self.lengths], device=logits.device)
        rows = torch.arange(self.rows, device=logits.device)
        return logits[rows, last], [None if feats is None else feats[b, :n] for b, n in enumerate(self.lengths)]

    def verify(self, trees: Sequence[DraftTree],
               layers: Sequence[int]) -> tuple[list[torch.Tensor], list[torch.Tensor | None]]:
        """Every row's tree in one forward, after that row's committed tokens, with tree attention: node i of row
        b sits at position ``lengths[b] + depth(i)`` and sees row b's committed columns and its own ancestors;
        padding nodes see the committed columns alone. Returns each row's logits [n_b, V] and features [n_b, F];
        the trees stay in the cache until :meth:`commit`."""
        if len(trees) != self.rows:
            raise ValueError(f"verify: {len(trees)} trees for a batch of {self.rows} streams")
        if self.trees is not None:
            raise RuntimeError("verify: the last verified trees were never committed")
        t = self.target
        size = max(tree.size for tree in trees)
        for b, tree in enumerate(trees):
            end = self.lengths[b] + int(tree.depths.max()) + 1
            if end > t.max_context:
                raise ValueError(f"verify: stream {b}'s tree reaches position {end - 1}, past the target's "
                                 f"context of {t.max_context}")
        ids = np.zeros((self.rows, size), dtype=np.int64)
        pos = np.zeros((self.rows, size), dtype=np.int64)
        visible = np.zeros((self.rows, size, self.width + size), dtype=bool)
        for b, tree in enumerate(trees):
            n, length = tree.size, self.lengths[b]
            ids[b, :n] = tree.tokens
            pos[b] = length
            pos[b, :n] = tree.position_ids(length)
            visible[b, :, :length] = True
            visible[b, :n, self.width : self.width + n] = tree.ancestor_mask()
        mask = self._blocked_mask(size, self.width + size)
        mask.masked_fill_(torch.from_numpy(visible).to(t.device)[:, None], 0.0)
        logits, feats = self._forward(torch.from_numpy(ids).to(t.device), torch.from_numpy(pos).to(t.device),
                                      mask, layers)
        self.trees = list(trees)
        return ([logits[b, : tree.size] for b, tree in enumerate(trees)],
                [None if feats is None else feats[b, : tree.size] for b, tree in enumerate(trees)])

    def commit(self, paths: Sequence[Sequence[int]]) -> None:
        """Keep each row's accepted root-to-node path of its verified tree, right after its committed columns,
        and crop the cache to the longest row."""
        trees = self.trees
        if trees is None:
            raise ValueError("commit: no verified trees pending; call verify first")
        if len(paths) != self.rows:
            raise ValueError(f"commit: {len(paths)} paths for a batch of {self.rows} streams")
        paths = [[int(i) for i in path] for path in paths]
        for b, (tree, path) in enumerate(zip(trees, paths, strict=True)):  # all checked before any row changes
            if (not path or path[0] != 0 or any(not 0 <= c < tree.size for c in path)
                    or any(int(tree.parents[c]) != p for p, c in itertools.pairwise(path))):
                raise ValueError(f"commit: {path} is not a root-to-node path of stream {b}'s tree")
        rows, src, dst = [], [], []
        for b, path in enumerate(paths):
            for j, node in enumerate(path):
                if self.width + node != self.lengths[b] + j:
                    rows.append(b)
                    src.append(self.width + node)
                    dst.append(self.lengths[b] + j)
            self.lengths[b] += len(path)
        if rows:
            dev = self.target.device
            bi, si, di = (torch.tensor(v, device=dev) for v in (rows, src, dst))
            for layer in self.cache.layers:
                if layer.is_initialized:
                    layer.keys[bi, :, di] = layer.keys[bi, :, si]
                    layer.values[bi, :, di] = layer.values[bi, :, si]
        self.trees = None
        self._crop()

    def _crop(self) -> None:
        width = max(self.lengths, default=0)
        extra = self.cache.get_seq_length() - width
        if extra > 0:
            self.cache.crop(-extra)
        self.width = width

    def keep(self, rows: Sequence[int]) -> None:
        """Only ``rows`` (indices, in order) stay in the batch: the streams that have not ended."""
        if self.trees is not None:
            raise RuntimeError("keep: commit the verified trees first")
        rows = list(rows)
        if rows == list(range(self.rows)):
            return
        idx = torch.tensor(rows, dtype=torch.long, device=self.target.device)
        for layer in self.cache.layers:
            if layer.is_initialized:
                layer.keys = layer.keys.index_select(0, idx)
                layer.values = layer.values.index_select(0, idx)
        self.lengths = [self.lengths[b] for b in rows]
        self._crop()
