"""Every JAX dtype, in either byte order, against the NumPy reference, bit for bit.

Hypothesis draws the op, row widths and index counts on both sides of each CPU lowering's
thresholds (read from ``jax_gather._cpu``, so the cases follow them when they move), indices in
bounds (for "checked" and "promise_in_bounds") or in and out of bounds (for "fill" and "clip"),
and runs each case eagerly and under ``jit``. Outputs are compared as bytes: NaN payloads, signed
zeros and the padding bits of sub-byte types included.
"""

import math
import platform

import jax
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, note, settings, strategies as st

import jax_gather
from jax_gather import _arguments, _cpu, _cpu_columns, _cpu_rows, _fill, ops
from tests import reference
from tests.compat import enable_x64
from tests.programs import stdout_with_cpu_devices
from tests.strategies import make_indices, make_wild_indices

_FLOAT8 = [n for n in dir(ml_dtypes) if n.startswith("float8_") and hasattr(jax.numpy, n)]


def _placed(dtype) -> bool:
    try:
        jax.numpy.asarray(np.zeros(2, dtype)).block_until_ready()
    except jax.errors.JaxRuntimeError:
        return False
    return True


# JAX names some types its backend has none for (JAX 0.12.1: float8_e5m3fnu on the CPU).
_UNPLACED = [n for n in _FLOAT8 if not _placed(getattr(ml_dtypes, n))]
_FLOAT8 = [n for n in _FLOAT8 if n not in _UNPLACED]
DTYPES = [
    np.dtype(d)
    for d in [np.bool_, ml_dtypes.int2, ml_dtypes.int4, np.int8, np.int16, np.int32, np.int64,
              ml_dtypes.uint2, ml_dtypes.uint4, np.uint8, np.uint16, np.uint32, np.uint64,
              ml_dtypes.float4_e2m1fn, *(getattr(ml_dtypes, n) for n in sorted(_FLOAT8)),
              ml_dtypes.bfloat16, np.float16, np.float32, np.float64, np.complex64, np.complex128]
]  # fmt: skip
MODES = ["checked", "fill", "clip", "promise_in_bounds"]
REFERENCE_MODE = {"checked": "raise", "promise_in_bounds": "raise", "fill": "fill", "clip": "clip"}

# Row widths about the short-rows range, index counts about the short-lookup bound, and row
# counts of column gathers about COLUMN_ROWS.
WIDTHS = sorted(
    {1, 15, _cpu.SHORT_ROWS[0] - 1, _cpu.SHORT_ROWS[0], _cpu.SHORT_ROWS[-1], _cpu.SHORT_ROWS[-1] + 1, 80}
)
COUNTS = sorted({1, _cpu.SHORT_LOOKUP_INDICES, _cpu.SHORT_LOOKUP_INDICES + 1, 300})
COLUMN_ROWS = sorted({1, *(_cpu_columns.COLUMN_ROWS + d for d in (-1, 0, 1))})
EXAMPLES_PER_DTYPE = max(3, settings().max_examples // 10)


def _bits(dtype: np.dtype) -> int:
    return (
        ml_dtypes.iinfo(dtype).bits
        if dtype.name in ("int2", "int4", "uint2", "uint4")
        else (4 if dtype == ml_dtypes.float4_e2m1fn else 8 * dtype.itemsize)
    )


def _random_values(rng: np.random.Generator, dtype: np.dtype, shape: tuple) -> np.ndarray:
    """Every bit pattern of the dtype can be drawn; for a float type a quarter of the elements
    get an exponent field of zeros (subnormals, signed zeros) and a quarter one of ones (NaNs
    with payloads, signalling ones included, and infinities): the patterns a move through
    another float type may change, which uniform bits would seldom draw."""
    bits = _bits(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if bits < 8:  # sub-byte types: a value per element, from every pattern of its bits
        return _sub_byte_values(dtype)[rng.integers(0, 2**bits, shape)]
    raw = rng.integers(0, 256, (*shape, dtype.itemsize), dtype=np.uint8).view(dtype).reshape(shape)
    if dtype.kind in "fc" or dtype.name.startswith(("bfloat", "float")):
        part = ml_dtypes.finfo(np.dtype(jax.numpy.finfo(dtype).dtype))  # a complex type's parts
        words = raw.view(f"u{part.bits // 8}")  # the same memory
        field = ((1 << part.nexp) - 1) << part.nmant
        pick = rng.random(words.shape)
        words[pick < 0.25] &= ~np.asarray(field, words.dtype)
        words[(pick >= 0.25) & (pick < 0.5)] |= np.asarray(field, words.dtype)
    return raw


def _sub_byte_values(dtype: np.dtype) -> np.ndarray:
    """The 2**bits values of a sub-byte type, by code."""
    if dtype.kind in "iu":
        info = ml_dtypes.iinfo(dtype)
        return np.arange(info.min, info.max + 1).astype(dtype)
    return np.arange(16, dtype=np.uint8).view(dtype)  # float4_e2m1fn: codes 0-15


def _default_fill(dtype: np.dtype):
    """The documented defaults: True; the minimum of a signed, the maximum of an unsigned
    integer type; NaN; the minimum of a float type without NaN."""
    if dtype == np.bool_:
        return True
    if dtype.kind in "iu" or dtype.name in ("int2", "int4", "uint2", "uint4"):
        info = ml_dtypes.iinfo(dtype)
        return info.max if info.min == 0 else info.min
    nan = np.asarray(np.nan).astype(dtype)
    if dtype.kind == "c" or np.isnan(nan.astype(np.float64)):
        return np.nan
    return ml_dtypes.finfo(dtype).min


@st.composite
def cases(draw, dtype):
    op = draw(st.sampled_from(["rows", "columns", "nd_rows", "elements"]))
    width = draw(st.sampled_from(WIDTHS))
    count = draw(st.sampled_from(COUNTS))
    if op == "rows" and draw(st.integers(0, 4)) == 0:
        # About the output size from which short rows are read in bytes (counts beyond COUNTS).
        at = math.ceil(_cpu_rows.short_rows_min_bytes(dtype) * 8 / (width * _bits(dtype)))
        count = draw(st.sampled_from([at - 1, at]))
    rows = draw(st.sampled_from(COLUMN_ROWS if op == "columns" else [1, 3, 10]))
    mode = draw(st.sampled_from(MODES))
    swapped = draw(st.booleans()) and dtype.itemsize > 1 and dtype.newbyteorder() != dtype
    seed = draw(st.integers(0, 2**16))
    return op, rows, width, count, mode, swapped, seed


def _call(op, data, indices, mode, fill):
    if op in ("rows", "columns"):
        return jax_gather.gather(data, indices, 0 if op == "rows" else -1, mode=mode)
    if op == "nd_rows":
        return jax_gather.gather_nd(data, indices, mode=mode)
    return jax_gather.gather_elements(data, indices, 1, mode=mode)


def _expected(op, data, indices, mode, fill):
    kw = {"mode": REFERENCE_MODE[mode], "fill": fill}
    if op == "rows":  # each distinct index's row once (the reference loops in Python), then spread
        distinct, where = np.unique(indices, return_inverse=True)
        return reference.gather(data, distinct, 0, **kw)[where.reshape(indices.shape)]
    if op == "columns":
        return reference.gather(data, indices, -1, **kw)
    if op == "nd_rows":
        return reference.gather_nd(data, indices, 0, **kw)
    return reference.gather_elements(data, indices, 1, **kw)


@pytest.mark.parametrize("dtype", DTYPES, ids=[d.name for d in DTYPES])
@settings(max_examples=EXAMPLES_PER_DTYPE, deadline=None)
@given(data=st.data())
def test_every_dtype_byte_order_width_count_and_mode_is_exact(dtype, data):
    op, rows, width, count, mode, swapped, seed = data.draw(cases(dtype))
    rng = np.random.default_rng(seed)
    shape = (rows, width)
    if op == "elements":
        index_shape, sizes = (rows, max(1, count // rows)), width
    elif op == "columns":
        index_shape, sizes = (count,), width
    elif op == "nd_rows":
        index_shape, sizes = (count, 1), rows
    else:
        index_shape, sizes = (count,), rows
    make = make_indices if mode in ("checked", "promise_in_bounds") else make_wild_indices
    indices = make(index_shape, sizes, np.int32, seed)
    table = _random_values(rng, dtype, shape)
    if swapped:
        table = table.astype(dtype.newbyteorder())
    note(f"{op} {dtype.name}{'(swapped)' if swapped else ''}{list(shape)} indices{list(index_shape)} {mode}")
    fill = _default_fill(dtype)
    native = table.astype(dtype)
    before = table.copy()
    with enable_x64(dtype.itemsize == 8 or dtype == np.complex128):
        expected = _expected(op, native, indices, mode, fill)
        eager = _call(op, table, indices, mode, fill)
        # jax.jit takes no swapped NumPy argument: swapped data is a constant of the trace.
        if swapped:
            traced = jax.jit(lambda i: _call(op, table, i, mode, fill))(indices)
        else:
            traced = jax.jit(lambda d, i: _call(op, d, i, mode, fill))(table, indices)
    # XLA:CPU makes a gather from one slice (each indexed axis of size 1) a broadcast, which moves
    # bfloat16 through float32 (jnp.take's too); only "fill" pins its bits (_fill.xla_cpu_keeps_bits).
    one_slice = (rows == 1) if op in ("rows", "nd_rows") else (width == 1)
    broadcast = one_slice and mode != "fill" and not _fill.xla_cpu_keeps_bits(dtype)
    for out, folded in ((eager, False), (traced, swapped)):
        out = np.asarray(out)
        assert out.dtype == dtype and out.shape == expected.shape
        want = expected
        if (folded or broadcast) and dtype == ml_dtypes.bfloat16:
            # Data that is a constant of the trace is gathered by XLA's constant folding, which
            # quiets a signalling bfloat16 NaN (jnp.take's too): NaN stays NaN, payloads may not.
            # XLA:CPU's broadcast quiets it too, and may flush a subnormal to a zero of its sign.
            values, wanted = out.astype(np.float32), expected.astype(np.float32)
            nan = np.isnan(wanted)
            assert np.isnan(values)[nan].all()
            flushed = (np.abs(wanted) < float(ml_dtypes.finfo(dtype).smallest_normal)) & (values == 0)
            excused = nan | (flushed & broadcast)
            out, want = np.where(excused, 0, out).astype(dtype), np.where(excused, 0, expected).astype(dtype)
        np.testing.assert_array_equal(out.view(np.uint8), want.view(np.uint8))
    assert table.dtype == before.dtype
    np.testing.assert_array_equal(table.view(np.uint8), before.view(np.uint8))  # never mutated


WITHOUT_F16C = """
import jax, numpy as np, jax_gather
from tests import reference
rng = np.random.default_rng(0)
for name in ("float4_e2m1fn", "float8_e3m4", "float8_e4m3", "float8_e5m2", "bfloat16"):
    dtype = np.dtype(getattr(jax.numpy, name))
    bits = jax.numpy.finfo(dtype).bits
    data = rng.integers(0, 2**bits, (7, 3)).astype(f"u{dtype.itemsize}").view(dtype)
    ids = np.array([0, 6, -7, 9, -8, 3])
    for mode in ("fill", "clip"):
        expected = reference.gather(data, ids, 0, mode=mode, fill=-2.0).tobytes()
        for fn in (jax_gather.gather, jax.jit(jax_gather.gather, static_argnames="mode")):
            assert np.asarray(fn(data, ids, mode=mode, fill_value=-2.0)).tobytes() == expected, (name, mode)
print("bit for bit")
"""


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_a_dtype_jax_names_and_its_backend_cannot_hold_is_refused_by_name(jit, monkeypatch):
    # Otherwise XLA fails as it places or compiles it ("type is not supported"), as jnp.take does.
    for name in _FLOAT8 + _UNPLACED:
        assert _arguments.backend_holds(np.dtype(getattr(ml_dtypes, name))) == (name in _FLOAT8), name
    unplaced = [np.dtype(getattr(ml_dtypes, n)) for n in _UNPLACED]
    if not unplaced:  # this JAX has none: int8 answered as one
        monkeypatch.setattr(ops, "backend_holds", lambda dtype: dtype != np.int8)
        unplaced = [np.dtype(np.int8)]
    for dtype in unplaced:
        call = lambda d, i: jax_gather.gather_nd(d, i, mode="fill")
        with pytest.raises(TypeError, match=rf"^GatherND: data's dtype {dtype.name} has no type in XLA for"):
            (jax.jit(call) if jit else call)(np.zeros((4, 3), dtype), np.zeros((2, 1), np.int32))


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="XLA's x86 instruction sets")
def test_the_narrow_floats_on_a_cpu_without_f16c(monkeypatch):
    # Without F16C (XLA_FLAGS=--xla_cpu_max_isa=SSE4_2), XLA:CPU cannot compile its conversions
    # from float16, through which it gathers and selects float4 and most float8 types (there
    # jnp.take of them fails): the library gathers and selects their bit patterns instead.
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_max_isa=SSE4_2")
    assert stdout_with_cpu_devices(WITHOUT_F16C, devices=1).strip() == "bit for bit"
