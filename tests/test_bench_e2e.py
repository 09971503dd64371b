"""``python -m dart_core.bench e2e`` on a tiny bundle in the published formats: figures, report, AR check."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers_ckpt import write_tiny_bundle

from dart_core import generate
from dart_core.bench import e2e
from dart_core.bench.__main__ import main as bench_main
from dart_core.ngram import NgramStore

VOCAB = 97


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bundle")
    write_tiny_bundle(root, vocab=VOCAB)
    rng = np.random.default_rng(0)
    (root / "ngram").mkdir()
    NgramStore.build([rng.integers(2, VOCAB, size=400) for _ in range(8)], order=3).save(root / "ngram/small.ngram")
    lines = [json.dumps({"id": f"p{i}", "prompt": " ".join(f"w{int(t)}" for t in rng.integers(0, 90, size=12))})
             for i in range(5)]
    (root / "prompts.jsonl").write_text("\n".join(lines) + "\n")
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
    assert set(summary) == {"dart", "eagle3", "ar"}
    assert report["mismatches"] == []
    assert summary["ar"]["tau"] == 1.0
    assert summary["ar"]["speedup_vs_ar"] == pytest.approx(1.0)
    assert len(report["prompts"]) == 3
    assert {"torch", "device", "torch_threads"} <= set(report["environment"])
    for entry in report["prompts"]:
        ar_tokens = [t for s in entry["methods"]["ar"]["steps"] for t in s["tokens"]]
        for m, fig in entry["methods"].items():
            steps = fig["steps"]
            assert steps[0]["prefill"] and not any(s["prefill"] for s in steps[1:])
            assert fig["tokens"] == sum(len(s["tokens"]) for s in steps) == 16
            assert fig["verify_steps"] == len(steps) - 1
            assert fig["tau"] == pytest.approx((fig["tokens"] - 1) / fig["verify_steps"])
            assert all(len(s["tokens"]) == s["accepted"] + 1 for s in steps[1:])
            assert [t for s in steps for t in s["tokens"]] == ar_tokens, m
    for m, s in summary.items():
        assert sum(s["accept_hist"].values()) == s["verify_steps"], m
        assert s["tokens"] == sum(e["methods"][m]["tokens"] for e in report["prompts"])
        assert f"{m:<8} {s['tokens']:>7}" in printed
    html = (tmp_path / "out/e2e.html").read_text()
    assert "plotly" in html.lower()
    for title in e2e.FIGURE_TITLES:
        assert title in html


def test_missing_bundle_names_path_and_train_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope"
    assert _run(missing, tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert str(missing) in err
    assert "python -m dart_core.train all --out assets/tiny" in err


def test_wrong_token_is_reported_as_mismatch(bundle: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    real = generate.accept

    def broken(tree, logits, cfg, gen=None):  # type: ignore[no-untyped-def]
        result = real(tree, logits, cfg, gen)
        if sys._getframe(1).f_locals.get("method") == "eagle3":  # only EAGLE-3's loop: emit a wrong bonus token
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
