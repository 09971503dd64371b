"""The model's own process (``dart_arena/model_process.py``, driven by ``dart_arena/model_client.py``) on the toy bundle
assets/tiny: races run there give the same tokens as in this process, stop and cancel end them between two steps, a
killed engine ends its race with an error and is restarted (within a budget of restarts, then every race reports it),
and a load failure is a message, not a hang."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers_app import BUNDLE, held_out_prompt

from dart_arena.model_client import EngineError, LocalEngine, ProcessEngine
from dart_core.engine.timing import threads_leaving_a_core
from dart_core.race import RaceSettings
from dart_core.racers.registry import model_free_racers, racer

if not (BUNDLE / "target" / "config.json").is_file():
    pytest.skip("the embedded bundle assets/tiny is missing", allow_module_level=True)

# the model-free racers off: these tests are about the engine process, and every race here runs each loaded racer;
# float32, where every racer's greedy text is plain decoding's token for token (bf16's near-ties may flip); fixed
# trees (the budget off), so that a race there and a race here verify the same trees step for step (the budget
# sizes them by each process's timings)
LOAD = dict(base=str(BUNDLE / "target"), dart=str(BUNDLE / "dart"), eagle3=str(BUNDLE / "eagle3"),
            ngram=str(BUNDLE / "ngram" / "small.ngram"), device="cpu", dtype="float32", progress=False,
            budget="off", **{r.dest: False for r in model_free_racers()})
TREES = {m: racer(m).default_settings("cpu", "off") for m in ("dart", "eagle3")}


@pytest.fixture(scope="module")
def engine() -> Iterator[ProcessEngine]:
    e = ProcessEngine(LOAD)
    yield e
    e.close()


def prompts(engine: Any, i: int) -> dict[str, list[int]]:
    ids = engine.tokenizer(held_out_prompt(i), add_special_tokens=False)["input_ids"]
    return dict.fromkeys(engine.info.methods, ids)


def test_races_in_the_engine_process_equal_races_here(engine: ProcessEngine) -> None:
    from dart_core.arena import load_arena

    assert engine.pid != os.getpid()
    assert engine.info.methods == ["dart", "eagle3", "ar"] and engine.info.has_store
    assert engine.info.device == "cpu" and engine.info.max_context == 1024
    assert engine.info.threads == threads_leaving_a_core()  # on a CPU: a core left to the server and the page
    settings = RaceSettings(max_new_tokens=24, racer_settings=TREES)
    remote = engine.race(prompts(engine, 0), settings)
    order = [lane.method for lane, _ in remote.run()]
    assert order[:3] == ["dart", "eagle3", "ar"]  # prefills, then one step each per round
    local_arena = load_arena(**LOAD)
    local = LocalEngine(local_arena).race(prompts(engine, 0), settings)
    for _ in local.run():
        pass
    for m in engine.info.methods:
        assert remote.lanes[m].status == "done"
        assert remote.lanes[m].tokens == local.lanes[m].tokens == local.lanes["ar"].tokens, m
        assert [s.accepted for s in remote.lanes[m].steps] == [s.accepted for s in local.lanes[m].steps], m
    assert remote.greedy_matches() == {"dart": True, "eagle3": True}
    assert remote.summary()["dart"]["tau"] > 1.0


def test_stop_and_cancel_end_the_race_between_steps(engine: ProcessEngine) -> None:
    settings = RaceSettings(max_new_tokens=600, racer_settings=TREES)
    race = engine.race(prompts(engine, 1), settings)
    for seen, _ in enumerate(race.run(), 1):
        if seen == 6:
            threading.Thread(target=race.stop).start()  # Stop pressed: another thread
    assert race.stopped and all(lane.status == "stopped" for lane in race.lanes.values())
    assert max(len(lane.tokens) for lane in race.lanes.values()) < 100

    cancelled = engine.race(prompts(engine, 2), settings)
    it = cancelled.run()
    for _ in range(4):
        next(it)
    it.close()  # a closed browser tab: returns once the engine has ended the race
    assert cancelled.finished and cancelled.stopped
    steps = sum(len(lane.steps) for lane in cancelled.lanes.values())
    assert steps <= 5  # at most the step that was under way

    after = engine.race(prompts(engine, 3), RaceSettings(max_new_tokens=16, racer_settings=TREES))
    for _ in after.run():
        pass
    assert {lane.status for lane in after.lanes.values()} == {"done"}
    assert after.greedy_matches() == {"dart": True, "eagle3": True}


def test_a_stop_before_the_race_starts_runs_nothing(engine: ProcessEngine) -> None:
    race = engine.race(prompts(engine, 4), RaceSettings(max_new_tokens=16, racer_settings=TREES))
    race.stop()
    assert list(race.run()) == []
    assert all(lane.status == "stopped" and not lane.steps for lane in race.lanes.values())


def test_the_time_limit_cuts_a_race_in_the_engine(engine: ProcessEngine) -> None:
    race = engine.race(prompts(engine, 5), RaceSettings(max_new_tokens=900, racer_settings=TREES, time_limit_s=0.3))
    started = time.perf_counter()
    for _ in race.run():
        pass
    assert race.limit == "time" and race.stopped
    assert time.perf_counter() - started < 10


def test_a_killed_engine_without_restarts_left_is_an_error_for_the_race_and_every_later_one() -> None:
    engine = ProcessEngine(LOAD, max_restarts=0)
    try:
        race = engine.race(prompts(engine, 0), RaceSettings(max_new_tokens=900, racer_settings=TREES))
        it = race.run()
        next(it)
        os.kill(engine.pid, signal.SIGKILL)
        for _ in it:
            pass
        assert race.failed == ["dart", "eagle3", "ar"]
        assert "model process ended unexpectedly" in race.lanes["ar"].error
        later = engine.race(prompts(engine, 1), RaceSettings(max_new_tokens=8, racer_settings=TREES))
        assert list(later.run()) == [] and later.failed == ["dart", "eagle3", "ar"]
        assert "restart the app" in later.lanes["dart"].error
        assert engine.health() == (False, {"engine": "failed", "restarts": 0, "pid": engine.pid,
                                           "last_exit": "exit code -9, killed", "error": engine.dead})
    finally:
        engine.close()


def test_a_killed_engine_is_restarted_and_the_next_race_succeeds() -> None:
    """The model process killed mid-race: health says so at once (not serving, ``down``: a host reads only the
    status code); that race ends with an error that says a new one is starting, and health is not serving while
    it loads; the next race waits for it and runs; a second kill restarts it again; past ``max_restarts`` the
    engine gives up."""
    engine = ProcessEngine(LOAD, max_restarts=2)
    try:
        assert engine.health()[0] and engine.health()[1]["engine"] == "ready"
        for round_ in (1, 2):
            first_pid = engine.pid
            race = engine.race(prompts(engine, 0), RaceSettings(max_new_tokens=900, racer_settings=TREES))
            it = race.run()
            next(it)
            os.kill(first_pid, signal.SIGKILL)
            healthy, details = engine.health()  # at once: before the reader thread has noticed
            for _ in it:  # drained before any assertion: a race left pending would wait for its end forever
                pass
            assert not healthy and details["engine"] == "down" and details["pid"] == first_pid, details
            assert "kill" in details["last_exit"], details
            assert race.failed == ["dart", "eagle3", "ar"]
            assert "a new one is starting" in race.lanes["ar"].error, race.lanes["ar"].error
            healthy, details = engine.health()  # a new process loads, after a back-off of a second or more
            assert not healthy and details["engine"] == "restarting", details
            assert details["last_exit"] == "exit code -9, killed", details
            later = engine.race(prompts(engine, 1), RaceSettings(max_new_tokens=8, racer_settings=TREES))
            updates = list(later.run(idle_s=0.2))  # waits (None items) while the new process loads
            assert {lane.status for lane in later.lanes.values()} == {"done"}, later.lanes
            assert later.greedy_matches() == {"dart": True, "eagle3": True}
            assert None in updates and engine.pid != first_pid and engine.restarts == round_
        os.kill(engine.pid, signal.SIGKILL)  # a third death within the window: over max_restarts=2
        assert engine.health()[1]["engine"] == "down"  # at once; failed once the reader has counted it
        deadline = time.monotonic() + 30
        while engine.health()[1]["engine"] != "failed":
            assert time.monotonic() < deadline, engine.health()
            time.sleep(0.1)
        healthy, details = engine.health()
        assert not healthy and "gave up" in details["error"] and "restart the app" in details["error"]
        refused = engine.race(prompts(engine, 2), RaceSettings(max_new_tokens=8, racer_settings=TREES))
        assert list(refused.run()) == [] and "gave up" in refused.lanes["ar"].error
    finally:
        engine.close()


def test_a_stop_reaches_the_engine_while_it_is_busy(engine: ProcessEngine) -> None:
    """The engine process reads the server's messages on a thread of its own (the race's stop flag is set at
    once, which a long prefill checks between its chunks): a stop sent right after the race starts, before any
    step came back, ends it within a step per racer; the next race runs normally."""
    ids = engine.tokenizer("".join(held_out_prompt(i) for i in range(40)), add_special_tokens=False)["input_ids"]
    race = engine.race(dict.fromkeys(engine.info.methods, ids[:1000]),
                       RaceSettings(max_new_tokens=500, racer_settings=TREES))
    it = race.run(idle_s=0.001)
    first = next(it)  # the race is sent: None (nothing back yet) or the first prefill's step
    race.stop()
    rest = [item for item in it if item is not None]
    assert race.stopped and len(rest) + (first is not None) <= len(engine.info.methods), rest
    after = engine.race(prompts(engine, 3), RaceSettings(max_new_tokens=8, racer_settings=TREES))
    for _ in after.run():
        pass
    assert {lane.status for lane in after.lanes.values()} == {"done"}


def test_threads_are_the_hosts_choice() -> None:
    engine = ProcessEngine(LOAD, threads=2)
    try:
        assert engine.info.threads == 2
    finally:
        engine.close()


def test_a_load_failure_is_a_message(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model"
    with pytest.raises(EngineError, match="no-such-model") as e:
        ProcessEngine({**LOAD, "base": str(missing)})
    assert e.value.known and "\n" not in str(e.value)  # one line: the message suffices
    assert "Traceback" in e.value.details  # kept for --debug, never shown without it


def test_unknown_methods_are_refused_before_the_engine_sees_them(engine: ProcessEngine) -> None:
    with pytest.raises(ValueError, match="not loaded"):
        engine.race(prompts(engine, 0), RaceSettings(), methods=["dflash"])
