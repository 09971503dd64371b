"""The "Measured on this host" panel (``dart_core.race.standings``, ``dart_arena/standings_panel.py``): a real ``bench
e2e`` run on the toy bundle (assets/tiny), written where the benchmark writes by default, is found for the models the
app loads and shown with its figures, prompts, dtype, device, date and command; a run for another target is not, a racer
measured with another checkpoint keeps its row out; unreadable files and no run give the one-line hint with the command,
never an error. Model identities: a bundle's parts by their recorded digests (wherever the bundle lies), other local
checkpoints by their files' sizes and times."""

from __future__ import annotations

import html
import json
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from dart_arena.__main__ import build_parser, build_standings_panel, resolve
from dart_arena.standings_panel import shown_path, standings_html
from dart_core.bench.__main__ import main as bench_main
from dart_core.bundle import open_bundle
from dart_core.loading.identity import model_identity
from dart_core.race.standings import find_concurrency_run, find_standings, models_identity, suggest_command

REPO = Path(__file__).resolve().parent.parent
BUNDLE = REPO / "assets" / "tiny"
INFO = SimpleNamespace(drafters=["dart", "eagle3"], has_store=True, device="cpu", dtype="float32", threads=1)

if not (BUNDLE / "target" / "config.json").is_file():
    pytest.skip("the embedded bundle assets/tiny is missing", allow_module_level=True)


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run on the toy bundle, written to the default place ($DART_ARENA_RESULTS here)."""
    root = tmp_path_factory.mktemp("results")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DART_ARENA_RESULTS", str(root))
        assert bench_main(["e2e", "--bundle", str(BUNDLE), "--limit", "2", "--max-new-tokens", "8", "--no-html",
                           "--no-progress", "--threads", "1"]) == 0
    return root


def report(results: Path) -> dict[str, Any]:
    (path,) = results.glob("e2e-*/e2e.json")
    return json.loads(path.read_text())


def app_panel(results: Path, *flags: str, info: Any = INFO) -> Any:
    """The panel as ``python -m dart_arena --bundle assets/tiny ...`` makes it."""
    args = build_parser().parse_args(["--bundle", str(BUNDLE), "--bench-results", str(results), *flags])
    return build_standings_panel(args, resolve(args), info)


def test_a_real_run_is_found_and_shown_for_the_loaded_models(results: Path) -> None:
    run = report(results)
    assert run["run"]["command"].startswith(f"python -m dart_core.bench e2e --bundle {BUNDLE} --limit 2")
    panel = app_panel(results)
    assert run["run"]["models"] == panel.models  # the app's identities of the same models are the run's
    shown = panel()
    assert "standings-table" in shown
    for m, label in (("dart", "DART"), ("eagle3", "EAGLE-3"), ("hf", "HF generate"), ("ar", "AR")):
        s = run["summary"][m]
        row = shown.split(f">{label}</td>")[1].split("</tr>")[0]
        assert f"<td>{s['tau']:.2f}</td>" in row and f"<td>{s['tokens_per_s_wall']:.1f}</td>" in row
        assert f"<td>{s['tokens']:,}</td>" in row
        if m != "ar":
            assert f"<td>{s['speedup_vs_ar']:.2f}×</td>" in row
    for fact in ("2 prompts (prompts.jsonl)", "up to 8 new tokens each", "greedy", "float32 on cpu",
                 f"measured {run['run']['date']}", html.escape(run["run"]["command"]), "0 mismatches"):
        assert fact in shown, fact


def test_a_run_for_other_models_is_not_shown(results: Path, tmp_path: Path) -> None:
    bundle = open_bundle(BUNDLE)
    drafters = {k: str(v) for k, v in bundle.drafters.items()}
    other_target = models_identity("smollm2", drafters, str(bundle.ngram))
    assert find_standings(other_target, root=results) is None
    no_store = models_identity(bundle.target, drafters, None)  # the store shapes DART's trees: another setup
    assert find_standings(no_store, root=results) is None
    # DART retrained (another config.json), EAGLE-3 not loaded: their rows stay out, the rest is shown
    retrained = tmp_path / "dart"
    shutil.copytree(BUNDLE / "dart", retrained)
    cfg = json.loads((retrained / "config.json").read_text())
    (retrained / "config.json").write_text(json.dumps({**cfg, "note": "retrained"}))
    shown = app_panel(results, "--dart-model-name-or-path", str(retrained), "--no-compare-eagle3",
                      info=SimpleNamespace(**{**vars(INFO), "drafters": ["dart"]}))()
    assert ">AR</td>" in shown and ">HF generate</td>" in shown
    assert ">DART</td>" not in shown and ">EAGLE-3</td>" not in shown
    assert "DART left out: measured with another checkpoint" in shown
    assert "EAGLE-3 left out: not loaded here" in shown


def test_unreadable_or_missing_runs_give_the_hint(results: Path, tmp_path: Path) -> None:
    good = report(results)
    bad = {"garbage": "{not json", "list": "[1, 2]", "old": json.dumps({k: v for k, v in good.items() if k != "run"}),
           "no-models": json.dumps({**good, "run": {"command": "x", "date": "y"}}),
           "bad-summary": json.dumps({**good, "summary": [1]}), "binary": "\udcff"}
    for name, text in bad.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "e2e.json").write_text(text, errors="surrogateescape")
    (tmp_path / "dir" / "e2e.json").mkdir(parents=True)  # not a file
    panel = app_panel(tmp_path)
    for root in (tmp_path, tmp_path / "missing"):
        assert find_standings(panel.models, root=root) is None
    shown = app_panel(tmp_path)()
    assert shown.startswith('<div class="standings-hint">No <code>bench e2e</code> run for these models')
    assert "python -m dart_core.bench e2e --bundle" in shown and "--threads 1" in shown
    assert "No <code>bench e2e</code>" in app_panel(tmp_path / "missing")()
    assert shown_path(Path.home() / ".cache" / "x") == "~/.cache/x"  # the page names no user
    assert shown_path(Path("/srv/results")) == "/srv/results"


def test_the_latest_run_wins_the_loaded_setup_first(results: Path, tmp_path: Path) -> None:
    good = report(results)
    for name, date, dtype in (("a", "2026-01-01T00:00:00Z", "torch.float32"), ("b", "2026-02-01T00:00:00Z",
                                                                              "torch.bfloat16"),
                              ("c", "2025-12-01T00:00:00Z", "torch.float32")):
        (tmp_path / name).mkdir()
        run = {**good, "run": {**good["run"], "date": date}, "environment": {**good["environment"], "dtype": dtype}}
        (tmp_path / name / "e2e.json").write_text(json.dumps(run))
    models = good["run"]["models"]
    assert find_standings(models, root=tmp_path, device="cpu", dtype="float32").date.startswith("2026-01")
    assert find_standings(models, root=tmp_path, device="cpu", dtype="bfloat16").date.startswith("2026-02")
    latest = find_standings(models, root=tmp_path)
    assert latest is not None and latest.date.startswith("2026-02") and latest.dtype == "bfloat16"
    other = find_standings(models, root=tmp_path, device="cuda:0", dtype="bfloat16")
    assert other is not None and not other.same_setup
    assert "this app runs bfloat16 on cuda:0: no run on that setup was found" in standings_html(
        other, "cmd", tmp_path, loaded=("cuda:0", "bfloat16"))


def test_identities_follow_the_files(tmp_path: Path) -> None:
    copy = tmp_path / "tiny"
    shutil.copytree(BUNDLE, copy)
    for part in ("target", "dart", "ngram/small.ngram"):  # by the recorded digests, wherever the bundle lies
        found = model_identity(str(BUNDLE / part))
        assert found is not None and found.startswith("sha256:") and model_identity(str(copy / part)) == found
    assert model_identity(str(BUNDLE / "dart")) != model_identity(str(BUNDLE / "eagle3"))
    loose = tmp_path / "loose"
    shutil.copytree(BUNDLE / "dart", loose)
    before = model_identity(str(loose))
    assert before is not None and before.startswith("stat:") and before == model_identity(str(loose))
    (loose / "config.json").write_text((loose / "config.json").read_text() + " ")
    assert model_identity(str(loose)) != before  # rewritten: another checkpoint
    assert model_identity("smollm2").startswith("packaged:SmolLM2-135M-Instruct:sha256:")
    assert model_identity("some-org/some-model") == "hub:some-org/some-model"  # not in the local cache
    assert model_identity(None) is None


def test_the_suggested_command_measures_the_loaded_models(monkeypatch: pytest.MonkeyPatch) -> None:
    bundle = open_bundle(BUNDLE)
    drafters = {k: str(v) for k, v in bundle.drafters.items()}
    ngram = str(bundle.ngram)
    assert suggest_command(bundle.target, drafters, ngram, bundle=bundle) == \
        f"python -m dart_core.bench e2e --bundle {BUNDLE}"
    assert suggest_command(bundle.target, {**drafters, "dart": "/x/my dart"}, ngram, bundle=bundle, dtype="bfloat16",
                           threads=1) == (f"python -m dart_core.bench e2e --bundle {BUNDLE} --dart '/x/my dart' "
                                          "--dtype bfloat16 --threads 1")
    assert suggest_command("org/target", {"dart": "org/dart", "eagle3": None}, "org/ngram", small_ngram=True,
                           device="cuda") == ("python -m dart_core.bench e2e --base org/target --dart org/dart "
                                              "--ngram org/ngram --small-ngram --device cuda")
    monkeypatch.setenv("DART_ARENA_BUNDLE", str(BUNDLE))  # the default bundle needs no flag
    assert suggest_command(bundle.target, drafters, ngram, bundle=bundle) == "python -m dart_core.bench e2e"


def test_the_page_fills_the_panel_at_each_load(results: Path) -> None:
    """The page has the panel, closed below the live race, filled by a private load event with the run's table."""
    from dart_arena.model_client import LocalEngine
    from dart_arena.ui import AppConfig, ArenaUI
    from dart_core.arena import load_arena

    arena = load_arena(BUNDLE / "target", dart=BUNDLE / "dart", eagle3=BUNDLE / "eagle3",
                       ngram=BUNDLE / "ngram" / "small.ngram", device="cpu", progress=False)
    panel = app_panel(results)
    demo = ArenaUI(LocalEngine(arena), AppConfig(chat=False, standings=panel)).build()
    blocks = {getattr(b, "elem_id", None): b for b in demo.blocks.values()}
    assert blocks["standings"].open is False
    (load,) = [f for f in demo.fns.values() if f.fn is panel]
    assert load.outputs == [blocks["standings-table"]] and load.api_visibility == "private"
    assert f"<td>{report(results)['summary']['dart']['tau']:.2f}</td>" in load.fn()
    plain = ArenaUI(LocalEngine(arena), AppConfig(chat=False)).build()  # no panel asked for: none
    assert "standings" not in {getattr(b, "elem_id", None) for b in plain.blocks.values()}


def test_the_panel_shows_the_runs_categories_and_its_spread_over_seeds(tmp_path: Path) -> None:
    """A sampled run over two seeds on prompts of two categories: the panel adds the racers × categories table (τ ·
    speedup, the best racer) and each racer's mean ± spread over the seeds, from the run's own figures."""
    records = [json.loads(line) for line in (BUNDLE / "prompts.jsonl").read_text().splitlines()[:2]]
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({**r, "category": c}) + "\n"
                               for r, c in zip(records, ("code", "prose"), strict=True)))
    root = tmp_path / "results"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DART_ARENA_RESULTS", str(root))
        assert bench_main(["e2e", "--bundle", str(BUNDLE), "--prompts", str(prompts), "--max-new-tokens", "8",
                           "--temperature", "0.7", "--top-p", "0.9", "--seeds", "2", "--methods", "dart,ar",
                           "--no-hf-generate", "--no-html", "--no-progress", "--threads", "1"]) == 0
    run = report(root)
    shown = app_panel(root)()
    table = shown.split("standings-categories")[1].split("</table>")[0]
    for category in ("code", "prose"):
        row = table.split(f"<td>{category}</td>")[1].split("</tr>")[0]
        dart = run["by_category"][category]["dart"]
        assert f"<td>{dart['tau']:.2f} · {dart['speedup_vs_ar']:.2f}×</td>" in row
        assert row.endswith(f"<td>{'DART' if run['best_by_category'][category] == 'dart' else '–'}</td>")
    spread = shown.split("standings-spread")[1].split("</table>")[0]
    tau = run["spread"]["dart"]["tau"]
    assert f"{tau['mean']:.2f} ± {tau['std']:.2f}" in spread


def test_the_panel_shows_tau_by_position_of_the_last_long_run(results: Path, tmp_path: Path) -> None:
    """No ``bench long`` run yet: the panel gives the command for the loaded models (and the sampled run's);
    after one, its τ per output-position bucket for each racer, from the run's own ``long.json``."""
    panel = app_panel(results)
    shown = panel()
    assert "τ by position in a long answer" in shown and "python -m dart_core.bench long --bundle" in shown
    assert "--temperature 0.7 --top-p 0.9 --seeds 3" in shown  # this run was greedy: how to get sampled figures
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DART_ARENA_RESULTS", str(results))
        assert bench_main(["long", "--bundle", str(BUNDLE), "--limit", "1", "--max-new-tokens", "140",
                           "--methods", "dart,ar", "--threads", "1", "--no-html", "--no-progress"]) == 0
    (path,) = results.glob("long-*/long.json")
    run = json.loads(path.read_text())
    assert run["run"]["models"]["target"] == panel.models["target"]
    table = panel().split("standings-position")[1].split("</table>")[0]
    assert "<th>0–128</th><th>128–140</th>" in table
    row = table.split(">DART</td>")[1].split("</tr>")[0]
    assert row == "".join(f"<td>{b['racers']['dart']['tau']:.2f}</td>" for b in run["by_position"])
    other = app_panel(results, "--dart-model-name-or-path", str(tmp_path))  # another DART checkpoint: left out
    assert ">DART</td>" not in other().split("standings-position")[1].split("</table>")[0]


def test_the_panel_shows_the_last_concurrency_sweep_for_the_loaded_models(tmp_path: Path) -> None:
    """No sweep yet: the panel gives the ``bench concurrency`` command for the loaded models. After one, its speedup
    per stream count and crossover for each racer, from the run's own ``concurrency.json``; a racer measured with
    another checkpoint is left out, and a sweep of another target is not shown at all."""
    root = tmp_path / "results"
    panel = app_panel(root)
    assert panel.concurrency_run() is None
    assert "python -m dart_core.bench concurrency --bundle" in panel()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DART_ARENA_RESULTS", str(root))
        assert bench_main(["concurrency", "--bundle", str(BUNDLE), "--limit", "2", "--streams", "1,2",
                           "--max-new-tokens", "6", "--methods", "dart,eagle3,ar", "--no-hf-generate", "--warmup", "0",
                           "--threads", "1", "--no-html", "--no-progress"]) == 0
    (path,) = root.glob("concurrency-*/concurrency.json")
    sweep = json.loads(path.read_text())
    run = panel.concurrency_run()
    assert run is not None and run.path == path and run.streams == [1, 2] and run.mismatches == 0
    assert run.speedup["dart"] == [sweep["by_streams"][b]["dart"]["speedup_vs_ar"] for b in ("1", "2")]
    assert run.crossover == sweep["crossover"]
    table = panel().split("standings-concurrency")[1].split("</table>")[0]
    row = table.split(">DART</td>")[1].split("</tr>")[0]
    cross = sweep["crossover"]["dart"]
    assert row.endswith(f"<td>{f'B={cross}' if cross else 'none up to B=2'}</td>")
    other = app_panel(root, "--dart-model-name-or-path", str(tmp_path))  # another DART checkpoint: left out
    assert "dart" not in other.concurrency_run().speedup and "eagle3" in other.concurrency_run().speedup
    models = {**panel.models, "target": "another/target"}
    assert find_concurrency_run(models, root=root) is None


def test_the_panel_labels_cold_and_warm_rows_and_shows_a_runs_second_turns(results: Path, tmp_path: Path) -> None:
    """The toy's suffix racer ran as its cold and warm rows, each shown with its own label and figures; a run of two
    turns (``by_turn`` in its e2e.json) adds the second turns' table, labelled as such, from that turn's figures."""
    good = report(results)
    shown = app_panel(results)()
    for key, name in (("suffix", "Suffix decoding (cold)"), ("suffix:warm", "Suffix decoding (warm)")):
        row = shown.split(f">{name}</td>")[1].split("</tr>")[0]
        assert f"<td>{good['summary'][key]['tokens']:,}</td>" in row
    assert "turn 2 only" not in shown  # one turn: no second turns' table
    # the same run as if of two turns: turn 2's figures set apart from the pooled ones (tokens halved, τ marked)
    second = {m: {**f, "tokens": f["tokens"] // 2, "tau": 9.87} for m, f in good["summary"].items()}
    run = {**good, "by_turn": {"1": {"summary": good["summary"]}, "2": {"summary": second}},
           "config": {**good["config"], "resolved": {**good["config"]["resolved"], "turns": 2}}}
    (tmp_path / "two").mkdir()
    (tmp_path / "two" / "e2e.json").write_text(json.dumps(run))
    found = find_standings(good["run"]["models"], root=tmp_path)
    assert found is not None and list(found.turn_rows) == ["1", "2"]
    shown = app_panel(tmp_path)()
    table = shown.split("standings-turn")[1].split("</table>")[0]
    assert "turn 2 only (the follow-up, after each racer&#x27;s own first answer)" in table
    for key, name in (("dart", "DART"), ("suffix:warm", "Suffix decoding (warm)")):
        row = table.split(f">{name}</td>")[1].split("</tr>")[0]
        assert "<td>9.87</td>" in row and f"<td>{second[key]['tokens']:,}</td>" in row
    assert "9.87" not in shown.split("standings-turn")[0]  # the pooled table keeps the pooled figures
