"""``python -m dart_core.bench app``: the figures it derives from a race log and an ``e2e.json`` (hand-made here: no
app, browser or model), its verdicts against the 10 % target, and the refusal to compare different prompts."""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path
from typing import Any

import pytest

from dart_core.bench import drive
from dart_core.bench import in_app as bench_app
from dart_core.bench.__main__ import main as bench_main
from dart_core.bench.e2e import BenchError, Sources

PROMPTS = [{"id": "0", "prompt": "Write a quicksort."}, {"id": "1", "prompt": "Explain DART. "}]
TREES = {"dart": {"top_k": 25, "beam": 20, "nodes": 16, "ngram_weight": 0.5}}


def method(label: str, tokens: int, steps: int, split: tuple[float, float, float], prefill_ms: float,
           ids: list[int], prompt_tokens: int) -> dict[str, Any]:
    """One method of a race as the app's "Run data" shows it (own clock = prefill + steps x split)."""
    return {"label": label, "status": "done", "stop_reason": "max_new_tokens", "error": None,
            "prompt_tokens": prompt_tokens, "tokens": tokens, "verify_steps": steps, "tau": (tokens - 1) / steps,
            "tokens_per_s": None, "speedup_vs_ar": None, "own_ms": prefill_ms + steps * sum(split),
            "prefill_ms": prefill_ms, "draft_ms_per_step": split[0], "search_ms_per_step": split[1],
            "verify_ms_per_step": split[2], "text": "…", "token_ids": ids}


def race_log() -> list[dict[str, Any]]:
    # pooled DART: (8 x 20 + 12 x 25) / 20 = 23 ms/step, 50 tokens / 0.5 s = 100 tok/s
    # pooled AR: 12.5 ms/step, 50 tokens / 0.625 s = 80 tok/s -> DART 1.25x
    races = [
        {"dart": method("DART", 20, 8, (2.0, 1.0, 17.0), 20.0, list(range(20)), 7),
         "ar": method("AR", 20, 19, (0.0, 0.0, 12.5), 12.5, list(range(20)), 7)},
        {"dart": method("DART", 30, 12, (4.0, 1.0, 20.0), 20.0, list(range(30)), 9),
         "ar": method("AR", 30, 29, (0.0, 0.0, 12.5), 12.5, list(range(30)), 9)},
    ]
    settings = {"temperature": 0.0, "top_p": 1.0, "top_k": 0, "max_new_tokens": 30, "seed": 0, "racer_settings": TREES}
    return [{"time": 1.0 + i, "prompt": p["prompt"].strip(), "wall_s": 1.0,
             "result": {"methods": r, "greedy_matches_ar": {"dart": True}, "settings": settings}}
            for i, (p, r) in enumerate(zip(PROMPTS, races, strict=True))]


def e2e_report() -> dict[str, Any]:
    def entry(pid: str, n_prompt: int, n_out: int) -> dict[str, Any]:
        steps = [{"tokens": list(range(n_out))}]
        return {"id": pid, "prompt_tokens": n_prompt, "methods": {"dart": {"steps": steps}, "ar": {"steps": steps}}}

    return {
        "config": {"resolved": {"racer_settings": {**TREES, "eagle3": {"total": 60, "depth": 7, "top_k": 10}}}},
        "summary": {  # DART 21 ms/step, 110 tok/s; AR 11 ms/step, 90 tok/s -> DART 1.222x
            "dart": {"tokens": 50, "verify_steps": 20, "tokens_per_s": 110.0, "draft_ms_per_step": 2.0,
                     "search_ms_per_step": 1.0, "verify_ms_per_step": 18.0},
            "ar": {"tokens": 50, "verify_steps": 48, "tokens_per_s": 90.0, "draft_ms_per_step": 0.0,
                   "search_ms_per_step": 0.0, "verify_ms_per_step": 11.0},
        },
        "prompts": [entry("0", 7, 20), entry("1", 9, 30)],
    }


def write_inputs(tmp_path: Path) -> tuple[Path, Path]:
    log = tmp_path / "race-log.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in race_log()) + "\n", encoding="utf-8")
    report = tmp_path / "e2e.json"
    report.write_text(json.dumps(e2e_report()), encoding="utf-8")
    return log, report


def test_figures_ratios_and_verdicts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log, report_path = write_inputs(tmp_path)
    races = drive.read_race_log(log)
    report = json.loads(report_path.read_text(encoding="utf-8"))
    assert len(races) == 2
    assert bench_app.check_same_work(races, report, PROMPTS, max_new_tokens=30) == []

    app_figs = bench_app.pool_races(races)
    assert app_figs["dart"]["ms_per_step"] == pytest.approx(23.0)
    assert app_figs["dart"]["tokens_per_s"] == pytest.approx(100.0)
    assert app_figs["ar"]["ms_per_step"] == pytest.approx(12.5)
    assert app_figs["ar"]["tokens_per_s"] == pytest.approx(80.0)
    assert app_figs["dart"]["speedup_vs_ar"] == pytest.approx(1.25)
    assert (app_figs["dart"]["prefill_ms"], app_figs["ar"]["prefill_ms"]) == (20.0, 12.5)  # mean per prompt

    rows = bench_app.compare(app_figs, bench_app.bench_figures(report))
    assert list(rows) == ["dart", "ar"]
    dart, ar = rows["dart"], rows["ar"]
    assert dart["bench_ms_per_step"] == pytest.approx(21.0)
    assert dart["ms_per_step_ratio"] == pytest.approx(23 / 21)  # +9.5 %: within
    assert dart["tokens_per_s_ratio"] == pytest.approx(100 / 110)
    assert dart["bench_speedup_vs_ar"] == pytest.approx(110 / 90)
    assert dart["speedup_vs_ar_ratio"] == pytest.approx(1.25 / (110 / 90))  # +2.3 %: within
    assert (dart["ms_within"], dart["speedup_within"], dart["within"]) == (True, True, True)
    assert ar["ms_per_step_ratio"] == pytest.approx(12.5 / 11)  # +13.6 %: out
    assert ar["speedup_vs_ar_ratio"] == pytest.approx(1.0)
    assert (ar["ms_within"], ar["speedup_within"], ar["within"]) == (False, None, False)

    bench_app.print_table(rows, 2, "no page")
    printed = capsys.readouterr().out
    assert "within the 10 % target" in printed
    assert "DART yes · AR NO (ms/step +13.6 %)" in printed


def test_verdict_at_the_edges() -> None:
    """Exactly 10 % off is within; a speedup miss alone fails a method; faster in the app counts as off too."""
    def figs(ms: float, tps: float, ar_tps: float) -> dict[str, dict[str, Any]]:
        out = {"dart": {"label": "DART", "ms_per_step": ms, "tokens_per_s": tps},
               "ar": {"label": "AR", "ms_per_step": 10.0, "tokens_per_s": ar_tps}}
        bench_app._speedups(out)
        return out

    bench = figs(10.0, 100.0, 50.0)  # 2.0x
    edge = bench_app.compare(figs(11.0, 110.0, 55.0), bench)["dart"]
    assert (edge["ms_within"], edge["speedup_within"]) == (True, True)
    slow = bench_app.compare(figs(10.0, 100.0, 60.0), bench)["dart"]  # 1.667x vs 2.0x: -16.7 %
    assert (slow["ms_within"], slow["speedup_within"], slow["within"]) == (True, False, False)
    fast = bench_app.compare(figs(8.0, 100.0, 50.0), bench)["dart"]
    assert (fast["ms_within"], fast["within"]) == (False, False)
    assert "DART NO (speedup -16.7 %)" in bench_app.verdict_line({"dart": slow})


def test_prompt_mismatch_is_an_error() -> None:
    races, report = race_log(), e2e_report()
    other = copy.deepcopy(races)
    other[1]["result"]["methods"]["dart"]["prompt_tokens"] = 11  # another chat encoding in the app
    with pytest.raises(bench_app.PromptMismatch, match=r"prompt 1: DART got 11 prompt tokens in the app, 9 in the "
                                                       r"bench \(the chat encodings differ\)"):
        bench_app.check_same_work(other, report, PROMPTS, max_new_tokens=30)
    swapped = [races[1], races[0]]
    with pytest.raises(bench_app.PromptMismatch, match=r"prompt 0: the app raced 'Explain DART\.'"):
        bench_app.check_same_work(swapped, report, PROMPTS, max_new_tokens=30)
    with pytest.raises(bench_app.PromptMismatch, match="1 prompts sent, but the app logged 2 races"):
        bench_app.check_same_work(races, report, PROMPTS[:1], max_new_tokens=30)
    with pytest.raises(bench_app.PromptMismatch, match="raced 30 new tokens, not 64"):
        bench_app.check_same_work(races, report, PROMPTS, max_new_tokens=64)
    resized = copy.deepcopy(races)
    resized[0]["result"]["settings"]["racer_settings"] = {"dart": {**TREES["dart"], "nodes": 60}}
    with pytest.raises(bench_app.PromptMismatch, match=r"prompt 0: DART settings \{.*'nodes': 60.*\} in the app"):
        bench_app.check_same_work(resized, report, PROMPTS, max_new_tokens=30)


def test_other_outputs_are_a_warning_and_stopped_races_an_error() -> None:
    races, report = race_log(), e2e_report()
    races[1]["result"]["methods"]["dart"]["token_ids"] = [*range(29), 7]
    assert bench_app.check_same_work(races, report, PROMPTS, max_new_tokens=30) == [
        "prompt 1: DART generated other tokens in the app (30) than in the bench (30)"]
    races[0]["result"]["methods"]["ar"]["status"] = "stopped"
    with pytest.raises(BenchError, match="AR ended 'stopped' in the app"):
        bench_app.pool_races(races)


def test_bad_race_log_line(tmp_path: Path) -> None:
    log = tmp_path / "race-log.jsonl"
    log.write_text(json.dumps(race_log()[0]) + "\n{\"prompt\": \"x\"}\n", encoding="utf-8")
    with pytest.raises(BenchError, match=r"race-log\.jsonl:2: not a race-log line"):
        drive.read_race_log(log)
    assert drive.read_race_log(tmp_path / "missing.jsonl") == []


def test_app_command_is_accepted_by_the_app(tmp_path: Path) -> None:
    """The flags the bench starts the app with parse in the app's own CLI (the model parts the e2e run uses)."""
    from dart_arena.__main__ import build_parser

    parser = argparse.ArgumentParser()
    bench_app.add_arguments(parser)
    args = parser.parse_args(["--bundle", "b", "--max-new-tokens", "32", "--raw"])
    src = Sources(base="b/target", drafters={"dart": "b/dart", "eagle3": None}, ngram="b/ngram/small.ngram",
                  small_ngram=False, prompts=Path("b/prompts.jsonl"), chat=False, bundle=Path("b"))
    cmd = bench_app.app_command(args, src, 7000, tmp_path / "log.jsonl")
    assert cmd[:3] == list(bench_app.APP_COMMAND)
    parsed = build_parser().parse_args(cmd[3:])
    assert parsed.server_port == 7000 and parsed.max_new_tokens == 32
    assert parsed.race_log == tmp_path / "log.jsonl"
    assert parsed.dart_model_name_or_path == "b/dart" and parsed.compare_eagle3 is False
    assert parsed.template_name == "raw" and parsed.cpu_linear == "auto"
    assert bench_app.model_flags(args) == ["--bundle", "b", "--dtype", "auto", "--raw", "--cpu-linear", "auto"]
    stock = parser.parse_args(["--bundle", "b", "--cpu-linear", "stock"])
    assert build_parser().parse_args(bench_app.app_command(stock, src, 7000, tmp_path / "l")[3:]).cpu_linear == "stock"
    assert bench_app.model_flags(stock)[-2:] == ["--cpu-linear", "stock"]
    eager = parser.parse_args(["--bundle", "b", "--no-fast-path"])
    app_args = build_parser().parse_args(bench_app.app_command(eager, src, 7000, tmp_path / "l")[3:])
    assert (app_args.fast_path, app_args.fast_path_mode) == (0, "graphs")
    compiled = parser.parse_args(["--bundle", "b", "--fast-path", "512", "--fast-path-mode", "compile"])
    app_args = build_parser().parse_args(bench_app.app_command(compiled, src, 7000, tmp_path / "l")[3:])
    assert (app_args.fast_path, app_args.fast_path_mode) == (512, "compile")


def test_subcommand_setup_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Registered under ``python -m dart_core.bench app``; a setup problem is one line and exit code 2, before any
    process starts."""
    assert bench_main(["app", "--no-browser", "--bundle", str(tmp_path / "nowhere"), "--out", str(tmp_path)]) == 2
    assert "error:" in capsys.readouterr().err


def test_missing_browser_pieces_are_one_line_errors(monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    real = bench_app.importlib.util.find_spec
    monkeypatch.setattr(bench_app.importlib.util, "find_spec",
                        lambda name, *a: None if name == "playwright" else real(name, *a))
    assert bench_main(["app"]) == 2
    assert "needs the playwright package" in capsys.readouterr().err
    monkeypatch.setattr(bench_app.importlib.util, "find_spec", real)
    monkeypatch.setattr(bench_app, "chromium_binary", lambda: None)
    assert bench_main(["app"]) == 2
    assert "no chromium binary" in capsys.readouterr().err
