"""One line per stage of a long start (fetch, convert, load, kernels, warm-up), each with its time.

Why: read in a log (a Space's log, ``| tee``, a service manager), nested progress bars — ours around
transformers' own — wrote escape sequences and dozens of repeated half lines. A stage is one line there, printed
when it ends; in a terminal the line starts when the stage does and gets its time when it ends, so a long stage
never looks like a hang. The libraries' own bars are held off meanwhile (the Hub's download bars stay in a
terminal, where they draw cleanly).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TextIO

PREFIX = "[dart-arena]"


@dataclass
class StageLine:
    """What the stage's line says; the stage may add what it found out (``detail``) before the line ends."""

    name: str
    what: str
    detail: str = ""

    def text(self, seconds: float) -> str:
        detail = f"; {self.detail}" if self.detail else ""
        return f"{PREFIX} {self.name}: {self.what}{detail} ({seconds:.1f} s)"


def say(message: str, stream: TextIO | None = None) -> None:
    """A line of its own, not a stage (a note, a warning)."""
    out = stream or sys.stderr
    out.write(f"{PREFIX} {message}\n")
    out.flush()


@contextmanager
def stage(name: str, what: str, *, enabled: bool = True, stream: TextIO | None = None) -> Iterator[StageLine]:
    """The stage ``name`` (``what`` it does) as one line with its time; on failure the line says so, so that an
    error printed next starts a line of its own."""
    line = StageLine(name, what)
    if not enabled:
        yield line
        return
    out = stream or sys.stderr
    tty = bool(getattr(out, "isatty", lambda: False)())
    if tty:
        out.write(f"{PREFIX} {name}: {what} …")
        out.flush()
    t0 = time.perf_counter()
    try:
        with library_bars_off(keep_downloads=tty):
            yield line
    except BaseException:
        seconds = time.perf_counter() - t0
        out.write(f" failed after {seconds:.1f} s\n" if tty else f"{PREFIX} {name}: {what}: failed after "
                  f"{seconds:.1f} s\n")
        out.flush()
        raise
    seconds = time.perf_counter() - t0
    if tty:  # the line began with the stage: only its end is left to write
        out.write(f"{'; ' + line.detail if line.detail else ''} ({seconds:.1f} s)\n")
    else:
        out.write(line.text(seconds) + "\n")
    out.flush()


@contextmanager
def library_bars_off(*, keep_downloads: bool = False) -> Iterator[None]:
    """transformers' progress bars off (and the Hub's, unless ``keep_downloads``), as they were after."""
    restore: list[object] = []
    try:
        from transformers.utils import logging as tf_logging

        if tf_logging.is_progress_bar_enabled():
            tf_logging.disable_progress_bar()
            restore.append(tf_logging.enable_progress_bar)
    except ImportError:
        pass
    if not keep_downloads:
        from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

        if not are_progress_bars_disabled():
            disable_progress_bars()
            restore.append(enable_progress_bars)
    try:
        yield
    finally:
        for undo in restore:
            undo()  # type: ignore[operator]
