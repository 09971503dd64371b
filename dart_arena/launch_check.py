"""The app's launch gate: ``python -m dart_arena``'s flags turned into a launch plan (``dart_core.preflight``), checked
before any weight is read; ``--check`` prints it, ``--download`` fetches it. The engine package knows nothing of
the app's command line: this module is where the flags meet the plan."""

from __future__ import annotations

import argparse
import logging
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dart_core import describe_fast_path
from dart_core.preflight.launch import download, plan_launch
from dart_core.preflight.plan import EXIT_PROBLEMS, Plan, Problem, gib

TEMPLATE_NOT_CHECKED = ("auto", "raw", "none", "completion")  # --template-name values naming no template to check


def what_was_not_read(plan: Plan, bundle: Any = None) -> str:
    """The line ``--check`` ends with: which pieces' contents it did not read (the weights' tensor data, the
    N-gram store's counts: found, sized and their headers checked only) and which it verified whole, the files of
    a bundle whose ``bundle.json`` records their sha256 (``open_bundle`` checked them). What was not read is never
    called sound: a NaN-filled drafter or a damaged store passes this check and is refused when the app loads."""
    root = Path(bundle.root).resolve() if bundle is not None else None
    digested = root is not None and (root / "bundle.json").is_file() and '"files"' in (
        root / "bundle.json").read_text(encoding="utf-8")
    verified, unread = [], []
    for p in plan.pieces:
        path = Path(p.ref).resolve() if p.repo is None and Path(p.ref).exists() else None
        inside = digested and path is not None and root is not None and path.is_relative_to(root)
        (verified if inside else unread).append(p.role)
    parts = []
    if unread:
        weights = [r for r in unread if r != "N-gram store"]
        what = [*(["tensor data"] if weights else []), *(["N-gram counts"] if len(weights) < len(unread) else [])]
        parts.append(f"Not read: the contents of the {', '.join(unread)} ({' and '.join(what)}; the app checks "
                     "them as it loads them, refusing NaN/Inf weights and a damaged store).")
    if verified:
        parts.append(f"Verified whole (sha256 recorded in the bundle's bundle.json): the {', '.join(verified)}.")
    return textwrap.fill(" ".join(parts), 118, break_on_hyphens=False)


def run_app_check(args: argparse.Namespace, src: Mapping[str, Any]) -> int | None:
    """The app's launch gate (``python -m dart_arena``): check the plan of ``args`` / ``src`` (``resolve``'s result);
    with ``--download`` fetch it; with ``--check`` print it. Returns the exit code to stop with (0: ``--check``
    and no problem found; 2: problems, printed on stderr), or None to go on and load."""
    check, fetch = bool(getattr(args, "check", False)), bool(getattr(args, "download", False))
    host = "0.0.0.0" if getattr(args, "listen", False) else "127.0.0.1"
    template = str(getattr(args, "template_name", "auto")).lower()
    log = logging.getLogger("dart_arena.app")
    try:
        plan = plan_launch(base=str(src["base"]), drafters=src["drafters"], ngram=src.get("ngram"),
                           small_ngram=bool(args.use_small_ngram), device=args.device, dtype=args.dtype,
                           max_length=args.max_length, host=host, port=args.server_port,
                           chat_template=None if template in TEMPLATE_NOT_CHECKED else args.template_name,
                           model_free=src.get("model_free"), runners=src.get("runners", ()))
    except Exception as e:  # a flaw of the check itself must not block a launch that would work
        log.debug("the launch check failed", exc_info=True)
        text = f"the launch check itself failed ({type(e).__name__}: {str(e)[:300]})"
        if check:
            print(f"error: {text}; --debug shows the traceback", file=sys.stderr, flush=True)
            return EXIT_PROBLEMS
        log.warning("%s; loading without it", text)
        return None
    try:
        plan.fast_path = describe_fast_path(args.fast_path, args.fast_path_mode,
                                            plan.device if plan.device_map is None else "auto")
    except ValueError as e:
        plan.problems.append(Problem(str(e), ["give --fast-path at least 2 rows, or --no-fast-path"]))
    if fetch and plan.offline:
        if plan.problems or any(p.missing for p in plan.pieces):
            plan.problems.insert(0, Problem(
                "--download needs the Hugging Face Hub, but HF_HUB_OFFLINE is set, so nothing can be fetched.",
                ["unset HF_HUB_OFFLINE   (on a machine that reaches huggingface.co), then --download again"]))
        else:
            plan.notes.append("--download: HF_HUB_OFFLINE is set, and every planned file is in the cache already")
    if check:  # the plan with its problems; without --check, only the problems
        print(plan.render(), flush=True)
    if not plan.ok:
        print(plan.render_problems(), file=sys.stderr, flush=True)
        return EXIT_PROBLEMS
    if fetch and plan.downloads() and not plan.offline:
        try:
            download(plan)
        except Exception as e:  # the network failing mid-way: say which, resumable
            print(f"error: --download failed ({type(e).__name__}: {str(e)[:300]}); run it again to resume",
                  file=sys.stderr, flush=True)
            return EXIT_PROBLEMS
        print("[dart-arena] every planned file is in the cache", file=sys.stderr, flush=True)
    if check:
        print(what_was_not_read(plan, src.get("bundle")), flush=True)
        print("No problem found in what was checked: run the same command without --check to serve.", flush=True)
        return 0
    m = plan.memory
    fits = f"; ≈ {gib(m.need)} of {gib(m.free)} free on {m.where}" if m and m.need and m.free else ""
    log.info("launch check passed in %.2f s (%d parts found, %s on %s%s); loading", plan.seconds, len(plan.pieces),
             plan.dtype, plan.device, fits)
    return None
