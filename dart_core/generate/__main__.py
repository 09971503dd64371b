"""``python -m dart_core.generate``: stream one prompt through the loaded racers (DART, EAGLE-3, DFlash, the
model-free ones: prompt lookup, and N-gram only with a store) and plain decoding on one shared target, then print
per method τ, the draft tokens verified and accepted, the acceptance rate and mean acceptance length (vLLM's
metrics, docs/metrics.md), tokens/s and the latency split, and each drafting method's per-position acceptance
rates."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from dart_core.arena import load_arena
from dart_core.drafters.interface import check_settings
from dart_core.engine.cpu import AUTO_DTYPE_HELP
from dart_core.engine.cpu_linear import CPU_LINEAR_HELP
from dart_core.engine.cpu_linear import MODES as CPU_LINEAR_MODES
from dart_core.engine.loop import Step
from dart_core.engine.metrics import summarize
from dart_core.engine.verify import SamplingConfig
from dart_core.loading.errors import report_error
from dart_core.loading.hub import HubFileError
from dart_core.ngram.store import NgramFormatError
from dart_core.racers.registry import BASELINE, RACERS, checkpoint_racers, drafting_racers, model_free_asked

EXAMPLES = """examples:
  python -m dart_core.generate --base Qwen/Qwen3-1.7B --dart fvliang/qwen1.7b-dart \\
      --eagle3 AngelSlim/Qwen3-1.7B_eagle3 --ngram fvliang/dart-qwen3-ngram --small-ngram \\
      --prompt "Write a quicksort in Python."
  python -m dart_core.generate --base ./my-target --dart ./my-dart --prompt "def fib(n):" --raw
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m dart_core.generate", description=__doc__, epilog=EXAMPLES,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    m = p.add_argument_group("models (local directories or Hub ids)")
    m.add_argument("--base", required=True, help="target model (e.g. Qwen/Qwen3-1.7B)")
    for r in checkpoint_racers():
        m.add_argument(f"--{r.key}", metavar="MODEL", help=f"{r.label} drafter ({r.blurb}), e.g. {r.example}")
    m.add_argument("--ngram", help="N-gram store: a file, or a dir / Hub repo with small.trie / full.trie")
    m.add_argument("--small-ngram", action="store_true", help="use small.trie (quick demos) instead of full.trie")
    m.add_argument("--device", default=None, help="cpu, cuda, cuda:N or auto (spread over GPUs); default: cuda if "
                   "available")
    m.add_argument("--dtype", default="auto", help=AUTO_DTYPE_HELP)
    m.add_argument("--cpu-linear", choices=CPU_LINEAR_MODES, default="auto", help=CPU_LINEAR_HELP)
    g = p.add_argument_group("generation")
    src = g.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="the prompt text")
    src.add_argument("--prompt-file", help="read the prompt from this file")
    g.add_argument("--methods", default=None,
                   help=f"comma-separated subset of {','.join(r.key for r in RACERS)} (default: every loaded one, "
                        f"then {BASELINE}; the model-free ones, "
                        f"{', '.join(r.key for r in RACERS if r.model_free)}, load with every target, those that "
                        "draft from the N-gram store with --ngram)")
    g.add_argument("--raw", action="store_true", help="completion mode: no chat template")
    g.add_argument("--system", default=None, help="system prompt (chat mode)")
    g.add_argument("--max-new-tokens", type=int, default=256)
    g.add_argument("--max-length", type=int, default=None, help="limit on prompt + output tokens")
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--top-k", type=int, default=0)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--no-stream", action="store_true", help="print only the summary")
    g.add_argument("--json", action="store_true", help="print the summary as JSON")
    g.add_argument("--debug", action="store_true", help="show the traceback of an error (by default one line)")
    add_tree_arguments(p)
    return p


def add_tree_arguments(p: argparse.ArgumentParser) -> None:
    """Every racer's settings as ``--<racer>-<flag>`` options, shared by this CLI and the benchmark (unset: the
    racer's defaults for the device)."""
    for r in drafting_racers():
        ks = r.knobs()
        if not ks:
            continue
        g = p.add_argument_group(f"{r.label} settings (defaults: the reference's on GPUs; where a CPU default is "
                                 "given, a verify forward there costs time in proportion to its nodes)")
        for k in ks:
            if k.kind is bool:  # a switch: --<racer>-<flag> / --no-<racer>-<flag>
                g.add_argument(f"--{r.key}-{k.flag}", dest=f"{r.dest}__{k.name}", default=None,
                               action=argparse.BooleanOptionalAction,
                               help=f"{k.help} (default {'on' if k.default else 'off'})")
                continue
            cpu = f"; CPU {k.cpu}" if k.cpu is not None else ""
            g.add_argument(f"--{r.key}-{k.flag}", dest=f"{r.dest}__{k.name}", type=k.kind, default=None,
                           metavar="N" if k.kind is int else "X",
                           help=f"{k.help} (default {k.default}{cpu}; {k.low:g}..{k.high:g})")


def knob_argv(r: Any, k: Any, value: Any) -> list[str]:
    """A setting's value as the command-line words that set it (a switch: ``--<racer>-<flag>`` or ``--no-…``)."""
    if k.kind is bool:
        return [f"--{'' if value else 'no-'}{r.key}-{k.flag}"]
    return [f"--{r.key}-{k.flag}", str(value)]


def tree_settings(args: argparse.Namespace, device: str | torch.device) -> dict[str, Any]:
    """Per racer key: its settings for ``device`` with every option the user set applied on top (ValueError
    naming the option when out of bounds)."""
    out = {}
    for r in RACERS:
        given = {k.name: getattr(args, f"{r.dest}__{k.name}", None) for k in r.knobs()}
        settings = replace(r.default_settings(device), **{n: v for n, v in given.items() if v is not None})
        out[r.key] = check_settings(settings, f"--{r.key}:")
    return out


def encode_prompt(tokenizer: Any, text: str, *, raw: bool, system: str | None) -> list[int]:
    """Chat template (thinking off, for Qwen3) when the tokenizer has one and ``raw`` is off; else plain text."""
    if not raw and getattr(tokenizer, "chat_template", None):
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": text}]
        rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                                 enable_thinking=False)
        return tokenizer(rendered, add_special_tokens=False)["input_ids"]
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def run(args: argparse.Namespace) -> int:
    drafters = {r.key: getattr(args, r.dest) for r in checkpoint_racers()}
    asked = args.methods.split(",") if args.methods else None
    arena = load_arena(args.base, ngram=args.ngram, small_ngram=args.small_ngram, device=args.device,
                       dtype=args.dtype, cpu_linear=args.cpu_linear, **drafters, **model_free_asked(asked))
    methods = asked or arena.methods
    for m in methods:
        arena.drafter(m)  # clear error for a method that is not loaded
    text = args.prompt if args.prompt is not None else Path(args.prompt_file).read_text(encoding="utf-8")
    ids = encode_prompt(arena.tokenizer, text, raw=args.raw, system=args.system)
    sampling = SamplingConfig(args.temperature, args.top_p, args.top_k)
    settings = tree_settings(args, arena.target.device)
    results: dict[str, tuple[list[int], list[Step]]] = {}
    for method in methods:
        generator = torch.Generator(device=arena.target.feature_device).manual_seed(args.seed)
        steps: list[Step] = []
        tokens: list[int] = []
        shown = ""
        if not args.no_stream:
            print(f"\n=== {method} ===", flush=True)
        for step in arena.stream(method, ids, sampling=sampling, max_new_tokens=args.max_new_tokens,
                                 max_length=args.max_length, generator=generator, settings=settings[method]):
            steps.append(step)
            tokens.extend(step.tokens)
            if not args.no_stream:
                now = arena.tokenizer.decode(tokens, skip_special_tokens=True)
                print(now[len(shown):], end="", flush=True)
                shown = now
        if not args.no_stream:
            print(f"\n[{steps[-1].stop_reason}]", flush=True)
        results[method] = (tokens, steps)
    print_summary(results, greedy=sampling.greedy, as_json=args.json)
    return 0


ACCEPTANCE_HEADER = f"{'drafted':>8} {'accepted':>8} {'rate':>6} {'acc len':>7}"


def method_width(names: Any) -> int:
    """The method column's width in the printed tables: the longest racer key (``prompt-lookup``) keeps the
    columns aligned."""
    return max(8, *(len(str(n)) for n in names))


def acceptance_cells(figures: dict[str, Any]) -> str:
    """A row's acceptance columns (under ``ACCEPTANCE_HEADER``): draft tokens verified and accepted, the draft
    acceptance rate and the mean acceptance length; dashes for a racer without drafting steps."""
    if not figures["num_drafts"]:
        return f"{'-':>8} {'-':>8} {'-':>6} {'-':>7}"
    return (f"{figures['num_draft_tokens']:>8} {figures['num_accepted_tokens']:>8} "
            f"{figures['draft_acceptance_rate']:>6.1%} {figures['mean_acceptance_length']:>7.2f}")


def per_position_lines(rows: dict[str, dict[str, Any]]) -> list[str]:
    """vLLM's "Per-position acceptance rate" line for each drafting racer in ``rows`` (name -> figures)."""
    shown = {name: f for name, f in rows.items() if f["num_drafts"]}
    if not shown:
        return []
    return ["per-position acceptance rate (share of drafting steps that accepted at least k draft tokens, k = 1, 2, "
            "...):", *(f"  {name:<12} " + ", ".join(f"{r:.3f}" for r in f["per_position_acceptance_rate"])
                       for name, f in shown.items())]


def print_summary(results: dict[str, tuple[list[int], list[Step]]], *, greedy: bool, as_json: bool) -> None:
    """One row per method: τ, speed, the acceptance metrics (``RunStats.acceptance``, unrounded in ``--json``)
    and the per-step split; then each drafting method's per-position acceptance rates."""
    stats = {m: summarize(steps) for m, (_, steps) in results.items()}
    ar = stats.get(BASELINE)
    rows = []
    for m, s in stats.items():
        speedup = s.speedup_over(ar)
        row = {"method": m, "tokens": s.new_tokens, "forwards": s.forwards, "tau": round(s.tau, 3),
               "tokens_per_s": round(s.tokens_per_s, 2),
               "speedup_vs_ar": round(speedup, 3) if speedup is not None else None,
               "draft_ms_per_step": round(s.draft_ms_per_step, 3),
               "search_ms_per_step": round(s.search_ms_per_step, 3),
               "verify_ms_per_step": round(s.verify_ms_per_step, 3), "prefill_ms": round(s.prefill_ms, 2),
               **s.acceptance()}
        if greedy and BASELINE in results and m != BASELINE:
            row["matches_ar"] = results[m][0] == results[BASELINE][0]
        rows.append(row)
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    w = method_width(r["method"] for r in rows)
    print(f"\n{'method':<{w}} {'tokens':>6} {'fwds':>5} {'tau':>6} {ACCEPTANCE_HEADER} {'tok/s':>8} {'vs AR':>6} "
          f"{'draft ms':>9} {'search ms':>10} {'verify ms':>10}  (per step)")
    for r in rows:
        speed = f"{r['speedup_vs_ar']:.2f}x" if r["speedup_vs_ar"] else "-"
        note = "" if r.get("matches_ar", True) else "   OUTPUT DIFFERS FROM AR (greedy): please report"
        print(f"{r['method']:<{w}} {r['tokens']:>6} {r['forwards']:>5} {r['tau']:>6.2f} {acceptance_cells(r)} "
              f"{r['tokens_per_s']:>8.1f} {speed:>6} {r['draft_ms_per_step']:>9.2f} {r['search_ms_per_step']:>10.2f} "
              f"{r['verify_ms_per_step']:>10.2f}{note}")
    for line in per_position_lines({r["method"]: r for r in rows}):
        print(line)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except (HubFileError, NgramFormatError, ValueError, OSError) as e:  # a LoadError names its file
        return report_error(e, debug=args.debug)


if __name__ == "__main__":
    sys.exit(main())
