"""A target checkpoint's files, named when one is at fault. transformers' own errors rarely say which file broke: a
truncated ``tokenizer.json`` surfaces as "Expecting value: line 10222 column 9", a flipped header byte as a bare
SafetensorError, a wrong-shaped tensor as a report table and then a RuntimeError. After such a failure these checks
find the file and say what is wrong with it, as a :class:`~dart_core.loading.errors.LoadError`; they run only after a
failure, so a good checkpoint pays nothing for them. :func:`check_finite` is the exception: a quick scan of the
embedding and ``lm_head``, whose NaNs would otherwise surface mid-race."""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dart_core.loading.errors import LoadError, exception_text, one_line
from dart_core.loading.hub import HubFileError, looks_local, resolve_file, weights_only_problem
from dart_core.loading.layouts import SHARD_INDEXES, SINGLE_WEIGHTS, SLOW_TOKENIZER_FILES, TOKENIZER_JSON

log = logging.getLogger("dart_arena.load")



def _file(base: str | os.PathLike[str], name: str, revision: str | None) -> Path | None:
    try:
        return resolve_file(base, name, revision=revision, required=False)
    except HubFileError:
        return None


def _named(base: str | os.PathLike[str], name: str) -> str:
    """A file of ``base`` by name, also when it does not exist (a directory's path, or ``repo/name``)."""
    return os.fspath(Path(base).expanduser() / name) if looks_local(base) else f"{os.fspath(base)}/{name}"


def json_problem(path: Path) -> str | None:
    """What is wrong with a JSON file, or None: unreadable, not UTF-8, empty, or not valid JSON (where)."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        return f"not UTF-8 text ({e.reason} at byte {e.start}): damaged?"
    except OSError as e:
        return f"cannot be read ({e.strerror or e})"
    if not text.strip():
        return "empty: not valid JSON"
    try:
        json.loads(text)
    except json.JSONDecodeError as e:
        return (f"not valid JSON ({e.msg} at line {e.lineno} column {e.colno}, character {e.pos} of {len(text)}): "
                "truncated or damaged?")
    return None


def tokenizer_error(base: str | os.PathLike[str], exc: BaseException, *, revision: str | None = None) -> Exception:
    """The error to raise after ``AutoTokenizer.from_pretrained(base)`` raised ``exc``: the first of its JSON
    files that does not parse, a missing ``tokenizer.json``, else ``exc`` in one line naming ``base``."""
    for name in TOKENIZER_JSON:
        path = _file(base, name, revision)
        problem = json_problem(path) if path is not None else None
        if path is not None and problem is not None:
            return LoadError(path, problem)
    if _file(base, "tokenizer.json", revision) is None:
        slow = [n for n in SLOW_TOKENIZER_FILES if _file(base, n, revision) is not None]
        problem = "missing: the target's tokenizer needs it"
        if slow:  # what transformers tried instead, and why that failed
            problem += f" (the slow tokenizer's {', '.join(slow)} could not stand in: {exception_text(exc)})"
        return LoadError(_named(base, "tokenizer.json"), problem)
    if isinstance(exc, OSError) and not isinstance(exc, LoadError):
        return HubFileError(f"cannot load the tokenizer of target {os.fspath(base)}: {one_line(str(exc))}")
    return LoadError(base, f"cannot load the tokenizer ({exception_text(exc)})")


def weight_files(base: str | os.PathLike[str], *, revision: str | None = None) -> list[Path]:
    """The weight files of a checkpoint, as transformers picks them: the shards of an index (safetensors
    first), else the single file; those not at hand (not downloaded) are left out. A broken index is a LoadError."""
    for index_name in SHARD_INDEXES:
        index = _file(base, index_name, revision)
        if index is None:
            continue
        problem = json_problem(index)
        if problem is None:
            weight_map = json.loads(index.read_text(encoding="utf-8")).get("weight_map")
            if not isinstance(weight_map, dict):
                problem = "not a shard index: no weight_map object"
        if problem is not None:
            raise LoadError(index, problem)
        shards = (_file(base, name, revision) for name in sorted(set(weight_map.values())))
        return [p for p in shards if p is not None]
    return [p for p in (_file(base, n, revision) for n in SINGLE_WEIGHTS) if p is not None][:1]


def tensor_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Name → shape of every tensor in a weights file, reading as little as the format allows (a safetensors
    header; a ``.bin`` memory-mapped, ``weights_only``). Raises LoadError naming the file when it is unreadable."""
    import torch

    if path.name.endswith(".safetensors"):
        from safetensors import safe_open

        try:
            with safe_open(str(path), framework="pt") as f:
                return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118 - not a dict
        except Exception as e:  # safetensors has its own error types for a corrupt header
            raise LoadError(path, f"not a readable safetensors file ({exception_text(e)}): truncated or "
                                  "damaged?") from None
    try:
        try:
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as e:
            if "mmap" not in str(e):
                raise
            state = torch.load(path, map_location="cpu", weights_only=True)  # the legacy (non-zip) format
    except Exception as e:
        raise LoadError(path, weights_only_problem(e)) from None
    if not isinstance(state, dict):
        raise LoadError(path, f"expected a dict of tensors, got {type(state).__name__}")
    return {k: tuple(v.shape) for k, v in state.items() if isinstance(v, torch.Tensor)}


def _expected_shapes(base: str | os.PathLike[str], revision: str | None) -> dict[str, tuple[int, ...]]:
    """Name → shape of every tensor the model that ``config.json`` describes has (built on the meta device:
    no memory, no initialisation)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(base, revision=revision)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def weights_error(base: str | os.PathLike[str], exc: BaseException, *, revision: str | None = None) -> Exception:
    """The error to raise after ``AutoModelForCausalLM.from_pretrained(base)`` raised ``exc``: the first weight
    file that cannot be read, or one whose tensor has a shape ``config.json`` does not give it; else ``exc`` in
    one line, naming the weights file (or ``base``)."""
    try:
        files = weight_files(base, revision=revision)
        shapes = {path: tensor_shapes(path) for path in files}
    except LoadError as e:
        return e
    try:
        expected = _expected_shapes(base, revision)
    except Exception as e:  # the config itself is at fault: the original error says more
        log.debug("cannot build the model of %s on the meta device to compare shapes: %s", base, e)
        expected = {}
    config = _named(base, "config.json")
    for path, found in shapes.items():
        for key, shape in found.items():
            want = expected.get(key)
            if want is not None and want != shape:
                return LoadError(path, f"tensor {key} has shape {list(shape)}, but the model that {config} "
                                       f"describes needs {list(want)}: damaged, or the wrong config?")
    if isinstance(exc, OSError) and not files:
        return HubFileError(f"cannot load target {os.fspath(base)}: {one_line(str(exc))}")
    return LoadError(files[0] if len(files) == 1 else base, exception_text(exc))


@contextlib.contextmanager
def held_load_report() -> Iterator[None]:
    """Hold what transformers logs while it loads weights: before it raises on a mis-shaped tensor it logs a
    many-line LOAD REPORT table, which our one-line error replaces. Re-emitted as they were when the load
    succeeds (missing keys still warn), logged at debug level when it fails."""
    logger = logging.getLogger("transformers.modeling_utils")
    held: list[logging.LogRecord] = []

    def hold(record: logging.LogRecord) -> bool:
        held.append(record)
        return False

    logger.addFilter(hold)
    failed = False
    try:
        yield
    except BaseException:
        failed = True
        raise
    finally:
        logger.removeFilter(hold)
        for record in held:
            if failed:
                log.debug("transformers, while loading: %s", record.getMessage())
            else:
                logger.handle(record)


def tensor_file(base: str | os.PathLike[str], key: str, *, revision: str | None = None) -> str:
    """The file of ``base`` that holds tensor ``key`` (the shard an index names, else the single weights file),
    for a message; ``base`` itself when that cannot be told."""
    with contextlib.suppress(LoadError, OSError, ValueError, AttributeError):
        for index_name in SHARD_INDEXES:
            index = _file(base, index_name, revision)
            if index is not None:
                shard = json.loads(index.read_text(encoding="utf-8"))["weight_map"].get(key)
                return _named(index.parent, shard) if shard else os.fspath(index)
        files = weight_files(base, revision=revision)
        if files:
            return os.fspath(files[0])
    return os.fspath(base)


def _all_finite(weight: Any, rows: int = 1 << 14) -> bool:
    """Whether a 2-D tensor holds no NaN or infinity, a block of rows at a time (no full-size temporary)."""
    import torch

    with torch.no_grad():
        return all(bool(torch.isfinite(weight[i:i + rows]).all()) for i in range(0, weight.shape[0], rows))


def check_finite(model: Any, base: str | os.PathLike[str], *, revision: str | None = None) -> None:
    """Refuse a target whose input embedding or ``lm_head`` holds a NaN or an infinity (a LoadError naming the
    tensor and its file): every drafter shares the embedding, and such a target would race garbage or fail
    mid-race. A tied ``lm_head`` is the embedding, checked once."""
    names: dict[int, str] = {}
    for n, p in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), n)  # a tied weight by its first name (the embedding's)
    seen: set[int] = set()
    for module in (model.get_input_embeddings(), model.get_output_embeddings()):
        weight = getattr(module, "weight", None)
        if weight is None or weight.device.type == "meta" or weight.data_ptr() in seen:
            continue
        seen.add(weight.data_ptr())
        if not _all_finite(weight):
            key = names.get(id(weight), "the embedding")
            raise LoadError(tensor_file(base, key, revision=revision),
                            f"tensor {key} holds non-finite values (NaN or inf): a damaged checkpoint")
