"""The CPU linear kernels chosen per row count (dart_core.engine.cpu_linear): the oneDNN path computes what
``F.linear`` computes, falls back to it wherever its packed copy cannot serve, keeps tied weights tied, and the
plan's choices follow its own timings; bad modes are refused by name."""

from __future__ import annotations

import helpers_ckpt as C
import pytest
import torch
import torch.nn.functional as F

from dart_core.engine import cpu_linear as CL
from dart_core.engine.loop import generate
from dart_core.engine.target import TargetModel

pytestmark = pytest.mark.skipif(not CL.onednn_available(), reason="this PyTorch build has no oneDNN prepacked linear")


def packed_layer(bias: bool = True, kind: str = CL.ONEDNN) -> tuple[torch.nn.Linear, CL.DispatchLinear]:
    torch.manual_seed(0)
    lin = torch.nn.Linear(48, 40, bias=bias).requires_grad_(False)
    holder = torch.nn.Sequential(lin)
    CL.use_cpu_linears(holder, plan=CL.CpuLinearPlan(kind, kind))
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
    swapped.plan = CL.CpuLinearPlan(one_row=CL.STOCK, many_rows=CL.ONEDNN)
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
    assert plan.one_row == plan.many_rows == CL.ONEDNN and len(swapped) == n_linears
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert isinstance(model.lm_head, CL.DispatchLinear)
    back = CL.use_cpu_linears(model, CL.STOCK)  # turned back: every swapped layer dispatches to F.linear
    assert back.one_row == back.many_rows == CL.STOCK
    assert all(m.packed is None for m in model.modules() if isinstance(m, CL.DispatchLinear))


def test_auto_plan_follows_its_own_timings() -> None:
    model = C.tiny_target("qwen3", vocab=97, hidden=32).float()
    plan = CL.plan_cpu_linears(model, "auto", repeats=1)
    assert plan.reason == "measured" and plan.threads == torch.get_num_threads()
    for rows, chosen in ((1, plan.one_row), (CL.MANY_ROWS, plan.many_rows)):
        stock, onednn = plan.timings[CL.STOCK][rows], plan.timings[CL.ONEDNN][rows]
        assert stock > 0 and onednn > 0
        assert chosen == (CL.ONEDNN if onednn < CL.MARGIN * stock else CL.STOCK)
    assert f"1 row {plan.one_row}" in plan.describe()


def test_bad_modes_and_unsuitable_models_are_refused_by_name() -> None:
    model = C.tiny_target("qwen3", vocab=97, hidden=32)
    with pytest.raises(ValueError, match="cpu_linear must be one of auto, stock, onednn, got 'fast'"):
        CL.use_cpu_linears(model, "fast")
    half = C.tiny_target("qwen3", vocab=97, hidden=32).half()
    with pytest.raises(ValueError, match="float32 or bfloat16, not float16"):
        CL.use_cpu_linears(half, CL.ONEDNN)
    plan = CL.use_cpu_linears(half, "auto")  # auto: stock, and the reason why
    assert plan.one_row == plan.many_rows == CL.STOCK and "float16" in plan.reason
    assert not any(isinstance(m, CL.DispatchLinear) for m in half.modules())


def test_speculative_output_equals_greedy_on_onednn_kernels(tmp_path) -> None:
    """The central property on the oneDNN kernels: DART and EAGLE-3 drafts verified by the packed target give its
    own greedy output, token for token (the target's M-row and one-row products both on oneDNN)."""
    from dart_core.drafters.dart import DartDrafter
    from dart_core.drafters.eagle3 import Eagle3Drafter, Eagle3Settings

    model = C.tiny_target("qwen3", vocab=97, hidden=32).float()
    CL.use_cpu_linears(model, CL.ONEDNN)
    target = TargetModel(model)
    drafters = {}
    for kind, cls in (("dart", DartDrafter), ("eagle3", Eagle3Drafter)):
        cfg = C.drafter_config(kind, vocab=97, hidden=32, draft_vocab=48, draft_length=6)
        path = C.write_drafter(tmp_path / kind, cfg, C.random_drafter_state(cfg, kind=kind, seed=7))
        drafters[kind] = cls.from_pretrained(path, target=model)
        assert CL.use_cpu_linears(drafters[kind], CL.ONEDNN).uses_onednn
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
    assert plan.one_row == plan.many_rows == CL.STOCK and "RAM" in plan.reason
    assert not any(isinstance(m, CL.DispatchLinear) for m in model.modules())
    monkeypatch.setattr(CL, "available_ram", lambda: 3 * need)
    assert CL.use_cpu_linears(model, CL.ONEDNN).uses_onednn
