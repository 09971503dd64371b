"""Writers of small checkpoints in exactly the published formats (docs/formats.md), and
tiny random targets built from configs, shared by the engine tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file


def tiny_qwen3(vocab: int = 97, hidden: int = 32, layers: int = 8, seed: int = 0, head_dim: int = 16, **kw: Any) -> Any:
    from transformers import AutoModelForCausalLM, Qwen3Config

    torch.manual_seed(seed)
    cfg = Qwen3Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=head_dim,
                      max_position_embeddings=512, tie_word_embeddings=False, **kw)
    return AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").eval()


def tiny_target(family: str, *, vocab: int = 97, hidden: int = 32, layers: int = 8, seed: int = 0) -> Any:
    """A tiny random HF causal LM of ``family`` (qwen3, llama or qwen3-moe) built from a config: SDPA attention,
    no end-of-text (so generations run to their length), untied head."""
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen3Config, Qwen3MoeConfig

    torch.manual_seed(seed)
    common = dict(vocab_size=vocab, hidden_size=hidden, intermediate_size=64, num_hidden_layers=layers,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=False)
    if family == "qwen3":
        cfg = Qwen3Config(head_dim=16, **common)
    elif family == "llama":
        cfg = LlamaConfig(**common)
    else:
        cfg = Qwen3MoeConfig(head_dim=8, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                             decoder_sparse_step=1, **common)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


def drafter_config(kind: str, *, vocab: int, hidden: int, draft_vocab: int | None = None, head_dim: int | None = None,
                   draft_length: int = 4, **extra: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "architectures": ["LlamaForCausalLMDart" if kind == "dart" else "LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": 2 * hidden,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "max_position_embeddings": 512,
        "hidden_act": "silu",
        "vocab_size": vocab,
        "draft_vocab_size": draft_vocab or vocab,
        "num_hidden_layers": 1,
        "torch_dtype": "float32",
    }
    if head_dim is not None:
        cfg["head_dim"] = head_dim
    if kind == "dart":
        cfg["draft_length"] = draft_length
    cfg.update(extra)
    return cfg


def random_drafter_state(
    cfg: dict[str, Any], *, kind: str, seed: int = 0, scale: float = 0.2
) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    H, inter = cfg["hidden_size"], cfg["intermediate_size"]
    Ht = cfg.get("target_hidden_size", H)
    hd = cfg.get("head_dim") or H // cfg["num_attention_heads"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    V, Vd = cfg["vocab_size"], cfg["draft_vocab_size"]

    def w(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g) * scale

    state = {
        "fc.weight": w(H, 3 * Ht),
        "midlayer.input_layernorm.weight": 1 + w(H),
        "midlayer.hidden_norm.weight": 1 + w(H),
        "midlayer.post_attention_layernorm.weight": 1 + w(H),
        "midlayer.self_attn.q_proj.weight": w(q, 2 * H),
        "midlayer.self_attn.k_proj.weight": w(kv, 2 * H),
        "midlayer.self_attn.v_proj.weight": w(kv, 2 * H),
        "midlayer.self_attn.o_proj.weight": w(H, q),
        "midlayer.mlp.gate_proj.weight": w(inter, H),
        "midlayer.mlp.up_proj.weight": w(inter, H),
        "midlayer.mlp.down_proj.weight": w(H, inter),
        "norm.weight": 1 + w(H),
        "lm_head.weight": w(Vd, H) * 5,
    }
    if kind == "dart":
        state["midlayer.mask_rep"] = w(2 * H)
    # draft vocab = every other target id from 1 (so d2t is not the identity when Vd < V)
    draft_to_target = torch.arange(Vd) * (V // Vd if Vd < V else 1)
    state["d2t"] = draft_to_target - torch.arange(Vd)
    t2d = torch.zeros(V, dtype=torch.bool)
    t2d[draft_to_target] = True
    state["t2d"] = t2d
    return state


def write_drafter(path: Path, cfg: dict[str, Any], state: dict[str, torch.Tensor], *, fmt: str = "safetensors") -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(cfg))
    if fmt == "safetensors":
        save_file({k: v.contiguous() for k, v in state.items()}, path / "model.safetensors")
    else:
        torch.save(state, path / "pytorch_model.bin")
    return path


def write_target_weights(path: Path, model: Any, *, sharded: bool) -> Path:
    """A target checkpoint directory: model.safetensors, or two shards + model.safetensors.index.json."""
    path.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    if not sharded:
        save_file(state, path / "model.safetensors")
        return path
    keys = sorted(state)
    halves = [keys[: len(keys) // 2], keys[len(keys) // 2 :]]
    weight_map = {}
    for i, part in enumerate(halves, 1):
        name = f"model-{i:05d}-of-00002.safetensors"
        save_file({k: state[k] for k in part}, path / name)
        weight_map.update(dict.fromkeys(part, name))
    (path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return path


def word_tokenizer(vocab: int) -> Any:
    """A word-level fast tokenizer over ``vocab`` ids: specials first, then words w0, w1, ..."""
    import tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_end|>"]
    words = specials + [f"w{i}" for i in range(vocab - len(specials))]
    tk = tokenizers.Tokenizer(tokenizers.models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="w0"))
    tk.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tk.decoder = tokenizers.decoders.WordPiece(prefix="##")  # joins words with spaces
    return PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|endoftext|>", unk_token="w0",
                                   additional_special_tokens=["<|im_end|>"])


def hf_greedy(model: torch.nn.Module, prompt: list[int], new: int) -> list[int]:
    """transformers' own greedy ``generate``: exactly ``new`` tokens after ``prompt`` (the reference output)."""
    ids = torch.tensor([prompt])
    out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=new,
                         min_new_tokens=new)
    return out[0, len(prompt) :].tolist()


def write_bench_bundle(root: Path, *, vocab: int = 97) -> Path:
    """The toy bundle of :func:`write_tiny_bundle` with an order-3 store of random text and five word prompts:
    what ``bench e2e`` needs to race every racer offline."""
    import numpy as np

    from dart_core.ngram.store import NgramStore

    write_tiny_bundle(root, vocab=vocab)
    rng = np.random.default_rng(0)
    (root / "ngram").mkdir()
    NgramStore.build([rng.integers(2, vocab, size=400) for _ in range(8)], order=3).save(root / "ngram/small.ngram")
    lines = [json.dumps({"id": f"p{i}", "prompt": " ".join(f"w{int(t)}" for t in rng.integers(0, 90, size=12))})
             for i in range(5)]
    (root / "prompts.jsonl").write_text("\n".join(lines) + "\n")
    return root


def write_tiny_bundle(root: Path, *, vocab: int = 97, hidden: int = 32, seed: int = 0) -> dict[str, Path]:
    """target/ (HF save_pretrained + tokenizer), dart/, eagle3/ in the published formats."""
    model = tiny_qwen3(vocab=vocab, hidden=hidden, seed=seed)
    model.generation_config.eos_token_id = None
    model.config.eos_token_id = None
    model.save_pretrained(root / "target")
    word_tokenizer(vocab).save_pretrained(root / "target")
    paths = {"target": root / "target"}
    for kind in ("dart", "eagle3"):
        cfg = drafter_config(kind, vocab=vocab, hidden=hidden, draft_vocab=vocab // 2)
        paths[kind] = write_drafter(root / kind, cfg, random_drafter_state(cfg, kind=kind, seed=seed + 1))
    return paths
