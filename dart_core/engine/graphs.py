"""Forwards captured once as CUDA graphs and replayed, the fast path's way of taking the host out of a step.

An eager step of a GPU model is set by the host's kernel launches, not by the GPU (docs/benchmarks.md). A forward
written at static shapes, reading every step-dependent value from device tensors (no ``.item()``, no Python branch
on a tensor), can be recorded once with ``torch.cuda.CUDAGraph`` and replayed for the cost of one launch: gpt-fast's
way, without a compiler, so it is ready in well under a second per graph instead of minutes of ``torch.compile``.

:class:`GraphedCall` holds one graph per key (a shape bucket), with the static input buffers it copies each call's
inputs into. Off CUDA (or with ``capture=False``) it calls the function directly: the CPU runs the very same
static-shape code, which is how the tests check it against the eager path. :func:`no_host_sync` is the CPU's check
that a function could be captured: it refuses the operations that read a tensor's value on the host.
"""

from __future__ import annotations

import contextlib
import logging
import time
import weakref
from collections.abc import Callable, Hashable, Iterator
from typing import Any, Generic, TypeVar

import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["GraphedCall", "HostSyncError", "SlotPool", "bucket", "no_host_sync"]

T = TypeVar("T")
log = logging.getLogger(__name__)


def bucket(n: int, largest: int) -> int | None:
    """The padded row count a static forward of ``n`` rows runs at: the next power of two, or None past ``largest``
    (such a call runs at its own size, uncaptured: a prompt's prefill)."""
    if n < 1:
        raise ValueError(f"bucket: need at least one row, got {n}")
    size = 1 << (n - 1).bit_length()
    return size if size <= largest else None


class GraphedCall:
    """``fn(key, **inputs) -> tensor or tuple of tensors`` captured per ``key`` on CUDA, replayed after.

    The key says what the inputs' shapes and ``fn``'s fixed choices are (a shape bucket, the static cache it
    writes). Each graph has its own memory pool: replays come in any order, so no two may share one. The first call
    of a key runs ``fn`` twice on a side stream (lazy initialisations, cuBLAS workspaces), then records it; every
    call copies its inputs into that key's static buffers and replays. The outputs are the graph's own tensors,
    overwritten by the next replay of the same key: read or copy them before that. ``fn`` must keep its shapes and
    its control flow fixed per key, and write the state it keeps (a KV cache) in place.
    """

    def __init__(self, fn: Callable[..., Any], device: torch.device | str, *, capture: bool = True) -> None:
        self.fn = fn
        self.device = torch.device(device)
        self.capture = bool(capture) and self.device.type == "cuda"
        self._graphs: dict[Hashable, tuple[torch.cuda.CUDAGraph, dict[str, torch.Tensor], Any]] = {}
        self.failed: dict[Hashable, str] = {}  # keys whose recording failed: they run uncaptured, and say why once
        self.capture_s = 0.0  # seconds spent recording, all keys

    @property
    def captured(self) -> int:
        """How many graphs this call holds."""
        return len(self._graphs)

    def __call__(self, key: Hashable, **inputs: torch.Tensor) -> Any:
        if not self.capture or key in self.failed:
            return self.fn(key, **inputs)
        entry = self._graphs.get(key)
        if entry is None:
            try:
                return self._record(key, inputs)
            except RuntimeError as e:  # a step that cannot be captured still runs: slower, never wrong
                self.failed[key] = f"{type(e).__name__}: {e}"
                log.warning("could not capture %s as a CUDA graph; it runs uncaptured: %s", key, e)
                torch.cuda.synchronize(self.device)
                return self.fn(key, **inputs)
        graph, static, out = entry
        for name, value in inputs.items():
            static[name].copy_(value, non_blocking=True)
        graph.replay()
        return out

    def _record(self, key: Hashable, inputs: dict[str, torch.Tensor]) -> Any:
        t0 = time.perf_counter()
        static = {name: value.clone() for name, value in inputs.items()}
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(2):
                self.fn(key, **static)
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = self.fn(key, **static)
        self._graphs[key] = (graph, static, out)
        # the recording ran the forward on the inputs; replaying now gives this call its result like any other
        graph.replay()
        self.capture_s += time.perf_counter() - t0
        return out


class SlotPool(Generic[T]):
    """Static buffers (KV caches) lent to per-generation states and returned when a state is garbage-collected. A
    captured graph is bound to the memory of the buffers it writes, so generations share a few slots, and each
    slot's graphs, instead of recording new ones for every generation."""

    def __init__(self, make: Callable[[], T]) -> None:
        self._make = make
        self.slots: list[T] = []
        self._free: list[int] = []
        self._leases: dict[int, weakref.finalize] = {}

    def lend(self, owner: object) -> int:
        """A free slot's index (a new slot when all are lent) for ``owner``, returned to the pool when it dies or
        gives it back."""
        if self._free:
            index = self._free.pop()
        else:
            self.slots.append(self._make())
            index = len(self.slots) - 1
        self._leases[index] = weakref.finalize(owner, self._free.append, index)
        return index

    def give_back(self, index: int) -> None:
        """Return a lent slot now (its owner moved to another one); a slot not lent is refused."""
        lease = self._leases.pop(index, None)
        if lease is None or not lease.alive:
            raise ValueError(f"SlotPool.give_back: slot {index} is not lent")
        lease()  # runs the finalizer once: the slot is free, and the owner's death will not free it again

    @property
    def lent(self) -> int:
        """Slots lent now."""
        return sum(lease.alive for lease in self._leases.values())


class HostSyncError(RuntimeError):
    """A function meant for capture read a tensor's value on the host (it would stall, or fail to record)."""


# aten operations that hand a tensor's value (or a value-dependent shape) to the host
_SYNCING = ("_local_scalar_dense", "nonzero", "is_nonzero", "equal", "masked_select", "unique")


class _NoHostSync(TorchDispatchMode):
    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = func.__name__.split(".")[0]
        if name in _SYNCING:
            raise HostSyncError(f"{func.__name__} reads a tensor on the host: this code cannot be captured "
                                "as a CUDA graph")
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def no_host_sync() -> Iterator[None]:
    """Inside this context an operation that reads a tensor's value on the host raises :class:`HostSyncError`:
    the CPU's stand-in for a CUDA graph's capture, which such an operation would break."""
    with _NoHostSync():
        yield
