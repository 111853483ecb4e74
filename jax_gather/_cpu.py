"""The CPU lowerings, and the table that picks them for a plan.

The generic lowering (:mod:`jax_gather._lowering`) is one ``lax.gather`` on in-bounds index
vectors, a select of ``fill_value`` after it for "fill", and JAX's own derivative. For some plans
XLA:CPU compiles parts of that to slow code, and a lowering here replaces them. Each is one row
of ``ROWS``: its name, the part it replaces (``forward``, ``derivative``, ``fill``, the ``pin``
of a select's bits, or the ``mask`` of an index tuple), the rule that says when it applies, and
what it puts in that part; for each part the first row whose rule holds wins. :func:`lowering`
reads the table once per plan and returns a :class:`jax_gather._lowering.Lowering`; nothing
outside this module knows why. Adding or deleting a lowering is adding or deleting its row (and
its functions: below, or in the ``_cpu_*`` modules).

Each lowering applies only on the CPU platform (through ``lax.platform_dependent``: other
platforms, and exports for them, get the generic program), and rests on one fact about XLA:CPU
or JAX's CPU runtime, stated where it is used. For each fact, ``tests/test_cpu_facts.py`` has a
canary that fails when the fact stops holding; then ``without(name)`` (what
``benchmarks/lowering_choices.py`` times each lowering against) shows whether the lowering
still pays, and docs/design.md says how to delete it.

Every lowering needs JAX 0.7.0 or later, whose ``platform_dependent`` keeps only the branch of
the platform it lowers for (older ones keep both gathers), and static dims (StableHLO cannot
refine a shape-changing bitcast or reshape of symbolic dims, nor JAX 0.7.0 export a
``custom_jvp``'s gradient over them). Those that pad or flatten data also need a process with one
CPU device: on a mesh, padding or flattening a sharded dim makes XLA's partitioner move data
between devices. The column lowerings keep to one device too (measured on one only)."""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jax_gather import _cpu_linear as linear, _cpu_off_axis as off_axis, _cpu_one_slice as one_entry
from jax_gather._arguments import Mode
from jax_gather._cpu_clamp import clamp_stops_the_fill_loop, clamp_stops_the_vector_loop
from jax_gather._cpu_client import INLINE_FLOPS, JAX_RELEASE, xla_splits_loops
from jax_gather._cpu_columns import (
    COLUMN_SELECT_ROWS,
    COLUMNS_FEW_ROWS,
    COLUMNS_FEW_ROWS_MAX_INDICES,
    COLUMNS_MAX_INDICES,
    COLUMNS_MAX_ROW_BYTES,
    COLUMNS_MIN_BYTES,
    columns_by_written_indices,
    reads_columns,
    xla_widens_column_indices,
)
from jax_gather._cpu_fills import (
    all_components,
    column_fill_from_pad,
    element_pin,
    fill_after_written_indices,
    fill_after_written_slots,
    pinned_rows,
    read_fill_from_pad,
    select_pin,
    xla_scalarises_the_column_pad,
    xla_vectorises_pinned_rows,
    xla_vectorises_rows_clamped,
)
from jax_gather._cpu_linear import linear_index_dtype, xla_vectorises_linear_indices
from jax_gather._cpu_rows import (
    SHORT_ROWS,
    rows_in_units,
    short_rows_min_bytes,
    takes_whole_rows,
    xla_vectorises_rows_in_units,
)
from jax_gather._cpu_site import Site, cpu_devices, runs_and_lines, static
from jax_gather._cpu_split import (
    and_loop_splits,
    converted_on_the_way,
    indexed_loop_splits,
    jnp_splits_its_element_loop,
    jnp_splits_its_index_loop,
    nd_fill_loop_splits,
    pad_loop_splits_alone,
)
from jax_gather._fill import clamped_bits, element_bits, narrow_float
from jax_gather._fill_pin import opaque_fill
from jax_gather._lowering import GENERIC, Lowering
from jax_gather._traced_bounds import clamp_pays, index_flops
from jax_gather._x64 import x64_on
from jax_gather.plans import GatherPlan, one_slice

# The index arithmetic of a fill's slots costs 5 flops per index component, 7 with int64 indices
# (at most), so a row lookup of this many components stays under INLINE_FLOPS once it has no
# select of the fill.
_INDEX_FLOPS_32, _INDEX_FLOPS = 5, 7
SHORT_LOOKUP_INDICES = 128
# Measured (AMD EPYC, 32 MiB of L3; docs/design.md): read from a pad, a short lookup runs on one
# core, and each contiguous run of a slice costs its loop more than the select's. Where XLA splits
# loops, the select's tasks were faster past this many bytes of cache lines read (float32 columns:
# 0.58 of its time at 8 MiB, 1.14x at 12). On one core, past 2 MiB or 64Ki runs (int8 columns:
# 1.04-1.05).
SHORT_LOOKUP_MAX_LINES = 8 << 20
SHORT_LOOKUP_MAX_LINES_ONE_CORE, SHORT_LOOKUP_MAX_RUNS_ONE_CORE = 2 << 20, 65536
# Fact: a forward lowering's own flops (the written indices' reduce-window counts 2 an index;
# short rows' bitcasts and the linear index at least INLINE_FLOPS) can move a program that stays
# under INLINE_FLOPS without them (the eager checked call's counts none) to a worker thread.
# Measured (AMD EPYC): a promise of 32-128 int8 rows by 200-256 column ids 2.3-5.8x the time
# without; eager checked calls 1.5-3.5x (64 int8 rows by 512-1024 column ids, int8 rows of 16 by
# 16384 ids, 2048 GatherND tuples after a batch dim, float32 rows of 16 by 16384 ids: 1 MiB); from
# 4 MiB of output the hand-over is paid for (1024 rows by 4096 int8 column ids: 0.85-0.89).
COLUMN_INDEX_FLOPS, HANDOFF_MIN_BYTES = 2, 4 << 20
# Measured (AMD EPYC with AVX-512): GatherND elements after batch dims, read by one linear index
# into the whole of data (a one-dim gather whose index XLA:CPU computes in a vector loop there:
# jax_gather._cpu_linear), took 0.72-0.88 of the time of the gather with batching dims from 65536
# index tuples, and 0.92-1.01 from 2048 to 32768; below, the linear index's flops could take a
# small lookup to a worker thread (docs/design.md).
BATCHED_ND_LINEAR_TUPLES = 2048
# Where XLA:CPU splits a loop into a task per core: jax_gather._cpu_split.


class Row(NamedTuple):
    """One CPU lowering: its name (in ``LOWERINGS``, and for ``without``), the part of the
    generic lowering it replaces, when it applies, and what it puts there."""

    name: str
    part: str  # the field of Lowering it gives: "forward", "derivative", "fill", "pin" or "mask"
    applies: Callable[[Site], bool]
    make: Callable[[Site], Any]  # the function for that field


def _short_rows(site: Site) -> bool:
    """Rows of 16 or 24-64 elements (SHORT_ROWS) taken whole, for an output of
    short_rows_min_bytes or more (more of one slice without a fill): below, the tasks cost more
    than the copy saves. Not where its bitcasts would move the program to a worker thread
    (_hand_over_pays), nor before a fill's select of pinned rows that XLA:CPU vectorises (with the
    clamp where chosen, or the exclusive or), whose loop reads the rows as they are: in bytes,
    the fill measured slower."""
    plan, shape, dtype = site.plan, site.shape, site.dtype
    rows = takes_whole_rows(shape, dtype, plan) and shape[-1] in SHORT_ROWS
    broadcast = site.index_flops is not None and one_slice(shape, plan)  # XLA's, of one slice
    big = rows and site.output_bytes >= short_rows_min_bytes(dtype, broadcast)
    if not (big and _hand_over_pays(site, INLINE_FLOPS) and xla_vectorises_rows_in_units()):
        return False
    if not (row := _pinned_rows(site)):
        return True  # no pinned select
    clamped = "rows_pinned_by_a_clamp" not in _disabled and xla_vectorises_rows_clamped(dtype, row)
    return not (clamped or xla_vectorises_pinned_rows(dtype, row))  # either pin's vector select


def _columns(site: Site) -> bool:
    """A Gather along the last axis of 1- or 2-byte data, where XLA widens its indices. Not for
    a short lookup: the reduce-window's flops would send it over INLINE_FLOPS; nor past
    COLUMNS_MAX_INDICES ids, whose written indices outgrow the cache. On one device,
    the only place it was measured. For 1- and 2-byte data only: with 4 bytes and more an element
    is read in the time of its index (float32 on an AMD EPYC with AVX-512: 0.85-1.06 without /
    with, 0.79-0.84 with the padded fill, where int8 gained 1.07-1.21). Not for sub-byte types,
    which XLA:CPU converts to bytes on the way (int4, 16 rows by 8192 ids: 1.04-1.07 without /
    with, 64 rows level). Under COLUMNS_FEW_ROWS rows, up to COLUMNS_FEW_ROWS_MAX_INDICES ids."""
    n, rows = site.components, math.prod(site.shape[:-1])
    # Not of one slice (a table of one column), XLA's broadcast: 129 ids of 1024 int8 rows, 2.3x
    # jnp's "fill" by the columns, 1.06 without.
    columns = (
        reads_columns(site.shape, site.plan) and site.one_device and not one_slice(site.shape, site.plan)
    )
    columns = columns and SHORT_LOOKUP_INDICES < n <= COLUMNS_MAX_INDICES
    columns = columns and (rows >= COLUMNS_FEW_ROWS or n <= COLUMNS_FEW_ROWS_MAX_INDICES)
    columns = columns and site.dtype.itemsize <= 2 and element_bits(site.dtype) >= 8
    return columns and xla_widens_column_indices()  # a CPU's fact: asked last, once a process


def _columns_forward(site: Site) -> bool:
    """_columns, for an output of COLUMNS_MIN_BYTES or more (below, the written indices cost more
    than the narrow loads save: a promise of 16x512 int8 columns 1.53-1.57x without), from rows
    of data of up to COLUMNS_MAX_ROW_BYTES."""
    narrow_rows = site.shape[-1] * site.dtype.itemsize <= COLUMNS_MAX_ROW_BYTES
    return site.output_bytes >= COLUMNS_MIN_BYTES and narrow_rows and _columns(site)


def _column_fill_pays(site: Site) -> bool:
    """_columns of padded data, where the fill from the pad keeps the program under INLINE_FLOPS
    (its select would not: 64 int8 rows by 129 ids, 0.29-0.32 of the time without), or from
    COLUMNS_MIN_BYTES of output (below: 1.05-1.79x without) unless XLA:CPU leaves its loop scalar."""
    slots = _INDEX_FLOPS if site.x64 else _INDEX_FLOPS_32  # x64: indices may be 64-bit
    inline = (slots + COLUMN_INDEX_FLOPS) * site.components < INLINE_FLOPS
    big = site.output_bytes >= COLUMNS_MIN_BYTES
    padded = _pads(site) and (inline or big) and _columns(site)
    return padded and (inline or not xla_scalarises_the_column_pad())  # a CPU's fact: asked last


def _direct_column_fill(site: Site) -> bool:
    """_columns_forward of data not padded (the narrow floats), or of fewer than COLUMN_SELECT_ROWS
    rows where the pad is not taken: the generic gather's select reads one index stream. Measured
    (AMD EPYC, int8 and uint8, 21 rounds), its time against the select after the column gather:
    16-256 rows by 1024-16384 ids 0.79-1.06 (one 1.12), 512-1024 rows by 4096-16384 ids 1.00-1.07."""
    few_rows = math.prod(site.shape[:-1]) < COLUMN_SELECT_ROWS and not _column_fill_pays(site)
    return (not _pads(site) or few_rows) and _columns_forward(site)


def _hand_over_pays(site: Site, flops: int) -> bool:
    """Whether a forward lowering that adds ``flops`` leaves the program on the thread it runs on
    without them, or moves it to a worker thread with HANDOFF_MIN_BYTES of output or more."""
    if site.index_flops is None:  # a fill's program: its select counts more
        return True
    before = site.index_flops * site.components
    moves = before < INLINE_FLOPS <= before + flops
    return not moves or site.output_bytes >= HANDOFF_MIN_BYTES


def _off_axis(site: Site) -> str | None:
    """For a Gather along an axis other than the first, unbatched: which derivative pays, if any."""
    dn = site.plan.dimension_numbers
    if site.plan.op_name != "Gather" or dn.start_index_map == (0,) or dn.operand_batching_dims:
        return None
    return off_axis.derivative(site.plan, site.shape, site.dtype, site.one_device, site.x64)


def _linear(site: Site) -> Any:
    """The dtype of one linear index into data, for an element gather on one device; else None."""
    one_device_elements = site.elements and len(site.shape) >= 2 and site.one_device
    return linear_index_dtype(site.shape, site.x64) if one_device_elements else None


def _scatter_handed_over(site: Site) -> bool:
    """Whether JAX's derivative's scatter alone counts INLINE_FLOPS (an add an element), so its
    program is handed over anyway (linear index, 208 elements: 1.59x; leading block, 598: 2.1x)."""
    return math.prod(site.plan.output_shape) >= INLINE_FLOPS


def _index_at_rows(site: Site) -> bool:
    """Whether XLA:CPU computes the linear index in vector instructions (else 1.12-1.24x JAX's).
    A split row's index only at rank two, where this JAX and CPU are asked: over more dims LLVM
    vectorises some shapes and not others (JAX 0.12, AMD EPYC with AVX2: 3 x 1754 x 57 yes,
    3 x 1755 x 57 no), which no count of the shape tells."""
    shape = site.plan.output_shape
    at_rows = linear.index_tasks_start_at_rows(shape, site.x64)
    return at_rows or (len(shape) == 2 and not linear.xla_scalarises_split_rows())  # asked last, once


def _linear_derivative(site: Site) -> bool:
    """An element gather whose derivative pays by one linear index: JAX's scatter is handed over
    anyway, the flat scatter pays for what XLA:CPU makes of data's flat zeros (_cpu_linear.
    flat_scatter_pays), and XLA computes the index in vector instructions (_index_at_rows, last)."""
    dtype = _linear(site)
    if dtype is None or not _scatter_handed_over(site):
        return False
    updates = math.prod(site.plan.output_shape)
    return linear.flat_scatter_pays(
        site.shape, site.dtype, updates, np.dtype(dtype).itemsize
    ) and _index_at_rows(site)


def _pads(site: Site) -> bool:
    """Whether data may be padded with the fill: on one device, and not for the narrow floats.
    Fact: XLA:CPU gathers bfloat16 as float32 and the float8 types as float16, between two
    converts, which in the padded loop widen and round each element on its own (bfloat16:
    measured slower than the select) and rewrite a NaN's payload (float8; the select is of the
    bits). Nor for sub-byte integers, which XLA:CPU converts to bytes over all of the padded data
    (flops XLA counts: a lookup of one row went to a worker thread)."""
    return site.one_device and not narrow_float(site.dtype) and not site.sub_byte_integer


def _batched_nd(site: Site) -> bool:
    """GatherND elements (full index tuples) after batch dims."""
    dn = site.plan.dimension_numbers
    return site.elements and site.plan.tuple_indices and bool(dn.operand_batching_dims)


def _batched_nd_elements(site: Site) -> bool:
    """_batched_nd, fewer than BATCHED_ND_LINEAR_TUPLES tuples (from there, the select after a
    gather was the faster fill, after the linear index's one-dim gather or without it)."""
    few = math.prod(site.plan.output_shape) < BATCHED_ND_LINEAR_TUPLES
    return _pads(site) and _batched_nd(site) and few


def _batched_nd_linear(site: Site) -> bool:
    """_batched_nd of BATCHED_ND_LINEAR_TUPLES index tuples or more, into data of whole bytes,
    where one linear index addresses it and XLA computes that index in vector instructions; not
    where that index would move the program to a worker thread (_hand_over_pays)."""
    many = math.prod(site.plan.output_shape) >= BATCHED_ND_LINEAR_TUPLES
    whole_bytes = not site.sub_byte_integer
    applies = _batched_nd(site) and many and whole_bytes and _linear(site) is not None
    applies = applies and _hand_over_pays(site, INLINE_FLOPS)
    return applies and xla_vectorises_linear_indices()  # a CPU's fact: asked last, once a process


def _short_lookup(site: Site) -> bool:
    """A lookup of rows with at most SHORT_LOOKUP_INDICES index components, only where the select
    would take it over INLINE_FLOPS (one flop per output element, a few per index component);
    below, the select is as cheap, and XLA counts the padded data among the pad's bytes and
    splits its loop into a task per core (one row: 1.26x jnp's time). Not where it reads more
    memory than its one core beats the select at (_reads_little)."""
    select_flops = math.prod(site.plan.output_shape) + _INDEX_FLOPS * site.components
    short = not site.elements and site.components <= SHORT_LOOKUP_INDICES
    # Not of one slice, XLA's broadcast: 128 ids of a column of 128-4096 rows, 1.7-2.4x jnp's
    # "fill" from the pad, 0.99 without.
    short = short and not one_slice(site.shape, site.plan)
    return _pads(site) and short and select_flops >= INLINE_FLOPS and _reads_little(site)


def _reads_little(site: Site) -> bool:
    """SHORT_LOOKUP_MAX_LINES of cache lines where XLA:CPU splits the select's loop into tasks,
    and not where it splits the pad's loop alone (one slice from 512 KiB of data); on one core,
    SHORT_LOOKUP_MAX_LINES_ONE_CORE in SHORT_LOOKUP_MAX_RUNS_ONE_CORE runs."""
    runs, lines = runs_and_lines(site.plan, site.shape, site.dtype)
    if xla_splits_loops():
        return lines <= SHORT_LOOKUP_MAX_LINES and not pad_loop_splits_alone(*site.counted)
    return lines <= SHORT_LOOKUP_MAX_LINES_ONE_CORE and runs <= SHORT_LOOKUP_MAX_RUNS_ONE_CORE


def _nd_two_loops(site: Site) -> bool:
    """A GatherND fill of index tuples (of two components or more) of one element each, without
    batch dims, whose one loop XLA:CPU would split where it keeps jnp's index loop whole (below
    32768 pairs), and for the sub-byte types it converts to bytes, jnp's element loop too (where
    that splits, the one split loop took 0.65-0.80 of jnp's time, two 0.87-1.05: int4 pairs from
    tables of 25-40000 elements; bfloat16 and float8 pairs in two loops 0.39-0.63, in one 0.57-0.96).
    Not in a process on one core, where it splits no loop: there, the one loop took 0.74-0.80 of
    the two's time (8192 int8 pairs, AMD EPYC pinned to one core)."""
    elements = math.prod(site.plan.slice_sizes) == 1
    if not (_unbatched_tuples(site.plan) and elements and xla_splits_loops()):
        return False
    jnps = jnp_splits_its_index_loop(site.components)
    jnps = jnps or (converted_on_the_way(site.dtype) and jnp_splits_its_element_loop(*site.counted))
    return nd_fill_loop_splits(*site.counted) and not jnps


def _nd_written_indices(site: Site) -> bool:
    """A GatherND fill of index tuples (of two components or more) that read slices, without
    batch dims, where XLA:CPU would split the and-ed one loop (``tuple_mask_by_and``) and the
    generic gather's loop and keep jnp's loops whole (_cpu_split.indexed_loop_splits): read from
    written indices, the gather's loop counts what jnp's counts. Not on one core, nor from one
    slice (XLA's broadcast: the indices' wrap split the flag's loop; uint8 pairs of rows of 9-108
    by 1901-8192: 1.1-2.7x jnp's "fill", the generic 0.86-1.0)."""
    one = one_slice(site.shape, site.plan)
    slices = site.index_flops is None and math.prod(site.plan.slice_sizes) > 1 and not one
    if not (_unbatched_tuples(site.plan) and slices and xla_splits_loops()):
        return False
    return and_loop_splits(*site.counted) and indexed_loop_splits(*site.counted)


def _unbatched_tuples(plan: GatherPlan) -> bool:
    """GatherND index tuples of two components or more, without batch dims."""
    dn = plan.dimension_numbers
    return plan.tuple_indices and len(dn.start_index_map) > 1 and not dn.operand_batching_dims


def _tuple_slices(site: Site) -> bool:
    """A fill of index tuples of two components or more that each read a slice of more than one
    element (not one element, nor one component: _cpu_fills), whose one loop XLA:CPU keeps
    whole where it keeps jnp's (_cpu_split.and_loop_splits)."""
    plan = site.plan
    pairs = plan.tuple_indices and len(plan.dimension_numbers.start_index_map) > 1
    if not (site.index_flops is None and pairs and math.prod(plan.slice_sizes) > 1):
        return False
    return not (xla_splits_loops() and and_loop_splits(plan, site.shape, site.dtype, site.components))


def _pinned_rows(site: Site) -> tuple[int, ...]:
    """A fill's rows whose bits its select pins, of up to 64 elements (SHORT_ROWS); else ()."""
    return pinned_rows(site.plan, site.dtype, SHORT_ROWS[-1]) if site.index_flops is None else ()


def _element_pin(site: Site) -> Any:
    """How a fill's select keeps the bits of single elements, where not as the generic select."""
    return (
        element_pin(site.plan, site.shape, site.dtype)
        if site.index_flops is None and site.one_device
        else None
    )


def _row_pin(site: Site) -> Any:
    """How a fill's select keeps the bits of its rows, where not as the generic select (None)."""
    return select_pin(site.plan, site.shape, site.dtype, SHORT_ROWS[-1]) if site.index_flops is None else None


ROWS = (
    Row(
        "columns_by_written_indices",
        "forward",
        lambda s: _columns_forward(s) and _hand_over_pays(s, COLUMN_INDEX_FLOPS * s.components),
        lambda s: columns_by_written_indices,
    ),
    Row(
        "batched_nd_by_linear_index",
        "forward",
        _batched_nd_linear,
        lambda s: functools.partial(linear.by_linear_index, dtype=_linear(s)),
    ),
    Row(
        "short_rows_in_bytes",
        "forward",
        _short_rows,
        lambda s: functools.partial(rows_in_units, unit=jnp.uint4 if s.dtype.itemsize == 1 else jnp.uint8),
    ),
    Row(
        "moved_axis_derivative",
        "derivative",
        lambda s: _off_axis(s) == off_axis.MOVED,
        lambda s: off_axis.rows_of_moved_axis,
    ),
    Row(
        "leading_block_derivative",
        "derivative",
        lambda s: _off_axis(s) == off_axis.LEADING and _scatter_handed_over(s),
        lambda s: functools.partial(off_axis.rows_of_leading_block, dtype=linear_index_dtype(s.shape, s.x64)),
    ),
    Row(
        "linear_derivative",
        "derivative",
        _linear_derivative,
        lambda s: functools.partial(linear.by_linear_index, dtype=_linear(s)),
    ),
    Row("one_slice_fill_from_a_table", "fill", one_entry.table_pays, lambda s: one_entry.fill_from_one_slice),
    Row(
        "one_slice_fill_of_pinned_bits",
        "fill",
        one_entry.pinned_slice_pays,
        lambda s: one_entry.fill_of_pinned_slice,
    ),
    Row("batched_nd_fill_from_pad", "fill", _batched_nd_elements, lambda s: read_fill_from_pad),
    Row("short_lookup_fill_from_pad", "fill", _short_lookup, lambda s: read_fill_from_pad),
    Row("column_fill_from_pad", "fill", _column_fill_pays, lambda s: column_fill_from_pad),
    Row("column_fill_by_the_direct_gather", "fill", _direct_column_fill, lambda s: fill_after_written_slots),
    Row("nd_fill_from_written_indices", "fill", _nd_written_indices, lambda s: fill_after_written_indices),
    Row("nd_fill_in_two_loops", "fill", _nd_two_loops, lambda s: fill_after_written_slots),
    Row("rows_pinned_by_a_clamp", "pin", lambda s: _row_pin(s) is clamped_bits, lambda s: clamped_bits),
    Row("fill_pinned_instead_of_rows", "pin", lambda s: _row_pin(s) is opaque_fill, lambda s: opaque_fill),
    Row("fill_pinned_for_elements", "pin", lambda s: _element_pin(s) is opaque_fill, lambda s: opaque_fill),
    Row("tuple_mask_by_and", "mask", _tuple_slices, lambda s: all_components),
)
LOWERINGS = tuple(row.name for row in ROWS)


def lowering(plan: GatherPlan, shape: tuple, dtype: Any, index_flops: int | None = None) -> Lowering:
    """The CPU lowering of ``plan`` for data of ``shape`` and ``dtype`` (cached); ``index_flops``:
    what XLA counts per index component for the mode's arithmetic (None where a fill is selected)."""
    site = Site(plan, tuple(shape), np.dtype(dtype), x64_on(), cpu_devices(), index_flops)
    return _choose(site, _disabled)


def gather_lowering(
    plan: GatherPlan, shape: tuple, dtype: Any, indices: Any, mode: Mode
) -> tuple[Lowering, bool]:
    """The CPU lowering of a gather in ``mode`` (from what XLA counts of its index arithmetic; of
    the data block it gathers, for a fill), and whether its indices go unclamped: a promise's are
    only normalised where the clamp does not pay, or where on this CPU it leaves scalar a loop
    LLVM vectorises without it; a fill's read index 0 out of bounds where on this CPU that loop
    is vectorised and the clamped one is not (jax_gather._cpu_clamp)."""
    promise = mode is Mode.PROMISE_IN_BOUNDS
    if mode.fills:
        low = lowering(plan, block := plan.data_block or shape, dtype)
        return low, clamp_stops_the_fill_loop(plan, block, dtype, indices, low)
    if promise and clamp_pays(plan, indices, dtype):
        each = (index_flops(clip=False, unclamped=u, in_range=False) for u in (False, True))
        clamped, free = (lowering(plan, shape, dtype, f) for f in each)
        stops = clamp_stops_the_vector_loop(plan, shape, dtype, indices, clamped, free)
        return (free if stops else clamped), stops
    clip, in_range = mode is Mode.CLIP, mode is Mode.IN_RANGE
    flops = index_flops(clip=clip, unclamped=promise, in_range=in_range, plan=plan, components=indices.size)
    return lowering(plan, shape, dtype, flops), promise


@contextlib.contextmanager
def without(*names: str) -> Iterator[None]:
    """Programs traced inside are those of the library without these CPU lowerings.

    For measuring a lowering against the program it replaces. JAX's caches are cleared on
    entry and on exit, so no program traced on one side is reused on the other: compile what
    is traced inside before leaving (``jax.jit(f).lower(...).compile()``).
    """
    global _disabled
    if unknown := sorted(set(names) - set(LOWERINGS)):
        raise ValueError(f"without: unknown lowerings {unknown}; the lowerings are {list(LOWERINGS)}")
    previous, _disabled = _disabled, frozenset(names)
    jax.clear_caches()
    try:
        yield
    finally:
        _disabled = previous
        jax.clear_caches()


_disabled: frozenset[str] = frozenset()
PLATFORM_DEPENDENT_PRUNES = JAX_RELEASE >= (0, 7, 0)


@functools.lru_cache(maxsize=1024)
def _choose(site: Site, disabled: frozenset) -> Lowering:
    """For each part, the first row not ``disabled`` whose rule holds."""
    if not PLATFORM_DEPENDENT_PRUNES or not static(site.shape, site.plan.output_shape):
        return GENERIC
    parts: dict[str, Any] = {}
    for row in ROWS:
        if row.part not in parts and row.name not in disabled and row.applies(site):
            parts[row.part] = (row.name, row.make(site))
    functions = {part: function for part, (_, function) in parts.items()}
    return Lowering(**functions, names=frozenset(name for name, _ in parts.values()))
