"""The Gradio Blocks page: one prompt, the racers in columns, live plots, a summary row, the last draft tree,
and the controls (sampling, token budget, each racer's settings; Send, Stop, Regenerate, Clear). Columns,
controls and colours come from the racer registry (``dart_core.racers.registry``); this module names no method.

The model runs in the engine (``dart_arena.model_client``: its own process when served by ``python -m dart_arena``), so
nothing this page does is billed to a race's clock; the page is updated a few times a second (text), its live figures
one at a time in turn (:class:`dart_arena.live.LiveRace`), always with the final state. Every generation event shares
one concurrency group with a limit of one: the methods share one target model, so requests queue (their place in the
queue shows in the status bar) instead of interleaving on it. The host's limits (new tokens, seconds per race, queue
length) are in :class:`AppConfig`. Stop and Clear cancel the event (``cancels=``), stop the session's race and answer
once it has closed, so no late update can overwrite their answer; a closed browser tab makes Gradio close the event's
generator. Either way the race ends on the engine, which closes every method's step generator.
"""

from __future__ import annotations

import contextlib
import html
import json
import logging
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gradio as gr

from dart_arena import plots, render
from dart_arena.live import LiveRace
from dart_arena.model_client import LocalEngine, ProcessEngine
from dart_arena.page import (
    KEEP,
    PLOTS,
    RACERS_LABEL,
    SAMPLING_LABELS,
    SAMPLING_RANGES,
    Page,
    PageUpdate,
    control_number,
    encode_all,
    new_conversation,
    prompt_char_bound,
    shown,
)
from dart_core import BASELINE, Racer, SamplingConfig, check_settings, racer
from dart_core.race import SHARED, PromptError, RaceSettings, Scoreboard, check_prompt, check_text, context_limit

if TYPE_CHECKING:
    from dart_arena.standings_panel import StandingsPanel

log = logging.getLogger("dart_arena.app")

CONCURRENCY_ID = "target-model"  # every event that runs the shared target
# What the server keeps per visitor (session) is bounded: at most MAX_SESSIONS sessions (the least recently used
# beyond it are forgotten: Gradio's per-session state, each with the page's last outputs, and the conversation),
# a conversation is dropped SESSION_TTL_S after its last update, and a race's full record (every step, its draft
# trees) is kept only while it runs and ENDED_KEEP_S after, for a Stop that arrives as it ends.
MAX_SESSIONS = 100
SESSION_TTL_S = 3600.0
ENDED_KEEP_S = 30.0


@dataclass
class AppConfig:
    """What the page shows and the defaults of its controls (set by the CLI from the loaded models)."""

    chat: bool  # chat template (multi-turn) or completion mode
    max_new_tokens: int = 256
    max_length: int | None = None
    racer_settings: dict[str, Any] = field(default_factory=dict)  # racer key -> its settings' defaults
    examples: list[tuple[str, str]] = field(default_factory=list)  # (label, prompt)
    categories: dict[str, str] = field(default_factory=dict)  # an example prompt's text -> its kind (bundle prompts)
    subtitle: str = ""
    # seconds between UI updates while racing (the text), and between two live figure redraws (one figure each,
    # in turn, so each of the five every 5 x plot_every): the browser must keep up, or the updates queue up in it
    # and input events (Stop!) wait behind them; the race itself never waits for the page (docs/app.md)
    update_every: float = 0.25
    plot_every: float = 0.6
    # the host's limits: new tokens per race (the slider's maximum; None: up to the context, at most 8192) and
    # wall-clock seconds per race (None: none)
    max_new_tokens_limit: int | None = None
    time_limit_s: float | None = None
    race_log: Path | None = None  # a JSON line per ended race (the "Run data" JSON, the prompt, the wall time)
    # what the server keeps per visitor: sessions remembered, seconds a conversation outlives its last update
    max_sessions: int = MAX_SESSIONS
    session_ttl_s: float | None = SESSION_TTL_S
    # the racers that remember draw on one memory for every visitor (--shared-memory), not one per visitor
    shared_memory: bool = False
    # the "Measured on this host" panel's HTML, made again at each page load (dart_arena.standings_panel.StandingsPanel)
    standings: StandingsPanel | None = None


class ArenaUI:
    """Builds the page on an engine (which holds the models); one instance per server."""

    def __init__(self, engine: LocalEngine | ProcessEngine, config: AppConfig) -> None:
        self.engine = engine
        self.tokenizer = engine.tokenizer
        self.config = config
        self.methods = list(engine.info.methods)  # the loaded racers, registry order, the baseline last
        self.racers: list[Racer] = [racer(m) for m in self.methods]
        # every loaded racer's settings shown as sliders: (racer, knob), in page order after SAMPLING_LABELS
        self.settings_controls = [(r, k) for r in self.racers for k in r.knobs() if k.ui]
        self.context = context_limit(engine.info.max_context, config.max_length)
        self.token_cap = min(config.max_new_tokens_limit or 8192, self.context - 1)
        self.max_prompt_chars = prompt_char_bound(self.tokenizer, self.context)  # longer: refused untokenized
        self._label_cache: dict[int, str] = {}
        # session hash -> its race while it runs and ENDED_KEEP_S after (Stop, Clear), least recently used first
        self.active: OrderedDict[str, LiveRace] = OrderedDict()
        self._active_lock = threading.Lock()  # races start in the queue's worker, Stop / Clear in other threads

    @property
    def control_labels(self) -> list[str]:
        """Every control's caption, in the order the page passes them to :meth:`run`."""
        return [*SAMPLING_LABELS, *(f"{r.label} {k.label}" for r, k in self.settings_controls)]

    @property
    def optional_methods(self) -> list[str]:
        """The loaded racers a visitor may leave out (every drafting one; the baseline always races: every
        speedup is measured against it)."""
        return [m for m in self.methods if m != BASELINE]

    @property
    def ticked_methods(self) -> list[str]:
        """The loaded racers the picker ticks at first (the registry's ``ticked``: the model-free ones are left
        for the visitor, so the first race is as short as before they came), the baseline included."""
        return [r.key for r in self.racers if r.ticked or r.key == BASELINE]

    def picked(self, value: Any) -> list[str]:
        """The picker's value (racer keys; None: the ones it ticks at first) as the methods to race, registry
        order, the baseline always in; a ValueError names the picker when an API caller sends something else."""
        if value is None:
            return list(self.ticked_methods)
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"{RACERS_LABEL}: expected a list of racer names ({', '.join(self.optional_methods)}), "
                             f"got {shown(value)}")
        unknown = [v for v in value if v not in self.methods]  # the baseline is accepted: it races anyway
        if unknown:
            raise ValueError(f"{RACERS_LABEL}: {shown(unknown[0])} is not a racer loaded here (choose from "
                             f"{', '.join(self.optional_methods)})")
        return [m for m in self.methods if m in value or m == BASELINE]

    def settings_defaults(self, r: Racer) -> Any:
        return self.config.racer_settings.get(r.key) or r.default_settings(self.engine.info.device)

    # ------------------------------------------------------------------------------------------- rendering
    def token_label(self, token: int) -> str:
        if token not in self._label_cache:
            self._label_cache[token] = render.token_label(self.tokenizer, token)
        return self._label_cache[token]

    def lanes_html(self, conv: dict[str, Any], *, live: bool = False,
                   methods: list[str] | None = None) -> dict[str, str]:
        """The columns' HTML (of ``methods``; default every loaded racer); ``live``: the streaming form whose
        updates only append (``render.lane_html``)."""
        figures = conv.get("summary") or {}
        return {m: render.lane_html(m, conv["turns"], chat=self.config.chat, figures=figures.get(m), live=live)
                for m in methods or self.methods}

    def empty_plots(self) -> dict[str, Any]:
        return self.figures([])

    def race_plots(self, race: Scoreboard, names: Iterable[str] = PLOTS) -> dict[str, Any]:
        return self.figures(list(race.lanes.values()), names)

    def figures(self, lanes: list[Any], names: Iterable[str] = PLOTS) -> dict[str, Any]:
        """The figures ``names`` (default all) of a race's lanes (none: the empty page's), each built only when
        asked for; the tree view shows the first drafting racer (registry order) with a tree."""

        def tree() -> Any:
            drafting = [lane for lane in lanes if racer(lane.method).drafts]
            tree_lane = next((lane for lane in drafting if lane.last_tree_step is not None),
                             drafting[0] if drafting else None)
            step = tree_lane.last_tree_step if tree_lane is not None else None
            return plots.tree_figure(step, self.token_label, method=tree_lane.method if tree_lane else None)

        builders = {"tau": lambda: plots.tau_figure(lanes), "latency": lambda: plots.latency_figure(lanes),
                    "speed": lambda: plots.speed_figure(lanes), "acceptance": lambda: plots.acceptance_figure(lanes),
                    "tree": tree}
        return {name: builders[name]() for name in names}

    # ------------------------------------------------------------------------------------------- events
    def settings(self, *values: Any) -> RaceSettings:
        """The controls' values (``control_labels`` order) as race settings: a ValueError names the control
        when one is not a finite number or is out of its range. A token budget over the host's limit is cut
        to it (:meth:`run` says so)."""
        labels = self.control_labels
        if len(values) != len(labels):
            raise ValueError(f"expected {len(labels)} control values ({', '.join(labels)}), got {len(values)}")
        numbers = [control_number(v, label) for v, label in zip(values, labels, strict=True)]
        temperature, top_p, top_k, max_new_tokens = numbers[:4]
        for value, label in zip((top_k, max_new_tokens), labels[2:4], strict=True):
            if value != int(value):
                raise ValueError(f"{label}: expected a whole number, got {value:g}")
        for value, label, (low, high) in zip(numbers[:3], labels, SAMPLING_RANGES, strict=False):
            if not low <= value <= high:
                raise ValueError(f"{label} must be between {low:g} and {high:g}, got {value:g}")
        if max_new_tokens < 1:
            raise ValueError(f"{labels[3]} must be at least 1, got {max_new_tokens:g}")
        sampling = SamplingConfig(temperature, top_p, int(top_k))
        seed = 0 if sampling.greedy else secrets.randbelow(2**31)
        given: dict[str, dict[str, Any]] = {}
        for (r, k), value in zip(self.settings_controls, numbers[4:], strict=True):
            given.setdefault(r.key, {})[k.name] = int(value) if k.kind is int and value == int(value) else value
        settings = {r.key: check_settings(replace(self.settings_defaults(r), **given.get(r.key, {})), r.label)
                 for r in self.racers if r.drafts}
        return RaceSettings(sampling=sampling, max_new_tokens=min(int(max_new_tokens), self.token_cap),
                            max_length=self.config.max_length, racer_settings=settings, seed=seed,
                            time_limit_s=self.config.time_limit_s)

    def run(self, prompt: str, conv: dict[str, Any], *controls: Any, regenerate: bool = False,
            session: str = "", racers: Any = None) -> Iterator[PageUpdate]:
        """The generation event: validate, race the ``racers`` picked (None: the picker's first ticks), stream the
        page's updates."""
        if not isinstance(conv, dict) or not isinstance(conv.get("turns"), list):
            conv = new_conversation()  # the page's own state, but nothing here may trust its shape
        turns = list(conv["turns"])
        if prompt is not None and not isinstance(prompt, str):  # only an API caller can send that
            yield self._warn(f"The prompt must be text, got {type(prompt).__name__}.", "", conv)
            return
        if regenerate:
            if not turns:
                yield self._warn("Nothing to regenerate yet: send a prompt first.", prompt, conv)
                return
            text = turns.pop()["user"]
        else:
            # completion mode keeps the prompt verbatim: a trailing newline or indent steers the continuation
            text = (prompt or "").strip() if self.config.chat else prompt or ""
            if not text.strip():
                yield self._warn("The prompt is empty: type something first.", prompt, conv)
                return
        if not self.config.chat:
            turns = []  # completion mode: every prompt stands alone
        try:
            self.check_length(text)
            check_text(text)
            settings = replace(self.settings(*controls), memory_owner=self.memory_owner(session))
            methods = self.picked(racers)
            turns.append({"user": text, "replies": {}})
            limit = self.context
            hint = "shorten it, or press Clear to drop earlier turns" if self.config.chat and len(turns) > 1 \
                else "shorten it"
            prompts = encode_all(self.tokenizer, turns, methods, chat=self.config.chat)
            for ids in prompts.values():
                check_prompt(ids, limit, hint=hint)
        except (PromptError, ValueError) as e:
            yield self._warn(str(e), prompt, conv)
            return
        capped = None
        if settings.max_new_tokens < control_number(controls[3], SAMPLING_LABELS[3]):
            capped = (f"{SAMPLING_LABELS[3]}: {controls[3]:g} is over this server's limit, so the race stops at "
                      f"{settings.max_new_tokens:,} new tokens.")
        live = LiveRace(self, turns, prompts, settings, notice=capped, methods=methods)
        self.remember(session, live)
        yield from live.updates()

    def memory_owner(self, session: str) -> str | None:
        """Whose memory a race of ``session``'s draws on and feeds: the visitor's own, everyone's with
        ``shared_memory``, none (fresh, kept by nobody) for a request without a session."""
        return SHARED if self.config.shared_memory else (session or None)

    def check_length(self, text: str) -> None:
        """A prompt with more characters than any prompt that fits the context (``max_prompt_chars``) is refused
        at once: tokenizing megabytes took minutes and gigabytes while the queue waited."""
        if len(text) > self.max_prompt_chars:
            raise PromptError(f"The prompt is {len(text):,} characters long, more than any prompt that fits the "
                              f"context of {self.context:,} tokens can have ({self.max_prompt_chars:,} characters "
                              "here): shorten it.")

    def remember(self, session: str, live: LiveRace) -> None:
        """Keep ``live`` as the session's race, and forget the races that ended over ENDED_KEEP_S ago (a Stop
        that arrives after Gradio already cancelled the event still finds its race in that time) and the least
        recently used beyond ``max_sessions``; a running race is never forgotten (it holds the shared model)."""
        with self._active_lock:
            self.active[session] = live
            self.active.move_to_end(session)
            self._forget_ended()

    def _forget_ended(self) -> None:
        now = time.monotonic()
        for key, live in list(self.active.items()):
            if live.ended_at is not None and now - live.ended_at > ENDED_KEEP_S:
                del self.active[key]
        over = len(self.active) - max(self.config.max_sessions, 1)
        for key in [k for k, live in self.active.items() if live.ended_at is not None][:max(over, 0)]:
            del self.active[key]

    def _warn(self, message: str, prompt: Any, conv: dict[str, Any]) -> PageUpdate:
        """The status banner (and a toast) say ``message``; the prompt box gets ``prompt`` back unless it cannot
        be sent (not text, a lone surrogate, which would break the answer's UTF-8 JSON, or over the length any
        prompt may have): then it is left as it is."""
        gr.Warning(html.escape(message))
        echo: Any = KEEP
        if isinstance(prompt, str) and len(prompt) <= self.max_prompt_chars:  # megabytes are not sent back
            with contextlib.suppress(UnicodeEncodeError):
                prompt.encode("utf-8")
                echo = prompt
        return PageUpdate(prompt=echo, conv=conv, status=render.status_html(message, "warn"))

    def guarded(self, what: str, updates: Callable[[], Iterator[PageUpdate]]) -> Iterator[PageUpdate]:
        """The updates of ``updates()`` with any exception turned into a last update whose status names it (and a
        toast), logged with its traceback: every request gets an answer on the page that says what went wrong,
        never a bare failure."""
        try:
            yield from updates()
        except Exception as e:
            log.exception("unexpected error while %s", what)
            text = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
            text = text if len(text) <= 300 else text[:297] + "..."
            message = (f"Something went wrong on the server while {what} ({text}). It has been logged; send again, "
                       "or press Clear to start over.")
            gr.Warning(html.escape(message))
            yield PageUpdate(status=render.status_html(message, "warn"))

    def answer(self, what: str, handler: Callable[[str], PageUpdate], session: str) -> PageUpdate:
        """``handler(session)``'s update, or (it raised) the message of :meth:`guarded`."""
        return next(self.guarded(what, lambda: iter([handler(session)])))

    def stop(self, session: str) -> PageUpdate:
        """Stop pressed: stop this session's race, wait until its generator has closed (so no update of it can
        arrive after this answer), and show the final, stopped state. A request still waiting in the queue is
        dropped by the button's ``cancels=``. The stopped turn's later prompts are AR's reply for every racer
        (``dart_arena.page.continued_reply``), so the next race is like for like."""
        with self._active_lock:
            live = self.active.get(session)
            self._forget_ended()
        if live is None:
            return PageUpdate(status=render.status_html("Nothing to stop: no race is running.", "info"))
        if live.race.finished and not live.race.stopped:  # it ended on its own: its own last word stays
            return PageUpdate(status=live.banner(f"{live.final_message()} (Nothing to stop: the race had ended.)",
                                                 live.final_kind()))
        live.race.stop()
        if not live.closed.wait(timeout=30):
            log.warning("the stopped race did not close within 30 s")
        return live.outputs(final=True)

    def clear(self, session: str) -> PageUpdate:
        """Clear: stop a running race like Stop does, then empty the conversation, the plots and the summary."""
        with self._active_lock:
            live = self.active.pop(session, None)
            self._forget_ended()
        if live is not None and not live.race.finished:
            live.race.stop()
            live.closed.wait(timeout=30)
        conv = new_conversation()
        return PageUpdate(prompt="", conv=conv, status=render.status_html("", "info"), lanes=self.lanes_html(conv),
                          cards=render.summary_html({}), plots=self.empty_plots(), result=None)

    # ------------------------------------------------------------------------------------------- page
    def build(self) -> gr.Blocks:
        """The page, in the order a visitor reads it: the header, the racers' columns and the input row, the
        settings, the results (cards, plots, run data); then the events that wire them."""
        with gr.Blocks(title="DART Arena", analytics_enabled=False) as demo:
            # dropped session_ttl_s after its last update (Gradio's sweep); a later race starts a new conversation
            conv = gr.State(new_conversation(), time_to_live=self.config.session_ttl_s)
            status, picker = self._header()
            with gr.Row(equal_height=True, elem_id="lanes"):
                lanes = {m: gr.HTML(render.lane_html(m, [], chat=self.config.chat, figures=None),
                                    elem_id=f"lane-{m}", max_height=520, autoscroll=True, min_width=260,
                                    visible=m in self.ticked_methods)
                         for m in self.methods}
            prompt, buttons = self._input_row()
            controls = self._settings_panel()
            if self.config.examples:
                gr.Examples([[p] for _, p in self.config.examples], inputs=[prompt], label="Examples",
                            example_labels=[label for label, _ in self.config.examples])
            cards, figures, result = self._results()
            if self.config.standings is not None:  # the benchmark's pooled table, below the live race
                with gr.Accordion("Measured on this host", open=False, elem_id="standings"):
                    panel = gr.HTML(elem_id="standings-table")
                    measured = [gr.Plot(elem_id=f"standings-{name}", show_label=False, visible=False)
                                for name in ("categories", "position", "concurrency")]
                demo.load(self.config.standings, None, panel, queue=False, api_visibility="private")
                demo.load(self._standings_plots, None, measured, queue=False, api_visibility="private")
            page = Page(prompt=prompt, conv=conv, status=status, lanes=lanes, cards=cards, plots=figures,
                        result=result)
            self._wire(page, picker, buttons, [prompt, conv, *controls, picker])
        return demo

    def _standings_plots(self) -> list[Any]:
        """The plots of the last runs for the loaded models, each shown only when its run exists: the e2e run's
        speedup by kind of prompt, the long run's τ by output position, the concurrency sweep's speedup by
        streams."""
        panel = self.config.standings
        found = panel.standings()
        runs = [(found if found is not None and found.by_category else None, plots.category_figure),
                (panel.position_run(), plots.position_figure),
                (panel.concurrency_run(), plots.concurrency_figure)]
        return [gr.Plot(value=draw(run) if run is not None else None, visible=run is not None) for run, draw in runs]

    def _header(self) -> tuple[Any, Any]:
        """The title with the token legend, the status line and the Racers picker."""
        drafts = " ".join(f'<span class="tok-draft tok-{r.key}">{html.escape(r.label)} draft</span>'
                          for r in self.racers if r.drafts)
        gr.HTML(f'<div class="hero"><h1>DART Arena</h1><p>{html.escape(self.config.subtitle)}</p>'
                f'<p class="legend">{drafts} tokens came from accepted drafts; plain text is the target\'s own '
                "token. Each method's clock counts only its own steps.</p></div>")
        status = gr.HTML(render.status_html("", "info"), elem_id="status", min_height=44)
        picker = gr.CheckboxGroup(
            [(r.label, r.key) for r in self.racers if r.key != BASELINE],
            value=[m for m in self.ticked_methods if m != BASELINE],
            label=RACERS_LABEL, elem_id="racers", visible=len(self.optional_methods) > 1,
            info=f"which drafters race {racer(BASELINE).label} (it always runs: speedups are measured against "
                 "it); untick some on a narrow screen")
        return status, picker

    def _input_row(self) -> tuple[Any, dict[str, Any]]:
        """The prompt box and its buttons (send, stop, regenerate, clear)."""
        chat = self.config.chat
        with gr.Row(elem_id="input-row"):
            prompt = gr.Textbox(
                label="Message" if chat else "Code prompt (the model continues it)", lines=3, max_lines=12,
                placeholder="Ask something…" if chat else "def fibonacci(n):", scale=6,
                elem_id="prompt", autofocus=True)
            with gr.Column(scale=1, min_width=150, elem_id="buttons"):
                buttons = {"send": gr.Button("Send", variant="primary", elem_id="send"),
                           "stop": gr.Button("Stop", variant="stop", elem_id="stop")}
                with gr.Row():
                    buttons["regen"] = gr.Button("Regenerate", size="sm", elem_id="regenerate", min_width=60)
                    buttons["clear"] = gr.Button("Clear", size="sm", elem_id="clear", min_width=60)
        return prompt, buttons

    def _settings_panel(self) -> list[Any]:
        """The sampling sliders, then each loaded racer's tree sliders: the controls a race takes, in order."""
        with gr.Accordion("Settings", open=False, elem_id="settings"):
            with gr.Row():
                (t_low, t_high), (p_low, p_high), (k_low, k_high) = SAMPLING_RANGES
                sampling = [
                    gr.Slider(t_low, t_high, value=0.0, step=0.05, label="Temperature", elem_id="temperature",
                              info="0 = greedy: every method must print exactly AR's text"),
                    gr.Slider(p_low, p_high, value=1.0, step=0.05, label="Top-p"),
                    gr.Slider(k_low, k_high, value=0, step=1, label="Top-k", info="0 = off"),
                    gr.Slider(1, self.token_cap, value=min(self.config.max_new_tokens, self.token_cap), step=1,
                              label="Max new tokens", elem_id="max-new-tokens")]
            settings = []
            with gr.Row():
                for r, k in self.settings_controls:
                    default = getattr(self.settings_defaults(r), k.name)
                    settings.append(gr.Slider(k.low, k.high, value=default, step=1 if k.kind is int else 0.05,
                                           label=f"{r.label} {k.label}", info=k.help, elem_id=f"{r.key}-{k.flag}"))
        return sampling + settings

    def _results(self) -> tuple[Any, dict[str, Any], Any]:
        """The summary cards, the five live plots (two rows of two, the tree below) and the last race's JSON."""
        cards = gr.HTML(render.summary_html({}), elem_id="summary")
        figs = self.empty_plots()
        figures: dict[str, Any] = {}
        for row in (PLOTS[:2], PLOTS[2:4], PLOTS[4:]):
            with gr.Row(equal_height=True):
                for name in row:
                    figures[name] = gr.Plot(figs[name], show_label=False, elem_id=f"plot-{name}",
                                            elem_classes="plot-card")
        with gr.Accordion("Run data (JSON)", open=False):
            result = gr.JSON(label="last race", elem_id="result")
        return cards, figures, result

    def _wire(self, page: Page, picker: Any, buttons: dict[str, Any], inputs: list[Any]) -> None:
        """The events: race / regenerate (queued, one at a time on the shared target), the picker showing its
        columns, and Stop / Clear (not queued: they must not wait behind the race they stop)."""
        # preprocess=False: the handler gets the raw values and checks them itself (ArenaUI.settings), so a bad
        # value from an API caller gets a message that names the control instead of Gradio's bare one
        common = {"outputs": page.outputs, "concurrency_limit": 1, "concurrency_id": CONCURRENCY_ID,
                  "show_progress": "full", "show_progress_on": [page.status], "preprocess": False}

        def race(request: gr.Request, prompt: str, conv: dict[str, Any], *values: Any) -> Iterator[dict]:
            """Race the picked methods on one prompt; the last update carries the figures as JSON."""
            session, controls, racers = request.session_hash, values[:-1], values[-1]
            for update in self.guarded("racing", lambda: self.run(prompt, conv, *controls, session=session,
                                                                  racers=racers)):
                yield page.updates(update)

        def regenerate(request: gr.Request, prompt: str, conv: dict[str, Any], *values: Any) -> Iterator[dict]:
            """Race again on the last prompt (its answers are replaced)."""
            session, controls, racers = request.session_hash, values[:-1], values[-1]
            for update in self.guarded("regenerating", lambda: self.run(prompt, conv, *controls,
                                                                        regenerate=True, session=session,
                                                                        racers=racers)):
                yield page.updates(update)

        def show_lanes(value: Any) -> dict:
            """Show the picked racers' columns only (and always the baseline's)."""
            try:
                keep = set(self.picked(value))
            except ValueError:
                keep = set(self.methods)
            return {lane: gr.update(visible=m in keep) for m, lane in page.lanes.items()}

        def stop_race(request: gr.Request) -> dict:
            """Stop this session's race; answers with its final (stopped) state."""
            return page.updates(self.answer("stopping the race", self.stop, request.session_hash))

        def clear_all(request: gr.Request) -> dict:
            """Stop any race and empty the page."""
            return page.updates(self.answer("clearing the page", self.clear, request.session_hash))

        send, stop, regen, clear, prompt = (buttons["send"], buttons["stop"], buttons["regen"], buttons["clear"],
                                            page.prompt)
        picker.change(show_lanes, picker, list(page.lanes.values()), queue=False, api_visibility="private")
        waiting = render.status_html("Waiting for the model (one race at a time on the shared target)…", "info")
        for trigger in (send.click, prompt.submit, regen.click):  # instant feedback, in the browser only
            trigger(None, None, page.status, js=f"() => {json.dumps(waiting)}")
        ev_send = send.click(race, inputs, api_name="race", **common)
        ev_submit = prompt.submit(race, inputs, api_visibility="private", **common)
        ev_regen = regen.click(regenerate, inputs, api_name="regenerate", **common)
        running = [ev_send, ev_submit, ev_regen]
        # queue=False: Stop and Clear must not wait behind the race they stop
        stop.click(stop_race, None, page.outputs, cancels=running, queue=False, api_name="stop")
        clear.click(clear_all, None, page.outputs, cancels=running, queue=False, api_name="clear")
