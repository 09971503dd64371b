"""``python -m dart_core.bench long`` on the toy bundle: every racer reaches the length (stop tokens ignored), the
figures per output-position bucket add up to the steps behind them, the speedups are over plain decoding in the
same bucket, and the drafter's first / last window cost is reported."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers_app import BUNDLE

from dart_core.bench.__main__ import main
from dart_core.bench.long import bucket_figures, buckets
from dart_core.racers.registry import BASELINE, model_free_racers


def test_buckets_follow_the_issue_edges_and_stop_at_the_length() -> None:
    assert buckets(2048) == [(0, 128), (128, 256), (256, 512), (512, 1024), (1024, 2048)]
    assert buckets(300) == [(0, 128), (128, 256), (256, 300)]
    assert buckets(60) == [(0, 60)]


def test_a_step_counts_in_the_bucket_where_it_starts() -> None:
    def step(n: int, prefill: bool = False) -> SimpleNamespace:
        return SimpleNamespace(tokens=[0] * n, prefill=prefill)

    # positions: prefill 0 (1 token), then steps at 1, 4, 7 (3 tokens each) and 10 (2 tokens)
    run = [(step(1, True), 5.0), (step(3), 1.0), (step(3), 1.0), (step(3), 2.0), (step(2), 2.0)]
    first, second = bucket_figures([run], [(0, 7), (7, 12)])
    assert first == {"tokens": 7, "verify_steps": 2, "tau": 3.0, "tokens_per_s": 7 / 0.007}
    assert second == {"tokens": 5, "verify_steps": 2, "tau": 2.5, "tokens_per_s": 5 / 0.004}
    empty = bucket_figures([run], [(12, 20)])[0]
    assert empty["tau"] is None and empty["tokens_per_s"] is None


def test_long_generation_reports_every_racer_by_position(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    if not (BUNDLE / "target" / "config.json").is_file():
        pytest.skip("assets/tiny is missing")
    out = tmp_path / "run"
    assert main(["long", "--bundle", str(BUNDLE), "--limit", "2", "--max-new-tokens", "150", "--window", "5",
                 "--device", "cpu", "--dtype", "float32", "--out", str(out), "--no-progress"]) == 0
    report = json.loads((out / "long.json").read_text())
    model_free = {r.key for r in model_free_racers()}  # built with every target; the toy has a store
    methods = report["config"]["methods"]
    assert set(methods) == {"dart", "eagle3", *model_free, BASELINE}
    assert [(b["start"], b["end"]) for b in report["by_position"]] == [(0, 128), (128, 150)]
    for m in methods:
        tokens = sum(b["racers"][m]["tokens"] for b in report["by_position"])
        assert tokens == 2 * 150, m  # both answers reach the length
        for b in report["by_position"]:
            f, ar = b["racers"][m], b["racers"][BASELINE]
            assert f["speedup_vs_ar"] == pytest.approx(f["tokens_per_s"] / ar["tokens_per_s"]), m
        if m == BASELINE:
            assert all(b["racers"][m]["tau"] == 1.0 for b in report["by_position"])
        elif m not in model_free:  # a lookup can cost under the clock's resolution: its ratio is then None
            assert report["drafter_cost"][m]["draft_ms_first"] > 0, m
    printed = capsys.readouterr().out
    assert "last/first" in printed and "128-150" in printed
    assert "Scatter" in (out / "long.html").read_text() or "scatter" in (out / "long.html").read_text()
    assert main(["long", "--bundle", str(BUNDLE), "--max-new-tokens", "5000", "--device", "cpu",
                 "--no-progress"]) == 2  # past the context


def test_the_report_marks_where_a_drafters_context_window_cuts_in(tmp_path: Path) -> None:
    from dart_core.bench.long import write_html

    racers = {m: {"tau": 2.0, "tokens_per_s": 10.0} for m in ("eagle3", BASELINE)}
    report = {"config": {"methods": ["eagle3", BASELINE], "n_prompts": 1, "max_new_tokens": 512, "device": "cpu",
                         "dtype": "float32", "mean_prompt_tokens": 40.0},
              "by_position": [{"start": a, "end": b, "racers": racers} for a, b in buckets(512)],
              "context_windows": {"eagle3": 300}}
    write_html(report, tmp_path / "long.html")
    page = (tmp_path / "long.html").read_text()
    assert "context window (300 rows)" in page and '"x0":"256–512"' in page.replace(" ", "")
