"""The CPU lowerings of "fill" (jax_gather._cpu's table chooses them): read from a pad of data, or
the generic gather and its select from index slots written out."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from jax_gather._cpu_columns import columns_by_written_indices
from jax_gather._lowering import GENERIC, direct, select_fill
from jax_gather._traced_bounds import axis_sizes
from jax_gather.plans import GatherPlan

# ---- "fill" read from a pad of data ------------------------------------------------------------------
# Data gets one fill_value at the end of each indexed axis and every out-of-bounds index goes to
# that slot, so the gather reads the fill itself and no select over the output follows. Fact:
# XLA fuses the pad into the gather's loop (data is never copied). GatherND elements after batch
# dims, below jax_gather._cpu.BATCHED_ND_LINEAR_TUPLES: measured 0.87-1.00 of the select's time
# (AMD EPYC); after a GatherND without batch dims the select measured faster than the pad. Short
# row lookups.
# Fact: the select counts one flop per output element, which alone sends a lookup of a few rows
# over INLINE_FLOPS, to a worker thread.


def read_fill_from_pad(data: jax.Array, slots: jax.Array, fill: jax.Array, plan: GatherPlan) -> jax.Array:
    return direct(padded(data, fill, plan), slots, plan)


def padded(data: jax.Array, fill: jax.Array, plan: GatherPlan) -> jax.Array:
    """Data with one ``fill`` past the end of each indexed axis."""
    padding = [(0, 0, 0)] * data.ndim
    for axis in plan.dimension_numbers.start_index_map:
        padding[axis] = (0, 1, 0)
    return lax.pad(data, fill, padding)


# ---- Gather along the last axis: the indices written out as 64-bit (jax_gather._cpu_columns) ----
# Fact: the select of "fill" after such a gather recomputes the in-bounds mask from the indices
# for every output element (XLA fuses the mask's arithmetic into the loop); from written-out
# slots and a pad of data, the loop compares each index it reads with the axis size instead.


def column_fill_from_pad(data: jax.Array, slots: jax.Array, fill: jax.Array, plan: GatherPlan) -> jax.Array:
    return columns_by_written_indices(padded(data, fill, plan), slots, plan)


# ---- GatherND's fill in two loops -----------------------------------------------------------------
# The slots (stacked one component at a time: jax_gather._traced_bounds.working_indices) are read
# twice, for the mask and for the index, so XLA writes them out in a loop of their own.


def fill_after_written_slots(
    data: jax.Array, slots: jax.Array, fill: jax.Array, plan: GatherPlan
) -> jax.Array:
    """The generic gather and its select, from the slots: GatherND's fill in two loops, and a
    column gather's where it selects its fill (no pad)."""
    sizes = axis_sizes(plan, slots.dtype)
    ok = jnp.all(slots < sizes, axis=-1)
    indices = slots if plan.tuple_indices else slots[..., 0]  # as the pin reads them
    return select_fill(data, jnp.minimum(slots, sizes - 1), ok, fill, indices, plan, GENERIC)
