"""``python -m dart_core.bench gpu``: the per-step split at Qwen3 shapes with random weights, smoke-tested on the
tiny shape on a CPU (the figures that matter come from a GPU run; here: every row is there and sane)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from dart_core.bench import gpu
from dart_core.bench.__main__ import main as bench_main
from dart_core.engine.cpu import auto_dtype_name

TINY_ARGS = ["gpu", "--shapes", "tiny", "--device", "cpu", "--repeats", "2", "--prefix", "32"]


def _rows(fig: dict) -> dict[str, dict]:
    (shape,) = fig["shapes"]
    return {r["label"]: r for r in shape["rows"]}


def test_tiny_shape_on_cpu_gives_every_row(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "gpu.json"
    assert bench_main([*TINY_ARGS, "--tree-sizes", "4,8", "--depths", "2,3", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    for label in ("AR", "HF generate", "DART n=4", "DART n=8", "EAGLE-3 depth=2", "EAGLE-3 depth=3"):
        assert label in printed
    assert "floor unknown" in printed
    fig = json.loads(out.read_text())
    assert fig["device"] == "cpu" and fig["dtype"] == auto_dtype_name("cpu") and fig["prefix"] == 32  # --dtype auto
    (shape,) = fig["shapes"]
    assert shape["shape"] == "tiny" and shape["weight_bytes"] > 0
    assert shape["floor_ms"] is None and shape["bandwidth_bytes_per_s"] is None  # CPU, no --bandwidth
    rows = _rows(fig)
    assert set(rows) == {"AR", "HF generate", "DART n=4", "DART n=8", "EAGLE-3 depth=2", "EAGLE-3 depth=3"}
    for r in rows.values():
        for key in ("verify_ms", "total_ms", "verify_x_ar"):
            assert math.isfinite(r[key]) and r[key] > 0, (r["label"], key, r[key])
        assert r["x_floor"] is None
    assert rows["AR"]["verify_x_ar"] == 1.0 and rows["AR"]["tokens_per_s"] > 0
    assert rows["HF generate"]["generate_ms"]["32"] > rows["HF generate"]["generate_ms"]["1"]
    for label in ("DART n=4", "DART n=8", "EAGLE-3 depth=2", "EAGLE-3 depth=3"):
        r = rows[label]
        assert r["draft_ms"] > 0 and r["search_ms"] >= 0 and r["nodes"] >= 2
        assert r["break_even_tau"] == pytest.approx(r["total_ms"] / rows["AR"]["verify_ms"])
        assert r["total_ms"] == pytest.approx(r["draft_ms"] + r["search_ms"] + r["verify_ms"])
    assert rows["DART n=4"]["search_ms"] > 0  # DART's tree search, timed apart from its drafting
    assert rows["DART n=4"]["nodes"] <= 5 and rows["DART n=8"]["nodes"] <= 9  # nodes below the root + the root
    assert rows["EAGLE-3 depth=3"]["depth"] == 3


def test_bandwidth_gives_the_floor(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "gpu.json"
    assert bench_main([*TINY_ARGS, "--tree-sizes", "4", "--depths", "2", "--bandwidth", "100",
                       "--json", str(out)]) == 0
    assert "floor " in capsys.readouterr().out
    (shape,) = json.loads(out.read_text())["shapes"]
    assert shape["bandwidth_bytes_per_s"] == 100e9
    assert shape["floor_ms"] == pytest.approx(shape["weight_bytes"] / 100e9 * 1e3)
    for r in shape["rows"]:
        assert r["x_floor"] == pytest.approx(r["total_ms"] / shape["floor_ms"])


@pytest.mark.parametrize("argv", [["--shapes", "2b"], ["--shapes", ""], ["--tree-sizes", "0"], ["--depths", "x"]])
def test_bad_lists_are_argparse_errors(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        bench_main(["gpu", *argv])
    assert e.value.code == 2
    assert "error" in capsys.readouterr().err


def test_bad_settings_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_main([*TINY_ARGS, "--tree-sizes", "5000"]) == 2  # DART's tree size has a bound
    assert "error:" in capsys.readouterr().out
    assert bench_main([*TINY_ARGS, "--hf-tokens", "1"]) == 2


def test_weight_bytes_count_tied_embeddings_once() -> None:
    tiny = gpu.SHAPES["tiny"]
    untied = gpu.build_target(replace(tiny, tied=False), torch.device("cpu"), torch.float32)
    tied = gpu.build_target(replace(tiny, tied=True), torch.device("cpu"), torch.float32)
    assert tied.get_output_embeddings().weight is tied.get_input_embeddings().weight
    assert gpu.weight_bytes(untied) - gpu.weight_bytes(tied) == tiny.vocab * tiny.hidden * 4
    assert gpu.weight_bytes(untied) == sum(p.numel() * 4 for p in untied.parameters())
    # the memory check's estimate (built on the meta device) is the same count
    assert gpu.shape_weight_bytes(replace(tiny, tied=True), torch.float32) == gpu.weight_bytes(tied)
    assert gpu.shape_weight_bytes(tiny, torch.bfloat16) == gpu.weight_bytes(untied) // 2


def test_published_shapes() -> None:
    """The model cards' sizes: 8.2 G parameters for 8B (untied); 1.4 G + a 0.31 G embedding for 1.7B (tied)."""
    b8 = gpu.shape_weight_bytes(gpu.SHAPES["8b"], torch.bfloat16) / 2
    b17 = gpu.shape_weight_bytes(gpu.SHAPES["1.7b"], torch.bfloat16) / 2
    assert 8.1e9 < b8 < 8.3e9 and 1.65e9 < b17 < 1.8e9
    cfg = gpu.drafter_config_dict(gpu.SHAPES["8b"], "dart")
    assert cfg["draft_vocab_size"] == 32000 and cfg["draft_length"] == 8 and cfg["hidden_size"] == 4096
    assert "draft_length" not in gpu.drafter_config_dict(gpu.SHAPES["8b"], "eagle3")


@pytest.mark.parametrize("kind", ["dart", "eagle3"])
def test_random_drafters_have_the_published_tensors(kind: str) -> None:
    from dart_core.drafters.checkpoint import check_d2t, check_state, layer_shapes

    tiny = gpu.SHAPES["tiny"]
    model = gpu.build_target(tiny, torch.device("cpu"), torch.float32)
    drafter = gpu.build_drafter(kind, tiny, model)
    cfg = drafter.config
    expected = layer_shapes(cfg) | ({"midlayer.mask_rep": (2 * cfg.hidden_size,)} if kind == "dart" else {})
    state = {k: v for k, v in drafter.state_dict().items()}
    check_state(state, expected, optional=frozenset({"t2d"}), source=kind)  # raises on any mismatch
    check_d2t(state["d2t"], cfg, kind)
    assert drafter.embed_weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()  # shared
    assert drafter.feature_layers == (2, 4, 5)


def test_peak_bandwidth_by_name() -> None:
    assert gpu.peak_bandwidth("NVIDIA H100 80GB HBM3") == 3.35e12
    assert gpu.peak_bandwidth("NVIDIA H100 PCIe") == 2.0e12
    assert gpu.peak_bandwidth("NVIDIA H200") == 4.8e12
    assert gpu.peak_bandwidth("NVIDIA A100-SXM4-80GB") == 2.0e12
    assert gpu.peak_bandwidth("NVIDIA A100 80GB PCIe") == 2.0e12
    assert gpu.peak_bandwidth("NVIDIA A100-SXM4-40GB") is None
    assert gpu.peak_bandwidth("Tesla T4") is None
