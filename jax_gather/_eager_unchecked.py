"""Eager calls of host indices in the modes that never raise: "fill", "clip" and a promise.

A CPU JAX array's promise may have its negatives normalised on the host
(:mod:`jax_gather._moved_on_host`).

NumPy indices go to JAX as they are (:func:`given_as_they_are`): where their program runs on
JAX's worker thread, JAX's conversion of 64-bit ones to the int32 of x64 off, and its client's
copy, are read there from that core's cache, where a copy converted or aligned here was read
from the other core's.

"fill" and "clip" normalise negative indices and clamp them: from some hundreds of index
components XLA counts INLINE_FLOPS in that arithmetic, and JAX's CPU client runs the program on
a worker thread (tens of microseconds more; ~45 to wake it after other work). Host indices in
[0, s-1], the common case, need none of it: where one pass proves them so, they go to the
program that gathers them as they are, which runs on the calling thread
(:func:`in_range_first`), as the checked mode's do (``jax_gather._eager.make_call``); a
CPU JAX array's in "fill" from TESTED_FROM_INDICES index components and TESTED_FROM_ELEMENTS
output elements, in "clip" at every size (``jnp.take``'s clip always runs on the calling thread).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from jax_gather._arguments import Mode
from jax_gather._buffer_bounds import array_in_range_test
from jax_gather._cpu_client import (
    CPU_COPIED_INLINE,
    INT32_MAX,
    Call,
    aligned_for_cpu,
    int32_for_cpu,
    narrowed_in_chunks,
)
from jax_gather._host_bounds import fits_int32, in_range_test, narrow_host_indices
from jax_gather._moved_on_host import inline_once, normalised_here, on_one_cpu, promised_on_host, worker_bound
from jax_gather._traced_bounds import normalising_is_inline
from jax_gather._x64 import x64_on
from jax_gather.plans import GatherPlan


def unchecked_call(
    plan: GatherPlan,
    mode: Mode,
    programs: Callable[[Mode], Any],
    placed: Callable[[Any], Call],
    data: Any,
    indices: Any,
) -> Call:
    """The eager call of host indices (NumPy, or a JAX array in CPU memory) in ``mode`` ("fill",
    "clip" or a promise): ``programs(mode)`` is a mode's jitted program, ``placed(program)`` its
    call with data placed for the CPU client (``jax_gather._cpu_client.data_placed``).
    Arguments like these decide it (the signature holds them)."""
    numpy = type(indices) is np.ndarray
    program = placed(programs(mode))
    if mode is Mode.PROMISE_IN_BOUNDS and not numpy:
        inline = _promise_moves(programs, data, indices)
        if inline is None:
            return program
        test = in_range_test(plan, np.dtype(indices.dtype), indices.size)
        return promised_on_host(plan, test, inline, placed(programs(Mode.IN_RANGE)), program)
    given = given_as_they_are(plan, mode, program, indices) if numpy else program
    if mode not in (Mode.FILL, Mode.CLIP) or max(plan.index_sizes) > INT32_MAX:
        return given
    if not (numpy or (on_one_cpu(indices) and _tested(plan, mode, indices.size))):
        return given
    # Asked once, now, of the programs the first call would compile anyway (and the other).
    if not worker_bound(programs(mode), programs(Mode.IN_RANGE), data, indices):
        return given
    return in_range_first(plan, placed(programs(Mode.IN_RANGE)), given, indices)


def _promise_moves(
    programs: Callable[[Mode], Any], data: Any, indices: Any
) -> Callable[[Any, Any], bool] | None:
    """For a CPU JAX array's indices under a promise, where their negatives may be normalised on
    the host (:func:`jax_gather._moved_on_host.promised_on_host`): whether, at a call, the
    program that gathers indices in [0, s-1] then runs on the calling thread; None where they
    never are."""
    if normalised_here(indices, checked=False):
        return inline_once(programs(Mode.IN_RANGE), indices.size)
    # Asked once, now, of the programs the first call would compile anyway.
    few = normalising_is_inline(indices.size) and on_one_cpu(indices)
    if few and worker_bound(programs(Mode.PROMISE_IN_BOUNDS), programs(Mode.IN_RANGE), data, indices):
        return _ALWAYS
    return None


_ALWAYS: Callable[[Any, Any], bool] = lambda data, indices: True


def converted_to_int32(plan: GatherPlan, indices: Any) -> bool:
    """Whether NumPy indices are 64-bit ones that JAX would convert to int32 (x64 off), for
    axes that int32 addresses: in [-s, s-1], the conversion is exact."""
    if type(indices) is not np.ndarray or indices.dtype.itemsize != 8 or x64_on():
        return False
    return max(plan.index_sizes) <= INT32_MAX


def _tested(plan: GatherPlan, mode: Mode, components: int) -> bool:
    """Whether a CPU JAX array's indices in ``mode`` go to the test of [0, s-1] (where the mode's
    program runs on a worker thread and the in-range one here: :func:`unchecked_call`)."""
    if mode is Mode.CLIP:
        return True  # why: the comment on TESTED_FROM_INDICES
    return components >= TESTED_FROM_INDICES and math.prod(plan.output_shape) >= TESTED_FROM_ELEMENTS


def given_as_they_are(plan: GatherPlan, mode: Mode, program: Call, indices: np.ndarray) -> Call:
    """NumPy indices to ``program`` as they are. Where it runs on JAX's worker thread (from some
    hundreds, where a copy here would pay) this was the faster: GatherElements along the last
    axis of 29465 int64 ids (rows of 53), a promise, 0.57 of jnp's call converted here, 0.37 as
    they are; of 65536 0.62 and 0.50; "fill" of 29465 int32 ones with 30 µs of other work
    between calls 1.40 aligned here, 0.99 (AMD EPYC, JAX 0.10.2; level or better through JAX
    0.12.1). 64-bit ones wrap to int32 on the way: exact where every one fits, as a kept
    promise's do; in "clip" and "fill" the host tests that they do while the program runs, and
    where one does not the call is made again of them saturated, as in every mode
    (narrow_host_indices)."""
    if indices.dtype.itemsize < 8 or x64_on():
        return program
    if max(plan.index_sizes) > INT32_MAX:
        return lambda data, indices: program(data, narrow_host_indices(indices))
    if mode is Mode.PROMISE_IN_BOUNDS:
        return program

    def tested_while_gathered(data: Any, indices: Any) -> Any:
        result = program(data, indices)
        return result if fits_int32(indices) else program(data, narrow_host_indices(indices))

    return tested_while_gathered


# A CPU JAX array's "fill" indices go to the test from this many index components and output elements:
# fewer, called back to back, the mode's program on an awake worker thread was the faster
# ("fill" in [0, s-1], Gather of 200 and 500 float32 rows of 16: 1.13 and 1.17 of jnp's that way,
# 1.33 and 1.41 tested here; GatherElements of 500 and 1024-2048 ids 1.14-1.16 against 1.28-1.44),
# from them the test (Gather of 1024 rows of 16 0.83 against 1.04, 2048 rows of 4 0.22-0.84
# against 0.99-1.08, GatherElements of 4096-8192 ids 0.23-0.49 against 1.06-2.01; "clip" of
# Gather, against jnp.take's, which does not normalise negative indices, 1.34-1.45 against
# 3.2-8.5). With 30 µs of other work after each call the test was the faster at every size
# (0.15-0.38 against 0.92-1.03: the worker thread asleep, ~45 µs to wake). NumPy's are tested at
# every size: jnp's call converts and copies them (200 ids back to back 0.57 tested, 1.48 not).
# AMD EPYC, JAX 0.10.2, 11 paired rounds.
TESTED_FROM_INDICES, TESTED_FROM_ELEMENTS = 1024, 4096
# Its "clip" indices at every size where the test can pay (unchecked_call): jnp.take's clip, which
# does not normalise negatives, counts no flops, so its program runs on the calling thread at
# every size, where jnp's "fill" goes to a worker thread from about as many ids as the library's
# (3 flops an index and more; the library's clip counts 2-3 up to 333 components, then 6: from
# there on a worker thread). Gather of 300-1000 float32 ids (rows of 4 and 16) and 400 int8 ids,
# in [0, s-1], by a clip program on a worker thread (at 300-400 ids a 4-flop form): 5.1-12.6 of
# jnp.take's clip untested back to back, 11.5-11.9 with 30 µs of other work after each call,
# 1.39-1.47 tested either way (AMD EPYC, JAX 0.10.2, 11 paired rounds).
# After a call whose indices were not all in [0, s-1], this many calls go to the mode's program
# untested: a test on every call (after the dispatch, while the program ran) cost GatherElements
# of 1024 JAX-array ids with a tenth negative 1.30 of jnp's "fill" back to back against 1.04
# untested, and of 131072 NumPy int64 ids 1.42 against 1.25.
UNTESTED_AFTER_OUTSIDE = 15


def in_range_first(plan: GatherPlan, in_range: Call, given: Call, indices: Any) -> Call:
    """A "fill" or "clip" call whose host indices go to ``in_range`` where one pass proves them
    in [0, s-1], else to ``given``, the mode's own, as do the UNTESTED_AFTER_OUTSIDE calls after.
    64-bit NumPy ones are converted here to the int32 of x64 off for ``in_range``, which runs on
    this thread (from CPU_COPIED_INLINE bytes a chunk at a time, each tested while in the core's
    cache), and others aligned where JAX's client would copy them on its worker thread
    (aligned_for_cpu)."""
    numpy = type(indices) is np.ndarray
    dtype = np.dtype(indices.dtype)
    test = (
        in_range_test(plan, dtype, indices.size) if numpy else array_in_range_test(plan, dtype, indices.size)
    )
    to_int32 = converted_to_int32(plan, indices)
    in_chunks = to_int32 and indices.nbytes >= CPU_COPIED_INLINE
    untested = 0

    def call(data: Any, indices: Any) -> Any:
        nonlocal untested
        if untested:
            untested -= 1
            return given(data, indices)
        if in_chunks and indices.flags.c_contiguous:
            narrowed = narrowed_in_chunks(indices, plan, test)
            if narrowed is not None:
                return in_range(data, narrowed)
        elif test(indices):
            return in_range(
                data, int32_for_cpu(indices) if to_int32 else aligned_for_cpu(indices) if numpy else indices
            )
        untested = UNTESTED_AFTER_OUTSIDE
        return given(data, indices)

    return call
