"""Decode-step attention on a CPU: the distillation's native kernel against transformers' SDPA, side by side.

One new token per row attends over its cached keys and values, as in every decode step of
``python -m dart_core.train distill`` at batch ``--batch``: the SmolLM2-135M shapes by default (9 query heads over
3 key/value heads of 64), a cache of ``--length`` positions in buffers ``--length + 64`` long (the views the cache
hands the model), the first fifth of every other row padding (masked), and ``--layers`` separate buffers visited in
turn, so the cache is read from memory as in a model, not from the processor's caches. Prints, per dtype, the
milliseconds a layer, the cache bytes read a second and the native kernel's speedup over
``transformers.integrations.sdpa_attention.sdpa_attention_forward`` (what the stock model runs), with the largest
difference between the two outputs.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch

from dart_core.options import add_dtype_argument, add_threads_argument, check_threads


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--batch", type=int, default=256, help="rows (default 256, the distillation's CPU batch)")
    p.add_argument("--length", type=int, default=200, help="cached positions per row (default 200)")
    p.add_argument("--heads", type=int, default=9, help="query heads (default 9, SmolLM2-135M's)")
    p.add_argument("--kv-heads", type=int, default=3, help="key/value heads (default 3)")
    p.add_argument("--head-dim", type=int, default=64, help="head width (default 64)")
    p.add_argument("--layers", type=int, default=12, help="separate cache buffers visited in turn (default 12)")
    p.add_argument("--repeats", type=int, default=3, help="passes over the layers per method (default 3)")
    add_dtype_argument(p, help="bfloat16, float32, float16", multiple=True)
    add_threads_argument(p, help="PyTorch CPU threads (default: PyTorch's, one per core)")
    p.add_argument("--json", type=Path, default=None, help="also write the figures to this JSON file")


class _Module(torch.nn.Module):
    """What transformers' attention functions read from the attention module."""

    def __init__(self, groups: int) -> None:
        super().__init__()
        self.num_key_value_groups = groups
        self.is_causal = True


def _time(fn: Any, layers: int, repeats: int) -> float:
    fn(0)  # warm-up
    t0 = time.perf_counter()
    for _ in range(repeats):
        for i in range(layers):
            fn(i)
    return (time.perf_counter() - t0) / (repeats * layers)


def measure(args: argparse.Namespace, dtype: torch.dtype) -> dict[str, Any]:
    """Both methods over the same buffers; seconds a layer, GB/s of cache read, the outputs' largest difference."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from dart_core.engine.cpu_attention import native_attention

    b, n, h, kv, d = args.batch, args.length, args.heads, args.kv_heads, args.head_dim
    gen = torch.Generator().manual_seed(0)
    keys = [torch.randn(b, kv, n + 64, d, generator=gen).to(dtype) for _ in range(args.layers)]
    values = [torch.randn(b, kv, n + 64, d, generator=gen).to(dtype) for _ in range(args.layers)]
    query = torch.randn(b, 1, h, d, generator=gen).to(dtype).transpose(1, 2)  # as the model's projection gives it
    mask = torch.ones(b, 1, 1, n, dtype=torch.bool)
    mask[::2, ..., : n // 5] = False
    module = _Module(h // kv).eval()
    outs: dict[str, torch.Tensor] = {}

    def method(name: str, fn: Any) -> Any:
        def one(i: int) -> None:
            outs[name] = fn(module, query, keys[i][:, :, :n], values[i][:, :, :n], mask, scaling=d ** -0.5)[0]
        return one

    with torch.inference_mode():
        native_s = _time(method("native", native_attention), args.layers, args.repeats)
        sdpa_s = _time(method("sdpa", sdpa_attention_forward), args.layers, args.repeats)
    read = b * kv * n * d * 2 * torch.finfo(dtype).bits // 8  # keys and values, every position
    diff = float((outs["native"].float() - outs["sdpa"].float()).abs().max())
    return {"dtype": str(dtype).removeprefix("torch."), "native_ms": native_s * 1e3, "sdpa_ms": sdpa_s * 1e3,
            "native_gb_s": read / native_s / 1e9, "sdpa_gb_s": read / sdpa_s / 1e9, "speedup": sdpa_s / native_s,
            "max_abs_diff": diff}


def run(args: argparse.Namespace) -> int:
    if check_threads(args.threads):
        torch.set_num_threads(args.threads)
    if args.heads % args.kv_heads:
        raise SystemExit("--heads must be a multiple of --kv-heads")
    print(f"decode attention: batch {args.batch}, {args.length} cached positions, {args.heads} query heads over "
          f"{args.kv_heads} key/value heads of {args.head_dim}, {args.layers} buffers, "
          f"{torch.get_num_threads()} threads")
    print(f"{'dtype':<9} {'native ms':>10} {'GB/s':>6} {'sdpa ms':>9} {'GB/s':>6} {'speedup':>8} {'max diff':>9}")
    rows = []
    for name in args.dtype.split(","):
        dtype = getattr(torch, name.strip(), None)
        if dtype not in (torch.float32, torch.bfloat16):
            raise SystemExit(f"--dtypes: {name!r} is not float32 or bfloat16")
        r = measure(args, dtype)
        rows.append(r)
        print(f"{r['dtype']:<9} {r['native_ms']:>10.2f} {r['native_gb_s']:>6.1f} {r['sdpa_ms']:>9.2f} "
              f"{r['sdpa_gb_s']:>6.1f} {r['speedup']:>7.2f}x {r['max_abs_diff']:>9.2g}")
    if args.json:
        args.json.write_text(json.dumps({"command": args.command, "rows": rows}, indent=1) + "\n")
    return 0
