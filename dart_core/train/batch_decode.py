"""Answers for many prompts at once (greedy or sampled), as fast as a CPU allows: the distillation's hot loop.

``model.generate`` spends most of a large batch's time outside the model on a CPU: its ``DynamicCache`` grows by
``torch.cat`` every step, copying every row's whole key/value history once per token, and rows that have finished
keep being computed until the longest one ends. Here each layer's keys and values live in one buffer allocated for
the batch's whole length (``PreallocatedLayer``, a stock ``transformers`` cache layer that writes in place and hands
the model a view), finished rows are dropped from the batch (moved up in place in every buffer) once enough of them
have finished, and prompts of similar length share a batch (the caller sorts them), so little padding is computed.
The prefix every prompt of a batch shares (a chat template's system turn) goes through the model once. On a CPU
the prompts go through the model a few rows at a time (their activations stay in the processor's caches), each
part only as wide as its longest prompt, and their keys and values are joined into the batch's buffers; the decode
steps attend with our native kernel (``cpu_attention``); the greedy token is ``max(-1).indices`` (argmax's
first-of-ties index; ``argmax`` itself is several times slower over a bf16 vocabulary there,
measured: docs/benchmarks.md#measurements-behind-design-choices).

A conversation that goes on (a follow-up turn asked after the target's own answer) need not be run through the
model again: ``batch_answers_keeping`` hands back the keys and values of the rows asked for (``Kept``, copied out
of the batch when the row is dropped), and ``continue_answers`` answers the next turn from them, running only the
new tokens through the model.

The model is the stock ``transformers`` model; only the cache layer, the attention function it is handed through
transformers' ``AttentionInterface`` and the loop are ours. Answers equal the model's own one-prompt greedy answers
up to floating-point ties (a padded batch's matrix products may round differently)."""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers.cache_utils import Cache

from dart_core.engine.cpu_attention import native_decode_attention
from dart_core.engine.kv_cache import PreallocatedLayer
from dart_core.engine.target import cache_keyword

# Drop finished rows once this share of the batch has finished: each drop copies the kept rows' keys and values
# once, so dropping on every finished row would cost as much as the concatenation this module avoids.
DROP_SHARE = 0.125
# On a CPU the prompts are run through the model this many tokens at a time (whole rows): a batch's activations
# then stay in the caches; parts of 1,600 to 3,200 tokens beat one pass over all the prompts, long or short
# (measured: docs/benchmarks.md#measurements-behind-design-choices).
CPU_PREFILL_TOKENS = 2400
ATTENTION_CHOICES = ("native", "sdpa")
# A prefix all of a batch's prompts share is run once when it is at least this long (SmolLM2's system turn is 24
# tokens of a 45-token first turn on average: half of the prefill).
MIN_PREFIX = 8


@dataclass
class Kept:
    """One finished row's keys and values, per layer ``[kv_heads, length, head_dim]`` in position order: its prompt
    and its answer but the answer's last token (which never went through the model), to go on from."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]

    @property
    def length(self) -> int:
        return int(self.keys[0].shape[1])

    def first(self, n: int) -> Kept:
        """The first ``n`` positions only (where a conversation goes on from fewer of its tokens)."""
        if not 0 < n <= self.length:
            raise ValueError(f"cannot keep {n} of {self.length} positions")
        return Kept([k[:, :n] for k in self.keys], [v[:, :n] for v in self.values])


def _kept(cache: Cache, row: int, columns: torch.Tensor) -> Kept:
    """Row ``row`` of every layer of ``cache``, only its ``columns`` (copied: the batch's buffers are reused)."""
    return Kept([layer.keys[row].index_select(1, columns) for layer in cache.layers],
                [layer.values[row].index_select(1, columns) for layer in cache.layers])


def _num_layers(model: Any) -> int:
    cfg = model.config.get_text_config(decoder=True) if hasattr(model.config, "get_text_config") else model.config
    return int(cfg.num_hidden_layers)


def _next_tokens(logits: torch.Tensor, temperature: float, generator: torch.Generator | None) -> torch.Tensor:
    if temperature <= 0:
        return logits.max(-1).indices  # argmax's index (the first of ties), faster than argmax: see the module doc
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


def shared_prefix(prompts: Sequence[Sequence[int]]) -> int:
    """How many leading tokens every prompt shares (a chat template's system turn), at most the shortest prompt
    but one (each row's last prompt token must go through the model for its logits); 0 below ``MIN_PREFIX``."""
    shortest = min(len(p) for p in prompts)
    n = 0
    while n < shortest - 1 and all(p[n] == prompts[0][n] for p in prompts):
        n += 1
    return n if n >= MIN_PREFIX else 0


def _prefill(model: Any, ids: torch.Tensor, mask: torch.Tensor, capacity: int, key: str,
             prefix: int) -> tuple[torch.Tensor, Cache, torch.Tensor]:
    """The prompts' last logits, a cache of ``capacity`` positions holding their keys and values, and the mask of
    which of its columns each row attends to. The ``prefix`` tokens every prompt starts with go through the model
    once, for one row, and their keys and values are copied into every row's cache (positions 0..prefix-1, as in
    each row); the rest of each prompt (its suffix) follows them. On a CPU the suffixes are computed
    ``CPU_PREFILL_TOKENS`` at a time, each part only as wide as its longest suffix (a batch spanning short and long
    prompts would otherwise run every short one through the model at the longest width), and joined
    right-aligned. A row's columns: zeros up to its part's width, the prefix, padding, its suffix."""
    batch, width = ids.shape
    layers = _num_layers(model)
    suffix = mask.sum(1) - prefix
    longest = width - prefix  # the longest suffix
    shared = None
    if prefix:
        first = ids[:1, width - int(suffix[0]) - prefix: width - int(suffix[0])]
        shared = Cache(layers=[PreallocatedLayer(prefix) for _ in range(layers)])
        model(input_ids=first, position_ids=torch.arange(prefix, device=ids.device)[None], use_cache=True,
              logits_to_keep=torch.tensor([prefix - 1], device=ids.device), **{key: shared})
    columns = torch.arange(longest, device=ids.device)
    suffix_mask = (columns[None] >= (longest - suffix)[:, None]).long()  # each suffix right-aligned
    suffix_pos = prefix + (suffix_mask.cumsum(-1) - 1).clamp(min=0)
    suffix_ids = ids[:, prefix:]
    lengths = suffix.tolist()
    ranges = _prefill_parts(lengths) if ids.device.type == "cpu" else [(0, batch)]
    whole = len(ranges) == 1  # one part: its cache is the batch's, with room to grow
    parts, logits, part_width = [], [], torch.empty(batch, dtype=torch.long, device=ids.device)
    for a, b in ranges:
        w = max(lengths[a:b])
        part_width[a:b] = w
        part = Cache(layers=[PreallocatedLayer(capacity if whole else prefix + w) for _ in range(layers)])
        if shared is not None:
            for layer, common in zip(part.layers, shared.layers, strict=True):
                layer.update(common.keys.expand(b - a, -1, -1, -1), common.values.expand(b - a, -1, -1, -1))
        part_mask = torch.cat([suffix_mask.new_ones((b - a, prefix)), suffix_mask[a:b, longest - w:]], dim=1)
        # the last column by index, not ``logits_to_keep=1``: the model would slice it as a strided view, which
        # torch's CPU linear multiplies by copying the head once per row, far slower at a large batch
        # (measured: docs/benchmarks.md#measurements-behind-design-choices)
        logits.append(model(input_ids=suffix_ids[a:b, longest - w:], attention_mask=part_mask,
                            position_ids=suffix_pos[a:b, longest - w:], use_cache=True,
                            logits_to_keep=torch.tensor([w - 1], device=ids.device), **{key: part}).logits)
        parts.append(part)
    every = torch.arange(width, device=ids.device)[None]
    start = (longest - part_width)[:, None]  # where a row's prefix starts in the joined cache
    cache_mask = (((every >= start) & (every < start + prefix)) | (every >= width - suffix[:, None])).long()
    if whole:
        return logits[0], parts[0], cache_mask
    joined = [PreallocatedLayer.joined([p.layers[i] for p in parts], capacity) for i in range(layers)]
    return torch.cat(logits), Cache(layers=joined), cache_mask


def batch_answers(model: Any, prompts: Sequence[Sequence[int]], *, max_new_tokens: int, stop_ids: Iterable[int],
                  pad_id: int, temperature: float = 0.0, generator: torch.Generator | None = None,
                  attention: str = "native") -> list[list[int]]:
    """Each prompt's continuation, ending with its stop token or after ``max_new_tokens`` tokens: greedy, or
    sampled at ``temperature`` (> 0) with ``generator``. Prompts are left-padded to one width; give prompts of
    similar length for little padding. ``attention``: "native" (on a CPU, the decode steps attend through
    ``dart_core.engine.cpu_attention``) or "sdpa" (the model's own attention throughout)."""
    return batch_answers_keeping(model, prompts, max_new_tokens=max_new_tokens, stop_ids=stop_ids, pad_id=pad_id,
                                 temperature=temperature, generator=generator, attention=attention)[0]


@torch.inference_mode()
def batch_answers_keeping(model: Any, prompts: Sequence[Sequence[int]], *, max_new_tokens: int,
                          stop_ids: Iterable[int], pad_id: int, keep: Collection[int] = (), temperature: float = 0.0,
                          generator: torch.Generator | None = None,
                          attention: str = "native") -> tuple[list[list[int]], dict[int, Kept]]:
    """``batch_answers``, and for the prompts at the indices ``keep`` the keys and values their conversation
    holds once answered (``Kept``), for ``continue_answers``."""
    _check_attention(attention)
    if not prompts:
        return [], {}
    _check_rows(prompts, max_new_tokens, "prompt")
    if any(not 0 <= i < len(prompts) for i in keep):
        raise ValueError(f"keep names rows outside the {len(prompts)} prompts")
    stops = _stop_tensor(stop_ids)
    device = next(model.parameters()).device
    batch, width = len(prompts), max(len(p) for p in prompts)
    ids = torch.full((batch, width), pad_id, dtype=torch.long)
    mask = torch.zeros((batch, width), dtype=torch.long)
    for i, p in enumerate(prompts):  # left padding: every row's next token is in the last column
        ids[i, width - len(p):] = torch.as_tensor(list(p), dtype=torch.long)
        mask[i, width - len(p):] = 1
    ids, mask, stops = ids.to(device), mask.to(device), stops.to(device)
    key = cache_keyword(model)
    with native_decode_attention(model) if attention == "native" else contextlib.nullcontext():
        logits, cache, mask = _prefill(model, ids, mask, width + max_new_tokens, key,
                                       shared_prefix(prompts))
        return _decode(model, logits, cache, mask, mask[:, :width].sum(1), stops, max_new_tokens, temperature,
                       generator, frozenset(keep))


@torch.inference_mode()
def continue_answers(model: Any, kept: Sequence[Kept], inputs: Sequence[Sequence[int]], *, max_new_tokens: int,
                     stop_ids: Iterable[int], pad_id: int, temperature: float = 0.0,
                     generator: torch.Generator | None = None, attention: str = "native") -> list[list[int]]:
    """Each conversation's next answer: ``kept[i]`` holds the keys and values of its first tokens (from
    ``batch_answers_keeping``), ``inputs[i]`` the tokens that follow them (the last answer's last token, the next
    user turn, the generation prompt); only those go through the model before the answer is decoded as in
    ``batch_answers``. The rows go in order of their inputs' length and, on a CPU, ``CPU_PREFILL_TOKENS`` input
    tokens at a time, each part only as wide as its longest input (``_continue_part``); the parts' caches are
    joined right-aligned."""
    _check_attention(attention)
    if len(kept) != len(inputs):
        raise ValueError(f"{len(kept)} kept conversations but {len(inputs)} inputs")
    if not kept:
        return []
    _check_rows(inputs, max_new_tokens, "input")
    layers = _num_layers(model)
    if any(len(k.keys) != layers for k in kept):
        raise ValueError(f"kept keys and values must hold the model's {layers} layers")
    stops = _stop_tensor(stop_ids)
    device = next(model.parameters()).device
    order = sorted(range(len(kept)), key=lambda r: len(inputs[r]))
    lengths = [len(inputs[r]) for r in order]
    ranges = _prefill_parts(lengths) if device.type == "cpu" else [(0, len(order))]
    key = cache_keyword(model)
    with native_decode_attention(model) if attention == "native" else contextlib.nullcontext():
        parts = [_continue_part(model, [kept[r] for r in order[a:b]], [inputs[r] for r in order[a:b]], pad_id,
                                max_new_tokens if len(ranges) == 1 else 0, key) for a, b in ranges]
        if len(parts) == 1:
            logits, cache, mask = parts[0]
        else:
            width = max(m.shape[1] for _, _, m in parts)
            cache = Cache(layers=[PreallocatedLayer.joined([c.layers[i] for _, c, _ in parts], width + max_new_tokens)
                                  for i in range(layers)])
            mask = torch.cat([torch.nn.functional.pad(m, (width - m.shape[1], 0)) for _, _, m in parts])
            logits = torch.cat([lg for lg, _, _ in parts])
        next_pos = torch.tensor([kept[r].length + len(inputs[r]) for r in order], device=device)
        answers = _decode(model, logits, cache, mask, next_pos, stops.to(device), max_new_tokens, temperature,
                          generator, frozenset())[0]
    out: list[list[int]] = [[] for _ in kept]
    for j, r in enumerate(order):
        out[r] = answers[j]
    return out


def _continue_part(model: Any, kept: Sequence[Kept], inputs: Sequence[Sequence[int]], pad_id: int, room: int,
                   key: str) -> tuple[torch.Tensor, Cache, torch.Tensor]:
    """Some rows' inputs through the model after their kept keys and values: their last logits, their cache
    (``room`` positions to spare) and its mask. Columns: ``[pad | kept | pad | inputs]``, as wide as the longest
    of each."""
    device = next(model.parameters()).device
    batch, held, width = len(kept), max(k.length for k in kept), max(len(x) for x in inputs)
    cache = Cache(layers=[PreallocatedLayer(held + width + room) for _ in range(_num_layers(model))])
    for i, layer in enumerate(cache.layers):
        layer._allocate(batch, kept[0].keys[i][None], kept[0].values[i][None])
        for buffer, part in ((layer.key_buffer, "keys"), (layer.value_buffer, "values")):
            buffer[:, :, :held] = 0  # masked, but a NaN in stale memory would still reach the output
            for r, k in enumerate(kept):
                buffer[r, :, held - k.length: held] = getattr(k, part)[i]
        layer.length = held
        layer._expose()
    ids = torch.full((batch, width), pad_id, dtype=torch.long)
    mask = torch.zeros((batch, held + width), dtype=torch.long)
    positions = torch.zeros((batch, width), dtype=torch.long)
    for r, (k, x) in enumerate(zip(kept, inputs, strict=True)):
        ids[r, width - len(x):] = torch.as_tensor(list(x), dtype=torch.long)
        mask[r, held - k.length: held] = 1
        mask[r, held + width - len(x):] = 1
        positions[r, width - len(x):] = torch.arange(k.length, k.length + len(x))
    ids, mask, positions = ids.to(device), mask.to(device), positions.to(device)
    # the last column by index (see _prefill)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                   logits_to_keep=torch.tensor([width - 1], device=device), **{key: cache}).logits
    return logits, cache, mask


def _check_attention(attention: str) -> None:
    if attention not in ATTENTION_CHOICES:
        raise ValueError(f"attention must be one of {', '.join(ATTENTION_CHOICES)}, not {attention!r}")


def _check_rows(rows: Sequence[Sequence[int]], max_new_tokens: int, what: str) -> None:
    """Every row has a token to predict from, and at least one token is asked for."""
    if max_new_tokens < 1:
        raise ValueError("max_new_tokens must be at least 1")
    if any(len(r) == 0 for r in rows):
        raise ValueError(f"an empty {what} has no next token to predict")


def _stop_tensor(stop_ids: Iterable[int]) -> torch.Tensor:
    stops = torch.tensor(sorted(set(stop_ids)), dtype=torch.long)
    if not len(stops):
        raise ValueError("no stop token: cannot tell where an answer ends")
    return stops


def _decode(model: Any, logits: torch.Tensor, cache: Cache, mask: torch.Tensor, next_pos: torch.Tensor,
            stops: torch.Tensor, max_new_tokens: int, temperature: float, generator: torch.Generator | None,
            keep: frozenset[int]) -> tuple[list[list[int]], dict[int, Kept]]:
    """From a filled cache (``mask``: which of its columns each row attends to; ``logits``: each row's last),
    one token per live row per step. The rows in ``keep`` are copied out (``Kept``) when they are dropped or at
    the end: their columns in ``mask`` before the first answer column, then their answer's fed tokens."""
    device, batch = logits.device, logits.shape[0]
    key, start = cache_keyword(model), mask.shape[1]  # the first answer token's column
    rows = torch.arange(batch, device=device)  # which prompt each live row answers
    answers: list[list[int]] = [[] for _ in range(batch)]
    kept: dict[int, Kept] = {}

    def keep_rows(which: torch.Tensor) -> None:
        for j, r in zip(which.tolist(), rows[which].tolist(), strict=True):
            if r in keep and r not in kept:
                fed = torch.arange(start, start + len(answers[r]) - 1, device=device)
                kept[r] = _kept(cache, j, torch.cat([mask[j, :start].nonzero().squeeze(1), fed]))

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
            if keep:
                keep_rows(finished.nonzero().squeeze(1))
            kept_rows = (~finished).nonzero().squeeze(1)
            cache.batch_select_indices(kept_rows)
            rows, token, mask, next_pos = rows[kept_rows], token[kept_rows], mask[kept_rows], next_pos[kept_rows]
            finished = finished[kept_rows]
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        logits = model(input_ids=token[:, None], attention_mask=mask, position_ids=next_pos[:, None],
                       use_cache=True, **{key: cache}).logits
        next_pos = next_pos + 1
    if keep:
        keep_rows(torch.arange(len(rows), device=device))
    return answers, kept
