"""llama.cpp as a racer: the engine a laptop user would otherwise run, on the very weights of the loaded target.

The target is written to GGUF in its own dtype (``dart_core.loading.gguf_export``) and decoded by llama.cpp through
llama-cpp-python (the optional extra ``pip install '.[llamacpp]'``; ``bash scripts/dev.sh llamacpp`` builds it for
this CPU), with its own kernels, KV cache and loop: nothing of ours but the clock. Two rows: plain decoding
(``llamacpp``), and llama-cpp-python's own prompt-lookup speculative decoding (``llamacpp-lookup``, its
``LlamaPromptLookupDecoding`` drafting from the context, verified by llama.cpp in one batch).

``stream_llamacpp`` drives ``Llama.generate`` one token at a time and groups the tokens one llama.cpp forward
produced into one :class:`~dart_core.engine.loop.Step` (the prefill's first token alone; a lookup step's accepted
draft plus its bonus token), timed from the hand-over to its last token, so τ and the per-step figures mean what they
mean for our racers. Under greedy decoding each token carries llama.cpp's own best logits, for the tie-aware check.
The KV cache is float32 for a float32 target (llama.cpp's own default, float16, otherwise). Each generation starts
from an empty cache (no prompt reuse across generations: none of our racers has it either) on a ``Llama`` lent from a
pool, so interleaved races never share one.
"""

from __future__ import annotations

import shutil
import threading
import time
import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dart_core.engine.acceptance import SamplingConfig
from dart_core.engine.greedy_check import RECORDED, TopLogits
from dart_core.engine.loop import Step, checked_request, stop_reason
from dart_core.engine.target import TargetModel
from dart_core.loading.errors import UserError
from dart_core.loading.gguf_export import cached_gguf

KEY = "llamacpp"
LOOKUP_KEY = "llamacpp-lookup"
INSTALL = "pip install '.[llamacpp]' (or `bash scripts/dev.sh llamacpp`, which builds it for this CPU once)"
CONTEXT = 4096  # llama.cpp's context per generation at most (the target's own limit when smaller)
# llama-cpp-python's advice for its prompt lookup: 10 draft tokens on a GPU, 2 on a CPU
LOOKUP_TOKENS = {"cpu": 2, "cuda": 10}
LOOKUP_NGRAM = 2  # its default n-gram size
GGML_F32 = 0  # ggml_type of a float32 KV cache


class LlamaCppError(UserError, RuntimeError):
    """The llama.cpp racer cannot run here (the extra missing, a GPU without a CUDA build)."""


def llama_cpp_module() -> Any:
    """The ``llama_cpp`` module, or a :class:`LlamaCppError` that says how to install it."""
    try:
        import llama_cpp
    except ImportError as e:
        raise LlamaCppError(f"the llama.cpp racer needs llama-cpp-python, which is not installed ({e}): {INSTALL}, "
                            "or leave the llama.cpp rows out") from None
    return llama_cpp


def build_info() -> dict[str, Any]:
    """llama-cpp-python's version and the features its llama.cpp was built with (for the benchmark JSON)."""
    llama_cpp = llama_cpp_module()
    features = llama_cpp.llama_print_system_info()
    return {"llama_cpp_python": llama_cpp.__version__,
            "system_info": (features.decode() if isinstance(features, bytes) else str(features)).strip(),
            "gpu_offload": bool(llama_cpp.llama_supports_gpu_offload())}


@dataclass
class LlamaCppEngine:
    """The target's GGUF and the ``Llama`` instances decoding it, lent one per generation (plain and lookup apart:
    the lookup needs every row's logits). The weights are memory-mapped, so instances share them."""

    path: Path
    context: int
    threads: int
    dtype: torch.dtype
    device: str
    written_s: float = 0.0  # seconds spent writing the GGUF at load (0: it was cached)
    _free: dict[bool, list[Any]] = field(default_factory=lambda: {False: [], True: []})
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def lookup_tokens(self) -> int:
        return LOOKUP_TOKENS["cpu" if self.device == "cpu" else "cuda"]

    def describe(self) -> dict[str, Any]:
        """What the benchmark JSON records about this engine."""
        return {**build_info(), "gguf": str(self.path), "gguf_bytes": self.path.stat().st_size,
                "dtype": str(self.dtype).removeprefix("torch."), "threads": self.threads, "context": self.context,
                "kv_cache": "f32" if self.dtype == torch.float32 else "llama.cpp default (f16)",
                "lookup": {"num_pred_tokens": self.lookup_tokens, "max_ngram_size": LOOKUP_NGRAM}}

    def summary(self) -> str:
        """One line for the load's progress: the file, how it came, the build."""
        how = f"written in {self.written_s:.1f} s" if self.written_s else "from the cache"
        size = self.path.stat().st_size / 2**20
        return (f"{str(self.dtype).removeprefix('torch.')} GGUF of {size:.0f} MiB {how}, llama-cpp-python "
                f"{llama_cpp_module().__version__}, {self.threads} thread(s)")

    def _new(self, lookup: bool) -> Any:
        llama_cpp = llama_cpp_module()
        kwargs: dict[str, Any] = {}
        if self.dtype == torch.float32:
            kwargs.update(type_k=GGML_F32, type_v=GGML_F32)
        if lookup:
            from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

            kwargs["draft_model"] = LlamaPromptLookupDecoding(max_ngram_size=LOOKUP_NGRAM,
                                                              num_pred_tokens=self.lookup_tokens)
        return llama_cpp.Llama(str(self.path), n_ctx=self.context, n_threads=self.threads,
                               n_threads_batch=self.threads, n_gpu_layers=0 if self.device == "cpu" else -1,
                               verbose=False, **kwargs)

    @contextmanager
    def lend(self, lookup: bool) -> Iterator[Any]:
        """A ``Llama`` for one generation (made when none is free), emptied, given back afterwards."""
        with self._lock:
            llm = self._free[lookup].pop() if self._free[lookup] else None
        if llm is None:
            llm = self._new(lookup)
        try:
            llm.reset()
            yield llm
        finally:
            with self._lock:
                self._free[lookup].append(llm)


_ENGINES: weakref.WeakKeyDictionary[TargetModel, LlamaCppEngine] = weakref.WeakKeyDictionary()


def setup_llamacpp(target: TargetModel, tokenizer: Any = None, identity: str | None = None) -> LlamaCppEngine:
    """The llama.cpp engine of ``target`` (one per target, shared by both rows): its GGUF written (or found in the
    cache) and one plain ``Llama`` loaded, so a missing extra, a GPU without a CUDA build or a target the writer
    cannot carry over is refused here, before any race."""
    if target in _ENGINES:
        return _ENGINES[target]
    llama_cpp = llama_cpp_module()
    device = target.device.type
    if device != "cpu" and not llama_cpp.llama_supports_gpu_offload():
        raise LlamaCppError(f"the target runs on {device}, and this llama-cpp-python build has no GPU backend: "
                            "install it with CMAKE_ARGS=\"-DGGML_CUDA=on\", or leave the llama.cpp rows out")
    started = time.perf_counter()
    path, written = cached_gguf(target.model, tokenizer, identity)
    limit = int(getattr(target.config, "max_position_embeddings", CONTEXT) or CONTEXT)
    engine = LlamaCppEngine(path=path, context=min(CONTEXT, limit), threads=torch.get_num_threads(),
                            dtype=target.dtype, device=device,
                            written_s=time.perf_counter() - started if written else 0.0)
    with engine.lend(False):
        pass
    if identity is None:  # a model without an identity got a file of its own in a temporary folder: gone with it
        weakref.finalize(engine, shutil.rmtree, path.parent, True)
    _ENGINES[target] = engine
    return engine


def engine_of(target: TargetModel) -> LlamaCppEngine:
    """The engine :func:`setup_llamacpp` made for ``target``, made now (without a tokenizer) if none was."""
    return _ENGINES.get(target) or setup_llamacpp(target)


class _Evals:
    """Records each llama.cpp forward ``generate`` asks for (its tokens and where they start in the context) and
    each lookup draft's time, by wrapping the instance's ``eval`` and ``draft_model``."""

    def __init__(self, llm: Any) -> None:
        self.llm = llm
        self.calls: list[tuple[int, list[int]]] = []
        self.draft_ms = 0.0
        self._eval = llm.eval
        self._draft = llm.draft_model
        llm.eval = self.eval
        if self._draft is not None:
            llm.draft_model = self.draft

    def eval(self, tokens: Any) -> None:
        start = self.llm.n_tokens
        self._eval(tokens)
        self.calls.append((start, [int(t) for t in tokens]))

    def draft(self, input_ids: Any, /, **kwargs: Any) -> Any:
        t = time.perf_counter()
        out = self._draft(input_ids, **kwargs)
        self.draft_ms += (time.perf_counter() - t) * 1e3
        return out

    def restore(self) -> None:
        self.llm.eval = self._eval
        self.llm.draft_model = self._draft


def _top(llama_cpp: Any, llm: Any, row: int | None) -> TopLogits:
    """llama.cpp's best :data:`RECORDED` (ids, logits) of context row ``row`` (None: the last forward's only row)."""
    if row is None:
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(llm.n_vocab(),))
    else:
        logits = llm.scores[row]
    best = np.argpartition(logits, -RECORDED)[-RECORDED:] if logits.shape[0] > RECORDED else np.arange(len(logits))
    best = best[np.argsort(-logits[best], kind="stable")]
    return tuple(int(i) for i in best), tuple(float(logits[i]) for i in best)


def stream_llamacpp(
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
    lookup: bool = False,
) -> Iterator[Step]:
    """llama.cpp's decoding of ``input_ids`` on ``target``'s weights, one :class:`Step` per llama.cpp forward, with
    :func:`dart_core.engine.loop.stream`'s arguments and stop rules (``drafter``, ``settings`` and ``interrupt``
    are not used); ``lookup``: llama-cpp-python's prompt-lookup speculative decoding. The context holds at most
    :data:`CONTEXT` tokens (a longer answer stops there, as at the target's own limit). Sampling uses llama.cpp's
    own sampler (temperature, top-k, top-p), seeded from ``generator``'s seed."""
    sampling = sampling or SamplingConfig()
    llama_cpp = llama_cpp_module()
    engine = engine_of(target)
    prompt, limit = checked_request(target, input_ids, max_new_tokens, max_length)
    limit = min(limit, engine.context)
    if len(prompt) >= limit:
        raise ValueError(f"the prompt has {len(prompt)} tokens and llama.cpp's context holds {engine.context}: "
                         "shorten it")
    stops = {int(t) for t in stop_token_ids}
    key = LOOKUP_KEY if lookup else KEY
    greedy = sampling.greedy
    knobs = ({"temp": 0.0, "top_k": 1} if greedy else
             {"temp": sampling.temperature, "top_k": sampling.top_k or 0, "top_p": sampling.top_p})
    with engine.lend(lookup) as llm:
        if generator is not None:
            llm.set_seed(int(generator.initial_seed()) & 0xFFFFFFFF)
        evals = _Evals(llm)
        tokens = llm.generate(prompt, min_p=0.0, repeat_penalty=1.0, reset=True, **knobs)
        try:
            emitted, group, tops = 0, [], []
            started = time.perf_counter()
            drafted_before = 0.0
            while True:
                token = int(next(tokens))
                start, sent = evals.calls[-1]
                prefill = len(evals.calls) == 1
                j = len(group)
                group.append(token)
                if greedy:
                    tops.append(_top(llama_cpp, llm, None if not lookup else start + (len(sent) - 1 if prefill else j)))
                emitted += 1
                reason = stop_reason(token in stops, emitted, max_new_tokens, len(prompt) + emitted, limit)
                more = not prefill and j + 1 < len(sent) and token == sent[j + 1]
                if reason or not more:
                    t = time.perf_counter()
                    draft_ms = evals.draft_ms - drafted_before
                    drafted = 0 if prefill else len(sent)
                    yield Step(method=key, tokens=group, accepted=len(group) - 1,
                               tree_size=drafted if drafted > 1 else 0, draft_ms=draft_ms,
                               search_ms=0.0, verify_ms=(t - started) * 1e3 - draft_ms, prefill=prefill,
                               stop_reason=reason, top_logits=tops,
                               drafted_size=drafted if drafted > 1 else 0)
                    if reason:
                        return
                    group, tops = [], []
                    drafted_before = evals.draft_ms
                    started = time.perf_counter()
        finally:
            tokens.close()
            evals.restore()


def stream_llamacpp_lookup(target: TargetModel, input_ids: Any, drafter: Any = None, **kwargs: Any) -> Iterator[Step]:
    """:func:`stream_llamacpp` with llama-cpp-python's prompt-lookup speculative decoding."""
    return stream_llamacpp(target, input_ids, drafter, lookup=True, **kwargs)
