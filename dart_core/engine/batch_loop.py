"""The speculative decoding loop for several streams at once on the one shared target.

Each stream (its own prompt, drafter state, sampling generator and stop) drafts on its own; the streams' trees (or
chains, or the bare root where a drafter proposes nothing: plain decoding) are verified together in ONE target
forward (:class:`~dart_core.engine.batch.BatchState`), then each stream accepts and commits its own path by the same
rules as the single-stream loop (:mod:`dart_core.engine.loop`), so each stream's greedy text is its own plain
decoding's and its sampled text keeps the target's distribution. A stream that ends leaves the batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from dart_core.engine.batch import BatchState
from dart_core.engine.drafter import Drafter, DraftInput, PlainDecoding
from dart_core.engine.greedy_check import top_logits_of
from dart_core.engine.loop import Step, _cut, _stop_reason, checked_request, choose_token
from dart_core.engine.target import TargetModel
from dart_core.engine.timing import Stopwatch
from dart_core.engine.tree import DraftTree
from dart_core.engine.verify import SamplingConfig, accept

__all__ = ["BatchStep", "generate_batch", "stream_batch"]


@dataclass(frozen=True)
class BatchStep:
    """One target forward of the batch: each stream's :class:`Step` (stream index → step; streams that ended
    earlier are absent) and the wall milliseconds of the whole step, every stream's drafting included."""

    steps: dict[int, Step]
    wall_ms: float
    rows: int  # streams in the forward
    # the cache's columns before the forward and the streams' committed tokens in them: the columns a row's mask
    # hides (rows * width - committed) are the price of one rectangular cache for rows of different lengths
    width: int = 0
    committed: int = 0


@dataclass
class _Stream:
    prompt: list[int]
    limit: int
    dstate: Any
    context: np.ndarray
    length: int = 0
    emitted: int = 0
    x: int = 0
    feats: torch.Tensor | None = None
    new_ids: list[int] | None = None


def stream_batch(
    target: TargetModel,
    prompts: Sequence[Any],
    drafter: Drafter | None = None,
    *,
    settings: Any = None,
    sampling: SamplingConfig | None = None,
    max_new_tokens: int = 256,
    max_length: int | None = None,
    stop_token_ids: Iterable[int] = (),
    generators: Sequence[torch.Generator | None] | None = None,
) -> Iterator[BatchStep]:
    """Decode ``prompts`` together with ``drafter`` (None: plain decoding; one drafter, one state per stream)
    and its ``settings``. ``generators``: one per stream for sampling (None: torch's global RNG). Each stream
    stops as :func:`dart_core.engine.loop.stream` does (a stop token, ``max_new_tokens``, the context limit)."""
    sampling = sampling or SamplingConfig()
    drafter = drafter if drafter is not None else PlainDecoding()
    if not prompts:
        raise ValueError("stream_batch: no prompts given")
    gens = list(generators) if generators is not None else [None] * len(prompts)
    if len(gens) != len(prompts):
        raise ValueError(f"stream_batch: {len(gens)} generators for {len(prompts)} prompts")
    stops = frozenset(int(t) for t in stop_token_ids)
    layers = drafter.feature_layers
    layers = target.feature_layers if layers is None else tuple(layers)
    streams = []
    for p in prompts:
        prompt, limit = checked_request(target, p, max_new_tokens, max_length)
        streams.append(_Stream(prompt, limit, drafter.new_state(settings), np.zeros(limit + 1, dtype=np.int32)))
    method, greedy = drafter.key, sampling.greedy
    batch = BatchState.new(target)
    with Stopwatch(target.device) as sw:
        logits, feats = batch.prefill([s.prompt for s in streams], layers)
        first = [choose_token(logits[b], sampling, gens[b]) for b in range(len(streams))]
    out: dict[int, Step] = {}
    active: list[int] = []
    for b, (s, x) in enumerate(zip(streams, first, strict=True)):
        s.x, s.feats, s.new_ids = x, feats[b], [*s.prompt[1:], x]
        s.length = len(s.prompt) + 1
        s.context[: s.length] = [*s.prompt, x]
        s.emitted = 1
        reason = _stop_reason(x in stops, 1, max_new_tokens, s.length, s.limit)
        out[b] = Step(method, [x], 0, 0, 0.0, 0.0, sw.ms, prefill=True, stop_reason=reason,
                      top_logits=top_logits_of(logits[b][None]) if greedy else [])
        if not reason:
            active.append(b)
    yield BatchStep(out, sw.ms, len(streams), batch.width, sum(batch.lengths))
    batch.keep(active)
    while active:
        width, committed = batch.width, sum(batch.lengths)
        with Stopwatch(target.device) as wall:
            trees, proposals, rooms = [], [], []
            for b in active:
                s = streams[b]
                room = min(s.limit - s.length, max_new_tokens - s.emitted)
                proposal = drafter.propose(s.dstate, DraftInput(s.feats, torch.tensor(s.new_ids),
                                                                 s.context[: s.length], stops))
                tree = proposal.tree.truncate(room - 1) if proposal is not None else DraftTree([s.x], [-1])
                trees.append(tree)
                proposals.append(proposal)
                rooms.append(room)
            with Stopwatch(target.device) as sw:
                logits, tfeats = batch.verify(trees, layers)
                results = [accept(tree, lg, sampling, gens[b])
                           for b, tree, lg in zip(active, trees, logits, strict=True)]
                batch.commit([r.nodes for r in results])
        out, still = {}, []
        for i, b in enumerate(active):
            s, tree, r, proposal = streams[b], trees[i], results[i], proposals[i]
            tokens, stopped = _cut(r.tokens, stops, rooms[i])
            picked = torch.tensor(r.nodes, device=logits[i].device)
            top = top_logits_of(logits[i][picked[: len(tokens)]]) if greedy else []
            f = tfeats[i]
            s.feats = f[picked.to(f.device)] if f is not None else None
            s.new_ids = list(r.tokens)
            s.x = s.new_ids[-1]
            s.context[s.length : s.length + len(tokens)] = tokens
            s.length += len(tokens)
            s.emitted += len(tokens)
            reason = _stop_reason(stopped, s.emitted, max_new_tokens, s.length, s.limit)
            drafted = proposal is not None
            out[b] = Step(method, tokens, min(r.accepted, len(tokens)), tree.size if drafted else 0,
                          proposal.draft_ms if drafted else 0.0, proposal.search_ms if drafted else 0.0, sw.ms,
                          stop_reason=reason, tree=tree if drafted else None,
                          accepted_nodes=r.nodes if drafted else [], top_logits=top)  # a plain step: none, as alone
            if not reason:
                still.append(b)
        yield BatchStep(out, wall.ms, len(active), width, committed)
        batch.keep([active.index(b) for b in still])
        active = still


def generate_batch(target: TargetModel, prompts: Sequence[Any], drafter: Drafter | None = None,
                   **kwargs: Any) -> tuple[list[list[int]], list[BatchStep]]:
    """Run :func:`stream_batch` to the end: (each stream's new token ids, the batch's steps)."""
    steps = list(stream_batch(target, prompts, drafter, **kwargs))
    tokens: list[list[int]] = [[] for _ in prompts]
    for step in steps:
        for b, s in step.steps.items():
            tokens[b].extend(s.tokens)
    return tokens, steps
