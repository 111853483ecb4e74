"""benchmarks/lowering_choices.py: each chosen lowering and its rejected alternative agree.

The timings are the script's business; what can fail here is a pair of programs that no longer
compute the same thing (then the design note compares apples with pears) or a script that
no longer runs.
"""

from __future__ import annotations

import importlib.util
import json
import pathlib
import sys

import numpy as np
import pytest

_PATH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "lowering_choices.py"


def _load():
    spec = importlib.util.spec_from_file_location("lowering_choices", _PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


lowering_choices = _load()
CHOICES = lowering_choices.choices()


@pytest.mark.parametrize("choice", CHOICES, ids=[f"{c.name[:30]}|{c.shape}" for c in CHOICES])
def test_chosen_and_alternative_agree_and_time(choice):
    row = lowering_choices.run_choice(choice, rounds=1, reps=1, scale=16)
    assert row["choice"] == choice.name and row["shape"] == choice.shape
    for key in ("chosen_ms", "alternative_ms", "alternative_over_chosen"):
        assert np.isfinite(row[key]) and row[key] > 0, (key, row)


def test_a_broken_alternative_is_caught():
    broken = lowering_choices.Choice(
        "negated", "tiny", CHOICES[0].make, CHOICES[0].chosen, lambda d, i: -CHOICES[0].chosen(d, i)
    )
    with pytest.raises(AssertionError):
        lowering_choices.run_choice(broken, rounds=1, reps=1, scale=64)


def test_main_writes_every_row(tmp_path, capsys):
    out = tmp_path / "choices.json"
    argv = ["--rounds", "1", "--reps", "1", "--scale", "32", "--no-tune-allocator", "--json", str(out)]
    assert lowering_choices.main(argv) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["choice"], r["shape"]) for r in rows] == [(c.name, c.shape) for c in CHOICES]
    assert capsys.readouterr().out.count("\n") == len(CHOICES) + 1


def test_only_runs_the_choices_it_names(capsys):
    argv = ["--rounds", "1", "--reps", "1", "--scale", "32", "--no-tune-allocator", "--only", "unsigned"]
    assert lowering_choices.main(argv) == 0
    lines = capsys.readouterr().out.splitlines()[1:]
    assert len(lines) == sum("unsigned" in c.name for c in CHOICES) > 0
    assert all("unsigned" in line for line in lines)


def test_collectives_run_on_one_device():
    # On one device there is nothing to partition; the sharding tests cover eight.
    rows = lowering_choices.collectives()
    assert len(rows) == 4
    assert all(r["chosen"] == r["alternative"] == [] for r in rows)
