"""Eager gathers of NumPy data read on the host, where the result is small or made of rows.

An eager call hands NumPy data to JAX whole, every call: JAX's CPU client copies the table (or
the program reads it in place, :func:`jax_gather._cpu_client.data_read_in_place`), and then the
program reads the rows it needs. NumPy reads only those rows here, and JAX takes the result by
its own transfer (:func:`to_jax`). Nothing is computed differently: a gather copies elements,
and the result's conversion to the dtype JAX keeps (float64 to float32, x64 off) is the one the
program's argument would have had.

Which calls: the checked and ``promise_in_bounds`` calls of Gather without batch dims and of
GatherElements (:func:`host_recipe`; GatherND and batched Gather have no recipe, their ``jnp``
forms were already slower than the programs) whose result is under ``HOST_GATHER_BELOW``
bytes, or for rows (Gather along a leading axis, rows of 16 elements or more) under
``HOST_ROWS_BELOW`` (of more than ``HOST_ROWS_MAX`` rows, from a table as large as the result).
Results JAX's client would copy are written aligned (``ALIGNED_FROM``). The measurements:
docs/design.md, "Eager calls".
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from jax_gather._cpu_client import (
    CPU_COPIED_INLINE,
    DEFAULT_DEVICE,
    INT32_MAX,
    aligned_empty,
    converted_for_cpu,
    default_device_is_cpu,
    single_device_sharding,
)
from jax_gather._host_bounds import Verdict, moved_in_range
from jax_gather._x64 import X64_STATE
from jax_gather.plans import GatherPlan

# Results of fewer bytes are gathered here: NumPy's element-by-element gathers (Gather along a
# later axis) took 1.8-3.1x jnp.take's time from 512 KiB (AMD EPYC, JAX 0.10.2); the size
# JAX's CPU client copies on the calling thread.
HOST_GATHER_BELOW = CPU_COPIED_INLINE
# And of no more elements: NumPy's offsets cost some 4 ns an element, where GatherElements along
# the last axis of 32768 int8 took 0.87 of take_along_axis's time (the program 0.89) and of
# 58571-87415, 1.55-2.02 (the program 0.88-1.40; AMD EPYC, JAX 0.10.2, medians of 9 rounds).
HOST_ELEMENTS_MAX = 32768
# Rows (Gather along a leading axis, a copy a row in NumPy) of fewer bytes are gathered here
# too: 128 KiB-4 MiB took 0.10-0.94 of jnp.take's time (the program 0.80-2.08) on JAX
# 0.4.35-0.12; 8-32 MiB of rows 0.95-1.13 (the program 1.18): AMD EPYC, docs/design.md.
HOST_ROWS_BELOW = 8 * 2**20
# But more rows than this, where their table is smaller than the result, run the program: its
# gather has two cores where NumPy's take copies one row at a time on one (some 3 ns a row; the
# program's copy of a small table is cheap). Eager calls of NumPy inputs, int64 ids a tenth
# negative, host / program / jnp.take (AMD EPYC Zen 5, JAX 0.10.2, 11 paired rounds): float32
# rows of 16 from 4096 by 65536 ids 1.80 / 1.25, by 40000 1.50 / 1.47, by 32768 1.03 / 1.26;
# from 19249 rows by 77780 ids 1.31 / 1.05; uint8 rows of 96 by 77780 1.16 / 1.07, from 200000
# rows (19 MB) 0.38 / 1.21.
HOST_ROWS_MAX = 32768

# Results of this many bytes or more are written into a buffer aligned for JAX's CPU client
# (_cpu_client.aligned_empty), which takes it as it is; NumPy's own result, 16 bytes (or a
# multiple of 16) past a boundary, it copies. Fact (JAX 0.10.2, AMD EPYC Zen 5): 2, 5 and 8 MiB
# of float32 16 bytes past a boundary took 75, 201 and 361 us to hand over, aligned 3.5; rows
# gathered into NumPy's own result up to 1.7x jnp.take's time. Smaller ones the client copies
# inline, and NumPy allocates them (the aligned buffer's call costs 0.45 us on 64 rows).
ALIGNED_FROM = CPU_COPIED_INLINE

# A jitted identity: JAX forwards its argument (no program runs), so this is the C++ path's
# transfer of a NumPy array: 5.8-6.4 µs on 129 float32, where jax.device_put took 33-37.
_identity: Callable[[np.ndarray], jax.Array] = jax.jit(lambda result: result)

try:  # the transfer under jax.device_put's Python: 2.8-3.3 µs (JAX 0.4.35-0.12.0.1)
    from jax._src.core import ShapedArray
    from jax._src.lib import xla_client as _xla_client

    _batched_device_put = _xla_client.batched_device_put
except (ImportError, AttributeError):  # pragma: no cover - depends on the JAX release
    _batched_device_put = None


def to_jax(result: np.ndarray) -> jax.Array:
    """A gathered NumPy array as JAX's array on the default device (a CPU), uncommitted and in
    the dtype JAX keeps, as the identity gives it; by JAX's own transfer where it has the one
    of JAX 0.4.35-0.12 (probed on the first call), else by the identity."""
    if _put is None:
        return _identity(result)
    default = DEFAULT_DEVICE.value  # a device, a platform's name, or None
    aval, sharding, device = _placement(result.shape, result.dtype, X64_STATE.value, default)
    if aval.dtype != result.dtype:  # 64-bit types with x64 off, swapped bytes
        result = converted_for_cpu(result, aval.dtype)
    return _put(aval, sharding, [result], [device], False)


def _first_put(*arguments: Any) -> Any:
    """JAX's transfer, if it takes these arguments and gives the identity's array (dtype, shape,
    placement, values); else the identity, from now on."""
    global _put
    expected = _identity(arguments[2][0])
    try:
        array = _batched_device_put(*arguments)
        same = [array.dtype, array.shape, array.committed, array.sharding] == [
            expected.dtype, expected.shape, expected.committed, expected.sharding
        ] and np.array_equal(np.asarray(array), np.asarray(expected), equal_nan=True)  # fmt: skip
    except Exception:  # any failure: this release's transfer is not the one measured
        same = False
    _put = _batched_device_put if same else None
    return expected


_put: Callable[..., Any] | None = _first_put if _batched_device_put is not None else None


@functools.lru_cache(maxsize=1024)
def _placement(shape: tuple[int, ...], dtype: np.dtype, x64: bool, default: Any) -> tuple[Any, Any, Any]:
    """The aval, sharding and device of a result of this shape and dtype under these settings."""
    device = default if default is not None and not isinstance(default, str) else jax.devices(default)[0]
    canonical = jax.dtypes.canonicalize_dtype(dtype)
    return ShapedArray(shape, canonical), single_device_sharding(device), device


# ``recipe(data, indices, verdict)``: the plan's gather of NumPy arrays of its shapes, indices
# where ``verdict`` puts them: in [0, s-1] (IN_RANGE), in [-s, s-1] (IN_BOUNDS), or unjudged
# (OUT_OF_BOUNDS, a promise's: each reads the element of the axis at its value modulo s, which
# is its own for one in [-s, s-1]).
Recipe = Callable[[np.ndarray, np.ndarray, Verdict], np.ndarray]

# From this many indices in [-s, s-1], negatives are moved into [0, s-1] in two passes
# (_host_bounds.moved_in_range), not by % s, a division an index: 8192 int64 2.9 against 15 us,
# 512 1.5 against 1.4 (int32 1.4 against 2.0; AMD EPYC Zen 5, NumPy 2).
MOVED_BY_MINIMUM_FROM = 512
_IN_BOUNDS, _IN_RANGE = Verdict.IN_BOUNDS, Verdict.IN_RANGE  # read on every call: no enum lookups


def host_gather(plan: GatherPlan, data: Any, indices: Any) -> Recipe | None:
    """The recipe by which an eager call of these arguments gathers on the host, or None: NumPy
    data and indices, a recipe for the plan, a result under HOST_GATHER_BELOW bytes and of
    HOST_ELEMENTS_MAX elements or fewer (rows: under HOST_ROWS_BELOW bytes, and HOST_ROWS_MAX
    rows or fewer or a table of as many bytes as the result), axes that
    int32 addresses and none empty (the programs it falls back on take int32 indices, and word
    an empty axis's error) and a CPU as the default device (measured nowhere else)."""
    if type(data) is not np.ndarray or type(indices) is not np.ndarray:
        return None
    if 0 in plan.index_sizes or max(plan.index_sizes) > INT32_MAX:
        return None
    found = host_recipe(plan, data.shape)
    if found is None or not default_device_is_cpu():
        return None
    recipe, rows = found
    elements = math.prod(plan.output_shape)
    if rows:
        nbytes = elements * data.dtype.itemsize
        few = indices.size <= HOST_ROWS_MAX or data.nbytes >= nbytes
        return recipe if nbytes < HOST_ROWS_BELOW and few else None
    small = elements * data.dtype.itemsize < HOST_GATHER_BELOW and elements <= HOST_ELEMENTS_MAX
    return recipe if small else None


@functools.lru_cache(maxsize=512)
def host_recipe(plan: GatherPlan, data_shape: tuple[int, ...]) -> tuple[Recipe, bool] | None:
    """The plan's gather of data of ``data_shape`` in NumPy, and whether it copies rows (Gather
    along a leading axis); or None where none was measured to pay (batched Gather, GatherND:
    their ``jnp`` forms were already slower than the programs). ndarray's methods, where
    NumPy's functions add a microsecond."""
    numbers = plan.dimension_numbers
    axis = numbers.start_index_map[0]
    if plan.op_name == "Gather" and not numbers.operand_batching_dims:
        rows = math.prod(data_shape[:axis]) == 1 and math.prod(data_shape[axis + 1 :]) >= 16  # as measured
        shape = plan.output_shape

        def gathered(data: np.ndarray, indices: np.ndarray, verdict: Verdict) -> np.ndarray:
            out = _result_buffer(shape, data.dtype)
            return data.take(_intp(indices), axis=axis, out=out, mode="wrap")

        return gathered, rows
    if plan.op_name == "GatherElements":
        return _elements_recipe(plan, data_shape, axis), False
    return None


def _elements_recipe(plan: GatherPlan, data_shape: tuple[int, ...], axis: int) -> Recipe:
    """GatherElements as a gather of flat elements: ``output[p]`` is element
    ``sum(p[k] * stride[k] for k != axis) + indices[p] * stride[axis]`` of data in C order (its
    leading block where indices are smaller); the sum over k != axis is computed on the first
    call and kept."""
    shape = plan.output_shape
    size = np.intp(plan.index_sizes[0])  # a NumPy scalar: int8 indices % 300 promote, not overflow
    strides = [math.prod(data_shape[k + 1 :]) for k in range(len(shape))]
    step = np.intp(strides[axis])  # as size: int8 indices * 3 promote, not overflow
    offsets: list[np.ndarray] = []

    def base() -> np.ndarray:
        if not offsets:
            grid = np.zeros(shape, np.intp)
            for k, (n, stride) in enumerate(zip(shape, strides)):
                if k != axis and n > 1:
                    grid += (np.arange(n, dtype=np.intp) * stride).reshape((n,) + (1,) * (len(shape) - k - 1))
            offsets.append(grid)
        return offsets[0]

    if math.prod(data_shape[:axis]) == 1:
        # The axis leads: an offset wraps modulo data.size, s * step, as its index wraps
        # modulo s (the rest of the offset is under step), which take's "wrap" does at no cost
        # (8192 int64 indices: 9.3 µs, where % s first took 28).
        def leading(data: np.ndarray, indices: np.ndarray, verdict: Verdict) -> np.ndarray:
            indices = _intp(indices)
            out = _result_buffer(shape, data.dtype)
            return data.take(base() + (indices if step == 1 else indices * step), out=out, mode="wrap")

        return leading

    def recipe(data: np.ndarray, indices: np.ndarray, verdict: Verdict) -> np.ndarray:
        indices = _intp(indices)
        if verdict is _IN_BOUNDS and indices.size >= MOVED_BY_MINIMUM_FROM:
            indices = moved_in_range(plan, indices)
        elif verdict is not _IN_RANGE:
            indices = indices % size  # 1.1 µs on 128, where np.where(i < 0, i + s, i) took 2.5
        # Every offset lies in data: "clip" writes into out unbuffered, where "raise" copies.
        out = _result_buffer(shape, data.dtype)
        return data.take(base() + (indices if step == 1 else indices * step), out=out, mode="clip")

    return recipe


def _result_buffer(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray | None:
    """Where a recipe writes its result: an aligned buffer from ALIGNED_FROM bytes, else None
    (NumPy allocates it)."""
    return aligned_empty(shape, dtype) if math.prod(shape) * dtype.itemsize >= ALIGNED_FROM else None


def _intp(indices: np.ndarray) -> np.ndarray:
    """uint64 indices as intp (their bits; past int64, a checked call raised already): ``take``
    refuses them through NumPy 2.0, and with intp they promote to float64."""
    if indices.dtype.kind == "u" and indices.dtype.itemsize == 8:
        return indices.astype(np.intp)
    return indices
