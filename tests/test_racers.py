"""The racer registry is the one list of racers: settings bounds and defaults, and a racer added by registration
alone (a toy lookup drafter written here, nothing else edited; the real prompt lookup racer is registered in
the registry, and switched off in this arena so the columns are the toy's) shows up in ``load_arena``, the facade, the
generate CLI's flags, the app's flags, columns, sliders and colours, races losslessly against AR, and is found in
a bundle's folder and checked by the launch check in the checkpoint format it declares."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
from helpers_app import BUNDLE, held_out_prompt

from dart_core.drafters.checkpoint import CheckpointFormat
from dart_core.drafters.settings import check_settings, knob, knobs
from dart_core.engine.drafter import DraftInput, Proposal
from dart_core.engine.tree import DraftTree
from dart_core.loading.errors import LoadError
from dart_core.racers.registry import BASELINE, RACERS, Racer, racer, register, unregister


def test_every_racer_has_checked_defaults_and_bounded_settings() -> None:
    assert RACERS[-1].key == BASELINE and not racer(BASELINE).drafts
    assert len({r.key for r in RACERS}) == len(RACERS)
    for r in RACERS:
        for device in ("cpu", "cuda"):
            check_settings(r.default_settings(device), r.label)
        for k in r.knobs():
            assert k.low <= k.default <= k.high and (k.cpu is None or k.low <= k.cpu <= k.high), (r.key, k.name)
    names = "dart, eagle3, dflash, dflash-tree, prompt-lookup, ngram-only, suffix, hf, llamacpp, llamacpp-lookup, ar"
    with pytest.raises(ValueError, match=f"unknown method 'nope'; the racers are {names}"):
        racer("nope")
    dart = racer("dart").settings_type
    with pytest.raises(ValueError, match="DART tree size must be between 1 and 512, got 0"):
        check_settings(dart(max_nodes=0), "DART")
    with pytest.raises(ValueError, match=r"DART top k: expected an integer, got 2\.5"):
        check_settings(dart(top_k=2.5), "DART")
    with pytest.raises(ValueError, match="already registered"):
        register(racer("dart"))
    with pytest.raises(ValueError, match="baseline"):
        unregister(BASELINE)


# ------------------------------------------------------------------------------------------ a new racer
@dataclasses.dataclass(frozen=True)
class LookupSettings:
    length: int = knob(4, 1, 16, "tokens copied after the root's last earlier occurrence", label="length", ui=True)


class LookupDrafter:
    """Prompt-lookup drafting: find the root's last earlier occurrence in the context and propose the tokens that
    followed it, as a chain. Reads no target layers."""

    key = "lookup"
    settings_type = LookupSettings
    feature_layers: tuple[int, ...] = ()

    def new_state(self, settings: Any = None) -> LookupSettings:
        return check_settings(settings or LookupSettings(), "Lookup")

    def propose(self, state: LookupSettings, step: DraftInput) -> Proposal | None:
        assert step.features is None  # it asked for no layers
        ctx = step.context
        hits = np.flatnonzero(ctx[:-1] == ctx[-1])
        if not hits.size:
            return None
        follow = ctx[hits[-1] + 1 : hits[-1] + 1 + state.length]
        n = len(follow)
        tree = DraftTree(np.array([ctx[-1], *follow]), np.arange(-1, n), np.zeros(n + 1, dtype=np.float32))
        return Proposal(tree, draft_ms=0.01, search_ms=0.0)


@dataclasses.dataclass(frozen=True)
class LookupConfig:
    """The lookup racer's checkpoint: a ``config.json`` with its copy length, no weights."""

    length: int

    @classmethod
    def from_dict(cls, raw: dict[str, Any], *, source: str = "config.json") -> LookupConfig:
        if not isinstance(raw.get("length"), int) or isinstance(raw.get("length"), bool):
            raise LoadError(source, "'length' must be an integer")
        return cls(raw["length"])


@pytest.fixture(scope="module")
def lookup() -> Iterator[Racer]:
    entry = register(Racer("lookup", "Lookup", "#10b981", "copies what followed the root earlier",
                           load=lambda ref, target: LookupDrafter(), settings_type=LookupSettings,
                           checkpoint=CheckpointFormat(LookupConfig, weights=())))
    try:
        yield entry
    finally:
        unregister("lookup")


@pytest.fixture(scope="module")
def arena(lookup: Racer) -> Any:
    if not (BUNDLE / "target" / "config.json").is_file():
        pytest.skip("the embedded bundle assets/tiny is missing")
    from dart_core.arena import load_arena

    return load_arena(BUNDLE / "target", dart=BUNDLE / "dart", lookup="builtin", device="cpu", progress=False,
                      prompt_lookup=False, suffix=False)


def test_a_registered_racer_loads_and_races_losslessly(arena: Any) -> None:
    from dart_core.compat import DartModel

    assert arena.methods == ["dart", "lookup", "ar"]  # registry order, the baseline last
    ids = arena.tokenizer(held_out_prompt(3), add_special_tokens=False)["input_ids"]
    outputs, accepted = {}, 0
    for m in arena.methods:
        steps = list(arena.stream(m, ids, max_new_tokens=48, settings=LookupSettings(6) if m == "lookup" else None))
        outputs[m] = [t for s in steps for t in s.tokens]
        if m == "lookup":
            accepted = sum(s.accepted for s in steps)
    assert outputs["lookup"] == outputs["ar"] == outputs["dart"]
    assert accepted > 0  # code repeats itself: some lookups were accepted
    facade = DartModel(arena)
    out = facade.lookup_generate(torch.tensor([ids]), max_new_token_num=48)
    assert out[0, len(ids):].tolist() == outputs["ar"]


def test_a_registered_racer_gets_flags_columns_and_controls(arena: Any, lookup: Racer) -> None:
    from dart_arena import render
    from dart_arena.__main__ import build_parser
    from dart_arena.model_client import LocalEngine
    from dart_arena.page import new_conversation
    from dart_arena.ui import AppConfig, ArenaUI
    from dart_core.options import add_racer_settings_arguments, racer_settings

    p = argparse.ArgumentParser()
    add_racer_settings_arguments(p)
    assert racer_settings(p.parse_args(["--lookup-length", "9"]), "cpu")["lookup"] == LookupSettings(9)
    app_args = build_parser().parse_args(["--lookup-model-name-or-path", "x"])
    assert app_args.lookup_model_name_or_path == "x"
    assert [k.name for k in knobs(lookup.settings_type)] == ["length"]
    from dart_arena.web_server import page_css

    assert ".tok-lookup" in page_css() and ".card-lookup" in page_css() and ".lane-box-dart" in page_css()
    assert "rgba(16, 185, 129, 0.24)" in render.racer_css()  # the registered colour #10b981

    ui = ArenaUI(LocalEngine(arena), AppConfig(chat=False, update_every=0.0))
    assert ui.methods == ["dart", "lookup", "ar"]
    assert ui.control_labels[4:] == ["DART tree size", "Lookup length"]
    final = list(ui.run(held_out_prompt(3), new_conversation(), 0.0, 1.0, 0, 24, 16, 5, session="s"))[-1]
    assert list(final.lanes) == ["dart", "lookup", "ar"] and "Lookup" in final.lanes["lookup"]
    assert final.result["greedy_matches_ar"] == {"dart": True, "lookup": True}
    assert final.result["settings"]["racer_settings"]["lookup"] == {"length": 5}


def test_a_registered_racer_passes_bundle_preflight_and_the_app_check(lookup: Racer, tmp_path: Any,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """A bundle with a ``lookup/`` folder: the bundle finds it, the launch check reads it in the format the racer
    declares (a config only) and the app's ``--check`` plans it; a broken config is named. Nothing but the
    registration above was edited for it."""
    import json

    from dart_arena.__main__ import main
    from dart_core.bundle import open_bundle
    from dart_core.preflight.launch import plan_launch

    if not (BUNDLE / "target" / "config.json").is_file():
        pytest.skip("the embedded bundle assets/tiny is missing")
    root = tmp_path / "bundle"
    root.mkdir()
    for part in ("target", "dart", "ngram", "prompts.jsonl"):
        (root / part).symlink_to(BUNDLE / part)
    (root / "lookup").mkdir()
    (root / "lookup" / "config.json").write_text(json.dumps({"length": 4}))

    bundle = open_bundle(root)
    assert bundle.drafters == {"dart": root / "dart", "lookup": root / "lookup"}
    plan = plan_launch(base=bundle.target, drafters={k: str(v) for k, v in bundle.drafters.items()}, device="cpu")
    assert plan.ok, plan.render_problems()
    piece = plan.piece("lookup")
    assert piece is not None and piece.role == "Lookup drafter" and piece.config == {"length": 4}
    assert [f.name for f in piece.files] == ["config.json"]  # its format declares no weights

    assert main(["--bundle", str(root), "--check", "--device", "cpu", "--server-port", "0"]) == 0
    out = capsys.readouterr().out
    assert "Lookup drafter:" in out and str(root / "lookup") in out and "No problem found" in out

    (root / "lookup" / "config.json").write_text(json.dumps({"length": "four"}))
    plan = plan_launch(base=bundle.target, drafters={"lookup": str(root / "lookup")}, device="cpu")
    assert [p.what for p in plan.problems] == [
        f"The Lookup drafter config {root / 'lookup'}/config.json is not usable: 'length' must be an integer."]
