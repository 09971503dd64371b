"""One race as the page shows it (:class:`LiveRace`): the race the engine runs, each racer's decoded text and the
conversation turn it answers, turned into the page's updates while it streams, and its final banner, result and race-log
line. Apart from the page's layout and events (``dart_arena/ui.py``), which start it and keep it per session."""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dart_arena import render
from dart_arena.page import (
    KEEP,
    PLOTS,
    PageUpdate,
    dtype_name,
    json_line,
)
from dart_core import BASELINE
from dart_core.race import SHARED, RaceSettings

log = logging.getLogger("dart_arena.app")

# seconds without a step from the engine after which a race's stream sends a status update anyway: the visitor sees
# that it waits, and a closed stream is noticed (Gradio closes a generator only between two of its updates)
IDLE_S = 1.0



def sampling_text(sampling: Any) -> str | None:
    """A sampled race's settings in a few words ("T=0.7, top-p 0.9"), None for a greedy one."""
    if sampling.greedy:
        return None
    parts = [f"T={sampling.temperature:g}"]
    if sampling.top_p < 1.0:
        parts.append(f"top-p {sampling.top_p:g}")
    if sampling.top_k:
        parts.append(f"top-k {sampling.top_k}")
    return ", ".join(parts)

class LiveRace:
    """One race as the page shows it: the race (run by the engine), each method's decoded text, the conversation
    turn it answers; renders the page's outputs. ``closed`` is set once the race has ended on the engine."""

    def __init__(self, ui: Any, turns: list[dict[str, Any]], prompts: dict[str, list[int]],
                 settings: RaceSettings, *, notice: str | None = None, methods: list[str] | None = None) -> None:
        self.ui = ui
        self.settings = settings
        self.notice = notice  # a limit applied before the race (shown with every status)
        self.methods = list(methods or ui.methods)
        self.race = ui.engine.race(prompts, settings, self.methods)
        self.streams = {m: render.TextStream(ui.tokenizer) for m in self.methods}
        self.conv: dict[str, Any] = {"turns": turns, "summary": None, "matches": None}
        self.closed = threading.Event()
        self.ended_at: float | None = None  # time.monotonic() when it ended (ArenaUI forgets it ENDED_KEEP_S after)
        self.started = time.perf_counter()
        log.info("race: %d prompt tokens, %s, max %d new tokens", max(len(p) for p in prompts.values()),
                 "greedy" if settings.sampling.greedy else f"T={settings.sampling.temperature}",
                 settings.max_new_tokens)

    def updates(self) -> Iterator[PageUpdate]:
        """Step the race, yielding the page's outputs at most every ``update_every`` seconds and at the end. The
        live figures are redrawn one at a time, in turn, at most every ``plot_every`` seconds: each redraw is a
        short task for the browser, so a click (Stop) never waits behind all five."""
        # -inf: the first step always updates (perf_counter counts from an arbitrary point, near 0 after a boot)
        last, last_plot, completed = -math.inf, -math.inf, False
        turn = itertools.cycle(PLOTS)
        cfg = self.ui.config
        try:
            # chat: the message moves into the conversation; completion: the prompt stays for editing
            yield PageUpdate(prompt="" if cfg.chat else KEEP, conv=self.conv,
                             status=self.banner("Prefilling…", "info"),
                             lanes=self.ui.lanes_html(self.conv, methods=self.methods))
            for item in self.race.run(idle_s=IDLE_S):
                now = time.perf_counter()
                if item is None:  # nothing from the engine for IDLE_S: say what it waits for
                    yield PageUpdate(status=self.banner(self.waiting_message(now), "info"))
                    continue
                lane, step = item
                self.streams[lane.method].add_step(step.tokens, step.accepted)
                if now - last >= cfg.update_every:
                    figures: tuple[str, ...] = ()
                    if now - last_plot >= cfg.plot_every:
                        figures, last_plot = (next(turn),), now
                    last = now
                    yield self.outputs(final=False, figures=figures)
            completed = True
            yield self.outputs(final=True)
        finally:
            try:
                self.race.close()
            finally:
                self.ended_at = time.monotonic()
                self.closed.set()
            wall = time.perf_counter() - self.started
            log.info("race %s after %.1f s: %s", ("stopped" if self.race.stopped else "finished") if completed
                     else "cancelled", wall, {lane.label: len(lane.tokens) for lane in self.race.lanes.values()})
            if completed and cfg.race_log is not None:
                self.write_log(cfg.race_log, wall)

    def waiting_message(self, now: float) -> str:
        """The status while no step comes: a new model process loading, or a long prefill."""
        waited = f"{now - self.started:.0f} s"
        if getattr(self.ui.engine, "state", "ready") == "restarting":
            return (f"The model process ended unexpectedly and a new one is loading ({waited}); your race starts "
                    "as soon as it is ready.")
        if not any(lane.tokens for lane in self.race.lanes.values()):
            return f"Prefilling… ({waited}: a long prompt takes a while)"
        counts = " · ".join(f"{lane.label} {len(lane.tokens)}" for lane in self.race.lanes.values())
        return f"Racing… ({waited}) tokens so far: {counts}"

    def banner(self, message: str, kind: str) -> str:
        return render.status_html(f"{self.notice} {message}" if self.notice else message, kind)

    def outputs(self, *, final: bool, figures: tuple[str, ...] = PLOTS) -> PageUpdate:
        """The page's outputs now, the figures ``figures`` among them."""
        race, turn = self.race, self.conv["turns"][-1]
        for m, lane in race.lanes.items():
            if final:
                self.streams[m].finish()
            # the status too: a turn any racer did not finish is continued from AR's reply (page.continued_reply)
            turn["replies"][m] = {"pieces": list(self.streams[m].pieces), "error": lane.error,
                                  "status": lane.status}
        summary = race.summary()
        self.conv["summary"], self.conv["matches"] = summary, race.greedy_verdicts()
        if final:
            banner = self.banner(self.final_message(), self.final_kind())
            result: Any = self.result()
        else:
            counts = " · ".join(f"{lane.label} {len(lane.tokens)}" for lane in race.lanes.values())
            banner = self.banner(f"Racing… tokens so far: {counts}", "info")
            result = KEEP
        return PageUpdate(conv=self.conv, status=banner,
                          lanes=self.ui.lanes_html(self.conv, live=not final, methods=self.methods),
                          cards=render.summary_html(summary, self.conv["matches"], dtype_name(race.dtype),
                                                    sampled=sampling_text(race.settings.sampling)),
                          plots=self.ui.race_plots(race, figures), result=result)

    def final_kind(self) -> str:
        """The final banner's kind: a warning when the race was cut short, failed or limited, else ok."""
        race = self.race
        return "warn" if race.stopped or race.failed or self.notice else "ok"

    def final_message(self) -> str:
        """The status at the end: the speedups, and what cut the race short or went wrong."""
        race = self.race
        parts = []
        for m, lane in race.lanes.items():
            if lane.status == "error":
                parts.append(f"{lane.label} failed ({lane.error})")
            elif m != BASELINE and (s := race.speedup(m)) is not None:
                parts.append(f"{lane.label} {s:.2f}× vs AR")
        only_ar = [m for m in race.lanes if m != BASELINE] == []
        # no speedup to show: AR raced alone, or no method has a step to compare with AR's yet (a race cut short)
        figures = ", ".join(parts) or ("AR only" if only_ar else "no speedup measured")
        if race.limit == "time":
            return (f"Stopped at this server's time limit of {self.settings.time_limit_s:g} s per race ({figures} "
                    "so far). Ask for fewer new tokens to see a race to its end.")
        if race.stopped:
            return f"Stopped ({figures} so far). Send again whenever you like."
        if race.failed:
            return f"Finished with errors: {figures}."
        verdicts = race.greedy_verdicts()
        tail = ""
        if only_ar:
            tail = " — no drafter raced, so nothing was compared with AR"
        elif not race.settings.sampling.greedy:
            tail = (f" — sampled ({sampling_text(race.settings.sampling)}): each racer keeps the target's "
                    "distribution; outputs are not compared token by token")
        elif verdicts:
            kinds = {v.kind for v in verdicts.values()}
            tail = (" — OUTPUT DIFFERS FROM AR" if "mismatch" in kinds else
                    f" — greedy outputs identical to AR up to a {dtype_name(race.dtype)} tie" if "tie" in kinds else
                    " — greedy outputs identical to AR")
        category = self.ui.config.categories.get(self.conv["turns"][-1]["user"]) if self.conv["turns"] else None
        kind = f" (an example prompt of kind {category})" if category else ""
        return f"Done{kind}: {figures}{tail}"

    def result(self) -> dict[str, Any]:
        """Machine-readable outcome (the API's answer, and the 'Run data' panel)."""
        summary = self.race.summary()
        for m, lane in self.race.lanes.items():
            summary[m]["text"] = self.streams[m].text
            summary[m]["token_ids"] = list(lane.tokens)
        s = self.settings
        verdicts = self.race.greedy_verdicts()
        checked = verdicts is not None
        return {"methods": summary,
                "greedy_matches_ar": {m: v.ok for m, v in verdicts.items()} if checked else None,
                "greedy_check_ar": ({m: v.describe(dtype_name(self.race.dtype)) for m, v in verdicts.items()}
                                    if checked else None),
                "limit": self.race.limit,
                "settings": {"temperature": s.sampling.temperature, "top_p": s.sampling.top_p,
                             "top_k": s.sampling.top_k, "max_new_tokens": s.max_new_tokens, "seed": s.seed,
                             "time_limit_s": s.time_limit_s, "memory": memory_kind(s.memory_owner),
                             "budget": getattr(self.ui.engine.info, "budget", None),
                             "cost_curves": getattr(self.ui.engine.info, "cost_curves", {}),
                             "racer_settings": {m: dataclasses.asdict(t) for m, t in s.racer_settings.items()}}}

    def write_log(self, path: Path, wall: float) -> None:
        """Append this race to the host's race log (one JSON line; a failure to write is logged, not raised)."""
        line = json_line({"time": time.time(), "prompt": self.conv["turns"][-1]["user"], "wall_s": wall,
                          "result": self.result()})
        try:
            with open(path, "a", encoding="utf-8") as f:
                f.write(line + "\n")
        except OSError as e:
            log.warning("could not write the race log %s: %s", path, e)


def memory_kind(owner: str | None) -> str:
    """The run data's word for whose memory the racers that remember drew on (never the visitor's session id)."""
    return "shared" if owner == SHARED else "this visitor's" if owner else "none (fresh, kept by nobody)"
