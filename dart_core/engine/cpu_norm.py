"""The model's RMSNorms by one native call on a CPU, where a decode step's norm is otherwise eight eager tensor ops.

Why: at a decode step's few rows the arithmetic of a norm is nothing and its eight ops' dispatch is all, twice a
decoder layer (measured: docs/benchmarks.md#measurements-behind-design-choices). :func:`use_cpu_norms` swaps every
RMSNorm of the Llama form (``weight * (x / sqrt(mean(x²) + eps))`` in float32, the scaled row rounded to the input's
dtype first) for a :class:`DispatchRMSNorm` that shares its weight and calls ``dart_core._native.rms_norm``. Which
norms have that form is not read from their class names: each norm's own forward and the native call are compared on
random rows of its width, and only a norm they agree on is swapped (Gemma's ``1 + weight``, a norm with a bias or an
offset, keep their own). Anything the native call cannot serve (gradients wanted, another device or dtype, rows
not contiguous) runs the norm class's own forward, so the model's code stays the one that runs there."""

from __future__ import annotations

from collections.abc import Callable

import torch

from dart_core import _native
from dart_core.engine.cpu_linear import NATIVE_DTYPES, numpy_bits

__all__ = ["DispatchRMSNorm", "use_cpu_norms"]


class DispatchRMSNorm(torch.nn.Module):
    """An RMSNorm whose CPU forward is one native call; it holds the original's weight (the same parameter, under
    the same name) and epsilon, and falls back to the original class's own forward."""

    weight: torch.nn.Parameter

    def __init__(self, norm: torch.nn.Module, eps: float, stock_forward: Callable[..., torch.Tensor]) -> None:
        super().__init__()
        self.weight = norm.weight
        self.variance_epsilon = self.eps = eps  # under both names the norm classes read it by
        self.stock_forward = stock_forward
        # the weight as the native call reads it (a view that keeps its storage alive) and that storage's address
        self._weight_bits, self._weight_ptr = None, None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # kept lean: a plain step calls this twice a layer, so its checks cost a share of the step
        w = self._parameters["weight"]
        if (not x.is_cpu or x.dtype not in NATIVE_DTYPES or w.dtype != x.dtype or not x.is_contiguous()
                or x.shape[-1] != w.shape[0] or (torch.is_grad_enabled() and (x.requires_grad or w.requires_grad))):
            return self.stock_forward(self, x)
        if w.data_ptr() != self._weight_ptr:  # a new storage (``to()``, a load): view it anew
            if not w.is_contiguous():
                return self.stock_forward(self, x)
            self._weight_bits, self._weight_ptr = numpy_bits(w.detach()), w.data_ptr()
        flat = x.view(-1, x.shape[-1])
        out = torch.empty_like(flat)
        _native.rms_norm(numpy_bits(flat), self._weight_bits, numpy_bits(out), self.eps)
        return out if x.dim() == 2 else out.view(x.shape)

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, eps={self.eps}, native"


def _epsilon(norm: torch.nn.Module) -> float | None:
    for name in ("variance_epsilon", "eps"):
        value = getattr(norm, name, None)
        if isinstance(value, float | int) and not isinstance(value, bool):
            return float(value)
    return None


def _candidate(norm: torch.nn.Module) -> DispatchRMSNorm | None:
    """``norm`` as a :class:`DispatchRMSNorm`, if it is an RMSNorm whose own forward the native call reproduces."""
    weight = getattr(norm, "weight", None)
    eps = _epsilon(norm)
    if ("RMSNorm" not in type(norm).__name__ or not isinstance(weight, torch.nn.Parameter) or eps is None
            or weight.dim() != 1 or weight.device.type != "cpu" or weight.dtype not in NATIVE_DTYPES
            or any(True for _ in norm.children()) or set(dict(norm.named_parameters())) != {"weight"}):
        return None
    swapped = DispatchRMSNorm(norm, eps, type(norm).forward)
    gen = torch.Generator().manual_seed(0)
    rows = (torch.randn(3, weight.shape[0], generator=gen) * 3).to(weight.dtype)
    tolerance = 1e-5 if weight.dtype == torch.float32 else 2e-2
    try:
        with torch.no_grad():  # the native call, and the fallback on the swapped module's attributes
            want, got, fallback = norm(rows), swapped(rows), swapped.stock_forward(swapped, rows)
    except (AttributeError, TypeError, RuntimeError):
        return None
    same = all(t.shape == want.shape and torch.allclose(t.float(), want.float(), rtol=tolerance, atol=tolerance)
               for t in (got, fallback))
    return swapped if same else None


def use_cpu_norms(module: torch.nn.Module) -> int:
    """Swap ``module``'s RMSNorms (on the CPU, float32 or bfloat16) for :class:`DispatchRMSNorm` s where their own
    forward and the native call agree; returns how many were swapped. Idempotent."""
    if not hasattr(_native, "rms_norm"):
        return 0
    swapped = 0
    for name, norm in list(module.named_modules()):
        if isinstance(norm, DispatchRMSNorm) or not name:
            continue
        new = _candidate(norm)
        if new is not None:
            module.set_submodule(name, new)
            swapped += 1
    return swapped

