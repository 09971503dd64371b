"""The launch check (dart_core/preflight/, dart_arena/launch_check.py, ``python -m dart_arena --check``,
launch/common.sh): every piece a command names is found and checked from listings and metadata alone, all problems come
at once with the command that fixes each, exit code 2, and nothing is loaded first — the target's loader is never
reached. ``--download``, the flags and the launch scripts: tests/test_preflight_download.py."""

from __future__ import annotations

import builtins
import json
import re
import shutil
import socket
from pathlib import Path
from typing import Any

import pytest
from helpers_hub import QWEN3_8B, published_cache, snapshot
from helpers_preflight import launch_args, problems, run_main, use_cache

from dart_core.preflight import launch, resources, sources
from dart_core.preflight import plan as plan_mod

# main() sets up the app's log handler on the stderr of its time: each test gets its own (capsys's)
pytestmark = pytest.mark.usefixtures("fresh_log_handler")


# ------------------------------------------------------------------------------------------ a sound plan
def test_check_prints_the_plan_and_reads_no_weight(hub: Path, no_loading: list[str], monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    reads: dict[str, int] = {}
    real_open = builtins.open

    class Counted:
        def __init__(self, f: Any, name: str) -> None:
            self.f, self.name = f, name

        def read(self, n: int = -1) -> bytes:
            data = self.f.read(n)
            reads[self.name] = reads.get(self.name, 0) + len(data)
            return data

        def __enter__(self) -> Counted:
            return self

        def __exit__(self, *exc: object) -> None:
            self.f.close()

    def counting_open(path: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        f = real_open(path, mode, *args, **kwargs)
        return Counted(f, str(path)) if "b" in mode else f

    monkeypatch.setattr(sources, "open", counting_open, raising=False)
    code, out, err, seconds = run_main(launch_args("--check"), capsys)
    assert code == 0, err
    assert not no_loading
    assert seconds < 3, f"--check took {seconds:.2f} s"
    for needle in ("Launch plan", "Qwen/Qwen3-8B", "model-00001-of-00002.safetensors", "fvliang/qwen8b-dart",
                   "AngelSlim/Qwen3-8B_eagle3", "small.trie", "float32", "KV cache", "free on CPU RAM: fits",
                   "port free", "No problem found in what was checked", "Not read: the contents of the"):
        assert needle in out, needle
    weights = {k: v for k, v in reads.items() if k.endswith(".safetensors")}
    assert len(weights) == 5  # two target shards and three drafters' files: each header, no tensor data
    for name, n in weights.items():
        with real_open(name, "rb") as f:
            header = 8 + int.from_bytes(f.read(8), "little")
        assert n == header < Path(name).stat().st_size, name  # exactly the 8-byte length + the JSON header
    assert all(n <= 8 for k, n in reads.items() if k.endswith(".trie"))  # its first bytes (the format)


def test_plan_memory_and_downloads(hub: Path) -> None:
    plan = launch.plan_launch(base=QWEN3_8B["target"], drafters={"dart": QWEN3_8B["dart"],
                                                                    "eagle3": QWEN3_8B["eagle3"]},
                                 ngram=QWEN3_8B["ngram"], small_ngram=True, device="cpu", dtype="bfloat16",
                                 max_length=300)
    assert plan.ok, plan.render_problems()
    m = plan.memory
    assert m is not None and m.tokens == 300 and m.lanes == 3
    # target: every tensor of the two shards in bfloat16 (2 bytes) = its float32 shards' tensor bytes / 2
    shards = sorted(snapshot(hub, QWEN3_8B["target"]).glob("model-*.safetensors"))
    stored = sum(sources.tensor_bytes(sources.read_safetensors_header(s), 4)[0] for s in shards)
    assert m.target == stored // 2
    # KV: 2 (k, v) × 8 layers × 2 kv heads × head_dim 16 × 2 bytes × 3 lanes, + each drafter's one layer
    assert m.kv is not None and m.kv >= 2 * 8 * 2 * 16 * 2 * 3 * 300
    assert [(r, f[-1]) for r, f in plan.downloads()] == [
        (QWEN3_8B["target"], "model-00002-of-00002.safetensors"), (QWEN3_8B["dart"], "model.safetensors"),
        (QWEN3_8B["eagle3"], "model.safetensors"), (QWEN3_8B["ngram"], "small.trie")]



@pytest.mark.parametrize("native", [True, False])
def test_auto_dtype_on_a_cpu_is_bfloat16_only_where_the_cpu_multiplies_it_natively(
        hub: Path, native: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--dtype auto`` means one thing in the plan and in the loader: bf16 on CUDA and on a CPU listing AVX512-BF16
    or AMX-BF16, float32 elsewhere; an explicit dtype wins, and a bf16 that the CPU would emulate is flagged."""
    import torch

    from dart_core.arena import resolve_dtype
    from dart_core.engine import cpu

    flags = frozenset({"avx512f", "avx512_bf16"} if native else {"avx512f", "avx512bw"})
    monkeypatch.setattr(cpu, "cpu_flags", lambda cpuinfo="/proc/cpuinfo": flags)
    auto = torch.bfloat16 if native else torch.float32
    assert resolve_dtype("auto", "cpu") is auto and resolve_dtype(None, "cpu") is auto
    assert resolve_dtype("auto", "cuda:0") is torch.bfloat16
    assert resolve_dtype("float32", "cpu") is torch.float32 and resolve_dtype("bfloat16", "cpu") is torch.bfloat16
    kwargs = {"base": QWEN3_8B["target"], "drafters": {"dart": QWEN3_8B["dart"]}, "device": "cpu"}
    plan = launch.plan_launch(**kwargs)
    assert plan.dtype == ("bfloat16" if native else "float32")
    assert ("near-ties" in plan.device_note) is native and "emulated" not in plan.device_note
    plan = launch.plan_launch(**kwargs, dtype="bfloat16")
    assert plan.dtype == "bfloat16" and ("emulated" in plan.device_note) is not native
    plan = launch.plan_launch(**kwargs, dtype="float32")
    assert plan.dtype == "float32" and plan.device_note == ""


# ------------------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize("part", ["ngram", "dart", "eagle3"])
def test_a_missing_repo_is_named_before_the_target_is_touched(hub: Path, part: str, no_loading: list[str],
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    shutil.rmtree(hub / f"models--{QWEN3_8B[part].replace('/', '--')}")
    code, _, err, seconds = run_main(launch_args(), capsys)
    assert code == 2 and not no_loading and seconds < 3
    found = problems(err)
    assert len(found) == 1, err
    text = found[0]
    assert QWEN3_8B[part] in text and "not in the local Hugging Face cache" in text and "HF_HUB_OFFLINE" in text
    fix = {"ngram": "small.trie", "dart": "config.json model.safetensors", "eagle3": "config.json model.safetensors"}
    assert f"fix: hf download {QWEN3_8B[part]} {fix[part]}" in text
    assert "holds neither" not in err and "Traceback" not in err


def test_missing_file_in_a_present_repo(hub: Path, no_loading: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    (snapshot(hub, QWEN3_8B["dart"]) / "model.safetensors").unlink()
    (snapshot(hub, QWEN3_8B["target"]) / "model-00002-of-00002.safetensors").unlink()
    (snapshot(hub, QWEN3_8B["ngram"]) / "small.trie").rename(snapshot(hub, QWEN3_8B["ngram"]) / "full.trie")
    code, _, err, _ = run_main(launch_args(), capsys)
    assert code == 2 and not no_loading
    found = problems(err)
    assert len(found) == 3, err  # all at once
    target, dart, ngram = found
    assert "Qwen/Qwen3-8B" in target and "model-00002-of-00002.safetensors" in target
    assert "fix: hf download Qwen/Qwen3-8B model-00002-of-00002.safetensors" in target
    assert "fvliang/qwen8b-dart" in dart and "fix: hf download fvliang/qwen8b-dart model.safetensors" in dart
    assert "without small.trie" in ngram and "fix: hf download fvliang/dart-qwen3-ngram small.trie" in ngram
    assert "--no-use-small-ngram" in ngram  # the full store is there


def test_offline_and_not_cached_target(hub: Path, no_loading: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    shutil.rmtree(hub / "models--Qwen--Qwen3-8B")
    code, _, err, _ = run_main(launch_args(), capsys)
    assert code == 2 and not no_loading
    (text,) = problems(err)
    assert "The target Qwen/Qwen3-8B is not in the local Hugging Face cache" in text and "HF_HUB_OFFLINE" in text
    assert "fix: hf download Qwen/Qwen3-8B\n" in text + "\n"
    assert "`hf download` needs internet" in err  # once, at the end


def test_bad_id_and_missing_local_path(hub: Path, no_loading: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err, _ = run_main(launch_args("--dart-model-name-or-path", "./no/such/dir",
                                           "--eagle3-model-name-or-path", "org/bad id!"), capsys)
    assert code == 2 and not no_loading
    dart, eagle3 = problems(err)
    assert "./no/such/dir does not exist" in dart
    assert "'org/bad id!' is neither an existing local path nor a valid Hub repo id" in eagle3


def test_cuda_on_a_cpu_only_torch(hub: Path, no_loading: list[str], monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", None)
    for device in ("cuda", "cuda:1", "auto"):
        code, _, err, _ = run_main(launch_args("--device", device), capsys)
        assert code == 2 and not no_loading
        (text,) = problems(err)
        assert f"--device {device} asks for CUDA" in text and "CPU-only build" in text
        assert "fix: --device cpu" in text


def test_device_index_out_of_range(hub: Path, no_loading: list[str], monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(resources, "free_memory", lambda device, device_map: (80 << 30, f"{device} (a GPU)"))
    code, _, err, _ = run_main(launch_args("--device", "cuda:3", "--dtype", "bfloat16"), capsys)
    assert code == 2 and not no_loading
    (text,) = problems(err)
    assert "--device cuda:3: there are only 2 GPUs here" in text
    assert "fix: --device cuda:0" in text and "fix: --device auto" in text
    code, out, err, _ = run_main(launch_args("--device", "cuda:1", "--check"), capsys)
    assert code == 0 and "cuda:1, bfloat16" in out  # auto dtype on CUDA


@pytest.mark.parametrize("field,value,needle", [
    ("target_hidden_size", 64, "hidden size 64, the target's is 32"),
    ("vocab_size", 151936, "vocabulary has 151936 tokens, the target's 97"),
    ("eagle_config", {"eagle_aux_hidden_state_layer_ids": [1, 4, 35]}, "layers [1, 4, 35], but the target has 8"),
])
def test_drafter_built_for_another_target(published: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          no_loading: list[str], capsys: pytest.CaptureFixture[str], field: str,
                                          value: Any, needle: str) -> None:
    cache = tmp_path / "hub"
    shutil.copytree(published, cache)
    use_cache(monkeypatch, cache, offline=True)
    shutil.rmtree(cache / "models--fvliang--qwen8b-dart")
    mixed = tmp_path / "mixed"
    published_cache(mixed, parts=("dart",), drafter_extra={"dart": {field: value}})
    shutil.copytree(mixed / "models--fvliang--qwen8b-dart", cache / "models--fvliang--qwen8b-dart")
    code, _, err, _ = run_main(launch_args(), capsys)
    assert code == 2 and not no_loading
    (text,) = problems(err)
    assert "The DART drafter fvliang/qwen8b-dart was built for another target than Qwen/Qwen3-8B" in text
    assert needle in text and "fix: pass the DART drafter trained for Qwen/Qwen3-8B" in text
    # the same drafter on another published size: the fix names that size's drafter
    shutil.copytree(cache / "models--Qwen--Qwen3-8B", cache / "models--Qwen--Qwen3-4B")
    code, _, err, _ = run_main(launch_args("--base-model-name-or-path", "Qwen/Qwen3-4B", "--no-compare-eagle3"),
                               capsys)
    (text,) = problems(err)
    assert code == 2 and "than Qwen/Qwen3-4B" in text
    assert "fix: --dart-model-name-or-path fvliang/qwen4b-dart   (the DART drafter built for Qwen/Qwen3-4B)" in text


def test_drafter_weights_that_do_not_match_their_config(hub: Path, no_loading: list[str],
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    cfg_path = snapshot(hub, QWEN3_8B["eagle3"]) / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["intermediate_size"] *= 2  # the weights no longer match
    cfg_path.write_text(json.dumps(cfg))
    code, _, err, _ = run_main(launch_args(), capsys)
    assert code == 2 and not no_loading
    (text,) = problems(err)
    assert "AngelSlim/Qwen3-8B_eagle3: model.safetensors does not match its own config.json" in text
    assert "midlayer.mlp" in text and "hf download AngelSlim/Qwen3-8B_eagle3 config.json model.safetensors" in text


def test_truncated_shard_is_named(hub: Path, no_loading: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    shard = snapshot(hub, QWEN3_8B["target"]) / "model-00001-of-00002.safetensors"
    shard.write_bytes(shard.read_bytes()[:-100])
    code, _, err, _ = run_main(launch_args(), capsys)
    assert code == 2 and not no_loading
    (text,) = problems(err)
    assert "model-00001-of-00002.safetensors" in text and "truncated download" in text
    assert "hf download Qwen/Qwen3-8B model-00001-of-00002.safetensors --force-download" in text


def test_not_enough_memory(hub: Path, no_loading: list[str], monkeypatch: pytest.MonkeyPatch,
                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(resources, "free_memory", lambda device, device_map: (300 << 20, "CPU RAM"))
    code, _, err, _ = run_main(launch_args("--dtype", "float32"), capsys)
    assert code == 2 and not no_loading
    (text,) = problems(err)
    assert re.search(r"Not enough memory: the plan needs about \d+ MiB on CPU RAM \(target \d+ KiB", text)
    assert "only 300 MiB is free" in text and "fix: --dtype bfloat16" in text
    assert "fix: --no-compare-eagle3" in text and "fix: a smaller model: bash launch/qwen3_4b_app.sh" in text


def test_memory_fixes_of_a_large_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    """Qwen3-8B in bfloat16 with its full context on a 24 GB GPU: the weights fit, the KV cache of three lanes
    does not; the fix names the --max-length that fits."""
    plan = plan_mod.Plan(device="cuda:0", dtype="bfloat16")
    plan.pieces = [plan_mod.Piece("target", "target", "Qwen/Qwen3-8B"), plan_mod.Piece("DART", "dart", "d"),
                   plan_mod.Piece("EAGLE-3", "eagle3", "e")]
    per_token = 2 * 36 * 8 * 128 * 2 * 3
    m = plan_mod.Memory(target=16 << 30, drafters=2 << 30, kv=per_token * 40960, overhead=1 << 30, tokens=40960,
                         lanes=3, free=22 << 30, where="cuda:0 (a 24 GB GPU)")
    monkeypatch.setattr("torch.cuda.device_count", lambda: 1)
    problem = resources.memory_problem(m, plan)
    assert problem is not None and "only 22.0 GiB is free" in problem.what
    fit = (3 << 30) // per_token // 256 * 256
    assert problem.fix[0].startswith(f"--max-length {fit}   (the KV cache of 3 lanes") and 4096 < fit < 40960
    assert "a smaller model: bash launch/qwen3_4b_app.sh" in problem.fix


def test_port_in_use(hub: Path, no_loading: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, _, err, _ = run_main(launch_args(port=port), capsys)
    assert code == 2 and not no_loading
    (text,) = problems(err)
    assert f"Port {port} on 127.0.0.1 is already in use" in text and "fix: --server-port " in text


def test_every_problem_at_once(hub: Path, no_loading: list[str], monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", None)
    shutil.rmtree(hub / "models--fvliang--dart-qwen3-ngram")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        code, out, err, _ = run_main(launch_args("--device", "cuda", "--check", port=busy.getsockname()[1]), capsys)
    assert code == 2 and not no_loading
    assert "Launch plan" in out  # --check prints what it found, too
    found = problems(err)
    assert len(found) == 3 and "CUDA" in found[0] and "dart-qwen3-ngram" in found[1] and "Port" in found[2]


def test_a_chat_template_asked_of_a_tokenizer_without_one(hub: Path, no_loading: list[str],
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    (snapshot(hub, QWEN3_8B["target"]) / "chat_template.jinja").unlink()
    code, _, err, _ = run_main(launch_args(), capsys)
    assert code == 2 and not no_loading
    (text,) = problems(err)
    assert "--template-name qwen asks for a chat template" in text and "fix: --template-name raw" in text
