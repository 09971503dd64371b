"""The weighted least-squares monotone fit (pool adjacent violators), shared by the two halves of the tree budget:
a node's acceptance never rises as its score falls further (``budget``), a forward never costs less for more rows
(``cost_curve``)."""

from __future__ import annotations

import numpy as np


def non_increasing_fit(mean: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """The weighted least-squares non-increasing fit of ``mean`` (pool adjacent violators)."""
    blocks: list[list[float]] = []  # [mean, weight, count]
    for m, w in zip(mean.tolist(), weight.tolist(), strict=True):
        blocks.append([m, w, 1])
        while len(blocks) > 1 and blocks[-2][0] < blocks[-1][0]:
            m2, w2, c2 = blocks.pop()
            m1, w1, c1 = blocks[-1]
            blocks[-1] = [(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2, c1 + c2]
    return np.repeat([b[0] for b in blocks], [b[2] for b in blocks])
