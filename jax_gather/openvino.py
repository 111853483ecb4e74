"""OpenVINO's gather family, each version with its own defaults, on top of the three ops.

| op | function | out-of-range indices by default |
|---|---|---|
| Gather-1, -7 | ``gather(..., version=1)``, ``7`` | "checked": IndexError; negative ones too |
| Gather-8 | ``gather(...)`` | zeros ("fill" with 0); negative ones count from the end |
| GatherND-5 | ``gather_nd(..., version=5)`` | "checked"; the output's batch dims folded |
| GatherND-8 | ``gather_nd(...)`` | "checked"; the batch dims kept (ONNX GatherND) |
| GatherElements-6 | ``gather_elements(...)`` | "checked" |

``mode`` and ``fill_value`` override the defaults as in the top-level ops (Gather-8's fill
value stays 0 in every mode). Errors name the versioned op ("Gather-8: ...").
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jax_gather import _strings, ops
from jax_gather._arguments import canonical_axis, check_mode, fail, named_for, static_int, under_a_trace
from jax_gather._host_bounds import narrow_host_indices
from jax_gather._index_check import check_indices
from jax_gather._traced_bounds import first_false

_GATHER_VERSIONS = (1, 7, 8)
_GATHER_ND_VERSIONS = (5, 8)


def _versioned(op_name: str, version: int, call: Callable[[], Any]) -> Any:
    """``call()``, its errors naming the versioned op ("Gather-8: ..." for "Gather: ...")."""
    try:
        return call()
    except (IndexError, TypeError, ValueError) as error:
        renamed = named_for(error, op_name, f"{op_name}-{version}")
        if renamed is None:
            raise
        raise renamed from None


def _strings_in(data: Any) -> bool:
    return not isinstance(data, jax.Array) and _strings.holds_strings(np.asarray(data))


def _check_version(op_name: str, version: Any, versions: tuple[int, ...]) -> int:
    """An integer attribute, as batch_dims and axis are (NumPy integers too), in ``versions``."""
    version = static_int(op_name, "version", version)
    if version not in versions:
        raise fail(ValueError, op_name, f"version must be one of {versions}, got {version!r}")
    return version


def _mode(mode: str | None) -> str:
    """The default "checked" for None only: any other value is the op's to accept or refuse."""
    return "checked" if mode is None else mode


def _in_range_only(name: str, indices: Any, size: Any, mode: str) -> Any:
    """Gather-1/7 take indices in [0, s-1] only: a negative one is out of range. In "checked"
    mode concrete indices are checked here, and traced ones (and, in a trace, out-of-range
    constants) carry a checkify check, both in these words; then a negative index becomes one
    the op treats as out of range (0 in "clip", the nearest end)."""
    traced = isinstance(indices, jax.core.Tracer)
    xp: Any = np if isinstance(indices, (np.ndarray, list, tuple, int)) else jnp
    indices = xp.asarray(indices)
    if not jnp.issubdtype(indices.dtype, jnp.signedinteger):
        return indices  # unsigned (never negative), or a dtype the op refuses in its own words
    rule = f"is out of range [0, {size - 1}]"
    if mode == "checked" and not traced:
        host = np.asarray(indices)
        bad = (host < 0) | (host >= size)
        if bad.any():
            position = np.unravel_index(int(np.argmax(bad)), host.shape)
            value = host[position]
            at = "indices" + (f"[{', '.join(map(str, position))}]" if host.ndim else "")
            why = f" ({name} takes no negative indices)" if value < 0 else ""
            if not under_a_trace():
                raise IndexError(f"{name}: {at} = {value} {rule}{why}")
            # Constants in a trace (a branch of lax.cond may never run): judged in the program.
            traced, xp = True, jnp
            indices = jnp.asarray(narrow_host_indices(host))  # saturated: still out
    if mode == "checked" and traced and indices.size:
        # The whole range, so that the first index out of it is reported here, in these words,
        # and never by the op's own check on the value a negative index is rewritten to below.
        ok = (indices >= 0) & (indices < size)
        pos, first = first_false(ok)
        value = jnp.max(jnp.where(first, indices, jnp.iinfo(indices.dtype).min))
        at = "indices" + ("[" + ", ".join(["{}"] * indices.ndim) + "]" if indices.ndim else "")
        message = f"{name}: {at} = {{}} {rule} ({name} takes no negative indices, nor any past the end)"
        indices = check_indices(indices, jnp.all(ok), message, *pos, value)
    if mode == "clip":
        return xp.maximum(indices, 0)
    if jnp.iinfo(indices.dtype).max < size:  # no room past the end: a dtype that has some
        indices = indices.astype(np.int64 if size > np.iinfo(np.int32).max else np.int32)
    return xp.where(indices < 0, np.iinfo(indices.dtype).max, indices)


def gather(
    data: Any,
    indices: Any,
    axis: int,
    batch_dims: int = 0,
    *,
    version: int = 8,
    mode: str | None = None,
    fill_value: Any = None,
) -> jax.Array | np.ndarray:
    """OpenVINO Gather-1, -7 and -8 (and ``tf.gather``, which is Gather-7).

    ``output[p, i, r] = data[p, indices[p[:b], i], r]``, of shape
    ``data.shape[:axis] + indices.shape[b:] + data.shape[axis + 1:]``, with ``b = batch_dims``
    (see :func:`jax_gather.gather`). Gather-8 counts negative indices from the end and gives
    zeros for out-of-range ones (its default mode is "fill", and its fill value 0 in every
    mode; the empty string for strings); Gather-1 and Gather-7 take indices in [0, s-1] only
    (a negative one is out of range in every mode) and default to "checked". Gather-1 has no
    batch dims.

    Example:
      >>> from jax_gather import openvino
      >>> data = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
      >>> openvino.gather(data, [[2, -1], [0, 7]], axis=1, batch_dims=1)  # Gather-8
      Array([[3., 3.],
             [4., 0.]], dtype=float32)
    """
    version = _check_version("Gather", version, _GATHER_VERSIONS)
    name = f"Gather-{version}"
    if version == 1 and batch_dims != 0:
        raise fail(ValueError, name, f"has no batch_dims (Gather-7 and -8 do), got batch_dims={batch_dims!r}")
    if mode is None:
        mode = "fill" if version == 8 else "checked"
    mode = check_mode(name, mode).value
    if version == 8 and fill_value is None and not _strings_in(data):
        fill_value = 0  # Gather-8's value for out-of-range indices, whatever fills them

    def call() -> Any:
        nonlocal indices
        rank = np.ndim(data)
        if version != 8 and rank:  # (rank-0 data: the op's rank error)
            size = np.shape(data)[canonical_axis("Gather", "axis", axis, rank)]
            indices = _in_range_only(name, indices, size, mode)
        return ops.gather(data, indices, axis, batch_dims=batch_dims, mode=mode, fill_value=fill_value)

    return _versioned("Gather", version, call)


def gather_nd(
    data: Any,
    indices: Any,
    batch_dims: int = 0,
    *,
    version: int = 8,
    mode: str | None = None,
    fill_value: Any = None,
) -> jax.Array | np.ndarray:
    """OpenVINO GatherND-5 and -8: :func:`jax_gather.gather_nd`, whose output GatherND-8 keeps;
    GatherND-5 folds the ``batch_dims`` leading dims of the output into one.

    Example:
      >>> from jax_gather import openvino
      >>> data = [[[1, 2], [3, 4]], [[5, 6], [7, 8]]]
      >>> openvino.gather_nd(data, [[[1], [0]], [[0], [1]]], batch_dims=2, version=5)
      Array([2, 3, 5, 8], dtype=int32)
    """
    version = _check_version("GatherND", version, _GATHER_ND_VERSIONS)
    out = _versioned(
        "GatherND",
        version,
        lambda: ops.gather_nd(data, indices, batch_dims, mode=_mode(mode), fill_value=fill_value),
    )
    b = static_int("GatherND", "batch_dims", batch_dims)
    if version == 5 and b > 1:
        out = out.reshape((math.prod(out.shape[:b]),) + tuple(out.shape[b:]))
    return out


def gather_elements(
    data: Any, indices: Any, axis: int, *, mode: str | None = None, fill_value: Any = None
) -> jax.Array | np.ndarray:
    """OpenVINO GatherElements-6: :func:`jax_gather.gather_elements`, with indices of data's
    shape except on ``axis`` (its spec and runtime take no smaller ones, which ONNX's do).

    Example:
      >>> from jax_gather import openvino
      >>> openvino.gather_elements([[1, 2], [3, 4]], [[1, 0], [-1, 0]], axis=1)
      Array([[2, 1],
             [4, 3]], dtype=int32)
    """
    data_shape, indices_shape = np.shape(data), np.shape(indices)
    if len(data_shape) == len(indices_shape) and data_shape:
        a = canonical_axis("GatherElements-6", "axis", axis, len(data_shape))
        for d, (n, m) in enumerate(zip(data_shape, indices_shape)):
            if d != a and n != m:
                raise fail(
                    ValueError,
                    "GatherElements-6",
                    f"indices dimension {d} (size {m}) must equal data dimension {d} (size {n}) "
                    f"except on axis {a}; got indices shape {indices_shape}, data shape {data_shape}",
                )
    return _versioned(
        "GatherElements",
        6,
        lambda: ops.gather_elements(data, indices, axis, mode=_mode(mode), fill_value=fill_value),
    )
