"""Bounds of concrete indices, judged on the host: one test, one verdict.

Eager calls (:mod:`jax_gather._eager`) and a prepared ONNX model's run
(:mod:`jax_gather._backend_program`) judge NumPy indices (and CPU arrays, read without a copy)
here before their program runs: one pass (:func:`in_range_test`) proves the common case, every
index in [0, s-1], which the program then gathers as it is; where it fails,
:func:`judged_outside_range` normalises small indices with negatives here and judges larger ones
by a minimum and a maximum. The error of an out-of-bounds
index is worded here too, naming the first one.

Bounds are always judged on the indices as the caller gave them, per index component against
its own data axis, before any narrowing: an int64 index of 2**32 + 1 is out of bounds, never a
read of row 1 after a wrap to int32.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import numpy as np

from jax_gather._arguments import fail
from jax_gather._x64 import x64_on
from jax_gather.plans import GatherPlan

_INT32 = np.iinfo(np.int32)
INT32_MAX = int(_INT32.max)


@functools.lru_cache(maxsize=64)
def _is_integer(dtype: np.dtype) -> bool:
    return jnp.issubdtype(dtype, jnp.integer)


def host_indices(op_name: str, indices: Any) -> np.ndarray:
    """Indices given as NumPy or an array-like, checked for an integer dtype (before any
    conversion, which would truncate floats) and in native byte order (JAX takes no other)."""
    host = np.asarray(indices)
    if host.size == 0 and host.dtype == np.float64 and not isinstance(indices, np.ndarray):
        host = host.astype(np.int64)  # an empty Python list has no dtype of its own
    check_index_dtype(op_name, host.dtype)
    if not host.dtype.isnative:
        host = host.astype(host.dtype.newbyteorder("="))
    return host


def check_index_dtype(op_name: str, dtype: Any) -> None:
    if not _is_integer(dtype):
        raise fail(
            TypeError,
            op_name,
            f"indices must have an integer dtype (int32 or int64), got {np.dtype(dtype).name}",
        )


def _position(pos: tuple[int | str, ...]) -> str:
    return "indices" if not pos else "indices[" + ", ".join(str(p) for p in pos) + "]"


def _range_text(size: int) -> str:
    return f"valid range [{-size}, {size - 1}]" if size else "the axis is empty: no index is valid"


def raise_if_out_of_bounds(plan: GatherPlan, indices: np.ndarray) -> None:
    """Raises IndexError naming the first (C order) out-of-bounds index of concrete indices."""
    if judge(plan, indices) is not Verdict.OUT_OF_BOUNDS:
        return
    bad = np.zeros(indices.shape, dtype=bool)
    for c, size in enumerate(plan.index_sizes):
        part = indices[..., c] if plan.tuple_indices else indices
        # Python-int bounds keep the comparison exact for every integer dtype (NEP 50).
        part_bad = (part < -size) | (part >= size)
        if plan.tuple_indices:
            bad[..., c] = part_bad
        else:
            bad = part_bad
    if not bad.any():
        return
    pos = tuple(int(p) for p in np.unravel_index(int(np.argmax(bad)), bad.shape))
    component = pos[-1] if plan.tuple_indices else 0
    axis, size = plan.dimension_numbers.start_index_map[component], plan.index_sizes[component]
    message = (
        f"{_position(pos)} = {indices[pos]} is out of bounds for axis {axis} of size {size} "
        f"({_range_text(size)})"
    )
    if plan.tuple_indices:
        tuple_pos = _position((*pos[:-1], ":"))
        message += f"; it is component {component} of the index tuple {tuple_pos}"
    raise fail(IndexError, plan.op_name, message)


SIGNED_TO_UNSIGNED = {np.dtype(f"i{n}"): np.dtype(f"u{n}") for n in (1, 2, 4, 8)}


def in_range_on_host(plan: GatherPlan, indices: np.ndarray) -> bool:
    """Whether every index of concrete ``indices`` is in [0, s-1] of its axis: one pass, as one
    maximum per component of the indices viewed unsigned (a negative index becomes huge)."""
    return in_range_test(plan, indices.dtype, indices.size)(indices)


# Up to this many indices the largest is found faster by argmax, which has no ufunc machinery,
# than by maximum.reduce: measured with NumPy 2 on 64 int32 indices 0.21 against 0.56 µs, on
# 65536 level (int32) or 0.82x (int64); on 2**20 int32, 199 against 181 µs.
ARGMAX_UP_TO = 65536
# Fact (NumPy 2.4): argmax and argmin copy an array that is not writeable first (a CPU JAX
# array's host view, np.frombuffer's), from this many bytes a reduction is the faster: 8192
# int32 1.37 against 1.23 µs, 65536 7.4 against 3.3, 65536 int64 16.5 against 5.8; 2048 int32
# 1.02 against 1.48 (a writeable copy's argmax: 0.28-2.8 µs; AMD EPYC). Below it, such indices
# are copied once for their verdict's argmin and argmax, which would copy them twice (129
# int32 0.60 against 0.71 µs, 2048 0.84 against 1.05; one argmax gains nothing by it). Alone a
# copy stays the faster up to 64 KiB (8192 int32 1.45 against 1.93 by the reductions), but
# there it slowed the call whose program it overlaps: GatherElements of 8192 ids of a JAX array,
# a tenth negative, 0.67-2.09 of jnp's fill in five runs, 0.45-0.46 in three by the reductions.
READ_ONLY_ARGMAX_BELOW = 32768
# Up to this many indices their verdict is found faster from a Python list, by min() and max():
# on 1 int32 index 0.18 against 0.60 µs by argmin and argmax, on 8 0.35 against 0.60, on 16
# level (NumPy 2.4, AMD EPYC); the few-id eager call's one cost besides its program and host view.
# So too a CPU JAX array's test of [0, s-1] (array_in_range_test).
LISTED_UP_TO = 8


def unsigned_bounds(plan: GatherPlan, dtype: np.dtype) -> list[int]:
    """Per index component, the bound below which an index viewed unsigned is in [0, s-1]: s,
    or for a signed dtype whose non-negative values are all below s, where its negatives start
    (2**(bits-1))."""
    limit = int(np.iinfo(dtype).max) + 1 if dtype in SIGNED_TO_UNSIGNED else None
    return [s if limit is None else min(s, limit) for s in plan.index_sizes]


@functools.lru_cache(maxsize=256)
def in_range_test(plan: GatherPlan, dtype: np.dtype, size: int) -> Callable[[np.ndarray], bool]:
    """:func:`in_range_on_host` for indices of this dtype and size, with everything that does
    not depend on their values worked out once."""
    if size == 0:
        return lambda indices: True
    if not all(isinstance(s, int) for s in plan.index_sizes):
        return lambda indices: False  # symbolic axes (jax.export): left to judge
    unsigned = SIGNED_TO_UNSIGNED.get(dtype, dtype)
    bounds = unsigned_bounds(plan, dtype)
    if not plan.tuple_indices:
        (bound,) = bounds
        maximum = np.maximum.reduce  # NumPy's max() without its Python wrapper: ~0.2 µs a call
        by_reduction = lambda indices: int(maximum(indices.view(unsigned), axis=None)) < bound
        if size > ARGMAX_UP_TO:
            return by_reduction

        def by_argmax(indices: np.ndarray) -> bool:
            view = indices.view(unsigned)
            return view.item(view.argmax()) < bound

        if size * np.dtype(dtype).itemsize < READ_ONLY_ARGMAX_BELOW:
            return by_argmax
        return lambda indices: (by_argmax if indices.flags.writeable else by_reduction)(indices)

    # One component at a time, a strided pass each: NumPy's maximum over the leading axes of
    # (n, k) indices took 2.9 ms on 262144 pairs, these 70 µs (4096 pairs: 46 against 3.3 µs).
    maximum = np.maximum.reduce

    def test(indices: np.ndarray) -> bool:
        view = indices.view(unsigned)
        return all(int(maximum(view[..., k], axis=None)) < bound for k, bound in enumerate(bounds))

    return test


def normalised_on_host(plan: GatherPlan, indices: np.ndarray) -> np.ndarray | None:
    """Concrete ``indices`` with each negative index moved into [0, s-1] (a new array, in the
    indices' dtype where it holds every s, else int64), or None where one is out of bounds:
    an index in [-s, s-1] lands in [0, s-1] and any other outside it, so one pass over the
    result judges them all."""
    moved = moved_in_range(plan, indices)
    return moved if in_range_on_host(plan, moved) else None


def moved_in_range(plan: GatherPlan, indices: np.ndarray) -> np.ndarray:
    """Concrete ``indices`` with each i in [-s, -1] moved to i + s (a new array, in the indices'
    dtype where it holds every s, else int64); any other outside [-s, s-1] lands outside
    [0, s-1]. Two passes, where % s divides an index at a time (8192 int64: 2.9 against 15 us)."""
    sizes = _host_sizes(plan, indices.dtype)
    unsigned = SIGNED_TO_UNSIGNED.get(indices.dtype)
    if unsigned is None or sizes.dtype != indices.dtype:
        return indices + (indices < 0) * sizes  # unsigned: nothing to move; or a wider dtype
    # min(u, u + s) of the indices viewed unsigned, as in in_bounds_mask: i + s for i in
    # [-s, -1], i for i in [0, s-1], and s or more for every other (sizes fit the dtype).
    u = indices.view(unsigned)
    return np.minimum(u, u + _host_sizes(plan, unsigned)).view(indices.dtype)


@functools.lru_cache(maxsize=256)
def _host_sizes(plan: GatherPlan, dtype: np.dtype) -> Any:
    """The axis sizes in ``dtype`` where it holds them all, else in int64: one per index
    component, or a scalar for one index per element."""
    fits = max(plan.index_sizes) <= np.iinfo(dtype).max
    sizes = np.asarray(plan.index_sizes, dtype if fits else np.int64)
    return sizes if plan.tuple_indices else sizes[0]


class Verdict(enum.IntEnum):
    """Where indices lie: the one answer of every bounds test, on the host or on a device (an
    int8 the device's reduction sends back)."""

    OUT_OF_BOUNDS = 0  # some index outside [-s, s-1]
    IN_BOUNDS = 1  # every index in [-s, s-1], some negative: normalised before the gather
    IN_RANGE = 2  # every index in [0, s-1]: gathered as it is


# Host indices up to this many with negatives are normalised here, so that the program gathers
# them as they are. Fact: a program that normalises them counts 3-7 flops per index, which sends
# all but the shortest past INLINE_FLOPS to JAX's worker thread (10-100 us), where NumPy
# normalises 4096 indices in about 6 us. Larger ones are judged by a minimum and a maximum and
# normalised in the program, which is then as long as the gather anyway.
NORMALISED_ON_HOST = 4096


def judged_outside_range(
    plan: GatherPlan, indices: np.ndarray, normalise: bool, normalised_up_to: int = NORMALISED_ON_HOST
) -> tuple[Verdict, np.ndarray | None]:
    """The verdict on concrete host ``indices``, and the indices to gather where it is
    ``IN_RANGE``: ``indices`` themselves, or (``normalise``, up to ``normalised_up_to``)
    their copy with every negative index moved into [0, s-1]. Right for any indices; callers
    run the one pass of :func:`in_range_test` first, which proves the common case, every index
    in [0, s-1], and call this where it fails (for 2**20 int64 indices the pass took 0.26-0.29
    ms, where a minimum and a maximum took 0.52-0.58 ms)."""
    if normalise and indices.size <= normalised_up_to:
        moved = normalised_on_host(plan, indices)
        return (Verdict.OUT_OF_BOUNDS, None) if moved is None else (Verdict.IN_RANGE, moved)
    verdict = judge(plan, indices)
    return verdict, indices if verdict is Verdict.IN_RANGE else None


@functools.lru_cache(maxsize=256)
def verdict_test(
    plan: GatherPlan, size: int, read_only: bool = False
) -> Callable[[np.ndarray], Verdict] | None:
    """For up to ``ARGMAX_UP_TO`` indices, one per element, :func:`judge`'s verdict by argmin and
    argmax, which have no ufunc machinery: on 64 int32 indices 0.75 µs, where min() and max()
    took 2.5, and the in-range test alone 0.65 (up to LISTED_UP_TO indices, by Python's min and
    max of a list). Indices that are not writeable (a CPU JAX array's host view: ``read_only``,
    else asked where it matters) are copied once first, and from READ_ONLY_ARGMAX_BELOW bytes
    judged by a minimum and a maximum instead. None for others (index tuples, more indices,
    symbolic sizes)."""
    (bound,) = plan.index_sizes if not plan.tuple_indices else (None,)
    if not isinstance(bound, int) or not 0 < size <= ARGMAX_UP_TO:
        return None

    low_bound, out, in_range, in_bounds = -bound, Verdict.OUT_OF_BOUNDS, Verdict.IN_RANGE, Verdict.IN_BOUNDS

    def by_list(indices: np.ndarray) -> Verdict:
        values = indices.ravel().tolist()
        low, high = min(values), max(values)
        if low < low_bound or high >= bound:
            return out
        return in_range if low >= 0 else in_bounds

    def by_argmin_argmax(indices: np.ndarray) -> Verdict:
        low, high = indices.item(indices.argmin()), indices.item(indices.argmax())
        if low < low_bound or high >= bound:
            return out
        return in_range if low >= 0 else in_bounds

    if size <= LISTED_UP_TO:
        return by_list
    if size * 8 < READ_ONLY_ARGMAX_BELOW:  # whatever their integer type
        return (lambda indices: by_argmin_argmax(indices.copy())) if read_only else by_argmin_argmax

    def where_writeable(indices: np.ndarray) -> Verdict:
        if indices.flags.writeable:
            return by_argmin_argmax(indices)
        if indices.nbytes < READ_ONLY_ARGMAX_BELOW:
            return by_argmin_argmax(indices.copy())
        return _by_reductions(plan, indices)

    return where_writeable


def judge(plan: GatherPlan, indices: np.ndarray) -> Verdict:
    """Where concrete ``indices`` lie, by a minimum and a maximum per component (two passes, no
    temporaries; :func:`verdict_test` where it applies)."""
    if indices.size == 0:
        return Verdict.IN_RANGE
    by_argmin_argmax = verdict_test(plan, indices.size, not indices.flags.writeable)
    if by_argmin_argmax is not None:
        return by_argmin_argmax(indices)
    return _by_reductions(plan, indices)


def _by_reductions(plan: GatherPlan, indices: np.ndarray) -> Verdict:
    """:func:`judge`'s verdict by a minimum and a maximum per component."""
    parts = [indices[..., k] for k in range(indices.shape[-1])] if plan.tuple_indices else [indices]
    lows = [int(np.minimum.reduce(p, axis=None)) for p in parts]  # a component at a time: in_range_test
    highs = [int(np.maximum.reduce(p, axis=None)) for p in parts]
    if not all(-size <= low and high < size for low, high, size in zip(lows, highs, plan.index_sizes)):
        return Verdict.OUT_OF_BOUNDS
    return Verdict.IN_RANGE if min(lows) >= 0 else Verdict.IN_BOUNDS


def narrow_host_indices(indices: np.ndarray) -> np.ndarray:
    """With x64 off JAX would wrap 64-bit indices to int32; saturate them instead.

    Where every index fits int32 (the common case, proved by argmin and argmax, which have no
    ufunc machinery) a plain conversion is exact: on 16 int64 indices 1.4 µs, where the clip
    took 5.9; on 2**20, 363 against 659 µs (AMD EPYC, NumPy 2.4)."""
    if x64_on() or indices.dtype.itemsize < 8:
        return indices
    if fits_int32(indices):
        return indices.astype(np.int32)
    if indices.dtype.kind == "u":
        return np.minimum(indices, _INT32.max).astype(np.int32)
    return np.clip(indices, _INT32.min, _INT32.max).astype(np.int32)


def fits_int32(indices: np.ndarray) -> bool:
    """Whether every one of integer host ``indices`` fits int32, so that a plain conversion is
    exact: by argmin and argmax up to ARGMAX_UP_TO, by a minimum and a maximum beyond."""
    if indices.size == 0:
        return True
    if indices.size <= ARGMAX_UP_TO:
        low, high = indices.item(indices.argmin()), indices.item(indices.argmax())
    else:
        low, high = int(np.minimum.reduce(indices, axis=None)), int(np.maximum.reduce(indices, axis=None))
    return _INT32.min <= low and high <= _INT32.max
