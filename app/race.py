"""The race: every loaded racer (DART, EAGLE-3, …, and plain AR decoding) on the same prompt and one shared target,
one step at a time.

The methods take turns — one target forward (one :class:`~dart_core.engine.loop.Step`) each per round — so they
run side by side on one device. Each method's clock adds up only its own steps' measured draft / tree-search /
verify milliseconds (synchronized on CUDA by the engine), never the other methods' turns nor the UI's work, so
τ, tokens/s and speedups are fair. No Gradio here: the UI, the tests and scripts drive :class:`Race` alike.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

import torch

from dart_core.engine.greedy_check import Verdict, compare
from dart_core.engine.loop import Interrupted, Step
from dart_core.engine.metrics import RunStats, summarize
from dart_core.engine.verify import SamplingConfig
from dart_core.racers.registry import BASELINE, label

log = logging.getLogger("dart_arena.app")
NO_STEPS = RunStats("", 0, 0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)  # a lane before its first step: zero counts, no rates

class PromptError(ValueError):
    """A problem with the user's input (empty, or longer than the context): shown to the user as is."""


@dataclass(frozen=True)
class RaceSettings:
    """Everything a race needs besides the prompt; the same for every method."""

    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    max_new_tokens: int = 256
    max_length: int | None = None
    trees: Mapping[str, Any] = field(default_factory=dict)  # racer key -> its settings (missing: its defaults)
    seed: int = 0
    time_limit_s: float | None = None  # the host's wall-time budget per race (None: none)


def context_limit(max_context: int, max_length: int | None) -> int:
    """Prompt + output may not exceed this: the target's context, or ``max_length`` when smaller."""
    return int(max_context) if max_length is None else min(int(max_length), int(max_context))


def check_prompt(ids: Sequence[int], limit: int, *, hint: str = "shorten it") -> None:
    """Raise :class:`PromptError` with a readable message for an empty prompt or one that leaves no room."""
    if not ids:
        raise PromptError("The prompt is empty: type something first.")
    if len(ids) >= limit:
        raise PromptError(f"The prompt is {len(ids):,} tokens long but the context holds {limit:,} tokens "
                          f"(prompt + answer), so there is no room to generate: {hint}.")


@dataclass
class Lane:
    """One method's progress in a race: its steps, tokens, own clock and state."""

    method: str
    steps: list[Step] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    own_ms: float = 0.0  # sum of this method's own step times
    status: str = "waiting"  # waiting | running | done | stopped | error
    error: str | None = None

    @property
    def label(self) -> str:
        return label(self.method)

    @property
    def finished(self) -> bool:
        return self.status in ("done", "stopped", "error")

    @property
    def stop_reason(self) -> str | None:
        return self.steps[-1].stop_reason if self.steps else None

    @property
    def last_tree_step(self) -> Step | None:
        """The latest step that verified a real draft tree (None for AR). Near the token limit the engine cuts
        trees down to the room left (often to depth 1 or the root alone), so a recent deeper tree is preferred."""
        trees = [s for s in reversed(self.steps) if s.tree is not None and s.tree.size > 1]
        return next((s for s in trees if int(s.tree.depths.max()) >= 2), trees[0] if trees else None)

    def stats(self) -> RunStats | None:
        """τ (tokens per verify forward), tokens/s over the own clock (prefill included, as in the benchmark)."""
        return summarize(self.steps) if self.steps else None

    def add(self, step: Step) -> None:
        self.steps.append(step)
        self.tokens.extend(step.tokens)
        self.own_ms += step.total_ms


class Scoreboard:
    """A race's lanes and results, whoever runs its steps: :class:`Race` on a model in this process, or the app's
    engine process (``app.engine``) whose steps arrive here. ``limit`` names the host's limit that cut it
    ("time"), if any."""

    def __init__(self, methods: Sequence[str], prompts: Mapping[str, Sequence[int]],
                 settings: RaceSettings | None = None) -> None:
        self.settings = settings or RaceSettings()
        self.methods = list(methods)
        self.prompts = {m: [int(t) for t in prompts[m]] for m in self.methods}
        self.lanes = {m: Lane(m) for m in self.methods}
        self.limit: str | None = None
        self.dtype: torch.dtype = torch.float32  # the target's: how wide a rounding tie may be (greedy_check)

    @property
    def finished(self) -> bool:
        """Every lane is over: done, stopped or failed."""
        return all(lane.finished for lane in self.lanes.values())

    @property
    def stopped(self) -> bool:
        """Some lane was cut short by :meth:`stop` / :meth:`close` or a limit (not by its own end)."""
        return any(lane.status == "stopped" for lane in self.lanes.values())

    @property
    def failed(self) -> list[str]:
        """The methods that ended with an error."""
        return [m for m, lane in self.lanes.items() if lane.status == "error"]

    def speedup(self, method: str) -> float | None:
        """tokens/s of ``method`` over AR's, both on their own clocks so far (None without AR figures)."""
        ar = self.lanes.get(BASELINE)
        mine = self.lanes[method].stats()
        return mine.speedup_over(ar.stats() if ar is not None else None) if mine is not None else None

    def greedy_verdicts(self) -> dict[str, Verdict] | None:
        """Greedy only, once every lane finished normally: each method's output against AR's — identical,
        identical up to a rounding tie of the target's best logits, or a mismatch (``greedy_check``)."""
        ar = self.lanes.get(BASELINE)
        if not self.settings.sampling.greedy or ar is None or ar.status != "done":
            return None
        if any(lane.status != "done" for lane in self.lanes.values()):
            return None
        ar_top = [t for s in ar.steps for t in s.top_logits]
        return {m: compare(ar.tokens, ar_top, lane.tokens, [t for s in lane.steps for t in s.top_logits], self.dtype)
                for m, lane in self.lanes.items() if m != BASELINE}

    def greedy_matches(self) -> dict[str, bool] | None:
        """Greedy only, once every lane finished normally: is each method's output AR's (up to a rounding tie)?"""
        verdicts = self.greedy_verdicts()
        return None if verdicts is None else {m: v.ok for m, v in verdicts.items()}

    def summary(self) -> dict[str, dict[str, Any]]:
        """Per method: tokens, τ, tokens/s, speedup vs AR, ms per step, status and the acceptance metrics
        (``RunStats.acceptance``: verify steps, draft tokens verified and accepted, …) — plain numbers."""
        out: dict[str, dict[str, Any]] = {}
        stats = {m: lane.stats() for m, lane in self.lanes.items()}  # each lane summarized once per call
        for m, lane in self.lanes.items():
            st = stats[m]
            out[m] = {
                "label": lane.label,
                "status": lane.status,
                "stop_reason": lane.stop_reason,
                "error": lane.error,
                "prompt_tokens": len(self.prompts[m]),
                "tokens": len(lane.tokens),
                "tau": st.tau if st else None,
                "tokens_per_s": st.tokens_per_s if st else None,
                "speedup_vs_ar": st.speedup_over(stats.get(BASELINE)) if st else None,
                "own_ms": lane.own_ms,
                "prefill_ms": st.prefill_ms if st else None,
                "draft_ms_per_step": st.draft_ms_per_step if st else None,
                "search_ms_per_step": st.search_ms_per_step if st else None,
                "verify_ms_per_step": st.verify_ms_per_step if st else None,
                **(st or NO_STEPS).acceptance(),
            }
        return out


class Race(Scoreboard):
    """Run ``methods`` on one arena in this process, alternating step by step. Iterate :meth:`run` for
    ``(lane, step)`` pairs.

    ``input_ids`` is one prompt for all methods, or a mapping method → prompt (multi-turn chat, where each method
    continues its own conversation). ``worker``, a single-thread executor shared by every race on one model, runs
    every step: races then never interleave target forwards (a cancelled race's last step finishes before the
    next race's first), and all of PyTorch's CPU work stays on one thread. Steps issued from changing threads (as
    a web server's thread pool does) each spin up their own OpenMP team, which made CPU steps 2-3× slower. Without
    a worker, steps run on the iterating thread. ``settings.time_limit_s`` stops the race after that much wall
    time (``limit`` = "time"), checked after every step and between the chunks of a long prompt's prefill, where
    :meth:`stop` also takes effect (``dart_core.engine.target.PREFILL_CHUNK``): a limit or a Stop is overshot by one
    step or one prefill chunk at most.
    """

    def __init__(
        self,
        arena: Any,
        input_ids: Sequence[int] | Mapping[str, Sequence[int]],
        *,
        methods: Sequence[str] | None = None,
        settings: RaceSettings | None = None,
        worker: Executor | None = None,
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

    # ----------------------------------------------------------------------------------------------- running
    def run(self, idle_s: float | None = None) -> Iterator[tuple[Lane, Step]]:
        """Round-robin over the unfinished methods, one step each, until all finish, :meth:`stop` or the time
        limit. (``idle_s``: as in ``app.engine.RemoteRace.run``; the steps run here, so this never idles.)

        Closing this iterator (a cancelled request) closes every method's step generator."""
        s = self.settings
        device = self.arena.target.feature_device
        if s.time_limit_s is not None:
            self._deadline = time.perf_counter() + s.time_limit_s
        try:
            for m in self.methods:
                gen = torch.Generator(device=device).manual_seed(s.seed)
                self._gens[m] = self.arena.stream(
                    m, self.prompts[m], sampling=s.sampling, max_new_tokens=s.max_new_tokens,
                    max_length=s.max_length, generator=gen, settings=s.trees.get(m), interrupt=self.interrupted)
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
