"""Training DART, EAGLE-3 and DFlash for ANY Hugging Face causal LM, by self-distillation (as the DART paper
trains), and the recipe of the embedded SmolLM2 bundle built on it. Same code on a CPU and a CUDA GPU; the target runs
in bfloat16 where the hardware multiplies it natively (CUDA, or a CPU with AVX512-BF16 / AMX), float32 otherwise.

    python -m dart_core.train prompts --out P.jsonl                                   # the seeded prompt set
    python -m dart_core.train distill --target T --prompts P.jsonl --out WORK/distill.jsonl
    python -m dart_core.train vocab --target T --data WORK/distill.jsonl            # draft-vocabulary coverage
    python -m dart_core.train fit --target T --data WORK/distill.jsonl --out DIR      # DIR/{dart,eagle3,dflash}
    python -m dart_core.train smollm2 --out assets/smollm2 [--quick]                  # the whole default bundle

``distill`` writes the target's own answers (resumable). ``fit`` runs the target once over that data and keeps its
features on disk (``WORK/features``, resumable), ranks the draft vocabulary by the data's token counts, then trains
the three drafters on the same windows and features with their papers' losses (DART: d mask rows with shifted
embeddings, Σ_j γ^(j−1)·KL; EAGLE-3: training-time test; DFlash: block-wise cross-entropy against the target's
distribution over its full vocabulary, ``dart_core.train.dflash``), checkpointing every few hundred steps
(``--resume`` picks up), and saves the published formats plus ``recipe.json``."""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

# The SmolLM2 bundle's recipe: the seeded chat prompt set's first ``train_prompts`` prompts answered by the target
# (follow-up turns included), held-out prompts in two topic-disjoint roles (``eval``: the held-out loss that stops
# training; ``bench``: the bundle's prompts.jsonl), and the three drafters trained for the same wall clock. Sizes
# and the decisions below were measured on a 2-core CPU (see the bundle's README and recipe.json). Draft vocabulary
# 4,096: it covers ~93 % of the training answers' tokens and ~90 % of the held-out ones (8,192: ~98 / 95 %), but
# 8,192 adds 4.7 MB to each of the DART and EAGLE-3 heads and takes the bundle past its 40 MB. MLP 1,024: 1,536 made
# a DART training step 13 % slower (0.95 s instead of 0.84 s on one core, bf16 autocast) and adds 1.8 MB per head.
SMOLLM2 = {
    "target": "smollm2",
    "train_prompts": 18944,
    "eval_prompts": 384,
    "bench_prompts": 64,
    "max_new_tokens": 256,
    "distill_batch": 256,
    "draft_vocab": 4096,
    "drafter_intermediate": 1024,
    "window": 128,
    "batch_windows": 8,
    "eval_windows": 256,
    "time_budget_min": 30.0,
    "eval_every": 250,
    "patience": 4,
    "steps": {"dart": 100_000, "eagle3": 100_000, "dflash": 100_000},  # bounds only: the time budget ends each
    "dflash_block": 8,
    "ngram_order": 4,
    "ngram_min_count": 2,
    "vocab_sizes": [2048, 4096, 8192],
    "fit_tokens": None,  # all of the data
}
SMOLLM2_QUICK = {
    **SMOLLM2,
    "train_prompts": 6,
    "eval_prompts": 3,
    "bench_prompts": 4,
    "max_new_tokens": 24,
    "distill_batch": 6,
    "draft_vocab": 256,
    "drafter_intermediate": 1024,
    "window": 32,
    "batch_windows": 2,
    "eval_windows": 2,
    "time_budget_min": None,
    "eval_every": 1,
    "patience": 0,
    "steps": {"dart": 2, "eagle3": 2, "dflash": 2},
    "ngram_order": 3,
    "ngram_min_count": 1,
    "vocab_sizes": [64, 256],
}


def _versions() -> dict[str, str]:
    import torch
    import transformers

    return {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__}


def _recipe(out: Path) -> dict[str, Any]:
    """``out/recipe.json`` as recorded so far (empty before the first stage)."""
    path = out / "recipe.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _record(out: Path, stage: str, rec: dict[str, Any], command: str | None = None) -> dict[str, Any]:
    """Merge one stage's record into ``out/recipe.json`` (stages may run separately; ``history`` keeps every
    command that shaped the directory)."""
    path = out / "recipe.json"
    data = _recipe(out)
    if command:
        data.setdefault("history", [])
        if not data["history"] or data["history"][-1] != command:
            data["history"].append(command)
    data.setdefault("stages", {})[stage] = rec
    data["versions"] = _versions()
    data["platform"] = platform.platform()
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")
    return data


def _load_target(ref: str, device: str | None, dtype: str | None) -> Any:
    """The target for distillation and features; ``auto`` is the arena's choice (bfloat16 on a CPU with native bf16
    too: distillation and features run about twice as fast as in float32 there, measured on a 2-core EPYC)."""
    from dart_core.arena import load_target

    return load_target(ref, device=device, dtype=dtype)


def run_distill(target_ref: str, records: list[dict[str, Any]], out: Path, *, device: str | None, dtype: str,
                max_new_tokens: int, batch_size: int, temperature: float, seed: int, threads: int | None,
                progress: bool, loaded: Any = None) -> dict[str, Any]:
    """The target's answers to ``records`` appended to ``out`` (already answered ones are skipped)."""
    import torch

    from dart_core.arena import stop_token_ids
    from dart_core.train.distill import distill

    if threads:
        torch.set_num_threads(threads)
    target, tok = loaded or _load_target(target_ref, device, dtype)
    t0 = time.perf_counter()
    stats = distill(target.model, tok, records, out, stop_ids=stop_token_ids(tok, target.config),
                    max_new_tokens=max_new_tokens, batch_size=batch_size, temperature=temperature, seed=seed,
                    progress=progress)
    stats.update(seconds=round(time.perf_counter() - t0, 1), max_new_tokens=max_new_tokens, batch_size=batch_size,
                 temperature=temperature, prompts=len(records), dtype=str(target.dtype).removeprefix("torch."),
                 threads=torch.get_num_threads())
    stats["answer_tokens_per_s"] = round(stats["answer_tokens"] / max(1e-9, stats["seconds"]), 1)
    return stats


def run_fit(target_ref: str, data: Path, out: Path, *, work: Path, only: str | None, steps: dict[str, int],
            draft_vocab: int, intermediate: int | None, budget: Any, device: str | None, dtype: str,
            online: bool = False, loaded: Any = None, command: str | None = None, dflash_block: int = 16,
            eval_data: Path | None = None, max_tokens: int | None = None) -> dict[str, Any]:
    """Features once (stored, resumable), then the DART drafter, the EAGLE-3 head and the DFlash drafter (block of
    ``dflash_block``; it reads the same feature layers) on the same windows with the same ``budget``
    (:class:`~dart_core.train.common.TrainConfig`: window, batch, wall clock, early stopping; ``steps`` per
    method bound each run). ``eval_data``: distilled answers to held-out prompts, whose features are the held-out
    set (else the last ``budget.eval_windows`` windows of the data).
    ``online``: no stored features, the target runs inside every step over per-conversation windows (for data too
    large to keep features of, on a GPU); the last ``eval_windows`` conversations are held out. ``max_tokens``:
    features and training over a seeded random sample of the conversations holding at most that many tokens (for
    when the features of all the data cost more time than there is)."""
    import torch

    from dart_core.train.dart import train_dart
    from dart_core.train.dflash import train_dflash
    from dart_core.train.distill import read_sequences, sample_sequences
    from dart_core.train.eagle3 import train_eagle3
    from dart_core.train.features import build_features

    if budget.threads:
        torch.set_num_threads(budget.threads)
    seqs = read_sequences(data)
    n_all, tokens_all = len(seqs), sum(len(s) for s in seqs)
    if max_tokens is not None:
        seqs = sample_sequences(seqs, max_tokens, seed=budget.seed)
    eval_seqs = read_sequences(eval_data) if eval_data is not None else None
    target, _ = loaded or _load_target(target_ref, device, dtype)
    t0 = time.perf_counter()
    eval_store = None
    if online:
        store = None
        if eval_seqs is None and budget.eval_windows >= len(seqs):
            raise ValueError(f"--eval-windows {budget.eval_windows} holds out every one of the {len(seqs)} "
                             "conversations")
        feat_rec: dict[str, Any] = {"online": True, "sequences": len(seqs),
                                    "feature_layers": list(target.feature_layers)}
    else:
        store = build_features(target, seqs, work / "features", progress=budget.progress)
        feat_rec = {"tokens": store.n_tokens, "sequences": len(seqs), "seconds": round(time.perf_counter() - t0, 1),
                    "data_sequences": n_all, "data_tokens": tokens_all, "max_tokens": max_tokens,
                    "feature_layers": list(target.feature_layers), "bytes": sum(
                        p.stat().st_size for p in (work / "features").glob("*.bin"))}
        if eval_seqs is not None:
            eval_store = build_features(target, eval_seqs, work / "eval_features", progress=budget.progress)
            feat_rec.update(eval_tokens=eval_store.n_tokens, eval_sequences=len(eval_seqs), eval_data=str(eval_data))
    _record(out, "features", feat_rec, command)
    overrides = {"intermediate_size": intermediate} if intermediate else None
    dev = str(target.device) if device in (None, "auto") else device
    budget = budget.with_(device=dev)
    common = {"draft_vocab_size": draft_vocab, "features": store, "eval_features": eval_store,
              "config_overrides": overrides}
    if online and eval_seqs is not None:
        train_seqs, common["eval_sequences"] = seqs, eval_seqs
    elif online:
        n_eval = budget.eval_windows
        train_seqs, common["eval_sequences"] = seqs[: len(seqs) - n_eval], seqs[len(seqs) - n_eval :]
    else:
        train_seqs = seqs
    results: dict[str, Any] = {"features": feat_rec}

    def dflash(target: Any, seqs: Any, out_dir: Path, cfg: Any, *, draft_vocab_size: int,
               config_overrides: Any, **kw: Any) -> dict[str, Any]:  # full vocabulary: the target's lm_head
        return train_dflash(target, seqs, out_dir, cfg, block_size=dflash_block, intermediate_size=intermediate,
                            **kw)

    for name, fn in (("dart", train_dart), ("eagle3", train_eagle3), ("dflash", dflash)):
        if (only and name != only) or not steps.get(name):
            continue
        t1 = time.perf_counter()
        rec = fn(target, train_seqs, out / name, budget.with_(steps=steps[name]), **common)
        rec.update(stage_seconds=round(time.perf_counter() - t1, 1), max_steps=steps[name],
                   draft_vocab=draft_vocab if name != "dflash" else "full (the target's lm_head)",
                   intermediate_size=intermediate, window=budget.window, batch_windows=budget.batch_windows,
                   eval_windows=budget.eval_windows, eval_data=str(eval_data) if eval_data else None,
                   time_budget_s=budget.time_budget_s, eval_every=budget.eval_every, patience=budget.patience,
                   data=str(data), bytes=sum(p.stat().st_size for p in (out / name).glob("*") if p.is_file()))
        _record(out, name, rec, command)
        results[name] = rec
        print(f"[{name}] {rec.get('steps_done', steps[name])} steps in {rec['stage_seconds']:.0f} s "
              f"(ended by {rec.get('stopped', 'steps')}); held-out top-1 per depth "
              f"{[round(x, 3) for x in rec.get('eval_after', {}).get('top1', [])]} -> {out / name}")
    return results


def run_ngram(seqs: list[list[int]], path: Path, *, order: int, min_count: int, progress: bool) -> dict[str, Any]:
    """An N-gram store over the distillation sequences (the target's own text, in its tokenizer)."""
    from dart_core.ngram.store import NgramStore, build_to_file

    t0 = time.perf_counter()
    path.parent.mkdir(parents=True, exist_ok=True)
    build_to_file(seqs, path, order=order, min_count=min_count, progress=progress)
    store = NgramStore.load(path, progress=False)
    store.verify()
    rec = {"order": store.order, "num_nodes": store.num_nodes, "level_sizes": store.level_sizes,
           "min_count": min_count, "bytes": path.stat().st_size, "seconds": round(time.perf_counter() - t0, 2)}
    store.close()
    return rec


SMOLLM2_STAGES = ("distill", "vocab", "ngram", "fit", "card")
# What a lent GPU changes (``--gpu``): the distillation batch and the training batch grow to fill the device, and the
# three drafters share a budget measured in the GPU's seconds; the data, vocabulary and losses are the recipe's own.
SMOLLM2_GPU = {"distill_batch": 2048, "batch_windows": 64, "eval_every": 100, "time_budget_min": 2.0}


def _smollm2_hp(args: argparse.Namespace) -> dict[str, Any]:
    """The recipe's hyperparameters for this run: the full or quick set, the GPU sizes with ``--gpu``, then the
    explicit overrides (``--distill-batch``, ``--batch-windows``, ``--window``, ``--time-budget``, ``--eval-every``,
    ``--fit-tokens``)."""
    hp = dict(SMOLLM2_QUICK if args.quick else SMOLLM2)
    if args.gpu and not args.quick:
        hp.update(SMOLLM2_GPU)
    for key, value in (("distill_batch", args.distill_batch), ("batch_windows", args.batch_windows),
                       ("window", args.window), ("time_budget_min", args.time_budget), ("eval_every", args.eval_every),
                       ("fit_tokens", args.fit_tokens)):
        if value is not None:
            if value <= 0:
                raise ValueError(f"--{key.replace('_', '-').replace('-min', '')} must be positive, got {value}")
            hp[key] = value
    return hp


def _device_name(device: str | None) -> str:
    """What ran a stage, for the recipe: the GPU's name, or the CPU's platform."""
    import torch

    if str(device or "cpu").startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(torch.device(device))
    from dart_core.engine.cpu import cpu_model_name

    return f"CPU ({cpu_model_name() or platform.machine()}, {torch.get_num_threads()} threads)"


def cmd_smollm2(args: argparse.Namespace, command: str) -> int:
    """The embedded default bundle: prompts, the target's answers (training and held-out), the draft-vocabulary
    coverage behind its size, N-gram store, the three drafters on one time budget, model card. Every stage resumes
    (answered prompts, stored features and training checkpoints are kept in ``--work`` and ``OUT/<drafter>``);
    ``--stages`` runs some of them (a GPU distils and trains, a CPU builds the N-gram store and the card)."""
    from dart_core.loading.bundle_digests import record_digests
    from dart_core.loading.wheel_fetch import sha256_file
    from dart_core.train.distill import distill_runs, read_sequences
    from dart_core.train.model_card import write_model_card
    from dart_core.train.prompt_set import chat_set, heldout_roles
    from dart_core.train.prompts import write_jsonl

    stages = parse_stages(args.stages)
    hp = _smollm2_hp(args)
    out: Path = args.out
    work: Path = args.work or (out.parent / f".{out.name}-work")
    t_all = time.perf_counter()
    train = chat_set(seed=args.seed, n=hp["train_prompts"])
    evals, bench = heldout_roles(chat_set(heldout=True, seed=args.seed), n_eval=hp["eval_prompts"],
                                 n_bench=hp["bench_prompts"])
    write_jsonl(work / "train_prompts.jsonl", train)
    write_jsonl(work / "eval_prompts.jsonl", evals)
    write_jsonl(out / "prompts.jsonl", [{"id": p["id"], "category": p["category"], "prompt": p["prompt"]}
                                       for p in bench])
    (out / "bundle.json").write_text(json.dumps({"target": hp["target"], "mode": "chat"}, indent=1) + "\n")
    _record(out, "prompts", {
        "generator": "dart_core.train.prompt_set.chat_set", "seed": args.seed, "set_size": len(chat_set(
            seed=args.seed)), "train": len(train), "with_followup": sum(1 for p in train if p.get("followups")),
        "eval": len(evals), "bench": len(bench),
        "split": "by topic (stable hash): no held-out topic is in training; eval and bench topics are disjoint"},
        command)
    loaded = _load_target(hp["target"], args.device, args.dtype) if stages & {"distill", "fit"} else None
    if "distill" in stages:
        opts = {"device": args.device, "dtype": args.dtype, "max_new_tokens": hp["max_new_tokens"],
                "batch_size": hp["distill_batch"], "temperature": 0.0, "seed": args.seed, "threads": args.threads,
                "progress": not args.no_progress, "loaded": loaded}
        for stage, prompts, name in (("distill", train, "distill.jsonl"),
                                     ("distill_eval", evals, "eval_distill.jsonl")):
            rec = run_distill(hp["target"], prompts, work / name, **opts)
            if not rec["answered"] and stage in _recipe(out).get("stages", {}):
                continue  # a resumed run with nothing left to answer: the record of the runs that did stands
            rec["file"]["sha256"] = sha256_file(work / name)  # the data stays out of git: this identifies it
            rec["all_runs"] = distill_runs(work / name)  # a resumable stage: every run's clock and tokens
            rec["device_name"] = _device_name(args.device)
            _record(out, stage, rec, command)
    if "vocab" in stages:
        _record(out, "vocab", run_vocab(_text_config(hp["target"]), work / "distill.jsonl",
                                        work / "eval_distill.jsonl", hp["vocab_sizes"]), command)
    if "ngram" in stages:
        ng = run_ngram(read_sequences(work / "distill.jsonl"), out / "ngram" / "small.ngram",
                       order=hp["ngram_order"], min_count=hp["ngram_min_count"], progress=not args.no_progress)
        _record(out, "ngram", ng, command)
    if "fit" in stages:
        from dart_core.train.common import TrainConfig

        budget = TrainConfig(window=hp["window"], batch_windows=hp["batch_windows"],
                             eval_windows=hp["eval_windows"], seed=args.seed, threads=args.threads, resume=True,
                             progress=not args.no_progress, checkpoint_every=100, eval_every=hp["eval_every"],
                             patience=hp["patience"],
                             time_budget_s=hp["time_budget_min"] * 60 if hp["time_budget_min"] else None)
        run_fit(hp["target"], work / "distill.jsonl", out, work=work, only=None, steps=hp["steps"],
                draft_vocab=hp["draft_vocab"], intermediate=hp["drafter_intermediate"], budget=budget,
                device=args.device, dtype=args.dtype, loaded=loaded, command=command,
                dflash_block=hp["dflash_block"], eval_data=work / "eval_distill.jsonl", max_tokens=hp["fit_tokens"])
        # the drafters' hyperparameters are this run's: a later run of other stages (the card) keeps them
        _record(out, "fit", {"hyperparameters": hp, "device_name": _device_name(args.device)}, command)
    if "card" in stages:
        data = _record(out, "bundle", {"hyperparameters": hp, "quick": bool(args.quick),
                                       "total_seconds": round(time.perf_counter() - t_all, 1)}, command)
        write_model_card(out, data)
        record_digests(out)  # every model file's sha256 into bundle.json, checked when the bundle is opened
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"[smollm2] stages {','.join(s for s in SMOLLM2_STAGES if s in stages)}: bundle {size / 1e6:.1f} MB in "
          f"{out} ({time.perf_counter() - t_all:.0f} s); work files in {work}")
    return 0


def parse_stages(text: str) -> set[str]:
    """``--stages``: a comma-separated subset of :data:`SMOLLM2_STAGES` (``all``: every one); an unknown name is
    refused, naming the known ones."""
    names = {s.strip() for s in text.split(",") if s.strip()}
    if names == {"all"}:
        return set(SMOLLM2_STAGES)
    unknown = sorted(names - set(SMOLLM2_STAGES))
    if unknown or not names:
        raise ValueError(f"unknown stage(s) {', '.join(unknown) or '(none given)'}: pick from "
                         f"{', '.join(SMOLLM2_STAGES)} or all")
    return names


def run_vocab(text_config: Any, data: Path, eval_data: Path | None, sizes: list[int], *,
              rank_on: str = "all") -> dict[str, Any]:
    """The draft-vocabulary coverage record (``dart_core.train.vocab_coverage``): per size, the share of the
    training answers' tokens and of the held-out answers' tokens it covers."""
    from dart_core.train.distill import read_sequences
    from dart_core.train.vocab_coverage import coverage

    if not sizes or min(sizes) < 1:
        raise ValueError(f"vocabulary sizes must be positive integers, got {sizes!r}")
    eos = text_config.eos_token_id
    eos = eos[0] if isinstance(eos, list) else eos
    answers = {"training answers": read_sequences(data, answers_only=True)}
    if eval_data:
        answers["held-out answers"] = read_sequences(eval_data, answers_only=True)
    ranked = answers["training answers"] if rank_on == "answers" else read_sequences(data)
    rows = coverage(ranked, answers, sizes, vocab_size=int(text_config.vocab_size), eos_token_id=eos)
    return {"rank_on": rank_on, "data": str(data), "eval_data": str(eval_data) if eval_data else None,
            "target_vocab": int(text_config.vocab_size), "rows": rows}


def _text_config(target_ref: str) -> Any:
    """The target's text config alone (its vocabulary size and EOS), without loading its weights."""
    from transformers import AutoConfig

    from dart_core.arena import resolve_model_ref

    return AutoConfig.from_pretrained(resolve_model_ref(target_ref)).get_text_config(decoder=True)


def cmd_vocab(args: argparse.Namespace) -> None:
    """Print the draft-vocabulary coverage table."""
    sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    rec = run_vocab(_text_config(args.target), args.data, args.eval_data, sizes, rank_on=args.rank_on)
    names = [k for k in rec["rows"][0] if k != "size"]
    print(f"draft vocabulary ranked on {args.rank_on} tokens of {args.data} (target vocabulary "
          f"{rec['target_vocab']:,})")
    print("| size | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for r in rec["rows"]:
        print(f"| {r['size']:,} | " + " | ".join(f"{r[name]:.1%}" for name in names) + " |")


def add_prompts_parser(sub: Any) -> None:
    p = sub.add_parser("prompts", help="write the seeded chat prompt set (dart_core.train.prompt_set) as JSONL",
                       description="The default bundle's distillation prompts: 20,000+ training prompts across "
                                   "writing, roleplay, reasoning, math, code, extraction, STEM, humanities and advice, "
                                   "a quarter with a follow-up turn; --heldout writes the held-out topics' prompts.")
    p.add_argument("--out", required=True, type=Path, help="output JSONL (overwritten)")
    p.add_argument("--heldout", action="store_true", help="the held-out split (topics never in training)")
    p.add_argument("--role", choices=["all", "eval", "bench"], default="all",
                   help="with --heldout: all held-out prompts, or one of two topic-disjoint roles: eval (two thirds "
                        "of the topics: the held-out loss that stops training) or bench (the other third, taken in "
                        "turn from each category: the bundle's benchmark prompts)")
    p.add_argument("--n", type=int, default=None, help="first N prompts only (default: all)")
    p.add_argument("--seed", type=int, default=0)


def add_vocab_parser(sub: Any) -> None:
    p = sub.add_parser("vocab", help="share of answer tokens that draft vocabularies of several sizes cover",
                       description="A token outside the draft vocabulary can never be drafted (DART, EAGLE-3): "
                                   "this ranks the vocabulary as the trainers do and prints, per size, the share of "
                                   "the training answers' tokens and of held-out answers' tokens it covers.")
    p.add_argument("--target", required=True, help="the target that wrote the data (its vocabulary size and EOS)")
    p.add_argument("--data", required=True, type=Path, help="distillation JSONL the vocabulary is ranked on")
    p.add_argument("--eval-data", type=Path, default=None, help="distillation JSONL of held-out prompts' answers")
    p.add_argument("--sizes", default="2048,4096,8192", help="comma-separated sizes (default 2048,4096,8192)")
    p.add_argument("--rank-on", choices=["all", "answers"], default="all",
                   help="rank by every token of the data (the trainers' default) or by answer tokens only")


def add_distill_parser(sub: Any) -> None:
    p = sub.add_parser("distill", help="the target's own answers to a prompt set (resumable JSONL)",
                       description="Self-distillation data: the target answers each prompt through its chat "
                                   "template; records already in --out are skipped, so a stopped run resumes.")
    p.add_argument("--target", required=True, help="HF causal LM: Hub id, local dir, or smollm2 (the packaged one)")
    p.add_argument("--prompts", required=True, type=Path,
                   help="JSONL of {prompt}, {messages: [...]} (chat ending with a user turn) or {text} (raw text, "
                        "used as it is)")
    p.add_argument("--out", required=True, type=Path, help="output JSONL (appended to; resumable)")
    p.add_argument("--limit", type=int, default=0, help="first N prompts only (0 = all)")
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=16, help="prompts answered together (default 16)")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy answers (default)")
    _common(p)


def add_fit_parser(sub: Any) -> None:
    p = sub.add_parser("fit", help="train the DART, EAGLE-3 and DFlash drafters on distillation data",
                       description="Runs the target once over the data (features kept in --work, resumable), then "
                                   "trains the three drafters with the same windows and features; --resume "
                                   "continues from the last checkpoint (every 100 steps).")
    p.add_argument("--target", required=True, help="the same target that wrote the data")
    p.add_argument("--data", required=True, type=Path, help="distillation JSONL from `distill`")
    p.add_argument("--out", required=True, type=Path, help="output dir: dart/, eagle3/, dflash/, recipe.json")
    p.add_argument("--work", type=Path, default=None, help="feature cache dir (default: OUT/.work)")
    p.add_argument("--only", choices=["dart", "eagle3", "dflash"], default=None, help="train only this drafter")
    p.add_argument("--dart-steps", type=int, default=2000)
    p.add_argument("--eagle3-steps", type=int, default=1000,
                   help="an EAGLE-3 step (4 unrolled passes) costs about twice a DART step: half the steps is "
                        "the same training time (default 1000)")
    p.add_argument("--dflash-steps", type=int, default=1000,
                   help="DFlash steps (0 = skip it); its step scores every block row over the FULL vocabulary "
                        "(the target's lm_head), so time a few steps to match the others' training time "
                        "(default 1000)")
    p.add_argument("--dflash-block-size", type=int, default=16,
                   help="DFlash block size B: B-1 tokens drafted per forward (default 16, as published)")
    p.add_argument("--draft-vocab", type=int, default=8192, help="draft vocabulary size (default 8192)")
    p.add_argument("--drafter-intermediate", type=int, default=None,
                   help="MLP width of the drafter layer (default: the target's)")
    p.add_argument("--window", type=int, default=256, help="tokens per training window (default 256)")
    p.add_argument("--batch-windows", type=int, default=8, help="windows per step (default 8)")
    p.add_argument("--eval-windows", type=int, default=32,
                   help="windows held out for evaluation (default 32); with --eval-data, at most this many of its "
                        "windows (0 = all)")
    p.add_argument("--eval-data", type=Path, default=None,
                   help="distillation JSONL of held-out prompts' answers (topics never trained on): the held-out "
                        "set, in place of the data's last windows")
    p.add_argument("--time-budget", type=float, default=None, metavar="MIN",
                   help="wall-clock minutes per drafter, the same for each (the fair budget; the steps flags "
                        "then only bound it, and the learning-rate schedule anneals to the budget's end)")
    p.add_argument("--eval-every", type=int, default=0,
                   help="held-out loss every N steps, the best weights kept (default 0: before and after only)")
    p.add_argument("--patience", type=int, default=0,
                   help="stop a drafter after this many held-out evaluations without a new best (default 0: never)")
    p.add_argument("--resume", action="store_true", help="continue from OUT/<head>/train_state.pt")
    p.add_argument("--online", action="store_true",
                   help="no stored features: the target runs inside every training step over per-conversation "
                        "windows (for data too large to keep features of, on a GPU; --eval-windows then counts "
                        "held-out conversations)")
    _common(p)


def add_smollm2_parser(sub: Any) -> None:
    p = sub.add_parser("smollm2", help="rebuild the default bundle (SmolLM2-135M-Instruct) end to end",
                       description="Prompts, the target's answers, N-gram store, DART drafter, EAGLE-3 head, "
                                   "DFlash drafter and model card for the packaged SmolLM2-135M-Instruct; every "
                                   "stage resumes.")
    p.add_argument("--out", required=True, type=Path, help="bundle dir (e.g. assets/smollm2)")
    p.add_argument("--work", type=Path, default=None,
                   help="where distillation data and features go (default: .<out name>-work beside OUT)")
    p.add_argument("--quick", action="store_true", help="a tiny variant of every stage, for CI (seconds)")
    p.add_argument("--stages", default="all",
                   help="comma-separated stages to run: " + ", ".join(SMOLLM2_STAGES) + " (default: all; the prompt "
                        "files are always written). A GPU can distil and fit while a CPU builds the N-gram store and "
                        "the card: --stages distill,fit there, --stages vocab,ngram,card here")
    p.add_argument("--gpu", action="store_true",
                   help="sizes for a lent GPU: distillation batch " + str(SMOLLM2_GPU["distill_batch"]) + ", "
                        + str(SMOLLM2_GPU["batch_windows"]) + " windows a training step, a held-out evaluation "
                        "every " + str(SMOLLM2_GPU["eval_every"]) + " steps, " + f"{SMOLLM2_GPU['time_budget_min']:g}"
                        + " minutes per drafter (use with --device cuda)")
    p.add_argument("--distill-batch", type=int, default=None, help="prompts answered together (overrides the recipe)")
    p.add_argument("--batch-windows", type=int, default=None, help="training windows per step (overrides the recipe)")
    p.add_argument("--window", type=int, default=None, metavar="N",
                   help=f"tokens per training window (default {SMOLLM2['window']}); each drafter's context_window "
                        "follows from it: the most real rows it attends to when drafting, as in training")
    p.add_argument("--time-budget", type=float, default=None, metavar="MIN",
                   help="wall-clock minutes per drafter, the same for each (overrides the recipe's)")
    p.add_argument("--eval-every", type=int, default=None,
                   help="training steps between held-out evaluations (overrides the recipe's)")
    p.add_argument("--fit-tokens", type=int, default=None, metavar="N",
                   help="features and training over a seeded random sample of the conversations holding at most N "
                        "tokens (default: all; for when the features of all the data cost more time than there is)")
    _common(p)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:N")
    p.add_argument("--dtype", default="auto",
                   help="target dtype: auto (bf16 on CUDA and on CPUs with native bf16, else fp32), float32, bfloat16, "
                   "float16")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


COMMANDS = ("prompts", "distill", "vocab", "fit", "smollm2")


def main(argv: list[str]) -> int:
    from dart_core.train.distill import DistillError, read_prompt_records

    p = argparse.ArgumentParser(prog="python -m dart_core.train", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    add_prompts_parser(sub)
    add_distill_parser(sub)
    add_vocab_parser(sub)
    add_fit_parser(sub)
    add_smollm2_parser(sub)
    args = p.parse_args(argv)
    command = "python -m dart_core.train " + " ".join(argv)
    try:
        if args.command == "prompts":
            from dart_core.train.prompt_set import chat_set, heldout_roles
            from dart_core.train.prompts import write_jsonl

            if args.role != "all" and not args.heldout:
                raise ValueError("--role picks among the held-out prompts: add --heldout")
            recs = chat_set(heldout=args.heldout, seed=args.seed, n=args.n if args.role == "all" else None)
            if args.role != "all":
                n = args.n if args.n is not None else len(recs)
                eval_set, bench = heldout_roles(recs, n_eval=n if args.role == "eval" else 0,
                                                n_bench=n if args.role == "bench" else 0)
                recs = eval_set if args.role == "eval" else bench
            write_jsonl(args.out, recs)
            turns = sum(1 for r in recs if r.get("followups"))
            print(f"[prompts] {len(recs):,} prompts ({turns:,} with a follow-up turn) -> {args.out}")
        elif args.command == "distill":
            recs = read_prompt_records(args.prompts, args.limit)
            st = run_distill(args.target, recs, args.out, device=args.device, dtype=args.dtype,
                             max_new_tokens=args.max_new_tokens, batch_size=args.batch_size,
                             temperature=args.temperature, seed=args.seed, threads=args.threads,
                             progress=not args.no_progress)
            print(f"[distill] {st['answered']} answered ({st['skipped_done']} already done), "
                  f"{st['answer_tokens']:,} tokens, {st['answer_tokens_per_s']} tok/s -> {args.out}")
        elif args.command == "vocab":
            cmd_vocab(args)
        elif args.command == "fit":
            from dart_core.train.common import TrainConfig

            budget = TrainConfig(
                window=args.window, batch_windows=args.batch_windows, eval_windows=args.eval_windows,
                seed=args.seed, threads=args.threads, resume=args.resume, progress=not args.no_progress,
                checkpoint_every=100, time_budget_s=args.time_budget * 60 if args.time_budget else None,
                eval_every=args.eval_every, patience=args.patience)
            run_fit(args.target, args.data, args.out, work=args.work or args.out / ".work", only=args.only,
                    steps={"dart": args.dart_steps, "eagle3": args.eagle3_steps, "dflash": args.dflash_steps},
                    dflash_block=args.dflash_block_size, draft_vocab=args.draft_vocab,
                    intermediate=args.drafter_intermediate, budget=budget, device=args.device, dtype=args.dtype,
                    online=args.online, command=command, eval_data=args.eval_data)
        else:
            return cmd_smollm2(args, command)
    except (DistillError, ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0
