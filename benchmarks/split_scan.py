"""The grid's cells whose library program XLA:CPU splits into tasks where jnp's stays whole.

    python benchmarks/split_scan.py [--ops OP,...] [--dtypes T,...] [--widths W,...] [--counts N,...]
                                    [--tables T,...]

Compiles, times nothing: for each op x dtype x row width x index count x mode of ``bench
--grid`` (:mod:`jax_gather.bench.grid`), the library's call and ``jnp``'s in the same mode, and
prints each cell where a loop of the library's is split into a task per core
(``outer_dimension_partitions``) and none of ``jnp``'s is, with both programs' flops (XLA's
count). Such a split costs a hand-over to the second core (20-50 µs on the AMD EPYC), which a
loop of tens of microseconds does not repay (docs/design.md, "No lowering splits a loop that jnp
keeps whole"); time the cells it prints with ``bench --grid --only``. In a process on one core
XLA splits no loop, and nothing is printed. The defaults, widths 1-128 by 256-65536 ids in four
dtypes, take 10-15 minutes on two cores; ``--tables`` gives the indexed axis other lengths than the
grid's 4096 (a cell's table length, ``grid.Cell.table``).
"""

from __future__ import annotations

import argparse
import itertools
import re
import sys
from collections.abc import Sequence
from typing import Any

import jax

from jax_gather._cpu_client import lowered_for_cpu
from jax_gather.bench import grid

WIDTHS = (1, 2, 4, 8, 16, 32, 64, 128)
COUNTS = (256, 512, 1024, 1500, 2048, 3000, 4096, 6000, 8192, 12000, 16384, 32768, 65536)
DTYPES = ("float32", "bfloat16", "int8", "int4")


def tasks(fn: Any, *args: Any) -> tuple[int, int]:
    """The most tasks XLA:CPU splits a loop of ``jax.jit(fn)`` into, and its flops (compiled for
    this process's CPU, whatever the default device)."""
    compiled = lowered_for_cpu(fn, *((a.shape, a.dtype) for a in args)).compile()
    splits = [int(n) for n in re.findall(r'outer_dimension_partitions":\["(\d+)"', compiled.as_text())]
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    return max(splits, default=1), int(cost.get("flops", 0))


def scan(
    ops: list[str],
    dtypes: list[str],
    widths: list[int],
    counts: list[int],
    tables: Sequence[int] = (grid.TABLE,),
) -> list[dict]:
    """One row per cell and mode split where jnp's is not."""
    rows = []
    cells = itertools.product(ops, dtypes, widths, counts, tables, grid.MODES)
    for op, dtype, width, count, table, mode in cells:
        cell = grid.Cell(op, dtype, width, count, table)
        if not grid.fits(cell):
            continue
        data, indices = grid.make_inputs(cell)
        ours, ours_flops = tasks(grid.ours_call(cell, mode), data, indices)
        theirs, jnp_flops = tasks(grid.jnp_call(cell, mode), data, indices)
        if ours > theirs:
            rows.append(
                {"cell": cell.name, "mode": mode, "tasks": ours, "flops": ours_flops, "jnp_flops": jnp_flops}
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    listed = lambda kind: lambda text: [kind(x) for x in text.split(",")]
    parser.add_argument("--ops", type=listed(str), default=list(grid.OPS))
    parser.add_argument("--dtypes", type=listed(str), default=list(DTYPES))
    parser.add_argument("--widths", type=listed(int), default=list(WIDTHS))
    parser.add_argument("--counts", type=listed(int), default=list(COUNTS))
    parser.add_argument("--tables", type=listed(int), default=[grid.TABLE])
    args = parser.parse_args(argv)
    print(f"JAX {jax.__version__}; cells split into tasks where jnp's program is not:")
    rows = scan(args.ops, args.dtypes, args.widths, args.counts, args.tables)
    for row in rows:
        counts = f"{row['tasks']} tasks, {row['flops']} flops (jnp's {row['jnp_flops']})"
        print(f"  {row['cell']}  [{row['mode']}]  {counts}")
    print(f"{len(rows)} cells")
    return 0


if __name__ == "__main__":
    sys.exit(main())
