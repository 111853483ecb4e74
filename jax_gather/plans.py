"""Pure functions from (shapes, ONNX attributes) to a ``lax.gather`` plan.

Each function here answers, without running anything: which ``GatherDimensionNumbers`` and
``slice_sizes`` implement the ONNX op for these shapes, which data axis each index component
addresses (for negative-index normalisation and bounds checks), and what shape comes out.
They are cached, so a jitted program pays for them once per shape.

Dims may be symbolic (``jax.export`` shape polymorphism) wherever the op does not need their
value to build the plan: every dim of data and indices except GatherND's ``indices.shape[-1]``,
which says how many data axes are indexed.

The ops in :mod:`jax_gather.ops` validate their inputs, call one of these, and apply the plan
with a single ``lax.gather``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

from jax import export, lax

from jax_gather._arguments import canonical_axis, dim_greater, fail, rank_at_least, static_int

Dim = Any  # an int, or a symbolic dim of jax.export
Shape = tuple[Dim, ...]


@dataclasses.dataclass(frozen=True)
class GatherPlan:
    """How one ONNX gather becomes one ``lax.gather``.

    Attributes:
      op_name: the ONNX op ("Gather", "GatherElements" or "GatherND").
      dimension_numbers: the ``lax.GatherDimensionNumbers`` of the gather; its
        ``start_index_map`` names the data axis that each index component addresses.
      slice_sizes: the ``slice_sizes`` of the gather.
      index_sizes: the size of each of those axes (the bound ``s`` of the valid range [-s, s-1]).
      data_block: for GatherElements with indices smaller than data on a non-axis dimension, the
        leading block of data that is read (data is sliced to it first); otherwise ``None``.
      output_shape: the shape of the result, by the ONNX formula.
    """

    op_name: str
    dimension_numbers: lax.GatherDimensionNumbers
    slice_sizes: Shape
    index_sizes: Shape
    data_block: Shape | None
    output_shape: Shape

    def __post_init__(self) -> None:
        # Hashed once: a plan is a key of JAX's jit caches and of caches here, looked up on
        # every call (a dataclass would hash its nested fields each time).
        object.__setattr__(self, "_hash", hash(self._fields()))

    def _fields(self) -> tuple:
        return tuple(getattr(self, f.name) for f in dataclasses.fields(self))

    def __hash__(self) -> int:
        return self._hash  # type: ignore[attr-defined]

    def __reduce__(self) -> tuple:
        return (type(self), self._fields())  # rebuilt, and hashed again, where it is loaded

    @property
    def indices_shape(self) -> Shape:
        """The shape of the indices the plan was made for: the output dims that are not
        slice dims, then (GatherND) the index tuples' length."""
        offset = set(self.dimension_numbers.offset_dims)
        shape = tuple(d for i, d in enumerate(self.output_shape) if i not in offset)
        return shape + (len(self.index_sizes),) if self.tuple_indices else shape

    @property
    def tuple_indices(self) -> bool:
        """Whether the last dim of the indices holds index tuples (GatherND), rather than each
        element being one index (Gather, GatherElements: the gather's index vectors are the
        indices with a trailing dim of size 1)."""
        return self.op_name == "GatherND"


def _shape(shape: Sequence[int]) -> Shape:
    # Symbolic dims stay as they are: they are hashable, and their comparisons are exact where
    # decidable, so the plan (and its cache) treat them like integers.
    if all(type(d) is int for d in shape):  # the common case, without the symbolic test
        return tuple(shape)
    return tuple(d if export.is_symbolic_dim(d) else int(d) for d in shape)


def _check_batch_dims_equal(op: str, b: int, data_shape: Shape, indices_shape: Shape) -> None:
    if data_shape[:b] != indices_shape[:b]:
        raise fail(
            ValueError,
            op,
            f"the first batch_dims={b} dimensions of data and indices must be equal, got data "
            f"shape {data_shape} and indices shape {indices_shape}",
        )


@functools.lru_cache(maxsize=4096)
def _gather_plan(data_shape: Shape, indices_shape: Shape, axis: int, batch_dims: int = 0) -> GatherPlan:
    op = "Gather"
    rank_at_least(op, "data", data_shape, 1)
    r, q = len(data_shape), len(indices_shape)
    axis = canonical_axis(op, "axis", axis, r)
    b = batch_dims + q if batch_dims < 0 else batch_dims  # negative: counted from indices' rank
    if not -min(r, q) <= batch_dims <= min(r, q) or b > axis:
        raise fail(
            ValueError,
            op,
            f"batch_dims must be in [{-min(r, q)}, {min(r, q)}] (the smaller rank of data and "
            f"indices) and at most axis ({axis}) once a negative one is counted from indices' "
            f"rank {q}, got {batch_dims} (data shape {data_shape}, indices shape {indices_shape})",
        )
    _check_batch_dims_equal(op, b, data_shape, indices_shape)
    # Output: data.shape[:axis] + indices.shape[b:] + data.shape[axis+1:]. The first b dims
    # are batching dims (of data and indices alike); the index dims sit between the other
    # leading data dims and the trailing ones, so the offset dims skip q - b positions.
    offset_dims = tuple(range(b, axis)) + tuple(range(axis + q - b, r - 1 + q - b))
    slice_sizes = (1,) * b + data_shape[b:axis] + (1,) + data_shape[axis + 1 :]
    batch = tuple(range(b))
    return GatherPlan(
        op_name=op,
        dimension_numbers=lax.GatherDimensionNumbers(
            offset_dims=offset_dims,
            collapsed_slice_dims=(axis,),
            start_index_map=(axis,),
            operand_batching_dims=batch,
            start_indices_batching_dims=batch,
        ),
        slice_sizes=slice_sizes,
        index_sizes=(data_shape[axis],),
        data_block=None,
        output_shape=data_shape[:axis] + indices_shape[b:] + data_shape[axis + 1 :],
    )


@functools.lru_cache(maxsize=4096)
def _gather_elements_plan(data_shape: Shape, indices_shape: Shape, axis: int) -> GatherPlan:
    op = "GatherElements"
    rank_at_least(op, "data", data_shape, 1)
    r = len(data_shape)
    axis = canonical_axis(op, "axis", axis, r)
    if len(indices_shape) != r:
        raise fail(
            ValueError,
            op,
            f"indices must have the same rank as data ({r}), got rank {len(indices_shape)} "
            f"(indices shape {indices_shape}, data shape {data_shape})",
        )
    for d in range(r):
        if d == axis:
            continue
        larger = dim_greater(indices_shape[d], data_shape[d])
        if larger is not False:  # larger, or not provably not larger
            undecided = (
                ""
                if larger
                else (" (undecidable for these symbolic dims: use the same symbol, or a constraint)")
            )
            raise fail(
                ValueError,
                op,
                f"indices dimension {d} (size {indices_shape[d]}) must not be larger than data "
                f"dimension {d} (size {data_shape[d]}) except on axis {axis}{undecided}; "
                f"got indices shape {indices_shape}, data shape {data_shape}",
            )
    # Every non-axis dim is a batch dim shared by data and indices: out[i] = data[i with
    # i[axis] replaced by indices[i]]. Batching dims must match in size, so data is first cut
    # to its leading block where indices are smaller (ONNX / torch.gather semantics).
    block = tuple(data_shape[d] if d == axis else indices_shape[d] for d in range(r))
    batch = tuple(d for d in range(r) if d != axis)
    return GatherPlan(
        op_name=op,
        dimension_numbers=lax.GatherDimensionNumbers(
            offset_dims=(),
            collapsed_slice_dims=(axis,),
            start_index_map=(axis,),
            operand_batching_dims=batch,
            start_indices_batching_dims=batch,
        ),
        slice_sizes=(1,) * r,
        index_sizes=(data_shape[axis],),
        data_block=None if block == data_shape else block,
        output_shape=indices_shape,
    )


@functools.lru_cache(maxsize=4096)
def _gather_nd_plan(data_shape: Shape, indices_shape: Shape, batch_dims: int) -> GatherPlan:
    op = "GatherND"
    rank_at_least(op, "data", data_shape, 1)
    rank_at_least(op, "indices", indices_shape, 1)
    r, q = len(data_shape), len(indices_shape)
    b = batch_dims
    if not 0 <= b < min(q, r):
        raise fail(
            ValueError,
            op,
            f"batch_dims must be in [0, min(rank(indices), rank(data))) = [0, {min(q, r)}) "
            f"for indices of rank {q} and data of rank {r}, got {b}",
        )
    _check_batch_dims_equal(op, b, data_shape, indices_shape)
    k = indices_shape[-1]
    if export.is_symbolic_dim(k):
        raise fail(
            ValueError,
            op,
            f"indices.shape[-1] must be a known integer (it says how many data axes are "
            f"indexed), got the symbolic dimension {k} (indices shape {indices_shape})",
        )
    if not 1 <= k <= r - b:
        raise fail(
            ValueError,
            op,
            f"indices.shape[-1] must be in [1, rank(data) - batch_dims] = [1, {r - b}], got {k} "
            f"(indices shape {indices_shape}, data shape {data_shape}, batch_dims={b})",
        )
    indexed = tuple(range(b, b + k))
    batch = tuple(range(b))
    return GatherPlan(
        op_name=op,
        dimension_numbers=lax.GatherDimensionNumbers(
            offset_dims=tuple(range(q - 1, q - 1 + r - b - k)),
            collapsed_slice_dims=indexed,
            start_index_map=indexed,
            operand_batching_dims=batch,
            start_indices_batching_dims=batch,
        ),
        slice_sizes=(1,) * (b + k) + data_shape[b + k :],
        index_sizes=tuple(data_shape[d] for d in indexed),
        data_block=None,
        output_shape=indices_shape[:-1] + data_shape[b + k :],
    )


def gather_plan(
    data_shape: Sequence[int], indices_shape: Sequence[int], axis: int = 0, batch_dims: int = 0
) -> GatherPlan:
    """The ``lax.gather`` plan of ONNX Gather (``batch_dims=0``), OpenVINO Gather-7/8 and
    ``tf.gather`` for these shapes.

    Output shape ``data.shape[:axis] + indices.shape[b:] + data.shape[axis+1:]``: each index
    picks one slice of ``data`` along ``axis``, which is collapsed; the first ``b`` dims
    (``batch_dims``, counted from indices' rank when negative, at most ``axis``) are batching
    dims shared by data and indices; every other data dim is an offset dim of the output.

    Example:
      >>> from jax_gather import gather_plan
      >>> plan = gather_plan((5, 4, 3), (2, 6), axis=1)
      >>> plan.dimension_numbers
      GatherDimensionNumbers(offset_dims=(0, 3), collapsed_slice_dims=(1,), start_index_map=(1,),
                             operand_batching_dims=(), start_indices_batching_dims=())
      >>> plan.slice_sizes, plan.output_shape
      ((5, 1, 3), (5, 2, 6, 3))
      >>> batched = gather_plan((2, 5, 3), (2, 4), axis=1, batch_dims=1)  # per example, 4 rows
      >>> batched.dimension_numbers.operand_batching_dims, batched.output_shape
      ((0,), (2, 4, 3))
    """
    axis, batch_dims = static_int("Gather", "axis", axis), static_int("Gather", "batch_dims", batch_dims)
    return _gather_plan(_shape(data_shape), _shape(indices_shape), axis, batch_dims)


def gather_elements_plan(
    data_shape: Sequence[int], indices_shape: Sequence[int], axis: int = 0
) -> GatherPlan:
    """The ``lax.gather`` plan of ONNX GatherElements (and OpenVINO GatherElements-6).

    Every dim but ``axis`` is a batching dim shared by data and indices; the index picks a
    single element along ``axis``. The output has exactly the indices' shape. Where indices are
    smaller than data on a non-axis dim, ``data_block`` says which leading block is read.

    Example:
      >>> from jax_gather import gather_elements_plan
      >>> plan = gather_elements_plan((3, 4), (2, 7), axis=1)
      >>> plan.dimension_numbers
      GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=(1,), start_index_map=(1,),
                             operand_batching_dims=(0,), start_indices_batching_dims=(0,))
      >>> plan.data_block, plan.output_shape
      ((2, 4), (2, 7))
    """
    return _gather_elements_plan(
        _shape(data_shape), _shape(indices_shape), static_int("GatherElements", "axis", axis)
    )


def gather_nd_plan(
    data_shape: Sequence[int], indices_shape: Sequence[int], batch_dims: int = 0
) -> GatherPlan:
    """The ``lax.gather`` plan of ONNX GatherND.

    The leading ``batch_dims`` dims are batching dims of data and indices; the last dim of
    indices is the index vector, addressing data dims ``batch_dims .. batch_dims + k - 1``,
    which are collapsed; the remaining data dims are offset dims at the end of the output.

    Example:
      >>> from jax_gather import gather_nd_plan
      >>> plan = gather_nd_plan((2, 5, 6, 7), (2, 3, 2), batch_dims=1)
      >>> plan.dimension_numbers
      GatherDimensionNumbers(offset_dims=(2,), collapsed_slice_dims=(1, 2), start_index_map=(1, 2),
                             operand_batching_dims=(0,), start_indices_batching_dims=(0,))
      >>> plan.slice_sizes, plan.index_sizes, plan.output_shape
      ((1, 1, 1, 7), (5, 6), (2, 3, 7))
    """
    return _gather_nd_plan(
        _shape(data_shape), _shape(indices_shape), static_int("GatherND", "batch_dims", batch_dims)
    )


def one_slice(shape: tuple, plan: GatherPlan) -> bool:
    """Whether every index reads the same slice of non-empty data of ``shape`` (each indexed axis
    of size 1), a gather XLA rewrites as a broadcast; False for a symbolic axis."""
    sizes = [shape[d] for d in plan.dimension_numbers.start_index_map]
    known = all(isinstance(n, int) for n in shape)
    return known and 0 not in shape and all(n == 1 for n in sizes)


def trailing_slice(plan: GatherPlan) -> Shape:
    """The output's trailing dims that are slice dims: what each index writes contiguously at the
    end of the output (its rows); () where the output's last dim is an index's."""
    out, offset_dims = plan.output_shape, plan.dimension_numbers.offset_dims
    trailing = 0
    while trailing < len(out) and len(out) - 1 - trailing in offset_dims:
        trailing += 1
    return tuple(out[len(out) - trailing :])
