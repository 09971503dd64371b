"""Tests for dart_core.engine.acceptance: greedy rule vs the spec's literal path formulation, warpers vs transformers,
and empirical losslessness of the sampling rule (chi-square on a tiny Markov target, with a negative control)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from dart_core.engine.acceptance import (
    Acceptance,
    SamplingConfig,
    accept,
    accept_greedy,
    accept_sampling,
    processed_probs,
)
from dart_core.engine.tree import DraftTree

GREEDY = SamplingConfig()


def random_tree(rng: np.random.Generator, n: int, vocab: int) -> DraftTree:
    parents = [-1] + [int(rng.integers(0, i)) for i in range(1, n)]
    tokens = rng.integers(0, vocab, size=n)
    return DraftTree(tokens, parents)


# ---------------------------------------------------------------------------------------------- greedy
def literal_greedy(tree: DraftTree, logits: torch.Tensor) -> Acceptance:
    """The spec, verbatim: per path count leading matches, longest wins, first path on ties."""
    top = logits.argmax(dim=-1)
    best_path, best_a = None, -1
    for path in tree.paths():
        a = 0
        for j in range(1, len(path)):
            if int(tree.tokens[path[j]]) != int(top[path[j - 1]]):
                break
            a += 1
        if a > best_a:
            best_path, best_a = path, a
    nodes = best_path[: best_a + 1]
    bonus = int(top[nodes[-1]])
    return Acceptance(nodes, best_a, bonus, [int(tree.tokens[i]) for i in nodes[1:]] + [bonus])


def test_greedy_matches_literal_path_formulation():
    rng = np.random.default_rng(0)
    gen = torch.Generator().manual_seed(0)
    ties = 0
    for trial in range(3000):
        vocab = int(rng.integers(2, 5))  # tiny vocab: many matches, duplicate siblings and path ties
        tree = random_tree(rng, int(rng.integers(1, 16)), vocab)
        logits = torch.randint(0, 3, (tree.size, vocab), generator=gen).float()  # ties inside rows too
        got, want = accept_greedy(tree, logits), literal_greedy(tree, logits)
        assert got == want, (trial, tree.tokens, tree.parents)
        assert accept(tree, logits, GREEDY) == want
        per_path = [
            next((j - 1 for j in range(1, len(p)) if tree.tokens[p[j]] != logits[p[j - 1]].argmax()), len(p) - 1)
            for p in tree.paths()
        ]
        ties += sum(a == want.accepted for a in per_path) > 1
    assert ties > 100  # the tie-break really was exercised


def test_greedy_chain_and_root_only():
    vocab = 7
    logits = torch.full((4, vocab), -1.0)
    for i, t in enumerate([3, 5, 2, 6]):
        logits[i, t] = 1.0  # argmax after node i
    chain = DraftTree([1, 3, 5, 4], [-1, 0, 1, 2])  # drafts 3, 5 match; 4 != argmax(node 2) = 2
    res = accept_greedy(chain, logits)
    assert res == Acceptance(nodes=[0, 1, 2], accepted=2, bonus_token=2, tokens=[3, 5, 2])
    full = DraftTree([1, 3, 5, 2], [-1, 0, 1, 2])
    assert accept_greedy(full, logits).tokens == [3, 5, 2, 6]
    root = DraftTree([4], [-1])
    assert accept_greedy(root, logits[:1]) == Acceptance(nodes=[0], accepted=0, bonus_token=3, tokens=[3])


def test_greedy_output_equals_plain_greedy_decoding():
    """End to end on a Markov target: speculative greedy emits exactly the plain greedy continuation."""
    rng = np.random.default_rng(1)
    vocab = 5
    table = torch.tensor(rng.normal(size=(vocab, vocab)), dtype=torch.float32)
    plain = [0]
    for _ in range(60):
        plain.append(int(table[plain[-1]].argmax()))
    out = [0]
    while len(out) < 61:
        tree = random_tree(rng, int(rng.integers(1, 10)), vocab)
        tree = DraftTree([out[-1], *tree.tokens[1:]], tree.parents)
        out += accept_greedy(tree, table[torch.from_numpy(tree.tokens.copy())]).tokens
    assert out[:61] == plain


# ---------------------------------------------------------------------------------------------- warpers
def reference_probs(logits: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    from transformers import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    scores = logits.float()
    ids = torch.zeros((scores.shape[0], 1), dtype=torch.long)
    scores = TemperatureLogitsWarper(cfg.temperature)(ids, scores)
    if cfg.top_k > 0:
        scores = TopKLogitsWarper(cfg.top_k)(ids, scores)
    if cfg.top_p < 1.0:
        scores = TopPLogitsWarper(cfg.top_p)(ids, scores)
    return scores.softmax(dim=-1)


@pytest.mark.parametrize("temperature", [0.3, 1.0, 1.7])
@pytest.mark.parametrize("top_p", [1.0, 0.95, 0.7, 0.4, 0.05])
@pytest.mark.parametrize("top_k", [0, 1, 3, 10, 100])
def test_processed_probs_matches_transformers(temperature, top_p, top_k):
    gen = torch.Generator().manual_seed(int(temperature * 10) + int(top_p * 100) + top_k)
    cfg = SamplingConfig(temperature, top_p, top_k)
    ties = torch.randint(-3, 4, (64, 12), generator=gen).float()  # heavy ties, incl. at the top-k / top-p edge
    smooth = torch.randn(64, 50, generator=gen) * 3
    uniform = torch.zeros(4, 8)
    masked = torch.randn(8, 12, generator=gen)
    masked[:, ::3] = -math.inf
    for logits in (ties, smooth, uniform, masked):
        got, want = processed_probs(logits, cfg), reference_probs(logits, cfg)
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)
        assert torch.equal(got > 0, want > 0)  # identical support: the boundary decisions agree exactly
    # leading dims and dtype: a bf16 [2, 3, V] batch is processed row by row in float32
    x = torch.randn(2, 3, 20, generator=gen).bfloat16()
    torch.testing.assert_close(processed_probs(x, cfg), reference_probs(x.reshape(6, 20), cfg).reshape(2, 3, 20))


def test_processed_probs_greedy_is_one_hot():
    logits = torch.tensor([[0.0, 2.0, 2.0, 1.0]])
    assert processed_probs(logits, GREEDY).tolist() == [[0.0, 1.0, 0.0, 0.0]]


# ---------------------------------------------------------------------------------------------- losslessness
VOCAB = 6
_rng = np.random.default_rng(7)
TABLE = torch.tensor(_rng.normal(scale=1.0, size=(VOCAB, VOCAB)), dtype=torch.float32)
for _a in range(VOCAB):
    TABLE[_a, (_a + 2) % VOCAB] = -math.inf  # drafts of zero target probability occur


def make_drafter(seed: int) -> list[DraftTree]:
    """A deterministic drafter: one fixed tree per context (root) token, as top-k drafting gives.

    Fixed, not re-randomized per step: averaging over uniformly random drafts would hide some wrong rules (e.g.
    drawing the bonus from the full q instead of the residual is exactly lossless for uniform random drafts).
    Every tree has a duplicate sibling token at the root and a root draft the target gives probability 0.
    """
    rng = np.random.default_rng(seed)
    trees = []
    for root in range(VOCAB):
        n = int(rng.integers(5, 10))
        parents = [-1, 0, 0, 0] + [int(rng.integers(0, i)) for i in range(4, n)]
        tokens = [root, *rng.integers(0, VOCAB, size=n - 1).tolist()]
        tokens[2] = tokens[1]  # duplicate sibling
        tokens[3] = (root + 2) % VOCAB  # zero target probability (TABLE[root, root + 2] = -inf)
        trees.append(DraftTree(tokens, parents))
    return trees


def wrong_accept(tree: DraftTree, logits: torch.Tensor, cfg: SamplingConfig, generator: torch.Generator):
    """Negative control: accept any draft the target merely allows (q[x] > 0) — biased towards the drafts."""
    node = 0
    while True:
        q = processed_probs(logits[node], cfg)
        nxt = next((c for c in tree._children[node] if q[int(tree.tokens[c])] > 0), None)
        if nxt is None:
            bonus = int(torch.multinomial(q, 1, generator=generator))
            nodes = tree.path_to(node)
            return Acceptance(nodes, len(nodes) - 1, bonus, [int(tree.tokens[i]) for i in nodes[1:]] + [bonus])
        node = nxt


def no_residual_accept(tree: DraftTree, logits: torch.Tensor, cfg: SamplingConfig, generator: torch.Generator):
    """Subtler negative control: the right acceptance test, but the bonus is drawn from the full q, not the residual."""
    node = 0
    while True:
        q = processed_probs(logits[node], cfg)
        nxt = None
        for c in tree._children[node]:
            if float(torch.rand((), generator=generator)) < q[int(tree.tokens[c])]:
                nxt = c
                break
        if nxt is None:
            bonus = int(torch.multinomial(q, 1, generator=generator))
            nodes = tree.path_to(node)
            return Acceptance(nodes, len(nodes) - 1, bonus, [int(tree.tokens[i]) for i in nodes[1:]] + [bonus])
        node = nxt


def sample_pairs(rule, cfg: SamplingConfig, n_samples: int, seed: int) -> np.ndarray:
    """Counts [V, V] of the first two emitted tokens after context token 0, across as many steps as needed."""
    drafter = make_drafter(seed)
    gen = torch.Generator().manual_seed(seed)
    counts = np.zeros((VOCAB, VOCAB), dtype=np.int64)
    for _ in range(n_samples):
        out: list[int] = []
        last = 0
        while len(out) < 2:
            tree = drafter[last]
            res = rule(tree, TABLE[torch.from_numpy(tree.tokens.copy())], cfg, gen)
            assert res.tokens[-1] == res.bonus_token and len(res.tokens) == res.accepted + 1
            out += res.tokens
            last = out[-1]
        counts[out[0], out[1]] += 1
    return counts


def chi2_p(counts: np.ndarray, probs: np.ndarray) -> float:
    counts, probs = counts.ravel(), probs.ravel()
    support = probs > 0
    assert counts[~support].sum() == 0, "emitted a token the target gives probability 0"
    expected = probs[support] / probs[support].sum() * counts.sum()
    return float(chisquare(counts[support], expected).pvalue)


def target_pairs(cfg: SamplingConfig) -> tuple[np.ndarray, np.ndarray]:
    q = processed_probs(TABLE, cfg).double().numpy()
    return q[0], q[0][:, None] * q  # P(x1) and P(x1, x2) = q(.|0)[x1] q(.|x1)[x2]


CONFIGS = [
    SamplingConfig(temperature=1.0),
    SamplingConfig(temperature=0.7, top_p=0.8),
    SamplingConfig(temperature=1.5, top_k=3),
    SamplingConfig(temperature=0.9, top_p=0.9, top_k=4),
]


@pytest.mark.parametrize(("cfg", "seed"), [(c, 11 + i) for i, c in enumerate(CONFIGS)], ids=str)
def test_sampling_is_lossless(cfg, seed):
    counts = sample_pairs(accept_sampling, cfg, 20_000, seed=seed)
    p1, p12 = target_pairs(cfg)
    assert chi2_p(counts.sum(axis=1), p1) > 1e-3
    assert chi2_p(counts, p12) > 1e-3


@pytest.mark.parametrize("rule", [wrong_accept, no_residual_accept])
def test_wrong_rule_fails_the_same_test(rule):
    cfg = CONFIGS[0]
    counts = sample_pairs(rule, cfg, 20_000, seed=11)
    p1, p12 = target_pairs(cfg)
    assert chi2_p(counts.sum(axis=1), p1) < 1e-3
    assert chi2_p(counts, p12) < 1e-3


def test_sampling_reproducible_and_dispatch():
    tree = make_drafter(3)[0]
    logits = TABLE[torch.from_numpy(tree.tokens.copy())]
    cfg = SamplingConfig(temperature=0.8)
    runs = [[accept(tree, logits, cfg, torch.Generator().manual_seed(s)) for s in range(50)] for _ in range(2)]
    assert runs[0] == runs[1]
    assert len({tuple(r.tokens) for r in runs[0]}) > 1
    with pytest.raises(ValueError, match="temperature"):
        accept_sampling(tree, logits, GREEDY)


# ---------------------------------------------------------------------------------------------- bad inputs
def test_bad_inputs():
    tree = DraftTree([0, 1, 2], [-1, 0, 0])
    cfg = SamplingConfig(temperature=1.0)
    for c in (GREEDY, cfg):
        with pytest.raises(ValueError, match="rows"):
            accept(tree, torch.zeros(2, 5), c)
        with pytest.raises(ValueError, match="2-D"):
            accept(tree, torch.zeros(5), c)
        bad = torch.zeros(3, 5)
        bad[1, 2] = float("nan")
        with pytest.raises(ValueError, match="NaN"):
            accept(tree, bad, c)
    with pytest.raises(ValueError, match="NaN"):
        processed_probs(torch.tensor([0.0, float("nan")]), cfg)
    with pytest.raises(ValueError, match="no finite"):
        processed_probs(torch.full((3,), -math.inf), cfg)
    for kwargs in (
        {"temperature": -0.1},
        {"temperature": float("nan")},
        {"top_p": 0.0},
        {"top_p": 1.5},
        {"top_k": -1},
        {"top_k": 2.5},
    ):
        with pytest.raises(ValueError, match=next(iter(kwargs))):
            SamplingConfig(**kwargs)
    assert SamplingConfig().greedy and not SamplingConfig(temperature=0.5).greedy


def test_config_combinations_construct():
    for t, p, k in itertools.product([0, 0.5, 2], [0.1, 1.0], [0, 1, 50]):
        assert SamplingConfig(t, p, k).greedy == (t == 0)


@pytest.mark.parametrize("temperature", [1e-7, 1e-38, 5e-324])
def test_tiny_temperature_is_greedy(temperature):
    """Dividing by such a temperature overflows float32 (every row became all -inf/NaN, "no finite logit");
    the limit T -> 0 is the argmax, so the config treats it as greedy."""
    cfg = SamplingConfig(temperature=temperature, top_p=0.9, top_k=5)
    assert cfg.greedy and cfg.temperature == 0.0
    logits = torch.tensor([[1.0, 7.5, -3.0, 7.25], [40.0, -40.0, 0.0, 39.0]])
    probs = processed_probs(logits, cfg)
    assert torch.equal(probs, torch.tensor([[0.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]]))
    kept = SamplingConfig(temperature=1e-5)  # still sampling, and finite
    assert not kept.greedy and torch.isfinite(processed_probs(logits, kept)).all()
