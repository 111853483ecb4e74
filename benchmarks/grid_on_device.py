"""``bench --grid``'s cells on the device at hand, within a time budget, with memory bandwidth.

    python benchmarks/grid_on_device.py --minutes 5 --json grid.json [--plot PREFIX]

For a lent accelerator, whose time is counted: the same cells, contenders and statistics as
``python -m jax_gather bench --grid`` (:mod:`jax_gather.bench.grid`), but in an order that covers
the whole grid coarsely first (row widths :data:`COARSE_WIDTHS` x index counts
:data:`COARSE_COUNTS`, every op and dtype), then the cells between, until ``--minutes`` have
passed; then the flagged cells and the highest medians are timed again alone
(:func:`grid.remeasure`) for ``--remeasure-minutes``. The JSON is rewritten as cells finish, so
a run cut short still leaves what it measured; ``--done FILE`` (repeated) leaves out the cells
an earlier run's JSON holds.

Each row gains ``bytes`` (the fewest bytes a gather must move: its output written, as many
elements of the data read, at most the data's size, and its indices read) and, against a pass
that reads and writes 1 GiB (``x + 1``, timed in the same run), ``bandwidth_fraction``: bytes
over the time of jax_gather's call, as a fraction of that pass's bytes per second.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from typing import Any

import jax
import jax.numpy as jnp

from jax_gather.bench import grid, heatmaps
from jax_gather.bench.machine import describe_machine
from jax_gather.bench.timing import ready, time_call

COARSE_WIDTHS = (1, 16, 128, 4096)
COARSE_COUNTS = (1, 129, 4096, 65536, 1 << 20)


def ordered_cells(only: str | None = None) -> list[grid.Cell]:
    """Every cell of the full grid, the coarse ones first."""
    todo = grid.cells(quick=False, only=only)
    coarse = lambda c: c.width in COARSE_WIDTHS and c.count in COARSE_COUNTS
    return [c for c in todo if coarse(c)] + [c for c in todo if not coarse(c)]


def cell_bytes(cell: grid.Cell) -> int:
    """The fewest bytes the cell's gather moves: output written, data read, indices read."""
    data_shape, indices_shape, _, _ = grid._shapes(cell.op, cell.width, cell.count)
    bits = grid._itemsize_bits(cell.dtype)
    out = math.prod(grid._plan(cell).output_shape) * bits // 8
    read = min(out, math.prod(data_shape) * bits // 8)
    return out + read + 4 * math.prod(indices_shape)


def copy_bandwidth(nbytes: int = 1 << 30, reps: int = 20) -> float:
    """Bytes per second of a jitted pass reading and writing ``nbytes`` of float32 on the device."""
    x = jnp.ones(nbytes // 4, jnp.float32)
    step = jax.jit(lambda v: v + 1)
    ready(step, x)
    return 2 * nbytes / time_call(lambda: ready(step, x), reps)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0, help="time for the grid's cells")
    parser.add_argument("--remeasure-minutes", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--only", metavar="TEXT", help="only the cells whose name contains TEXT")
    parser.add_argument(
        "--skip", type=int, default=0, help="leave out the first N cells (a run that goes on)"
    )
    parser.add_argument(
        "--done", metavar="FILE", action="append", default=[], help="leave out the cells of this JSON"
    )
    parser.add_argument("--json", metavar="FILE", required=True)
    parser.add_argument("--plot", metavar="PREFIX", help="heatmaps PREFIX-<mode>.png")
    args = parser.parse_args(argv)

    machine = describe_machine() | {"device_kind": jax.devices()[0].device_kind}
    bandwidth = copy_bandwidth()
    print(f"device: {machine['device_kind']} ({machine['backend']}), JAX {machine['jax']}")
    print(f"a read-and-write pass over 1 GiB: {bandwidth / 1e12:.2f} TB/s (read + written)", flush=True)
    start = time.monotonic()
    result: dict[str, Any] = {"machine": machine, "copy_bytes_per_s": bandwidth, "grid": []}

    def save() -> None:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)

    done = set()
    for path in args.done:
        with open(path) as f:
            done |= {(r["op"], r["dtype"], r["width"], r["count"]) for r in json.load(f)["grid"]}
    todo = [c for c in ordered_cells(args.only) if (c.op, c.dtype, c.width, c.count) not in done]
    for k, cell in enumerate(todo[args.skip :], start=args.skip):
        if time.monotonic() - start > 60 * args.minutes:
            break
        row = grid.run_cell(cell, args.rounds, grid.SETTLE_S)
        row["bytes"] = cell_bytes(cell)
        row["bandwidth_fraction"] = {m: row["bytes"] / row["ours_s"][m] / bandwidth for m in grid.MODES}
        result["grid"].append(row)
        if k % 20 == 0:
            print(f"{k} of {len(todo)} cells, {time.monotonic() - start:.0f} s", flush=True)
            save()
    result["cells_planned"] = len(todo)
    save()
    rows = result["grid"]
    if not rows:
        return 1
    print(grid.format_summary(rows))
    large = sorted((r for r in rows if r["bytes"] >= 64 << 20), key=lambda r: -r["bytes"])
    if large:
        print("cells moving 64 MiB or more: fraction of the pass's bandwidth, ours (jnp's)")
        for r in large[:12]:
            name = grid.Cell(r["op"], r["dtype"], r["width"], r["count"]).name
            fractions = ", ".join(
                f"{m} {r['bandwidth_fraction'][m]:.2f} ({r['bytes'] / r['jnp_s'][m] / bandwidth:.2f})"
                for m in grid.MODES
            )
            print(f"  {r['bytes'] >> 20:5d} MiB  {name}: {fractions}")
    remeasure_deadline = time.monotonic() + 60 * args.remeasure_minutes
    flagged = [r for r in grid.timed(rows) if any(grid.slower(r, m) for m in grid.MODES)]
    highest = sorted(rows, key=lambda r: -max(r[m] for m in grid.MODES))[: grid.REMEASURED_TOP]
    picked = list({id(r): r for r in flagged + highest}.values())
    records: list[dict[str, Any]] = []
    for r in picked:
        if time.monotonic() > remeasure_deadline:
            break
        records += grid.remeasure([r], top=1)
        result["remeasured"] = records
        save()
    if records:
        print(grid.format_remeasured(records))
    if args.plot and rows:
        for path in heatmaps.plot(rows, args.plot):
            print(f"heatmap: {path}")
    print(f"{len(rows)} of {len(todo)} cells in {time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
