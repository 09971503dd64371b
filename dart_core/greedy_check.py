"""The tie-aware greedy check: is a racer's greedy output the target's own, up to rounding?

In exact arithmetic every racer's greedy output equals plain decoding's token for token. In bf16 (or fp16) a
60-node tree forward and a one-token forward add their products in different orders, so a logit moves by a few
units in the last place, and where the target's top two candidates are that close the argmax can flip: a *tie*,
not a bug. Every greedy step records the target's top-2 (id, logit) of each token it emits; where a racer first
parts from AR, :func:`compare` looks at both runs' top-2 at that token (``docs/acceptance.md``):

* **tie**: in both runs the two best tokens are the two runs' tokens (an exact tie may come in either order), and
  in both runs the gap between them is at most
  :func:`tie_bound` — :data:`TIE_ULPS` units in the last place of the larger logit in the run's dtype;
* **mismatch**: anything else (a token outside the other run's top two, a wider gap, or a missing record).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

# How many units in the last place (of the larger logit, in the model's dtype) two forwards of different shapes may
# move the top-2 gap. A bf16 logit near 20 sits on a grid of 0.125, so a tie is a gap of at most 0.5 there; in
# float32 the same bound is 8e-6, far below any gap real decoding meets, so float32 runs report no ties.
TIE_ULPS = 4

Top2 = tuple[int, float, int, float]  # (best id, its logit, runner-up id, its logit)


def top2_of(logits: torch.Tensor) -> list[Top2]:
    """The top-2 (id, logit) of each row of ``logits`` [rows, V] (one host transfer)."""
    values, ids = torch.topk(logits, 2, dim=-1)
    return [(int(i[0]), float(v[0]), int(i[1]), float(v[1])) for i, v in zip(ids.tolist(), values.tolist(),
                                                                             strict=True)]


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
    ``gaps``: the top-2 gap in the reference run and in the racer's run at that token (ties and near misses)."""

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


def compare(ref_tokens: Sequence[int], ref_top2: Sequence[Top2], tokens: Sequence[int], top2: Sequence[Top2],
            dtype: torch.dtype) -> Verdict:
    """Classify a greedy run (``tokens`` with their per-token ``top2``) against the reference (AR's)."""
    pos = first_difference(ref_tokens, tokens)
    if pos is None:
        return Verdict("identical")
    if pos >= min(len(ref_tokens), len(tokens)) or pos >= min(len(ref_top2), len(top2)):
        return Verdict("mismatch", pos)  # one run stopped early, or no record of the logits there
    a, b = ref_top2[pos], top2[pos]
    gaps = (a[1] - a[3], b[1] - b[3])
    # both runs' two best are the two tokens in question (in either order: at a gap of 0 the argmax and topk may
    # list an exact tie differently)
    pair = {ref_tokens[pos], tokens[pos]}
    swapped = {a[0], a[2]} == pair == {b[0], b[2]}
    close = gaps[0] <= tie_bound(dtype, a[1]) and gaps[1] <= tie_bound(dtype, b[1])
    return Verdict("tie" if swapped and close else "mismatch", pos, gaps)
