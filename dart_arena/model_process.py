"""The model's own process: it loads the arena, then runs the races the server sends, one at a time, streaming
each :class:`~dart_core.engine.loop.Step` and the lanes' states back through a pipe (the messages:
:mod:`dart_arena.model_messages`). Started by :class:`~dart_arena.model_client.ProcessEngine` (``spawn``), it
imports none of the server's code: no work of the web server can stall a step here. No Gradio here.
"""

from __future__ import annotations

import queue
import signal
import threading
import traceback
from typing import Any

import torch

from dart_arena import setup_logging
from dart_arena.model_messages import engine_info
from dart_core.options import app_threads
from dart_core.race import Race, RacerMemories


def _states(race: Race) -> dict[str, tuple[str, str | None]]:
    return {m: (lane.status, lane.error) for m, lane in race.lanes.items()}


def run_model_process(conn: Any, load: dict[str, Any], threads: int | None = None) -> None:
    """The model process's life: load the arena, then run the races the server sends, one at a time, streaming each
    step back. A thread of its own reads the server's messages meanwhile, so a stop takes effect at once: after
    the step under way, or between two chunks of a long prompt's prefill (``Race.interrupted``)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the server decides, we follow
    from dart_core import close_progress_bars, default_device, load_arena
    from dart_core import describe_error as describe

    setup_logging()
    try:
        device = load.get("device") or default_device()
        kind = "cuda" if device == "auto" else torch.device(device).type
        arena = load_arena(**load, threads=app_threads(threads, kind))  # set first: the CPU kernels are timed at it
    except BaseException as e:  # the server reports it; nothing of ours may be left half-loaded
        # bars closed first: the server prints its error line after this message, never onto a bar's line
        close_progress_bars()
        message, known = describe(e)
        conn.send(("error", message, traceback.format_exc(), known))
        conn.close()
        return
    conn.send(("ready", engine_info(arena), arena.tokenizer))
    orders = _Orders(conn)
    memories = RacerMemories(arena)  # the racers' memories per visitor: they live as long as this process
    while True:
        msg = orders.next()
        if msg[0] == "quit":
            return
        if msg[0] != "race":
            continue  # a stop for a race that already ended
        _, race_id, methods, prompts, settings = msg
        try:
            race = Race(arena, prompts, methods=methods, settings=settings, memories=memories)
        except Exception as e:  # the server checked the methods; anything else is a bug to show, not a crash
            conn.send(("end", race_id, {m: ("error", f"{type(e).__name__}: {e}") for m in methods}, None))
            continue
        if not orders.start(race_id, race):  # stopped while it queued (a request cancelled in the queue)
            conn.send(("end", race_id, {m: ("stopped", None) for m in methods}, None))
            continue
        try:
            conn.send(("memory", race_id, {m: lane.memory_answers for m, lane in race.lanes.items()}))
            for lane, step in race.run():
                conn.send(("step", race_id, lane.method, step, _states(race)))
            conn.send(("end", race_id, _states(race), race.limit))
        except (EOFError, OSError, BrokenPipeError):
            return
        finally:
            orders.start(None, None)


class _Orders:
    """The engine's inbox: a thread reads the server's messages as they come, stops the running race at once on
    its stop (or on quit), and queues the rest for :meth:`next`."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self._queue: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._running: tuple[int, Race] | None = None
        self._stopped: set[int] = set()  # races stopped before they started
        threading.Thread(target=self._read, name="dart-arena-orders", daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                msg = self._conn.recv()
            except (EOFError, OSError):
                msg = ("quit",)  # the server is gone
            with self._lock:
                running = self._running
                if msg[0] == "stop":
                    self._stopped.add(msg[1])
                if running is not None and (msg[0] == "quit" or msg[:2] == ("stop", running[0])):
                    running[1].stop()
            self._queue.put(msg)
            if msg[0] == "quit":
                return

    def next(self) -> tuple[Any, ...]:
        return self._queue.get()

    def start(self, race_id: int | None, race: Race | None) -> bool:
        """Mark ``race`` as the running one (None: none); False if a stop for it came already."""
        with self._lock:
            self._running = (race_id, race) if race_id is not None and race is not None else None
            if race_id is not None:  # ids only grow: stops for earlier races are of no use any more
                self._stopped = {i for i in self._stopped if i >= race_id}
            if race_id is not None and race_id in self._stopped:
                self._stopped.discard(race_id)
                self._running = None
                return False
            return True
