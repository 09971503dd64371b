"""DFlash drafter (z-lab): a few non-causal layers that fill a whole block of masked positions in ONE forward,
conditioned on target hidden states (``docs/drafters.md``). Two racers read it: ``dflash``, the
upstream greedy chain (argmax per block row), and ``dflash-tree``, top-k per block row turned into a draft tree by
the same native N-gram-guided search as DART's.

Read from the published ``config.json`` + ``model.safetensors`` only (never the remote code); the embedding and
the lm_head are the target's, shared (same storage) and frozen.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from dart_core.drafters.checkpoint import (
    CheckpointFormat,
    check_state,
    resolve_embedding,
)
from dart_core.drafters.dflash_config import DFlashConfig, default_target_layer_ids, dflash_shapes
from dart_core.drafters.layers import (
    MLP,
    CacheRows,
    KVCache,
    RMSNorm,
    Rotary,
    StaticKV,
    StaticRows,
    apply_rotary,
    context_visible,
    within_window,
)
from dart_core.drafters.module import GRAPH_ROWS, DrafterModule
from dart_core.drafters.settings import check_settings, knob
from dart_core.engine.attention import sdpa_backends
from dart_core.engine.cpu import cpu_has_native_bf16
from dart_core.engine.drafter import DraftInput, Proposal
from dart_core.engine.hf_config import num_layers
from dart_core.engine.timing import Stopwatch
from dart_core.engine.tree import DraftTree
from dart_core.loading.errors import LoadError
from dart_core.loading.hub import HubFileError, load_tensor, resolve_file
from dart_core.loading.layouts import SAFE_SINGLE
from dart_core.ngram.memory import RemembersNgrams
from dart_core.ngram.search import searched_proposal

__all__ = ["CHECKPOINT", "DFlashConfig", "DFlashDrafter", "DFlashSettings", "DFlashTreeDrafter", "DFlashTreeSettings",
           "default_target_layer_ids", "dflash_shapes"]

log = logging.getLogger(__name__)

LM_HEAD_KEYS = ("lm_head.weight", "model.lm_head.weight", "language_model.lm_head.weight")


CHECKPOINT = CheckpointFormat(
    DFlashConfig, weights=(SAFE_SINGLE,), shapes=lambda cfg: (dflash_shapes(cfg), set()), strip="model.",
    published=lambda size: f"z-lab/Qwen3-{size}-DFlash-b16" if size in ("4B", "8B") else "")  # the published sizes


# ------------------------------------------------------------------------------------------------ settings
EXACT_HELP = ("score proposals with the target's own lm_head in its dtype, as upstream does (default off: a float32 "
              "head on a CPU with native bf16, AVX512-BF16 or AMX, scores them with a bf16 copy, several times faster "
              "there, which can flip a near-tie)")


@dataclass(frozen=True)
class DFlashSettings:
    """The upstream chain: how many of the block's B−1 argmax tokens to verify (capped at B−1; the drafter is
    always fed its full trained block)."""

    draft_tokens: int = knob(15, 1, 255, "chain tokens verified per step (capped at block size - 1)",
                             label="chain length", flag="tokens", size=True)
    exact_proposals: bool = knob(False, 0, 1, EXACT_HELP, label="exact proposals", flag="exact-proposals")


@dataclass(frozen=True)
class DFlashTreeSettings:
    """The tree over DFlash's block rows: DART's settings and defaults (the same native search consumes them)."""

    top_k: int = knob(25, 1, 1000, "candidates per block row", flag="top-k")
    beam_width: int = knob(20, 1, 1000, "beam width of the tree search", flag="beam")
    max_nodes: int = knob(60, 1, 512, "nodes below the root", label="tree size", flag="nodes", cpu=12, ui=True,
                          size=True)
    ngram_weight: float = knob(0.5, 0.0, 100.0, "weight of the N-gram term (0 = off)", flag="ngram-weight")
    exact_proposals: bool = knob(False, 0, 1, EXACT_HELP, label="exact proposals", flag="exact-proposals")


@dataclass
class DFlashState:
    """Per-generation state: per draft layer, K/V of the CONTEXT rows fed so far (block rows are never kept)."""

    caches: list[KVCache]
    settings: Any = None
    slot: int | None = None  # on the fast path: the pool's static caches it holds (``caches`` are those)

    @property
    def length(self) -> int:
        return self.caches[0].length if self.caches else 0


# ------------------------------------------------------------------------------------------------ module
class DFlashAttention(nn.Module):
    """Queries from the block rows only, keys/values from context + block; q_norm/k_norm before RoPE. The one
    implementation training (a batch of windows, many blocks each, a mask) and drafting (one block, a cache, no
    mask) share."""

    def __init__(self, cfg: DFlashConfig) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        H, bias = cfg.hidden_size, cfg.attention_bias
        self.q_proj = nn.Linear(H, self.heads * self.hd, bias=bias)
        self.k_proj = nn.Linear(H, self.kv_heads * self.hd, bias=bias)
        self.v_proj = nn.Linear(H, self.kv_heads * self.hd, bias=bias)
        self.o_proj = nn.Linear(self.heads * self.hd, H, bias=bias)
        self.q_norm = RMSNorm(self.hd, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(self.hd, cfg.rms_norm_eps)

    def forward(self, a: torch.Tensor, c: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                past: CacheRows | StaticRows | None = None, mask: torch.Tensor | None = None) -> torch.Tensor:
        """a [W, R, H] block rows (normed), c [W, n, H] context rows; cos/sin [n + R, hd] (or [W, 1, n + R, hd]:
        per-window positions) for the context rows, then the block rows. ``past``: drafting, the n + R new K/V are
        written into the cache at ``past.row`` and attended with the rows before (the caller commits the n context
        rows afterwards); ``mask`` bool [W, R, keys] (True = may attend; None = every key). Returns [W, R, H]."""
        w, r, n = a.shape[0], a.shape[1], c.shape[1]
        x = torch.cat([c, a], dim=1)
        q = self.q_norm(self.q_proj(a).view(w, r, self.heads, self.hd)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(w, n + r, self.kv_heads, self.hd)).transpose(1, 2)
        v = self.v_proj(x).view(w, n + r, self.kv_heads, self.hd).transpose(1, 2)
        q, k = apply_rotary(q, cos[..., n:, :], sin[..., n:, :]), apply_rotary(k, cos, sin)
        keys, values = (k, v) if past is None else past.write(k, v)
        rep = self.heads // self.kv_heads  # GQA: the rep query heads of one K/V head as rows of one query
        wide = torch.promote_types(a.dtype, torch.float32)
        grouped = q.reshape(w, self.kv_heads, rep * r, self.hd)
        attn_mask = None if mask is None else mask.repeat(1, rep, 1)[:, None]
        with sdpa_backends(a.device):
            out = nn.functional.scaled_dot_product_attention(grouped.to(wide), keys.to(wide), values.to(wide),
                                                             attn_mask=attn_mask)
        out = out.to(a.dtype).reshape(w, self.heads, r, self.hd).transpose(1, 2).reshape(w, r, self.heads * self.hd)
        return self.o_proj(out)


class DFlashLayer(nn.Module):
    def __init__(self, cfg: DFlashConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = DFlashAttention(cfg)
        self.mlp = MLP(cfg)  # type: ignore[arg-type]  # reads hidden_size / intermediate_size only

    def forward(self, h: torch.Tensor, c: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                past: CacheRows | StaticRows | None = None, mask: torch.Tensor | None = None) -> torch.Tensor:
        h = h + self.self_attn(self.input_layernorm(h), c, cos, sin, past, mask)
        return h + self.mlp(self.post_attention_layernorm(h))


class DFlashDrafter(DrafterModule):
    """The published DFlash drafter as the ``dflash`` racer (the upstream greedy chain). ``draft_logits`` is the
    spec's forward: cache-free without a state, cached with one."""

    key = "dflash"
    label = "DFlash"
    settings_type: type = DFlashSettings

    def __init__(self, cfg: DFlashConfig, embed_weight: torch.Tensor, lm_head_weight: torch.Tensor) -> None:
        super().__init__()
        self.config = cfg
        H = cfg.hidden_size
        self.fc = nn.Linear(len(cfg.target_layer_ids) * H, H, bias=False)
        self.hidden_norm = RMSNorm(H, cfg.rms_norm_eps)
        self.layers = nn.ModuleList(DFlashLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(H, cfg.rms_norm_eps)
        self.rotary = Rotary(cfg)  # type: ignore[arg-type]
        self.embed_weight = embed_weight.detach()  # the target's: not parameters of ours
        self.lm_head_weight = lm_head_weight.detach()
        self.target_layer_ids: tuple[int, ...] = cfg.target_layer_ids
        self.block_size: int = cfg.block_size
        self.mask_token_id: int = cfg.mask_token_id
        # hidden_states tuple indices: hs[0] is the embedding output, so decoder-layer output i is hs[i + 1]
        self.feature_layers: tuple[int, ...] | None = tuple(i + 1 for i in cfg.target_layer_ids)
        self.store: Any = None  # the N-gram store (``dflash-tree``), set by the arena loader
        self._proposal_head: torch.Tensor | None = None  # made from lm_head_weight on first use
        # the loaded target whose lm_head layer DFlash scores through (a plain attribute, not a submodule of ours),
        # asked for it at each call: so the target's CPU kernel choice, made before or after this drafter loads,
        # serves DFlash's rows too (dart_core.engine.cpu_linear)
        self._target_head: tuple[Any, ...] = ()  # in a tuple: nn.Module would register a bare module

    # ----------------------------------------------------------------- loading
    config_type = DFlashConfig

    @classmethod
    def _from_checkpoint(cls, cfg: DFlashConfig, state: dict[str, torch.Tensor], source: str, target: Any, *,
                         revision: str | None, device: torch.device | str | None,
                         dtype: torch.dtype | None) -> DFlashDrafter:
        """``config.json`` + ``model.safetensors``; ``target``: a loaded model (``TargetModel`` or HF) or a target
        checkpoint dir / Hub id, whose embedding and lm_head are shared. A checkpoint built for another target is
        refused with the mismatch named."""
        state = {k.removeprefix("model."): v for k, v in state.items()}
        check_state(state, dflash_shapes(cfg), source=source)
        embed, lm_head, target_layers = _target_parts(target, revision)
        _check_target(cfg, embed, lm_head, target_layers, source)
        device = torch.device(device) if device is not None else embed.device
        dtype = dtype or (embed.dtype if embed.is_floating_point() else torch.float32)
        model = cls(cfg, embed.to(device=device, dtype=dtype), lm_head.to(device=device, dtype=dtype))
        model.load_state_dict(state, strict=True)
        model = model.to(device=device, dtype=dtype).eval().requires_grad_(False)
        model._target_head = _head_module(target)
        return model

    def _apply(self, fn: Any, recurse: bool = True) -> DFlashDrafter:
        super()._apply(fn, recurse)
        self.embed_weight, self.lm_head_weight = fn(self.embed_weight), fn(self.lm_head_weight)
        self._proposal_head = None  # derived from lm_head_weight: made again when needed
        return self

    @property
    def proposal_head(self) -> torch.Tensor:
        """The lm_head the racers score their proposals with by default: the target's own, except a float32 head on
        a CPU with native bf16 matmuls (AVX512-BF16 / AMX, :func:`cpu_has_native_bf16`), where a bf16 copy is
        used. The head spans the target's full vocabulary, and a float32 matmul of a block's few rows over it runs
        far below the memory bandwidth there, the bf16 one several times faster
        (measured: docs/benchmarks.md#measurements-behind-design-choices); only the proposals use it, so the output
        stays the target's own (verification is unchanged), while :meth:`draft_logits` keeps the exact forward. The
        price: a near-tie in float32 can round to a tie or flip in bf16, so a proposal can differ from upstream's
        (``exact_proposals`` in the settings asks for the exact head, :meth:`scoring_head`)."""
        if self._proposal_head is None:
            w = self.lm_head_weight
            self._proposal_head = w.to(torch.bfloat16) if (w.device.type == "cpu" and w.dtype == torch.float32
                                                            and cpu_has_native_bf16()) else w
        return self._proposal_head

    def scoring_head(self, settings: Any) -> torch.Tensor:
        """The head a step's proposals are scored with: the target's own with ``exact_proposals`` (upstream's
        proposals, bit for bit), else :attr:`proposal_head`."""
        return self.lm_head_weight if settings.exact_proposals else self.proposal_head

    # ----------------------------------------------------------------- state
    def new_state(self, settings: Any = None) -> DFlashState:
        """A fresh per-generation state (empty context caches) with checked ``settings`` (default: defaults)."""
        settings = self.settings_type() if settings is None else settings
        if not isinstance(settings, self.settings_type):
            raise TypeError(f"{self.label} takes {self.settings_type.__name__}, got {type(settings).__name__}")
        state = DFlashState([KVCache() for _ in self.layers], check_settings(settings, self.label))
        if self._slots is not None:
            state.slot = self._slots.lend(state)
            state.caches = self._slots.slots[state.slot]
            for cache in state.caches:
                cache.length = 0
        return state

    # ---------------------------------------------------------------- fast path
    def _new_slot(self) -> list[StaticKV]:
        assert self.static_capacity is not None
        b = self.block_size  # the block's rows sit at the fixed scratch rows; the eager first step's after the rows
        return [StaticKV(self.static_capacity + GRAPH_ROWS + 2 * b, b) for _ in self.layers]

    def _block_outputs(self, state: DFlashState, step: DraftInput, settings: Any,
                       k: int | None) -> tuple[torch.Tensor, ...]:
        """One drafting step's per-row outputs from the block [root, mask x (B-1)]: the argmax ids of the
        ``draft_tokens`` first rows (``k`` None: the chain), or each row's top-``k`` ids and softmax (the tree). On
        the fast path after the first step, one static-shape call (a CUDA graph on a GPU)."""
        n = len(step.token_ids)
        rows = self._static_rows(n) if state.slot is not None and state.length else None
        head = self.scoring_head(settings)
        if rows is None:
            logits = self.draft_logits(step.features, self._block(int(step.token_ids[-1])), state, head=head)
            return _row_outputs(logits, settings, k, self.block_size)
        feats = self._features(step.features)
        if rows > n:
            feats = nn.functional.pad(feats, (0, 0, 0, rows - n))
        block = self._block_tensor(step.token_ids[-1:].to(self.device))
        counts = torch.tensor([state.length, n], device=self.device)
        exact = bool(settings.exact_proposals)
        out = self._graphs((state.slot, rows, k, exact, getattr(settings, "draft_tokens", 0)), feats=feats,
                           block=block, counts=counts)
        for cache in state.caches:
            cache.commit(n)
        return out

    def _static_step(self, key: tuple[Any, ...], feats: torch.Tensor, block: torch.Tensor,
                     counts: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The static form of :meth:`draft_logits` on slot ``key[0]``: ``rows`` context slots (``counts`` =
        [committed rows, real rows n]; slots past n are padding) written at the committed rows onwards, the block's
        rows at each cache's fixed scratch rows, the block seeing the real context (its window) and the whole
        block through a mask as wide as the cache; then the chain's or the tree's outputs."""
        slot, rows, k, exact, draft_tokens = key
        caches = self._slots.slots[slot]
        dev, b, window = self.device, self.block_size, self.config.context_window
        capacity, first = caches[0].static_capacity, caches[0].scratch_start
        past, n = counts[0], counts[1]
        t, j = torch.arange(rows, device=dev), torch.arange(b, device=dev)
        positions = torch.cat([past + t, past + n + j])
        cos, sin = self.rotary.cos_sin(positions, self.dtype)
        index = torch.cat([past + t, first + j])
        mask = context_visible((past + n - 1).expand(b), capacity, window)
        mask |= torch.arange(capacity, device=dev)[None] >= first
        c = self.hidden_norm(self.fc(feats[None]))
        h = self.embed_weight[block[None]]
        for i, layer in enumerate(self.layers):
            h = layer(h, c, cos, sin, caches[i].rows(index), mask[None])
        head = self.lm_head_weight if exact else self.proposal_head
        settings = DFlashSettings(draft_tokens=draft_tokens) if k is None else None
        return _row_outputs(self.logits(h[0, 1:], head).float(), settings, k, b)

    # ----------------------------------------------------------------- forward
    def _features(self, features: torch.Tensor | Sequence[torch.Tensor]) -> torch.Tensor:
        if not isinstance(features, torch.Tensor):
            features = torch.cat(list(features), dim=-1)  # per-layer tensors [n, H], in target_layer_ids order
        feats = features[0] if features.dim() == 3 and features.shape[0] == 1 else features
        width = len(self.target_layer_ids) * self.config.hidden_size
        if feats.dim() != 2 or feats.shape[1] != width:
            raise ValueError(f"{self.label} features must be [n, {width}] ({len(self.target_layer_ids)} target "
                             f"layers of {self.config.hidden_size}), got {tuple(features.shape)}")
        return feats.to(device=self.device, dtype=self.dtype)

    @torch.no_grad()
    def draft_logits(self, features: torch.Tensor | Sequence[torch.Tensor], block_ids: torch.Tensor | Sequence[int],
                     state: DFlashState | None = None, *, head: torch.Tensor | None = None) -> torch.Tensor:
        """One drafting call. Without ``state`` the cache-free form: ``features`` of EVERY committed position
        [n, n_ids·H] (or the per-layer tensors). With ``state``: only the context rows it has not seen; their K/V
        join its caches, the block's are dropped. ``block_ids`` [B']: the just-produced token, then mask ids.
        Returns float32 logits [B'−1, vocab]: row j−1 predicts the token j places after ``block_ids[0]``. ``head``:
        another copy of the lm_head to score with (:attr:`proposal_head`); default the target's own, exact."""
        state = self.new_state() if state is None else state
        feats = self._features(features)
        ids = torch.as_tensor(block_ids, dtype=torch.long, device=self.device).reshape(-1)
        if ids.shape[0] < 2:
            raise ValueError(f"block_ids must hold at least 2 ids, got {ids.shape[0]}")
        vocab = self.embed_weight.shape[0]
        if int(ids.min()) < 0 or int(ids.max()) >= vocab:
            raise ValueError(f"block_ids hold token ids outside [0, {vocab})")
        n, b, past = feats.shape[0], ids.shape[0], state.length
        positions = torch.arange(past, past + n + b, device=self.device)
        cos, sin = self.rotary.cos_sin(positions, self.dtype)
        mask = None
        if self.config.context_window is not None:  # the block sees the last context_window context rows
            every = torch.ones(b, past + n + b, dtype=torch.bool, device=self.device)
            mask = within_window(every, torch.full((b,), past + n - 1), past + n, self.config.context_window)[None]
        h = self.block_hidden(feats[None], ids[None], cos, sin, caches=state.caches, mask=mask)[0]
        for cache in state.caches:
            cache.commit(n)  # the context rows stay; the block rows after them are scratch
        return self.logits(h[1:], head).float()

    def block_hidden(self, features: torch.Tensor, block_ids: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                     *, caches: Sequence[KVCache] | None = None, mask: torch.Tensor | None = None) -> torch.Tensor:
        """The layers over a batch: features [W, n, n_ids·H] of the context rows, block_ids [W, R]; cos/sin for
        the n context rows then the R block rows; ``caches`` (drafting, W = 1: context K/V kept per layer) or
        ``mask`` [W, R, n + R] (training: many blocks per window, each seeing its own context). Returns the last
        hidden states of the block rows [W, R, H] (before the final norm)."""
        c = self.hidden_norm(self.fc(features))  # once per call: the same c feeds every layer
        h = self.embed_weight[block_ids]
        for i, layer in enumerate(self.layers):
            past = None if caches is None else caches[i].at(caches[i].length)
            h = layer(h, c, cos, sin, past, mask)
        return h

    def logits(self, hidden: torch.Tensor, head: torch.Tensor | None = None) -> torch.Tensor:
        """The target's lm_head (or ``head``, e.g. :attr:`proposal_head`) over the final norm: [..., H] →
        [..., vocab], in the head's dtype."""
        w = self.lm_head_weight if head is None else head
        x = self.norm(hidden).to(w.dtype)
        for owner in self._target_head:
            layer = owner.get_output_embeddings()
            if w is self.lm_head_weight and _same_tensor(layer.weight, w):
                return layer(x)
        return nn.functional.linear(x, w)

    def _block(self, root: int) -> torch.Tensor:
        block = torch.full((self.block_size,), self.mask_token_id, dtype=torch.long, device=self.device)
        block[0] = root
        return block

    def _block_tensor(self, root: torch.Tensor) -> torch.Tensor:
        """:meth:`_block` from a device tensor [1] holding the root (no host read)."""
        masks = torch.full((self.block_size - 1,), self.mask_token_id, dtype=torch.long, device=self.device)
        return torch.cat([root.long(), masks])

    # ---------------------------------------------------------------- proposal
    @torch.no_grad()
    def propose(self, state: DFlashState, step: DraftInput) -> Proposal:
        """The upstream step: block [root, mask×(B−1)], one forward, argmax per row → a chain (the engine's verify
        and acceptance: longest matching prefix + bonus; under sampling, the lossless rule with a one-hot draft)."""
        s: DFlashSettings = state.settings
        root = int(step.token_ids[-1])
        with Stopwatch(self.device) as draft:
            (chain_ids,) = self._block_outputs(state, step, s, None)
            chain = chain_ids.tolist()
        m = len(chain)
        tree = DraftTree(np.array([root, *chain]), np.arange(-1, m), np.zeros(m + 1, dtype=np.float32))
        return Proposal(tree=tree, draft_ms=draft.ms, search_ms=0.0)


class DFlashTreeDrafter(DFlashDrafter, RemembersNgrams):
    """The same drafter as the ``dflash-tree`` racer: top-k per block row, softmax over the k, DART's native
    N-gram-guided beam search (N-gram term off, with a one-time notice, without a store; with the session's N-gram
    memory when it is on, ``dart_core/ngram/memory.py``), tree verify."""

    key = "dflash-tree"
    label = "DFlash-tree"
    settings_type = DFlashTreeSettings

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._warned_no_store = False

    @torch.no_grad()
    def propose(self, state: DFlashState, step: DraftInput) -> Proposal:
        """Draft a tree rooted at the just-produced token from the block's B−1 rows of logits."""
        s: DFlashTreeSettings = state.settings
        with Stopwatch(self.device) as draft:
            ids, probs = self._block_outputs(state, step, s, min(s.top_k, self.lm_head_weight.shape[0]))
            tokens_np, probs_np = ids.cpu().numpy(), probs.cpu().numpy()
        store = self.store
        if store is None and not self._warned_no_store:
            log.warning("DFlash-tree is drafting without an N-gram store: the tree search runs with the N-gram "
                        "term off")
            self._warned_no_store = True
        return searched_proposal(tokens_np, probs_np, step, store, s, draft_ms=draft.ms, memory=self.active_memory())


def _row_outputs(logits: torch.Tensor, settings: Any, k: int | None, block_size: int) -> tuple[torch.Tensor, ...]:
    """The block rows' logits [B-1, vocab] turned into the chain (``k`` None: the argmax of the first
    ``draft_tokens`` rows) or the tree's inputs (each row's top-``k`` ids as int32 and their softmax)."""
    if k is None:
        return (logits[: min(settings.draft_tokens, block_size - 1)].argmax(dim=-1),)
    values, ids = torch.topk(logits, k, dim=-1)
    return ids.to(torch.int32), torch.softmax(values, dim=-1)


# ------------------------------------------------------------------------------------------------ target side
def _target_parts(target: Any, revision: str | None) -> tuple[torch.Tensor, torch.Tensor, int | None]:
    """(embedding [V, H], lm_head [V', H], decoder layers or None) of a loaded model (ours or HF) or a target
    checkpoint dir / Hub id (only those two tensors and the config are read)."""
    embed = resolve_embedding(target, revision=revision)
    for obj in (target, getattr(target, "model", None)):
        if obj is not None and hasattr(obj, "get_output_embeddings") and obj.get_output_embeddings() is not None:
            return embed, obj.get_output_embeddings().weight, num_layers(getattr(obj, "config", None))
    if isinstance(target, (str, os.PathLike)):
        layers = None
        cfg_path = resolve_file(target, "config.json", revision=revision, required=False)
        raw: dict[str, Any] = {}
        if cfg_path is not None:
            try:
                raw = json.loads(cfg_path.read_text())
            except ValueError:
                raw = {}
            layers = num_layers(raw)
        try:
            lm_head = load_tensor(target, LM_HEAD_KEYS, revision=revision)
        except HubFileError:
            if not raw.get("tie_word_embeddings", False):
                raise HubFileError(f"cannot read the target's lm_head from {os.fspath(target)}") from None
            lm_head = embed  # tied
        return embed, lm_head, layers
    raise TypeError(f"DFlash needs the target model or its checkpoint path/id (embedding and lm_head), "
                    f"got {type(target)}")


def _head_module(target: Any) -> tuple[Any, ...]:
    """The loaded model that holds the target's lm_head layer (its ``get_output_embeddings``), in a tuple;
    empty for a checkpoint path."""
    for obj in (target, getattr(target, "model", None)):
        if obj is not None and hasattr(obj, "get_output_embeddings"):
            head = obj.get_output_embeddings()
            if isinstance(head, nn.Module) and isinstance(getattr(head, "weight", None), torch.Tensor):
                return (obj,)
    return ()


def _same_tensor(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.data_ptr() == b.data_ptr() and a.dtype == b.dtype and a.shape == b.shape and a.device == b.device


def _check_target(cfg: DFlashConfig, embed: torch.Tensor, lm_head: torch.Tensor, target_layers: int | None,
                  source: str) -> None:
    """Refuse a drafter built for another target, naming the mismatch."""
    H = cfg.hidden_size
    if embed.dim() != 2 or embed.shape[1] != H:
        raise LoadError(source, f"the target's hidden size is {embed.shape[-1]}, the DFlash drafter's "
                                f"{H}: built for another target?")
    if lm_head.dim() != 2 or lm_head.shape[1] != H:
        raise LoadError(source, f"the target's lm_head has shape {tuple(lm_head.shape)}, the DFlash drafter "
                                f"needs [vocab, {H}]: built for another target?")
    if not 0 <= cfg.mask_token_id < embed.shape[0]:
        raise LoadError(source, f"mask_token_id {cfg.mask_token_id} is outside the target's embedding "
                                f"(vocab {embed.shape[0]}): built for another target?")
    if target_layers is not None:
        bad = [i for i in cfg.target_layer_ids if i >= target_layers]
        if bad:
            raise LoadError(source, f"target_layer_ids {list(cfg.target_layer_ids)}: {bad} past the target's "
                                    f"{target_layers} decoder layers: built for another target?")
        if target_layers != cfg.num_target_layers:
            log.warning("%s: DFlash drafter was trained on a %d-layer target, this one has %d", source,
                        cfg.num_target_layers, target_layers)


__all__ = ["DFlashConfig", "DFlashDrafter", "DFlashSettings", "DFlashState", "DFlashTreeDrafter",
           "DFlashTreeSettings", "default_target_layer_ids", "dflash_shapes"]
