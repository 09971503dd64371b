"""What the page exchanges with the server, apart from how it is laid out: one update of the page by name
(:class:`PageUpdate`, fields left at ``KEEP`` unchanged) and the output components it maps onto (:class:`Page`),
the checks on the numbers a visitor or an API caller sends, and a conversation encoded for a racer."""

from __future__ import annotations

import json
import math
import reprlib
from dataclasses import dataclass, field, fields
from typing import Any

from dart_core import BASELINE, render_chat


def encode(tok: Any, turns: list[dict[str, Any]], method: str, *, chat: bool) -> list[int]:
    """The prompt ids of ``method``: the chat template over its own conversation (thinking off for Qwen3), or
    the last prompt as plain text in completion mode."""
    return tok(prompt_text(tok, turns, method, chat=chat), add_special_tokens=False)["input_ids"]


def encode_all(tok: Any, turns: list[dict[str, Any]], methods: list[str], *, chat: bool) -> dict[str, list[int]]:
    """:func:`encode` for every method, tokenizing each distinct text once (the methods of a first turn, or of
    completion mode, share one prompt: a long one used to be tokenized once per racer)."""
    ids: dict[str, list[int]] = {}
    out = {}
    for m in methods:
        text = prompt_text(tok, turns, m, chat=chat)
        if text not in ids:
            ids[text] = tok(text, add_special_tokens=False)["input_ids"]
        out[m] = ids[text]
    return out


def prompt_char_bound(tok: Any, context: int) -> int:
    """The most characters a text can have and still fit in ``context`` tokens: no token stands for more
    characters than its vocabulary string has (byte-level BPE writes one character per byte, SentencePiece the
    text itself), so a longer prompt is refused without being tokenized. Doubled for a tokenizer with a
    normalizer (one may shorten the text first)."""
    longest = max((len(t) for t in tok.get_vocab()), default=1)
    backend = getattr(tok, "backend_tokenizer", None)
    margin = 2 if backend is not None and getattr(backend, "normalizer", None) is not None else 1
    return int(context) * max(longest, 1) * margin


def prompt_text(tok: Any, turns: list[dict[str, Any]], method: str, *, chat: bool) -> str:
    """The text :func:`encode` tokenizes: the chat template over ``method``'s conversation (each earlier turn
    answered by :func:`continued_reply`), or the last prompt."""
    if not chat:
        return turns[-1]["user"]
    messages: list[dict[str, str]] = []
    for i, turn in enumerate(turns):
        messages.append({"role": "user", "content": turn["user"]})
        if i < len(turns) - 1:  # an empty answer where none came: roles alternate (some templates insist)
            reply = continued_reply(turn, method)
            text = "".join(p for p, _ in reply["pieces"]) if reply is not None else ""
            messages.append({"role": "assistant", "content": text})
    return render_chat(tok, messages)


def turn_finished(turn: dict[str, Any]) -> bool:
    """Did every racer of ``turn`` finish its reply on its own (end of turn, token budget, context), none cut
    short by Stop, a cancelled request, the host's time limit or an error?"""
    replies = turn.get("replies") or {}
    return bool(replies) and all(r.get("status") == "done" for r in replies.values())


def continued_reply(turn: dict[str, Any], method: str) -> dict[str, Any] | None:
    """The reply of ``turn`` that ``method``'s later prompts are built on: its own where every racer finished the
    turn (greedy: the same text for every racer; sampled: each its own draw), else the baseline's (AR's, the
    target's own text, as far as it got), for every racer alike. A turn cut short leaves each racer a reply of a
    different length (a drafter is ahead of AR when Stop comes, a failed one behind), and continuing those would
    race the next turn on different prompts: its greedy check then says the outputs differ on a correct engine.
    Dropping the cut reply instead would hide from the model what the visitor read and leave two user messages
    in a row. A racer ticked after the turn (no reply of its own) continues AR's too. The page still shows each
    racer's own reply."""
    replies = turn.get("replies") or {}
    own = replies.get(method)
    return own if own is not None and turn_finished(turn) else replies.get(BASELINE)


# The sampling controls, first in the order the page passes controls to a race; each loaded racer's tree
# controls follow (``ArenaUI.settings_controls``). Their sliders' ranges are the ones checked for API callers (the
# events skip Gradio's own preprocessing, whose messages name no control); "Max new tokens" goes up to the host's
# limit (``ArenaUI.token_cap``), and more is cut to it with a notice.
SAMPLING_LABELS = ("Temperature", "Top-p", "Top-k", "Max new tokens")
SAMPLING_RANGES = ((0.0, 2.0), (0.05, 1.0), (0, 200))
PLOTS = ("tau", "latency", "speed", "acceptance", "tree")
RACERS_LABEL = "Racers"  # the picker of the drafting racers that race (the baseline always does), the last input


class _Keep:
    """The value of a :class:`PageUpdate` field that leaves its output as it is."""

    def __repr__(self) -> str:
        return "KEEP"


KEEP: Any = _Keep()


@dataclass
class PageUpdate:
    """One update of the page, by name: a field left at ``KEEP`` (a lane or plot left out) is not changed."""

    prompt: Any = KEEP
    conv: Any = KEEP
    status: Any = KEEP
    lanes: dict[str, str] = field(default_factory=dict)  # racer key -> column HTML
    cards: Any = KEEP
    plots: dict[str, Any] = field(default_factory=dict)  # PLOTS name -> figure
    result: Any = KEEP


@dataclass
class Page:
    """The page's output components, by name (``outputs`` is the order Gradio and API callers see)."""

    prompt: Any
    conv: Any
    status: Any
    lanes: dict[str, Any]
    cards: Any
    plots: dict[str, Any]
    result: Any

    @property
    def outputs(self) -> list[Any]:
        return [self.prompt, self.conv, self.status, *self.lanes.values(), self.cards, *self.plots.values(),
                self.result]

    def updates(self, u: PageUpdate) -> dict[Any, Any]:
        """``u`` as Gradio's {component: value} (components not in it keep their value)."""
        out: dict[Any, Any] = {}
        for f in fields(PageUpdate):
            value, target = getattr(u, f.name), getattr(self, f.name)
            if isinstance(target, dict):
                out.update({target[k]: v for k, v in value.items()})
            elif value is not KEEP:
                out[target] = value
        return out


def dtype_name(dtype: Any) -> str:
    """``bfloat16`` for ``torch.bfloat16``: how the page names the target's precision."""
    return str(dtype).removeprefix("torch.")


def shown(value: Any) -> str:
    """``value`` for a message, at most about 40 characters whatever an API caller sent (a huge list or
    string, an integer with more digits than Python prints)."""
    try:
        text = _SHORT.repr(value)
    except ValueError:  # an int over sys.get_int_max_str_digits()
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 40 else text[:37] + "..."


_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = _SHORT.maxlong = 40


def control_number(value: Any, label: str) -> float:
    """One control's value as a finite float, or a ValueError naming the control (an API caller can send a
    string, null, NaN or an integer too large for a float where the page's slider would send a number)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{label}: expected a number, got {shown(value)}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise ValueError(f"{label}: expected a finite number, got {shown(value)}")
    return number


def new_conversation() -> dict[str, Any]:
    return {"turns": [], "summary": None, "matches": None}


# Characters that str.splitlines() (and some editors and log tools) take for a line break, which json.dumps leaves
# raw in a string: escaped, so a race-log record stays on its one line whatever the prompt holds.
_LINE_BREAKS = {"\u0085": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def json_line(record: Any) -> str:
    """``record`` as one line of JSON (UTF-8 text kept readable; every line-breaking character escaped)."""
    line = json.dumps(record, ensure_ascii=False)
    for raw, escaped in _LINE_BREAKS.items():
        line = line.replace(raw, escaped)  # only ever inside a JSON string, where the escape is valid
    return line
