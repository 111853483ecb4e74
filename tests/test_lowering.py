"""The CPU lowering that gathers short rows in narrower units (bytes; nibbles for one-byte
types): when it applies, that it is bit-exact for every dtype it takes, and that other
platforms lower the direct gather."""

import re

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import export

import jax_gather
from jax_gather import plans
from jax_gather._lowering import BFLOAT16_ROWS_FROM, CPU_LOWERINGS, SHORT_ROWS, _release, row_view_dtype
from tests import reference
from tests.compat import enable_x64
from tests.programs import bits, module_for

U8, U4 = jnp.uint8, jnp.uint4


@pytest.mark.parametrize(
    "shape, dtype, plan, expected",
    [
        ((100, 16), np.float32, plans.gather_plan((100, 16), (7,), 0), U8),
        ((100, 64), np.float32, plans.gather_plan((100, 64), (7,), 0), U8),
        ((100, 15), np.float32, plans.gather_plan((100, 15), (7,), 0), None),  # too short to pay
        ((100, 65), np.float32, plans.gather_plan((100, 65), (7,), 0), None),  # XLA vectorises it
        ((100, 32), ml_dtypes.bfloat16, plans.gather_plan((100, 32), (7,), 0), U8),
        ((100, 512), ml_dtypes.bfloat16, plans.gather_plan((100, 512), (7,), 0), U8),  # XLA: via float32
        ((3, 40000), ml_dtypes.bfloat16, plans.gather_plan((3, 40000), (7,), 0), U8),
        ((100, 15), ml_dtypes.bfloat16, plans.gather_plan((100, 15), (7,), 0), None),
        ((100, 512), np.float16, plans.gather_plan((100, 512), (7,), 0), None),  # float16 is copied as is
        ((100, 512), ml_dtypes.bfloat16, plans.gather_plan((100, 512), (7,), 1), None),
        ((100, 32), np.int64, plans.gather_plan((100, 32), (7,), 0), U8),
        ((100, 32), np.uint16, plans.gather_plan((100, 32), (7,), 0), U8),
        ((100, 32), np.int8, plans.gather_plan((100, 32), (7,), 0), U4),  # bytes already: nibbles
        ((100, 64), np.uint8, plans.gather_plan((100, 64), (7,), 0), U4),
        ((100, 128), np.int8, plans.gather_plan((100, 128), (7,), 0), None),
        ((100, 32), np.bool_, plans.gather_plan((100, 32), (7,), 0), None),  # no bitcast
        ((100, 32), np.complex64, plans.gather_plan((100, 32), (7,), 0), None),
        ((100, 32), np.float32, plans.gather_plan((100, 32), (7,), 1), None),  # last dim indexed
        ((32,), np.float32, plans.gather_plan((32,), (7,), 0), None),
        ((8, 32), np.float32, plans.gather_elements_plan((8, 32), (8, 32), 0), None),  # no rows
        ((4, 5, 32), np.float32, plans.gather_nd_plan((4, 5, 32), (9, 2), 0), U8),
        ((4, 5, 32), np.float32, plans.gather_nd_plan((4, 5, 32), (4, 9, 1), 1), U8),
        ((4, 5, 32), np.float32, plans.gather_nd_plan((4, 5, 32), (9, 3), 0), None),  # scalars
    ],
)
def test_which_rows_are_taken_in_narrower_units(shape, dtype, plan, expected):
    assert row_view_dtype(shape, dtype, plan) == (expected if CPU_LOWERINGS else None)


def test_the_narrow_view_needs_jax_0_7():
    assert CPU_LOWERINGS == (_release(jax.__version__) >= (0, 7, 0))
    assert _release("0.6.2") < (0, 7, 0) <= _release("0.7.0") < _release("0.10.2.dev20250101")


def test_symbolic_dims_keep_the_direct_gather():
    (n,) = export.symbolic_shape("n")
    assert row_view_dtype((10, 32), np.float32, plans.gather_plan((10, 32), (n,), 0)) is None
    assert row_view_dtype((n, 32), np.float32, plans.gather_plan((n, 32), (4,), 0)) is None


@pytest.mark.parametrize(
    "dtype, cpu_operand", [(np.float32, "tensor<50x128xui8>"), (np.int8, "tensor<50x64xui4>")]
)
def test_cpu_gathers_narrow_units_and_other_platforms_the_direct_gather(dtype, cpu_operand):
    data, indices = np.zeros((50, 32), dtype), np.array([3, -1, 7])
    fn = lambda d, i: jax_gather.gather(d, i)
    for platform in ("cpu", "cuda", "tpu"):
        module = module_for(fn, (data, indices), platform)
        gathers = re.findall(r"stablehlo.gather\b.*", module)
        assert len(gathers) == 1, module
        # On CPU: 32 float32 as 128 bytes, 32 int8 as 64 nibbles; elsewhere the rows of 32.
        assert (cpu_operand in gathers[0]) == (platform == "cpu" and CPU_LOWERINGS), (platform, gathers[0])


def _xla_gather_keeps_bfloat16_nan_payloads() -> bool:
    payload = np.array([0x7FCA, 0xFF81], np.uint16).view(ml_dtypes.bfloat16)
    return bool(np.array_equal(bits(jax.jit(lambda d: d[jnp.array([1, 0])])(payload)), bits(payload[::-1])))


def _assert_same_bits(out, expected) -> None:
    out, expected = np.asarray(out), np.asarray(expected)
    assert out.dtype == expected.dtype and out.shape == expected.shape
    if expected.dtype == ml_dtypes.bfloat16 and not _xla_gather_keeps_bfloat16_nan_payloads():
        # Older XLA:CPU quiets bfloat16 NaNs in any gather, jnp indexing's too (seen with JAX
        # 0.5.0 and 0.7.0; 0.10.2 keeps them): there NaNs are compared as NaNs.
        nan = np.isnan(expected.astype(np.float32))
        np.testing.assert_array_equal(np.isnan(out.astype(np.float32)), nan)
        out, expected = np.where(nan, 0, out), np.where(nan, 0, expected)
    np.testing.assert_array_equal(bits(out), bits(expected))


def _special_values(dtype, shape) -> np.ndarray:
    """Values a numeric conversion would change: NaNs with payloads, -0.0, infinities,
    subnormals, and every bit pattern of the top byte."""
    rng = np.random.default_rng(0)
    item = np.dtype(dtype).itemsize
    bits = rng.integers(0, 2 ** (8 * item), shape, dtype=np.uint64 if item == 8 else np.uint32)
    return bits.astype(f"u{item}").view(dtype)


@pytest.mark.parametrize(
    "dtype",
    [
        np.int8,
        np.uint8,
        np.float16,
        ml_dtypes.bfloat16,
        np.float32,
        np.float64,
        np.int16,
        np.uint16,
        np.int32,
        np.uint32,
        np.int64,
        np.uint64,
    ],
)
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_narrow_view_is_bit_exact(dtype, jit):
    with enable_x64(np.dtype(dtype).itemsize == 8):
        data = _special_values(dtype, (40, 6, 24))
        plan = plans.gather_nd_plan(data.shape, (9, 2), 0)
        assert (row_view_dtype(data.shape, data.dtype, plan) is not None) == CPU_LOWERINGS
        indices = np.random.default_rng(1).integers(-6, 6, (9, 2))
        indices[:, 0] = np.random.default_rng(2).integers(-40, 40, 9)
        fn = lambda d, i: jax_gather.gather_nd(d, i)
        out = (jax.jit(fn) if jit else fn)(data, indices)
        _assert_same_bits(out, reference.gather_nd(data, indices, 0))
        rows = (jax.jit(jax_gather.gather) if jit else jax_gather.gather)(
            data.reshape(240, 24), indices[:, 0]
        )
        _assert_same_bits(rows, reference.gather(data.reshape(240, 24), indices[:, 0], 0))


def test_every_mode_through_the_narrow_view():
    data = np.arange(10 * 32, dtype=np.float32).reshape(10, 32)
    indices = np.array([0, -1, 12, -11, 4])
    for mode, expected in [
        ("clip", reference.gather(data, indices, 0, mode="clip")),
        ("fill", reference.gather(data, indices, 0, mode="fill", fill=-7.0)),
    ]:
        out = jax.jit(lambda d, i: jax_gather.gather(d, i, mode=mode, fill_value=-7.0))(data, indices)
        np.testing.assert_array_equal(np.asarray(out), expected)
    checked = jax.jit(lambda d, i: jax_gather.gather(d, i))
    with pytest.raises(IndexError, match=r"indices\[2\] = 12 is out of bounds for axis 0 of size 10"):
        jax_gather.checked(checked)(data, indices)


def test_short_rows_are_the_measured_range():
    # docs/performance.md measures both ends; change them together.
    assert SHORT_ROWS == range(16, 65)
    assert BFLOAT16_ROWS_FROM == 16


@pytest.mark.parametrize("width", [16, 300, 4096])
def test_long_bfloat16_rows_through_the_view_are_bit_exact(width):
    data = _special_values(ml_dtypes.bfloat16, (12, width))
    indices = np.array([3, -1, 0, 11, -12, 3])
    plan = plans.gather_plan(data.shape, indices.shape, 0)
    assert (row_view_dtype(data.shape, data.dtype, plan) is not None) == CPU_LOWERINGS
    for mode in ("checked", "promise_in_bounds"):
        out = jax.jit(lambda d, i: jax_gather.gather(d, i, mode=mode))(data, indices)
        _assert_same_bits(out, reference.gather(data, indices, 0))
    grad = jax.grad(lambda d: jax_gather.gather(d, indices).astype(jnp.float32).sum())(jnp.asarray(data))
    expected = np.zeros((12,), np.float32)
    np.add.at(expected, indices, 1.0)
    np.testing.assert_array_equal(
        np.asarray(grad, np.float32), np.broadcast_to(expected[:, None], data.shape)
    )


def test_bfloat16_fill_keeps_nan_payloads_and_its_gradient():
    # XLA:CPU selects bfloat16 through float32 (rewriting NaN payloads); the fill select doesn't.
    data = np.array([[0x7FCA, 0xFF81, 0x0001, 0x8000]] * 3, np.uint16).view(ml_dtypes.bfloat16)
    indices = np.array([2, -1, 5])
    out = jax.jit(lambda d, i: jax_gather.gather(d, i, mode="fill"))(data, indices)
    _assert_same_bits(out[:2], data[[2, 2]])
    assert np.isnan(np.asarray(out[2], np.float32)).all()
    grad = jax.grad(lambda d: jax_gather.gather(d, indices, mode="fill").astype(jnp.float32).sum())(
        jnp.ones((3, 4), jnp.bfloat16)
    )
    np.testing.assert_array_equal(np.asarray(grad, np.float32), [[0] * 4, [0] * 4, [2] * 4])
