"""Index handling shared by the ops: dtype rules, bounds masks, bounds errors, fill values.

Bounds are always judged on the indices as the caller gave them, per index component against
its own data axis, before any narrowing: an int64 index of 2**32 + 1 is out of bounds, never a
read of row 1 after a wrap to int32.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import export, lax

from jax_gather._check_primitive import check_indices
from jax_gather._checks import fail
from jax_gather._cpu import INLINE_FLOPS
from jax_gather._x64 import x64_on
from jax_gather.plans import GatherPlan

_INT32 = np.iinfo(np.int32)
INT32_MAX = int(_INT32.max)


@functools.lru_cache(maxsize=64)
def _is_integer(dtype: np.dtype) -> bool:
    return jnp.issubdtype(dtype, jnp.integer)


def host_indices(op_name: str, indices: Any) -> np.ndarray:
    """Indices given as NumPy or an array-like, checked for an integer dtype (before any
    conversion, which would truncate floats) and in native byte order (JAX takes no other)."""
    host = np.asarray(indices)
    if host.size == 0 and host.dtype == np.float64 and not isinstance(indices, np.ndarray):
        host = host.astype(np.int64)  # an empty Python list has no dtype of its own
    check_index_dtype(op_name, host.dtype)
    if not host.dtype.isnative:
        host = host.astype(host.dtype.newbyteorder("="))
    return host


def check_index_dtype(op_name: str, dtype: Any) -> None:
    if not _is_integer(dtype):
        raise fail(
            TypeError,
            op_name,
            f"indices must have an integer dtype (int32 or int64), got {np.dtype(dtype).name}",
        )


def _position(pos: tuple[int | str, ...]) -> str:
    return "indices" if not pos else "indices[" + ", ".join(str(p) for p in pos) + "]"


def _range_text(size: int) -> str:
    return f"valid range [{-size}, {size - 1}]" if size else "the axis is empty: no index is valid"


def raise_if_out_of_bounds(plan: GatherPlan, indices: np.ndarray) -> None:
    """Raises IndexError naming the first (C order) out-of-bounds index of concrete indices."""
    if judge_on_host(plan, indices) != OUT_OF_BOUNDS:
        return
    bad = np.zeros(indices.shape, dtype=bool)
    for c, size in enumerate(plan.index_sizes):
        part = indices[..., c] if plan.tuple_indices else indices
        # Python-int bounds keep the comparison exact for every integer dtype (NEP 50).
        part_bad = (part < -size) | (part >= size)
        if plan.tuple_indices:
            bad[..., c] = part_bad
        else:
            bad = part_bad
    if not bad.any():
        return
    pos = tuple(int(p) for p in np.unravel_index(int(np.argmax(bad)), bad.shape))
    component = pos[-1] if plan.tuple_indices else 0
    axis, size = plan.dimension_numbers.start_index_map[component], plan.index_sizes[component]
    message = (
        f"{_position(pos)} = {indices[pos]} is out of bounds for axis {axis} of size {size} "
        f"({_range_text(size)})"
    )
    if plan.tuple_indices:
        tuple_pos = _position((*pos[:-1], ":"))
        message += f"; it is component {component} of the index tuple {tuple_pos}"
    raise fail(IndexError, plan.op_name, message)


_SIGNED_TO_UNSIGNED = {np.dtype(f"i{n}"): np.dtype(f"u{n}") for n in (1, 2, 4, 8)}


def in_range_on_host(plan: GatherPlan, indices: np.ndarray) -> bool:
    """Whether every index of concrete ``indices`` is in [0, s-1] of its axis: one pass, as one
    maximum per component of the indices viewed unsigned (a negative index becomes huge)."""
    return in_range_test(plan, indices.dtype, indices.size)(indices)


@functools.lru_cache(maxsize=256)
def in_range_test(plan: GatherPlan, dtype: np.dtype, size: int) -> Callable[[np.ndarray], bool]:
    """:func:`in_range_on_host` for indices of this dtype and size, with everything that does
    not depend on their values worked out once."""
    if size == 0:
        return lambda indices: True
    if not all(isinstance(s, int) for s in plan.index_sizes):
        return lambda indices: False  # symbolic axes (jax.export): left to judge_on_host
    unsigned = _SIGNED_TO_UNSIGNED.get(dtype, dtype)
    # The bound below which an index viewed unsigned is in [0, s-1]: s, or for a signed dtype
    # whose non-negative values are all below s, where its negatives start (2**(bits-1)).
    limit = int(np.iinfo(dtype).max) + 1 if dtype in _SIGNED_TO_UNSIGNED else None
    bounds = [s if limit is None else min(s, limit) for s in plan.index_sizes]
    if not plan.tuple_indices:
        (bound,) = bounds
        maximum = np.maximum.reduce  # NumPy's max() without its Python wrapper: ~0.2 µs a call
        return lambda indices: int(maximum(indices.view(unsigned), axis=None)) < bound

    def test(indices: np.ndarray) -> bool:
        view = indices.view(unsigned)
        highs = view.reshape(-1, view.shape[-1]).max(axis=0)
        return all(int(high) < bound for high, bound in zip(highs, bounds))

    return test


def normalised_on_host(plan: GatherPlan, indices: np.ndarray) -> np.ndarray | None:
    """Concrete ``indices`` with each negative index moved into [0, s-1] (a new array, in the
    indices' dtype where it holds every s, else int64), or None where one is out of bounds:
    an index in [-s, s-1] lands in [0, s-1] and any other outside it, so one pass over the
    result judges them all."""
    sizes = _host_sizes(plan, indices.dtype)
    unsigned = _SIGNED_TO_UNSIGNED.get(indices.dtype)
    if unsigned is None or sizes.dtype != indices.dtype:
        moved = indices + (indices < 0) * sizes  # unsigned: nothing to move; or a wider dtype
    else:
        # min(u, u + s) of the indices viewed unsigned, as in in_bounds_mask: i + s for i in
        # [-s, -1], i for i in [0, s-1], and s or more for every other (sizes fit the dtype).
        u = indices.view(unsigned)
        moved = np.minimum(u, u + _host_sizes(plan, unsigned)).view(indices.dtype)
    return moved if in_range_on_host(plan, moved) else None


@functools.lru_cache(maxsize=256)
def _host_sizes(plan: GatherPlan, dtype: np.dtype) -> Any:
    """The axis sizes in ``dtype`` where it holds them all, else in int64: one per index
    component, or a scalar for one index per element."""
    fits = max(plan.index_sizes) <= np.iinfo(dtype).max
    sizes = np.asarray(plan.index_sizes, dtype if fits else np.int64)
    return sizes if plan.tuple_indices else sizes[0]


IN_RANGE, IN_BOUNDS, OUT_OF_BOUNDS = "in [0, s-1]", "in [-s, s-1]", "out of bounds"


def judge_on_host(plan: GatherPlan, indices: np.ndarray) -> str:
    """Where concrete ``indices`` lie, by a minimum and a maximum per component (two passes, no
    temporaries): ``IN_RANGE`` (every index in [0, s-1] of its axis), ``IN_BOUNDS`` (every one in
    [-s, s-1]) or ``OUT_OF_BOUNDS``."""
    if indices.size == 0:
        return IN_RANGE
    if plan.tuple_indices:
        leading = tuple(range(indices.ndim - 1))
        lows, highs = indices.min(axis=leading).tolist(), indices.max(axis=leading).tolist()
    else:
        lows, highs = [int(indices.min())], [int(indices.max())]
    if not all(-size <= low and high < size for low, high, size in zip(lows, highs, plan.index_sizes)):
        return OUT_OF_BOUNDS
    return IN_RANGE if min(lows) >= 0 else IN_BOUNDS


def _index_dtype(plan: GatherPlan) -> Any:
    """int32, or int64 where an indexed axis may be longer than int32 can address. A symbolic
    axis (jax.export) may be, when x64 is on; without x64 JAX's own shape arithmetic is int32."""
    wide = any(x64_on() if export.is_symbolic_dim(s) else s > _INT32.max for s in plan.index_sizes)
    return jnp.int64 if wide else jnp.int32


def _sizes(plan: GatherPlan, dtype: Any) -> Any:
    """The sizes of the indexed axes in ``dtype``: a scalar where the indices get an index-vector
    dim appended, else one per index component. Symbolic sizes become values of the program."""
    sizes: Any
    if any(export.is_symbolic_dim(s) for s in plan.index_sizes):
        sizes = jnp.stack([jnp.asarray(s).astype(dtype) for s in plan.index_sizes])
    else:
        sizes = np.asarray(plan.index_sizes, dtype)
    return sizes if plan.tuple_indices else sizes[0]


def _saturate(indices: jax.Array, target: Any) -> jax.Array:
    """``indices`` in the signed ``target`` dtype; values beyond its range saturate, so an index
    stays out of bounds of every axis that ``target`` can address."""
    if indices.dtype == target:
        return indices
    src, info = jnp.iinfo(indices.dtype), jnp.iinfo(target)
    lo, hi = max(src.min, info.min), min(src.max, info.max)
    if (lo, hi) != (src.min, src.max):
        indices = jnp.clip(indices, jnp.asarray(lo, indices.dtype), jnp.asarray(hi, indices.dtype))
    return indices.astype(target)


def _unsigned_parts(plan: GatherPlan, indices: jax.Array) -> tuple[jax.Array, Any]:
    """The indices, narrowed with saturation to the working dtype and reinterpreted as the
    unsigned type of that width, and the axis sizes in that unsigned type.

    In unsigned (modular) arithmetic every bound below is one compare or one ``minimum``, which
    the CPU's vector units have: a signed index ``i`` is in [-s, s-1] exactly when ``i + s``
    wraps into [0, 2s-1], and ``min(i, i + s)`` is ``i`` for i in [0, s-1] and ``i + s`` for i
    in [-s, -1].
    """
    target = _index_dtype(plan)
    unsigned = jnp.dtype(f"uint{8 * jnp.dtype(target).itemsize}")
    as_unsigned = lambda x: lax.bitcast_convert_type(x, unsigned)
    return as_unsigned(_saturate(indices, target)), _sizes(plan, target).astype(unsigned)


def in_bounds_mask(plan: GatherPlan, indices: jax.Array) -> jax.Array:
    """Per-element (per index component for GatherND) in-bounds mask of the raw indices."""
    u, sizes = _unsigned_parts(plan, indices)
    return u + sizes < sizes + sizes  # exact for every index and every size below 2**(bits-1)


def in_range_mask(plan: GatherPlan, indices: jax.Array) -> jax.Array:
    """Per-element (per index component) mask of the raw indices that are in [0, s-1]."""
    u, sizes = _unsigned_parts(plan, indices)
    return u < sizes


def in_bounds(plan: GatherPlan, indices: Any) -> jax.Array:
    """Whether each index (each index tuple, for GatherND) is within [-s, s-1] of its axis.

    The same judgement the ops make, as a value: return ``jnp.all(in_bounds(plan, indices))``
    beside a ``mode="fill"`` result where a checkify check cannot go, e.g. in a program to be
    serialized with ``jax.export`` (JAX cannot serialize a checkify effect).

    Example:
      >>> import jax_gather
      >>> plan = jax_gather.gather_nd_plan((3, 4), (2, 2))
      >>> jax_gather.in_bounds(plan, [[2, -4], [3, 0]])
      Array([ True, False], dtype=bool)
    """
    if isinstance(indices, jax.Array):
        check_index_dtype(plan.op_name, indices.dtype)
    else:
        indices = jnp.asarray(narrow_host_indices(host_indices(plan.op_name, indices)))
    if tuple(indices.shape) != plan.indices_shape:
        raise fail(
            ValueError,
            plan.op_name,
            f"indices must have the shape the plan was made for, {plan.indices_shape}, "
            f"got {tuple(indices.shape)}",
        )
    ok = in_bounds_mask(plan, indices)
    return jnp.all(ok, axis=-1) if plan.tuple_indices else ok


def _first_false(ok: jax.Array) -> tuple[tuple[jax.Array, ...], jax.Array]:
    """The position of the first False of ``ok`` in C order, and a mask that is True there only.

    Found one dim at a time by reductions, rather than by ``argmin`` of the raveled mask and a
    dynamic index: reductions trace for any sharding of the indices (JAX's explicit sharding
    refuses dynamic slices of sharded dims) and for symbolic shapes.
    """
    at = jnp.logical_not(ok)
    pos = []
    for d in range(ok.ndim):
        along = lax.broadcasted_iota(jnp.int32, ok.shape, d)
        first = jnp.min(jnp.where(at, along, _INT32.max))
        at = at & (along == first)
        pos.append(first)
    return tuple(pos), at


def _pick(values: jax.Array, k: jax.Array) -> jax.Array:
    """``values[k]`` by a masked sum, not a dynamic index: under ``vmap`` that index would become
    a gather of its own, which JAX's index checks flag when ``k`` is the no-failure sentinel."""
    return jnp.sum(jnp.where(jnp.arange(values.shape[0]) == k, values, 0), dtype=values.dtype)


def check_in_bounds(plan: GatherPlan, indices: jax.Array, ok: jax.Array) -> jax.Array:
    """``indices``, carrying a checkify check that reports the first out-of-bounds index in
    the eager error's words."""
    if 0 in ok.shape:
        return indices
    pos, at = _first_false(ok)
    lowest = jnp.asarray(jnp.iinfo(indices.dtype).min, indices.dtype)
    value = jnp.max(jnp.where(at, indices, lowest))
    component: Any = pos[-1] if plan.tuple_indices else 0
    sizes = jnp.asarray(_sizes(plan, _index_dtype(plan)))
    axis: Any
    if plan.tuple_indices:
        axes = jnp.asarray(plan.dimension_numbers.start_index_map)
        axis, size = _pick(axes, component), _pick(sizes, component)
    else:
        axis, size = plan.dimension_numbers.start_index_map[0], sizes
    slots = lambda n: "indices" if not n else "indices[" + ", ".join(["{}"] * n) + "]"
    message = (
        f"{plan.op_name}: {slots(ok.ndim)} = {{}} is out of bounds for axis {{}} of size {{}} "
        "(valid range [{}, {}])"
    )
    args = (*pos, value, axis, size, -size, size - 1)
    if plan.tuple_indices:
        message += "; it is component {} of the index tuple indices[" + "{}, " * (ok.ndim - 1) + ":]"
        args += (component, *pos[:-1])
    return check_indices(indices, jnp.all(ok), message, *args)


def working_indices(
    plan: GatherPlan, indices: jax.Array, clip: bool, past_end: bool = False, unclamped: bool = False
) -> jax.Array:
    """Indices as the gather reads them: narrowed with saturation, negatives normalised, and
    clamped into [0, s-1]. With ``clip`` an out-of-bounds index goes to the nearest end of
    [-s, s-1] first, as the "clip" mode says; otherwise it becomes some in-range index (the
    select of "fill" and "checked" replaces what it reads, and a promise made it undefined).
    With ``past_end`` every out-of-bounds index becomes ``s`` instead, and every in-bounds one
    stays in [0, s-1]: the slot of a data padded by one ``fill_value`` on each indexed axis.
    With ``unclamped`` (for indices promised to be in bounds, where :func:`clamp_pays` says
    not), negatives are normalised and nothing more.

    Clamping here, rather than leaving it to the gather's native clamp, keeps every index the
    gather sees in bounds, so JAX's own checkify index checks never flag a position that a
    mode handles on purpose (the library's check reports a broken promise), and it lets LLVM
    drop the gather's own clamp: measured 0.7-0.9x the time of a signed normalise-and-clamp on
    the element gathers (docs/performance.md).
    """
    target = _index_dtype(plan)
    if unclamped:
        return _normalised_unclamped(plan, _saturate(indices, target), target)
    if clip:
        indices = jnp.maximum(_saturate(indices, target), -_sizes(plan, target))
    u, sizes = _unsigned_parts(plan, indices)
    # min(u, u + s) is below s exactly for the in-bounds indices (see in_bounds_mask).
    in_range = jnp.minimum(jnp.minimum(u, u + sizes), sizes if past_end else sizes - 1)
    return lax.bitcast_convert_type(in_range, target)


# What XLA counts for normalising one index component without the clamp (a shift, an and, an
# add), as for jnp's own normalisation (a compare, an add, a select); with it, five.
_UNCLAMPED_FLOPS = 3


def normalising_is_inline(components: int) -> bool:
    """Whether a program that normalises this many index components (and gathers) stays under
    INLINE_FLOPS, on the calling thread."""
    return _UNCLAMPED_FLOPS * components < INLINE_FLOPS


# XLA:CPU splits a loop whose flops exceed its bytes into a task per core (its parallel task
# assignment counts it compute-bound); one that does not, from this many bytes of output.
_SPLIT_ANYWAY_BYTES = 512 << 10


def clamp_pays(plan: GatherPlan, indices: jax.Array, dtype: Any) -> bool:
    """Whether the indices of a promise are clamped as well as normalised.

    The clamp saves the gather's own (the docstring of working_indices) but costs two flops per
    index component, which XLA counts: they can take a program jnp's normalisation keeps under
    INLINE_FLOPS over it, to a worker thread (tens of microseconds), and an element gather of
    narrow data past one flop per byte, which XLA splits into a task per core. So it is taken
    only where neither can happen: at least _SPLIT_ANYWAY_BYTES of output and too many
    components for jnp's program to stay on the calling thread."""
    n, out = indices.size, math.prod(plan.output_shape)
    if not isinstance(n, int) or not isinstance(out, int):
        return True
    big = out * np.dtype(dtype).itemsize >= _SPLIT_ANYWAY_BYTES
    return big and _UNCLAMPED_FLOPS * n >= INLINE_FLOPS


def _normalised_unclamped(plan: GatherPlan, indices: jax.Array, target: Any) -> jax.Array:
    """``i + s`` for negative ``i``, else ``i``: in [0, s-1] for every index in bounds. An index out
    of bounds stays out (the library's check reports the broken promise), and the gather's own
    clamp keeps the read in the array."""
    bits = jnp.iinfo(target).bits
    sign = lax.shift_right_arithmetic(indices, jnp.asarray(bits - 1, target))
    return indices + (sign & _sizes(plan, target))


def index_vectors(
    plan: GatherPlan, indices: jax.Array, clip: bool, past_end: bool = False, unclamped: bool = False
) -> jax.Array:
    """``working_indices`` with the index-vector dim the gather expects."""
    idx = working_indices(plan, indices, clip, past_end, unclamped)
    return idx if plan.tuple_indices else idx[..., None]


def in_range_vectors(plan: GatherPlan, indices: jax.Array) -> jax.Array:
    """Index vectors from indices known to be in [0, s-1]: taken as they are (no arithmetic),
    only widened from a narrow or unsigned dtype to the signed one the gather reads."""
    if indices.dtype not in (jnp.int32, jnp.int64):
        indices = indices.astype(_index_dtype(plan))
    return indices if plan.tuple_indices else indices[..., None]


def narrow_host_indices(indices: np.ndarray) -> np.ndarray:
    """With x64 off JAX would wrap 64-bit indices to int32; saturate them instead."""
    if x64_on() or indices.dtype.itemsize < 8:
        return indices
    if indices.dtype.kind == "u":
        return np.minimum(indices, _INT32.max).astype(np.int32)
    return np.clip(indices, _INT32.min, _INT32.max).astype(np.int32)


def default_fill_value(dtype: Any) -> Any:
    """``jnp.take``'s defaults: NaN for inexact, the minimum for signed, the maximum for unsigned;
    for a float type without NaN (float4_e2m1fn), its minimum, as for signed integers (``jnp.take``
    would convert NaN to some finite value: -0 for float4_e2m1fn)."""
    if jnp.issubdtype(dtype, jnp.inexact):
        if jnp.issubdtype(dtype, jnp.floating) and not _float_type(np.dtype(dtype)).has_nan:
            return float(jnp.finfo(dtype).min)
        return np.nan
    if jnp.issubdtype(dtype, jnp.signedinteger):
        return int(jnp.iinfo(dtype).min)
    if jnp.issubdtype(dtype, jnp.unsignedinteger):
        return int(jnp.iinfo(dtype).max)
    return True


@functools.lru_cache(maxsize=64)
def _default_fill(dtype: np.dtype) -> np.ndarray:
    value = np.asarray(default_fill_value(dtype)).astype(dtype)
    value.flags.writeable = False  # shared by every call
    return value


class _FloatType(NamedTuple):
    """What a real floating dtype holds: finite values below ``overflow`` in magnitude (its
    largest finite value plus half its last step: what rounds to it), NaN, infinities."""

    lowest: float
    highest: float
    overflow: Fraction
    has_nan: bool
    has_inf: bool


@functools.lru_cache(maxsize=64)
def _float_type(dtype: np.dtype) -> _FloatType:
    info = jnp.finfo(dtype)
    highest = np.asarray(info.max, dtype)
    bits = highest.view(f"u{dtype.itemsize}")
    below = (bits - 1).astype(bits.dtype).view(dtype)  # the finite value next below the largest
    step = Fraction(float(highest)) - Fraction(float(below))
    special = lambda v: float(np.asarray(v).astype(dtype))
    return _FloatType(
        lowest=float(info.min),
        highest=float(highest),
        overflow=Fraction(float(highest)) + step / 2,
        has_nan=bool(np.isnan(special(np.nan))),
        has_inf=bool(np.isinf(special(np.inf))),
    )


def _holds(dtype: np.dtype) -> str:
    """The values ``dtype`` holds, as the fill messages state the rule."""
    if dtype == np.bool_:
        return "it holds False, True, 0 and 1"
    if jnp.issubdtype(dtype, jnp.integer):
        info = jnp.iinfo(dtype)
        return f"it holds the integers in [{info.min}, {info.max}]"
    part = np.dtype(jnp.finfo(dtype).dtype)  # a complex dtype's parts
    t = _float_type(part)
    specials = {
        (True, True): "infinities and NaN",
        (True, False): "NaN but no infinities",
        (False, True): "infinities but no NaN",
        (False, False): "no infinities and no NaN",
    }[t.has_nan, t.has_inf]
    values = f"the values that round into [{t.lowest:g}, {t.highest:g}], {specials}"
    return f"it holds {values}" if part == dtype else f"its real and imaginary parts hold {values}"


def _cannot_hold(value: str, dtype: np.dtype) -> str:
    return f"fill_value {value} cannot be represented in the data dtype {dtype.name} ({_holds(dtype)})"


def _unrepresentable(value: bool | int | float | complex, dtype: np.dtype) -> bool:
    """Whether a Python scalar cannot be a value of ``dtype``: out of its range, or a fraction
    for an integer type, or a special (inf, NaN) it does not have, or an imaginary part for a
    real type. Rounding to the nearest value is allowed, as in a cast."""
    if isinstance(value, complex):
        if not jnp.issubdtype(dtype, jnp.complexfloating):
            return value.imag != 0 or _unrepresentable(value.real, dtype)
        part = np.dtype(jnp.finfo(dtype).dtype)
        return _unrepresentable(value.real, part) or _unrepresentable(value.imag, part)
    if dtype == np.bool_:
        return value not in (0, 1)
    if jnp.issubdtype(dtype, jnp.integer):
        if isinstance(value, float) and not value.is_integer():
            return True  # a fraction, inf or NaN
        info = jnp.iinfo(dtype)
        return not info.min <= value <= info.max
    if jnp.issubdtype(dtype, jnp.complexfloating):
        return _unrepresentable(value, np.dtype(jnp.finfo(dtype).dtype))
    t = _float_type(dtype)
    if value != value:
        return not t.has_nan
    if value in (math.inf, -math.inf):
        return not t.has_inf
    if abs(Fraction(value)) >= t.overflow:
        return True
    # Within range, a value may still have no neighbour to round to (float8_e8m0fnu has no
    # zero and no negatives: the cast gives NaN).
    return bool(np.isnan(np.asarray(float(value)).astype(dtype)))


def _python_scalar(op_name: str, fill_value: Any) -> tuple[np.ndarray | None, bool | int | float | complex]:
    """A concrete fill value as a NumPy scalar (None for a Python int NumPy cannot hold) and
    as the Python scalar its checks read; a TypeError for anything but one number or bool."""
    if isinstance(fill_value, int) and not isinstance(fill_value, bool):
        value = int(fill_value)  # any size: 2**64 is a float32 value and no int64 one
        return (np.asarray(value) if -(2**63) <= value < 2**64 else None), value
    array = np.asarray(fill_value)
    if array.ndim != 0 or not (array.dtype.kind in "biufc" or jnp.issubdtype(array.dtype, jnp.number)):
        raise fail(
            TypeError,
            op_name,
            f"fill_value must be a scalar number or bool, got {type(fill_value).__name__} {fill_value!r}",
        )
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    kind = array.dtype.kind
    scalar = (
        bool(array)
        if kind == "b"
        else int(array)
        if kind in "iu"
        else complex(array)
        if kind == "c"
        else float(array)
    )
    return array, scalar


def fill_scalar(op_name: str, fill_value: Any, dtype: Any) -> jax.Array | np.ndarray:
    """``fill_value`` as a scalar of ``dtype``, refusing values the dtype cannot hold.

    One rule for every dtype (``_unrepresentable``): an integer type takes the integers in its
    range, a float type the values that round into its finite range and the specials it has
    (float8_e4m3fn no inf, float4_e2m1fn neither inf nor NaN), a complex type such values in
    each part. A traced value, which cannot be judged here, carries a checkify check of the
    same rule, in the same words (``jax_gather.checked`` raises it as a ValueError); outside
    checkify it is converted as ``astype`` converts.

    A concrete value stays a NumPy scalar: making it a ``jax.Array`` here would cost an eager
    dispatch on every call, several times the time of a small jitted gather."""
    dtype = np.dtype(dtype)
    if fill_value is None:
        return _default_fill(dtype)
    if isinstance(fill_value, jax.core.Tracer):
        if fill_value.shape != () or _kind(fill_value.dtype) > _kind(dtype):
            raise fail(
                TypeError,
                op_name,
                f"fill_value must be a scalar of a kind the data dtype {dtype.name} holds "
                "(bool < integer < real < complex), "
                f"got a traced {fill_value.dtype.name}{list(fill_value.shape)}",
            )
        message = f"{op_name}: {_cannot_hold('{}', dtype)}"
        ok = _traced_fits(fill_value, dtype)
        if ok is not None:
            fill_value = check_indices(fill_value, ok, message, fill_value, error="ValueError")
        return fill_value.astype(dtype)
    array, value = _python_scalar(op_name, fill_value)
    if _unrepresentable(value, dtype):
        raise fail(
            ValueError,
            op_name,
            _cannot_hold(repr(fill_value), dtype),
        )
    if array is None:  # a Python int past int64 and uint64, in range of a float type
        return np.asarray(float(fill_value)).astype(dtype)
    return array.astype(dtype)


def _kind(dtype: Any) -> int:
    """Bool 0, integers (signed or not) 1, reals 2, complex 3: a traced fill_value may be of
    its data dtype's kind or a lower one (the range is checked, not the type)."""
    for rank, kind in enumerate((jnp.bool_, jnp.integer, jnp.floating)):
        if jnp.issubdtype(dtype, kind):
            return rank
    return 3


def _traced_fits(value: jax.Array, dtype: np.dtype) -> jax.Array | None:
    """``_unrepresentable``'s rule, negated, on a traced scalar of a kind ``dtype`` holds;
    None where every value of its dtype fits."""
    source = np.dtype(value.dtype)
    if source == np.bool_ or source == dtype:
        return None
    if jnp.issubdtype(dtype, jnp.integer):  # from an integer type: exact round trip, same sign
        cast = value.astype(dtype)
        ok = cast.astype(source) == value
        if jnp.issubdtype(source, jnp.signedinteger) != jnp.issubdtype(dtype, jnp.signedinteger):
            ok &= (value >= 0) & (cast >= 0)
        return ok
    if jnp.issubdtype(dtype, jnp.complexfloating):
        part = np.dtype(jnp.finfo(dtype).dtype)
        if jnp.issubdtype(source, jnp.complexfloating):
            parts = [_traced_fits(p, part) for p in (jnp.real(value), jnp.imag(value))]
            known = [p for p in parts if p is not None]
            return known[0] & known[1] if len(known) == 2 else (known[0] if known else None)
        return _traced_fits(value, part)
    # A real float type, from an integer or float one: compared in a type that holds the
    # value exactly and the overflow bound exactly wherever it is finite.
    if jnp.issubdtype(source, jnp.integer):
        value = value.astype(jnp.float64 if x64_on() else jnp.float32)
    elif source.itemsize < 4:
        value = value.astype(jnp.float32)
    # Read back in the wide type: jnp.isinf of a type without infinities compares with its
    # conversion of inf (float4_e2m1fn: 6).
    back = value.astype(dtype).astype(value.dtype)
    ok = (jnp.isnan(back) == jnp.isnan(value)) & (jnp.isinf(back) == jnp.isinf(value))
    overflow = _float_type(dtype).overflow
    if overflow <= Fraction(float(jnp.finfo(value.dtype).max)):
        ok &= ~jnp.isfinite(value) | (jnp.abs(value) < float(overflow))
    return ok


def select_exact(mask: jax.Array, on_true: jax.Array, on_false: jax.Array) -> jax.Array:
    """``jnp.where(mask, on_true, on_false)`` that keeps every bit of the values it selects.

    XLA:CPU computes a bfloat16 select in float32, and a select of the float8 types in float16,
    which rewrites NaN payloads (float8_e3m4, e4m3 and e5m2 have several NaNs); for every float
    type other than float16, 32 and 64 the bit patterns are selected instead (a same-width
    bitcast is free). float4_e2m1fn has no NaN to rewrite."""
    if not _selected_as_bits(np.dtype(on_true.dtype)):
        return jnp.where(mask, on_true, on_false)
    return _select_bits(mask, on_true, on_false)


@functools.lru_cache(maxsize=64)
def _selected_as_bits(dtype: np.dtype) -> bool:
    native = (np.float16, np.float32, np.float64)
    return bool(jnp.issubdtype(dtype, jnp.floating)) and dtype not in native and _float_type(dtype).has_nan


@jax.custom_jvp
def _select_bits(mask: jax.Array, on_true: jax.Array, on_false: jax.Array) -> jax.Array:
    unsigned = jnp.dtype(f"uint{8 * on_true.dtype.itemsize}")
    bits = lambda x: lax.bitcast_convert_type(x, unsigned)
    return lax.bitcast_convert_type(jnp.where(mask, bits(on_true), bits(on_false)), on_true.dtype)


@_select_bits.defjvp
def _select_bits_jvp(primals, tangents):
    mask, on_true, on_false = primals
    _, true_dot, false_dot = tangents
    return _select_bits(mask, on_true, on_false), jnp.where(mask, true_dot, false_dot)
