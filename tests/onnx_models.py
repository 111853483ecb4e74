"""ONNX models for the tests (one-node models, chains built node by node), the ONNX node
test cases, and the two ONNX oracles: onnxruntime and onnx.reference."""

from __future__ import annotations

import contextlib
import functools
import importlib
import itertools
import warnings
from collections.abc import Iterator

import ml_dtypes
import numpy as np
import pytest

pytest.importorskip("onnx")  # the [onnx] extra: the modules importing this one are skipped without it

import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 13
IR_VERSION = 8  # one that every supported onnxruntime accepts


def one_node_model(op_type: str, data: np.ndarray, indices: np.ndarray, **attrs) -> onnx.ModelProto:
    elem = helper.np_dtype_to_tensor_dtype(data.dtype)
    ind = helper.np_dtype_to_tensor_dtype(indices.dtype)
    node = helper.make_node(op_type, ["data", "indices"], ["out"], **attrs)
    graph = helper.make_graph(
        [node],
        op_type.lower(),
        [
            helper.make_tensor_value_info("data", elem, data.shape),
            helper.make_tensor_value_info("indices", ind, indices.shape),
        ],
        [helper.make_tensor_value_info("out", elem, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    return model


def run_onnxruntime(model: onnx.ModelProto, data: np.ndarray, indices: np.ndarray) -> np.ndarray:
    import onnxruntime

    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"data": data, "indices": indices})[0]


def run_reference(model: onnx.ModelProto, data: np.ndarray, indices: np.ndarray) -> np.ndarray:
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(model).run(None, {"data": data, "indices": indices})[0]


@functools.cache
def onnx_node_cases() -> tuple:
    """The ONNX node test cases (with inputs and outputs) of one Gather* node.

    Each module of onnx's node cases registers its cases as it is imported, computing their
    outputs with onnx.reference: importing all of them (``collect_testcases``) takes 6-9 s, the
    three of these ops a fraction of a second.
    """
    ops = {"Gather", "GatherElements", "GatherND"}
    return tuple(
        c
        for c in _node_cases_of("gather", "gatherelements", "gathernd")
        if len(c.model.graph.node) == 1 and c.model.graph.node[0].op_type in ops
    )


def onnx_node_case(module: str, name: str):
    """The ONNX node test case ``name``, registered by onnx's node case module ``module``."""
    (case,) = [c for c in _node_cases_of(module) if c.name == name]
    return case


def _node_cases_of(*modules: str) -> list:
    import onnx.backend.test.case.node as node_cases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for module in modules:
            importlib.import_module(f"{node_cases.__name__}.{module}")
    return list(node_cases._NodeTestCases)  # what collect_testcases returns, once every module is imported


@contextlib.contextmanager
def node_cases_of_these_ops_only() -> Iterator[None]:
    """Within the block, onnx's backend test runner loads only :func:`onnx_node_cases`, as the
    runner would find them among all node cases, without importing the others (6-9 s)."""
    import onnx.backend.test.loader as loader

    every_case = loader.load_node_model_tests
    loader.load_node_model_tests = lambda: list(onnx_node_cases())
    try:
        yield
    finally:
        loader.load_node_model_tests = every_case


def element_type(array: np.ndarray) -> int:
    if array.dtype.kind in "USO":
        return TensorProto.STRING
    if array.dtype == ml_dtypes.bfloat16:  # older onnx releases do not know the NumPy type
        return TensorProto.BFLOAT16
    return helper.np_dtype_to_tensor_dtype(array.dtype)


class GraphBuilder:
    """Builds a model node by node; each tensor is a graph input, an initializer or a Constant."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.feeds: dict[str, np.ndarray] = {}
        self._names = itertools.count()

    def tensor(self, array: np.ndarray, source: str = "input", free_dims: bool = False) -> str:
        """The tensor's name; an input declares the array's shape, or with ``free_dims`` its
        rank only (so that runs may feed other shapes)."""
        name = f"t{next(self._names)}"
        if source == "input":
            shape = [None] * array.ndim if free_dims else array.shape
            self.inputs.append(helper.make_tensor_value_info(name, element_type(array), shape))
            self.feeds[name] = array
        elif source == "initializer":
            self.initializers.append(numpy_helper.from_array(array, name))
        elif source == "constant":
            value = numpy_helper.from_array(array, name + "_value")
            self.nodes.append(helper.make_node("Constant", [], [name], value=value))
        else:
            raise ValueError(source)
        return name

    def node(self, op_type: str, inputs: list[str], **attrs) -> str:
        name = f"t{next(self._names)}"
        self.nodes.append(helper.make_node(op_type, inputs, [name], name=f"n_{name}", **attrs))
        return name

    def model(self, outputs: list[str], opset: int) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes,
            "chain",
            self.inputs,
            [helper.make_empty_tensor_value_info(name) for name in outputs],
            initializer=self.initializers,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        model.ir_version = IR_VERSION
        return model


def onnxruntime_session(model: onnx.ModelProto):
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3  # errors only: old opsets make it warn on every session
    return onnxruntime.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
