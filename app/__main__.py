"""DART Arena: DART, EAGLE-3 and plain autoregressive decoding race side by side on one shared target model, in
the browser, with live plots (python -m app).

With no arguments it serves the embedded bundle (assets/tiny: a small code model with its DART drafter, EAGLE-3
head and N-gram store) in completion mode, on the GPU if there is one, else on the CPU.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
BUNDLE = REPO / "assets" / "tiny"
TRAIN_COMMAND = "python -m dart_core.train all --out assets/tiny"
COMPLETION_TEMPLATES = ("raw", "none", "completion")
CHAT_EXAMPLES = [
    ("quicksort", "Write a quicksort in Python."),
    ("palindrome", "Write a Python function that checks whether a string is a palindrome, with a few tests."),
    ("explain", "Explain speculative decoding in three sentences."),
    ("SQL", "Write a SQL query that returns the ten customers with the highest total order value."),
]

EPILOG = """examples:
  python -m app                                    # the embedded bundle, CPU, http://127.0.0.1:7860
  python -m app --base-model-name-or-path Qwen/Qwen3-8B --dart-model-name-or-path fvliang/qwen8b-dart \\
      --ngram-model-name-or-path fvliang/dart-qwen3-ngram --use-small-ngram \\
      --compare-eagle3 --eagle3-model-name-or-path AngelSlim/Qwen3-8B_eagle3 \\
      --device cuda --dtype bfloat16 --listen --server-port 30000
  bash launch/qwen3_8b_app.sh                      # the same, with the published ids
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m app", description=__doc__, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    m = p.add_argument_group("models (local directories or Hub ids; default: the embedded bundle)")
    m.add_argument("--base-model-name-or-path", default=None, metavar="MODEL",
                   help=f"target model, e.g. Qwen/Qwen3-8B (default: {BUNDLE / 'target'})")
    m.add_argument("--dart-model-name-or-path", default=None, metavar="MODEL",
                   help="DART drafter, e.g. fvliang/qwen8b-dart (default: the bundle's dart/ when the target is "
                        "the bundle's; without one there is no DART column)")
    m.add_argument("--ngram-model-name-or-path", default=None, metavar="PATH",
                   help="N-gram store for DART's tree search: a file, or a dir / Hub repo with small.trie / "
                        "full.trie, e.g. fvliang/dart-qwen3-ngram (default: the bundle's ngram/small.ngram)")
    m.add_argument("--use-small-ngram", action="store_true",
                   help="load small.trie (quick to load, good for demos) instead of full.trie")
    m.add_argument("--compare-eagle3", action=argparse.BooleanOptionalAction, default=None,
                   help="add an EAGLE-3 column on the same target (default: on for the bundle, off otherwise)")
    m.add_argument("--eagle3-model-name-or-path", default=None, metavar="MODEL",
                   help="EAGLE-3 head for --compare-eagle3, e.g. AngelSlim/Qwen3-8B_eagle3 (default: the "
                        "bundle's eagle3/)")
    m.add_argument("--template-name", default="auto", metavar="NAME",
                   help="'auto' (default): the tokenizer's chat template when it has one (Qwen3: thinking off), "
                        "else completion mode; 'raw' (or 'completion'): no template; any other name (e.g. qwen) "
                        "asks for the chat template")
    m.add_argument("--device", default=None,
                   help="cpu, cuda, cuda:N, or auto (spread the target over all GPUs); default: cuda if available")
    m.add_argument("--dtype", default="auto",
                   help="auto (bfloat16 on CUDA, float32 on CPU), float32, float16 or bfloat16")
    g = p.add_argument_group("generation")
    g.add_argument("--max-new-tokens", type=int, default=256,
                   help="default of the 'Max new tokens' control (default: %(default)s)")
    g.add_argument("--max-length", type=int, default=None,
                   help="limit on prompt + answer tokens (default: the target's context length)")
    s = p.add_argument_group("serving")
    s.add_argument("--listen", action="store_true",
                   help="listen on all interfaces (0.0.0.0) instead of 127.0.0.1 only")
    s.add_argument("--server-port", type=int, default=7860, help="port (default: %(default)s)")
    s.add_argument("--share", action="store_true",
                   help="also open a public *.gradio.live link (off unless asked; needs internet)")
    return p


def resolve(args: argparse.Namespace) -> dict[str, Any]:
    """Model references from the flags; the bundle fills in what is not given when the target is the bundle's."""
    bundle = args.base_model_name_or_path is None
    if bundle and not (BUNDLE / "target" / "config.json").is_file():
        raise SystemExit(f"error: the embedded bundle is missing ({BUNDLE / 'target'}); rebuild it with "
                         f"`{TRAIN_COMMAND}` or pass --base-model-name-or-path")
    compare = args.compare_eagle3 if args.compare_eagle3 is not None else bundle
    eagle3 = args.eagle3_model_name_or_path
    if compare and eagle3 is None:
        if not bundle:
            raise SystemExit("error: --compare-eagle3 needs --eagle3-model-name-or-path (e.g. "
                             "AngelSlim/Qwen3-8B_eagle3)")
        eagle3 = str(BUNDLE / "eagle3")
    if not compare and eagle3 is not None:
        logging.getLogger("dart_arena.app").warning("--eagle3-model-name-or-path is ignored without --compare-eagle3")
    return {
        "base": str(BUNDLE / "target") if bundle else args.base_model_name_or_path,
        "dart": args.dart_model_name_or_path or (str(BUNDLE / "dart") if bundle else None),
        "eagle3": eagle3 if compare else None,
        "ngram": args.ngram_model_name_or_path or (str(BUNDLE / "ngram" / "small.ngram") if bundle else None),
        "bundle": bundle,
    }


def short(ref: str | None) -> str:
    """A path inside the repo is shown relative to it; Hub ids as they are."""
    if ref is None:
        return "–"
    try:
        return str(Path(ref).resolve().relative_to(REPO))
    except ValueError:
        return ref


def bundle_examples(limit: int = 4) -> list[tuple[str, str]]:
    """The bundle's held-out code prompts (labelled by their source file)."""
    path = BUNDLE / "prompts.jsonl"
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines()[:limit]:
        rec = json.loads(line)
        out.append((f"{rec.get('source', 'prompt')} #{rec.get('id', len(out))}", rec["prompt"]))
    return out


def setup_logging() -> logging.Logger:
    """Our progress lines on stderr, without turning on every library's INFO logging."""
    root = logging.getLogger("dart_arena")
    if not root.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("[dart-arena] %(message)s"))
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        root.propagate = False
    return logging.getLogger("dart_arena.app")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    log = setup_logging()
    src = resolve(args)
    log.info("loading target %s%s%s%s", short(src["base"]), f", DART {short(src['dart'])}" if src["dart"] else "",
             f", EAGLE-3 {short(src['eagle3'])}" if src["eagle3"] else "",
             f", N-gram {short(src['ngram'])}" if src["ngram"] else "")

    from app.race import RaceSettings, warm_up
    from app.ui import AppConfig, ArenaUI, launch, model_worker
    from dart_core.generate import tree_defaults
    from dart_core.hub import HubFileError
    from dart_core.models import load_arena
    from dart_core.ngram import NgramFormatError

    # everything that touches the model, loading included, runs on one thread (see app.ui.ArenaUI)
    worker = model_worker()
    t0 = time.perf_counter()
    try:
        arena = worker.submit(load_arena, src["base"], dart=src["dart"], eagle3=src["eagle3"], ngram=src["ngram"],
                              small_ngram=args.use_small_ngram, device=args.device, dtype=args.dtype).result()
    except (HubFileError, NgramFormatError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if arena.dart is None:
        log.warning("no DART drafter given (--dart-model-name-or-path): the page shows %s only",
                    " and ".join(arena.methods))
    elif arena.store is None:
        log.warning("no N-gram store given (--ngram-model-name-or-path): DART's tree search runs without it")
    device = arena.target.device
    dtype = str(arena.target.dtype).removeprefix("torch.")
    log.info("loaded in %.1f s on %s (%s)", time.perf_counter() - t0, device, dtype)

    template = args.template_name.lower()
    has_template = bool(getattr(arena.tokenizer, "chat_template", None))
    if template in COMPLETION_TEMPLATES:
        chat = False
    elif template == "auto":
        chat = has_template
    elif not has_template:
        print(f"error: --template-name {args.template_name}: the tokenizer of {short(src['base'])} has no chat "
              "template; use --template-name raw for completion mode", file=sys.stderr)
        return 2
    else:
        chat = True

    dart_tree, eagle3_tree = tree_defaults(device)
    examples = bundle_examples() if src["bundle"] else (CHAT_EXAMPLES if chat else [])
    parts = [f"target {short(src['base'])}"]
    parts += [f"DART {short(src['dart'])}"] if arena.dart is not None else []
    parts += [f"EAGLE-3 {short(src['eagle3'])}"] if arena.eagle3 is not None else []
    parts += [f"N-gram {short(src['ngram'])}"] if arena.store is not None else []
    parts += [f"{device} · {dtype} · {'chat' if chat else 'completion'} mode"]
    config = AppConfig(chat=chat, max_new_tokens=args.max_new_tokens, max_length=args.max_length, dart=dart_tree,
                       eagle3=eagle3_tree, examples=examples, subtitle=" · ".join(parts))

    ui = ArenaUI(arena, config, worker=worker)
    log.info("warming up (a short race, not shown)")
    text = examples[0][1] if examples and not chat else "def main():\n"
    ids = arena.tokenizer(text, add_special_tokens=False)["input_ids"]
    warm_up(arena, ids, RaceSettings(max_length=args.max_length, dart=dart_tree, eagle3=eagle3_tree), worker=ui.worker)
    demo = ui.build()
    host = "0.0.0.0" if args.listen else "127.0.0.1"
    log.info("serving on http://%s:%d%s", host, args.server_port, " (+ a public share link)" if args.share else "")
    launch(demo, listen=args.listen, port=args.server_port, share=args.share)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    sys.exit(main())
