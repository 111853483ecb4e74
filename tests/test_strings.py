"""String data (ONNX tensor(string)) through the three public ops, called eagerly.

Strings are gathered on the host from positions the numeric op computes, so every rule must
be the numeric one: results against the NumPy reference, errors word for word against the
same call on numeric data.
"""

import re

import jax
import numpy as np
import pytest
from hypothesis import given, note, strategies as st

import jax_gather
from tests import ops_table
from tests.strategies import (
    gather_cases,
    gather_elements_cases,
    gather_nd_cases,
    make_indices,
    make_strings,
    make_wild_indices,
)

pytestmark = pytest.mark.core  # the fast tier: pytest -m core

# NumPy 2's variable-width StringDType too, where this NumPy has it.
KINDS = ["str", "bytes", "object"] + (["stringdtype"] if hasattr(np.dtypes, "StringDType") else [])


OPS = {name: (op.cases, op.reference, op.fn) for name, op in ops_table.OPS.items()}


def _sizes(name, data_shape, indices_shape, attr):
    return data_shape[attr : attr + indices_shape[-1]] if name == "gather_nd" else data_shape[attr]


def _check(name, case, kind, mode):
    _, ref, op = OPS[name]
    data_shape, indices_shape, attr, seed, index_dtype = case
    data = make_strings(data_shape, kind, seed)
    sizes = _sizes(name, data_shape, indices_shape, attr)
    if mode == "in_bounds":
        indices = make_indices(indices_shape, sizes, index_dtype, seed)
    else:
        indices = make_wild_indices(indices_shape, sizes, index_dtype, seed)
    note(f"{name}(data {data.dtype}{list(data.shape)}, indices {indices.tolist()}, {attr}, {mode})")
    before = data.copy()
    if mode == "in_bounds":
        out = op(data, indices, attr)
        expected = ref(data, indices, attr)
    else:
        out = op(data, indices, attr, mode=mode)
        expected = ref(data, indices, attr, mode=mode, fill=b"" if kind == "bytes" else "")
    assert isinstance(out, np.ndarray) and out.dtype == data.dtype
    assert out.shape == expected.shape
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(data, before)  # never mutated


@given(case=gather_cases(), kind=st.sampled_from(KINDS), mode=st.sampled_from(["in_bounds", "fill", "clip"]))
def test_gather_strings(case, kind, mode):
    _check("gather", case, kind, mode)


@given(
    case=gather_elements_cases(),
    kind=st.sampled_from(KINDS),
    mode=st.sampled_from(["in_bounds", "fill", "clip"]),
)
def test_gather_elements_strings(case, kind, mode):
    _check("gather_elements", case, kind, mode)


@given(
    case=gather_nd_cases(), kind=st.sampled_from(KINDS), mode=st.sampled_from(["in_bounds", "fill", "clip"])
)
def test_gather_nd_strings(case, kind, mode):
    _check("gather_nd", case, kind, mode)


def test_nested_lists_of_strings_and_onnx_object_arrays():
    assert jax_gather.gather([["a", "b"], ["c", "d"]], [1, -2], axis=1).tolist() == [["b", "a"], ["d", "c"]]
    words = np.array(["x", b"y", "zé"], dtype=object)  # strings and bytes may mix in object arrays
    out = jax_gather.gather_elements(words, np.array([2, -2], np.int64))
    assert out.dtype == object and out.tolist() == ["zé", b"y"]


# Calls that must fail the same way on strings as on numbers: (case, op, shape, indices, attribute)
SAME_ERRORS = [
    ("out of bounds", jax_gather.gather, (2, 3), np.array([[0, 3]]), 1),
    ("elements out of bounds", jax_gather.gather_elements, (2, 3), np.array([[0, -4]]), 1),
    ("nd out of bounds", jax_gather.gather_nd, (2, 3), np.array([[1, 0], [2, 0]]), 0),
    ("axis", jax_gather.gather, (2, 3), np.array([0]), 2),
    ("rank-0 data", jax_gather.gather, (), np.array([0]), 0),
    ("float indices", jax_gather.gather, (2, 3), np.array([0.0]), 0),
    ("elements larger indices", jax_gather.gather_elements, (2, 3), np.zeros((3, 3), int), 1),
    ("nd batch dims differ", jax_gather.gather_nd, (4, 3), np.zeros((2, 1), int), 1),
    ("nd tuple too long", jax_gather.gather_nd, (4, 3), np.zeros((2, 3), int), 0),
    ("empty axis", jax_gather.gather, (0, 3), np.array([0]), 0),
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "op, shape, indices, attr", [c[1:] for c in SAME_ERRORS], ids=[c[0] for c in SAME_ERRORS]
)
def test_errors_are_the_numeric_errors(op, shape, indices, attr, kind):
    with pytest.raises(Exception) as numeric:
        op(np.zeros(shape, np.float32), indices, attr)
    with pytest.raises(type(numeric.value)) as strings:
        op(make_strings(shape, kind, seed=0), indices, attr)
    assert str(strings.value) == str(numeric.value)


def test_fill_defaults_to_the_empty_string_of_the_data_kind():
    for kind, empty in (("str", ""), ("bytes", b""), ("object", "")):
        data = make_strings((3,), kind, seed=1)
        out = jax_gather.gather(data, [5, 0, -9], mode="fill")
        assert out.dtype == data.dtype and out.tolist() == [empty, data[0], empty]
    out = jax_gather.gather_nd(np.array([["a", "bc"]]), [[0, 7], [0, 1]], mode="fill", fill_value="?")
    assert out.tolist() == ["?", "bc"]
    # Nothing to read on an empty axis: every position is filled.
    assert jax_gather.gather(np.zeros((0, 2), "U1"), [0], mode="fill").tolist() == [["", ""]]


BAD_FILLS = [
    (
        "str data, int fill",
        np.array(["ab"]),
        0,
        TypeError,
        "Gather: fill_value must be a str for data of dtype <U2, got int 0",
    ),
    (
        "bytes data, str fill",
        np.array([b"ab"]),
        "x",
        TypeError,
        "Gather: fill_value must be a bytes for data of dtype |S2, got str 'x'",
    ),
    (
        "object data, float fill",
        np.array(["ab"], object),
        1.5,
        TypeError,
        "Gather: fill_value must be a str or bytes for data of dtype object, got float 1.5",
    ),
    (
        "too long",
        np.array(["ab"]),
        "abc",
        ValueError,
        "Gather: fill_value 'abc' cannot be represented in the data dtype <U2 (too long)",
    ),
]


@pytest.mark.parametrize(
    "data, fill, exc, message", [c[1:] for c in BAD_FILLS], ids=[c[0] for c in BAD_FILLS]
)
def test_bad_fill_values(data, fill, exc, message):
    with pytest.raises(exc, match=re.escape(message)):
        jax_gather.gather(data, [1], mode="fill", fill_value=fill)
    # The fill value is never read in "clip" mode, so it is not checked either (as for numbers).
    assert jax_gather.gather(data, [1], mode="clip", fill_value=fill).tolist() == [data[0]]


TRACED = "indices must be concrete when data holds strings (JAX has no string dtype"


@pytest.mark.parametrize(
    "transform",
    [jax.jit, jax.vmap, lambda f: jax.jit(jax.vmap(f))],
    ids=["jit", "vmap", "jit_vmap"],
)
def test_traced_indices_with_string_data_raise_type_error(transform):
    data = np.array([["a", "b"], ["c", "d"]])
    for op, indices in (
        (jax_gather.gather, np.array([[0]])),
        (jax_gather.gather_elements, np.array([[0, 1]])),
        (jax_gather.gather_nd, np.array([[1, 0]])),
    ):
        with pytest.raises(TypeError, match=re.escape(TRACED)):
            transform(lambda i: op(data, i))(indices)
    fill = "fill_value must be concrete when data holds strings"
    with pytest.raises(TypeError, match=re.escape(fill)):
        transform(lambda f: jax_gather.gather(data, [[0]], mode="fill", fill_value=f))(np.zeros(1))


def test_a_string_array_as_a_jit_argument_is_refused_by_jax_with_a_type_error():
    # As the README says: JAX refuses the argument before the op runs; closing over it works.
    data = np.array([["a", "b"], ["c", "d"]])
    with pytest.raises(TypeError):
        jax.jit(lambda d, i: jax_gather.gather(d, i))(data, np.array([1]))
    assert jax_gather.gather(data, np.array([1])).tolist() == [["c", "d"]]


@pytest.mark.parametrize(
    "transform",
    [jax.jit, lambda f: jax.jit(jax.vmap(f))],
    ids=["jit", "jit_vmap"],
)
def test_string_data_with_concrete_indices_inside_jit_raises_the_documented_type_error(transform):
    # jit stages out even a gather of constants: its positions come back traced, refused in the
    # op's words, not by NumPy's conversion of a tracer. (vmap and grad leave it concrete.)
    data = np.array([["a", "b"], ["c", "d"]])
    message = "Gather: data holding strings must be gathered eagerly (JAX has no string dtype"
    with pytest.raises(TypeError, match=re.escape(message)):
        transform(lambda x: (jax_gather.gather(data, np.array([1])), x)[1])(np.ones(1))


@pytest.mark.skipif(not hasattr(np.dtypes, "StringDType"), reason="NumPy 2's StringDType")
def test_stringdtype_data_and_fills_of_any_length():
    data = np.array(["ab", "c", "déf"], dtype=np.dtypes.StringDType())
    out = jax_gather.gather(data, [2, -3, 5], mode="fill", fill_value="a longer fill")
    assert out.dtype == data.dtype and out.tolist() == ["déf", "ab", "a longer fill"]
    assert jax_gather.gather(data, [1, 9], mode="fill").tolist() == ["c", ""]
    with pytest.raises(TypeError, match=re.escape("Gather: fill_value must be a str for data of dtype")):
        jax_gather.gather(data, [1], mode="fill", fill_value=b"x")
