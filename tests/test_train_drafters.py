"""Drafter trainers: the training forwards equal the inference forwards, a short run on a tiny target trained on a
repetitive synthetic corpus learns (held-out loss down, top-1 agreement up), and the fp16 checkpoints load through
the inference loaders as fp32, decode losslessly and accept more than untrained ones."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import tests.helpers_ckpt as C
from dart_core.drafters.dart import DartDrafter
from dart_core.drafters.dflash import DFlashConfig, DFlashDrafter, DFlashTreeDrafter, dflash_shapes
from dart_core.drafters.eagle3 import Eagle3Drafter
from dart_core.engine.loop import generate
from dart_core.engine.metrics import summarize
from dart_core.engine.target import TargetModel
from dart_core.train.common import build_draft_vocab, load_frozen_target
from dart_core.train.dart import block_mask, dart_train_forward, train_dart
from dart_core.train.dflash import block_mask as dflash_block_mask
from dart_core.train.dflash import dflash_train_forward, train_dflash
from dart_core.train.eagle3 import eagle3_train_forward, train_eagle3, ttt_mask

V, H, EOS = 97, 32, 0


def corpus(n: int, length: int, seed: int) -> list[list[int]]:
    """Arithmetic progressions over tokens 3..50 (step 1 or 2 per sequence): predictable once two tokens are seen;
    ids 1 and 2 never occur, so the draft vocab (EOS 0 + 3..50) is not a prefix of the target's and d2t != 0."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        start, step = rng.randrange(48), rng.choice([1, 2])
        out.append([3 + (start + step * k) % 48 for k in range(length)])
    return out


@pytest.fixture(scope="module")
def target_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Qwen3 (8 layers, hidden 32) trained briefly on the synthetic corpus, saved with save_pretrained."""
    torch.manual_seed(0)
    model = C.tiny_qwen3(vocab=V, hidden=H, seed=0).train()
    data = torch.tensor(corpus(256, 32, seed=1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(0)
    for _ in range(50):
        batch = data[torch.randint(0, len(data), (16,), generator=g)]
        loss = model(input_ids=batch, labels=batch).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert float(loss.detach()) < 1.0, "tiny target did not learn the corpus"
    path = tmp_path_factory.mktemp("target")
    model.eval().save_pretrained(path)
    return path


def random_drafter(tmp_path: Path, kind: str) -> DartDrafter | Eagle3Drafter:
    cfg = C.drafter_config(kind, vocab=V, hidden=H, draft_vocab=48, draft_length=4)
    path = C.write_drafter(tmp_path / kind, cfg, C.random_drafter_state(cfg, kind=kind, seed=3))
    cls = DartDrafter if kind == "dart" else Eagle3Drafter
    return cls.from_pretrained(path, target=torch.randn(V, H) * 0.5)


def test_block_and_ttt_masks() -> None:
    mask, pos = block_mask(5, torch.tensor([1, 3]), 2)
    assert pos.tolist() == [0, 1, 2, 3, 4, 2, 3, 4, 5]
    assert mask[5].tolist() == [True, True, False, False, False, True, False, False, False]
    assert mask[8].tolist() == [True, True, True, True, False, False, False, True, True]
    m = ttt_mask(4, 2)  # row 3: step-0 rows <= 1, step-1 row 2, step-2 row 3 (itself)
    assert m[3].tolist() == [True, True, False, False, False, False, True, False, False, False, False, True]


def test_dart_train_forward_equals_draft_logits(tmp_path: Path) -> None:
    model = random_drafter(tmp_path, "dart")
    g = torch.Generator().manual_seed(0)
    feats, ids = torch.randn(2, 20, 3 * H, generator=g), torch.randint(0, V, (2, 20), generator=g)
    anchors = torch.tensor([0, 3, 7, 12, 19])
    logits, real = dart_train_forward(model, feats, ids, anchors)
    assert logits.shape == (2, 5, 5, 48) and real.shape == (2, 20, 48)
    for b in range(2):
        for k, a in enumerate(anchors.tolist()):
            ref = model.draft_logits(feats[b, : a + 1], ids[b, : a + 1], model.new_state())[0]
            torch.testing.assert_close(logits[b, k], ref, atol=1e-4, rtol=1e-4)
        for i in (1, 5, 18):  # every real row is the depth-1 prediction of a prefix ending there
            ref = model.draft_logits(feats[b, : i + 1], ids[b, : i + 1], model.new_state())[0, 0]
            torch.testing.assert_close(real[b, i], ref, atol=1e-4, rtol=1e-4)


def test_eagle3_ttt_forward_equals_context_pass_and_rollout(tmp_path: Path) -> None:
    model = random_drafter(tmp_path, "eagle3")
    g = torch.Generator().manual_seed(1)
    feats, ids = torch.randn(2, 12, 3 * H, generator=g), torch.randint(0, V, (2, 12), generator=g)
    outs = eagle3_train_forward(model, feats, ids, ttt_steps=3)
    for b in range(2):
        torch.testing.assert_close(outs[0][b], model.context_pass(feats[b], ids[b], model.new_state()),
                                   atol=1e-4, rtol=1e-4)
        for s in (1, 2, 3):
            for i in (s, 6, 11):
                n = i - s + 1  # context rows 0..i-s, then s sequential steps on its own outputs
                state = model.new_state()
                h = model.context_pass(feats[b, :n], ids[b, :n], state)[None, -1:]
                keys, values = state.cache.keys, state.cache.values
                for j in range(1, s + 1):
                    h, k, v = model.layer(ids[None, b, n - 1 + j : n + j], h, torch.tensor([n - 1 + j]),
                                          (keys, values), torch.ones(1, keys.shape[2] + 1, dtype=torch.bool))
                    keys, values = torch.cat([keys, k], 2), torch.cat([values, v], 2)
                torch.testing.assert_close(outs[s][b, i], h[0, 0], atol=1e-4, rtol=1e-4)


CHUNKS = [0, 7, 8, 10, 13, 14, 16, 19, 20]  # a prefill of 7 rows, then 1-3 accepted rows per step


def close(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype) -> None:
    """float64: equal to 1e-9 (same math). float32: within 1e-5 of the outputs' scale (the logits of these random
    weights reach ~10, where one float32 ulp is ~1e-6 and a few ops' rounding sum to ~1e-5)."""
    if dtype == torch.float64:
        torch.testing.assert_close(got, want, atol=1e-9, rtol=1e-9)
    else:
        scale = max(1.0, float(want.abs().max()))
        torch.testing.assert_close(got, want, atol=1e-5 * scale, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dart_train_forward_equals_chunked_cached_inference(tmp_path: Path, one_thread: None,
                                                            dtype: torch.dtype) -> None:
    """Training (batched, cache-free) == drafting (B = 1) fed chunk by chunk through ONE state, whose mask rows
    are scratch rows of the cache."""
    model = random_drafter(tmp_path, "dart").to(dtype)
    g = torch.Generator().manual_seed(5)
    feats, ids = torch.randn(2, 20, 3 * H, generator=g, dtype=dtype), torch.randint(0, V, (2, 20), generator=g)
    anchors = torch.tensor(CHUNKS[1:]) - 1  # each call drafts from its last row
    with torch.no_grad():
        blocks, real = dart_train_forward(model, feats, ids, anchors)
    for b in range(2):
        state = model.new_state()
        for k, (lo, hi) in enumerate(itertools.pairwise(CHUNKS)):
            cached = model.draft_logits(feats[b, lo:hi], ids[b, lo:hi], state)[0]
            close(cached, blocks[b, k], dtype)
            close(cached[0], real[b, hi - 1], dtype)
        assert state.length == 20


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_eagle3_train_forward_equals_chunked_cached_inference(tmp_path: Path, one_thread: None,
                                                              dtype: torch.dtype) -> None:
    """TTT step 0 == context passes chunk by chunk through ONE state; step s == s tree-level forwards from the
    chunk's last row, their K/V in the cache's scratch rows (overwritten by the next chunk)."""
    model = random_drafter(tmp_path, "eagle3").to(dtype)
    g = torch.Generator().manual_seed(6)
    feats, ids = torch.randn(2, 20, 3 * H, generator=g, dtype=dtype), torch.randint(0, V, (2, 20), generator=g)
    with torch.no_grad():
        outs = eagle3_train_forward(model, feats, ids, ttt_steps=3)
    for b in range(2):
        state = model.new_state()
        for lo, n in itertools.pairwise(CHUNKS):
            h = model.context_pass(feats[b, lo:n], ids[b, lo:n], state)
            close(h, outs[0][b, lo:n], dtype)
            h = h[None, -1:]
            for s in range(1, min(3, 20 - n) + 1):  # row n-1+s at position n-1+s carries ids[n-1+s]
                with torch.no_grad():
                    h, _, _ = model.layer(ids[None, b, n - 1 + s : n + s], h, torch.tensor([n - 1 + s]),
                                          state.cache.at(n + s - 1), torch.ones(1, n + s, dtype=torch.bool))
                close(h[0, 0], outs[s][b, n - 1 + s], dtype)
            assert state.length == n  # the step rows were scratch


def test_draft_vocab_keeps_eos_and_frequent_tokens() -> None:
    ids, d2t, t2d = build_draft_vocab([[5, 5, 5, 7, 7, 9]], 20, 3, eos_token_id=19)
    assert ids.tolist() == [5, 7, 19] and d2t.tolist() == [5, 6, 17] and int(t2d.sum()) == 3 and t2d[19]


def _tau(target: TargetModel, drafter: object, prompts: list[list[int]], ar: list[list[int]]) -> float:
    taus = []
    for prompt, ref in zip(prompts, ar, strict=True):
        out, steps = generate(target, prompt, drafter, max_new_tokens=20)
        assert out == ref  # lossless: greedy speculative output equals plain AR
        taus.append(summarize(steps).tau)
    return sum(taus) / len(taus)


@pytest.mark.parametrize("kind", ["dart", "eagle3"])
def test_short_training_learns_and_round_trips(tmp_path: Path, target_dir: Path, kind: str) -> None:
    train, held = corpus(96, 64, seed=2), corpus(8, 64, seed=3)
    common = dict(draft_vocab_size=49, batch_windows=6, window=32, lr=5e-3, seed=0, threads=2, log_every=5,
                  eval_sequences=held, eos_token_id=EOS, progress=False)
    if kind == "dart":
        def run(out: Path, steps: int) -> dict:
            return train_dart(target_dir, train, out, draft_length=4, anchors_per_window=8, steps=steps, **common)
        cls = DartDrafter
    else:
        def run(out: Path, steps: int) -> dict:
            return train_eagle3(target_dir, train, out, ttt_steps=3, steps=steps, **common)
        cls = Eagle3Drafter
    stats = run(tmp_path / "trained", 50)
    before, after = stats["eval_before"], stats["eval_after"]
    assert after["loss"] < 0.5 * before["loss"]
    assert after["top1"][0] > before["top1"][0] + 0.2
    assert sum(after["top1"]) > sum(before["top1"])
    log = [json.loads(line) for line in (tmp_path / "trained" / "train_log.jsonl").read_text().splitlines()]
    assert len(log) == 10 and log[-1]["step"] == 50

    raw = load_file(str(tmp_path / "trained" / "model.safetensors"))
    assert raw["fc.weight"].dtype == torch.float16 and raw["d2t"].dtype == torch.int64
    assert raw["t2d"].dtype == torch.bool
    assert tuple(raw["t2d"].shape) == (V,) and bool(raw["t2d"][EOS]) and int(raw["t2d"].sum()) == 49
    assert (raw["d2t"] != 0).any()  # draft vocab is not a prefix of the target's: d2t is exercised
    trained = cls.from_pretrained(tmp_path / "trained", target=target_dir)
    assert trained.dtype == torch.float32
    # drafting keeps to the context training showed: 31 real rows a window, DART's anchors 4 rows fewer
    assert trained.config.context_window == (31 - 4 if kind == "dart" else 31)

    run(tmp_path / "untrained", 0)
    untrained = cls.from_pretrained(tmp_path / "untrained", target=target_dir)
    target = load_frozen_target(target_dir)
    prompts = [seq[:6] for seq in held[:3]]
    ar = [generate(target, p, None, max_new_tokens=20)[0] for p in prompts]
    tau_trained, tau_untrained = _tau(target, trained, prompts, ar), _tau(target, untrained, prompts, ar)
    assert tau_trained > tau_untrained + 0.5, (tau_trained, tau_untrained)


# ------------------------------------------------------------------------------------------------ DFlash
def random_dflash(block: int = 4) -> DFlashDrafter:
    """A random DFlash drafter (2 layers, GQA) for a target of hidden H: its embedding and lm_head random too."""
    cfg = DFlashConfig.from_dict({
        "hidden_size": H, "intermediate_size": 2 * H, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 8, "num_target_layers": 8, "block_size": block,
        "dflash_config": {"mask_token_id": V - 1, "target_layer_ids": [1, 3, 5]}})
    g = torch.Generator().manual_seed(7)
    model = DFlashDrafter(cfg, torch.randn(V, H, generator=g), torch.randn(V, H, generator=g) * 0.3)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * (0.3 if p.dim() > 1 else 0.1) + (p.dim() == 1))
    return model.eval()


def test_dflash_block_mask() -> None:
    mask, pos = dflash_block_mask(4, torch.tensor([1, 3]), 2)
    assert pos.tolist() == [0, 1, 2, 3, 1, 2, 3, 4]
    # block 0 (anchor 1): context row 0 only, then both of its own rows (bidirectional), not block 1's
    assert mask[0].tolist() == [True, False, False, False, True, True, False, False]
    assert mask[1].tolist() == mask[0].tolist()
    assert mask[3].tolist() == [True, True, True, False, False, False, True, True]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dflash_train_forward_equals_chunked_cached_inference(one_thread: None, dtype: torch.dtype) -> None:
    """Training (many blocks per window, one mask, no cache) == drafting (one block per call) fed chunk by chunk
    through ONE state: the block at anchor p sees exactly the context rows before p in both."""
    model = random_dflash().to(dtype)
    g = torch.Generator().manual_seed(8)
    feats, ids = torch.randn(2, 20, 3 * H, generator=g, dtype=dtype), torch.randint(0, V - 1, (2, 20), generator=g)
    anchors = torch.tensor(CHUNKS[1:-1])  # each call's block starts at the row after its context
    with torch.no_grad():
        hidden = dflash_train_forward(model, feats, ids, anchors)
        logits = model.logits(hidden)
    assert logits.shape == (2, len(anchors), 3, V)
    for b in range(2):
        state = model.new_state()
        for k, (lo, hi) in enumerate(itertools.pairwise(CHUNKS[:-1])):
            block = [int(ids[b, hi])] + [model.mask_token_id] * 3
            got = model.draft_logits(feats[b, lo:hi], block, state)  # float32 by contract: compare roundings
            close(got, logits[b, k].float(), torch.float32)
            if dtype == torch.float64:  # the drafting call's float64 hidden states, before that rounding
                assert (got.double() - logits[b, k]).abs().max() <= 1e-6 * max(1.0, float(got.abs().max()))
        assert state.length == CHUNKS[-2]


def test_dflash_short_training_learns_and_round_trips(tmp_path: Path, target_dir: Path) -> None:
    """A short run learns (held-out loss halves, top-1 up), saves the published format (fp16, no embedding or
    lm_head, the target's feature layers as target_layer_ids, an unused mask id), loads through the inference
    loader on the target, decodes losslessly as both racers, and accepts more than an untrained drafter."""
    train, held = corpus(96, 64, seed=2), corpus(8, 64, seed=3)

    def run(out: Path, steps: int) -> dict:
        return train_dflash(target_dir, train, out, block_size=4, steps=steps, batch_windows=6, window=32,
                            anchors_per_window=6, lr=5e-3, seed=0, threads=2, log_every=5, eval_sequences=held,
                            progress=False)

    stats = run(tmp_path / "trained", 150)
    before, after = stats["eval_before"], stats["eval_after"]
    assert after["loss"] < 0.5 * before["loss"]
    assert after["top1"][0] > before["top1"][0] + 0.2
    cfg = json.loads((tmp_path / "trained" / "config.json").read_text())
    target = load_frozen_target(target_dir)
    assert cfg["block_size"] == 4 and cfg["num_target_layers"] == 8
    assert cfg["dflash_config"]["target_layer_ids"] == [i - 1 for i in target.feature_layers]
    assert cfg["dflash_config"]["mask_token_id"] == 0  # the smallest id the corpus (3..50) never holds
    assert cfg["dflash_config"]["context_window"] == 32 - 4  # a block's anchor is at most window - block_size
    raw = load_file(str(tmp_path / "trained" / "model.safetensors"))
    assert set(raw) == set(dflash_shapes(DFlashConfig.from_dict(cfg)))
    assert all(t.dtype == torch.float16 for t in raw.values())

    run(tmp_path / "untrained", 0)
    prompts = [seq[:6] for seq in held[:3]]
    ar = [generate(target, p, None, max_new_tokens=20)[0] for p in prompts]
    for cls in (DFlashDrafter, DFlashTreeDrafter):
        trained = cls.from_pretrained(tmp_path / "trained", target=target)
        untrained = cls.from_pretrained(tmp_path / "untrained", target=target)
        assert trained.feature_layers == target.feature_layers  # one target forward serves DART and DFlash
        tau_trained, tau_untrained = _tau(target, trained, prompts, ar), _tau(target, untrained, prompts, ar)
        assert tau_trained > tau_untrained + 1.0, (cls.__name__, tau_trained, tau_untrained)


# ------------------------------------------------------------------------------------------------ continuing
def _train(kind: str, target_dir: Path, out: Path, steps: int, train: list[list[int]], **kw: object) -> dict:
    common = dict(batch_windows=6, window=32, lr=5e-3, seed=0, threads=2, log_every=5,
                  eval_sequences=corpus(8, 64, seed=3), progress=False, steps=steps, **kw)
    if kind == "dart":
        return train_dart(target_dir, train, out, draft_length=4, anchors_per_window=8, draft_vocab_size=49,
                          eos_token_id=EOS, **common)
    if kind == "eagle3":
        return train_eagle3(target_dir, train, out, ttt_steps=3, draft_vocab_size=49, eos_token_id=EOS, **common)
    return train_dflash(target_dir, train, out, block_size=4, anchors_per_window=6, **common)


@pytest.mark.parametrize("kind", ["dart", "eagle3", "dflash"])
def test_a_drafter_continues_from_trained_weights(tmp_path: Path, target_dir: Path, kind: str) -> None:
    """``init_from`` starts where a trained drafter ended: its held-out figures before any step are that drafter's
    after, and zero steps save its checkpoint unchanged, draft vocabulary included, though the new data would rank
    another one (it holds only half the tokens); training on from there keeps learning."""
    first = _train(kind, target_dir, tmp_path / "first", 30, corpus(96, 64, seed=2))
    narrow = [[3 + (t - 3) % 24 for t in seq] for seq in corpus(96, 64, seed=4)]
    same = _train(kind, target_dir, tmp_path / "same", 0, narrow, init_from=tmp_path / "first")
    # the same weights but for their float16 rounding on saving
    assert same["eval_before"]["top1"] == pytest.approx(first["eval_after"]["top1"], abs=0.05)
    assert same["eval_before"]["loss"] == pytest.approx(first["eval_after"]["loss"], rel=0.05)
    a, b = (load_file(str(tmp_path / name / "model.safetensors")) for name in ("first", "same"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    fresh = _train(kind, target_dir, tmp_path / "fresh", 0, narrow)
    assert fresh["eval_before"]["loss"] > same["eval_before"]["loss"] * 1.5
    more = _train(kind, target_dir, tmp_path / "more", 30, corpus(96, 64, seed=5), init_from=tmp_path / "first")
    assert more["eval_after"]["loss"] < first["eval_after"]["loss"]


def test_continuing_from_another_drafter_is_refused(tmp_path: Path, target_dir: Path) -> None:
    """A start of another shape, another kind, no checkpoint or damaged weights: a ValueError or LoadError that
    names what differs, before any training."""
    from dart_core.loading.errors import LoadError

    train = corpus(96, 64, seed=2)
    _train("dart", target_dir, tmp_path / "dart", 0, train)
    _train("dflash", target_dir, tmp_path / "dflash", 0, train)
    with pytest.raises(ValueError, match="draft_length 4 there, 6 here"):
        train_dart(target_dir, train, tmp_path / "x", draft_length=6, draft_vocab_size=49, steps=0, window=32,
                   init_from=tmp_path / "dart", progress=False)
    with pytest.raises(ValueError, match="draft_vocab_size 49 there, 40 here"):
        train_dart(target_dir, train, tmp_path / "x", draft_length=4, draft_vocab_size=40, steps=0, window=32,
                   init_from=tmp_path / "dart", progress=False)
    with pytest.raises(ValueError, match="architectures"):
        train_eagle3(target_dir, train, tmp_path / "x", draft_vocab_size=49, steps=0, window=32,
                     init_from=tmp_path / "dart", progress=False)
    with pytest.raises(ValueError, match="block_size 4 there, 8 here"):
        train_dflash(target_dir, train, tmp_path / "x", block_size=8, steps=0, window=32,
                     init_from=tmp_path / "dflash", progress=False)
    with pytest.raises(ValueError, match="mask_token_id 0 there, 5 here"):
        train_dflash(target_dir, train, tmp_path / "x", block_size=4, mask_token_id=5, steps=0, window=32,
                     init_from=tmp_path / "dflash", progress=False)
    with pytest.raises(ValueError, match=r"no config\.json"):
        train_dart(target_dir, train, tmp_path / "x", draft_length=4, draft_vocab_size=49, steps=0, window=32,
                   init_from=tmp_path / "nowhere", progress=False)
    weights = tmp_path / "dart" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(LoadError, match=r"model\.safetensors"):
        train_dart(target_dir, train, tmp_path / "x", draft_length=4, draft_vocab_size=49, steps=0, window=32,
                   init_from=tmp_path / "dart", progress=False)
