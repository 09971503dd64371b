"""DART and EAGLE-3 drafters: loaders of the published formats (strict), the exact DART forward against a literal
cache-free reference, cached == recomputed, and EAGLE-3's tree expansion against sequential rollouts."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import helpers_ckpt as C
import numpy as np
import pytest
import torch

from dart_core.drafters.dart import DartDrafter, DartSettings
from dart_core.drafters.eagle3 import Eagle3Drafter
from dart_core.drafters.layers import KVCache, causal_mask, within_window
from dart_core.engine.drafter import DraftInput
from dart_core.loading.hub import HubFileError

V, H = 97, 32


@pytest.fixture(scope="module")
def target() -> torch.nn.Module:
    return C.tiny_qwen3(vocab=V, hidden=H)


def dart_dir(tmp: Path, *, head_dim: int | None = None, draft_vocab: int | None = 48, seed: int = 0,
             draft_length: int = 4) -> tuple[Path, dict]:
    cfg = C.drafter_config("dart", vocab=V, hidden=H, draft_vocab=draft_vocab, head_dim=head_dim,
                           draft_length=draft_length)
    state = C.random_drafter_state(cfg, kind="dart", seed=seed)
    return C.write_drafter(tmp / "dart", cfg, state), state


# ------------------------------------------------------------------ literal reference of docs/drafters.md
def rms(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rope(x: torch.Tensor, pos: torch.Tensor, theta: float = 10000.0) -> torch.Tensor:
    hd = x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd)
    ang = pos[:, None].float() * inv[None]
    cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()
    rot = torch.cat([-x[..., hd // 2 :], x[..., : hd // 2]], -1)
    return x * cos[:, None] + rot * sin[:, None]  # x: [rows, heads, hd]


def attend(sd: dict, a: torch.Tensor, pos: torch.Tensor, allowed: torch.Tensor, heads: int, kvh: int,
           hd: int) -> torch.Tensor:
    rows = a.shape[0]
    q = rope((a @ sd["midlayer.self_attn.q_proj.weight"].T).view(rows, heads, hd), pos)
    k = rope((a @ sd["midlayer.self_attn.k_proj.weight"].T).view(rows, kvh, hd), pos)
    v = (a @ sd["midlayer.self_attn.v_proj.weight"].T).view(rows, kvh, hd)
    out = torch.zeros(rows, heads, hd)
    for h in range(heads):
        kv = h // (heads // kvh)
        s = (q[:, h] @ k[:, kv].T) / math.sqrt(hd)
        s = s.masked_fill(~allowed, float("-inf"))
        out[:, h] = torch.softmax(s, -1) @ v[:, kv]
    return out.reshape(rows, heads * hd) @ sd["midlayer.self_attn.o_proj.weight"].T


def mlp(sd: dict, x: torch.Tensor) -> torch.Tensor:
    g = x @ sd["midlayer.mlp.gate_proj.weight"].T
    u = x @ sd["midlayer.mlp.up_proj.weight"].T
    return (torch.nn.functional.silu(g) * u) @ sd["midlayer.mlp.down_proj.weight"].T


def reference_dart_logits(sd: dict, cfg: dict, embed: torch.Tensor, feats: torch.Tensor,
                          ids: torch.Tensor) -> torch.Tensor:
    d, n = cfg["draft_length"], feats.shape[0]
    hd = cfg.get("head_dim") or H // 4
    x = feats @ sd["fc.weight"].T
    e = embed[ids]
    a = torch.cat([rms(e, sd["midlayer.input_layernorm.weight"]), rms(x, sd["midlayer.hidden_norm.weight"])], -1)
    a = torch.cat([a, sd["midlayer.mask_rep"].expand(d, 2 * H)])
    res = torch.cat([x, sd["midlayer.mask_rep"][:H].expand(d, H)])
    rows = n + d
    allowed = torch.tril(torch.ones(rows, rows, dtype=torch.bool))
    h = res + attend(sd, a, torch.arange(rows), allowed, 4, 2, hd)
    h = h[-(d + 1) :]
    h = h + mlp(sd, rms(h, sd["midlayer.post_attention_layernorm.weight"]))
    out = rms(rms(h, sd["norm.weight"]), sd["norm.weight"])
    return out @ sd["lm_head.weight"].T


@pytest.mark.parametrize("head_dim", [None, 16])
def test_dart_forward_matches_literal_spec(tmp_path: Path, target: torch.nn.Module, head_dim: int | None) -> None:
    path, sd = dart_dir(tmp_path, head_dim=head_dim)
    cfg = __import__("json").loads((path / "config.json").read_text())
    drafter = DartDrafter.from_pretrained(path, target=target)
    embed = target.get_input_embeddings().weight.detach()
    g = torch.Generator().manual_seed(1)
    feats = torch.randn(11, 3 * H, generator=g)
    ids = torch.randint(0, V, (11,), generator=g)
    got = drafter.draft_logits(feats, ids, drafter.new_state())
    assert got.shape == (1, cfg["draft_length"] + 1, 48)
    ref = reference_dart_logits(sd, cfg, embed, feats, ids)
    torch.testing.assert_close(got[0], ref, atol=2e-5, rtol=1e-5)


def test_dart_cached_calls_equal_cache_free_recompute(tmp_path: Path, target: torch.nn.Module) -> None:
    path, _ = dart_dir(tmp_path)
    drafter = DartDrafter.from_pretrained(path, target=target)
    g = torch.Generator().manual_seed(2)
    feats = torch.randn(20, 3 * H, generator=g)
    ids = torch.randint(0, V, (20,), generator=g)
    state = drafter.new_state()
    cuts = [0, 9, 10, 14, 20]  # a prefill, then steps of 1, 4 and 6 accepted rows
    for a, b in itertools.pairwise(cuts):
        cached = drafter.draft_logits(feats[a:b], ids[a:b], state)
        fresh = drafter.draft_logits(feats[:b], ids[:b], drafter.new_state())
        torch.testing.assert_close(cached, fresh, atol=2e-5, rtol=1e-5)
    assert state.length == 20  # mask rows never stay in the cache
    drafter.reset()
    torch.testing.assert_close(drafter.draft_logits(feats, ids), fresh, atol=2e-5, rtol=1e-5)


def test_dart_propose_maps_draft_vocab_and_builds_tree(tmp_path: Path, target: torch.nn.Module) -> None:
    path, sd = dart_dir(tmp_path)
    drafter = DartDrafter.from_pretrained(path, target=target)
    feats = torch.randn(6, 3 * H)
    ids = torch.tensor([5, 6, 7, 8, 9, 10])
    context = np.array([4, 5, 6, 7, 8, 9, 10], dtype=np.int32)
    state = drafter.new_state(DartSettings(top_k=5, max_nodes=12))
    prop = drafter.propose(state, DraftInput(feats, ids, context))
    tree = prop.tree
    assert tree.tokens[0] == 10 and tree.size == 13 and prop.draft_ms > 0
    draft_targets = set((torch.arange(48) + sd["d2t"]).tolist())
    assert set(tree.tokens[1:].tolist()) <= draft_targets  # every draft is a target id from the draft vocab
    assert max(tree.depths) <= 5


def test_dart_loads_target_embedding_from_checkpoint_dirs(tmp_path: Path, target: torch.nn.Module) -> None:
    path, _ = dart_dir(tmp_path)
    ref = DartDrafter.from_pretrained(path, target=target)
    feats, ids = torch.randn(4, 3 * H), torch.tensor([1, 2, 3, 4])
    want = ref.draft_logits(feats, ids, ref.new_state())
    for sharded in (False, True):
        tdir = C.write_target_weights(tmp_path / f"target-{sharded}", target, sharded=sharded)
        d = DartDrafter.from_pretrained(path, target=tdir)
        torch.testing.assert_close(d.draft_logits(feats, ids, d.new_state()), want)
    d = DartDrafter.from_pretrained(path, target=target.get_input_embeddings().weight.detach())
    torch.testing.assert_close(d.draft_logits(feats, ids, d.new_state()), want)


def test_dart_loader_errors(tmp_path: Path, target: torch.nn.Module) -> None:
    cfg = C.drafter_config("dart", vocab=V, hidden=H, draft_vocab=48)
    good = C.random_drafter_state(cfg, kind="dart")

    def write(name: str, state: dict, config: dict = cfg) -> Path:
        return C.write_drafter(tmp_path / name, config, state)

    missing = {k: v for k, v in good.items() if k != "midlayer.mask_rep"}
    with pytest.raises(ValueError, match=r"missing keys \['midlayer.mask_rep'\]"):
        DartDrafter.from_pretrained(write("missing", missing), target=target)
    extra = good | {"midlayer.self_attn.q_proj.bias": torch.zeros(32)}
    with pytest.raises(ValueError, match="unexpected keys"):
        DartDrafter.from_pretrained(write("extra", extra), target=target)
    wrong = good | {"fc.weight": torch.zeros(H, 2 * H)}
    with pytest.raises(ValueError, match=r"fc.weight: \(32, 64\) != expected \(32, 96\)"):
        DartDrafter.from_pretrained(write("wrong", wrong), target=target)
    bad_d2t = good | {"d2t": torch.full((48,), 1000)}
    with pytest.raises(ValueError, match="d2t maps draft ids outside"):
        DartDrafter.from_pretrained(write("d2t", bad_d2t), target=target)
    other_target = C.tiny_qwen3(vocab=V, hidden=48)
    with pytest.raises(ValueError, match=r"token embedding has shape"):
        DartDrafter.from_pretrained(write("ok", good), target=other_target)
    with pytest.raises(ValueError, match="draft_length"):
        DartDrafter.from_pretrained(write("nolen", good, {k: v for k, v in cfg.items() if k != "draft_length"}),
                                    target=target)
    with pytest.raises(HubFileError, match=r"model\.safetensors"):
        DartDrafter.from_pretrained(C.write_drafter(tmp_path / "bin", cfg, good, fmt="bin"), target=target)
    with pytest.raises(HubFileError, match="does not exist"):
        DartDrafter.from_pretrained(tmp_path / "nowhere", target=target)
    drafter = DartDrafter.from_pretrained(tmp_path / "ok", target=target)
    with pytest.raises(ValueError, match="features must be"):
        drafter.draft_logits(torch.zeros(3, 2 * H), torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="shifted_ids must be"):
        drafter.draft_logits(torch.zeros(3, 3 * H), torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="outside"):
        drafter.draft_logits(torch.zeros(2, 3 * H), torch.tensor([1, V]))


# ------------------------------------------------------------------------------------------------ context window
def test_within_window_cuts_each_rows_real_context_to_the_window() -> None:
    # three new real rows at positions 3, 4, 5 after 3 past rows, then one scratch row anchored at the last real row
    mask = within_window(causal_mask(3, 4, "cpu"), torch.tensor([3, 4, 5, 5]), real_end=6, window=2)
    allowed = [set(torch.nonzero(row).flatten().tolist()) for row in mask]
    assert allowed == [{2, 3}, {3, 4}, {4, 5}, {4, 5, 6}]
    assert torch.equal(within_window(mask, torch.tensor([3, 4, 5, 5]), 6, None), mask)


def windowed_dir(tmp: Path, kind: str, window: int | None) -> Path:
    extra = {} if window is None else {"context_window": window}
    cfg = C.drafter_config(kind, vocab=V, hidden=H, draft_vocab=48, **extra)
    return C.write_drafter(tmp / f"{kind}-{window}", cfg, C.random_drafter_state(cfg, kind=kind, seed=5))


def test_dart_with_a_context_window_drafts_from_the_last_rows_only(tmp_path: Path, target: torch.nn.Module) -> None:
    """After 20 rows fed in three calls, a 5-row window drafts what the drafter drafts given only the last 5."""
    g = torch.Generator().manual_seed(6)
    feats, ids = torch.randn(20, 3 * H, generator=g), torch.randint(0, V, (20,), generator=g)
    windowed = DartDrafter.from_pretrained(windowed_dir(tmp_path, "dart", 5), target=target)
    state = windowed.new_state()
    for a, b in itertools.pairwise([0, 9, 14, 20]):
        long = windowed.draft_logits(feats[a:b], ids[a:b], state)
    short = windowed.draft_logits(feats[-5:], ids[-5:], windowed.new_state())
    torch.testing.assert_close(long, short, atol=1e-4, rtol=1e-4)  # positions differ; RoPE is relative
    full = DartDrafter.from_pretrained(windowed_dir(tmp_path, "dart", None), target=target)
    assert (full.draft_logits(feats, ids, full.new_state()) - long).abs().max() > 1e-3  # all 20 rows: not the same
    with pytest.raises(ValueError, match="context_window must be a positive integer"):
        cfg = C.drafter_config("dart", vocab=V, hidden=H, draft_vocab=48, context_window=0)
        DartDrafter.from_pretrained(C.write_drafter(tmp_path / "bad", cfg, C.random_drafter_state(cfg, kind="dart")),
                                    target=target)


def test_eagle3_with_a_context_window_drafts_from_the_last_rows_only(tmp_path: Path,
                                                                      target: torch.nn.Module) -> None:
    g = torch.Generator().manual_seed(7)
    feats, ids = torch.randn(20, 3 * H, generator=g), torch.randint(0, V, (20,), generator=g)
    windowed = Eagle3Drafter.from_pretrained(windowed_dir(tmp_path, "eagle3", 6), target=target)
    state = windowed.new_state()
    windowed.context_pass(feats[:11], ids[:11], state)
    long = windowed.draft_tree(feats[11:], ids[11:], 20, 4, 3, state)
    short = windowed.draft_tree(feats[-6:], ids[-6:], 20, 4, 3, windowed.new_state())
    assert long.tokens.tolist() == short.tokens.tolist() and long.parents.tolist() == short.parents.tolist()
    np.testing.assert_allclose(long.scores, short.scores, atol=1e-4)
    full = Eagle3Drafter.from_pretrained(windowed_dir(tmp_path, "eagle3", None), target=target)
    assert np.abs(full.draft_tree(feats, ids, 20, 4, 3, full.new_state()).scores - long.scores).max() > 1e-3


# ------------------------------------------------------------------------------------------------ EAGLE-3
def eagle_dir(tmp: Path, *, fmt: str = "safetensors", draft_vocab: int | None = 48, own_embed: bool = False,
              drop_maps: bool = False) -> tuple[Path, dict]:
    cfg = C.drafter_config("eagle3", vocab=V, hidden=H, draft_vocab=draft_vocab)
    state = C.random_drafter_state(cfg, kind="eagle3", seed=3)
    if own_embed:
        state["embed_tokens.weight"] = torch.randn(V, H)
    if drop_maps:
        state.pop("d2t")
        state.pop("t2d")
    return C.write_drafter(tmp / f"eagle-{fmt}-{draft_vocab}-{own_embed}", cfg, state, fmt=fmt), state


def sequential_logp(drafter: Eagle3Drafter, feats: torch.Tensor, ids: torch.Tensor, path: list[int]) -> float:
    """Cumulative log-prob of a token path by plain sequential rollout (each step fed the previous output)."""
    state = drafter.new_state()
    h = drafter.context_pass(feats, ids, state)[-1:]
    n = state.length
    keys, values = state.cache.keys, state.cache.values
    total = 0.0
    for i, tok in enumerate(path):
        logp = drafter._logp(h[-1])
        draft_id = int(torch.nonzero(torch.arange(48) + drafter.d2t == tok)[0])
        total += float(logp[draft_id])
        mask = torch.ones(1, n + i + 1, dtype=torch.bool)
        h_new, k, v = drafter.layer(torch.tensor([[tok]]), h[None, -1:], torch.tensor([n + i]), (keys, values), mask)
        keys, values = torch.cat([keys, k], 2), torch.cat([values, v], 2)
        h = h_new[0]
    return total


def test_eagle3_tree_scores_equal_sequential_rollouts(tmp_path: Path, target: torch.nn.Module) -> None:
    path, _ = eagle_dir(tmp_path)
    drafter = Eagle3Drafter.from_pretrained(path, target=target)
    g = torch.Generator().manual_seed(4)
    feats, ids = torch.randn(9, 3 * H, generator=g), torch.randint(0, V, (9,), generator=g)
    tree = drafter.draft_tree(feats, ids, total_tokens=20, depth=4, top_k=3, state=drafter.new_state())
    assert tree.size == 20 and tree.tokens[0] == int(ids[-1])
    assert int(tree.depths.max()) <= 5
    for node in range(1, tree.size):
        toks = [int(tree.tokens[j]) for j in tree.path_to(node)[1:]]
        assert tree.scores[node] == pytest.approx(sequential_logp(drafter, feats, ids, toks), abs=2e-4)
        assert tree.scores[node] <= tree.scores[tree.parents[node]] + 1e-6


def test_eagle3_incremental_context_and_formats(tmp_path: Path, target: torch.nn.Module) -> None:
    feats, ids = torch.randn(12, 3 * H), torch.randint(0, V, (12,))
    path, _ = eagle_dir(tmp_path)
    base = Eagle3Drafter.from_pretrained(path, target=target)
    state = base.new_state()
    base.context_pass(feats[:7], ids[:7], state)
    t1 = base.draft_tree(feats[7:], ids[7:], 30, 5, 4, state)
    t2 = base.draft_tree(feats, ids, 30, 5, 4, base.new_state())
    assert t1.tokens.tolist() == t2.tokens.tolist() and t1.parents.tolist() == t2.parents.tolist()
    assert state.length == 12  # tree rows are not kept
    binary, _ = eagle_dir(tmp_path, fmt="bin")
    other = Eagle3Drafter.from_pretrained(binary, target=target)
    assert other.draft_tree(feats, ids, 30, 5, 4, other.new_state()).tokens.tolist() == t2.tokens.tolist()
    identity, _ = eagle_dir(tmp_path, draft_vocab=None, drop_maps=True)
    Eagle3Drafter.from_pretrained(identity, target=target)
    own, sd = eagle_dir(tmp_path, own_embed=True)
    d = Eagle3Drafter.from_pretrained(own, target=target)
    assert torch.equal(d.embed_weight, sd["embed_tokens.weight"])


def test_drafter_cache_is_preallocated_and_grows_in_chunks(tmp_path: Path, target: torch.nn.Module) -> None:
    """A thousand rows fed 1-3 at a time (plus scratch rows each step) reallocate the buffers a handful of times,
    write in place otherwise, commit only what is committed; drafting across a growth equals a fresh state."""
    cache = KVCache()
    g = torch.Generator().manual_seed(7)
    kept, buffers = [], []
    while cache.length < 1000:
        t = int(torch.randint(1, 4, (1,), generator=g))
        k = torch.randn(1, 2, t + 4, 8, generator=g)  # t rows to keep, then 4 scratch rows
        keys, values = cache.write(k, -k, cache.length)
        assert keys.shape[2] == cache.length + t + 4 and torch.equal(values[:, :, -t - 4 :], -k)
        cache.commit(t)
        kept.append(k[:, :, :t])
        if not buffers or buffers[-1] != (cache.capacity, cache.keys.data_ptr()):
            buffers.append((cache.capacity, cache.keys.data_ptr()))
    assert [cap for cap, _ in buffers] == [256, 512, 1024, 2048][: len(buffers)] and len(buffers) <= 4
    torch.testing.assert_close(cache.keys, torch.cat(kept, 2), atol=0, rtol=0)
    torch.testing.assert_close(cache.values, -torch.cat(kept, 2), atol=0, rtol=0)
    with pytest.raises(ValueError, match="must lie in"):
        cache.write(k, k, cache.length - 1)  # committed rows are never overwritten

    path, _ = dart_dir(tmp_path)
    dart = DartDrafter.from_pretrained(path, target=target)
    feats, ids = torch.randn(270, 3 * H, generator=g), torch.randint(0, V, (270,), generator=g)
    state = dart.new_state()
    for a, b in itertools.pairwise([0, 250, 251, 253, 256, 259, 262, 270]):  # mask rows cross 256 mid-call
        cached = dart.draft_logits(feats[a:b], ids[a:b], state)
        torch.testing.assert_close(cached, dart.draft_logits(feats[:b], ids[:b], dart.new_state()),
                                   atol=2e-5, rtol=1e-5)
    assert state.length == 270 and state.cache.capacity == 512

    eagle_path, _ = eagle_dir(tmp_path)
    eagle = Eagle3Drafter.from_pretrained(eagle_path, target=target)
    state = eagle.new_state()
    eagle.context_pass(feats[:248], ids[:248], state)
    tree = eagle.draft_tree(feats[248:250], ids[248:250], total_tokens=10, depth=4, top_k=3, state=state)
    assert state.length == 250 and state.cache.capacity == 512  # tree rows 250..261 grew it mid-tree
    for node in range(1, tree.size):
        toks = [int(tree.tokens[j]) for j in tree.path_to(node)[1:]]
        assert tree.scores[node] == pytest.approx(sequential_logp(eagle, feats[:250], ids[:250], toks), abs=2e-4)


def test_eagle3_loader_errors(tmp_path: Path, target: torch.nn.Module) -> None:
    cfg = C.drafter_config("eagle3", vocab=V, hidden=H, draft_vocab=48)
    state = C.random_drafter_state(cfg, kind="eagle3")
    state.pop("d2t")
    with pytest.raises(ValueError, match="missing keys"):
        Eagle3Drafter.from_pretrained(C.write_drafter(tmp_path / "a", cfg, state), target=target)
    state = C.random_drafter_state(cfg, kind="dart")  # a DART checkpoint is not an EAGLE-3 one
    with pytest.raises(ValueError, match=r"unexpected keys \['midlayer.mask_rep'\]"):
        Eagle3Drafter.from_pretrained(C.write_drafter(tmp_path / "b", cfg, state), target=target)


@pytest.mark.parametrize(("kind", "fmt"), [("dart", "safetensors"), ("eagle3", "safetensors"), ("eagle3", "bin")])
def test_non_finite_weights_are_refused_by_name(tmp_path: Path, target: torch.nn.Module, kind: str,
                                                fmt: str) -> None:
    """A head full of NaN used to load: EAGLE-3 then raced as "done" proposing garbage, DART failed mid-race."""
    cls = DartDrafter if kind == "dart" else Eagle3Drafter
    cfg = C.drafter_config(kind, vocab=V, hidden=H, draft_vocab=48)
    state = C.random_drafter_state(cfg, kind=kind)
    state["fc.weight"] = torch.full_like(state["fc.weight"], float("nan"))
    state["norm.weight"][3] = float("inf")
    with pytest.raises(ValueError, match=r"non-finite values \(NaN or inf\) in \['fc.weight', 'norm.weight'\]"):
        cls.from_pretrained(C.write_drafter(tmp_path / "nan", cfg, state, fmt=fmt), target=target)


class Evil:
    def __reduce__(self) -> tuple:
        return (print, ("pwned",))


def test_eagle3_refuses_pickles(tmp_path: Path, target: torch.nn.Module) -> None:
    cfg = C.drafter_config("eagle3", vocab=V, hidden=H)
    C.write_drafter(tmp_path / "evil", cfg, {"fc.weight": Evil()}, fmt="bin")
    with pytest.raises(ValueError, match="weights_only"):
        Eagle3Drafter.from_pretrained(tmp_path / "evil", target=target)
