"""JAX's CPU client: which programs it runs on the calling thread, which NumPy arrays it
copies, and the copies of ours that spare it work (eager calls and a prepared model's run)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from jax_gather._host_bounds import INT32_MAX
from jax_gather.plans import GatherPlan

# Fact: JAX's CPU client runs a program on the calling thread when XLA's cost analysis counts
# fewer than this many flops in it, and hands any other to a worker thread and waits (10-100 us
# here; tests/test_cpu_facts.py checks it).
INLINE_FLOPS = 1000

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


# Indices tested and narrowed together go in chunks of about this many, each tested and then
# copied while in cache (256 KiB of int64).
NARROWED_CHUNK = 32768


def tested_and_narrowed(
    indices: np.ndarray, plan: GatherPlan, in_range: Callable[[np.ndarray], bool]
) -> tuple[bool, np.ndarray | None]:
    """Whether host ``indices`` are all in [0, s-1] (``in_range``: their in_range_test), and if
    so an int32 copy of them aligned for JAX's CPU client, where that pays
    (:func:`_narrowing_pays`; else None). Fact: with 2**20 unaligned int64 indices into 256
    columns, the client's copy made a program 0.7 ms slower, where this conversion took 0.2-0.5
    ms and halved what the gather reads. The copy is made a chunk at a time, each tested first,
    so the indices are read from memory once, not once by the test and once by the copy: 2**20
    int64 indices took 0.62 ms, where the two passes took 0.84."""
    if not (_narrowing_pays(indices, plan) and indices.flags.c_contiguous):
        return in_range(indices), None
    narrow = _aligned_int32(indices.shape)
    # Whole index tuples per chunk, for the test of a GatherND's components.
    width = indices.shape[-1] if plan.tuple_indices else 1
    source, target = indices.reshape(-1, width), narrow.reshape(-1, width)
    step = max(1, NARROWED_CHUNK // width)
    for start in range(0, len(source), step):
        chunk = source[start : start + step]
        if not in_range(chunk):
            return False, None
        np.copyto(target[start : start + step], chunk, casting="unsafe")
    return True, narrow


def _narrowing_pays(indices: np.ndarray, plan: GatherPlan) -> bool:
    """64-bit indices that JAX's client would copy on a worker thread (not aligned to
    ``CPU_ALIGNMENT``, of ``CPU_COPIED_INLINE`` bytes or more), into axes int32 addresses."""
    if indices.dtype.itemsize != 8 or indices.nbytes < CPU_COPIED_INLINE:
        return False
    if indices.flags.c_contiguous and indices.ctypes.data % CPU_ALIGNMENT == 0:
        return False  # read in place
    return max(plan.index_sizes) <= INT32_MAX


def _aligned_int32(shape: tuple[int, ...]) -> np.ndarray:
    size = math.prod(shape)
    buffer = np.empty(size * 4 + CPU_ALIGNMENT, np.uint8)
    start = -buffer.ctypes.data % CPU_ALIGNMENT
    return buffer[start : start + size * 4].view(np.int32).reshape(shape)


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
