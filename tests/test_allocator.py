"""tune_cpu_allocator: idempotent, a warned no-op where it cannot act, and it removes the
fresh-page faults of repeated large allocations (counted, not timed).

mallopt changes the allocator of the whole process: the calls that reach it run in a child
process, never in pytest's; the tests that stay here make sure they cannot reach it.
"""

import ctypes
import subprocess
import sys
import textwrap

import pytest

from jax_gather import allocator
from tests.programs import stdout_with_cpu_devices

FAULTS = textwrap.dedent(
    """
    import resource, sys
    import numpy as np
    # numpy asks for huge pages on large arrays; XLA's buffers get 4 KiB pages: count those.
    core = getattr(np, "_core", None) or np.core
    core.multiarray._set_madvise_hugepage(False)
    if sys.argv[1] == "tuned":
        import jax_gather
        assert jax_gather.tune_cpu_allocator().applied
    def faults():
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    # 64 MiB: above the largest threshold glibc's adaptive mmap policy reaches (32 MiB).
    for _ in range(3):
        np.ones(16 << 20, np.float32)
    before = faults()
    for _ in range(10):
        np.ones(16 << 20, np.float32)
    print((faults() - before) / 10)
    """
)


def _faults_per_64_mib(mode):
    out = subprocess.run([sys.executable, "-c", FAULTS, mode], capture_output=True, text=True, check=True)
    return float(out.stdout)


@pytest.mark.skipif(allocator._glibc() is None, reason="the remedy exists only with glibc")
def test_tuning_removes_page_faults_of_repeated_large_allocations():
    assert _faults_per_64_mib("default") > 4000  # fresh pages (16384 of 4 KiB) on every call
    assert _faults_per_64_mib("tuned") < 50


def _no_mallopt():
    raise AssertionError("tune_cpu_allocator reached mallopt in the pytest process")


def test_idempotent():
    # In a child process: its first call sets the allocator's policy (a fresh process: no _state).
    code = """
        from jax_gather import allocator
        assert allocator._state is None
        first = allocator.tune_cpu_allocator()
        assert allocator.tune_cpu_allocator() is first
        if allocator._glibc() is not None:
            assert first.applied
            assert dict(first.settings) == {"M_ARENA_MAX": 1, "M_MMAP_MAX": 0, "M_TRIM_THRESHOLD": 1 << 30}
        print("checked")
    """
    assert stdout_with_cpu_devices(textwrap.dedent(code), devices=1).split() == ["checked"]


def test_the_docstring_example_runs_in_a_process_of_its_own():
    # Left out of the test run's doctests (conftest.py): it changes the allocator of its process.
    code = "import doctest, jax_gather.allocator as a\nr = doctest.testmod(a)\nprint(r.attempted, r.failed)"
    attempted, failed = stdout_with_cpu_devices(code, devices=1).split()
    assert int(attempted) >= 3 and failed == "0"


def test_no_op_with_a_warning_where_it_cannot_act(monkeypatch):
    monkeypatch.setattr(allocator, "_state", None)
    monkeypatch.setattr(allocator, "_glibc", lambda: None)
    with pytest.warns(RuntimeWarning, match="nothing done"):
        result = allocator.tune_cpu_allocator()
    assert not result.applied and "glibc" in result.reason
    assert allocator.tune_cpu_allocator() is result  # and it stays a no-op


@pytest.mark.parametrize("value", [1 << 31, 1 << 32, 2**70, -1])
def test_a_trim_threshold_a_c_int_cannot_hold_is_refused(monkeypatch, value):
    # Unchecked, 1 << 32 reached mallopt as 0 (its low 32 bits) and was reported as applied.
    monkeypatch.setattr(allocator, "_state", None)
    monkeypatch.setattr(allocator, "_glibc", _no_mallopt)
    with pytest.raises(
        ValueError,
        match=rf"^tune_cpu_allocator: trim_threshold must be in \[0, 2147483647\] \(mallopt takes a C int\), "
        rf"got {value}$",
    ):
        allocator.tune_cpu_allocator(trim_threshold=value)
    assert allocator._state is None  # nothing was set


@pytest.mark.parametrize("value", [1.5, "1", True, None])
def test_a_trim_threshold_that_is_not_an_integer_is_refused(monkeypatch, value):
    monkeypatch.setattr(allocator, "_state", None)
    monkeypatch.setattr(allocator, "_glibc", _no_mallopt)
    with pytest.raises(TypeError, match=r"^tune_cpu_allocator: trim_threshold must be an integer, got "):
        allocator.tune_cpu_allocator(trim_threshold=value)


@pytest.mark.skipif(allocator._glibc() is None, reason="the remedy exists only with glibc")
def test_mallopt_is_called_with_c_ints():
    mallopt = allocator._glibc().mallopt
    assert list(mallopt.argtypes) == [ctypes.c_int, ctypes.c_int] and mallopt.restype is ctypes.c_int
