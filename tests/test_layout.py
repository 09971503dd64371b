"""The house shows its layers (docs/architecture.md): over every module of ``dart_core`` and ``dart_arena``, from the
source alone, every import statement (module level, inside functions, under ``TYPE_CHECKING`` or ``__main__``) is
an arrow; there is no import loop, no module imports a layer above its own, the front ends (``generate``,
``bench``, ``train``) never import each other, ``dart_core`` never imports ``dart_arena`` or ``gradio``, the app reaches
``dart_core`` only through its public names and the shared front-end packages, every shared flag is declared in
one place, no file is longer than 600 lines, no racer is named outside its drafter module, the registry, the
training recipes and the benchmarks, and no module reaches another module's private (underscored) names (issue 68)."""

from __future__ import annotations

import ast
from collections.abc import Collection
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 600
# dart_core's layers, bottom first; a module may import its own layer and those below it
LAYERS = [
    {"dart_core", "dart_core.loading", "dart_core.data"},
    {"dart_core.engine"},
    {"dart_core.ngram", "dart_core.suffix"},
    {"dart_core.drafters"},
    {"dart_core.racers"},
    {"dart_core.arena", "dart_core.bundle", "dart_core.compat", "dart_core.preflight"},
    {"dart_core.options", "dart_core.race"},
    {"dart_core.generate", "dart_core.bench", "dart_core.train"},
]
FRONT_ENDS = ("dart_core.generate", "dart_core.bench", "dart_core.train")
# what the app may import of dart_core: the package's public names and the front-end packages it shares with the
# command lines (the race, the options, the launch check); the compiled core only to say it is missing
APP_MAY_IMPORT = ("dart_core", "dart_core.race", "dart_core.options", "dart_core.preflight", "dart_core._native")
# (``bench gpu --fast-path`` is a switch of that measurement, which sizes its own static cache)
SHARED_FLAGS = ("--dtype", "--threads", "--device", "--cpu-linear", "--fast-path-mode", "--no-fast-path")
ALLOWED_TO_NAME_RACERS = ("drafters", "racers", "train", "bench")
# the compiled core (built from native/, so absent from the source tree): a module, though named like a private name
NATIVE = "dart_core._native"


def modules(root: Path = ROOT, bases: tuple[str, ...] = ("dart_core", "dart_arena")) -> dict[str, Path]:
    out = {}
    for base in bases:
        for p in (root / base).rglob("*.py"):
            parts = list(p.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = p
    return out


MODULES = modules()


def resolve(name: str) -> str | None:
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def package_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def imported_from(node: ast.ImportFrom, package: str) -> str:
    """The absolute name of the module that ``from ... import`` reads, in a module of ``package``."""
    if not node.level:
        return node.module or ""
    pkg = package
    for _ in range(node.level - 1):
        pkg = pkg.rpartition(".")[0]
    return f"{pkg}.{node.module}" if node.module else pkg


def imports(module: str) -> set[str]:
    """Every module of the project (or a third party's top-level name, prefixed ``ext:``) that ``module`` imports."""
    path = MODULES[module]
    package = package_of(module, path)
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = imported_from(node, package)
            names = [f"{base}.{a.name}" for a in node.names] + [base]
        for name in names:
            found = resolve(name)
            if found is None:
                out.add("ext:" + name.split(".")[0])
            elif found != module and not module.startswith(found + ".") and not (
                    path.name == "__init__.py" and found.startswith(module)):
                out.add(found)
    return out


GRAPH = {m: imports(m) for m in MODULES}


def layer(module: str) -> int | None:
    for i, names in enumerate(LAYERS):
        if any(module == n or module.startswith(n + ".") for n in names if n != "dart_core") or module == "dart_core":
            return i
    return None


def test_every_dart_core_module_has_a_layer() -> None:
    assert [m for m in MODULES if m.startswith("dart_core") and layer(m) is None] == []


def test_no_import_loop() -> None:
    # Tarjan's strongly connected components over the project's modules
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    loops: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in (w for w in GRAPH[v] if w in MODULES):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                loops.append(sorted(comp))

    for v in MODULES:
        if v not in index:
            visit(v)
    assert loops == []


def test_imports_run_bottom_to_top() -> None:
    upward = [f"{m} -> {t}" for m in MODULES if m.startswith("dart_core") for t in GRAPH[m]
              if t in MODULES and t.startswith("dart_core") and layer(t) > layer(m)]  # type: ignore[operator]
    assert upward == []


def test_the_front_ends_never_import_each_other() -> None:
    def front_end(m: str) -> str | None:
        return next((f for f in FRONT_ENDS if m == f or m.startswith(f + ".")), None)

    across = [f"{m} -> {t}" for m in MODULES for t in GRAPH[m]
              if front_end(m) and front_end(t) and front_end(t) != front_end(m)]
    assert across == []


def test_the_app_uses_only_the_public_api() -> None:
    internal = [f"{m} -> {t}" for m in MODULES if m == "dart_arena" or m.startswith("dart_arena.") for t in GRAPH[m]
                if t.startswith("dart_core") and not any(t == a or t.startswith(a + ".") for a in APP_MAY_IMPORT[1:])
                and t != "dart_core"]
    assert internal == []


def test_the_public_names_resolve() -> None:
    import dart_core

    assert [n for n in dart_core.__all__ if getattr(dart_core, n, None) is None] == []


@pytest.mark.parametrize("flag", SHARED_FLAGS)
def test_a_shared_flag_is_declared_in_one_place(flag: str) -> None:
    import re

    where = [str(p.relative_to(ROOT)) for p in MODULES.values()
             if re.search(r"add_argument\(\s*['\"]" + re.escape(flag) + r"['\"]", p.read_text(encoding="utf-8"))]
    assert where == ["dart_core/options/runtime.py"]


def test_the_engine_never_imports_the_app_or_gradio() -> None:
    # (bench in_app drives the app over HTTP)
    bad = [f"{m} -> {t}" for m in MODULES if m.startswith("dart_core") for t in GRAPH[m]
           if t == "dart_arena" or t.startswith("dart_arena.") or t == "ext:gradio"]
    assert bad == []


def test_no_file_over_the_limit() -> None:
    sizes = {str(p.relative_to(ROOT)): sum(1 for _ in p.open(encoding="utf-8")) for p in MODULES.values()}
    assert {f: n for f, n in sizes.items() if n > MAX_LINES} == {}


@pytest.mark.parametrize("key", ["dart", "eagle3", "dflash", "dflash-tree", "hf"])
def test_racers_are_named_only_where_they_may_be(key: str) -> None:
    from dart_core.racers.registry import racer

    racer(key)  # a registered key
    named = []
    for p in MODULES.values():
        rel = p.relative_to(ROOT).parts
        if any(part in ALLOWED_TO_NAME_RACERS for part in rel[:-1]):
            continue
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value == key:
                named.append(f"{'/'.join(rel)}:{node.lineno}")
    assert named == []


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def dotted(node: ast.expr) -> list[str] | None:
    """``a.b.c`` as ["a", "b", "c"]; None for anything but names and attributes."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        head = dotted(node.value)
        return None if head is None else [*head, node.attr]
    return None


def private_reaches(path: Path, module: str, known: Collection[str]) -> list[tuple[int, str]]:
    """(line, name) for each private name of another module that ``module`` (at ``path``) uses: ``from m import
    _x`` where ``m._x`` is not itself a module of ``known``, and ``alias._x`` (or ``alias.sub._x``) where the alias
    is bound by an import of a module of ``known`` (``import m as _m`` only names a module, and is fine)."""
    package = package_of(module, path)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    bound: dict[str, str] = {}  # a name this module binds by an import -> the project module it names
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                target = a.name if a.asname else a.name.partition(".")[0]
                if target in known:
                    bound[a.asname or target] = target
        elif isinstance(node, ast.ImportFrom):
            base = imported_from(node, package)
            for a in node.names:
                full = f"{base}.{a.name}"
                if full in known:
                    bound[a.asname or a.name] = full
                elif is_private(a.name):
                    found.append((a.lineno, full))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and is_private(node.attr):
            chain = dotted(node.value)
            if chain and chain[0] in bound:
                owner = ".".join([bound[chain[0]], *chain[1:]])
                if owner in known and owner != module:
                    found.append((node.lineno, f"{owner}.{node.attr}"))
    return sorted(found)


def test_no_module_reaches_another_modules_private_names() -> None:
    known = set(MODULES) | {NATIVE}
    reaches = [f"{p.relative_to(ROOT).as_posix()}:{line}: {name}" for m, p in MODULES.items()
               for line, name in private_reaches(p, m, known)]
    assert reaches == []


def test_the_private_name_check_catches_an_offender(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    for name, text in {
        "__init__.py": "",
        "_sub.py": "X = 1\n",
        "a.py": "__version__ = '1'\n_hidden = 1\n\n\ndef _helper():\n    return 2\n",
        "b.py": ("import os\n"
                 "import pkg.a\n"
                 "import pkg.a as _a\n"
                 "from pkg import _sub, a\n"
                 "from pkg.a import __version__, _hidden\n"
                 "from . import a as aa\n"
                 "\n"
                 "\n"
                 "class C:\n"
                 "    _own = 1\n"
                 "\n"
                 "\n"
                 "def f(c: C):\n"
                 "    os._exit(c._own + _sub.X + _a._helper() + pkg.a._helper() + aa._helper())\n"),
    }.items():
        (tmp_path / "pkg" / name).write_text(text, encoding="utf-8")
    found = modules(tmp_path, ("pkg",))
    assert private_reaches(found["pkg.b"], "pkg.b", set(found)) == [
        (5, "pkg.a._hidden"), (14, "pkg.a._helper"), (14, "pkg.a._helper"), (14, "pkg.a._helper")]
    assert private_reaches(found["pkg.a"], "pkg.a", set(found)) == []
