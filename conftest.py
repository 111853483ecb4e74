"""Collection of the library's own modules (``--doctest-modules``) where an extra is missing.

``pip install -e ".[dev]"`` installs none of the extras; a module of jax_gather that imports one
at its top (``jax_gather.backend`` imports onnx) cannot be imported there, so its doctests are
not collected, rather than ending the run with a collection error. With every extra installed
(``.[test]``) nothing is left out. The tests of tests/ skip themselves (``pytest.importorskip``).
"""

from __future__ import annotations

import importlib
import importlib.util
import pathlib

import pytest

EXTRAS = ("onnx", "onnxruntime", "openvino", "jax2onnx", "onnx_ir", "matplotlib", "nbclient", "nbformat")
HERE = pathlib.Path(__file__).resolve().parent


def _needs_a_missing_extra(module: str, missing: set[str]) -> bool:
    """Whether importing ``module`` fails for want of one of the ``missing`` packages."""
    try:
        importlib.import_module(module)
    except ImportError as error:
        cause: BaseException | None = error
        while cause is not None:  # jax_gather.backend re-raises with the install hint
            if isinstance(cause, ImportError) and (cause.name or "").split(".")[0] in missing:
                return True
            cause = cause.__cause__ or cause.__context__
        raise
    return False


def _library_modules_to_skip() -> list[str]:
    missing = {name for name in EXTRAS if importlib.util.find_spec(name) is None}
    if not missing:
        return []
    skipped = []
    for path in sorted((HERE / "jax_gather").rglob("*.py")):
        if path.name in ("__main__.py", "conftest.py"):
            continue
        parts = path.relative_to(HERE).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if _needs_a_missing_extra(module, missing):
            skipped.append(str(path.relative_to(HERE)))
    return skipped


# Its docstring's example tunes the allocator of the process that runs it: run in a child process
# of its own (tests/test_allocator.py), never in the test run's.
collect_ignore = ["jax_gather/allocator.py", *_library_modules_to_skip()]


# jax2onnx imports its ~450 plugin modules, some running JAX programs, on a process's first export
# (8-10 s): the files that export through it run on one pytest-xdist worker, which pays that once.
EXPORTING = {
    "README.md",
    "jax_gather/onnx_export.py",
    "tests/test_batch_dims.py",
    "tests/test_onnx_export.py",
}


# The files that take longest, longest first (seconds of one worker, two cores of the Zen 4: 137,
# 86, 81, 40, 36, 36, 28; every other file 26 or less). The workers take them first, so that the
# last file each takes is a short one: given in the order pytest collects them (by count of tests),
# a worker was left running the notebooks or the property tests for 20-45 s after the other
# had finished.
LONGEST_FIRST = (
    "tests/test_cpu_facts.py",
    "tests/test_cpu_lowerings.py",
    "tests/test_bench.py",
    "tests/test_notebooks.py",
    "jax2onnx",
    "tests/test_transforms.py",
    "tests/test_sharding.py",
)


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: unknown with -p no:xdist
def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class ExportingFilesOnOneWorkerLongestFirst(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            return "jax2onnx" if scope in EXPORTING else scope

        def _assign_work_unit(self, node) -> None:
            for scope in reversed(LONGEST_FIRST):  # the queue of files not yet taken, reordered
                if scope in self.workqueue:
                    self.workqueue.move_to_end(scope, last=False)
            super()._assign_work_unit(node)

    return ExportingFilesOnOneWorkerLongestFirst(config, log)
