"""The single ``lax.gather`` of each op, and the derivative it is given.

Gather along a non-leading axis differentiates, by default, into a scatter-add along that
axis: a strided scatter, measured 7x slower on CPU than scattering whole rows (data 512x4096,
2048 indices, axis 1: 28 ms against 3.9 ms). Its derivative is therefore defined as the same
gather taken as rows of a view with the axis moved first; the transpose of that is a row
scatter between two transposes. The primal stays the direct gather.

On CPU, a gather whose slices end in a short contiguous row (16 to 64 elements of data's last
dim) is compiled by XLA into a copy loop that LLVM unrolls fully into scalar moves, 2.4-3.6x
slower per byte than the vector copy it emits for longer rows (docs/performance.md). Taking
the same rows as bytes (a bitcast of data to uint8, the same dimension numbers with the last
slice size times the item size, and a bitcast back) gives XLA a loop that LLVM keeps and
vectorises. It is bit-exact, selected for the CPU platform only (``lax.platform_dependent``:
other platforms lower the direct gather), and differentiated as the direct gather.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_gather.plans import GatherPlan, gather_plan

_PROMISE = lax.GatherScatterMode.PROMISE_IN_BOUNDS

# Row lengths (elements) where the byte view was measured faster on CPU; below 16 it is a wash
# or slower, above 64 XLA's own loop is already vectorised.
BYTE_ROWS = range(16, 65)


def gather(data: jax.Array, idx: jax.Array, plan: GatherPlan) -> jax.Array:
    """``lax.gather`` of ``plan`` on in-bounds index vectors ``idx``."""
    if plan.op_name == "Gather" and plan.index_axes[0] != 0:
        return _gather_off_leading_axis(data, idx, plan)
    if rows_as_bytes_pays(data.shape, data.dtype, plan):
        return _gather_rows_as_bytes(data, idx, plan)
    return _direct(data, idx, plan)


def _direct(data: jax.Array, idx: jax.Array, plan: GatherPlan) -> jax.Array:
    return lax.gather(data, idx, plan.dimension_numbers, plan.slice_sizes, mode=_PROMISE)


def rows_as_bytes_pays(shape: tuple, dtype: np.dtype, plan: GatherPlan) -> bool:
    """Whether the CPU lowering gathers ``plan``'s rows as bytes: data's last dim is taken whole
    by every slice, ends the output, has a length in ``BYTE_ROWS``, and its elements are 2, 4 or
    8 bytes of a non-complex type (a byte is already a byte; complex has no bitcast)."""
    dtype = np.dtype(dtype)
    real = jnp.issubdtype(dtype, jnp.floating) or jnp.issubdtype(dtype, jnp.integer)  # bfloat16 is kind "V"
    if len(shape) < 2 or not real or dtype.itemsize not in (2, 4, 8):
        return False
    if not all(isinstance(d, int) for d in (*shape, *plan.output_shape)):
        return False  # symbolic dims (jax.export): StableHLO cannot refine a shape-changing bitcast
    last, dn = len(shape) - 1, plan.dimension_numbers
    width = shape[-1]
    return (
        width in BYTE_ROWS
        and plan.slice_sizes[-1] == width
        and bool(dn.offset_dims)
        and dn.offset_dims[-1] == len(plan.output_shape) - 1
        and last not in dn.collapsed_slice_dims + dn.operand_batching_dims
    )


def _as_bytes(data: jax.Array, idx: jax.Array, plan: GatherPlan) -> jax.Array:
    item = data.dtype.itemsize
    rows = lax.bitcast_convert_type(data, jnp.uint8).reshape(*data.shape[:-1], -1)
    slice_sizes = (*plan.slice_sizes[:-1], plan.slice_sizes[-1] * item)
    out = lax.gather(rows, idx, plan.dimension_numbers, slice_sizes, mode=_PROMISE)
    return lax.bitcast_convert_type(out.reshape(*out.shape[:-1], -1, item), data.dtype)


def _fastest(data: jax.Array, idx: jax.Array, plan: GatherPlan) -> jax.Array:
    if not rows_as_bytes_pays(data.shape, data.dtype, plan):
        return _direct(data, idx, plan)
    return lax.platform_dependent(
        data, idx,
        cpu=functools.partial(_as_bytes, plan=plan),
        default=functools.partial(_direct, plan=plan),
    )


@functools.partial(jax.custom_jvp, nondiff_argnums=(2,))
def _gather_rows_as_bytes(data: jax.Array, idx: jax.Array, plan: GatherPlan) -> jax.Array:
    return _fastest(data, idx, plan)


@_gather_rows_as_bytes.defjvp
def _gather_rows_as_bytes_jvp(plan, primals, tangents):
    data, idx = primals
    data_dot, _ = tangents  # integer indices have no tangent
    return _gather_rows_as_bytes(data, idx, plan), _direct(data_dot, idx, plan)


def _rows_of_moved_axis(data: jax.Array, idx: jax.Array, plan: GatherPlan) -> jax.Array:
    """The same result as ``_direct`` for Gather, computed as rows of ``moveaxis(data, a, 0)``."""
    axis, q = plan.index_axes[0], idx.ndim - 1
    moved = jnp.moveaxis(data, axis, 0)
    rows = gather_plan(moved.shape, idx.shape[:-1], 0)
    out = lax.gather(moved, idx, rows.dimension_numbers, rows.slice_sizes, mode=_PROMISE)
    return jnp.moveaxis(out, tuple(range(q)), tuple(range(axis, axis + q)))


@functools.partial(jax.custom_jvp, nondiff_argnums=(2,))
def _gather_off_leading_axis(data: jax.Array, idx: jax.Array, plan: GatherPlan) -> jax.Array:
    return _fastest(data, idx, plan)


@_gather_off_leading_axis.defjvp
def _gather_off_leading_axis_jvp(plan, primals, tangents):
    data, idx = primals
    data_dot, _ = tangents  # integer indices have no tangent
    return _gather_off_leading_axis(data, idx, plan), _rows_of_moved_axis(data_dot, idx, plan)
