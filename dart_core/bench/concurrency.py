"""Several streams at once: where each racer stops paying as concurrent requests grow.

For each stream count B of ``--streams``, the prompts are split into batches of B different prompts, and every racer
decodes each batch together on the one shared target (:func:`dart_core.engine.loop.stream_batch`): each
stream drafts its own tree, the batch's trees are verified in one target forward, and each stream accepts and
commits its own path. Plain decoding (``ar``) decodes the same batches as one forward of B rows a step, and is the
baseline at every B; ``hf`` is Hugging Face ``generate`` on the same batches, left-padded. Per B and racer: the
aggregate tokens/s over all streams (wall clock around the batches), the speedup over batched plain decoding at
the same B, τ (tokens per stream per verify forward), the acceptance metrics, the streams' mean time to first token
and tokens/s each, and the greedy check of every stream against plain decoding's output for its prompt (ties
within the dtype's rounding counted apart). A racer's **crossover** is the smallest B at which it no longer beats
batched plain decoding. ``--shrink-trees`` divides each racer's size fields by B (its tree's or chain's nodes, and
the depth where each level is a drafter forward; vLLM's draft length per batch size), to see whether smaller trees
under load move the crossover. On the fast path (a CUDA GPU by default, ``--fast-path`` elsewhere) the batches run
on the target's static caches, B streams on a cache of the next power of two rows, each B's CUDA graphs recorded in
the warm-up. Writes ``concurrency.json`` (``by_streams``: {B: {racer: figures}}, ``crossover``:
{racer: B or null}) and ``concurrency.html`` (speedup and tokens/s against B, one line per racer, the 1.0 line
marked). A racer that remembers earlier answers (suffix decoding) runs cold here: each batch on a fresh empty
memory (its warm row is ``bench e2e``'s). Under an automatic tree budget the verify cost curves of the batch sizes
are measured (or read from the cache) before the races, outside their clocks.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from dart_core.bench.e2e import (
    NEW_TOKENS_HELP,
    BenchError,
    add_prompt_source,
    environment,
    load_prompts,
    load_racers,
    reported,
    resolve_sources,
    rows_settings,
)
from dart_core.drafters.settings import shrink_for_streams
from dart_core.engine.acceptance import SamplingConfig
from dart_core.engine.cpu import available_ram
from dart_core.engine.graphs import bucket
from dart_core.engine.greedy_check import compare
from dart_core.engine.stream_slots import GRAPH_STREAMS
from dart_core.engine.timing import sync
from dart_core.loading.chat import encode_prompt
from dart_core.loading.progress import stage
from dart_core.options import (
    add_mode_arguments,
    add_model_arguments,
    add_racer_settings_arguments,
    runtime_options,
)
from dart_core.options.limits import loaded_problem, prompts_problem, target_limits
from dart_core.race import (
    command_line,
    method_width,
    models_identity,
    racer_figures,
    results_dir,
    row_label,
    row_racer,
    run_record,
)
from dart_core.racers.hf_generate import KEY as HF_KEY
from dart_core.racers.hf_generate import generate_hf_batch
from dart_core.racers.registry import BASELINE, color, racer, runner_racers

DEFAULT_STREAMS = "1,2,4,8"
MEMORY_SHARE = 0.8  # a sweep may plan its largest batch's caches and logits within this share of the free memory


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_arguments(p)
    g = p.add_argument_group("run")
    add_prompt_source(g)
    add_mode_arguments(g)
    g.add_argument("--streams", default=DEFAULT_STREAMS,
                   help=f"comma-separated stream counts B to sweep (default {DEFAULT_STREAMS}); each at most the "
                        "prompts given")
    g.add_argument("--limit", type=int, default=16, help="the first N prompts, spread over the streams (default 16; "
                   "0 = all)")
    g.add_argument("--methods", default=None, help="comma-separated racers (default: every loaded one, then ar)")
    g.add_argument("--hf-generate", action=argparse.BooleanOptionalAction, default=True,
                   help="also batch transformers' own generate() (left padding) on the same prompts: the `hf` row")
    g.add_argument("--max-new-tokens", type=int, default=128, help=NEW_TOKENS_HELP)
    g.add_argument("--warmup", type=int, default=1, help="uncounted warm-up batches per racer (default 1)")
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--top-k", type=int, default=0)
    g.add_argument("--seed", type=int, default=0, help="stream i of a batch samples with seed + i (its prompt's index)")
    g.add_argument("--shrink-trees", action="store_true",
                   help="divide each racer's tree (or chain) size, and a depth that costs a drafter forward per "
                        "level, by B, rounded up (vLLM-style draft length by load): the rule before the tree budget, "
                        "kept for comparison with --budget off (under an automatic budget the batch's streams share "
                        "one verify, priced by the measured cost curve of B streams)")
    g.add_argument("--out", type=Path, default=None, help="output dir for concurrency.json / concurrency.html "
                   "(default $DART_ARENA_RESULTS or $DART_ARENA_CACHE/bench, in concurrency-<timestamp>/)")
    g.add_argument("--no-html", action="store_true", help="skip the plotly HTML report")
    g.add_argument("--no-progress", action="store_true", help="no progress bars")
    g.add_argument("--debug", action="store_true", help="show the traceback of an error (by default one line)")
    add_racer_settings_arguments(p)
    p.set_defaults(methods_take_rows=True)  # --methods takes rows of a racer's settings (dart_core.race.rows)


def parse_streams(text: str, prompts: int) -> list[int]:
    """The sorted, distinct stream counts of ``--streams``; a BenchError names a value below 1 or above the
    ``prompts`` given."""
    try:
        values = sorted({int(v) for v in text.split(",") if v.strip()})
    except ValueError:
        raise BenchError(f"--streams takes comma-separated integers, got {text!r}") from None
    if not values:
        raise BenchError("--streams is empty: give stream counts such as 1,2,4,8")
    if values[0] < 1:
        raise BenchError(f"--streams {values[0]}: a batch needs at least 1 stream")
    if values[-1] > prompts:
        raise BenchError(f"--streams {values[-1]}: only {prompts} prompt(s) given (--limit / the prompt set); a "
                         f"batch of B streams needs B different prompts")
    return values


def batch_memory(target: Any, streams: list[int], rows: int, tree_rows: int) -> int:
    """Bytes the sweep plans for: the largest batch's KV caches of ``rows`` (prompt + output) plus one padded tree
    each, and a verify's logits (float32, twice: the model's and the copy). On the fast path the static caches are
    of the fast path's rows, and every B's bucket keeps its own (its graphs are bound to it)."""
    largest = streams[-1]
    logits = largest * tree_rows * target.vocab_size * 4 * 2
    if target.static_capacity is None:
        return largest * (rows + tree_rows) * target.kv_bytes_per_token + logits
    if target.fast_path != "graphs":  # each batch's own static cache, freed after it
        return largest * target.static_capacity * target.kv_bytes_per_token + logits
    buckets = {bucket(b, GRAPH_STREAMS) for b in streams} - {None}  # pooled, kept across the sweep
    buckets |= {1 << i for i in range(max(buckets, default=1).bit_length())}  # streams that end move to smaller ones
    uncaptured = max((b for b in streams if bucket(b, GRAPH_STREAMS) is None), default=0)  # freed after its batch
    return (sum(buckets) + uncaptured) * target.static_capacity * target.kv_bytes_per_token + logits


def free_memory(device: Any) -> int | None:
    """Bytes free where the caches live: the GPU's free memory, or the RAM still available on a CPU."""
    if torch.device(device).type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    return available_ram()


def crossover(by_streams: dict[str, dict[str, dict[str, Any]]], method: str) -> int | None:
    """The smallest B at which ``method`` no longer beats batched plain decoding (speedup <= 1), or None."""
    for b in sorted(by_streams, key=int):
        sp = by_streams[b].get(method, {}).get("speedup_vs_ar")
        if sp is not None and sp <= 1.0:
            return int(b)
    return None


def run(args: argparse.Namespace) -> int:

    return reported(_run, args)


def _run(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm


    src = resolve_sources(args)
    prompts = load_prompts(src, args.limit)
    problem = prompts_problem((p["prompt"] for p in prompts), str(src.prompts or src.dataset), target_limits(src.base))
    if problem is not None:  # refused before the load, untokenized
        raise BenchError(problem)
    streams = parse_streams(args.streams, len(prompts))
    unbatched = [r.label for r in runner_racers() if r.key != HF_KEY and args.methods
                 and r.key in {row_racer(m) for m in args.methods.split(",")}]
    if unbatched:  # refused before anything loads
        raise BenchError(f"{', '.join(unbatched)} decode one stream at a time here: leave them out of bench "
                         "concurrency (bench e2e races them)")
    try:
        runtime = runtime_options(args)
        sampling = SamplingConfig(args.temperature, args.top_p, args.top_k)
    except ValueError as e:
        raise BenchError(str(e)) from None
    arena, methods = load_racers(args, src, runtime)
    if BASELINE not in methods:
        methods = [*methods, BASELINE]  # every speedup is over batched plain decoding at the same B
    order = [BASELINE, *[m for m in methods if m != BASELINE]]
    problem = loaded_problem(args, arena.tokenizer, arena.target, [p["prompt"] for p in prompts])
    if problem is not None:  # a target whose limits were not readable before loading
        raise BenchError(problem)
    chat = src.chat and bool(getattr(arena.tokenizer, "chat_template", None))
    encoded = [encode_prompt(arena.tokenizer, p["prompt"], chat=chat, system=args.system) for p in prompts]
    target = arena.target
    longest = max(len(ids) for ids in encoded)
    if longest + args.max_new_tokens > target.max_context:
        raise BenchError(f"{longest} prompt + {args.max_new_tokens} new tokens exceed the target's context "
                         f"({target.max_context}): lower --max-new-tokens")
    try:
        settings, budgets = rows_settings(args, methods, target.device)
    except ValueError as e:
        raise BenchError(str(e)) from None
    need = batch_memory(target, streams, longest + args.max_new_tokens, 64)
    free = free_memory(target.device)
    if free is not None and need > MEMORY_SHARE * free:
        raise BenchError(f"--streams {streams[-1]}: the batch's KV caches and verify logits need about "
                         f"{need / 2**30:.1f} GiB, over {MEMORY_SHARE:.0%} of the {free / 2**30:.1f} GiB free on "
                         f"{target.device}; lower --streams, --max-new-tokens or --limit")
    runner = _Runner(arena, settings, budgets, sampling, args)
    if any(arena.budget_for(row_racer(m), rule) is not None for m, rule in budgets.items()):
        with stage("verify cost", f"the target's verify steps timed by rows for batches of up to {streams[-1]} "
                                  "streams, outside the races' clocks (kept in the cache)",
                   enabled=not args.no_progress) as line:
            curves = arena.cost_curves.prepare(streams[-1])
            line.detail = "; ".join(c.describe() for c in curves[1:]) or "one stream's, at load"
    for m in order:  # every B once: on the fast path each B's bucket records its CUDA graphs here, not in the race
        for b in streams if target.fast_path == "graphs" else [min(2, streams[-1])]:
            for _ in range(args.warmup):
                runner.batch(m, encoded[:b], list(range(b)), b, max_new_tokens=min(16, args.max_new_tokens))
    total = len(streams) * len(order) * len(encoded) * args.max_new_tokens
    bar = tqdm(total=total, desc="concurrency", unit="tok", disable=args.no_progress)
    runner.bar = bar
    by_streams: dict[str, dict[str, dict[str, Any]]] = {}
    reference: dict[int, tuple[list[int], list[Any]]] = {}  # prompt index -> plain decoding's output (smallest B)
    for b in streams:
        results: dict[str, dict[str, Any]] = {}
        for m in order:
            outs = []
            for start in range(0, len(encoded), b):
                idx = list(range(start, min(start + b, len(encoded))))
                outs.append(runner.batch(m, [encoded[i] for i in idx], idx, b))
            results[m] = _figures(outs)
            if sampling.greedy:
                if m == BASELINE and not reference:
                    reference = {i: (s["tokens"], s["top"]) for o in outs for i, s in o["streams"].items()}
                results[m].update(_check(reference, outs, target.dtype))
        ar = results[BASELINE]["tokens_per_s"]
        for f in results.values():
            f["speedup_vs_ar"] = f["tokens_per_s"] / ar if ar else None
        by_streams[str(b)] = results
        bar.set_postfix_str(f"B={b} " + " ".join(f"{m}:{results[m]['speedup_vs_ar']:.2f}" for m in methods
                                                   if results[m]["speedup_vs_ar"] is not None))
    bar.close()
    report = _report(args, src, arena, methods, settings, prompts, encoded, streams, by_streams, sampling, chat)
    report["config"]["budgets"] = budgets
    report["budgets"] = {m: budget.report() for m, rule in budgets.items()
                         if (budget := arena.budget_for(row_racer(m), rule)) is not None}
    print_table(report)
    _write(args, report)
    mismatches = sum(f.get("mismatches", 0) for r in by_streams.values() for f in r.values())
    return 1 if mismatches else 0


class _Runner:
    """Runs one racer on one batch of prompts and times it: the batch's wall clock, each stream's first token
    and last token, and its steps."""

    def __init__(self, arena: Any, settings: dict[str, Any], budgets: dict[str, str], sampling: Any,
                 args: argparse.Namespace) -> None:
        self.arena, self.racer_settings, self.sampling, self.args = arena, settings, sampling, args
        self.budgets = budgets  # row -> its tree budget rule: one budget for the batch's streams
        self.bar: Any = None

    def settings(self, method: str, streams: int) -> Any:

        s = self.racer_settings.get(method)
        return shrink_for_streams(s, streams) if s is not None and self.args.shrink_trees else s

    def batch(self, method: str, prompts: list[list[int]], index: list[int], streams: int,
              max_new_tokens: int | None = None) -> dict[str, Any]:
        import torch


        arena, n = self.arena, max_new_tokens or self.args.max_new_tokens
        device = arena.target.device
        out: dict[int, dict[str, Any]] = {i: {"tokens": [], "top": [], "steps": [], "first_ms": None, "end_ms": None}
                                          for i in index}
        sync(device)
        start = time.perf_counter()
        if method == HF_KEY:
            tokens, tops = generate_hf_batch(arena.target, prompts, sampling=self.sampling, max_new_tokens=n,
                                             stop_token_ids=arena.stop_ids, seed=self.args.seed + index[0])
            sync(device)
            wall = (time.perf_counter() - start) * 1e3
            for i, t, top in zip(index, tokens, tops, strict=True):
                out[i].update(tokens=t, top=top, end_ms=wall)
                self._progress(len(t), counted=max_new_tokens is None)
            return {"streams": out, "wall_ms": wall, "forwards": [], "hf": True}
        gens = None
        if not self.sampling.greedy:
            gens = [torch.Generator(device=device).manual_seed(self.args.seed + i) for i in index]
        forwards = []
        # a racer that remembers runs cold: a fresh memory per batch, never its answers at another B to the same prompts
        key = row_racer(method)
        memory = arena.new_memory(key) if arena.remembers(key) else None
        for step in arena.stream_batch(key, prompts, memory, settings=self.settings(method, streams),
                                       budget=self.budgets.get(method), sampling=self.sampling, max_new_tokens=n,
                                       stop_token_ids=arena.stop_ids, generators=gens):
            now = (time.perf_counter() - start) * 1e3
            forwards.append({"rows": step.rows, "wall_ms": step.wall_ms, "width": step.width,
                             "committed": step.committed, "verify_ms": next(iter(step.steps.values())).verify_ms})
            for b, s in step.steps.items():
                rec = out[index[b]]
                rec["tokens"].extend(s.tokens)
                rec["top"].extend(s.top_logits)
                rec["steps"].append(s)
                if s.prefill:
                    rec["first_ms"] = now
                rec["end_ms"] = now
                self._progress(len(s.tokens), counted=max_new_tokens is None)
        wall = (time.perf_counter() - start) * 1e3
        return {"streams": out, "wall_ms": wall, "forwards": forwards, "hf": False}

    def _progress(self, tokens: int, *, counted: bool) -> None:
        if self.bar is not None and counted:
            self.bar.update(tokens)


def _figures(outs: list[dict[str, Any]]) -> dict[str, Any]:
    """One racer's figures at one B over its batches: aggregate and per-stream speed, τ and acceptance."""
    streams = [s for o in outs for s in o["streams"].values()]
    tokens = sum(len(s["tokens"]) for s in streams)
    wall = sum(o["wall_ms"] for o in outs)
    out: dict[str, Any] = {"tokens": tokens, "wall_ms": wall, "tokens_per_s": tokens / (wall / 1e3) if wall else 0.0,
                           "streams": len(streams), "batches": len(outs)}
    firsts = [s["first_ms"] for s in streams if s["first_ms"] is not None]
    out["ttft_ms"] = statistics.fmean(firsts) if firsts else None
    out["stream_tokens_per_s"] = statistics.fmean(len(s["tokens"]) / (s["end_ms"] / 1e3) for s in streams
                                                  if s["end_ms"])
    steps = [st for s in streams for st in s["steps"]]
    if steps:
        f = racer_figures(steps)
        keep = ("tau", "draft_ms_per_step", "search_ms_per_step", "verify_steps", "num_drafts", "num_draft_tokens",
                "num_accepted_tokens", "mean_acceptance_length", "draft_acceptance_rate",
                "per_position_acceptance_rate")
        out.update({k: f[k] for k in keep if k in f})
        forwards = [fw for o in outs for fw in o["forwards"][1:]]  # the prefills apart
        if forwards:
            out["step_ms"] = statistics.fmean(fw["wall_ms"] for fw in forwards)
            out["verify_ms_per_step"] = statistics.fmean(fw["verify_ms"] for fw in forwards)
            out["mean_rows"] = statistics.fmean(fw["rows"] for fw in forwards)
            # the share of the cache's columns the rows' masks hide (rows of different lengths in one cache)
            cells = sum(fw["rows"] * fw["width"] for fw in forwards)
            out["masked_columns"] = 1 - sum(fw["committed"] for fw in forwards) / cells if cells else 0.0
    else:  # hf: one token per forward
        out["tau"] = 1.0
    return out


def _check(reference: dict[int, tuple[list[int], list[Any]]], outs: list[dict[str, Any]],
           dtype: Any) -> dict[str, Any]:
    """Every stream's greedy output against plain decoding's for its prompt: counts of mismatches and ties, and
    where the first mismatches lie."""
    mismatches, ties, where = 0, 0, []
    for o in outs:
        for i, s in o["streams"].items():
            ref_tokens, ref_top = reference[i]
            verdict = compare(ref_tokens, ref_top, s["tokens"], s["top"], dtype)
            if verdict.kind == "tie":
                ties += 1
            elif verdict.kind == "mismatch":
                mismatches += 1
                where.append({"prompt": i, "position": verdict.position})
    return {"mismatches": mismatches, "ties": ties, **({"mismatched": where[:10]} if where else {})}


def _report(args: argparse.Namespace, src: Any, arena: Any, methods: list[str], racer_settings: dict[str, Any],
            prompts: list[dict[str, Any]], encoded: list[list[int]], streams: list[int], by_streams: dict[str, Any],
            sampling: Any, chat: bool) -> dict[str, Any]:
    models = models_identity(src.base, src.drafters, src.ngram, src.small_ngram)
    command = getattr(args, "command", None) or command_line([], ("python", "-m", "dart_core.bench", "concurrency"))
    settings = {m: dataclasses.asdict(racer_settings[m]) for m in methods if m in racer_settings}  # as at B=1
    return {
        "run": run_record(command, models),
        "config": {"base": src.base, "drafters": src.drafters, "ngram": src.ngram, "methods": methods,
                   "streams": streams, "n_prompts": len(prompts), "max_new_tokens": args.max_new_tokens,
                   "decoding": "greedy" if sampling.greedy else dataclasses.asdict(sampling),
                   "shrink_trees": args.shrink_trees, "chat": chat, "settings": settings,
                   "device": str(arena.target.device), "dtype": str(arena.target.dtype).removeprefix("torch."),
                   "mean_prompt_tokens": statistics.fmean(len(ids) for ids in encoded)},
        "environment": environment(arena),
        "by_streams": by_streams,
        "crossover": {m: crossover(by_streams, m) for m in methods if racer(row_racer(m)).drafts},
    }


def print_table(report: dict[str, Any]) -> None:
    """Per B, one row per racer; then each racer's crossover."""
    cfg = report["config"]
    methods = [BASELINE, *[m for m in cfg["methods"] if m != BASELINE]]
    w = method_width(methods)
    print(f"\n{cfg['n_prompts']} prompts x {cfg['max_new_tokens']} new tokens, {cfg['device']}, {cfg['dtype']}"
          f"{', trees shrunk by B' if cfg['shrink_trees'] else ''}; aggregate tokens/s by the wall clock, x AR = "
          "over batched plain decoding at the same B")
    print(f"{'B':>3} {'method':<{w}} {'tok/s':>8} {'x AR':>6} {'tau':>5} {'stream tok/s':>12} {'TTFT ms':>8} "
          f"{'step ms':>8} {'mismatch':>8} {'ties':>5}")
    for b, results in report["by_streams"].items():
        for m in methods:
            f = results[m]
            sp = f"{f['speedup_vs_ar']:.2f}" if f.get("speedup_vs_ar") is not None else "-"
            ttft = f"{f['ttft_ms']:.0f}" if f.get("ttft_ms") is not None else "-"
            step = f"{f['step_ms']:.1f}" if f.get("step_ms") is not None else "-"
            print(f"{b:>3} {m:<{w}} {f['tokens_per_s']:>8.1f} {sp:>6} {f.get('tau') or 0:>5.2f} "
                  f"{f['stream_tokens_per_s']:>12.1f} {ttft:>8} {step:>8} {f.get('mismatches', '-'):>8} "
                  f"{f.get('ties', '-'):>5}")
    if report["crossover"]:
        print("crossover (smallest B where the racer no longer beats batched plain decoding): " + ", ".join(
            f"{m} {'none up to B=' + str(cfg['streams'][-1]) if b is None else 'B=' + str(b)}"
            for m, b in report["crossover"].items()))


def _write(args: argparse.Namespace, report: dict[str, Any]) -> None:

    out = args.out or results_dir() / f"concurrency-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    (out / "concurrency.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    print(f"wrote {out / 'concurrency.json'}")
    if not args.no_html:
        (out / "concurrency.html").write_text(speedup_figure(report).to_html(full_html=True, include_plotlyjs=True),
                                              encoding="utf-8")
        print(f"wrote {out / 'concurrency.html'}")


def speedup_figure(report: dict[str, Any]) -> Any:
    """Speedup over batched plain decoding and aggregate tokens/s against B, one line per racer, 1.0 marked."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots


    cfg = report["config"]
    xs = [int(b) for b in report["by_streams"]]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("speedup over batched plain decoding",
                                                        "aggregate tokens/s (wall clock)"))
    for m in cfg["methods"]:
        for col, key in ((1, "speedup_vs_ar"), (2, "tokens_per_s")):
            fig.add_trace(go.Scatter(x=xs, y=[report["by_streams"][str(b)][m].get(key) for b in xs],
                                     mode="lines+markers", name=row_label(m), legendgroup=m,
                                     showlegend=col == 1, line={"color": color(row_racer(m))}), row=1, col=col)
    fig.add_hline(y=1.0, line_dash="dash", line_color="gray", annotation_text="break-even", row=1, col=1)
    fig.update_xaxes(type="log", tickvals=xs, title_text="streams (B)")
    fig.update_layout(template="plotly_white", height=440,
                      title=f"{cfg['n_prompts']} prompts × {cfg['max_new_tokens']} new tokens · {cfg['device']} · "
                            f"{cfg['dtype']}{' · trees shrunk by B' if cfg['shrink_trees'] else ''}")
    return fig
