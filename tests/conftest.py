"""Test-wide setup: make the shared helper modules in tests/ importable (pytest runs with importlib mode), and
the app server shared by the end-to-end and browser tests."""

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session")
def app_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator["object"]:
    """One ``python -m app --bundle assets/tiny`` (the toy: fast; started once, from a scratch cwd, always
    stopped)."""
    from helpers_app import running_app

    with running_app(tmp_path_factory.mktemp("app")) as server:
        yield server
