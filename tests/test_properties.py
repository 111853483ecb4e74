"""Property tests: random shapes, axes, batch_dims, negative indices and dtypes against the
NumPy reference, each run jitted and not. A failure prints a snippet that reproduces it."""

import chex
import jax
import numpy as np
import pytest
from hypothesis import given, note, strategies as st

import jax_gather
from tests import ops_table
from tests.compat import enable_x64
from tests.strategies import (
    DATA_DTYPES,
    INDEX_DTYPES,
    gather_cases,
    gather_elements_cases,
    gather_nd_cases,
    make_data,
    make_indices,
    make_wild_indices,
)

pytestmark = pytest.mark.core  # the fast tier: pytest -m core


def _snippet(op_name, data, indices, attr_name, attr):
    return (
        "import numpy as np, ml_dtypes, jax_gather\n"
        f"data = np.array({data.tolist()!r}, dtype={data.dtype.name!r})\n"
        f"indices = np.array({indices.tolist()!r}, dtype={indices.dtype.name!r})\n"
        f"jax_gather.{op_name}(data, indices, {attr_name}={attr})"
    )


def _assert_matches(out, expected):
    expected = np.asarray(expected)
    assert out.shape == expected.shape, (out.shape, expected.shape)
    assert out.dtype == jax.dtypes.canonicalize_dtype(expected.dtype)
    np.testing.assert_array_equal(np.asarray(out), expected.astype(out.dtype))


OPS = {name: (op.cases, op.reference, op.fn, op.attribute) for name, op in ops_table.OPS.items()}


def _sizes(name, data_shape, indices_shape, attr):
    if name == "gather_nd":
        return data_shape[attr : attr + indices_shape[-1]]
    return data_shape[attr]


class PropertyTest(chex.TestCase):
    def _check(self, name, case, dtype):
        _, ref, op, attr_name = OPS[name]
        data_shape, indices_shape, attr, seed, index_dtype = case
        data = make_data(data_shape, dtype, seed)
        sizes = _sizes(name, data_shape, indices_shape, attr)
        indices = make_indices(indices_shape, sizes, index_dtype, seed)
        note(_snippet(name, data, indices, attr_name, attr))
        out = self.variant(lambda d, i: op(d, i, attr))(data, indices)
        _assert_matches(out, ref(data, indices, attr))

    @chex.variants(with_jit=True, without_jit=True)
    @given(case=gather_cases(INDEX_DTYPES), dtype=st.sampled_from(DATA_DTYPES))
    def test_gather(self, case, dtype):
        self._check("gather", case, dtype)

    @chex.variants(with_jit=True, without_jit=True)
    @given(case=gather_elements_cases(INDEX_DTYPES), dtype=st.sampled_from(DATA_DTYPES))
    def test_gather_elements(self, case, dtype):
        self._check("gather_elements", case, dtype)

    @chex.variants(with_jit=True, without_jit=True)
    @given(case=gather_nd_cases(INDEX_DTYPES), dtype=st.sampled_from(DATA_DTYPES))
    def test_gather_nd(self, case, dtype):
        self._check("gather_nd", case, dtype)


class ModePropertyTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    @given(
        name=st.sampled_from(sorted(OPS)),
        data=st.data(),
        mode=st.sampled_from(["fill", "clip"]),
        index_dtype=st.sampled_from([np.int32, np.int64, np.int8, np.uint8, np.uint32]),
    )
    def test_out_of_bounds_modes_match_reference(self, name, data, mode, index_dtype):
        cases, ref, op, attr_name = OPS[name]
        data_shape, indices_shape, attr, seed, _ = data.draw(cases())
        values = make_data(data_shape, np.float32, seed)
        indices = make_wild_indices(
            indices_shape, _sizes(name, data_shape, indices_shape, attr), index_dtype, seed
        )
        note(_snippet(name, values, indices, attr_name, attr) + f", mode={mode!r})")
        # With x64 off, jax.jit itself narrows an int64 argument before the op sees it.
        with enable_x64(index_dtype == np.int64):
            out = self.variant(lambda d, i: op(d, i, attr, mode=mode))(values, indices)
        _assert_matches(out, ref(values, indices, attr, mode=mode, fill=np.nan))

    @given(
        name=st.sampled_from(sorted(OPS)), data=st.data(), index_dtype=st.sampled_from([np.int32, np.int64])
    )
    def test_checked_raises_exactly_when_an_index_is_out_of_bounds(self, name, data, index_dtype):
        cases, ref, op, attr_name = OPS[name]
        data_shape, indices_shape, attr, seed, _ = data.draw(cases())
        values = make_data(data_shape, np.float32, seed)
        indices = make_wild_indices(
            indices_shape, _sizes(name, data_shape, indices_shape, attr), index_dtype, seed
        )
        note(_snippet(name, values, indices, attr_name, attr))
        sizes = np.broadcast_to(np.asarray(_sizes(name, data_shape, indices_shape, attr)), indices.shape)
        wide = indices.astype(np.int64)
        any_bad = bool(np.any((wide < -sizes) | (wide >= sizes)))
        if any_bad:
            with self.assertRaisesRegex(IndexError, r"is out of bounds for axis \d+ of size \d+"):
                op(values, indices, attr)
            jitted = jax.jit(lambda d, i: op(d, i, attr))
            # With x64 off, jax.jit itself narrows an int64 argument before the op sees it.
            with enable_x64(index_dtype == np.int64), self.assertRaises(IndexError):
                jax_gather.checked(jitted)(values, indices)
        else:
            _assert_matches(op(values, indices, attr), ref(values, indices, attr))
