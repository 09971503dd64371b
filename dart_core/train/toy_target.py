"""The embedded target: a small ``Qwen3ForCausalLM`` (the same code path as the real Qwen3 targets) trained by our
own loop on packed windows of the stdlib training split, saved in the published Hugging Face format (fp16)."""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch


def target_config(
    vocab_size: int,
    *,
    eos_token_id: int = 0,
    hidden_size: int = 256,
    num_hidden_layers: int = 8,
    num_attention_heads: int = 4,
    num_key_value_heads: int = 2,
    head_dim: int = 64,
    intermediate_size: int = 640,
    max_position_embeddings: int = 1024,
    rope_theta: float = 10000.0,
) -> Any:
    """A ``Qwen3Config``; 8 layers by default so the three EAGLE-3/DART feature layers (low, mid, high) are distinct."""
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_key_value_heads,
        head_dim=head_dim,
        max_position_embeddings=max_position_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": rope_theta},
        tie_word_embeddings=True,
        bos_token_id=eos_token_id,
        eos_token_id=eos_token_id,
        pad_token_id=eos_token_id,
        attention_dropout=0.0,
        use_cache=True,
    )


def lr_at(step: int, *, steps: int, lr: float, warmup: int, min_ratio: float = 0.1) -> float:
    """Linear warmup to ``lr``, then cosine decay to ``min_ratio * lr`` at ``steps``."""
    if step < warmup:
        return lr * (step + 1) / warmup
    t = min(1.0, (step - warmup) / max(1, steps - warmup))
    return lr * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * t)))


class WindowSampler:
    """Random ``seq_len + 1`` windows over the concatenation of all training sequences (EOS separates files), so
    every batch is full (no padding) and the order is fixed by ``seed``."""

    def __init__(self, sequences: list[np.ndarray], seq_len: int, seed: int) -> None:
        self.tokens = torch.from_numpy(np.concatenate(sequences).astype(np.int64))
        if len(self.tokens) <= seq_len + 1:
            raise ValueError(f"corpus has {len(self.tokens)} tokens, fewer than seq_len + 1 = {seq_len + 1}")
        self.seq_len = seq_len
        self.gen = torch.Generator().manual_seed(seed)

    def batch(self, batch_size: int) -> torch.Tensor:
        starts = torch.randint(0, len(self.tokens) - self.seq_len - 1, (batch_size,), generator=self.gen)
        idx = starts[:, None] + torch.arange(self.seq_len + 1)[None, :]
        return self.tokens[idx]


def _param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Weight decay on matrices only (not norms/biases), the usual LM recipe."""
    decay = [p for p in model.parameters() if p.requires_grad and p.ndim >= 2]
    rest = [p for p in model.parameters() if p.requires_grad and p.ndim < 2]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]


def lm_loss(model: torch.nn.Module, batch: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy of a ``[B, T+1]`` window batch."""
    logits = model(input_ids=batch[:, :-1], use_cache=False).logits
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), batch[:, 1:].reshape(-1))


def train_target(
    sequences: list[np.ndarray],
    tokenizer: Any,
    out_dir: str | os.PathLike[str],
    *,
    steps: int = 1000,
    batch_size: int = 16,
    seq_len: int = 256,
    lr: float = 3e-3,
    warmup: int = 50,
    weight_decay: float = 0.1,
    grad_clip: float = 1.0,
    seed: int = 0,
    threads: int | None = None,
    log_every: int = 10,
    config_overrides: dict[str, Any] | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Train the target from scratch and save model + tokenizer to ``out_dir`` (fp16 safetensors; load as fp32 on
    CPU). Returns a summary (hyperparameters, final loss, tokens/s, seconds, size) for ``recipe.json``."""
    from tqdm.auto import tqdm
    from transformers import GenerationConfig, Qwen3ForCausalLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(seed)
    eos = tokenizer.eos_token_id
    config = target_config(len(tokenizer), eos_token_id=eos, **(config_overrides or {}))
    model = Qwen3ForCausalLM(config).float().train()
    n_params = sum(p.numel() for p in model.parameters())
    sampler = WindowSampler(sequences, seq_len, seed)
    opt = torch.optim.AdamW(_param_groups(model, weight_decay), lr=lr, betas=(0.9, 0.95), eps=1e-8)

    log_path = out / "train_log.jsonl"
    t0 = time.perf_counter()
    tokens_seen = 0
    loss_sum, loss_n = 0.0, 0
    last = float("nan")
    with log_path.open("w") as log, tqdm(range(steps), desc="target", disable=not progress, mininterval=1.0) as bar:
        for step in bar:
            cur_lr = lr_at(step, steps=steps, lr=lr, warmup=warmup)
            for g in opt.param_groups:
                g["lr"] = cur_lr
            loss = lm_loss(model, sampler.batch(batch_size))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
            opt.step()
            tokens_seen += batch_size * seq_len
            loss_sum += loss.item()
            loss_n += 1
            if (step + 1) % log_every == 0 or step + 1 == steps:
                last = loss_sum / loss_n
                elapsed = time.perf_counter() - t0
                rec = {"step": step + 1, "loss": round(last, 4), "lr": cur_lr, "grad_norm": round(float(gnorm), 4),
                       "tokens": tokens_seen, "seconds": round(elapsed, 2)}
                log.write(json.dumps(rec) + "\n")
                log.flush()
                bar.set_postfix(loss=f"{last:.3f}", tok_s=f"{tokens_seen / elapsed:,.0f}")
                loss_sum, loss_n = 0.0, 0
    seconds = time.perf_counter() - t0

    model.eval()
    model.generation_config = GenerationConfig(eos_token_id=eos, bos_token_id=eos, pad_token_id=eos)
    model.to(torch.float16).save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    size = sum(f.stat().st_size for f in out.iterdir() if f.is_file() and f.name != "train_log.jsonl")
    return {
        "config": {k: v for k, v in config.to_diff_dict().items() if not k.startswith("_")},
        "parameters": n_params,
        "steps": steps,
        "batch_size": batch_size,
        "seq_len": seq_len,
        "lr": lr,
        "warmup": warmup,
        "schedule": "linear warmup + cosine to 0.1*lr",
        "optimizer": "AdamW(betas=(0.9, 0.95), eps=1e-8), weight decay on matrices only",
        "weight_decay": weight_decay,
        "grad_clip": grad_clip,
        "seed": seed,
        "threads": torch.get_num_threads(),
        "tokens_seen": tokens_seen,
        "final_loss": last,
        "tokens_per_s": tokens_seen / seconds if seconds > 0 else None,
        "seconds": seconds,
        "saved_dtype": "float16",
        "bytes": size,
    }
