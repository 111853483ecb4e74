"""Each lowering choice of jax_gather timed against the program it was chosen over.

    python benchmarks/lowering_choices.py [--rounds N] [--scale D] [--json FILE] [--only TEXT]
    XLA_FLAGS=--xla_force_host_platform_device_count=8 python benchmarks/lowering_choices.py --collectives

CPU lowerings (``jax_gather._cpu.LOWERINGS``): on the benchmark's shapes (``jax_gather.bench``),
the library's program ("with") against the program the library compiles without that lowering
(``_cpu.without``), and against itself compiled a second time (A/A: the same machine code at
other addresses, this run's own noise). Generic choices, made on every platform: the library's
form against a hand-written alternative, with the same A/A control.

All three programs of a row are timed in interleaved paired rounds (``bench.paired_rounds``),
after checking that they compute the same thing. Printed per row: the median over rounds of
without / with, and of A/A, each with its distribution-free interval (``bench.median_interval``),
and a verdict: "pays" when the ratio's interval lies above the A/A interval, "costs" when below,
"level" otherwise. A lowering earns its place by paying on at least one benchmark shape.
``--scale D`` divides every dimension by D (the tests use it). docs/design.md quotes a run.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import re
import sys
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import jax_gather
from jax_gather import _cpu, _lowering, _traced_bounds, bench, plans
from jax_gather._x64 import x64_enabled

Fn = Callable[[jax.Array, jax.Array], jax.Array]
# The benchmark's cases, and one short lookup (64 ids: the overhead section's kind of call).
SHORT_LOOKUP = bench.Case("gather axis 0, 64 ids", "gather", 0, (50000, 512), (64,))
# And GatherND after batch dims below BATCHED_ND_LINEAR_TUPLES (1024 tuples, 256 at --scale 4).
BATCHED_PAIRS = bench.Case("gather_nd batch_dims=1, 1024 pairs", "gather_nd", 1, (64, 256, 256), (64, 16, 2))
# And the largest column lookup that reads its fill from a pad where XLA splits loops (8 MiB of
# cache lines).
COLUMN_LOOKUP = bench.Case("gather axis 1, 32 ids of 4096 columns", "gather", 1, (4096, 4096), (32,))
# And a column gather whose fill from a pad keeps it under INLINE_FLOPS, where the select's would
# not (the same at any scale: a smaller one is a short lookup).
FEW_COLUMN_IDS = bench.Case(
    "gather axis 1, 129 ids of 64 int8 rows", "gather", 1, (64, 4096), (129,), True, "int8"
)
# And a GatherND of index pairs whose one fill loop XLA:CPU splits where it keeps jnp's whole
# (2048 pairs at --scale 4).
PAIRS = bench.Case("gather_nd, 8192 int8 pairs", "gather_nd", 0, (64, 64), (8192, 2), True, "int8")
# And a GatherND of int4 pairs of rows of 3 whose generic gather loop XLA:CPU splits where it keeps
# jnp's whole (the same at any scale: a smaller one would read rows of one element).
INT4_PAIRS = bench.Case(
    "gather_nd, 1024 int4 pairs of rows of 3", "gather_nd", 0, (64, 64, 3), (1024, 2), True, "int4"
)
# And bfloat16 rows of 48 (12 at --scale 4), whose fill's select XLA:CPU vectorises with the clamp pin.
CLAMPED = bench.Case("gather axis 0, bfloat16 rows of 48", "gather", 0, (4096, 48), (4000,), True, "bfloat16")
# And a gather of fewer columns than half the axis, whose derivative takes rows of the leading block.
FEW_COLUMNS = bench.Case("gather axis 1, 256 of 4096 columns", "gather", 1, (512, 4096), (256,), True)
# And a GatherND of a few pairs whose fill's flops the reduced tuple mask takes over INLINE_FLOPS.
FEW_PAIRS = bench.Case("gather_nd, 45 pairs of rows of 8", "gather_nd", 0, (256, 256, 8), (45, 2), True)
# And a few bfloat16 rows (of 2 at --scale 4), whose fill's select keeps its bits through a
# pinned fill where XLA:CPU selects bfloat16 as it is (JAX 0.11 and later).
FEW_ROWS = bench.Case("gather axis 0, 48 bfloat16 rows of 8", "gather", 0, (4096, 8), (48,), True, "bfloat16")
# And bfloat16 elements each of their own after batch dims, whose fill's select LLVM makes one of
# bfloat vectors (on x86-64 without native bfloat16, a branch an element).
OWN_ELEMENTS = bench.Case(
    "gather_elements axis 1, 2**20 bfloat16 elements", "gather_elements", 1, (1 << 20, 1), (1 << 20, 1), True,
    "bfloat16",
)  # fmt: skip
# And a GatherND of index pairs that all read one slice (an indexed axis of one entry), whose fill
# XLA fuses into its broadcast of the slice (rows of 1 at --scale 4, still from one slice).
ONE_SLICE = bench.Case(
    "gather_nd, 2188 bfloat16 pairs of one slice of 5", "gather_nd", 0, (1, 1, 5), (2188, 2), True, "bfloat16"
)
# And a Gather along axis 1 of a one-column bfloat16 table (the slice across the output), whose
# pinned select XLA:CPU would split into a task per core.
ONE_COLUMN = bench.Case(
    "gather axis 1, 256 ids of a bfloat16 column of 32 rows", "gather", 1, (32, 1), (256,), True, "bfloat16"
)
EXTRA = (
    SHORT_LOOKUP,
    BATCHED_PAIRS,
    COLUMN_LOOKUP,
    FEW_COLUMN_IDS,
    PAIRS,
    INT4_PAIRS,
    CLAMPED,
    FEW_COLUMNS,
    FEW_PAIRS,
    FEW_ROWS,
    OWN_ELEMENTS,
    ONE_SLICE,
    ONE_COLUMN,
)
CASES = {c.name: c for c in (*bench.CASES, *EXTRA)}


@dataclasses.dataclass(frozen=True)
class Choice:
    """One lowering choice on one benchmark shape.

    ``without`` names the CPU lowerings switched off for the alternative; a generic choice has
    none and gives the hand-written ``alternative`` instead.
    """

    name: str
    case: str  # a name in CASES
    what: str  # "default mode", "promise_in_bounds", or "backward" (gradient, default mode)
    without: tuple[str, ...] = ()
    chosen: Fn | None = None  # default: the library's op in the mode ``what`` says
    alternative: Fn | None = None
    x64: bool = False


def _op(case: bench.Case, mode: str = "checked") -> Fn:
    op = getattr(jax_gather, case.op)
    fn = lambda d, i: op(d, i, case.attribute, mode=mode)
    return jax.vmap(fn) if case.vmapped else fn


def _program(choice: Choice, case: bench.Case) -> Fn:
    if choice.chosen is not None:
        return choice.chosen
    if choice.what == "backward":
        forward = _op(case)
        return jax.grad(lambda d, i: forward(d, i).astype(jnp.float32).sum())
    return _op(case, "promise_in_bounds" if choice.what == "promise_in_bounds" else "checked")


# ---- generic choices: hand-written alternatives ------------------------------------------------------

_PROMISE = lax.GatherScatterMode.PROMISE_IN_BOUNDS


def _elements_by_iota(axis: int) -> Fn:
    """GatherElements with every non-axis coordinate as an index component read from an iota,
    instead of batching dims (how jnp.take_along_axis lowered before XLA had them)."""

    def f(d, i):
        r = d.ndim
        parts = [i if k == axis % r else lax.broadcasted_iota(i.dtype, i.shape, k) for k in range(r)]
        dn = lax.GatherDimensionNumbers(
            offset_dims=(), collapsed_slice_dims=tuple(range(r)), start_index_map=tuple(range(r))
        )
        return lax.gather(d, jnp.stack(parts, -1), dn, (1,) * r, mode=_PROMISE)

    return f


def _elements_batching(axis: int) -> Fn:
    def f(d, i):
        plan = plans.gather_elements_plan(d.shape, i.shape, axis)
        return _lowering.direct(d, i[..., None], plan)

    return f


def _nd_by_iota(d, i):
    """GatherND batch_dims=1 with the batch position as one more index component."""
    q, k = i.ndim, i.shape[-1]
    batch = lax.broadcasted_iota(i.dtype, (*i.shape[:-1], 1), 0)
    indexed = tuple(range(k + 1))
    dn = lax.GatherDimensionNumbers(
        offset_dims=tuple(range(q - 1, q - 1 + d.ndim - k - 1)),
        collapsed_slice_dims=indexed,
        start_index_map=indexed,
    )
    return lax.gather(
        d, jnp.concatenate([batch, i], -1), dn, (1,) * (k + 1) + d.shape[k + 1 :], mode=_PROMISE
    )


def _nd_batching(d, i):
    return _lowering.direct(d, i, plans.gather_nd_plan(d.shape, i.shape, 1))


def _fill_select(plan_fn: Callable[..., plans.GatherPlan], attribute: int, signed: bool) -> Fn:
    """ "fill" as a select after the direct gather, the bounds in the library's unsigned
    arithmetic, or (``signed``) a compare and select to normalise and a signed clamp."""

    def f(d, i):
        plan = plan_fn(d.shape, i.shape, attribute)
        if signed:
            sizes = np.asarray(plan.index_sizes, np.int32)
            sizes = sizes if plan.tuple_indices else sizes[0]
            ok = (i >= -sizes) & (i < sizes)
            idx = jnp.clip(jnp.where(i < 0, i + sizes, i), 0, sizes - 1)
        else:
            ok, idx = (
                _traced_bounds.in_bounds_mask(plan, i),
                _traced_bounds.working_indices(plan, i, clip=False),
            )
        ok = jnp.all(ok, axis=-1) if plan.tuple_indices else ok
        idx = idx if plan.tuple_indices else idx[..., None]
        return jnp.where(ok, _lowering.direct(d, idx, plan), jnp.zeros((), d.dtype))

    return f


def _promised(plan_fn: Callable[..., plans.GatherPlan], attribute: int, dtype: Any) -> Fn:
    """The direct gather on the raw indices in ``dtype``."""

    def f(d, i):
        plan = plan_fn(d.shape, i.shape, attribute)
        idx = i.astype(dtype)
        return _lowering.direct(d, idx if plan.tuple_indices else idx[..., None], plan)

    return f


def choices() -> list[Choice]:
    cpu = [
        Choice("short_rows_in_bytes", "gather_nd rows", "default mode", ("short_rows_in_bytes",)),
        Choice("short_rows_in_bytes", "gather_nd rows int8", "default mode", ("short_rows_in_bytes",)),
        # bfloat16 rows of 64: a fill's select XLA vectorises reads them as they are.
        Choice(
            "short_rows_in_bytes", "gather_nd rows bfloat16", "promise_in_bounds", ("short_rows_in_bytes",)
        ),
        Choice(
            "short_rows_in_bytes", "gather_nd batch_dims=1 rows", "default mode", ("short_rows_in_bytes",)
        ),
        Choice("linear_derivative", "gather_elements axis -1", "backward", ("linear_derivative",)),
        Choice("linear_derivative", "gather_elements axis 0", "backward", ("linear_derivative",)),
        Choice("linear_derivative", "gather_nd scalars", "backward", ("linear_derivative",)),
        Choice("linear_derivative", "gather_nd batch_dims=1 scalars", "backward", ("linear_derivative",)),
        Choice("linear_derivative", "vmap gather_elements axis -1", "backward", ("linear_derivative",)),
        Choice("moved_axis_derivative", "gather axis 1", "backward", ("moved_axis_derivative",)),
        Choice("moved_axis_derivative", "gather axis 1 bfloat16", "backward", ("moved_axis_derivative",)),
        Choice(
            "leading_block_derivative",
            "gather axis 1, 256 of 4096 columns",
            "backward",
            ("leading_block_derivative",),
        ),
        *(
            Choice(
                "columns_by_written_indices",
                f"gather axis 1{dt}",
                "promise_in_bounds",
                ("columns_by_written_indices",),
            )
            for dt in (" bfloat16", " int8")  # 1- and 2-byte data only
        ),
        *(
            Choice("column_fill_from_pad", case, "default mode", ("column_fill_from_pad",))
            for case in ("gather axis 1 int8", FEW_COLUMN_IDS.name)
        ),
        Choice(
            "column_fill_by_the_direct_gather",
            "gather axis 1 bfloat16",
            "default mode",
            ("column_fill_by_the_direct_gather",),
        ),
        *(
            Choice(
                "batched_nd_by_linear_index",
                "gather_nd batch_dims=1 scalars",
                what,
                ("batched_nd_by_linear_index",),
            )
            for what in ("default mode", "promise_in_bounds")
        ),
        Choice(
            "batched_nd_fill_from_pad",
            "gather_nd batch_dims=1, 1024 pairs",
            "default mode",
            ("batched_nd_fill_from_pad",),
        ),
        *(
            Choice("short_lookup_fill_from_pad", case, "default mode", ("short_lookup_fill_from_pad",))
            for case in ("gather axis 0, 64 ids", COLUMN_LOOKUP.name)
        ),
        Choice("nd_fill_in_two_loops", PAIRS.name, "default mode", ("nd_fill_in_two_loops",)),
        Choice(
            "nd_fill_from_written_indices", INT4_PAIRS.name, "default mode", ("nd_fill_from_written_indices",)
        ),
        Choice("rows_pinned_by_a_clamp", CLAMPED.name, "default mode", ("rows_pinned_by_a_clamp",)),
        Choice(
            "fill_pinned_instead_of_rows", FEW_ROWS.name, "default mode", ("fill_pinned_instead_of_rows",)
        ),
        Choice("fill_pinned_for_elements", OWN_ELEMENTS.name, "default mode", ("fill_pinned_for_elements",)),
        Choice(
            "one_slice_fill_from_a_table", ONE_SLICE.name, "default mode", ("one_slice_fill_from_a_table",)
        ),
        Choice(
            "one_slice_fill_of_pinned_bits",
            ONE_COLUMN.name,
            "default mode",
            ("one_slice_fill_of_pinned_bits",),
        ),
        *(
            Choice("tuple_mask_by_and", case, "default mode", ("tuple_mask_by_and",))
            for case in ("gather_nd rows", "gather_nd rows bfloat16", "gather_nd rows int8", FEW_PAIRS.name)
        ),
    ]
    ge, nd = plans.gather_elements_plan, plans.gather_nd_plan
    generic = [
        Choice(
            "batch dims as operand_batching_dims (vs index components from an iota)",
            "gather_elements axis 0",
            "promise_in_bounds",
            chosen=_elements_batching(0),
            alternative=_elements_by_iota(0),
        ),
        Choice(
            "batch dims as operand_batching_dims (vs index components from an iota)",
            "gather_nd batch_dims=1 scalars",
            "promise_in_bounds",
            chosen=_nd_batching,
            alternative=_nd_by_iota,
        ),
        *(
            Choice(
                "bounds in unsigned arithmetic (vs a signed normalise and clamp)",
                case,
                "default mode",
                chosen=_fill_select(plan_fn, 0, signed=False),
                alternative=_fill_select(plan_fn, 0, signed=True),
            )
            for plan_fn, case in ((ge, "gather_elements axis 0"), (nd, "gather_nd scalars"))
        ),
        Choice(
            "int32 working indices where the axes allow (vs int64)",
            "gather_nd scalars",
            "promise_in_bounds",
            chosen=_promised(nd, 0, jnp.int32),
            alternative=_promised(nd, 0, jnp.int64),
            x64=True,
        ),
    ]
    return cpu + generic


# ---- timing ------------------------------------------------------------------------------------------


def _compiled(fn: Fn, d: jax.Array, i: jax.Array) -> tuple[Callable[[], Any], str]:
    """A call of ``fn`` compiled now, and its program's text."""
    compiled = jax.jit(fn).lower(d, i).compile()
    # Without source locations, which differ between call sites of the same program.
    text = re.sub(r"metadata=\{[^}]*\}|\nFileNames\n.*?\n\n\n", "", compiled.as_text(), flags=re.S)
    return (lambda: compiled(d, i).block_until_ready()), text


def run_choice(choice: Choice, rounds: int, reps: int, scale: int = 1) -> dict[str, Any]:
    """Times the three programs of ``choice``, after checking that they agree; returns its row."""
    case = CASES[choice.case]
    case = case.scaled(scale) if scale > 1 else case
    data, indices = bench.make_inputs(case, np.random.default_rng(0))
    # On this process's CPU, whatever the default device: the lowerings are XLA:CPU's.
    on_the_cpu = jax.default_device(jax.devices("cpu")[0])
    with on_the_cpu, x64_enabled() if choice.x64 else contextlib.nullcontext():
        d, i = jnp.asarray(data), jnp.asarray(indices)
        program = _program(choice, case)
        (with_, text), (again, _) = _compiled(program, d, i), _compiled(program, d, i)
        if choice.without:
            with _cpu.without(*choice.without):
                without, other = _compiled(program, d, i)
        else:
            assert choice.alternative is not None
            without, other = _compiled(choice.alternative, d, i)
        if other == text:
            raise ValueError(f"{choice.name} does not apply to {case.name}: both programs are the same")
        calls = {"with": with_, "A/A": again, "without": without}
        expected = np.asarray(calls["with"]()).astype(np.float64)
        for name in ("A/A", "without"):
            np.testing.assert_allclose(np.asarray(calls[name]()).astype(np.float64), expected, rtol=1e-5)
        times = bench.paired_rounds(calls, rounds, reps)
    ratio, interval = bench.paired(times["without"], times["with"])
    aa, aa_interval = bench.paired(times["A/A"], times["with"])
    return {
        "choice": choice.name,
        "case": choice.case,
        "what": choice.what,
        "without": list(choice.without),
        "with_ms": float(np.median(times["with"])) * 1e3,
        "without_ms": float(np.median(times["without"])) * 1e3,
        "without_over_with": ratio,
        "interval": interval,
        "aa": aa,
        "aa_interval": aa_interval,
        "verdict": verdict(interval, aa_interval),
        "rounds_s": {k: [float(t) for t in v] for k, v in times.items()},
    }


def verdict(interval: tuple[float, float, float], aa_interval: tuple[float, float, float]) -> str:
    """ "pays" where the ratio's interval lies above the A/A interval and 1.0, "costs" where
    below both, "level" otherwise: within what this run cannot tell apart."""
    if interval[0] > max(aa_interval[1], 1.0):
        return "pays"
    if interval[1] < min(aa_interval[0], 1.0):
        return "costs"
    return "level"


# ---- sharding locality of the batch-dims choice --------------------------------------------------

_COLLECTIVES = ("all-gather", "all-reduce", "all-to-all", "collective-permute")


def _collectives_in(fn: Callable[..., Any], *args: Any) -> list[str]:
    hlo = jax.jit(fn).lower(*args).compile().as_text()
    return [c for c in _COLLECTIVES if c in hlo]


def collectives() -> list[dict[str, Any]]:
    """Collectives XLA's partitioner adds, forward and backward, when the batch dim is sharded
    over every device: the reason for operand_batching_dims (run with several devices)."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()), ("x",))
    n = len(jax.devices())
    rng = np.random.default_rng(0)
    put = lambda x, *spec: jax.device_put(jnp.asarray(x), NamedSharding(mesh, P(*spec)))
    data = lambda *shape: rng.standard_normal(shape).astype(np.float32)
    ints = lambda high, *shape: rng.integers(0, high, shape).astype(np.int32)
    grad = lambda f: jax.grad(lambda d, i: f(d, i).sum())
    cases = [
        ("gather_elements axis 1, rows sharded", _elements_batching(1), _elements_by_iota(1),
         put(data(8 * n, 128), "x", None), put(ints(128, 8 * n, 128), "x", None)),
        ("gather_elements axis 0, columns sharded", _elements_batching(0), _elements_by_iota(0),
         put(data(128, 8 * n), None, "x"), put(ints(128, 128, 8 * n), None, "x")),
        ("gather_nd batch_dims=1 rows, batch sharded", _nd_batching, _nd_by_iota,
         put(data(n, 100, 16), "x"), put(ints(100, n, 5, 1), "x")),
        ("gather_nd batch_dims=1 scalars, batch sharded", _nd_batching, _nd_by_iota,
         put(data(n, 32, 32), "x"), put(ints(32, n, 5, 2), "x")),
    ]  # fmt: skip
    return [
        {
            "shape": name,
            "devices": n,
            "chosen": _collectives_in(chosen, d, i),
            "alternative": _collectives_in(alt, d, i),
            "chosen_backward": _collectives_in(grad(chosen), d, i),
            "alternative_backward": _collectives_in(grad(alt), d, i),
        }
        for name, chosen, alt, d, i in cases
    ]


def _format(row: dict[str, Any]) -> str:
    span = lambda iv: f"{iv[0]:.2f}-{iv[1]:.2f}"
    return (
        f"{row['choice'][:40]:40s} {row['case'][:34]:34s} {row['what'][:17]:17s} "
        f"{row['with_ms']:8.3f} {row['without_ms']:8.3f} {row['without_over_with']:6.2f} "
        f"{span(row['interval']):>11s} {row['aa']:5.2f} {span(row['aa_interval']):>11s} {row['verdict']}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--scale", type=int, default=1, help="divide every dimension by this")
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument("--only", metavar="TEXT", help="only the rows whose choice or case contains TEXT")
    parser.add_argument(
        "--no-tune-allocator", dest="tune_allocator", action="store_false",
        help="keep glibc's defaults (fresh-page faults then weigh on every program)",
    )  # fmt: skip
    parser.add_argument(
        "--collectives", action="store_true",
        help="instead of timing, list the collectives of the batch-dims choice under SPMD "
        "(run with XLA_FLAGS=--xla_force_host_platform_device_count=8)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.collectives:
        print(f"{'shape':48s} {'chosen':>12s} {'alternative':>12s} {'chosen bwd':>12s} {'alt bwd':>12s}")
        show = lambda c: ", ".join(c) or "none"
        for row in collectives():
            print(
                f"{row['shape']:48s} {show(row['chosen']):>12s} {show(row['alternative']):>12s} "
                f"{show(row['chosen_backward']):>12s} {show(row['alternative_backward']):>12s}"
            )
        return 0
    if args.tune_allocator:
        jax_gather.tune_cpu_allocator()
    print(
        f"{'choice':40s} {'case':34s} {'program':17s} {'with ms':>8s} {'w/o ms':>8s} {'w/o/w':>6s} "
        f"{'interval':>11s} {'A/A':>5s} {'A/A int.':>11s} verdict"
    )
    rows = []
    for choice in choices():
        if args.only and args.only not in choice.name and args.only not in choice.case:
            continue
        if "column" in choice.name and not _cpu.xla_widens_column_indices():
            print(f"{choice.name:40s} {choice.case:34s} not chosen on this CPU (XLA keeps 32-bit indices)")
            continue
        past_inline = choice.name == "column_fill_from_pad" and choice.case != FEW_COLUMN_IDS.name
        if past_inline and _cpu.xla_scalarises_the_column_pad():
            print(f"{choice.name:40s} {choice.case:34s} not chosen on this CPU (XLA leaves its loop scalar)")
            continue
        row = run_choice(choice, args.rounds, args.reps, args.scale)
        rows.append(row)
        print(_format(row), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": bench.describe_machine(), "rounds": args.rounds, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
