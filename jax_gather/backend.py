"""Run ONNX models of Gather, GatherElements and GatherND nodes with JAX.

The ONNX backend API (``onnx.backend.base.Backend``) as module-level functions, the way
``onnxruntime.backend`` offers it: :func:`prepare`, :func:`run_model`, :func:`run_node`,
:func:`supports_device` and :func:`is_compatible`. And :func:`to_jax`, which turns a model
into a pure JAX function to call inside your own jitted programs.

A model may hold Gather, GatherElements and GatherND nodes at every opset where ONNX defines
them, Constant and Identity nodes, and initializers. Each node is checked against the ONNX
schema of the model's opset when the model is prepared (attributes, with their defaults, and
input types), so a model ONNX calls invalid is refused with an error naming the node, the
rule and the value; any other op raises ``NotImplementedError``. ``run`` evaluates the model
eagerly with exact ONNX dtypes (64-bit types kept, in a scoped ``jax_enable_x64``; the global
setting is left alone) and the ops' default "checked" mode: an out-of-bounds index raises
``IndexError``, as ONNX says. String tensors are gathered on the host.

This module needs the ``onnx`` extra (``pip install 'jax_gather[onnx]'``); ``import
jax_gather`` never imports it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

try:
    import onnx
    from onnx import helper
    from onnx.backend.base import BackendRep
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError("jax_gather.backend needs the onnx package: pip install 'jax_gather[onnx]'") from error

from jax_gather import _backend_program, _onnx_graph, _strings
from jax_gather._arguments import fail
from jax_gather._x64 import x64_enabled

__all__ = [
    "SUPPORTED_OPS",
    "JaxGatherRep",
    "is_compatible",
    "prepare",
    "run_model",
    "run_node",
    "supports_device",
    "to_jax",
]

SUPPORTED_OPS = _onnx_graph.SUPPORTED_OPS  # the ops a model may hold


class JaxGatherRep(BackendRep):
    """A prepared model. ``run(inputs)`` returns its outputs as a list of NumPy arrays."""

    def __init__(self, graph: _onnx_graph.Graph, device: jax.Device) -> None:
        self._graph = graph
        self._device = device
        self._program = (
            _backend_program.Program(graph, device) if _backend_program.Program.can_run(graph) else None
        )
        self._copied = _passed_through(graph)

    @property
    def input_names(self) -> tuple[str, ...]:
        """The inputs ``run`` takes, in order (graph inputs that have no initializer)."""
        return self._graph.inputs

    @property
    def output_names(self) -> tuple[str, ...]:
        return self._graph.outputs

    def run(self, inputs: Any, **kwargs: Any) -> list[np.ndarray]:  # type: ignore[override]  # a list, as onnxruntime.backend's
        """Evaluates the model with exact ONNX dtypes.

        The graph runs as one jitted program (compiled once per shape of the inputs, once more
        where large index inputs hold negatives, and on a CPU once for each of the three offsets
        past a 64-byte boundary at which NumPy may place a large input, which the program then
        reads in place), after a bounds test of every index input
        on the host; a node whose indices the graph computes is tested in the program, and one
        flag comes back. Out-of-bounds indices raise ``IndexError`` naming the node, as ONNX
        says. The inputs of a signature (shapes and dtypes) are validated on its first run;
        later runs of it test only the indices. Graphs with string tensors run node by node
        (strings are gathered on the host).

        Args:
          inputs: a list or tuple of arrays in the order of :attr:`input_names`, a dict by
            name (which may also override initializers listed as graph inputs), or a single
            array for a model with one input. Each must have its input's exact dtype; strings
            may be NumPy ``str``, ``bytes`` or ``object`` arrays.

        Returns:
          The outputs, in graph order, as NumPy arrays (strings as object arrays). Those the
          graph computes are read-only views of JAX's buffers, with no copy on a CPU
          (``np.array(out)`` for one to write); an output that is an input or initializer
          (through Identity nodes) is a copy.
        """
        if self._program is not None and not kwargs:
            known = self._program.run_known(inputs)
            if known is not None:
                return _numpy_outputs(known, self._copied)
        _no_options("run", kwargs)
        feeds = _onnx_graph.checked_feeds(self._graph, inputs)
        with x64_enabled(), jax.default_device(self._device):
            outputs = self._program.run(feeds, inputs) if self._program is not None else None
            if outputs is None:
                outputs = _onnx_graph.evaluate(self._graph, feeds)
            return _numpy_outputs(outputs, self._copied)


def prepare(model: Any, device: str = "CPU", **kwargs: Any) -> JaxGatherRep:
    """Checks a model and makes it ready to run.

    Args:
      model: an ``onnx.ModelProto``, its serialized bytes, or a path to a ``.onnx`` file.
      device: "CPU" (default), or "CUDA" / "CUDA:<n>" where JAX has a GPU.

    Returns:
      A :class:`JaxGatherRep`, whose ``run(inputs)`` returns the outputs.

    Raises:
      NotImplementedError: the model has nodes other than Gather, GatherElements, GatherND,
        Constant and Identity (naming each), or non-tensor inputs.
      ValueError, TypeError: the model is invalid by the ONNX schema of its opset (naming the
        node, the rule and the value).

    Example:
      >>> import numpy as np
      >>> from onnx import TensorProto, helper
      >>> from jax_gather import backend
      >>> node = helper.make_node("Gather", ["table", "ids"], ["rows"], axis=0)
      >>> graph = helper.make_graph(
      ...     [node], "lookup",
      ...     [helper.make_tensor_value_info("ids", TensorProto.INT64, [None])],
      ...     [helper.make_tensor_value_info("rows", TensorProto.INT64, [None, 2])],
      ...     initializer=[helper.make_tensor("table", TensorProto.INT64, [3, 2], range(6))])
      >>> model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
      >>> backend.prepare(model).run([np.array([2, -3])])
      [array([[4, 5],
             [0, 1]])]
    """
    _no_options("prepare", kwargs)
    graph = _onnx_graph.compile_graph(model)
    return JaxGatherRep(graph, _jax_device(device))


def run_model(model: Any, inputs: Any, device: str = "CPU", **kwargs: Any) -> list[np.ndarray]:
    """``prepare(model, device).run(inputs)``.

    Example:
      >>> from onnx import TensorProto, helper
      >>> from jax_gather import backend
      >>> node = helper.make_node("Gather", ["words", "ids"], ["picked"])
      >>> graph = helper.make_graph(
      ...     [node], "words",
      ...     [helper.make_tensor_value_info("words", TensorProto.STRING, [3]),
      ...      helper.make_tensor_value_info("ids", TensorProto.INT32, [2])],
      ...     [helper.make_tensor_value_info("picked", TensorProto.STRING, [2])])
      >>> model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
      >>> backend.run_model(model, [np.array(["a", "b", "c"]), np.array([-1, 0], np.int32)])
      [array(['c', 'a'], dtype=object)]
    """
    return prepare(model, device, **kwargs).run(inputs)


def run_node(
    node: onnx.NodeProto,
    inputs: Any,
    device: str = "CPU",
    outputs_info: Any = None,
    *,
    opset_version: int | None = None,
    **kwargs: Any,
) -> list[np.ndarray]:
    """Runs one node on ``inputs`` (a list in the node's input order, or a dict by name).

    The node is wrapped in a one-node model whose input types are the arrays' dtypes, at
    ``opset_version`` (default: the newest opset the installed onnx knows). ``outputs_info``
    is accepted for the ONNX backend API and not needed.

    Example:
      >>> from onnx import helper
      >>> from jax_gather import backend
      >>> node = helper.make_node("GatherElements", ["data", "indices"], ["out"], axis=1)
      >>> backend.run_node(node, [np.array([[1, 2], [3, 4]]), np.array([[0, 0], [1, 0]])])
      [array([[1, 1],
             [4, 3]])]
    """
    del outputs_info
    _no_options("run_node", kwargs)
    if isinstance(inputs, Mapping):
        named = dict(inputs)
    else:
        if len(inputs) != len(node.input):
            raise fail(
                ValueError,
                "run_node",
                f"inputs must be one array per node input {list(node.input)}, got {len(inputs)}",
            )
        named = dict(zip(node.input, inputs))
    infos = [
        helper.make_tensor_value_info(name, _onnx_graph.element_type(name, value), np.shape(value))
        for name, value in named.items()
    ]
    outputs = [helper.make_empty_tensor_value_info(name) for name in node.output]
    graph = helper.make_graph([node], "run_node", infos, outputs)
    opset = onnx.defs.onnx_opset_version() if opset_version is None else opset_version
    _onnx_graph.check_opset("opset_version", opset, "jax_gather.backend.run_node")
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return prepare(model, device).run(named)


def supports_device(device: str) -> bool:
    """Whether JAX has ``device`` here: "CPU", "CUDA" or "CUDA:<n>" ("GPU" is an alias).

    Example:
      >>> from jax_gather import backend
      >>> backend.supports_device("CPU"), backend.supports_device("TPU")
      (True, False)
    """
    try:
        _jax_device(device)
    except (ValueError, RuntimeError):
        return False
    return True


def is_compatible(model: Any, device: str = "CPU", **kwargs: Any) -> bool:
    """Whether :func:`prepare` accepts the model on ``device``: supported ops only, and valid.

    Example:
      >>> from onnx import TensorProto, helper
      >>> from jax_gather import backend
      >>> node = helper.make_node("Neg", ["x"], ["y"])
      >>> graph = helper.make_graph(
      ...     [node], "neg", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
      ...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
      >>> backend.is_compatible(helper.make_model(graph))
      False
    """
    del kwargs
    if not supports_device(device):
        return False
    try:
        _onnx_graph.compile_graph(model)
    except (NotImplementedError, ValueError, TypeError):
        return False
    return True


def to_jax(model: Any) -> Callable[..., tuple[Any, ...]]:
    """The model as a pure JAX function: ``fn(*inputs) -> tuple of outputs``.

    ``fn`` takes the graph inputs that have no initializer, in graph order; initializers and
    Constant values are baked in. It is jittable, vmappable and differentiable with respect
    to its float inputs. Inside it, JAX's rules hold: dtypes follow your ``jax_enable_x64``
    setting, and out-of-bounds indices follow the ops' "checked" mode (an ``IndexError`` for
    concrete indices; under ``jit``, a checkify check, see :func:`jax_gather.checked`, and
    the "fill" result). String tensors work only eagerly. Inputs are not type-checked
    against the model (``prepare(model).run`` does that).

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from onnx import TensorProto, helper
      >>> from jax_gather import backend
      >>> node = helper.make_node("GatherND", ["data", "indices"], ["out"], batch_dims=1)
      >>> graph = helper.make_graph(
      ...     [node], "pick",
      ...     [helper.make_tensor_value_info("data", TensorProto.FLOAT, [2, 3]),
      ...      helper.make_tensor_value_info("indices", TensorProto.INT64, [2, 1])],
      ...     [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2])])
      >>> model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
      >>> pick = backend.to_jax(model)
      >>> jax.jit(pick)(jnp.arange(6.0).reshape(2, 3), jnp.array([[2], [0]]))
      (Array([2., 3.], dtype=float32),)
    """
    graph = _onnx_graph.compile_graph(model)

    def fn(*inputs: Any) -> tuple[Any, ...]:
        if len(inputs) != len(graph.inputs):
            raise fail(
                TypeError,
                _onnx_graph.MODEL,
                f"the function takes {len(graph.inputs)} inputs {list(graph.inputs)}, got {len(inputs)}",
            )
        return tuple(_as_jax(value) for value in _onnx_graph.evaluate(graph, dict(zip(graph.inputs, inputs))))

    return fn


# ---- outputs ------------------------------------------------------------------------------


def _passed_through(graph: _onnx_graph.Graph) -> tuple[bool, ...]:
    """For each output, whether it is a graph input or constant (through Identity nodes): a
    view of it would be the caller's array, or the model's."""
    origin = _onnx_graph.origins(graph)
    return tuple(name in origin for name in graph.outputs)


def _numpy_outputs(outputs: Any, copied: tuple[bool, ...]) -> list[np.ndarray]:
    """The outputs as NumPy arrays: views of JAX's buffers (no copy on a CPU), read-only, and
    copies of those that are the caller's or the model's own arrays."""
    return [np.array(o) if copy else np.asarray(o) for o, copy in zip(outputs, copied)]


def _as_jax(value: Any) -> Any:
    if not isinstance(value, jax.Array):
        value = np.asarray(value)
        if not _strings.is_string_dtype(value.dtype):
            value = jnp.asarray(value)
    return value


# ---- devices and options ------------------------------------------------------------------

_PLATFORMS = {"CPU": "cpu", "CUDA": "gpu", "GPU": "gpu"}


def _jax_device(device: str) -> jax.Device:
    kind, _, index = str(device).upper().partition(":")
    if kind not in _PLATFORMS or not (index == "" or index.isdigit()):
        raise fail(
            ValueError,
            "jax_gather.backend",
            f"device must be 'CPU', 'CUDA' or 'CUDA:<n>', got {device!r}",
        )
    try:
        devices = jax.devices(_PLATFORMS[kind])
    except RuntimeError:
        devices = []
    if int(index or 0) >= len(devices):
        seen = ", ".join(str(d) for d in jax.devices())
        raise fail(RuntimeError, "jax_gather.backend", f"device {device!r} is not one JAX has here ({seen})")
    return devices[int(index or 0)]


def _no_options(where: str, kwargs: Mapping[str, Any]) -> None:
    if kwargs:
        raise fail(
            TypeError, f"jax_gather.backend.{where}", f"takes no backend options, got {sorted(kwargs)}"
        )
