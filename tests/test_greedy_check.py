"""The tie-aware greedy check: a flip between the target's top two within the dtype's rounding is a tie, anything
else a mismatch; and every greedy step records the top-2 the check reads."""

from __future__ import annotations

import pytest
import torch
from test_generate import make_target, prompts

from dart_core.generate import generate
from dart_core.greedy_check import TIE_ULPS, compare, tie_bound, top2_of, ulp
from dart_core.target import TargetModel
from dart_core.verify import SamplingConfig

AR = [5, 7, 9, 11]


def test_the_bound_is_a_few_units_in_the_last_place() -> None:
    assert ulp(torch.bfloat16, 20.0) == 0.125 and ulp(torch.bfloat16, -3.0) == 2 ** -6
    assert tie_bound(torch.bfloat16, 20.0) == TIE_ULPS * 0.125
    assert tie_bound(torch.float32, 20.0) < 1e-5  # float32 reports no ties in practice
    assert ulp(torch.float16, 0.01) == torch.finfo(torch.float16).eps  # small logits: at least eps


def test_identical_runs() -> None:
    top = [(t, 1.0, 0, 0.0) for t in AR]
    assert compare(AR, top, AR, top, torch.bfloat16).kind == "identical"


def test_a_near_tie_is_a_tie() -> None:
    ref = [(5, 9.0, 1, 1.0), (7, 20.0, 8, 19.875), (9, 3.0, 2, 1.0)]  # AR: 7 over 8 by one bf16 ulp at 20
    mine = [(5, 9.0, 1, 1.0), (8, 20.0, 7, 19.875), (4, 3.0, 2, 1.0)]  # the racer's tree forward: 8 over 7
    verdict = compare(AR[:3], ref, [5, 8, 4], mine, torch.bfloat16)
    assert (verdict.kind, verdict.position, verdict.gaps) == ("tie", 1, (0.125, 0.125))
    assert verdict.ok and verdict.describe(torch.bfloat16) == "identical up to a bfloat16 tie at token 1"


@pytest.mark.parametrize(("ref1", "mine1", "dtype", "why"), [
    ((7, 20.0, 8, 19.0), (8, 20.0, 7, 19.875), torch.bfloat16, "AR's gap is 8 ulps"),
    ((7, 20.0, 8, 19.875), (8, 20.0, 7, 19.875), torch.float32, "the same gap is far beyond float32's rounding"),
    ((7, 20.0, 3, 19.875), (8, 20.0, 7, 19.875), torch.bfloat16, "the racer's token is not AR's runner-up"),
    ((7, 20.0, 8, 19.875), (8, 20.0, 3, 19.875), torch.bfloat16, "AR's token is not the racer's runner-up"),
])
def test_a_real_divergence_is_a_mismatch(ref1: tuple, mine1: tuple, dtype: torch.dtype, why: str) -> None:
    ref = [(5, 9.0, 1, 1.0), ref1]
    mine = [(5, 9.0, 1, 1.0), mine1]
    verdict = compare(AR[:2], ref, [5, 8], mine, dtype)
    assert (verdict.kind, verdict.position) == ("mismatch", 1), why
    assert not verdict.ok and verdict.describe() == "differs from AR at token 1"


def test_an_exact_tie_listed_in_either_order_is_a_tie() -> None:
    """At a gap of 0 the argmax (first index) and topk may order the two differently: still a tie."""
    ref = [(5, 9.0, 1, 1.0), (8, 20.0, 7, 20.0)]  # AR emitted 7; topk listed 8 first at the same logit
    mine = [(5, 9.0, 1, 1.0), (8, 20.125, 7, 20.0)]
    assert compare(AR[:2], ref, [5, 8], mine, torch.bfloat16).kind == "tie"


def test_a_run_that_stops_early_or_has_no_record_is_a_mismatch() -> None:
    top = [(t, 1.0, 0, 0.0) for t in AR]
    assert compare(AR, top, AR[:2], top[:2], torch.bfloat16) == compare(AR, top, AR[:2], top[:2], torch.float32)
    assert compare(AR, top, AR[:2], top[:2], torch.bfloat16).kind == "mismatch"
    assert compare(AR, top, [5, 8, 9, 11], [], torch.bfloat16).kind == "mismatch"


def test_greedy_steps_record_the_targets_top2() -> None:
    model = make_target("qwen3")
    target = TargetModel(model)
    prompt = prompts(seed=3)[0]
    tokens, steps = generate(target, prompt, None, max_new_tokens=6)
    top2 = [t for s in steps for t in s.top2]
    with torch.no_grad():
        logits = model(torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1 : -1].float()
    want = top2_of(logits)
    assert [(a, c) for a, _, c, _ in top2] == [(a, c) for a, _, c, _ in want]
    assert [a for a, *_ in top2] == tokens
    for (_, v1, _, v2), (_, w1, _, w2) in zip(top2, want, strict=True):
        assert v1 == pytest.approx(w1, abs=1e-4) and v2 == pytest.approx(w2, abs=1e-4)
    sampled = generate(target, prompt, None, max_new_tokens=3, sampling=SamplingConfig(temperature=1.0))[1]
    assert all(s.top2 == [] for s in sampled)  # sampling: no greedy check, nothing recorded
