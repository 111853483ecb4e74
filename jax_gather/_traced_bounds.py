"""Bounds in the program: the in-bounds masks, the checked mode's check, and the index
vectors the gather reads.

Every test is unsigned arithmetic on the indices narrowed (with saturation) to the working
dtype, so each bound is one compare or one ``minimum``, which the CPU's vector units have.
Bounds are judged on the indices as the caller gave them, per index component against its own
data axis: an int64 index of 2**32 + 1 stays out of bounds, never a read of row 1.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import export, lax

from jax_gather._arguments import fail
from jax_gather._cpu_client import INLINE_FLOPS
from jax_gather._cpu_split import SPLIT_ANYWAY_BYTES
from jax_gather._fill import element_bits
from jax_gather._host_bounds import check_index_dtype, host_indices, narrow_host_indices
from jax_gather._index_check import check_indices
from jax_gather._x64 import x64_on
from jax_gather.plans import GatherPlan, trailing_slice

_INT32 = np.iinfo(np.int32)


def _index_dtype(plan: GatherPlan) -> Any:
    """int32, or int64 where an indexed axis may be longer than int32 can address. A symbolic
    axis (jax.export) may be, when x64 is on; without x64 JAX's own shape arithmetic is int32."""
    wide = any(x64_on() if export.is_symbolic_dim(s) else s > _INT32.max for s in plan.index_sizes)
    return jnp.int64 if wide else jnp.int32


def axis_sizes(plan: GatherPlan, dtype: Any) -> Any:
    """The sizes of the indexed axes in ``dtype``: a scalar where the indices get an index-vector
    dim appended, else one per index component. Symbolic sizes become values of the program."""
    sizes: Any
    if any(export.is_symbolic_dim(s) for s in plan.index_sizes):
        sizes = jnp.stack([jnp.asarray(s).astype(dtype) for s in plan.index_sizes])
    else:
        sizes = np.asarray(plan.index_sizes, dtype)
    return sizes if plan.tuple_indices else sizes[0]


def _saturate(indices: jax.Array, target: Any) -> jax.Array:
    """``indices`` in the signed ``target`` dtype; values beyond its range saturate, so an index
    stays out of bounds of every axis that ``target`` can address."""
    if indices.dtype == target:
        return indices
    src, info = jnp.iinfo(indices.dtype), jnp.iinfo(target)
    lo, hi = max(src.min, info.min), min(src.max, info.max)
    if (lo, hi) != (src.min, src.max):
        indices = jnp.clip(indices, jnp.asarray(lo, indices.dtype), jnp.asarray(hi, indices.dtype))
    return indices.astype(target)


def _unsigned_parts(plan: GatherPlan, indices: jax.Array) -> tuple[jax.Array, Any]:
    """The indices, narrowed with saturation to the working dtype and reinterpreted as the
    unsigned type of that width, and the axis sizes in that unsigned type.

    In unsigned (modular) arithmetic every bound below is one compare or one ``minimum``, which
    the CPU's vector units have: ``min(i, i + s)`` is ``i`` for i in [0, s-1], ``i + s`` for i
    in [-s, -1], and s or more for any other i, so it is below s exactly in bounds.
    """
    target = _index_dtype(plan)
    return _as_unsigned(_saturate(indices, target), axis_sizes(plan, target))


def _as_unsigned(indices: jax.Array, sizes: Any) -> tuple[jax.Array, Any]:
    """Signed ``indices`` reinterpreted as the unsigned type of their width, and ``sizes`` in it."""
    unsigned = jnp.dtype(f"uint{8 * indices.dtype.itemsize}")
    return lax.bitcast_convert_type(indices, unsigned), jnp.asarray(sizes).astype(unsigned)


def in_bounds_mask(plan: GatherPlan, indices: jax.Array) -> jax.Array:
    """Per-element (per index component for GatherND) in-bounds mask of the raw indices."""
    u, sizes = _unsigned_parts(plan, indices)
    # The working index's min(u, u + s), which XLA computes once for both: measured, an int8
    # lookup of 2**20 rows of 4 took 0.83 of its time with the mask as u + s < 2s (AMD EPYC).
    return jnp.minimum(u, u + sizes) < sizes


def in_range_mask(plan: GatherPlan, indices: jax.Array) -> jax.Array:
    """Per-element (per index component) mask of the raw indices that are in [0, s-1]."""
    u, sizes = _unsigned_parts(plan, indices)
    return u < sizes


def in_bounds(plan: GatherPlan, indices: Any) -> jax.Array:
    """Whether each index (each index tuple, for GatherND) is within [-s, s-1] of its axis.

    The same judgement the ops make, as a value: return ``jnp.all(in_bounds(plan, indices))``
    beside a ``mode="fill"`` result where a checkify check cannot go, e.g. in a program to be
    serialized with ``jax.export`` (JAX cannot serialize a checkify effect).

    Example:
      >>> import jax_gather
      >>> plan = jax_gather.gather_nd_plan((3, 4), (2, 2))
      >>> jax_gather.in_bounds(plan, [[2, -4], [3, 0]])
      Array([ True, False], dtype=bool)
    """
    if isinstance(indices, jax.Array):
        check_index_dtype(plan.op_name, indices.dtype)
    else:
        indices = jnp.asarray(narrow_host_indices(host_indices(plan.op_name, indices)))
    if tuple(indices.shape) != plan.indices_shape:
        raise fail(
            ValueError,
            plan.op_name,
            f"indices must have the shape the plan was made for, {plan.indices_shape}, "
            f"got {tuple(indices.shape)}",
        )
    ok = in_bounds_mask(plan, indices)
    return jnp.all(ok, axis=-1) if plan.tuple_indices else ok


def first_false(ok: jax.Array) -> tuple[tuple[jax.Array, ...], jax.Array]:
    """The position of the first False of ``ok`` in C order, and a mask that is True there only.

    Found one dim at a time by reductions, rather than by ``argmin`` of the raveled mask and a
    dynamic index: reductions trace for any sharding of the indices (JAX's explicit sharding
    refuses dynamic slices of sharded dims) and for symbolic shapes.
    """
    at = jnp.logical_not(ok)
    pos = []
    for d in range(ok.ndim):
        along = lax.broadcasted_iota(jnp.int32, ok.shape, d)
        first = jnp.min(jnp.where(at, along, _INT32.max))
        at = at & (along == first)
        pos.append(first)
    return tuple(pos), at


def _pick(values: jax.Array, k: jax.Array) -> jax.Array:
    """``values[k]`` by a masked sum, not a dynamic index: under ``vmap`` that index would become
    a gather of its own, which JAX's index checks flag when ``k`` is the no-failure sentinel."""
    return jnp.sum(jnp.where(jnp.arange(values.shape[0]) == k, values, 0), dtype=values.dtype)


def check_in_bounds(plan: GatherPlan, indices: jax.Array, ok: jax.Array) -> jax.Array:
    """``indices``, carrying a checkify check that reports the first out-of-bounds index in
    the eager error's words."""
    if 0 in ok.shape:
        return indices
    pos, at = first_false(ok)
    lowest = jnp.asarray(jnp.iinfo(indices.dtype).min, indices.dtype)
    value = jnp.max(jnp.where(at, indices, lowest))
    component: Any = pos[-1] if plan.tuple_indices else 0
    sizes = jnp.asarray(axis_sizes(plan, _index_dtype(plan)))
    axis: Any
    if plan.tuple_indices:
        axes = jnp.asarray(plan.dimension_numbers.start_index_map)
        axis, size = _pick(axes, component), _pick(sizes, component)
    else:
        axis, size = plan.dimension_numbers.start_index_map[0], sizes
    slots = lambda n: "indices" if not n else "indices[" + ", ".join(["{}"] * n) + "]"
    message = (
        f"{plan.op_name}: {slots(ok.ndim)} = {{}} is out of bounds for axis {{}} of size {{}} "
        "(valid range [{}, {}])"
    )
    args = (*pos, value, axis, size, -size, size - 1)
    if plan.tuple_indices:
        message += "; it is component {} of the index tuple indices[" + "{}, " * (ok.ndim - 1) + ":]"
        args += (component, *pos[:-1])
    return check_indices(indices, jnp.all(ok), message, *args)


def working_indices(
    plan: GatherPlan, indices: jax.Array, clip: bool, past_end: bool = False, unclamped: bool = False
) -> jax.Array:
    """Indices as the gather reads them: narrowed with saturation, negatives normalised, and
    clamped into [0, s-1]. With ``clip`` an out-of-bounds index goes to the nearest end of
    [-s, s-1] first, as the "clip" mode says; otherwise it becomes some in-range index (the
    select of "fill" and "checked" replaces what it reads, and a promise made it undefined).
    With ``past_end`` every out-of-bounds index becomes ``s`` instead, and every in-bounds one
    stays in [0, s-1]: the slot of a data padded by one ``fill_value`` on each indexed axis.
    With ``unclamped`` (for indices promised to be in bounds, where :func:`clamp_pays` says
    not), negatives are normalised and nothing more.

    Clamping here, rather than leaving it to the gather's native clamp, keeps every index the
    gather sees in bounds, so JAX's own checkify index checks never flag a position that a
    mode handles on purpose (the library's check reports a broken promise), and it lets LLVM
    drop the gather's own clamp: measured 0.7-0.9x the time of a signed normalise-and-clamp on
    the element gathers (docs/performance.md).
    """
    target = _index_dtype(plan)
    sizes = axis_sizes(plan, target)
    short = clip and short_clip(plan, indices.size)
    work = lambda i, s: _working(_saturate(i, target), s, clip, past_end, unclamped, short)
    batched = bool(plan.dimension_numbers.operand_batching_dims)
    by_component = batched or past_end
    if plan.tuple_indices and by_component and isinstance(sizes, np.ndarray) and sizes.shape[0] > 1:
        # GatherND after batch dims: one component at a time, each against its own size as a
        # scalar, then stacked. XLA:CPU vectorises each component's arithmetic, where over the
        # (..., k) array against a (k,) vector of sizes it did not (docs/design.md: 64x16384
        # pairs, by one linear index, 1.64x jnp's time whole and 0.93x by component). Without
        # batch dims the gather reads the (..., k) array as it is, and this measured no faster;
        # the slots of a fill (past_end) are stacked too, a stack XLA writes out where two
        # loops read it (jax_gather._cpu's nd_fill_in_two_loops) and fuses where one does.
        return jnp.stack([work(indices[..., c], sizes[c]) for c in range(sizes.shape[0])], axis=-1)
    return work(indices, sizes)


def _working(
    indices: jax.Array, sizes: Any, clip: bool, past_end: bool, unclamped: bool, short: bool = False
) -> jax.Array:
    """working_indices of ``indices``, already in the working dtype, against ``sizes`` in it
    (``short``: clip's short form, :func:`short_clip`)."""
    if unclamped:
        return _normalised_unclamped(indices, sizes)
    if short:
        # Clamped into [-s, s-1], a negative index gets its s back by a remainder (an and for a
        # power of two), with no compare and select: in [0, s-1] whatever its sign.
        bound = jnp.broadcast_to(jnp.asarray(sizes, indices.dtype), indices.shape)
        clamped = lax.clamp(-bound, indices, bound - 1)
        if np.all(_powers_of_two(sizes)):
            return clamped & (bound - 1)  # two's complement: -s..-1 are s..2s-1 below 2**bits
        return lax.rem(clamped + bound, bound)  # in [0, 2s-1] (short_clip: it fits), never negative
    if clip:
        indices = jnp.maximum(indices, -sizes)
    u, s = _as_unsigned(indices, sizes)
    # min(u, u + s) is below s exactly for the in-bounds indices (see in_bounds_mask).
    in_range = jnp.minimum(jnp.minimum(u, u + s), s if past_end else s - 1)
    return lax.bitcast_convert_type(in_range, indices.dtype)


# What XLA counts for normalising one index component without the clamp (a compare, an add, a
# select: jnp's own normalisation); with it, _CLAMPED_FLOPS.
_UNCLAMPED_FLOPS = 3


# What XLA counts per index component for each mode's arithmetic: none for indices known to be
# in [0, s-1], _UNCLAMPED_FLOPS for a promise's normalisation, five with its clamp, six for clip's,
# fewer for clip's short form (_short_clip_flops; tests/test_cpu_facts.py checks them).
_CLAMPED_FLOPS, _CLIP_FLOPS = 5, 6


def _powers_of_two(sizes: Any) -> Any:
    sizes = np.asarray(sizes)
    return (sizes > 0) & (sizes & (sizes - 1) == 0)


def _short_clip_flops(plan: GatherPlan) -> int | None:
    """What XLA counts per index component for clip's short form against the plan's axes (a
    clamp into [-s, s-1], then an and with s - 1 where every s is a power of two, else an add of s
    and a remainder by it), or None where there is none: a symbolic or empty axis, or one past
    half the working dtype's range (where ``i + s`` would overflow)."""
    sizes = plan.index_sizes
    if any(export.is_symbolic_dim(s) for s in sizes) or min(sizes) < 1:
        return None
    if np.all(_powers_of_two(sizes)):
        return 2
    return 3 if 2 * max(sizes) - 1 <= np.iinfo(_index_dtype(plan)).max else None


def short_clip(plan: GatherPlan, components: Any) -> bool:
    """Whether "clip" takes its short form for this many index components: where its 2-3 flops
    an index component (:func:`_short_clip_flops`) keep the arithmetic under INLINE_FLOPS, the
    program stays on the calling thread up to 333 components (499 against axes of powers of
    two), where the unsigned form's 6 left it from 167. ``jnp``'s own clip (a normalisation,
    then the gather's clamp: 3) stays there up to 333, but reads past the end, which JAX's
    checkify index checks flag, and the library's never does. Jitted, with 30 µs of other work
    after each call, Gather of 300 ids and GatherElements of 300 took 10.3-11.7x ``jnp``'s time
    by a clamp and ``jnp``'s normalisation (4 flops: on a worker thread), 0.98-1.01 by this form
    (AMD EPYC, JAX 0.10.2). Past that, the unsigned form, which lets LLVM drop the gather's own
    clamp (the docstring of working_indices)."""
    flops = _short_clip_flops(plan)
    return isinstance(components, int) and flops is not None and flops * components < INLINE_FLOPS


def index_flops(
    *, clip: bool, unclamped: bool, in_range: bool, plan: GatherPlan | None = None, components: Any = None
) -> int:
    """What XLA counts per index component for the index arithmetic of a gather in this mode
    (for clip, of ``plan``'s axes and this many index components: its short form)."""
    if in_range:
        return 0
    if clip:
        short = _short_clip_flops(plan) if plan is not None and short_clip(plan, components) else None
        return short or _CLIP_FLOPS
    return _UNCLAMPED_FLOPS if unclamped else _CLAMPED_FLOPS


def normalising_is_inline(components: int) -> bool:
    """Whether a program that normalises this many index components (and gathers) stays under
    INLINE_FLOPS, on the calling thread."""
    return _UNCLAMPED_FLOPS * components < INLINE_FLOPS


# The most bytes an index of one component may write at the output's end (its row) for the clamp to
# be taken: past them the clamp saves nothing, and it can cost (see clamp_pays).
CLAMP_MAX_ROW_BYTES = 32


def clamp_pays(plan: GatherPlan, indices: jax.Array, dtype: Any) -> bool:
    """Whether the indices of a promise are clamped as well as normalised.

    The clamp saves the gather's own (the docstring of working_indices) but costs two flops per
    index component, which XLA counts: they can take a program jnp's normalisation keeps under
    INLINE_FLOPS over it, to a worker thread (tens of microseconds), and an element gather of
    narrow data past one flop per byte, which XLA splits into a task per core. So it is taken
    only where neither can happen: at least SPLIT_ANYWAY_BYTES of output and too many
    components for jnp's program to stay on the calling thread.

    And where an index is one component, only where it writes rows of up to
    CLAMP_MAX_ROW_BYTES: the saving is per index, and so is the clamp's effect on the loop that
    copies its row. Promises of 2 MiB of output, clamped against unclamped (2026-12-06, AMD
    EPYC, JAX 0.10.2, AVX-512 and as XLA compiles for AVX2 and SSE4_2; Gather along axis 0 and
    batch_dims=1, GatherND rows; int8, bfloat16, float32; 11-17 paired rounds): rows of 1-32
    bytes, medians 0.82-0.95 by row length, none slower past the noise; of 64 bytes 0.99; of
    128-4096 bytes medians 1.01-1.22, none faster past the noise and a fifth slower (bfloat16
    rows of 256-2048 under SSE4_2 1.33-1.58). Index pairs keep it at every row length: their
    rows of 64-2048 took 0.81-1.06 of the unclamped time (the benchmark's GatherND of 100000
    pairs of float32 rows of 64: 1.24x unclamped)."""
    n, out = indices.size, math.prod(plan.output_shape)
    if not isinstance(n, int) or not isinstance(out, int):
        return True
    big = out * np.dtype(dtype).itemsize >= SPLIT_ANYWAY_BYTES
    row_bytes = math.prod(trailing_slice(plan)) * element_bits(dtype) // 8
    short = row_bytes <= CLAMP_MAX_ROW_BYTES or len(plan.index_sizes) > 1
    return big and _UNCLAMPED_FLOPS * n >= INLINE_FLOPS and short


def _normalised_unclamped(indices: jax.Array, sizes: Any) -> jax.Array:
    """``i + s`` for negative ``i``, else ``i``: in [0, s-1] for every index in bounds. An index out
    of bounds stays out (the library's check reports the broken promise), and the gather's own
    clamp keeps the read in the array.

    jnp's own form (a compare, an add, a select). The same sum by the sign's bits (a shift, an
    and, an add; the same count) took 1.11-1.18x jnp's time where this form took 0.95-1.00
    (2026-12-05, AMD EPYC, 11 paired rounds: a promise of GatherElements along the last axis of
    262144 int8 and bfloat16 ids, rows of 10-20; Gather along axis 1 of 529 x 23 uint8 under
    AVX2), and level over three samples of 60 random cells (geometric means 0.98-1.02, AVX-512 and
    AVX2): LLVM vectorises the loops around each form differently."""
    return jnp.where(indices < 0, indices + jnp.asarray(sizes, indices.dtype), indices)


def index_vectors(
    plan: GatherPlan, indices: jax.Array, clip: bool, past_end: bool = False, unclamped: bool = False
) -> jax.Array:
    """``working_indices`` with the index-vector dim the gather expects."""
    idx = working_indices(plan, indices, clip, past_end, unclamped)
    return idx if plan.tuple_indices else idx[..., None]


def zeroed_vectors(plan: GatherPlan, indices: jax.Array) -> jax.Array:
    """Index vectors for a fill where jax_gather._cpu_clamp says so: negatives normalised, and 0
    for each index out of bounds, by a select on the in-bounds mask (the one the fill's select
    reads, which XLA computes once). Every read stays in bounds, as clamped ones do."""
    target = _index_dtype(plan)
    idx = _normalised_unclamped(_saturate(indices, target), axis_sizes(plan, target))
    idx = jnp.where(in_bounds_mask(plan, indices), idx, jnp.zeros((), idx.dtype))
    return idx if plan.tuple_indices else idx[..., None]


def written_indices(plan: GatherPlan, indices: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Index vectors of a GatherND's index tuples, each component in [0, s-1] as
    :func:`working_indices` makes them, and each tuple's in-bounds flag, judged from them: a
    component is in bounds where its normalised value ``min(u, u + s)`` is its index vector's
    (a value past s - 1 was clamped). Stacked one component at a time and read by two loops,
    the index vectors are written out by a loop of their own, as ``jnp``'s normalised indices
    are, and the gather's loop reads them with no arithmetic (static sizes only)."""
    target = _index_dtype(plan)
    work, sizes = _saturate(indices, target), axis_sizes(plan, target)
    clamped = lambda c: _working(work[..., c], sizes[c], clip=False, past_end=False, unclamped=False)
    idx = jnp.stack([clamped(c) for c in range(sizes.shape[0])], axis=-1)
    u, s = _as_unsigned(work, sizes)
    return idx, jnp.all(lax.bitcast_convert_type(jnp.minimum(u, u + s), target) == idx, axis=-1)


def dropping_vectors(plan: GatherPlan, indices: jax.Array) -> jax.Array:
    """Index vectors for a FILL_OR_DROP gather: each negative index moved up by s, every other as
    it is, in the signed working dtype (an index out of bounds stays out; no unsigned view, whose
    two bitcasts XLA's cost analysis counts): three ops an index, as jnp's."""
    target = _index_dtype(plan)
    idx, sizes = _saturate(indices, target), axis_sizes(plan, target)
    idx = _normalised_unclamped(idx, sizes)
    return idx if plan.tuple_indices else idx[..., None]


def in_range_vectors(plan: GatherPlan, indices: jax.Array) -> jax.Array:
    """Index vectors from indices known to be in [0, s-1]: taken as they are (no arithmetic),
    only widened from a narrow or unsigned dtype to the signed one the gather reads."""
    if indices.dtype not in (jnp.int32, jnp.int64):
        indices = indices.astype(_index_dtype(plan))
    return indices if plan.tuple_indices else indices[..., None]
