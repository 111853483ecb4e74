"""The CPU lowering of "fill" (and traced "checked") for element gathers and short row lookups:
out-of-bounds indices read ``fill_value`` from a pad of data instead of a select after the
gather. Which gathers take it, that only the CPU lowering has it, that XLA fuses the pad (data is
never copied), that it is exact in every out-of-bounds direction and dtype, that it
differentiates as the select, and that a short lookup stays under the flop count below which
JAX runs a CPU program on the calling thread."""

import re

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import export
from jax.test_util import check_grads

import jax_gather
from jax_gather import plans
from jax_gather._lowering import CPU_LOWERINGS, SHORT_LOOKUP_INDICES, fills_from_padding
from tests import reference
from tests.compat import enable_x64
from tests.programs import bits, module_for, random_bits, run_with_cpu_devices


@pytest.mark.parametrize(
    "shape, dtype, plan, expected",
    [
        ((8, 32), np.float32, plans.gather_elements_plan((8, 32), (8, 32), 0), True),
        ((8, 32), np.int8, plans.gather_elements_plan((8, 32), (5, 40), 1), True),
        ((8, 32), np.bool_, plans.gather_elements_plan((8, 32), (8, 32), -1), True),
        ((4, 5, 6), np.float32, plans.gather_nd_plan((4, 5, 6), (9, 3), 0), True),  # full tuples
        ((4, 5, 6), np.int32, plans.gather_nd_plan((4, 5, 6), (4, 9, 2), 1), True),
        ((32,), np.float16, plans.gather_plan((32,), (7, 2), 0), True),  # Gather of 1-D data
        # Short row lookups: at most SHORT_LOOKUP_INDICES index components.
        ((4, 5, 6), np.float32, plans.gather_nd_plan((4, 5, 6), (9, 2), 0), True),
        (
            (4, 5, 6),
            np.float32,
            plans.gather_nd_plan((4, 5, 6), (SHORT_LOOKUP_INDICES // 2 + 1, 2), 0),
            False,
        ),
        ((100, 512), np.int8, plans.gather_plan((100, 512), (2, SHORT_LOOKUP_INDICES // 2), 0), True),
        ((100, 512), np.int8, plans.gather_plan((100, 512), (SHORT_LOOKUP_INDICES + 1,), 0), False),
        ((100, 16), np.float32, plans.gather_plan((100, 16), (7,), 1), True),  # columns
        ((100, 16), np.float32, plans.gather_plan((100, 16), (7,), 0), False),  # rows of 16: the narrow view
        ((100, 8), ml_dtypes.bfloat16, plans.gather_plan((100, 8), (7,), 0), False),
        ((8, 32), ml_dtypes.bfloat16, plans.gather_elements_plan((8, 32), (8, 32), 0), False),
        ((1024,), ml_dtypes.bfloat16, plans.gather_plan((1024,), (7,), 0), False),
    ],
)
def test_which_gathers_read_fill_from_padding(shape, dtype, plan, expected):
    assert fills_from_padding(shape, dtype, plan) == (expected and CPU_LOWERINGS)


def test_symbolic_dims_keep_the_select():
    (n,) = export.symbolic_shape("n")
    assert not fills_from_padding((n, 4), np.float32, plans.gather_elements_plan((n, 4), (n, 4), 1))
    assert not fills_from_padding((10,), np.float32, plans.gather_plan((10,), (n,), 0))


def test_cpu_reads_fill_from_padding_and_other_platforms_select():
    # (The traced check of "checked" has selects of its own until XLA drops it; the compiled
    # program of the default mode is tested below.)
    data, indices = np.zeros((6, 7), np.float32), np.zeros((6, 7), np.int32)
    fn = lambda d, i: jax_gather.gather_elements(d, i, 1, mode="fill")
    for platform in ("cpu", "cuda", "tpu"):
        module = module_for(fn, (data, indices), platform)
        assert module.count('"stablehlo.gather"') == 1, module
        on_cpu = platform == "cpu" and CPU_LOWERINGS
        assert ("stablehlo.pad" in module) == on_cpu, (platform, module)
        assert ("stablehlo.select" in module) != on_cpu, (platform, module)


def _entry_ops(compiled_text: str) -> list[str]:
    """The opcodes of the compiled entry computation (fusions are not looked into)."""
    entry = compiled_text[compiled_text.index("\nENTRY") :]
    ops = re.findall(r"= \S+ (\S+?)\(", entry)
    return [op for op in ops if op not in ("parameter", "constant")]


@pytest.mark.skipif(not CPU_LOWERINGS, reason="the padded lowering needs JAX 0.7.0 (lax.platform_dependent)")
@pytest.mark.parametrize(
    "name, fn, data_shape, indices",
    [
        (
            "gather_elements",
            lambda d, i: jax_gather.gather_elements(d, i, 0),
            (64, 48),
            np.zeros((64, 48), np.int32),
        ),
        (
            "gather_nd scalars",
            lambda d, i: jax_gather.gather_nd(d, i),
            (64, 48),
            np.zeros((1000, 2), np.int32),
        ),
        (
            "large data, few reads",
            lambda d, i: jax_gather.gather_nd(d, i),
            (2048, 2048),
            np.zeros((5, 2), np.int32),
        ),
        (
            "vmap",
            jax.vmap(lambda d, i: jax_gather.gather_elements(d, i, 1)),
            (4, 64, 48),
            np.zeros((4, 64, 48), np.int32),
        ),
        (
            "gather_nd batch_dims=1",
            lambda d, i: jax_gather.gather_nd(d, i, 1),
            (8, 64, 48),
            np.zeros((8, 100, 2), np.int32),
        ),
        ("short row lookup", lambda d, i: jax_gather.gather(d, i, 0), (2048, 512), np.zeros((64,), np.int32)),
        (
            "short column lookup",
            lambda d, i: jax_gather.gather(d, i, 1),
            (512, 2048),
            np.zeros((16,), np.int32),
        ),
        (
            "gather_nd short rows",
            lambda d, i: jax_gather.gather_nd(d, i),
            (64, 64, 96),
            np.zeros((32, 2), np.int32),
        ),
        (
            "vmap short row lookup",
            jax.vmap(lambda d, i: jax_gather.gather(d, i, 0)),
            (4, 256, 96),
            np.zeros((4, 20), np.int32),
        ),
    ],
)
def test_the_pad_is_fused_into_the_gather(name, fn, data_shape, indices):
    # The lowering is only cheaper because XLA never materialises the padded copy of data.
    cpu = jax.devices("cpu")[0]  # the lowering is CPU-only; on a GPU host jit follows the inputs
    data = jax.device_put(jnp.zeros(data_shape, jnp.float32), cpu)
    text = jax.jit(fn).lower(data, jax.device_put(indices, cpu)).compile().as_text()
    assert " pad(" in text, name  # the padded lowering was taken
    assert "select" not in text, name
    ops = _entry_ops(text)
    assert ops and set(ops) <= {"fusion", "bitcast"}, (name, ops)


@pytest.mark.skipif(not CPU_LOWERINGS, reason="the padded lowering needs JAX 0.7.0 (lax.platform_dependent)")
def test_long_row_lookups_keep_the_select():
    cpu = jax.devices("cpu")[0]
    data = jax.device_put(jnp.zeros((2048, 512), jnp.float32), cpu)
    ids = jax.device_put(np.zeros((SHORT_LOOKUP_INDICES + 1,), np.int32), cpu)
    text = jax.jit(lambda d, i: jax_gather.gather(d, i, 0)).lower(data, ids).compile().as_text()
    assert "select" in text and " pad(" not in text


@pytest.mark.skipif(not CPU_LOWERINGS, reason="the padded lowering needs JAX 0.7.0 (lax.platform_dependent)")
@pytest.mark.parametrize("mode", ["checked", "fill"])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_a_short_lookup_stays_under_the_inline_flop_count(mode, index_dtype):
    # JAX's CPU client runs a program on the calling thread only when XLA's cost analysis
    # counts fewer than 1000 flops in it; the select of the fill would count one per element.
    with enable_x64(index_dtype == np.int64):
        cpu = jax.devices("cpu")[0]
        data = jax.device_put(jnp.zeros((50000, 512), jnp.float32), cpu)
        ids = jax.device_put(np.zeros((SHORT_LOOKUP_INDICES,), index_dtype), cpu)
        compiled = jax.jit(lambda d, i: jax_gather.gather(d, i, 0, mode=mode)).lower(data, ids).compile()
        cost = compiled.cost_analysis()
        cost = cost[0] if isinstance(cost, list) else cost
        assert cost["flops"] < 1000, cost["flops"]


def _out_of_bounds_indices(rng, size, shape, dtype=np.int32):
    """Indices of every kind for an axis of ``size``: in range, negative, just outside on both
    ends, and at the ends of the dtype."""
    info = np.iinfo(dtype)
    edges = [0, size - 1, -1, -size, size, -size - 1, 2 * size, info.min, info.max]
    values = rng.integers(-size - 2, size + 2, shape).astype(dtype)
    flat = values.reshape(-1)
    flat[: len(edges)] = edges[: flat.size]
    return values


@pytest.mark.parametrize(
    "dtype, fill, expected_fill",
    [
        (np.float32, -7.5, -7.5),
        (np.float32, None, np.nan),
        (np.float16, 3.0, 3.0),
        (np.int8, -3, -3),
        (np.uint8, 200, 200),
        (np.bool_, True, True),
        (np.int32, None, -(2**31)),
        (np.complex64, 2 - 1j, 2 - 1j),
        (np.float64, -0.0, -0.0),
        (np.int64, 7, 7),
    ],
)
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_padded_fill_matches_the_reference(dtype, fill, expected_fill, jit):
    wide = np.dtype(dtype).itemsize == 8
    with enable_x64(wide):
        rng = np.random.default_rng(0)
        data = random_bits(rng, dtype, (6, 7, 5))
        index_dtype = np.int64 if wide else np.int32
        ge = _out_of_bounds_indices(rng, 7, (6, 9, 5), index_dtype)
        ge_block = _out_of_bounds_indices(rng, 7, (4, 3, 2), index_dtype)  # reads data[:4, :, :2]
        nd = np.stack([_out_of_bounds_indices(rng, s, (40,), index_dtype) for s in (6, 7, 5)], axis=-1)
        nd_bd = np.stack([_out_of_bounds_indices(rng, s, (6, 30), index_dtype) for s in (7, 5)], axis=-1)
        rows = _out_of_bounds_indices(rng, 6, (3, 5), index_dtype)
        cols = _out_of_bounds_indices(rng, 7, (11,), index_dtype)
        nd_rows = np.stack([_out_of_bounds_indices(rng, s, (12,), index_dtype) for s in (6, 7)], axis=-1)
        # (op, its attribute, indices, the reference); the last three are short row lookups:
        # rows, columns, and GatherND rows by tuples.
        calls = [
            (jax_gather.gather_elements, 1, ge, reference.gather_elements),
            (jax_gather.gather_elements, 1, ge_block, reference.gather_elements),
            (jax_gather.gather_nd, 0, nd, reference.gather_nd),
            (jax_gather.gather_nd, 1, nd_bd, reference.gather_nd),
            (jax_gather.gather, 0, rows, reference.gather),
            (jax_gather.gather, 1, cols, reference.gather),
            (jax_gather.gather_nd, 0, nd_rows, reference.gather_nd),
        ]
        for op, attribute, indices, ref in calls:
            fn = lambda d, i: op(d, i, attribute, mode="fill", fill_value=fill)
            out = np.asarray((jax.jit(fn) if jit else fn)(data, indices))
            expected = ref(data, indices, attribute, mode="fill", fill=expected_fill)
            assert out.dtype == data.dtype
            np.testing.assert_array_equal(bits(out), bits(expected.astype(dtype)))


def test_wide_indices_past_int32_read_the_fill():
    with enable_x64(True):
        data = np.arange(12, dtype=np.float32).reshape(3, 4)
        indices = np.array([[0, 2**32 + 1], [-(2**32) - 1, 1], [2**62, -(2**63)]], np.int64)
        out = jax.jit(lambda d, i: jax_gather.gather_nd(d, i, mode="fill", fill_value=-1.0))(data, indices)
        np.testing.assert_array_equal(np.asarray(out), [-1.0, -1.0, -1.0])


def _fill_mode_sum(data, fill, indices, cotangent):
    return jnp.sum(jax_gather.gather_elements(data, indices, 1, mode="fill", fill_value=fill) * cotangent)


def test_padded_fill_differentiates_as_the_select():
    rng = np.random.default_rng(3)
    data = rng.standard_normal((5, 6)).astype(np.float32)
    indices = _out_of_bounds_indices(rng, 6, (5, 8))
    cotangent = rng.standard_normal((5, 8)).astype(np.float32)
    grad = jax.jit(jax.grad(_fill_mode_sum, argnums=(0, 1)))
    d_data, d_fill = grad(data, jnp.float32(-2.0), indices, cotangent)
    inside = (indices >= -6) & (indices < 6)
    expected = np.zeros_like(data)
    rows = np.broadcast_to(np.arange(5)[:, None], indices.shape)
    np.add.at(expected, (rows[inside], indices[inside] % 6), cotangent[inside])
    np.testing.assert_allclose(np.asarray(d_data), expected, rtol=1e-6)
    np.testing.assert_allclose(float(d_fill), cotangent[~inside].sum(), rtol=1e-5)
    # Forward and reverse mode, to second order, against finite differences.
    f = lambda d, fill: _fill_mode_sum(d, fill, indices, cotangent)
    with enable_x64(True):
        check_grads(f, (data.astype(np.float64), np.float64(-2.0)), order=2, modes=("fwd", "rev"))


@pytest.mark.parametrize("axis", [0, 1, "nd"])
def test_short_row_lookups_differentiate_as_the_select(axis):
    rng = np.random.default_rng(4)
    data = rng.standard_normal((5, 6, 3)).astype(np.float32)
    if axis == "nd":
        indices = np.stack([_out_of_bounds_indices(rng, s, (9,)) for s in (5, 6)], axis=-1)
        op = lambda d, fill: jax_gather.gather_nd(d, indices, mode="fill", fill_value=fill)
        inside = np.all((indices >= -np.array([5, 6])) & (indices < np.array([5, 6])), axis=-1)
        out_shape = (9, 3)
    else:
        indices = _out_of_bounds_indices(rng, data.shape[axis], (4, 2))
        op = lambda d, fill: jax_gather.gather(d, indices, axis, mode="fill", fill_value=fill)
        inside = (indices >= -data.shape[axis]) & (indices < data.shape[axis])
        out_shape = data.shape[:axis] + indices.shape + data.shape[axis + 1 :]
    cotangent = rng.standard_normal(out_shape).astype(np.float32)
    f = lambda d, fill: jnp.sum(op(d, fill) * cotangent)
    d_data, d_fill = jax.jit(jax.grad(f, argnums=(0, 1)))(data, jnp.float32(-2.0))
    # The reference: the cotangent of every in-bounds read added to the row it read.
    expected, fill_grad = np.zeros_like(data), 0.0
    for pos in np.ndindex(*indices.shape[:-1] if axis == "nd" else indices.shape):
        if axis == "nd":
            got, at = cotangent[pos], tuple(int(c) % s for c, s in zip(indices[pos], (5, 6)))
        elif axis == 0:
            got, at = cotangent[pos], (int(indices[pos]) % 5,)
        else:
            got, at = cotangent[(slice(None), *pos)], (slice(None), int(indices[pos]) % 6)
        if inside[pos]:
            expected[at] += got
        else:
            fill_grad += got.sum()
    np.testing.assert_allclose(np.asarray(d_data), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(float(d_fill), fill_grad, rtol=1e-5, atol=1e-6)
    with enable_x64(True):
        check_grads(
            lambda d, fill: f(d, fill),
            (data.astype(np.float64), np.float64(-2.0)),
            order=2,
            modes=("fwd", "rev"),
        )


def test_padded_fill_under_vmap_and_checkify():
    data = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    indices = np.array([[[0, 4, -1, -5]] * 3, [[1, 2, 3, -4]] * 3])
    out = jax.jit(jax.vmap(lambda d, i: jax_gather.gather_elements(d, i, 1, mode="fill", fill_value=-1.0)))(
        data, indices
    )
    expected = np.stack(
        [reference.gather_elements(data[b], indices[b], 1, mode="fill", fill=-1.0) for b in range(2)]
    )
    np.testing.assert_array_equal(np.asarray(out), expected)
    checked = jax_gather.checked(jax.jit(lambda d, i: jax_gather.gather_elements(d, i, 2)))
    with pytest.raises(IndexError, match=r"indices\[0, 0, 1\] = 4 is out of bounds for axis 2 of size 4"):
        checked(data, indices)


_MESH_CHILD = """
import re, jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import jax_gather
from jax_gather import plans
from jax_gather._lowering import fills_from_padding
assert len(jax.devices("cpu")) == 8
plan = plans.gather_elements_plan((64, 48), (64, 48), 1)
print("padded:", fills_from_padding((64, 48), np.float32, plan))
mesh = Mesh(np.array(jax.devices()), ("x",))
put = lambda x: jax.device_put(x, NamedSharding(mesh, P(None, "x")))
text = jax.jit(lambda d, i: jax_gather.gather_elements(d, i, 1, mode="fill")).lower(
    put(jnp.zeros((64, 48))), put(jnp.zeros((64, 48), jnp.int32))).compile().as_text()
print("collective-permute:", "collective-permute" in text)
"""


def test_several_cpu_devices_keep_the_select():
    # Padding the sharded indexed axis would add a collective-permute of data's blocks.
    out = run_with_cpu_devices(_MESH_CHILD)
    assert "padded: False" in out and "collective-permute: False" in out, out
