"""Every ONNX data dtype, every integer index dtype, with jax_enable_x64 on and off."""

import chex
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import jax_gather
from tests import ops_table, reference
from tests.compat import enable_x64, jax_gathers
from tests.strategies import DATA_DTYPES, INDEX_DTYPES, make_data

# (op, reference, data shape, in-bounds indices (with negatives), attribute)
OPS = [
    (ops_table.OPS[name].fn, ops_table.OPS[name].reference, (3, 4), idx, attr)
    for name, idx, attr in [
        ("gather", np.array([[2, -1], [0, -3]]), 0),
        ("gather_elements", np.array([[3, -4, 0], [1, 2, -1]]), 1),
        ("gather_nd", np.array([[2, -1], [0, 3]]), 0),
    ]
]


@pytest.mark.core
class DtypeTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_every_data_dtype_is_kept_with_x64(self):
        with enable_x64(True):
            for dtype in DATA_DTYPES:
                for op, ref, shape, idx, attr in OPS:
                    data = make_data(shape, dtype, seed=3)
                    out = self.variant(lambda d, i: op(d, i, attr))(data, idx.astype(np.int64))
                    assert out.dtype == np.dtype(dtype), (op.__name__, dtype, out.dtype)
                    np.testing.assert_array_equal(np.asarray(out), ref(data, idx, attr))

    @chex.variants(with_jit=True, without_jit=True)
    def test_64_bit_data_is_canonicalised_without_x64(self):
        expected = {
            np.int64: np.int32,
            np.uint64: np.uint32,
            np.float64: np.float32,
            np.complex128: np.complex64,
        }
        for dtype, canonical in expected.items():
            for op, ref, shape, idx, attr in OPS:
                data = make_data(shape, dtype, seed=4)
                out = self.variant(lambda d, i: op(d, i, attr))(data, idx)
                assert out.dtype == canonical
                np.testing.assert_array_equal(np.asarray(out), ref(data, idx, attr).astype(canonical))

    @chex.variants(with_jit=True, without_jit=True)
    def test_every_integer_index_dtype(self):
        for x64 in (False, True):
            with enable_x64(x64):
                for index_dtype in INDEX_DTYPES:
                    for op, ref, shape, idx, attr in OPS:
                        i = idx if np.dtype(index_dtype).kind == "i" else np.where(idx < 0, idx + 4, idx) % 3
                        i = i.astype(index_dtype)
                        data = make_data(shape, np.float32, seed=5)
                        out = self.variant(lambda d, i: op(d, i, attr))(data, i)
                        np.testing.assert_array_equal(np.asarray(out), ref(data, i, attr))


@pytest.mark.core
@pytest.mark.parametrize("x64", [False, True])
def test_bfloat16_and_float16_values_survive(x64):
    with enable_x64(x64):
        for dtype in (ml_dtypes.bfloat16, np.float16):
            data = np.array([[0.1, -2.5, 3e3], [np.inf, -np.inf, 7.0]], dtype=dtype)
            out = jax_gather.gather_elements(data, np.array([[1, 0, 1]]), axis=0)
            assert out.dtype == dtype
            np.testing.assert_array_equal(
                np.asarray(out, np.float32), np.array([[np.inf, -2.5, 7.0]], np.float32)
            )


@pytest.mark.core
def test_nested_lists_and_python_scalars():
    out = jax_gather.gather([[1, 2], [3, 4]], [1, -2], 1)
    np.testing.assert_array_equal(out, [[2, 1], [4, 3]])
    assert jax_gather.gather([True, False], 1).dtype == np.bool_
    assert jax_gather.gather([1.0, 2.0], []).shape == (0,)
    assert jax_gather.gather_nd([[1, 2]], [[0, 1]]).tolist() == [2]


@pytest.mark.core
@pytest.mark.parametrize("index_dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("mode", ["checked", "fill", "clip"])
def test_narrow_index_dtypes_on_an_axis_longer_than_they_count(index_dtype, mode):
    # The bounds of a 300-row axis do not fit in 8 bits: they must not be cast to the indices'
    # dtype (uint8 300 wraps to 44, which would make row 100 out of bounds).
    data = np.arange(300, dtype=np.float32)
    idx = np.array([100, 127, 5], dtype=index_dtype)
    out = jax.jit(lambda d, i: jax_gather.gather(d, i, mode=mode))(data, idx)
    np.testing.assert_array_equal(np.asarray(out), [100.0, 127.0, 5.0])
    assert bool(jnp.all(jax_gather.in_bounds(jax_gather.gather_plan((300,), (3,)), idx)))


@pytest.mark.parametrize("dtype", ["int4", "uint4", "int2", "uint2", "float4_e2m1fn"])
@pytest.mark.parametrize("mode", ["checked", "fill", "clip", "promise_in_bounds"])
def test_sub_byte_tables_with_rows_as_long_as_the_cpu_copies_in_bytes(dtype, mode):
    # Rows of 16-64 elements and more than 128 ids take short_rows_in_bytes for wider types; a
    # 4-bit element's itemsize is 1, so a row view by itemsize would slice twice its bytes.
    if not jax_gathers(getattr(ml_dtypes, dtype)):
        pytest.skip(f"this JAX cannot gather {dtype}: jnp.take fails too (tests.compat.jax_gathers)")
    table = make_data((10, 32), np.dtype(getattr(ml_dtypes, dtype)), seed=6)
    ids = np.arange(129) % 10
    expected = reference.gather(table, ids, 0)
    for fn in (jax_gather.gather, jax.jit(jax_gather.gather, static_argnames="mode")):
        out = fn(table, ids, mode=mode)
        assert out.dtype == table.dtype
        np.testing.assert_array_equal(np.asarray(out).view(np.uint8), expected.view(np.uint8))


@pytest.mark.core
@pytest.mark.parametrize("mode", ["checked", "fill", "clip", "promise_in_bounds"])
@pytest.mark.parametrize("first", ["swapped", "native"])
def test_byte_swapped_data_is_read_in_its_own_order(mode, first):
    # JAX reads an array's bytes as native: swapped data must be made native, on the first call
    # of a signature and on every later one (a native call of the same shape may come first).
    native = np.array([1.0, 2.0, 3.0], "=f4")
    swapped = native.astype(native.dtype.newbyteorder())
    ids = np.array([2, 0]) if mode in ("checked", "promise_in_bounds") else np.array([2, 0, 7])
    expected = reference.gather(
        native, ids, 0, mode={"checked": "raise", "promise_in_bounds": "raise"}.get(mode, mode), fill=np.nan
    )
    before = swapped.copy()
    order = [native, swapped] if first == "native" else [swapped, native]
    # jax.jit refuses swapped NumPy arguments itself: under jit, data is a constant of the trace.
    eager = lambda data: jax_gather.gather(data, ids, mode=mode)
    traced = lambda data: jax.jit(lambda i: jax_gather.gather(data, i, mode=mode))(ids)
    for fn in (eager, traced):
        for data in order * 2:
            out = fn(data)
            assert out.dtype == np.float32
            np.testing.assert_array_equal(np.asarray(out), expected)
    np.testing.assert_array_equal(swapped, before)
    assert swapped.dtype.byteorder == before.dtype.byteorder  # the input is not mutated


@pytest.mark.core
def test_byte_swapped_data_of_every_op_and_a_backend_feed():
    data = make_data((3, 4), np.int32, seed=7)
    swapped = data.astype(data.dtype.newbyteorder())
    for op, ref, _, idx, attr in OPS:
        np.testing.assert_array_equal(np.asarray(op(swapped, idx, attr)), ref(data, idx, attr))
    pytest.importorskip("onnx")  # the backend feed: the [onnx] extra
    from onnx import TensorProto, helper

    from jax_gather import backend

    node = helper.make_node("Gather", ["table", "ids"], ["rows"], axis=0)
    graph = helper.make_graph(
        [node],
        "lookup",
        [
            helper.make_tensor_value_info("table", TensorProto.INT32, [3, 4]),
            helper.make_tensor_value_info("ids", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("rows", TensorProto.INT32, [2, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    ids = np.array([2, -3], ">i8")
    (out,) = backend.prepare(model).run([swapped, ids])
    np.testing.assert_array_equal(out, data[[2, 0]])
