"""HF ``generate`` as a racer: its greedy output is AR's, it streams one token per step with the engine's stop
rules, and a closed stream stops ``generate``."""

from __future__ import annotations

import threading

import pytest
import torch
from test_generate import make_target, prompts, reference

from dart_core.engine.loop import generate
from dart_core.engine.target import TargetModel
from dart_core.racers.hf_generate import stream_hf_generate


@pytest.fixture(scope="module")
def target() -> TargetModel:
    model = make_target("qwen3")
    model.generation_config.do_sample = True  # a checkpoint's own sampling defaults must not leak into the race
    model.generation_config.top_k = 5
    return TargetModel(model)


def test_greedy_output_is_ar_token_for_token(target: TargetModel) -> None:
    for prompt in prompts(seed=4)[:4]:
        steps = list(stream_hf_generate(target, prompt, max_new_tokens=20))
        tokens = [t for s in steps for t in s.tokens]
        assert tokens == generate(target, prompt, None, max_new_tokens=20)[0] == reference(target.model, prompt, 20)
        assert steps[0].prefill and not any(s.prefill for s in steps[1:])
        assert all(len(s.tokens) == 1 and s.verify_ms > 0 for s in steps)
        assert [t[0][0] for s in steps for t in s.top_logits] == tokens
        assert steps[-1].stop_reason == "max_new_tokens" and all(s.stop_reason is None for s in steps[:-1])


def test_on_the_fast_path_generate_gets_a_static_cache_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the target on the fast path, ``generate`` runs over a ``StaticCache`` of the target's rows (one fixed
    shape: on a GPU transformers compiles it once), passed by the keyword the installed transformers takes, and
    still gives AR's tokens."""

    fast = TargetModel(make_target("qwen3"))
    fast.use_static_cache(96)
    wants = [reference(fast.model, prompt, 20) for prompt in prompts(seed=4)[:2]]
    seen: list[object] = []
    real = fast.model.generate

    def spy(*args: object, **kwargs: object) -> object:
        seen.append(kwargs.get(fast.cache_arg))
        if fast.cache_arg == "cache":  # the deprecated name is not passed where the new one is taken
            assert "past_key_values" not in kwargs
        return real(*args, **kwargs)

    monkeypatch.setattr(fast.model, "generate", spy)
    for prompt, want in zip(prompts(seed=4)[:2], wants, strict=True):
        assert [t for s in stream_hf_generate(fast, prompt, max_new_tokens=20) for t in s.tokens] == want
    assert [(type(c).__name__, c.get_max_length()) for c in seen] == [("StaticCache", 96)] * 2
    assert seen[0] is seen[1]  # one cache, emptied for each generation: one shape at one address


def test_stop_rules_match_the_engine(target: TargetModel) -> None:
    prompt = prompts(seed=4)[1]
    ar = generate(target, prompt, None, max_new_tokens=20)[0]
    stop = ar[5]
    for kwargs, reason in (({"stop_token_ids": [stop]}, "eos"), ({"max_length": len(prompt) + 7}, "context")):
        want, ref_steps = generate(target, prompt, None, max_new_tokens=20, **kwargs)
        steps = list(stream_hf_generate(target, prompt, max_new_tokens=20, **kwargs))
        assert [t for s in steps for t in s.tokens] == want
        assert steps[-1].stop_reason == ref_steps[-1].stop_reason == reason


def test_closing_the_stream_stops_generate(target: TargetModel) -> None:
    before = threading.active_count()
    gen = stream_hf_generate(target, prompts(seed=4)[2], max_new_tokens=200)
    first = [next(gen) for _ in range(3)]
    gen.close()
    assert len(first) == 3 and threading.active_count() == before  # the generating thread has ended


def test_bad_input_and_failures_reach_the_caller(target: TargetModel) -> None:
    with pytest.raises(ValueError, match="prompt is empty"):
        next(stream_hf_generate(target, []))
    with pytest.raises(ValueError, match="no room to generate"):
        next(stream_hf_generate(target, [1] * 10, max_length=10))
    with pytest.raises(IndexError):  # a token outside the vocabulary: generate's own error, raised here
        list(stream_hf_generate(target, [10_000], max_new_tokens=3))
    assert torch.is_grad_enabled()
