"""benchmarks/checked_eager_breakdown.py: every row runs and prints, and the library's call is
left as it was (its verdict's memory restored, its signature's call made anew by the next call).

What can fail here is a script that no longer runs against the library's internals it patches;
the timings are the script's business."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import jax.numpy as jnp
import numpy as np

import jax_gather
from jax_gather import _eager

_PATH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "checked_eager_breakdown.py"


def _load():
    spec = importlib.util.spec_from_file_location("checked_eager_breakdown", _PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_every_row_runs_and_the_library_is_left_as_it_was(capsys):
    real = _eager._host_memory_of
    assert _load().main(["--rounds", "1"]) == 0
    out = capsys.readouterr().out
    for row in ("jnp.take", "one program, waited for", "pinned host verdict", "checkify + err.throw()"):
        assert row in out
    assert out.count("verdict in device memory") == 2
    assert _eager._host_memory_of is real
    _eager.clear()
    with np.testing.assert_raises(IndexError):
        jax_gather.gather(jnp.arange(3.0), jnp.asarray([3]))
