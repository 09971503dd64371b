"""The target model: a stock Hugging Face decoder-only LM driven for speculative decoding.

No modeling code is copied or forked: tree attention is expressed purely through the public forward arguments
(a 4-D additive float mask plus ``position_ids`` = prefix length + depth), the KV cache is a stock
``DynamicCache`` and the drafter features come from ``output_hidden_states=True``.

Per-generation state (the KV cache and the committed length) lives in a :class:`TargetState`, never on the
model, so one :class:`TargetModel` can serve several generations that alternate step by step (the app's race).

Facts about transformers 5.x relied on here (checked against 5.23):

* ``hidden_states`` holds ``num_hidden_layers + 1`` tensors; ``hs[i]`` is the input of decoder layer i.
* ``DynamicCache.layers[i].keys/.values`` are ``[batch, kv_heads, seq, head_dim]`` tensors that may be rewritten;
  ``Cache.crop(n)`` only accepts ``n <= 0`` and drops the last ``-n`` positions (a positive ``n`` raises).
* ``StaticCache`` layers (the fast path) hold ``[batch, kv_heads, capacity, head_dim]`` buffers and write a forward's
  rows at ``cumulative_length`` (a 0-d tensor), which is also the length the model derives its cache positions
  and causal mask from: setting it drops rows, and the causal mask hides every row past a query's own position.
"""

from __future__ import annotations

import inspect
import itertools
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from transformers import DynamicCache, StaticCache
from transformers.cache_utils import DynamicLayer, StaticLayer

from dart_core.engine.attention import sdpa_backends
from dart_core.engine.cpu_linear import CpuLinearPlan
from dart_core.engine.graphs import GraphedCall, SlotPool
from dart_core.engine.hf_config import feature_layer_ids, text_config
from dart_core.engine.tree import DraftTree
from dart_core.loading.hub import cache_root

__all__ = ["FAST_PATH_MODES", "FAST_PATH_ROWS", "TargetModel", "TargetState"]

FAST_PATH_ROWS = 4096  # the fast path's static KV cache when no size is given: prompt + reply + one draft tree
# how the fast path runs its static-shape forwards: captured CUDA graphs (ready in seconds), torch.compile (minutes
# of compiling), or eagerly (the static cache alone)
FAST_PATH_MODES = ("graphs", "compile", "eager")
GRAPH_ROWS = 64  # the largest verify captured as a graph (buckets 1, 2, 4, … 64 rows); larger trees run eagerly


def cache_keyword(model: Any) -> str:
    """The keyword ``model``'s forward and ``generate`` take the KV cache by: ``cache`` where the forward takes it
    (transformers >= 5.24, where the old name ``past_key_values`` warns that it is deprecated), else the old name."""
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        params = {}
    return "cache" if "cache" in params else "past_key_values"


@dataclass
class TargetState:
    """One generation's view of the target: its KV cache and how many of its rows are committed.

    After :meth:`TargetModel.verify` the cache also holds the (uncommitted) tree rows after ``length``;
    ``tree`` remembers that tree until :meth:`TargetModel.commit` compacts the accepted path into place.
    """

    cache: DynamicCache
    length: int = 0
    tree: DraftTree | None = field(default=None, repr=False)
    slot: int | None = None  # the graph path's static cache it holds (its graphs are that cache's)


# An interruptible prefill (``prefill(interrupt=...)``) runs a long prompt in chunks and asks between two whether to
# go on: in one forward, a time limit or a Stop could only wait it out (a 6,000-token prompt: a minute on a shared
# 2-core CPU). A chunk holds at most PREFILL_CHUNK rows, and fewer as the prefix grows, so that rows x attended
# positions stays within PREFILL_WORK (the second full chunk's): a chunk's attention cost, which grows with the
# prefix, stays about constant instead of growing sevenfold from the first 512 rows to the thirteenth (measured on
# SmolLM2). The schedule depends on the prompt's length only, so every racer's prefill computes the same numbers.
PREFILL_CHUNK = 512
PREFILL_WORK = PREFILL_CHUNK * 2 * PREFILL_CHUNK
PREFILL_MIN_CHUNK = 32


def prefill_chunks(n: int) -> list[tuple[int, int]]:
    """(start, end) of each chunk of an ``n``-token interruptible prefill: at most :data:`PREFILL_CHUNK` rows, and
    ``rows * (start + rows)`` within :data:`PREFILL_WORK` (never below :data:`PREFILL_MIN_CHUNK` rows)."""
    out, start = [], 0
    while start < n:
        rows = int((math.sqrt(start * start + 4 * PREFILL_WORK) - start) / 2)  # rows * (start + rows) <= WORK
        rows = min(max(PREFILL_MIN_CHUNK, min(PREFILL_CHUNK, rows)), n - start)
        out.append((start, start + rows))
        start += rows
    return out


class Interrupted(Exception):
    """A prefill stopped between two chunks because its ``interrupt()`` said so; the generation is abandoned."""


class TargetModel:
    """Wraps a stock ``AutoModelForCausalLM`` for prefill / tree verify / commit / plain AR steps.

    ``feature_layers`` overrides the hidden-state layer choice with decoder-layer OUTPUT ids (as a drafter config
    gives them); ``feature_device`` is where logits and features are returned (default: the input-embedding
    device, which matters for ``device_map="auto"`` models whose last layers live elsewhere).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        feature_layers: Sequence[int] | None = None,
        feature_device: torch.device | str | None = None,
    ) -> None:
        self.model = model.eval()
        self.config = model.config
        self.text_config = text_config(model.config)
        self.feature_layers: tuple[int, int, int] = feature_layer_ids(model.config, feature_layers)
        self.feature_device = torch.device(feature_device) if feature_device is not None else self.device
        try:
            params = inspect.signature(model.forward).parameters
        except (TypeError, ValueError):
            params = {}
        self._has_logits_to_keep = "logits_to_keep" in params
        self._cache_arg = cache_keyword(model)
        self.static_capacity: int | None = None  # the fast path (use_static_cache): rows of the static KV cache
        self._compiled: Any = None  # its compiled forward for decode / verify (prefill runs eagerly)
        self._graphs: GraphedCall | None = None  # or its captured forwards, one per slot and row bucket
        self._compactions: GraphedCall | None = None  # and its captured commits, one per slot and path length
        self._slots: SlotPool[StaticCache] | None = None  # the graph path's static caches, lent to states
        self.cpu_linears: CpuLinearPlan | None = None  # on a CPU: the linear layers' kernel by rows (load_target)

    # ------------------------------------------------------------- fast path
    def use_static_cache(self, capacity: int, *, compile: bool = False, graphs: bool = False) -> None:
        """The fast path for GPUs: every new state holds a preallocated ``StaticCache`` of ``capacity`` rows
        (prompt + output + one draft tree; the context limit becomes ``capacity``) that decode and verify write in
        place. Trees are padded to a power-of-two node count (padding rows see the prefix only and no real row sees
        them), so a few fixed shapes cover every step, and each such forward then runs as

        * ``graphs``: a CUDA graph per row bucket, recorded on first use (:class:`GraphedCall`, well under a second
          each) over a static cache the state borrows from a pool (a graph is bound to its cache's memory); off CUDA
          the same static-shape forward runs uncaptured;
        * ``compile``: ``torch.compile`` (``mode="reduce-overhead"`` on a GPU: CUDA graphs through inductor, minutes
          of compiling at start).

        Exact: in float32 the output equals the eager path's (tests); only the kernels' summation order may
        differ."""
        capacity = int(capacity)
        if capacity < 2:
            raise ValueError(f"use_static_cache: capacity must be at least 2 rows, got {capacity}")
        if compile and graphs:
            raise ValueError("use_static_cache: choose compile or graphs, not both")
        self.static_capacity = min(capacity, int(self.text_config.max_position_embeddings))
        self._compiled = None
        self._graphs = GraphedCall(self._static_forward, self.device) if graphs else None
        self._compactions = GraphedCall(self._static_compact, self.device) if graphs else None
        self._slots = SlotPool(lambda: StaticCache(config=self.config, max_cache_len=self.static_capacity))
        if compile:
            import torch._dynamo

            # inductor's compiled kernels in the arena's cache, not /tmp: a restart reuses them instead of
            # compiling for another minute (an explicit TORCHINDUCTOR_CACHE_DIR wins)
            os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache_root() / "inductor"))

            for knob in ("recompile_limit", "cache_size_limit"):  # one graph per tree bucket and feature choice
                if hasattr(torch._dynamo.config, knob):
                    setattr(torch._dynamo.config, knob, max(64, getattr(torch._dynamo.config, knob)))
            mode = "reduce-overhead" if self.device.type == "cuda" else None
            self._compiled = torch.compile(self.model.forward, mode=mode, dynamic=False)

    @property
    def fast_path(self) -> str | None:
        """Which fast path runs (one of :data:`FAST_PATH_MODES`), or None: the eager dynamic-cache path."""
        if self.static_capacity is None:
            return None
        return "graphs" if self._graphs is not None else "compile" if self._compiled is not None else "eager"

    @property
    def _graph_calls(self) -> list[GraphedCall]:
        return [g for g in (self._graphs, self._compactions) if g is not None]

    @property
    def graphs_captured(self) -> int:
        """CUDA graphs recorded so far (0 off CUDA and off the graph path)."""
        return sum(g.captured for g in self._graph_calls)

    @property
    def capture_seconds(self) -> float:
        """Seconds spent recording CUDA graphs so far."""
        return sum(g.capture_s for g in self._graph_calls)

    @property
    def capture_failures(self) -> list[str]:
        """Why each forward or commit that could not be captured runs uncaptured (none, as a rule)."""
        return [why for g in self._graph_calls for why in g.failed.values()]

    def _static_compact(self, key: tuple[int, int], rows: torch.Tensor) -> None:
        """The graph path's commit on slot ``key[0]``: every layer's K/V rows ``rows[0]`` copied to ``rows[1]``."""
        for layer in self._slots.slots[key[0]].layers:
            if layer.is_initialized:
                layer.keys.index_copy_(2, rows[1], layer.keys.index_select(2, rows[0]))
                layer.values.index_copy_(2, rows[1], layer.values.index_select(2, rows[0]))

    def _static_forward(self, key: tuple[Any, ...], ids: torch.Tensor, positions: torch.Tensor,
                        mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The graph path's forward: ``key`` = (slot, layers, rows); every row's logits in float32 and the layers'
        features, each on the model's device (copied out after the replay)."""
        slot, layers, _ = key
        out = self.model(input_ids=ids, position_ids=positions, attention_mask=mask,
                         **{self._cache_arg: self._slots.slots[slot]}, use_cache=True,
                         output_hidden_states=bool(layers), return_dict=True)
        feats = torch.cat([out.hidden_states[i][0] for i in layers], dim=-1) if layers else None
        return out.logits[0].float(), feats

    def _padded_size(self, n: int, prefix: int) -> int:
        """Compiled or captured verifies run at a power-of-two node count (fewer shapes to compile or record), if
        the cache has room."""
        if self._compiled is None and self._graphs is None:
            return n
        size = 1 << (n - 1).bit_length()
        return size if prefix + size <= self.max_context else n

    # ------------------------------------------------------------- properties
    @property
    def cache_arg(self) -> str:
        """The forward's keyword for the KV cache (``cache``, or ``past_key_values`` before transformers 5.24)."""
        return self._cache_arg

    @property
    def embed_tokens(self) -> torch.nn.Module:
        """The input embedding module (drafters share its weight)."""
        return self.model.get_input_embeddings()

    @property
    def device(self) -> torch.device:
        """Where input ids must go: the device of the input embedding (first shard under ``device_map``)."""
        return self.embed_tokens.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.embed_tokens.weight.dtype

    @property
    def vocab_size(self) -> int:
        out = self.model.get_output_embeddings()
        if out is not None and getattr(out, "weight", None) is not None:
            return int(out.weight.shape[0])
        return int(self.text_config.vocab_size)

    @property
    def hidden_size(self) -> int:
        return int(self.text_config.hidden_size)

    @property
    def feature_size(self) -> int:
        """Width of one feature row: three hidden states concatenated."""
        return 3 * self.hidden_size

    @property
    def max_context(self) -> int:
        """Positions a generation may use: the model's context, or the static cache's rows on the fast path."""
        if self.static_capacity is not None:
            return self.static_capacity
        return int(self.text_config.max_position_embeddings)

    # ------------------------------------------------------------- state
    def new_state(self) -> TargetState:
        """A fresh, empty per-generation state."""
        if self._graphs is not None and self._slots is not None:
            state = TargetState(cache=None)  # type: ignore[arg-type]  # a slot's cache, lent just below
            state.slot = self._slots.lend(state)
            state.cache = self._slots.slots[state.slot]
            self._set_static_length(state, 0)
            return state
        if self.static_capacity is not None:
            return TargetState(cache=StaticCache(config=self.config, max_cache_len=self.static_capacity))
        return TargetState(cache=DynamicCache(config=self.config))

    @staticmethod
    def _set_static_length(state: TargetState, rows: int) -> None:
        """Where a static cache's next forward writes (and what its causal mask counts as the past): every layer's
        length at once (two multi-tensor kernels on a GPU, not one launch a layer)."""
        lengths = [layer.cumulative_length for layer in state.cache.layers]
        torch._foreach_zero_(lengths)
        if rows:
            torch._foreach_add_(lengths, rows)

    def _check_state(self, state: TargetState) -> None:
        if isinstance(state.cache, StaticCache):
            return
        cached = state.cache.get_seq_length()
        if cached < state.length:
            raise RuntimeError(f"TargetState is inconsistent: cache holds {cached} rows but length is {state.length}")

    def _drop_uncommitted(self, state: TargetState) -> None:
        """Discard tree rows left by a verify that was never committed (state.length is authoritative)."""
        if isinstance(state.cache, StaticCache):
            if state.tree is not None:
                self._set_static_length(state, state.length)
            state.tree = None
            return
        self._check_state(state)
        extra = state.cache.get_seq_length() - state.length
        if extra > 0:
            state.cache.crop(-extra)
        state.tree = None

    # ------------------------------------------------------------- forward
    def _run(
        self,
        state: TargetState,
        ids: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor | None,
        last_only: bool,
        layers: Sequence[int] | None = None,
        eager: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One forward; features = the ``layers`` of ``hidden_states`` (default ``feature_layers``; none: no
        hidden states are asked for) concatenated per row. The fast path's compiled forward runs it unless
        ``eager`` (the prefill, whose length varies)."""
        layers = self.feature_layers if layers is None else tuple(layers)
        features = bool(layers)
        rows = ids.shape[-1]
        if not eager and self._graphs is not None and state.slot is not None and rows <= GRAPH_ROWS:
            if mask is None:
                mask = self._causal_mask(state.length, rows)
            with torch.no_grad(), sdpa_backends(ids.device):
                logits, feats = self._graphs((state.slot, layers, rows), ids=ids, positions=positions, mask=mask)
            dev = self.feature_device
            logits = logits[-1:] if last_only else logits
            logits = logits.to(device=dev, dtype=torch.float32, copy=True)
            feats = feats.to(device=dev, copy=True) if feats is not None else None
            return (logits[-1] if last_only else logits), feats
        kwargs: dict[str, Any] = {
            "input_ids": ids,
            "position_ids": positions,
            self._cache_arg: state.cache,
            "use_cache": True,
            "output_hidden_states": features,
            "return_dict": True,
        }
        if mask is not None:
            kwargs["attention_mask"] = mask
        if last_only and self._has_logits_to_keep:
            # by index, not ``1``: a strided last-position view makes torch's CPU linear copy the head (bf16: 56 ms
            # instead of 4 ms for SmolLM2's 49k-token head at one prompt)
            kwargs["logits_to_keep"] = torch.tensor([ids.shape[-1] - 1], device=ids.device)
        forward = self.model if eager or self._compiled is None else self._compiled
        with torch.no_grad(), sdpa_backends(ids.device):
            out = forward(**kwargs)
        dev = self.feature_device
        feats = torch.cat([out.hidden_states[i][0].to(dev) for i in layers], dim=-1) if features else None
        logits = out.logits[0].to(device=dev, dtype=torch.float32)
        if last_only:
            logits = logits[-1]
        return logits, feats

    def _as_ids(self, input_ids: torch.Tensor | Sequence[int], what: str) -> torch.Tensor:
        ids = torch.as_tensor(input_ids, dtype=torch.long)
        if ids.dim() == 1:
            ids = ids[None]
        if ids.dim() != 2 or ids.shape[0] != 1:
            raise ValueError(f"{what}: expected token ids of shape [1, n] (batch 1), got {tuple(ids.shape)}")
        return ids.to(self.device)

    def prefill(self, state: TargetState, input_ids: torch.Tensor, layers: Sequence[int] | None = None,
                interrupt: Callable[[], bool] | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Run the prompt into an empty state and commit it.

        Returns the float32 logits of the last position ``[V]`` and the features of every prompt token
        ``[n, F]`` (the drafter needs the whole prompt's features to start; ``layers``: which hidden states,
        default ``feature_layers``, ``()`` for none). With ``interrupt``, a prompt longer than
        :data:`PREFILL_CHUNK` runs in chunks (:func:`prefill_chunks`) and :class:`Interrupted` is raised when
        ``interrupt()`` is true between two of them (a time limit, a Stop); the static cache of the fast path
        always prefills in one forward.
        """
        ids = self._as_ids(input_ids, "prefill")
        n = ids.shape[1]
        if n == 0:
            raise ValueError("prefill: the prompt is empty (0 tokens); at least one token is needed")
        if n > self.max_context:
            raise ValueError(f"prefill: prompt of {n} tokens exceeds the target's context of {self.max_context}")
        if state.length or (not isinstance(state.cache, StaticCache) and state.cache.get_seq_length()):
            raise ValueError("prefill: the state already holds tokens; use a fresh target.new_state()")
        if interrupt is not None and n > PREFILL_CHUNK and not isinstance(state.cache, StaticCache):
            return self._prefill_chunks(state, ids, layers, interrupt)
        positions = torch.arange(n, device=self.device)[None]
        logits, feats = self._run(state, ids, positions, None, last_only=True, layers=layers, eager=True)
        state.length = n
        return logits, feats

    def _prefill_chunks(self, state: TargetState, ids: torch.Tensor, layers: Sequence[int] | None,
                        interrupt: Callable[[], bool]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """:meth:`prefill` in the chunks of :func:`prefill_chunks`, each attending to the rows cached before it
        (the causal mask of a forward with a past), asking ``interrupt()`` before every chunk but the first."""
        n, parts = ids.shape[1], []
        logits: torch.Tensor | None = None
        for start, end in prefill_chunks(n):
            if start and interrupt():
                raise Interrupted(f"prefill interrupted after {start:,} of {n:,} prompt tokens")
            positions = torch.arange(start, end, device=self.device)[None]
            logits, feats = self._run(state, ids[:, start:end], positions, None, last_only=True, layers=layers,
                                      eager=True)
            state.length = end
            if feats is not None:
                parts.append(feats)
        if logits is None:
            raise ValueError("prefill: the prompt is empty")
        return logits, torch.cat(parts) if parts else None

    def forward_tokens(
        self, state: TargetState, input_ids: torch.Tensor | Sequence[int], *, features: bool = True,
        layers: Sequence[int] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Append one or more tokens and commit them (plain AR step, or feeding a bonus token).

        Any uncommitted tree rows are discarded first. Returns the last position's float32 logits ``[V]`` and
        the features of the new tokens ``[n, 3H]`` (None with ``features=False``: plain decoding needs no
        hidden states, and the AR baseline should not pay for them; ``layers`` picks them, as in :meth:`prefill`).
        """
        ids = self._as_ids(input_ids, "forward_tokens")
        n = ids.shape[1]
        if n == 0:
            raise ValueError("forward_tokens: no tokens given")
        self._drop_uncommitted(state)
        if state.length + n > self.max_context:
            raise ValueError(
                f"forward_tokens: {state.length} committed + {n} new tokens exceed the target's context "
                f"of {self.max_context}"
            )
        positions = torch.arange(state.length, state.length + n, device=self.device)[None]
        logits, feats = self._run(state, ids, positions, None, last_only=True, layers=layers if features else ())
        state.length += n
        return logits, feats

    def _require_compactable(self, state: TargetState, what: str) -> None:
        for i, layer in enumerate(state.cache.layers):
            if type(layer) not in (DynamicLayer, StaticLayer):
                raise NotImplementedError(
                    f"{what}: cache layer {i} is a {type(layer).__name__}; tree verification and KV compaction "
                    "support only full-attention DynamicLayer / StaticLayer caches"
                )

    def verify(self, state: TargetState, tree: DraftTree,
               layers: Sequence[int] | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Run every tree node in one forward after the committed prefix, with tree attention.

        Node i sits at position ``length + depth(i)`` and attends to the whole prefix plus its own ancestors (a
        4-D mask; a chain, where that is plain causal attention, gets none: the kernel's own causal path).
        Returns float32 logits ``[n_tree, V]`` and features ``[n_tree, F]`` (``layers`` as in :meth:`prefill`);
        the cache then also holds the (uncommitted) tree rows until :meth:`commit`.
        """
        if state.length == 0:
            raise ValueError("verify: the state is empty; call prefill first")
        self._drop_uncommitted(state)
        self._require_compactable(state, "verify")
        prefix = state.length
        depth = int(tree.depths.max())
        if prefix + depth + 1 > self.max_context:
            raise ValueError(
                f"verify: prefix of {prefix} tokens + tree depth {depth} (+ root) reaches position {prefix + depth}, "
                f"past the target's context of {self.max_context}"
            )
        n = tree.size
        size = self._padded_size(n, prefix)  # n, or the compiled path's bucket: rows n.. are padding
        dev = self.device
        tokens, pos = tree.tokens.astype(np.int64), tree.position_ids(prefix).astype(np.int64)
        if size > n:
            tokens = np.concatenate([tokens, np.zeros(size - n, dtype=np.int64)])
            pos = np.concatenate([pos, np.full(size - n, prefix, dtype=np.int64)])
        mask: torch.Tensor | None = None  # a chain (DFlash, AR-like): the model's own causal attention suffices
        if size > n or not np.array_equal(tree.parents, np.arange(-1, n - 1)):
            mask = self._tree_mask(tree, prefix, size)
        ids = torch.from_numpy(tokens).to(dev)[None]
        positions = torch.from_numpy(pos).to(dev)[None]
        logits, feats = self._run(state, ids, positions, mask, last_only=False, layers=layers)
        if size > n:
            logits, feats = logits[:n], feats[:n] if feats is not None else None
        state.tree = tree
        return logits, feats

    def _causal_mask(self, prefix: int, rows: int) -> torch.Tensor:
        """The additive 4-D mask of ``rows`` new tokens after ``prefix`` on a static cache: each sees the prefix,
        the new rows up to itself, and nothing past (the graph path passes every forward an explicit mask)."""
        keys = self.static_capacity if self.static_capacity is not None else prefix + rows
        blocked = torch.finfo(self.dtype).min
        cols = torch.arange(keys, device=self.device)
        last = prefix + torch.arange(rows, device=self.device)
        mask = torch.zeros((1, 1, rows, -(-keys // 8) * 8), dtype=self.dtype, device=self.device)[..., :keys]
        return mask.masked_fill_(cols[None, None, None] > last[None, None, :, None], blocked)

    def _tree_mask(self, tree: DraftTree, prefix: int, size: int) -> torch.Tensor:
        """The additive 4-D mask of one verify, built once per step in the model's dtype on its device: every
        row sees the prefix, a tree row its ancestors; padding rows (``size`` > nodes) see the prefix alone. Its
        rows span the key length the model attends over (prefix + size, or the static cache's capacity) and are
        allocated at a multiple of 8 columns, so the attention kernels take it as it is (an unaligned mask is
        copied by the memory-efficient CUDA kernel in every layer)."""
        n, dev = tree.size, self.device
        keys = self.static_capacity if self.static_capacity is not None else prefix + size
        blocked = torch.finfo(self.dtype).min
        mask = torch.full((1, 1, size, -(-keys // 8) * 8), blocked, dtype=self.dtype, device=dev)[..., :keys]
        mask[..., :prefix] = 0
        visible = torch.from_numpy(tree.ancestor_mask()).to(dev)  # tree rows a node may see
        mask[0, 0, :n, prefix : prefix + n].masked_fill_(visible, 0.0)
        return mask

    def commit(self, state: TargetState, nodes: Sequence[int]) -> None:
        """Keep the KV rows of one root-to-node path of the last verified tree, contiguously after the prefix.

        ``nodes`` are tree node indices, root first, each the child of the previous one. The rows are copied in
        place inside every layer's keys/values, the rest of the tree rows are cropped, and ``length`` grows by
        ``len(nodes)``. The bonus token is not in the tree: feed it with the next verify (as root) or
        :meth:`forward_tokens`.
        """
        tree = state.tree
        if tree is None:
            raise ValueError("commit: no verified tree pending in this state; call verify first")
        path = [int(i) for i in nodes]
        if not path or path[0] != 0:
            raise ValueError(f"commit: the path must start at the root (node 0), got {path}")
        for a, b in itertools.pairwise(path):
            if not 0 <= b < tree.size or int(tree.parents[b]) != a:
                raise ValueError(f"commit: {path} is not a root-to-node path of the verified tree (at node {b})")
        prefix, n_tree, m = state.length, tree.size, len(path)
        self._require_compactable(state, "commit")
        static = isinstance(state.cache, StaticCache)
        if not static and state.cache.get_seq_length() != prefix + n_tree:
            raise RuntimeError(
                f"commit: cache holds {state.cache.get_seq_length()} rows, expected prefix {prefix} + tree {n_tree}"
            )
        if path != list(range(m)) and self._compactions is not None and state.slot is not None:
            # the graph path: one captured copy for every layer (per slot and path length), not 4 launches a layer
            rows = torch.tensor([[prefix + i for i in path], list(range(prefix, prefix + m))], device=self.device)
            self._compactions((state.slot, m), rows=rows)
        elif path != list(range(m)):  # rows 0..m-1 already in place need no copy
            src = torch.tensor(path, dtype=torch.long) + prefix
            for layer in state.cache.layers:
                if not layer.is_initialized:
                    continue
                idx = src.to(layer.keys.device)
                layer.keys[:, :, prefix : prefix + m] = layer.keys.index_select(2, idx)
                layer.values[:, :, prefix : prefix + m] = layer.values.index_select(2, idx)
        drop = n_tree - m
        if static:
            self._set_static_length(state, prefix + m)
        elif drop:
            state.cache.crop(-drop)
        state.length = prefix + m
        state.tree = None
