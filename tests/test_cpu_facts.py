"""Canaries: the facts about XLA:CPU and JAX's CPU runtime that each CPU lowering rests on.

Each test checks one fact by the structure of a compiled program or by dispatch behaviour, never
by time. When one fails after a JAX upgrade, the lowering it names may no longer pay: time it
against the library without it (``python benchmarks/lowering_choices.py --only <name>``) and
delete it if it does not (docs/design.md says how). The facts are about the programs XLA
compiles for this machine's CPU; they were checked on x86-64 with AVX-512, and with what XLA
emits for CPUs without it (``XLA_FLAGS=--xla_cpu_max_isa=AVX2``, and ``SSE4_2``), where a fact
of AVX-512 is asked of the CPU at hand and its canary says which.
"""

import dataclasses
import functools
import glob
import itertools
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

import jax_gather
from jax_gather import (
    _cpu,
    _cpu_clamp,
    _cpu_client,
    _cpu_columns,
    _cpu_fills,
    _cpu_linear,
    _cpu_rows,
    _cpu_site,
    _cpu_split,
    _eager,
    _fill,
    _fill_pin,
    _lowering,
    _traced_bounds,
    ops,
    plans,
)
from jax_gather._arguments import Mode
from jax_gather.bench import grid, peers
from tests import ops_table, reference
from tests.compat import enable_x64, jax_gathers

CPU = jax.devices("cpu")[0]
needs_cpu_lowerings = pytest.mark.skipif(
    not _cpu.PLATFORM_DEPENDENT_PRUNES, reason="the CPU lowerings need JAX 0.7.0"
)
FP4 = ml_dtypes.float4_e2m1fn
# The library's question of this CPU, kept before a fixture answers it for the test's sake.
SCALAR_COLUMN_PAD = _cpu_fills.xla_scalarises_the_column_pad


def _on_cpu(*arrays):
    return [jax.device_put(a, CPU) for a in arrays]


# XLA:CPU fuses, counts flops (its cost analysis) and splits loops into tasks in its HLO passes,
# before LLVM's and whatever LLVM's optimisation level: the facts read off the optimised HLO or
# its cost compile with LLVM's passes off, the same text and counts as the program a call
# compiles (test_the_facts_of_the_hlo_are_those_of_the_programs_calls_compile) in 0.7 of the
# time (40 against 55 ms a program, over 375 of the facts' fills on the Zen 3).
HLO_ONLY = {"xla_backend_optimization_level": 0}


def _hlo_compiled(lowered):
    """``lowered`` compiled for the facts of its optimised HLO and its cost analysis alone: as a
    call compiles it where LLVM's level 0 leaves a call its JIT cannot link (the converts of
    float8 for a CPU without F16C, XLA_FLAGS=--xla_cpu_max_isa=SSE4_2)."""
    try:
        return lowered.compile(compiler_options=HLO_ONLY)
    except RuntimeError as error:  # JAX's: "Failed to materialize symbols"
        if "materialize" not in str(error):
            raise
        return lowered.compile()


def _compiled_text(fn, *args) -> str:
    return _hlo_compiled(jax.jit(fn).lower(*_on_cpu(*args))).as_text()


def _kernel_irs(fn, *args) -> list[str]:
    """The LLVM IR, after LLVM's optimisations, of each kernel XLA:CPU compiles for ``fn``."""
    irs = _cpu_client.kernel_irs(jax.jit(fn).lower(*_on_cpu(*args)))
    assert irs, "XLA:CPU dumped no LLVM IR: how does this JAX dump it?"
    return irs


def _optimized_ir(fn, *args) -> str:
    """The LLVM IR of all the kernels XLA:CPU compiles for ``fn``."""
    return "".join(_kernel_irs(fn, *args))


def test_the_facts_of_the_hlo_are_those_of_the_programs_calls_compile():
    # Why _hlo_compiled may stand for a call's compile: programs of every grid op, of dtypes
    # selected as they are, through float32 and as bytes, split into tasks and not, a gradient
    # and the and-ed tuple mask (tuple_mask_by_and) have the same optimised HLO and cost with
    # LLVM's passes off; and the library's own reading of a split (_cpu_split.splits_a_loop, from
    # the program as a call compiles it) is the text's.
    dtypes = itertools.cycle(["float32", "bfloat16", "int8", "int4", "float8_e4m3fn"])
    sizes = itertools.cycle([(2, 80), (16, 8192)])
    cells = [grid.Cell(op, next(dtypes), *next(sizes)) for op in grid.OPS]
    programs = [(grid.ours_call(c, m), *grid.make_inputs(c)) for c in cells for m in grid.MODES]
    data, pairs = np.zeros((64, 64, 3), ml_dtypes.float8_e5m2), make_tuples(8192)
    programs += [
        (lambda d, i: jax_gather.gather_nd(d, i, mode="fill"), data, pairs),
        (jax.grad(lambda d, i: jax_gather.gather(d, i).sum()), np.ones((4096, 16), np.float32), pairs[:, 0]),
    ]
    splits = []
    for fn, *args in programs:
        lowered = jax.jit(fn).lower(*_on_cpu(*args))
        called, facts = lowered.compile(), _hlo_compiled(lowered)
        assert facts.as_text() == called.as_text()
        assert facts.cost_analysis() == called.cost_analysis()
        splits.append(_cpu_split.splits_a_loop(jax.jit(fn), *_on_cpu(*args)))
        assert splits[-1] == ("outer_dimension_partitions" in facts.as_text())
    assert any(splits) == _cpu_client.xla_splits_loops() and not all(splits)


def _vector_types(ir: str) -> set[str]:
    return set(re.findall(r"<\d+ x \w+>", ir))


def _direct(plan_fn, attribute):
    """The generic lowering's gather of in-bounds indices, for plain (non-GatherND) indices."""

    def f(d, i):
        plan = plan_fn(d.shape, i.shape, attribute)
        return _lowering.direct(d, i if plan.tuple_indices else i[..., None], plan)

    return f


# ---- short_rows_in_bytes -------------------------------------------------------------------------


def test_the_ir_the_facts_read_is_dumped_without_the_emitters_mlir():
    # Why kernel_irs asks for the LLVM IR alone: XLA:CPU 0.11 and 0.12 print each emitter's
    # MLIR, where asked to, on threads that race, and can abort the process (_cpu_client).
    lowered = _cpu_client.lowered_for_cpu(lambda d, i: d[i], ((64, 64), jnp.float32), ((100,), jnp.int32))
    for extra in _cpu_client.IR_DUMP_OPTIONS:
        with tempfile.TemporaryDirectory() as tmp:
            try:
                lowered.compile(compiler_options={"xla_dump_to": tmp, **extra})
            except Exception:  # an option this JAX does not know
                continue
            files = os.listdir(tmp)
            break
    assert any(f.endswith("ir-with-opt.ll") for f in files), files
    assert not any(f.endswith(".mlir") for f in files), files


@pytest.mark.parametrize("dtype", [np.float32, np.int8])
def test_xla_copies_short_rows_with_no_vector_instruction(dtype):
    ids = np.zeros(500, np.int32)
    for width in (16, 32, 64):
        ir = _optimized_ir(_direct(plans.gather_plan, 0), np.zeros((1000, width), dtype), ids)
        assert not _vector_types(ir), (
            f"XLA:CPU now vectorises rows of {width}: is short_rows_in_bytes needed?"
        )
    # The boundary of SHORT_ROWS: from 80 elements on XLA's own loop is vectorised.
    assert _vector_types(_optimized_ir(_direct(plans.gather_plan, 0), np.zeros((1000, 80), dtype), ids))


@needs_cpu_lowerings
def test_rows_in_bytes_are_chosen_where_xla_copies_them_with_vector_instructions():
    # Through JAX 0.10 it does (x86-64 with AVX-512 and with AVX2); from JAX 0.11 it does not,
    # and the lowering is left out. The library's program is vectorised exactly where it says.
    gather = lambda d, i: jax_gather.gather(d, i, mode="promise_in_bounds")
    data, ids = np.zeros((1000, 32), np.float32), np.zeros(_cpu_rows.SHORT_ROWS_MIN_BYTES // 128, np.int32)
    vectorised = _cpu_rows.xla_vectorises_rows_in_units()
    assert bool(_vector_types(_optimized_ir(gather, data, ids))) == vectorised
    plan = plans.gather_plan(data.shape, ids.shape, 0)
    assert ("short_rows_in_bytes" in _cpu.lowering(plan, data.shape, data.dtype).names) == vectorised


# ---- rows_pinned_by_a_clamp ----------------------------------------------------------------------

BF16 = ml_dtypes.bfloat16
VECTOR_OF_16_BITS = re.compile(r"<\d+ x i16>")


def _bfloat16_fill(d, i):
    return jax_gather.gather(d, i, mode="fill")


@needs_cpu_lowerings
@pytest.mark.parametrize("width", [32, 48])
def test_a_fill_of_bfloat16_rows_is_vectorised_with_the_clamp_pin_where_the_library_says(width):
    # Why rows_pinned_by_a_clamp: the select of bfloat16 rows pinned by an exclusive or is a loop
    # LLVM unrolls into scalar moves; pinned by a clamp, from 40 elements (x86-64 with AVX-512,
    # AVX2 and SSE4_2; JAX 0.10 to 0.12), one it vectorises. The library's program is vectorised
    # exactly where the fact holds, and without the clamp it is not.
    data, ids = np.zeros((1000, width), BF16), np.zeros(1000, np.int32)
    plan = plans.gather_plan(data.shape, ids.shape, 0)
    fact = _cpu_fills.xla_vectorises_rows_clamped(np.dtype(BF16), (width,))
    assert ("rows_pinned_by_a_clamp" in _cpu.lowering(plan, data.shape, data.dtype).names) == fact
    assert bool(VECTOR_OF_16_BITS.search(_optimized_ir(_bfloat16_fill, data, ids))) == fact
    with _cpu.without("rows_pinned_by_a_clamp"):
        assert not VECTOR_OF_16_BITS.search(_optimized_ir(_bfloat16_fill, data, ids)), (
            f"XLA:CPU now vectorises the exclusive-or pin's rows of {width}: is the clamp needed?"
        )


@needs_cpu_lowerings
@pytest.mark.parametrize("width", [32, 64])
def test_a_fill_of_bfloat16_rows_reads_them_whole_where_xla_vectorises_its_select(width):
    # Why a fill whose select of pinned rows XLA vectorises takes no short rows in bytes: that
    # loop reads the rows as they are, and in bytes the fill measured slower. The probe's
    # two-row lookup answers for the library's program (rows of 60-64 vectorised with the
    # exclusive or, 16-58 not: x86-64 with AVX-512, JAX 0.10), and the choice follows it.
    data, ids = np.zeros((1000, width), BF16), np.zeros(_cpu_rows.SHORT_ROWS_MIN_BYTES // width, np.int32)
    plan = plans.gather_plan(data.shape, ids.shape, 0)
    fact = _cpu_fills.xla_vectorises_pinned_rows(np.dtype(BF16), (width,))
    whole = fact or _cpu_fills.xla_vectorises_rows_clamped(np.dtype(BF16), (width,))
    in_bytes = _cpu_rows.xla_vectorises_rows_in_units() and not whole
    assert ("short_rows_in_bytes" in _cpu.lowering(plan, data.shape, data.dtype).names) == in_bytes
    with _cpu.without("short_rows_in_bytes", "rows_pinned_by_a_clamp"):
        assert bool(VECTOR_OF_16_BITS.search(_optimized_ir(_bfloat16_fill, data, ids))) == fact


@needs_cpu_lowerings
def test_the_clamp_pin_counts_as_the_exclusive_or_in_xlas_cost_analysis(bits_pinned_on_any_jax):
    # Why the clamp changes no other choice: XLA counts it as one op an element, as the exclusive
    # or, and its upper bound, the complement of one zero for all indices, once, so the
    # program's flops (its thread, its split into tasks) stay within a flop of what they were.
    data, ids = np.zeros((1000, 48), BF16), np.zeros(1000, np.int32)
    counted = lambda: _flops(jax.jit(_bfloat16_fill).lower(*_on_cpu(data, ids)))
    clamped = counted()
    with _cpu.without("rows_pinned_by_a_clamp"):
        assert counted() + 1 == clamped


# ---- fill_pinned_instead_of_rows -----------------------------------------------------------------

# bfloat16 bit patterns a move through float32 changes (signalling NaNs, subnormals; a NaN's
# payload), and a plain number.
CHANGED_BY_FLOAT32 = np.array([0x7F81, 0xFF81, 0x0001, 0x8001, 0x7FA5, 0x3F80], np.uint16)


@needs_cpu_lowerings
def test_xla_keeps_the_bits_of_bfloat16_rows_through_a_pinned_fill_where_the_library_says(
    fill_pin_on_any_jax,
):
    # Why fill_pinned_instead_of_rows: where XLA:CPU selects bfloat16 as it is but moves its
    # elements through float32 (JAX 0.11 and later), jnp's "fill", a select against a constant,
    # quiets signalling NaNs and flushes subnormals of rows (through 0.12.0; 0.12.1 quiets a
    # constant signalling NaN given as the fill), and the select against a pinned fill keeps
    # every bit. The one-program probe (_fill_pin.pins_the_fill) answers for the library's
    # programs over tables, widths and counts it does not try. (Where XLA selects bfloat16 in
    # float32, JAX 0.10, the library gathers bits before a pinned select and the fact is not
    # asked: there jnp's program counts a conversion of the whole table.)
    rng, snan = np.random.default_rng(5), CHANGED_BY_FLOAT32[:1].view(BF16)[0]
    ours = lambda d, i: jax_gather.gather(d, i, mode="fill", fill_value=snan)
    theirs = lambda d, i: jnp.take(d, i, 0, mode="fill", fill_value=snan)
    pinned_keeps, jnp_keeps = True, True
    sizes = [*itertools.product((2, 5, 17, 33, 100), (7, 1000)), (40, 7), (64, 7)]  # no vector row pin
    for rows, (width, n) in itertools.product((3, 4096), sizes):
        data = np.resize(np.roll(CHANGED_BY_FLOAT32, width), (rows, width)).view(BF16)
        ids = rng.integers(-rows - 1, rows + 1, n).astype(np.int32)
        plan = plans.gather_plan(data.shape, ids.shape, 0)
        assert "fill_pinned_instead_of_rows" in _cpu.lowering(plan, data.shape, data.dtype).names
        expected = reference.gather(data, ids, 0, mode="fill", fill=snan).view(np.uint16)
        same = lambda out: bool((np.asarray(out).view(np.uint16) == expected).all())
        pinned_keeps &= same(jax.jit(ours)(*_on_cpu(data, ids)))
        jnp_keeps &= same(jax.jit(theirs)(*_on_cpu(data, ids)))
    fact = _fill_pin.pins_the_fill(np.dtype(BF16))
    assert pinned_keeps or not fact  # where the library pins the fill, its programs keep every bit
    assert not (fact and jnp_keeps), "jnp's select keeps every bit: is a pin still needed?"


@pytest.mark.parametrize(
    "shape", [(1, 1), (7, 1), (33, 1), (1000, 1), (4096, 1), (16384, 1), (5, 3, 1), (64, 2, 1)], ids=str
)
def test_xla_keeps_the_bits_of_bfloat16_gathered_along_an_axis_of_one_element_once_each(shape):
    # Why _lowering.fill_pin pins no element where each index after batch dims reads an element
    # of its own along an axis of one element (GatherElements of (n, 1) along it): XLA:CPU
    # selects them in vector code, every bit kept (JAX 0.10 and 0.12, where a pin of each element
    # took the loop past one flop a byte, which XLA split: 3-9x jnp's time from 3000 elements).
    # Read more than once each (a broadcast) they lose bits: there the pin stays.
    data = np.resize(np.roll(CHANGED_BY_FLOAT32, shape[0]), shape).view(BF16)
    ids = np.random.default_rng(shape[0]).integers(-2, 2, shape).astype(np.int32)  # half in bounds
    fill = np.asarray(np.nan, BF16)
    ours = jax.jit(lambda d, i: jax_gather.gather_elements(d, i, -1, mode="fill"))
    expected = reference.gather_elements(data, ids, -1, mode="fill", fill=fill).view(np.uint16)
    assert (np.asarray(ours(*_on_cpu(data, ids))).view(np.uint16) == expected).all()
    jnps = jax.jit(lambda d, i: jnp.take_along_axis(d, i, -1, mode="fill", fill_value=np.nan))
    # Not an element more (a fill pinned for elements makes one zero for all: counted once).
    assert _flops(ours.lower(*_on_cpu(data, ids))) <= _flops(jnps.lower(*_on_cpu(data, ids))) + ONE_ZERO_FLOPS


def test_a_fill_pinned_for_elements_splits_no_loop_the_generic_select_keeps_whole(element_pin_on_any_cpu):
    # Why fill_pinned_for_elements waits for 512 KiB of its loop's data, output and indices: the
    # pin's 5 flops took GatherElements of 1024 x 4 bfloat16 elements along axis 0 of 4096 x 4
    # (57344 flops and bytes in the generic loop) past the count at which XLA:CPU splits it
    # (2.2-5.1x jnp's time, AMD EPYC with AVX2). Over the grid's shapes about that bound, where
    # the pin is chosen the loop is split only where the generic select's is.
    cells = [
        ("gather_elements", (4096, w), (n // w, w), 0) for w in (1, 4, 16, 64) for n in (4096, 65536, 131072)
    ] + [("gather_elements", (n, 1), (n, 1), 1) for n in (4096, 65535, 65536)]
    cells += [("gather_nd", (64, 64), (n, 2), 0) for n in (4096, 65536, 90000)]
    chosen = 0
    for op, shape, index_shape, attribute in cells:
        data, ids = np.zeros(shape, BF16), np.zeros(index_shape, np.int32)
        plan = ops_table.OPS[op].plan(shape, index_shape, attribute)
        if "fill_pinned_for_elements" not in _cpu.lowering(plan, shape, BF16).names:
            continue
        chosen += 1
        fn = lambda d, i: getattr(jax_gather, op)(d, i, attribute, mode="fill")
        with _cpu.without("fill_pinned_for_elements"):
            generic = _split_into_tasks(fn, data, ids)
        assert generic or not _split_into_tasks(fn, data, ids), (op, shape, index_shape)
    assert chosen >= 5


# What XLA counts for the one zero of a pinned fill (its or, abs and shift, and the exclusive or
# of the fill's bits), once whatever the output's size.
ONE_ZERO_FLOPS = 5


@pytest.mark.parametrize(
    "op, shape, index_shape, attribute",
    [
        # Where the pin is chosen: from 512 KiB of the loop's data, output and indices.
        ("gather_elements", (65536, 1), (65536, 1), 1),  # an element of its own each
        ("gather_elements", (256, 256), (256, 256), 1),
        ("gather_nd", (64, 64), (90000, 2), 0),
        ("gather", (1, 65536), (65536,), 1),  # one row's columns
    ],
    ids=str,
)
def test_xla_selects_bfloat16_elements_in_bfloat_vectors_unless_their_fill_is_pinned_where_the_library_says(
    op, shape, index_shape, attribute, monkeypatch
):
    # Why fill_pinned_for_elements: LLVM folds the bitcasts around the select of bfloat16 bit
    # patterns into a select of bfloat vectors (JAX 0.10; from 0.11 XLA selects bfloat16 as it
    # is, the same vectors), which an x86-64 CPU without native bfloat16 vectors runs as a test
    # and branch per element (AMD EPYC with AVX2: GatherElements of (2**20, 1), 4.1x the time
    # against the pinned fill, 10x on JAX 0.12); against the pinned fill it selects 16-bit
    # integers. With AVX512_BF16 (AMD EPYC Zen 4) both are a masked blend, and no pin is taken.
    data, ids = np.zeros(shape, BF16), np.zeros(index_shape, np.int32)
    fn = lambda d, i: getattr(jax_gather, op)(d, i, attribute, mode="fill")
    fact = ELEMENT_PIN(np.dtype(BF16))
    plan = getattr(plans, f"{op}_plan")(shape, index_shape, attribute)
    assert ("fill_pinned_for_elements" in _cpu.lowering(plan, shape, BF16).names) == fact
    with _cpu.without("fill_pinned_for_elements"):
        generic_irs, generic_jumps = _kernel_irs(fn, data, ids), _conditional_jumps(fn, data, ids)
    monkeypatch.setattr(_cpu_fills, "xla_selects_bfloat_vectors_unless_pinned", lambda dtype: True)
    _cpu._choose.cache_clear()
    jax.clear_caches()
    pinned_irs, pinned_jumps = _kernel_irs(fn, data, ids), _conditional_jumps(fn, data, ids)
    monkeypatch.undo()
    _cpu._choose.cache_clear()
    jax.clear_caches()
    bfloat_select = lambda irs: any(_cpu_fills.BFLOAT_VECTOR_SELECT.search(ir) for ir in irs)
    # A branch per element: 10-28 jumps more than the pinned select's 2-3 (AVX2, AVX-512 without
    # BF16); with AVX512_BF16 as many.
    branches = generic_jumps >= pinned_jumps + _cpu_fills.BRANCHES_PER_ELEMENT
    reason = bfloat_select(generic_irs) and not bfloat_select(pinned_irs) and branches
    if fact:
        assert reason
    # Where the CPU blends bfloat vectors, no shape's select branches. (Without them, SSE4_2,
    # the probe's 64 x 33 has no bfloat vectors; a column of (n, 1) has, and is not pinned.)
    if not fact and bfloat_select(generic_irs) and "SSE4_2" not in os.environ.get("XLA_FLAGS", ""):
        assert not branches


# The library's question of this CPU, kept before a fixture answers it for the test's sake.
ELEMENT_PIN = _cpu_fills.xla_selects_bfloat_vectors_unless_pinned


def _conditional_jumps(fn, *args) -> int:
    """The conditional jumps in the machine code XLA:CPU compiles for ``fn``, objdump's."""
    if shutil.which("objdump") is None:
        pytest.skip("objdump (GNU binutils) disassembles the kernels")
    with tempfile.TemporaryDirectory() as tmp:
        options = {"xla_dump_to": tmp, "xla_dump_emitter_re": "llvm"}
        jax.jit(fn).lower(*_on_cpu(*args)).compile(compiler_options=options)
        objects = sorted(glob.glob(f"{tmp}/*.o"))
        assert objects, "XLA:CPU dumped no object file: how does this JAX dump them?"
        code = subprocess.run(["objdump", "-d", *objects], capture_output=True, text=True, check=True).stdout
    # each instruction: "  4f:\t0f 84 ...\tje     ..."; its mnemonic after the last tab
    mnemonics = [line.rsplit("\t", 1)[-1].split(" ", 1)[0] for line in code.splitlines() if "\t" in line]
    return sum(m.startswith("j") and m != "jmp" for m in mnemonics)


def test_the_library_counts_a_kernels_conditional_jumps_as_objdump_prints_them():
    # What xla_selects_bfloat_vectors_unless_pinned compares, one kernel at a time; without
    # objdump it knows none.
    fn = lambda d, i: jnp.take(d, i, axis=0, mode="fill", fill_value=-1)
    args = np.zeros((64, 33), np.float32), np.zeros(7, np.int32)
    counted = [
        k.conditional_jumps for k in _cpu_client.kernels(jax.jit(fn).lower(*_on_cpu(*args)), jumps=True)
    ]
    assert counted and all(c is not None for c in counted)
    assert sum(counted) == _conditional_jumps(fn, *args) > 0
    assert [k.conditional_jumps for k in _cpu_client.kernels(jax.jit(fn).lower(*_on_cpu(*args)))] == [
        None
    ] * len(counted)


# ---- tuple_mask_by_and ---------------------------------------------------------------------------


def _nd_fill(plan, tuple_mask):
    """GatherND's generic fill of ``plan`` with each tuple's flag formed by ``tuple_mask``."""

    def fill(d, i):
        ok = tuple_mask(_traced_bounds.in_bounds_mask(plan, i))
        return _lowering.gather_or_fill(d, i, ok, jnp.zeros((), d.dtype), plan, _lowering.GENERIC)

    return fill


REDUCED = functools.partial(jnp.all, axis=-1)


@needs_cpu_lowerings
def test_xla_counts_a_reduced_tuple_mask_twice_before_a_gather_of_slices():
    # Why tuple_mask_by_and: jnp.all over the components runs in a loop of its own before a
    # gather of slices, and XLA counts that mask twice (65 pairs of rows of 2: 1365 flops, to a
    # worker thread); their and runs in the gather's loop and counts what jnp's "fill" counts.
    data, ids = np.zeros((256, 256, 2), np.float32), np.zeros((65, 2), np.int32)
    plan = plans.gather_nd_plan(data.shape, ids.shape)
    flops = lambda fn: _flops(jax.jit(fn).lower(*_on_cpu(data, ids)))
    reduced, anded = _nd_fill(plan, REDUCED), _nd_fill(plan, _cpu_fills.all_components)
    jnp_fill = lambda d, i: d.at[i[:, 0], i[:, 1]].get(mode="fill", fill_value=0)
    assert flops(anded) == flops(jnp_fill) < _cpu_client.INLINE_FLOPS <= flops(reduced)
    assert len(_kernel_irs(reduced, data, ids)) == 2
    assert len(_kernel_irs(anded, data, ids)) == 1
    assert "tuple_mask_by_and" in _cpu.lowering(plan, data.shape, data.dtype).names


@needs_cpu_lowerings
@pytest.mark.parametrize("dtype", ["float8_e5m2", "float8_e4m3fn", "int4"])
def test_the_and_loop_count_bounds_xlas_split_of_a_select_of_bits_or_converted(monkeypatch, dtype):
    # Where the select works on bits or converts the type on the way, and_loop_splits counts 8
    # flops an element and 4 a tuple, above XLA's 3-4 and 1 a data element: it says the and-ed
    # loop splits wherever XLA splits it and keeps jnp's loops whole (counted lower, float8_e5m2
    # pairs of rows of 3 by 512 took the and-ed loop on JAX 0.12, split: 2.2-2.7x jnp's time).
    dtype = np.dtype(getattr(ml_dtypes, dtype))
    jnp_fill = lambda d, i: d.at[i[:, 0], i[:, 1]].get(mode="fill", fill_value=0)
    lib_fill = lambda d, i: jax_gather.gather_nd(d, i, mode="fill")
    monkeypatch.setattr(_cpu, "and_loop_splits", lambda *args: False)  # the and taken wherever it applies
    _cpu._choose.cache_clear()
    jax.clear_caches()
    try:
        for w, n in itertools.product((2, 3, 4, 8), (64, 512, 2048)):
            d, i = np.zeros((64, 64, w), dtype), np.zeros((n, 2), np.int32)
            plan = plans.gather_nd_plan(d.shape, i.shape)
            assert "tuple_mask_by_and" in _cpu.lowering(plan, d.shape, dtype).names
            said = _cpu_client.xla_splits_loops() and _cpu_split.and_loop_splits(plan, d.shape, dtype, 2 * n)
            anded, jnps = _split_into_tasks(lib_fill, d, i), _split_into_tasks(jnp_fill, d, i)
            assert said or not anded or jnps, (w, n)
    finally:
        _cpu._choose.cache_clear()
        jax.clear_caches()


@pytest.mark.parametrize(
    "dtype",
    [np.int8, np.float32, jnp.bfloat16, jnp.int4, ml_dtypes.int2, ml_dtypes.float8_e5m2],
    ids=lambda t: np.dtype(t).name,
)
def test_xla_splits_a_tuple_mask_loop_where_the_library_counts_it_so(monkeypatch, dtype):
    # Where tuple_mask_by_and stops (_cpu_split.and_loop_splits): its one loop counts more flops
    # than bytes where the reduced mask's loops (jnp's) count fewer, and XLA:CPU splits it into a
    # task per core (int8 pairs of rows of 2 by 2048: 1.5-2.4x jnp's time, the reduced 0.9); and
    # where the reduced mask's gather loop splits too (indexed_loop_splits), the fill reads index
    # vectors written out, whose gather's loop counts jnp's (int4 pairs of rows of 3 by 1024:
    # 1.3-2.5x in the split loop, 0.97-1.02 from written indices; float8 pairs of rows of 2-3 by
    # 512-4096: 1.3-2.9x and 0.63-0.99). The reduced loop's count is exact for a plain select; for
    # a pinned or converted one, and the and's, it may say so where XLA does not split it or
    # splits jnp's too. Every split they would add to jnp's they say, the loops read from written
    # indices split where jnp's do and nowhere else, but where each element is pinned, counted 3
    # flops more than jnp's (_cpu_split.written_loop_splits says those); on one core none.
    dtype = np.dtype(dtype)
    jnp_fill = lambda d, i: d.at[i[:, 0], i[:, 1]].get(mode="fill", fill_value=0)
    lib_fill = lambda d, i: jax_gather.gather_nd(d, i, mode="fill")
    plain = _cpu_split._select_flops(dtype) == (1, 0)
    cells = [(3, 1024)] + [(w, n) for w in (2, 3, 8) for n in (512, 2048, 8192, 16384, 32768)]
    inputs = {c: (np.zeros((64, 64, c[0]), dtype), np.zeros((c[1], 2), np.int32)) for c in cells}
    plans_ = {c: plans.gather_nd_plan(*(x.shape for x in inputs[c])) for c in cells}
    chosen = {c: _cpu.lowering(plans_[c], (64, 64, c[0]), dtype).names for c in cells}
    counted = lambda fact, c: (
        _cpu_client.xla_splits_loops() and fact(plans_[c], inputs[c][0].shape, dtype, 2 * c[1])
    )
    jnps = {c: _split_into_tasks(jnp_fill, *inputs[c]) for c in cells}
    with _cpu.without("tuple_mask_by_and", "nd_fill_from_written_indices"):
        reduced = {c: _split_into_tasks(lib_fill, *inputs[c]) for c in cells}
    try:
        for fact in ("and_loop_splits", "indexed_loop_splits"):  # written indices wherever they apply
            monkeypatch.setattr(_cpu, fact, lambda *args: True)
        _cpu._choose.cache_clear()
        jax.clear_caches()
        for c in (c for c in cells if reduced[c]):  # where the generic gather's loop splits
            written = _cpu.lowering(plans_[c], inputs[c][0].shape, dtype).names
            assert "nd_fill_from_written_indices" in written or not _cpu_client.xla_splits_loops()
            assert (
                not _split_into_tasks(lib_fill, *inputs[c])
                or jnps[c]
                or counted(_cpu_split.written_loop_splits, c)
            ), c
        monkeypatch.setattr(_cpu, "and_loop_splits", lambda *args: False)  # the and taken wherever it applies
        _cpu._choose.cache_clear()
        jax.clear_caches()
        for c in cells:
            said, said_reduced = (
                counted(_cpu_split.and_loop_splits, c),
                counted(_cpu_split.indexed_loop_splits, c),
            )
            assert "tuple_mask_by_and" in _cpu.lowering(plans_[c], inputs[c][0].shape, dtype).names
            anded = _split_into_tasks(lib_fill, *inputs[c])
            assert said or not anded or jnps[c], c
            assert said == (anded and not jnps[c]) or not plain, c
            assert said_reduced or not reduced[c] or jnps[c] or counted(_cpu_split.written_loop_splits, c), c
            assert said_reduced == (reduced[c] and not jnps[c]) or not plain, c
            assert ("tuple_mask_by_and" in chosen[c]) == (not said), c
            assert ("nd_fill_from_written_indices" in chosen[c]) == (said and said_reduced), c
    finally:
        _cpu._choose.cache_clear()
        jax.clear_caches()


@needs_cpu_lowerings
def test_xla_fuses_a_reduced_tuple_mask_into_a_gather_of_elements():
    # Why not for elements: there the reduction runs in the gather's one loop, counted once, and
    # LLVM vectorises that loop at least where it vectorises the and's (AVX2 and AVX-512 do, and
    # not the and's: 1.4x its time over 8192-100000 pairs; SSE4_2 neither).
    data, ids = np.zeros((1024, 1024), np.float32), np.zeros((4096, 2), np.int32)
    plan = plans.gather_nd_plan(data.shape, ids.shape)
    flops = lambda fn: _flops(jax.jit(fn).lower(*_on_cpu(data, ids)))
    reduced, anded = _nd_fill(plan, REDUCED), _nd_fill(plan, _cpu_fills.all_components)
    assert flops(reduced) == flops(anded)
    assert len(_kernel_irs(reduced, data, ids)) == len(_kernel_irs(anded, data, ids)) == 1
    vectorised = lambda fn: bool(re.search(r"<\d+ x float>", _optimized_ir(fn, data, ids)))
    assert vectorised(reduced) or not vectorised(anded)
    assert "tuple_mask_by_and" not in _cpu.lowering(plan, data.shape, data.dtype).names


# ---- short_lookup_fill_from_pad ------------------------------------------------------------------


def _ready_on_return(flops: int) -> bool:
    """Whether a program of ``flops`` flops (by XLA's cost analysis) that copies 64 MiB has
    finished when the call returns: it ran on the calling thread, not on a worker thread (which
    the copy keeps busy for milliseconds after the call returns)."""
    rows = jax.device_put(jnp.zeros((64, 1 << 18), jnp.float32), CPU)
    ids = jax.device_put(jnp.arange(64, dtype=jnp.int32)[::-1], CPU)
    base = _flops(jax.jit(_copy_and_add).lower(rows, ids, jnp.zeros(1, jnp.float32))) - 1
    x = jax.device_put(jnp.zeros(int(flops - base), jnp.float32), CPU)
    lowered = jax.jit(_copy_and_add).lower(rows, ids, x)
    assert _flops(lowered) == flops
    program = lowered.compile()
    program(rows, ids, x)[0].block_until_ready()
    ready = []
    for _ in range(3):
        out = program(rows, ids, x)
        ready.append(out[0].is_ready())
        out[0].block_until_ready()
        time.sleep(0.01)
    return all(ready)


def _copy_and_add(rows, ids, x):
    return rows.at[ids].get(mode="promise_in_bounds"), x + 1.0  # the gather counts no flops


def _flops(lowered) -> float:
    cost = _hlo_compiled(lowered).cost_analysis()
    return (cost[0] if isinstance(cost, list) else cost).get("flops", 0.0)  # none counted: absent


@pytest.mark.skipif(jax.config.read("jax_cpu_enable_async_dispatch") is False, reason="synchronous dispatch")
def test_the_cpu_client_runs_programs_under_inline_flops_on_the_calling_thread():
    assert _ready_on_return(_cpu_client.INLINE_FLOPS - 1)
    assert not _ready_on_return(_cpu_client.INLINE_FLOPS), (
        "JAX's CPU client changed where it runs short programs"
    )


@needs_cpu_lowerings
@pytest.mark.parametrize("mode", ["checked", "fill"])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_a_short_lookup_stays_under_inline_flops(mode, index_dtype):
    with enable_x64(index_dtype == np.int64):
        data, ids = np.zeros((50000, 512), np.float32), np.zeros(_cpu.SHORT_LOOKUP_INDICES, index_dtype)
        lookup = jax.jit(lambda d, i: jax_gather.gather(d, i, 0, mode=mode))
        assert _flops(lookup.lower(*_on_cpu(data, ids))) < _cpu_client.INLINE_FLOPS


@needs_cpu_lowerings
def test_a_column_lookup_read_from_a_pad_runs_on_the_calling_thread_and_its_select_in_tasks():
    # Why short_lookup_fill_from_pad stops at SHORT_LOOKUP_MAX_LINES of cache lines: read from a
    # pad, the lookup counts under INLINE_FLOPS and runs on the calling thread, one core; with the
    # select it counts more and runs on a worker thread, its loop split into a task per core where
    # XLA splits loops (two cores or more; on one, it stops sooner: SHORT_LOOKUP_MAX_LINES_ONE_CORE).
    data, ids = np.zeros((4096, 4096), np.float32), np.zeros(_cpu.SHORT_LOOKUP_INDICES, np.int32)
    plan = plans.gather_plan(data.shape, ids.shape, 1)
    assert _cpu_site.runs_and_lines(plan, data.shape, data.dtype)[1] > _cpu.SHORT_LOOKUP_MAX_LINES

    def padded(d, i):
        slots = _traced_bounds.index_vectors(plan, i, clip=False, past_end=True)
        return _cpu_fills.read_fill_from_pad(d, slots, jnp.asarray(np.nan, d.dtype), i, plan)

    selected = jax.jit(lambda d, i: jax_gather.gather(d, i, 1)).lower(*_on_cpu(data, ids))
    assert _flops(selected) >= _cpu_client.INLINE_FLOPS
    assert (
        "outer_dimension_partitions" in _hlo_compiled(selected).as_text()
    ) == _cpu_client.xla_splits_loops()
    assert _flops(jax.jit(padded).lower(*_on_cpu(data, ids))) < _cpu_client.INLINE_FLOPS


def _one_slice_lookup(op: str, shape: tuple, indices_shape: tuple):
    """The library's call of ``op``, jnp's "fill" of it and its plan."""
    fill = lambda d, index: d.at[index].get(mode="fill")
    if op == "GatherND":
        plan = plans.gather_nd_plan(shape, indices_shape)
        return lambda d, i: jax_gather.gather_nd(d, i), lambda d, i: fill(d, i[:, 0]), plan
    if op == "batched":
        ours = lambda d, i: jax_gather.gather(d, i, 1, batch_dims=1)
        return ours, jax.vmap(fill), plans.gather_plan(shape, indices_shape, 1, 1)
    axis = 1 if op == "column" else 0
    jnps = lambda d, i: fill(d, (slice(None),) * axis + (i,))
    return lambda d, i: jax_gather.gather(d, i, axis), jnps, plans.gather_plan(shape, indices_shape, axis)


ONE_SLICE_LOOKUPS = [  # about SPLIT_ANYWAY_BYTES of the pad's loop
    ("GatherND", (436, 1199), (1, 1), np.bool_),  # 523967 bytes: no split
    ("GatherND", (437, 1199), (1, 1), np.bool_),  # 525166
    ("GatherND", (437, 1199), (2, 1), np.bool_),  # jnp's gather counts all of data too
    ("Gather", (16, 65535), (1,), np.float32),
    ("Gather", (16, 65536), (1,), np.float32),  # jnp's slice and output: 512 KiB and its index
    ("column", (1199, 437), (1,), np.bool_),
    ("batched", (1, 437, 1199), (1, 1), np.bool_),
]


@needs_cpu_lowerings
@pytest.mark.parametrize("op, shape, indices_shape, dtype", ONE_SLICE_LOOKUPS, ids=str)
def test_xla_splits_the_pad_loop_of_one_slice_alone_exactly_where_counted(
    monkeypatch, op, shape, indices_shape, dtype
):
    # Why short_lookup_fill_from_pad leaves one slice from SPLIT_ANYWAY_BYTES of data to jnp's
    # program: XLA counts all of the padded data among the bytes of the pad's loop, and of jnp's
    # gather of one index tuple (a dynamic slice) only the slice's; of two, all of data's too.
    ours, jnps, plan = _one_slice_lookup(op, shape, indices_shape)
    data, indices = np.zeros(shape, dtype), np.zeros(indices_shape, np.int32)
    monkeypatch.setattr(_cpu, "pad_loop_splits_alone", lambda *counted: False)
    jax.clear_caches()  # no program traced with the rule in place, nor one without it after
    _cpu._choose.cache_clear()
    try:
        padded = _compiled_text(ours, data, indices)
    finally:
        jax.clear_caches()
        _cpu._choose.cache_clear()
    assert " pad(" in padded and "select" not in padded
    split = lambda text: "outer_dimension_partitions" in text
    alone = split(padded) and not split(_compiled_text(jnps, data, indices))
    counted = _cpu_site.Site(plan, shape, np.dtype(dtype), False, 1).counted
    assert alone == (_cpu_client.xla_splits_loops() and _cpu_split.pad_loop_splits_alone(*counted))


@needs_cpu_lowerings
def test_rows_in_bytes_count_flops_over_all_of_data():
    # Why short lookups keep their rows as they are: in bytes the program leaves the calling thread.
    data, idx = np.zeros((1000, 64), np.float32), np.zeros((64, 1), np.int32)
    plan = plans.gather_plan(data.shape, (64,), 0)
    in_bytes = functools.partial(_cpu_rows.rows_in_units, plan=plan, unit=jnp.uint8)
    assert _flops(jax.jit(in_bytes).lower(*_on_cpu(data, idx))) >= _cpu_client.INLINE_FLOPS
    direct = functools.partial(_lowering.direct, plan=plan)
    assert _flops(jax.jit(direct).lower(*_on_cpu(data, idx))) < _cpu_client.INLINE_FLOPS


@needs_cpu_lowerings
@pytest.mark.parametrize("dtype", [np.int32, np.int8])
def test_xla_makes_a_gather_of_one_slice_a_broadcast_and_fuses_the_bitcasts_from_bytes_into_it(dtype):
    # Why one slice's short rows are read in bytes only from more output without a fill: jnp's
    # program is the broadcast alone; in bytes, XLA puts each element back together in it.
    data, idx = np.zeros((1, 35), dtype), np.zeros((5170, 1), np.int32)
    plan = plans.gather_plan(data.shape, (5170,), 0)
    unit = jnp.uint4 if data.itemsize == 1 else jnp.uint8
    in_bytes = _compiled_text(functools.partial(_cpu_rows.rows_in_units, plan=plan, unit=unit), data, idx)
    direct = _compiled_text(functools.partial(_lowering.direct, plan=plan), data, idx)
    for text in (in_bytes, direct):
        assert " gather(" not in text and " broadcast(" in text, text
    assert " shift-left(" in in_bytes and " shift-left(" not in direct, in_bytes
    two_rows = np.zeros((2, 35), dtype)  # a gather again
    assert " gather(" in _compiled_text(
        functools.partial(_lowering.direct, plan=plans.gather_plan((2, 35), (5170,), 0)), two_rows, idx
    )


# ---- NumPy arrays handed to the CPU client (jax_gather._cpu_client.aligned_for_cpu) -----------------


def _numpy_at(nbytes: int, offset: int) -> np.ndarray:
    """A float32 array of ``nbytes`` whose data starts ``offset`` bytes past a 64-byte boundary."""
    buffer = np.zeros(nbytes + 128, np.uint8)
    start = -buffer.ctypes.data % 64 + offset
    return buffer[start : start + nbytes].view(np.float32)


def test_the_cpu_client_aliases_numpy_arrays_aligned_to_cpu_alignment():
    aligned = _numpy_at(1 << 20, 0)
    assert np.shares_memory(np.asarray(jax.device_put(aligned, CPU)), aligned)
    misaligned = _numpy_at(1 << 20, 16)  # NumPy's own alignment
    assert not np.shares_memory(np.asarray(jax.device_put(misaligned, CPU)), misaligned)
    copy = _cpu_client.aligned_for_cpu(misaligned, True)
    if _cpu_client.CLIENT_COPIES_ON_A_WORKER_THREAD:  # where an aligned copy of ours pays
        assert copy.ctypes.data % _cpu_client.CPU_ALIGNMENT == 0 and np.array_equal(copy, misaligned)


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.int8])
def test_a_split_array_is_read_in_place_with_its_join_fused_into_the_gather(dtype, axis):
    # Why a prepared model's large unaligned inputs are split (_cpu_client.split_for_cpu): the
    # client aliases the aligned tail, and XLA reads the head and tail inside the gather's own
    # loop, with no concatenated copy of its own.
    array = _numpy_at(1 << 20, 16).view(dtype).reshape(-1, 256)
    array[...] = np.arange(array.size).reshape(array.shape) % 97
    head, tail = _cpu_client.split_for_cpu(array)
    assert head.nbytes == 48 and tail.ctypes.data % _cpu_client.CPU_ALIGNMENT == 0
    assert np.shares_memory(np.asarray(jax.device_put(tail, CPU)), tail)
    ids = np.array([3, 200, 0, 255], np.int32)
    gather = lambda h, t, i: jax_gather.gather(
        _cpu_client.joined(h, t, array.shape), i, axis, mode="promise_in_bounds"
    )
    np.testing.assert_array_equal(jax.jit(gather)(head, tail, ids), np.take(array, ids, axis))
    assert "concatenate" not in _entry_ops(_compiled_text(gather, head, tail, ids))


def test_the_cpu_client_copies_small_unaligned_arrays_on_the_calling_thread():
    # Ready as the call returns: copied on the calling thread. A large copy is handed over, so
    # it is not ready at least some of the time (on a busy machine it may finish first).
    def ready_on_return(nbytes: int) -> bool:
        array = _numpy_at(nbytes, 16)
        placed = jax.device_put(array, CPU)
        ready = placed.is_ready()
        placed.block_until_ready()
        return ready

    assert all(ready_on_return(_cpu_client.CPU_COPIED_INLINE - 64) for _ in range(10))
    large = sum(ready_on_return(64 << 20) for _ in range(10))
    if _cpu_client.CLIENT_COPIES_ON_A_WORKER_THREAD:  # through JAX 0.10
        assert large < 10, "the CPU client copies large arrays on the calling thread"
    else:  # and the library makes no aligned copy of its own
        assert large == 10, "the CPU client copies large arrays on a worker thread again"
        unaligned = _numpy_at(_cpu_client.CPU_COPIED_INLINE + 64, 16)
        assert _cpu_client.aligned_for_cpu(unaligned, True) is unaligned


# ---- nd_fill_in_two_loops ------------------------------------------------------------------------


@needs_cpu_lowerings
def test_xla_splits_the_one_loop_of_a_gather_nd_fill_where_its_cost_analysis_counts_it_so():
    # Why nd_fill_in_two_loops, and where (_cpu_split.nd_fill_loop_splits): XLA:CPU splits the fill's one
    # loop into a task per core wherever the count says so (exactly so over small data; over a
    # large table XLA splits more often than it says, where the lowering is not taken), in a
    # process on two cores or more; on one it splits none, and the lowering is not taken.
    fill = lambda d, i: jax_gather.gather_nd(d, i, mode="fill")
    splits = _cpu_client.xla_splits_loops()
    counted = lambda shape, n, dtype: (
        splits
        and _cpu_split.nd_fill_loop_splits(plans.gather_nd_plan(shape, (n, 2)), shape, np.dtype(dtype), 2 * n)
    )
    with _cpu.without("nd_fill_in_two_loops"):
        # int2 selected as it is; int4 and float4_e2m1fn converted to bytes on the way.
        for dtype in (jnp.bfloat16, jnp.float16, jnp.int8, jnp.float32, ml_dtypes.int2, jnp.int4, FP4):
            for shape in ((5, 5), (64, 64), (512, 512)):
                for n in (512, 1024, 2048, 4096):
                    data, ids = np.zeros(shape, dtype), np.zeros((n, 2), np.int32)
                    split = "outer_dimension_partitions" in _compiled_text(fill, data, ids)
                    said = counted(shape, n, dtype)
                    assert split == said if shape != (512, 512) else split or not said, (dtype, shape, n)
    data, ids = np.zeros((64, 64), jnp.bfloat16), np.zeros((4096, 2), np.int32)
    assert counted((64, 64), 4096, jnp.bfloat16) == splits
    chosen = _compiled_text(fill, data, ids)
    assert _entry_ops(chosen) == (["fusion", "fusion"] if splits else ["fusion"])
    assert "outer_dimension_partitions" not in chosen


@pytest.mark.parametrize(
    "dtype", [jnp.float32, jnp.bfloat16, jnp.int8, jnp.int4, FP4, ml_dtypes.int2, ml_dtypes.float8_e4m3fn]
)
def test_xla_splits_the_element_loop_of_jnps_gather_nd_fill_where_the_library_counts_it_so(dtype):
    # What nd_fill_in_two_loops asks of jnp's program for the types converted to bytes on the way:
    # where jnp's loop that gathers and selects splits too, the library's one split loop is faster.
    if _fill._xla_cpu_select(np.dtype(dtype)) == "not at all":  # float4_e2m1fn without F16C
        pytest.skip("XLA:CPU compiles no select of this type for this CPU: jnp's fill fails")
    jnps_fill = lambda d, i: d.at[i[:, 0], i[:, 1]].get(mode="fill")
    for shape in ((5, 5), (30, 30), (64, 64), (512, 512)):
        for n in (512, 1024, 2048, 3000, 4096, 8192):
            data, ids = np.zeros(shape, dtype), np.zeros((n, 2), np.int32)
            text = _compiled_text(jnps_fill, data, ids)
            (root,) = [line for line in text[text.index("ENTRY") :].splitlines() if "ROOT" in line]
            plan = plans.gather_nd_plan(shape, (n, 2))
            said = _cpu_split.jnp_splits_its_element_loop(plan, shape, np.dtype(dtype), 2 * n)
            assert ("outer_dimension_partitions" in root) == (said and _cpu_client.xla_splits_loops()), (
                shape,
                n,
            )


@pytest.mark.parametrize("dtype", [jnp.float8_e4m3fn, jnp.int4, jnp.bfloat16, jnp.int8])
def test_xla_splits_the_select_loop_of_jnps_gather_nd_fill_of_slices_where_the_library_counts_it_so(dtype):
    # What and_loop_splits asks of jnp's program: a table's convert counts a flop a byte, and from
    # tables of 10^4 float8 elements the and-ed loop splits where this one stays whole; a table
    # of one slice is XLA's broadcast, which reads no indices (int4 rows of 8 by 2048: whole).
    jnps_fill = lambda d, i: d.at[i[:, 0], i[:, 1]].get(mode="fill")
    for side, w, n in itertools.product((1, 30, 200), (2, 8, 32), (512, 2048, 8192)):
        data, ids = np.zeros((side, side, w), dtype), np.zeros((n, 2), np.int32)
        text = _compiled_text(jnps_fill, data, ids)
        (root,) = [line for line in text[text.index("ENTRY") :].splitlines() if "ROOT" in line]
        plan = plans.gather_nd_plan(data.shape, ids.shape)
        said = _cpu_split.jnp_splits_its_select_loop(plan, data.shape, np.dtype(dtype), 2 * n)
        split = "outer_dimension_partitions" in root
        assert split == (said and _cpu_client.xla_splits_loops()), (side, w, n)


needs_affinity = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="Linux's CPU affinity")


def _splits_a_costly_loop() -> bool:
    """Whether XLA:CPU splits a loop of 2**16 int32 multiply-adds into tasks."""
    return _split_into_tasks(lambda v: v * v + v, np.zeros(1 << 16, np.int32))


FACTS_OF_THE_IR = """
import sys, jax, numpy as np, jax.numpy as jnp
if len(sys.argv) > 1:  # every program kept in the persistent cache, however fast its compile
    jax.config.update("jax_compilation_cache_dir", sys.argv[1])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
from jax_gather import _cpu, _cpu_fills, _fill
print(_cpu.xla_widens_column_indices(), _cpu.xla_scalarises_the_column_pad(),
      _cpu.xla_vectorises_linear_indices(), _cpu.xla_vectorises_rows_in_units(),
      _cpu_fills.xla_selects_bfloat_vectors_unless_pinned(np.dtype(jnp.bfloat16)),
      _fill._xla_cpu_select(np.dtype(jnp.bfloat16)))
"""


def test_the_facts_of_the_ir_are_asked_of_xla_where_a_persistent_cache_holds_programs(tmp_path):
    # A probe loaded from JAX's persistent compilation cache is not compiled, and XLA dumps no
    # IR: the facts asked of it answered no in every process after the first (4 of these 6).
    run = lambda *cache: subprocess.run(
        [sys.executable, "-c", FACTS_OF_THE_IR, *cache], capture_output=True, text=True, timeout=300
    )
    without, first, second = run(), run(str(tmp_path)), run(str(tmp_path))
    assert without.returncode == first.returncode == second.returncode == 0, second.stderr[-3000:]
    assert without.stdout == first.stdout == second.stdout


def test_xla_splits_loops_where_the_process_may_run_on_two_cores_or_more():
    assert _splits_a_costly_loop() == _cpu_client.xla_splits_loops()


TWO_LOOPS_SELECTED = """
import numpy as np, jax, jax_gather
from jax_gather import _cpu, _cpu_client, plans
compiled = jax.jit(lambda v: v * v + v).lower(np.zeros(1 << 16, np.int32)).compile().as_text()
assert "outer_dimension_partitions" not in compiled, "XLA split a loop on one core"
plan = plans.gather_nd_plan((64, 64), (4096, 2))
names = _cpu.lowering(plan, (64, 64), np.dtype(np.int8)).names
data, ids = np.arange(64 * 64, dtype=np.int8).reshape(64, 64), np.arange(-8192, 8192, 2).reshape(-1, 2) % 80
out = np.asarray(jax_gather.gather_nd(data, ids, mode="fill", fill_value=5))
inside = (ids < 64).all(axis=1)
assert (out[inside] == data[ids[inside, 0], ids[inside, 1]]).all() and (out[~inside] == 5).all()
print(_cpu_client.xla_splits_loops(), "nd_fill_in_two_loops" in names)
"""


@needs_cpu_lowerings
@needs_affinity
def test_the_two_loop_fill_is_not_chosen_in_a_process_on_one_core():
    assert _in_a_process_with("", TWO_LOOPS_SELECTED, one_core=True) == "False False"


# ---- batched_nd_fill_from_pad, short_lookup_fill_from_pad ---------------------------------------


def _entry_ops(compiled_text: str) -> list[str]:
    """The opcodes of the compiled entry computation (fusions are not looked into)."""
    entry = compiled_text[compiled_text.index("\nENTRY") :]
    return [op for op in re.findall(r"= \S+ (\S+?)\(", entry) if op not in ("parameter", "constant")]


nd = lambda d, i: jax_gather.gather_nd(d, i)
nd1 = lambda d, i: jax_gather.gather_nd(d, i, 1)
ids, tuples = lambda n: np.zeros(n, np.int32), lambda *shape: np.zeros((*shape, 2), np.int32)


@needs_cpu_lowerings
@pytest.mark.parametrize(
    "name, fn, data_shape, indices",
    [
        ("gather_nd batch_dims=1", nd1, (8, 64, 48), tuples(8, 200)),  # under BATCHED_ND_LINEAR_TUPLES
        ("large data, few reads", nd1, (2, 2048, 2048), tuples(2, 5)),
        ("vmap", jax.vmap(nd1), (4, 8, 64, 48), tuples(4, 8, 100)),
        ("short row lookup", lambda d, i: jax_gather.gather(d, i, 0), (2048, 512), ids(64)),
        ("short column lookup", lambda d, i: jax_gather.gather(d, i, 1), (512, 2048), ids(16)),
        ("gather_nd short rows", nd, (64, 64, 96), tuples(32)),
        ("columns", lambda d, i: jax_gather.gather(d, i, 1), (64, 2048), ids(1000)),
    ],
)
def test_xla_fuses_the_pad_into_the_gather(name, fn, data_shape, indices, lowerings_on_any_cpu):
    # The pad is cheaper than the select only because XLA never materialises the padded data.
    dtype = jnp.int8 if name == "columns" else jnp.float32  # columns of 1- and 2-byte data
    text = _compiled_text(fn, jnp.zeros(data_shape, dtype), indices)
    assert " pad(" in text and "select" not in text, name  # the pad was taken
    ops = _entry_ops(text)
    assert ops and set(ops) <= {"fusion", "bitcast"}, (name, ops)


def test_a_pad_vectorises_no_fill_of_a_gather_nd_without_batch_dims_where_its_select_does_not():
    # Why GatherND without batch dims never reads its fill from a pad: a pad gains only where
    # XLA vectorises its loop and not the select's. Where XLA vectorises the select (AVX2 and
    # AVX-512), it measured as fast as the pad (AMD EPYC) or faster (Intel Xeon); where it
    # vectorises neither (XLA_FLAGS=--xla_cpu_max_isa=SSE4_2), the two measured level.
    data, ids = np.zeros((256, 256), np.float32), np.zeros((1000, 2), np.int32)
    plan = plans.gather_nd_plan(data.shape, ids.shape, 0)

    def padded(d, i):
        slots = _traced_bounds.index_vectors(plan, i, clip=False, past_end=True)
        return _cpu_fills.read_fill_from_pad(d, slots, jnp.asarray(np.nan, d.dtype), i, plan)

    fill = lambda d, i: jax_gather.gather_nd(d, i, 0, mode="fill")
    selected, from_pad = (_vector_types(_optimized_ir(f, data, ids)) for f in (fill, padded))
    assert selected or not from_pad


@needs_cpu_lowerings
def test_xla_vectorises_the_linear_indices_of_a_batched_gather_nd_where_the_library_says():
    # What batched_nd_by_linear_index rests on: XLA computes each tuple's linear index in a
    # vector loop (AVX-512); where it computes them one at a time (AVX2, SSE4_2) the lowering
    # costs (docs/design.md). The library asks the CPU at hand once, on a smaller gather: this
    # is the benchmark's shape.
    plan = plans.gather_nd_plan((64, 256, 256), (64, 16384, 2), 1)
    by_linear = functools.partial(_cpu_linear.by_linear_index, plan=plan, dtype=jnp.int32)
    ir = _optimized_ir(by_linear, np.zeros((64, 256, 256), np.float32), np.zeros((64, 16384, 2), np.int32))
    assert bool(_cpu_linear.VECTOR_OF_INTEGERS.search(ir)) == _cpu_linear.xla_vectorises_linear_indices()


def test_xla_gathers_bfloat16_through_float32_where_it_selects_it_so():
    # Why bfloat16 keeps the select: in a padded loop each element would be widened and rounded
    # back on its own, measured slower than the select (JAX 0.10). From JAX 0.11 XLA:CPU gathers
    # and selects bfloat16 as it is; the pads are not measured there for it, and not taken. (The
    # library gathers bfloat16 on its bits where XLA converts it: see _fill.gathered_as_bits.)
    data, indices = np.zeros((64, 48), jnp.bfloat16), np.zeros((9, 2), np.int32)
    text = _compiled_text(lambda d, i: d[i[:, 0], i[:, 1]], data, indices)
    gathers = re.findall(r"= (\w+)\[[\d,]*\]\S* gather\(", text)
    if _fill.xla_cpu_converts_select(np.dtype(jnp.bfloat16)):
        assert gathers == ["f32"] and re.search(r"= f32\[64,48\]\S* convert\(", text), text
    else:
        assert gathers == ["bf16"] and " convert(" not in text, text


NAN_PAYLOAD_TYPES = [np.dtype(t) for t in (jnp.bfloat16, jnp.float8_e4m3fn, jnp.float8_e5m2)]


@pytest.mark.parametrize("dtype", NAN_PAYLOAD_TYPES, ids=str)
def test_a_select_xla_cpu_computes_as_it_is_keeps_every_bit(dtype):
    # Why select_exact selects bit patterns only where XLA:CPU converts the type for a select, or
    # moves single elements of it through another (xla_cpu_keeps_bits, below): elsewhere a plain
    # select keeps every bit pattern, NaN payloads included, and the bitcasts would only add to
    # the flops that decide whether a short program runs on JAX's worker thread (a lookup of 128
    # bfloat16 columns: 1152 flops, 56 us, against jnp's 896, 4 us).
    width = np.dtype(f"uint{8 * dtype.itemsize}")
    patterns = np.arange(2 ** (8 * dtype.itemsize), dtype=width)
    mask, values = _on_cpu(np.ones(patterns.size, bool), patterns.view(dtype))
    select = _fill.select_exact if _fill.xla_cpu_converts_select(dtype) else jnp.where
    out = jax.jit(lambda m, x: select(m, x, x[::-1]))(mask, values)
    np.testing.assert_array_equal(np.asarray(out).view(width), patterns)
    fill = _compiled_text(
        lambda d, i: jax_gather.gather(d, i, mode="fill"), np.zeros(64, dtype), np.zeros(9, np.int32)
    )
    bits_selected = re.search(rf"= u{8 * dtype.itemsize}\[[\d,]*\]\S* bitcast-convert\(", fill)
    # One element an index: a select XLA:CPU runs in vector code, never pinned (_lowering.fill_pin).
    assert bool(bits_selected) == _fill.xla_cpu_converts_select(dtype), fill


def _changeable_bfloat16() -> np.ndarray:
    """64 bfloat16 bit patterns a trip through float32 may change: signalling NaNs (quieted
    on any x86-64 CPU) and subnormals (flushed to zero by AVX512_BF16's conversion)."""
    snan = np.arange(0x7F81, 0x7FA1, dtype=np.uint16)
    subnormal = np.arange(0x0001, 0x0021, dtype=np.uint16)
    return np.concatenate([snan, subnormal])


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="XLA:CPU on x86-64")
def test_the_probe_of_bfloat16_bits_answers_as_jnps_own_programs():
    # The fact behind pinned_bits: where XLA:CPU moves single bfloat16 elements through float32
    # (x86-64, JAX 0.10 to 0.12.0), jnp's own gather from a table of one row (a broadcast, once
    # XLA has simplified it) quiets a signalling NaN, even between bitcasts to uint16, which XLA
    # folds away. JAX 0.12.1 keeps those, but quiets a constant signalling NaN selected at the
    # ends of a loop over rows (a fill_value). xla_cpu_keeps_bits asks programs of the same
    # moves: it answers "kept" only where all of these keep every bit.
    patterns = _changeable_bfloat16()
    row, rows = patterns[None], np.stack([patterns, patterns[::-1]])
    ids = np.arange(129, dtype=np.int32) % 2
    bits = lambda x, t: lax.bitcast_convert_type(x, t)
    fill = patterns[:1].view(jnp.bfloat16)[0]  # a signalling NaN, a constant of the program
    moves = {  # a program, its data, its indices
        "one row": (lambda d, i: d[i], row, ids * 0),
        "one row as bits": (lambda d, i: bits(bits(d, jnp.uint16)[i], jnp.bfloat16), row, ids * 0),
        "a constant fill": (lambda d, i: jnp.where(i[:, None] > 0, d[i], fill), rows, ids),
    }
    kept = {}
    for name, (f, data, i) in moves.items():
        expected = np.where(i[:, None] > 0, data[i], patterns[0]) if name == "a constant fill" else data[i]
        out = jax.jit(f)(*_on_cpu(data.view(jnp.bfloat16), i))
        kept[name] = bool((np.asarray(out).view(np.uint16) == expected).all())
    assert _fill.xla_cpu_keeps_bits(np.dtype(jnp.bfloat16)) == all(kept.values()), kept


def test_the_library_loses_bfloat16_bits_unpinned_only_where_xla_cpu_keeps_bits_says(monkeypatch):
    # Without the pin (the probe answering "keeps"), the select of "fill" over rows of 64, against
    # a signalling NaN given as the fill, loses bit patterns where the probe says XLA:CPU does.
    patterns = _changeable_bfloat16()
    data = np.stack([patterns, patterns[::-1]]).view(jnp.bfloat16)
    ids = np.arange(129, dtype=np.int32) % 3  # a third out of bounds (2)
    expected = np.where(ids[:, None] < 2, data.view(np.uint16)[ids % 2], patterns[0])
    fill = patterns[:1].view(jnp.bfloat16)[0]
    gather = lambda d, i: jax_gather.gather(d, i, 0, mode="fill", fill_value=fill)
    pinned = np.asarray(jax.jit(gather)(*_on_cpu(data, ids))).view(np.uint16)
    np.testing.assert_array_equal(pinned, expected)
    keeps = _fill.xla_cpu_keeps_bits(np.dtype(jnp.bfloat16))
    monkeypatch.setattr(_fill, "_xla_cpu_keeps_bits", lambda dtype: True)
    jax.clear_caches()  # the op's programs traced with the pin
    try:
        unpinned = np.asarray(jax.jit(gather)(*_on_cpu(data, ids))).view(np.uint16)
    finally:
        monkeypatch.undo()
        jax.clear_caches()
    assert (unpinned != expected).any() == (not keeps)


def test_a_gather_from_one_bfloat16_slice_moves_its_bits_as_jnps_broadcast():
    # Outside "fill" a gather from one slice is not pinned: XLA makes it a broadcast, which jnp
    # runs on the calling thread, and the pin's flop an element sent it to JAX's worker thread
    # (GatherElements along an axis of 1, 128 to 8192 indices: 5-13x jnp's time, AMD EPYC). Its
    # bits move as jnp's do: kept where XLA:CPU keeps every bit (xla_cpu_keeps_bits), lost where
    # the broadcast loses them (JAX 0.10 to 0.12.0; 0.12.1 keeps a broadcast's, not a fill's).
    row = _changeable_bfloat16()[None].view(jnp.bfloat16)
    ids = np.zeros(129, np.int32)
    ours = jax.jit(lambda d, i: jax_gather.gather(d, i, 0, mode="promise_in_bounds"))(*_on_cpu(row, ids))
    theirs = jax.jit(lambda d, i: d.at[i].get(mode="promise_in_bounds"))(*_on_cpu(row, ids))
    np.testing.assert_array_equal(np.asarray(ours).view(np.uint16), np.asarray(theirs).view(np.uint16))
    kept = bool((np.asarray(ours).view(np.uint16) == row.view(np.uint16)).all())
    assert kept or not _fill.xla_cpu_keeps_bits(np.dtype(jnp.bfloat16))


# ---- columns_by_written_indices, column_fill_from_pad -------------------------------------------

columns = lambda mode: lambda d, i: jax_gather.gather(d, i, 1, mode=mode)
COLUMN_DATA, COLUMN_IDS = np.zeros((512, 4096), np.int8), np.zeros(2048, np.int32)
WIDENED = r"zext (nneg )?<\d+ x i32> %\S+ to <\d+ x i64>"  # a vector of 32-bit indices widened


def _computation_with(compiled_text: str, op: str) -> str:
    """The one computation (fused or entry) of a compiled program that holds ``op``."""
    blocks = [b for b in compiled_text.split("\n\n") if f" {op}(" in b]
    assert len(blocks) == 1, blocks
    return blocks[0]


@needs_cpu_lowerings
@pytest.mark.parametrize("mode", ["promise_in_bounds", "clip"])
def test_xla_widens_32_bit_indices_in_the_loop_of_a_column_gather_where_the_library_says(mode):
    # Why the indices are written out: without it, each mode's index arithmetic is fused into
    # the gather's one loop, which on some CPUs (AVX-512) widens every vector of indices to 64
    # bits there. The library asks the CPU at hand once, on a smaller gather; this is the
    # benchmark's shape in each mode.
    with _cpu.without("columns_by_written_indices"):
        text = _compiled_text(columns(mode), COLUMN_DATA, COLUMN_IDS)
        ir = _optimized_ir(columns(mode), COLUMN_DATA, COLUMN_IDS)
    assert _entry_ops(text) == ["fusion"], _entry_ops(text)
    assert bool(re.search(WIDENED, ir)) == _cpu.xla_widens_column_indices()
    assert _cpu_columns.WIDENED_INDICES.pattern == WIDENED


def _in_a_process_with(xla_flags: str, code: str, one_core: bool = False) -> str:
    """What ``code`` prints in a fresh process with these XLA flags (and pinned to one core)."""
    env = dict(os.environ, XLA_FLAGS=xla_flags, JAX_PLATFORMS="cpu")
    if one_core:  # before JAX starts its threads
        code = "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n" + code
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    return run.stdout.strip()


SELECTED = """
import numpy as np, jax_gather
from jax_gather import _cpu, plans
plan = plans.gather_plan((512, 4096), (2048,), 1)
names = _cpu.lowering(plan, (512, 4096), np.dtype(np.int8)).names
data, ids = np.arange(8 * 300, dtype=np.int8).reshape(8, 300), np.arange(-150, 150) * 2 % 300
assert (np.asarray(jax_gather.gather(data, ids, 1, mode="fill")) == data[:, ids]).all()
print(_cpu.xla_widens_column_indices(), sorted(n for n in names if "column" in n))
print(_cpu.xla_scalarises_the_column_pad())
"""


@needs_cpu_lowerings
@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="XLA's x86 instruction sets")
def test_the_column_lowerings_are_not_chosen_where_xla_keeps_32_bit_indices():
    # AVX2 is what a CPU without AVX-512 gives XLA (the AMD EPYC where this fact failed).
    assert _in_a_process_with("--xla_cpu_max_isa=AVX2", SELECTED).splitlines()[0] == "False []"


@needs_cpu_lowerings
@pytest.mark.skipif("avx512f" not in open("/proc/cpuinfo").read(), reason="a CPU with AVX-512")
def test_the_column_lowerings_are_chosen_where_xla_widens_indices():
    chosen, scalar_pad = _in_a_process_with("--xla_cpu_max_isa=AVX512", SELECTED).splitlines()
    # The benchmark's columns (1 MiB of output) read their fill from the pad unless its loop is scalar.
    pad = [] if scalar_pad == "True" else ["column_fill_from_pad"]
    assert chosen == f"True {sorted([*pad, 'columns_by_written_indices'])}"


@needs_cpu_lowerings
@pytest.mark.parametrize(
    "rows, ids, dtype",
    [(512, 2048, np.int8), (256, 12982, np.uint8), (3078, 12982, np.uint8), (64, 32768, np.int16)],
)
def test_xla_leaves_the_loop_of_a_column_pad_scalar_where_the_library_says(
    rows, ids, dtype, lowerings_on_any_cpu
):
    # Why a column gather past INLINE_FLOPS selects its fill on some CPUs: LLVM vectorises the
    # select's loop and leaves the loop from the pad scalar (the AMD EPYC: there the pad took
    # 1.05-2.0x the select's time at these sizes). The library asks once, on 64 int8 rows by 1024
    # ids; these are the benchmark's columns and the sizes where the pad was slowest.
    data, idx = np.zeros((rows, 4096), dtype), np.zeros(ids, np.int32)
    vectors = re.compile(rf"<\d+ x i{8 * np.dtype(dtype).itemsize}>")
    gather_loop = lambda: [ir for ir in _kernel_irs(columns("fill"), data, idx) if "transpose" in ir]
    (from_pad,) = gather_loop()
    with _cpu.without("column_fill_from_pad"):
        (selected,) = gather_loop()
    scalar_pad = bool(vectors.search(selected)) and not vectors.search(from_pad)
    assert scalar_pad == SCALAR_COLUMN_PAD()


@needs_cpu_lowerings
@pytest.mark.parametrize("mode", ["promise_in_bounds", "clip", "checked", "fill"])
def test_xla_keeps_a_reduce_window_out_of_the_gathers_loop(mode, lowerings_on_any_cpu):
    text = _compiled_text(columns(mode), COLUMN_DATA, COLUMN_IDS)
    gather = _computation_with(text, "gather")
    signature = gather.strip().split("\n")[0]  # the gather's loop reads the uint64 indices
    assert "reduce-window(" not in gather and "u64[2048,1]" in signature, gather
    assert "reduce-window(" in text  # a kernel of its own
    # The indices are widened once each, in a kernel before the reduce-window, never in the loop
    # that reads the (int8) data.
    (gather_ir,) = [ir for ir in _kernel_irs(columns(mode), COLUMN_DATA, COLUMN_IDS) if "load i8," in ir]
    assert not re.search(WIDENED, gather_ir)


@needs_cpu_lowerings
def test_xla_computes_the_fill_mask_of_a_column_gather_in_its_loop():
    # Why a column gather reads its fill from a pad: after the gather, the select's mask is
    # recomputed from the indices for every output element, in the gather's own loop.
    with _cpu.without("column_fill_from_pad"):
        gather = _computation_with(_compiled_text(columns("fill"), COLUMN_DATA, COLUMN_IDS), "gather")
    assert re.search(r"= pred\[2048\]\S* compare\(", gather) and " select(" in gather, gather


@needs_cpu_lowerings
def test_a_column_gather_before_its_select_reads_two_index_streams_in_one_loop():
    # Why a column gather that selects its fill (bfloat16: no pad) keeps the generic gather: the
    # select's mask, recomputed from the indices in the gather's loop, makes that loop read the
    # 32-bit indices besides the written-out ones.
    data = COLUMN_DATA.astype(ml_dtypes.bfloat16)
    with _cpu.without("column_fill_by_the_direct_gather"):
        gather = _computation_with(_compiled_text(columns("fill"), data, COLUMN_IDS), "gather")
    params = re.findall(r"= (\w+)\[[\d,]*\]\S* parameter\(", gather)
    widens = _cpu.xla_widens_column_indices()  # else no column lowering: one stream
    assert sorted(p for p in params if p in ("s32", "u64")) == (["s32", "u64"] if widens else ["s32"]), gather


# ---- one_slice_fill_from_a_table -----------------------------------------------------------------


@needs_cpu_lowerings
@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.float32])
def test_xla_fuses_the_flag_of_each_index_into_the_broadcast_of_one_slice(dtype):
    # Why a fill of one slice reads a table of it and the fill: XLA makes the gather a broadcast
    # of the slice and computes each index's flag, or its pin, in the select's loop over the
    # output, again for every element of the slice: that loop reads the indices themselves.
    data, indices = np.zeros((1, 1, 5), dtype), np.zeros((2188, 2), np.int32)
    fill = lambda d, i: jax_gather.gather_nd(d, i, mode="fill")
    with _cpu.without("one_slice_fill_from_a_table"):
        text = _compiled_text(fill, data, indices)
    loops = [b for b in text.split("\n\n") if re.search(r"\[2188,5\]\S* select\(", b)]
    assert loops and all(re.search(r"= s32\[2188,2\]\S* parameter\(", b) for b in loops), text
    assert not any(" gather(" in b for b in loops), loops


# ---- one_slice_fill_of_pinned_bits ---------------------------------------------------------------


@needs_cpu_lowerings
def test_xla_counts_a_pin_of_each_element_of_a_column_past_its_count_for_a_task_per_core():
    # Why a column of one slice is selected pinned once: where XLA:CPU moves bfloat16 through
    # float32 (the select pinned), the pin of each element it selects takes the loop past the
    # count at which XLA:CPU splits it into a task per core, where jnp's "fill" stays whole; the
    # slice and the fill pinned once stay whole too. Where the type's bits are kept, no pin.
    data, ids = np.zeros((32, 1), BF16), np.zeros(256, np.int32)

    def splits(fn):
        cost = _hlo_compiled(jax.jit(fn).lower(data, ids)).cost_analysis()
        cost = cost[0] if isinstance(cost, list) else cost
        return _cpu_split.loop_splits(cost["flops"], cost["bytes accessed"])

    fill = lambda d, i: jax_gather.gather(d, i, 1, mode="fill")
    pinned = not _fill.xla_cpu_keeps_bits(np.dtype(BF16))
    assert not splits(lambda d, i: jnp.take(d, i, axis=1, mode="fill"))
    with _cpu.without("one_slice_fill_of_pinned_bits"):
        assert splits(fill) == pinned
    assert not splits(fill)


# ---- linear_derivative ---------------------------------------------------------------------------


def _scatter_dims(compiled_text: str) -> list[str]:
    return re.findall(r"scatter\(.*?scatter_dims_to_operand_dims=\{([\d,]*)\}", compiled_text)


@pytest.mark.parametrize(
    "plan_fn, attribute, data_shape, indices",
    [
        (plans.gather_elements_plan, 1, (64, 48), np.zeros((64, 48), np.int32)),
        (plans.gather_nd_plan, 0, (64, 48), np.zeros((500, 2), np.int32)),
        (plans.gather_nd_plan, 1, (4, 64, 48), np.zeros((4, 500, 2), np.int32)),
    ],
)
def test_xla_scatters_the_transpose_of_an_element_gather_by_index_tuples(
    plan_fn, attribute, data_shape, indices
):
    grad = jax.grad(lambda d, i: _direct(plan_fn, attribute)(d, i).sum())
    dims = _scatter_dims(_compiled_text(grad, np.zeros(data_shape, np.float32), indices))
    assert dims and all(len(d.split(",")) >= 2 for d in dims), f"XLA:CPU now scatters by {dims}"


def _linear_gradient(shape, indices_shape):
    """The gradient of GatherElements along the last axis by the linear index, and its arguments."""
    plan = plans.gather_elements_plan(shape, indices_shape, -1)
    by_linear = functools.partial(_cpu_linear.by_linear_index, plan=plan, dtype=jnp.int32)
    grad = jax.grad(lambda d, i: by_linear(d, i[..., None]).sum())
    return grad, (np.zeros(shape, np.float32), np.zeros(indices_shape, np.int32))


def _index_loop(compiled_text: str, elements: int) -> str:
    """The line of the fusion that computes the flat linear index of ``elements``."""
    lines = compiled_text.splitlines()
    (line,) = [line for line in lines if f"= s32[{elements},1]" in line and "fusion(" in line]
    return line


@pytest.mark.parametrize("rows", [1300, 1311, 1312, 5263], ids=lambda r: f"{r}x50")
def test_xla_splits_the_linear_index_of_a_derivative_into_the_tasks_the_library_counts(rows):
    # What _cpu_linear.index_tasks models (XLA's cost model of a loop of fewer flops than bytes):
    # a task per 256 KiB of int32 index in and out, here 65000, 65550, 65600 and 263150 elements,
    # on one core none.
    grad, args = _linear_gradient((rows, 50), (rows, 50))
    line = _index_loop(_compiled_text(grad, *args), rows * 50)
    split = re.search(r'outer_dimension_partitions":\["(\d+)"', line)
    assert (int(split.group(1)) if split else 1) == _cpu_linear.index_tasks(rows * 50, 4), line


@pytest.mark.parametrize(
    "shape",
    [(5263, 57), (5264, 57), (4687, 64), (14999, 20), (3, 1755, 57), (6, 877, 57), (3, 1563, 64), (1300, 50)],
    ids=str,
)
def test_xla_computes_the_linear_index_in_vector_instructions_where_its_tasks_start_at_rows(shape):
    # Why linear_derivative asks _cpu_linear.index_tasks_start_at_rows: where a task of XLA's split
    # starts inside a row, XLA computes the index one element at a time (by division) through JAX
    # 0.10, and of rank two in vector instructions from JAX 0.12; which, this process's JAX is
    # asked once. Over more dims a split row is vectorised for some shapes and not for others
    # (JAX 0.12, the AMD EPYC with AVX2: 3 x 1755 x 57 not), so there the library claims nothing
    # and takes JAX's derivative: wherever it takes the linear index, the loop is vectorised.
    grad, args = _linear_gradient(shape, shape)
    lowered = jax.jit(grad).lower(*_on_cpu(*args))
    name = re.search(r"%(\S+) = ", _index_loop(_hlo_compiled(lowered).as_text(), math.prod(shape))).group(1)
    (ir,) = [ir for ir in _cpu_client.kernel_irs(lowered) if f"__compute_module_{name}_kernel" in ir[:300]]
    vectorised = bool(_cpu_linear.VECTOR_OF_INTEGERS.search(ir))
    at_rows = _cpu_linear.index_tasks_start_at_rows(shape, False)
    if len(shape) == 2:
        assert vectorised == (at_rows or not _cpu_linear.xla_scalarises_split_rows()), name
    else:
        assert vectorised or not at_rows, name
    plan = plans.gather_elements_plan(shape, shape, -1)
    chosen = "linear_derivative" in _cpu.lowering(plan, shape, np.float32).names
    assert vectorised or not chosen, name


@pytest.mark.parametrize(
    "shape, dtype",
    [((1001, 999), np.float32), ((1000, 999), np.float32), ((1001, 1001), np.float32)]
    + [((363, 361), np.float32), ((9937, 825), np.float32), ((9936, 825), np.float32)],
    ids=lambda p: getattr(p, "__name__", str(p)),  # float32: XLA:CPU scatters float16 only with F16C
)
def test_xla_fills_a_linear_derivatives_flat_zeros_one_element_at_a_time_where_its_tasks_do_not_divide_them(
    shape, dtype
):
    # What _cpu_linear.data_tasks_divide rests on: XLA splits the loops over data's flat elements
    # (the zeros the derivative scatters into, and the scatter) into no more tasks than
    # data_tasks counts, and fills the zeros in vector instructions where their count of tasks
    # divides the elements, one element at a time where it does not (an odd count in two: 8x the
    # time). On one core, one task: vector instructions. Where the library takes the linear
    # index for these few updates (4 a row), the fill is vectorised.
    plan = plans.gather_elements_plan(shape, (shape[0], 4), -1)
    by_linear = functools.partial(_cpu_linear.by_linear_index, plan=plan, dtype=jnp.int32)
    grad = jax.grad(lambda d, i: by_linear(d, i[..., None]).astype(jnp.float32).sum())
    lowered = jax.jit(grad).lower(*_on_cpu(np.zeros(shape, dtype), np.zeros((shape[0], 4), np.int32)))
    elements, name = math.prod(shape), jnp.dtype(dtype).name.replace("float", "f")
    flat = [
        line
        for line in _hlo_compiled(lowered).as_text().splitlines()
        if f"= {name}[{elements}]{{0}} fusion(" in line
    ]
    (zeros,) = [line for line in flat if "broadcast" in line.split("=")[0]]
    splits = [re.search(r'outer_dimension_partitions":\["(\d+)"', line) for line in flat]
    counts = [int(split.group(1)) if split else 1 for split in splits]
    most = _cpu_linear.data_tasks(shape, jnp.dtype(dtype).itemsize, shape[0] * 4, 4)
    assert max(counts) <= most, flat
    kernel = re.search(r"%(\S+) = ", zeros).group(1)
    (ir,) = [ir for ir in _cpu_client.kernel_irs(lowered) if f"__compute_module_{kernel}_kernel" in ir[:300]]
    zeros_tasks = counts[flat.index(zeros)]
    assert bool(re.search(r"store <\d+ x ", ir)) == (elements % zeros_tasks == 0), zeros
    chosen = "linear_derivative" in _cpu.lowering(plan, shape, dtype).names
    assert elements % zeros_tasks == 0 or not chosen


# ---- moved_axis_derivative -----------------------------------------------------------------------


def test_xla_scatters_the_transpose_of_a_gather_off_axis_0_along_that_axis():
    grad = jax.grad(lambda d, i: _direct(plans.gather_plan, 1)(d, i).sum())
    dims = _scatter_dims(_compiled_text(grad, np.zeros((64, 48), np.float32), np.zeros(30, np.int32)))
    assert dims == ["1"], f"XLA:CPU now scatters by {dims}"


# ---- every lowering ------------------------------------------------------------------------------


def test_platform_dependent_keeps_only_the_branch_of_the_platform_it_lowers_for():
    # Where it keeps both (JAX before 0.7.0), a CPU lowering would put a second gather in every
    # program: then none is used.
    def fn(d, i):
        rows = lambda d, i: lax.gather(d, i[..., None], *_dims(d.shape, i.shape), mode="clip")
        return lax.platform_dependent(d, i, cpu=rows, default=lambda d, i: rows(d, i) + 1)

    module = jax.export.export(jax.jit(fn), platforms=("cpu",))(np.zeros((8, 4)), np.zeros(3, np.int32))
    assert (module.mlir_module().count('"stablehlo.gather"') == 1) == _cpu.PLATFORM_DEPENDENT_PRUNES


def _dims(data_shape, indices_shape):
    plan = plans.gather_plan(data_shape, indices_shape, 0)
    return plan.dimension_numbers, plan.slice_sizes


# ---- index arithmetic of a promise (jax_gather._traced_bounds.working_indices) -------------------------


# (op, data shape, indices shape, attribute, jnp's call in "fill")
FILL_GRADIENTS = [
    ("gather_elements", (4, 52), (4, 52), -1, lambda d, i: jnp.take_along_axis(d, i, axis=-1, mode="fill")),
    ("gather", (8, 512, 43), (8, 21), 1, lambda d, i: jax.vmap(lambda d, i: d.at[i].get(mode="fill"))(d, i)),
    ("gather_nd", (64, 64), (300, 2), 0, lambda d, i: d.at[i[:, 0], i[:, 1]].get(mode="fill")),
    ("gather", (4096, 16), (40,), 0, lambda d, i: d.at[i].get(mode="fill")),
]


@pytest.mark.parametrize(
    "op, shape, ids, attribute, theirs", FILL_GRADIENTS, ids=["elements", "batch_dims=1", "pairs", "rows"]
)
def test_the_default_modes_gradient_counts_no_more_flops_than_jnps_fill(op, shape, ids, attribute, theirs):
    # JAX's CPU client hands a program of INLINE_FLOPS or more to its worker thread: the gradient
    # of the default mode (the "fill" program under jit) drops out-of-bounds indices in its
    # scatter, as jnp's does, where the select's derivative counted 2288 flops to jnp's 832 over
    # 208 GatherElements elements and took 1.14-1.27x jnp's time (up to 7.7x).
    rng = np.random.default_rng(0)
    data = rng.standard_normal(shape).astype(np.float32)
    bound = shape[attribute] if op != "gather_nd" else 64
    indices = rng.integers(-bound - 3, bound + 3, ids).astype(np.int32)
    extra = {"batch_dims": 1} if op == "gather" and len(ids) == 2 else {}
    fn = getattr(jax_gather, op)
    ours = lambda d, i: fn(d, i, attribute, **extra).sum()
    grad = lambda f: jax.jit(jax.grad(f)).lower(*_on_cpu(data, indices))
    assert _flops(grad(ours)) <= _flops(grad(lambda d, i: theirs(d, i).sum()))
    np.testing.assert_array_equal(
        np.asarray(jax.grad(ours)(data, indices)),
        np.asarray(jax.grad(lambda d, i: theirs(d, i).sum())(data, indices)),
    )


@pytest.mark.parametrize("n", [200, 333])
@pytest.mark.parametrize("op", ["gather", "gather_nd"])
def test_a_promise_of_few_indices_runs_where_jnps_does(n, op):
    # The clamp's two flops per index would take these over INLINE_FLOPS, to a worker thread,
    # where jnp's indexing (three flops per index) stays on the calling thread.
    data, ids = np.zeros((4096, 8), np.float32), -np.arange(n, dtype=np.int32)
    if op == "gather":
        ours = lambda d, i: jax_gather.gather(d, i, mode="promise_in_bounds")
        theirs = lambda d, i: d.at[i].get(mode="promise_in_bounds")
    else:
        data, ids = data.reshape(64, 64, 8), ids.reshape(-1, 1)
        ours = lambda d, i: jax_gather.gather_nd(d, i, mode="promise_in_bounds")
        theirs = lambda d, i: d.at[i[:, 0]].get(mode="promise_in_bounds")
    flops = lambda f: _flops(jax.jit(f).lower(*_on_cpu(data, ids)))
    assert flops(theirs) < _cpu_client.INLINE_FLOPS and flops(ours) <= flops(theirs)
    np.testing.assert_array_equal(
        np.asarray(jax.jit(ours)(data, ids)), np.asarray(jax.jit(theirs)(data, ids))
    )


@pytest.mark.parametrize("size", [4096, 4000])
@pytest.mark.parametrize(
    "mode, n",
    [("clip", 200), ("clip", 333), ("clip", 334), ("clip", 499), ("clip", 500)]
    + [("promise_in_bounds", 300), ("in range", 300)],
)
def test_xla_counts_each_modes_index_flops_and_the_written_column_indices(mode, n, size):
    # What jax_gather._cpu weighs before writing out column indices: the mode's arithmetic and
    # the written indices' reduce-window, as XLA's cost analysis counts them (for INLINE_FLOPS;
    # clip's short form: 2 flops an index component against an axis of a power of two, up to
    # 499, else 3, up to 333, as jnp's own clip).
    shape = (64, size)
    data, ids = np.zeros(shape, np.int8), np.arange(n, dtype=np.int32)
    plan = plans.gather_plan(shape, ids.shape, 1)
    with _cpu.without(*_cpu.LOWERINGS):
        if mode == "in range":
            program = ops._programs(plan, None)(Mode.IN_RANGE)
        else:
            program = jax.jit(lambda d, i: jax_gather.gather(d, i, 1, mode=mode))
        counted = _flops(program.lower(*_on_cpu(data, ids)))
    flops = _traced_bounds.index_flops(
        clip=mode == "clip", unclamped=True, in_range=mode == "in range", plan=plan, components=n
    )
    assert counted == flops * n
    if mode == "clip":
        assert (counted < _cpu_client.INLINE_FLOPS) is (n <= (499 if size == 4096 else 333))
    written = jax.jit(lambda d, i: _cpu_columns.columns_by_written_indices(d, i[:, None], plan))
    assert _flops(written.lower(*_on_cpu(data, ids))) == _cpu.COLUMN_INDEX_FLOPS * n


# Each grid op at sizes where jnp's program counts just under or over INLINE_FLOPS (48 and 80
# index components or rows), in float32 and in bfloat16 (a select of bits, a gather through
# float32; rows of 8 where a pin of each element would count 3 flops an element more). Scans of
# widths 1-64 (ten dtypes on JAX 0.10, bfloat16 on 0.12) and counts 1-1000 found no other.
_INLINE_CELLS = [
    grid.Cell(op, dtype, width, count)
    for op in grid.OPS
    for dtype in ("float32", "bfloat16")
    for width in ((1, 2, 8) if dtype == "bfloat16" else (1, 2))
    for count in (48, 80)
]


@pytest.mark.parametrize(
    "cell, mode", list(itertools.product(_INLINE_CELLS, grid.MODES)), ids=lambda x: getattr(x, "name", x)
)
def test_no_program_counts_inline_flops_or_more_where_jnps_counts_fewer(cell, mode):
    # Where jnp's program runs on the calling thread, the library's must too: a worker thread's
    # hand-over costs tens of µs (the reduced tuple mask of 45 pairs of rows: 8x the time).
    _assert_inline_where_jnps_is(cell, mode)


@pytest.mark.parametrize(
    "cell",
    [
        grid.Cell(op, dtype, width, count, table)
        for op in grid.OPS
        for dtype in ("float32", "int8")
        for width in (1, 16)
        for count, table in ((120, 4096), (240, 4096), (333, 4096), (300, 4000), (333, 4000))
    ],
    ids=lambda c: c.name,
)
def test_a_clip_stays_inline_where_jnps_does(cell):
    # "clip"'s short form (a clamp into [-s, s-1], then an and or a remainder: 2-3 flops an index
    # component) keeps its program on the calling thread wherever jnp's clip (3, reading past the
    # end) is, up to 333 components; the unsigned form's 6 left it from 167 (jitted, with 30 µs
    # of other work after each call: 11-12x jnp's time), the clamp and jnp's normalisation's 4
    # from 250.
    _assert_inline_where_jnps_is(cell, "clip")


@pytest.mark.parametrize("cell", [c for c in _INLINE_CELLS if c.dtype == "bfloat16"], ids=lambda c: c.name)
def test_where_each_element_is_pinned_the_pin_is_all_a_program_counts_past_jnps(cell, rows_pinned_on_any_jax):
    # The CPU's answer held at no, as on an Intel Xeon (family 6 model 207, JAX 0.11.2), where a
    # select against the pinned fill loses bits: each selected element is pinned, and the fill
    # keeps bits jnp's loses at 3 flops an element more in XLA's count (bitcasts to and from its
    # bits, the exclusive or) and nothing more. Rows of 2 by 80 ids and of 8 by 48 then count
    # 1124 and 1828 flops against jnp's 640 and 672 and leave the calling thread (that Xeon and
    # JAX 0.11.2 here alike; with a release that converts the select, jnp's count is over too).
    # One flop an element more fails each of its 20 cells of rows of 2 and 8 (GatherElements pins
    # none: each index reads an element of its own).
    _assert_inline_where_jnps_is(cell, "checked")


@pytest.mark.parametrize(
    "cell",
    [
        grid.Cell(op, "bfloat16", w, n, 1)
        for op in ("gather axis 0", "gather_nd pairs")
        for w, n in ((64, 11), (16, 40))
    ],
    ids=lambda c: c.name,
)
def test_a_fill_of_one_pinned_slice_stays_inline_where_jnps_does(cell, bits_pinned_on_any_jax):
    # The table of one slice and the fill pins its bits once, on the table: pinned after the
    # gather, each output element counted a flop more and took 704 of them past INLINE_FLOPS
    # (1520 flops, jnp's 770 from JAX 0.11, which selects bfloat16 as it is: 1.5-1.6x its time;
    # JAX 0.10's select in float32 counts as many as the library's.)
    d, i = grid.make_inputs(cell)
    counted = lambda fn: _flops(jax.jit(fn).lower(*_on_cpu(d, i)))
    if counted(grid.jnp_call(cell, "checked")) < _cpu_client.INLINE_FLOPS:
        assert counted(grid.ours_call(cell, "checked")) < _cpu_client.INLINE_FLOPS


def _assert_inline_where_jnps_is(cell: grid.Cell, mode: str) -> None:
    d, i = grid.make_inputs(cell)
    counted = lambda fn: _flops(jax.jit(fn).lower(*_on_cpu(d, i)))
    jnps, ours = counted(grid.jnp_call(cell, mode)), counted(grid.ours_call(cell, mode))
    pinned = mode == "checked" and _each_element_pinned(np.dtype(cell.dtype))
    pin = _PIN_FLOPS * math.prod(jax.eval_shape(grid.ours_call(cell, mode), d, i).shape) if pinned else 0
    assert not pinned or ours <= jnps + pin + _PIN_ZERO_FLOPS
    if jnps + pin < _cpu_client.INLINE_FLOPS:
        assert ours < _cpu_client.INLINE_FLOPS


# XLA's count of a pinned element past a plain select's (the bitcasts to and from its bits and
# the exclusive or: _fill.select_exact), and of the opaque zero of one index they share.
_PIN_FLOPS, _PIN_ZERO_FLOPS = 3, 8


def _each_element_pinned(dtype: np.dtype) -> bool:
    """Whether the library's fill of ``dtype`` pins each selected element on this CPU: XLA:CPU
    selects the type as it is, moves single elements through a wider one, and the library does
    not select against the pinned fill (the CPU's answer, _cpu_fills.pins_the_fill)."""
    return not (
        _fill.xla_cpu_keeps_bits(dtype)
        or _fill.xla_cpu_converts_select(dtype)
        or _cpu_fills.pins_the_fill(dtype)
    )


# Grid ops at sizes where the library's default mode (a fill under jit) ran one loop XLA:CPU
# splits into a task per core while jnp's stayed whole (jax_gather._cpu_split): the split's
# hand-over cost 20-50 µs, 1.1-9x jnp's time. Found by compiling every grid op, dtype and mode
# over widths 1-128 and 256-65536 ids (JAX 0.10 and 0.12), and by random draws of GatherND pairs
# of every dtype.
_SPLIT_CELLS = [
    grid.Cell("gather_nd pairs", "int8", 2, 2048),  # tuple_mask_by_and's one loop
    grid.Cell("gather_nd pairs", "int8", 8, 8192),
    grid.Cell("gather_nd pairs", "int8", 2, 16384),  # the reduced flag's gather loop: written indices
    grid.Cell("gather_nd pairs", "float32", 1, 16384),  # the generic loop, one element a pair
    grid.Cell("gather axis 1", "bfloat16", 8, 3000),  # each element pinned
    grid.Cell("gather_elements axis -1", "bfloat16", 1, 4096),
    grid.Cell("gather_elements axis -1", "bfloat16", 1, 16384),
    grid.Cell("gather axis 0", "bfloat16", 2, 1024),  # rows pinned: the opaque zeros' count
    grid.Cell("gather_nd rows", "bfloat16", 4, 1500),
    grid.Cell("gather_nd pairs", "bfloat16", 2, 4096),  # pinned rows: nd_fill_from_written_indices
    grid.Cell("gather_nd pairs", "bfloat16", 4, 16384),
    grid.Cell("gather axis 1", "bfloat16", 2, 1200),  # each element pinned: one zero for all
    grid.Cell("gather batch_dims=1", "bfloat16", 3, 700),
    grid.Cell("gather_nd pairs", "int4", 2, 4096),  # converted: nd_fill_from_written_indices
    grid.Cell("gather_nd pairs", "int4", 3, 1024),
    grid.Cell("gather_nd pairs", "float8_e4m3fn", 3, 512),
    grid.Cell("gather_nd pairs", "float8_e4m3fn", 2, 2048),
    grid.Cell("gather_nd pairs", "int2", 1, 2048),  # int2 selected as it is: nd_fill_in_two_loops
    grid.Cell("gather_nd pairs", "int2", 8, 2048),  # nd_fill_from_written_indices
    grid.Cell("gather_nd pairs", "int4", 1, 2048, 30),  # converted elements: nd_fill_in_two_loops
    grid.Cell("gather_nd pairs", "uint8", 108, 1901, 2),  # one slice: XLA's broadcast
    grid.Cell("gather_nd pairs", "uint8", 9, 4096, 2),
    grid.Cell("gather_nd pairs", "int4", 3, 1818, 2),  # one slice: the and-ed flag's loop
    grid.Cell("gather_nd pairs", "int4", 9, 1901, 2),
]


@pytest.mark.parametrize("cell", _SPLIT_CELLS, ids=lambda c: c.name)
def test_no_default_program_is_split_into_tasks_where_jnps_is_not(cell):
    d, i = grid.make_inputs(cell)
    if not _split_into_tasks(grid.jnp_call(cell, "checked"), d, i):
        assert not _split_into_tasks(grid.ours_call(cell, "checked"), d, i)


def test_the_linear_index_of_the_fewest_batched_tuples_counts_inline_flops():
    # What jax_gather._cpu's hand-over rule assumes of batched_nd_by_linear_index: its program
    # leaves the calling thread, where the eager checked call's (no index arithmetic) stays.
    n = _cpu.BATCHED_ND_LINEAR_TUPLES
    plan = plans.gather_nd_plan((8, 64, 64), (8, n // 8, 2), 1)
    by_linear = jax.jit(functools.partial(_cpu_linear.by_linear_index, plan=plan, dtype=jnp.int32))
    ids = np.zeros((8, n // 8, 2), np.int32)
    assert _flops(by_linear.lower(*_on_cpu(np.zeros((8, 64, 64), np.float32), ids))) >= (
        _cpu_client.INLINE_FLOPS
    )


@needs_cpu_lowerings
@pytest.mark.parametrize("x64", [False, True])
@pytest.mark.parametrize("n", [129, 142])
def test_a_small_column_fill_is_read_from_a_pad_only_where_that_keeps_it_under_inline_flops(n, x64):
    # Below COLUMNS_MIN_BYTES the pad pays only by keeping the program on the calling thread.
    with enable_x64(x64):
        data, ids = np.zeros((64, 4096), np.int8), np.arange(n, dtype=np.int64 if x64 else np.int32)
        plan = plans.gather_plan(data.shape, ids.shape, 1)
        padded = "column_fill_from_pad" in _cpu.lowering(plan, data.shape, data.dtype).names
        fill = jax.jit(lambda d, i: jax_gather.gather(d, i, 1, mode="fill"))
        flops = _flops(fill.lower(*_on_cpu(data, ids)))
    assert padded == (flops < _cpu_client.INLINE_FLOPS and _cpu_columns.xla_widens_column_indices())
    assert padded or x64 or not _cpu_columns.xla_widens_column_indices()  # int32: it stays inline


@pytest.mark.parametrize("n", [200, 333])
def test_a_promise_of_few_column_indices_runs_where_jnps_does(n):
    # Written out, the indices' two flops each would take these over INLINE_FLOPS.
    data, ids = np.zeros((64, 4096), np.int8), np.arange(n, dtype=np.int32)
    ours = jax.jit(lambda d, i: jax_gather.gather(d, i, 1, mode="promise_in_bounds"))
    assert _flops(ours.lower(*_on_cpu(data, ids))) < _cpu_client.INLINE_FLOPS
    many = np.arange(4 * n, dtype=np.int32)  # the eager checked call's program, from 500 ids too
    in_range = ops._programs(plans.gather_plan(data.shape, many.shape, 1), None)(Mode.IN_RANGE)
    assert _flops(in_range.lower(*_on_cpu(data, many))) == 0


def _split_into_tasks(fn, *args) -> bool:
    return "outer_dimension_partitions" in _compiled_text(fn, *args)


def test_a_promise_of_a_small_element_gather_is_not_split_into_tasks():
    # Why the clamp is left out below _cpu_split.SPLIT_ANYWAY_BYTES of output: its two flops per
    # component take an int8 element gather past one flop per byte, and XLA:CPU splits such a
    # loop into a task per core where it splits loops (what jnp's program of the same gather is not).
    data, tuples = np.zeros((64, 64), np.int8), make_tuples(8192)
    plan = plans.gather_nd_plan(data.shape, tuples.shape)
    clamped = lambda d, i: _lowering.direct(d, _traced_bounds.index_vectors(plan, i, clip=False), plan)
    ours = lambda d, i: jax_gather.gather_nd(d, i, mode="promise_in_bounds")
    theirs = lambda d, i: d.at[i[:, 0], i[:, 1]].get(mode="promise_in_bounds")
    assert _split_into_tasks(clamped, data, tuples) == _cpu_client.xla_splits_loops()
    assert not _split_into_tasks(ours, data, tuples) and not _split_into_tasks(theirs, data, tuples)
    assert not _traced_bounds.clamp_pays(plan, tuples, data.dtype)
    assert _traced_bounds.clamp_pays(
        plans.gather_nd_plan((1024, 1024), (1 << 20, 2)), np.zeros((1 << 20, 2)), np.int8
    )


@pytest.mark.parametrize(
    ("rows", "dtype", "clamped"),
    [
        (8, np.float32, True),
        (256, np.float32, False),
        (715, ml_dtypes.bfloat16, False),
        (2048, np.int8, False),
    ],
)
def test_a_promise_clamps_its_indices_only_where_each_writes_a_short_row(rows, dtype, clamped):
    # 2 MiB of output and thousands of indices, where the clamp is otherwise taken: it pays per
    # index, on rows of up to _traced_bounds.CLAMP_MAX_ROW_BYTES; past them it saved nothing and
    # could cost (bfloat16 rows of 715 as XLA compiles for SSE4_2: 1.33x the unclamped time).
    n = (1 << 21) // (rows * np.dtype(dtype).itemsize)
    data, ids = np.zeros((1000, rows), dtype), (np.arange(n, dtype=np.int32) % 2000) - 1000
    ours = jax.jit(lambda d, i: jax_gather.gather(d, i, mode="promise_in_bounds"))
    theirs = jax.jit(lambda d, i: d.at[i].get(mode="promise_in_bounds"))
    extra = _flops(ours.lower(*_on_cpu(data, ids))) - _flops(theirs.lower(*_on_cpu(data, ids)))
    assert extra == (2 * n if clamped else 0)  # the clamp's two flops an index, or jnp's program


def test_a_promise_of_index_pairs_clamps_them_at_every_row_length():
    # Pairs keep the clamp on rows past CLAMP_MAX_ROW_BYTES: there it measured 0.81-1.06.
    n = (1 << 21) // (715 * 4)
    data, pairs = np.zeros((64, 64, 715), np.float32), make_tuples(n)
    ours = jax.jit(lambda d, i: jax_gather.gather_nd(d, i, mode="promise_in_bounds"))
    theirs = jax.jit(lambda d, i: d.at[i[:, 0], i[:, 1]].get(mode="promise_in_bounds"))
    extra = _flops(ours.lower(*_on_cpu(data, pairs))) - _flops(theirs.lower(*_on_cpu(data, pairs)))
    assert extra == 4 * n  # two flops per component


def make_tuples(n):
    return (np.arange(2 * n, dtype=np.int32).reshape(n, 2) % 128) - 64


# Sites of a promise the clamp is taken for (2 MiB of output) whose rows are one element an index:
# rows of 23 and 25, vectorised only unclamped on AVX-512 here (AMD EPYC), not so with AVX2; rows
# of 16, vectorised by neither on AVX-512 (the clamp took 0.64-0.89 of the unclamped time).
ELEMENT_ROW_SITES = {
    "elements axis 0 uint8, rows of 23": (0, (4096, 23), (91171, 23), np.uint8),
    "elements last axis float32, rows of 25": (-1, (20971, 25), (20971, 25), np.float32),
    "elements axis 0 bfloat16, rows of 16": (0, (4096, 16), (65536, 16), ml_dtypes.bfloat16),
    "1-D data, rows of 24": (None, (4096,), (87381, 24), np.uint8),
}


def _element_site(site):
    """The axis, zero data and int32 ids in and out of bounds of a site (axis, shapes, dtype)."""
    axis, shape, index_shape, dtype = site
    ids = np.random.default_rng(0).integers(-shape[0], shape[0], index_shape).astype(np.int32)
    return axis, np.zeros(shape, dtype), ids


def _element_call(axis):
    if axis is None:
        ours = lambda d, i: jax_gather.gather(d, i, mode="promise_in_bounds")
        return ours, lambda d, i: d.at[i].get(mode="promise_in_bounds")
    ours = lambda d, i: jax_gather.gather_elements(d, i, axis, mode="promise_in_bounds")
    normalised = peers.take_along_axis_normalises_under_a_promise()  # as of JAX 0.11
    at = lambda d, i: i if normalised else jnp.where(i < 0, i + d.shape[axis], i)
    return ours, lambda d, i: jnp.take_along_axis(d, at(d, i), axis=axis, mode="promise_in_bounds")


@needs_cpu_lowerings
@pytest.mark.parametrize("site", list(ELEMENT_ROW_SITES))
def test_a_promise_leaves_element_rows_unclamped_exactly_where_the_clamp_stops_their_vector_loop(
    site, monkeypatch
):
    # On this CPU: the library's program is jnp's (no clamp) exactly where jnp's loop reads its
    # indices in vector loads and the clamped program has no vector at all (_cpu_clamp).
    axis, data, ids = _element_site(ELEMENT_ROW_SITES[site])
    ours, theirs = _element_call(axis)
    jax.clear_caches()
    extra = _flops(jax.jit(ours).lower(*_on_cpu(data, ids))) - _flops(
        jax.jit(theirs).lower(*_on_cpu(data, ids))
    )
    assert extra in (0, 2 * ids.size)
    monkeypatch.setattr(_cpu, "clamp_stops_the_vector_loop", lambda *args: False)
    jax.clear_caches()
    clamped = _kernel_irs(ours, data, ids)
    jax.clear_caches()
    unclamped = _kernel_irs(theirs, data, ids)
    fact = not any(re.search(r"<\d+ x ", ir) for ir in clamped) and any(
        re.search(r"= load <\d+ x i32>", ir) for ir in unclamped
    )
    assert (extra == 0) == fact, f"{site}: +{extra} flops, the clamp stops the vector loop: {fact}"


@needs_cpu_lowerings
def test_a_promise_keeps_the_clamp_on_element_rows_past_the_probed_length():
    # Rows of 65 uint8 (2 MiB): no probe, so no compile beyond the program's own.
    data, ids = np.zeros((4096, 65), np.uint8), (np.arange(32264 * 65, dtype=np.int32) % 8192 - 4096)
    ids = ids.reshape(32264, 65)
    ours, theirs = _element_call(0)
    extra = _flops(jax.jit(ours).lower(*_on_cpu(data, ids))) - _flops(
        jax.jit(theirs).lower(*_on_cpu(data, ids))
    )
    assert extra == 2 * ids.size


# Sites of a fill (80-368 KiB of output), three in AVX-512's band on the AMD EPYC.
FILL_ROW_SITES = {
    "elements axis 0 uint8, rows of 20": (0, (4096, 20), (4096, 20), np.uint8),
    "elements axis 0 float32, rows of 16": (0, (4096, 16), (4096, 16), np.float32),
    "elements last axis float32, rows of 20": (-1, (4096, 20), (4096, 20), np.float32),
    "elements last axis float32, rows of 16": (-1, (4096, 16), (4096, 16), np.float32),
    "1-D data, rows of 23": (None, (4096,), (4096, 23), np.uint8),
}


@needs_cpu_lowerings
@pytest.mark.parametrize("site", list(FILL_ROW_SITES))
def test_a_fill_reads_element_rows_by_zeroed_indices_exactly_where_the_clamp_stops_their_vector_loop(
    site, monkeypatch
):
    # On this CPU: the library's program under jit is the one of zeroed indices exactly where
    # that one reads its indices in vector loads and the clamped one has no vector at all.
    axis, data, ids = _element_site(FILL_ROW_SITES[site])
    if axis is None:
        ours = lambda d, i: jax_gather.gather(d, i)
    else:
        ours = lambda d, i: jax_gather.gather_elements(d, i, axis)
    lowered = {}
    for forced in (None, False, True):  # the library's choice, then each program
        if forced is not None:
            monkeypatch.setattr(_cpu, "clamp_stops_the_fill_loop", lambda *args, f=forced: f)
        jax.clear_caches()
        lowered[forced] = jax.jit(ours).lower(*_on_cpu(data, ids))
    flops = {forced: _flops(low) for forced, low in lowered.items()}
    assert flops[False] != flops[True]  # the clamp against the select
    clamped, unclamped = (_cpu_client.kernel_irs(lowered[forced]) for forced in (False, True))
    fact = not any(re.search(r"<\d+ x ", ir) for ir in clamped) and any(
        re.search(r"= load <\d+ x i32>", ir) for ir in unclamped
    )
    assert flops[None] == flops[fact], f"{site}: the clamp stops the vector loop: {fact}"


def test_a_fill_is_probed_from_its_least_output(monkeypatch):
    asked = []
    monkeypatch.setattr(_cpu_clamp, "_probed", lambda *args, **kwargs: asked.append(args[1:5]) or True)
    fewest = -(-_cpu_clamp.FILL_PROBED_MIN_ELEMENTS // 20)  # rows of 20 uint8
    for rows in (fewest - 1, fewest):
        ids = np.zeros((rows, 20), np.int32)
        plan = plans.gather_elements_plan((4096, 20), ids.shape, 0)
        answer = _cpu_clamp.clamp_stops_the_fill_loop(plan, (4096, 20), np.uint8, ids, _lowering.GENERIC)
        assert answer is (rows == fewest)
    assert asked == [((4096, 20), np.dtype(np.uint8), (fewest, 20), np.dtype(np.int32))]
    # Nor where a lowering replaces the gather or the fill (the probe's program is the select's).
    replaced = dataclasses.replace(_lowering.GENERIC, fill=lambda *args: None)
    assert not _cpu_clamp.clamp_stops_the_fill_loop(plan, (4096, 20), np.uint8, ids, replaced)


def test_only_element_rows_of_one_component_up_to_the_probed_length_are_probed():
    rows = lambda n: plans.gather_elements_plan((4096, n), (64, n), 0)
    assert _cpu_clamp.writes_short_element_rows(rows(23))
    assert _cpu_clamp.writes_short_element_rows(rows(_cpu_clamp.PROBED_MAX_ROW))
    assert not _cpu_clamp.writes_short_element_rows(rows(_cpu_clamp.PROBED_MAX_ROW + 1))
    assert not _cpu_clamp.writes_short_element_rows(plans.gather_plan((4096, 23), (64,), 0))  # rows
    assert _cpu_clamp.writes_short_element_rows(plans.gather_plan((4096,), (64, 23), 0))
    assert not _cpu_clamp.writes_short_element_rows(plans.gather_nd_plan((64, 64), (64, 23, 2)))


def test_the_vector_loop_is_judged_by_vector_loads_of_indices():
    load = "  %wide.load = load <4 x i32>, ptr %33, align 4"
    store_only = "  store <8 x i8> %142, ptr %143, align 1"
    scalar = "  %35 = load i32, ptr %34, align 4"
    assert _cpu_clamp.vector_loop_only_unclamped([scalar], [scalar, load])
    assert not _cpu_clamp.vector_loop_only_unclamped([scalar], [scalar, store_only])  # AVX2's rows of 23
    assert not _cpu_clamp.vector_loop_only_unclamped([scalar, store_only], [load])  # both vectorised
    assert not _cpu_clamp.vector_loop_only_unclamped([scalar], [scalar])


@pytest.mark.parametrize("dtype", ["int4", "uint4"])
@pytest.mark.parametrize("width, count", [(1, 12000), (4, 8000)])
def test_xla_splits_the_fill_loop_of_a_nibble_type_and_keeps_its_in_range_gather_whole(dtype, width, count):
    # What the eager checked call's choice of the fill's program rests on (_eager._dispatched_first):
    # XLA:CPU converts int4 and uint4 to bytes on the way and writes them back a nibble at a time;
    # its in-range gather counts those converts alone (INLINE_FLOPS: on a worker thread anyway, in
    # one task), its fill more flops than bytes, a loop split into a task per core where it splits
    # loops. Without the split the in-range program took 1.09-1.74x jnp's fill, the fill's 0.96-1.02.
    if not jax_gathers(getattr(jnp, dtype)):
        pytest.skip(f"this JAX cannot gather {dtype} (tests.compat.jax_gathers)")
    cell = grid.Cell("gather axis 0", dtype, width, count)
    d, i = _on_cpu(*grid.make_inputs(cell, negatives=False))
    plan = plans.gather_plan(d.shape, i.shape, 0)
    programs = ops._programs(plan, np.zeros((), d.dtype).tobytes())
    in_range, fill = programs(Mode.IN_RANGE), programs(Mode.FILL)
    assert _cpu_client.runs_on_a_worker_thread(in_range, d, i)
    assert not _cpu_split.splits_a_loop(in_range, d, i)
    assert _cpu_split.splits_a_loop(fill, d, i) == _cpu_client.xla_splits_loops()
    expected = Mode.FILL if _cpu_client.xla_splits_loops() else Mode.IN_RANGE
    assert _eager._dispatched_first(plan, programs, d, i) is expected
