"""The fast path (``TargetModel.use_static_cache``): a static KV cache written in place, trees padded to
power-of-two sizes, forwards through ``torch.compile``. In float32 it must reproduce the eager dynamic-cache path:
the same logits (to float noise) and the same greedy tokens."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from test_generate import drafters, make_target, prompts, reference
from test_target import TOL, deep_path, get_target, random_tree
from test_target import reference as full_forward

from dart_core.drafters.dart import DartSettings
from dart_core.drafters.eagle3 import Eagle3Settings
from dart_core.engine.loop import generate
from dart_core.engine.target import TargetModel
from dart_core.engine.tree import DraftTree


def static_target(family: str, capacity: int = 128, *, padded: bool = False,
                  monkeypatch: pytest.MonkeyPatch | None = None) -> TargetModel:
    """A second TargetModel on the shared tiny model with a static cache; ``padded``: the compiled path's tree
    padding, with ``torch.compile`` replaced by the identity (the padding's exactness, without compile time)."""
    t = TargetModel(get_target(family).model)
    if padded:
        assert monkeypatch is not None
        monkeypatch.setattr(torch, "compile", lambda fn, **kw: fn)
    t.use_static_cache(capacity, compile=padded)
    return t


@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("family", ["qwen3", "llama"])
def test_static_cache_verify_commit_continue_match_full_forwards(family: str, padded: bool,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    t = static_target(family, padded=padded, monkeypatch=monkeypatch)
    rng = np.random.default_rng(11)
    seq = rng.integers(0, 97, 7).tolist()
    st = t.new_state()
    t.prefill(st, torch.tensor([seq]))
    root = int(rng.integers(0, 97))
    for step in range(5):
        tree = random_tree(rng, root=root, n_min=5, n_max=13)  # padded to 8 or 16 rows on the padded path
        logits, feats = t.verify(st, tree)
        assert logits.shape[0] == feats.shape[0] == tree.size  # padding rows are not returned
        path = deep_path(rng, tree, min_len=2)
        toks = seq + [int(tree.tokens[j]) for j in path]
        ref_l, ref_f = full_forward(t, toks)
        torch.testing.assert_close(logits[path], ref_l[-len(path):], atol=TOL, rtol=0)
        torch.testing.assert_close(feats[path], ref_f[-len(path):], atol=TOL, rtol=0)
        t.commit(st, path)
        seq = toks
        assert st.length == len(seq) == int(st.cache.layers[0].cumulative_length)
        if step % 2:  # an AR step after compaction, and a verify that is never committed
            t.verify(st, DraftTree(np.array([3, 4]), np.array([-1, 0])))
            last, _ = t.forward_tokens(st, [5])
            seq = [*seq, 5]
            torch.testing.assert_close(last, full_forward(t, seq)[0][-1], atol=TOL, rtol=0)
        root = int(rng.integers(0, 97))


def test_static_cache_limits_the_context_to_its_capacity() -> None:
    t = static_target("qwen3", capacity=24)
    assert t.max_context == 24
    with pytest.raises(ValueError, match="exceeds the target's context of 24"):
        t.prefill(t.new_state(), torch.tensor([list(range(30))]))
    out, steps = generate(t, list(range(10)), None, max_new_tokens=50)
    assert len(out) == 14 and steps[-1].stop_reason == "context"
    with pytest.raises(ValueError, match="capacity must be at least 2"):
        t.use_static_cache(1)


@pytest.mark.parametrize("padded", [False, True])
def test_static_cache_decoding_is_lossless(tmp_path: Path, padded: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    model = make_target("qwen3")
    fast = TargetModel(model)
    if padded:
        monkeypatch.setattr(torch, "compile", lambda fn, **kw: fn)
    fast.use_static_cache(160, compile=padded)
    rigged = drafters(tmp_path, model, oracle=True)
    settings = {"dart": DartSettings(top_k=6, max_nodes=30),
                "eagle3": Eagle3Settings(total_tokens=30, depth=6, top_k=3)}
    deepest = 0
    for i, prompt in enumerate(prompts(seed=5)[:6]):
        truth = reference(model, prompt, 60)
        want = truth[:48]
        assert generate(fast, prompt, None, max_new_tokens=48)[0] == want
        for kind, drafter in rigged.items():
            drafter.setup(prompt, truth, agree=0.85, seed=i)
            got, steps = generate(fast, prompt, drafter, max_new_tokens=48, settings=settings[kind])
            assert got == want, f"{kind} on the static cache differs on prompt {i}"
            deepest = max(deepest, *(s.accepted for s in steps))
    assert deepest >= 4  # deep paths committed: the in-place compaction was exercised


def test_compiled_fast_path_equals_the_eager_path(tmp_path: Path) -> None:
    """The real ``torch.compile`` (inductor on the CPU): same greedy tokens and top-2 logits as the eager path."""
    model = make_target("qwen3")
    eager, fast = TargetModel(model), TargetModel(model)
    fast.use_static_cache(96, compile=True)
    dart = drafters(tmp_path, model, oracle=False)["dart"]
    settings = DartSettings(top_k=4, max_nodes=6)  # trees of up to 7 nodes: padded to 1, 2, 4 or 8 rows
    for prompt in prompts(seed=9)[:2]:
        for drafter, tree in ((None, None), (dart, settings)):
            want, ref_steps = generate(eager, prompt, drafter, max_new_tokens=12, settings=tree)
            got, steps = generate(fast, prompt, drafter, max_new_tokens=12, settings=tree)
            assert got == want
            ref_top = np.array([t[1] for s in ref_steps for t in s.top_logits])
            top = np.array([t[1] for s in steps for t in s.top_logits])
            np.testing.assert_allclose(top, ref_top, atol=1e-4, rtol=0)
