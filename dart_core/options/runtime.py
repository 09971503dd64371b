"""Where and how the models run: ``--device``, ``--dtype``, ``--threads``, ``--cpu-linear``, the fast path and the
tree budget (``--budget``),
declared here once for every command line and the app, and turned into :func:`~dart_core.arena.load_arena`'s
arguments by :func:`runtime_options` (the thread count goes to the load, which sets it before any CPU kernel is
timed). Torch-free at import: the training command line sets OpenMP's environment before torch loads."""

from __future__ import annotations

import argparse
from typing import Any

from dart_core.engine.budget import BUDGET_HELP, BUDGETS, NODE
from dart_core.engine.cpu import AUTO_DTYPE_HELP

DEVICE_HELP = "cpu, cuda, cuda:N, or auto (spread the target over all GPUs); default: cuda if available"
THREADS_HELP = ("PyTorch CPU threads, 1 to the CPU cores this process may use (default: PyTorch's, one per core; the "
                "app's model on a CPU leaves one core to the page: compare with the same number). Set before "
                "loading: the CPU kernels are timed at it")
FAST_PATH_HELP = (
    "the fast path, on by default on one CUDA GPU: a static KV cache of ROWS rows (prompt + reply + one draft tree; "
    "default {rows}) and every decode, verify and drafting forward at static shapes, captured once as a "
    "CUDA graph per row bucket and replayed (about a second of capturing in all, spread over the first steps of each "
    "size: the warm-up race takes it); the same output. Off on a CPU and with --device auto unless asked for")
FAST_PATH_MODE_HELP = ("how the fast path runs its static forwards: graphs (default: CUDA graphs, ready in seconds), "
                       "compile (torch.compile, the target only: about a minute of compiling at start, its kernels "
                       "kept in the arena's cache for the next start), eager (static caches, no capture)")


def add_device_argument(group: Any, *, help: str = DEVICE_HELP) -> None:
    group.add_argument("--device", default=None, help=help)


def add_dtype_argument(group: Any, *, help: str = AUTO_DTYPE_HELP, choices: tuple[str, ...] | None = None,
                       multiple: bool = False) -> None:
    """``--dtype NAME`` (``auto`` by default), or with ``multiple`` a comma-separated list of them."""
    if multiple:
        kwargs: dict[str, Any] = {"default": "bfloat16,float32", "metavar": "NAMES",
                                  "help": f"comma-separated, each one of: {help} (default: %(default)s)"}
    else:
        kwargs = {"default": "auto", "choices": choices, "help": help}
    group.add_argument("--dtype", **kwargs)


def add_threads_argument(group: Any, *, help: str = THREADS_HELP) -> None:
    """``--threads N``, refused while parsing unless 1 <= N <= the usable cores (one type for every command)."""
    from dart_core.options.limits import thread_count

    group.add_argument("--threads", type=thread_count, default=None, metavar="N", help=help)


def add_cpu_linear_argument(group: Any) -> None:
    from dart_core.engine.cpu_linear import CPU_LINEAR_HELP
    from dart_core.engine.cpu_linear import MODES as CPU_LINEAR_MODES

    group.add_argument("--cpu-linear", choices=CPU_LINEAR_MODES, default="auto", help=CPU_LINEAR_HELP)


def add_fast_path_arguments(group: Any, *, rows: bool = True) -> None:
    """``--fast-path [ROWS]`` / ``--no-fast-path`` and ``--fast-path-mode`` (only the mode without ``rows``)."""
    from dart_core.engine.target import FAST_PATH_MODES, FAST_PATH_ROWS

    if rows:
        fast = group.add_mutually_exclusive_group()
        fast.add_argument("--fast-path", type=int, nargs="?", const=FAST_PATH_ROWS, default=None, metavar="ROWS",
                          help=FAST_PATH_HELP.format(rows=FAST_PATH_ROWS))
        fast.add_argument("--no-fast-path", dest="fast_path", action="store_const", const=0,
                          help="eager forwards over a growing cache, also on a GPU")
    group.add_argument("--fast-path-mode", choices=FAST_PATH_MODES, default="graphs", help=FAST_PATH_MODE_HELP)


def add_budget_argument(group: Any) -> None:
    group.add_argument("--budget", choices=BUDGETS, default=NODE, help=BUDGET_HELP)


def add_runtime_arguments(group: Any, *, device_help: str = DEVICE_HELP, threads_help: str = THREADS_HELP) -> None:
    """Every flag :func:`runtime_options` reads: device, dtype, CPU linear kernel, fast path, threads, the tree
    budget."""
    add_device_argument(group, help=device_help)
    add_dtype_argument(group)
    add_cpu_linear_argument(group)
    add_fast_path_arguments(group)
    add_threads_argument(group, help=threads_help)
    add_budget_argument(group)


def check_threads(threads: int | None) -> int | None:
    """``threads`` when it is None or at least 1, else a ValueError naming the flag."""
    if threads is not None and threads < 1:
        raise ValueError(f"--threads must be at least 1, got {threads}")
    return threads


def app_threads(threads: int | None, device_type: str) -> int | None:
    """The app's model threads: as given, else on a CPU one per core but one (the page and a browser on the same
    machine would otherwise stall its steps), else PyTorch's choice (None)."""
    from dart_core.engine.timing import threads_leaving_a_core

    if threads is not None:
        return check_threads(threads)
    return threads_leaving_a_core() if device_type == "cpu" else None


def runtime_options(args: argparse.Namespace) -> dict[str, Any]:
    """The flags of :func:`add_runtime_arguments` as :func:`~dart_core.arena.load_arena`'s keyword arguments."""
    return {"device": args.device, "dtype": args.dtype, "cpu_linear": args.cpu_linear, "fast_path": args.fast_path,
            "fast_path_mode": args.fast_path_mode, "threads": check_threads(args.threads),
            "budget": getattr(args, "budget", NODE)}
