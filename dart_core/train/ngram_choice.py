"""The N-gram store's order and min_count chosen by measured τ, not guessed.

Each candidate store is built over the distillation data and raced, greedy, on held-out prompts by DART (whose tree
search leans on the store to tie its depths together) and by N-gram only (the store alone); the candidate with the
highest τ of the first racer, among those within the size budget, is kept (the smaller store on a tie). The same
races over seeded samples of the data give τ against data size, which says whether more data would still pay."""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dart_core.engine.acceptance import SamplingConfig
from dart_core.engine.budget import OFF
from dart_core.engine.metrics import summarize


@dataclass(frozen=True)
class SweepPlan:
    """What a sweep builds and races: the candidates' orders and min_counts, the byte budget a chosen store must
    keep to, the racers (the first one's τ decides), the prompts' new tokens, and the data fractions of the size
    curve (each a seeded sample of whole conversations, built with the chosen order and min_count)."""

    orders: tuple[int, ...]
    min_counts: tuple[int, ...]
    max_bytes: int
    methods: tuple[str, ...] = ()
    max_new_tokens: int = 128
    fractions: tuple[float, ...] = ()
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.orders or min(self.orders) < 2:
            raise ValueError(f"N-gram orders must be at least 2, got {list(self.orders)}")
        if not self.min_counts or min(self.min_counts) < 1:
            raise ValueError(f"min_counts must be at least 1, got {list(self.min_counts)}")
        if self.max_bytes < 1:
            raise ValueError(f"the store's byte budget must be positive, got {self.max_bytes}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be positive, got {self.max_new_tokens}")
        if any(not 0 < f < 1 for f in self.fractions):
            raise ValueError(f"data fractions must lie strictly between 0 and 1, got {list(self.fractions)}")


def race_tau(arena: Any, prompts: list[list[int]], methods: tuple[str, ...], max_new_tokens: int) -> dict[str, Any]:
    """Each racer's τ (tokens per verify forward, pooled over the prompts) and its wall tokens/s, greedy, on the
    arena's current store, with fixed trees (the tree budget off): the budget sizes trees by this machine's timings,
    which would make the stores' τ differ by more than their tries."""
    out: dict[str, Any] = {}
    for m in methods:
        steps, tokens, start = [], 0, time.perf_counter()
        for ids in prompts:
            run = list(arena.stream(m, ids, sampling=SamplingConfig(), max_new_tokens=max_new_tokens, budget=OFF))
            steps += run
            tokens += sum(len(s.tokens) for s in run)
        seconds = time.perf_counter() - start
        out[m] = {"tau": round(summarize(steps).tau, 4), "tokens": tokens,
                  "tokens_per_s": round(tokens / max(seconds, 1e-9), 1)}
    return out


def _build(seqs: list[list[int]], path: Path, order: int, min_count: int) -> dict[str, Any]:
    from dart_core.ngram.store import NgramStore, build_to_file

    path.parent.mkdir(parents=True, exist_ok=True)
    build_to_file(seqs, path, order=order, min_count=min_count, progress=False)
    store = NgramStore.load(path, progress=False)
    store.verify()
    rec = {"order": order, "min_count": min_count, "bytes": path.stat().st_size, "num_nodes": store.num_nodes,
           "level_sizes": store.level_sizes, "data_tokens": sum(len(s) for s in seqs)}
    store.close()
    return rec


def _raced(arena: Any, path: Path, prompts: list[list[int]], plan: SweepPlan) -> dict[str, Any]:
    from dart_core.ngram.store import NgramStore

    store = NgramStore.load(path, progress=False)
    arena.use_store(store)
    try:
        return race_tau(arena, prompts, plan.methods, plan.max_new_tokens)
    finally:
        arena.use_store(None)
        store.close()


def build_candidates(seqs: list[list[int]], plan: SweepPlan, work: Path) -> list[dict[str, Any]]:
    """Every candidate store of the plan built over ``seqs`` in ``work`` (each record with its ``path``); those
    over the byte budget are recorded with ``over_budget`` and their files dropped. A ValueError names the smallest
    store when none fits."""
    if not seqs:
        raise ValueError("an N-gram sweep needs data sequences")
    candidates = []
    for order in plan.orders:
        for min_count in plan.min_counts:
            path = work / f"order{order}-min{min_count}.ngram"
            rec = {**_build(seqs, path, order, min_count), "path": str(path)}
            if rec["bytes"] > plan.max_bytes:
                rec["over_budget"] = True
                path.unlink()
            candidates.append(rec)
    if all(c.get("over_budget") for c in candidates):
        smallest = min(candidates, key=lambda c: c["bytes"])
        raise ValueError(f"no candidate N-gram store fits in {plan.max_bytes:,} bytes: the smallest (order "
                         f"{smallest['order']}, min_count {smallest['min_count']}) takes {smallest['bytes']:,}")
    return candidates


def sweep(arena: Any, seqs: list[list[int]], candidates: list[dict[str, Any]], prompts: list[list[int]],
          plan: SweepPlan, work: Path, *, progress: bool = True) -> dict[str, Any]:
    """Race the candidates within the budget on ``prompts`` (encoded ids) with the plan's racers, choose, then
    race the chosen order and min_count over the data fractions. Returns the record: ``candidates`` (each with its
    size and τ per racer, or ``over_budget``), ``chosen`` (with its file ``path``) and ``by_data_size``."""
    from tqdm.auto import tqdm

    from dart_core.train.distill import sample_sequences

    if not prompts:
        raise ValueError("an N-gram sweep needs at least one prompt to race on")
    if not plan.methods:
        raise ValueError("no racer to measure τ with")
    for m in plan.methods:
        arena.drafter(m)  # a racer that is not loaded is named before anything is raced
    t0 = time.perf_counter()
    fitting = [c for c in candidates if not c.get("over_budget")]
    bar = tqdm(total=len(fitting) + len(plan.fractions), desc="N-gram stores raced", unit="store",
               disable=not progress)
    for c in fitting:
        c["tau"] = _raced(arena, Path(c["path"]), prompts, plan)
        bar.update(1)
        bar.set_postfix(order=c["order"], min_count=c["min_count"], mb=f"{c['bytes'] / 1e6:.1f}",
                        tau=f"{c['tau'][plan.methods[0]]['tau']:.3f}")
    chosen = max(fitting, key=lambda c: (c["tau"][plan.methods[0]]["tau"], -c["bytes"]))
    by_size = []
    total = sum(len(s) for s in seqs)
    for fraction in plan.fractions:
        sample = sample_sequences(seqs, max(1, int(fraction * total)), seed=plan.seed)
        path = work / f"order{chosen['order']}-min{chosen['min_count']}-frac{fraction:g}.ngram"
        rec = _build(sample, path, chosen["order"], chosen["min_count"])
        rec.update(fraction=fraction, tau=_raced(arena, path, prompts, plan))
        path.unlink()
        by_size.append(rec)
        bar.update(1)
    bar.close()
    by_size.append({**{k: chosen[k] for k in ("order", "min_count", "bytes", "num_nodes", "data_tokens", "tau")},
                    "fraction": 1.0})
    return {"candidates": candidates, "chosen": chosen, "by_data_size": by_size, "methods": list(plan.methods),
            "decided_by": plan.methods[0], "prompts": len(prompts), "max_new_tokens": plan.max_new_tokens,
            "max_bytes": plan.max_bytes, "seconds": round(time.perf_counter() - t0, 1)}


def encode_records(tokenizer: Any, records: list[dict[str, Any]], *, chat: bool) -> list[list[int]]:
    """Prompt records as the racers get them: a chat's ``messages`` through the template, a ``prompt`` as one user
    turn (through the template in chat mode), a raw ``text`` as it is."""
    from dart_core.loading.chat import encode_chat, encode_prompt, encode_text

    out = []
    for r in records:
        if r.get("messages"):
            out.append(encode_chat(tokenizer, r["messages"]))
        elif "prompt" in r:
            out.append(encode_prompt(tokenizer, r["prompt"], chat=chat))
        else:
            out.append(encode_text(tokenizer, r["text"]))
    return out


def store_racers(root: Path) -> dict[str, Path]:
    """The drafters ``root`` holds (``<racer's bundle dir>/config.json``) of the racers that search with an N-gram
    store, by racer key: what a sweep races besides the store-only racers."""
    from dart_core.racers.registry import checkpoint_racers

    return {r.key: root / r.bundle_dir for r in checkpoint_racers()
            if r.uses_store and (root / r.bundle_dir / "config.json").is_file()}


def load_sweep_arena(target: str, drafters: dict[str, Path], store: Path, *, device: str | None, dtype: str,
                     threads: int | None, progress: bool) -> Any:
    """The target with ``drafters`` and the store-only racers (no other model-free racer), on ``store``."""
    from dart_core.arena import load_arena
    from dart_core.racers.registry import model_free_racers

    switches = {r.key: r.uses_store for r in model_free_racers()}
    return load_arena(target, ngram=store, device=device, dtype=dtype, threads=threads, progress=progress,
                      fast_path=0, **{k: str(v) for k, v in drafters.items()}, **switches)


def store_methods(arena: Any) -> tuple[str, ...]:
    """The loaded racers that search with the store, in registry order (the first decides a sweep)."""
    from dart_core.racers.registry import racer

    return tuple(k for k in arena.drafters if racer(k).uses_store)


def keep_chosen(record: dict[str, Any], out: Path) -> None:
    """Copy the chosen store to ``out`` (the bundle's ``ngram/small.ngram``) and drop the other candidates' files."""
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(record["chosen"]["path"], out)
    for c in record["candidates"]:
        Path(c["path"]).unlink(missing_ok=True)


def table(record: dict[str, Any]) -> list[str]:
    """The sweep as markdown rows: every candidate's size and τ per racer, the chosen one marked, then τ against
    data size."""
    methods = record["methods"]
    lines = ["| order | min_count | MB | " + " | ".join(f"τ {m}" for m in methods) + " |",
             "|---|---|---|" + "---|" * len(methods)]
    chosen = (record["chosen"]["order"], record["chosen"]["min_count"])
    for c in record["candidates"]:
        mark = " (chosen)" if (c["order"], c["min_count"]) == chosen else ""
        taus = [f"{c['tau'][m]['tau']:.3f}" if "tau" in c else "over budget" for m in methods]
        lines.append(f"| {c['order']} | {c['min_count']}{mark} | {c['bytes'] / 1e6:.2f} | " + " | ".join(taus) + " |")
    if len(record["by_data_size"]) > 1:
        lines += ["", "| data tokens | MB | " + " | ".join(f"τ {m}" for m in methods) + " |",
                  "|---|---|" + "---|" * len(methods)]
        for r in record["by_data_size"]:
            lines.append(f"| {r['data_tokens']:,} | {r['bytes'] / 1e6:.2f} | "
                         + " | ".join(f"{r['tau'][m]['tau']:.3f}" for m in methods) + " |")
    return lines


def choose(seqs: list[list[int]], records: list[dict[str, Any]], plan: SweepPlan, out: Path, *, target: str,
           drafters: dict[str, Path], chat: bool, device: str | None, dtype: str, threads: int | None,
           progress: bool) -> dict[str, Any]:
    """The whole choice: candidates built beside ``out``, the target loaded with ``drafters`` and the store-only
    racers, ``records`` encoded, the sweep raced (by ``plan.methods``, else every loaded racer that searches with a
    store), the chosen store copied to ``out`` and the other files dropped. Returns the sweep's record, its chosen
    store's ``path`` being ``out``."""
    work = out.parent / f".{out.stem}-candidates"
    candidates = build_candidates(seqs, plan, work)
    first = next(Path(c["path"]) for c in candidates if not c.get("over_budget"))
    arena = load_sweep_arena(target, drafters, first, device=device, dtype=dtype, threads=threads, progress=progress)
    plan = plan if plan.methods else replace(plan, methods=store_methods(arena))
    record = sweep(arena, seqs, candidates, encode_records(arena.tokenizer, records, chat=chat), plan, work,
                   progress=progress)
    keep_chosen(record, out)
    if work.is_dir() and not any(work.iterdir()):
        work.rmdir()
    record["chosen"]["path"] = str(out)
    return record


def _ints(text: str, flag: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"{flag} takes comma-separated integers, got {text!r}") from None


def cmd_ngram(args: Any) -> dict[str, Any]:
    """``python -m dart_core.train ngram-store``: one store over ``--data`` (one order and min_count), or, with
    ``--prompts``, every candidate built and the one with the best measured τ kept at ``--out``; the sweep's record
    goes to ``--record`` (JSON) and its table to stdout. Returns the record."""
    import json

    from dart_core.train.distill import read_prompt_records, read_sequences

    orders, min_counts = _ints(args.orders, "--orders"), _ints(args.min_counts, "--min-counts")
    seqs = read_sequences(args.data)
    if args.prompts is None:
        if len(orders) != 1 or len(min_counts) != 1:
            raise ValueError("several orders or min_counts are candidates to race: add --prompts (held-out prompts "
                             "to measure τ on), or give one of each")
        rec = _build(seqs, args.out, orders[0], min_counts[0])
        print(f"[ngram] order {rec['order']}, min_count {rec['min_count']}: {rec['num_nodes']:,} nodes, "
              f"{rec['bytes'] / 1e6:.2f} MB over {rec['data_tokens']:,} tokens -> {args.out}")
        return rec
    from dart_core.bundle import open_bundle

    bundle = open_bundle(args.bundle)
    fractions = tuple(float(x) for x in args.fractions.split(",") if x.strip()) if args.fractions else ()
    max_bytes = int(args.max_mb * 1e6) if args.max_mb else 1 << 62
    plan = SweepPlan(orders=orders, min_counts=min_counts, max_bytes=max_bytes,
                     methods=tuple(args.methods.split(",")) if args.methods else (),
                     max_new_tokens=args.max_new_tokens, fractions=fractions, seed=args.seed)
    record = choose(seqs, read_prompt_records(args.prompts, args.limit), plan, args.out,
                    target=args.target or bundle.target, drafters=store_racers(bundle.root), chat=bundle.chat,
                    device=args.device, dtype=args.dtype, threads=args.threads, progress=not args.no_progress)
    methods = record["methods"]
    print("\n".join(table(record)))
    c = record["chosen"]
    print(f"[ngram] chosen: order {c['order']}, min_count {c['min_count']} ({c['bytes'] / 1e6:.2f} MB, "
          f"τ {c['tau'][methods[0]]['tau']:.3f} by {methods[0]}) -> {args.out}")
    if args.record:
        args.record.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return record
