"""Gather with batch dims (OpenVINO Gather-7/8, ``tf.gather(..., batch_dims=)``) against the NumPy
reference: every mode, eagerly and under jit, vmap, grad and jax.export, and its errors."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, note, strategies as st

import jax_gather
from tests import reference
from tests.strategies import batched_gather_cases, make_data, make_indices, make_wild_indices

pytestmark = pytest.mark.core  # the fast tier: pytest -m core

MODES = ["checked", "clip", "fill", "promise_in_bounds"]
REFERENCE_MODE = {"checked": "raise", "promise_in_bounds": "raise", "clip": "clip", "fill": "fill"}


# (int64 indices would wrap at jit's boundary without x64, JAX's rule, not the op's)
@given(
    batched_gather_cases(index_dtypes=(np.int32, np.int8, np.uint16)), st.sampled_from(MODES), st.booleans()
)
def test_batched_gather_matches_the_reference(case, mode, jitted):
    data_shape, indices_shape, axis, batch_dims, seed, dtype = case
    note(f"gather(data{data_shape}, indices{indices_shape}, {axis=}, {batch_dims=}, {mode=}, {jitted=})")
    data = make_data(data_shape, np.float32, seed)
    size = data_shape[axis]
    draw = make_indices if REFERENCE_MODE[mode] == "raise" else make_wild_indices
    indices = draw(indices_shape, size, dtype, seed)
    op = lambda d, i: jax_gather.gather(d, i, axis, batch_dims=batch_dims, mode=mode)
    got = (jax.jit(op) if jitted else op)(data, indices)
    want = reference.gather(data, indices, axis, REFERENCE_MODE[mode], np.nan, batch_dims=batch_dims)
    np.testing.assert_array_equal(got, want)


def test_an_out_of_bounds_index_names_its_position():
    data, indices = np.zeros((2, 3, 4)), np.array([[0, 1], [2, 3]])
    with pytest.raises(IndexError, match=r"Gather: indices\[1, 1\] = 3 is out of bounds"):
        jax_gather.gather(data, indices, axis=1, batch_dims=1)


@pytest.mark.parametrize(
    ("data_shape", "indices_shape", "axis", "batch_dims", "message"),
    [
        ((2, 3), (2, 4), 0, 1, r"at most axis \(0\)"),
        ((2, 3), (2, 4), 1, 3, r"batch_dims must be in \[-2, 2\]"),
        ((2, 3), (2, 4), 1, -3, r"batch_dims must be in \[-2, 2\]"),
        ((2, 3), (), 1, 1, r"batch_dims must be in \[0, 0\] "),  # rank-0 indices: never "[-0, 0]"
        ((2, 3), (), 1, -1, r"batch_dims must be in \[0, 0\] "),
        ((2, 3, 4), (3, 4), 2, 1, r"the first batch_dims=1 dimensions of data and indices must be equal"),
    ],
)
def test_bad_batch_dims_are_refused(data_shape, indices_shape, axis, batch_dims, message):
    with pytest.raises(ValueError, match=r"^Gather: .*" + message):
        jax_gather.gather(
            np.zeros(data_shape), np.zeros(indices_shape, np.int32), axis, batch_dims=batch_dims
        )


@pytest.mark.parametrize("batch_dims", [True, 1.0])
def test_batch_dims_must_be_a_static_int(batch_dims):
    with pytest.raises(TypeError, match="Gather: batch_dims must be"):
        jax.jit(lambda d, i: jax_gather.gather(d, i, 1, batch_dims=batch_dims))(
            np.zeros((2, 3)), np.zeros((2, 1), np.int32)
        )


@pytest.mark.parametrize("mode", ["checked", "clip", "fill"])
def test_the_gradient_is_a_scatter_add_per_example(mode):
    data = make_data((3, 5, 2), np.float32, 1)
    indices = (
        np.array([[0, 4, 4], [-1, 1, 7], [2, 2, -6]])
        if mode != "checked"
        else np.array([[0, 4, 4], [-1, 1, 3], [2, 2, -5]])
    )
    w = make_data((3, 3, 2), np.float32, 2) + 1
    grad = jax.grad(lambda d: jnp.sum(jax_gather.gather(d, indices, 1, batch_dims=1, mode=mode) * w))(data)
    positions = reference.gather(
        np.arange(data.size).reshape(data.shape),
        indices,
        1,
        "fill" if mode == "fill" else REFERENCE_MODE[mode],
        -1,
        batch_dims=1,
    )
    want = np.zeros(data.size, np.float32)
    np.add.at(want, positions[positions >= 0], w[positions >= 0])
    np.testing.assert_allclose(grad, want.reshape(data.shape), rtol=1e-6)
    jaxpr = str(
        jax.make_jaxpr(jax.grad(lambda d: jax_gather.gather(d, indices, 1, batch_dims=1, mode=mode).sum()))(
            data
        )
    )
    assert "scatter" in jaxpr and "dot_general" not in jaxpr


def test_vmap_adds_a_batch_dim():
    data, indices = make_data((4, 2, 5, 3), np.float32, 3), make_indices((4, 2, 6), 5, np.int32, 4)
    got = jax.vmap(lambda d, i: jax_gather.gather(d, i, 1, batch_dims=1))(data, indices)
    want = np.stack([reference.gather(data[k], indices[k], 1, batch_dims=1) for k in range(4)])
    np.testing.assert_array_equal(got, want)


def test_jax_export_serializes_a_symbolic_batch():
    b, n = jax.export.symbolic_shape("b, n")
    exported = jax.export.export(jax.jit(lambda d, i: jax_gather.gather(d, i, 1, batch_dims=1)))(
        jax.ShapeDtypeStruct((b, 7, 3), jnp.float32), jax.ShapeDtypeStruct((b, n), jnp.int32)
    )
    restored = jax.export.deserialize(exported.serialize())
    data, indices = make_data((2, 7, 3), np.float32, 5), make_indices((2, 4), 7, np.int32, 6)
    np.testing.assert_array_equal(
        restored.call(data, indices), reference.gather(data, indices, 1, batch_dims=1)
    )


def test_exports_to_onnx_as_gathernd_with_batch_dims():
    pytest.importorskip("jax2onnx")  # the [export] extra
    pytest.importorskip("onnxruntime")
    import jax2onnx
    import onnx

    from tests.onnx_models import onnxruntime_session

    jax_gather.register_jax2onnx()
    model = jax2onnx.to_onnx(
        lambda d, i: jax_gather.gather(d, i, 2, batch_dims=1),
        [jax.ShapeDtypeStruct((2, 3, 5), jnp.float32), jax.ShapeDtypeStruct((2, 4), jnp.int32)],
    )
    onnx.checker.check_model(model, full_check=True)
    (node,) = [n for n in model.graph.node if n.op_type.startswith("Gather")]
    assert node.op_type == "GatherND" and [a.i for a in node.attribute] == [1]
    data, indices = make_data((2, 3, 5), np.float32, 7), make_indices((2, 4), 5, np.int32, 8)
    names = [i.name for i in model.graph.input]
    got = onnxruntime_session(model).run(None, dict(zip(names, [data, indices])))[0]
    np.testing.assert_array_equal(got, reference.gather(data, indices, 2, batch_dims=1))


def test_strings_gather_with_batch_dims():
    data = np.array([["a", "bb", "c"], ["dd", "e", "ff"]])
    indices = np.array([[2, -3], [1, 5]])
    got = jax_gather.gather(data, indices, 1, batch_dims=1, mode="fill")
    np.testing.assert_array_equal(got, reference.gather(data, indices, 1, "fill", "", batch_dims=1))
    assert got.tolist() == [["c", "a"], ["e", ""]]
