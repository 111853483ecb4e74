"""The index arithmetic at the ends of the index dtype: the in-bounds mask and the indices the
gather reads are computed in unsigned (wrapping) arithmetic, so they are checked here against
plain NumPy on 64- or arbitrary-precision integers, for axes up to the largest the dtype can
address. Plans are pure functions of shapes, so no data of that size is ever made."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, strategies as st

import jax_gather
from jax_gather import _traced_bounds
from tests.compat import enable_x64

I32 = np.iinfo(np.int32)
I64 = np.iinfo(np.int64)


def _edges(size: int, info: np.iinfo) -> list[int]:
    near = [-size - 1, -size, -size + 1, -1, 0, 1, size - 2, size - 1, size, size + 1]
    extremes = [info.min, info.min + 1, info.max - 1, info.max]
    return sorted({v for v in near + extremes if info.min <= v <= info.max})


def _expected(indices: list[int], size: int, clip: bool) -> tuple[list[bool], list[int | None]]:
    """In-bounds flags, and the index each position must read (None: any in-range index)."""
    ok = [-size <= i < size for i in indices]
    if clip:
        reads = [min(max(i, -size), size - 1) % size for i in indices]
    else:
        reads = [i % size if good else None for i, good in zip(indices, ok)]
    return ok, reads


def _check(size: int, indices: list[int], dtype) -> None:
    plan = jax_gather.gather_plan((size,), (len(indices),))
    idx = jnp.asarray(np.asarray(indices, dtype))
    for run in (lambda f: f, jax.jit):
        ok = run(lambda i: jax_gather.in_bounds(plan, i))(idx)
        for clip in (False, True):
            got = np.asarray(run(lambda i: _traced_bounds.working_indices(plan, i, clip=clip))(idx))
            want_ok, reads = _expected(indices, size, clip)
            np.testing.assert_array_equal(np.asarray(ok), want_ok, err_msg=f"size {size}")
            for i, g, r in zip(indices, got.tolist(), reads):
                assert 0 <= g < size, f"size {size}, index {i}: reads {g}"
                assert r is None or g == r, f"size {size}, index {i}, clip={clip}: reads {g}, not {r}"


@pytest.mark.parametrize("size", [1, 2, 3, 1000, 2**30 - 1, 2**30, 2**30 + 1, I32.max - 1, I32.max])
def test_int32_indices_at_the_ends_of_the_dtype(size):
    _check(size, _edges(size, I32), np.int32)


@pytest.mark.parametrize("size", [I32.max + 1, 2**40 + 3, 2**62, I64.max - 1, I64.max])
def test_int64_indices_for_axes_beyond_int32(size):
    with enable_x64(True):
        _check(size, _edges(size, I64), np.int64)


@given(
    size=st.integers(1, I32.max),
    indices=st.lists(st.integers(I32.min, I32.max), min_size=1, max_size=8),
)
def test_int32_indices_drawn(size, indices):
    _check(size, indices, np.int32)


def test_wider_indices_saturate_into_the_working_dtype():
    # int64 indices with x64 on, for an axis int32 can address: narrowed to int32 with
    # saturation, so values beyond int32 stay out of bounds (never wrap into range).
    with enable_x64(True):
        size = 5
        indices = [-(2**40), -(2**32) - 1, -6, -5, 4, 5, 2**32 + 1, 2**40]
        _check(size, indices, np.int64)


@pytest.mark.parametrize("indices", [[0.5, 2.9], np.array([0.0, 1.0]), np.array([True, False])])
def test_in_bounds_refuses_indices_that_are_not_integers(indices):
    # Converted first, [0.5, 2.9] would be truncated to [0, 2] and judged in bounds.
    plan = jax_gather.gather_plan((3,), (2,))
    with pytest.raises(TypeError, match=r"^Gather: indices must have an integer dtype"):
        jax_gather.in_bounds(plan, indices)


@pytest.mark.parametrize(
    "plan, indices",
    [
        (jax_gather.gather_nd_plan((3, 4), (2, 2)), [[0, 1, 2]]),  # the tuples' length
        (jax_gather.gather_nd_plan((3, 4), (2, 2)), [[0, 1]]),  # the number of tuples
        (jax_gather.gather_nd_plan((3, 4), (2, 1)), [[0, 1], [1, 2]]),
        (jax_gather.gather_plan((3, 4), (2,), 1), [[0, 1]]),
        (jax_gather.gather_elements_plan((3, 4), (2, 4), 1), np.zeros((2, 1), np.int32)),
    ],
)
def test_in_bounds_refuses_indices_of_another_shape_than_the_plans(plan, indices):
    shape = re.escape(str(tuple(np.shape(indices))))
    with pytest.raises(
        ValueError,
        match=rf"^{plan.op_name}: indices must have the shape the plan was made for, .* got {shape}$",
    ):
        jax_gather.in_bounds(plan, indices)
    with pytest.raises(ValueError, match=r"indices must have the shape the plan was made for"):
        jax.jit(lambda i: jax_gather.in_bounds(plan, i))(jnp.asarray(indices))


def test_plans_know_the_shape_of_their_indices():
    assert jax_gather.gather_plan((5, 4, 3), (2, 6), axis=1).indices_shape == (2, 6)
    assert jax_gather.gather_plan((2, 5, 3), (2, 4), axis=1, batch_dims=1).indices_shape == (2, 4)
    assert jax_gather.gather_plan((5,), ()).indices_shape == ()
    assert jax_gather.gather_elements_plan((3, 4), (2, 7), axis=1).indices_shape == (2, 7)
    assert jax_gather.gather_nd_plan((2, 5, 6, 7), (2, 3, 2), batch_dims=1).indices_shape == (2, 3, 2)
    swapped = np.array([2, -4, 3], ">i4")
    np.testing.assert_array_equal(
        jax_gather.in_bounds(jax_gather.gather_plan((3,), (3,)), swapped), [True, False, False]
    )
