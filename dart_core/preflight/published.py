"""The published Qwen3 targets and their drafters (docs/formats.md): which sizes exist, their shapes, the
published checkpoint of a racer for a size (its format's ``published``), the target a drafter config was built
for, and the next smaller target, for the fixes a problem suggests."""

from __future__ import annotations

import re
from typing import Any

QWEN3 = re.compile(r"^Qwen/Qwen3-(\d+(?:\.\d+)?B)$", re.IGNORECASE)
QWEN3_SIZES = ("1.7B", "4B", "8B", "14B", "32B")  # the published sizes (docs/formats.md), smallest first
QWEN3_SHAPES = {"1.7B": (2048, 28), "4B": (2560, 36), "8B": (4096, 36), "14B": (5120, 40), "32B": (5120, 64)}


def published_drafter(key: str, target: str) -> str:
    """The published drafter of a racer for a published Qwen3 target (its checkpoint format names it), else ''."""
    from dart_core.racers.registry import RACERS

    m = QWEN3.match(target or "")
    fmt = next((r.checkpoint for r in RACERS if r.key == key), None)
    if m is None or fmt is None or fmt.published is None:
        return ""
    size = next((s for s in QWEN3_SIZES if s.lower() == m.group(1).lower()), m.group(1))
    return fmt.published(size)


def built_for(cfg: Any) -> str:
    """The published Qwen3 target whose hidden size (and depth, from the layer ids) a drafter config fits."""
    fits = [s for s, (h, n) in QWEN3_SHAPES.items() if h == cfg.target_hidden_size and cfg.vocab_size >= 151_000
            and (not cfg.aux_layer_ids or max(cfg.aux_layer_ids) < n)]
    return f"Qwen/Qwen3-{fits[0]}" if len(fits) == 1 else ""


def smaller_qwen3(target: str) -> str:
    m = QWEN3.match(target or "")
    if m is None:
        return ""
    sizes = [s.lower() for s in QWEN3_SIZES]
    i = sizes.index(m.group(1).lower()) if m.group(1).lower() in sizes else 0
    return QWEN3_SIZES[i - 1] if i > 0 else ""
