"""Export through jax2onnx (jax_gather.register_jax2onnx): each op becomes the ONNX node it
implements, and onnxruntime runs the exported model to the NumPy references' answer.

Every model is checked by ``onnx.checker`` (with shape inference) and run by onnxruntime, or by
``onnx.reference`` for bfloat16 (onnxruntime's CPU has no bfloat16 Where), on indices in range,
negative, and out of bounds (the dtype's extremes included). In the modes that leave
out-of-range indices to ONNX ("checked", "promise_in_bounds"), onnxruntime must refuse them.
"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, note, strategies as st

pytest.importorskip("jax2onnx")
pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import jax2onnx
import onnx
from onnx.reference import ReferenceEvaluator

import jax_gather
from jax_gather import backend, ops
from jax_gather._arguments import Mode
from jax_gather.onnx_export import onnx_gather_p
from tests import ops_table, reference
from tests.onnx_models import GraphBuilder, one_node_model, onnxruntime_session
from tests.strategies import (
    make_data,
    make_indices,
    make_wild_indices,
)

jax_gather.register_jax2onnx()

OPS = {name: (op.fn, op.reference, op.attribute) for name, op in ops_table.BY_ONNX.items()}
GATHER_NODES = set(OPS)
MODES = ["checked", "promise_in_bounds", "clip", "fill"]
REFERENCE_MODE = {"checked": "raise", "promise_in_bounds": "raise", "clip": "clip", "fill": "fill"}
# Every data dtype ONNX and jax2onnx share.
DTYPES = [
    np.float32, np.float16, ml_dtypes.bfloat16, np.float64, np.int8, np.int16, np.int32, np.int64,
    np.uint8, np.uint16, np.uint32, np.uint64, np.bool_,
]  # fmt: skip
WIDE = (np.float64, np.int64, np.uint64)
# (op, data shape, indices shape, attribute): each op's attribute at 0, positive and negative
# axes, rank-0 indices, GatherElements indices smaller than data, GatherND with batch dims.
CASES = [
    ("Gather", (5, 4, 3), (2, 3), 1),
    ("Gather", (6,), (), 0),
    ("Gather", (4, 3), (2, 2), -1),
    ("GatherElements", (3, 4), (3, 6), 1),
    ("GatherElements", (4, 5), (3, 2), -2),
    ("GatherND", (2, 3, 4), (2, 5, 1), 1),
    ("GatherND", (3, 4, 2), (5, 2), 0),
]
# What each mode may add around its one gather node.
AROUND = {
    "checked": {"Cast"},
    "promise_in_bounds": {"Cast"},
    "clip": {"Cast", "Clip", "Max", "Min"},
    "fill": {"Cast", "GreaterOrEqual", "LessOrEqual", "And", "Where", "Reshape", "ReduceMin"},
}


def default_fill(dtype):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return True
    if dtype.kind in "fV" or dtype == ml_dtypes.bfloat16:
        return np.nan
    return np.iinfo(dtype).max if dtype.kind == "u" else np.iinfo(dtype).min


def index_sizes(op, data_shape, indices_shape, attribute):
    """The bound s of each index (per component along the last dim for GatherND)."""
    if op == "GatherND":
        k = indices_shape[-1]
        return np.asarray(data_shape[attribute : attribute + k])
    return data_shape[attribute]


def export(fn, data_shape, data_dtype, indices_shape, indices_dtype=np.int32):
    # jax2onnx's double precision is x64 (int64 and uint64 too), and makes float32 float64.
    wide = np.dtype(data_dtype) in map(np.dtype, WIDE) or np.dtype(indices_dtype).itemsize == 8
    specs = [jax.ShapeDtypeStruct(data_shape, data_dtype), jax.ShapeDtypeStruct(indices_shape, indices_dtype)]
    model = jax2onnx.to_onnx(fn, specs, enable_double_precision=wide)
    onnx.checker.check_model(model, full_check=True)
    return model


def run(model, *arrays):
    names = [value.name for value in model.graph.input]
    if any(a.dtype == ml_dtypes.bfloat16 for a in arrays):
        return ReferenceEvaluator(model).run(None, dict(zip(names, arrays)))[0]
    return onnxruntime_session(model).run(None, dict(zip(names, arrays)))[0]


def gather_nodes(model):
    return [node for node in model.graph.node if node.op_type in GATHER_NODES]


def attributes(node):
    values = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    return {k: v.decode() if isinstance(v, bytes) else v for k, v in values.items()}


def index_sets(op, data_shape, indices_shape, attribute, dtype, seed=0):
    sizes = index_sizes(op, data_shape, indices_shape, attribute % len(data_shape))
    if np.dtype(dtype) == np.uint64:  # beyond make_wild_indices' int64 arithmetic
        wild = make_wild_indices(indices_shape, sizes, np.uint32, seed + 2).astype(np.uint64)
        wild.reshape(-1)[-1:] = np.iinfo(np.uint64).max
    else:
        wild = make_wild_indices(indices_shape, sizes, dtype, seed + 2)
    if wild.size and in_bounds(wild, sizes).all():  # one element may draw an in-range edge
        wild.reshape(-1)[0] = np.max(sizes)
    return {
        "in range": make_indices(indices_shape, sizes, dtype, seed, negative=False),
        "negative": make_indices(indices_shape, sizes, dtype, seed + 1, negative=True),
        "out of bounds": wild,
    }


def in_bounds(indices, sizes):
    i = indices.astype(np.int64)
    return (-sizes <= i) & (i < sizes)


def check_export(op, data_shape, indices_shape, attribute, mode, dtype, indices_dtype=np.int32, seed=0):
    fn, ref, name = OPS[op]
    model = export(
        lambda d, i: fn(d, i, attribute, mode=mode), data_shape, dtype, indices_shape, indices_dtype
    )
    (node,) = gather_nodes(model)
    assert node.op_type == op
    assert attributes(node) == {name: attribute % len(data_shape) if op != "GatherND" else attribute}
    # uint64 indices are saturated at 2**63 - 1 (a Min) before their cast to int64.
    around = AROUND[mode] | ({"Min"} if np.dtype(indices_dtype) == np.uint64 else set())
    assert {n.op_type for n in model.graph.node} - {op} <= around, model.graph.node
    data = make_data(data_shape, dtype, seed)
    for kind, indices in index_sets(op, data_shape, indices_shape, attribute, indices_dtype, seed).items():
        if kind == "out of bounds" and REFERENCE_MODE[mode] == "raise":
            if dtype != ml_dtypes.bfloat16:  # onnx.reference does not check bounds
                with pytest.raises(Exception, match=r"(?i)out of|invalid ind"):
                    run(model, data, indices)
            continue
        want = ref(data, indices, attribute, mode=REFERENCE_MODE[mode], fill=default_fill(dtype))
        got = run(model, data, indices)
        assert got.dtype == want.dtype and got.shape == want.shape, (kind, got, want)
        if dtype == ml_dtypes.bfloat16:  # NumPy's NaN test knows no bfloat16
            got, want = got.astype(np.float32), want.astype(np.float32)
        np.testing.assert_array_equal(got, want, err_msg=f"{kind} indices {indices}")
    return model


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("op", list(OPS))
def test_each_dtype_exports_as_the_node(op, dtype, mode):
    case = next(c for c in CASES if c[0] == op)
    check_export(*case, mode, dtype)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}-{c[2]}-{c[3]}")
def test_each_attribute_exports_as_the_node(case, mode):
    check_export(*case, mode, np.float32)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "indices_dtype", [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
)
@pytest.mark.parametrize("op", list(OPS))
def test_index_dtypes_are_cast_only_where_onnx_requires(op, indices_dtype, mode):
    case = next(c for c in CASES if c[0] == op)
    # 64-bit indices need jax2onnx's double precision, which makes float32 inputs float64.
    dtype = np.float64 if np.dtype(indices_dtype).itemsize == 8 else np.float32
    model = check_export(*case, mode, dtype, indices_dtype=indices_dtype)
    # ONNX Gather and GatherElements take int32 and int64 indices; GatherND only int64.
    native = np.dtype(indices_dtype) == np.int64 or (op != "GatherND" and np.dtype(indices_dtype) == np.int32)
    (node,) = gather_nodes(model)
    assert ("Cast" in upstream(model, node.input[1])) != native


def upstream(model, name):
    """The op types of the nodes that ``name`` is computed from."""
    producers = {output: node for node in model.graph.node for output in node.output}
    seen, todo = [], [name]
    while todo:
        node = producers.get(todo.pop())
        if node is not None and node not in seen:
            seen.append(node)
            todo.extend(node.input)
    return {node.op_type for node in seen}


def test_a_fill_value_is_the_where_s_other_branch():
    fn = lambda d, i: jax_gather.gather_nd(d, i, mode="fill", fill_value=-1.5)
    model = export(fn, (3, 4), np.float32, (5, 2))
    data, indices = make_data((3, 4), np.float32, 1), np.array([[0, 1], [3, 0], [-1, -4], [0, 9], [-4, 0]])
    got = run(model, data, indices.astype(np.int32))
    np.testing.assert_array_equal(got, reference.gather_nd(data, indices, mode="fill", fill=-1.5))
    assert got[1] == got[3] == got[4] == -1.5


@st.composite
def any_case(draw):
    op = draw(st.sampled_from(list(OPS)))
    strategy = ops_table.BY_ONNX[op].cases
    index_dtypes = (np.int32, np.int8, np.uint8, np.int16)
    data_shape, indices_shape, attribute, seed, dtype = draw(strategy(index_dtypes=index_dtypes))
    return op, data_shape, indices_shape, attribute, seed, dtype, draw(st.sampled_from(["clip", "fill"]))


@given(any_case())
def test_exported_models_agree_with_the_references(case):
    """Random shapes (empty ones too), axes, batch dims, index dtypes and out-of-range
    indices, in the two modes that define every index."""
    op, data_shape, indices_shape, attribute, seed, dtype, mode = case
    fn, ref, _ = OPS[op]
    note(f"jax_gather.{fn.__name__}(data{data_shape}, indices{indices_shape} {np.dtype(dtype).name}, "
         f"{attribute}, mode={mode!r})")  # fmt: skip
    model = export(lambda d, i: fn(d, i, attribute, mode=mode), data_shape, np.float32, indices_shape, dtype)
    assert len(gather_nodes(model)) <= 1
    sizes = index_sizes(op, data_shape, indices_shape, attribute % len(data_shape))
    data = make_data(data_shape, np.float32, seed)
    indices = make_wild_indices(indices_shape, sizes, dtype, seed)
    want = ref(data, indices, attribute, mode=mode, fill=np.nan)
    np.testing.assert_array_equal(run(model, data, indices), want)


# ---- jit, vmap, grad -------------------------------------------------------------------------


def test_a_jitted_program_exports_the_same_node_and_its_jax_runs_are_unchanged():
    """A function jitted and run before the export, then exported, then run again: its trace
    must not be shared across (JAX caches traces per function)."""
    lookup = jax.jit(lambda d, i: jax_gather.gather(d, i, 1))
    data, bad = jnp.arange(12.0).reshape(3, 4), jnp.array([1, 4])
    assert np.isnan(lookup(data, bad)[:, 1]).all()  # traced "checked" without checkify: the fill result
    model = export(lookup, (3, 4), np.float32, (2,))
    assert [n.op_type for n in model.graph.node] == ["Gather"]
    assert ops.op_program.__name__ == "op_program"  # the library's own, restored
    assert onnx_gather_p.name not in str(jax.make_jaxpr(lookup)(data, bad))
    with pytest.raises(IndexError, match="Gather: indices\\[1\\] = 4"):
        jax_gather.checked(lookup)(data, bad)
    assert np.isnan(lookup(data, bad)[:, 1]).all()


VMAP_CASES = [
    ("Gather", (4, 3), (5,), 1),
    ("Gather", (4, 3, 2), (2, 2), 0),
    ("GatherElements", (3, 4), (2, 6), 1),
    ("GatherND", (3, 4), (5, 2), 0),
    ("GatherND", (2, 3, 4), (2, 5, 1), 1),
]


@pytest.mark.parametrize("in_axes", [(0, 0), (0, None), (None, 0)], ids=str)
@pytest.mark.parametrize("mode", ["checked", "fill"])
@pytest.mark.parametrize("case", VMAP_CASES, ids=lambda c: f"{c[0]}-{c[1]}-{c[2]}-{c[3]}")
def test_a_vmapped_op_exports_as_one_node(case, mode, in_axes):
    op, data_shape, indices_shape, attribute = case
    fn, ref, _ = OPS[op]
    batch = 3
    shapes = [(batch,) + s if axis == 0 else s for s, axis in zip((data_shape, indices_shape), in_axes)]
    batched = jax.vmap(lambda d, i: fn(d, i, attribute, mode=mode), in_axes=in_axes)
    model = export(batched, shapes[0], np.float32, shapes[1])
    (node,) = gather_nodes(model)
    # ONNX Gather has no batch dims: a batch of Gathers over batched data and indices is GatherND.
    assert node.op_type == ("GatherND" if op == "Gather" and in_axes == (0, 0) else op)
    data = make_data(shapes[0], np.float32, 3)
    sizes = index_sizes(op, data_shape, indices_shape, attribute)
    indices = (
        make_indices(shapes[1], sizes, np.int32, 4)
        if mode == "checked"
        else make_wild_indices(shapes[1], sizes, np.int32, 4)
    )
    want = np.stack([
        ref(data[b] if in_axes[0] == 0 else data, indices[b] if in_axes[1] == 0 else indices, attribute,
            mode=REFERENCE_MODE[mode], fill=np.nan)
        for b in range(batch)
    ])  # fmt: skip
    np.testing.assert_array_equal(run(model, data, indices), want)


def positions(op, data_shape, indices, attribute):
    """The flat data position each output element reads (-1 where it is filled), by the
    reference on an iota of data's shape."""
    _, ref, _ = OPS[op]
    iota = np.arange(int(np.prod(data_shape))).reshape(data_shape)
    return ref(iota, indices, attribute, mode="fill", fill=-1)


@pytest.mark.parametrize("mode", ["checked", "clip", "fill"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}-{c[2]}-{c[3]}")
def test_the_gradient_exports_as_a_scatter_add(case, mode):
    """d/d data of sum(w * op(data, indices)): w added at the positions read (ScatterND with
    reduction "add" in ONNX)."""
    op, data_shape, indices_shape, attribute = case
    fn = OPS[op][0]
    out_shape = jax.eval_shape(
        lambda d, i: fn(d, i, attribute),
        jax.ShapeDtypeStruct(data_shape, np.float32),
        jax.ShapeDtypeStruct(indices_shape, np.int32),
    ).shape
    w = make_data(out_shape, np.float32, 5) + 1
    grad = lambda d, i: jax.grad(lambda d: jnp.sum(fn(d, i, attribute, mode=mode) * w))(d)
    model = export(grad, data_shape, np.float32, indices_shape)
    scatters = [n for n in model.graph.node if n.op_type == "ScatterND"]
    assert len(scatters) == 1 and attributes(scatters[0]) == {"reduction": "add"}
    sizes = index_sizes(op, data_shape, indices_shape, attribute % len(data_shape))
    indices = (
        make_indices(indices_shape, sizes, np.int32, 6)
        if mode == "checked"
        else make_wild_indices(indices_shape, sizes, np.int32, 6)
    )
    clipped = reference_clip(op, data_shape, indices, attribute) if mode == "clip" else indices
    read = positions(op, data_shape, clipped, attribute)
    want = np.zeros(int(np.prod(data_shape)), np.float32)
    np.add.at(want, read[read >= 0], np.broadcast_to(w, read.shape)[read >= 0])
    got = run(model, make_data(data_shape, np.float32, 7), indices)
    np.testing.assert_allclose(got, want.reshape(data_shape), rtol=1e-6)


def reference_clip(op, data_shape, indices, attribute):
    """The indices the clip mode reads: normalised, then clamped into [0, s-1]."""
    sizes = index_sizes(op, data_shape, indices.shape, attribute % len(data_shape))
    sizes = np.broadcast_to(sizes, indices.shape)
    i = indices.astype(np.int64)
    return np.clip(np.where(i < 0, i + sizes, i), 0, sizes - 1)


# ---- round trip ------------------------------------------------------------------------------


ROUND_TRIP_CASES = [
    ("Gather", (5, 4), (2, 3), {"axis": 1}),
    ("GatherElements", (3, 4), (3, 2), {"axis": 1}),
    ("GatherND", (2, 3, 4), (2, 5, 1), {"batch_dims": 1}),
    ("GatherND", (3, 4), (2, 2), {"batch_dims": 0}),
]


@pytest.mark.parametrize("case", ROUND_TRIP_CASES, ids=lambda c: c[0] + str(c[3]))
def test_a_model_round_trips_through_to_jax(case):
    """ONNX model → backend.to_jax → jax2onnx: the same node, the same attribute, the same
    outputs in onnxruntime."""
    op, data_shape, indices_shape, attrs = case
    sizes = index_sizes(op, data_shape, indices_shape, next(iter(attrs.values())))
    data = make_data(data_shape, np.float32, 8)
    indices = make_indices(indices_shape, sizes, np.int64, 9)
    original = one_node_model(op, data, indices, **attrs)
    # Without x64 JAX holds int32 indices: the exported model takes those.
    model = export(backend.to_jax(original), data_shape, np.float32, indices_shape, np.int32)
    (node,) = gather_nodes(model)
    assert node.op_type == op and attributes(node) == attrs
    assert {n.op_type for n in model.graph.node} <= {op, "Cast"}
    np.testing.assert_array_equal(run(model, data, indices.astype(np.int32)), run(original, data, indices))


def test_a_chain_with_constant_indices_round_trips():
    """Indices from an initializer are tested on the host when traced (in range here), so the
    exported model gathers with them directly: the same chain of nodes."""
    data = make_data((4, 5), np.float32, 10)
    chain = GraphBuilder()
    source = chain.tensor(data)
    rows = chain.tensor(np.array([3, -1, 0], np.int64), "initializer")
    pairs = chain.tensor(np.array([[0, 4], [2, -2]], np.int64), "constant")
    picked = chain.node("Gather", [source, rows], axis=0)
    original = chain.model([chain.node("GatherND", [picked, pairs])], opset=13)
    fn = backend.to_jax(original)
    specs = [jax.ShapeDtypeStruct(data.shape, data.dtype)]
    model = jax2onnx.to_onnx(fn, specs)
    onnx.checker.check_model(model, full_check=True)
    assert [n.op_type for n in gather_nodes(model)] == ["Gather", "GatherND"]
    np.testing.assert_array_equal(run(model, data), onnxruntime_session(original).run(None, chain.feeds)[0])


# ---- the extra ---------------------------------------------------------------------------------


def test_registering_twice_registers_once():
    from jax2onnx.plugins.plugin_system import PLUGIN_REGISTRY

    plugin = PLUGIN_REGISTRY[onnx_gather_p.name]
    jax_gather.register_jax2onnx()
    assert PLUGIN_REGISTRY[onnx_gather_p.name] is plugin


def test_without_jax2onnx_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "jax2onnx.plugins.plugin_system", None)
    with pytest.raises(ImportError, match=r"pip install 'jax_gather\[export\]'"):
        jax_gather.register_jax2onnx()


SYMBOLIC_CASES = [
    ("Gather", (10, 4), ("B", "T"), 0),
    ("Gather", ("N", 4), ("B",), 0),
    ("GatherElements", ("B", "T"), ("B", 5), 1),
    ("GatherND", ("B", 16, 3), ("B", 5, 1), 1),
]


@pytest.mark.parametrize("mode", ["checked", "clip", "fill"])
@pytest.mark.parametrize("case", SYMBOLIC_CASES, ids=lambda c: f"{c[0]}-{c[1]}-{c[2]}")
def test_symbolic_dims_export_and_run_at_any_size(case, mode):
    """Dims as jax.export symbols become ONNX dim params; the indexed axis may be one."""
    op, data_dims, indices_dims, attribute = case
    fn, ref, _ = OPS[op]
    symbols = dict(zip("BTN", jax.export.symbolic_shape("B, T, N")))
    spec = lambda dims, dtype: jax.ShapeDtypeStruct(tuple(symbols.get(d, d) for d in dims), dtype)
    model = jax2onnx.to_onnx(
        lambda d, i: fn(d, i, attribute, mode=mode),
        [spec(data_dims, np.float32), spec(indices_dims, np.int32)],
    )
    onnx.checker.check_model(model, full_check=True)
    data_input = model.graph.input[0].name  # (shape arithmetic gathers from Shape's output)
    assert [(n.op_type, n.input[0]) for n in gather_nodes(model)].count((op, data_input)) == 1
    for sizes in ({"B": 2, "T": 7, "N": 3}, {"B": 5, "T": 3, "N": 9}):
        data_shape = tuple(sizes.get(d, d) for d in data_dims)
        indices_shape = tuple(sizes.get(d, d) for d in indices_dims)
        data = make_data(data_shape, np.float32, 11)
        bound = index_sizes(op, data_shape, indices_shape, attribute)
        draw = make_indices if mode == "checked" else make_wild_indices
        indices = draw(indices_shape, bound, np.int32, 12)
        want = ref(data, indices, attribute, mode=REFERENCE_MODE[mode], fill=np.nan)
        np.testing.assert_array_equal(run(model, data, indices), want)


@pytest.mark.parametrize("dtype", [np.bool_, np.int16, np.uint16, np.uint64], ids=lambda d: np.dtype(d).name)
def test_onnxruntime_still_has_no_where_for_the_dtypes_fill_casts(dtype):
    """The reason for onnx_export._WHERE_AS: should this fail, onnxruntime's Where takes the
    dtype now, and its entry there (a cast each way around the Where) can go."""
    from onnx import TensorProto, helper

    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    node = helper.make_node("Where", ["c", "x", "y"], ["o"])
    inputs = [helper.make_tensor_value_info("c", TensorProto.BOOL, [2])]
    inputs += [helper.make_tensor_value_info(name, elem, [2]) for name in "xy"]
    graph = helper.make_graph([node], "where", inputs, [helper.make_empty_tensor_value_info("o")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
    model.ir_version = 8
    with pytest.raises(Exception, match="NOT_IMPLEMENTED"):
        onnxruntime_session(model)


@pytest.mark.parametrize("op_type", ["Max", "Min", "Clip"])
def test_onnxruntime_still_has_no_int16_min_max_or_clip(op_type):
    """The reason _node_indices casts narrow indices before clip's and fill's arithmetic."""
    from onnx import TensorProto, helper

    inputs = [helper.make_tensor_value_info(name, TensorProto.INT16, [2]) for name in "xy"]
    node = helper.make_node(op_type, ["x", "y", "y"] if op_type == "Clip" else ["x", "y"], ["o"])
    graph = helper.make_graph([node], "g", inputs, [helper.make_empty_tensor_value_info("o")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    with pytest.raises(Exception, match="NOT_IMPLEMENTED"):
        onnxruntime_session(model)


@pytest.mark.parametrize("in_axes", [(0, 0), (0, None), (None, 0)], ids=str)
@pytest.mark.parametrize("case", VMAP_CASES, ids=lambda c: f"{c[0]}-{c[1]}-{c[2]}-{c[3]}")
def test_the_node_primitive_evaluates_in_jax(case, in_axes):
    """Outside the converter the primitive still runs (as the op's "promise_in_bounds"), batched
    by the same rule that batches its ONNX node, and jitted."""
    from jax_gather.onnx_export import onnx_gather

    op, data_shape, indices_shape, attribute = case
    ref = OPS[op][1]
    batch = 2
    shapes = [(batch,) + s if axis == 0 else s for s, axis in zip((data_shape, indices_shape), in_axes)]
    data = make_data(shapes[0], np.float32, 13)
    indices = make_indices(shapes[1], index_sizes(op, data_shape, indices_shape, attribute), np.int32, 14)
    node = lambda d, i: onnx_gather(d, i, op_name=op, attribute=attribute)
    got = jax.jit(jax.vmap(node, in_axes=in_axes))(data, indices)
    want = np.stack([
        ref(data[b] if in_axes[0] == 0 else data, indices[b] if in_axes[1] == 0 else indices, attribute)
        for b in range(batch)
    ])  # fmt: skip
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("mode", ["clip", "fill"])
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.int8], ids=lambda d: np.dtype(d).name)
def test_a_symbolic_axis_longer_than_narrow_indices_can_count(dtype, mode):
    """The axis size is a value of the program: it must not wrap in the indices' dtype."""
    (n,) = jax.export.symbolic_shape("N")
    model = jax2onnx.to_onnx(
        lambda d, i: jax_gather.gather(d, i, mode=mode),
        [jax.ShapeDtypeStruct((n,), np.float32), jax.ShapeDtypeStruct((4,), dtype)],
    )
    data, indices = np.arange(300, dtype=np.float32), np.array([100, 5, -3, 127], np.int64).astype(dtype)
    want = reference.gather(data, indices, mode=mode, fill=np.nan)
    np.testing.assert_array_equal(run(model, data, indices), want)


@pytest.mark.parametrize("case", SYMBOLIC_CASES, ids=lambda c: f"{c[0]}-{c[1]}-{c[2]}")
def test_the_gradient_exports_with_symbolic_dims(case):
    op, data_dims, indices_dims, attribute = case
    fn = OPS[op][0]
    symbols = dict(zip("BTN", jax.export.symbolic_shape("B, T, N")))
    spec = lambda dims, dtype: jax.ShapeDtypeStruct(tuple(symbols.get(d, d) for d in dims), dtype)
    grad = lambda d, i: jax.grad(lambda d: jnp.sum(fn(d, i, attribute) ** 2))(d)
    model = jax2onnx.to_onnx(grad, [spec(data_dims, np.float32), spec(indices_dims, np.int32)])
    sizes = {"B": 3, "T": 6, "N": 5}
    data_shape = tuple(sizes.get(d, d) for d in data_dims)
    indices_shape = tuple(sizes.get(d, d) for d in indices_dims)
    data = make_data(data_shape, np.float32, 15)
    indices = make_indices(indices_shape, index_sizes(op, data_shape, indices_shape, attribute), np.int32, 16)
    read = positions(op, data_shape, indices, attribute).ravel()
    want = np.zeros(data.size, np.float32)
    np.add.at(want, read, 2 * data.ravel()[read])
    np.testing.assert_allclose(run(model, data, indices), want.reshape(data_shape), rtol=1e-6)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("op", list(OPS))
def test_uint64_indices_beyond_int64_stay_out_of_range(op, mode):
    """2**64 - 1 must not become -1 (a valid index) on the way to ONNX's int64 indices."""
    fn, ref, _ = OPS[op]
    shape = (2,) if op != "GatherND" else (2, 1)
    model = export(lambda d, i: fn(d, i, 0, mode=mode), (5,), np.float64, shape, np.uint64)
    data, indices = np.arange(5.0), np.array([2**64 - 1, 2], np.uint64).reshape(shape)
    if REFERENCE_MODE[mode] == "raise":
        with pytest.raises(Exception, match=r"(?i)out of|invalid ind"):
            run(model, data, indices)
    else:
        want = ref(data, indices.astype(object), 0, mode=REFERENCE_MODE[mode], fill=np.nan)
        np.testing.assert_array_equal(run(model, data, indices), want)


@pytest.mark.parametrize("mode", MODES)
def test_eager_programs_are_not_shared_with_an_export(mode):
    """An eager call remembers its program; an export of the same call on constants must not
    reuse it (it would carry the CPU lowerings' bitcasts into ONNX), and calls after the export
    must run the library's program again."""
    table, ids = np.arange(10.0, dtype=np.float32), np.array([1, -2], np.int32)
    if mode in ("clip", "fill"):
        ids = np.array([1, 12], np.int32)
    call = lambda: jax_gather.gather(table, ids, mode=mode)
    before = np.asarray(call())
    model = jax2onnx.to_onnx(lambda x: x + call(), [jax.ShapeDtypeStruct((2,), np.float32)])
    onnx.checker.check_model(model, full_check=True)
    assert [n.op_type for n in gather_nodes(model)] == ["Gather"]
    np.testing.assert_array_equal(run(model, np.zeros(2, np.float32)), before)
    after = call()
    np.testing.assert_array_equal(after, before)
    plan = jax_gather.gather_plan(table.shape, ids.shape)
    programs = [ops._programs(plan, None)(m) for m in (Mode.IN_RANGE, Mode.PROMISE_IN_BOUNDS, Mode.CLIP)]
    assert not any(onnx_gather_p.name in str(jax.make_jaxpr(p)(table, ids)) for p in programs)


def test_an_export_keeps_every_compiled_program(monkeypatch):
    """The export form is chosen by a value JAX's caches key on: no cache is cleared, and a
    function jitted before an export, using the ops or not, is not traced again after it."""

    def refuse() -> None:
        raise AssertionError("jax.clear_caches called")

    monkeypatch.setattr(jax, "clear_caches", refuse)
    traces = {"ops": 0, "jnp": 0}

    def with_ops(d, i):
        traces["ops"] += 1
        return jnp.tanh(jax_gather.gather(d, i, 1))

    def jnp_only(d):
        traces["jnp"] += 1
        return jnp.linalg.svd(d, compute_uv=False)

    lookup, svd = jax.jit(with_ops), jax.jit(jnp_only)
    data, ids = jnp.arange(12.0).reshape(3, 4), jnp.array([1, -2])
    before = [np.asarray(lookup(data, ids)), np.asarray(svd(data))]
    assert traces == {"ops": 1, "jnp": 1}
    spec = [jax.ShapeDtypeStruct((3, 4), np.float32), jax.ShapeDtypeStruct((2,), np.int32)]
    for model in (lambda d, i: jax_gather.gather(d, i), lambda d, i: d + 1, lookup):
        jax2onnx.to_onnx(model, spec)
    assert traces == {"ops": 2, "jnp": 1}  # the export traced `lookup` once, in its own form
    after = [np.asarray(lookup(data, ids)), np.asarray(svd(data))]
    assert traces == {"ops": 2, "jnp": 1}  # and nothing is traced again after it
    assert lookup._cache_size() == 1 and svd._cache_size() == 1
    for want, got in zip(before, after):
        np.testing.assert_array_equal(got, want)
    assert onnx_gather_p.name not in str(jax.make_jaxpr(lookup)(data, ids))
