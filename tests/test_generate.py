"""The central property: speculative output == the target's own greedy output, token for token, for DART,
EAGLE-3 and AR on tiny Qwen3 / Llama / Qwen3-MoE targets — with random drafters and with drafters rigged to agree
with the target often (deep accepted paths, KV compaction deep into the tree) — plus stop rules and sampling."""

from __future__ import annotations

import random
import zlib
from pathlib import Path

import helpers_ckpt as C
import numpy as np
import pytest
import torch
from helpers_stats import chi_square_pvalue
from transformers import AutoModelForCausalLM, Qwen3Config

from dart_core.drafters.dart import DartDrafter, DartSettings
from dart_core.drafters.eagle3 import Eagle3Drafter, Eagle3Settings
from dart_core.engine.acceptance import SamplingConfig, processed_probs
from dart_core.engine.loop import generate, stream
from dart_core.engine.metrics import summarize
from dart_core.engine.target import TargetModel
from dart_core.engine.tree import DraftTree
from dart_core.ngram.store import NgramStore

V, H, NEW = 97, 32, 64
N_PROMPTS = 20


def make_target(family: str, seed: int = 0) -> torch.nn.Module:
    return C.tiny_target(family, vocab=V, hidden=H, seed=seed)


def prompts(seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(V) for _ in range(rng.randint(3, 30))] for _ in range(N_PROMPTS)]


def reference(model: torch.nn.Module, prompt: list[int], new: int) -> list[int]:
    ids = torch.tensor([prompt])
    out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=new,
                         min_new_tokens=new)
    return out[0, len(prompt) :].tolist()


class OracleDart(DartDrafter):
    """The real DART drafter with its logits nudged towards the target's true continuation (known from the
    reference run) at each position with probability ``agree``: real forward, top-k, d2t and native search."""

    def setup(self, prompt: list[int], truth: list[int], agree: float, seed: int) -> None:
        self.prompt_len, self.truth, self.agree, self.rng = len(prompt), truth, agree, random.Random(seed)

    def propose(self, state, step):  # type: ignore[override]
        self._done = len(step.context) - self.prompt_len  # tokens emitted so far (root included)
        return super().propose(state, step)

    def draft_logits(self, features, shifted_ids, state=None):  # type: ignore[override]
        logits = super().draft_logits(features, shifted_ids, state)
        for r in range(logits.shape[1]):
            i = self._done + r
            if i < len(self.truth) and self.rng.random() < self.agree:
                logits[0, r, self.truth[i]] += 50.0  # draft vocab == target vocab here: d2t is the identity
        return logits


class OracleEagle(Eagle3Drafter):
    """The real EAGLE-3 head (context pass + tree expansion run as usual); the tree's best path is then relabelled
    with the target's true continuation, agreeing per position with probability ``agree``."""

    def setup(self, prompt: list[int], truth: list[int], agree: float, seed: int) -> None:
        self.prompt_len, self.truth, self.agree, self.rng = len(prompt), truth, agree, random.Random(seed)

    def propose(self, state, step):  # type: ignore[override]
        prop = super().propose(state, step)
        tree, done = prop.tree, len(step.context) - self.prompt_len
        deepest = int(np.argmax(tree.depths))
        tokens = tree.tokens.copy()
        for depth, node in enumerate(tree.path_to(deepest)[1:]):
            i = done + depth
            if i < len(self.truth) and self.rng.random() < self.agree:
                siblings = [c for c in tree.children()[int(tree.parents[node])] if c != node]
                for s in siblings:  # keep sibling tokens distinct from the relabelled one
                    if tokens[s] == self.truth[i]:
                        tokens[s] = (self.truth[i] + 1) % V
                tokens[node] = self.truth[i]
        return type(prop)(DraftTree(tokens, tree.parents, tree.scores), prop.draft_ms, prop.search_ms)


def drafters(tmp: Path, model: torch.nn.Module, oracle: bool) -> dict[str, torch.nn.Module]:
    hidden = model.config.hidden_size
    out = {}
    for kind, cls in (("dart", OracleDart if oracle else DartDrafter),
                      ("eagle3", OracleEagle if oracle else Eagle3Drafter)):
        draft_vocab = None if oracle else 48
        cfg = C.drafter_config(kind, vocab=V, hidden=hidden, draft_vocab=draft_vocab, draft_length=6)
        path = C.write_drafter(tmp / f"{kind}-{oracle}", cfg, C.random_drafter_state(cfg, kind=kind, seed=7))
        out[kind] = cls.from_pretrained(path, target=model)
    return out


@pytest.mark.parametrize("family", ["qwen3", "llama", "qwen3_moe"])
def test_greedy_lossless_all_methods(tmp_path: Path, family: str) -> None:
    model = make_target(family)
    target = TargetModel(model)
    plain = drafters(tmp_path, model, oracle=False)
    rigged = drafters(tmp_path, model, oracle=True)
    deepest = {"dart": 0, "eagle3": 0}
    taus = {"dart": [], "eagle3": []}
    for p_i, prompt in enumerate(prompts(seed=zlib.crc32(family.encode()) % 1000)):
        truth = reference(model, prompt, NEW + 12)
        want = truth[:NEW]
        got, steps = generate(target, prompt, None, max_new_tokens=NEW)
        assert got == want, f"AR differs on prompt {p_i}"
        assert summarize(steps).tau == 1.0
        for kind in ("dart", "eagle3"):
            small = Eagle3Settings(total_tokens=30, depth=5, top_k=4) if kind == "eagle3" else None
            got, steps = generate(target, prompt, plain[kind], max_new_tokens=NEW, settings=small)
            assert got == want, f"random {kind} differs on prompt {p_i}"
            oracle = rigged[kind]
            oracle.setup(prompt, truth, agree=0.85, seed=p_i)
            rigged_settings = {"dart": DartSettings(top_k=6, max_nodes=30),
                               "eagle3": Eagle3Settings(total_tokens=30, depth=6, top_k=3)}[kind]
            got, steps = generate(target, prompt, oracle, max_new_tokens=NEW, settings=rigged_settings)
            assert got == want, f"rigged {kind} differs on prompt {p_i}"
            deepest[kind] = max(deepest[kind], max(s.accepted for s in steps))
            taus[kind].append(summarize(steps).tau)
    for kind in ("dart", "eagle3"):
        assert deepest[kind] >= 4, f"rigged {kind} never accepted a deep path"
        assert np.mean(taus[kind]) > 2.0, f"rigged {kind} τ {np.mean(taus[kind]):.2f}: compaction barely exercised"


def test_dart_with_ngram_store_and_eager_attention(tmp_path: Path) -> None:
    torch.manual_seed(3)
    model = AutoModelForCausalLM.from_config(
        Qwen3Config(vocab_size=V, hidden_size=H, intermediate_size=64, num_hidden_layers=8, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=16, max_position_embeddings=256),
        attn_implementation="eager").eval()
    model.generation_config.eos_token_id = None
    target = TargetModel(model)
    d = drafters(tmp_path, model, oracle=False)["dart"]
    ps = prompts(seed=5)[:8]
    refs = [reference(model, p, 40) for p in ps]
    store = NgramStore.build([p + r for p, r in zip(ps, refs, strict=True)], order=3)
    d.store = store
    for p, r in zip(ps, refs, strict=True):
        got, steps = generate(target, p, d, max_new_tokens=40)
        assert got == r
        assert steps[1].tree_size > 1  # (the last steps may be cut to the root by the token budget)


def test_stop_rules(tmp_path: Path) -> None:
    model = make_target("qwen3")
    target = TargetModel(model)
    oracle = drafters(tmp_path, model, oracle=True)["dart"]
    prompt = prompts(seed=1)[0]
    truth = reference(model, prompt, 40)
    # a stop token met inside an accepted draft path: emitted, nothing after it
    stop = truth[13]
    first = truth.index(stop)
    oracle.setup(prompt, truth, agree=1.0, seed=0)
    got, steps = generate(target, prompt, oracle, max_new_tokens=40, stop_token_ids=[stop])
    assert got == truth[: first + 1] and steps[-1].stop_reason == "eos"
    # the token budget cuts a long accepted path exactly
    oracle.setup(prompt, truth, agree=1.0, seed=0)
    got, steps = generate(target, prompt, oracle, max_new_tokens=11)
    assert got == truth[:11] and steps[-1].stop_reason == "max_new_tokens"
    # the context limit: prompt + output never exceeds max_length
    for drafter in (None, oracle):
        if drafter is not None:
            drafter.setup(prompt, truth, agree=1.0, seed=0)
        got, steps = generate(target, prompt, drafter, max_new_tokens=40, max_length=len(prompt) + 9)
        assert got == truth[:9] and steps[-1].stop_reason == "context"
    with pytest.raises(ValueError, match="no room to generate"):
        generate(target, list(range(50)), oracle, max_length=50)
    with pytest.raises(ValueError, match="empty"):
        generate(target, [], None)


def test_steps_report_timings_and_trees(tmp_path: Path) -> None:
    model = make_target("llama")
    target = TargetModel(model)
    d = drafters(tmp_path, model, oracle=False)
    for kind, drafter in d.items():
        steps = list(stream(target, prompts(2)[0], drafter, max_new_tokens=12))
        assert steps[0].prefill and len(steps[0].tokens) == 1
        for s in steps[1:]:
            assert s.method == kind and s.tree is not None and s.tree_size == s.tree.size
            assert s.draft_ms > 0 and s.verify_ms > 0 and (s.search_ms > 0) == (kind == "dart")
            assert s.accepted_nodes[0] == 0 and 1 <= len(s.tokens) <= s.accepted + 1
        stats = summarize(steps)
        assert stats.new_tokens == 12 and stats.tokens_per_s > 0


def test_tiny_temperature_generates_the_greedy_output(tmp_path: Path) -> None:
    """A temperature too small to divide by (the app's slider accepts down to 5e-324) races like greedy decoding
    instead of failing every method with "no finite logit"."""
    model = make_target("qwen3")
    target = TargetModel(model)
    plain = drafters(tmp_path, model, oracle=False)
    prompt = prompts(seed=5)[0]
    want = reference(model, prompt, NEW)
    tiny = SamplingConfig(temperature=5e-324)
    for drafter in (None, plain["dart"], plain["eagle3"]):
        got, _ = generate(target, prompt, drafter, sampling=tiny, max_new_tokens=NEW,
                          generator=torch.Generator().manual_seed(0))
        assert got == want


def test_sampling_keeps_target_distribution(tmp_path: Path) -> None:
    """Second emitted token (the first one from a verify step) under DART with a rigged drafter vs the exact
    target distribution Σ_x1 p(x1) q(x2 | x1), chi-square at fixed seeds."""
    torch.manual_seed(11)
    vocab = 12
    model = AutoModelForCausalLM.from_config(
        Qwen3Config(vocab_size=vocab, hidden_size=H, intermediate_size=64, num_hidden_layers=8,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=64),
        attn_implementation="sdpa").eval()
    target = TargetModel(model)
    cfg = C.drafter_config("dart", vocab=vocab, hidden=H, draft_length=3)
    drafter = DartDrafter.from_pretrained(
        C.write_drafter(tmp_path / "d", cfg, C.random_drafter_state(cfg, kind="dart", seed=1, scale=1.0)),
        target=model)
    sampling = SamplingConfig(temperature=1.3, top_p=0.95)
    prompt = [3, 1, 4, 1, 5]
    with torch.no_grad():
        p1 = processed_probs(model(torch.tensor([prompt])).logits[0, -1], sampling)
        nxt = torch.tensor([[*prompt, x] for x in range(vocab)])
        q2 = processed_probs(model(nxt).logits[:, -1], sampling)
    expected = (p1[:, None] * q2).sum(0).numpy()
    gen = torch.Generator().manual_seed(0)
    counts, drafted = np.zeros(vocab), 0
    n = 2500
    for _ in range(n):
        # 3 tokens: the prefill's, then a verify step with room for one draft token and the bonus (with 2, the
        # loop truncates every draft away and the test would only sample the target)
        got, steps = generate(target, prompt, drafter, sampling=sampling, max_new_tokens=3, generator=gen,
                              settings=DartSettings(top_k=4, max_nodes=12))
        counts[got[1]] += 1
        drafted += steps[1].tree_size > 1
    assert drafted == n, f"only {drafted} of {n} verify steps had a draft"
    assert chi_square_pvalue(counts, expected) > 1e-3


def test_tree_defaults_per_device_and_overrides() -> None:
    import argparse

    from dart_core.options import add_budget_argument, add_racer_settings_arguments, racer_settings
    from dart_core.racers.registry import racer

    dart, eagle3 = racer("dart"), racer("eagle3")
    assert (dart.default_settings("cuda"), eagle3.default_settings("cuda")) == (DartSettings(), Eagle3Settings())
    assert dart.default_settings("cuda:1").max_nodes == 60
    # with the tree budget off, a CPU drafts smaller trees; under the budget (the default) the sizes it cuts from are
    # the full ones, but EAGLE-3's depth, a drafter forward per level, keeps its CPU default
    cpu_dart, cpu_eagle = dart.default_settings(torch.device("cpu"), "off"), eagle3.default_settings("cpu", "off")
    assert cpu_dart.max_nodes == 12 and cpu_dart.top_k == DartSettings().top_k
    assert (cpu_eagle.total_tokens, cpu_eagle.depth, cpu_eagle.top_k) == (13, 6, 4)
    assert dart.default_settings("cpu").max_nodes == 60
    assert (eagle3.default_settings("cpu").total_tokens, eagle3.default_settings("cpu").depth) == (60, 6)
    p = argparse.ArgumentParser()
    add_racer_settings_arguments(p)
    add_budget_argument(p)
    got = racer_settings(p.parse_args(["--budget", "off"]), "cpu")
    assert (got["dart"], got["eagle3"]) == (cpu_dart, cpu_eagle)
    assert racer_settings(p.parse_args([]), "cpu")["dart"].max_nodes == 60
    got = racer_settings(p.parse_args(["--budget", "off", "--dart-nodes", "33", "--eagle3-depth", "3"]), "cpu")
    assert got["dart"].max_nodes == 33 and got["dart"].beam_width == cpu_dart.beam_width
    assert got["eagle3"] == Eagle3Settings(13, 3, 4)
    got = racer_settings(p.parse_args(["--dart-nodes", "33", "--dart-ngram-weight", "0"]), "cuda")
    assert got["dart"] == DartSettings(max_nodes=33, ngram_weight=0.0) and got["eagle3"] == Eagle3Settings()
    with pytest.raises(ValueError, match="--eagle3: depth must be between 1 and 32, got 0"):
        racer_settings(p.parse_args(["--eagle3-depth", "0"]), "cpu")


class EndOfTextFirst(OracleDart):
    """The rigged DART drafter with the generation's stop ids ranked ABOVE the true continuation at every level:
    a width-1 beam that ignored the end-of-text rule would spend every level below a stop token."""

    def setup_stops(self, stops: list[int]) -> None:
        self.stops = stops

    def draft_logits(self, features, shifted_ids, state=None):  # type: ignore[override]
        logits = super().draft_logits(features, shifted_ids, state)
        for j, t in enumerate(self.stops):
            logits[0, :, t] += 60.0 - j  # above the truth's +50 nudge
        return logits


def test_end_of_text_reaches_the_tree_search(tmp_path: Path) -> None:
    """generate passes every stop id to DART's search: beams ending in one rank after the others, so the tree
    keeps growing below the true continuation (deep acceptance) while the stop tokens stay leaves; the output is
    still the target's own greedy output."""
    model = make_target("qwen3")
    target = TargetModel(model)
    hidden = model.config.hidden_size
    cfg = C.drafter_config("dart", vocab=V, hidden=hidden, draft_vocab=None, draft_length=6)
    drafter = EndOfTextFirst.from_pretrained(
        C.write_drafter(tmp_path / "eot", cfg, C.random_drafter_state(cfg, kind="dart", seed=7)), target=model)
    settings = DartSettings(top_k=4, beam_width=1, max_nodes=24)
    for p_i, prompt in enumerate(prompts(seed=21)[:4]):
        truth = reference(model, prompt, NEW + 12)
        stops = [t for t in range(V) if t not in truth][:2]  # an EOS and an end-of-turn that never come
        drafter.setup(prompt, truth, agree=1.0, seed=p_i)
        drafter.setup_stops(stops)
        got, steps = generate(target, prompt, drafter, max_new_tokens=NEW, settings=settings, stop_token_ids=stops)
        assert got == truth[:NEW], f"prompt {p_i}"
        trees = [s.tree for s in steps if s.tree is not None and s.tree.size > 1]
        proposed = [int(t) for tree in trees for t in tree.tokens[1:]]
        assert set(stops) <= set(proposed), "the rigged drafter's stop tokens never reached a tree"
        for tree in trees:  # a stop token is never extended: nothing hangs below one
            assert all(int(tree.tokens[int(p)]) not in stops for p in tree.parents[1:] if p > 0)
        assert summarize(steps).tau > 3.0  # the beam followed the true continuation, not the stop tokens


def _board_with(racer_tokens: list[int], racer_top: list[tuple[tuple[int, ...], tuple[float, ...]]],
                dtype: torch.dtype) -> object:
    """A finished greedy scoreboard: AR emitted 7, 8, 9; the racer ``racer_tokens`` with ``racer_top`` recorded."""
    from dart_core.engine.loop import Step
    from dart_core.race import Scoreboard

    def steps(method: str, tokens: list[int], top: list[tuple[tuple[int, ...], tuple[float, ...]]]) -> list[Step]:
        return [Step(method, [tokens[0]], 0, 0, 1.0, 0.0, 1.0, prefill=True, top_logits=top[:1]),
                Step(method, tokens[1:], len(tokens) - 2, 3, 1.0, 0.1, 2.0, stop_reason="max_new_tokens",
                     top_logits=top[1:])]

    ar_top = [((7, 4), (20.0, 10.0)), ((8, 5), (20.0, 19.875)), ((9, 4), (20.0, 10.0))]
    board = Scoreboard(["dart", "ar"], {"dart": [1, 2], "ar": [1, 2]})
    board.dtype = dtype
    for method, tokens, top in (("ar", [7, 8, 9], ar_top), ("dart", racer_tokens, racer_top)):
        for step in steps(method, tokens, top):
            board.lanes[method].add(step)
        board.lanes[method].status = "done"
    return board


@pytest.mark.parametrize(("racer_tokens", "second_logits", "dtype", "verdict"), [
    ([7, 8, 9], (20.0, 19.875), torch.bfloat16, "identical"),
    ([7, 5, 9], (20.0, 19.875), torch.bfloat16, "tie"),  # 8 and 5 an eighth apart: a bf16 rounding tie
    ([7, 5, 9], (20.0, 19.875), torch.float32, "mismatch"),  # the same gap in float32 is no tie
])
def test_generate_names_a_rounding_tie_a_tie(racer_tokens: list[int], second_logits: tuple[float, float],
                                             dtype: torch.dtype, verdict: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """``generate``'s greedy check is the page's (``dart_core.race``): a bf16 tie of the target's two best logits
    is reported as a tie, in the row, the closing line and ``--json``; only a real difference is a mismatch."""
    import json

    from dart_core.generate.__main__ import print_summary

    top = [((7, 4), (20.0, 10.0)), ((5, 8), second_logits), ((9, 4), (20.0, 10.0))]
    board = _board_with(racer_tokens, top, dtype)
    print_summary(board, as_json=True)
    rows = {r["method"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["dart"]["greedy_check"] == verdict and rows["dart"]["matches_ar"] == (verdict != "mismatch")
    assert "greedy_check" not in rows["ar"]
    print_summary(board, as_json=False)
    printed = capsys.readouterr().out
    counts = {"identical": "1 identical, 0 tie(s)", "tie": "0 identical, 1 tie(s)", "mismatch": "1 mismatch(es)"}
    assert counts[verdict] in printed
    assert ("tie: identical up to a bfloat16 tie at token 1" in printed) == (verdict == "tie")
    assert ("MISMATCH" in printed) == (verdict == "mismatch")
    assert "please report" not in printed or verdict == "mismatch"


def test_racers_on_different_prompts_get_no_greedy_verdict() -> None:
    """A chat whose earlier turn was sampled gives each racer its own conversation: outputs that are not meant to
    agree get no verdict, never "OUTPUT DIFFERS" on a correct engine."""
    top = [((7, 4), (20.0, 10.0)), ((8, 5), (20.0, 10.0)), ((9, 4), (20.0, 10.0))]
    board = _board_with([7, 5, 9], top, torch.float32)
    assert board.greedy_matches() == {"dart": False}  # type: ignore[attr-defined]
    board.prompts["dart"] = [1, 3]  # type: ignore[attr-defined]
    assert board.greedy_verdicts() is None and board.greedy_matches() is None  # type: ignore[attr-defined]
