"""Test helpers: a writer of the reference ``.trie`` format and a pure-Python reference of the counting and
``probability`` semantics (docs/formats.md). Imported by the tests from its file path (pytest runs with
``--import-mode=importlib``), see :func:`load_helpers` in the test files."""

from __future__ import annotations

import random
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

HEADER = struct.Struct("<QQ")
RECORD = struct.Struct("<iQiQ")  # token, parent, count, n_children: 24 bytes
ENTRY = struct.Struct("<iQ")  # child token, child id: 12 bytes


@dataclass
class TrieNode:
    token: int
    parent: int
    count: int = 0
    children: dict[int, int] = field(default_factory=dict)  # token -> child id (insertion order)
    entries: list[tuple[int, int]] | None = None  # written (token, child id) list; None = from `children`


@dataclass
class RefTrie:
    """A reference count trie exactly as the reference builds it: one node per distinct prefix, numbered in
    creation order (node 0 = root)."""

    order: int
    nodes: list[TrieNode]

    @classmethod
    def build(cls, sequences: Iterable[Sequence[int]], order: int) -> RefTrie:
        nodes = [TrieNode(0, 0)]
        for seq in sequences:
            seq = [int(t) for t in seq]
            for s in range(len(seq)):
                node = 0
                nodes[0].count += 1
                for t in seq[s : s + order]:
                    nxt = nodes[node].children.get(t)
                    if nxt is None:
                        nxt = len(nodes)
                        nodes[node].children[t] = nxt
                        nodes.append(TrieNode(t, node))
                    node = nxt
                    nodes[node].count += 1
        return cls(order, nodes)

    def entry_lists(self, seed: int = 0) -> list[list[tuple[int, int]]]:
        """Each node's child entries in a shuffled ("hash-map") order, unless overridden by ``entries``."""
        rng = random.Random(seed)
        out = []
        for n in self.nodes:
            if n.entries is not None:
                out.append(list(n.entries))
            else:
                e = list(n.children.items())
                rng.shuffle(e)
                out.append(e)
        return out

    def to_bytes(self, seed: int = 0, *, order: int | None = None, node_count: int | None = None) -> bytes:
        lists = self.entry_lists(seed)
        parts = [
            HEADER.pack(
                self.order if order is None else order, len(self.nodes) if node_count is None else node_count
            )
        ]
        for n, entries in zip(self.nodes, lists, strict=True):
            parts.append(RECORD.pack(n.token, n.parent, n.count, len(entries)))
            parts.extend(ENTRY.pack(t, c) for t, c in entries)
        return b"".join(parts)

    def record_offsets(self, seed: int = 0) -> list[int]:
        """Byte offset of each node's record (the entry of child j of node k is at offset[k] + 24 + 12*j)."""
        offs = []
        pos = HEADER.size
        for entries in self.entry_lists(seed):
            offs.append(pos)
            pos += RECORD.size + ENTRY.size * len(entries)
        return offs

    def write(self, path: Path, seed: int = 0) -> Path:
        path.write_bytes(self.to_bytes(seed))
        return path


class RefCounts:
    """Dict of counts per token tuple (the root is ``()``) and the reference ``probability``."""

    def __init__(self, sequences: Iterable[Sequence[int]], order: int) -> None:
        self.order = order
        self.counts: dict[tuple[int, ...], int] = {}
        c = self.counts
        for seq in sequences:
            seq = tuple(int(t) for t in seq)
            for s in range(len(seq)):
                sl = seq[s : s + order]
                for n in range(len(sl) + 1):
                    key = sl[:n]
                    c[key] = c.get(key, 0) + 1

    def probability(self, context: Sequence[int], tokens: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        probs = np.zeros(len(tokens), dtype=np.float32)
        lens = np.zeros(len(tokens), dtype=np.int32)
        ctx = tuple(int(t) for t in context)
        if not ctx or not len(tokens):
            return probs, lens
        lmax = min(self.order - 1, len(ctx))
        for j, x in enumerate(tokens):
            for n in range(lmax, 0, -1):
                c = ctx[len(ctx) - n :]
                cc = self.counts.get(c)
                if cc is None:
                    continue
                cx = self.counts.get((*c, int(x)))
                if cx is not None:
                    probs[j] = np.float32(cx) * (np.float32(1.0) / np.float32(cc))
                    lens[j] = n
                    break
        return probs, lens


def random_corpus(rng: random.Random, n_seqs: int, max_len: int, vocab: Sequence[int]) -> list[list[int]]:
    """Random sequences (some empty or short) over the given token ids, with a skewed distribution so that
    n-grams repeat."""
    weights = [1.0 / (i + 1) for i in range(len(vocab))]
    out = []
    for _ in range(n_seqs):
        n = rng.choice([0, 1, 2, rng.randint(0, max_len), rng.randint(0, max_len)])
        out.append(rng.choices(vocab, weights=weights, k=n))
    return out
