"""Which share of the target's answer tokens a draft vocabulary of a given size covers.

DART and EAGLE-3 draft over a reduced vocabulary (the most frequent tokens of the training data); a token outside
it can never be drafted, whatever the drafter learns, so the coverage of held-out answers bounds every depth's
acceptance. This measures it for several sizes, ranking the vocabulary as the trainers do
(``common.build_draft_vocab``), over the training answers and over answers to held-out topics."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from dart_core.train.common import build_draft_vocab


def coverage(rank_on: Sequence[Sequence[int]], answers: dict[str, Sequence[Sequence[int]]], sizes: Sequence[int], *,
             vocab_size: int, eos_token_id: int | None) -> list[dict[str, Any]]:
    """For each size: the draft vocabulary ranked on ``rank_on`` and, per named answer set, the share of its
    tokens inside that vocabulary (``{"size": n, "<name>": share, ...}``)."""
    counts = {name: Counter(int(t) for seq in seqs for t in seq) for name, seqs in answers.items()}
    rows = []
    for size in sizes:
        ids, _, t2d = build_draft_vocab(rank_on, vocab_size, min(size, vocab_size), eos_token_id)
        row: dict[str, Any] = {"size": len(ids)}
        for name, c in counts.items():
            total = sum(c.values())
            row[name] = sum(n for t, n in c.items() if t2d[t]) / total if total else float("nan")
        rows.append(row)
    return rows
