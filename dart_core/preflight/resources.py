"""The machine a launch runs on: the device (CUDA there, the index in range), the memory the plan needs against
what the device has free (target + drafters + every lane's KV cache + overhead), the disk the downloads need, and
the server port."""

from __future__ import annotations

import errno
import os
import re
import shutil
import socket

from dart_core.engine.cpu import available_ram
from dart_core.engine.hf_config import text_config
from dart_core.preflight.plan import GiB, Memory, Plan, Problem, gb, gib, hub_cache
from dart_core.preflight.published import smaller_qwen3

OVERHEAD = {"cuda": 1 * GiB, "cpu": 512 << 20}  # CUDA context + allocator slack / Python, PyTorch, the server


# ---------------------------------------------------------------------------------------------- device, memory
def resolve_device(device: str | None, plan: Plan) -> tuple[str, str | None]:
    """(device to report, device map) for ``--device``; problems for CUDA that is not there or an index out of
    range. ``None``: cuda if available, else cpu (as the loader decides)."""
    import torch

    asked = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if asked == "cpu":
        return "cpu", None
    m = re.fullmatch(r"cuda(?::(\d+))?|auto", asked)
    if m is None:
        try:
            torch.device(asked)
        except (RuntimeError, ValueError):
            plan.problems.append(Problem(f"--device {asked} is not a device.",
                                         ["--device cuda (or cuda:N, auto to spread over GPUs, cpu)"]))
            return asked, None
        return asked, None  # another backend (mps, xpu): left to PyTorch
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if n == 0:
        if torch.version.cuda is None:
            why = f"this PyTorch ({torch.__version__}) is a CPU-only build"
            fixes = ["--device cpu   (slow for a large target)",
                     "install a CUDA build of PyTorch (https://pytorch.org/get-started/locally/)"]
        else:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            why = (f"PyTorch (CUDA {torch.version.cuda}) sees no GPU"
                   + (f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""))
            fixes = ["nvidia-smi   (is the driver up and a GPU visible?)", "--device cpu   (slow for a large target)"]
        plan.problems.append(Problem(f"--device {asked} asks for CUDA, but {why}.", fixes))
        return asked, ("auto" if asked == "auto" else None)
    if asked == "auto":
        return f"auto over {n} GPU{'s' if n != 1 else ''} (cuda:0..{n - 1})", "auto"
    index = int(m.group(1) or torch.cuda.current_device())
    if index >= n:
        plan.problems.append(Problem(
            f"--device {asked}: there {'is' if n == 1 else 'are'} only {n} GPU{'s' if n != 1 else ''} here "
            f"(cuda:0{f'..cuda:{n - 1}' if n > 1 else ''}).",
            ["--device cuda:0"] + (["--device auto   (spread the target over all GPUs)"] if n > 1 else [])))
        return asked, None
    return f"cuda:{index}", None


def free_memory(device: str, device_map: str | None) -> tuple[int | None, str]:
    """(free bytes, what they are) of the device the plan runs on: CUDA's free memory (summed over the GPUs of a
    device map), else the CPU's available RAM (psutil, or /proc/meminfo)."""
    if device.startswith(("cuda", "auto")):
        import torch

        if not torch.cuda.is_available():
            return None, device
        if device_map == "auto":
            n = torch.cuda.device_count()
            return sum(torch.cuda.mem_get_info(i)[0] for i in range(n)), f"{n} GPU{'s' if n != 1 else ''}"
        index = int(device.partition(":")[2] or 0)
        return torch.cuda.mem_get_info(index)[0], f"cuda:{index} ({torch.cuda.get_device_name(index)})"
    if device != "cpu":
        return None, device
    return available_ram(), "CPU RAM"


def estimate_memory(plan: Plan, max_length: int | None, dtype_bytes: int) -> Memory:
    """Target + drafters + the KV cache of every lane (each racer's column keeps its own) at the maximum length
    + a fixed overhead, against what the device has free."""
    target = plan.piece("target")
    drafters = [p for p in plan.pieces if p.key not in ("target", "ngram")]
    lanes = 1 + len(drafters)
    kv = tokens = None
    if target is not None and target.config is not None:
        tc = text_config(target.config)
        try:
            context = int(tc.get("max_position_embeddings") or 0) or None
            tokens = min(max_length, context) if max_length and context else (max_length or context)
            heads = int(tc["num_attention_heads"])
            kv_heads = int(tc.get("num_key_value_heads") or heads)
            hd = int(tc.get("head_dim") or int(tc["hidden_size"]) // heads)
            per_token = 2 * int(tc["num_hidden_layers"]) * kv_heads * hd * dtype_bytes * lanes
            for d in drafters:  # each drafter's own one-layer cache, in its lane
                dc = d.config or {}
                dh = int(dc.get("num_attention_heads") or 1)
                per_token += 2 * int(dc.get("num_key_value_heads") or dh) * int(
                    dc.get("head_dim") or int(dc.get("hidden_size") or 0) // dh) * dtype_bytes
            kv = per_token * tokens if tokens else None
        except (KeyError, TypeError, ValueError, ZeroDivisionError):
            kv = None
    kind = "cuda" if plan.device.startswith(("cuda", "auto")) else "cpu"
    weights = target.memory if target is not None else None
    overhead = OVERHEAD[kind] + (weights or 0) // 20
    free, where = free_memory(plan.device, plan.device_map)
    return Memory(target=weights, drafters=sum(d.memory or 0 for d in drafters), kv=kv, overhead=overhead,
                  tokens=tokens, lanes=lanes, free=free, where=where)


def memory_problem(m: Memory, plan: Plan) -> Problem | None:
    """Too little memory for the plan, with what would make it fit: a shorter --max-length, another device or
    dtype, fewer columns, a smaller model."""
    if m.need is None or m.free is None or m.need <= m.free:
        return None
    assert m.target is not None and m.kv is not None
    fixes = []
    fixed = m.target + m.drafters + m.overhead
    if fixed < m.free and m.tokens:
        per_token = m.kv / m.tokens
        fit = int((m.free - fixed) / per_token) // 256 * 256
        if fit >= 256:
            fixes.append(f"--max-length {fit}   (the KV cache of {m.lanes} lanes for at most {fit} tokens fits)")
    if plan.device.startswith("cuda"):
        import torch

        if torch.cuda.device_count() > 1:
            fixes.append("--device auto   (spread the target over all GPUs)")
    if plan.device == "cpu" and plan.dtype == "float32":
        fixes.append("--dtype bfloat16   (half the memory; slower on many CPUs)")
    from dart_core.racers.registry import checkpoint_racers

    optional = next((r for r in checkpoint_racers() if r.opt_in and plan.piece(r.key) is not None), None)
    if m.lanes > 2 and optional is not None:  # the first column the app adds only when asked
        fixes.append(f"--no-compare-{optional.key}   (one drafter and one KV cache less)")
    target = plan.piece("target")
    smaller = smaller_qwen3(target.ref if target else "")
    if smaller:
        fixes.append(f"a smaller model: bash launch/qwen3_{smaller.lower().replace('.', 'd')}_app.sh")
    else:
        fixes.append("a smaller target (--base-model-name-or-path) with its drafters")
    return Problem(f"Not enough memory: the plan needs about {gib(m.need)} on {m.where} (target {gib(m.target)}, "
                   f"drafters {gib(m.drafters)}, KV cache {gib(m.kv)} for {m.tokens} tokens × {m.lanes} lanes, "
                   f"{gib(m.overhead)} overhead) but only {gib(m.free)} is free.", fixes)


def disk_problem(plan: Plan) -> Problem | None:
    """Files still to fetch that the HF cache's disk cannot hold."""
    need = plan.to_fetch()
    if not need:
        return None
    where = hub_cache()
    probe = where
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if need <= free:
        return None
    return Problem(f"The plan still has {gb(need)} to download into {where}, but that disk has {gb(free)} free.",
                   ["free some space, or point the cache at a larger disk: export HF_HUB_CACHE=/bigger/disk/hub"])


def port_problem(host: str, port: int) -> Problem | None:
    """A port the server could not bind (in use, or privileged), found before anything loads."""
    if not port:
        return None
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a closed server's TIME_WAIT is no obstacle
        try:
            s.bind((host, port))
            return None
        except OSError as e:
            err = e
    if err.errno == errno.EADDRINUSE:
        free = next((p for p in range(port + 1, port + 50) if port_problem(host, p) is None), None)
        return Problem(f"Port {port} on {host} is already in use (another server, or this app running already).",
                       [f"--server-port {free if free else port + 1}",
                        f"or stop what holds it: ss -ltnp 'sport = :{port}'"])
    if err.errno == errno.EACCES:
        return Problem(f"Port {port} needs administrator rights here.", ["--server-port 7860"])
    return Problem(f"Cannot serve on {host}:{port}: {err.strerror or err}.", ["--server-port 7860"])


