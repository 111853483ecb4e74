"""String tensors (ONNX ``tensor(string)``), gathered on the host.

JAX has no string dtype. The op itself gathers the *positions*: it runs on an integer iota of
data's shape, so negative indices, smaller GatherElements indices, batch_dims, modes and every
error are exactly those of numeric data. NumPy then takes the strings at those positions. This
needs concrete indices, so it works eagerly only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from jax_gather._checks import fail
from jax_gather._x64 import x64_enabled_if

_FILL = -1  # the position a "fill" mode gives out-of-bounds indices; never a real position


def holds_strings(data: np.ndarray) -> bool:
    """Whether a host array holds strings: str or bytes dtypes, or objects that all are."""
    kind = data.dtype.kind
    if kind in "US":
        return True
    return kind == "O" and all(isinstance(v, (str, bytes)) for v in data.flat)


def is_string_dtype(dtype: Any) -> bool:
    return np.dtype(dtype).kind in "USO"


def gather_strings(
    op_name: str,
    data: np.ndarray,
    indices: Any,
    mode: str,
    fill_value: Any,
    gather_positions: Callable[[np.ndarray, int], jax.Array],
) -> np.ndarray:
    """The op on string ``data``, via ``gather_positions(iota, fill)``: the numeric op with the
    same indices, attribute and mode. Returns a NumPy array of ``data``'s dtype."""
    for name, value in (("indices", indices), ("fill_value", fill_value)):
        if isinstance(value, jax.core.Tracer):
            raise fail(
                TypeError,
                op_name,
                f"{name} must be concrete when data holds strings (JAX has no string dtype, so "
                f"strings are gathered on the host: call {op_name} eagerly, outside jit, vmap "
                f"and grad), got a traced {value.dtype}{list(value.shape)}",
            )
    # Like numeric data, fill_value is only read (and checked) where a position may be filled.
    fill = _fill(op_name, fill_value if mode in ("fill", "checked") else None, data.dtype)
    wide = data.size > np.iinfo(np.int32).max
    iota = np.arange(data.size, dtype=np.int64 if wide else np.int32).reshape(data.shape)
    with x64_enabled_if(wide):
        positions = np.asarray(gather_positions(iota, _FILL))
    out = np.full(positions.shape, fill, data.dtype)
    taken = positions != _FILL
    out[taken] = data.reshape(-1)[positions[taken]]
    return out


def _fill(op_name: str, fill_value: Any, dtype: np.dtype) -> Any:
    """The fill string: by default empty, of the data's kind (b"" for bytes data)."""
    if fill_value is None:
        return b"" if dtype.kind == "S" else ""
    kinds = {"U": (str,), "S": (bytes,), "O": (str, bytes)}[dtype.kind]
    if not isinstance(fill_value, kinds):
        wanted = " or ".join(k.__name__ for k in kinds)
        raise fail(
            TypeError,
            op_name,
            f"fill_value must be a {wanted} for data of dtype {dtype}, "
            f"got {type(fill_value).__name__} {fill_value!r}",
        )
    if dtype.kind != "O" and np.asarray(fill_value, dtype).item() != fill_value:
        raise fail(
            ValueError,
            op_name,
            f"fill_value {fill_value!r} cannot be represented in the data dtype {dtype} (too long)",
        )
    return fill_value
