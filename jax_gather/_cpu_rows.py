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
