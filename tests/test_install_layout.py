"""A package laid out as a plain ``pip install .`` leaves it: a copy of ``dart_core`` outside the repository, with
or without its compiled core, run in a fresh interpreter that skips the editable install's import hooks
(``python -S``, site-packages on ``PYTHONPATH``). Without the core the import error says where ``dart_core`` came
from and how to fix it; without ``assets/`` next to it the default bundle's error says where to get one. What the
wheel installs: the packages ``dart_core`` and ``dart_arena``, and no generic top-level ``app`` (the root's
``app.py`` is the Spaces entry point, never installed)."""

from __future__ import annotations

import os
import re
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import dart_core
from dart_core import _native
from dart_core import bundle as bundle_mod
from dart_core.bundle import BundleError, open_bundle

PACKAGE = Path(dart_core.__file__).resolve().parent
ROOT = Path(__file__).resolve().parent.parent
INSTALLED = ["dart_core", "dart_arena"]  # the wheel's top-level names, in pyproject.toml's order


def _copy_package(dest: Path, *, with_native: bool) -> Path:
    """``dest/dart_core``: the package's Python files, plus the compiled core when asked (as an install has)."""
    shutil.copytree(PACKAGE, dest / "dart_core", ignore=shutil.ignore_patterns("__pycache__", "_native*"))
    if with_native:
        shutil.copy2(_native.__file__, dest / "dart_core")
    return dest / "dart_core"


def _run(code: str, path: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DART_ARENA_BUNDLE")}
    env["PYTHONPATH"] = os.pathsep.join([str(path), *site.getsitepackages()])
    return subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=120)


def test_package_without_native_core_says_what_is_wrong(tmp_path: Path) -> None:
    pkg = _copy_package(tmp_path / "src", with_native=False)
    out = _run("import dart_core.ngram.store", tmp_path / "src", tmp_path)
    assert out.returncode != 0
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: dart_core was imported from ")
    assert str(pkg) in last and "no compiled native core" in last
    assert "outside the source tree" in last and "pip install -e ." in last and "scripts/dev.sh setup" in last
    assert "cannot import name" not in out.stderr


def test_a_source_tree_shadowing_an_install_is_named(tmp_path: Path) -> None:
    # The repository layout (native/CMakeLists.txt next to the package) run from its root, as `python -m dart_arena` is.
    _copy_package(tmp_path / "repo", with_native=False)
    (tmp_path / "repo" / "native").mkdir()
    (tmp_path / "repo" / "native" / "CMakeLists.txt").write_text("")
    installed = _copy_package(tmp_path / "site", with_native=True)
    out = _run("import dart_core.ngram.search", tmp_path / "site", tmp_path / "repo")  # cwd first on sys.path
    last = out.stderr.strip().splitlines()[-1]
    assert out.returncode != 0 and "(this is the source tree)" in last
    assert f"it shadows the installed dart_core in {installed}" in last


def test_package_with_native_core_imports(tmp_path: Path) -> None:
    _copy_package(tmp_path / "site", with_native=True)
    out = _run("import dart_core.ngram.store as n; print(n.__file__)", tmp_path / "site", tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(tmp_path / "site" / "dart_core" / "ngram" / "store.py")


def test_installed_package_without_assets_says_where_to_get_the_bundle(tmp_path: Path) -> None:
    _copy_package(tmp_path / "site", with_native=False)  # the bundle module needs no native core
    code = ("from dart_core.bundle import BundleError, open_bundle\n"
            "try:\n    open_bundle()\nexcept BundleError as e:\n    print(e)\n")
    out = _run(code, tmp_path / "site", tmp_path)
    assert out.returncode == 0, out.stderr
    text = out.stdout.strip()
    assert f"looked for {tmp_path / 'site' / 'assets' / 'smollm2'}" in text
    assert "`assets/smollm2`" in text and "--bundle DIR" in text and "$DART_ARENA_BUNDLE" in text


def test_missing_default_assets_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bundle_mod, "ASSETS", tmp_path / "site-packages" / "assets")  # not there
    monkeypatch.delenv("DART_ARENA_BUNDLE", raising=False)
    with pytest.raises(BundleError) as e:
        open_bundle()
    text = str(e.value)
    assert str(tmp_path / "site-packages" / "assets" / "smollm2") in text
    assert "not installed with the package" in text and "--bundle DIR" in text and "$DART_ARENA_BUNDLE" in text
    with pytest.raises(BundleError, match=re.escape("`assets/tiny`")):  # a named bundle of assets/ too
        open_bundle(tmp_path / "site-packages" / "assets" / "tiny")
    # A missing bundle anywhere else keeps the build-it message.
    with pytest.raises(BundleError, match=re.escape(f"{tmp_path / 'nope'} does not exist. Build it with")):
        open_bundle(tmp_path / "nope")



def test_the_wheel_holds_only_the_projects_own_packages() -> None:
    """``wheel.packages`` (scikit-build-core: the folders copied into the wheel, each a top-level name in
    site-packages) lists the two packages, each a package folder, and nothing named ``app``; no script or entry
    point adds a command."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert config["tool"]["scikit-build"]["wheel"]["packages"] == INSTALLED
    assert all((ROOT / name / "__init__.py").is_file() for name in INSTALLED)
    assert "scripts" not in config["project"] and "entry-points" not in config["project"]


def test_the_built_wheel_installs_no_top_level_app(tmp_path: Path) -> None:
    """The wheel itself (``pip wheel``, reusing the native core's build folder that the set-up filled): its top-level
    names are ``dart_core``, ``dart_arena`` (with the page's ``style.css``) and its metadata, and the root's
    ``app.py`` is not among them; unpacked as site-packages, ``dart_arena`` imports and no module ``app`` is found.
    (The editable install of ``scripts/dev.sh setup`` puts the repository root on ``sys.path``, where ``app.py``
    lies: scikit-build-core's redirect mode adds each package's parent folder, so only the wheel can tell.)"""
    pytest.importorskip("scikit_build_core")  # --no-build-isolation: the set-up's build tools
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps",
                            "--no-index", "-w", str(tmp_path / "dist"), str(ROOT)],
                           capture_output=True, text=True, timeout=900)
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        z.extractall(tmp_path / "site")
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == set(INSTALLED)
    assert "dart_arena/style.css" in names and "dart_arena/__main__.py" in names
    assert not any(n == "app.py" or n.startswith("app/") for n in names)
    code = ("import importlib.util as u, dart_arena\n"
            "print(u.find_spec('app'), dart_arena.__file__)\n")
    out = _run(code, tmp_path / "site", tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["None", str(tmp_path / "site" / "dart_arena" / "__init__.py")]
