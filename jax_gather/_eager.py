"""Eager calls: each signature checked once, then one jitted program per call.

An eager call (concrete arrays, no trace around it) would otherwise pay every time for work that
depends only on its *signature*: the shapes and dtypes of data and indices, where the indices
live, the attribute, the mode, the fill value and the x64 setting. Validation, the plan and the
fill's bytes are all decided by it. The first call with a signature goes through ``ops._run``,
which validates and makes its call (:func:`make_call`); this module remembers it, and every later
call with that signature looks it up and calls it: a ``jax.jit`` of the op with everything
static bound in, so JAX dispatches it on its C++ path with no static arguments to hash.

The only step that depends on the values is the checked mode's bounds test. Where the indices
are on the host (NumPy, or a CPU array, read without a copy), one pass over them proves the
common case, every index in [0, s-1], and the program then gathers them as they are, with no
index arithmetic: a program XLA counts as zero flops, which JAX's CPU client runs on the calling
thread rather than handing to a worker (``jax_gather._cpu.INLINE_FLOPS``). Indices elsewhere (an
accelerator) are judged there, by one reduction, and one scalar comes back; all of them are
copied to the host only to word the error once one is out of bounds.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable, Hashable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jax_gather import _bounds
from jax_gather._x64 import x64_on
from jax_gather.plans import GatherPlan

Call = Callable[[Any, Any], Any]  # call(data, indices), an eager call or a jitted program

# The concrete array types a signature may hold: NumPy's, and JAX's own array type, which
# ops._run adds when it first sees one (so that nothing here creates an array at import).
ARRAY_TYPES: set[type] = {np.ndarray}
# Host indices up to this many are tested in one pass (a maximum of the indices viewed unsigned),
# and NumPy ones with negatives normalised on the host, so that the program gathers them as they
# are. Fact: a program that normalises them in XLA counts 3-7 flops per index, which sends all but
# the shortest over INLINE_FLOPS to JAX's worker thread; that handoff measured 10-100 us here,
# where NumPy normalises 4096 indices in about 6 us. Larger ones are judged by a minimum and a
# maximum, which also tell whether they are in [0, s-1]: for 2**20 int64 indices the one pass
# took 0.26-0.29 ms and the two 0.52-0.58 ms, so one pass first would cost 1.5x where negatives
# follow, and save half only where none do.
SMALL_HOST_INDICES = 4096
# Enough for every signature of a program's eager calls; cleared whole when full.
_CAPACITY = 512
_calls: dict[Hashable, Call] = {}


def signature(
    plan_fn: Callable[..., GatherPlan], data: Any, indices: Any, attribute: Any, mode: Any, fill_value: Any
) -> tuple | None:
    """What an eager call's checks and program depend on, or None where it is not cacheable
    (tracers, lists, fill values other than Python scalars, attributes other than ints)."""
    if type(data) not in ARRAY_TYPES or type(indices) not in ARRAY_TYPES:
        return None
    if type(attribute) is not int or type(mode) is not str:
        return None  # judged in full every time: errors
    if not (indices.dtype.isnative and data.dtype.isnative):
        return None  # swapped bytes, which the full path makes native
    fill: Any
    if fill_value is None:
        fill = None
    elif type(fill_value) is float:
        fill = struct.pack("<d", fill_value)  # its bits: -0.0 is not 0.0, nor one NaN another
    elif type(fill_value) is int or type(fill_value) is bool:
        fill = (type(fill_value), fill_value)  # True == 1, but only True is a bool
    else:
        return None
    # NumPy indices, or a JAX array's sharding: where they live decides where they are checked.
    where = None if type(indices) is np.ndarray else indices.sharding
    return (
        plan_fn,
        data.shape,
        data.dtype,
        indices.shape,
        indices.dtype,
        where,
        attribute,
        mode,
        fill,
        x64_on(),
    )


def lookup(key: tuple | None) -> Call | None:
    return _calls.get(key)


def remember(key: tuple, call: Call) -> None:
    if len(_calls) >= _CAPACITY:
        _calls.clear()
    _calls[key] = call


def clear() -> None:
    """Forgets every signature (for tests, and around an export to ONNX, whose programs differ)."""
    _calls.clear()


def make_call(plan: GatherPlan, mode: str, programs: Callable[[str], Call], indices: Any) -> Call:
    """One signature's eager call, ``call(data, indices)``, for indices like ``indices``.

    ``programs(mode)`` gives the jitted op for a mode, with the signature's plan and fill bound
    in. In the checked mode a bounds test picks between the program for indices in [0, s-1]
    (``"in_range"``) and the one that normalises negative indices (``"promise_in_bounds"``).
    """
    if mode != "checked":
        program = programs(mode)

        def call(data: Any, indices: Any) -> Any:
            if type(data) is np.ndarray:
                data = aligned_for_cpu(data)
            return program(data, _narrowed(indices))

        return call
    if not on_host(indices):
        return functools.partial(_checked_on_device, plan, programs)
    in_range = programs("in_range")
    test = _bounds.in_range_test(plan, np.dtype(indices.dtype), indices.size)
    # In [0, s-1], 64-bit host indices convert exactly to the int32 of x64 off, unless an axis
    # is longer than int32 addresses; there they saturate as in every mode (narrow_host_indices).
    narrow = max(plan.index_sizes) > _bounds.INT32_MAX
    normalised_inline = _bounds.normalising_is_inline(indices.size)

    def checked(data: Any, indices: Any) -> Any:
        if type(data) is np.ndarray:
            data = aligned_for_cpu(data)
        numpy = type(indices) is np.ndarray
        host = indices if numpy else np.asarray(indices)  # no copy: the array is on the host
        if host.size > SMALL_HOST_INDICES:
            verdict = _bounds.judge_on_host(plan, host)
            if verdict == _bounds.OUT_OF_BOUNDS:
                _bounds.raise_if_out_of_bounds(plan, host)
            if verdict == _bounds.IN_BOUNDS:
                return programs("promise_in_bounds")(data, _narrowed(indices))
        elif not test(host):
            # A JAX array's indices are normalised here only where the program that normalises
            # them would go to JAX's worker thread (3 flops an index: from 334), and a transfer
            # guard allows the new transfer: measured on 64 ids, 17 µs by that program on the
            # calling thread and 21 µs normalised here; on 1600, 70 µs and 23 µs.
            host_pays = numpy or (not normalised_inline and _transfers_allowed())
            moved = _bounds.normalised_on_host(plan, host) if host_pays else None
            if moved is None:
                _bounds.raise_if_out_of_bounds(plan, host)
                return programs("promise_in_bounds")(data, _narrowed(indices))
            indices, numpy = moved, True
        if numpy:
            indices = _narrowed(indices) if narrow else aligned_for_cpu(indices)
        return in_range(data, indices)

    return checked


def _transfers_allowed() -> bool:
    """Whether an implicit host-to-device transfer is allowed here (no transfer guard set)."""
    return jax.config.jax_transfer_guard_host_to_device in (None, "allow")  # type: ignore[attr-defined]


def _checked_on_device(plan: GatherPlan, programs: Callable[[str], Call], data: Any, indices: Any) -> Any:
    with jax.ensure_compile_time_eval():  # concrete indices, even where a trace is open around
        code = int(_bounds_code(indices, plan=plan))  # the one scalar that comes back
    if code == _OUT_OF_BOUNDS:
        # Failing anyway: now the indices come to the host, to name the first bad one.
        _bounds.raise_if_out_of_bounds(plan, np.asarray(indices))
    return programs("in_range" if code == _IN_RANGE else "promise_in_bounds")(data, indices)


def _narrowed(indices: Any) -> Any:
    if type(indices) is np.ndarray:
        return aligned_for_cpu(_bounds.narrow_host_indices(indices))
    return indices


# Fact: JAX's CPU client aliases a C-contiguous NumPy array whose data is aligned to this many
# bytes (NumPy aligns to 16) and copies any other: under CPU_COPIED_INLINE bytes on the calling
# thread (1-2 us), from there on a worker thread, a handoff that dominates up to about a MiB: an
# eager lookup of 64 rows from a 250 KiB table took 42 us with the client's copy and 20 us with
# an aligned copy NumPy makes (1 MiB: 267 and 160 us). Past ALIGNED_COPY_MAX it no longer paid
# (4 MiB read whole: 1.21 ms with the client's copy, 1.53 ms aliased).
CPU_ALIGNMENT = 64
CPU_COPIED_INLINE = 100 * 1024
ALIGNED_COPY_MAX = 1 << 20


def aligned_for_cpu(array: np.ndarray, to_cpu: bool | None = None) -> np.ndarray:
    """``array``, or a copy whose data is aligned to ``CPU_ALIGNMENT`` bytes, where JAX's CPU
    client would copy it on a worker thread and the copy is small enough to pay: it goes to a
    CPU (``to_cpu``; by default, where the default device is one), and JAX keeps its dtype."""
    if not CPU_COPIED_INLINE <= array.nbytes <= ALIGNED_COPY_MAX:
        return array
    if array.flags.c_contiguous and array.ctypes.data % CPU_ALIGNMENT == 0:
        return array
    if not (_to_cpu() if to_cpu is None else to_cpu):
        return array
    if jax.dtypes.canonicalize_dtype(array.dtype) != array.dtype:
        return array
    buffer = np.empty(array.nbytes + CPU_ALIGNMENT, np.uint8)
    start = -buffer.ctypes.data % CPU_ALIGNMENT
    copy = buffer[start : start + array.nbytes].view(array.dtype).reshape(array.shape)
    np.copyto(copy, array)
    return copy


def narrowed_for_cpu(indices: np.ndarray, plan: GatherPlan) -> np.ndarray | None:
    """Host indices proven in [0, s-1], as an int32 copy aligned for JAX's CPU client, where
    that pays: 64-bit ones that the client would copy on a worker thread (not aligned to
    ``CPU_ALIGNMENT``, of ``CPU_COPIED_INLINE`` bytes or more) into axes int32 addresses;
    else None. Fact: with 2**20 unaligned int64 indices into 256 columns, the client's copy
    made a program 0.7 ms slower, where this conversion took 0.2 ms and halved what the
    gather reads."""
    if indices.dtype.itemsize != 8 or indices.nbytes < CPU_COPIED_INLINE:
        return None
    if indices.flags.c_contiguous and indices.ctypes.data % CPU_ALIGNMENT == 0:
        return None  # read in place
    if max(plan.index_sizes) > _bounds.INT32_MAX:
        return None
    buffer = np.empty(indices.size * 4 + CPU_ALIGNMENT, np.uint8)
    start = -buffer.ctypes.data % CPU_ALIGNMENT
    narrow = buffer[start : start + indices.size * 4].view(np.int32).reshape(indices.shape)
    np.copyto(narrow, indices, casting="unsafe")  # exact: every index is in [0, s-1]
    return narrow


def _to_cpu() -> bool:
    device = jax.config.jax_default_device  # type: ignore[attr-defined]
    if device is None:
        return jax.default_backend() == "cpu"
    return getattr(device, "platform", device) == "cpu"  # a device, or a platform's name


def on_host(indices: Any) -> bool:
    """Whether a concrete indices array can be read on the host without a transfer: NumPy, or
    a JAX array whose every shard is in this process's CPU memory."""
    if isinstance(indices, np.ndarray):
        return True
    sharding = indices.sharding
    return sharding.is_fully_addressable and all(d.platform == "cpu" for d in sharding.device_set)


_OUT_OF_BOUNDS, _IN_BOUNDS, _IN_RANGE = 0, 1, 2


@functools.partial(jax.jit, static_argnames="plan")
def _bounds_code(indices: jax.Array, plan: GatherPlan) -> jax.Array:
    """``_IN_RANGE`` if every index is in [0, s-1], else ``_IN_BOUNDS`` if every one is in
    [-s, s-1], else ``_OUT_OF_BOUNDS``: one int8 for the host to read."""
    if indices.size == 0:
        return jnp.int8(_IN_RANGE)
    in_bounds = _bounds.in_bounds_mask(plan, indices)
    in_range = _bounds.in_range_mask(plan, indices)
    code = jnp.where(jnp.all(in_bounds), jnp.where(jnp.all(in_range), _IN_RANGE, _IN_BOUNDS), _OUT_OF_BOUNDS)
    return code.astype(jnp.int8)
