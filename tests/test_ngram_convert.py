"""The streaming .trie → our-format converter: round trips against a pure-Python reference, bounded
memory (spilling sorts), the conversion cache of ``NgramStore.load``, and every rejection of a malformed
``.trie``."""

from __future__ import annotations

import os
import random
import struct
import subprocess
import sys
import time
from pathlib import Path

import helpers_trie as H
import numpy as np
import pytest

from dart_core import _native
from dart_core.ngram import store as ngram
from dart_core.ngram.store import NgramFormatError, NgramStore

VOCABS = {
    "small": list(range(8)),
    "medium": list(range(-20, 180)),
    "extreme": [-(2**31), -(2**31) + 1, -7, 0, 3, 2**20, 2**31 - 2, 2**31 - 1],
    "sparse": sorted(random.Random(5).sample(range(-(2**31), 2**31), 300)),
}


def f32_bits(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, dtype=np.float32).view(np.uint32)


def convert(src: Path, out: Path, **kw: object) -> dict[str, int]:
    kw.setdefault("progress", False)
    return ngram.convert_trie(src, out, **kw)


def store_bytes(store: NgramStore) -> bytes:
    return bytes(memoryview(store._buffer))


def check_against_reference(
    store: NgramStore,
    seqs: list[list[int]],
    order: int,
    vocab: list[int],
    rng: random.Random,
    n_queries: int = 150,
) -> None:
    ref = H.RefCounts(seqs, order)
    assert store.order == order
    assert store.num_tokens == ref.counts.get((), 0)
    sizes = [sum(1 for k in ref.counts if len(k) == d) for d in range(1, order + 1)]
    assert store.level_sizes == sizes
    assert store.num_nodes == len(ref.counts)
    # count() on every counted n-gram and on some never-counted ones
    for key, c in ref.counts.items():
        assert store.count(list(key)) == c
    pool = [*vocab, 12345, -99999]
    for _ in range(50):
        key = tuple(rng.choice(pool) for _ in range(rng.randint(1, order)))
        assert store.count(list(key)) == ref.counts.get(key, 0)
    # probability: contexts drawn from the corpus (so they match) and random ones
    flat = [t for s in seqs for t in s]
    for _ in range(n_queries):
        if flat and rng.random() < 0.7:
            i = rng.randrange(len(flat))
            ctx = flat[max(0, i - rng.randint(0, order + 1)) : i + 1]
        else:
            ctx = [rng.choice(pool) for _ in range(rng.randint(0, order + 1))]
        toks = [rng.choice(pool) for _ in range(rng.randint(0, 12))]
        p, m = store.probability(np.array(ctx, dtype=np.int64), np.array(toks, dtype=np.int64))
        rp, rm = ref.probability(ctx, toks)
        assert np.array_equal(f32_bits(p), f32_bits(rp)), (ctx, toks, p, rp)
        assert np.array_equal(m, rm), (ctx, toks, m, rm)


@pytest.mark.parametrize("order", [1, 2, 3, 4])
@pytest.mark.parametrize("vocab_name", list(VOCABS))
def test_round_trip_matches_reference_and_builder(tmp_path: Path, order: int, vocab_name: str) -> None:
    rng = random.Random(order * 1000 + len(vocab_name))
    vocab = VOCABS[vocab_name]
    seqs = H.random_corpus(rng, 60, 25, vocab)
    seqs += [[], [vocab[0]], vocab[:2]]  # empty and shorter than N
    trie = H.RefTrie.build(seqs, order)
    src = trie.write(tmp_path / "ref.trie", seed=order)
    out = tmp_path / "ref.ngram"
    stats = convert(src, out)
    assert stats["order"] == order
    assert stats["input_nodes"] == len(trie.nodes)
    assert stats["vocab_size"] == len({t for s in seqs for t in s})
    assert stats["output_bytes"] == out.stat().st_size
    store = NgramStore.load(out, verify=True)
    built = NgramStore.build(seqs, order)
    assert store_bytes(built) == out.read_bytes()  # same counts → the writer produces the same bytes
    check_against_reference(store, seqs, order, vocab, rng)
    store.close()


def test_round_trip_of_empty_and_root_only_tries(tmp_path: Path) -> None:
    for order, seqs in [(3, []), (2, [[], []]), (1, [[7]]), (8, [list(range(20))])]:
        trie = H.RefTrie.build(seqs, order)
        src = trie.write(tmp_path / "t.trie")
        out = tmp_path / "t.ngram"
        convert(src, out)
        store = NgramStore.load(out, verify=True)
        assert out.read_bytes() == store_bytes(NgramStore.build(seqs, order))
        assert store.num_nodes == len(trie.nodes)
        store.close()


def test_tiny_budget_spills_and_gives_identical_bytes(tmp_path: Path) -> None:
    rng = random.Random(7)
    vocab = VOCABS["medium"]
    seqs = H.random_corpus(rng, 200, 40, vocab)
    trie = H.RefTrie.build(seqs, 3)
    assert len(trie.nodes) > 2000
    src = trie.write(tmp_path / "big.trie")
    ref_out = tmp_path / "default.ngram"
    convert(src, ref_out)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    seen: set[str] = set()
    phases: list[str] = []

    def on_progress(done: int, total: int, phase: str) -> None:
        assert 0 <= done <= total == src.stat().st_size
        phases.append(phase)
        # Temp files are unlinked as soon as they are created; they show up as open descriptors.
        fd_dir = Path("/proc/self/fd")
        if fd_dir.is_dir():
            for fd in fd_dir.iterdir():
                try:
                    target = os.readlink(fd)
                except OSError:
                    continue
                if target.startswith(str(tmp)):
                    seen.add(target)

    out = tmp_path / "tiny.ngram"
    stats = _native.convert_trie(str(src), str(out), str(tmp), 4096, on_progress)
    assert stats["input_nodes"] == len(trie.nodes)
    assert out.read_bytes() == ref_out.read_bytes()
    assert list(tmp.iterdir()) == []
    assert {"scan", "check", "levels", "write"} <= set(phases)
    if Path("/proc/self/fd").is_dir():
        assert len(seen) >= 3, seen  # sorted runs really went to files in tmp_dir
    # budgets below the floor are raised to it, not rejected
    out0 = tmp_path / "zero.ngram"
    _native.convert_trie(str(src), str(out0), str(tmp), 0, None)
    assert out0.read_bytes() == ref_out.read_bytes()
    NgramStore.load(out, verify=True).close()


def test_temp_dir_clean_and_no_output_after_error(tmp_path: Path) -> None:
    rng = random.Random(8)
    seqs = H.random_corpus(rng, 100, 30, VOCABS["medium"])
    trie = H.RefTrie.build(seqs, 3)
    trie.nodes[-1].count = 0  # found during the scan, after many runs have spilled
    src = trie.write(tmp_path / "bad.trie")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    out = tmp_path / "out.ngram"
    with pytest.raises(NgramFormatError, match="count 0"):
        _native.convert_trie(str(src), str(out), str(tmp), 4096, None)
    assert list(tmp.iterdir()) == []
    assert not out.exists()
    # an error found in a later phase (depth), after level files exist
    trie = H.RefTrie.build(seqs, 3)
    src.write_bytes(trie.to_bytes(order=2))
    with pytest.raises(NgramFormatError, match="depth beyond order"):
        _native.convert_trie(str(src), str(out), str(tmp), 4096, None)
    assert list(tmp.iterdir()) == []
    assert not out.exists()
    # the Python wrapper leaves no .tmp output either
    with pytest.raises(NgramFormatError):
        convert(src, out, tmp_dir=tmp)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.trie", "tmp"]


def test_load_converts_once_and_reuses_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seqs = [[1, 2, 3, 1, 2, 4, 0], [5, 1, 2, 3, 0]]
    src = H.RefTrie.build(seqs, 3).write(tmp_path / "small.trie")
    cache = tmp_path / "cache"
    store = NgramStore.load(src, cache_dir=cache, progress=False)
    files = list(cache.iterdir())
    assert len(files) == 1 and files[0].suffix == ".ngram"
    mtime = files[0].stat().st_mtime_ns
    assert store.path == files[0]
    check_against_reference(store, seqs, 3, [0, 1, 2, 3, 4, 5], random.Random(1), n_queries=40)
    store.close()

    def no_convert(*args: object, **kwargs: object) -> None:
        raise AssertionError("the cached conversion was not reused")

    monkeypatch.setattr(ngram, "convert_trie", no_convert)
    store2 = NgramStore.load(src, cache_dir=cache, verify=True)
    assert store2.path == files[0]
    assert files[0].stat().st_mtime_ns == mtime
    assert list(cache.iterdir()) == files
    store2.close()


def test_progress_bar_path(tmp_path: Path) -> None:
    src = H.RefTrie.build([[1, 2, 3, 4]], 2).write(tmp_path / "p.trie")
    stats = ngram.convert_trie(src, tmp_path / "p.ngram", progress=True)
    assert stats["input_nodes"] == 8


# ------------------------------------------------------------------ rejections
SEQS = [[1, 2, 3, 1, 2, 4], [5, 1, 2], [3, 3, 3]]


@pytest.fixture
def base() -> object:
    return H.RefTrie.build(SEQS, 3)


def reject(tmp_path: Path, data: bytes, *patterns: str) -> str:
    src = tmp_path / "bad.trie"
    src.write_bytes(data)
    out = tmp_path / "bad.ngram"
    with pytest.raises(NgramFormatError) as ei:
        _native.convert_trie(str(src), str(out), str(tmp_path), 1 << 20, None)
    msg = str(ei.value)
    for p in patterns:
        assert p in msg, (p, msg)
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.trie"]
    return msg


def off(n: int) -> str:
    return f"at byte offset {n})"


def child_of(trie: object, parent: int, index: int = 0) -> int:
    return trie.entry_lists()[parent][index][1]


def test_reject_truncated_header(tmp_path: Path, base: object) -> None:
    reject(tmp_path, base.to_bytes()[:10], "truncated .trie header", off(10))
    reject(tmp_path, b"", "truncated .trie header", off(0))


def test_reject_truncated_record(tmp_path: Path, base: object) -> None:
    data = base.to_bytes()
    for cut in (len(data) - 5, 16 + 7, len(data) - 12):
        reject(tmp_path, data[:cut], "truncated", off(cut))


def test_reject_trailing_bytes(tmp_path: Path, base: object) -> None:
    data = base.to_bytes()
    reject(tmp_path, data + b"\0\0\0", "trailing bytes", off(len(data)))


def test_reject_bad_order(tmp_path: Path, base: object) -> None:
    reject(tmp_path, base.to_bytes(order=0), "order 0 out of range", off(0))
    reject(tmp_path, base.to_bytes(order=9), "order 9 out of range", off(0))
    reject(tmp_path, base.to_bytes(order=2**64 - 1), "out of range", off(0))


def test_reject_bad_node_count(tmp_path: Path, base: object) -> None:
    reject(tmp_path, base.to_bytes(node_count=0), "node_count is 0", off(8))
    for absurd in (2**60, 2**64 - 1):
        t0 = time.perf_counter()
        reject(tmp_path, base.to_bytes(node_count=absurd), "node_count", "overflows", off(8))
        assert time.perf_counter() - t0 < 1.0
    n = len(base.nodes)
    reject(tmp_path, base.to_bytes(node_count=2**40), "truncated", "node_count 1099511627776")
    reject(tmp_path, base.to_bytes(node_count=n - 1), "trailing bytes")


def test_reject_counts(tmp_path: Path, base: object) -> None:
    offs = base.record_offsets()
    k = len(base.nodes) - 1
    base.nodes[k].count = 0
    reject(tmp_path, base.to_bytes(), f"node {k} ", "count 0", off(offs[k] + 12))
    base.nodes[k].count = -3
    reject(tmp_path, base.to_bytes(), "count -3", off(offs[k] + 12))
    base.nodes[k].count = 1
    base.nodes[0].count = -1
    reject(tmp_path, base.to_bytes(), "root record has a negative count", off(offs[0] + 12))
    base.nodes[0].count = 5
    reject(tmp_path, base.to_bytes(), "root count 5", "counts inconsistent", off(offs[0] + 12))


def test_reject_children_counting_more_than_parent(tmp_path: Path, base: object) -> None:
    offs = base.record_offsets()
    one = base.nodes[0].children[1]  # the unigram "1": count 3, its only child "1 2" has count 3
    base.nodes[base.nodes[one].children[2]].count = 4
    reject(tmp_path, base.to_bytes(), f"node {one} ", "counts inconsistent", off(offs[one] + 12))


def test_reject_bad_root(tmp_path: Path, base: object) -> None:
    offs = base.record_offsets()
    base.nodes[0].token = 4
    reject(tmp_path, base.to_bytes(), "root record has token 4", off(offs[0]))
    base.nodes[0].token = 0
    base.nodes[0].parent = 1
    reject(tmp_path, base.to_bytes(), "root record has parent 1", off(offs[0] + 4))


def test_reject_parent_not_earlier(tmp_path: Path, base: object) -> None:
    offs = base.record_offsets()
    base.nodes[3].parent = 3
    reject(tmp_path, base.to_bytes(), "node 3 ", "not an earlier node", off(offs[3] + 4))


def test_reject_n_children_overrun(tmp_path: Path, base: object) -> None:
    offs = base.record_offsets()
    data = bytearray(base.to_bytes())
    struct.pack_into("<Q", data, offs[2] + 16, 2**62)
    reject(tmp_path, bytes(data), "node 2 ", "overruns the file", off(offs[2] + 16))


def test_reject_child_id_out_of_range(tmp_path: Path, base: object) -> None:
    offs = base.record_offsets()
    ents = base.entry_lists()
    tok, _ = ents[1][0]
    base.nodes[1].entries = [(tok, 10**9), *ents[1][1:]]
    reject(tmp_path, base.to_bytes(), "names node 1000000000", "out of range", off(offs[1] + 24 + 4))


def test_reject_child_id_not_pointing_forward(tmp_path: Path, base: object) -> None:
    offs = base.record_offsets()
    ents = base.entry_lists()
    k = 2
    assert ents[k]
    tok, _ = ents[k][0]
    for bad in (k, 1, 0):
        base.nodes[k].entries = [(tok, bad), *ents[k][1:]]
        reject(tmp_path, base.to_bytes(), f"names node {bad}", "not pointing forward", off(offs[k] + 24 + 4))


def test_reject_child_token_mismatch(tmp_path: Path, base: object) -> None:
    offs = base.record_offsets()
    ents = base.entry_lists()
    tok, child = ents[0][1]
    base.nodes[0].entries = [ents[0][0], (tok + 100, child), *ents[0][2:]]
    reject(
        tmp_path,
        base.to_bytes(),
        f"lists node {child} with token {tok + 100}",
        f"own token is {tok}",
        off(offs[0] + 24 + 12),
    )


def test_reject_child_parent_mismatch(tmp_path: Path, base: object) -> None:
    offs = base.record_offsets()
    # node c (a child of node p > 0) claims the root as its parent
    c = next(i for i, n in enumerate(base.nodes) if n.parent > 0)
    p = base.nodes[c].parent
    base.nodes[c].parent = 0
    reject(
        tmp_path,
        base.to_bytes(),
        f"node {c} ",
        "has parent 0",
        f"listed as a child by node {p}",
        off(offs[c] + 4),
    )


def test_reject_never_listed(tmp_path: Path, base: object) -> None:
    offs = base.record_offsets()
    ents = base.entry_lists()
    lo, hi = sorted(c for _, c in ents[0])[:2]
    # the root lists `hi` where it listed `lo`: `lo` is never listed (and `hi` twice, but `lo` comes first)
    base.nodes[0].entries = [(t, hi if c == lo else c) for t, c in ents[0]]
    reject(tmp_path, base.to_bytes(), f"node {lo} ", "never listed", off(offs[lo]))


def test_reject_listed_twice_names_both_entries(tmp_path: Path, base: object) -> None:
    offs = base.record_offsets()
    ents = base.entry_lists()
    kids = [c for _, c in ents[0]]
    lo, hi = sorted(kids)[:2]
    i_lo, i_hi = kids.index(lo), kids.index(hi)
    base.nodes[0].entries = [(t, lo if c == hi else c) for t, c in ents[0]]
    msg = reject(tmp_path, base.to_bytes(), f"node {lo} ", "listed twice")
    for i in (i_lo, i_hi):
        assert str(offs[0] + 24 + 12 * i) in msg


def test_reject_depth_beyond_order(tmp_path: Path, base: object) -> None:
    offs = base.record_offsets()
    deep = [i for i, n in enumerate(base.nodes) if n.parent and base.nodes[n.parent].parent]
    msg = reject(tmp_path, base.to_bytes(order=2), "depth beyond order", "order 2")
    assert any(f"node {i} (record at byte offset {offs[i]})" in msg for i in deep), msg
    one = [i for i, n in enumerate(base.nodes) if n.parent]
    msg = reject(tmp_path, base.to_bytes(order=1), "depth beyond order")
    assert any(f"node {i} (record at byte offset {offs[i]})" in msg for i in one), msg


def test_reject_duplicate_child_tokens(tmp_path: Path, base: object) -> None:
    ents = base.entry_lists()
    (t0, c0), (_t1, c1) = ents[0][:2]
    base.nodes[c1].token = t0
    base.nodes[0].entries = [(t0, c0), (t0, c1), *ents[0][2:]]
    reject(tmp_path, base.to_bytes(), "duplicate child tokens", f"two children with token {t0}")


def test_missing_and_unwritable_paths(tmp_path: Path, base: object) -> None:
    with pytest.raises(FileNotFoundError):
        convert(tmp_path / "nope.trie", tmp_path / "x.ngram")
    with pytest.raises(RuntimeError, match="cannot open"):
        _native.convert_trie(str(tmp_path / "nope.trie"), str(tmp_path / "x.ngram"), "", 1 << 20, None)
    src = str(base.write(tmp_path / "ok.trie"))
    missing = tmp_path / "no-such-dir"
    with pytest.raises(RuntimeError, match="temporary file"):
        _native.convert_trie(src, str(tmp_path / "x.ngram"), str(missing), 1 << 20, None)
    with pytest.raises(RuntimeError, match="cannot open"):
        _native.convert_trie(src, str(missing / "x.ngram"), str(tmp_path), 1 << 20, None)


def test_two_conversions_of_one_file_at_once_both_succeed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two writers of one output (two app processes converting one .trie into the shared cache) used to share
    ``out.ngram.tmp``: the first rename took the other's file away ("No such file or directory"). Here the second
    conversion runs to completion inside the first one's last progress callback, after the first has written its
    file and before it renames it: deterministically the window where they collided."""
    import tqdm.auto

    rng = random.Random(3)
    seqs = H.random_corpus(rng, 80, 30, VOCABS["medium"])
    src = H.RefTrie.build(seqs, 3).write(tmp_path / "ref.trie")
    out = tmp_path / "cache" / "ref.ngram"
    out.parent.mkdir()
    nested: list[dict[str, int]] = []

    class Bar:
        def __init__(self, *args: object, **kwargs: object) -> None:
            self.total = self.n = 0
            self.phase = ""

        def set_postfix_str(self, phase: str, **kwargs: object) -> None:
            self.phase = phase

        def refresh(self) -> None:
            if self.phase == "done" and not nested:  # the first writer's file is complete, not yet renamed
                nested.append(convert(src, out))

        def close(self) -> None:
            pass

    monkeypatch.setattr(tqdm.auto, "tqdm", Bar)
    stats = ngram.convert_trie(src, out, progress=True)
    assert nested and nested[0] == stats
    assert out.read_bytes() == store_bytes(NgramStore.build(seqs, 3))
    assert [p.name for p in out.parent.iterdir()] == [out.name]  # no temporary file left behind
    assert out.stat().st_mode & 0o777 == 0o644


ROUNDS = 30  # conversions per process: the writers collided only when their final writes overlapped
READY_THEN_WAIT = """
Path(sys.argv[4]).touch()  # imported: ready
while not Path(sys.argv[1]).exists():
    time.sleep(0.001)
"""
CACHED = """import sys, time
from pathlib import Path
from dart_core.ngram.store import NgramStore, convert_trie_cached
""" + READY_THEN_WAIT + f"""for i in range({ROUNDS}):
    out = convert_trie_cached(Path(sys.argv[2]), cache_dir=Path(sys.argv[3]) / str(i), progress=False)
    NgramStore.load(out, verify=True)
    print(out)
"""
CLI = """import sys, time
from pathlib import Path
from dart_core.ngram.__main__ import main
""" + READY_THEN_WAIT + f"""for i in range({ROUNDS}):
    if main(["convert", sys.argv[2], "--out", sys.argv[3]]):
        sys.exit(1)
"""


def test_processes_converting_one_trie_at_once_all_succeed(tmp_path: Path) -> None:
    """Two app processes converting one .trie into the shared cache, and two ``python -m dart_core.ngram convert``
    runs into one file, all at the same moment: each writer has a temporary file of its own renamed into place,
    so every one succeeds (no "No such file or directory: 'out.ngram.tmp' -> 'out.ngram'") and the result is a
    good store, with no temporary file left behind."""
    seqs = H.random_corpus(random.Random(11), 600, 60, VOCABS["medium"])
    src = H.RefTrie.build(seqs, 3).write(tmp_path / "ref.trie")
    cache, out = tmp_path / "cache", tmp_path / "cli" / "ref.ngram"
    cache.mkdir()
    out.parent.mkdir()
    go = tmp_path / "go"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    jobs = [(CACHED, cache), (CACHED, cache), (CLI, out), (CLI, out)]
    ready = [tmp_path / f"ready-{i}" for i in range(len(jobs))]
    procs = [subprocess.Popen([sys.executable, "-c", code, str(go), str(src), str(dest), str(r)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for (code, dest), r in zip(jobs, ready, strict=True)]
    deadline = time.monotonic() + 120
    while not all(r.exists() for r in ready) and time.monotonic() < deadline:
        time.sleep(0.01)
    go.touch()  # all start converting at once
    results = [(*p.communicate(timeout=300), p.returncode) for p in procs]
    for _, stderr, rc in results:
        assert rc == 0, stderr
    want = store_bytes(NgramStore.build(seqs, 3))
    cached = {Path(line) for stdout, _, _ in results[:2] for line in stdout.split()}
    assert len(cached) == ROUNDS
    for path in (*cached, out):
        assert path.read_bytes() == want
        NgramStore.load(path, verify=True)
        assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left behind
