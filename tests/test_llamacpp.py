"""llama.cpp as a racer: the target written to GGUF carries its weights exactly (read back by transformers' own GGUF
reader), llama.cpp decodes that file to AR's greedy tokens, its lookup rows group one forward's tokens into one step,
the stop rules are the engine's, and a missing install or an unsupported target is refused with the fix.

The racer's tests need llama-cpp-python (``bash scripts/dev.sh llamacpp``); CI sets ``DART_REQUIRE_LLAMACPP=1`` so
they fail there instead of skipping."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch
from helpers_ckpt import tiny_target, write_bench_bundle
from test_generate import prompts

from dart_core.engine.loop import generate
from dart_core.engine.target import TargetModel
from dart_core.loading.gguf_export import GGUFExportError, cached_gguf, write_gguf

REQUIRED = os.environ.get("DART_REQUIRE_LLAMACPP") == "1"


def _llama_cpp() -> None:
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        if REQUIRED:
            raise
        pytest.skip("llama-cpp-python is not installed (bash scripts/dev.sh llamacpp)")


def _gguf_state(path: Path, config: object) -> dict[str, torch.Tensor]:
    """The tensors transformers reads out of ``path`` (into a model of ``config``: its GGUF reader does not take
    Qwen3's head size from the file)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, config=config,
                                                 dtype=torch.float32)
    return model.state_dict()


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_the_gguf_holds_the_targets_weights_exactly(family: str, tmp_path: Path) -> None:
    """Written, then read back by transformers' own GGUF reader (which undoes llama.cpp's rotary row order for
    Llama): every tensor equal, bit for bit."""
    model = tiny_target(family)
    path = write_gguf(model, tmp_path / "m.gguf")
    back = _gguf_state(path, model.config)
    for name, want in model.state_dict().items():
        assert torch.equal(back[name], want), name


def test_bf16_weights_are_written_as_bf16_bit_for_bit(tmp_path: Path) -> None:
    import gguf

    model = tiny_target("qwen3").to(torch.bfloat16)
    reader = gguf.GGUFReader(write_gguf(model, tmp_path / "m.gguf"))
    tensors = {t.name: t for t in reader.tensors}
    gate = tensors["blk.0.ffn_gate.weight"]
    assert gate.tensor_type == gguf.GGMLQuantizationType.BF16
    want = model.state_dict()["model.layers.0.mlp.gate_proj.weight"].view(torch.int16).numpy().view("uint16")
    assert list(gate.shape) == [32, 64]  # ggml's order: the row length first
    assert (gate.data.view("uint16").reshape(want.shape) == want).all()
    assert tensors["blk.0.attn_norm.weight"].tensor_type == gguf.GGMLQuantizationType.F32  # 1-D stays float32


def test_targets_the_writer_cannot_carry_are_refused(tmp_path: Path) -> None:
    with pytest.raises(GGUFExportError, match=r"qwen3_moe.*without the llama\.cpp rows"):
        write_gguf(tiny_target("qwen3-moe"), tmp_path / "m.gguf")
    scaled = tiny_target("llama")
    scaled.config.rope_parameters = {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}
    with pytest.raises(GGUFExportError, match="scaled \\('linear'\\)"):
        write_gguf(scaled, tmp_path / "m.gguf")
    assert not (tmp_path / "m.gguf").exists()


def test_the_cached_gguf_is_written_once_per_model_and_dtype(tmp_path: Path) -> None:
    model = tiny_target("qwen3")
    first, written = cached_gguf(model, None, "model-a", root=tmp_path)
    again, written_again = cached_gguf(model, None, "model-a", root=tmp_path)
    other, _ = cached_gguf(model.to(torch.bfloat16), None, "model-a", root=tmp_path)
    assert written and not written_again and first == again and other != first
    assert sorted(p.name.rsplit("-", 1)[1] for p in tmp_path.iterdir()) == ["bf16.gguf", "f32.gguf"]


def test_the_vocabulary_is_the_tokenizers(tmp_path: Path) -> None:
    import gguf
    from transformers import AutoTokenizer

    root = write_bench_bundle(tmp_path / "b")
    tokenizer = AutoTokenizer.from_pretrained(root / "target")
    reader = gguf.GGUFReader(write_gguf(tiny_target("qwen3"), tmp_path / "m.gguf", tokenizer=tokenizer))
    field = reader.fields["tokenizer.ggml.tokens"]
    tokens = [bytes(field.parts[i]).decode() for i in field.data]
    assert tokens[:3] == tokenizer.convert_ids_to_tokens([0, 1, 2]) and len(tokens) == 97


# ---- the racer (llama-cpp-python) ----


@pytest.fixture(scope="module")
def targets() -> dict[str, TargetModel]:
    return {family: TargetModel(tiny_target(family)) for family in ("llama", "qwen3")}


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_llamacpp_greedy_is_ar_token_for_token(family: str, targets: dict[str, TargetModel]) -> None:
    _llama_cpp()
    from dart_core.racers.llamacpp import stream_llamacpp, stream_llamacpp_lookup

    target = targets[family]
    for prompt in prompts(seed=4)[:4]:
        want = generate(target, prompt, None, max_new_tokens=24)[0]
        plain = list(stream_llamacpp(target, prompt, max_new_tokens=24))
        assert [t for s in plain for t in s.tokens] == want
        assert plain[0].prefill and all(len(s.tokens) == 1 and s.verify_ms > 0 for s in plain)
        assert [t[0][0] for s in plain for t in s.top_logits] == want  # llama.cpp's own best logits, per token
        lookup = list(stream_llamacpp_lookup(target, prompt, max_new_tokens=24))
        assert [t for s in lookup for t in s.tokens] == want
        assert plain[-1].stop_reason == lookup[-1].stop_reason == "max_new_tokens"


def test_a_lookup_step_is_one_llamacpp_forward(targets: dict[str, TargetModel]) -> None:
    """On a prompt that repeats itself the lookup drafts: a step emits its accepted draft and the bonus token,
    verified as one forward of draft + 1 rows, and τ counts those forwards."""
    _llama_cpp()
    from dart_core.racers.llamacpp import engine_of, stream_llamacpp_lookup

    target = targets["qwen3"]
    want = generate(target, [5, 6, 7], None, max_new_tokens=40)[0]
    prompt = [5, 6, 7, *want] * 2 + [5, 6, 7]  # the answer is in the prompt: the lookup finds it
    want = generate(target, prompt, None, max_new_tokens=40)[0]
    steps = list(stream_llamacpp_lookup(target, prompt, max_new_tokens=40))
    assert [t for s in steps for t in s.tokens] == want
    drafted = [s for s in steps if s.tree_size]
    assert drafted and any(s.accepted for s in drafted) and len(steps) < len(want)
    assert all(s.accepted == len(s.tokens) - 1 and s.tree_size <= engine_of(target).lookup_tokens + 1 for s in steps)
    assert all(s.drafted_size == s.tree_size for s in steps)


def test_stop_rules_match_the_engine(targets: dict[str, TargetModel]) -> None:
    _llama_cpp()
    from dart_core.racers.llamacpp import stream_llamacpp, stream_llamacpp_lookup

    target = targets["qwen3"]
    prompt = prompts(seed=4)[1]
    ar = generate(target, prompt, None, max_new_tokens=20)[0]
    for kwargs, reason in (({"stop_token_ids": [ar[5]]}, "eos"), ({"max_length": len(prompt) + 7}, "context")):
        want, ref_steps = generate(target, prompt, None, max_new_tokens=20, **kwargs)
        for run in (stream_llamacpp, stream_llamacpp_lookup):
            steps = list(run(target, prompt, max_new_tokens=20, **kwargs))
            assert [t for s in steps for t in s.tokens] == want
            assert steps[-1].stop_reason == ref_steps[-1].stop_reason == reason


def test_a_closed_stream_gives_its_llama_back(targets: dict[str, TargetModel]) -> None:
    """Closing a race mid-way hands the instance back emptied; two interleaved generations get two instances."""
    _llama_cpp()
    from dart_core.racers.llamacpp import engine_of, stream_llamacpp

    target = targets["llama"]
    a, b = prompts(seed=5)[:2]
    first, second = stream_llamacpp(target, a, max_new_tokens=30), stream_llamacpp(target, b, max_new_tokens=30)
    got_a, got_b = [next(first), next(first)], [next(second)]
    got_a.append(next(first))
    first.close()
    got_b += list(second)
    assert [t for s in got_b for t in s.tokens] == generate(target, b, None, max_new_tokens=30)[0]
    assert [t for s in got_a for t in s.tokens] == generate(target, a, None, max_new_tokens=30)[0][:3]
    assert len(engine_of(target)._free[False]) >= 2


def test_a_missing_install_is_refused_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    from dart_core.racers.llamacpp import LlamaCppError, setup_llamacpp

    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # import llama_cpp raises ImportError
    with pytest.raises(LlamaCppError, match=r"pip install '\.\[llamacpp\]'.*dev\.sh llamacpp"):
        setup_llamacpp(TargetModel(tiny_target("qwen3", seed=3)))


def test_bench_e2e_races_llamacpp_beside_ar(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Asked for by name, both rows race on the bundle's target: AR's tokens, the engine's version, build and file
    in the JSON, every row's speedup over llama.cpp beside its speedup over AR, and the GGUF kept for the next run."""
    _llama_cpp()
    from dart_core.bench.__main__ import main as bench_main

    monkeypatch.setenv("DART_ARENA_CACHE", str(tmp_path / "cache"))
    bundle = write_bench_bundle(tmp_path / "bundle")
    out = tmp_path / "out"
    assert bench_main(["e2e", "--bundle", str(bundle), "--limit", "2", "--max-new-tokens", "12", "--out", str(out),
                       "--no-progress", "--no-hf-generate", "--methods", "ar,dart,llamacpp,llamacpp-lookup"]) == 0
    printed = capsys.readouterr()
    report = json.loads((out / "e2e.json").read_text())
    assert report["mismatches"] == [] and "vs llama.cpp" in printed.out
    engines = report["environment"]["outside_engines"]
    assert engines["llamacpp"]["llama_cpp_python"] and engines["llamacpp"]["dtype"] == "float32"
    assert Path(engines["llamacpp"]["gguf"]).parent == tmp_path / "cache/llamacpp"
    summary = report["summary"]
    assert summary["llamacpp"]["speedup_vs_peer"] == pytest.approx(1.0)
    assert summary["dart"]["speedup_vs_peer"] == pytest.approx(
        summary["dart"]["tokens_per_s_wall"] / summary["llamacpp"]["tokens_per_s_wall"])
    gguf = Path(engines["llamacpp"]["gguf"])
    written = gguf.stat().st_mtime_ns
    assert bench_main(["e2e", "--bundle", str(bundle), "--limit", "1", "--max-new-tokens", "4", "--out", str(out),
                       "--no-hf-generate", "--methods", "ar,llamacpp"]) == 0
    line = next(x for x in capsys.readouterr().err.splitlines() if "for its own engine" in x)
    assert "llama.cpp: the target's weights for its own engine; float32 GGUF" in line and "from the cache" in line
    assert gguf.stat().st_mtime_ns == written


def test_bench_concurrency_refuses_the_llamacpp_rows_before_loading(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from dart_core.bench.__main__ import main as bench_main

    bundle = write_bench_bundle(tmp_path / "bundle")
    code = bench_main(["concurrency", "--bundle", str(bundle), "--streams", "1,2", "--limit", "2", "--methods",
                       "ar,dart,llamacpp-lookup", "--out", str(tmp_path / "out"), "--no-progress"])
    printed = capsys.readouterr()
    assert code != 0 and "llama.cpp lookup decode one stream at a time here" in printed.err + printed.out
    assert "Loading" not in printed.err  # nothing loaded


def test_the_launch_check_names_a_missing_llamacpp_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before any weight loads: the app's llama.cpp column without llama-cpp-python is a problem with its fix."""
    import importlib.util

    from dart_core.preflight.launch import plan_launch

    bundle = write_bench_bundle(tmp_path / "bundle")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llama_cpp" else real(name, *a))
    plan = plan_launch(base=str(bundle / "target"), drafters={}, device="cpu", runners=["hf", "llamacpp"])
    (problem,) = [p for p in plan.problems if "llama" in p.what]
    assert problem.what == "llama.cpp needs the Python module llama_cpp, which is not installed."
    assert "dev.sh llamacpp" in problem.fix[0] and problem.fix[1].startswith("--no-compare-llamacpp ")
    monkeypatch.setattr(importlib.util, "find_spec", real)
    _llama_cpp()  # installed: no such problem
    assert not [p for p in plan_launch(base=str(bundle / "target"), drafters={}, device="cpu",
                                       runners=["llamacpp"]).problems if "llama" in p.what]


def test_a_gpu_target_without_a_gpu_build_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    _llama_cpp()
    import llama_cpp

    from dart_core.racers.llamacpp import LlamaCppError, setup_llamacpp

    class OnGpu:  # what setup reads before anything is written: the device
        device = torch.device("cuda", 0)

    monkeypatch.setattr(llama_cpp, "llama_supports_gpu_offload", lambda: False)
    with pytest.raises(LlamaCppError, match=r"runs on cuda.*no GPU backend.*GGML_CUDA=on.*leave the llama\.cpp rows"):
        setup_llamacpp(OnGpu())  # type: ignore[arg-type]


def test_a_bf16_target_races_on_a_bf16_gguf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bfloat16 target is written and decoded in bfloat16 (llama.cpp's own float16 KV cache): its text is the
    target's up to bf16 rounding, so the greedy check compares it with ties counted apart."""
    _llama_cpp()
    from dart_core.engine.greedy_check import compare
    from dart_core.racers.llamacpp import engine_of, stream_llamacpp

    monkeypatch.setenv("DART_ARENA_CACHE", str(tmp_path))
    target = TargetModel(tiny_target("qwen3", seed=2).to(torch.bfloat16))
    engine = engine_of(target)
    assert engine.describe()["dtype"] == "bfloat16" and engine.path.name.endswith("-bf16.gguf")
    for prompt in prompts(seed=6)[:3]:
        want, ref = generate(target, prompt, None, max_new_tokens=16)
        steps = list(stream_llamacpp(target, prompt, max_new_tokens=16))
        got = [t for s in steps for t in s.tokens]
        verdict = compare(want, [t for s in ref for t in s.top_logits], got,
                          [t for s in steps for t in s.top_logits], torch.bfloat16)
        assert len(got) == 16 and verdict.kind in ("identical", "tie"), verdict


def test_sampling_uses_llamacpps_sampler_seeded_from_the_generator(targets: dict[str, TargetModel]) -> None:
    _llama_cpp()
    from dart_core.engine.acceptance import SamplingConfig
    from dart_core.racers.llamacpp import stream_llamacpp

    target, prompt = targets["qwen3"], prompts(seed=7)[0]
    hot = SamplingConfig(temperature=1.5, top_p=0.95, top_k=40)

    def run(seed: int) -> list[int]:
        steps = stream_llamacpp(target, prompt, sampling=hot, max_new_tokens=24,
                                generator=torch.Generator().manual_seed(seed))
        return [t for s in steps for t in s.tokens]

    first, again, other = run(1), run(1), run(2)
    assert first == again and first != other and len(first) == 24
    assert first != generate(target, prompt, None, max_new_tokens=24)[0]  # not the greedy text


def test_a_model_without_an_identity_leaves_no_file_behind() -> None:
    _llama_cpp()
    import gc

    from dart_core.racers.llamacpp import engine_of, stream_llamacpp

    target = TargetModel(tiny_target("llama", seed=9))
    folder = engine_of(target).path.parent
    assert folder.is_dir() and len(list(stream_llamacpp(target, [1, 2, 3], max_new_tokens=4))) == 4
    del target
    gc.collect()
    assert not folder.exists()
