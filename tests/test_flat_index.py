"""The CPU lowering of element gathers by one linear index. GatherND over two or more axes
gathers by it: data's indexed dims flattened into one, each index tuple combined into one
offset after every component is clamped to its own axis. Every element gather of data of
rank two or more (GatherElements, GatherND) differentiates by it: data flattened whole, a
batching dim's coordinate taken from the output position, so the backward pass is one
scatter by one index. Which gathers take it, that only the CPU lowering has it, that the
offset is int64 where int32 would wrap (and the gather stays as it is where int64 is off),
that it is exact in every mode and dtype it takes, and that gradients are right."""

import re

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import export
from jax.test_util import check_grads

import jax_gather
from jax_gather import _lowering, plans
from jax_gather._lowering import CPU_LOWERINGS, flat_forward, flat_index_dtype
from tests import reference
from tests.compat import enable_x64
from tests.programs import bits, module_for, random_bits, run_with_cpu_devices

I32 = jnp.int32
# 2**31 + 65536 elements: one past what an int32 offset addresses, without allocating them.
HUGE = (32769, 65536)


@pytest.mark.parametrize(
    "shape, plan, linear, forward",
    [
        ((1024, 1024), plans.gather_nd_plan((1024, 1024), (9, 2)), I32, True),
        ((4, 5, 6), plans.gather_nd_plan((4, 5, 6), (4, 9, 2), 1), I32, True),  # after batch dims
        ((4, 5, 6, 7), plans.gather_nd_plan((4, 5, 6, 7), (4, 5, 9, 2), 2), I32, True),
        ((4, 5, 6), plans.gather_nd_plan((4, 5, 6), (9, 3)), I32, True),  # three and four axes
        ((4, 5, 6, 7), plans.gather_nd_plan((4, 5, 6, 7), (9, 4)), I32, True),
        ((4, 5), plans.gather_nd_plan((4, 5), (4, 9, 1), 1), I32, False),  # one component
        ((4, 5), plans.gather_elements_plan((4, 5), (4, 5), 1), I32, False),
        ((4, 5, 6), plans.gather_elements_plan((4, 5, 6), (4, 2, 6), 0), I32, False),
        ((4, 5, 6), plans.gather_nd_plan((4, 5, 6), (9, 2)), None, False),  # rows
        ((4, 5, 6), plans.gather_nd_plan((4, 5, 6), (4, 9, 1), 1), None, False),  # rows
        ((40,), plans.gather_plan((40,), (9,), 0), None, False),  # already one dim
        ((40,), plans.gather_nd_plan((40,), (9, 1)), None, False),
        ((4, 5), plans.gather_plan((4, 5), (9,), 1), None, False),  # rows
        (HUGE, plans.gather_nd_plan(HUGE, (9, 2)), None, False),  # int32 would wrap, no x64
        (HUGE, plans.gather_elements_plan(HUGE, (9, 65536), 0), None, False),
    ],
)
def test_which_gathers_take_one_linear_index(shape, plan, linear, forward):
    assert flat_index_dtype(shape, plan) == (linear if CPU_LOWERINGS else None)
    assert flat_forward(shape, plan) == (forward and CPU_LOWERINGS)


def test_int64_offsets_where_int32_would_wrap():
    with enable_x64(True):
        assert flat_index_dtype(HUGE, plans.gather_nd_plan(HUGE, (9, 2))) == (
            jnp.int64 if CPU_LOWERINGS else None
        )
        assert flat_index_dtype((46340, 46340), plans.gather_nd_plan((46340, 46340), (9, 2))) == (
            I32 if CPU_LOWERINGS else None
        )  # 46340**2 < 2**31
        plan = plans.gather_elements_plan(HUGE, (9, 65536), 0)
        assert flat_index_dtype(HUGE, plan) == (jnp.int64 if CPU_LOWERINGS else None)


def test_symbolic_dims_keep_the_tuple_gather():
    (n,) = export.symbolic_shape("n")
    assert flat_index_dtype((n, 4), plans.gather_nd_plan((n, 4), (9, 2))) is None
    assert flat_index_dtype((3, 4), plans.gather_nd_plan((3, 4), (n, 2))) is None
    assert flat_index_dtype((n, 4), plans.gather_elements_plan((n, 4), (n, 4), 1)) is None


def _gathers(module: str) -> list[tuple[str, str]]:
    """(operand type, indices type) of every gather in a StableHLO module."""
    return re.findall(r'"stablehlo.gather"\(.*?\(tensor<([^>]*)>, tensor<([^>]*)>\)', module)


@pytest.mark.parametrize("mode", ["promise_in_bounds", "clip"])
def test_cpu_gathers_the_flattened_data_and_other_platforms_the_tuples(mode):
    data, indices = np.zeros((6, 7, 5), np.float32), np.zeros((6, 30, 2), np.int32)
    fn = lambda d, i: jax_gather.gather_nd(d, i, 1, mode=mode)
    for platform in ("cpu", "cuda", "tpu"):
        gathers = _gathers(module_for(fn, (data, indices), platform))
        flat = platform == "cpu" and CPU_LOWERINGS
        expected = ("6x35xf32", "6x30x1xi32") if flat else ("6x7x5xf32", "6x30x2xi32")
        assert gathers == [expected], (platform, gathers)


def test_bfloat16_fill_selects_after_the_linear_gather():
    # bfloat16 keeps the select (its padded fill measured slower); the gather under it is linear.
    data, indices = np.zeros((7, 5), ml_dtypes.bfloat16), np.zeros((30, 2), np.int32)
    module = module_for(lambda d, i: jax_gather.gather_nd(d, i, mode="fill"), (data, indices), "cpu")
    assert _gathers(module) == [("35xbf16", "30x1xi32") if CPU_LOWERINGS else ("7x5xbf16", "30x2xi32")]
    assert "stablehlo.select" in module


@pytest.mark.skipif(not CPU_LOWERINGS, reason="the linear lowering needs JAX 0.7.0 (lax.platform_dependent)")
def test_offsets_past_int32_are_int64_and_without_x64_the_tuples_stay():
    # Lowered from abstract shapes: nothing of the 2 GiB table is allocated.
    fn = lambda d, i: jax_gather.gather_nd(d, i, mode="promise_in_bounds")
    table = jax.ShapeDtypeStruct(HUGE, jnp.int8)
    with enable_x64(True):
        module = module_for(fn, (table, jax.ShapeDtypeStruct((9, 2), jnp.int64)), "cpu")
        assert _gathers(module) == [(f"{HUGE[0] * HUGE[1]}xi8", "9x1xi64")], module
    module = module_for(fn, (table, jax.ShapeDtypeStruct((9, 2), jnp.int32)), "cpu")
    assert _gathers(module) == [(f"{HUGE[0]}x{HUGE[1]}xi8", "9x2xi32")], module


def test_int64_offsets_compute_the_same_elements(monkeypatch):
    # The int64 arithmetic on a table small enough to run: the dtype forced, the result checked.
    monkeypatch.setattr(_lowering, "_linear_dtype", lambda shape: jnp.int64)
    with enable_x64(True):
        rng = np.random.default_rng(4)
        data = rng.standard_normal((3, 5, 6)).astype(np.float32)
        indices = np.stack([rng.integers(-s, s, (3, 20)) for s in (5, 6)], axis=-1)
        fn = jax.jit(lambda d, i: jax_gather.gather_nd(d, i, 1, mode="promise_in_bounds"))
        assert _gathers(fn.lower(data, indices).as_text()) == [("3x30xf32", "3x20x1xi64")]
        np.testing.assert_array_equal(np.asarray(fn(data, indices)), reference.gather_nd(data, indices, 1))


def _tuples(rng, sizes, lead, outside):
    """Index tuples of ``lead`` shape into axes of ``sizes``: negatives included, and with
    ``outside`` every kind of out-of-bounds component (just past each end, far, the dtype's ends)."""
    parts = []
    for size in sizes:
        part = rng.integers(-size, size, lead)
        if outside:
            edges = [
                size,
                -size - 1,
                3 * size,
                np.iinfo(np.int32).min,
                np.iinfo(np.int32).max,
                size - 1,
                -size,
            ]
            flat = part.reshape(-1)
            flat[rng.permutation(flat.size)[: len(edges)]] = edges
        parts.append(part)
    return np.stack(parts, axis=-1).astype(np.int32)


# Eager calls run the same jitted program after the host check: two dtypes suffice there.
@pytest.mark.parametrize(
    "dtype, jit",
    [
        *(
            (dtype, True)
            for dtype in (
                np.float32,
                np.int8,
                np.uint16,
                np.float16,
                ml_dtypes.bfloat16,
                np.bool_,
                np.float64,
                np.complex64,
            )
        ),
        (np.float32, False),
        (ml_dtypes.bfloat16, False),
    ],
    ids=lambda v: ("jit" if v else "eager") if isinstance(v, bool) else np.dtype(v).name,
)
def test_every_mode_matches_the_reference(dtype, jit):
    with enable_x64(np.dtype(dtype).itemsize == 8):
        _every_mode_matches_the_reference(dtype, jit)


def _every_mode_matches_the_reference(dtype, jit):
    rng = np.random.default_rng(0)
    fill = np.asarray(True if dtype == np.bool_ else 3, dtype)
    cases = []
    # Two, three and four indexed axes after 0, 1 or 2 batch dims.
    for shape, batch_dims in [
        ((5, 6), 0),
        ((3, 5, 6), 1),
        ((3, 4, 5, 6), 2),
        ((4, 5, 6), 0),
        ((3, 4, 5, 6), 0),
    ]:
        data = random_bits(rng, dtype, shape)
        sizes = shape[batch_dims:]
        inside = _tuples(rng, sizes, shape[:batch_dims] + (7, 5), outside=False)
        outside = _tuples(rng, sizes, shape[:batch_dims] + (7, 5), outside=True)
        cases += [
            (data, batch_dims, "promise_in_bounds", inside, reference.gather_nd(data, inside, batch_dims)),
            (data, batch_dims, "checked", inside, reference.gather_nd(data, inside, batch_dims)),
            (data, batch_dims, "clip", outside, reference.gather_nd(data, outside, batch_dims, mode="clip")),
            (
                data,
                batch_dims,
                "fill",
                outside,
                reference.gather_nd(data, outside, batch_dims, mode="fill", fill=fill),
            ),
        ]
    for data, batch_dims, mode, indices, expected in cases:
        fn = lambda d, i: jax_gather.gather_nd(d, i, batch_dims, mode=mode, fill_value=fill)
        out = (jax.jit(fn) if jit else fn)(data, indices)
        label = f"{data.shape} batch_dims={batch_dims} {mode}"
        assert out.dtype == data.dtype and out.shape == expected.shape, label
        np.testing.assert_array_equal(bits(out), bits(expected.astype(dtype)), err_msg=label)


def test_under_vmap_and_checkify():
    rng = np.random.default_rng(1)
    data = rng.standard_normal((4, 6, 7)).astype(np.float32)
    indices = _tuples(rng, (6, 7), (4, 9), outside=False)
    out = jax.jit(jax.vmap(lambda d, i: jax_gather.gather_nd(d, i, mode="promise_in_bounds")))(data, indices)
    expected = np.stack([reference.gather_nd(data[b], indices[b], 0) for b in range(4)])
    np.testing.assert_array_equal(np.asarray(out), expected)
    indices[2, 3] = (1, 7)
    checked = jax_gather.checked(jax.jit(lambda d, i: jax_gather.gather_nd(d, i, 1)))
    with pytest.raises(IndexError, match=r"indices\[2, 3, 1\] = 7 is out of bounds for axis 2 of size 7"):
        checked(data, indices)


def _clip_sum(data, indices, cotangent):
    return jnp.sum(jax_gather.gather_nd(data, indices, 1, mode="clip") * cotangent)


def test_gradient_scatters_into_the_flattened_data():
    rng = np.random.default_rng(2)
    data = rng.standard_normal((3, 5, 6)).astype(np.float32)
    indices = _tuples(rng, (5, 6), (3, 40), outside=True)  # repeats, negatives, clipped ones
    cotangent = rng.standard_normal((3, 40)).astype(np.float32)
    grad = jax.jit(jax.grad(_clip_sum))(data, indices, cotangent)
    expected = np.zeros_like(data)
    rows = np.clip(indices[..., 0], -5, 4) % 5
    cols = np.clip(indices[..., 1], -6, 5) % 6
    np.add.at(expected, (np.broadcast_to(np.arange(3)[:, None], rows.shape), rows, cols), cotangent)
    np.testing.assert_allclose(np.asarray(grad), expected, rtol=1e-6, atol=1e-6)
    # The derivative's gather is linear into the whole of data (its batch dim flattened too):
    # on CPU the transpose is one scatter by one index (measured faster than the tuple
    # scatter); elsewhere the tuples.
    for platform in ("cpu", "cuda"):
        module = module_for(jax.grad(_clip_sum), (data, indices, cotangent), platform)
        linear = platform == "cpu" and CPU_LOWERINGS
        scatter = (
            "(tensor<90xf32>, tensor<3x40x1xi32>, tensor<3x40xf32>)"
            if linear
            else "(tensor<3x5x6xf32>, tensor<3x40x2xi32>, tensor<3x40xf32>)"
        )
        assert module.count('"stablehlo.scatter"') == 1 and scatter in module, (platform, module)
    # Forward and reverse mode to second order. The gather is linear in data, so a finite
    # difference of step 1 is exact but for float32 rounding.
    check_grads(
        lambda d: _clip_sum(d, indices, cotangent),
        (data,),
        order=2,
        modes=("fwd", "rev"),
        eps=1.0,
        atol=1e-4,
        rtol=1e-4,
    )


def test_default_mode_gradient_of_a_traced_fill():
    # The padded fill differentiates as the select, whose gather is the linear one.
    rng = np.random.default_rng(5)
    data = rng.standard_normal((5, 6)).astype(np.float32)
    indices = _tuples(rng, (5, 6), (50,), outside=True)
    cotangent = rng.standard_normal((50,)).astype(np.float32)
    f = lambda d, fill: jnp.sum(jax_gather.gather_nd(d, indices, mode="fill", fill_value=fill) * cotangent)
    d_data, d_fill = jax.jit(jax.grad(f, argnums=(0, 1)))(data, jnp.float32(2.0))
    inside = np.all((indices >= -np.array([5, 6])) & (indices < np.array([5, 6])), axis=-1)
    expected = np.zeros_like(data)
    np.add.at(expected, (indices[inside, 0] % 5, indices[inside, 1] % 6), cotangent[inside])
    np.testing.assert_allclose(np.asarray(d_data), expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(float(d_fill), cotangent[~inside].sum(), rtol=1e-5)


def _scatters(module: str) -> list[tuple[str, str]]:
    """(operand type, indices type) of every scatter in a StableHLO module."""
    # The types follow the scatter's update region: the first "}) : (" after the op.
    return re.findall(r'"stablehlo.scatter"\(.*?\}\) : \(tensor<([^>]*)>, tensor<([^>]*)>', module, re.DOTALL)


def _elements_reference_grad(data_shape, indices, axis, cotangent, mode):
    """d/d data of sum(gather_elements(data, indices, axis, mode) * cotangent), by NumPy."""
    size = data_shape[axis]
    raw = indices.astype(np.int64)
    inside = (raw >= -size) & (raw < size)
    pos = np.clip(raw, -size, size - 1) % size
    coords = list(np.indices(indices.shape))
    coords[axis] = pos
    keep = np.ones_like(inside) if mode == "clip" else inside
    grad = np.zeros(data_shape)
    np.add.at(grad, tuple(c[keep] for c in coords), cotangent[keep])
    return grad


@pytest.mark.parametrize("mode", ["checked", "fill", "clip", "promise_in_bounds"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements_gradient_scatters_by_one_linear_index(mode, axis):
    rng = np.random.default_rng(6)
    data = rng.standard_normal((4, 5, 6)).astype(np.float32)
    shape = [3, 4, 5]  # smaller than data on the non-axis dims: a leading block of data is read
    shape[axis] = 7
    size = data.shape[axis]
    indices = rng.integers(-size, size, shape).astype(np.int32)
    if mode in ("fill", "clip"):
        indices.reshape(-1)[:6] = [
            size,
            -size - 1,
            4 * size,
            np.iinfo(np.int32).min,
            np.iinfo(np.int32).max,
            -1,
        ]
    cotangent = rng.standard_normal(shape).astype(np.float32)
    loss = lambda d: jnp.sum(
        jax_gather.gather_elements(d, indices, axis, mode=mode, fill_value=0.0) * cotangent
    )
    grad = jax.jit(jax.grad(loss))(data)
    expected = _elements_reference_grad(data.shape, indices, axis % 3, cotangent, mode)
    np.testing.assert_allclose(np.asarray(grad), expected, rtol=1e-5, atol=1e-5)
    # The forward gather keeps its batching dims everywhere; the CPU backward is one scatter by
    # one index into the block of data read, flattened (3 x 4 x 5 with the axis whole).
    block = [3, 4, 5]
    block[axis] = size
    for platform in ("cpu", "cuda"):
        module = module_for(jax.grad(loss), (data,), platform)
        linear = platform == "cpu" and CPU_LOWERINGS
        scatter = (
            (f"{np.prod(block)}xf32", f"{'x'.join(map(str, shape))}x1xi32")
            if linear
            else ("x".join(map(str, block)) + "xf32", f"{'x'.join(map(str, shape))}x1xi32")
        )
        assert _scatters(module) == [scatter], (platform, _scatters(module))
        assert "stablehlo.gather" not in module or all(
            operand.count("x") == 3 for operand, _ in _gathers(module)
        ), platform


def test_gather_elements_gradient_under_vmap_and_to_second_order():
    rng = np.random.default_rng(7)
    data = rng.standard_normal((3, 5, 6)).astype(np.float32)
    indices = rng.integers(-6, 6, (3, 5, 8)).astype(np.int32)
    cotangent = rng.standard_normal((3, 5, 8)).astype(np.float32)
    loss = lambda d, i, c: jnp.sum(jax_gather.gather_elements(d, i, -1, mode="clip") * c)
    grads = jax.jit(jax.vmap(jax.grad(loss)))(data, indices, cotangent)
    for b in range(3):
        expected = _elements_reference_grad(data.shape[1:], indices[b], 1, cotangent[b], "clip")
        np.testing.assert_allclose(np.asarray(grads[b]), expected, rtol=1e-5, atol=1e-5)
    # Forward and reverse mode, through the linear gather's own derivative (step 1 is exact).
    check_grads(
        lambda d: loss(d, indices[0], cotangent[0]),
        (data[0],),
        order=2,
        modes=("fwd", "rev"),
        eps=1.0,
        atol=1e-4,
        rtol=1e-4,
    )


def test_bfloat16_gather_elements_gradient():
    # bfloat16 selects its fill after the gather; the select's gather differentiates linearly too.
    rng = np.random.default_rng(8)
    data = rng.standard_normal((6, 7)).astype(ml_dtypes.bfloat16)
    indices = rng.integers(-9, 9, (6, 7)).astype(np.int32)  # some out of bounds: filled
    cotangent = rng.standard_normal((6, 7)).astype(np.float32)
    loss = lambda d: jnp.sum(
        jax_gather.gather_elements(d, indices, 0, mode="fill", fill_value=0.0).astype(jnp.float32) * cotangent
    )
    grad = jax.jit(jax.grad(loss))(data)
    expected = _elements_reference_grad(
        data.shape, indices, 0, cotangent.astype(ml_dtypes.bfloat16).astype(np.float64), "fill"
    )
    np.testing.assert_allclose(np.asarray(grad).astype(np.float64), expected, rtol=2e-2, atol=2e-2)
    if CPU_LOWERINGS:
        assert _scatters(module_for(jax.grad(loss), (data,), "cpu")) == [("42xbf16", "6x7x1xi32")]


@pytest.mark.skipif(not CPU_LOWERINGS, reason="the linear lowering needs JAX 0.7.0 (lax.platform_dependent)")
def test_gather_elements_gradient_offsets_past_int32_are_int64():
    # Lowered from abstract shapes: nothing of the 8 GiB table is allocated.
    loss = lambda d, i: jnp.sum(jax_gather.gather_elements(d, i, 0, mode="clip"))
    table = jax.ShapeDtypeStruct(HUGE, jnp.float32)
    with enable_x64(True):
        module = module_for(jax.grad(loss), (table, jax.ShapeDtypeStruct((9, HUGE[1]), jnp.int64)), "cpu")
        assert _scatters(module) == [(f"{HUGE[0] * HUGE[1]}xf32", f"9x{HUGE[1]}x1xi64")], _scatters(module)
    module = module_for(jax.grad(loss), (table, jax.ShapeDtypeStruct((9, HUGE[1]), jnp.int32)), "cpu")
    assert _scatters(module) == [(f"{HUGE[0]}x{HUGE[1]}xf32", f"9x{HUGE[1]}x1xi32")], _scatters(module)


_MESH_CHILD = """
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import jax_gather
from jax_gather import plans
from jax_gather._lowering import flat_index_dtype
assert len(jax.devices("cpu")) == 8
print("linear:", flat_index_dtype((64, 48), plans.gather_nd_plan((64, 48), (40, 2))))
print("linear elements:", flat_index_dtype((64, 48), plans.gather_elements_plan((64, 48), (64, 48), 1)))
mesh = Mesh(np.array(jax.devices()), ("x",))
data = jax.device_put(jnp.zeros((64, 48)), NamedSharding(mesh, P(None, "x")))
indices = jax.device_put(jnp.zeros((40, 2), jnp.int32), NamedSharding(mesh, P()))
fn = jax.jit(lambda d, i: jax_gather.gather_nd(d, i, mode="promise_in_bounds"))
print("all-gather:", "all-gather" in fn.lower(data, indices).compile().as_text())
"""


def test_several_cpu_devices_keep_the_tuple_gather():
    # Flattening dims of which the second is sharded would gather data's blocks onto every device.
    out = run_with_cpu_devices(_MESH_CHILD)
    assert "linear: None" in out and "linear elements: None" in out, out
    assert "all-gather: False" in out, out
