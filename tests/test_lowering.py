"""The CPU lowering that gathers short rows as bytes: when it applies, that it is bit-exact
for every dtype it takes, and that other platforms lower the direct gather."""

import re

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import export

import jax_gather
from jax_gather import plans
from jax_gather._lowering import BYTE_ROWS, rows_as_bytes_pays
from tests import reference
from tests.compat import enable_x64


@pytest.mark.parametrize(
    "shape, dtype, plan, expected",
    [
        ((100, 16), np.float32, plans.gather_plan((100, 16), (7,), 0), True),
        ((100, 64), np.float32, plans.gather_plan((100, 64), (7,), 0), True),
        ((100, 15), np.float32, plans.gather_plan((100, 15), (7,), 0), False),  # too short to pay
        ((100, 65), np.float32, plans.gather_plan((100, 65), (7,), 0), False),  # XLA vectorises it
        ((100, 32), ml_dtypes.bfloat16, plans.gather_plan((100, 32), (7,), 0), True),
        ((100, 32), np.int64, plans.gather_plan((100, 32), (7,), 0), True),
        ((100, 32), np.uint16, plans.gather_plan((100, 32), (7,), 0), True),
        ((100, 32), np.int8, plans.gather_plan((100, 32), (7,), 0), False),  # already bytes
        ((100, 32), np.bool_, plans.gather_plan((100, 32), (7,), 0), False),
        ((100, 32), np.complex64, plans.gather_plan((100, 32), (7,), 0), False),  # no bitcast
        ((100, 32), np.float32, plans.gather_plan((100, 32), (7,), 1), False),  # last dim indexed
        ((32,), np.float32, plans.gather_plan((32,), (7,), 0), False),
        ((8, 32), np.float32, plans.gather_elements_plan((8, 32), (8, 32), 0), False),  # no rows
        ((4, 5, 32), np.float32, plans.gather_nd_plan((4, 5, 32), (9, 2), 0), True),
        ((4, 5, 32), np.float32, plans.gather_nd_plan((4, 5, 32), (4, 9, 1), 1), True),
        ((4, 5, 32), np.float32, plans.gather_nd_plan((4, 5, 32), (9, 3), 0), False),  # scalars
    ],
)
def test_when_rows_are_taken_as_bytes(shape, dtype, plan, expected):
    assert rows_as_bytes_pays(shape, dtype, plan) is expected


def test_symbolic_dims_keep_the_direct_gather():
    n, = export.symbolic_shape("n")
    assert not rows_as_bytes_pays((10, 32), np.float32, plans.gather_plan((10, 32), (n,), 0))
    assert not rows_as_bytes_pays((n, 32), np.float32, plans.gather_plan((n, 32), (4,), 0))


def _module(fn, data, indices, platform):
    return export.export(jax.jit(fn), platforms=(platform,))(data, indices).mlir_module()


def test_cpu_gathers_bytes_and_other_platforms_the_direct_gather():
    data, indices = np.zeros((50, 32), np.float32), np.array([3, -1, 7])
    fn = lambda d, i: jax_gather.gather(d, i)
    for platform in ("cpu", "cuda", "tpu"):
        module = _module(fn, data, indices, platform)
        gathers = re.findall(r"stablehlo.gather\b.*", module)
        assert len(gathers) == 1, module
        # The byte view gathers ui8 slices of 32 * 4 bytes; elsewhere f32 rows of 32.
        as_bytes = "tensor<50x128xui8>" in gathers[0]
        assert as_bytes == (platform == "cpu"), (platform, gathers[0])


def _bits(x: np.ndarray) -> np.ndarray:
    return np.asarray(x).view(f"u{np.dtype(x.dtype).itemsize}")


def _special_values(dtype, shape) -> np.ndarray:
    """Values a numeric conversion would change: NaNs with payloads, -0.0, infinities,
    subnormals, and every bit pattern of the top byte."""
    rng = np.random.default_rng(0)
    item = np.dtype(dtype).itemsize
    bits = rng.integers(0, 2 ** (8 * item), shape, dtype=np.uint64 if item == 8 else np.uint32)
    return bits.astype(f"u{item}").view(dtype)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.float64, np.int16, np.uint16,
                                   np.int32, np.uint32, np.int64, np.uint64])
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_bytes_path_is_bit_exact(dtype, jit):
    with enable_x64(np.dtype(dtype).itemsize == 8):
        data = _special_values(dtype, (40, 6, 24))
        assert rows_as_bytes_pays(data.shape, data.dtype, plans.gather_nd_plan(data.shape, (9, 2), 0))
        indices = np.random.default_rng(1).integers(-6, 6, (9, 2))
        indices[:, 0] = np.random.default_rng(2).integers(-40, 40, 9)
        fn = lambda d, i: jax_gather.gather_nd(d, i)
        out = (jax.jit(fn) if jit else fn)(data, indices)
        expected = reference.gather_nd(data, indices, 0)
        assert out.dtype == data.dtype
        np.testing.assert_array_equal(_bits(out), _bits(expected))
        rows = (jax.jit(jax_gather.gather) if jit else jax_gather.gather)(data.reshape(240, 24), indices[:, 0])
        np.testing.assert_array_equal(_bits(rows), _bits(reference.gather(data.reshape(240, 24), indices[:, 0], 0)))


def test_every_mode_through_the_bytes_path():
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


def test_byte_rows_are_the_measured_range():
    assert BYTE_ROWS == range(16, 65)  # docs/performance.md measures both ends; change them together


def test_bfloat16_fill_keeps_nan_payloads_and_its_gradient():
    # XLA:CPU selects bfloat16 through float32 (rewriting NaN payloads); the fill select doesn't.
    data = np.array([[0x7FCA, 0xFF81, 0x0001, 0x8000]] * 3, np.uint16).view(ml_dtypes.bfloat16)
    indices = np.array([2, -1, 5])
    out = jax.jit(lambda d, i: jax_gather.gather(d, i, mode="fill"))(data, indices)
    np.testing.assert_array_equal(_bits(out)[:2], _bits(data)[[2, 2]])
    assert np.isnan(np.asarray(out[2], np.float32)).all()
    grad = jax.grad(lambda d: jax_gather.gather(d, indices, mode="fill").astype(jnp.float32).sum())(
        jnp.ones((3, 4), jnp.bfloat16))
    np.testing.assert_array_equal(np.asarray(grad, np.float32), [[0] * 4, [0] * 4, [2] * 4])
