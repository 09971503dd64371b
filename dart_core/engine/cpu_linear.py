"""Which kernel multiplies a linear layer on a CPU, chosen by measurement per row count.

Why: a verify feeds every linear layer a dozen rows where plain decoding feeds one, and PyTorch's default CPU kernel
(MKL's sgemm in float32) is poor at a few rows on some CPUs, where oneDNN with each weight reordered once into its
own blocked layout makes a verify (and even the one-row step) cheaper; on another CPU, or another thread count, the
stock kernel can be the faster one (measured: docs/benchmarks.md#measurements-behind-design-choices). So nothing is
assumed: :func:`plan_cpu_linears` times the kernels on the model's own layers at 1, 2, 4, 8 and 16 rows (a plain
step, the trees the budget cuts, a full CPU tree or a drafter's block) and :func:`use_cpu_linears` makes each
``nn.Linear`` dispatch by its input's rows. The
reordered copy costs the layers' weight memory once more; the stock weights stay (tied weights, ``to()``,
``state_dict`` and the one-row path use them). Exact either way: both kernels compute the same products, only their
summation order differs (a float32 rounding; the greedy check tells such ties from mismatches).

A third kernel is ours: ``dart_core._native.row_linear`` reads the weights once for a few rows (up to
``NATIVE_MAX_ROWS``), where PyTorch's one-row kernels read them at about half the memory's speed on two cores. It
runs on PyTorch's own OpenMP team (:func:`native_threads`): a second set of threads beside that team, which
spins a while after each op, fought it for the cores and more than doubled a step (measured:
docs/benchmarks.md#measurements-behind-design-choices)."""

from __future__ import annotations

import functools
import math
import re
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from dart_core import _native
from dart_core.engine.cpu import available_ram

MODES = ("auto", "stock", "onednn", "native")
# ``--cpu-linear``'s meaning, one sentence for every command's help
CPU_LINEAR_HELP = ("on a CPU, the linear layers' kernel: auto (the default: PyTorch's own, oneDNN with prepacked "
                   "weights or our native few-row kernel, whichever ran the model's layers fastest at load, timed "
                   "apart at 1, 2, 4, 8 and 16 rows at the thread count in use; the RMSNorms then run natively "
                   "too), stock (PyTorch's own, and the model's own norms), onednn, native")
STOCK, ONEDNN, NATIVE = "stock", "onednn", "native"
KERNELS = (STOCK, ONEDNN, NATIVE)
NATIVE_DTYPES = (torch.float32, torch.bfloat16)  # what the native kernels read
NATIVE_MAX_ROWS = 32  # the most rows the native kernel multiplies: past a wide verify it is a matrix product
# the row counts timed at load, each standing for the counts nearest it on a log scale: a plain step (1), the
# trees the budget cuts (a few nodes to a dozen), a full CPU tree or a drafter's block (16)
ROW_CLASSES = (1, 2, 4, 8, 16)
MANY_ROWS = ROW_CLASSES[-1]  # the rows oneDNN reorders its weights for
MEASURE_BYTES = 512 << 20  # weights one timed pass reads at most: past any cache, short on a large model
MARGIN = 0.95  # oneDNN is chosen only where it is at least 5 % faster: ties keep PyTorch's own kernel
RAM_SHARE = 0.5  # the packed copy may take at most this share of the RAM still free


def row_class(rows: int) -> int:
    """The timed row count (``ROW_CLASSES``) that stands for ``rows``: the nearest on a log scale, the larger on a
    tie (3 rows go with 4, 12 with 16)."""
    return min(ROW_CLASSES, key=lambda c: (abs(math.log(rows / c)) if rows > 0 else math.inf, -c))


@dataclass
class CpuLinearPlan:
    """The kernel for each row class (``ROW_CLASSES``), with the timings that chose them (ms per pass over the
    measured layers, by kernel and rows) and why, for reports."""

    by_rows: dict[int, str] = field(default_factory=lambda: dict.fromkeys(ROW_CLASSES, STOCK))
    threads: int = 0
    timings: dict[str, dict[int, float]] = field(default_factory=dict)
    reason: str = ""
    _by_count: dict[int, str] = field(default_factory=dict, init=False, repr=False, compare=False)

    @classmethod
    def uniform(cls, kernel: str, **kwargs: Any) -> CpuLinearPlan:
        """One kernel for every row count (a mode asked for by name)."""
        return cls(dict.fromkeys(ROW_CLASSES, kernel), **kwargs)

    def kernel(self, rows: int) -> str:
        """The kernel for ``rows`` input rows (past ``NATIVE_MAX_ROWS`` the native kernel gives way to stock),
        remembered per count: every linear layer of every forward asks."""
        kernel = self._by_count.get(rows)
        if kernel is None:
            kernel = self.by_rows.get(row_class(rows), STOCK)
            kernel = self._by_count[rows] = STOCK if kernel == NATIVE and rows > NATIVE_MAX_ROWS else kernel
        return kernel

    @property
    def uses_onednn(self) -> bool:
        return ONEDNN in self.by_rows.values()

    @property
    def uses_native(self) -> bool:
        return NATIVE in self.by_rows.values()

    @property
    def summary(self) -> str:
        """Each row class's kernel, e.g. "1 row native, 2 rows native, …, 16 rows onednn"."""
        return ", ".join(f"{rows} row{'s' if rows > 1 else ''} {k}" for rows, k in sorted(self.by_rows.items()))

    def describe(self) -> str:
        """One line: each row class's kernel and the timings behind it."""
        def ms(kernel: str, rows: int) -> str:
            t = self.timings.get(kernel, {}).get(rows)
            return f" {t:.1f} ms" if t is not None else ""
        def timed(rows: int) -> str:
            return " (" + ", ".join(f"{k}{ms(k, rows)}" for k in KERNELS if k in self.timings) + ")" \
                if self.timings else ""
        parts = [f"{rows} row{'s' if rows > 1 else ''} {k}{timed(rows)}" for rows, k in sorted(self.by_rows.items())]
        return f"CPU linear kernels: {'; '.join(parts)}, {self.threads} thread(s)" + (
            f"; {self.reason}" if self.reason else "")


_other_threads = 0  # threads besides the model's own running torch work now (HF generate's), see below
_other_threads_lock = threading.Lock()


@contextmanager
def torch_work_on_another_thread() -> Iterator[None]:
    """While it is open, every :class:`DispatchLinear` multiplies by PyTorch's own kernel wherever PyTorch runs
    more than one thread. Why: a second thread doing torch work (HF ``generate`` streams from a thread of its own)
    brings a second OpenMP team, libgomp then has more threads than CPUs and cuts its spin-wait short, and
    oneDNN's many short parallel regions each wait on a futex: oneDNN, faster alone, then falls behind PyTorch's
    kernel, which the second team barely slows (measured: docs/benchmarks.md#measurements-behind-design-choices)."""
    global _other_threads
    with _other_threads_lock:
        _other_threads += 1
    try:
        yield
    finally:
        with _other_threads_lock:
            _other_threads -= 1


def onednn_available() -> bool:
    """Whether this PyTorch build has oneDNN's prepacked linear (the kernels ``torch.compile`` uses on CPUs)."""
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        torch.ops.mkldnn._reorder_linear_weight  # noqa: B018  (the lookup raises where the op is missing)
        torch.ops.mkldnn._linear_pointwise  # noqa: B018
    except (AttributeError, RuntimeError):
        return False
    return True


def _pack(weight: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), MANY_ROWS)


def _packed_linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    flat = x.reshape(-1, x.shape[-1])
    y = torch.ops.mkldnn._linear_pointwise(flat, packed, bias, "none", [], "")
    return y.view(*x.shape[:-1], y.shape[-1])


def numpy_bits(t: torch.Tensor) -> Any:
    """A numpy view of ``t`` (no copy), as the native kernels take it: bfloat16 as its 16 bits, which numpy has no
    type for."""
    return (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy()


def _native_linear(x: torch.Tensor, weight: Any, bias: Any, out_features: int, threads: int) -> torch.Tensor:
    """``F.linear`` by the native kernel; ``weight`` and ``bias`` as :func:`numpy_bits` views (None: no bias)."""
    shape = x.shape
    flat = x.view(-1, shape[-1]) if x.is_contiguous() else x.reshape(-1, shape[-1]).contiguous()
    y = torch.empty((flat.shape[0], out_features), dtype=x.dtype)
    _native.row_linear(numpy_bits(flat), weight, bias, numpy_bits(y), threads)
    return y if len(shape) == 2 else y.view(*shape[:-1], out_features)


class DispatchLinear(torch.nn.Linear):
    """An ``nn.Linear`` that multiplies by the plan's kernel for its input's rows. It shares the original layer's
    parameters (tied weights stay tied) and falls back to ``F.linear`` wherever the plan's kernel cannot serve:
    gradients wanted, another device or dtype, the weight changed (in place, or for another tensor) since the plan
    was set, more rows than the native kernel takes, or another thread's torch work under way
    (:func:`torch_work_on_another_thread`)."""

    plan: CpuLinearPlan
    packed: torch.Tensor | None
    native: tuple[Any, Any] | None  # the weight and bias as the native kernel reads them

    @classmethod
    def wrap(cls, linear: torch.nn.Linear, plan: CpuLinearPlan, packed: torch.Tensor | None) -> DispatchLinear:
        new = cls.__new__(cls)
        torch.nn.Module.__init__(new)
        new.in_features, new.out_features = linear.in_features, linear.out_features
        new.weight = linear.weight
        new.bias = linear.bias
        new.set_plan(plan, packed)
        return new

    def set_plan(self, plan: CpuLinearPlan, packed: torch.Tensor | None) -> None:
        weight = self.weight
        self.plan, self.packed = plan, packed
        # what says the packed and native forms still match the weight: its storage (a new one for another dtype
        # or device, ``.to()`` included) and its in-place version, each a cheap read on every call
        self._packed_ptr, self._packed_version, self._dtype = weight.data_ptr(), weight._version, weight.dtype
        self.native = None
        if plan.uses_native and _native_can_serve(weight, self.bias):
            native_threads()
            self.native = (numpy_bits(weight.detach()),
                           numpy_bits(self.bias.detach()) if self.bias is not None else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # kept lean: a plain step calls this for every linear layer, so its checks cost a share of the step
        width = x.shape[-1]
        kernel = self.plan.kernel(x.numel() // width if width else 0)
        weight = self._parameters["weight"]
        if (kernel == STOCK or not x.is_cpu or x.dtype != self._dtype or weight._version != self._packed_version
                or weight.data_ptr() != self._packed_ptr
                or (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad))
                or (_other_threads and torch.get_num_threads() > 1)):
            return F.linear(x, weight, self.bias)
        if kernel == NATIVE:
            if self.native is None:
                return F.linear(x, weight, self.bias)
            return _native_linear(x, *self.native, self.out_features, torch.get_num_threads())
        if self.packed is None:
            return F.linear(x, weight, self.bias)
        return _packed_linear(x, self.packed, self.bias)


def _native_can_serve(weight: torch.Tensor, bias: torch.Tensor | None) -> bool:
    """Whether the native kernel can read these parameters in place: on the CPU, float32 or bfloat16, contiguous."""
    return all(t.device.type == "cpu" and t.dtype in NATIVE_DTYPES and t.is_contiguous()
               for t in (weight, *(() if bias is None else (bias,))))


@functools.cache
def native_threads() -> str:
    """Has the native kernel run its threads on PyTorch's OpenMP runtime: "" once it does, else why it runs on
    the caller's thread alone (a PyTorch without OpenMP, or a runtime the native core cannot find). Asked once."""
    if "OpenMP" not in torch.__config__.parallel_info():
        return "this PyTorch's threads are not OpenMP's"
    why = "no OpenMP runtime found in PyTorch's libraries or loaded in this process"
    for path in _openmp_libraries():
        why = _native.use_openmp_runtime(path)
        if not why:
            return ""
    return f"the native kernel runs on one thread: {why}"


def _openmp_libraries() -> list[str]:
    """Where PyTorch's OpenMP runtime may be: its wheel's own copy, else what the process has loaded (Linux)."""
    lib = Path(torch.__file__).parent / "lib"
    found = [str(p) for pattern in ("libgomp*.so*", "libiomp5*", "libomp*") for p in sorted(lib.glob(pattern))]
    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            for line in maps:
                path = line.split()[-1]
                if re.search(r"/lib(gomp|iomp5|omp)[^/]*\.(so|dylib)", path) and path not in found:
                    found.append(path)
    except OSError:
        pass
    return found


def _linears(module: torch.nn.Module) -> list[tuple[str, torch.nn.Linear]]:
    return [(name, m) for name, m in module.named_modules() if type(m) in (torch.nn.Linear, DispatchLinear)]


Layer = tuple[torch.nn.Linear, torch.Tensor | None, tuple[Any, Any] | None]  # a layer, its packed and native forms


def _timed_pass(layers: Iterable[Layer], inputs: dict[int, torch.Tensor], kernel: str, threads: int) -> float:
    start = time.perf_counter()
    for lin, packed, native in layers:
        x = inputs[lin.in_features]
        if kernel == ONEDNN and packed is not None:
            _packed_linear(x, packed, lin.bias)
        elif kernel == NATIVE and native is not None:
            _native_linear(x, *native, lin.out_features, threads)
        else:
            F.linear(x, lin.weight, lin.bias)
    return (time.perf_counter() - start) * 1e3


def _measure(layers: list[Layer], rows: int, repeats: int, kernels: tuple[str, ...]) -> dict[str, float]:
    """Best-of-``repeats`` ms of one pass over ``layers`` per kernel, the kernels interleaved (a noisy machine
    slows them alike), after one warm-up pass each."""
    dtype = layers[0][0].weight.dtype
    threads = torch.get_num_threads()
    gen = torch.Generator().manual_seed(0)
    inputs = {n: torch.randn(rows, n, generator=gen).to(dtype) for n in {lin.in_features for lin, _, _ in layers}}
    best = dict.fromkeys(kernels, float("inf"))
    for i in range(repeats + 1):
        for kernel in kernels:
            ms = _timed_pass(layers, inputs, kernel, threads)
            if i:
                best[kernel] = min(best[kernel], ms)
    return best


def plan_cpu_linears(module: torch.nn.Module, mode: str = "auto", *, repeats: int = 3,
                     packs: dict[int, torch.Tensor] | None = None, no_onednn: str = "") -> CpuLinearPlan:
    """The plan for ``module``'s linear layers at the current thread count: ``stock`` (PyTorch's own kernel),
    ``onednn`` (the reordered weights for every row count), ``native`` (ours, for every row count up to
    ``NATIVE_MAX_ROWS``), or ``auto``: each row class (``ROW_CLASSES``) gets the kernel that ran one pass over
    the model's layers (up to 512 MB of weights, the largest layer, e.g. the output head, always among them)
    fastest, if at least 5 % faster than stock; stock on a tie. A kernel that cannot serve the layers (no oneDNN
    prepacked linear in this PyTorch build, weights off the CPU or of another dtype) is not timed; where none can,
    the plan is stock and says why. ``packs``: the layers' reordered weights by ``id(weight)`` where already made;
    ``no_onednn``: why oneDNN must not be timed in ``auto`` (e.g. no RAM for its copy), "" where it may."""
    if mode not in MODES:
        raise ValueError(f"cpu_linear must be one of {', '.join(MODES)}, got {mode!r}")
    threads = torch.get_num_threads()
    linears = [m for _, m in _linears(module)]
    if mode == STOCK:
        return CpuLinearPlan(threads=threads, reason="asked for")
    why_not = {ONEDNN: _why_not_onednn(linears) or (no_onednn if mode == "auto" else ""),
               NATIVE: _why_not_native(linears)}
    if mode in why_not:
        if why_not[mode]:
            raise ValueError(f"cpu_linear={mode}: {why_not[mode]}")
        one_thread = native_threads() if mode == NATIVE else ""
        return CpuLinearPlan.uniform(mode, threads=threads,
                                     reason="asked for" + (f"; {one_thread}" if one_thread else ""))
    kernels = (STOCK, *(k for k in (ONEDNN, NATIVE) if not why_not[k]))
    if kernels == (STOCK,):
        return CpuLinearPlan(threads=threads, reason=why_not[ONEDNN])
    one_thread = native_threads() if NATIVE in kernels else ""
    packs = packs if packs is not None else {}
    layers: list[Layer] = []
    for lin in _measured_layers(linears):
        packed = (packs[id(lin.weight)] if id(lin.weight) in packs else _pack(lin.weight)) \
            if ONEDNN in kernels else None
        native = (numpy_bits(lin.weight.detach()), numpy_bits(lin.bias.detach()) if lin.bias is not None else None) \
            if NATIVE in kernels else None
        layers.append((lin, packed, native))
    with torch.no_grad():
        timings = {rows: _measure(layers, rows, repeats, kernels) for rows in ROW_CLASSES}
    pick = {}
    for rows, t in timings.items():
        best = min(kernels, key=lambda k: t[k])
        pick[rows] = best if t[best] < MARGIN * t[STOCK] else STOCK
    by_kernel = {k: {rows: round(t[k], 2) for rows, t in timings.items()} for k in kernels}
    notes = (f"oneDNN not timed: {why_not[ONEDNN]}" if why_not[ONEDNN] else "", one_thread)
    return CpuLinearPlan(pick, threads=threads, timings=by_kernel,
                         reason="; ".join(["measured", *filter(None, notes)]))


def _why_not_native(linears: list[torch.nn.Linear]) -> str:
    if not linears:
        return "no linear layers"
    for m in linears:
        if not _native_can_serve(m.weight, m.bias):
            w = m.weight
            return (f"the native kernel reads contiguous float32 or bfloat16 weights on the CPU, not "
                    f"{str(w.dtype).removeprefix('torch.')} on {w.device}")
    return ""


def _why_not_onednn(linears: list[torch.nn.Linear]) -> str:
    if not linears:
        return "no linear layers"
    if not onednn_available():
        return "this PyTorch build has no oneDNN prepacked linear"
    w = linears[0].weight
    if w.device.type != "cpu":
        return f"the weights are on {w.device}, not the CPU"
    if w.dtype not in (torch.float32, torch.bfloat16):
        return f"oneDNN's prepacked linear takes float32 or bfloat16, not {str(w.dtype).removeprefix('torch.')}"
    return ""


def _ram_problem(linears: list[torch.nn.Linear]) -> str:
    """Why the packed copy should not be made for lack of RAM ("" where it fits, or the free RAM is unknown)."""
    need = sum({id(m.weight): m.weight.nbytes for m in linears}.values())
    free = available_ram()
    if free is None or need <= RAM_SHARE * free:
        return ""
    return (f"the packed copy of the linear weights would take {need / 2**30:.1f} GiB, more than half of the "
            f"{free / 2**30:.1f} GiB of RAM still free")


def _measured_layers(linears: list[torch.nn.Linear]) -> list[torch.nn.Linear]:
    """The layers one timed pass runs: all of them up to ``MEASURE_BYTES`` of weights, the largest always in."""
    unique = list({id(m.weight): m for m in linears}.values())
    largest = max(unique, key=lambda m: m.weight.numel())
    chosen, size = [largest], largest.weight.nbytes
    for m in unique:
        if m is not largest and size + m.weight.nbytes <= MEASURE_BYTES:
            chosen.append(m)
            size += m.weight.nbytes
    return chosen


def _packs(linears: Iterable[torch.nn.Linear]) -> dict[int, torch.Tensor]:
    """Each distinct weight reordered once (a tied weight serves both of its layers), by ``id(weight)``."""
    packs: dict[int, torch.Tensor] = {}
    for m in linears:
        if id(m.weight) not in packs:
            packs[id(m.weight)] = _pack(m.weight)
    return packs


def use_cpu_linears(module: torch.nn.Module, mode: str = "auto", *,
                    plan: CpuLinearPlan | None = None) -> CpuLinearPlan:
    """Make every ``nn.Linear`` of ``module`` (on the CPU) multiply by ``plan`` (default: :func:`plan_cpu_linears`
    of ``mode``), the layers swapped in place for :class:`DispatchLinear` s that share their parameters. Returns
    the plan. A stock plan leaves plain layers as they are and turns swapped ones back to stock dispatch."""
    linears = _linears(module)
    plain = [m for _, m in linears]
    if mode not in MODES:
        raise ValueError(f"cpu_linear must be one of {', '.join(MODES)}, got {mode!r}")
    no_pack = _why_not_onednn(plain) or _ram_problem(plain)
    if plan is None and mode == ONEDNN and no_pack:
        raise ValueError(f"cpu_linear=onednn: {no_pack}")
    packs = _packs(plain) if not no_pack and (plan.uses_onednn if plan is not None else mode in ("auto", ONEDNN)) \
        else {}
    if plan is None:
        plan = plan_cpu_linears(module, mode, packs=packs, no_onednn=no_pack)
    if not plan.uses_onednn:
        packs = {}
    elif no_pack:
        raise ValueError(f"a oneDNN plan cannot serve these layers: {no_pack}")
    for name, lin in linears:
        packed = packs.get(id(lin.weight))
        if isinstance(lin, DispatchLinear):
            lin.set_plan(plan, packed)
        elif packed is not None or plan.uses_native:
            module.set_submodule(name, DispatchLinear.wrap(lin, plan, packed))
    return plan
