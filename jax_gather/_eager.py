"""Eager calls: each signature checked once, then one jitted program per call.

An eager call (concrete arrays, no trace around it) would otherwise pay every time for work that
depends only on its *signature*: the shapes and dtypes of data and indices, where the indices
live (and data's memory space), the attribute, the mode, the fill value and the x64 setting.
Validation, the plan and the fill's bytes are all decided by it. The first call with a signature
goes through the ops' validation, which makes its call (:func:`make_call`); this module
remembers it, and every later call with that signature looks it up and calls it: a
``jax.jit`` of the op with everything static bound in, so JAX dispatches it on its C++ path
with no static arguments to hash.

The only step that depends on the values is the checked mode's bounds test. Where the indices
are on the host (NumPy, or a CPU array, read without a copy), one pass over them proves the
common case, every index in [0, s-1] (:func:`jax_gather._host_bounds.in_range_test`), and the program
then gathers them as they are, with no index arithmetic: a program XLA counts as zero flops,
which JAX's CPU client runs on the calling thread rather than handing to a worker
(``jax_gather._cpu_client.INLINE_FLOPS``). Few enough that their normalisation stays on the
calling thread too, they are judged in one pass (argmin and argmax), and negative ones go to
the program that normalises them. NumPy's 64-bit indices are converted to the int32 of x64 off
here, once judged (JAX's own conversion costs more). Where XLA counts flops in the in-range
gather itself (the converts of a narrow type), that program runs on a worker thread anyway:
it is dispatched first and the indices judged while it runs (:func:`_dispatched_first`; for
int4 and uint4, the fill's program, whose loop XLA splits into a task per core). Indices
elsewhere (an accelerator) are judged there, by one reduction, and one scalar comes back; all
of them are copied to the host only to word the error once one is out of bounds.
"""

from __future__ import annotations

import functools
import math
import struct
from collections.abc import Callable, Hashable
from typing import Any

import jax
import numpy as np

from jax_gather import _cpu
from jax_gather._arguments import Mode, under_a_trace
from jax_gather._buffer_bounds import array_in_range_test, buffer_tests
from jax_gather._cpu_client import (
    CPU_COPIED_INLINE,
    DEFAULT_DEVICE,
    INT32_MAX,
    READ_IN_PLACE_BYTES_PER_ELEMENT,
    READ_IN_PLACE_MIN_BYTES,
    Call,
    aligned_for_cpu,
    data_placed,
    default_device_is_cpu,
    int32_for_cpu,
    narrowed_in_chunks,
    on_host,
    runs_on_a_worker_thread,
    xla_splits_loops,
)
from jax_gather._cpu_split import converted_on_the_way, splits_a_loop
from jax_gather._device_checked import checked_on_device
from jax_gather._eager_unchecked import converted_to_int32, unchecked_call
from jax_gather._fill import element_bits
from jax_gather._host_bounds import (
    NORMALISED_ON_HOST,
    Verdict,
    in_range_test,
    judge,
    judged_outside_range,
    narrow_host_indices,
    raise_if_out_of_bounds,
    verdict_test,
)
from jax_gather._host_gather import Recipe, host_gather, to_jax
from jax_gather._moved_on_host import (
    MOVED_UP_TO,
    SINGLE_DEVICE,
    inline_once,
    may_move,
    normalised_here,
)
from jax_gather._traced_bounds import normalising_is_inline
from jax_gather._x64 import X64_STATE
from jax_gather.plans import GatherPlan

# JAX's concrete array types, which a signature may hold beside NumPy's: added by :func:`register`
# when a first call brings one (so that nothing here creates an array at import).
JAX_ARRAY_TYPES: set[type] = set()
# Enough for every signature of a program's eager calls; cleared whole when full.
_CAPACITY = 512
_calls: dict[Hashable, Call] = {}


def _avals_hold_memory_space() -> bool:  # from JAX 0.5 or so
    try:
        from jax._src.core import ShapedArray
    except ImportError:  # pragma: no cover - another JAX's layout
        return False
    return "memory_space" in getattr(ShapedArray, "__slots__", ())


_AVALS_HOLD_MEMORY_SPACE = _avals_hold_memory_space()

# The indices a checked call of PROBED_FROM or more tests first, where a program would normalise
# them anyway (make_call).
PROBED_INDICES, PROBED_FROM = 4096, 65536


def signature(
    plan_fn: Callable[..., GatherPlan], data: Any, indices: Any, attribute: Any, mode: Any, fill_value: Any
) -> tuple | None:
    """What an eager call's checks and program depend on, or None where it is not cacheable
    (tracers, lists, fill values other than Python scalars, attributes other than ints).

    Every eager call pays for this key, so it reads what it must and no more: a JAX array's
    dtype is always native, and its shape and dtype are read from its aval (each is a property
    of some 50 ns that reads it). A NumPy dtype's byte order is part of it (``>f4`` is not
    ``<f4``), and a signature of swapped bytes is never remembered (:func:`remember`): the
    full path makes them native."""
    data_type = type(data)
    if data_type is np.ndarray:
        data_aval, space = data, None  # NumPy's shape and dtype are plain reads
    elif data_type in JAX_ARRAY_TYPES:
        data_aval = data.aval  # one read for both, where each of a JAX array's is a property
        # Data moved to a device's host memory is judged again (and refused: check_placement).
        space = data_aval.memory_space if _AVALS_HOLD_MEMORY_SPACE else None
    else:
        return None
    # NumPy indices, or a JAX array's sharding: where they live decides where they are checked.
    if type(indices) is np.ndarray:
        indices_aval, where = indices, None
    elif type(indices) in JAX_ARRAY_TYPES:
        indices_aval, where = indices.aval, indices.sharding
        if type(where) is SINGLE_DEVICE:
            # Its device and memory: each new array has a sharding of its own, whose == (in
            # Python) took 0.29 µs of a 5.5 µs call where the key's lookup found it (0.05 as these).
            try:
                where = (where._device, where._memory_kind)
            except AttributeError:  # another JAX's sharding: compared as itself
                pass
    else:
        return None
    if type(attribute) is not int or type(mode) is not str:
        return None  # judged in full every time: errors
    fill: Any
    if fill_value is None:
        fill = None
    elif type(fill_value) is float:
        fill = struct.pack("<d", fill_value)  # its bits: -0.0 is not 0.0, nor one NaN another
    elif type(fill_value) is int or type(fill_value) is bool:
        fill = (type(fill_value), fill_value)  # True == 1, but only True is a bool
    else:
        return None
    return (
        plan_fn,
        data_type,
        data_aval.shape,
        data_aval.dtype,
        indices_aval.shape,
        indices_aval.dtype,
        where,
        attribute,
        mode,
        fill,
        X64_STATE.value,
        space,
    )


def register(*arrays: Any) -> None:
    """Lets signatures hold the type of each of these that is a JAX array."""
    JAX_ARRAY_TYPES.update(type(a) for a in arrays if isinstance(a, jax.Array))


lookup = _calls.get  # the remembered call of a signature, or None: one C call on every eager call


def remember(key: tuple, call: Call) -> None:
    """Remembers a signature's call, unless it holds a dtype of swapped bytes (see :func:`signature`)."""
    if not all(getattr(dtype, "isnative", True) for dtype in (key[3], key[5])):
        return
    if len(_calls) >= _CAPACITY:
        _calls.clear()
    _calls[key] = call


def clear() -> None:
    """Forgets every signature (for tests, and around an export to ONNX, whose programs differ)."""
    _calls.clear()


def make_call(
    plan: GatherPlan, mode: Mode, programs: Callable[[Mode], Call], data: Any, indices: Any
) -> Call:
    """One signature's eager call, ``call(data, indices)``, for arguments like these.

    ``programs(mode)`` gives the jitted op for a mode, with the signature's plan and fill bound
    in: outside the checked mode, and for JAX arrays, that program is the call. In the checked
    mode the verdict on the indices (:class:`Verdict`) picks between the program for indices in
    [0, s-1] (``Mode.IN_RANGE``) and the one that normalises negative indices
    (``Mode.PROMISE_IN_BOUNDS``). NumPy data that JAX's CPU client would copy is read in place
    where that pays (:func:`reads_in_place`), else aligned where that pays. NumPy data and
    indices whose result is small, or rows, are gathered by NumPy instead, in the checked mode
    and under a promise (:func:`_gathered_on_host`).
    """
    in_place = reads_in_place(plan, mode, data, indices)

    def placed(program: Call) -> Call:
        if type(data) is not np.ndarray:
            return program  # the signature holds data's type
        return data_placed(program, data, in_place)

    recipe = host_gather(plan, data, indices) if mode in (Mode.CHECKED, Mode.PROMISE_IN_BOUNDS) else None
    if recipe is not None:
        in_range, promise = placed(programs(Mode.IN_RANGE)), placed(programs(Mode.PROMISE_IN_BOUNDS))
        return _gathered_on_host(plan, mode is Mode.CHECKED, recipe, in_range, promise, indices.size)
    if mode is not Mode.CHECKED:
        if not on_host(indices):
            return placed(programs(mode))  # nothing to prepare on the host (the signature holds both)
        return unchecked_call(plan, mode, programs, placed, data, indices)
    if not on_host(indices):
        return checked_on_device(plan, programs, indices.sharding)
    in_range, promise = placed(programs(Mode.IN_RANGE)), placed(programs(Mode.PROMISE_IN_BOUNDS))
    dtype, size = np.dtype(indices.dtype), indices.size
    test = in_range_test(plan, dtype, size)
    # In [0, s-1], 64-bit host indices convert exactly to the int32 of x64 off, unless an axis
    # is longer than int32 addresses; there they saturate as in every mode (narrow_host_indices).
    narrow = max(plan.index_sizes) > INT32_MAX
    normalised_inline = normalising_is_inline(indices.size)
    # Indices few enough that their program normalises them on the calling thread are judged
    # in one pass, which costs what the test of [0, s-1] alone does (128 int64 ids: 0.70
    # against 0.62 µs), where a failed test was followed by the judgement.
    read_only = type(indices) is not np.ndarray  # a CPU JAX array's host view
    by_argmin_argmax = verdict_test(plan, indices.size, read_only)
    verdict_of = by_argmin_argmax if normalised_inline else None
    if verdict_of is not None:
        if type(indices) is np.ndarray:
            return _checked_few(plan, (test, verdict_of), in_range, promise, _narrowed if narrow else None)
        from_buffer = buffer_tests(plan, np.dtype(indices.dtype), indices.size)
        if from_buffer is not None:
            return _checked_few(plan, from_buffer, in_range, promise, None)
        return _checked_few(plan, (test, verdict_of), in_range, promise, None, host_view=True)
    # Indices some outside [0, s-1], whose normalising program runs on JAX's worker thread, are
    # judged while it runs, dispatched first: more than NORMALISED_ON_HOST NumPy ones (fewer
    # are normalised here, since they go to JAX as an array anyway), and a JAX array's that are
    # not (normalised_here, may_move, inline_once). GatherElements of 8192-65536 float32
    # indices took 1.31-2.97x jnp's "fill" judged first, 0.53-1.14 judged while it ran (AMD
    # EPYC; the worker thread, found asleep after the host's passes, woke while this thread
    # judged).
    # Where the in-range program runs on a worker thread anyway, a program goes before the judgement.
    first = _dispatched_first(plan, programs, data, indices)
    first_program = placed(programs(Mode.FILL)) if first is Mode.FILL else in_range
    jax_moved_here = type(indices) is not np.ndarray and normalised_here(indices, checked=True)
    judged_while_gathered = not normalised_inline and indices.size > NORMALISED_ON_HOST and not jax_moved_here
    in_range_inline = inline_once(programs(Mode.IN_RANGE), indices.size)
    jax_on_worker = type(indices) is not np.ndarray and not normalised_inline

    # x64 off: 64-bit NumPy indices proved in [-s, s-1] convert exactly to int32 here, where
    # JAX's own conversion on the way costs more (16 int64 ids: a program's call 1 µs slower,
    # where the conversion takes 0.35); from CPU_COPIED_INLINE bytes, converted and tested a
    # chunk at a time (narrowed_in_chunks, as a prepared model's run does).
    to_int32 = converted_to_int32(plan, indices)
    in_chunks = to_int32 and indices.nbytes >= CPU_COPIED_INLINE

    # Where a whole pass costs several times NumPy's 1 µs a reduction (from PROBED_FROM
    # indices, or converted in chunks), the first PROBED_INDICES are tested on their own first:
    # negatives spread through the indices (Python's, from the end) fail there, and the indices
    # go to the program that normalises them at once, without the pass (GatherElements along the
    # last axis, 75222 int32 ids a tenth negative: 1.38-1.41 of jnp's fill, 1.63-1.77 after the
    # pass; AMD EPYC, 31 paired rounds). In bounds, the whole test then reads the rest.
    # The probe is of leading rows (of the first dim), some of them: none in indices of one row.
    probed = judged_while_gathered and (in_chunks or indices.size >= PROBED_FROM) and indices.shape[0] > 1
    rows = indices.shape[0] if probed else 0
    probe = min(max(1, PROBED_INDICES * rows // indices.size), rows - 1) if probed else 0

    def in_bounds_for_cpu(indices: np.ndarray) -> np.ndarray:
        """NumPy indices proved in [-s, s-1], as their program takes them."""
        if narrow:
            return _narrowed(indices)
        return int32_for_cpu(indices) if to_int32 else aligned_for_cpu(indices)

    # Where the last call's indices had negatives, the next call's go to the normalising program
    # at once, and the host judges them while it runs, without the test of [0, s-1] before the
    # dispatch (each µs before it delays the program): GatherElements along the last axis of
    # 1024 and 8192 int32 ids of a JAX array, a tenth negative, 1.70 and 1.91 of jnp's fill
    # against 1.85 and 2.15-2.27 after the test (AMD EPYC, JAX 0.10.2, 31 paired rounds). Not at
    # once for indices in [0, s-1]: their program runs on the calling thread, and may have a
    # lowering of its own (Gather of rows of 16 by 8192 ids: 0.40-0.63 of jnp's time against
    # 0.98-1.14 by the normalising one). A JAX array's host view is then taken after the
    # dispatch: dispatched while its view was held, the program of 400 float32 rows of 16 took
    # 8.1-15.3 µs with the verdict, 6.2 when the view followed (AMD EPYC, JAX 0.10.2).
    # Dispatched first, the first call's indices, at hand now, pick its program (not two).
    negatives_last = first is Mode.IN_RANGE and not test(np.asarray(indices))
    # judge's verdict, without its lookup on every call (0.3 of its 1.0 µs on 400 ids)
    judged = by_argmin_argmax or functools.partial(judge, plan)

    def judged_while_gathered_by(program: Call, data: Any, indices: Any, host: np.ndarray | None) -> Any:
        nonlocal negatives_last
        # Out of bounds, its result is dropped (its gather clamps, and reads inside data): the
        # indices go as they would in bounds, wrapped or not; NumPy's as they are, as
        # jax_gather._eager_unchecked.given_as_they_are says (GatherElements along the last axis
        # of 29465 int64 ids, a tenth negative: 1.21 of jnp's fill converted here, 0.83 as they
        # are; of 100000 along axis 0 1.23 and 0.95; 29465 int32 ones 1.54 aligned here, 0.95;
        # AMD EPYC, JAX 0.10.2).
        given = _narrowed(indices) if narrow and type(indices) is np.ndarray else indices
        result = program(data, given)
        if host is None:
            host = np.asarray(indices)
        # The test of [0, s-1] alone where no negatives are expected (one pass, the verdict two).
        verdict = _IN_RANGE if program is not promise and test(host) else judged(host)
        if verdict is _OUT_OF_BOUNDS:
            raise_if_out_of_bounds(plan, host)
        negatives_last = verdict is not _IN_RANGE
        if negatives_last and program is in_range:
            return promise(data, given)  # it read the negatives as they are
        return result

    # A CPU JAX array's test reads its buffer (array_in_range_test), where none is probed first.
    array_test = None if type(indices) is np.ndarray or probe else array_in_range_test(plan, dtype, size)

    def checked(data: Any, indices: Any) -> Any:
        numpy = type(indices) is np.ndarray
        if first is not None:
            program = promise if negatives_last and first is Mode.IN_RANGE else first_program
            return judged_while_gathered_by(program, data, indices, indices if numpy else None)
        if negatives_last:
            return judged_while_gathered_by(promise, data, indices, indices if numpy else None)
        if array_test is not None and array_test(indices):  # the common case: all in [0, s-1]
            return in_range(data, indices)
        host = indices if numpy else np.asarray(indices)  # no copy: the array is on the host
        first_in_range = array_test is None and (not probe or test(host[:probe]))
        if first_in_range and in_chunks and numpy and host.flags.c_contiguous:
            narrowed = narrowed_in_chunks(host, plan, test)
            if narrowed is not None:  # the common case
                return in_range(data, narrowed)
        elif first_in_range and test(host[probe:] if probe else host):  # the common case
            return in_range(data, in_bounds_for_cpu(indices) if numpy else indices)
        moved_here = numpy or (jax_moved_here and may_move(indices) and in_range_inline(data, indices))
        if judged_while_gathered or (jax_on_worker and not moved_here):
            return judged_while_gathered_by(promise, data, indices, host)
        # Up to NORMALISED_ON_HOST NumPy indices are normalised here, and a JAX array's whose
        # normalising program would run on a worker thread (normalised_here); fewer of a JAX
        # array's are normalised by a program on the calling thread (3 flops an index: up to 333
        # components), which costs less than a new transfer.
        verdict, moved = judged_outside_range(plan, host, moved_here, MOVED_UP_TO)
        if verdict is Verdict.OUT_OF_BOUNDS:
            raise_if_out_of_bounds(plan, host)
        if verdict is Verdict.IN_BOUNDS:
            return promise(data, in_bounds_for_cpu(indices) if numpy else indices)
        return in_range(data, in_bounds_for_cpu(moved) if moved is not None else indices)

    return checked


def _dispatched_first(
    plan: GatherPlan, programs: Callable[[Mode], Any], data: Any, indices: Any
) -> Mode | None:
    """The program a checked call of host indices too many to be judged in one pass dispatches
    before judging them, where its in-range program runs on a worker thread anyway (XLA counts
    INLINE_FLOPS in its own gather: the converts of a narrow type, a CPU lowering's arithmetic);
    else None, judged first. Judged first, with the worker thread asleep meanwhile, the program
    then paid its wake: Gather of 8000 bfloat16 ids in [0, s-1] 0.73 of ``jnp``'s "fill",
    dispatched first 0.29; of 65536 1.67 and 1.30, of NumPy's int64 ones 1.16 and 0.78;
    GatherElements of 8192 bfloat16 rows of 16 0.90 and 0.51, Gather of 2000 float8_e4m3fn rows
    of 16 0.59 and 0.26 (AMD EPYC, JAX 0.10.2, 11 paired rounds). Fewer indices, the program
    judged first stayed the faster (Gather of 300 float8_e4m3fn rows of 16: 0.19 against 0.24).

    The program is the in-range one (and the promise's after indices with negatives), or for a
    sub-byte type XLA:CPU converts to bytes (int4, uint4, float4_e2m1fn) the fill's, where XLA
    splits its loop into a task per core and keeps the in-range one whole. Fact: XLA:CPU writes
    these types a nibble at a time, ~5 ns an element on the AMD EPYC; the fill counts more
    flops than bytes, the in-range gather fewer (its converts only). Gather of int4 rows of 1
    by 4000-12000 ids, of 4 by 8000 and along axis 1, GatherElements of 8192 rows of 16, uint4
    by 20000: the in-range program 1.09-1.74 of ``jnp``'s "fill" (whose loop XLA splits too),
    the fill's 0.96-1.02. From FILL_FIRST_FROM_ELEMENTS of output: below, the split's hand-over
    costs more than it saves (XLA counts the convert of all of data, and may split the fill's
    loop of a few ids: GatherElements of 368 int4 ids from rows of 108160, 0.21 of ``jnp``'s
    "fill" by the in-range program, 0.65 by the fill's)."""
    if 0 in plan.index_sizes or not runs_on_a_worker_thread(programs(Mode.IN_RANGE), data, indices):
        return None  # (an empty axis: no index is valid, and the host's judgement says which)
    split_pays = math.prod(plan.output_shape) >= FILL_FIRST_FROM_ELEMENTS
    if split_pays and converted_on_the_way(np.dtype(data.dtype)) and xla_splits_loops():
        if splits_a_loop(programs(Mode.FILL), data, indices) and not splits_a_loop(
            programs(Mode.IN_RANGE), data, indices
        ):
            return Mode.FILL
    return Mode.IN_RANGE


def _gathered_on_host(
    plan: GatherPlan, checked: bool, recipe: Recipe, in_range: Call, promise: Call, size: int
) -> Call:
    """The call of NumPy data and indices whose result is small, or rows
    (:mod:`jax_gather._host_gather`): gathered by NumPy and handed to JAX, checked indices
    judged first (a promise's wrap, so a broken one reads some element of the axis). Constants
    in an open trace go into it as the op's program, as does every call made while the default
    device is not a CPU (the host path was measured on CPUs alone)."""
    verdict_of = verdict_test(plan, size) or functools.partial(judge, plan)
    made_under = DEFAULT_DEVICE.value  # a CPU (host_gather): another is asked about again

    def call(data: Any, indices: Any) -> Any:
        by_program = under_a_trace() or (
            DEFAULT_DEVICE.value is not made_under and not default_device_is_cpu()
        )
        if not checked:
            return promise(data, indices) if by_program else to_jax(recipe(data, indices, _UNJUDGED))
        verdict = verdict_of(indices)
        if verdict is _OUT_OF_BOUNDS:
            raise_if_out_of_bounds(plan, indices)
        if by_program:
            return (in_range if verdict is _IN_RANGE else promise)(data, indices)
        return to_jax(recipe(data, indices, verdict))

    return call


def _checked_few(
    plan: GatherPlan,
    tests: tuple[Callable[[Any], bool], Callable[[Any], Verdict]],
    in_range: Call,
    promise: Call,
    narrowed: Callable[[np.ndarray], np.ndarray] | None,
    host_view: bool = False,
) -> Call:
    """The checked call for host indices few enough to be judged in one pass: ``tests`` are
    their test of [0, s-1] and their verdict (:class:`Verdict`), of the indices as given or of a
    CPU JAX array's ``host_view``. The test, one pass where the verdict takes two, goes first
    unless the last call's indices had negatives (16 ids of a CPU array in [0, s-1]: 0.69
    against 0.98 µs; 129 through the host view 0.91 against 1.31; AMD EPYC). They go to their
    program as they are: JAX's own conversion of 64-bit ones to the int32 of x64 off (exact in
    [-s, s-1]) made the call 0.1-0.4 µs faster than converting them here first (16-333 ids,
    AMD EPYC); where an axis is longer than int32 addresses, NumPy's are ``narrowed``
    (saturated, as in every mode). A CPU JAX array's with negatives are not normalised here,
    even where their program runs on a worker thread (see CHECKED_MOVED_FROM: GatherElements of
    264 float8_e4m3fn ids back to back 1.42 of ``jnp``'s "fill" that way, 2.14 moved here)."""
    in_range_of, verdict_of = tests
    negatives_last = False

    def checked(data: Any, indices: Any) -> Any:
        nonlocal negatives_last
        host = np.asarray(indices) if host_view else indices  # no copy: on the host
        if not negatives_last and in_range_of(host):
            verdict = _IN_RANGE
        else:
            verdict = verdict_of(host)
            if verdict is _OUT_OF_BOUNDS:
                raise_if_out_of_bounds(plan, np.asarray(indices))
            negatives_last = verdict is not _IN_RANGE
        if narrowed is not None:
            indices = narrowed(indices)
        return (in_range if verdict is _IN_RANGE else promise)(data, indices)

    return checked


def reads_in_place(plan: GatherPlan, mode: Mode, data: Any, indices: Any) -> bool:
    """Whether an eager call reads NumPy data in place
    (:func:`jax_gather._cpu_client.data_read_in_place`): data JAX's CPU client would copy, of
    READ_IN_PLACE_MIN_BYTES or more and READ_IN_PLACE_BYTES_PER_ELEMENT per output element,
    where no CPU lowering of the call's programs reads data another way than the generic gather
    (in other units, or padded: measured only for the generic gather). Not sub-byte types,
    which XLA:CPU converts to bytes on the way (measured for none)."""
    if type(data) is not np.ndarray or data.nbytes < READ_IN_PLACE_MIN_BYTES:
        return False
    if element_bits(data.dtype) != 8 * data.dtype.itemsize:
        return False
    if math.prod(plan.output_shape) * READ_IN_PLACE_BYTES_PER_ELEMENT > data.nbytes:
        return False
    if jax.dtypes.canonicalize_dtype(data.dtype) != data.dtype:
        return False  # converted as it goes to JAX: a copy anyway (split_for_cpu)
    dtype = data.dtype
    # Every program its calls may take: the checked mode's two, and "fill"'s and "clip"'s own
    # and the one for indices in [0, s-1] (jax_gather._eager_unchecked.in_range_first).
    own = Mode.PROMISE_IN_BOUNDS if mode is Mode.CHECKED else mode
    for run in (own,) if mode is Mode.PROMISE_IN_BOUNDS else (Mode.IN_RANGE, own):
        low = _cpu.gather_lowering(plan, data.shape, dtype, indices, run)[0]
        if low.forward is not None or (run.fills and low.fill is not None):  # a fill only fills
            return False
    return True


# Output elements of a nibble type from which its checked call's program is the fill's, where XLA
# splits that loop (_dispatched_first): Gather of int4 rows of 1 by 4000 ids, the fill's 1.01 of
# jnp's "fill" against the in-range program's 1.09; of 2 by 2000 and 4 by 1000, 0.96-1.00 either way.
FILL_FIRST_FROM_ELEMENTS = 4096
_OUT_OF_BOUNDS, _IN_RANGE = Verdict.OUT_OF_BOUNDS, Verdict.IN_RANGE  # read on every call: no enum lookups
_UNJUDGED = _OUT_OF_BOUNDS  # a promise's indices, to a host recipe: anywhere


def _narrowed(indices: Any) -> Any:
    if type(indices) is np.ndarray:
        return aligned_for_cpu(narrow_host_indices(indices))
    return indices
