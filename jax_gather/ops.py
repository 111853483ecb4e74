"""The three ONNX gathers: validate, normalise, one ``lax.gather``."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_gather import _bounds, _eager, _lowering, _strings
from jax_gather._checks import check_mode, fail, static_int, under_a_trace
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
        raise fail(
            TypeError,
            op_name,
            f"data must have a boolean, numeric or string dtype, got {np.dtype(dtype).name}",
        )
    return data


def _as_indices(op_name: str, indices: Any) -> tuple[Any, Any]:
    """The indices for the gather, and a host copy when they are concrete (None when traced)."""
    if isinstance(indices, jax.core.Tracer):
        _bounds.check_index_dtype(op_name, indices.dtype)
        return indices, None
    if isinstance(indices, jax.Array):
        _bounds.check_index_dtype(op_name, indices.dtype)
        # Copied to the host only if a check needs it, and only if this process holds it all.
        return indices, indices if indices.is_fully_addressable else None
    host = _bounds.host_indices(op_name, indices)  # JAX takes no swapped bytes, nor the host tests
    return host, host


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


@functools.partial(jax.jit, static_argnames=("plan", "mode", "fill_bytes"), inline=True)
def _apply(
    data: jax.Array,
    indices: jax.Array,
    fill: Any,
    *,
    plan: GatherPlan,
    mode: str,
    fill_bytes: bytes | None = None,
) -> jax.Array:
    """The op as one jitted program: ``plan``'s gather of ``data`` at ``indices`` in ``mode``.

    Every argument is already validated (``_validated``): ``indices`` of an integer dtype and
    the plan's shape, ``mode`` one of the four public modes or "in_range" (indices proven in
    [0, s-1] on the host, gathered with no arithmetic). The fill is ``fill`` (traced), or
    ``fill_bytes`` (a concrete fill's bytes, static like jnp.take's), or None where the mode
    reads none. While jax2onnx converts (``ONNX_FORM``), the ONNX nodes the op stands for;
    otherwise the library's program (``_library_form``). ``inline``: inside a user's ``jit``
    it adds no call of its own.
    """
    if fill_bytes is not None:
        fill = np.frombuffer(fill_bytes, data.dtype).reshape(())
    if ONNX_FORM is not None and ONNX_FORM.value:
        from jax_gather import onnx_export

        return onnx_export.onnx_form(data, indices, fill, plan=plan, mode=mode)
    return _library_form(data, indices, fill, plan=plan, mode=mode)


def _library_form(data: jax.Array, indices: jax.Array, fill: Any, *, plan: GatherPlan, mode: str) -> Any:
    """The library's program for the op: the bounds mask and check the mode needs, then one
    gather (or the CPU lowering chosen for it)."""
    # Trace-time invariants between the plan and the operands (cheap: shapes only).
    batch_rank = len(plan.output_shape) - len(plan.dimension_numbers.offset_dims)
    chex.assert_rank(data, len(plan.slice_sizes))
    chex.assert_rank(indices, batch_rank + plan.tuple_indices)
    fills = mode in ("fill", "checked")
    # A promise is checked too, for jax_gather.checked; outside checkify the check and its mask
    # compile to nothing.
    checks = mode in ("checked", "promise_in_bounds")
    ok: Any = _bounds.in_bounds_mask(plan, indices) if fills or checks else None
    if checks:
        indices = _bounds.check_in_bounds(plan, indices, ok)
    if fills and plan.tuple_indices:
        ok = jnp.all(ok, axis=-1)  # a tuple is in bounds when every component is

    trivial = without_gather(data, indices, fill, plan, mode)
    if trivial is not None:
        return trivial

    if plan.data_block is not None:
        data = lax.slice(data, (0,) * data.ndim, plan.data_block)
    if fills:
        out = _lowering.gather_or_fill(data, indices, ok, fill, plan)
    else:
        out = _lowering.gather(data, indices, plan, clip=mode == "clip", in_range=mode == "in_range")
    chex.assert_shape(out, plan.output_shape)
    return out


# The library's program whatever the seam says (onnx_export evaluates its primitive with it).
library_program = jax.jit(_library_form, static_argnames=("plan", "mode"), inline=True)


def without_gather(data: Any, indices: Any, fill: Any, plan: GatherPlan, mode: str) -> jax.Array | None:
    """The result where no element is read (an empty output, or "fill" on an empty indexed
    axis), else None; raises where no index can be valid."""
    if 0 in plan.index_sizes and 0 not in indices.shape and mode != "fill":
        # Statically known: no index is valid on an empty axis, so even traced indices fail.
        axis = plan.dimension_numbers.start_index_map[plan.index_sizes.index(0)]
        raise fail(
            IndexError,
            plan.op_name,
            f"indices must be empty to index axis {axis} of size 0 (no index is valid), "
            f"got indices of shape {tuple(indices.shape)} in mode {mode!r}",
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
    mode: str,
    fill_value: Any,
) -> jax.Array | np.ndarray:
    """The body of the three public ops: ``plan_fn(data.shape, indices.shape, attribute)``'s
    gather of ``data`` at ``indices`` in ``mode``.

    An eager call whose signature (``_eager.signature``) was validated before goes straight to
    its remembered call, which tests the indices and runs one jitted program. Anything else
    (a first call, tracers, lists, strings, errors) takes ``_validated``. An eager call's
    IndexError inside an open trace (constants in a branch of ``lax.cond``) is not raised: the
    indices are then judged in the program, where the op runs.
    """
    key = _eager.signature(plan_fn, data, indices, attribute, mode, fill_value)
    call = _eager.lookup(key)
    if call is not None:  # this signature was checked before: straight to its program
        try:
            return call(data, indices)
        except IndexError:
            if not under_a_trace():
                raise
        # Constants in a trace (a branch of lax.cond may never run): judged in the program.
        return _validated(plan_fn, op_name, data, indices, attribute, mode, fill_value, None, True)
    return _validated(plan_fn, op_name, data, indices, attribute, mode, fill_value, key, False)


def _validated(
    plan_fn: Callable[..., GatherPlan],
    op_name: str,
    data: Any,
    indices: Any,
    attribute: Any,
    mode: str,
    fill_value: Any,
    key: tuple | None,
    staged: bool,
) -> jax.Array | np.ndarray:
    """``_run`` past the eager calls' cache: every argument validated, then the eager call
    (remembered under ``key``) or the jitted op. ``staged``: the indices are constants in a
    trace and out of bounds, to be judged by the checked check in the program."""
    given = (data, indices, mode)
    mode = check_mode(op_name, mode)
    data = _as_data(op_name, data)
    if _strings.is_string_dtype(data.dtype):
        return _gather_strings(plan_fn, op_name, data, indices, attribute, mode, fill_value)
    indices, concrete = _as_indices(op_name, indices)
    plan = plan_fn(data.shape, indices.shape, attribute)
    dtype = jax.dtypes.canonicalize_dtype(data.dtype)
    # Checked in every mode, so a bad fill_value is refused even where the mode ignores it.
    fill: Any = _bounds.fill_scalar(op_name, fill_value, dtype)
    if mode not in ("fill", "checked"):
        fill = None
    # A concrete fill is static, as jnp.take's is: no transfer on every call (which would also
    # trip jax.transfer_guard) and no eager dispatch to make it an array. Its bytes are the key,
    # so NaN fills (never equal to themselves) still hit the compilation cache.
    fill_bytes = None
    if isinstance(fill, np.ndarray):
        fill, fill_bytes = None, fill.tobytes()
    if concrete is not None and fill is None and not staged and not isinstance(data, jax.core.Tracer):
        if isinstance(data, jax.Array):
            _eager.ARRAY_TYPES.add(type(data))
        if isinstance(indices, jax.Array):
            _eager.ARRAY_TYPES.add(type(indices))
        if key is None:  # the first call with JAX's array type: its signature is known now
            key = _eager.signature(plan_fn, given[0], given[1], attribute, given[2], fill_value)
        # The checked mode's programs never fill: concrete indices are proven in bounds first.
        programs = _programs(plan, fill_bytes if mode == "fill" else None)
        call = _eager.make_call(plan, mode, programs, indices)
        if key is not None:
            _eager.remember(key, call)
        try:
            return call(data, indices)
        except IndexError:
            if not under_a_trace():
                raise
    if mode == "checked" and concrete is not None:  # concrete indices in a trace
        host = np.asarray(concrete)
        if _bounds.in_range_on_host(plan, host):
            mode = "in_range"  # proven in [0, s-1]: gathered as they are
            fill, fill_bytes = None, None
        elif _bounds.judge_on_host(plan, host) != _bounds.OUT_OF_BOUNDS:
            mode = "promise_in_bounds"  # proven in bounds: normalised, and nothing to fill
            fill, fill_bytes = None, None
        # Else judged where the op runs, as traced indices are: the checked check in the
        # program (a branch never taken raises nothing; under jax_gather.checked one taken
        # raises the eager error) and the "fill" result without checkify.
    if isinstance(indices, np.ndarray):
        indices = _bounds.narrow_host_indices(indices)
    return _apply(data, indices, fill, plan=plan, mode=mode, fill_bytes=fill_bytes)


@functools.lru_cache(maxsize=256)
def _programs(plan: GatherPlan, fill_bytes: bytes | None) -> Callable[[str], Any]:
    """The jitted op for each mode of an eager call with this plan and fill (``fill_bytes``,
    read in "fill" only): everything static bound in, so JAX dispatches it on its C++ path."""

    @functools.cache
    def program(mode: str) -> Any:
        fill = fill_bytes if mode == "fill" else None
        return jax.jit(functools.partial(_apply, fill=None, plan=plan, mode=mode, fill_bytes=fill))

    return program


def _gather_strings(
    plan_fn: Callable[..., GatherPlan],
    op_name: str,
    data: np.ndarray,
    indices: Any,
    attribute: Any,
    mode: str,
    fill_value: Any,
) -> np.ndarray:
    """String data, which JAX has no dtype for: the numeric op gathers the positions of an
    integer iota of data's shape, with the same indices, attribute and mode, so every rule and
    error is the numeric one; NumPy then takes the strings there."""
    _strings.check_concrete(op_name, indices=indices, fill_value=fill_value)
    # Like numeric data, fill_value is only read (and checked) where a position may be filled.
    fill = _strings.fill_string(op_name, fill_value if mode in ("fill", "checked") else None, data.dtype)
    iota = _strings.positions(data)
    with x64_enabled_if(iota.dtype == np.int64):
        taken = _run(plan_fn, op_name, iota, indices, attribute, mode, _strings.NO_POSITION)
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
    b = static_int("Gather", "batch_dims", batch_dims)
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
