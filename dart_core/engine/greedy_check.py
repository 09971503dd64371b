"""The tie-aware greedy check: is a racer's greedy output the target's own, up to rounding?

In exact arithmetic every racer's greedy output equals plain decoding's token for token. In bf16 (or fp16) a
60-node tree forward and a one-token forward add their products in different orders, so a logit moves by a few
units in the last place, and where the target's best candidates are that close the argmax can flip: a *tie*, not a
bug. Every greedy step records the target's :data:`RECORDED` best (id, logit) behind each token it emits; where a
racer first parts from AR, :func:`compare` looks at both runs' records at that token (``docs/acceptance.md``):

* **tie**: in each run, the other run's token is among its recorded best and within :func:`tie_bound` of its best
  logit — :data:`TIE_ULPS` units in the last place of that logit in the run's dtype (bf16 logits sit on a coarse
  grid, so two- and three-way exact ties are common);
* **mismatch**: anything else (a token outside the record, a wider gap, a missing record).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

# Best candidates recorded per emitted token: room for the multi-way ties of a coarse bf16 grid. 4 was too few: on
# MT-bench (SmolLM2, bf16) five tokens lay within 0.375 of the best at one step, AR emitted the fifth of the
# racer's run, and a tie was called a mismatch.
RECORDED = 8
# How many units in the last place (of the larger logit, in the model's dtype) two forwards of different shapes may
# move the top-2 gap. A bf16 logit near 20 sits on a grid of 0.125, so a tie is a gap of at most 0.5 there; in
# float32 the same bound is 8e-6, far below any gap real decoding meets, so float32 runs report no ties.
TIE_ULPS = 4

TopLogits = tuple[tuple[int, ...], tuple[float, ...]]  # the best ids, best first, and their logits


def top_logits_of(logits: torch.Tensor) -> list[TopLogits]:
    """The :data:`RECORDED` best (ids, logits) of each row of ``logits`` [rows, V] (one host transfer)."""
    values, ids = torch.topk(logits, min(RECORDED, logits.shape[-1]), dim=-1)
    return [(tuple(i), tuple(v)) for i, v in zip(ids.tolist(), values.tolist(), strict=True)]


def ulp(dtype: torch.dtype, value: float) -> float:
    """The spacing of ``dtype``'s numbers at ``value`` (its eps scaled to the value's binade; at least eps)."""
    eps = torch.finfo(dtype).eps
    mag = abs(value)
    return eps * 2.0 ** math.floor(math.log2(mag)) if mag >= 1.0 else eps


def tie_bound(dtype: torch.dtype, logit: float) -> float:
    """The widest top-2 gap still called a rounding tie at a logit of this size in ``dtype``."""
    return TIE_ULPS * ulp(dtype, logit)


@dataclass(frozen=True)
class Verdict:
    """``kind``: "identical", "tie" or "mismatch"; ``position``: the first differing token (None if identical);
    ``gaps``: how far the other run's token lies below the best logit, in the reference run and in the racer's run,
    at that token (when both runs recorded it)."""

    kind: str
    position: int | None = None
    gaps: tuple[float, float] | None = None

    @property
    def ok(self) -> bool:
        """Identical, or identical up to a rounding tie."""
        return self.kind != "mismatch"

    def describe(self, dtype: torch.dtype | str | None = None) -> str:
        """One neutral phrase for the page and the bench (``dtype``: the target's, named in a tie)."""
        if self.kind == "identical":
            return "identical to AR"
        if self.kind == "tie":
            name = str(dtype).removeprefix("torch.") if dtype is not None else "rounding"
            return f"identical up to a {name} tie at token {self.position}"
        return f"differs from AR at token {self.position}"


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first differing token (or the shorter length), None when equal."""
    for i, (x, y) in enumerate(zip(a, b)):  # noqa: B905 - lengths may differ on purpose
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _gap(record: TopLogits, token: int) -> float | None:
    """How far ``token``'s logit lies below the row's best (None: not among the recorded best)."""
    ids, values = record
    return values[0] - values[ids.index(token)] if token in ids else None


def compare(ref_tokens: Sequence[int], ref_top: Sequence[TopLogits], tokens: Sequence[int],
            top: Sequence[TopLogits], dtype: torch.dtype) -> Verdict:
    """Classify a greedy run (``tokens`` with each token's recorded best logits ``top``) against the reference
    (AR's)."""
    pos = first_difference(ref_tokens, tokens)
    if pos is None:
        return Verdict("identical")
    if pos >= min(len(ref_tokens), len(tokens)) or pos >= min(len(ref_top), len(top)):
        return Verdict("mismatch", pos)  # one run stopped early, or no record of the logits there
    a, b = ref_top[pos], top[pos]
    ga, gb = _gap(a, tokens[pos]), _gap(b, ref_tokens[pos])  # each run's view of the other's token
    if ga is None or gb is None:
        return Verdict("mismatch", pos)
    close = ga <= tie_bound(dtype, a[1][0]) and gb <= tie_bound(dtype, b[1][0])
    return Verdict("tie" if close else "mismatch", pos, (ga, gb))
