"""The canonical draft tree (``docs/architecture.md``): token ids plus parent indices in topological order.

Every drafter's proposal is a :class:`DraftTree` (a chain, as DFlash's or prompt lookup's, is a tree of one path)
and the verifier consumes only this type, so everything the engine needs (depths, position ids, the tree attention
mask, root-to-leaf paths) is derived here from ``tokens`` and ``parents``. Numpy only: the torch-side mask is built
later from :meth:`DraftTree.ancestor_mask`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np


def _as_index_array(values: Any, what: str) -> np.ndarray:
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"DraftTree.{what} must be 1-D, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"DraftTree.{what} must hold integers, got dtype {arr.dtype}")
    out = np.array(arr, dtype=np.int64, copy=True)
    out.setflags(write=False)  # the tree is immutable: derived caches stay valid
    return out


@dataclass(frozen=True, eq=False)
class DraftTree:
    """A draft tree: ``tokens[0]`` is the root (the last accepted token), ``parents[0] == -1`` and
    ``0 <= parents[i] < i`` for every other node, so parents always come before their children.

    ``scores`` (optional, float32) are the search scores, root 0; they are informational only.
    """

    tokens: np.ndarray
    parents: np.ndarray
    scores: np.ndarray | None = field(default=None)

    def __post_init__(self) -> None:
        tokens = _as_index_array(self.tokens, "tokens")
        parents = _as_index_array(self.parents, "parents")
        if tokens.size == 0:
            raise ValueError("DraftTree needs at least the root node (tokens is empty)")
        if tokens.shape != parents.shape:
            raise ValueError(
                f"DraftTree.tokens and .parents differ in length ({tokens.size} vs {parents.size})"
            )
        if parents[0] != -1:
            raise ValueError(f"DraftTree.parents[0] must be -1 (node 0 is the root), got {parents[0]}")
        if tokens.size > 1:
            rest = parents[1:]
            idx = np.arange(1, tokens.size)
            bad = np.flatnonzero((rest < 0) | (rest >= idx))
            if bad.size:
                i = int(bad[0]) + 1
                raise ValueError(
                    f"DraftTree.parents[{i}] = {parents[i]} is invalid: need 0 <= parents[i] < i "
                    "(nodes in topological order)"
                )
        object.__setattr__(self, "tokens", tokens)
        object.__setattr__(self, "parents", parents)
        if self.scores is not None:
            scores = np.array(self.scores, dtype=np.float32, copy=True)
            if scores.shape != tokens.shape:
                raise ValueError(f"DraftTree.scores has shape {scores.shape}, expected {tokens.shape}")
            scores.setflags(write=False)
            object.__setattr__(self, "scores", scores)

    # ------------------------------------------------------------- structure
    @property
    def size(self) -> int:
        """Number of nodes, root included."""
        return int(self.tokens.size)

    def __len__(self) -> int:
        return self.size

    @cached_property
    def is_chain(self) -> bool:
        """Every node the child of the one before: plain causal attention verifies it, no tree mask needed."""
        return bool(np.array_equal(self.parents, np.arange(-1, self.size - 1)))

    @cached_property
    def depths(self) -> np.ndarray:
        """Depth of every node (root 0); one pass suffices because parents precede children."""
        d = np.zeros(self.size, dtype=np.int64)
        for i in range(1, self.size):
            d[i] = d[self.parents[i]] + 1
        d.setflags(write=False)
        return d

    def position_ids(self, prefix_len: int) -> np.ndarray:
        """Position ids for a tree forward after ``prefix_len`` cached tokens: prefix_len + depth.

        The root sits at ``prefix_len`` (the first tree position) and siblings share a position."""
        return self.depths + int(prefix_len)

    @cached_property
    def _ancestor_mask(self) -> np.ndarray:
        n = self.size
        mask = np.zeros((n, n), dtype=bool)
        for i in range(n):
            p = self.parents[i]
            if p >= 0:
                mask[i] = mask[p]  # a node sees what its parent sees...
            mask[i, i] = True  # ...plus itself
        mask.setflags(write=False)
        return mask

    def ancestor_mask(self) -> np.ndarray:
        """Bool [n, n]: ``mask[i, j]`` iff node j is node i or one of its ancestors — the tree attention
        pattern (each draft token attends only to its own path)."""
        return self._ancestor_mask.copy()

    @cached_property
    def _children(self) -> list[list[int]]:
        kids: list[list[int]] = [[] for _ in range(self.size)]
        for i in range(1, self.size):
            kids[int(self.parents[i])].append(i)
        return kids

    def children(self) -> list[list[int]]:
        """``children()[i]`` = indices of node i's children, in index order."""
        return [list(c) for c in self._children]

    def leaves(self) -> list[int]:
        """Nodes without children, in index order (the root alone is a leaf)."""
        return [i for i, c in enumerate(self._children) if not c]

    def path_to(self, i: int) -> list[int]:
        """Node indices from the root to node ``i`` (both included)."""
        if not 0 <= i < self.size:
            raise IndexError(f"node {i} out of range for a tree of {self.size} nodes")
        path = [int(i)]
        while self.parents[path[-1]] >= 0:
            path.append(int(self.parents[path[-1]]))
        return path[::-1]

    def check_path(self, path: list[int], what: str, whose: str = "the tree") -> None:
        """Raise ValueError (``what: … is not a root-to-node path of whose``) unless ``path`` is one: node 0 first,
        each node the child of the one before. The one check behind every commit of accepted nodes."""
        why = "" if path and path[0] == 0 else "it must start at the root, node 0"
        for a, b in itertools.pairwise(path):
            if not why and (not 0 <= b < self.size or int(self.parents[b]) != a):
                why = f"at node {b}"
        if why:
            raise ValueError(f"{what}: {path} is not a root-to-node path of {whose} ({why})")

    def paths(self) -> list[list[int]]:
        """Every root-to-leaf path as node indices, root first — the candidates the verifier accepts along."""
        return [self.path_to(leaf) for leaf in self.leaves()]

    def token_paths(self) -> list[tuple[int, ...]]:
        """Token ids along every root-to-leaf path (root token included)."""
        return [tuple(int(self.tokens[j]) for j in p) for p in self.paths()]

    def truncate(self, max_depth: int) -> DraftTree:
        """The subtree of nodes at depth <= ``max_depth`` (still parents-first): used near the context limit or
        the token budget, where deeper drafts could not be emitted anyway."""
        keep = np.flatnonzero(self.depths <= max(int(max_depth), 0))
        return self if keep.size == self.size else self.keep(keep)

    def keep(self, nodes: Any) -> DraftTree:
        """The subtree of ``nodes`` (ascending indices, the root and each kept node's parent among them), still
        parents-first: a tree cut by the budget."""
        keep = np.asarray(nodes, dtype=np.int64)
        if keep.ndim != 1 or keep.size == 0 or keep[0] != 0 or np.any(np.diff(keep) <= 0) or keep[-1] >= self.size:
            raise ValueError("DraftTree.keep takes ascending node indices starting at the root")
        index = np.full(self.size, -1, dtype=np.int64)
        index[keep] = np.arange(keep.size)
        parents = np.where(self.parents[keep] >= 0, index[np.maximum(self.parents[keep], 0)], -1)
        if np.any(parents[1:] < 0):
            raise ValueError("DraftTree.keep: a kept node's parent is not kept")
        scores = None if self.scores is None else self.scores[keep]
        return DraftTree(self.tokens[keep], parents, scores)

    def __repr__(self) -> str:
        return f"DraftTree(size={self.size}, depth={int(self.depths.max())}, leaves={len(self.leaves())})"
