"""Per-step cost split at real Qwen3 shapes (random weights): AR, HF generate, DART and EAGLE-3 draft/search/verify.

Speculative decoding pays off when a verify of a whole tree costs about one AR step and drafting is cheap; this
benchmark measures that split at the published Qwen3 shapes without downloading anything: the target is built from
a ``Qwen3Config`` with random weights (values do not change the time of a forward, only the shapes do), the
drafters are random one-layer drafters in the published formats (draft vocabulary 32,000, DART draft length 8).

Rows, each the median over ``--repeats`` steps after ``--warmup`` steps, on one loaded target per shape:

* AR: the engine's plain decoding step as the loop runs it (``TargetModel.verify_rows`` of a one-node tree per stream,
  no hidden states, and ``commit_rows``);
* HF generate: ``model.generate`` of N tokens minus that of 1 token, over N-1 (the decode step, prefill excluded);
* DART n=…: ``DartDrafter.propose`` (draft + N-gram tree search, over a small random N-gram store) and
  ``TargetModel.verify_rows`` + commit of the root of the proposed tree;
* EAGLE-3 depth=…: ``Eagle3Drafter.propose`` (one drafter forward per level) and the same verify.

Break-even τ = (draft + search + verify ms) / AR ms: the tokens per step a drafter must average to match plain
decoding. The bandwidth floor is the weight bytes over the GPU's peak memory bandwidth (known for H100, H200 and
A100 80GB, else ``--bandwidth``): no decoding step can read every weight faster.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dart_core.engine.cpu import cpu_description
from dart_core.engine.target import cache_keyword
from dart_core.options import (
    add_device_argument,
    add_dtype_argument,
    add_fast_path_arguments,
    add_threads_argument,
    app_threads,
)


@dataclass(frozen=True)
class Shape:
    """A target's decoder shape (``Qwen3Config`` fields) and its drafters' draft vocabulary."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool
    draft_vocab: int
    max_positions: int = 40960


# The published shapes of Qwen/Qwen3-{1.7B,4B,8B} (their config.json), and a tiny one for tests and CPU smoke runs.
SHAPES: dict[str, Shape] = {
    "1.7b": Shape(2048, 28, 16, 8, 128, 6144, 151936, True, 32000),
    "4b": Shape(2560, 36, 32, 8, 128, 9728, 151936, True, 32000),
    "8b": Shape(4096, 36, 32, 8, 128, 12288, 151936, False, 32000),
    "tiny": Shape(64, 8, 4, 2, 16, 128, 512, False, 256, 4096),  # 8 layers: the default feature layers stay distinct
}
DART_DRAFT_LENGTH = 8

# Peak memory bandwidth (bytes/s) by substrings of ``torch.cuda.get_device_name()`` (lower case), first match wins.
KNOWN_BANDWIDTH: tuple[tuple[tuple[str, ...], float], ...] = (
    (("h100", "pcie"), 2.0e12),
    (("h100", "nvl"), 3.9e12),
    (("h200",), 4.8e12),
    (("h100",), 3.35e12),  # SXM (HBM3)
    (("a100", "80gb"), 2.0e12),
)

# ------------------------------------------------------------------------------------------------ arguments
def _csv(kind: Callable[[str], Any], choices: Sequence[str] | None = None) -> Callable[[str], list[Any]]:
    """An argparse type for comma-separated lists (argparse then reports a bad item with exit code 2)."""

    def parse(text: str) -> list[Any]:
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not items:
            raise argparse.ArgumentTypeError("expected a comma-separated list")
        out = []
        for t in items:
            if choices is not None and t not in choices:
                raise argparse.ArgumentTypeError(f"unknown value {t!r} (choose from {', '.join(choices)})")
            try:
                v = kind(t)
            except ValueError:
                raise argparse.ArgumentTypeError(f"not a valid value: {t!r}") from None
            if isinstance(v, int) and v < 1:
                raise argparse.ArgumentTypeError(f"{t} must be >= 1")
            out.append(v)
        return list(dict.fromkeys(out))

    return parse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--shapes", type=_csv(str, list(SHAPES)), default=["1.7b", "8b"],
                   help=f"target shapes, comma-separated, from {', '.join(SHAPES)} (default 1.7b,8b)")
    add_device_argument(p, help="cpu, cuda, cuda:N (default: cuda if available, else cpu)")
    add_dtype_argument(p, choices=("auto", "float32", "bfloat16", "float16"))
    p.add_argument("--prefix", type=int, default=256, help="committed tokens before the measured steps (256)")
    p.add_argument("--repeats", type=int, default=10, help="timed steps per row, after the warm-ups (10)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per row before the timed ones (2)")
    p.add_argument("--tree-sizes", type=_csv(int), default=[16, 32, 60],
                   help="DART tree sizes (nodes below the root), comma-separated (16,32,60)")
    p.add_argument("--depths", type=_csv(int), default=[4, 6, 8], help="EAGLE-3 depths, comma-separated (4,6,8)")
    p.add_argument("--hf-tokens", type=int, default=32, help="tokens of the long HF generate (32)")
    add_threads_argument(p, help="CPU threads for torch (default on a CPU: one per core but one, as the app's "
                                 "default)")
    p.add_argument("--bandwidth", type=float, default=None,
                   help="device memory bandwidth in GB/s for the floor (default: known peak of the GPU)")
    p.add_argument("--fast-path", action="store_true",
                   help="the fast path: static KV caches, every forward at static shapes (TargetModel and the "
                        "drafters' use_static_cache)")
    add_fast_path_arguments(p, rows=False)
    p.add_argument("--hf-static", action=argparse.BooleanOptionalAction, default=True,
                   help="with --fast-path, HF generate over a static cache of its own, as the racer runs there (on "
                        "a GPU transformers compiles it in the warm-up calls: about a minute; default on)")
    p.add_argument("--json", type=Path, default=None, help="also write every figure to this JSON file")


# ------------------------------------------------------------------------------------------------ building
def qwen3_config(shape: Shape) -> Any:
    """The ``Qwen3Config`` of a shape (sdpa attention, no end-of-text: nothing here ever stops early)."""
    from transformers import Qwen3Config

    return Qwen3Config(vocab_size=shape.vocab, hidden_size=shape.hidden, intermediate_size=shape.intermediate,
                       num_hidden_layers=shape.layers, num_attention_heads=shape.heads,
                       num_key_value_heads=shape.kv_heads, head_dim=shape.head_dim,
                       max_position_embeddings=shape.max_positions, rope_theta=1e6, rms_norm_eps=1e-6,
                       tie_word_embeddings=shape.tied, eos_token_id=None, bos_token_id=None, pad_token_id=0)


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of the model's parameters, each storage once: tied embeddings are read once per step, so they count once
    towards the bandwidth floor."""
    seen: set[tuple[Any, int]] = set()
    total = 0
    for p in model.parameters():
        key = (p.device, p.data_ptr()) if p.device.type != "meta" else (id(p), 0)
        if key in seen:
            continue
        seen.add(key)
        total += p.numel() * p.element_size()
    return total


def shape_weight_bytes(shape: Shape, dtype: torch.dtype) -> int:
    """Weight bytes of a shape without allocating it (built on the meta device), for the memory check."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(qwen3_config(shape), dtype=dtype)
    return weight_bytes(model)


def build_target(shape: Shape, device: torch.device, dtype: torch.dtype, seed: int = 0) -> Any:
    """A random target, allocated and initialized directly on ``device`` (normal, std ``initializer_range``)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(qwen3_config(shape), dtype=dtype, attn_implementation="sdpa")
    return model.eval().requires_grad_(False)


def drafter_config_dict(shape: Shape, kind: str) -> dict[str, Any]:
    """A drafter ``config.json`` in the published format (docs/formats.md) at the target's shape."""
    cfg: dict[str, Any] = {
        "architectures": ["LlamaForCausalLMDart" if kind == "dart" else "LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": shape.hidden,
        "intermediate_size": shape.intermediate,
        "num_attention_heads": shape.heads,
        "num_key_value_heads": shape.kv_heads,
        "head_dim": shape.head_dim,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1e6,
        "rope_scaling": None,
        "max_position_embeddings": shape.max_positions,
        "hidden_act": "silu",
        "num_hidden_layers": 1,
        "vocab_size": shape.vocab,
        "draft_vocab_size": shape.draft_vocab,
        "target_hidden_size": shape.hidden,
        "torch_dtype": "float16",
    }
    if kind == "dart":
        cfg["draft_length"] = DART_DRAFT_LENGTH
    return cfg


def build_drafter(kind: str, shape: Shape, model: Any, seed: int = 1) -> Any:
    """A random DART or EAGLE-3 drafter on the target's device and dtype, sharing its embedding, built in memory
    as ``from_pretrained`` builds one (same config parsing, modules and binding; random weights instead of a file)."""
    from dart_core.drafters.config import DrafterConfig
    from dart_core.drafters.dart import DartDrafter
    from dart_core.drafters.eagle3 import Eagle3Drafter

    cls = DartDrafter if kind == "dart" else Eagle3Drafter
    cfg = DrafterConfig.from_dict(drafter_config_dict(shape, kind), source=f"random {kind} drafter")
    embed = model.get_input_embeddings().weight
    std = float(getattr(model.config, "initializer_range", 0.02))
    torch.manual_seed(seed)
    with torch.device(embed.device):
        drafter = cls(cfg, embed)
        with torch.no_grad():
            for name, p in drafter.named_parameters():
                if name.endswith("norm.weight"):
                    p.fill_(1.0)
                else:
                    p.normal_(0.0, std)
            vd, v = cfg.draft_vocab_size, cfg.vocab_size
            drafter.d2t.copy_(torch.arange(vd) * max(v // vd, 1) - torch.arange(vd))  # every (V//V_d)-th target id
    drafter.bind(model.config)
    return drafter.to(dtype=embed.dtype).eval().requires_grad_(False)


def ngram_store(prefix: Sequence[int], vocab: int, tokens: int = 100_000, seed: int = 0) -> Any:
    """A small 3-gram store over random tokens (and the prefix), so DART's search pays for its N-gram lookups."""
    from dart_core.ngram.store import NgramStore

    corpus = np.random.default_rng(seed).integers(0, vocab, size=tokens).astype(np.int32)
    return NgramStore.build([np.asarray(prefix, dtype=np.int32), corpus], order=3)


# ------------------------------------------------------------------------------------------------ bandwidth
def peak_bandwidth(device_name: str) -> float | None:
    """Known peak memory bandwidth (bytes/s) of a GPU by name, or None."""
    name = device_name.lower()
    for parts, bw in KNOWN_BANDWIDTH:
        if all(s in name for s in parts):
            return bw
    return None


def device_name(device: torch.device) -> str:
    """What the header names: the GPU's name (which also picks its bandwidth), or the CPU model and torch threads."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    n = torch.get_num_threads()
    threads = f"{n} thread{'s' if n != 1 else ''}"
    cpu = cpu_description()
    return f"cpu ({cpu}, {threads})" if cpu else f"{device.type} ({threads})"


def machine_ram() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


# ------------------------------------------------------------------------------------------------ measuring
def _median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))


def stream_prefixes(prefix: Sequence[int], streams: int) -> list[list[int]]:
    """``streams`` prompts of ``prefix``'s length, each ``prefix`` rotated by its index (different tokens, one
    length: every row's cache ends in the same column, as in a batch of equal prompts)."""
    prefix = list(prefix)
    return [prefix[b % len(prefix):] + prefix[: b % len(prefix)] for b in range(streams)]


def measure_ar(target: Any, prefix: Sequence[int], warmup: int, repeats: int, streams: int = 1) -> dict[str, Any]:
    """Median ms of the engine's plain decoding step (one token per stream, no hidden states) after ``prefix``, for
    ``streams`` streams in one forward of that many rows."""
    from dart_core.engine.timing import Stopwatch
    from dart_core.engine.tree import DraftTree

    state = target.new_state(streams)
    logits, _ = target.prefill_rows(state, stream_prefixes(prefix, streams), layers=())
    if not bool(torch.isfinite(logits).all()):
        raise RuntimeError("the random target gives non-finite logits")
    toks = logits.argmax(-1).tolist()
    times = []
    for _ in range(warmup + repeats):
        with Stopwatch(target.device) as sw:
            out, _ = target.verify_rows(state, [DraftTree([t], [-1]) for t in toks], layers=())
            target.commit_rows(state, [[0]] * streams)
        times.append(sw.ms)
        toks = [int(torch.argmax(lg[0])) for lg in out]
    return {"method": "ar", "label": "AR", "nodes": 1, "streams": streams, "verify_ms": _median(times[warmup:]),
            "warmup_s": sum(times[:warmup]) / 1e3}


def measure_hf(model: Any, prefix: Sequence[int], n: int, warmup: int, repeats: int,
               static_rows: int | None = None) -> dict[str, Any]:
    """HF ``generate``'s decode step: (t(n tokens) - t(1 token)) / (n - 1), medians, same prefix (no prefill).
    ``static_rows``: each call over a ``StaticCache`` of that many rows, as the racer runs on the fast path (on a
    GPU transformers then compiles its decoding forward: the warm-up calls pay it, ``warmup_s`` says how long)."""
    from transformers.utils import logging as hf_logging

    from dart_core.engine.acceptance import SamplingConfig
    from dart_core.engine.timing import Stopwatch
    from dart_core.racers.hf_generate import generation_config

    device = model.get_input_embeddings().weight.device
    ids = torch.tensor([list(prefix)], device=device)
    mask = torch.ones_like(ids)
    # greedy, the sampling knobs neutral, no stop id: exactly k tokens (the config the hf racer runs)
    configs = {k: generation_config(model, SamplingConfig(), k, []) for k in (n, 1)}

    def once(k: int) -> float:
        extra = {}
        if static_rows:
            from transformers import StaticCache

            extra[cache_keyword(model)] = StaticCache(config=model.config, max_cache_len=static_rows)
        with Stopwatch(device) as sw, torch.no_grad():
            out = model.generate(ids, attention_mask=mask, generation_config=configs[k], **extra)
        if out.shape[1] != ids.shape[1] + k:
            raise RuntimeError(f"HF generate made {out.shape[1] - ids.shape[1]} tokens, expected {k}")
        return sw.ms

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the never-matching end-of-text id [-1] is deliberate; no warning about it
    try:
        long, short = [], []
        warm = 0.0
        for i in range(warmup + repeats):
            a, b = once(n), once(1)
            if i >= warmup:
                long.append(a)
                short.append(b)
            else:
                warm += (a + b) / 1e3
    finally:
        hf_logging.set_verbosity(verbosity)
    t_n, t_1 = _median(long), _median(short)
    return {"method": "hf", "label": "HF generate" + (" (static cache)" if static_rows else ""), "nodes": 1,
            "verify_ms": (t_n - t_1) / (n - 1), "generate_ms": {str(n): t_n, "1": t_1}, "warmup_s": warm}


def measure_drafter(target: Any, drafter: Any, settings: Any, prefix: Sequence[int], warmup: int,
                    repeats: int, streams: int = 1) -> dict[str, Any]:
    """Median draft, search and verify ms of a drafter's steps after ``prefix``, as the decoding loop runs them,
    for ``streams`` streams (each drafts its own tree; one verify of all the trees).

    The first proposal (the drafter's prefill over the whole prefix) is not counted; every later step feeds the
    drafter one new row (the verified root) and commits only the root, as if no draft were accepted, so the context
    grows by one token per step. Draft and search ms are the streams' sum (the loop drafts them one by one)."""
    from dart_core.engine.drafter import DraftInput
    from dart_core.engine.timing import Stopwatch

    layers = drafter.feature_layers
    dstates = [drafter.new_state(settings) for _ in range(streams)]
    state = target.new_state(streams)
    prompts = stream_prefixes(prefix, streams)
    logits, feats = target.prefill_rows(state, prompts, layers=layers)
    xs = logits.argmax(-1).tolist()
    length = len(prefix) + 1
    contexts = np.zeros((streams, length + warmup + repeats + 1), dtype=np.int32)
    contexts[:, :length] = [[*p, x] for p, x in zip(prompts, xs, strict=True)]
    new_ids = [[*p[1:], x] for p, x in zip(prompts, xs, strict=True)]
    draft, search, verify, nodes = [], [], [], []
    t0 = time.perf_counter()
    warm_s = 0.0
    for i in range(warmup + repeats + 1):
        if i == warmup + 1:
            warm_s = time.perf_counter() - t0
        proposals = [drafter.propose(d, DraftInput(f, torch.tensor(ids), c[:length]))
                     for d, f, ids, c in zip(dstates, feats, new_ids, contexts, strict=True)]
        with Stopwatch(target.device) as sw:
            out, tfeats = target.verify_rows(state, [p.tree for p in proposals], layers)
            target.commit_rows(state, [[0]] * streams)
        feats = [f[:1] if f is not None else None for f in tfeats]
        xs = [int(torch.argmax(lg[0])) for lg in out]
        contexts[:, length] = xs
        length += 1
        new_ids = [[x] for x in xs]
        if i > warmup:  # step 0 is the drafters' prefill
            draft.append(sum(p.draft_ms for p in proposals))
            search.append(sum(p.search_ms for p in proposals))
            verify.append(sw.ms)
            nodes.append(max(p.tree.size for p in proposals))
    return {"nodes": int(statistics.median(nodes)), "streams": streams, "draft_ms": _median(draft),
            "search_ms": _median(search), "verify_ms": _median(verify), "warmup_s": warm_s}


# ------------------------------------------------------------------------------------------------ report
def finish_rows(rows: list[dict[str, Any]], floor_ms: float | None) -> None:
    """Fill totals, ratios to AR, break-even τ, multiples of the floor and tokens/s (where one step = one token)."""
    ar = next(r["verify_ms"] for r in rows if r["method"] == "ar")
    for r in rows:
        r.setdefault("draft_ms", None)
        r.setdefault("search_ms", None)
        total = r["verify_ms"] + (r["draft_ms"] or 0.0) + (r["search_ms"] or 0.0)
        r["total_ms"] = total
        r["verify_x_ar"] = r["verify_ms"] / ar
        drafting = r["method"] in ("dart", "eagle3")
        r["break_even_tau"] = total / ar if drafting else None
        r["x_floor"] = total / floor_ms if floor_ms else None
        r["tokens_per_s"] = None if drafting or total <= 0 else 1e3 / total


def _fmt(v: float | None, digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def format_table(rows: list[dict[str, Any]]) -> str:
    """A plain-text table of the rows (``-`` where a figure does not apply)."""
    head = ["row", "nodes", "draft ms", "search ms", "verify ms", "total ms", "× AR", "break-even τ", "× floor",
            "tok/s"]
    body = []
    for r in rows:
        search = None if r["method"] == "eagle3" else r["search_ms"]  # EAGLE-3 has no separate search
        body.append([r["label"], str(r["nodes"]), _fmt(r["draft_ms"]), _fmt(search), _fmt(r["verify_ms"]),
                     _fmt(r["total_ms"]), _fmt(r["verify_x_ar"]), _fmt(r["break_even_tau"]), _fmt(r["x_floor"], 1),
                     _fmt(r["tokens_per_s"], 1)])
    widths = [max(len(row[i]) for row in [head, *body]) for i in range(len(head))]
    lines = []
    for row in [head, *body]:
        cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)]
        lines.append("  ".join(cells))
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ main
def _release(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def bench_shape(name: str, shape: Shape, args: argparse.Namespace, device: torch.device, dtype: torch.dtype,
                bandwidth: float | None) -> dict[str, Any]:
    """Build one shape's target and drafters and measure every row on it."""
    from tqdm.auto import tqdm

    from dart_core.drafters.dart import DartSettings
    from dart_core.drafters.eagle3 import Eagle3Settings
    from dart_core.drafters.settings import settings_for
    from dart_core.engine.target import TargetModel

    steps = 3 + len(args.tree_sizes) + len(args.depths)
    bar = tqdm(total=steps, desc=f"{name}", unit="row")
    try:
        bar.set_postfix_str("building the target")
        model = build_target(shape, device, dtype)
        target = TargetModel(model)
        rows = 0
        mode = args.fast_path_mode
        if args.fast_path:  # room for the prefix, every measured step's token and the largest tree
            tree = max(max(args.tree_sizes) + 1, settings_for(Eagle3Settings, device).total_tokens)
            rows = args.prefix + max(256, args.warmup + args.repeats + 2 + tree)
            target.use_static_cache(rows, compile=mode == "compile", graphs=mode == "graphs")
        wbytes = weight_bytes(model)
        floor_ms = wbytes / bandwidth * 1e3 if bandwidth else None
        rng = np.random.default_rng(0)
        prefix = rng.integers(0, shape.vocab, size=args.prefix).tolist()
        bar.update()
        table: list[dict[str, Any]] = []
        bar.set_postfix_str("AR")
        table.append(measure_ar(target, prefix, args.warmup, args.repeats))
        bar.update()
        bar.set_postfix_str("HF generate")
        table.append(measure_hf(model, prefix, args.hf_tokens, args.warmup, args.repeats,
                                static_rows=rows if args.hf_static else None))
        bar.update()
        drafter = build_drafter("dart", shape, model)
        if rows and mode != "compile":
            drafter.use_static_cache(rows, graphs=mode == "graphs")
        drafter.store = ngram_store(prefix, shape.vocab)
        dart_defaults = settings_for(DartSettings, device)
        for n in args.tree_sizes:
            bar.set_postfix_str(f"DART n={n}")
            fig = measure_drafter(target, drafter, replace(dart_defaults, max_nodes=n), prefix, args.warmup,
                                  args.repeats)
            table.append({"method": "dart", "label": f"DART n={n}", "max_nodes": n, **fig})
            bar.update()
        captured = drafter.capture_seconds
        failures = drafter.capture_failures
        del drafter
        _release(device)
        drafter = build_drafter("eagle3", shape, model)
        if rows and mode != "compile":
            drafter.use_static_cache(rows, graphs=mode == "graphs")
        eagle_defaults = settings_for(Eagle3Settings, device)
        for d in args.depths:
            bar.set_postfix_str(f"EAGLE-3 depth={d}")
            s = replace(eagle_defaults, depth=d)
            fig = measure_drafter(target, drafter, s, prefix, args.warmup, args.repeats)
            table.append({"method": "eagle3", "label": f"EAGLE-3 depth={d}", "depth": d,
                          "total_tokens": s.total_tokens, "top_k": s.top_k, **fig})
            bar.update()
        captured += drafter.capture_seconds
        failures += drafter.capture_failures + target.capture_failures
        del drafter
    finally:
        bar.close()
    finish_rows(table, floor_ms)
    out = {"shape": name, "config": asdict(shape), "weight_bytes": wbytes,
           "bandwidth_bytes_per_s": bandwidth, "floor_ms": floor_ms, "rows": table,
           "fast_path": mode if args.fast_path else None, "graphs": target.graphs_captured,
           "capture_s": target.capture_seconds + captured, "capture_failures": failures[:5],
           "warmup_s": sum(r.get("warmup_s") or 0.0 for r in table)}
    del target, model
    _release(device)
    return out


def run(args: argparse.Namespace) -> int:
    from dart_core.arena import resolve_dtype

    for flag, value, low in (("--prefix", args.prefix, 1), ("--repeats", args.repeats, 1), ("--warmup", args.warmup, 0),
                             ("--hf-tokens", args.hf_tokens, 2), ("--threads", args.threads or 1, 1)):
        if value < low:
            print(f"error: {flag} must be >= {low}, got {value}")
            return 2
    if args.bandwidth is not None and not (math.isfinite(args.bandwidth) and args.bandwidth > 0):
        print(f"error: --bandwidth must be a positive number of GB/s, got {args.bandwidth}")
        return 2
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda" and not torch.cuda.is_available():
        print(f"error: --device {args.device}: CUDA is not available here")
        return 2
    dtype = resolve_dtype(args.dtype, device)
    dtype_name = str(dtype).removeprefix("torch.")
    from dart_core.drafters.dart import DartSettings
    from dart_core.drafters.eagle3 import Eagle3Settings
    from dart_core.drafters.settings import check_settings, settings_for

    try:
        for n in args.tree_sizes:
            check_settings(replace(settings_for(DartSettings, device), max_nodes=n), "DART")
        for d in args.depths:
            check_settings(replace(settings_for(Eagle3Settings, device), depth=d), "EAGLE-3")
    except ValueError as e:
        print(f"error: {e}")
        return 2
    for name in args.shapes:
        shape = SHAPES[name]
        need = args.prefix + args.hf_tokens + args.warmup + args.repeats + max(max(args.tree_sizes), max(args.depths))
        if need + 8 > shape.max_positions:
            print(f"error: --prefix {args.prefix} leaves no room in shape {name}'s context of {shape.max_positions}")
            return 2
        wb = shape_weight_bytes(shape, dtype)
        if device.type == "cpu":
            ram = machine_ram()
            if ram is not None and wb > ram // 2:
                print(f"error: shape {name} needs {wb:,} bytes ({wb / 1e9:.1f} GB) of {dtype_name} weights, more than "
                      f"half of this machine's {ram / 1e9:.1f} GB of RAM: use a GPU or a smaller shape")
                return 2
        elif device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(device)
            if wb > 0.9 * free:
                print(f"error: shape {name} needs {wb:,} bytes ({wb / 1e9:.1f} GB) of {dtype_name} weights, but "
                      f"{device} has {free / 1e9:.1f} GB free")
                return 2

    threads = torch.get_num_threads()
    if device.type == "cpu":  # PyTorch's parallel regions wait for their slowest thread: keep a core for the rest
        torch.set_num_threads(app_threads(args.threads, "cpu"))
    try:
        return _run(args, device, dtype, dtype_name)
    finally:
        torch.set_num_threads(threads)


def _run(args: argparse.Namespace, device: torch.device, dtype: torch.dtype, dtype_name: str) -> int:
    name_of_device = device_name(device)
    bandwidth = args.bandwidth * 1e9 if args.bandwidth is not None else (
        peak_bandwidth(name_of_device) if device.type == "cuda" else None)
    results = []
    for name in args.shapes:
        fig = bench_shape(name, SHAPES[name], args, device, dtype, bandwidth)
        results.append(fig)
        floor = (f"floor {fig['floor_ms']:.3f} ms at {bandwidth / 1e9:,.0f} GB/s" if fig["floor_ms"] is not None
                 else "floor unknown (no known peak bandwidth here: --bandwidth GB/s gives one)")
        print(f"\nQwen3 {name} (random weights) on {name_of_device}, {dtype_name}, weights "
              f"{fig['weight_bytes'] / 1e9:.3f} GB ({fig['weight_bytes']:,} bytes), {floor}; prefix {args.prefix}, "
              f"median of {args.repeats}{', fast path' if args.fast_path else ''}")
        print(format_table(fig["rows"]))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "device": str(device), "device_name": name_of_device, "dtype": dtype_name, "prefix": args.prefix,
            "repeats": args.repeats, "warmup": args.warmup, "hf_tokens": args.hf_tokens, "fast_path": args.fast_path,
            "bandwidth_bytes_per_s": bandwidth, "torch": torch.__version__, "shapes": results}, indent=1))
    return 0
