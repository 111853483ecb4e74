"""Fill values: the defaults, the rule for what a dtype can hold, and the exact select."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_gather._arguments import fail
from jax_gather._cpu_client import compile_afresh, lowered_for_cpu
from jax_gather._index_check import check_indices
from jax_gather._x64 import x64_on

# How a select's bits are pinned: pin(bits, zeros), the bits as they are (pinned_bits, clamped_bits).
PinFn = Callable[[jax.Array, jax.Array], jax.Array]


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


def select_exact(
    mask: jax.Array,
    on_true: jax.Array,
    on_false: jax.Array,
    zeros: jax.Array | None = None,
    pin: PinFn | None = None,
    as_bits: bool = False,
) -> jax.Array:
    """``jnp.where(mask, on_true, on_false)`` that keeps every bit of the values it selects.

    XLA computes a select of some float types in a wider one, which rewrites NaN payloads
    (XLA:CPU: bfloat16 in float32 before JAX 0.11, the float8 types with several NaNs in
    float16); for every float type other than float16, 32 and 64 the bit patterns are selected
    instead (a same-width bitcast is free to run, but XLA's cost analysis counts it: 2 flops an
    element more, which can take a short program to JAX's worker thread), except on a CPU
    whose XLA selects the type as it is (:func:`xla_cpu_converts_select`). float4_e2m1fn has
    no NaN to rewrite: its bits are selected only where XLA:CPU cannot compile its select (no
    F16C, see gathered_as_bits). Where XLA:CPU moves single elements of the type through a
    wider one (:func:`xla_cpu_keeps_bits`), the selected bits are pinned on the CPU
    (:func:`pinned_bits`) by ``zeros`` (:func:`opaque_zeros` of the indices, spread to the
    output's shape; none: not pinned), through ``pin`` (:func:`pinned_bits` where None).
    ``as_bits``: a narrow float's bit patterns selected whatever XLA makes of its select (against
    a fill whose bits went through an integer op, XLA:CPU's select of bfloat16 as it is quiets a
    signalling NaN)."""
    dtype = np.dtype(on_true.dtype)
    if as_bits and zeros is None and narrow_float(dtype) and bits_type(dtype) is not None:
        return _select_bits(mask, on_true, on_false)
    if zeros is not None and not xla_cpu_keeps_bits(dtype):
        default = functools.partial(select_exact, zeros=None)
        cpu = functools.partial(_select_pinned, pin=pin or pinned_bits)
        return lax.platform_dependent(
            mask, on_true, on_false, zeros, cpu=cpu, default=lambda m, t, f, _: default(m, t, f)
        )
    if not selected_as_bits(dtype):
        if not _has_nan_payloads(dtype):
            return jnp.where(mask, on_true, on_false)
        return lax.platform_dependent(mask, on_true, on_false, cpu=jnp.where, default=_select_bits)
    return _select_bits(mask, on_true, on_false)


def selected_as_bits(dtype: np.dtype) -> bool:
    """Whether a select of ``dtype`` on the CPU is one of bit patterns (see select_exact)."""
    if not narrow_float(dtype) or bits_type(dtype) is None:
        return False
    how = _xla_cpu_select(dtype)
    return how == "not at all" or (how == "converted" and _has_nan_payloads(dtype))


def narrow_float(dtype: np.dtype) -> bool:
    """A float type other than float16, 32 and 64 (bfloat16, the float8, float6 and float4 types)."""
    return bool(jnp.issubdtype(dtype, jnp.floating)) and dtype not in (np.float16, np.float32, np.float64)


@functools.lru_cache(maxsize=64)
def _has_nan_payloads(dtype: np.dtype) -> bool:
    return narrow_float(dtype) and _float_type(dtype).has_nan


def xla_cpu_converts_select(dtype: np.dtype) -> bool:
    """Whether XLA:CPU, in this JAX, computes a select of ``dtype`` in a wider type (or cannot
    compile it for this CPU): asked once per process and type by compiling one (a few ms); true
    where no CPU backend answers."""
    return _xla_cpu_select(dtype) != "as it is"


@functools.lru_cache(maxsize=64)
def _xla_cpu_select(dtype: np.dtype) -> str:
    """How XLA:CPU compiles a select of ``dtype``: "as it is", "converted" (in a wider type), or
    "not at all" (for this CPU); "converted" where no CPU backend answers."""
    lowered = lowered_for_cpu(lambda m, x: jnp.where(m, x, x[::-1]), ((2,), np.bool_), ((2,), dtype))
    if lowered is None:
        return "converted"
    try:
        text = compile_afresh(lowered).as_text() or ""
    except RuntimeError:  # XLA:CPU cannot compile its converts for this CPU (see gathered_as_bits)
        return "not at all"
    return "converted" if "convert(" in text else "as it is"


def gathered_as_bits(dtype: np.dtype) -> bool:
    """Whether a gather of ``dtype`` is made on its bit patterns: a float type other than
    float16, 32 and 64 that XLA:CPU gathers through a wider type and back, where that rewrites
    NaN payloads (the float8 types with several NaNs from JAX 0.11: float16 and back) or does
    not compile (a CPU without F16C: XLA's JIT lacks the function its conversions from float16
    call, XLA_FLAGS=--xla_cpu_max_isa=SSE4_2; there ``jnp.take`` of those types fails). (The
    gather before a pinned select is of bit patterns too: jax_gather._lowering._BEFORE_A_PIN.)"""
    return narrow_float(dtype) and bits_type(dtype) is not None and not _xla_cpu_gathers_exactly(dtype)


def element_bits(dtype: np.dtype) -> int:
    """Bits per element: a 4-bit type's itemsize is 1 (NumPy stores one per byte), its bits 4."""
    if jnp.issubdtype(dtype, jnp.integer):
        return int(jnp.iinfo(dtype).bits)
    if jnp.issubdtype(dtype, jnp.floating):
        return int(jnp.finfo(dtype).bits)
    return 8 * np.dtype(dtype).itemsize  # bool, complex


def bits_type(dtype: np.dtype) -> Any:
    """The unsigned integer type of ``dtype``'s width, where there is one (none of 6 bits)."""
    return {4: jnp.uint4, 8: jnp.uint8, 16: jnp.uint16}.get(int(jnp.finfo(dtype).bits))


@functools.lru_cache(maxsize=64)
def _xla_cpu_gathers_exactly(dtype: np.dtype) -> bool:
    """Whether XLA:CPU, in this JAX, gathers every bit pattern of ``dtype`` as it is: asked once
    per process and type by gathering them all (a few ms); true where no CPU backend answers."""
    width = np.dtype(f"uint{8 * dtype.itemsize}")  # how NumPy stores it
    patterns = np.arange(2 ** int(jnp.finfo(dtype).bits), dtype=width)
    try:
        out = run_on_cpu(lambda d, i: d[i], patterns.view(dtype), patterns[::-1].astype(np.int32))
    except RuntimeError:  # XLA:CPU cannot compile the gather for this CPU
        return False
    return out is None or bool((out.view(width) == patterns[::-1]).all())


def run_on_cpu(fn: Any, *arrays: np.ndarray) -> Any:
    """``jax.jit(fn)`` run now on the CPU, also while a trace is open, its outputs fetched; None
    where the process has no CPU backend (a RuntimeError where XLA:CPU cannot compile it)."""
    try:
        cpu = jax.devices("cpu")[0]
    except RuntimeError:  # no CPU backend
        return None
    with jax.ensure_compile_time_eval():
        return jax.device_get(jax.jit(fn)(*(jax.device_put(a, cpu) for a in arrays)))


def xla_cpu_keeps_bits(dtype: np.dtype) -> bool:
    """Whether XLA:CPU, in this JAX and on this CPU, keeps every bit pattern of ``dtype`` where
    it moves single elements: asked once per process and type, for the float types other than
    float16, 32 and 64, by three small programs on the patterns a trip through float32 may
    change (a few ms); true for every other type and where no CPU backend answers.

    Fact (JAX 0.10 to 0.12.0, x86-64): XLA:CPU moves bfloat16 one element at a time through
    float32 (LLVM has no scalar bfloat16 register) where a loop is unrolled into scalar moves:
    a gather from a table of one row (XLA's broadcast) and the ends of a select's loop over
    short rows. That quiets signalling NaNs on any x86-64 CPU, and flushes subnormals to zero
    on one with AVX512_BF16, whose conversion instruction does; ``jnp.take`` and
    ``jnp.broadcast_to`` lose the same bits. Even between bitcasts to uint16: XLA and LLVM
    fold them away. JAX 0.12.1 keeps the bits of data so, but a constant signalling NaN
    selected at such an end (a fill_value) comes back quiet: the third program asks that."""
    if not narrow_float(dtype) or bits_type(dtype) is None:
        return True
    return _xla_cpu_keeps_bits(dtype)


@functools.lru_cache(maxsize=64)
def _xla_cpu_keeps_bits(dtype: np.dtype) -> bool:
    width = np.dtype(f"uint{8 * dtype.itemsize}")  # how NumPy stores it
    signalling, subnormal, _ = changed_by_float32(dtype)
    groups = [p for p in (signalling, subnormal) if p.size]
    if not groups:
        return True
    rows = np.stack([np.resize(p[:: max(1, p.size // 64)], 64) for p in (groups[0], groups[-1])])
    ids = np.arange(129, dtype=np.int32) % 2
    bits = lambda x: lax.bitcast_convert_type(x, bits_type(dtype))
    fill = rows[0, :1].view(dtype)[0]  # a constant of the program, as a fill_value is

    def moved(t: jax.Array, i: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        selected = jnp.where(i[:, None] >= 0, bits(t)[i], 0)
        filled = select_exact(i[:, None] > 0, t[i], jnp.asarray(fill))  # as a fill is, unpinned
        return jnp.broadcast_to(t[:1], (129, 64)), lax.bitcast_convert_type(selected, dtype), filled

    try:
        out = run_on_cpu(moved, rows.view(dtype), ids)
    except RuntimeError:  # XLA:CPU cannot compile them for this CPU (see gathered_as_bits)
        return False
    if out is None:
        return True
    spread, selected, filled = (np.asarray(a).view(width) for a in out)
    kept_fill = np.where(ids[:, None] > 0, rows[ids], rows[0, 0])
    return bool((spread == rows[0]).all() and (selected == rows[ids]).all() and (filled == kept_fill).all())


def changed_by_float32(dtype: np.dtype) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The bit patterns of ``dtype`` (as NumPy stores them) that a move through float32 may
    change: its signalling NaNs, its subnormals, and its quiet NaNs (their payloads)."""
    width = np.dtype(f"uint{8 * dtype.itemsize}")
    patterns = np.arange(2 ** int(jnp.finfo(dtype).bits), dtype=width)
    values = patterns.view(dtype).astype(np.float32)
    info = jnp.finfo(dtype)
    quiet = 1 << max(int(info.nmant) - 1, 0)  # the top bit of the mantissa: set in a quiet NaN
    nan = np.isnan(values)
    subnormal = patterns[(values != 0) & (np.abs(values) < float(info.smallest_normal))]
    return patterns[nan & ((patterns & quiet) == 0)], subnormal, patterns[nan & ((patterns & quiet) != 0)]


def opaque_zeros(x: jax.Array) -> jax.Array:
    """Zeros of ``x``'s shape, signed integers of its width, that neither XLA nor LLVM can
    prove to be zeros: an exclusive or with them keeps a loop moving integers where both would
    fold the bitcasts around a gather or select of a type :func:`xla_cpu_keeps_bits` finds
    moved through a wider one.

    Each is the sign bit of ``abs(v | 1)``, for ``v`` the element of ``x`` as a signed integer:
    ``v | 1`` is never the most negative integer, so its absolute value is never negative.
    ``x`` holds run-time values (the indices): from a constant XLA computes them as it compiles.
    They stay signed: a bitcast to unsigned before the conversion to the bits' type counts one
    flop an index more, which took bfloat16 rows of 2-4 by 1024-1500 ids past the count at which
    XLA:CPU splits the loop into a task per core (:mod:`jax_gather._cpu_split`)."""
    width = int(jnp.iinfo(x.dtype).bits)
    signed = {4: jnp.int4, 8: jnp.int8, 16: jnp.int16, 32: jnp.int32, 64: jnp.int64}[width]
    v = x if np.dtype(x.dtype) == np.dtype(signed) else lax.bitcast_convert_type(x, signed)
    return lax.shift_right_logical(jnp.abs(v | 1), np.asarray(width - 1, signed))


def pinned_bits(bits: jax.Array, zeros: jax.Array) -> jax.Array:
    """``bits`` (an unsigned integer array) as they are, through an exclusive or with
    ``zeros`` (:func:`opaque_zeros`, broadcast to their shape): one flop an element in XLA's
    cost analysis."""
    return bits ^ zeros.astype(bits.dtype)


def clamped_bits(bits: jax.Array, zeros: jax.Array) -> jax.Array:
    """``bits`` as they are, through a clamp between ``zeros`` and their complement: one op an
    element in XLA's count as the exclusive or of :func:`pinned_bits` (and the complement one an
    index), two compares in the loop LLVM sees, whose longer body it may vectorise where it
    unrolls the shorter one into scalar moves (jax_gather._cpu_fills.xla_vectorises_rows_clamped)."""
    zeros = zeros.astype(bits.dtype)
    return lax.clamp(zeros, bits, ~zeros)


@functools.partial(jax.custom_jvp, nondiff_argnums=(4,))
def _select_pinned(
    mask: jax.Array, on_true: jax.Array, on_false: jax.Array, zeros: jax.Array, pin: PinFn
) -> jax.Array:
    bits = lambda x: lax.bitcast_convert_type(x, bits_type(x.dtype))
    selected = jnp.where(mask, bits(on_true), bits(on_false))
    return lax.bitcast_convert_type(pin(selected, zeros), on_true.dtype)


@_select_pinned.defjvp
def _select_pinned_jvp(pin, primals, tangents):
    mask = primals[0]
    _, true_dot, false_dot, _ = tangents
    return _select_pinned(*primals, pin), jnp.where(mask, true_dot, false_dot)


@jax.custom_jvp
def _select_bits(mask: jax.Array, on_true: jax.Array, on_false: jax.Array) -> jax.Array:
    bits = lambda x: lax.bitcast_convert_type(x, bits_type(x.dtype))
    return lax.bitcast_convert_type(jnp.where(mask, bits(on_true), bits(on_false)), on_true.dtype)


@_select_bits.defjvp
def _select_bits_jvp(primals, tangents):
    mask, on_true, on_false = primals
    _, true_dot, false_dot = tangents
    return _select_bits(mask, on_true, on_false), jnp.where(mask, true_dot, false_dot)
