"""An ONNX model loaded and checked into a graph, and that graph evaluated node by node.

:func:`compile_graph` checks a model against the ONNX schemas of its opset (supported ops,
attributes with their defaults, input and output types) and gives a :class:`Graph`;
:func:`checked_feeds` checks a run's inputs against the graph's declared types and shapes;
:func:`evaluate` runs the graph node by node, each op's error naming its node. The API on
them is jax_gather.backend's; jax_gather._backend_program runs a graph as one program.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable, Mapping
from typing import Any

import jax.numpy as jnp
import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from jax_gather import _strings, ops
from jax_gather._arguments import fail, named_for

_GATHERS = {"Gather": ops.gather, "GatherElements": ops.gather_elements, "GatherND": ops.gather_nd}
SUPPORTED_OPS = ("Constant", "Gather", "GatherElements", "GatherND", "Identity")
_DEFAULT_DOMAINS = ("", "ai.onnx")
MODEL = "ONNX model"  # the subject of errors about the model as a whole

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
class Node:
    """A Gather, GatherElements, GatherND or Identity node, checked."""

    label: str  # how errors name the node: "Gather node 'g1'", or "Gather node #3" if unnamed
    op_type: str
    fn: Callable[..., Any]
    inputs: tuple[str, ...]
    output: str
    attribute: int = 0  # axis, or batch_dims for GatherND


@dataclasses.dataclass(frozen=True)
class Graph:
    """A checked model: its inputs, constants and nodes (Constant nodes folded into constants)."""

    inputs: tuple[str, ...]  # fed in this order: the graph inputs without an initializer
    input_types: Mapping[str, int]  # every graph input that may be fed, with its element type
    input_shapes: Mapping[str, tuple[int | None, ...] | None]  # declared: None where free
    constants: Mapping[str, np.ndarray]  # initializers and Constant values
    nodes: tuple[Node, ...]
    outputs: tuple[str, ...]


# ---- checking a model ---------------------------------------------------------------------


def compile_graph(model: Any) -> Graph:
    """The model (a ModelProto, its bytes or a path) checked against the ONNX schemas of its
    opset, as a :class:`Graph`; an error naming the node, the rule and the value otherwise."""
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
                MODEL,
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
            types[output] = element_type(label, constants[output])
            _check_type(node, schema, schema.outputs[0], output, types[output], label)
            continue
        if node.op_type == "Identity":
            fn = _identity
        else:  # the attributes are named as the ops' keyword arguments (axis, batch_dims)
            fn = functools.partial(_GATHERS[node.op_type], **attributes)
        attribute = next(iter(attributes.values()), 0)
        nodes.append(Node(label, node.op_type, fn, tuple(node.input), node.output[0], attribute))
        types[node.output[0]] = types[node.input[0]]
    _check_outputs(graph, types)
    return Graph(
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
                MODEL,
                f"model must be a serialized onnx.ModelProto, got {where} that do not parse as one ({error})",
            ) from None
    raise fail(
        TypeError,
        MODEL,
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
            MODEL,
            f"opset_import must include the default ONNX domain ('' or 'ai.onnx'), got {imported}",
        )
    check_opset("opset_import of the default domain", versions[0])
    return versions[0]


def check_opset(subject: str, version: int, where: str = MODEL) -> None:
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
            MODEL,
            f"nodes must be one of {', '.join(SUPPORTED_OPS)} (the ops jax_gather.backend runs), "
            f"got {', '.join(unsupported)}",
        )
    if graph.sparse_initializer:
        names = [t.values.name for t in graph.sparse_initializer]
        raise fail(NotImplementedError, MODEL, f"initializers must be dense, got sparse {names}")


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
                MODEL,
                f"output {info.name!r} must be computed by the graph, got no value for it",
            )
        declared = info.type.tensor_type.elem_type if info.type.HasField("tensor_type") else 0
        if declared and declared != types[info.name]:
            raise fail(
                TypeError,
                MODEL,
                f"output {info.name!r} is declared {_type_name(declared)}, "
                f"got a value of type {_type_name(types[info.name])}",
            )


def _declared_type(subject: str, info: onnx.ValueInfoProto) -> int:
    kind = info.type.WhichOneof("value")
    if kind is None:
        raise fail(ValueError, MODEL, f"{subject} must declare its type, got none")
    if kind != "tensor_type":
        raise fail(NotImplementedError, MODEL, f"{subject} must be a tensor, got a {kind}")
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
            MODEL,
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


def element_type(subject: str, value: Any) -> int:
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


def checked_feeds(graph: Graph, inputs: Any) -> dict[str, np.ndarray]:
    """A run's inputs (a list, a dict by name or one array) by name, as NumPy arrays checked
    against the graph inputs' element types and declared shapes."""
    if isinstance(inputs, Mapping):
        unknown = [name for name in inputs if name not in graph.input_types]
        missing = [name for name in graph.inputs if name not in inputs]
        if unknown or missing:
            raise fail(
                ValueError,
                MODEL,
                f"inputs must be named {list(graph.inputs)}, got {list(inputs)}",
            )
        named = dict(inputs)
    else:
        if not isinstance(inputs, (list, tuple)):
            inputs = [inputs]  # a single array for a one-input model, as onnxruntime allows
        if len(inputs) != len(graph.inputs):
            raise fail(
                ValueError,
                MODEL,
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
            MODEL,
            f"input {name!r} must have rank {len(declared)} (declared shape {shown}), got shape {shape}",
        )
    for dim, (size, fixed) in enumerate(zip(shape, declared)):
        if fixed is not None and size != fixed:
            raise fail(
                ValueError,
                MODEL,
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
            MODEL,
            f"input {name!r} must be {_type_name(elem_type)} (NumPy {expected}), got {array.dtype}",
        )
    return array


def evaluate(graph: Graph, feeds: Mapping[str, Any]) -> tuple[Any, ...]:
    """The graph's outputs on ``feeds``, node by node; an op's error names its node."""
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


def _in_node(error: Exception, node: Node) -> Exception:
    """The op's error, naming the node: "Gather node 'g1': indices[1] = 7 is out of ..."."""
    renamed = named_for(error, node.op_type, node.label)
    return error if renamed is None else renamed


def origins(graph: Graph) -> dict[str, str]:
    """Each name that is a graph input or constant, or one of them through Identity nodes,
    with that input or constant."""
    origin = {name: name for name in (*graph.input_types, *graph.constants)}
    for node in graph.nodes:
        if node.op_type == "Identity" and node.inputs[0] in origin:
            origin[node.output] = origin[node.inputs[0]]
    return origin
