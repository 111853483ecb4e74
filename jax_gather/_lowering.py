"""Each op's one ``lax.gather``, the select of "fill" after it, and its derivative.

The generic lowering, on every platform: in-bounds index vectors (built here, and only here, by
:func:`jax_gather._traced_bounds.index_vectors`), one ``lax.gather`` with the plan's dimension
numbers in ``PROMISE_IN_BOUNDS`` mode (every mode has already brought its indices into range, so
JAX's own index checks never flag a position a mode handles on purpose), a select of
``fill_value`` by the in-bounds mask for "fill", and JAX's derivative. The caller passes a
:class:`Lowering`: the parts to replace on CPU (:func:`jax_gather._cpu.lowering` picks them),
which this module puts in a ``lax.platform_dependent`` beside the generic part, with the
derivative it names; it never asks why.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import jax
import numpy as np
from jax import lax

from jax_gather._fill import bits_type, gathered_as_bits, select_exact
from jax_gather._traced_bounds import in_range_vectors, index_vectors
from jax_gather.plans import GatherPlan

PROMISE = lax.GatherScatterMode.PROMISE_IN_BOUNDS

GatherFn = Callable[[jax.Array, jax.Array, GatherPlan], jax.Array]
FillFn = Callable[[jax.Array, jax.Array, jax.Array, GatherPlan], jax.Array]


def direct(data: jax.Array, idx: jax.Array, plan: GatherPlan) -> jax.Array:
    """The plan's ``lax.gather`` on in-bounds index vectors: the generic lowering's, and what
    each CPU lowering ends in, on its own data and indices. On bit patterns where XLA would
    rewrite NaN payloads (:func:`jax_gather._fill.gathered_as_bits`)."""
    if gathered_as_bits(np.dtype(data.dtype)):
        return _direct_on_bits(data, idx, plan)
    return lax.gather(data, idx, plan.dimension_numbers, plan.slice_sizes, mode=PROMISE)


@functools.partial(jax.custom_jvp, nondiff_argnums=(2,))
def _direct_on_bits(data: jax.Array, idx: jax.Array, plan: GatherPlan) -> jax.Array:
    bits = lax.bitcast_convert_type(data, bits_type(data.dtype))
    out = lax.gather(bits, idx, plan.dimension_numbers, plan.slice_sizes, mode=PROMISE)
    return lax.bitcast_convert_type(out, data.dtype)


@_direct_on_bits.defjvp
def _direct_on_bits_jvp(plan, primals, tangents):
    (data, idx), (data_dot, _) = primals, tangents
    tangent = lax.gather(data_dot, idx, plan.dimension_numbers, plan.slice_sizes, mode=PROMISE)
    return _direct_on_bits(data, idx, plan), tangent


@dataclasses.dataclass(frozen=True)
class Lowering:
    """What replaces the generic lowering of one plan on CPU; ``None`` where nothing does.

    Attributes:
      forward: ``forward(data, idx, plan)``, the gather on in-bounds index vectors ``idx``.
      derivative: ``derivative(data, idx, plan)``, the same gather computed another way, whose
        transpose the backward pass runs.
      fill: ``fill(data, slots, fill, plan)``, the result of "fill" from index vectors ``slots``
        that send every out-of-bounds index one past the end of its axis.
      names: the names (in ``jax_gather._cpu.LOWERINGS``) of the lowerings that gave these.
    """

    forward: GatherFn | None = None
    derivative: GatherFn | None = None
    fill: FillFn | None = None
    names: frozenset[str] = frozenset()


GENERIC = Lowering()


def gather(
    data: jax.Array,
    indices: jax.Array,
    plan: GatherPlan,
    low: Lowering,
    *,
    clip: bool,
    unclamped: bool = False,
    in_range: bool = False,
) -> jax.Array:
    """The gather of ``plan`` on the raw ``indices``: with ``clip`` each clamped into range (first
    to the nearest end of [-s, s-1]), otherwise promised to be in bounds (``unclamped``: only
    normalised, see :func:`jax_gather._traced_bounds.clamp_pays`); with ``in_range``, indices
    known to be in [0, s-1] are read as they are."""
    if in_range:
        return _gather(data, in_range_vectors(plan, indices), plan, low)
    return _gather(data, index_vectors(plan, indices, clip=clip, unclamped=unclamped), plan, low)


def gather_or_fill(
    data: jax.Array, indices: jax.Array, ok: jax.Array, fill: jax.Array, plan: GatherPlan, low: Lowering
) -> jax.Array:
    """The gather of "fill": ``fill`` wherever ``ok`` (one flag per index, or per index tuple)
    is False."""
    idx = index_vectors(plan, indices, clip=False)
    if low.fill is None:
        return _select_fill(data, idx, ok, fill, plan, low)
    slots = index_vectors(plan, indices, clip=False, past_end=True)

    def generic(data, idx, slots, ok, fill):
        return _select_fill(data, idx, ok, fill, plan, low)

    cpu = functools.partial(_fill_on_cpu, plan=plan, low=low)
    return lax.platform_dependent(data, idx, slots, ok, fill, cpu=cpu, default=generic)


def _gather(data: jax.Array, idx: jax.Array, plan: GatherPlan, low: Lowering) -> jax.Array:
    if low.forward is None and low.derivative is None:
        return direct(data, idx, plan)
    return _replaced(data, idx, plan, low)


def _on_cpu(cpu: GatherFn | None, data: jax.Array, idx: jax.Array, plan: GatherPlan) -> jax.Array:
    """``cpu`` in a CPU lowering and ``direct`` in any other; ``direct`` alone without ``cpu``."""
    if cpu is None:
        return direct(data, idx, plan)
    return lax.platform_dependent(
        data, idx, cpu=lambda d, i: cpu(d, i, plan), default=functools.partial(direct, plan=plan)
    )


@functools.partial(jax.custom_jvp, nondiff_argnums=(2, 3))
def _replaced(data: jax.Array, idx: jax.Array, plan: GatherPlan, low: Lowering) -> jax.Array:
    """The gather with ``low.forward`` on CPU, differentiated by ``low.derivative`` (a bitcast
    view has no derivative of its own: without one, by the direct gather)."""
    return _on_cpu(low.forward, data, idx, plan)


@_replaced.defjvp
def _replaced_jvp(plan, low, primals, tangents):
    data, idx = primals
    data_dot, _ = tangents  # integer indices have no tangent
    return _replaced(data, idx, plan, low), _on_cpu(low.derivative, data_dot, idx, plan)


def _select_fill(
    data: jax.Array, idx: jax.Array, ok: jax.Array, fill: jax.Array, plan: GatherPlan, low: Lowering
) -> jax.Array:
    return masked(ok, _gather(data, idx, plan, low), fill, plan)


def masked(ok: jax.Array, out: jax.Array, fill: jax.Array, plan: GatherPlan) -> jax.Array:
    """``out`` where ``ok``, broadcast over the slice dims of the output, else ``fill``."""
    offset_dims = plan.dimension_numbers.offset_dims
    batch_positions = tuple(d for d in range(len(plan.output_shape)) if d not in offset_dims)
    mask = lax.broadcast_in_dim(ok, plan.output_shape, batch_positions)
    return select_exact(mask, out, fill)


@functools.partial(jax.custom_jvp, nondiff_argnums=(5, 6))
def _fill_on_cpu(
    data: jax.Array,
    idx: jax.Array,
    slots: jax.Array,
    ok: jax.Array,
    fill: jax.Array,
    plan: GatherPlan,
    low: Lowering,
) -> jax.Array:
    """``low.fill``, differentiated as the select: its transpose scatters into data itself, where
    the CPU fill's might scatter into a padded copy and then cut the slice out."""
    assert low.fill is not None
    return low.fill(data, slots, fill, plan)


@_fill_on_cpu.defjvp
def _fill_on_cpu_jvp(plan, low, primals, tangents):
    _, idx, _, ok, _ = primals
    data_dot, _, _, _, fill_dot = tangents
    tangent = masked(ok, _on_cpu(low.derivative, data_dot, idx, plan), fill_dot, plan)
    return _fill_on_cpu(*primals, plan, low), tangent
