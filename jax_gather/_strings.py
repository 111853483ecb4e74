"""String tensors (ONNX ``tensor(string)``), gathered on the host.

JAX has no string dtype. The op itself gathers the *positions*: it runs on an integer iota of
data's shape, so negative indices, smaller GatherElements indices, batch_dims, modes and every
error are exactly those of numeric data. NumPy then takes the strings at those positions. This
needs concrete indices, so it works eagerly only.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from jax_gather._arguments import fail

NO_POSITION = -1  # what the "fill" mode gives out-of-bounds indices: never a real position


def holds_strings(data: np.ndarray) -> bool:
    """Whether a host array holds strings: str, bytes or NumPy 2's StringDType (kind "T"), or
    objects that all are."""
    kind = data.dtype.kind
    if kind in "UST":
        return True
    return kind == "O" and all(isinstance(v, (str, bytes)) for v in data.flat)


def is_string_dtype(dtype: Any) -> bool:
    return np.dtype(dtype).kind in "USOT"


def check_concrete(op_name: str, **values: Any) -> None:
    """Refuses traced arguments: strings are gathered on the host, from concrete positions."""
    for name, value in values.items():
        if isinstance(value, jax.core.Tracer):
            raise fail(
                TypeError,
                op_name,
                f"{name} must be concrete when data holds strings (JAX has no string dtype, so "
                f"strings are gathered on the host: call {op_name} eagerly, outside jit, vmap "
                f"and grad), got a traced {value.dtype}{list(value.shape)}",
            )


def check_eager(op_name: str, taken: Any) -> None:
    """Refuses a call inside a trace (jit, vmap, grad): the positions came back traced even
    from concrete indices, and NumPy cannot take strings at traced positions."""
    if isinstance(taken, jax.core.Tracer):
        raise fail(
            TypeError,
            op_name,
            f"data holding strings must be gathered eagerly (JAX has no string dtype, so strings "
            f"are gathered on the host: call {op_name} outside jit, vmap and grad), got a call "
            f"inside a trace",
        )


def positions(data: np.ndarray) -> np.ndarray:
    """The flat position of each element of ``data``, in data's shape (int64 past int32)."""
    wide = data.size > np.iinfo(np.int32).max
    return np.arange(data.size, dtype=np.int64 if wide else np.int32).reshape(data.shape)


def take(data: np.ndarray, taken: np.ndarray, fill: Any) -> np.ndarray:
    """The strings of ``data`` at the flat positions ``taken`` (``fill`` at ``NO_POSITION``)."""
    out = np.full(taken.shape, fill, data.dtype)
    read = taken != NO_POSITION
    out[read] = data.reshape(-1)[taken[read]]
    return out


def fill_string(op_name: str, fill_value: Any, dtype: np.dtype) -> Any:
    """The fill string: by default empty, of the data's kind (b"" for bytes data)."""
    if fill_value is None:
        return b"" if dtype.kind == "S" else ""
    kinds = {"U": (str,), "T": (str,), "S": (bytes,), "O": (str, bytes)}[dtype.kind]
    if not isinstance(fill_value, kinds):
        wanted = " or ".join(k.__name__ for k in kinds)
        raise fail(
            TypeError,
            op_name,
            f"fill_value must be a {wanted} for data of dtype {dtype}, "
            f"got {type(fill_value).__name__} {fill_value!r}",
        )
    if dtype.kind in "US" and np.asarray(fill_value, dtype).item() != fill_value:
        raise fail(
            ValueError,
            op_name,
            f"fill_value {fill_value!r} cannot be represented in the data dtype {dtype} (too long)",
        )
    return fill_value
