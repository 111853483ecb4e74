"""The three ONNX gathers: validate, normalise, one ``lax.gather``."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_gather import _cpu, _eager, _keys, _lowering, _strings
from jax_gather._arguments import (
    Mode,
    backend_holds,
    check_mode,
    check_placement,
    fail,
    static_int,
    under_a_trace,
)
from jax_gather._fill import fill_scalar
from jax_gather._host_bounds import Verdict, check_index_dtype, host_indices, judge, narrow_host_indices
from jax_gather._traced_bounds import check_in_bounds, in_bounds_mask
from jax_gather._x64 import x64_enabled_if
from jax_gather.plans import GatherPlan, gather_elements_plan, gather_nd_plan, gather_plan


@functools.lru_cache(maxsize=64)
def _is_boolean_or_numeric(dtype: np.dtype) -> bool:
    return dtype == np.bool_ or jnp.issubdtype(dtype, jnp.number)


def _as_data(op_name: str, data: Any) -> Any:
    if not isinstance(data, jax.Array):  # jax.Array covers tracers too
        data = np.asarray(data)
        if _strings.holds_strings(data):
            return data
        if not data.dtype.isnative:  # JAX reads swapped bytes as native ones: a copy in order
            data = data.astype(data.dtype.newbyteorder("="))
    dtype = data.dtype
    if not _is_boolean_or_numeric(dtype):
        rule = f"data must have a boolean, numeric or string dtype, got {np.dtype(dtype).name}"
        raise fail(TypeError, op_name, rule)
    placed = isinstance(data, jax.Array) and not isinstance(data, jax.core.Tracer)
    if not placed and not backend_holds(np.dtype(dtype)):
        name = np.dtype(dtype).name
        raise fail(TypeError, op_name, f"data's dtype {name} has no type in XLA for JAX's default backend")
    return data


def _as_indices(op_name: str, indices: Any) -> tuple[Any, Any]:
    """The indices for the gather, and a host copy when they are concrete (None when traced): a
    tracer of a constant of the trace counts as concrete (``jnp.asarray`` of NumPy under ``jit``,
    whose zeros XLA would compute as it compiles, folding a pin made of them)."""
    if isinstance(indices, jax.core.Tracer):
        check_index_dtype(op_name, indices.dtype)
        return indices, _constant_of_the_trace(indices)
    if isinstance(indices, jax.Array):
        check_index_dtype(op_name, indices.dtype)
        # Copied to the host only if a check needs it, and only if this process holds it all.
        return indices, indices if indices.is_fully_addressable else None
    host = host_indices(op_name, indices)  # JAX takes no swapped bytes, nor the host tests
    return host, host


def _constant_of_the_trace(tracer: Any) -> Any:
    """The value of a tracer that stands for a constant of the trace (JAX 0.7 and later make
    ``jnp.asarray`` of a NumPy array under ``jit`` one), as NumPy, else None. Not one computed
    from constants (``jnp.arange``, arithmetic), which JAX traces as any value."""
    get_const = getattr(tracer, "get_const", None)
    value = get_const() if callable(get_const) else None
    return None if value is None else np.asarray(value)


# The one seam between the ops and an export to ONNX: True while jax2onnx converts
# (jax_gather.onnx_export enters it), when the ops trace to the ONNX nodes they implement
# instead of the library's program. A user context is part of every key of JAX's trace,
# lowering and compilation caches, so the two forms never share a cached program and nothing
# needs clearing: a function jitted before an export is not traced again after it.
def _user_context() -> Any:
    if hasattr(jax, "make_user_context"):
        return jax.make_user_context(False)
    try:  # pragma: no cover - a JAX release before make_user_context: a flag JAX keys on alike
        from jax._src import config

        return config.bool_state(
            "jax_gather_onnx_form",
            False,
            "jax_gather's ops trace to ONNX nodes (set by jax_gather.register_jax2onnx's plugin)",
            include_in_jit_key=True,
            include_in_trace_context=True,
        )
    except (ImportError, AttributeError, TypeError):  # pragma: no cover
        return None


ONNX_FORM = _user_context()


@functools.partial(jax.jit, static_argnames=("plan", "mode", "fill_bytes", "constant_indices"), inline=True)
def op_program(
    data: jax.Array,
    indices: jax.Array,
    fill: Any,
    *,
    plan: GatherPlan,
    mode: Mode,
    fill_bytes: bytes | None = None,
    constant_indices: bool = False,
) -> jax.Array:
    """The op as one jitted program: ``plan``'s gather of ``data`` at ``indices`` in ``mode``.

    Every argument is already validated: ``indices`` of an integer dtype and the plan's shape,
    ``mode`` a :class:`Mode` (``Mode.IN_RANGE`` for indices proven in [0, s-1], gathered with
    no arithmetic). The fill is ``fill`` (traced), or ``fill_bytes`` (a concrete fill's bytes,
    static like jnp.take's), or None where the mode reads none. ``constant_indices``: the indices
    are constants of the trace around (a pinned fill then reads data). While jax2onnx converts
    (``ONNX_FORM``), the ONNX nodes the op stands for; otherwise the library's program
    (:func:`library_program`). ``inline``: inside a user's ``jit`` it adds no call of its own.
    The backend's program calls it for each gather node, with the mode its host test chose.
    """
    if fill_bytes is not None:
        fill = np.frombuffer(fill_bytes, data.dtype).reshape(())
    if ONNX_FORM is not None and ONNX_FORM.value:
        from jax_gather import onnx_export

        return onnx_export.onnx_form(data, indices, fill, plan=plan, mode=mode)
    return _library_form(data, indices, fill, plan=plan, mode=mode, constant_indices=constant_indices)


def _library_form(
    data: jax.Array,
    indices: jax.Array,
    fill: Any,
    *,
    plan: GatherPlan,
    mode: Mode,
    constant_indices: bool = False,
) -> Any:
    """The library's program for the op: the bounds mask and check the mode needs, then one
    gather (or the CPU lowering chosen for it)."""
    # Trace-time invariants between the plan and the operands (cheap: shapes only).
    batch_rank = len(plan.output_shape) - len(plan.dimension_numbers.offset_dims)
    chex.assert_rank(data, len(plan.slice_sizes))
    chex.assert_rank(indices, batch_rank + plan.tuple_indices)
    # A promise is checked too, for jax_gather.checked; outside checkify the check and its mask
    # compile to nothing.
    checks = mode in (Mode.CHECKED, Mode.PROMISE_IN_BOUNDS)
    ok: Any = in_bounds_mask(plan, indices) if mode.fills or checks else None
    if checks:
        indices = check_in_bounds(plan, indices, ok)
    if mode.fills:
        low, zeroed = _cpu.gather_lowering(plan, data.shape, data.dtype, indices, mode)
        if constant_indices:
            low = dataclasses.replace(low, pins_from_data=True)
        if plan.tuple_indices:
            ok = _lowering.tuple_flags(ok, low)  # a tuple is in bounds when every component is

    trivial = without_gather(data, indices, fill, plan, mode)
    if trivial is not None:
        return trivial

    if plan.data_block is not None:
        data = lax.slice(data, (0,) * data.ndim, plan.data_block)
    if mode.fills:
        out = _lowering.gather_or_fill(data, indices, ok, fill, plan, low, zeroed=zeroed)
    else:
        clip, in_range = mode is Mode.CLIP, mode is Mode.IN_RANGE
        low, unclamped = _cpu.gather_lowering(plan, data.shape, data.dtype, indices, mode)
        out = _lowering.gather(data, indices, plan, low, clip=clip, unclamped=unclamped, in_range=in_range)
    chex.assert_shape(out, plan.output_shape)
    return out


# The library's program whatever the seam says (onnx_export evaluates its primitive with it).
library_program = jax.jit(_library_form, static_argnames=("plan", "mode", "constant_indices"), inline=True)


def without_gather(data: Any, indices: Any, fill: Any, plan: GatherPlan, mode: Mode) -> jax.Array | None:
    """The result where no element is read (an empty output, or "fill" on an empty indexed
    axis), else None; raises where no index can be valid."""
    if 0 in plan.index_sizes and 0 not in indices.shape and mode is not Mode.FILL:
        # Statically known: no index is valid on an empty axis, so even traced indices fail.
        axis = plan.dimension_numbers.start_index_map[plan.index_sizes.index(0)]
        raise fail(
            IndexError,
            plan.op_name,
            f"indices must be empty to index axis {axis} of size 0 (no index is valid), "
            f"got indices of shape {tuple(indices.shape)} in mode {mode.value!r}",
        )
    if 0 in plan.output_shape:
        return jnp.zeros(plan.output_shape, data.dtype)
    if 0 in plan.index_sizes:
        return jnp.broadcast_to(fill, plan.output_shape)
    return None


def _run(
    plan_fn: Callable[..., GatherPlan],
    op_name: str,
    data: Any,
    indices: Any,
    attribute: Any,
    mode: Any,
    fill_value: Any,
) -> jax.Array | np.ndarray:
    """The body of the three public ops: ``plan_fn(data.shape, indices.shape, attribute)``'s
    gather of ``data`` at ``indices`` in ``mode``.

    An eager call whose signature (``_eager.signature``) was validated before goes straight to
    its remembered call, which tests the indices and runs one jitted program. Anything else (a
    first call, tracers, lists, errors) is validated: string data goes to ``_gather_strings``,
    the rest (``_validated``) takes one of two paths: an eager call (concrete data and indices,
    a static fill) is made, remembered and run (``_eager_call``); anything else becomes the op in
    the trace around it (``_traced``). An
    eager call's IndexError inside an open trace (constants in a branch of ``lax.cond``) is not
    raised: the indices are then judged in the program, where the op runs.
    """
    key = _eager.signature(plan_fn, data, indices, attribute, mode, fill_value)
    call = _eager.lookup(key)
    if call is not None:  # this signature was checked before: straight to its program
        try:
            return call(data, indices)
        except IndexError:
            if not under_a_trace():
                raise
        except ValueError:  # JAX's (arrays on different devices): worded by the full checks
            pass
        # Constants in a trace (a branch of lax.cond may never run): judged in the program.
        mode = check_mode(op_name, mode)
        return _traced(
            _validated(plan_fn, op_name, _as_data(op_name, data), indices, attribute, mode, fill_value)
        )
    checked_mode = check_mode(op_name, mode)
    if _keys.is_key_array(data):  # gathered a word of the keys at a time, by this function
        return _keys.gather_keys(_run, plan_fn, op_name, data, indices, attribute, mode, fill_value)
    given_data, data = data, _as_data(op_name, data)
    if _strings.is_string_dtype(data.dtype):
        return _gather_strings(plan_fn, op_name, data, indices, attribute, checked_mode, fill_value)
    op = _validated(plan_fn, op_name, data, indices, attribute, checked_mode, fill_value)
    if op.eager:
        if key is None:  # the first call with JAX's array type: its signature is known once registered
            _eager.register(op.data, op.indices)
            key = _eager.signature(plan_fn, given_data, indices, attribute, mode, fill_value)
        try:
            return _eager_call(op, key)
        except IndexError:
            if not under_a_trace():
                raise
    return _traced(op)


class _Validated(NamedTuple):
    """One call's arguments, validated: what both paths take."""

    plan: GatherPlan
    data: Any  # a jax.Array, a tracer, or NumPy in native byte order
    indices: Any  # the same kinds, of an integer dtype
    concrete: Any  # the indices where they are concrete and this process holds them, else None
    mode: Mode
    fill: Any  # a traced fill, or None
    fill_bytes: bytes | None  # a concrete fill's bytes (static in the program), or None

    @property
    def eager(self) -> bool:
        """Whether the call is eager: data and indices concrete, and the fill (if any) static."""
        traced = isinstance(self.data, jax.core.Tracer) or isinstance(self.indices, jax.core.Tracer)
        return self.concrete is not None and self.fill is None and not traced


def _validated(
    plan_fn: Callable[..., GatherPlan],
    op_name: str,
    data: Any,
    indices: Any,
    attribute: Any,
    mode: Mode,
    fill_value: Any,
) -> _Validated:
    """The indices, the plan and the fill checked (data and mode already are)."""
    indices, concrete = _as_indices(op_name, indices)
    check_placement(op_name, data, indices)
    plan = plan_fn(data.shape, indices.shape, attribute)
    dtype = jax.dtypes.canonicalize_dtype(data.dtype)
    # Checked in every mode, so a bad fill_value is refused even where the mode ignores it.
    fill: Any = fill_scalar(op_name, fill_value, dtype)
    if not mode.fills:
        fill = None
    # A concrete fill is static, as jnp.take's is: no transfer on every call (which would also
    # trip jax.transfer_guard) and no eager dispatch to make it an array. Its bytes are the key,
    # so NaN fills (never equal to themselves) still hit the compilation cache.
    fill_bytes = None
    if isinstance(fill, np.ndarray):
        fill, fill_bytes = None, fill.tobytes()
    return _Validated(plan, data, indices, concrete, mode, fill, fill_bytes)


def _eager_call(op: _Validated, key: tuple | None) -> jax.Array:
    """An eager call: its call made (``_eager.make_call``), remembered under ``key``, and run."""
    # The checked mode's fill (the default) is never read: out of bounds, the call raises.
    programs = _programs(op.plan, op.fill_bytes if op.mode.fills else None)
    call = _eager.make_call(op.plan, op.mode, programs, op.data, op.indices)
    if key is not None:
        _eager.remember(key, call)
    return call(op.data, op.indices)


def _traced(op: _Validated) -> jax.Array:
    """The op in a trace: ``op_program`` on traced arguments, or on constants inside a trace.
    Concrete indices in the checked and "fill" modes are judged on the host where they are in
    bounds (gathered as they are, or normalised: nothing to fill, so no select); out of bounds
    they are judged where the op runs, as traced indices are: the checked check in the program
    (a branch never taken raises nothing; under jax_gather.checked one taken raises the eager
    error), the "fill" result without checkify, its pin made of data (``constant_indices``)."""
    mode, fill, fill_bytes = op.mode, op.fill, op.fill_bytes
    if mode in (Mode.CHECKED, Mode.FILL) and op.concrete is not None:
        verdict = judge(op.plan, np.asarray(op.concrete))
        if verdict is not Verdict.OUT_OF_BOUNDS:  # nothing to fill
            mode = Mode.IN_RANGE if verdict is Verdict.IN_RANGE else Mode.PROMISE_IN_BOUNDS
            fill, fill_bytes = None, None
    indices = op.indices
    if isinstance(indices, np.ndarray):
        indices = narrow_host_indices(indices)
    constant = op.concrete is not None and mode.fills
    return op_program(
        op.data, indices, fill, plan=op.plan, mode=mode, fill_bytes=fill_bytes, constant_indices=constant
    )


@functools.lru_cache(maxsize=256)
def _programs(plan: GatherPlan, fill_bytes: bytes | None) -> Callable[[Mode], Any]:
    """The jitted op for each mode of an eager call with this plan and fill (``fill_bytes``,
    read in "fill" only): everything static bound in, so JAX dispatches it on its C++ path."""

    @functools.cache
    def program(mode: Mode) -> Any:
        fill = fill_bytes if mode is Mode.FILL else None
        return jax.jit(functools.partial(op_program, fill=None, plan=plan, mode=mode, fill_bytes=fill))

    return program


def _gather_strings(
    plan_fn: Callable[..., GatherPlan],
    op_name: str,
    data: np.ndarray,
    indices: Any,
    attribute: Any,
    mode: Mode,
    fill_value: Any,
) -> np.ndarray:
    """String data, which JAX has no dtype for: the numeric op gathers the positions of an
    integer iota of data's shape, with the same indices, attribute and mode, so every rule and
    error is the numeric one; NumPy then takes the strings there."""
    _strings.check_concrete(op_name, indices=indices, fill_value=fill_value)
    # Like numeric data, fill_value is only read (and checked) where a position may be filled.
    fill = _strings.fill_string(op_name, fill_value if mode.fills else None, data.dtype)
    iota = _strings.positions(data)
    with x64_enabled_if(iota.dtype == np.int64):
        taken = _run(plan_fn, op_name, iota, indices, attribute, mode.value, _strings.NO_POSITION)
    _strings.check_eager(op_name, taken)
    taken = np.asarray(taken)
    return _strings.take(data, taken, fill)


@functools.cache
def _batched_gather_plan(batch_dims: int) -> Callable[..., GatherPlan]:
    """``gather_plan`` with these batch dims: one function per count, so that eager calls
    remember their signatures."""
    return functools.partial(gather_plan, batch_dims=batch_dims)


def gather(
    data: Any,
    indices: Any,
    axis: int = 0,
    *,
    batch_dims: int = 0,
    mode: str = "checked",
    fill_value: Any = None,
) -> jax.Array | np.ndarray:
    """ONNX Gather (opsets 1, 11, 13), OpenVINO Gather-7/8 and ``tf.gather``: take slices of
    ``data`` along ``axis``.

    ``output[a..., i..., b...] = data[a..., indices[i...], b...]``, of shape
    ``data.shape[:axis] + indices.shape + data.shape[axis + 1:]``; indices may have any rank,
    including 0, and negative indices in [-s, -1] count from the end of the axis. With
    ``batch_dims=b`` the first ``b`` dims of data and indices are shared batch dims (equal
    sizes): each example gathers from its own slice of data, and the output's shape is
    ``data.shape[:axis] + indices.shape[b:] + data.shape[axis + 1:]``.

    String data (a NumPy ``str``, ``bytes`` or ``object`` array of strings; ONNX's
    ``tensor(string)``) is gathered on the host, as JAX has no string dtype: the op gathers the
    positions of an integer iota of data's shape, with the same indices, attribute and mode,
    then NumPy takes the strings there. Every rule and error is the numeric one; it needs
    concrete indices, so call it eagerly (traced indices raise TypeError).

    Args:
      data: array-like of rank >= 1, any boolean or numeric dtype, or strings.
      indices: integer array-like of any rank.
      axis: static int in [-r, r-1].
      batch_dims: static int in [-min(r, q), min(r, q)], counted from indices' rank q when
        negative, and at most ``axis`` once normalised; 0 is ONNX Gather.
      mode: what out-of-bounds indices do: "checked" (default: IndexError in an eager call;
        inside a trace, constants included, a checkify check and the "fill" result), "clip",
        "fill" or "promise_in_bounds".
      fill_value: the value of out-of-bounds positions in "fill" (and traced "checked") mode;
        default NaN for inexact dtypes, the minimum for signed, the maximum for unsigned, True,
        and the empty string for strings (``b""`` for a bytes array). A concrete value is
        compiled into the program, as ``jnp.take``'s is (each distinct value compiles once); a
        traced one, under ``jit``, is an argument of the program.

    Returns:
      An array of ``data``'s dtype: a ``jax.Array``, or a NumPy array for string data.

    Example:
      >>> import jax_gather
      >>> data = [[1.0, 1.2, 1.9], [2.3, 3.4, 3.9], [4.5, 5.7, 5.9]]
      >>> jax_gather.gather(data, [[0, 2]], axis=1)
      Array([[[1. , 1.9]],
      <BLANKLINE>
             [[2.3, 3.9]],
      <BLANKLINE>
             [[4.5, 5.9]]], dtype=float32)
      >>> jax_gather.gather(["ab", "cd", "ef"], [2, -3])
      array(['ef', 'ab'], dtype='<U2')
      >>> jax_gather.gather(data, [[2], [0], [1]], axis=1, batch_dims=1)  # a column per row
      Array([[1.9],
             [2.3],
             [5.7]], dtype=float32)
    """
    b = batch_dims if type(batch_dims) is int else static_int("Gather", "batch_dims", batch_dims)
    plan_fn = gather_plan if b == 0 else _batched_gather_plan(b)
    return _run(plan_fn, "Gather", data, indices, axis, mode, fill_value)


def gather_elements(
    data: Any, indices: Any, axis: int = 0, *, mode: str = "checked", fill_value: Any = None
) -> jax.Array | np.ndarray:
    """ONNX GatherElements (opsets 11, 13) and OpenVINO GatherElements-6.

    ``output[i] = data[i with i[axis] replaced by indices[i]]``; the output has the shape of
    ``indices``, which has data's rank. A non-axis dim of indices may be smaller than data's
    (the leading block of data is read, as in onnxruntime and ``torch.gather``; never broadcast),
    and the axis dim may have any size.

    Args:
      data: array-like of rank >= 1, any boolean or numeric dtype, or strings (as in
        :func:`gather`).
      indices: integer array-like of the same rank as data.
      axis: static int in [-r, r-1].
      mode: out-of-bounds policy, as in :func:`gather`.
      fill_value: as in :func:`gather`.

    Returns:
      An array of ``data``'s dtype and ``indices``' shape (NumPy for string data).

    Example:
      >>> import jax_gather
      >>> jax_gather.gather_elements([[1, 2], [3, 4]], [[0, 0], [1, 0]], axis=1)
      Array([[1, 1],
             [4, 3]], dtype=int32)
    """
    return _run(gather_elements_plan, "GatherElements", data, indices, axis, mode, fill_value)


def gather_nd(
    data: Any, indices: Any, batch_dims: int = 0, *, mode: str = "checked", fill_value: Any = None
) -> jax.Array | np.ndarray:
    """ONNX GatherND (opsets 11, 12, 13): gather slices addressed by index tuples.

    The last dim of ``indices`` (size k) holds index tuples into data dims
    ``batch_dims .. batch_dims + k - 1``; the first ``batch_dims`` dims of data and indices are
    batch dims and must be equal. Output shape ``indices.shape[:-1] + data.shape[batch_dims + k:]``.

    Args:
      data: array-like of rank r >= 1, any boolean or numeric dtype, or strings (as in
        :func:`gather`).
      indices: integer array-like of rank q >= 1 with ``1 <= indices.shape[-1] <= r - batch_dims``.
      batch_dims: static int in [0, min(q, r)).
      mode: out-of-bounds policy, as in :func:`gather`.
      fill_value: as in :func:`gather`.

    Returns:
      An array of ``data``'s dtype (NumPy for string data).

    Example:
      >>> import jax_gather
      >>> data = [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]
      >>> jax_gather.gather_nd(data, [[1], [0]], batch_dims=1)
      Array([[2, 3],
             [4, 5]], dtype=int32)
    """
    return _run(gather_nd_plan, "GatherND", data, indices, batch_dims, mode, fill_value)
