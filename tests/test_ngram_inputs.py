"""Token-id inputs of ``NgramStore.probability`` / ``count`` / ``build`` and ``as_token_array``: validated in the
native binding (``native/python/token_ids.hpp``), with the same answers and the same rules as the former numpy
checks in Python, for every input form (lists, tuples, any integer dtype, strided or byte-swapped arrays)."""

from __future__ import annotations

import random
from typing import Any

import helpers_trie as H
import numpy as np
import pytest

from dart_core import _native
from dart_core.ngram.store import NgramStore, as_token_array

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


def _numpy_reference(values: Any, what: str = "tokens") -> np.ndarray:
    """The validation ``dart_core.ngram.store.as_token_array`` did in Python before it moved into C++ (the oracle)."""
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{what} must be a 1-D sequence of token ids, got shape {arr.shape}")
    if arr.size == 0:
        return np.zeros(0, dtype=np.int32)
    if not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{what} must hold integer token ids, got dtype {arr.dtype}")
    if arr.dtype != np.int32 and (arr.min() < _INT32_MIN or arr.max() > _INT32_MAX):
        raise ValueError(f"{what} hold ids outside the int32 range")
    return np.ascontiguousarray(arr, dtype=np.int32)


def _forms(ids: list[int]) -> list[tuple[str, Any]]:
    """The same ids as every kind of input a caller may pass (only the dtypes that can hold them)."""
    out: list[tuple[str, Any]] = [("list", list(ids)), ("tuple", tuple(ids)),
                                  ("list of numpy ints", [np.int64(t) for t in ids])]
    for dt in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64, ">i4", ">i8"):
        info = np.iinfo(np.dtype(dt))
        if all(info.min <= t <= info.max for t in ids):
            out.append((str(np.dtype(dt)), np.array(ids, dtype=dt)))
    wide = np.zeros(2 * len(ids), dtype=np.int32)
    wide[::2] = ids
    out.append(("strided int32", wide[::2]))
    unaligned = np.frombuffer(b"\0" + np.array(ids, dtype=np.int32).tobytes(), dtype=np.int32, offset=1)
    out.append(("unaligned int32", unaligned))
    return out


def test_probability_and_count_same_answer_for_every_input_form() -> None:
    rng = random.Random(5)
    vocab = list(range(0, 40))
    seqs = H.random_corpus(rng, 60, 30, vocab)
    store = NgramStore.build(seqs, order=3)
    ref = H.RefCounts(seqs, 3)
    for _ in range(60):
        ctx = [rng.choice([*vocab, 200]) for _ in range(rng.randint(0, 4))]
        toks = [rng.choice([*vocab, 127, 250]) for _ in range(rng.randint(0, 30))]
        rp, rn = ref.probability(ctx, toks)
        pairs = [(f"context {name}", c, toks) for name, c in _forms(ctx)]
        pairs += [(f"tokens {name}", ctx, t) for name, t in _forms(toks)]
        for name, c, t in pairs:
            p, n = store.probability(c, t)
            assert p.dtype == np.float32 and n.dtype == np.int32, name
            assert p.tobytes() == rp.tobytes() and n.tolist() == list(rn), name
        for name, gram in _forms(ctx[:3]):
            assert store.count(gram) == ref.counts.get(tuple(ctx[:3]), 0), name


def test_build_same_store_for_every_input_form() -> None:
    seqs = H.random_corpus(random.Random(2), 30, 20, list(range(100)))
    want = bytes(memoryview(NgramStore.build(seqs, order=3)._buffer))
    for name, _ in _forms([1]):
        as_form = [dict(_forms(s))[name] for s in seqs]
        assert bytes(memoryview(NgramStore.build(as_form, order=3)._buffer)) == want, name


GOOD = [[], (), [0, -1, _INT32_MAX, _INT32_MIN], np.array([], dtype=np.float64), np.zeros(0, dtype=np.int64),
        range(5), [True, 2], [np.int16(3), 4], np.array([7], dtype=np.uint64), np.arange(6, dtype=np.int32)[::3]]
BAD = [
    ([[1, 2]], "1-D sequence of token ids, got shape (1, 2)"),
    (5, "1-D sequence of token ids, got shape ()"),
    ("ab", "1-D sequence of token ids"),
    ([1.5, 2.0], "integer token ids, got dtype float64"),
    ([1, 2.0], "integer token ids, got dtype float64"),
    ([True], "integer token ids, got dtype bool"),
    (np.array([1, 2], dtype=np.float32), "integer token ids, got dtype float32"),
    ([1, 2**31], "int32 range"),
    ([_INT32_MIN - 1], "int32 range"),
    (np.array([2**31], dtype=np.uint32), "int32 range"),
    (np.array([0, 2**40], dtype=np.int64), "int32 range"),
    (np.array([-(2**40)], dtype=">i8"), "int32 range"),
]


@pytest.mark.parametrize("values", GOOD, ids=repr)
def test_as_token_array_matches_the_numpy_rules(values: Any) -> None:
    got = as_token_array(values, "ctx")
    want = _numpy_reference(values, "ctx")
    assert type(got) is np.ndarray and got.dtype == np.int32 and got.flags.c_contiguous
    assert got.tolist() == want.tolist()


@pytest.mark.parametrize(("values", "said"), BAD, ids=[repr(b[0]) for b in BAD])
def test_as_token_array_rejects_what_numpy_rules_reject(values: Any, said: str) -> None:
    with pytest.raises(ValueError):
        _numpy_reference(values)
    with pytest.raises(ValueError) as e:
        as_token_array(values, "tokens")
    assert str(e.value).startswith("tokens ") and said in str(e.value)


def test_as_token_array_copies_only_when_it_must() -> None:
    a = np.arange(4, dtype=np.int32)
    assert as_token_array(a) is a
    b = np.arange(4, dtype=np.int64)
    c = as_token_array(b)
    assert c.dtype == np.int32 and not np.shares_memory(b, c)


def test_errors_name_the_argument_and_the_bad_id() -> None:
    store = NgramStore.build([[1, 2, 3]], order=3)
    with pytest.raises(ValueError, match=r"^context must be a 1-D sequence of token ids, got shape \(1, 2\)$"):
        store.probability([[1, 2]], [3])
    with pytest.raises(ValueError, match=r"^tokens hold ids outside the int32 range: tokens\[1\] = 1099511627776$"):
        store.probability([1], [3, 2**40])
    with pytest.raises(ValueError, match=r"^tokens hold ids outside the int32 range: tokens\[0\] = -2147483649$"):
        store.probability([1], np.array([-(2**31) - 1, 5], dtype=np.int64))
    with pytest.raises(ValueError, match=r"^context hold ids outside the int32 range: context\[0\] = 1208925819"):
        store.probability([2**80], [1])  # beyond int64 too: still named, not "dtype object"
    with pytest.raises(ValueError, match=r"^ngram must hold integer token ids, got dtype float64$"):
        store.count([1.0])
    with pytest.raises(ValueError, match=r"^sequence 1 hold ids outside the int32 range: sequence 1\[2\] = 2147483648"):
        NgramStore.build([[1, 2], [1, 2, 2**31]], order=2)


def test_the_native_view_validates_on_its_own() -> None:
    # The binding is the one place that checks: the view answers lists directly and never wraps ids around.
    store = NgramStore.build([[1, 2, 3], [1, 2, 4]], order=3)
    p, n = store.native.probability([1, 2], [3, 4, 5])
    assert p.tolist() == [0.5, 0.5, 0.0] and n.tolist() == [2, 2, 0]
    assert store.native.count((1, 2)) == 2
    with pytest.raises(ValueError, match="int32 range"):
        store.native.probability([1, 2], np.array([3 + 2**32], dtype=np.int64))  # would wrap to 3
    with pytest.raises(ValueError, match="integer token ids"):
        store.native.probability([1, 2], np.array([3.0]))  # would truncate to 3
    with pytest.raises(ValueError, match="int32 range"):
        _native.as_token_array([2**31], "x")
