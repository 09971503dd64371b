"""The session's N-gram memory (``dart_core/ngram/memory.py``, native ``native/src/ngram_overlay.hpp``): its counts
exact against a naive count through additions, removals and evictions; the store's rules over summed counts equal
to those of one store built from both sets of sequences (probability, continuations, the whole tree search); the
search with an empty memory bit-identical to the search without; DART and N-gram only lossless with the memory on
and warm; a memory fed only by its own racer's answers; ``--ngram-memory`` without a store refused."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence

import helpers_ckpt as C
import numpy as np
import pytest
from helpers_app import BUNDLE

from dart_core import _native
from dart_core.drafters.dart import DartDrafter, DartSettings
from dart_core.drafters.ngram_only import NgramOnlyDrafter, NgramOnlySettings
from dart_core.engine.drafter import finish_generation, remembers
from dart_core.engine.loop import generate
from dart_core.engine.target import TargetModel
from dart_core.ngram.memory import NgramMemory
from dart_core.ngram.search import search_tree
from dart_core.ngram.store import NgramStore

V, NEW = 97, 40


def naive_counts(sequences: Sequence[Sequence[int]], order: int) -> Counter:
    """docs/formats.md's counting, spelled out: each slice t[s : s+N] adds 1 to each of its prefixes and the root."""
    counts: Counter = Counter()
    for t in sequences:
        counts[()] += len(t)
        for s in range(len(t)):
            for n in range(1, min(order, len(t) - s) + 1):
                counts[tuple(t[s : s + n])] += 1
    return counts


def random_sequences(rng: random.Random, n: int, vocab: int, longest: int = 30) -> list[list[int]]:
    return [[rng.randrange(vocab) for _ in range(rng.randint(0, longest))] for _ in range(n)]


def assert_counts(overlay: object, sequences: list[list[int]], order: int, rng: random.Random, vocab: int) -> None:
    want = naive_counts(sequences, order)
    for ngram, c in want.items():
        assert overlay.count(list(ngram)) == c, ngram  # type: ignore[attr-defined]
    for _ in range(50):  # strings never counted (or too long) are 0
        ngram = tuple(rng.randrange(vocab + 2) for _ in range(rng.randint(1, order + 1)))
        assert overlay.count(list(ngram)) == (want.get(ngram, 0) if len(ngram) <= order else 0)  # type: ignore[attr-defined]


# ------------------------------------------------------------------------------------------ counts
@pytest.mark.parametrize("order", [1, 2, 3, 5])
def test_overlay_counts_are_exact_through_adds_and_removals(order: int) -> None:
    rng = random.Random(order)
    overlay = _native.NgramOverlay(order)
    held: dict[int, list[int]] = {}
    for step in range(120):
        if held and rng.random() < 0.4:
            victim = rng.choice(sorted(held))
            assert overlay.remove(victim)
            del held[victim]
        else:
            held[step] = random_sequences(rng, 1, 6)[0]
            overlay.add(step, held[step])
        if step % 10 == 0:
            assert_counts(overlay, list(held.values()), order, rng, 6)
            overlay.check()
    assert overlay.sequences == len(held) and overlay.tokens == sum(map(len, held.values()))
    assert not overlay.remove(10_000)
    for victim in list(held):
        overlay.remove(victim)
    assert overlay.tokens == 0 and overlay.nodes == 0  # every node released


def test_memory_evicts_the_oldest_answers_first_and_counts_exactly() -> None:
    rng = random.Random(3)
    memory = NgramMemory(3, max_answers=4)
    answers = random_sequences(rng, 15, 5)
    answers = [a for a in answers if a]
    for i, answer in enumerate(answers):
        memory.add(np.asarray(answer, dtype=np.int64))
        kept = answers[max(0, i - 3) : i + 1]
        assert memory.held_answers == len(kept)
        assert_counts(memory, kept, 3, rng, 5)
    memory.check()
    assert memory.add([]) is None and NgramMemory(3, max_answers=0).add([1, 2]) is None  # nothing to keep


def test_bad_input_is_refused_clearly() -> None:
    with pytest.raises(ValueError, match="order 0 out of range"):
        _native.NgramOverlay(0)
    with pytest.raises(ValueError, match="order 9 out of range"):
        _native.NgramOverlay(9)
    overlay = _native.NgramOverlay(3)
    overlay.add(1, [1, 2])
    with pytest.raises(ValueError, match="already holds a sequence 1"):
        overlay.add(1, [3])
    with pytest.raises(ValueError, match="outside the int32 range"):
        overlay.add(2, [2**31])
    with pytest.raises(ValueError, match="order 3 cannot add to a store of order 2"):
        overlay.probability(NgramStore.build([[1, 2]], order=2).native, [1], [2])
    with pytest.raises(ValueError, match="order is its store's, 1 to 8"):
        NgramMemory(0)
    with pytest.raises(ValueError, match="max_answers"):
        NgramMemory(3, max_answers=-1)
    memory = NgramMemory(3)
    with pytest.raises(ValueError, match="order 3 cannot add to a store of order 2"):
        memory.probability(NgramStore.build([[1, 2]], order=2), [1], [2])
    with pytest.raises(KeyError, match="no answer 7"):
        memory.evict(7)


# ------------------------------------------------------------------------------------------ summed counts
def combined(static: list[list[int]], session: list[list[int]], order: int) -> tuple[NgramStore, NgramStore,
                                                                                        NgramMemory]:
    memory = NgramMemory(order)
    for s in session:
        memory.add(s)
    return NgramStore.build(static, order=order), NgramStore.build(static + session, order=order), memory


@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_summed_counts_answer_as_one_store_built_from_both(order: int) -> None:
    """probability and continuations over store + memory, bit for bit those of a store built from both."""
    rng = random.Random(10 + order)
    static = random_sequences(rng, 12, 8)
    session = [[t + rng.choice([0, 4]) for t in s] for s in random_sequences(rng, 6, 8)]  # ids the store lacks
    store, both, memory = combined(static, session, order)
    alone = NgramStore.build(session, order=order)
    for _ in range(300):
        ctx = [rng.randrange(13) for _ in range(rng.randint(0, 5))]
        toks = [rng.randrange(13) for _ in range(rng.randint(0, 9))]
        for got, want in ((memory.probability(store, ctx, toks), both.probability(ctx, toks)),
                          (memory.probability(None, ctx, toks), alone.probability(ctx, toks))):
            assert got[0].view(np.uint32).tolist() == want[0].view(np.uint32).tolist(), (ctx, toks)
            assert got[1].tolist() == want[1].tolist()
        k = rng.randint(0, 6)
        for got, want in ((memory.continuations(store, ctx, k), both.continuations(ctx, k)),
                          (memory.continuations(None, ctx, k), alone.continuations(ctx, k))):
            assert got[0].tolist() == want[0].tolist(), (ctx, k)
            assert got[1].view(np.uint32).tolist() == want[1].view(np.uint32).tolist()


def random_levels(rng: random.Random, levels: int, k: int, vocab: int) -> tuple[np.ndarray, np.ndarray]:
    toks = np.asarray([[rng.randrange(vocab) for _ in range(k)] for _ in range(levels)], dtype=np.int32)
    logits = np.asarray([[rng.gauss(0, 2) for _ in range(k)] for _ in range(levels)])
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    return toks, probs.astype(np.float32)


def same_tree(a: object, b: object) -> bool:
    return (a.tokens.tolist() == b.tokens.tolist() and a.parents.tolist() == b.parents.tolist()  # type: ignore[attr-defined]
            and a.scores.view(np.uint32).tolist() == b.scores.view(np.uint32).tolist())  # type: ignore[attr-defined]


@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_the_search_over_store_and_memory_is_the_search_over_one_store_of_both(order: int) -> None:
    rng = random.Random(20 + order)
    for trial in range(25):
        static = random_sequences(rng, 10, 7)
        session = [[t + 2 for t in s] for s in random_sequences(rng, 5, 7)]
        store, both, memory = combined(static, session, order)
        levels, k = rng.randint(1, 6), rng.randint(1, 8)
        toks, probs = random_levels(rng, levels, k, 10)
        ctx = [rng.randrange(10) for _ in range(rng.randint(1, 6))]
        knobs = dict(beam_width=rng.randint(1, 6), max_nodes=rng.randint(0, 30),
                     ngram_weight=rng.choice([0.0, 0.5, 2.0]), eos_token_id=rng.choice([None, 3, [3, 5]]))
        got = search_tree(toks, probs, ctx, store, memory=memory, **knobs)
        assert same_tree(got, search_tree(toks, probs, ctx, both, **knobs)), trial


def test_an_empty_memory_leaves_the_search_bit_identical() -> None:
    rng = random.Random(5)
    store = NgramStore.build(random_sequences(rng, 20, 9), order=3)
    emptied = NgramMemory(3, max_answers=1)
    emptied.add([1, 2, 3, 1, 2])
    emptied.evict(emptied.answer_ids()[0])  # held, then forgotten: empty again
    for _ in range(40):
        toks, probs = random_levels(rng, rng.randint(1, 8), rng.randint(1, 10), 11)
        ctx = [rng.randrange(11) for _ in range(rng.randint(1, 8))]
        plain = search_tree(toks, probs, ctx, store, beam_width=4, max_nodes=20, eos_token_id=[2])
        for memory in (NgramMemory(3), emptied):
            assert same_tree(search_tree(toks, probs, ctx, store, beam_width=4, max_nodes=20, eos_token_id=[2],
                                         memory=memory), plain)
    with pytest.raises(ValueError, match="adds to the N-gram store, and store is None"):
        search_tree(toks, probs, ctx, None, memory=NgramMemory(3))
    with pytest.raises(ValueError, match="order 2 cannot add to a store of order 3"):
        search_tree(toks, probs, ctx, store, memory=NgramMemory(2))


# ------------------------------------------------------------------------------------------ the drafters
def repetitive_prompts(seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    out = []
    for _ in range(4):
        phrase = [rng.randrange(V) for _ in range(rng.randint(3, 6))]
        out.append([rng.randrange(V) for _ in range(3)] + phrase * 2)
    return out


def test_off_by_default_and_nothing_remembered() -> None:
    only = NgramOnlyDrafter()
    only.store = NgramStore.build([[1, 2, 3]], order=3)
    assert not remembers(only) and only.active_memory() is None
    finish_generation(only, None, np.asarray([1, 2, 3], dtype=np.int32), 1)  # not called: nothing happens
    with pytest.raises(ValueError, match="keeps no N-gram memory"):
        only.new_memory()


def test_ngram_only_is_lossless_cold_and_warm_and_remembers_only_its_answers() -> None:
    """Answered twice with one memory: token for token the target's greedy output, more accepted warm; the
    memory holds exactly this racer's answers, the drafter's own memory untouched."""
    model = C.tiny_target("qwen3", vocab=V, hidden=32)
    target = TargetModel(model)
    prompts = repetitive_prompts(1)
    truths = [C.hf_greedy(model, p, NEW) for p in prompts]
    only = NgramOnlyDrafter()
    only.store = NgramStore.build([prompts[0]], order=3)  # a store that knows little
    only.use_ngram_memory(True)
    assert remembers(only)
    memory = only.new_memory()
    accepted = []
    for _round in range(2):
        total = 0
        for prompt, truth in zip(prompts, truths, strict=True):
            got, steps = generate(target, prompt, only.remembering(memory), max_new_tokens=NEW,
                                  settings=NgramOnlySettings(max_nodes=12, top_k=4))
            assert got == truth
            total += sum(s.accepted for s in steps)
        accepted.append(total)
    assert accepted[1] > accepted[0], accepted
    assert memory.held_answers == 2 * len(prompts)
    assert dict(naive_counts(truths * 2, 3)) == {g: memory.count(list(g)) for g in naive_counts(truths * 2, 3)}
    assert memory.held_tokens == 2 * NEW * len(prompts)
    assert only.ngram_memory is None  # the drafter as loaded kept no memory: each answer went to the one handed over


def test_dart_is_lossless_with_the_memory_on_and_shares_its_weights(tmp_path: object) -> None:
    model = C.tiny_qwen3(vocab=V, hidden=32)
    cfg = C.drafter_config("dart", vocab=V, hidden=32, draft_vocab=48, draft_length=4)
    path = C.write_drafter(tmp_path / "dart", cfg, C.random_drafter_state(cfg, kind="dart", seed=0))  # type: ignore[operator]
    drafter = DartDrafter.from_pretrained(path, target=model)
    target = TargetModel(model)
    prompts = repetitive_prompts(2)[:3]
    truths = [C.hf_greedy(model, p, NEW) for p in prompts]
    drafter.store = NgramStore.build([prompts[0] + truths[0]], order=4)
    drafter.use_ngram_memory(True)
    memory, other = drafter.new_memory(), drafter.new_memory()
    mine = drafter.remembering(memory)
    assert mine is not drafter and mine.fc.weight is drafter.fc.weight  # the same weights, not a copy
    for _round in range(2):
        for prompt, truth in zip(prompts, truths, strict=True):
            got, _steps = generate(target, prompt, mine, max_new_tokens=NEW, settings=DartSettings(max_nodes=12))
            assert got == truth
    assert memory.held_answers == 2 * len(prompts) and other.held_answers == 0
    assert drafter.ngram_memory is None


def test_dflash_tree_is_lossless_with_the_memory_on(tmp_path: object) -> None:
    from test_dflash import dflash_config, dflash_state, make_target, write
    from test_dflash import reference as dflash_reference

    from dart_core.drafters.dflash import DFlashTreeDrafter, DFlashTreeSettings

    model = make_target("qwen3")
    target = TargetModel(model)
    cfg = dflash_config(layers=2, ids=[1, 4, 5], block=6)
    drafter = DFlashTreeDrafter.from_pretrained(write(tmp_path / "d", cfg, dflash_state(cfg, seed=7)),  # type: ignore[operator]
                                                target=target)
    rng = random.Random(4)
    prompts = [[rng.randrange(50) for _ in range(rng.randint(3, 12))] for _ in range(2)]
    truths = [dflash_reference(model, p, 24) for p in prompts]
    drafter.store = NgramStore.build([prompts[0] + truths[0]], order=3)
    drafter.use_ngram_memory(True, max_answers=2)
    memory = drafter.new_memory()
    for _round in range(2):
        for prompt, truth in zip(prompts, truths, strict=True):
            got, _steps = generate(target, prompt, drafter.remembering(memory), max_new_tokens=24,
                                   settings=DFlashTreeSettings(top_k=4, max_nodes=12))
            assert got == truth
    assert memory.held_answers == 2 and memory.held_tokens == 48  # the bound: the last two answers


def bundle_ok() -> None:
    if not (BUNDLE / "target" / "config.json").is_file():
        pytest.skip("the embedded bundle assets/tiny is missing")


def test_the_arena_hands_each_racer_its_own_memory() -> None:
    bundle_ok()
    from dart_core.arena import load_arena

    arena = load_arena(BUNDLE / "target", ngram=BUNDLE / "ngram" / "small.ngram", dart=BUNDLE / "dart",
                       device="cpu", progress=False, ngram_memory=True)
    assert arena.remembers("dart") and arena.remembers("ngram-only") and not arena.remembers("prompt-lookup")
    ids = arena.tokenizer("import os\nimport sys\nimport os", add_special_tokens=False)["input_ids"]
    mine, theirs = arena.new_memory("ngram-only"), arena.new_memory("dart")
    out = {m: [t for s in arena.stream(m, ids, memory=mem, max_new_tokens=16) for t in s.tokens]
           for m, mem in (("ngram-only", mine), ("dart", theirs))}
    out["prompt-lookup"] = [t for s in arena.stream("prompt-lookup", ids, max_new_tokens=16) for t in s.tokens]
    assert out["ngram-only"] == out["dart"] == out["prompt-lookup"]
    for memory in (mine, theirs):  # one answer each: its own racer's
        assert memory.held_answers == 1 and memory.held_tokens == len(out["dart"])
    with pytest.raises(ValueError, match="keeps no memory across generations"):
        arena.new_memory("prompt-lookup")


def test_ngram_memory_without_a_store_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    bundle_ok()
    from dart_arena.__main__ import build_parser, resolve
    from dart_core.arena import StoreMissingError, load_arena
    from dart_core.generate.__main__ import main

    with pytest.raises(StoreMissingError, match=r"--ngram-memory adds the session's answers to an N-gram store.*"
                                                r"give one \(--ngram FILE"):
        load_arena(BUNDLE / "target", device="cpu", progress=False, ngram_memory=True)
    argv = ["--base", str(BUNDLE / "target"), "--device", "cpu", "--raw", "--prompt", "x = 1\n",
            "--max-new-tokens", "4", "--no-stream", "--ngram-memory"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--ngram-memory adds the session's answers" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(SystemExit, match="error: --ngram-memory adds the session's answers"):
        resolve(build_parser().parse_args(["--base-model-name-or-path", str(BUNDLE / "target"), "--ngram-memory"]))
    assert resolve(build_parser().parse_args(["--bundle", str(BUNDLE), "--ngram-memory"]))["ngram"]
