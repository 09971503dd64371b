"""Seeded fuzzing of both file formats: random truncations, single and multiple bit flips and field
overwrites of small valid files. A reference ``.trie`` must convert (and then load and verify) or raise
NgramFormatError, leaving no temporary files; our format must load or raise NgramFormatError, answer queries
without crashing, and fail ``verify()`` whenever any byte differs. The loops run in-process: a crash kills
pytest (a failure nobody can miss); a watchdog ends the process if a case hangs."""

from __future__ import annotations

import faulthandler
import random
import struct
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import helpers_trie as H
import pytest

from dart_core import _native
from dart_core.ngram.store import NgramFormatError, NgramStore

TRIE_CASES = 12000
STORE_CASES = 30000
CASE_BUDGET_S = 2.0  # each file is tiny: anything slower is a bug


@contextmanager
def watchdog(seconds: float) -> Iterator[None]:
    """Kills the process (with tracebacks) if the block runs longer than `seconds`: a hang fails loudly."""
    faulthandler.dump_traceback_later(seconds, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def corpora(rng: random.Random) -> list[tuple[list[list[int]], int]]:
    out = []
    for order in (1, 2, 3, 4):
        for vocab in ([1, 2, 3], list(range(-5, 30)), [-(2**31), 0, 7, 2**31 - 1]):
            out.append((H.random_corpus(rng, 6, 12, vocab), order))
    return out


def mutate(rng: random.Random, data: bytes, fields: list[tuple[int, int]], body: int = 0) -> bytes:
    """One random corruption: truncation, bit flip(s), a random byte, or a special value in a field. Half of
    the flips land at or after byte `body` when it is given."""
    b = bytearray(data)
    lo = body if body and body < len(b) and rng.random() < 0.5 else 0

    def bit() -> int:
        return rng.randrange(lo * 8, len(b) * 8)

    kind = rng.random()
    if kind < 0.15:
        return bytes(b[: rng.randrange(len(b))])
    if kind < 0.2:
        return bytes(b + bytes(rng.randrange(256) for _ in range(rng.randint(1, 16))))
    if kind < 0.55:
        i = bit()
        b[i // 8] ^= 1 << (i % 8)
    elif kind < 0.75:
        for _ in range(rng.randint(2, 6)):
            i = bit()
            b[i // 8] ^= 1 << (i % 8)
    elif kind < 0.85:
        b[bit() // 8] = rng.randrange(256)
    else:
        off, size = rng.choice(fields)
        if off + size <= len(b):
            fmt = "<Q" if size == 8 else "<I"
            top = 2**64 if size == 8 else 2**32
            v = rng.choice([0, 1, 2, 3, top - 1, top // 2, rng.randrange(top), rng.randrange(64)])
            struct.pack_into(fmt, b, off, v)
    return bytes(b)


def trie_fields(trie: object) -> list[tuple[int, int]]:
    fields = [(0, 8), (8, 8)]
    for k, off in enumerate(trie.record_offsets()):
        fields += [(off, 4), (off + 4, 8), (off + 12, 4), (off + 16, 8)]
        for j in range(len(trie.entry_lists()[k])):
            fields += [(off + 24 + 12 * j, 4), (off + 28 + 12 * j, 8)]
    return fields


def test_fuzz_reference_trie_conversion(tmp_path: Path) -> None:
    rng = random.Random(20240601)
    samples = []
    for seqs, order in corpora(rng):
        trie = H.RefTrie.build(seqs, order)
        samples.append((trie.to_bytes(seed=rng.randrange(100)), trie_fields(trie)))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    src = tmp_path / "case.trie"
    out = tmp_path / "case.ngram"
    outcomes = {"ok": 0, "rejected": 0}
    t_start = time.perf_counter()
    with watchdog(120):
        for case in range(TRIE_CASES):
            data, fields = samples[case % len(samples)]
            bad = mutate(rng, data, fields)
            src.write_bytes(bad)
            budget = rng.choice([4096, 1 << 20])
            t0 = time.perf_counter()
            try:
                _native.convert_trie(str(src), str(out), str(tmp), budget, None)
            except NgramFormatError as e:
                outcomes["rejected"] += 1
                assert "byte offset" in str(e), str(e)  # every rejection says where
                assert not out.exists(), case
            else:
                outcomes["ok"] += 1
                store = NgramStore.load(out, verify=True)  # a converted file is always sound
                store.close()
                out.unlink()
            assert time.perf_counter() - t0 < CASE_BUDGET_S, case
            assert not any(tmp.iterdir()), case
    elapsed = time.perf_counter() - t_start
    print(f"trie fuzz: {TRIE_CASES} cases in {elapsed:.1f}s: {outcomes}")
    assert outcomes["rejected"] > TRIE_CASES // 2
    assert outcomes["ok"] > 0  # e.g. a lower leaf count still makes a valid trie


STORE_HEADER = 64 + 8 * 16 + 26 * 24 + 8  # native/src/ngram_format.hpp: hdr::kSize


def store_fields(data: bytes) -> list[tuple[int, int]]:
    head = [(o, 8) for o in range(0, STORE_HEADER, 8)]
    return head + [(o, 4) for o in range(STORE_HEADER, len(data) - 3, 4)]


def query_everything(store: NgramStore, rng: random.Random, vocab: list[int]) -> None:
    pool = [*vocab, 999, -1]
    for _ in range(8):
        ctx = [rng.choice(pool) for _ in range(rng.randint(0, 5))]
        toks = [rng.choice(pool) for _ in range(rng.randint(0, 6))]
        try:
            store.probability(ctx, toks)
            store.count(ctx[:4])
        except NgramFormatError:
            pass  # a corrupt offset table is reported, not followed


def run_store_cases(
    rng: random.Random, cases: int, on_case: Callable[[int], None] | None = None
) -> dict[str, int]:
    samples = []
    for seqs, order in corpora(rng):
        store = NgramStore.build(seqs, order)
        data = bytes(memoryview(store._buffer))
        vocab = sorted({t for s in seqs for t in s})
        samples.append((data, store_fields(data), vocab))
    outcomes = {"load_rejected": 0, "verify_rejected": 0, "unchanged": 0}
    for case in range(cases):
        data, fields, vocab = samples[case % len(samples)]
        bad = mutate(rng, data, fields, STORE_HEADER)
        t0 = time.perf_counter()
        try:
            store = NgramStore(bad)
        except NgramFormatError:
            outcomes["load_rejected"] += 1
            continue
        query_everything(store, rng, vocab)
        if bad == data:
            store.verify()
            outcomes["unchanged"] += 1
        else:
            with pytest.raises(NgramFormatError):
                store.verify()
            outcomes["verify_rejected"] += 1
        assert time.perf_counter() - t0 < CASE_BUDGET_S, case
    return outcomes


def test_fuzz_our_format_load_query_verify() -> None:
    rng = random.Random(777)
    t_start = time.perf_counter()
    with watchdog(120):
        outcomes = run_store_cases(rng, STORE_CASES)
    elapsed = time.perf_counter() - t_start
    print(f"store fuzz: {STORE_CASES} cases in {elapsed:.1f}s: {outcomes}")
    assert outcomes["load_rejected"] > 0
    assert outcomes["verify_rejected"] > 0


def test_fuzz_our_format_from_saved_file(tmp_path: Path) -> None:
    """The same through a real file: save(), corrupt on disk, NgramStore.load (mmap)."""
    rng = random.Random(31337)
    seqs = H.random_corpus(rng, 8, 20, list(range(40)))
    path = NgramStore.build(seqs, 3).save(tmp_path / "s.ngram")
    data = path.read_bytes()
    fields = store_fields(data)
    bad_path = tmp_path / "bad.ngram"
    with watchdog(60):
        for _ in range(300):
            bad = mutate(rng, data, fields, STORE_HEADER)
            bad_path.write_bytes(bad)
            try:
                store = NgramStore.load(bad_path, cache_dir=tmp_path / "cache", progress=False)
            except NgramFormatError:
                continue
            query_everything(store, rng, list(range(40)))
            if bad != data:
                with pytest.raises(NgramFormatError):
                    store.verify()
            store.close()
    NgramStore.load(path, verify=True).close()
