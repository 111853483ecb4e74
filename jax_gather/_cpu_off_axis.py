"""The derivative of a Gather along an axis other than the first (no batch dims), computed two
other ways; :func:`derivative` says which pays (or neither) from the ids, the positions before
the axis, the trailing block and the dtype, and jax_gather._cpu's table applies it.

Fact: XLA:CPU scatters JAX's transpose of a gather along axis a > 0 along that axis: a strided
scatter, each index writing one element (or trailing block) into every leading row of data.
Both forms below give the same values; each is only the tangent's gather, whose transpose JAX
takes, and the forward gather is unchanged.

- ``rows_of_moved_axis``: rows of data with the axis moved first. Its transpose is a scatter of
  whole rows between two transposes of data's size, which pays once the indices cover much of the
  axis.
- ``rows_of_leading_block``: data viewed as rows of its trailing block, each addressed by one
  linear row index (leading position times the axis length, plus the index). Its transpose is
  one scatter in the order of data's rows, with no transpose of data.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_gather._cpu_linear import linear_index_dtype
from jax_gather._lowering import direct
from jax_gather.plans import GatherPlan, gather_plan

MOVED, LEADING = "moved", "leading"
# Fact: JAX's strided scatter writes one element into each leading row, rows L * itemsize bytes
# apart; where that stride is a multiple of COLLIDING_STRIDE bytes those rows fall in a few sets of
# the CPU's L1 data cache (x86-64: 64 sets of 64-byte lines, 4 KiB apart), which evict one another,
# and the scatter costs several times as much an element. Rows of the moved axis pay only there
# (float16's from FLOAT16_COLLIDING_STRIDE), and only for data past L1_DATA_BYTES (data that fits
# the cache stays in it); so do rows of the leading block of one element.
COLLIDING_STRIDE, FLOAT16_COLLIDING_STRIDE, L1_DATA_BYTES = 1024, 4096, 32768
# Rows of the moved axis (data (P, L), n ids; AMD EPYC, JAX 0.10.2, 9 paired rounds against JAX's
# derivative; docs/design.md): float32 by 0.88 L ids over 54 positions, at strides of 2-16 KiB
# 0.17-0.52, of 1, 3, 5 and 9 KiB 0.70-1.03, at other strides (L = 640, 1000, 2000, 2794, 3000,
# 4160) 1.16-1.83; over 266 positions 0.08-0.31 and 1.18; data of 32 KiB or less 0.97-3.3 (16 x
# 256 by 128 ids: 3.3), past it 0.52-0.88. With fewer ids than L/2, 1.1-3.4 (the transposes of
# data cost more than the scatter); over 2-4 positions up to 1.7; trailing blocks of 4-64
# elements 1.0-4.2. float16 from 32 positions: 0.47-0.56 at strides of 4-12 KiB, 1.10-1.25 at 2
# and 6 KiB and others; from 8 to 31, 0.5-1.3 (XLA's transposes of those rows). bfloat16, whose
# scatter costs more an element, from L/8 ids at strides of 1 KiB multiples (0.27-0.77; 1.57 at
# 4.5 KiB).
MOVED_MIN_POSITIONS, MOVED_MIN_POSITIONS_2_BYTES = 8, 32
MOVED_MIN_COVER, MOVED_MIN_COVER_BFLOAT16 = 1 / 2, 1 / 8
# Rows of the leading block, float32 with fewer ids: 0.2-0.7 from P >= 16 (over 8, 1.0-1.4), over
# trailing blocks under a cache line (S = 4-8: 0.2-0.7; 16, one line: 0.7-1.04). Not for 2-byte
# floats: their element scatter took 1.2-2.7x (bfloat16) and 1.2-1.4x (float16, P = 16). (Nor,
# jax_gather._cpu's row says, where JAX's scatter counts under INLINE_FLOPS: the row index's
# flops would take the program to JAX's worker thread, 23 positions by 26 ids: 2.1x.) A trailing
# block of one element only at colliding strides: over 266 positions by 0.4 L ids, L = 512-8192
# of such strides (768, 2304 among them) 0.08-0.59 of JAX's time (JAX's 0.38-14 ms), of others
# (1000, 2000, 2176, 2368, 4160) 1.03-1.46 (JAX's 0.16-0.62 ms); over 16-64 positions 0.21-0.64
# against 1.0-1.23; 16 x 256 by 128 ids (16 KiB) 0.9-3.0, 32 x 256 (32 KiB) 1.00, 64 x 256 0.56.
# Blocks of 3-8 elements paid at L = 40-1000, in data of 10-51 KiB too (0.35-0.84).
LEADING_MIN_POSITIONS, LEADING_MAX_TRAIL_BYTES = 16, 64


def collides(length: int, dtype: np.dtype) -> bool:
    """Whether JAX's scatter of one element a leading row, rows ``length`` elements apart,
    collides in the L1 data cache (see COLLIDING_STRIDE)."""
    stride = FLOAT16_COLLIDING_STRIDE if dtype == np.float16 else COLLIDING_STRIDE
    return (length * dtype.itemsize) % stride == 0


def derivative(plan: GatherPlan, shape: tuple, dtype: np.dtype, one_device: bool, x64: bool) -> str | None:
    """MOVED, LEADING or None (JAX's own derivative) for a Gather along axis a > 0 without batch
    dims, of data of ``shape`` and ``dtype``."""
    axis = plan.dimension_numbers.start_index_map[0]
    positions, length, trail = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1 :])
    ids = math.prod(plan.output_shape) // max(1, positions * trail)
    cover = MOVED_MIN_COVER_BFLOAT16 if dtype == jnp.bfloat16 else MOVED_MIN_COVER
    least = MOVED_MIN_POSITIONS_2_BYTES if dtype.itemsize == 2 else MOVED_MIN_POSITIONS
    misses = collides(length, dtype) and math.prod(shape) * dtype.itemsize > L1_DATA_BYTES
    if trail == 1 and positions >= least and ids >= cover * length and misses:
        return MOVED
    float32_or_wider = dtype.kind == "f" and dtype.itemsize >= 4
    small_trail = trail * dtype.itemsize < LEADING_MAX_TRAIL_BYTES
    many_positions = positions >= LEADING_MIN_POSITIONS and one_device
    leading = float32_or_wider and small_trail and many_positions and (trail > 1 or misses)
    return LEADING if leading and linear_index_dtype(shape, x64) is not None else None


def rows_of_moved_axis(data: jax.Array, idx: jax.Array, plan: GatherPlan) -> jax.Array:
    """The same result as the plan's gather (Gather), computed as rows of ``moveaxis(data, a, 0)``."""
    axis, q = plan.dimension_numbers.start_index_map[0], idx.ndim - 1
    moved = jnp.moveaxis(data, axis, 0)
    rows = gather_plan(moved.shape, idx.shape[:-1], 0)
    out = direct(moved, idx, rows)
    return jnp.moveaxis(out, tuple(range(q)), tuple(range(axis, axis + q)))


def rows_of_leading_block(data: jax.Array, idx: jax.Array, plan: GatherPlan, *, dtype: Any) -> jax.Array:
    """The same result as the plan's gather (Gather along axis a > 0, ``idx`` in bounds), computed
    from data viewed as (P * L, S) rows: P the leading positions, L the axis, S the trailing
    block. Row ``p * L + i`` for position p and index i, in ``dtype`` (int32 or int64)."""
    axis = plan.dimension_numbers.start_index_map[0]
    lead, length, trail = data.shape[:axis], data.shape[axis], data.shape[axis + 1 :]
    ids = idx[..., 0].astype(dtype)
    starts = lax.broadcasted_iota(dtype, (math.prod(lead), *ids.shape), 0) * length
    rows = data.reshape(-1, math.prod(trail))
    linear = starts + ids
    out = direct(rows, linear[..., None], gather_plan(rows.shape, linear.shape, 0))
    return out.reshape(*lead, *ids.shape, *trail)
