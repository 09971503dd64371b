"""The model-free racers (prompt lookup, N-gram only): the exact matching rule of prompt lookup (vLLM's: longest
suffix within the n-gram bounds, earliest occurrence) and the store's continuations against pure-Python
references; greedy output identical to the target's own on tiny Qwen3 / Llama targets with drafts accepted; the
sampled distribution kept; bounds and a missing store refused with messages that name them, at load, in the
launch check, and on the page's picker (unticked at first) — all from the registry, no racer named elsewhere."""

from __future__ import annotations

import argparse
import random
import zlib

import helpers_ckpt as C
import helpers_trie as H
import numpy as np
import pytest
import torch
from helpers_app import BUNDLE
from helpers_stats import chi_square_pvalue, second_token_case

from dart_core.drafters.ngram_only import NgramOnlyDrafter, NgramOnlySettings, StoreMissingError
from dart_core.drafters.prompt_lookup import PromptLookupDrafter, PromptLookupSettings, lookup
from dart_core.engine.drafter import DraftInput
from dart_core.engine.loop import generate
from dart_core.engine.metrics import summarize
from dart_core.engine.target import TargetModel
from dart_core.ngram.store import NgramStore
from dart_core.racers.registry import model_free_asked, model_free_racers, racer

V, NEW = 97, 48
LOOKUP, STORE_ONLY, SUFFIX = "prompt-lookup", "ngram-only", "suffix"


def step(context: list[int]) -> DraftInput:
    return DraftInput(None, torch.tensor(context[-1:]), np.asarray(context, dtype=np.int32))


# ------------------------------------------------------------------------------------------ prompt lookup
def reference_lookup(ctx: list[int], s: PromptLookupSettings) -> list[int]:
    """The rule spelled out: the longest n in [min, max] whose suffix occurs earlier (followed by a token), its
    earliest occurrence, the tokens after it."""
    for n in range(s.max_ngram, s.min_ngram - 1, -1):
        if n >= len(ctx):
            continue
        for i in range(len(ctx) - n):
            if ctx[i : i + n] == ctx[-n:]:
                return ctx[i + n : i + n + s.num_tokens]
    return []


def test_prompt_lookup_takes_the_longest_suffix_and_its_earliest_occurrence() -> None:
    s = PromptLookupSettings(max_ngram=3, min_ngram=1, num_tokens=4)
    assert lookup(np.array([1, 2, 3, 9, 1, 2, 3]), s).tolist() == [9, 1, 2, 3]
    # "2 3" (n = 2) beats the earlier "3" (n = 1)
    assert lookup(np.array([5, 3, 7, 2, 3, 8, 2, 3]), s).tolist() == [8, 2, 3]
    # of two occurrences, the earliest (vLLM, transformers)
    assert lookup(np.array([4, 6, 4, 7, 4]), s).tolist() == [6, 4, 7, 4]
    # an occurrence overlapping the suffix counts; the continuation may run into the suffix
    assert lookup(np.array([7, 7, 7]), s).tolist() == [7]
    # below the minimum n-gram size nothing matches
    assert lookup(np.array([1, 2, 9, 3, 2]), PromptLookupSettings(3, 2, 4)).tolist() == []
    assert lookup(np.array([5]), s).tolist() == []
    rng = random.Random(0)
    for _ in range(400):
        ctx = [rng.randrange(4) for _ in range(rng.randint(1, 40))]
        hi = rng.randint(1, 5)
        s = PromptLookupSettings(hi, rng.randint(1, hi), rng.randint(1, 8))
        assert lookup(np.array(ctx, dtype=np.int32), s).tolist() == reference_lookup(ctx, s), (ctx, s)


def test_prompt_lookup_proposes_a_chain_or_nothing() -> None:
    d = PromptLookupDrafter()
    state = d.new_state(PromptLookupSettings(num_tokens=3))
    prop = d.propose(state, step([1, 2, 3, 4, 5, 1, 2]))
    assert prop is not None and prop.tree.tokens.tolist() == [2, 3, 4, 5]
    assert prop.tree.parents.tolist() == [-1, 0, 1, 2] and prop.search_ms == 0.0
    assert d.propose(state, step([1, 2, 3])) is None


def test_bad_settings_are_refused_with_the_field_named() -> None:
    d = PromptLookupDrafter()
    with pytest.raises(ValueError, match=r"Prompt lookup min n-gram \(4\) must not exceed its max n-gram \(2\)"):
        d.new_state(PromptLookupSettings(max_ngram=2, min_ngram=4))
    with pytest.raises(ValueError, match="Prompt lookup draft tokens must be between 1 and 64, got 0"):
        d.new_state(PromptLookupSettings(num_tokens=0))
    with pytest.raises(ValueError, match="Prompt lookup max n-gram must be between 1 and 16, got 17"):
        d.new_state(PromptLookupSettings(max_ngram=17))
    with pytest.raises(TypeError, match="takes PromptLookupSettings"):
        d.new_state(NgramOnlySettings())
    n = NgramOnlyDrafter()
    with pytest.raises(StoreMissingError, match="N-gram only drafts from the N-gram store alone"):
        n.new_state()
    n.store = NgramStore.build([[1, 2, 3]], order=3)
    with pytest.raises(ValueError, match=r"N-gram only top k: expected an integer, got 2\.5"):
        n.new_state(NgramOnlySettings(top_k=2.5))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="N-gram only depth must be between 1 and 32, got 0"):
        n.new_state(NgramOnlySettings(depth=0))


# ------------------------------------------------------------------------------------------ N-gram only
def reference_continuations(ref: H.RefCounts, ctx: list[int], k: int) -> tuple[list[int], list[int]]:
    """(ids, float32 bits of the probabilities) of the longest suffix with continuations."""
    for n in range(min(ref.order - 1, len(ctx)), 0, -1):
        suffix = tuple(ctx[len(ctx) - n :])
        kids = sorted(((c, g[-1]) for g, c in ref.counts.items() if len(g) == n + 1 and g[:-1] == suffix),
                      key=lambda ct: (-ct[0], ct[1]))[:k]
        if kids:
            inv = np.float32(1.0) / np.float32(ref.counts[suffix])
            probs = np.array([np.float32(c) * inv for c, _ in kids], dtype=np.float32)
            return [t for _, t in kids], probs.view(np.uint32).tolist()
    return [], []


@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_store_continuations_equal_the_reference_counts(order: int) -> None:
    rng = random.Random(order)
    vocab = list(range(-2, 9))
    seqs = [*H.random_corpus(rng, 30, 25, vocab), [5, 5, 5, 5]]
    store, ref = NgramStore.build(seqs, order=order), H.RefCounts(seqs, order)
    for _ in range(300):
        ctx = [rng.choice([*vocab, 50]) for _ in range(rng.randint(0, 5))]
        k = rng.randint(0, 12)
        toks, probs = store.continuations(ctx, k)
        assert toks.dtype == np.int32 and probs.dtype == np.float32
        assert (toks.tolist(), probs.view(np.uint32).tolist()) == reference_continuations(ref, ctx, k), (ctx, k)
    with pytest.raises(ValueError, match="k must be >= 0"):
        store.continuations([1], -1)


def test_ngram_only_levels_follow_the_stores_greedy_chain() -> None:
    # after "1 2": 3 (x3) or 4 (x1); after "2 3": 5 (x2) or 6 (x1); after "3 5": 7
    store = NgramStore.build([[1, 2, 3, 5, 7]] * 2 + [[1, 2, 3, 6], [1, 2, 4]], order=3)
    d = NgramOnlyDrafter()
    d.store = store
    s = NgramOnlySettings(depth=5, top_k=2)
    tokens, probs = d.levels(np.array([9, 1, 2], dtype=np.int32), s)
    assert tokens.tolist() == [[3, 4], [5, 6], [7, 7]]  # the chain ends where "5 7" was never continued
    np.testing.assert_allclose(probs, [[0.75, 0.25], [2 / 3, 1 / 3], [1.0, 0.0]])  # normalised over the k; padded
    prop = d.propose(d.new_state(NgramOnlySettings(depth=5, top_k=2, max_nodes=3)), step([9, 1, 2]))
    assert prop is not None and prop.tree.tokens.tolist() == [2, 3, 5, 7]  # the store's most likely path
    assert d.propose(d.new_state(), step([8, 8])) is None  # never continued: one plain step


# ------------------------------------------------------------------------------------------ losslessness
def repetitive_prompts(seed: int) -> list[list[int]]:
    """Prompts that repeat a phrase of theirs, so lookups and the store find something."""
    rng = random.Random(seed)
    out = []
    for _ in range(6):
        phrase = [rng.randrange(V) for _ in range(rng.randint(3, 8))]
        out.append([rng.randrange(V) for _ in range(rng.randint(0, 5))] + phrase * rng.randint(2, 3))
    return out


@pytest.mark.parametrize("family", ["qwen3", "llama"])
def test_greedy_output_equals_the_targets_own(family: str) -> None:
    """Both racers on prompts that repeat themselves, the store built from half of the target's own outputs:
    token for token what plain greedy decoding gives, with drafts accepted (deep paths, KV compaction)."""
    model = C.tiny_target(family, vocab=V, hidden=32)
    target = TargetModel(model)
    prompts = repetitive_prompts(zlib.crc32(family.encode()) % 100)
    truths = [C.hf_greedy(model, p, NEW) for p in prompts]
    store = NgramStore.build([p + t for i, (p, t) in enumerate(zip(prompts, truths, strict=True)) if i % 2 == 0],
                             order=4)
    only = NgramOnlyDrafter()
    only.store = store
    taus: dict[str, list[float]] = {LOOKUP: [], STORE_ONLY: []}
    for prompt, truth in zip(prompts, truths, strict=True):
        for key, drafter, settings in ((LOOKUP, PromptLookupDrafter(), PromptLookupSettings(num_tokens=6)),
                                       (STORE_ONLY, only, NgramOnlySettings(max_nodes=12, top_k=4))):
            got, steps = generate(target, prompt, drafter, max_new_tokens=NEW, settings=settings)
            assert got == truth, f"{key} differs from the target's greedy output on {prompt}"
            taus[key].append(summarize(steps).tau)
    for key, values in taus.items():
        assert max(values) > 1.5, f"{key} never had a draft accepted: τ {values}"


def test_sampling_keeps_the_target_distribution() -> None:
    """The second emitted token (the first from a verify step, its draft looked up / searched in the store) under
    each racer vs the exact Σ_x1 p(x1) q(x2 | x1), chi-square at fixed seeds."""
    case = second_token_case()
    target, sampling, prompt, expected, vocab = case.target, case.sampling, case.prompt, case.expected, case.vocab
    only = NgramOnlyDrafter()
    only.store = NgramStore.build([[a, b, c] for a in range(vocab) for b in range(vocab) for c in (b, (b * 5) % 12)],
                                  order=3)
    n = 1200
    for drafter, settings in ((PromptLookupDrafter(), PromptLookupSettings(num_tokens=3)),
                              (only, NgramOnlySettings(depth=2, top_k=3, max_nodes=6))):
        gen = torch.Generator().manual_seed(0)
        counts, drafted = np.zeros(vocab), 0
        for _ in range(n):
            # 3 tokens: the first from the prefill, then a verify step with room for one draft and the bonus
            # (with 2, the loop truncates every draft away: nothing would be tested)
            got, steps = generate(target, prompt, drafter, sampling=sampling, max_new_tokens=3, generator=gen,
                                  settings=settings)
            counts[got[1]] += 1
            drafted += steps[1].tree_size > 1
        assert drafted > n // 2, f"{drafter.key}: too few verify steps had a draft ({drafted})"
        assert chi_square_pvalue(counts, expected) > 1e-3, drafter.key


# ------------------------------------------------------------------------------------------ loading, CLIs, page
def test_registry_marks_them_model_free_and_unticked() -> None:
    assert [r.key for r in model_free_racers()] == [LOOKUP, STORE_ONLY, SUFFIX]
    for r in model_free_racers():
        assert r.drafts and r.load is None and r.checkpoint is None and not r.ticked
    assert racer(STORE_ONLY).needs_store and not racer(LOOKUP).needs_store
    assert model_free_asked(None) == {LOOKUP: None, STORE_ONLY: None, SUFFIX: None}
    assert model_free_asked(["dart", LOOKUP, "ar"]) == {LOOKUP: True, STORE_ONLY: False, SUFFIX: False}


@pytest.fixture(scope="module")
def bundle_ok() -> None:
    if not (BUNDLE / "target" / "config.json").is_file():
        pytest.skip("the embedded bundle assets/tiny is missing")


def test_load_arena_builds_them_with_every_target_and_refuses_a_missing_store(bundle_ok: None) -> None:
    from dart_core.arena import StoreMissingError as ArenaStoreMissing
    from dart_core.arena import load_arena

    arena = load_arena(BUNDLE / "target", ngram=BUNDLE / "ngram" / "small.ngram", device="cpu", progress=False)
    assert arena.methods == [LOOKUP, STORE_ONLY, SUFFIX, "ar"]
    assert arena.drafters[STORE_ONLY].store is arena.store
    ids = arena.tokenizer("import os\nimport sys\nimport os", add_special_tokens=False)["input_ids"]
    out = {m: [t for s in arena.stream(m, ids, max_new_tokens=24) for t in s.tokens] for m in arena.methods}
    assert out[LOOKUP] == out[STORE_ONLY] == out[SUFFIX] == out["ar"]
    bare = load_arena(BUNDLE / "target", device="cpu", progress=False, prompt_lookup=False, suffix=False)
    assert bare.methods == ["ar"]  # switched off; N-gram only left out without a store
    assert load_arena(BUNDLE / "target", device="cpu", progress=False).methods == [LOOKUP, SUFFIX, "ar"]
    with pytest.raises(ArenaStoreMissing, match="N-gram only drafts from the N-gram store alone, and no N-gram "
                                                "store is given"):
        load_arena(BUNDLE / "target", device="cpu", progress=False, ngram_only=True)


def test_generate_cli_runs_them_and_refuses_the_store_only_one_without_a_store(
        bundle_ok: None, capsys: pytest.CaptureFixture[str]) -> None:
    from dart_core.generate.__main__ import main
    from dart_core.options import add_racer_settings_arguments, racer_settings

    p = argparse.ArgumentParser()
    add_racer_settings_arguments(p)
    trees = racer_settings(p.parse_args(["--prompt-lookup-tokens", "5", "--ngram-only-nodes", "9"]), "cpu")
    assert trees[LOOKUP] == PromptLookupSettings(num_tokens=5) and trees[STORE_ONLY].max_nodes == 9
    with pytest.raises(ValueError, match="min n-gram"):
        racer_settings(p.parse_args(["--prompt-lookup-min-ngram", "5"]), "cpu")
    base = ["--base", str(BUNDLE / "target"), "--device", "cpu", "--raw", "--prompt", "x = 1\nx = 1\n",
            "--max-new-tokens", "8", "--no-stream", "--json"]
    assert main([*base, "--ngram", str(BUNDLE / "ngram" / "small.ngram")]) == 0
    out = capsys.readouterr().out
    assert [m for m in (LOOKUP, STORE_ONLY, SUFFIX, "ar") if f'"method": "{m}"' in out] == [LOOKUP, STORE_ONLY,
                                                                                         SUFFIX, "ar"]
    assert out.count('"matches_ar": true') == 3
    assert main([*base, "--methods", f"{STORE_ONLY},ar"]) == 2
    assert "N-gram only drafts from the N-gram store alone" in capsys.readouterr().err


def test_launch_check_and_app_flags(bundle_ok: None) -> None:
    from dart_arena.__main__ import build_parser, resolve
    from dart_core.preflight.launch import plan_launch

    plan = plan_launch(base=str(BUNDLE / "target"), drafters={}, device="cpu", model_free={STORE_ONLY: True})
    assert [p.what for p in plan.problems] == [
        "N-gram only drafts from the N-gram store alone, and no N-gram store is given."]
    assert f"--no-compare-{STORE_ONLY}   (race without it)" in plan.problems[0].fix
    plan = plan_launch(base=str(BUNDLE / "target"), drafters={}, device="cpu")
    assert plan.ok and any(n.startswith("Prompt lookup: model-free") for n in plan.notes)
    args = build_parser().parse_args(["--bundle", str(BUNDLE), f"--no-compare-{LOOKUP}", f"--compare-{STORE_ONLY}"])
    assert resolve(args)["model_free"] == {LOOKUP: False, STORE_ONLY: True, SUFFIX: None}
    assert resolve(build_parser().parse_args(["--bundle", str(BUNDLE)]))["model_free"] == {
        LOOKUP: None, STORE_ONLY: None, SUFFIX: None}


def test_page_leaves_them_unticked_and_races_them_when_picked(bundle_ok: None) -> None:
    from dart_arena.model_client import LocalEngine
    from dart_arena.page import new_conversation
    from dart_arena.ui import AppConfig, ArenaUI
    from dart_core.arena import load_arena

    arena = load_arena(BUNDLE / "target", dart=BUNDLE / "dart", ngram=BUNDLE / "ngram" / "small.ngram",
                       device="cpu", progress=False)
    ui = ArenaUI(LocalEngine(arena), AppConfig(chat=False, update_every=0.0))
    assert ui.methods == ["dart", LOOKUP, STORE_ONLY, SUFFIX, "ar"] and ui.ticked_methods == ["dart", "ar"]
    assert ui.picked(None) == ["dart", "ar"] and ui.picked([STORE_ONLY]) == [STORE_ONLY, "ar"]
    assert "Prompt lookup draft tokens" in ui.control_labels and "N-gram only tree size" in ui.control_labels
    controls = [0.0, 1.0, 0, 16, *(getattr(ui.settings_defaults(r), k.name) for r, k in ui.settings_controls)]
    final = list(ui.run("def f(x):\n    return x\n\ndef f(x):\n", new_conversation(), *controls, session="s",
                        racers=[LOOKUP, STORE_ONLY]))[-1]
    assert list(final.lanes) == [LOOKUP, STORE_ONLY, "ar"]
    assert final.result["greedy_matches_ar"] == {LOOKUP: True, STORE_ONLY: True}
    assert final.result["methods"][STORE_ONLY]["memory_answers"] is None  # no memory without --ngram-memory


def test_checkpoint_free_racers_have_no_model_flag_but_their_settings() -> None:
    from dart_arena.__main__ import build_parser
    from dart_core.bench.e2e import add_arguments

    flags = {a for action in build_parser()._actions for a in action.option_strings}
    assert f"--{LOOKUP}-model-name-or-path" not in flags and f"--compare-{LOOKUP}" in flags
    e2e = argparse.ArgumentParser()
    add_arguments(e2e)
    e2e_flags = {a for action in e2e._actions for a in action.option_strings}
    assert f"--{LOOKUP}" not in e2e_flags and f"--{LOOKUP}-tokens" in e2e_flags
