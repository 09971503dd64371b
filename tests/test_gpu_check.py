"""The prepared GPU check (``scripts/gpu_check.sh``, ``python -m dart_core.bench gpu-check``): its CPU smoke run goes
through the same steps at tiny shapes and writes its report; without CUDA it refuses in one line; a failing step is
reported while the others still run; ``--only`` / ``--skip`` / the budget decide which steps start."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dart_core.bench import gpu_check
from dart_core.bench.__main__ import main as bench

ROOT = Path(__file__).resolve().parents[1]


def test_the_smoke_check_runs_every_step_on_a_cpu(tmp_path: Path) -> None:
    out = tmp_path / "check"
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--device", "cpu", "--smoke", "--out",
                           str(out)], env={**os.environ, "PYTHON": sys.executable},
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads((out / "gpu_check.json").read_text())
    assert report["mode"] == "smoke" and report["device"].startswith("cpu")
    assert [(s["name"], s["status"]) for s in report["steps"]] == [
        ("bench tiny eager", "ok"), ("bench tiny graphs", "ok"), ("profile DART step tiny", "ok"),
        ("concurrency tiny", "ok"), ("race float32", "ok")]
    steps = {s["name"]: s["result"] for s in report["steps"]}
    assert steps["bench tiny graphs"]["fast_path"] == "graphs" and steps["bench tiny eager"]["fast_path"] is None
    assert {r["method"] for r in steps["bench tiny graphs"]["rows"]} == {"ar", "hf", "dart", "eagle3"}
    sweep = steps["concurrency tiny"]["by_streams"]  # B streams on the fast path: the GPU's sweep in small
    assert list(sweep) == ["1", "2", "4"]
    for b, rows in sweep.items():
        assert [r["method"] for r in rows] == ["ar", "dart", "eagle3"] and {r["streams"] for r in rows} == {int(b)}
        assert all(r["break_even_tau"] == pytest.approx(r["total_ms"] / rows[0]["total_ms"]) for r in rows[1:])
    race = steps["race float32"]
    assert race["mismatches"] == [] and race["exit_code"] == 0 and "dart" in race["summary"]
    assert "hf" not in race["summary"]  # the eager HF row is timed by bench gpu, not raced here
    markdown = (out / f"{gpu_check.REPORT}.md").read_text()
    assert "| race float32 | ok |" in markdown and "mismatches 0" in markdown
    assert "## concurrency tiny: Qwen3 tiny shapes, B streams on the fast path" in markdown


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal where there is no CUDA")
def test_without_cuda_the_check_says_so_and_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench(["gpu-check", "--out", str(tmp_path)]) == 2
    assert "no CUDA device here" in capsys.readouterr().out
    assert bench(["gpu-check", "--device", "cpu", "--out", str(tmp_path)]) == 2  # a CPU runs the smoke check only
    assert "only the smoke check" in capsys.readouterr().out
    assert not (tmp_path / "gpu_check.json").exists()


def test_a_failing_step_is_reported_and_the_rest_still_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a fault the GPU found")

    monkeypatch.setattr(gpu_check, "profile_dart_step", broken)
    code = bench(["gpu-check", "--device", "cpu", "--smoke", "--out", str(tmp_path), "--skip", "race float32"])
    assert code == 1
    steps = json.loads((tmp_path / "gpu_check.json").read_text())["steps"]
    status = {s["name"]: s["status"] for s in steps}
    assert status == {"bench tiny eager": "ok", "bench tiny graphs": "ok", "profile DART step tiny": "failed",
                      "concurrency tiny": "ok", "race float32": "skipped"}
    failed = next(s for s in steps if s["status"] == "failed")
    assert failed["error"] == "RuntimeError: a fault the GPU found" and "broken" in failed["traceback"]


def test_only_and_the_budget_decide_which_steps_start(tmp_path: Path) -> None:
    assert bench(["gpu-check", "--device", "cpu", "--smoke", "--out", str(tmp_path), "--only", "bench tiny eager"]) == 0
    steps = json.loads((tmp_path / "gpu_check.json").read_text())["steps"]
    assert [s["status"] for s in steps] == ["ok", "skipped", "skipped", "skipped", "skipped"]
    assert bench(["gpu-check", "--device", "cpu", "--smoke", "--out", str(tmp_path), "--budget", "0"]) == 0
    steps = json.loads((tmp_path / "gpu_check.json").read_text())["steps"]
    assert all(s["status"] == "skipped" and "budget" in s["why"] for s in steps)
