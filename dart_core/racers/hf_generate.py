"""Hugging Face ``generate`` as a racer: the user's real alternative, on the same loaded weights, dtype and device.

``stream_hf_generate`` runs ``model.generate`` (its own decoding loop, KV cache and masks: nothing of ours) on a
thread of its own and hands it the floor one token at a time: a streamer blocks ``generate`` after every token
until the consumer asks for the next one, so it yields :class:`~dart_core.engine.loop.Step` s like the engine's loop
does, each timed from the hand-over to the token (the prefill with the first token). A race therefore interleaves
it with the other racers one step at a time, and closing the iterator stops ``generate`` at the next token.
Under greedy decoding every token also carries the target's best logits (a logits processor reads them), so the
tie-aware greedy check (:mod:`dart_core.engine.greedy_check`) treats this lane like any other.

When the target runs the fast path, ``generate`` gets a static cache of its own, of the same rows (lent from a pool,
so its shape and addresses stay fixed): on a GPU transformers then compiles its decoding forward (its own fast
path) once, so the first generation after loading (the warm-up) pays the compile and the raced ones do not.
"""

from __future__ import annotations

import queue
import threading
import time
import weakref
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import torch

from dart_core.engine.acceptance import SamplingConfig
from dart_core.engine.cpu_linear import torch_work_on_another_thread
from dart_core.engine.graphs import SlotPool
from dart_core.engine.greedy_check import top_logits_of
from dart_core.engine.loop import Step, checked_request, stop_reason
from dart_core.engine.target import TargetModel
from dart_core.engine.timing import sync

KEY = "hf"


class _Cancelled(Exception):
    """Raised inside ``generate`` (from the streamer) when the consumer closed the stream."""


class _Handoff:
    """The streamer ``generate`` calls; it parks the generating thread after each token until ``resume``."""

    def __init__(self, device: torch.device) -> None:
        self.events: queue.Queue[tuple[str, Any, float]] = queue.Queue()
        self._go = threading.Event()
        self.cancelled = False
        self.device = device
        self.prompt_seen = False
        self.top: list[Any] = []  # each step's best (ids, logits), read by _Best

    # called by generate (the generating thread)
    def put(self, value: torch.Tensor) -> None:
        if not self.prompt_seen:  # generate first streams the prompt itself
            self.prompt_seen = True
            return
        sync(self.device)
        token = int(value.reshape(-1)[0])
        self.events.put(("token", token, time.perf_counter()))
        self._go.wait()
        self._go.clear()
        if self.cancelled:
            raise _Cancelled

    def end(self) -> None:
        self.events.put(("end", None, time.perf_counter()))

    # called by the consumer
    def resume(self) -> float:
        t = time.perf_counter()
        self._go.set()
        return t


class _Best:
    """A logits processor that keeps the best (ids, logits) of every step's raw scores and changes nothing."""

    def __init__(self, handoff: _Handoff) -> None:
        self.handoff = handoff

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        self.handoff.top.append(top_logits_of(scores[:1].float())[0])
        return scores


def generation_config(model: Any, sampling: SamplingConfig, max_new_tokens: int, stops: list[int]) -> Any:
    """Every field that decides the output set explicitly, so the checkpoint's own defaults (Qwen3 ships
    ``do_sample=True``, temperature 0.6, top-k 20) cannot change what is raced."""
    from transformers import GenerationConfig

    pad = stops[0] if stops else getattr(model.generation_config, "pad_token_id", None)
    greedy = sampling.greedy  # greedy: the warpers' neutral values (any other is "not valid" without sampling)
    return GenerationConfig(
        max_new_tokens=max_new_tokens, min_new_tokens=0, do_sample=not greedy,
        temperature=1.0 if greedy else sampling.temperature, top_p=1.0 if greedy else sampling.top_p,
        top_k=50 if greedy else sampling.top_k, repetition_penalty=1.0, num_beams=1, use_cache=True,
        # no stop ids: an id no token has, so the checkpoint's own EOS is not filled in for an unset field
        eos_token_id=stops or [-1], pad_token_id=pad if pad is not None else 0,
    )


_POOLS: weakref.WeakKeyDictionary[TargetModel, SlotPool[Any]] = weakref.WeakKeyDictionary()


def static_cache(target: TargetModel, owner: object) -> Any:
    """A ``StaticCache`` as large as the target's fast-path caches for ``owner``'s ``generate``, emptied, or None off
    the fast path (``generate``'s own dynamic cache). The caches are kept in a pool per target and lent until
    ``owner`` dies: one fixed shape at fixed addresses, so on a GPU transformers compiles and records its decoding
    forward once, not once per generation."""
    if target.static_capacity is None:
        return None
    from transformers import StaticCache

    rows = target.static_capacity
    pool = _POOLS.get(target)
    if pool is None:
        pool = _POOLS[target] = SlotPool(lambda: StaticCache(config=target.config, max_cache_len=rows))
    cache = pool.slots[pool.lend(owner)]
    cache.reset()
    return cache


def stream_hf_generate(
    target: TargetModel,
    input_ids: Any,
    drafter: Any = None,
    *,
    settings: Any = None,
    sampling: SamplingConfig | None = None,
    max_new_tokens: int = 256,
    max_length: int | None = None,
    stop_token_ids: Iterable[int] = (),
    generator: torch.Generator | None = None,
    interrupt: Any = None,
) -> Iterator[Step]:
    """``model.generate`` on ``target``'s model, one :class:`Step` per token (the first is the prefill's), with
    :func:`dart_core.engine.loop.stream`'s arguments and stop rules (``drafter`` and ``settings`` are not used:
    it drafts nothing; ``interrupt`` neither: ``generate`` prefills in one forward, which cannot be cut short).
    Sampling draws from the global RNG, seeded from ``generator``'s seed: ``generate`` takes
    no generator, so its samples differ from the engine's lanes but follow the same distribution."""
    sampling = sampling or SamplingConfig()
    prompt, limit = checked_request(target, input_ids, max_new_tokens, max_length)
    stops = sorted({int(t) for t in stop_token_ids})
    from transformers import LogitsProcessorList

    model, device = target.model, target.device
    budget = min(max_new_tokens, limit - len(prompt))
    config = generation_config(model, sampling, budget, stops)
    handoff = _Handoff(device)
    cache = static_cache(target, handoff)
    ids = torch.tensor([prompt], device=device)
    processors = LogitsProcessorList([_Best(handoff)] if sampling.greedy else [])
    failure: list[BaseException] = []

    def work() -> None:
        try:
            if not sampling.greedy and generator is not None:
                torch.manual_seed(generator.initial_seed())
            with torch.no_grad():
                model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=config,
                               logits_processor=processors, streamer=handoff,
                               **({} if cache is None else {target.cache_arg: cache}))
        except _Cancelled:
            pass
        except BaseException as e:  # handed to the consumer, raised there
            failure.append(e)
        finally:
            handoff.end()

    thread = threading.Thread(target=work, name="hf-generate", daemon=True)
    with torch_work_on_another_thread():  # PyTorch's CPU kernels while it lives (dart_core.engine.cpu_linear)
        started = time.perf_counter()
        thread.start()
        emitted = 0
        try:
            while True:
                kind, token, t = handoff.events.get()
                if kind == "end":
                    if failure:
                        raise failure[0]
                    return
                emitted += 1
                top = [handoff.top[emitted - 1]] if sampling.greedy else []
                reason = stop_reason(token in stops, emitted, max_new_tokens, len(prompt) + emitted, limit)
                yield Step(method=KEY, tokens=[token], accepted=0, tree_size=0, draft_ms=0.0, search_ms=0.0,
                           verify_ms=(t - started) * 1e3, prefill=emitted == 1, stop_reason=reason, top_logits=top)
                if reason:
                    return
                started = handoff.resume()
        finally:
            handoff.cancelled = True
            handoff.resume()
            thread.join()


class _BestRows:
    """A logits processor that keeps every row's best (ids, logits) of each step's raw scores, changing nothing."""

    def __init__(self) -> None:
        self.top: list[list[Any]] = []  # step -> row -> (ids, logits)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        self.top.append(top_logits_of(scores.float()))
        return scores


def generate_hf_batch(
    target: TargetModel,
    prompts: Sequence[Any],
    *,
    sampling: SamplingConfig | None = None,
    max_new_tokens: int = 256,
    max_length: int | None = None,
    stop_token_ids: Iterable[int] = (),
    seed: int = 0,
) -> tuple[list[list[int]], list[list[Any]]]:
    """``model.generate`` on all ``prompts`` at once, left-padded with an attention mask (how a user batches it):
    each stream's new tokens, cut after its first stop token (and at the context limit), and under greedy
    decoding the target's best logits behind each of them (for the tie-aware check). Sampling seeds torch's global
    RNG with ``seed``. The static cache of the fast path is not used: each batch has its own shape."""
    sampling = sampling or SamplingConfig()
    if not prompts:
        raise ValueError("generate_hf_batch: no prompts given")
    checked = [checked_request(target, p, max_new_tokens, max_length) for p in prompts]
    stops = sorted({int(t) for t in stop_token_ids})
    from transformers import LogitsProcessorList

    model, device = target.model, target.device
    budget = min(max_new_tokens, *(limit - len(p) for p, limit in checked))
    config = generation_config(model, sampling, budget, stops)
    width = max(len(p) for p, _ in checked)
    ids = torch.full((len(checked), width), int(config.pad_token_id), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for b, (p, _) in enumerate(checked):
        ids[b, width - len(p):] = torch.tensor(p)
        mask[b, width - len(p):] = 1
    best = _BestRows()
    if not sampling.greedy:
        torch.manual_seed(seed)
    with torch.no_grad():
        out = model.generate(ids.to(device), attention_mask=mask.to(device), generation_config=config,
                             logits_processor=LogitsProcessorList([best] if sampling.greedy else []))
    tokens, tops = [], []
    for b, row in enumerate(out[:, width:].tolist()):
        n = next((i + 1 for i, t in enumerate(row) if t in stops), len(row))
        tokens.append(row[:n])
        tops.append([step[b] for step in best.top[:n]] if sampling.greedy else [])
    return tokens, tops
