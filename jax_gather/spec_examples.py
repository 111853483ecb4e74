"""The worked examples of the specifications, transcribed by hand with their printed outputs.

Used by the command-line tour, the notebooks and the tests. The expected outputs are the
specs' own; nothing here is computed by the library.
"""

from __future__ import annotations

from typing import Any, NamedTuple


class SpecExample(NamedTuple):
    name: str
    source: str
    op: str  # "gather", "gather_elements" or "gather_nd"
    data: Any
    indices: Any
    attribute: str  # "axis" or "batch_dims"
    value: int
    expected: Any


_GATHER_DATA = [[1.0, 1.2], [2.3, 3.4], [4.5, 5.7]]
_GATHER_DATA_3 = [[1.0, 1.2, 1.9], [2.3, 3.4, 3.9], [4.5, 5.7, 5.9]]
_ND_DATA_3 = [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]
_ONNX_GE = "ONNX GatherElements-13/11"
_OPENVINO = "OpenVINO GatherElements-6"
_ONNX_ND = "ONNX GatherND-13/12/11"

# fmt: off
SPEC_EXAMPLES: tuple[SpecExample, ...] = (
    SpecExample("gather_axis0", "ONNX Gather-13/11/1", "gather", _GATHER_DATA,
                [[0, 1], [1, 2]], "axis", 0,
                [[[1.0, 1.2], [2.3, 3.4]], [[2.3, 3.4], [4.5, 5.7]]]),
    SpecExample("gather_axis1", "ONNX Gather-13", "gather", _GATHER_DATA_3,
                [[0, 2]], "axis", 1, [[[1.0, 1.9]], [[2.3, 3.9]], [[4.5, 5.9]]]),
    SpecExample("gather_elements_example1", _ONNX_GE, "gather_elements", [[1, 2], [3, 4]],
                [[0, 0], [1, 0]], "axis", 1, [[1, 1], [4, 3]]),
    SpecExample("gather_elements_example2", _ONNX_GE, "gather_elements",
                [[1, 2, 3], [4, 5, 6], [7, 8, 9]], [[1, 2, 0], [2, 0, 0]], "axis", 0,
                [[4, 8, 3], [7, 2, 3]]),
    SpecExample("openvino_example1", _OPENVINO, "gather_elements", [[1, 2], [3, 4]],
                [[0, 1], [0, 0]], "axis", 0, [[1, 4], [1, 2]]),
    SpecExample("openvino_example2_longer_axis", _OPENVINO, "gather_elements", [[1, 7], [4, 3]],
                [[1, 1, 0], [1, 0, 1]], "axis", 1, [[7, 7, 1], [3, 4, 3]]),
    SpecExample("openvino_example3_shorter_axis", _OPENVINO, "gather_elements",
                [[1, 2, 3], [4, 5, 6], [7, 8, 9]], [[1, 0, 1], [1, 2, 0]], "axis", 0,
                [[4, 2, 6], [4, 8, 3]]),
    SpecExample("gather_nd_example1", _ONNX_ND, "gather_nd", [[0, 1], [2, 3]],
                [[0, 0], [1, 1]], "batch_dims", 0, [0, 3]),
    SpecExample("gather_nd_example2", _ONNX_ND, "gather_nd", [[0, 1], [2, 3]],
                [[1], [0]], "batch_dims", 0, [[2, 3], [0, 1]]),
    SpecExample("gather_nd_example3", _ONNX_ND, "gather_nd", _ND_DATA_3,
                [[0, 1], [1, 0]], "batch_dims", 0, [[2, 3], [4, 5]]),
    SpecExample("gather_nd_example4", _ONNX_ND, "gather_nd", _ND_DATA_3,
                [[[0, 1]], [[1, 0]]], "batch_dims", 0, [[[2, 3]], [[4, 5]]]),
    SpecExample("gather_nd_example5_batch_dims", "ONNX GatherND-13/12", "gather_nd", _ND_DATA_3,
                [[1], [0]], "batch_dims", 1, [[2, 3], [4, 5]]),
)
# fmt: on
