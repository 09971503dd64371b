"""DFlash (``docs/drafters.md``): a tiny checkpoint in exactly the published format, the module against
an independent literal reference of the cache-free forward, the cache against the cache-free form, the default
layer rule, greedy losslessness of ``dflash`` and ``dflash-tree`` against HF ``generate`` on Qwen3 / Llama /
Qwen3-MoE targets, a rigged drafter reaching deep acceptance, the upstream chain rule step by step, sampling, and
the refusals."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import helpers_ckpt as C
import numpy as np
import pytest
import torch
from helpers_stats import chi_square_pvalue
from safetensors.torch import save_file

from dart_core.drafters.dflash import (
    DFlashDrafter,
    DFlashSettings,
    DFlashTreeDrafter,
    DFlashTreeSettings,
    default_target_layer_ids,
)
from dart_core.engine.acceptance import SamplingConfig, processed_probs
from dart_core.engine.loop import generate, stream
from dart_core.engine.metrics import summarize
from dart_core.engine.target import TargetModel
from dart_core.loading.errors import LoadError

V, H, L, NEW = 97, 32, 8, 40


def make_target(family: str, seed: int = 0, vocab: int = V) -> torch.nn.Module:
    return C.tiny_target(family, vocab=vocab, hidden=H, layers=L, seed=seed)


# ------------------------------------------------------------------ a checkpoint in the published format
def dflash_config(*, layers: int = 2, block: int = 6, mask: int = V - 1, ids: list[int] | None = None,
                  head_dim: int = 12, bias: bool = False, n_target: int = L, **extra: object) -> dict:
    cfg: dict = {
        "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": H, "intermediate_size": 48,
        "num_hidden_layers": layers, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": head_dim,
        "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "rope_scaling": None, "max_position_embeddings": 512,
        "attention_bias": bias, "hidden_act": "silu", "layer_types": ["full_attention"] * layers,
        "num_target_layers": n_target, "block_size": block, "vocab_size": V, "torch_dtype": "float32",
        "dflash_config": {"mask_token_id": mask},
    }
    if ids is not None:
        cfg["dflash_config"]["target_layer_ids"] = ids
    cfg.update(extra)
    return cfg


def n_ids(cfg: dict) -> int:
    ids = cfg["dflash_config"].get("target_layer_ids")
    return len(ids) if ids is not None else len(default_target_layer_ids(cfg["num_target_layers"],
                                                                         cfg["num_hidden_layers"]))


def dflash_state(cfg: dict, seed: int = 0, scale: float = 0.2) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    hd, inter = cfg["head_dim"], cfg["intermediate_size"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd

    def w(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g) * scale

    sd = {"fc.weight": w(H, n_ids(cfg) * H), "hidden_norm.weight": 1 + w(H), "norm.weight": 1 + w(H)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"layers.{i}."
        sd |= {p + "input_layernorm.weight": 1 + w(H), p + "post_attention_layernorm.weight": 1 + w(H),
               p + "self_attn.q_proj.weight": w(q, H), p + "self_attn.k_proj.weight": w(kv, H),
               p + "self_attn.v_proj.weight": w(kv, H), p + "self_attn.o_proj.weight": w(H, q),
               p + "self_attn.q_norm.weight": 1 + w(hd), p + "self_attn.k_norm.weight": 1 + w(hd),
               p + "mlp.gate_proj.weight": w(inter, H), p + "mlp.up_proj.weight": w(inter, H),
               p + "mlp.down_proj.weight": w(H, inter)}
        if cfg["attention_bias"]:
            sd |= {p + "self_attn.q_proj.bias": w(q), p + "self_attn.k_proj.bias": w(kv),
                   p + "self_attn.v_proj.bias": w(kv), p + "self_attn.o_proj.bias": w(H)}
    return sd


def write(path: Path, cfg: dict, sd: dict[str, torch.Tensor]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(cfg))
    save_file({k: v.contiguous() for k, v in sd.items()}, path / "model.safetensors")
    return path


# ------------------------------------------------------------------ literal reference of the spec
def rms(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rope(x: torch.Tensor, pos: torch.Tensor, theta: float = 10000.0) -> torch.Tensor:
    hd = x.shape[-1]  # x: [rows, heads, hd]
    inv = 1.0 / theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd)
    ang = pos[:, None].float() * inv[None]
    cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()
    rot = torch.cat([-x[..., hd // 2 :], x[..., : hd // 2]], -1)
    return x * cos[:, None] + rot * sin[:, None]


def reference_logits(sd: dict, cfg: dict, embed: torch.Tensor, lm_head: torch.Tensor, ctx: torch.Tensor,
                     block: list[int]) -> torch.Tensor:
    """The spec's cache-free form, step by step, with plain torch ops and loops over heads."""
    heads, kvh, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    n, b = ctx.shape[0], len(block)

    def lin(x: torch.Tensor, name: str) -> torch.Tensor:
        y = x @ sd[name + ".weight"].T
        return y + sd[name + ".bias"] if name + ".bias" in sd else y

    c = rms(ctx @ sd["fc.weight"].T, sd["hidden_norm.weight"])
    h = embed[torch.tensor(block)]
    for i in range(cfg["num_hidden_layers"]):
        p = f"layers.{i}."
        a = rms(h, sd[p + "input_layernorm.weight"])
        both = torch.cat([c, a])
        q = rms(lin(a, p + "self_attn.q_proj").view(b, heads, hd), sd[p + "self_attn.q_norm.weight"])
        k = rms(lin(both, p + "self_attn.k_proj").view(n + b, kvh, hd), sd[p + "self_attn.k_norm.weight"])
        v = lin(both, p + "self_attn.v_proj").view(n + b, kvh, hd)
        q, k = rope(q, torch.arange(n, n + b)), rope(k, torch.arange(n + b))
        out = torch.zeros(b, heads, hd)
        for hh in range(heads):
            kv = hh // (heads // kvh)
            s = (q[:, hh] @ k[:, kv].T) / math.sqrt(hd)  # no mask
            out[:, hh] = torch.softmax(s, -1) @ v[:, kv]
        h = h + lin(out.reshape(b, heads * hd), p + "self_attn.o_proj")
        x = rms(h, sd[p + "post_attention_layernorm.weight"])
        g, u = x @ sd[p + "mlp.gate_proj.weight"].T, x @ sd[p + "mlp.up_proj.weight"].T
        h = h + (torch.nn.functional.silu(g) * u) @ sd[p + "mlp.down_proj.weight"].T
    return (rms(h, sd["norm.weight"]) @ lm_head.T)[1:]


def target_ctx(model: torch.nn.Module, ids: list[int], layer_ids: tuple[int, ...]) -> torch.Tensor:
    with torch.no_grad():
        hs = model(torch.tensor([ids]), output_hidden_states=True).hidden_states
    return torch.cat([hs[i + 1][0] for i in layer_ids], -1)


@pytest.fixture(scope="module")
def qwen() -> torch.nn.Module:
    return make_target("qwen3")


# ------------------------------------------------------------------ forward, cache, defaults
@pytest.mark.parametrize("bias,layers,ids", [(False, 2, None), (True, 1, [2, 5]), (False, 3, [1, 3, 4, 6])])
def test_forward_matches_literal_spec(tmp_path: Path, qwen: torch.nn.Module, bias: bool, layers: int,
                                      ids: list[int] | None) -> None:
    cfg = dflash_config(layers=layers, ids=ids, bias=bias)
    sd = dflash_state(cfg, seed=3)
    drafter = DFlashDrafter.from_pretrained(write(tmp_path / "d", cfg, sd), target=qwen)
    assert drafter.block_size == 6 and drafter.mask_token_id == V - 1
    assert drafter.feature_layers == tuple(i + 1 for i in drafter.target_layer_ids)
    prompt = [5, 9, 2, 33, 7, 1, 60, 4, 12]
    ctx = target_ctx(qwen, prompt, drafter.target_layer_ids)
    block = [17] + [V - 1] * 5
    got = drafter.draft_logits(ctx, torch.tensor(block))
    assert got.dtype == torch.float32 and got.shape == (5, V)
    ref = reference_logits(sd, cfg, qwen.get_input_embeddings().weight.detach(),
                           qwen.get_output_embeddings().weight.detach(), ctx, block)
    torch.testing.assert_close(got, ref, atol=1e-4, rtol=1e-4)
    per_layer = ctx.split(H, dim=-1)  # the per-layer form of the features
    torch.testing.assert_close(drafter.draft_logits(per_layer, block), got, atol=0, rtol=0)


def test_cache_equals_cache_free(tmp_path: Path, qwen: torch.nn.Module) -> None:
    cfg = dflash_config(layers=2)
    drafter = DFlashDrafter.from_pretrained(write(tmp_path / "d", cfg, dflash_state(cfg, seed=1)), target=qwen)
    rng = random.Random(0)
    tokens = [rng.randrange(V) for _ in range(40)]
    full = target_ctx(qwen, tokens, drafter.target_layer_ids)
    state = drafter.new_state()
    seen = 0
    for end in (7, 8, 12, 13, 20, 31, 39):  # growing context, varying numbers of new rows
        block = [tokens[end]] + [V - 1] * 5
        cached = drafter.draft_logits(full[seen:end], block, state)
        free = drafter.draft_logits(full[:end], block)
        assert state.length == end
        assert (cached - free).abs().max().item() <= 1e-5
        seen = end


def test_a_context_window_drafts_from_the_last_context_rows_only(tmp_path: Path, qwen: torch.nn.Module) -> None:
    """With ``dflash_config.context_window`` 6 the block after 30 context rows (fed in steps) is drafted as from
    the last 6 alone; without it, from all 30."""
    cfg = dflash_config(layers=2)
    cfg["dflash_config"]["context_window"] = 6
    sd = dflash_state(cfg, seed=2)
    windowed = DFlashDrafter.from_pretrained(write(tmp_path / "w", cfg, sd), target=qwen)
    rng = random.Random(1)
    tokens = [rng.randrange(V - 1) for _ in range(31)]
    ctx = target_ctx(qwen, tokens, windowed.target_layer_ids)
    block = [tokens[30]] + [V - 1] * 5
    state = windowed.new_state()
    windowed.draft_logits(ctx[:12], [tokens[12]] + [V - 1] * 5, state)
    long = windowed.draft_logits(ctx[12:30], block, state)
    short = windowed.draft_logits(ctx[24:30], block)
    assert (long - short).abs().max().item() <= 1e-4  # positions differ; RoPE is relative
    cfg["dflash_config"]["context_window"] = None
    full = DFlashDrafter.from_pretrained(write(tmp_path / "f", cfg, sd), target=qwen)
    assert (full.draft_logits(ctx[:30], block) - long).abs().max().item() > 1e-3
    cfg["dflash_config"]["context_window"] = 0
    with pytest.raises(ValueError, match="context_window must be an integer >= 1"):
        DFlashDrafter.from_pretrained(write(tmp_path / "bad", cfg, sd), target=qwen)


def test_default_target_layer_ids_rule(tmp_path: Path, qwen: torch.nn.Module) -> None:
    assert default_target_layer_ids(36, 1) == (18,)
    assert default_target_layer_ids(36, 5) == (1, 9, 17, 25, 33)  # the published Qwen3-8B drafter's ids
    assert default_target_layer_ids(8, 3) == (1, 3, 5)
    assert default_target_layer_ids(7, 3) == (1, 2, 4)  # 2.5 rounds half to even: 2, not 3
    assert default_target_layer_ids(11, 5) == (1, 3, 4, 6, 8)  # 2.75 -> 3, 4.5 -> 4, 6.25 -> 6
    cfg = dflash_config(layers=3)  # no target_layer_ids: the rule with L = num_target_layers = 8
    drafter = DFlashDrafter.from_pretrained(write(tmp_path / "d", cfg, dflash_state(cfg)), target=qwen)
    assert drafter.target_layer_ids == (1, 3, 5) and drafter.feature_layers == (2, 4, 6)


# ------------------------------------------------------------------ decoding
def reference(model: torch.nn.Module, prompt: list[int], new: int) -> list[int]:
    ids = torch.tensor([prompt])
    out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=new,
                         min_new_tokens=new)
    return out[0, len(prompt) :].tolist()


class Rigged:
    """Mixin: the real forward, then each row pushed towards the target's true continuation (known from the
    reference run) with probability ``agree`` — a drafter that agrees with the target often."""

    def setup(self, prompt: list[int], truth: list[int], agree: float, seed: int) -> None:
        self.prompt_len, self.truth, self.agree, self.rng = len(prompt), truth, agree, random.Random(seed)

    def propose(self, state, step):  # type: ignore[no-untyped-def]
        self._done = len(step.context) - self.prompt_len  # tokens emitted so far (root included)
        return super().propose(state, step)  # type: ignore[misc]

    def draft_logits(self, features, block_ids, state=None, *, head=None):  # type: ignore[no-untyped-def]
        logits = super().draft_logits(features, block_ids, state, head=head).clone()  # type: ignore[misc]
        for r in range(logits.shape[0]):
            i = self._done + r
            if i < len(self.truth) and self.rng.random() < self.agree:
                logits[r, self.truth[i]] += 50.0
        return logits


class RiggedChain(Rigged, DFlashDrafter):
    pass


class RiggedTree(Rigged, DFlashTreeDrafter):
    pass


@pytest.mark.parametrize("family", ["qwen3", "llama", "qwen3_moe"])
def test_greedy_lossless_chain_and_tree(tmp_path: Path, family: str) -> None:
    model = make_target(family)
    target = TargetModel(model)
    cfg = dflash_config(layers=2, ids=[1, 4, 5], block=6)
    path = write(tmp_path / "d", cfg, dflash_state(cfg, seed=7))
    plain = {"dflash": DFlashDrafter.from_pretrained(path, target=target),
             "dflash-tree": DFlashTreeDrafter.from_pretrained(path, target=target)}
    rigged = {"dflash": RiggedChain.from_pretrained(path, target=model),
              "dflash-tree": RiggedTree.from_pretrained(path, target=model)}
    taus: dict[str, list[float]] = {"dflash": [], "dflash-tree": []}
    rng = random.Random(1)
    settings = {"dflash": DFlashSettings(), "dflash-tree": DFlashTreeSettings(top_k=4, max_nodes=12)}
    for p in range(4):
        prompt = [rng.randrange(V) for _ in range(rng.randint(3, 20))]
        want = reference(model, prompt, NEW)
        for key in ("dflash", "dflash-tree"):
            got, steps = generate(target, prompt, plain[key], settings=settings[key], max_new_tokens=NEW)
            assert got == want, (family, key, "random")
            assert all(s.method == key for s in steps)
            rigged[key].setup(prompt, want, agree=0.9, seed=p)
            got, steps = generate(target, prompt, rigged[key], settings=settings[key], max_new_tokens=NEW)
            assert got == want, (family, key, "rigged")
            taus[key].append(summarize(steps).tau)
    for key, t in taus.items():
        assert np.mean(t) > 3.0, (family, key, t)


def test_upstream_chain_rule_step_by_step(tmp_path: Path, qwen: torch.nn.Module) -> None:
    """The engine's ``dflash`` steps equal a tiny literal upstream loop: cache-free draft, argmax chain,
    full recompute of the target, longest matching prefix + bonus."""
    cfg = dflash_config(layers=2, block=5)
    path = write(tmp_path / "d", cfg, dflash_state(cfg, seed=5))
    target = TargetModel(qwen)
    for rig in (False, True):
        drafter = (RiggedChain if rig else DFlashDrafter).from_pretrained(path, target=qwen)
        prompt = [3, 14, 15, 92, 65, 35, 89, 79]
        truth = reference(qwen, prompt, 30)
        if rig:
            drafter.setup(prompt, truth, agree=0.7, seed=3)
            ref_drafter = RiggedChain.from_pretrained(path, target=qwen)
            ref_drafter.setup(prompt, truth, agree=0.7, seed=3)
        else:
            ref_drafter = drafter
        steps = [s for s in stream(target, prompt, drafter, max_new_tokens=30) if not s.prefill]
        expected = upstream_chain(qwen, ref_drafter, prompt, truth[0], 30, rigged=rig)
        assert [(s.tokens, s.accepted) for s in steps] == expected
        assert all(s.tree_size <= 5 for s in steps) and steps[0].tree_size == 5


def upstream_chain(qwen: torch.nn.Module, drafter: DFlashDrafter, prompt: list[int], first: int, new: int, *,
                   rigged: bool = False) -> list[tuple[list[int], int]]:
    """The literal upstream loop's (emitted tokens, accepted drafts) per step: the cache-free draft scored with
    the target's own float32 head, its argmax chain, a full recompute of the target, longest matching prefix +
    bonus."""
    seq = [*prompt, first]
    expected = []
    while len(seq) - len(prompt) < new:
        x = seq[-1]
        ctx = target_ctx(qwen, seq[:-1], drafter.target_layer_ids)
        if rigged:
            drafter._done = len(seq) - len(prompt)  # type: ignore[attr-defined]
        block = [x] + [drafter.mask_token_id] * (drafter.block_size - 1)
        chain = drafter.draft_logits(ctx, block).argmax(-1).tolist()
        with torch.no_grad():
            top = qwen(torch.tensor([seq + chain])).logits[0, len(seq) - 1 :].argmax(-1).tolist()
        acc = 0
        while acc < len(chain) and chain[acc] == top[acc]:
            acc += 1
        emitted = [*chain[:acc], top[acc]]
        room = new - (len(seq) - len(prompt))
        expected.append((emitted[:room], min(acc, room - 1)))  # the engine drafts room - 1 at most
        seq += emitted[:room]
    return expected


def test_sampling_keeps_target_distribution(tmp_path: Path) -> None:
    """The second emitted token (the first from a verify step) vs Σ_x1 p(x1) q(x2 | x1), chi-square, for the
    chain (one-hot draft rule) and the tree."""
    vocab = 12
    model = make_target("qwen3", seed=11, vocab=vocab)
    target = TargetModel(model)
    cfg = dflash_config(layers=1, block=4, mask=vocab - 1)
    cfg["vocab_size"] = vocab
    path = write(tmp_path / "d", cfg, dflash_state(cfg, seed=1, scale=1.0))
    sampling = SamplingConfig(temperature=1.3, top_p=0.95)
    prompt = [3, 1, 4, 1, 5]
    with torch.no_grad():
        p1 = processed_probs(model(torch.tensor([prompt])).logits[0, -1], sampling)
        q2 = processed_probs(model(torch.tensor([[*prompt, x] for x in range(vocab)])).logits[:, -1], sampling)
    expected = (p1[:, None] * q2).sum(0).double().numpy()
    n = 1500
    for cls, settings in ((DFlashDrafter, DFlashSettings()), (DFlashTreeDrafter, DFlashTreeSettings(top_k=3,
                                                                                                 max_nodes=8))):
        drafter = cls.from_pretrained(path, target=model)
        gen = torch.Generator().manual_seed(0)
        counts, drafted = np.zeros(vocab), 0
        for _ in range(n):
            # 3 tokens: the prefill's, then a verify step with room for one draft token and the bonus (with 2,
            # every draft is truncated away and only the target would be sampled)
            got, steps = generate(target, prompt, drafter, sampling=sampling, max_new_tokens=3, generator=gen,
                                  settings=settings)
            counts[got[1]] += 1
            drafted += steps[1].tree_size > 1
        assert drafted == n, f"{cls.__name__}: only {drafted} of {n} verify steps had a draft"
        assert chi_square_pvalue(counts, expected) > 1e-3, cls.__name__


# ------------------------------------------------------------------ refusals
def test_refusals_name_the_problem(tmp_path: Path, qwen: torch.nn.Module) -> None:
    cfg = dflash_config(layers=2)
    sd = dflash_state(cfg)
    n = iter(range(100))

    def load(c: dict = cfg, s: dict = sd, cls: type = DFlashDrafter, target: object = qwen) -> object:
        return cls.from_pretrained(write(tmp_path / f"d{next(n)}", c, s), target=target)

    prefixed = load(s={"model." + k: v for k, v in sd.items()})  # a leading model. prefix is stripped
    assert isinstance(prefixed, DFlashDrafter)
    with pytest.raises(LoadError, match=r"missing keys \['layers.1.self_attn.k_norm.weight'\]"):
        load(s={k: v for k, v in sd.items() if k != "layers.1.self_attn.k_norm.weight"})
    with pytest.raises(LoadError, match=r"unexpected keys \['embed_tokens.weight'\]"):
        load(s=sd | {"embed_tokens.weight": torch.zeros(V, H)})
    with pytest.raises(LoadError, match=r"fc.weight: \(32, 96\) != expected \(32, 64\)"):
        load(s=sd | {"fc.weight": torch.zeros(H, 3 * H)})
    with pytest.raises(LoadError, match="non-finite"):
        load(s=sd | {"norm.weight": torch.full((H,), float("nan"))})
    with pytest.raises(LoadError, match="sliding_attention"):
        load(c=cfg | {"layer_types": ["full_attention", "sliding_attention"]})
    with pytest.raises(LoadError, match="dflash_config"):
        load(c={k: v for k, v in cfg.items() if k != "dflash_config"})
    with pytest.raises(LoadError, match="block_size"):
        load(c=cfg | {"block_size": 1})
    with pytest.raises(LoadError, match="mask_token_id 500 is outside the target's embedding"):
        load(c=cfg | {"dflash_config": {"mask_token_id": 500}})
    with pytest.raises(LoadError, match=r"target_layer_ids \[1, 9\]: \[9\] past the target's 8 decoder layers"):
        load(c=cfg | {"num_target_layers": 36, "dflash_config": {"mask_token_id": 1, "target_layer_ids": [1, 9]}},
             s=sd | {"fc.weight": torch.zeros(H, 2 * H)})
    with pytest.raises(LoadError, match="outside the num_target_layers=8"):
        load(c=cfg | {"dflash_config": {"mask_token_id": 1, "target_layer_ids": [1, 8]}})
    other = C.tiny_qwen3(vocab=V, hidden=48, layers=8)
    with pytest.raises(LoadError, match="hidden size is 48, the DFlash drafter's 32"):
        load(target=other)
    with pytest.raises(LoadError, match="rope_scaling"):
        load(c=cfg | {"rope_scaling": {"rope_type": "yarn", "factor": 4.0}})
    drafter = load()
    with pytest.raises(ValueError, match=r"features must be \[n, 64\]"):
        drafter.draft_logits(torch.zeros(3, 96), [1, 2])
    with pytest.raises(TypeError, match="DFlashSettings"):
        drafter.new_state(DFlashTreeSettings())


def test_loads_from_target_checkpoint_dir(tmp_path: Path, qwen: torch.nn.Module) -> None:
    cfg = dflash_config(layers=1)
    sd = dflash_state(cfg)
    path = write(tmp_path / "d", cfg, sd)
    qwen.save_pretrained(tmp_path / "target")
    a = DFlashDrafter.from_pretrained(path, target=str(tmp_path / "target"))
    b = DFlashDrafter.from_pretrained(path, target=qwen)
    ctx = torch.randn(5, a.fc.in_features)
    torch.testing.assert_close(a.draft_logits(ctx, [3, V - 1, V - 1]), b.draft_logits(ctx, [3, V - 1, V - 1]))


def test_proposal_head_is_bf16_on_a_cpu_with_native_bf16(tmp_path: Path, qwen: torch.nn.Module) -> None:
    """The racers score proposals with a bf16 copy of a float32 lm_head where the CPU multiplies bf16 natively
    (the full-vocabulary matmul of a few rows is ~10x faster there); draft_logits stays exact by default, and the
    proposals are those of the bf16 head."""
    from dart_core.engine.cpu import cpu_has_native_bf16

    cfg = dflash_config()
    path = write(tmp_path / "d", cfg, dflash_state(cfg))
    drafter = DFlashDrafter.from_pretrained(path, target=qwen)
    fast = cpu_has_native_bf16()
    assert drafter.proposal_head.dtype == (torch.bfloat16 if fast else torch.float32)
    assert drafter.double().proposal_head.dtype == torch.float64  # only a float32 head gets a bf16 copy
    drafter = drafter.float()
    target = TargetModel(qwen)
    prompt = [3, 17, 5, 9, 22, 41]
    state, st = drafter.new_state(), target.new_state()
    _, feats = target.prefill(st, torch.tensor([prompt]), layers=drafter.feature_layers)
    from dart_core.engine.drafter import DraftInput

    step = DraftInput(features=feats, token_ids=torch.tensor([*prompt[1:], 7]),
                      context=np.array([*prompt, 7], dtype=np.int32))
    proposal = drafter.propose(state, step)
    exact = drafter.draft_logits(feats, drafter._block(7))
    assert exact.dtype == torch.float32
    scored = drafter.draft_logits(feats, drafter._block(7), head=drafter.proposal_head)
    assert proposal.tree.tokens[1:].tolist() == scored.argmax(-1).tolist()[: len(proposal.tree.tokens) - 1]
    assert (scored - exact).abs().max() <= 0.02 * max(1.0, float(exact.abs().max())) if fast else torch.equal(
        scored, exact)


def test_exact_proposals_match_upstream_where_the_bf16_head_flips_one(tmp_path: Path, qwen: torch.nn.Module,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A head rigged so that two tokens tie in bf16 but not in float32: the row after the root scores the target's
    next token b at (1 + 2^-12) x the logit of a token a < b, every entry of both rows exact in bf16. On a CPU with
    native bf16 (faked here) the default proposals come from the bf16 copy, where a and b tie and argmax takes a:
    the first draft is rejected. With ``exact_proposals`` the chain is upstream's (the float32 argmax, b) and every
    step's accepted drafts equal the literal upstream loop's; both outputs are the target's own."""
    from dart_core.drafters import dflash

    monkeypatch.setattr(dflash, "cpu_has_native_bf16", lambda flags=None: True)
    cfg = dflash_config(layers=2, block=5)
    path = write(tmp_path / "d", cfg, dflash_state(cfg, seed=5))
    drafter = DFlashDrafter.from_pretrained(path, target=qwen)
    prompt, new = [3, 14, 15, 92, 65, 35, 89, 79], 24
    truth = reference(qwen, prompt, new)
    root, b = truth[0], truth[1]
    assert b > 0, "the rig needs a token id below the target's next token"
    a = b - 1
    block = [root] + [drafter.mask_token_id] * 4
    ctx = target_ctx(qwen, prompt, drafter.target_layer_ids)
    hidden = drafter.draft_logits(ctx, block, head=torch.eye(H))[0]  # the normed row that predicts after the root
    v = (8.0 * hidden / hidden.dot(hidden)).to(torch.bfloat16).float()  # logit 8, every entry exact in bf16
    head = 0.01 * torch.randn(V, H, generator=torch.Generator().manual_seed(0))
    head[a], head[b] = v, v * (1 + 2**-12)  # rounds back to v in bf16 (half an ulp is >= 2^-9 relative)
    drafter.lm_head_weight, drafter._proposal_head = head, None
    assert drafter.proposal_head.dtype == torch.bfloat16  # the default on such a CPU
    exact, bf16 = drafter.draft_logits(ctx, block)[0], drafter.draft_logits(ctx, block, head=drafter.proposal_head)[0]
    assert exact[b] > exact[a] and int(exact.argmax()) == b
    assert bf16[a] == bf16[b] and int(bf16.argmax()) == a  # the tie, broken toward the lower id

    target = TargetModel(qwen)
    runs = {}
    for exact_proposals in (False, True):
        settings = DFlashSettings(exact_proposals=exact_proposals)
        runs[exact_proposals] = [s for s in stream(target, prompt, drafter, settings=settings, max_new_tokens=new)
                                 if not s.prefill]
    upstream = upstream_chain(qwen, drafter, prompt, root, new)
    assert [(s.tokens, s.accepted) for s in runs[True]] == upstream
    assert upstream[0][1] >= 1 and runs[False][0].accepted == 0  # the flip costs the default its first draft
    for steps in runs.values():
        assert [t for s in steps for t in s.tokens] == truth[1:]

    tree = DFlashTreeDrafter.from_pretrained(path, target=qwen)
    tree.lm_head_weight, tree._proposal_head = head, None
    from dart_core.engine.drafter import DraftInput

    _, feats = target.prefill(st := target.new_state(), torch.tensor([prompt]), layers=tree.feature_layers)
    step = DraftInput(features=feats, token_ids=torch.tensor([*prompt[1:], root]),
                      context=np.array([*prompt, root], dtype=np.int32))
    firsts = {}
    for exact_proposals in (False, True):
        settings = DFlashTreeSettings(top_k=1, ngram_weight=0.0, max_nodes=4, exact_proposals=exact_proposals)
        firsts[exact_proposals] = int(tree.propose(tree.new_state(settings), step).tree.tokens[1])
    del st
    assert firsts == {False: a, True: b}  # the tree's proposals follow the same head


@pytest.mark.parametrize(("flags", "native"), [
    ({"avx512f", "avx512bw", "avx512_vnni", "avx512_bitalg"}, False),  # AVX-512 without bf16: this CI machine
    ({"avx512f", "avx512_bf16"}, True),
    ({"avx2", "amx_tile", "amx_bf16"}, True),
    (set(), False),
])
def test_native_bf16_is_read_from_the_cpu_flags(tmp_path: Path, flags: set[str], native: bool) -> None:
    """The bf16 copy is made only where the CPU lists AVX512-BF16 or AMX-BF16 (oneDNN's own check answers True
    on any AVX-512 CPU); the flags come from /proc/cpuinfo's first ``flags`` line."""
    from dart_core.engine.cpu import cpu_flags, cpu_has_native_bf16, cpu_model_name

    assert cpu_has_native_bf16(frozenset(flags)) is native
    info = tmp_path / "cpuinfo"
    info.write_text(f"processor\t: 0\nmodel name\t: a CPU\nflags\t\t: {' '.join(sorted(flags))}\n\n"
                    "processor\t: 1\nflags\t\t: avx512_bf16\n")
    assert cpu_flags(info) == frozenset(flags)
    assert cpu_flags(tmp_path / "missing") == frozenset()
    assert cpu_model_name(info) == "a CPU" and cpu_model_name(tmp_path / "missing") is None


@pytest.mark.parametrize(("flags", "tier"), [
    ("avx2 avx512f avx512_bf16", "AVX-512 with native bf16"),
    ("avx2 avx512f avx512bw", "AVX-512"),
    ("sse4_2 avx2 fma", "AVX2"),
    ("sse4_2", "no AVX2"),
])
def test_cpu_description_names_the_generation_and_vector_tier(tmp_path: Path, flags: str, tier: str) -> None:
    """A benchmark's record names the CPU by its family and model numbers too (a masked ``AMD EPYC`` name does
    not tell Zen 1 from Zen 5) and by the widest vector tier its flags list; no cpuinfo gives None."""
    from dart_core.engine.cpu import cpu_description

    info = tmp_path / "cpuinfo"
    info.write_text(f"processor\t: 0\ncpu family\t: 23\nmodel\t\t: 1\nmodel name\t: AMD EPYC\nflags\t\t: {flags}\n")
    assert cpu_description(info) == f"AMD EPYC (family 23, model 1, {tier})"
    info.write_text(f"model name\t: Some CPU\nflags\t\t: {flags}\n")
    assert cpu_description(info) == f"Some CPU ({tier})"
    assert cpu_description(tmp_path / "missing") is None


def test_exact_proposals_is_a_switch_on_every_command_line() -> None:
    """The setting is a knob of both racers' settings: ``--dflash-exact-proposals`` / ``--no-…`` on the generate and
    bench CLIs (derived from the knobs) and on the app's, which applies it to the races' defaults; a value that is
    not a bool is refused naming it."""
    import argparse
    import dataclasses

    from dart_arena.__main__ import build_parser
    from dart_core.drafters.settings import check_settings
    from dart_core.options import add_racer_settings_arguments, given_settings, knob_argv, racer_settings
    from dart_core.racers.registry import racer

    p = argparse.ArgumentParser()
    add_racer_settings_arguments(p)
    given = racer_settings(p.parse_args(["--dflash-exact-proposals", "--dflash-tree-top-k", "3"]), "cpu")
    assert given["dflash"].exact_proposals is True and given["dflash-tree"].exact_proposals is False
    assert given["dflash-tree"].top_k == 3
    assert racer_settings(p.parse_args(["--no-dflash-tree-exact-proposals"]), "cpu")["dflash-tree"] == \
        racer("dflash-tree").default_settings("cpu")
    assert "--dflash-exact-proposals" in p.format_help() and "default off" in p.format_help()
    (k,) = [k for k in racer("dflash").knobs() if k.name == "exact_proposals"]
    assert knob_argv(racer("dflash"), k, True) == ["--dflash-exact-proposals"]
    assert knob_argv(racer("dflash"), k, False) == ["--no-dflash-exact-proposals"]
    assert not k.ui  # a switch, never a slider

    args = build_parser().parse_args(["--dflash-tree-exact-proposals"])
    defaults = racer("dflash-tree").default_settings("cpu")
    assert given_settings(args, "dflash-tree", defaults) == dataclasses.replace(defaults, exact_proposals=True)
    assert given_settings(args, "dflash", DFlashSettings()) == DFlashSettings()
    with pytest.raises(ValueError, match="exact proposals: expected true or false, got 1"):
        check_settings(DFlashSettings(exact_proposals=1), "DFlash")  # type: ignore[arg-type]


def test_the_app_benchmark_passes_the_switch_to_both_runs(tmp_path: Path) -> None:
    """``bench app --dflash-exact-proposals``: the app gets the switch as its flag (it has no control for it) and the
    e2e run as its own; the page's sliders are set only for numeric settings."""
    import argparse

    from dart_arena.__main__ import build_parser
    from dart_core.bench import e2e, in_app

    p = argparse.ArgumentParser()
    in_app.add_arguments(p)
    args = p.parse_args(["--dflash-exact-proposals", "--dflash-tree-nodes", "8"])
    assert in_app.tree_flags(args) == ["--dflash-exact-proposals", "--dflash-tree-nodes", "8"]
    src = e2e.Sources(base="b", drafters={}, ngram=None, small_ngram=False, prompts=None, chat=False,
                      bundle=tmp_path)
    cmd = in_app.app_command(args, src, 7860, tmp_path / "log.jsonl")
    assert "--dflash-exact-proposals" in cmd and "--dflash-tree-nodes" not in cmd
    assert build_parser().parse_args(cmd[3:]).dflash__exact_proposals is True  # the app accepts what it is given
