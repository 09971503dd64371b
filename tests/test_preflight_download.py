"""The launch check's ``--download`` (the plan fetched exactly, a repo the Hub lacks, offline), the app's flags
both ways, the launch scripts' defaults and ``--check`` against the published cache, and a flaw of the check that
never blocks a launch (tests/test_preflight.py has the check's plan and its refusals)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from helpers_hub import QWEN3_8B, published_cache, snapshot
from helpers_preflight import REPO, SCRIPT, free_port, launch_args, problems, run_main, use_cache

from dart_arena import launch_check
from dart_arena.__main__ import build_parser
from dart_core.preflight import launch, sources

# main() sets up the app's log handler on the stderr of its time: each test gets its own (capsys's)
pytestmark = pytest.mark.usefixtures("fresh_log_handler")


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
    assert argv[:2] == ["-m", "dart_arena"] and "--share" in argv  # DART_SHARE's --share comes before the user's flags
    args = build_parser().parse_args(argv[2:])
    assert (args.listen, args.share, args.use_small_ngram, args.server_port, args.device) == (False, False, False,
                                                                                             8000, "auto")
    assert args.base_model_name_or_path == "Qwen/Qwen3-8B" and args.compare_eagle3 is True


def test_launch_help_prints_the_defaults_first() -> None:
    env = {**os.environ, "VENV": sys.prefix, "DART_SKIP_SETUP": "1"}
    out = subprocess.run(["bash", str(SCRIPT), "--help"], cwd=REPO, env=env, capture_output=True, text=True,
                         check=True).stdout
    defaults, _, usage = out.partition("python -m dart_arena --help:")
    assert "launch/qwen3_8b_app.sh runs python -m dart_arena with these defaults" in defaults
    for line in ("--base-model-name-or-path Qwen/Qwen3-8B", "--dart-model-name-or-path fvliang/qwen8b-dart",
                 "--ngram-model-name-or-path fvliang/dart-qwen3-ngram", "--use-small-ngram",
                 "--eagle3-model-name-or-path AngelSlim/Qwen3-8B_eagle3", "--device cuda", "--server-port 30000"):
        assert line in defaults, line
    assert "usage: python -m dart_arena" in usage and "--check" in usage and "--no-listen" in usage


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

    import dart_arena.model_client

    def broken(**kwargs: Any) -> Any:
        raise RuntimeError("a bug in the check")

    def engine(*args: Any, **kwargs: Any) -> Any:
        raise dart_arena.model_client.EngineError("the engine was reached")

    warnings: list[str] = []
    monkeypatch.setattr(logging.getLogger("dart_arena.app"), "warning", lambda msg, *a: warnings.append(msg % a))
    monkeypatch.setattr(launch_check, "plan_launch", broken)
    monkeypatch.setattr(dart_arena.model_client, "ProcessEngine", engine)
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
