"""Eager calls (jax_gather/_eager.py): a signature is checked once and its program remembered,
yet every call is judged on its own indices; the host bounds tests against NumPy; the checked
mode judged on the device; what a signature must tell apart."""

import contextlib
import functools
import itertools
import math
import re

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given

import jax_gather
from jax_gather import (
    _buffer_bounds,
    _cpu,
    _cpu_client,
    _device_checked,
    _eager,
    _eager_unchecked,
    _host_bounds,
    _host_gather,
    _moved_on_host,
    ops,
    plans,
)
from jax_gather._arguments import Mode
from jax_gather._host_bounds import Verdict
from jax_gather._lowering import Lowering
from jax_gather._traced_bounds import normalising_is_inline
from tests import ops_table, reference
from tests.compat import enable_x64, jax_gathers
from tests.programs import counting_compiles, stdout_with_cpu_devices
from tests.strategies import INDEX_DTYPES, make_data, make_wild_indices

pytestmark = pytest.mark.core  # the fast tier: pytest -m core

OPS = {name: (op.fn, op.plan, op.reference, (5, 4), 0) for name, op in ops_table.OPS.items()}


def _indices(name, values):
    """Indices into axis 0 (of size 5): as they are, as one row of GatherElements indices, or
    as the first components of GatherND index tuples."""
    if name == "gather_elements":
        return np.array([values])
    return np.array(values if name == "gather" else [[v, 0] for v in values])


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("kind", ["numpy", "jax"])
def test_a_remembered_signature_still_judges_every_call(name, kind):
    op, _, ref, shape, attr = OPS[name]
    data = make_data(shape, np.float32, 0)
    as_kind = (lambda x: x) if kind == "numpy" else jnp.asarray
    good, negative, bad = _indices(name, [0, 1]), _indices(name, [-1, 2]), _indices(name, [1, 5])
    messages = []
    for _ in range(2):  # the first call builds the signature's call, the second looks it up
        np.testing.assert_array_equal(op(data, as_kind(good), attr), ref(data, good, attr))
        np.testing.assert_array_equal(op(data, as_kind(negative), attr), ref(data, negative, attr))
        with pytest.raises(IndexError) as error:
            op(data, as_kind(bad), attr)
        messages.append(str(error.value))
    assert messages[0] == messages[1] and "= 5 is out of bounds for axis 0 of size 5" in messages[0]


def test_numpy_indices_changed_in_place_are_judged_again():
    data, ids = make_data((4, 3), np.float32, 0), np.array([0, 1])
    jax_gather.gather(data, ids)
    jax_gather.gather(data, ids)
    ids[1] = 4
    with pytest.raises(IndexError, match=re.escape("indices[1] = 4 is out of bounds")):
        jax_gather.gather(data, ids)


@pytest.mark.parametrize("mode", ["fill", "checked"])
def test_fill_values_that_compare_equal_are_told_apart(mode):
    data, bad = jnp.asarray([1.0, 2.0]), jnp.asarray([0, 5]) if mode == "fill" else None
    if bad is None:  # a traced checked call fills: under jit
        fn = lambda fill: jax.jit(lambda d, i: jax_gather.gather(d, i, fill_value=fill))(
            data, jnp.asarray([0, 5])
        )
    else:
        fn = lambda fill: jax_gather.gather(data, bad, mode="fill", fill_value=fill)
    for _ in range(2):
        assert not np.signbit(fn(0.0)[1]) and np.signbit(fn(-0.0)[1])
        assert fn(True)[1] == 1 and fn(1)[1] == 1 and np.isnan(fn(float("nan"))[1])
        nan, negative_nan = fn(float("nan"))[1], fn(-float("nan"))[1]
        assert np.isnan(negative_nan) and not np.signbit(nan) and np.signbit(negative_nan)


def test_an_attribute_of_another_type_is_judged_again():
    data, ids = make_data((4, 3), np.float32, 0), np.array([0, 1])
    for _ in range(2):
        jax_gather.gather(data, ids, 1)
    with pytest.raises(TypeError, match="Gather: axis must be an integer, got the bool True"):
        jax_gather.gather(data, ids, True)


def test_arguments_a_signature_cannot_hold_are_judged_every_time():
    data = np.arange(5.0, dtype=np.float32)
    for _ in range(2):
        with pytest.raises(ValueError, match="Gather: mode must be one of"):
            jax_gather.gather(data, np.array([0]), mode=["clip"])
        swapped = np.array([-5, 4], ">i4")  # big-endian: not the bytes a host test reads
        assert jax_gather.gather(data, swapped).tolist() == [0.0, 4.0]
        with pytest.raises(IndexError, match=re.escape("indices[0] = -9 is out of bounds")):
            jax_gather.gather(data, np.array([-9, 0], ">i4"))


def test_concrete_arrays_inside_an_enclosing_jit():
    # Closed over by a jitted function, concrete arrays take the eager path inside the trace,
    # the checks on the device included (as on an accelerator).
    table, ids = jnp.arange(12.0).reshape(4, 3), jnp.asarray([0, -1])
    assert jax.jit(lambda: jax_gather.gather(table, ids))().tolist() == [[0, 1, 2], [9, 10, 11]]
    plan = plans.gather_plan(table.shape, ids.shape, 0)
    on_device = _device_checked.checked_on_device(plan, ops._programs(plan, None))
    assert jax.jit(lambda: on_device(table, ids))().tolist() == [[0, 1, 2], [9, 10, 11]]


def test_the_x64_setting_is_part_of_the_signature():
    data, ids = np.arange(6, dtype=np.float64), np.array([5, -6])
    for _ in range(2):
        assert jax_gather.gather(data, ids).dtype == jnp.float32
        with enable_x64(True):
            out = jax_gather.gather(data, ids)
        assert out.dtype == jnp.float64 and out.tolist() == [5.0, 0.0]


def test_strings_and_lists_are_gathered_every_time():
    for _ in range(2):
        assert jax_gather.gather(np.array(["a", "b"]), np.array([1])).tolist() == ["b"]
        assert jax_gather.gather([[1, 2], [3, 4]], [-1]).tolist() == [[3, 4]]


def test_the_remembered_calls_are_bounded(monkeypatch):
    monkeypatch.setattr(_eager, "_CAPACITY", 3)
    _eager.clear()
    for n in range(1, 8):
        data = np.arange(n, dtype=np.float32)
        for _ in range(2):
            assert jax_gather.gather(data, np.array([n - 1])).tolist() == [n - 1]
        assert len(_eager._calls) <= 3
    _eager.clear()


VERDICT_IN = ["device memory", "host memory"]  # where the indices' sharding is not given, and where it is


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("verdict_in", VERDICT_IN)
def test_the_checked_mode_judged_on_the_device_makes_no_host_to_device_transfer(name, verdict_in):
    # The reduction's constants (the axis sizes) are in its program, not sent on every call.
    _, plan_fn, ref, shape, attr = OPS[name]
    data = jnp.asarray(make_data(shape, np.float32, 0))
    for values in ([0, 1], [-1, 2]):
        indices = _indices(name, values)
        plan = plan_fn(shape, indices.shape, attr)
        on_device = jnp.asarray(indices)
        where = on_device.sharding if verdict_in == "host memory" else None
        call = _device_checked.checked_on_device(plan, ops._programs(plan, None), where)
        jax.clear_caches()  # the first call too, which compiles the reduction
        with jax.transfer_guard_host_to_device("disallow"):
            out = call(data, on_device)
        np.testing.assert_array_equal(out, ref(np.asarray(data), indices, attr))


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("verdict_in", VERDICT_IN)
def test_the_checked_mode_judged_on_the_device(name, verdict_in):
    # What an eager call does where its indices are not on the host (an accelerator): one
    # program that gathers and judges, one scalar back, and the host copy only for the error.
    _, plan_fn, ref, shape, attr = OPS[name]
    data = jnp.asarray(make_data(shape, np.float32, 0))
    for values, want in (([0, 1], "in range"), ([-1, 2], "in bounds"), ([1, 5], "out")):
        indices = _indices(name, values)
        plan = plan_fn(shape, indices.shape, attr)
        asked = []
        programs = ops._programs(plan, None)
        where = jnp.asarray(indices).sharding if verdict_in == "host memory" else None
        asking = lambda mode: asked.append(mode) or programs(mode)
        call = _device_checked.checked_on_device(plan, asking, where)
        asked.clear()  # what the call is made with; on each call, no second program
        if want == "out":
            with pytest.raises(IndexError, match=re.escape("= 5 is out of bounds for axis 0 of size 5")):
                call(data, jnp.asarray(indices))
        else:
            np.testing.assert_array_equal(
                call(data, jnp.asarray(indices)), ref(np.asarray(data), indices, attr)
            )
        assert asked == []


def test_the_verdict_is_written_into_host_memory_where_the_indices_device_has_some():
    # On an H200, reading a verdict from the device's memory took 240 µs, from host memory that
    # the program wrote into 95-110 µs. A GPU has such memory, and so has a CPU device from
    # JAX 0.5 or so (before, its one memory is its host's, unpinned).
    data, ids = jnp.arange(12.0).reshape(4, 3), jnp.asarray([3, -4])
    plan = plans.gather_plan(data.shape, ids.shape, 0)
    promise = ops._programs(plan, None)(Mode.PROMISE_IN_BOUNDS)
    (device,) = ids.devices()
    default = device.default_memory().kind
    pinned = "pinned_host" if "pinned_host" in {m.kind for m in device.addressable_memories()} else default
    for where, memory in ((ids.sharding, pinned), (None, default)):
        gathered, judged = _device_checked.gather_and_judge_program(plan, promise, where)(data, ids)
        assert judged.sharding.memory_kind == memory
        assert Verdict(judged.item()) is Verdict.IN_BOUNDS
        assert gathered.tolist() == [[9, 10, 11], [0, 1, 2]]
    # Indices spread over devices: one device's host memory would not hold their verdict.
    code = (
        "import jax; from jax.sharding import NamedSharding, PartitionSpec as P; "
        "from jax_gather import _device_checked; "
        "mesh = jax.make_mesh((2,), ('x',)); "
        "print(_device_checked._host_memory_of(NamedSharding(mesh, P('x'))), "
        "_device_checked._host_memory_of(NamedSharding(mesh, P())))"
    )
    assert stdout_with_cpu_devices(code, devices=2).split() == ["None", "None"]


def test_indices_in_another_memory_have_a_signature_of_their_own():
    # Each new array has a sharding object of its own: the signature holds where the indices
    # live (device and memory), so a new array in the same place finds the same call, and one in
    # another memory of the device (unpinned host memory, from JAX 0.5 or so) does not.
    data, ids = jnp.arange(12.0).reshape(4, 3), jnp.asarray([3, 1])
    (device,) = ids.devices()
    _eager.clear()
    for fresh in (ids, ids + 0, jnp.asarray([3, 1])):
        assert jax_gather.gather(data, fresh).tolist() == [[9, 10, 11], [3, 4, 5]]
    assert len(_eager._calls) == 1
    default = device.default_memory().kind
    others = [m.kind for m in device.addressable_memories() if m.kind not in (default, "pinned_host")]
    for count, kind in enumerate(others, start=2):
        moved = jax.device_put(ids, _cpu_client.single_device_sharding(device, memory_kind=kind))
        assert jax_gather.gather(data, moved).tolist() == [[9, 10, 11], [3, 4, 5]]
        assert len(_eager._calls) == count, kind


def test_where_indices_live_decides_where_they_are_judged():
    assert _cpu_client.on_host(np.zeros(2, np.int32))
    assert _cpu_client.on_host(jax.device_put(np.zeros(2, np.int32), jax.devices("cpu")[0]))
    for device in jax.devices():  # an accelerator's memory, where this process has one
        if device.platform != "cpu":
            assert not _cpu_client.on_host(jax.device_put(np.zeros(2, np.int32), device))


@pytest.mark.parametrize("size", [_host_bounds.NORMALISED_ON_HOST, _host_bounds.NORMALISED_ON_HOST + 1])
def test_negative_numpy_indices_either_side_of_the_host_normalisation(size):
    data = make_data((7, 3), np.int32, 0)
    ids = np.resize(np.array([-7, 6, -1, 0], np.int64), size)
    before = ids.copy()
    for _ in range(2):
        np.testing.assert_array_equal(jax_gather.gather(data, ids), reference.gather(data, ids, 0))
    np.testing.assert_array_equal(ids, before)  # normalised into a new array


def test_the_first_call_with_jax_arrays_is_remembered(monkeypatch):
    # JAX's array type becomes a type a signature may hold at the first call that sees it: that
    # call is remembered, so the second is served from its program without validating again.
    monkeypatch.setattr(_eager, "JAX_ARRAY_TYPES", set())
    _eager.clear()
    validated = []
    real = ops._validated
    monkeypatch.setattr(ops, "_validated", lambda *args: validated.append(1) or real(*args))
    data, ids = jnp.asarray(make_data((5, 3), np.float32, 0)), jnp.asarray([4, -5, 0])
    for _ in range(3):
        np.testing.assert_array_equal(
            jax_gather.gather(data, ids), reference.gather(np.asarray(data), [4, -5, 0], 0)
        )
    assert validated == [1]


@pytest.mark.parametrize("n", [334, 1024, _moved_on_host.MOVED_UP_TO + 1])
def test_negative_indices_of_a_cpu_array_are_judged_while_their_program_runs(monkeypatch, n):
    # From 334 components (3 flops each: past INLINE_FLOPS), where a transfer guard stops
    # transfers (and from MOVED_UP_TO + 1 always), the program that normalises them is
    # dispatched first, to JAX's worker thread, and this thread judges them while it runs: no
    # new array is made on the host and handed over (so the guard has nothing to stop). Out of
    # bounds, its result is dropped and the call raises as before.
    assert not normalising_is_inline(n)
    with jax.default_device(jax.devices("cpu")[0]):  # CPU arrays, also beside an accelerator
        data = jnp.asarray(make_data((1000, 4), np.float32, 0))
        ids = np.random.default_rng(1).integers(-1000, 1000, n)
        on_cpu = jnp.asarray(ids)
        monkeypatch.setattr(_eager, "judged_outside_range", lambda *a: pytest.fail("judged before it ran"))
        for _ in range(2):
            with jax.transfer_guard_host_to_device("disallow"):
                out = jax_gather.gather(data, on_cpu)
            np.testing.assert_array_equal(out, reference.gather(np.asarray(data), ids, 0))
        bad = ids.copy()
        bad[n // 2] = 1000
        with pytest.raises(IndexError, match=re.escape(f"indices[{n // 2}] = 1000 is out of bounds")):
            jax_gather.gather(data, jnp.asarray(bad))


def _programs_taken(monkeypatch, record):
    """A list of ``record(mode, indices)`` for each program an eager call takes from now on (its
    calls made anew: clear _eager's). Each program keeps its ``lower``, which the eager path may
    compile to ask where it runs."""
    taken = []
    real_make = _eager.make_call

    def counted(program, mode):
        def call(data, indices):
            taken.append(record(mode, indices))
            return program(data, indices)

        call.lower, call.mode = program.lower, mode
        return call

    def make_call(plan, mode, programs_of, data, indices):
        return real_make(plan, mode, lambda m: counted(programs_of(m), m), data, indices)

    monkeypatch.setattr(_eager, "make_call", make_call)
    return taken


@pytest.mark.parametrize("kind", ["numpy", "jax", "committed"])
def test_after_negative_indices_the_next_are_normalised_without_the_test_first(monkeypatch, request, kind):
    # Once a call's indices had negatives, the next call of that signature dispatches the
    # normalising program before any test of [0, s-1] and judges them while it runs; indices in
    # [0, s-1] send the call after back to the test (and its program that gathers them as they
    # are). Out of bounds raises either way, and every result is the reference's.
    tested = []
    for name in ("in_range_test", "array_in_range_test"):  # of NumPy's and a CPU array's
        real_test = getattr(_eager, name)
        counted = lambda *a, real_test=real_test: (
            lambda test: lambda ids: tested.append(ids.size) or test(ids)
        )(real_test(*a))
        monkeypatch.setattr(_eager, name, counted)
    programs = _programs_taken(monkeypatch, lambda mode, indices: mode)
    _eager.clear()
    request.addfinalizer(_eager.clear)
    # (A JAX array's up to MOVED_UP_TO are normalised on the host where they may move, NumPy's
    # up to NORMALISED_ON_HOST.)
    n = {
        "committed": 1024,
        "numpy": _host_bounds.NORMALISED_ON_HOST + 1,
        "jax": _moved_on_host.MOVED_UP_TO + 1,
    }[kind]
    data = jnp.asarray(make_data((1000, 4), np.float32, 0))  # not gathered on the host by NumPy
    rng = np.random.default_rng(3)
    negative, in_range = rng.integers(-1000, 1000, n), rng.integers(0, 1000, n)
    bad = negative.copy()
    bad[n // 3] = -1001
    cpu = jax.devices("cpu")[0]
    given = {"numpy": lambda ids: ids, "jax": jnp.asarray, "committed": lambda ids: jax.device_put(ids, cpu)}[
        kind
    ]
    for ids, tests, program in [
        (in_range, 1, Mode.IN_RANGE),
        (negative, 1, Mode.PROMISE_IN_BOUNDS),  # the test fails: then normalised
        (negative, 0, Mode.PROMISE_IN_BOUNDS),  # at once
        (in_range, 0, Mode.PROMISE_IN_BOUNDS),  # at once, found in [0, s-1]
        (in_range, 1, Mode.IN_RANGE),  # tested again
    ]:
        tested.clear(), programs.clear()
        expected = reference.gather(np.asarray(data), ids, 0)
        np.testing.assert_array_equal(jax_gather.gather(data, given(ids)), expected)
        assert (len(tested), programs) == (tests, [program])
    for _ in range(2):  # after negatives, and after an error
        jax_gather.gather(data, given(negative))
        with pytest.raises(IndexError, match=re.escape(f"indices[{n // 3}] = -1001 is out of bounds")):
            jax_gather.gather(data, given(bad))


@pytest.mark.parametrize("first", [Mode.IN_RANGE, Mode.FILL])
@pytest.mark.parametrize("kind", ["numpy", "jax"])
def test_where_the_in_range_program_runs_on_a_worker_a_program_goes_before_the_judgement(
    monkeypatch, request, kind, first
):
    # Where XLA counts INLINE_FLOPS in the in-range program's own gather (_dispatched_first,
    # forced here), the checked call dispatches a program, then tests the indices while it runs:
    # the in-range one (the promise's after negatives, and after it where the test finds
    # negatives), or the fill's at every call. Out of bounds, its result is dropped: it raises.
    events = []
    real_test = _eager.in_range_test
    counted = lambda *a: (lambda test: lambda ids: events.append("test") or test(ids))(real_test(*a))
    monkeypatch.setattr(_eager, "in_range_test", counted)
    _programs_taken(monkeypatch, lambda mode, indices: events.append(mode))
    monkeypatch.setattr(_eager, "_dispatched_first", lambda plan, programs, data, indices: first)
    _eager.clear()
    request.addfinalizer(_eager.clear)
    n = 2000  # past what one pass judges (normalising_is_inline)
    data = jnp.asarray(make_data((1000, 4), np.float32, 0))  # not gathered on the host by NumPy
    rng = np.random.default_rng(5)
    negative, in_range = rng.integers(-1000, 1000, n), rng.integers(0, 1000, n)
    given = jnp.asarray if kind == "jax" else (lambda ids: ids)
    promise, fill = Mode.PROMISE_IN_BOUNDS, Mode.FILL
    jax_gather.gather(data, given(in_range))  # makes the call
    steps = {
        Mode.IN_RANGE: [
            (negative, [Mode.IN_RANGE, "test", promise]),  # it read the negatives as they are
            (negative, [promise]),  # judged while it runs, in one pass of two reductions
            (in_range, [promise]),
            (in_range, [Mode.IN_RANGE, "test"]),
        ],
        Mode.FILL: [(negative, [fill, "test"]), (in_range, [fill, "test"])] * 2,
    }[first]
    for ids, taken in steps:
        events.clear()
        np.testing.assert_array_equal(
            jax_gather.gather(data, given(ids)), reference.gather(np.asarray(data), ids, 0)
        )
        assert events == taken
    bad = in_range.copy()
    bad[n // 2] = 1000
    events.clear()
    with pytest.raises(IndexError, match=re.escape(f"indices[{n // 2}] = 1000 is out of bounds")):
        jax_gather.gather(data, given(bad))
    assert events == [first, "test"]  # dispatched before the judgement


def test_a_program_goes_before_the_judgement_only_where_the_in_range_one_leaves_this_thread(monkeypatch):
    # float32: no flop in the in-range gather, which runs on the calling thread: judged first.
    # int4: its converts send it to a worker thread; below FILL_FIRST_FROM_ELEMENTS, and on one
    # core (no loop split), it goes first itself, where the fill's would (test_cpu_facts: the split).
    def first(shape, dtype, n):
        data = jnp.asarray(make_data(shape, np.int8, 0)).astype(dtype)
        ids = jnp.asarray(np.random.default_rng(6).integers(0, shape[0], n))
        plan = plans.gather_plan(data.shape, ids.shape, 0)
        return _eager._dispatched_first(plan, ops._programs(plan, np.zeros((), dtype).tobytes()), data, ids)

    assert first((1000, 4), np.float32, 2000) is None
    if not jax_gathers(jnp.int4):
        pytest.skip("this JAX cannot gather int4 (tests.compat.jax_gathers)")
    assert first((4096, 1), jnp.int4, _eager.FILL_FIRST_FROM_ELEMENTS - 1) is Mode.IN_RANGE  # too few
    monkeypatch.setattr(_eager, "xla_splits_loops", lambda: False)
    assert first((4096, 1), jnp.int4, 12000) is Mode.IN_RANGE


@pytest.mark.parametrize("mode", ["fill", "clip"])
@pytest.mark.parametrize("kind", ["numpy", "int64 in chunks", "jax", "committed"])
def test_fill_and_clip_send_host_indices_in_range_to_the_program_without_index_arithmetic(
    monkeypatch, request, kind, mode
):
    # Where "fill"'s or "clip"'s program runs on a worker thread and the one for indices in
    # [0, s-1] on the calling thread, host indices proved in [0, s-1] go to the latter; others
    # to the mode's, as do the next UNTESTED_AFTER_OUTSIDE calls, untested; then the test again.
    # Every result is the reference's.
    monkeypatch.setattr(_eager_unchecked, "UNTESTED_AFTER_OUTSIDE", 2)
    programs = _programs_taken(monkeypatch, lambda m, indices: m)
    _eager.clear()
    request.addfinalizer(_eager.clear)
    n = _cpu_client.CPU_COPIED_INLINE // 8 + 1 if kind == "int64 in chunks" else 1024
    data = jnp.asarray(make_data((1000, 4), np.float32, 0))  # not gathered on the host by NumPy
    rng = np.random.default_rng(3)
    in_range, outside = rng.integers(0, 1000, n), rng.integers(-1200, 1200, n)
    wide = in_range.copy()
    wide[n // 2] = 2**32 + 1  # int32 would wrap it to row 1
    cpu = jax.devices("cpu")[0]
    given = {
        "numpy": lambda ids: ids.astype(np.int32),
        "int64 in chunks": lambda ids: ids,
        "jax": lambda ids: jnp.asarray(ids, jnp.int32),
        "committed": lambda ids: jax.device_put(ids.astype(np.int32), cpu),
    }[kind]
    own = Mode(mode)
    steps = [
        (in_range, Mode.IN_RANGE),
        (outside, own),
        (in_range, own),
        (in_range, own),
        (in_range, Mode.IN_RANGE),
    ]
    if kind == "int64 in chunks":
        steps += [(wide, own), (in_range, own), (outside, own), (in_range, Mode.IN_RANGE)]
    for ids, program in steps:
        programs.clear()
        expected = reference.gather(np.asarray(data), np.clip(np.where(ids < 0, ids + 1000, ids), 0, 999), 0)
        if mode == "fill":
            expected[(ids < -1000) | (ids >= 1000)] = np.nan
        np.testing.assert_array_equal(jax_gather.gather(data, given(ids), mode=mode), expected)
        assert programs[-1:] == [program]


@pytest.mark.parametrize("mode", ["fill", "clip"])
@pytest.mark.parametrize(
    "n, width", [(334, 16), (1023, 4), (1024, 1), (_eager_unchecked.TESTED_FROM_INDICES, 4)]
)
def test_fill_and_clip_test_a_cpu_arrays_indices_from_a_size(monkeypatch, request, n, width, mode):
    # "fill": fewer index components or output elements, their own program on an awake worker
    # thread is the faster back to back: untested. "clip" at every size where its program runs
    # on a worker thread (from 334 ids of an axis of 1000: jnp.take's clip never does). NumPy's
    # at every size.
    programs = _programs_taken(monkeypatch, lambda m, indices: m)
    _eager.clear()
    request.addfinalizer(_eager.clear)
    data = jnp.asarray(make_data((1000, width), np.float32, 0))
    ids = np.arange(n) % 1000
    large = n >= _eager_unchecked.TESTED_FROM_INDICES and n * width >= _eager_unchecked.TESTED_FROM_ELEMENTS
    tested = large or mode == "clip"
    for kind in ("jax", "numpy"):
        _eager.clear(), programs.clear()
        for _ in range(2):
            got = jax_gather.gather(data, jnp.asarray(ids) if kind == "jax" else ids, mode=mode)
            np.testing.assert_array_equal(got, np.asarray(data)[ids])
        assert programs == [Mode.IN_RANGE if tested or kind == "numpy" else Mode(mode)] * 2


@pytest.mark.parametrize("mode", ["fill", "clip"])
@pytest.mark.parametrize("kind", ["numpy", "jax"])
@pytest.mark.parametrize("name, shape", [("gather_elements", (64, 64)), ("gather_nd", (4096, 2))])
def test_fill_and_clip_in_range_first_read_what_the_reference_reads(
    monkeypatch, request, name, shape, kind, mode
):
    # The test of [0, s-1] and the program it picks, for element and tuple indices: the
    # reference (plain loops over the ONNX formula) says what every call reads.
    monkeypatch.setattr(_eager_unchecked, "UNTESTED_AFTER_OUTSIDE", 1)
    programs = _programs_taken(monkeypatch, lambda m, indices: m)
    _eager.clear()
    request.addfinalizer(_eager.clear)
    op = ops_table.OPS[name]
    data = make_data((64, 64), np.float32, 1)
    rng = np.random.default_rng(5)
    in_range, outside = rng.integers(0, 64, shape), rng.integers(-80, 80, shape)
    as_given = jnp.asarray if kind == "jax" else (lambda ids: ids)
    own = Mode(mode)
    for ids, program in [
        (in_range, Mode.IN_RANGE),
        (outside, own),
        (in_range, own),
        (in_range, Mode.IN_RANGE),
    ]:
        programs.clear()
        expected = op.reference(data, ids, 0, mode=mode, fill=np.nan)
        np.testing.assert_array_equal(op.fn(data, as_given(ids), 0, mode=mode), expected)
        assert programs[-1:] == [program]


@pytest.mark.parametrize("kind", ["numpy", "jax"])
@pytest.mark.parametrize("mode, n", [("fill", 16), ("clip", 16), ("clip", 333)])
def test_fill_and_clip_of_few_indices_take_their_own_program_untested(monkeypatch, request, kind, mode, n):
    # Their program runs on the calling thread anyway (clip's short form up to 333 ids): no
    # test, nothing more compiled.
    for name in ("in_range_test", "array_in_range_test"):  # of NumPy's and a CPU array's
        monkeypatch.setattr(_eager_unchecked, name, lambda *a: pytest.fail("tested"))
    programs = _programs_taken(monkeypatch, lambda m, indices: m)
    _eager.clear()
    request.addfinalizer(_eager.clear)
    data = jnp.asarray(make_data((1000, 4), np.float32, 0))
    for ids in (np.arange(n), np.arange(n) - 8):
        given = jnp.asarray(ids) if kind == "jax" else ids
        np.testing.assert_array_equal(jax_gather.gather(data, given, mode=mode), np.asarray(data)[ids])
    assert programs == [Mode(mode)] * 2


@pytest.mark.parametrize("mode", ["checked", "promise_in_bounds"])
@pytest.mark.parametrize(
    "n",
    [
        334,
        _moved_on_host.CHECKED_MOVED_FROM - 1,
        _moved_on_host.CHECKED_MOVED_FROM,
        _host_bounds.NORMALISED_ON_HOST,
        _host_bounds.NORMALISED_ON_HOST + 1,
        _moved_on_host.MOVED_UP_TO,
        _moved_on_host.MOVED_UP_TO + 1,
    ],
)
def test_a_cpu_arrays_negative_indices_are_normalised_on_the_host_where_they_may_move(
    monkeypatch, request, mode, n
):
    # A CPU JAX array's indices whose normalising program would run on JAX's worker thread are
    # tested on the host; in [0, s-1] they go as they are to the program that gathers them so,
    # with negatives normalised here (as NumPy), and to it: never the worker's program (up to
    # MOVED_UP_TO, in the checked mode from CHECKED_MOVED_FROM). Not where they may not move (an
    # array committed to its device, a transfer guard that stops or logs transfers): there the
    # program that normalises them takes them.
    assert not normalising_is_inline(n)
    programs = _programs_taken(monkeypatch, lambda mode, indices: (mode, type(indices)))
    _eager.clear()
    request.addfinalizer(_eager.clear)
    cpu = jax.devices("cpu")[0]
    here = n <= _moved_on_host.MOVED_UP_TO and (
        mode == "promise_in_bounds" or n >= _moved_on_host.CHECKED_MOVED_FROM
    )
    moved = (Mode.IN_RANGE, np.ndarray) if here else (Mode.PROMISE_IN_BOUNDS, jax.Array)
    # (Not tested on the host, a promise's indices all go to the program that normalises them.)
    tested = mode == "checked" or here
    with jax.default_device(cpu):
        data = jnp.asarray(make_data((1000, 4), np.float32, 0))
        rng = np.random.default_rng(5)
        negative, in_range = rng.integers(-1000, 1000, n), rng.integers(0, 1000, n)
        cases = [
            (
                jnp.asarray(in_range),
                contextlib.nullcontext(),
                Mode.IN_RANGE if tested else Mode.PROMISE_IN_BOUNDS,
                jax.Array,
            ),
            (jnp.asarray(negative), contextlib.nullcontext()) + moved,
            (
                jnp.asarray(negative),
                jax.transfer_guard_host_to_device("disallow"),
                Mode.PROMISE_IN_BOUNDS,
                jax.Array,
            ),
            (
                jnp.asarray(negative),
                jax.transfer_guard_host_to_device("log"),
                Mode.PROMISE_IN_BOUNDS,
                jax.Array,
            ),
            (jax.device_put(negative, cpu), contextlib.nullcontext(), Mode.PROMISE_IN_BOUNDS, jax.Array),
        ]
        for ids, guard, program, kind in cases:
            programs.clear()
            with guard:
                got = jax_gather.gather(data, ids, mode=mode)
            np.testing.assert_array_equal(got, reference.gather(np.asarray(data), np.asarray(ids), 0))
            assert [(m, issubclass(t, kind)) for m, t in programs] == [(program, True)], (
                ids.committed,
                guard,
            )
        if mode == "checked":
            bad = negative.copy()
            bad[n // 2] = 1000
            with pytest.raises(IndexError, match=re.escape(f"indices[{n // 2}] = 1000 is out of bounds")):
                jax_gather.gather(data, jnp.asarray(bad))
        else:  # a broken promise reads some row of the table
            broken = negative.copy()
            broken[: n // 2] = rng.integers(-(2**31), 2**31 - 1, n // 2)
            got = np.asarray(jax_gather.gather(data, jnp.asarray(broken), mode=mode))
            table = {tuple(r) for r in np.asarray(data).tolist()}
            assert all(tuple(row) in table for row in got.tolist())


@pytest.mark.parametrize("mode", ["checked", "promise_in_bounds"])
@pytest.mark.parametrize("on_a_worker", [False, True])
@pytest.mark.parametrize(
    "n", [_host_bounds.NORMALISED_ON_HOST, _host_bounds.NORMALISED_ON_HOST + 1, _moved_on_host.MOVED_UP_TO]
)
def test_negative_indices_go_to_their_own_program_where_the_in_range_one_runs_on_a_worker(
    monkeypatch, request, mode, n, on_a_worker
):
    # Past NORMALISED_ON_HOST, a CPU array's indices with negatives are normalised on the host
    # only where the program for indices in [0, s-1] runs on the calling thread: where XLA's
    # count of its flops sends it to a worker thread (as it does for bfloat16 data with JAX
    # 0.10), they go to the program that normalises them. Asked of the compiled program once
    # per signature; up to NORMALISED_ON_HOST never asked.
    asked = []
    monkeypatch.setattr(_moved_on_host, "runs_on_a_worker_thread", lambda *a: asked.append(1) or on_a_worker)
    programs = _programs_taken(monkeypatch, lambda mode, indices: (mode, type(indices)))
    _eager.clear()
    request.addfinalizer(_eager.clear)
    data = jnp.asarray(make_data((1000, 4), np.float32, 0))
    ids = np.random.default_rng(8).integers(-1000, 1000, n)
    expected = reference.gather(np.asarray(data), ids, 0)
    for _ in range(3):
        np.testing.assert_array_equal(jax_gather.gather(data, jnp.asarray(ids), mode=mode), expected)
    asks = n > _host_bounds.NORMALISED_ON_HOST
    program = (Mode.PROMISE_IN_BOUNDS, jax.Array) if on_a_worker and asks else (Mode.IN_RANGE, np.ndarray)
    assert [(m, issubclass(t, program[1])) for m, t in programs] == [(program[0], True)] * 3
    assert asked == [1] * asks


@pytest.mark.parametrize("mode", ["checked", "promise_in_bounds"])
@pytest.mark.parametrize("promise_on_a_worker", [False, True])
@pytest.mark.parametrize("n", [1, _buffer_bounds.BUFFER_LISTED_UP_TO + 1, 333])
def test_a_promises_few_negative_indices_are_normalised_on_the_host_where_their_program_runs_on_a_worker(
    monkeypatch, request, mode, n, promise_on_a_worker
):
    # Indices too few for their normalisation to count INLINE_FLOPS go to the program that
    # normalises them, unless, under a promise, XLA's count of that program's own flops (a
    # gather of bfloat16 or float8 data: 2 an element, with JAX 0.10) sends it to a worker
    # thread where the program for indices in [0, s-1] stays on the calling thread: then a CPU
    # array's are normalised here, as NumPy, where they may move. Asked of the compiled programs
    # once per signature. Checked calls keep the normalising program (CHECKED_MOVED_FROM).
    assert normalising_is_inline(n)
    asked = []

    def on_a_worker(program, data, indices):
        asked.append(program.mode)
        return promise_on_a_worker and program.mode is Mode.PROMISE_IN_BOUNDS

    monkeypatch.setattr(_moved_on_host, "runs_on_a_worker_thread", on_a_worker)
    programs = _programs_taken(monkeypatch, lambda mode, indices: (mode, type(indices)))
    _eager.clear()
    request.addfinalizer(_eager.clear)
    data = jnp.asarray(make_data((1000, 4), np.float32, 0))
    ids = np.random.default_rng(9).integers(-1000, 0, n)  # every one negative
    expected = reference.gather(np.asarray(data), ids, 0)
    for _ in range(3):
        np.testing.assert_array_equal(jax_gather.gather(data, jnp.asarray(ids), mode=mode), expected)
    here = promise_on_a_worker and mode == "promise_in_bounds"
    moved = (Mode.IN_RANGE, np.ndarray) if here else (Mode.PROMISE_IN_BOUNDS, jax.Array)
    assert [(m, issubclass(t, moved[1])) for m, t in programs] == [(moved[0], True)] * 3
    asks = 0 if mode == "checked" else 1 + promise_on_a_worker
    assert asked == [Mode.PROMISE_IN_BOUNDS, Mode.IN_RANGE][:asks]
    programs.clear()  # committed to its device: never moved
    got = jax_gather.gather(data, jax.device_put(ids, jax.devices("cpu")[0]), mode=mode)
    np.testing.assert_array_equal(got, expected)
    assert [(m, issubclass(t, jax.Array)) for m, t in programs] == [(Mode.PROMISE_IN_BOUNDS, True)]
    if mode == "checked":
        bad = ids.copy()
        bad[n // 2] = -1001
        with pytest.raises(IndexError, match=re.escape(f"indices[{n // 2}] = -1001 is out of bounds")):
            jax_gather.gather(data, jnp.asarray(bad))


@pytest.mark.parametrize("mode", ["checked", "promise_in_bounds"])
@pytest.mark.parametrize("name", ["gather_elements", "gather_nd"])
def test_index_tuples_and_elements_normalised_on_the_host_read_what_numpy_reads(monkeypatch, name, mode):
    # GatherElements' indices and GatherND's index tuples (each component against its own axis)
    # take the same path as Gather's: normalised on the host, gathered as they are.
    handed = []
    module, target = (
        (_moved_on_host, "moved_in_range")
        if mode == "promise_in_bounds"
        else (_eager, "judged_outside_range")
    )
    real_normalise = getattr(module, target)
    monkeypatch.setattr(module, target, lambda *a: handed.append(1) or real_normalise(*a))
    op = ops_table.OPS[name]
    data = make_data((50, 40, 3), np.float32, 0)
    rng = np.random.default_rng(7)
    components = _moved_on_host.CHECKED_MOVED_FROM
    if name == "gather_nd":
        ids = np.stack([rng.integers(-50, 50, components // 2), rng.integers(-40, 40, components // 2)], -1)
    else:
        ids = rng.integers(-50, 50, (-(-components // 6), 2, 3))  # at least that many
    for _ in range(2):
        got = op.fn(jnp.asarray(data), jnp.asarray(ids), 0, mode=mode)
        np.testing.assert_array_equal(np.asarray(got), op.reference(data, ids, 0))
    assert handed == [1, 1]


@pytest.mark.parametrize("dtype", [np.int32, np.int64])  # int64: narrowed a chunk at a time
@pytest.mark.parametrize("where", ["first", "last"])
def test_many_checked_indices_are_probed_first_then_judged_while_gathered(monkeypatch, request, dtype, where):
    # From PROBED_FROM the first PROBED_INDICES are tested before the rest: a negative among them
    # sends every index to the program that normalises them at once (the whole test is never
    # made); one past them, after the test of the rest. Out of bounds raises either way.
    tested = []
    real = _eager.in_range_test
    counted = lambda *a: (lambda test: lambda ids: tested.append(ids.size) or test(ids))(real(*a))
    monkeypatch.setattr(_eager, "in_range_test", counted)
    _eager.clear()  # no call remembered with the test uncounted, nor after with it counted
    request.addfinalizer(_eager.clear)
    n = _eager.PROBED_FROM
    data = make_data((1000, 4), np.float32, 0)
    ids = np.random.default_rng(2).integers(0, 1000, n).astype(dtype)
    at = 7 if where == "first" else n - 7
    ids[at] = -3
    expected = reference.gather(data, ids, 0)
    np.testing.assert_array_equal(jax_gather.gather(data, ids), expected)
    if where == "first":
        assert tested == [_eager.PROBED_INDICES]
    else:
        assert tested[0] == _eager.PROBED_INDICES and sum(tested[1:]) >= n - _eager.PROBED_INDICES
    bad = ids.copy()
    bad[at] = 1000
    with pytest.raises(IndexError, match=re.escape(f"indices[{at}] = 1000 is out of bounds")):
        jax_gather.gather(data, bad)


@pytest.mark.parametrize("kind", ["numpy", "jax"])
def test_many_checked_indices_of_one_row_are_judged_whole(kind):
    # The probe reads leading rows: indices of one row (Gather with batch dims of one batch,
    # here PROBED_FROM of them) have none to probe, and are judged whole, in range and not.
    n = _eager.PROBED_FROM + 5
    data = make_data((1, 2, 9), np.int32, 0)
    ids = np.random.default_rng(4).integers(0, 2, (1, n))
    given = jnp.asarray if kind == "jax" else (lambda x: x)
    for _ in range(2):
        out = jax_gather.gather(given(data), given(ids), 1, batch_dims=1)
        np.testing.assert_array_equal(out, reference.gather(data, ids, 1, batch_dims=1))
    bad = ids.copy()
    bad[0, n - 2] = 2
    with pytest.raises(IndexError, match=re.escape(f"indices[0, {n - 2}] = 2 is out of bounds")):
        jax_gather.gather(given(data), given(bad), 1, batch_dims=1)


def test_in_range_indices_are_gathered_with_no_index_arithmetic():
    # Why the checked mode's eager program runs on the calling thread: XLA counts no flops in it
    # (JAX's CPU client inlines programs under _cpu_client.INLINE_FLOPS; test_cpu_facts checks that).
    data, ids = jnp.zeros((1000, 8)), jnp.zeros((4096,), jnp.int32)
    plan = plans.gather_plan(data.shape, ids.shape, 0)
    compiled = ops._programs(plan, None)(Mode.IN_RANGE).lower(data, ids).compile()
    analysis = compiled.cost_analysis()
    analysis = analysis[0] if isinstance(analysis, list) else analysis
    assert analysis.get("flops", 0.0) < _cpu_client.INLINE_FLOPS
    promise = ops._programs(plan, None)(Mode.PROMISE_IN_BOUNDS).lower(data, ids).compile()
    analysis = promise.cost_analysis()
    analysis = analysis[0] if isinstance(analysis, list) else analysis
    assert analysis["flops"] >= _cpu_client.INLINE_FLOPS  # the normalising program would not be


def test_a_second_call_compiles_nothing():
    data, ids = jnp.asarray(make_data((9, 4), np.float32, 0)), jnp.asarray([3, -2])
    for mode in ("checked", "fill", "clip", "promise_in_bounds"):
        jax_gather.gather(data, ids, mode=mode)
        with counting_compiles() as count:
            jax_gather.gather(data, ids, mode=mode)
        assert count[0] == 0, mode


@pytest.mark.parametrize("writeable", [True, False])
@pytest.mark.parametrize(
    "count",
    [
        1,
        _host_bounds.LISTED_UP_TO,
        _host_bounds.LISTED_UP_TO + 1,
        4095,
        4096,
        _host_bounds.READ_ONLY_ARGMAX_BELOW // 4 - 1,
        _host_bounds.READ_ONLY_ARGMAX_BELOW // 4,
        _host_bounds.ARGMAX_UP_TO,
        _host_bounds.ARGMAX_UP_TO + 1,
    ],
)
@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint64])
def test_the_bounds_tests_either_side_of_their_switch_to_a_reduction(count, dtype, writeable):
    # Up to LISTED_UP_TO indices the verdict finds the extremes in a Python list, then up to
    # ARGMAX_UP_TO the test and the verdict by argmax and argmin, past it by a reduction; indices
    # that are not writeable (as a CPU JAX array's host view), told so or not, are copied first
    # below READ_ONLY_ARGMAX_BELOW bytes, and from it judged by reductions: each must see a
    # negative index, and one equal to the axis' size, wherever it lies.
    size = 100
    plan = plans.gather_plan((size,), (count,), 0)
    test = _host_bounds.in_range_test(plan, np.dtype(dtype), count)
    by_judge = functools.partial(_host_bounds.judge, plan)
    verdicts = [_host_bounds.verdict_test(plan, count, read_only) or by_judge for read_only in (False, True)]
    fixed = lambda ids: ids if writeable else np.frombuffer(ids.tobytes(), ids.dtype)  # read-only
    good = (np.arange(count) % size).astype(dtype)
    for ids in (good, good[::-1].copy()):
        assert test(fixed(ids))
        assert [verdict(fixed(ids)) for verdict in verdicts] == [_host_bounds.Verdict.IN_RANGE] * 2
    for bad in [-1, -size, size, 127] if dtype != np.uint64 else [size, 2**64 - 1]:
        for where in (0, count // 2, count - 1):
            ids = good.copy()
            ids[where] = bad
            assert not test(fixed(ids)), (bad, where)
            expected = (
                _host_bounds.Verdict.IN_BOUNDS if -size <= bad < 0 else _host_bounds.Verdict.OUT_OF_BOUNDS
            )
            assert [verdict(fixed(ids)) for verdict in verdicts] == [expected] * 2, (bad, where)


@pytest.mark.parametrize(
    "shape",
    [(1,), (_buffer_bounds.BUFFER_LISTED_UP_TO,), (_buffer_bounds.BUFFER_LISTED_UP_TO + 1,), (3, 111)],
)
@pytest.mark.parametrize("dtype", [np.dtype(f"{k}{n}") for k in "iu" for n in (1, 2, 4, 8)])
def test_a_cpu_arrays_few_indices_are_judged_from_its_buffer(dtype, shape):
    # A CPU JAX array's few indices are read from its buffer: as Python ints (up to
    # BUFFER_LISTED_UP_TO), each dtype's code reading every index with its own width and sign
    # (uint32's 2**32 - 1 is no -1); more, in any shape, viewed unsigned by NumPy for the test.
    size, count = 100, math.prod(shape)
    info = np.iinfo(dtype)
    with enable_x64(np.dtype(dtype).itemsize == 8):
        plan = plans.gather_plan((size, 3), shape, 0)
        test, verdict = _buffer_bounds.buffer_tests(plan, np.dtype(dtype), count)
        good = (np.arange(count) % size).astype(dtype).reshape(shape)
        assert test(jnp.asarray(good)) and verdict(jnp.asarray(good)) is Verdict.IN_RANGE
        data = jnp.asarray(make_data((size, 3), np.float32, 0))
        for bad in {-1, -size, size, int(info.min), int(info.max)}:
            if not info.min <= bad <= info.max or bad == 0:
                continue
            expected = Verdict.IN_BOUNDS if -size <= bad < 0 else Verdict.OUT_OF_BOUNDS
            for where in {0, count - 1}:
                ids = good.copy()
                ids.flat[where] = bad
                assert not test(jnp.asarray(ids)) and verdict(jnp.asarray(ids)) is expected, (bad, where)
                out = expected is Verdict.OUT_OF_BOUNDS
                with pytest.raises(IndexError) if out else contextlib.nullcontext():
                    got = jax_gather.gather(data, jnp.asarray(ids))
                    np.testing.assert_array_equal(np.asarray(got), reference.gather(np.asarray(data), ids, 0))
    more = -(-_host_bounds.READ_ONLY_ARGMAX_BELOW // np.dtype(dtype).itemsize)
    assert _buffer_bounds.buffer_tests(plan, np.dtype(dtype), more) is None


@pytest.mark.parametrize("dtype", [np.dtype(f"{k}{n}") for k in "iu" for n in (1, 2, 4, 8)])
def test_a_cpu_arrays_in_range_test_reads_every_index_of_its_buffer(dtype):
    # What the host says of the same values, for one index component (the buffer read as Python
    # ints, as one, or viewed unsigned, in any shape) and past it (index tuples;
    # READ_ONLY_ARGMAX_BELOW bytes and more), against an axis of 100 and one of 128 (a power of
    # two, which one mask decides).
    rng = np.random.default_rng(11)
    big = _host_bounds.READ_ONLY_ARGMAX_BELOW // dtype.itemsize
    with enable_x64(dtype.itemsize == 8):
        as_one_int = _buffer_bounds.LANES_BELOW_BYTES // dtype.itemsize - 1
        for size, shape, plan_of in [
            *(
                (size, shape, lambda s, size=size: plans.gather_plan((size, 3), s, 0))
                for size in (100, 128)
                for shape in [
                    (1,),
                    (_host_bounds.LISTED_UP_TO,),
                    (_host_bounds.LISTED_UP_TO + 1,),
                    (as_one_int,),
                    (as_one_int + 1,),
                    (big,),
                ]
            ),
            (100, (3, 111), lambda s: plans.gather_elements_plan((100, 111), s, 0)),
            (100, (40, 2), lambda s: plans.gather_nd_plan((100, 100), s, 0)),
        ]:
            test = _buffer_bounds.array_in_range_test(plan_of(shape), dtype, math.prod(shape))
            for low in (0, -1, int(np.iinfo(dtype).min)):
                for high in sorted({min(h, int(np.iinfo(dtype).max) + 1) for h in (size, size + 1, 2**64)}):
                    ids = rng.integers(max(low, -size - 5), min(high, size + 5), shape).astype(dtype)
                    ids.flat[rng.integers(ids.size)] = high - 1
                    expected = bool(((ids >= 0) & (ids < size)).all())
                    assert test(jnp.asarray(ids)) is expected, (size, shape, low, high)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16])
def test_the_lanes_of_one_int_say_what_numpy_says_of_every_value_and_bound(dtype):
    # Every value of a byte against every bound the lanes take (to 2**(bits-1)), in every lane
    # of the fewest ids read as one int, beside values at the bound: carries between lanes would
    # show as a wrong answer. The test itself reads NumPy's rows (their buffer, as a CPU array's).
    dtype = np.dtype(dtype)
    bits, lanes = 8 * dtype.itemsize, _host_bounds.LISTED_UP_TO + 1
    values = np.arange(np.iinfo(dtype).min, np.iinfo(dtype).max + 1, max(1, 2 ** (bits - 8)), dtype=dtype)
    for bound in sorted({0, 1, 2, 3, 5, 64, 65, 100, 127, 128, 2 ** (bits - 1) - 1, 2 ** (bits - 1)}):
        _, lifted = _buffer_bounds._lanes_below(bits, lanes, bound)
        assert (lifted == 0) is (bound > 0 and bound & (bound - 1) == 0)  # a power of two: one mask decides
        test = _buffer_bounds.array_in_range_test(plans.gather_plan((bound, 3), (lanes,), 0), dtype, lanes)
        assert test.__name__ == "as_one_int"
        for lane in range(lanes):
            ids = np.full((values.size, lanes), max(bound - 1, 0), dtype)
            ids[:, lane] = values
            for row in ids:
                assert test(row) == bool((row.view(f"u{dtype.itemsize}") < bound).all()), (bound, lane, row)
    assert (
        _buffer_bounds._lanes_below(bits, lanes, 2 ** (bits - 1) + 1) is None
    )  # an unsigned dtype's long axis


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16])
def test_the_verdict_of_one_ints_lanes_says_what_numpy_says_of_every_value_and_bound(dtype):
    # The verdict read as one int (in [0, s-1], in [-s, s-1] with some negative, or out), of
    # every value of a byte in every lane of a few ids, the others in range or (signed) at -s:
    # a carry between lanes of x + s, or a sign bit lost, would show as a wrong verdict. Bounds
    # to a quarter of a signed dtype's range and half of an unsigned one's; past them no such
    # verdict, and the buffer's listed ints or host view judge (NumPy's rows read as a CPU
    # array's buffer).
    dtype = np.dtype(dtype)
    bits, lanes, signed = 8 * dtype.itemsize, 5, dtype.kind == "i"
    values = np.arange(np.iinfo(dtype).min, np.iinfo(dtype).max + 1, max(1, 2 ** (bits - 8)), dtype=dtype)
    last = 2 ** (bits - 1 - signed)
    for bound in sorted({0, 1, 2, 3, 5, 31, 32, 33, 63, 64, 100, 127, 128, last - 1, last, last + 1}):
        plan = plans.gather_plan((bound, 3), (lanes,), 0)
        verdict = _buffer_bounds.buffer_tests(plan, dtype, lanes)[1]
        assert (verdict.__name__ == "verdict_as_one_int") is (bound <= last), bound
        for lane, other in itertools.product(range(lanes), {max(bound - 1, 0), -bound if signed else 0}):
            ids = np.full((values.size, lanes), other, dtype)
            ids[:, lane] = values
            for row in ids:
                wide = row.astype(np.int64)
                expected = (
                    Verdict.OUT_OF_BOUNDS
                    if (wide < -bound).any() or (wide >= bound).any()
                    else Verdict.IN_RANGE
                    if (wide >= 0).all()
                    else Verdict.IN_BOUNDS
                )
                assert verdict(row) is expected, (bound, lane, row)


@pytest.mark.parametrize("size", [100, 200, 256])
def test_a_cpu_arrays_unsigned_bytes_are_tested_against_an_axis_longer_than_their_lanes_allow(size):
    # uint8 ids against an axis past 128: one int's lanes cannot hold it, so NumPy's view tests them.
    plan = plans.gather_plan((size, 3), (20,), 0)
    test = _buffer_bounds.array_in_range_test(plan, np.dtype(np.uint8), 20)
    for high in (size - 1, size, 255):
        ids = np.arange(20, dtype=np.uint8)
        ids[7] = min(high, 255)
        assert test(jnp.asarray(ids)) is bool(ids.max() < size), (size, high)


@pytest.mark.parametrize(
    "n", [2, _buffer_bounds.BUFFER_LISTED_UP_TO + 1, _buffer_bounds.LANES_BELOW_BYTES // 4]
)
def test_a_deleted_arrays_indices_fail_as_jax_says(n):
    data = jnp.asarray(make_data((5, 3), np.float32, 0))
    jax_gather.gather(data, jnp.arange(n) % 5)  # its signature remembered
    ids = jnp.arange(n) % 5
    ids.delete()
    with pytest.raises(RuntimeError, match="Array has been deleted"):
        jax_gather.gather(data, ids)


@pytest.mark.parametrize("dtype", [np.int8, np.int64, np.uint64])
def test_a_few_indices_of_several_axes_are_judged_wherever_they_lie(dtype):
    # GatherElements' few indices are 2-D, and may be a strided view: the listed verdict reads
    # every one of them (a transposed view's first row is not its memory's).
    data = np.zeros((5, 2), np.float32)
    plan = plans.gather_elements_plan(data.shape, (2, 2), 0)
    verdict = _host_bounds.verdict_test(plan, 4)
    base = np.array([[0, 1], [2, 3]], dtype)
    assert verdict(base.T) is _host_bounds.Verdict.IN_RANGE
    for bad, expected in [(5, _host_bounds.Verdict.OUT_OF_BOUNDS), (-5, _host_bounds.Verdict.IN_BOUNDS)]:
        if bad < 0 and dtype == np.uint64:
            continue
        for where in np.ndindex(2, 2):
            ids = base.copy()
            ids[where] = bad
            assert verdict(ids.T) is expected, (bad, where)
            with pytest.raises(IndexError) if bad == 5 else contextlib.nullcontext():
                got = jax_gather.gather_elements(jnp.asarray(data), jnp.asarray(ids.T), axis=0)
                np.testing.assert_array_equal(np.asarray(got), np.zeros((2, 2), np.float32))


@pytest.mark.parametrize("tuples", [False, True])
@pytest.mark.parametrize("where", ["none", "first", "last", "negative"])
def test_indices_tested_and_narrowed_in_chunks(tuples, where):
    # Unaligned int64 indices over several chunks: the verdict is the whole array's, and the
    # int32 copy, made chunk by chunk, is exact and aligned for the CPU client.
    count = 3 * _cpu_client.NARROWED_CHUNK + 5
    rng = np.random.default_rng(1)
    if tuples:
        plan = plans.gather_nd_plan((300, 7), (count // 2, 2), 0)
        values = np.stack([rng.integers(0, 300, count // 2), rng.integers(0, 7, count // 2)], axis=-1)
    else:
        plan = plans.gather_plan((300,), (count,), 0)
        values = rng.integers(0, 300, count)
    raw = np.empty(values.nbytes + 2 * _cpu_client.CPU_ALIGNMENT, np.uint8)
    start = -raw.ctypes.data % _cpu_client.CPU_ALIGNMENT
    at = lambda offset: (
        raw[start + offset : start + offset + values.nbytes].view(np.int64).reshape(values.shape)
    )
    ids = at(8)  # 8 bytes past the client's alignment: narrowed
    ids[...] = values
    flat = ids.reshape(-1)
    if where != "none":
        flat[{"first": 3, "last": flat.size - 1, "negative": flat.size // 2}[where]] = (
            -1 if where == "negative" else 300
        )
    test = _host_bounds.in_range_test(plan, ids.dtype, ids.size)
    in_range, narrow = _cpu_client.tested_and_narrowed(ids, plan, test)
    assert in_range is (where == "none") and in_range is test(ids)
    if in_range:
        assert narrow.dtype == np.int32 and narrow.ctypes.data % _cpu_client.CPU_ALIGNMENT == 0
        np.testing.assert_array_equal(narrow, values)
    aligned = at(0)  # read in place by the client: tested whole, not narrowed
    aligned[...] = ids.copy()
    assert _cpu_client.tested_and_narrowed(aligned, plan, test) == (in_range, None)


@pytest.mark.parametrize("dtype", [np.int64, np.uint64, np.int16])
def test_indices_the_client_would_copy_are_converted_to_aligned_int32(dtype):
    # From CPU_COPIED_INLINE bytes of int32, straight into a buffer JAX's CPU client takes as it
    # is; fewer, as astype gives them (the client copies them inline either way).
    bound = _cpu_client.CPU_COPIED_INLINE // 4
    for count in (bound - 1, bound):
        values = np.arange(count, dtype=dtype) % 30000 * (-1 if np.dtype(dtype).kind == "i" else 1)
        for source in (values, np.stack([values, values], axis=1)[:, 1]):  # contiguous and strided
            converted = _cpu_client.int32_for_cpu(source)
            assert converted.dtype == np.int32 and converted.shape == source.shape
            np.testing.assert_array_equal(converted, source.astype(np.int64))
            if count == bound:
                assert converted.ctypes.data % _cpu_client.CPU_ALIGNMENT == 0
                assert not np.shares_memory(converted, source)


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
@pytest.mark.parametrize("mode", ["checked", "promise_in_bounds", "fill", "clip"])
def test_many_numpy_indices_reach_a_program_on_the_worker_thread_as_they_are(
    mode, dtype, monkeypatch, request
):
    # Neither converted nor aligned here: JAX converts 64-bit ones on the way, and its client's
    # copy is read from the worker's cache (_eager._given_as_they_are).
    taken = _programs_taken(monkeypatch, lambda m, indices: (m, indices))
    monkeypatch.setattr(_host_gather, "HOST_GATHER_BELOW", 0)  # the program's placement, not NumPy's
    _eager.clear()
    request.addfinalizer(_eager.clear)
    count = _cpu_client.CPU_COPIED_INLINE // 4 + 16
    table = make_data((count // 16, 16), np.float32, 0)
    ids = np.random.default_rng(0).integers(-16, 16, (count // 16, 16)).astype(dtype)
    for _ in range(2):
        out = jax_gather.gather_elements(table, ids, 1, mode=mode)
        np.testing.assert_array_equal(out, np.take_along_axis(table, ids % 16, 1))
    normalising = [indices for m, indices in taken if m is not Mode.IN_RANGE]
    assert len(normalising) == 2 and all(indices is ids for indices in normalising)


@pytest.mark.parametrize("where", [0, -1])
@pytest.mark.parametrize("dtype", [np.int64, np.uint64])
@pytest.mark.parametrize("mode", ["fill", "clip"])
@pytest.mark.parametrize("count", [_host_bounds.ARGMAX_UP_TO, _host_bounds.ARGMAX_UP_TO + 1])
def test_64_bit_numpy_indices_past_int32_are_saturated_after_their_wrapped_call(
    count, mode, dtype, where, request
):
    # A remembered "fill" or "clip" call hands 64-bit indices to JAX, which wraps them to int32,
    # and tests them while the program runs: one past int32 (2**32 + 1 wraps to row 1) and the
    # call is made again of them saturated. Reference: NumPy on the unwrapped values.
    _eager.clear()
    request.addfinalizer(_eager.clear)
    data = np.arange(8.0, dtype=np.float32)
    ids = (np.arange(count) % 8).astype(dtype)
    jax_gather.gather(data, ids, mode=mode)  # the signature's call, of indices that fit
    wide = ids.copy()
    wide[where] = 2**32 + 1
    expected = data[ids].copy()
    expected[where] = np.nan if mode == "fill" else data[-1]
    np.testing.assert_array_equal(jax_gather.gather(data, wide, mode=mode), expected)
    if dtype is np.int64:
        wide[where] = -(2**32) - 3  # wraps to 2**32 - 3 - 2**32 = -3: row 5
        expected[where] = np.nan if mode == "fill" else data[0]
        np.testing.assert_array_equal(jax_gather.gather(data, wide, mode=mode), expected)


def test_only_what_the_cpu_client_would_copy_on_a_worker_thread_is_split():
    def at(offset, nbytes=_cpu_client.CPU_COPIED_INLINE, dtype=np.float32):
        raw = np.zeros(nbytes + 128, np.uint8)
        start = -raw.ctypes.data % _cpu_client.CPU_ALIGNMENT + offset
        return raw[start : start + nbytes].view(dtype)

    for offset in (16, 32, 48):
        array = at(offset).reshape(-1, 8)
        head, tail = _cpu_client.split_for_cpu(array)
        assert head.size == (_cpu_client.CPU_ALIGNMENT - offset) // 4
        assert tail.ctypes.data % _cpu_client.CPU_ALIGNMENT == 0
        assert np.shares_memory(head, array) and np.shares_memory(tail, array)
        assert head.size + tail.size == array.size
    assert _cpu_client.split_for_cpu(at(0)) is None  # aliased as it is
    assert _cpu_client.split_for_cpu(at(8)) is None  # not NumPy's alignment: copied
    assert _cpu_client.split_for_cpu(at(16, _cpu_client.CPU_COPIED_INLINE - 64)) is None  # copied inline
    assert _cpu_client.split_for_cpu(at(16, 2 * _cpu_client.CPU_COPIED_INLINE).reshape(2, -1)[:, ::2]) is None
    with enable_x64(False):  # JAX would narrow it: a copy anyway
        assert _cpu_client.split_for_cpu(at(16, dtype=np.int64)) is None


def _data_at(offset, shape, dtype, seed=0):
    """Data of ``shape`` whose buffer starts ``offset`` bytes past a CPU_ALIGNMENT boundary."""
    values = make_data(shape, dtype, seed)
    raw = np.empty(values.nbytes + 2 * _cpu_client.CPU_ALIGNMENT, np.uint8)
    start = -raw.ctypes.data % _cpu_client.CPU_ALIGNMENT + offset
    data = raw[start : start + values.nbytes].view(values.dtype).reshape(shape)
    data[...] = values
    return data


def _with_nan_payloads(data, rng):
    """Fills narrow float ``data`` with random bit patterns, half of them NaNs with payloads."""
    bits = data.view(f"uint{8 * data.itemsize}")
    patterns = np.arange(2 ** (8 * data.itemsize), dtype=bits.dtype)
    nans = patterns[np.isnan(patterns.view(data.dtype).astype(np.float32))]
    bits[...] = np.where(
        rng.random(bits.shape) < 0.5, rng.choice(nans, bits.shape), rng.choice(patterns, bits.shape)
    )


def _in_place_indices(name, count, size, rng, out_of_bounds):
    """``count`` indices into axis 0 (of ``size``) for each op, negative ones among them, and
    two past either end where ``out_of_bounds``."""
    low, high = (-size - 2, size + 2) if out_of_bounds else (-size, size)
    ids = rng.integers(low, high, count)
    if name == "gather_elements":
        return ids.reshape(-1, 16)  # along axis 0 of 16 columns
    if name == "gather_nd":
        return np.stack([ids, rng.integers(0, 16, count)], axis=-1)  # pairs
    return ids


@pytest.mark.parametrize("mode", ["checked", "fill", "clip", "promise_in_bounds"])
@pytest.mark.parametrize(
    "dtype, offset",
    [(np.float32, 0), (np.float32, 16), (np.float32, 32), (np.float32, 48)]
    + [(np.int8, 16), (jnp.bfloat16, 48), (jnp.float8_e5m2, 32), (np.float16, 16)],
)
@pytest.mark.parametrize("name", OPS)
def test_unaligned_numpy_data_is_read_in_place_exactly(name, dtype, mode, offset, monkeypatch):
    # A NumPy table the CPU client would copy, gathered sparsely: its head and tail go to the
    # program joined (split_for_cpu), at every offset past a boundary NumPy gives; aligned, it
    # is aliased as it is. Each call's result is the reference's, bit for bit: the narrow
    # floats' bit patterns, half of them NaNs with payloads, which a join through a wider
    # float would quiet.
    fn, _, ref, _, _ = OPS[name]
    size = _cpu_client.READ_IN_PLACE_MIN_BYTES // np.dtype(dtype).itemsize // 16 + 7
    data = _data_at(offset, (size, 16), dtype)
    rng = np.random.default_rng(offset)
    if np.dtype(dtype).itemsize < 4 and jnp.issubdtype(dtype, jnp.floating):
        _with_nan_payloads(data, rng)
    ids = _in_place_indices(name, 64, size, rng, mode in ("fill", "clip"))
    splits, on_a_worker = [], []
    split_for_cpu, runs_on_a_worker_thread = _cpu_client.split_for_cpu, _cpu_client.runs_on_a_worker_thread
    monkeypatch.setattr(_cpu_client, "split_for_cpu", lambda a: splits.append(split_for_cpu(a)) or splits[-1])
    monkeypatch.setattr(
        _cpu_client,
        "runs_on_a_worker_thread",
        lambda *a: on_a_worker.append(runs_on_a_worker_thread(*a)) or on_a_worker[-1],
    )
    monkeypatch.setattr(_host_gather, "HOST_GATHER_BELOW", 0)  # the program's placement, not NumPy's
    monkeypatch.setattr(_host_gather, "HOST_ROWS_BELOW", 0)
    _eager.clear()
    kwargs = {} if mode == "checked" else {"mode": mode}
    ref_mode = {"checked": "raise", "promise_in_bounds": "raise"}.get(mode, mode)
    fill = np.zeros((), dtype) if mode == "fill" else None
    expected = ref(data, ids, 0, mode=ref_mode, fill=fill)
    for _ in range(2):  # the first call makes the signature's call, the second is looked up
        out = fn(data, ids, 0, **kwargs)
        np.testing.assert_array_equal(np.asarray(out).view(np.uint8), expected.view(np.uint8))
    in_place = _eager.reads_in_place(OPS[name][1](data.shape, ids.shape, 0), Mode(mode), data, ids)
    assert in_place or mode == "fill"  # a fill's CPU lowering may pad data
    assert [parts is not None for parts in splits] == [in_place and offset != 0] * len(splits)
    # Asked once, on the first call, where the client copies on a worker thread and its program
    # could run there: a program on the worker gets data as it is, any other reads it in place.
    placed = in_place or _cpu_client.alignment_may_pay(data.nbytes)
    asked = placed and _cpu_client.CLIENT_COPIES_ON_A_WORKER_THREAD
    assert len(on_a_worker) == asked
    assert len(splits) == (asked and in_place) + (0 if any(on_a_worker) else 2 * in_place)
    if mode == "checked":  # judged still: an index past the end raises, read in place or not
        bad = ids.copy()
        bad.reshape(-1)[5] = size
        with pytest.raises(IndexError, match=str(size)):
            fn(data, bad, 0)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float8_e5m2, np.float16, jnp.float8_e4m3fn])
@pytest.mark.parametrize("name", OPS)
def test_a_large_narrow_float_table_read_in_place_keeps_every_bit(name, dtype, monkeypatch):
    # 2 MiB of narrow floats joined in place: XLA:CPU (JAX 0.10) joins bfloat16 through float32
    # and float8 through float16, which at this size quieted NaN payloads (0x7fb4 read as
    # 0x7fc0); the library joins their bits (_cpu_client.joined).
    fn, _, ref, _, _ = OPS[name]
    rows = 2**21 // np.dtype(dtype).itemsize // 16  # 2 MiB
    data = _data_at(16, (rows, 16), dtype)
    rng = np.random.default_rng(1)
    _with_nan_payloads(data, rng)
    ids = _in_place_indices(name, 64, rows, rng, False)
    splits = []
    split_for_cpu = _cpu_client.split_for_cpu
    monkeypatch.setattr(_cpu_client, "split_for_cpu", lambda a: splits.append(split_for_cpu(a)) or splits[-1])
    monkeypatch.setattr(_host_gather, "HOST_GATHER_BELOW", 0)  # the program's placement, not NumPy's
    monkeypatch.setattr(_host_gather, "HOST_ROWS_BELOW", 0)
    _eager.clear()
    expected = ref(data, ids, 0, mode="raise", fill=None)
    for mode in ("checked", "promise_in_bounds"):
        out = fn(data, ids, 0, mode=mode)
        np.testing.assert_array_equal(np.asarray(out).view(np.uint8), expected.view(np.uint8))
    assert splits and all(parts is not None for parts in splits)  # read in place


@pytest.mark.parametrize("count, on_a_worker", [(64 * 128, True), (64, False)])
def test_a_program_on_the_worker_thread_reads_numpy_data_as_it_is(count, on_a_worker, monkeypatch):
    # GatherElements of int8 from a 256 KiB table 16 bytes past a boundary, under a promise:
    # 3 flops an index, so 8192 indices run on JAX's worker thread and 64 on the calling one.
    # Through JAX 0.10 the client copies the table on its worker, where the program on it reads
    # the copy from its own cache: it gets data as it is (no split, no aligned copy); the short
    # one reads it in place. From JAX 0.11 a table this small is never split (READ_IN_PLACE_MIN_BYTES).
    if jax.config.read("jax_cpu_enable_async_dispatch") is False:
        on_a_worker = False  # every program runs on the calling thread
    data = _data_at(16, (4096, 64), np.int8)
    rng = np.random.default_rng(1)
    ids = rng.integers(-4096, 4096, (count // 64, 64))
    copied, splits = [], []
    split_for_cpu, aligned_for_cpu = _cpu_client.split_for_cpu, _cpu_client.aligned_for_cpu
    monkeypatch.setattr(_cpu_client, "split_for_cpu", lambda a: splits.append(split_for_cpu(a)) or splits[-1])
    copy = lambda a, *b: copied.append(a) or aligned_for_cpu(a, *b)
    monkeypatch.setattr(_cpu_client, "aligned_for_cpu", copy)
    monkeypatch.setattr(_host_gather, "HOST_GATHER_BELOW", 0)  # the program's placement, not NumPy's
    monkeypatch.setattr(_host_gather, "HOST_ROWS_BELOW", 0)
    _eager.clear()
    expected = reference.gather_elements(data, ids, 0, mode="raise")
    for _ in range(3):
        out = jax_gather.gather_elements(data, ids, 0, mode="promise_in_bounds")
        np.testing.assert_array_equal(np.asarray(out), expected)
    assert not any(a is data for a in copied)  # never an aligned copy: in place, or as it is
    if not _cpu_client.CLIENT_COPIES_ON_A_WORKER_THREAD:
        assert splits == []
    elif on_a_worker:
        assert len(splits) == 1  # the first call's, which asked where the program runs
    else:
        assert len(splits) == 4 and all(parts is not None for parts in splits)


def test_numpy_data_is_read_in_place_only_where_it_pays(monkeypatch):
    def reads_in_place(data, count, mode=Mode.CHECKED):
        ids = np.zeros(count, np.int64)
        return _eager.reads_in_place(plans.gather_plan(data.shape, ids.shape, 0), mode, data, ids)

    rows = _cpu_client.READ_IN_PLACE_MIN_BYTES // 64 + 1  # rows of 16 float32, 64 bytes each
    data = _data_at(16, (rows, 16), np.float32)
    most = data.nbytes // _cpu_client.READ_IN_PLACE_BYTES_PER_ELEMENT // 16  # ids of 16 elements
    assert reads_in_place(data, most) and reads_in_place(data, most, mode=Mode.FILL)
    assert not reads_in_place(data, most + 1)  # the join's select an element costs more
    assert not reads_in_place(jnp.asarray(data), 1)  # a JAX array is where it is
    assert not reads_in_place(_data_at(16, (rows - 2, 16), np.float32), 1)  # a copy costs less
    assert not reads_in_place(_data_at(16, (4 * rows, 16), jnp.int4), 1)  # converted to bytes on the way
    with enable_x64(False):  # converted to float32 as it goes to JAX: a copy anyway
        assert not reads_in_place(_data_at(16, (rows, 16), np.float64), 1)
    # Where a CPU lowering reads data another way (measured only for the generic gather).
    lowering = _cpu.gather_lowering
    for part in ("forward", "fill"):
        other = lambda *a, part=part: (Lowering(**{part: lambda *b: None}), False)
        monkeypatch.setattr(_cpu, "gather_lowering", other)
        assert not reads_in_place(data, 1, mode=Mode.FILL)
        assert reads_in_place(data, 1, mode=Mode.CLIP) is (part == "fill")  # a fill only fills
    monkeypatch.setattr(_cpu, "gather_lowering", lowering)
    assert reads_in_place(data, 1, mode=Mode.CLIP)


@pytest.mark.parametrize(
    "dtype, values, size, verdict",
    [
        (np.int8, [-128, 127], 1000, Verdict.IN_BOUNDS),  # an axis longer than the dtype reaches
        (np.int8, [-128, 0], 128, Verdict.IN_BOUNDS),
        (np.int8, [-128, 127], 127, Verdict.OUT_OF_BOUNDS),
        (np.int64, [-(2**63), 0], 5, Verdict.OUT_OF_BOUNDS),
        (np.int64, [2**63 - 1, 0], 5, Verdict.OUT_OF_BOUNDS),
        (np.uint64, [2**64 - 1, 0], 5, Verdict.OUT_OF_BOUNDS),  # not -1: unsigned
        (np.uint64, [2**63, 0], 2**63 + 1, Verdict.IN_RANGE),
        (np.uint8, [255, 0], 256, Verdict.IN_RANGE),
        (np.int32, [-5, 4], 5, Verdict.IN_BOUNDS),
        (np.int32, [-6, 4], 5, Verdict.OUT_OF_BOUNDS),
        (np.int32, [0, 5], 5, Verdict.OUT_OF_BOUNDS),
    ],
)
def test_the_verdict_by_argmin_and_argmax_at_the_edges_of_each_dtype(dtype, values, size, verdict):
    plan = plans.gather_plan((size,), (len(values),), 0)
    indices = np.array(values, dtype)
    assert _host_bounds.verdict_test(plan, indices.size)(indices) is verdict
    assert _host_bounds.judge(plan, indices) is verdict


def test_the_in_range_test_of_a_scalar_index():
    plan = plans.gather_plan((5,), (), 0)
    test = _host_bounds.in_range_test(plan, np.dtype(np.int64), 1)
    assert test(np.array(4)) and not test(np.array(5)) and not test(np.array(-1))


@given(
    dtype=st.sampled_from([d for d in INDEX_DTYPES if d != np.uint64]),  # make_wild_indices is int64 inside
    shape=st.tuples(st.integers(0, 6), st.integers(1, 3)),
    size=st.integers(0, 300),
    tuples=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_host_bounds_tests_match_numpy(dtype, shape, size, tuples, seed):
    if tuples:
        sizes = tuple(size + 7 * c for c in range(shape[1]))
        plan = plans.gather_nd_plan(sizes, shape, 0)
    else:
        sizes = (size,)
        plan = plans.gather_plan(sizes, shape, 0)
    indices = make_wild_indices(shape, sizes if tuples else size, dtype, seed)
    wide = indices.astype(object)  # exact Python ints: no dtype arithmetic in the reference
    bound = np.broadcast_to(np.array(sizes if tuples else size, dtype=object), shape)
    in_range = bool(np.all((wide >= 0) & (wide < bound)))
    in_bounds = bool(np.all((wide >= -bound) & (wide < bound)))
    assert _host_bounds.in_range_on_host(plan, indices) == in_range
    verdict = _host_bounds.judge(plan, indices)
    assert verdict is (
        Verdict.IN_RANGE if in_range else Verdict.IN_BOUNDS if in_bounds else Verdict.OUT_OF_BOUNDS
    )
    assert _host_bounds.in_range_test(plan, indices.dtype, indices.size)(indices) == in_range
    for normalise in (False, True):
        judged, given = _host_bounds.judged_outside_range(plan, indices, normalise)
        if in_range or (normalise and in_bounds and indices.size <= _host_bounds.NORMALISED_ON_HOST):
            assert judged is Verdict.IN_RANGE
            np.testing.assert_array_equal(given.astype(object), np.where(wide < 0, wide + bound, wide))
        else:
            assert judged is verdict and given is None
    moved = _host_bounds.normalised_on_host(plan, indices)
    if not in_bounds:
        assert moved is None
    else:
        np.testing.assert_array_equal(moved.astype(object), np.where(wide < 0, wide + bound, wide))
