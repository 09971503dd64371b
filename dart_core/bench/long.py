"""Long generations: does a drafter's cost per step stay flat as the context grows?

Each drafting method generates ``--tokens`` new tokens from one prompt on the bundle's target (stop tokens ignored,
so every run reaches the length), greedy, with the device's default tree settings. Printed per method: the
drafter's mean ms per step over the first and the last ``--window`` verify steps and their ratio (a drafter cache
that copied itself every step, or grew by concatenation, shows up as a ratio well above 1), τ, and tokens/s by
the wall clock around the whole generation.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from dart_core.options import add_device_argument, add_dtype_argument

PROMPT = "Write a long, detailed tutorial on sorting algorithms in Python, with code for each one."


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bundle", type=Path, default=None, help="bundle dir (default: the default bundle)")
    p.add_argument("--tokens", type=int, default=2000, help="new tokens per generation (2000)")
    p.add_argument("--window", type=int, default=100, help="verify steps averaged at each end (100)")
    p.add_argument("--methods", default=None, help="comma-separated drafting methods (default: every loaded one)")
    p.add_argument("--prompt", default=PROMPT, help="the prompt (chat template when the bundle is a chat bundle)")
    add_device_argument(p)
    add_dtype_argument(p)
    p.add_argument("--json", type=Path, default=None, help="also write the figures to this JSON file")


def figures(steps: list[Any], window: int, wall_s: float) -> dict[str, Any]:
    """Drafter ms per step (draft + search) over the first / last ``window`` verify steps, τ, wall tokens/s."""
    body = [s for s in steps if not s.prefill]
    cost = [s.draft_ms + s.search_ms for s in body]
    w = min(window, len(cost) // 2) or 1
    first, last = statistics.fmean(cost[:w]), statistics.fmean(cost[-w:])
    tokens = sum(len(s.tokens) for s in steps)
    return {"verify_steps": len(body), "window": w, "draft_ms_first": first, "draft_ms_last": last,
            "last_over_first": last / first if first > 0 else None, "tokens": tokens,
            "tau": sum(len(s.tokens) for s in body) / max(len(body), 1), "tokens_per_s_wall": tokens / wall_s}


def run(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm

    from dart_core.arena import load_arena
    from dart_core.bundle import BundleError, open_bundle
    from dart_core.loading.chat import encode_prompt
    from dart_core.loading.errors import report_error
    from dart_core.race import method_width
    from dart_core.racers.registry import racer

    try:
        bundle = open_bundle(args.bundle)
    except BundleError as e:
        print(f"error: {e}")
        return 2
    try:
        arena = load_arena(bundle.target, ngram=bundle.ngram, device=args.device, dtype=args.dtype,
                           **{k: str(v) for k, v in bundle.drafters.items()})
    except (ValueError, OSError) as e:  # a LoadError (or HubFileError): one line naming the file
        return report_error(e, debug_flag=None)
    methods = args.methods.split(",") if args.methods else [m for m in arena.methods if racer(m).drafts]
    ids = encode_prompt(arena.tokenizer, args.prompt, chat=bundle.chat)
    if len(ids) + args.tokens > arena.target.max_context:
        print(f"error: {len(ids)} prompt + {args.tokens} new tokens exceed the target's context "
              f"({arena.target.max_context})")
        return 2
    device = arena.target.device
    out: dict[str, Any] = {}
    for m in methods:
        settings = racer(m).default_settings(device)
        bar = tqdm(total=args.tokens, desc=m, unit="tok")
        steps = []
        start = time.perf_counter()
        for step in arena.stream(m, ids, settings=settings, max_new_tokens=args.tokens, stop_token_ids=()):
            steps.append(step)
            bar.update(len(step.tokens))
        wall = time.perf_counter() - start
        bar.close()
        out[m] = figures(steps, args.window, wall)
    print(f"\n{args.tokens} new tokens per method, {device}, first / last {args.window} verify steps")
    w = method_width(out)
    print(f"{'method':<{w}} {'steps':>6} {'tau':>5} {'draft ms first':>15} {'draft ms last':>14} {'last/first':>10} "
          f"{'tok/s wall':>10}")
    for m, f in out.items():
        ratio = "–" if f["last_over_first"] is None else f"{f['last_over_first']:.3f}"  # no drafting cost at first
        print(f"{m:<{w}} {f['verify_steps']:>6} {f['tau']:>5.2f} {f['draft_ms_first']:>15.2f} "
              f"{f['draft_ms_last']:>14.2f} {ratio:>10} {f['tokens_per_s_wall']:>10.1f}")
    if args.json is not None:
        args.json.write_text(json.dumps({"tokens": args.tokens, "device": str(device), "methods": out}, indent=1))
    return 0
