"""The benchmark compares equal work, runs end to end, and writes its files."""

import dataclasses
import json
import mmap
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from jax_gather import _lowering, bench, cli
from jax_gather.bench import cases, grid, heatmaps, measure, overhead, peers, report, timing


@pytest.mark.parametrize("case", bench.CASES, ids=[c.name for c in bench.CASES])
def test_every_contender_computes_the_same_result(case):
    small = case.scaled(32)
    data, indices = bench.make_inputs(small, np.random.default_rng(1))
    outputs = {name: np.asarray(call()) for name, call in peers.contenders(small, data, indices).items()}
    expected = outputs.pop("jax_gather")
    assert {"jnp", "numpy", "jax_gather[promise]"} <= set(outputs)
    assert ("openvino" in outputs) == (case.dtype != "bfloat16" and not case.vmapped)
    for name, out in outputs.items():
        np.testing.assert_array_equal(out, expected, err_msg=name)
    assert expected.shape == cases.output_shape(small, data, indices)


def test_cases_cover_the_issue_shapes():
    shapes = {(c.op, c.data_shape, c.indices_shape) for c in bench.CASES}
    assert ("gather", (50000, 512), (8192,)) in shapes
    assert ("gather_nd", (1024, 1024), (1000000, 2)) in shapes
    assert {c.dtype for c in bench.CASES} == {"float32", "bfloat16", "int8"}
    assert ("gather", (64, 1024, 64), (64, 2048)) in shapes and any(c.batch_dims for c in bench.CASES)
    assert sum(c.quick for c in bench.CASES) == 7


def test_run_case_reports_paired_ratios():
    case = bench.CASES[1].scaled(8)
    row = bench.run_case(case, rounds=2, reps=1)
    assert row["ratio"] > 0 and row["ratio_promise"] > 0 and row["checked_over_fill"] > 0
    assert row["best_peer"] in bench.PEERS
    assert set(row["median_s"]) >= {"jax_gather", "jnp", "numpy", "onnxruntime", "openvino"}
    assert row["ratio_vs_openvino"] > 0
    assert row["backward_ratio_vs_jnp"] > 0
    assert 0 < row["bandwidth_GBps"] and 0 < row["memcpy_GBps"]
    assert row["page_faults_per_call"] is None or row["page_faults_per_call"] >= 0


def test_each_timed_block_follows_untimed_calls_of_the_same_contender(monkeypatch):
    settle, log = 0.02, []
    real_time = timing.time_call

    def logged_time(call, reps):
        log.append(("timed", call.__name__, time.perf_counter()))
        return real_time(call, reps)

    def contender(name):
        def call():
            log.append(("call", name, time.perf_counter()))

        call.__name__ = name
        return call

    monkeypatch.setattr(timing, "time_call", logged_time)
    times = timing.paired_rounds({n: contender(n) for n in "abc"}, rounds=3, reps=2, settle=settle)
    assert {n: len(v) for n, v in times.items()} == {"a": 3, "b": 3, "c": 3}
    starts = [k for k, entry in enumerate(log) if entry[0] == "timed"]
    assert len(starts) == 9
    for k in starts:
        name, timed_at = log[k][1], log[k][2]
        before = [e for e in log[:k] if e[0] == "call"]
        assert before[-1][1] == name  # the contender itself ran last, not the previous one
        block = []
        for e in reversed(log[:k]):
            if e[0] == "timed" or e[1] != name:
                break
            block.append(e)
        assert timed_at - block[-1][2] >= 0.9 * settle, (name, timed_at - block[-1][2])


def test_page_faults_are_counted():
    if timing.page_faults_per_call(lambda: None, 1) is None:
        pytest.skip("no getrusage on this platform")

    def fresh_pages():  # 16 MiB of new anonymous memory, one byte written per 4 KiB page
        region = mmap.mmap(-1, 16 << 20)
        np.frombuffer(region, np.uint8)[::4096] = 1

    assert timing.page_faults_per_call(fresh_pages, 3) >= 1000
    assert timing.page_faults_per_call(lambda: None, 3) < 1000


# The bench command on one small case, once, forward only.
ONE_QUICK_CASE = ["bench", "--quick", "--only", "gather axis 1", "--rounds", "1", "--no-backward"]


def test_bench_command_writes_json_and_plot(tmp_path, capsys):
    out_json, out_png = tmp_path / "r.json", tmp_path / "r.png"
    argv = [*ONE_QUICK_CASE, "--no-tune-allocator", "--json", str(out_json), "--plot", str(out_png)]
    assert cli.main(argv) == 0
    text = capsys.readouterr().out
    assert "allocator: glibc defaults" in text and "geometric mean" in text
    assert "dispatch: JAX's default" in text
    result = json.loads(out_json.read_text())
    assert [r["case"] for r in result["rows"]] == ["gather axis 1"]
    assert out_png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_sync_dispatch_is_set_before_the_first_computation(tmp_path):
    # In a child: the setting is process-wide, and read once, when the CPU client is created.
    out_json = tmp_path / "r.json"
    script = (
        "import jax\nfrom jax_gather import cli\n"
        f"argv = {[*ONE_QUICK_CASE, '--no-tune-allocator', '--sync-dispatch', '--json', str(out_json)]!r}\n"
        "assert cli.main(argv) == 0\n"
        "print('async after:', jax.config.read('jax_cpu_enable_async_dispatch'))\n"
    )
    child = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert "dispatch: synchronous" in child.stdout and "async after: False" in child.stdout
    assert json.loads(out_json.read_text())["sync_dispatch"] is True


@pytest.mark.slow
def test_compare_allocator_measures_glibc_defaults_in_a_child(tmp_path, capsys, monkeypatch):
    from jax_gather import allocator

    # The real tuning is process-wide; the pytest process keeps glibc's defaults.
    monkeypatch.setattr(
        allocator, "tune_cpu_allocator", lambda: allocator.AllocatorTuning(True, (("M_ARENA_MAX", 1),))
    )
    out_json = tmp_path / "r.json"
    argv = [*ONE_QUICK_CASE, "--compare-allocator", "--json", str(out_json)]
    assert cli.main(argv) == 0
    text = capsys.readouterr().out
    assert "allocator: tuned (M_ARENA_MAX=1)" in text
    assert "with glibc's default allocator:" in text and "glibc ms" in text
    (row,) = json.loads(out_json.read_text())["rows"]
    assert row["case"] == "gather axis 1"
    assert row["glibc_default"]["case"] == "gather axis 1" and row["glibc_default"]["ratio"] > 0


def test_the_geometric_mean_is_of_every_row():
    def row(name, ratio):
        return {
            "case": name,
            "median_s": {"jax_gather": 1e-3, "onnxruntime": 1e-3},
            "best_peer": "onnxruntime",
            "ratio": ratio,
            "ratio_promise": ratio,
            "ratio_vs_jnp": 0.9,
            "checked_over_fill": 1.0,
            "bandwidth_GBps": 1.0,
            "memcpy_GBps": 2.0,
            "page_faults_per_call": 0,
        }

    text = report.format_table([row("a", 0.5), row("b", 2.0)])
    assert "geometric mean of ratios (jax_gather / best peer): 1.00; worst 2.00" in text


@pytest.mark.parametrize("case", overhead.CASES, ids=[c.name for c in overhead.CASES])
def test_each_overhead_row_times_two_calls_that_give_the_same_result(case):
    ours, peer = case.make()
    for mine, theirs in zip(_outputs(ours()), _outputs(peer())):
        np.testing.assert_array_equal(mine, theirs)


def _outputs(result):
    return [np.asarray(x) for x in (result if isinstance(result, (list, tuple)) else [result])]


def test_overhead_rows_and_their_table():
    rows = overhead.run(quick=True, rounds=1, reps=1, only="eager gather, clip", settle=0)
    (row,) = rows
    assert row["case"] == "eager gather, clip" and row["peer"] == "jnp.take clip"
    assert set(row["median_s"]) == {"jax_gather", "jax_gather[again]", "jnp.take clip"}
    assert row["meets_goal"] == (row["ratio"] <= overhead.EAGER)
    text = overhead.format_table(rows)
    assert text.splitlines()[2].startswith("eager gather, clip")
    assert f"{int(row['meets_goal'])} of 1 calls within their goal" in text


def test_bench_command_shows_the_overhead_section(tmp_path, capsys):
    out_json = tmp_path / "r.json"
    argv = ["bench", "--quick", "--only", "jitted gather, clip", "--rounds", "1", "--no-tune-allocator"]
    assert cli.main([*argv, "--json", str(out_json)]) == 0
    text = capsys.readouterr().out
    assert "jitted gather, clip" in text and "geometric mean" not in text  # no main-table row
    result = json.loads(out_json.read_text())
    assert result["rows"] == [] and [r["case"] for r in result["overhead"]] == ["jitted gather, clip"]
    assert cli.main([*argv, "--no-overhead"]) == 0
    assert "jitted gather, clip" not in capsys.readouterr().out


def test_median_interval_covers_the_median_as_often_as_it_says():
    # Samples of 11 and 25 from a skewed distribution whose median is known: the share of
    # intervals that contain it must match the coverage the function reports.
    rng = np.random.default_rng(0)
    median = np.log(2)  # of the standard exponential
    for n in (11, 25):
        samples = rng.exponential(size=(4000, n))
        intervals = [bench.median_interval(s) for s in samples]
        coverage = intervals[0][2]
        assert all(c == coverage for _, _, c in intervals) and coverage >= bench.CONFIDENCE
        hits = np.mean([low <= median <= high for low, high, _ in intervals])
        assert abs(hits - coverage) < 0.02, (n, hits, coverage)


def test_median_interval_of_few_rounds_is_their_range_with_its_real_coverage():
    low, high, coverage = bench.median_interval([3.0, 1.0, 2.0])
    assert (low, high) == (1.0, 3.0) and coverage == 0.75  # P(all three on one side) = 2/8
    low, high, coverage = bench.median_interval(list(range(1, 12)))  # 11 rounds
    assert (low, high) == (3, 9) and abs(coverage - (1 - 2 * 67 / 2048)) < 1e-12
    with pytest.raises(ValueError, match="median_interval: values must not be empty"):
        bench.median_interval([])


def test_run_case_times_the_same_program_twice_and_gives_intervals():
    case = bench.CASES[0].scaled(16)
    row = bench.run_case(case, rounds=3, reps=1)
    low, high, _ = row["backward_interval"]
    assert low <= row["backward_ratio_vs_jnp"] <= high
    assert len(row["rounds_s"][bench.SAME_PROGRAM]) == 3
    for ratio, interval in (("ratio", "ratio_interval"), ("same_program_ratio", "same_program_interval")):
        low, high, coverage = row[interval]
        assert low <= row[ratio] <= high and coverage == 0.75
    assert row["verdict"] in ("ahead", "level", "behind")
    assert bench.SAME_PROGRAM not in bench.PEERS


def test_the_table_says_which_shapes_are_behind_by_their_intervals():
    def row(name, ratio, interval, same_interval, backward_interval=(0.8, 0.9)):
        return {
            "case": name,
            "median_s": {"jax_gather": 1e-3, "jnp": 1e-3},
            "best_peer": "jnp",
            "ratio": ratio,
            "ratio_interval": (*interval, 0.935),
            "verdict": timing.verdict(interval),
            "ratio_promise": ratio,
            "checked_over_fill": 1.0,
            "same_program_ratio": 1.0,
            "same_program_interval": (*same_interval, 0.935),
            "bandwidth_GBps": 1.0,
            "memcpy_GBps": 2.0,
            "page_faults_per_call": 0,
            "backward_ratio_vs_jnp": 1.0,
            "backward_interval": (*backward_interval, 0.935),
        }

    text = report.format_table(
        [
            row("fast", 0.7, (0.6, 0.8), (0.9, 1.1)),
            row("even", 1.05, (0.95, 1.2), (0.97, 1.04)),
            row("slow", 1.3, (1.1, 1.4), (1.02, 1.1), (1.05, 1.2)),
        ]
    )
    assert "at 94% confidence: ahead of the best peer on 1, level on 1, behind on 1 (slow)" in text
    assert "backward against jnp's: ahead on 2, level on 0, behind on 1 (slow)" in text
    assert "told apart on 1 of 3 shapes (slow)" in text
    assert "0.95-1.20" in text.splitlines()[3]


def test_the_ratio_is_against_the_peer_fastest_over_the_rounds_not_each_rounds_fastest(monkeypatch):
    # Two tied peers whose noise alternates: the smaller of the two each round is 0.8 every
    # time, though each peer's median is 1.0 (jnp) and 1.01 (onnxruntime).
    rounds = {"jnp": [1.0, 0.8, 1.2, 0.8, 1.2], "onnxruntime": [0.8, 1.2, 0.8, 1.2, 1.01]}

    def synthetic(calls, n, reps, settle):
        return {name: rounds.get(name, [1.0] * n) if name != "numpy" else [9.0] * n for name in calls}

    monkeypatch.setattr(measure, "paired_rounds", synthetic)
    row = bench.run_case(bench.CASES[0].scaled(64), rounds=5, reps=1, backward=False)
    assert row["best_peer"] == "jnp"
    assert row["ratio"] == pytest.approx(1.0)  # median of 1/[1.0, 0.8, 1.2, 0.8, 1.2]
    assert row["ratio_vs_round_min"] == pytest.approx(1.25)  # 1 / 0.8
    assert row["verdict"] == "level"


def test_openvino_is_imported_without_its_telemetry_fork():
    """OpenVINO's import sends telemetry from a forked process unless declined; a fork in a
    multithreaded JAX process may deadlock."""
    code = (
        "import os, time\n"
        "def fork(): raise AssertionError('forked')\n"
        "os.fork = fork\n"
        "from jax_gather import bench\n"
        "bench.import_openvino()\n"
        "time.sleep(1)\n"  # the event is sent from a thread
        "assert 'CI' not in os.environ\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0 and "forked" not in done.stderr, done.stderr[-2000:]


# ---- bench --grid ------------------------------------------------------------------------------


@pytest.mark.parametrize("op", list(grid.OPS))
@pytest.mark.parametrize("dtype", ["float32", "int4"])  # bfloat16 and int8 take float32's calls
def test_grid_cells_compare_equal_work(op, dtype):
    # Widths and counts that take every shape branch: fewer ids than a row, more, odd counts.
    import jax

    for width, count, table in [
        (1, 1, grid.TABLE),
        (4, 129, grid.TABLE),
        (64, 16, grid.TABLE),
        (4, 129, 1),
        (3, 40, 70000),
    ]:
        cell = grid.Cell(op, dtype, width, count, table)
        d, i = grid.make_inputs(cell)
        assert bool((np.asarray(i) < 0).any()) or count < 100  # negative indices are drawn
        for mode in grid.MODES:
            ours = np.asarray(jax.jit(grid.ours_call(cell, mode))(d, i))
            theirs = np.asarray(jax.jit(grid.jnp_call(cell, mode))(d, i))
            peers = [theirs]
            if op in ("gather axis 0", "gather axis 1"):  # where the eager call is jnp.take's
                peers.append(np.asarray(grid.jnp_call(cell, mode, eager=True)(d, i)))
            assert grid._plan(cell).output_shape == ours.shape
            for peer in peers:
                np.testing.assert_array_equal(ours.view(np.uint8), peer.view(np.uint8), f"{cell} {mode}")


@pytest.mark.parametrize("dtype", grid.RANDOM_DTYPES)
def test_the_random_cells_dtypes_compare_equal_work(dtype):
    import jax

    for op in grid.OPS:
        cell = grid.Cell(op, dtype, 4, 129)
        d, i = grid.make_inputs(cell)
        assert np.asarray(d).dtype == grid.numpy_dtype(dtype)
        for mode in grid.MODES:
            ours = np.asarray(jax.jit(grid.ours_call(cell, mode))(d, i))
            theirs = np.asarray(jax.jit(grid.jnp_call(cell, mode))(d, i))
            np.testing.assert_array_equal(
                ours.view(np.uint8), theirs.view(np.uint8), err_msg=f"{cell} {mode}"
            )


def test_random_cells_lie_off_the_grid_and_repeat_with_their_seed():
    drawn = grid.random_cells(200, seed=3)
    assert len(drawn) == 200 and all(grid.fits(c) for c in drawn)
    assert drawn == grid.random_cells(200, seed=3) and drawn != grid.random_cells(200, seed=4)
    assert len({c.width for c in drawn} - set(grid.WIDTHS)) > 50
    assert len({c.count for c in drawn} - set(grid.COUNTS)) > 50
    assert {c.dtype for c in drawn} == set(grid.DTYPES + grid.RANDOM_DTYPES)
    assert {c.op for c in drawn} == set(grid.OPS)
    assert all(1 <= c.width <= grid.WIDTHS[-1] and 1 <= c.count <= grid.COUNTS[-1] for c in drawn)
    assert all("int8" in c.name for c in grid.random_cells(5, only="int8"))
    assert grid.random_cells(5, only="no such cell") == []


def test_random_tables_draw_the_indexed_axis_length_too():
    drawn = grid.random_cells(200, seed=3, tables=True)
    assert drawn == grid.random_cells(200, seed=3, tables=True) and all(grid.fits(c) for c in drawn)
    tables = sorted(c.table for c in drawn)
    assert tables[0] < 16 and tables[-1] > 65536 and len(set(tables)) > 100
    assert all(1 <= t <= grid.MAX_TABLE for t in tables)
    shape = lambda c: grid._shapes(c.op, c.width, c.count, c.table)[0]
    assert {shape(c)[0] for c in drawn if c.op == "gather axis 0"} <= set(tables)
    assert all(f"t={c.table}" in c.name for c in drawn if c.table != grid.TABLE)
    assert grid.cell_of(dataclasses.asdict(drawn[0])) == drawn[0]
    assert grid.cell_of({"op": "gather axis 0", "dtype": "int8", "width": 2, "count": 3}).table == grid.TABLE
    with pytest.raises(ValueError, match="--tables"):
        grid.run(tables=True)


def test_a_grid_of_one_entry_reads_one_slice_in_every_op_and_says_so_in_its_json(tmp_path):
    # --table 1: every index of every op reads the one slice (GatherElements along the last
    # axis has no table), the cells named by it.
    cells = grid.cells(quick=True, table=1)
    assert len(cells) == len(grid.cells(quick=True)) and all(c.table == 1 and "t=1" in c.name for c in cells)
    for c in cells:
        plan, shape = grid._plan(c), grid._shapes(c.op, c.width, c.count, c.table)[0]
        assert _lowering.one_slice(shape, plan) == (c.op != "gather_elements axis -1" or c.width == 1), c
    with pytest.raises(ValueError, match="--table"):
        grid.run(random=2, table=1)
    with pytest.raises(ValueError, match="--table"):
        grid.run(table=0)
    path = tmp_path / "one.json"
    argv = ["bench", "--grid", "--quick", "--table", "1", "--only", "gather_nd pairs float32 w=16 n=16 "]
    assert cli.main([*argv, "--rounds", "2", "--no-tune-allocator", "--json", str(path)]) == 0
    result = json.loads(path.read_text())
    assert result["table"] == 1 and [grid.cell_of(r).name for r in result["grid"]] == [
        "gather_nd pairs float32 w=16 n=16 t=1"
    ]


def test_grid_cells_stay_under_the_memory_cap_and_quick_is_small():
    cells = grid.cells()
    assert all(grid.fits(c) for c in cells)
    assert not grid.fits(grid.Cell("gather axis 0", "float32", 4096, 1 << 20))
    assert {c.count for c in cells} == set(grid.COUNTS) and {c.width for c in cells} == set(grid.WIDTHS)
    assert len(grid.cells(quick=True)) <= 7 * 2 * 4 * 4


def test_bench_grid_random_writes_its_draw_to_the_json(tmp_path):
    path, prefix = tmp_path / "random.json", str(tmp_path / "random")
    argv = [
        "bench",
        "--grid",
        "--random",
        "2",
        "--seed",
        "7",
        "--tables",
        "--only",
        "float32",
        "--rounds",
        "2",
    ]
    assert cli.main([*argv, "--no-tune-allocator", "--json", str(path), "--plot", prefix]) == 0
    result = json.loads(path.read_text())
    assert result["random"] == {"cells": 2, "seed": 7, "tables": True}
    cells = [grid.cell_of(r) for r in result["grid"]]
    assert cells == grid.random_cells(2, seed=7, only="float32", tables=True)
    for mode in grid.MODES:  # a scatter of the cells, which lie on no axes a heatmap could have
        assert os.path.getsize(f"{prefix}-{mode}.png") > 1000


def test_an_eager_grid_times_the_calls_unjitted_and_remeasures_them_so(tmp_path, monkeypatch):
    import jax

    jitted = []
    real_jit = jax.jit
    monkeypatch.setattr(jax, "jit", lambda f, *a, **k: jitted.append(f) or real_jit(f, *a, **k))
    path = tmp_path / "eager.json"
    argv = [
        "bench",
        "--grid",
        "--eager",
        "--quick",
        "--only",
        "gather axis 0 float32 w=16 n=16",
        "--rounds",
        "2",
    ]
    assert cli.main([*argv, "--no-tune-allocator", "--json", str(path)]) == 0
    assert not [f for f in jitted if getattr(f, "__qualname__", "").startswith(("ours_call", "jnp_call"))]
    result = json.loads(path.read_text())
    assert result["eager"] is True and [r["eager"] for r in result["grid"]] == [True]
    seen = []
    row = _level(result["grid"][0])  # one cell and mode picked, whatever two rounds measured
    monkeypatch.setattr(
        grid, "run_cell", lambda cell, rounds, settle, eager, *_, **__: seen.append(eager) or row
    )
    assert len(grid.remeasure([row], rounds=2, top=1)) == 1
    assert seen == [True]


def test_host_work_after_each_call_is_done_and_left_out_of_its_time(tmp_path, monkeypatch):
    # --host-work-us N: a busy loop of N µs after every timed call (JAX's worker threads then
    # sleep between calls, as in a program's loop), done on the calling thread, and taken out of
    # the call's time; the JSON says so, and remeasure times the cell with it again.
    timed = []
    real_rounds = grid.paired_rounds
    monkeypatch.setattr(grid, "paired_rounds", lambda *a: timed.append(real_rounds(*a)) or timed[-1])
    path = tmp_path / "work.json"
    argv = ["bench", "--grid", "--eager", "--quick", "--only", "gather axis 0 float32 w=16 n=16"]
    argv += ["--rounds", "2", "--host-work-us", "2000", "--settle-ms", "0"]
    assert cli.main([*argv, "--no-tune-allocator", "--json", str(path)]) == 0
    result = json.loads(path.read_text())
    (row,) = result["grid"]
    assert result["host_work_us"] == 2000 and row["host_work_us"] == 2000
    # Each timed call took the 2 ms of host work after it,
    assert min(timed[0]["jnp checked"]) >= 2e-3
    # none of which is in the call's time: each median is the timed calls' less the host work.
    for mode in grid.MODES:
        for who in ("ours", "jnp"):
            raw = np.median(timed[0][f"{who} {mode}"])
            assert row[f"{who}_s"][mode] == pytest.approx(raw - 2e-3, abs=1e-12), (who, mode)
    seen = []
    monkeypatch.setattr(grid, "run_cell", lambda *a, **k: seen.append(k) or row)
    grid.remeasure([_level(row)], rounds=2, top=1)
    assert seen == [{"host_work_s": 2e-3, "in_range": False}]


def _eager_grid_given(tmp_path, monkeypatch, flag, only):
    """The JSON of a quick eager grid of the one cell ``only`` with ``flag``, and the (data,
    indices) of each of the library's calls in it."""
    import jax_gather

    given = []
    real_gather = jax_gather.gather
    spy = lambda d, i, *a, **k: given.append((d, i)) or real_gather(d, i, *a, **k)
    monkeypatch.setattr(jax_gather, "gather", spy)
    path = tmp_path / "grid.json"
    argv = ["bench", "--grid", "--eager", flag, "--quick", "--only", only, "--rounds", "2"]
    assert cli.main([*argv, "--no-tune-allocator", "--json", str(path)]) == 0
    return json.loads(path.read_text()), given


def test_an_eager_grid_of_numpy_inputs_gives_both_numpy_and_remeasures_them_so(tmp_path, monkeypatch):
    result, given = _eager_grid_given(tmp_path, monkeypatch, "--numpy", "gather axis 0 int8 w=1024 n=129")
    assert result["numpy"] is True and [r["numpy"] for r in result["grid"]] == [True]
    data, ids = given[0]
    assert type(data) is np.ndarray and data.ctypes.data % 64 == 16 and data.shape == (4096, 1024)
    assert type(ids) is np.ndarray and ids.dtype == np.int64
    seen = []
    row = _level(result["grid"][0])
    monkeypatch.setattr(grid, "run_cell", lambda cell, rounds, settle, *flags, **_: seen.append(flags) or row)
    assert len(grid.remeasure([row], rounds=2, top=1)) == 1
    assert seen == [(True, False, True)]
    with pytest.raises(ValueError, match="give --eager"):
        grid.run(quick=True, numpy=True)


def test_an_in_range_grid_gives_both_indices_in_range_and_remeasures_them_so(tmp_path, monkeypatch):
    # --in-range: no negative index, to either call (the grid's default has a tenth negative:
    # drawn from the same seed, the in-range ids are those less their negatives' shift).
    result, given = _eager_grid_given(tmp_path, monkeypatch, "--in-range", "gather axis 0 int8 w=16 n=1024")
    assert result["in_range"] is True and [r["in_range"] for r in result["grid"]] == [True]
    ids = [np.asarray(i) for _, i in given]
    assert ids and all(i.min() >= 0 and i.max() < 4096 for i in ids)
    cell = grid.Cell("gather axis 0", "int8", 16, 1024)
    drawn = np.asarray(grid.make_inputs(cell)[1])
    assert (drawn < 0).any() and np.array_equal(ids[0], np.where(drawn < 0, drawn + 4096, drawn))
    seen = []
    row = _level(result["grid"][0])
    monkeypatch.setattr(grid, "run_cell", lambda *a, **k: seen.append(k["in_range"]) or row)
    assert len(grid.remeasure([row], rounds=2, top=1)) == 1
    assert seen == [True]


def test_a_grid_leaves_out_the_cells_whose_jnp_call_xla_cannot_run_and_raises_on_its_own(monkeypatch):
    import jax

    def refused(d, i):
        raise jax.errors.JaxRuntimeError("INTERNAL: Failed to materialize symbols: __truncsfhf2")

    real_jnp_call = grid.jnp_call
    broken = "gather axis 0 float32 w=16 n=16"
    monkeypatch.setattr(
        grid, "jnp_call", lambda cell, *a: refused if cell.name == broken else real_jnp_call(cell, *a)
    )
    rows = grid.run(quick=True, only="gather axis 0 float32 w=16 n=", rounds=1, settle=0)
    assert [r["count"] for r in rows] == [16, 129, 1024, 8192]
    assert rows[0][grid.PEER_FAILED] == "INTERNAL: Failed to materialize symbols: __truncsfhf2"
    assert all("checked" in r for r in rows[1:]) and "checked" not in rows[0]
    summary = grid.format_summary(rows)
    assert "grid: 3 cells" in summary and "left out: 1 cells where XLA could not run jnp's call" in summary
    assert broken not in [name for _, name, _ in grid.worst(rows)]
    monkeypatch.setattr(grid, "run_cell", lambda *a, **k: pytest.fail("a failed cell timed again"))
    assert grid.remeasure(rows[:1]) == []
    # The library's own failure is never left out.
    monkeypatch.undo()
    monkeypatch.setattr(grid, "ours_call", lambda cell, mode: refused)
    with pytest.raises(jax.errors.JaxRuntimeError):
        grid.run(quick=True, only=broken, rounds=1, settle=0)


def _level(row: dict) -> dict:
    """A grid row at jnp's speed in every mode: not slower, nor above REMEASURED_ABOVE."""
    level = dict.fromkeys(grid.MODES, 1.0) | {f"{m}_interval": [1.0, 1.0] for m in grid.MODES}
    return {**row, **level}


def test_a_backward_grid_times_the_gradients_of_float_cells_and_remeasures_them_so(tmp_path, monkeypatch):
    import jax

    differentiated = []
    real_grad = jax.grad
    monkeypatch.setattr(jax, "grad", lambda f, *a, **k: differentiated.append(f) or real_grad(f, *a, **k))
    path = tmp_path / "backward.json"
    argv = ["bench", "--grid", "--backward", "--quick", "--only", "gather axis 1 float32 w=16 n=16"]
    assert cli.main([*argv, "--rounds", "2", "--no-tune-allocator", "--json", str(path)]) == 0
    result = json.loads(path.read_text())
    assert result["backward"] is True and [r["backward"] for r in result["grid"]] == [True]
    assert len(differentiated) == 2 * len(grid.MODES) + 1  # ours and jnp's in each mode, and the A/A
    seen = []
    row = _level(result["grid"][0])  # one cell and mode picked, whatever two rounds measured
    monkeypatch.setattr(
        grid, "run_cell", lambda c, rounds, settle, _, back, *f, **k: seen.append(back) or row
    )
    assert len(grid.remeasure([row], rounds=2, top=1)) == 1
    assert seen == [True]
    assert {c.dtype for c in grid.random_cells(60, seed=1, backward=True)} == set(grid.BACKWARD_DTYPES)
    assert {c.dtype for c in grid.cells(backward=True)} == {"float32", "bfloat16"}
    with pytest.raises(ValueError, match="do not combine"):
        grid.run(quick=True, eager=True, backward=True)


def test_grid_run_reports_both_modes_against_an_a_a_band(tmp_path):
    rows = grid.run(quick=True, rounds=2, only="gather axis 0 float32 w=16 n=16")
    assert len(rows) == 1
    row = rows[0]
    for mode in grid.MODES:
        assert row[mode] > 0 and len(row[f"{mode}_interval"]) == 3
    assert row["aa"] > 0 and isinstance(grid.slower(row, "checked"), bool)
    assert "the worst ten cells" in grid.format_summary(rows)
    paths = heatmaps.plot(rows, str(tmp_path / "grid"))
    assert [os.path.basename(p) for p in paths] == ["grid-checked.png", "grid-promise_in_bounds.png"]
    assert all(os.path.getsize(p) > 1000 for p in paths)


def test_remeasure_times_the_flagged_cells_and_the_highest_again(tmp_path):
    fast, flagged = grid.Cell("gather axis 0", "float32", 16, 16), grid.Cell("gather axis 1", "int8", 16, 16)
    row = lambda cell, ratio, low: (
        dataclasses.asdict(cell)
        | {
            "aa_interval": [0.9, 1.1, 0.9],
            **dict.fromkeys(grid.MODES, ratio),
            **{f"{m}_interval": [low, ratio + 0.1, 0.9] for m in grid.MODES},
        }
    )
    rows = [row(fast, 0.5, 0.4), row(flagged, 1.5, 1.3)]
    assert [grid.slower(r, "checked") for r in rows] == [False, True]
    # Beyond the top: the medians above REMEASURED_ABOVE, flagged or not, and no other.
    picked = lambda rows: [(r["cell"][1], r["mode"]) for r in grid.remeasure(rows, rounds=2, top=0)]
    high = row(fast, 1.3, 0.5)
    assert not grid.slower(high, "checked") and high["checked"] > grid.REMEASURED_ABOVE
    assert picked([row(fast, 1.2, 0.5)]) == []
    assert picked([high]) == [("float32", "checked"), ("float32", "promise_in_bounds")]
    path = tmp_path / "grid.json"
    path.write_text(json.dumps({"grid": rows}))
    argv = ["bench", "--grid", "--remeasure", str(path), "--rounds", "2", "--no-tune-allocator"]
    assert cli.main(argv) == 0
    records = json.loads(path.read_text())["remeasured"]
    # The two flagged, then the highest medians (top 15: all four cell-modes), each once.
    assert [(r["cell"][1], r["mode"]) for r in records] == [
        ("int8", "checked"),
        ("int8", "promise_in_bounds"),
        ("float32", "checked"),
        ("float32", "promise_in_bounds"),
    ]
    for r in records:
        assert r["ratio"] > 0 and len(r["interval"]) == 3 and isinstance(r["slower"], bool)
        assert r["grid_ratio"] == (1.5 if r["cell"][1] == "int8" else 0.5)
    assert "on re-measure: " in grid.format_remeasured(records)


def test_slower_needs_the_whole_interval_past_the_a_a_band():
    row = {"checked": 1.2, "checked_interval": (1.12, 1.3, 0.9), "aa_interval": (0.95, 1.1, 0.9)}
    assert grid.slower(row, "checked")
    assert not grid.slower(row | {"aa_interval": (0.9, 1.15, 0.9)}, "checked")
    assert not grid.slower(row | {"checked": 1.04, "checked_interval": (1.02, 1.06, 0.9)}, "checked")


def test_the_machine_record_names_the_xla_flags_it_ran_under(monkeypatch):
    # A run under --xla_cpu_max_isa measures code for fewer vector extensions than the CPU has.
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_max_isa=AVX2")
    assert bench.describe_machine()["xla_flags"] == "--xla_cpu_max_isa=AVX2"


def test_the_machine_record_names_the_cpus_family_and_model(monkeypatch):
    # A virtual machine may call a Zen 3 and a Zen 4 alike "AMD EPYC"; family and model differ.
    from jax_gather.bench import machine

    fields = ("vendor_id", "AuthenticAMD"), ("cpu family", 25), ("model", 17), ("model name", "AMD EPYC")
    info = "".join(f"{k}\t: {v}\n" for k, v in fields + (("stepping", 1),))
    monkeypatch.setattr(machine, "_cpuinfo", lambda: info + "\nvendor_id\t: Other\n")
    record = machine.describe_machine()
    assert record["cpu_id"] == "AuthenticAMD family 25 model 17 stepping 1"
    assert record["processor"] == "AMD EPYC"
    monkeypatch.setattr(machine, "_cpuinfo", lambda: "")  # not Linux
    assert machine.describe_machine()["cpu_id"] == ""
