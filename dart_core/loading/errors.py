"""One error path for files that cannot be loaded. The loaders raise a :class:`LoadError` that names the file and
the problem on one line (anything else raised while loading a part is turned into one by :func:`loading`), and
every front end (the app, ``python -m dart_core.generate``, the benchmarks) reports it the same way with
:func:`report_error`: ``error: <file>: <problem>``, exit code 2, the traceback only when asked for. A server that
runs for weeks meets truncated downloads and flipped bits; its operator needs the file's name, not a traceback
into transformers or safetensors.

This module is the bottom of the package: it imports nothing of ``dart_core``. The errors written for a user
(:class:`LoadError` here, ``HubFileError``, ``BundleError``, ...) subclass :class:`UserError`, so this module can
tell them apart without knowing the layers above it; an error type that cannot subclass it (the native core's
``NgramFormatError``) is registered by its module with :func:`register_user_error`."""

from __future__ import annotations

import contextlib
import os
import re
import sys
import traceback
from collections.abc import Iterator
from typing import IO, Any

ONE_LINE_LIMIT = 400  # characters of a third party's message kept in a one-line error


class UserError(Exception):
    """An error whose message is written for the user (a file named, a fix given): shown as it is, its type left
    out. A base for the project's own errors, each of which also keeps its natural built-in base."""


_REGISTERED: list[type[BaseException]] = []


def register_user_error(cls: type[BaseException]) -> None:
    """Count ``cls`` (an error type defined where it cannot subclass :class:`UserError`, such as a native
    extension's) among the errors written for the user."""
    if cls not in _REGISTERED:
        _REGISTERED.append(cls)


class LoadError(UserError, ValueError):
    """A file (or checkpoint directory / Hub id) that could not be loaded: ``path`` names it, ``problem`` says
    what is wrong with it, both on one line. A ValueError, as the loaders' own checks were before."""

    def __init__(self, path: str | os.PathLike[str], problem: str) -> None:
        self.path = os.fspath(path)
        self.problem = one_line(problem, limit=4 * ONE_LINE_LIMIT)  # a list of tensor names may run long
        super().__init__(f"{self.path}: {self.problem}")

    def __reduce__(self) -> tuple[Any, ...]:  # picklable (a process pool, a pipe) despite two arguments
        return type(self), (self.path, self.problem)


def one_line(text: str, limit: int = ONE_LINE_LIMIT) -> str:
    """``text`` with its lines joined and runs of whitespace collapsed, cut to ``limit`` characters: multi-line
    library messages (the tokenizer's five-line remark) must not break an ``error:`` line apart."""
    flat = re.sub(r"\s+", " ", str(text)).strip()
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def project_errors() -> tuple[type[BaseException], ...]:
    """Errors whose message is written for the user: :class:`UserError` and the registered ones."""
    return (UserError, *_REGISTERED)


def exception_text(exc: BaseException) -> str:
    """One line for any exception: the message of the project's errors, of plain ValueErrors (which the project
    raises with a message written for the user) and of OSErrors (which name their file and errno), else
    ``TypeName: message``."""
    msg = one_line(str(exc))
    if isinstance(exc, (*project_errors(), OSError)) or type(exc) is ValueError:
        return msg or type(exc).__name__
    return f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__


def describe(exc: BaseException) -> tuple[str, bool]:
    """The one-line message of ``exc`` and whether it is known (a LoadError or another of the project's errors,
    whose message suffices; for others the traceback may help, see ``--debug``)."""
    return exception_text(exc), isinstance(exc, project_errors())


def as_load_error(exc: BaseException, path: str | os.PathLike[str]) -> BaseException:
    """``exc``, raised while loading ``path``, as an error that names a file: the project's errors as they are
    (they name theirs), anything else as a LoadError of ``path`` whose problem names the exception."""
    if isinstance(exc, project_errors()):
        return exc
    where = os.fspath(path)
    return LoadError(where, exception_text(exc).removeprefix(f"{where}: "))  # the path said once


@contextlib.contextmanager
def loading(path: str | os.PathLike[str]) -> Iterator[None]:
    """Turn any exception raised in the block into one that names ``path`` (see :func:`as_load_error`); the
    original stays attached as the cause, for ``--debug``."""
    try:
        yield
    except Exception as e:
        err = as_load_error(e, path)
        if err is e:
            raise
        raise err from e


def close_progress_bars() -> None:
    """Close every tqdm bar still open (ours, or one of transformers' that a failure left half drawn), so an
    ``error:`` line printed next starts on a line of its own and no bar is redrawn after it at exit."""
    try:
        from tqdm.std import tqdm
    except ImportError:
        return
    classes: list[type] = [tqdm]
    for cls in classes:
        classes.extend(cls.__subclasses__())
    for cls in classes:
        for bar in list(vars(cls).get("_instances", ())):
            with contextlib.suppress(Exception):
                bar.close()


def report_error(exc: BaseException, *, debug: bool = False, debug_flag: str | None = "--debug",
                 file: IO[str] | None = None) -> int:
    """Print ``exc`` as one ``error:`` line on stderr (after closing progress bars; the traceback before it only
    with ``debug``; for an unknown error, a hint at ``debug_flag``) and return the exit code, 2."""
    out: Any = file if file is not None else sys.stderr
    close_progress_bars()
    text, known = describe(exc)
    if debug:
        traceback.print_exception(exc, file=out)
    hint = "" if known or debug or not debug_flag else f" ({debug_flag} shows the traceback)"
    print(f"error: {text}{hint}", file=out, flush=True)
    return 2
