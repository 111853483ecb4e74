"""jit, vmap, grad/jvp, recompilation and the shape of the lowered program."""

import dataclasses
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

import jax_gather
from jax_gather import ops
from jax_gather._arguments import Mode
from tests import ops_table
from tests.compat import enable_x64
from tests.programs import check_linear_to_second_order, counting_compiles

RNG = np.random.default_rng(0)

# (id, op, data shape, indices, attribute): one representative case per lowering.
CASES = [
    ("gather_axis0", "gather", (5, 3), np.array([[0, -1], [4, 2]]), 0),
    ("gather_axis1", "gather", (4, 5, 2), np.array([1, -2, 1]), 1),
    ("gather_scalar_index", "gather", (4, 5), np.array(-3), -1),
    (
        "elements_axis0",
        "gather_elements",
        (3, 4),
        np.array([[2, -1, 0, 1], [0, 0, -3, 2], [1, 1, 1, 1], [2, 0, 1, -2]]),
        0,
    ),
    ("elements_smaller", "gather_elements", (3, 4, 2), np.array([[[3, 0], [-4, 1]], [[1, 1], [2, -1]]]), 1),
    ("nd_scalars", "gather_nd", (3, 4), np.array([[0, 1], [2, -1], [-3, 3]]), 0),
    ("nd_rows", "gather_nd", (3, 4, 2), np.array([[2], [0], [-1]]), 0),
    ("nd_batch", "gather_nd", (2, 3, 4), np.array([[[1, 3], [0, 0]], [[-1, 2], [2, -4]]]), 1),
    # Rows of 16-64 elements: gathered in narrower units on CPU (jax_gather/_cpu.py).
    ("gather_rows_as_bytes", "gather", (6, 16), np.array([[0, -1], [5, 2]]), 0),
    ("gather_axis1_rows_as_bytes", "gather", (3, 5, 32), np.array([1, -2, 4]), 1),
    ("nd_rows_as_bytes", "gather_nd", (3, 4, 64), np.array([[2, 1], [0, -1], [-1, 3]]), 0),
    ("nd_batch_rows_as_bytes", "gather_nd", (2, 3, 20), np.array([[[1], [0]], [[-1], [2]]]), 1),
]
IDS = [c[0] for c in CASES]
# (op, reference, data shape, indices, attribute)
CASES = [(ops_table.OPS[c[1]].fn, ops_table.OPS[c[1]].reference, *c[2:]) for c in CASES]


def _data(shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


VMAP_CASES = [
    pytest.param(*case, in_axes, id=f"{name}-{in_axes}")
    for name, case in zip(IDS, CASES)
    for in_axes in [(0, None), (None, 0), (0, 0), (1, 0), (0, 1)]
    if not (in_axes[1] == 1 and case[3].ndim == 0)  # a scalar index has no axis 1
]


@pytest.mark.core
@pytest.mark.parametrize("op, ref, shape, indices, attr, in_axes", VMAP_CASES)
def test_vmap_matches_per_example(op, ref, shape, indices, attr, in_axes):
    n = 3
    data = _data((n,) + shape)
    idx = np.stack([np.roll(indices, k, axis=0) if indices.ndim else indices for k in range(n)])
    if in_axes[0] is None:
        data = data[0]
    elif in_axes[0] == 1:
        data = np.moveaxis(data, 0, 1)
    if in_axes[1] is None:
        idx = idx[0]
    elif in_axes[1] == 1:
        idx = np.moveaxis(idx, 0, 1)
    out = jax.jit(jax.vmap(lambda d, i: op(d, i, attr), in_axes=in_axes))(data, idx)
    for k in range(n):
        d = data if in_axes[0] is None else np.take(data, k, axis=in_axes[0])
        i = idx if in_axes[1] is None else np.take(idx, k, axis=in_axes[1])
        np.testing.assert_array_equal(np.asarray(out[k]), ref(d, i, attr))


# The fast tier takes "fill" and "clip", as test_second_order_gradients does (see there).
@pytest.mark.parametrize(
    "mode",
    [
        "checked",
        pytest.param("fill", marks=pytest.mark.core),
        pytest.param("clip", marks=pytest.mark.core),
        "promise_in_bounds",
    ],
)
@pytest.mark.parametrize("op, ref, shape, indices, attr", CASES, ids=IDS)
def test_grad_is_scatter_add_of_cotangent(op, ref, shape, indices, attr, mode):
    data = _data(shape, np.float64)
    with enable_x64(True):
        f = lambda d: op(d, indices, attr, mode=mode)
        check_grads(f, (data,), order=1, modes=("fwd", "rev"))
        # The VJP is the scatter-add of the cotangent onto the gathered positions.
        ct = _data(f(data).shape, np.float64)
        (grad,) = jax.vjp(f, data)[1](ct)
        positions = ref(np.arange(data.size).reshape(shape), indices, attr)
        expected = np.zeros(data.size)
        np.add.at(expected, positions.ravel(), ct.ravel())
        np.testing.assert_allclose(np.asarray(grad).ravel(), expected, rtol=1e-12)


# "checked" with these concrete in-bounds indices runs as "promise_in_bounds", which differs
# from "clip" only in index arithmetic, where the derivative w.r.t. data does not go: "fill" and
# "clip" cover the lowerings.
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["fill", "clip"])
@pytest.mark.parametrize("op, ref, shape, indices, attr", CASES, ids=IDS)
def test_second_order_gradients(op, ref, shape, indices, attr, mode):
    with enable_x64(True):
        f = lambda d: op(d, indices, attr, mode=mode)
        check_linear_to_second_order(f, (_data(shape, np.float64),), tol=1e-12)


@pytest.mark.core
@pytest.mark.parametrize("op, ref, shape, indices, attr", CASES, ids=IDS)
def test_jitted_program_is_one_gather_and_no_loop(op, ref, shape, indices, attr):
    fn = jax.jit(lambda d, i: op(d, i, attr))
    text = fn.lower(_data(shape), indices).as_text()
    assert (
        len(re.findall(r'"stablehlo.gather"|stablehlo.gather\(', text))
        + text.count("stablehlo.dynamic_gather")
        == 1
    ), text
    assert "stablehlo.while" not in text and "custom_call" not in text


@pytest.mark.core
def test_same_shapes_never_recompile():
    # JAX arrays of data, gathered by the op's program (NumPy's small results are gathered on
    # the host, compiling nothing: tests/test_host_gather.py).
    data, idx = jnp.asarray(_data((6, 5))), np.array([1, 2, -1])
    jax_gather.gather(data, idx, 1)  # warm
    with counting_compiles() as count:
        for _ in range(3):
            jax_gather.gather(jnp.asarray(_data((6, 5))), np.array([0, 4, -5]), 1)
    assert count[0] == 0
    with counting_compiles() as count:
        jax_gather.gather(jnp.asarray(_data((6, 4))), np.array([0, 3, -4]), 1)
    assert count[0] >= 1  # the counter sees a compilation: a new shape

    user = jax.jit(lambda d, i: jax_gather.gather_nd(d, i, batch_dims=1, mode="fill"))
    for _ in range(3):
        user(_data((2, 3, 4)), np.array([[[0, 1]], [[2, 3]]]))
    assert user._cache_size() == 1


@pytest.mark.core
def test_attributes_must_be_static_under_jit():
    fn = jax.jit(lambda d, i, a: jax_gather.gather(d, i, a))
    with pytest.raises(TypeError, match=r"Gather: axis must be a static Python integer .* traced"):
        fn(_data((3, 4)), np.array([0]), 1)
    # ...and static_argnames works as users expect.
    out = jax.jit(jax_gather.gather, static_argnames=("axis", "mode"))(
        _data((3, 4)), np.array([0, -1]), axis=1, mode="clip"
    )
    assert out.shape == (3, 2)


@pytest.mark.core
def test_output_shape_is_asserted_with_chex():
    # The trace-time post-condition: an impossible plan is caught by chex, not silently shaped.
    plan = jax_gather.gather_plan((3, 4), (2,), 0)
    bad = dataclasses.replace(plan, output_shape=(9, 9))
    with pytest.raises(AssertionError):
        ops.op_program(jnp.zeros((3, 4)), jnp.zeros((2,), jnp.int32), None, plan=bad, mode=Mode.CLIP)


@pytest.mark.core
def test_inputs_are_never_mutated():
    data = _data((4, 3))
    idx = np.array([[-1, 2], [0, -3]], dtype=np.int64)
    data_copy, idx_copy = data.copy(), idx.copy()
    for mode in ("checked", "clip", "fill", "promise_in_bounds"):
        jax_gather.gather(data, idx, 0, mode=mode)
        jax_gather.gather_elements(data, idx, 0, mode=mode)
        jax_gather.gather_nd(data, idx, 0, mode=mode)
    np.testing.assert_array_equal(data, data_copy)
    np.testing.assert_array_equal(idx, idx_copy)


@pytest.mark.parametrize("op, ref, shape, indices, attr", CASES, ids=IDS)
def test_checks_compile_to_nothing_outside_checkify(op, ref, shape, indices, attr):
    # Without checkify the check is dead code, and it adds no effect (an effect would send
    # every call down jax.jit's slow token-passing path): the programs do the same work.
    jaxpr = jax.make_jaxpr(lambda d, i: op(d, i, attr))(_data(shape), indices)
    assert not jaxpr.effects

    def compiled(mode):
        fn = jax.jit(lambda d, i: op(d, i, attr, mode=mode))
        return fn.lower(_data(shape), indices).compile()

    def opcodes(c):
        lines = [t.split("=", 1)[1].strip() for t in c.as_text().splitlines() if " = " in t and "%" in t]
        return sorted(t.split("(", 1)[0].split()[-1] for t in lines)

    checked, fill = compiled("checked"), compiled("fill")
    assert opcodes(checked) == opcodes(fill)
    # A promise carries the same check, and compiles to neither its mask nor a select of data's
    # values: its compares and selects are its indices' normalisation (jnp's own, i < 0).
    promise = compiled("promise_in_bounds").as_text().splitlines()
    selects = [t.split("=", 1)[1].split()[0] for t in promise if " select(" in t]
    assert all(t.startswith(("s32", "s64")) for t in selects), selects
    compares = [t for t in promise if " compare(" in t]
    assert len(compares) == len(selects) and all("direction=LT" in t for t in compares), compares
    ca, fa = checked.cost_analysis(), fill.cost_analysis()
    ca, fa = (c[0] if isinstance(c, list) else c for c in (ca, fa))
    assert ca.get("bytes accessed") == fa.get("bytes accessed")


@pytest.mark.parametrize("mode", ["checked", "fill", "clip", "promise_in_bounds"])
@pytest.mark.parametrize("op, ref, shape, indices, attr", CASES, ids=IDS)
def test_export_for_every_platform(op, ref, shape, indices, attr, mode):
    from jax import export

    fn = jax.jit(lambda d, i: op(d, i, attr, mode=mode))
    data = _data(shape)
    exported = export.export(fn, platforms=("cpu", "cuda", "tpu"))(data, indices)
    assert "stablehlo.gather" in exported.mlir_module()
    assert "custom_call" not in exported.mlir_module()  # no host callbacks
    assert not exported.ordered_effects and not exported.unordered_effects
    np.testing.assert_array_equal(np.asarray(exported.call(data, indices)), ref(data, indices, attr))
    restored = export.deserialize(exported.serialize())
    np.testing.assert_array_equal(np.asarray(restored.call(data, indices)), ref(data, indices, attr))


PLAN_FNS = {op.fn: op.plan for op in ops_table.OPS.values()}


@pytest.mark.parametrize("op, ref, shape, indices, attr", CASES, ids=IDS)
def test_exported_program_can_return_an_in_bounds_flag(op, ref, shape, indices, attr):
    """A serialized program has no checkify around it: return the flag beside the result."""
    from jax import export

    def f(d, i):
        plan = PLAN_FNS[op](d.shape, i.shape, attr)
        return op(d, i, attr, mode="fill"), jnp.all(jax_gather.in_bounds(plan, i))

    data = _data(shape)
    exported = export.export(jax.jit(f), platforms=("cpu", "cuda", "tpu"))(data, indices)
    restored = export.deserialize(exported.serialize())
    out, ok = restored.call(data, indices)
    assert bool(ok)
    np.testing.assert_array_equal(np.asarray(out), ref(data, indices, attr))
    bad = np.full_like(indices, 99)
    out, ok = restored.call(data, bad)
    assert not bool(ok)
    np.testing.assert_array_equal(np.asarray(out), ref(data, bad, attr, mode="fill", fill=np.nan))


def _wrong_tangent():
    @jax.custom_jvp
    def double(x):
        return 2 * x

    double.defjvp(lambda primals, tangents: (double(primals[0]), 3 * tangents[0]))
    return double


def _tangent_through_bits():
    @jax.custom_jvp
    def same(x):
        return x

    # A bitcast has no transpose: reverse mode cannot go through this tangent.
    bitcast = lambda t: jax.lax.bitcast_convert_type(jax.lax.bitcast_convert_type(t, jnp.int64), t.dtype)
    same.defjvp(lambda primals, tangents: (same(primals[0]), bitcast(tangents[0])))
    return same


@pytest.mark.parametrize(
    "fn, error",
    [
        (jnp.sin, AssertionError),  # not linear: its JVP is not the function of the tangent
        (lambda x: x * jnp.sum(x), AssertionError),  # the first order transposes, the second is not zero
        (_wrong_tangent(), AssertionError),
        (_tangent_through_bits(), NotImplementedError),  # "Transpose rule ... not implemented"
    ],
)
def test_the_second_order_check_fails_where_check_grads_would(fn, error):
    with enable_x64(True), pytest.raises(error):
        check_linear_to_second_order(fn, (_data((3, 4), np.float64),), tol=1e-12)
    with enable_x64(True):
        check_linear_to_second_order(lambda x: 2 * x[::-1], (_data((3, 4), np.float64),), tol=1e-12)
