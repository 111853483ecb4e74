"""Independent NumPy references for the three ops, written from the ONNX text with plain loops.

They share nothing with the library: every output element is computed by walking the spec's
formula. ``mode`` follows the library's documented policy: "raise" (IndexError, as ONNX says),
"fill" (out-of-range positions get ``fill``) or "clip" (normalise, then clamp to [0, s-1]).
"""

from __future__ import annotations

import itertools

import numpy as np


def _resolve(i: int, size: int, mode: str) -> int | None:
    """The in-range position an index addresses, or None for a position to fill."""
    i = int(i)
    if mode == "clip":
        if i < 0:
            i += size
        return min(max(i, 0), size - 1)
    if -size <= i < size:
        return i + size if i < 0 else i
    if mode == "raise":
        raise IndexError(f"index {i} out of bounds for size {size}")
    return None


def gather(data, indices, axis=0, mode="raise", fill=None, batch_dims=0):
    """With ``batch_dims=b`` (OpenVINO Gather-7/8, tf.gather) the first b dims of data and
    indices are shared: output[p, i, r] = data[p, indices[p[:b], i], r]."""
    data, indices = np.asarray(data), np.asarray(indices)
    axis %= data.ndim
    q = indices.ndim
    b = batch_dims % q if batch_dims < 0 else batch_dims
    out_shape = data.shape[:axis] + indices.shape[b:] + data.shape[axis + 1 :]
    out = np.empty(out_shape, dtype=data.dtype)
    for pos in itertools.product(*map(range, out_shape)):
        outer, ind, inner = pos[:axis], pos[axis : axis + q - b], pos[axis + q - b :]
        k = _resolve(indices[outer[:b] + ind], data.shape[axis], mode)
        out[pos] = fill if k is None else data[outer + (k,) + inner]
    return out


def gather_elements(data, indices, axis=0, mode="raise", fill=None):
    data, indices = np.asarray(data), np.asarray(indices)
    axis %= data.ndim
    out = np.empty(indices.shape, dtype=data.dtype)
    for pos in itertools.product(*map(range, indices.shape)):
        k = _resolve(indices[pos], data.shape[axis], mode)
        src = pos[:axis] + (k,) + pos[axis + 1 :]
        out[pos] = fill if k is None else data[src]
    return out


def gather_nd(data, indices, batch_dims=0, mode="raise", fill=None):
    data, indices = np.asarray(data), np.asarray(indices)
    b, k = batch_dims, indices.shape[-1]
    out_shape = indices.shape[:-1] + data.shape[b + k :]
    out = np.empty(out_shape, dtype=data.dtype)
    q = indices.ndim
    for pos in itertools.product(*map(range, out_shape)):
        ind_pos, inner = pos[: q - 1], pos[q - 1 :]
        tup = indices[ind_pos]
        resolved = [_resolve(tup[c], data.shape[b + c], mode) for c in range(k)]
        if any(r is None for r in resolved):
            out[pos] = fill
        else:
            out[pos] = data[ind_pos[:b] + tuple(resolved) + inner]
    return out
