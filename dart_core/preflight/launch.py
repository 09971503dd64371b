"""The whole launch check: :func:`plan_launch` resolves and checks every piece, the device, the memory and the
port, and :func:`download` fetches exactly the planned files."""

from __future__ import annotations

import importlib.util
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from huggingface_hub import snapshot_download

from dart_core.engine.cpu import AUTO_DTYPE_HELP, auto_dtype_name
from dart_core.loading.hub import hub_offline
from dart_core.loading.layouts import DTYPE_BYTES, DTYPE_NAMES
from dart_core.preflight.checks import check_drafter, check_ngram, check_target
from dart_core.preflight.plan import Plan, Problem
from dart_core.preflight.resources import disk_problem, estimate_memory, memory_problem, port_problem, resolve_device


# ----------------------------------------------------------------------------------------------- the whole check
def plan_launch(
    *,
    base: str,
    drafters: Mapping[str, str | None],
    ngram: str | None = None,
    small_ngram: bool = False,
    device: str | None = None,
    dtype: str | None = "auto",
    max_length: int | None = None,
    host: str | None = None,
    port: int | None = None,
    chat_template: str | None = None,
    model_free: Mapping[str, bool | None] | None = None,
    runners: Iterable[str] = (),
) -> Plan:
    """Resolve and check every piece of a launch (the target, each drafter given, the N-gram store), the device,
    the memory and the port, reading file listings and metadata only. Problems are collected, never raised.
    ``model_free``: the model-free racers' switches (key → None: loaded where it can be, True: asked for, False:
    off; absent keys are None, as ``load_arena`` takes them); they have no piece to check, but one asked for that
    drafts from the N-gram store alone is a problem without a store. ``runners``: the racers with a loop of their
    own asked for; one whose engine needs an optional module that is not installed (llama.cpp) is a problem."""
    from dart_core.racers.registry import model_free_racers, racer

    t0 = time.perf_counter()
    plan = Plan(offline=hub_offline())
    shown, plan.device_map = resolve_device(device, plan)
    plan.device = shown
    cuda_like = shown.startswith(("cuda", "auto")) or plan.device_map == "auto"
    name = (dtype or "auto").lower().removeprefix("torch.")
    if name == "auto":
        cuda = cuda_like or (device or "").startswith(("cuda", "auto"))
        name = auto_dtype_name("cuda" if cuda else plan.device.split(":")[0])
    if name not in DTYPE_BYTES:
        plan.problems.append(Problem(f"--dtype {dtype} is not a dtype here.", [f"--dtype {AUTO_DTYPE_HELP}"]))
        name = "float32"
    plan.dtype = DTYPE_NAMES[name]
    dtype_bytes = DTYPE_BYTES[name]
    if plan.device == "cpu" and plan.dtype != "float32":
        if plan.dtype != auto_dtype_name("cpu"):  # not this CPU's default: bf16 emulated, or float16
            plan.device_note = (f"{plan.dtype} on this CPU is emulated, slower than float32 and inexact; float32 "
                                "is its default")
        else:  # the default here: say what it changes
            plan.device_note = ("bfloat16 (this CPU multiplies it natively; --dtype float32 for exact float32): "
                                "outputs may part from float32 decoding at near-ties of the target's logits")
    target = check_target(base, plan, dtype_bytes, chat_template=chat_template)
    for key, ref in drafters.items():
        if ref:
            r = racer(key)
            check_drafter(key, r.label, str(ref), plan, target, dtype_bytes, example=r.example)
    if ngram:
        check_ngram(str(ngram), small_ngram, plan)
    for r in model_free_racers():
        asked = (model_free or {}).get(r.key)
        if asked is True and r.needs_store and not ngram:
            plan.problems.append(Problem(
                f"{r.label} drafts from the N-gram store alone, and no N-gram store is given.",
                ["--ngram-model-name-or-path PATH   (a store file, or a dir / Hub repo with small.trie / full.trie)",
                 f"--no-compare-{r.key}   (race without it)"]))
        elif asked is not False and (ngram or not r.needs_store):
            picker = "" if r.ticked else " (unticked in the app's Racers picker)"
            plan.notes.append(f"{r.label}: model-free, nothing to load{picker}")
    for r in (racer(key) for key in runners):
        if r.needs_module and importlib.util.find_spec(r.needs_module) is None:
            plan.problems.append(Problem(f"{r.label} needs the Python module {r.needs_module}, which is not "
                                         "installed.", [r.install, f"--no-compare-{r.key}   (race without it)"]))
    plan.memory = estimate_memory(plan, max_length, dtype_bytes)  # even with other problems: all at once
    problem = memory_problem(plan.memory, plan)
    if problem is not None:
        plan.problems.append(problem)
    if not plan.offline:
        problem = disk_problem(plan)
        if problem is not None:
            plan.problems.append(problem)
    if host is not None and port is not None:
        problem = port_problem(host, port)
        plan.serving = f"http://{host}:{port}" + (" (port in use)" if problem else " (port free)")
        if problem is not None:
            plan.problems.append(problem)
    plan.seconds = time.perf_counter() - t0
    return plan


def download(plan: Plan) -> list[Path]:
    """Fetch exactly the planned files of every Hub piece (``snapshot_download`` with ``allow_patterns``: its
    progress bars; files already cached are skipped, interrupted ones resume). Returns the snapshot folders."""
    out = []
    for repo, files in plan.downloads():
        print(f"[dart-arena] fetching {repo}: {', '.join(files)}", file=sys.stderr, flush=True)
        out.append(Path(snapshot_download(repo, allow_patterns=files)))
    return out


