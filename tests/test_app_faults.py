"""Issue 24, in one process on the toy bundle assets/tiny: what a hostile visitor or a fault must not break. The
race log stays one record a line whatever the prompt holds; AR in the Racers picker is accepted and a race with
nothing to compare says so; Stop, Clear and Regenerate with nothing to act on answer quietly; a prompt far over the
context is refused before it is tokenized, and a race tokenizes each distinct prompt once; the time limit holds
through a long prefill, which Stop also cuts short."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from helpers_app import BUNDLE, held_out_prompt

from dart_arena.model_client import LocalEngine
from dart_arena.page import new_conversation
from dart_arena.ui import AppConfig, ArenaUI
from dart_core.bench.drive import read_race_log

if not (BUNDLE / "target" / "config.json").is_file():
    pytest.skip("the embedded bundle assets/tiny is missing", allow_module_level=True)

LINE_BREAKS = "\u2028\u2029\u0085\x1c\x1d\x1e\x0b\x0c\r"  # everything str.splitlines() splits at, besides "\n"


def controls(max_new_tokens: int) -> tuple:
    """Greedy, the token budget, then DART tree size and EAGLE-3 total / depth / top-k at their CPU defaults."""
    return (0.0, 1.0, 0, max_new_tokens, 16, 21, 6, 4)


@pytest.fixture(scope="module")
def arena() -> Any:
    from dart_core.arena import load_arena
    from dart_core.racers.registry import model_free_racers

    # the model-free racers off: the controls below are DART's and EAGLE-3's sliders
    return load_arena(BUNDLE / "target", dart=BUNDLE / "dart", eagle3=BUNDLE / "eagle3",
                      ngram=BUNDLE / "ngram" / "small.ngram", device="cpu", progress=False,
                      **{r.dest: False for r in model_free_racers()})


def ui_for(arena: Any, **config: Any) -> ArenaUI:
    return ArenaUI(LocalEngine(arena), AppConfig(chat=False, update_every=0.0, **config))


# ------------------------------------------------------------------------------------------------ the race log
def test_the_race_log_keeps_one_record_a_line_whatever_the_prompt_holds(arena: Any, tmp_path: Any) -> None:
    log_file = tmp_path / "races.jsonl"
    ui = ui_for(arena, race_log=log_file)
    prompts = [f"def f():\n    s = '{LINE_BREAKS}'\n", held_out_prompt(0), "x = '\u2028'  # \u00e9\u4e2d\U0001f600\n"]
    for prompt in prompts:
        final = list(ui.run(prompt, new_conversation(), *controls(4), session="log"))[-1]
        assert final.result is not None, final.status
    text = log_file.read_text(encoding="utf-8")
    assert len(text.splitlines()) == len(prompts)  # what any line-based tool sees: one line per race
    assert not set(text) & set("\u2028\u2029\u0085")
    races = read_race_log(log_file)
    assert [r["prompt"] for r in races] == prompts  # round-trips, the characters themselves included
    assert "\u00e9\u4e2d\U0001f600" in text  # other text is kept readable, not \\u-escaped


def test_the_race_log_reader_splits_at_newlines_only(tmp_path: Any) -> None:
    """A log written before the app escaped the separators (json.dumps leaves U+2028 raw) still reads."""
    log_file = tmp_path / "old.jsonl"
    record = {"prompt": "a\u2028b\u0085c", "result": {"methods": {"ar": {"tokens": 1}}}}
    log_file.write_text(json.dumps(record, ensure_ascii=False) + "\n", encoding="utf-8")
    assert read_race_log(log_file) == [record]


# ------------------------------------------------------------------------------------------------ the picker
def test_ar_in_the_picker_is_accepted_and_a_race_without_drafters_says_nothing_was_compared(arena: Any) -> None:
    ui = ui_for(arena)
    assert ui.picked(["ar"]) == ["ar"] and ui.picked(["ar", "dart"]) == ["dart", "ar"]
    for racers in (["ar"], []):
        final = list(ui.run(held_out_prompt(0), new_conversation(), *controls(4), session="p", racers=racers))[-1]
        assert set(final.result["methods"]) == {"ar"}, final.status
        assert "identical" not in final.status and "nothing was compared" in final.status, final.status
        assert "banner-ok" in final.status
    both = list(ui.run(held_out_prompt(0), new_conversation(), *controls(4), session="p", racers=["dart"]))[-1]
    assert "greedy outputs identical to AR" in both.status


def test_a_race_cut_before_ar_had_a_step_does_not_say_ar_only(arena: Any) -> None:
    """The time limit hit after DART's first step and before AR's: the status said "(AR only so far)"."""
    ui = ui_for(arena, time_limit_s=1e-9)
    final = list(ui.run(held_out_prompt(0), new_conversation(), *controls(50), session="t", racers=["dart"]))[-1]
    steps = {m: f["verify_steps"] + (f["prefill_ms"] is not None) for m, f in final.result["methods"].items()}
    assert steps["dart"] >= 1 and steps["ar"] == 0, steps
    assert "AR only" not in final.status and "no speedup measured so far" in final.status, final.status


# ------------------------------------------------------------------------------------------------ nothing to act on
@pytest.mark.parametrize("when", ["fresh", "after a race", "after clear"])
def test_stop_and_clear_with_nothing_to_act_on_are_quiet_no_ops(arena: Any, when: str) -> None:
    ui = ui_for(arena)
    if when != "fresh":
        list(ui.run(held_out_prompt(0), new_conversation(), *controls(4), session="n"))
    if when == "after clear":
        ui.clear("n")
    answer = ui.stop("n")
    assert answer.status is not None and "Nothing to stop" in answer.status, answer
    assert "banner-warn" not in answer.status  # quiet: the page's state, not an alarm
    if when == "after a race":
        assert "Done" in answer.status  # the race's own last word stays
    updates = ui_page_updates(ui, answer)
    assert updates, "an answer that changes no output is what Gradio refused with HTTP 500"
    cleared = ui.clear("n")
    assert cleared.conv == new_conversation()


def ui_page_updates(ui: ArenaUI, update: Any) -> dict[str, Any]:
    """The outputs an update sets, by field name (what ``Page.updates`` turns into Gradio's dict)."""
    from dataclasses import fields

    from dart_arena.page import KEEP

    return {f.name: getattr(update, f.name) for f in fields(update)
            if getattr(update, f.name) is not KEEP and getattr(update, f.name) != {}}


def test_regenerate_with_nothing_to_regenerate_is_a_message(arena: Any) -> None:
    with pytest.warns(UserWarning, match="Nothing to regenerate"):
        (out,) = ui_for(arena).run("", new_conversation(), *controls(4), regenerate=True, session="r")
    assert "Nothing to regenerate" in out.status


# ------------------------------------------------------------------------------------------------ huge prompts
def test_a_huge_prompt_is_refused_before_it_is_tokenized(arena: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    ui = ui_for(arena)
    calls: list[int] = []
    real = ui.tokenizer.__class__.__call__

    def counting(self: Any, text: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(len(text))
        return real(self, text, *args, **kwargs)

    monkeypatch.setattr(ui.tokenizer.__class__, "__call__", counting)
    huge = "x = 1\n" * (20_000_000 // 6)
    started = time.perf_counter()
    with pytest.warns(UserWarning, match="characters"):
        (out,) = ui.run(huge, new_conversation(), *controls(4), session="h")
    assert time.perf_counter() - started < 1.0
    assert calls == [], "the prompt was tokenized before it was refused"
    assert f"{len(huge):,} characters" in out.status and "banner-warn" in out.status
    assert f"{ui.max_prompt_chars:,}" in out.status
    # a prompt under the bound is tokenized once per race, not once per racer
    final = list(ui.run(held_out_prompt(1), new_conversation(), *controls(4), session="h"))[-1]
    assert set(final.result["methods"]) == {"dart", "eagle3", "ar"} and len(calls) == 1, calls


def test_the_character_bound_never_refuses_a_prompt_that_fits(arena: Any) -> None:
    """The bound is an upper bound: the longest token's text times the context; a prompt of the context's length
    in its longest tokens is at the bound, not over it."""
    ui = ui_for(arena)
    vocab = ui.tokenizer.get_vocab()
    longest = max(vocab, key=len)
    assert ui.max_prompt_chars >= ui.context * len(ui.tokenizer.convert_tokens_to_string([longest]))


# ------------------------------------------------------------------------------------------------ time limits
def long_prompt(arena: Any, tokens: int) -> str:
    """Code of about ``tokens`` tokens (within the toy's context of 1,024)."""
    text = "".join(held_out_prompt(i) for i in range(40))
    ids = arena.tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(ids) > tokens
    return arena.tokenizer.decode(ids[:tokens])


def test_the_time_limit_holds_through_the_prefill(arena: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A prefill slowed to 0.5 s per chunk (a long prompt on a slow host): the race stops within about a chunk of
    its limit, not after every racer's whole prefill."""
    from dart_core.engine import target as target_module

    monkeypatch.setattr(target_module, "PREFILL_CHUNK", 64)
    real_run = arena.target._run

    def slow_run(*args: Any, **kwargs: Any) -> Any:
        time.sleep(0.5)
        return real_run(*args, **kwargs)

    monkeypatch.setattr(arena.target, "_run", slow_run)
    prompt = long_prompt(arena, 900)  # 15 chunks: 7.5 s of prefill per racer, 22 s for the three
    ui = ui_for(arena, time_limit_s=1.0)
    started = time.perf_counter()
    final = list(ui.run(prompt, new_conversation(), *controls(20), session="tl"))[-1]
    wall = time.perf_counter() - started
    assert wall < 1.0 + 0.5 + 1.0, wall  # the limit, one chunk, slack for a shared CPU
    assert final.result["limit"] == "time" and "time limit of 1 s" in final.status
    assert all(f["status"] == "stopped" for f in final.result["methods"].values())


def test_stop_cuts_a_long_prefill_short(arena: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from dart_core.engine import target as target_module

    monkeypatch.setattr(target_module, "PREFILL_CHUNK", 64)
    real_run = arena.target._run
    chunks = threading.Semaphore(0)

    def slow_run(*args: Any, **kwargs: Any) -> Any:
        chunks.release()
        time.sleep(0.3)
        return real_run(*args, **kwargs)

    monkeypatch.setattr(arena.target, "_run", slow_run)
    ui = ui_for(arena)
    outputs: list[Any] = []
    worker = threading.Thread(target=lambda: outputs.extend(
        ui.run(long_prompt(arena, 900), new_conversation(), *controls(20), session="s")))
    worker.start()
    assert chunks.acquire(timeout=30)  # the first racer's prefill is under way
    asked = time.perf_counter()
    answer = ui.stop("s")
    worker.join(30)
    assert time.perf_counter() - asked < 0.3 + 1.0  # one chunk and slack
    assert "Stopped" in answer.status
    assert all(f["status"] == "stopped" for f in answer.result["methods"].values())
