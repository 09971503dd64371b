"""``python -m dart_core.bench long`` on the toy bundle: every drafting method reaches the length (stop tokens
ignored), and the first / last window figures are reported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers_app import BUNDLE

from dart_core.bench.__main__ import main
from dart_core.racers.registry import model_free_racers


def test_long_generation_reports_first_and_last_drafter_cost(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    if not (BUNDLE / "target" / "config.json").is_file():
        pytest.skip("assets/tiny is missing")
    out = tmp_path / "long.json"
    assert main(["long", "--bundle", str(BUNDLE), "--tokens", "60", "--window", "5", "--device", "cpu",
                 "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    model_free = {r.key for r in model_free_racers()}  # built with every target; the toy has a store
    assert set(report["methods"]) == {"dart", "eagle3", *model_free}
    for m, f in report["methods"].items():
        assert f["tokens"] == 60 and f["window"] == 5, m
        if m not in model_free:  # a lookup can cost under the clock's resolution: its ratio is then None
            assert f["draft_ms_first"] > 0 and f["last_over_first"] > 0, m
    assert "last/first" in capsys.readouterr().out
    assert main(["long", "--bundle", str(BUNDLE), "--tokens", "5000", "--device", "cpu"]) == 2  # past the context
