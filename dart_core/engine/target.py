"""The target model: a stock Hugging Face decoder-only LM driven for speculative decoding.

No modeling code is copied or forked: tree attention is expressed purely through the public forward arguments
(a 4-D additive float mask plus ``position_ids`` = prefix length + depth), the KV cache is a stock
``DynamicCache`` whose layers write in place (``kv_cache.PreallocatedLayer``: no copy of the history per step) and
the drafter features come from ``output_hidden_states=True``.

Per-generation state (the KV cache of one stream or several, each row's committed length) lives in a
:class:`~dart_core.engine.state.TargetState`, never on the model, so one :class:`TargetModel` can serve several
generations that alternate step by step (the app's race). Every forward takes one stream's form or several's
(``prefill`` / ``prefill_rows``, ``verify`` / ``verify_rows``, ``commit`` / ``commit_rows``): one code path, in
which a single stream's chain still runs without a mask.

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
import math
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from transformers import StaticCache
from transformers.cache_utils import DynamicLayer, StaticLayer

from dart_core.engine.attention import sdpa_backends
from dart_core.engine.cpu_linear import CpuLinearPlan
from dart_core.engine.graphs import GraphedCall
from dart_core.engine.hf_config import feature_layer_ids, text_config
from dart_core.engine.kv_cache import PreallocatedLayer, growing_cache
from dart_core.engine.state import TargetState, prompt_blocks, rows_mask, tree_blocks
from dart_core.engine.stream_slots import StreamSlots
from dart_core.engine.tree import DraftTree
from dart_core.loading.hub import cache_root

__all__ = ["FAST_PATH_MODES", "FAST_PATH_ROWS", "Interrupted", "TargetModel", "TargetState", "prefill_chunks"]

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


# An interruptible prefill (``prefill(interrupt=...)``) runs a long prompt in chunks and asks between two whether to
# go on: in one forward, a time limit or a Stop could only wait out a long prompt. A chunk holds at most
# PREFILL_CHUNK rows, and fewer as the prefix grows, so that rows x attended positions stays within PREFILL_WORK (the
# second full chunk's): a chunk's attention cost, which grows with the prefix, stays about constant instead of
# growing with every chunk (docs/benchmarks.md#measurements-behind-design-choices). The schedule depends on the
# prompt's length only, so every racer's prefill computes the same numbers.
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
        self._slots: StreamSlots | None = None  # the graph path's static caches, lent to states by streams bucket
        self.cpu_linears: CpuLinearPlan | None = None  # on a CPU: the linear layers' kernel by rows (load_target)

    # ------------------------------------------------------------- fast path
    def use_static_cache(self, capacity: int, *, compile: bool = False, graphs: bool = False) -> None:
        """The fast path for GPUs: every new state holds a preallocated ``StaticCache`` of ``capacity`` rows
        (prompt + output + one draft tree; the context limit becomes ``capacity``) that decode and verify write in
        place. Trees are padded to a power-of-two node count (padding rows see the prefix only and no real row sees
        them), so a few fixed shapes cover every step, and each such forward then runs as

        * ``graphs``: a CUDA graph per streams bucket and tree bucket, recorded on first use (:class:`GraphedCall`,
          well under a second each) over a static cache the state borrows from a pool (a graph is bound to its
          cache's memory): B streams run on a cache of the next power of two rows, idle rows padded (streams that
          end leave their rows idle until the rest fit a smaller bucket's cache); off CUDA the same static-shape
          forward runs uncaptured;
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
        self._slots = StreamSlots(lambda: StaticCache(config=self.config, max_cache_len=self.static_capacity))
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

    def _static_compact(self, key: tuple[tuple[int, int], int], rows: torch.Tensor) -> None:
        """The graph path's commit on one stream's slot ``key[0]``: every layer's K/V rows ``rows[0]`` copied to
        ``rows[1]``."""
        for layer in self._slots.cache(key[0]).layers:
            if layer.is_initialized:
                layer.keys.index_copy_(2, rows[1], layer.keys.index_select(2, rows[0]))
                layer.values.index_copy_(2, rows[1], layer.values.index_select(2, rows[0]))

    def _static_forward(self, key: tuple[Any, ...], ids: torch.Tensor, positions: torch.Tensor,
                        mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The graph path's forward: ``key`` = (slot, layers, columns); every column's logits ``[1, T, V]`` in float32
        and the layers' features, each on the model's device (copied out after the replay)."""
        slot, layers, _ = key
        out = self.model(input_ids=ids, position_ids=positions, attention_mask=mask,
                         **{self._cache_arg: self._slots.cache(slot)}, use_cache=True,
                         output_hidden_states=bool(layers), return_dict=True)
        feats = torch.cat([out.hidden_states[i] for i in layers], dim=-1) if layers else None
        return out.logits.float(), feats

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
    def new_state(self, rows: int = 1) -> TargetState:
        """A fresh, empty per-generation state of ``rows`` streams (their prompts go in with :meth:`prefill_rows`)."""
        if rows < 1:
            raise ValueError(f"new_state: a state needs at least one stream, got rows={rows}")
        lengths = [0] * rows
        if self._graphs is not None:
            state = TargetState(cache=None, lengths=lengths)  # a slot's cache, lent just below
            if self._slots.lend(state, rows):
                self._set_static_length(state, 0)
                return state
        if self.static_capacity is not None:
            return TargetState(StaticCache(config=self.config, max_cache_len=self.static_capacity), lengths)
        return TargetState(growing_cache(self.config), lengths)

    @staticmethod
    def _set_static_length(state: TargetState, rows: int) -> None:
        """Where a static cache's next forward writes (and what its causal mask counts as the past): every layer's
        length at once (two multi-tensor kernels on a GPU, not one launch a layer)."""
        lengths = [layer.cumulative_length for layer in state.cache.layers]
        torch._foreach_zero_(lengths)
        if rows:
            torch._foreach_add_(lengths, rows)

    def _cut_cache(self, state: TargetState, width: int) -> None:
        """The cache keeps its first ``width`` columns: the next forward writes at ``width``."""
        if isinstance(state.cache, StaticCache):
            self._set_static_length(state, width)
            return
        extra = state.cache.get_seq_length() - width
        if extra < 0:
            raise RuntimeError(f"TargetState is inconsistent: the cache holds {width + extra} columns but the state "
                               f"counts {width}")
        if extra:
            state.cache.crop(-extra)

    def _drop_uncommitted(self, state: TargetState) -> None:
        """Discard the columns of trees verified but never committed (the state's lengths are authoritative)."""
        if state.trees is not None or not isinstance(state.cache, StaticCache):
            self._cut_cache(state, state.width)
        state.trees, state.pending = None, 0

    # ------------------------------------------------------------- forward
    def _run(
        self,
        state: TargetState,
        ids: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor | None,
        keep: list[int] | None,
        layers: Sequence[int] | None = None,
        eager: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One forward of ``ids`` ``[rows, T]``: float32 logits ``[rows, T', V]`` of the ``keep`` columns (None:
        all ``T``) and the ``layers`` of ``hidden_states`` (default ``feature_layers``; none: no hidden states are
        asked for) concatenated per column, ``[rows, T, F]``. The fast path's compiled or captured forward runs it
        unless ``eager`` (a prefill, whose length varies)."""
        layers = self.feature_layers if layers is None else tuple(layers)
        width = ids.shape[-1]
        dev = self.feature_device
        if not eager and self._graphs is not None and state.slot is not None and width <= GRAPH_ROWS:
            if mask is None:
                mask = rows_mask(state.cache_lengths, state.width, width, self.static_capacity, self.dtype,
                                 self.device)
            with torch.no_grad(), sdpa_backends(ids.device):
                logits, feats = self._graphs((state.slot, layers, width), ids=ids, positions=positions, mask=mask)
            logits = logits[:, keep] if keep is not None else logits  # an index: a copy already
            logits = logits.to(device=dev, dtype=torch.float32, copy=keep is None)
            return logits, feats.to(device=dev, copy=True) if feats is not None else None
        kwargs: dict[str, Any] = {
            "input_ids": ids,
            "position_ids": positions,
            self._cache_arg: state.cache,
            "use_cache": True,
            "output_hidden_states": bool(layers),
            "return_dict": True,
        }
        if mask is not None:
            kwargs["attention_mask"] = mask
        if keep is not None and self._has_logits_to_keep:
            # by index, not a count: a strided view of the last positions makes torch's CPU linear copy the head
            # (docs/benchmarks.md#measurements-behind-design-choices)
            kwargs["logits_to_keep"] = torch.tensor(keep, device=ids.device)
        forward = self.model if eager or self._compiled is None else self._compiled
        with torch.no_grad(), sdpa_backends(ids.device):
            out = forward(**kwargs)
        feats = torch.cat([out.hidden_states[i].to(dev) for i in layers], dim=-1) if layers else None
        logits = out.logits.to(device=dev, dtype=torch.float32)
        if keep is not None and not self._has_logits_to_keep:
            logits = logits[:, keep]
        return logits, feats

    def _require_compactable(self, state: TargetState, what: str) -> None:
        for i, layer in enumerate(state.cache.layers):
            if type(layer) not in (PreallocatedLayer, DynamicLayer, StaticLayer):
                raise NotImplementedError(
                    f"{what}: cache layer {i} is a {type(layer).__name__}; tree verification and KV compaction "
                    "support only full-attention caches (PreallocatedLayer, DynamicLayer, StaticLayer)"
                )

    # ------------------------------------------------------------- prefill
    def prefill(self, state: TargetState, input_ids: torch.Tensor | Sequence[int], layers: Sequence[int] | None = None,
                interrupt: Callable[[], bool] | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """:meth:`prefill_rows` of one stream: the float32 logits after its last token ``[V]`` and the features of
        every prompt token ``[n, F]``."""
        logits, feats = self.prefill_rows(state, [_one_prompt(input_ids, "prefill")], layers, interrupt)
        return logits[0], feats[0]

    def prefill_rows(self, state: TargetState, prompts: Sequence[Sequence[int]], layers: Sequence[int] | None = None,
                     interrupt: Callable[[], bool] | None = None) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
        """Run one prompt per row (right-padded to the longest) into an empty state and commit each row's own
        tokens.

        Returns the float32 logits after each prompt's last token ``[rows, V]`` and each prompt's features
        ``[n_b, F]`` (the drafter needs the whole prompt's features to start; ``layers``: which hidden states,
        default ``feature_layers``, ``()`` for none). With ``interrupt``, prompts longer than :data:`PREFILL_CHUNK`
        run in chunks (:func:`prefill_chunks`) and :class:`Interrupted` is raised when ``interrupt()`` is true
        between two of them (a time limit, a Stop); the fast path's static cache always prefills in one forward.
        """
        prompts = [[int(t) for t in p] for p in prompts]
        if len(prompts) != state.rows:
            raise ValueError(f"prefill: {len(prompts)} prompts for a state of {state.rows} streams")
        if state.width or (not isinstance(state.cache, StaticCache) and state.cache.get_seq_length()):
            raise ValueError("prefill: the state already holds tokens; use a fresh target.new_state()")
        ends = [len(p) for p in prompts]
        if min(ends) == 0:
            raise ValueError("prefill: the prompt is empty (0 tokens); every stream needs at least one token")
        width = max(ends)
        if width > self.max_context:
            raise ValueError(f"prefill: prompt of {width} tokens exceeds the target's context of {self.max_context}")
        ids = torch.zeros((state.cache_rows, width), dtype=torch.long)  # idle rows: one padding token each
        for b, p in enumerate(prompts):
            ids[b, : len(p)] = torch.tensor(p, dtype=torch.long)
        ids = ids.to(self.device)
        cache_ends = ends + [1] * state.idle
        chunks = [(0, width)]
        if interrupt is not None and width > PREFILL_CHUNK and not isinstance(state.cache, StaticCache):
            chunks = prefill_chunks(width)
        last: list[torch.Tensor | None] = [None] * state.rows
        parts: list[torch.Tensor] = []
        for start, end in chunks:
            if start and interrupt():
                raise Interrupted(f"prefill interrupted after {start:,} of {width:,} prompt tokens")
            size = end - start
            state.lengths = [min(n, start) for n in ends]
            mask = None if state.cache_rows == 1 else rows_mask(
                [min(n, start) for n in cache_ends], start, size, self._keys(start + size), self.dtype, self.device,
                prompt_blocks(cache_ends, start, size))
            keep = sorted({size - 1} | {n - 1 - start for n in ends if start < n <= end})
            positions = torch.arange(start, end, device=self.device)[None].expand(state.cache_rows, size)
            logits, feats = self._run(state, ids[:, start:end], positions, mask, keep, layers, eager=True)
            for b, n in enumerate(ends):
                if start < n <= end:
                    last[b] = logits[b, keep.index(n - 1 - start)]
            if feats is not None:
                parts.append(feats)
            state.lengths, state.width = [min(n, end) for n in ends], end
        feats = torch.cat(parts, dim=1) if parts else None
        return torch.stack(last), [None if feats is None else feats[b, :n] for b, n in enumerate(ends)]

    def _keys(self, columns: int) -> int:
        """The key length a forward's mask spans: the columns written so far, or the static cache's capacity."""
        return self.static_capacity if self.static_capacity is not None else columns

    def forward_tokens(
        self, state: TargetState, input_ids: torch.Tensor | Sequence[int], *, features: bool = True,
        layers: Sequence[int] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Append tokens to a one-stream state and commit them (a chain verified and kept whole; the state may be
        empty). Any uncommitted tree rows are discarded first. Returns the last position's float32 logits ``[V]``
        and the features of the new tokens ``[n, F]`` (None with ``features=False``; ``layers`` as in
        :meth:`prefill`)."""
        tokens = _one_prompt(input_ids, "forward_tokens")
        if not tokens:
            raise ValueError("forward_tokens: no tokens given")
        self._drop_uncommitted(state)
        if state.width + len(tokens) > self.max_context:
            raise ValueError(f"forward_tokens: {state.width} committed + {len(tokens)} new tokens exceed the "
                             f"target's context of {self.max_context}")
        chain = DraftTree(tokens, list(range(-1, len(tokens) - 1)))
        logits, feats = self._verify(state, [chain], layers if features else (), keep_last=True)
        self.commit_rows(state, [list(range(len(tokens)))])
        return logits[0, -1], feats[0] if feats is not None else None

    # ------------------------------------------------------------- verify and commit
    def verify(self, state: TargetState, tree: DraftTree,
               layers: Sequence[int] | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """:meth:`verify_rows` of one stream: float32 logits ``[n_tree, V]`` and features ``[n_tree, F]``."""
        logits, feats = self.verify_rows(state, [tree], layers)
        return logits[0], feats[0]

    def verify_rows(self, state: TargetState, trees: Sequence[DraftTree], layers: Sequence[int] | None = None,
                    ) -> tuple[list[torch.Tensor], list[torch.Tensor | None]]:
        """Every row's tree in one forward after that row's committed tokens, with tree attention.

        Node i of row b sits at position ``lengths[b] + depth(i)`` and sees row b's committed columns and its own
        ancestors (:func:`~dart_core.engine.state.rows_mask`; one stream's chain gets no mask: the kernel's own
        causal path). Returns each row's float32 logits ``[n_b, V]`` and features ``[n_b, F]`` (``layers`` as in
        :meth:`prefill_rows`); the cache holds the (uncommitted) trees until :meth:`commit_rows`."""
        if len(trees) != state.rows:
            raise ValueError(f"verify: {len(trees)} trees for a batch of {state.rows} streams")
        if state.width == 0:
            raise ValueError("verify: the state is empty; call prefill first")
        self._drop_uncommitted(state)
        logits, feats = self._verify(state, trees, layers, keep_last=False)
        return ([logits[b, : t.size] for b, t in enumerate(trees)],
                [None if feats is None else feats[b, : t.size] for b, t in enumerate(trees)])

    def _verify(self, state: TargetState, trees: Sequence[DraftTree], layers: Sequence[int] | None,
                keep_last: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The forward of :meth:`verify_rows` on a state without pending trees: logits ``[rows, size or 1, V]``
        (``keep_last``: the last column only) and features ``[rows, size, F]``."""
        self._require_compactable(state, "verify")
        for b, tree in enumerate(trees):
            end = state.lengths[b] + int(tree.depths.max())
            if end >= self.max_context:
                whose = "the tree" if state.rows == 1 else f"stream {b}'s tree"
                raise ValueError(f"verify: {whose} reaches position {end}, past the target's context of "
                                 f"{self.max_context} ({state.lengths[b]} committed tokens, depth "
                                 f"{int(tree.depths.max())})")
        n = max(tree.size for tree in trees)
        size = self._padded_size(n, state.width)  # n, or the compiled path's bucket: columns n.. are padding
        lengths = state.cache_lengths
        ids = np.zeros((len(lengths), size), dtype=np.int64)  # idle rows: padding that sees their first column
        pos = np.asarray(lengths, dtype=np.int64)[:, None].repeat(size, axis=1)
        for b, (tree, length) in enumerate(zip(trees, state.lengths, strict=True)):
            ids[b, : tree.size] = tree.tokens
            pos[b, : tree.size] = tree.position_ids(length)
        mask: torch.Tensor | None = None  # one stream's chain: the model's own causal attention suffices
        if len(lengths) > 1 or size > trees[0].size or not trees[0].is_chain:
            mask = rows_mask(lengths, state.width, size, self._keys(state.width + size), self.dtype, self.device,
                             tree_blocks(trees, size, len(lengths)))
        dev = self.device
        logits, feats = self._run(state, torch.from_numpy(ids).to(dev), torch.from_numpy(pos).to(dev), mask,
                                  [trees[0].size - 1] if keep_last else None, layers)
        state.trees, state.pending = list(trees), size
        return logits, feats

    def commit(self, state: TargetState, nodes: Sequence[int]) -> None:
        """:meth:`commit_rows` of one stream: keep one root-to-node path of the verified tree."""
        self.commit_rows(state, [nodes])

    def commit_rows(self, state: TargetState, paths: Sequence[Sequence[int]]) -> None:
        """Keep each row's accepted root-to-node path of its verified tree, right after its committed columns.

        ``paths[b]`` are tree node indices, root first, each the child of the previous one; all are checked before
        any row changes. The rows are copied in place inside every layer's keys/values (one gather and one scatter
        per layer for the whole batch), the rest of the tree columns are dropped, and ``lengths[b]`` grows by
        ``len(paths[b])``. The bonus token is not in the tree: it goes in as the root of the next verify.
        """
        trees = state.trees
        if trees is None:
            raise ValueError("commit: no verified tree pending in this state; call verify first")
        if len(paths) != state.rows:
            raise ValueError(f"commit: {len(paths)} paths for a batch of {state.rows} streams")
        paths = [[int(i) for i in path] for path in paths]
        for b, (tree, path) in enumerate(zip(trees, paths, strict=True)):
            tree.check_path(path, "commit", "the verified tree" if state.rows == 1 else f"stream {b}'s tree")
        if not isinstance(state.cache, StaticCache) and state.cache.get_seq_length() != state.width + state.pending:
            raise RuntimeError(f"commit: the cache holds {state.cache.get_seq_length()} columns, expected "
                               f"{state.width} committed + {state.pending} verified")
        rows, src, dst = [], [], []
        for b, path in enumerate(paths):
            for j, node in enumerate(path):
                if state.width + node != state.lengths[b] + j:  # a column already in place needs no copy
                    rows.append(b)
                    src.append(state.width + node)
                    dst.append(state.lengths[b] + j)
        if rows and self._compactions is not None and state.slot is not None and state.cache_rows == 1:
            # the graph path: one captured copy for every layer (per slot and path length), not 4 launches a layer
            m = len(paths[0])
            moves = torch.tensor([[state.width + i for i in paths[0]], [state.width + j for j in range(m)]],
                                 device=self.device)
            self._compactions((state.slot, m), rows=moves)
        elif rows and state.cache_rows == 1:  # one stream: its path gathered into one slice per layer
            start, m = state.lengths[0], len(paths[0])
            idx = torch.tensor([state.width + i for i in paths[0]], device=self.device)
            for layer in state.cache.layers:
                if layer.is_initialized:
                    layer.keys[:, :, start : start + m] = layer.keys.index_select(2, idx)
                    layer.values[:, :, start : start + m] = layer.values.index_select(2, idx)
        elif rows:
            bi, si, di = (torch.tensor(v, device=self.device) for v in (rows, src, dst))
            for layer in state.cache.layers:
                if layer.is_initialized:
                    layer.keys[bi, :, di] = layer.keys[bi, :, si]
                    layer.values[bi, :, di] = layer.values[bi, :, si]
        state.lengths = [n + len(path) for n, path in zip(state.lengths, paths, strict=True)]
        state.width, state.trees, state.pending = max(state.lengths), None, 0
        self._cut_cache(state, state.width)

    def keep_rows(self, state: TargetState, rows: Sequence[int]) -> None:
        """Only ``rows`` (indices, in order) stay in the state: the streams that have not ended."""
        if state.trees is not None:
            raise RuntimeError("keep: commit the verified trees first")
        rows = [int(b) for b in rows]
        if not rows or any(not 0 <= b < state.rows for b in rows):
            raise ValueError(f"keep: rows {rows} are not a non-empty selection of the state's {state.rows} streams")
        if rows == list(range(state.rows)):
            return
        idx = torch.tensor(rows, dtype=torch.long, device=self.device)
        if state.slot is not None:
            self._slots.keep(state, idx)
        else:
            for layer in state.cache.layers:
                if isinstance(layer, PreallocatedLayer):
                    layer.batch_select_indices(idx)  # moved up in place
                elif layer.is_initialized:
                    layer.keys = layer.keys.index_select(0, idx)
                    layer.values = layer.values.index_select(0, idx)
                    if isinstance(layer, StaticLayer):
                        layer.batch_size = len(rows)
        state.lengths = [state.lengths[b] for b in rows]
        state.width = max(state.lengths)
        self._cut_cache(state, state.width)

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes one token's keys and values take in the cache, over every layer."""
        cfg = self.text_config
        heads = int(getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads)
        head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)
        return 2 * int(cfg.num_hidden_layers) * heads * head_dim * self.dtype.itemsize


def _one_prompt(input_ids: torch.Tensor | Sequence[int], what: str) -> list[int]:
    """Token ids of one stream as a list: ``[n]`` or ``[1, n]``."""
    ids = torch.as_tensor(input_ids, dtype=torch.long)
    if ids.dim() == 1:
        ids = ids[None]
    if ids.dim() != 2 or ids.shape[0] != 1:
        raise ValueError(f"{what}: expected token ids of shape [1, n] (batch 1), got {tuple(ids.shape)}")
    return ids[0].tolist()
