"""Out-of-bounds policy: the four modes, the checked mode eager and traced, fill values."""

import re
import warnings

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from jax.experimental import checkify

import jax_gather
from tests import ops_table
from tests.compat import enable_x64
from tests.programs import counting_compiles

DATA = np.arange(24, dtype=np.float32).reshape(2, 3, 4)

# (op, reference, indices with out-of-bounds values, attribute); data is DATA.
OOB_CASES = {
    name: (ops_table.OPS[name].fn, ops_table.OPS[name].reference, idx, attr)
    for name, idx, attr in [
        ("gather", np.array([[0, 3, -3], [-4, 2, 7]]), 1),
        ("gather_elements", np.array([[[0, 4, -4, 9]], [[-5, 3, 1, 0]]]), 2),
        ("gather_nd", np.array([[[1, 3], [2, -5], [-3, 0]], [[3, 0], [0, 0], [-1, -1]]]), 1),
    ]
}


@pytest.mark.core
@pytest.mark.parametrize("name", OOB_CASES)
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("mode", ["fill", "clip"])
def test_mode_matches_reference_on_out_of_bounds(name, jit, mode):
    op, ref, idx, attr = OOB_CASES[name]
    fn = lambda d, i: op(d, i, attr, mode=mode)
    out = (jax.jit(fn) if jit else fn)(DATA, idx)
    np.testing.assert_array_equal(np.asarray(out), ref(DATA, idx, attr, mode=mode, fill=np.nan))


@pytest.mark.core
@pytest.mark.parametrize("name", OOB_CASES)
def test_fill_value_is_used(name):
    op, ref, idx, attr = OOB_CASES[name]
    out = op(DATA.astype(np.int32), idx, attr, mode="fill", fill_value=-7)
    np.testing.assert_array_equal(
        np.asarray(out), ref(DATA.astype(np.int32), idx, attr, mode="fill", fill=-7)
    )


@pytest.mark.core
def test_fill_value_may_be_traced():
    f = jax.jit(lambda d, i, v: jax_gather.gather(d, i, mode="fill", fill_value=v))
    np.testing.assert_array_equal(f(np.arange(3.0), np.array([5, 1]), 9.0), [9.0, 1.0])


@pytest.mark.core
@pytest.mark.parametrize("name", OOB_CASES)
def test_eager_calls_on_device_arrays_make_no_host_to_device_transfer(name):
    # A fill value passed to the program as an argument would be an implicit transfer per call.
    op, ref, idx, attr = OOB_CASES[name]
    data, bad = jnp.asarray(DATA), jnp.asarray(idx)
    good = jnp.asarray(np.clip(idx, -1, 1))
    with jax.transfer_guard_host_to_device("disallow"):
        outs = {
            "fill": op(data, bad, attr, mode="fill"),
            "fill -7": op(data, bad, attr, mode="fill", fill_value=-7),
            "clip": op(data, bad, attr, mode="clip"),
            "checked": op(data, good, attr),
            "promise_in_bounds": op(data, good, attr, mode="promise_in_bounds"),
        }
    np.testing.assert_array_equal(outs["fill"], ref(DATA, idx, attr, mode="fill", fill=np.nan))
    np.testing.assert_array_equal(outs["fill -7"], ref(DATA, idx, attr, mode="fill", fill=-7))
    np.testing.assert_array_equal(outs["clip"], ref(DATA, idx, attr, mode="clip", fill=None))
    expected = ref(DATA, np.asarray(good), attr, mode="clip", fill=None)
    np.testing.assert_array_equal(outs["checked"], expected)
    np.testing.assert_array_equal(outs["promise_in_bounds"], expected)


@pytest.mark.core
def test_a_nan_or_signed_zero_fill_value_is_kept_and_compiled_once():
    data, idx = jnp.asarray(DATA[0, 0]), jnp.asarray([9, 1])
    with counting_compiles() as first:
        jax_gather.gather(data, idx, mode="fill", fill_value=float("nan"))
    with counting_compiles() as again:
        out = jax_gather.gather(data, idx, mode="fill", fill_value=float("nan"))  # another NaN object
    assert first[0] >= 1 and again[0] == 0
    assert np.isnan(out[0]) and out[1] == 1
    zero = jax_gather.gather(data, idx, mode="fill", fill_value=-0.0)
    assert zero[0] == 0 and np.signbit(zero[0])


@pytest.mark.core
@pytest.mark.parametrize(
    "dtype, expected",
    [
        (np.float32, np.nan),
        (np.float16, np.nan),
        (ml_dtypes.bfloat16, np.nan),
        (np.complex64, np.nan),
        (np.int8, -128),
        (np.int32, -(2**31)),
        (np.uint8, 255),
        (np.uint16, 65535),
        (np.bool_, True),
    ],
)
def test_default_fill_values_follow_jnp_take(dtype, expected):
    data = np.zeros(3, dtype)
    out = jax_gather.gather(data, [5], mode="fill")
    assert out.dtype == data.dtype
    wide = lambda x: np.asarray(x).astype(np.complex128)  # NaN-aware for bfloat16 too
    np.testing.assert_array_equal(wide(out), wide(np.array([expected])))
    np.testing.assert_array_equal(wide(out), wide(jnp.take(data, jnp.array([5]), mode="fill")))


@pytest.mark.core
@pytest.mark.parametrize("name", OOB_CASES)
def test_promise_in_bounds_is_exact_when_kept(name):
    op, ref, idx, attr = OOB_CASES[name]
    good = np.clip(idx, -2, 1)  # in bounds for every axis of size >= 2
    for fn in (op, jax.jit(op, static_argnums=2, static_argnames="mode")):
        out = fn(DATA, good, attr, mode="promise_in_bounds")
        np.testing.assert_array_equal(np.asarray(out), ref(DATA, good, attr))


# ---- checked mode -----------------------------------------------------------------------------

EAGER_MESSAGES = {
    "gather": (
        r"(?m)^Gather: indices\[0, 1\] = 3 is out of bounds for axis 1 of size 3 "
        r"\(valid range \[-3, 2\]\)$"
    ),
    "gather_elements": (
        r"(?m)^GatherElements: indices\[0, 0, 1\] = 4 is out of bounds for axis 2 of size 4 "
        r"\(valid range \[-4, 3\]\)$"
    ),
    "gather_nd": (
        r"(?m)^GatherND: indices\[0, 1, 1\] = -5 is out of bounds for axis 2 of size 4 "
        r"\(valid range \[-4, 3\]\); it is component 1 of the index tuple indices\[0, 1, :\]$"
    ),
}


@pytest.mark.core
@pytest.mark.parametrize("name", OOB_CASES)
def test_checked_eager_raises_index_error_naming_the_first_offender(name):
    op, _, idx, attr = OOB_CASES[name]
    for indices in (idx, jnp.asarray(idx), idx.tolist()):
        with pytest.raises(IndexError, match=EAGER_MESSAGES[name]):
            op(DATA, indices, attr)


@pytest.mark.core
@pytest.mark.parametrize("name", OOB_CASES)
def test_checked_on_closure_constant_indices_is_judged_where_the_op_runs(name):
    # Under a trace the constants are judged as traced indices are: the checked check in the
    # program, so a plain jit fills and checked() raises the eager error, when it runs.
    op, ref, idx, attr = OOB_CASES[name]
    f = jax.jit(lambda d: op(d, idx, attr))
    np.testing.assert_array_equal(np.asarray(f(DATA)), ref(DATA, idx, attr, mode="fill", fill=np.nan))
    with pytest.raises(IndexError, match=EAGER_MESSAGES[name]):
        jax_gather.checked(f)(DATA)
    with pytest.raises(IndexError, match=EAGER_MESSAGES[name]):  # eagerly, at call time
        op(DATA, idx, attr)


@pytest.mark.core
@pytest.mark.parametrize("name", OOB_CASES)
def test_fill_on_constant_indices_in_bounds_is_the_promise_program(name):
    # Constants of the trace in bounds are judged as they are traced: nothing to fill, so no
    # select (nor its pin) where XLA would fold jnp's select of an all-true mask away.
    op, ref, idx, attr = OOB_CASES[name]
    sizes = np.asarray(DATA.shape[attr : attr + idx.shape[-1]] if name == "gather_nd" else DATA.shape[attr])
    inside = np.where(idx < 0, idx % -sizes, idx % sizes)  # in [-s, s-1], negatives kept
    fill = jax.make_jaxpr(lambda d: op(d, inside, attr, mode="fill"))(DATA)
    promise = jax.make_jaxpr(lambda d: op(d, inside, attr, mode="promise_in_bounds"))(DATA)
    assert str(fill) == str(promise)
    out = jax.jit(lambda d: op(d, inside, attr, mode="fill", fill_value=-1.0))(DATA)
    np.testing.assert_array_equal(np.asarray(out), ref(DATA, inside, attr, mode="fill", fill=-1.0))


@pytest.mark.parametrize("constant_data", [False, True], ids=["traced data", "constant data"])
@pytest.mark.parametrize("name", OOB_CASES)
def test_constant_indices_in_a_branch_never_taken_are_not_judged(name, constant_data):
    op, ref, idx, attr = OOB_CASES[name]
    # Constant data too (an eager call staged into the branch), remembered or not.
    op(DATA, idx % 2, attr)

    def f(p, d):
        taken = lambda d: op(DATA if constant_data else d, idx, attr) + 0 * d.sum()
        return jax.lax.cond(p, taken, lambda d: jnp.zeros(ref(DATA, idx, attr, mode="clip").shape), d)

    skipped = np.zeros(ref(DATA, idx, attr, mode="clip").shape)
    for call in (f, jax.jit(f), jax_gather.checked(jax.jit(f)), jax_gather.checked(f)):
        np.testing.assert_array_equal(np.asarray(call(False, DATA)), skipped)
    filled = ref(DATA, idx, attr, mode="fill", fill=np.nan)
    np.testing.assert_array_equal(np.asarray(jax.jit(f)(True, DATA)), filled)
    with pytest.raises(IndexError) as taken:
        jax_gather.checked(jax.jit(f))(True, DATA)
    with pytest.raises(IndexError) as eager:
        op(DATA, idx, attr)
    assert str(taken.value) == str(eager.value)


@pytest.mark.core
def test_openvino_constant_indices_in_a_branch_never_taken_are_not_judged():
    from jax_gather import openvino

    def f(p, d):
        taken = lambda d: openvino.gather(d, np.array([1, -1]), 0, version=7)
        return jax.lax.cond(p, taken, lambda d: d[:2], d)

    d = jnp.arange(4.0)
    for call in (f, jax.jit(f), jax_gather.checked(jax.jit(f))):
        np.testing.assert_array_equal(call(False, d), [0.0, 1.0])
    with pytest.raises(IndexError, match=r"^Gather-7: indices\[1\] = -1 is out of range \[0, 3\]"):
        jax_gather.checked(jax.jit(f))(True, d)
    with pytest.raises(IndexError, match=r"^Gather-7: indices\[1\] = -1 is out of range \[0, 3\]"):
        openvino.gather(d, np.array([1, -1]), 0, version=7)


@pytest.mark.core
@pytest.mark.parametrize("name", OOB_CASES)
def test_checked_under_plain_jit_returns_the_fill_result(name):
    op, ref, idx, attr = OOB_CASES[name]
    out = jax.jit(lambda d, i: op(d, i, attr))(DATA, idx)
    np.testing.assert_array_equal(np.asarray(out), ref(DATA, idx, attr, mode="fill", fill=np.nan))


@pytest.mark.core
@pytest.mark.parametrize("name", OOB_CASES)
def test_checked_under_checkify_reports_the_offender(name):
    op, _, idx, attr = OOB_CASES[name]
    f = jax.jit(lambda d, i: op(d, i, attr))
    err, _ = checkify.checkify(f, errors=checkify.user_checks)(DATA, idx)
    assert err.get() is not None
    with pytest.raises(IndexError, match=EAGER_MESSAGES[name].rstrip("$")):
        jax_gather.checked(f)(DATA, idx)


@pytest.mark.core
@pytest.mark.parametrize("in_axes", [(0, None), (None, 0), (0, 0)])
def test_checked_under_vmap(in_axes):
    data = np.stack([DATA[0]] * 3)
    idx = np.array([[0, 1], [2, 0], [1, 5]])
    f = jax.vmap(lambda d, i: jax_gather.gather(d, i, 1), in_axes=in_axes)
    d = data if in_axes[0] == 0 else data[0]
    i = idx if in_axes[1] == 0 else idx[2]
    # Batched indices: the position leads with the batch element (example 2 holds the 5).
    at = r"indices\[2, 1\]" if in_axes[1] == 0 else r"indices\[1\]"
    with pytest.raises(IndexError, match=rf"^Gather: {at} = 5 is out of bounds for axis 1 of size 4 "):
        jax_gather.checked(jax.jit(f))(d, i)
    good = idx % 4 if in_axes[1] == 0 else idx[0]
    out = jax_gather.checked(jax.jit(f))(d, good)
    assert out.shape == (3, 3, 2)


@pytest.mark.core
def test_checked_under_vmap_names_the_batch_element_of_any_check():
    from jax_gather import openvino

    # Rank-0 indices per example: their position is the batch element alone.
    pick = jax_gather.checked(jax.jit(jax.vmap(lambda i: openvino.gather(jnp.arange(4.0), i, 0, version=7))))
    with pytest.raises(IndexError, match=r"^Gather-7: indices\[2\] = -1 is out of range \[0, 3\]"):
        pick(jnp.array([1, 2, -1, 0]))
    # A check with no position (a traced fill_value's) ends with the batch element.
    filled = lambda d, v: jax_gather.gather(d, jnp.array([0, 5]), mode="fill", fill_value=v)
    fill = jax.vmap(filled, in_axes=(None, 0))
    with pytest.raises(ValueError, match=r"^Gather: fill_value 300 cannot be .* \(batch element 1\)$"):
        jax_gather.checked(jax.jit(fill))(jnp.arange(3, dtype=jnp.int8), jnp.array([1, 300, 2]))
    nested = jax.vmap(jax.vmap(lambda d, i: jax_gather.gather(d, i)), in_axes=(None, 0))
    bad = np.zeros((3, 2, 4), np.int32)
    bad[2, 1, 3] = 7
    with pytest.raises(IndexError, match=r"^Gather: indices\[2, 1, 3\] = 7 is out of bounds for axis 0 "):
        jax_gather.checked(jax.jit(nested))(jnp.ones((2, 5)), bad)


VMAP_OOB = {
    # op, attribute, per-example data (2, 3, 4), 3 examples of indices: in bounds, then one bad, message
    "gather_nd": (
        jax_gather.gather_nd,
        0,
        np.array([[[0, 0, 0]], [[1, 2, 3]], [[1, -1, 0]]]),
        np.array([[[0, 0, 0]], [[1, 2, 3]], [[1, 3, 0]]]),
        r"GatherND: indices\[2, 0, 1\] = 3 is out of bounds for axis 1 of size 3 .*component 1 "
        r"of the index tuple indices\[2, 0, :\]",
    ),
    "gather_nd batch_dims=1": (
        jax_gather.gather_nd,
        1,
        np.array([[[0], [2]], [[1], [-3]], [[2], [0]]]),
        np.array([[[0], [2]], [[1], [-3]], [[2], [-4]]]),
        r"GatherND: indices\[2, 1, 0\] = -4 is out of bounds for axis 1 of size 3",
    ),
    "gather_elements": (
        jax_gather.gather_elements,
        2,
        np.zeros((3, 2, 3, 1), int) + [[[[3]]], [[[-4]]], [[[1]]]],
        np.zeros((3, 2, 3, 1), int) + [[[[3]]], [[[-4]]], [[[4]]]],
        r"GatherElements: indices\[2, 0, 0, 0\] = 4 is out of bounds for axis 2 of size 4",
    ),
}


@pytest.mark.parametrize("name", VMAP_OOB)
@pytest.mark.parametrize("batched_data", [False, True])
def test_checked_under_vmap_with_batched_index_tuples(name, batched_data):
    # The offending component and its axis are picked without a dynamic index: under vmap one
    # would become a gather that JAX's own checks flag on in-bounds input.
    op, attr, good, bad, message = VMAP_OOB[name]
    data = np.stack([DATA] * 3) if batched_data else DATA
    f = jax_gather.checked(
        jax.jit(jax.vmap(lambda d, i: op(d, i, attr), in_axes=(0 if batched_data else None, 0)))
    )
    out = f(data, good)
    for k in range(3):
        np.testing.assert_array_equal(np.asarray(out[k]), np.asarray(op(DATA, good[k], attr)))
    with pytest.raises(IndexError, match=message):
        f(data, bad)
    text = (
        jax.jit(jax.vmap(lambda d, i: op(d, i, attr), in_axes=(0 if batched_data else None, 0)))
        .lower(data, good)
        .as_text()
    )
    assert len(re.findall(r'"stablehlo.gather"|stablehlo.gather\(', text)) == 1, text


@pytest.mark.core
def test_checked_under_grad():
    f = lambda d, i: jax_gather.gather_elements(d, i, 0).sum()
    g = jax_gather.checked(jax.jit(jax.grad(f)), errors=checkify.index_checks)
    # JAX's checkify rule for the batched scatter of this gradient fails: said once, then skipped.
    with pytest.warns(RuntimeWarning, match="JAX cannot trace its own index checks"):
        np.testing.assert_array_equal(g(np.ones((3, 2)), np.array([[0, 2]])), [[1, 0], [0, 0], [0, 1]])
    with pytest.raises(IndexError, match=r"GatherElements: indices\[0, 1\] = -4 is out of bounds"):
        g(np.ones((3, 2)), np.array([[0, -4]]))
    # Without JAX's own checks (the default) there is nothing to skip, and nothing to say.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plain = jax_gather.checked(jax.jit(jax.grad(f)))
        np.testing.assert_array_equal(plain(np.ones((3, 2)), np.array([[0, 2]])), [[1, 0], [0, 0], [0, 1]])
        with pytest.raises(IndexError, match=r"GatherElements: indices\[0, 1\] = -4 is out of bounds"):
            plain(np.ones((3, 2)), np.array([[0, -4]]))


@pytest.mark.core
@pytest.mark.filterwarnings("ignore:jax_gather.checked.*JAX cannot trace its own index checks")
def test_checked_with_indices_computed_from_differentiated_data():
    # Traced integer indices carry a (zero) tangent through the check under jvp and grad.
    def f(d, shift):
        i = jnp.argmax(d, axis=1, keepdims=True) + shift
        return (jax_gather.gather_elements(d, i, 1, fill_value=0.0) * d[:, :1]).sum()

    d = np.arange(6.0).reshape(2, 3)
    expected = [[2.0, 0.0, 0.0], [5.0, 0.0, 3.0]]
    np.testing.assert_array_equal(jax.jit(jax.grad(f))(d, 0), expected)
    np.testing.assert_array_equal(jax.jit(jax.jacfwd(f))(d, 0), expected)
    np.testing.assert_array_equal(jax.jit(jax.grad(f))(d, 5), np.zeros((2, 3)))  # filled
    with pytest.raises(IndexError, match=r"GatherElements: indices\[0, 0\] = 7 is out of bounds"):
        jax_gather.checked(jax.jit(jax.grad(f)))(d, 5)


@pytest.mark.core
def test_checked_gather_grad_keeps_jax_index_checks():
    g = jax_gather.checked(
        jax.jit(jax.grad(lambda d, i: jax_gather.gather(d, i, 1).sum())), errors=checkify.index_checks
    )
    np.testing.assert_array_equal(g(np.ones((2, 3)), np.array([2, 2])), [[0, 0, 2], [0, 0, 2]])
    with pytest.raises(IndexError, match=r"Gather: indices\[0\] = 3 is out of bounds"):
        g(np.ones((2, 3)), np.array([3, 2]))


@pytest.mark.parametrize("mode", ["fill", "clip"])
@pytest.mark.parametrize("name", OOB_CASES)
def test_checked_wrapper_accepts_deliberate_out_of_bounds_modes(name, mode):
    # Not even JAX's own index checks, when asked for, flag fill and clip.
    op, ref, idx, attr = OOB_CASES[name]
    for errors in (checkify.user_checks, checkify.index_checks):
        fn = jax_gather.checked(jax.jit(lambda d, i: op(d, i, attr, mode=mode)), errors=errors)
        np.testing.assert_array_equal(np.asarray(fn(DATA, idx)), ref(DATA, idx, attr, mode=mode, fill=np.nan))


@pytest.mark.core
@pytest.mark.parametrize("name", OOB_CASES)
def test_checked_wrapper_reports_a_broken_promise_like_the_checked_mode(name):
    op, _, idx, attr = OOB_CASES[name]
    promise = jax.jit(lambda d, i: op(d, i, attr, mode="promise_in_bounds"))
    with pytest.raises(IndexError) as broken:
        jax_gather.checked(promise)(DATA, idx)
    with pytest.raises(IndexError) as checked_mode:
        op(DATA, idx, attr)
    assert str(broken.value) == str(checked_mode.value)


@pytest.mark.core
def test_checked_wrapper_catches_other_indexing_when_asked():
    with pytest.raises(IndexError, match="out-of-bounds"):
        jax_gather.checked(jax.jit(lambda d, i: d[i]), errors=checkify.index_checks)(np.arange(3.0), 5)


# Well-defined JAX code whose indices are out of range on purpose, and what it gives.
JAX_OWN_OUT_OF_RANGE = {
    "jnp.take fill": (lambda x, i: jnp.take(x, i, mode="fill", fill_value=-1.0), [-1.0, 1.0]),
    "jnp.take clip": (lambda x, i: jnp.take(x, i, mode="clip"), [2.0, 1.0]),
    ".at[].get fill": (lambda x, i: x.at[i].get(mode="fill", fill_value=-1.0), [-1.0, 1.0]),
    ".at[].set drop": (lambda x, i: x.at[i].set(9.0, mode="drop")[:2], [0.0, 9.0]),
    "segment_sum": (lambda x, i: jax.ops.segment_sum(x[:2], i, num_segments=2), [0.0, 1.0]),
    "dynamic_slice": (lambda x, i: jax.lax.dynamic_slice(x, (i[0],), (2,)), [1.0, 2.0]),
}


@pytest.mark.parametrize("name", JAX_OWN_OUT_OF_RANGE)
def test_checked_wrapper_judges_only_the_library(name):
    fn, expected = JAX_OWN_OUT_OF_RANGE[name]
    x, i = jnp.arange(3.0), jnp.array([7, 1])
    np.testing.assert_array_equal(jax_gather.checked(jax.jit(fn))(x, i), expected)
    # JAX's own checks, which the wrapper leaves off unless asked, do flag it.
    with pytest.raises(IndexError, match="out-of-bounds"):
        jax_gather.checked(jax.jit(fn), errors=checkify.index_checks)(x, i)


@pytest.mark.core
def test_a_users_own_check_keeps_its_message_and_kind():
    def fn(x, i):
        checkify.check(jnp.all(i >= 0), "ids must be non-negative, got {}", i[0])
        return jax_gather.gather(x, i)

    wrapped = jax_gather.checked(jax.jit(fn))
    np.testing.assert_array_equal(wrapped(jnp.arange(3.0), jnp.array([2])), [2.0])
    message = r"^ids must be non-negative, got -1 \(`check` failed\)$"
    with pytest.raises(checkify.JaxRuntimeError, match=message):
        wrapped(jnp.arange(3.0), jnp.array([-1]))
    # As checkify itself raises it.
    err, _ = jax.jit(checkify.checkify(fn))(jnp.arange(3.0), jnp.array([-1]))
    with pytest.raises(checkify.JaxRuntimeError) as theirs:
        err.throw()
    with pytest.raises(checkify.JaxRuntimeError) as ours:
        wrapped(jnp.arange(3.0), jnp.array([-1]))
    assert str(ours.value) == str(theirs.value)
    # A user's check worded like the library's is still the user's.
    mimic = jax_gather.checked(
        jax.jit(lambda x: checkify.check(x.sum() < 0, "Gather: indices[0] = 9 is out of bounds") or x)
    )
    with pytest.raises(checkify.JaxRuntimeError, match="Gather: indices"):
        mimic(jnp.arange(3.0))


@pytest.mark.core
def test_checked_wrapper_traces_once_per_signature_even_when_it_raises():
    traces = []

    def fn(x, i):
        traces.append(1)
        return jax_gather.gather(x, i)

    for wrapped in (jax_gather.checked(jax.jit(fn)), jax_gather.checked(fn)):
        traces.clear()
        x = jnp.arange(3.0)
        for _ in range(3):
            with pytest.raises(IndexError, match=r"indices\[0\] = 5 is out of bounds"):
                wrapped(x, jnp.array([5]))
            np.testing.assert_array_equal(wrapped(x, jnp.array([2])), [2.0])
        assert len(traces) == 1
        wrapped(x, jnp.array([2, 1]))  # a new signature
        assert len(traces) == 2


@pytest.mark.core
@pytest.mark.parametrize(
    "transform",
    [jax.jit, jax.vmap, lambda f: jax.jit(jax.vmap(f)), lambda f: jax.grad(lambda x, i: f(x, i).sum())],
    ids=["jit", "vmap", "jit of vmap", "grad"],
)
def test_checked_wrapper_inside_a_transformation_says_where_it_goes(transform):
    wrapped = jax_gather.checked(jax.jit(lambda x, i: jax_gather.gather(x, i)))
    x, i = jnp.ones((2, 3)), jnp.array([[0], [1]])
    where = r"^jax_gather\.checked\(<lambda>\) was called inside .* goes outside jit and vmap"
    with pytest.raises(TypeError, match=where):
        transform(wrapped)(x, i)


@pytest.mark.core
def test_checked_wrapper_reading_a_tracer_says_where_it_goes():
    @jax.jit
    def outer(x):
        return jax_gather.checked(lambda i: jax_gather.gather(x, i))(jnp.array([0]))

    with pytest.raises(TypeError, match=r"jax_gather\.checked\(<lambda>\) was called inside .* outside jit"):
        outer(jnp.ones(3))


@pytest.mark.core
def test_checked_wrapper_returns_result_and_passes_kwargs():
    f = jax_gather.checked(lambda d, i, axis: jax_gather.gather(jnp.asarray(d), i, axis))
    np.testing.assert_array_equal(f(DATA, jnp.array([1]), axis=2), DATA[:, :, [1]])


@pytest.mark.core
def test_no_gradient_flows_to_filled_positions():
    for mode in ("fill", "checked"):
        g = jax.jit(
            jax.grad(
                lambda d: jax_gather.gather(d, jnp.array([0, 7, -9, 2]), mode=mode, fill_value=0.0).sum()
            )
        )
        np.testing.assert_array_equal(g(np.ones(3)), [1.0, 0.0, 1.0])


@pytest.mark.core
def test_clip_gradient_goes_to_the_clamped_position():
    g = jax.grad(lambda d: jax_gather.gather(d, np.array([0, 7, -9]), mode="clip").sum())
    np.testing.assert_array_equal(g(np.ones(3)), [2.0, 0.0, 1.0])


# ---- int64 indices are judged before any narrowing --------------------------------------------

BIG = 2**32 + 1


@pytest.mark.core
def test_int64_host_indices_with_x64_off_are_never_wrapped():
    data = np.arange(4.0)
    idx = np.array([BIG, 1], dtype=np.int64)
    with pytest.raises(IndexError, match=r"indices\[0\] = 4294967297 is out of bounds"):
        jax_gather.gather(data, idx)
    np.testing.assert_array_equal(jax_gather.gather(data, idx, mode="fill"), [np.nan, 1.0])
    np.testing.assert_array_equal(jax_gather.gather(data, idx, mode="clip"), [3.0, 1.0])
    np.testing.assert_array_equal(jax_gather.gather(data, -idx, mode="clip"), [0.0, 3.0])
    big_u = np.array([2**64 - 1, 2], dtype=np.uint64)
    np.testing.assert_array_equal(jax_gather.gather(data, big_u, mode="fill"), [np.nan, 2.0])


# Values about int32's ends and int64's, where a narrowing that wraps would land in range.
_WIDE = st.sampled_from(
    [2**31 - 1, 2**31, 2**32, 2**32 + 1, -(2**31), -(2**31) - 1, -(2**32) - 3, 2**63 - 1, -(2**63)]
)


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.integers(-6, 6) | _WIDE | st.integers(-(2**63), 2**63 - 1), min_size=6, max_size=6),
    unsigned=st.booleans(),
    mode=st.sampled_from(["fill", "clip", "promise_in_bounds"]),
)
def test_64_bit_host_indices_with_x64_off_saturate(values, unsigned, mode):
    # Eager NumPy indices are narrowed to int32 on the host: a plain conversion where every one
    # fits, saturated where one does not. Reference: Python integers, never narrowed.
    data = np.arange(5.0)
    dtype = np.uint64 if unsigned else np.int64
    values = [v % 2**64 if unsigned else v for v in values]
    if mode == "promise_in_bounds":
        values = [v % 5 for v in values]  # a promise holds only in bounds
    idx = np.array(values, dtype)
    before = idx.copy()

    def expected(v: int) -> float:
        if -5 <= v < 5:
            return data[v]
        if mode == "fill":
            return np.nan
        return data[0] if v < 0 else data[4]

    out = jax_gather.gather(data, idx, mode=mode)
    np.testing.assert_array_equal(np.asarray(out), [expected(v) for v in values])
    np.testing.assert_array_equal(idx, before)


@pytest.mark.core
@pytest.mark.parametrize(
    "op, idx, attr",
    [
        (jax_gather.gather, np.array([BIG, 1]), 0),
        (jax_gather.gather_elements, np.array([BIG, 1]), 0),
        (jax_gather.gather_nd, np.array([[BIG], [1]]), 0),
    ],
)
def test_int64_traced_indices_with_x64_on_are_never_wrapped(op, idx, attr):
    with enable_x64(True):
        data = jnp.arange(4.0)
        i = jnp.asarray(idx, jnp.int64)
        for mode, expected in (("fill", [np.nan, 1.0]), ("checked", [np.nan, 1.0]), ("clip", [3.0, 1.0])):
            out = jax.jit(lambda d, i: op(d, i, attr, mode=mode))(data, i)
            np.testing.assert_array_equal(np.asarray(out), expected)
        with pytest.raises(IndexError, match="= 4294967297 is out of bounds"):
            jax_gather.checked(jax.jit(lambda d, i: op(d, i, attr)))(data, i)
        with pytest.raises(IndexError, match="= 4294967297 is out of bounds"):
            op(data, i, attr)


@pytest.mark.core
def test_uint64_with_x64_on():
    with enable_x64(True):
        data = jnp.arange(5)
        i = jnp.array([2**63 + 3, 4], dtype=jnp.uint64)
        out = jax.jit(lambda d, i: jax_gather.gather(d, i, mode="fill", fill_value=-1))(data, i)
        np.testing.assert_array_equal(out, [-1, 4])
        assert out.dtype == jnp.int64
