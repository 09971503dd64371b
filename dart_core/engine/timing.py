"""Wall-clock milliseconds that are true on GPUs too: synchronize the device before reading the clock."""

from __future__ import annotations

import os
import time

import torch


def sync(device: torch.device | str | None) -> None:
    """Wait for queued kernels on a CUDA device (no-op on CPU), so a clock read after it is honest."""
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def threads_leaving_a_core() -> int:
    """CPU threads for the model that leave one core free (at least one thread): on a CPU, PyTorch's parallel
    regions wait for their slowest thread, so a web server and a browser on the same machine that take one of
    *its* cores made every step much slower; on a core of their own they cost the model nothing
    (measured: docs/benchmarks.md#measurements-behind-design-choices)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores - 1)


class Stopwatch:
    """``with Stopwatch(device) as sw: ...`` then ``sw.ms``: synchronized before start and before stop."""

    def __init__(self, device: torch.device | str | None = None) -> None:
        self.device = device
        self.ms = 0.0

    def __enter__(self) -> Stopwatch:
        sync(self.device)
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        sync(self.device)
        self.ms = (time.perf_counter() - self._t0) * 1e3
