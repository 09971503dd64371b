"""Batched decoding (``engine/state.py``: one cache, a committed length per row; ``engine/loop.py``: one loop,
``stream_batch`` / ``generate_batch`` over B streams) on the toy bundle assets/tiny in float32: each stream of a
batch is its own single-stream decoding, Step for Step, for every racer, greedy and sampled with the same
generator, whichever streams end first, on the dynamic cache and on the fast path's static one; sampled batches
keep the target's distribution; a state of several rows gives each row the logits of a one-row state on that row's
tokens, through verifies, compactions, plain forwards and rows leaving; its misuse is refused with messages that
say what is wrong."""

from __future__ import annotations

import gc
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
import torch
from helpers_app import BUNDLE, held_out_prompt
from helpers_stats import chi_square_pvalue

from dart_core.engine.acceptance import SamplingConfig, processed_probs
from dart_core.engine.drafter import remembers
from dart_core.engine.graphs import no_host_sync
from dart_core.engine.loop import BatchStep, Step, generate, generate_batch, stream_batch
from dart_core.engine.target import TargetModel
from dart_core.engine.tree import DraftTree
from dart_core.racers.registry import BASELINE, racer

ATOL = 1e-4  # float32 logits of a batched forward (padding, a wider mask) vs the single-stream one
# held-out prompt index → prompt length: lengths differ and are not sorted, so the longest row is not the last
CUTS = ((3, 11), (5, 47), (7, 26), (9, 80))


@pytest.fixture(scope="module")
def arena(one_thread_per_module: None) -> Any:
    if not (BUNDLE / "target" / "config.json").is_file():
        pytest.skip("the embedded bundle assets/tiny is missing")
    from dart_core.arena import load_arena

    # float32: greedy tokens are compared one for one (bf16 near-ties could flip between the two forwards); the
    # stock linear kernels at every row count (``auto`` picks by a timing at load: a run could differ from the next)
    return load_arena(BUNDLE / "target", dart=BUNDLE / "dart", eagle3=BUNDLE / "eagle3",
                      ngram=BUNDLE / "ngram" / "small.ngram", device="cpu", dtype="float32", cpu_linear="stock",
                      progress=False)


@pytest.fixture(scope="module")
def prompts(arena: Any) -> list[list[int]]:
    return [arena.tokenizer(held_out_prompt(i), add_special_tokens=False)["input_ids"][:n] for i, n in CUTS]


def settings_of(method: str) -> Any:
    return None if method == BASELINE else racer(method).default_settings("cpu")


def per_stream(steps: Sequence[BatchStep], n: int) -> list[list[Step]]:
    """Each stream's Steps, in order, out of the batch's."""
    out: list[list[Step]] = [[] for _ in range(n)]
    for step in steps:
        for b, s in step.steps.items():
            out[b].append(s)
    return out


def assert_same_step(got: Step, want: Step, what: str) -> None:
    """Everything a Step says but its timings."""
    assert (got.method, got.tokens, got.accepted, got.tree_size, got.prefill, got.stop_reason) == (
        want.method, want.tokens, want.accepted, want.tree_size, want.prefill, want.stop_reason), what
    assert (got.tree is None) == (want.tree is None), what
    if want.tree is not None:
        assert got.tree.tokens.tolist() == want.tree.tokens.tolist(), what
        assert got.tree.parents.tolist() == want.tree.parents.tolist(), what
    assert got.accepted_nodes == want.accepted_nodes, what
    assert len(got.top_logits) == len(want.top_logits) == (len(want.tokens) if want.top_logits else 0), what
    for (gi, gv), (wi, wv) in zip(got.top_logits, want.top_logits, strict=True):
        assert gi[0] == wi[0], what  # the argmax: near-ties further down may swap places
        np.testing.assert_allclose(gv, wv, atol=ATOL, rtol=0, err_msg=what)


def fresh(drafter: Any) -> Any:
    """A racer that remembers (suffix decoding) on an empty memory of its own, so each run drafts from its own
    answers only and repeats itself; any other drafter as it is."""
    return drafter.remembering(drafter.new_memory()) if remembers(drafter) else drafter


def assert_batch_structure(steps: Sequence[BatchStep], n: int) -> None:
    """The prefill first (every stream), then each forward holds exactly the streams that have not ended, each
    stream's stop reason on its last step only, ``rows`` never growing."""
    assert steps, "no steps"
    assert sorted(steps[0].steps) == list(range(n)) and steps[0].rows == n
    assert all(s.prefill for s in steps[0].steps.values())
    ended: set[int] = set()
    rows = n
    for k, step in enumerate(steps):
        alive = [b for b in range(n) if b not in ended]
        assert sorted(step.steps) == alive, f"step {k}: streams {sorted(step.steps)}, expected {alive}"
        assert step.rows == len(alive) <= rows and step.wall_ms >= 0.0
        rows = step.rows
        for b, s in step.steps.items():
            assert s.prefill == (k == 0), (k, b)
            assert s.tokens, (k, b)
            if s.stop_reason is not None:
                ended.add(b)
    assert ended == set(range(n)), "every stream ends with a stop reason"


# ------------------------------------------------------------------------------------------------ greedy
def test_every_racer_decodes_each_stream_of_a_batch_as_it_would_alone(arena: Any, prompts: list[list[int]]) -> None:
    """Four prompts of different lengths in one batch, for every racer loaded: each stream's Steps (tokens,
    accepted drafts, trees, accepted nodes, stop reason, the greedy check's logits) are those of the single-stream
    loop on its prompt with the same drafter and stop ids."""
    assert {"dart", "eagle3", "prompt-lookup", "ngram-only", BASELINE} <= set(arena.methods)
    kw = dict(max_new_tokens=32, stop_token_ids=arena.stop_ids)
    for method in arena.methods:
        drafter, settings = arena.drafter(method), settings_of(method)
        singles = [generate(arena.target, p, fresh(drafter), settings=settings, **kw) for p in prompts]
        tokens, steps = generate_batch(arena.target, prompts, fresh(drafter), settings=settings, **kw)
        assert tokens == [t for t, _ in singles], method
        assert_batch_structure(steps, len(prompts))
        if remembers(drafter):  # a batch's streams share its memory (each drafts from the others' answers so far,
            continue  # as the reference's global tree does): lossless, but not step for step as alone
        for b, (got, (_, want)) in enumerate(zip(per_stream(steps, len(prompts)), singles, strict=True)):
            assert len(got) == len(want), (method, b)
            for k, (g, w) in enumerate(zip(got, want, strict=True)):
                assert_same_step(g, w, f"{method}: stream {b}, step {k}")
        if method != BASELINE:
            assert sum(s.accepted for step in steps for s in step.steps.values()) > 0, f"{method} never drafted"
            assert any(s.tree_size > 1 for step in steps for s in step.steps.values())
            assert len(steps) < 32  # drafts were accepted: fewer forwards than tokens


def test_streams_that_end_at_different_times_leave_the_batch(arena: Any, prompts: list[list[int]]) -> None:
    """A stop token that one stream meets early, a context limit that the longest prompt reaches first (the
    batch's widest row leaves), the token budget for the rest: each stream still gets its single-stream output,
    the batch shrinks as they end. Then a stop token that ends one stream at its very first token (the prefill)."""
    plain = [generate(arena.target, p, max_new_tokens=32, stop_token_ids=arena.stop_ids)[0] for p in prompts]
    stop = plain[2][5]  # stream 2 stops at its 6th token (or earlier), and so may others that meet it
    max_length = len(prompts[3]) + 9  # the 80-token prompt has room for 9 tokens, the others for 32
    stops = [*arena.stop_ids, stop]
    kw = dict(max_new_tokens=32, max_length=max_length, stop_token_ids=stops)
    for method in arena.methods:
        drafter, settings = arena.drafter(method), settings_of(method)
        singles = [generate(arena.target, p, fresh(drafter), settings=settings, **kw) for p in prompts]
        reasons = [s[-1].stop_reason for _, s in singles]
        assert reasons[2] == "eos" and reasons[3] == "context" and "max_new_tokens" in reasons, reasons
        assert len({len(t) for t, _ in singles}) >= 3, "the streams should end at different times"
        tokens, steps = generate_batch(arena.target, prompts, fresh(drafter), settings=settings, **kw)
        assert tokens == [t for t, _ in singles], method
        assert_batch_structure(steps, len(prompts))
        assert steps[-1].rows < len(prompts), "the batch should shrink"
        for b, (got, (_, want)) in enumerate(zip(per_stream(steps, len(prompts)), singles, strict=True)):
            if remembers(drafter):  # drafted from the shared memory: the same tokens and end, other steps
                assert got[-1].stop_reason == want[-1].stop_reason, (method, b)
                continue
            assert [(s.tokens, s.stop_reason) for s in got] == [(s.tokens, s.stop_reason) for s in want], (method, b)

    # the first token of stream 1 is a stop token: it ends in the prefill, the batch goes on without it
    first = plain[1][0]
    stops = [*arena.stop_ids, first]
    kw = dict(max_new_tokens=24, stop_token_ids=stops)
    for method in ("dart", "prompt-lookup", BASELINE):
        drafter, settings = arena.drafter(method), settings_of(method)
        want = [generate(arena.target, p, drafter, settings=settings, **kw)[0] for p in prompts]
        tokens, steps = generate_batch(arena.target, prompts, drafter, settings=settings, **kw)
        assert tokens == want and tokens[1] == [first], method
        assert steps[0].steps[1].stop_reason == "eos" and 1 not in steps[1].steps and steps[1].rows == 3
        assert_batch_structure(steps, len(prompts))

    # a budget of one token: every stream ends in the prefill, one BatchStep in all
    tokens, steps = generate_batch(arena.target, prompts, arena.drafter("dart"), max_new_tokens=1)
    assert tokens == [[t[0]] for t in plain] and len(steps) == 1
    assert {s.stop_reason for s in steps[0].steps.values()} == {"max_new_tokens"}


# ------------------------------------------------------------------------------------------------ sampling
def test_sampled_streams_follow_their_own_generators(arena: Any, prompts: list[list[int]]) -> None:
    """Each stream samples from its own generator only: the batch with the same seeds repeats itself, each of its
    streams is the single-stream loop's run with that stream's seed (also after the first stream, the longest
    prompt, has reached the context limit and left: the others' rows move up, their generators must not), and
    other seeds give other text."""
    sampling = SamplingConfig(temperature=1.0, top_p=0.9)
    prompts = [prompts[3], *prompts[:3]]
    seeds = [11, 12, 13, 14]
    kw = dict(sampling=sampling, max_new_tokens=24, max_length=len(prompts[0]) + 6, stop_token_ids=arena.stop_ids)

    def gens(values: Sequence[int]) -> list[torch.Generator]:
        return [torch.Generator().manual_seed(s) for s in values]

    for method in arena.methods:
        drafter, settings = arena.drafter(method), settings_of(method)
        once, steps = generate_batch(arena.target, prompts, fresh(drafter), settings=settings, generators=gens(seeds),
                                     **kw)
        again, _ = generate_batch(arena.target, prompts, fresh(drafter), settings=settings, generators=gens(seeds),
                                  **kw)
        assert once == again, method
        singles = [generate(arena.target, p, fresh(drafter), settings=settings, generator=g, **kw)[0]
                   for p, g in zip(prompts, gens(seeds), strict=True)]
        # a racer that remembers drafts in a batch from the other streams' answers too: other drafts, other draws
        # of the same distribution (tests/test_suffix.py checks it), so only the others repeat the singles
        assert once == singles or remembers(drafter), method
        assert len(once[0]) == 6 and steps[-1].rows < 4 and any(len(t) > 6 for t in once[1:]), method
        assert all(not s.top_logits for step in steps for s in step.steps.values())  # greedy-only check data
        other, _ = generate_batch(arena.target, prompts, fresh(drafter), settings=settings,
                                  generators=gens([s + 100 for s in seeds]), **kw)
        assert other != once, method


def test_batched_sampling_keeps_the_target_distribution(arena: Any) -> None:
    """Batches of 8 streams (two prompts of different lengths, alternating, each stream with its own seed) under
    DART: the first token (prefill) and the second (the first verify step, with a drafted tree) of each prompt's
    streams vs the exact p(x1) and Σ_x1 p(x1) q(x2 | x1), chi-square. Negative control: the other prompt's
    distribution is rejected (a batch that mixed its rows up would fail here)."""
    target, model = arena.target, arena.target.model
    sampling = SamplingConfig(temperature=1.0, top_k=8)  # at most 8 first tokens, 64 second ones: few bins
    pair = [arena.tokenizer(held_out_prompt(i), add_special_tokens=False)["input_ids"][:n] for i, n in ((3, 19),
                                                                                                         (5, 8))]
    expected = []
    with torch.no_grad():
        for p in pair:
            p1 = processed_probs(model(torch.tensor([p])).logits[0, -1], sampling)
            xs = torch.nonzero(p1).flatten()
            q2 = processed_probs(model(torch.tensor([[*p, int(x)] for x in xs])).logits[:, -1], sampling)
            expected.append((p1.double().numpy(), (p1[xs, None] * q2).sum(0).double().numpy()))
    rows, calls = 8, 40  # 160 draws per prompt
    drafter, settings = arena.drafter("dart"), settings_of("dart")
    first, second = np.zeros((2, target.vocab_size)), np.zeros((2, target.vocab_size))
    drafted = accepted = 0
    for c in range(calls):
        gens = [torch.Generator().manual_seed(c * rows + b) for b in range(rows)]
        # 3 tokens: the prefill's, then a verify step with room for one draft token and the bonus
        tokens, steps = generate_batch(target, pair * (rows // 2), drafter, settings=settings, sampling=sampling,
                                       max_new_tokens=3, generators=gens)
        for b in range(rows):
            first[b % 2, tokens[b][0]] += 1
            second[b % 2, tokens[b][1]] += 1
            drafted += steps[1].steps[b].tree_size > 1
            accepted += steps[1].steps[b].accepted
    n = rows * calls
    assert drafted == n, f"only {drafted} of {n} verify steps had a draft"
    assert 0 < accepted < n, f"{accepted} of {n} drafts accepted: both outcomes should be sampled"
    for k in range(2):
        assert chi_square_pvalue(first[k], expected[k][0]) > 1e-3, k
        assert chi_square_pvalue(second[k], expected[k][1]) > 1e-3, k
        assert chi_square_pvalue(second[k], expected[1 - k][1]) < 1e-6, k  # the test can tell the prompts apart


# ------------------------------------------------------------------------------------------ a state of several rows
def random_tree(rng: np.random.Generator, root: int, size: int, vocab: int, max_depth: int = 5) -> DraftTree:
    tokens, parents, depths = [root], [-1], [0]
    while len(tokens) < size:
        p = int(rng.integers(0, len(tokens)))
        if depths[p] < max_depth:
            tokens.append(int(rng.integers(0, vocab)))
            parents.append(p)
            depths.append(depths[p] + 1)
    return DraftTree(np.array(tokens), np.array(parents))


def deep_path(tree: DraftTree) -> list[int]:
    """The tree's longest root-to-leaf path that is not simply 0, 1, 2, ... (a compaction must move its rows)."""
    paths = sorted(tree.paths(), key=len, reverse=True)
    return next(p for p in paths if p != list(range(len(p))))


def test_batch_state_rows_match_single_stream_target(arena: Any) -> None:
    """Three rows of different lengths: the prefill, a verify of a different tree per row (a bare root for one: a
    plain forward), commits of paths whose rows must move, another verify, a row leaving (the widest) and the rest
    reordered, a plain forward for every row: each row's logits and features are the single-stream
    TargetModel's on the same tokens, and its committed length is its own."""
    target = arena.target
    layers = target.feature_layers
    v = target.vocab_size
    rng = np.random.default_rng(5)
    prompts = [rng.integers(1, v, n).tolist() for n in (7, 15, 3)]
    singles = [target.new_state() for _ in prompts]
    batch = target.new_state(3)
    logits, feats = target.prefill_rows(batch, prompts, layers)
    assert logits.shape == (3, v) and logits.dtype == torch.float32 and batch.lengths == [7, 15, 3]
    assert batch.width == 15 and batch.rows == 3
    for b, p in enumerate(prompts):
        want_l, want_f = target.prefill(singles[b], torch.tensor([p]), layers)
        torch.testing.assert_close(logits[b], want_l, atol=ATOL, rtol=0)
        torch.testing.assert_close(feats[b], want_f, atol=ATOL, rtol=0)
    roots = [int(t) for t in logits.argmax(-1)]

    def verify_all(trees: list[DraftTree], states: list[Any]) -> None:
        got_l, got_f = target.verify_rows(batch, trees, layers)
        for b, (tree, st) in enumerate(zip(trees, states, strict=True)):
            want_l, want_f = target.verify(st, tree, layers)
            assert got_l[b].shape == (tree.size, v) and got_f[b].shape == want_f.shape
            torch.testing.assert_close(got_l[b], want_l, atol=ATOL, rtol=0, msg=lambda m, b=b: f"row {b}: {m}")
            torch.testing.assert_close(got_f[b], want_f, atol=ATOL, rtol=0, msg=lambda m, b=b: f"row {b}: {m}")

    trees = [random_tree(rng, roots[0], 12, v), random_tree(rng, roots[1], 7, v), DraftTree([roots[2]], [-1])]
    verify_all(trees, singles)
    paths = [deep_path(trees[0]), deep_path(trees[1]), [0]]
    target.commit_rows(batch, paths)
    for st, path in zip(singles, paths, strict=True):
        target.commit(st, path)
    assert batch.lengths == [st.length for st in singles] == [7 + len(paths[0]), 15 + len(paths[1]), 4]
    assert batch.width == max(batch.lengths) == batch.cache.get_seq_length()

    trees = [random_tree(rng, int(rng.integers(0, v)), n, v) for n in (5, 9, 14)]
    verify_all(trees, singles)
    paths = [deep_path(t) for t in trees]
    target.commit_rows(batch, paths)
    for st, path in zip(singles, paths, strict=True):
        target.commit(st, path)

    widest = int(np.argmax(batch.lengths))
    order = [b for b in (2, 0, 1) if b != widest]
    target.keep_rows(batch, order)
    singles = [singles[b] for b in order]
    assert batch.lengths == [st.length for st in singles] and batch.width == max(batch.lengths)
    assert batch.cache.get_seq_length() == batch.width  # the widest row's columns are gone

    xs = [int(t) for t in rng.integers(0, v, len(order))]
    got_l, _ = target.verify_rows(batch, [DraftTree([x], [-1]) for x in xs], layers)  # a plain step of every row
    target.commit_rows(batch, [[0]] * len(order))
    for b, (st, x) in enumerate(zip(singles, xs, strict=True)):
        want_l, _ = target.forward_tokens(st, [x], layers=layers)
        torch.testing.assert_close(got_l[b][0], want_l, atol=ATOL, rtol=0)
    trees = [random_tree(rng, int(rng.integers(0, v)), 6, v) for _ in order]
    verify_all(trees, singles)


def test_batch_state_refuses_misuse(arena: Any) -> None:
    target = arena.target
    layers = target.feature_layers
    rng = np.random.default_rng(9)
    v = target.vocab_size
    with pytest.raises(ValueError, match="at least one stream"):
        target.new_state(0)
    batch = target.new_state(2)
    with pytest.raises(ValueError, match="call verify first"):
        target.commit_rows(batch, [[0], [0]])
    with pytest.raises(ValueError, match="the state is empty; call prefill first"):
        target.verify_rows(batch, [DraftTree([1], [-1])] * 2, layers)
    with pytest.raises(ValueError, match="at least one token"):
        target.prefill_rows(batch, [[1, 2], []], layers)
    with pytest.raises(ValueError, match="prefill: 0 prompts for a state of 2 streams"):
        target.prefill_rows(batch, [], layers)
    target.prefill_rows(batch, [rng.integers(1, v, 6).tolist(), rng.integers(1, v, 9).tolist()], layers)
    with pytest.raises(ValueError, match="already holds tokens"):
        target.prefill_rows(batch, [[1, 2], [3]], layers)
    with pytest.raises(ValueError, match="call verify first"):
        target.commit_rows(batch, [[0], [0]])
    tree = DraftTree([5, 6, 7, 8], [-1, 0, 1, 0])  # 0 → 1 → 2, 0 → 3
    with pytest.raises(ValueError, match="verify: 1 trees for a batch of 2 streams"):
        target.verify_rows(batch, [tree], layers)
    with pytest.raises(ValueError, match="verify: 3 trees for a batch of 2 streams"):
        target.verify_rows(batch, [tree] * 3, layers)
    assert batch.trees is None and batch.cache.get_seq_length() == 9  # a refused verify ran nothing

    target.verify_rows(batch, [DraftTree([5, 6], [-1, 0])] * 2, layers)
    target.verify_rows(batch, [tree, tree], layers)  # a verify never committed is dropped by the next one
    assert batch.cache.get_seq_length() == 9 + 4 and batch.pending == 4
    with pytest.raises(RuntimeError, match="commit the verified trees first"):
        target.keep_rows(batch, [0])
    with pytest.raises(ValueError, match="commit: 1 paths for a batch of 2 streams"):
        target.commit_rows(batch, [[0]])
    for bad in ([0, 2], [0, 3, 2], [0, 9], [1, 2], [], [0, -1]):
        with pytest.raises(ValueError, match=r"commit: \[.*\] is not a root-to-node path of stream 1's tree"):
            target.commit_rows(batch, [[0, 1], bad])
        # refused as a whole: nothing committed, row 0's valid path included; the trees still pending
        assert batch.lengths == [6, 9] and batch.trees is not None, bad
    target.commit_rows(batch, [[0, 3], [0, 1, 2]])
    assert batch.lengths == [8, 12] and batch.width == 12 and batch.trees is None
    with pytest.raises(ValueError, match="call verify first"):
        target.commit_rows(batch, [[0], [0]])
    for rows in ([], [2], [0, -1]):
        with pytest.raises(ValueError, match="not a non-empty selection of the state's 2 streams"):
            target.keep_rows(batch, rows)
    with pytest.raises(ValueError, match="holds 2 streams; read lengths"):
        _ = batch.length

    # a tree past the target's context is named by its stream
    full = target.new_state(2)
    target.prefill_rows(full, [[1, 2, 3], rng.integers(1, v, target.max_context - 2).tolist()], layers)
    chain = DraftTree([4, 5, 6], [-1, 0, 1])
    with pytest.raises(ValueError, match=f"stream 1's tree reaches position {target.max_context}, past the "
                                         f"target's context of {target.max_context}"):
        target.verify_rows(full, [DraftTree([4], [-1]), chain], layers)
    target.verify_rows(full, [chain, DraftTree([4, 5], [-1, 0])], layers)  # room for a root and its child


@pytest.mark.parametrize("mode", ["eager", "graphs"])
def test_the_static_cache_batches_as_the_dynamic_cache_does(arena: Any, prompts: list[list[int]], mode: str) -> None:
    """The fast path's static cache (its own wrapper of the same model: the shared arena target keeps its dynamic
    cache) decodes every racer's batch, streams ending at different times, token for token as the dynamic cache
    does, with the same trees and accepted nodes; ``graphs`` runs the captured path's code uncaptured on a CPU."""
    fast = TargetModel(arena.target.model)
    fast.use_static_cache(160, graphs=mode == "graphs")
    buckets: list[int] = []
    if mode == "graphs":  # the captured forward must read nothing on the host; record which bucket each step ran
        inner = fast._graphs.fn

        def guarded(key: Any, **inputs: torch.Tensor) -> Any:
            buckets.append(key[0][0])
            assert inputs["ids"].shape[0] == key[0][0]  # every forward runs its bucket's rows
            with no_host_sync():
                return inner(key, **inputs)

        fast._graphs.fn = guarded
    three = prompts[:3]  # three streams: a bucket of four cache rows, one idle from the start
    for method in arena.methods:
        drafter, settings = arena.drafter(method), settings_of(method)
        for batch in (prompts, three) if mode == "graphs" else (prompts,):
            # the longest prompt's stream ends after 9 tokens, the others run on to 20
            kw = dict(max_new_tokens=20, max_length=max(map(len, batch)) + 9, stop_token_ids=arena.stop_ids)
            want, want_steps = generate_batch(arena.target, batch, fresh(drafter), settings=settings, **kw)
            got, got_steps = generate_batch(fast, batch, fresh(drafter), settings=settings, **kw)
            assert got == want, method
            assert got_steps[-1].rows < len(batch), method  # a stream left the static batch too
            for k, (g, w) in enumerate(zip(got_steps, want_steps, strict=True)):
                for b in w.steps:
                    assert_same_step(g.steps[b], w.steps[b], f"{method}: step {k}, stream {b}")
    if mode == "graphs":  # streams that ended moved the rest to smaller buckets' caches, given back after
        assert {4, 2, 1} <= set(buckets), sorted(set(buckets))
        gc.collect()
        assert all(pool.lent == 0 for pool in fast._slots.pools.values())
        assert len(fast._slots.pools[4].slots) == 1  # one slot of four rows served every batch


def test_batching_refuses_bad_arguments(arena: Any, prompts: list[list[int]]) -> None:
    target = arena.target
    with pytest.raises(ValueError, match="no prompts given"):
        generate_batch(target, [], max_new_tokens=4)
    with pytest.raises(ValueError, match="stream_batch: 1 generators for 2 prompts"):
        next(stream_batch(target, prompts[:2], generators=[torch.Generator()]))
    with pytest.raises(ValueError, match="stream_batch: 3 generators for 2 prompts"):
        generate_batch(target, prompts[:2], generators=[None, None, None], max_new_tokens=4)
    with pytest.raises(ValueError, match="max_new_tokens must be >= 1"):
        generate_batch(target, prompts[:2], max_new_tokens=0)
    with pytest.raises(ValueError):  # an empty prompt among others
        generate_batch(target, [prompts[0], []], max_new_tokens=4)
