"""Every Markdown file the repository cites exists: a reader can follow each citation in the code comments, the
READMEs and the notes in ``docs/``.

A citation is a path ending in the Markdown suffix, in backticks, a link target or plain text; it must resolve
relative to the repository root or to the citing file's folder. URLs are not checked.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCANNED_DIRS = ("dart_core", "app", "native", "scripts", "launch", "tests", "docs")
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
CODE_PATH = re.compile(r"(?<![\w./-])((?:dart_core|app|scripts|launch|tests)/[\w./*{}<>,-]*(?:\.\w+|/))")
PYTHON_M = re.compile(r"python -m ((?:dart_core|app)[\w.]*)")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_every_cited_code_path_exists() -> None:
    """``dart_core/engine/loop.py``, ``app/ui.py``, ``dart_core/preflight/``: what the docs name is there."""
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
