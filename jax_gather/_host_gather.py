"""Eager gathers of NumPy data read on the host, where the result is small.

An eager call hands NumPy data to JAX whole, every call: JAX's CPU client copies the table (or
the program reads it in place, :func:`jax_gather._cpu_client.data_read_in_place`), and then the
program reads the rows it needs. NumPy reads only those rows here, and JAX takes the result: a
jitted identity, which JAX answers by forwarding its argument, copied by the client on the
calling thread below ``CPU_COPIED_INLINE`` bytes. Nothing is computed differently: a gather
copies elements, and the result's conversion to the dtype JAX keeps (float64 to float32, x64
off) is the one the program's argument would have had.

Measured on the AMD EPYC (eager checked calls, NumPy inputs, a table of 4096 rows, best of 10
rounds; ``jnp.take`` / ``take_along_axis`` given the same arrays): Gather of 16-129 single
elements 11.0-11.2 µs, where the program took 14.3-14.6 and ``jnp.take`` 12.1-12.3; 1024 rows
of 64 float32 29 µs, 110 and 100; 8192 rows of 16 int8 23 µs, 82 and 82. Results past the
bound lost: 16 MiB 1.8x ``jnp.take`` (NumPy's gather and a copy against XLA's gather alone).

A recipe for each plan where one was measured (:func:`host_recipe`): Gather without batch
dims (``np.take``) and GatherElements (element offsets, the non-axis part computed once).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from jax_gather._cpu_client import CPU_COPIED_INLINE, INT32_MAX, default_device_is_cpu
from jax_gather.plans import GatherPlan

# Results of fewer bytes are gathered here: the client copies them on the calling thread.
HOST_GATHER_BELOW = CPU_COPIED_INLINE

# A jitted identity: JAX forwards its argument (no program runs), so this is the C++ path's
# transfer of a NumPy array: 5.9 µs on 16 float32, where jax.device_put took 29.
to_jax: Callable[[np.ndarray], jax.Array] = jax.jit(lambda result: result)

# ``recipe(data, indices, wrap)``: the plan's gather of NumPy arrays of its shapes, indices in
# [0, s-1], or anywhere where ``wrap``: each then reads the element of the axis at its value
# modulo s (which is its own for one in [-s, s-1]).
Recipe = Callable[[np.ndarray, np.ndarray, bool], np.ndarray]


def host_gather(plan: GatherPlan, data: Any, indices: Any) -> Recipe | None:
    """The recipe by which an eager call of these arguments gathers on the host, or None: NumPy
    data and indices, a recipe for the plan, a result under HOST_GATHER_BELOW bytes, axes that
    int32 addresses and none empty (the programs it falls back on take int32 indices, and word
    an empty axis's error) and a CPU as the default device (measured nowhere else)."""
    if type(data) is not np.ndarray or type(indices) is not np.ndarray:
        return None
    if 0 in plan.index_sizes or max(plan.index_sizes) > INT32_MAX:
        return None
    if math.prod(plan.output_shape) * data.dtype.itemsize >= HOST_GATHER_BELOW:
        return None
    if not default_device_is_cpu():
        return None
    return host_recipe(plan, data.shape)


@functools.lru_cache(maxsize=512)
def host_recipe(plan: GatherPlan, data_shape: tuple[int, ...]) -> Recipe | None:
    """The plan's gather of data of ``data_shape`` in NumPy, or None where none was measured to
    pay (batched Gather, GatherND: their ``jnp`` forms were already slower than the programs).
    ndarray's methods, where NumPy's functions add a microsecond."""
    numbers = plan.dimension_numbers
    axis = numbers.start_index_map[0]
    if plan.op_name == "Gather" and not numbers.operand_batching_dims:
        return lambda data, indices, wrap: data.take(_intp(indices), axis=axis, mode="wrap")
    if plan.op_name == "GatherElements":
        return _elements_recipe(plan, data_shape, axis)
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
        def leading(data: np.ndarray, indices: np.ndarray, wrap: bool) -> np.ndarray:
            indices = _intp(indices)
            return data.take(base() + (indices if step == 1 else indices * step), mode="wrap")

        return leading

    def recipe(data: np.ndarray, indices: np.ndarray, wrap: bool) -> np.ndarray:
        indices = _intp(indices)
        if wrap:
            indices = indices % size  # 1.1 µs on 128, where np.where(i < 0, i + s, i) took 2.5
        return data.take(base() + (indices if step == 1 else indices * step))

    return recipe


def _intp(indices: np.ndarray) -> np.ndarray:
    """uint64 indices as intp (their bits; past int64, a checked call raised already): ``take``
    refuses them through NumPy 2.0, and with intp they promote to float64."""
    if indices.dtype.kind == "u" and indices.dtype.itemsize == 8:
        return indices.astype(np.intp)
    return indices
