"""Where XLA:CPU splits a loop into a task per core (its parallel task assignment): the CPU
table's rules keep a fill's loop whole where jnp's program of the same gather is.

Fact: XLA:CPU, on two cores or more (``xla_splits_loops``), splits a loop into a task per core
where XLA's cost analysis counts more flops than bytes and flops + 10 bytes reach SPLIT_COST,
and one of no more flops than bytes from SPLIT_ANYWAY_BYTES read and written (jnp's loops too).
Split, the calling thread waits on a worker thread: 20-50 µs on the AMD EPYC, where the loop
took 10-30. Measured (AMD EPYC, jnp's "fill" 21-23 µs): 4096 bfloat16 pairs 39-53 µs in one
split loop, 21-28 in two; 8192 int8 pairs 38-46 and 22-28; 16384 float32 pairs 1.26-1.46x jnp's
time in one, 0.96-1.05 in two; 24000 level. tests/test_cpu_facts.py checks the counts below
against XLA's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import numpy as np

from jax_gather._fill import element_bits, selected_as_bits, xla_cpu_converts_select, xla_cpu_keeps_bits
from jax_gather._fill_pin import pins_the_fill
from jax_gather.plans import GatherPlan, one_slice

SPLIT_COST = 200000
SPLIT_ANYWAY_BYTES = 512 << 10


def loop_splits(flops: int, nbytes: int) -> bool:
    """Whether XLA:CPU splits a loop of this count of flops and bytes where it splits loops."""
    return flops > nbytes and flops + 10 * nbytes >= SPLIT_COST


def nd_fill_loop_splits(plan: GatherPlan, shape: tuple, dtype: np.dtype, components: int) -> bool:
    """Whether XLA:CPU splits the one loop of an element GatherND's fill, for int32 indices: 7
    flops per index component, 3 more per element for the floats it selects as bits and for the
    sub-byte types it converts to bytes (and 1 per data element, converted); as bytes its
    indices, output and data."""
    return loop_splits(*_element_loop(plan, shape, dtype, components, 7))


def jnp_splits_its_element_loop(plan: GatherPlan, shape: tuple, dtype: np.dtype, components: int) -> bool:
    """Whether XLA:CPU splits the loop in which jnp's fill of GatherND elements gathers and
    selects from the indices its first loop wrote out: 4 flops per index component, the rest as
    the library's one loop (exactly so, float32 to float4_e2m1fn, tables of 25 to 2**18 elements),
    or from SPLIT_ANYWAY_BYTES."""
    flops, nbytes = _element_loop(plan, shape, dtype, components, 4)
    return loop_splits(flops, nbytes) or nbytes >= SPLIT_ANYWAY_BYTES


def _element_loop(
    plan: GatherPlan, shape: tuple, dtype: np.dtype, components: int, per_component: int
) -> tuple[int, int]:
    """XLA's count of flops and bytes of a fill's loop over GatherND elements."""
    k, data = len(plan.dimension_numbers.start_index_map), math.prod(shape)
    tuples, bits = components // k, selected_as_bits(dtype) or converted_on_the_way(dtype)
    flops = tuples * (per_component * k + 3 * bits) + data * bits
    return flops, tuples * (4 * k) + (tuples + data) * element_bits(dtype) // 8


def converted_on_the_way(dtype: np.dtype) -> bool:
    """A sub-byte type XLA:CPU converts to bytes to select it (int4, uint4, float4_e2m1fn)."""
    return element_bits(dtype) < 8 and xla_cpu_converts_select(dtype)


def splits_a_loop(program: Any, *arguments: Any) -> bool:
    """Whether XLA:CPU splits a loop of this jitted program, on these arguments, into a task per
    core: read off the program compiled for them, as their first call would compile it (that
    call then finds it compiled)."""
    return "outer_dimension_partitions" in program.lower(*arguments).compile().as_text()


def jnp_splits_its_index_loop(components: int) -> bool:
    """Whether XLA:CPU splits the loop in which jnp's fill of index tuples writes out its
    normalised int32 components (4 bytes read and 4 written each): from SPLIT_ANYWAY_BYTES."""
    return 8 * components >= SPLIT_ANYWAY_BYTES


def and_loop_splits(plan: GatherPlan, shape: tuple, dtype: np.dtype, components: int) -> bool:
    """Whether XLA:CPU splits the one loop of a fill of index tuples that read slices, their
    in-bounds flag the and of the components' (``_cpu_fills.all_components``), where it keeps
    jnp's loops whole (its index loop, and its select's: :func:`jnp_splits_its_select_loop`).

    XLA counts 7 flops per component less one, and per slice element one for a plain select or
    one against a pinned fill (``pins_the_fill``), else 3-4 and one per data element (bits
    selected, pinned or converted): counted here as 8 an element, 4 a tuple and one a data
    element, an upper bound. Without the 4 a tuple, float8_e5m2 pairs of rows of 3 by 512 on JAX
    0.12 took the and-ed loop, split (2.2-2.7x jnp's time), for two whole loops (0.9). Without the
    data elements, float8 pairs of rows of 2-3 from a 200 x 200 table by 512-3000 took it, split,
    where jnp's select loop stays whole (1.2-3.0x; read from written indices 0.95-0.97). Int8
    pairs of rows of 2-8 by 2048-8192 (the loop split) took 1.4-2.4x jnp's time, the reduced flag
    0.78-0.99."""
    k, width = len(plan.dimension_numbers.start_index_map), math.prod(plan.slice_sizes)
    one_flop = _select_flops(dtype) == (1, 0)
    per_tuple = 7 * k - 1 + width if one_flop else 7 * k + 3 + 8 * width
    nbytes = _slice_fill_bytes(plan, shape, dtype, components)
    anded = components // k * per_tuple + _table_flops(dtype) * math.prod(shape)
    # The select loop's bytes are these and the flag's: its SPLIT_ANYWAY_BYTES test holds wherever
    # _jnp_splits's would.
    jnps = jnp_splits_its_index_loop(components) or jnp_splits_its_select_loop(plan, shape, dtype, components)
    return not jnps and loop_splits(anded, nbytes)


def _table_flops(dtype: np.dtype) -> int:
    """XLA's count a table element in a loop that gathers from it, for a float type of 8 bits or
    fewer: XLA:CPU gathers it through float16 (a convert of the table), the library on its bits
    (a bitcast of the table), each a flop an element (float8_e4m3fn pairs of rows of 4 from 64 x
    64: 16384 of the and-ed loop's 31232, JAX 0.10); none for the others (bfloat16, int4)."""
    return int(jnp.issubdtype(dtype, jnp.floating) and element_bits(dtype) <= 8)


def jnp_splits_its_select_loop(plan: GatherPlan, shape: tuple, dtype: np.dtype, components: int) -> bool:
    """Whether XLA:CPU splits the loop in which jnp's fill of index tuples that read slices
    gathers and selects, its flag read from a loop of its own: 4 flops an element and 1 a data
    element where XLA converts the type to select it (``_fill.xla_cpu_converts_select``: the
    float8 types, int4, uint4, float4_e2m1fn, bfloat16 before JAX 0.11), else 1 an element; as
    bytes its int32 indices, the flag, output and data. From one slice (XLA's broadcast) it reads
    no indices, and counts 2 flops an element where it converts. Exact, JAX 0.10 and 0.12, ten
    types, tables of 1 x 1 and 30 x 30 to 200 x 200, rows of 2-100, 64-20000 tuples
    (tests/test_cpu_facts.py). A table's convert counts a flop a byte: from about 18 KiB of float8
    data the library's and-ed loop, with more flops a tuple than bytes, splits where this one
    does not."""
    k, width = len(plan.dimension_numbers.start_index_map), math.prod(plan.slice_sizes)
    element, datum = (4, 1) if xla_cpu_converts_select(dtype) else (1, 0)
    tuples = components // k
    nbytes = _slice_fill_bytes(plan, shape, dtype, components) + tuples
    if one_slice(shape, plan):
        element, datum, nbytes = min(element, 2), 0, nbytes - 4 * components
    flops = tuples * width * element + datum * math.prod(shape)
    return loop_splits(flops, nbytes) or nbytes >= SPLIT_ANYWAY_BYTES


def pad_loop_splits_alone(plan: GatherPlan, shape: tuple, dtype: np.dtype, components: int) -> bool:
    """Whether XLA:CPU splits the loop of a lookup read from data padded with the fill
    (``_cpu_fills.read_fill_from_pad``) where it keeps jnp's whole. The pad's loop counts a few
    flops and, as bytes, its indices, output and all of data (:func:`_slice_fill_bytes`), and so
    does jnp's gather of two index tuples or more; of one, XLA makes jnp's gather a dynamic slice,
    counted as the slice's bytes read, the output's written and the indices'. Measured (AMD EPYC,
    JAX 0.10.2, paired against jnp's "fill"): one row of 1024-16384 bool, int8 or float32 from
    0.6-64 MiB of data, the pad's loop split and jnp's not, 1.13-1.65x its time; from less data
    0.87-0.90; one row whose own loop splits in jnp's too (65536 float32) 0.20, two rows or more
    (jnp's program split, and on a worker thread) 0.11-0.16."""
    one_tuple = components == len(plan.dimension_numbers.start_index_map)
    # jnp's dynamic slice counts as the same loop over data of the slice's shape.
    jnps = not one_tuple or _slice_fill_bytes(plan, plan.slice_sizes, dtype, components) >= SPLIT_ANYWAY_BYTES
    return _slice_fill_bytes(plan, shape, dtype, components) >= SPLIT_ANYWAY_BYTES and not jnps


def indexed_loop_splits(plan: GatherPlan, shape: tuple, dtype: np.dtype, components: int) -> bool:
    """Whether XLA:CPU splits the gather's loop of a fill of index tuples that read slices, their
    flag reduced in a loop of its own (the generic program), where it keeps jnp's loops whole and
    the same loop reading written indices (:func:`written_loop_splits`) whole. The generic loop
    counts 5 flops a component and :func:`_select_flops`, and reads the flag, a byte a tuple.
    Measured (AMD EPYC), the generic loop split against the written indices: int4 pairs of rows
    of 2 by 2048-6000 and of 3 by 1024 1.2-2.0x jnp's time against 0.96-1.06, float8 pairs of
    rows of 2-3 by 512-4096 1.3-2.9x against 0.63-0.99 (JAX 0.10 and 0.12); int8 pairs of rows of
    2-4 by 12000-24000 and bfloat16 ones (JAX 0.10, each element pinned) of 2-24 by 3000-24000,
    against written slots (the clamp of ``nd_fill_in_two_loops`` in the gather's loop), 0.97-1.06
    and 0.60-0.89 against 0.94-1.08 and 0.65-1.24."""
    loop, nbytes = _gather_loop(plan, shape, dtype, components)
    read = nbytes + components // len(plan.dimension_numbers.start_index_map)  # and the flag
    jnps = _jnp_splits(components, nbytes)
    return loop_splits(loop(5), read) and not loop_splits(loop(0), read) and not jnps


def written_loop_splits(plan: GatherPlan, shape: tuple, dtype: np.dtype, components: int) -> bool:
    """Whether XLA:CPU splits the gather's loop of a fill of index tuples that read slices from
    index vectors written out (``_cpu_fills.fill_after_written_indices``): no index arithmetic,
    and :func:`_select_flops` an element, jnp's count for a plain select or one against a pinned
    fill; where each element is pinned, 3 flops an element more than jnp's, with which the loop
    may split where jnp's stays whole (bfloat16 pairs of rows of 8 by 16384 on an Intel Xeon,
    family 6 model 207, JAX 0.11.2)."""
    loop, nbytes = _gather_loop(plan, shape, dtype, components)
    return loop_splits(loop(0), nbytes + components // len(plan.dimension_numbers.start_index_map))


def _gather_loop(
    plan: GatherPlan, shape: tuple, dtype: np.dtype, components: int
) -> tuple[Callable[[int], int], int]:
    """XLA's count of the gather's loop of a fill of index tuples that read slices: its flops
    given those a component, and its bytes (indices, output and data; the flag's are a tuple's)."""
    element, datum = _select_flops(dtype)
    k, width = len(plan.dimension_numbers.start_index_map), math.prod(plan.slice_sizes)
    tuples, data = components // k, math.prod(shape)
    loop = lambda per_component: tuples * (per_component * k + element * width) + datum * data
    return loop, _slice_fill_bytes(plan, shape, dtype, components)


def _select_flops(dtype: np.dtype) -> tuple[int, int]:
    """XLA's count for the select of a fill of slices of ``dtype``: flops an element and a data
    element. One an element for a plain select or one against a pinned fill; where the bits are
    selected and pinned, their bitcasts (one an element, one a data element) and the exclusive
    or (one an element), its opaque zero (of one index for all on one device) counted once;
    where the type is converted on the way (int4, uint4, float4_e2m1fn, the float8 types) or
    its bits selected unpinned, at most 4 an element and 1 a data element (the converts or
    bitcasts around the gather and the select: JAX 0.10 to 0.12)."""
    if _plain_select(dtype) or pins_the_fill(dtype):
        return 1, 0
    if element_bits(dtype) < 8 or not selected_as_bits(dtype) or xla_cpu_keeps_bits(dtype):
        return 4, 1
    return 3, 1


def _jnp_splits(components: int, nbytes: int) -> bool:
    """Whether XLA:CPU splits a loop of jnp's fill of index tuples that read slices: its index
    loop, or its select's of ``nbytes`` (indices, data and output)."""
    return jnp_splits_its_index_loop(components) or nbytes >= SPLIT_ANYWAY_BYTES


def _slice_fill_bytes(plan: GatherPlan, shape: tuple, dtype: np.dtype, components: int) -> int:
    """XLA's count of the bytes of a fill's loop over index tuples that read slices: its int32
    indices, its output and data."""
    k, width = len(plan.dimension_numbers.start_index_map), math.prod(plan.slice_sizes)
    tuples = components // k
    return tuples * 4 * k + (tuples * width + math.prod(shape)) * element_bits(dtype) // 8


def _plain_select(dtype: np.dtype) -> bool:
    """A select XLA:CPU makes of the type as it is, every bit kept: no pin, no convert (whole
    bytes, and int2 and uint2, which it gathers and selects as they are, where it converts
    int4, uint4 and float4_e2m1fn to bytes: _fill.xla_cpu_converts_select)."""
    return not xla_cpu_converts_select(dtype) and xla_cpu_keeps_bits(dtype) and not selected_as_bits(dtype)
