"""The drafters' fast path (``use_static_cache``): every drafting step after the first runs one forward at static
shapes over a static cache, its rows padded to a power of two, every step-dependent value a device tensor, so a GPU
can capture it as a CUDA graph. On the CPU the same static code runs uncaptured; it must propose exactly the eager
path's trees (float32), read no tensor on the host inside the captured function, and keep decoding lossless."""

from __future__ import annotations

import gc
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import helpers_ckpt as C
import numpy as np
import pytest
import torch
from test_dflash import dflash_config, dflash_state
from test_dflash import write as write_dflash
from test_generate import V, prompts
from test_generate import make_target as cpu_target
from test_target import TOL, deep_path, random_tree

from dart_core.drafters.dart import DartDrafter, DartSettings
from dart_core.drafters.dflash import DFlashDrafter, DFlashSettings, DFlashTreeDrafter, DFlashTreeSettings
from dart_core.drafters.eagle3 import Eagle3Drafter, Eagle3Settings
from dart_core.engine.drafter import DraftInput
from dart_core.engine.graphs import HostSyncError, SlotPool, bucket, no_host_sync
from dart_core.engine.loop import generate
from dart_core.engine.target import TargetModel
from dart_core.ngram.store import NgramStore

NEW = 40
DEVICE = torch.device(os.environ.get("DART_TEST_DEVICE", "cpu"))


def make_target(family: str) -> torch.nn.Module:
    return cpu_target(family).to(DEVICE)


def reference(model: torch.nn.Module, prompt: list[int], new: int) -> list[int]:
    """HF generate's greedy tokens: the truth every path must reproduce."""
    ids = torch.tensor([prompt], device=DEVICE)
    out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=new,
                         min_new_tokens=new)
    return out[0, len(prompt):].tolist()


def load(kind: str, tmp: Path, model: torch.nn.Module, window: int | None = None) -> Callable[[], Any]:
    """A loader of one random drafter of ``kind`` on ``model`` (each call a fresh copy of the same weights)."""
    hidden = model.config.hidden_size
    if kind in ("dflash", "dflash-tree"):
        cfg = dflash_config(layers=2, block=6)
        if window is not None:
            cfg["dflash_config"]["context_window"] = window
        path = write_dflash(tmp / f"dflash-{window}", cfg, dflash_state(cfg, seed=3, scale=0.5))
        cls: Any = DFlashTreeDrafter if kind == "dflash-tree" else DFlashDrafter
    else:
        cfg = C.drafter_config(kind, vocab=V, hidden=hidden, draft_vocab=48, draft_length=6)
        if window is not None:
            cfg["context_window"] = window
        path = C.write_drafter(tmp / f"{kind}-{window}", cfg, C.random_drafter_state(cfg, kind=kind, seed=7))
        cls = DartDrafter if kind == "dart" else Eagle3Drafter
    return lambda: cls.from_pretrained(path, target=model)


SETTINGS = {
    "dart": DartSettings(top_k=5, max_nodes=14),
    "eagle3": Eagle3Settings(total_tokens=14, depth=4, top_k=3),
    "dflash": DFlashSettings(draft_tokens=5, exact_proposals=True),
    "dflash-tree": DFlashTreeSettings(top_k=4, max_nodes=12, exact_proposals=True),
}


def recorded(drafter: Any) -> list[tuple[list[int], list[int]]]:
    """Every tree ``drafter`` proposes from now on, as (tokens, parents)."""
    trees: list[tuple[list[int], list[int]]] = []
    propose = drafter.propose

    def spy(state: Any, step: Any) -> Any:
        out = propose(state, step)
        trees.append((out.tree.tokens.tolist(), out.tree.parents.tolist()))
        return out

    drafter.propose = spy
    return trees


def no_sync_inside(drafter: Any, attr: str = "_graphs") -> list[Any]:
    """Make the drafter's (or target's) static step refuse host reads (what a CUDA graph's capture would refuse);
    returns the list of the keys it is called with."""
    graphs = getattr(drafter, attr)
    inner, keys = graphs.fn, []
    assert graphs.capture == (DEVICE.type == "cuda")

    def guarded(key: Any, **inputs: torch.Tensor) -> Any:
        keys.append(key)
        with no_host_sync():
            return inner(key, **inputs)

    graphs.fn = guarded
    return keys


@pytest.mark.parametrize("window", [None, 5])
@pytest.mark.parametrize("kind", ["dart", "eagle3", "dflash", "dflash-tree"])
def test_static_drafts_equal_eager_drafts(tmp_path: Path, kind: str, window: int | None) -> None:
    model = make_target("qwen3")
    target = TargetModel(model)
    make = load(kind, tmp_path, model, window)
    eager, fast = make(), make()
    fast.use_static_cache(256)
    if kind == "dart" or kind == "dflash-tree":  # the tree search's N-gram term in play
        store = NgramStore.build([np.asarray(p, dtype=np.int32) for p in prompts(seed=2)], order=3)
        eager.store = fast.store = store
    keys = no_sync_inside(fast)
    want_trees, got_trees = recorded(eager), recorded(fast)
    settings = SETTINGS[kind]
    for prompt in prompts(seed=4)[:3]:
        want = reference(model, prompt, NEW)
        assert generate(target, prompt, eager, max_new_tokens=NEW, settings=settings)[0] == want
        assert generate(target, prompt, fast, max_new_tokens=NEW, settings=settings)[0] == want
    assert len(got_trees) == len(want_trees) > 10
    assert got_trees == want_trees  # token for token, node for node
    if DEVICE.type == "cuda":  # each key's function ran to be recorded; its graph replays every later step
        assert fast.graphs_captured == len(set(keys)) > 0 and not fast.capture_failures
    else:
        assert len(keys) >= len(got_trees) - 3  # every step but each prompt's first ran the static step
    assert any(len(t) > 1 for t, _ in got_trees)


@pytest.mark.parametrize("kind", ["dart", "eagle3", "dflash", "dflash-tree"])
def test_static_steps_of_every_row_count_equal_eager(tmp_path: Path, kind: str) -> None:
    """Steps feeding 1 to 9 new rows (accepted paths of every length: padded to 1, 2, 4, 8 and 16 rows), with
    the window cutting in, propose the eager path's trees."""
    model = make_target("qwen3")
    target = TargetModel(model)
    make = load(kind, tmp_path, model, window=12)
    eager, fast = make(), make()
    fast.use_static_cache(128)
    keys = no_sync_inside(fast)
    layers = eager.feature_layers
    seq = np.random.default_rng(1).integers(0, V - 1, 60).tolist()
    state = target.new_state()
    _, feats = target.prefill(state, torch.tensor([seq]), layers=layers)
    settings = SETTINGS[kind]
    es, fs = eager.new_state(settings), fast.new_state(settings)
    start = 0
    for n in (10, 1, 2, 3, 5, 8, 9, 4, 1, 7):
        step = DraftInput(feats[start:start + n], torch.tensor(seq[start + 1:start + n + 1]),
                          np.asarray(seq[:start + n + 1], dtype=np.int32))
        want, got = eager.propose(es, step).tree, fast.propose(fs, step).tree
        assert got.tokens.tolist() == want.tokens.tolist() and got.parents.tolist() == want.parents.tolist(), n
        start += n
    assert fs.length == es.length == start
    assert sorted({key[1] for key in keys}) == [1, 2, 4, 8, 16]
    assert fast.graphs_captured == (len(set(keys)) if DEVICE.type == "cuda" else 0)


@pytest.mark.parametrize("kind", ["dart", "eagle3"])
def test_graph_target_and_drafter_decode_losslessly(tmp_path: Path, kind: str) -> None:
    """The whole fast path: the target's verifies and plain steps through its static forward (captured per slot
    and row bucket on a GPU), the drafter's steps through theirs; greedy output = HF generate's, and one slot of each
    serves generation after generation."""
    model = make_target("qwen3")
    target = TargetModel(model)
    target.use_static_cache(160, graphs=True)
    target_keys = no_sync_inside(target)
    drafter = load(kind, tmp_path, model)()
    drafter.use_static_cache(160)
    no_sync_inside(drafter)
    for prompt in prompts(seed=6)[:2]:  # (every host-side op runs through no_host_sync's Python dispatch: slow)
        want = reference(model, prompt, NEW)
        assert generate(target, prompt, None, max_new_tokens=NEW)[0] == want
        assert generate(target, prompt, drafter, max_new_tokens=NEW, settings=SETTINGS[kind])[0] == want
    gc.collect()
    assert {key[0] for key in target_keys} == {(1, 0)} and len(target._slots.pools[1].slots) <= 2
    assert len(drafter._slots.slots) == 1
    if DEVICE.type == "cuda":
        assert target.graphs_captured >= 2 and drafter.graphs_captured >= 1 and target.capture_seconds > 0


def test_graph_target_verify_commit_continue_match_full_forwards() -> None:
    """Verifies of random trees (padded to their bucket), commits of deep paths (the captured compaction) and plain
    steps on the graph path give a from-scratch forward's logits and features."""
    model = make_target("qwen3")
    target = TargetModel(model)
    target.use_static_cache(128, graphs=True)
    forwards, commits = no_sync_inside(target), no_sync_inside(target, "_compactions")

    def full(ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            out = model(torch.tensor([ids], device=DEVICE), output_hidden_states=True, use_cache=False)
        return out.logits[0].float(), torch.cat([out.hidden_states[i][0] for i in target.feature_layers], dim=-1)

    rng = np.random.default_rng(11)
    seq = rng.integers(0, V, 7).tolist()
    state = target.new_state()
    target.prefill(state, torch.tensor([seq]))
    for step in range(6):
        tree = random_tree(rng, root=int(rng.integers(0, V)), n_min=5, n_max=13)
        logits, feats = target.verify(state, tree)
        path = deep_path(rng, tree, min_len=3)
        seq = seq + [int(tree.tokens[j]) for j in path]
        ref_logits, ref_feats = full(seq)
        torch.testing.assert_close(logits[path], ref_logits[-len(path):], atol=TOL, rtol=0)
        torch.testing.assert_close(feats[path], ref_feats[-len(path):], atol=TOL, rtol=0)
        target.commit(state, path)
        last, _ = target.forward_tokens(state, [step + 1])
        seq.append(step + 1)
        torch.testing.assert_close(last, full(seq)[0][-1], atol=TOL, rtol=0)
    assert forwards and commits and {len(k) for k in commits} == {2}  # (slot, path length): the captured copy ran
    assert all(int(layer.cumulative_length) == len(seq) for layer in state.cache.layers)


def test_static_drafter_slots_are_shared_and_returned(tmp_path: Path) -> None:
    model = make_target("qwen3")
    dart = load("dart", tmp_path, model)()
    dart.use_static_cache(64)
    a, b = dart.new_state(), dart.new_state()
    assert (a.slot, b.slot) == (0, 1) and a.cache is not b.cache
    del a
    gc.collect()
    c = dart.new_state()
    assert c.slot == 0 and c.length == 0  # the slot came back, empty


def test_a_slot_given_back_is_lent_again_and_its_owner_dying_frees_nothing_twice() -> None:
    pool = SlotPool(object)
    owner, other, third, fourth = Owner(), Owner(), Owner(), Owner()
    assert (pool.lend(owner), pool.lend(other)) == (0, 1) and pool.lent == 2
    pool.give_back(0)  # the owner moved to another slot, and lives on
    assert pool.lent == 1 and pool.lend(third) == 0
    del owner
    gc.collect()  # its finalizer already ran at give_back: slot 0 stays with its new owner
    assert pool.lent == 2 and pool.lend(fourth) == 2
    del other
    gc.collect()
    assert pool.lent == 2  # an owner's death returns its slot
    with pytest.raises(ValueError, match="slot 5 is not lent"):
        pool.give_back(5)


class Owner:
    """Something a slot can be lent to (a weak reference's target)."""


def test_eagle3_trees_larger_than_the_static_scratch_draft_eagerly(tmp_path: Path) -> None:
    model = make_target("qwen3")
    eagle = load("eagle3", tmp_path, model)()
    eagle.use_static_cache(64)
    big = Eagle3Settings(total_tokens=60, depth=32, top_k=64)
    assert eagle.new_state(big).slot is None
    assert eagle.new_state(SETTINGS["eagle3"]).slot is not None


def test_the_host_sync_check_refuses_host_reads() -> None:
    x = torch.arange(4)
    with no_host_sync(), pytest.raises(HostSyncError, match="cannot be captured"):
        int(x.max())
    with no_host_sync():
        assert (x + 1).shape == (4,)  # device work passes


@pytest.mark.parametrize(("n", "want"), [(1, 1), (2, 2), (3, 4), (9, 16), (32, 32), (33, None)])
def test_row_buckets(n: int, want: int | None) -> None:
    assert bucket(n, 32) == want
