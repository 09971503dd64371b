"""The building blocks both published drafter layers are made of (Llama-style, no biases): RMSNorm, rotary
embeddings, a GQA attention over a small per-generation KV cache with an explicit additive mask, a SiLU-gated MLP.

Written against the checkpoint specs (``specs/dart-drafter.md``, ``specs/eagle3.md``), not copied from any model
file: the drafter is one layer whose inputs (2·H wide) differ from a stock decoder layer's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import nn

from dart_core.drafters.config import DrafterConfig


class RMSNorm(nn.Module):
    """``w * (x * rsqrt(mean(x²) + eps))`` computed in float32, returned in the input dtype."""

    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
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
    """x: [heads, rows, head_dim]; cos/sin: [rows, head_dim]."""
    return x * cos[None] + _rotate_half(x) * sin[None]


@dataclass
class KVCache:
    """Keys (after RoPE) and values of the rows a drafter keeps, [kv_heads, rows, head_dim] each."""

    keys: torch.Tensor | None = None
    values: torch.Tensor | None = None
    extra: dict = field(default_factory=dict)

    @property
    def length(self) -> int:
        return 0 if self.keys is None else int(self.keys.shape[1])

    def append(self, k: torch.Tensor, v: torch.Tensor) -> None:
        self.keys = k if self.keys is None else torch.cat([self.keys, k], dim=1)
        self.values = v if self.values is None else torch.cat([self.values, v], dim=1)


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

    def project_kv(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n = x.shape[0]
        k = self.k_proj(x).view(n, self.kv_heads, self.hd).transpose(0, 1)
        v = self.v_proj(x).view(n, self.kv_heads, self.hd).transpose(0, 1)
        return apply_rotary(k, cos, sin), v

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        past_k: torch.Tensor | None,
        past_v: torch.Tensor | None,
        mask: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x: [n, 2H]; mask: bool [n, past + n] (True = may attend). Returns (out [n, H], k, v of the new rows)."""
        n = x.shape[0]
        q = apply_rotary(self.q_proj(x).view(n, self.heads, self.hd).transpose(0, 1), cos, sin)
        k, v = self.project_kv(x, cos, sin)
        keys = k if past_k is None else torch.cat([past_k, k], dim=1)
        values = v if past_v is None else torch.cat([past_v, v], dim=1)
        rep = self.heads // self.kv_heads
        keys_r = keys.repeat_interleave(rep, dim=0)
        values_r = values.repeat_interleave(rep, dim=0)
        scores = torch.matmul(q.float(), keys_r.float().transpose(1, 2)) / math.sqrt(self.hd)
        scores = scores.masked_fill(~mask[None], float("-inf"))
        probs = torch.softmax(scores, dim=-1).to(values_r.dtype)
        out = torch.matmul(probs, values_r).transpose(0, 1).reshape(n, self.heads * self.hd)
        return self.o_proj(out), k, v


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
