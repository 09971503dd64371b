"""DART Arena's engine. The public surface, imported on first use (``import dart_core`` stays cheap, so the CLIs
and the launch check start fast):

- :func:`load_arena` / :class:`Arena` (``dart_core.arena``): one shared target with the racers' drafters;
  :func:`default_device`, :func:`describe_fast_path` (what the fast path will cost at start);
- :class:`DartModel` (``dart_core.compat``): the reference implementation's facade;
- the racer registry (``dart_core.racers.registry``): :data:`RACERS`, :data:`BASELINE`, :class:`Racer`,
  :func:`racer`, :func:`label`, :func:`racer_color`, :func:`register`, :func:`unregister` and the racers by kind;
- :func:`stream` / :class:`Step` (``dart_core.engine.loop``): one step per target forward, with
  :class:`SamplingConfig` and :func:`check_settings` (a racer's settings within their bounds); several streams
  decoded together on one target forward, by the same loop: :func:`stream_batch` / :class:`BatchStep`;
- model bundles (``dart_core.bundle``): :func:`open_bundle`, :class:`Bundle`, :func:`default_bundle_dir`, and the
  packaged default target (:func:`packaged_model`);
- prompts (``dart_core.loading.chat``): :func:`encode_chat`, :func:`render_chat`, :func:`encode_prompt`;
- errors: :func:`describe_error` (one line naming the file, and whether the problem is a known one),
  :func:`close_progress_bars`; a start's progress: :func:`progress_stage` (one line per stage, with its time).

Beside them, three front-end packages the app and the command lines share: ``dart_core.race`` (the race, its
figures, verdicts and standings), ``dart_core.options`` (every shared command-line option, declared once) and
``dart_core.preflight`` (the launch check). The layers below them, bottom first: ``loading`` and ``data`` →
``engine`` → ``ngram`` → ``drafters`` → ``racers`` → ``arena``, ``bundle``, ``compat``, ``preflight`` → ``options``,
``race`` → the front ends (``generate``, ``bench``, ``train``; docs/architecture.md). The compiled core
``dart_core._native`` loads lazily too, so that a copy of the package without it (the source tree shadowing an
installed package) fails with a message that says how to fix it."""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
_PUBLIC = {
    **dict.fromkeys(("load_arena", "Arena", "default_device", "describe_fast_path"), "dart_core.arena"),
    "DartModel": "dart_core.compat",
    **dict.fromkeys(("RACERS", "BASELINE", "Racer", "racer", "label", "register", "unregister", "checkpoint_racers",
                     "drafting_racers", "model_free_racers", "runner_racers"), "dart_core.racers.registry"),
    **dict.fromkeys(("stream", "Step", "stream_batch", "BatchStep"), "dart_core.engine.loop"),
    "SamplingConfig": "dart_core.engine.acceptance",
    "check_settings": "dart_core.drafters.settings",
    **dict.fromkeys(("open_bundle", "Bundle", "BundleError", "default_bundle_dir"), "dart_core.bundle"),
    "packaged_model": "dart_core.loading.packaged",
    **dict.fromkeys(("encode_chat", "render_chat", "encode_prompt"), "dart_core.loading.chat"),
    "close_progress_bars": "dart_core.loading.errors",
}
_RENAMED = {"racer_color": ("dart_core.racers.registry", "color"),
            "describe_error": ("dart_core.loading.errors", "describe"),
            "progress_stage": ("dart_core.loading.progress", "stage")}
__all__ = sorted([*_PUBLIC, *_RENAMED])


def _has_native(pkg_dir: Path) -> bool:
    return any((pkg_dir / f"_native{s}").is_file() for s in importlib.machinery.EXTENSION_SUFFIXES)


def native_missing_message() -> str:
    """One line: where ``dart_core`` came from, that it lacks the compiled core, and what to do about it."""
    py = f"Python {sys.version_info.major}.{sys.version_info.minor}"
    msg = f"dart_core was imported from {_HERE}, which has no compiled native core (dart_core._native) for {py}"
    installed = next((p for p in (Path(e or ".").resolve() / "dart_core" for e in sys.path)
                      if p != _HERE and _has_native(p)), None)
    if installed is not None:
        msg += f"; it shadows the installed dart_core in {installed}"
    if (_HERE.parent / "native" / "CMakeLists.txt").is_file():
        msg += " (this is the source tree)"
    return (msg + ". Run from outside the source tree so the installed package is used, or build the core in "
            "place with `pip install -e .` (or `bash scripts/dev.sh setup`) in the repository")


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:  # the public surface, imported on first use
        return getattr(importlib.import_module(_PUBLIC[name]), name)
    if name in _RENAMED:
        module, attr = _RENAMED[name]
        return getattr(importlib.import_module(module), attr)
    # Reached by `from dart_core import _native` only once importing the submodule has failed (or for
    # `dart_core._native` before any import): turn "cannot import name '_native'" into what to do.
    if name != "_native":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        return importlib.import_module(f"{__name__}._native")
    except ModuleNotFoundError as e:
        if e.name != f"{__name__}._native":
            raise
        raise ImportError(native_missing_message(), name=e.name, path=str(_HERE)) from None
