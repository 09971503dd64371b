"""Every Markdown file the repository cites exists: a reader can follow each citation in the code comments, the
READMEs and the notes in ``docs/``.

A citation is a path ending in the Markdown suffix, in backticks, a link target or plain text; it must resolve
relative to the repository root or to the citing file's folder. URLs are not checked. A cited anchor must name a
heading of its file, and the developers' layout listing must name every module of ``dart_core/`` and ``dart_arena/``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCANNED_DIRS = ("dart_core", "dart_arena", "native", "scripts", "launch", "tests", "docs")
SCANNED_TOP = ("README.md", "app.py")
SUFFIXES = {".py", ".md", ".cpp", ".hpp", ".h", ".sh"}
SKIPPED_PARTS = {"__pycache__", "artifacts"}

URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://\S+")
# A path-like token ending in the Markdown suffix: optional leading slash or ./ ../ steps, then word characters,
# dots, slashes and dashes. The look-behind keeps it from starting inside a longer token.
MD_REF = re.compile(r"(?<![\w./~-])(/?(?:\.{1,2}/)*[\w-][\w./-]*\.md)\b")


def scanned_files() -> list[Path]:
    files = [ROOT / name for name in SCANNED_TOP if (ROOT / name).is_file()]
    for folder in SCANNED_DIRS:
        base = ROOT / folder
        if not base.is_dir():
            continue
        files += sorted(p for p in base.rglob("*") if p.is_file() and p.suffix in SUFFIXES
                        and not SKIPPED_PARTS & set(p.relative_to(ROOT).parts))
    return files


def md_references(text: str) -> list[tuple[int, str]]:
    """(line number, cited path) for every Markdown path in ``text``, URLs left out."""
    found = []
    for lineno, line in enumerate(text.splitlines(), 1):
        for m in MD_REF.finditer(URL.sub(" ", line)):
            found.append((lineno, m.group(1)))
    return found


def resolves(ref: str, citing: Path) -> bool:
    if ref.startswith("/"):
        return False  # a machine-local absolute path: not part of the repository
    return any((base / ref).is_file() for base in (ROOT, citing.parent))


def test_reference_pattern():
    suffix = ".md"  # built here so that this file cites nothing itself
    text = "\n".join([
        f"see ``docs/tree-search{suffix}`` and [x](../native/README{suffix}#section)",
        f"https://example.org/a/b{suffix} and (docs/formats{suffix}).",
        f"a glob *{suffix}, a mention of {suffix} files, f'{{name}}{suffix}', notes{suffix}x",
        f"/abs/path/NOTES{suffix}",
    ])
    assert md_references(text) == [
        (1, f"docs/tree-search{suffix}"),
        (1, f"../native/README{suffix}"),
        (2, f"docs/formats{suffix}"),
        (4, f"/abs/path/NOTES{suffix}"),
    ]
    here = ROOT / "docs" / f"README{suffix}"
    assert resolves(f"architecture{suffix}", here)  # relative to the citing file's folder
    assert resolves(f"docs/architecture{suffix}", here)  # relative to the repository root
    assert not resolves(f"docs/nowhere{suffix}", here)
    assert not resolves(f"/abs/path/NOTES{suffix}", here)


def test_every_cited_markdown_file_exists():
    files = scanned_files()
    assert any(p.parent.name == "docs" for p in files), "docs/ was not scanned"
    cited, missing = 0, []
    for path in files:
        for lineno, ref in md_references(path.read_text(encoding="utf-8", errors="replace")):
            cited += 1
            if not resolves(ref, path):
                missing.append(f"{path.relative_to(ROOT)}:{lineno}: {ref}")
    assert cited > 0
    assert not missing, "cited Markdown files that do not exist:\n" + "\n".join(missing)


# ------------------------------------------------------------------------------------------ the docs stay true
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "native" / "README.md"]
# a file (with a suffix) or a folder (a trailing slash) under one of the code folders; globs and templates skipped
CODE_PATH = re.compile(r"(?<![\w./-])((?:dart_core|dart_arena|scripts|launch|tests)/[\w./*{}<>,-]*(?:\.\w+|/))")
PYTHON_M = re.compile(r"python -m ((?:dart_core|dart_arena)[\w.]*)")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_every_cited_code_path_exists() -> None:
    """``dart_core/engine/loop.py``, ``dart_arena/ui.py``, ``dart_core/preflight/``: what the docs name is there."""
    missing = []
    for doc in DOCS:
        for lineno, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            for ref in CODE_PATH.findall(URL.sub(" ", line)):
                ref = ref.rstrip(".")
                if any(c in ref for c in "*{}<>,") or ref.startswith("tests/artifacts"):  # a glob; made by the tests
                    continue
                if not (ROOT / ref).exists():
                    missing.append(f"{doc.relative_to(ROOT)}:{lineno}: {ref}")
    assert not missing, "cited paths that do not exist:\n" + "\n".join(missing)


def test_every_link_resolves() -> None:
    """Every relative Markdown link of the README and the notes points at a file of the repository."""
    broken = []
    for doc in DOCS:
        for lineno, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            for target in LINK.findall(line):
                if URL.match(target) or target.startswith("mailto:"):
                    continue
                if not (doc.parent / target).exists():
                    broken.append(f"{doc.relative_to(ROOT)}:{lineno}: {target}")
    assert not broken, "links to nowhere:\n" + "\n".join(broken)


def test_every_documented_command_line_exists() -> None:
    """Each ``python -m <module>`` the docs show is a module that runs (a package's ``__main__`` or a module)."""
    import importlib.util

    missing = []
    for doc in DOCS:
        for module in sorted(set(PYTHON_M.findall(doc.read_text(encoding="utf-8")))):
            module = module.rstrip(".")
            spec = importlib.util.find_spec(module)
            if spec is None or (spec.submodule_search_locations is not None
                                and importlib.util.find_spec(f"{module}.__main__") is None):
                missing.append(f"{doc.relative_to(ROOT)}: python -m {module}")
    assert not missing, "documented command lines with no module:\n" + "\n".join(missing)


def test_the_readme_python_examples_import() -> None:
    """The names the README's Python examples import exist where it says (the examples themselves need a
    download: their imports are what a refactoring can break)."""
    import importlib

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, "the README shows no Python"
    imports = [m for block in blocks for m in re.findall(r"^from (\S+) import (.+)$", block, flags=re.M)]
    assert any(module == "dart_core" for module, _ in imports)
    for module, names in imports:
        mod = importlib.import_module(module)
        for name in (n.strip() for n in names.split(",")):
            assert hasattr(mod, name), f"README: from {module} import {name}"


# ------------------------------------------------------------------- citations in code: paths and module names
CODE_FILES = sorted({*(p for p in scanned_files() if p.suffix in {".py", ".sh", ".cpp", ".hpp", ".h"}),
                     ROOT / "pyproject.toml", ROOT / ".ci" / "run"} - {Path(__file__).resolve()})
ANY_PATH = re.compile(
    r"(?<![\w./-])((?:dart_core|dart_arena|scripts|launch|tests|native|assets)/[\w./*{}<>,-]*(?:\.\w+|/))")
# ``dart_core.loading.atomic:atomic_output``, ``dart_core.engine.loop.stream``,
# ``dart_arena.model_client.ProcessEngine.health``
LOGGER = re.compile(r"getLogger\(\s*[\"']([\w.]+)[\"']")
DOTTED = re.compile(r"(?<![\w./-])((?:dart_core|dart_arena)(?:\.[A-Za-z_]\w*)+)(?::([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*))?")
NATIVE = "_native"
FILE_SUFFIXES = {"md", "py", "json", "jsonl", "sh", "toml", "html", "css", "txt", "log", "whl", "gguf", "safetensors",
                 "ngram", "trie", "png", "cpp", "hpp"}


def cited_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, text) where ``path`` may cite something: in Python its comments and strings (code is checked
    by running it), elsewhere every line."""
    import io
    import tokenize

    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix != ".py":
        return list(enumerate(text.splitlines(), 1))
    out: list[tuple[int, str]] = []
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type in (tokenize.COMMENT, tokenize.STRING) or getattr(tokenize, "FSTRING_MIDDLE", -1) == tok.type:
            out += [(tok.start[0] + i, line) for i, line in enumerate(tok.string.splitlines())]
    return out


def module_file(dotted: str) -> Path | None:
    """The source file of the module ``dotted`` names (``dart_arena`` is the package, ``app.py`` the Spaces file)."""
    base = ROOT.joinpath(*dotted.split("."))
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    return base.with_suffix(".py") if base.with_suffix(".py").is_file() else None


def top_level_names(tree: Any) -> dict[str, Any]:
    """Every name a module (or a class body) defines, with its node: functions, classes, assignments, imports,
    and, in a module with a ``__getattr__``, the names it exports lazily (the strings of its top-level maps)."""
    import ast

    names: dict[str, Any] = {}
    lazy = any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in tree.body)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        names[n.id] = node
            if lazy and isinstance(node.value, ast.Dict):
                for n in ast.walk(node.value):
                    if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.isidentifier():
                        names.setdefault(n.value, node)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names[(alias.asname or alias.name).split(".")[0]] = node
        elif isinstance(node, (ast.If, ast.Try)):
            names.update(top_level_names(node))
    return names


def dotted_problem(ref: str, attrs: str | None) -> str | None:
    """Why ``ref`` (``module.name…``, or ``module`` with ``attrs`` after a colon) names nothing, else None."""
    import ast

    parts = ref.split(".")
    if parts[-1] in FILE_SUFFIXES:  # a file name: ``app.py``, ``docs/app.md``
        return None
    if parts[:2] == ["dart_core", NATIVE]:  # compiled from native/ by the build: not a source file
        return None if (ROOT / "native" / "python" / "module.cpp").is_file() else "no native core source"
    for cut in range(len(parts), 0, -1):
        path = module_file(".".join(parts[:cut]))
        if path is not None:
            break
    else:
        return "no such module"
    chain = parts[cut:] + (attrs.split(".") if attrs else [])
    scope: Any = ast.parse(path.read_text(encoding="utf-8"))
    for i, name in enumerate(chain):
        if name.startswith("__") and name.endswith("__"):
            return None
        names = top_level_names(scope)
        if name not in names:
            if i == 0 and module_file(".".join([*parts[:cut], name])) is not None:  # a submodule
                return None
            where = ".".join(parts[:cut] + chain[:i])
            return f"{where} has no {name}"
        scope = names[name]
        if not isinstance(scope, ast.ClassDef):  # an instance attribute from here on: not checked
            return None
    return None


def test_every_module_name_cited_in_code_and_docs_exists() -> None:
    """``dart_core.loading.atomic:atomic_output``, ``dart_arena.model_client.ProcessEngine.health``: each module and
    name a doc, docstring or comment cites is defined where it says (a rename leaves no citation behind). A
    logger's name (``getLogger("dart_arena.app")``: the app's log lines, under the ``dart_arena`` logger) names no
    module."""
    missing = []
    for path in [*DOCS, *CODE_FILES]:
        loggers = set(LOGGER.findall(path.read_text(encoding="utf-8", errors="replace")))
        for lineno, line in cited_lines(path):
            for ref, attrs in DOTTED.findall(URL.sub(" ", line)):
                if ref in loggers:
                    continue
                problem = dotted_problem(ref.rstrip("."), attrs or None)
                if problem is not None:
                    missing.append(f"{path.relative_to(ROOT)}:{lineno}: {ref}{':' + attrs if attrs else ''} "
                                   f"({problem})")
    assert not missing, "cited modules and names that do not exist:\n" + "\n".join(missing)


def test_every_path_cited_in_code_exists() -> None:
    """Docstrings and comments cite files as the docs do (``dart_core/loading/atomic.py``): each is there."""
    missing = []
    for path in CODE_FILES:
        for lineno, line in cited_lines(path):
            for ref in ANY_PATH.findall(URL.sub(" ", line)):
                ref = ref.rstrip(".")
                if any(c in ref for c in "*{}<>,") or ref.startswith("tests/artifacts"):
                    continue
                if not (ROOT / ref).exists() and not attribute_of_a_file(ref):
                    missing.append(f"{path.relative_to(ROOT)}:{lineno}: {ref}")
    assert not missing, "cited paths that do not exist:\n" + "\n".join(missing)


def attribute_of_a_file(ref: str) -> bool:
    """``tests/helpers_app.running_app``: a name in a Python file cited by its path."""
    import ast

    base, _, name = ref.rpartition(".")
    source = (ROOT / base).with_suffix(".py")
    return bool(base) and source.is_file() and name in top_level_names(ast.parse(source.read_text(encoding="utf-8")))


def test_a_citation_of_nothing_is_caught() -> None:
    """The checks can fail: a made-up module, name, method and path are each reported; real ones are not."""
    assert dotted_problem("dart_core.loading.atomic", "atomic_output") is None
    assert dotted_problem("dart_core.engine.loop.stream", None) is None
    assert dotted_problem("dart_arena.model_client.ProcessEngine.health", None) is None
    assert dotted_problem("dart_core.load_arena", None) is None  # exported lazily by the package
    assert dotted_problem("dart_core.ngram.store", "_atomic_output") == "dart_core.ngram.store has no _atomic_output"
    assert dotted_problem("dart_core.packaged", None) == "dart_core has no packaged"
    assert dotted_problem("dart_core.options", "no_such_option") == "dart_core.options has no no_such_option"
    assert dotted_problem("dart_core.options.app_threads", None) is None  # a lazy export
    assert "ProcessEngine has no heal" in (dotted_problem("dart_arena.model_client.ProcessEngine.heal", None) or "")
    # a logger's name is no module (skipped where the file names it in a getLogger call, nowhere else)
    assert LOGGER.findall('log = logging.getLogger("dart_arena.app")') == ["dart_arena.app"]
    assert dotted_problem("dart_arena.app", None) == "dart_arena has no app"
    assert ANY_PATH.findall("see dart_core/packaged.py") == ["dart_core/packaged.py"]
    assert not (ROOT / "dart_core/packaged.py").exists() and not attribute_of_a_file("dart_core/packaged.py")
    assert attribute_of_a_file("tests/helpers_app.running_app") and not attribute_of_a_file("tests/helpers_app.nope")


# ------------------------------------------------------------ anchors, and the developers' listing of modules
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^#{1,6} +(.+)$")
MD_ANCHOR = re.compile(r"(?<![\w./~-])((?:\.{1,2}/)*[\w-][\w./-]*\.md)#([\w-]+)")
LOCAL_ANCHOR = re.compile(r"\]\(#([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but ``-`` and ``_`` dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(doc: Path) -> set[str]:
    """The anchors of ``doc``'s headings, code blocks left out (a repeated heading's get ``-1``, ``-2``, …)."""
    counts: dict[str, int] = {}
    out, fenced = set(), False
    for line in doc.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and (m := HEADING.match(line)):
            base = slug(m.group(1))
            out.add(f"{base}-{counts[base]}" if base in counts else base)
            counts[base] = counts.get(base, 0) + 1
    return out


def anchor_problems(path: Path, lines: list[tuple[int, str]]) -> list[str]:
    """Each cited anchor (``docs/engine.md#cpu-linear-kernels``; in a note, ``](#anchor)`` too) in ``lines`` of
    ``path`` whose file has no such heading. A file that is not there is left to the checks above."""
    found = []
    for lineno, line in lines:
        line = URL.sub(" ", line)
        refs = [(ROOT / ref if (ROOT / ref).is_file() else path.parent / ref, a) for ref, a in MD_ANCHOR.findall(line)]
        refs += [(path, a) for a in LOCAL_ANCHOR.findall(line)] if path.suffix == ".md" else []
        found += [f"{path.relative_to(ROOT)}:{lineno}: {doc.resolve().relative_to(ROOT)}#{a}" for doc, a in refs
                  if doc.is_file() and a not in anchors(doc)]
    return found


def test_every_cited_anchor_is_a_heading() -> None:
    """``docs/benchmarks.md#measurements-behind-design-choices`` in a comment, ``](#figures)`` in a note: each names
    a heading of its file, so a renamed section leaves no link behind."""
    problems = []
    for doc in DOCS:
        problems += anchor_problems(doc, list(enumerate(doc.read_text(encoding="utf-8").splitlines(), 1)))
    for path in CODE_FILES:
        problems += anchor_problems(path, cited_lines(path))
    assert not problems, "anchors with no heading:\n" + "\n".join(problems)


DEVELOPERS = ROOT / "docs/developers.md"
# one item of the layout listing: "  - `dart_core/engine/`: `tree.py` (...), ..." and its indented continuation lines
LAYOUT_ENTRY = re.compile(r"^  - `((?:dart_core|dart_arena)/(?:\w+/)*)`(.*(?:\n    .*)*)", re.M)


def python_modules() -> dict[str, list[str]]:
    """Folder (``dart_core/engine/``) → the file names of its Python modules, ``__init__.py`` left out."""
    out: dict[str, list[str]] = {}
    for base in ("dart_core", "dart_arena"):
        for path in sorted((ROOT / base).rglob("*.py")):
            if path.name != "__init__.py" and "__pycache__" not in path.parts:
                out.setdefault(path.parent.relative_to(ROOT).as_posix() + "/", []).append(path.name)
    return out


def unlisted_modules(doc: str, modules: dict[str, list[str]]) -> list[str]:
    """The modules that ``doc``'s layout listing (the items under "- **Layout:**") does not name in their own
    folder's item: a module named only under another folder counts as missing."""
    listing = doc.split("- **Layout:**", 1)[-1].split("\n- **", 1)[0]
    items = {m.group(1): m.group(2) for m in LAYOUT_ENTRY.finditer(listing)}
    return [folder + name for folder, names in modules.items() for name in names
            if not re.search(rf"(?<![\w.]){re.escape(name)}(?!\w)", items.get(folder, ""))]


def test_the_developers_layout_lists_every_module() -> None:
    """docs/developers.md's layout names every module of ``dart_core/`` and ``dart_arena/``, each in its folder's item:
    a module added without its line there fails here."""
    missing = unlisted_modules(DEVELOPERS.read_text(encoding="utf-8"), python_modules())
    assert not missing, "modules missing from docs/developers.md's layout:\n" + "\n".join(missing)


def test_the_anchor_and_layout_checks_can_fail() -> None:
    """Each check reports what it is for: a made-up anchor, a module with no line, one listed under another folder
    only, a folder with no item; real anchors and modules pass."""
    assert slug("CPU linear kernels (`--cpu-linear`)") == "cpu-linear-kernels---cpu-linear"
    assert "measurements-behind-design-choices" in anchors(ROOT / "docs/benchmarks.md")
    note = ROOT / "docs/benchmarks.md"
    line = [(3, "docs/benchmarks.md#measurements-behind-design-choice, ../README.md#documentation, ](#nowhere), "
                "](#soak-memory-over-many-visitors)")]
    assert anchor_problems(note, line) == [
        "docs/benchmarks.md:3: docs/benchmarks.md#measurements-behind-design-choice",
        "docs/benchmarks.md:3: docs/benchmarks.md#nowhere"]
    soak = "docs/benchmarks.md#soak-memory-over-many-visitors"
    assert anchor_problems(ROOT / "dart_arena" / "x.py", [(1, soak)]) == []

    doc, modules = DEVELOPERS.read_text(encoding="utf-8"), python_modules()
    assert "state.py" in modules["dart_core/engine/"] and "dart.py" in modules["dart_core/train/"]
    assert unlisted_modules(doc, {**modules, "dart_core/engine/": [*modules["dart_core/engine/"], "ghost.py"]}) \
        == ["dart_core/engine/ghost.py"]
    renamed = doc.replace("`state.py`", "`the-state`")
    assert unlisted_modules(renamed, modules) == ["dart_core/engine/state.py"]
    assert unlisted_modules(doc, {"dart_core/train/": ["registry.py"]}) == ["dart_core/train/registry.py"]
    assert unlisted_modules(doc, {"dart_arena/widgets/": ["plots.py"]}) == ["dart_arena/widgets/plots.py"]
