"""The library modules never import their command lines (``engine.loop`` → ``generate/__main__``, ``ngram.store``
→ ``ngram/__main__``), so importing the engine stays free of argparse front ends and there is no import loop; the
CLI imports the library, and ``python -m dart_core.generate`` / ``python -m dart_core.ngram`` still run the CLI."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import dart_core

PACKAGE = Path(dart_core.__file__).resolve().parent
PAIRS = [("dart_core.engine.loop", "dart_core.generate.__main__"),
         ("dart_core.ngram.store", "dart_core.ngram.__main__")]


@pytest.mark.parametrize(("library", "cli"), PAIRS)
def test_importing_the_library_does_not_import_its_cli(library: str, cli: str) -> None:
    code = f"import sys, {library}; print({cli!r} in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize(("library", "cli"), PAIRS)
def test_the_cli_is_imported_only_under_main(library: str, cli: str) -> None:
    # Statically: every import of the CLI sits inside the module's `if __name__ == "__main__":` block (the CLIs
    # are `__main__` modules now, so the library has no such block and imports its CLI nowhere).
    tree = ast.parse((PACKAGE.parent / (library.replace(".", "/") + ".py")).read_text(encoding="utf-8"))
    main_blocks = [n for n in tree.body if isinstance(n, ast.If) and "__main__" in ast.unparse(n.test)]
    allowed = {id(n) for block in main_blocks for n in ast.walk(block)}
    for node in ast.walk(tree):
        if (isinstance(node, ast.ImportFrom) and node.module == cli) or (
            isinstance(node, ast.Import) and any(a.name == cli for a in node.names)
        ):
            assert id(node) in allowed, f"{library} imports {cli} at line {node.lineno}"


@pytest.mark.parametrize(("module", "usage"), [
    ("dart_core.generate", "usage: python -m dart_core.generate"),
    ("dart_core.ngram", "usage: python -m dart_core.ngram"),
])
def test_module_entry_points_still_run_the_cli(module: str, usage: str) -> None:
    out = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(usage)


@pytest.mark.parametrize(("library", "cli"), PAIRS)
def test_python_m_runs_the_library_once(library: str, cli: str) -> None:
    """``python -m dart_core.generate``: the CLI runs as ``__main__`` (not imported under its module name) and the
    library it drives is imported once, under its own name; a second copy executed under another name would give
    two copies of every class."""
    package = cli.rsplit(".", 1)[0]
    code = (f"import runpy, sys\nsys.argv = ['x', '--help']\ntry:\n"
            f"    runpy.run_module({package!r}, run_name='__main__', alter_sys=True)\nexcept SystemExit:\n    pass\n"
            f"lib = sys.modules[{library!r}]\n"
            f"copies = [n for n, m in list(sys.modules.items()) if getattr(m, '__file__', None) == lib.__file__]\n"
            f"print(lib.__name__, copies, {cli!r} in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == f"{library} [{library!r}] False"
