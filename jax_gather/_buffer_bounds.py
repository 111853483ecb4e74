"""A CPU JAX array's indices judged from its buffer, without a host view.

Few indices of a JAX array on the CPU are tested and judged by Python, from the bytes their
buffer exports (the buffer protocol waits for the array to be ready, as ``np.asarray`` does):
as the Python ints it holds (``struct.unpack_from``), or as one Python int whose lanes, one an
index, a few masks test at once (:func:`_lanes_below`). Each is checked against NumPy at every
value and bound in ``tests/test_eager.py``; what it saves is measured beside its constant.
"""

from __future__ import annotations

import functools
import struct
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from jax_gather._host_bounds import (
    LISTED_UP_TO,
    READ_ONLY_ARGMAX_BELOW,
    SIGNED_TO_UNSIGNED,
    Verdict,
    in_range_test,
    unsigned_bounds,
    verdict_test,
)
from jax_gather.plans import GatherPlan

# The struct codes of the integer dtypes whose values a buffer gives Python (buffer_tests).
_STRUCT_CODES = {
    np.dtype(f"{kind}{n}"): code
    for kind, codes in (("i", "bhiq"), ("u", "BHIQ"))
    for n, code in zip((1, 2, 4, 8), codes)
}
# Where one int's lanes cannot judge them (_verdict_as_one_int: a signed dtype's axis longer
# than a quarter of its range, int8 ids past 64, or an unsigned dtype's past half), up to this
# many indices of a CPU JAX array are judged from the Python ints its buffer holds
# (struct.unpack_from), without a host view (np.asarray of a CPU array: 0.56 µs)
# or a NumPy call: view and verdict of 1, 8, 16 and 32 int32 ids took 0.50, 0.69, 0.96 and 1.50
# µs, by the host view's argmin and argmax 1.30, 1.31, 1.33 and 1.37 (NumPy 2.4, AMD EPYC).
BUFFER_LISTED_UP_TO = 16


@functools.lru_cache(maxsize=256)
def buffer_tests(
    plan: GatherPlan, dtype: np.dtype, size: int
) -> tuple[Callable[[Any], bool], Callable[[Any], Verdict]] | None:
    """:func:`in_range_test` and :func:`verdict_test` of indices that export a buffer of their
    values (a JAX array on the CPU), of a whole-byte integer dtype, below READ_ONLY_ARGMAX_BELOW
    bytes: the test :func:`array_in_range_test`; the verdict of the buffer read as one Python int
    (:func:`_verdict_as_one_int`) where it can say it, else, up to BUFFER_LISTED_UP_TO, of the
    Python ints the buffer holds, else of their host view. None for others. Any order of the
    values serves (a minimum and a maximum). An array that gives no buffer (a deleted one, whose
    error is then JAX's) is judged by its host view."""
    by_view = verdict_test(plan, size, read_only=True)
    code = _STRUCT_CODES.get(dtype)
    if by_view is None or code is None or size * dtype.itemsize >= READ_ONLY_ARGMAX_BELOW:
        return None
    in_range_of = array_in_range_test(plan, dtype, size)
    by_one_int = _verdict_as_one_int(plan, dtype, size, by_view)
    if by_one_int is not None:
        return in_range_of, by_one_int
    if size > BUFFER_LISTED_UP_TO:
        return in_range_of, lambda indices: by_view(np.asarray(indices))
    unpack = struct.Struct(f"={size}{code}").unpack_from
    (bound,) = plan.index_sizes
    low_bound, out, in_range, in_bounds = -bound, Verdict.OUT_OF_BOUNDS, Verdict.IN_RANGE, Verdict.IN_BOUNDS

    def verdict_from_buffer(indices: Any) -> Verdict:
        try:
            values = unpack(indices)
        except BufferError:
            return by_view(np.asarray(indices))
        low, high = min(values), max(values)
        if low < low_bound or high >= bound:
            return out
        return in_range if low >= 0 else in_bounds

    return in_range_of, verdict_from_buffer


# Below this many bytes, a CPU JAX array's test of [0, s-1] past LISTED_UP_TO ids reads its
# buffer as one Python int (int.from_bytes) and tests every index at once, a lane of the int
# each (:func:`_lanes_below`): 16, 40, 64 and 124 int32 ids 0.59, 0.67, 0.72 and 0.97 µs, where
# the Python ints of struct.unpack_from and their max took 0.61-1.00 and NumPy's view of the
# buffer and its argmax 1.03-1.08. The Python int's conversion grows with the bytes: at 576
# (144 int32 ids, 72 int64) the two are level (1.01-1.03 µs), at 704 NumPy's the faster (1.04
# against 1.12-1.14; NumPy 2.4, Python 3.11, AMD EPYC).
LANES_BELOW_BYTES = 576


@functools.lru_cache(maxsize=256)
def array_in_range_test(plan: GatherPlan, dtype: np.dtype, size: int) -> Callable[[Any], bool]:
    """:func:`in_range_test` of a CPU JAX array's indices, given the array, for one index
    component of a whole-byte integer dtype below READ_ONLY_ARGMAX_BELOW bytes, read from its
    buffer, viewed unsigned: up to LISTED_UP_TO as Python ints (struct.unpack_from, then max:
    1-8 int32 ids 0.40-0.49 µs, as one int 0.51-0.54); more, below LANES_BELOW_BYTES, as one
    Python int (where the bound allows: :func:`_lanes_below`); else by NumPy (np.frombuffer,
    without a host view in their own dtype to view again: 129 int32 ids 0.94 µs against 1.19).
    Others, and an array that gives no buffer (a deleted one, whose error is then JAX's),
    through the host view."""
    by_view = in_range_test(plan, dtype, size)
    code = _STRUCT_CODES.get(dtype)
    if plan.tuple_indices or code is None or not 0 < size * dtype.itemsize < READ_ONLY_ARGMAX_BELOW:
        return lambda indices: by_view(np.asarray(indices))
    (in_range_below,) = unsigned_bounds(plan, dtype)
    if size <= LISTED_UP_TO:
        unpack_unsigned = struct.Struct(f"={size}{code.upper()}").unpack_from

        def listed(indices: Any) -> bool:
            try:
                return max(unpack_unsigned(indices)) < in_range_below
            except BufferError:
                return by_view(np.asarray(indices))

        return listed
    few_bytes = size * dtype.itemsize < LANES_BELOW_BYTES
    lanes = _lanes_below(8 * dtype.itemsize, size, in_range_below) if few_bytes else None
    if lanes is not None:
        from_bytes, byteorder = int.from_bytes, sys.byteorder
        highs, lifted = lanes

        def as_one_int(indices: Any) -> bool:
            try:
                value = from_bytes(indices, byteorder)
            except BufferError:
                return by_view(np.asarray(indices))
            return not value & highs and (not lifted or not (value + lifted) & highs)

        return as_one_int
    unsigned = SIGNED_TO_UNSIGNED.get(dtype, dtype)
    frombuffer = np.frombuffer

    def in_range_from_buffer(indices: Any) -> bool:
        try:
            view = frombuffer(indices, unsigned)
        except (BufferError, ValueError):
            return by_view(np.asarray(indices))
        return view.item(view.argmax()) < in_range_below

    return in_range_from_buffer


def _verdict_as_one_int(
    plan: GatherPlan, dtype: np.dtype, size: int, by_view: Callable[[np.ndarray], Verdict]
) -> Callable[[Any], Verdict] | None:
    """The verdict on a buffer's ``size`` indices of ``dtype`` (one component, below
    LANES_BELOW_BYTES) read as one Python int, a lane each, as :func:`array_in_range_test`'s
    test reads them (``by_view`` where the array gives no buffer); None where the bounds allow no
    such test. Every lane below s says IN_RANGE;
    else, of a signed dtype with some lane negative, each lane's x + s (added lane by lane:
    its sign bit set aside so that no carry leaves it, then put back by exclusive or) below 2s
    says IN_BOUNDS. Of 40 and 129 int32 ids with negatives 1.25 and 1.75 µs, where the host
    view's argmin and argmax took 2.3; of 16, 1.13, where struct.unpack_from, min and max took
    1.55 (AMD EPYC with AVX2, Zen 3, NumPy 2.4)."""
    if plan.tuple_indices or not 0 < size * dtype.itemsize < LANES_BELOW_BYTES:
        return None
    bits, (bound,), signed = 8 * dtype.itemsize, plan.index_sizes, dtype in SIGNED_TO_UNSIGNED
    if not isinstance(bound, int):
        return None
    below = _lanes_below(bits, size, bound)
    within = _lanes_below(bits, size, 2 * bound) if signed else below  # unsigned: never asked
    if below is None or within is None:
        return None
    (highs, lifted), (wide_highs, wide_lifted) = below, within
    signs = _repeated(1 << (bits - 1), bits, size) if signed else 0
    added = _repeated(bound, bits, size)
    from_bytes, byteorder = int.from_bytes, sys.byteorder
    out, in_range, in_bounds = Verdict.OUT_OF_BOUNDS, Verdict.IN_RANGE, Verdict.IN_BOUNDS

    def verdict_as_one_int(indices: Any) -> Verdict:
        try:
            value = from_bytes(indices, byteorder)
        except BufferError:
            return by_view(np.asarray(indices))
        negative = value & signs
        if not negative:
            return in_range if not value & highs and (not lifted or not (value + lifted) & highs) else out
        moved = ((value ^ negative) + added) ^ negative  # each lane x + s, its sign bit aside
        return (
            out if moved & wide_highs or (wide_lifted and (moved + wide_lifted) & wide_highs) else in_bounds
        )

    return verdict_as_one_int


def _repeated(lane: int, bits: int, count: int) -> int:
    """``count`` lanes of ``bits`` bits, each ``lane``, as one Python int in the machine's byte order."""
    return int.from_bytes(lane.to_bytes(bits // 8, sys.byteorder) * count, sys.byteorder)


def _lanes_below(bits: int, count: int, bound: int) -> tuple[int, int] | None:
    """The two constants that test ``count`` unsigned ``bits``-wide lanes of one Python int
    (a buffer's values, in its byte order) against ``bound`` at once: every lane is below
    ``bound`` where ``value & highs`` is 0 and, unless ``lifted`` is 0, ``(value + lifted) &
    highs`` too. With 2**k the least power of two not below ``bound``, ``highs`` holds each
    lane's bits from k up, so the first says every lane is below 2**k; ``lifted`` adds 2**k -
    ``bound`` to each, which then carries into no other lane and sets bit k of a lane where it is
    ``bound`` or more. A power of two needs the first alone (129 int32 ids: one and of the int,
    0.09 µs, where the three ops take 0.27). None where ``bound`` exceeds 2**(bits-1) (an
    unsigned dtype's long axis)."""
    if bound > 1 << (bits - 1):
        return None
    power = 1 << max(bound - 1, 0).bit_length()
    return _repeated((1 << bits) - power, bits, count), _repeated(power - bound, bits, count)
