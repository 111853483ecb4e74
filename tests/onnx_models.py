"""One-node ONNX models and the two ONNX oracles: onnxruntime and onnx.reference."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

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

    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    return session.run(None, {"data": data, "indices": indices})[0]


def run_reference(model: onnx.ModelProto, data: np.ndarray, indices: np.ndarray) -> np.ndarray:
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(model).run(None, {"data": data, "indices": indices})[0]
