"""The race (``dart_core/race/``), its HTML and plots, on the toy bundle assets/tiny and on a scripted arena:
step-by-step alternation, per-method clocks, stop / cancel closing every step generator, error paths."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
from helpers_app import BUNDLE, held_out_prompt

from dart_arena import plots, render
from dart_core.engine.greedy_check import Verdict
from dart_core.engine.loop import Step
from dart_core.engine.metrics import summarize
from dart_core.engine.tree import DraftTree
from dart_core.race import PromptError, Race, RaceSettings, check_prompt, context_limit
from dart_core.racers.registry import racer

if not (BUNDLE / "target" / "config.json").is_file():
    pytest.skip("the embedded bundle assets/tiny is missing", allow_module_level=True)

CPU_TREES = {m: racer(m).default_settings("cpu") for m in ("dart", "eagle3")}


# ------------------------------------------------------------------------------------------ a scripted arena
@dataclass
class ScriptedArena:
    """Duck-typed Arena: each method yields scripted Steps; records which generators were closed."""

    plan: dict[str, list[tuple[int, int, float]]]  # method -> [(tokens, accepted, verify_ms)] after the prefill
    sleep_s: dict[str, float] = field(default_factory=dict)  # wall time a method burns outside its clock
    fail_at: dict[str, int] = field(default_factory=dict)
    closed: list[str] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    threads: set[str] = field(default_factory=set)  # where the steps and closes ran

    class target:  # mimics arena.target
        feature_device = torch.device("cpu")
        max_context = 1000

    @property
    def methods(self) -> list[str]:
        return list(self.plan)

    def drafter(self, method: str) -> Any:
        if method not in self.plan:
            raise ValueError(f"method {method!r} is not loaded")
        return None

    def remembers(self, method: str) -> bool:
        return False  # no racer here keeps a memory across races

    def stream(self, method: str, input_ids: Any, **kwargs: Any) -> Iterator[Step]:
        try:
            self.calls.append(method)
            self.threads.add(threading.current_thread().name)
            yield Step(method, [1], 0, 0, 0.0, 0.0, 5.0, prefill=True)
            steps = self.plan[method]
            for i, (n, acc, ms) in enumerate(steps):
                if self.fail_at.get(method) == i:
                    raise RuntimeError("CUDA out of memory (scripted)")
                time.sleep(self.sleep_s.get(method, 0.0))
                self.calls.append(method)
                self.threads.add(threading.current_thread().name)
                last = i == len(steps) - 1
                yield Step(method, [7] * n, acc, n + 3, 0.5, 0.25, ms,
                           stop_reason="max_new_tokens" if last else None)
        finally:
            self.closed.append(method)
            self.threads.add(threading.current_thread().name)


def test_methods_alternate_step_by_step_and_each_clock_counts_only_its_own_steps() -> None:
    arena = ScriptedArena({"dart": [(3, 2, 10.0)] * 4, "ar": [(1, 0, 2.0)] * 6}, sleep_s={"ar": 0.02})
    race = Race(arena, [1, 2, 3], settings=RaceSettings(max_new_tokens=100))
    order = [lane.method for lane, _ in race.run()]
    # one step each per round while both run, then AR alone
    assert order == ["dart", "ar"] * 5 + ["ar"] * 2
    dart, ar = race.lanes["dart"], race.lanes["ar"]
    # AR's 20 ms of sleeping per step is nobody's time: DART's clock is its own steps' draft + search + verify
    assert dart.own_ms == pytest.approx(5.0 + 4 * (0.5 + 0.25 + 10.0))
    assert ar.own_ms == pytest.approx(5.0 + 6 * (0.5 + 0.25 + 2.0))
    s = race.summary()
    assert s["dart"]["tau"] == pytest.approx(3.0) and s["ar"]["tau"] == pytest.approx(1.0)
    assert s["dart"]["tokens"] == 13 and s["dart"]["verify_steps"] == 4
    assert s["dart"]["tokens_per_s"] == pytest.approx(13 / (dart.own_ms / 1e3))
    assert s["dart"]["tokens_per_s"] == pytest.approx(summarize(dart.steps).tokens_per_s)
    assert s["dart"]["speedup_vs_ar"] == pytest.approx(s["dart"]["tokens_per_s"] / s["ar"]["tokens_per_s"])
    assert s["dart"]["draft_ms_per_step"] == pytest.approx(0.5)
    assert race.finished and all(lane.status == "done" for lane in race.lanes.values())
    assert sorted(arena.closed) == ["ar", "dart"]


def test_stop_and_cancel_close_every_step_generator() -> None:
    arena = ScriptedArena({"dart": [(2, 1, 1.0)] * 50, "eagle3": [(2, 1, 1.0)] * 50, "ar": [(1, 0, 1.0)] * 50})
    race = Race(arena, [1, 2])
    for i, _ in enumerate(race.run()):
        if i == 7:
            race.stop()  # the UI's Stop: finishes after the current step
    assert sorted(arena.closed) == ["ar", "dart", "eagle3"]
    assert {lane.status for lane in race.lanes.values()} == {"stopped"}
    assert sum(len(lane.steps) for lane in race.lanes.values()) == 8

    arena = ScriptedArena({"dart": [(2, 1, 1.0)] * 50, "ar": [(1, 0, 1.0)] * 50})
    race = Race(arena, [1, 2])
    it = race.run()
    for _ in range(3):
        next(it)
    it.close()  # what Gradio does when a request is cancelled or its browser disconnects
    assert sorted(arena.closed) == ["ar", "dart"]
    assert not race._gens
    assert {lane.status for lane in race.lanes.values()} == {"stopped"}


def test_a_worker_runs_every_step_and_close_on_its_one_thread() -> None:
    """The app hands the race one model thread: steps issued from a web server's changing threads made CPU
    forwards 2-3x slower (one OpenMP team per thread), and one thread also serializes races on one model."""
    arena = ScriptedArena({"dart": [(2, 1, 1.0)] * 5, "ar": [(1, 0, 1.0)] * 5})
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="model") as worker:
        race = Race(arena, [1, 2], worker=worker)
        it = race.run()
        steps = [next(it) for _ in range(4)]
        it.close()  # closing (a cancelled request) also happens on the model thread
    assert len(steps) == 4 and sorted(arena.closed) == ["ar", "dart"]
    assert arena.threads == {"model_0"}


def test_a_failing_method_is_reported_and_the_others_finish() -> None:
    arena = ScriptedArena({"dart": [(2, 1, 1.0)] * 5, "eagle3": [(2, 1, 1.0)] * 5, "ar": [(1, 0, 1.0)] * 5},
                          fail_at={"eagle3": 2})
    race = Race(arena, [1, 2])
    list(race.run())
    e3 = race.lanes["eagle3"]
    assert e3.status == "error" and "out of memory" in e3.error
    assert len(e3.steps) == 3  # prefill + two steps before the failure
    assert race.lanes["dart"].status == race.lanes["ar"].status == "done"
    assert race.summary()["eagle3"]["error"] == e3.error
    assert race.greedy_matches() is None  # not every lane finished normally: no verdict
    assert sorted(arena.closed) == ["ar", "dart", "eagle3"]


def test_unknown_method_and_bad_prompts_are_clear_errors() -> None:
    arena = ScriptedArena({"dart": [], "ar": []})
    with pytest.raises(ValueError, match="eagle3"):
        Race(arena, [1], methods=["eagle3", "ar"])
    with pytest.raises(PromptError, match="empty"):
        check_prompt([], 100)
    with pytest.raises(PromptError, match="100 tokens long but the context holds 100"):
        check_prompt([1] * 100, 100)
    check_prompt([1] * 99, 100)
    assert context_limit(1000, None) == 1000 and context_limit(1000, 64) == 64
    assert context_limit(1000, 5000) == 1000


# ------------------------------------------------------------------------------------------ the bundle
@pytest.fixture(scope="module")
def arena() -> Any:
    from dart_core.arena import load_arena
    from dart_core.racers.registry import model_free_racers

    # the model-free racers off: a Race runs every loaded racer, and these tests are about DART and EAGLE-3's
    return load_arena(BUNDLE / "target", dart=BUNDLE / "dart", eagle3=BUNDLE / "eagle3",
                      ngram=BUNDLE / "ngram" / "small.ngram", device="cpu", progress=False,
                      **{r.dest: False for r in model_free_racers()})


def _ids(arena: Any, text: str) -> list[int]:
    return arena.tokenizer(text, add_special_tokens=False)["input_ids"]


def test_bundle_race_greedy_outputs_equal_ar_and_text_streams_exactly(arena: Any) -> None:
    settings = RaceSettings(max_new_tokens=40, racer_settings=CPU_TREES)
    race = Race(arena, _ids(arena, held_out_prompt(0)), settings=settings)
    streams = {m: render.TextStream(arena.tokenizer) for m in race.methods}
    for lane, step in race.run():
        streams[lane.method].add_step(step.tokens, step.accepted)
    assert race.greedy_matches() == {"dart": True, "eagle3": True}
    for m, lane in race.lanes.items():
        assert len(lane.tokens) == 40 and lane.stop_reason == "max_new_tokens"
        streams[m].finish()
        assert streams[m].text == arena.tokenizer.decode(lane.tokens, skip_special_tokens=True)
        drafted = sum(s.accepted for s in lane.steps)
        assert (drafted > 0) == (m != "ar")
    assert race.lanes["dart"].last_tree_step.tree.size > 1
    for fig in (plots.tau_figure(race.lanes.values()), plots.latency_figure(race.lanes.values()),
                plots.speed_figure(race.lanes.values())):
        names = {t.name for t in fig.data}
        assert any("DART" in n for n in names) and any("EAGLE-3" in n for n in names)


def test_bundle_race_stops_at_the_context_limit(arena: Any) -> None:
    ids = _ids(arena, held_out_prompt(0))
    settings = RaceSettings(max_new_tokens=100, max_length=len(ids) + 6, racer_settings=CPU_TREES)
    race = Race(arena, ids, settings=settings)
    list(race.run())
    for lane in race.lanes.values():
        assert lane.status == "done" and lane.stop_reason == "context" and len(lane.tokens) == 6


def test_text_stream_holds_partial_characters_and_tags_origins(arena: Any) -> None:
    text = "naïve café → 日本語 ✓"
    ids = _ids(arena, text)
    ts = render.TextStream(arena.tokenizer)
    for i, t in enumerate(ids):  # alternate origins, one token per step
        ts.add_step([t], accepted=i % 2)
        assert "\ufffd" not in ts.text
    ts.finish()
    assert ts.text == text
    assert {k for _, k in ts.pieces} <= {render.DRAFT, render.TARGET}
    html = render.pieces_html([("a<b>", render.DRAFT), ("&c", render.TARGET), ("d", render.TARGET)], "dart")
    assert html == '<span class="tok-draft tok-dart">a&lt;b&gt;</span>&amp;cd'


def test_lane_and_summary_html(arena: Any) -> None:
    turns = [{"user": "<script>x</script>", "replies": {"dart": {"pieces": [("ok", render.DRAFT)], "error": None}}}]
    out = render.lane_html("dart", turns, chat=True, figures={"status": "running", "tau": 2.5, "tokens": 3,
                                                             "tokens_per_s": 100.0, "speedup_vs_ar": 1.5})
    assert "&lt;script&gt;" in out and "<script>" not in out
    assert "τ</b> 2.50" in out and "1.50×" in out and "running" in out
    card = render.summary_html({"dart": {"label": "DART", "tau": 3.0, "tokens_per_s": 300.0, "speedup_vs_ar": 1.2,
                                         "tokens": 10, "verify_steps": 3}}, {"dart": Verdict("mismatch", 4)})
    assert "1.20×" in card and "DART (at token 4) differs from AR" in card and "please report" in card
    tie = render.summary_html({}, {"dart": Verdict("tie", 33, (0.125, 0.0)), "eagle3": Verdict("identical")},
                              "bfloat16")
    assert "identical up to a bfloat16 tie at token 33" in tie and "EAGLE-3 identical to AR" in tie
    assert "please report" not in tie and "check tie" in tie
    assert render.token_label(arena.tokenizer, _ids(arena, "\n")[0]) == "↵"


def test_tree_figure_marks_the_accepted_path() -> None:
    tree = DraftTree([5, 6, 7, 8, 9], [-1, 0, 0, 1, 3])
    step = Step("dart", [6, 8, 1], 2, 5, 1.0, 0.1, 3.0, tree=tree, accepted_nodes=[0, 1, 3])
    fig = plots.tree_figure(step, lambda t: f"t{t}")
    nodes = fig.data[-1]
    assert list(nodes.text) == ["t5", "t6", "t7", "t8", "t9"]
    assert [c[1] for c in nodes.customdata] == ["accepted", "accepted", "rejected", "accepted", "rejected"]
    assert "5 nodes" in fig.layout.title.text and "2 accepted" in fig.layout.title.text
    accepted_edges = [v for v in fig.data[1].x if v is not None]
    assert accepted_edges == [0, 1, 1, 2]  # root → node 1 → node 3
    big = DraftTree(list(range(200)), [-1] + [i // 2 for i in range(1, 200)])
    fig = plots.tree_figure(Step("dart", [1], 0, 200, 0, 0, 0, tree=big, accepted_nodes=[0, 1, 3, 7]), str)
    assert len(fig.data[-1].x) <= plots.TREE_MAX_NODES and "showing" in fig.layout.title.text
    assert "no draft tree" in plots.tree_figure(None, str).layout.annotations[0].text


def test_the_tau_and_drafting_plots_show_each_steps_nodes_verified_of_drafted() -> None:
    """The tree budget's choice, step by step: the τ dots and the drafting line carry (verified, drafted) nodes."""
    from dart_core.race import Lane

    lane = Lane("dart", steps=[Step("dart", [1], 0, 0, 0.0, 0.0, 5.0, prefill=True),
                               Step("dart", [2, 3], 1, 5, 1.0, 0.2, 9.0, drafted_size=13),
                               Step("dart", [4], 0, 1, 1.0, 0.2, 6.0, drafted_size=13)])
    dots = next(t for t in plots.tau_figure([lane]).data if t.mode == "markers")
    assert [list(c) for c in dots.customdata] == [[4, 12], [0, 12]]
    assert "drafted nodes verified" in dots.hovertemplate
    line = plots.latency_figure([lane]).data[0]
    assert [list(c)[3:] for c in line.customdata] == [[4, 12], [0, 12]]
