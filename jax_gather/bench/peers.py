"""The contenders of a benchmark case: jax_gather in its modes, and the other ways to compute it.

Peers (:data:`PEERS`): the jnp equivalent (jitted), onnxruntime's and OpenVINO's CPU kernels
(when installed and the shape and dtype are ones they take) and NumPy. Each contender is a
zero-argument call on the same inputs that returns its output. onnxruntime and OpenVINO are
imported inside the functions that use them, so that the benchmark runs without them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from jax_gather.bench.cases import Case
from jax_gather.bench.timing import ready

PEERS = ("jnp", "onnxruntime", "openvino", "numpy")
SAME_PROGRAM = "jax_gather[again]"


@functools.cache
def take_along_axis_normalises_under_a_promise() -> bool:
    """Whether ``jnp.take_along_axis(..., mode="promise_in_bounds")`` counts a negative index from
    the end of the axis, as JAX 0.4.35 and 0.11+ do and 0.10 does not (asked once, eagerly): a
    peer that normalises them again does work a user's call would not."""
    import jax.numpy as jnp

    taken = jnp.take_along_axis(jnp.arange(2), jnp.array([-1]), axis=0, mode="promise_in_bounds")
    return int(taken[0]) == 1


def _jnp_equivalent(case: Case) -> Callable[[Any, Any], Any]:
    import jax
    import jax.numpy as jnp

    a = case.attribute
    if case.op == "gather":
        b = case.batch_dims
        fn = lambda d, i: jnp.take(d, i, axis=a - b)
        for _ in range(b):  # Gather's batch dims are a vmap of the unbatched take
            fn = jax.vmap(fn)
    elif case.op == "gather_elements":
        fn = lambda d, i: jnp.take_along_axis(d, i, axis=a)
    else:

        def nd(d, i):
            return d[tuple(i[..., c] for c in range(i.shape[-1]))]

        fn = nd
        for _ in range(a):  # GatherND batch dims are a vmap of the unbatched gather
            fn = jax.vmap(fn)
    return jax.vmap(fn) if case.vmapped else fn


def _numpy_equivalent(case: Case) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    a = case.attribute
    one: Callable[[Any, Any], Any]
    if case.op == "gather" and case.batch_dims:
        one = functools.partial(_take_per_example, axis=a, batch_dims=case.batch_dims)
    elif case.op == "gather":
        one = lambda d, i: np.take(d, i, axis=a)
    elif case.op == "gather_elements":
        one = lambda d, i: np.take_along_axis(d, i, axis=a)
    else:

        def nd(d, i):
            b = a
            lead = tuple(
                np.arange(n).reshape((-1,) + (1,) * (i.ndim - 2 - k)) for k, n in enumerate(i.shape[:b])
            )
            return d[lead + tuple(i[..., c] for c in range(i.shape[-1]))]

        one = nd

    if case.vmapped:
        return lambda d, i: np.stack([one(x, y) for x, y in zip(d, i)])
    return one


def _take_per_example(d: np.ndarray, i: np.ndarray, axis: int, batch_dims: int) -> np.ndarray:
    if batch_dims == 0:
        return np.take(d, i, axis=axis)
    return np.stack([_take_per_example(x, y, axis - 1, batch_dims - 1) for x, y in zip(d, i)])


def _onnxruntime_session(case: Case, data: np.ndarray, indices: np.ndarray):
    """A one-node model in onnxruntime, or None where it cannot run this case."""
    if case.vmapped or case.dtype == "bfloat16" or case.batch_dims:  # ONNX Gather has no batch dims
        return None
    try:
        import onnx
        import onnxruntime
        from onnx import helper
    except ImportError:
        return None
    op_type = {"gather": "Gather", "gather_elements": "GatherElements", "gather_nd": "GatherND"}[case.op]
    attr: dict[str, Any] = {"batch_dims" if case.op == "gather_nd" else "axis": case.attribute}
    node = helper.make_node(op_type, ["data", "indices"], ["out"], **attr)
    graph = helper.make_graph(
        [node],
        "bench",
        [
            helper.make_tensor_value_info("data", helper.np_dtype_to_tensor_dtype(data.dtype), data.shape),
            helper.make_tensor_value_info("indices", onnx.TensorProto.INT64, indices.shape),
        ],
        [helper.make_tensor_value_info("out", helper.np_dtype_to_tensor_dtype(data.dtype), None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = {"data": data, "indices": indices}
    return lambda: session.run(None, feed)[0]


def import_openvino() -> Any:
    """The ``openvino`` package, with the opsets of its gathers imported (``ov.opset8``, ...).

    Imported the first time with OpenVINO's telemetry declined: otherwise its import sends an
    event from a forked process, and a fork in a multithreaded JAX process may deadlock (JAX
    warns of it). The variable it reads to stay quiet in CI is set for the import alone.
    """
    import importlib
    import os
    import sys

    if "openvino" not in sys.modules:
        before = os.environ.get("CI")
        os.environ["CI"] = "true"
        try:
            importlib.import_module("openvino")
        finally:
            if before is None:
                del os.environ["CI"]
            else:
                os.environ["CI"] = before
    for version in (1, 5, 6, 7, 8):
        importlib.import_module(f"openvino.opset{version}")
    return sys.modules["openvino"]


def _openvino_call(case: Case, data: np.ndarray, indices: np.ndarray):
    """A one-node model (Gather-8, GatherElements-6, GatherND-8) compiled by OpenVINO's CPU
    plugin, reading the NumPy inputs in place, or None where it cannot run this case."""
    if case.vmapped or case.dtype == "bfloat16":
        return None
    try:
        ov = import_openvino()
    except ImportError:
        return None
    opset6, opset8 = ov.opset6, ov.opset8
    data_in = opset8.parameter(data.shape, ov.Type(data.dtype), name="data")
    indices_in = opset8.parameter(indices.shape, ov.Type.i32, name="indices")
    if case.op == "gather":
        axis = opset8.constant(np.int64(case.attribute))
        node = opset8.gather(data_in, indices_in, axis, case.batch_dims)
    elif case.op == "gather_elements":
        node = opset6.gather_elements(data_in, indices_in, case.attribute)
    else:
        node = opset8.gather_nd(data_in, indices_in, case.attribute)
    compiled = ov.Core().compile_model(ov.Model([node], [data_in, indices_in]), "CPU")
    request = compiled.create_infer_request()
    inputs = [data, indices.astype(np.int32)]  # the index type JAX's programs get
    return lambda: request.infer(inputs, share_inputs=True)[0]


def contenders(case: Case, data: np.ndarray, indices: np.ndarray) -> dict[str, Callable[[], Any]]:
    """Zero-argument calls, one per contender, each returning its output."""
    import jax
    import jax.numpy as jnp

    import jax_gather

    op = getattr(jax_gather, case.op)
    d, i = jnp.asarray(data), jnp.asarray(indices)

    def ours(mode: str) -> Callable[[Any, Any], Any]:
        fn = lambda d, i: op(d, i, case.attribute, mode=mode, **_batch_dims(case))
        return jax.vmap(fn) if case.vmapped else fn

    fns = {
        "jax_gather": jax.jit(ours("checked")),
        "jax_gather[promise]": jax.jit(ours("promise_in_bounds")),
        "jax_gather[fill]": jax.jit(ours("fill")),
        "jnp": jax.jit(_jnp_equivalent(case)),
    }
    # The default mode compiled a second time: the same machine code at other addresses,
    # timed as a contender, measures how far apart this run puts two identical programs.
    fns[SAME_PROGRAM] = jax.jit(ours("checked"))
    calls: dict[str, Callable[[], Any]] = {name: functools.partial(ready, f, d, i) for name, f in fns.items()}
    ort = _onnxruntime_session(case, data, indices)
    if ort is not None:
        calls["onnxruntime"] = ort
    openvino = _openvino_call(case, data, indices)
    if openvino is not None:
        calls["openvino"] = openvino
    numpy_fn = _numpy_equivalent(case)
    calls["numpy"] = lambda: numpy_fn(data, indices)
    return calls


def _batch_dims(case: Case) -> dict[str, int]:
    return {"batch_dims": case.batch_dims} if case.batch_dims else {}


def backward_contenders(case: Case, data: np.ndarray, indices: np.ndarray) -> dict[str, Callable[[], Any]]:
    """The gradient w.r.t. data of jax_gather's op and of jnp's, jitted; none for integer data."""
    import jax
    import jax.numpy as jnp

    import jax_gather

    if not np.issubdtype(np.dtype(data.dtype), np.floating) and data.dtype.name != "bfloat16":
        return {}
    op = getattr(jax_gather, case.op)
    ours = lambda d, i: op(d, i, case.attribute, **_batch_dims(case))
    if case.vmapped:
        ours = jax.vmap(ours)
    theirs = _jnp_equivalent(case)
    d, i = jnp.asarray(data), jnp.asarray(indices)
    grads = {
        "jax_gather": jax.jit(jax.grad(lambda d, i: ours(d, i).astype(jnp.float32).sum())),
        "jnp": jax.jit(jax.grad(lambda d, i: theirs(d, i).astype(jnp.float32).sum())),
    }
    return {name: functools.partial(ready, g, d, i) for name, g in grads.items()}
