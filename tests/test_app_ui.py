"""The page's event logic without a server (``dart_arena/ui.py``): input errors, multi-turn chat through a chat
template, Stop from another thread and a cancelled (closed) event, on the toy bundle assets/tiny."""

from __future__ import annotations

import gc
import html
import json
import threading
from typing import Any

import pytest
from helpers_app import BUNDLE, held_out_prompt

from dart_arena.live import LiveRace
from dart_arena.model_client import LocalEngine
from dart_arena.page import KEEP, PLOTS, encode, new_conversation
from dart_arena.ui import AppConfig, ArenaUI
from dart_core.racers.registry import model_free_racers

if not (BUNDLE / "target" / "config.json").is_file():
    pytest.skip("the embedded bundle assets/tiny is missing", allow_module_level=True)

CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def controls(max_new_tokens: int) -> tuple:
    """Sampling (greedy), the token budget, then the loaded racers' tree sliders (``ArenaUI.control_labels``:
    DART tree size, EAGLE-3 total, depth, top-k) at their CPU defaults."""
    return (0.0, 1.0, 0, max_new_tokens, 16, 21, 6, 4)


@pytest.fixture(scope="module")
def arena() -> Any:
    from dart_core.arena import load_arena

    # the model-free racers off: the controls below are DART's and EAGLE-3's sliders
    return load_arena(BUNDLE / "target", dart=BUNDLE / "dart", eagle3=BUNDLE / "eagle3",
                      ngram=BUNDLE / "ngram" / "small.ngram", device="cpu", progress=False,
                      **{r.dest: False for r in model_free_racers()})


def ui_for(arena: Any, *, chat: bool = False) -> ArenaUI:
    return ArenaUI(LocalEngine(arena), AppConfig(chat=chat, update_every=0.0))


@pytest.mark.parametrize(("prompt", "regenerate", "message"), [
    ("   ", False, "The prompt is empty"),
    ("x = 1\n" * 1200, False, "context holds 1,024 tokens"),
    ("", True, "Nothing to regenerate"),
])
def test_bad_input_is_a_message_not_an_exception(arena: Any, prompt: str, regenerate: bool, message: str) -> None:
    conv = new_conversation()
    with pytest.warns(UserWarning, match=message.split()[0]):  # gr.Warning outside a request: a Python warning
        out = list(ui_for(arena).run(prompt, conv, *controls(8), regenerate=regenerate, session="s"))
    assert len(out) == 1
    assert message in out[0].status and "banner-warn" in out[0].status
    assert out[0].conv is conv and conv["turns"] == []  # nothing added to the conversation


def test_completion_race_and_regenerate(arena: Any) -> None:
    ui = ui_for(arena)
    out = list(ui.run(held_out_prompt(0), new_conversation(), *controls(12), session="s"))
    final = out[-1]
    assert "Done" in final.status and "identical to AR" in final.status
    result = final.result
    assert {m: f["tokens"] for m, f in result["methods"].items()} == {"dart": 12, "eagle3": 12, "ar": 12}
    conv = final.conv
    again = list(ui.run("", conv, *controls(12), regenerate=True, session="s"))[-1]
    assert len(again.conv["turns"]) == 1  # the last prompt raced again, not appended
    assert again.result["methods"]["ar"]["token_ids"] == result["methods"]["ar"]["token_ids"]


def test_live_figures_are_redrawn_one_at_a_time_in_turn(arena: Any) -> None:
    """While racing, an update carries at most one figure, the five in turn (a browser redraws each in one short
    task, so a click never waits behind all five); the final update carries all five, drawn from the whole race."""
    ui = ArenaUI(LocalEngine(arena), AppConfig(chat=False, update_every=0.0, plot_every=0.0))
    out = list(ui.run(held_out_prompt(0), new_conversation(), *controls(24), session="s"))
    live, final = out[:-1], out[-1]
    shown = [name for u in live for name in u.plots]
    assert all(len(u.plots) <= 1 for u in live)
    assert len(shown) >= 6 and shown == [PLOTS[i % len(PLOTS)] for i in range(len(shown))], shown
    assert list(final.plots) == list(PLOTS)
    assert final.plots["tau"].data and final.plots["tree"].data
    fresh = ArenaUI(LocalEngine(arena), AppConfig(chat=False, update_every=0.0, plot_every=3600.0))
    live = list(fresh.run(held_out_prompt(0), new_conversation(), *controls(24), session="s"))[:-1]
    assert [name for u in live for name in u.plots] == [PLOTS[0]]  # the first is due at once, the next an hour on


def test_a_sampled_race_says_what_it_checks_instead_of_token_equality(arena: Any) -> None:
    """At temperature 0.7 and top-p 0.9 the outputs differ from AR's by chance: the status and the cards say that
    each racer keeps the target's distribution, never "identical to AR", and no greedy verdict is made."""
    out = list(ui_for(arena).run(held_out_prompt(0), new_conversation(), 0.7, 0.9, 0, 12, 16, 21, 6, 4,
                                 session="s"))
    final = out[-1]
    assert "Done" in final.status and "sampled (T=0.7, top-p 0.9)" in final.status
    assert "identical" not in final.status and "identical" not in final.cards
    assert "sampled at T=0.7, top-p 0.9" in html.unescape(final.cards) and "check sampled" in final.cards
    assert final.result["greedy_matches_ar"] is None


def test_a_race_on_an_example_prompt_names_its_kind(arena: Any) -> None:
    """The bundle's held-out prompts carry a kind (``category``): a race on one says it in its final status; any
    other prompt does not."""
    from dart_arena.__main__ import bundle_categories
    from dart_core import open_bundle

    categories = bundle_categories(open_bundle(BUNDLE)) or {held_out_prompt(0): "code"}  # the toy's have none
    prompt, kind = next(iter(categories.items()))
    ui = ArenaUI(LocalEngine(arena), AppConfig(chat=False, update_every=0.0, categories=categories))
    final = list(ui.run(prompt, new_conversation(), *controls(6), session="s"))[-1]
    assert final.status.count(f"(an example prompt of kind {kind})") == 1
    other = list(ui.run(prompt + " again", new_conversation(), *controls(6), session="t"))[-1]
    assert "example prompt" not in other.status
    chat_bundle = BUNDLE.parent / "smollm2"
    records = [json.loads(line) for line in (chat_bundle / "prompts.jsonl").read_text().splitlines() if line.strip()]
    assert bundle_categories(open_bundle(chat_bundle)) == {r["prompt"]: r["category"] for r in records}


def test_multi_turn_chat_continues_each_methods_own_conversation(arena: Any) -> None:
    tok = arena.tokenizer
    saved = tok.chat_template
    tok.chat_template = CHAT_TEMPLATE
    try:
        ui = ui_for(arena, chat=True)
        first = list(ui.run("def add(a, b):", new_conversation(), *controls(10), session="c"))[-1]
        conv = first.conv
        reply = "".join(p for p, _ in conv["turns"][0]["replies"]["dart"]["pieces"])
        assert reply and reply == first.result["methods"]["dart"]["text"]
        conv["turns"].append({"user": "and <sub>?", "replies": {}})
        ids = encode(arena.tokenizer, conv["turns"], "dart", chat=True)
        text = tok.decode(ids)
        assert text.startswith("<|user|>def add(a, b):\n<|assistant|>" + reply + "\n<|user|>and <sub>?")
        assert text.endswith("<|assistant|>")
        conv["turns"].pop()
        second = list(ui.run("and <sub>?", conv, *controls(10), session="c"))[-1]
        assert len(second.conv["turns"]) == 2
        assert list(second.lanes) == ["dart", "eagle3", "ar"]
        for column in second.lanes.values():
            assert column.count('class="msg msg-user"') == 2 and "and &lt;sub&gt;?" in column
    finally:
        tok.chat_template = saved


def test_stop_from_another_thread_ends_the_race_with_the_stopped_state(arena: Any) -> None:
    ui = ui_for(arena)
    outputs: list[Any] = []
    started = threading.Event()

    def consume() -> None:  # Gradio's worker thread, advancing the event's generator
        for out in ui.run(held_out_prompt(1), new_conversation(), *controls(800), session="u"):
            outputs.append(out)
            if len(outputs) >= 3:
                started.set()

    worker = threading.Thread(target=consume)
    worker.start()
    assert started.wait(60)
    answer = ui.stop("u")  # what the Stop button's handler does
    worker.join(60)
    assert not worker.is_alive()
    assert "Stopped" in answer.status and "Stopped" in outputs[-1].status
    result = answer.result
    assert all(f["status"] in ("stopped", "done") for f in result["methods"].values())
    assert result["methods"]["ar"]["status"] == "stopped" and result["methods"]["ar"]["tokens"] < 800
    assert all("state-stopped" in column or "token limit" in column for column in answer.lanes.values())
    assert ui.stop("u") is not None  # a second Stop is harmless


def test_a_closed_event_closes_the_race(arena: Any) -> None:
    ui = ui_for(arena)
    gen = ui.run(held_out_prompt(2), new_conversation(), *controls(800), session="v")
    for _ in range(3):
        next(gen)
    gen.close()  # Gradio's cancel / disconnect
    live = ui.active["v"]
    assert live.closed.is_set() and live.race.stopped and not live.race._gens
    cleared = ui.clear("v")
    assert "v" not in ui.active and cleared.conv == new_conversation()
    assert set(cleared.plots) == {"tau", "latency", "speed", "acceptance", "tree"} and cleared.result is None


@pytest.mark.parametrize(("prompt", "index", "value", "message"), [
    ("def f():\ud800", None, None, "not valid Unicode (a lone surrogate, U+D800, at character 8)"),
    (42, None, None, "The prompt must be text, got int"),
    ("x = 1", 0, "hot", "Temperature: expected a number, got 'hot'"),
    ("x = 1", 1, None, "Top-p: expected a number, got None"),
    ("x = 1", 3, float("nan"), "Max new tokens: expected a finite number, got nan"),
    ("x = 1", 4, float("inf"), "DART tree size: expected a finite number, got inf"),
    ("x = 1", 5, True, "EAGLE-3 total: expected a number, got True"),
    ("x = 1", 4, 0, "DART tree size must be between 1 and 512, got 0"),
    ("x = 1", 6, 99, "EAGLE-3 depth must be between 1 and 32, got 99"),
    ("x = 1", 7, 2.5, "EAGLE-3 top-k: expected an integer, got 2.5"),
    ("x = 1", 3, 0, "Max new tokens must be at least 1, got 0"),
    ("x = 1", 0, 5, "Temperature must be between 0 and 2, got 5"),
    ("x = 1", 1, 0, "Top-p must be between 0.05 and 1, got 0"),
    ("x = 1", 2, 1000, "Top-k must be between 0 and 200, got 1000"),
    ("x = 1", 2, 10**400, "Top-k: expected a finite number, got 10000000"),  # OverflowError before
    ("x = 1", 3, list(range(10**5)), "Max new tokens: expected a number, got [0, 1, 2, 3, 4, 5, ...]"),
])
def test_malformed_api_values_get_a_message_naming_the_input(arena: Any, prompt: Any, index: int | None,
                                                             value: Any, message: str) -> None:
    """What only an API caller can send (a lone surrogate used to raise TypeError in the tokenizer, NaN gave
    "cannot convert float NaN to integer", null a TypeError): one warning that names the control, no race."""
    values = list(controls(8))
    if index is not None:
        values[index] = value
    conv = new_conversation()
    with pytest.warns(UserWarning):
        out = list(ui_for(arena).run(prompt, conv, *values, session="s"))
    assert len(out) == 1
    assert html.escape(message) in out[0].status and "banner-warn" in out[0].status
    assert conv["turns"] == []


def test_the_hosts_token_limit_cuts_the_budget_and_says_so(arena: Any, tmp_path: Any) -> None:
    log_file = tmp_path / "races.jsonl"
    ui = ArenaUI(LocalEngine(arena), AppConfig(chat=False, update_every=0.0, max_new_tokens_limit=10,
                                               race_log=log_file))
    final = list(ui.run(held_out_prompt(0), new_conversation(), *controls(50), session="cap"))[-1]
    assert html.escape("over this server's limit, so the race stops at 10 new tokens") in final.status
    assert {m: f["tokens"] for m, f in final.result["methods"].items()} == {"dart": 10, "eagle3": 10, "ar": 10}
    assert final.result["settings"]["max_new_tokens"] == 10
    # the host's race log: one JSON line per ended race, the page's run data in it
    (line,) = log_file.read_text(encoding="utf-8").splitlines()
    record = json.loads(line)
    assert record["prompt"] == held_out_prompt(0) and record["wall_s"] > 0
    assert record["result"]["methods"]["ar"]["token_ids"] == final.result["methods"]["ar"]["token_ids"]
    within = list(ui.run(held_out_prompt(1), new_conversation(), *controls(6), session="cap"))[-1]
    assert "limit" not in within.status and within.result["settings"]["max_new_tokens"] == 6
    assert len(log_file.read_text(encoding="utf-8").splitlines()) == 2


def test_the_hosts_time_limit_stops_a_race_and_says_so(arena: Any) -> None:
    ui = ArenaUI(LocalEngine(arena), AppConfig(chat=False, update_every=0.0, time_limit_s=0.001))
    final = list(ui.run(held_out_prompt(1), new_conversation(), *controls(500), session="t"))[-1]
    assert "time limit of 0.001 s per race" in final.status and "banner-warn" in final.status
    assert final.result["limit"] == "time"
    assert all(f["status"] == "stopped" and f["tokens"] < 500 for f in final.result["methods"].values())


def test_a_failed_lane_is_never_reported_as_done(arena: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("drafter exploded")

    monkeypatch.setattr(arena.drafters["eagle3"], "propose", broken)
    final = list(ui_for(arena).run(held_out_prompt(0), new_conversation(), *controls(8), session="f"))[-1]
    assert "Done" not in final.status and "banner-warn" in final.status
    assert "Finished with errors" in final.status and "EAGLE-3 failed (RuntimeError: drafter exploded)" in final.status
    methods = final.result["methods"]
    assert methods["eagle3"]["status"] == "error" and methods["dart"]["status"] == methods["ar"]["status"] == "done"
    assert final.result["greedy_matches_ar"] is None


def test_streaming_updates_of_a_column_only_append(arena: Any) -> None:
    """While a race streams, a column's HTML extends the previous update's (Gradio then sends only the new text,
    an "append" diff), except when the column's state changes; the final update is the full, closed form."""
    import re
    from itertools import pairwise

    from gradio.utils import diff

    updates = list(ui_for(arena).run(held_out_prompt(3), new_conversation(), *controls(40), session="d"))
    live = updates[1:-1]  # after "Prefilling…", before the final state
    assert len(live) > 10
    state = re.compile(r'class="lane-state state-(\w+)"')
    appended = 0
    for old, new in pairwise(live):
        for m in ("dart", "eagle3", "ar"):
            if state.search(old.lanes[m]).group(1) == state.search(new.lanes[m]).group(1):
                assert new.lanes[m].startswith(old.lanes[m]), m
                edits = diff(old.lanes[m], new.lanes[m])
                assert all(e[0] == "append" for e in edits), edits
                appended += bool(edits)
    assert appended > 10
    final = updates[-1].lanes["dart"]
    assert final.endswith("</div></div>") and 'class="chip"' in final  # closed, with its figure chips
    assert 'class="chip"' not in live[-1].lanes["dart"]  # the live columns leave the figures to the cards


def test_a_prompt_that_cannot_be_sent_back_is_left_in_its_box(arena: Any) -> None:
    """A lone surrogate echoed into the prompt box broke the answer's UTF-8 JSON (the request never completed)."""
    with pytest.warns(UserWarning):
        (out,) = ui_for(arena).run("def f():\ud800", new_conversation(), *controls(8), session="s")
    assert out.prompt is KEEP and "lone surrogate" in out.status


def test_an_unexpected_error_is_answered_with_a_message_and_logged(arena: Any, monkeypatch: pytest.MonkeyPatch,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    ui = ui_for(arena)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("engine on fire")

    monkeypatch.setattr(ui.engine, "race", broken)
    with pytest.warns(UserWarning, match="Something went wrong"):
        out = list(ui.guarded("racing", lambda: ui.run(held_out_prompt(0), new_conversation(), *controls(8),
                                                      session="e")))
    assert "RuntimeError: engine on fire" in out[-1].status and "banner-warn" in out[-1].status
    assert "unexpected error while racing" in caplog.text and "Traceback" in caplog.text
    monkeypatch.setattr(ui, "stop", broken)
    with pytest.warns(UserWarning):
        answer = ui.answer("stopping the race", ui.stop, "e")
    assert "while stopping the race (RuntimeError: engine on fire)" in answer.status


def test_ended_races_are_forgotten_and_sessions_capped(arena: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Per visitor the server keeps a race only while it runs and ENDED_KEEP_S after (for a late Stop), and at
    most ``max_sessions`` of them: races from many sessions leave no LiveRace (with its steps and draft trees)
    behind."""
    import dart_arena.ui

    ui = ArenaUI(LocalEngine(arena), AppConfig(chat=False, update_every=0.0, max_sessions=3))
    for i in range(5):
        list(ui.run(held_out_prompt(i), new_conversation(), *controls(4), session=f"s{i}"))
    assert list(ui.active) == ["s2", "s3", "s4"]  # the cap: the least recently used are forgotten
    assert all(live.ended_at is not None for live in ui.active.values())
    answer = ui.stop("s3")  # a finished race: nothing to stop, said in the status (an empty update was an HTTP 500)
    assert "Nothing to stop" in answer.status and "Done" in answer.status
    assert answer.conv is KEEP and answer.result is KEEP and not answer.lanes  # nothing else changes
    monkeypatch.setattr(dart_arena.ui, "ENDED_KEEP_S", 0.0)
    list(ui.run(held_out_prompt(5), new_conversation(), *controls(4), session="s5"))
    assert list(ui.active) == ["s5"]  # the others ended over ENDED_KEEP_S ago
    gc.collect()
    alive = [o for o in gc.get_objects() if type(o) is LiveRace and o.ui is ui]  # this page's, not other tests'
    assert alive == [ui.active["s5"]], f"{len(alive)} races still held"
    ui.clear("s5")
    assert not ui.active


@pytest.mark.parametrize("conv", [None, [1, 2], "turns", {"turns": "x"}, {}])
def test_an_odd_conversation_is_a_new_one(arena: Any, conv: Any) -> None:
    """The conversation is the server's own session state (API callers cannot send it), but a malformed one
    still gives an answer, never an exception."""
    with pytest.warns(UserWarning):
        (out,) = ui_for(arena).run("", conv, *controls(8), regenerate=True, session="o")
    assert "Nothing to regenerate" in out.status and out.conv == new_conversation()


def test_visitor_picks_the_racers(arena: Any) -> None:
    """The Racers picker: only the picked drafters (and always AR) race and have their columns updated; a racer
    ticked later in a chat answers after AR's earlier replies; a bad value from an API caller names the picker."""
    tok = arena.tokenizer
    saved = tok.chat_template
    tok.chat_template = CHAT_TEMPLATE
    try:
        ui = ui_for(arena, chat=True)
        assert ui.optional_methods == ["dart", "eagle3"]
        first = list(ui.run("def add(a, b):", new_conversation(), *controls(8), session="p", racers=["dart"]))[-1]
        assert set(first.result["methods"]) == {"dart", "ar"} and "identical to AR" in first.status
        assert set(first.lanes) == {"dart", "ar"}  # the EAGLE-3 column is left as it is
        conv = first.conv
        assert set(conv["turns"][0]["replies"]) == {"dart", "ar"}
        ar_reply = "".join(p for p, _ in conv["turns"][0]["replies"]["ar"]["pieces"])
        conv["turns"].append({"user": "more", "replies": {}})
        text = tok.decode(encode(tok, conv["turns"], "eagle3", chat=True))
        assert "<|assistant|>" + ar_reply + "\n<|user|>more" in text  # EAGLE-3 joins after AR's reply
        conv["turns"].pop()
        second = list(ui.run("more", conv, *controls(8), session="p", racers=["eagle3"]))[-1]
        assert set(second.result["methods"]) == {"eagle3", "ar"} and "identical to AR" in second.status
        only_ar = list(ui.run("x", new_conversation(), *controls(4), session="q", racers=[]))[-1]
        assert set(only_ar.result["methods"]) == {"ar"}
    finally:
        tok.chat_template = saved
    for value, message in ((["medusa"], "Racers: 'medusa' is not a racer loaded here"),
                           ("dart", "Racers: expected a list of racer names"), ([1], "Racers: expected a list")):
        with pytest.warns(UserWarning):
            (out,) = ui.run(held_out_prompt(0), new_conversation(), *controls(4), session="b", racers=value)
        assert html.escape(message) in out.status and "banner-warn" in out.status


def test_hf_generate_races_as_a_column_of_its_own() -> None:
    """``--compare-hf``: transformers' own generate() gets a column; it streams token by token, prints AR's
    greedy output, and the page's check says so; the flag reaches the model loader."""
    from dart_arena.__main__ import build_parser, resolve
    from dart_core.arena import load_arena

    args = build_parser().parse_args(["--bundle", str(BUNDLE), "--compare-hf"])
    assert resolve(args)["runners"] == ["hf"]
    assert resolve(build_parser().parse_args(["--bundle", str(BUNDLE)]))["runners"] == []
    arena = load_arena(BUNDLE / "target", dart=BUNDLE / "dart", device="cpu", progress=False, hf=True,
                       **{r.dest: False for r in model_free_racers()})
    assert arena.methods == ["dart", "hf", "ar"]
    ui = ui_for(arena)
    assert "hf" in ui.optional_methods
    outs = list(ui.run(held_out_prompt(1), new_conversation(), *controls(12)[:5], session="hf"))  # DART's slider
    final = outs[-1]
    assert set(final.result["methods"]) == {"dart", "hf", "ar"}
    assert final.result["methods"]["hf"]["token_ids"] == final.result["methods"]["ar"]["token_ids"]
    assert final.result["greedy_check_ar"] == {"dart": "identical to AR", "hf": "identical to AR"}
    assert "HF generate" in final.lanes["hf"] and "identical to AR" in final.status
