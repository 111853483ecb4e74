"""What the rules of the CPU table (:mod:`jax_gather._cpu`) read of a gather: the plan, data's
static shape and dtype, the process, and the sizes derived from them that the measured
thresholds are stated in (output bytes, contiguous runs and the cache lines they read)."""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from jax_gather._fill import element_bits
from jax_gather.plans import GatherPlan

CACHE_LINE = 64


@dataclasses.dataclass(frozen=True)
class Site:
    """What a row's rule reads: the plan, data's static shape and dtype, the x64 setting and
    the number of CPU devices of the process."""

    plan: GatherPlan
    shape: tuple
    dtype: np.dtype
    x64: bool
    cpu_devices: int
    index_flops: int | None = None  # XLA's count per index of the mode's arithmetic; None: a fill

    @property
    def one_device(self) -> bool:
        return self.cpu_devices == 1

    @property
    def elements(self) -> bool:
        """Every output element is one element of data (no slice dims)."""
        return not self.plan.dimension_numbers.offset_dims

    @property
    def components(self) -> int:
        dn = self.plan.dimension_numbers
        batch = [d for i, d in enumerate(self.plan.output_shape) if i not in dn.offset_dims]
        return math.prod(batch) * len(dn.start_index_map)

    @property
    def counted(self) -> tuple:
        """(plan, shape, dtype, components): what the split counts of ``_cpu_split`` read."""
        return self.plan, self.shape, self.dtype, self.components

    @property
    def output_bytes(self) -> int:
        return math.prod(self.plan.output_shape) * element_bits(self.dtype) // 8

    @property
    def sub_byte_integer(self) -> bool:
        return bool(jnp.issubdtype(self.dtype, jnp.integer)) and jnp.iinfo(self.dtype).bits < 8


def static(*shapes: tuple) -> bool:
    """No symbolic dim in any of ``shapes``."""
    return all(isinstance(d, int) for shape in shapes for d in shape)


def runs_and_lines(plan: GatherPlan, shape: tuple, dtype: np.dtype) -> tuple[int, int]:
    """The contiguous runs of elements the gather reads (each slice is runs: the trailing dims it
    takes whole and the next it takes part of), and the bytes of their cache lines, whole lines
    a run; at most all of data (a line read twice is in cache the second time)."""
    run = 1
    for size, full in zip(reversed(plan.slice_sizes), reversed(shape)):
        run *= size
        if size != full:
            break
    if run == 0:
        return 0, 0
    runs = math.prod(plan.output_shape) // run
    run_lines = -(-run * element_bits(dtype) // (8 * CACHE_LINE))
    return runs, min(runs * run_lines * CACHE_LINE, math.prod(shape) * element_bits(dtype) // 8)


@functools.cache
def cpu_devices() -> int:
    """The CPU devices of this process (0 without a CPU backend, where no CPU lowering runs)."""
    try:
        return len(jax.devices("cpu"))
    except RuntimeError:  # JAX_PLATFORMS without "cpu"
        return 0
