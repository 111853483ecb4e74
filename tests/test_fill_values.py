"""One fill_value rule for every dtype: its range and the specials it has, concrete or traced."""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import jax_gather
from tests.compat import enable_x64

F4, E4M3FN, E8M0 = ml_dtypes.float4_e2m1fn, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e8m0fnu


def fill(dtype, fill_value, indices=(5,)):
    return jax_gather.gather(np.ones(3, dtype), np.array(indices), mode="fill", fill_value=fill_value)


# (dtype, fill value, the rule the message states)
REFUSED = [
    (F4, np.inf, r"\(it holds the values that round into \[-6, 6\], no infinities and no NaN\)"),
    (F4, -np.inf, "no infinities"),
    (F4, np.nan, "no NaN"),
    (F4, 7.0, r"\[-6, 6\]"),  # a cast would saturate to 6
    (E4M3FN, np.inf, r"\[-448, 448\], NaN but no infinities"),  # a cast gives NaN
    (E4M3FN, 464.0, r"\[-448, 448\]"),
    (E8M0, -1.0, "NaN but no infinities"),  # no negatives: a cast gives NaN
    (np.float16, 65520.0, r"\[-65504, 65504\], infinities and NaN"),
    (np.float32, 2**200, r"\[-3.40282e\+38, 3.40282e\+38\]"),
    (np.float32, 1j, "infinities and NaN"),
    (np.complex64, complex(1e39, 0), "real and imaginary parts"),
    (np.complex64, complex(0, -1e39), "real and imaginary parts"),
    (np.int8, 300, r"the integers in \[-128, 127\]"),
    (np.uint64, 2**64, r"\[0, 18446744073709551615\]"),
    (np.int32, 2.5, r"\[-2147483648, 2147483647\]"),
    (np.bool_, 2, "False, True, 0 and 1"),
]


@pytest.mark.parametrize(
    "dtype, value, rule", REFUSED, ids=lambda v: str(v) if not isinstance(v, type) else ""
)
def test_a_fill_the_dtype_cannot_hold_is_refused_naming_its_rule(dtype, value, rule):
    name = np.dtype(dtype).name
    with (
        enable_x64(np.dtype(dtype).itemsize == 8),
        pytest.raises(
            ValueError,
            match=rf"^Gather: fill_value .* cannot be represented in the data dtype {name} .*{rule}",
        ),
    ):
        fill(dtype, value)


# (dtype, fill value, the value filled)
ACCEPTED = [
    (F4, 6.0, 6.0), (F4, 6.9, 6.0), (F4, -0.2, -0.0), (F4, -0.4, -0.5),
    (E4M3FN, np.nan, np.nan), (E4M3FN, 463.0, 448.0),
    (np.float16, 65519.0, 65504.0), (np.float16, np.inf, np.inf), (np.float32, 2**64, 2.0**64),
    (np.float64, 2**1000, 2.0**1000), (np.complex64, 1 - 2j, 1 - 2j), (np.uint64, 2**64 - 1, 2**64 - 1),
    (E8M0, 0.5, 0.5), (np.bool_, 1, True),
]  # fmt: skip


@pytest.mark.parametrize(
    "dtype, value, expected", ACCEPTED, ids=lambda v: str(v) if not isinstance(v, type) else ""
)
def test_a_fill_the_dtype_can_hold_is_rounded_into_it(dtype, value, expected):
    with enable_x64(np.dtype(dtype).itemsize == 8 or np.dtype(dtype) == np.complex64):
        out = fill(dtype, value)
        assert out.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(np.asarray(out, np.complex128), [expected])


def test_the_default_fill_of_a_float_type_without_nan_is_its_minimum():
    np.testing.assert_array_equal(np.asarray(fill(F4, None), np.float32), [-6.0])
    assert np.isnan(np.asarray(fill(E4M3FN, None), np.float32)).all()


def test_a_python_int_past_int64_is_a_float_value_not_an_unknown_type():
    out = jax_gather.gather(np.zeros(3, np.float32), [5], mode="fill", fill_value=2**64)
    assert float(out[0]) == 2.0**64
    with pytest.raises(
        ValueError, match=r"fill_value 18446744073709551616 cannot be represented in the data dtype int64"
    ):
        with enable_x64(True):
            jax_gather.gather(np.zeros(3, np.int64), [5], mode="fill", fill_value=2**64)


# (dtype, a traced fill the dtype cannot hold, one it can)
TRACED = [
    (np.int8, 300, -5), (np.uint8, -1, 200), (np.uint8, 256, 255), (np.float16, 1e6, 65519.0),
    (E4M3FN, np.inf, np.nan), (F4, np.nan, -6.0), (E8M0, -1.0, 2.0),
]  # fmt: skip


@pytest.mark.parametrize("dtype, bad, good", TRACED, ids=lambda v: str(v) if not isinstance(v, type) else "")
@pytest.mark.parametrize("mode", ["fill", "checked", "clip"])
def test_a_traced_fill_is_checked_under_checked_in_the_eager_words(dtype, bad, good, mode):
    name = np.dtype(dtype).name
    data = np.ones(3, dtype)
    f = jax_gather.checked(jax.jit(lambda i, v: jax_gather.gather(data, i, mode=mode, fill_value=v)))
    with pytest.raises(
        ValueError,
        match=rf"^Gather: fill_value \S+ cannot be represented in the data dtype {name} \(it holds",
    ):
        f(jnp.array([1]), bad)
    with pytest.raises(
        ValueError, match=rf"^Gather: fill_value {bad!r} cannot be represented in the data dtype {name}"
    ):
        jax_gather.gather(data, np.array([1]), mode=mode, fill_value=bad)  # the same words eagerly
    out = f(jnp.array([1, 7 if mode != "checked" else 0]), good)
    assert out.dtype == data.dtype


def test_a_plain_jit_converts_a_traced_fill_as_astype_does():
    f = jax.jit(lambda v: jax_gather.gather(np.zeros(3, np.int8), np.array([5]), mode="fill", fill_value=v))
    assert int(f(300)[0]) == 44  # documented: only checkify can refuse a traced value


def test_a_traced_fill_of_a_higher_kind_is_refused_by_type():
    f = jax.jit(lambda v: jax_gather.gather(np.zeros(3, np.int8), np.array([5]), mode="fill", fill_value=v))
    with pytest.raises(TypeError, match=r"fill_value must be a scalar of a kind the data dtype int8 holds"):
        f(1.0)
    # An integer of another signedness is of the same kind: its range is checked instead.
    g = jax.jit(lambda v: jax_gather.gather(np.zeros(3, np.uint8), np.array([5]), mode="fill", fill_value=v))
    assert int(g(200)[0]) == 200
