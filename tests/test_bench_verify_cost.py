"""``python -m dart_core.bench verify-cost``: times a verify of each tree size next to an AR step on one target."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dart_core.bench.__main__ import main as bench_main
from dart_core.bench.verify_cost import chain_tree

TINY = Path(__file__).resolve().parent.parent / "assets" / "tiny"


def test_chain_tree_has_n_nodes_in_a_line() -> None:
    tree = chain_tree(5, vocab=50, seed=0)
    assert tree.size == 5 and tree.parents.tolist() == [-1, 0, 1, 2, 3]
    assert tree.depths.tolist() == [0, 1, 2, 3, 4]


def test_verify_cost_table_on_the_toy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if not (TINY / "target" / "config.json").is_file():
        pytest.skip("assets/tiny is missing")
    out = tmp_path / "cost.json"
    assert bench_main(["verify-cost", "--bundle", str(TINY), "--device", "cpu", "--sizes", "1,4,8", "--repeats", "2",
                       "--prefix", "64", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "AR step (1 token)" in printed and "| 8 |" in printed
    fig = json.loads(out.read_text())
    assert fig["ar_ms"] > 0 and set(fig["verify_ms"]) == {"1", "4", "8"}
    assert bench_main(["verify-cost", "--bundle", str(TINY), "--sizes", "0"]) == 2
    assert bench_main(["verify-cost", "--bundle", str(tmp_path / "nope")]) == 2
    assert "not found" in capsys.readouterr().out
