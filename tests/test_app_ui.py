"""The page's event logic without a server (``app/ui.py``): input errors, multi-turn chat through a chat
template, Stop from another thread and a cancelled (closed) event, on the toy bundle assets/tiny."""

from __future__ import annotations

import html
import threading
from typing import Any

import pytest
from helpers_app import BUNDLE, held_out_prompt

from app.ui import AppConfig, ArenaUI, encode, new_conversation
from dart_core.generate import tree_defaults

if not (BUNDLE / "target" / "config.json").is_file():
    pytest.skip("the embedded bundle assets/tiny is missing", allow_module_level=True)

STATUS, LANES = 2, slice(3, 6)  # positions in the page's outputs: prompt, conversation, status, columns…
CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def controls(max_new_tokens: int) -> tuple:
    return (0.0, 1.0, 0, max_new_tokens, tree_defaults("cpu")[0].max_nodes, 6, 4, 21)


@pytest.fixture(scope="module")
def arena() -> Any:
    from dart_core.models import load_arena

    return load_arena(BUNDLE / "target", dart=BUNDLE / "dart", eagle3=BUNDLE / "eagle3",
                      ngram=BUNDLE / "ngram" / "small.ngram", device="cpu", progress=False)


def ui_for(arena: Any, *, chat: bool = False) -> ArenaUI:
    dart, eagle3 = tree_defaults("cpu")
    return ArenaUI(arena, AppConfig(chat=chat, dart=dart, eagle3=eagle3, update_every=0.0))


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
    assert message in out[0][STATUS] and "banner-warn" in out[0][STATUS]
    assert out[0][1] is conv and conv["turns"] == []  # nothing added to the conversation


def test_completion_race_and_regenerate(arena: Any) -> None:
    ui = ui_for(arena)
    out = list(ui.run(held_out_prompt(0), new_conversation(), *controls(12), session="s"))
    final = out[-1]
    assert "Done" in final[STATUS] and "identical to AR" in final[STATUS]
    result = final[-1]
    assert {m: f["tokens"] for m, f in result["methods"].items()} == {"dart": 12, "eagle3": 12, "ar": 12}
    conv = final[1]
    again = list(ui.run("", conv, *controls(12), regenerate=True, session="s"))[-1]
    assert len(again[1]["turns"]) == 1  # the last prompt raced again, not appended
    assert again[-1]["methods"]["ar"]["token_ids"] == result["methods"]["ar"]["token_ids"]


def test_multi_turn_chat_continues_each_methods_own_conversation(arena: Any) -> None:
    tok = arena.tokenizer
    saved = tok.chat_template
    tok.chat_template = CHAT_TEMPLATE
    try:
        ui = ui_for(arena, chat=True)
        first = list(ui.run("def add(a, b):", new_conversation(), *controls(10), session="c"))[-1]
        conv = first[1]
        reply = "".join(p for p, _ in conv["turns"][0]["replies"]["dart"]["pieces"])
        assert reply and reply == first[-1]["methods"]["dart"]["text"]
        conv["turns"].append({"user": "and <sub>?", "replies": {}})
        ids = encode(arena, conv["turns"], "dart", chat=True)
        text = tok.decode(ids)
        assert text.startswith("<|user|>def add(a, b):\n<|assistant|>" + reply + "\n<|user|>and <sub>?")
        assert text.endswith("<|assistant|>")
        conv["turns"].pop()
        second = list(ui.run("and <sub>?", conv, *controls(10), session="c"))[-1]
        assert len(second[1]["turns"]) == 2
        for column in second[LANES]:
            assert column.count('class="msg msg-user"') == 2 and "and &lt;sub&gt;?" in column
    finally:
        tok.chat_template = saved


def test_stop_from_another_thread_ends_the_race_with_the_stopped_state(arena: Any) -> None:
    ui = ui_for(arena)
    outputs: list[tuple] = []
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
    assert "Stopped" in answer[STATUS] and "Stopped" in outputs[-1][STATUS]
    result = answer[-1]
    assert all(f["status"] in ("stopped", "done") for f in result["methods"].values())
    assert result["methods"]["ar"]["status"] == "stopped" and result["methods"]["ar"]["tokens"] < 800
    assert all("state-stopped" in column or "token limit" in column for column in answer[LANES])
    assert ui.stop("u")[STATUS] is not None  # a second Stop is harmless


def test_a_closed_event_closes_the_race(arena: Any) -> None:
    ui = ui_for(arena)
    gen = ui.run(held_out_prompt(2), new_conversation(), *controls(800), session="v")
    for _ in range(3):
        next(gen)
    gen.close()  # Gradio's cancel / disconnect
    live = ui.active["v"]
    assert live.closed.is_set() and live.race.stopped and not live.race._gens
    cleared = ui.clear("v")
    assert "v" not in ui.active and cleared[1] == new_conversation()


@pytest.mark.parametrize(("prompt", "index", "value", "message"), [
    ("def f():\ud800", None, None, "not valid Unicode (a lone surrogate, U+D800, at character 8)"),
    (42, None, None, "The prompt must be text, got int"),
    ("x = 1", 0, "hot", "Temperature: expected a number, got 'hot'"),
    ("x = 1", 1, None, "Top-p: expected a number, got None"),
    ("x = 1", 3, float("nan"), "Max new tokens: expected a finite number, got nan"),
    ("x = 1", 4, float("inf"), "DART tree size: expected a finite number, got inf"),
    ("x = 1", 7, True, "EAGLE-3 total: expected a number, got True"),
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
    assert html.escape(message) in out[0][STATUS] and "banner-warn" in out[0][STATUS]
    assert conv["turns"] == []
