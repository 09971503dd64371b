"""End-to-end benchmark: every loaded racer against plain decoding (AR) on one shared target over a prompt set.

Default: the default model bundle (``assets/smollm2/``, see ``dart_core.bundle``: SmolLM2-135M-Instruct with its DART
drafter, EAGLE-3 head, DFlash drafter, N-gram store and held-out chat ``prompts.jsonl``, in chat mode;
``--bundle assets/tiny``: the stdlib toy, completion mode), greedy, 128 new tokens, one warm-up prompt per method not
counted, fixed seeds. For each prompt the methods run one after another on the same loaded target with the same
seed; each method's clock counts only its own steps.
Prints one row per method (τ, draft tokens verified and accepted, the acceptance rate and mean acceptance length,
tokens/s by the engine's stopwatches and by wall clock, speedup vs AR by wall clock, mean draft / tree-search / verify
ms per step) and each drafting method's per-position acceptance rates (vLLM's metrics, docs/metrics.md), checks on
the fly that every method's greedy output equals AR's, and writes ``e2e.json`` + a self-contained ``e2e.html``.
Every prompt carries a category (MT-bench's own, the held-out set's topic categories, a prompt file's ``category``
field, else ``all``): the same figures per category and racer (``by_category``) and the best drafting racer per
category (``best_by_category``), as a second table, in ``e2e.json`` and as a heatmap in ``e2e.html``.
``--dataset mt-bench`` runs a named chat prompt set instead of a prompt file; ``--turns 2`` continues each method's
own conversation with the set's follow-up question, and every figure is also given per turn (``by_turn``). A racer
that remembers earlier answers (suffix decoding) runs as two rows (``dart_core.race.rows``): cold, from an empty
memory at each conversation's start, and warm (``suffix:warm``), from one memory of its own answers to the run's
earlier prompts (``--memory`` picks). The ``hf`` row is Hugging Face ``generate`` on the same weights,
dtype and device (``--no-hf-generate`` drops it): the baseline a user would otherwise run. ``llamacpp`` and
``llamacpp-lookup``, named in ``--methods`` (the optional extra: ``bash scripts/dev.sh llamacpp``), are llama.cpp
decoding the same weights written to GGUF, plainly and with its own prompt lookup; with them every row's speedup
over llama.cpp's plain row ("vs llama.cpp", ``speedup_vs_peer``) stands beside its speedup over AR. A greedy output that
parts from AR's where the target's best logits lie within the dtype's rounding in both runs counts as a tie, not a
mismatch (``dart_core.engine.greedy_check``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from dart_core.bench.e2e_report import category_counts, write_html
from dart_core.bench.e2e_runs import NO_CATEGORY, Conversations, Tally, with_memory
from dart_core.bench.e2e_table import best_racer, category_lines, print_table, seed_spread, spread_lines
from dart_core.bundle import build_command
from dart_core.data.datasets import DATASETS, DatasetError, load_dataset
from dart_core.engine.acceptance import SamplingConfig
from dart_core.engine.budget import NODE
from dart_core.engine.cpu import cpu_description
from dart_core.engine.greedy_check import TopLogits, compare
from dart_core.engine.loop import Step
from dart_core.loading.chat import encode_prompt
from dart_core.loading.errors import report_error
from dart_core.loading.hub import HubFileError
from dart_core.ngram.store import NgramFormatError
from dart_core.options import (
    ModelsError,
    add_mode_arguments,
    add_model_arguments,
    add_racer_settings_arguments,
    given_settings,
    resolve_models,
    runtime_options,
)
from dart_core.options.limits import (
    MAX_NEW_TOKENS_CAP,
    check_flags,
    loaded_problem,
    prompts_problem,
    target_limits,
)
from dart_core.race import (
    MEMORY_CHOICES,
    MEMORY_NOTE,
    command_line,
    memory_rows,
    models_identity,
    racer_figures,
    results_dir,
    row_label,
    row_racer,
    row_settings,
    run_record,
)
from dart_core.racers.registry import BASELINE, RACERS, model_free_asked, racer, runners_asked


class BenchError(Exception):
    """A user-facing setup problem (missing bundle, bad prompt file): printed, exit code 2."""




def category_of(record: dict[str, Any]) -> str:
    """A prompt record's category (MT-bench's own, the held-out set's topic category, a prompt file's ``category``
    field), :data:`NO_CATEGORY` when it names none."""
    category = record.get("category")
    return str(category) if category not in (None, "") else NO_CATEGORY


def add_prompt_source(g: Any) -> Any:
    """``--prompts FILE`` or ``--dataset NAME`` (one of them), the prompt set of every benchmark over prompts;
    returns the group, where a benchmark may add another source."""
    source = g.add_mutually_exclusive_group()
    source.add_argument("--prompts", type=Path, default=None,
                        help="JSONL prompt file (fields: prompt, optional id and category); default: the bundle's "
                             "prompts.jsonl")
    source.add_argument("--dataset", default=None, metavar="NAME",
                        help=f"named chat prompt set instead of a file: {', '.join(sorted(DATASETS))} "
                             "(chat mode; needs a tokenizer with a chat template)")
    return source


NEW_TOKENS_HELP = ("new tokens per answer (default %(default)s; at most the target's context, read from its "
                   f"config.json before loading, or {MAX_NEW_TOKENS_CAP:,} where that is not on this machine yet)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_arguments(p)
    g = p.add_argument_group("run")
    add_prompt_source(g)
    g.add_argument("--turns", type=int, choices=(1, 2), default=1,
                   help="with --dataset: 2 = also ask each method the follow-up question after its own first answer")
    g.add_argument("--limit", type=int, default=0, help="use only the first N prompts (default 0: all)")
    g.add_argument("--per-category", type=int, default=0, metavar="N",
                   help="use only the first N prompts of each category, in file order (default 0: all), after "
                        "--limit: a set that samples every category (MT-bench's are 10 prompts each, in order)")
    g.add_argument("--methods", default=None,
                   help=f"comma-separated subset of {','.join(r.key for r in RACERS)} (default: all loaded)")
    g.add_argument("--memory", choices=MEMORY_CHOICES, default="both",
                   help="racers that remember earlier answers (suffix decoding): race each from an empty memory at "
                        "each conversation's start (cold, the racer's own row), from one memory of its own answers "
                        "to the run's earlier prompts (warm, the row RACER:warm), both (default), or all: both, after "
                        "a row with the memory off where it is an option (--ngram-memory's racers: RACER:off, "
                        "drafting as without the flag)")
    g.add_argument("--hf-generate", action=argparse.BooleanOptionalAction, default=True,
                   help="race transformers' own generate() on the same weights too: the `hf` row (default on)")
    g.add_argument("--warmup", type=int, default=1, help="warm-up prompt runs per method, not counted (default 1)")
    g.add_argument("--max-new-tokens", type=int, default=128, help=NEW_TOKENS_HELP)
    g.add_argument("--max-length", type=int, default=None, help="limit on prompt + output tokens")
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--top-k", type=int, default=0)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--seeds", type=int, default=1, metavar="K",
                   help="run the whole prompt set K times with different seeds (for sampling: each racer's mean and "
                        "spread over the runs, in the table and in e2e.json's by_seed and spread; default 1)")
    add_mode_arguments(g)
    g.add_argument("--out", type=Path, default=None, help="output dir for e2e.json / e2e.html (default "
                   f"{results_dir()}/e2e-<timestamp>/: $DART_ARENA_RESULTS, else $DART_ARENA_CACHE/bench, where the "
                   "app's 'Measured on this host' panel finds the last run for its models)")
    g.add_argument("--no-html", action="store_true", help="skip the plotly HTML report")
    g.add_argument("--no-progress", action="store_true", help="no progress bars")
    g.add_argument("--debug", action="store_true", help="show the traceback of an error (by default one line)")
    add_racer_settings_arguments(p)
    p.set_defaults(methods_take_rows=True)  # --methods takes rows of a racer's settings (dart_core.race.rows)


@dataclass
class Sources:
    base: str
    drafters: dict[str, str | None]  # racer key -> drafter dir / Hub id (None: not raced)
    ngram: str | None
    small_ngram: bool
    prompts: Path | None
    chat: bool
    bundle: Path | None = None
    notes: list[str] = field(default_factory=list)
    dataset: str | None = None
    ngram_memory: bool = False  # --ngram-memory


def resolve_sources(args: argparse.Namespace) -> Sources:
    """The models (:func:`~dart_core.options.resolve_models`: bundle parts, overridden by explicit flags) and the
    prompt set; a missing bundle or prompt file is a clear error."""
    try:
        models = resolve_models(args)
    except ModelsError as e:
        raise BenchError(str(e)) from None
    bundle, base, drafters, notes = models.bundle, models.base, models.drafters, models.notes
    dataset = getattr(args, "dataset", None)
    if getattr(args, "turns", 1) > 1 and dataset is None:
        raise BenchError(f"--turns {args.turns} needs a multi-turn --dataset ({', '.join(sorted(DATASETS))}); "
                         "prompt files hold one turn")
    if dataset is not None:
        if args.chat is False:
            raise BenchError(f"--raw with --dataset {dataset}: its questions are chat prompts, run in chat mode "
                             "(drop --raw)")
        return Sources(base, drafters, models.ngram, models.small_ngram, None, True, bundle, notes, dataset,
                       models.ngram_memory)
    prompts = args.prompts or (bundle / "prompts.jsonl" if bundle is not None else None)
    if prompts is None:
        raise BenchError("no prompt set: pass --prompts FILE.jsonl (fields: prompt, optional id)")
    if not Path(prompts).is_file():
        hint = f" Build the bundle with `{build_command(bundle)}`." if args.prompts is None and bundle else ""
        raise BenchError(f"prompt file not found: {prompts}.{hint}")
    return Sources(base, drafters, models.ngram, models.small_ngram, Path(prompts), models.chat, bundle, notes,
                   ngram_memory=models.ngram_memory)


def read_prompts(path: Path, limit: int = 0) -> list[dict[str, str]]:
    """JSONL lines with ``prompt`` (text), an optional ``id`` (default: the line number) and an optional
    ``category`` (default :data:`NO_CATEGORY`: the figures per category then pool every such prompt)."""
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            text = rec["prompt"]
        except (json.JSONDecodeError, KeyError, TypeError):
            raise BenchError(f"{path}:{n}: expected a JSON object with a 'prompt' field") from None
        out.append({"id": str(rec.get("id", n)), "category": category_of(rec), "prompt": str(text)})
    if limit:
        out = out[:limit]
    if not out:
        raise BenchError(f"{path} holds no prompts")
    return out


def rows_settings(args: argparse.Namespace, rows: list[str], device: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """Each drafting row's settings and tree budget rule (``dart_core.race.rows.row_settings``: the racer's defaults
    for ``device`` under the row's rule, the command line's options, the row's own items)."""
    settings, budgets = {}, {}
    for row in rows:
        key = row_racer(row)
        if not racer(key).drafts:
            continue
        settings[row], budgets[row] = row_settings(
            row, lambda rule, key=key: given_settings(args, key, racer(key).default_settings(device, rule)),
            getattr(args, "budget", NODE))
    return settings, budgets


def step_record(s: Step) -> dict[str, Any]:
    return {"tokens": list(s.tokens), "accepted": s.accepted, "tree_size": s.tree_size,
            "drafted_size": s.drafted_size, "prefill": s.prefill,
            "draft_ms": round(s.draft_ms, 4), "search_ms": round(s.search_ms, 4), "verify_ms": round(s.verify_ms, 4),
            "stop_reason": s.stop_reason}


def environment(arena: Any) -> dict[str, Any]:
    import transformers

    dev = arena.target.device
    env = {"python": platform.python_version(), "platform": platform.platform(), "torch": torch.__version__,
           "transformers": transformers.__version__, "device": str(dev),
           "dtype": str(arena.target.embed_tokens.weight.dtype), "torch_threads": torch.get_num_threads()}
    if torch.device(dev).type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(dev)
    else:
        env["cpu"] = cpu_description()
    env["fast_path"] = arena.target.fast_path
    if arena.target.fast_path:
        env["fast_path_rows"] = arena.target.static_capacity
        env["graphs_captured"] = arena.target.graphs_captured + sum(
            getattr(d, "graphs_captured", 0) for d in arena.drafters.values())
        env["capture_seconds"] = round(arena.target.capture_seconds + sum(
            getattr(d, "capture_seconds", 0.0) for d in arena.drafters.values()), 3)
    if arena.engines:  # outside engines raced (llama.cpp): their version, build, file and settings
        env["outside_engines"] = {key: engine.describe() for key, engine in arena.engines.items()}
    plans = getattr(arena, "cpu_linears", {})
    if plans:
        env["cpu_linears"] = {name: dataclasses.asdict(plan) for name, plan in plans.items()}
    return env


def run(args: argparse.Namespace) -> int:
    return reported(_run, args)


def reported(body: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """A benchmark's ``body``, whose known failures are one line and exit code 2: a :class:`BenchError` as it is,
    a loading error naming its file (``--debug``: the traceback)."""
    try:
        return body(args)
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (HubFileError, NgramFormatError, ValueError, OSError) as e:  # a LoadError names its file
        return report_error(e, debug=getattr(args, "debug", False))


def load_prompts(src: Sources, limit: int, turns: int = 1, per_category: int = 0) -> list[dict[str, Any]]:
    """The first ``limit`` prompts (0: all) of the prompt file or the named set, each with ``turns`` turns; of
    those, the first ``per_category`` of each category (0: all)."""
    if per_category < 0:
        raise BenchError(f"--per-category takes a count of prompts (0: all), got {per_category}")
    if src.dataset is None:
        return first_of_each_category(read_prompts(src.prompts, limit), per_category)  # type: ignore[arg-type]
    try:
        prompts = first_of_each_category(load_dataset(src.dataset, limit), per_category)
    except DatasetError as e:
        raise BenchError(str(e)) from None
    short = [p["id"] for p in prompts if len(p.get("turns", [p["prompt"]])) < turns]
    if short:
        raise BenchError(f"--turns {turns}: {src.dataset} prompts {', '.join(short[:5])} have fewer turns")
    if not prompts:
        raise BenchError(f"dataset {src.dataset} holds no prompts")
    return prompts


def first_of_each_category(prompts: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """The first ``n`` prompts of each category (``category_of``), in their order (0: all of them)."""
    if not n:
        return prompts
    seen: dict[str, int] = {}
    kept = []
    for p in prompts:
        c = category_of(p)
        seen[c] = seen.get(c, 0) + 1
        if seen[c] <= n:
            kept.append(p)
    return kept


def _run(args: argparse.Namespace) -> int:
    """The benchmark in its phases: load the models and the prompts, run every method on every prompt (checking
    greedy outputs against AR's as they finish), then write and print the report."""
    if args.seeds < 1:
        raise BenchError(f"--seeds must be at least 1, got {args.seeds}")
    src, prompts, arena, methods = _load(args)
    problem = loaded_problem(args, arena.tokenizer, arena.target, [p["prompt"] for p in prompts])
    if problem is not None:  # a target whose limits were not readable before loading
        raise BenchError(problem)
    chat = src.chat and bool(getattr(arena.tokenizer, "chat_template", None))
    n_turns = args.turns if src.dataset is not None else 1
    rows = memory_rows(methods, arena.remembers, getattr(args, "memory", "both"), arena.forgets)
    settings, budgets = rows_settings(args, rows, arena.target.device)
    print("settings: " + "; ".join(f"{m} {dataclasses.asdict(t)}, budget {budgets[m]}" for m, t in settings.items()))
    if torch.device(arena.target.device).type == "cpu":
        print(f"cpu: {cpu_description() or 'unknown (no /proc/cpuinfo)'}, {torch.get_num_threads()} thread(s)")
    for name, plan in arena.cpu_linears.items():
        print(f"{name}: {plan.describe()}")
    sampling = SamplingConfig(args.temperature, args.top_p, args.top_k)
    runs = Conversations(arena, settings, budgets, args, sampling, n_turns)
    encoded = [encode_prompt(arena.tokenizer, p["prompt"], chat=chat, system=args.system) for p in prompts]
    # AR runs first on each prompt so the other rows are checked against it as soon as they finish.
    order = ([BASELINE] if BASELINE in rows else []) + [m for m in rows if m != BASELINE]
    tallies = []
    for r in range(args.seeds):  # the whole set once per seed; the warm-up only before the first
        seeded = argparse.Namespace(**{**vars(args), "seed": args.seed + r * SEED_STRIDE,
                                       "warmup": args.warmup if r == 0 else 0})
        tallies.append(_race(seeded, src, prompts, encoded, order, rows, runs))
    by_seed = {str(args.seed + r * SEED_STRIDE): t.pooled.summary() for r, t in enumerate(tallies)}
    tally = tallies[0]
    for r, other in enumerate(tallies[1:], 1):
        tally.absorb(other, seed=args.seed + r * SEED_STRIDE)
    report = _report(args, src, arena, prompts, rows, tally, sampling, chat=chat, settings=settings,
                     budgets=budgets)
    if len(tallies) > 1:
        report["by_seed"] = by_seed
        report["spread"] = seed_spread(by_seed, rows)
    _write(args, report, rows, len(prompts), sampling, tally)
    return 0


SEED_STRIDE = 1000  # seed of prompt i in run r: --seed + r * SEED_STRIDE + i
def _load(args: argparse.Namespace) -> tuple[Sources, list[dict[str, Any]], Any, list[str]]:
    """The sources, the prompts, the loaded arena and the methods to run (each checked to be loaded)."""
    src = resolve_sources(args)
    prompts = load_prompts(src, args.limit, args.turns, args.per_category)
    problem = prompts_problem((p["prompt"] for p in prompts), str(src.prompts or src.dataset),
                              target_limits(src.base), args.max_length)
    if problem is not None:  # refused before the load, untokenized
        raise BenchError(problem)
    for note in src.notes:
        print(f"note: {note}")
    torch.manual_seed(args.seed)
    try:
        runtime = runtime_options(args)
    except ValueError as e:
        raise BenchError(str(e)) from None
    arena, methods = load_racers(args, src, runtime)
    return src, prompts, arena, methods


def load_racers(args: argparse.Namespace, src: Sources, runtime: dict[str, Any]) -> tuple[Any, list[str]]:
    """The arena with the asked racers (``--methods``; default every loaded one) and HF ``generate`` when
    ``--hf-generate``, each asked racer checked to be loaded, and a named chat set checked to have a chat model."""
    from dart_core.arena import load_arena

    asked = args.methods.split(",") if args.methods else None
    if asked:
        try:  # a row of settings checked before anything loads
            rows_settings(args, asked, "cpu")
        except ValueError as e:
            raise BenchError(str(e)) from None
    racers = list(dict.fromkeys(row_racer(m) for m in asked)) if asked else None
    arena = load_arena(src.base, ngram=src.ngram, small_ngram=src.small_ngram, ngram_memory=src.ngram_memory,
                       progress=not args.no_progress, hf=args.hf_generate, **runtime, **src.drafters,
                       **model_free_asked(racers), **runners_asked(racers))
    methods = asked or arena.methods
    for m in methods:
        arena.drafter(row_racer(m))  # a clear error for a method that is not loaded
    if src.dataset is not None and not getattr(arena.tokenizer, "chat_template", None):
        raise BenchError(f"--dataset {src.dataset}: its questions are chat prompts and need a chat model, but the "
                         f"tokenizer of {src.base} has no chat template. Pass --base with a chat (instruct) model.")
    return arena, methods


def _race(args: argparse.Namespace, src: Sources, prompts: list[dict[str, Any]], encoded: list[list[int]],
          order: list[str], methods: list[str], runs: Conversations) -> Tally:
    """The warm-up prompt(s), uncounted (each row that remembers on a fresh memory), then every row on every
    prompt in file order, each checked against AR's greedy output as soon as it has finished."""
    from tqdm.auto import tqdm

    for i in range(min(args.warmup, len(encoded))):
        for m in tqdm(order, desc=f"warm-up {i + 1}", unit="method", disable=args.no_progress, leave=False):
            runs.converse(m, prompts[i], encoded[i], args.seed + i, counted=False)
    runs.start_run(order)
    tally = Tally(methods, runs.n_turns)
    greedy = runs.sampling.greedy
    dtype = runs.arena.target.dtype
    bar = tqdm(list(zip(prompts, encoded, strict=True)), desc="e2e", unit="prompt", disable=args.no_progress)
    for i, (p, ids) in enumerate(bar):
        category = category_of(p)
        tags = [{"turn": k + 1} if src.dataset is not None else {} for k in range(runs.n_turns)]
        entries: list[dict[str, Any]] = [{"id": p["id"], "category": category, **tags[k], "prompt_tokens": len(ids),
                                          "methods": {}} for k in range(runs.n_turns)]
        outputs: dict[str, list[list[int]]] = {}
        tops: dict[str, list[list[TopLogits]]] = {}
        for m in order:
            outputs[m], tops[m] = [], []
            for k, turn in enumerate(runs.converse(m, p, ids, args.seed + i)):
                run, wall_ms = turn.steps, turn.wall_ms
                tally.count(m, k, run, wall_ms, category)
                steps = [step_record(s) for s in run]
                outputs[m].append([t for s in run for t in s.tokens])
                tops[m].append([t for s in run for t in s.top_logits])
                figures = racer_figures(run, wall_ms)
                if turn.memory_answers is not None:
                    figures["memory_answers"] = turn.memory_answers
                entry = entries[k]
                if k:  # a follow-up's input holds the row's own first answer
                    figures["prompt_tokens"] = len(turn.ids)
                    if not entry["methods"]:
                        entry["prompt_tokens"] = len(turn.ids)
                entry["methods"][m] = {**figures, "stop_reason": steps[-1].get("stop_reason"), "steps": steps}
                if greedy and m != BASELINE and BASELINE in outputs:
                    _check(tally, p, k, m, tags[k], outputs, tops, dtype, tqdm.write)
        tally.per_prompt.extend(entries)
        bar.set_postfix_str(" ".join(f"{m}:{entries[0]['methods'][m]['tau']:.2f}" for m in methods))
    return tally


def _check(tally: Tally, p: dict[str, Any], k: int, m: str, tag: dict[str, Any], outputs: dict[str, list[list[int]]],
           tops: dict[str, list[list[TopLogits]]], dtype: Any, write: Any) -> None:
    """Method ``m``'s greedy output of turn ``k`` against AR's: a tie or a mismatch is recorded and reported."""
    verdict = compare(outputs[BASELINE][k], tops[BASELINE][k], outputs[m][k], tops[m][k], dtype)
    if verdict.kind == "identical":
        return
    mm = {"prompt_id": p["id"], **({"turn": k + 1} if tag else {}), "method": m,
          "position": verdict.position, "method_tokens": len(outputs[m][k]),
          "ar_tokens": len(outputs[BASELINE][k]),
          **({"gaps": list(verdict.gaps)} if verdict.gaps else {})}
    where = f" turn {k + 1}" if tag else ""
    if verdict.kind == "tie":
        tally.ties.append(mm)
        write(f"tie: {m} {verdict.describe(dtype)} on prompt {p['id']}{where}")
    else:
        tally.mismatches.append(mm)
        write(f"MISMATCH: {m} differs from AR on prompt {p['id']}{where} at token {verdict.position}")


def _report(args: argparse.Namespace, src: Sources, arena: Any, prompts: list[dict[str, Any]], methods: list[str],
            tally: Tally, sampling: SamplingConfig, *, chat: bool, settings: dict[str, Any],
            budgets: dict[str, str]) -> dict[str, Any]:
    """``e2e.json``: the config as run, the environment, what each figure means, the summaries, the greedy
    check's findings and every prompt's steps."""
    n_turns = tally.n_turns
    entries = tally.per_prompt
    summary = with_memory(tally.pooled.summary(), entries)
    by_category = {c: with_memory(pool.summary(), [e for e in entries if e["category"] == c])
                   for c, pool in tally.categories.items()}
    by_turn = {}
    for k in range(n_turns if n_turns > 1 else 0):
        mine = [e for e in entries if e.get("turn") == k + 1]
        turn_categories = {c: with_memory(pool.summary(), [e for e in mine if e["category"] == c])
                           for c, pool in tally.turn_categories[k].items()}
        by_turn[str(k + 1)] = {"summary": with_memory(tally.turns[k].summary(), mine), "by_category": turn_categories,
                               "best_by_category": {c: best_racer(f) for c, f in turn_categories.items()}}
    checked = sampling.greedy and BASELINE in methods and len(methods) > 1
    models = models_identity(src.base, src.drafters, src.ngram, src.small_ngram)
    remembering = sorted({row_racer(m) for m in methods if arena.remembers(row_racer(m))})
    return {
        "run": run_record(getattr(args, "command", None) or command_line([]), models),
        "config": {**{k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "command"},
                   "resolved": {"base": src.base, **src.drafters, "ngram": src.ngram,
                                "prompts": str(src.prompts) if src.prompts is not None else None,
                                "dataset": src.dataset, "turns": n_turns, "chat": chat,
                                "racer_settings": {m: dataclasses.asdict(t) for m, t in settings.items()},
                                "budgets": budgets},
                   "methods": methods,
                   "racers": list(dict.fromkeys(row_racer(m) for m in methods)),
                   "row_labels": {m: row_label(m, remembers=row_racer(m) in remembering) for m in methods},
                   "remembering": remembering,
                   "n_prompts": len(prompts)},
        "environment": environment(arena),
        "budgets": {m: budget.report() for m, rule in budgets.items()
                    if (budget := arena.budget_for(row_racer(m), rule)) is not None},
        "notes": {"tokens_per_s": "engine stopwatches: all emitted tokens over the sum of that method's step times "
                                  "(draft + tree search + verify), prefill included",
                  "tokens_per_s_wall": "all emitted tokens over the wall-clock time around each whole generation "
                                       "(input ids to last token, stream loop glue included, detokenization "
                                       "excluded), prefill included",
                  "speedup_vs_ar": "tokens_per_s_wall / AR's tokens_per_s_wall (speedup_vs_ar_engine: the same "
                                   "with the engine stopwatches)",
                  "tau": "tokens of verify steps / verify steps (bonus token included; 1 for AR)",
                  "acceptance": "vLLM's spec-decode metrics over the drafting steps (verify steps with at least "
                                "one draft token): num_drafts, num_draft_tokens (tree nodes below the root), "
                                "num_accepted_tokens, mean_acceptance_length (tokens per drafting step), "
                                "draft_acceptance_rate, per_position_acceptance_rate[k-1] (share of drafting steps "
                                "that accepted at least k drafts), acceptance_histogram[k] (drafting steps that "
                                "accepted exactly k); docs/metrics.md",
                  "rows": "summary, by_category, by_turn and each prompt's methods hold one row each: a racer, or a "
                          "variant of one (key RACER:VARIANT, its label in config.row_labels); a racer that "
                          "remembers earlier answers (config.remembering) runs as the rows of --memory",
                  **{f"memory_{kind}": note for kind, note in MEMORY_NOTE.items()},
                  "memory_answers": "rows that remember: the finished answers the row's memory held as a "
                                    "generation started (per prompt entry; in a summary their mean and max)",
                  **({"by_turn": "per turn (\"1\", \"2\"): the same summary, by_category and best_by_category "
                                 "over that turn's generations only; `summary` pools both; prompts holds one entry "
                                 "per prompt and turn"} if by_turn else {}),
                  "by_category": "the same figures over each category's prompts only (its turns pooled), "
                                 f"category -> racer -> figures; prompts without a category are in {NO_CATEGORY!r}",
                  "best_by_category": "per category the drafting racer (neither AR nor HF generate) with the highest "
                                      "speedup_vs_ar there (null without one)"},
        "summary": summary,
        **({"by_turn": by_turn} if by_turn else {}),
        "by_category": by_category,
        "best_by_category": {c: best_racer(figures) for c, figures in by_category.items()},
        "mismatches": tally.mismatches if checked else None,
        "ties": tally.ties if checked else None,
        "prompts": tally.per_prompt,
    }


def _write(args: argparse.Namespace, report: dict[str, Any], methods: list[str], n: int, sampling: SamplingConfig,
           tally: Tally) -> None:
    """``e2e.json`` (and ``e2e.html``) under ``--out``, the table and the greedy check's findings on stdout."""
    out = args.out or results_dir() / f"e2e-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    (out / "e2e.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    labels = report["config"]["row_labels"]
    by_turn = report.get("by_turn") or {}
    print_table(report["summary"], methods, n, sampling, title=f"{len(by_turn)} turns pooled" if by_turn else "",
                labels=labels)
    for line in category_lines(report["by_category"], report["best_by_category"], methods,
                               category_counts(report["prompts"])):
        print(line)
    for t, figures in by_turn.items():
        print_table(figures["summary"], methods, n, sampling, title=f"turn {t}", labels=labels)
        for line in category_lines(figures["by_category"], figures["best_by_category"], methods,
                                   category_counts([e for e in report["prompts"] if str(e.get("turn")) == t])):
            print(line)
    if "spread" in report:
        for line in spread_lines(report["spread"], len(report["by_seed"])):
            print(line)
    if report["mismatches"] is None:
        print("mismatches: not checked (sampled: each racer draws from the target's own distribution, which the test "
              "suite checks statistically; outputs are not compared token by token)" if not sampling.greedy else
              "mismatches: not checked (needs AR plus another method)")
    else:
        for name, found in (("mismatches", tally.mismatches), ("ties", tally.ties)):
            print(f"{name}: {len(found)}")
            for mm in found:
                where = f" turn {mm['turn']}" if "turn" in mm else ""
                gaps = (f" (the other's token {mm['gaps'][0]:.3g} below the best in AR, {mm['gaps'][1]:.3g} in "
                        f"{mm['method']})" if "gaps" in mm else "")
                print(f"  {mm['method']} on prompt {mm['prompt_id']}{where}: first difference at token "
                      f"{mm['position']}{gaps}")
    print(f"wrote {out / 'e2e.json'}")
    if not args.no_html:
        write_html(report, out / "e2e.html")
        print(f"wrote {out / 'e2e.html'}")


def main(argv: list[str] | None = None) -> int:
    """Standalone entry (also ``python -m dart_core.bench e2e``)."""
    p = argparse.ArgumentParser(prog="python -m dart_core.bench e2e", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    args = p.parse_args(argv)
    refused = check_flags(p, args)  # before any model loads
    if refused is not None:
        return refused
    args.command = command_line(sys.argv[1:] if argv is None else argv)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
