"""hub.py: local dirs and Hub repo ids (through a hand-made offline HF cache), clear errors, tensor reading."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from dart_core.loading.hub import HubFileError, load_tensor, looks_local, resolve_file, resolve_first

REV = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def fake_cache(root: Path, repo: str, files: dict[str, bytes]) -> Path:
    """The layout huggingface_hub reads: models--org--name/{refs/main, snapshots/<rev>/<files>}."""
    base = root / f"models--{repo.replace('/', '--')}"
    (base / "refs").mkdir(parents=True)
    (base / "refs" / "main").write_text(REV)
    snap = base / "snapshots" / REV
    for name, data in files.items():
        (snap / name).parent.mkdir(parents=True, exist_ok=True)
        (snap / name).write_bytes(data)
    return root


def test_looks_local() -> None:
    assert looks_local("./x") and looks_local("/abs/dir") and looks_local("a/b/c") and looks_local("~/m")
    assert not looks_local("Qwen/Qwen3-1.7B")


def test_local_directory(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    assert resolve_file(tmp_path, "config.json") == tmp_path / "config.json"
    assert resolve_file(tmp_path, "model.safetensors", required=False) is None
    with pytest.raises(HubFileError, match=r"model\.safetensors not found in local directory"):
        resolve_file(tmp_path, "model.safetensors")
    with pytest.raises(HubFileError, match="does not exist"):
        resolve_file(tmp_path / "missing", "config.json")
    with pytest.raises(HubFileError, match=r"none of a\.bin, b\.bin"):
        resolve_first(tmp_path, ["a.bin", "b.bin"])


def test_hub_repo_from_cache_offline(tmp_path: Path) -> None:
    cache = fake_cache(tmp_path / "hub", "org/model", {"config.json": b'{"a": 1}'})
    path = resolve_file("org/model", "config.json", cache_dir=cache)
    assert path is not None and json.loads(path.read_text()) == {"a": 1}
    assert resolve_file("org/model", "tokenizer.json", cache_dir=cache, required=False) is None
    with pytest.raises(HubFileError) as err:
        resolve_file("org/model", "model.safetensors", cache_dir=cache)
    msg = str(err.value)
    assert "model.safetensors of Hub repo org/model" in msg and "HF_HUB_OFFLINE" in msg
    assert "hf download org/model model.safetensors" in msg
    with pytest.raises(HubFileError, match="HF_HUB_OFFLINE"):
        resolve_first("org/model", ["model.safetensors", "pytorch_model.bin"], cache_dir=cache)


def test_load_tensor_layouts(tmp_path: Path) -> None:
    emb = torch.randn(11, 4)
    other = torch.randn(3)
    single = tmp_path / "single"
    single.mkdir()
    save_file({"model.embed_tokens.weight": emb, "x": other}, single / "model.safetensors")
    assert torch.equal(load_tensor(single, ["model.embed_tokens.weight"]), emb)

    sharded = tmp_path / "sharded"
    sharded.mkdir()
    save_file({"x": other}, sharded / "model-00001-of-00002.safetensors")
    save_file({"model.embed_tokens.weight": emb}, sharded / "model-00002-of-00002.safetensors")
    index = {"weight_map": {"x": "model-00001-of-00002.safetensors",
                            "model.embed_tokens.weight": "model-00002-of-00002.safetensors"}}
    (sharded / "model.safetensors.index.json").write_text(json.dumps(index))
    assert torch.equal(load_tensor(sharded, ["embed_tokens.weight", "model.embed_tokens.weight"]), emb)

    binary = tmp_path / "bin"
    binary.mkdir()
    torch.save({"model.embed_tokens.weight": emb}, binary / "pytorch_model.bin")
    assert torch.equal(load_tensor(binary, ["model.embed_tokens.weight"]), emb)

    cache = fake_cache(tmp_path / "hub", "org/sharded", {
        "model.safetensors.index.json": json.dumps(index).encode(),
        "model-00002-of-00002.safetensors": (sharded / "model-00002-of-00002.safetensors").read_bytes(),
    })  # only the shard holding the key is cached: nothing else is needed
    assert torch.equal(load_tensor("org/sharded", ["model.embed_tokens.weight"], cache_dir=cache), emb)


class Evil:
    def __reduce__(self) -> tuple:
        return (print, ("pwned",))


def test_load_tensor_errors(tmp_path: Path) -> None:
    with pytest.raises(HubFileError, match="has no weights"):
        load_tensor(tmp_path, ["w"])
    save_file({"a": torch.zeros(1)}, tmp_path / "model.safetensors")
    with pytest.raises(HubFileError, match=r"none of \['w'\]"):
        load_tensor(tmp_path, ["w"])
    (tmp_path / "model.safetensors").write_bytes(b"garbage" * 10)
    with pytest.raises(HubFileError, match="not a readable safetensors"):
        load_tensor(tmp_path, ["w"])
    evil = tmp_path / "evil"
    evil.mkdir()
    torch.save({"w": Evil()}, evil / "pytorch_model.bin")
    with pytest.raises(HubFileError, match="weights_only"):
        load_tensor(evil, ["w"])
    bad_index = tmp_path / "badidx"
    bad_index.mkdir()
    (bad_index / "model.safetensors.index.json").write_text("{not json")
    with pytest.raises(HubFileError, match="not a valid shard index"):
        load_tensor(bad_index, ["w"])
