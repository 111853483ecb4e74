"""The CPU lowerings of "fill" (jax_gather._cpu's table chooses them): read from a pad of data, or
the generic gather and its select from index slots written out."""

from __future__ import annotations

import functools
import math
import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_gather._cpu_client import INLINE_FLOPS, kernel_ir_holds, kernels, lowered_for_cpu
from jax_gather._cpu_columns import columns_by_written_indices
from jax_gather._cpu_split import SPLIT_ANYWAY_BYTES
from jax_gather._fill import (
    PinFn,
    clamped_bits,
    element_bits,
    pinned_bits,
    xla_cpu_keeps_bits,
)
from jax_gather._fill_pin import opaque_fill, pins_the_fill
from jax_gather._lowering import (
    GENERIC,
    FillFn,
    Lowering,
    direct,
    gather_or_fill,
    one_slice,
    own_elements,
    select_fill,
)
from jax_gather._traced_bounds import axis_sizes, in_bounds_mask, written_indices
from jax_gather.plans import GatherPlan, gather_elements_plan, gather_plan, trailing_slice

# ---- "fill" read from a pad of data ------------------------------------------------------------------
# Data gets one fill_value at the end of each indexed axis and every out-of-bounds index goes to
# that slot, so the gather reads the fill itself and no select over the output follows. Fact:
# XLA fuses the pad into the gather's loop (data is never copied). GatherND elements after batch
# dims, below jax_gather._cpu.BATCHED_ND_LINEAR_TUPLES: measured 0.87-1.00 of the select's time
# (AMD EPYC); after a GatherND without batch dims the select measured faster than the pad. Short
# row lookups.
# Fact: the select counts one flop per output element, which alone sends a lookup of a few rows
# over INLINE_FLOPS, to a worker thread.


def read_fill_from_pad(
    data: jax.Array,
    slots: jax.Array,
    fill: jax.Array,
    indices: jax.Array,
    plan: GatherPlan,
    low: Lowering = GENERIC,
) -> jax.Array:
    """The fill read from a pad of data (no select, so no pin: ``indices`` and ``low`` unread)."""
    return direct(padded(data, fill, plan), slots, plan)


def padded(data: jax.Array, fill: jax.Array, plan: GatherPlan, first_only: bool = False) -> jax.Array:
    """Data with one ``fill`` past the end of each indexed axis (``first_only``: of the first)."""
    padding = [(0, 0, 0)] * data.ndim
    axes = plan.dimension_numbers.start_index_map
    for axis in axes[:1] if first_only else axes:
        padding[axis] = (0, 1, 0)
    return lax.pad(data, fill, padding)


# ---- Gather along the last axis: the indices written out as 64-bit (jax_gather._cpu_columns) ----
# Fact: the select of "fill" after such a gather recomputes the in-bounds mask from the indices
# for every output element (XLA fuses the mask's arithmetic into the loop); from written-out
# slots and a pad of data, the loop compares each index it reads with the axis size instead.


def column_fill_from_pad(
    data: jax.Array,
    slots: jax.Array,
    fill: jax.Array,
    indices: jax.Array,
    plan: GatherPlan,
    low: Lowering = GENERIC,
) -> jax.Array:
    """The column gather's fill read from a pad of data (no select: ``indices`` and ``low``
    unread)."""
    return columns_by_written_indices(padded(data, fill, plan), slots, plan)


# Fact (a CPU's): on the AMD EPYC (AVX-512, Zen 4; JAX 0.10 and 0.12) LLVM leaves the loop from the
# pad scalar (an index compared, then data or the pad read, an element at a time) and vectorises
# the select's, 4 lanes; there, past INLINE_FLOPS, the pad took 1.05-2.0x the select's time
# (uint8 rows by 12982 ids: 1.4-2.0; 1024 rows by 32768 ids 1.17; the benchmark's int8 columns,
# 512 rows by 2048 ids, without / with 0.85), where on an Intel Xeon with AVX-512 it paid 1.15x
# (its IR not recorded). So the CPU at hand is asked, once per process.
_BYTE_VECTORS = re.compile(r"<\d+ x i8>")


@functools.cache
def xla_scalarises_the_column_pad() -> bool:
    """Whether XLA:CPU, for this process's CPU and flags, compiles the fill of an int8 column
    gather from a pad to scalar instructions and its select to vector ones: the LLVM IR of both
    fills of 1024 ids of 64 rows (about 100 ms)."""
    plan = gather_plan((64, 4096), (1024,), 1)

    def vectorised(fill_fn: FillFn | None) -> bool:
        low = Lowering(forward=columns_by_written_indices, fill=fill_fn)
        fill = lambda d, i: gather_or_fill(d, i, in_bounds_mask(plan, i), jnp.zeros((), jnp.int8), plan, low)
        return kernel_ir_holds(_BYTE_VECTORS, fill, ((64, 4096), jnp.int8), ((1024,), jnp.int32))

    return vectorised(None) and not vectorised(column_fill_from_pad)  # the select's, the pad's


# ---- GatherND's fill from index vectors written out ---------------------------------------------
# The slots (stacked one component at a time: jax_gather._traced_bounds.working_indices) are read
# twice, for the mask and for the index, so XLA writes them out in a loop of their own: the fill
# of elements in two loops, the gather's clamping each slot (a flop a component). Of slices, the
# index vectors themselves are written out, in range (written_indices), and the flag reduced in
# a loop of its own from them and the indices as given: the gather's loop then counts what
# jnp's counts (jnp too writes its normalised indices out and reads them in two loops).
# The select's pin reads the indices as given: the slots of an axis of one element are 0 or 1, a
# range XLA and LLVM know, so opaque zeros made of them are not opaque (bfloat16 read from one
# slice lost signalling NaNs and subnormals: 700 ids into 16 rows of one column).


def fill_after_written_slots(
    data: jax.Array,
    slots: jax.Array,
    fill: jax.Array,
    indices: jax.Array,
    plan: GatherPlan,
    low: Lowering = GENERIC,
) -> jax.Array:
    """The generic gather and its select, from the slots: GatherND's fill in two loops, and a
    column gather's where it selects its fill (no pad), its bits kept by ``low``'s ``pin``
    where the CPU table chose one (:func:`select_pin`; the pinned fill counts one flop an
    element in XLA's count where a pin of each element counts four: those took bfloat16 columns
    of 8-16 rows by 3000-8192 ids past one flop a byte, a loop XLA split, 1.3-2.2x jnp's time
    on JAX 0.12)."""
    sizes = axis_sizes(plan, slots.dtype)
    ok = jnp.all(slots < sizes, axis=-1)
    return select_fill(data, jnp.minimum(slots, sizes - 1), ok, fill, indices, plan, low.pin_only())


def fill_after_written_indices(
    data: jax.Array,
    slots: jax.Array,
    fill: jax.Array,
    indices: jax.Array,
    plan: GatherPlan,
    low: Lowering = GENERIC,
) -> jax.Array:
    """The generic gather and its select, from index vectors written out in a loop of their own
    (:func:`jax_gather._traced_bounds.written_indices`; ``slots`` unread): GatherND's fill of
    slices in three loops, as ``jnp``'s, whose gather's loop counts no index arithmetic."""
    idx, ok = written_indices(plan, indices)
    return select_fill(data, idx, ok, fill, indices, plan, low.pin_only())


# ---- the in-bounds flag of an index tuple ----------------------------------------------------------
# Fact: XLA:CPU computes jnp.all over a tuple's component flags in a loop of its own, before a
# gather of slices (where the select broadcasts the flag over each slice), and its cost analysis
# counts that mask twice (6 flops a pair more than the and of the components, which it computes
# in the gather's loop): 65 pairs of float32 rows of 2 count 1365 flops, which hands the program
# to a worker thread, 975 as and-ed (jnp's "fill" counts 975). Before a gather of elements it
# fuses the reduction into the gather's one loop, which LLVM vectorises there and not with the
# and (AVX2, AVX-512): there the reduction stays.


def all_components(ok: jax.Array) -> jax.Array:
    """``jnp.all(ok, axis=-1)`` as an and of its components, one elementwise op each."""
    flags = ok[..., 0]
    for k in range(1, ok.shape[-1]):
        flags = flags & ok[..., k]
    return flags


# ---- the pin of the select of bfloat16 rows ----------------------------------------------------
# Fact: XLA:CPU's loop over the rows of a pinned select (jax_gather._fill.select_exact) is one
# LLVM loop per row, which LLVM unrolls into scalar moves where its body is short enough for its
# trip count and vectorises where not. With the exclusive-or pin it unrolls rows of up to 58
# bfloat16; with the clamp pin (two compares an element, one op in XLA's count as the xor) it
# vectorises them from 38, as it does jnp's "fill" (a select in float32, which quiets signalling
# NaNs) from 40 (x86-64 with AVX-512, and XLA's code for AVX2 and SSE4_2; JAX 0.10 and 0.12).
# Measured (AMD EPYC), the default mode of rows of 40-56 against jnp's "fill": from 300 to 4000
# ids the exclusive or 1.5-2.7x, the clamp 0.73-1.0 (on the calling thread; on JAX's worker
# thread the exclusive or took up to 4x); rows of 16-32, both scalar: the clamp 1.0-1.4x the
# exclusive or. Rows read in bytes (short_rows_in_bytes) before the clamp's select: 16384-300000
# GatherND rows 0.84-1.33 of jnp's time, as they are 0.66-1.01; before the exclusive or's, where
# LLVM vectorises it (rows of 60-64), 1.05-1.33x the time of the rows as they are.


def pinned_rows(plan: GatherPlan, dtype: np.dtype, longest: int) -> tuple[int, ...]:
    """The shape of the output's rows (its trailing dims that are slice dims) where a fill's select
    pins their bits (jax_gather._fill.xla_cpu_keeps_bits), rows of up to ``longest`` elements;
    () elsewhere, and where the output's last dim is an index's."""
    if xla_cpu_keeps_bits(dtype):
        return ()
    row = trailing_slice(plan)
    return row if row and row[-1] <= longest else ()


@functools.lru_cache(maxsize=256)
def xla_vectorises_pinned_rows(dtype: Any, row: tuple[int, ...], pin: PinFn = pinned_bits) -> bool:
    """Whether XLA:CPU compiles the select of "fill" over rows of shape ``row`` of ``dtype``,
    pinned by ``pin`` (the exclusive or unless told), to vector instructions: asked once a process,
    type, row shape and pin, by the LLVM IR of a lookup of two such rows (20-50 ms)."""
    vectors = re.compile(rf"<\d+ x i{8 * jnp.dtype(dtype).itemsize}>")
    data = ((4, *row), dtype)
    plan = gather_plan(data[0], (2,), 0)
    fill = jnp.zeros((), dtype)
    lookup = lambda d, i: gather_or_fill(d, i, in_bounds_mask(plan, i), fill, plan, Lowering(pin=pin))
    return kernel_ir_holds(vectors, lookup, data, ((2,), jnp.int32))


def select_pin(plan: GatherPlan, shape: tuple, dtype: np.dtype, longest: int) -> PinFn | None:
    """How a fill's select keeps the bits of slices of more than one element where the generic
    pin (None: each selected element pinned by an exclusive or) is not the choice.

    :func:`jax_gather._fill_pin.opaque_fill` (the select against a pinned fill) where XLA:CPU
    keeps their bits so (jax_gather._fill_pin.pins_the_fill), not from one slice (XLA's
    broadcast): one flop an element in XLA's count, as jnp's select, where a pin of each element
    counts four. Except, for an output of INLINE_FLOPS elements or more (on a worker thread
    either way), rows of up to ``longest`` elements whose pinned select XLA:CPU vectorises: there
    the plain select took 1.5-3.8x its time. The clamp where XLA:CPU vectorises its select of the
    rows and not the exclusive or's."""
    row = pinned_rows(plan, dtype, longest)
    fill = math.prod(plan.slice_sizes) > 1 and not one_slice(shape, plan) and pins_the_fill(dtype)
    if fill and (not row or math.prod(plan.output_shape) < INLINE_FLOPS):
        return opaque_fill
    if row and xla_vectorises_rows_clamped(dtype, row):
        return clamped_bits
    if fill and row and xla_vectorises_pinned_rows(dtype, row):
        return None  # the exclusive or's vector loop
    return opaque_fill if fill else None


# Fact (x86-64): LLVM folds the bitcasts around the select of bfloat16 elements that select_exact
# makes of their bit patterns into a select of bfloat vectors (JAX 0.10; from 0.11 XLA selects
# bfloat16 as it is, the same vectors), which x86-64 without native bfloat16 vectors compiles to a
# test and branch per element: on an AMD EPYC with AVX2 (Zen 3)
# GatherElements of (2**20, 1) along its axis took 570 us where jnp's select in float32 took 270.
# Against a fill whose bits went through an integer op (opaque_fill) the select stays one of
# 16-bit integers, vector instructions on any x86-64 CPU: 140 us. Its zeros are one for all on
# one device, which XLA counts once (5 flops). From JAX 0.11 the bit patterns selected count 2
# flops an element more, which below SPLIT_ANYWAY_BYTES would split loops jnp keeps whole
# (GatherElements of (n, 1) from 2248 elements, jnp's from 65536); from there both split, and on
# JAX 0.12 (2**20, 1) took 0.10 of jnp's time.
# A CPU with native bfloat16 vectors (AVX512_BF16: the AMD EPYC Zen 4, Intel's Xeons from Cooper
# Lake) blends those vectors with a mask (vpblendmw), no branch: there the pin measured level
# (without / with it 0.71-1.18 on JAX 0.10, 0.87-1.06 on 0.12, intervals across 1.0; GatherElements
# of 512 x 512 on 0.12 0.92). So the machine code is asked too: a branch per element is
# BRANCHES_PER_ELEMENT or more conditional jumps than the pinned select's (10-28 more with AVX2 or
# AVX-512 without BF16 on the probe's and the shapes of tests/test_cpu_facts.py, 0-1 with AVX512_BF16).
BRANCHES_PER_ELEMENT = 8
BFLOAT_VECTOR_SELECT = re.compile(r"select <\d+ x i1> [^,]+, <\d+ x bfloat>")


def element_pin(plan: GatherPlan, shape: tuple, dtype: np.dtype) -> PinFn | None:
    """How a fill's select of single elements keeps its bits where the generic select (None)
    would be one of bfloat vectors and the pinned fill's not
    (:func:`xla_selects_bfloat_vectors_unless_pinned`), for the elements the generic lowering
    does not pin (not from one slice but each its own element after batch dims), where its 5
    flops neither move the program to a worker thread nor split its loop: from SPLIT_ANYWAY_BYTES
    of data, output and indices (4 bytes an element at least), where XLA:CPU splits the loop of
    either select. Below, the 5 can take a loop of as many flops as bytes past the count at which
    XLA splits it (:mod:`jax_gather._cpu_split`; GatherElements of 1024 x 4 bfloat16 elements
    along axis 0 of 4096 x 4: 57344 of each, its loop split, 2.4-5.4x the time without the pin
    and 2.2-5.1x jnp's on the AMD EPYC with AVX2)."""
    single = math.prod(plan.slice_sizes) == 1
    unpinned = not one_slice(shape, plan) or own_elements(shape, plan)
    elements = math.prod(plan.output_shape)
    loop_bytes = (elements + math.prod(shape)) * element_bits(dtype) // 8 + 4 * elements
    if not single or not unpinned or elements < INLINE_FLOPS or loop_bytes < SPLIT_ANYWAY_BYTES:
        return None
    return opaque_fill if xla_selects_bfloat_vectors_unless_pinned(dtype) else None


@functools.lru_cache(maxsize=16)
def xla_selects_bfloat_vectors_unless_pinned(dtype: np.dtype) -> bool:
    """Whether XLA:CPU compiles the generic select of "fill" over single elements of ``dtype`` (of
    bit patterns through JAX 0.10, :func:`jax_gather._fill.selected_as_bits`; of bfloat16 as it
    is from 0.11) to a select of LLVM's bfloat vectors, and the select of bit patterns against the
    pinned fill to none, and that select to a test and branch per element (where objdump can
    say): asked once a process and type, by the LLVM IR and machine code of a GatherElements of
    64 x 33 elements both ways (about 80 ms)."""
    if "bfloat" not in str(np.dtype(dtype)):  # LLVM's one type of that name is bfloat16's
        return False
    plan = gather_elements_plan((64, 33), (64, 33), 1)
    fill: Any = np.zeros((), dtype)  # a constant also while a trace is open (a fill passed in is not folded)
    arguments = ((64, 33), dtype), ((64, 33), jnp.int32)

    def compiled(low: Lowering) -> tuple[bool, int | None]:
        """Whether its IR selects bfloat vectors, and its conditional jumps where known."""
        select = lambda d, i: gather_or_fill(d, i, in_bounds_mask(plan, i), fill, plan, low)
        found = kernels(lowered_for_cpu(select, *arguments), jumps=True)
        jumps = [k.conditional_jumps for k in found]
        counted = [j for j in jumps if j is not None]
        return any(BFLOAT_VECTOR_SELECT.search(k.ir) for k in found), sum(
            counted
        ) if counted == jumps else None

    (generic, generic_jumps), (pinned, pinned_jumps) = compiled(GENERIC), compiled(Lowering(pin=opaque_fill))
    if not generic or pinned:
        return False
    # Without objdump the IR alone decides (where the pin costs nothing measurable, above).
    if generic_jumps is None or pinned_jumps is None:
        return True
    return generic_jumps >= pinned_jumps + BRANCHES_PER_ELEMENT


def xla_vectorises_rows_clamped(dtype: Any, row: tuple[int, ...]) -> bool:
    """Whether XLA:CPU vectorises the pinned select of "fill" over rows of shape ``row`` of
    ``dtype`` with the clamp pin and not with the exclusive or (two compiles, once)."""
    return xla_vectorises_pinned_rows(dtype, row, clamped_bits) and not xla_vectorises_pinned_rows(dtype, row)
