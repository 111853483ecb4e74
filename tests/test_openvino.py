"""jax_gather.openvino against the OpenVINO runtime itself (its CPU plugin): random shapes, axes,
batch dims (negative too), data and index dtypes and indices, compared exactly.

The runtime crashes the process on rank-0 indices and on some batched calls over size-1 dims:
those cases are left to the NumPy references (tests/test_batch_dims.py), and here every dim is
at least 1 and every batch dim at least 2. Indices are in range: for most out-of-range ones the
2026.4 CPU plugin's Gather reads memory past the data (not the zeros Gather-8's spec gives), and
GatherND's spec leaves them undefined; the ops' out-of-range behaviour is tested against the
NumPy references instead.
"""

from __future__ import annotations

import functools
import importlib.util
import re

import numpy as np
import pytest
from hypothesis import assume, given, note, strategies as st

from jax_gather import openvino
from jax_gather._cpu_client import usable_cores
from jax_gather.bench import import_openvino
from tests.compat import enable_x64
from tests.strategies import (
    batched_gather_cases,
    gather_elements_cases,
    gather_nd_cases,
    make_data,
    make_indices,
)

if importlib.util.find_spec("openvino") is None:  # the [openvino] extra
    pytest.skip("needs the openvino package: pip install 'jax_gather[openvino]'", allow_module_level=True)
# Imported only this way, its telemetry declined: importing it plainly (importorskip) forks a
# process from this multithreaded JAX one.
ov = import_openvino()
opset1, opset5, opset6, opset7, opset8 = ov.opset1, ov.opset5, ov.opset6, ov.opset7, ov.opset8
DATA_DTYPES = [np.float32, np.float16, np.int32, np.int64, np.int8, np.uint8, np.bool_]
INDEX_DTYPES = (np.int32, np.int64)


@functools.cache
def core() -> ov.Core:
    return ov.Core()


def run_openvino(build, data: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """One node, ``build(data_parameter, indices_parameter)``, compiled for the CPU and run."""
    element = ov.Type.boolean if data.dtype == np.bool_ else ov.Type(data.dtype)
    data_in = opset8.parameter(data.shape, element, name="data")
    indices_in = opset8.parameter(indices.shape, ov.Type(indices.dtype), name="indices")
    model = ov.Model([build(data_in, indices_in)], [data_in, indices_in])
    return core().compile_model(model, "CPU")([data, indices])[0]


def usable(data_shape, indices_shape, batch=0):
    """Cases the runtime runs without crashing: indices of rank >= 1, no empty dims, batch
    dims of at least 2."""
    return (
        len(indices_shape) >= 1
        and 0 not in data_shape + indices_shape
        and all(d >= 2 for d in data_shape[:batch])
    )


def same(got, want):
    assert np.asarray(got).dtype == want.dtype, (np.asarray(got).dtype, want.dtype)
    np.testing.assert_array_equal(got, want)


data_dtypes = st.sampled_from(DATA_DTYPES)


@pytest.mark.parametrize("version", [7, 8])
@given(case=batched_gather_cases(index_dtypes=INDEX_DTYPES), dtype=data_dtypes)
def test_gather_agrees_with_openvino(version, case, dtype):
    """Gather-7 and -8 with batch dims, on in-range indices (Gather-8: negative ones too)."""
    data_shape, indices_shape, axis, batch_dims, seed, index_dtype = case
    b = batch_dims % len(indices_shape) if batch_dims < 0 else batch_dims
    assume(usable(data_shape, indices_shape, b))
    note(f"Gather-{version}(data{data_shape} {np.dtype(dtype).name}, indices{indices_shape}, ")
    note(f"    {axis=}, {batch_dims=})")
    data = make_data(data_shape, dtype, seed)
    indices = make_indices(indices_shape, data_shape[axis], index_dtype, seed, negative=version == 8)
    opset = opset8 if version == 8 else opset7
    want = run_openvino(
        lambda d, i: opset.gather(d, i, opset8.constant(np.int64(axis)), batch_dims), data, indices
    )
    with enable_x64():
        same(openvino.gather(data, indices, axis, batch_dims, version=version), want)


@given(
    data_shape=st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple),
    indices_shape=st.lists(st.integers(1, 4), min_size=1, max_size=2).map(tuple),
    seed=st.integers(0, 2**16),
)
def test_gather_1_agrees_with_openvino(data_shape, indices_shape, seed):
    axis = seed % len(data_shape)
    data = make_data(data_shape, np.float32, seed)
    indices = make_indices(indices_shape, data_shape[axis], np.int64, seed, negative=False)
    want = run_openvino(lambda d, i: opset1.gather(d, i, opset8.constant(np.int64(axis))), data, indices)
    with enable_x64():
        same(openvino.gather(data, indices, axis, version=1), want)


@pytest.mark.parametrize("version", [5, 8])
@given(case=gather_nd_cases(index_dtypes=INDEX_DTYPES), dtype=data_dtypes)
def test_gather_nd_agrees_with_openvino(version, case, dtype):
    """In-bounds indices, negative ones too (out of range, the runtime reads past the data)."""
    data_shape, indices_shape, batch_dims, seed, index_dtype = case
    assume(usable(data_shape, indices_shape, batch_dims))
    note(
        f"GatherND-{version}(data{data_shape} {np.dtype(dtype).name}, indices{indices_shape}, {batch_dims=})"
    )
    k = indices_shape[-1]
    data = make_data(data_shape, dtype, seed)
    indices = make_indices(indices_shape, data_shape[batch_dims : batch_dims + k], index_dtype, seed)
    opset = opset8 if version == 8 else opset5
    want = run_openvino(lambda d, i: opset.gather_nd(d, i, batch_dims), data, indices)
    with enable_x64():
        same(openvino.gather_nd(data, indices, batch_dims, version=version), want)


@given(case=gather_elements_cases(index_dtypes=INDEX_DTYPES), dtype=data_dtypes)
def test_gather_elements_agrees_with_openvino(case, dtype):
    data_shape, indices_shape, axis, seed, index_dtype = case
    a = axis % len(data_shape)  # GatherElements-6 takes indices of data's shape but on axis
    indices_shape = tuple(m if d == a else n for d, (n, m) in enumerate(zip(data_shape, indices_shape)))
    assume(usable(data_shape, indices_shape))
    note(f"GatherElements-6(data{data_shape} {np.dtype(dtype).name}, indices{indices_shape}, {axis=})")
    data = make_data(data_shape, dtype, seed)
    indices = make_indices(indices_shape, data_shape[axis], index_dtype, seed)
    want = run_openvino(lambda d, i: opset6.gather_elements(d, i, axis), data, indices)
    with enable_x64():
        same(openvino.gather_elements(data, indices, axis), want)


def test_gather_8_defaults_to_zeros_and_counts_negatives_from_the_end():
    """As Gather-8's spec says. (The 2026.4 CPU plugin reads memory past the data for most
    out-of-range indices instead, so this is checked against the spec, not the runtime.)"""
    data, indices = np.arange(12.0, dtype=np.float32).reshape(3, 4), np.array([[0, -1, 4, -5, 9, -100]] * 3)
    got = np.asarray(openvino.gather(data, indices, 1, 1))
    np.testing.assert_array_equal(got[:, :2], data[:, [0, 3]])
    assert (got[:, 2:] == 0).all()


def test_gather_7_takes_no_negative_indices():
    data = np.arange(12.0).reshape(3, 4)
    with pytest.raises(IndexError, match=r"Gather-7: indices\[1\] = -1 is out of range \[0, 3\]"):
        openvino.gather(data, np.array([0, -1]), 1, version=7)
    filled = openvino.gather(data, np.array([0, -1, 4]), 1, version=7, mode="fill", fill_value=0)
    np.testing.assert_array_equal(filled, np.stack([data[:, 0], 0 * data[:, 0], 0 * data[:, 0]], axis=1))
    clipped = openvino.gather(data, np.array([-3, 9]), 1, version=7, mode="clip")
    np.testing.assert_array_equal(clipped, data[:, [0, 3]])


def test_gather_elements_6_raises_where_the_runtime_does():
    # The 2026.4 CPU plugin checks the indices only on two threads or more; in a process on one
    # core it reads past the data (values such as 3.06e-41 for index 3 of 3), where "checked" raises.
    data, indices = np.zeros((2, 3), np.float32), np.array([[0, 3, 0], [0, 0, 0]])
    try:
        run_openvino(lambda d, i: opset6.gather_elements(d, i, 1), data, indices)
        raised = False
    except RuntimeError:  # the runtime's own check
        raised = True
    assert raised == (usable_cores() > 1)
    with pytest.raises(IndexError, match=r"GatherElements-6: indices\[0, 1\] = 3 is out of bounds"):
        openvino.gather_elements(data, indices, 1)


def test_gather_elements_6_refuses_smaller_indices_as_its_spec_does():
    with pytest.raises(ValueError, match=r"GatherElements-6: indices dimension 0 \(size 1\) must equal"):
        openvino.gather_elements(np.zeros((2, 3)), np.zeros((1, 3), np.int32), 1)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda: openvino.gather(np.zeros((2, 3)), np.array([0]), 2),
            ValueError,
            r"^Gather-8: axis must be in",
        ),
        (
            lambda: openvino.gather(np.zeros((2, 3)), np.array([[0]]), 1, 1, version=1),
            ValueError,
            r"^Gather-1: has no batch_dims",
        ),
        (
            lambda: openvino.gather(np.zeros((2, 3)), np.array([3]), 1, version=7),
            IndexError,
            r"^Gather-7: indices\[0\] = 3",
        ),
        (
            lambda: openvino.gather(np.zeros((2, 3)), np.array([0]), 1, version=5),
            ValueError,
            r"^Gather: version must be one of \(1, 7, 8\)",
        ),
        (
            lambda: openvino.gather_nd(np.zeros((2, 3)), np.array([[2, 0]]), version=5),
            IndexError,
            r"^GatherND-5: indices\[0, 0\] = 2",
        ),
        (
            lambda: openvino.gather_nd(np.zeros((2, 3)), np.array([[0.5]])),
            TypeError,
            r"^GatherND-8: indices must have an integer dtype",
        ),
        (
            lambda: openvino.gather(np.zeros((2, 3)), np.array([0]), 1, mode="wrap"),
            ValueError,
            r"^Gather-8: mode must be one of",
        ),
    ],
)
def test_errors_name_the_versioned_op(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_gather_7_checks_traced_indices_in_its_own_words():
    import jax
    import jax.numpy as jnp

    import jax_gather

    data = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    pick = jax_gather.checked(jax.jit(lambda i: openvino.gather(data, i, 1, 1, version=7)))
    with pytest.raises(
        IndexError, match=r"Gather-7: indices\[0, 1\] = -1 is out of range \[0, 2\] \(Gather-7"
    ):
        pick(jnp.array([[2, -1], [0, 1]]))
    np.testing.assert_array_equal(pick(jnp.array([[2, 0], [0, 1]])), [[2.0, 0.0], [3.0, 4.0]])
    with pytest.raises(IndexError, match=r"^Gather-7: indices\[0, 1\] = 3 is out of range \[0, 2\]$"):
        openvino.gather(data, np.array([[2, 3], [0, 1]]), 1, 1, version=7)


def test_gather_8_fills_zeros_in_any_filling_mode_and_strings_with_empty_ones():
    data = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(
        openvino.gather(data, np.array([[0, 3]]), 1, mode="fill"), [[[0.0, 0.0]], [[3.0, 0.0]]]
    )
    words = np.array(["a", "b", "c"])
    assert openvino.gather(words, [0, 2, 5], 0).tolist() == ["a", "c", ""]


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda: openvino.gather(np.zeros(3), [1], 0, mode=""), "Gather-8"),
        (lambda: openvino.gather_nd(np.zeros(3), [[1]], mode=""), "GatherND-8"),
        (lambda: openvino.gather_elements(np.zeros(3), [1], 0, mode=""), "GatherElements-6"),
        (lambda: openvino.gather_nd(np.zeros(3), [[1]], mode=0), "GatherND-8"),
    ],
)
def test_every_front_refuses_a_mode_that_is_not_one(call, name):
    # Only None means the default: "" (falsy) was taken as "checked" by two of the three.
    with pytest.raises(ValueError, match=rf"^{name}: mode must be one of 'checked', 'clip', 'fill'"):
        call()


def test_version_takes_any_integer_as_batch_dims_does():
    data = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(
        openvino.gather(data, [[1], [0]], 1, np.int64(1), version=np.int64(7)), [[1.0], [3.0]]
    )
    np.testing.assert_array_equal(openvino.gather_nd(data, [[1, 2]], version=np.int32(5)), [5.0])
    with pytest.raises(TypeError, match=r"^Gather: version must be an integer, got the bool True"):
        openvino.gather(data, [0], 1, version=True)
    with pytest.raises(TypeError, match=r"^GatherND: version must be a static Python integer"):
        openvino.gather_nd(data, [[0]], version=5.0)


def test_gather_7_reports_a_traced_index_in_its_own_words_wherever_it_is_out_of_range():
    import jax
    import jax.numpy as jnp

    import jax_gather

    data = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    pick = jax_gather.checked(jax.jit(lambda i: openvino.gather(data, i, 1, version=7)))
    # The first index out of [0, 2] in C order, as given (never the value a negative one is
    # rewritten to, nor under the unversioned name).
    for indices, first in (
        ([[5, -1]], "[0, 0] = 5"),
        ([[0, -1]], "[0, 1] = -1"),
        ([[1, 2], [-3, 9]], "[1, 0] = -3"),
    ):
        with pytest.raises(
            IndexError, match=rf"^Gather-7: indices{re.escape(first)} is out of range \[0, 2\]"
        ):
            pick(jnp.array(indices))


def test_gather_7_on_rank_0_data_gives_the_rank_error():
    for version in (1, 7):
        with pytest.raises(ValueError, match=rf"^Gather-{version}: data must have rank >= 1, got rank 0"):
            openvino.gather(np.float32(1.0), [0], 0, version=version)
