"""The field's acceptance metrics (vLLM's names, docs/metrics.md), one definition in ``summarize``: computed by hand
on rigged runs and compared with every surface that shows them — the generate CLI, ``bench e2e``'s table,
``e2e.json`` and ``e2e.html``, the page's summary cards and per-position plot, and the API result.

The rigged racer proposes trees whose acceptance the test fixes: a chain whose first ``c`` tokens are the target's
own greedy continuation and whose next one is wrong, plus wrong siblings of the first draft; or no proposal at all,
or the root alone. Against the real toy target (greedy) each step then accepts exactly ``c`` draft tokens."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers_app import BUNDLE, held_out_prompt

from dart_core.engine.drafter import DraftInput, NoSettings, Proposal
from dart_core.engine.loop import Step, generate
from dart_core.engine.metrics import ACCEPTANCE_FIELDS, summarize
from dart_core.engine.tree import DraftTree
from dart_core.racers.registry import Racer, model_free_racers, register, unregister

if not (BUNDLE / "target" / "config.json").is_file():
    pytest.skip("the embedded bundle assets/tiny is missing", allow_module_level=True)

KEY = "rigged"


@dataclass(frozen=True)
class Plan:
    """One step of the rigged racer: ``kind`` "tree" (a chain of ``depth`` drafts, the first ``correct`` of them
    the target's own tokens, plus ``siblings`` wrong drafts beside the first), "none" (no proposal: a plain step)
    or "root" (a tree of the root alone)."""

    kind: str
    correct: int = 0
    depth: int = 0
    siblings: int = 0

    @property
    def emitted(self) -> int:
        return self.correct + 1


def tree(correct: int, depth: int, siblings: int = 0) -> Plan:
    return Plan("tree", correct, depth, siblings)


# Two prompts' schedules, each emitting 17 tokens after the prefill's one (the same token budget for both).
PLANS = (
    (tree(2, 3, 1), Plan("none"), tree(0, 2, 2), Plan("root"), tree(3, 4), tree(1, 1, 1), tree(4, 4, 1)),
    (tree(1, 2), tree(2, 2, 3), tree(0, 1), tree(2, 3), tree(2, 2, 1), Plan("none"), tree(3, 3, 1)),
)
NEW_TOKENS = 18
PROMPTS = (held_out_prompt(3), held_out_prompt(5))


def by_hand(*plans: tuple[Plan, ...]) -> dict[str, Any]:
    """The metrics of the runs with these schedules, pooled, straight from their definitions."""
    steps = [p for plan in plans for p in plan]
    drafting = [p for p in steps if p.kind == "tree" and p.depth >= 1]
    n = len(drafting)
    deepest = max(p.depth for p in drafting)
    return {
        "verify_steps": len(steps),
        "num_drafts": n,
        "num_draft_tokens": sum(p.depth + p.siblings for p in drafting),
        "num_accepted_tokens": sum(p.correct for p in drafting),
        "mean_acceptance_length": sum(p.emitted for p in drafting) / n,
        "draft_acceptance_rate": sum(p.correct for p in drafting) / sum(p.depth + p.siblings for p in drafting),
        "num_accepted_tokens_per_pos": [sum(p.correct >= k for p in drafting) for k in range(1, deepest + 1)],
        "per_position_acceptance_rate": [sum(p.correct >= k for p in drafting) / n for k in range(1, deepest + 1)],
        "acceptance_histogram": [sum(p.correct == k for p in drafting) for k in range(deepest + 1)],
    }


def test_the_schedules_fit_their_budget() -> None:
    """Each schedule emits exactly the budget, and no tree is cut by the room left (the engine truncates a tree
    deeper than the tokens that may still be emitted), so the counts above are what the engine verifies."""
    for plan in PLANS:
        emitted = [p.emitted for p in plan]
        assert 1 + sum(emitted) == NEW_TOKENS
        for i, p in enumerate(plan):
            assert p.depth <= sum(emitted[i:]) - 1, (plan, i)


class RiggedDrafter:
    """Proposes the scheduled trees of the prompt it is given, against the target's own greedy continuation."""

    key = KEY
    settings_type = NoSettings
    feature_layers: tuple[int, ...] = ()

    def __init__(self, target: Any, plans: dict[tuple[int, ...], tuple[Plan, ...]]) -> None:
        self.target, self.plans = target, plans
        self.truths: dict[tuple[int, ...], list[int]] = {}
        self.vocab = int(target.embed_tokens.weight.shape[0])

    def new_state(self, settings: Any = None) -> dict[str, Any]:
        return {"prompt": None, "step": 0}

    def truth(self, prompt: tuple[int, ...], stops: frozenset[int]) -> list[int]:
        if prompt not in self.truths:
            self.truths[prompt], _ = generate(self.target, list(prompt), None, max_new_tokens=NEW_TOKENS,
                                              stop_token_ids=stops)
        return self.truths[prompt]

    def propose(self, state: dict[str, Any], step: DraftInput) -> Proposal | None:
        context = [int(t) for t in step.context]
        if state["prompt"] is None:
            state["prompt"] = tuple(context[:-1])
        prompt = state["prompt"]
        plan = self.plans[prompt][state["step"]]
        state["step"] += 1
        ahead = self.truth(prompt, step.stop_ids)[len(context) - len(prompt):]
        if plan.kind == "none":
            return None
        tokens, parents = [context[-1]], [-1]
        if plan.kind == "tree":
            for j in range(plan.depth):  # right up to `correct`, then wrong (whatever follows is never reached)
                right = ahead[j] if j < len(ahead) else 0
                tokens.append(right if j < plan.correct else (right + 1) % self.vocab)
                parents.append(j)
            for b in range(plan.siblings):  # beside the first draft, never the target's token
                tokens.append((ahead[0] + 2 + b) % self.vocab)
                parents.append(0)
        return Proposal(DraftTree(np.array(tokens), np.array(parents)), draft_ms=0.01, search_ms=0.0)


@pytest.fixture(scope="module")
def rigged() -> Iterator[dict[tuple[int, ...], tuple[Plan, ...]]]:
    """The rigged racer in the registry (every CLI, the bench and the app see it), its schedule by prompt ids."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(BUNDLE / "target")
    plans = {tuple(tok(text, add_special_tokens=False)["input_ids"]): plan
             for text, plan in zip(PROMPTS, PLANS, strict=True)}
    assert len(plans) == len(PROMPTS)
    register(Racer(KEY, "Rigged", "#10b981", "proposes the test's trees",
                   load=lambda ref, target: RiggedDrafter(target, plans)))
    try:
        yield plans
    finally:
        unregister(KEY)


def close(values: dict[str, Any], expected: dict[str, Any]) -> None:
    """Every acceptance field of ``values`` equals ``expected`` (floats to rounding)."""
    for name in ACCEPTANCE_FIELDS:
        assert values[name] == pytest.approx(expected[name], rel=1e-12), name


def table_cells(expected: dict[str, Any]) -> str:
    """The CLIs' acceptance columns of a row, as formatted from the hand-computed values."""
    return (f"{expected['num_draft_tokens']:>8} {expected['num_accepted_tokens']:>8} "
            f"{expected['draft_acceptance_rate']:>6.1%} {expected['mean_acceptance_length']:>7.2f}")


def per_position_text(expected: dict[str, Any]) -> str:
    return ", ".join(f"{r:.3f}" for r in expected["per_position_acceptance_rate"])


# ------------------------------------------------------------------------------------------------ the engine
def _step(tokens: int, accepted: int, depth: int = 0, siblings: int = 0, *, prefill: bool = False,
          proposed: bool = True) -> Step:
    """A hand-made Step: a chain of ``depth`` drafts plus ``siblings`` beside the first (no tree: a plain step)."""
    t = None
    if proposed and not prefill:
        parents = [-1, *range(depth), *[0] * siblings]
        t = DraftTree(np.arange(len(parents)), np.array(parents))
    return Step("m", [5] * tokens, accepted, t.size if t is not None else 0, 1.0, 0.5, 2.0, prefill=prefill,
                tree=t)


def test_summarize_counts_only_drafting_steps_and_pools_counts_before_dividing() -> None:
    one = [_step(1, 0, prefill=True), _step(3, 2, 3, 1), _step(1, 0, proposed=False), _step(1, 0, 0),
           _step(1, 0, 2)]
    two = [_step(1, 0, prefill=True), _step(5, 4, 4), _step(2, 2, 2)]  # a stop token ended the last: no bonus
    st = summarize(one)
    assert (st.verify_steps, st.num_drafts, st.num_draft_tokens, st.num_accepted_tokens) == (4, 2, 6, 2)
    assert st.tau == pytest.approx(6 / 4)  # every verify step
    assert st.mean_acceptance_length == pytest.approx(4 / 2)  # the drafting steps only
    assert st.draft_acceptance_rate == pytest.approx(2 / 6)
    assert st.acceptance_histogram == (1, 0, 1, 0) and st.num_accepted_tokens_per_pos == (1, 1, 0)
    assert st.per_position_acceptance_rate == pytest.approx((0.5, 0.5, 0.0))
    pooled = summarize(one + two)
    assert pooled.num_drafts == 4 and pooled.num_draft_tokens == 12 and pooled.num_accepted_tokens == 8
    assert pooled.draft_acceptance_rate == pytest.approx(8 / 12)  # not the mean of 1/3 and 6/6
    assert pooled.mean_acceptance_length == pytest.approx((4 + 7) / 4)
    assert pooled.per_position_acceptance_rate == pytest.approx((3 / 4, 3 / 4, 1 / 4, 1 / 4))
    assert sum(pooled.per_position_acceptance_rate) == pytest.approx(pooled.num_accepted_tokens / pooled.num_drafts)
    ar = summarize([_step(1, 0, prefill=True), *[_step(1, 0, proposed=False)] * 3]).acceptance()
    assert ar == {**dict.fromkeys(ACCEPTANCE_FIELDS, 0), "verify_steps": 3, "mean_acceptance_length": None,
                  "draft_acceptance_rate": None, "num_accepted_tokens_per_pos": [],
                  "per_position_acceptance_rate": [], "acceptance_histogram": []}


def test_the_engine_verifies_the_rigged_trees_as_planned(rigged: dict[tuple[int, ...], tuple[Plan, ...]]) -> None:
    from dart_core.arena import load_arena

    arena = load_arena(BUNDLE / "target", **{KEY: "builtin"}, device="cpu", dtype="float32",
                       progress=False, budget="off")  # the rigged trees verified as planned: no budget cuts them
    for ids, plan in rigged.items():
        ar = list(arena.stream("ar", list(ids), max_new_tokens=NEW_TOKENS))
        assert ar[-1].stop_reason == "max_new_tokens"  # the budget, not a stop token, ends these prompts
        steps = list(arena.stream(KEY, list(ids), max_new_tokens=NEW_TOKENS))
        assert [t for s in steps for t in s.tokens] == [t for s in ar for t in s.tokens]  # lossless
        assert [s.accepted for s in steps[1:]] == [p.correct if p.kind == "tree" else 0 for p in plan]
        close(summarize(steps).acceptance(), by_hand(plan))


# ------------------------------------------------------------------------------------------- the five surfaces
def test_the_generate_cli_prints_the_hand_computed_metrics(rigged: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from dart_core.generate.__main__ import main

    expected = by_hand(PLANS[0])
    argv = ["--base", str(BUNDLE / "target"), f"--{KEY}", "builtin", "--methods", f"{KEY},ar", "--raw",
            "--prompt", PROMPTS[0], "--max-new-tokens", str(NEW_TOKENS), "--no-stream", "--device", "cpu",
            "--budget", "off"]
    assert main([*argv, "--json"]) == 0
    rows = {r["method"]: r for r in json.loads(capsys.readouterr().out)}
    close(rows[KEY], expected)
    assert rows[KEY]["matches_ar"] and rows["ar"]["num_drafts"] == 0 and rows["ar"]["draft_acceptance_rate"] is None
    assert main(argv) == 0
    printed = capsys.readouterr().out
    row = next(line for line in printed.splitlines() if line.startswith(f"{KEY} "))
    assert table_cells(expected) in row
    assert re.search(rf"^\s+{KEY}\s+{re.escape(per_position_text(expected))}$", printed, re.M)


def test_bench_e2e_pools_the_prompts_in_its_table_json_and_report(rigged: Any, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from dart_core.bench import e2e_report
    from dart_core.bench.__main__ import main as bench_main

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"p{i}", "category": f"c{i}", "prompt": p}) + "\n"
                               for i, p in enumerate(PROMPTS)))  # one category a prompt
    out = tmp_path / "out"
    assert bench_main(["e2e", "--base", str(BUNDLE / "target"), f"--{KEY}", "builtin", "--methods", f"{KEY},ar",
                       "--prompts", str(prompts), "--raw", "--warmup", "0", "--no-hf-generate", "--max-new-tokens",
                       str(NEW_TOKENS), "--device", "cpu", "--out", str(out), "--no-progress", "--budget", "off"]) == 0
    printed = capsys.readouterr().out
    assert "mismatches: 0" in printed
    pooled = by_hand(*PLANS)
    report = json.loads((out / "e2e.json").read_text())
    close(report["summary"][KEY], pooled)  # counts summed over the prompts, then divided
    for i, (entry, plan) in enumerate(zip(report["prompts"], PLANS, strict=True)):
        close(entry["methods"][KEY], by_hand(plan))
        close(report["by_category"][f"c{i}"][KEY], by_hand(plan))  # each category: its own prompt's plan
        assert report["best_by_category"][f"c{i}"] == KEY  # the only drafting racer
    assert report["summary"]["ar"]["num_drafts"] == 0
    row = next(line for line in printed.splitlines() if line.startswith(f"{KEY} "))
    assert table_cells(pooled) in row
    assert re.search(rf"^\s+{KEY}\s+{re.escape(per_position_text(pooled))}$", printed, re.M)

    html = (out / "e2e.html").read_text(encoding="utf-8")
    cells = (f"<td>{pooled['num_draft_tokens']}</td><td>{pooled['num_accepted_tokens']}</td>"
             f"<td>{pooled['draft_acceptance_rate']:.1%}</td><td>{pooled['mean_acceptance_length']:.2f}</td>")
    assert cells in html
    position = e2e_report.FIGURE_TITLES.index("Per-position acceptance rate")
    assert e2e_report.FIGURE_TITLES[position] in html
    figure = e2e_report.build_figures(report)[position]
    (line,) = figure.data  # one line per drafting racer: AR drafts nothing
    assert line.name == KEY and list(line.x) == list(range(1, len(pooled["per_position_acceptance_rate"]) + 1))
    assert list(line.y) == pytest.approx(pooled["per_position_acceptance_rate"], rel=1e-12)
    xs = ",".join(str(k) for k in line.x)
    rates = ",".join(repr(r) for r in pooled["per_position_acceptance_rate"])
    assert f'"name":"{KEY}","x":[{xs}],"y":[{rates}]' in html  # the line as written into the page


def test_the_page_cards_plot_and_api_result_show_the_hand_computed_metrics(rigged: Any) -> None:
    from dart_arena.model_client import LocalEngine
    from dart_arena.page import new_conversation
    from dart_arena.ui import AppConfig, ArenaUI
    from dart_core.arena import load_arena

    off = {r.key: False for r in model_free_racers()}  # only the rigged racer and AR: the cards are computed by hand
    arena = load_arena(BUNDLE / "target", **{KEY: "builtin"}, **off, device="cpu", progress=False, budget="off")
    ui = ArenaUI(LocalEngine(arena), AppConfig(chat=False, update_every=0.0))
    assert ui.methods == [KEY, "ar"] and ui.control_labels[4:] == []
    final = list(ui.run(PROMPTS[0], new_conversation(), 0.0, 1.0, 0, NEW_TOKENS, session="m"))[-1]
    expected = by_hand(PLANS[0])

    result = final.result  # what the app's API answers
    assert result["greedy_matches_ar"] == {KEY: True}
    close(result["methods"][KEY], expected)
    assert result["methods"]["ar"]["num_draft_tokens"] == 0 and result["methods"]["ar"]["verify_steps"] == 17
    json.dumps(result)  # plain JSON values

    card = re.search(rf'<div class="card card-{KEY}">(.*?)</div></div>', final.cards).group(1)
    assert (f"drafted <b>{expected['num_draft_tokens']}</b>" in card
            and f"accepted <b>{expected['num_accepted_tokens']}</b>" in card
            and f"rate <b>{expected['draft_acceptance_rate']:.1%}</b>" in card), card
    ar_card = re.search(r'<div class="card card-ar">(.*?)</div></div>', final.cards).group(1)
    assert "drafted <b>0</b>" in ar_card and "accepted <b>0</b>" in ar_card

    (line,) = final.plots["acceptance"].data  # one line per drafting racer
    assert line.name == "Rigged"
    assert list(line.y) == pytest.approx(expected["per_position_acceptance_rate"], rel=1e-12)
    assert list(line.customdata) == expected["num_accepted_tokens_per_pos"]
