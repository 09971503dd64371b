"""EAGLE-3 head training with training-time test (TTT) on a frozen target, same data/features/budget knobs as the
DART trainer.

Step 0 feeds fc(features) of every real row causally (= ``Eagle3Drafter.context_pass``). Step s ≥ 1 feeds, at row
i (position i, token = the true following id), the model's own step-(s−1) output of row i−1, attending to step 0's
K/V of rows ≤ i−s and to its own earlier-step rows on the diagonal (step j, row i−s+j) plus itself — exactly what
``draft_tree`` does for a node s levels below the context (tested). Every step's row i predicts t[i+2]. Loss =
Σ_s 0.8^s · KL(teacher ‖ head) over the draft vocab (SpecForge's EAGLE-3 weighting)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch

from dart_core.drafters.eagle3 import Eagle3Drafter
from dart_core.engine.target import TargetModel
from dart_core.train.common import (
    TrainConfig,
    fit_drafter,
    kl_and_top1,
    prepare_drafter,
)

STEP_DECAY = 0.8


def ttt_mask(n: int, step: int) -> torch.Tensor:
    """Mask [n, (step+1)·n] for TTT step ``step``: block 0 (step-0 rows) causal up to i−step; block j (1..step)
    only the diagonal row i−step+j (the row's own earlier-step ancestors, and itself for j = step)."""
    i = torch.arange(n)
    blocks = [i[None, :] <= (i[:, None] - step)]
    for j in range(1, step + 1):
        blocks.append(i[None, :] == (i[:, None] - step + j))
    return torch.cat(blocks, dim=1)


def eagle3_train_forward(model: Eagle3Drafter, features: torch.Tensor, shifted_ids: torch.Tensor,
                         ttt_steps: int) -> list[torch.Tensor]:
    """Training forward (with grad, no cache) over R real rows: features [B, R, 3·H_t], following ids [B, R].
    Returns the un-normed outputs [B, R, H] of steps 0..ttt_steps; row i of step s is valid for i ≥ s."""
    r = features.shape[1]
    positions = torch.arange(r, device=model.device)
    h_in = model.fc(features.to(model.dtype))
    past: tuple[torch.Tensor, torch.Tensor] | None = None
    outs = []
    for s in range(ttt_steps + 1):
        h, k, v = model.layer(shifted_ids, h_in, positions, past, ttt_mask(r, s).to(model.device))
        outs.append(h)
        past = (k, v) if past is None else (torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2))
        h_in = torch.cat([h[:, :1], h[:, :-1]], dim=1)  # row i gets row i−1's output (row 0: never used)
    return outs


def eagle3_loss(model: Eagle3Drafter, feats: torch.Tensor, teach: torch.Tensor, windows: torch.Tensor,
                g: torch.Generator, *, ttt_steps: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Σ_s 0.8^s · mean-over-valid-rows KL(teacher ‖ head); row i predicts t[i+2] (teacher: target at i+1)."""
    del g  # every row is used; nothing to sample
    r = windows.shape[1] - 1
    outs = eagle3_train_forward(model, feats[:, :r], windows[:, 1:].to(model.device), ttt_steps)
    teacher = teach[:, 1 : r + 1]
    loss = torch.zeros((), device=model.device)
    kls, tops = [], []
    for s, h in enumerate(outs):
        kl, top1 = kl_and_top1(teacher[:, s:], model.lm_head(model.norm(h[:, s:])))
        loss = loss + STEP_DECAY**s * kl.mean()
        kls.append(kl.detach().mean())
        tops.append(top1.mean())
    return loss, torch.stack(kls), torch.stack(tops)


def train_eagle3(
    target: str | os.PathLike[str] | TargetModel,
    sequences: Sequence[Sequence[int]],
    out_dir: str | os.PathLike[str],
    config: TrainConfig | None = None,
    *,
    ttt_steps: int = 3,
    draft_vocab_size: int = 4096,
    eval_sequences: Sequence[Sequence[int]] | None = None,
    eos_token_id: int | None = None,
    config_overrides: dict[str, Any] | None = None,
    features: Any = None,
    eval_features: Any = None,
    init_from: str | os.PathLike[str] | None = None,
    **train: Any,
) -> dict[str, Any]:
    """Train an EAGLE-3 head (the inference ``Eagle3Drafter`` module, target embedding shared and frozen) with
    training-time test unrolled ``ttt_steps`` (≥ 3 recommended) steps; same data, draft vocab rule and budget knobs
    as :func:`dart_core.train.dart.train_dart` (``init_from`` too). Saves the published format (fp16) +
    ``train_log.jsonl``."""
    if ttt_steps < 1:
        raise ValueError(f"ttt_steps must be >= 1, got {ttt_steps}")
    budget = (config or TrainConfig()).with_(**train)
    prepared = prepare_drafter(
        Eagle3Drafter, "eagle3", target, sequences, draft_vocab_size=draft_vocab_size, draft_length=None,
        config_overrides=config_overrides, eos_token_id=eos_token_id, seed=budget.seed, threads=budget.threads,
        device=budget.device, init_from=init_from)

    def loss_fn(m: Any, f: torch.Tensor, t: torch.Tensor, w: torch.Tensor, g: torch.Generator) -> Any:
        return eagle3_loss(m, f, t, w, g, ttt_steps=ttt_steps)

    return fit_drafter("eagle3", prepared, loss_fn, sequences, eval_sequences, budget, min_len=ttt_steps + 3,
                       out_dir=out_dir, features=features, eval_features=eval_features)
