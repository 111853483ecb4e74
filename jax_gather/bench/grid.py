"""``python -m jax_gather bench --grid``: jax_gather against jnp's same call over a grid of sizes.

The main table times 23 shapes against every peer; a user's sizes are not those. The grid times
every op x dtype x row width x index count x mode against the call a user would otherwise write
with jnp, jitted, in the same out-of-bounds mode ("checked", whose plain-``jit`` program is the
fill's, against ``mode="fill"``; ``promise_in_bounds`` against ``promise_in_bounds``), by the main
benchmark's method (:mod:`jax_gather.bench.timing`): paired rounds, the order alternating, the
median of per-round ratios with its interval, and an A/A control per cell (the default mode
compiled again, one more contender). A cell is *slower* when its whole interval lies above the
A/A band's upper end, and at least :data:`SLOWER` above 1.

Row width is the number of elements each index takes (a row of the table, a column for Gather
along axis 1); index count the number of index components' tuples (ids, elements, or GatherND
tuples). The indexed axis has :data:`TABLE` entries unless an op says otherwise, or the grid
another (``--table N``), or a cell (``--random --tables``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from jax_gather.bench import peers
from jax_gather.bench.overhead import numpy_aligned_16
from jax_gather.bench.report import progress
from jax_gather.bench.timing import geomean, paired, paired_rounds, ready, time_call

TABLE = 4096
WIDTHS = (1, 4, 16, 32, 64, 128, 1024, 4096)
# 256: between 200 and 333 ids, where a lowering's 2 flops an index more would take a promise over
# INLINE_FLOPS while jnp's stays under it (jax_gather._cpu.HANDOFF_MIN_BYTES).
COUNTS = (1, 16, 128, 129, 256, 512, 1024, 4096, 8192, 65536, 1 << 20)
DTYPES = ("float32", "bfloat16", "int8", "int4")
MODES = ("checked", "promise_in_bounds")
QUICK_WIDTHS, QUICK_COUNTS, QUICK_DTYPES = (1, 16, 64, 1024), (16, 129, 1024, 8192), ("float32", "int8")
# Cells whose output or data would pass this many bytes are left out (memory; a grid of an hour).
MAX_BYTES = 128 << 20
# No onnxruntime in the grid, whose threads spin after a run: a short settle suffices.
SETTLE_S = 0.003
# A cell is called slower than jnp only past the A/A band and at least this far above 1.0.
SLOWER = 1.05


@dataclasses.dataclass(frozen=True)
class Cell:
    op: str  # a key of OPS
    dtype: str
    width: int
    count: int
    table: int = TABLE  # the entries of the indexed axis (or axes: GatherND pairs, about as many)

    @property
    def name(self) -> str:
        table = f" t={self.table}" if self.table != TABLE else ""
        return f"{self.op} {self.dtype} w={self.width} n={self.count}{table}"


def cell_of(row: dict[str, Any]) -> Cell:
    """The cell of a grid's JSON row (rows written before cells had a table length have TABLE)."""
    return Cell(row["op"], row["dtype"], row["width"], row["count"], row.get("table", TABLE))


def _shapes(op: str, w: int, n: int, t: int = TABLE) -> tuple[tuple[int, ...], tuple[int, ...], int, int]:
    """(data shape, indices shape, attribute, batch_dims) of a cell of table length ``t``."""
    if op == "gather axis 0":
        return (t, w), (n,), 0, 0
    if op == "gather axis 1":
        return (w, t), (n,), 1, 0
    if op == "gather batch_dims=1":
        b = next(b for b in (8, 4, 2, 1) if n % b == 0)
        return (b, max(1, t // 8), w), (b, n // b), 1, 1
    rows, per_row = max(1, n // w), min(n, w)
    if op == "gather_elements axis -1":  # the indexed axis is the row: no table
        return (rows, w), (rows, per_row), -1, 0
    if op == "gather_elements axis 0":
        return (t, w), (rows, per_row), 0, 0
    if op == "gather_nd pairs":
        side = max(1, math.isqrt(t))
        return (side, side, w), (n, 2), 0, 0
    if op == "gather_nd rows":
        return (t, w), (n, 1), 0, 0
    raise ValueError(f"bench --grid: unknown op {op!r}; the ops are {list(OPS)}")


OPS = {
    "gather axis 0": "gather",
    "gather axis 1": "gather",
    "gather batch_dims=1": "gather",
    "gather_elements axis -1": "gather_elements",
    "gather_elements axis 0": "gather_elements",
    "gather_nd pairs": "gather_nd",
    "gather_nd rows": "gather_nd",
}


# --random: cells off the grid's axes. A user's sizes lie between its points, where a cliff can
# hide (a promise of 32-128 int8 column rows by 200-256 ids took 2.3-5.8x jnp's time between the
# 129 and 512 ids of the grid), and in other dtypes (bfloat16 rows of 40-56 in the default mode,
# up to 4x). Widths and counts are drawn log-uniformly over the grid's ranges.
RANDOM_DTYPES = ("float16", "float8_e4m3fn", "uint8", "int16", "int32", "bool")


def numpy_dtype(name: str) -> np.dtype:
    import ml_dtypes

    narrow = {"bfloat16", "int4", "float8_e4m3fn"}
    return np.dtype(getattr(ml_dtypes, name) if name in narrow else name)


def _itemsize_bits(dtype: str) -> int:
    return 4 if dtype == "int4" else 8 * numpy_dtype(dtype).itemsize


def fits(cell: Cell) -> bool:
    """Whether the cell's data and output stay under MAX_BYTES."""
    data = _shapes(cell.op, cell.width, cell.count, cell.table)[0]
    out = _plan(cell).output_shape
    bits = _itemsize_bits(cell.dtype)
    return max(math.prod(data), math.prod(out)) * bits // 8 <= MAX_BYTES


def _plan(cell: Cell) -> Any:
    from jax_gather import plans

    data, indices, attribute, batch_dims = _shapes(cell.op, cell.width, cell.count, cell.table)
    kind = OPS[cell.op]
    if kind == "gather":
        return plans.gather_plan(data, indices, attribute, batch_dims)
    plan_fn = plans.gather_elements_plan if kind == "gather_elements" else plans.gather_nd_plan
    return plan_fn(data, indices, attribute)


# --backward: the gradient w.r.t. data, of the dtypes whose gradient both sides scatter.
BACKWARD_DTYPES = ("float32", "bfloat16", "float16")


def cells(
    quick: bool = False, only: str | None = None, backward: bool = False, table: int = TABLE
) -> list[Cell]:
    widths, counts, dtypes = (QUICK_WIDTHS, QUICK_COUNTS, QUICK_DTYPES) if quick else (WIDTHS, COUNTS, DTYPES)
    kept = [dt for dt in dtypes if dt in BACKWARD_DTYPES or not backward]
    grid = [Cell(op, dt, w, n, table) for op in OPS for dt in kept for w in widths for n in counts]
    return [c for c in grid if fits(c) and (only is None or only in c.name)]


# --random --tables: the indexed axis's length drawn too, log-uniform up to this many entries (a
# vocabulary's table of rows; the grid's own TABLE is 4096).
MAX_TABLE = 1 << 18


def random_cells(
    k: int, seed: int = 0, only: str | None = None, backward: bool = False, tables: bool = False
) -> list[Cell]:
    """``k`` cells drawn off the grid's axes (the same ``seed``, the same cells): an op, a dtype
    of DTYPES or RANDOM_DTYPES (``backward``: BACKWARD_DTYPES), a width and a count log-uniform
    over WIDTHS' and COUNTS' ranges; ``tables``: a table length log-uniform in [1, MAX_TABLE],
    drawn from a stream of its own, so that the draws without it stay as they were."""
    rng, table_rng = np.random.default_rng(seed), np.random.default_rng([seed, 1])
    log_uniform = lambda top, r=rng: int(np.exp(r.uniform(0, np.log(top + 1))))
    dtypes = BACKWARD_DTYPES if backward else DTYPES + RANDOM_DTYPES
    drawn: list[Cell] = []
    for _ in range(1000 * k):  # a bound, for an ``only`` that few or no cells match
        if len(drawn) == k:
            break
        op, dtype = rng.choice(list(OPS)), rng.choice(dtypes)
        cell = Cell(str(op), str(dtype), log_uniform(WIDTHS[-1]), log_uniform(COUNTS[-1]))
        if tables:
            cell = dataclasses.replace(cell, table=max(1, log_uniform(MAX_TABLE, table_rng)))
        if fits(cell) and (only is None or only in cell.name):
            drawn.append(cell)
    return drawn


def make_inputs(cell: Cell, seed: int = 0, negatives: bool = True) -> tuple[Any, Any]:
    """Data of the cell's dtype and in-bounds indices (a tenth negative, or none without
    ``negatives``), as device arrays."""
    import jax.numpy as jnp

    rng = np.random.default_rng(seed)
    data_shape, indices_shape, _, _ = _shapes(cell.op, cell.width, cell.count, cell.table)
    data = rng.integers(-8, 8, data_shape).astype(numpy_dtype(cell.dtype))
    plan = _plan(cell)
    sizes = np.asarray(plan.index_sizes) if plan.tuple_indices else plan.index_sizes[0]
    indices = np.floor(rng.random(indices_shape) * sizes).astype(np.int32)
    if negatives:
        indices = np.where(rng.random(indices_shape) < 0.1, indices - sizes, indices).astype(np.int32)
    return jnp.asarray(data), jnp.asarray(indices)


def jnp_call(cell: Cell, mode: str, eager: bool = False, numpy: bool = False) -> Callable[[Any, Any], Any]:
    """The call a user would write with jnp for the cell's op, in ``mode`` ("checked" -> "fill");
    ``eager``: called unjitted, where ``jnp.take`` (jitted inside) is the faster of the two;
    ``numpy``: of NumPy inputs, which ``jnp.take`` and ``take_along_axis`` take as they are and
    indexing after ``jnp.asarray``."""
    import jax
    import jax.numpy as jnp

    m = "fill" if mode == "checked" else mode
    _, _, attribute, batch_dims = _shapes(cell.op, cell.width, cell.count, cell.table)
    kind = OPS[cell.op]
    if kind == "gather" and eager and not batch_dims and m != "promise_in_bounds":
        return lambda d, i: jnp.take(d, i, axis=attribute, mode=m)
    if kind == "gather_elements":
        # Indices narrower than data (ONNX allows it, jnp not) slice it; negatives normalised
        # first where take_along_axis reads them as they are under a promise (JAX 0.10).
        normalise = m == "promise_in_bounds" and not peers.take_along_axis_normalises_under_a_promise()
        wrapped = lambda d, i: jnp.where(i < 0, i + d.shape[attribute], i) if normalise else i
        narrowed = lambda d, i: d[:, : i.shape[1]] if attribute == 0 else d
        return lambda d, i: jnp.take_along_axis(narrowed(d, i), wrapped(d, i), axis=attribute, mode=m)
    if kind == "gather":  # jnp.take has no promise_in_bounds; indexing has every mode
        lead = (slice(None),) * (attribute - batch_dims)
        fn = lambda d, i: d.at[lead + (i,)].get(mode=m)
        indexed = jax.vmap(fn) if batch_dims else fn
    else:
        indexed = lambda d, i: d.at[tuple(i[..., c] for c in range(i.shape[-1]))].get(mode=m)
    return (lambda d, i: indexed(jnp.asarray(d), jnp.asarray(i))) if numpy else indexed


def ours_call(cell: Cell, mode: str) -> Callable[[Any, Any], Any]:
    import jax_gather

    _, _, attribute, batch_dims = _shapes(cell.op, cell.width, cell.count, cell.table)
    op = getattr(jax_gather, OPS[cell.op])
    if batch_dims:
        return lambda d, i: op(d, i, attribute, mode=mode, batch_dims=batch_dims)
    return lambda d, i: op(d, i, attribute, mode=mode)  # as a user writes it: no **{} (0.45 µs)


AGAIN = "again"
# A row's key where XLA could not run jnp's call (no ratios): left out of every summary.
PEER_FAILED = "jnp_failed"


def timed(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of cells that were timed (not those whose peer XLA could not run)."""
    return [r for r in rows if PEER_FAILED not in r]


def run_cell(
    cell: Cell,
    rounds: int,
    settle: float,
    eager: bool = False,
    backward: bool = False,
    numpy: bool = False,
    host_work_s: float = 0.0,
    in_range: bool = False,
) -> dict[str, Any]:
    """Times one cell; returns its row (per mode: the ratio ours / jnp and its interval).
    ``eager``: both called as they are, without ``jax.jit`` (the library's eager path, whose
    checked mode judges the indices on the host, against jnp's own eager call); ``numpy``: with
    NumPy inputs, data 16 bytes past a 64-byte boundary (where NumPy's large arrays start) and
    int64 indices, as jnp's call takes them (:func:`jnp_call`).
    ``backward``: the gradient w.r.t. data of the sum of each's output (in float32), jitted.
    ``host_work_s``: that long a busy loop on the calling thread after each timed call, taken
    out of its time: a program's own work between its calls, during which JAX's worker threads
    fall asleep, as they do not between calls issued back to back. ``in_range``: indices in
    [0, s-1] (a user's common case, which the eager checked call tests first), where otherwise
    a tenth are negative."""
    import jax
    import jax.numpy as jnp

    d, i = make_inputs(cell, negatives=not in_range)
    wrap: Callable[[Any], Any] = (lambda f: f) if eager else jax.jit
    if backward:
        wrap = lambda f: jax.jit(jax.grad(lambda d, i: f(d, i).astype(jnp.float32).sum()))
    if numpy:
        d, i = numpy_aligned_16(np.asarray(d)), numpy_aligned_16(np.asarray(i).astype(np.int64))
    fns = {f"ours {m}": wrap(ours_call(cell, m)) for m in MODES}
    fns |= {f"jnp {m}": wrap(jnp_call(cell, m, eager, numpy)) for m in MODES}
    fns[AGAIN] = wrap(ours_call(cell, MODES[0]))  # the A/A control: the first compiled again
    calls: dict[str, Callable[[], Any]] = {name: functools.partial(ready, f, d, i) for name, f in fns.items()}
    if host_work_s:
        calls = {name: functools.partial(_then_host_work, call, host_work_s) for name, call in calls.items()}
    try:
        once = time_call(calls[f"jnp {MODES[0]}"], 1)
    except RuntimeError as error:
        # XLA cannot run jnp's call here (under --xla_cpu_max_isa=SSE4_2 its JIT finds no
        # float16 conversion routine, for any float16 arithmetic): nothing to compare with.
        # The library's calls are not guarded: a failure of theirs is raised.
        if type(error).__name__ not in ("JaxRuntimeError", "XlaRuntimeError"):
            raise
        return dataclasses.asdict(cell) | {PEER_FAILED: str(error).splitlines()[0]}
    reps = int(np.clip(2e-3 / max(once, 1e-7), 3, 15))
    times = paired_rounds(calls, rounds, reps, settle)
    if host_work_s:
        times = {name: [t - host_work_s for t in ts] for name, ts in times.items()}
    row: dict[str, Any] = dataclasses.asdict(cell) | {"reps": reps}
    row |= {"host_work_us": host_work_s * 1e6} if host_work_s else {}
    row |= ({"eager": True} if eager else {}) | ({"backward": True} if backward else {})
    row |= ({"numpy": True} if numpy else {}) | ({"in_range": True} if in_range else {})
    row["jnp_s"] = {m: float(np.median(times[f"jnp {m}"])) for m in MODES}
    row["ours_s"] = {m: float(np.median(times[f"ours {m}"])) for m in MODES}
    row["aa"], row["aa_interval"] = paired(times[f"ours {MODES[0]}"], times[AGAIN])
    for m in MODES:
        row[m], row[f"{m}_interval"] = paired(times[f"ours {m}"], times[f"jnp {m}"])
    return row


def _then_host_work(call: Callable[[], Any], seconds: float) -> Any:
    """``call()``, then a busy loop of ``seconds`` on this thread (see :func:`run_cell`)."""
    result = call()
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass
    return result


def slower(row: dict[str, Any], mode: str) -> bool:
    """Whether the cell is slower than jnp in ``mode``, past the A/A band and SLOWER."""
    low = row[f"{mode}_interval"][0]
    return low > max(row["aa_interval"][1], 1.0) and row[mode] > SLOWER


def run(
    quick: bool = False,
    rounds: int | None = None,
    only: str | None = None,
    settle: float = SETTLE_S,
    random: int = 0,
    seed: int = 0,
    eager: bool = False,
    backward: bool = False,
    tables: bool = False,
    numpy: bool = False,
    table: int = TABLE,
    host_work_s: float = 0.0,
    in_range: bool = False,
) -> list[dict[str, Any]]:
    """Times the grid's cells (``quick``: the smaller grid; of an axis of ``table`` entries) or
    ``random`` random_cells (of random table lengths where ``tables``); ``eager``: as eager calls,
    of NumPy inputs where ``numpy``; ``backward``: their gradients; ``host_work_s`` after each
    timed call; indices in [0, s-1] where ``in_range`` (:func:`run_cell`)."""
    if eager and backward:
        raise ValueError("bench --grid: --eager and --backward do not combine (gradients are timed jitted)")
    if numpy and not eager:
        raise ValueError("bench --grid: --numpy times eager calls of NumPy inputs; give --eager")
    if (tables and not random) or (random and table != TABLE) or table < 1:
        raise ValueError(f"bench --grid: --tables needs --random, --table N (N >= 1) does not: {table}")
    if random:
        todo = random_cells(random, seed, only, backward, tables)
    else:
        todo = cells(quick, only, backward, table)
    rows = []
    for k, cell in enumerate(todo):
        progress(k, len(todo), cell.name)
        if k % 100 == 0 and not sys.stderr.isatty():  # a run of half an hour, logged to a file
            print(f"grid: {k} of {len(todo)} cells", file=sys.stderr, flush=True)
        rows.append(
            run_cell(
                cell,
                rounds or (5 if quick else 7),
                settle,
                eager,
                backward,
                numpy,
                host_work_s=host_work_s,
                in_range=in_range,
            )
        )
    progress(len(todo), len(todo), "done")
    return rows


# A grid times each cell in one pass; on a noisy machine some cells land past their band by
# chance, and a cell slower in every pass can hide in a wide interval (bfloat16 rows of 16 from
# 256 KiB of output: 1.23-1.86 in three AMD EPYC grids, never flagged; 1.36-1.53 timed alone).
# remeasure times again, alone and over more rounds, the flagged cells, every median above
# REMEASURED_ABOVE, and the highest medians.
REMEASURED_ROUNDS, REMEASURED_TOP, REMEASURED_ABOVE = 15, 15, 1.25


def remeasure(
    rows: Sequence[dict[str, Any]],
    rounds: int = REMEASURED_ROUNDS,
    top: int = REMEASURED_TOP,
    settle: float = SETTLE_S,
    above: float = REMEASURED_ABOVE,
) -> list[dict[str, Any]]:
    """The cells of a grid's ``rows`` that were slower past the A/A band, then, highest first,
    every one of median above ``above`` and at least the ``top`` of highest median, each timed
    again alone over ``rounds`` rounds: per cell and mode, its grid ratio, the new ratio,
    interval, A/A interval and verdict."""
    rows = timed(rows)
    flagged = [(r, m) for r in rows for m in MODES if slower(r, m)]
    ranked = sorted(((r, m) for r in rows for m in MODES), key=lambda rm: -rm[0][rm[1]])
    highest = [(r, m) for k, (r, m) in enumerate(ranked) if k < top or r[m] > above]
    picked = {(cell_of(r), m): r for r, m in flagged + highest}
    records = []
    for k, ((cell, mode), row) in enumerate(picked.items()):
        progress(k, len(picked), cell.name)
        flags = (bool(row.get("eager")), bool(row.get("backward")), bool(row.get("numpy")))
        host_work_s, in_range = row.get("host_work_us", 0) / 1e6, bool(row.get("in_range"))
        again = run_cell(cell, rounds, settle, *flags, host_work_s=host_work_s, in_range=in_range)
        records.append(
            {
                "cell": [cell.op, cell.dtype, cell.width, cell.count, cell.table],
                "mode": mode,
                "rounds": rounds,
                "grid_ratio": row[mode],
                "ratio": again[mode],
                "interval": again[f"{mode}_interval"],
                "aa_interval": again["aa_interval"],
                "slower": slower(again, mode),
            }
        )
    progress(1, 1, "done")
    return records


def format_remeasured(records: Sequence[dict[str, Any]]) -> str:
    rounds = ", ".join(str(n) for n in sorted({r["rounds"] for r in records}))
    lines = [f"remeasured: {len(records)} cells alone, {rounds} rounds each (grid -> now)"]
    for r in records:
        name, (low, high) = Cell(*r["cell"]).name, r["interval"][:2]
        aa_low, aa_high = r["aa_interval"][:2]
        verdict = "slower" if r["slower"] else "not slower"
        interval = f"({low:.2f}-{high:.2f}, A/A {aa_low:.2f}-{aa_high:.2f})"
        ratios = f"{r['grid_ratio']:5.2f} -> {r['ratio']:4.2f} {interval}"
        lines.append(f"  {ratios}  {name}  [{r['mode']}]  {verdict}")
    still = sum(r["slower"] for r in records)
    lines.append(f"  slower past the A/A band and {SLOWER} on re-measure: {still} of {len(records)}")
    return "\n".join(lines)


def worst(rows: Sequence[dict[str, Any]], k: int = 10) -> list[tuple[float, str, str]]:
    name = lambda r: cell_of(r).name
    return sorted(((r[m], name(r), m) for r in timed(rows) for m in MODES), reverse=True)[:k]


def format_summary(rows: Sequence[dict[str, Any]]) -> str:
    failed = [r for r in rows if PEER_FAILED in r]
    rows = timed(rows)
    lines = [f"grid: {len(rows)} cells x {len(MODES)} modes, jax_gather / jnp's call in the same mode"]
    if failed:
        lines.append(f"  left out: {len(failed)} cells where XLA could not run jnp's call, such as")
        lines.append(f"    {cell_of(failed[0]).name}: {failed[0][PEER_FAILED]}")
    for m in MODES:
        ratios = [r[m] for r in rows]
        bad = [r for r in rows if slower(r, m)]
        lines.append(
            f"  {m:18s} geometric mean {geomean(ratios):.2f}, worst {max(ratios):.2f}; "
            f"slower past the A/A band and {SLOWER}: {len(bad)} cells"
        )
    aa = [r["aa"] for r in rows]
    lines.append(f"  A/A (one program against its second compile): {min(aa):.2f}-{max(aa):.2f}")
    lines.append("  the worst ten cells:")
    lines += [f"    {ratio:5.2f}  {name}  [{mode}]" for ratio, name, mode in worst(rows)]
    return "\n".join(lines)
