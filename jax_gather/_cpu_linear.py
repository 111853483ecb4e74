"""Element gathers by one linear index into the whole of data, flattened (``by_linear_index``),
whether XLA:CPU, for the CPU at hand, computes that index in vector instructions
(``xla_vectorises_linear_indices``, what its forward lowering rests on), and where the loop that
computes it for the derivative's scatter is split into tasks that start inside a row
(``index_tasks_start_at_rows``). jax_gather._cpu's table chooses them."""

from __future__ import annotations

import functools
import math
import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_gather._cpu_client import kernel_ir_holds, usable_cores
from jax_gather._lowering import direct
from jax_gather.plans import GatherPlan, gather_elements_plan, gather_nd_plan, gather_plan


def linear_index_dtype(shape: tuple, x64: bool) -> Any:
    """int32 where data has fewer than 2**31 elements, else int64, which needs x64: without it,
    None (the gather stays as it is, so no linear offset ever wraps)."""
    if math.prod(shape) <= np.iinfo(np.int32).max:
        return jnp.int32
    return jnp.int64 if x64 else None


# Fact (what linear_derivative rests on): XLA:CPU scatters JAX's transpose of an element gather
# by index tuples (for batching dims, an iota per dim concatenated with the index, written out and
# read back). By one linear index into the whole of data, flattened, the transpose is one scatter
# into one dim.
def by_linear_index(data: jax.Array, idx: jax.Array, plan: GatherPlan, *, dtype: Any) -> jax.Array:
    """The plan's element gather by one linear index into the whole of data, flattened; ``idx``
    in bounds. A batching dim's coordinate is the output position (an iota). Each component is
    in bounds of its own axis before they are combined, so bounds stay per axis."""
    dn = plan.dimension_numbers
    coordinate = {
        axis: lax.broadcasted_iota(dtype, idx.shape[:-1], dim)
        for axis, dim in zip(dn.operand_batching_dims, dn.start_indices_batching_dims)
    }
    coordinate.update({axis: idx[..., c].astype(dtype) for c, axis in enumerate(dn.start_index_map)})
    linear = coordinate[0]
    for axis in range(1, data.ndim):
        linear = linear * data.shape[axis] + coordinate[axis]
    flat = data.reshape(-1)
    rows = gather_plan(flat.shape, linear.shape, 0)
    return direct(flat, linear[..., None], rows)


# The forward gather by a linear index pays where XLA:CPU computes the index in a vector loop:
# with AVX-512 (AMD EPYC: 1.16-1.34x the gather with batching dims). Where it computes it one
# element at a time, the same program costs: XLA_FLAGS=--xla_cpu_max_isa=AVX2 (what a CPU without
# AVX-512 gives it) 0.68-0.81 of the gather's time, SSE4_2 0.85-0.92. So the CPU at hand is asked,
# once per process: the LLVM IR of one such gather (about 50 ms).
VECTOR_OF_INTEGERS = re.compile(r"<\d+ x i(32|64)>")


@functools.cache
def xla_vectorises_linear_indices() -> bool:
    """Whether XLA:CPU, for this process's CPU and flags, computes the linear indices of a
    batched GatherND (``by_linear_index``) in vector instructions."""
    plan = gather_nd_plan((4, 256, 256), (4, 512, 2), 1)
    gather = functools.partial(by_linear_index, plan=plan, dtype=jnp.int32)
    return kernel_ir_holds(VECTOR_OF_INTEGERS, gather, ((4, 256, 256), jnp.float32), ((4, 512, 2), jnp.int32))


# Fact: the transpose of the gather by a linear index scatters by that index, flattened, and
# XLA:CPU computes the index in a loop over it, flat. Where that loop moves 512 KiB or more (its
# indices in and out), XLA splits it into tasks, one per 256 KiB and at most the square root of
# the cores, rounded up (its cost model for a loop of fewer flops than bytes; none on one core).
# A task that starts inside a row (the first dim of the gather's output not a multiple of the
# tasks) makes XLA find each element's coordinates by division, in scalar code, where whole rows
# keep the loop in vector instructions; a last dim of a power of two divides by a shift (an index
# of rank two). Measured (AMD EPYC, JAX 0.10, two tasks): the index of 5263 rows of 57 took 234 us,
# of 4687 rows of 64 62 us; the derivative by it 1.12-1.24x JAX's own, over 5264 rows 0.6. From
# JAX 0.12 XLA vectorises such a loop of rank two either way: the CPU at hand and its JAX are
# asked, once. Over more dims JAX 0.12 vectorises some split rows and not others (the AMD EPYC with
# AVX2: 3 x 1754 x 57 and 3 x 2 x 1755 x 57 yes, 3 x 1755 x 57 and 3 x 5263 x 19 no), so those
# keep JAX's derivative unless their tasks start at rows.
TASK_BYTES = 256 << 10


def loop_tasks(nbytes: int) -> int:
    """The tasks XLA:CPU splits a loop of fewer flops than bytes that moves ``nbytes`` into, in
    this process: one per TASK_BYTES, at most the square root of the cores rounded up."""
    cores = usable_cores()
    return max(1, min(math.ceil(math.sqrt(cores)), nbytes // TASK_BYTES)) if cores > 1 else 1


def index_tasks(elements: int, itemsize: int) -> int:
    """The tasks XLA:CPU splits the loop that computes a linear index of ``elements`` into, for
    indices of ``itemsize`` bytes (in and out), in this process."""
    return loop_tasks(2 * itemsize * elements)


def index_tasks_start_at_rows(shape: tuple, x64: bool) -> bool:
    """Whether XLA:CPU computes the derivative's linear index for a gather's output of ``shape``
    in vector instructions: its loop is one task, or each task starts at a row of the first dim
    (for any count up to what the cost model gives), or it needs no division (one dim; a
    power-of-two last of two). With x64 on, indices of 8 bytes are counted."""
    tasks = index_tasks(math.prod(shape), 8 if x64 else 4)
    if tasks == 1 or len(shape) < 2 or (len(shape) == 2 and shape[1] & (shape[1] - 1) == 0):
        return True
    return all(shape[0] % count == 0 for count in range(2, tasks + 1))


# Fact: the same transpose fills data's flat shape with zeros and scatters into it, two loops
# over one dim of data's elements that XLA:CPU splits by the same cost model (the scatter's bytes:
# data in and out, and its indices and updates). Where a count of tasks divides the elements, XLA
# views the dim as tasks x rows and fills each in vector instructions; where it does not, each
# task's bounds are known only as it runs, and XLA fills one element at a time and scatters
# slower too. Measured (AMD EPYC, JAX 0.10.2, two tasks): zeros of 8198025 float16 1.56 ms, of
# 8198024 0.19; the derivative of 4125 ids into 9937 x 825 float16 2.2 ms by the linear index, 0.25
# by JAX's own (float32 1.3 against 0.58; 1001 x 999 float16 0.37 against 0.12); of 363 x 361
# (131043 elements) level either way. On one core no split, no cost.


def data_tasks(shape: tuple, itemsize: int, updates: int, index_itemsize: int) -> int:
    """The most tasks XLA:CPU splits the derivative's loops over data's flat ``shape`` into: its
    scatter's (``updates`` elements by indices of ``index_itemsize`` bytes), which count more
    bytes than its zeros, in this process."""
    return loop_tasks(2 * itemsize * math.prod(shape) + (itemsize + index_itemsize) * updates)


def data_tasks_divide(shape: tuple, itemsize: int, updates: int, index_itemsize: int) -> bool:
    """Whether every count of tasks XLA:CPU may split the derivative's loops over data's flat
    ``shape`` into (:func:`data_tasks`, or fewer) divides data's elements."""
    elements = math.prod(shape)
    tasks = data_tasks(shape, itemsize, updates, index_itemsize)
    return all(elements % count == 0 for count in range(2, tasks + 1))


# Where XLA:CPU fills the flat zeros one element at a time (data_tasks_divide says no), the fill
# costs by data's elements and the linear index saves by the updates: measured (AMD EPYC, JAX
# 0.10.2, odd counts in two tasks, 11 paired rounds against JAX's derivative), one update an
# element of data 0.50-0.57, one in 3 0.71-0.85, one in 2 to 4 of rows of 1023 0.93-1.05, one in
# 9 0.99, one in 25 1.3-1.7, one in 2000 9.6. So there it pays from one update in this many elements.
SCALAR_FILL_ELEMENTS_PER_UPDATE = 4
# bfloat16: XLA:CPU scatters it in float32 and converts the flat result back to data's shape in a
# loop that cost more after the flat scatter than after JAX's over rows of 2-8 (measured, AMD
# EPYC, JAX 0.10.2, GatherElements along axis 0, 11 paired rounds against JAX's derivative): 14974
# updates into 54752 x 2, 27376 x 4 and 13688 x 8, 1.13-1.37; 1024 into 65536 x 2, 0.99-1.22; rows
# of 16 and 32, 0.67-0.81; dense (65536 into 4096 x 2), 0.70-0.78; float16 and float32 over rows of
# 2, 0.84-0.96. So bfloat16 rows under this many elements take the linear index only where dense.
CONVERTED_ROWS_MIN = 16


def flat_scatter_pays(shape: tuple, dtype: np.dtype, updates: int, index_itemsize: int) -> bool:
    """Whether the derivative's scatter of ``updates`` into data of ``shape`` and ``dtype``,
    flattened, pays for what XLA:CPU makes of its flat zeros: filled in vector instructions
    (:func:`data_tasks_divide`), or updates dense enough (SCALAR_FILL_ELEMENTS_PER_UPDATE); for
    bfloat16 rows under CONVERTED_ROWS_MIN elements, only dense updates."""
    dense = SCALAR_FILL_ELEMENTS_PER_UPDATE * updates >= math.prod(shape)
    if dtype == jnp.bfloat16 and shape[-1] < CONVERTED_ROWS_MIN:
        return dense
    return dense or data_tasks_divide(shape, dtype.itemsize, updates, index_itemsize)


@functools.cache
def xla_scalarises_split_rows() -> bool:
    """Whether XLA:CPU, in this process, computes the derivative's linear index of an output of
    rank two one element at a time where a task of its split starts inside a row: asked once a
    process, by the LLVM IR of the derivative over 5263 rows of 57 (about 100 ms; no split on one
    core, so no)."""
    plan = gather_elements_plan((5263, 57), (5263, 57), -1)
    by_linear = functools.partial(by_linear_index, plan=plan, dtype=jnp.int32)
    grad = jax.grad(lambda d, i: by_linear(d, i[..., None]).sum())
    shapes = (((5263, 57), jnp.float32), ((5263, 57), jnp.int32))
    return not kernel_ir_holds(VECTOR_OF_INTEGERS, grad, *shapes)
