"""The tie-aware greedy check: a flip between the target's best candidates within the dtype's rounding is a tie,
anything else a mismatch; and every greedy step records the best logits the check reads."""

from __future__ import annotations

import pytest
import torch
from test_generate import make_target, prompts

from dart_core.engine.acceptance import SamplingConfig
from dart_core.engine.greedy_check import RECORDED, TIE_ULPS, compare, tie_bound, top_logits_of, ulp
from dart_core.engine.loop import generate
from dart_core.engine.target import TargetModel

AR = [5, 7, 9, 11]
SURE = ((5, 1, 2, 3), (9.0, 1.0, 0.5, 0.0))  # a record where token 5 wins by far


def test_the_bound_is_a_few_units_in_the_last_place() -> None:
    assert ulp(torch.bfloat16, 20.0) == 0.125 and ulp(torch.bfloat16, -3.0) == 2 ** -6
    assert tie_bound(torch.bfloat16, 20.0) == TIE_ULPS * 0.125
    assert tie_bound(torch.float32, 20.0) < 1e-5  # float32 reports no ties in practice
    assert ulp(torch.float16, 0.01) == torch.finfo(torch.float16).eps  # small logits: at least eps


def test_identical_runs() -> None:
    top = [((t, 0, 1, 2), (1.0, 0.0, 0.0, 0.0)) for t in AR]
    assert compare(AR, top, AR, top, torch.bfloat16).kind == "identical"


def test_a_near_tie_is_a_tie() -> None:
    ref = [SURE, ((7, 8, 3, 4), (20.0, 19.875, 18.0, 17.0)), SURE]  # AR: 7 over 8 by one bf16 ulp at 20
    mine = [SURE, ((8, 7, 3, 4), (20.0, 19.875, 18.0, 17.0)), SURE]  # the racer's tree forward: 8 over 7
    verdict = compare(AR[:3], ref, [5, 8, 4], mine, torch.bfloat16)
    assert (verdict.kind, verdict.position, verdict.gaps) == ("tie", 1, (0.125, 0.125))
    assert verdict.ok and verdict.describe(torch.bfloat16) == "identical up to a bfloat16 tie at token 1"


def test_exact_multi_way_ties_in_any_order_are_ties() -> None:
    """On a coarse bf16 grid three tokens can share the best logit; argmax and topk may list them differently."""
    ref = [SURE, ((8, 3, 7, 4), (20.0, 20.0, 20.0, 17.0))]  # AR emitted 7, listed third
    mine = [SURE, ((3, 8, 7, 4), (20.125, 20.0, 20.0, 17.0))]  # the racer emitted 3
    assert compare(AR[:2], ref, [5, 3], mine, torch.bfloat16).kind == "tie"


def test_a_five_way_tie_is_recorded_whole_and_called_a_tie() -> None:
    """The case met on MT-bench in bf16 (SmolLM2, ulp 0.125 at 25): AR saw achieve / address / both at 25.0 and
    emitted "both"; the racer's tree forward saw address, achieve 25.25, resolve 25.125, navigate 25.0, both 24.875 and
    emitted "address". "both" is the racer's fifth best: a record of four called this exact tie a mismatch."""
    vocab = 64
    ar_logits, racer_logits = torch.full((vocab,), 10.0), torch.full((vocab,), 10.0)
    achieve, address, both, find, resolve, navigate = 11, 12, 13, 14, 15, 16
    ar_logits[[achieve, address, both, find]] = torch.tensor([25.0, 25.0, 25.0, 24.875])
    racer_logits[[address, achieve, resolve, navigate, both]] = torch.tensor([25.25, 25.25, 25.125, 25.0, 24.875])
    ar_top = top_logits_of(ar_logits[None].to(torch.bfloat16).float())
    racer_top = top_logits_of(racer_logits[None].to(torch.bfloat16).float())
    assert both in racer_top[0][0]  # recorded, though four tokens lie at or above it
    verdict = compare([5, both], [SURE, *ar_top], [5, address], [SURE, *racer_top], torch.bfloat16)
    assert (verdict.kind, verdict.position) == ("tie", 1) and verdict.gaps == (0.0, 0.375)


@pytest.mark.parametrize(("ref1", "mine1", "dtype", "why"), [
    (((7, 8, 3, 4), (20.0, 19.0, 1.0, 0.0)), ((8, 7, 3, 4), (20.0, 19.875, 1.0, 0.0)), torch.bfloat16,
     "AR's gap is 8 ulps"),
    (((7, 8, 3, 4), (20.0, 19.875, 1.0, 0.0)), ((8, 7, 3, 4), (20.0, 19.875, 1.0, 0.0)), torch.float32,
     "the same gap is far beyond float32's rounding"),
    (((7, 3, 2, 4), (20.0, 19.875, 1.0, 0.0)), ((8, 7, 3, 4), (20.0, 19.875, 1.0, 0.0)), torch.bfloat16,
     "the racer's token is not among AR's best"),
    (((7, 8, 3, 4), (20.0, 19.875, 1.0, 0.0)), ((8, 3, 2, 4), (20.0, 19.875, 1.0, 0.0)), torch.bfloat16,
     "AR's token is not among the racer's best"),
])
def test_a_real_divergence_is_a_mismatch(ref1: tuple, mine1: tuple, dtype: torch.dtype, why: str) -> None:
    verdict = compare(AR[:2], [SURE, ref1], [5, 8], [SURE, mine1], dtype)
    assert (verdict.kind, verdict.position) == ("mismatch", 1), why
    assert not verdict.ok and verdict.describe() == "differs from AR at token 1"


def test_a_run_that_stops_early_or_has_no_record_is_a_mismatch() -> None:
    top = [((t, 0, 1, 2), (1.0, 0.0, 0.0, 0.0)) for t in AR]
    assert compare(AR, top, AR[:2], top[:2], torch.bfloat16).kind == "mismatch"
    assert compare(AR, top, [5, 8, 9, 11], [], torch.bfloat16).kind == "mismatch"


def test_greedy_steps_record_the_targets_best_logits() -> None:
    model = make_target("qwen3")
    target = TargetModel(model)
    prompt = prompts(seed=3)[0]
    tokens, steps = generate(target, prompt, None, max_new_tokens=6)
    top = [t for s in steps for t in s.top_logits]
    with torch.no_grad():
        logits = model(torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1 : -1].float()
    want = top_logits_of(logits)
    assert [ids for ids, _ in top] == [ids for ids, _ in want] and len(top[0][0]) == RECORDED
    assert [ids[0] for ids, _ in top] == tokens
    for (_, got), (_, ref) in zip(top, want, strict=True):
        assert got == pytest.approx(ref, abs=1e-4)
    sampled = generate(target, prompt, None, max_new_tokens=3, sampling=SamplingConfig(temperature=1.0))[1]
    assert all(s.top_logits == [] for s in sampled)  # sampling: no greedy check, nothing recorded
