"""One way to turn a conversation into the target's prompt ids, for the page, the command lines, the benchmarks and
the distillation alike (so a drafter is trained on prompts tokenized as they are raced): the tokenizer's chat
template with the generation prompt, thinking off where the template knows that switch (Qwen3), tokenized without
adding special tokens twice."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

Message = dict[str, str]


def render_chat(tokenizer: Any, messages: Sequence[Message]) -> str:
    """The chat template's text for ``messages`` (roles system / user / assistant), ready for the answer."""
    return tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True,
                                         enable_thinking=False)


def encode_text(tokenizer: Any, text: str) -> list[int]:
    """``text`` as ids, with no special tokens added (a rendered template holds its own)."""
    return [int(t) for t in tokenizer(text, add_special_tokens=False)["input_ids"]]


def encode_chat(tokenizer: Any, messages: Sequence[Message]) -> list[int]:
    """:func:`render_chat`, tokenized."""
    return encode_text(tokenizer, render_chat(tokenizer, messages))


def encode_prompt(tokenizer: Any, text: str, *, chat: bool, system: str | None = None) -> list[int]:
    """One user turn (after ``system``, if any) through :func:`encode_chat` in chat mode when the tokenizer has a
    template; else the text as it is (completion mode)."""
    if chat and getattr(tokenizer, "chat_template", None):
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": text}]
        return encode_chat(tokenizer, messages)
    return encode_text(tokenizer, text)
