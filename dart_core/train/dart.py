"""DART drafter training (paper: shifted logits, d mask rows, annealed KL with γ = 0.6) on a frozen target.

One forward per batch covers every anchor of every window: the real rows run causally, and each anchor's d mask
rows see the real rows up to the anchor plus the earlier mask rows of their own block, at positions a+1 … a+d —
exactly what ``DartDrafter.draft_logits`` computes for a prefix ending at that anchor (tested)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch

from dart_core.drafters.dart import DartDrafter
from dart_core.engine.target import TargetModel
from dart_core.train.common import (
    TrainConfig,
    fit_drafter,
    kl_and_top1,
    prepare_drafter,
)


def block_mask(n_real: int, anchors: torch.Tensor, d: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention mask [T, T] (True = may attend) and positions [T] for ``n_real`` real rows followed by one block
    of ``d`` mask rows per anchor: real rows causal; block k sees real rows ≤ anchors[k] and its own mask rows up
    to itself; block k's rows sit at positions anchors[k]+1 … anchors[k]+d."""
    a = anchors.long()
    n_blocks = a.shape[0]
    total = n_real + n_blocks * d
    mask = torch.zeros(total, total, dtype=torch.bool)
    mask[:n_real, :n_real] = torch.ones(n_real, n_real, dtype=torch.bool).tril()
    cols = torch.arange(n_real)
    within = torch.ones(d, d, dtype=torch.bool).tril()
    for k in range(n_blocks):
        r0 = n_real + k * d
        mask[r0 : r0 + d, :n_real] = (cols <= a[k])[None]
        mask[r0 : r0 + d, r0 : r0 + d] = within
    positions = torch.cat([torch.arange(n_real), (a[:, None] + torch.arange(1, d + 1)[None]).reshape(-1)])
    return mask, positions


def dart_train_forward(model: DartDrafter, features: torch.Tensor, shifted_ids: torch.Tensor,
                       anchors: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Training forward (with grad, no cache): features [B, R, 3·H_t] and following ids [B, R] of R real rows;
    anchors [A] (each ≤ R−1). Returns (blocks [B, A, d+1, Vd], real [B, R, Vd]): for anchor a, block row 0 = the
    real row a (ranks the token after the root shifted_ids[a]), rows 1..d = its mask rows; ``real`` holds row 0
    of every real row, i.e. the depth-1 prediction as if each row were an anchor."""
    d = model.draft_length
    b, r, _ = features.shape
    mask, positions = block_mask(r, anchors, d)
    logits = model.layer_logits(features, shifted_ids, anchors.shape[0] * d, positions.to(model.device),
                                mask.to(model.device))  # [B, R + A·d, Vd]
    real = logits[:, :r]
    blocks = torch.cat([real[:, anchors.long().to(model.device), None], logits[:, r:].view(b, -1, d, real.shape[-1])],
                       dim=2)
    return blocks, real


def dart_loss(model: DartDrafter, feats: torch.Tensor, teach: torch.Tensor, windows: torch.Tensor,
              g: torch.Generator, *, anchors_per_window: int, gamma: float
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Σ_j γ^(j−1)·KL(teacher ‖ drafter) over the d+1 predicted positions, averaged over anchors and windows.
    Window tokens t[0..n): real row i has features of t[i] and carries t[i+1]; anchor a's depth-j output
    (j = 0..d) predicts t[a+2+j], whose teacher is the target's distribution at position a+1+j.

    Every real row is an anchor for depth 0 at no extra attention cost, so the j = 0 term averages over all real
    rows (R predictions per window instead of A) — the same supervision density EAGLE-3's first step gets; the
    sampled anchors carry the mask-row terms j ≥ 1."""
    d = model.draft_length
    n = windows.shape[1]
    r = n - 1
    last = r - 1 - d  # largest anchor whose deepest prediction is still inside the window
    if last < 0:
        raise ValueError(f"window of {n} tokens is too short for draft_length {d} (need >= {d + 3})")
    n_anchors = min(anchors_per_window, last + 1)
    anchors = torch.randperm(last + 1, generator=g)[:n_anchors].sort().values
    blocks, real = dart_train_forward(model, feats[:, :r], windows[:, 1:].to(model.device), anchors)
    pos = anchors[:, None] + 1 + torch.arange(d + 1)[None]  # [A, d+1]
    kl, top1 = kl_and_top1(teach[:, pos.to(teach.device)], blocks)
    kl0, top10 = kl_and_top1(teach[:, 1:], real)  # real row i predicts t[i+2]; its teacher sits at i+1
    kl_d = torch.cat([kl0.mean()[None], kl.mean((0, 1))[1:]])
    top1_d = torch.cat([top10.mean()[None], top1.mean((0, 1))[1:]])
    weights = gamma ** torch.arange(d + 1, dtype=kl.dtype, device=kl.device)
    loss = (kl_d * weights).sum()
    return loss, kl_d.detach(), top1_d


def train_dart(
    target: str | os.PathLike[str] | TargetModel,
    sequences: Sequence[Sequence[int]],
    out_dir: str | os.PathLike[str],
    config: TrainConfig | None = None,
    *,
    draft_length: int = 8,
    draft_vocab_size: int = 4096,
    anchors_per_window: int = 16,
    gamma: float = 0.6,
    eval_sequences: Sequence[Sequence[int]] | None = None,
    eos_token_id: int | None = None,
    config_overrides: dict[str, Any] | None = None,
    features: Any = None,
    eval_features: Any = None,
    init_from: str | os.PathLike[str] | None = None,
    **train: Any,
) -> dict[str, Any]:
    """Train a DART drafter (the inference ``DartDrafter`` module itself, embedding shared and frozen) on the frozen
    ``target`` (a loaded one, a dir, Hub id or packaged model) over token ``sequences``, run through the target
    online, or read from a stored ``features.FeatureStore`` given as ``features`` (then ``sequences`` only rank the
    draft vocab and the last ``eval_windows`` windows are held out, or the windows of ``eval_features``, a store of
    held-out prompts' answers). Saves ``config.json`` + fp16
    ``model.safetensors`` and ``train_log.jsonl`` in ``out_dir``; returns stats (throughput, last losses,
    held-out eval before/after). ``config`` / ``train``: the budget shared with the other methods (:class:`TrainConfig`
    and its fields by name). ``init_from``: a trained DART drafter of the same shape to continue from (its weights
    and draft vocab), for more data."""
    budget = (config or TrainConfig()).with_(**train)
    prepared = prepare_drafter(
        DartDrafter, "dart", target, sequences, draft_vocab_size=draft_vocab_size, draft_length=draft_length,
        config_overrides=config_overrides, eos_token_id=eos_token_id, seed=budget.seed, threads=budget.threads,
        device=budget.device, init_from=init_from)

    def loss_fn(m: Any, f: torch.Tensor, t: torch.Tensor, w: torch.Tensor, g: torch.Generator) -> Any:
        return dart_loss(m, f, t, w, g, anchors_per_window=anchors_per_window, gamma=gamma)

    return fit_drafter("dart", prepared, loss_fn, sequences, eval_sequences, budget, min_len=draft_length + 3,
                       out_dir=out_dir, features=features, eval_features=eval_features)

