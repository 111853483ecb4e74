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
    element_bits,
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
        f = opaque_fill(f.reshape(()), one_pin(i))[:, None]
        return [jnp.where(i[:, None] >= 0, t[jnp.maximum(i, 0)], f) for t in ts]

    try:
        out = run_on_cpu(selected, ids, fill.view(dtype), *(t.view(dtype) for t in tables))
    except RuntimeError:  # XLA:CPU cannot compile them for this CPU (see gathered_as_bits)
        return False
    if out is None:
        return False
    expected = [np.where(ids[:, None] >= 0, t[np.maximum(ids, 0)], fill) for t in tables]
    return all((np.asarray(o).view(width) == e).all() for o, e in zip(out, expected))


def opaque_fill(fill: jax.Array, pins: jax.Array) -> jax.Array:
    """``fill`` as it is on the CPU, one per element of ``pins`` (:func:`one_pin`'s), through an
    exclusive or of its bits with :func:`opaque_zeros` of them: a value XLA and LLVM cannot see
    through, so a select against it keeps its bits where :func:`pins_the_fill`. Elsewhere
    ``fill``, broadcast."""
    zeros = opaque_zeros(pins)
    return lax.platform_dependent(fill, zeros, cpu=_fill_through_zero, default=_fill_as_zeros)


def _fill_as_zeros(fill: jax.Array, zeros: jax.Array) -> jax.Array:
    # A select of fill or fill (XLA keeps fill's broadcast): typed as zeros are, so varying
    # where they vary inside shard_map, as the CPU branch's result must be.
    return jnp.where(zeros == 0, fill, fill)


one_pin_p = Primitive("jax_gather_one_pin")


def one_pin(pins: jax.Array, data: jax.Array | None = None) -> jax.Array:
    """One run-time integer for each of ``pins`` (one per index), for :func:`opaque_zeros`: where
    one device holds them all, one for all, whose zeros XLA counts once: their first, or given
    ``data`` (where the indices are constants XLA computes as it compiles, and so the zeros of
    any of them), ``data``'s first element. ``pins`` as they are where XLA's SPMD partitioner may
    split the arrays across devices, as it lowers (an element read on one device would be sent
    to every other: a scalar all-reduce each call, 2.0-2.6x the time of ``jnp``'s "fill" from
    sharded ids on two CPU devices, bfloat16 rows of 2-16 by 1024-4096 ids, JAX 0.12)."""
    if not pins.size:
        return pins
    bits = None if data is None or not data.size else _UNSIGNED.get(element_bits(data.dtype))
    if data is None or bits is None:
        return one_pin_p.bind(pins, pins, from_data=False)
    # Data's bits, so that no tangent reaches the primitive (a bitcast has none).
    return one_pin_p.bind(pins, lax.bitcast_convert_type(data, bits), from_data=True)


_UNSIGNED = {4: jnp.uint4, 8: jnp.uint8, 16: jnp.uint16, 32: jnp.uint32, 64: jnp.uint64}


def _first(pins: Any, source: Any, from_data: bool) -> Any:
    """The first of ``pins``, or ``from_data`` the first of ``source`` with its bits repeated to
    the width of ``pins`` (its sign and lowest bit unknown to LLVM, as a run-time index's are:
    zero- or sign-extended from a narrower type, LLVM proves :func:`opaque_zeros` of it zero
    and folds the pin away), broadcast to the shape of ``pins``."""
    if not from_data:
        return jnp.broadcast_to(pins.reshape(-1)[:1].reshape(()), pins.shape)
    first = source.reshape(-1)[:1].reshape(())
    width, pin_width = element_bits(source.dtype), element_bits(pins.dtype)
    if width < pin_width:
        wide = _UNSIGNED[pin_width]
        copies = sum(1 << k for k in range(0, pin_width, width))
        first = lax.convert_element_type(first, wide) * np.asarray(copies, wide)
    return jnp.broadcast_to(lax.convert_element_type(first, pins.dtype), pins.shape)


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


def _one_pin_lowering(ctx: Any, pins: Any, source: Any, from_data: bool) -> Any:
    each = _partitioned(ctx.module_context.axis_context)
    first = lambda p, s: p if each else _first(p, s, from_data)
    return mlir.lower_fun(first, multiple_results=False)(ctx, pins, source)


one_pin_p.def_impl(_first)
# Typed as the pins are: its result reaches only opaque_zeros, zero on every device.
one_pin_p.def_abstract_eval(lambda pins, source, from_data: pins)
mlir.register_lowering(one_pin_p, _one_pin_lowering)


def _batched(args: Any, dims: Any, **params: Any) -> Any:
    return one_pin_p.bind(*args, **params), dims[0]


batching.primitive_batchers[one_pin_p] = _batched


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
