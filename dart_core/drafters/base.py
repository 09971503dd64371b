"""What every drafter hands the decoding loop: a draft tree and the time it took, split by stage."""

from __future__ import annotations

from dataclasses import dataclass

from dart_core.tree import DraftTree


@dataclass(frozen=True)
class Proposal:
    tree: DraftTree
    draft_ms: float  # drafter forwards (DART: one; EAGLE-3: one per tree level) + top-k
    search_ms: float  # turning the drafter's outputs into the tree (DART: native N-gram search)
