"""Which kernel multiplies a linear layer on a CPU, chosen by measurement per row count.

Why: a verify feeds every linear layer a dozen rows where plain decoding feeds one, and PyTorch's default CPU kernel
(MKL's sgemm in float32) is poor at a few rows on some CPUs, where oneDNN with each weight reordered once into its
own blocked layout makes a verify (and even the one-row step) cheaper; on another CPU, or another thread count, the
stock kernel can be the faster one (measured: docs/benchmarks.md#measurements-behind-design-choices). So nothing is
assumed: :func:`plan_cpu_linears` times both kernels on the model's own layers at one row (plain decoding) and at 16
rows (verify, drafting) and :func:`use_cpu_linears` makes each ``nn.Linear`` dispatch by its input's rows. The
reordered copy costs the layers' weight memory once more; the stock weights stay (tied weights, ``to()``,
``state_dict`` and the one-row path use them). Exact either way: both kernels compute the same products, only their
summation order differs (a float32 rounding; the greedy check tells such ties from mismatches)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from dart_core.engine.cpu import available_ram

MODES = ("auto", "stock", "onednn")
# ``--cpu-linear``'s meaning, one sentence for every command's help
CPU_LINEAR_HELP = ("on a CPU, the linear layers' kernel: auto (the default: PyTorch's own or oneDNN with prepacked "
                   "weights, whichever ran the model's layers faster at load, timed apart for one row and for "
                   "several at the thread count in use), stock (PyTorch's own), onednn")
STOCK, ONEDNN = "stock", "onednn"
MANY_ROWS = 16  # the rows "more than one" is measured at: a CPU verify tree, a drafter's block
MEASURE_BYTES = 512 << 20  # weights one timed pass reads at most: past any cache, short on a large model
MARGIN = 0.95  # oneDNN is chosen only where it is at least 5 % faster: ties keep PyTorch's own kernel
RAM_SHARE = 0.5  # the packed copy may take at most this share of the RAM still free


@dataclass
class CpuLinearPlan:
    """The kernel for one-row inputs and for inputs of several rows, with the timings that chose them (ms per
    pass over the measured layers, by kernel and rows) and why, for reports."""

    one_row: str = STOCK
    many_rows: str = STOCK
    threads: int = 0
    timings: dict[str, dict[int, float]] = field(default_factory=dict)
    reason: str = ""

    def kernel(self, rows: int) -> str:
        return self.one_row if rows == 1 else self.many_rows

    @property
    def uses_onednn(self) -> bool:
        return ONEDNN in (self.one_row, self.many_rows)

    def describe(self) -> str:
        """One line: each row class's kernel and the timings behind it."""
        def ms(kernel: str, rows: int) -> str:
            t = self.timings.get(kernel, {}).get(rows)
            return f" {t:.1f} ms" if t is not None else ""
        parts = [f"1 row {self.one_row}" + (f" ({STOCK}{ms(STOCK, 1)}, {ONEDNN}{ms(ONEDNN, 1)})"
                                             if self.timings else ""),
                 f"{MANY_ROWS} rows {self.many_rows}" + (f" ({STOCK}{ms(STOCK, MANY_ROWS)}, "
                                                         f"{ONEDNN}{ms(ONEDNN, MANY_ROWS)})" if self.timings else "")]
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


class DispatchLinear(torch.nn.Linear):
    """An ``nn.Linear`` that multiplies by the plan's kernel for its input's rows. It shares the original layer's
    parameters (tied weights stay tied) and falls back to ``F.linear`` wherever the packed copy cannot serve:
    gradients wanted, another device or dtype, the weight changed in place since it was packed, or another
    thread's torch work under way (:func:`torch_work_on_another_thread`)."""

    plan: CpuLinearPlan
    packed: torch.Tensor | None

    @classmethod
    def wrap(cls, linear: torch.nn.Linear, plan: CpuLinearPlan, packed: torch.Tensor | None) -> DispatchLinear:
        new = cls.__new__(cls)
        torch.nn.Module.__init__(new)
        new.in_features, new.out_features = linear.in_features, linear.out_features
        new.weight = linear.weight
        new.bias = linear.bias
        new.plan = plan
        new.packed = packed
        new._packed_as = _stamp(linear.weight)
        return new

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // max(1, x.shape[-1])
        if (self.packed is None or self.plan.kernel(rows) != ONEDNN or x.device.type != "cpu"
                or x.dtype != self.weight.dtype or _stamp(self.weight) != self._packed_as
                or (torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad))
                or (_other_threads and torch.get_num_threads() > 1)):
            return F.linear(x, self.weight, self.bias)
        return _packed_linear(x, self.packed, self.bias)


def _stamp(weight: torch.Tensor) -> tuple[Any, ...]:
    """What says the packed copy still matches the weight: its storage, dtype, device and in-place version."""
    return weight.data_ptr(), weight.dtype, weight.device, weight._version


def _linears(module: torch.nn.Module) -> list[tuple[str, torch.nn.Linear]]:
    return [(name, m) for name, m in module.named_modules() if type(m) in (torch.nn.Linear, DispatchLinear)]


def _timed_pass(layers: Iterable[tuple[torch.nn.Linear, torch.Tensor | None]], inputs: dict[int, torch.Tensor],
                kernel: str) -> float:
    start = time.perf_counter()
    for lin, packed in layers:
        x = inputs[lin.in_features]
        if kernel == ONEDNN and packed is not None:
            _packed_linear(x, packed, lin.bias)
        else:
            F.linear(x, lin.weight, lin.bias)
    return (time.perf_counter() - start) * 1e3


def _measure(layers: list[tuple[torch.nn.Linear, torch.Tensor | None]], rows: int, repeats: int) -> dict[str, float]:
    """Best-of-``repeats`` ms of one pass over ``layers`` per kernel, the kernels interleaved (a noisy machine
    slows both alike), after one warm-up pass each."""
    dtype = layers[0][0].weight.dtype
    gen = torch.Generator().manual_seed(0)
    inputs = {n: torch.randn(rows, n, generator=gen).to(dtype) for n in {lin.in_features for lin, _ in layers}}
    best = {STOCK: float("inf"), ONEDNN: float("inf")}
    for i in range(repeats + 1):
        for kernel in (STOCK, ONEDNN):
            ms = _timed_pass(layers, inputs, kernel)
            if i:
                best[kernel] = min(best[kernel], ms)
    return best


def plan_cpu_linears(module: torch.nn.Module, mode: str = "auto", *, repeats: int = 3,
                     packs: dict[int, torch.Tensor] | None = None) -> CpuLinearPlan:
    """The plan for ``module``'s linear layers at the current thread count: ``stock`` (PyTorch's own kernel),
    ``onednn`` (the reordered weights for every row count), or ``auto``: each row class gets the kernel that
    ran one pass over the model's layers (up to 512 MB of weights, the largest layer, e.g. the output head,
    always among them) at least 5 % faster, stock on a tie. Where oneDNN's prepacked linear is missing, or the
    weights are not on the CPU, the plan is stock and says why. ``packs``: the layers' reordered weights by
    ``id(weight)`` where already made."""
    if mode not in MODES:
        raise ValueError(f"cpu_linear must be one of {', '.join(MODES)}, got {mode!r}")
    threads = torch.get_num_threads()
    linears = [m for _, m in _linears(module)]
    if mode == STOCK:
        return CpuLinearPlan(threads=threads, reason="asked for")
    why_not = _why_not_onednn(linears)
    if why_not:
        if mode == ONEDNN:
            raise ValueError(f"cpu_linear=onednn: {why_not}")
        return CpuLinearPlan(threads=threads, reason=why_not)
    if mode == ONEDNN:
        return CpuLinearPlan(ONEDNN, ONEDNN, threads=threads, reason="asked for")
    packs = packs if packs is not None else {}
    chosen = _measured_layers(linears)
    layers = [(lin, packs[id(lin.weight)] if id(lin.weight) in packs else _pack(lin.weight)) for lin in chosen]
    with torch.no_grad():
        timings = {1: _measure(layers, 1, repeats), MANY_ROWS: _measure(layers, MANY_ROWS, repeats)}
    pick = {rows: ONEDNN if t[ONEDNN] < MARGIN * t[STOCK] else STOCK for rows, t in timings.items()}
    by_kernel = {k: {rows: round(t[k], 2) for rows, t in timings.items()} for k in (STOCK, ONEDNN)}
    return CpuLinearPlan(pick[1], pick[MANY_ROWS], threads=threads, timings=by_kernel, reason="measured")


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
    why_not = _why_not_onednn(plain) or _ram_problem(plain)
    if why_not and plan is None and mode == ONEDNN:
        raise ValueError(f"cpu_linear=onednn: {why_not}")
    if why_not and plan is None and mode == "auto":
        plan = CpuLinearPlan(threads=torch.get_num_threads(), reason=why_not)
    can_pack = not why_not
    packs = _packs(plain) if can_pack and (plan.uses_onednn if plan is not None else mode != STOCK) else {}
    if plan is None:
        plan = plan_cpu_linears(module, mode, packs=packs)
    if not plan.uses_onednn:
        packs = {}
    elif not can_pack:
        raise ValueError(f"a oneDNN plan cannot serve these layers: {why_not}")
    for name, lin in linears:
        packed = packs.get(id(lin.weight))
        if isinstance(lin, DispatchLinear):
            lin.plan, lin.packed, lin._packed_as = plan, packed, _stamp(lin.weight)
        elif packed is not None:
            module.set_submodule(name, DispatchLinear.wrap(lin, plan, packed))
    return plan
