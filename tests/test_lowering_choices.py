"""benchmarks/lowering_choices.py: each row times the program it says it times.

The timings are the script's business; what can fail here is a row whose two programs no longer
compute the same thing, a CPU lowering that no longer applies to the shape its row measures it
on (then the design doc compares a program with itself), or a script that no longer runs.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from jax_gather import _cpu
from tests.programs import benchmark_script

SCALE = 4  # every dim divided by 4: short rows of 64 stay 16, lookups of 64 ids stay short


lowering_choices = benchmark_script("lowering_choices")
CHOICES = lowering_choices.choices()


def test_every_cpu_lowering_is_measured():
    assert {name for c in CHOICES for name in c.without} == set(_cpu.LOWERINGS)


@pytest.mark.slow
@pytest.mark.parametrize("choice", CHOICES, ids=[f"{c.name[:30]}|{c.case}|{c.what}" for c in CHOICES])
def test_each_row_agrees_and_times(choice, lowerings_on_any_cpu, request):
    if "rows_pinned_by_a_clamp" in choice.without:  # rows of 12 at this scale
        request.getfixturevalue("clamp_on_any_cpu")
    if "fill_pinned_instead_of_rows" in choice.without:  # JAX 0.11 and later
        request.getfixturevalue("fill_pin_on_any_jax")
    if "fill_pinned_for_elements" in choice.without:  # JAX 0.10 with AVX2 or AVX-512
        request.getfixturevalue("element_pin_on_any_cpu")
    if "one_slice_fill_of_pinned_bits" in choice.without:  # where bfloat16's bits are pinned
        request.getfixturevalue("bits_pinned_on_any_jax")
    # Rows of 3 would be of 1, and 129 column ids a short lookup.
    whole = (lowering_choices.INT4_PAIRS.name, lowering_choices.FEW_COLUMN_IDS.name)
    scale = 1 if choice.case in whole else SCALE
    row = lowering_choices.run_choice(choice, rounds=1, reps=1, scale=scale)
    assert (row["choice"], row["case"], row["what"]) == (choice.name, choice.case, choice.what)
    for key in ("with_ms", "without_ms", "without_over_with", "aa"):
        assert np.isfinite(row[key]) and row[key] > 0, (key, row)
    assert row["verdict"] in ("pays", "level", "costs")


def test_a_broken_alternative_is_caught():
    generic = next(c for c in CHOICES if not c.without)
    broken = dataclasses.replace(generic, alternative=lambda d, i: -generic.alternative(d, i))
    with pytest.raises(AssertionError):
        lowering_choices.run_choice(broken, rounds=1, reps=1, scale=16)


def test_a_lowering_that_does_not_apply_is_caught():
    rows = next(c for c in CHOICES if c.without == ("short_rows_in_bytes",))
    with pytest.raises(ValueError, match="does not apply"):
        lowering_choices.run_choice(rows, rounds=1, reps=1, scale=64)  # rows of 1 element


def test_the_verdict_compares_with_the_a_a_interval():
    verdict = lowering_choices.verdict
    assert verdict((1.3, 1.5, 0.9), (0.9, 1.1, 0.9)) == "pays"
    assert verdict((1.05, 1.2, 0.9), (0.9, 1.1, 0.9)) == "level"  # overlaps the A/A band
    assert verdict((0.7, 0.8, 0.9), (0.9, 1.1, 0.9)) == "costs"
    assert verdict((1.02, 1.05, 0.9), (0.8, 1.01, 0.9)) == "pays"
    assert verdict((0.95, 0.99, 0.9), (0.8, 0.9, 0.9)) == "level"  # below the band, not below 1.0


def test_main_writes_the_rows_it_prints(tmp_path, capsys):
    out = tmp_path / "choices.json"
    argv = ["--rounds", "1", "--reps", "1", "--scale", str(SCALE), "--no-tune-allocator", "--json", str(out)]
    assert lowering_choices.main([*argv, "--only", "moved_axis"]) == 0
    rows = json.loads(out.read_text())["rows"]
    expected = [(c.name, c.case) for c in CHOICES if "moved_axis" in c.name]
    assert [(r["choice"], r["case"]) for r in rows] == expected and expected
    assert capsys.readouterr().out.count("\n") == len(expected) + 1


def test_collectives_run_on_one_device():
    # On one device there is nothing to partition; the sharding tests cover eight.
    rows = lowering_choices.collectives()
    assert len(rows) == 4
    assert all(r["chosen"] == r["alternative"] == [] for r in rows)
