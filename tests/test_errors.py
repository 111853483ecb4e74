"""Bad input: the exception type and a message naming op, argument, rule and value, raised
eagerly and, under jax.jit, at trace time."""

import re

import jax
import numpy as np
import pytest

from jax_gather import gather, gather_elements, gather_nd
from jax_gather._cpu_client import single_device_sharding
from tests.programs import stdout_with_cpu_devices

pytestmark = pytest.mark.core  # the fast tier: pytest -m core

D = np.zeros((2, 3, 4), np.float32)
IDS = np.array([0, 1])

# (case, op, data, indices, attribute, keyword arguments, exception, message pattern)
# fmt: off
ERRORS = [
    ("gather axis too large", gather, D, IDS, 3, {}, ValueError,
     r"Gather: axis must be in [-3, 2] for data of rank 3, got 3"),
    ("gather axis too small", gather, D, IDS, -4, {}, ValueError,
     r"Gather: axis must be in [-3, 2] for data of rank 3, got -4"),
    ("gather axis float", gather, D, IDS, 1.0, {}, TypeError,
     r"Gather: axis must be a static Python integer (attributes are static under jit), got float 1.0"),
    ("gather axis bool", gather, D, IDS, True, {}, TypeError,
     r"Gather: axis must be an integer, got the bool True"),
    ("gather float indices", gather, D, np.array([0.0]), 0, {}, TypeError,
     r"Gather: indices must have an integer dtype (int32 or int64), got float"),
    ("gather bool indices", gather, D, np.array([True]), 0, {}, TypeError,
     r"Gather: indices must have an integer dtype (int32 or int64), got bool"),
    ("gather complex indices", gather, D, np.array([1j]), 0, {}, TypeError,
     r"Gather: indices must have an integer dtype (int32 or int64), got complex"),
    ("gather rank-0 data", gather, np.float32(1), IDS, 0, {}, ValueError,
     r"Gather: data must have rank >= 1, got rank 0 (shape ())"),
    ("gather object data", gather, np.array([1, None], dtype=object), IDS, 0, {}, TypeError,
     r"Gather: data must have a boolean, numeric or string dtype, got object"),
    ("gather unknown mode", gather, D, IDS, 0, {"mode": "wrap"}, ValueError,
     r"Gather: mode must be one of 'checked', 'clip', 'fill', 'promise_in_bounds', got 'wrap'"),
    ("gather fractional fill for ints", gather, D.astype(np.int32), IDS, 0,
     {"mode": "fill", "fill_value": 1.5}, ValueError,
     r"Gather: fill_value 1.5 cannot be represented in the data dtype int32"),
    ("gather fill out of int8 range", gather, D.astype(np.int8), IDS, 0,
     {"mode": "fill", "fill_value": 300}, ValueError,
     r"Gather: fill_value 300 cannot be represented in the data dtype int8"),
    ("gather complex fill for floats", gather, D, IDS, 0, {"mode": "fill", "fill_value": 1j}, ValueError,
     r"Gather: fill_value 1j cannot be represented in the data dtype float32"),
    ("gather fill overflows float16", gather, D.astype(np.float16), IDS, 0,
     {"mode": "fill", "fill_value": 1e6}, ValueError,
     r"Gather: fill_value 1000000.0 cannot be represented in the data dtype float16"),
    ("gather string fill", gather, D, IDS, 0, {"mode": "fill", "fill_value": "x"}, TypeError,
     r"Gather: fill_value must be a scalar number or bool, got str 'x'"),
    ("gather string fill in clip mode", gather, D, IDS, 0, {"mode": "clip", "fill_value": "x"}, TypeError,
     r"Gather: fill_value must be a scalar number or bool, got str 'x'"),
    ("nd fill out of int8 range in promise mode", gather_nd, D.astype(np.int8), np.array([[0, 1]]), 0,
     {"mode": "promise_in_bounds", "fill_value": 300}, ValueError,
     r"GatherND: fill_value 300 cannot be represented in the data dtype int8"),
    ("gather array fill", gather, D, IDS, 0, {"mode": "fill", "fill_value": [1, 2]}, TypeError,
     r"Gather: fill_value must be a scalar number or bool, got list [1, 2]"),
    ("gather clip on empty axis", gather, np.zeros((0, 3)), IDS, 0, {"mode": "clip"}, IndexError,
     r"Gather: indices must be empty to index axis 0 of size 0 (no index is valid), got indices of "
     r"shape (2,) in mode 'clip'"),
    ("elements rank mismatch", gather_elements, D, np.zeros((2, 3), int), 0, {}, ValueError,
     r"GatherElements: indices must have the same rank as data (3), got rank 2 (indices shape (2, 3), "
     r"data shape (2, 3, 4))"),
    ("elements larger non-axis dim", gather_elements, D, np.zeros((2, 4, 4), int), 2, {}, ValueError,
     r"GatherElements: indices dimension 1 (size 4) must not be larger than data dimension 1 (size 3) "
     r"except on axis 2"),
    ("elements axis too large", gather_elements, D, np.zeros((2, 3, 4), int), 5, {}, ValueError,
     r"GatherElements: axis must be in [-3, 2] for data of rank 3, got 5"),
    ("elements float indices", gather_elements, D, np.zeros((2, 3, 4)), 0, {}, TypeError,
     r"GatherElements: indices must have an integer dtype (int32 or int64), got float"),
    ("nd rank-0 indices", gather_nd, D, np.array(0), 0, {}, ValueError,
     r"GatherND: indices must have rank >= 1, got rank 0 (shape ())"),
    ("nd empty index tuple", gather_nd, D, np.zeros((2, 0), int), 0, {}, ValueError,
     r"GatherND: indices.shape[-1] must be in [1, rank(data) - batch_dims] = [1, 3], got 0"),
    ("nd index tuple too long", gather_nd, D, np.zeros((2, 3), int), 1, {}, ValueError,
     r"GatherND: indices.shape[-1] must be in [1, rank(data) - batch_dims] = [1, 2], got 3"),
    ("nd negative batch_dims", gather_nd, D, np.zeros((2, 1), int), -1, {}, ValueError,
     r"GatherND: batch_dims must be in [0, min(rank(indices), rank(data))) = [0, 2) for indices of "
     r"rank 2 and data of rank 3, got -1"),
    ("nd batch_dims too large", gather_nd, D, np.zeros((2, 1), int), 2, {}, ValueError,
     r"GatherND: batch_dims must be in [0, min(rank(indices), rank(data))) = [0, 2) for indices of "
     r"rank 2 and data of rank 3, got 2"),
    ("nd batch dims differ (divisible)", gather_nd, np.zeros((4, 3)), np.zeros((2, 1), int), 1, {},
     ValueError,
     r"GatherND: the first batch_dims=1 dimensions of data and indices must be equal, got data shape "
     r"(4, 3) and indices shape (2, 1)"),
    ("nd batch_dims float", gather_nd, D, np.zeros((2, 1), int), 1.0, {}, TypeError,
     r"GatherND: batch_dims must be a static Python integer"),
    ("elements rank-0 data", gather_elements, np.float32(1), np.array(0), 0, {}, ValueError,
     r"GatherElements: data must have rank >= 1, got rank 0 (shape ())"),
    ("nd rank-0 data", gather_nd, np.float32(1), np.array([0]), 0, {}, ValueError,
     r"GatherND: data must have rank >= 1, got rank 0 (shape ())"),
    ("elements bool indices", gather_elements, D, np.zeros((2, 3), bool), 0, {}, TypeError,
     r"GatherElements: indices must have an integer dtype (int32 or int64), got bool"),
    ("elements complex indices", gather_elements, D, np.zeros((2, 3), complex), 0, {}, TypeError,
     r"GatherElements: indices must have an integer dtype (int32 or int64), got complex"),
    ("nd bool indices", gather_nd, D, np.zeros((2, 1), bool), 0, {}, TypeError,
     r"GatherND: indices must have an integer dtype (int32 or int64), got bool"),
]
# fmt: on


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize(
    "op, data, indices, attr, kwargs, exc, message",
    [case[1:] for case in ERRORS],
    ids=[case[0] for case in ERRORS],
)
def test_bad_input_is_refused_clearly(op, data, indices, attr, kwargs, exc, message, jit):
    call = lambda d, i: op(d, i, attr, **kwargs)
    if jit and data.dtype.kind == "O":
        # jax.jit cannot take an object argument at all; close over it instead.
        call, data = (lambda _, i, d=data: op(d, i, attr, **kwargs)), 0
    with pytest.raises(exc, match=re.escape(message)):
        (jax.jit(call) if jit else call)(data, indices)


# fmt: off
EMPTY_AXIS = [
    (gather, np.zeros((0, 3)), np.array([0, 1]), 0,
     r"Gather: indices[0] = 0 is out of bounds for axis 0 of size 0 (the axis is empty: no index is valid)"),
    (gather_elements, np.zeros((2, 0)), np.zeros((2, 1), int), 1,
     r"GatherElements: indices[0, 0] = 0 is out of bounds for axis 1 of size 0 (the axis is empty: no "
     r"index is valid)"),
    (gather_nd, np.zeros((2, 0, 3)), np.zeros((4, 2), int), 0,
     r"GatherND: indices[0, 1] = 0 is out of bounds for axis 1 of size 0 (the axis is empty: no index "
     r"is valid); it is component 1 of the index tuple indices[0, :]"),
]
# fmt: on


@pytest.mark.parametrize("op, data, indices, attr, message", EMPTY_AXIS)
def test_nonempty_indices_on_an_empty_axis(op, data, indices, attr, message):
    with pytest.raises(IndexError, match=re.escape(message)):
        op(data, indices, attr)
    # Traced indices: still known at trace time that no index can be valid.
    with pytest.raises(IndexError, match=r"indices must be empty to index axis \d of size 0"):
        jax.jit(lambda d, i: op(d, i, attr))(data, indices)
    out = op(data, indices, attr, mode="fill", fill_value=5.0)
    assert np.all(np.asarray(out) == 5.0) and out.size > 0


def _in_host_memory(array):
    """``array`` moved into its device's host memory (``pinned_host``), or None where the device
    has none (a CPU device before JAX 0.5 or so)."""
    (device,) = array.devices()
    if "pinned_host" not in {m.kind for m in device.addressable_memories()}:
        return None
    return jax.device_put(array, single_device_sharding(device, memory_kind="pinned_host"))


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize(
    "op, indices, attr",
    [(gather, [3, -1], 0), (gather_elements, [[1, -2, 0]], 0), (gather_nd, [[3, -1], [0, 2]], 0)],
    ids=["gather", "gather_elements", "gather_nd"],
)
def test_arrays_in_host_memory_are_refused_clearly(op, indices, attr, jit):
    # JAX refuses to mix a device's host memory with its own, where the op's constants are
    # (jnp.take of such arrays fails too, as the op did in all but a few modes): one clear error
    # in every mode, eager and at trace time, naming the argument; eagerly even after a call
    # of the same signature in the device's memory was remembered.
    data, ids = jax.numpy.arange(12.0).reshape(4, 3), jax.numpy.asarray(indices)
    if _in_host_memory(ids) is None:
        pytest.skip("this JAX's CPU device has no host memory of its own")
    for mode in ("checked", "clip", "fill", "promise_in_bounds"):
        call = lambda d, i, mode=mode: op(d, i, attr, mode=mode)
        expected = call(data, ids)  # remembered, eagerly
        for moved in ("data", "indices", "both"):
            given = {"data": data, "indices": ids}
            for name in ("data", "indices") if moved == "both" else (moved,):
                given[name] = _in_host_memory(given[name])
            refused = "data" if moved == "both" else moved
            message = f"{_NAMES[op]}: {refused} must be in the device's memory, got host memory"
            with pytest.raises(ValueError, match=re.escape(message)):
                (jax.jit(call) if jit else call)(given["data"], given["indices"])
            # Moved back as the message says, the same arrays gather.
            back = [jax.device_put(given[name], jax.memory.Space.Device) for name in ("data", "indices")]
            np.testing.assert_array_equal(call(*back), expected)


_ON_TWO_DEVICES = """
import re
import jax, jax.numpy as jnp, numpy as np
import jax_gather

one, other = jax.devices()[:2]
cases = [
    (jax_gather.gather, [3, -1], "Gather"),
    (jax_gather.gather_elements, [[1, -2, 0]], "GatherElements"),
    (jax_gather.gather_nd, [[3, -1], [0, 2]], "GatherND"),
]
data = np.arange(12.0).reshape(4, 3)
for op, indices, name in cases:
    for mode in ("checked", "clip", "fill", "promise_in_bounds"):
        call = lambda d, i: op(d, i, 0, mode=mode)
        # Remembered first with both on one device: the eager call's own program then meets them.
        expected = np.asarray(call(jax.device_put(data, one), jax.device_put(np.asarray(indices), one)))
        for d, i in [(one, other), (other, one)]:
            placed = jax.device_put(data, d), jax.device_put(np.asarray(indices), i)
            try:
                call(*placed)
            except ValueError as error:
                want = (f"{name}: data and indices must be on the same devices, got data on {d!r} "
                        f"and indices on {i!r}; move one to the other's with jax.device_put")
                assert str(error).startswith(want), str(error)
            else:
                raise AssertionError("no error")
            # Moved as the message says, they gather; an uncommitted array goes where the other is.
            moved = call(placed[0], jax.device_put(placed[1], placed[0].sharding))
            np.testing.assert_array_equal(np.asarray(moved), expected)
            np.testing.assert_array_equal(np.asarray(call(placed[0], jnp.asarray(indices))), expected)
            np.testing.assert_array_equal(np.asarray(call(data, placed[1])), expected)
print("ok")
"""


def test_arrays_committed_to_different_devices_are_refused_clearly():
    # JAX's own error names the op's internal program (a partial of op_program, its plan and
    # mode); the op's names the op, the arguments and their devices, eagerly even after a call
    # of the same signature on one device was remembered.
    assert stdout_with_cpu_devices(_ON_TWO_DEVICES, devices=2).strip() == "ok"


_NAMES = {gather: "Gather", gather_elements: "GatherElements", gather_nd: "GatherND"}
