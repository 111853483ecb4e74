"""benchmarks/checked_eager_breakdown.py: every row runs and prints, and the library's call is
left as it was (its verdict's memory restored, its signature's call made anew by the next call).

What can fail here is a script that no longer runs against the library's internals it patches;
the timings are the script's business."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

import jax_gather
from jax_gather import _device_checked, _eager
from tests.programs import benchmark_script


def test_every_row_runs_and_the_library_is_left_as_it_was(capsys):
    real = _device_checked._host_memory_of
    assert benchmark_script("checked_eager_breakdown").main(["--rounds", "1"]) == 0
    out = capsys.readouterr().out
    for row in ("jnp.take", "one program, waited for", "pinned host verdict", "checkify + err.throw()"):
        assert row in out
    assert out.count("verdict in device memory") == 2
    assert _device_checked._host_memory_of is real
    _eager.clear()
    with np.testing.assert_raises(IndexError):
        jax_gather.gather(jnp.arange(3.0), jnp.asarray([3]))
