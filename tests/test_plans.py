"""The (shapes, attributes) -> dimension-numbers mapping, tested without running a gather."""

import pytest
from jax import export, lax

from jax_gather import gather_elements_plan, gather_nd_plan, gather_plan

pytestmark = pytest.mark.core  # the fast tier: pytest -m core

DN = lax.GatherDimensionNumbers


@pytest.mark.parametrize(
    "data_shape, indices_shape, axis, offset_dims, slice_sizes, out_shape",
    [
        ((5, 4, 3, 2), (3,), 0, (1, 2, 3), (1, 4, 3, 2), (3, 4, 3, 2)),
        ((5, 4, 3, 2), (3,), 1, (0, 2, 3), (5, 1, 3, 2), (5, 3, 3, 2)),
        ((5, 4, 3, 2), (3,), -1, (0, 1, 2), (5, 4, 3, 1), (5, 4, 3, 3)),
        ((3, 3), (1, 2), 1, (0,), (3, 1), (3, 1, 2)),
        ((3, 3), (), 1, (0,), (3, 1), (3,)),
        ((10,), (), 0, (), (1,), ()),
        ((7, 6), (2, 0, 4), 0, (3,), (1, 6), (2, 0, 4, 6)),
    ],
)
def test_gather_plan(data_shape, indices_shape, axis, offset_dims, slice_sizes, out_shape):
    plan = gather_plan(data_shape, indices_shape, axis)
    a = axis % len(data_shape)
    assert plan.dimension_numbers == DN(
        offset_dims=offset_dims, collapsed_slice_dims=(a,), start_index_map=(a,)
    )
    assert plan.slice_sizes == slice_sizes
    assert plan.output_shape == out_shape
    assert plan.index_sizes == (data_shape[a],)
    assert not plan.tuple_indices and plan.data_block is None


@pytest.mark.parametrize(
    "data_shape, indices_shape, axis, batch, block",
    [
        ((2, 2), (2, 2), 1, (0,), None),
        ((3, 3), (2, 3), 0, (1,), None),
        ((3, 4, 5), (3, 9, 5), 1, (0, 2), None),
        ((3, 4, 5), (2, 4, 1), -1, (0, 1), (2, 4, 5)),
        ((3, 4, 5), (1, 1, 1), 0, (1, 2), (3, 1, 1)),
        ((6,), (10,), 0, (), None),
    ],
)
def test_gather_elements_plan(data_shape, indices_shape, axis, batch, block):
    plan = gather_elements_plan(data_shape, indices_shape, axis)
    a = axis % len(data_shape)
    assert plan.dimension_numbers == DN(
        offset_dims=(),
        collapsed_slice_dims=(a,),
        start_index_map=(a,),
        operand_batching_dims=batch,
        start_indices_batching_dims=batch,
    )
    assert plan.slice_sizes == (1,) * len(data_shape)
    assert plan.output_shape == tuple(indices_shape)
    assert plan.data_block == block
    assert plan.index_sizes == (data_shape[a],)


@pytest.mark.parametrize(
    "data_shape, indices_shape, b, offset_dims, indexed, slice_sizes, out_shape",
    [
        ((2, 2), (2, 2), 0, (), (0, 1), (1, 1), (2,)),
        ((2, 2), (2, 1), 0, (1,), (0,), (1, 2), (2, 2)),
        ((2, 2, 2), (2, 1, 2), 0, (2,), (0, 1), (1, 1, 2), (2, 1, 2)),
        ((2, 2, 2), (2, 1), 1, (1,), (1,), (1, 1, 2), (2, 2)),
        ((2, 3, 4, 5, 6), (2, 3, 7, 1), 2, (3, 4), (2,), (1, 1, 1, 5, 6), (2, 3, 7, 5, 6)),
        ((4, 5, 6), (3,), 0, (), (0, 1, 2), (1, 1, 1), ()),
    ],
)
def test_gather_nd_plan(data_shape, indices_shape, b, offset_dims, indexed, slice_sizes, out_shape):
    plan = gather_nd_plan(data_shape, indices_shape, b)
    assert plan.dimension_numbers == DN(
        offset_dims=offset_dims,
        collapsed_slice_dims=indexed,
        start_index_map=indexed,
        operand_batching_dims=tuple(range(b)),
        start_indices_batching_dims=tuple(range(b)),
    )
    assert plan.slice_sizes == slice_sizes
    assert plan.output_shape == out_shape
    assert plan.index_sizes == tuple(data_shape[d] for d in indexed)
    assert plan.tuple_indices


def test_plans_are_cached_and_hashable():
    assert gather_plan((3, 4), (5,), 1) is gather_plan([3, 4], (5,), 1)
    assert hash(gather_nd_plan((2, 3), (4, 2))) == hash(gather_nd_plan((2, 3), (4, 2)))
    assert gather_plan((3, 4), (5,), 1) != gather_plan((3, 4), (5,), 0)


@pytest.mark.parametrize(
    "call, exc, pattern",
    [
        (lambda: gather_plan((), (1,), 0), ValueError, r"Gather: data must have rank >= 1, got rank 0"),
        (lambda: gather_plan((3,), (1,), 1), ValueError, r"Gather: axis must be in \[-1, 0\] .* got 1"),
        (lambda: gather_plan((3,), (1,), 0.0), TypeError, r"Gather: axis must be a static Python integer"),
        (lambda: gather_elements_plan((3, 4), (3,), 0), ValueError, r"same rank as data \(2\), got rank 1"),
        (
            lambda: gather_elements_plan((3, 4), (4, 4), 1),
            ValueError,
            r"indices dimension 0 \(size 4\) must not be larger",
        ),
        (lambda: gather_nd_plan((3, 4), (), 0), ValueError, r"GatherND: indices must have rank >= 1"),
        (
            lambda: gather_nd_plan((3, 4), (2, 3), 0),
            ValueError,
            r"indices.shape\[-1\] must be in \[1, rank\(data\) - batch_dims\] = \[1, 2\], got 3",
        ),
        (
            lambda: gather_nd_plan((3, 4), (2, 0), 0),
            ValueError,
            r"indices.shape\[-1\] must be in .* = \[1, 2\], got 0",
        ),
        (
            lambda: gather_nd_plan((3, 4), (3, 1), 2),
            ValueError,
            r"batch_dims must be in \[0, min.*\) = \[0, 2\).* got 2",
        ),
        (lambda: gather_nd_plan((3, 4), (3, 1), -1), ValueError, r"batch_dims must be in .* got -1"),
        (
            lambda: gather_nd_plan((6, 4), (3, 1), 1),
            ValueError,
            r"first batch_dims=1 dimensions of data and indices must be equal",
        ),
        (
            lambda: gather_nd_plan((3, 4), (3, 1), True),
            TypeError,
            r"batch_dims must be an integer, got the bool",
        ),
    ],
)
def test_plan_errors(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


# Symbolic dims (jax.export shape polymorphism) pass through the plans; one scope for all.
b, n, v = export.symbolic_shape("b, n, v")


def test_plans_keep_symbolic_dims_and_are_cached():
    plan = gather_nd_plan((b, 5, 6), (b, n, 1), 1)
    assert plan.output_shape == (b, n, 6) and plan.slice_sizes == (1, 1, 6)
    assert plan.index_sizes == (5,)
    assert plan is gather_nd_plan((b, 5, 6), (b, n, 1), 1)
    plan = gather_plan((b, 4), (n, 3), 1)
    assert plan.output_shape == (b, n, 3) and plan.slice_sizes == (b, 1)
    plan = gather_elements_plan((b, 4), (b, 7), 1)
    assert plan.output_shape == (b, 7) and plan.data_block is None
    # An indexed axis may be symbolic too: its size becomes a value of the program.
    assert gather_plan((v, 4), (3,), 0).index_sizes == (v,)


def test_symbolic_dims_in_other_scopes_are_other_keys():
    (other_b,) = export.symbolic_shape("b")
    assert gather_plan((other_b, 4), (2,), 1) != gather_plan((b, 4), (2,), 1)


def test_smaller_symbolic_indices_need_a_constraint():
    with pytest.raises(
        ValueError,
        match=r"GatherElements: indices dimension 0 \(size n\) must not be "
        r"larger than data dimension 0 \(size b\) except on axis 1 \(undecidable",
    ):
        gather_elements_plan((b, 4), (n, 4), 1)
    c, d = export.symbolic_shape("c, d", constraints=["d <= c"])
    assert gather_elements_plan((c, 4), (d, 9), 1).data_block == (d, 4)


@pytest.mark.parametrize(
    "call, pattern",
    [
        (
            lambda: gather_nd_plan((4, 5), (n, b), 0),
            r"GatherND: indices.shape\[-1\] must be a known integer .* got the symbolic dimension b",
        ),
        (
            lambda: gather_nd_plan((b, 5), (n, 3, 1), 1),
            r"GatherND: the first batch_dims=1 dimensions of data and indices must be equal",
        ),
    ],
)
def test_symbolic_plan_errors(call, pattern):
    with pytest.raises(ValueError, match=pattern):
        call()
