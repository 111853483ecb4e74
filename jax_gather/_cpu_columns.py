"""The column lowerings' gather: a Gather along data's last axis reading its indices written out
as uint64 (``columns_by_written_indices``, one primitive), and whether the CPU at hand makes that
pay (``xla_widens_column_indices``). jax_gather._cpu's table chooses it."""

from __future__ import annotations

import functools
import inspect
import math
import re
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax._src import core as _jax_core
from jax.interpreters import batching, mlir

from jax_gather._cpu_client import kernel_ir_holds
from jax_gather._lowering import PROMISE, direct
from jax_gather._x64 import x64_enabled
from jax_gather.plans import GatherPlan, gather_plan

try:
    from jax.extend.core import Primitive
except ImportError:  # pragma: no cover - JAX before 0.4.36
    from jax.core import Primitive  # type: ignore[no-redef,attr-defined]

# A Gather along data's last axis reads each index once per row; from this many rows, writing
# the indices out first pays (measured: 1.1x at 8 rows, 1.2-1.6x from 64, for 1- and 2-byte data).
COLUMN_ROWS = 8

# The thresholds of jax_gather._cpu's rules for the column lowerings:
# Measured (AMD EPYC): a promise of int8 columns by 129 ids took 1.08x the time without
# columns_by_written_indices over 16 rows (2 KiB of output), 1.00x over 64 (8 KiB); 16 rows by 512
# ids (8 KiB) 1.53-1.57x; from 16 KiB level (16x1024, 32x512, 128x129: 0.95-1.03), from 32 KiB
# 0.64-0.80.
COLUMNS_MIN_BYTES = 16 << 10
COLUMN_SELECT_ROWS = 512  # jax_gather._cpu._direct_column_fill
# Measured (AMD EPYC, int8, 11 paired rounds; JAX 0.10.2 and 0.12.1): from data's rows of 32 KiB
# (an L1 cache's), a gather from written indices outside a fill's select cost more than it saved:
# 16 rows by 8192 ids of rows of 32768-84309 bytes 1.03-1.30x the time without, 85 by 22720 of
# 84309 1.07-1.09; from rows of 8192-16384 bytes 0.88-0.91 (a fill's select: level either way).
COLUMNS_MAX_ROW_BYTES = 16 << 10
# Fact: the written indices (8 bytes each, twice the int32 indices they replace) are read again
# for every row; past 2 MiB of them they come from memory. Measured (AMD EPYC, rows of 16-64):
# at 2**18 ids 0.88-1.11 of the time without the column lowerings, at 2**19 0.92-1.21, at 2**20
# 0.93-1.29 (1- and 2-byte data, both modes).
COLUMNS_MAX_INDICES = 1 << 18
# Measured (AMD EPYC, int8): under 64 rows, the written indices paid up to 16384 ids (a promise
# of 16 rows: 0.87-0.93 of the time without) and cost up to 1.38x from 65536 (their fill from a
# pad 0.67-1.50 from run to run).
COLUMNS_FEW_ROWS, COLUMNS_FEW_ROWS_MAX_INDICES = 64, 16384


# ---- Gather along the last axis: the indices written out as 64-bit ------------------------------
# Fact: XLA:CPU reads one element per (row, index) in a vector loop that widens each 32-bit index
# to 64 bits there and moves it to a scalar register lane by lane, and it fuses any elementwise
# producer of the indices (each mode's arithmetic) into that loop. Fact: it does not fuse a
# reduce-window into it. From unsigned 64-bit indices a reduce-window has written out, the loop
# reads each index as it is.
#
# The uint64 values exist only inside the lowering of one primitive: in a program traced without
# x64, a uint64 array would be narrowed by every transformation that rebinds the gather outside
# this module (checkify's bounds check among them, with a warning).


# The fact above holds where XLA:CPU vectorises the loop with AVX-512's gathers (seen on an Intel
# Xeon and an AMD EPYC with AVX-512); with AVX2 only (another AMD EPYC, or
# XLA_FLAGS=--xla_cpu_max_isa=AVX2) the loop keeps its indices as they are, and nothing pays for
# writing them out. So the CPU at hand is asked, once per process: the LLVM IR XLA compiles for
# one small column gather (about 50 ms).
WIDENED_INDICES = re.compile(r"zext (nneg )?<\d+ x i32> %\S+ to <\d+ x i64>")


@functools.cache
def xla_widens_column_indices() -> bool:
    """Whether XLA:CPU, for this process's CPU and flags, widens 32-bit indices to 64 bits in
    the vector loop of a column gather (what the column lowerings rest on)."""
    plan = gather_plan((64, 4096), (1024,), 1)
    column_gather = lambda d, i: direct(d, jnp.minimum(i, 4095)[..., None], plan)
    return kernel_ir_holds(WIDENED_INDICES, column_gather, ((64, 4096), jnp.int8), ((1024,), jnp.int32))


def reads_columns(shape: tuple, plan: GatherPlan) -> bool:
    """Whether the plan is an unbatched Gather along data's last axis with COLUMN_ROWS or more
    rows."""
    dn = plan.dimension_numbers
    return (
        plan.op_name == "Gather"
        and len(shape) >= 2
        and dn.start_index_map == (len(shape) - 1,)
        and not dn.operand_batching_dims
        and math.prod(shape[:-1]) >= COLUMN_ROWS
    )


# What jax.lax's own ops call on their operands before binding, so that inside shard_map both
# vary over the same mesh axes (renamed between releases; JAX before either needs nothing).
_same_mesh_axes: Callable[..., Any] = getattr(
    _jax_core, "auto_insert_reshard", getattr(_jax_core, "standard_insert_pvary", lambda *xs: xs)
)


def columns_by_written_indices(data: jax.Array, idx: jax.Array, plan: GatherPlan) -> jax.Array:
    return _columns_p.bind(*_same_mesh_axes(data, idx), plan=plan)


def _from_written_indices(data: jax.Array, idx: jax.Array, plan: GatherPlan) -> jax.Array:
    """The plan's gather from ``idx`` (never negative) as uint64 in a buffer of its own: the max
    of each index and one zero of padding, a reduce-window XLA keeps out of the gather's loop."""
    with x64_enabled():
        wide = idx.astype(jnp.uint64)
        window = (1,) * (wide.ndim - 1) + (2,)
        padding = ((0, 0),) * (wide.ndim - 1) + ((0, 1),)
        written = lax.reduce_window(wide, np.uint64(0), lax.max, window, (1,) * wide.ndim, padding)
        return direct(data, written, plan)


def _columns_lowering(ctx: Any, data: Any, idx: Any, *, plan: GatherPlan) -> Any:
    with x64_enabled():
        return mlir.lower_fun(functools.partial(_from_written_indices, plan=plan), multiple_results=False)(
            ctx, data, idx
        )


def _columns_batch(args: Any, dims: Any, *, plan: GatherPlan) -> tuple[jax.Array, int]:
    """Batched data with shared indices is one more row dim; anything else the generic gather."""
    (data, idx), (data_dim, idx_dim) = args, dims
    if idx_dim is None:
        data = jnp.moveaxis(data, data_dim, 0)
        rows = gather_plan(data.shape, idx.shape[:-1], data.ndim - 1)
        return columns_by_written_indices(data, idx, rows), 0
    return jax.vmap(functools.partial(direct, plan=plan), in_axes=dims)(data, idx), 0


_columns_p = Primitive("jax_gather_columns")
_columns_p.def_impl(direct)  # op by op (jax.disable_jit): the generic gather


# The gather primitive's parameters, as lax.gather binds them: JAX 0.12.1 added out_sharding.
_GATHER_OUT_SHARDING = "out_sharding" in inspect.signature(lax.gather).parameters


def _columns_abstract(data: Any, idx: Any, *, plan: GatherPlan) -> Any:
    """The generic gather's output type: its rule also carries shard_map's and sharding's types."""
    return lax.gather_p.abstract_eval(
        data,
        idx,
        dimension_numbers=plan.dimension_numbers,
        slice_sizes=plan.slice_sizes,
        unique_indices=False,
        indices_are_sorted=False,
        mode=PROMISE,
        fill_value=None,
        **({"out_sharding": None} if _GATHER_OUT_SHARDING else {}),
    )


_columns_p.def_effectful_abstract_eval(_columns_abstract)
mlir.register_lowering(_columns_p, _columns_lowering)
batching.primitive_batchers[_columns_p] = _columns_batch
