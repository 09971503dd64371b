"""models.py and the generate CLI: one shared target with both drafters from local dirs in the published formats,
the upstream-compatible DartModel facade, N-gram repo layouts, clear offline errors."""

from __future__ import annotations

import json
import random
from pathlib import Path

import helpers_ckpt as C
import helpers_trie as T
import pytest
import torch

from dart_core.arena import load_arena, load_ngram, load_target, stop_token_ids
from dart_core.compat import DartModel
from dart_core.generate.__main__ import main as cli
from dart_core.loading.hub import HubFileError
from dart_core.ngram.store import NgramStore


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bundle")
    paths = C.write_tiny_bundle(root)
    seqs = [[random.Random(i).randrange(97) for _ in range(40)] for i in range(30)]
    (root / "ngram").mkdir()
    NgramStore.build(seqs, order=3).save(root / "ngram" / "small.ngram")
    paths["ngram"] = root / "ngram"
    return paths


def test_facade_generates_like_hf(bundle: dict[str, Path]) -> None:
    model = DartModel.from_pretrained(
        base_model_name_or_path=str(bundle["target"]), dart_model_name_or_path=str(bundle["dart"]),
        ngram_model_name_or_path=str(bundle["ngram"]), is_small_ngram=True,
        eagle3_model_name_or_path=str(bundle["eagle3"]), torch_dtype=torch.float32, low_cpu_mem_usage=True,
    ).to("cpu")
    model.eval()
    ids = model.tokenizer("w5 w6 w7 w8 w9", return_tensors="pt", add_special_tokens=False).input_ids
    hf = model.arena.target.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                           max_new_tokens=24, min_new_tokens=24)
    for out in (model.dart_generate(ids, max_new_token_num=24), model.eagle3_generate(ids, max_new_token_num=24),
                model.ar_generate(ids, max_new_token_num=24)):
        assert out.shape == (1, ids.shape[1] + 24)
        assert out.tolist() == hf.tolist()
    sampled = model.dart_generate(ids, temperature=0.8, top_p=0.9, top_k=20, max_new_token_num=10, seed=3)
    again = model.dart_generate(ids, temperature=0.8, top_p=0.9, top_k=20, max_new_token_num=10, seed=3)
    assert sampled.tolist() == again.tolist()  # seeded sampling is reproducible: fixed trees, none cut
    assert all(s.tree_size == s.drafted_size for s in model.last_steps if s.drafted_size)
    # the model-free racers load with every target (N-gram only with the store)
    assert model.arena.store is not None
    assert model.arena.methods == ["dart", "eagle3", "prompt-lookup", "ngram-only", "suffix", "ar"]
    assert model.prompt_lookup_generate(ids, max_new_token_num=24).tolist() == hf.tolist()


def test_cli_runs_every_loaded_method(bundle: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code = cli(["--base", str(bundle["target"]), "--dart", str(bundle["dart"]), "--eagle3", str(bundle["eagle3"]),
                "--ngram", str(bundle["ngram"]), "--small-ngram", "--prompt", "w1 w2 w3 w4", "--raw",
                "--max-new-tokens", "20", "--json", "--device", "cpu"])
    assert code == 0
    out = capsys.readouterr().out
    rows = json.loads(out[out.index("[\n") :])
    assert [r["method"] for r in rows] == ["dart", "eagle3", "prompt-lookup", "ngram-only", "suffix", "ar"]
    assert all(r["matches_ar"] for r in rows[:5]) and all(r["tokens"] == 20 for r in rows)
    assert "=== dart ===" in out and rows[5]["tau"] == 1.0


def test_cli_errors(bundle: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["--base", str(bundle["target"]), "--prompt", "w1", "--methods", "dart", "--raw"]) == 2
    assert "not loaded" in capsys.readouterr().err
    assert cli(["--base", "/nonexistent/dir", "--prompt", "x"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_offline_hub_miss_is_clear(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(HubFileError, match=r"config\.json of Hub repo Qwen/Qwen3-1\.7B.*HF_HUB_OFFLINE"):
        load_target("Qwen/Qwen3-1.7B", device="cpu")


def test_ngram_layouts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DART_ARENA_CACHE", str(tmp_path / "cache"))
    seqs = [[1, 2, 3, 4], [2, 3, 5]]
    T.RefTrie.build(seqs, 3).write(tmp_path / "small.trie")
    T.RefTrie.build([*seqs, [7, 8, 9]], 3).write(tmp_path / "full.trie")
    assert load_ngram(tmp_path, small=True, progress=False).num_tokens == 7
    assert load_ngram(tmp_path, progress=False).num_tokens == 10
    NgramStore.build([[9, 9]], order=2).save(tmp_path / "small.ngram")  # ours wins: no conversion
    assert load_ngram(tmp_path, small=True).order == 2
    assert load_ngram(tmp_path / "full.trie", progress=False).num_tokens == 10
    (tmp_path / "empty").mkdir()
    with pytest.raises(HubFileError, match=r"neither full\.ngram nor full\.trie"):
        load_ngram(tmp_path / "empty")
    with pytest.raises(HubFileError, match="does not exist"):
        load_ngram(tmp_path / "missing")


def test_stop_tokens_and_drafters_reading_different_layers(bundle: dict[str, Path], tmp_path: Path) -> None:
    """Each drafter reads its own target layers (DART the default rule, this EAGLE-3 head its aux ids), so a pair
    whose layers differ shares one target, and both stay lossless."""
    arena = load_arena(bundle["target"], dart=bundle["dart"], device="cpu", progress=False)
    assert stop_token_ids(arena.tokenizer) == [0, 1]  # EOS + <|im_end|>
    cfg = C.drafter_config("eagle3", vocab=97, hidden=32, eagle_config={"eagle_aux_hidden_state_layer_ids": [0, 2, 4]})
    odd = C.write_drafter(tmp_path / "odd", cfg, C.random_drafter_state(cfg, kind="eagle3"))
    both = load_arena(bundle["target"], dart=bundle["dart"], eagle3=odd, device="cpu", progress=False)
    assert both.drafters["eagle3"].feature_layers == (1, 3, 5)
    assert both.drafters["dart"].feature_layers == both.target.feature_layers != (1, 3, 5)
    ids = list(range(5, 20))
    want = [t for s in both.stream("ar", ids, max_new_tokens=12, stop_token_ids=()) for t in s.tokens]
    for m in ("dart", "eagle3"):
        assert [t for s in both.stream(m, ids, max_new_tokens=12, stop_token_ids=()) for t in s.tokens] == want
