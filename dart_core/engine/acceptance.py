"""Lossless acceptance rules over a draft tree (``docs/acceptance.md``).

The target has scored every node of a :class:`~dart_core.engine.tree.DraftTree` in one forward (``logits[i]`` is the
target's next-token distribution after node i's path). This module decides which root-to-node path to commit and
which bonus token to append, so that the emitted text is distributed exactly as plain decoding with the target:
token-for-token equal under greedy decoding, equal in distribution under sampling (temperature / top-k / top-p).

Torch + numpy only; the logits warpers are re-implemented here (no ``transformers`` import at runtime) with the same
tie and boundary behaviour as ``transformers``' ``Temperature``/``TopK``/``TopPLogitsWarper``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from dart_core.engine.tree import DraftTree

__all__ = [
    "Acceptance",
    "SamplingConfig",
    "accept",
    "accept_greedy",
    "accept_sampling",
    "processed_probs",
]


# Below this a temperature is greedy: logits scaled by 1/T >= 1e6 give any token 1e-4 or more below the maximum a
# probability under 1e-43 (float32's denormal range), and much smaller T overflows the division itself.
MIN_SAMPLING_TEMPERATURE = 1e-6


@dataclass(frozen=True)
class SamplingConfig:
    """How the target's next-token distribution is post-processed.

    ``temperature == 0`` means greedy (argmax); ``top_p == 1.0`` and ``top_k == 0`` switch those filters off.
    A temperature below :data:`MIN_SAMPLING_TEMPERATURE` is stored as 0 (greedy): dividing logits by it would
    overflow float32 (1e-38 already does), and its distribution is the argmax's one-hot to float32 precision anyway.
    """

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0

    def __post_init__(self) -> None:
        t, p, k = self.temperature, self.top_p, self.top_k
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
            raise ValueError(f"SamplingConfig.temperature must be a finite number >= 0 (0 = greedy), got {t!r}")
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not (0.0 < p <= 1.0):
            raise ValueError(f"SamplingConfig.top_p must be in (0, 1] (1.0 = off), got {p!r}")
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
            raise ValueError(f"SamplingConfig.top_k must be an integer >= 0 (0 = off), got {k!r}")
        object.__setattr__(self, "temperature", float(t) if t >= MIN_SAMPLING_TEMPERATURE else 0.0)
        object.__setattr__(self, "top_p", float(p))
        object.__setattr__(self, "top_k", int(k))

    @property
    def greedy(self) -> bool:
        """True when decoding is argmax (temperature 0); top-k / top-p cannot change the argmax."""
        return self.temperature == 0.0


@dataclass
class Acceptance:
    """Outcome of one verify step.

    ``nodes``: tree node indices of the committed path, root first (root + ``accepted`` drafts) — the KV rows to keep.
    ``tokens``: the token ids emitted this step, i.e. the accepted draft tokens followed by ``bonus_token``
    (the root is not repeated: it was emitted by the previous step).
    """

    nodes: list[int]
    accepted: int
    bonus_token: int
    tokens: list[int] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------- warpers
def processed_probs(logits: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """Target distribution(s) after temperature, then top-k, then top-p, softmax in float32.

    Mirrors ``transformers``' warpers (filter value -inf, ``min_tokens_to_keep=1``): top-k keeps every token whose
    logit ties the k-th largest; top-p sorts ascending and drops tokens whose cumulative probability is
    ``<= 1 - top_p``, always keeping the most probable one. ``temperature == 0`` gives the greedy limit: a one-hot
    at the (first) argmax. Works on any leading shape ``[..., V]``.
    """
    if logits.dim() < 1 or logits.shape[-1] == 0:
        raise ValueError(f"processed_probs needs logits of shape [..., V] with V > 0, got {tuple(logits.shape)}")
    scores = logits.float()
    if torch.isnan(scores).any() or torch.isposinf(scores).any():
        raise ValueError("processed_probs: logits contain NaN or +inf")
    if cfg.greedy:
        probs = torch.zeros_like(scores)
        return probs.scatter_(-1, scores.argmax(dim=-1, keepdim=True), 1.0)
    if cfg.temperature != 1.0:
        scores = scores / cfg.temperature
    if cfg.top_k > 0:
        k = min(cfg.top_k, scores.shape[-1])
        kth = torch.topk(scores, k, dim=-1)[0][..., -1:]
        scores = scores.masked_fill(scores < kth, -math.inf)
    if cfg.top_p < 1.0:
        sorted_logits, sorted_idx = torch.sort(scores, dim=-1, descending=False)
        cum = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        remove_sorted = cum <= (1 - cfg.top_p)
        remove_sorted[..., -1:] = False  # keep at least one token (the most probable)
        remove = remove_sorted.scatter(-1, sorted_idx, remove_sorted)
        scores = scores.masked_fill(remove, -math.inf)
    probs = scores.softmax(dim=-1)
    if torch.isnan(probs).any():
        raise ValueError("processed_probs: a row has no finite logit (all -inf), its distribution is undefined")
    return probs


# ---------------------------------------------------------------------------------------------- checks
def _check_logits(tree: DraftTree, logits: torch.Tensor) -> None:
    """Fail loudly on shape mismatches and NaNs: a silent mis-alignment would corrupt the output text."""
    if not isinstance(logits, torch.Tensor):
        raise ValueError(f"logits must be a torch.Tensor, got {type(logits).__name__}")
    if logits.dim() != 2:
        raise ValueError(f"logits must be 2-D [n_nodes, V], got shape {tuple(logits.shape)}")
    if logits.shape[0] != tree.size:
        raise ValueError(f"logits has {logits.shape[0]} rows but the draft tree has {tree.size} nodes")
    if logits.shape[1] == 0:
        raise ValueError("logits has an empty vocabulary dimension")
    if torch.isnan(logits).any():
        raise ValueError("logits contain NaN")


def _result(tree: DraftTree, last: int, bonus: int) -> Acceptance:
    nodes = tree.path_to(last)
    drafts = [int(tree.tokens[i]) for i in nodes[1:]]
    return Acceptance(nodes=nodes, accepted=len(nodes) - 1, bonus_token=int(bonus), tokens=[*drafts, int(bonus)])


# ---------------------------------------------------------------------------------------------- greedy
def accept_greedy(tree: DraftTree, logits: torch.Tensor) -> Acceptance:
    """Greedy rule: longest root-to-leaf prefix where each draft equals the target argmax at its parent.

    Equivalent to the path-by-path formulation of the spec but O(n): argmax once per node, mark "matched" nodes
    (every ancestor edge matches), then take the deepest matched node; among equally deep ones the one whose first
    leaf (in index order = ``DraftTree.paths()`` order) comes first, which is exactly "first path on ties".
    """
    _check_logits(tree, logits)
    top = logits.argmax(dim=-1).tolist()
    tokens, parents, depths, n = tree.tokens.tolist(), tree.parents.tolist(), tree.depths.tolist(), tree.size
    matched = [True] + [False] * (n - 1)
    for i in range(1, n):
        p = parents[i]
        matched[i] = matched[p] and tokens[i] == top[p]
    # first leaf (lowest leaf index) below every node; parents precede children, so one reverse pass suffices
    first_leaf = [n] * n
    for i in range(n - 1, -1, -1):
        if first_leaf[i] == n:  # no child has reported: i is a leaf
            first_leaf[i] = i
        if i > 0:
            p = parents[i]
            first_leaf[p] = min(first_leaf[p], first_leaf[i])
    # deepest matched node; among equally deep ones, the one whose first leaf comes first
    last = min((i for i in range(n) if matched[i]), key=lambda i: (-depths[i], first_leaf[i]))
    return _result(tree, last, int(top[last]))


# ---------------------------------------------------------------------------------------------- sampling
def accept_sampling(
    tree: DraftTree,
    logits: torch.Tensor,
    cfg: SamplingConfig,
    generator: torch.Generator | None = None,
) -> Acceptance:
    """Recursive rejection rule (EAGLE / SpecInfer) for deterministic drafts; lossless per token.

    At node v with target distribution q: try v's distinct child tokens in draft order, accepting x with
    probability q[x]; on rejection zero q[x] and renormalize (the residual). The bonus is drawn from the final q.
    Duplicate sibling tokens are tried once (the first such child is followed). All randomness comes from
    ``generator`` (torch's global RNG when None) so runs are reproducible.
    """
    if cfg.greedy:
        raise ValueError("accept_sampling needs temperature > 0; use accept_greedy / accept for greedy decoding")
    _check_logits(tree, logits)
    dev = generator.device if generator is not None else logits.device
    kids = tree._children
    tokens = tree.tokens
    node = 0
    while True:
        q = processed_probs(logits[node], cfg).to(dev)
        moved = False
        seen: set[int] = set()
        for child in kids[node]:
            x = int(tokens[child])
            if x in seen:
                continue
            seen.add(x)
            if not 0 <= x < q.shape[0]:
                raise ValueError(f"draft token {x} at node {child} is outside the vocabulary (V={q.shape[0]})")
            qx = float(q[x])
            if qx <= 0.0:
                continue  # rejected for sure; q is unchanged by zeroing an already-zero entry
            u = float(torch.rand((), generator=generator, device=dev))
            if u < qx:
                node, moved = child, True
                break
            q[x] = 0.0
            total = float(q.sum())
            if total <= 0.0:  # only reachable through float round-off when q[x] was ~1: treat as accepted
                node, moved = child, True
                break
            q = q / total
        if not moved:
            bonus = int(torch.multinomial(q, 1, generator=generator))
            return _result(tree, node, bonus)


def accept(
    tree: DraftTree,
    logits: torch.Tensor,
    cfg: SamplingConfig,
    generator: torch.Generator | None = None,
) -> Acceptance:
    """Entry point of the decode loop: greedy rule at temperature 0, the recursive sampling rule otherwise."""
    if cfg.greedy:
        return accept_greedy(tree, logits)
    return accept_sampling(tree, logits, cfg, generator)
