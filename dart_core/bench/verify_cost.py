"""Target forward cost by tree size: what a verify of n nodes costs next to a plain AR step, on one target.

Speculative decoding wins when τ (tokens per verify) outgrows the verify's price in AR steps. On a GPU a verify of
60 nodes costs about one AR step; on a CPU each node costs compute, so this table says which tree sizes can pay off
and what τ each needs: break-even τ = verify ms / AR ms (drafting and search come on top), and the τ needed for a
given speedup is that times the speedup. ``--split N`` then says where the time of a plain step and of a verify of
N nodes goes, by kind of module (:mod:`dart_core.bench.step_split`).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

import numpy as np

from dart_core.engine.tree import DraftTree
from dart_core.options import (
    add_cpu_linear_argument,
    add_device_argument,
    add_dtype_argument,
    add_threads_argument,
    check_threads,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bundle", type=Path, default=None, help="bundle dir (default: the default bundle)")
    p.add_argument("--base", default=None, help="target model instead of the bundle's")
    add_device_argument(p)
    add_dtype_argument(p)
    add_cpu_linear_argument(p)
    add_threads_argument(p)
    p.add_argument("--prefix", type=int, default=200, help="committed tokens before the measured forward (200)")
    p.add_argument("--sizes", default="1,2,4,8,12,16,24,32,60", help="tree sizes (nodes incl. the root) to time")
    p.add_argument("--repeats", type=int, default=12, help="timed forwards per size, after 2 warm-ups (12)")
    p.add_argument("--speedup", type=float, default=1.5, help="report the τ needed for this speedup (1.5)")
    p.add_argument("--split", type=int, default=None, metavar="N",
                   help="also split a plain step and a verify of N nodes by kind of module (linear layers, attention, "
                        "norms, rotary, activation, residual adds, the model's own work, the engine's outside it)")
    p.add_argument("--json", type=Path, default=None, help="also write the figures to this JSON file")


def chain_tree(n: int, vocab: int, seed: int) -> DraftTree:
    """A chain of n nodes (a tree's cost depends on its node count, not its shape: one forward either way)."""
    rng = np.random.default_rng(seed)
    return DraftTree(tokens=rng.integers(0, vocab, size=n), parents=np.arange(-1, n - 1))


def measure(target: Any, prefix: list[int], sizes: list[int], repeats: int) -> dict[str, Any]:
    """Median ms of an AR step (1 token, no features) and of a verify of each size (with features)."""
    from dart_core.engine.timing import Stopwatch

    state = target.new_state()
    target.prefill(state, [prefix])
    ar: list[float] = []
    for i in range(repeats + 2):
        with Stopwatch(target.device) as sw:
            target.forward_tokens(state, [prefix[i % len(prefix)]], features=False)
        ar.append(sw.ms)
    out: dict[str, Any] = {"ar_ms": statistics.median(ar[2:]), "verify_ms": {}}
    for n in sizes:
        times = []
        for i in range(repeats + 2):
            tree = chain_tree(n, target.vocab_size, seed=i)
            with Stopwatch(target.device) as sw:
                target.verify(state, tree)
            times.append(sw.ms)
        out["verify_ms"][n] = statistics.median(times[2:])
    return out


def run(args: argparse.Namespace) -> int:
    import torch

    from dart_core.arena import load_target
    from dart_core.bundle import BundleError, open_bundle
    from dart_core.loading.errors import report_error

    try:
        ref = args.base or open_bundle(args.bundle).target
    except BundleError as e:
        print(f"error: {e}")
        return 2
    sizes = sorted({int(s) for s in args.sizes.split(",") if s.strip()})
    if not sizes or sizes[0] < 1:
        print("error: --sizes must list positive node counts")
        return 2
    if args.split is not None and not 1 <= args.split <= 256:
        print(f"error: --split takes a node count from 1 to 256, got {args.split}")
        return 2
    try:
        if check_threads(args.threads) is not None:
            torch.set_num_threads(args.threads)  # before loading: the CPU kernels are timed at it
    except ValueError as e:
        print(f"error: {e}")
        return 2
    try:
        target, tok = load_target(ref, device=args.device, dtype=args.dtype, cpu_linear=args.cpu_linear)
    except (ValueError, OSError) as e:  # a LoadError (or HubFileError): one line naming the file
        return report_error(e, debug_flag=None)
    text = "The history of science is a long story of people asking questions about the world. " * 40
    prefix = tok.encode(text)[: args.prefix]
    if len(prefix) < args.prefix:
        print(f"error: could not build a {args.prefix}-token prefix")
        return 2
    torch.manual_seed(0)
    fig = measure(target, prefix, sizes, args.repeats)
    ar = fig["ar_ms"]
    print(f"target {ref} on {target.device} ({target.dtype}), prefix {args.prefix} tokens, "
          f"median of {args.repeats}")
    if target.cpu_linears is not None:
        print(target.cpu_linears.describe())
    print(f"AR step (1 token): {ar:.1f} ms")
    print(f"| nodes | verify ms | × AR step = break-even τ | τ for {args.speedup:g}× |")
    print("|---|---|---|---|")
    for n, ms in fig["verify_ms"].items():
        print(f"| {n} | {ms:.1f} | {ms / ar:.2f} | {args.speedup * ms / ar:.2f} |")
    if args.split is not None:
        from dart_core.bench.step_split import format_split, measure_split

        fig["split"] = measure_split(target, prefix, args.split, args.repeats)
        print(f"\nwhere a step goes (exclusive ms per step by kind of module, median of {args.repeats}; the clocked "
              "step pays the module hooks, the bare one does not):")
        print(format_split(fig["split"]))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"target": str(ref), "device": str(target.device), "prefix": args.prefix,
                                         **fig}, indent=1))
    return 0
