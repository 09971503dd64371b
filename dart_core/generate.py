"""The speculative decoding loop, one for every method: DART, EAGLE-3, or none (plain autoregressive).

``stream(...)`` yields a :class:`Step` per target forward — the prefill, then one verify (or one AR forward) per
step — with the new tokens, how many came from accepted drafts, the tree size and the measured draft / search /
verify milliseconds (synchronized on CUDA). Greedy output is token-for-token the target's own greedy output;
sampling keeps the target's distribution (``verify.py``). Also ``python -m dart_core.generate``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from dart_core.target import TargetModel
from dart_core.timing import Stopwatch
from dart_core.tree import DraftTree
from dart_core.verify import SamplingConfig, accept, processed_probs


@dataclass(frozen=True)
class DartSettings:
    """DART's tree: top-k per level, beam width and nodes below the root (reference defaults)."""

    top_k: int = 25
    beam_width: int = 20
    max_nodes: int = 60
    ngram_weight: float = 0.5


@dataclass(frozen=True)
class Eagle3Settings:
    """EAGLE-3's tree: nodes including the root, expansion depth, top-k per node (reference defaults)."""

    total_tokens: int = 60
    depth: int = 7
    top_k: int = 10


def tree_defaults(device: str | torch.device) -> tuple[DartSettings, Eagle3Settings]:
    """Tree sizes for a device. On accelerators, the reference's (a 60-node verify costs about what a 1-node one
    does). On CPU a verify forward costs time in proportion to its nodes, so smaller trees win: DART 16 nodes,
    EAGLE-3 21 nodes / depth 6 / top-k 4, the fastest settings measured on the bundle (README, "End-to-end
    benchmark")."""
    if torch.device(device).type == "cpu":
        return DartSettings(max_nodes=16), Eagle3Settings(total_tokens=21, depth=6, top_k=4)
    return DartSettings(), Eagle3Settings()


@dataclass(frozen=True)
class Step:
    """One target forward's worth of output."""

    method: str  # "dart" | "eagle3" | "ar"
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

    @property
    def total_ms(self) -> float:
        return self.draft_ms + self.search_ms + self.verify_ms


@dataclass(frozen=True)
class RunStats:
    method: str
    new_tokens: int
    forwards: int  # verify / AR forwards after the prefill
    tau: float  # tokens per verify forward, bonus included (the paper's τ); 1.0 for AR
    tokens_per_s: float  # all emitted tokens over all measured time, prefill included
    draft_ms: float
    search_ms: float
    verify_ms: float
    prefill_ms: float

    @property
    def total_ms(self) -> float:
        return self.draft_ms + self.search_ms + self.verify_ms + self.prefill_ms

    @property
    def draft_ms_per_step(self) -> float:
        return self.draft_ms / max(self.forwards, 1)

    @property
    def search_ms_per_step(self) -> float:
        return self.search_ms / max(self.forwards, 1)

    @property
    def verify_ms_per_step(self) -> float:
        return self.verify_ms / max(self.forwards, 1)

    def speedup_over(self, baseline: RunStats | None) -> float | None:
        """tokens/s over the baseline's (AR's), each on its own clock; None without a usable baseline."""
        if baseline is None or baseline.tokens_per_s <= 0:
            return None
        return self.tokens_per_s / baseline.tokens_per_s


def summarize(steps: Sequence[Step]) -> RunStats:
    """τ, tokens/s and the time split of one generation's steps."""
    if not steps:
        raise ValueError("no steps to summarize")
    body = [s for s in steps if not s.prefill]
    prefill_ms = sum(s.total_ms for s in steps if s.prefill)
    new_tokens = sum(len(s.tokens) for s in steps)
    total_ms = sum(s.total_ms for s in steps)
    return RunStats(
        method=steps[0].method,
        new_tokens=new_tokens,
        forwards=len(body),
        tau=sum(len(s.tokens) for s in body) / len(body) if body else 0.0,
        tokens_per_s=new_tokens / (total_ms / 1e3) if total_ms > 0 else 0.0,
        draft_ms=sum(s.draft_ms for s in body),
        search_ms=sum(s.search_ms for s in body),
        verify_ms=sum(s.verify_ms for s in body),
        prefill_ms=prefill_ms,
    )


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
    drafter: Any = None,
    *,
    store: Any = None,
    sampling: SamplingConfig | None = None,
    max_new_tokens: int = 256,
    max_length: int | None = None,
    stop_token_ids: Iterable[int] = (),
    generator: torch.Generator | None = None,
    dart: DartSettings | None = None,
    eagle3: Eagle3Settings | None = None,
) -> Iterator[Step]:
    """Decode with ``drafter`` (a DartDrafter, an Eagle3Drafter, or None for plain AR) on ``target``.

    Stops on a stop token (emitted, then nothing after it), ``max_new_tokens``, or the context limit
    ``min(max_length, target context)`` on prompt + output. A prompt that does not fit raises ValueError."""
    sampling = sampling or SamplingConfig()
    prompt = _as_prompt(input_ids)
    stops = frozenset(int(t) for t in stop_token_ids)
    limit = target.max_context if max_length is None else min(int(max_length), target.max_context)
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if not prompt:
        raise ValueError("the prompt is empty: give at least one token")
    if len(prompt) >= limit:
        raise ValueError(f"the prompt has {len(prompt)} tokens but the context limit is {limit}: "
                         "shorten it or raise max_length")
    method = "ar" if drafter is None else drafter.kind
    state = target.new_state()
    ids = torch.tensor([prompt], device=target.device)
    with Stopwatch(target.device) as sw:
        logits, feats = target.prefill(state, ids)
        x = choose_token(logits, sampling, generator)
    context = [*prompt, x]
    emitted = 1
    reason = _stop_reason(x in stops, emitted, max_new_tokens, len(context), limit)
    yield Step(method, [x], 0, 0, 0.0, 0.0, sw.ms, prefill=True, stop_reason=reason)
    if reason:
        return

    if drafter is None:
        while True:
            with Stopwatch(target.device) as sw:
                logits, _ = target.forward_tokens(state, [x], features=False)
                x = choose_token(logits, sampling, generator)
            context.append(x)
            emitted += 1
            reason = _stop_reason(x in stops, emitted, max_new_tokens, len(context), limit)
            yield Step(method, [x], 0, 0, 0.0, 0.0, sw.ms, stop_reason=reason)
            if reason:
                return

    dstate = drafter.new_state()
    if method == "dart":
        s = dart or DartSettings()
        opts: dict[str, Any] = {"store": store, "top_k": s.top_k, "beam_width": s.beam_width,
                                "max_nodes": s.max_nodes, "ngram_weight": s.ngram_weight}
    else:
        e = eagle3 or Eagle3Settings()
        opts = {"total_tokens": e.total_tokens, "depth": e.depth, "top_k": e.top_k}
    new_feats, new_shifted = feats, torch.tensor([*prompt[1:], x])
    while True:
        room = min(limit - len(context), max_new_tokens - emitted)  # tokens this step may still emit
        proposal = drafter.propose(dstate, new_feats, new_shifted, np.asarray(context, dtype=np.int32), **opts)
        tree = proposal.tree.truncate(room - 1)
        with Stopwatch(target.device) as sw:
            logits, tfeats = target.verify(state, tree)
            result = accept(tree, logits, sampling, generator)
            target.commit(state, result.nodes)
        tokens, stopped = _cut(result.tokens, stops, room)
        context.extend(tokens)
        emitted += len(tokens)
        reason = _stop_reason(stopped, emitted, max_new_tokens, len(context), limit)
        yield Step(method, tokens, min(result.accepted, len(tokens)), tree.size, proposal.draft_ms,
                   proposal.search_ms, sw.ms, stop_reason=reason, tree=tree, accepted_nodes=result.nodes)
        if reason:
            return
        nodes = torch.tensor(result.nodes, device=tfeats.device)
        new_feats = tfeats[nodes]
        new_shifted = torch.tensor(result.tokens)


def generate(target: TargetModel, input_ids: Any, drafter: Any = None, **kwargs: Any) -> tuple[list[int], list[Step]]:
    """Run :func:`stream` to the end: (new token ids, steps)."""
    steps = list(stream(target, input_ids, drafter, **kwargs))
    return [t for s in steps for t in s.tokens], steps


if __name__ == "__main__":
    from dart_core.generate_cli import main

    raise SystemExit(main())
