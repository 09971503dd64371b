"""The race: every loaded racer (DART, EAGLE-3, …, and plain AR decoding) on the same prompt and one shared target,
one step at a time.

The methods take turns — one target forward (one :class:`~dart_core.engine.loop.Step`) each per round — so they
run side by side on one device. Each method's clock adds up only its own steps' measured draft / tree-search /
verify milliseconds (synchronized on CUDA by the engine), never the other methods' turns nor the UI's work, so
τ, tokens/s and speedups are fair. No Gradio here: the app, the command lines and the tests drive :class:`Race`
alike.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Executor
from typing import Any

import torch

from dart_core.engine.loop import Interrupted, Step
from dart_core.race.memories import RacerMemories
from dart_core.race.scoreboard import Lane, RaceSettings, Scoreboard

log = logging.getLogger("dart_arena.race")


class Race(Scoreboard):
    """Run ``methods`` on one arena in this process, alternating step by step. Iterate :meth:`run` for
    ``(lane, step)`` pairs.

    ``input_ids`` is one prompt for all methods, or a mapping method → prompt (multi-turn chat, where each method
    continues its own conversation). ``worker``, a single-thread executor shared by every race on one model, runs
    every step: races then never interleave target forwards (a cancelled race's last step finishes before the
    next race's first), and all of PyTorch's CPU work stays on one thread. Steps issued from changing threads (as
    a web server's thread pool does) each spin up their own OpenMP team, which made CPU steps much slower
    (measured: docs/benchmarks.md#measurements-behind-design-choices). Without
    a worker, steps run on the iterating thread. ``settings.time_limit_s`` stops the race after that much wall
    time (``limit`` = "time"), checked after every step and between the chunks of a long prompt's prefill, where
    :meth:`stop` also takes effect (``dart_core.engine.target.PREFILL_CHUNK``): a limit or a Stop is overshot by one
    step or one prefill chunk at most. ``memories``: the keeper of the memories of the racers that remember
    (:class:`~dart_core.race.memories.RacerMemories`), asked for ``settings.memory_owner``'s; None: fresh
    memories for this race alone. Each lane's ``memory_answers`` says how many earlier answers its memory held.
    """

    def __init__(
        self,
        arena: Any,
        input_ids: Sequence[int] | Mapping[str, Sequence[int]],
        *,
        methods: Sequence[str] | None = None,
        settings: RaceSettings | None = None,
        worker: Executor | None = None,
        memories: RacerMemories | None = None,
    ) -> None:
        methods = list(methods) if methods is not None else list(arena.methods)
        for m in methods:
            arena.drafter(m)  # ValueError naming the loaded methods
        prompts = input_ids if isinstance(input_ids, Mapping) else dict.fromkeys(methods, input_ids)
        super().__init__(methods, prompts, settings)
        self.arena = arena
        self.dtype = getattr(arena.target, "dtype", torch.float32)
        self._worker = worker
        self._gens: dict[str, Iterator[Step]] = {}
        self._stop = threading.Event()
        self._deadline: float | None = None  # time.perf_counter() at which the time limit stops the race
        keeper = memories if memories is not None else RacerMemories(arena)
        self.memories = keeper.for_race(self.settings.memory_owner, methods)
        for m, memory in self.memories.items():
            self.lanes[m].memory_answers = int(memory.held_answers)

    # ----------------------------------------------------------------------------------------------- running
    def run(self, idle_s: float | None = None) -> Iterator[tuple[Lane, Step]]:
        """Round-robin over the unfinished methods, one step each, until all finish, :meth:`stop` or the time
        limit. (``idle_s``: as in ``dart_arena.model_client.RemoteRace.run``; the steps run here, so this never idles.)

        Closing this iterator (a cancelled request) closes every method's step generator."""
        s = self.settings
        device = self.arena.target.feature_device
        if s.time_limit_s is not None:
            self._deadline = time.perf_counter() + s.time_limit_s
        try:
            for m in self.methods:
                gen = torch.Generator(device=device).manual_seed(s.seed)
                self._gens[m] = self.arena.stream(
                    m, self.prompts[m], memory=self.memories.get(m), sampling=s.sampling,
                    max_new_tokens=s.max_new_tokens, max_length=s.max_length, generator=gen,
                    settings=s.racer_settings.get(m), interrupt=self.interrupted)
                self.lanes[m].status = "running"
            while not self._stop.is_set():
                active = [lane for lane in self.lanes.values() if lane.status == "running"]
                if not active:
                    break
                for lane in active:
                    if self._stop.is_set():
                        break
                    step = self._advance(lane)
                    if step is not None:
                        yield lane, step
                    self.interrupted()
        finally:
            self.close()

    def interrupted(self) -> bool:
        """Should the race stop now: :meth:`stop` was called, or the time limit has passed (then ``limit`` is
        "time")? Asked after every step and, from the worker, between a long prefill's chunks."""
        if not self._stop.is_set() and self._deadline is not None and time.perf_counter() > self._deadline:
            self.limit = "time"
            self._stop.set()
        return self._stop.is_set()

    def _advance(self, lane: Lane) -> Step | None:
        gen = self._gens[lane.method]
        try:
            step = self._call(next, gen)
        except StopIteration:
            lane.status = "done"
            return None
        except Interrupted:  # a Stop or the time limit, between two chunks of this method's prefill
            lane.status = "stopped"
            self._close(lane.method)
            return None
        except Exception as e:  # one method failing (e.g. out of memory) must not take the others down
            log.exception("%s failed", lane.label)
            lane.status, lane.error = "error", f"{type(e).__name__}: {e}"
            self._close(lane.method)
            return None
        lane.add(step)
        if step.stop_reason is not None:
            lane.status = "done"
            self._close(lane.method)
        return step

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(*args) if self._worker is None else self._worker.submit(fn, *args).result()

    def stop(self) -> None:
        """Ask the race to stop after the current step (safe from another thread)."""
        self._stop.set()

    def _close(self, method: str) -> None:
        gen = self._gens.pop(method, None)
        if gen is not None:
            self._call(gen.close)  # type: ignore[attr-defined]

    def close(self) -> None:
        """Close every step generator (their per-generation state is dropped); unfinished lanes become stopped."""
        self._stop.set()
        for m in list(self._gens):
            self._close(m)
        for lane in self.lanes.values():
            if not lane.finished:
                lane.status = "stopped"
