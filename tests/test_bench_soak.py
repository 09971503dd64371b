"""The soak benchmark's own logic (``python -m dart_core.bench soak``) without running the app: reading /proc,
where it samples, and its verdict."""

from __future__ import annotations

import os

import pytest

from dart_core.bench.soak import (
    BASE_RACE,
    Sample,
    engine_pids,
    parent_pid,
    rss,
    sample_points,
    verdict,
    vmrss_bytes,
)

MB = 1_000_000


def test_vmrss_is_read_in_bytes() -> None:
    status = "Name:\tpython\nVmPeak:\t  900000 kB\nVmRSS:\t  563412 kB\nThreads:\t7\n"
    assert vmrss_bytes(status) == 563412 * 1024
    with pytest.raises(ValueError, match="no VmRSS"):
        vmrss_bytes("Name:\tkthreadd\nState:\tS (sleeping)\n")


def test_parent_pid_survives_a_name_with_spaces_and_parentheses() -> None:
    assert parent_pid("4242 (python -m (app)) S 4100 4242 4100 0 -1") == 4100


def test_this_process_is_read_from_proc() -> None:
    if not os.path.isfile("/proc/self/status"):
        pytest.skip("no /proc")
    assert rss(os.getpid()) > 1_000_000
    assert rss(2**22 + 12345) == 0  # gone: no error
    assert os.getpid() in engine_pids(os.getppid())  # a child of our parent, as the engine is the app's


def test_samples_include_race_0_the_base_race_and_the_last() -> None:
    assert sample_points(300, 25) == list(range(0, 301, 25))
    assert sample_points(120, 40) == [0, 40, BASE_RACE, 80, 120]
    assert sample_points(30, 25) == [0, 25, 30]  # too few races for the base race


def test_verdict_compares_the_last_race_with_race_50() -> None:
    base = Sample(BASE_RACE, 400 * MB, 500 * MB)
    flat = [Sample(0, 350 * MB, 450 * MB), base, Sample(300, 420 * MB, 504 * MB)]
    ok, line = verdict(flat)
    assert ok is True and line.startswith("PASS") and "+24.0 MB" in line and "server +20.0, engine +4.0" in line
    grown = [*flat[:2], Sample(300, 430 * MB, 500 * MB)]
    ok, line = verdict(grown)
    assert ok is False and line.startswith("FAIL") and "+30.0 MB" in line
    assert verdict([Sample(0, 1, 1), Sample(25, 2, 2)])[0] is None
    assert verdict([Sample(0, 1, 1), base])[0] is None  # nothing after the base race
