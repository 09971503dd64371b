"""Test-wide setup: make the shared helper modules in tests/ importable (pytest runs with importlib mode), the
launch check's fixtures, one CPU thread for the batched-against-one-row comparisons, and the app server shared by
the end-to-end and browser tests."""

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

# the launch check's fixtures (tests/test_preflight*.py): an offline published cache, a guard against any load
from helpers_preflight import fresh_log_handler, hub, no_loading, published  # noqa: F401


@pytest.fixture(scope="session")
def app_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator["object"]:
    """One ``python -m dart_arena --bundle assets/tiny`` (the toy: fast; started once, from a scratch cwd, always
    stopped)."""
    from helpers_app import running_app

    with running_app(tmp_path_factory.mktemp("app")) as server:
        yield server


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    import torch

    saved = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


@pytest.fixture
def one_thread() -> Iterator[None]:
    """One CPU thread for a test that compares a batched forward with one-row ones: several threads split a batched
    matmul differently from a one-row one, which moves float32 results by a few ulp per op (the comparison is about
    the algorithm, not the thread count); and on a busy 2-core box oversubscribed threads slow a tiny model down."""
    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def one_thread_per_module() -> Iterator[None]:
    """:func:`one_thread` for a whole module (under a module-scoped fixture that loads a model)."""
    with torch_threads(1):
        yield
