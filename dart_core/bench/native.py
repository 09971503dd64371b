"""Native core benchmark: N-gram store build/load/query and tree-search latency on the Python stdlib corpus.

Builds an order-3 store from the standard library sources of the running interpreter (tokenized with a
deterministic regex tokenizer, ~10 M tokens), then prints: nodes, file bytes, bytes per node, build time and
tokens/s, load time, median/p99 `probability` latency (25 candidates, 2-token context), the median cost of one
`NgramStore.probability` call from Python (int32 arrays and plain lists) and median/p99 `search_tree` latency
(k=25, beam 20, 9 levels, 60 nodes). Latencies are timed per call inside the native code (what the decoding loop
pays); the Python-call figures include the binding overhead (validation and conversions).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from dart_core import _native
from dart_core.data.corpus import RegexTokenizer, python_version, read_texts, stdlib_files
from dart_core.ngram.store import NgramStore, build_to_file


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--order", type=int, default=3, help="N-gram order (default 3, as published)")
    p.add_argument("--queries", type=int, default=20000, help="probability calls to time (default 20000)")
    p.add_argument("--searches", type=int, default=2000, help="search_tree calls to time (default 2000)")
    p.add_argument("--top-k", type=int, default=25, help="candidates per level (default 25)")
    p.add_argument("--levels", type=int, default=9, help="tree-search levels, draft length + 1 (default 9)")
    p.add_argument("--beam-width", type=int, default=20, help="beam width (default 20)")
    p.add_argument("--max-nodes", type=int, default=60, help="nodes below the root (default 60)")
    p.add_argument("--limit-files", type=int, default=0, help="use only the first N stdlib files (0 = all)")
    p.add_argument("--keep", type=Path, default=None, help="keep the built store at this path")
    p.add_argument("--json", type=Path, default=None, help="also write the figures to this JSON file")
    p.add_argument("--seed", type=int, default=0)


def _pct(ns: np.ndarray) -> tuple[float, float]:
    return float(np.median(ns)) / 1e3, float(np.percentile(ns, 99)) / 1e3


class _FrequentTokens:
    """Endless draws of token ids from the corpus unigram distribution (pre-sampled in blocks)."""

    def __init__(self, rng: np.random.Generator, unigram: np.ndarray) -> None:
        self.rng, self.unigram, self.buf, self.i = rng, unigram, np.zeros(0, dtype=np.int32), 0

    def next(self) -> int:
        if self.i == len(self.buf):
            self.buf = self.rng.choice(len(self.unigram), size=1 << 16, p=self.unigram).astype(np.int32)
            self.i = 0
        self.i += 1
        return int(self.buf[self.i - 1])


def _sample_candidates(rng: np.random.Generator, truth: int, freq: _FrequentTokens, k: int) -> np.ndarray:
    """k distinct candidates: the true next token (rank 0 most of the time) plus frequent tokens."""
    out = [int(truth)]
    while len(out) < k:
        t = freq.next()
        if t not in out:
            out.append(t)
    cand = np.asarray(out, dtype=np.int32)
    if rng.random() > 0.7:  # the drafter is not always right: move the truth down the list
        j = int(rng.integers(1, k))
        cand[[0, j]] = cand[[j, 0]]
    return cand


def run(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm

    rng = np.random.default_rng(args.seed)
    files = stdlib_files()
    if args.limit_files:
        files = files[: args.limit_files]
    t0 = time.perf_counter()
    texts = read_texts(tqdm(files, desc="reading stdlib", unit="file"))
    tok = RegexTokenizer.fit(texts)
    seqs = [tok.encode(t) for t in tqdm(texts, desc="tokenizing", unit="file")]
    tokenize_s = time.perf_counter() - t0
    n_tokens = int(sum(len(s) for s in seqs))
    print(f"corpus: {len(files)} stdlib files of Python {python_version()}, {n_tokens:,} tokens, "
          f"vocab {tok.vocab_size:,} (read+tokenize {tokenize_s:.1f} s)")

    with tempfile.TemporaryDirectory() as tmp:
        path = args.keep or Path(tmp) / "stdlib.ngram"
        t0 = time.perf_counter()
        build_to_file(seqs, path, order=args.order)
        build_s = time.perf_counter() - t0

        load_ns = []
        for _ in range(20):
            t0 = time.perf_counter_ns()
            store = NgramStore.load(path)
            load_ns.append(time.perf_counter_ns() - t0)
            store.close()
        store = NgramStore.load(path)
        info = store.info()
        t0 = time.perf_counter()
        store.verify()
        verify_s = time.perf_counter() - t0

        # Query workload: a 2-token context from the corpus, 25 candidates incl. the true next token.
        flat = np.concatenate(seqs)
        unigram = np.bincount(flat, minlength=tok.vocab_size).astype(np.float64)
        unigram /= unigram.sum()
        freq = _FrequentTokens(rng, unigram)
        pos = rng.integers(2, len(flat) - 1, size=args.queries)
        contexts = np.stack([flat[p - 2 : p] for p in pos]).astype(np.int32)
        cands = np.stack([_sample_candidates(rng, flat[p], freq, args.top_k) for p in pos])
        _native.time_probability(store.native, contexts[:1000], cands[:1000])  # warm-up
        q_ns = _native.time_probability(store.native, contexts, cands)
        hit = np.mean([store.probability(c, x)[1][0] > 0 for c, x in zip(contexts[:2000], cands[:2000], strict=True)])
        py_ns = _time_python_probability(store, contexts[:5000], cands[:5000])
        py_list_ns = _time_python_probability(store, contexts[:5000].tolist(), cands[:5000].tolist())

        # Search workload: a 64-token prompt ending at the root, per level the true continuation among k.
        n, L, k = args.searches, args.levels, args.top_k
        spos = rng.integers(64, len(flat) - L - 1, size=n)
        s_ctx = np.stack([flat[p - 63 : p + 1] for p in spos]).astype(np.int32)
        s_tok = np.empty((n, L, k), dtype=np.int32)
        s_prob = np.empty((n, L, k), dtype=np.float32)
        for i, p in enumerate(spos):
            for lvl in range(L):
                s_tok[i, lvl] = _sample_candidates(rng, flat[p + 1 + lvl], freq, k)
                logits = np.sort(rng.normal(0.0, 2.0, size=k))[::-1]
                e = np.exp(logits - logits.max())
                s_prob[i, lvl] = (e / e.sum()).astype(np.float32)
        _native.time_search(store.native, s_tok[:200], s_prob[:200], s_ctx[:200], args.beam_width, args.max_nodes)
        s_ns, s_nodes = _native.time_search(store.native, s_tok, s_prob, s_ctx, args.beam_width, args.max_nodes)
        ns_off, _ = _native.time_search(None, s_tok, s_prob, s_ctx, args.beam_width, args.max_nodes)
        py_search_ns = _time_python_search(store, s_tok, s_prob, s_ctx, args)

    q_med, q_p99 = _pct(q_ns)
    s_med, s_p99 = _pct(s_ns)
    figures: dict[str, Any] = {
        "python": python_version(),
        "files": len(files),
        "tokens": n_tokens,
        "vocab": tok.vocab_size,
        "order": info["order"],
        "nodes": info["num_nodes"],
        "level_sizes": info["level_sizes"],
        "file_bytes": info["file_bytes"],
        "bytes_per_node": info["bytes_per_node"],
        "build_s": build_s,
        "build_tokens_per_s": n_tokens / build_s,
        "load_ms_median": float(np.median(load_ns)) / 1e6,
        "verify_s": verify_s,
        "probability_us_median": q_med,
        "probability_us_p99": q_p99,
        "probability_python_call_us_median": _pct(py_ns)[0],
        "probability_python_list_call_us_median": _pct(py_list_ns)[0],
        "probability_first_candidate_hit_rate": float(hit),
        "search_us_median": s_med,
        "search_us_p99": s_p99,
        "search_no_ngram_us_median": _pct(ns_off)[0],
        "search_python_call_us_median": py_search_ns,
        "search_nodes_mean": float(np.mean(s_nodes)),
    }
    _print(figures, args)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
        print(f"figures written to {args.json}")
    return 0


def _time_python_probability(store: NgramStore, contexts: Any, cands: Any) -> np.ndarray:
    """Per-call ns of ``NgramStore.probability`` from Python (validation and conversions included): what a
    caller outside the native tree search pays, e.g. the CLI or a Python drafter loop."""
    ns = []
    for c, x in zip(contexts, cands, strict=True):
        t0 = time.perf_counter_ns()
        store.probability(c, x)
        ns.append(time.perf_counter_ns() - t0)
    return np.asarray(ns)


def _time_python_search(store: NgramStore, tok: np.ndarray, prob: np.ndarray, ctx: np.ndarray,
                        args: argparse.Namespace) -> float | None:
    try:
        from dart_core.ngram.search import search_tree
    except ImportError:
        return None
    ns = []
    for i in range(min(len(tok), 1000)):
        t0 = time.perf_counter_ns()
        search_tree(tok[i], prob[i], ctx[i], store, beam_width=args.beam_width, max_nodes=args.max_nodes)
        ns.append(time.perf_counter_ns() - t0)
    return float(np.median(ns)) / 1e3


def _print(f: dict[str, Any], args: argparse.Namespace) -> None:
    rows = [
        ("nodes (root included)", f"{f['nodes']:,}  (levels {', '.join(f'{n:,}' for n in f['level_sizes'])})"),
        ("file bytes", f"{f['file_bytes']:,}"),
        ("bytes per node", f"{f['bytes_per_node']:.2f}"),
        ("build time", f"{f['build_s']:.2f} s  ({f['build_tokens_per_s'] / 1e6:.2f} M tokens/s)"),
        ("load time (mmap, median)", f"{f['load_ms_median']:.3f} ms"),
        ("full verify", f"{f['verify_s']:.2f} s"),
        (f"probability, {args.top_k} cand, 2-token ctx",
         f"median {f['probability_us_median']:.2f} µs, p99 {f['probability_us_p99']:.2f} µs (native)"),
        ("NgramStore.probability per Python call",
         f"median {f['probability_python_call_us_median']:.2f} µs (int32 arrays), "
         f"{f['probability_python_list_call_us_median']:.2f} µs (lists of ints)"),
        (f"search_tree k={args.top_k} w={args.beam_width} L={args.levels} n={args.max_nodes}",
         f"median {f['search_us_median']:.1f} µs, p99 {f['search_us_p99']:.1f} µs (native); "
         f"{f['search_no_ngram_us_median']:.1f} µs without N-gram"
         + (f"; {f['search_python_call_us_median']:.1f} µs per Python call"
            if f["search_python_call_us_median"] is not None else "")),
    ]
    width = max(len(r[0]) for r in rows)
    print()
    for name, val in rows:
        print(f"  {name:<{width}}  {val}")
