"""The bundle recipe (``dart_core.train``): tokenizer, split and prompts, the target loop, the quick ``all`` run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from dart_core.data.corpus import is_heldout, module_key, split_stdlib, stdlib_root
from dart_core.train.data import EOS, encode_corpus, heldout_prompts, split_texts, train_tokenizer, write_prompts

TINY = {"hidden_size": 32, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
        "intermediate_size": 64, "max_position_embeddings": 128}


@pytest.fixture(scope="module")
def split() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    return split_texts()


@pytest.fixture(scope="module")
def small_texts(split) -> list[str]:
    return [t for _, t in split[0][::60]]


@pytest.fixture(scope="module")
def tok(small_texts):
    return train_tokenizer(small_texts, 400, seed=0)


def test_tokenizer_deterministic_and_round_trips(tok, small_texts) -> None:
    again = train_tokenizer(small_texts, 400, seed=0)
    assert tok.backend_tokenizer.to_str() == again.backend_tokenizer.to_str()
    assert len(tok) == 400
    assert tok.eos_token == EOS and tok.convert_tokens_to_ids(EOS) == tok.eos_token_id
    for text in ["def f(x):\n    return 'héllo ☃ 日本' + x  # ü ß 🐍\n\t\r\n", "  leading spaces\n", ""]:
        ids = tok.encode(text)
        assert tok.decode(ids) == text
    seqs = encode_corpus(tok, small_texts[:3])
    assert all(s.dtype == np.int32 and s[-1] == tok.eos_token_id for s in seqs)
    assert tok.decode(seqs[0][:-1].tolist()) == small_texts[0]


def test_split_and_prompts_deterministic_heldout_only(tok, split, tmp_path: Path) -> None:
    train, heldout = split
    assert split_texts()[1] == heldout
    _, files_held = split_stdlib()
    assert [p.relative_to(stdlib_root()).as_posix() for p in files_held] == [r for r, _ in heldout]
    assert not {r for r, _ in train} & {r for r, _ in heldout}
    a = heldout_prompts(tok, heldout, n=10, prompt_tokens=64, seed=0)
    b = heldout_prompts(tok, heldout, n=10, prompt_tokens=64, seed=0)
    assert a == b and len(a) == 10
    assert [p["id"] for p in a] == list(range(10))
    for p in a:
        assert is_heldout(module_key(stdlib_root() / p["source"]))
        assert p["prompt"] in dict(heldout)[p["source"]]
        assert p["prompt"].endswith("\n") and len(p["ids"]) <= 64
        assert any(line.lstrip().startswith(("def ", "class ", "async def ")) for line in p["prompt"].splitlines())
    path = write_prompts(tmp_path / "p.jsonl", a)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert rows == [{"id": p["id"], "source": p["source"], "prompt": p["prompt"]} for p in a]


def test_train_target_learns_saves_and_loads(tok, small_texts, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from dart_core.arena import load_target
    from dart_core.train.toy_target import WindowSampler, lm_loss, lr_at, train_target

    assert lr_at(0, steps=100, lr=1.0, warmup=10) == pytest.approx(0.1)
    assert lr_at(10, steps=100, lr=1.0, warmup=10) == pytest.approx(1.0)
    assert lr_at(100, steps=100, lr=1.0, warmup=10) == pytest.approx(0.1)

    seqs = encode_corpus(tok, small_texts)
    out = tmp_path / "target"
    rec = train_target(seqs, tok, out, steps=25, batch_size=4, seq_len=32, lr=1e-2, warmup=2, seed=0, threads=1,
                       log_every=5, config_overrides=TINY, progress=False)
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert len(log) == 5 and log[-1]["step"] == 25
    assert log[-1]["loss"] < log[0]["loss"]
    assert rec["tokens_seen"] == 25 * 4 * 32 and rec["saved_dtype"] == "float16"

    # Loss decreases on a fixed batch, from the saved weights versus a fresh init.
    batch = WindowSampler(seqs, 32, seed=123).batch(4)
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    assert model.config.model_type == "qwen3" and model.config.num_hidden_layers >= 8
    assert next(model.parameters()).dtype == torch.float32
    assert model.config.eos_token_id == tok.eos_token_id == model.generation_config.eos_token_id
    fresh = type(model)(model.config)
    with torch.no_grad():
        assert lm_loss(model, batch).item() < lm_loss(fresh, batch).item() - 0.5
    tok2 = AutoTokenizer.from_pretrained(out)
    assert tok2.eos_token == EOS and tok2.encode("x = 1\n") == tok.encode("x = 1\n")

    target, tok3 = load_target(out, device="cpu")
    assert tok3.eos_token_id == tok.eos_token_id and target is not None


def test_all_quick_layout(tmp_path: Path) -> None:
    from dart_core.ngram.store import NgramStore

    out = tmp_path / "bundle"
    r = subprocess.run([sys.executable, "-m", "dart_core.train", "all", "--quick", "--no-progress", "--threads", "1",
                        "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    for stage in ("[tokenizer]", "[target]", "[ngram]", "[all]"):
        assert stage in r.stdout
    assert (out / "target" / "model.safetensors").is_file() and (out / "target" / "tokenizer.json").is_file()
    assert (out / "README.md").read_text().count("## Measured figures") == 1
    recipe = json.loads((out / "recipe.json").read_text())
    assert recipe["python_version"] == ".".join(map(str, sys.version_info[:3]))
    assert recipe["quick"] is True and recipe["seed"] == 0
    assert set(recipe["stages"]) >= {"tokenizer", "target", "ngram", "dart", "eagle3"}
    assert recipe["stages"]["target"]["seconds"] > 0 and recipe["bundle_bytes"] > 0
    assert recipe["split"]["heldout_modules"]
    prompts = [json.loads(line) for line in (out / "prompts.jsonl").read_text().splitlines()]
    assert prompts and all(set(p) == {"id", "source", "prompt"} for p in prompts)
    store = NgramStore.load(out / "ngram" / "small.ngram", progress=False)
    store.verify()
    assert store.order == 3 and store.num_tokens > 0
    store.close()
    from dart_core.drafters.dart import DartDrafter
    from dart_core.drafters.eagle3 import Eagle3Drafter

    for name, cls in (("dart", DartDrafter), ("eagle3", Eagle3Drafter)):
        drafter = cls.from_pretrained(out / name, target=out / "target", dtype=torch.float32)
        assert drafter.config.vocab_size == json.loads((out / "target" / "config.json").read_text())["vocab_size"]
    # the drafters alone, again, on the existing target: recipe.json keeps the other stages
    r = subprocess.run([sys.executable, "-m", "dart_core.train", "drafters", "--quick", "--no-progress", "--threads",
                        "1", "--drafter-steps", "2", "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    stages = json.loads((out / "recipe.json").read_text())["stages"]
    assert stages["dart"]["steps"] == 2 and stages["eagle3"]["steps"] == 2 and "target" in stages
    # --only retrains one head; the other's weights and record stay as they were
    eagle_bytes = (out / "eagle3" / "model.safetensors").read_bytes()
    r = subprocess.run([sys.executable, "-m", "dart_core.train", "drafters", "--quick", "--no-progress", "--threads",
                        "1", "--drafter-steps", "3", "--only", "dart", "--out", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    recipe = json.loads((out / "recipe.json").read_text())
    assert recipe["stages"]["dart"]["steps"] == 3 and recipe["stages"]["eagle3"]["steps"] == 2
    assert (out / "eagle3" / "model.safetensors").read_bytes() == eagle_bytes
    assert recipe["history"][-1].endswith("--only dart --out " + str(out)) and len(recipe["history"]) == 3


def test_help_lists_stages() -> None:
    r = subprocess.run([sys.executable, "-m", "dart_core.train", "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0
    for word in ("tokenizer", "target", "ngram", "all", "--quick", "--out"):
        assert word in r.stdout
