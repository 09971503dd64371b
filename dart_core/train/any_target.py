"""Training DART, EAGLE-3 and DFlash for ANY Hugging Face causal LM, by self-distillation (as the DART paper
trains); the default bundle's recipe (``dart_core.train.smollm2``) is built on these stages. Same code on a CPU and
a CUDA GPU; the target runs in bfloat16 where the hardware multiplies it natively (CUDA, or a CPU with AVX512-BF16 /
AMX), float32 otherwise.

    python -m dart_core.train prompts --out P.jsonl                                   # the seeded prompt set
    python -m dart_core.train distill --target T --prompts P.jsonl --out WORK/distill.jsonl
    python -m dart_core.train vocab --target T --data WORK/distill.jsonl            # draft-vocabulary coverage
    python -m dart_core.train fit --target T --data WORK/distill.jsonl --out DIR      # DIR/{dart,eagle3,dflash}

``distill`` writes the target's own answers (resumable). ``fit`` runs the target once over that data and keeps its
features on disk (``WORK/features``, resumable), ranks the draft vocabulary by the data's token counts, then trains
the three drafters on the same windows and features with their papers' losses (DART: d mask rows with shifted
embeddings, Σ_j γ^(j−1)·KL; EAGLE-3: training-time test; DFlash: block-wise cross-entropy against the target's
distribution over its full vocabulary, ``dart_core.train.dflash``), checkpointing every few hundred steps
(``--resume`` picks up), and saves the published formats plus ``recipe.json``."""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from dart_core.engine.cpu import AUTO_DTYPE_HELP
from dart_core.options import add_device_argument, add_dtype_argument, add_threads_argument


def _versions() -> dict[str, str]:
    import torch
    import transformers

    return {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__}


def read_recipe(out: Path) -> dict[str, Any]:
    """``out/recipe.json`` as recorded so far (empty before the first stage)."""
    path = out / "recipe.json"
    return json.loads(path.read_text()) if path.exists() else {}


def record_stage(out: Path, stage: str, rec: dict[str, Any], command: str | None = None) -> dict[str, Any]:
    """Merge one stage's record into ``out/recipe.json`` (stages may run separately; ``history`` keeps every
    command that shaped the directory)."""
    path = out / "recipe.json"
    data = read_recipe(out)
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


def load_training_target(ref: str, device: str | None, dtype: str | None) -> Any:
    """The target for distillation and features; ``auto`` is the arena's choice (bfloat16 on a CPU with native bf16
    too: distillation and features run much faster than in float32 there,
    measured: docs/benchmarks.md#measurements-behind-design-choices)."""
    from dart_core.arena import load_target

    return load_target(ref, device=device, dtype=dtype)


def run_distill(target_ref: str, records: list[dict[str, Any]], out: Path, *, device: str | None, dtype: str,
                max_new_tokens: int, batch_size: int, temperature: float, seed: int, threads: int | None,
                progress: bool, loaded: Any = None, attention: str = "native") -> dict[str, Any]:
    """The target's answers to ``records`` appended to ``out`` (already answered ones are skipped); ``attention``
    as in :func:`~dart_core.train.batch_decode.batch_answers`."""
    import torch

    from dart_core.arena import stop_token_ids
    from dart_core.train.distill import distill

    if threads:
        torch.set_num_threads(threads)
    target, tok = loaded or load_training_target(target_ref, device, dtype)
    t0 = time.perf_counter()
    stats = distill(target.model, tok, records, out, stop_ids=stop_token_ids(tok, target.config),
                    max_new_tokens=max_new_tokens, batch_size=batch_size, temperature=temperature, seed=seed,
                    progress=progress, attention=attention)
    stats.update(seconds=round(time.perf_counter() - t0, 1), max_new_tokens=max_new_tokens, batch_size=batch_size,
                 temperature=temperature, prompts=len(records), dtype=str(target.dtype).removeprefix("torch."),
                 threads=torch.get_num_threads(), attention=attention,
                 gomp_spincount=os.environ.get("GOMP_SPINCOUNT"))
    stats["answer_tokens_per_s"] = round(stats["answer_tokens"] / max(1e-9, stats["seconds"]), 1)
    return stats


def run_fit(target_ref: str, data: Path, out: Path, *, work: Path, only: str | None, steps: dict[str, int],
            draft_vocab: int, intermediate: int | None, budget: Any, device: str | None, dtype: str,
            online: bool = False, loaded: Any = None, command: str | None = None, dflash_block: int = 16,
            eval_data: Path | None = None, max_tokens: int | None = None,
            init_from: Path | None = None) -> dict[str, Any]:
    """Features once (stored, resumable), then the DART drafter, the EAGLE-3 head and the DFlash drafter (block of
    ``dflash_block``; it reads the same feature layers) on the same windows with the same ``budget``
    (:class:`~dart_core.train.common.TrainConfig`: window, batch, wall clock, early stopping; ``steps`` per
    method bound each run). ``eval_data``: distilled answers to held-out prompts, whose features are the held-out
    set (else the last ``budget.eval_windows`` windows of the data).
    ``online``: no stored features, the target runs inside every step over per-conversation windows (for data too
    large to keep features of, on a GPU); the last ``eval_windows`` conversations are held out. ``max_tokens``:
    features and training over a seeded random sample of the conversations holding at most that many tokens (for
    when the features of all the data cost more time than there is). ``init_from``: a bundle whose ``dart/``,
    ``eagle3/`` and ``dflash/`` each drafter continues from (same shapes; their draft vocabularies kept), so
    that more data can improve trained drafters in less time than training them again."""
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
    target, _ = loaded or load_training_target(target_ref, device, dtype)
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
    record_stage(out, "features", feat_rec, command)
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
        start = {"init_from": init_from / name} if init_from is not None else {}
        rec = fn(target, train_seqs, out / name, budget.with_(steps=steps[name]), **common, **start)
        rec.update(stage_seconds=round(time.perf_counter() - t1, 1), max_steps=steps[name],
                   draft_vocab=draft_vocab if name != "dflash" else "full (the target's lm_head)",
                   intermediate_size=intermediate, window=budget.window, batch_windows=budget.batch_windows,
                   eval_windows=budget.eval_windows, eval_data=str(eval_data) if eval_data else None,
                   time_budget_s=budget.time_budget_s, eval_every=budget.eval_every, patience=budget.patience,
                   train_windows=budget.train_windows, lr=budget.lr,
                   data=str(data), bytes=sum(p.stat().st_size for p in (out / name).glob("*") if p.is_file()),
                   init_from=str(init_from / name) if init_from is not None else None)
        record_stage(out, name, rec, command)
        results[name] = rec
        print(f"[{name}] {rec.get('steps_done', steps[name])} steps in {rec['stage_seconds']:.0f} s "
              f"(ended by {rec.get('stopped', 'steps')}); held-out top-1 per depth "
              f"{[round(x, 3) for x in rec.get('eval_after', {}).get('top1', [])]} -> {out / name}")
    return results


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


def target_text_config(target_ref: str) -> Any:
    """The target's text config alone (its vocabulary size and EOS), without loading its weights."""
    from transformers import AutoConfig

    from dart_core.arena import resolve_model_ref

    return AutoConfig.from_pretrained(resolve_model_ref(target_ref)).get_text_config(decoder=True)


def cmd_vocab(args: argparse.Namespace) -> None:
    """Print the draft-vocabulary coverage table."""
    sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    rec = run_vocab(target_text_config(args.target), args.data, args.eval_data, sizes, rank_on=args.rank_on)
    names = [k for k in rec["rows"][0] if k != "size"]
    print(f"draft vocabulary ranked on {args.rank_on} tokens of {args.data} (target vocabulary "
          f"{rec['target_vocab']:,})")
    print("| size | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for r in rec["rows"]:
        print(f"| {r['size']:,} | " + " | ".join(f"{r[name]:.1%}" for name in names) + " |")


def add_prompts_parser(sub: Any) -> None:
    p = sub.add_parser("prompts", help="write the seeded chat prompt set (dart_core.data.prompts.chat_set) as JSONL",
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
    p.add_argument("--rounds", type=int, default=1, metavar="R",
                   help="rounds of the generator (default 1): each later round draws new numbers, passages, template "
                        "draws and modifiers with its own seed, keeps the prompts no earlier round holds, half of "
                        "them two-turn, and is numbered on from the last, so the first round stays as it is")
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
    p.add_argument("--attention", choices=["native", "sdpa"], default="native",
                   help="decode-step attention on a CPU: native (our kernel, default; faster than sdpa, measured in "
                        "docs/benchmarks.md) or sdpa (the model's own, for comparison)")
    add_common_options(p)


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
    add_fit_data_options(p)
    p.add_argument("--online", action="store_true",
                   help="no stored features: the target runs inside every training step over per-conversation "
                        "windows (for data too large to keep features of, on a GPU; --eval-windows then counts "
                        "held-out conversations)")
    add_common_options(p)


def add_fit_data_options(p: argparse.ArgumentParser) -> None:
    """What a fit trains on and starts from, shared by ``train fit`` and the recipes: a sample of the data, a
    choice of its windows, trained drafters to continue."""
    p.add_argument("--fit-tokens", type=int, default=None, metavar="N",
                   help="features and training over a seeded random sample of whole conversations holding at most "
                        "N tokens (default: all the data; for when the features of all of it cost more time or "
                        "disk than there is)")
    p.add_argument("--train-windows", type=int, default=None, metavar="N",
                   help="train each drafter on N of the training windows, a seeded random choice (default: all): "
                        "held-out top-1 against data size on one feature store")
    p.add_argument("--init-from", type=Path, default=None, metavar="BUNDLE",
                   help="continue each drafter from BUNDLE/<head> (dart/, eagle3/, dflash/: trained drafters of the "
                        "same shapes and draft vocabulary size, e.g. assets/smollm2) instead of starting afresh: "
                        "more data for trained drafters in less time; a config that differs is refused, naming the "
                        "fields")
    p.add_argument("--lr", type=float, default=None, metavar="LR",
                   help="peak learning rate of each drafter's schedule (default 1e-3); a fit continued with "
                        "--init-from may want less, so as not to undo what its start learned")


def add_ngram_parser(sub: Any) -> None:
    p = sub.add_parser("ngram-store", help="the N-gram store over distillation data; with --prompts, its order and "
                                     "min_count chosen by measured τ",
                       description="Builds the N-gram store over --data. With --prompts, every --orders × "
                                   "--min-counts candidate is built, those within --max-mb are raced greedily on "
                                   "the prompts by the racers that search with a store (the bundle's drafters and "
                                   "N-gram only), and the one with the best τ of the first racer is kept at --out; "
                                   "--fractions adds τ against data size (seeded samples of the conversations). The "
                                   "races run in float32 unless --dtype says otherwise.")
    p.add_argument("--data", required=True, type=Path, help="distillation JSONL (every record's ids are counted)")
    p.add_argument("--out", required=True, type=Path, help="the store file to write (e.g. BUNDLE/ngram/small.ngram)")
    p.add_argument("--orders", default="4", help="comma-separated N-gram orders (default 4)")
    p.add_argument("--min-counts", default="2", help="comma-separated min_counts: rarer n-grams are dropped "
                                                     "(default 2)")
    p.add_argument("--prompts", type=Path, default=None,
                   help="held-out prompt JSONL to race the candidates on (not the benchmark's own prompts)")
    p.add_argument("--limit", type=int, default=16, help="first N prompts of --prompts (default 16)")
    p.add_argument("--max-new-tokens", type=int, default=128, help="tokens generated per prompt (default 128)")
    p.add_argument("--bundle", type=Path, default=None,
                   help="the bundle whose target and store-searching drafters race (default: the default bundle)")
    p.add_argument("--target", default=None, help="another target than the bundle's")
    p.add_argument("--methods", default=None,
                   help="comma-separated racers to measure (default: every loaded racer that searches with a "
                        "store); the first one's τ decides")
    p.add_argument("--max-mb", type=float, default=None, help="largest store to consider, in MB (default: any)")
    p.add_argument("--fractions", default="", help="comma-separated data fractions (0-1) for τ against data size, "
                                                   "built with the chosen order and min_count")
    p.add_argument("--record", type=Path, default=None, help="write the sweep's record here (JSON)")
    add_common_options(p)
    p.set_defaults(dtype="float32")


def add_common_options(p: argparse.ArgumentParser) -> None:
    add_device_argument(p, help="cpu (default), cuda, cuda:N")
    p.set_defaults(device="cpu")
    add_dtype_argument(p, help=f"the target's dtype: {AUTO_DTYPE_HELP}")
    p.add_argument("--seed", type=int, default=0)
    add_threads_argument(p, help="PyTorch CPU threads (default: PyTorch's, one per core)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


COMMANDS = ("prompts", "distill", "vocab", "fit", "ngram-store")


def main(argv: list[str]) -> int:
    from dart_core.train.distill import DistillError, read_prompt_records

    p = argparse.ArgumentParser(prog="python -m dart_core.train", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    add_prompts_parser(sub)
    add_distill_parser(sub)
    add_vocab_parser(sub)
    add_fit_parser(sub)
    add_ngram_parser(sub)
    args = p.parse_args(argv)
    command = "python -m dart_core.train " + " ".join(argv)
    try:
        if args.command == "prompts":
            from dart_core.data.prompts.chat_set import chat_set, heldout_roles
            from dart_core.data.prompts.topics import write_jsonl

            if args.role != "all" and not args.heldout:
                raise ValueError("--role picks among the held-out prompts: add --heldout")
            recs = chat_set(heldout=args.heldout, seed=args.seed, n=args.n if args.role == "all" else None,
                            rounds=args.rounds)
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
                             progress=not args.no_progress, attention=args.attention)
            print(f"[distill] {st['answered']} answered ({st['skipped_done']} already done; "
                  f"{st['followups']} follow-up turns, {st['continued']} of them from the first turn's keys and "
                  f"values), {st['answer_tokens']:,} tokens, {st['answer_tokens_per_s']} tok/s -> {args.out}")
        elif args.command == "vocab":
            cmd_vocab(args)
        elif args.command == "fit":
            from dart_core.train.common import TrainConfig

            if args.lr is not None and not args.lr > 0:
                raise ValueError(f"--lr must be positive, got {args.lr}")
            budget = TrainConfig(
                window=args.window, batch_windows=args.batch_windows, eval_windows=args.eval_windows,
                seed=args.seed, threads=args.threads, resume=args.resume, progress=not args.no_progress,
                checkpoint_every=100, time_budget_s=args.time_budget * 60 if args.time_budget else None,
                eval_every=args.eval_every, patience=args.patience, train_windows=args.train_windows,
                **({"lr": args.lr} if args.lr is not None else {}))
            run_fit(args.target, args.data, args.out, work=args.work or args.out / ".work", only=args.only,
                    steps={"dart": args.dart_steps, "eagle3": args.eagle3_steps, "dflash": args.dflash_steps},
                    dflash_block=args.dflash_block_size, draft_vocab=args.draft_vocab,
                    intermediate=args.drafter_intermediate, budget=budget, device=args.device, dtype=args.dtype,
                    online=args.online, command=command, eval_data=args.eval_data, init_from=args.init_from,
                    max_tokens=args.fit_tokens)
        elif args.command == "ngram-store":
            from dart_core.train.ngram_choice import cmd_ngram

            cmd_ngram(args)
        else:
            raise AssertionError(f"unhandled command {args.command}")  # argparse admits only COMMANDS
    except (DistillError, ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0
