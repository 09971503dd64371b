"""A chat turn cut short (Stop, a cancelled request, a racer failing mid-turn) must leave every racer's conversation
equal, so the next race in the same chat is like for like (issue 65: each racer's partial reply used to stay in its
own conversation, and the next greedy race said "OUTPUT DIFFERS FROM AR" on a correct engine). In process on the toy
bundle with a chat template, then through the page's HTTP API on a chat-mode server of the toy."""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers_app import BUNDLE, Server, held_out_prompt, running_app

from dart_arena.model_client import LocalEngine
from dart_arena.page import encode_all, new_conversation
from dart_arena.ui import AppConfig, ArenaUI
from dart_core import BASELINE
from dart_core.racers.registry import model_free_racers

if not (BUNDLE / "target" / "config.json").is_file():
    pytest.skip("the embedded bundle assets/tiny is missing", allow_module_level=True)

CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")
LONG = 400  # new tokens of the race that is cut short: it runs for seconds on the toy
SHORT = 24
NEXT = "What is 2+2?"


def controls(max_new_tokens: int) -> tuple:
    """Greedy sampling, the token budget, DART's and EAGLE-3's tree sliders (``ArenaUI.control_labels``)."""
    return (0.0, 1.0, 0, max_new_tokens, 16, 21, 6, 4)


def reply_text(turn: dict[str, Any], method: str) -> str:
    return "".join(p for p, _ in turn["replies"][method]["pieces"])


@pytest.fixture(scope="module")
def arena() -> Iterator[Any]:
    from dart_core.arena import load_arena

    arena = load_arena(BUNDLE / "target", dart=BUNDLE / "dart", eagle3=BUNDLE / "eagle3",
                       ngram=BUNDLE / "ngram" / "small.ngram", device="cpu", progress=False,
                       **{r.dest: False for r in model_free_racers()})
    saved = arena.tokenizer.chat_template
    arena.tokenizer.chat_template = CHAT_TEMPLATE
    yield arena
    arena.tokenizer.chat_template = saved


def chat_ui(arena: Any) -> ArenaUI:
    return ArenaUI(LocalEngine(arena), AppConfig(chat=True, update_every=0.0))


def stopped_turn(ui: ArenaUI, session: str) -> Any:
    """A long first turn, stopped from another thread (as the Stop button's handler does) once DART is ahead of
    AR: the page's answer to Stop."""
    outputs: list[Any] = []
    ahead = threading.Event()

    def consume() -> None:  # Gradio's worker thread, advancing the event's generator
        for out in ui.run(held_out_prompt(1), new_conversation(), *controls(LONG), session=session):
            outputs.append(out)
            live = ui.active.get(session)
            lanes = live.race.lanes if live is not None else {}
            if lanes and len(lanes["dart"].tokens) > len(lanes[BASELINE].tokens) + 4:
                ahead.set()

    worker = threading.Thread(target=consume)
    worker.start()
    assert ahead.wait(120), "DART never got ahead of AR"
    answer = ui.stop(session)
    worker.join(60)
    assert not worker.is_alive() and "Stopped" in answer.status
    return answer


def assert_like_for_like(ui: ArenaUI, conv: dict[str, Any]) -> None:
    """The next prompt encodes to the same ids for every racer, and its greedy race says identical to AR."""
    ids = encode_all(ui.tokenizer, [*conv["turns"], {"user": NEXT, "replies": {}}], ui.methods, chat=True)
    assert len({tuple(v) for v in ids.values()}) == 1, "the racers' next prompts differ"
    final = list(ui.run(NEXT, conv, *controls(SHORT), session="next"))[-1]
    assert final.result["greedy_matches_ar"] == {"dart": True, "eagle3": True}, final.status
    assert "identical to AR" in final.status and "DIFFERS" not in final.status


def test_a_stopped_turn_gives_every_racer_the_same_next_prompt(arena: Any) -> None:
    """Stopped with DART ahead of AR: each column still shows its own partial reply, the later turns continue
    from AR's for every racer (the page says so in the other columns), and Regenerate on them is like for like."""
    ui = chat_ui(arena)
    answer = stopped_turn(ui, "s")
    conv = answer.conv
    turn = conv["turns"][0]
    assert len(reply_text(turn, "dart")) > len(reply_text(turn, BASELINE))  # the page shows what each wrote
    assert reply_text(turn, "dart") == answer.result["methods"]["dart"]["text"]
    assert_like_for_like(ui, conv)
    assert "continues from AR" in answer.lanes["dart"] and "continues from AR" not in answer.lanes[BASELINE]
    second = list(ui.run(NEXT, conv, *controls(SHORT), session="s"))[-1]
    again = list(ui.run("", second.conv, *controls(SHORT), regenerate=True, session="s"))[-1]
    assert len(again.conv["turns"]) == 2 and again.result["greedy_matches_ar"] == {"dart": True, "eagle3": True}


def test_a_cancelled_turn_gives_every_racer_the_same_next_prompt(arena: Any) -> None:
    """A request cancelled mid-stream (Gradio closes the event's generator, e.g. a closed tab): the conversation
    the session keeps is the last update's, and the next race on it is like for like."""
    ui = chat_ui(arena)
    gen = ui.run(held_out_prompt(2), new_conversation(), *controls(LONG), session="c")
    last = None
    for out in gen:
        last = out
        lanes = ui.active["c"].race.lanes
        if len(lanes["dart"].tokens) > len(lanes[BASELINE].tokens) + 4:
            break
    gen.close()
    assert last is not None and ui.active["c"].closed.is_set()
    assert_like_for_like(ui, last.conv)


def test_a_racer_failing_mid_turn_leaves_the_others_a_shared_conversation(arena: Any,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """EAGLE-3 fails after a few drafts: its column keeps its partial reply and the error, and the next turn (the
    drafter mended) is like for like."""
    drafter = arena.drafters["eagle3"]
    propose, calls = drafter.propose, []

    def failing(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) > 3:
            raise RuntimeError("drafter exploded")
        return propose(*args, **kwargs)

    ui = chat_ui(arena)
    with monkeypatch.context() as patch:
        patch.setattr(drafter, "propose", failing)
        first = list(ui.run(held_out_prompt(3), new_conversation(), *controls(SHORT), session="f"))[-1]
    methods = first.result["methods"]
    assert methods["eagle3"]["status"] == "error" and methods["ar"]["status"] == "done"
    assert reply_text(first.conv["turns"][0], "eagle3") != reply_text(first.conv["turns"][0], BASELINE)
    assert_like_for_like(ui, first.conv)


# ------------------------------------------------------------------------------------------- the page's HTTP API
gradio_client = pytest.importorskip("gradio_client")
STATUS = 1  # the client's outputs: prompt, status banner, columns… (the session state is left out)


def chat_target(root: Path) -> Path:
    """The toy's target with a chat template in its tokenizer config: served with ``--base-model-name-or-path``,
    the page chats (the template's mode) on the toy's fast model."""
    target = root / "target"
    shutil.copytree(BUNDLE / "target", target)
    config = target / "tokenizer_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "chat_template": CHAT_TEMPLATE}))
    return target


@pytest.fixture(scope="module")
def chat_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("chat")
    with running_app(root, "--base-model-name-or-path", str(chat_target(root)),
                     "--dart-model-name-or-path", str(BUNDLE / "dart"), "--compare-eagle3",
                     "--eagle3-model-name-or-path", str(BUNDLE / "eagle3"),
                     "--ngram-model-name-or-path", str(BUNDLE / "ngram" / "small.ngram")) as server:
        yield server


def client(server: Server) -> Any:
    return gradio_client.Client(server.url, verbose=False, download_files=False)


def racing(job: Any, timeout: float = 60.0) -> None:
    """Wait until ``job``'s race streams."""
    deadline = time.monotonic() + timeout
    while "Racing" not in str((job.outputs() or [[None] * 3])[-1][STATUS]):
        assert time.monotonic() < deadline and not job.done(), "the race never started streaming"
        time.sleep(0.05)
    time.sleep(1.0)  # a few steps more: DART is ahead of AR


def assert_next_race_identical(c: Any) -> None:
    """The next race in this session prompts every racer with the same tokens, and its greedy check passes."""
    out = c.predict(NEXT, *controls(SHORT), api_name="/race")
    prompts = {m: f["prompt_tokens"] for m, f in out[-1]["methods"].items()}
    assert len(set(prompts.values())) == 1, f"the racers' prompts differ: {prompts}"
    assert out[-1]["greedy_matches_ar"] == {"dart": True, "eagle3": True}, out[STATUS]
    assert "identical to AR" in out[STATUS] and "DIFFERS" not in out[STATUS]


def test_through_the_api_a_stopped_race_leaves_the_next_one_like_for_like(chat_server: Server) -> None:
    c = client(chat_server)
    job = c.submit("Write a long story about a dragon.", *controls(LONG), api_name="/race")
    racing(job)
    stopped = c.predict(api_name="/stop")
    assert "Stopped" in stopped[STATUS], stopped[STATUS]
    methods = stopped[-1]["methods"]
    assert methods["dart"]["tokens"] != methods["ar"]["tokens"]  # the partial replies differ
    assert_next_race_identical(c)


def test_through_the_api_a_cancelled_race_leaves_the_next_one_like_for_like(chat_server: Server) -> None:
    c = client(chat_server)
    before = chat_server.log().count("race cancelled")
    job = c.submit("Write a long story about a dragon.", *controls(LONG), api_name="/race")
    racing(job)
    job.cancel()
    deadline = time.monotonic() + 30
    while chat_server.log().count("race cancelled") <= before:
        assert time.monotonic() < deadline, chat_server.log()
        time.sleep(0.2)
    assert_next_race_identical(c)
