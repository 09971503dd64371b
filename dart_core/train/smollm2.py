"""The recipe of the default bundle (``assets/smollm2``: SmolLM2-135M-Instruct and its three drafters), built on the
any-target training stages of :mod:`dart_core.train.any_target`: which prompts, sizes and budgets, in which stages,
recorded in the bundle's ``recipe.json`` and model card.

    python -m dart_core.train smollm2 --out assets/smollm2 [--quick] [--stages distill,fit --gpu --device cuda]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

from dart_core.train.any_target import (
    add_common_options,
    add_fit_data_options,
    load_training_target,
    read_recipe,
    record_stage,
    run_distill,
    run_fit,
    run_vocab,
    target_text_config,
)

# The SmolLM2 bundle's recipe: the seeded chat prompt set's first ``train_prompts`` prompts (over ``prompt_rounds``
# rounds of the generator: the first round's prompts come first, as the bundle before answered them) answered by the
# target (follow-up turns included), held-out prompts in two topic-disjoint roles (``eval``: the held-out loss that
# stops training; ``bench``: the bundle's prompts.jsonl), and the three drafters trained for the same wall clock. Sizes
# and the decisions below were measured on a 2-core CPU (see the bundle's README and recipe.json; the figures:
# docs/benchmarks.md#measurements-behind-design-choices). Draft vocabulary 4,096: it covers most of the answers'
# tokens, and 8,192, which covers more, adds 4.7 MB to each of the DART and EAGLE-3 heads and takes the bundle past
# its 40 MB. MLP 1,024: 1,536 made a DART training step slower and adds 1.8 MB per head.
RECIPE = {
    "target": "smollm2",
    "train_prompts": 64000,
    "prompt_rounds": 4,
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
    "ngram_orders": [3, 4, 5],  # candidates, chosen by DART's measured τ on held-out prompts (ngram_choice)
    # over 20 M tokens order 4 fits the bundle's budget only from min_count 6 and order 5 from 12: those race too
    "ngram_min_counts": [1, 2, 3, 4, 6, 8, 12],
    "ngram_prompts": 16,
    "ngram_new_tokens": 128,
    "ngram_fractions": [0.25, 0.5],  # τ against data size, with the chosen order and min_count
    "vocab_sizes": [2048, 4096, 8192],
    "fit_tokens": None,  # all of the data
    "train_windows": None,  # all of the training windows
    "lr": 1e-3,  # each drafter's peak learning rate
}
QUICK = {
    **RECIPE,
    "train_prompts": 6,
    "prompt_rounds": 1,
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
    "ngram_orders": [2, 3],
    "ngram_min_counts": [1],
    "ngram_prompts": 2,
    "ngram_new_tokens": 8,
    "ngram_fractions": [0.5],
    "vocab_sizes": [64, 256],
}


STAGES = ("distill", "vocab", "fit", "ngram", "card")
BUNDLE_MAX_BYTES = 40_000_000  # the bundle in git; the N-gram store gets what the other files leave
CARD_HEADROOM_BYTES = 32_768  # the card and recipe.json grow after the store is chosen
# What a lent GPU changes (``--gpu``): the distillation batch and the training batch grow to fill the device, and the
# three drafters share a budget measured in the GPU's seconds; the data, vocabulary and losses are the recipe's own.
GPU_SIZES = {"distill_batch": 2048, "batch_windows": 64, "eval_every": 100, "time_budget_min": 2.0}


def hyperparameters(args: argparse.Namespace) -> dict[str, Any]:
    """The recipe's hyperparameters for this run: the full or quick set, the GPU sizes with ``--gpu``, then the
    explicit overrides (``--distill-batch``, ``--batch-windows``, ``--window``, ``--time-budget``, ``--eval-every``,
    ``--fit-tokens``, ``--train-windows``, ``--lr``)."""
    hp = dict(QUICK if args.quick else RECIPE)
    if args.gpu and not args.quick:
        hp.update(GPU_SIZES)
    for key, value in (("distill_batch", args.distill_batch), ("batch_windows", args.batch_windows),
                       ("window", args.window), ("time_budget_min", args.time_budget), ("eval_every", args.eval_every),
                       ("fit_tokens", args.fit_tokens), ("train_windows", args.train_windows),
                       ("lr", args.lr)):
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


def run(args: argparse.Namespace, command: str) -> int:
    """The embedded default bundle: prompts, the target's answers (training and held-out), the draft-vocabulary
    coverage behind its size, N-gram store, the three drafters on one time budget, model card. Every stage resumes
    (answered prompts, stored features and training checkpoints are kept in ``--work`` and ``OUT/<drafter>``);
    ``--stages`` runs some of them (a GPU distils and trains, a CPU builds the N-gram store and the card)."""
    from dart_core.data.prompts.chat_set import chat_set, heldout_roles
    from dart_core.data.prompts.topics import write_jsonl
    from dart_core.loading.bundle_digests import record_digests
    from dart_core.loading.wheel_fetch import sha256_file
    from dart_core.train.distill import distill_runs
    from dart_core.train.model_card import write_model_card

    stages = parse_stages(args.stages)
    hp = hyperparameters(args)
    out: Path = args.out
    work: Path = args.work or (out.parent / f".{out.name}-work")
    t_all = time.perf_counter()
    train = chat_set(seed=args.seed, n=hp["train_prompts"], rounds=hp["prompt_rounds"])
    evals, bench = heldout_roles(chat_set(heldout=True, seed=args.seed), n_eval=hp["eval_prompts"],
                                 n_bench=hp["bench_prompts"])
    write_jsonl(work / "train_prompts.jsonl", train)
    write_jsonl(work / "eval_prompts.jsonl", evals)
    write_jsonl(out / "prompts.jsonl", [{"id": p["id"], "category": p["category"], "prompt": p["prompt"]}
                                       for p in bench])
    (out / "bundle.json").write_text(json.dumps({"target": hp["target"], "mode": "chat"}, indent=1) + "\n")
    record_stage(out, "prompts", {
        "generator": "dart_core.data.prompts.chat_set.chat_set", "seed": args.seed, "rounds": hp["prompt_rounds"],
        "set_size": len(chat_set(seed=args.seed, rounds=hp["prompt_rounds"])), "train": len(train),
        "with_followup": sum(1 for p in train if p.get("followups")),
        "eval": len(evals), "bench": len(bench),
        "split": "by topic (stable hash): no held-out topic is in training; eval and bench topics are disjoint"},
        command)
    loaded = load_training_target(hp["target"], args.device, args.dtype) if stages & {"distill", "fit"} else None
    if "distill" in stages:
        opts = {"device": args.device, "dtype": args.dtype, "max_new_tokens": hp["max_new_tokens"],
                "batch_size": hp["distill_batch"], "temperature": 0.0, "seed": args.seed, "threads": args.threads,
                "progress": not args.no_progress, "loaded": loaded}
        for stage, prompts, name in (("distill", train, "distill.jsonl"),
                                     ("distill_eval", evals, "eval_distill.jsonl")):
            rec = run_distill(hp["target"], prompts, work / name, **opts)
            if not rec["answered"] and stage in read_recipe(out).get("stages", {}):
                continue  # a resumed run with nothing left to answer: the record of the runs that did stands
            rec["file"]["sha256"] = sha256_file(work / name)  # the data stays out of git: this identifies it
            rec["all_runs"] = distill_runs(work / name)  # a resumable stage: every run's clock and tokens
            rec["device_name"] = _device_name(args.device)
            record_stage(out, stage, rec, command)
    if "vocab" in stages:
        record_stage(out, "vocab", run_vocab(target_text_config(hp["target"]), work / "distill.jsonl",
                                        work / "eval_distill.jsonl", hp["vocab_sizes"]), command)
    if "fit" in stages:
        from dart_core.train.common import TrainConfig

        budget = TrainConfig(window=hp["window"], batch_windows=hp["batch_windows"],
                             eval_windows=hp["eval_windows"], seed=args.seed, threads=args.threads, resume=True,
                             progress=not args.no_progress, checkpoint_every=100, eval_every=hp["eval_every"],
                             patience=hp["patience"], train_windows=hp["train_windows"], lr=hp["lr"],
                             time_budget_s=hp["time_budget_min"] * 60 if hp["time_budget_min"] else None)
        run_fit(hp["target"], work / "distill.jsonl", out, work=work, only=None, steps=hp["steps"],
                draft_vocab=hp["draft_vocab"], intermediate=hp["drafter_intermediate"], budget=budget,
                device=args.device, dtype=args.dtype, loaded=loaded, command=command,
                dflash_block=hp["dflash_block"], eval_data=work / "eval_distill.jsonl", max_tokens=hp["fit_tokens"],
                online=args.online, init_from=args.init_from)
        # the drafters' hyperparameters are this run's: a later run of other stages (the card) keeps them
        record_stage(out, "fit", {"hyperparameters": hp, "device_name": _device_name(args.device),
                                  "online": bool(args.online),
                                  "init_from": str(args.init_from) if args.init_from else None}, command)
    if "ngram" in stages:
        record_stage(out, "ngram", choose_store(out, work, hp, args), command)
    if "card" in stages:
        data = record_stage(out, "bundle", {"hyperparameters": hp, "quick": bool(args.quick),
                                       "total_seconds": round(time.perf_counter() - t_all, 1)}, command)
        write_model_card(out, data)
        record_digests(out)  # every model file's sha256 into bundle.json, checked when the bundle is opened
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"[smollm2] stages {','.join(s for s in STAGES if s in stages)}: bundle {size / 1e6:.1f} MB in "
          f"{out} ({time.perf_counter() - t_all:.0f} s); work files in {work}")
    return 0


def choose_store(out: Path, work: Path, hp: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """The N-gram store over all the distillation data, its order and min_count chosen by the τ the bundle's
    store-searching racers measure with each candidate on the first held-out ``eval`` prompts (float32, greedy),
    within what the bundle's 40 MB leave it; τ against data size over seeded samples of the conversations."""
    from dart_core.train.distill import read_prompt_records, read_sequences
    from dart_core.train.ngram_choice import SweepPlan, choose, store_racers, table

    t0 = time.perf_counter()
    others = sum(p.stat().st_size for p in out.rglob("*") if p.is_file() and (out / "ngram") not in p.parents)
    plan = SweepPlan(orders=tuple(hp["ngram_orders"]), min_counts=tuple(hp["ngram_min_counts"]),
                     max_bytes=BUNDLE_MAX_BYTES - others - CARD_HEADROOM_BYTES, max_new_tokens=hp["ngram_new_tokens"],
                     fractions=tuple(hp["ngram_fractions"]), seed=args.seed)
    record = choose(read_sequences(work / "distill.jsonl"),
                    read_prompt_records(work / "eval_prompts.jsonl", hp["ngram_prompts"]), plan,
                    out / "ngram" / "small.ngram", target=hp["target"], drafters=store_racers(out), chat=True,
                    device=args.device, dtype="float32", threads=args.threads, progress=not args.no_progress)
    print("\n".join(["[smollm2] N-gram stores:", *table(record)]))
    chosen = {k: v for k, v in record["chosen"].items() if k not in ("path", "tau")}
    for c in record["candidates"]:
        c.pop("path", None)
    return {**chosen, "seconds": round(time.perf_counter() - t0, 1), "sweep": record}


def parse_stages(text: str) -> set[str]:
    """``--stages``: a comma-separated subset of :data:`STAGES` (``all``: every one); an unknown name is
    refused, naming the known ones."""
    names = {s.strip() for s in text.split(",") if s.strip()}
    if names == {"all"}:
        return set(STAGES)
    unknown = sorted(names - set(STAGES))
    if unknown or not names:
        raise ValueError(f"unknown stage(s) {', '.join(unknown) or '(none given)'}: pick from "
                         f"{', '.join(STAGES)} or all")
    return names


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m dart_core.train smollm2",
                                description="Prompts, the target's answers, N-gram store, DART drafter, EAGLE-3 "
                                            "head, DFlash drafter and model card for the packaged "
                                            "SmolLM2-135M-Instruct; every stage resumes.")
    p.add_argument("--out", required=True, type=Path, help="bundle dir (e.g. assets/smollm2)")
    p.add_argument("--work", type=Path, default=None,
                   help="where distillation data and features go (default: .<out name>-work beside OUT)")
    p.add_argument("--quick", action="store_true", help="a tiny variant of every stage, for CI (seconds)")
    p.add_argument("--stages", default="all",
                   help="comma-separated stages to run: " + ", ".join(STAGES) + " (default: all; the prompt "
                        "files are always written). A GPU can distil and fit while a CPU builds the N-gram store and "
                        "the card: --stages distill,fit there, --stages vocab,ngram,card here")
    p.add_argument("--gpu", action="store_true",
                   help="sizes for a lent GPU: distillation batch " + str(GPU_SIZES["distill_batch"]) + ", "
                        + str(GPU_SIZES["batch_windows"]) + " windows a training step, a held-out evaluation "
                        "every " + str(GPU_SIZES["eval_every"]) + " steps, " + f"{GPU_SIZES['time_budget_min']:g}"
                        + " minutes per drafter (use with --device cuda)")
    p.add_argument("--distill-batch", type=int, default=None, help="prompts answered together (overrides the recipe)")
    p.add_argument("--batch-windows", type=int, default=None, help="training windows per step (overrides the recipe)")
    p.add_argument("--window", type=int, default=None, metavar="N",
                   help=f"tokens per training window (default {RECIPE['window']}); each drafter's context_window "
                        "follows from it: the most real rows it attends to when drafting, as in training")
    p.add_argument("--time-budget", type=float, default=None, metavar="MIN",
                   help="wall-clock minutes per drafter, the same for each (overrides the recipe's)")
    p.add_argument("--eval-every", type=int, default=None,
                   help="training steps between held-out evaluations (overrides the recipe's)")
    add_fit_data_options(p)
    p.add_argument("--online", action="store_true",
                   help="fit without stored features: the target runs inside every training step (for data whose "
                        "features, about 4.6 KB a token, exceed the disk: 15 M tokens take about 70 GB)")
    add_common_options(p)
    return p


def main(argv: list[str]) -> int:
    """``python -m dart_core.train smollm2 ARGS``: a bad option or stage is refused with exit status 2."""
    from dart_core.train.distill import DistillError

    args = build_parser().parse_args(argv)
    try:
        return run(args, "python -m dart_core.train smollm2 " + " ".join(argv))
    except (DistillError, ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
