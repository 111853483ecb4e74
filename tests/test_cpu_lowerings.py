"""The CPU lowerings (jax_gather/_cpu.py): which plans take each, that only a CPU program holds
them, that they compute exactly what the generic lowering computes in every mode and dtype,
forward and backward, and that the library without each (``_cpu.without``) is the generic
program. What each rests on is tested in test_cpu_facts.py; what each gains is measured by
benchmarks/lowering_choices.py."""

import functools
import math
import re
import warnings

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import export
from jax.experimental import checkify
from jax.test_util import check_grads

import jax_gather
from jax_gather import (
    _cpu,
    _cpu_columns,
    _cpu_fills,
    _cpu_linear,
    _cpu_off_axis,
    _cpu_one_slice,
    _cpu_rows,
    _cpu_split,
    _fill,
    _fill_pin,
    _lowering,
    plans,
)
from jax_gather._arguments import Mode
from jax_gather._cpu_client import usable_cores
from tests import ops_table, reference
from tests.compat import enable_x64
from tests.programs import bits, check_linear_to_second_order, module_for, random_bits
from tests.strategies import make_indices, make_wild_indices

# XLA:CPU's lowerings, compiled for this process's CPU even where the default device is another.
pytestmark = pytest.mark.usefixtures("on_the_cpu")
ON = _cpu.PLATFORM_DEPENDENT_PRUNES  # JAX 0.7.0 or later: otherwise no CPU lowering is used
needs_cpu_lowerings = pytest.mark.skipif(not ON, reason="the CPU lowerings need JAX 0.7.0")
ROWS, LINEAR, MOVED = "short_rows_in_bytes", "linear_derivative", "moved_axis_derivative"
LEADING = "leading_block_derivative"
ND_PAD, LOOKUP_PAD = "batched_nd_fill_from_pad", "short_lookup_fill_from_pad"
COLUMNS, COLUMN_PAD = "columns_by_written_indices", "column_fill_from_pad"
COLUMN_DIRECT = "column_fill_by_the_direct_gather"
ND_LINEAR, TWO_LOOPS = "batched_nd_by_linear_index", "nd_fill_in_two_loops"
WRITTEN = "nd_fill_from_written_indices"
CLAMP, FILL_PIN = "rows_pinned_by_a_clamp", "fill_pinned_instead_of_rows"
AND = "tuple_mask_by_and"
ONE_SLICE = "one_slice_fill_from_a_table"
PINNED_COLUMN = "one_slice_fill_of_pinned_bits"
# Index pairs from which jnp's index loop splits too, where GatherND's fill stays in one (32768).
N2 = _cpu_split.SPLIT_ANYWAY_BYTES // 16
E = _cpu_split.SPLIT_ANYWAY_BYTES // 8  # bfloat16 (n, 1): 2 bytes of data, 2 of output, 4 of index
# Index tuples enough for a GatherND after batch dims to read by one linear index (2048).
T = _cpu.BATCHED_ND_LINEAR_TUPLES
# 2**31 + 65536 elements: one past what an int32 offset addresses, without allocating them.
HUGE = (32769, 65536)
S = _cpu.SHORT_LOOKUP_INDICES
ROWS_PER_INDEX = _cpu_columns.COLUMN_ROWS
# Ids enough for rows of 64 bytes to reach SHORT_ROWS_MIN_BYTES of output (8192), and rows of 32
# bytes of one-byte data to reach SHORT_ROWS_MIN_BYTES_OF_BYTES.
R = _cpu_rows.SHORT_ROWS_MIN_BYTES // 64
assert _cpu_rows.SHORT_ROWS_MIN_BYTES_OF_BYTES // 32 == R
# The column lowerings are chosen only where XLA widens indices in the loop (a fact of the CPU).
WIDENS = _cpu.xla_widens_column_indices()
COLUMN_PAIR = {COLUMNS, COLUMN_PAD} if WIDENS else set()
# Past INLINE_FLOPS, the fill from a pad only where XLA does not leave its loop scalar (a CPU's);
# else, under COLUMN_SELECT_ROWS rows, the generic gather's select.
SCALAR_PAD = _cpu.xla_scalarises_the_column_pad()
BIG_COLUMNS = (COLUMN_PAIR - {COLUMN_PAD}) | {COLUMN_DIRECT} if WIDENS and SCALAR_PAD else COLUMN_PAIR
# The linear index forward only where XLA computes it in vector instructions (a fact of the CPU).
BY_LINEAR = {ND_LINEAR} if _cpu.xla_vectorises_linear_indices() else set()
# The two-loop fill only where XLA splits loops into tasks (a process on two cores or more).
SPLIT = {TWO_LOOPS} if _cpu.xla_splits_loops() else set()
SPLIT_WRITTEN = {WRITTEN} if _cpu.xla_splits_loops() else set()
# A tuple's mask is an and where XLA would not split its one loop (nor on one core).
SPLIT_AND = set() if _cpu.xla_splits_loops() else {AND}
# bfloat16 rows pinned element by element (rows_pinned_on_any_jax): where the and-ed loop and the
# reduced flag's would split, the fill from written indices. The pinned select counts 3 flops an
# element where its bits are selected (JAX 0.10: XLA:CPU selects the type in float32), and is
# counted at the bound of 4 where XLA selects the type as it is: rows of 2 by 2048 split there.
PINNED_SPLIT = SPLIT_WRITTEN
BF16_BITS = _fill.xla_cpu_converts_select(np.dtype(ml_dtypes.bfloat16))
PINNED_AT_THE_BOUND = SPLIT_AND if BF16_BITS else SPLIT_WRITTEN
# A lookup reads 6 MiB of cache lines from a pad only where XLA splits the select's loop.
SPLIT_PAD = {LOOKUP_PAD} if _cpu.xla_splits_loops() else set()
# The linear derivative of an odd count of rows only where XLA does not split its index's loop,
# or computes it in vector instructions all the same (from JAX 0.12).
ODD_ROWS = set() if _cpu.xla_splits_loops() and _cpu_linear.xla_scalarises_split_rows() else {LINEAR}
# bfloat16 elements selected against the pinned fill from 512 KiB of their loop, where the
# generic select would be one of bfloat vectors (x86-64 with AVX2 or AVX-512).
PINNED_ELEMENTS = "fill_pinned_for_elements"
ELEMENTS = (
    {PINNED_ELEMENTS}
    if _cpu_fills.xla_selects_bfloat_vectors_unless_pinned(np.dtype(ml_dtypes.bfloat16))
    else set()
)
# Over more dims than two, a split row keeps JAX's derivative whatever this JAX does at rank two.
ODD_ROWS_OF_RANK_3 = set() if _cpu.xla_splits_loops() else {LINEAR}


# (data shape, dtype, plan, the lowerings it takes on one CPU device)
# fmt: off
SELECTIONS = [
    # Short rows (16 to 64 elements, taken whole, ending the output) in narrower units.
    # From SHORT_ROWS_MIN_BYTES of output.
    ((100, 16), np.float32, plans.gather_plan((100, 16), (R,), 0), {ROWS}),
    ((100, 16), np.float32, plans.gather_plan((100, 16), (R - 1,), 0), set()),  # the tasks cost more
    ((100, 16), np.float32, plans.gather_plan((100, 16), (2, R // 2), 0), {ROWS}),
    ((100, 64), np.float32, plans.gather_plan((100, 64), (R // 4,), 0), {ROWS}),
    ((100, 64), np.float32, plans.gather_plan((100, 64), (S + 1,), 0), set()),
    ((100, 15), np.float32, plans.gather_plan((100, 15), (2 * R,), 0), set()),  # too short to pay
    ((100, 65), np.float32, plans.gather_plan((100, 65), (R,), 0), set()),  # XLA vectorises it
    ((100, 32), ml_dtypes.bfloat16, plans.gather_plan((100, 32), (R,), 0), {ROWS}),
    ((100, 512), ml_dtypes.bfloat16, plans.gather_plan((100, 512), (R,), 0), set()),
    ((100, 32), np.int64, plans.gather_plan((100, 32), (R,), 0), {ROWS}),
    ((100, 32), ml_dtypes.bfloat16, plans.gather_plan((100, 32), (R - 1,), 0), set()),  # 2 bytes: 512 KiB
    ((100, 32), np.int8, plans.gather_plan((100, 32), (R,), 0), {ROWS}),  # 1 byte: 256 KiB
    ((100, 32), np.int8, plans.gather_plan((100, 32), (R - 1,), 0), set()),
    ((100, 32), np.int8, plans.gather_plan((100, 32), (R // 2,), 0), set()),  # 128 KiB
    # A short lookup's fill comes from a pad.
    ((100, 32), np.int8, plans.gather_plan((100, 32), (30,), 0), {LOOKUP_PAD}),
    # Not where the select keeps the lookup under INLINE_FLOPS anyway (224 + 7 * 7 flops).
    ((100, 32), np.int8, plans.gather_plan((100, 32), (7,), 0), set()),
    ((100, 512), np.int8, plans.gather_plan((100, 512), (1,), 0), set()),
    ((100, 512), np.int8, plans.gather_plan((100, 512), (2,), 0), {LOOKUP_PAD}),
    ((100, 32), jnp.int4, plans.gather_plan((100, 32), (30,), 0), set()),  # converted to bytes
    ((100, 64), np.float32, plans.gather_plan((100, 64), (S,), 0), {LOOKUP_PAD}),
    ((100, 32), np.bool_, plans.gather_plan((100, 32), (S + 1,), 0), set()),  # no bitcast
    ((100, 32), np.complex64, plans.gather_plan((100, 32), (S + 1,), 0), set()),
    ((4, 5, 32), np.float32, plans.gather_nd_plan((4, 5, 32), (R // 2, 2), 0), {ROWS, AND}),
    ((4, 5, 32), np.float32, plans.gather_nd_plan((4, 5, 32), (4, R // 8, 1), 1), {ROWS}),
    # Gather along the last axis, from COLUMN_ROWS rows, reads written-out indices and its fill
    # from a pad, where the CPU's fact holds (its derivative is JAX's: data within L1_DATA_BYTES,
    # and rows under COLLIDING_STRIDE bytes apart; see below).
    ((100, 32), np.float16, plans.gather_plan((100, 32), (S + 1,), 1), set(COLUMN_PAIR)),
    ((100, 32), np.float32, plans.gather_plan((100, 32), (S + 1,), 1), set()),  # 4 bytes: no gain
    ((2, 32, 32), np.int8, plans.gather_plan((2, 32, 32), (3, S), 2), set(BIG_COLUMNS)),
    # Below COLUMNS_MIN_BYTES of output (16 KiB) the indices are not written out; the pad stays
    # where it keeps the program under INLINE_FLOPS (up to 142 ids).
    ((2, 4, 32), np.int8, plans.gather_plan((2, 4, 32), (3, S), 2), set()),
    ((8, 32), np.int8, plans.gather_plan((8, 32), (S + 1,), 1), set(COLUMN_PAIR) - {COLUMNS}),
    ((64, 32), np.int8, plans.gather_plan((64, 32), (S,), 1), {LOOKUP_PAD}),
    ((128, 32), np.int8, plans.gather_plan((128, 32), (S + 1,), 1), set(COLUMN_PAIR)),
    ((127, 32), np.int8, plans.gather_plan((127, 32), (S + 1,), 1), set(COLUMN_PAIR) - {COLUMNS}),
    ((ROWS_PER_INDEX - 1, 32), np.int8, plans.gather_plan((ROWS_PER_INDEX - 1, 32), (S + 1,), 1), set()),
    ((100, 32), np.int8, plans.gather_plan((100, 32), (S,), 1), {LOOKUP_PAD}),  # a short lookup
    # Up to COLUMNS_MAX_INDICES ids: past, the written indices come from memory for every row.
    ((64, 32), np.int8, plans.gather_plan((64, 32), (2**18,), 1), set(BIG_COLUMNS)),
    ((16, 32), np.int8, plans.gather_plan((16, 32), (2**18 + 1,), 1), set()),
    # Under COLUMNS_FEW_ROWS rows, the indices are written out up to COLUMNS_FEW_ROWS_MAX_INDICES.
    ((63, 32), np.int8, plans.gather_plan((63, 32), (16384,), 1), set(BIG_COLUMNS)),
    ((63, 32), np.int8, plans.gather_plan((63, 32), (16385,), 1), set()),
    ((16, 32), jnp.int4, plans.gather_plan((16, 32), (8192,), 1), set()),  # converted to bytes
    # Not from data's rows past COLUMNS_MAX_ROW_BYTES (16 KiB).
    ((16, 16385), np.int8, plans.gather_plan((16, 16385), (8192,), 1), set()),
    ((85, 8193), np.float16, plans.gather_plan((85, 8193), (22720,), 1), set()),
    ((100, 32), ml_dtypes.bfloat16, plans.gather_plan((100, 32), (S + 1,), 1),
     {COLUMNS, COLUMN_DIRECT} if WIDENS else set()),  # bfloat16 selects, after the generic gather
    ((100, 32, 2), np.int8, plans.gather_plan((100, 32, 2), (S + 1,), 1), set()),  # rows of 2: neither
    ((4, 100, 32), np.int8, plans.gather_plan((4, 100, 32), (4, S + 1), 2, batch_dims=1), set()),  # batched
    ((3, 100, 8), np.float16, plans.gather_plan((3, 100, 8), (7,), 2), {LOOKUP_PAD}),
    # The derivative off the leading axis: rows of the moved axis from L * MOVED_MIN_COVER ids (an
    # eighth of the axis for bfloat16), over MOVED_MIN_POSITIONS positions or more and a trailing
    # block of one element; with fewer ids, float32 and wider from LEADING_MIN_POSITIONS positions
    # and a trailing block under a cache line, rows of the leading block; else JAX's.
    ((8, 4096), np.float32, plans.gather_plan((8, 4096), (2048,), 1), {MOVED}),
    ((8, 4096), np.float32, plans.gather_plan((8, 4096), (2047,), 1), set()),  # 8 positions
    ((7, 4096), np.float32, plans.gather_plan((7, 4096), (4096,), 1), set()),
    ((16, 4096), np.float32, plans.gather_plan((16, 4096), (2047,), 1), {LEADING}),
    ((15, 4096), np.float32, plans.gather_plan((15, 4096), (2047,), 1), set()),
    # (INLINE_FLOPS, 1000: JAX's scatter of 16 by 63 counts 1008 flops, of 16 by 62, 992)
    ((16, 4096), np.float64, plans.gather_plan((16, 4096), (63,), 1), {LEADING, LOOKUP_PAD}),
    ((16, 4096), np.float64, plans.gather_plan((16, 4096), (62,), 1), {LOOKUP_PAD}),  # stays inline
    ((32, 4096), np.float16, plans.gather_plan((32, 4096), (2048,), 1), {MOVED, *BIG_COLUMNS}),
    ((31, 4096), np.float16, plans.gather_plan((31, 4096), (4096,), 1), BIG_COLUMNS),  # 2 bytes: 32
    ((16, 4096), np.float16, plans.gather_plan((16, 4096), (2047,), 1), BIG_COLUMNS),  # 2 bytes: not leading
    ((32, 4096, 1), ml_dtypes.bfloat16, plans.gather_plan((32, 4096, 1), (512,), 1), {MOVED}),
    ((32, 4096, 1), ml_dtypes.bfloat16, plans.gather_plan((32, 4096, 1), (511,), 1), set()),
    ((2, 8, 4096), np.float32, plans.gather_plan((2, 8, 4096), (4, 512), 2), {MOVED}),  # 16 positions
    ((16, 40, 15), np.float32, plans.gather_plan((16, 40, 15), (S + 1,), 1), {LEADING}),  # 60 bytes
    ((16, 40, 16), np.float32, plans.gather_plan((16, 40, 16), (S + 1,), 1), set()),  # a cache line
    ((16, 40, 2), np.float32, plans.gather_plan((16, 40, 2), (S + 1,), 1), {LEADING}),  # not moved: a block
    ((16, 40), np.complex64, plans.gather_plan((16, 40), (3,), 1), set()),  # real floats only
    (HUGE, np.float32, plans.gather_plan(HUGE, (3,), 1), SPLIT_PAD),  # an int32 row index would wrap
    # Element gathers differentiate by one linear index; GatherND's after batch dims read their
    # fill from a pad.
    # From INLINE_FLOPS elements (1000), where JAX's scatter alone counts that many flops.
    ((1024, 1024), np.float32, plans.gather_nd_plan((1024, 1024), (1000, 2)), {LINEAR}),
    ((1024, 1024), np.float32, plans.gather_nd_plan((1024, 1024), (999, 2)), set()),
    ((4, 5, 6), np.int32, plans.gather_nd_plan((4, 5, 6), (4, 250, 2), 1), {LINEAR, ND_PAD}),
    ((4, 5, 6), np.int32, plans.gather_nd_plan((4, 5, 6), (4, 9, 2), 1), {ND_PAD}),
    ((4, 5, 6, 7), np.float32, plans.gather_nd_plan((4, 5, 6, 7), (1000, 4)), {LINEAR, *SPLIT}),
    ((4, 5, 6, 7), np.float32, plans.gather_nd_plan((4, 5, 6, 7), (4, 5, 50, 2), 2), {LINEAR, ND_PAD}),
    ((4, 5), np.float32, plans.gather_nd_plan((4, 5), (4, 250, 1), 1), {LINEAR, ND_PAD}),
    ((4, 5, 6), ml_dtypes.bfloat16, plans.gather_nd_plan((4, 5, 6), (4, 250, 2), 1), {LINEAR}),  # selected
    # From T index tuples, GatherND after batch dims selects the fill, and reads by one linear
    # index where XLA computes it in vector instructions.
    ((4, 5, 6), np.int32, plans.gather_nd_plan((4, 5, 6), (4, T // 4, 2), 1), {LINEAR, *BY_LINEAR}),
    ((4, 5, 6), np.int32, plans.gather_nd_plan((4, 5, 6), (4, T // 4 - 1, 2), 1), {LINEAR, ND_PAD}),
    ((4, 5, 6), ml_dtypes.bfloat16, plans.gather_nd_plan((4, 5, 6), (4, T // 4, 2), 1), {LINEAR, *BY_LINEAR}),
    ((4, 5, 6), jnp.int4, plans.gather_nd_plan((4, 5, 6), (4, T // 4, 2), 1), {LINEAR}),  # XLA widens all
    ((4, 5, 6, 7), np.float32, plans.gather_nd_plan((4, 5, 6, 7), (4, 5, T // 20 + 1, 2), 2),
     {LINEAR, *BY_LINEAR}),
    ((4, 5, 6), np.float32, plans.gather_nd_plan((4, 5, 6), (T, 3), 0), {LINEAR, *SPLIT}),  # no batch dims
    ((8, 32), np.float32, plans.gather_elements_plan((8, 32), (32, 32), 0), {LINEAR}),
    ((8, 32), np.float32, plans.gather_elements_plan((8, 32), (8, 32), 0), set()),
    ((8, 32), np.bool_, plans.gather_elements_plan((8, 32), (8, 125), 1), {LINEAR}),
    # From 512 KiB of int32 index in and out, where XLA splits the loop of the linear index into
    # tasks: only where each starts at a row (or the rows' length is a power of two).
    ((1309, 50), np.float32, plans.gather_elements_plan((1309, 50), (1309, 50), 1), {LINEAR}),  # one task
    ((5263, 57), np.float32, plans.gather_elements_plan((5263, 57), (5263, 57), 1), ODD_ROWS),
    ((5264, 57), np.float32, plans.gather_elements_plan((5264, 57), (5264, 57), 1), {LINEAR}),
    ((4687, 64), np.float32, plans.gather_elements_plan((4687, 64), (4687, 64), 1), {LINEAR}),
    ((3, 1563, 64), np.float32, plans.gather_elements_plan((3, 1563, 64), (3, 1563, 64), 2),
     ODD_ROWS_OF_RANK_3),
    ((6, 877, 57), np.float32, plans.gather_elements_plan((6, 877, 57), (6, 877, 57), 2), {LINEAR}),
    ((40,), np.float32, plans.gather_plan((40,), (9,), 0), set()),  # one dim already
    ((40,), np.float32, plans.gather_nd_plan((40,), (9, 1)), set()),
    (HUGE, np.int8, plans.gather_nd_plan(HUGE, (1000, 2)), set()),  # int32 would wrap, no x64
    # Row lookups of at most SHORT_LOOKUP_INDICES index components read their fill from a pad.
    ((100, 512), np.int8, plans.gather_plan((100, 512), (2, S // 2), 0), {LOOKUP_PAD}),
    ((100, 512), np.int8, plans.gather_plan((100, 512), (S + 1,), 0), set()),
    ((4, 5, 6), np.float32, plans.gather_nd_plan((4, 5, 6), (S // 2, 2), 0), {LOOKUP_PAD, AND}),
    ((4, 5, 6), np.float32, plans.gather_nd_plan((4, 5, 6), (S // 2 + 1, 2), 0), {AND}),
    ((100, 8), ml_dtypes.bfloat16, plans.gather_plan((100, 8), (7,), 0), set()),
    # (How much a short lookup may read from a pad: test_a_short_lookup_reads_a_pad_up_to_...)
    ((4096, 4096), np.float32, plans.gather_plan((4096, 4096), (S,), 1), {LEADING}),
    # GatherND of one element per index tuple, without batch dims, whose one loop of the fill
    # XLA:CPU would split (by its cost analysis), below N2 pairs: its fill in two loops.
    ((64, 64, 1), ml_dtypes.bfloat16, plans.gather_nd_plan((64, 64, 1), (4096, 2)), SPLIT),
    ((64, 64, 1), ml_dtypes.bfloat16, plans.gather_nd_plan((64, 64, 1), (N2 - 1, 2)), SPLIT),
    ((64, 64, 1), ml_dtypes.bfloat16, plans.gather_nd_plan((64, 64, 1), (N2, 2)), set()),  # jnp's too
    ((64, 64, 1), ml_dtypes.bfloat16, plans.gather_nd_plan((64, 64, 1), (512, 2)), set()),  # inline
    ((64, 64, 1), np.float32, plans.gather_nd_plan((64, 64, 1), (4096, 2)), set()),  # data's bytes: not split
    ((64, 64), np.float16, plans.gather_nd_plan((64, 64), (4096, 2)), {LINEAR, *SPLIT}),
    ((64, 64), np.float16, plans.gather_nd_plan((64, 64), (2048, 2)), {LINEAR}),
    # Converted to bytes on the way: where jnp's loop that gathers and selects splits too, one loop.
    ((64, 64, 1), jnp.int4, plans.gather_nd_plan((64, 64, 1), (4096, 2)), set()),
    ((64, 64, 1), jnp.int4, plans.gather_nd_plan((64, 64, 1), (2048, 2)), set()),
    ((5, 5, 1), jnp.int4, plans.gather_nd_plan((5, 5, 1), (2048, 2)), SPLIT),  # jnp's stays whole
    ((5, 5, 1), ml_dtypes.float4_e2m1fn, plans.gather_nd_plan((5, 5, 1), (2048, 2)), SPLIT),
    ((5, 5, 1), jnp.int4, plans.gather_nd_plan((5, 5, 1), (1024, 2)), set()),  # not split
    ((64, 64, 4), ml_dtypes.bfloat16, plans.gather_nd_plan((64, 64, 4), (512, 2)), {AND}),  # rows
    # Where the and-ed loop would split (_cpu_split.and_loop_splits) the mask is jnp's.
    ((64, 64, 4), ml_dtypes.bfloat16, plans.gather_nd_plan((64, 64, 4), (4096, 2)), PINNED_SPLIT),
    ((64, 64, 2), ml_dtypes.bfloat16, plans.gather_nd_plan((64, 64, 2), (2048, 2)), PINNED_AT_THE_BOUND),
    ((64, 64, 2), np.int8, plans.gather_nd_plan((64, 64, 2), (2048, 2)), SPLIT_AND),
    ((64, 64, 2), np.int8, plans.gather_nd_plan((64, 64, 2), (65536, 2)), {AND}),  # jnp's split too
    # Where the reduced flag's gather loop would split too, the fill from written indices, whose
    # gather's loop counts no index arithmetic (jnp's count).
    ((64, 64, 2), np.int8, plans.gather_nd_plan((64, 64, 2), (16384, 2)), SPLIT_WRITTEN or {AND}),
    ((64, 64, 2), np.int8, plans.gather_nd_plan((64, 64, 2), (8192, 2)), SPLIT_AND),
    ((64, 64, 3), jnp.int4, plans.gather_nd_plan((64, 64, 3), (1024, 2)), SPLIT_WRITTEN),  # converted
    ((64, 64, 3), jnp.int4, plans.gather_nd_plan((64, 64, 3), (512, 2)), {AND}),  # not split
    ((64, 64, 3), ml_dtypes.float8_e5m2, plans.gather_nd_plan((64, 64, 3), (512, 2)), SPLIT_WRITTEN),
    ((64, 64, 3), ml_dtypes.float8_e5m2, plans.gather_nd_plan((64, 64, 3), (N2, 2)), {AND}),  # jnp's too
    ((64, 64, 32), np.float32, plans.gather_nd_plan((64, 64, 32), (4096, 2)), {ROWS, AND}),  # bytes
    # A fill's in-bounds flag of a tuple of components that reads a slice: their and.
    ((4, 64, 64, 8), np.float32, plans.gather_nd_plan((4, 64, 64, 8), (4, 45, 2), 1), {AND}),
    ((64, 8), np.float32, plans.gather_nd_plan((64, 8), (300, 1)), set()),  # one component
    ((8, 64, 64), ml_dtypes.bfloat16, plans.gather_nd_plan((8, 64, 64), (8, 512, 2), 1),
     {LINEAR, *BY_LINEAR}),
    ((8, 64, 64), ml_dtypes.bfloat16, plans.gather_nd_plan((8, 64, 64), (8, 16384, 2), 1),
     {LINEAR, *BY_LINEAR, *ELEMENTS}),
    # bfloat16 elements: the pinned fill from 512 KiB of the loop's data, output and indices (4
    # bytes an element: 2**16 of (n, 1)), on one device, where each reads an element of its own
    # after batch dims (GatherElements of (n, 1)) or not all read one slice (those pin each one).
    ((E, 1), ml_dtypes.bfloat16, plans.gather_elements_plan((E, 1), (E, 1), 1), {LINEAR, *ELEMENTS}),
    ((E - 1, 1), ml_dtypes.bfloat16, plans.gather_elements_plan((E - 1, 1), (E - 1, 1), 1), {LINEAR}),
    ((1000, 1), ml_dtypes.bfloat16, plans.gather_elements_plan((1000, 1), (1000, 1), 1), {LINEAR}),
    ((1, 4), ml_dtypes.bfloat16, plans.gather_plan((1, 4), (E,), 0), {ONE_SLICE}),  # one slice
    ((256, 256), ml_dtypes.bfloat16, plans.gather_elements_plan((256, 256), (256, 256), 1),
     {LINEAR, *ELEMENTS}),
    ((256, 256), np.float16, plans.gather_elements_plan((256, 256), (256, 256), 1), {LINEAR}),  # not bfloat
    # As many flops as bytes in the generic loop (57344), which the pin's 5 would split.
    ((4096, 4), ml_dtypes.bfloat16, plans.gather_elements_plan((4096, 4), (1024, 4), 0), {LINEAR}),
    # A fill where every index reads one slice: read from a table of it and the fill, for a row
    # ending the output of 2-8 elements and up to 16 bytes, or one element from up to 16384 tuples.
    ((1, 2), np.int8, plans.gather_plan((1, 2), (300,), 0), {ONE_SLICE}),
    ((1, 8), ml_dtypes.bfloat16, plans.gather_plan((1, 8), (300,), 0), {ONE_SLICE}),
    ((1, 9), np.int8, plans.gather_plan((1, 9), (300,), 0), set()),  # 9 elements
    ((1, 4), np.float32, plans.gather_plan((1, 4), (300,), 0), {ONE_SLICE}),
    ((1, 8), np.float32, plans.gather_plan((1, 8), (300,), 0), set()),  # 32 bytes
    ((1, 2), np.complex128, plans.gather_plan((1, 2), (300,), 0), set()),  # 32 bytes
    ((1, 4), jnp.int4, plans.gather_plan((1, 4), (300,), 0), set()),  # sub-byte
    # A slice across the output (a column): the select, of pinned bits where the type's are.
    ((6, 1), ml_dtypes.bfloat16, plans.gather_plan((6, 1), (300,), 1), {PINNED_COLUMN}),
    ((1024, 1), ml_dtypes.bfloat16, plans.gather_plan((1024, 1), (16,), 1), {PINNED_COLUMN}),
    ((4, 1, 8), ml_dtypes.bfloat16, plans.gather_plan((4, 1, 8), (2, 5), 1), {PINNED_COLUMN}),
    ((6, 1), np.int8, plans.gather_plan((6, 1), (300,), 1), set()),  # kept bit for bit
    ((6, 1), np.float16, plans.gather_plan((6, 1), (300,), 1), set()),
    ((6, 2), ml_dtypes.bfloat16, plans.gather_plan((6, 2), (300,), 1), set()),  # two entries
    ((3, 1, 4), ml_dtypes.bfloat16, plans.gather_plan((3, 1, 4), (3, 300), 1, batch_dims=1), {ONE_SLICE}),
    ((1, 4), np.float32, plans.gather_nd_plan((1, 4), (300, 1)), {ONE_SLICE}),
    ((1, 1), np.float32, plans.gather_nd_plan((1, 1), (16384, 2)), {ONE_SLICE, LINEAR}),
    ((1, 1), np.float32, plans.gather_nd_plan((1, 1), (16385, 2)), {LINEAR, *SPLIT}),
    ((1, 1), np.float32, plans.gather_plan((1, 1), (4096,), 0), set()),  # single indices
    # Rows of any length whose select is pinned (bfloat16 where XLA:CPU moves it through float32),
    # below 2**18 output elements.
    ((1, 64), ml_dtypes.bfloat16, plans.gather_plan((1, 64), (4095,), 0), {ONE_SLICE}),
    ((1, 64), ml_dtypes.bfloat16, plans.gather_plan((1, 64), (4096,), 0), set()),
    ((1, 64), np.float16, plans.gather_plan((1, 64), (4095,), 0), set()),  # kept bit for bit
    ((1, 3), np.float32, plans.gather_elements_plan((1, 3), (50, 3), 0), set()),
    # Pairs into one slice past the table's rows: XLA's broadcast, never written indices.
    ((1, 1, 108), np.uint8, plans.gather_nd_plan((1, 1, 108), (1901, 2)), set()),
    ((1, 1, 9), np.int8, plans.gather_nd_plan((1, 1, 9), (4096, 2)), set()),
    # ... and the and-ed flag where that loop would split and jnp's broadcast stays whole.
    ((1, 1, 3), jnp.int4, plans.gather_nd_plan((1, 1, 3), (1818, 2)), set() if SPLIT else {AND}),
    ((1, 1, 3), jnp.int4, plans.gather_nd_plan((1, 1, 3), (1000, 2)), {AND}),
]
# fmt: on


@pytest.mark.parametrize("shape, dtype, plan, expected", SELECTIONS)
def test_which_plans_take_which_lowering(
    shape, dtype, plan, expected, rows_on_any_jax, rows_pinned_on_any_jax, monkeypatch
):
    # The table is a process's on two cores or one: XLA splits a loop into up to the square root
    # of the cores' tasks, and on 16 those of 6 x 877 x 57 start inside rows (the test of the
    # split below counts them); this process's cores past two count as two. bfloat16's bits are
    # pinned as where XLA:CPU moves them through float32 (rows_pinned_on_any_jax; where it keeps
    # them nothing pins them: test_no_lowering_pins_bfloat16_where_xla_cpu_keeps_its_bits).
    monkeypatch.setattr(_cpu_linear, "usable_cores", lambda: min(usable_cores(), 2))
    _cpu._choose.cache_clear()
    try:
        assert _cpu.lowering(plan, shape, dtype).names == (expected if ON else set())
    finally:
        _cpu._choose.cache_clear()


@needs_cpu_lowerings
@pytest.mark.parametrize("scalar_pad", [False, True])
def test_a_column_fill_past_inline_flops_reads_a_pad_only_where_its_loop_is_not_scalar(
    scalar_pad, lowerings_on_any_cpu, monkeypatch
):
    monkeypatch.setattr(_cpu, "xla_scalarises_the_column_pad", lambda: scalar_pad)
    _cpu._choose.cache_clear()
    plan = lambda rows, ids: plans.gather_plan((rows, 4096), (ids,), 1)
    names = lambda rows, ids: {
        n for n in _cpu.lowering(plan(rows, ids), (rows, 4096), np.int8).names if "column" in n
    }
    rows = _cpu.COLUMN_SELECT_ROWS
    assert names(rows, 2048) == ({COLUMNS} if scalar_pad else {COLUMNS, COLUMN_PAD})  # the benchmark's
    assert names(rows - 1, 2048) == {COLUMNS, COLUMN_DIRECT if scalar_pad else COLUMN_PAD}
    assert COLUMN_PAD in names(64, S + 1)  # under INLINE_FLOPS with the pad, over without it


# (data shape, dtype, plan, read from a pad where XLA splits loops, and on one core)
# fmt: off
LOOKUP_LIMITS = [
    # Columns of a 4096x4096 table, each element on a line of its own: 32 ids read 8 MiB of lines
    # in 131072 runs (one per element), 64 ids 16 MiB, and int8 all of its 16 MiB.
    ((4096, 4096), np.float32, plans.gather_plan((4096, 4096), (S // 4,), 1), True, False),
    ((4096, 4096), np.float32, plans.gather_plan((4096, 4096), (S // 2,), 1), False, False),
    ((4096, 4096), np.int8, plans.gather_plan((4096, 4096), (S,), 1), False, False),
    ((512, 1024), np.int8, plans.gather_plan((512, 1024), (S,), 1), True, True),  # 64Ki runs, 512 KiB
    ((1024, 1024), np.int8, plans.gather_plan((1024, 1024), (S,), 1), True, False),  # 128Ki runs, 1 MiB
    ((8192, 4096), np.float32, plans.gather_plan((8192, 4096), (S,), 0), True, True),  # 128 rows: 2 MiB
    ((8192, 8192), np.float32, plans.gather_plan((8192, 8192), (S,), 0), True, False),  # 128 rows: 4 MiB
    ((512, 65536), np.float32, plans.gather_plan((512, 65536), (S // 4,), 0), True, False),  # 8 MiB
    ((256, 65536), np.float32, plans.gather_plan((256, 65536), (S // 2,), 0), False, False),  # 16 MiB
    # One slice: not where XLA would split the pad's loop (its bytes all of data's, from 512 KiB)
    # and keep jnp's whole (a dynamic slice: the slice's bytes and the output's).
    ((436, 1199), np.bool_, plans.gather_nd_plan((436, 1199), (1, 1)), True, True),
    ((437, 1199), np.bool_, plans.gather_nd_plan((437, 1199), (1, 1)), False, True),
    ((437, 1199), np.bool_, plans.gather_nd_plan((437, 1199), (2, 1)), True, True),  # jnp's: all data
    ((16, 65535), np.float32, plans.gather_plan((16, 65535), (1,), 0), False, True),
    ((16, 65536), np.float32, plans.gather_plan((16, 65536), (1,), 0), True, True),  # jnp's splits too
]
# fmt: on


@pytest.mark.parametrize("splits", [True, False], ids=["tasks", "one core"])
@pytest.mark.parametrize("shape, dtype, plan, where_split, on_one_core", LOOKUP_LIMITS)
def test_a_short_lookup_reads_a_pad_up_to_what_its_one_core_reads_faster(
    monkeypatch, splits, shape, dtype, plan, where_split, on_one_core
):
    monkeypatch.setattr(_cpu, "xla_splits_loops", lambda: splits)
    _cpu._choose.cache_clear()
    try:
        padded = LOOKUP_PAD in _cpu.lowering(plan, shape, dtype).names
    finally:
        _cpu._choose.cache_clear()
    assert padded == (ON and (where_split if splits else on_one_core))


@pytest.mark.parametrize(
    "cores, rows, scalar, chosen",
    [(1, 5263, True, True), (2, 5263, True, False), (2, 5264, True, True), (16, 5264, True, False)]
    + [(16, 5268, True, True), (16, 1149, True, True), (2, 5263, False, True), (16, 5264, False, True)],
)
def test_the_linear_derivative_needs_each_task_xla_may_split_its_index_into_to_start_at_a_row(
    monkeypatch, cores, rows, scalar, chosen
):
    # On 16 cores XLA splits the index of 5264 x 57 elements into 4 tasks (the square root of the
    # cores): 5264 rows do not divide by 3, 5268 by 2, 3 and 4; 1149 rows stay one task. Where
    # XLA computes a split row in vector instructions all the same (scalar False), any count.
    monkeypatch.setattr(_cpu_linear, "usable_cores", lambda: cores)
    monkeypatch.setattr(_cpu_linear, "xla_scalarises_split_rows", lambda: scalar)
    # Data of 60 columns: its flat zeros divide by every count of tasks (the test below).
    plan = plans.gather_elements_plan((rows, 60), (rows, 57), 1)
    _cpu._choose.cache_clear()
    try:
        names = _cpu.lowering(plan, (rows, 60), np.float32).names
    finally:
        _cpu._choose.cache_clear()
    assert names == ({LINEAR} if ON and chosen else set())


@pytest.mark.parametrize(
    "shape, dtype, rows, chosen",
    [((54752, 2), ml_dtypes.bfloat16, 7487, False), ((13688, 8), ml_dtypes.bfloat16, 1871, False)]
    + [((4096, 2), ml_dtypes.bfloat16, 32768, True), ((6844, 16), ml_dtypes.bfloat16, 935, True)]
    + [((54752, 2), np.float16, 7487, True), ((54752, 2), np.float32, 7487, True)],
    ids=str,
)
def test_the_linear_derivative_of_short_bfloat16_rows_needs_dense_updates(
    monkeypatch, shape, dtype, rows, chosen
):
    # XLA:CPU scatters bfloat16 in float32 and converts the result back: after the flat scatter,
    # over rows of 2-8, that took 1.13-1.37x JAX's derivative (rows of 16, float16, float32, and
    # 65536 updates into 8192 elements paid).
    monkeypatch.setattr(_cpu_linear, "usable_cores", lambda: 2)
    monkeypatch.setattr(_cpu_linear, "xla_scalarises_split_rows", lambda: False)
    plan = plans.gather_elements_plan(shape, (rows, shape[1]), 0)
    _cpu._choose.cache_clear()
    try:
        names = _cpu.lowering(plan, shape, dtype).names
    finally:
        _cpu._choose.cache_clear()
    assert names == ({LINEAR} if ON and chosen else set())


@pytest.mark.parametrize(
    "shape, dtype, leading",
    [((266, 1000), np.float32, False), ((266, 1024), np.float32, True), ((266, 768), np.float32, True)]
    + [((266, 2304), np.float32, True), ((266, 2368), np.float32, False), ((266, 500), np.float64, False)]
    + [((266, 128), np.float64, True), ((266, 1000, 4), np.float32, True), ((8, 1024), np.float32, False)]
    + [((16, 256), np.float32, False), ((64, 256), np.float32, True), ((16, 40, 4), np.float32, True)],
    ids=str,
)
def test_rows_of_the_leading_block_differentiate_single_elements_only_where_jaxs_scatter_collides(
    shape, dtype, leading
):
    # JAX's strided scatter of one element a leading row collides in the cache where the rows are
    # a multiple of COLLIDING_STRIDE bytes apart (1024 and 768 float32: 0.1-0.6 of its
    # time by the leading block; 1000 and 2368: 1.03-1.46), in data past L1_DATA_BYTES (16 x 256,
    # 16 KiB: 0.9-3.0; 64 x 256: 0.56). Trailing blocks paid either way; 8 positions never
    # (LEADING_MIN_POSITIONS).
    plan = plans.gather_plan(shape, (shape[1] * 2 // 5,), 1)
    chosen = _cpu_off_axis.derivative(plan, shape, np.dtype(dtype), True, False)
    assert chosen == (_cpu_off_axis.LEADING if leading else None)


@pytest.mark.parametrize(
    "shape, ids, dtype, moved",
    [((54, 2000), 1760, np.float32, False), ((54, 2304), 2027, np.float32, True)]
    + [((54, 2794), 2458, np.float32, False), ((266, 2048), 1802, np.float32, True)]
    + [((8, 1024), 512, np.float32, False), ((9, 1024), 512, np.float32, True)]
    + [((100, 32), 129, np.float32, False), ((1000, 32), 64, np.float32, False)]
    + [((54, 1024), 901, np.float16, False), ((54, 2048), 1802, np.float16, True)]
    + [((54, 1024), 128, ml_dtypes.bfloat16, True), ((54, 2304), 288, ml_dtypes.bfloat16, False)],
    ids=str,
)
def test_rows_of_the_moved_axis_differentiate_only_where_jaxs_scatter_collides(shape, ids, dtype, moved):
    # Rows of the moved axis paid where JAX's strided scatter collides in the cache: rows a
    # multiple of COLLIDING_STRIDE bytes apart (2304 and 2048 float32: 0.08-1.03 of its time;
    # 2000 and 2794: 1.6-1.8), of FLOAT16_COLLIDING_STRIDE for float16 (2048: 0.56; 1024: 1.18),
    # in data past L1_DATA_BYTES (8 x 1024 float32, 32 KiB: 0.99; 100 x 32 by 129 ids: 1.46).
    plan = plans.gather_plan(shape, (ids,), 1)
    chosen = _cpu_off_axis.derivative(plan, shape, np.dtype(dtype), True, False)
    assert (chosen == _cpu_off_axis.MOVED) is moved


@pytest.mark.parametrize(
    "cores, shape, width, chosen",
    [(1, (1001, 999), 40, True), (2, (1001, 999), 40, False), (2, (1000, 999), 40, True)]
    + [(2, (363, 361), 40, False), (2, (31, 33), 40, True), (2, (2047, 1023), 256, True)]
    + [(2, (65535, 1), 1, True), (16, (1000, 1001), 40, False), (16, (1002, 1000), 40, True)],
)
def test_the_linear_derivative_needs_each_task_xla_may_split_datas_flat_zeros_into_to_divide_them(
    monkeypatch, cores, shape, width, chosen
):
    # On two cores XLA splits the flat zeros of 999999 float32 elements in two, where an odd count
    # is filled one element at a time; 363 x 361 (131043) too; 31 x 33 stays one task. There the
    # linear index pays only from one update in SCALAR_FILL_ELEMENTS_PER_UPDATE elements of data
    # (2047 x 1023 by 256 a row, 65535 x 1 by one). On 16 cores into up to 4 tasks: 1001000
    # does not divide by 3, 1002000 divides by 2, 3 and 4.
    monkeypatch.setattr(_cpu_linear, "usable_cores", lambda: cores)
    monkeypatch.setattr(_cpu_linear, "xla_scalarises_split_rows", lambda: False)
    plan = plans.gather_elements_plan(shape, (shape[0], width), 1)
    _cpu._choose.cache_clear()
    try:
        names = _cpu.lowering(plan, shape, np.float32).names
    finally:
        _cpu._choose.cache_clear()
    assert names == ({LINEAR} if ON and chosen else set())


@pytest.mark.parametrize(
    "shape, chosen", [((3, 1755, 57), False), ((6, 877, 57), True), ((3, 2, 1755, 57), False)]
)
def test_the_linear_derivative_over_three_dims_or_more_needs_its_tasks_to_start_at_rows(
    monkeypatch, shape, chosen
):
    # Whatever this JAX does with a split row of rank two (scalar False: vectorised), a split row
    # over more dims keeps JAX's derivative (JAX 0.12 vectorises 3 x 1754 x 57 and not 3 x 1755 x 57).
    monkeypatch.setattr(_cpu_linear, "usable_cores", lambda: 2)
    monkeypatch.setattr(_cpu_linear, "xla_scalarises_split_rows", lambda: False)
    plan = plans.gather_elements_plan(shape, shape, -1)
    _cpu._choose.cache_clear()
    try:
        names = _cpu.lowering(plan, shape, np.float32).names
    finally:
        _cpu._choose.cache_clear()
    assert names == ({LINEAR} if ON and chosen else set())


def test_int64_linear_offsets_need_x64():
    with enable_x64(True):
        assert _cpu.lowering(plans.gather_nd_plan(HUGE, (1000, 2)), HUGE, np.int8).names == (
            {LINEAR} if ON else set()
        )


def test_symbolic_dims_take_the_generic_lowering():
    (n,) = export.symbolic_shape("n")
    for shape, plan in [
        ((10, 32), plans.gather_plan((10, 32), (n,), 0)),
        ((n, 32), plans.gather_plan((n, 32), (4,), 0)),
        ((n, 4), plans.gather_nd_plan((n, 4), (9, 2))),
        ((3, 4), plans.gather_nd_plan((3, 4), (n, 2))),
        ((n, 4), plans.gather_elements_plan((n, 4), (n, 4), 1)),
    ]:
        assert _cpu.lowering(plan, shape, np.float32) is _lowering.GENERIC


def test_without_names_only_known_lowerings():
    with pytest.raises(ValueError, match=r"without: unknown lowerings \['linear_gather'\]"):
        with _cpu.without("linear_gather"):
            pass


def _gathers(module: str) -> list[tuple[str, str]]:
    """(operand type, indices type) of every gather in a StableHLO module."""
    return re.findall(r'"stablehlo.gather"\(.*?\(tensor<([^>]*)>, tensor<([^>]*)>\)', module)


def _scatters(module: str) -> list[tuple[str, str]]:
    """(operand type, indices type) of every scatter in a StableHLO module."""
    # The types follow the scatter's update region: the first "}) : (" after the op.
    return re.findall(r'"stablehlo.scatter"\(.*?\}\) : \(tensor<([^>]*)>, tensor<([^>]*)>', module, re.DOTALL)


def _grad(fn):
    return jax.grad(lambda d, i: fn(d, i).astype(jnp.float32).sum())


def _reductions(module: str) -> list[int]:
    return [module.count("stablehlo.reduce(")]


# (what, program, data, indices, the CPU program's gather or scatter, the generic one's)
# fmt: off
PROGRAMS = [
    ("short rows", lambda d, i: jax_gather.gather(d, i), np.zeros((50, 32), np.float32),
     np.zeros(R // 2, np.int32), _gathers, ("50x128xui8", f"{R // 2}x1xi32"),
     ("50x32xf32", f"{R // 2}x1xi32")),
    ("short int8 rows", lambda d, i: jax_gather.gather(d, i), np.zeros((50, 32), np.int8),
     np.zeros(2 * R, np.int32), _gathers, ("50x64xui4", f"{2 * R}x1xi32"),
     ("50x32xi8", f"{2 * R}x1xi32")),
    ("linear derivative, GatherND", _grad(lambda d, i: jax_gather.gather_nd(d, i, 1, mode="clip")),
     np.zeros((6, 7, 5), np.float32), np.zeros((6, 200, 2), np.int32),
     _scatters, ("210xf32", "6x200x1xi32"), ("6x7x5xf32", "6x200x2xi32")),
    ("linear derivative, GatherElements",
     _grad(lambda d, i: jax_gather.gather_elements(d, i, 1, mode="clip")),
     np.zeros((6, 7), np.float32), np.zeros((6, 200), np.int32),
     _scatters, ("42xf32", "6x200x1xi32"), ("6x7xf32", "6x200x1xi32")),
    ("columns by written indices", lambda d, i: jax_gather.gather(d, i, 1, mode="promise_in_bounds"),
     np.zeros((50, 32), np.int8), np.zeros(400, np.int32), _gathers,  # over INLINE_FLOPS either way
     ("50x32xi8", "400x1xui64") if WIDENS else ("50x32xi8", "400x1xi32"), ("50x32xi8", "400x1xi32")),
    ("batched GatherND by linear index",
     lambda d, i: jax_gather.gather_nd(d, i, 1, mode="promise_in_bounds"), np.zeros((4, 5, 6), np.float32),
     np.zeros((4, T // 4, 2), np.int32), _gathers,
     ("120xf32", f"4x{T // 4}x1xi32") if BY_LINEAR else ("4x5x6xf32", f"4x{T // 4}x2xi32"),
     ("4x5x6xf32", f"4x{T // 4}x2xi32")),
    ("moved axis derivative", _grad(lambda d, i: jax_gather.gather(d, i, 1, mode="clip")),
     np.zeros((9, 1024), np.float32), np.zeros((512,), np.int32),  # rows 4 KiB apart, 36 KiB
     _scatters, ("1024x9xf32", "512x1xi32"), ("9x1024xf32", "512x1xi32")),
    ("tuple mask by and", lambda d, i: jax_gather.gather_nd(d, i, mode="fill"),
     np.zeros((6, 7, 5), np.float32), np.zeros((300, 2), np.int32), _reductions, 0, 1),
    ("leading block derivative", _grad(lambda d, i: jax_gather.gather(d, i, 1, mode="clip")),
     np.zeros((16, 1024), np.float32), np.zeros((64,), np.int32),  # rows 4 KiB apart, 64 KiB
     _scatters, ("16384x1xf32", "16x64x1xi32"), ("16x1024xf32", "64x1xi32")),
]
# fmt: on


@needs_cpu_lowerings
@pytest.mark.parametrize(
    "what, fn, data, indices, find, cpu, generic", PROGRAMS, ids=[p[0] for p in PROGRAMS]
)
def test_only_the_cpu_program_holds_the_lowering(
    what, fn, data, indices, find, cpu, generic, rows_on_any_jax
):
    for platform in ("cpu", "cuda", "tpu"):
        assert find(module_for(fn, (data, indices), platform)) == [cpu if platform == "cpu" else generic], (
            platform
        )


@needs_cpu_lowerings
@pytest.mark.parametrize(
    "fn, data, indices",
    [
        (lambda d, i: jax_gather.gather_nd(d, i, 1, mode="fill"), np.zeros((3, 6, 7), np.float32),
         np.zeros((3, 30, 2), np.int32)),
        (lambda d, i: jax_gather.gather(d, i, 1, mode="fill"), np.zeros((50, 32), np.int8),
         np.zeros(400, np.int32)),
    ],
    ids=["gather_nd batch dims", "gather columns"],
)  # fmt: skip
def test_only_the_cpu_program_reads_the_fill_from_a_pad(fn, data, indices, lowerings_on_any_cpu):
    for platform in ("cpu", "cuda", "tpu"):
        module = module_for(fn, (data, indices), platform)
        assert module.count('"stablehlo.gather"') == 1, module
        pads = platform == "cpu"
        assert ("stablehlo.pad" in module) == pads, platform
        assert ("stablehlo.select" in module) == (not pads), platform


@needs_cpu_lowerings
@pytest.mark.parametrize("name", _cpu.LOWERINGS)
def test_without_a_lowering_the_library_computes_the_same_by_another_program(
    name, lowerings_on_any_cpu, request
):
    fixture = {
        CLAMP: "clamp_on_any_cpu",
        FILL_PIN: "fill_pin_on_any_jax",
        PINNED_ELEMENTS: "element_pin_on_any_cpu",
        PINNED_COLUMN: "bits_pinned_on_any_jax",
    }
    if name in fixture:
        request.getfixturevalue(fixture[name])
    rng = np.random.default_rng(11)
    data, indices, fn = {
        ROWS: ((50, 32), make_wild_indices((R // 2,), 50, np.int32, 1),
               lambda d, i: jax_gather.gather(d, i, mode="clip")),
        LINEAR: ((6, 7), make_wild_indices((6, 200), 7, np.int32, 2),  # INLINE_FLOPS elements
                 _grad(lambda d, i: jax_gather.gather_elements(d, i, 1, mode="clip"))),
        MOVED: ((9, 1024), make_wild_indices((512,), 1024, np.int32, 3),
                _grad(lambda d, i: jax_gather.gather(d, i, 1, mode="clip"))),
        LEADING: ((16, 300, 3), make_wild_indices((30,), 300, np.int32, 13),
                  _grad(lambda d, i: jax_gather.gather(d, i, 1, mode="fill"))),
        ND_PAD: ((3, 6, 7), make_wild_indices((3, 30, 2), (6, 7), np.int32, 4),
                 lambda d, i: jax_gather.gather_nd(d, i, 1, mode="fill")),
        ND_LINEAR: ((4, 6, 7), make_wild_indices((4, T // 4, 2), (6, 7), np.int32, 8),
                    lambda d, i: jax_gather.gather_nd(d, i, 1, mode="fill")),
        LOOKUP_PAD: ((600, 300), make_wild_indices((20,), 600, np.int32, 5),
                     lambda d, i: jax_gather.gather(d, i, mode="fill")),
        COLUMNS: ((48, 300), make_wild_indices((400,), 300, np.int32, 6),  # clip's long form
                  lambda d, i: jax_gather.gather(d, i, 1, mode="clip")),
        COLUMN_PAD: ((48, 300), make_wild_indices((200,), 300, np.int32, 7),  # COLUMNS_MIN_BYTES
                     lambda d, i: jax_gather.gather(d, i, 1, mode="fill")),
        COLUMN_DIRECT: ((48, 300), make_wild_indices((200,), 300, np.int32, 10),  # COLUMNS_MIN_BYTES
                        lambda d, i: jax_gather.gather(d, i, 1, mode="fill")),
        TWO_LOOPS: ((64, 64), make_wild_indices((4096, 2), (64, 64), np.int32, 9),
                    lambda d, i: jax_gather.gather_nd(d, i, mode="fill")),
        WRITTEN: ((64, 64, 3), make_wild_indices((1024, 2), (64, 64), np.int32, 16),
                  lambda d, i: jax_gather.gather_nd(d, i, mode="fill")),
        CLAMP: ((100, 48), make_wild_indices((300,), 100, np.int32, 12),
                lambda d, i: jax_gather.gather(d, i, mode="fill")),
        FILL_PIN: ((100, 8), make_wild_indices((80,), 100, np.int32, 15),
                   lambda d, i: jax_gather.gather(d, i, mode="fill")),
        AND: ((6, 7, 5), make_wild_indices((300, 2), (6, 7), np.int32, 14),
              lambda d, i: jax_gather.gather_nd(d, i, mode="fill")),
        PINNED_ELEMENTS: ((E, 1), make_wild_indices((E, 1), 1, np.int32, 17),  # 512 KiB of its loop
                          lambda d, i: jax_gather.gather_elements(d, i, 1, mode="fill")),
        ONE_SLICE: ((1, 1, 5), make_wild_indices((2188, 2), (1, 1), np.int32, 18),
                    lambda d, i: jax_gather.gather_nd(d, i, mode="fill")),
        PINNED_COLUMN: ((32, 1), make_wild_indices((256,), 1, np.int32, 19),
                        lambda d, i: jax_gather.gather(d, i, 1, mode="fill")),
    }[name]  # fmt: skip
    dtype = np.float16 if name in (COLUMNS, COLUMN_PAD, TWO_LOOPS) else np.float32  # 1-2 bytes
    dtype = (
        ml_dtypes.bfloat16
        if name in (COLUMN_DIRECT, CLAMP, FILL_PIN, PINNED_ELEMENTS, ONE_SLICE, PINNED_COLUMN)
        else dtype
    )  # a narrow float: no pad
    dtype = ml_dtypes.float8_e5m2 if name == WRITTEN else dtype  # converted on the way
    data = rng.standard_normal(data).astype(dtype)
    text = lambda: jax.jit(fn).lower(data, indices).as_text()
    bits = lambda: np.asarray(jax.jit(fn)(data, indices)).view(np.uint8)  # NaN fills compared too
    chosen, out = text(), bits()
    with _cpu.without(name):
        assert text() != chosen
        np.testing.assert_array_equal(bits(), out)
    assert text() == chosen  # as it was


@pytest.mark.parametrize(
    "rows, ids, index_flops, written",
    [
        (64, 256, 3, False),  # a promise: 768 flops without the written indices, 1280 with
        (128, 199, 3, True),  # 995 with: on the calling thread either way
        (64, 334, 3, True),  # 1002 without: on a worker thread either way
        (128, 129, 6, False),  # clip: 774 without, 1032 with
        (64, 512, 0, False),  # indices in range (the eager checked call): none without, 1024 with
        (64, 499, 0, True),  # 998 with
        (1024, 4096, 0, True),  # HANDOFF_MIN_BYTES of output: the hand-over is paid for
        (1024, 4095, 0, False),
    ],
)
def test_written_column_indices_do_not_move_a_program_to_a_worker_thread(rows, ids, index_flops, written):
    plan = plans.gather_plan((rows, 4096), (ids,), 1)
    names = _cpu.lowering(plan, (rows, 4096), np.int8, index_flops).names
    assert (COLUMNS in names) == (written and ON and WIDENS)
    assert (COLUMNS in _cpu.lowering(plan, (rows, 4096), np.int8).names) == (ON and WIDENS)  # a fill's


_B, _ND = (8, 64, 64), lambda n: plans.gather_nd_plan((8, 64, 64), (8, n // 8, 2), 1)
_RUN = (4096, 16)


@pytest.mark.parametrize(
    "name, shape, dtype, plan, index_flops, chosen",
    [
        (ROWS, _RUN, np.int8, plans.gather_plan(_RUN, (16384,), 0), 3, True),  # 256 KiB, a promise
        (ROWS, _RUN, np.int8, plans.gather_plan(_RUN, (16384,), 0), 0, False),  # indices in range
        (ROWS, _RUN, np.int8, plans.gather_plan(_RUN, (2**18,), 0), 0, True),  # HANDOFF_MIN_BYTES
        (ND_LINEAR, _B, np.float32, _ND(T), 3, True),
        (ND_LINEAR, _B, np.float32, _ND(T), 0, False),
        (ND_LINEAR, _B, np.float32, _ND(2**20), 0, True),
    ],
)
def test_a_program_without_index_arithmetic_keeps_its_thread(
    name, shape, dtype, plan, index_flops, chosen, lowerings_on_any_cpu
):
    # The eager checked call's program counts no flops: these lowerings' own would move it to a
    # worker thread, which pays from HANDOFF_MIN_BYTES of output.
    assert (name in _cpu.lowering(plan, shape, dtype, index_flops).names) == (chosen and ON)


# Ids of int32 rows of 35 (140 bytes) from which one slice's rows are read in bytes without a fill.
ONE_SLICE_IDS = -(-_cpu_rows.short_rows_min_bytes(np.int32, broadcast=True) // 140)


@pytest.mark.parametrize(
    "ids, index_flops, chosen",
    [
        (5170, 3, False),  # 707 KiB, a promise: XLA's broadcast of the one row
        (5170, None, True),  # a fill: its select is there either way
        (ONE_SLICE_IDS - 1, 3, False),
        (ONE_SLICE_IDS, 3, True),
        (ONE_SLICE_IDS, 0, True),  # no index arithmetic, past HANDOFF_MIN_BYTES too
    ],
)
def test_short_rows_of_one_slice_without_a_fill_are_read_in_bytes_only_from_more_output(
    ids, index_flops, chosen, lowerings_on_any_cpu, rows_on_any_jax
):
    # XLA makes the gather a broadcast, and the bitcasts back from bytes, fused into it, a shift and
    # an or a byte (int32 rows of 35 by 5170 ids, a promise: 1.4-2.4x jnp's time in bytes).
    one_slice = plans.gather_plan((1, 35), (ids,), 0)
    assert (ROWS in _cpu.lowering(one_slice, (1, 35), np.int32, index_flops).names) == (chosen and ON)
    two_rows = plans.gather_plan((2, 35), (ids,), 0)
    assert (ROWS in _cpu.lowering(two_rows, (2, 35), np.int32, index_flops).names) == ON


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.int8])
def test_rows_of_17_to_23_elements_are_left_to_xlas_loop(dtype, lowerings_on_any_cpu, rows_on_any_jax):
    # In bytes they gained nothing (a promise, 1 MiB of output: GatherND pairs of 2-byte rows of
    # 17-23 took 1.04-1.25x jnp's time, XLA's own loop 0.90-1.00); rows of 16 and 24 paid.
    for width in (15, 16, 17, 20, 23, 24, 64, 65):
        shape = (4096, width)
        plan = plans.gather_plan(shape, ((1 << 20) // width,), 0)
        chosen = ROWS in _cpu.lowering(plan, shape, dtype, 3).names
        assert chosen == (ON and (width == 16 or 24 <= width <= 64)), width


# ---- results, bit for bit ------------------------------------------------------------------------


def _assert_same_bits(out, expected) -> None:
    out, expected = np.asarray(out), np.asarray(expected)
    assert out.dtype == expected.dtype and out.shape == expected.shape
    np.testing.assert_array_equal(bits(out), bits(expected))


ROW_DTYPES = [np.int8, np.uint8, np.float16, ml_dtypes.bfloat16, np.float32, np.float64, np.int16, np.uint16,
              np.int32, np.uint32, np.int64, np.uint64]  # fmt: skip


@functools.cache
def _short_rows_case() -> tuple[np.ndarray, np.ndarray]:
    """Enough (40, 6) tuples into rows of 24 for short rows in bytes, and the flat position of each
    element they read: the reference's loops walk the 520000 elements once, not once a dtype."""
    indices = make_indices((_cpu_rows.SHORT_ROWS_MIN_BYTES // 24 + 1, 2), (40, 6), np.int32, seed=1)
    return indices, reference.gather_nd(np.arange(40 * 6 * 24).reshape(40, 6, 24), indices, 0)


@pytest.mark.parametrize("dtype", ROW_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_short_rows_in_bytes_are_bit_exact(dtype, jit, rows_on_any_jax):
    # Random bytes: NaN payloads, -0.0, infinities and subnormals, which a conversion would change.
    with enable_x64(np.dtype(dtype).itemsize == 8):
        data = random_bits(np.random.default_rng(0), dtype, (40, 6, 24))
        indices, positions = _short_rows_case()
        plan = plans.gather_nd_plan(data.shape, indices.shape, 0)
        assert (ROWS in _cpu.lowering(plan, data.shape, data.dtype).names) == ON
        fn = lambda d, i: jax_gather.gather_nd(d, i)
        _assert_same_bits((jax.jit(fn) if jit else fn)(data, indices), data.reshape(-1)[positions])


BF16 = ml_dtypes.bfloat16


def _fact_answers(monkeypatch, fact, answer):
    """``fact`` answered by ``answer`` wherever the CPU table asks it (jax_gather._cpu, _cpu_fills)."""
    for module in (_cpu, _cpu_fills):
        monkeypatch.setattr(module, fact, answer)


# bfloat16 bit patterns a move through float32 changes (signalling NaNs, subnormals; a NaN's
# payload), and a plain number.
CHANGED_BY_FLOAT32 = np.array([0x7F81, 0xFF81, 0x0001, 0x8001, 0x7FA5, 0x3F80], np.uint16)


@pytest.mark.parametrize(
    "name, shape, index_shape, first",
    [
        (None, (16, 1), (700,), 0),  # one column: no column lowering, XLA's broadcast
        (None, (64, 1), (500,), 0),
        (PINNED_COLUMN, (16, 1), (700,), 0),  # the slice and the fill pinned once
        (PINNED_COLUMN, (64, 1), (500,), 3),
        (PINNED_COLUMN, (32, 1), (256,), 1),
        (TWO_LOOPS, (1, 1), (3000, 2), 0),  # a signalling NaN
        (TWO_LOOPS, (1, 1), (3000, 2), 3),  # a subnormal
        (ONE_SLICE, (1, 1), (3000, 2), 0),
        (ONE_SLICE, (1, 1), (3000, 2), 3),
        (ONE_SLICE, (1, 6), (700,), 0),  # every pattern in each row
    ],
)
def test_a_fill_from_written_slots_keeps_the_bits_of_bfloat16_read_from_one_slice(
    name, shape, index_shape, first, lowerings_on_any_cpu
):
    # Every index reads the one slice (XLA's broadcast), so the select pins its bits: by zeros
    # made of the indices as given. Made of the slots (0 or 1 there), XLA and LLVM fold them and
    # signalling NaNs and subnormals came back quieted and flushed. The table of the slice and
    # the fill (ONE_SLICE) gathers them as integers, PINNED_COLUMN selects them pinned once; the
    # others are tested without them.
    data = np.resize(np.roll(CHANGED_BY_FLOAT32, -first), shape).view(BF16)
    nd = len(index_shape) > 1
    indices = np.random.default_rng(index_shape[0]).integers(-2, 2, index_shape).astype(np.int32)  # half in
    axis = 0 if shape[0] == 1 else 1
    plan = plans.gather_nd_plan(shape, index_shape) if nd else plans.gather_plan(shape, index_shape, axis)
    with _cpu.without(*({ONE_SLICE, PINNED_COLUMN} - {name})):
        names = _cpu.lowering(plan, shape, BF16).names
        chosen = ON and (name != PINNED_COLUMN or not _fill.xla_cpu_keeps_bits(np.dtype(BF16)))
        assert (name in names) == chosen if name else not names & {COLUMNS, COLUMN_DIRECT, ONE_SLICE}
        fill = np.asarray(np.nan, BF16)
        if nd:
            out = jax.jit(lambda d, i: jax_gather.gather_nd(d, i, mode="fill"))(data, indices)
            expected = reference.gather_nd(data, indices, mode="fill", fill=fill)
        else:
            out = jax.jit(lambda d, i: jax_gather.gather(d, i, axis, mode="fill"))(data, indices)
            expected = reference.gather(data, indices, axis, mode="fill", fill=fill)
    _assert_same_bits(out, expected)


CONSTANT_INDEX_CASES = {  # op, data shape, index shape
    "rows of 3": ("gather", (8, 3), (16,)),
    "rows of 4 by 300": ("gather", (4096, 4), (300,)),
    "one slice of 4": ("gather", (1, 4), (300,)),  # the table
    "one slice of 64 by 4096": ("gather", (1, 64), (4096,)),  # a pin per index
    "one element by 300": ("gather", (1, 1), (300,)),
    "a column": ("gather axis 1", (16, 1), (300,)),  # PINNED_COLUMN
    "GatherND pairs": ("gather_nd", (64, 64, 4), (300, 2)),
    "GatherND pairs of one slice": ("gather_nd", (1, 1, 4), (4096, 2)),
}


@pytest.mark.parametrize("made", ["jnp.asarray", "jnp.array"])
@pytest.mark.parametrize("case", list(CONSTANT_INDEX_CASES))
def test_indices_made_constants_inside_a_trace_keep_the_bits_of_bfloat16(case, made):
    # jnp.asarray (or jnp.array) of NumPy indices under jit makes a tracer of a constant: zeros
    # made of it XLA computes as it compiles, and the pin of the select they make folds away
    # (without AVX512_BF16, as in the CI's emulated instruction sets, signalling NaNs and NaN
    # payloads came back quieted). The library reads such a tracer's value (ops._as_indices),
    # as of indices closed over: pinned by data.
    op, shape, index_shape = CONSTANT_INDEX_CASES[case]
    rng = np.random.default_rng(len(case))
    data = rng.choice(CHANGED_BY_FLOAT32, shape).view(BF16)
    axis = 1 if op == "gather axis 1" else 0
    bound = np.array(shape[: index_shape[-1]] if op == "gather_nd" else shape[axis])
    indices = rng.integers(-bound - 2, bound + 2, index_shape).astype(np.int32)  # some out of bounds
    made_inside = {
        "jnp.asarray": lambda: jnp.asarray(indices),
        "jnp.array": lambda: jnp.array(indices.tolist()),
    }[made]
    fill = np.asarray(np.nan, BF16)
    if op == "gather_nd":
        out = jax.jit(lambda d: jax_gather.gather_nd(d, made_inside(), mode="fill"))(data)
        expected = reference.gather_nd(data, indices, mode="fill", fill=fill)
    else:
        out = jax.jit(lambda d: jax_gather.gather(d, made_inside(), axis, mode="fill"))(data)
        expected = reference.gather(data, indices, axis, mode="fill", fill=fill)
    _assert_same_bits(out, expected)


INDEX_TYPES = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64,
               jnp.int4, jnp.uint4, ml_dtypes.int2, ml_dtypes.uint2]  # fmt: skip


@pytest.mark.parametrize("index_type", INDEX_TYPES, ids=lambda t: np.dtype(t).name)
def test_the_flag_of_an_axis_of_one_entry_is_numpys_for_every_index_type(index_type):
    # In bounds of an axis of one entry are 0 and -1: i + 1 wraps the largest signed index to
    # the smallest, and the or of a tuple's components is at most 1 exactly where each is.
    info = jnp.iinfo(index_type)
    with enable_x64(np.dtype(index_type).itemsize == 8):
        values = sorted({int(info.min), int(info.min) + 1, -2, -1, 0, 1, 2, int(info.max) - 1, int(info.max)})
        values = [v for v in values if info.min <= v <= info.max]
        pairs = np.array([(a, b) for a in values for b in values], dtype=object)
        expected = ~np.isin(pairs, [-1, 0]).all(-1)
        typed = lambda x: jnp.asarray(
            np.asarray(x, np.int64 if info.min < 0 else np.uint64).astype(index_type)
        )
        plan = plans.gather_nd_plan((1, 1, 3), pairs.shape)
        np.testing.assert_array_equal(np.asarray(_cpu_one_slice.past_one_entry(typed(pairs), plan)), expected)
        single = plans.gather_plan((1, 3), (len(values),), 0)
        flags = np.asarray(_cpu_one_slice.past_one_entry(typed(values), single))
        np.testing.assert_array_equal(flags, ~np.isin(np.array(values, dtype=object), [-1, 0]))
        within = np.asarray(_cpu_one_slice.within_one_entry(typed(pairs), plan))
        np.testing.assert_array_equal(within, ~expected)


ONE_SLICE_CASES = {  # op, data shape, index shape (every index reads one slice)
    "gather rows of 2": ("gather", (1, 2), (700,)),
    "gather rows of 8": ("gather", (1, 8), (300,)),
    "batch_dims=1": ("gather batch_dims=1", (3, 1, 4), (3, 200)),
    "GatherND pairs of 5": ("gather_nd", (1, 1, 5), (2188, 2)),
    "GatherND pairs of one element": ("gather_nd", (1, 1), (3000, 2)),
    "GatherND rows after batch dims": ("gather_nd batch_dims=1", (4, 1, 3), (4, 50, 1)),
}
_ONE_SLICE_OPS = {
    "gather": lambda d, i, m: jax_gather.gather(d, i, 0, mode=m),
    "gather batch_dims=1": lambda d, i, m: jax_gather.gather(d, i, 1, mode=m, batch_dims=1),
    "gather_nd": lambda d, i, m: jax_gather.gather_nd(d, i, mode=m),
    "gather_nd batch_dims=1": lambda d, i, m: jax_gather.gather_nd(d, i, 1, mode=m),
}


@pytest.mark.parametrize("dtype", [np.int8, np.bool_, np.float16, ml_dtypes.float8_e4m3fn, np.float32],
                         ids=lambda d: np.dtype(d).name)  # fmt: skip
@pytest.mark.parametrize("case", list(ONE_SLICE_CASES))
def test_a_fill_of_one_slice_read_from_a_table_is_numpys_and_differentiates_as_jnps(case, dtype):
    op, shape, index_shape = ONE_SLICE_CASES[case]
    dtype = np.dtype(dtype)
    rng = np.random.default_rng(len(case))
    data = random_bits(rng, dtype, shape) if dtype != np.bool_ else rng.integers(0, 2, shape).astype(bool)
    indices = rng.integers(-3, 3, index_shape).astype(np.int32)  # a third in bounds (-1 and 0)
    batch_dims = 1 if "batch_dims" in op else 0
    plan = (
        plans.gather_nd_plan(shape, index_shape, batch_dims)
        if op.startswith("gather_nd")
        else plans.gather_plan(shape, index_shape, batch_dims, batch_dims=batch_dims)
    )
    fits = dtype.itemsize * math.prod(plan.slice_sizes) <= 16
    assert (ONE_SLICE in _cpu.lowering(plan, shape, dtype).names) == (ON and fits)
    call = _ONE_SLICE_OPS[op]
    out = jax.jit(lambda d, i: call(d, i, "fill"))(data, indices)
    with _cpu.without(ONE_SLICE):
        by_select = jax.jit(lambda d, i: call(d, i, "fill"))(data, indices)
    fill = np.asarray(_fill.default_fill_value(dtype)).astype(dtype)
    if op.startswith("gather_nd"):
        expected = reference.gather_nd(data, indices, batch_dims, mode="fill", fill=fill)
    else:
        expected = reference.gather(data, indices, batch_dims, batch_dims=batch_dims, mode="fill", fill=fill)
    _assert_same_bits(out, expected)
    _assert_same_bits(by_select, expected)
    if dtype == np.float32:  # each in-bounds read adds one to its element of data's gradient
        grad = jax.jit(jax.grad(lambda d, i: call(d, i, "fill").sum()))(data, indices)
        with _cpu.without(ONE_SLICE):
            by_select = jax.jit(jax.grad(lambda d, i: call(d, i, "fill").sum()))(data, indices)
        np.testing.assert_array_equal(np.asarray(grad), np.asarray(by_select))
        assert np.asarray(grad).sum() == np.isin(indices, [-1, 0]).all(
            -1 if plan.tuple_indices else ()
        ).sum() * (math.prod(plan.slice_sizes))


@pytest.mark.parametrize("rows", [8, 16])
def test_a_column_fill_from_written_slots_keeps_its_bits_through_the_pin_the_table_chose(
    rows, lowerings_on_any_cpu
):
    # Where XLA:CPU keeps the bits of a select through a pinned fill (_fill_pin.pins_the_fill:
    # bfloat16 from JAX 0.11) the column fill selects against it: one flop an element, as jnp's
    # select, where a pin of each element counted four and took the loop past one flop a byte,
    # which XLA split into a task per core (8 rows by 3000 ids: 1.8-2.2x jnp's time). Elsewhere
    # each element is pinned. Every bit kept either way.
    shape, n = (rows, 4096), 3000
    data = np.resize(CHANGED_BY_FLOAT32, shape).view(BF16)
    indices = np.random.default_rng(rows).integers(-4100, 4100, n).astype(np.int32)
    plan = plans.gather_plan(shape, (n,), 1)
    assert (COLUMN_DIRECT in _cpu.lowering(plan, shape, BF16).names) == ON
    ours = jax.jit(lambda d, i: jax_gather.gather(d, i, 1, mode="fill"))
    fill = np.asarray(np.nan, BF16)
    _assert_same_bits(ours(data, indices), reference.gather(data, indices, 1, mode="fill", fill=fill))
    flops = _cpu_flops(ours.lower(data, indices).compile())
    with _cpu.without(FILL_PIN):
        each = _cpu_flops(ours.lower(data, indices).compile())
    saved = round((each - flops) / (rows * n))  # flops an element: 4 a pinned one, 1 a plain select
    assert saved == (3 if ON and _fill_pin.pins_the_fill(np.dtype(BF16)) else 0)


# (op, data shape, index shape): rows; a table of one row (a broadcast) under and over 1000 output
# elements; one column by written slots; columns selected against a pinned fill; GatherND pairs.
CONSTANT_CASES = {
    "rows of 2": ("gather", (40, 2), (160,)),
    "rows of 17": ("gather", (40, 17), (160,)),
    "rows of 64": ("gather", (40, 64), (160,)),
    "one row of 3": ("gather", (1, 3), (160,)),
    "one row of 8": ("gather", (1, 8), (160,)),
    "one column": ("gather axis 1", (16, 1), (700,)),
    "columns": ("gather axis 1", (8, 4096), (3000,)),
    "pairs": ("gather_nd", (40, 3, 4), (160, 2)),
}
_CONSTANT_OPS = {
    "gather": lambda d, i, mode: jax_gather.gather(d, i, 0, mode=mode),
    "gather axis 1": lambda d, i, mode: jax_gather.gather(d, i, 1, mode=mode),
    "gather_nd": lambda d, i, mode: jax_gather.gather_nd(d, i, mode=mode),
}


@pytest.mark.parametrize("constant", ["indices", "data"])
@pytest.mark.parametrize("mode", ["fill", "checked"])
@pytest.mark.parametrize("case", list(CONSTANT_CASES))
def test_constants_of_the_trace_keep_the_bits_of_a_pinned_select(case, mode, constant, lowerings_on_any_cpu):
    # Indices closed over by jit are constants XLA computes with as it compiles: zeros made of
    # them are folded, and the select of "fill" gave back signalling NaNs of bfloat16 rows of
    # 2-64, pairs and a table of one row quieted (as jnp.take's does). The pin is then made of
    # data's first element, and of the indices where data is the constant. Out-of-bounds
    # constant ids under a plain jit fill in the checked mode too.
    op, shape, index_shape = CONSTANT_CASES[case]
    data = np.resize(CHANGED_BY_FLOAT32, shape).view(BF16)
    axis = 1 if op == "gather axis 1" else 0
    sizes = shape[: index_shape[-1]] if op == "gather_nd" else shape[axis]
    indices = make_wild_indices(index_shape, sizes, np.int32, len(case))
    call = _CONSTANT_OPS[op]
    if constant == "indices":
        out = jax.jit(lambda d: call(d, indices, mode))(data)
    else:
        out = jax.jit(lambda i: call(data, i, mode))(indices)
    fill = np.asarray(np.nan, BF16)
    if op == "gather_nd":
        expected = reference.gather_nd(data, indices, mode="fill", fill=fill)
    else:
        expected = reference.gather(data, indices, axis, mode="fill", fill=fill)
    _assert_same_bits(out, expected)


def _cpu_flops(compiled) -> int:
    cost = compiled.cost_analysis()
    return int((cost[0] if isinstance(cost, (list, tuple)) else cost)["flops"])


# (data shape, dtype, plan, index flops (None: a fill), pinned by a clamp where XLA vectorises it)
# fmt: off
CLAMPS = [
    ((100, 48), BF16, plans.gather_plan((100, 48), (300,), 0), None, True),
    ((100, 48), BF16, plans.gather_plan((100, 48), (R,), 0), None, True),  # short rows' size
    ((100, 16), BF16, plans.gather_plan((100, 16), (300,), 0), None, True),  # the fact says where
    ((100, 48), BF16, plans.gather_plan((100, 48), (300,), 0), 3, False),  # a promise: no select
    ((100, 48), BF16, plans.gather_plan((100, 48), (300,), 0), 0, False),  # in range: no select
    ((100, 48), np.float16, plans.gather_plan((100, 48), (300,), 0), None, False),  # keeps its bits
    ((100, 48), np.float32, plans.gather_plan((100, 48), (300,), 0), None, False),
    ((100, 12), BF16, plans.gather_plan((100, 12), (300,), 0), None, True),
    ((100, 65), BF16, plans.gather_plan((100, 65), (300,), 0), None, False),  # longer than SHORT_ROWS
    ((4, 100, 48), BF16, plans.gather_plan((4, 100, 48), (4, 75), 1, batch_dims=1), None, True),
    ((100, 48), BF16, plans.gather_nd_plan((100, 48), (300, 1)), None, True),
    ((100, 4, 48), BF16, plans.gather_plan((100, 4, 48), (300,), 0), None, True),  # rows of 4x48
    ((48, 100), BF16, plans.gather_plan((48, 100), (300,), 1), None, False),  # columns: ids innermost
    ((100, 48), BF16, plans.gather_elements_plan((100, 48), (100, 48), 1), None, False),  # elements
]
# fmt: on


@pytest.mark.parametrize("vectorises", [True, False])
def test_rows_are_pinned_by_a_clamp_only_in_a_fill_of_bfloat16_rows_where_xla_vectorises_it(
    vectorises, monkeypatch, bits_pinned_on_any_jax
):
    asked = []
    _fact_answers(monkeypatch, "xla_vectorises_rows_clamped", lambda *a: asked.append(a) or vectorises)
    _cpu._choose.cache_clear()
    try:
        for shape, dtype, plan, flops, expected in CLAMPS:
            names = _cpu.lowering(plan, shape, dtype, flops).names
            assert (CLAMP in names) == (ON and vectorises and expected), (shape, dtype, plan, flops)
    finally:
        _cpu._choose.cache_clear()
    # The fact is asked of the output's rows: (48,), (4, 48), (16,) and (12,), never of columns.
    assert {row for _, row in asked} == ({(48,), (4, 48), (16,), (12,)} if ON else set())


@needs_cpu_lowerings
@pytest.mark.parametrize("vectorises", [True, False])
def test_a_fill_whose_select_the_clamp_vectorises_gathers_its_rows_whole(
    vectorises, monkeypatch, rows_on_any_jax, rows_pinned_on_any_jax
):
    # Its select's vector loop reads the rows as they are: in bytes, the fill measured slower.
    _fact_answers(monkeypatch, "xla_vectorises_rows_clamped", lambda *asked: vectorises)
    _fact_answers(monkeypatch, "xla_vectorises_pinned_rows", lambda *asked: False)  # the xor's: scalar
    _cpu._choose.cache_clear()
    plan = plans.gather_plan((100, 48), (R,), 0)
    try:
        assert _cpu.lowering(plan, (100, 48), BF16).names == ({CLAMP} if vectorises else {ROWS})
        assert _cpu.lowering(plan, (100, 48), BF16, index_flops=3).names == {ROWS}  # a promise
        with _cpu.without(CLAMP):  # the library without the clamp: its rows in bytes
            assert _cpu.lowering(plan, (100, 48), BF16).names == {ROWS}
    finally:
        _cpu._choose.cache_clear()


# (data shape, plan, index flops (None: a fill), the pin chosen where XLA:CPU keeps bfloat16's
# bits through a pinned fill) with the clamp vectorising rows of 48 and the exclusive or rows of 64
# fmt: off
FILL_PINS = [
    ((100, 8), plans.gather_plan((100, 8), (80,), 0), None, FILL_PIN),
    ((100, 8), plans.gather_plan((100, 8), (4096,), 0), None, FILL_PIN),  # no row pin vectorised
    ((100, 48), plans.gather_plan((100, 48), (16,), 0), None, FILL_PIN),  # under INLINE_FLOPS elements
    ((100, 48), plans.gather_plan((100, 48), (300,), 0), None, CLAMP),
    ((100, 64), plans.gather_plan((100, 64), (8,), 0), None, FILL_PIN),
    ((100, 64), plans.gather_plan((100, 64), (300,), 0), None, None),  # the exclusive or's vector loop
    ((100, 100), plans.gather_plan((100, 100), (300,), 0), None, FILL_PIN),  # longer than SHORT_ROWS
    ((48, 100), plans.gather_plan((48, 100), (300,), 1), None, FILL_PIN),  # columns
    ((4, 100, 8), plans.gather_nd_plan((4, 100, 8), (4, 20, 1), 1), None, FILL_PIN),
    ((1, 8), plans.gather_plan((1, 8), (80,), 0), None, None),  # one slice: XLA's broadcast
    ((100, 8), plans.gather_plan((100, 8), (80,), 0), 3, None),  # a promise: no select
    ((100, 8), plans.gather_elements_plan((100, 8), (100, 8), 1), None, None),  # elements
]
# fmt: on


@pytest.mark.parametrize("holds", [True, False])
def test_the_fill_is_pinned_instead_of_rows_where_xla_keeps_their_bits_through_it(
    holds, monkeypatch, bits_pinned_on_any_jax
):
    monkeypatch.setattr(_cpu_fills, "pins_the_fill", lambda dtype: holds and dtype == BF16)
    _fact_answers(monkeypatch, "xla_vectorises_rows_clamped", lambda dtype, row: row == (48,))
    _fact_answers(monkeypatch, "xla_vectorises_pinned_rows", lambda dtype, row, *pin: row == (64,))
    _cpu._choose.cache_clear()
    try:
        for shape, plan, flops, pin in FILL_PINS:
            names = _cpu.lowering(plan, shape, BF16, flops).names & {FILL_PIN, CLAMP}
            expected = pin if holds else (CLAMP if shape == (100, 48) else None)
            assert names == ({expected} if ON and expected else set()), (shape, plan, flops)
            assert FILL_PIN not in _cpu.lowering(plan, shape, np.float32, flops).names  # keeps its bits
    finally:
        _cpu._choose.cache_clear()


# (data shape, plan, the lowering that pins bfloat16's bits there where XLA:CPU moves them
# through float32)
PINS_OF_BITS = [
    ((100, 48), plans.gather_plan((100, 48), (R,), 0), CLAMP),  # where the clamp's select vectorises
    ((6, 1), plans.gather_plan((6, 1), (300,), 1), PINNED_COLUMN),
    ((1, 64), plans.gather_plan((1, 64), (4095,), 0), ONE_SLICE),  # of any length: each index's pin
]


@pytest.mark.parametrize("kept", [True, False])
def test_no_lowering_pins_bfloat16_where_xla_cpu_keeps_its_bits(kept, monkeypatch):
    # JAX 0.12.1 keeps them (tests/test_cpu_facts.py): there bfloat16 takes the lowerings of float16.
    monkeypatch.setattr(_fill, "_xla_cpu_keeps_bits", lambda dtype: kept)
    monkeypatch.setattr(_cpu_fills, "pins_the_fill", lambda dtype: False)
    _fact_answers(monkeypatch, "xla_vectorises_rows_clamped", lambda *asked: True)
    _cpu._choose.cache_clear()
    try:
        for shape, plan, name in PINS_OF_BITS:
            assert (name in _cpu.lowering(plan, shape, BF16).names) == (ON and not kept), (shape, plan)
            assert name not in _cpu.lowering(plan, shape, np.float16).names
    finally:
        _cpu._choose.cache_clear()


# (data shape, plan, index flops (None: a fill), whether bfloat16 elements select against the
# pinned fill where their generic select is one of bfloat vectors)
# fmt: off
ELEMENT_PINS = [
    ((E, 1), plans.gather_elements_plan((E, 1), (E, 1), 1), None, True),  # an element each
    ((E - 1, 1), plans.gather_elements_plan((E - 1, 1), (E - 1, 1), 1), None, False),  # under 512 KiB
    ((4096, 1), plans.gather_elements_plan((4096, 1), (4096, 1), 1), None, False),  # the 5 would split
    ((64, 64), plans.gather_nd_plan((64, 64), (90000, 2)), None, True),  # pairs of elements
    ((64, 64), plans.gather_nd_plan((64, 64), (90000, 2)), 3, False),  # a promise: no select
    ((8, 4096), plans.gather_plan((8, 4096), (E // 8,), 1), None, False),  # columns: slices of 8
    ((1, 1), plans.gather_nd_plan((1, 1), (E, 2)), None, False),  # one slice: each element pinned
]
# fmt: on


@pytest.mark.parametrize("holds", [True, False])
def test_bfloat16_elements_select_against_the_pinned_fill_where_their_select_is_of_bfloat_vectors(
    holds, monkeypatch
):
    monkeypatch.setattr(_cpu_fills, "xla_selects_bfloat_vectors_unless_pinned", lambda dtype: holds)
    _cpu._choose.cache_clear()
    try:
        for shape, plan, flops, chosen in ELEMENT_PINS:
            names = _cpu.lowering(plan, shape, BF16, flops).names
            assert (PINNED_ELEMENTS in names) == (ON and holds and chosen), (shape, plan, flops)
        monkeypatch.setattr(_cpu, "cpu_devices", lambda: 2)  # on a mesh each index's zeros would count
        _cpu._choose.cache_clear()
        assert PINNED_ELEMENTS not in _cpu.lowering(*ELEMENT_PINS[0][1::-1], BF16).names
    finally:
        _cpu._choose.cache_clear()


@needs_cpu_lowerings
@pytest.mark.parametrize(
    "op, shape, index_shape, sizes, attribute",
    [
        ("gather_elements", (E, 1), (E, 1), 1, 1),  # an element of its own each
        ("gather_elements", (40, 2048), (48, 2048), 40, 0),
        ("gather_nd", (40, 50), (90000, 2), (40, 50), 0),
        ("gather_nd", (3, 40, 50), (3, 30000, 2), (40, 50), 1),
    ],
    ids=["elements of their own", "gather_elements", "gather_nd pairs", "gather_nd batch_dims=1"],
)
def test_bfloat16_elements_selected_against_the_pinned_fill_keep_every_bit(
    op, shape, index_shape, sizes, attribute, element_pin_on_any_cpu
):
    # Signalling NaNs, subnormals and a NaN's payload, in data and as the fill, given or traced.
    data = np.resize(CHANGED_BY_FLOAT32, shape).view(BF16)
    indices = make_wild_indices(index_shape, sizes, np.int32, 18)
    plan = ops_table.OPS[op].plan(shape, index_shape, attribute)
    assert PINNED_ELEMENTS in _cpu.lowering(plan, shape, BF16).names
    call = lambda d, i, f: ops_table.OPS[op].fn(d, i, attribute, mode="fill", fill_value=f)
    for fill in CHANGED_BY_FLOAT32[[0, 2, 4]].view(BF16):
        expected = getattr(reference, op)(data, indices, attribute, mode="fill", fill=fill).view(np.uint16)
        given = jax.jit(lambda d, i: call(d, i, fill))(data, indices)
        traced = jax.jit(call)(data, indices, fill)
        np.testing.assert_array_equal(np.asarray(given).view(np.uint16), expected)
        np.testing.assert_array_equal(np.asarray(traced).view(np.uint16), expected)


def test_a_tuple_mask_is_an_and_only_in_a_fill():
    plan = plans.gather_nd_plan((64, 64, 8), (300, 2))
    assert (AND in _cpu.lowering(plan, (64, 64, 8), np.float32).names) == ON
    for flops in (0, 3, 6):  # in range, a promise, clip: no mask
        assert AND not in _cpu.lowering(plan, (64, 64, 8), np.float32, flops).names


@needs_cpu_lowerings
@pytest.mark.parametrize("vectorises", [True, False])
def test_a_fill_whose_select_xla_vectorises_with_the_exclusive_or_gathers_its_rows_whole(
    vectorises, monkeypatch, rows_on_any_jax, rows_pinned_on_any_jax
):
    # As with the clamp: the select's vector loop reads the rows as they are.
    asked = []
    _fact_answers(monkeypatch, "xla_vectorises_rows_clamped", lambda *a: False)
    _fact_answers(monkeypatch, "xla_vectorises_pinned_rows", lambda *a: asked.append(a) or vectorises)
    _cpu._choose.cache_clear()
    plan = plans.gather_plan((100, 64), (R,), 0)
    try:
        assert _cpu.lowering(plan, (100, 64), BF16).names == (set() if vectorises else {ROWS})
        assert _cpu.lowering(plan, (100, 64), BF16, index_flops=3).names == {ROWS}  # a promise
        assert _cpu.lowering(plan, (100, 64), np.float32).names == {ROWS}  # keeps its bits: no pin
        small = plans.gather_plan((100, 64), (R // 4,), 0)
        assert _cpu.lowering(small, (100, 64), BF16).names == set()  # under short rows' size
    finally:
        _cpu._choose.cache_clear()
    assert asked == [(np.dtype(BF16), (64,))]  # once, of the fill's rows that take short rows


@needs_cpu_lowerings
@pytest.mark.parametrize("op", ["gather", "gather batch_dims=1", "gather_nd"])
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_rows_pinned_by_a_clamp_keep_every_bit(op, jit, clamp_on_any_cpu):
    rng = np.random.default_rng(13)
    data = random_bits(rng, BF16, (3, 40, 48))  # every pattern: NaN payloads, signalling NaNs
    fill = np.asarray(np.nan, BF16)
    fn, expected, indices = {
        "gather": (lambda d, i: jax_gather.gather(d, i, 1, mode="fill"),
                   lambda i: reference.gather(bits(data), i, 1, "fill", bits(fill)),
                   make_wild_indices((30,), 40, np.int32, 13)),
        "gather batch_dims=1": (lambda d, i: jax_gather.gather(d, i, 1, mode="fill", batch_dims=1),
                                lambda i: reference.gather(bits(data), i, 1, "fill", bits(fill), 1),
                                make_wild_indices((3, 30), 40, np.int32, 14)),
        "gather_nd": (lambda d, i: jax_gather.gather_nd(d, i, 1, mode="fill"),
                      lambda i: reference.gather_nd(bits(data), i, 1, "fill", bits(fill)),
                      make_wild_indices((3, 30, 1), 40, np.int32, 15)),
    }[op]  # fmt: skip
    plan_of = {"gather": lambda: plans.gather_plan(data.shape, indices.shape, 1),
               "gather batch_dims=1": lambda: plans.gather_plan(data.shape, indices.shape, 1, batch_dims=1),
               "gather_nd": lambda: plans.gather_nd_plan(data.shape, indices.shape, 1)}  # fmt: skip
    assert CLAMP in _cpu.lowering(plan_of[op](), data.shape, data.dtype).names
    out = (jax.jit(fn) if jit else fn)(data, indices)
    np.testing.assert_array_equal(bits(out), expected(indices))
    if jit:  # the derivative of the select, through the clamp's custom rule: 1 per element read
        grad = jax.grad(lambda d: fn(d, indices).astype(jnp.float32).sum())(np.ones(data.shape, BF16))
        read = int(((indices >= -40) & (indices < 40)).sum()) * (3 if op == "gather" else 1)
        assert float(np.asarray(grad, np.float32).sum()) == 48 * read


def test_every_mode_through_short_rows():
    data = np.arange(10 * 32, dtype=np.float32).reshape(10, 32)
    indices = make_wild_indices((R // 2,), 10, np.int32, seed=3)
    for mode, expected in [
        ("clip", reference.gather(data, indices, 0, mode="clip")),
        ("fill", reference.gather(data, indices, 0, mode="fill", fill=-7.0)),
    ]:
        out = jax.jit(lambda d, i: jax_gather.gather(d, i, mode=mode, fill_value=-7.0))(data, indices)
        np.testing.assert_array_equal(np.asarray(out), expected)
    bad = np.array([0, -1, 12])
    with pytest.raises(IndexError, match=r"indices\[2\] = 12 is out of bounds for axis 0 of size 10"):
        jax_gather.checked(jax.jit(lambda d, i: jax_gather.gather(d, i)))(data, bad)


@pytest.mark.parametrize("vectorises", [True, False])
def test_the_batched_linear_index_is_chosen_only_where_xla_vectorises_it(vectorises, monkeypatch):
    monkeypatch.setattr(_cpu, "xla_vectorises_linear_indices", lambda: vectorises)
    plan = plans.gather_nd_plan((4, 6, 7), (4, T // 4, 2), 1)
    site = _cpu.Site(plan, (4, 6, 7), np.dtype(np.float32), x64=False, cpu_devices=1)
    names = _cpu._choose.__wrapped__(site, frozenset()).names  # past the cache of choices
    assert names == (({LINEAR, ND_LINEAR} if vectorises else {LINEAR}) if ON else set())  # the select fills


def test_every_mode_through_the_batched_linear_index(lowerings_on_any_cpu):
    data = np.arange(4 * 6 * 7, dtype=np.float32).reshape(4, 6, 7)
    indices = make_wild_indices((4, T // 4, 2), (6, 7), np.int32, seed=4)
    assert (
        ND_LINEAR
        in _cpu.lowering(plans.gather_nd_plan(data.shape, indices.shape, 1), data.shape, data.dtype).names
    )
    for mode in ("clip", "fill"):
        out = jax.jit(lambda d, i: jax_gather.gather_nd(d, i, 1, mode=mode, fill_value=-7.0))(data, indices)
        np.testing.assert_array_equal(
            np.asarray(out), reference.gather_nd(data, indices, 1, mode=mode, fill=-7.0)
        )
    inside = np.clip(indices, [-6, -7], [5, 6]).astype(np.int32)  # negatives stay
    for mode in ("promise_in_bounds", "checked"):
        out = jax.jit(lambda d, i: jax_gather.gather_nd(d, i, 1, mode=mode))(data, inside)
        np.testing.assert_array_equal(np.asarray(out), reference.gather_nd(data, inside, 1))
    with pytest.raises(IndexError, match=r"indices\[0, 3, 1\] = 7 is out of bounds for axis 2 of size 7"):
        bad = inside.copy()
        bad[0, 3, 1] = 7
        jax_gather.checked(jax.jit(lambda d, i: jax_gather.gather_nd(d, i, 1)))(data, bad)


# (dtype, fill_value, the fill expected): the defaults are jnp.take's.
# fmt: off
FILL_CASES = [
    (np.float32, -7.5, -7.5), (np.float32, None, np.nan), (np.float16, 3.0, 3.0), (np.int8, -3, -3),
    (np.uint8, 200, 200), (np.bool_, True, True), (np.int32, None, -(2**31)), (np.complex64, 2 - 1j, 2 - 1j),
    (np.float64, -0.0, -0.0), (np.int64, 7, 7), (ml_dtypes.bfloat16, None, np.nan),
]
# fmt: on


@pytest.mark.parametrize(
    "dtype, fill, expected_fill", FILL_CASES, ids=lambda v: str(v) if not isinstance(v, type) else ""
)
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_fill_matches_the_reference_in_every_direction(dtype, fill, expected_fill, jit, lowerings_on_any_cpu):
    # GatherND elements (a pad of data on CPU, or two loops), short row lookups of each op (a
    # pad of data), element gathers that select; every kind of out-of-bounds index.
    wide = np.dtype(dtype).itemsize == 8
    with enable_x64(wide):
        rng = np.random.default_rng(0)
        data = random_bits(rng, dtype, (6, 7, 5))
        i_dtype = np.int64 if wide else np.int32
        # (op, its attribute, indices); the last reads data[:4, :, :2]
        calls = [
            ("gather_nd", 0, make_wild_indices((40, 3), (6, 7, 5), i_dtype, 1)),
            ("gather_nd", 1, make_wild_indices((6, 30, 2), (7, 5), i_dtype, 2)),
            (
                "gather_nd",
                1,
                make_wild_indices((6, T // 6 + 1, 2), (7, 5), i_dtype, 8),
            ),  # by one linear index
            ("gather_nd", 0, make_wild_indices((12, 2), (6, 7), i_dtype, 3)),
            ("gather_nd", 0, make_wild_indices((2048, 3), (6, 7, 5), i_dtype, 9)),  # in two loops
            ("gather", 0, make_wild_indices((3, 5), 6, i_dtype, 4)),
            ("gather", 1, make_wild_indices((11,), 7, i_dtype, 5)),
            ("gather_elements", 1, make_wild_indices((6, 9, 5), 7, i_dtype, 6)),
            ("gather_elements", 1, make_wild_indices((4, 3, 2), 7, i_dtype, 7)),
        ]
        for name, attribute, indices in calls:
            op, ref = ops_table.OPS[name].fn, ops_table.OPS[name].reference
            fn = lambda d, i: op(d, i, attribute, mode="fill", fill_value=fill)
            out = (jax.jit(fn) if jit else fn)(data, indices)
            expected = ref(data, indices, attribute, mode="fill", fill=expected_fill)
            _assert_same_bits(out, expected.astype(dtype))


def _codes(rng: np.random.Generator, dtype: np.dtype, shape: tuple) -> np.ndarray:
    """Random values of ``dtype``: every bit pattern for whole bytes, every code of a sub-byte type."""
    if dtype.name in ("int2", "int4", "uint2", "uint4"):
        info = ml_dtypes.iinfo(dtype)
        return rng.integers(info.min, info.max + 1, shape).astype(dtype)
    if dtype.name == "float4_e2m1fn":
        return rng.integers(0, 16, shape, dtype=np.uint8).view(dtype)
    return random_bits(rng, dtype, shape)


WRITTEN_DTYPES = [jnp.int4, ml_dtypes.uint4, ml_dtypes.int2, ml_dtypes.float4_e2m1fn, ml_dtypes.float8_e4m3fn,
                  ml_dtypes.float8_e5m2, ml_dtypes.bfloat16, np.int8, np.float32, np.float64]  # fmt: skip


@needs_cpu_lowerings
@pytest.mark.parametrize("dtype", WRITTEN_DTYPES, ids=lambda d: np.dtype(d).name)
def test_a_fill_from_written_indices_gives_numpys_bits(dtype, written_indices_on_any_size):
    # Index pairs in and out of bounds, negative, past int32 (int64 with x64), into rows of 5 and
    # a table of one row; the fill given, the default, and a traced one.
    dtype = np.dtype(dtype)
    wide = dtype.itemsize == 8
    with enable_x64(wide):
        rng = np.random.default_rng(3)
        i_dtype = np.int64 if wide else np.int32
        for shape, index_shape in [((6, 7, 5), (300, 2)), ((1, 1, 3), (40, 2)), ((6, 7, 5, 2), (20, 10, 2))]:
            data = _codes(rng, dtype, shape)
            indices = make_wild_indices(index_shape, shape[:2], i_dtype, shape[0])
            plan = plans.gather_nd_plan(shape, index_shape)
            # The table of one row (of whole bytes, up to 16) is read from a table with the fill;
            # one row otherwise by XLA's broadcast and the generic select, no written indices.
            one = shape[:2] == (1, 1)
            table = one and _fill.element_bits(dtype) >= 8 and shape[2] * dtype.itemsize <= 16
            names = _cpu.lowering(plan, shape, dtype).names
            assert (ONE_SLICE in names) if table else ((WRITTEN in names) != one)
            fill = data.reshape(-1)[:1].reshape(())  # a value of the type
            for fill_value, traced in [(None, False), (fill, False), (fill, True)]:
                call = lambda d, i, f: jax_gather.gather_nd(d, i, mode="fill", fill_value=f)
                fn = jax.jit(call) if traced else jax.jit(lambda d, i: call(d, i, fill_value))
                out = fn(data, indices, fill) if traced else fn(data, indices)
                expected = reference.gather_nd(
                    data,
                    indices,
                    mode="fill",
                    fill=np.asarray(_fill.default_fill_value(dtype) if fill_value is None else fill).astype(
                        dtype
                    ),
                )
                _assert_same_bits(out, expected)
            # Every index the gather reads is in range: JAX's own index checks flag none.
            checked = checkify.checkify(jax.jit(lambda d, i: call(d, i, None)), errors=checkify.index_checks)
            checked(data, indices)[0].throw()


@needs_cpu_lowerings
@pytest.mark.parametrize(
    "dtype", [jnp.int4, ml_dtypes.uint4, ml_dtypes.float4_e2m1fn], ids=lambda d: np.dtype(d).name
)
def test_a_fill_of_elements_converted_on_the_way_in_two_loops_gives_numpys_bits(dtype, lowerings_on_any_cpu):
    # Pairs of one element from a table of 25 (where the one loop splits and jnp's stays whole).
    dtype, rng = np.dtype(dtype), np.random.default_rng(7)
    data, indices = _codes(rng, dtype, (5, 5)), make_wild_indices((2048, 2), (5, 5), np.int32, 8)
    assert TWO_LOOPS in _cpu.lowering(plans.gather_nd_plan((5, 5), (2048, 2)), (5, 5), dtype).names
    for fill in (None, data[0, 0]):
        out = jax.jit(lambda d, i: jax_gather.gather_nd(d, i, mode="fill", fill_value=fill))(data, indices)
        given = np.asarray(_fill.default_fill_value(dtype) if fill is None else fill).astype(dtype)
        _assert_same_bits(out, reference.gather_nd(data, indices, mode="fill", fill=given))


@needs_cpu_lowerings
def test_a_fill_from_written_indices_differentiates_as_the_select(written_indices_on_any_size):
    data = np.random.default_rng(4).standard_normal((6, 7, 5)).astype(np.float32)
    indices = make_wild_indices((300, 2), (6, 7), np.int32, 5)
    weights = np.random.default_rng(6).standard_normal((300, 5)).astype(np.float32)
    f = lambda d, i: (jax_gather.gather_nd(d, i, mode="fill", fill_value=0.0) * weights).sum()
    expected = np.zeros_like(data)
    ok = np.all((indices >= -np.array([6, 7])) & (indices < np.array([6, 7])), axis=-1)
    at = np.where(indices < 0, indices + np.array([6, 7]), indices)[ok]
    np.add.at(expected, (at[:, 0], at[:, 1]), weights[ok])
    np.testing.assert_allclose(jax.jit(jax.grad(f))(data, indices), expected, rtol=1e-6)
    filled = lambda d: jax_gather.gather_nd(d, indices, mode="fill", fill_value=0.0)
    check_grads(filled, (data,), order=1, modes=["fwd", "rev"])
    batched = jax.jit(jax.vmap(lambda d, i: jax_gather.gather_nd(d, i, mode="fill"), in_axes=(None, 0)))
    stacked = np.stack([indices[:100], indices[100:200]])
    _assert_same_bits(
        batched(data, stacked),
        np.stack([reference.gather_nd(data, i, mode="fill", fill=np.float32(np.nan)) for i in stacked]),
    )


def test_wide_indices_past_int32_read_the_fill():
    with enable_x64(True):
        data = np.arange(12, dtype=np.float32).reshape(3, 4)
        indices = np.array([[0, 2**32 + 1], [-(2**32) - 1, 1], [2**62, -(2**63)]], np.int64)
        out = jax.jit(lambda d, i: jax_gather.gather_nd(d, i, mode="fill", fill_value=-1.0))(data, indices)
        np.testing.assert_array_equal(np.asarray(out), [-1.0, -1.0, -1.0])


COLUMN_DTYPES = [*ROW_DTYPES, np.bool_, np.complex64]
COLUMN_INDEX_DTYPES = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64]


@pytest.mark.parametrize("dtype", COLUMN_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_columns_are_bit_exact_in_every_mode(dtype, jit, lowerings_on_any_cpu):
    # Along the last axis from COLUMN_ROWS rows and COLUMNS_MIN_BYTES of output: written-out
    # indices, and "fill" (and traced "checked") from a pad; every kind of out-of-bounds index,
    # data of random bytes.
    wide = np.dtype(dtype).itemsize == 8
    with enable_x64(wide):
        data = random_bits(np.random.default_rng(0), dtype, (2, 6 * ROWS_PER_INDEX, 40))
        indices = make_wild_indices((3, S // 2), 40, np.int64 if wide else np.int32, seed=1)
        plan = plans.gather_plan(data.shape, indices.shape, 2)
        assert (COLUMNS in _cpu.lowering(plan, data.shape, data.dtype).names) == (ON and data.itemsize <= 2)
        in_bounds = np.clip(indices, -40, 39)
        for mode, i, expected in [
            ("clip", indices, reference.gather(data, indices, 2, mode="clip")),
            ("fill", indices, reference.gather(data, indices, 2, mode="fill", fill=data.flat[3])),
            ("promise_in_bounds", in_bounds, reference.gather(data, in_bounds, 2)),
            ("checked", in_bounds, reference.gather(data, in_bounds, 2)),
        ]:
            fn = lambda d, i: jax_gather.gather(d, i, -1, mode=mode, fill_value=data.flat[3])
            _assert_same_bits((jax.jit(fn) if jit else fn)(data, i), expected)


@pytest.mark.parametrize("index_dtype", COLUMN_INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("mode", ["clip", "fill", "checked"])
def test_columns_read_every_index_dtype(index_dtype, mode, lowerings_on_any_cpu):
    # Jitted, so "checked" gives the "fill" result for out-of-bounds indices (checkify aside).
    with enable_x64(np.dtype(index_dtype).itemsize == 8):
        data = np.arange(ROWS_PER_INDEX * 300, dtype=np.int16).reshape(ROWS_PER_INDEX, 300)
        if index_dtype == np.uint64:  # past int64 too
            indices = make_wild_indices((S + 1,), 300, np.uint32, seed=2).astype(np.uint64)
            indices[:3] = 2**64 - 1, 2**63, 2**63 - 1
        else:
            indices = make_wild_indices((S + 1,), 300, index_dtype, seed=2)
        out = jax.jit(lambda d, i: jax_gather.gather(d, i, 1, mode=mode, fill_value=-1))(data, indices)
        ref_mode = "clip" if mode == "clip" else "fill"
        _assert_same_bits(out, reference.gather(data, indices, 1, mode=ref_mode, fill=-1))


def test_columns_under_vmap_and_checkify(lowerings_on_any_cpu):
    rng = np.random.default_rng(3)
    data = rng.standard_normal((3, ROWS_PER_INDEX, 50)).astype(np.float16)
    indices = make_indices((3, S + 1), 50, np.int32, seed=4)
    fn = lambda d, i: jax_gather.gather(d, i, 1)
    per_example = np.stack([reference.gather(data[b], indices[b], 1) for b in range(3)])
    shared = np.stack([reference.gather(data[b], indices[0], 1) for b in range(3)])
    np.testing.assert_array_equal(np.asarray(jax.jit(jax.vmap(fn))(data, indices)), per_example)
    np.testing.assert_array_equal(np.asarray(jax.vmap(jax.jit(fn))(data, indices)), per_example)
    np.testing.assert_array_equal(np.asarray(jax.vmap(fn, (0, None))(data, indices[0])), shared)
    indices[1, 7] = 50
    # With JAX's own index checks too: no uint64 reaches checkify's gather rule, which would
    # narrow it with a warning and make `checked` fall back to the library's checks alone.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(IndexError, match=r"indices\[7\] = 50 is out of bounds for axis 1 of size 50"):
            jax_gather.checked(jax.jit(fn))(data[1], indices[1])


@pytest.mark.parametrize("mode", ["checked", "fill", "clip"])
def test_columns_inside_shard_map_on_this_one_device(mode, lowerings_on_any_cpu):
    # The lowering's primitive takes the mesh axes its operands vary over, as jax.lax's ops do.
    from jax.sharding import Mesh, PartitionSpec

    from tests.sharding_cases import _shard_map

    mesh = Mesh(np.array(jax.devices()[:1]), ("x",))
    data = np.arange(ROWS_PER_INDEX * 40, dtype=np.float16).reshape(ROWS_PER_INDEX, 40)
    indices = make_indices((S + 1,), 40, np.int32, seed=5)
    x, whole = PartitionSpec("x"), PartitionSpec()
    for specs, out_spec in [((x, whole), x), ((whole, x), PartitionSpec(None, "x")), ((x, x), x)]:
        f = _shard_map(lambda d, i: jax_gather.gather(d, i, 1, mode=mode), mesh, specs, out_spec)
        np.testing.assert_array_equal(
            np.asarray(jax.jit(f)(data, indices)), reference.gather(data, indices, 1)
        )
        grad = jax.jit(jax.grad(lambda d: f(d, indices).sum()))(data)
        np.testing.assert_array_equal(
            np.asarray(grad),
            _reference_grad(
                _read_positions("gather", data.shape, indices, 1, "clip"),
                data.shape,
                np.ones((ROWS_PER_INDEX, S + 1)),
            ),
        )


# ---- derivatives -------------------------------------------------------------------------------------


def _read_positions(op, data_shape, indices, attribute, mode):
    """The flat position of data each output element reads, -1 where it is filled: by the NumPy
    reference, on an iota of data's shape."""
    iota = np.arange(int(np.prod(data_shape))).reshape(data_shape)
    return ops_table.OPS[op].reference(iota, indices, attribute, mode=mode, fill=-1)


def _reference_grad(positions, data_shape, cotangent):
    """The gradient w.r.t. data of sum(out * cotangent): each cotangent added to what it read."""
    grad = np.zeros(int(np.prod(data_shape)))
    read = positions >= 0
    np.add.at(grad, positions[read], cotangent[read])
    return grad.reshape(data_shape)


# (op, data shape, indices, attribute): every derivative lowering, and the padded fill's.
# fmt: off
GRAD_CASES = [
    ("gather_nd", (3, 5, 6), make_wild_indices((3, 40, 2), (5, 6), np.int32, 1), 1),
    ("gather_nd", (3, 5, 6), make_wild_indices((3, T // 3 + 1, 2), (5, 6), np.int32, 9), 1),  # linear index
    ("gather_nd", (5, 6, 4), make_wild_indices((30, 3), (5, 6, 4), np.int32, 2), 0),
    ("gather_elements", (4, 5, 6), make_wild_indices((3, 7, 5), 5, np.int32, 3), 1),  # a block of data
    ("gather_elements", (4, 5, 6), make_wild_indices((4, 5, 8), 6, np.int32, 4), -1),
    ("gather_elements", (4, 5, 6), make_wild_indices((4, 50, 6), 5, np.int32, 12), 1),  # linear index
    ("gather_nd", (5, 6, 4), make_wild_indices((1000, 3), (5, 6, 4), np.int32, 13), 0),  # linear index
    ("gather", (5, 6, 3), make_wild_indices((4, 2), 6, np.int32, 5), 1),  # JAX's: 5 positions
    ("gather", (8, 6), make_wild_indices((4, 2), 6, np.int32, 10), 1),  # rows of the moved axis
    ("gather", (2, 8, 40, 3), make_wild_indices((6, 4), 40, np.int32, 11), 2),  # rows of the leading block
    ("gather", (5, 6, 3), make_wild_indices((4, 2), 5, np.int32, 6), 0),
    ("gather", (2, 4, 30), make_wild_indices((3, 50), 30, np.int32, 8), 2),  # columns
    ("gather_nd", (5, 6, 3), make_wild_indices((9, 2), (5, 6), np.int32, 7), 0),  # a short lookup
]
# fmt: on


def _loss(op, shape, indices, attribute, mode):
    """Random data, the positions the reference reads, a random cotangent, and
    ``loss(data, fill) = sum(op(data, indices, attribute, mode, fill) * cotangent)``."""
    rng = np.random.default_rng(8)
    data = rng.standard_normal(shape).astype(np.float32)
    fn = ops_table.OPS[op].fn
    positions = _read_positions(op, shape, indices, attribute, mode)
    cotangent = rng.standard_normal(positions.shape).astype(np.float32)
    loss = lambda d, fill: jnp.sum(fn(d, indices, attribute, mode=mode, fill_value=fill) * cotangent)
    return data, positions, cotangent, loss


@pytest.mark.parametrize("mode", ["fill", "clip"])
@pytest.mark.parametrize(
    "op, shape, indices, attribute", GRAD_CASES, ids=lambda v: v if isinstance(v, str) else ""
)
def test_gradients_match_the_reference(op, shape, indices, attribute, mode):
    data, positions, cotangent, loss = _loss(op, shape, indices, attribute, mode)
    d_data, d_fill = jax.jit(jax.grad(loss, argnums=(0, 1)))(data, jnp.float32(-2.0))
    expected = _reference_grad(positions, shape, cotangent)
    np.testing.assert_allclose(np.asarray(d_data), expected, rtol=1e-5, atol=1e-5)
    expected_fill = cotangent[positions < 0].sum() if mode == "fill" else 0.0
    np.testing.assert_allclose(float(d_fill), expected_fill, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["fill", "clip"])
@pytest.mark.parametrize(
    "op, shape, indices, attribute", GRAD_CASES, ids=lambda v: v if isinstance(v, str) else ""
)
def test_gradients_to_second_order(op, shape, indices, attribute, mode):
    # Forward and reverse mode. The op is linear in data and in the fill (check_grads with
    # order=2 checks the same, in seven times the time).
    data, _, _, loss = _loss(op, shape, indices, attribute, mode)
    check_linear_to_second_order(loss, (data, np.float32(-2.0)), tol=1e-4)


@pytest.mark.parametrize("mode", ["fill", "clip"])
@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, ml_dtypes.float8_e5m2], ids=str)
def test_narrow_float_gradient_through_the_bit_pattern_gather_and_select(dtype, mode):
    # A narrow float is gathered and selected as bit patterns where XLA:CPU would change them
    # (_fill.gathered_as_bits, select_exact); its tangent is not, as a bitcast has no transpose.
    rng = np.random.default_rng(9)
    data = rng.standard_normal((6, 7)).astype(dtype)
    indices = make_wild_indices((6, 7), 6, np.int32, 10)
    cotangent = rng.integers(-2, 3, (6, 7)).astype(np.float32)  # sums exact in float8_e5m2 too
    fn = lambda d: jax_gather.gather_elements(d, indices, 0, mode=mode, fill_value=0.0)
    grad = jax.jit(jax.grad(lambda d: jnp.sum(fn(d).astype(jnp.float32) * cotangent)))(data)
    positions = _read_positions("gather_elements", (6, 7), indices, 0, mode)
    expected = _reference_grad(positions, (6, 7), cotangent)
    np.testing.assert_array_equal(np.asarray(grad).astype(np.float64), expected)


def test_under_vmap_and_checkify():
    rng = np.random.default_rng(1)
    data = rng.standard_normal((4, 6, 7)).astype(np.float32)
    indices = make_indices((4, 9, 2), (6, 7), np.int32, seed=2)
    for op, attribute, idx in [("gather_nd", 0, indices), ("gather", 1, indices[..., 0] % 6)]:
        fn = ops_table.OPS[op].fn
        out = jax.jit(jax.vmap(lambda d, i: fn(d, i, attribute, mode="fill")))(data, idx)
        expected = np.stack([ops_table.OPS[op].reference(data[b], idx[b], attribute) for b in range(4)])
        np.testing.assert_array_equal(np.asarray(out), expected)
    indices[2, 3] = (1, 7)
    checked = jax_gather.checked(jax.jit(lambda d, i: jax_gather.gather_nd(d, i, 1)))
    with pytest.raises(IndexError, match=r"indices\[2, 3, 1\] = 7 is out of bounds for axis 2 of size 7"):
        checked(data, indices)


# ---- linear offsets past int32 ---------------------------------------------------------------------------


@needs_cpu_lowerings
def test_linear_offsets_past_int32_are_int64_and_without_x64_the_tuples_stay():
    # Lowered from abstract shapes: nothing of the 8 GiB table is allocated.
    loss = _grad(lambda d, i: jax_gather.gather_elements(d, i, 0, mode="clip"))
    table = jax.ShapeDtypeStruct(HUGE, jnp.float32)
    with enable_x64(True):
        module = module_for(loss, (table, jax.ShapeDtypeStruct((9, HUGE[1]), jnp.int64)), "cpu")
        assert _scatters(module) == [(f"{HUGE[0] * HUGE[1]}xf32", f"9x{HUGE[1]}x1xi64")], _scatters(module)
    module = module_for(loss, (table, jax.ShapeDtypeStruct((9, HUGE[1]), jnp.int32)), "cpu")
    assert _scatters(module) == [(f"{HUGE[0]}x{HUGE[1]}xf32", f"9x{HUGE[1]}x1xi32")], _scatters(module)


def test_int64_linear_offsets_address_the_same_elements():
    # The int64 arithmetic on a table small enough to run, the dtype forced (a private rule).
    with enable_x64(True):
        rng = np.random.default_rng(4)
        data = rng.standard_normal((3, 5, 6)).astype(np.float32)
        indices = make_indices((3, 20, 2), (5, 6), np.int64, seed=5) % np.array([5, 6])
        plan = plans.gather_nd_plan(data.shape, indices.shape, 1)
        out = jax.jit(lambda d, i: _cpu_linear.by_linear_index(d, i, plan, dtype=jnp.int64))(data, indices)
        np.testing.assert_array_equal(np.asarray(out), reference.gather_nd(data, indices, 1))


@pytest.mark.parametrize("n", [200, 333, 334])
def test_a_promise_of_few_indices_reads_negatives_and_checked_reports_a_broken_one(n):
    data = np.arange(50 * 3, dtype=np.float32).reshape(50, 3)
    indices = make_indices((n,), 50, np.int32, seed=n)
    fn = jax.jit(lambda d, i: jax_gather.gather(d, i, mode="promise_in_bounds"))
    np.testing.assert_array_equal(np.asarray(fn(data, indices)), reference.gather(data, indices, 0))
    indices[n // 2] = -51
    with pytest.raises(
        IndexError, match=rf"indices\[{n // 2}\] = -51 is out of bounds for axis 0 of size 50"
    ):
        jax_gather.checked(fn)(data, indices)


@needs_cpu_lowerings
@pytest.mark.parametrize("axis", [0, -1, None], ids=["elements axis 0", "elements last axis", "1-D data"])
def test_a_fill_of_zeroed_indices_is_numpys_differentiates_as_numpy_and_jaxs_checks_flag_no_read(
    axis, monkeypatch
):
    # Forced on any CPU: the fill of element rows as where _cpu_clamp's probe says the clamp
    # stops the vector loop (indices normalised, index 0 for each out of bounds).
    monkeypatch.setattr(_cpu, "clamp_stops_the_fill_loop", lambda *args: True)
    jax.clear_caches()
    rng = np.random.default_rng(11)
    shape, size = ((7,), 7) if axis is None else ((7, 20), 7) if axis == 0 else ((9, 20), 20)
    data = rng.standard_normal(shape).astype(np.float32)
    indices = make_wild_indices((9, 20), size, np.int32, 3)
    if axis is None:
        op = lambda d, i, mode="checked": jax_gather.gather(d, i, mode=mode, fill_value=-1.0)
        plan, ref = plans.gather_plan(shape, indices.shape, 0), reference.gather
    else:
        op = lambda d, i, mode="checked": jax_gather.gather_elements(d, i, axis, mode=mode, fill_value=-1.0)
        plan = plans.gather_elements_plan(shape, indices.shape, axis)
        ref = functools.partial(reference.gather_elements, axis=axis)
    ok, at = (indices >= -size) & (indices < size), np.where(indices < 0, indices + size, indices)
    rows, cols = np.nonzero(ok)
    weights = rng.standard_normal(indices.shape).astype(np.float32)
    expected = np.zeros_like(data)
    np.add.at(expected, {None: at[ok], 0: (at[ok], cols), -1: (rows, at[ok])}[axis], weights[ok])
    for mode in (Mode.CHECKED, Mode.FILL):
        assert _cpu.gather_lowering(plan, shape, np.float32, indices, mode)[1]  # zeroed
        fn = functools.partial(op, mode=mode.value)
        np.testing.assert_array_equal(jax.jit(fn)(data, indices), ref(data, indices, mode="fill", fill=-1.0))
        grad = jax.jit(jax.grad(lambda d, i: (fn(d, i) * weights).sum()))(data, indices)
        np.testing.assert_allclose(grad, expected, rtol=1e-6)
    # Every read in bounds: JAX's own checks flag none in "fill"; in "checked" the library's
    # check is the error a user sees.
    checkify.checkify(jax.jit(functools.partial(op, mode="fill")), errors=checkify.all_checks)(data, indices)[
        0
    ].throw()
    bad = tuple(np.argwhere(~ok)[0])
    message = rf"{plan.op_name}: indices\[{bad[0]}, {bad[1]}\] = {indices[bad]} is out of bounds"
    for errors in (checkify.user_checks, checkify.all_checks):
        with pytest.raises(IndexError, match=message):
            jax_gather.checked(jax.jit(op), errors=errors)(data, indices)
