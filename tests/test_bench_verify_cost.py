"""``python -m dart_core.bench verify-cost``: times a verify of each tree size next to an AR step on one target."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from dart_core.bench import step_split
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


class ToyRMSNorm(torch.nn.Module):
    def __init__(self, now: list[float]) -> None:
        super().__init__()
        self.now = now

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.now[0] += 0.003
        return x


class SlowLinear(torch.nn.Linear):
    def __init__(self, now: list[float], name: str) -> None:
        super().__init__(2, 2)
        self.now, self.label = now, name

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.now[0] += 0.002
        return super().forward(x)


class ToyModel(torch.nn.Module):
    """1 ms of its own, a 3 ms norm, a 2 ms linear and a 2 ms output head, on a clock that only work advances."""

    def __init__(self, now: list[float]) -> None:
        super().__init__()
        self.now = now
        self.norm, self.proj, self.lm_head = ToyRMSNorm(now), SlowLinear(now, "proj"), SlowLinear(now, "head")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.now[0] += 0.001
        return self.lm_head(self.proj(self.norm(x)))


def test_the_module_clock_counts_each_module_exclusive_of_those_it_calls() -> None:
    now = [0.0]
    model = ToyModel(now)
    clock = step_split.ModuleClock(model, clock=lambda: now[0])
    with clock.installed():
        model(torch.zeros(1, 2))
        model(torch.zeros(1, 2))
    assert {f: round(ms, 6) for f, ms in clock.ms.items() if ms} == {"model": 2.0, "norm": 6.0, "linear": 4.0,
                                                                     "lm head": 4.0}
    assert clock.forward_ms == pytest.approx(16.0)  # two forwards of 8 ms: the families add up to the whole
    model(torch.zeros(1, 2))  # the hooks are gone after the block
    assert clock.forward_ms == pytest.approx(16.0)


def test_the_split_covers_the_target_and_adds_up(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if not (TINY / "target" / "config.json").is_file():
        pytest.skip("assets/tiny is missing")
    out = tmp_path / "cost.json"
    assert bench_main(["verify-cost", "--bundle", str(TINY), "--device", "cpu", "--sizes", "1,4", "--repeats", "3",
                       "--prefix", "64", "--split", "6", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "where a step goes" in printed and "| linear |" in printed and "| outside |" in printed
    split = json.loads(out.read_text())["split"]
    assert list(split) == ["plain step", "verify of 6"] and split["verify of 6"]["nodes"] == 6
    for kind, fig in split.items():
        assert list(fig["split_ms"]) == list(step_split.FAMILIES), kind
        assert all(ms >= 0 for ms in fig["split_ms"].values()), kind
        for family in ("linear", "lm head", "attention", "norm", "rotary", "residual", "model"):
            assert fig["split_ms"][family] > 0, (kind, family)  # every kind of module of the stock model is seen
        assert fig["clocked_ms"] > 0 and fig["bare_ms"] > 0
    assert bench_main(["verify-cost", "--bundle", str(TINY), "--split", "0"]) == 2
    assert "--split takes a node count from 1 to 256, got 0" in capsys.readouterr().out
