"""benchmarks/pinned_bits.py: each row times the pinned program against the unpinned one.

What can fail here is a row whose programs no longer compute the same values, a row where the
pin no longer applies (then the design doc compares a program with itself), or a script that no
longer runs; the timings are the script's business."""

from __future__ import annotations

import jax
import ml_dtypes
import numpy as np
import pytest

from jax_gather import _fill
from tests.programs import benchmark_script

pinned_bits = benchmark_script("pinned_bits")


@pytest.mark.skipif(
    _fill.xla_cpu_keeps_bits(np.dtype(ml_dtypes.bfloat16)) or jax.default_backend() != "cpu",
    reason="XLA:CPU keeps bfloat16's bits here: nothing is pinned",
)
@pytest.mark.parametrize("name", ["gather rows of 16, 128 ids", "gather from one row of 64, 512 ids"])
def test_a_row_agrees_and_times(name):
    case = next(c for c in pinned_bits.cases() if c.name == name)
    row = pinned_bits.run_case(case, rounds=1)
    for key in ("without_us", "ratio", "aa", "over_jnp"):
        assert np.isfinite(row[key]) and row[key] > 0, (key, row)


def test_a_row_the_pin_does_not_apply_to_is_caught(monkeypatch):
    monkeypatch.setattr(_fill, "_xla_cpu_keeps_bits", lambda dtype: True)
    jax.clear_caches()  # the op's programs traced with the pin
    try:
        with pytest.raises(ValueError, match="does not apply"):
            pinned_bits.run_case(pinned_bits.cases()[0], rounds=1)
    finally:
        monkeypatch.undo()
        jax.clear_caches()
