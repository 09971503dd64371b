"""The native one-token attention over a cache (``dart_core._native.decode_attention``) and its registration with
transformers (``dart_core.engine.cpu_attention``): equal to attention computed in float64 for float32 and bfloat16,
grouped query heads, every kernel path (16-wide vectors with the head width fixed or read, a group in parts of up
to four, one float at a time) in every copy of the kernel this processor runs (baseline, AVX-512),
left padding, holes, a row with nothing to attend to, strided caches and any thread count; bad calls refused by
name; one-token queries served natively and everything else handed to SDPA; the distillation's batch decoder
attends natively and hands the model back with its own attention."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from dart_core._native import DECODE_ATTENTION_ISAS, decode_attention
from transformers.integrations.sdpa_attention import sdpa_attention_forward

import dart_core.engine.cpu_attention as CA
import tests.helpers_ckpt as C
from dart_core.engine.cpu_attention import native_attention, native_decode_attention
from dart_core.engine.kv_cache import row_moves
from dart_core.train.batch_decode import batch_answers


def _bits(t: torch.Tensor) -> np.ndarray:
    return (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy()


def _case(dtype: torch.dtype, batch: int, kv_heads: int, group: int, length: int, dim: int, seed: int = 0
          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Query [b, kv, g, d]; keys and values as strided views of a cache with 7 more positions than filled;
    keep: row 0 all, row 1 left padding, row 2 holes, row 3 nothing (when there are that many rows)."""
    g = torch.Generator().manual_seed(seed)
    q = (torch.randn(batch, kv_heads, group, dim, generator=g) * 3).to(dtype)  # peaky: exp's whole range
    cache_k = torch.randn(batch, kv_heads, length + 7, dim, generator=g).to(dtype)
    cache_v = torch.randn(batch, kv_heads, length + 7, dim, generator=g).to(dtype)
    keep = torch.ones(batch, length, dtype=torch.bool)
    if batch > 1:
        keep[1, : length // 3] = False
    if batch > 2:
        keep[2, ::3] = False
    if batch > 3:
        keep[3] = False
    return q, cache_k[:, :, :length], cache_v[:, :, :length], keep


def _reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keep: torch.Tensor, scale: float) -> torch.Tensor:
    """float64 attention of the same (rounded) inputs; a row with nothing kept gives zeros."""
    s = torch.einsum("bhgd,bhld->bhgl", q.double(), k.double()) * scale
    s = s.masked_fill(~keep[:, None, None, :], float("-inf"))
    p = torch.softmax(s, -1).nan_to_num(0.0)
    return torch.einsum("bhgl,bhld->bhgd", p, v.double())


@pytest.mark.parametrize("isa", DECODE_ATTENTION_ISAS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("group", "dim"), [(1, 64), (3, 64), (2, 16), (5, 32), (4, 24), (8, 128), (16, 8), (9, 64),
                                            (6, 128), (7, 48)])
def test_the_kernel_equals_float64_attention(isa: str, dtype: torch.dtype, group: int, dim: int) -> None:
    q, k, v, keep = _case(dtype, batch=5, kv_heads=2, group=group, length=37, dim=dim, seed=group * 100 + dim)
    scale = dim ** -0.5
    out = torch.full_like(q, 7.0)
    decode_attention(_bits(q), _bits(k), _bits(v), keep.numpy(), scale, _bits(out), 1, isa=isa)
    want = _reference(q, k, v, keep, scale)
    assert torch.all(out[3] == 0), "a row that may attend to nothing gets zeros, not NaN"
    if dtype == torch.float32:
        torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-5)
    else:  # the float64 result rounded to bfloat16, give or take one step of its 8-bit mantissa
        torch.testing.assert_close(out.float(), want.to(dtype).float(), rtol=8e-3, atol=8e-3)


def test_no_mask_attends_everywhere_and_threads_do_not_change_the_result() -> None:
    # large enough for the kernel to start its threads (it runs small calls on the caller's alone)
    q, k, v, _ = _case(torch.bfloat16, batch=64, kv_heads=2, group=3, length=300, dim=64, seed=9)
    outs = []
    for threads in (1, 3):
        out = torch.empty_like(q)
        decode_attention(_bits(q), _bits(k), _bits(v), None, 0.125, _bits(out), threads)
        outs.append(out)
    assert torch.equal(outs[0], outs[1])
    want = _reference(q, k, v, torch.ones(64, 300, dtype=torch.bool), 0.125)
    torch.testing.assert_close(outs[0].float(), want.to(torch.bfloat16).float(), rtol=8e-3, atol=8e-3)


def test_the_copies_of_the_kernel_are_the_widest_first_and_auto_runs_the_widest() -> None:
    assert DECODE_ATTENTION_ISAS[-1] == "baseline"
    assert set(DECODE_ATTENTION_ISAS) <= {"avx512", "baseline"}
    q, k, v, keep = _case(torch.float32, batch=4, kv_heads=2, group=3, length=37, dim=64, seed=3)
    outs = {}
    for isa in ("auto", DECODE_ATTENTION_ISAS[0]):
        outs[isa] = torch.empty_like(q)
        decode_attention(_bits(q), _bits(k), _bits(v), keep.numpy(), 0.125, _bits(outs[isa]), 1, isa=isa)
    assert torch.equal(outs["auto"], outs[DECODE_ATTENTION_ISAS[0]])


def _args(**change: object) -> dict[str, object]:
    q, k, v, keep = _case(torch.float32, batch=2, kv_heads=2, group=3, length=5, dim=16)
    args: dict[str, object] = {"query": q.numpy(), "keys": k.numpy(), "values": v.numpy(), "keep": keep.numpy(),
                               "scale": 0.25, "out": np.zeros((2, 2, 3, 16), np.float32), "threads": 1}
    args.update(change)
    return args


def _read_only() -> np.ndarray:
    a = np.zeros((2, 2, 3, 16), np.float32)
    a.setflags(write=False)
    return a


@pytest.mark.parametrize(("change", "message"), [
    ({"query": np.zeros((2, 2, 16), np.float32)}, "query must be 4-D"),
    ({"values": np.zeros((2, 2, 6, 16), np.float32)}, "values must have shape"),
    ({"out": np.zeros((2, 2, 3, 8), np.float32)}, "out must have shape"),
    ({"query": np.zeros((2, 2, 17, 16), np.float32), "out": np.zeros((2, 2, 17, 16), np.float32)},
     "query heads per key/value head"),
    ({"query": np.zeros((2, 2, 3, 264), np.float32), "keys": np.zeros((2, 2, 5, 264), np.float32),
      "values": np.zeros((2, 2, 5, 264), np.float32), "out": np.zeros((2, 2, 3, 264), np.float32)}, "head width"),
    ({"keys": np.zeros((2, 2, 5, 16), np.int16)}, "one dtype"),
    ({"query": np.zeros((2, 2, 3, 16)), "keys": np.zeros((2, 2, 5, 16)), "values": np.zeros((2, 2, 5, 16)),
      "out": np.zeros((2, 2, 3, 16))}, "must be float32, or bfloat16"),
    ({"keys": np.zeros((2, 2, 5, 32), np.float32)[..., ::2]}, "last dimension must be contiguous"),
    ({"keys": np.zeros((2, 2, 5, 16), np.float32)[:, :, ::-1]}, "negative or unaligned stride"),
    ({"keep": np.ones((2, 4), bool)}, "keep must have shape"),
    ({"keep": np.ones((2, 5), np.float32)}, "keep must be bool or uint8"),
    ({"keep": np.ones((2, 10), bool)[:, ::2]}, "keep's rows must be contiguous"),
    ({"threads": 0}, "threads must be at least 1"),
    ({"isa": "sse9"}, "isa must be auto, .*baseline on this processor, not sse9"),
    ({"out": _read_only()}, "out must be writeable"),
])
def test_bad_calls_are_refused_by_name(change: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        decode_attention(**_args(**change))


class _Attention(torch.nn.Module):
    num_key_value_groups = 3


def _sdpa_inputs(q_len: int, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(q_len)
    query = torch.randn(4, 6, q_len, 16, generator=g).to(dtype)  # 6 query heads over 2 key/value heads
    key, value = (torch.randn(4, 2, 9, 16, generator=g).to(dtype) for _ in range(2))
    mask = torch.ones(4, 1, q_len, 9, dtype=torch.bool).tril(9 - q_len)
    mask[1, ..., :4] = False  # left padding
    return query, key, value, mask


@pytest.fixture
def kernel_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []

    def counting(*args: object) -> None:
        calls.append(1)
        decode_attention(*args)

    monkeypatch.setattr(CA._native, "decode_attention", counting)
    return calls


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_one_token_queries_are_served_natively_and_equal_sdpa(dtype: torch.dtype, kernel_calls: list[int]) -> None:
    query, key, value, mask = _sdpa_inputs(1, dtype)
    module = _Attention().eval()
    with torch.no_grad():
        got, _ = native_attention(module, query, key, value, mask, scaling=0.3)
        want, _ = sdpa_attention_forward(module, query, key, value, mask, scaling=0.3)
        none_got, _ = native_attention(module, query, key, value, None, scaling=0.3)
        none_want, _ = sdpa_attention_forward(module, query, key, value, None, scaling=0.3)
    assert kernel_calls == [1, 1]
    assert got.shape == want.shape == (4, 1, 6, 16)
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(got.float(), want.float(), rtol=tol, atol=tol)
    torch.testing.assert_close(none_got.float(), none_want.float(), rtol=tol, atol=tol)


def test_everything_else_is_handed_to_sdpa_unchanged(kernel_calls: list[int]) -> None:
    module = _Attention().eval()
    query, key, value, mask = _sdpa_inputs(3)  # a prefill: three query positions
    got, _ = native_attention(module, query, key, value, mask, scaling=0.3)
    assert torch.equal(got, sdpa_attention_forward(module, query, key, value, mask, scaling=0.3)[0])
    query, key, value, mask = _sdpa_inputs(1)
    additive = torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))  # a float mask: not the kernel's kind
    native_attention(module, query, key, value, additive, scaling=0.3)
    native_attention(module, query.double(), key.double(), value.double(), mask, scaling=0.3)
    native_attention(module, query.requires_grad_(), key, value, mask, scaling=0.3)  # gradients wanted
    assert kernel_calls == []


def test_the_batch_decoder_attends_natively_and_gives_the_models_own_answers(kernel_calls: list[int]) -> None:
    model = C.tiny_target("qwen3", vocab=97, layers=2, seed=3).float()
    prompts = [[(7 * i + j) % 90 + 3 for j in range(2 + i % 5)] for i in range(9)]
    native = batch_answers(model, prompts, max_new_tokens=12, stop_ids=[1], pad_id=0)
    assert kernel_calls, "the decode steps should have used the native kernel"
    assert model.config._attn_implementation == "sdpa", "the model is handed back with its own attention"
    kernel_calls.clear()
    sdpa = batch_answers(model, prompts, max_new_tokens=12, stop_ids=[1], pad_id=0, attention="sdpa")
    assert kernel_calls == []
    assert native == sdpa  # float32: the same tokens
    with pytest.raises(ValueError, match="attention must be one of native, sdpa"):
        batch_answers(model, prompts, max_new_tokens=2, stop_ids=[1], pad_id=0, attention="flash")


def test_the_model_gets_its_attention_back_after_an_error() -> None:
    model = C.tiny_target("llama", vocab=97, layers=1, seed=1)
    with pytest.raises(RuntimeError, match="boom"), native_decode_attention(model) as native:
        assert native and model.config._attn_implementation == CA.ATTN_IMPLEMENTATION
        raise RuntimeError("boom")
    assert model.config._attn_implementation == "sdpa"
    model.set_attn_implementation("eager")
    with native_decode_attention(model) as native:  # not SDPA: left as it is
        assert not native and model.config._attn_implementation == "eager"


def test_dropped_rows_are_moved_up_by_block_copies_that_never_read_a_written_row() -> None:
    rnd = random.Random(0)
    for _ in range(300):
        n = rnd.randint(1, 40)
        rows = sorted(rnd.sample(range(n), rnd.randint(1, n)))
        buffer = list(range(n))
        for dst, src, count in row_moves(rows):
            assert src >= dst + count or src == dst, "a block must not overlap itself"
            buffer[dst:dst + count] = buffer[src:src + count]
        assert buffer[: len(rows)] == rows
    assert row_moves([0, 1, 2]) == []
    assert row_moves([1, 2, 3, 4, 5]) == [(0, 1, 1), (1, 2, 1), (2, 3, 1), (3, 4, 1), (4, 5, 1)]
    assert row_moves([3, 4, 5, 6, 7]) == [(0, 3, 3), (3, 6, 2)]
    with pytest.raises(ValueError, match="increasing"):
        row_moves([2, 1])


def test_the_training_cli_shortens_openmp_spinning_before_torch_loads() -> None:
    probe = ("import os, runpy, sys\n"
             "import dart_core.train.__main__\n"
             "print('PROBE', os.environ.get('GOMP_SPINCOUNT'), 'torch' in sys.modules)  # imported: untouched\n"
             "sys.argv = ['prog', '--help']\n"
             "try:\n"
             "    runpy.run_module('dart_core.train', run_name='__main__')\n"
             "except SystemExit:\n"
             "    pass\n"
             "print('PROBE', os.environ.get('GOMP_SPINCOUNT'), 'torch' in sys.modules)\n")
    def probes(env: dict[str, str]) -> list[list[str]]:
        out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
        return [line.split()[1:] for line in out.stdout.splitlines() if line.startswith("PROBE ")]

    env = {k: v for k, v in os.environ.items() if k != "GOMP_SPINCOUNT"}
    # set by the command line, before torch is loaded (or libgomp never reads it)
    assert probes(env) == [["None", "False"], ["1000", "False"]]
    assert probes({**env, "GOMP_SPINCOUNT": "5"})[1] == ["5", "False"], "a value the user set stands"


def test_the_attention_benchmark_prints_both_methods_and_their_agreement(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from dart_core.bench.__main__ import main

    out = tmp_path / "a.json"
    assert main(["attention", "--batch", "6", "--length", "40", "--layers", "2", "--repeats", "1", "--json",
                 str(out)]) == 0
    rows = {r["dtype"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"bfloat16", "float32"}
    assert rows["float32"]["max_abs_diff"] < 1e-5 and rows["bfloat16"]["max_abs_diff"] < 2e-2
    assert all(r["native_ms"] > 0 and r["sdpa_ms"] > 0 and r["speedup"] > 0 for r in rows.values())
    assert "speedup" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="not float32 or bfloat16"):
        main(["attention", "--batch", "2", "--length", "8", "--layers", "1", "--dtype", "float16"])
