"""Suffix decoding (the reference's behaviour, ``docs/drafters.md``): the native suffix tree's counts and speculation
against a naive re-derivation of the rules on generated sequences (counts exact; drafts equal up to ties among equal
counts), the cache's local-or-global choice and eviction on hand-built sequences, the drafter's memory (only its
own answers, the last tokens included, nothing from a generation stopped before its first token), and the racer
lossless in the one loop: greedy output equal to the target's own with drafts accepted, the sampled
distribution kept."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import helpers_ckpt as C
import numpy as np
import pytest
import torch
from helpers_stats import chi_square_pvalue, second_token_case

from dart_core.drafters.suffix import SuffixDrafter, SuffixSettings
from dart_core.engine.drafter import DraftInput, remembers
from dart_core.engine.loop import generate, stream
from dart_core.engine.metrics import summarize
from dart_core.engine.target import TargetModel
from dart_core.suffix import SuffixCache, SuffixTree, speculate_tree


# ------------------------------------------------------------------------------------------ the spec, naively
def naive_count(seqs: list[list[int]], path: list[int], depth: int) -> int:
    """count(p): (sequence, start) pairs whose suffix, cut to ``depth`` tokens, begins with p."""
    if not path or len(path) > depth:
        return 0
    n = len(path)
    return sum(1 for s in seqs for i in range(len(s) - n + 1) if s[i : i + n] == path)


@dataclass
class Draft:
    tokens: list[int]
    parents: list[int]
    probs: list[float]

    @property
    def score(self) -> float:
        return sum(self.probs)


def below(prob: float, floor: float) -> bool:
    """The floor compared in float32, as the knob is given to the native core."""
    return bool(np.float32(prob) < np.float32(floor))


def children(seqs: list[list[int]], path: list[int], depth: int) -> dict[int, int]:
    """Each token that follows ``path`` within the depth, with count(path + token)."""
    if len(path) + 1 > depth:
        return {}
    n = len(path)
    out: dict[int, int] = {}
    for s in seqs:
        for i in range(len(s) - n):
            if s[i : i + n] == path:
                out[s[i + n]] = out.get(s[i + n], 0) + 1
    return out


def naive_chains(seqs: list[list[int]], pattern: list[int], budget: int, min_prob: float,
                 depth: int) -> list[Draft]:
    """Every chain the spec allows (one per way of breaking ties among equal counts)."""
    total = naive_count(seqs, pattern, depth)
    out: list[Draft] = []

    def grow(path: list[int], d: Draft) -> None:
        kids = children(seqs, pattern + path, depth)
        if len(d.tokens) >= budget or not kids:
            out.append(d)
            return
        top = max(kids.values())
        if below(top / total, min_prob):
            out.append(d)
            return
        for t, c in kids.items():
            if c == top:
                grow([*path, t], Draft([*d.tokens, t], [*d.parents, len(d.tokens) - 1], [*d.probs, c / total]))

    grow([], Draft([], [], []))
    return out


def naive_tree_probs(seqs: list[list[int]], pattern: list[int], budget: int, min_prob: float,
                     depth: int) -> list[float]:
    """The probabilities a best-first tree emits, highest first: the ``budget`` largest path probabilities at or
    above the floor (a child never outranks its parent, so best-first emits exactly these, whatever the ties)."""
    total = naive_count(seqs, pattern, depth)
    found: list[float] = []

    def walk(path: list[int]) -> None:
        for t, c in children(seqs, pattern + path, depth).items():
            if not below(c / total, min_prob):
                found.append(c / total)
                walk([*path, t])

    walk([])
    return sorted(found, reverse=True)[:budget]


def budget_of(m: int, max_spec_tokens: int, factor: float, offset: float) -> int:
    return max(0, min(max_spec_tokens, math.floor(m * factor + offset + 1e-6)))


def check_speculation(seqs: list[list[int]], context: list[int], depth: int, got: tuple, *, max_spec_tokens: int,
                      factor: float, offset: float, min_prob: float, tree: bool) -> None:
    """``got`` (the native speculate's answer) is one the spec allows: the pattern loop over m, the budget rule,
    the draft of the kept m, the kept m being the last with the highest score (score >= best keeps the longer)."""
    tokens, parents, probs, score, match_len = got
    tokens, parents, probs = tokens.tolist(), parents.tolist(), probs.tolist()
    ctx = context[-depth:]
    tried: list[int] = []
    for m in range(1, len(ctx)):
        if naive_count(seqs, ctx[-m:], depth) == 0:
            break
        tried.append(m)
    assert math.isclose(score, sum(probs), rel_tol=1e-5, abs_tol=1e-6)
    if not tried:
        assert (tokens, match_len, score) == ([], 0, 0.0)
        return
    assert match_len in tried
    scores: dict[int, list[float]] = {}
    for m in tried:
        pattern, budget = ctx[-m:], budget_of(m, max_spec_tokens, factor, offset)
        if tree:
            scores[m] = [sum(naive_tree_probs(seqs, pattern, budget, min_prob, depth))]
        else:
            scores[m] = [c.score for c in naive_chains(seqs, pattern, budget, min_prob, depth)]
    # the kept draft is one the spec allows at its m
    pattern = ctx[-match_len:]
    budget = budget_of(match_len, max_spec_tokens, factor, offset)
    total = naive_count(seqs, pattern, depth)
    if tree:
        assert sorted(probs, reverse=True) == pytest.approx(naive_tree_probs(seqs, pattern, budget, min_prob, depth))
        for i, (t, p) in enumerate(zip(tokens, parents, strict=True)):  # each a real path, its parent emitted first
            assert p < i
            path = [t]
            while p >= 0:
                path.insert(0, tokens[p])
                p = parents[p]
            assert probs[i] == pytest.approx(naive_count(seqs, pattern + path, depth) / total)
    else:
        options = naive_chains(seqs, pattern, budget, min_prob, depth)
        assert any(o.tokens == tokens and o.parents == parents and o.probs == pytest.approx(probs) for o in options), \
            (tokens, [o.tokens for o in options])
    # m is kept: every shorter match can have scored at most its score, every longer one less
    eps = 1e-5
    for m in tried:
        if m < match_len:
            assert min(scores[m]) <= score + eps, (m, scores[m], score)
        elif m > match_len:
            assert min(scores[m]) < score + eps, (m, scores[m], score)


def random_sequences(rng: random.Random, vocab: int, count: int, longest: int) -> list[list[int]]:
    """Short sequences over a small vocabulary, with repeated phrases: many matches and many ties."""
    out = []
    for _ in range(count):
        phrase = [rng.randrange(vocab) for _ in range(rng.randint(2, 5))]
        s: list[int] = []
        while len(s) < rng.randint(1, longest):
            s += phrase[: rng.randint(1, len(phrase))] if rng.random() < 0.6 else [rng.randrange(vocab)]
        out.append(s)
    return out


# ------------------------------------------------------------------------------------------ the native tree
@pytest.mark.parametrize("seed", range(6))
def test_counts_equal_the_specs_through_extends_and_removals(seed: int) -> None:
    rng = random.Random(seed)
    depth = rng.choice([1, 2, 3, 5, 24])
    tree, held = SuffixTree(depth), {}
    for step in range(40):
        if held and rng.random() < 0.25:
            seq = rng.choice(list(held))
            assert tree.remove(seq)
            del held[seq]
        else:
            seq = rng.randrange(6)
            part = random_sequences(rng, 4, 1, 7)[0]
            tree.extend(seq, part)  # grows one token at a time or several at once: the same counts
            held[seq] = held.get(seq, []) + part
        tree.check()
        assert tree.sequences == len(held) and tree.tokens == sum(map(len, held.values()))
        seqs = list(held.values())
        for _ in range(12):
            s = rng.choice(seqs) if seqs else [0]
            i = rng.randrange(len(s))
            path = s[i : i + rng.randint(1, depth + 1)] if rng.random() < 0.8 else [rng.randrange(5)]
            assert tree.count(path) == naive_count(seqs, path, depth), (step, path)
    assert not tree.remove(99) and tree.count([]) == 0


@pytest.mark.parametrize("tree_spec", [True, False], ids=["tree", "chain"])
@pytest.mark.parametrize("seed", range(8))
def test_speculation_follows_the_spec_up_to_ties(seed: int, tree_spec: bool) -> None:
    rng = random.Random(100 + seed)
    depth = rng.choice([3, 6, 24])
    seqs = random_sequences(rng, rng.choice([3, 5]), rng.randint(1, 4), 30)
    tree = SuffixTree(depth)
    for i, s in enumerate(seqs):
        tree.extend(i, s)
    for _ in range(10):
        knobs = {"max_spec_tokens": rng.choice([0, 1, 3, 8, 24]), "factor": rng.choice([0.5, 1.0, 2.0]),
                 "offset": rng.choice([0.0, 1.0, -1.0]), "min_prob": rng.choice([0.0, 0.1, 0.4])}
        base = rng.choice(seqs)
        cut = rng.randint(1, len(base))
        context = base[:cut] if rng.random() < 0.7 else random_sequences(rng, 5, 1, 10)[0]
        got = tree.speculate(context, knobs["max_spec_tokens"], knobs["factor"], knobs["offset"], knobs["min_prob"],
                             tree_spec)
        check_speculation(seqs, context, depth, got, tree=tree_spec, max_spec_tokens=knobs["max_spec_tokens"],
                          factor=knobs["factor"], offset=knobs["offset"], min_prob=knobs["min_prob"])


def test_hand_built_match_loop_budget_and_frequency_order() -> None:
    tree = SuffixTree(24)
    tree.extend(0, [1, 2, 3, 4, 1, 2, 3, 5, 1, 2, 3, 4, 9, 1, 2])
    # pattern [2]: 4 occurrences, then "3" 3 times; [1, 2]: the same; [9, 1, 2]: once, "3" never follows it here
    assert tree.count([1, 2, 3]) == 3 and tree.count([2, 3, 4]) == 2 and tree.count([9, 1, 2]) == 1
    toks, parents, probs, score, m = tree.speculate([9, 1, 2], 24, 1.0, 0.0, 0.1, False)
    # m = 1 ([2]): budget 1, "3" at 3/4; m = 2 ([1, 2]): budget 2, "3" 3/4 then "4" 2/4; m = 3: no continuation
    assert (toks.tolist(), parents.tolist(), m) == ([3, 4], [-1, 0], 2)
    assert probs.tolist() == pytest.approx([0.75, 0.5]) and score == pytest.approx(1.25)
    toks, parents, probs, score, m = tree.speculate([9, 1, 2], 24, 1.0, 0.0, 0.1, True)
    assert (toks.tolist(), parents.tolist(), m) == ([3, 4], [-1, 0], 2)  # "4" (2/4) before "5" (1/4)
    # budget 3 at m = 1 (3, 4, then one of three paths at 1/4), 4 at m = 2: its score is higher
    toks, parents, probs, score, m = tree.speculate([9, 1, 2], 24, 1.0, 2.0, 0.1, True)
    assert m == 2 and toks.tolist()[:2] == [3, 4] and parents.tolist()[:2] == [-1, 0] and len(toks) == 4
    assert score == pytest.approx(0.75 + 0.5 + 0.25 + 0.25) and probs.tolist()[2:] == [0.25, 0.25]
    # the probability floor cuts "5" (1/4) and everything below it
    toks, *_ = tree.speculate([9, 1, 2], 24, 1.0, 2.0, 0.3, True)
    assert toks.tolist() == [3, 4]
    # no match at all, a context of one token, a budget of 0
    assert tree.speculate([7, 8], 24, 1.0, 0.0, 0.1, True)[0].tolist() == []
    assert tree.speculate([2], 24, 1.0, 0.0, 0.1, True)[4] == 0
    assert tree.speculate([9, 1, 2], 0, 1.0, 0.0, 0.1, True)[0].tolist() == []


def test_the_context_is_cut_to_the_depth_and_bad_knobs_are_refused() -> None:
    tree = SuffixTree(3)
    tree.extend(0, [1, 2, 3, 4])
    # only the last 3 tokens count: [5, 1, 2] then [1, 2] matches (m = 2), "3" follows
    toks, _, _, _, m = tree.speculate([9, 9, 9, 5, 1, 2], 24, 1.0, 0.0, 0.1, True)
    assert toks.tolist() == [3] and m == 2  # [1, 2, 3] is 3 deep: nothing deeper is counted
    with pytest.raises(ValueError, match="max_depth must be at least 1"):
        SuffixTree(0)
    with pytest.raises(ValueError, match="max_spec_tokens must not be negative"):
        tree.speculate([1, 2], -1, 1.0, 0.0, 0.1, True)
    with pytest.raises(ValueError, match="finite"):
        tree.speculate([1, 2], 4, float("nan"), 0.0, 0.1, True)
    with pytest.raises((ValueError, TypeError)):
        tree.extend(0, [2**40])
    with pytest.raises(KeyError, match="no sequence 5"):
        tree.sequence(5)


# ------------------------------------------------------------------------------------------ the cache
def test_local_wins_ties_and_the_global_tree_holds_responses_only() -> None:
    cache = SuffixCache(max_tree_depth=8, max_cached_requests=4)
    cache.start_request(0, [5, 6, 7, 8])
    cache.add_active_response(0, [1, 2, 3])
    cache.stop_request(0)
    assert cache.held_answers == 1 and cache.response(0).tolist() == [1, 2, 3]  # not the prompt
    cache.start_request(1, [1, 2, 4])  # the prompt: "1 2" followed by 4 here, by 3 in the earlier answer
    d = cache.speculate(1, [1, 2])
    assert d.source == "local" and d.tokens.tolist() == [4]  # equal scores (1.0 each): the local draft
    cache.add_active_response(1, [9, 1, 2])  # now "1 2" -> 4 once (local), "1 2" -> 3 once (global)
    d = cache.speculate(1, [5, 6, 7])  # only the earlier request's prompt held it, and prompts are not cached
    assert d.source == "none" and len(d) == 0
    d = cache.speculate(1, [2, 3])  # only the global tree has "2 3"... and nothing after it
    assert len(d) == 0
    cache.start_request(2, [0])
    assert cache.speculate(2, [0, 1, 2]).tokens.tolist() == [3] and cache.speculate(2, [0, 1, 2]).source == "global"
    # the active request's response so far is drafted from too (global), as in the reference
    cache.add_active_response(2, [7, 7, 7])
    assert cache.speculate(2, [0, 7, 7]).tokens.tolist() == [7]
    with pytest.raises(ValueError, match="already active"):
        cache.start_request(2, [1])
    with pytest.raises(KeyError, match="not active"):
        cache.add_active_response(0, [1])
    cache.check()


def test_the_oldest_answer_is_evicted_and_the_bound_means_what_it_says() -> None:
    cache = SuffixCache(max_tree_depth=4, max_cached_requests=2)
    for r in range(3):
        cache.start_request(r, [])
        cache.add_active_response(r, [10 * r + 1, 10 * r + 2])
        cache.stop_request(r)
    assert cache.held_answers == 2  # request 0's answer evicted when request 2 started
    with pytest.raises(KeyError):
        cache.response(0)
    cache.start_request(9, [])
    assert len(cache.speculate(9, [0, 1])) == 0 and cache.speculate(9, [0, 21]).tokens.tolist() == [22]
    assert cache.held_answers == 1 and cache.cached_responses == 2  # 11 12 evicted for the active one
    cache.stop_request(9)
    # a request started again under a cached id drops its old answer first
    cache.start_request(2, [])
    assert len(cache.speculate(2, [0, 21])) == 0
    cache.stop_request(2)
    off = SuffixCache(max_tree_depth=4, max_cached_requests=0)
    off.start_request(0, [])
    off.add_active_response(0, [1, 2])
    off.stop_request(0)
    off.start_request(1, [])
    assert off.held_answers == 0 and len(off.speculate(1, [0, 1])) == 0
    unbounded = SuffixCache(max_tree_depth=4, max_cached_requests=-1)
    for r in range(30):
        unbounded.start_request(r, [])
        unbounded.add_active_response(r, [r, r + 1])
        unbounded.stop_request(r)
    assert unbounded.held_answers == 30
    with pytest.raises(ValueError, match="max_cached_requests"):
        SuffixCache(max_cached_requests=-2)


def test_speculate_tree_replays_a_scenario() -> None:
    """The public replay: a tree, a context, the knobs; the draft with tokens, parents, probabilities, score and
    match length."""
    tree = SuffixTree(24)
    tree.extend(0, [1, 2, 3, 1, 2, 3, 1, 2, 4])
    d = speculate_tree(tree, [1, 2], max_spec_tokens=4, max_spec_offset=5, min_token_prob=0.5, source="local")
    assert d.tokens.tolist() == [3, 1, 2] and d.parents.tolist() == [-1, 0, 1] and d.match_len == 1
    assert d.probs.tolist() == pytest.approx([2 / 3] * 3) and d.score == pytest.approx(2) and d.source == "local"
    with pytest.raises(ValueError, match="must not be negative"):
        speculate_tree(tree, [1], max_spec_tokens=-1)


# ------------------------------------------------------------------------------------------ the drafter
def ctx(tokens: list[int]) -> DraftInput:
    return DraftInput(None, torch.tensor(tokens[-1:]), np.asarray(tokens, dtype=np.int32), prompt_length=2)


def test_the_drafter_remembers_its_own_answers_only_and_all_of_them() -> None:
    drafter = SuffixDrafter()
    assert remembers(drafter) and drafter.memory.held_answers == 0
    visitor = drafter.new_memory()
    mine = drafter.remembering(visitor)
    state = mine.new_state(SuffixSettings(max_spec_tokens=8))
    assert mine.propose(state, ctx([40, 41, 1])) is None  # nothing held yet
    # the answer so far, then the generation ends with three more tokens the drafter never saw
    mine.propose(state, ctx([40, 41, 1, 2, 3]))
    mine.finish(state, np.asarray([40, 41, 1, 2, 3, 4, 5, 6], dtype=np.int32), 2)
    assert visitor.held_answers == 1 and visitor.response(state.request).tolist() == [1, 2, 3, 4, 5, 6]
    assert drafter.memory.held_answers == 0  # the process's own memory was not fed
    fresh = mine.new_state(SuffixSettings(max_spec_tokens=8, max_spec_offset=4.0))
    p = mine.propose(fresh, ctx([50, 51, 4]))
    assert p is not None and p.tree.tokens.tolist() == [4, 5, 6]  # the root, then the remembered tail
    # a generation stopped before its first token leaves no trace
    mine.finish(mine.new_state(), np.asarray([60, 61], dtype=np.int32), 2)
    assert visitor.held_answers == 1
    with pytest.raises(TypeError, match="SuffixCache"):
        drafter.remembering({})


def test_settings_take_the_depth_and_the_bound() -> None:
    drafter = SuffixDrafter()
    state = drafter.new_state(SuffixSettings(max_tree_depth=3, max_cached_requests=1, max_spec_tokens=4))
    drafter.propose(state, ctx([1, 2, 3, 4, 1, 2]))
    assert drafter.memory.max_tree_depth == 3 and drafter.memory.max_cached_requests == 1
    with pytest.raises(ValueError, match="tree depth"):
        drafter.new_state(SuffixSettings(max_tree_depth=1))


# ------------------------------------------------------------------------------------------ lossless in the loop
V, NEW = 61, 40


@pytest.mark.parametrize("family", ["qwen3", "llama"])
def test_greedy_output_equals_the_targets_own_cold_and_warm(family: str) -> None:
    """Prompts that repeat themselves, answered twice: the first time from the prompt alone (cold), the second
    with the first answers in memory (warm: more accepted); token for token the target's own greedy output."""
    model = C.tiny_target(family, vocab=V, hidden=32)
    target = TargetModel(model)
    rng = random.Random(7)
    prompts = []
    for _ in range(4):
        phrase = [rng.randrange(V) for _ in range(rng.randint(3, 6))]
        prompts.append([rng.randrange(V) for _ in range(3)] + phrase * 2)
    truths = [C.hf_greedy(model, p, NEW) for p in prompts]
    drafter = SuffixDrafter()
    memory = drafter.new_memory()
    accepted = []
    for _round in range(2):
        total = 0
        for prompt, truth in zip(prompts, truths, strict=True):
            got, steps = generate(target, prompt, drafter.remembering(memory), max_new_tokens=NEW,
                                  settings=SuffixSettings(max_spec_tokens=8))
            assert got == truth
            total += sum(s.accepted for s in steps)
        accepted.append(total)
    assert memory.held_answers == 2 * len(prompts)
    assert accepted[1] > accepted[0] > 0, accepted
    assert summarize(steps).tau > 1.5


def test_a_stream_closed_early_remembers_what_it_produced() -> None:
    model = C.tiny_target("qwen3", vocab=V, hidden=32)
    drafter = SuffixDrafter()
    memory = drafter.new_memory()
    gen = stream(TargetModel(model), [1, 2, 3, 1, 2, 3], drafter.remembering(memory), max_new_tokens=30)
    produced = [t for _, s in zip(range(3), gen, strict=False) for t in s.tokens]
    gen.close()
    assert memory.held_answers == 1
    assert memory.response(0).tolist() == produced


def test_sampling_keeps_the_target_distribution() -> None:
    """The second emitted token (the first from a verify step with a suffix draft) against the exact
    Σ_x1 p(x1) q(x2 | x1), chi-square at fixed seeds; the memory holds answers that make a draft likely."""
    case = second_token_case()
    target, sampling, prompt, expected, vocab = case.target, case.sampling, case.prompt, case.expected, case.vocab
    drafter = SuffixDrafter()
    gen = torch.Generator().manual_seed(0)
    counts, drafted, n = np.zeros(vocab), 0, 1200
    for _ in range(n):
        memory = drafter.new_memory()  # a fresh memory each time: every sample drafts from the prompt alone
        got, steps = generate(target, prompt, drafter.remembering(memory), sampling=sampling, max_new_tokens=3,
                              generator=gen, settings=SuffixSettings(max_spec_tokens=3))
        counts[got[1]] += 1
        drafted += steps[1].tree_size > 1
    assert drafted > n // 2, f"too few verify steps had a draft ({drafted})"
    assert chi_square_pvalue(counts, expected) > 1e-3
