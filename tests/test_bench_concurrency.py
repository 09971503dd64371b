"""``python -m dart_core.bench concurrency`` on the toy bundle: every racer decodes the prompts in batches of B
streams, each stream's greedy text equals plain decoding's for its prompt at every B, the figures add up to the
streams' tokens, the speedups are over batched plain decoding at the same B, the crossover is the first B where a
racer stops paying, the tree-size rule shrinks trees by B, and bad values are refused at once, naming the value."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers_app import BUNDLE

from dart_core.bench import concurrency
from dart_core.bench.__main__ import main
from dart_core.drafters.settings import knobs, shrink_for_streams
from dart_core.racers.registry import BASELINE, RACERS

if not (BUNDLE / "target" / "config.json").is_file():
    pytest.skip("assets/tiny is missing", allow_module_level=True)

COMMON = ["--bundle", str(BUNDLE), "--dtype", "float32", "--threads", "1", "--no-progress", "--no-html"]


def test_the_sweep_is_lossless_and_its_figures_add_up(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "run"
    assert main(["concurrency", *COMMON, "--limit", "4", "--streams", "1,2,4", "--max-new-tokens", "12",
                 "--out", str(out)]) == 0
    report = json.loads((out / "concurrency.json").read_text())
    methods = report["config"]["methods"]
    assert BASELINE in methods and "dart" in methods and "eagle3" in methods and "hf" in methods
    assert list(report["by_streams"]) == ["1", "2", "4"]
    for b, racers in report["by_streams"].items():
        ar = racers[BASELINE]
        for m, f in racers.items():
            assert f["mismatches"] == 0, (b, m)  # float32: every stream is its own plain decoding
            assert f["streams"] == 4 and f["batches"] == 4 // int(b), (b, m)
            assert 0 < f["tokens"] <= 4 * 12
            assert f["tokens_per_s"] == pytest.approx(f["tokens"] / (f["wall_ms"] / 1e3))
            assert f["speedup_vs_ar"] == pytest.approx(f["tokens_per_s"] / ar["tokens_per_s"])
        assert ar["tau"] == 1.0 and ar["speedup_vs_ar"] == pytest.approx(1.0)
        assert racers["dart"]["tau"] > 1.0  # it accepted drafts
        assert racers["dart"]["mean_rows"] <= int(b)  # streams that end leave the batch
    assert set(report["crossover"]) == {m for m in methods if m not in (BASELINE, "hf")}
    for m, b in report["crossover"].items():
        assert b == concurrency.crossover(report["by_streams"], m)
    printed = capsys.readouterr().out
    assert "crossover" in printed and "mismatch" in printed


def test_the_crossover_is_the_first_stream_count_that_stops_paying() -> None:
    by = {"1": {"x": {"speedup_vs_ar": 1.4}}, "2": {"x": {"speedup_vs_ar": 1.0}}, "4": {"x": {"speedup_vs_ar": 1.2}},
          "8": {"x": {"speedup_vs_ar": 0.7}}}
    assert concurrency.crossover(by, "x") == 2  # no longer beats plain decoding: a tie counts
    assert concurrency.crossover({"1": {"x": {"speedup_vs_ar": 1.1}}, "16": {"x": {"speedup_vs_ar": 1.01}}},
                                 "x") is None
    assert concurrency.crossover({"2": {"x": {"speedup_vs_ar": 0.9}}, "10": {"x": {"speedup_vs_ar": 0.5}}},
                                 "x") == 2  # by number, not by the keys' text order


def test_trees_shrink_by_the_number_of_streams() -> None:
    for r in RACERS:
        if not r.drafts:
            continue
        s = r.default_settings("cpu")
        sizes = [k for k in knobs(type(s)) if k.size]  # every drafting racer names the fields that size it
        assert sizes, r.key
        assert shrink_for_streams(s, 1) == s
        for b in (2, 3, 8, 1000):
            shrunk = shrink_for_streams(s, b)
            for size in sizes:
                want = max(int(size.low), -(-getattr(s, size.name) // b))
                assert getattr(shrunk, size.name) == want, (r.key, size.name, b)
            assert {k.name: getattr(shrunk, k.name) for k in knobs(type(s)) if not k.size} == \
                   {k.name: getattr(s, k.name) for k in knobs(type(s)) if not k.size}
    with pytest.raises(ValueError, match="streams must be at least 1, got 0"):
        shrink_for_streams(RACERS[0].default_settings("cpu"), 0)


def test_shrunk_trees_stay_lossless(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert main(["concurrency", *COMMON, "--limit", "2", "--streams", "2", "--max-new-tokens", "10",
                 "--methods", "dart,eagle3", "--no-hf-generate", "--shrink-trees", "--out", str(out)]) == 0
    report = json.loads((out / "concurrency.json").read_text())
    assert report["config"]["shrink_trees"] is True
    assert all(f["mismatches"] == 0 for f in report["by_streams"]["2"].values())


def test_rows_share_one_budget_per_batch_and_stay_lossless(tmp_path: Path) -> None:
    """The automatic budget's row beside today's fixed trees (``dart:budget=off``), at B = 1 and 2: lossless, each
    row's rule in the JSON, the automatic row's cost curves measured per batch size."""
    out = tmp_path / "run"
    assert main(["concurrency", *COMMON, "--limit", "2", "--streams", "1,2", "--max-new-tokens", "10",
                 "--methods", "dart,dart:budget=off", "--no-hf-generate", "--out", str(out)]) == 0
    report = json.loads((out / "concurrency.json").read_text())
    assert report["config"]["budgets"] == {"dart": "node", "dart:budget=off": "off"}
    assert all(f["mismatches"] == 0 for r in report["by_streams"].values() for f in r.values())
    # a curve per batch size; one stream's chains, when a step's cut left one, priced by a chain curve of its own
    assert {"1", "2"} <= set(report["budgets"]["dart"]["cost_curves"]) <= {"1", "1-chain", "2"}
    assert set(report["crossover"]) == {"dart", "dart:budget=off"}


def test_the_sweep_runs_on_the_fast_path(tmp_path: Path) -> None:
    """``--fast-path`` on a CPU: the static caches' graph path, uncaptured, every B of the sweep (the GPU check's
    concurrency sweep in small): lossless, and the run data says which path raced."""
    out = tmp_path / "run"
    assert main(["concurrency", *COMMON, "--limit", "4", "--streams", "1,3", "--max-new-tokens", "10",
                 "--methods", "dart,eagle3", "--no-hf-generate", "--fast-path", "256", "--out", str(out)]) == 0
    report = json.loads((out / "concurrency.json").read_text())
    assert report["environment"]["fast_path"] == "graphs" and report["environment"]["fast_path_rows"] == 256
    assert all(f["mismatches"] == 0 for racers in report["by_streams"].values() for f in racers.values())
    assert report["by_streams"]["3"]["dart"]["tau"] > 1.0


def test_the_fast_path_plans_every_bucket_s_static_caches() -> None:
    class Target:
        static_capacity, kv_bytes_per_token, vocab_size, fast_path = 100, 10, 1, "graphs"

    # B = 3 and 8: buckets of 4 and 8 rows, and 2 and 1 for streams that end: 15 caches of 100 rows
    assert concurrency.batch_memory(Target(), [3, 8], 50, 4) == 15 * 100 * 10 + 8 * 4 * 4 * 2
    Target.static_capacity = None  # the dynamic cache: the largest batch's rows and one tree each
    assert concurrency.batch_memory(Target(), [3, 8], 50, 4) == 8 * 54 * 10 + 8 * 4 * 4 * 2


@pytest.mark.parametrize(("argv", "message"), [
    (["--streams", "0"], "--streams 0: a batch needs at least 1 stream"),
    (["--streams", "1,3", "--limit", "2"], "--streams 3: only 2 prompt(s) given"),
    (["--streams", "two"], "--streams takes comma-separated integers, got 'two'"),
    (["--max-new-tokens", "0"], "--max-new-tokens must be at least 1, got 0"),
    (["--methods", "nope"], "--methods nope: 'nope' is no racer; known: dart, eagle3"),
])
def test_bad_values_are_refused_naming_them(argv: list[str], message: str, tmp_path: Path,
                                            capsys: pytest.CaptureFixture) -> None:
    assert main(["concurrency", *COMMON, "--out", str(tmp_path), *argv]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "concurrency.json").exists()


def test_a_batch_that_would_not_fit_the_memory_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setattr(concurrency, "free_memory", lambda device: 1 << 20)  # 1 MiB free
    assert main(["concurrency", *COMMON, "--limit", "4", "--streams", "1,4", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--streams 4: the batch's KV caches and verify logits need about" in err and "GiB free on cpu" in err


def test_a_racer_that_remembers_runs_each_batch_cold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Suffix decoding's batches each draft from a fresh memory: it never holds more than its own batch's answers,
    so no stream count drafts from its answers to the same prompts at another."""
    from dart_core.drafters.suffix import SuffixDrafter
    from dart_core.suffix.cache import SuffixCache

    made: list[SuffixCache] = []

    def new_memory() -> SuffixCache:
        made.append(SuffixCache())
        return made[-1]

    monkeypatch.setattr(SuffixDrafter, "new_memory", staticmethod(new_memory))
    out = tmp_path / "run"
    assert main(["concurrency", *COMMON, "--limit", "4", "--streams", "1,2", "--max-new-tokens", "8",
                 "--methods", "suffix,ar", "--no-hf-generate", "--warmup", "0", "--out", str(out)]) == 0
    report = json.loads((out / "concurrency.json").read_text())
    assert all(report["by_streams"][b]["suffix"]["mismatches"] == 0 for b in ("1", "2"))
    batches = [m for m in made if m.held_answers]  # the drafter's own memory, made at loading, stays unused
    assert [m.held_answers for m in batches] == [1, 1, 1, 1, 2, 2]
