"""The RMSNorms run by one native call: the model's own result (float32 to a rounding, bfloat16 to its rounding), the
weight shared under its own name, norms of another form left alone, the fallback where the call cannot serve, bad
arrays refused by name, and greedy output unchanged."""

from __future__ import annotations

import helpers_ckpt as C
import numpy as np
import pytest
import torch
from transformers.models.llama.modeling_llama import LlamaRMSNorm

from dart_core import _native
from dart_core.engine.cpu_norm import DispatchRMSNorm, use_cpu_norms
from dart_core.engine.loop import generate
from dart_core.engine.target import TargetModel


def _norm(dim: int, dtype: torch.dtype = torch.float32, eps: float = 1e-5) -> LlamaRMSNorm:
    torch.manual_seed(dim)
    norm = LlamaRMSNorm(dim, eps=eps)
    norm.weight.data.normal_()
    return norm.to(dtype).requires_grad_(False)


@pytest.mark.parametrize("dim", [1, 7, 8, 64, 129])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_native_norm_is_the_models_own(dim: int, dtype: torch.dtype) -> None:
    norm = _norm(dim, dtype)
    holder = torch.nn.Sequential(norm)
    assert use_cpu_norms(holder) == 1 and isinstance(holder[0], DispatchRMSNorm)
    assert holder[0].weight is norm.weight and list(holder.state_dict()) == ["0.weight"]
    x = (torch.randn(2, 3, dim) * 4).to(dtype)
    with torch.no_grad():
        want, got = norm(x), holder[0](x)
    assert got.shape == want.shape and got.dtype == dtype
    if dtype == torch.float32:
        torch.testing.assert_close(got, want, rtol=2e-6, atol=1e-6)
    else:  # the same roundings but for the float32 sum's order: at most one bfloat16 step apart
        assert ((got.float() - want.float()).abs() <= want.float().abs() * 2 ** -7 + 1e-6).all()


def test_the_native_norm_follows_its_weight_changed_in_place_or_replaced() -> None:
    """The native call reads the weight through a view made once: an in-place change shows through it, a new
    storage (a load, ``to()``) is viewed anew, never a stale copy."""
    norm = _norm(16)
    holder = torch.nn.Sequential(norm)
    use_cpu_norms(holder)
    x = torch.randn(3, 16)
    with torch.no_grad():
        holder[0](x)
        norm.weight.mul_(2.0)
        torch.testing.assert_close(holder[0](x), norm(x), rtol=2e-6, atol=1e-6)
        norm.weight.data = torch.randn(16)
        torch.testing.assert_close(holder[0](x), norm(x), rtol=2e-6, atol=1e-6)
        holder.to(torch.bfloat16)
        got, want = holder[0](x.bfloat16()), norm(x.bfloat16())
        assert got.dtype == torch.bfloat16
        assert ((got.float() - want.float()).abs() <= want.float().abs() * 2 ** -7 + 1e-6).all()


def test_norms_of_another_form_keep_their_own_forward() -> None:
    class OffsetRMSNorm(LlamaRMSNorm):  # Gemma's form: the weight is an offset from one
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return super().forward(x) / self.weight * (1.0 + self.weight)

    class BiasedRMSNorm(LlamaRMSNorm):
        def __init__(self, dim: int) -> None:
            super().__init__(dim)
            self.bias = torch.nn.Parameter(torch.zeros(dim))

    model = torch.nn.ModuleDict({"offset": OffsetRMSNorm(16), "biased": BiasedRMSNorm(16), "plain": _norm(16),
                                 "layer": torch.nn.LayerNorm(16)})
    model["offset"].weight.data.normal_()
    assert use_cpu_norms(model) == 1
    assert isinstance(model["plain"], DispatchRMSNorm)
    assert type(model["offset"]) is OffsetRMSNorm and type(model["biased"]) is BiasedRMSNorm
    assert use_cpu_norms(model) == 0  # already swapped


def test_inputs_the_call_cannot_serve_run_the_norm_classes_own_forward() -> None:
    norm = _norm(32)
    swapped = torch.nn.Sequential(norm)
    use_cpu_norms(swapped)
    x = torch.randn(4, 64)[:, ::2]  # not contiguous
    with torch.no_grad():
        assert torch.equal(swapped[0](x), norm(x))
    g = torch.randn(3, 32, requires_grad=True)
    swapped[0].weight.requires_grad_(True)
    swapped[0](g).sum().backward()  # gradients: the stock forward, differentiable
    assert g.grad is not None and swapped[0].weight.grad is not None
    with torch.no_grad():
        xd = torch.randn(2, 32, dtype=torch.float64)
        assert torch.equal(swapped[0](xd), norm(xd))  # another dtype


def test_bad_arrays_are_refused_by_name() -> None:
    x, w, out = np.ones((2, 8), np.float32), np.ones(8, np.float32), np.zeros((2, 8), np.float32)
    _native.rms_norm(x, w, out, 1e-6)
    assert np.allclose(out, 1.0, atol=1e-5)
    with pytest.raises(ValueError, match="weight must be contiguous with shape \\[8\\]"):
        _native.rms_norm(x, np.ones(7, np.float32), out, 1e-6)
    with pytest.raises(ValueError, match="out must be C-contiguous with x's shape"):
        _native.rms_norm(x, w, np.zeros((3, 8), np.float32), 1e-6)
    with pytest.raises(ValueError, match="of one dtype"):
        _native.rms_norm(x, w.astype(np.uint16), out, 1e-6)
    with pytest.raises(ValueError, match="float32, or bfloat16"):
        _native.rms_norm(x.astype(np.float64), w, out, 1e-6)
    with pytest.raises(ValueError, match="out must not be x"):
        _native.rms_norm(x, w, x, 1e-6)
    with pytest.raises(ValueError, match="eps must be"):
        _native.rms_norm(x, w, out, float("nan"))
    with pytest.raises(ValueError, match="x must be C-contiguous"):
        _native.rms_norm(np.ones((8, 2), np.float32).T, w, out, 1e-6)


def test_greedy_output_is_unchanged_by_the_native_norms() -> None:
    model = C.tiny_target("qwen3", vocab=97, hidden=32).float()  # Qwen3: its query and key norms too
    base = TargetModel(model)
    prompts = [[5, 9, 2, 40, 7], [1, 2, 3], list(range(20, 45))]
    want = [generate(base, p, None, max_new_tokens=24)[0] for p in prompts]
    n_norms = sum("RMSNorm" in type(m).__name__ for m in model.modules())
    assert use_cpu_norms(model) == n_norms > 0
    got = [generate(TargetModel(model), p, None, max_new_tokens=24)[0] for p in prompts]
    assert got == want
