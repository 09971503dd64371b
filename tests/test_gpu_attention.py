"""What a GPU's attention kernels change, checked on the CPU: the drafters' attention takes whatever memory layout
the kernel returns its output in (CUDA's kernels return [B, T, heads, d]-major tensors, which a ``view`` to
[B, heads, T, d] refused on an H200), and every engine and drafter forward on CUDA leaves cuDNN's kernel out (it
builds a graph for every new key length: 2.2 ms of host time a call there)."""

from __future__ import annotations

import contextlib
from typing import Any

import helpers_ckpt as C
import pytest
import torch

from dart_core.drafters.config import DrafterConfig
from dart_core.drafters.dflash import DFlashAttention, DFlashConfig
from dart_core.drafters.layers import Attention
from dart_core.engine import attention as engine_attention
from dart_core.engine import target as engine_target
from dart_core.engine.attention import sdpa_backends
from dart_core.engine.target import TargetModel

HEADS, KV_HEADS, HD, HIDDEN = 4, 2, 8, 16


def _gpu_layout_sdpa(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """SDPA returning its usual values in the layout a GPU kernel uses (dims 1 and 2 swapped in memory)."""
    real = torch.nn.functional.scaled_dot_product_attention
    calls: list[int] = []

    def gpu_like(*args: Any, **kwargs: Any) -> torch.Tensor:
        out = real(*args, **kwargs)
        calls.append(1)
        return out.transpose(1, 2).contiguous().transpose(1, 2)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", gpu_like)
    return calls


def _identity_rotation(rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.ones(rows, HD), torch.zeros(rows, HD)


def test_dart_and_eagle_attention_take_a_gpu_kernels_output_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    cfg = DrafterConfig(hidden_size=HIDDEN, intermediate_size=32, num_attention_heads=HEADS,
                        num_key_value_heads=KV_HEADS, head_dim=HD, rms_norm_eps=1e-6, rope_theta=1e4,
                        rope_scaling=None, max_position_embeddings=64, vocab_size=50, draft_vocab_size=20,
                        target_hidden_size=HIDDEN)
    attn = Attention(cfg).eval()
    x, (cos, sin) = torch.randn(2, 5, 2 * HIDDEN), _identity_rotation(5)
    mask = torch.ones(5, 5, dtype=torch.bool).tril()
    expected, _, _ = attn(x, cos, sin, None, mask)
    calls = _gpu_layout_sdpa(monkeypatch)
    got, _, _ = attn(x, cos, sin, None, mask)
    assert calls, "the patched kernel was not used"
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_dflash_attention_takes_a_gpu_kernels_output_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    cfg = DFlashConfig(hidden_size=HIDDEN, intermediate_size=32, num_hidden_layers=1, num_attention_heads=HEADS,
                       num_key_value_heads=KV_HEADS, head_dim=HD, rms_norm_eps=1e-6, rope_theta=1e4,
                       rope_scaling=None, max_position_embeddings=64, attention_bias=False, num_target_layers=2,
                       block_size=4, mask_token_id=0, target_layer_ids=(0, 1))
    attn = DFlashAttention(cfg).eval()
    a, c = torch.randn(2, 4, HIDDEN), torch.randn(2, 3, HIDDEN)
    cos, sin = _identity_rotation(7)
    expected = attn(a, c, cos, sin)
    calls = _gpu_layout_sdpa(monkeypatch)
    got = attn(a, c, cos, sin)
    assert calls, "the patched kernel was not used"
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_on_cuda_every_sdpa_kernel_but_cudnns_is_allowed_and_the_choice_is_restored() -> None:
    before = torch.backends.cuda.cudnn_sdp_enabled()
    with sdpa_backends(torch.device("cuda")):
        assert not torch.backends.cuda.cudnn_sdp_enabled()
        assert torch.backends.cuda.flash_sdp_enabled()
        assert torch.backends.cuda.mem_efficient_sdp_enabled()
        assert torch.backends.cuda.math_sdp_enabled()
    assert torch.backends.cuda.cudnn_sdp_enabled() == before
    with sdpa_backends(torch.device("cpu")):
        assert torch.backends.cuda.cudnn_sdp_enabled() == before


def test_the_targets_forwards_run_inside_the_kernel_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    entered: list[torch.device] = []

    @contextlib.contextmanager
    def spy(device: torch.device):  # type: ignore[no-untyped-def]
        entered.append(device)
        with engine_attention.sdpa_backends(device):
            yield

    monkeypatch.setattr(engine_target, "sdpa_backends", spy)
    target = TargetModel(C.tiny_target("llama"))
    state = target.new_state()
    target.prefill(state, [[1, 2, 3]], layers=())
    target.forward_tokens(state, [4], features=False)
    assert entered == [torch.device("cpu")] * len(entered) and len(entered) >= 2
