"""Which of torch's attention kernels the engine's forwards may use on a GPU.

``scaled_dot_product_attention`` with an explicit mask (every engine forward passes one: tree attention, padding)
picks cuDNN's kernel on recent NVIDIA GPUs, and cuDNN builds an execution graph for every new key length, which
is every decoding step: its host time per call, paid by every attention layer, made a plain decoding step far
slower than the same model's forward without a mask (measured: docs/benchmarks.md#measurements-behind-design-choices).
Flash and memory-efficient attention (and the math fallback) launch without such a set-up, so the engine asks for
those."""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

# every backend but cuDNN's, in torch's own order of preference
GPU_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def sdpa_backends(device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """A context in which attention on ``device`` avoids cuDNN's kernel (CUDA); elsewhere nothing changes."""
    return sdpa_kernel(GPU_BACKENDS) if device.type == "cuda" else contextlib.nullcontext()
