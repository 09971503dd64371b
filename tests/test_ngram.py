"""NgramStore API and CLI: counting semantics vs a pure-Python reference, save/load, input validation, CLI."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import helpers_trie as H
import numpy as np
import pytest

from dart_core.ngram.__main__ import main as cli
from dart_core.ngram.store import NgramFormatError, NgramStore, build_to_file


def _bits(a: np.ndarray) -> list[int]:
    return np.asarray(a, dtype=np.float32).view(np.uint32).tolist()


@pytest.mark.parametrize("order", [1, 2, 3, 5])
def test_build_matches_reference_counts_and_probabilities(order: int) -> None:
    rng = random.Random(order)
    vocab = list(range(-3, 12))
    seqs = [*H.random_corpus(rng, 40, 30, vocab), [], [7], [7, 7, 7, 7, 7, 7]]
    store = NgramStore.build(seqs, order=order)
    ref = H.RefCounts(seqs, order)
    assert store.order == order
    assert store.num_tokens == sum(len(s) for s in seqs)
    for _ in range(300):
        ctx = [rng.choice(vocab) for _ in range(rng.randint(0, 5))]
        toks = [rng.choice([*vocab, 99, -(2**31)]) for _ in range(rng.randint(0, 30))]
        p, n = store.probability(ctx, toks)
        rp, rn = ref.probability(ctx, toks)
        assert p.dtype == np.float32 and n.dtype == np.int32
        assert _bits(p) == _bits(rp) and n.tolist() == list(rn)
        gram = [rng.choice(vocab) for _ in range(rng.randint(1, order))]
        assert store.count(gram) == ref.counts.get(tuple(gram), 0)


def test_probability_uses_float32_reciprocal() -> None:
    # count(c) = 7, count(c + x) = 3: float32(3) * (1 / float32(7)) differs from float32(3 / 7) in the last bit.
    store = NgramStore.build([[1, 5]] * 3 + [[1, 6]] * 4, order=2)
    p, n = store.probability([1], [5])
    assert n.tolist() == [1]
    expected = np.float32(3.0) * (np.float32(1.0) / np.float32(7.0))
    assert expected != np.float32(3.0) / np.float32(7.0)
    assert _bits(p) == _bits(np.array([expected]))


def test_backoff_and_no_unigram_fallback() -> None:
    store = NgramStore.build([[1, 2, 3], [9, 2, 4]], order=3)
    p, n = store.probability([1, 2], [3, 4, 1])
    assert n.tolist() == [2, 1, 0]  # "1 2 3" seen; "1 2 4" not, but "2 4" is; "2 1" never: no unigram fallback
    assert p.tolist() == [1.0, 0.5, 0.0]
    p, n = store.probability([], [3])
    assert p.tolist() == [0.0] and n.tolist() == [0]
    p, n = store.probability([8], [3])  # unseen context token
    assert n.tolist() == [0]


def test_save_load_roundtrip_and_verify(tmp_path: Path) -> None:
    seqs = H.random_corpus(random.Random(3), 50, 40, list(range(300)))
    store = NgramStore.build(seqs, order=3)
    path = store.save(tmp_path / "s.ngram")
    loaded = NgramStore.load(path, verify=True)
    assert loaded.info()["num_nodes"] == store.num_nodes
    assert path.read_bytes() == bytes(memoryview(store._buffer))
    direct = build_to_file(seqs, tmp_path / "d.ngram", order=3)
    assert direct.read_bytes() == path.read_bytes()
    ctx, toks = [1, 2], list(range(300))
    assert _bits(loaded.probability(ctx, toks)[0]) == _bits(store.probability(ctx, toks)[0])
    loaded.close()


def test_min_count_prunes_consistently() -> None:
    rng = random.Random(9)
    seqs = H.random_corpus(rng, 60, 40, list(range(25)))
    full = NgramStore.build(seqs, order=3)
    pruned = NgramStore.build(seqs, order=3, min_count=3)
    pruned.verify()  # count(p) >= sum(children) and root = sum(unigrams) still hold
    assert pruned.num_nodes < full.num_nodes and pruned.level_sizes[0] == full.level_sizes[0]
    ref = H.RefCounts(seqs, 3)
    for gram, c in ref.counts.items():
        want = c if (len(gram) == 1 or c >= 3) else 0
        assert pruned.count(list(gram)) == want, gram
    with pytest.raises(ValueError, match="min_count"):
        NgramStore.build(seqs, min_count=0)


def test_empty_store() -> None:
    store = NgramStore.build([], order=3)
    assert store.num_nodes == 1 and store.num_tokens == 0
    store.verify()
    p, n = store.probability([1], [1, 2])
    assert p.tolist() == [0.0, 0.0] and n.tolist() == [0, 0]


@pytest.mark.parametrize(
    ("seqs", "order", "match"),
    [
        ([[1, 2]], 0, "order"),
        ([[1, 2]], 9, "order"),
        ([[[1, 2]]], 3, "1-D"),
        ([[1.5, 2.0]], 3, "integer"),
        ([[2**31]], 3, "int32"),
    ],
)
def test_build_rejects_bad_input(seqs: list, order: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        NgramStore.build(seqs, order=order)


def test_probability_rejects_bad_input() -> None:
    store = NgramStore.build([[1, 2, 3]], order=3)
    with pytest.raises(ValueError, match="context"):
        store.probability([[1, 2]], [3])
    with pytest.raises(ValueError, match="int32"):
        store.probability([1], [2**40])


def test_load_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="not found"):
        NgramStore.load(tmp_path / "missing.ngram")
    empty = tmp_path / "empty.ngram"
    empty.write_bytes(b"")
    with pytest.raises(NgramFormatError):
        NgramStore.load(empty, cache_dir=tmp_path / "cache")
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"hello world, not a trie at all" * 3)
    with pytest.raises(NgramFormatError, match=r"nor a valid reference"):
        NgramStore.load(junk, cache_dir=tmp_path / "cache")
    good = NgramStore.build([[1, 2, 3]], order=3).save(tmp_path / "good.ngram")
    data = bytearray(good.read_bytes())
    (tmp_path / "short.ngram").write_bytes(bytes(data[:-8]))
    with pytest.raises(NgramFormatError, match="truncated"):
        NgramStore.load(tmp_path / "short.ngram")
    data[-9] ^= 0x10  # inside the last section: load (header only) passes, verify catches it
    (tmp_path / "flip.ngram").write_bytes(bytes(data))
    with pytest.raises(NgramFormatError, match="checksum"):
        NgramStore.load(tmp_path / "flip.ngram", verify=True)


# ---------------------------------------------------------------------------------------------------- CLI
def test_cli_build_pretokenized_info_query(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "ids.jsonl"
    src.write_text('{"input_ids": [1, 2, 3, 1, 2, 4]}\n\n[5, 1, 2]\n')
    out = tmp_path / "ids.ngram"
    assert cli(["build", str(src), "--pretokenized", "--append-eos", "0", "--out", str(out)]) == 0
    store = NgramStore.load(out)
    assert store.num_tokens == 11 and store.count([1, 2]) == 3 and store.count([2, 0]) == 1
    capsys.readouterr()
    assert cli(["info", str(out), "--verify", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["verified"] and info["order"] == 3 and info["num_nodes"] == store.num_nodes
    assert cli(["query", str(out), "--context", "1", "2", "--tokens", "3", "4", "7", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["token"], r["matched"]) for r in rows] == [(3, 2), (4, 2), (7, 0)]
    assert rows[0]["probability"] == pytest.approx(1 / 3)


def test_cli_build_npy(tmp_path: Path) -> None:
    np.save(tmp_path / "a.npy", np.array([4, 5, 6, 4, 5], dtype=np.int32))
    out = tmp_path / "a.ngram"
    assert cli(["build", str(tmp_path / "a.npy"), "--pretokenized", "--order", "2", "--out", str(out)]) == 0
    assert NgramStore.load(out).count([4, 5]) == 2


def test_cli_build_with_tokenizer(tmp_path: Path) -> None:
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    words = ["<|endoftext|>", "def", "return", "x", "(", ")", ":"]
    tk = tokenizers.Tokenizer(tokenizers.models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="x"))
    tk.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|endoftext|>", unk_token="x")
    fast.save_pretrained(tmp_path / "tok")
    src = tmp_path / "corpus.jsonl"
    src.write_text(json.dumps({"text": "def x ( ) :"}) + "\n" + json.dumps({"text": "return x"}) + "\n")
    out = tmp_path / "c.ngram"
    assert cli(["build", str(src), "--tokenizer", str(tmp_path / "tok"), "--out", str(out)]) == 0
    store = NgramStore.load(out)
    assert store.num_tokens == 5 + 1 + 2 + 1  # EOS (id 0) appended to each text
    assert store.count([6, 0]) == 1 and store.count([3, 0]) == 1 and store.count([1, 3, 4]) == 1


def test_cli_convert(tmp_path: Path) -> None:
    seqs = H.random_corpus(random.Random(1), 20, 20, list(range(30)))
    trie = H.RefTrie.build(seqs, 3).write(tmp_path / "r.trie")
    out = tmp_path / "r.ngram"
    assert cli(["convert", str(trie), "--out", str(out), "--memory", "64K"]) == 0
    assert out.read_bytes() == NgramStore.build(seqs, order=3).save(tmp_path / "b.ngram").read_bytes()


def test_cli_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"input_ids": [1, "a"]}\n')
    assert cli(["build", str(bad), "--pretokenized", "--out", str(tmp_path / "o.ngram")]) == 2
    assert "bad.jsonl:1" in capsys.readouterr().err
    assert cli(["info", str(tmp_path / "nope.ngram")]) == 2
    assert "not found" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli(["convert", "x.trie", "--out", "y", "--memory", "lots"])


def test_module_entry_point_help() -> None:
    out = subprocess.run([sys.executable, "-m", "dart_core.ngram", "--help"], capture_output=True, text=True,
                         check=True).stdout
    for command in ("build", "convert", "info", "query"):
        assert command in out
