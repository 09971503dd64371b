"""What the web server answers before Gradio sees a request (an ASGI middleware; no Gradio here): a health check
for a host or load balancer, a bound on request bodies, no uploads, and a clear refusal of an event that does not
exist.

Why here: a 20 MB prompt used to be parsed, queued and tokenized (once per racer) while the one-at-a-time queue
waited; an unknown ``fn_index`` raised inside Gradio (a bare HTTP 500); Gradio's upload route stored any file in
its temp folder although no component of the page takes one; and a dead model process left ``/gradio_api/info``
answering 200, so a host's health check could not notice.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger("dart_arena.app")

HEALTH_PATH = "/healthz"
# Gradio's routes that store what a client sends as files (the page has no component that takes one)
UPLOAD_SUFFIXES = ("/upload", "/process_recording")
# Gradio's routes that name an event by ``fn_index`` in a JSON body
EVENT_SUFFIXES = ("/queue/join",)
EVENT_PARTS = ("/run/", "/api/")

Health = Callable[[], tuple[bool, dict[str, Any]]]


class Guard:
    """ASGI middleware. ``health()`` gives (serving, details) for ``GET /healthz`` (200 or 503, the details as
    JSON); ``max_body``: the most bytes a request body may have (413 beyond, before any of it is parsed);
    ``events()``: the ``fn_index`` values the page has (another one is refused with 400 and a message); uploads
    are refused with 403."""

    def __init__(self, app: Any, *, health: Health, max_body: int, events: Callable[[], set[int]],
                 body_hint: str = "") -> None:
        self.app = app
        self.health = health
        self.max_body = int(max_body)
        self.events = events
        self.body_hint = body_hint

    async def __call__(self, scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path, method = scope.get("path", ""), scope.get("method", "GET")
        if path == HEALTH_PATH and method in ("GET", "HEAD"):
            serving, details = self.health()
            await respond(send, 200 if serving else 503, details)
            return
        if method == "POST" and path.rstrip("/").endswith(UPLOAD_SUFFIXES):
            await respond(send, 403, {"detail": "This app takes no uploads: no part of the page accepts a file."})
            return
        length = content_length(scope)
        if length is not None and length > self.max_body:
            await respond(send, 413, {"detail": self.too_large(length)})
            return
        if method != "POST":
            await self.app(scope, receive, send)
            return
        body, more = await read_body(receive, self.max_body + 1)
        if len(body) > self.max_body:
            await respond(send, 413, {"detail": self.too_large(None)})
            return
        problem = self.event_problem(path, body)
        if problem is not None:
            await respond(send, 400, {"detail": problem})
            return
        await self.app(scope, replay(body, more, receive), send)

    def too_large(self, length: int | None) -> str:
        size = f"{length:,} bytes" if length is not None else "over the limit"
        return (f"The request is {size}; this server takes at most {self.max_body:,} bytes per request"
                f"{': ' + self.body_hint if self.body_hint else ''}.")

    def event_problem(self, path: str, body: bytes) -> str | None:
        """Why the event a JSON body names cannot be run (None: it can, or the body is Gradio's to judge)."""
        trimmed = path.rstrip("/")
        if not (trimmed.endswith(EVENT_SUFFIXES) or any(p in trimmed for p in EVENT_PARTS)):
            return None
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            return None  # Gradio's own parser answers it (422 with its message)
        index = data.get("fn_index") if isinstance(data, dict) else None
        if index is None:
            return None
        if isinstance(index, bool) or not isinstance(index, int) or index not in self.events():
            shown = json.dumps(index)[:40]
            return (f"No event with fn_index {shown} on this page: its events are listed at /gradio_api/info "
                    "(or call them by name, e.g. api_name=\"/race\").")
        return None


def content_length(scope: dict[str, Any]) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def read_body(receive: Callable[..., Any], limit: int) -> tuple[bytes, list[dict[str, Any]]]:
    """The body's first ``limit`` bytes at most (stopping there), and the messages that ended the read (a
    disconnect) to hand on."""
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), [message]
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks), []


def replay(body: bytes, after: list[dict[str, Any]], receive: Callable[..., Any]) -> Callable[..., Any]:
    """A ``receive`` that gives the body already read, then what came after it, then the client's messages."""
    pending = [{"type": "http.request", "body": body, "more_body": False}, *after]

    async def again() -> dict[str, Any]:
        if pending:
            return pending.pop(0)
        return await receive()

    return again


async def respond(send: Callable[..., Any], status: int, payload: dict[str, Any]) -> None:
    body = json.dumps(payload).encode("utf-8")
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
