"""Whose memory a race draws on: the racers that remember across generations (suffix decoding's earlier answers,
a searching drafter's N-gram memory) keep one memory per owner — a visitor of the page, or everyone when the host
shares it (``--shared-memory``) — so a race never feeds another visitor's memory unless the host opts in (an
answer can carry a visitor's words). Owners are kept least recently used first, at most ``max_owners``; a race
with no owner (the warm-up, a command line's single race) gets fresh memories that nobody keeps."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

MAX_OWNERS = 100  # as many as the visitors the page keeps by default (dart_arena.ui.MAX_SESSIONS)
SHARED = "shared"  # the owner of every race when the host shares the memory


class RacerMemories:
    """The memories of an arena's racers that remember, per owner (module docstring)."""

    def __init__(self, arena: Any, max_owners: int = MAX_OWNERS) -> None:
        if max_owners < 1:
            raise ValueError(f"max_owners must be at least 1, got {max_owners}")
        self.arena = arena
        self.max_owners = max_owners
        self._owners: OrderedDict[str, dict[str, Any]] = OrderedDict()

    def for_race(self, owner: str | None, methods: Sequence[str]) -> dict[str, Any]:
        """The memory each racer of ``methods`` that remembers draws on and feeds in a race of ``owner``'s
        (None: fresh ones, kept by nobody); the least recently used owner beyond ``max_owners`` is forgotten."""
        remembering = [m for m in methods if self.arena.remembers(m)]
        if owner is None:
            return {m: self.arena.new_memory(m) for m in remembering}
        held = self._owners.pop(owner, {})
        self._owners[owner] = held
        while len(self._owners) > self.max_owners:
            self._owners.popitem(last=False)
        for m in remembering:
            if m not in held:
                held[m] = self.arena.new_memory(m)
        return {m: held[m] for m in remembering}

    @property
    def owners(self) -> int:
        return len(self._owners)
