"""HTML for the race: each method's text with the tokens that came from accepted drafts highlighted, the
per-method header and the summary cards. Plain strings (no Gradio), escaped, styled by ``dart_arena/style.css``.

Text is decoded incrementally: a token that ends inside a multi-byte character (byte-level BPE) is held back
until the character completes, so nothing shows as "�" and every piece keeps its origin (draft or target).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from dart_arena.page import turn_finished
from dart_core import BASELINE, RACERS, label
from dart_core.race import Verdict

DRAFT, TARGET = "d", "t"  # origin of a piece of text: an accepted draft token, or the target's own token
_WINDOW = 16  # tokens of left context used to decode a new token (decoders may depend on neighbours)


@dataclass
class TextStream:
    """Turns a method's tokens, step by step, into text pieces tagged with their origin."""

    tokenizer: Any
    pieces: list[tuple[str, str]] = field(default_factory=list)  # (text, DRAFT | TARGET)
    _ids: list[int] = field(default_factory=list)
    _pending: list[int] = field(default_factory=list)
    _pending_kind: str = TARGET

    def add_step(self, tokens: Sequence[int], accepted: int) -> None:
        """The first ``accepted`` tokens came from accepted drafts, the rest (bonus / AR token) from the target."""
        for i, t in enumerate(tokens):
            self._pending.append(int(t))
            self._pending_kind = DRAFT if i < accepted else TARGET
            self._flush(final=False)

    def finish(self) -> None:
        """Emit whatever is held back (a generation that stopped inside a character)."""
        self._flush(final=True)

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)

    def _flush(self, *, final: bool) -> None:
        if not self._pending:
            return
        left = self._ids[-_WINDOW:]
        before = self._decode(left)
        after = self._decode(left + self._pending)
        if after.endswith("\ufffd") and not final and len(self._pending) < 8:
            return  # an incomplete character: wait for the next token
        piece = after[_common_prefix(before, after):]
        if piece:
            self.pieces.append((piece, self._pending_kind))
        self._ids.extend(self._pending)
        self._pending = []

    @property
    def text(self) -> str:
        return "".join(p for p, _ in self.pieces)


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    return next(i for i in range(n) if a[i] != b[i])


def pieces_html(pieces: Sequence[tuple[str, str]], method: str) -> str:
    """Runs of equal origin become one span; draft runs get the method's highlight class."""
    out: list[str] = []
    run: list[str] = []
    kind = None

    def close() -> None:
        if run:
            text = html.escape("".join(run))
            out.append(f'<span class="tok-draft tok-{method}">{text}</span>' if kind == DRAFT else text)

    for text, k in pieces:
        if k != kind:
            close()
            run, kind = [], k
        run.append(text)
    close()
    return "".join(out)


def _fmt(x: float | None, spec: str, suffix: str = "") -> str:
    return "–" if x is None else f"{x:{spec}}{suffix}"


STATUS_TEXT = {"waiting": "waiting", "running": "running", "done": "done", "stopped": "stopped", "error": "error"}
STOP_TEXT = {"eos": "end of text", "max_new_tokens": "token limit", "context": "context full"}


def lane_header(method: str, figures: dict[str, Any] | None, *, chips: bool = True) -> str:
    """Name, the state and (``chips``) the τ / tokens/s / speedup chips of one column."""
    f = figures or {}
    status = f.get("status", "waiting")
    state = STOP_TEXT.get(f.get("stop_reason") or "", "done") if status == "done" else STATUS_TEXT.get(status, status)
    shown = ""
    if chips:
        shown = (f'<span class="chip"><b>τ</b> {_fmt(f.get("tau"), ".2f")}</span>'
                 f'<span class="chip"><b>{_fmt(f.get("tokens_per_s"), ".1f")}</b> tok/s</span>')
        if method != BASELINE:
            shown += f'<span class="chip"><b>{_fmt(f.get("speedup_vs_ar"), ".2f", "×")}</b> vs AR</span>'
        shown += f'<span class="chip chip-tokens">{f.get("tokens", 0)} tok</span>'
    held = f.get("memory_answers")
    if held is not None:  # a racer that remembers: how many earlier answers it drew on (0: cold)
        shown += (f'<span class="chip chip-memory" title="earlier answers in its memory at the start of this race">'
                  f'{held} earlier answer{"" if held == 1 else "s"}</span>')
    return (f'<div class="lane-top"><div class="lane-head"><span class="lane-name lane-{method}">'
            f'{html.escape(label(method))}</span><span class="lane-state state-{html.escape(status)}">'
            f'{html.escape(state)}</span></div><div class="chips">{shown}</div></div>')


def live_pieces_html(pieces: Sequence[tuple[str, str]], method: str) -> str:
    """One span per draft piece (no merged runs), so that more pieces only append to the string."""
    return "".join(f'<span class="tok-draft tok-{method}">{html.escape(text)}</span>' if kind == DRAFT
                   else html.escape(text) for text, kind in pieces)


def lane_html(method: str, turns: Sequence[dict[str, Any]], *, chat: bool, figures: dict[str, Any] | None,
              live: bool = False) -> str:
    """One column: header + the conversation (chat) or the prompt followed by its continuation (completion).

    ``turns``: ``{"user": str, "replies": {method: {"pieces": [...], "error": str | None, "status": str}}}``
    dicts (a chat turn cut short notes where a column's reply is not the one later turns build on). ``live``
    (while the last turn streams): the header without its figure chips (the summary cards show them live) and
    the last reply's markup left open, so each update's HTML extends the previous one and Gradio sends only the
    new text (its stream diff is an "append" when the new string starts with the old); the browser closes the
    open tags. The final update is the full, closed form."""
    body: list[str] = []
    is_open = False
    for i, turn in enumerate(turns):
        reply = turn.get("replies", {}).get(method, {})
        err = reply.get("error")
        if live and i == len(turns) - 1 and not err:
            user = html.escape(turn["user"])
            opening = (f'<div class="msg msg-user">{user}</div><div class="msg msg-bot">' if chat
                       else f'<div class="completion"><span class="prompt-text">{user}</span>')
            body.append(opening + live_pieces_html(reply.get("pieces", []), method))
            is_open = True
            break
        text = pieces_html(reply.get("pieces", []), method)
        err_html = f'<div class="lane-error">{html.escape(err)}</div>' if err else ""
        if chat:
            body.append(f'<div class="msg msg-user">{html.escape(turn["user"])}</div>'
                        f'<div class="msg msg-bot">{text or "&#8203;"}{err_html}</div>'
                        + continued_note(turn, method))
        else:
            body.append(f'<div class="completion"><span class="prompt-text">{html.escape(turn["user"])}</span>'
                        f'{text}</div>{err_html}')
    if not body:
        hint = "Send a prompt to start the race." if chat else "Send a code prompt to start the race."
        body.append(f'<div class="lane-empty">{hint}</div>')
    mode = "chat" if chat else "code"
    out = (f'<div class="lane lane-box-{method}" data-method="{method}">'
           f'{lane_header(method, figures, chips=not live)}<div class="lane-body {mode}">{"".join(body)}')
    return out if is_open else out + "</div></div>"


def continued_note(turn: dict[str, Any], method: str) -> str:
    """Under a chat reply the later turns do not build on: the turn was cut short and this racer's text is not the
    baseline's, which every racer continues from (``dart_arena.page.continued_reply``); the column still shows what the
    racer wrote, and the note says why its next answer may not follow from it."""
    replies = turn.get("replies") or {}
    own, base = replies.get(method), replies.get(BASELINE)
    if method == BASELINE or own is None or base is None or turn_finished(turn) or _text(own) == _text(base):
        return ""
    return (f'<div class="lane-note">Cut short: the chat continues from {html.escape(label(BASELINE))}\'s reply, '
            "the same for every racer.</div>")


def _text(reply: dict[str, Any]) -> str:
    return "".join(p for p, _ in reply.get("pieces", []))


SAMPLED_CHECK = ("sampled at {sampling}: each racer's output is a draw from the target's own distribution (the "
                 "acceptance rule keeps it, checked statistically by the test suite), so outputs differ from AR's "
                 "by chance and nothing is compared token by token")


def summary_html(summary: dict[str, dict[str, Any]], verdicts: dict[str, Verdict] | None = None,
                 dtype: str = "float32", sampled: str | None = None) -> str:
    """The summary row: one card per method with τ, tokens/s, speedup vs AR and the draft tokens verified and
    accepted with their rate (docs/metrics.md), plus the greedy check (a flip between the target's best tokens
    within ``dtype``'s rounding is shown neutrally, as a tie), or for a sampled race (``sampled``: its settings)
    what holds instead of token equality."""
    cards = []
    for m, f in summary.items():
        speed = _fmt(f.get("speedup_vs_ar"), ".2f", "×") if m != BASELINE else "1.00×"
        cards.append(
            f'<div class="card card-{m}"><div class="card-name lane-name lane-{m}">{html.escape(f["label"])}</div>'
            f'<div class="card-speed">{speed}<span> vs AR</span></div>'
            f'<div class="card-row"><span>τ <b>{_fmt(f.get("tau"), ".2f")}</b></span>'
            f'<span><b>{_fmt(f.get("tokens_per_s"), ".1f")}</b> tok/s</span>'
            f'<span><b>{f.get("tokens", 0)}</b> tok / {f.get("verify_steps", 0)} steps</span></div>'
            f'<div class="card-row card-acceptance"><span>drafted <b>{f.get("num_draft_tokens", 0)}</b></span>'
            f'<span>accepted <b>{f.get("num_accepted_tokens", 0)}</b></span>'
            f'<span>rate <b>{_fmt(f.get("draft_acceptance_rate"), ".1%")}</b></span></div>'
            f'<div class="card-row small"><span>draft {_fmt(f.get("draft_ms_per_step"), ".2f")}</span>'
            f'<span>search {_fmt(f.get("search_ms_per_step"), ".2f")}</span>'
            f'<span>verify {_fmt(f.get("verify_ms_per_step"), ".2f")} ms/step</span></div></div>')
    note = ""
    if sampled and len(summary) > 1:
        note += f'<div class="check sampled">~ {html.escape(SAMPLED_CHECK.format(sampling=sampled))}</div>'
    if verdicts:
        same = [label(m) for m, v in verdicts.items() if v.kind == "identical"]
        ties = [f"{label(m)} {v.describe(dtype)}" for m, v in verdicts.items() if v.kind == "tie"]
        diff = [f"{label(m)} (at token {v.position})" for m, v in verdicts.items() if v.kind == "mismatch"]
        if same:
            note += f'<div class="check ok">✓ greedy output of {" and ".join(same)} identical to AR</div>'
        if ties:
            note += (f'<div class="check tie">≈ greedy output of {html.escape("; ".join(ties))} (the target\'s best '
                     "tokens tied within its rounding: a different forward shape may pick another)</div>")
        if diff:
            note += (f'<div class="check bad">✗ {html.escape(" and ".join(diff))} differs from AR (greedy, beyond '
                     "rounding): please report</div>")
    return f'<div class="cards">{"".join(cards)}</div>{note}'


def status_html(message: str, kind: str = "info") -> str:
    """The banner above the columns: info (queue / progress), ok, warn or error."""
    return f'<div class="banner banner-{kind}">{html.escape(message)}</div>' if message else ""


def token_label(tokenizer: Any, token: int) -> str:
    """A short visible label for one token in the tree view (spaces and newlines made visible)."""
    text = tokenizer.decode([int(token)], skip_special_tokens=False, clean_up_tokenization_spaces=False)
    text = text.replace("\n", "↵").replace("\t", "⇥").replace(" ", "·")
    return text if len(text) <= 12 else text[:11] + "…"


def racer_css() -> str:
    """Each racer's colour on the page (column top, name dot, highlighted draft tokens, summary card), from the
    registry, so a new racer needs no stylesheet edit."""
    rules = []
    for r in RACERS:
        c = r.color.lstrip("#")
        rgb = ", ".join(str(int(c[i : i + 2], 16)) for i in (0, 2, 4))
        rules.append(
            f".lane-box-{r.key} .lane-top {{ border-top: 4px solid {r.color}; }}\n"
            f".lane-{r.key}::before {{ background: {r.color}; }}\n"
            f".card-{r.key} {{ border-left: 5px solid {r.color}; }}\n"
            f".tok-{r.key} {{ background: rgba({rgb}, 0.24); box-shadow: inset 0 -2px 0 rgba({rgb}, 0.55); }}")
    return "\n".join(rules) + "\n"
