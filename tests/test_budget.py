"""The automatic tree budget (``dart_core/engine/budget.py``) and the verify cost curve it prices nodes with
(``dart_core/engine/cost_curve.py``): the labels it learns from against a naive re-derivation, the cut against a
brute-force search over every prefix-closed choice the rule allows, one width for a batch's streams, no draft when
nothing pays; greedy output equal to plain decoding's under every rule and the sampled distribution kept; the
curve measured once, kept in the cache and read back, an unreadable file measured again; rows of settings."""

from __future__ import annotations

import dataclasses
import json
import random
from typing import Any

import numpy as np
import pytest
import torch
from helpers_app import BUNDLE
from helpers_stats import chi_square_pvalue, second_token_case

from dart_core.arena import load_arena
from dart_core.drafters.prompt_lookup import PromptLookupDrafter, PromptLookupSettings
from dart_core.engine.budget import (
    BUDGETS,
    DEPTH_WINDOW,
    DEPTHS,
    MAX_PROBE_EVERY,
    NODE,
    OFF,
    POSITION,
    PROBE_EVERY,
    Budget,
    Calibration,
    StreamBudget,
    matched_nodes,
    rank_order,
)
from dart_core.engine.cost_curve import CostCurve, CostCurves, curve_dir
from dart_core.engine.drafter import Proposal
from dart_core.engine.loop import generate, generate_batch
from dart_core.engine.monotone import non_increasing_fit
from dart_core.engine.tree import DraftTree
from dart_core.race.rows import row_settings
from dart_core.racers.registry import racer


def random_tree(rng: random.Random, n: int, vocab: int = 4, scored: bool = True) -> DraftTree:
    parents = [-1] + [rng.randrange(i) for i in range(1, n)]
    tokens = [rng.randrange(vocab) for _ in range(n)]
    scores = None
    if scored:
        s = [0.0]
        for i in range(1, n):
            s.append(s[parents[i]] - rng.choice([0.0, 0.01, 0.3, 0.9, 2.5, 7.0]))
        scores = s
    return DraftTree(tokens, parents, scores)


def curves(points: dict[int, float], streams: tuple[int, ...] = (1,)) -> CostCurves:
    """A hand-made curve for each batch size in ``streams`` (no target, nothing measured), kept as it is."""
    return CostCurves(target=None, given={b: CostCurve(b, points, refine_rate=0.0) for b in streams})


# ------------------------------------------------------------------------------------------ what it learns from
def test_labels_are_the_nodes_whose_parent_path_the_emitted_tokens_spell() -> None:
    rng = random.Random(0)
    for _ in range(300):
        tree = random_tree(rng, rng.randint(1, 14), vocab=3)
        emitted = [rng.randrange(3) for _ in range(rng.randint(1, 5))]
        labelled, matched = matched_nodes(tree, emitted)
        for i in range(1, tree.size):
            path = [int(tree.tokens[j]) for j in tree.path_to(i)[1:]]  # the tokens below the root
            parent_ok = path[:-1] == emitted[: len(path) - 1] and len(path) <= len(emitted)
            assert labelled[i] == parent_ok, (tree, emitted, i)
            assert matched[i] == (parent_ok and path == emitted[: len(path)]), (tree, emitted, i)
        assert not labelled[0] and not matched[0]


def test_calibration_counts_each_cell_and_fits_it_non_increasing_in_the_score_step() -> None:
    cal = Calibration()
    # a chain root → a (step 0.01) → b (step 3.0): the first matches, the second not; depth 1 and 2
    tree = DraftTree([5, 1, 2], [-1, 0, 1], [0.0, -0.01, -3.01])
    labelled, matched = matched_nodes(tree, [1, 7])
    assert labelled.tolist() == [False, True, True] and matched.tolist() == [False, True, False]
    cal.observe(tree, labelled, matched)
    d, b = Calibration.cells(tree)
    assert d.tolist() == [0, 1]
    assert cal.trials[0, b[0]] == 1 and cal.hits[0, b[0]] == 1 and cal.trials[1, b[1]] == 1
    assert cal.hits.sum() == 1 and cal.trials.sum() == 2
    fit = cal.table()
    assert np.all(np.diff(fit[:, :-1], axis=1) <= 1e-12), "acceptance must not rise as the score falls further"
    # unscored trees: a column of their own, one cell per depth, the prior one half
    plain = DraftTree([5, 1, 2], [-1, 0, 1])
    assert Calibration.cells(plain)[1].tolist() == [fit.shape[1] - 1] * 2
    assert cal.conditional(plain)[1:] == pytest.approx([0.5, 0.5])
    p = cal.path_probabilities(tree)
    assert p[0] == 1 and p[2] == pytest.approx(p[1] * cal.conditional(tree)[2])


def test_the_monotone_fit_is_the_least_squares_one() -> None:
    assert non_increasing_fit(np.array([3.0, 1.0, 2.0]), np.ones(3)).tolist() == [3.0, 1.5, 1.5]
    assert non_increasing_fit(np.array([1.0, 2.0]), np.array([3.0, 1.0])).tolist() == [1.25, 1.25]
    x = np.array([5.0, 4.0, 4.0, 1.0])
    assert non_increasing_fit(x, np.ones(4)).tolist() == x.tolist()


# ------------------------------------------------------------------------------------------ the cut
def brute_force_best(trees: list[DraftTree], budget: Budget, stream_budgets: list[StreamBudget],
                     draft_ms: float) -> float:
    """The best expected tokens per ms over every width m: each stream keeps, under the node rule, its best nodes
    by the drafter's score (a node's key capped at its parent's, ties to the lower index), at most m - 1 of them;
    under the position rule its whole depths within m rows; returns that rate."""
    curve = budget.curves.for_streams(len(trees))
    best = 0.0
    for m in range(1, max(t.size for t in trees) + 1):
        worth = 0.0
        for tree, sb in zip(trees, stream_budgets, strict=True):
            if budget.rule == NODE:
                p = budget.calibration.path_probabilities(tree)
                key = [float(tree.scores[0])]
                for i in range(1, tree.size):
                    key.append(min(float(tree.scores[i]), key[int(tree.parents[i])]))
                ranked = sorted(range(1, tree.size), key=lambda i: (-key[i], i))
                worth += 1 + sum(p[i] for i in ranked[: m - 1])
            else:
                survival = np.cumprod(budget.position_rates(sb))
                depths = tree.depths
                worth += 1 + max(float(survival[:d].sum()) for d in range(int(depths.max()) + 1)
                                 if (depths <= d).sum() <= m)
        best = max(best, worth / (draft_ms + curve.ms(m)))
    return best


@pytest.mark.parametrize("rule", [NODE, POSITION])
def test_the_cut_reaches_the_best_rate_any_choice_could(rule: str) -> None:
    rng = random.Random(1)
    for trial in range(40):
        streams = rng.choice([1, 1, 2, 3])
        points = {1: 10.0, 2: 10.0 + rng.uniform(0, 6), 4: 0.0, 8: 0.0}
        points[4] = points[2] + rng.uniform(0, 10)
        points[8] = points[4] + rng.uniform(0, 20)
        budget = Budget(rule, curves(points, (streams,)))
        for _ in range(30):  # some history, so the calibration is not the prior alone
            t = random_tree(rng, rng.randint(2, 7))
            budget.observe(t, budget.new_stream(), [rng.randrange(4) for _ in range(3)])
        sbs = [budget.new_stream() for _ in range(streams)]
        trees = [random_tree(rng, rng.randint(1, 7)) for _ in range(streams)]
        draft_ms = rng.uniform(0, 5)
        cut = budget.cut(trees, sbs, draft_ms)
        width = max(t.size for t in cut)
        worth = 0.0
        for full, kept, sb in zip(trees, cut, sbs, strict=True):
            assert kept.size <= full.size
            assert all(any(f[: len(k)] == k for f in full.token_paths()) for k in kept.token_paths())
            if rule == NODE:
                p = budget.calibration.path_probabilities(full)
                worth += 1 + sum(p[i] for i in rank_order(full, p)[: kept.size - 1])
            else:
                survival = np.cumprod(budget.position_rates(sb))
                worth += 1 + float(survival[: int(kept.depths.max())].sum())
        got = worth / (draft_ms + budget.curves.for_streams(streams).ms(width))
        assert got == pytest.approx(brute_force_best(trees, budget, sbs, draft_ms), rel=1e-9), trial


def test_nothing_pays_so_nothing_is_drafted_and_a_free_forward_keeps_every_node() -> None:
    tree = DraftTree([1, 2, 3, 4], [-1, 0, 1, 0], [0.0, -0.1, -0.2, -5.0])
    steep = Budget(NODE, curves({1: 1.0, 4: 1000.0}))
    assert steep.cut([tree], [steep.new_stream()], 0.0)[0].size == 1
    flat = Budget(NODE, curves({1: 10.0, 64: 10.0}))
    assert flat.cut([tree], [flat.new_stream()], 0.0)[0] is tree
    assert Budget(OFF, curves({1: 1.0})).cut([tree], [StreamBudget()], 0.0)[0] is tree
    # position rule: depths admitted whole
    pos = Budget(POSITION, curves({1: 10.0, 3: 10.0, 4: 1000.0}))
    kept = pos.cut([tree], [pos.new_stream()], 0.0)[0]
    assert kept.tokens.tolist() == [1, 2, 4] and kept.parents.tolist() == [-1, 0, 0]


def test_a_batch_shares_one_width() -> None:
    budget = Budget(NODE, curves({1: 10.0, 2: 10.0, 3: 10.0, 4: 1000.0}, (2,)))
    a = DraftTree([1, 2, 3, 4, 5], [-1, 0, 1, 2, 3], [0, -0.01, -0.02, -0.03, -0.04])
    b = DraftTree([1, 6], [-1, 0], [0, -8.0])
    cut = budget.cut([a, b], [budget.new_stream(), budget.new_stream()], 0.0)
    assert cut[0].size == 3  # the width the curve allows before it turns steep
    assert cut[1].size == 2  # padding is paid anyway: its one node comes along
    assert budget.sizes == [2, 1]


def test_the_cost_curve_interpolates_extends_and_follows_the_steps() -> None:
    c = CostCurve(1, {1: 10.0, 5: 30.0, 9: 30.0})
    assert c.ms(3) == 20.0 and c.ms(9) == 30.0 and c.ms(20) == 30.0
    c2 = CostCurve(1, {1: 10.0, 3: 20.0})
    assert c2.ms(5) == 30.0
    for _ in range(200):
        c2.observe(3, 40.0)
    assert c2.ms(3) == pytest.approx(40.0, rel=1e-3) and c2.ms(1) <= c2.ms(3)
    assert c2.observed == 200
    with pytest.raises(ValueError, match="positive"):
        CostCurve(1, {1: 0.0})
    with pytest.raises(ValueError, match="at least one stream"):
        CostCurve(0, {1: 1.0})


def test_keep_refuses_a_cut_that_is_not_a_tree() -> None:
    t = DraftTree([1, 2, 3], [-1, 0, 1])
    assert t.keep([0, 1]).tokens.tolist() == [1, 2]
    with pytest.raises(ValueError, match="parent is not kept"):
        t.keep([0, 2])
    with pytest.raises(ValueError, match="ascending"):
        t.keep([1, 2])


# ------------------------------------------------------------------------------------------ in the loop
@pytest.fixture(scope="module")
def arena():
    return load_arena(BUNDLE / "target", dart=BUNDLE / "dart", eagle3=BUNDLE / "eagle3", device="cpu",
                      progress=False)


@pytest.mark.parametrize("rule", BUDGETS)
@pytest.mark.parametrize("method", ["dart", "eagle3", "prompt-lookup", "suffix"])
def test_greedy_output_is_plain_decodings_under_every_rule(arena, method: str, rule: str) -> None:
    settings = racer(method).default_settings("cpu", rule)
    prompt = [5, 9, 13, 5, 9, 13, 5, 9, 21, 30, 2, 7]
    plain, _ = generate(arena.target, prompt, None, max_new_tokens=40)
    got, steps = generate(arena.target, prompt, arena.remembering(method, arena.new_memory(method))
                          if arena.remembers(method) else arena.drafter(method), settings=settings,
                          max_new_tokens=40, budget=arena.budget_for(method, rule))
    assert got == plain
    assert all(s.drafted_size >= s.tree_size for s in steps if not s.prefill)


def test_a_steep_curve_cuts_trees_and_the_output_stays_the_targets(arena) -> None:
    prompt = [3, 4, 5, 6, 3, 4, 5, 6, 3, 4]
    plain, _ = generate(arena.target, prompt, None, max_new_tokens=30)
    budget = Budget(NODE, curves({1: 1.0, 2: 3.0, 64: 200.0}))
    got, steps = generate(arena.target, prompt, arena.drafter("dart"), max_new_tokens=30, budget=budget,
                          settings=racer("dart").default_settings("cpu", NODE))
    assert got == plain
    assert any(s.drafted_size > s.tree_size for s in steps), "the steep curve should have cut some trees"
    prompts = [prompt, [7, 8, 9, 7, 8, 9, 7], [11, 12]]
    batch = Budget(NODE, curves({1: 1.0, 2: 3.0, 64: 200.0}, (1, 2, 3)))  # streams leave the batch as they end
    tokens, _ = generate_batch(arena.target, prompts, arena.drafter("dart"), max_new_tokens=20, budget=batch,
                               settings=racer("dart").default_settings("cpu", NODE))
    assert tokens == [generate(arena.target, p, None, max_new_tokens=20)[0] for p in prompts]


def test_the_depth_drafted_follows_the_cuts_one_level_deeper() -> None:
    """A stream drafts one level below the deepest of its last cuts: none before its first cut or with the budget
    off, the old cuts forgotten after the window."""
    budget, stream = Budget(NODE, curves({1: 1.0, 64: 1.0})), StreamBudget()
    assert budget.depth_limit(stream) is None
    chain = DraftTree([1, 2, 3, 4], [-1, 0, 1, 2], [0.0, -0.1, -0.2, -0.3])
    budget.cut([chain], [stream], 0.0)  # free rows: all three levels kept
    assert budget.depth_limit(stream) == 4
    dear = Budget(NODE, curves({1: 1.0, 2: 1000.0}))
    for _ in range(DEPTH_WINDOW - 1):
        dear.cut([chain], [stream], 0.0)  # the bare root kept
    assert dear.depth_limit(stream) == 4  # the deep cut is still in the window
    dear.cut([chain], [stream], 0.0)
    assert dear.depth_limit(stream) == 1
    assert Budget(OFF, curves({1: 1.0})).depth_limit(stream) is None


class LevelsSeen:
    """EAGLE-3 as the loop sees it, noting each step's depth limit and the depth of the tree it drafted."""

    def __init__(self, drafter: Any) -> None:
        self.drafter, self.seen = drafter, []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.drafter, name)

    def propose(self, state: Any, step: Any) -> Any:
        proposal = self.drafter.propose(state, step)
        self.seen.append((step.depth_limit, int(proposal.tree.depths.max())))
        return proposal


def test_eagle3_drafts_only_the_levels_the_cuts_keep_and_stays_lossless(arena) -> None:
    prompt = [3, 4, 5, 6, 3, 4, 5, 6, 3, 4]
    plain, _ = generate(arena.target, prompt, None, max_new_tokens=30)
    settings = racer("eagle3").default_settings("cpu", NODE)
    spy = LevelsSeen(arena.drafter("eagle3"))
    got, _ = generate(arena.target, prompt, spy, max_new_tokens=30, settings=settings,
                      budget=Budget(NODE, curves({1: 1.0, 2: 1.5, 3: 40.0, 64: 900.0})))
    assert got == plain
    assert spy.seen[0][0] is None  # no cut yet: every level its settings draft
    later = spy.seen[1:]
    assert later and all(limit is not None and depth <= max(limit, 2) for limit, depth in later)
    assert any(limit < settings.depth for limit, _ in later), "a curve this steep keeps shallow trees"


def test_sampling_keeps_the_target_distribution_with_the_budget_cutting() -> None:
    """The second emitted token against the exact Σ p(x1) q(x2 | x1), chi-square at fixed seeds: prompt lookup
    drafts three tokens after every first token (each occurs in the prompt), the curve makes two rows free and a
    third dear, so every first verify is cut to two nodes of its chain."""
    case = second_token_case()
    drafter = PromptLookupDrafter()
    gen = torch.Generator().manual_seed(0)
    counts, cut, n = np.zeros(case.vocab), 0, 800
    for _ in range(n):  # a fresh budget each time: a first step always drafts (no record says it does not pay)
        budget = Budget(NODE, curves({1: 1.0, 3: 1.0, 4: 50.0, 64: 100.0}))
        got, steps = generate(case.target, case.prompt, drafter, sampling=case.sampling, max_new_tokens=5,
                              generator=gen, settings=PromptLookupSettings(num_tokens=3), budget=budget)
        counts[got[1]] += 1
        cut += (steps[1].drafted_size, steps[1].tree_size) == (4, 3)
    assert cut == n
    assert chi_square_pvalue(counts, case.expected) > 1e-3


# ------------------------------------------------------------------------------------------ the curve's cache
def test_a_batchs_streams_draft_only_while_their_drafting_pays_the_batch() -> None:
    """In a batch, the streams that raise its expected tokens per ms draft, those whose drafting paid most per ms
    first; when none does, none drafts and the step is a plain one; one stream alone always drafts."""
    budget = Budget(NODE, curves({1: 100.0, 4: 140.0, 64: 1000.0}, (1, 4)))  # plain 100 ms, 4 rows a stream 140

    def stream(gain: float, draft_ms: float) -> StreamBudget:
        return StreamBudget(gain=gain, draft_ms=draft_ms, rows=4.0)

    assert budget.drafting([stream(0.1, 50.0)]) == [True]
    assert budget.drafting([stream(2.0, 5.0) for _ in range(4)]) == [True] * 4  # (4 + 8) / (20 + 140) > 4 / 100
    assert budget.drafting([stream(0.3, 5.0) for _ in range(4)]) == [False] * 4  # (4 + 1.2) / (20 + 140) < 4 / 100
    assert budget.undrafted_steps == 4
    # (4 + 2.32) / 160 is 1 % below 4 / 100: a near tie drafts (a plain stream learns nothing until it probes)
    assert budget.drafting([stream(0.58, 5.0) for _ in range(4)]) == [True] * 4
    # 2 / 5, 0.05 / 30, 1.5 / 5, 2 / 5 tokens per ms: the first, fourth and third join; the second would lower it
    mixed = [stream(2.0, 5.0), stream(0.05, 30.0), stream(1.5, 5.0), stream(2.0, 5.0)]
    assert budget.drafting(mixed) == [True, False, True, True]
    # streams that stopped together probe together, after PROBE_EVERY plain steps, then twice as long each time a
    # probe does not pay (up to MAX_PROBE_EVERY), and from PROBE_EVERY again once drafting pays
    lagging = [stream(0.3, 5.0) for _ in range(4)]
    waits = []
    for _ in range(5):
        plain = 0
        while budget.drafting(lagging) == [False] * 4:
            plain += 1
        waits.append(plain)
    assert waits == [PROBE_EVERY - 1, 2 * PROBE_EVERY - 1, 4 * PROBE_EVERY - 1, MAX_PROBE_EVERY - 1,
                     MAX_PROBE_EVERY - 1]
    for s in lagging:
        s.gain = 2.0
    assert budget.drafting(lagging) == [True] * 4 and all(s.probe_every == PROBE_EVERY for s in lagging)
    assert budget.drafting([stream(0.3, 5.0), StreamBudget(), stream(0.3, 5.0), stream(0.3, 5.0)]) == \
        [False, True, False, False]
    assert Budget(OFF, curves({1: 100.0}, (1, 4))).drafting([stream(0.0, 90.0)] * 4) == [True] * 4


def test_batch_sizes_between_powers_of_two_are_priced_between_their_curves() -> None:
    """A batch whose streams end one by one passes through every size: those between two powers of two take the
    curve between theirs (nothing measured for them); ``prepare`` names the powers a batch of up to B will use."""
    given = {b: CostCurve(b, {1: 10.0 * b, 8: 20.0 * b}, refine_rate=0.0) for b in (1, 2, 4, 8)}
    mine = CostCurves(target=None, given=given)
    three = mine.for_streams(3)
    assert three.source == "between 2 and 4 streams'"
    assert three.ms(1) == pytest.approx(30.0) and three.ms(8) == pytest.approx(60.0) and three.ms(4) > three.ms(1)
    assert mine.for_streams(3) is three  # refined from then on as its own
    assert mine.for_streams(6).ms(8) == pytest.approx(120.0)
    assert [c.streams for c in mine.prepare(5)] == [1, 2, 4, 8]
    assert [c.streams for c in mine.prepare(1)] == [1]


def test_the_curve_is_measured_once_kept_and_read_back(arena, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("DART_ARENA_CACHE", str(tmp_path))
    mine = CostCurves(arena.target, model="tiny-test-model")
    first = mine.for_streams(2)
    assert first.source == "measured" and np.all(np.diff(first.points) >= 0)
    assert [p.name for p in curve_dir().glob("*.json")] == [mine.path(2).name]
    again = CostCurves(arena.target, model="tiny-test-model").for_streams(2)
    assert again.source == "cache" and again.ms_by_rows == first.ms_by_rows
    assert mine.for_streams(2) is first  # one curve per batch size for the arena's life
    other = CostCurves(arena.target, model="another-model")
    assert other.for_streams(2).source == "measured" and other.path(2) != mine.path(2)
    mine.path(2).write_text("{not json")
    assert CostCurves(arena.target, model="tiny-test-model").for_streams(2).source == "measured"
    assert CostCurves(arena.target, model="tiny-test-model").for_streams(2).source == "cache"  # written again
    other.path(2).write_text(json.dumps({"key": "a curve of another machine", "measured_ms": {"1": 1.0}}))
    assert CostCurves(arena.target, model="another-model").for_streams(2).source == "measured"
    assert CostCurves(arena.target).for_streams(1).source == "measured"  # no identity: nothing kept
    assert len(list(curve_dir().glob("*.json"))) == 2
    # the kernels' timings differ at every load: the kernels chosen name the curve, not the timings
    plan = arena.target.cpu_linears
    assert plan is not None and plan.timings
    timed = dataclasses.replace(plan, timings={k: {r: ms * 1.5 for r, ms in v.items()}
                                               for k, v in plan.timings.items()})
    monkeypatch.setattr(arena.target, "cpu_linears", timed)
    assert CostCurves(arena.target, model="tiny-test-model").for_streams(2).source == "cache"
    monkeypatch.setattr(arena.target, "cpu_linears", dataclasses.replace(plan, by_rows={**plan.by_rows, 16: "other"}))
    assert CostCurves(arena.target, model="tiny-test-model").for_streams(2).source == "measured"


# ------------------------------------------------------------------------------------------ settings and rows
def test_under_an_automatic_budget_the_cut_sizes_keep_their_full_default() -> None:
    assert racer("dart").default_settings("cpu", NODE).max_nodes == 60
    assert racer("dart").default_settings("cpu", OFF).max_nodes == 12
    eagle = racer("eagle3").default_settings("cpu", NODE)
    assert (eagle.total_tokens, eagle.depth) == (60, 6)  # its depth costs drafter forwards before any cut
    with pytest.raises(ValueError, match="budget must be one of"):
        racer("dart").default_settings("cpu", "auto")


def test_rows_of_settings() -> None:
    base = lambda rule: racer("dart").default_settings("cpu", rule)  # noqa: E731
    s, rule = row_settings("dart:max_nodes=12", base, NODE)
    assert (s.max_nodes, rule) == (12, OFF)  # a hand-picked size is a fixed tree
    s, rule = row_settings("dart:budget=position", base, NODE)
    assert (s.max_nodes, rule) == (60, POSITION)
    s, rule = row_settings("dart:nodes=24:budget=node", base, OFF)
    assert (s.max_nodes, rule) == (24, NODE)
    s, rule = row_settings("dart:ngram_weight=0", base, NODE)
    assert (s.ngram_weight, rule) == (0.0, NODE)
    assert row_settings("dart", base, POSITION)[1] == POSITION
    for bad, words in [("dart:tree=3", "has no setting 'tree'"), ("dart:max_nodes=lots", "expected an integer"),
                       ("dart:budget=auto", "budget must be one of"), ("dart:max_nodes=0", "between"),
                       ("dart:max_nodes=4:max_nodes=5", "twice"), ("dart:max_nodes=4:warm", "not field=value")]:
        with pytest.raises(ValueError, match=words):
            row_settings(bad, base, NODE)


def test_depths_beyond_the_calibrated_ones_share_the_last() -> None:
    chain = DraftTree(list(range(DEPTHS + 5)), list(range(-1, DEPTHS + 4)))
    d, _ = Calibration.cells(chain)
    assert d.max() == DEPTHS - 1
    budget = Budget(POSITION, curves({1: 1.0, 64: 1.0}))
    assert budget.cut([chain], [budget.new_stream()], 0.0)[0] is chain


class WrongGuesses:
    """A drafter whose chain of two drafts is (almost) never the target's, and which checks that it is shown every
    row of the context once, also after steps it was not called."""

    key = "wrong"
    settings_type = object
    feature_layers = None

    def __init__(self, vocab: int) -> None:
        self.vocab, self.calls = vocab, 0

    def new_state(self, settings: object = None) -> dict[str, int]:
        return {"seen": 0}

    def propose(self, state: dict[str, int], step: Any) -> Proposal:
        state["seen"] += len(step.token_ids)
        assert state["seen"] == len(step.context) - 1, "a row was lost or shown twice"
        assert step.features is not None and step.features.shape[0] == len(step.token_ids)
        self.calls += 1
        root = int(step.context[-1])
        return Proposal(DraftTree([root, (root * 7 + 3) % self.vocab, (root * 5 + 1) % self.vocab], [-1, 0, 1]),
                        draft_ms=4.0, search_ms=0.0)


def test_a_stream_whose_drafting_does_not_pay_decodes_plainly_and_probes_now_and_then(arena) -> None:
    """In a batch, a stream whose drafts are never accepted stops drafting (saving the drafting too), drafts again
    after PROBE_EVERY steps and then ever more rarely, and its drafter is still shown every row once; one stream
    alone always drafts."""
    drafter = WrongGuesses(arena.target.vocab_size)
    budget = Budget(NODE, curves({1: 10.0, 2: 11.0, 3: 12.0, 64: 100.0}, (1, 2)))
    prompts = [[5, 9, 13, 21, 30, 2, 7], [8, 1, 4, 4, 17]]
    tokens, steps = generate_batch(arena.target, prompts, drafter, max_new_tokens=40, budget=budget)
    assert tokens == [generate(arena.target, p, None, max_new_tokens=40)[0] for p in prompts]
    for b in range(2):
        body = [bs.steps[b] for bs in steps if b in bs.steps and not bs.steps[b].prefill]
        drafted = [i for i, s in enumerate(body) if s.drafted_size]
        assert sum(s.accepted for s in body) <= 2
        gaps = np.diff(drafted).tolist()
        assert drafted[0] == 0 and len(drafted) >= 3, "it stopped probing"
        assert gaps[0] >= PROBE_EVERY and bool(np.all(np.diff(gaps) > 0)), \
            "a drafter that never pays keeps drafting as often"
    assert budget.report()["undrafted_steps"] > 40
    alone = Budget(NODE, curves({1: 10.0, 2: 11.0, 3: 12.0, 64: 100.0}))
    _, one = generate(arena.target, prompts[0], drafter, max_new_tokens=20, budget=alone)
    assert all(s.drafted_size for s in one if not s.prefill)
    # a drafter that pays keeps drafting every step
    keen = Budget(NODE, curves({1: 10.0, 64: 10.5}, (2,)))
    stream = keen.new_stream()
    keen.paid_for(stream, accepted=2, draft_ms=1.0, rows=5)
    pair = [stream, keen.new_stream()]  # the second starts from what the first's drafting paid
    assert all(keen.drafting(pair) == [True, True] for _ in range(3 * PROBE_EVERY))


def test_one_streams_chain_is_priced_by_the_chain_curve() -> None:
    """A chain needs no mask and may cost less: with chains free and trees dear, the cut keeps the chain part of
    the score order and stops where the next node would branch; a chain's curve starts at the tree's points."""
    tree = DraftTree([1, 2, 3, 4], [-1, 0, 0, 1], [0.0, -0.01, -0.02, -0.03])  # order: node 1, 2 (branch), 3
    given = {1: CostCurve(1, {1: 10.0, 2: 1000.0, 64: 2000.0}, refine_rate=0.0),
             (1, True): CostCurve(1, {1: 10.0, 64: 10.0}, refine_rate=0.0, chain=True)}
    budget = Budget(NODE, CostCurves(target=None, given=given))
    kept = budget.cut([tree], [budget.new_stream()], 0.0)[0]
    assert kept.tokens.tolist() == [1, 2] and kept.is_chain
    assert [int(i) for i in rank_order(tree, budget.calibration.path_probabilities(tree))] == [1, 2, 3]
    derived = curves({1: 10.0, 8: 30.0}).for_streams(1, chain=True)
    assert derived.chain and derived.ms_by_rows == {1: 10.0, 8: 30.0} and "a tree's" in derived.source
