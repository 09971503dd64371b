"""The sampling tests' one statistic: a racer's sampled token counts against the exact target distribution; and
the model-free racers' one case of it, the second emitted token."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import chisquare


def chi_square_pvalue(counts: np.ndarray, expected: np.ndarray) -> float:
    """The chi-square p-value of ``counts`` (one per draw) under the probabilities ``expected``: the tokens
    expected at least 5 times each a bin, the rest pooled into one (dropped when it expects nothing)."""
    n = counts.sum()
    keep = expected * n >= 5
    f_exp = np.append(expected[keep] * n, expected[~keep].sum() * n)
    f_obs = np.append(counts[keep], counts[~keep].sum())
    if f_exp[-1] == 0:
        f_exp, f_obs = f_exp[:-1], f_obs[:-1]
    return float(chisquare(f_obs, f_exp * f_obs.sum() / f_exp.sum()).pvalue)


@dataclass(frozen=True)
class SecondTokenCase:
    """A tiny target, a sampling config and a prompt in which every token has occurred followed by another (a
    model-free racer always finds something to draft), with the exact distribution of the second emitted token."""

    target: Any  # dart_core.engine.target.TargetModel
    sampling: Any  # dart_core.engine.acceptance.SamplingConfig
    prompt: list[int]
    expected: np.ndarray  # Σ_x1 p(x1) q(x2 | x1)
    vocab: int


def second_token_case(vocab: int = 12) -> SecondTokenCase:
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    from dart_core.engine.acceptance import SamplingConfig, processed_probs
    from dart_core.engine.target import TargetModel

    torch.manual_seed(11)
    model = AutoModelForCausalLM.from_config(
        Qwen3Config(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=8,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=64),
        attn_implementation="sdpa").eval()
    sampling = SamplingConfig(temperature=1.3, top_p=0.95)
    prompt = [*range(vocab), 3, 1, 4]
    with torch.no_grad():
        p1 = processed_probs(model(torch.tensor([prompt])).logits[0, -1], sampling)
        q2 = processed_probs(model(torch.tensor([[*prompt, x] for x in range(vocab)])).logits[:, -1], sampling)
    return SecondTokenCase(TargetModel(model), sampling, prompt, (p1[:, None] * q2).sum(0).numpy(), vocab)
