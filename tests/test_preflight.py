"""The launch check (dart_core/preflight/, app/launch_check.py, ``python -m app --check`` / ``--download``,
launch/common.sh): every piece a command names is found and checked from listings and metadata alone, all problems
come at once with the command that fixes each, exit code 2, and nothing is loaded first — the target's loader is
never reached."""

from __future__ import annotations

import builtins
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from helpers_hub import QWEN3_8B, published_cache, snapshot

from app import launch_check
from app.__main__ import build_parser
from dart_core.preflight import launch, resources, sources
from dart_core.preflight import plan as plan_mod

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "launch" / "qwen3_8b_app.sh"


def launch_args(*extra: str, port: int | None = None) -> list[str]:
    """The flags of launch/qwen3_8b_app.sh (on the CPU unless ``extra`` says otherwise), ``extra`` last."""
    return ["--base-model-name-or-path", QWEN3_8B["target"], "--dart-model-name-or-path", QWEN3_8B["dart"],
            "--ngram-model-name-or-path", QWEN3_8B["ngram"], "--use-small-ngram", "--compare-eagle3",
            "--eagle3-model-name-or-path", QWEN3_8B["eagle3"], "--compare-dflash", "--dflash-model-name-or-path",
            QWEN3_8B["dflash"], "--compare-dflash-tree", "--dflash-tree-model-name-or-path", QWEN3_8B["dflash"],
            "--template-name", "qwen", "--device", "cpu",
            "--max-length", "4096", "--server-port", str(port or free_port()), *extra]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(autouse=True)
def fresh_log_handler(monkeypatch: pytest.MonkeyPatch) -> None:
    """main() sets up the app's log handler on the stderr of its time: give each test its own (capsys's)."""
    import logging

    monkeypatch.setattr(logging.getLogger("dart_arena"), "handlers", [])


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One offline cache with the four repos of launch/qwen3_8b_app.sh at tiny shapes (copied per test)."""
    return published_cache(tmp_path_factory.mktemp("published") / "hub")


@pytest.fixture
def hub(published: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's own copy of the published cache, offline, as the HF cache of this process."""
    cache = tmp_path / "hub"
    shutil.copytree(published, cache)
    use_cache(monkeypatch, cache, offline=True)
    return cache


def use_cache(monkeypatch: pytest.MonkeyPatch, cache: Path, *, offline: bool) -> None:
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", offline)
    if offline:
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    else:
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)


@pytest.fixture
def no_loading(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every way to load a model fails the test: the engine process, load_arena / load_target, transformers'
    from_pretrained, safetensors' readers and torch.load. Returns the calls (there must be none)."""
    import safetensors
    import safetensors.torch
    import torch
    import transformers

    import app.engine
    import dart_core.arena

    calls: list[str] = []

    def refuse(name: str) -> Any:
        def fail(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            raise AssertionError(f"{name} was called: the check must come before any weight loads")
        return fail

    monkeypatch.setattr(app.engine, "ProcessEngine", refuse("ProcessEngine"))
    monkeypatch.setattr(dart_core.arena, "load_arena", refuse("load_arena"))
    monkeypatch.setattr(dart_core.arena, "load_target", refuse("load_target"))
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", refuse("from_pretrained"))
    monkeypatch.setattr(safetensors, "safe_open", refuse("safe_open"))
    monkeypatch.setattr(safetensors.torch, "load_file", refuse("load_file"))
    monkeypatch.setattr(torch, "load", refuse("torch.load"))
    return calls


def run_main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str, float]:
    from app.__main__ import main

    t0 = time.perf_counter()
    code = main(argv)
    seconds = time.perf_counter() - t0
    out, err = capsys.readouterr()
    return code, out, err, seconds


def problems(err: str) -> list[str]:
    """The numbered problems of an error report, each with its fix lines."""
    return re.split(r"\n  \d+\. ", err.split("nothing was loaded:", 1)[1])[1:] if "nothing was loaded" in err else []


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


# ------------------------------------------------------------------------------------------ --download
def fake_hub(monkeypatch: pytest.MonkeyPatch, remote: Path) -> None:
    """The Hub's listing and ranged header reads answered from ``remote`` (a published cache): no network."""
    import huggingface_hub
    from huggingface_hub import HfApi
    from huggingface_hub.errors import RepositoryNotFoundError

    def model_info(self: Any, repo: str, **kwargs: Any) -> Any:
        snap = snapshot(remote, repo)
        if not snap.is_dir():
            raise RepositoryNotFoundError(f"{repo} not found", response=SimpleNamespace(
                status_code=404, headers={}, request=None))
        return SimpleNamespace(siblings=[SimpleNamespace(rfilename=str(p.relative_to(snap)), size=p.stat().st_size)
                                         for p in sorted(snap.rglob("*")) if p.is_file()])

    def parse_header(self: Any, repo: str, name: str, **kwargs: Any) -> Any:
        header = sources.read_safetensors_header(snapshot(remote, repo) / name)
        return SimpleNamespace(tensors={k: SimpleNamespace(dtype=v["dtype"], shape=v["shape"])
                                        for k, v in header.items()})

    def hf_hub_download(repo: str, name: str, **kwargs: Any) -> str:  # a small file (a config) fetched
        assert name.endswith(".json"), f"the check fetched {name}"
        return str(snapshot(remote, repo) / name)

    monkeypatch.setattr(HfApi, "model_info", model_info)
    monkeypatch.setattr(HfApi, "parse_safetensors_file_metadata", parse_header)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", hf_hub_download)


def test_check_with_no_hub_cache_plans_every_download_with_its_size(
        published: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_loading: list[str],
        capsys: pytest.CaptureFixture[str]) -> None:
    """A first start on a GPU box that has never fetched anything: --check says what it will download and how
    much, and passes (the launch script's first-run path)."""
    remote = tmp_path / "remote"
    shutil.copytree(published, remote)
    use_cache(monkeypatch, tmp_path / "empty-hub", offline=False)
    fake_hub(monkeypatch, remote)
    code, out, err, _ = run_main(launch_args("--check"), capsys)
    assert code == 0, err
    assert not no_loading and "error" not in err
    assert re.search(r"to download: +\d+(\.\d)? [KMG]B into .*empty-hub", out), out
    assert out.count(" *") >= 5, out  # every piece's files marked as not here yet


@pytest.mark.parametrize("small", [True, False])
def test_download_fetches_exactly_the_plan(published: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           no_loading: list[str], capsys: pytest.CaptureFixture[str],
                                           small: bool) -> None:
    remote = tmp_path / "remote"
    shutil.copytree(published, remote)
    ngram = snapshot(remote, QWEN3_8B["ngram"])
    shutil.copy(ngram / "small.trie", ngram / "full.trie")
    local = tmp_path / "hub"  # what this machine has: the configs and the index, no weights, no N-gram store
    for repo, names in ((QWEN3_8B["target"], ("config.json", "model.safetensors.index.json")),
                        (QWEN3_8B["dart"], ("config.json",)), (QWEN3_8B["eagle3"], ("config.json",))):
        (snapshot(local, repo)).mkdir(parents=True)
        for name in names:
            shutil.copy(snapshot(remote, repo) / name, snapshot(local, repo) / name)
        (local / f"models--{repo.replace('/', '--')}" / "refs").mkdir()
        (local / f"models--{repo.replace('/', '--')}" / "refs" / "main").write_text(snapshot(local, repo).name)
    use_cache(monkeypatch, local, offline=False)
    fake_hub(monkeypatch, remote)
    fetched: list[tuple[str, list[str]]] = []

    def snapshot_download(repo: str, *, allow_patterns: list[str], **kwargs: Any) -> str:
        fetched.append((repo, list(allow_patterns)))
        return str(snapshot(remote, repo))

    monkeypatch.setattr(launch, "snapshot_download", snapshot_download)
    args = launch_args("--download", "--check", *([] if small else ["--no-use-small-ngram"]))
    code, out, err, _ = run_main(args, capsys)
    assert code == 0, err
    assert not no_loading
    assert "to download:" in out and "[Hugging Face Hub]" in out
    target_files = ["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                    "chat_template.jinja", "model.safetensors.index.json", "model-00001-of-00002.safetensors",
                    "model-00002-of-00002.safetensors"]
    assert fetched == [(QWEN3_8B["target"], target_files),
                       (QWEN3_8B["dart"], ["config.json", "model.safetensors"]),
                       (QWEN3_8B["eagle3"], ["config.json", "model.safetensors"]),
                       (QWEN3_8B["dflash"], ["config.json", "model.safetensors"]),  # once for both DFlash racers
                       (QWEN3_8B["ngram"], ["small.trie" if small else "full.trie"])]


def test_download_names_a_repo_the_hub_does_not_have(published: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch, no_loading: list[str],
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    use_cache(monkeypatch, tmp_path / "empty", offline=False)
    fake_hub(monkeypatch, published)
    monkeypatch.setattr(launch, "snapshot_download", lambda *a, **k: pytest.fail("nothing may be fetched"))
    code, _, err, _ = run_main(launch_args("--download", "--ngram-model-name-or-path", "fvliang/no-such-ngram"),
                               capsys)
    assert code == 2 and not no_loading
    (text,) = problems(err)
    assert "The N-gram store repo fvliang/no-such-ngram was not found on the Hugging Face Hub" in text
    assert "fvliang/dart-qwen3-ngram" in text  # the published one, as a hint


def test_download_offline_is_a_clear_message(hub: Path, no_loading: list[str], monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(launch, "snapshot_download", lambda *a, **k: pytest.fail("nothing may be fetched offline"))
    (snapshot(hub, QWEN3_8B["eagle3"]) / "model.safetensors").unlink()
    code, _, err, _ = run_main(launch_args("--download"), capsys)
    assert code == 2 and not no_loading
    first, second = problems(err)
    assert "--download needs the Hugging Face Hub, but HF_HUB_OFFLINE is set" in first
    assert "unset HF_HUB_OFFLINE" in first
    assert "hf download AngelSlim/Qwen3-8B_eagle3 model.safetensors" in second


# ------------------------------------------------------------------------------------------ flags, launch scripts
def test_every_boolean_flag_works_both_ways() -> None:
    parser = build_parser()
    for flag in ("listen", "share", "use_small_ngram", "check", "download", "debug", "compare_eagle3"):
        opt = "--" + flag.replace("_", "-")
        on = parser.parse_args([opt])
        off = parser.parse_args([opt, "--no-" + opt[2:]])
        assert getattr(on, flag) is True and getattr(off, flag) is False, flag


def fake_venv(tmp_path: Path) -> Path:
    """A VENV whose python prints its arguments, one a line: what the launch script would run."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text("#!/bin/sh\nprintf '%s\\n' \"$@\"\n")
    python.chmod(0o755)
    return venv


def test_explicit_flags_after_the_launch_defaults_win(tmp_path: Path) -> None:
    env = {**os.environ, "VENV": str(fake_venv(tmp_path)), "DART_SKIP_SETUP": "1", "DART_SHARE": "1"}
    out = subprocess.run(["bash", str(SCRIPT), "--no-listen", "--no-share", "--no-use-small-ngram", "--server-port",
                          "8000", "--device", "auto"], env=env, capture_output=True, text=True, check=True).stdout
    argv = out.splitlines()
    assert argv[:2] == ["-m", "app"] and "--share" in argv  # DART_SHARE's --share comes before the user's flags
    args = build_parser().parse_args(argv[2:])
    assert (args.listen, args.share, args.use_small_ngram, args.server_port, args.device) == (False, False, False,
                                                                                             8000, "auto")
    assert args.base_model_name_or_path == "Qwen/Qwen3-8B" and args.compare_eagle3 is True


def test_launch_help_prints_the_defaults_first() -> None:
    env = {**os.environ, "VENV": sys.prefix, "DART_SKIP_SETUP": "1"}
    out = subprocess.run(["bash", str(SCRIPT), "--help"], cwd=REPO, env=env, capture_output=True, text=True,
                         check=True).stdout
    defaults, _, usage = out.partition("python -m app --help:")
    assert "launch/qwen3_8b_app.sh runs python -m app with these defaults" in defaults
    for line in ("--base-model-name-or-path Qwen/Qwen3-8B", "--dart-model-name-or-path fvliang/qwen8b-dart",
                 "--ngram-model-name-or-path fvliang/dart-qwen3-ngram", "--use-small-ngram",
                 "--eagle3-model-name-or-path AngelSlim/Qwen3-8B_eagle3", "--device cuda", "--server-port 30000"):
        assert line in defaults, line
    assert "usage: python -m app" in usage and "--check" in usage and "--no-listen" in usage


def test_launch_script_check_against_the_published_cache(published: Path) -> None:
    """``bash launch/qwen3_8b_app.sh --check``, as an operator runs it (offline cache of the published layout)."""
    import torch

    env = {**os.environ, "VENV": sys.prefix, "DART_SKIP_SETUP": "1", "HF_HUB_CACHE": str(published),
           "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    port = str(free_port())
    t0 = time.perf_counter()
    res = subprocess.run(["bash", str(SCRIPT), "--check", "--server-port", port], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=120)
    wall = time.perf_counter() - t0
    checked = float(re.search(r"\((\d+\.\d+) s to check", res.stdout).group(1))  # type: ignore[union-attr]
    assert checked < 3 and wall < 60, (checked, wall)
    if not torch.cuda.is_available():  # the script asks for CUDA: on this CPU-only torch, exactly that problem
        assert res.returncode == 2
        (text,) = problems(res.stderr)
        assert "--device cuda asks for CUDA" in text and "fix: --device cpu" in text
        assert "Traceback" not in res.stderr
    res = subprocess.run(["bash", str(SCRIPT), "--check", "--device", "cpu", "--server-port", port], cwd=REPO,
                         env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "small.trie" in res.stdout and "No problem found" in res.stdout and "sound" not in res.stdout


def test_load_ngram_names_a_repo_missing_from_the_offline_cache(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The loader itself (python -m dart_core.generate, the benchmarks) says the repo is missing, not that a store
    "holds neither" file."""
    from dart_core.arena import load_ngram
    from dart_core.loading.hub import HubFileError

    use_cache(monkeypatch, tmp_path / "empty", offline=True)
    with pytest.raises(HubFileError, match=r"small\.trie of the N-gram repo fvliang/dart-qwen3-ngram is not in the "
                                           r"local Hugging Face cache \(HF_HUB_OFFLINE is set\); fetch it with "
                                           r"`hf download fvliang/dart-qwen3-ngram small\.trie`"):
        load_ngram("fvliang/dart-qwen3-ngram", small=True)


def test_a_flaw_of_the_check_never_blocks_a_launch(hub: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """--check reports it (exit 2, one line); a plain start warns and goes on to load."""
    import logging

    import app.engine

    def broken(**kwargs: Any) -> Any:
        raise RuntimeError("a bug in the check")

    def engine(*args: Any, **kwargs: Any) -> Any:
        raise app.engine.EngineError("the engine was reached")

    warnings: list[str] = []
    monkeypatch.setattr(logging.getLogger("dart_arena.app"), "warning", lambda msg, *a: warnings.append(msg % a))
    monkeypatch.setattr(launch_check, "plan_launch", broken)
    monkeypatch.setattr(app.engine, "ProcessEngine", engine)
    code, _, err, _ = run_main(launch_args("--check"), capsys)
    assert code == 2 and "error: the launch check itself failed (RuntimeError: a bug in the check)" in err
    assert "Traceback" not in err
    code, _, err, _ = run_main(launch_args(), capsys)
    assert code == 2 and "the engine was reached" in err
    assert warnings == ["the launch check itself failed (RuntimeError: a bug in the check); loading without it"]


@pytest.mark.parametrize(("extra", "needle"), [
    ({"hidden_size": 48, "num_attention_heads": 6}, "its hidden size 48 differs from the target's 32"),
    ({"dflash_config": {"mask_token_id": 500, "target_layer_ids": [1, 3, 5]}},
     "its mask_token_id 500 is outside the target's vocabulary of 97"),
    ({"num_target_layers": 36, "dflash_config": {"mask_token_id": 5, "target_layer_ids": [1, 17, 33]}},
     "it reads target layers [1, 17, 33], but the target has 8 layers (0..7)"),
])
def test_dflash_drafter_built_for_another_target(published: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 no_loading: list[str], capsys: pytest.CaptureFixture[str],
                                                 extra: dict[str, Any], needle: str) -> None:
    """The DFlash chain and tree racers read one checkpoint: each gets the mismatch named, before any weight."""
    cache = tmp_path / "hub"
    shutil.copytree(published, cache)
    use_cache(monkeypatch, cache, offline=True)
    repo = "models--z-lab--Qwen3-8B-DFlash-b16"
    shutil.rmtree(cache / repo)
    published_cache(tmp_path / "mixed", parts=("dflash",), drafter_extra={"dflash": extra})
    shutil.copytree(tmp_path / "mixed" / repo, cache / repo)
    code, _, err, _ = run_main(launch_args(), capsys)
    assert code == 2 and not no_loading
    texts = problems(err)
    assert len(texts) == 2, texts  # DFlash and DFlash-tree
    for text, role in zip(texts, ("DFlash drafter", "DFlash-tree drafter"), strict=True):
        assert f"The {role} z-lab/Qwen3-8B-DFlash-b16 was built for another target than Qwen/Qwen3-8B" in text
        assert needle in text


def test_dflash_weights_that_do_not_match_their_config(hub: Path, no_loading: list[str],
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    import torch
    from safetensors.torch import save_file

    from dart_core.drafters.dflash import DFlashConfig, dflash_shapes

    folder = snapshot(hub, QWEN3_8B["dflash"])
    shapes = dflash_shapes(DFlashConfig.from_dict(json.loads((folder / "config.json").read_text())))
    shapes["fc.weight"] = (32, 64)
    del shapes["norm.weight"]
    (folder / "model.safetensors").unlink()  # a blob of the cache: replace the file, not its shared contents
    save_file({k: torch.zeros(v) for k, v in shapes.items()}, str(folder / "model.safetensors"))
    code, _, err, _ = run_main(launch_args("--no-compare-dflash-tree"), capsys)
    assert code == 2 and not no_loading
    (text,) = problems(err)
    assert "The DFlash drafter z-lab/Qwen3-8B-DFlash-b16: model.safetensors does not match its own config.json" in text
    assert "missing norm.weight" in text and "fc.weight (32, 64) != (32, 96)" in text
