"""The pinned fill: a select of rows that keeps its bits through its fill, where XLA:CPU keeps
them so (:func:`pins_the_fill`); elsewhere :func:`jax_gather._fill.select_exact` pins each
selected element."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_gather._fill import (
    bits_type,
    changed_by_float32,
    opaque_zeros,
    run_on_cpu,
    xla_cpu_converts_select,
    xla_cpu_keeps_bits,
)


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
        f = opaque_fill(f.reshape(()), i)
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
    """``fill`` as it is on the CPU, through an exclusive or of its bits with one of
    :func:`opaque_zeros` (of the first of ``indices``): a value XLA and LLVM cannot see through,
    so a select against it keeps its bits where :func:`pins_the_fill`. Elsewhere ``fill``."""
    zero = opaque_zeros(indices.reshape(-1)[:1]).reshape(())
    return lax.platform_dependent(fill, zero, cpu=_fill_through_zero, default=lambda f, _: f)


@jax.custom_jvp
def _fill_through_zero(fill: jax.Array, zero: jax.Array) -> jax.Array:
    kind = bits_type(fill.dtype)
    return lax.bitcast_convert_type(lax.bitcast_convert_type(fill, kind) ^ zero.astype(kind), fill.dtype)


@_fill_through_zero.defjvp
def _fill_through_zero_jvp(primals, tangents):
    return _fill_through_zero(*primals), tangents[0]
