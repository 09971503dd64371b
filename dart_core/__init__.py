"""DART Arena's engine. The public surface, imported on first use (``import dart_core`` stays cheap, so the CLIs
and the launch check start fast):

- :func:`load_arena` / :class:`Arena` (``dart_core.arena``): one shared target with the racers' drafters, and
  :func:`add_fast_path_arguments` / :func:`describe_fast_path`: the fast path's flags every front end shares, and
  what it will cost at start;
- :class:`DartModel` (``dart_core.compat``): the reference implementation's facade;
- the racer registry (``dart_core.racers.registry``): :data:`RACERS`, :class:`Racer`, :func:`racer`,
  :func:`register`, :func:`unregister`;
- :func:`stream` / :class:`Step` (``dart_core.engine.loop``): one step per target forward;
- :func:`find_standings` / :class:`Standings` / :func:`models_identity` (``dart_core.bench.standings``): the last
  ``bench e2e`` run measured on this host for a set of models.

The layers below them, bottom first: ``loading`` → ``engine`` → ``ngram`` → ``drafters`` → ``racers`` → ``arena``,
``bundle``, ``compat``, ``preflight`` → the front ends (``generate``, ``bench``, ``train``; docs/architecture.md).
The compiled core ``dart_core._native`` loads lazily too, so that a copy of the package without it (the source
tree shadowing an installed package) fails with a message that says how to fix it."""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
_PUBLIC = {
    "load_arena": "dart_core.arena", "Arena": "dart_core.arena", "DartModel": "dart_core.compat",
    "add_fast_path_arguments": "dart_core.arena", "describe_fast_path": "dart_core.arena",
    "RACERS": "dart_core.racers.registry", "Racer": "dart_core.racers.registry", "racer": "dart_core.racers.registry",
    "register": "dart_core.racers.registry", "unregister": "dart_core.racers.registry",
    "stream": "dart_core.engine.loop", "Step": "dart_core.engine.loop",
    "find_standings": "dart_core.bench.standings", "Standings": "dart_core.bench.standings",
    "models_identity": "dart_core.bench.standings",
}
__all__ = ["RACERS", "Arena", "DartModel", "Racer", "Standings", "Step", "add_fast_path_arguments",
           "describe_fast_path", "find_standings", "load_arena",
           "models_identity", "racer", "register", "stream", "unregister"]


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
