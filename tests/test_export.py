"""jax.export with symbolic (shape-polymorphic) dims: one program for every batch size.

Concrete-shape export for every op and mode (cpu, cuda, tpu; serialize round trip) is in
test_transforms.py; here the shapes hold symbols, the program is serialized once and then called
with several sizes, and what comes back is compared with the NumPy reference.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export
from jax.experimental import checkify

import jax_gather
from tests import ops_table

PLATFORMS = ("cpu", "cuda", "tpu")
MODES = ("checked", "fill", "clip", "promise_in_bounds")
REFERENCE_MODE = {"checked": "fill", "fill": "fill", "clip": "clip", "promise_in_bounds": "raise"}

# (id, op, data shape, indices shape, attribute, constraints, concrete (data, indices) shapes)
CASES = [
    ("gather/indices-dims", "gather", "10, 4", "b, 3", 0, (), [((10, 4), (2, 3)), ((10, 4), (5, 3))]),
    ("gather/data-non-axis", "gather", "b, 6", "n", 1, (), [((2, 6), (3,)), ((5, 6), (1,))]),
    ("gather/vocabulary", "gather", "v, 4", "n", 0, (), [((7, 4), (3,)), ((20, 4), (9,))]),
    (
        "gather_elements/non-axis",
        "gather_elements",
        "b, 4",
        "b, k",
        1,
        (),
        [((3, 4), (3, 6)), ((6, 4), (6, 2))],
    ),
    (
        "gather_elements/smaller",
        "gather_elements",
        "b, 4",
        "c, 6",
        1,
        ("c <= b",),
        [((5, 4), (3, 6)), ((4, 4), (4, 6))],
    ),
    ("gather_elements/axis", "gather_elements", "v, 3", "n, 3", 0, (), [((4, 3), (6, 3)), ((9, 3), (2, 3))]),
    (
        "gather_nd/batch",
        "gather_nd",
        "b, 4, 5",
        "b, n, 1",
        1,
        (),
        [((2, 4, 5), (2, 3, 1)), ((3, 4, 5), (3, 1, 1))],
    ),
    ("gather_nd/tuple-count", "gather_nd", "4, 5", "n, 2", 0, (), [((4, 5), (7, 2)), ((4, 5), (1, 2))]),
    ("gather_nd/indexed", "gather_nd", "v, w, 3", "n, 2", 0, (), [((4, 6, 3), (5, 2)), ((2, 9, 3), (3, 2))]),
]
IDS = [c[0] for c in CASES]
CASES = [c[1:] for c in CASES]


def _specs(data_shape: str, indices_shape: str, constraints=(), dtype=np.int32):
    scope = export.SymbolicScope(constraints)
    return (
        jax.ShapeDtypeStruct(export.symbolic_shape(data_shape, scope=scope), np.float32),
        jax.ShapeDtypeStruct(export.symbolic_shape(indices_shape, scope=scope), dtype),
    )


def _indices(op: str, data_shape, indices_shape, attr, out_of_bounds: bool, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if op == "gather_nd":
        sizes = data_shape[attr : attr + indices_shape[-1]]
        idx = np.stack([rng.integers(-s, s, indices_shape[:-1]) for s in sizes], axis=-1)
        if out_of_bounds:
            idx.reshape(-1, len(sizes))[::3, -1] = sizes[-1]
        return idx.astype(np.int32)
    size = data_shape[attr]
    idx = rng.integers(-size, size, indices_shape)
    if out_of_bounds:
        idx.reshape(-1)[::3] = -size - 1
    return idx.astype(np.int32)


def _host_callbacks(module: str) -> list[str]:
    """custom_calls other than the shape assertions that symbolic dims bring."""
    return [c for c in re.findall(r"custom_call @(\w+)", module) if c != "shape_assertion"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("op, data_shape, indices_shape, attr, constraints, concrete", CASES, ids=IDS)
def test_symbolic_shapes_export_serialize_and_run_at_every_size(
    op, data_shape, indices_shape, attr, constraints, concrete, mode
):
    fn = ops_table.OPS[op].fn
    f = jax.jit(lambda d, i: fn(d, i, attr, mode=mode))
    exported = export.export(f, platforms=PLATFORMS)(*_specs(data_shape, indices_shape, constraints))
    module = exported.mlir_module()
    assert len(re.findall(r'"stablehlo.gather"|stablehlo.dynamic_gather', module)) == 1
    assert "stablehlo.while" not in module and not _host_callbacks(module)
    assert not exported.ordered_effects and not exported.unordered_effects
    restored = export.deserialize(exported.serialize())
    ref = ops_table.OPS[op].reference
    for k, (d_shape, i_shape) in enumerate(concrete):
        data = np.random.default_rng(k).standard_normal(d_shape).astype(np.float32)
        idx = _indices(op, d_shape, i_shape, attr, out_of_bounds=mode != "promise_in_bounds", seed=k)
        expected = ref(data, idx, attr, mode=REFERENCE_MODE[mode], fill=np.nan)
        np.testing.assert_array_equal(np.asarray(restored.call(data, idx)), expected)


@pytest.mark.parametrize("op, data_shape, indices_shape, attr, constraints, concrete", CASES, ids=IDS)
def test_symbolic_shapes_export_the_gradient(op, data_shape, indices_shape, attr, constraints, concrete):
    fn = ops_table.OPS[op].fn
    grad = jax.jit(jax.grad(lambda d, i: fn(d, i, attr).sum()))
    exported = export.export(grad, platforms=PLATFORMS)(*_specs(data_shape, indices_shape, constraints))
    assert "stablehlo.scatter" in exported.mlir_module()
    restored = export.deserialize(exported.serialize())
    d_shape, i_shape = concrete[-1]
    data = np.zeros(d_shape, np.float32)
    idx = _indices(op, d_shape, i_shape, attr, out_of_bounds=True, seed=7)
    # The gradient counts how often each element was read; filled positions read nothing.
    iota = np.arange(data.size).reshape(d_shape)
    positions = ops_table.OPS[op].reference(iota, idx, attr, mode="fill", fill=-1)
    expected = np.bincount(positions[positions >= 0].ravel(), minlength=data.size).reshape(d_shape)
    np.testing.assert_array_equal(np.asarray(restored.call(data, idx)), expected)


def test_symbolic_export_int64_indices_with_x64():
    from tests.compat import enable_x64

    with enable_x64(True):
        f = jax.jit(lambda d, i: jax_gather.gather(d, i, 0))
        exported = export.export(f, platforms=PLATFORMS)(*_specs("v, 2", "n", dtype=np.int64))
        restored = export.deserialize(exported.serialize())
        data = np.arange(10.0, dtype=np.float32).reshape(5, 2)
        idx = np.array([4, -5, 2**32 + 1], np.int64)  # the last must not wrap to row 1
        out = np.asarray(restored.call(data, idx))
    np.testing.assert_array_equal(out[:2], [[8.0, 9.0], [0.0, 1.0]])
    assert np.isnan(out[2]).all()


def test_a_serialized_symbolic_program_can_return_an_in_bounds_flag():
    """The pattern for a verdict that survives serialization: the flag beside the result."""

    def f(d, i):
        plan = jax_gather.gather_nd_plan(d.shape, i.shape, 1)
        return jax_gather.gather_nd(d, i, 1, mode="fill"), jnp.all(jax_gather.in_bounds(plan, i))

    exported = export.export(jax.jit(f), platforms=PLATFORMS)(*_specs("b, 4, 5", "b, n, 1"))
    restored = export.deserialize(exported.serialize())
    data = np.ones((2, 4, 5), np.float32)
    out, ok = restored.call(data, np.array([[[3], [-4]], [[0], [1]]], np.int32))
    assert bool(ok) and out.shape == (2, 2, 5)
    out, ok = restored.call(data, np.array([[[3], [4]], [[0], [1]]], np.int32))
    assert not bool(ok) and np.isnan(np.asarray(out)[0, 1]).all()


def test_checkify_traces_the_check_with_symbolic_shapes():
    # In-process only: JAX cannot serialize checkify's error value (see the README).
    f = checkify.checkify(lambda d, i: jax_gather.gather_nd(d, i, 1), errors=checkify.user_checks)
    exported = export.export(jax.jit(f))(*_specs("b, v, 3", "b, n, 1"))
    data = np.ones((2, 4, 3), np.float32)
    error, _ = exported.call(data, np.array([[[1], [-4], [2]], [[0], [0], [3]]], np.int32))
    assert error.get() is None
    error, _ = exported.call(data, np.array([[[1], [-4], [2]], [[0], [9], [3]]], np.int32))
    assert error.get().startswith(
        "GatherND: indices[1, 1, 0] = 9 is out of bounds for axis 1 of size 4 (valid range [-4, 3]); "
        "it is component 0 of the index tuple indices[1, 1, :]"
    )
