"""The CPU lowerings of "fill" where every index reads the same slice (each indexed axis of one
entry; jax_gather._cpu's table chooses them): a table of the slice and the fill, or the select of
their bits pinned once."""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_gather._cpu_fills import fill_after_written_slots, padded
from jax_gather._cpu_site import Site
from jax_gather._fill import element_bits, opaque_zeros, pinned_bits, xla_cpu_keeps_bits
from jax_gather._fill_pin import one_pin
from jax_gather._lowering import GENERIC, Lowering, own_elements, per_index, spread
from jax_gather.plans import GatherPlan, one_slice

# ---- "fill" of one slice: a table of the slice and the fill ---------------------------------------
# Fact: where every index reads the same slice (each indexed axis of one entry: one_slice), XLA
# makes the gather a broadcast of it and fuses the select of "fill" into that loop, which then
# computes each index's in-bounds flag, and its pin, again for every element of the slice (jnp's
# too, but for index tuples, whose flag is a reduction in a loop of its own): bfloat16 GatherND
# pairs of rows of 5 by 2188 took 2.0-2.6x jnp's "fill", Gather of bfloat16 rows of 2-8 by
# 1024-262144 ids 0.5-1.0x and as slow as jnp's, and GatherND pairs of one element by 4096 its
# loop split into tasks (2.3-2.7x). Padded with the fill on its first indexed axis, data is a
# table of two entries, the slice and the fill, that each index reads at its flag: no select (a
# floating type read as integers of its width, bfloat16 pinned by one run-time zero for all) and 4
# flops an index pair. There it took 0.12-0.9 of the select's time (AMD EPYC, JAX 0.10.2, 11-15
# paired rounds); rows of 16 elements or 32 bytes, one element from 32768 float32 tuples,
# 1.1-6.8x at 65536-262144 ids.
ONE_SLICE_MAX_ELEMENTS, ONE_SLICE_MAX_BYTES, ONE_SLICE_TUPLES = 8, 16, 16384
# Rows of any length whose select is pinned (bfloat16), below this many output elements: the pin,
# counted on every element, took the select's loop past XLA:CPU's count for a task per core where
# jnp's stays whole (bfloat16 rows of 16-4096 by 16-1024 ids: 1.7-8x jnp's "fill", the table
# 0.10-1.0 of the select's time); from 262144 elements the select's other pins were level or the
# faster (the table 1.0-2.7x).
ONE_SLICE_PINNED_OUTPUT = 1 << 18


def table_pays(site: Site) -> bool:
    """A fill where every index reads the same slice (fill_from_one_slice):
    a row ending the output of 2 to ONE_SLICE_MAX_ELEMENTS elements and ONE_SLICE_MAX_BYTES (of
    any length where the select would be pinned, below ONE_SLICE_PINNED_OUTPUT elements), or one
    element from up to ONE_SLICE_TUPLES index tuples. Longer rows, more tuples of single elements,
    single indices of one element and a Gather's column (along axis 1) keep XLA's select, which
    vectorises there (the table took up to 6.8x its time); not sub-byte types, converted to bytes
    on the way (level or slower); measured on one device."""
    if not _fill_of_one_slice(site) or element_bits(site.dtype) < 8:
        return False
    if _across_the_output(site.plan):
        return False  # a column of Gather along axis 1: XLA's select, or fill_of_pinned_slice
    dn = site.plan.dimension_numbers
    elements, k = math.prod(site.plan.slice_sizes), len(dn.start_index_map)
    if elements == 1:
        return k > 1 and site.components <= ONE_SLICE_TUPLES * k
    short = (
        elements <= ONE_SLICE_MAX_ELEMENTS and elements * element_bits(site.dtype) <= 8 * ONE_SLICE_MAX_BYTES
    )
    few = math.prod(site.plan.output_shape) < ONE_SLICE_PINNED_OUTPUT
    return short or (few and not xla_cpu_keeps_bits(site.dtype))


def fill_from_one_slice(
    data: jax.Array,
    slots: jax.Array,
    fill: jax.Array,
    indices: jax.Array,
    plan: GatherPlan,
    low: Lowering = GENERIC,
) -> jax.Array:
    """The fill of one slice: data padded with ``fill`` on its first indexed axis, read there at
    :func:`past_one_entry` of the indices. Indices that are constants of the trace take the
    select from ``slots`` (its pin made of data): XLA folds the table's gather at them, and
    bfloat16 subnormals came back flushed."""
    if low.pins_from_data:
        return fill_after_written_slots(data, slots, fill, indices, plan, low)
    dn = plan.dimension_numbers
    first = dn.start_index_map[0]
    bits = _whole_bytes(data.dtype)
    table, fill = (data, fill) if bits is None else (lax.bitcast_convert_type(x, bits) for x in (data, fill))
    entry = past_one_entry(indices, plan)[..., None]
    one_axis = dn._replace(start_index_map=(first,))
    table = padded(table, fill, plan, first_only=True)
    if bits is not None and entry.size and not xla_cpu_keeps_bits(np.dtype(data.dtype)):
        # Moved one at a time, XLA:CPU's elements of bfloat16 go through float32, even as
        # integers between bitcasts (a slice of one element came back quieted): the table is
        # pinned by one zero made of one index (_fill_pin.one_pin: one device). Pinned after the
        # gather, every element counted a flop more, which took outputs of 700-1000 elements
        # past INLINE_FLOPS where jnp's stays under (rows of 64 by 11 ids: 1.5-1.6x its time).
        table = pinned_bits(table, _one_zero(per_index(indices, plan)))
    out = lax.gather(table, entry, one_axis, plan.slice_sizes, mode=lax.GatherScatterMode.PROMISE_IN_BOUNDS)
    return out if bits is None else lax.bitcast_convert_type(out, data.dtype)


# Fact: a slice across the output (Gather along axis 1 of a one-column table) keeps XLA's select,
# whose pin of each selected element counts a flop an element (three with the select and the
# bitcast, against jnp's two): past one flop a byte, XLA:CPU split the loop into a task per core
# where jnp's stays whole (bfloat16 columns of 32 by 256 ids, 1024 by 16-128, 4096 by 4-16:
# 1.4-10x jnp's "fill"). Pinned once, the slice and the fill are values LLVM cannot see as
# bfloat16, so the select of their bits stays one of integers on any x86-64 (with a plain fill,
# AVX2 selected them as bfloat vectors through float32: signalling NaNs came back quieted).


def pinned_slice_pays(site: Site) -> bool:
    """A fill of one slice across the output of a type whose select XLA:CPU would move through a
    wider one (pinned: xla_cpu_keeps_bits), which table_pays leaves to the select:
    fill_of_pinned_slice, on one device (one pin for all)."""
    return _fill_of_one_slice(site) and not xla_cpu_keeps_bits(site.dtype) and _across_the_output(site.plan)


def _fill_of_one_slice(site: Site) -> bool:
    """A fill (no index arithmetic of a mode) on one device where every index reads the same
    slice, not each an element of its own (batch dims)."""
    if site.index_flops is not None or not site.one_device:
        return False
    return one_slice(site.shape, site.plan) and not own_elements(site.shape, site.plan)


def _across_the_output(plan: GatherPlan) -> bool:
    """Whether the slice's dims are not the output's last ones (a column of Gather along axis 1)."""
    offset, rank = plan.dimension_numbers.offset_dims, len(plan.output_shape)
    return offset != tuple(range(rank - len(offset), rank))


def fill_of_pinned_slice(
    data: jax.Array,
    slots: jax.Array,
    fill: jax.Array,
    indices: jax.Array,
    plan: GatherPlan,
    low: Lowering = GENERIC,
) -> jax.Array:
    """The fill of one slice, its bits and the fill's pinned once by one zero for all
    (:func:`opaque_zeros` of :func:`one_pin`, made of data where the indices are constants of
    the trace), then selected at :func:`within_one_entry` of the indices: two flops an element in
    XLA's count, as jnp's select."""
    pins = per_index(indices, plan)
    if not pins.size:
        return fill_after_written_slots(data, slots, fill, indices, plan, low)
    zero = _one_zero(pins, data if low.pins_from_data else None)
    bits = _whole_bytes(data.dtype)  # a pinned type is a float of whole bytes
    pinned = [lax.bitcast_convert_type(x, bits) ^ zero.astype(bits) for x in (data, fill)]
    out = lax.gather(
        pinned[0],
        jnp.zeros(slots.shape, slots.dtype),
        plan.dimension_numbers,
        plan.slice_sizes,
        mode=lax.GatherScatterMode.PROMISE_IN_BOUNDS,
    )
    ok = spread(within_one_entry(indices, plan), plan)
    return lax.bitcast_convert_type(jnp.where(ok, out, pinned[1]), data.dtype)


def _one_zero(pins: jax.Array, data: jax.Array | None = None) -> jax.Array:
    """One run-time zero for all (:func:`opaque_zeros` of :func:`one_pin`: one device), a scalar."""
    return opaque_zeros(one_pin(pins, data)).reshape(-1)[0]


def past_one_entry(indices: jax.Array, plan: GatherPlan) -> jax.Array:
    """1 (int32) where an index, or a component of an index tuple, is out of bounds of an axis of
    one entry, else 0: in bounds are 0 and, of a signed type, -1, which ``i + 1`` maps to 1 and
    0 (``i + 1`` wraps the largest index to the smallest: out). An or of the components is at
    most 1 exactly where each is: 4 flops an index pair, where its slots count 11, which took
    the loop of 2188 int8 pairs past XLA:CPU's count for a task per core (_cpu_split)."""
    combined, last_in = _one_entry(indices, plan)
    return (combined > last_in).astype(jnp.int32)


def within_one_entry(indices: jax.Array, plan: GatherPlan) -> jax.Array:
    """Where :func:`past_one_entry` is 0, as booleans: 3 flops a single index (its add, bitcast
    and compare), 4 bytes read, so no more flops than bytes in XLA's count of a loop that reads
    the index (with 5, a column's select split into a task per core where jnp's stayed whole:
    bfloat16 columns of 1024 rows by 16 ids, 2.5-4.0x jnp's time)."""
    combined, last_in = _one_entry(indices, plan)
    return combined <= last_in


def _one_entry(indices: jax.Array, plan: GatherPlan) -> tuple[jax.Array, int]:
    """The indices shifted to unsigned (``i + 1`` where signed), their components or-ed, and the
    largest in bounds (0 unsigned, 1 shifted)."""
    unsigned = jnp.issubdtype(indices.dtype, jnp.unsignedinteger)
    if not unsigned:
        if jnp.iinfo(indices.dtype).bits < 8:
            indices = indices.astype(jnp.int8)  # exact; no unsigned sub-byte view needed
        indices = lax.bitcast_convert_type(indices + 1, np.dtype(f"uint{8 * indices.dtype.itemsize}"))
    combined = indices[..., 0] if plan.tuple_indices else indices
    for c in range(1, indices.shape[-1] if plan.tuple_indices else 1):
        combined = combined | indices[..., c]
    return combined, 0 if unsigned else 1


def _whole_bytes(dtype: Any) -> Any:
    """The unsigned integer type of a floating type of whole bytes, which XLA:CPU may gather
    through a wider type (bfloat16 as float32, the float8 types as float16); None for others."""
    dtype = np.dtype(dtype)
    if not jnp.issubdtype(dtype, jnp.floating) or element_bits(dtype) != 8 * dtype.itemsize:
        return None
    return np.dtype(f"uint{8 * dtype.itemsize}")
