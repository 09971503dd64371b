"""``python -m dart_core.generate``: stream one prompt through the loaded racers (DART, EAGLE-3, DFlash, the
model-free ones: prompt lookup, and N-gram only with a store) and plain decoding on one shared target, then print
per method τ, the draft tokens verified and accepted, the acceptance rate and mean acceptance length (vLLM's
metrics, docs/metrics.md), tokens/s and the latency split, and each drafting method's per-position acceptance
rates."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from dart_core.arena import load_arena
from dart_core.engine.acceptance import SamplingConfig
from dart_core.engine.metrics import ACCEPTANCE_FIELDS
from dart_core.loading.chat import encode_prompt
from dart_core.loading.errors import report_error
from dart_core.loading.hub import HubFileError
from dart_core.ngram.store import NgramFormatError
from dart_core.options import (
    add_mode_arguments,
    add_model_arguments,
    add_racer_settings_arguments,
    racer_settings,
    resolve_models,
    runtime_options,
)
from dart_core.options.limits import MAX_NEW_TOKENS_CAP, check_flags, loaded_problem
from dart_core.race import (
    ACCEPTANCE_HEADER,
    RaceSettings,
    Scoreboard,
    acceptance_cells,
    method_width,
    per_position_lines,
    verdict_note,
)
from dart_core.racers.registry import BASELINE, RACERS, model_free_asked, runners_asked

EXAMPLES = """examples:
  python -m dart_core.generate --base Qwen/Qwen3-1.7B --dart fvliang/qwen1.7b-dart \\
      --eagle3 AngelSlim/Qwen3-1.7B_eagle3 --ngram fvliang/dart-qwen3-ngram --small-ngram \\
      --prompt "Write a quicksort in Python."
  python -m dart_core.generate --base ./my-target --dart ./my-dart --prompt "def fib(n):" --raw
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m dart_core.generate", description=__doc__, epilog=EXAMPLES,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(p)
    g = p.add_argument_group("generation")
    src = g.add_mutually_exclusive_group()
    src.add_argument("--prompt", help="the prompt text (default: the bundle's first held-out prompt)")
    src.add_argument("--prompt-file", help="read the prompt from this file")
    g.add_argument("--methods", default=None,
                   help=f"comma-separated subset of {','.join(r.key for r in RACERS)} (default: every loaded one, "
                        f"then {BASELINE}; the model-free ones, "
                        f"{', '.join(r.key for r in RACERS if r.model_free)}, load with every target, those that "
                        "draft from the N-gram store with a store)")
    add_mode_arguments(g)
    g.add_argument("--max-new-tokens", type=int, default=256,
                   help="default %(default)s; at most the target's context, read from its config.json before "
                        f"loading, or {MAX_NEW_TOKENS_CAP:,} where that is not on this machine yet")
    g.add_argument("--max-length", type=int, default=None, help="limit on prompt + output tokens")
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--top-k", type=int, default=0)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--no-stream", action="store_true", help="print only the summary")
    g.add_argument("--json", action="store_true", help="print the summary as JSON")
    g.add_argument("--no-progress", action="store_true", help="no loading bar")
    g.add_argument("--debug", action="store_true", help="show the traceback of an error (by default one line)")
    add_racer_settings_arguments(p)
    return p


def prompt_text(args: argparse.Namespace, bundle_prompts: Path | None) -> str:
    """``--prompt``, the ``--prompt-file``'s text, or the bundle's first held-out prompt."""
    if args.prompt is not None:
        return args.prompt
    if args.prompt_file is not None:
        return Path(args.prompt_file).read_text(encoding="utf-8")
    if bundle_prompts is not None and bundle_prompts.is_file():
        for line in bundle_prompts.read_text(encoding="utf-8").splitlines():
            if line.strip():
                return str(json.loads(line)["prompt"])
    raise ValueError("no prompt: pass --prompt TEXT or --prompt-file FILE")


def run(args: argparse.Namespace) -> int:
    models = resolve_models(args)
    for note in models.notes:
        print(f"note: {note}", file=sys.stderr)
    asked = args.methods.split(",") if args.methods else None
    arena = load_arena(models.base, ngram=models.ngram, small_ngram=models.small_ngram,
                       ngram_memory=models.ngram_memory, progress=not args.no_progress,
                       **runtime_options(args), **models.drafters, **model_free_asked(asked), **runners_asked(asked))
    methods = asked or arena.methods
    for m in methods:
        arena.drafter(m)  # clear error for a method that is not loaded
    bundle_prompts = models.opened.prompts if models.opened is not None else None
    text = prompt_text(args, bundle_prompts)
    problem = loaded_problem(args, arena.tokenizer, arena.target, [text])
    if problem is not None:  # a target whose limits were not readable before loading
        raise ValueError(problem)
    if args.prompt is None and args.prompt_file is None and not args.no_stream:
        print(f"prompt (the bundle's first held-out one): {text}", flush=True)
    ids = encode_prompt(arena.tokenizer, text, chat=models.chat, system=args.system)
    sampling = SamplingConfig(args.temperature, args.top_p, args.top_k)
    settings = racer_settings(args, arena.target.device)
    board = Scoreboard(methods, dict.fromkeys(methods, ids),
                       RaceSettings(sampling=sampling, max_new_tokens=args.max_new_tokens,
                                    max_length=args.max_length, racer_settings=settings, seed=args.seed))
    board.dtype = arena.target.dtype
    for method in methods:  # one racer after another, each streamed as it runs
        lane = board.lanes[method]
        lane.status = "running"
        generator = torch.Generator(device=arena.target.feature_device).manual_seed(args.seed)
        shown = ""
        if not args.no_stream:
            print(f"\n=== {method} ===", flush=True)
        for step in arena.stream(method, ids, sampling=sampling, max_new_tokens=args.max_new_tokens,
                                 max_length=args.max_length, generator=generator, settings=settings[method]):
            lane.add(step)
            if not args.no_stream:
                now = arena.tokenizer.decode(lane.tokens, skip_special_tokens=True)
                print(now[len(shown):], end="", flush=True)
                shown = now
        lane.status = "done"
        if not args.no_stream:
            print(f"\n[{lane.stop_reason}]", flush=True)
    print_summary(board, as_json=args.json)
    return 0


def print_summary(board: Scoreboard, *, as_json: bool) -> None:
    """One row per method: τ, speed, the acceptance metrics (``RunStats.acceptance``, unrounded in ``--json``),
    the per-step split and, greedy, the check against AR (a rounding tie named as one); then each drafting
    method's per-position acceptance rates."""
    summary = board.summary()
    verdicts = board.greedy_verdicts() or {}
    rows = []
    for m, f in summary.items():
        row = {"method": m, **{k: f[k] for k in ("tokens", "forwards", "tau", "tokens_per_s", "speedup_vs_ar",
                                                  "draft_ms_per_step", "search_ms_per_step", "verify_ms_per_step",
                                                  "prefill_ms")},
               **{k: f[k] for k in ACCEPTANCE_FIELDS}}
        if m in verdicts:
            row["greedy_check"] = verdicts[m].kind  # identical | tie | mismatch
            row["matches_ar"] = verdicts[m].ok
        rows.append(row)
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    w = method_width(r["method"] for r in rows)
    print(f"\n{'method':<{w}} {'tokens':>6} {'fwds':>5} {'tau':>6} {ACCEPTANCE_HEADER} {'tok/s':>8} {'vs AR':>6} "
          f"{'draft ms':>9} {'search ms':>10} {'verify ms':>10}  (per step)")
    for r in rows:
        speed = f"{r['speedup_vs_ar']:.2f}x" if r["speedup_vs_ar"] else "-"
        print(f"{r['method']:<{w}} {r['tokens']:>6} {r['forwards']:>5} {r['tau']:>6.2f} {acceptance_cells(r)} "
              f"{r['tokens_per_s']:>8.1f} {speed:>6} {r['draft_ms_per_step']:>9.2f} {r['search_ms_per_step']:>10.2f} "
              f"{r['verify_ms_per_step']:>10.2f}{verdict_note(verdicts.get(r['method']), board.dtype)}")
    ties = sum(v.kind == "tie" for v in verdicts.values())
    if verdicts:
        bad = sum(not v.ok for v in verdicts.values())
        print(f"greedy check against {BASELINE}: {len(verdicts) - ties - bad} identical, {ties} tie(s) of the target's "
              f"best logits within {str(board.dtype).removeprefix('torch.')} rounding, {bad} mismatch(es)")
    for line in per_position_lines({r["method"]: r for r in rows}):
        print(line)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    refused = check_flags(parser, args)  # before any model loads
    if refused is not None:
        return refused
    try:
        return run(args)
    except (HubFileError, NgramFormatError, ValueError, OSError) as e:  # a LoadError names its file
        return report_error(e, debug=args.debug)


if __name__ == "__main__":
    sys.exit(main())
