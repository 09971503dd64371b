"""What the server keeps per visitor, on a live Gradio server in this process (so its state can be looked at),
on the toy bundle assets/tiny, driven with ``gradio_client``: after races from more sessions than its cap, Gradio
keeps at most that many sessions and no race record (every step, its draft trees) outlives its race; a
conversation goes after its time to live; a handler that raises still answers API callers with a message."""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from typing import Any

import pytest
from helpers_app import BUNDLE, free_port, held_out_prompt

import dart_arena.ui
from dart_arena.live import LiveRace
from dart_arena.model_client import LocalEngine
from dart_arena.ui import AppConfig, ArenaUI
from dart_arena.web_server import start_web_server
from dart_core.racers.registry import model_free_racers

gradio_client = pytest.importorskip("gradio_client")

if not (BUNDLE / "target" / "config.json").is_file():
    pytest.skip("the embedded bundle assets/tiny is missing", allow_module_level=True)

CAP = 4
TTL_S = 2.0
GREEDY = (0.0, 1.0, 0, 4, 16, 21, 6, 4)
STATUS = 1  # the status banner among the outputs a client sees


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[ArenaUI, Any, str]]:
    from dart_core.arena import load_arena

    # the model-free racers off: the races here pass DART's and EAGLE-3's controls
    arena = load_arena(BUNDLE / "target", dart=BUNDLE / "dart", eagle3=BUNDLE / "eagle3",
                       ngram=BUNDLE / "ngram" / "small.ngram", device="cpu", progress=False,
                       **{r.dest: False for r in model_free_racers()})
    ui = ArenaUI(LocalEngine(arena), AppConfig(chat=False, max_new_tokens=4, max_sessions=CAP, session_ttl_s=TTL_S))
    demo = ui.build()
    port = free_port()
    start_web_server(demo, port=port, prevent_thread_lock=True, quiet=True, max_sessions=CAP)
    try:
        yield ui, demo, f"http://127.0.0.1:{port}"
    finally:
        demo.close()


def client(url: str) -> Any:
    return gradio_client.Client(url, verbose=False, download_files=False)


def test_sessions_are_capped_and_no_race_outlives_its_keep_time(served: tuple[ArenaUI, Any, str],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    ui, demo, url = served
    monkeypatch.setattr(dart_arena.ui, "ENDED_KEEP_S", 0.0)  # forget an ended race at the next event
    visitors = []
    for i in range(3 * CAP):  # each a new visitor (session)
        c = client(url)
        out = c.predict(held_out_prompt(i % 10), *GREEDY, api_name="/race")
        assert out[-1]["greedy_matches_ar"] == {"dart": True, "eagle3": True}
        visitors.append(c)
    sessions = demo.state_holder.session_data
    assert len(sessions) <= CAP, f"Gradio keeps {len(sessions)} sessions, over the cap of {CAP}"
    assert visitors[-1].session_hash in sessions and visitors[0].session_hash not in sessions
    assert list(ui.active) == [visitors[-1].session_hash]  # only the last race, ended moments ago
    gc.collect()
    alive = [o for o in gc.get_objects() if type(o) is LiveRace]
    assert len(alive) == 1, f"{len(alive)} race records are still held after their races ended"
    for c in visitors:
        c.close()


def test_a_conversation_is_dropped_after_its_time_to_live(served: tuple[ArenaUI, Any, str]) -> None:
    _, demo, url = served
    c = client(url)  # kept open: Gradio keeps a closed tab's state for an hour whatever the time to live
    c.predict(held_out_prompt(1), *GREEDY, api_name="/race")
    state = demo.state_holder.session_data[c.session_hash].state_data
    assert state and all(isinstance(v, dict) and set(v) == {"turns", "summary", "matches"} for v in state.values())
    deadline = time.monotonic() + TTL_S + 10
    while state and time.monotonic() < deadline:  # Gradio's sweep runs every second
        time.sleep(0.25)
    assert not state, "the conversation outlived its time to live"
    out = c.predict("", *GREEDY, api_name="/regenerate")  # the session goes on with a new, empty conversation
    assert "Nothing to regenerate" in out[STATUS]
    c.close()


@pytest.mark.parametrize("api_name", ["/race", "/regenerate", "/stop", "/clear"])
def test_a_handler_that_raises_still_answers_with_a_message(served: tuple[ArenaUI, Any, str], api_name: str,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    ui, _, url = served

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("boom")

    for name in ("run", "stop", "clear"):
        monkeypatch.setattr(ui, name, broken)
    args = (held_out_prompt(0), *GREEDY) if api_name in ("/race", "/regenerate") else ()
    out = client(url).predict(*args, api_name=api_name)  # no AppError "error: null"
    assert "Something went wrong on the server" in out[STATUS] and "RuntimeError: boom" in out[STATUS]


def test_the_cli_defaults_are_the_pages() -> None:
    """``--max-sessions`` / ``--session-ttl`` default to dart_arena.ui's values (the parser must not import Gradio)."""
    from dart_arena.__main__ import build_parser

    args = build_parser().parse_args([])
    assert (args.max_sessions, args.session_ttl) == (dart_arena.ui.MAX_SESSIONS, dart_arena.ui.SESSION_TTL_S)
