"""The CPU linear kernels chosen per row count (dart_core.engine.cpu_linear): the oneDNN path computes what
``F.linear`` computes, falls back to it wherever its packed copy cannot serve, keeps tied weights tied, and the
plan's choices follow its own timings; bad modes are refused by name."""

from __future__ import annotations

import helpers_ckpt as C
import pytest
import torch
import torch.nn.functional as F

from dart_core import _native
from dart_core.engine import cpu_linear as CL
from dart_core.engine.loop import generate
from dart_core.engine.target import TargetModel

pytestmark = pytest.mark.skipif(not CL.onednn_available(), reason="this PyTorch build has no oneDNN prepacked linear")


def packed_layer(bias: bool = True, kind: str = CL.ONEDNN) -> tuple[torch.nn.Linear, CL.DispatchLinear]:
    torch.manual_seed(0)
    lin = torch.nn.Linear(48, 40, bias=bias).requires_grad_(False)
    holder = torch.nn.Sequential(lin)
    CL.use_cpu_linears(holder, plan=CL.CpuLinearPlan.uniform(kind))
    return lin, holder[0]


@pytest.mark.parametrize("shape", [(1, 48), (3, 48), (16, 48), (2, 5, 48), (1, 1, 48)])
@pytest.mark.parametrize("bias", [True, False])
def test_onednn_path_equals_f_linear(shape: tuple[int, ...], bias: bool) -> None:
    lin, swapped = packed_layer(bias)
    assert isinstance(swapped, CL.DispatchLinear) and swapped.packed is not None
    assert swapped.weight is lin.weight and swapped.bias is lin.bias  # the same parameters, not copies
    x = torch.randn(*shape)
    with torch.no_grad():
        got, want = swapped(x), F.linear(x, lin.weight, lin.bias)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_stale_or_unsuitable_packs_fall_back_to_the_weight_itself() -> None:
    lin, swapped = packed_layer()
    x = torch.randn(4, 48)
    with torch.no_grad():
        lin.weight.mul_(2.0)  # an in-place change: the packed copy is stale now
        assert torch.equal(swapped(x), F.linear(x, lin.weight, lin.bias))
    lin, swapped = packed_layer()
    lin.weight.requires_grad_(True)  # gradients wanted: the autograd path
    y = swapped(x)
    y.sum().backward()
    assert lin.weight.grad is not None
    _, swapped = packed_layer()
    swapped.double()  # another dtype: the packed copy no longer matches
    xd = x.double()
    with torch.no_grad():
        assert torch.equal(swapped(xd), F.linear(xd, swapped.weight, swapped.bias))


def test_stock_rows_of_a_plan_use_f_linear_exactly() -> None:
    _, swapped = packed_layer()
    swapped.plan = CL.CpuLinearPlan({**dict.fromkeys(CL.ROW_CLASSES, CL.ONEDNN), 1: CL.STOCK})
    one, many = torch.randn(1, 48), torch.randn(8, 48)
    with torch.no_grad():
        assert torch.equal(swapped(one), F.linear(one, swapped.weight, swapped.bias))
        onednn = swapped(many)
        torch.testing.assert_close(onednn, F.linear(many, swapped.weight, swapped.bias), rtol=1e-5, atol=1e-5)


def test_tied_weights_stay_tied_and_are_packed_once() -> None:
    model = C.tiny_target("llama", vocab=97, hidden=32).float()
    model.config.tie_word_embeddings = True
    model.lm_head.weight = model.model.embed_tokens.weight
    n_linears = sum(type(m) is torch.nn.Linear for m in model.modules())
    plan = CL.use_cpu_linears(model, CL.ONEDNN)
    swapped = [m for m in model.modules() if isinstance(m, CL.DispatchLinear)]
    assert set(plan.by_rows.values()) == {CL.ONEDNN} and len(swapped) == n_linears
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert isinstance(model.lm_head, CL.DispatchLinear)
    back = CL.use_cpu_linears(model, CL.STOCK)  # turned back: every swapped layer dispatches to F.linear
    assert set(back.by_rows.values()) == {CL.STOCK}
    assert all(m.packed is None for m in model.modules() if isinstance(m, CL.DispatchLinear))


def test_auto_plan_follows_its_own_timings() -> None:
    model = C.tiny_target("qwen3", vocab=97, hidden=32).float()
    plan = CL.plan_cpu_linears(model, "auto", repeats=1)
    assert plan.reason == "measured" and plan.threads == torch.get_num_threads()
    assert set(plan.timings) == {CL.STOCK, CL.ONEDNN, CL.NATIVE}
    assert sorted(plan.by_rows) == list(CL.ROW_CLASSES)
    for rows, chosen in plan.by_rows.items():
        t = {k: plan.timings[k][rows] for k in CL.KERNELS}
        assert all(ms > 0 for ms in t.values())
        fastest = min(CL.KERNELS, key=t.__getitem__)
        assert chosen == (fastest if t[fastest] < CL.MARGIN * t[CL.STOCK] else CL.STOCK)
    assert f"1 row {plan.by_rows[1]}" in plan.describe() and f"16 rows {plan.by_rows[16]}" in plan.summary


def test_each_row_count_takes_the_kernel_timed_nearest_it() -> None:
    assert CL.ROW_CLASSES == (1, 2, 4, 8, 16)
    assert [CL.row_class(n) for n in (1, 2, 3, 5, 6, 11, 12, 16, 64)] == [1, 2, 4, 4, 8, 8, 16, 16, 16]
    plan = CL.CpuLinearPlan({1: CL.NATIVE, 2: CL.NATIVE, 4: CL.NATIVE, 8: CL.ONEDNN, 16: CL.STOCK})
    assert [plan.kernel(n) for n in (1, 3, 5, 6, 11, 12)] == [CL.NATIVE] * 3 + [CL.ONEDNN] * 2 + [CL.STOCK]
    assert CL.CpuLinearPlan.uniform(CL.NATIVE).kernel(CL.NATIVE_MAX_ROWS + 1) == CL.STOCK  # past what it takes
    assert plan.summary == "1 row native, 2 rows native, 4 rows native, 8 rows onednn, 16 rows stock"


def test_bad_modes_and_unsuitable_models_are_refused_by_name() -> None:
    model = C.tiny_target("qwen3", vocab=97, hidden=32)
    with pytest.raises(ValueError, match="cpu_linear must be one of auto, stock, onednn, native, got 'fast'"):
        CL.use_cpu_linears(model, "fast")
    half = C.tiny_target("qwen3", vocab=97, hidden=32).half()
    with pytest.raises(ValueError, match="float32 or bfloat16, not float16"):
        CL.use_cpu_linears(half, CL.ONEDNN)
    plan = CL.use_cpu_linears(half, "auto")  # auto: stock, and the reason why
    assert set(plan.by_rows.values()) == {CL.STOCK} and "float16" in plan.reason
    assert not any(isinstance(m, CL.DispatchLinear) for m in half.modules())


@pytest.mark.parametrize("kernel", [CL.ONEDNN, CL.NATIVE])
def test_speculative_output_equals_greedy_on_onednn_kernels(tmp_path, kernel: str) -> None:
    """The central property on our kernels (oneDNN's packed, and the native few-row one): DART and EAGLE-3 drafts
    verified by the target give its own greedy output, token for token, and that output is transformers' own
    (the target's M-row and one-row products both on the kernel)."""
    from dart_core.drafters.dart import DartDrafter
    from dart_core.drafters.eagle3 import Eagle3Drafter, Eagle3Settings

    model = C.tiny_target("qwen3", vocab=97, hidden=32).float()
    CL.use_cpu_linears(model, kernel)
    target = TargetModel(model)
    drafters = {}
    for kind, cls in (("dart", DartDrafter), ("eagle3", Eagle3Drafter)):
        cfg = C.drafter_config(kind, vocab=97, hidden=32, draft_vocab=48, draft_length=6)
        path = C.write_drafter(tmp_path / kind, cfg, C.random_drafter_state(cfg, kind=kind, seed=7))
        drafters[kind] = cls.from_pretrained(path, target=model)
        plan = CL.use_cpu_linears(drafters[kind], kernel)
        assert set(plan.by_rows.values()) == {kernel}
    rng = torch.Generator().manual_seed(3)
    for _ in range(6):
        prompt = torch.randint(0, 97, (int(torch.randint(3, 20, (1,), generator=rng)),), generator=rng).tolist()
        want, _ = generate(target, prompt, None, max_new_tokens=40)
        ids = torch.tensor([prompt])
        ref = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=40,
                             min_new_tokens=40)[0, len(prompt):].tolist()
        assert want == ref
        for kind, d in drafters.items():
            settings = Eagle3Settings(total_tokens=20, depth=5, top_k=4) if kind == "eagle3" else None
            got, _ = generate(target, prompt, d, max_new_tokens=40, settings=settings)
            assert got == want, kind


def test_another_threads_torch_work_turns_the_onednn_path_off_where_threads_compete(monkeypatch) -> None:
    """HF generate's own thread brings a second OpenMP team: while it lives, PyTorch's kernel serves (with more
    than one thread); with one thread there is no team, and the packed path stays."""
    calls = []
    real = CL._packed_linear
    monkeypatch.setattr(CL, "_packed_linear", lambda *a: calls.append(1) or real(*a))
    _, swapped = packed_layer()
    x = torch.randn(8, 48)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        with torch.no_grad():
            swapped(x)
            assert len(calls) == 1
            with CL.torch_work_on_another_thread():
                assert torch.equal(swapped(x), F.linear(x, swapped.weight, swapped.bias))
                assert len(calls) == 1
                torch.set_num_threads(1)
                swapped(x)
                assert len(calls) == 2
            torch.set_num_threads(2)
            swapped(x)
            assert len(calls) == 3
    finally:
        torch.set_num_threads(threads)


def test_hf_generate_lane_holds_the_other_thread_mark_while_it_streams() -> None:
    from dart_core.racers.hf_generate import stream_hf_generate

    model = C.tiny_target("qwen3", vocab=97, hidden=32).float()
    target = TargetModel(model)
    steps = stream_hf_generate(target, [3, 5, 7, 11], max_new_tokens=5)
    assert CL._other_threads == 0
    next(steps)
    assert CL._other_threads == 1  # the generate thread lives, parked after its first token
    rest = list(steps)
    assert len(rest) == 4 and CL._other_threads == 0


def test_no_packed_copy_without_the_ram_for_it(monkeypatch) -> None:
    model = C.tiny_target("qwen3", vocab=97, hidden=32).float()
    need = sum({id(m.weight): m.weight.nbytes for m in model.modules() if type(m) is torch.nn.Linear}.values())
    monkeypatch.setattr(CL, "available_ram", lambda: need)  # the copy would take all of it
    with pytest.raises(ValueError, match=r"cpu_linear=onednn: the packed copy .* more than half of the"):
        CL.use_cpu_linears(model, CL.ONEDNN)
    plan = CL.use_cpu_linears(model, "auto")
    assert set(plan.by_rows.values()) == {CL.STOCK} and "RAM" in plan.reason
    assert not any(isinstance(m, CL.DispatchLinear) for m in model.modules())
    monkeypatch.setattr(CL, "available_ram", lambda: 3 * need)
    assert CL.use_cpu_linears(model, CL.ONEDNN).uses_onednn


# ----------------------------------------------------------------------------------------------- the native kernel
@pytest.mark.parametrize("isa", _native.ROW_LINEAR_ISAS)
@pytest.mark.parametrize("rows", [1, 2, 3, 16, 33])
@pytest.mark.parametrize("bias", [True, False])
def test_native_row_linear_computes_f_linear(isa: str, rows: int, bias: bool) -> None:
    """Every copy of the kernel, odd widths (a tail past the vector width, a short last block of weight rows) and
    any row count: F.linear's product in float32, and in bfloat16 torch's own rounding of it, within one step."""
    gen = torch.Generator().manual_seed(rows)
    x, w = torch.randn(rows, 77, generator=gen), torch.randn(203, 77, generator=gen)
    b = torch.randn(203, generator=gen) if bias else None
    out = torch.empty(rows, 203)
    _native.row_linear(x.numpy(), w.numpy(), None if b is None else b.numpy(), out.numpy(), 2, isa)
    torch.testing.assert_close(out, F.linear(x, w, b), rtol=1e-5, atol=1e-5)
    xh, wh, bh = x.bfloat16(), w.bfloat16(), None if b is None else b.bfloat16()
    outh = torch.empty(rows, 203, dtype=torch.bfloat16)
    _native.row_linear(CL.numpy_bits(xh), CL.numpy_bits(wh), None if bh is None else CL.numpy_bits(bh),
                       CL.numpy_bits(outh), 2, isa)
    exact = F.linear(xh.float(), wh.float(), None if bh is None else bh.float())
    torch.testing.assert_close(outh.float(), exact, rtol=2 ** -7, atol=1e-2)  # bf16's rounding of the f32 sum


def test_native_row_linear_splits_a_large_layer_across_threads_exactly() -> None:
    """Split over PyTorch's OpenMP team or not, each output is the same sum: the threads only share out rows."""
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(2, 64, generator=gen), torch.randn(4096, 64, generator=gen)
    one, many = torch.empty(2, 4096), torch.empty(2, 4096)
    _native.row_linear(x.numpy(), w.numpy(), None, one.numpy(), 1)
    _native.row_linear(x.numpy(), w.numpy(), None, many.numpy(), 4)
    assert torch.equal(one, many)


def test_native_row_linear_refuses_bad_arrays_by_name() -> None:
    import numpy as np

    x, w, out = np.zeros((2, 8), np.float32), np.zeros((4, 8), np.float32), np.zeros((2, 4), np.float32)
    cases = [
        ((x, np.zeros((4, 9), np.float32), None, out), "weight must have shape \\[4, 8\\]"),
        ((x, w, None, np.zeros((2, 5), np.float32)), "out must have shape \\[2, 4\\]"),
        ((x, w.astype(np.float64), None, out), "weight must be float32"),
        ((x, w.astype(np.int16), None, out), "x, weight and out must be of one dtype"),
        ((x, w, np.zeros(3, np.float32), out), "bias must be contiguous with shape \\[4\\]"),
        ((x, np.asfortranarray(w), None, out), "weight must be C-contiguous"),
        ((x[:, ::2], w[:, :4], None, out), "x must be C-contiguous"),
    ]
    for args, message in cases:
        with pytest.raises(ValueError, match=message):
            _native.row_linear(*args)
    with pytest.raises(ValueError, match="threads must be at least 1"):
        _native.row_linear(x, w, None, out, 0)
    with pytest.raises(ValueError, match="isa must be auto"):
        _native.row_linear(x, w, None, out, 1, "sse9")


def test_native_kernel_runs_on_pytorchs_own_openmp_team() -> None:
    """A second thread pool beside PyTorch's OpenMP team fights it for the cores: the kernel uses the runtime
    PyTorch loaded, never one of its own, and says why where it cannot."""
    if "OpenMP" not in torch.__config__.parallel_info():
        pytest.skip("this PyTorch's threads are not OpenMP's")
    assert CL.native_threads() == ""
    assert "omp" in _native.openmp_runtime()
    assert _native.use_openmp_runtime("/nonexistent/libgomp.so.1") == "the process has not loaded this OpenMP runtime"
    assert "omp" in _native.openmp_runtime()  # a refused path leaves the runtime in use as it was


def test_native_plan_swaps_layers_and_falls_back_where_it_cannot_serve() -> None:
    lin, swapped = packed_layer(kind=CL.NATIVE)
    assert isinstance(swapped, CL.DispatchLinear) and swapped.native is not None and swapped.packed is None
    x = torch.randn(5, 48)
    with torch.no_grad():
        torch.testing.assert_close(swapped(x), F.linear(x, lin.weight, lin.bias), rtol=1e-5, atol=1e-5)
        wide = torch.randn(CL.NATIVE_MAX_ROWS + 1, 48)  # past the kernel's rows: PyTorch's own, exactly
        assert swapped.plan.kernel(wide.shape[0]) == CL.STOCK
        assert torch.equal(swapped(wide), F.linear(wide, lin.weight, lin.bias))
        lin.weight.mul_(2.0)  # changed in place: the weight itself, never a stale view
        assert torch.equal(swapped(x), F.linear(x, lin.weight, lin.bias))
        lin.weight.data = torch.randn(lin.weight.shape)  # a new storage: the weight itself, never the old one
        assert torch.equal(swapped(x), F.linear(x, lin.weight, lin.bias))
    half = C.tiny_target("qwen3", vocab=97, hidden=32).half()
    with pytest.raises(ValueError, match="cpu_linear=native: the native kernel reads contiguous float32 or "
                                         "bfloat16 weights on the CPU, not float16 on cpu"):
        CL.use_cpu_linears(half, CL.NATIVE)
