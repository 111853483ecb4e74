"""The short-rows lowering's gather: rows of data read as rows of bytes (``rows_in_units``), and
whether XLA:CPU, in this JAX and for this CPU, copies those with vector instructions
(``xla_vectorises_rows_in_units``, what the lowering rests on). jax_gather._cpu's table chooses it."""

from __future__ import annotations

import functools
import re
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from jax_gather._cpu_client import kernel_ir_holds
from jax_gather._lowering import PROMISE
from jax_gather.plans import GatherPlan, gather_plan


def rows_in_units(data: jax.Array, idx: jax.Array, plan: GatherPlan, *, unit: Any) -> jax.Array:
    """The plan's gather of whole rows, each read as a row of ``unit`` (uint8 or uint4)."""
    per_item = data.dtype.itemsize * 8 // jnp.iinfo(unit).bits
    rows = lax.bitcast_convert_type(data, unit).reshape(*data.shape[:-1], -1)
    slice_sizes = (*plan.slice_sizes[:-1], plan.slice_sizes[-1] * per_item)
    out = lax.gather(rows, idx, plan.dimension_numbers, slice_sizes, mode=PROMISE)
    return lax.bitcast_convert_type(out.reshape(*out.shape[:-1], -1, per_item), data.dtype)


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
