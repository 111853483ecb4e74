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

import contextlib
import contextvars
import dataclasses
import functools
import math
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_gather._cpu_client import INLINE_FLOPS
from jax_gather._fill import (
    PinFn,
    bits_type,
    gathered_as_bits,
    opaque_zeros,
    select_exact,
    xla_cpu_converts_select,
    xla_cpu_keeps_bits,
)
from jax_gather._fill_pin import one_pin, opaque_fill
from jax_gather._traced_bounds import dropping_vectors, in_range_vectors, index_vectors, zeroed_vectors
from jax_gather.plans import GatherPlan, one_slice

PROMISE = lax.GatherScatterMode.PROMISE_IN_BOUNDS

GatherFn = Callable[[jax.Array, jax.Array, GatherPlan], jax.Array]
# (data, slots, fill, indices, plan, the lowering, whose pin a select reads) -> the gather of "fill"
FillFn = Callable[[jax.Array, jax.Array, jax.Array, jax.Array, GatherPlan, "Lowering"], jax.Array]
MaskFn = Callable[[jax.Array], jax.Array]

# Set while the gather a pinned select follows is traced, where XLA:CPU would gather the type
# through a wider one (bfloat16 through float32 before JAX 0.11): converted back at a loop's
# scalar ends, the bits are lost before the select could keep them.
_BEFORE_A_PIN = contextvars.ContextVar("before_a_pin", default=False)

# Set while a derivative rule traces its tangent: JAX transposes a tangent one operation at a
# time, and a bitcast has none, so a tangent is gathered and selected as it is (its NaN
# payloads are no result's).
_TANGENT = contextvars.ContextVar("tangent", default=False)


@contextlib.contextmanager
def _while(flag: contextvars.ContextVar[bool], value: bool = True) -> Iterator[None]:
    """``flag`` set to ``value`` while the body traces."""
    token = flag.set(value)
    try:
        yield
    finally:
        flag.reset(token)


def direct(data: jax.Array, idx: jax.Array, plan: GatherPlan) -> jax.Array:
    """The plan's ``lax.gather`` on in-bounds index vectors: the generic lowering's, and what
    each CPU lowering ends in, on its own data and indices. On bit patterns where XLA would
    rewrite NaN payloads (:func:`jax_gather._fill.gathered_as_bits`)."""
    if (gathered_as_bits(np.dtype(data.dtype)) or _BEFORE_A_PIN.get()) and not _TANGENT.get():
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


def own_elements(shape: tuple, plan: GatherPlan) -> bool:
    """Whether each index reads an element of its own after batch dims (GatherElements of (n, 1)
    along its axis of one element): an elementwise select, where another gather from one slice
    is XLA's broadcast."""
    single = all(isinstance(n, int) and n == 1 for n in plan.slice_sizes)
    batched = bool(plan.dimension_numbers.operand_batching_dims)
    return single and batched and tuple(plan.output_shape) == tuple(shape)


def spread(per_index: jax.Array, plan: GatherPlan) -> jax.Array:
    """One value per index (or index tuple) broadcast over the slice dims of the output."""
    offset_dims = plan.dimension_numbers.offset_dims
    batch_positions = tuple(d for d in range(len(plan.output_shape)) if d not in offset_dims)
    return lax.broadcast_in_dim(per_index, plan.output_shape, batch_positions)


def per_index(indices: jax.Array, plan: GatherPlan) -> jax.Array:
    """The first component of each index tuple, or each index: one value per output slice."""
    return indices[..., 0] if plan.tuple_indices else indices


@dataclasses.dataclass(frozen=True)
class Lowering:
    """What replaces the generic lowering of one plan on CPU; ``None`` where nothing does.

    Attributes:
      forward: ``forward(data, idx, plan)``, the gather on in-bounds index vectors ``idx``.
      derivative: ``derivative(data, idx, plan)``, the same gather computed another way, whose
        transpose the backward pass runs.
      fill: ``fill(data, slots, fill, indices, plan, low)``, the result of "fill" from index
        vectors ``slots`` that send every out-of-bounds index one past the end of its axis
        (``indices``: as given, one per index or tuple, what a select's pin reads; ``low``: this
        lowering, whose pin a select reads).
      pin: ``pin(bits, zeros)``, how the select of "fill" keeps its bits where they are pinned
        (``jax_gather._fill.pinned_bits`` where None); or ``jax_gather._fill_pin.opaque_fill``: the
        select keeps them through its fill, the selected bits not pinned.
      mask: ``mask(ok)``, one in-bounds flag per index tuple from its components' (``ok``, the
        components last): :func:`tuple_flags`.
      names: the names (in ``jax_gather._cpu.LOWERINGS``) of the lowerings that gave these.
      pins_from_data: whether the select's pin is made of data's first element rather than the
        indices (:func:`fill_pin`): indices that are constants of the trace, whose zeros XLA
        would compute as it compiles.
    """

    forward: GatherFn | None = None
    derivative: GatherFn | None = None
    fill: FillFn | None = None
    pin: PinFn | None = None
    mask: MaskFn | None = None
    names: frozenset[str] = frozenset()
    pins_from_data: bool = False

    def pin_only(self) -> Lowering:
        """The generic lowering with this one's pin: the generic gather, then a select whose bits
        this lowering keeps (a fill of the CPU table that selects after the generic gather)."""
        return Lowering(pin=self.pin, pins_from_data=self.pins_from_data)


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


def tuple_flags(ok: jax.Array, low: Lowering) -> jax.Array:
    """One flag per index tuple, True where every component of it is in bounds (``ok``: one
    flag per component, the components last): ``low.mask`` on CPU, else a reduction."""
    every = functools.partial(jnp.all, axis=-1)
    if low.mask is None:
        return every(ok)
    return lax.platform_dependent(ok, cpu=low.mask, default=every)


def gather_or_fill(
    data: jax.Array,
    indices: jax.Array,
    ok: jax.Array,
    fill: jax.Array,
    plan: GatherPlan,
    low: Lowering,
    zeroed: bool = False,
) -> jax.Array:
    """The gather of "fill": ``fill`` wherever ``ok`` (one flag per index, or per index tuple)
    is False. ``zeroed``: an index out of bounds is read as index 0 rather than clamped (where
    jax_gather._cpu_clamp says so: zeroed_vectors)."""
    idx = zeroed_vectors(plan, indices) if zeroed else index_vectors(plan, indices, clip=False)
    if low.fill is None:
        fill_then = select_fill if low.derivative else _select_fill_dropping  # its tangent reads in bounds
        return fill_then(data, idx, ok, fill, indices, plan, low)
    slots = index_vectors(plan, indices, clip=False, past_end=True)

    def generic(data, idx, slots, ok, fill, indices):
        return select_fill(data, idx, ok, fill, indices, plan, low)

    cpu = functools.partial(_fill_on_cpu, plan=plan, low=low)
    return lax.platform_dependent(data, idx, slots, ok, fill, indices, cpu=cpu, default=generic)


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
    with _while(_TANGENT):
        tangent = _on_cpu(low.derivative, data_dot, idx, plan)
    return _replaced(data, idx, plan, low), tangent


def select_fill(
    data: jax.Array,
    idx: jax.Array,
    ok: jax.Array,
    fill: jax.Array,
    indices: jax.Array,
    plan: GatherPlan,
    low: Lowering,
) -> jax.Array:
    """The gather of ``low`` on in-bounds index vectors ``idx``, then ``fill`` wherever ``ok``
    is False (``indices``: the raw indices, or one per index, for the pin)."""
    pin = fill_pin(data, plan, indices, low.pins_from_data)
    with _while(_BEFORE_A_PIN, pin is not None and xla_cpu_converts_select(np.dtype(data.dtype))):
        out = _gather(data, idx, plan, low)
    if low.pin is opaque_fill:  # keeps its bits through its fill
        elements = pin is None  # one pin for all, and their bit patterns selected
        source = data if low.pins_from_data else None
        pins = one_pin(per_index(indices, plan), source) if pin is None else pin
        if pins.size:
            fill = spread(opaque_fill(fill, pins), plan)
            return masked(ok, out, fill, plan, pin_with=low.pin, as_bits=elements)
    return masked(ok, out, fill, plan, pin=pin, pin_with=low.pin)


# select_fill, differentiated as a gather that drops what is out of bounds: its transpose is one
# scatter that drops those (XLA's own), where the select's recomputes the mask for the
# cotangent's select and clamps the indices. The derivative then counts what jnp's "fill" counts
# (GatherElements of 208 elements: 832 flops, 2288 through the select, which handed the program
# to JAX's worker thread: 1.14-1.27x jnp's time, up to 7.7x).
_select_fill_dropping = jax.custom_jvp(select_fill, nondiff_argnums=(5, 6))


@_select_fill_dropping.defjvp
def _select_fill_dropping_jvp(plan, low, primals, tangents):
    data, idx, ok, fill, indices = primals
    data_dot, _, _, fill_dot, _ = tangents
    tangent = _dropped(data_dot, dropping_vectors(plan, indices), ok, fill_dot, plan)
    return _select_fill_dropping(data, idx, ok, fill, indices, plan, low), tangent


def _dropped(data_dot: jax.Array, idx: jax.Array, ok: jax.Array, fill_dot: Any, plan: GatherPlan) -> Any:
    """The tangent of "fill": ``data_dot`` gathered where ``idx`` is in bounds, else ``fill_dot``."""
    drop = lax.GatherScatterMode.FILL_OR_DROP
    gathered = lax.gather(data_dot, idx, plan.dimension_numbers, plan.slice_sizes, mode=drop, fill_value=0)
    return gathered + jnp.where(spread(ok, plan), jnp.zeros_like(fill_dot), fill_dot)


def fill_pin(
    data: jax.Array, plan: GatherPlan, indices: jax.Array, from_data: bool = False
) -> jax.Array | None:
    """One run-time integer per index (``per_index``) where the select of "fill" needs its bits
    pinned (:func:`jax_gather._fill.xla_cpu_keeps_bits`), one for all on one device
    (:func:`jax_gather._fill_pin.one_pin`), whose zeros XLA counts once where each index's count
    4-5 flops an index: over slices of more than one element, a loop XLA:CPU unrolls into single
    moves for short rows (each index's took bfloat16 rows of 2 by 1025-1365 ids past one flop a
    byte, split into a task per core: 2.4-3.1x jnp's time, against 0.59-0.96), or from one slice
    (a broadcast; under INLINE_FLOPS output elements: GatherElements of 67-90 such bfloat16
    elements 1.6-3.9x jnp's time with each index's, on a worker thread, against 0.99-1.00; more,
    one measured 1.0-2.6x each index's time). None where each index reads one element of its
    own: that select runs in vector code (every bit kept, bfloat16 pairs and element gathers,
    rows of 1: tests/test_every_dtype.py), also from an axis of one element after batch dims,
    read once per element of data (GatherElements of (n, 1) along it: an elementwise select;
    pinned, its 15 flops an element to jnp's 7 took the loop past one flop a byte, which XLA:CPU
    split into a task per core: 3-9x jnp's time on JAX 0.12 from 3000 elements). ``from_data``
    (indices that are constants of the trace): one integer for all, made of data's first
    element, wherever a pin is (from the indices XLA would compute the zeros as it compiles and
    fold the pin away: signalling NaNs of bfloat16 rows of 2-64 came back quieted)."""
    if xla_cpu_keeps_bits(np.dtype(data.dtype)):
        return None
    single = all(isinstance(n, int) and n == 1 for n in plan.slice_sizes)
    source = data if from_data else None
    if not one_slice(data.shape, plan) or own_elements(data.shape, plan):
        return None if single else one_pin(per_index(indices, plan), source)
    pins = per_index(indices, plan)
    few = pins.size and math.prod(plan.output_shape) < INLINE_FLOPS  # one integer may pin them all
    return one_pin(pins, source) if few or from_data else pins


def masked(
    ok: jax.Array,
    out: jax.Array,
    fill: jax.Array,
    plan: GatherPlan,
    pin: jax.Array | None = None,
    pin_with: PinFn | None = None,
    as_bits: bool = False,
) -> jax.Array:
    """``out`` where ``ok``, broadcast over the slice dims of the output, else ``fill``. ``pin``,
    one run-time integer per index (``per_index`` of the indices, as ``ok``), pins the selected
    bits where they need it (:func:`jax_gather._fill.select_exact`), through ``pin_with``;
    ``as_bits``: their bit patterns selected, whatever XLA makes of the type's select."""
    mask = spread(ok, plan)
    if _TANGENT.get():
        return jnp.where(mask, out, fill)
    zeros = None if pin is None or not pin.size else spread(opaque_zeros(pin), plan)
    return select_exact(mask, out, fill, zeros, pin_with, as_bits=as_bits)


@functools.partial(jax.custom_jvp, nondiff_argnums=(6, 7))
def _fill_on_cpu(
    data: jax.Array,
    idx: jax.Array,
    slots: jax.Array,
    ok: jax.Array,
    fill: jax.Array,
    indices: jax.Array,
    plan: GatherPlan,
    low: Lowering,
) -> jax.Array:
    """``low.fill``, differentiated as the select (or, without a derivative lowering, as
    :func:`_select_fill_dropping`): its transpose scatters into data itself, where the CPU
    fill's might scatter into a padded copy and then cut the slice out."""
    assert low.fill is not None
    return low.fill(data, slots, fill, indices, plan, low)


@_fill_on_cpu.defjvp
def _fill_on_cpu_jvp(plan, low, primals, tangents):
    _, idx, _, ok, _, indices = primals
    data_dot, _, _, _, fill_dot, _ = tangents
    if low.derivative is None:
        tangent = _dropped(data_dot, dropping_vectors(plan, indices), ok, fill_dot, plan)
        return _fill_on_cpu(*primals, plan, low), tangent
    with _while(_TANGENT):
        tangent = masked(ok, _on_cpu(low.derivative, data_dot, idx, plan), fill_dot, plan)
    return _fill_on_cpu(*primals, plan, low), tangent
