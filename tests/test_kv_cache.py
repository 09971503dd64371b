"""The target's KV cache layer writes in place and grows: a decode step never copies the history, a full buffer is
replaced by a larger one holding the same positions, a crop and a row selection keep exactly what they should, and
the engine's states are built of it (their outputs are checked against greedy decoding in test_target.py)."""

from __future__ import annotations

import helpers_ckpt as C
import pytest
import torch

from dart_core.engine.kv_cache import GROW_MIN, PreallocatedLayer, growing_cache
from dart_core.engine.target import TargetModel


def _kv(rows: int, n: int, start: float = 0.0) -> torch.Tensor:
    return torch.arange(rows * 2 * n * 3, dtype=torch.float32).view(rows, 2, n, 3) + start


def test_a_growing_layer_writes_in_place_until_full_then_moves_to_a_larger_buffer() -> None:
    layer = PreallocatedLayer(0, grow=True)
    first = _kv(2, 5)
    keys, values = layer.update(first, first + 1000)
    assert layer.capacity == 5 + GROW_MIN and layer.get_seq_length() == 5 and layer.get_max_length() == -1
    assert torch.equal(keys, first) and torch.equal(values, first + 1000)
    buffer = layer.key_buffer.data_ptr()
    history = [first]
    for step in range(GROW_MIN):  # one position a step, as a decode step adds
        new = _kv(2, 1, start=10_000 + step)
        keys, values = layer.update(new, new + 1000)
        history.append(new)
        assert keys.data_ptr() == layer.key_buffer.data_ptr()  # a view of the buffer: nothing copied but the row
    assert layer.key_buffer.data_ptr() == buffer and layer.get_seq_length() == layer.capacity == 5 + GROW_MIN
    grown = _kv(2, 3, start=50_000)
    keys, values = layer.update(grown, grown + 1000)  # does not fit: a larger buffer, the same positions
    history.append(grown)
    assert layer.capacity >= layer.get_seq_length() + GROW_MIN and layer.key_buffer.data_ptr() != buffer
    assert torch.equal(keys, torch.cat(history, dim=2)) and torch.equal(values, torch.cat(history, dim=2) + 1000)


def test_a_fixed_layer_refuses_what_does_not_fit_and_crop_drops_the_last_positions() -> None:
    layer = PreallocatedLayer(capacity=6)
    k = _kv(1, 4)
    layer.update(k, k)
    with pytest.raises(ValueError, match="holds 6 positions; this forward needs 7"):
        layer.update(_kv(1, 3), _kv(1, 3))
    layer.crop(-3)
    assert layer.get_seq_length() == 1 and torch.equal(layer.keys, k[:, :, :1])
    layer.crop(0)
    assert layer.get_seq_length() == 1
    with pytest.raises(ValueError, match="negative count"):
        layer.crop(2)
    new = _kv(1, 2, start=7_000)
    keys, _ = layer.update(new, new)  # written where the dropped positions were
    assert torch.equal(keys, torch.cat([k[:, :, :1], new], dim=2))
    layer.reset()
    assert layer.get_seq_length() == 0 and not layer.is_initialized
    keys, _ = layer.update(new, new)
    assert torch.equal(keys, new)


def test_rows_are_kept_in_any_order() -> None:
    layer = PreallocatedLayer(0, grow=True)
    k = _kv(4, 3)
    layer.update(k, k + 1)
    layer.batch_select_indices(torch.tensor([3, 1]))  # not increasing: gathered
    assert torch.equal(layer.keys, k[[3, 1]]) and torch.equal(layer.values, k[[3, 1]] + 1)
    layer.batch_select_indices(torch.tensor([1]))  # increasing: moved up in place
    assert torch.equal(layer.keys, k[[1]])
    new = _kv(1, 1, start=900)
    keys, _ = layer.update(new, new)
    assert torch.equal(keys, torch.cat([k[[1]], new], dim=2))


def test_the_engine_steps_write_in_place_and_keep_rows_keeps_their_columns() -> None:
    target = TargetModel(C.tiny_target("llama", vocab=64, seed=3).float())
    state = target.new_state()
    assert all(type(layer) is PreallocatedLayer for layer in state.cache.layers)
    target.prefill(state, [1, 2, 3, 4])
    buffers = [layer.key_buffer.data_ptr() for layer in state.cache.layers]
    for token in (5, 6, 7):
        target.forward_tokens(state, [token], features=False)
    assert [layer.key_buffer.data_ptr() for layer in state.cache.layers] == buffers  # no step copied the history
    assert state.cache.get_seq_length() == state.width == 7

    rows = target.new_state(rows=3)
    target.prefill_rows(rows, [[1, 2, 3, 4], [5, 6], [7, 8, 9]])
    before = [layer.keys[[0, 2]].clone() for layer in rows.cache.layers]
    target.keep_rows(rows, [0, 2])
    assert rows.lengths == [4, 3]
    for layer, kept in zip(rows.cache.layers, before, strict=True):
        assert torch.equal(layer.keys, kept)


def test_sliding_window_layers_stay_as_transformers_builds_them() -> None:
    from transformers import Qwen3Config
    from transformers.cache_utils import DynamicSlidingWindowLayer

    config = Qwen3Config(num_hidden_layers=2, layer_types=["full_attention", "sliding_attention"], sliding_window=4,
                         use_sliding_window=True)
    assert [type(layer) for layer in growing_cache(config).layers] == [PreallocatedLayer, DynamicSlidingWindowLayer]
