"""Hypothesis strategies: shapes, attributes and in-bounds (possibly negative) indices."""

from __future__ import annotations

import ml_dtypes
import numpy as np
from hypothesis import strategies as st

DATA_DTYPES = [
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
    np.float16, ml_dtypes.bfloat16, np.float32, np.float64, np.complex64, np.complex128,
]  # fmt: skip
# The data dtypes every onnxruntime CPU gather kernel accepts from NumPy.
ORT_DTYPES = [
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
    np.float16, np.float32, np.float64,
]  # fmt: skip
INDEX_DTYPES = [np.int32, np.int64, np.int8, np.int16, np.uint8, np.uint16, np.uint32, np.uint64]

dims = st.integers(min_value=0, max_value=4)
nonzero_dims = st.integers(min_value=1, max_value=4)


def make_data(shape, dtype, seed) -> np.ndarray:
    """Distinct-ish values of ``dtype``, so a wrong position shows up as a wrong value."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    base = rng.permutation(int(np.prod(shape))).reshape(shape) % 100
    if dtype.kind == "c":
        return (base + 1j * (base % 7)).astype(dtype)
    return base.astype(dtype)


def make_strings(shape, kind, seed) -> np.ndarray:
    """Distinct strings of varying length (some non-ASCII), as a str, bytes, object or (NumPy 2)
    StringDType array."""
    words = [f"w{v}" + "é" * (v % 3) for v in make_data(shape, np.int64, seed).ravel().tolist()]
    if kind == "stringdtype":
        return np.array(words, dtype=np.dtypes.StringDType()).reshape(shape)
    if kind == "bytes":
        return np.array([w.encode() for w in words], dtype="S").reshape(shape)
    if kind == "object":
        out = np.empty(len(words), object)
        out[:] = words
        return out.reshape(shape)
    return np.array(words, dtype=str).reshape(shape)


def make_indices(shape, sizes, dtype, seed, negative=True) -> np.ndarray:
    """In-bounds indices in [-s, s-1] (or [0, s-1]); ``sizes`` broadcast against ``shape``."""
    rng = np.random.default_rng(seed + 1)
    sizes = np.broadcast_to(np.asarray(sizes), shape)
    low = -sizes if negative and np.dtype(dtype).kind == "i" else np.zeros_like(sizes)
    u = rng.random(shape)
    values = np.floor(low + u * (sizes - low)).astype(np.int64)
    values = np.minimum(values, sizes - 1)
    return np.asarray(values.astype(dtype))


@st.composite
def gather_cases(draw, index_dtypes=(np.int32, np.int64)):
    r = draw(st.integers(1, 4))
    data_shape = tuple(draw(dims) if draw(st.booleans()) else draw(nonzero_dims) for _ in range(r))
    axis = draw(st.integers(-r, r - 1))
    if data_shape[axis] == 0:
        data_shape = data_shape[: axis % r] + (draw(nonzero_dims),) + data_shape[axis % r + 1 :]
    q = draw(st.integers(0, 3))
    indices_shape = tuple(draw(dims) for _ in range(q))
    seed = draw(st.integers(0, 2**16))
    dtype = draw(st.sampled_from(index_dtypes))
    return data_shape, indices_shape, axis, seed, dtype


@st.composite
def gather_elements_cases(draw, index_dtypes=(np.int32, np.int64)):
    r = draw(st.integers(1, 4))
    data_shape = tuple(draw(nonzero_dims) for _ in range(r))
    axis = draw(st.integers(-r, r - 1))
    a = axis % r
    indices_shape = tuple(draw(dims) if d == a else draw(st.integers(0, data_shape[d])) for d in range(r))
    seed = draw(st.integers(0, 2**16))
    dtype = draw(st.sampled_from(index_dtypes))
    return data_shape, indices_shape, axis, seed, dtype


@st.composite
def gather_nd_cases(draw, index_dtypes=(np.int32, np.int64)):
    r = draw(st.integers(1, 4))
    q = draw(st.integers(1, 4))
    b = draw(st.integers(0, min(q, r) - 1))
    k = draw(st.integers(1, r - b))
    batch = tuple(draw(dims) for _ in range(b))
    data_shape = (
        batch + tuple(draw(nonzero_dims) for _ in range(k)) + tuple(draw(dims) for _ in range(r - b - k))
    )
    indices_shape = batch + tuple(draw(dims) for _ in range(q - b - 1)) + (k,)
    seed = draw(st.integers(0, 2**16))
    dtype = draw(st.sampled_from(index_dtypes))
    return data_shape, indices_shape, b, seed, dtype


def make_wild_indices(shape, sizes, dtype, seed) -> np.ndarray:
    """Indices in and out of bounds, ``sizes`` broadcast against ``shape`` (for GatherND, one
    size per tuple component along the last dim): most drawn from [-2s-2, 2s+2], and where there
    is room, one of each kind of edge: the two ends of [-s, s-1], just past them (s, -s-1), far
    past (3s + 2), and the dtype's extremes (for unsigned dtypes, the non-negative ones)."""
    rng = np.random.default_rng(seed + 2)
    sizes = np.broadcast_to(np.asarray(sizes, np.int64), shape)
    values = np.floor((rng.random(shape) * 4 - 2) * (sizes + 1)).astype(np.int64)
    info = np.iinfo(dtype)
    extreme = rng.random(shape) < 0.1
    values = np.where(extreme, np.where(rng.random(shape) < 0.5, info.min, info.max), values)
    flat, flat_sizes = values.reshape(-1), sizes.reshape(-1)
    edges = [lambda s: s - 1, lambda s: -s, lambda s: s, lambda s: -s - 1, lambda s: 3 * s + 2,
             lambda s: info.min, lambda s: info.max]  # fmt: skip
    for position, edge in zip(rng.permutation(flat.size), edges):
        flat[position] = edge(int(flat_sizes[position]))
    if info.min == 0:
        values = np.abs(values)
    return np.asarray(np.clip(values, info.min, info.max).astype(dtype))


@st.composite
def batched_gather_cases(draw, index_dtypes=(np.int32, np.int64)):
    """Gather with batch dims (OpenVINO Gather-7/8, tf.gather): 0 <= b <= axis, data and
    indices sharing their first b dims; axis and batch_dims drawn negative too."""
    r = draw(st.integers(1, 4))
    a = draw(st.integers(0, r - 1))
    b = draw(st.integers(0, a))
    data_shape = tuple(draw(nonzero_dims) if d == a else draw(dims) for d in range(r))
    indices_shape = data_shape[:b] + tuple(draw(dims) for _ in range(draw(st.integers(0, 2))))
    axis = a - r if draw(st.booleans()) else a
    q = len(indices_shape)
    batch_dims = b - q if draw(st.booleans()) and b - q >= -min(r, q) else b  # the spec's range
    seed = draw(st.integers(0, 2**16))
    dtype = draw(st.sampled_from(index_dtypes))
    return data_shape, indices_shape, axis, batch_dims, seed, dtype
