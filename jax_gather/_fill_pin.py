"""The pinned fill: a select of rows that keeps its bits through its fill, where XLA:CPU keeps
them so (:func:`pins_the_fill`); elsewhere :func:`jax_gather._fill.select_exact` pins each
selected element."""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.interpreters import batching, mlir

from jax_gather._fill import (
    bits_type,
    changed_by_float32,
    opaque_zeros,
    run_on_cpu,
    xla_cpu_converts_select,
    xla_cpu_keeps_bits,
)

try:
    from jax.extend.core import Primitive
except ImportError:  # pragma: no cover - jax 0.4.35 keeps it in jax.core
    from jax.core import Primitive  # type: ignore[attr-defined,no-redef]


def pins_the_fill(dtype: np.dtype) -> bool:
    """Whether the select of "fill" over rows of ``dtype`` (slices of more than one element, not
    all one slice) keeps its bits on the CPU through its fill alone (:func:`opaque_fill`), where
    otherwise each selected element would be pinned (:func:`jax_gather._fill.pinned_bits`).

    Fact (JAX 0.11 and 0.12, x86-64, asked once per process and type): where XLA:CPU selects
    bfloat16 as it is (:func:`xla_cpu_converts_select`), a select of gathered rows against a
    constant fill or one passed in moves the ends of its loop through float32 (``jnp.take``'s
    "fill" quiets signalling NaNs of rows of 2-128 from tables of 2-4096 rows); against a fill
    whose bits went through an integer op, LLVM selects the bits, in XLA's count one flop an
    element as ``jnp``'s (the pinned bits: four). From one slice (XLA's broadcast) it does not."""
    if xla_cpu_keeps_bits(dtype) or xla_cpu_converts_select(dtype):
        return False
    return _xla_cpu_keeps_rows_against_an_opaque_fill(dtype)


@functools.lru_cache(maxsize=64)
def _xla_cpu_keeps_rows_against_an_opaque_fill(dtype: np.dtype) -> bool:
    width = np.dtype(f"uint{8 * dtype.itemsize}")  # how NumPy stores it
    changed = changed_by_float32(dtype)
    patterns = np.concatenate([p[:: max(1, p.size // 8)] for p in changed])
    fill = patterns[:1]  # a signalling NaN
    widths = (2, 3, 17, 64)  # even and odd rows, one past a vector of 16, the longest row pin
    tables = [np.resize(patterns, (3, w)) for w in widths]
    ids = np.arange(129, dtype=np.int32) % 4 - 1  # -1: the fill

    def selected(i: jax.Array, f: jax.Array, *ts: jax.Array) -> list[jax.Array]:
        f = opaque_fill(f.reshape(()), i)[:, None]
        return [jnp.where(i[:, None] >= 0, t[jnp.maximum(i, 0)], f) for t in ts]

    try:
        out = run_on_cpu(selected, ids, fill.view(dtype), *(t.view(dtype) for t in tables))
    except RuntimeError:  # XLA:CPU cannot compile them for this CPU (see gathered_as_bits)
        return False
    if out is None:
        return False
    expected = [np.where(ids[:, None] >= 0, t[np.maximum(ids, 0)], fill) for t in tables]
    return all((np.asarray(o).view(width) == e).all() for o, e in zip(out, expected))


def opaque_fill(fill: jax.Array, indices: jax.Array) -> jax.Array:
    """``fill`` as it is on the CPU, one per element of ``indices``, through an exclusive or of its
    bits with :func:`opaque_zeros` of :func:`one_pin` of them: a value XLA and LLVM cannot see
    through, so a select against it keeps its bits where :func:`pins_the_fill`. Elsewhere
    ``fill``, broadcast."""
    zeros = opaque_zeros(one_pin(indices))
    return lax.platform_dependent(fill, zeros, cpu=_fill_through_zero, default=_fill_as_zeros)


def _fill_as_zeros(fill: jax.Array, zeros: jax.Array) -> jax.Array:
    # A select of fill or fill (XLA keeps fill's broadcast): typed as zeros are, so varying
    # where they vary inside shard_map, as the CPU branch's result must be.
    return jnp.where(zeros == 0, fill, fill)


one_pin_p = Primitive("jax_gather_one_pin")


def one_pin(pins: jax.Array) -> jax.Array:
    """One run-time integer for each of ``pins``: their first, broadcast, whose opaque zeros XLA
    counts once, where one device holds all of them; ``pins`` as they are where XLA's SPMD
    partitioner may split them across devices, as it lowers (the first would be sent to every
    device: a scalar all-reduce each call, 2.0-2.6x the time of ``jnp``'s "fill" from sharded
    ids on two CPU devices, bfloat16 rows of 2-16 by 1024-4096 ids, JAX 0.12)."""
    return one_pin_p.bind(pins) if pins.size else pins


def _first(pins: Any) -> Any:
    return jnp.broadcast_to(pins.reshape(-1)[:1].reshape(()), pins.shape)


def _partitioned(axis_context: Any) -> bool:
    """Whether XLA's SPMD partitioner may split the arrays of a program lowered in
    ``axis_context`` across devices: a ``jit`` over more than one device, or the axes of a
    ``shard_map`` left to the partitioner (its manual axes are each device's own)."""
    devices = getattr(axis_context, "num_devices", None)
    if devices is not None:
        return devices > 1
    mesh = getattr(axis_context, "mesh", None)
    manual = getattr(axis_context, "manual_axes", ())
    return mesh is not None and math.prod(n for a, n in mesh.shape.items() if a not in manual) > 1


def _one_pin_lowering(ctx: Any, pins: Any) -> Any:
    each = _partitioned(ctx.module_context.axis_context)
    return mlir.lower_fun(lambda p: p if each else _first(p), multiple_results=False)(ctx, pins)


one_pin_p.def_impl(_first)
one_pin_p.def_abstract_eval(lambda pins: pins)
mlir.register_lowering(one_pin_p, _one_pin_lowering)
batching.primitive_batchers[one_pin_p] = lambda args, dims: (one_pin(args[0]), dims[0])


def _let_shard_map_check(primitive: Any) -> None:
    # shard_map before JAX 0.6 (then in jax.experimental alone) checks each primitive of its
    # body against a table of replication rules and refuses one it has none for: the standard
    # rule (the result varies across devices as the operand does). Later releases type that from
    # the abstract value.
    if hasattr(jax, "shard_map"):
        return
    from jax.experimental import shard_map

    shard_map.register_standard_check(primitive)  # type: ignore[attr-defined]
    shard_map.register_standard_rewrite(primitive)  # type: ignore[attr-defined]


_let_shard_map_check(one_pin_p)


@jax.custom_jvp
def _fill_through_zero(fill: jax.Array, zeros: jax.Array) -> jax.Array:
    kind = bits_type(fill.dtype)
    return lax.bitcast_convert_type(lax.bitcast_convert_type(fill, kind) ^ zeros.astype(kind), fill.dtype)


@_fill_through_zero.defjvp
def _fill_through_zero_jvp(primals, tangents):
    return _fill_through_zero(*primals), jnp.broadcast_to(tangents[0], primals[1].shape)
