"""The sampling tests' one statistic: a racer's sampled token counts against the exact target distribution."""

from __future__ import annotations

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
