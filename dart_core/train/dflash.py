"""DFlash drafter training on a frozen target: block-wise cross-entropy against the target's own outputs.

Per window of the target's features, a few random anchor positions p: the block is [token p, mask×(B−1)] at
positions p … p+B−1; it sees the context features of the rows before p and itself, bidirectionally; row j predicts
the token at p+j, and its loss is the cross-entropy against the target's distribution there (soft labels: KL up to a
constant), weighted γ^(j−1). The target's embedding and lm_head are shared and frozen. One forward covers every
anchor of every window (one mask), through ``DFlashDrafter.block_hidden``, the code that drafts at inference
(tested equal to the cached drafting call). Saved in the published DFlash format (``config.json`` +
``model.safetensors``, no embedding, no lm_head)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import save_file

from dart_core.drafters.dflash import DFlashConfig, DFlashDrafter
from dart_core.engine.cpu import cpu_has_native_bf16
from dart_core.engine.target import TargetModel
from dart_core.train.common import (
    TrainConfig,
    config_field,
    kl_and_top1,
    load_frozen_target,
    load_start,
    make_windows,
    pick_windows,
    rope_theta_of,
    seed_everything,
    start_config,
    start_weights,
    stored_sources,
)
from dart_core.train.training_loop import train_and_save


def unused_token_id(sequences: Sequence[Sequence[int]], vocab_size: int) -> int:
    """The smallest token id the training data never holds: the mask id (a block row fed this id is never a real
    anchor; its embedding is the target's, frozen, so the drafter learns what it means)."""
    seen = np.zeros(vocab_size, dtype=bool)
    for s in sequences:
        seen[np.asarray(s, dtype=np.int64)] = True
    free = np.flatnonzero(~seen)
    if free.size == 0:
        raise ValueError("every token id of the vocabulary occurs in the training data: pass mask_token_id")
    return int(free[0])


def dflash_config_dict(target: TargetModel, *, block_size: int, mask_token_id: int,
                       target_layer_ids: Sequence[int], num_layers: int = 1,
                       intermediate_size: int | None = None) -> dict[str, Any]:
    """A DFlash ``config.json`` (Qwen3-style, the published fields) shaped like the target's layers."""
    t = target.text_config
    heads = int(t.num_attention_heads)
    return {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "hidden_size": int(t.hidden_size),
        "intermediate_size": int(intermediate_size or t.intermediate_size),
        "num_hidden_layers": int(num_layers),
        "num_attention_heads": heads,
        "num_key_value_heads": int(getattr(t, "num_key_value_heads", None) or heads),
        "head_dim": int(getattr(t, "head_dim", None) or t.hidden_size // heads),
        "hidden_act": "silu",
        "rms_norm_eps": float(getattr(t, "rms_norm_eps", 1e-6)),
        "rope_theta": rope_theta_of(t),
        "rope_scaling": None,
        "max_position_embeddings": int(t.max_position_embeddings),
        "attention_bias": False,
        "layer_types": ["full_attention"] * int(num_layers),
        "vocab_size": int(target.vocab_size),
        "num_target_layers": int(t.num_hidden_layers),
        "block_size": int(block_size),
        "dflash_config": {"mask_token_id": int(mask_token_id), "target_layer_ids": [int(i) for i in target_layer_ids]},
        "torch_dtype": "float16",
    }


def block_mask(n_ctx: int, anchors: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Mask [A·B, n_ctx + A·B] (True = may attend) and positions [n_ctx + A·B] for ``n_ctx`` context rows then one
    block of ``block`` rows per anchor: block k sees the context rows before anchors[k] and all of its own rows;
    its rows sit at positions anchors[k] … anchors[k]+B−1."""
    a = anchors.long()
    n_blocks = a.shape[0]
    rows = n_blocks * block
    mask = torch.zeros(rows, n_ctx + rows, dtype=torch.bool)
    cols = torch.arange(n_ctx)
    for k in range(n_blocks):
        r0 = k * block
        mask[r0 : r0 + block, :n_ctx] = (cols < a[k])[None]
        mask[r0 : r0 + block, n_ctx + r0 : n_ctx + r0 + block] = True
    positions = torch.cat([torch.arange(n_ctx), (a[:, None] + torch.arange(block)[None]).reshape(-1)])
    return mask, positions


def dflash_train_forward(model: DFlashDrafter, features: torch.Tensor, tokens: torch.Tensor,
                         anchors: torch.Tensor) -> torch.Tensor:
    """Training forward (with grad, no cache): features [W, T, n_ids·H] and tokens [W, T] of T rows; anchors [A]
    (each in [1, T−1]). Returns the final hidden states [W, A, B−1, H] of every block's rows 1…B−1 (row j predicts
    the token at anchor + j), before the final norm."""
    b = model.block_size
    w, t, _ = features.shape
    mask, positions = block_mask(t, anchors, b)
    ids = torch.full((w, anchors.shape[0], b), model.mask_token_id, dtype=torch.long, device=model.device)
    ids[:, :, 0] = tokens[:, anchors.long().to(tokens.device)].to(model.device)
    cos, sin = model.rotary.cos_sin(positions.to(model.device), model.dtype)
    h = model.block_hidden(features.to(device=model.device, dtype=model.dtype), ids.view(w, -1), cos, sin,
                           mask=mask[None].to(model.device))
    return h.view(w, anchors.shape[0], b, -1)[:, :, 1:]


def dflash_loss(model: DFlashDrafter, feats: torch.Tensor, head_in: torch.Tensor, windows: torch.Tensor,
                g: torch.Generator, *, teacher: Callable[[torch.Tensor], torch.Tensor], anchors_per_window: int,
                gamma: float, head: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Σ_j γ^(j−1)·CE(target's distribution, drafter) over the block rows j = 1…B−1, averaged over anchors and
    windows (reported as KL per depth with top-1 agreement). ``head_in`` [W, T, H]: the input of the target's
    output head at each row (its distribution for the NEXT token is ``teacher(head_in[row])``); anchor p's row j
    predicts token p+j, whose target distribution comes from row p+j−1. ``head``: the drafter's lm_head weight in
    the dtype its full-vocabulary matmul should run in (default: the model's own, as drafting does)."""
    b = model.block_size
    t = windows.shape[1]
    last = t - b  # largest anchor whose deepest row still has its token inside the window
    if last < 1:
        raise ValueError(f"window of {t} tokens is too short for block size {b} (need >= {b + 1})")
    n_anchors = min(anchors_per_window, last)
    anchors = (torch.randperm(last, generator=g)[:n_anchors] + 1).sort().values  # each has >= 1 context row
    hidden = dflash_train_forward(model, feats, windows, anchors)  # [W, A, B-1, H]
    rows = anchors[:, None] + torch.arange(b - 1)[None]  # [A, B-1]: the teacher rows p … p+B−2
    with torch.no_grad():
        teach = torch.log_softmax(teacher(head_in[:, rows.to(head_in.device)]).float(), dim=-1)
    if head is None:
        logits = model.logits(hidden)
    else:  # the same head, its matmul in ``head.dtype`` (bf16: far faster on a CPU with AVX512-BF16)
        logits = torch.nn.functional.linear(model.norm(hidden).to(head.dtype), head)
    kl, top1 = kl_and_top1(teach, logits)
    kl_d, top1_d = kl.mean((0, 1)), top1.mean((0, 1))
    weights = gamma ** torch.arange(b - 1, dtype=kl.dtype, device=kl.device)
    return (kl_d * weights).sum(), kl_d.detach(), top1_d


class _OnlineHeadInputWindows:
    """The same windows computed by the target at each use (a target as small as the test models)."""

    def __init__(self, target: TargetModel, windows: torch.Tensor, feature_layers: Sequence[int]) -> None:
        self.target, self.windows, self.layers = target, windows, tuple(feature_layers)

    def __len__(self) -> int:
        return int(self.windows.shape[0])

    @torch.no_grad()
    def get(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        from dart_core.train.features import HeadInput

        batch = self.windows[idx].to(self.target.device)
        hook = HeadInput(self.target.model.get_output_embeddings())
        try:
            out = self.target.model(input_ids=batch, output_hidden_states=True, use_cache=False, return_dict=True)
        finally:
            hook.close()
        assert hook.value is not None
        feats = torch.cat([out.hidden_states[j] for j in self.layers], dim=-1).float()
        return batch, feats, hook.value.float()


def _teacher_head(target: TargetModel, weight: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    """The target's output head on head inputs: ``weight`` (the head's weight, in the dtype its matmul should run
    in) with the target's bias and final-logit soft-capping."""
    head = target.model.get_output_embeddings()
    bias = None if head.bias is None else head.bias.detach().to(device=weight.device, dtype=weight.dtype)
    softcap = getattr(target.text_config, "final_logit_softcapping", None)

    def teacher(x: torch.Tensor) -> torch.Tensor:
        logits = torch.nn.functional.linear(x.to(device=weight.device, dtype=weight.dtype), weight, bias).float()
        return torch.tanh(logits / softcap) * softcap if softcap else logits

    return teacher


def save_dflash(model: DFlashDrafter, cfg: dict[str, Any], out_dir: str | os.PathLike[str], *,
                dtype: torch.dtype = torch.float16) -> Path:
    """``config.json`` + ``model.safetensors`` with exactly the published keys (no embedding, no lm_head)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to(dtype).contiguous().cpu() for k, v in model.state_dict().items()}
    save_file(state, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    return out


def train_dflash(
    target: str | os.PathLike[str] | TargetModel,
    sequences: Sequence[Sequence[int]],
    out_dir: str | os.PathLike[str],
    config: TrainConfig | None = None,
    *,
    block_size: int = 8,
    num_layers: int = 1,
    intermediate_size: int | None = None,
    mask_token_id: int | None = None,
    anchors_per_window: int = 8,
    gamma: float = 0.8,
    eval_sequences: Sequence[Sequence[int]] | None = None,
    features: Any = None,
    eval_features: Any = None,
    head_dtype: torch.dtype | None = None,
    init_from: str | os.PathLike[str] | None = None,
    **train: Any,
) -> dict[str, Any]:
    """Train a DFlash drafter (the inference ``DFlashDrafter`` module itself, embedding and lm_head the target's,
    frozen) on the frozen ``target`` over token ``sequences`` (run through the target online), or over a stored
    ``features.FeatureStore`` (its feature layers become ``target_layer_ids``; the last ``eval_windows`` windows
    are held out, or ``eval_features``' windows). The target layers are the target's own feature layers (DART's),
    so one target forward serves both in a race. The full-vocabulary head (teacher and drafter) runs its matmuls
    in ``head_dtype`` (None: bf16 on CUDA and on a CPU with native bf16, where it is the step's largest cost made
    several times cheaper (measured: docs/benchmarks.md#measurements-behind-design-choices), else float32:
    emulated bf16 is slower; softmax and loss in float32). Saves the published
    format and ``train_log.jsonl`` in ``out_dir``; returns stats. ``config`` / ``train``: the shared budget
    (:class:`TrainConfig`; DFlash's windows default to 128 tokens). ``init_from``: a trained DFlash drafter of the
    same shape to continue from (its weights, and its mask token unless ``mask_token_id`` names another, which is
    refused)."""
    budget = (config or TrainConfig(window=128)).with_(**train)
    window, device = budget.window, budget.device
    if budget.threads:
        torch.set_num_threads(budget.threads)
    seed_everything(budget.seed)
    if not isinstance(target, TargetModel):
        target = load_frozen_target(target, device=device)
    layer_ids = [i - 1 for i in (features.meta["feature_layers"] if features is not None else target.feature_layers)]
    if mask_token_id is None and init_from is not None:
        mask_token_id = config_field(start_config(init_from), "dflash_config.mask_token_id")
    if mask_token_id is None:
        mask_token_id = unused_token_id(sequences, target.vocab_size)
    cfg_dict = dflash_config_dict(target, block_size=block_size, mask_token_id=mask_token_id,
                                  target_layer_ids=layer_ids, num_layers=num_layers,
                                  intermediate_size=intermediate_size)
    cfg = DFlashConfig.from_dict(cfg_dict, source="DFlash training config")
    head = target.model.get_output_embeddings()
    model = DFlashDrafter(cfg, target.embed_tokens.weight.detach().float().cpu(), head.weight.detach().float().cpu())
    final_norm = getattr(getattr(target.model, "model", None), "norm", None)
    if init_from is not None:
        load_start(model, start_weights(init_from, "dflash", cfg_dict), init_from)
    elif getattr(final_norm, "weight", None) is not None and final_norm.weight.shape == model.norm.weight.shape:
        with torch.no_grad():  # warm start: the lm_head is the target's, so is the norm before it
            model.norm.weight.copy_(final_norm.weight.float())
    model = model.to(device)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if window < block_size + 1:
        raise ValueError(f"training window of {window} tokens is too short for block size {block_size}")
    # the most context rows a training block sees (its anchor is at most window - block_size): drafting keeps to it
    cfg_dict["dflash_config"]["context_window"] = window - block_size
    if features is not None:  # the head inputs, not a draft-vocab teacher: the loss scores the full vocabulary
        source, eval_source = stored_sources(features, window, budget.eval_windows, eval_features, device=device)
    else:
        if not sequences:
            raise ValueError("no training sequences")
        source = _OnlineHeadInputWindows(target, make_windows(sequences, window, block_size + 1),
                                         target.feature_layers)
        eval_source = (_OnlineHeadInputWindows(target, make_windows(eval_sequences, window, block_size + 1),
                                               target.feature_layers) if eval_sequences else None)
    if head_dtype is None:
        head_dtype = torch.bfloat16 if torch.device(device).type == "cuda" or cpu_has_native_bf16() else torch.float32
    head = model.lm_head_weight.to(head_dtype)  # frozen, the target's own: one copy for teacher and drafter
    teacher = _teacher_head(target, head)

    def loss_fn(m: Any, f: torch.Tensor, t: torch.Tensor, w: torch.Tensor, g: torch.Generator) -> Any:
        return dflash_loss(m, f, t, w, g, teacher=teacher, anchors_per_window=anchors_per_window, gamma=gamma,
                           head=head)

    stats = train_and_save("dflash", model, pick_windows(source, budget), eval_source, loss_fn, out,
                           lambda: save_dflash(model, cfg_dict, out), **budget.loop())
    stats.update(block_size=block_size, mask_token_id=mask_token_id, target_layer_ids=layer_ids,
                 anchors_per_window=anchors_per_window, gamma=gamma, head_dtype=str(head_dtype).removeprefix("torch."))
    return stats
