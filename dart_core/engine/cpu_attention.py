"""The distillation's decode steps on a CPU attend with our native kernel, through transformers' own extension point.

In a batched greedy step every row attends with one new token over its whole cache. torch's CPU SDPA does that
as two tiny matrix products per (row, key/value head), and call overhead makes it read the cache at about a
quarter of the speed the cores can: at batch 256 it was over half of a step's time (docs/training.md).
``dart_core._native.decode_attention`` reads each row's keys and values once, the grouped query heads together.
It is registered with ``AttentionInterface`` (the masks stay SDPA's), used only for one-token queries on a CPU
in float32 or bfloat16 without gradients; everything else (the prefill, other devices, dtypes or attention
variants) goes to transformers' SDPA function unchanged. The model's code is stock."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from dart_core import _native
from dart_core.engine.cpu_linear import numpy_bits

ATTN_IMPLEMENTATION = "dart_cpu_decode"
# keyword arguments that change what attention computes: the kernel knows none of them
_UNSUPPORTED_KWARGS = ("softcap", "s_aux", "sinks", "position_bias", "output_attentions")


def _keep_rows(mask: torch.Tensor | None, batch: int, length: int) -> torch.Tensor | bool | None:
    """The [batch, length] positions a one-token query may attend to, from SDPA's [b, 1, 1, length] boolean
    mask; None if there is no mask, False if the mask is not of that kind."""
    if mask is None:
        return None
    if mask.dtype != torch.bool or mask.dim() != 4 or mask.shape[1:3] != (1, 1) or mask.shape[-1] != length:
        return False
    if mask.shape[0] not in (1, batch):
        return False
    keep = mask[:, 0, 0, :].expand(batch, length)
    return keep if keep.stride(-1) == 1 else keep.contiguous()


def native_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                     is_causal: bool | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: [b, heads, q, d] query, [b, kv_heads, length, d] keys and
    values in, [b, q, heads, d] out. The native kernel for one-token queries it can serve, SDPA otherwise."""
    batch, heads, q_len, dim = query.shape
    kv_heads, length = key.shape[1], key.shape[2]
    keep = _keep_rows(attention_mask, batch, length) if q_len == 1 else False
    usable = (
        keep is not False
        and query.device.type == "cpu"
        and query.dtype in (torch.float32, torch.bfloat16)
        and key.dtype == value.dtype == query.dtype
        and value.shape[-1] == dim <= _native.DECODE_ATTENTION_MAX_HEAD_DIM
        and heads % kv_heads == 0
        and heads // kv_heads <= _native.DECODE_ATTENTION_MAX_GROUP
        and key.shape[0] == value.shape[0] == batch
        and key.stride(-1) == value.stride(-1) == 1
        and not (torch.is_grad_enabled() and (query.requires_grad or key.requires_grad or value.requires_grad))
        and (dropout == 0.0 or not module.training)
        and not any(kwargs.get(name) is not None for name in _UNSUPPORTED_KWARGS)
    )
    if not usable:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    group = heads // kv_heads
    out = torch.empty((batch, 1, heads, dim), dtype=query.dtype)  # the [b, q, heads, d] SDPA's function returns
    q = query[:, :, 0].unflatten(1, (kv_heads, group))
    if q.stride(-1) != 1:
        q = q.contiguous()
    scale = float(scaling) if scaling is not None else dim ** -0.5
    _native.decode_attention(numpy_bits(q), numpy_bits(key), numpy_bits(value),
                             None if keep is None else keep.numpy(), scale,
                             numpy_bits(out.view(batch, kv_heads, group, dim)), torch.get_num_threads())
    return out, None


def register() -> str:
    """Make ``ATTN_IMPLEMENTATION`` a name models accept (idempotent); SDPA's boolean masks go with it."""
    AttentionInterface.register(ATTN_IMPLEMENTATION, native_attention)
    AttentionMaskInterface.register(ATTN_IMPLEMENTATION, sdpa_mask)
    return ATTN_IMPLEMENTATION


@contextmanager
def native_decode_attention(model: Any) -> Iterator[bool]:
    """Within the block, ``model`` (a stock transformers model on a CPU using SDPA) attends through
    ``native_attention``; yields whether it does. Other models and devices are left as they are."""
    param = next(model.parameters(), None)
    before = getattr(model.config, "_attn_implementation", None)
    if param is None or param.device.type != "cpu" or before != "sdpa" or not hasattr(_native, "decode_attention"):
        yield False  # (a native core built without its CPU kernel, -DDART_CPU_ATTENTION=OFF: SDPA as it is)
        return
    model.set_attn_implementation(register())
    try:
        yield True
    finally:
        model.set_attn_implementation(before)
