"""Long answers: how each racer fares as the answer grows, by position in the output.

Every racer (plain decoding included, for the speedups) answers the same prompts with ``--max-new-tokens`` new
tokens (stop tokens ignored unless ``--stop-at-eos``, so every run reaches the length), greedy, with the device's
default settings (``--<racer>-*`` override them). Each step's tokens count in the output-position bucket where
the step starts (0–128, 128–256, 256–512, 512–1,024, 1,024–2,048): per bucket and racer, τ (tokens per verify
forward) and tokens/s by the wall clock between steps, with the speedup over plain decoding in the same bucket.
Also per racer: the drafter's ms per step over the first and the last ``--window`` verify steps (a drafter cache that
copied itself every step shows up as a ratio well above 1). Writes ``long.json`` (``by_position``) and ``long.html``
(τ and tokens/s against position, one line per racer; a drafter whose attention sees only the last
``context_window`` rows is marked where the window starts to cut).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dart_core.bench.e2e import add_prompt_source
from dart_core.options import add_mode_arguments, add_model_arguments, add_racer_settings_arguments

BUCKET_EDGES = (0, 128, 256, 512, 1024, 2048)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_arguments(p)
    g = p.add_argument_group("run")
    source = add_prompt_source(g)
    source.add_argument("--prompt", default=None, help="one prompt text instead of a prompt set")
    add_mode_arguments(g)
    g.add_argument("--limit", type=int, default=8, help="the first N prompts of the set (default 8; 0 = all)")
    g.add_argument("--max-new-tokens", "--tokens", dest="max_new_tokens", type=int, default=1024,
                   help="new tokens per answer (default 1024; at most the target's context minus the prompt: "
                        "over the context it is refused before loading where the target's config.json is on this "
                        "machine, the rest once the prompts are tokenized)")
    g.add_argument("--stop-at-eos", action="store_true",
                   help="end an answer at a stop token (by default they are ignored, so every answer is long)")
    g.add_argument("--methods", default=None, help="comma-separated racers (default: every loaded one, then ar)")
    g.add_argument("--window", type=int, default=100, help="verify steps averaged at each end (100)")
    g.add_argument("--out", type=Path, default=None, help="output dir for long.json / long.html (default "
                   "$DART_ARENA_RESULTS or $DART_ARENA_CACHE/bench, in long-<timestamp>/)")
    g.add_argument("--no-html", action="store_true", help="skip the plotly HTML report")
    g.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_racer_settings_arguments(p)


def buckets(max_new_tokens: int) -> list[tuple[int, int]]:
    """The position buckets up to ``max_new_tokens`` (the last one cut at it)."""
    edges = [e for e in BUCKET_EDGES if e < max_new_tokens] + [max_new_tokens]
    return list(itertools.pairwise(edges))


def bucket_figures(runs: Sequence[Sequence[tuple[Any, float]]], spans: Sequence[tuple[int, int]]) -> list[dict]:
    """Per bucket: τ over the verify steps that start in it, tokens/s over the wall ms of the steps that start
    in it, and how many steps and tokens that was (``runs``: each answer's (step, wall ms) pairs, in order)."""
    out = []
    for start, end in spans:
        tokens = verify_tokens = steps = 0
        ms = 0.0
        for run in runs:
            pos = 0
            for step, wall_ms in run:
                if start <= pos < end:
                    tokens += len(step.tokens)
                    ms += wall_ms
                    if not step.prefill:
                        steps += 1
                        verify_tokens += len(step.tokens)
                pos += len(step.tokens)
        out.append({"tokens": tokens, "verify_steps": steps, "tau": verify_tokens / steps if steps else None,
                    "tokens_per_s": tokens / (ms / 1e3) if ms > 0 else None})
    return out


def drafter_cost(runs: Sequence[Sequence[tuple[Any, float]]], window: int) -> dict[str, Any]:
    """The drafter's mean ms per step (draft + search) over the first / last ``window`` verify steps of each
    answer, averaged over the answers, and their ratio."""
    firsts, lasts = [], []
    for run in runs:
        cost = [s.draft_ms + s.search_ms for s, _ in run if not s.prefill]
        if not cost:
            continue
        w = min(window, len(cost) // 2) or 1
        firsts.append(statistics.fmean(cost[:w]))
        lasts.append(statistics.fmean(cost[-w:]))
    first = statistics.fmean(firsts) if firsts else 0.0
    last = statistics.fmean(lasts) if lasts else 0.0
    return {"draft_ms_first": first, "draft_ms_last": last, "last_over_first": last / first if first > 0 else None}


def sources(args: argparse.Namespace) -> tuple[Any, list[dict[str, Any]]]:
    """The models (as ``bench e2e`` resolves them) and the prompts: ``--prompt``, a named set, or a prompt file
    (the bundle's held-out prompts by default), the first ``--limit``."""
    from dart_core.bench.e2e import BenchError, load_prompts, resolve_sources
    from dart_core.options import ModelsError, resolve_models

    if args.prompt is not None:
        try:
            models = resolve_models(args)
        except ModelsError as e:
            raise BenchError(str(e)) from None
        return models, [{"id": "prompt", "prompt": args.prompt}]
    src = resolve_sources(args)
    return src, load_prompts(src, args.limit)


def run(args: argparse.Namespace) -> int:
    from dart_core.bench.e2e import reported

    return reported(_run, args)


def _run(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm

    from dart_core.arena import load_arena
    from dart_core.bench.e2e import BenchError
    from dart_core.loading.chat import encode_prompt
    from dart_core.options import racer_settings, runtime_options
    from dart_core.options.limits import loaded_problem, prompts_problem, target_limits
    from dart_core.race import command_line, models_identity, results_dir, run_record
    from dart_core.racers.registry import BASELINE, model_free_asked, runners_asked

    src, prompts = sources(args)
    if args.prompt is None:  # a prompt set read before the load; --prompt was checked with the flags
        problem = prompts_problem((p["prompt"] for p in prompts), str(src.prompts or src.dataset),
                                  target_limits(src.base))
        if problem is not None:
            raise BenchError(problem)
    asked = args.methods.split(",") if args.methods else None
    arena = load_arena(src.base, ngram=src.ngram, small_ngram=src.small_ngram, progress=not args.no_progress,
                       **runtime_options(args), **src.drafters, **model_free_asked(asked), **runners_asked(asked))
    methods = asked or arena.methods
    for m in methods:
        arena.drafter(m)  # a clear error for a method that is not loaded
    problem = loaded_problem(args, arena.tokenizer, arena.target, [p["prompt"] for p in prompts])
    if problem is not None:  # a target whose limits were not readable before loading
        raise BenchError(problem)
    chat = src.chat and bool(getattr(arena.tokenizer, "chat_template", None))
    encoded = [encode_prompt(arena.tokenizer, p["prompt"], chat=chat, system=args.system) for p in prompts]
    longest = max(len(ids) for ids in encoded)
    if longest + args.max_new_tokens > arena.target.max_context:
        raise BenchError(f"{longest} prompt + {args.max_new_tokens} new tokens exceed the target's context "
                         f"({arena.target.max_context}): lower --max-new-tokens")
    settings = racer_settings(args, arena.target.device)
    stops = None if args.stop_at_eos else ()
    runs: dict[str, list[list[tuple[Any, float]]]] = {m: [] for m in methods}
    bar = tqdm(total=len(methods) * len(encoded) * args.max_new_tokens, desc="long", unit="tok",
               disable=args.no_progress)
    for ids in encoded:
        for m in methods:
            pairs: list[tuple[Any, float]] = []
            extra = {} if stops is None else {"stop_token_ids": stops}
            last = time.perf_counter()
            for step in arena.stream(m, ids, settings=settings.get(m), max_new_tokens=args.max_new_tokens, **extra):
                now = time.perf_counter()
                pairs.append((step, (now - last) * 1e3))
                last = now
                bar.update(len(step.tokens))
            runs[m].append(pairs)
    bar.close()
    spans = buckets(args.max_new_tokens)
    per_racer = {m: bucket_figures(runs[m], spans) for m in methods}
    by_position = []
    for i, (start, end) in enumerate(spans):
        ar = per_racer.get(BASELINE, [{}] * len(spans))[i].get("tokens_per_s")
        racers = {}
        for m in methods:
            f = dict(per_racer[m][i])
            f["speedup_vs_ar"] = f["tokens_per_s"] / ar if ar and f["tokens_per_s"] else None
            racers[m] = f
        by_position.append({"start": start, "end": end, "racers": racers})
    windows = {m: w for m in methods
               if (w := getattr(getattr(arena.drafter(m), "config", None), "context_window", None))}
    models = models_identity(src.base, src.drafters, src.ngram, src.small_ngram)
    report = {
        "run": run_record(getattr(args, "command", None) or command_line([], ("python", "-m", "dart_core.bench",
                                                                               "long")), models),
        "config": {"base": src.base, "drafters": src.drafters, "ngram": src.ngram, "methods": methods,
                   "n_prompts": len(prompts), "max_new_tokens": args.max_new_tokens, "stop_at_eos": args.stop_at_eos,
                   "device": str(arena.target.device), "dtype": str(arena.target.dtype).removeprefix("torch."),
                   "chat": chat, "mean_prompt_tokens": statistics.fmean(len(ids) for ids in encoded)},
        "by_position": by_position,
        "drafter_cost": {m: drafter_cost(runs[m], args.window) for m in methods},
        "context_windows": windows,
    }
    print_table(report)
    out = args.out or results_dir() / f"long-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    (out / "long.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    print(f"wrote {out / 'long.json'}")
    if not args.no_html:
        write_html(report, out / "long.html")
        print(f"wrote {out / 'long.html'}")
    return 0


def print_table(report: dict[str, Any]) -> None:
    """τ and × AR per position bucket (one column per racer), then each racer's drafter cost at both ends."""
    from dart_core.race import method_width

    cfg = report["config"]
    methods = cfg["methods"]
    print(f"\n{cfg['n_prompts']} prompt(s) x {cfg['max_new_tokens']} new tokens, {cfg['device']}, {cfg['dtype']}; "
          "per output position: tau / tokens/s (wall) / x AR")
    w = max(14, *(len(m) for m in methods))
    print(f"{'position':<12} " + " ".join(f"{m:>{w}}" for m in methods))
    for b in report["by_position"]:
        cells = []
        for m in methods:
            f = b["racers"][m]
            tau = f"{f['tau']:.2f}" if f["tau"] is not None else "-"
            tps = f"{f['tokens_per_s']:.1f}" if f["tokens_per_s"] is not None else "-"
            sp = f"{f['speedup_vs_ar']:.2f}x" if f["speedup_vs_ar"] is not None else "-"
            cells.append(f"{tau}/{tps}/{sp}")
        print(f"{b['start']:>5}-{b['end']:<6} " + " ".join(f"{c:>{w}}" for c in cells))
    mw = method_width(methods)
    print(f"\n{'method':<{mw}} {'draft ms first':>15} {'draft ms last':>14} {'last/first':>10}")
    for m, f in report["drafter_cost"].items():
        ratio = "-" if f["last_over_first"] is None else f"{f['last_over_first']:.3f}"  # no drafting cost at first
        print(f"{m:<{mw}} {f['draft_ms_first']:>15.2f} {f['draft_ms_last']:>14.2f} {ratio:>10}")
    for m, window in report["context_windows"].items():
        print(f"note: {m}'s drafter attends to the last {window} rows of context; with prompts of "
              f"{cfg['mean_prompt_tokens']:.0f} tokens on average that cuts in from output position "
              f"{max(0, window - round(cfg['mean_prompt_tokens']))}")


def write_html(report: dict[str, Any], path: Path) -> None:
    """τ and tokens/s against output position, one line per racer, in a self-contained page."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from dart_core.racers.registry import color, label

    cfg = report["config"]
    x = [f"{b['start']}–{b['end']}" for b in report["by_position"]]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("τ (tokens per verify step)", "tokens/s (wall clock)"))
    for m in cfg["methods"]:
        for col, key in ((1, "tau"), (2, "tokens_per_s")):
            fig.add_trace(go.Scatter(x=x, y=[b["racers"][m][key] for b in report["by_position"]], mode="lines+markers",
                                     name=label(m), legendgroup=m, showlegend=col == 1,
                                     line={"color": color(m)}), row=1, col=col)
    for m, window in report["context_windows"].items():
        cut = max(0, window - round(cfg["mean_prompt_tokens"]))
        where = next((xi for xi, b in zip(x, report["by_position"], strict=True) if b["start"] <= cut < b["end"]), None)
        if where is not None:  # a shape and a note: plotly's add_vline cannot place its note on a category axis
            fig.add_shape(type="line", x0=where, x1=where, xref="x", y0=0, y1=1, yref="paper",
                          line={"dash": "dot", "color": color(m)})
            fig.add_annotation(x=where, xref="x", y=1, yref="paper", yanchor="bottom", showarrow=False,
                               text=f"{label(m)}: context window ({window} rows)")
    fig.update_layout(template="plotly_white", height=460, xaxis_title="output position (tokens)",
                      xaxis2_title="output position (tokens)", xaxis_type="category", xaxis2_type="category",
                      title=f"{cfg['n_prompts']} prompt(s) × {cfg['max_new_tokens']} new tokens · {cfg['device']} · "
                            f"{cfg['dtype']}")
    path.write_text(fig.to_html(full_html=True, include_plotlyjs=True), encoding="utf-8")
