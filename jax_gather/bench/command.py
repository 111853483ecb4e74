"""The ``bench`` command (:func:`main`): its settings, its sections, and the files it writes.

The command applies :func:`jax_gather.tune_cpu_allocator` first (``--no-tune-allocator`` does
not); ``--compare-allocator`` measures every case a second time in a fresh child process with
glibc's defaults and prints both side by side. JAX's dispatch is left at its default
(asynchronous) unless ``--sync-dispatch`` is given. The table (:mod:`jax_gather.bench.measure`)
is followed by the overhead section (:mod:`jax_gather.bench.overhead`); ``--grid`` runs the
grid (:mod:`jax_gather.bench.grid`) instead of both.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from jax_gather.bench import grid, heatmaps, overhead
from jax_gather.bench.chart import plot
from jax_gather.bench.machine import describe_machine
from jax_gather.bench.measure import run
from jax_gather.bench.report import format_table, progress
from jax_gather.bench.timing import SETTLE_S


def main(args: Any) -> int:
    """The ``bench`` command; ``args`` as parsed by :mod:`jax_gather.cli`."""
    from jax_gather.allocator import tune_cpu_allocator

    if args.tune_allocator:
        tuning = tune_cpu_allocator()
        said = ", ".join(f"{k}={v}" for k, v in tuning.settings) if tuning.applied else tuning.reason
        print(
            f"allocator: tuned ({said}); --no-tune-allocator measures glibc's defaults, "
            "--compare-allocator both"
        )
    else:
        print("allocator: glibc defaults (tune_cpu_allocator not applied)")
        if getattr(args, "compare_allocator", False):
            print("--compare-allocator compares with the tuned allocator: drop --no-tune-allocator")
    sync = bool(getattr(args, "sync_dispatch", False))
    if sync:
        import jax

        # Before the first computation: the CPU client reads it when it is created.
        jax.config.update("jax_cpu_enable_async_dispatch", False)
    print(
        "dispatch: "
        + (
            "synchronous (--sync-dispatch: CPU programs run on the calling thread)"
            if sync
            else "JAX's default (asynchronous: CPU programs of 1000 flops or more run on a "
            "worker thread); --sync-dispatch runs them on the calling thread"
        )
    )
    machine = describe_machine()
    cores, usable = f"{machine['cpu_count']} cores", machine["usable_cores"]
    cores += f" ({usable} usable)" if usable != machine["cpu_count"] else ""
    print(f"machine: {machine['processor']}, {cores}; JAX {machine['jax']} on {machine['backend']}")
    if getattr(args, "grid", False):
        return _main_grid(args, machine, sync)
    settle = SETTLE_S if getattr(args, "settle_ms", None) is None else args.settle_ms / 1e3
    rows = run(
        quick=args.quick, rounds=args.rounds, only=args.only, backward=not args.no_backward, settle=settle
    )
    if getattr(args, "compare_allocator", False) and args.tune_allocator:
        _add_glibc_default_rows(rows, args)
    if rows:
        print(format_table(rows))
    overhead_rows = []
    if not getattr(args, "no_overhead", False):
        overhead_rows = overhead.run(quick=args.quick, rounds=args.rounds, only=args.only, settle=settle)
    if overhead_rows:
        print(overhead.format_table(overhead_rows))
    result = {
        "machine": machine,
        "allocator_tuned": args.tune_allocator,
        "sync_dispatch": sync,
        "rows": rows,
        "overhead": overhead_rows,
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    if args.plot:
        plot(rows, args.plot)
    return 0


def _main_grid(args: Any, machine: dict[str, Any], sync: bool) -> int:
    settle = grid.SETTLE_S if getattr(args, "settle_ms", None) is None else args.settle_ms / 1e3
    if getattr(args, "remeasure", None):
        with open(args.remeasure) as f:
            result = json.load(f)
        rounds = args.rounds or grid.REMEASURED_ROUNDS
        result["remeasured"] = grid.remeasure(result["grid"], rounds=rounds, settle=settle)
        result["remeasured_on"] = machine
        print(grid.format_remeasured(result["remeasured"]))
        with open(args.remeasure, "w") as f:
            json.dump(result, f, indent=1)
        return 0
    random, seed, eager = getattr(args, "random", 0), getattr(args, "seed", 0), getattr(args, "eager", False)
    backward, tables = getattr(args, "backward", False), getattr(args, "tables", False)
    numpy, table = getattr(args, "numpy", False), getattr(args, "table", None)
    host_work_us = getattr(args, "host_work_us", None) or 0.0
    in_range = getattr(args, "in_range", False)
    rows = grid.run(
        quick=args.quick,
        rounds=args.rounds,
        only=args.only,
        settle=settle,
        random=random,
        seed=seed,
        eager=eager,
        backward=backward,
        tables=tables,
        numpy=numpy,
        table=grid.TABLE if table is None else table,
        host_work_s=host_work_us / 1e6,
        in_range=in_range,
    )
    print(grid.format_summary(rows))
    if args.json:
        result = {"machine": machine, "allocator_tuned": args.tune_allocator, "sync_dispatch": sync}
        result |= {"random": {"cells": random, "seed": seed, "tables": tables}} if random else {}
        result |= {"eager": eager, "backward": backward, "numpy": numpy}
        result |= {"table": table} if table is not None else {}
        result |= {"host_work_us": host_work_us} if host_work_us else {}
        result |= {"in_range": True} if in_range else {}
        with open(args.json, "w") as f:
            json.dump(result | {"grid": rows}, f, indent=1)
    if args.plot:
        prefix = args.plot[:-4] if args.plot.endswith(".png") else args.plot
        for path in heatmaps.plot(rows, prefix):
            print(f"heatmap: {path}")
    return 0


def _add_glibc_default_rows(rows: list[dict[str, Any]], args: Any) -> None:
    """Measures the same cases in a fresh child process with glibc's default allocator (the
    tuning is process-wide and cannot be undone) and attaches its rows as ``glibc_default``."""
    import os
    import subprocess
    import tempfile

    progress(0, 1, "the same cases, glibc's default allocator, in a child process")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "glibc_default.json")
        argv = [sys.executable, "-m", "jax_gather", "bench", "--no-tune-allocator", "--no-overhead"]
        argv += ["--json", out]
        argv += ["--quick"] * bool(args.quick) + ["--no-backward"] * bool(args.no_backward)
        argv += ["--sync-dispatch"] * bool(getattr(args, "sync_dispatch", False))
        argv += ["--rounds", str(args.rounds)] * bool(args.rounds) + ["--only", args.only] * bool(args.only)
        if getattr(args, "settle_ms", None) is not None:
            argv += ["--settle-ms", str(args.settle_ms)]
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        with open(out) as f:
            theirs = {r["case"]: r for r in json.load(f)["rows"]}
    for row in rows:
        if row["case"] in theirs:
            row["glibc_default"] = theirs[row["case"]]
    progress(1, 1, "done")
