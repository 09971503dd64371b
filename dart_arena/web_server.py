"""The page's web server: Gradio's queue (one race at a time on the shared target), the sessions it keeps, the
:class:`~dart_arena.guard.Guard` in front of it, the theme (system fonts: the page works offline) and the CSS
(``style.css`` plus each racer's colours from the registry). Named for what it starts, apart from the model's side
(:mod:`dart_arena.model_client`, :mod:`dart_arena.model_process`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gradio as gr

from dart_arena import render
from dart_arena.ui import MAX_SESSIONS, ArenaUI

CSS_PATH = Path(__file__).with_name("style.css")


def start_web_server(demo: gr.Blocks, *, listen: bool = False, port: int | None = None, share: bool = False,
           max_queue: int | None = 64, max_sessions: int = MAX_SESSIONS, ui: ArenaUI | None = None,
           **kwargs: Any) -> None:
    """Queue (one generation at a time on the shared model) and serve: 127.0.0.1 unless ``listen``. Gradio keeps
    each session's state (a copy of the page's config with its last outputs: HTML, figures, the conversation) for
    the ``max_sessions`` most recently used sessions only (its own default, 10,000, let memory grow by ~0.3 MB per
    visitor). ``show_error``: the handlers answer their own errors with a message (:meth:`ArenaUI.guarded`), so
    what still reaches Gradio is its own checking of a request (an API caller sending too few values, say), whose
    message the caller gets instead of an error without one.

    In front of Gradio, :class:`~dart_arena.guard.Guard` (with ``ui``, the page's engine and limits): ``GET /healthz``
    (200 only while the model process is ready and alive; 503 while it is down or restarting, and once the app gave
    up: a host reads the status code), request bodies bounded by what the longest prompt needs, no uploads
    (Gradio's own limit, ``max_file_size``, is 0 too), and events that do not exist refused with a message.
    Gradio's own lines ("Running on local URL…") are left out unless a share link is asked for (its URL is only
    known there): the start's last line is ours, the URL."""
    from starlette.middleware import Middleware

    from dart_arena.guard import Guard

    health = ui.engine.health if ui is not None else (lambda: (True, {"engine": "ready"}))
    chars = ui.max_prompt_chars if ui is not None else 1 << 20
    guard = Middleware(Guard, health=health, max_body=request_body_limit(chars), events=lambda: set(demo.fns),
                       body_hint=f"a prompt may have at most {chars:,} characters")
    demo.queue(default_concurrency_limit=1, max_size=max_queue)
    demo.launch(server_name="0.0.0.0" if listen else "127.0.0.1", server_port=port, share=share,
                css=page_css(), theme=theme(), ssr_mode=False, show_error=True,
                state_session_capacity=max(max_sessions, 1), max_file_size=0,
                app_kwargs={"middleware": [guard]}, **{"quiet": not share, **kwargs})


def request_body_limit(prompt_chars: int) -> int:
    """Bytes a request may have: a prompt of ``prompt_chars`` characters as JSON (at most 12 bytes a character:
    a ``\\ud83d\\ude00`` pair for one emoji) and 1 MiB for the rest."""
    return 12 * int(prompt_chars) + (1 << 20)


def page_css() -> str:
    """``style.css`` plus each racer's colour rules (generated from the registry)."""
    return CSS_PATH.read_text(encoding="utf-8") + render.racer_css()


def theme() -> gr.themes.Base:
    """A calm theme with system fonts (no web-font downloads: the page works offline)."""
    sans = [gr.themes.Font("ui-sans-serif"), gr.themes.Font("system-ui"), gr.themes.Font("Segoe UI"),
            gr.themes.Font("Helvetica"), gr.themes.Font("Arial"), gr.themes.Font("sans-serif")]
    mono = [gr.themes.Font("ui-monospace"), gr.themes.Font("SFMono-Regular"), gr.themes.Font("Menlo"),
            gr.themes.Font("Consolas"), gr.themes.Font("DejaVu Sans Mono"), gr.themes.Font("monospace")]
    return gr.themes.Soft(primary_hue="orange", secondary_hue="blue", neutral_hue="slate", font=sans, font_mono=mono)
