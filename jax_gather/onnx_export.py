"""Export to ONNX through jax2onnx: each op leaves JAX as the ONNX node it implements.

The library's own programs are one ``lax.gather`` with index arithmetic, a bounds check that
only checkify reads, and CPU lowerings chosen by ``lax.platform_dependent``: good programs to
run, and ones no converter can map back to one ONNX node. :func:`register_jax2onnx` therefore
gives jax2onnx a plugin that, only while ``jax2onnx.to_onnx`` traces, has each op bind
``onnx_gather_p`` (:func:`onnx_form`): a primitive that *is* the ONNX node (Gather,
GatherElements or GatherND with its attribute, ONNX's own rules for negative and out-of-range
indices), and lowers to that one node. The modes become ONNX around it:

- "checked", "promise_in_bounds": the node alone. onnxruntime then applies ONNX's rules: an
  out-of-range index is an error there, as it is in "checked" on concrete indices here.
- "clip": the indices clamped to [-s, s-1] (Clip, or Max and Min per GatherND component), then
  the node, which maps [-s, -1] to [0, s-1]: the library's clip.
- "fill": the node on the in-bounds indices (out-of-bounds ones replaced by 0), then a Where
  that puts ``fill_value`` where an index was out of bounds (in a type of the same values
  where onnxruntime's Where lacks the dtype).

The seam is one value, ``ops.ONNX_FORM``: a JAX user context, which the plugin's binding sets
for the conversion (in its own thread) and which the ops read as they trace. JAX keys its
trace, lowering and compilation caches on it, so a program traced for the export is never run
and a program traced before it is never exported: nothing is swapped and no cache is cleared,
and a function jitted before an export (using the ops or not) is not traced again after it.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import export, lax
from jax.interpreters import ad, batching, mlir

from jax_gather import ops
from jax_gather._arguments import Mode
from jax_gather._lowering import PROMISE
from jax_gather._traced_bounds import axis_sizes
from jax_gather.plans import GatherPlan, gather_elements_plan, gather_nd_plan, gather_plan

try:
    from jax.extend.core import Primitive
except ImportError:  # pragma: no cover - jax 0.4.35 keeps it in jax.core
    from jax.core import Primitive  # type: ignore[attr-defined,no-redef]

_PLANS = {"Gather": gather_plan, "GatherElements": gather_elements_plan, "GatherND": gather_nd_plan}
# The op's attribute as ONNX names it.
_ATTRIBUTE = {"Gather": "axis", "GatherElements": "axis", "GatherND": "batch_dims"}


def _attribute(plan: GatherPlan) -> int:
    """The normalised ONNX attribute of ``plan``: the axis, or GatherND's batch_dims."""
    dnums = plan.dimension_numbers
    return len(dnums.operand_batching_dims) if plan.tuple_indices else dnums.start_index_map[0]


# ---- the primitive: one ONNX node --------------------------------------------------------

onnx_gather_p = Primitive("jax_gather_onnx_gather")


def onnx_gather(data: Any, indices: Any, *, op_name: str, attribute: int) -> Any:
    """ONNX's ``op_name`` node with its attribute, on raw indices (negative ones count from the
    end). Evaluated in JAX, it is the op in "promise_in_bounds" mode."""
    return onnx_gather_p.bind(data, indices, op_name=op_name, attribute=attribute)


def _plan(data: Any, indices: Any, op_name: str, attribute: int) -> GatherPlan:
    return _PLANS[op_name](data.shape, indices.shape, attribute)


def _abstract_eval(data: Any, indices: Any, *, op_name: str, attribute: int) -> Any:
    return jax.core.ShapedArray(_plan(data, indices, op_name, attribute).output_shape, data.dtype)


def _evaluate(data: Any, indices: Any, *, op_name: str, attribute: int) -> Any:
    plan = _plan(data, indices, op_name, attribute)
    return ops.library_program(data, indices, None, plan=plan, mode=Mode.PROMISE_IN_BOUNDS)


def _coordinates(plan: GatherPlan, indices: Any) -> tuple[Any, lax.GatherDimensionNumbers]:
    """The plan's gather as one without batching dims, on in-bounds ``indices``: index vectors
    in [0, s-1] (by compares and adds) led by the position along each batching dim, and its
    dimension numbers. Its transpose is a scatter-add of whole coordinates, which converters
    map to ScatterND (jax2onnx has no batched scatter)."""
    dnums = plan.dimension_numbers
    if indices.dtype not in (jnp.int32, jnp.int64):
        indices = indices.astype(jnp.int32)
    sizes = axis_sizes(plan, indices.dtype)
    if not plan.tuple_indices:
        indices = indices.reshape(indices.shape + (1,))
    idx = jnp.where(indices < 0, indices + sizes, indices)
    if not dnums.operand_batching_dims:
        return idx, dnums
    at = idx.shape[:-1] + (1,)
    positions = [lax.broadcasted_iota(idx.dtype, at, d) for d in dnums.start_indices_batching_dims]
    unbatched = lax.GatherDimensionNumbers(
        offset_dims=dnums.offset_dims,
        collapsed_slice_dims=tuple(sorted(dnums.collapsed_slice_dims + dnums.operand_batching_dims)),
        start_index_map=dnums.operand_batching_dims + dnums.start_index_map,
    )
    return jnp.concatenate([*positions, idx], axis=-1), unbatched


def _transpose(cotangent: Any, data: Any, indices: Any, *, op_name: str, attribute: int) -> list[Any]:
    """The derivative's transpose: the cotangent added into zeros of data's shape at the
    gathered positions (a scatter-add)."""
    assert ad.is_undefined_primal(data) and not ad.is_undefined_primal(indices)
    if type(cotangent) is ad.Zero:
        return [ad.Zero(data.aval), None]
    plan = _plan(data.aval, indices, op_name, attribute)
    idx, dnums = _coordinates(plan, indices)
    # A GatherElements data block is a leading block: its coordinates are data's own.
    gather = lambda d: lax.gather(d, idx, dnums, plan.slice_sizes, mode=PROMISE)
    aval = jax.ShapeDtypeStruct(data.aval.shape, data.aval.dtype)
    (data_cotangent,) = jax.linear_transpose(gather, aval)(cotangent)
    return [data_cotangent, None]


def _moved(x: Any, source: int, destination: int) -> Any:
    """``x`` with dim ``source`` moved to ``destination``: no op where they are equal (jax2onnx
    makes ``jnp.moveaxis`` a Transpose even then)."""
    if source == destination:
        return x
    order = [d for d in range(x.ndim) if d != source]
    order.insert(destination, source)
    return lax.transpose(x, order)


def _gather_with_batch_dims(data: Any, indices: Any, *, axis: int, batch_dims: int) -> Any:
    """Gather with batch dims (Gather-7/8, ``tf.gather``), which ONNX Gather cannot express:
    per example out[p, i, r] = data[p, indices[i], r], so with data's axis moved next to the
    batch dims GatherND(batch_dims) gives [batch, i, p, r]; then p goes back in front of i."""
    b = batch_dims
    out = onnx_gather(
        _moved(data, axis, b), indices.reshape(indices.shape + (1,)), op_name="GatherND", attribute=b
    )
    i_end = indices.ndim  # out: the batch dims, the index dims up to i_end, axis - b dims of p
    p_end = i_end + axis - b
    order = (*range(b), *range(i_end, p_end), *range(b, i_end), *range(p_end, out.ndim))
    return out if order == tuple(range(out.ndim)) else lax.transpose(out, order)


def _batch(args: Any, dims: Any, *, op_name: str, attribute: int) -> tuple[Any, int]:
    """A batch of nodes as one node: the op with an extra leading dim, or (for Gather with
    both operands batched, which ONNX Gather cannot express) GatherND with one batch dim."""
    data, indices = args
    data_dim, indices_dim = dims
    size = data.shape[data_dim] if data_dim is not None else indices.shape[indices_dim]
    if data_dim is not None:
        data = _moved(data, data_dim, 0)
    if indices_dim is not None:
        indices = _moved(indices, indices_dim, 0)
    a = attribute
    if op_name == "Gather":
        if indices_dim is None:
            return onnx_gather(data, indices, op_name=op_name, attribute=a + 1), 0
        if data_dim is None:
            return onnx_gather(data, indices, op_name=op_name, attribute=a), a
        return _gather_with_batch_dims(data, indices, axis=a + 1, batch_dims=1), 0
    if op_name == "GatherND" and data_dim is None and a == 0:
        return onnx_gather(data, indices, op_name=op_name, attribute=0), 0
    # GatherElements and GatherND: both operands with the same leading batch dim.
    if data_dim is None:
        data = jnp.broadcast_to(data, (size,) + data.shape)
    if indices_dim is None:
        indices = jnp.broadcast_to(indices, (size,) + indices.shape)
    return onnx_gather(data, indices, op_name=op_name, attribute=a + 1), 0


onnx_gather_p.def_impl(_evaluate)
onnx_gather_p.def_abstract_eval(_abstract_eval)
mlir.register_lowering(onnx_gather_p, mlir.lower_fun(_evaluate, multiple_results=False))
# Linear in data: the tangent is the node on data's tangent, and its transpose a scatter-add.
ad.defjvp(
    onnx_gather_p, lambda data_dot, data, indices, **params: onnx_gather(data_dot, indices, **params), None
)
ad.primitive_transposes[onnx_gather_p] = _transpose
batching.primitive_batchers[onnx_gather_p] = _batch


# ---- the modes around the node -------------------------------------------------------------


_INT64_MAX = int(np.iinfo(np.int64).max)


def _valid_range(plan: GatherPlan, dtype: Any) -> tuple[Any, Any]:
    """The valid range [-s, s-1] of each indexed axis, limited to what ``dtype`` holds (None
    where the whole of that side of the dtype is valid: no compare is needed there)."""
    info = jnp.iinfo(dtype)
    if _symbolic(plan):  # the indices are in the node's dtype, or a wide unsigned one
        sizes = axis_sizes(plan, dtype)
        return (None if info.min == 0 else -sizes), sizes - 1
    sizes = np.asarray(plan.index_sizes, np.int64)
    low, high = np.maximum(-sizes, info.min), np.minimum(sizes - 1, min(info.max, _INT64_MAX))
    if not plan.tuple_indices:
        low, high = low[0], high[0]
    low_array = None if np.all(low == info.min) else np.asarray(low, dtype)
    high_array = None if np.all(high == info.max) else np.asarray(high, dtype)
    return low_array, high_array


def _symbolic(plan: GatherPlan) -> bool:
    return any(export.is_symbolic_dim(s) for s in plan.index_sizes)


def _in_bounds(plan: GatherPlan, indices: Any) -> Any:
    """Per index (per GatherND component) whether it is in [-s, s-1]."""
    low, high = _valid_range(plan, indices.dtype)
    checks = ([] if low is None else [indices >= low]) + ([] if high is None else [indices <= high])
    if not checks:  # every value of the dtype is in bounds
        return jnp.ones(indices.shape, bool)
    return checks[0] if len(checks) == 1 else checks[0] & checks[1]


def _node_indices(indices: Any) -> Any:
    """Indices in a dtype that ONNX's gathers take (int32, int64 for 64-bit ones), cast before
    the modes' arithmetic: onnxruntime's Where, Max, Min and Clip have no int16 or uint16."""
    if indices.dtype in (jnp.int32, jnp.int64):
        return indices
    return indices.astype(jnp.int64 if indices.dtype.itemsize == 8 else jnp.int32)


def _wide_unsigned(dtype: Any) -> bool:
    """uint32 and uint64: their values do not all fit the signed index dtype of the same width."""
    return bool(jnp.issubdtype(dtype, jnp.unsignedinteger)) and jnp.dtype(dtype).itemsize >= 4


def _clipped(plan: GatherPlan, indices: Any) -> Any:
    """The indices clamped to [-s, s-1], in the node's index dtype."""
    if _wide_unsigned(indices.dtype):
        # Down to s-1 in their own dtype first: the signed cast is then exact.
        low, high = _valid_range(plan, indices.dtype)
        return _node_indices(indices if high is None else jnp.minimum(indices, high))
    indices = _node_indices(indices)
    low, high = _valid_range(plan, indices.dtype)
    if low is not None and high is not None and np.ndim(low) == 0:
        return jnp.clip(indices, low, high)
    if low is not None:
        indices = jnp.maximum(indices, low)
    if high is not None:
        indices = jnp.minimum(indices, high)
    return indices


# onnxruntime's Where has no bool, int16, uint16, uint64 or bfloat16 (tests/test_onnx_export.py
# notices when it has): "fill" selects those in a type of the same values that it has.
_WHERE_AS = {
    np.dtype(np.bool_): np.uint8,
    np.dtype(np.int16): np.int32,
    np.dtype(np.uint16): np.int32,
    np.dtype(np.uint64): np.int64,  # ONNX's Cast between them keeps the bits, as C's does
    np.dtype(jnp.bfloat16): np.float32,
}


def _filled(plan: GatherPlan, ok: Any, out: Any, fill: Any) -> Any:
    """``out`` where ``ok`` (one flag per index, or per GatherND tuple), else ``fill``."""
    offset_dims = plan.dimension_numbers.offset_dims
    mask = ok.reshape(tuple(1 if d in offset_dims else n for d, n in enumerate(plan.output_shape)))
    dtype = out.dtype
    fill = jnp.asarray(fill, dtype)
    select_as = _WHERE_AS.get(np.dtype(dtype))
    if select_as is None:
        return jnp.where(mask, out, fill)
    return jnp.where(mask, out.astype(select_as), fill.astype(select_as)).astype(dtype)


def onnx_form(data: Any, indices: Any, fill: Any, *, plan: GatherPlan, mode: Mode) -> Any:
    """The op as ``ops.op_program`` traces it while jax2onnx converts (``ops.ONNX_FORM``): the modes
    as ONNX ops around ``onnx_gather``."""
    trivial = ops.without_gather(data, indices, fill, plan, mode)
    if trivial is not None:
        return trivial
    batch_dims = len(plan.dimension_numbers.operand_batching_dims)
    if plan.op_name == "Gather" and batch_dims:
        node = functools.partial(_gather_with_batch_dims, axis=_attribute(plan), batch_dims=batch_dims)
    else:
        node = functools.partial(onnx_gather, op_name=plan.op_name, attribute=_attribute(plan))
    if _symbolic(plan) and mode in (Mode.CLIP, Mode.FILL) and not _wide_unsigned(indices.dtype):
        indices = _node_indices(indices)  # where s and -s surely fit
    if mode is Mode.CLIP:
        return node(data, _clipped(plan, indices))
    if mode is not Mode.FILL:  # checked, promise_in_bounds, in_range: ONNX's own rules
        if indices.dtype == jnp.uint64:  # saturated, so that the node's cast to int64 keeps
            indices = jnp.minimum(indices, np.uint64(_INT64_MAX))  # them out of range
        return node(data, indices)
    ok = _in_bounds(plan, indices)
    # Out-of-bounds indices read position 0 (its value is replaced): the cast of an
    # out-of-bounds index may wrap, an in-bounds one is exact.
    out = node(data, jnp.where(ok, _node_indices(indices), 0))
    return _filled(plan, jnp.all(ok, axis=-1) if plan.tuple_indices else ok, out, fill)


# ---- the jax2onnx plugin -------------------------------------------------------------------


_EXTRA = "pip install 'jax_gather[export]'"
_INDEX_TYPES = {"Gather": ("INT32", "INT64"), "GatherElements": ("INT32", "INT64"), "GatherND": ("INT64",)}


def register_jax2onnx() -> None:
    """Registers this library's ops with jax2onnx, so ``jax2onnx.to_onnx`` converts programs
    that use them: each op becomes one ONNX node of its own type, with its attribute (see the
    module's docs for what each mode becomes). Idempotent; needs the ``export`` extra.

    Example:
      >>> import jax, jax.numpy as jnp, jax2onnx
      >>> import jax_gather
      >>> jax_gather.register_jax2onnx()
      >>> model = jax2onnx.to_onnx(
      ...     lambda data, ids: jax_gather.gather(data, ids, axis=1),
      ...     [jax.ShapeDtypeStruct((3, 5), jnp.float32), jax.ShapeDtypeStruct((2,), jnp.int32)])
      >>> [(node.op_type, node.attribute[0].name, node.attribute[0].i) for node in model.graph.node]
      [('Gather', 'axis', 1)]
    """
    try:
        import onnx_ir as ir
        from jax2onnx.plugins.plugin_system import (
            PLUGIN_REGISTRY,
            PrimitiveLeafPlugin,
            register_primitive,
        )
    except ImportError as error:
        raise ImportError(f"jax_gather.register_jax2onnx needs jax2onnx: {_EXTRA}") from error
    if ops.ONNX_FORM is None:  # pragma: no cover - jax2onnx itself needs a JAX that has it
        raise ImportError("jax_gather.register_jax2onnx needs a JAX release with jax.make_user_context")
    onnx_form_on = ops.ONNX_FORM
    if onnx_gather_p.name in PLUGIN_REGISTRY:
        return

    class OnnxGatherPlugin(PrimitiveLeafPlugin):
        _PRIM = onnx_gather_p

        @classmethod
        @contextlib.contextmanager
        def plugin_binding(cls) -> Iterator[None]:
            with onnx_form_on(True):
                yield

        def lower(self, ctx: Any, eqn: Any) -> None:
            op_name, attribute = eqn.params["op_name"], eqn.params["attribute"]
            data_var, indices_var = eqn.invars
            (out_var,) = eqn.outvars
            data = ctx.get_value_for_var(data_var, name_hint=ctx.fresh_name("data"))
            indices = ctx.get_value_for_var(indices_var, name_hint=ctx.fresh_name("indices"))
            if indices.dtype.name not in _INDEX_TYPES[op_name]:
                indices = _typed(
                    ctx.builder.Cast(
                        indices, to=int(ir.DataType.INT64), _outputs=[ctx.fresh_name("indices_int64")]
                    ),
                    ir.DataType.INT64,
                    indices_var.aval.shape,
                )
            out = getattr(ctx.builder, op_name)(
                data, indices, **{_ATTRIBUTE[op_name]: attribute}, _outputs=[ctx.fresh_name(op_name)]
            )
            ctx.bind_value_for_var(out_var, _typed(out, data.dtype, out_var.aval.shape))

    def _typed(value: Any, dtype: Any, shape: Any) -> Any:
        value.type = ir.TensorType(dtype)
        value.shape = ir.Shape([d if isinstance(d, int) else str(d) for d in shape])
        return value

    register_primitive(
        jaxpr_primitive=onnx_gather_p.name,
        onnx=[{"component": op} for op in _PLANS],
        context="primitives.jax_gather",
        component="onnx_gather",
    )(OnnxGatherPlugin)
