"""The N-gram store chosen by measured τ (``dart_core.train.ngram_choice``, ``python -m dart_core.train
ngram-store``): candidates built, those within the budget raced on the loaded target, the best kept, τ against data
size."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dart_core.ngram.store import NgramStore
from dart_core.train.__main__ import main as train_main
from dart_core.train.ngram_choice import (
    SweepPlan,
    build_candidates,
    keep_chosen,
    load_sweep_arena,
    race_tau,
    store_methods,
    store_racers,
    sweep,
)

TINY = Path(__file__).resolve().parent.parent / "assets" / "tiny"
NEW = 24


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The stdlib toy on its own store, two held-out prompts, and data: the target's own greedy answers to them
    (what a store should hold to draft well) plus unrelated text from another file."""
    if not (TINY / "target" / "config.json").is_file():
        pytest.skip("assets/tiny is missing")
    work = tmp_path_factory.mktemp("ngram")
    arena = load_sweep_arena(str(TINY / "target"), store_racers(TINY), TINY / "ngram" / "small.ngram",
                             device="cpu", dtype="float32", threads=1, progress=False)
    records = [json.loads(line) for line in (TINY / "prompts.jsonl").read_text().splitlines()[:2]]
    prompts = [arena.tokenizer(r["prompt"], add_special_tokens=False)["input_ids"] for r in records]
    own = []
    for ids in prompts:
        steps = list(arena.stream("ar", ids, max_new_tokens=NEW))
        own.append(ids + [t for s in steps for t in s.tokens])
    unrelated = arena.tokenizer(Path(json.__file__).read_text(), add_special_tokens=False)["input_ids"]
    data = work / "data.jsonl"
    data.write_text("".join(json.dumps({"id": str(i), "ids": s, "n_prompt": 0, "answer": ""}) + "\n"
                            for i, s in enumerate([*own, unrelated])))
    (work / "prompts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return {"arena": arena, "prompts": prompts, "own": own, "unrelated": [unrelated], "work": work, "data": data}


def test_store_racers_are_the_ones_that_search_with_a_store(toy: dict[str, Any]) -> None:
    assert store_racers(TINY) == {"dart": TINY / "dart"}  # EAGLE-3 drafts without the store
    assert store_methods(toy["arena"]) == ("dart", "ngram-only")
    assert "prompt-lookup" not in toy["arena"].drafters  # the other model-free racers stay off


def test_a_store_of_the_targets_own_answers_drafts_better_than_unrelated_text(toy: dict[str, Any]) -> None:
    """use_store swaps the store under every racer that searches with one: the same race, other figures."""
    arena, work = toy["arena"], toy["work"]
    taus = {}
    for name in ("own", "unrelated"):
        path = work / f"{name}.ngram"
        NgramStore.build(toy[name], order=4).save(path)
        store = NgramStore.load(path, progress=False)
        arena.use_store(store)
        assert arena.drafters["ngram-only"].store is store and arena.drafters["dart"].store is store
        taus[name] = race_tau(arena, toy["prompts"], ("ngram-only",), NEW)["ngram-only"]["tau"]
        arena.use_store(None)
        store.close()
    assert taus["own"] > taus["unrelated"] and taus["own"] >= 2.0, taus


def test_sweep_races_what_fits_chooses_the_best_and_measures_data_size(toy: dict[str, Any]) -> None:
    arena, work = toy["arena"], toy["work"] / "sweep"
    seqs = [*toy["own"], *toy["unrelated"]]
    probe = build_candidates(seqs, SweepPlan(orders=(2, 4), min_counts=(1, 2), max_bytes=1 << 40), work / "probe")
    sizes = {(c["order"], c["min_count"]): c["bytes"] for c in probe}
    budget = sizes[(4, 1)] - 1  # the largest candidate is over it
    plan = SweepPlan(orders=(2, 4), min_counts=(1, 2), max_bytes=budget, methods=("ngram-only", "dart"),
                     max_new_tokens=NEW, fractions=(0.5,))
    candidates = build_candidates(seqs, plan, work)
    over = [c for c in candidates if c.get("over_budget")]
    assert [(c["order"], c["min_count"]) for c in over] == [(4, 1)] and not Path(over[0]["path"]).exists()
    record = sweep(arena, seqs, candidates, toy["prompts"], plan, work, progress=False)
    raced = [c for c in record["candidates"] if "tau" in c]
    assert len(raced) == 3 and all(set(c["tau"]) == {"ngram-only", "dart"} for c in raced)
    best = max(c["tau"]["ngram-only"]["tau"] for c in raced)
    chosen = record["chosen"]
    assert chosen["tau"]["ngram-only"]["tau"] == best
    assert chosen["bytes"] == min(c["bytes"] for c in raced if c["tau"]["ngram-only"]["tau"] == best)  # tie: smaller
    # τ is the race's own: the chosen store raced again gives the same figure
    store = NgramStore.load(chosen["path"], progress=False)
    arena.use_store(store)
    assert race_tau(arena, toy["prompts"], ("ngram-only",), NEW)["ngram-only"]["tau"] == best
    arena.use_store(None)
    store.close()
    half, full = record["by_data_size"]
    assert (half["fraction"], full["fraction"]) == (0.5, 1.0) and half["data_tokens"] < full["data_tokens"]
    assert (half["order"], half["min_count"]) == (chosen["order"], chosen["min_count"])
    out = toy["work"] / "bundle" / "ngram" / "small.ngram"
    keep_chosen(record, out)
    assert out.read_bytes() and NgramStore.load(out, progress=False).order == chosen["order"]
    assert not any(Path(c["path"]).exists() for c in record["candidates"])


def test_bad_plans_and_inputs_are_refused_by_name(toy: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="orders must be at least 2"):
        SweepPlan(orders=(1, 3), min_counts=(1,), max_bytes=10)
    with pytest.raises(ValueError, match="min_counts must be at least 1"):
        SweepPlan(orders=(3,), min_counts=(0,), max_bytes=10)
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        SweepPlan(orders=(3,), min_counts=(1,), max_bytes=10, fractions=(1.0,))
    plan = SweepPlan(orders=(2, 3), min_counts=(1,), max_bytes=10)
    with pytest.raises(ValueError, match=r"no candidate N-gram store fits in 10 bytes: the smallest \(order 2"):
        build_candidates(toy["own"], plan, toy["work"] / "none")
    fits = SweepPlan(orders=(2,), min_counts=(1,), max_bytes=1 << 40, methods=("eagle3",))
    candidates = build_candidates(toy["own"], fits, toy["work"] / "one")
    with pytest.raises(ValueError, match="not loaded"):
        sweep(toy["arena"], toy["own"], candidates, toy["prompts"], fits, toy["work"] / "one", progress=False)
    with pytest.raises(ValueError, match="at least one prompt"):
        sweep(toy["arena"], toy["own"], candidates, [], fits, toy["work"] / "one", progress=False)


def test_cli_builds_one_store_or_races_candidates(toy: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    work, data = toy["work"], toy["data"]
    one = work / "cli" / "one.ngram"
    base = ["ngram-store", "--data", str(data), "--out", str(one)]
    assert train_main([*base, "--orders", "3", "--min-counts", "2"]) == 0
    built = NgramStore.load(one, progress=False)
    ref = NgramStore.build([*toy["own"], *toy["unrelated"]], order=3, min_count=2)
    assert (built.order, built.num_nodes) == (3, ref.num_nodes)
    assert train_main([*base, "--orders", "3,4"]) == 2
    assert "several orders or min_counts are candidates to race: add --prompts" in capsys.readouterr().err
    assert train_main([*base, "--orders", "3,x"]) == 2
    assert "--orders takes comma-separated integers, got '3,x'" in capsys.readouterr().err
    chosen, record = work / "cli" / "small.ngram", work / "cli" / "sweep.json"
    assert train_main(["ngram-store", "--data", str(data), "--out", str(chosen), "--orders", "2,3", "--min-counts", "1",
                       "--prompts", str(work / "prompts.jsonl"), "--limit", "1", "--max-new-tokens", "8",
                       "--bundle", str(TINY), "--methods", "ngram-only", "--threads", "1", "--record", str(record),
                       "--no-progress"]) == 0
    printed = capsys.readouterr().out
    rec = json.loads(record.read_text())
    assert rec["methods"] == ["ngram-only"] and rec["prompts"] == 1 and len(rec["candidates"]) == 2
    assert "(chosen)" in printed and f"order {rec['chosen']['order']}, min_count 1" in printed
    assert NgramStore.load(chosen, progress=False).order == rec["chosen"]["order"]
    assert not (work / "cli" / ".small-candidates").exists()
