"""Answers for many prompts at once (greedy or sampled), as fast as a CPU allows: the distillation's hot loop.

``model.generate`` spends most of a large batch's time outside the model on a CPU: its ``DynamicCache`` grows by
``torch.cat`` every step, copying every row's whole key/value history once per token, and rows that have finished
keep being computed until the longest one ends. Here each layer's keys and values live in one buffer allocated for
the batch's whole length (``PreallocatedLayer``, a stock ``transformers`` cache layer that writes in place and hands
the model a view), finished rows are dropped from the batch (and from every buffer) once enough of them have
finished, and prompts of similar length share a batch (the caller sorts them), so little padding is computed.
On a CPU the prompts go through the model a few rows at a time (their activations stay in the processor's caches),
each part only as wide as its longest prompt, and their keys and values are joined into the batch's buffers; the
greedy token is ``max(-1).indices`` (argmax's first-of-ties index; ``argmax`` itself takes about 5x longer over a
bf16 vocabulary there).

The model is the stock ``transformers`` model; only the cache layer and the loop are ours. Answers equal the model's
own one-prompt greedy answers up to floating-point ties (a padded batch's matrix products may round differently)."""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Sequence
from typing import Any

import torch
from transformers.cache_utils import Cache, DynamicLayer

# Drop finished rows once this share of the batch has finished: each drop copies the kept rows' keys and values
# once, so dropping on every finished row would cost as much as the concatenation this module avoids.
DROP_SHARE = 0.125
# On a CPU the prompts are run through the model this many tokens at a time (whole rows): a batch's activations
# then stay in the caches. Measured on a 2-core EPYC, bf16: 84 prompts of 400 tokens 27.6 s at once, 16.1 s in
# 3,200-token parts, 17.7 s in 1,600; 256 of 50 tokens 5.6 s at once, 4.3 s in 1,600-token parts.
CPU_PREFILL_TOKENS = 2400


class PreallocatedLayer(DynamicLayer):
    """A ``DynamicLayer`` whose keys and values are written into a buffer of ``capacity`` positions, allocated on
    the first update; the model sees ``buffer[:, :, :length]``. ``batch_select_indices`` keeps some rows."""

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity
        self.length = 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self._allocate(key_states.shape[0], key_states, value_states)

    def _allocate(self, rows: int, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Buffers of ``rows`` rows and ``capacity`` positions; heads, width, dtype, device as ``keys``/``values``."""
        self.device = keys.device
        self.key_buffer = keys.new_empty((rows, keys.shape[1], self.capacity, keys.shape[-1]))
        self.value_buffer = values.new_empty((rows, values.shape[1], self.capacity, values.shape[-1]))
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.length + key_states.shape[-2]
        if end > self.capacity:
            raise ValueError(f"the cache holds {self.capacity} positions; this forward needs {end}")
        self.key_buffer[:, :, self.length:end] = key_states
        self.value_buffer[:, :, self.length:end] = value_states
        self.length = end
        self._expose()
        return self.keys, self.values

    def _expose(self) -> None:
        """``keys``/``values``: the buffers' first ``length`` positions, the view the model attends to."""
        self.keys = self.key_buffer[:, :, : self.length]
        self.values = self.value_buffer[:, :, : self.length]

    def get_seq_length(self) -> int:
        return self.length

    @classmethod
    def joined(cls, parts: Sequence[PreallocatedLayer], capacity: int) -> PreallocatedLayer:
        """One layer of ``capacity`` positions holding the rows of ``parts`` one after another, right-aligned: a
        part shorter than the longest starts that many columns later, its columns before zeros (left padding, which
        the mask hides; zeros, not stale memory, since a masked NaN would still reach the output)."""
        if not parts or any(not p.is_initialized for p in parts):
            raise ValueError("only filled parts can be joined")
        length = max(p.length for p in parts)
        if length > capacity:
            raise ValueError(f"the cache holds {capacity} positions; the parts hold {length}")
        rows = sum(p.keys.shape[0] for p in parts)
        layer = cls(capacity)
        layer._allocate(rows, parts[0].keys, parts[0].values)
        a = 0
        for p in parts:
            b, pad = a + p.keys.shape[0], length - p.length
            for buffer, part in ((layer.key_buffer, p.keys), (layer.value_buffer, p.values)):
                buffer[a:b, :, :pad] = 0
                buffer[a:b, :, pad:length] = part
            a = b
        layer.length = length
        layer._expose()
        return layer

    def get_max_length(self) -> int:
        return self.capacity

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.is_initialized:
            self.key_buffer = self.key_buffer[indices]
            self.value_buffer = self.value_buffer[indices]
            self._expose()


def _cache_kwarg(model: Any) -> str:
    """transformers renamed ``past_key_values`` to ``cache`` (5.2x); pass the name the installed version takes."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _num_layers(model: Any) -> int:
    cfg = model.config.get_text_config(decoder=True) if hasattr(model.config, "get_text_config") else model.config
    return int(cfg.num_hidden_layers)


def _next_tokens(logits: torch.Tensor, temperature: float, generator: torch.Generator | None) -> torch.Tensor:
    if temperature <= 0:
        return logits.max(-1).indices  # argmax's index (the first of ties), about 5x faster over a bf16 vocabulary
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    return torch.multinomial(probs.cpu(), 1, generator=generator).squeeze(1).to(logits.device)


def _prefill_parts(lengths: Sequence[int]) -> list[tuple[int, int]]:
    """Consecutive row ranges of at most ``CPU_PREFILL_TOKENS`` tokens each (at least one row), a part's tokens
    being its rows times its longest prompt: rows sorted by length give parts of nearly equal lengths."""
    parts, a = [], 0
    while a < len(lengths):
        b, longest = a + 1, lengths[a]
        while b < len(lengths) and (b + 1 - a) * max(longest, lengths[b]) <= CPU_PREFILL_TOKENS:
            longest = max(longest, lengths[b])
            b += 1
        parts.append((a, b))
        a = b
    return parts


def _prefill(model: Any, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, capacity: int,
             key: str) -> tuple[torch.Tensor, Cache]:
    """The prompts' last logits and a cache of ``capacity`` positions holding their keys and values. On a CPU
    they are computed ``CPU_PREFILL_TOKENS`` at a time, each part only as wide as its longest prompt (a batch
    spanning short and long prompts would otherwise run every short one through the model at the longest width),
    and joined right-aligned, as the left-padded batch has them."""
    batch, width = ids.shape
    layers = _num_layers(model)
    lengths = mask.sum(1).tolist()
    ranges = _prefill_parts(lengths) if ids.device.type == "cpu" else [(0, batch)]
    parts, logits = [], []
    whole = len(ranges) == 1  # one part: its cache is the batch's, with room to grow
    for a, b in ranges:
        w = max(lengths[a:b])
        part = Cache(layers=[PreallocatedLayer(capacity if whole else w) for _ in range(layers)])
        # the last column by index, not ``logits_to_keep=1``: the model would slice it as a strided view, which
        # torch's CPU linear multiplies by copying the head once per row (14 s instead of 0.03 s at batch 128, bf16)
        last = torch.tensor([w - 1], device=ids.device)
        logits.append(model(input_ids=ids[a:b, width - w:], attention_mask=mask[a:b, width - w:],
                            position_ids=positions[a:b, width - w:], use_cache=True, logits_to_keep=last,
                            **{key: part}).logits)
        parts.append(part)
    if whole:
        return logits[0], parts[0]
    joined = [PreallocatedLayer.joined([p.layers[i] for p in parts], capacity) for i in range(layers)]
    return torch.cat(logits), Cache(layers=joined)


@torch.inference_mode()
def batch_answers(model: Any, prompts: Sequence[Sequence[int]], *, max_new_tokens: int, stop_ids: Iterable[int],
                  pad_id: int, temperature: float = 0.0, generator: torch.Generator | None = None) -> list[list[int]]:
    """Each prompt's continuation, ending with its stop token or after ``max_new_tokens`` tokens: greedy, or
    sampled at ``temperature`` (> 0) with ``generator``. Prompts are left-padded to one width; give prompts of
    similar length for little padding."""
    if not prompts:
        return []
    if max_new_tokens < 1:
        raise ValueError("max_new_tokens must be at least 1")
    if any(len(p) == 0 for p in prompts):
        raise ValueError("an empty prompt has no next token to predict")
    stops = torch.tensor(sorted(set(stop_ids)), dtype=torch.long)
    if not len(stops):
        raise ValueError("no stop token: cannot tell where an answer ends")
    device = next(model.parameters()).device
    batch, width = len(prompts), max(len(p) for p in prompts)
    ids = torch.full((batch, width), pad_id, dtype=torch.long)
    mask = torch.zeros((batch, width), dtype=torch.long)
    for i, p in enumerate(prompts):  # left padding: every row's next token is in the last column
        ids[i, width - len(p):] = torch.as_tensor(list(p), dtype=torch.long)
        mask[i, width - len(p):] = 1
    ids, mask, stops = ids.to(device), mask.to(device), stops.to(device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    key = _cache_kwarg(model)
    logits, cache = _prefill(model, ids, mask, positions, width + max_new_tokens, key)
    rows = torch.arange(batch, device=device)  # which prompt each live row answers
    next_pos = positions[:, -1] + 1
    answers: list[list[int]] = [[] for _ in prompts]
    finished = torch.zeros(batch, dtype=torch.bool, device=device)
    for step in range(max_new_tokens):
        token = _next_tokens(logits[:, -1], temperature, generator)
        live = ~finished
        for r, t in zip(rows[live].tolist(), token[live].tolist(), strict=True):
            answers[r].append(t)
        finished |= torch.isin(token, stops)
        if step + 1 == max_new_tokens or bool(finished.all()):
            break
        if int(finished.sum()) >= max(1, int(DROP_SHARE * len(rows))):
            keep = (~finished).nonzero().squeeze(1)
            cache.batch_select_indices(keep)
            rows, token, mask, next_pos = rows[keep], token[keep], mask[keep], next_pos[keep]
            finished = finished[keep]
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        logits = model(input_ids=token[:, None], attention_mask=mask, position_ids=next_pos[:, None],
                       use_cache=True, **{key: cache}).logits
        next_pos = next_pos + 1
    return answers
