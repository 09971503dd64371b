"""N-gram-guided tree search (docs/tree-search.md) against a pure-Python reference, plus DraftTree helpers.

The reference below re-implements the spec independently: N-gram counts in a dict (docs/formats.md
semantics), scores in float32 numpy scalars in the spec's order of operations. ``log`` is the C library's
``logf`` through ctypes when available (numpy's float32 log differs from it in the last bit for ~1 in 5
inputs, which could flip near-ties), else numpy's.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections import defaultdict

import numpy as np
import pytest

from dart_core import _native
from dart_core.engine.tree import DraftTree
from dart_core.ngram.search import default_level_weights, default_logit_weights, search_tree
from dart_core.ngram.store import NgramStore

F32 = np.float32
EPS = F32(1e-10)


def _make_logf():
    name = ctypes.util.find_library("m")
    if name:
        try:
            fn = ctypes.CDLL(name).logf
            fn.restype, fn.argtypes = ctypes.c_float, [ctypes.c_float]
            return lambda x: F32(fn(float(x)))
        except (OSError, AttributeError):
            pass
    return lambda x: np.log(F32(x))


LOGF = _make_logf()


# --------------------------------------------------------------------------- reference
def ref_counts(sequences, order):
    counts = defaultdict(int)
    for seq in sequences:
        seq = [int(t) for t in seq]
        for s in range(len(seq)):
            sl = seq[s : s + order]
            for j in range(1, len(sl) + 1):
                counts[tuple(sl[:j])] += 1
    return dict(counts)


def ref_prob(counts, order, context, x):
    for L in range(min(order - 1, len(context)), 0, -1):
        c = tuple(context[len(context) - L :])
        if c not in counts:
            continue
        cx = (*c, x)
        if cx in counts:
            return F32(counts[cx]) * (F32(1.0) / F32(counts[c]))
    return F32(0.0)


def ref_search(toks, probs, ctx, counts, order, w, max_nodes, lw, logw, ngw, eos):
    """Returns [(token sequence, score)] in output order (depth, score desc, creation)."""
    levels, k = toks.shape
    ngw = F32(ngw)
    use_ng = counts is not None and ngw > 0
    ctx = [int(t) for t in ctx]
    pool = []  # (score, seq, creation index)
    beam = [((), F32(0.0))]
    for lev in range(levels):
        ext = []
        for seq, ps in beam:
            for i in range(k):
                t = int(toks[lev, i])
                lt = LOGF(F32(probs[lev, i]) + EPS) * F32(logw[lev])
                if lev > 0 and use_ng:
                    full = ctx + list(seq)
                    c = full[max(0, len(full) - (order - 1)) :] if order > 1 else []
                    ng = ref_prob(counts, order, c, t)
                    term = lt + LOGF(ng + EPS) * ngw
                else:
                    term = lt
                node = (F32(ps + F32(lw[lev]) * term), (*seq, t), len(pool))
                pool.append(node)
                ext.append(node)
        ends = set() if eos is None else {eos} if isinstance(eos, int) else set(eos)
        ext.sort(key=lambda n: (n[1][-1] in ends, -n[0], n[2]))
        beam = [(n[1], n[0]) for n in ext[:w]]
    pool.sort(key=lambda n: (-n[0], len(n[1]), n[2]))
    kept = pool[:max_nodes]
    kept.sort(key=lambda n: (len(n[1]), -n[0], n[2]))
    return [(n[1], n[0]) for n in kept]


def node_paths(tree):
    """Token sequence below the root of every node (root: ())."""
    seqs = [()]
    for i in range(1, tree.size):
        seqs.append((*seqs[tree.parents[i]], int(tree.tokens[i])))
    return seqs


def check_tree_invariants(tree, max_nodes):
    assert tree.size <= max_nodes + 1
    assert tree.parents[0] == -1
    assert all(0 <= tree.parents[i] < i for i in range(1, tree.size))
    d = tree.depths
    assert np.all(np.diff(d) >= 0), "depth must not decrease"
    for i in range(1, tree.size - 1):
        if d[i] == d[i + 1]:
            assert tree.scores[i] >= tree.scores[i + 1], "scores must not increase within a depth"
    # prefix closure: every node's score <= its parent's (terms are <= 0)
    for i in range(1, tree.size):
        p = tree.parents[i]
        if p > 0:
            assert tree.scores[i] <= tree.scores[p]


# --------------------------------------------------------------------------- fixtures
def markov_sequences(rng, vocab, n_seqs, length):
    trans = rng.dirichlet(np.full(vocab, 0.3), size=vocab)
    seqs = []
    for _ in range(n_seqs):
        t = int(rng.integers(vocab))
        s = [t]
        for _ in range(int(rng.integers(1, length))):
            t = int(rng.choice(vocab, p=trans[t]))
            s.append(t)
        seqs.append(s)
    return seqs


@pytest.fixture(scope="module")
def stores():
    rng = np.random.default_rng(1234)
    vocab = 10
    seqs = markov_sequences(rng, vocab, 40, 30)
    out = {}
    for order in (1, 2, 3, 4):
        out[order] = (NgramStore.build(seqs, order=order), ref_counts(seqs, order))
    return vocab, out


def random_case(rng, vocab):
    levels = int(rng.integers(1, 6))
    k = int(rng.integers(1, vocab + 1))
    toks = np.stack([rng.permutation(vocab)[:k] for _ in range(levels)]).astype(np.int32)
    logits = rng.normal(size=(levels, k)) * rng.uniform(0.5, 3)
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p = (p / p.sum(axis=1, keepdims=True)).astype(np.float32)
    ctx = rng.integers(0, vocab, int(rng.integers(1, 6))).astype(np.int32)
    return toks, p, ctx


# --------------------------------------------------------------------------- reference comparison
@pytest.mark.parametrize("chunk", range(5))
def test_matches_reference(stores, chunk):
    vocab, by_order = stores
    rng = np.random.default_rng(100 + chunk)
    for case in range(50):
        toks, p, ctx = random_case(rng, vocab)
        levels = toks.shape[0]
        order = int(rng.choice([1, 2, 3, 4]))
        use_store = rng.random() < 0.75
        store, counts = by_order[order] if use_store else (None, None)
        w = int(rng.integers(1, 8))
        max_nodes = int(rng.integers(0, 40))
        r = rng.random()  # no EOS rule, one end-of-text id, or several (every stop id of a generation)
        eos = None if r < 0.6 else int(rng.integers(vocab)) if r < 0.8 else [int(t) for t in rng.integers(0, vocab, 3)]
        ngw = float(rng.choice([0.0, 0.5, rng.uniform(0.05, 2.0)]))
        if rng.random() < 0.5:
            lw = rng.uniform(0.05, 1.5, levels).astype(np.float32)
            logw = rng.uniform(0.05, 1.5, levels).astype(np.float32)
        else:
            lw, logw = None, None
        tree = search_tree(toks, p, ctx, store, beam_width=w, max_nodes=max_nodes, level_weights=lw,
                           logit_weights=logw, ngram_weight=ngw, eos_token_id=eos)
        ref = ref_search(toks, p, ctx, counts, order, w, max_nodes,
                         default_level_weights(levels) if lw is None else lw,
                         default_logit_weights(levels) if logw is None else logw, ngw, eos)
        where = f"case {chunk}/{case}: order={order} store={use_store} w={w} max={max_nodes} eos={eos} {ngw=}"
        assert tree.tokens[0] == ctx[-1], where
        got = node_paths(tree)[1:]
        assert got == [s for s, _ in ref], where  # same nodes, same order (hence same parents)
        np.testing.assert_allclose(tree.scores[1:], [s for _, s in ref], atol=1e-5, rtol=0, err_msg=where)
        check_tree_invariants(tree, max_nodes)


def test_ngram_weight_zero_equals_no_store(stores):
    vocab, by_order = stores
    rng = np.random.default_rng(7)
    for _ in range(20):
        toks, p, ctx = random_case(rng, vocab)
        a = search_tree(toks, p, ctx, by_order[3][0], ngram_weight=0.0)
        b = search_tree(toks, p, ctx, None)
        assert np.array_equal(a.tokens, b.tokens) and np.array_equal(a.parents, b.parents)
        assert np.array_equal(a.scores, b.scores)


def test_store_changes_the_tree(stores):
    vocab, by_order = stores
    rng = np.random.default_rng(8)
    differs = 0
    for _ in range(20):
        toks, p, ctx = random_case(rng, vocab)
        if toks.shape[0] < 2:
            continue
        a = search_tree(toks, p, ctx, by_order[3][0], beam_width=3, max_nodes=10)
        b = search_tree(toks, p, ctx, None, beam_width=3, max_nodes=10)
        differs += not np.array_equal(a.scores, b.scores)
    assert differs > 0


def test_properties_large(stores):
    vocab, by_order = stores
    rng = np.random.default_rng(9)
    for _ in range(30):
        levels, k = int(rng.integers(1, 10)), vocab
        toks = np.stack([rng.permutation(vocab) for _ in range(levels)]).astype(np.int32)
        p = rng.dirichlet(np.full(k, 0.5), size=levels).astype(np.float32)
        ctx = rng.integers(0, vocab, 4)
        max_nodes = int(rng.integers(0, 80))
        w = int(rng.integers(1, 25))
        tree = search_tree(toks, p, ctx, by_order[3][0], beam_width=w, max_nodes=max_nodes,
                           eos_token_id=int(rng.integers(vocab)))
        check_tree_invariants(tree, max_nodes)
        pool = level_n = k  # level l contributes min(w, level l-1) * k extensions
        for _ in range(1, levels):
            level_n = min(w, level_n) * k
            pool += level_n
        assert tree.size == 1 + min(max_nodes, pool)
        assert len(set(node_paths(tree))) == tree.size  # distinct sequences


# --------------------------------------------------------------------------- targeted cases
def test_eos_goes_after_non_eos_in_the_beam():
    E, a, b = 7, 1, 2
    toks = np.array([[E, a, b], [3, 4, 5]], dtype=np.int32)
    p = np.array([[0.7, 0.2, 0.1], [0.5, 0.3, 0.2]], dtype=np.float32)
    # w = 2: E has the best score but the beam is {a, b}; E stays in the pool (kept as a leaf).
    tree = search_tree(toks, p, [9], None, beam_width=2, max_nodes=100, eos_token_id=E)
    paths = node_paths(tree)
    assert (E,) in paths
    assert not any(len(s) == 2 and s[0] == E for s in paths)
    assert {s[0] for s in paths if len(s) == 2} == {a, b}
    assert tree.tokens[1] == E  # depth-1 nodes by score: E first (no EOS rule in the final cut)
    # w = 3: fewer than w non-EOS candidates, so E is extended too — last in beam order.
    tree = search_tree(toks, p, [9], None, beam_width=3, max_nodes=100, eos_token_id=E)
    paths = node_paths(tree)
    assert sum(1 for s in paths if len(s) == 2 and s[0] == E) == 3
    # Without the EOS rule E would be in a width-1 beam; with it, a is.
    tree = search_tree(toks, p, [9], None, beam_width=1, max_nodes=100, eos_token_id=E)
    assert {s[0] for s in node_paths(tree) if len(s) == 2} == {a}
    tree = search_tree(toks, p, [9], None, beam_width=1, max_nodes=100)
    assert {s[0] for s in node_paths(tree) if len(s) == 2} == {E}
    # Several stop ids (a chat model's EOS and end-of-turn): each ranks last; a list, a set or an array alike.
    for stops in ([E, a], {a, E}, np.array([a, E], dtype=np.int64)):
        tree = search_tree(toks, p, [9], None, beam_width=1, max_nodes=100, eos_token_id=stops)
        assert {s[0] for s in node_paths(tree) if len(s) == 2} == {b}
    with pytest.raises(ValueError, match="eos_token_id"):
        search_tree(toks, p, [9], None, eos_token_id=[E, 2**40])


def test_exact_ties_keep_prefix_closure():
    # p = 1.0 makes every term exactly 0: all scores tie at 0; the shorter sequence must win.
    toks = np.array([[5], [6], [7], [8]], dtype=np.int32)
    p = np.ones((4, 1), dtype=np.float32)
    for max_nodes in range(5):
        tree = search_tree(toks, p, [1], None, max_nodes=max_nodes)
        assert tree.tokens.tolist() == [1, 5, 6, 7, 8][: max_nodes + 1]
        assert tree.parents.tolist() == [-1, 0, 1, 2, 3][: max_nodes + 1]
        assert np.all(tree.scores == 0)
    # ties among siblings/cousins: p = [1, 0, 0] per level, w = 3
    toks = np.array([[1, 2, 3], [4, 5, 6], [7, 8, 9]], dtype=np.int32)
    p = np.array([[1.0, 0.0, 0.0]] * 3, dtype=np.float32)
    for max_nodes in range(12):
        tree = search_tree(toks, p, [0], None, beam_width=3, max_nodes=max_nodes)
        check_tree_invariants(tree, max_nodes)
        chain = [(1,), (1, 4), (1, 4, 7)]  # the three score-0 nodes come first in the selection
        assert set(chain[:max_nodes]) <= set(node_paths(tree))
        assert tree.size == 1 + max_nodes


def test_all_unseen_ngrams_are_penalised():
    store = NgramStore.build([list(range(100, 120))] * 3, order=3)
    rng = np.random.default_rng(3)
    levels, k = 4, 5
    toks = np.stack([rng.permutation(10)[:k] for _ in range(levels)]).astype(np.int32)
    p = rng.dirichlet(np.ones(k), size=levels).astype(np.float32)
    with_store = search_tree(toks, p, [100, 101], store, beam_width=5, max_nodes=200)
    without = search_tree(toks, p, [100, 101], None, beam_width=5, max_nodes=200)
    lw = default_level_weights(levels)
    penalty = np.log(1e-10) * 0.5
    base = dict(zip(node_paths(without), without.scores, strict=True))
    for seq, s in zip(node_paths(with_store)[1:], with_store.scores[1:], strict=True):
        expected = base[seq] + sum(lw[lev] * penalty for lev in range(1, len(seq)))
        assert s == pytest.approx(expected, abs=1e-4)


def test_degenerate_inputs(stores):
    _, by_order = stores
    store = by_order[4][0]
    # one level: root + the k candidates (by score), cut at max_nodes
    tree = search_tree([[3, 4, 5]], [[0.2, 0.5, 0.3]], [1], store, max_nodes=2)
    assert tree.tokens.tolist() == [1, 4, 5] and tree.parents.tolist() == [-1, 0, 0]
    # k = 1: a chain
    tree = search_tree([[3], [4], [5]], [[0.9], [0.8], [0.7]], [2], store)
    assert tree.tokens.tolist() == [2, 3, 4, 5] and tree.parents.tolist() == [-1, 0, 1, 2]
    # max_nodes = 0: root only
    tree = search_tree([[3, 4]], [[0.5, 0.5]], [6, 7], store, max_nodes=0)
    assert tree.tokens.tolist() == [7] and tree.parents.tolist() == [-1]


def test_default_weights():
    lw, logw = default_level_weights(9), default_logit_weights(9)
    assert lw.dtype == np.float32 and logw.dtype == np.float32
    np.testing.assert_allclose(lw, [(lev + 1) ** -0.7 for lev in range(9)], rtol=1e-6)
    np.testing.assert_allclose(logw, [0.9**lev for lev in range(9)], rtol=1e-6)
    toks = np.array([[1, 2], [3, 4], [5, 6]], dtype=np.int32)
    p = np.array([[0.6, 0.4]] * 3, dtype=np.float32)
    a = search_tree(toks, p, [0], None)
    b = search_tree(toks, p, [0], None, level_weights=lw[:3], logit_weights=logw[:3])
    assert np.array_equal(a.scores, b.scores)


# --------------------------------------------------------------------------- bad inputs
GOOD_T = np.array([[1, 2], [3, 4]], dtype=np.int32)
GOOD_P = np.array([[0.5, 0.5], [0.9, 0.1]], dtype=np.float32)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"topk_tokens": GOOD_T[:, :1]}, "mismatched shapes"),
        ({"topk_tokens": GOOD_T[0], "topk_probs": GOOD_P[0]}, "2-D"),
        ({"topk_tokens": GOOD_T[:0], "topk_probs": GOOD_P[:0]}, "at least one level"),
        ({"context_tokens": []}, "context_tokens is empty"),
        ({"context_tokens": [[1, 2]]}, "1-D"),
        ({"topk_probs": np.array([[0.5, np.nan], [0.9, 0.1]], dtype=np.float32)}, "NaN"),
        ({"topk_probs": np.array([[0.5, 1.5], [0.9, 0.1]])}, r"\[0, 1\]"),
        ({"topk_probs": np.array([[0.5, -0.1], [0.9, 0.1]])}, r"\[0, 1\]"),
        ({"topk_tokens": np.array([[1, 2**31], [3, 4]])}, "int32"),
        ({"topk_tokens": GOOD_P}, "integer token ids"),
        ({"level_weights": [1.0, -0.5]}, "level_weights must be finite and >= 0"),
        ({"logit_weights": [1.0, np.inf]}, "logit_weights must be finite"),
        ({"level_weights": [1.0, 1.0, 1.0]}, "level_weights must be a 1-D array of 2"),
        ({"ngram_weight": -1.0}, "ngram_weight"),
        ({"ngram_weight": float("nan")}, "ngram_weight"),
        ({"beam_width": 0}, "beam_width"),
        ({"max_nodes": -1}, "max_nodes"),
        ({"eos_token_id": 2**40}, "eos_token_id"),
    ],
)
def test_bad_inputs(kwargs, match):
    args = {"topk_tokens": GOOD_T, "topk_probs": GOOD_P, "context_tokens": [1], "store": None, **kwargs}
    with pytest.raises(ValueError, match=match):
        search_tree(args.pop("topk_tokens"), args.pop("topk_probs"), args.pop("context_tokens"),
                    args.pop("store"), **args)


def test_bad_store_type():
    with pytest.raises(TypeError, match="NgramStore"):
        search_tree(GOOD_T, GOOD_P, [1], object())


def test_native_validation():
    """The C++ search validates on its own (callers other than the Python wrapper)."""
    ctx = np.array([1], dtype=np.int32)
    bad_p = np.array([[0.5, np.nan], [0.9, 0.1]], dtype=np.float32)
    with pytest.raises(ValueError, match="probabilit"):
        _native.search_tree(GOOD_T, bad_p, ctx, None, 20, 60, None, None, 0.5, None)
    with pytest.raises(ValueError, match="level_weights"):
        _native.search_tree(GOOD_T, GOOD_P, ctx, None, 20, 60, np.array([1, -1], dtype=np.float32), None, 0.5,
                            None)
    with pytest.raises(ValueError, match="context is empty"):
        _native.search_tree(GOOD_T, GOOD_P, ctx[:0], None, 20, 60, None, None, 0.5, None)
    with pytest.raises(ValueError, match="beam_width"):
        _native.search_tree(GOOD_T, GOOD_P, ctx, None, 0, 60, None, None, 0.5, None)
    with pytest.raises(ValueError, match="ngram_weight"):
        _native.search_tree(GOOD_T, GOOD_P, ctx, None, 20, 60, None, None, float("inf"), None)
    with pytest.raises(ValueError, match="same shape"):
        _native.search_tree(GOOD_T[:, :1].copy(), GOOD_P, ctx, None, 20, 60, None, None, 0.5, None)


def test_torch_tensors(stores):
    torch = pytest.importorskip("torch")
    _, by_order = stores
    store = by_order[3][0]
    rng = np.random.default_rng(5)
    toks = np.stack([rng.permutation(10)[:6] for _ in range(4)])
    p = rng.dirichlet(np.ones(6), size=4).astype(np.float32)
    ctx = np.array([1, 2, 3])
    a = search_tree(torch.tensor(toks), torch.tensor(p, requires_grad=True), torch.tensor(ctx), store,
                    level_weights=torch.tensor(default_level_weights(4)))
    b = search_tree(toks, p, ctx, store)
    assert np.array_equal(a.tokens, b.tokens) and np.array_equal(a.parents, b.parents)
    assert np.array_equal(a.scores, b.scores)


# --------------------------------------------------------------------------- DraftTree
def test_draft_tree_helpers():
    #        0(10)
    #       /     \
    #     1(11)   2(12)
    #    /    \
    #  3(13)  4(14)
    #   |
    #  5(15)
    tree = DraftTree([10, 11, 12, 13, 14, 15], [-1, 0, 0, 1, 1, 3])
    assert tree.size == 6 and len(tree) == 6
    assert tree.tokens.dtype == np.int64 and tree.parents.dtype == np.int64
    assert tree.depths.tolist() == [0, 1, 1, 2, 2, 3]
    assert tree.position_ids(7).tolist() == [7, 8, 8, 9, 9, 10]
    assert tree.children() == [[1, 2], [3, 4], [], [5], [], []]
    assert tree.leaves() == [2, 4, 5]
    assert tree.path_to(5) == [0, 1, 3, 5]
    assert tree.paths() == [[0, 2], [0, 1, 4], [0, 1, 3, 5]]
    assert tree.token_paths() == [(10, 12), (10, 11, 14), (10, 11, 13, 15)]
    mask = tree.ancestor_mask()
    expected = np.zeros((6, 6), dtype=bool)
    for i in range(6):
        for j in tree.path_to(i):
            expected[i, j] = True
    assert mask.dtype == bool and np.array_equal(mask, expected)
    assert mask[5].tolist() == [True, True, False, True, False, True]
    mask[0, 1] = True  # a copy: the tree is unaffected
    assert not tree.ancestor_mask()[0, 1]
    with pytest.raises(ValueError):
        tree.tokens[0] = 3  # read-only
    root_only = DraftTree([4], [-1])
    assert root_only.leaves() == [0] and root_only.paths() == [[0]]
    assert root_only.ancestor_mask().tolist() == [[True]]


@pytest.mark.parametrize(
    ("tokens", "parents", "match"),
    [
        ([], [], "at least the root"),
        ([1, 2], [-1], "differ in length"),
        ([1, 2], [0, 0], r"parents\[0\] must be -1"),
        ([1, 2, 3], [-1, 0, 2], r"parents\[2\] = 2 is invalid"),
        ([1, 2, 3], [-1, 0, 5], r"parents\[2\] = 5"),
        ([1, 2, 3], [-1, -1, 0], r"parents\[1\] = -1"),
        ([[1, 2]], [[-1, 0]], "1-D"),
        ([1.5, 2], [-1, 0], "integers"),
    ],
)
def test_draft_tree_rejects_invalid(tokens, parents, match):
    with pytest.raises(ValueError, match=match):
        DraftTree(tokens, parents)


def test_draft_tree_scores_shape():
    with pytest.raises(ValueError, match="scores"):
        DraftTree([1, 2], [-1, 0], scores=[0.0])
