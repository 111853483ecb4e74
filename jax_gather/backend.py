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

import dataclasses
import functools
import math
import os
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

try:
    import onnx
    from google.protobuf.message import DecodeError
    from onnx import AttributeProto, TensorProto, helper, numpy_helper
    from onnx.backend.base import BackendRep
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError("jax_gather.backend needs the onnx package: pip install 'jax_gather[onnx]'") from error

from jax_gather import _strings, ops
from jax_gather._arguments import Mode, fail, named_for
from jax_gather._cpu_client import CPU_COPIED_INLINE, aligned_for_cpu, narrowed_for_cpu
from jax_gather._host_bounds import Verdict, in_range_test, judged
from jax_gather._traced_bounds import in_bounds
from jax_gather._x64 import x64_enabled
from jax_gather.plans import gather_elements_plan, gather_nd_plan, gather_plan

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

_GATHERS = {"Gather": ops.gather, "GatherElements": ops.gather_elements, "GatherND": ops.gather_nd}
_PLANS = {"Gather": gather_plan, "GatherElements": gather_elements_plan, "GatherND": gather_nd_plan}
SUPPORTED_OPS = ("Constant", "Gather", "GatherElements", "GatherND", "Identity")
_DEFAULT_DOMAINS = ("", "ai.onnx")
_MODEL = "ONNX model"  # the subject of errors about the model as a whole

# The ONNX element types of the ops' type constraint T, with the NumPy dtype that holds each
# (strings as object arrays, the form onnx.numpy_helper and onnxruntime use).
_DTYPES: dict[int, np.dtype] = {
    TensorProto.BOOL: np.dtype(np.bool_),
    TensorProto.INT8: np.dtype(np.int8),
    TensorProto.INT16: np.dtype(np.int16),
    TensorProto.INT32: np.dtype(np.int32),
    TensorProto.INT64: np.dtype(np.int64),
    TensorProto.UINT8: np.dtype(np.uint8),
    TensorProto.UINT16: np.dtype(np.uint16),
    TensorProto.UINT32: np.dtype(np.uint32),
    TensorProto.UINT64: np.dtype(np.uint64),
    TensorProto.FLOAT16: np.dtype(np.float16),
    TensorProto.BFLOAT16: np.dtype(jnp.bfloat16),
    TensorProto.FLOAT: np.dtype(np.float32),
    TensorProto.DOUBLE: np.dtype(np.float64),
    TensorProto.COMPLEX64: np.dtype(np.complex64),
    TensorProto.COMPLEX128: np.dtype(np.complex128),
    TensorProto.STRING: np.dtype(object),
}


@dataclasses.dataclass(frozen=True)
class _Node:
    label: str  # how errors name the node: "Gather node 'g1'", or "Gather node #3" if unnamed
    op_type: str
    fn: Callable[..., Any]
    inputs: tuple[str, ...]
    output: str
    attribute: int = 0  # axis, or batch_dims for GatherND


@dataclasses.dataclass(frozen=True)
class _Graph:
    inputs: tuple[str, ...]  # fed in this order: the graph inputs without an initializer
    input_types: Mapping[str, int]  # every graph input that may be fed, with its element type
    input_shapes: Mapping[str, tuple[int | None, ...] | None]  # declared: None where free
    constants: Mapping[str, np.ndarray]  # initializers and Constant values
    nodes: tuple[_Node, ...]
    outputs: tuple[str, ...]


class JaxGatherRep(BackendRep):
    """A prepared model. ``run(inputs)`` returns its outputs as a list of NumPy arrays."""

    def __init__(self, graph: _Graph, device: jax.Device) -> None:
        self._graph = graph
        self._device = device
        self._program = _Program(graph, device) if _Program.can_run(graph) else None
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

        The graph runs as one jitted program (compiled once per shape of the inputs, and once
        more where large index inputs hold negatives), after a bounds test of every index input
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
        feeds = _feeds(self._graph, inputs)
        with x64_enabled(), jax.default_device(self._device):
            outputs = self._program.run(feeds, inputs) if self._program is not None else None
            if outputs is None:
                outputs = _evaluate(self._graph, feeds)
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
    graph = _compile(model)
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
        helper.make_tensor_value_info(name, _element_type(name, value), np.shape(value))
        for name, value in named.items()
    ]
    outputs = [helper.make_empty_tensor_value_info(name) for name in node.output]
    graph = helper.make_graph([node], "run_node", infos, outputs)
    opset = onnx.defs.onnx_opset_version() if opset_version is None else opset_version
    _check_opset("opset_version", opset, "jax_gather.backend.run_node")
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
        _compile(model)
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
    graph = _compile(model)

    def fn(*inputs: Any) -> tuple[Any, ...]:
        if len(inputs) != len(graph.inputs):
            raise fail(
                TypeError,
                _MODEL,
                f"the function takes {len(graph.inputs)} inputs {list(graph.inputs)}, got {len(inputs)}",
            )
        return tuple(_as_jax(value) for value in _evaluate(graph, dict(zip(graph.inputs, inputs))))

    return fn


# ---- checking a model ---------------------------------------------------------------------


def _compile(model: Any) -> _Graph:
    model = _load(model)
    graph = model.graph
    opset = _opset(model)
    _refuse_unsupported(graph)
    types: dict[str, int] = {}
    constants: dict[str, np.ndarray] = {}
    for tensor in graph.initializer:
        constants[tensor.name] = _to_numpy(f"initializer {tensor.name!r}", tensor)
        types[tensor.name] = tensor.data_type
    input_types, input_shapes = {}, {}
    for info in graph.input:
        if info.name in input_types:
            raise fail(
                ValueError,
                _MODEL,
                f"inputs must have distinct names (an ONNX graph defines each name once), got "
                f"{info.name!r} twice",
            )
        input_types[info.name] = types[info.name] = _declared_type(f"input {info.name!r}", info)
        input_shapes[info.name] = _declared_shape(info)
    nodes = []
    for position, node in enumerate(graph.node):
        label = f"{node.op_type} {_node_name(node, position)}"
        schema = _schema(node, opset, label)
        attributes = _attributes(node, schema, label)
        _check_inputs(node, schema, types, label)
        if node.output[0] in types:
            raise fail(
                ValueError,
                label,
                "its output must be a new name (an ONNX graph assigns each name once), got "
                f"{node.output[0]!r}, which the graph already has",
            )
        if node.op_type == "Constant":
            output = node.output[0]
            constants[output] = _constant(node, attributes, label)
            types[output] = _element_type(label, constants[output])
            _check_type(node, schema, schema.outputs[0], output, types[output], label)
            continue
        if node.op_type == "Identity":
            fn = _identity
        else:  # the attributes are named as the ops' keyword arguments (axis, batch_dims)
            fn = functools.partial(_GATHERS[node.op_type], **attributes)
        attribute = next(iter(attributes.values()), 0)
        nodes.append(_Node(label, node.op_type, fn, tuple(node.input), node.output[0], attribute))
        types[node.output[0]] = types[node.input[0]]
    _check_outputs(graph, types)
    return _Graph(
        inputs=tuple(name for name in input_types if name not in constants),
        input_types=input_types,
        input_shapes=input_shapes,
        constants=constants,
        nodes=tuple(nodes),
        outputs=tuple(info.name for info in graph.output),
    )


def _load(model: Any) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, str, os.PathLike)):
        try:
            return onnx.load_model_from_string(model) if isinstance(model, bytes) else onnx.load(model)
        except DecodeError as error:
            where = "bytes" if isinstance(model, bytes) else f"the file {os.fspath(model)!r}"
            raise fail(
                ValueError,
                _MODEL,
                f"model must be a serialized onnx.ModelProto, got {where} that do not parse as one ({error})",
            ) from None
    raise fail(
        TypeError,
        _MODEL,
        f"model must be an onnx.ModelProto, its serialized bytes or a path, got {type(model).__name__}",
    )


def _node_name(node: onnx.NodeProto, position: int) -> str:
    """How errors name a node: by its name, or by its position in the graph if it has none."""
    return f"node {node.name!r}" if node.name else f"node #{position}"


def _opset(model: onnx.ModelProto) -> int:
    versions = [o.version for o in model.opset_import if o.domain in _DEFAULT_DOMAINS]
    if not versions:
        imported = [(o.domain, o.version) for o in model.opset_import]
        raise fail(
            ValueError,
            _MODEL,
            f"opset_import must include the default ONNX domain ('' or 'ai.onnx'), got {imported}",
        )
    _check_opset("opset_import of the default domain", versions[0])
    return versions[0]


def _check_opset(subject: str, version: int, where: str = _MODEL) -> None:
    """An opset the installed onnx defines (onnxruntime refuses a model stamped with a later
    one; onnx.defs would answer with its newest schemas)."""
    newest = onnx.defs.onnx_opset_version()
    if type(version) is not int or not 1 <= version <= newest:
        raise fail(
            ValueError,
            where,
            f"{subject} must be in [1, {newest}] (the opsets the installed onnx defines), got {version!r}",
        )


def _refuse_unsupported(graph: onnx.GraphProto) -> None:
    unsupported = [
        f"{node.domain + '.' if node.domain else ''}{node.op_type} ({_node_name(node, position)})"
        for position, node in enumerate(graph.node)
        if node.domain not in _DEFAULT_DOMAINS or node.op_type not in SUPPORTED_OPS
    ]
    if unsupported:
        raise fail(
            NotImplementedError,
            _MODEL,
            f"nodes must be one of {', '.join(SUPPORTED_OPS)} (the ops jax_gather.backend runs), "
            f"got {', '.join(unsupported)}",
        )
    if graph.sparse_initializer:
        names = [t.values.name for t in graph.sparse_initializer]
        raise fail(NotImplementedError, _MODEL, f"initializers must be dense, got sparse {names}")


def _schema(node: onnx.NodeProto, opset: int, label: str) -> Any:
    try:
        return onnx.defs.get_schema(node.op_type, opset, "")
    except onnx.defs.SchemaError:
        raise fail(
            ValueError,
            label,
            f"the op must be defined at the model's opset, got opset {opset}, which has no {node.op_type}",
        ) from None


def _attributes(node: onnx.NodeProto, schema: Any, label: str) -> dict[str, Any]:
    """The node's attributes, with the schema's defaults for those it leaves out."""
    values = {}
    for attribute in node.attribute:
        name = attribute.name
        if name not in schema.attributes:
            known = ", ".join(sorted(schema.attributes)) or "none"
            raise fail(
                ValueError,
                label,
                f"attributes must be those of {node.op_type}-{schema.since_version} ({known}), "
                f"got {name}={helper.get_attribute_value(attribute)!r}",
            )
        expected = schema.attributes[name].type
        if attribute.type != expected:
            type_name = AttributeProto.AttributeType.Name
            raise fail(
                TypeError,
                label,
                f"attribute {name} must be of type {type_name(expected)}, got {type_name(attribute.type)}",
            )
        values[name] = helper.get_attribute_value(attribute)
    for name, spec in schema.attributes.items():
        if name not in values and spec.default_value.name:
            values[name] = helper.get_attribute_value(spec.default_value)
    return values


def _check_inputs(node: onnx.NodeProto, schema: Any, types: Mapping[str, int], label: str) -> None:
    """Input and output counts, and each input's type against the schema's constraint."""
    formal = [f.name for f in schema.inputs]
    if len(node.input) != len(formal) or not all(node.input):
        raise fail(ValueError, label, f"inputs must be {formal}, got {list(node.input)}")
    if len(node.output) != 1 or not node.output[0]:
        raise fail(ValueError, label, f"outputs must be one tensor, got {list(node.output)}")
    for spec, name in zip(schema.inputs, node.input):
        if name not in types:
            raise fail(
                ValueError,
                label,
                f"input {spec.name} must be a graph input, an initializer or an earlier node's "
                f"output, got {name!r}, which is none of them",
            )
        _check_type(node, schema, spec, name, types[name], label)


def _check_type(node: onnx.NodeProto, schema: Any, spec: Any, name: str, elem_type: int, label: str) -> None:
    """A tensor's type against the schema's constraint for the input or output ``spec``."""
    constraints = {c.type_param_str: list(c.allowed_type_strs) for c in schema.type_constraints}
    allowed = constraints.get(spec.type_str, [spec.type_str])
    actual = _type_name(elem_type)
    if actual not in allowed:
        rule = allowed[0] if len(allowed) == 1 else "one of " + ", ".join(allowed)
        raise fail(
            TypeError,
            label,
            f"{spec.name} must be {rule} ({node.op_type}-{schema.since_version}), got {actual} ({name!r})",
        )


def _check_outputs(graph: onnx.GraphProto, types: Mapping[str, int]) -> None:
    for info in graph.output:
        if info.name not in types:
            raise fail(
                ValueError,
                _MODEL,
                f"output {info.name!r} must be computed by the graph, got no value for it",
            )
        declared = info.type.tensor_type.elem_type if info.type.HasField("tensor_type") else 0
        if declared and declared != types[info.name]:
            raise fail(
                TypeError,
                _MODEL,
                f"output {info.name!r} is declared {_type_name(declared)}, "
                f"got a value of type {_type_name(types[info.name])}",
            )


def _declared_type(subject: str, info: onnx.ValueInfoProto) -> int:
    kind = info.type.WhichOneof("value")
    if kind is None:
        raise fail(ValueError, _MODEL, f"{subject} must declare its type, got none")
    if kind != "tensor_type":
        raise fail(NotImplementedError, _MODEL, f"{subject} must be a tensor, got a {kind}")
    elem_type = info.type.tensor_type.elem_type
    _dtype_of(subject, elem_type)
    return elem_type


def _declared_shape(info: onnx.ValueInfoProto) -> tuple[int | None, ...] | None:
    """An input's declared shape: a fixed size per dim (None for a named or unknown one), or
    None where no shape is declared."""
    tensor_type = info.type.tensor_type
    if not tensor_type.HasField("shape"):
        return None
    return tuple(d.dim_value if d.HasField("dim_value") else None for d in tensor_type.shape.dim)


def _dtype_of(subject: str, elem_type: int) -> np.dtype:
    if elem_type not in _DTYPES:
        name = _type_name(elem_type) if elem_type else "no element type"
        raise fail(
            NotImplementedError,
            _MODEL,
            f"{subject} must have one of the types the gathers take, got {name}",
        )
    return _DTYPES[elem_type]


def _type_name(elem_type: int) -> str:
    return f"tensor({TensorProto.DataType.Name(elem_type).lower()})"


def _to_numpy(subject: str, tensor: onnx.TensorProto) -> np.ndarray:
    dtype = _dtype_of(subject, tensor.data_type)
    # Older onnx releases read bfloat16 as float32; the values are exact either way.
    return numpy_helper.to_array(tensor).astype(dtype, copy=False)


def _constant(node: onnx.NodeProto, attributes: Mapping[str, Any], label: str) -> np.ndarray:
    if len(attributes) != 1:
        raise fail(
            ValueError,
            label,
            f"attributes must be exactly one value attribute, got {sorted(attributes) or 'none'}",
        )
    ((name, value),) = attributes.items()
    if name == "value":
        return _to_numpy(label, value)
    if name in ("value_float", "value_floats"):
        return np.array(value, np.float32)
    if name in ("value_int", "value_ints"):
        return np.array(value, np.int64)
    if name == "value_string":
        return np.array(value.decode("utf-8"), object)
    if name == "value_strings":
        return np.array([s.decode("utf-8") for s in value], object)
    raise fail(NotImplementedError, label, f"the value must be dense, got {name}")


def _element_type(subject: str, value: Any) -> int:
    """The ONNX element type of an array."""
    array = np.asarray(value)
    if _strings.holds_strings(array):
        return TensorProto.STRING
    for elem_type, dtype in _DTYPES.items():
        if array.dtype == dtype:
            return elem_type
    raise fail(
        TypeError,
        subject,
        f"arrays must have a dtype the gathers take (bool, ints, floats, complex, strings), "
        f"got {array.dtype}",
    )


# ---- running a model ----------------------------------------------------------------------


def _identity(x: Any) -> Any:
    return x


def _feeds(graph: _Graph, inputs: Any) -> dict[str, np.ndarray]:
    if isinstance(inputs, Mapping):
        unknown = [name for name in inputs if name not in graph.input_types]
        missing = [name for name in graph.inputs if name not in inputs]
        if unknown or missing:
            raise fail(
                ValueError,
                _MODEL,
                f"inputs must be named {list(graph.inputs)}, got {list(inputs)}",
            )
        named = dict(inputs)
    else:
        if not isinstance(inputs, (list, tuple)):
            inputs = [inputs]  # a single array for a one-input model, as onnxruntime allows
        if len(inputs) != len(graph.inputs):
            raise fail(
                ValueError,
                _MODEL,
                f"inputs must be {len(graph.inputs)} arrays, for {list(graph.inputs)}, got {len(inputs)}",
            )
        named = dict(zip(graph.inputs, inputs))
    feeds = {name: _as_feed(name, value, graph.input_types[name]) for name, value in named.items()}
    for name, value in feeds.items():
        _check_shape(name, value.shape, graph.input_shapes[name])
    return feeds


def _check_shape(name: str, shape: tuple[int, ...], declared: tuple[int | None, ...] | None) -> None:
    """A feed against its input's declared fixed dims and rank, as onnxruntime checks them."""
    if declared is None or (
        len(shape) == len(declared) and all(f is None or f == d for d, f in zip(shape, declared))
    ):
        return  # on every run: the message only where it is due
    shown = "[" + ", ".join("?" if d is None else str(d) for d in declared) + "]"
    if len(shape) != len(declared):
        raise fail(
            ValueError,
            _MODEL,
            f"input {name!r} must have rank {len(declared)} (declared shape {shown}), got shape {shape}",
        )
    for dim, (size, fixed) in enumerate(zip(shape, declared)):
        if fixed is not None and size != fixed:
            raise fail(
                ValueError,
                _MODEL,
                f"input {name!r} must have size {fixed} in dim {dim} (declared shape {shown}), "
                f"got shape {shape}",
            )


def _as_feed(name: str, value: Any, elem_type: int) -> np.ndarray:
    array = np.asarray(value)
    expected = _DTYPES[elem_type]
    if elem_type == TensorProto.STRING and _strings.holds_strings(array):
        return array.astype(object)  # a copy: ONNX's NumPy form of strings, as onnxruntime's
    if not array.dtype.isnative:  # the same values in the other byte order: a copy in ours
        array = array.astype(array.dtype.newbyteorder("="))
    if array.dtype != expected:
        raise fail(
            TypeError,
            _MODEL,
            f"input {name!r} must be {_type_name(elem_type)} (NumPy {expected}), got {array.dtype}",
        )
    return array


def _evaluate(graph: _Graph, feeds: Mapping[str, Any]) -> tuple[Any, ...]:
    env = {**graph.constants, **feeds}
    for node in graph.nodes:
        try:
            env[node.output] = node.fn(*(env[name] for name in node.inputs))
        except (IndexError, TypeError, ValueError) as error:
            located = _in_node(error, node)
            if located is error:
                raise
            raise located from error
    return tuple(env[name] for name in graph.outputs)


class _Step(NamedTuple):
    """A gather node of a program, for one signature of its sources."""

    plan: Any
    source: str | None  # the input or constant its indices are (through Identity nodes), if any
    in_range: Callable[[np.ndarray], bool] | None  # the host test of those indices


# Where a gather node of a program reads its indices (the program's static ``taken``): the
# position of a source, ``_COMPUTED`` (the graph computes them: tested in the program), or
# ``_NORMALISED`` (the next of the arrays the host normalised).
_COMPUTED, _NORMALISED = -1, -2


class _Program:
    """A checked graph as one jitted program: ``run(feeds)`` gives the outputs as JAX arrays,
    or None where the graph must run node by node to raise its error.

    For each shape of the inputs, the plans of its gather nodes come from the shapes alone
    (``plans``, nothing runs). Indices that are inputs or constants are tested on the host
    before the program runs (one pass each where every index is in [0, s-1]; those are then
    gathered as they are, the rest normalised); indices that nodes compute are tested in the
    program, which returns one flag for all of them. Any failure, of a test or of a plan,
    sends the run node by node (``_evaluate``), which raises the op's error naming the node.

    A signature of NumPy inputs that ran is remembered (:meth:`run_known`): later runs of it
    test the index inputs and call the program, with nothing validated or planned again.
    """

    def __init__(self, graph: _Graph, device: jax.Device) -> None:
        self._graph = graph
        self._device = device
        self._on_cpu = device.platform == "cpu"
        # What the program takes: the graph inputs, then the constants (a run may feed those
        # initializers that the graph also lists as inputs).
        self._sources = graph.inputs + tuple(graph.constants)
        self._constants: dict[str, jax.Array] | None = None
        self._steps: dict[tuple, tuple[_Step, ...] | None] = {}
        # One jitted program per choice of modes and index sources, called with its arrays as
        # positional arguments (no static arguments to hash, no tuples to flatten: about 3 µs
        # a run on a 3-node model).
        self._programs: dict[tuple, Callable[..., Any]] = {}
        # Fed signatures that ran: their steps, and their run where every index is in [0, s-1].
        self._known: dict[tuple, tuple[tuple[_Step, ...], Callable[[tuple], Any] | None]] = {}
        self._host_constants = tuple(graph.constants.values())
        self._origin = _origins(graph)
        self._index_only = _index_only(graph, self._sources)
        self._inputs_fed = (True,) * len(graph.inputs) + (False,) * len(graph.constants)

    @staticmethod
    def can_run(graph: _Graph) -> bool:
        """Whether the graph can be one program: no string tensors (JAX has no string dtype)."""
        strings = any(t == TensorProto.STRING for t in graph.input_types.values())
        return not strings and not any(_strings.is_string_dtype(c.dtype) for c in graph.constants.values())

    def run_known(self, inputs: Any) -> tuple[jax.Array, ...] | None:
        """The outputs for ``inputs`` as ``run`` gives them, where they are NumPy arrays of a
        signature (shapes and dtypes) that :meth:`run` has run; else None, for the full path.
        Nothing is validated again: the signature was, and only the values can differ."""
        names = self._graph.inputs
        if type(inputs) is dict:
            if len(inputs) != len(names):
                return None
            try:
                values = tuple([inputs[name] for name in names])
            except KeyError:
                return None
        elif type(inputs) is list or type(inputs) is tuple:
            values = tuple(inputs)
        elif type(inputs) is np.ndarray:
            values = (inputs,)
        else:
            return None
        for value in values:
            if type(value) is not np.ndarray:
                return None
        known = self._known.get(tuple([(value.shape, value.dtype) for value in values]))
        if known is None:
            return None
        steps, in_range = known
        outputs = in_range(values) if in_range is not None else None
        if outputs is None:  # an index input out of [0, s-1]: every case, step by step
            with x64_enabled(), jax.default_device(self._device):
                outputs = self._execute(values + self._host_constants, self._inputs_fed, steps)
        return outputs

    def _in_range_run(self, steps: tuple[_Step, ...], signature: tuple) -> Callable[[tuple], Any] | None:
        """For a signature's steps, the run of fed inputs where every index input is in
        [0, s-1] (None where it finds one that is not): what :meth:`_execute` does then, with
        every choice that depends only on the signature made once. None where a constant's
        indices are not all in [0, s-1] (they never change: every run takes ``_execute``)."""
        assert self._constants is not None
        names, fed, on_cpu = self._graph.inputs, self._inputs_fed, self._on_cpu
        # Whether an input of the signature is of a size JAX's CPU client copies on a worker
        # thread (only those may get an aligned or narrowed copy: aligned_for_cpu).
        client_copies = lambda i: math.prod(signature[i][0]) * signature[i][1].itemsize >= CPU_COPIED_INLINE
        checks, modes, taken = [], [], []
        for plan, source, test in steps:
            if source is None or test is None:
                modes.append(Mode.CHECKED)
                taken.append(_COMPUTED)
                continue
            position = self._sources.index(source)
            modes.append(Mode.IN_RANGE)
            if not fed[position]:
                if not test(self._graph.constants[source]):
                    return None
                taken.append(position)
                continue
            replaced = self._index_only[position]
            taken.append(position if replaced else _NORMALISED)
            # Narrowed or aligned copies only where they may be made (by size, as in _execute).
            checks.append((position, test, plan if on_cpu and client_copies(position) else None, replaced))
        program = self._program(tuple(modes), tuple(taken), len(self._sources))
        constants = tuple(self._constants[name] for name in self._sources[len(names) :])
        aligned = tuple(i for i in range(len(names)) if on_cpu and client_copies(i))
        device = self._device

        def run(values: tuple) -> Any:
            extra = []
            arguments = list(values)
            for i in aligned:
                arguments[i] = aligned_for_cpu(values[i], True)
            for position, test, plan, replaced in checks:
                indices = values[position]
                if not test(indices):
                    return None
                if plan is not None:
                    narrow = narrowed_for_cpu(indices, plan)
                    given = aligned_for_cpu(indices if narrow is None else narrow, True)
                    if replaced:
                        arguments[position] = given
                    else:
                        extra.append(given)
                elif not replaced:
                    extra.append(indices)
            with x64_enabled(), jax.default_device(device):
                outputs, ok = program(*arguments, *constants, *extra)
                if ok is not None and not bool(ok):
                    return None
            return outputs

        return run

    def run(self, feeds: Mapping[str, np.ndarray], inputs: Any = None) -> tuple[jax.Array, ...] | None:
        """The outputs, or None where the graph must run node by node; ``inputs``, as the
        caller gave them, where their signature may be remembered for :meth:`run_known`."""
        if self._constants is None:  # on the device once, not on every run
            self._constants = {k: jax.device_put(v, self._device) for k, v in self._graph.constants.items()}
        host = tuple(feeds[n] if n in feeds else self._graph.constants[n] for n in self._sources)
        steps = self._plan(tuple((v.shape, v.dtype) for v in host))
        if steps is None:
            return None
        outputs = self._execute(host, tuple(n in feeds for n in self._sources), steps)
        if outputs is not None and inputs is not None and self._fed_as_given(inputs, feeds):
            if len(self._known) >= 64:
                self._known.clear()
            signature = tuple((feeds[n].shape, feeds[n].dtype) for n in self._graph.inputs)
            self._known[signature] = (steps, self._in_range_run(steps, signature))
        return outputs

    def _fed_as_given(self, inputs: Any, feeds: Mapping[str, np.ndarray]) -> bool:
        """Whether ``inputs`` were the graph inputs alone, NumPy arrays fed as they are (native
        byte order, the declared dtypes): what :meth:`run_known` can take."""
        names = self._graph.inputs
        if isinstance(inputs, Mapping):
            if len(inputs) != len(names):
                return False  # initializers fed too
            given = [inputs[name] for name in names]
        else:
            given = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
        return all(type(v) is np.ndarray and v is feeds[n] for n, v in zip(names, given))

    def _execute(
        self, host: tuple, fed: tuple[bool, ...], steps: tuple[_Step, ...]
    ) -> tuple[jax.Array, ...] | None:
        """The program on ``host`` (a NumPy array per source, ``fed`` where the run feeds it,
        else the model's constant), or None where an index is out of bounds.

        Each gather node whose indices are a source has them judged here, as eager calls
        judge theirs (jax_gather._host_bounds.judged): in one pass where every index is in
        [0, s-1], then gathered as they are; small ones with negatives normalised here, larger
        ones after a minimum and a maximum judge them, in the program. A fed input read only as indices
        is replaced by its tested copy (normalised, narrowed, or itself), any other's copy is
        an argument of its own, so that a run with negatives and one without share a program;
        indices the graph computes are tested in the program (one flag comes back).
        """
        assert self._constants is not None
        on_cpu = self._on_cpu
        values = [
            aligned_for_cpu(v, on_cpu) if is_fed else self._constants[n]
            for n, v, is_fed in zip(self._sources, host, fed)
        ]
        modes, taken, extra = [], [], []
        for plan, source, in_range in steps:
            if source is None or in_range is None:
                modes.append(Mode.CHECKED)  # tested in the program
                taken.append(_COMPUTED)
                continue
            position = self._sources.index(source)
            indices = host[position]
            is_fed = fed[position]
            verdict, moved = judged(plan, indices, in_range, normalise=True)
            if verdict is Verdict.OUT_OF_BOUNDS:
                return None
            mode, given = Mode.PROMISE_IN_BOUNDS, indices  # normalised in the program
            if moved is not None:  # in [0, s-1]: as given, or normalised on the host
                mode, given = Mode.IN_RANGE, moved
                if moved is indices and on_cpu and is_fed:
                    narrow = narrowed_for_cpu(indices, plan)
                    given = indices if narrow is None else narrow
            modes.append(mode)
            if given is indices and not is_fed:
                taken.append(position)  # a constant in [0, s-1]: on the device already
            elif is_fed and self._index_only[position]:
                taken.append(position)  # in place of the input, which nothing else reads
                values[position] = aligned_for_cpu(given, on_cpu)
            else:
                taken.append(_NORMALISED)
                extra.append(aligned_for_cpu(given, on_cpu))
        try:
            outputs, ok = self._program(tuple(modes), tuple(taken), len(values))(*values, *extra)
        except (IndexError, TypeError, ValueError):
            return None  # raised while tracing (computed indices into an empty axis, say)
        if ok is not None and not bool(ok):  # the one value read back before the outputs
            return None
        return outputs

    def _program(self, modes: tuple[Mode, ...], taken: tuple[int, ...], sources: int) -> Callable[..., Any]:
        """The jitted graph for these modes and index sources, taking the ``sources`` values
        and then the normalised indices as positional arguments."""
        program = self._programs.get((modes, taken))
        if program is None:
            trace = lambda *arrays: self._trace(arrays[:sources], arrays[sources:], modes=modes, taken=taken)
            program = self._programs[(modes, taken)] = jax.jit(trace)
        return program

    def _plan(self, signature: tuple) -> tuple[_Step, ...] | None:
        """Each gather node's step, for sources of these (shape, dtype); None where a plan
        fails (the node's error is due)."""
        known = self._steps.get(signature, self)  # self: not planned yet (None: plans fail)
        if known is not self:
            return known  # type: ignore[return-value]
        shapes = {name: shape for name, (shape, _) in zip(self._sources, signature)}
        dtypes = {name: dtype for name, (_, dtype) in zip(self._sources, signature)}
        steps: list[_Step] = []
        result: tuple[_Step, ...] | None
        for node in self._graph.nodes:
            if node.op_type == "Identity":
                shapes[node.output] = shapes[node.inputs[0]]
                continue
            data, indices = node.inputs
            try:
                plan = _PLANS[node.op_type](shapes[data], shapes[indices], node.attribute)
            except (ValueError, TypeError, IndexError):
                result = None
                break
            shapes[node.output] = plan.output_shape
            source = self._origin.get(indices)
            test = None if source is None else in_range_test(plan, dtypes[source], math.prod(shapes[source]))
            steps.append(_Step(plan, source, test))
        else:
            result = tuple(steps)
        if len(self._steps) >= 64:
            self._steps.clear()
        self._steps[signature] = result
        return result

    def _trace(
        self, values: tuple, normalised: tuple, *, modes: tuple[Mode, ...], taken: tuple[int, ...]
    ) -> tuple[tuple[jax.Array, ...], Any]:
        """The graph on ``values`` (one per source); each gather node's indices, its ``mode``
        and where they are taken from (``taken``) as :meth:`run` decided."""
        env = dict(zip(self._sources, values))
        flags = []
        steps = iter(zip(modes, taken))
        extra = iter(normalised)
        for node in self._graph.nodes:
            if node.op_type == "Identity":
                env[node.output] = env[node.inputs[0]]
                continue
            mode, where = next(steps)
            data = env[node.inputs[0]]
            if where == _COMPUTED:
                indices = env[node.inputs[1]]
            else:
                indices = next(extra) if where == _NORMALISED else values[where]
            plan = _PLANS[node.op_type](data.shape, indices.shape, node.attribute)
            if mode is Mode.CHECKED:
                flags.append(jnp.all(in_bounds(plan, indices)))
                mode = Mode.PROMISE_IN_BOUNDS
            env[node.output] = ops.op_program(data, indices, None, plan=plan, mode=mode)
        ok = jnp.all(jnp.stack(flags)) if flags else None
        return tuple(env[name] for name in self._graph.outputs), ok


def _origins(graph: _Graph) -> dict[str, str]:
    """Each name that is a graph input or constant, or one of them through Identity nodes,
    with that input or constant."""
    origin = {name: name for name in (*graph.input_types, *graph.constants)}
    for node in graph.nodes:
        if node.op_type == "Identity" and node.inputs[0] in origin:
            origin[node.output] = origin[node.inputs[0]]
    return origin


def _index_only(graph: _Graph, sources: tuple[str, ...]) -> tuple[bool, ...]:
    """For each source, whether the graph reads it only as the indices of one gather node
    (through Identity nodes): a run may then give the program its tested, normalised or
    narrowed copy in its place, rather than both (an argument the program does not read still
    costs its dispatch about 2.5 µs)."""
    origin = _origins(graph)
    reads: dict[str, int] = dict.fromkeys(sources, 0)
    other = {origin[name] for name in graph.outputs if name in origin}
    for node in graph.nodes:
        if node.op_type != "Identity":
            data, indices = node.inputs
            if data in origin:
                other.add(origin[data])
            if indices in origin:
                reads[origin[indices]] += 1
    return tuple(reads[name] == 1 and name not in other for name in sources)


def _passed_through(graph: _Graph) -> tuple[bool, ...]:
    """For each output, whether it is a graph input or constant (through Identity nodes): a
    view of it would be the caller's array, or the model's."""
    origin = _origins(graph)
    return tuple(name in origin for name in graph.outputs)


def _numpy_outputs(outputs: Any, copied: tuple[bool, ...]) -> list[np.ndarray]:
    """The outputs as NumPy arrays: views of JAX's buffers (no copy on a CPU), read-only, and
    copies of those that are the caller's or the model's own arrays."""
    return [np.array(o) if copy else np.asarray(o) for o, copy in zip(outputs, copied)]


def _in_node(error: Exception, node: _Node) -> Exception:
    """The op's error, naming the node: "Gather node 'g1': indices[1] = 7 is out of ..."."""
    renamed = named_for(error, node.op_type, node.label)
    return error if renamed is None else renamed


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
