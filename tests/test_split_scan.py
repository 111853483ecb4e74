"""benchmarks/split_scan.py: it finds a loop split where jnp's is not, and none in a cell whose
lowering keeps it whole; the timings are bench --grid's business."""

from __future__ import annotations

from jax_gather import _cpu, _cpu_client
from tests.programs import benchmark_script

split_scan = benchmark_script("split_scan")
PAIRS = {"ops": ["gather_nd pairs"], "dtypes": ["float32"], "widths": [1], "counts": [16384]}


def test_a_cell_kept_whole_is_not_listed():
    assert split_scan.scan(**PAIRS) == []


def test_a_split_loop_is_listed_where_xla_splits_loops():
    with _cpu.without("nd_fill_in_two_loops"):  # the generic fill's one loop
        rows = split_scan.scan(**PAIRS)
    assert [(r["cell"], r["mode"]) for r in rows] == (
        [("gather_nd pairs float32 w=1 n=16384", "checked")] if _cpu_client.xla_splits_loops() else []
    )


def test_a_table_of_another_length_is_scanned_as_such():
    with _cpu.without("nd_fill_in_two_loops"):
        rows = split_scan.scan(**PAIRS, tables=[100])  # pairs into 10 x 10 rows
    assert [r["cell"] for r in rows] == (
        ["gather_nd pairs float32 w=1 n=16384 t=100"] if _cpu_client.xla_splits_loops() else []
    )


def test_the_script_runs(capsys):
    assert (
        split_scan.main(["--ops", "gather axis 0", "--dtypes", "int8", "--widths", "2", "--counts", "256"])
        == 0
    )
    assert "cells" in capsys.readouterr().out
