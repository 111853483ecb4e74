"""Every example of the five spec files and every ONNX node test case for these ops (those
with the onnx package, which has them)."""

import importlib.util

import numpy as np
import pytest

import jax_gather
from jax_gather.spec_examples import SPEC_EXAMPLES
from tests import ops_table
from tests.compat import enable_x64

pytestmark = pytest.mark.core  # the fast tier: pytest -m core

OPS = {name: op.fn for name, op in ops_table.OPS.items()}


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("example", SPEC_EXAMPLES, ids=[e.name for e in SPEC_EXAMPLES])
def test_spec_example(example, jit):
    import jax

    op = OPS[example.op]
    fn = jax.jit(op, static_argnums=2) if jit else op
    out = fn(np.asarray(example.data), np.asarray(example.indices), example.value)
    expected = np.asarray(example.expected)
    assert out.shape == expected.shape
    np.testing.assert_allclose(np.asarray(out), expected.astype(out.dtype))


def test_gather_11_axis1_example_is_a_transcription_error():
    """Gather-11's axis=1 example prints shape (1, 3, 2); its own formula gives (3, 1, 2).

    Gather-13 corrected the example; the formula governs (see the README's notes).
    """
    data = [[1.0, 1.2, 1.9], [2.3, 3.4, 3.9], [4.5, 5.7, 5.9]]
    out = jax_gather.gather(np.asarray(data), [[0, 2]], axis=1)
    assert out.shape == (3, 1, 2)
    np.testing.assert_allclose(out[:, 0, :], [[1.0, 1.9], [2.3, 3.9], [4.5, 5.9]], rtol=1e-6)


def _onnx_node_cases() -> tuple:
    if importlib.util.find_spec("onnx") is None:
        return ()  # test_onnx_node_case is skipped, as an empty parameter set
    from tests.onnx_models import onnx_node_cases

    return onnx_node_cases()


ONNX_CASES = _onnx_node_cases()


def test_onnx_node_cases_were_found():
    pytest.importorskip("onnx")
    names = {c.name for c in ONNX_CASES}
    assert {"test_gather_0", "test_gather_elements_0", "test_gathernd_example_int32"} <= names
    assert len(ONNX_CASES) >= 10


@pytest.mark.parametrize("case", ONNX_CASES, ids=[c.name for c in ONNX_CASES])
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_onnx_node_case(case, jit):
    import jax
    import onnx.helper
    import onnx.numpy_helper

    node = case.model.graph.node[0]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    op, name = ops_table.BY_ONNX[node.op_type].fn, ops_table.BY_ONNX[node.op_type].attribute
    attribute = int(attrs.get(name, 0))
    for inputs, outputs in case.data_sets:
        data, indices = (
            onnx.numpy_helper.to_array(t) if not isinstance(t, np.ndarray) else t for t in inputs
        )
        (expected,) = (onnx.numpy_helper.to_array(t) if not isinstance(t, np.ndarray) else t for t in outputs)
        fn = jax.jit(lambda d, i: op(d, i, attribute)) if jit else (lambda d, i: op(d, i, attribute))
        with enable_x64(True):  # ONNX's int64 / float64 outputs keep their dtype
            out = fn(data, indices)
            assert out.dtype == expected.dtype
            assert out.shape == expected.shape
            np.testing.assert_array_equal(np.asarray(out), expected)
