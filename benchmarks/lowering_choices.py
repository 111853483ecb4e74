"""Each lowering choice of jax_gather, timed against the alternative it was chosen over.

    python benchmarks/lowering_choices.py [--rounds N] [--scale D] [--json FILE] [--only TEXT]
                                          [--no-tune-allocator]

For every (choice, shape) it prints the paired ratio alternative / chosen, the median over
rounds of per-round ratios (the machine is shared: absolute times drift, paired ratios do not).
Above 1 the choice is faster. ``--scale D`` divides every dimension by D (the tests use it to
check that each pair of variants computes the same thing). Like ``python -m jax_gather bench``
it applies ``tune_cpu_allocator`` first, so that both programs are timed without fresh-page
faults. docs/performance.md quotes a run.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import sys
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import jax_gather
from jax_gather import _bounds, _lowering, bench, plans
from jax_gather._x64 import x64_enabled

_PROMISE = lax.GatherScatterMode.PROMISE_IN_BOUNDS
Fn = Callable[[jax.Array, jax.Array], jax.Array]


@dataclasses.dataclass(frozen=True)
class Choice:
    """A lowering decision on one shape: the chosen program and the rejected one."""

    name: str
    shape: str
    make: Callable[[int], tuple[np.ndarray, np.ndarray]]  # scale divisor -> (data, indices)
    chosen: Fn
    alternative: Fn
    x64: bool = False  # build and run both under jax_enable_x64


def _rng() -> np.random.Generator:
    return np.random.default_rng(0)


def _data(*shape: int) -> np.ndarray:
    return _rng().standard_normal(shape, dtype=np.float32)


def _ints(high: int, *shape: int) -> np.ndarray:
    return _rng().integers(0, high, shape).astype(np.int32)


def _s(n: int, scale: int) -> int:
    return max(2, n // scale)


# ---- GatherElements / GatherND batch dims: operand_batching_dims or iota index components -------


def _elements_batching(axis: int) -> Fn:
    def f(d, i):
        plan = plans.gather_elements_plan(d.shape, i.shape, axis)
        return lax.gather(d, i[..., None], plan.dimension_numbers, plan.slice_sizes, mode=_PROMISE)

    return f


def _elements_iota(axis: int) -> Fn:
    """The lowering before operand_batching_dims existed (JAX's take_along_axis used it): every
    non-axis coordinate becomes an index component read from an iota."""

    def f(d, i):
        r = d.ndim
        parts = [i if k == axis else lax.broadcasted_iota(i.dtype, i.shape, k) for k in range(r)]
        dn = lax.GatherDimensionNumbers(
            offset_dims=(), collapsed_slice_dims=tuple(range(r)), start_index_map=tuple(range(r))
        )
        return lax.gather(d, jnp.stack(parts, -1), dn, (1,) * r, mode=_PROMISE)

    return f


def _nd_batching(d, i):
    plan = plans.gather_nd_plan(d.shape, i.shape, 1)
    return lax.gather(d, i, plan.dimension_numbers, plan.slice_sizes, mode=_PROMISE)


def _nd_iota(d, i):
    """batch_dims=1 as one more index component (the batch position) instead of a batching dim."""
    q, k = i.ndim, i.shape[-1]
    batch = lax.broadcasted_iota(i.dtype, i.shape[:-1] + (1,), 0)
    full = jnp.concatenate([batch, i], axis=-1)
    indexed = tuple(range(k + 1))
    dn = lax.GatherDimensionNumbers(
        offset_dims=tuple(range(q - 1, q - 1 + d.ndim - k - 1)),
        collapsed_slice_dims=indexed,
        start_index_map=indexed,
    )
    return lax.gather(d, full, dn, (1,) * (k + 1) + d.shape[k + 1 :], mode=_PROMISE)


# ---- bounds: clamp ourselves then promise, or the gather's own modes -----------------------------


def _ours(op: Callable[..., jax.Array], attribute: int, mode: str) -> Fn:
    return lambda d, i: op(d, i, attribute, mode=mode, **({"fill_value": 0.0} if mode == "fill" else {}))


def _lax_gather_mode(mode: lax.GatherScatterMode) -> Fn:
    def f(d, i):
        plan = plans.gather_plan(d.shape, i.shape, 0)
        return lax.gather(
            d,
            i[..., None],
            plan.dimension_numbers,
            plan.slice_sizes,
            mode=mode,
            fill_value=0.0 if mode == lax.GatherScatterMode.FILL_OR_DROP else None,
        )

    return f


# ---- bounds arithmetic: unsigned min(i, i + s, s - 1), or a signed normalise-and-clamp -------------


def _signed_fill(plan_fn: Callable[..., plans.GatherPlan], attribute: int) -> Fn:
    """The "fill" mode with a compare and select to normalise negatives, a signed clamp, and a
    mask from two signed compares (what jax_gather did before the unsigned arithmetic)."""

    def f(d, i):
        plan = plan_fn(d.shape, i.shape, attribute)
        sizes = np.asarray(plan.index_sizes, np.int32)
        sizes = sizes[0] if plan.append_index_vector_dim else sizes
        ok = (i >= -sizes) & (i < sizes)
        idx = jnp.clip(jnp.where(i < 0, i + sizes, i), 0, sizes - 1)
        if plan.append_index_vector_dim:
            idx = idx[..., None]
        else:
            ok = jnp.all(ok, axis=-1)
        out = _lowering.gather(d, idx, plan)  # the library's own gather, so only the arithmetic differs
        return jnp.where(ok, out, jnp.zeros((), d.dtype))

    return f


def _fill_by(
    lowering: Callable[..., jax.Array], plan_fn: Callable[..., plans.GatherPlan], attribute: int
) -> Fn:
    """The "fill" mode through one of jax_gather's two fill lowerings, whichever the library
    would pick: ``_lowering._select_fill`` or ``_lowering._read_fill_from_padding``."""

    def f(d, i):
        plan = plan_fn(d.shape, i.shape, attribute)
        ok = _bounds.in_bounds_mask(plan, i)
        ok = ok if plan.append_index_vector_dim else jnp.all(ok, axis=-1)
        return lowering(d, i, ok, jnp.zeros((), d.dtype), plan)

    return f


# ---- element gathers on CPU: one linear index (GatherND forward, every backward), or not ---------


def _gathered_by(
    lowering: Callable[..., jax.Array],
    plan_fn: Callable[..., plans.GatherPlan],
    attribute: int,
    clip: bool = True,
) -> Fn:
    """``lowering`` as the gather after the library's index arithmetic ("clip"; without ``clip``,
    negatives normalised only), differentiated as JAX differentiates it: the alternatives to the
    linear index, forward and backward."""

    def f(d, i):
        plan = plan_fn(d.shape, i.shape, attribute)
        return lowering(d, _bounds.index_vectors(plan, i, clip=clip), plan)

    return f


def _tuples(batch_dims: int) -> Fn:
    """The gather of index tuples, with the library's own index arithmetic before it."""
    return _gathered_by(_lowering._direct, plans.gather_nd_plan, batch_dims, clip=False)


def _tuple_select(batch_dims: int) -> Fn:
    """ "fill" as the select after the gather of index tuples (the library's bfloat16 fill
    before the linear index)."""

    def f(d, i):
        plan = plans.gather_nd_plan(d.shape, i.shape, batch_dims)
        ok = jnp.all(_bounds.in_bounds_mask(plan, i), axis=-1)
        return _bounds.select_exact(ok, _tuples(batch_dims)(d, i), jnp.zeros((), d.dtype))

    return f


# ---- the working index dtype -----------------------------------------------------------------------


def _plain(plan_fn: Callable[..., plans.GatherPlan], attribute: int, dtype: Any) -> Fn:
    def f(d, i):
        plan = plan_fn(d.shape, i.shape, attribute)
        idx = i.astype(dtype)[..., None] if plan.append_index_vector_dim else i.astype(dtype)
        return lax.gather(d, idx, plan.dimension_numbers, plan.slice_sizes, mode=_PROMISE)

    return f


# ---- GatherND rows: an index tuple, or one linearised index into the flattened indexed dims ------


def _nd_rows_linear(d, i):
    k = i.shape[-1]
    flat = d.reshape((-1,) + d.shape[k:])
    strides = np.cumprod((1,) + d.shape[1:k][::-1])[::-1].astype(np.int32)
    return jnp.take(flat, i @ strides, axis=0, mode="clip")


# ---- short rows: gathered in narrower units on CPU, or by the direct gather ----------------------


def _as(
    dtype: Any, make: Callable[[int], tuple[np.ndarray, np.ndarray]]
) -> Callable[[int], tuple[np.ndarray, np.ndarray]]:
    def f(sc):
        d, i = make(sc)
        return (d * 40).astype(dtype), i

    return f


# ---- the backward pass of Gather off the leading axis --------------------------------------------


def _grad(f: Fn) -> Fn:
    return jax.grad(lambda d, i: f(d, i).sum())


def _gather_axis1_plain(d, i):
    plan = plans.gather_plan(d.shape, i.shape, 1)
    return lax.gather(d, i[..., None], plan.dimension_numbers, plan.slice_sizes, mode=_PROMISE)


def choices() -> list[Choice]:
    ge = lambda sc: (_data(_s(2048, sc), _s(2048, sc)), _ints(_s(2048, sc), _s(2048, sc), _s(2048, sc)))
    nd_bd1_rows = lambda sc: (
        _data(_s(64, sc), _s(1024, sc), _s(64, sc)),
        _ints(_s(1024, sc), _s(64, sc), _s(2048, sc), 1),
    )
    nd_bd1_scalars = lambda sc: (
        _data(_s(64, sc), _s(256, sc), _s(256, sc)),
        _ints(_s(256, sc), _s(64, sc), _s(16384, sc), 2),
    )
    embedding = lambda sc: (_data(_s(50000, sc), _s(512, sc)), _ints(_s(50000, sc), _s(8192, sc)))
    nd_rows = lambda sc: (_data(_s(256, sc), _s(256, sc), _s(64, sc)), _ints(_s(256, sc), _s(100000, sc), 2))
    nd_scalars = lambda sc: (_data(_s(1024, sc), _s(1024, sc)), _ints(_s(1024, sc), _s(1000000, sc), 2))
    axis1 = lambda sc: (_data(_s(512, sc), _s(4096, sc)), _ints(_s(4096, sc), _s(2048, sc)))
    nd_scalars3 = lambda sc: (
        _data(_s(100, sc), _s(100, sc), _s(100, sc)),
        _ints(_s(100, sc), _s(1000000, sc), 3),
    )
    narrow_embedding = lambda sc: (_data(_s(50000, sc), _s(32, sc)), _ints(_s(50000, sc), _s(65536, sc)))
    # 64 ids of 512-element rows at every scale: a short lookup (lowering.SHORT_LOOKUP_INDICES).
    short_lookup = lambda sc: (_data(_s(50000, sc), 512), _ints(_s(50000, sc), 64))
    g, ge_op, nd = jax_gather.gather, jax_gather.gather_elements, jax_gather.gather_nd
    ge_plan, nd_plan = plans.gather_elements_plan, plans.gather_nd_plan
    select = functools.partial(_fill_by, _lowering._select_fill)
    unsigned = "fill: unsigned min(i, i+s, s-1) (vs a select to normalise and a signed clamp)"
    padded = "fill on CPU: read from a pad of data (vs a select after the gather)"
    padded_short = (
        "fill on CPU, lookups of up to 128 ids: read from a pad of data (vs a select after the gather)"
    )
    select_long = "fill on CPU, longer row lookups: the select (vs reading it from a pad of data, rejected)"
    short_rows = "rows of 16-64 elements in narrower units on CPU (vs the direct gather)"
    linear = "GatherND elements on CPU: one linear index (vs the index tuple)"
    backward = "element gathers' backward on CPU: one scatter by a linear index into all of data (vs the gather's own transpose)"
    return [
        Choice(
            "batch dims as operand_batching_dims (vs iota index components)",
            "gather_elements axis 0, 2048x2048",
            ge,
            _elements_batching(0),
            _elements_iota(0),
        ),
        Choice(
            "batch dims as operand_batching_dims (vs iota index components)",
            "gather_elements axis 1, 2048x2048",
            ge,
            _elements_batching(1),
            _elements_iota(1),
        ),
        Choice(
            "batch dims as operand_batching_dims (vs iota index components)",
            "gather_nd batch_dims=1 rows",
            nd_bd1_rows,
            _nd_batching,
            _nd_iota,
        ),
        Choice(
            "batch dims as operand_batching_dims (vs iota index components)",
            "gather_nd batch_dims=1 scalars",
            nd_bd1_scalars,
            _nd_batching,
            _nd_iota,
        ),
        Choice(
            "clip: clamp, then a promised gather (vs the gather's CLIP mode)",
            "gather axis 0 (embedding)",
            embedding,
            _ours(g, 0, "clip"),
            _lax_gather_mode(lax.GatherScatterMode.CLIP),
        ),
        Choice(
            "fill: clamp, gather, select (vs the gather's FILL_OR_DROP mode)",
            "gather axis 0 (embedding)",
            embedding,
            _ours(g, 0, "fill"),
            _lax_gather_mode(lax.GatherScatterMode.FILL_OR_DROP),
        ),
        Choice(
            unsigned, "gather_elements axis -1, 2048x2048", ge, select(ge_plan, -1), _signed_fill(ge_plan, -1)
        ),
        Choice(
            unsigned, "gather_elements axis 0, 2048x2048", ge, select(ge_plan, 0), _signed_fill(ge_plan, 0)
        ),
        Choice(unsigned, "gather_nd scalars", nd_scalars, select(nd_plan, 0), _signed_fill(nd_plan, 0)),
        Choice(
            unsigned,
            "gather_nd scalars int8",
            _as(np.int8, nd_scalars),
            select(nd_plan, 0),
            _signed_fill(nd_plan, 0),
        ),
        Choice(
            padded, "gather_elements axis -1, 2048x2048", ge, _ours(ge_op, -1, "fill"), select(ge_plan, -1)
        ),
        Choice(padded, "gather_elements axis 0, 2048x2048", ge, _ours(ge_op, 0, "fill"), select(ge_plan, 0)),
        Choice(
            padded,
            "gather_elements axis 0 int8",
            _as(np.int8, ge),
            _ours(ge_op, 0, "fill"),
            select(ge_plan, 0),
        ),
        Choice(padded, "gather_nd scalars", nd_scalars, _ours(nd, 0, "fill"), select(nd_plan, 0)),
        Choice(
            padded,
            "gather_nd scalars int8",
            _as(np.int8, nd_scalars),
            _ours(nd, 0, "fill"),
            select(nd_plan, 0),
        ),
        Choice(
            padded, "gather_nd batch_dims=1 scalars", nd_bd1_scalars, _ours(nd, 1, "fill"), select(nd_plan, 1)
        ),
        Choice(
            "fill on CPU: the select for bfloat16 (vs reading it from a pad of data, rejected)",
            "gather_nd scalars bfloat16",
            _as(jnp.bfloat16, nd_scalars),
            _ours(nd, 0, "fill"),
            _fill_by(_lowering._read_fill_from_padding, nd_plan, 0),
        ),
        Choice(
            padded_short,
            "gather axis 0, 64 ids of 50000x512",
            short_lookup,
            _ours(g, 0, "fill"),
            select(plans.gather_plan, 0),
        ),
        Choice(
            padded_short,
            "gather axis 0, 64 ids of 50000x512 int8",
            _as(np.int8, short_lookup),
            _ours(g, 0, "fill"),
            select(plans.gather_plan, 0),
        ),
        Choice(
            select_long,
            "gather axis 0 (embedding)",
            embedding,
            _ours(g, 0, "fill"),
            _fill_by(_lowering._read_fill_from_padding, plans.gather_plan, 0),
        ),
        Choice(
            select_long,
            "gather axis 0 (embedding) int8",
            _as(np.int8, embedding),
            _ours(g, 0, "fill"),
            _fill_by(_lowering._read_fill_from_padding, plans.gather_plan, 0),
        ),
        Choice(linear, "gather_nd scalars", nd_scalars, _ours(nd, 0, "promise_in_bounds"), _tuples(0)),
        Choice(
            linear,
            "gather_nd scalars int8",
            _as(np.int8, nd_scalars),
            _ours(nd, 0, "promise_in_bounds"),
            _tuples(0),
        ),
        Choice(
            linear,
            "gather_nd batch_dims=1 scalars",
            nd_bd1_scalars,
            _ours(nd, 1, "promise_in_bounds"),
            _tuples(1),
        ),
        Choice(
            linear,
            "gather_nd scalars bfloat16",
            _as(jnp.bfloat16, nd_scalars),
            _ours(nd, 0, "promise_in_bounds"),
            _tuples(0),
        ),
        Choice(
            linear + ", the fill selected after it",
            "gather_nd scalars bfloat16",
            _as(jnp.bfloat16, nd_scalars),
            _ours(nd, 0, "fill"),
            _tuple_select(0),
        ),
        Choice(
            linear + ", backward through it",
            "grad of gather_nd scalars",
            nd_scalars,
            _grad(_ours(nd, 0, "clip")),
            _grad(_tuples(0)),
        ),
        Choice(
            linear + ", backward through it",
            "grad of gather_nd batch_dims=1 scalars",
            nd_bd1_scalars,
            _grad(_ours(nd, 1, "clip")),
            _grad(_tuples(1)),
        ),
        Choice(
            linear,
            "gather_nd scalars, 100x100x100",
            nd_scalars3,
            _ours(nd, 0, "promise_in_bounds"),
            _tuples(0),
        ),
        Choice(
            linear + ", backward through it",
            "grad of gather_nd scalars, 100x100x100",
            nd_scalars3,
            _grad(_ours(nd, 0, "clip")),
            _grad(_tuples(0)),
        ),
        Choice(
            linear,
            "gather_nd scalars float64",
            _as(np.float64, nd_scalars),
            _ours(nd, 0, "promise_in_bounds"),
            _tuples(0),
            x64=True,
        ),
        Choice(
            backward,
            "grad of gather_elements axis -1, 2048x2048",
            ge,
            _grad(_ours(ge_op, -1, "clip")),
            _grad(_gathered_by(_lowering._direct, ge_plan, -1)),
        ),
        Choice(
            backward,
            "grad of gather_elements axis 0, 2048x2048",
            ge,
            _grad(_ours(ge_op, 0, "clip")),
            _grad(_gathered_by(_lowering._direct, ge_plan, 0)),
        ),
        Choice(
            backward,
            "grad of gather_elements axis 0 bfloat16",
            _as(jnp.bfloat16, ge),
            _grad(_ours(ge_op, 0, "clip")),
            _grad(_gathered_by(_lowering._direct, ge_plan, 0)),
        ),
        Choice(
            backward + ", batch dims flattened too",
            "grad of gather_nd batch_dims=1 scalars",
            nd_bd1_scalars,
            _grad(_ours(nd, 1, "clip")),
            _grad(_gathered_by(_lowering._as_flat, nd_plan, 1)),
        ),
        Choice(
            "int32 working indices where the axes allow (vs int64)",
            "gather_elements axis 0, 2048x2048",
            ge,
            _plain(plans.gather_elements_plan, 0, jnp.int32),
            _plain(plans.gather_elements_plan, 0, jnp.int64),
            x64=True,
        ),
        Choice(
            "int32 working indices where the axes allow (vs int64)",
            "gather_nd scalars",
            nd_scalars,
            _plain(plans.gather_nd_plan, 0, jnp.int32),
            _plain(plans.gather_nd_plan, 0, jnp.int64),
            x64=True,
        ),
        Choice(
            "GatherND rows: an index tuple (vs one linearised index, rejected)",
            "gather_nd rows",
            nd_rows,
            _ours(nd, 0, "clip"),
            _nd_rows_linear,
        ),
        Choice(
            short_rows,
            "gather_nd rows",
            nd_rows,
            _ours(nd, 0, "promise_in_bounds"),
            _plain(plans.gather_nd_plan, 0, jnp.int32),
        ),
        Choice(
            short_rows,
            "gather_nd rows bfloat16",
            _as(jnp.bfloat16, nd_rows),
            _ours(nd, 0, "promise_in_bounds"),
            _plain(plans.gather_nd_plan, 0, jnp.int32),
        ),
        Choice(
            short_rows,
            "gather_nd rows int8",
            _as(np.int8, nd_rows),
            _ours(nd, 0, "promise_in_bounds"),
            _plain(plans.gather_nd_plan, 0, jnp.int32),
        ),
        Choice(
            short_rows,
            "gather_nd batch_dims=1 rows",
            nd_bd1_rows,
            _ours(nd, 1, "promise_in_bounds"),
            _plain(plans.gather_nd_plan, 1, jnp.int32),
        ),
        Choice(
            short_rows,
            "gather axis 0, 50000x32 table, 65536 ids",
            narrow_embedding,
            _ours(g, 0, "promise_in_bounds"),
            _plain(plans.gather_plan, 0, jnp.int32),
        ),
        Choice(
            "bfloat16 rows of 16 elements or more in bytes on CPU (vs the direct gather)",
            "gather axis 0 (embedding) bfloat16",
            _as(jnp.bfloat16, embedding),
            _ours(g, 0, "promise_in_bounds"),
            _plain(plans.gather_plan, 0, jnp.int32),
        ),
        Choice(
            "Gather axis 1 backward: rows of the moved axis (vs a strided scatter)",
            "grad of gather axis 1",
            axis1,
            _grad(_ours(g, 1, "promise_in_bounds")),
            _grad(_gather_axis1_plain),
        ),
    ]


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
    put = lambda x, *spec: jax.device_put(jnp.asarray(x), NamedSharding(mesh, P(*spec)))
    grad = lambda f: jax.grad(lambda d, i: f(d, i).sum())
    cases = [
        (
            "gather_elements axis 1, rows sharded",
            _elements_batching(1),
            _elements_iota(1),
            put(_data(8 * n, 128), "x", None),
            put(_ints(128, 8 * n, 128), "x", None),
        ),
        (
            "gather_elements axis 0, columns sharded",
            _elements_batching(0),
            _elements_iota(0),
            put(_data(128, 8 * n), None, "x"),
            put(_ints(128, 128, 8 * n), None, "x"),
        ),
        (
            "gather_nd batch_dims=1 rows, batch sharded",
            _nd_batching,
            _nd_iota,
            put(_data(n, 100, 16), "x"),
            put(_ints(100, n, 5, 1), "x"),
        ),
        (
            "gather_nd batch_dims=1 scalars, batch sharded",
            _nd_batching,
            _nd_iota,
            put(_data(n, 32, 32), "x"),
            put(_ints(32, n, 5, 2), "x"),
        ),
    ]
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


def _with_x64(choice: Choice, fn: Callable[[], Any]) -> Any:
    if not choice.x64:
        return fn()
    with x64_enabled():
        return fn()


def run_choice(choice: Choice, rounds: int, reps: int, scale: int = 1) -> dict[str, Any]:
    """Times both programs of ``choice``; returns the row, outputs checked equal first."""
    data, indices = choice.make(scale)

    def body():
        d, i = jnp.asarray(data), jnp.asarray(indices)
        chosen, alternative = jax.jit(choice.chosen), jax.jit(choice.alternative)
        np.testing.assert_allclose(np.asarray(chosen(d, i)), np.asarray(alternative(d, i)), rtol=1e-6)
        times = bench._paired_rounds(
            {
                "chosen": lambda: chosen(d, i).block_until_ready(),
                "alternative": lambda: alternative(d, i).block_until_ready(),
            },
            rounds,
            reps,
        )
        return times

    times = _with_x64(choice, body)
    return {
        "choice": choice.name,
        "shape": choice.shape,
        "chosen_ms": float(np.median(times["chosen"])) * 1e3,
        "alternative_ms": float(np.median(times["alternative"])) * 1e3,
        "alternative_over_chosen": bench._median_ratio(times["alternative"], times["chosen"]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--scale", type=int, default=1, help="divide every dimension by this")
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument("--only", metavar="TEXT", help="run only the choices whose name contains TEXT")
    parser.add_argument(
        "--no-tune-allocator",
        dest="tune_allocator",
        action="store_false",
        help="keep glibc's defaults (fresh-page faults then weigh on both programs)",
    )
    parser.add_argument(
        "--collectives",
        action="store_true",
        help="instead of timing, list the collectives of the batch-dims choice under "
        "SPMD (run with XLA_FLAGS=--xla_force_host_platform_device_count=8)",
    )
    args = parser.parse_args(argv)
    if args.collectives:
        print(f"{'shape':48s} {'chosen':>12s} {'alternative':>12s} {'chosen bwd':>12s} {'alt bwd':>12s}")
        for row in collectives():
            show = lambda c: ", ".join(c) or "none"
            print(
                f"{row['shape']:48s} {show(row['chosen']):>12s} {show(row['alternative']):>12s} "
                f"{show(row['chosen_backward']):>12s} {show(row['alternative_backward']):>12s}"
            )
        return 0
    if args.tune_allocator:
        jax_gather.tune_cpu_allocator()
    rows = []
    print(f"{'choice':72s} {'shape':36s} {'chosen ms':>9s} {'alt ms':>8s} {'alt/chosen':>10s}")
    for choice in choices():
        if args.only and args.only not in choice.name:
            continue
        row = run_choice(choice, args.rounds, args.reps, args.scale)
        rows.append(row)
        print(
            f"{row['choice']:72s} {row['shape']:36s} {row['chosen_ms']:9.2f} "
            f"{row['alternative_ms']:8.2f} {row['alternative_over_chosen']:10.2f}",
            flush=True,
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": bench.describe_machine(), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
