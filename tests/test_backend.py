"""jax_gather.backend: the ONNX node test cases, the backend API, invalid and unsupported
models, scoped x64, and to_jax under jit, vmap and grad."""

import re
import subprocess
import sys
import unittest

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import jax_gather
from jax_gather import _cpu_client, _onnx_graph, _x64, backend
from tests import reference
from tests.compat import enable_x64
from tests.onnx_models import (
    IR_VERSION,
    GraphBuilder,
    node_cases_of_these_ops_only,
    onnx_node_case,
    onnx_node_cases,
    onnxruntime_session,
)
from tests.programs import counting_compiles, stdout_with_cpu_devices

NODE_CASES = onnx_node_cases()


def _arrays(tensors):
    return [t if isinstance(t, np.ndarray) else numpy_helper.to_array(t) for t in tensors]


def _assert_outputs(outputs, expected):
    assert isinstance(outputs, list) and len(outputs) == len(expected)
    for out, want in zip(outputs, expected):
        assert isinstance(out, np.ndarray)
        assert out.dtype == want.dtype and out.shape == want.shape
        np.testing.assert_array_equal(out, want)


def test_node_cases_were_found():
    assert len(NODE_CASES) >= 10
    assert {c.model.graph.node[0].op_type for c in NODE_CASES} == {"Gather", "GatherElements", "GatherND"}


@pytest.mark.parametrize("case", NODE_CASES, ids=[c.name for c in NODE_CASES])
def test_onnx_node_case_through_prepare(case):
    assert backend.is_compatible(case.model)
    rep = backend.prepare(case.model)
    for inputs, outputs in case.data_sets:
        _assert_outputs(rep.run(_arrays(inputs)), _arrays(outputs))


@pytest.mark.parametrize("case", NODE_CASES, ids=[c.name for c in NODE_CASES])
def test_onnx_node_case_through_run_node(case):
    node = case.model.graph.node[0]
    opset = case.model.opset_import[0].version
    for inputs, outputs in case.data_sets:
        _assert_outputs(backend.run_node(node, _arrays(inputs), opset_version=opset), _arrays(outputs))
        # And at the newest opset the installed onnx knows (these ops have not changed since 13).
        _assert_outputs(backend.run_node(node, _arrays(inputs)), _arrays(outputs))


def _onnx_runner_tests():
    """The ONNX backend test runner's own tests for these ops, on CPU, with this backend."""
    import onnx.backend.test

    with node_cases_of_these_ops_only():
        runner = onnx.backend.test.BackendTest(backend, __name__)
    wanted = re.compile(r"^test_gather(_elements|nd)?_.*_cpu$")
    loader = unittest.defaultTestLoader
    return [
        (cls, name)
        for cls in runner.test_cases.values()
        for name in loader.getTestCaseNames(cls)
        if wanted.match(name)
    ]


RUNNER_TESTS = _onnx_runner_tests()


def test_the_onnx_runner_has_a_test_per_node_case():
    assert len(RUNNER_TESTS) == len(NODE_CASES)


@pytest.mark.parametrize("cls, name", RUNNER_TESTS, ids=[name for _, name in RUNNER_TESTS])
def test_onnx_backend_test_runner(cls, name):
    """onnx.backend.test.BackendTest loads the model and data files and compares the outputs."""
    result = unittest.TestResult()
    cls(name).run(result)
    assert result.testsRun == 1 and not result.skipped, result.skipped
    assert result.wasSuccessful(), result.errors + result.failures


def _gather_model(
    op_type="Gather", data_type=TensorProto.FLOAT, index_type=TensorProto.INT64, opset=13, name="g", **attrs
):
    node = helper.make_node(op_type, ["data", "indices"], ["out"], name=name, **attrs)
    graph = helper.make_graph(
        [node],
        "one",
        [
            helper.make_tensor_value_info("data", data_type, None),
            helper.make_tensor_value_info("indices", index_type, None),
        ],
        [helper.make_tensor_value_info("out", data_type, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _with(model, mutate):
    model = onnx.ModelProto.FromString(model.SerializeToString())
    mutate(model)
    return model


def _add_node(model, node):
    model.graph.node.append(node)


# (case, model, exception, message); onnxruntime refuses each of these models as well
INVALID = [
    (
        "GatherND-11 with batch_dims",
        _gather_model("GatherND", opset=11, batch_dims=1),
        ValueError,
        "GatherND node 'g': attributes must be those of GatherND-11 (none), got batch_dims=1",
    ),
    (
        "GatherND-13 int32 indices",
        _gather_model("GatherND", index_type=TensorProto.INT32),
        TypeError,
        "GatherND node 'g': indices must be tensor(int64) (GatherND-13), got tensor(int32) ('indices')",
    ),
    (
        "GatherND-11 int32 indices",
        _gather_model("GatherND", index_type=TensorProto.INT32, opset=11),
        TypeError,
        "GatherND node 'g': indices must be tensor(int64) (GatherND-11), got tensor(int32)",
    ),
    (
        "GatherND-12 int32 indices",
        _gather_model("GatherND", index_type=TensorProto.INT32, opset=12),
        TypeError,
        "GatherND node 'g': indices must be tensor(int64) (GatherND-12), got tensor(int32)",
    ),
    (
        "Gather float indices",
        _gather_model(index_type=TensorProto.FLOAT),
        TypeError,
        "Gather node 'g': indices must be one of tensor(int32), tensor(int64) (Gather-13), got tensor(float)",
    ),
    (
        "Gather-1 int16 indices",
        _gather_model(index_type=TensorProto.INT16, opset=1),
        TypeError,
        "Gather node 'g': indices must be one of tensor(int32), tensor(int64) (Gather-1), got tensor(int16)",
    ),
    (
        "GatherElements uint8 indices",
        _gather_model("GatherElements", index_type=TensorProto.UINT8),
        TypeError,
        "GatherElements node 'g': indices must be one of tensor(int32), tensor(int64) (GatherElements-13), "
        "got tensor(uint8)",
    ),
    (
        "bfloat16 data before opset 13",
        _gather_model(data_type=TensorProto.BFLOAT16, opset=12),
        TypeError,
        "Gather node 'g': data must be one of tensor(uint8), ",
    ),
    (
        "unknown attribute",
        _gather_model(foo=1),
        ValueError,
        "Gather node 'g': attributes must be those of Gather-13 (axis), got foo=1",
    ),
    (
        "float axis",
        _gather_model(axis=1.0),
        TypeError,
        "Gather node 'g': attribute axis must be of type INT, got FLOAT",
    ),
    (
        "GatherElements before opset 11",
        _gather_model("GatherElements", opset=10),
        ValueError,
        "GatherElements node 'g': the op must be defined at the model's opset, got opset 10, which has no "
        "GatherElements",
    ),
    (
        "three inputs",
        _with(_gather_model(), lambda m: m.graph.node[0].input.append("data")),
        ValueError,
        "Gather node 'g': inputs must be ['data', 'indices'], got ['data', 'indices', 'data']",
    ),
    (
        "undefined input",
        _with(_gather_model(), lambda m: m.graph.node[0].input.__setitem__(1, "nowhere")),
        ValueError,
        "Gather node 'g': input indices must be a graph input, an initializer or an earlier node's output, "
        "got 'nowhere'",
    ),
    (
        "no default-domain opset",
        _with(_gather_model(), lambda m: setattr(m.opset_import[0], "domain", "ai.onnx.ml")),
        ValueError,
        "ONNX model: opset_import must include the default ONNX domain ('' or 'ai.onnx'), got "
        "[('ai.onnx.ml', 13)]",
    ),
    (
        "output declared with another type",
        _with(
            _gather_model(),
            lambda m: m.graph.output[0].type.tensor_type.__setattr__("elem_type", TensorProto.INT64),
        ),
        TypeError,
        "ONNX model: output 'out' is declared tensor(int64), got a value of type tensor(float)",
    ),
    (
        "undeclared input type",
        _with(_gather_model(), lambda m: m.graph.input[0].ClearField("type")),
        ValueError,
        "ONNX model: input 'data' must declare its type, got none",
    ),
]


@pytest.mark.parametrize("model, exc, message", [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_invalid_models_are_refused_clearly(model, exc, message):
    with pytest.raises(exc, match=re.escape(message)):
        backend.prepare(model)
    assert not backend.is_compatible(model)
    with pytest.raises(Exception):  # noqa: B017 - onnxruntime refuses each of these models, each in its own words
        onnxruntime_session(model)


def test_constants_onnx_forbids_are_refused():
    """onnxruntime runs both of these: a Constant with two values (it takes one of them) and a
    Constant-1 (opsets 1-8) of int64 (Constant-1 holds float16, float and double only)."""
    node = helper.make_node("Constant", [], ["c"], value_int=1, value_float=1.0)
    message = (
        "Constant node #0: attributes must be exactly one value attribute, got ['value_float', 'value_int']"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        backend.run_node(node, [])
    node = helper.make_node("Constant", [], ["c"], value=helper.make_tensor("v", TensorProto.INT64, [], [1]))
    message = (
        "Constant node #0: output must be one of tensor(float16), tensor(float), tensor(double) "
        "(Constant-1), got tensor(int64) ('c')"
    )
    with pytest.raises(TypeError, match=re.escape(message)):
        backend.run_node(node, [], opset_version=8)
    _assert_outputs(backend.run_node(node, [], opset_version=9), [np.array(1)])


def test_unsupported_ops_are_named_with_their_nodes():
    model = _gather_model()
    model.graph.node.extend(
        [
            helper.make_node("Neg", ["out"], ["y"]),
            helper.make_node("Add", ["y", "y"], ["z"], name="plus"),
            helper.make_node("Gather", ["z", "indices"], ["w"], domain="com.microsoft"),
        ]
    )
    message = (
        "ONNX model: nodes must be one of Constant, Gather, GatherElements, GatherND, Identity "
        "(the ops jax_gather.backend runs), got Neg (node #1), Add (node 'plus'), "
        "com.microsoft.Gather (node #3)"
    )
    assert not backend.is_compatible(model)
    with pytest.raises(NotImplementedError, match=re.escape(message)):
        backend.prepare(model)
    with pytest.raises(NotImplementedError, match="got Add"):
        backend.run_node(helper.make_node("Add", ["a", "b"], ["c"]), [np.ones(2), np.ones(2)])


def test_an_onnx_model_with_other_ops_is_not_compatible():
    case = onnx_node_case("negativeloglikelihoodloss", "test_nllloss_NC_expanded")
    assert not backend.is_compatible(case.model)
    with pytest.raises(NotImplementedError, match=r"got Unsqueeze \(node #3\), Neg \(node #5\)"):
        backend.prepare(case.model)


def test_non_tensor_inputs_and_sparse_constants_are_not_implemented():
    model = _gather_model()
    seq = helper.make_tensor_sequence_value_info("data", TensorProto.FLOAT, None)
    model.graph.input[0].CopyFrom(seq)
    with pytest.raises(
        NotImplementedError, match=re.escape("ONNX model: input 'data' must be a tensor, got a sequence_type")
    ):
        backend.prepare(model)
    sparse = helper.make_sparse_tensor(
        helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0]),
        helper.make_tensor("i", TensorProto.INT64, [1], [0]),
        [3],
    )
    node = helper.make_node("Constant", [], ["c"], name="k", sparse_value=sparse)
    with pytest.raises(
        NotImplementedError, match=re.escape("Constant node 'k': the value must be dense, got sparse_value")
    ):
        backend.run_node(node, [])


def test_out_of_bounds_raises_index_error_naming_the_node():
    rep = backend.prepare(_gather_model(name="lookup"))
    data = np.arange(6, dtype=np.float32).reshape(3, 2)
    message = (
        "Gather node 'lookup': indices[1] = 3 is out of bounds for axis 0 of size 3 (valid range [-3, 2])"
    )
    with pytest.raises(IndexError, match=re.escape(message)):
        rep.run([data, np.array([0, 3])])
    # An unnamed node is named by its position in the graph.
    node = helper.make_node("GatherElements", ["d", "i"], ["o"], axis=1)
    with pytest.raises(
        IndexError, match=re.escape("GatherElements node #0: indices[0, 1] = -3 is out of bounds")
    ):
        backend.run_node(node, [data, np.array([[0, -3]])])
    # A bad shape at run time is the op's ValueError, also naming the node.
    with pytest.raises(
        ValueError, match=re.escape("Gather node 'lookup': axis must be in [-1, 0] for data of rank 1")
    ):
        backend.prepare(_gather_model(name="lookup", axis=1)).run([np.ones(3, np.float32), np.array([0])])


def test_index_error_in_a_later_node_of_a_chain():
    b = GraphBuilder()
    data = b.tensor(np.arange(12, dtype=np.float32).reshape(3, 4), "initializer")
    ids = b.tensor(np.array([[2, 0]], np.int64), "input")
    rows = b.node("GatherND", [data, b.tensor(np.array([[1], [2]], np.int64), "constant")])
    out = b.node("GatherElements", [rows, ids], axis=1)
    rep = backend.prepare(b.model([out], 13))
    _assert_outputs(rep.run([np.array([[3, -4]], np.int64)]), [np.array([[7.0, 4.0]], np.float32)])
    with pytest.raises(
        IndexError, match=re.escape(f"GatherElements node 'n_{out}': indices[0, 0] = 4 is out of bounds")
    ):
        rep.run([np.array([[4, 0]], np.int64)])


def _computed_indices_model():
    """``out = GatherElements(data, Gather(table, picks), axis=1)``: the second node's indices
    are computed by the first, from a table of int64 columns."""
    b = GraphBuilder()
    data = b.tensor(np.arange(12, dtype=np.float32).reshape(3, 4), "input", free_dims=True)
    table = b.tensor(np.array([[0, 3, -1], [9, 1, 2]], np.int64), "initializer")
    picks = b.tensor(np.array([0, 0, 0], np.int64), "input", free_dims=True)
    out = b.node("GatherElements", [data, b.node("Gather", [table, picks])], axis=1)
    return b.model([out], 13), out


def test_run_is_one_program_per_shape_and_never_node_by_node(monkeypatch):
    model, _ = _computed_indices_model()
    rep = backend.prepare(model)
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    expected = [np.array([[0, 3, 3], [4, 7, 7], [8, 11, 11]], np.float32)]
    _assert_outputs(rep.run([data, np.array([0, 0, -2])]), expected)

    def node_by_node(*args):
        raise AssertionError("evaluated node by node")

    monkeypatch.setattr(_onnx_graph, "evaluate", node_by_node)
    with counting_compiles() as count:
        _assert_outputs(rep.run([data, np.array([0, 0, -2])]), expected)
        _assert_outputs(rep.run([data + 1, np.array([-2, 0, 0])]), [expected[0] + 1])
    assert count[0] == 0
    with counting_compiles() as count:  # another shape: compiled once more
        out = rep.run([np.ones((5, 4), np.float32), np.array([0, 0, 0])])
    assert count[0] >= 1 and out[0].tolist() == [[1.0] * 3] * 3


def test_indices_a_node_computes_are_checked_in_the_program():
    model, out = _computed_indices_model()
    rep = backend.prepare(model)
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    # Row 1 of the table holds column 9: out of bounds for data's axis 1, found in the program.
    with pytest.raises(
        IndexError,
        match=re.escape(
            f"GatherElements node 'n_{out}': indices[0, 0] = 9 is out of bounds for axis 1 of size 4"
        ),
    ):
        rep.run([data, np.array([1, 0, 0])])
    rows = np.array([[0, 3, 3], [4, 7, 7], [8, 11, 11]], np.float32)
    _assert_outputs(rep.run([data, np.array([0, 0, 0])]), [rows])


@pytest.mark.parametrize("size", [5, 5000])  # normalised on the host, and in the program
def test_negative_index_inputs_of_every_size_match_onnxruntime(size):
    b = GraphBuilder()
    rng = np.random.default_rng(size)
    table = b.tensor(rng.standard_normal((50, 6)).astype(np.float32), "input")
    ids = b.tensor(rng.integers(-50, 50, size), "input")
    cols = b.tensor(rng.integers(-6, 6, (size, 6)), "input")
    rows = b.node("Identity", [b.node("Gather", [table, b.node("Identity", [ids])])])
    model = b.model([b.node("GatherElements", [rows, cols], axis=1), rows], 13)
    feeds = b.feeds
    expected = onnxruntime_session(model).run(None, feeds)
    _assert_outputs(backend.prepare(model).run(feeds), expected)
    with pytest.raises(IndexError, match=re.escape("indices[3] = 50 is out of bounds for axis 0 of size 50")):
        backend.prepare(model).run({**feeds, ids: np.where(np.arange(size) == 3, 50, feeds[ids])})


def test_a_name_assigned_twice_is_refused():
    # An ONNX graph assigns each name once; a node that reuses one would make its readers
    # ambiguous (the node-by-node and the one-program runs would read different values).
    nodes = [helper.make_node("Gather", ["table", "i"], ["i"], name="again")]
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("table", TensorProto.INT64, [2]),
            helper.make_tensor_value_info("i", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("i", TensorProto.INT64, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    message = "Gather node 'again': its output must be a new name (an ONNX graph assigns each name once)"
    with pytest.raises(ValueError, match=re.escape(message)):
        backend.prepare(model)


def test_computed_indices_into_an_empty_axis_name_the_node():
    b = GraphBuilder()
    empty = b.tensor(np.zeros((0, 3), np.float32), "input")
    picked = b.node(
        "Gather", [b.tensor(np.array([0], np.int64), "initializer"), b.tensor(np.array([0]), "input")]
    )
    out = b.node("Gather", [empty, picked])
    with pytest.raises(
        IndexError, match=re.escape(f"Gather node 'n_{out}': indices[0] = 0 is out of bounds")
    ):
        backend.prepare(b.model([out], 13)).run(b.feeds)


def test_index_inputs_of_either_kind_compile_no_more_programs():
    b = GraphBuilder()
    table = b.tensor(np.arange(12, dtype=np.float32).reshape(4, 3), "input")
    ids = b.tensor(np.array([0, 1]), "input")
    rep = backend.prepare(b.model([b.node("Gather", [table, ids])], 13))
    feeds = [np.ones((4, 3), np.float32), np.array([0, 3])]
    rep.run(feeds)
    rep.run([feeds[0], np.array([-4, 3])])  # normalised on the host: the same program
    with counting_compiles() as count:
        for ids_ in ([1, 2], [-1, 0], [3, -4]):
            rep.run([feeds[0], np.array(ids_)])
    assert count[0] == 0


@pytest.mark.slow
def test_a_model_prepared_for_a_device_runs_there():
    # The model is built here: importing this module would cost the child seconds.
    code = """
import numpy as np
from onnx import TensorProto, helper
from jax_gather import _backend_program, backend
node = helper.make_node("Gather", ["data", "indices"], ["out"])
value = lambda name, type_: helper.make_tensor_value_info(name, type_, None)
graph = helper.make_graph(
    [node], "one", [value("data", TensorProto.FLOAT), value("indices", TensorProto.INT64)],
    [value("out", TensorProto.FLOAT)])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
seen = []
run = _backend_program.Program.run
def spy(self, feeds, *rest):
    outputs = run(self, feeds, *rest)
    seen.append(sorted(d.id for d in outputs[0].devices()))
    return outputs
_backend_program.Program.run = spy
rep = backend.prepare(model, "CPU:1")  # no constants: every argument is a feed
print(rep.run([np.arange(6, dtype=np.float32).reshape(3, 2), np.array([2, -3])])[0].tolist(), seen)
"""
    assert stdout_with_cpu_devices(code, devices=2).strip() == "[[4.0, 5.0], [0.0, 1.0]] [[1]]"


def test_run_accepts_lists_tuples_dicts_and_one_array():
    model = _gather_model()
    data, ids = np.arange(4, dtype=np.float32).reshape(2, 2), np.array([1, -2])
    expected = [data[[1, 0]]]
    rep = backend.prepare(model)
    assert rep.input_names == ("data", "indices") and rep.output_names == ("out",)
    _assert_outputs(rep.run([data, ids]), expected)
    _assert_outputs(rep.run((data, ids)), expected)
    _assert_outputs(rep.run({"indices": ids, "data": data}), expected)
    _assert_outputs(backend.run_model(model, [data, ids]), expected)
    b = GraphBuilder()
    out = b.node("Gather", [b.tensor(data, "initializer"), b.tensor(ids, "input")])
    _assert_outputs(backend.prepare(b.model([out], 13)).run(ids), expected)


def test_bad_feeds():
    rep = backend.prepare(_gather_model())
    data = np.ones((2, 2), np.float32)
    with pytest.raises(
        ValueError, match=re.escape("ONNX model: inputs must be 2 arrays, for ['data', 'indices'], got 1")
    ):
        rep.run([data])
    with pytest.raises(
        ValueError,
        match=re.escape("ONNX model: inputs must be named ['data', 'indices'], got ['data', 'ids']"),
    ):
        rep.run({"data": data, "ids": np.array([0])})
    with pytest.raises(
        TypeError,
        match=re.escape("ONNX model: input 'indices' must be tensor(int64) (NumPy int64), got int32"),
    ):
        rep.run([data, np.array([0], np.int32)])
    with pytest.raises(
        TypeError, match=re.escape("ONNX model: input 'data' must be tensor(float) (NumPy float32), got <U1")
    ):
        rep.run([np.array(["a"]), np.array([0])])
    with pytest.raises(
        TypeError, match=re.escape("jax_gather.backend.run: takes no backend options, got ['logid']")
    ):
        rep.run([data, np.array([0])], logid="x")
    with pytest.raises(TypeError, match=re.escape("jax_gather.backend.prepare: takes no backend options")):
        backend.prepare(_gather_model(), providers=["CUDAExecutionProvider"])
    with pytest.raises(
        TypeError,
        match=re.escape(
            "ONNX model: model must be an onnx.ModelProto, its serialized bytes or a path, got dict"
        ),
    ):
        backend.prepare({})


def test_models_as_bytes_and_paths(tmp_path):
    model = _gather_model("GatherElements", axis=-1)
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    data, ids = np.arange(4, dtype=np.float32).reshape(2, 2), np.array([[1, 0], [0, -1]])
    expected = [np.array([[1, 0], [2, 3]], np.float32)]
    for form in (model.SerializeToString(), str(path), path):
        _assert_outputs(backend.prepare(form).run([data, ids]), expected)


def test_devices():
    platforms = {d.platform for d in jax.devices()} | {"cpu"}
    assert backend.supports_device("CPU") and backend.supports_device("cpu:0")
    assert backend.supports_device("CUDA") == ("gpu" in platforms or "cuda" in platforms)
    assert not backend.supports_device("TPU") and not backend.supports_device("CUDA:x")
    assert not backend.supports_device("CPU:99")
    assert not backend.is_compatible(_gather_model(), device="TPU")
    with pytest.raises(
        ValueError,
        match=re.escape("jax_gather.backend: device must be 'CPU', 'CUDA' or 'CUDA:<n>', got 'TPU'"),
    ):
        backend.prepare(_gather_model(), "TPU")
    with pytest.raises(
        RuntimeError, match=re.escape("jax_gather.backend: device 'CPU:99' is not one JAX has here")
    ):
        backend.prepare(_gather_model(), "CPU:99")


@pytest.mark.parametrize("x64", [False, True])
def test_exact_dtypes_in_a_scoped_x64(x64):
    b = GraphBuilder()
    outs = []
    for dtype in (np.int64, np.uint64, np.float64, np.complex128):
        data = b.tensor(
            np.arange(6).astype(dtype).reshape(3, 2) * (2**40 if dtype != np.complex128 else 1), "initializer"
        )
        outs.append(b.node("Gather", [data, b.tensor(np.array([2, -3]), "input")]))
    rep = backend.prepare(b.model(outs, 13))
    with enable_x64(x64):
        results = rep.run([np.array([2, -3])] * 4)
        assert jax.config.jax_enable_x64 == x64  # left as it was
        with pytest.raises(IndexError):
            rep.run([np.array([2, 3])] * 4)
        assert jax.config.jax_enable_x64 == x64  # also after an error
        assert jnp.asarray(np.int64(1)).dtype == (np.int64 if x64 else np.int32)
    for out, dtype in zip(results, (np.int64, np.uint64, np.float64, np.complex128)):
        assert out.dtype == dtype
        scale = 2**40 if dtype != np.complex128 else 1
        np.testing.assert_array_equal(out, (np.array([[4, 5], [0, 1]]) * scale).astype(dtype))


@pytest.mark.parametrize("swap", [True, False])
@pytest.mark.parametrize("x64", [False, True])
def test_a_run_turns_x64_on_and_sets_its_device_for_itself_alone(monkeypatch, x64, swap):
    # The remembered run sets both by their thread-local values (call_with_x64_on); where JAX's
    # states cannot be swapped so, by their context managers. Either way, for the call alone.
    if not swap:
        monkeypatch.setattr(_x64, "_SWAP", False)
    device = jax.devices("cpu")[0]
    seen = []

    def look(fail):
        seen.append((jax.config.jax_enable_x64, jax.config.jax_default_device))
        if fail:
            raise IndexError("out")
        return jnp.asarray(np.int64(2**40)).dtype

    with enable_x64(x64):
        before = jax.config.jax_default_device
        assert _x64.call_with_x64_on(device, look, False) == np.int64
        with pytest.raises(IndexError, match="out"):
            _x64.call_with_x64_on(device, look, True)
        assert (jax.config.jax_enable_x64, jax.config.jax_default_device) == (x64, before)
        rep = backend.prepare(_gather_model())
        feeds = [np.arange(6, dtype=np.float32).reshape(3, 2), np.array([2, 0], np.int64)]
        rep.run(feeds)  # the first run of a signature: under the context managers
        with counting_compiles() as count:  # remembered runs: the same program, from JAX's cache
            for _ in range(2):
                np.testing.assert_array_equal(rep.run(feeds)[0], [[4, 5], [0, 1]])
                assert (jax.config.jax_enable_x64, jax.config.jax_default_device) == (x64, before)
        assert count[0] == 0
    assert seen == [(True, device)] * 2


def test_importing_jax_gather_does_not_import_onnx():
    code = (
        "import sys, numpy as np, jax_gather\n"
        "jax_gather.gather(np.array(['a', 'b']), [1])\n"
        "jax_gather.gather_nd(np.ones((2, 2)), [[1, 0]])\n"
        "leaked = sorted(m for m in sys.modules if m.split('.')[0] in ('onnx', 'onnxruntime'))\n"
        "assert not leaked, leaked\n"
        "import jax_gather.backend\n"
        "assert 'onnx' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)


def test_outputs_are_copies_and_inputs_are_not_mutated():
    b = GraphBuilder()
    table = b.tensor(np.arange(3, dtype=np.float32), "initializer")
    ids = b.tensor(np.array([0], np.int64), "input", free_dims=True)
    rep = backend.prepare(b.model([b.node("Identity", [table]), b.node("Identity", [ids])], 13))
    feed = np.array([2, 1], np.int64)
    first, passed = rep.run([feed])
    first[:] = -1
    passed[:] = -1
    np.testing.assert_array_equal(rep.run([feed])[0], [0, 1, 2])
    np.testing.assert_array_equal(feed, [2, 1])


def test_constants_of_every_attribute_kind():
    b = GraphBuilder()
    outs = []
    for attrs in (
        {"value_int": 7},
        {"value_ints": [1, -2]},
        {"value_float": 1.5},
        {"value_floats": [0.5]},
        {"value_string": "é"},
        {"value_strings": ["a", "bc"]},
        {"value": helper.make_tensor("v", TensorProto.BFLOAT16, [2], [1.5, -2.0])},
    ):
        name = f"c{len(outs)}"
        b.nodes.append(helper.make_node("Constant", [], [name], **attrs))
        outs.append(name)
    outs = backend.prepare(b.model(outs, 13)).run([])
    expected = [
        np.array(7),
        np.array([1, -2]),
        np.array(1.5, np.float32),
        np.array([0.5], np.float32),
        np.array("é", object),
        np.array(["a", "bc"], object),
        np.array([1.5, -2.0], jnp.bfloat16),
    ]
    _assert_outputs(outs, expected)


def test_initializers_listed_as_inputs_can_be_overridden():
    b = GraphBuilder()
    table = b.tensor(np.array([10, 20, 30], np.int64), "initializer")
    b.inputs.append(helper.make_tensor_value_info(table, TensorProto.INT64, [3]))
    ids = b.tensor(np.array([0]), "input")
    rep = backend.prepare(b.model([b.node("Gather", [table, ids])], 13))
    assert rep.input_names == (ids,)
    _assert_outputs(rep.run([np.array([-1])]), [np.array([30])])
    _assert_outputs(rep.run({ids: np.array([-1]), table: np.array([1, 2, 3])}), [np.array([3])])


def _chain_model():
    """data (input) -> Gather(axis=1, initializer int32) -> GatherElements(axis=0, Constant) -> Identity,
    plus GatherND(batch_dims=1) on data with an index input."""
    b = GraphBuilder()
    data = b.tensor(np.zeros((3, 4), np.float32), "input")
    ids = b.tensor(np.zeros((3, 1), np.int64), "input")
    cols = b.node("Gather", [data, b.tensor(np.array([3, -4, 1], np.int32), "initializer")], axis=1)
    picked = b.node("GatherElements", [cols, b.tensor(np.array([[2, -1, 0]], np.int64), "constant")], axis=0)
    same = b.node("Identity", [picked])
    rows = b.node("GatherND", [data, ids], batch_dims=1)
    return b.model([same, rows], 13)


def _chain_reference(data, ids):
    cols = reference.gather(data, np.array([3, -4, 1]), 1)
    picked = reference.gather_elements(cols, np.array([[2, -1, 0]]), 0)
    return picked, reference.gather_nd(data, ids, 1)


DATA = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
IDS = np.array([[3], [-4], [0]], np.int64)


def test_to_jax_is_pure_and_matches_run():
    fn = backend.to_jax(_chain_model())
    expected = _chain_reference(DATA, IDS)
    for f in (fn, jax.jit(fn)):
        out = f(DATA, IDS)
        assert isinstance(out, tuple) and len(out) == 2
        for o, e in zip(out, expected):
            assert isinstance(o, jax.Array)
            np.testing.assert_array_equal(np.asarray(o), e)
    _assert_outputs(backend.prepare(_chain_model()).run([DATA, IDS]), list(expected))
    with pytest.raises(
        TypeError, match=re.escape("ONNX model: the function takes 2 inputs ['t0', 't1'], got 1")
    ):
        fn(DATA)


def test_to_jax_vmap_and_grad():
    fn = backend.to_jax(_chain_model())
    batch = np.stack([DATA, DATA + 1, -DATA])
    ids = np.stack([IDS, IDS[::-1], -IDS - 1])
    out = jax.vmap(fn)(batch, ids)
    for k in range(3):
        for o, e in zip(out, _chain_reference(batch[k], ids[k])):
            np.testing.assert_array_equal(np.asarray(o[k]), e)
    loss = lambda d: sum(jnp.sum(jnp.sin(o)) for o in fn(d, IDS))
    check_grads(loss, (DATA,), order=2, modes=["fwd", "rev"])
    # The gradient is the scatter-add of the cotangent onto the positions read.
    grad = jax.grad(lambda d: sum(jnp.sum(o) for o in fn(d, IDS)))(DATA)
    counts = np.zeros((3, 4), np.float32)
    np.add.at(counts, (np.array([2, 2, 0]), np.array([3, 0, 1])), 1)  # GatherElements after Gather
    np.add.at(counts, (np.arange(3), np.array([3, 0, 0])), 1)  # GatherND rows
    np.testing.assert_array_equal(np.asarray(grad), counts)


def test_to_jax_out_of_bounds_under_jit():
    fn = backend.to_jax(_chain_model())
    bad = np.array([[3], [4], [0]], np.int64)
    with pytest.raises(
        IndexError, match=re.escape("GatherND node 'n_t7': indices[1, 0] = 4 is out of bounds")
    ):
        fn(DATA, bad)  # concrete: the eager error
    filled = jax.jit(fn)(DATA, bad)[1]  # traced: the "fill" result
    assert np.isnan(np.asarray(filled)[1]) and np.asarray(filled)[0] == DATA[0, 3]
    with pytest.raises(
        IndexError, match=re.escape("GatherND: indices[1, 0] = 4 is out of bounds for axis 1 of size 4")
    ):
        jax_gather.checked(jax.jit(fn))(DATA, bad)


def test_to_jax_with_strings_runs_eagerly_only():
    b = GraphBuilder()
    words = b.tensor(np.array(["zero", "one", "two"], object), "initializer")
    ids = b.tensor(np.array([0], np.int64), "input")
    fn = backend.to_jax(b.model([b.node("Gather", [words, ids])], 13))
    (out,) = fn(np.array([2, -3]))
    assert out.dtype == object and out.tolist() == ["two", "zero"]
    with pytest.raises(TypeError, match="JAX has no string dtype"):
        jax.jit(fn)(np.array([2, -3]))
    # A string graph input cannot even be passed to jax.jit: JAX refuses the argument itself.
    inputs = GraphBuilder()
    text = inputs.tensor(np.array(["a", "b"], object), "input")
    at = inputs.tensor(np.array([0], np.int64), "input")
    by_input = backend.to_jax(inputs.model([inputs.node("Gather", [text, at])], 13))
    assert by_input(np.array(["a", "b"], object), np.array([1]))[0].tolist() == ["b"]
    with pytest.raises(TypeError):
        jax.jit(by_input)(np.array(["a", "b"], object), np.array([1]))


def _fixed_shape_model():
    node = helper.make_node("Gather", ["table", "ids"], ["rows"], axis=0)
    graph = helper.make_graph(
        [node],
        "lookup",
        [
            helper.make_tensor_value_info("table", TensorProto.FLOAT, [3, 2]),
            helper.make_tensor_value_info("ids", TensorProto.INT64, ["n"]),
        ],
        [helper.make_tensor_value_info("rows", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = IR_VERSION  # onnxruntime's session reads it too: one every release reads
    return model


@pytest.mark.parametrize(
    "table, message",
    [
        (
            np.zeros((4, 2), np.float32),
            "input 'table' must have size 3 in dim 0 (declared shape [3, 2]), got shape (4, 2)",
        ),
        (
            np.zeros((3, 2, 1), np.float32),
            "input 'table' must have rank 2 (declared shape [3, 2]), got shape (3, 2, 1)",
        ),
        (np.zeros(6, np.float32), "input 'table' must have rank 2 (declared shape [3, 2]), got shape (6,)"),
    ],
)
def test_inputs_that_break_their_declared_shape_are_refused_as_onnxruntime_refuses_them(table, message):
    model = _fixed_shape_model()
    ids = np.array([0, 2])
    with pytest.raises(ValueError, match="^" + re.escape(f"ONNX model: {message}") + "$"):
        backend.prepare(model).run([table, ids])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with pytest.raises(Exception, match=r"invalid dimensions|Invalid rank"):
        session.run(None, {"table": table, "ids": ids})
    # A named dim (and the indices' any length) is free, as in onnxruntime.
    (out,) = backend.prepare(model).run(
        [np.arange(6, dtype=np.float32).reshape(3, 2), np.array([2, 0, 1, -1])]
    )
    np.testing.assert_array_equal(out, [[4, 5], [0, 1], [2, 3], [4, 5]])


def test_a_graph_that_lists_an_input_twice_is_refused():
    model = _fixed_shape_model()
    model.graph.input.append(helper.make_tensor_value_info("ids", TensorProto.INT64, ["n"]))
    message = (
        "ONNX model: inputs must have distinct names (an ONNX graph defines each name once), got 'ids' twice"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        backend.prepare(model)
    assert not backend.is_compatible(model)
    with pytest.raises(Exception, match="Duplicate definition"):
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def test_bytes_or_files_that_are_no_model_are_refused_and_not_compatible(tmp_path):
    path = tmp_path / "garbage.onnx"
    path.write_bytes(b"garbage")
    for form, where in ((b"garbage", "bytes"), (str(path), f"the file {str(path)!r}")):
        assert backend.is_compatible(form) is False
        message = (
            f"ONNX model: model must be a serialized onnx.ModelProto, got {where} that do not parse as one"
        )
        with pytest.raises(ValueError, match="^" + re.escape(message)):
            backend.prepare(form)


def test_an_opset_the_installed_onnx_does_not_define_is_refused():
    newest = onnx.defs.onnx_opset_version()
    node = helper.make_node("Gather", ["data", "ids"], ["out"])
    inputs = [np.zeros(3, np.float32), np.array([1])]
    with pytest.raises(
        ValueError, match=re.escape(f"jax_gather.backend.run_node: opset_version must be in [1, {newest}]")
    ):
        backend.run_node(node, inputs, opset_version=newest + 2)
    model = _fixed_shape_model()
    model.opset_import[0].version = newest + 2
    with pytest.raises(
        ValueError, match=re.escape(f"opset_import of the default domain must be in [1, {newest}]")
    ):
        backend.prepare(model)
    assert not backend.is_compatible(model)
    with pytest.raises(Exception, match="opset"):
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(backend.run_node(node, inputs, opset_version=newest)[0], [0.0])


def _misaligned(array, offset=16):
    """A copy of ``array`` whose data starts ``offset`` bytes past a 64-byte boundary (JAX's
    CPU client copies such an array, and aliases an aligned one)."""
    buffer = np.empty(array.nbytes + 128, np.uint8)
    start = -buffer.ctypes.data % 64 + offset
    copy = buffer[start : start + array.nbytes].view(array.dtype).reshape(array.shape)
    np.copyto(copy, array)
    return copy


@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.int64])
def test_large_unaligned_inputs_read_in_place_give_exact_outputs_in_every_alignment(dtype):
    # A data input of 320 KiB at each offset past a 64-byte boundary: split where the offset is
    # NumPy's 16 bytes or a multiple (a program for each), else copied; exact either way, and
    # in a passed-through output. Once each offset has run, none compiles again.
    rng = np.random.default_rng(3)
    b = GraphBuilder()
    values = rng.integers(-100, 100, (320 * 1024 // np.dtype(dtype).itemsize // 512, 512)).astype(dtype)
    table = b.tensor(values, "input")
    rows = b.tensor(np.array([0, 5, -1, 2]), "input")
    out = b.node("Gather", [table, rows])
    rep = backend.prepare(b.model([out, b.node("Identity", [table])], 13))
    expected = values[[0, 5, -1, 2]]

    def run_every_offset() -> None:
        for offset in (16, 0, 32, 8, 48, 4):
            data = _misaligned(values, offset)
            for picked in ([0, 5, -1, 2], [0, 5, len(values) - 1, 2]):  # normalised, then in range
                for _ in range(2):  # the first run of a signature, then a remembered one
                    gathered, passed = rep.run([data, np.array(picked)])
                    np.testing.assert_array_equal(gathered, expected)
                    np.testing.assert_array_equal(passed, values)
            np.testing.assert_array_equal(data, values)  # read, never written

    run_every_offset()
    assert {split for _, _, split in rep._program._programs} == {(), ((0, values.shape),)}
    with counting_compiles() as compiles:
        run_every_offset()
    assert compiles[0] == 0
    with pytest.raises(IndexError, match=re.escape(f"indices[1] = {len(values)} is out of bounds")):
        rep.run([_misaligned(values, 16), np.array([0, len(values), 1, 2])])


@pytest.mark.parametrize("dtype", [jnp.bfloat16, np.float16])
def test_a_large_unaligned_narrow_float_input_read_in_place_keeps_its_nan_payloads(dtype):
    # 2 MiB of narrow floats split and joined in the program: XLA:CPU joined them through a
    # wider float (JAX 0.10: bfloat16 through float32), which quieted NaN payloads; the join
    # of their bits keeps every one (_cpu_client.joined).
    rng = np.random.default_rng(4)
    bits_type = np.dtype(f"uint{8 * np.dtype(dtype).itemsize}")
    patterns = np.arange(2 ** (8 * bits_type.itemsize), dtype=bits_type)
    nans = patterns[np.isnan(patterns.view(dtype).astype(np.float32))]
    bits = rng.choice(nans, (2**21 // bits_type.itemsize // 512, 512))
    b = GraphBuilder()
    table = b.tensor(bits.view(dtype), "input")
    rows = b.tensor(np.array([0, 5, -1, 2]), "input")
    rep = backend.prepare(b.model([b.node("Gather", [table, rows])], 13))
    data = _misaligned(bits.view(dtype), 16)
    assert _cpu_client.split_for_cpu(data) is not None  # read in place
    for _ in range(2):  # the first run of a signature, then a remembered one
        (gathered,) = rep.run([data, np.array([0, 5, -1, 2])])
        np.testing.assert_array_equal(np.asarray(gathered).view(bits_type), bits[[0, 5, -1, 2]])


def test_a_remembered_signature_is_not_validated_again_but_every_run_is_judged(monkeypatch):
    b = GraphBuilder()
    table = b.tensor(np.arange(20, dtype=np.float32).reshape(5, 4), "input")
    ids = b.tensor(np.array([0, 4, 2]), "input")
    out = b.node("Gather", [table, ids])
    rep = backend.prepare(b.model([out], 13))
    data = b.feeds[table]
    _assert_outputs(rep.run(b.feeds), [data[[0, 4, 2]]])
    validated = []
    real_feeds = _onnx_graph.checked_feeds
    monkeypatch.setattr(_onnx_graph, "checked_feeds", lambda *args: validated.append(1) or real_feeds(*args))
    for picked in ([1, 1, 3], [-1, 0, -5], [4, 3, 2]):  # in range, negatives, in range again
        _assert_outputs(rep.run({table: data, ids: np.array(picked)}), [data[picked]])
    assert validated == []  # a signature that ran is valid: its later runs skip the checks
    with pytest.raises(
        IndexError, match=re.escape(f"Gather node 'n_{out}': indices[1] = 5 is out of bounds")
    ):
        rep.run([data, np.array([0, 5, 1])])
    with pytest.raises(TypeError, match=re.escape("must be tensor(int64)")):
        rep.run([data, np.array([0, 1, 2], np.int32)])  # another signature: validated in full
    assert len(validated) == 2


def test_run_gives_read_only_views_of_what_it_computes_and_copies_of_what_it_passes_through():
    b = GraphBuilder()
    table = b.tensor(np.arange(6, dtype=np.float32).reshape(3, 2), "input")
    ids = b.tensor(np.array([2, 0]), "input")
    rep = backend.prepare(b.model([b.node("Gather", [table, ids]), b.node("Identity", [ids])], 13))
    for _ in range(2):  # the first run of a signature, and a remembered one
        rows, passed = rep.run(b.feeds)
        with pytest.raises(ValueError, match="read-only"):
            rows[0, 0] = -1.0
        passed[0] = -1  # the caller's own values: a copy that is theirs to write
        np.testing.assert_array_equal(b.feeds[ids], [2, 0])
        np.testing.assert_array_equal(rows, [[4.0, 5.0], [0.0, 1.0]])


@pytest.mark.parametrize("offset", [0, 16])  # aligned: read in place; not: narrowed to int32
def test_large_int64_index_inputs_are_judged_and_gathered_exactly_in_either_alignment(offset):
    rng = np.random.default_rng(offset)
    b = GraphBuilder()
    # 640 KiB of indices: tested and narrowed in three chunks (_cpu_client.NARROWED_CHUNK).
    table = b.tensor(rng.standard_normal((160, 512)).astype(np.float32), "input")
    cols = b.tensor(_misaligned(rng.integers(0, 512, (160, 512)), offset), "input")
    out = b.node("GatherElements", [table, cols], axis=1)
    rep = backend.prepare(b.model([out], 13))
    data, columns = b.feeds[table], b.feeds[cols]
    for _ in range(2):
        _assert_outputs(rep.run(b.feeds), [np.take_along_axis(data, columns, axis=1)])
    negative = _misaligned(columns - 512, offset)
    _assert_outputs(rep.run([data, negative]), [np.take_along_axis(data, columns, axis=1)])
    for row in (7, 150):  # in the first chunk and in the last
        bad = columns.copy()
        bad[row, 300] = 512
        with pytest.raises(
            IndexError,
            match=re.escape(f"GatherElements node 'n_{out}': indices[{row}, 300] = 512 is out of bounds"),
        ):
            rep.run([data, _misaligned(bad, offset)])
    _assert_outputs(rep.run(b.feeds), [np.take_along_axis(data, columns, axis=1)])
