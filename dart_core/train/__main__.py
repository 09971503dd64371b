"""``python -m dart_core.train``: drafter training for any HF causal LM, and the recipes of the bundles.

For any target (Hub id, local dir, or ``smollm2``, the packaged default), by self-distillation:

    python -m dart_core.train distill --target T --prompts P.jsonl --out WORK/distill.jsonl
    python -m dart_core.train fit --target T --data WORK/distill.jsonl --out DIR      # DIR/{dart,eagle3,dflash}
    python -m dart_core.train smollm2 --out assets/smollm2 [--quick]                  # the default bundle

(``python -m dart_core.train distill --help`` etc. for their options.) The stdlib toy bundle ``assets/tiny`` (a
6.8 M code model the tests use for speed) is rebuilt by the stages below:
``python -m dart_core.train {tokenizer,target,ngram,drafters,all} --out DIR [--quick]``.

Layout written under DIR: ``target/`` (HF model + tokenizer), ``ngram/small.ngram``, ``prompts.jsonl`` (held-out
benchmark prompts), ``recipe.json`` (Python version, split, seeds, hyperparameters, timings, sizes, the history
of commands); ``drafters`` (and ``all``) add ``dart/``, ``eagle3/`` and a ``README.md`` model card.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from dart_core.data.corpus import python_version
from dart_core.options import add_threads_argument

# Full-scale defaults (measured on the 2-core CPU floor machine; see docs/training.md#the-stdlib-toy-assetstiny).
FULL = {
    "vocab_size": 5120,
    "target_steps": 1600,
    "batch_size": 16,
    "seq_len": 256,
    "lr": 3e-3,
    "warmup": 60,
    "ngram_min_count": 4,
    "prompts": 64,
    "prompt_tokens": 128,
    "config": {},
    # Drafters: same data, features and training-time budget for DART and EAGLE-3 (a fair head-to-head). An
    # EAGLE-3 step (3 unrolled TTT passes) costs more than a DART step on this CPU, so in the same seconds DART
    # takes more steps: 2400 vs 1200 steps of 8 windows, the ratio of their measured step times
    # (measured: docs/benchmarks.md#measurements-behind-design-choices).
    "draft_vocab": 2048,
    "drafter_steps": {"dart": 2400, "eagle3": 1200},
    "drafter_batch_windows": 8,
    "drafter_window": 256,
}
# --quick: every stage in seconds, for tests and smoke runs (a subset of files, a tiny model).
QUICK = {
    "vocab_size": 512,
    "target_steps": 12,
    "batch_size": 4,
    "seq_len": 64,
    "lr": 3e-3,
    "warmup": 2,
    "ngram_min_count": 1,
    "prompts": 8,
    "prompt_tokens": 64,
    "config": {"hidden_size": 64, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32,
               "intermediate_size": 128, "max_position_embeddings": 256},
    "file_stride": 40,
    "draft_vocab": 256,
    "drafter_steps": {"dart": 3, "eagle3": 3},
    "drafter_batch_windows": 2,
    "drafter_window": 32,
}


def _dir_bytes(p: Path) -> int:
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.exists() else 0


class Recipe:
    """``recipe.json``: each stage merges its record, so stages can run separately and still leave one file."""

    def __init__(self, out: Path, args: argparse.Namespace, hp: dict[str, Any]) -> None:
        self.path = out / "recipe.json"
        self.data: dict[str, Any] = json.loads(self.path.read_text()) if self.path.exists() else {}
        self.data.update({
            "python_version": python_version(),
            "platform": platform.platform(),
            "quick": bool(args.quick),
            "seed": args.seed,
            "command": "python -m dart_core.train " + " ".join(sys.argv[1:]),
        })
        self.data.setdefault("history", []).append(self.data["command"])  # every run that shaped this bundle
        self.data.setdefault("stages", {})
        self.hp = hp

    def stage(self, name: str, record: dict[str, Any]) -> None:
        self.data["stages"][name] = record
        self.save()

    def save(self) -> None:
        import torch
        import transformers

        self.data["versions"] = {"torch": torch.__version__, "transformers": transformers.__version__}
        self.path.write_text(json.dumps(self.data, indent=1, sort_keys=False) + "\n")


def _texts(hp: dict[str, Any]) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    from dart_core.train.data import split_texts

    train, heldout = split_texts()
    stride = hp.get("file_stride", 1)
    return train[::stride], heldout


def _tokenizer(out: Path) -> Any:
    from transformers import AutoTokenizer

    if not (out / "target" / "tokenizer.json").exists():
        raise SystemExit(f"no tokenizer in {out / 'target'}: run `python -m dart_core.train tokenizer --out {out}`")
    return AutoTokenizer.from_pretrained(out / "target")


def _sequences(out: Path, hp: dict[str, Any]) -> list[Any]:
    from dart_core.train.data import encode_corpus

    tok = _tokenizer(out)
    train, _ = _texts(hp)
    return encode_corpus(tok, [t for _, t in train])


def stage_tokenizer(out: Path, args: argparse.Namespace, hp: dict[str, Any], recipe: Recipe) -> None:
    from dart_core.train.data import heldout_prompts, split_summary, train_tokenizer, write_prompts

    t0 = time.perf_counter()
    train, heldout = _texts(hp)
    tok = train_tokenizer([t for _, t in train], hp["vocab_size"], seed=args.seed)
    (out / "target").mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(out / "target")
    prompts = heldout_prompts(tok, heldout, n=hp["prompts"], prompt_tokens=hp["prompt_tokens"], seed=args.seed)
    write_prompts(out / "prompts.jsonl", prompts)
    dt = time.perf_counter() - t0
    recipe.data["split"] = {**split_summary(), "train_files_used": len(train)}
    recipe.stage("tokenizer", {"type": "byte-level BPE (tokenizers)", "vocab_size": len(tok), "eos": tok.eos_token,
                               "min_frequency": 2, "prompts": len(prompts), "prompt_tokens": hp["prompt_tokens"],
                               "seconds": round(dt, 2)})
    print(f"[tokenizer] vocab {len(tok)} from {len(train)} files, {len(prompts)} held-out prompts "
          f"-> {out / 'target'}, {out / 'prompts.jsonl'} ({dt:.1f} s)")


def stage_target(out: Path, args: argparse.Namespace, hp: dict[str, Any], recipe: Recipe) -> None:
    from dart_core.train.toy_target import train_target

    t0 = time.perf_counter()
    tok = _tokenizer(out)
    seqs = _sequences(out, hp)
    steps = args.steps if args.steps is not None else hp["target_steps"]
    rec = train_target(seqs, tok, out / "target", steps=steps, batch_size=hp["batch_size"], seq_len=hp["seq_len"],
                       lr=hp["lr"], warmup=min(hp["warmup"], steps), seed=args.seed, threads=args.threads,
                       config_overrides=hp["config"], progress=not args.no_progress)
    rec["corpus_tokens"] = int(sum(len(s) for s in seqs))
    dt = time.perf_counter() - t0
    rec["stage_seconds"] = round(dt, 2)
    recipe.stage("target", rec)
    print(f"[target] {rec['parameters'] / 1e6:.2f} M params, {steps} steps, final loss {rec['final_loss']:.3f}, "
          f"{rec['tokens_per_s']:,.0f} tok/s, {rec['bytes'] / 1e6:.1f} MB -> {out / 'target'} ({dt:.1f} s)")


def stage_ngram(out: Path, args: argparse.Namespace, hp: dict[str, Any], recipe: Recipe) -> None:
    from dart_core.ngram.store import NgramStore, build_to_file

    t0 = time.perf_counter()
    seqs = _sequences(out, hp)
    path = out / "ngram" / "small.ngram"
    path.parent.mkdir(parents=True, exist_ok=True)
    min_count = args.min_count if args.min_count is not None else hp["ngram_min_count"]
    build_to_file(seqs, path, order=3, min_count=min_count, progress=not args.no_progress)
    store = NgramStore.load(path, progress=False)
    store.verify()
    info = {"order": store.order, "num_nodes": store.num_nodes, "level_sizes": store.level_sizes}
    store.close()
    dt = time.perf_counter() - t0
    recipe.stage("ngram", {**info, "min_count": min_count, "sequences": "encoded training split",
                           "bytes": path.stat().st_size, "seconds": round(dt, 2)})
    print(f"[ngram] order 3, min_count {min_count}, {info['num_nodes']:,} nodes, "
          f"{path.stat().st_size / 1e6:.2f} MB -> {path} ({dt:.1f} s)")


def stage_drafters(out: Path, args: argparse.Namespace, hp: dict[str, Any], recipe: Recipe) -> None:
    from dart_core.train.dart import train_dart
    from dart_core.train.eagle3 import train_eagle3

    seqs = _sequences(out, hp)
    for name, fn in (("dart", train_dart), ("eagle3", train_eagle3)):
        if args.only and name != args.only:
            continue
        kwargs: dict[str, Any] = {
            "seed": args.seed,
            "steps": args.drafter_steps if args.drafter_steps is not None else hp["drafter_steps"][name],
            "draft_vocab_size": hp["draft_vocab"],
            "batch_windows": hp["drafter_batch_windows"],
            "window": hp["drafter_window"],
            "threads": args.threads,
        }
        t0 = time.perf_counter()
        rec = fn(out / "target", seqs, out / name, **kwargs)
        dt = time.perf_counter() - t0
        record = dict(rec) if isinstance(rec, dict) else {}
        record.update({"stage_seconds": round(dt, 2), "bytes": _dir_bytes(out / name), **kwargs})
        recipe.stage(name, record)
        print(f"[{name}] -> {out / name}, {record['bytes'] / 1e6:.1f} MB ({dt:.1f} s)")


def write_model_card(out: Path, recipe: Recipe) -> Path:
    """A README skeleton from ``recipe.json``; the benchmark fills the "Measured figures" section."""
    d = recipe.data
    st = d.get("stages", {})
    tgt = st.get("target", {})
    cfg = tgt.get("config", {})
    lines = [
        "# DART Arena embedded bundle" + (" (quick smoke build)" if d.get("quick") else ""),
        "",
        "A small Qwen3 target with a DART drafter, an EAGLE-3 head and an order-3 N-gram store, trained for it on",
        "the Python standard library sources (PSF licence), in the same formats as the published checkpoints.",
        "Rebuild: `python -m dart_core.train all --out assets/tiny --threads 2`. This bundle was made by:",
        "",
        *[f"- `{c}`" for c in d.get("history", [d.get("command", "")])],
        "",
        "## Data",
        f"- Python {d.get('python_version')} standard library; split by top-level module "
        f"(`dart_core.data.corpus.split_stdlib`): {d.get('split', {}).get('train_files_used')} training files, "
        f"{d.get('split', {}).get('heldout_files')} held-out files.",
        "- Held-out modules (benchmark prompts in `prompts.jsonl`): "
        f"{', '.join(d.get('split', {}).get('heldout_modules', []))}.",
        f"- Tokenizer: byte-level BPE, vocab {st.get('tokenizer', {}).get('vocab_size')}, EOS `<|endoftext|>`.",
        "",
        "## Recipe",
        f"- Target: `Qwen3ForCausalLM`, {cfg.get('num_hidden_layers')} layers, hidden {cfg.get('hidden_size')}, "
        f"{cfg.get('num_attention_heads')}×{cfg.get('head_dim')} heads ({cfg.get('num_key_value_heads')} KV), "
        f"MLP {cfg.get('intermediate_size')}, tied embeddings, {tgt.get('parameters', 0) / 1e6:.2f} M parameters, "
        "stored fp16.",
        f"- Training: {tgt.get('steps')} steps × {tgt.get('batch_size')} × {tgt.get('seq_len')} tokens, "
        f"{tgt.get('optimizer')}, lr {tgt.get('lr')} ({tgt.get('schedule')}, warmup {tgt.get('warmup')}), "
        f"clip {tgt.get('grad_clip')}, seed {tgt.get('seed')}; final training loss {tgt.get('final_loss', 0):.3f}.",
        f"- N-gram: order {st.get('ngram', {}).get('order')}, min_count {st.get('ngram', {}).get('min_count')}, "
        f"{st.get('ngram', {}).get('bytes', 0) / 1e6:.2f} MB.",
    ]
    for name in ("dart", "eagle3"):
        r = st.get(name, {})
        lines.append(f"- {name}: steps {r.get('steps', 'default')}, {r.get('bytes', 0) / 1e6:.1f} MB")
    lines += ["", "## Training time", "", "| stage | seconds |", "|---|---|"]
    for name, r in st.items():
        secs = r.get("stage_seconds", r.get("seconds"))
        if secs is not None:
            lines.append(f"| {name} | {secs:.0f} |")
    lines += ["", f"Machine: {d.get('platform')}, {tgt.get('threads')} threads; "
              f"target {tgt.get('tokens_per_s', 0) or 0:,.0f} tokens/s.", "",
              "## Measured figures", "", "_To be filled by the benchmark (acceptance length, speed-up per drafter)._",
              ""]
    path = out / "README.md"
    path.write_text("\n".join(lines))
    return path


STAGES = {"tokenizer": [stage_tokenizer], "target": [stage_target], "ngram": [stage_ngram],
          "drafters": [stage_drafters], "all": [stage_tokenizer, stage_target, stage_ngram, stage_drafters]}


def main(argv: list[str] | None = None) -> int:
    from dart_core.train import any_target, smollm2

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in any_target.COMMANDS:
        return any_target.main(argv)
    if argv and argv[0] == "smollm2":
        return smollm2.main(argv[1:])
    p = argparse.ArgumentParser(prog="python -m dart_core.train", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("stage", choices=[*any_target.COMMANDS, "smollm2", *STAGES],
                   help="distill / fit / smollm2: see above (each has its own --help). Stdlib toy: tokenizer: BPE + "
                        "held-out prompts; target: train the Qwen3 target (needs the tokenizer); "
                        "ngram: order-3 store over the training split (needs the tokenizer); drafters: the DART "
                        "drafter and EAGLE-3 head on the existing target (same data and budget), then the model card; "
                        "all: every stage in that order")
    p.add_argument("--out", required=True, type=Path, help="bundle directory (e.g. assets/tiny)")
    p.add_argument("--quick", action="store_true",
                   help="tiny, fast variant of every stage (a file subset, a tiny model, a few steps): seconds")
    p.add_argument("--seed", type=int, default=0, help="seed of every stage (default 0)")
    add_threads_argument(p, help="PyTorch CPU threads (default: PyTorch's, one per core)")
    p.add_argument("--steps", type=int, default=None,
                   help=f"target training steps (default {FULL['target_steps']}, --quick {QUICK['target_steps']})")
    p.add_argument("--min-count", type=int, default=None,
                   help=f"N-gram pruning: drop n-grams (n >= 2) seen fewer times (default {FULL['ngram_min_count']})")
    p.add_argument("--drafter-steps", type=int, default=None,
                   help=f"steps for both the DART and EAGLE-3 trainers (default: DART {FULL['drafter_steps']['dart']}, "
                        f"EAGLE-3 {FULL['drafter_steps']['eagle3']} steps of {FULL['drafter_batch_windows']} windows "
                        f"of {FULL['drafter_window']} tokens, equal training time; --quick 3)")
    p.add_argument("--only", choices=["dart", "eagle3"], default=None,
                   help="drafters stage: retrain only this head (the other keeps its weights and recipe record)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    args = p.parse_args(argv)

    hp = dict(QUICK if args.quick else FULL)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    recipe = Recipe(out, args, hp)
    recipe.data["hyperparameters"] = {**hp, **{k: v for k, v in vars(args).items()
                                              if k in ("steps", "min_count", "drafter_steps", "threads")}}
    t0 = time.perf_counter()
    for fn in STAGES[args.stage]:
        fn(out, args, hp, recipe)
    if args.stage in ("all", "drafters"):
        if args.stage == "all":
            recipe.data["total_seconds"] = round(time.perf_counter() - t0, 2)
        recipe.data["bundle_bytes"] = _dir_bytes(out)
        recipe.save()
        card = write_model_card(out, recipe)
        from dart_core.loading.bundle_digests import record_digests

        record_digests(out)  # every model file's sha256 into bundle.json, checked when the bundle is opened
        print(f"[{args.stage}] {recipe.data['bundle_bytes'] / 1e6:.1f} MB in {out}, model card {card} "
              f"({time.perf_counter() - t0:.0f} s)")
    return 0


def shorten_openmp_spinning() -> None:
    """torch's OpenMP threads (GNU libgomp in its CPU wheels) spin for a while after every op before they sleep,
    and the distillation's native attention kernel starts its own threads between two ops: the spinning thread then
    holds the core the kernel needs (a decode step's attention took far longer,
    measured: docs/benchmarks.md#measurements-behind-design-choices).
    libgomp reads this once, as torch loads: the command line sets it before anything imports torch (this module's
    imports do not), and only for its own process; a value the user set stands."""
    os.environ.setdefault("GOMP_SPINCOUNT", "1000")


if __name__ == "__main__":
    shorten_openmp_spinning()
    raise SystemExit(main())
