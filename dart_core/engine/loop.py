"""The speculative decoding loop, one for every racer and for one stream or many: it talks to a
:class:`~dart_core.engine.drafter.Drafter` (which target layers it reads, a per-generation state, a proposed
tree or none) and knows no method by name; plain decoding is the drafter that proposes nothing, and a step without
a draft verifies the bare root.

Each stream (its own prompt, drafter state, sampling generator and stop) drafts on its own; the streams' trees
(or chains, or bare roots) are verified together in ONE target forward over a
:class:`~dart_core.engine.state.TargetState` of one row per stream, then each stream accepts and commits its own
path (``acceptance.py``), so each stream's greedy text is its own plain decoding's, token for token, and its sampled
text keeps the target's distribution. A stream that ends leaves the batch. :func:`stream` is the one-stream view:
a :class:`Step` per target forward, with the new tokens, how many came from accepted drafts, the tree size and the
measured draft / search / verify milliseconds (synchronized on CUDA).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from dart_core.engine.acceptance import SamplingConfig, accept, processed_probs
from dart_core.engine.budget import Budget, StreamBudget
from dart_core.engine.drafter import Drafter, DraftInput, PlainDecoding, finish_generation
from dart_core.engine.greedy_check import top_logits_of
from dart_core.engine.prompt import check_prompt, context_limit
from dart_core.engine.target import Interrupted, TargetModel
from dart_core.engine.timing import Stopwatch
from dart_core.engine.tree import DraftTree

__all__ = ["BatchStep", "Interrupted", "Step", "checked_request", "choose_token", "generate", "generate_batch",
           "stop_reason", "stream", "stream_batch"]


@dataclass(frozen=True)
class Step:
    """One target forward's worth of output for one stream."""

    method: str  # the racer's key (``dart_core.racers.registry``)
    tokens: list[int]  # token ids emitted by this forward; the first ``accepted`` came from drafts
    accepted: int
    tree_size: int  # nodes verified, root included (0 for the prefill and plain steps)
    draft_ms: float
    search_ms: float
    verify_ms: float  # target forward (+ acceptance and KV commit)
    prefill: bool = False
    stop_reason: str | None = None  # "eos" | "max_new_tokens" | "context" on the last step
    tree: DraftTree | None = field(default=None, repr=False)
    accepted_nodes: list[int] = field(default_factory=list, repr=False)
    # greedy only: the target's best (ids, logits) behind each emitted token (``greedy_check``)
    top_logits: list[tuple[tuple[int, ...], tuple[float, ...]]] = field(default_factory=list, repr=False)
    drafted_size: int = 0  # nodes the drafter proposed, root included, before the budget's cut (0: no draft)

    @property
    def total_ms(self) -> float:
        return self.draft_ms + self.search_ms + self.verify_ms


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


def choose_token(logits: torch.Tensor, sampling: SamplingConfig, generator: torch.Generator | None = None) -> int:
    """The target's own next token: argmax, or a sample from the processed distribution."""
    if sampling.greedy:
        return int(torch.argmax(logits))
    probs = processed_probs(logits, sampling)
    return int(torch.multinomial(probs, 1, generator=generator))


def _as_prompt(input_ids: Any) -> list[int]:
    if isinstance(input_ids, torch.Tensor):
        if input_ids.dim() == 2:
            if input_ids.shape[0] != 1:
                raise ValueError(f"batch size must be 1, got input_ids of shape {tuple(input_ids.shape)}")
            input_ids = input_ids[0]
        return [int(t) for t in input_ids.tolist()]
    return [int(t) for t in input_ids]


def checked_request(target: TargetModel, input_ids: Any, max_new_tokens: int,
                    max_length: int | None) -> tuple[list[int], int]:
    """The prompt as a list of ids and the context limit ``min(max_length, target context)`` on prompt + output;
    a :class:`~dart_core.engine.prompt.PromptError` for an empty or too long prompt, a ValueError for a token
    budget below 1 (every racer's loop checks the same)."""
    prompt = _as_prompt(input_ids)
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    limit = context_limit(target.max_context, max_length)
    check_prompt(prompt, limit)
    return prompt, limit


def stop_reason(stopped: bool, emitted: int, max_new_tokens: int, length: int, limit: int) -> str | None:
    """Why a stream ends after this step: a stop token (``eos``), its token budget, the context limit; or None."""
    if stopped:
        return "eos"
    if emitted >= max_new_tokens:
        return "max_new_tokens"
    return "context" if length >= limit else None


@dataclass
class _Stream:
    """One stream's own side of the loop: its request, drafter state, generator, and what the drafter is shown
    next (the features of the rows it has not seen and the token following each)."""

    prompt: list[int]
    limit: int
    dstate: Any
    generator: torch.Generator | None
    context: np.ndarray  # prompt + output, written in place (views go to the drafter)
    length: int = 0
    emitted: int = 0
    feats: torch.Tensor | None = None
    new_ids: list[int] = field(default_factory=list)
    ended: bool = False
    budget: StreamBudget | None = None

    def end(self, drafter: Drafter) -> None:
        """The stream is over (done, or its generation closed early): a drafter that remembers is told, once."""
        if not self.ended:
            self.ended = True
            finish_generation(drafter, self.dstate, self.context[: self.length], len(self.prompt))

    def emit(self, tokens: list[int], stops: frozenset[int], max_new_tokens: int) -> tuple[list[int], str | None]:
        """The one emit rule: nothing past a stop token or past the room left; the tokens kept and why the stream
        ends (None: it goes on)."""
        room = min(self.limit - self.length, max_new_tokens - self.emitted)
        stopped = False
        for i, t in enumerate(tokens[:room]):
            if t in stops:
                tokens, stopped = tokens[: i + 1], True
                break
        tokens = tokens[:room]
        self.context[self.length : self.length + len(tokens)] = tokens
        self.length += len(tokens)
        self.emitted += len(tokens)
        return tokens, stop_reason(stopped, self.emitted, max_new_tokens, self.length, self.limit)


def _decode(
    target: TargetModel,
    prompts: Sequence[Any],
    drafter: Drafter | None,
    settings: Any,
    sampling: SamplingConfig | None,
    max_new_tokens: int,
    max_length: int | None,
    stop_token_ids: Iterable[int],
    generators: Sequence[torch.Generator | None],
    interrupt: Callable[[], bool] | None,
    budget: Budget | None = None,
) -> Iterator[BatchStep]:
    """The loop itself: a prefill of every prompt, then steps of draft → the budget's cut → one verify of every
    live stream's tree → each stream's acceptance, commit and emit, until every stream has ended."""
    sampling = sampling or SamplingConfig()
    drafter = drafter if drafter is not None else PlainDecoding()
    stops = frozenset(int(t) for t in stop_token_ids)
    method, layers, greedy = drafter.key, drafter.feature_layers, sampling.greedy  # layers None: the target's
    streams = []
    for p, gen in zip(prompts, generators, strict=True):
        prompt, limit = checked_request(target, p, max_new_tokens, max_length)
        streams.append(_Stream(prompt=prompt, limit=limit, dstate=drafter.new_state(settings), generator=gen,
                               context=np.zeros(limit + 1, dtype=np.int32),
                               budget=budget.new_stream() if budget is not None else None))
    try:
        state = target.new_state(len(streams))
        with Stopwatch(target.device) as sw:
            logits, feats = target.prefill_rows(state, [s.prompt for s in streams], layers, interrupt=interrupt)
            first = [choose_token(logits[b], sampling, s.generator) for b, s in enumerate(streams)]
        out: dict[int, Step] = {}
        live: list[int] = []
        for b, (s, x) in enumerate(zip(streams, first, strict=True)):
            s.context[: len(s.prompt)] = s.prompt
            s.length = len(s.prompt)
            tokens, reason = s.emit([x], stops, max_new_tokens)
            s.feats, s.new_ids = feats[b], [*s.prompt[1:], x]  # the token following each row the drafter has not seen
            out[b] = Step(method=method, tokens=tokens, accepted=0, tree_size=0, draft_ms=0.0, search_ms=0.0,
                          verify_ms=sw.ms, prefill=True, stop_reason=reason,
                          top_logits=top_logits_of(logits[b][None]) if greedy else [])
            if not reason:
                live.append(b)
            else:
                s.end(drafter)
        yield BatchStep(steps=out, wall_ms=sw.ms, rows=len(streams), width=state.width, committed=sum(state.lengths))
        if live and len(live) < len(streams):
            target.keep_rows(state, live)
        while live:
            width, committed = state.width, sum(state.lengths)
            with Stopwatch(target.device) as wall:
                trees, proposals, unseen = [], [], []
                # a stream whose drafting does not pay the batch decodes plainly, its drafter shown the rows later
                drafting = budget.drafting([streams[b].budget for b in live]) if budget is not None \
                    else [True] * len(live)  # type: ignore[arg-type]
                for b, drafts in zip(live, drafting, strict=True):
                    s = streams[b]
                    room = min(s.limit - s.length, max_new_tokens - s.emitted)  # tokens this step may still emit
                    unseen.append(not drafts)
                    limit = budget.depth_limit(s.budget) if budget is not None else None  # type: ignore[arg-type]
                    proposal = drafter.propose(s.dstate, DraftInput(s.feats, torch.tensor(s.new_ids),
                                                                     s.context[: s.length], stops, len(s.prompt),
                                                                     limit)
                                               ) if drafts else None
                    # no draft: the bare root, one token decoded (with the drafter's features, if any)
                    trees.append(proposal.tree.truncate(room - 1) if proposal is not None
                                 else DraftTree([s.new_ids[-1]], [-1]))
                    proposals.append(proposal)
                as_drafted = trees
                if budget is not None and any(p is not None for p in proposals):
                    trees = budget.cut(as_drafted, [streams[b].budget for b in live],
                                       sum(p.draft_ms + p.search_ms for p in proposals if p is not None))
                with Stopwatch(target.device) as sw:
                    logits, tfeats = target.verify_rows(state, trees, layers)
                    results = [accept(tree, lg, sampling, streams[b].generator)
                               for b, tree, lg in zip(live, trees, logits, strict=True)]
                    target.commit_rows(state, [r.nodes for r in results])
                if budget is not None:
                    width = max(t.size for t in trees)
                    budget.observe_forward(len(live), width, sw.ms, chain=len(trees) == 1 and trees[0].is_chain)
                    for b, tree, r, p in zip(live, as_drafted, results, proposals, strict=True):
                        budget.observe(tree if p is not None else None, streams[b].budget, r.tokens)
                        if p is not None:
                            budget.paid_for(streams[b].budget, r.accepted, p.draft_ms + p.search_ms, width)
            out, still = {}, []
            for i, b in enumerate(live):
                s, tree, r, proposal = streams[b], trees[i], results[i], proposals[i]
                tokens, reason = s.emit(list(r.tokens), stops, max_new_tokens)
                picked = torch.tensor(r.nodes, device=logits[i].device)
                f = tfeats[i]
                feats = f[picked.to(f.device)] if f is not None else None
                if unseen[i]:  # the drafter was not called: these rows join the ones it has yet to see
                    s.feats = None if feats is None or s.feats is None else torch.cat([s.feats, feats])
                    s.new_ids = [*s.new_ids, *r.tokens]
                else:
                    s.feats, s.new_ids = feats, list(r.tokens)
                drafted = proposal is not None
                out[b] = Step(method=method, tokens=tokens, accepted=min(r.accepted, len(tokens)),
                              tree_size=tree.size if drafted else 0, draft_ms=proposal.draft_ms if drafted else 0.0,
                              search_ms=proposal.search_ms if drafted else 0.0, verify_ms=sw.ms, stop_reason=reason,
                              tree=tree if drafted else None, accepted_nodes=r.nodes if drafted else [],
                              top_logits=top_logits_of(logits[i][picked[: len(tokens)]]) if greedy else [],
                              drafted_size=as_drafted[i].size if drafted else 0)
                if not reason:
                    still.append(b)
                else:
                    s.end(drafter)
            yield BatchStep(steps=out, wall_ms=wall.ms, rows=len(live), width=width, committed=committed)
            if still and len(still) < len(live):
                target.keep_rows(state, [live.index(b) for b in still])
            live = still
    finally:  # also when the generation is closed early (a stopped race): every stream ends once
        for s in streams:
            s.end(drafter)


def stream(
    target: TargetModel,
    input_ids: Any,
    drafter: Drafter | None = None,
    *,
    settings: Any = None,
    sampling: SamplingConfig | None = None,
    max_new_tokens: int = 256,
    max_length: int | None = None,
    stop_token_ids: Iterable[int] = (),
    generator: torch.Generator | None = None,
    interrupt: Callable[[], bool] | None = None,
    budget: Budget | None = None,
) -> Iterator[Step]:
    """Decode one prompt with ``drafter`` (None: plain decoding) and its ``settings`` (None: its defaults).

    Stops on a stop token (emitted, then nothing after it), ``max_new_tokens``, or the context limit
    ``min(max_length, target context)`` on prompt + output. A prompt that does not fit raises ValueError.
    ``interrupt``: asked between the chunks of a long prompt's prefill (:meth:`TargetModel.prefill_rows`), which
    raises :class:`~dart_core.engine.target.Interrupted` when it says stop; between steps the caller decides.
    ``budget``: the racer's :class:`~dart_core.engine.budget.Budget`, which cuts each drafted tree where it stops
    paying (None: every tree verified as drafted)."""
    for batch in _decode(target, [input_ids], drafter, settings, sampling, max_new_tokens, max_length,
                         stop_token_ids, [generator], interrupt, budget):
        yield batch.steps[0]


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
    interrupt: Callable[[], bool] | None = None,
    budget: Budget | None = None,
) -> Iterator[BatchStep]:
    """Decode ``prompts`` together (one drafter, one drafter state per stream): one :class:`BatchStep` per target
    forward. ``generators``: one per stream for sampling (None: torch's global RNG). Each stream stops as
    :func:`stream` does; ``interrupt`` as there; ``budget``: one for the batch, its streams' nodes competing for
    one verify."""
    if not prompts:
        raise ValueError("stream_batch: no prompts given")
    gens = list(generators) if generators is not None else [None] * len(prompts)
    if len(gens) != len(prompts):
        raise ValueError(f"stream_batch: {len(gens)} generators for {len(prompts)} prompts")
    return _decode(target, prompts, drafter, settings, sampling, max_new_tokens, max_length, stop_token_ids, gens,
                   interrupt, budget)


def generate(target: TargetModel, input_ids: Any, drafter: Drafter | None = None,
             **kwargs: Any) -> tuple[list[int], list[Step]]:
    """Run :func:`stream` to the end: (new token ids, steps)."""
    steps = list(stream(target, input_ids, drafter, **kwargs))
    return [t for s in steps for t in s.tokens], steps


def generate_batch(target: TargetModel, prompts: Sequence[Any], drafter: Drafter | None = None,
                   **kwargs: Any) -> tuple[list[list[int]], list[BatchStep]]:
    """Run :func:`stream_batch` to the end: (each stream's new token ids, the batch's steps)."""
    steps = list(stream_batch(target, prompts, drafter, **kwargs))
    tokens: list[list[int]] = [[] for _ in prompts]
    for step in steps:
        for b, s in step.steps.items():
            tokens[b].extend(s.tokens)
    return tokens, steps
