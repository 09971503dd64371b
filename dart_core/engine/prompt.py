"""The one check on a prompt, from wherever it comes (the page, an API caller, a command line, Python): text a
tokenizer can take, and ids that leave room for an answer in the context. Its messages are written for the person
who sent the prompt, so every front end shows them as they are."""

from __future__ import annotations

from collections.abc import Sequence


class PromptError(ValueError):
    """A problem with the prompt itself (empty, not valid Unicode, longer than the context)."""


def context_limit(max_context: int, max_length: int | None) -> int:
    """Prompt + answer may not exceed this: the target's context, or ``max_length`` when smaller."""
    return int(max_context) if max_length is None else min(int(max_length), int(max_context))


def check_text(text: str) -> None:
    """A prompt must be encodable as UTF-8: a lone surrogate (possible through an API, e.g. "\\ud800") would
    otherwise fail inside the tokenizer with an unhelpful TypeError."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise PromptError(f"The prompt holds a character that is not valid Unicode (a lone surrogate, "
                          f"U+{ord(text[e.start]):04X}, at character {e.start}): remove it and send again.") from None


def check_prompt(ids: Sequence[int], limit: int, *, hint: str = "shorten it or raise max_length") -> None:
    """:class:`PromptError` for an empty prompt or one that leaves no room to generate within ``limit`` tokens
    (prompt + answer); ``hint`` says what the sender can do about the second."""
    if not ids:
        raise PromptError("The prompt is empty: type something first.")
    if len(ids) >= limit:
        raise PromptError(f"The prompt is {len(ids):,} tokens long but the context holds {limit:,} tokens "
                          f"(prompt + answer), so there is no room to generate: {hint}.")
