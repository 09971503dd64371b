"""One prepared GPU check (``bash scripts/gpu_check.sh``): every figure and fault a lent GPU should show, at once.

A GPU is at hand only now and then, for minutes, so everything it must show runs here in one go: the per-step split
at real Qwen3 shapes (``bench gpu``) eagerly and on the fast path (CUDA graphs of the target's and the drafters'
forwards, against ``torch.compile`` for the plain step), a profile of one fast-path DART step (kernels, launches,
host syncs), the concurrency sweep (B = 1 … 16 streams on the fast path: each racer's step and its break-even τ per
B), the default bundle raced on the device in bfloat16 and float32 through ``bench e2e`` (the greedy check
counting rounding ties apart), and the tests that matter on CUDA (``DART_TEST_DEVICE=cuda``). Each step that fails
is reported and the others still run; the steps stop starting once ``--budget`` seconds are spent. It writes
``gpu_check.json`` and the same as a markdown report into ``--out``, and prints progress.

``--quick`` (a rerun after a fix) keeps the fast-path rows, the profile, the concurrency sweep and the bfloat16
race; ``--smoke --device cpu`` runs the same code paths at tiny shapes on a CPU in well under a minute (CI).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dart_core.options import add_device_argument

REPORT = "gpu_check"  # the report's file name: .json and .md
CUDA_TESTS = ("tests/test_fast_path_drafters.py", "tests/test_fast_path.py", "tests/test_gpu_attention.py")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_device_argument(p, help="cuda (default when there is one) or cpu (with --smoke)")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true",
                      help="the rerun subset: fast-path rows, profile, concurrency sweep, bf16 race")
    size.add_argument("--smoke", action="store_true", help="tiny shapes, the toy bundle, two prompts (a CPU's CI)")
    p.add_argument("--out", type=Path, default=Path("gpu-check"), help="where the report goes (json and markdown)")
    p.add_argument("--bundle", type=Path, default=None,
                   help="the bundle to race (default: the default bundle; --smoke: assets/tiny)")
    p.add_argument("--budget", type=float, default=330.0,
                   help="seconds after which no further step starts (default 330: the check within 6 minutes)")
    p.add_argument("--build-seconds", type=float, default=None, help="the build's time, for the record")
    p.add_argument("--skip", default="", help="comma-separated step names to leave out")
    p.add_argument("--only", default="", help="comma-separated step names to run, the others left out")


class Check:
    """The steps run so far, each with its status, seconds, figures or error; written after every step."""

    def __init__(self, args: argparse.Namespace, device: str) -> None:
        self.args, self.device = args, device
        self.t0 = time.perf_counter()
        self.steps: list[dict[str, Any]] = []
        self.env: dict[str, Any] = {}

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def step(self, name: str, fn: Callable[[], Any]) -> None:
        skip = {s.strip() for s in self.args.skip.split(",") if s.strip()}
        only = {s.strip() for s in self.args.only.split(",") if s.strip()}
        if name in skip or (only and name not in only):
            self.steps.append({"name": name, "status": "skipped", "why": "--skip" if name in skip else "--only"})
            return
        if self.elapsed() > self.args.budget:
            self.steps.append({"name": name, "status": "skipped", "why": f"budget of {self.args.budget:.0f} s spent"})
            print(f"[gpu-check] {name}: skipped (budget spent)", flush=True)
            return
        print(f"[gpu-check] {name} (at {self.elapsed():.0f} s)", flush=True)
        t = time.perf_counter()
        try:
            result = fn()
            entry = {"name": name, "status": "ok", "seconds": round(time.perf_counter() - t, 2), "result": result}
        except Exception as e:  # one fault must not cost the rest of the window
            entry = {"name": name, "status": "failed", "seconds": round(time.perf_counter() - t, 2),
                     "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(limit=-12)}
            print(f"[gpu-check] {name} FAILED: {entry['error']}\n{entry['traceback']}", flush=True)
        finally:
            release(self.device)
        self.steps.append(entry)
        print(f"[gpu-check] {name}: {entry['status']} in {entry['seconds']} s", flush=True)
        self.write()

    def write(self) -> None:
        out = self.args.out
        out.mkdir(parents=True, exist_ok=True)
        record = {"device": self.env.get("device_name", self.device), "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                  "mode": "smoke" if self.args.smoke else "quick" if self.args.quick else "full",
                  "seconds": round(self.elapsed(), 1), "environment": self.env, "steps": self.steps}
        (out / f"{REPORT}.json").write_text(json.dumps(record, indent=1, default=str))
        (out / f"{REPORT}.md").write_text(markdown(record))


# ------------------------------------------------------------------------------------------------ steps
def release(device: str) -> None:
    """Give a step's memory back before the next (each builds its own models)."""
    import gc

    import torch

    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def environment(device: str, build_seconds: float | None) -> dict[str, Any]:
    import torch
    import transformers

    from dart_core.bench.gpu import device_name

    env = {"device_name": device_name(torch.device(device)), "torch": torch.__version__,
           "transformers": transformers.__version__, "python": platform.python_version(),
           "cuda": torch.version.cuda, "build_seconds": build_seconds}
    from dart_core import _native

    env["native_cpu_attention"] = hasattr(_native, "decode_attention")
    return env


def bench_rows(device: str, shape: str, fast: str | None, smoke: bool, **over: Any) -> dict[str, Any]:
    """``bench gpu`` on one shape, eagerly (``fast`` None) or on the fast path in that mode; its table and JSON."""
    import torch

    from dart_core.arena import resolve_dtype
    from dart_core.bench import gpu

    p = argparse.ArgumentParser()
    gpu.add_arguments(p)
    args = p.parse_args(["--shapes", shape, "--device", device])
    args.repeats, args.warmup = (3, 2) if smoke else (10, 3)
    args.tree_sizes, args.depths = ([8, 16], [3]) if smoke else ([16, 32, 60], [4, 6, 8])
    args.hf_tokens = 8 if smoke else 16
    args.fast_path, args.fast_path_mode = fast is not None, fast or "graphs"
    for k, v in over.items():
        setattr(args, k, v)
    dev = torch.device(device)
    dtype = resolve_dtype("auto", dev)
    bandwidth = gpu.peak_bandwidth(gpu.device_name(dev)) if dev.type == "cuda" else None
    t = time.perf_counter()
    fig = gpu.bench_shape(shape, gpu.SHAPES[shape], args, dev, dtype, bandwidth)
    fig["wall_s"] = round(time.perf_counter() - t, 2)
    print(gpu.format_table(fig["rows"]), flush=True)
    return fig


def compile_startup(device: str, shape: str) -> dict[str, Any]:
    """The plain step through ``torch.compile(mode="reduce-overhead")`` against captured graphs: the time to the
    first fast step (the warm-up steps, compiling or capturing included) and the step after."""
    import torch

    from dart_core.arena import resolve_dtype
    from dart_core.bench import gpu
    from dart_core.engine.target import TargetModel

    dev = torch.device(device)
    dtype = resolve_dtype("auto", dev)
    model = gpu.build_target(gpu.SHAPES[shape], dev, dtype)
    prefix = list(range(1, 129))
    out = {}
    for mode in ("graphs", "compile"):
        target = TargetModel(model)
        target.use_static_cache(512, compile=mode == "compile", graphs=mode == "graphs")
        t = time.perf_counter()
        row = gpu.measure_ar(target, prefix, warmup=3, repeats=10)
        out[mode] = {"ready_s": round(row["warmup_s"], 2), "step_ms": round(row["verify_ms"], 3),
                     "wall_s": round(time.perf_counter() - t, 2)}
        print(f"  {mode}: ready after {row['warmup_s']:.2f} s, a plain step {row['verify_ms']:.3f} ms", flush=True)
        del target
    return out


def graph_target(device: str, shape: str, rows: int) -> tuple[Any, Any, Any, Any]:
    """A random target at ``shape`` on the graph path with a static cache of ``rows``: (device, shape, model,
    TargetModel)."""
    import torch

    from dart_core.arena import resolve_dtype
    from dart_core.bench import gpu
    from dart_core.engine.target import TargetModel

    dev = torch.device(device)
    sh = gpu.SHAPES[shape]
    model = gpu.build_target(sh, dev, resolve_dtype("auto", dev))
    target = TargetModel(model)
    target.use_static_cache(rows, graphs=True)
    return dev, sh, model, target


def profile_dart_step(device: str, shape: str) -> dict[str, Any]:
    """One fast-path DART step (draft, search, verify, commit) under ``torch.profiler``: CUDA kernels, launches
    (graph replays apart), host syncs, and the host operations that take the most time."""
    import numpy as np
    import torch
    from torch.profiler import ProfilerActivity, profile

    from dart_core.bench import gpu
    from dart_core.drafters.dart import DartSettings
    from dart_core.drafters.settings import settings_for
    from dart_core.engine.drafter import DraftInput

    dev, sh, model, target = graph_target(device, shape, 1024)
    drafter = gpu.build_drafter("dart", sh, model)
    drafter.use_static_cache(1024, graphs=True)
    prefix = np.random.default_rng(0).integers(0, sh.vocab, 256).tolist()
    drafter.store = gpu.ngram_store(prefix, sh.vocab)
    settings = settings_for(DartSettings, dev)
    dstate, state = drafter.new_state(settings), target.new_state()
    logits, feats = target.prefill(state, [prefix], layers=drafter.feature_layers)
    context = [*prefix, int(torch.argmax(logits))]
    new_ids = [*prefix[1:], context[-1]]

    def one_step() -> None:
        nonlocal feats, new_ids
        proposal = drafter.propose(dstate, DraftInput(feats, torch.tensor(new_ids), np.asarray(context, np.int32)))
        lg, tf = target.verify(state, proposal.tree, drafter.feature_layers)
        target.commit(state, [0])
        feats = tf[:1]
        x = int(torch.argmax(lg[0]))
        context.append(x)
        new_ids = [x]

    for _ in range(4):  # captures every graph the step uses
        one_step()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    with profile(activities=activities) as prof:
        one_step()
    events = prof.events()
    names = [e.name for e in events]
    kernels = sum(1 for e in events if str(getattr(e, "device_type", "")).endswith("CUDA"))
    count = {k: sum(1 for n in names if n == k) for k in (
        "cudaLaunchKernel", "cudaGraphLaunch", "cudaStreamSynchronize", "cudaDeviceSynchronize",
        "cudaMemcpyAsync", "cudaEventSynchronize", "aten::item", "aten::_local_scalar_dense")}
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12)
    print(table, flush=True)
    return {"device_kernels": kernels, "calls": count, "graphs_target": target.graphs_captured,
            "graphs_drafter": drafter.graphs_captured, "top_host_ops": table}


SWEEP_STREAMS = (1, 2, 4, 8, 16)  # the concurrency sweep's stream counts (the smoke check: the first three)


def concurrency_sweep(device: str, shape: str, smoke: bool) -> dict[str, Any]:
    """Each racer's step on the fast path for B streams at once (``bench gpu``'s rows, one verify of B trees): per
    B, the plain step of B rows, DART's and EAGLE-3's draft and verify ms, and the break-even τ (the tokens a
    stream must accept per step to match plain decoding at that B: where speculation stops paying)."""
    import numpy as np

    from dart_core.bench import gpu
    from dart_core.drafters.dart import DartSettings
    from dart_core.drafters.eagle3 import Eagle3Settings
    from dart_core.drafters.settings import settings_for

    dev, sh, model, target = graph_target(device, shape, 512)
    prefix = np.random.default_rng(0).integers(0, sh.vocab, 256 if not smoke else 32).tolist()
    racers = {"dart": (gpu.build_drafter("dart", sh, model), settings_for(DartSettings, dev)),
              "eagle3": (gpu.build_drafter("eagle3", sh, model), settings_for(Eagle3Settings, dev))}
    racers["dart"][0].store = gpu.ngram_store(prefix, sh.vocab)
    for drafter, _ in racers.values():
        drafter.use_static_cache(512, graphs=True)
    warmup, repeats = (2, 3) if smoke else (3, 10)
    by_streams: dict[str, list[dict[str, Any]]] = {}
    for b in SWEEP_STREAMS[:3] if smoke else SWEEP_STREAMS:
        rows = [gpu.measure_ar(target, prefix, warmup, repeats, streams=b)]
        for key, (drafter, settings) in racers.items():
            fig = gpu.measure_drafter(target, drafter, settings, prefix, warmup, repeats, streams=b)
            rows.append({"method": key, "label": "DART" if key == "dart" else "EAGLE-3", **fig})
        gpu.finish_rows(rows, None)
        by_streams[str(b)] = rows
        print(f"  B={b}: " + ", ".join(f"{r['label']} {r['total_ms']:.2f} ms"
                                       + (f" (break-even τ {r['break_even_tau']:.2f})" if r["break_even_tau"] else "")
                                       for r in rows), flush=True)
    return {"sweep": shape, "by_streams": by_streams, "graphs": target.graphs_captured,
            "capture_s": round(target.capture_seconds, 2), "capture_failures": target.capture_failures[:5]}


def race(device: str, dtype: str, bundle: Path | None, smoke: bool, out: Path) -> dict[str, Any]:
    """The bundle raced on the device through ``bench e2e`` (every loaded racer, the fast path as its default,
    the greedy check counting ties apart): its summary, mismatches and ties. HF ``generate`` is left out: eager, it
    took most of the check's time on a GPU (measured: docs/benchmarks.md#measurements-behind-design-choices);
    ``bench gpu`` times its step."""
    from dart_core.bench import e2e

    argv = ["--device", device, "--dtype", dtype, "--limit", "2" if smoke else "16",
            "--max-new-tokens", "16" if smoke else "128", "--no-html", "--no-progress", "--no-hf-generate",
            "--out", str(out)]
    argv += ["--bundle", str(bundle)] if bundle is not None else []
    code = e2e.main(argv)
    report = json.loads((out / "e2e.json").read_text())
    summary = {m: {k: s.get(k) for k in ("tau", "speedup_vs_ar", "tokens_per_s_wall", "tokens_per_s")}
               for m, s in report["summary"].items()}
    return {"exit_code": code, "summary": summary, "mismatches": report["mismatches"], "ties": report["ties"],
            "fast_path": report["environment"].get("fast_path")}


def cuda_tests(device: str) -> dict[str, Any]:
    """The CUDA-relevant tests with their models on the device (``DART_TEST_DEVICE``)."""
    env = {**os.environ, "DART_TEST_DEVICE": device}
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-n", "0", *CUDA_TESTS]
    try:
        import xdist  # noqa: F401
    except ImportError:
        cmd.remove("-n")
        cmd.remove("0")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    tail = (proc.stdout + proc.stderr)[-3000:]
    print(tail, flush=True)
    if proc.returncode:
        raise RuntimeError(f"pytest exited {proc.returncode}: {tail.strip().splitlines()[-1]}")
    return {"exit_code": proc.returncode, "tail": tail.strip().splitlines()[-1]}


# ------------------------------------------------------------------------------------------------ report
def markdown(record: dict[str, Any]) -> str:
    """The check as markdown: a header, one line per step, the per-step tables."""
    from dart_core.bench import gpu

    lines = [f"# GPU check on {record['device']} ({record['mode']}, {record['date']}, {record['seconds']} s)", ""]
    env = record["environment"]
    if env:
        lines += [", ".join(f"{k} {v}" for k, v in env.items() if k != "device_name"), ""]
    lines += ["| step | status | s | note |", "|---|---|---|---|"]
    for s in record["steps"]:
        note = s.get("error") or s.get("why") or ""
        lines.append(f"| {s['name']} | {s['status']} | {s.get('seconds', '')} | {note.replace('|', '/')} |")
    for s in record["steps"]:
        r = s.get("result")
        if s["status"] != "ok" or not isinstance(r, dict):
            continue
        if "rows" in r:
            fast = r.get("fast_path") or "eager"
            lines += ["", f"## {s['name']}: Qwen3 {r['shape']} shapes, {fast}, ready after {r['warmup_s']:.1f} s "
                          f"of warm-up steps ({r['graphs']} target graphs, {r['capture_s']:.2f} s capturing)", "",
                      "```", gpu.format_table(r["rows"]), "```"]
            if r.get("capture_failures"):
                lines += ["", f"capture failures: {r['capture_failures']}"]
        elif "summary" in r:
            lines += ["", f"## {s['name']}: mismatches {len(r['mismatches'] or [])}, ties {len(r['ties'] or [])}",
                      "", "| racer | τ | × AR (wall) | tok/s (wall) |", "|---|---|---|---|"]
            for m, f in r["summary"].items():
                lines.append(f"| {m} | {_num(f['tau'])} | {_num(f['speedup_vs_ar'])} | "
                             f"{_num(f['tokens_per_s_wall'], 1)} |")
        elif "sweep" in r:
            lines += ["", f"## {s['name']}: Qwen3 {r['sweep']} shapes, B streams on the fast path "
                          f"({r['graphs']} target graphs, {r['capture_s']:.2f} s capturing)", "",
                      "| B | racer | nodes | draft ms | verify ms | step ms | break-even τ |",
                      "|---|---|---|---|---|---|---|"]
            for b, rows in r["by_streams"].items():
                lines += [f"| {b} | {x['label']} | {x['nodes']} | {_num(x['draft_ms'])} | {_num(x['verify_ms'])} | "
                          f"{_num(x['total_ms'])} | {_num(x['break_even_tau'])} |" for x in rows]
        elif "calls" in r:
            lines += ["", f"## {s['name']}: {r['device_kernels']} device kernels, calls {r['calls']}", "", "```",
                      r["top_host_ops"], "```"]
        elif "graphs" in r and "compile" in r:
            lines += ["", f"## {s['name']}", "", "| mode | ready after s | plain step ms |", "|---|---|---|"]
            lines += [f"| {m} | {r[m]['ready_s']} | {r[m]['step_ms']} |" for m in ("graphs", "compile")]
    return "\n".join(lines) + "\n"


def _num(v: Any, digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


# ------------------------------------------------------------------------------------------------ main
def run(args: argparse.Namespace) -> int:
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else None)
    if device is None or (device.startswith("cuda") and not torch.cuda.is_available()):
        print("gpu-check: no CUDA device here (torch.cuda.is_available() is false); "
              "--device cpu --smoke runs the CPU smoke check")
        return 2
    if device == "cpu" and not args.smoke:
        print("gpu-check: on a CPU only the smoke check runs (--device cpu --smoke)")
        return 2
    check = Check(args, device)
    try:
        check.env = environment(device, args.build_seconds)
    except Exception as e:
        print(f"gpu-check: the environment could not be read: {type(e).__name__}: {e}")
        return 1
    print(f"[gpu-check] {check.env}", flush=True)
    out = args.out
    if args.smoke:
        bundle = args.bundle or Path(__file__).resolve().parents[2] / "assets" / "tiny"
        check.step("bench tiny eager", lambda: bench_rows(device, "tiny", None, True))
        check.step("bench tiny graphs", lambda: bench_rows(device, "tiny", "graphs", True))
        check.step("profile DART step tiny", lambda: profile_dart_step(device, "tiny"))
        check.step("concurrency tiny", lambda: concurrency_sweep(device, "tiny", True))
        check.step("race float32", lambda: race(device, "float32", bundle, True, out / "e2e-float32"))
    else:
        bundle = args.bundle
        # HF generate over its own static cache (compiled by transformers: about a minute) at one shape only
        check.step("bench 8b graphs", lambda: bench_rows(device, "8b", "graphs", False, hf_static=False))
        check.step("bench 1.7b graphs", lambda: bench_rows(device, "1.7b", "graphs", False, hf_static=not args.quick))
        check.step("profile DART step 8b", lambda: profile_dart_step(device, "8b"))
        check.step("concurrency 8b graphs", lambda: concurrency_sweep(device, "8b", False))
        check.step("race bfloat16", lambda: race(device, "bfloat16", bundle, False, out / "e2e-bfloat16"))
        if not args.quick:
            check.step("race float32", lambda: race(device, "float32", bundle, False, out / "e2e-float32"))
            check.step("cuda tests", lambda: cuda_tests(device))
            check.step("bench 8b eager", lambda: bench_rows(device, "8b", None, False))
            check.step("bench 1.7b eager", lambda: bench_rows(device, "1.7b", None, False))
            check.step("compile vs graphs 1.7b", lambda: compile_startup(device, "1.7b"))
    check.write()
    failed = [s["name"] for s in check.steps if s["status"] == "failed"]
    print(f"[gpu-check] done in {check.elapsed():.0f} s: {len(check.steps) - len(failed)} of {len(check.steps)} "
          f"steps ok or skipped{'; failed: ' + ', '.join(failed) if failed else ''}; {out / f'{REPORT}.md'}")
    return 1 if failed else 0
