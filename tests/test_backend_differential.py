"""jax_gather.backend against onnxruntime on generated models: equal outputs, dtype included.

Every dtype onnxruntime's CPU gathers run from NumPy (bool, all ints, float16/32/64, strings)
at opsets 1 (Gather only), 11, 12, 13 and 18; int32 and int64 indices (GatherND: int64, its
only type); chains of up to three gathers with Identity nodes between; data and indices from
graph inputs, initializers and Constant nodes. Each model also runs through ``to_jax``.
onnxruntime takes neither bfloat16 nor complex arrays from NumPy: those are compared through
a proxy dtype that holds the same values (float32 for bfloat16; real and imaginary parts).

Where onnxruntime departs from the spec, the tests assert the spec's answer (see the last
tests).
"""

import re

import ml_dtypes
import numpy as np
import pytest
from hypothesis import event, given, note, strategies as st

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import printer

from jax_gather import backend
from tests.compat import enable_x64
from tests.onnx_models import GraphBuilder, onnxruntime_session
from tests.strategies import ORT_DTYPES, make_data, make_indices, make_strings

DTYPES = [*ORT_DTYPES, "string"]
OPSETS = [1, 11, 12, 13, 18]
SOURCES = ["input", "initializer", "constant"]


def _sources(opset, dtype):
    """Where a tensor may come from: Constant-1 (opsets 1-8) holds floats only."""
    floats = np.dtype(dtype).kind == "f" if dtype != "string" else False
    return SOURCES if opset >= 9 or floats else SOURCES[:2]


def _data(shape, dtype, seed):
    return make_strings(shape, "object", seed) if dtype == "string" else make_data(shape, dtype, seed)


def _assert_same(ours, theirs):
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        a = np.asarray(a)
        assert (a.dtype, a.shape) == (b.dtype, b.shape)
        np.testing.assert_array_equal(a, b)


def _ours(model, feeds):
    """The backend's outputs through ``run`` and through ``to_jax``."""
    rep = backend.prepare(model)
    with enable_x64(True):  # to_jax follows the caller's x64 setting
        via_jax = backend.to_jax(model)(*(feeds[name] for name in rep.input_names))
    return rep.run(feeds), via_jax


def _compare(model, feeds, strings=None):
    """Ours (``run`` and ``to_jax``) against onnxruntime. For string data that onnxruntime's
    string Gather gets wrong, pass ``strings=(build, data)``: its answer is then taken from its
    numeric kernels (see ``_strings_via_positions``)."""
    ours, via_jax = _ours(model, feeds)
    if strings is None:
        theirs = onnxruntime_session(model).run(None, feeds)
    else:
        theirs = _strings_via_positions(*strings)
    _assert_same(ours, theirs)
    _assert_same(via_jax, theirs)


def _strings_via_positions(build, strings):
    """onnxruntime's answer from its numeric kernels: the positions it gathers from an int64
    iota of the strings' shape (``build(data)`` makes the model), then the strings there."""
    b, model = build(np.arange(strings.size, dtype=np.int64).reshape(strings.shape))
    flat = strings.reshape(-1)
    return [flat[p.reshape(-1)].reshape(p.shape) for p in onnxruntime_session(model).run(None, b.feeds)]


def _fixed_chain(data, opset, sources=("input", "initializer", "constant", "input")):
    """data -> Gather(axis=1, int32) -> GatherElements(axis=-1) -> GatherND(batch_dims=1) ->
    Identity; at opset 1 Gather -> Gather -> Identity. Outputs the first and the last."""
    b = GraphBuilder()
    x = b.tensor(data, sources[0])
    g = b.node("Gather", [x, b.tensor(np.array([[3, -4], [1, 0]], np.int32), sources[1])], axis=1)
    if opset < 11:
        last = b.node("Gather", [g, b.tensor(np.array(-1, np.int64), "initializer")], axis=-1)
    else:  # g has shape (3, 2, 2, 2)
        e_ids = make_indices((3, 2, 2, 1), 2, np.int64, seed=1)
        e = b.node("GatherElements", [g, b.tensor(e_ids, sources[2])], axis=-1)
        if opset >= 12:  # index pairs into e's dims 1 and 2, per batch row
            last = b.node(
                "GatherND",
                [e, b.tensor(make_indices((3, 2, 2), 2, np.int64, seed=2), sources[3])],
                batch_dims=1,
            )
        else:
            last = b.node(
                "GatherND", [e, b.tensor(make_indices((2, 3), (3, 2, 2), np.int64, seed=3), sources[3])]
            )
    return b, b.model([g, b.node("Identity", [last])], opset)


@pytest.mark.parametrize("opset", [1, 11, 12, 13])
@pytest.mark.parametrize("dtype", DTYPES, ids=[np.dtype(d).name if d != "string" else d for d in DTYPES])
def test_every_dtype_through_a_chain(dtype, opset):
    data = _data((3, 4, 2), dtype, seed=0)
    b, model = _fixed_chain(data, opset)
    # The chain's first Gather reads slices of two strings, which onnxruntime gets wrong.
    strings = (lambda d: _fixed_chain(d, opset), data) if dtype == "string" else None
    _compare(model, b.feeds, strings)


@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.complex64, np.complex128])
def test_dtypes_onnxruntime_cannot_take_from_numpy(dtype):
    data = make_data((3, 4, 2), dtype, seed=0)
    b, model = _fixed_chain(data, 13)
    ours, via_jax = _ours(model, b.feeds)
    if dtype == ml_dtypes.bfloat16:  # the same values in float32: gathers only move them
        proxy, proxy_model = _fixed_chain(data.astype(np.float32), 13)
        expected = [o.astype(dtype) for o in onnxruntime_session(proxy_model).run(None, proxy.feeds)]
    else:
        parts = []
        for part in (data.real, data.imag):
            proxy, proxy_model = _fixed_chain(part.copy(), 13)
            parts.append(onnxruntime_session(proxy_model).run(None, proxy.feeds))
        expected = [(re_ + 1j * im).astype(dtype) for re_, im in zip(*parts)]
    _assert_same(ours, expected)
    _assert_same(via_jax, expected)


@st.composite
def chains(draw, opset):
    """A random chain of 1-3 gathers (and Identity nodes) with in-bounds, partly negative
    indices: returns (data, build, direct), where ``build(data)`` makes (builder, model) for
    data of that shape and ``direct`` says whether onnxruntime's string kernels are right
    for it (no Gather reads a slice of more than one string)."""
    ops = ("Gather",) if opset < 11 else ("Gather", "GatherElements", "GatherND")
    dtype = draw(st.sampled_from(DTYPES))
    seed = draw(st.integers(0, 2**16))
    shape = tuple(draw(st.integers(1, 4)) for _ in range(draw(st.integers(1, 3))))
    data = _data(shape, dtype, seed)
    data_source = draw(st.sampled_from(_sources(opset, dtype)))
    steps, direct = [], True
    for step in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(ops))
        r = len(shape)
        if op == "GatherND":
            q = draw(st.integers(1, 3))
            bd = draw(st.integers(0, min(q, r) - 1)) if opset >= 12 else 0
            k = draw(st.integers(1, r - bd))
            ind_shape = shape[:bd] + tuple(draw(st.integers(0, 3)) for _ in range(q - bd - 1)) + (k,)
            sizes = shape[bd : bd + k]
            new_shape = ind_shape[:-1] + shape[bd + k :]
            attrs = {"batch_dims": bd} if opset >= 12 and (bd or draw(st.booleans())) else {}
            index_dtype = np.int64
        else:
            axis = draw(st.integers(-r, r - 1))
            a = axis % r
            if op == "Gather":
                ind_shape = tuple(
                    draw(st.integers(0, 3)) for _ in range(draw(st.integers(0, max(1, min(2, 5 - r)))))
                )
                new_shape = shape[:a] + ind_shape + shape[a + 1 :]
                direct = direct and np.prod(shape[a + 1 :], dtype=int) == 1
            else:  # indices may be smaller than data on the non-axis dims
                ind_shape = tuple(draw(st.integers(0, 3 if d == a else shape[d])) for d in range(r))
                new_shape = ind_shape
            sizes = shape[a]
            attrs = {} if axis == 0 and draw(st.booleans()) else {"axis": axis}  # default or explicit
            index_dtype = draw(st.sampled_from([np.int32, np.int64]))
        indices = make_indices(ind_shape, sizes, index_dtype, seed + step)
        shape = new_shape
        last = 0 in shape or not shape  # an empty or a scalar result: nothing more to index
        steps.append(
            (
                op,
                attrs,
                indices,
                draw(st.sampled_from(_sources(opset, index_dtype))),
                draw(st.booleans()),
                last or draw(st.booleans()),
            )
        )
        if last:
            break

    def build(data):
        b = GraphBuilder()
        current, outputs = b.tensor(data, data_source), []
        for op, attrs, indices, source, identity, output in steps:
            current = b.node(op, [current, b.tensor(indices, source)], **attrs)
            if identity:
                current = b.node("Identity", [current])
            if output:
                outputs.append(current)
        if outputs[-1:] != [current]:
            outputs.append(current)
        return b, b.model(outputs, opset)

    return data, build, direct


@pytest.mark.slow
@pytest.mark.parametrize("opset", OPSETS)
@given(case=st.data())
def test_random_chains_against_onnxruntime(opset, case):
    data, build, direct = case.draw(chains(opset))
    b, model = build(data)
    note(printer.to_text(model.graph))
    event(f"{data.dtype}" + ("" if direct or data.dtype != object else " via positions"))
    event(f"{len(model.graph.node)} nodes")
    _compare(model, b.feeds, None if direct or data.dtype != object else (build, data))


def test_gathernd_batch_dims_must_be_equal_not_divisible():
    """onnxruntime's CPU GatherND only checks that the indices' batch size is a multiple of
    data's (here 4 of 2) and returns a result; the spec says the batch dims are equal."""
    b = GraphBuilder()
    out = b.node(
        "GatherND",
        [
            b.tensor(np.arange(6, dtype=np.float32).reshape(2, 3)),
            b.tensor(np.array([[1], [2], [0], [1]], np.int64)),
        ],
        batch_dims=1,
    )
    model = b.model([out], 13)
    message = (
        f"GatherND node 'n_{out}': the first batch_dims=1 dimensions of data and indices must "
        "be equal, got data shape (2, 3) and indices shape (4, 1)"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        backend.prepare(model).run(b.feeds)


@pytest.mark.parametrize(
    "op, data, indices, attrs",
    [
        ("Gather", np.arange(6.0).reshape(3, 2), np.array([1, 3]), {"axis": 0}),
        ("Gather", np.arange(6.0).reshape(3, 2), np.array([-4]), {"axis": 0}),
        ("GatherElements", np.arange(6.0).reshape(3, 2), np.array([[0, 2]]), {"axis": 1}),
        ("GatherND", np.arange(6.0).reshape(3, 2), np.array([[2, 0], [0, -3]]), {}),
    ],
)
def test_out_of_bounds_is_an_error_for_both(op, data, indices, attrs):
    """ONNX: an out-of-bounds index is an error. onnxruntime's CPU kernels raise; its CUDA
    kernels write 0 instead. The backend raises IndexError on every device."""
    b = GraphBuilder()
    model = b.model([b.node(op, [b.tensor(data), b.tensor(indices)], **attrs)], 13)
    with pytest.raises(IndexError, match=f"{op} node .*out of bounds"):
        backend.prepare(model).run(b.feeds)
    with pytest.raises(Exception, match=r"(?i)out of (data )?bounds|out of range|invalid"):
        onnxruntime_session(model).run(None, b.feeds)


def test_onnxruntime_string_gather_keeps_only_the_first_string_of_each_slice():
    """onnxruntime's CPU Gather on strings (1.18 to 1.31 at least) copies only the first
    string of each gathered slice and leaves the rest empty: [["d", "", ""], ["a", "", ""]]
    here. The spec's answer is the whole slice."""
    data = np.array([["a", "b", "c"], ["d", "e", "f"]], object)
    b = GraphBuilder()
    model = b.model([b.node("Gather", [b.tensor(data), b.tensor(np.array([1, -2]))])], 13)
    expected = np.array([["d", "e", "f"], ["a", "b", "c"]], object)
    _assert_same(backend.prepare(model).run(b.feeds), [expected])
    _assert_same(backend.to_jax(model)(*b.feeds.values()), [expected])
