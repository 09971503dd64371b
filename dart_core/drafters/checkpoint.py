"""Loading the published drafter checkpoints: config, weights (safetensors, or ``pytorch_model.bin`` with
``weights_only=True``), strict key/shape checks, and the token embedding shared with the target."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from dart_core.drafters.config import DrafterConfig
from dart_core.loading.errors import LoadError, exception_text
from dart_core.loading.hub import HubFileError, load_tensor, resolve_file, resolve_first, weights_only_problem
from dart_core.loading.layouts import SAFE_SINGLE, SINGLE_WEIGHTS

# Where a target checkpoint keeps its input embedding (plain causal LMs, and multimodal wrappers).
EMBEDDING_KEYS = ("model.embed_tokens.weight", "embed_tokens.weight", "model.language_model.embed_tokens.weight")


def load_config(ref: str | os.PathLike[str], *, revision: str | None = None, config_type: type = DrafterConfig) -> Any:
    """A drafter checkpoint's ``config.json`` parsed by ``config_type.from_dict`` (:class:`DrafterConfig` for the
    Llama-style heads); a file that is not a JSON object is a LoadError naming it."""
    path = resolve_file(ref, "config.json", revision=revision)
    assert path is not None
    return config_type.from_dict(read_json_object(path), source=str(path))


def read_json_object(path: Path) -> dict[str, Any]:
    """A ``config.json`` as a dict; a file that is not a JSON object is a LoadError naming it."""
    try:
        raw = json.loads(path.read_text())
    except ValueError as e:
        raise LoadError(path, f"not valid JSON ({e})") from None
    if not isinstance(raw, dict):
        raise LoadError(path, "expected a JSON object")
    return raw


def load_weights(
    ref: str | os.PathLike[str], *, revision: str | None = None, allow_bin: bool = False
) -> dict[str, torch.Tensor]:
    """All tensors of a drafter checkpoint, on CPU. Pickles are never unpickled beyond plain tensor dicts."""
    return load_weights_file(ref, revision=revision, allow_bin=allow_bin)[1]


def load_weights_file(
    ref: str | os.PathLike[str], *, revision: str | None = None, allow_bin: bool = False
) -> tuple[Path, dict[str, torch.Tensor]]:
    """The weights file of a drafter checkpoint and all its tensors, on CPU: the path, so that a later check
    (a tensor's shape, a NaN) can name the file it refuses. A file that cannot be read is a LoadError."""
    names = list(SINGLE_WEIGHTS) if allow_bin else [SAFE_SINGLE]
    path = resolve_first(ref, names, revision=revision)
    if path.name.endswith(".safetensors"):
        from safetensors.torch import load_file

        try:
            return path, load_file(str(path))
        except Exception as e:  # safetensors has its own error types for corrupt files
            raise LoadError(path, f"not a readable safetensors file ({exception_text(e)}): truncated or "
                                  "damaged?") from None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise LoadError(path, weights_only_problem(e)) from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise LoadError(path, "expected a flat dict of tensors")
    return path, state


def check_state(
    state: dict[str, torch.Tensor],
    expected: dict[str, tuple[int, ...]],
    *,
    optional: frozenset[str] = frozenset(),
    source: str,
) -> None:
    """Fail loudly (unlike the reference's ``strict=False``) on missing, unexpected, mis-shaped or non-finite
    tensors: a LoadError of ``source`` (the weights file) naming the tensors."""
    missing = sorted(k for k in expected if k not in state and k not in optional)
    unexpected = sorted(k for k in state if k not in expected)
    wrong = [f"{k}: {tuple(state[k].shape)} != expected {expected[k]}" for k in sorted(expected)
             if k in state and tuple(state[k].shape) != expected[k]]
    problems = []
    if missing:
        problems.append(f"missing keys {missing}")
    if unexpected:
        problems.append(f"unexpected keys {unexpected}")
    if wrong:
        problems.append("shape mismatches: " + "; ".join(wrong))
    if problems:
        raise LoadError(source, "checkpoint does not match its config: " + ", ".join(problems))
    bad = non_finite(state)
    if bad:  # such a drafter would load and propose garbage every step (or fail mid-race)
        raise LoadError(source, f"non-finite values (NaN or inf) in {bad}: a damaged or diverged checkpoint")


def non_finite(state: dict[str, torch.Tensor]) -> list[str]:
    """The floating-point tensors of ``state`` that hold a NaN or an infinity, by name."""
    return sorted(k for k, v in state.items() if v.is_floating_point() and not bool(torch.isfinite(v).all()))


def resolve_embedding(target: Any, *, revision: str | None = None) -> torch.Tensor:
    """The target's input embedding weight [vocab, hidden] from: a tensor, an ``nn.Embedding``, a HF model or our
    ``TargetModel`` (shared, not copied), or a target checkpoint dir / Hub id (only the tensor is read)."""
    if isinstance(target, torch.Tensor):
        return target
    if isinstance(target, nn.Embedding):
        return target.weight
    for obj in (target, getattr(target, "model", None)):
        if obj is not None and hasattr(obj, "get_input_embeddings"):
            return obj.get_input_embeddings().weight
    if isinstance(target, (str, os.PathLike)):
        try:
            return load_tensor(target, EMBEDDING_KEYS, revision=revision)
        except HubFileError as e:
            raise HubFileError(f"cannot read the target's token embedding: {e}") from None
    raise TypeError(f"target must be a tensor, an embedding, a model or a checkpoint path/id, got {type(target)}")


@dataclass(frozen=True)
class CheckpointFormat:
    """What a racer's checkpoint looks like, declared by its drafter module and carried by its registry entry, so
    the launch check reads it from metadata alone and never names a racer: ``config_type`` parses its
    ``config.json`` (``from_dict(raw, source=)``; :class:`DrafterConfig` for the Llama-style one-layer heads,
    another class for another family); ``weights`` are its weight files, preferred first (empty: a drafter with
    no weights); ``required`` are config fields this format needs beyond the family's; ``shapes(cfg)`` gives the
    tensors its weights must hold (name → shape) and the optional ones, under ``strip`` (a key prefix dropped
    first); ``published(size)`` names the published checkpoint for a Qwen3 target size ("8B"), or ''."""

    config_type: type
    weights: tuple[str, ...] = SINGLE_WEIGHTS
    required: tuple[str, ...] = ()
    shapes: Callable[[Any], tuple[dict[str, tuple[int, ...]], set[str]]] | None = None
    strip: str = ""
    published: Callable[[str], str] | None = None


def layer_shapes(cfg: DrafterConfig) -> dict[str, tuple[int, ...]]:
    """Key → shape of the one-layer drafter (no biases), shared by DART and EAGLE-3."""
    H, Ht, inter = cfg.hidden_size, cfg.target_hidden_size, cfg.intermediate_size
    q, kv = cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim
    return {
        "fc.weight": (H, 3 * Ht),
        "midlayer.input_layernorm.weight": (H,),
        "midlayer.hidden_norm.weight": (H,),
        "midlayer.post_attention_layernorm.weight": (H,),
        "midlayer.self_attn.q_proj.weight": (q, 2 * H),
        "midlayer.self_attn.k_proj.weight": (kv, 2 * H),
        "midlayer.self_attn.v_proj.weight": (kv, 2 * H),
        "midlayer.self_attn.o_proj.weight": (H, q),
        "midlayer.mlp.gate_proj.weight": (inter, H),
        "midlayer.mlp.up_proj.weight": (inter, H),
        "midlayer.mlp.down_proj.weight": (H, inter),
        "norm.weight": (H,),
        "lm_head.weight": (cfg.draft_vocab_size, H),
        "d2t": (cfg.draft_vocab_size,),
        "t2d": (cfg.vocab_size,),
    }


def check_embedding(embed: torch.Tensor, cfg: DrafterConfig, source: str) -> None:
    if embed.dim() != 2 or tuple(embed.shape) != (cfg.vocab_size, cfg.hidden_size):
        raise LoadError(source, f"token embedding has shape {tuple(embed.shape)}, the drafter needs "
                                f"(vocab_size, hidden_size) = ({cfg.vocab_size}, {cfg.hidden_size}); wrong target?")


def check_d2t(d2t: torch.Tensor, cfg: DrafterConfig, source: str) -> None:
    if d2t.dtype not in (torch.int64, torch.int32):
        raise LoadError(source, f"d2t must be an integer tensor, got {d2t.dtype}")
    ids = torch.arange(cfg.draft_vocab_size) + d2t.long()
    if ids.min() < 0 or ids.max() >= cfg.vocab_size:
        raise LoadError(source, f"d2t maps draft ids outside the target vocabulary [0, {cfg.vocab_size})")
