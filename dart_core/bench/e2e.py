"""End-to-end benchmark: AR vs DART vs EAGLE-3 on one shared target over a prompt set.

Default: the default model bundle (``assets/smollm2/``, see ``dart_core.bundle``: SmolLM2-135M-Instruct with its
DART drafter, EAGLE-3 head, N-gram store and held-out chat ``prompts.jsonl``, in chat mode; ``--bundle assets/tiny``:
the stdlib toy, completion mode), greedy, 128 new tokens, one warm-up prompt per method not counted, fixed seeds. For
each prompt the methods run one after another on the same loaded target with the same seed; each method's clock
counts only its own steps.
Prints one row per method (τ, tokens/s by the engine's stopwatches and by wall clock, speedup vs AR by wall clock,
mean draft / tree-search / verify ms per step), checks on the fly that every method's greedy output equals AR's, and
writes ``e2e.json`` + a self-contained ``e2e.html``. ``--dataset mt-bench`` runs a named chat prompt set instead of a
prompt file; ``--turns 2`` continues each method's own conversation with the set's follow-up question. The ``hf`` row
is Hugging Face ``generate`` on the same weights, dtype and device (``--no-hf-generate`` drops it): the baseline a
user would otherwise run. A greedy output that parts from AR's where the target's best logits lie within the
dtype's rounding in both runs counts as a tie, not a mismatch (``dart_core.engine.greedy_check``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from dart_core.bench.datasets import DATASETS, DatasetError, load_dataset
from dart_core.bundle import Bundle, BundleError, build_command, default_bundle_dir, open_bundle
from dart_core.engine.greedy_check import TopLogits, compare
from dart_core.engine.loop import Step, summarize
from dart_core.engine.target import FAST_PATH_ROWS
from dart_core.engine.verify import SamplingConfig
from dart_core.generate.__main__ import add_tree_arguments, encode_prompt, tree_settings
from dart_core.loading.errors import report_error
from dart_core.loading.hub import HubFileError
from dart_core.ngram.store import NgramFormatError
from dart_core.racers.registry import BASELINE, RACERS, drafting_racers, racer
from dart_core.racers.registry import color as racer_color

FIGURE_TITLES = (
    "τ per verify step (tokens per step, running mean)",
    "Latency split per step (mean ms)",
    "Tokens/s per prompt",
    "Accepted length per verify step (histogram)",
)
SPLIT_COLORS = {"draft": "#ff7f0e", "search": "#2ca02c", "verify": "#9467bd"}


class BenchError(Exception):
    """A user-facing setup problem (missing bundle, bad prompt file): printed, exit code 2."""


def default_bundle() -> Path:
    """The default bundle (``assets/smollm2`` next to the package, or ``$DART_ARENA_BUNDLE``)."""
    return default_bundle_dir()


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """The model flags (``--bundle``, ``--base``, drafters, N-gram store, device, dtype), shared with the
    app-vs-benchmark run so both resolve models the same way (:func:`resolve_sources`)."""
    m = p.add_argument_group("models (local directories or Hub ids)")
    m.add_argument("--bundle", type=Path, default=None,
                   help="bundle dir: bundle.json naming the target (or a target/ dir), "
                        f"{', '.join(sorted({r.bundle_dir + '/' for r in drafting_racers()}))}, ngram/small.ngram, "
                        "prompts.jsonl "
                        f"(default: {default_bundle()}, or $DART_ARENA_BUNDLE; "
                        "assets/tiny: the stdlib toy); used unless --base is given")
    m.add_argument("--base", help="target model (overrides the bundle's target)")
    for r in drafting_racers():
        m.add_argument(f"--{r.key}", metavar="MODEL",
                       help=f"{r.label} drafter (overrides the bundle's {r.bundle_dir}/)")
    m.add_argument("--ngram", help="N-gram store: a file, or a dir / Hub repo with small.trie / full.trie")
    m.add_argument("--small-ngram", action="store_true", help="use small.trie instead of full.trie with --ngram")
    m.add_argument("--device", default=None, help="cpu, cuda, cuda:N or auto; default: cuda if available")
    m.add_argument("--dtype", default="auto", help="auto (bf16 on CUDA, fp32 on CPU), float32, float16, bfloat16")
    m.add_argument("--fast-path", type=int, nargs="?", const=FAST_PATH_ROWS, default=None, metavar="ROWS",
                   help="for GPUs: a static KV cache of ROWS rows (prompt + reply + one draft tree; default "
                        f"{FAST_PATH_ROWS}) and torch.compile'd decode and verify forwards (CUDA graphs); the same "
                        "output, the first steps of each tree size slow while they compile")
    m.add_argument("--threads", type=int, default=None, metavar="N",
                   help="PyTorch CPU threads (default: PyTorch's, one per core; the app's engine on a CPU leaves "
                        "one core to the page: compare with the same number)")


def add_mode_arguments(g: argparse._ArgumentGroup) -> None:
    """``--raw`` / ``--chat`` (unset: the bundle's mode), shared with the app-vs-benchmark run."""
    mode = g.add_mutually_exclusive_group()
    mode.add_argument("--raw", dest="chat", action="store_false", default=None,
                      help="completion mode, no chat template (default for a completion bundle: the toy)")
    mode.add_argument("--chat", dest="chat", action="store_true",
                      help="chat template when the tokenizer has one (default with --base and for a chat bundle: "
                           "the default one)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_arguments(p)
    g = p.add_argument_group("run")
    source = g.add_mutually_exclusive_group()
    source.add_argument("--prompts", type=Path, default=None,
                        help="JSONL prompt file (fields: prompt, optional id); default: the bundle's prompts.jsonl")
    source.add_argument("--dataset", default=None, metavar="NAME",
                        help=f"named chat prompt set instead of a file: {', '.join(sorted(DATASETS))} "
                             "(chat mode; needs a tokenizer with a chat template)")
    g.add_argument("--turns", type=int, choices=(1, 2), default=1,
                   help="with --dataset: 2 = also ask each method the follow-up question after its own first answer")
    g.add_argument("--limit", type=int, default=0, help="use only the first N prompts (0 = all)")
    g.add_argument("--methods", default=None,
                   help=f"comma-separated subset of {','.join(r.key for r in RACERS)} (default: all loaded)")
    g.add_argument("--hf-generate", action=argparse.BooleanOptionalAction, default=True,
                   help="race transformers' own generate() on the same weights too: the `hf` row (default on)")
    g.add_argument("--warmup", type=int, default=1, help="warm-up prompt runs per method, not counted (default 1)")
    g.add_argument("--max-new-tokens", type=int, default=128)
    g.add_argument("--max-length", type=int, default=None, help="limit on prompt + output tokens")
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--top-k", type=int, default=0)
    g.add_argument("--seed", type=int, default=0)
    add_mode_arguments(g)
    g.add_argument("--system", default=None, help="system prompt (chat mode)")
    g.add_argument("--out", type=Path, default=None, help="output dir for e2e.json / e2e.html "
                   "(default .bench/e2e-<timestamp>/)")
    g.add_argument("--no-html", action="store_true", help="skip the plotly HTML report")
    g.add_argument("--no-progress", action="store_true", help="no progress bars")
    g.add_argument("--debug", action="store_true", help="show the traceback of an error (by default one line)")
    add_tree_arguments(p)


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


def resolve_sources(args: argparse.Namespace) -> Sources:
    """Bundle parts, overridden by explicit --base/--dart/...; a missing bundle is a clear error. Chat mode is the
    default with --base and for a bundle whose ``bundle.json`` says ``"mode": "chat"``."""
    use_bundle = args.bundle is not None or args.base is None
    notes: list[str] = []
    parts: dict[str, str | None] = {**{r.key: getattr(args, r.dest, None) for r in drafting_racers()},
                                    "ngram": args.ngram}
    small = bool(args.small_ngram)
    found: Bundle | None = None
    bundle: Path | None = None
    if use_bundle:
        bundle = Path(args.bundle).expanduser() if args.bundle is not None else default_bundle()
        try:
            found = open_bundle(bundle)
        except BundleError as e:
            # with --base the bundle only lends its drafters and prompts: no target needed, but a broken
            # bundle.json is still an error
            if args.base is None or not bundle.is_dir() or (bundle / "bundle.json").exists():
                raise BenchError(f"{e}\n(--bundle DIR picks another bundle, e.g. --bundle assets/tiny for the "
                                 "stdlib toy; --base MODEL another target.)") from None
        for name, sub in [*((r.key, r.bundle_dir) for r in drafting_racers()), ("ngram", "ngram/small.ngram")]:
            if parts[name] is None:
                if (bundle / sub).exists():
                    parts[name] = str(bundle / sub)
                else:
                    notes.append(f"bundle has no {sub}: {name} skipped")
    base = args.base or found.target  # type: ignore[union-attr]
    drafters = {r.key: parts[r.key] for r in drafting_racers()}
    dataset = getattr(args, "dataset", None)
    if getattr(args, "turns", 1) > 1 and dataset is None:
        raise BenchError(f"--turns {args.turns} needs a multi-turn --dataset ({', '.join(sorted(DATASETS))}); "
                         "prompt files hold one turn")
    if dataset is not None:
        if args.chat is False:
            raise BenchError(f"--raw with --dataset {dataset}: its questions are chat prompts, run in chat mode "
                             "(drop --raw)")
        return Sources(base, drafters, parts["ngram"], small, None, True, bundle, notes, dataset)
    prompts = args.prompts or (bundle / "prompts.jsonl" if bundle is not None else None)
    if prompts is None:
        raise BenchError("no prompt set: pass --prompts FILE.jsonl (fields: prompt, optional id)")
    if not Path(prompts).is_file():
        hint = f" Build the bundle with `{build_command(bundle)}`." if args.prompts is None and bundle else ""
        raise BenchError(f"prompt file not found: {prompts}.{hint}")
    chat = args.chat if args.chat is not None else (args.base is not None or (found is not None and found.chat))
    return Sources(base, drafters, parts["ngram"], small, Path(prompts), chat, bundle, notes)


def read_prompts(path: Path, limit: int = 0) -> list[dict[str, str]]:
    """JSONL lines with ``prompt`` (text) and an optional ``id`` (default: the line number)."""
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            text = rec["prompt"]
        except (json.JSONDecodeError, KeyError, TypeError):
            raise BenchError(f"{path}:{n}: expected a JSON object with a 'prompt' field") from None
        out.append({"id": str(rec.get("id", n)), "prompt": str(text)})
    if limit:
        out = out[:limit]
    if not out:
        raise BenchError(f"{path} holds no prompts")
    return out


def step_record(s: Step) -> dict[str, Any]:
    return {"tokens": list(s.tokens), "accepted": s.accepted, "tree_size": s.tree_size, "prefill": s.prefill,
            "draft_ms": round(s.draft_ms, 4), "search_ms": round(s.search_ms, 4), "verify_ms": round(s.verify_ms, 4),
            "stop_reason": s.stop_reason}


def method_figures(steps: Sequence[Step], wall_ms: float) -> dict[str, Any]:
    """τ, tokens/s (prefill included) by the engine's stopwatches and by the wall clock around the generation(s)
    (``wall_ms``: glue between steps counts too), the per-step split (``summarize``), the accepted-length histogram."""
    st = summarize(steps)
    hist = Counter(len(s.tokens) for s in steps if not s.prefill)
    return {
        "tokens": st.new_tokens,
        "verify_steps": st.forwards,
        "tau": st.tau,
        "tokens_per_s": st.tokens_per_s,
        "tokens_per_s_wall": st.new_tokens / (wall_ms / 1e3) if wall_ms > 0 else 0.0,
        "wall_ms": wall_ms,
        "total_ms": st.total_ms,
        "prefill_ms": st.prefill_ms,
        "draft_ms_per_step": st.draft_ms_per_step,
        "search_ms_per_step": st.search_ms_per_step,
        "verify_ms_per_step": st.verify_ms_per_step,
        "accept_hist": {str(k): hist[k] for k in sorted(hist)},
    }


def environment(arena: Any) -> dict[str, Any]:
    import transformers

    dev = arena.target.device
    env = {"python": platform.python_version(), "platform": platform.platform(), "torch": torch.__version__,
           "transformers": transformers.__version__, "device": str(dev),
           "dtype": str(arena.target.embed_tokens.weight.dtype), "torch_threads": torch.get_num_threads()}
    if torch.device(dev).type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(dev)
    return env


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (HubFileError, NgramFormatError, ValueError, OSError) as e:  # a LoadError names its file
        return report_error(e, debug=getattr(args, "debug", False))


def encode_messages(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    """A whole conversation through the chat template, rendered as ``encode_prompt`` renders a single turn."""
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                             enable_thinking=False)
    return tokenizer(rendered, add_special_tokens=False)["input_ids"]


def _load_prompts(src: Sources, args: argparse.Namespace) -> list[dict[str, Any]]:
    if src.dataset is None:
        return read_prompts(src.prompts, args.limit)  # type: ignore[arg-type]
    try:
        prompts = load_dataset(src.dataset, args.limit)
    except DatasetError as e:
        raise BenchError(str(e)) from None
    short = [p["id"] for p in prompts if len(p.get("turns", [p["prompt"]])) < args.turns]
    if short:
        raise BenchError(f"--turns {args.turns}: {src.dataset} prompts {', '.join(short[:5])} have fewer turns")
    if not prompts:
        raise BenchError(f"dataset {src.dataset} holds no prompts")
    return prompts


def _run(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm

    from dart_core.arena import load_arena

    src = resolve_sources(args)
    prompts = _load_prompts(src, args)
    for note in src.notes:
        print(f"note: {note}")
    torch.manual_seed(args.seed)
    if args.threads is not None:
        if args.threads < 1:
            raise BenchError(f"--threads must be at least 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    arena = load_arena(src.base, ngram=src.ngram, small_ngram=src.small_ngram, device=args.device, dtype=args.dtype,
                       progress=not args.no_progress, hf=args.hf_generate, fast_path=args.fast_path,
                       **src.drafters)
    methods = args.methods.split(",") if args.methods else arena.methods
    for m in methods:
        arena.drafter(m)  # a clear error for a method that is not loaded
    tokenizer = arena.tokenizer
    has_template = bool(getattr(tokenizer, "chat_template", None))
    if src.dataset is not None and not has_template:
        raise BenchError(f"--dataset {src.dataset}: its questions are chat prompts and need a chat model, but the "
                         f"tokenizer of {src.base} has no chat template. Pass --base with a chat (instruct) model.")
    # AR runs first on each prompt so the other methods are checked against it as soon as they finish.
    order = ([BASELINE] if BASELINE in methods else []) + [m for m in methods if m != BASELINE]
    sampling = SamplingConfig(args.temperature, args.top_p, args.top_k)
    chat = src.chat and has_template
    n_turns = args.turns if src.dataset is not None else 1
    trees = {m: t for m, t in tree_settings(args, arena.target.device).items() if racer(m).drafts}
    print("trees: " + "; ".join(f"{m} {dataclasses.asdict(t)}" for m, t in trees.items() if m in methods))
    kwargs = {"sampling": sampling, "max_new_tokens": args.max_new_tokens, "max_length": args.max_length}
    encoded = [encode_prompt(tokenizer, p["prompt"], raw=not chat, system=args.system) for p in prompts]
    gen_device = arena.target.feature_device

    def generate(method: str, ids: list[int], seed: int) -> tuple[list[Step], float]:
        """One generation's steps and its wall-clock ms, from the input ids to the last token (loop glue included)."""
        start = time.perf_counter()
        generator = torch.Generator(device=gen_device).manual_seed(seed)
        steps = list(arena.stream(method, ids, generator=generator, settings=trees.get(method), **kwargs))
        return steps, (time.perf_counter() - start) * 1e3

    def converse(method: str, p: dict[str, Any], first: list[int], seed: int) -> list[tuple[list[int], list[Step],
                                                                                             float]]:
        """Each turn's (input ids, steps, wall ms); a follow-up continues the method's OWN conversation (its own
        earlier answers as the assistant turns: with greedy decoding these equal AR's)."""
        out = [(first, *generate(method, first, seed))]
        messages = [{"role": "system", "content": args.system}] if args.system else []
        for k in range(1, n_turns):
            answer = tokenizer.decode([t for s in out[-1][1] for t in s.tokens], skip_special_tokens=True,
                                      clean_up_tokenization_spaces=False)
            messages += [{"role": "user", "content": p["turns"][k - 1]}, {"role": "assistant", "content": answer}]
            ids = encode_messages(tokenizer, [*messages, {"role": "user", "content": p["turns"][k]}])
            out.append((ids, *generate(method, ids, seed)))
        return out

    for i in range(min(args.warmup, len(encoded))):
        for m in tqdm(order, desc=f"warm-up {i + 1}", unit="method", disable=args.no_progress, leave=False):
            converse(m, prompts[i], encoded[i], args.seed + i)

    per_prompt: list[dict[str, Any]] = []
    pooled: dict[str, list[Step]] = {m: [] for m in methods}
    wall: dict[str, float] = dict.fromkeys(methods, 0.0)
    turn_steps: list[dict[str, list[Step]]] = [{m: [] for m in methods} for _ in range(n_turns)]
    turn_wall: list[dict[str, float]] = [dict.fromkeys(methods, 0.0) for _ in range(n_turns)]
    mismatches: list[dict[str, Any]] = []  # real ones: beyond the dtype's rounding (``greedy_check``)
    ties: list[dict[str, Any]] = []  # identical up to a rounding tie of the best logits
    dtype = arena.target.dtype
    bar = tqdm(list(zip(prompts, encoded, strict=True)), desc="e2e", unit="prompt", disable=args.no_progress)
    for i, (p, ids) in enumerate(bar):
        tags = [{"category": p.get("category"), "turn": k + 1} if src.dataset is not None else {}
                for k in range(n_turns)]
        entries: list[dict[str, Any]] = [{"id": p["id"], **tags[k], "prompt_tokens": len(ids), "methods": {}}
                                         for k in range(n_turns)]
        outputs: dict[str, list[list[int]]] = {}
        tops: dict[str, list[list[TopLogits]]] = {}
        for m in order:
            outputs[m], tops[m] = [], []
            for k, (turn_ids, run, wall_ms) in enumerate(converse(m, p, ids, args.seed + i)):
                pooled[m].extend(run)
                wall[m] += wall_ms
                turn_steps[k][m].extend(run)
                turn_wall[k][m] += wall_ms
                steps = [step_record(s) for s in run]
                outputs[m].append([t for s in run for t in s.tokens])
                tops[m].append([t for s in run for t in s.top_logits])
                figures = method_figures(run, wall_ms)
                figures.pop("accept_hist")
                entry = entries[k]
                if k:  # a follow-up's input holds the method's own first answer
                    figures["prompt_tokens"] = len(turn_ids)
                    if not entry["methods"]:
                        entry["prompt_tokens"] = len(turn_ids)
                entry["methods"][m] = {**figures, "stop_reason": steps[-1].get("stop_reason"), "steps": steps}
                if sampling.greedy and m != BASELINE and BASELINE in outputs:
                    verdict = compare(outputs[BASELINE][k], tops[BASELINE][k], outputs[m][k], tops[m][k], dtype)
                    if verdict.kind != "identical":
                        mm = {"prompt_id": p["id"], **({"turn": k + 1} if tags[k] else {}), "method": m,
                              "position": verdict.position, "method_tokens": len(outputs[m][k]),
                              "ar_tokens": len(outputs[BASELINE][k]),
                              **({"gaps": list(verdict.gaps)} if verdict.gaps else {})}
                        where = f" turn {k + 1}" if tags[k] else ""
                        if verdict.kind == "tie":
                            ties.append(mm)
                            tqdm.write(f"tie: {m} {verdict.describe(dtype)} on prompt {p['id']}{where}")
                        else:
                            mismatches.append(mm)
                            tqdm.write(f"MISMATCH: {m} differs from AR on prompt {p['id']}{where} at token "
                                       f"{verdict.position}")
        per_prompt.extend(entries)
        bar.set_postfix_str(" ".join(f"{m}:{entries[0]['methods'][m]['tau']:.2f}" for m in methods))

    summary = summarize_methods(pooled, wall)
    per_turn = ({str(k + 1): summarize_methods(turn_steps[k], turn_wall[k]) for k in range(n_turns)}
                if n_turns > 1 else None)
    checked = sampling.greedy and BASELINE in methods and len(methods) > 1
    report = {
        "config": {**{k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                   "resolved": {"base": src.base, **src.drafters, "ngram": src.ngram,
                                "prompts": str(src.prompts) if src.prompts is not None else None,
                                "dataset": src.dataset, "turns": n_turns, "chat": chat,
                                "trees": {m: dataclasses.asdict(t) for m, t in trees.items()}}, "methods": methods,
                   "n_prompts": len(prompts)},
        "environment": environment(arena),
        "notes": {"tokens_per_s": "engine stopwatches: all emitted tokens over the sum of that method's step times "
                                  "(draft + tree search + verify), prefill included",
                  "tokens_per_s_wall": "all emitted tokens over the wall-clock time around each whole generation "
                                       "(input ids to last token, stream loop glue included, detokenization "
                                       "excluded), prefill included",
                  "speedup_vs_ar": "tokens_per_s_wall / AR's tokens_per_s_wall (speedup_vs_ar_engine: the same "
                                   "with the engine stopwatches)",
                  "tau": "tokens of verify steps / verify steps (bonus token included; 1 for AR)",
                  "accept_hist": "tokens emitted per verify step (accepted drafts + bonus)",
                  **({"summary_per_turn": "the same figures over turn 1 / turn 2 only; `summary` pools both; "
                                          "prompts holds one entry per prompt and turn"} if per_turn else {})},
        "summary": summary,
        **({"summary_per_turn": per_turn} if per_turn else {}),
        "mismatches": mismatches if checked else None,
        "ties": ties if checked else None,
        "prompts": per_prompt,
    }
    out = args.out or Path(".bench") / f"e2e-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    (out / "e2e.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    print_table(summary, methods, len(prompts), sampling, per_turn)
    if not checked:
        print("mismatches: not checked (needs greedy and AR plus another method)")
    else:
        for name, found in (("mismatches", mismatches), ("ties", ties)):
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
    return 0


def summarize_methods(pooled: dict[str, list[Step]], wall_ms: dict[str, float]) -> dict[str, dict[str, Any]]:
    """Overall figures per method over every counted prompt (pooled steps, summed wall clock) + speedups vs AR
    (``speedup_vs_ar`` by wall clock, ``speedup_vs_ar_engine`` by the engine's stopwatches)."""
    summary = {m: method_figures(steps, wall_ms[m]) for m, steps in pooled.items()}
    ar = summary.get(BASELINE, {})
    for s in summary.values():
        s["speedup_vs_ar"] = s["tokens_per_s_wall"] / ar["tokens_per_s_wall"] if ar.get("tokens_per_s_wall") else None
        s["speedup_vs_ar_engine"] = s["tokens_per_s"] / ar["tokens_per_s"] if ar.get("tokens_per_s") else None
    return summary


def print_table(summary: dict[str, dict[str, Any]], methods: list[str], n: int, sampling: SamplingConfig,
                per_turn: dict[str, dict[str, dict[str, Any]]] | None = None) -> None:
    """One row per method (and per turn when ``per_turn`` is given: ``all`` pools the turns)."""
    mode = "greedy" if sampling.greedy else f"T={sampling.temperature} top-p={sampling.top_p} top-k={sampling.top_k}"
    turns = f" x {len(per_turn)} turns" if per_turn else ""
    print(f"\n{n} prompts{turns}, {mode}; tok/s include the prefill (eng: sum of the engine's step stopwatches, "
          "wall: clock around each generation)\nvs AR by wall tok/s; ms are means per verify step")
    turn = f" {'turn':>4}" if per_turn else ""
    print(f"{'method':<8}{turn} {'tokens':>7} {'steps':>6} {'tau':>6} {'tok/s eng':>9} {'tok/s wall':>10} "
          f"{'vs AR wall':>10} {'draft ms':>9} {'search ms':>10} {'verify ms':>10}")

    def row(m: str, t: str, s: dict[str, Any]) -> None:
        speed = f"{s['speedup_vs_ar']:.2f}x" if s["speedup_vs_ar"] else "-"
        col = f" {t:>4}" if per_turn else ""
        print(f"{m:<8}{col} {s['tokens']:>7} {s['verify_steps']:>6} {s['tau']:>6.2f} {s['tokens_per_s']:>9.1f} "
              f"{s['tokens_per_s_wall']:>10.1f} {speed:>10} {s['draft_ms_per_step']:>9.2f} "
              f"{s['search_ms_per_step']:>10.2f} {s['verify_ms_per_step']:>10.2f}")

    for m in methods:
        row(m, "all", summary[m])
        for t, figures in (per_turn or {}).items():
            row(m, t, figures[m])


def build_figures(report: dict[str, Any]) -> list[Any]:
    """The four plotly figures of the report, with an explicit light template so they read on any page."""
    import plotly.graph_objects as go

    methods = report["config"]["methods"]
    prompts = report["prompts"]
    summary = report["summary"]
    layout = {"template": "plotly_white", "paper_bgcolor": "#ffffff", "plot_bgcolor": "#ffffff",
              "font": {"color": "#222222"}, "height": 420, "margin": {"l": 60, "r": 20, "t": 60, "b": 50},
              "legend": {"bgcolor": "rgba(255,255,255,0.8)"}}
    axis = {"showgrid": True, "gridcolor": "#d0d0d0", "linecolor": "#888888", "zerolinecolor": "#bbbbbb"}

    def color(m: str) -> str:
        return racer_color(m)

    f1 = go.Figure()
    for m in methods:
        ys = [len(s["tokens"]) for e in prompts for s in e["methods"][m]["steps"] if not s["prefill"]]
        xs = list(range(1, len(ys) + 1))
        mean, acc = [], 0
        for k, y in enumerate(ys, 1):
            acc += y
            mean.append(acc / k)
        f1.add_scatter(x=xs, y=ys, mode="markers", name=f"{m} per step", marker={"color": color(m), "size": 4},
                       opacity=0.35, legendgroup=m)
        f1.add_scatter(x=xs, y=mean, mode="lines", name=f"{m} running mean", line={"color": color(m), "width": 2.5},
                       legendgroup=m)
    f1.update_layout(title=FIGURE_TITLES[0], xaxis_title="verify step (all prompts in order)",
                     yaxis_title="tokens per step", **layout)

    f2 = go.Figure()
    for part in ("draft", "search", "verify"):
        f2.add_bar(x=methods, y=[summary[m][f"{part}_ms_per_step"] for m in methods], name=f"{part} ms",
                   marker_color=SPLIT_COLORS[part])
    f2.update_layout(title=FIGURE_TITLES[1], barmode="stack", yaxis_title="ms per verify step", **layout)

    f3 = go.Figure()
    multi = "summary_per_turn" in report
    ids = [f"{e['id']} t{e['turn']}" if multi else e["id"] for e in prompts]
    for m in methods:
        f3.add_bar(x=ids, y=[e["methods"][m]["tokens_per_s_wall"] for e in prompts], name=m, marker_color=color(m))
    f3.update_layout(title=FIGURE_TITLES[2], barmode="group", xaxis_title="prompt id" + (" and turn" if multi else ""),
                     xaxis_type="category", yaxis_title="tokens/s (wall clock, prefill included)", **layout)

    f4 = go.Figure()
    for m in methods:
        hist = summary[m]["accept_hist"]
        total = max(sum(hist.values()), 1)
        f4.add_bar(x=[int(k) for k in hist], y=[v / total for v in hist.values()], name=m, marker_color=color(m))
    f4.update_layout(title=FIGURE_TITLES[3], barmode="group", xaxis_title="tokens per verify step (accepted + bonus)",
                     yaxis_title="fraction of steps", **layout)
    for f in (f1, f2, f3, f4):
        f.update_xaxes(**axis)
        f.update_yaxes(**axis)
    return [f1, f2, f3, f4]


def _speed(x: float | None) -> str:
    return f"{x:.2f}x" if x else "-"


def write_html(report: dict[str, Any], path: Path) -> None:
    """One self-contained page (plotly.js inlined, works offline): summary table + the four figures."""
    import html

    figs = build_figures(report)
    parts = [f.to_html(full_html=False, include_plotlyjs=(i == 0)) for i, f in enumerate(figs)]
    tables = {"all": report["summary"], **report.get("summary_per_turn", {})}
    multi = len(tables) > 1
    rows = "".join(
        f"<tr><td>{html.escape(m)}</td>" + (f"<td>{t}</td>" if multi else "") +
        f"<td>{s['tokens']}</td><td>{s['verify_steps']}</td><td>{s['tau']:.2f}</td>"
        f"<td>{s['tokens_per_s']:.1f}</td><td>{s['tokens_per_s_wall']:.1f}</td><td>{_speed(s['speedup_vs_ar'])}</td>"
        f"<td>{s['draft_ms_per_step']:.2f}</td><td>{s['search_ms_per_step']:.2f}</td>"
        f"<td>{s['verify_ms_per_step']:.2f}</td></tr>"
        for m in report["config"]["methods"] for t, table in tables.items() for s in [table[m]])
    def listed(found: list[dict[str, Any]] | None) -> str:
        return ("not checked" if found is None else "0" if not found else
                "; ".join(f"{x['method']} on prompt {html.escape(x['prompt_id'])}"
                          + (f" turn {x['turn']}" if "turn" in x else "") + f" at token {x['position']}"
                          for x in found))

    mm_text, tie_text = listed(report["mismatches"]), listed(report.get("ties"))
    env = report["environment"]
    resolved = report["config"]["resolved"]
    source = (f"prompts of {html.escape(resolved['dataset'])} ({resolved['turns']} turn(s) each)"
              if resolved.get("dataset") else "prompts")
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>DART Arena: end-to-end benchmark</title>
<style>
:root {{ color-scheme: light dark; }}
body {{ font-family: system-ui, sans-serif; margin: 24px; background: Canvas; color: CanvasText; }}
.card {{ background: #ffffff; color: #222222; border: 1px solid #999999; border-radius: 6px; padding: 8px;
         margin: 16px 0; }}
table {{ border-collapse: collapse; }} td, th {{ border: 1px solid #999999; padding: 4px 10px; text-align: right; }}
</style></head><body>
<h1>End-to-end benchmark</h1>
<p>{report['config']['n_prompts']} {source}, max {report['config']['max_new_tokens']} new tokens,
temperature {report['config']['temperature']}; torch {html.escape(env['torch'])} on {html.escape(env['device'])}
({env['torch_threads']} threads). Tokens/s include the prefill (engine: sum of the step stopwatches; wall: clock
around each generation); vs AR by wall tokens/s; ms are means per verify step.</p>
<div class="card"><table><tr><th>method</th>{'<th>turn</th>' if multi else ''}<th>tokens</th><th>steps</th><th>τ</th>
<th>tok/s eng</th><th>tok/s wall</th><th>vs AR wall</th>
<th>draft ms</th><th>search ms</th><th>verify ms</th></tr>{rows}</table>
<p>mismatches vs AR: {mm_text}</p><p>rounding ties vs AR (greedy_check): {tie_text}</p></div>
{''.join(f'<div class="card"><h2>{html.escape(t)}</h2>{p}</div>' for t, p in zip(FIGURE_TITLES, parts, strict=True))}
</body></html>
"""
    path.write_text(page, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    """Standalone entry (also ``python -m dart_core.bench e2e``)."""
    p = argparse.ArgumentParser(prog="python -m dart_core.bench e2e", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
