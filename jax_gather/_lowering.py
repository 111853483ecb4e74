"""The single ``lax.gather`` of each op, and the derivative it is given.

Gather along a non-leading axis differentiates, by default, into a scatter-add along that
axis: a strided scatter, measured 7x slower on CPU than scattering whole rows (data 512x4096,
2048 indices, axis 1: 28 ms against 3.9 ms). Its derivative is therefore defined as the same
gather taken as rows of a view with the axis moved first; the transpose of that is a row
scatter between two transposes. The primal stays the direct gather.

On CPU, a gather whose slices end in a short contiguous row (16 to 64 elements of data's last
dim) is compiled by XLA into a copy loop that LLVM unrolls fully into scalar moves, up to 5x
slower per byte than the vector copy it emits for longer rows (docs/performance.md). Taking
the same rows in narrower units (a bitcast of data to uint8, or to uint4 for one-byte types,
the same dimension numbers with the last slice size scaled, and a bitcast back) gives XLA a
loop that LLVM keeps and vectorises. bfloat16 rows take the same view at any length from 16
elements on: XLA:CPU otherwise gathers them as float32 between two converts, element by
element (1.4-2.8x slower, rows of 16 to 32768). The view is bit-exact, selected for the CPU
platform only (``lax.platform_dependent``: other platforms lower the direct gather), and
differentiated as the direct gather.

GatherND of full index tuples over two or more axes (every output element one element of
data) is compiled by XLA:CPU into a loop that LLVM vectorises badly: the tuple's components
are clamped and combined in vector lanes, and the loads put back into a vector one lane at a
time. The CPU lowering flattens the indexed dims of data into one (a free reshape) and gathers
by one linear index, computed from the components after each is clamped to its own axis, so
the bounds stay per axis: LLVM keeps that loop scalar (1.1-1.2x faster on the benchmark's
shapes). Every element gather (GatherElements too) is differentiated by one linear index into
the whole of data, batching dims included (their coordinate is the output position), so the
backward pass is one scatter by one index into one dim: 1.2-2.1x faster than the tuple
scatter for GatherND, 1.2-1.5x than the batched scatter of GatherElements. GatherElements'
forward gather keeps its batching dims (the linear one measured 1.0-1.25x its time). The index
is int64 where data has 2**31 elements or more (without x64 the gather stays as it is), and it
is kept to one CPU device, where no dim can be sharded (docs/performance.md).

"fill", and "checked" under plain jit, give out-of-bounds positions ``fill_value``. The
obvious lowering selects it after the gather, by the in-bounds mask; for element gathers, and
for lookups of a few rows, the CPU lowering instead pads data with one ``fill_value`` at the
end of each indexed axis and sends every out-of-bounds index to that slot (one unsigned ``min``
with the size, in place of the clamp's ``min`` with size - 1), so the gather reads the fill
itself and no select follows. For element gathers the select over the output costs more than
the pad's check on each read; for short row lookups the select's flops are what make JAX hand
the program to a worker thread (``short_row_lookup``). Its derivative is the select's, so the
backward pass scatters into data itself (by the linear index above, or as rows of the moved
axis), never into the padded shape.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_gather import _bounds
from jax_gather.plans import GatherPlan, gather_nd_plan, gather_plan

_PROMISE = lax.GatherScatterMode.PROMISE_IN_BOUNDS

# Row lengths (elements) where the narrow view was measured faster on CPU; below 16 it is a
# wash or slower, from about 80 on XLA's own loop is already vectorised.
SHORT_ROWS = range(16, 65)
# bfloat16 rows are the exception: XLA:CPU gathers bfloat16 as float32 between two converts,
# an element-wise loop at any row length, so the byte view pays from 16 elements on (measured
# 1.4-2.8x up to rows of 32768).
BFLOAT16_ROWS_FROM = 16
# Row lookups of at most this many index components read their fill from a pad of data on CPU,
# so that the program stays under the 1000 flops below which JAX's CPU client runs it on the
# calling thread: 128 components at up to 7 flops each (int64 indices) is 896.
SHORT_LOOKUP_INDICES = 128


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


# Older JAX lowers every branch of lax.platform_dependent into the program (a conditional on
# the platform), which would put two gathers where the design promises one; there the CPU
# lowerings below are not used, and every platform gets the direct gather and the select.
CPU_LOWERINGS = _release(jax.__version__) >= (0, 7, 0)


def gather(data: jax.Array, idx: jax.Array, plan: GatherPlan) -> jax.Array:
    """``lax.gather`` of ``plan`` on in-bounds index vectors ``idx``: the CPU lowering where one
    applies, differentiated by ``_gather_in_derivative`` where that is not the direct gather."""
    lowered = (
        _off_leading_axis(plan, data.shape, idx.shape)
        or row_view_dtype(data.shape, data.dtype, plan) is not None  # bitcasts have no derivative
        or flat_index_dtype(data.shape, plan) is not None
    )
    return _gather_differentiated(data, idx, plan) if lowered else _direct(data, idx, plan)


def gather_or_fill(
    data: jax.Array, indices: jax.Array, ok: jax.Array, fill: jax.Array, plan: GatherPlan
) -> jax.Array:
    """The gather of "fill" (and of traced "checked"): ``fill`` wherever ``ok``, the in-bounds
    mask of the index vectors, is False; read from a pad of data on CPU where
    ``fills_from_padding`` says so, selected after the gather otherwise."""
    if not fills_from_padding(data.shape, data.dtype, plan):
        return _select_fill(data, indices, ok, fill, plan)
    return lax.platform_dependent(
        data,
        indices,
        ok,
        fill,
        cpu=functools.partial(_read_fill_from_padding, plan=plan),
        default=functools.partial(_select_fill, plan=plan),
    )


def fills_from_padding(shape: tuple, dtype: Any, plan: GatherPlan) -> bool:
    """Whether the CPU lowering reads ``fill`` from a padded data rather than selecting it.

    Taken where every output element is one element of data (GatherElements, GatherND of full
    index tuples, Gather on 1-D data), and for short row lookups (``short_row_lookup``), except
    for bfloat16 (measured slower there) and where the process has several CPU devices
    (sharding, below). XLA fuses the pad into the gather, so data is never copied
    (tests/test_padded_fill.py asserts it); what remains is the pad's bound check on each read,
    which measured cheaper than the select of the mask over the output (docs/performance.md).
    """
    if dtype == jnp.bfloat16:
        return False
    return _element_gather_on_one_cpu(shape, plan) or short_row_lookup(shape, dtype, plan)


def short_row_lookup(shape: tuple, dtype: Any, plan: GatherPlan) -> bool:
    """Whether ``plan`` gathers slices (rows) by at most ``SHORT_LOOKUP_INDICES`` index
    components, with the direct gather (no narrow view), static dims and one CPU device.

    JAX's CPU client runs a program on the calling thread when XLA's cost analysis counts fewer
    than 1000 flops in it, and hands any other to a worker thread and waits (40-100 us on two
    cores, more than a lookup of a few rows takes). The gather counts none and the index
    arithmetic 5-7 per index component, but the select of the fill counts one per output
    element: it alone sends a lookup of 64 rows of 512 elements to a worker. Reading the fill
    from a pad keeps such a program under the count (a jitted lookup of 64 ids: 14 us against
    68 us with the select, docs/performance.md). Longer lookups are handed over either way,
    and there the pad measured no faster than the select (0.96-1.10x its time).
    """
    if not plan.dimension_numbers.offset_dims or not _static_on_one_cpu(shape, plan):
        return False
    if row_view_dtype(shape, dtype, plan) is not None:
        return False  # the narrow view's bitcast would keep XLA from fusing the pad: a copy of data
    batch = [d for i, d in enumerate(plan.output_shape) if i not in plan.dimension_numbers.offset_dims]
    return math.prod(batch) * len(plan.index_axes) <= SHORT_LOOKUP_INDICES


def _element_gather_on_one_cpu(shape: tuple, plan: GatherPlan) -> bool:
    """Whether ``plan`` takes one element of data per output element, with static dims, in a
    process with one CPU device: where the padded fill and the linear index may be used."""
    return not plan.dimension_numbers.offset_dims and _static_on_one_cpu(shape, plan)


def _static_on_one_cpu(shape: tuple, plan: GatherPlan) -> bool:
    """Whether data may be padded or reshaped by a CPU lowering: JAX 0.7.0 or later, static dims,
    and one CPU device."""
    # With several CPU devices (a simulated mesh) data may be sharded along an indexed axis;
    # padding or flattening a sharded dim makes the partitioner move data between devices (a
    # collective-permute, an all-gather) that the select and the tuple gather do not need.
    # Symbolic dims (jax.export) keep the select and the tuples, so a program exported for
    # several platforms holds one gather, as it does for the narrow view.
    return CPU_LOWERINGS and _cpu_devices() == 1 and _static(shape, plan.output_shape)


def _cpu_devices() -> int:
    try:
        return len(jax.devices("cpu"))
    except RuntimeError:  # no CPU backend (JAX_PLATFORMS without "cpu"): no CPU lowering runs
        return 0


def _select_fill(
    data: jax.Array,
    indices: jax.Array,
    ok: jax.Array,
    fill: jax.Array,
    plan: GatherPlan,
    gather_fn: Callable[..., jax.Array] | None = None,
) -> jax.Array:
    out = (gather_fn or gather)(data, _bounds.index_vectors(plan, indices, clip=False), plan)
    batch_positions = tuple(
        d for d in range(len(plan.output_shape)) if d not in plan.dimension_numbers.offset_dims
    )
    mask = lax.broadcast_in_dim(ok, plan.output_shape, batch_positions)
    return _bounds.select_exact(mask, out, fill)


@functools.partial(jax.custom_jvp, nondiff_argnums=(4,))
def _read_fill_from_padding(
    data: jax.Array, indices: jax.Array, ok: jax.Array, fill: jax.Array, plan: GatherPlan
) -> jax.Array:
    del ok  # an out-of-bounds index reads the padding instead
    padding = [(0, 0, 0)] * data.ndim
    for axis in plan.dimension_numbers.start_index_map:
        padding[axis] = (0, 1, 0)
    padded = lax.pad(data, fill, padding)
    return _direct(padded, _bounds.index_vectors(plan, indices, clip=False, past_end=True), plan)


@_read_fill_from_padding.defjvp
def _read_fill_from_padding_jvp(plan, primals, tangents):
    # Differentiated as the select, whose transpose scatters into data itself; the pad's would
    # scatter into the padded shape and then copy out the slice. The select's gather is named:
    # a custom_jvp function applied to tangents would be transposed as its primal.
    data, indices, ok, fill = primals
    data_dot, _, _, fill_dot = tangents
    tangent = _select_fill(data_dot, indices, ok, fill_dot, plan, gather_fn=_gather_in_derivative)
    return _read_fill_from_padding(*primals, plan), tangent


def _gather_in_derivative(data: jax.Array, idx: jax.Array, plan: GatherPlan) -> jax.Array:
    """The gather, linear in ``data``, whose transpose every backward pass runs: for Gather off
    the leading axis, rows of the moved axis; for element gathers on CPU, the linear index; the
    direct gather otherwise (the narrow view's bitcasts have no derivative)."""
    if _off_leading_axis(plan, data.shape, idx.shape):
        return _rows_of_moved_axis(data, idx, plan)
    return _linear_in_derivative(data, idx, plan)


def _off_leading_axis(plan: GatherPlan, *shapes: tuple) -> bool:
    # With symbolic dims JAX 0.7.0 cannot export the custom_jvp's gradient (an unsolvable dim
    # variable); JAX's own rule, a strided scatter, exports everywhere.
    return plan.op_name == "Gather" and plan.index_axes[0] != 0 and _static(*shapes)


def _static(*shapes: tuple) -> bool:
    return all(isinstance(d, int) for shape in shapes for d in shape)


def _direct(data: jax.Array, idx: jax.Array, plan: GatherPlan) -> jax.Array:
    return lax.gather(data, idx, plan.dimension_numbers, plan.slice_sizes, mode=_PROMISE)


def row_view_dtype(shape: tuple, dtype: Any, plan: GatherPlan) -> Any:
    """The unit the CPU lowering gathers ``plan``'s rows in (uint8, or uint4 for one-byte
    types), or ``None`` for the direct gather. A view is used when data's last dim is taken
    whole by every slice, ends the output, has a length in ``SHORT_ROWS`` (for bfloat16: at
    least ``BFLOAT16_ROWS_FROM``), and holds integers or reals (bool and complex have no
    bitcast); never with symbolic dims, nor on a JAX older than 0.7.0 (see ``CPU_LOWERINGS``)."""
    if not CPU_LOWERINGS:
        return None
    dtype = np.dtype(dtype)
    real = jnp.issubdtype(dtype, jnp.floating) or jnp.issubdtype(dtype, jnp.integer)  # bfloat16 is kind "V"
    if len(shape) < 2 or not real or dtype.itemsize not in (1, 2, 4, 8):
        return None
    if not _static(shape, plan.output_shape):
        return None  # symbolic dims (jax.export): StableHLO cannot refine a shape-changing bitcast
    last, dn = len(shape) - 1, plan.dimension_numbers
    width = shape[-1]
    pays = width >= BFLOAT16_ROWS_FROM if dtype == jnp.bfloat16 else width in SHORT_ROWS
    takes_rows = (
        pays
        and plan.slice_sizes[-1] == width
        and bool(dn.offset_dims)
        and dn.offset_dims[-1] == len(plan.output_shape) - 1
        and last not in dn.collapsed_slice_dims + dn.operand_batching_dims
    )
    if not takes_rows:
        return None
    return jnp.uint4 if dtype.itemsize == 1 else jnp.uint8


def flat_index_dtype(shape: tuple, plan: GatherPlan) -> Any:
    """The dtype of the linear index by which the CPU lowering can gather ``plan``'s elements
    from data flattened whole, or ``None`` where it keeps the gather as it is.

    Taken for element gathers (no offset dims: GatherElements, GatherND of full index tuples)
    of data of rank two or more, with static dims and one CPU device (a sharded dim would have
    to move to be flattened). Each element's offset combines its index components, clamped to
    their own axes, with its position along the batching dims. The index is int32 where data
    has fewer than 2**31 elements, else int64, which needs ``jax_enable_x64``: without it the
    gather stays as it is, so no linear offset ever wraps. GatherND over two or more axes
    gathers by it (``flat_forward``); every gather it is taken for scatters by it in the backward pass.
    """
    if len(shape) < 2 or not _element_gather_on_one_cpu(shape, plan):
        return None
    dtype = _linear_dtype(shape)
    return dtype if dtype == jnp.int32 or jax.config.jax_enable_x64 else None


def flat_forward(shape: tuple, plan: GatherPlan) -> bool:
    """Whether the CPU lowering's forward gather is the linear one: GatherND over two or more
    axes, where it measured faster; GatherElements keeps its batching dims forward (the linear
    gather measured 1.0-1.25x its time) and takes the linear index in its derivative only."""
    return len(plan.index_axes) >= 2 and flat_index_dtype(shape, plan) is not None


def _linear_dtype(shape: tuple) -> Any:
    return jnp.int32 if math.prod(shape) <= np.iinfo(np.int32).max else jnp.int64


def _by_linear_index(data: jax.Array, idx: jax.Array, plan: GatherPlan, kept: int) -> jax.Array:
    """``_direct`` by one linear index into data's dims from ``kept`` on, flattened into one;
    ``idx`` in bounds. Data's first ``kept`` dims (GatherND's batch dims) stay batching dims;
    a batching dim that is flattened takes its coordinate from the output position (an iota)."""
    dtype = _linear_dtype(data.shape)
    dn = plan.dimension_numbers
    coordinate = {
        axis: lax.broadcasted_iota(dtype, idx.shape[:-1], dim)
        for axis, dim in zip(dn.operand_batching_dims, dn.start_indices_batching_dims)
    }
    coordinate.update({axis: idx[..., c].astype(dtype) for c, axis in enumerate(dn.start_index_map)})
    linear = coordinate[kept]
    for axis in range(kept + 1, data.ndim):
        linear = linear * data.shape[axis] + coordinate[axis]
    flat_data = data.reshape(*data.shape[:kept], -1)
    flat = gather_nd_plan(flat_data.shape, (*linear.shape, 1), kept)
    return lax.gather(flat_data, linear[..., None], flat.dimension_numbers, flat.slice_sizes, mode=_PROMISE)


def _as_flat(data: jax.Array, idx: jax.Array, plan: GatherPlan) -> jax.Array:
    """The forward linear gather: GatherND's batch dims kept (flattening them too measured
    1.1-1.15x slower forward with ``batch_dims=1``)."""
    return _by_linear_index(data, idx, plan, kept=len(plan.dimension_numbers.operand_batching_dims))


def _as_flat_whole(data: jax.Array, idx: jax.Array, plan: GatherPlan) -> jax.Array:
    """The linear gather that derivatives take: data flattened whole, so its transpose is a
    scatter by one index into one dim."""
    return _by_linear_index(data, idx, plan, kept=0)


def _linear_in_derivative(data: jax.Array, idx: jax.Array, plan: GatherPlan) -> jax.Array:
    """The gather whose transpose the backward pass of ``plan``'s element gathers runs: by one
    linear index into the whole of data on CPU where ``flat_index_dtype`` allows, ``_direct``
    elsewhere."""
    linear = flat_index_dtype(data.shape, plan) is not None
    return _on_cpu(_as_flat_whole if linear else None, data, idx, plan)


def _cpu_lowering(shape: tuple, dtype: Any, plan: GatherPlan) -> Any:
    """The CPU lowering that replaces ``_direct`` for ``plan``, or ``None``."""
    if row_view_dtype(shape, dtype, plan) is not None:
        return _as_units
    if flat_forward(shape, plan):
        return _as_flat
    return None


def _as_units(data: jax.Array, idx: jax.Array, plan: GatherPlan) -> jax.Array:
    unit = row_view_dtype(data.shape, data.dtype, plan)
    per_item = data.dtype.itemsize * 8 // jnp.iinfo(unit).bits
    rows = lax.bitcast_convert_type(data, unit).reshape(*data.shape[:-1], -1)
    slice_sizes = (*plan.slice_sizes[:-1], plan.slice_sizes[-1] * per_item)
    out = lax.gather(rows, idx, plan.dimension_numbers, slice_sizes, mode=_PROMISE)
    return lax.bitcast_convert_type(out.reshape(*out.shape[:-1], -1, per_item), data.dtype)


def _fastest(data: jax.Array, idx: jax.Array, plan: GatherPlan) -> jax.Array:
    return _on_cpu(_cpu_lowering(data.shape, data.dtype, plan), data, idx, plan)


def _on_cpu(
    cpu: Callable[..., jax.Array] | None, data: jax.Array, idx: jax.Array, plan: GatherPlan
) -> jax.Array:
    """``cpu`` in a CPU lowering and ``_direct`` in any other; ``_direct`` alone without ``cpu``."""
    if cpu is None:
        return _direct(data, idx, plan)
    return lax.platform_dependent(
        data,
        idx,
        cpu=functools.partial(cpu, plan=plan),
        default=functools.partial(_direct, plan=plan),
    )


def _rows_of_moved_axis(data: jax.Array, idx: jax.Array, plan: GatherPlan) -> jax.Array:
    """The same result as ``_direct`` for Gather, computed as rows of ``moveaxis(data, a, 0)``."""
    axis, q = plan.index_axes[0], idx.ndim - 1
    moved = jnp.moveaxis(data, axis, 0)
    rows = gather_plan(moved.shape, idx.shape[:-1], 0)
    out = lax.gather(moved, idx, rows.dimension_numbers, rows.slice_sizes, mode=_PROMISE)
    return jnp.moveaxis(out, tuple(range(q)), tuple(range(axis, axis + q)))


@functools.partial(jax.custom_jvp, nondiff_argnums=(2,))
def _gather_differentiated(data: jax.Array, idx: jax.Array, plan: GatherPlan) -> jax.Array:
    """``_fastest``, with ``_gather_in_derivative`` of the tangent as its JVP."""
    return _fastest(data, idx, plan)


@_gather_differentiated.defjvp
def _gather_differentiated_jvp(plan, primals, tangents):
    data, idx = primals
    data_dot, _ = tangents  # integer indices have no tangent
    return _gather_differentiated(data, idx, plan), _gather_in_derivative(data_dot, idx, plan)
