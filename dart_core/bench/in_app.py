"""App vs benchmark: are the app's speed figures honest, i.e. does drawing the page slow the race?

Starts ``python -m dart_arena`` on the same models with ``--race-log`` (one JSON line per ended race), opens the page in
headless Chromium (Playwright on the system browser: /usr/bin/chromium or $DART_CHROMIUM; nothing is downloaded)
and races each prompt of the e2e benchmark's prompt set as a visitor would: type it, Send, wait for the end, Clear.
The page stays open and visible throughout, so the browser renders every live update and plot. One warm-up prompt
runs first and is not counted, as in the e2e benchmark. Then it stops the app, runs ``python -m dart_core.bench
e2e`` on the same prompts and settings, checks both saw the same prompts, and prints per method the in-app and the
plain benchmark's ms per verify step (draft + search + verify, prefill excluded), tokens/s on the method's own
clock (prefill included) and speedup vs AR, each with its ratio in-app / bench, and whether the per-step ms and
the speedup are within the 10 % target. ``--no-browser`` drives the same races through ``gradio_client`` with no
page open, to tell the page's cost from the server's. Writes ``bench-app.json``. Greedy decoding.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from dart_core.bench import e2e
from dart_core.bench.drive import (
    RaceLog,
    chromium_binary,
    drive_client,
    drive_page,
    free_port,
    log_tail,
    running_app,
    tree_values,
)
from dart_core.bench.e2e import BenchError, Sources
from dart_core.options import add_racer_settings_arguments, app_threads, knob_argv
from dart_core.race import method_width
from dart_core.racers.registry import BASELINE, checkpoint_racers, label

TARGET = 0.10  # the in-app figures must be within 10 % of the plain benchmark's
APP_COMMAND = (sys.executable, "-m", "dart_arena")
BENCH_COMMAND = (sys.executable, "-m", "dart_core.bench", "e2e")
MS_PER_STEP = ("draft_ms_per_step", "search_ms_per_step", "verify_ms_per_step")


class PromptMismatch(BenchError):
    """The app and the plain benchmark did not race the same prompt tokens: their figures are not comparable."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    e2e.add_model_arguments(p)
    g = p.add_argument_group("run")
    g.add_argument("--prompts", type=Path, default=None,
                   help="JSONL prompt file (fields: prompt, optional id); default: the bundle's prompts.jsonl")
    g.add_argument("--limit", type=int, default=8, help="use only the first N prompts (default 8; 0 = all)")
    g.add_argument("--max-new-tokens", type=int, default=128, help="new tokens per race (default 128)")
    e2e.add_mode_arguments(g)
    g.add_argument("--no-browser", action="store_true",
                   help="no page open: drive the app's /race endpoint through gradio_client (the server's cost "
                        "without the browser's)")
    g.add_argument("--port", type=int, default=0, help="the app's port (default: a free one)")
    g.add_argument("--timeout", type=float, default=900.0, help="seconds one race may take (default 900)")
    g.add_argument("--out", type=Path, default=None,
                   help="output dir for bench-app.json, the race log, the app's log and the e2e run "
                        "(default .bench/app-<timestamp>/)")
    g.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_racer_settings_arguments(p)


# ------------------------------------------------------------------------------------------------ figures
def _ms_per_step(m: dict[str, Any]) -> float:
    return sum(float(m[k] or 0.0) for k in MS_PER_STEP)


def _speedups(figures: dict[str, dict[str, Any]]) -> None:
    ar = figures.get(BASELINE, {}).get("tokens_per_s")
    for f in figures.values():
        f["speedup_vs_ar"] = f["tokens_per_s"] / ar if ar and f["tokens_per_s"] else None


def pool_races(races: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per method over all counted races, pooled as the e2e benchmark pools its steps: ms per verify step =
    (draft + search + verify ms of all verify steps) / verify steps; tokens/s = tokens / own clock (prefill
    included); speedup = tokens/s over AR's. A method that did not end normally ("done") in some race is an
    error: its figures would cover another amount of work than the benchmark's."""
    acc: dict[str, dict[str, Any]] = {}
    for i, race in enumerate(races):
        for m, r in race["result"]["methods"].items():
            if r.get("status") != "done":
                why = f": {r['error']}" if r.get("error") else ""
                raise BenchError(f"race {i + 1} ({race.get('prompt', '')[:40]!r}): {r.get('label', m)} ended "
                                 f"{r.get('status')!r} in the app{why}; only races that ran to their end compare")
            a = acc.setdefault(m, {"label": r.get("label") or label(m), "tokens": 0, "verify_steps": 0,
                                   "step_ms": 0.0, "own_ms": 0.0, "prefill_ms": 0.0})
            a["tokens"] += int(r["tokens"])
            a["verify_steps"] += int(r["verify_steps"])
            a["step_ms"] += _ms_per_step(r) * int(r["verify_steps"])
            a["own_ms"] += float(r["own_ms"])
            a["prefill_ms"] += float(r.get("prefill_ms") or 0.0)
    out = {m: {"label": a["label"], "tokens": a["tokens"], "verify_steps": a["verify_steps"],
               "ms_per_step": a["step_ms"] / a["verify_steps"] if a["verify_steps"] else 0.0,
               "tokens_per_s": a["tokens"] / (a["own_ms"] / 1e3) if a["own_ms"] > 0 else 0.0,
               "prefill_ms": a["prefill_ms"] / len(races)}
           for m, a in acc.items()}
    _speedups(out)
    return out


def bench_figures(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The same figures from the e2e benchmark's ``summary`` (engine stopwatches, like the app's clocks)."""
    out = {m: {"label": label(m), "tokens": s["tokens"], "verify_steps": s["verify_steps"],
               "ms_per_step": _ms_per_step(s), "tokens_per_s": s["tokens_per_s"],
               "prefill_ms": s.get("prefill_ms", 0.0) / max(len(report.get("prompts", [])), 1)}
           for m, s in report["summary"].items()}
    _speedups(out)
    return out


def check_same_work(races: Sequence[dict[str, Any]], report: dict[str, Any], prompts: Sequence[dict[str, str]],
                    max_new_tokens: int) -> list[str]:
    """Raise :class:`PromptMismatch` unless the app and the bench raced the same prompts (text in order, and
    per method the same number of prompt tokens: a different chat encoding shows here) with the same settings
    (greedy, token budget, tree sizes). Returns warnings: prompts where a method's output differs between them."""
    problems: list[str] = []
    bench = report["prompts"]
    if not len(races) == len(bench) == len(prompts):
        raise PromptMismatch(f"{len(prompts)} prompts sent, but the app logged {len(races)} races and the bench "
                             f"ran {len(bench)} prompts")
    settings = report["config"]["resolved"].get("racer_settings", {})
    for p, race, entry in zip(prompts, races, bench, strict=True):
        result = race["result"]
        if race.get("prompt") not in (p["prompt"], p["prompt"].strip()):
            problems.append(f"prompt {p['id']}: the app raced {race.get('prompt', '')[:60]!r}, expected "
                            f"{p['prompt'][:60]!r}")
            continue
        if str(entry["id"]) != str(p["id"]):
            problems.append(f"prompt {p['id']}: the bench's entry is prompt {entry['id']}")
        for m, r in result["methods"].items():
            if m in entry["methods"] and r["prompt_tokens"] != entry["prompt_tokens"]:
                problems.append(f"prompt {p['id']}: {r.get('label', m)} got {r['prompt_tokens']} prompt tokens in "
                                f"the app, {entry['prompt_tokens']} in the bench (the chat encodings differ)")
        s = result.get("settings") or {}
        if s.get("temperature", 0) != 0:
            problems.append(f"prompt {p['id']}: the app raced at temperature {s['temperature']}, not greedy")
        if s.get("max_new_tokens", max_new_tokens) != max_new_tokens:
            problems.append(f"prompt {p['id']}: the app raced {s['max_new_tokens']} new tokens, not {max_new_tokens}")
        for m, t in (s.get("racer_settings") or {}).items():
            if m in settings and t != settings[m]:
                problems.append(f"prompt {p['id']}: {label(m)} settings {t} in the app, {settings[m]} in the bench")
    if problems:
        raise PromptMismatch("the app and the plain benchmark did not race the same work:\n  " + "\n  ".join(problems))
    warnings = []
    for p, race, entry in zip(prompts, races, bench, strict=True):
        for m, r in race["result"]["methods"].items():
            if m in entry["methods"] and r.get("token_ids") is not None:
                ids = [t for s in entry["methods"][m]["steps"] for t in s["tokens"]]
                if list(r["token_ids"]) != ids:
                    warnings.append(f"prompt {p['id']}: {r.get('label', m)} generated other tokens in the app "
                                    f"({len(r['token_ids'])}) than in the bench ({len(ids)})")
    return warnings


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _within(ratio: float | None, target: float) -> bool | None:
    return None if ratio is None else round(abs(ratio - 1.0), 9) <= target


def compare(app: dict[str, dict[str, Any]], bench: dict[str, dict[str, Any]],
            target: float = TARGET) -> dict[str, dict[str, Any]]:
    """Per method in both: the in-app and the bench figures, their ratios in-app / bench, and the verdicts:
    per-step ms within ``target`` (a fraction) of the bench's, speedup vs AR within ``target`` of the bench's
    (None for AR itself, whose speedup is 1 by definition)."""
    rows = {}
    for m, a in app.items():
        if m not in bench:
            continue
        b = bench[m]
        row = {"label": a["label"]}
        for key in ("ms_per_step", "tokens_per_s", "speedup_vs_ar"):
            row[f"app_{key}"], row[f"bench_{key}"] = a[key], b[key]
            row[f"{key}_ratio"] = _ratio(a[key], b[key])
        row["ms_within"] = _within(row["ms_per_step_ratio"], target)
        row["speedup_within"] = None if m == BASELINE else _within(row["speedup_vs_ar_ratio"], target)
        row["within"] = row["ms_within"] is not False and row["speedup_within"] is not False
        rows[m] = row
    return rows


def _num(x: float | None, fmt: str, suffix: str = "") -> str:
    return "-" if x is None else f"{x:{fmt}}{suffix}"


def verdict_line(rows: dict[str, dict[str, Any]], target: float = TARGET) -> str:
    """Which methods are within the target, and by how much the others miss it."""
    parts = []
    for r in rows.values():
        if r["within"]:
            parts.append(f"{r['label']} yes")
            continue
        misses = [f"{what} {(ratio - 1) * 100:+.1f} %" for what, ratio, ok in (
            ("ms/step", r["ms_per_step_ratio"], r["ms_within"]),
            ("speedup", r["speedup_vs_ar_ratio"], r["speedup_within"])) if ok is False]
        parts.append(f"{r['label']} NO ({', '.join(misses)})")
    return f"within the {target * 100:g} % target (in-app ms/step and speedup vs the bench's): " + " · ".join(parts)


def print_table(rows: dict[str, dict[str, Any]], n: int, driver: str, target: float = TARGET) -> None:
    """One row per method: in-app, bench, ratio for ms per step, tokens/s and speedup vs AR; then the verdicts."""
    print(f"\n{n} prompts, greedy, in the app ({driver}) and in the plain benchmark (e2e)\n"
          "ms: draft + search + verify per verify step (prefill excluded); tok/s: tokens over the method's own "
          "step clock (prefill included); vs AR: tok/s over AR's; ratio: in-app / bench")
    w = method_width(r["label"] for r in rows.values())
    print(f"{'method':<{w}} {'app ms':>8} {'bench ms':>8} {'ratio':>6} {'app tok/s':>9} {'bench tok/s':>11} "
          f"{'ratio':>6} {'app vs AR':>9} {'bench vs AR':>11} {'ratio':>6}")
    for r in rows.values():
        print(f"{r['label']:<{w}} {r['app_ms_per_step']:>8.2f} {r['bench_ms_per_step']:>8.2f} "
              f"{_num(r['ms_per_step_ratio'], '.3f'):>6} {r['app_tokens_per_s']:>9.1f} "
              f"{r['bench_tokens_per_s']:>11.1f} {_num(r['tokens_per_s_ratio'], '.3f'):>6} "
              f"{_num(r['app_speedup_vs_ar'], '.2f', 'x'):>9} {_num(r['bench_speedup_vs_ar'], '.2f', 'x'):>11} "
              f"{_num(r['speedup_vs_ar_ratio'], '.3f'):>6}")
    print(verdict_line(rows, target))


def model_flags(args: argparse.Namespace) -> list[str]:
    """The model / mode flags as given, for the e2e subprocess (which resolves them as this run did)."""
    out: list[str] = []
    for flag, value in (("--bundle", args.bundle), ("--base", args.base), ("--ngram", args.ngram),
                        ("--device", args.device), ("--dtype", args.dtype), ("--threads", args.threads),
                        *((f"--{r.key}", getattr(args, r.dest)) for r in checkpoint_racers())):
        if value is not None:
            out += [flag, str(value)]
    out += ["--small-ngram"] if args.small_ngram else []
    out += [] if args.chat is None else ["--chat" if args.chat else "--raw"]
    out += fast_path_argv(args)
    out += ["--cpu-linear", args.cpu_linear]
    return out


def fast_path_argv(args: argparse.Namespace) -> list[str]:
    """The fast-path flags as given (``--no-fast-path`` for 0; nothing for the defaults)."""
    if args.fast_path is None:
        out = []
    else:
        out = ["--fast-path", str(args.fast_path)] if args.fast_path else ["--no-fast-path"]
    return out if args.fast_path_mode == "graphs" else [*out, "--fast-path-mode", args.fast_path_mode]


def tree_flags(args: argparse.Namespace) -> list[str]:
    return [x for r, k, v in tree_values(args) for x in knob_argv(r, k, v)]


def app_command(args: argparse.Namespace, src: Sources, port: int, race_log: Path) -> list[str]:
    """``python -m dart_arena`` on the models the e2e benchmark resolves from the same flags."""
    cmd = [*APP_COMMAND, "--server-port", str(port), "--max-new-tokens", str(args.max_new_tokens),
           "--race-log", str(race_log)]
    cmd += ["--bundle", str(src.bundle)] if args.base is None else ["--base-model-name-or-path", src.base]
    for r in checkpoint_racers():
        path = src.drafters.get(r.key)
        if r.opt_in:
            cmd.append(f"--compare-{r.key}" if path else f"--no-compare-{r.key}")
        cmd += [f"--{r.key}-model-name-or-path", path] if path else []
    cmd += ["--ngram-model-name-or-path", src.ngram] if src.ngram else []
    cmd += ["--use-small-ngram"] if src.small_ngram else []
    cmd += ["--device", args.device] if args.device else []
    cmd += ["--dtype", args.dtype]
    cmd += ["--threads", str(args.threads)] if args.threads is not None else []
    cmd += fast_path_argv(args)
    cmd += ["--cpu-linear", args.cpu_linear]
    cmd += [] if args.chat is None else ["--template-name", "chat" if args.chat else "raw"]
    cmd += [x for r, k, v in tree_values(args) if k.kind is bool for x in knob_argv(r, k, v)]  # the app's switches
    return cmd


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except PromptMismatch as e:
        print(f"\n{'!' * 100}\nPROMPT MISMATCH: {e}\nThe figures below would compare different work; none are "
              f"printed.\n{'!' * 100}", file=sys.stderr)
        return 1
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    binary = None
    if not args.no_browser:
        if importlib.util.find_spec("playwright") is None:
            raise BenchError("the page run needs the playwright package (pip install playwright; no browser "
                             "download: it drives /usr/bin/chromium or $DART_CHROMIUM); --no-browser runs without "
                             "a page")
        binary = chromium_binary()
        if binary is None:
            raise BenchError("no chromium binary: install the system package (apt-get install -y chromium) or set "
                             "$DART_CHROMIUM; --no-browser runs without a page")
    elif importlib.util.find_spec("gradio_client") is None:
        raise BenchError("--no-browser needs the gradio_client package (it comes with gradio)")
    src = e2e.resolve_sources(args)
    if args.threads is None and not torch.cuda.is_available() and args.device in (None, "cpu"):
        args.threads = app_threads(None, "cpu")  # the app's own default on a CPU, given to both runs
    prompts = e2e.read_prompts(src.prompts, args.limit)  # type: ignore[arg-type]
    for note in src.notes:
        print(f"note: {note}")
    out = args.out or Path(".bench") / f"app-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    log = RaceLog(out / "race-log.jsonl")
    log.path.unlink(missing_ok=True)
    port = args.port or free_port()
    driver = "no page, gradio_client" if args.no_browser else "headless Chromium, page open"

    # 1. the app, driven as a visitor would
    cmd = app_command(args, src, port, log.path)
    print(f"starting the app: {' '.join(cmd)}")
    with running_app(cmd, port, out / "app.log") as url:
        if args.no_browser:
            races, page = drive_client(url, prompts, log, args)
        else:
            races, page = drive_page(url, prompts, log, args, binary)  # type: ignore[arg-type]

    # 2. the plain benchmark on the same prompts and settings
    bench_out = out / "e2e"
    cmd = [*BENCH_COMMAND, *model_flags(args), "--prompts", str(src.prompts), "--limit", str(args.limit),
           "--max-new-tokens", str(args.max_new_tokens), "--warmup", "1", "--out", str(bench_out), "--no-html",
           "--no-hf-generate",  # the page races the arena's racers; HF generate's row is the e2e bench's own
           "--memory", "cold",  # one row per racer, as the page's lanes (a racer that remembers: its cold row)
           *tree_flags(args), *(["--no-progress"] if args.no_progress else [])]
    print(f"running the plain benchmark: {' '.join(cmd)}")
    with open(out / "e2e.log", "wb") as f:
        rc = subprocess.run(cmd, stdout=f, check=False).returncode
    if rc != 0:
        raise BenchError(f"the e2e benchmark exited with code {rc} ({out / 'e2e.log'}):\n{log_tail(out / 'e2e.log')}")
    report = json.loads((bench_out / "e2e.json").read_text(encoding="utf-8"))

    # 3. compare
    warnings = check_same_work(races, report, prompts, args.max_new_tokens)
    app_figs, bench_figs = pool_races(races), bench_figures(report)
    rows = compare(app_figs, bench_figs)
    one_side = [f"{label(m)} only in the {'app' if m in app_figs else 'bench'}" for m in (*app_figs, *bench_figs)
                if m not in rows]
    result = {
        "config": {**{k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                   "driver": driver, "prompts_file": str(src.prompts), "n_prompts": len(prompts), "target": TARGET},
        "environment": report.get("environment"),
        "notes": {"ms_per_step": "draft + search + verify ms per verify step, prefill excluded, pooled over the "
                                 "prompts (total ms / total verify steps)",
                  "tokens_per_s": "tokens over the method's own step clock (the sum of its step times, prefill "
                                  "included), as the e2e benchmark's engine figure",
                  "speedup_vs_ar": "tokens_per_s / AR's tokens_per_s",
                  "prefill_ms": "mean prefill ms per prompt (in tokens_per_s, not in ms_per_step)",
                  "ratio": "in-app / bench", "within": f"ms per step and speedup within {TARGET:.0%} of the bench's"},
        "page": page,
        "app": app_figs,
        "bench": bench_figs,
        "comparison": rows,
        "within_target": {m: r["within"] for m, r in rows.items()},
        "output_differences": warnings,
        "not_compared": one_side,
        "files": {"race_log": str(log.path), "e2e_json": str(bench_out / "e2e.json"), "app_log": str(out / "app.log")},
    }
    (out / "bench-app.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    print_table(rows, len(prompts), driver)
    if page.get("visible") is False:
        print(f"WARNING: the page was not visible during every race ({page['visibility']}): the browser may have "
              "skipped rendering")
    if page.get("page_errors"):
        print(f"WARNING: {len(page['page_errors'])} script error(s) on the page, e.g. {page['page_errors'][0]}")
    for w in [*one_side, *warnings]:
        print(f"WARNING: {w}")
    print(f"wrote {out / 'bench-app.json'}")
    return 0
