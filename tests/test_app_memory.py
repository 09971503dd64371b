"""The memory of the racers that remember (suffix decoding's earlier answers) on the page: one memory per visitor,
so a race never feeds another visitor's memory unless the host shares it (``--shared-memory``); each lane and the
run data say how many earlier answers it drew on; a race with no owner (the warm-up) keeps nothing."""

from __future__ import annotations

from typing import Any

import pytest
from helpers_app import BUNDLE

from dart_core.race import RacerMemories

SUFFIX = "suffix"


class FakeMemory:
    held_answers = 0


class FakeArena:
    """Two racers, one that remembers."""

    def remembers(self, method: str) -> bool:
        return method == SUFFIX

    def new_memory(self, method: str) -> FakeMemory:
        assert method == SUFFIX
        return FakeMemory()


def test_memories_are_kept_per_owner_and_the_least_recently_used_go() -> None:
    keeper = RacerMemories(FakeArena(), max_owners=2)
    a = keeper.for_race("a", [SUFFIX, "ar"])
    assert list(a) == [SUFFIX]  # only the racers that remember get one
    assert keeper.for_race("a", [SUFFIX])[SUFFIX] is a[SUFFIX]
    assert keeper.for_race("b", [SUFFIX])[SUFFIX] is not a[SUFFIX]
    assert keeper.for_race(None, [SUFFIX])[SUFFIX] is not keeper.for_race(None, [SUFFIX])[SUFFIX]
    assert keeper.owners == 2  # no owner: nothing kept
    keeper.for_race("a", [SUFFIX])  # a used last: b is the least recently used
    keeper.for_race("c", [SUFFIX])
    assert keeper.owners == 2 and keeper.for_race("a", [SUFFIX])[SUFFIX] is a[SUFFIX]
    with pytest.raises(ValueError, match="max_owners"):
        RacerMemories(FakeArena(), max_owners=0)


@pytest.fixture(scope="module")
def arena() -> Any:
    if not (BUNDLE / "target" / "config.json").is_file():
        pytest.skip("the embedded bundle assets/tiny is missing")
    from dart_core.arena import load_arena

    # fixed trees: the test compares τ of two races, which the tree budget would make depend on this machine's
    # timing (under load its cut can verify no draft at all)
    return load_arena(BUNDLE / "target", device="cpu", dtype="float32", progress=False, budget="off")


def race(ui: Any, session: str, prompt: str) -> dict[str, Any]:
    from dart_arena.page import new_conversation

    controls = [0.0, 1.0, 0, 12, *(getattr(ui.settings_defaults(r), k.name) for r, k in ui.settings_controls)]
    final = list(ui.run(prompt, new_conversation(), *controls, session=session, racers=[SUFFIX]))[-1]
    return final.result


@pytest.mark.parametrize("shared", [False, True], ids=["per-visitor", "shared"])
def test_a_race_feeds_its_visitors_memory_only_unless_the_host_shares_it(arena: Any, shared: bool) -> None:
    from dart_arena.model_client import LocalEngine
    from dart_arena.ui import AppConfig, ArenaUI

    assert arena.remembers(SUFFIX) and not arena.forgets(SUFFIX)  # its memory is the racer: it cannot go off
    with pytest.raises(ValueError, match="cannot race with its memory off"):
        arena.remembering(SUFFIX, forget=True)
    ui = ArenaUI(LocalEngine(arena), AppConfig(chat=False, update_every=0.0, shared_memory=shared))
    assert SUFFIX in ui.methods and SUFFIX not in ui.ticked_methods  # on the page, unticked at first
    prompt = "def add(a, b):\n    return a + b\n\n"
    first = race(ui, "visitor-a", prompt)
    assert first["methods"][SUFFIX]["memory_answers"] == 0 and first["methods"]["ar"]["memory_answers"] is None
    assert first["greedy_matches_ar"] == {SUFFIX: True}
    again = race(ui, "visitor-a", prompt)
    assert again["methods"][SUFFIX]["memory_answers"] == 1
    # its own earlier answer, the same as this one: drafted from at once, more accepted than cold
    assert again["methods"][SUFFIX]["tau"] > first["methods"][SUFFIX]["tau"]
    other = race(ui, "visitor-b", prompt)
    assert other["methods"][SUFFIX]["memory_answers"] == (2 if shared else 0)
    assert other["settings"]["memory"] == ("shared" if shared else "this visitor's")
    assert "visitor-b" not in str(other)  # the session id never reaches the run data
    # a request without a session (an API caller with none) draws on a fresh memory that nobody keeps
    if not shared:
        assert race(ui, "", prompt)["methods"][SUFFIX]["memory_answers"] == 0
        assert race(ui, "", prompt)["methods"][SUFFIX]["memory_answers"] == 0


def test_the_lane_header_shows_the_memory() -> None:
    from dart_arena.render import lane_header

    assert "3 earlier answers" in lane_header(SUFFIX, {"status": "done", "memory_answers": 3})
    assert "1 earlier answer<" in lane_header(SUFFIX, {"status": "done", "memory_answers": 1})
    assert "earlier answer" not in lane_header("ar", {"status": "done", "memory_answers": None})
