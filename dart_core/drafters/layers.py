"""The building blocks both published drafter layers are made of (Llama-style, no biases): RMSNorm, rotary
embeddings, one batched GQA attention (the same code trains and drafts) with a bool mask, a preallocated
per-generation KV cache, a SiLU-gated MLP.

Written against the checkpoint notes (``docs/formats.md``, ``docs/drafters.md``), not copied from any model
file: the drafter is one layer whose inputs (2·H wide) differ from a stock decoder layer's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from dart_core.drafters.config import DrafterConfig
from dart_core.engine.attention import sdpa_backends


def _at_least_fp32(dtype: torch.dtype) -> torch.dtype:
    return torch.promote_types(dtype, torch.float32)


class RMSNorm(nn.Module):
    """``w * (x * rsqrt(mean(x²) + eps))`` computed in float32 at least, returned in the input dtype."""

    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.to(_at_least_fp32(x.dtype))
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


class Rotary:
    """Rotate-half RoPE with base ``rope_theta`` and the optional linear / dynamic-NTK scaling of the configs."""

    def __init__(self, cfg: DrafterConfig) -> None:
        self.dim = cfg.head_dim
        self.base = cfg.rope_theta
        self.max_pos = cfg.max_position_embeddings
        scaling = cfg.rope_scaling or {}
        self.kind = scaling.get("rope_type", scaling.get("type")) if scaling else None
        self.factor = float(scaling.get("factor", 1.0)) if scaling else 1.0
        if self.kind not in (None, "default", "linear", "dynamic"):
            raise ValueError(f"unsupported rope_scaling type {self.kind!r} (supported: linear, dynamic)")

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        pos = positions.to(torch.float32)
        base = self.base
        if self.kind == "linear":
            pos = pos / self.factor
        elif self.kind == "dynamic":
            seq_len = int(positions.max().item()) + 1
            if seq_len > self.max_pos:
                growth = (self.factor * seq_len / self.max_pos) - (self.factor - 1)
                base = base * growth ** (self.dim / (self.dim - 2))
        inv = 1.0 / (base ** (torch.arange(0, self.dim, 2, device=positions.device, dtype=torch.float32) / self.dim))
        freqs = pos[:, None] * inv[None, :]
        emb = torch.cat([freqs, freqs], dim=-1)
        return emb.cos().to(dtype), emb.sin().to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [..., rows, head_dim]; cos/sin: [rows, head_dim]."""
    return x * cos + _rotate_half(x) * sin


def causal_mask(past: int, rows: int, device: torch.device | str) -> torch.Tensor:
    """Bool mask [rows, past + rows] (True = may attend): every past row, then causal over the new ones."""
    mask = torch.ones(rows, past + rows, dtype=torch.bool, device=device)
    mask[:, past:] = torch.tril(mask[:, past:])
    return mask


def within_window(mask: torch.Tensor, anchors: torch.Tensor, real_end: int, window: int | None) -> torch.Tensor:
    """``mask`` [rows, keys] with each row's context cut to the ``window`` real rows ending at its anchor: row i
    may attend to a real row (key index < ``real_end``; keys are cache rows, a real row's index its position) only
    from ``anchors[i] - window + 1`` on; scratch rows after ``real_end`` are left as they are. ``window`` None:
    ``mask`` unchanged. A drafter trained on windows of n tokens attends to at most n rows there; given hundreds
    at inference its predictions past the next token collapse (DART's held-out depth-2 top-1 0.38 → 0.19)."""
    if window is None:
        return mask
    cols = torch.arange(mask.shape[-1], device=mask.device)
    too_old = (cols[None] <= anchors.to(mask.device)[:, None] - window) & (cols[None] < real_end)
    return mask & ~too_old


class KVCache:
    """Keys (after RoPE) and values of a generation's rows in preallocated buffers [B, kv_heads, capacity,
    head_dim], grown in chunks so a step copies nothing but its new rows. Rows [0, length) are committed; a forward
    may write scratch rows after them (DART's mask rows, EAGLE-3's tree rows), attend to them, and not commit them."""

    GROW = 256  # capacity grows to a multiple of this, at least doubling

    def __init__(self) -> None:
        self.length = 0
        self._k: torch.Tensor | None = None
        self._v: torch.Tensor | None = None

    @property
    def capacity(self) -> int:
        return 0 if self._k is None else int(self._k.shape[2])

    @property
    def keys(self) -> torch.Tensor | None:
        """Committed keys [B, kv_heads, length, head_dim] (a view of the buffer); None before the first write."""
        return None if self._k is None else self._k[:, :, : self.length]

    @property
    def values(self) -> torch.Tensor | None:
        return None if self._v is None else self._v[:, :, : self.length]

    def at(self, row: int) -> CacheRows:
        """The ``past`` argument of ``Attention.forward`` that writes the new rows at ``row`` onwards."""
        return CacheRows(self, row)

    def write(self, k: torch.Tensor, v: torch.Tensor, row: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Write k/v [B, kv_heads, T, head_dim] in place at rows [row, row + T) (``length`` ≤ row: committed rows
        stay; rows between are this forward's earlier scratch) and return views of rows [0, row + T)."""
        if not self.length <= row <= self.capacity:
            raise ValueError(f"KVCache.write at row {row}: must lie in [{self.length}, {self.capacity}]")
        end = row + k.shape[2]
        if end > self.capacity:  # one copy per growth, of the rows before `row` only
            cap = max(2 * self.capacity, -(-end // self.GROW) * self.GROW)
            self._k, self._v = self._grown(self._k, k, cap, row), self._grown(self._v, v, cap, row)
        self._k[:, :, row:end] = k
        self._v[:, :, row:end] = v
        return self._k[:, :, :end], self._v[:, :, :end]

    def commit(self, rows: int) -> None:
        """Keep the ``rows`` written right after the committed ones; later scratch rows are dropped."""
        if self.length + rows > self.capacity:
            raise ValueError(f"KVCache.commit of {rows} rows after {self.length} exceeds capacity {self.capacity}")
        self.length += rows

    @staticmethod
    def _grown(old: torch.Tensor | None, new: torch.Tensor, cap: int, keep: int) -> torch.Tensor:
        buf = new.new_empty(new.shape[0], new.shape[1], cap, new.shape[3])
        if old is not None:
            buf[:, :, :keep] = old[:, :, :keep]
        return buf


@dataclass(frozen=True)
class CacheRows:
    """Where an inference forward's new K/V go: rows [row, row + T) of ``cache``, attended with rows before."""

    cache: KVCache
    row: int

    def write(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write the new K/V and return the keys and values to attend (rows [0, row + T))."""
        return self.cache.write(k, v, self.row)


class StaticKV(KVCache):
    """A :class:`KVCache` whose buffers are allocated once at ``capacity`` rows and never move, so a forward that
    writes it can be captured as a CUDA graph: the fast path's drafter cache. Its last ``scratch`` rows hold a
    step's scratch rows (DART's mask rows, EAGLE-3's tree levels, DFlash's block) at fixed places; committed rows
    grow from row 0 and must stay below them."""

    def __init__(self, capacity: int, scratch: int) -> None:
        super().__init__()
        if scratch < 0 or capacity <= scratch:
            raise ValueError(f"StaticKV: capacity {capacity} must exceed its {scratch} scratch rows")
        self.static_capacity, self.scratch = int(capacity), int(scratch)

    @property
    def scratch_start(self) -> int:
        """The first scratch row; committed rows end before it."""
        return self.static_capacity - self.scratch

    def allocate(self, like: torch.Tensor) -> None:
        """Allocate the buffers for K/V shaped like ``like`` [B, kv_heads, T, head_dim] (once)."""
        if self._k is None:
            shape = (like.shape[0], like.shape[1], self.static_capacity, like.shape[3])
            self._k, self._v = like.new_zeros(shape), like.new_zeros(shape)

    def write(self, k: torch.Tensor, v: torch.Tensor, row: int) -> tuple[torch.Tensor, torch.Tensor]:
        self.allocate(k)
        if row + k.shape[2] > self.scratch_start:
            raise ValueError(f"StaticKV: rows up to {row + k.shape[2]} do not fit before its scratch rows at "
                             f"{self.scratch_start} (capacity {self.static_capacity})")
        return super().write(k, v, row)

    def rows(self, index: torch.Tensor) -> StaticRows:
        """The ``past`` argument of a static forward that writes its rows at the cache rows ``index`` [T]."""
        return StaticRows(self, index)


@dataclass(frozen=True)
class StaticRows:
    """A static forward's new K/V go to the cache rows ``index`` (a device tensor: no host value in the graph);
    every row of the buffer is attended, under a mask as wide as the cache."""

    cache: StaticKV
    index: torch.Tensor

    def write(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.cache.allocate(k)
        keys, values = self.cache._k, self.cache._v
        keys.index_copy_(2, self.index, k)
        values.index_copy_(2, self.index, v)
        return keys, values


def context_visible(anchors: torch.Tensor, capacity: int, window: int | None) -> torch.Tensor:
    """Bool [rows, capacity]: the committed cache rows each row sees, those up to its ``anchors`` entry (a device
    tensor), and with a ``window`` only the last ``window`` of them: :func:`causal_mask` and :func:`within_window`
    for a static cache, without a host value."""
    cols = torch.arange(capacity, device=anchors.device)[None]
    visible = cols <= anchors[:, None]
    if window is not None:
        visible &= cols > anchors[:, None] - window
    return visible


class Attention(nn.Module):
    """GQA self-attention whose q/k/v read the drafter's 2·H-wide input; softmax in float32."""

    def __init__(self, cfg: DrafterConfig) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        if self.heads % self.kv_heads:
            raise ValueError(
                f"num_attention_heads {self.heads} is not a multiple of num_key_value_heads {self.kv_heads}"
            )
        self.q_proj = nn.Linear(2 * cfg.hidden_size, self.heads * self.hd, bias=False)
        self.k_proj = nn.Linear(2 * cfg.hidden_size, self.kv_heads * self.hd, bias=False)
        self.v_proj = nn.Linear(2 * cfg.hidden_size, self.kv_heads * self.hd, bias=False)
        self.o_proj = nn.Linear(self.heads * self.hd, cfg.hidden_size, bias=False)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        past: tuple[torch.Tensor, torch.Tensor] | CacheRows | StaticRows | None,
        mask: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The one implementation training (batched) and drafting (B = 1) share. x [B, T, 2H]; cos/sin [T, hd];
        ``past``: P earlier rows as K/V tensors [B, kv_heads, P, hd] (training), or ``cache.at(P)`` (drafting: the
        new K/V are written into the cache buffer at rows P… and attended from there, no concatenation), or a
        static cache's ``rows(index)`` (the fast path: mask [T, capacity]), or None; mask bool [T, P + T] (True =
        may attend). Returns (out [B, T, H], k, v [B, kv_heads, T, hd] after RoPE)."""
        b, t, _ = x.shape
        q = apply_rotary(self.q_proj(x).view(b, t, self.heads, self.hd).transpose(1, 2), cos, sin)
        k = apply_rotary(self.k_proj(x).view(b, t, self.kv_heads, self.hd).transpose(1, 2), cos, sin)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.hd).transpose(1, 2)
        if past is None:
            keys, values = k, v
        elif isinstance(past, (CacheRows, StaticRows)):
            keys, values = past.write(k, v)
        else:
            keys, values = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        # GQA without copying K/V per query head (that copy grows with the context, every step): the ``rep``
        # query heads of one K/V head become ``rep`` blocks of rows of one query, the mask repeated per block
        rep = self.heads // self.kv_heads
        grouped = q.reshape(b, self.kv_heads, rep * t, self.hd)
        wide = _at_least_fp32(x.dtype)  # softmax in float32 (float64 stays float64)
        with sdpa_backends(x.device):
            out = nn.functional.scaled_dot_product_attention(grouped.to(wide), keys.to(wide), values.to(wide),
                                                             attn_mask=mask.repeat(rep, 1)).to(x.dtype)
        # reshape, not view: a GPU's SDPA kernels may return their output in another memory layout
        out = out.reshape(b, self.heads, t, self.hd)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, self.heads * self.hd)), k, v


class MLP(nn.Module):
    def __init__(self, cfg: DrafterConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class MidLayer(nn.Module):
    """The drafter's one decoder layer; module names match the checkpoints' ``midlayer.*`` keys."""

    def __init__(self, cfg: DrafterConfig, *, with_mask_rep: bool) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.hidden_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        if with_mask_rep:
            self.mask_rep = nn.Parameter(torch.zeros(2 * cfg.hidden_size))
