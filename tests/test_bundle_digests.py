"""Issue 24: a bundle's files are checked against the sha256 its ``bundle.json`` records
(``dart_core.loading.bundle_digests``), once, then cached by size and modification time; flipped bits in a drafter's
tensor data (which safetensors cannot notice) are refused with a message naming the file; ``--check`` names what it
did not read as not read, never as sound (a NaN-filled drafter, an N-gram file of random bytes)."""

from __future__ import annotations

import json
import os
import random
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers_app import BUNDLE, REPO
from safetensors.torch import load_file, save_file

from dart_core.bundle import BundleError, open_bundle
from dart_core.loading.bundle_digests import loaded_files, record_digests, verify_digests

if not (BUNDLE / "bundle.json").is_file():
    pytest.skip("the embedded bundle assets/tiny is missing", allow_module_level=True)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private $DART_ARENA_CACHE (where verified files are remembered)."""
    root = tmp_path / "cache"
    monkeypatch.setenv("DART_ARENA_CACHE", str(root))
    return root


def copy_of_tiny(tmp_path: Path) -> Path:
    root = tmp_path / "tiny"
    shutil.copytree(BUNDLE, root)
    return root


def flip_bits(path: Path, n: int, seed: int = 0) -> None:
    """``n`` random bits flipped inside the tensor data (after the safetensors header): the file still loads."""
    data = bytearray(path.read_bytes())
    start = 8 + struct.unpack("<Q", data[:8])[0]
    rng = random.Random(seed)
    for _ in range(n):
        i = rng.randrange(start, len(data))
        data[i] ^= 1 << rng.randrange(8)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("bundle", ["tiny", "smollm2"])
def test_the_shipped_bundles_record_every_model_file(bundle: str, cache: Path) -> None:
    root = REPO / "assets" / bundle
    files = json.loads((root / "bundle.json").read_text(encoding="utf-8"))["files"]
    assert sorted(files) == loaded_files(root)
    assert any(name.endswith("model.safetensors") for name in files) and "ngram/small.ngram" in files
    assert verify_digests(root, files) == len(files)  # all hashed, all match
    assert verify_digests(root, files) == 0  # then remembered: nothing read again


def test_flipped_bits_in_a_drafters_tensor_data_are_refused_naming_the_file(tmp_path: Path, cache: Path) -> None:
    root = copy_of_tiny(tmp_path)
    weights = root / "dart" / "model.safetensors"
    open_bundle(root)  # sound: verified (and remembered)
    flip_bits(weights, 300)
    load_file(weights)  # safetensors itself notices nothing
    with pytest.raises(BundleError) as e:
        open_bundle(root)
    assert str(weights) in str(e.value) and "damaged or was changed" in str(e.value)
    res = subprocess.run([sys.executable, "-m", "dart_arena", "--bundle", str(root), "--check"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "DART_ARENA_CACHE": str(cache)})
    assert res.returncode == 2 and str(weights) in res.stderr and "Traceback" not in res.stderr, res.stderr


def test_a_file_changed_after_it_was_verified_is_hashed_again(tmp_path: Path, cache: Path) -> None:
    root = copy_of_tiny(tmp_path)
    files = json.loads((root / "bundle.json").read_text(encoding="utf-8"))["files"]
    assert verify_digests(root, files) == len(files)
    prompts = root / "prompts.jsonl"
    data = bytearray(prompts.read_bytes())
    data[10] ^= 1  # same size
    prompts.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"prompts\.jsonl has sha256"):
        verify_digests(root, files)
    (root / "eagle3" / "config.json").unlink()
    with pytest.raises(ValueError, match=r"eagle3/config.json is missing"):
        verify_digests(root, {"eagle3/config.json": files["eagle3/config.json"]})
    record_digests(root)  # a deliberate change, recorded
    assert "eagle3/config.json" not in json.loads((root / "bundle.json").read_text(encoding="utf-8"))["files"]
    open_bundle(root)


def test_check_says_not_read_for_what_it_did_not_read(tmp_path: Path, cache: Path) -> None:
    """A NaN-filled DART drafter and an N-gram file of random bytes (after its magic) given by path: --check
    finds no problem it could see, names both as not read, and never calls them sound; the start refuses them."""
    nan = tmp_path / "nan-dart"
    shutil.copytree(BUNDLE / "dart", nan)
    tensors = load_file(nan / "model.safetensors")
    save_file({k: torch.full_like(v, float("nan")) if v.is_floating_point() else v for k, v in tensors.items()},
              nan / "model.safetensors")
    junk = tmp_path / "junk.ngram"
    junk.write_bytes(b"DARTNGRM" + random.Random(1).randbytes(4096))
    res = subprocess.run([sys.executable, "-m", "dart_arena", "--bundle", str(BUNDLE), "--dart-model-name-or-path",
                          str(nan), "--ngram-model-name-or-path", str(junk), "--check"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "DART_ARENA_CACHE": str(cache)})
    assert res.returncode == 0, res.stderr
    out = " ".join(res.stdout.split())
    assert "sound" not in out, out
    assert "Not read: the contents of the DART drafter, N-gram store" in out, out
    assert "Verified whole (sha256 recorded in the bundle's bundle.json): the target, EAGLE-3 drafter." in out, out
