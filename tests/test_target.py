"""TargetModel on tiny random stock HF models (CPU, fp32): tree verify and KV compaction must reproduce plain
sequential forwards exactly (up to float noise)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen3Config, Qwen3MoeConfig  # noqa: E402

from dart_core.engine.hf_config import feature_layer_ids  # noqa: E402
from dart_core.engine.target import TargetModel  # noqa: E402
from dart_core.engine.tree import DraftTree  # noqa: E402

V = 97
COMMON = dict(
    vocab_size=V,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=8,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=256,
)
TOL = 2e-5


def make_config(family: str, **over):
    kw = {**COMMON, **over}
    if family == "qwen3":
        return Qwen3Config(**kw)
    if family == "llama":
        return LlamaConfig(**kw)
    if family == "qwen3_moe":
        return Qwen3MoeConfig(
            **kw, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, decoder_sparse_step=1
        )
    raise AssertionError(family)


_MODELS: dict[tuple[str, str], TargetModel] = {}


def get_target(family: str, attn: str = "sdpa") -> TargetModel:
    key = (family, attn)
    if key not in _MODELS:
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(make_config(family), attn_implementation=attn)
        _MODELS[key] = TargetModel(model.float())
    return _MODELS[key]


def reference(target: TargetModel, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Plain full forward from scratch: logits [n, V] and features [n, 3H]."""
    with torch.no_grad():
        out = target.model(torch.tensor([ids]), output_hidden_states=True, use_cache=False)
    feats = torch.cat([out.hidden_states[i][0] for i in target.feature_layers], dim=-1)
    return out.logits[0].float(), feats


def random_tree(rng: np.random.Generator, root: int, n_min: int = 10, n_max: int = 30, max_depth: int = 6) -> DraftTree:
    n = int(rng.integers(n_min, n_max + 1))
    tokens, parents, depths = [root], [-1], [0]
    while len(tokens) < n:
        p = int(rng.integers(0, len(tokens)))
        if depths[p] >= max_depth:
            continue
        tokens.append(int(rng.integers(0, V)))
        parents.append(p)
        depths.append(depths[p] + 1)
    return DraftTree(np.array(tokens), np.array(parents))


def deep_path(rng: np.random.Generator, tree: DraftTree, min_len: int = 4) -> list[int]:
    paths = tree.paths()
    long = [p for p in paths if len(p) >= min_len]
    pool = long or paths
    return pool[int(rng.integers(0, len(pool)))]


# ------------------------------------------------------------------ feature layers
def test_feature_layer_ids_default_and_override():
    cfg = make_config("qwen3")
    assert feature_layer_ids(cfg) == (2, 4, 5)
    # decoder-layer output ids → hidden_states index + 1
    assert feature_layer_ids(cfg, [1, 3, 6]) == (2, 4, 7)
    cfg_e = make_config("llama")
    cfg_e.eagle_config = {"eagle_aux_hidden_state_layer_ids": [0, 2, 5]}
    assert feature_layer_ids(cfg_e) == (1, 3, 6)
    assert TargetModel(AutoModelForCausalLM.from_config(cfg), feature_layers=[1, 3, 6]).feature_layers == (2, 4, 7)
    big = make_config("qwen3", num_hidden_layers=28)
    assert feature_layer_ids(big) == (2, 14, 25)


def test_feature_layer_ids_rejected():
    with pytest.raises(ValueError, match="not distinct"):
        feature_layer_ids(make_config("qwen3", num_hidden_layers=4))  # (2, 2, 1)
    with pytest.raises(ValueError, match="not distinct"):
        feature_layer_ids(make_config("qwen3"), [3, 3, 5])
    with pytest.raises(ValueError, match=r"out of range.*\[0, 7\]"):
        feature_layer_ids(make_config("qwen3"), [1, 3, 8])
    with pytest.raises(ValueError, match="3 auxiliary"):
        feature_layer_ids(make_config("qwen3"), [1, 3])


# ------------------------------------------------------------------ prefill
@pytest.mark.parametrize("family", ["qwen3", "llama", "qwen3_moe"])
def test_prefill_matches_full_forward(family):
    t = get_target(family)
    ids = torch.randint(0, V, (1, 13), generator=torch.Generator().manual_seed(1))
    st = t.new_state()
    logits, feats = t.prefill(st, ids)
    ref_l, ref_f = reference(t, ids[0].tolist())
    assert logits.shape == (V,) and logits.dtype == torch.float32
    assert feats.shape == (13, 3 * t.hidden_size) == (13, t.feature_size)
    assert st.length == 13
    torch.testing.assert_close(logits, ref_l[-1], atol=1e-5, rtol=0)
    torch.testing.assert_close(feats, ref_f, atol=1e-5, rtol=0)


def test_properties():
    t = get_target("qwen3")
    assert t.vocab_size == V and t.hidden_size == 32 and t.max_context == 256
    assert t.device.type == "cpu" and t.dtype == torch.float32 and t.feature_device.type == "cpu"
    assert t.embed_tokens.weight.shape == (V, 32)
    assert not t.model.training


# ------------------------------------------------------------------ verify
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("family", ["qwen3", "llama", "qwen3_moe"])
def test_verify_matches_sequential(family, attn):
    t = get_target(family, attn)
    rng = np.random.default_rng([len(family), len(attn), ord(family[0])])
    for _ in range(2):
        prompt = rng.integers(0, V, int(rng.integers(3, 12))).tolist()
        st = t.new_state()
        t.prefill(st, torch.tensor([prompt]))
        tree = random_tree(rng, root=int(rng.integers(0, V)))
        logits, feats = t.verify(st, tree)
        assert logits.shape == (tree.size, V) and feats.shape == (tree.size, t.feature_size)
        assert st.cache.get_seq_length() == len(prompt) + tree.size and st.length == len(prompt)
        for path in tree.paths():
            toks = prompt + [int(tree.tokens[j]) for j in path]
            ref_l, ref_f = reference(t, toks)
            n = len(path)
            torch.testing.assert_close(logits[path], ref_l[-n:], atol=TOL, rtol=0)
            torch.testing.assert_close(feats[path], ref_f[-n:], atol=TOL, rtol=0)


@pytest.mark.parametrize("family", ["qwen3", "llama", "qwen3_moe"])
def test_chain_verify_without_a_mask_matches_the_masked_tree(family):
    """A chain is verified with the model's own causal attention (no 4-D mask); its rows equal the same chain's
    rows inside a tree (masked: a sibling leaf makes it one) and a sequential forward."""
    t = get_target(family)
    rng = np.random.default_rng(11)
    prompt = rng.integers(0, V, 7).tolist()
    chain = rng.integers(0, V, 6).tolist()
    with_leaf = DraftTree(np.array([*chain, 5]), np.array([-1, 0, 1, 2, 3, 4, 2]))
    out = {}
    for name, tree in (("chain", DraftTree(np.array(chain), np.arange(-1, 5))), ("tree", with_leaf)):
        st = t.new_state()
        t.prefill(st, torch.tensor([prompt]))
        out[name] = t.verify(st, tree)
    ref_l, ref_f = reference(t, prompt + chain)
    torch.testing.assert_close(out["chain"][0], out["tree"][0][:6], atol=TOL, rtol=0)
    torch.testing.assert_close(out["chain"][0], ref_l[-6:], atol=TOL, rtol=0)
    torch.testing.assert_close(out["chain"][1], ref_f[-6:], atol=TOL, rtol=0)


# ------------------------------------------------------------------ commit
@pytest.mark.parametrize("family", ["qwen3", "llama", "qwen3_moe"])
def test_commit_then_continue_matches_from_scratch(family):
    t = get_target(family)
    rng = np.random.default_rng(7)
    seq = rng.integers(0, V, 6).tolist()
    st = t.new_state()
    t.prefill(st, torch.tensor([seq]))
    root = int(rng.integers(0, V))
    for step in range(5):
        tree = random_tree(rng, root=root)
        logits, _ = t.verify(st, tree)
        # the tree's logits must agree with a from-scratch forward (checks all earlier compactions)
        path = deep_path(rng, tree)
        toks = seq + [int(tree.tokens[j]) for j in path]
        ref_l, ref_f = reference(t, toks)
        torch.testing.assert_close(logits[path], ref_l[-len(path) :], atol=TOL, rtol=0)
        t.commit(st, path)
        seq = toks
        assert st.length == len(seq) == st.cache.get_seq_length()
        if step % 2:
            # plain AR step after compaction: feed a bonus token and one more
            extra = rng.integers(0, V, 2).tolist()
            last, feats = t.forward_tokens(st, torch.tensor([extra]))
            seq = seq + extra
            ref_l, ref_f = reference(t, seq)
            torch.testing.assert_close(last, ref_l[-1], atol=TOL, rtol=0)
            torch.testing.assert_close(feats, ref_f[-2:], atol=TOL, rtol=0)
        root = int(rng.integers(0, V))  # the bonus token becomes the next root


def test_two_states_alternate_without_interference():
    t = get_target("qwen3")
    rng = np.random.default_rng(3)
    seqs = [rng.integers(0, V, 5).tolist(), rng.integers(0, V, 9).tolist()]
    states = [t.new_state(), t.new_state()]
    for s, st in zip(seqs, states, strict=True):
        t.prefill(st, torch.tensor([s]))
    for _ in range(3):
        for k in range(2):
            tree = random_tree(rng, root=int(rng.integers(0, V)))
            logits, _ = t.verify(states[k], tree)
            path = deep_path(rng, tree)
            toks = seqs[k] + [int(tree.tokens[j]) for j in path]
            ref_l, _ = reference(t, toks)
            torch.testing.assert_close(logits[path], ref_l[-len(path) :], atol=TOL, rtol=0)
            t.commit(states[k], path)
            seqs[k] = toks
    for k in range(2):
        last, _ = t.forward_tokens(states[k], [5])
        ref_l, _ = reference(t, [*seqs[k], 5])
        torch.testing.assert_close(last, ref_l[-1], atol=TOL, rtol=0)


def test_uncommitted_tree_is_discarded():
    t = get_target("llama")
    st = t.new_state()
    t.prefill(st, torch.tensor([[1, 2, 3]]))
    tree = DraftTree(np.array([4, 5, 6]), np.array([-1, 0, 1]))
    t.verify(st, tree)
    last, _ = t.forward_tokens(st, [7])  # verify without commit: tree rows dropped
    torch.testing.assert_close(last, reference(t, [1, 2, 3, 7])[0][-1], atol=TOL, rtol=0)
    t.verify(st, tree)
    t.commit(st, [0, 1, 2])  # the identity path needs no copy
    last, _ = t.forward_tokens(st, [8])
    torch.testing.assert_close(last, reference(t, [1, 2, 3, 7, 4, 5, 6, 8])[0][-1], atol=TOL, rtol=0)


# ------------------------------------------------------------------ errors
def test_errors():
    t = get_target("qwen3")
    st = t.new_state()
    with pytest.raises(ValueError, match="empty"):
        t.prefill(st, torch.zeros((1, 0), dtype=torch.long))
    with pytest.raises(ValueError, match="exceeds the target's context of 256"):
        t.prefill(st, torch.zeros((1, 257), dtype=torch.long))
    with pytest.raises(ValueError, match="empty; call prefill"):
        t.verify(st, DraftTree(np.array([1]), np.array([-1])))
    t.prefill(st, torch.zeros((1, 250), dtype=torch.long))
    deep = DraftTree(np.arange(7), np.arange(-1, 6))  # depth 6: positions 250..256
    with pytest.raises(ValueError, match="past the target's context of 256"):
        t.verify(st, deep)
    with pytest.raises(ValueError, match="no verified tree"):
        t.commit(st, [0])
    t.verify(st, DraftTree(np.array([1, 2, 3]), np.array([-1, 0, 0])))
    with pytest.raises(ValueError, match="not a root-to-node path"):
        t.commit(st, [0, 1, 2])
    with pytest.raises(ValueError, match="start at the root"):
        t.commit(st, [1])
    with pytest.raises(ValueError, match="exceed the target's context"):
        t.forward_tokens(st, list(range(7)))
    with pytest.raises(ValueError, match="already holds tokens"):
        t.prefill(st, torch.tensor([[1]]))


def test_prefill_chunks_cover_the_prompt_with_bounded_work() -> None:
    from dart_core.engine.target import PREFILL_CHUNK, PREFILL_MIN_CHUNK, PREFILL_WORK, prefill_chunks

    for n in (1, 31, 512, 513, 1000, 6492, 32768):
        chunks = prefill_chunks(n)
        assert chunks[0][0] == 0 and chunks[-1][1] == n
        assert all(a[1] == b[0] for a, b in itertools.pairwise(chunks))
        for start, end in chunks[:-1]:  # the last one may be shorter: what is left
            rows = end - start
            assert PREFILL_MIN_CHUNK <= rows <= PREFILL_CHUNK
            assert rows * (start + rows) <= PREFILL_WORK or rows == PREFILL_MIN_CHUNK
    assert prefill_chunks(6492)[-2][1] - prefill_chunks(6492)[-2][0] < 100  # late chunks are small


@pytest.mark.parametrize("family", ["qwen3", "llama"])
def test_an_interruptible_prefill_matches_the_one_forward_prefill(family: str, monkeypatch: pytest.MonkeyPatch
                                                                  ) -> None:
    """Chunked (small chunks here, to have several) and one-forward prefills agree to float32 rounding, logits and
    features; an interrupt between two chunks raises Interrupted and leaves the committed rows consistent."""
    from dart_core.engine import target as target_module
    from dart_core.engine.target import Interrupted

    monkeypatch.setattr(target_module, "PREFILL_CHUNK", 16)
    monkeypatch.setattr(target_module, "PREFILL_MIN_CHUNK", 4)
    monkeypatch.setattr(target_module, "PREFILL_WORK", 16 * 32)
    target = get_target(family)
    ids = torch.randint(0, V, (1, 100), generator=torch.Generator().manual_seed(3))
    whole_logits, whole_feats = target.prefill(target.new_state(), ids)
    asked: list[int] = []
    state = target.new_state()
    logits, feats = target.prefill(state, ids, interrupt=lambda: bool(asked.append(1)))
    assert len(asked) == len(target_module.prefill_chunks(100)) - 1 >= 5
    assert state.length == 100 and state.cache.get_seq_length() == 100
    torch.testing.assert_close(logits, whole_logits, atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(feats, whole_feats, atol=2e-5, rtol=1e-5)
    cut = target.new_state()
    calls = iter([False, False, True])
    with pytest.raises(Interrupted, match=r"after 4\d of 100 prompt tokens"):
        target.prefill(cut, ids, interrupt=lambda: next(calls))
    assert cut.cache.get_seq_length() == cut.length < 100


def test_an_interruptible_prefill_of_several_streams_matches_each_stream_alone(monkeypatch: pytest.MonkeyPatch
                                                                               ) -> None:
    """Three prompts of different lengths (one ending inside the first chunk, one on a chunk's edge, the longest
    spanning every chunk) prefilled together in chunks: each row's last logits and every prompt row's features are
    that prompt's own one-stream prefill's; an interrupt raises Interrupted between two chunks, every row's
    committed length then within what the chunks before it wrote."""
    from dart_core.engine import target as target_module
    from dart_core.engine.target import Interrupted

    monkeypatch.setattr(target_module, "PREFILL_CHUNK", 16)
    monkeypatch.setattr(target_module, "PREFILL_MIN_CHUNK", 4)
    monkeypatch.setattr(target_module, "PREFILL_WORK", 16 * 32)
    target = get_target("qwen3")
    g = torch.Generator().manual_seed(5)
    edge = target_module.prefill_chunks(90)[1][1]
    prompts = [torch.randint(0, V, (n,), generator=g).tolist() for n in (9, 90, edge)]
    state = target.new_state(3)
    asked: list[int] = []
    logits, feats = target.prefill_rows(state, prompts, interrupt=lambda: bool(asked.append(1)))
    assert len(asked) == len(target_module.prefill_chunks(90)) - 1 >= 4
    assert state.lengths == [9, 90, edge] and state.width == 90 == state.cache.get_seq_length()
    for b, p in enumerate(prompts):
        want_logits, want_feats = target.prefill(target.new_state(), [p])
        torch.testing.assert_close(logits[b], want_logits, atol=2e-5, rtol=1e-5, msg=lambda m, b=b: f"row {b}: {m}")
        torch.testing.assert_close(feats[b], want_feats, atol=2e-5, rtol=1e-5, msg=lambda m, b=b: f"row {b}: {m}")
    cut = target.new_state(3)
    calls = iter([False, True])
    with pytest.raises(Interrupted, match=r"after \d+ of 90 prompt tokens"):
        target.prefill_rows(cut, prompts, interrupt=lambda: next(calls))
    written = cut.cache.get_seq_length()
    assert cut.width == written < 90 and cut.lengths == [min(len(p), written) for p in prompts]
