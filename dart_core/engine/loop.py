"""The speculative decoding loop, one for every racer: it talks to a
:class:`~dart_core.engine.drafter.Drafter` (which target layers it reads, a per-generation state, a proposed
tree or none) and knows no method by name; plain decoding is the drafter that proposes nothing.

``stream(...)`` yields a :class:`Step` per target forward — the prefill, then one verify (or one AR forward) per
step — with the new tokens, how many came from accepted drafts, the tree size and the measured draft / search /
verify milliseconds (synchronized on CUDA). Greedy output is token-for-token the target's own greedy output;
sampling keeps the target's distribution (``verify.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from dart_core.engine.drafter import Drafter, DraftInput, PlainDecoding, Proposal
from dart_core.engine.greedy_check import top_logits_of
from dart_core.engine.prompt import check_prompt, context_limit
from dart_core.engine.target import Interrupted, TargetModel
from dart_core.engine.timing import Stopwatch
from dart_core.engine.tree import DraftTree
from dart_core.engine.verify import SamplingConfig, accept, processed_probs


@dataclass(frozen=True)
class Step:
    """One target forward's worth of output."""

    method: str  # the racer's key (``dart_core.racers.registry``)
    tokens: list[int]  # token ids emitted by this forward; the first ``accepted`` came from drafts
    accepted: int
    tree_size: int  # nodes verified, root included (0 for the prefill and AR steps)
    draft_ms: float
    search_ms: float
    verify_ms: float  # target forward (+ acceptance and KV commit)
    prefill: bool = False
    stop_reason: str | None = None  # "eos" | "max_new_tokens" | "context" on the last step
    tree: DraftTree | None = field(default=None, repr=False)
    accepted_nodes: list[int] = field(default_factory=list, repr=False)
    # greedy only: the target's best (ids, logits) behind each emitted token (``greedy_check``)
    top_logits: list[tuple[tuple[int, ...], tuple[float, ...]]] = field(default_factory=list, repr=False)

    @property
    def total_ms(self) -> float:
        return self.draft_ms + self.search_ms + self.verify_ms


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


def _cut(tokens: list[int], stops: frozenset[int], room: int) -> tuple[list[int], bool]:
    """Emit nothing past a stop token or past ``room`` tokens; says whether a stop token ended it."""
    for i, t in enumerate(tokens[:room]):
        if t in stops:
            return tokens[: i + 1], True
    return tokens[:room], False


def _stop_reason(stopped: bool, emitted: int, max_new_tokens: int, length: int, limit: int) -> str | None:
    if stopped:
        return "eos"
    if emitted >= max_new_tokens:
        return "max_new_tokens"
    return "context" if length >= limit else None


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
) -> Iterator[Step]:
    """Decode with ``drafter`` (None: plain decoding) and its ``settings`` (None: its defaults) on ``target``.

    Stops on a stop token (emitted, then nothing after it), ``max_new_tokens``, or the context limit
    ``min(max_length, target context)`` on prompt + output. A prompt that does not fit raises ValueError.
    ``interrupt``: asked between the chunks of a long prompt's prefill (:meth:`TargetModel.prefill`), which
    raises :class:`~dart_core.engine.target.Interrupted` when it says stop; between steps the caller decides."""
    sampling = sampling or SamplingConfig()
    drafter = drafter if drafter is not None else PlainDecoding()
    prompt, limit = checked_request(target, input_ids, max_new_tokens, max_length)
    stops = frozenset(int(t) for t in stop_token_ids)
    method, layers = drafter.key, drafter.feature_layers  # None: the target's default layers
    dstate = drafter.new_state(settings)
    state = target.new_state()
    ids = torch.tensor([prompt], device=target.device)
    with Stopwatch(target.device) as sw:
        logits, feats = target.prefill(state, ids, layers, interrupt=interrupt)
        x = choose_token(logits, sampling, generator)
    greedy = sampling.greedy
    context = np.zeros(limit + 1, dtype=np.int32)  # prompt + output, written in place (views go to the drafter)
    length = len(prompt) + 1
    context[:length] = [*prompt, x]
    emitted = 1
    reason = _stop_reason(x in stops, emitted, max_new_tokens, length, limit)
    yield Step(method, [x], 0, 0, 0.0, 0.0, sw.ms, prefill=True, stop_reason=reason,
               top_logits=top_logits_of(logits[None]) if greedy else [])
    if reason:
        return

    new_ids = [*prompt[1:], x]  # the token following each row whose features the drafter has not seen yet
    while True:
        room = min(limit - length, max_new_tokens - emitted)  # tokens this step may still emit
        proposal = drafter.propose(dstate, DraftInput(feats, torch.tensor(new_ids), context[:length], stops))
        if proposal is None:  # no draft: the target decodes one token (with the drafter's features, if any)
            r = _plain_round(target, state, x, layers, sampling, generator, stops)
        else:
            r = _tree_round(target, state, proposal, room, layers, sampling, generator, stops)
        feats, new_ids, x = r.feats, r.new_ids, r.new_ids[-1]
        context[length : length + len(r.tokens)] = r.tokens
        length += len(r.tokens)
        emitted += len(r.tokens)
        reason = _stop_reason(r.stopped, emitted, max_new_tokens, length, limit)
        yield Step(method, r.tokens, r.accepted, r.tree.size if r.tree is not None else 0, r.draft_ms, r.search_ms,
                   r.verify_ms, stop_reason=reason, tree=r.tree, accepted_nodes=r.nodes,
                   top_logits=r.top)
        if reason:
            return


@dataclass
class _Round:
    """What one step of the loop decided: the tokens it emits (and whether a stop token ends them), how many came
    from accepted drafts, the tree verified (None: a plain step) and its accepted nodes, the measured ms, the best
    logits behind each token (for the greedy check), and what the drafter is shown next (the features of the new
    rows and the token that follows each)."""

    tokens: list[int]
    stopped: bool
    accepted: int
    tree: DraftTree | None
    nodes: list[int]
    draft_ms: float
    search_ms: float
    verify_ms: float
    top: list[Any]
    feats: torch.Tensor | None
    new_ids: list[int]


def _plain_round(target: TargetModel, state: Any, x: int, layers: Any, sampling: SamplingConfig,
                 generator: torch.Generator | None, stops: frozenset[int]) -> _Round:
    """One target forward of the last token, one token chosen."""
    with Stopwatch(target.device) as sw:
        logits, feats = target.forward_tokens(state, [x], layers=layers)
        x = choose_token(logits, sampling, generator)
    top = top_logits_of(logits[None]) if sampling.greedy else []
    return _Round([x], x in stops, 0, None, [], 0.0, 0.0, sw.ms, top, feats, [x])


def _tree_round(target: TargetModel, state: Any, proposal: Proposal, room: int, layers: Any,
                sampling: SamplingConfig, generator: torch.Generator | None, stops: frozenset[int]) -> _Round:
    """The proposed tree (cut to what may still be emitted) verified in one forward, its accepted path committed."""
    tree = proposal.tree.truncate(room - 1)
    with Stopwatch(target.device) as sw:
        logits, tfeats = target.verify(state, tree, layers)
        result = accept(tree, logits, sampling, generator)
        target.commit(state, result.nodes)
    tokens, stopped = _cut(result.tokens, stops, room)
    picked = torch.tensor(result.nodes, device=logits.device)
    top = top_logits_of(logits[picked[: len(tokens)]]) if sampling.greedy else []
    feats = tfeats[picked.to(tfeats.device)] if tfeats is not None else None
    return _Round(tokens, stopped, min(result.accepted, len(tokens)), tree, result.nodes, proposal.draft_ms,
                  proposal.search_ms, sw.ms, top, feats, list(result.tokens))


__all__ = ["Interrupted", "Step", "checked_request", "generate", "stream"]


def generate(target: TargetModel, input_ids: Any, drafter: Drafter | None = None,
             **kwargs: Any) -> tuple[list[int], list[Step]]:
    """Run :func:`stream` to the end: (new token ids, steps)."""
    steps = list(stream(target, input_ids, drafter, **kwargs))
    return [t for s in steps for t in s.tokens], steps

