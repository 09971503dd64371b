"""The server's side of the model: where the page's races run, with one interface for both places a model can be.

:class:`ProcessEngine` (what ``python -m dart_arena`` serves with) keeps the model in a process of its own
(:mod:`dart_arena.model_process`), so no work of the web server — building figures, HTML and JSON for the page,
Gradio's event loop — can stall a step and be billed to it. In one Python process the server and the model share
the GIL: a few milliseconds of page work per update made every step slower and compressed each speedup toward 1×.
It sends races and stops over a pipe (the messages: :mod:`dart_arena.model_messages`), restarts a process that
dies, and answers the host's health check; each race is a :class:`RemoteRace`, the
:class:`~dart_core.race.Scoreboard` the server keeps and renders as it likes while the steps arrive.
:class:`LocalEngine` runs races in this process instead (the tests, and racers registered at run time, which a
fresh process would not know). No Gradio here.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import multiprocessing.connection
import queue
import signal
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from itertools import count
from typing import Any

import torch

from dart_arena.model_messages import engine_info
from dart_arena.model_process import run_model_process
from dart_core import Step
from dart_core.race import Lane, Race, RacerMemories, RaceSettings, Scoreboard

log = logging.getLogger("dart_arena.app")


class EngineError(RuntimeError):
    """The engine could not load its models (``message`` says why, on one line) or has stopped. ``details``: the
    engine's traceback, shown only when asked for (``--debug``); ``known``: the message suffices (a file named
    and its problem), else the traceback may help."""

    def __init__(self, message: str, details: str = "", known: bool = True) -> None:
        super().__init__(message)
        self.details = details
        self.known = known


def exit_text(code: int | None) -> str:
    """How a model process ended, for the log and ``/healthz`` (a negative code: the signal that killed it)."""
    return f"exit code {code}{', killed' if code and code < 0 else ''}"


PF_EXITING = 0x4  # Linux's flag of a task whose exit is under way (/proc/PID/stat, field 9)


def ending(pid: int) -> str | None:
    """How a process that still looks alive is in fact ending, else None (also where ``/proc`` cannot tell): a
    SIGKILL pending, or its exit under way. A killed model process frees its memory for tens of milliseconds before
    it can be reaped; ``/proc`` shows the kill from the moment ``kill()`` returns."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        with open(f"/proc/{pid}/status", "rb") as f:
            status = f.read()
        fields = stat[stat.rindex(b")") + 2:].split()
        kill_bit = 1 << (signal.SIGKILL - 1)
        for line in status.splitlines():
            if line.startswith((b"SigPnd:", b"ShdPnd:")) and int(line.split()[1], 16) & kill_bit:
                return "killed (SIGKILL), exiting"
        if fields[0] in (b"Z", b"X") or int(fields[6]) & PF_EXITING:
            return "exiting"
    except (OSError, ValueError, IndexError):
        return None
    return None


def model_worker() -> ThreadPoolExecutor:
    """The one thread that touches the model in this process (see :class:`LocalEngine`)."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="dart-arena-model")


class LocalEngine:
    """Races on an arena loaded in this process. ``worker``: the single-thread executor that runs every step
    (one race step at a time on the shared model, whatever happens to cancelled events); best the one that
    loaded the model — on a CPU, PyTorch work split over two threads (two OpenMP teams) ran much slower
    (measured: docs/benchmarks.md#measurements-behind-design-choices)."""

    def __init__(self, arena: Any, worker: ThreadPoolExecutor | None = None) -> None:
        self.arena = arena
        self.worker = worker or model_worker()
        self.tokenizer = arena.tokenizer
        self.info = engine_info(arena)
        self.memories = RacerMemories(arena)

    def race(self, prompts: Mapping[str, Sequence[int]], settings: RaceSettings,
             methods: Sequence[str] | None = None) -> Race:
        return Race(self.arena, prompts, methods=methods or self.info.methods, settings=settings,
                    worker=self.worker, memories=self.memories)

    def health(self) -> tuple[bool, dict[str, Any]]:
        """Always serving: the model is in this process (see :meth:`ProcessEngine.health`)."""
        return True, {"engine": "ready", "restarts": 0, "pid": None, "last_exit": None, "error": None}

    def close(self) -> None:
        self.worker.shutdown(wait=True)


class RemoteRace(Scoreboard):
    """A race run by a :class:`ProcessEngine`: :meth:`run` sends it to the engine and yields its steps as they
    come; closing the iterator (a cancelled request) stops it and returns once the engine has ended it, so races
    never overlap on the model."""

    def __init__(self, engine: ProcessEngine, race_id: int, methods: Sequence[str],
                 prompts: Mapping[str, Sequence[int]], settings: RaceSettings) -> None:
        super().__init__(methods, prompts, settings)
        self._engine = engine
        self.dtype = getattr(torch, engine.info.dtype, torch.float32)
        self._id = race_id
        self._inbox: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self._started = False
        self._ended = threading.Event()
        self._stop_asked = False

    def run(self, idle_s: float | None = None) -> Iterator[tuple[Lane, Step] | None]:
        """The race's ``(lane, step)`` pairs as the engine sends them; with ``idle_s``, also ``None`` after every
        ``idle_s`` seconds without one (a long prefill, a new engine process loading): the caller's chance to
        show that it waits and, being between two items, to be closed (Gradio closes a disconnected visitor's
        generator only between two of its items)."""
        if self._stop_asked:
            self._finish({}, None)
            return
        while idle_s is not None and not self._engine.wait_ready(idle_s):
            yield None
        if self._stop_asked:
            self._finish({}, None)
            return
        self._started = True
        self._engine._send(("race", self._id, self.methods, self.prompts, self.settings), inbox=self._inbox)
        try:
            for lane in self.lanes.values():
                lane.status = "running"
            while True:
                try:
                    msg = self._inbox.get(timeout=idle_s)
                except queue.Empty:
                    yield None
                    continue
                if msg[0] == "memory":
                    for m, held in msg[1].items():
                        self.lanes[m].memory_answers = held
                elif msg[0] == "step":
                    _, method, step, states = msg
                    lane = self.lanes[method]
                    lane.add(step)
                    self._apply(states)
                    yield lane, step
                elif msg[0] == "end":
                    self._finish(msg[1], msg[2])
                    return
                else:  # "dead": the engine process is gone
                    self._die(msg[1])
                    return
        finally:
            if not self._ended.is_set():  # cancelled: wait until the engine has ended it
                self.stop()
                while True:
                    msg = self._inbox.get()
                    if msg[0] == "end":
                        self._finish(msg[1], msg[2])
                        break
                    if msg[0] == "dead":
                        self._die(msg[1])
                        break
                    if msg[0] == "step":
                        self.lanes[msg[1]].add(msg[2])  # a step that was under way

    def _apply(self, states: Mapping[str, tuple[str, str | None]]) -> None:
        for m, (status, error) in states.items():
            self.lanes[m].status, self.lanes[m].error = status, error

    def _finish(self, states: Mapping[str, tuple[str, str | None]], limit: str | None) -> None:
        self._apply(states)
        self.limit = limit
        for lane in self.lanes.values():
            if not lane.finished:
                lane.status = "stopped"
        self._engine._forget(self._id)
        self._ended.set()

    def _die(self, reason: str) -> None:
        for lane in self.lanes.values():
            if not lane.finished:
                lane.status, lane.error = "error", reason
        self._engine._forget(self._id)
        self._ended.set()

    def stop(self) -> None:
        """Ask the engine to stop this race after its current step (safe from any thread)."""
        self._stop_asked = True
        if self._started and not self._ended.is_set():
            self._engine._send(("stop", self._id))

    def close(self) -> None:
        self.stop()
        if not self._started:
            self._finish({}, None)


class ProcessEngine:
    """The arena loaded and raced in a child process (``spawn``: a clean interpreter, no forked threads).

    ``load`` holds :func:`~dart_core.arena.load_arena`'s arguments; ``threads``, PyTorch's CPU threads there
    (default on a CPU: one per core but one, :func:`~dart_core.options.app_threads`, so the server
    and a browser on the same machine never take a core the model's steps wait for). The constructor returns once the
    models are loaded (an :class:`EngineError` says why they are not); :meth:`race` then gives
    :class:`RemoteRace` objects.

    If the engine process dies (killed, out of memory), the races under way end with an error that says so and a
    new process is started, after a back-off (1 s, 2 s, 4 s, … at most 30 s); races asked for meanwhile wait for
    it. More than ``max_restarts`` deaths within ``restart_window_s`` (or a restart that cannot load) and the
    engine gives up: every later race gets an error that says to restart the app. :meth:`health` tells a host's
    health check whether a race can run now: not while the process is dead or a new one loads, nor once it gave
    up."""

    def __init__(self, load: Mapping[str, Any], *, threads: int | None = None, max_restarts: int = 3,
                 restart_window_s: float = 600.0) -> None:
        self._load, self._threads = dict(load), threads
        self.max_restarts, self.restart_window_s = int(max_restarts), float(restart_window_s)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # the state moved on (restarted, or gave up)
        self._inboxes: dict[int, queue.SimpleQueue[tuple[Any, ...]]] = {}
        self._ids = count(1)
        self.dead: str | None = None  # why the engine gave up for good (None: it serves, or is restarting)
        self.state = "starting"  # starting | ready | restarting | failed | closed (health adds down)
        self.restarts = 0  # processes started after the first
        self.last_exit: str | None = None  # how the last engine process ended unexpectedly
        self._deaths: deque[float] = deque()  # time.monotonic() of each unexpected end, within the window
        self._proc, self._conn = self._spawn()
        self.state = "ready"
        self._start_reader()

    def _spawn(self) -> tuple[Any, Any]:
        """Start an engine process and wait until it has loaded the models (an :class:`EngineError` if not)."""
        ctx = multiprocessing.get_context("spawn")
        conn, child = ctx.Pipe()
        proc = ctx.Process(target=run_model_process, args=(child, self._load, self._threads),
                           name="dart-arena-engine",
                           daemon=True)
        proc.start()
        child.close()
        try:
            msg = conn.recv()
        except EOFError:
            proc.join(5)
            raise EngineError(f"the model process exited (code {proc.exitcode}) before it had loaded the "
                              "models") from None
        if msg[0] == "error":
            proc.join(5)
            raise EngineError(msg[1], msg[2], msg[3])
        _, self.info, self.tokenizer = msg
        return proc, conn

    def _start_reader(self) -> None:
        self._reader = threading.Thread(target=self._read, args=(self._proc, self._conn),
                                        name="dart-arena-engine-reader", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int | None:
        return self._proc.pid

    def health(self) -> tuple[bool, dict[str, Any]]:
        """(serving, details) for a host's health check, which reads only the status code: serving only while
        the engine is ready and its model process alive (not ended, nor ending: :func:`ending`), asked here at
        once, for the reader thread notices a death a moment later and until then the state still says ready. A
        dead or dying process is ``"down"`` with how it ended; ``"restarting"`` (a new one loading) and
        ``"failed"`` (it gave up: restart the app) are not serving either, for no race can run meanwhile."""
        with self._lock:
            state, last_exit = self.state, self.last_exit
            if state == "ready":
                if not self._proc.is_alive():  # reaps it: under the lock, as the reader does
                    state, last_exit = "down", exit_text(self._proc.exitcode)
                elif (why := ending(self._proc.pid)) is not None:
                    state, last_exit = "down", why
            details = {"engine": state, "restarts": self.restarts, "pid": self._proc.pid,
                       "last_exit": last_exit, "error": self.dead}
            return state == "ready", details

    def race(self, prompts: Mapping[str, Sequence[int]], settings: RaceSettings,
             methods: Sequence[str] | None = None) -> RemoteRace:
        methods = list(methods or self.info.methods)
        for m in methods:
            if m not in self.info.methods:
                raise ValueError(f"method {m!r} is not loaded (have: {', '.join(self.info.methods)})")
        return RemoteRace(self, next(self._ids), methods, prompts, settings)

    def wait_ready(self, timeout: float | None) -> bool:
        """Wait up to ``timeout`` seconds while a new engine process loads; False if it is still loading."""
        with self._lock:
            return self._changed.wait_for(lambda: self.state != "restarting", timeout)

    def _send(self, msg: tuple[Any, ...], inbox: queue.SimpleQueue[tuple[Any, ...]] | None = None) -> None:
        with self._lock:
            if inbox is not None:
                # a race sent while a new process loads waits for it (one race at a time: nothing else could run)
                self._changed.wait_for(lambda: self.state != "restarting")
                if self.dead is not None or self.state == "closed":
                    inbox.put(("dead", self.dead or "the model process was closed"))
                    return
                self._inboxes[msg[1]] = inbox
            if self.state == "ready":
                # a dead process: the reader notices and tells every waiting race
                with contextlib.suppress(OSError, ValueError):
                    self._conn.send(msg)

    def _forget(self, race_id: int) -> None:
        with self._lock:
            self._inboxes.pop(race_id, None)

    def _read(self, proc: Any, conn: Any) -> None:
        """Dispatch the engine's messages to their races until the pipe closes; then, unless the server closed
        it, tell the waiting races and start a new engine process."""
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                break
            with self._lock:
                inbox = self._inboxes.get(msg[1])
            if inbox is not None:
                inbox.put(msg[0:1] + msg[2:])
        # the process's end waited for, and it reaped, under the lock: :meth:`health` reaps it too (two threads
        # reaping one child at once could lose its exit code)
        ended = multiprocessing.connection.wait([proc.sentinel], 5)
        with self._lock:
            if self.state == "closed":
                return
            if ended:
                proc.join()  # its exit is under way: reaped at once
            now = time.monotonic()
            self._deaths.append(now)
            while self._deaths and now - self._deaths[0] > self.restart_window_s:
                self._deaths.popleft()
            self.last_exit = exit_text(proc.exitcode)
            gave_up = len(self._deaths) > self.max_restarts
            reason = (f"the model process ended unexpectedly ({self.last_exit})"
                      + (f", {len(self._deaths)} times in {self.restart_window_s / 60:g} min: the server gave up "
                         "restarting it; restart the app" if gave_up else
                         "; a new one is starting: send again in a moment"))
            self.state = "failed" if gave_up else "restarting"
            if gave_up:
                self.dead = reason
            inboxes = list(self._inboxes.values())
            self._inboxes.clear()
            self._changed.notify_all()
        log.error("%s", reason)
        for inbox in inboxes:
            inbox.put(("dead", reason))
        if not gave_up:
            self._restart(len(self._deaths))

    def _restart(self, deaths: int) -> None:
        """Start a new engine process after a back-off; give up after ``max_restarts`` failed tries in a row."""
        tries = deaths
        while True:
            time.sleep(min(2.0 ** (tries - 1), 30.0))
            with self._lock:
                if self.state == "closed":
                    return
            try:
                proc, conn = self._spawn()
            except EngineError as e:
                tries += 1
                log.error("the new model process failed to load: %s", e)
                if tries > self.max_restarts:
                    with self._lock:
                        self.state = "failed"
                        self.dead = (f"the model process ended unexpectedly ({self.last_exit}) and a new one "
                                     f"failed to load ({e}); restart the app")
                        self._changed.notify_all()
                    return
                continue
            with self._lock:
                if self.state == "closed":
                    conn.send(("quit",))
                    proc.join(10)
                    return
                self._proc, self._conn = proc, conn
                self.restarts += 1
                self.state = "ready"
                self._changed.notify_all()
            log.info("the model process is back (restart %d, pid %s)", self.restarts, proc.pid)
            self._start_reader()
            return

    def close(self) -> None:
        """Ask the engine process to quit and wait for it (killed after 10 s)."""
        self._send(("quit",))
        with self._lock:
            self.state = "closed"
            self._changed.notify_all()
        self._proc.join(10)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(5)
        self._conn.close()


def warm_up(engine: LocalEngine | ProcessEngine, input_ids: Sequence[int], settings: RaceSettings,
            *, tokens: int = 8) -> None:
    """One short race, thrown away: the first forwards pay one-off costs (allocator, kernels, caches, the CPU
    thread team) that would otherwise be charged to whichever method goes first in the first real race."""
    s = replace(settings, max_new_tokens=min(tokens, settings.max_new_tokens), time_limit_s=None)
    for _ in engine.race(dict.fromkeys(engine.info.methods, input_ids), s).run():
        pass
