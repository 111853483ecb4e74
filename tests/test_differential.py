"""jax_gather against onnxruntime and onnx.reference on random in-bounds cases.

The ONNX reference evaluator wraps out-of-bounds GatherElements indices and rejects indices
smaller than data, so it only sees same-shape, in-bounds cases; onnxruntime sees the rest.
"""

import numpy as np
import pytest
from hypothesis import given, note, strategies as st

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import jax_gather
from tests.compat import enable_x64
from tests.onnx_models import one_node_model, run_onnxruntime, run_reference
from tests.strategies import (
    ORT_DTYPES,
    gather_cases,
    gather_elements_cases,
    gather_nd_cases,
    make_data,
    make_indices,
)

INDEX = (np.int32, np.int64)


def _compare(op_type, attrs, ours, data, indices, reference_ok=True, reference_attrs=None):
    model = one_node_model(op_type, data, indices, **attrs)
    note(f"{op_type} {attrs} data {data.dtype}{list(data.shape)} indices {indices.tolist()}")
    with enable_x64(True):
        out = np.asarray(ours(data, indices))
    expected = run_onnxruntime(model, data, indices)
    assert out.dtype == expected.dtype and out.shape == expected.shape
    np.testing.assert_array_equal(out, expected)
    # Older onnx.reference releases lose the shape of empty results.
    if reference_ok and out.size:
        ref_model = one_node_model(op_type, data, indices, **(reference_attrs or attrs))
        np.testing.assert_array_equal(out, run_reference(ref_model, data, indices))


@given(case=gather_cases(INDEX), dtype=st.sampled_from(ORT_DTYPES))
def test_gather_against_onnx(case, dtype):
    data_shape, indices_shape, axis, seed, index_dtype = case
    data = make_data(data_shape, dtype, seed)
    indices = make_indices(indices_shape, data_shape[axis], index_dtype, seed)
    _compare("Gather", {"axis": axis}, lambda d, i: jax_gather.gather(d, i, axis), data, indices)


@given(case=gather_elements_cases(INDEX), dtype=st.sampled_from(ORT_DTYPES))
def test_gather_elements_against_onnx(case, dtype):
    data_shape, indices_shape, axis, seed, index_dtype = case
    data = make_data(data_shape, dtype, seed)
    indices = make_indices(indices_shape, data_shape[axis], index_dtype, seed)
    same = all(
        i == d for k, (i, d) in enumerate(zip(indices_shape, data_shape)) if k != axis % len(data_shape)
    )
    _compare(
        "GatherElements",
        {"axis": axis},
        lambda d, i: jax_gather.gather_elements(d, i, axis),
        data,
        indices,
        reference_ok=same,
        # the reference evaluator mis-slices shapes for a negative axis
        reference_attrs={"axis": axis % len(data_shape)},
    )


@given(case=gather_nd_cases((np.int64,)), dtype=st.sampled_from(ORT_DTYPES))
def test_gather_nd_against_onnx(case, dtype):
    data_shape, indices_shape, b, seed, index_dtype = case
    data = make_data(data_shape, dtype, seed)
    k = indices_shape[-1]
    indices = make_indices(indices_shape, data_shape[b : b + k], index_dtype, seed)
    _compare(
        "GatherND",
        {"batch_dims": b},
        lambda d, i: jax_gather.gather_nd(d, i, b),
        data,
        indices,
        # the reference evaluator cannot reshape empty batches
        reference_ok=data.size > 0,
    )
