"""The short-rows lowering's gather: rows of data read as rows of bytes (``rows_in_units``), and
whether XLA:CPU, in this JAX and for this CPU, copies those with vector instructions
(``xla_vectorises_rows_in_units``, what the lowering rests on). jax_gather._cpu's table chooses it."""

from __future__ import annotations

import functools
import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_gather._cpu_client import kernel_ir_holds
from jax_gather._lowering import PROMISE
from jax_gather.plans import GatherPlan, gather_plan

# In bytes (nibbles for one-byte types) XLA emits a longer loop body that LLVM keeps and
# vectorises, folding the bitcasts' shifts back into whole-element moves. Bit-exact.

# Fact: XLA:CPU copies a slice row of 16 to 64 elements with a loop that LLVM unrolls into scalar
# moves, with no vector instruction; rows of 80 or more it vectorises.
# Rows of 17-23 elements in bytes gained nothing (2026-12-05, AMD EPYC, JAX 0.10.2, 1 MiB of output,
# 13 paired rounds against jnp): 2-byte GatherND pairs 1.04-1.25, Gather 0.94-1.06, float32 pairs
# 0.98-1.11, int8 0.87-1.05, against 0.90-1.00 by XLA's loop; rows of 16 and 24 took 0.66-0.94.
SHORT_ROWS = (16, *range(24, 65))
# Fact: XLA's cost analysis counts the bitcasts to bytes on every element of data, which makes
# XLA:CPU split the gather's loop into one task per core (its parallel task assignment); waking
# the other cores costs more than the vector copy saves below this many bytes of output, where
# the generic loop runs as one task. The copy saves more a byte where the scalar moves it
# replaces are of one byte. Measured (docs/results/2026-11-design-measurements.md): 64 KiB 1.4-2.6x
# slower, 128 KiB level; at 256 KiB int8 0.59-0.96 of the time without it, but bfloat16 and
# float32 0.77-1.77 (an AMD EPYC); from 512 KiB those 0.70-1.07.
SHORT_ROWS_MIN_BYTES = 512 << 10
SHORT_ROWS_MIN_BYTES_OF_BYTES = 256 << 10  # for one-byte data
# Fact: where every index reads one slice (an indexed axis of one entry), XLA makes the gather a
# broadcast of that slice, and the bitcasts back from bytes, fused into it, a shift and an or a
# byte of the output. Without a fill's select (whose mask jnp's program computes too), in bytes took
# 1.21-1.75x the broadcast's time at 256 KiB-2.3 MiB of output (int8 rows of 64, int32 and float32
# of 35), 1.03 at 4.6 MiB, 0.80 at 9 MiB (int32 rows of 35), 0.27-0.73 for int8 rows of 64 from
# 512 KiB and 0.44-0.58 for bfloat16 rows of 32 from 2 MiB (AMD EPYC, JAX 0.10.2, 15 rounds).
SHORT_ROWS_BROADCAST_FACTOR = 8


def short_rows_min_bytes(dtype: Any, broadcast: bool = False) -> int:
    """The output size from which ``short_rows_in_bytes`` is chosen for ``dtype``'s data
    (``broadcast``: of one slice, without a fill)."""
    least = SHORT_ROWS_MIN_BYTES_OF_BYTES if np.dtype(dtype).itemsize == 1 else SHORT_ROWS_MIN_BYTES
    return least * SHORT_ROWS_BROADCAST_FACTOR if broadcast else least


def rows_in_units(data: jax.Array, idx: jax.Array, plan: GatherPlan, *, unit: Any) -> jax.Array:
    """The plan's gather of whole rows, each read as a row of ``unit`` (uint8 or uint4)."""
    per_item = data.dtype.itemsize * 8 // jnp.iinfo(unit).bits
    rows = lax.bitcast_convert_type(data, unit).reshape(*data.shape[:-1], -1)
    slice_sizes = (*plan.slice_sizes[:-1], plan.slice_sizes[-1] * per_item)
    out = lax.gather(rows, idx, plan.dimension_numbers, slice_sizes, mode=PROMISE)
    return lax.bitcast_convert_type(out.reshape(*out.shape[:-1], -1, per_item), data.dtype)


def takes_whole_rows(shape: tuple, dtype: np.dtype, plan: GatherPlan) -> bool:
    """Whether every slice takes data's last dim whole and it ends the output, for a dtype with
    a bitcast to bytes (integers and reals of 8-64 bits; not sub-byte types, bool or complex)."""
    if jnp.issubdtype(dtype, jnp.floating):
        bits = jnp.finfo(dtype).bits
    elif jnp.issubdtype(dtype, jnp.integer):
        bits = jnp.iinfo(dtype).bits
    else:
        return False
    if len(shape) < 2 or bits not in (8, 16, 32, 64):  # sub-byte types: no unit
        return False
    dn, last = plan.dimension_numbers, len(shape) - 1
    return (
        plan.slice_sizes[-1] == shape[-1]
        and bool(dn.offset_dims)
        and dn.offset_dims[-1] == len(plan.output_shape) - 1
        and last not in dn.collapsed_slice_dims + dn.operand_batching_dims
    )


VECTOR_TYPE = re.compile(r"<\d+ x \w+>")


@functools.cache
def xla_vectorises_rows_in_units() -> bool:
    """Whether XLA:CPU copies rows in bytes with vector instructions, where it copies rows of
    16-64 elements with scalar moves: asked once a process, by the LLVM IR of one lookup of 32
    float32 (about 50 ms). It did through JAX 0.10; from JAX 0.11 it does not, and the lowering
    measured level with XLA's own loop (4 benchmark shapes, AMD EPYC)."""
    plan = gather_plan((1000, 32), (2048,), 0)
    rows = lambda d, i: rows_in_units(d, i, plan, unit=jnp.uint8)
    return kernel_ir_holds(VECTOR_TYPE, rows, ((1000, 32), jnp.float32), ((2048, 1), jnp.int32))
