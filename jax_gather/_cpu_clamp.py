"""Whether a clamp of the indices costs the vector loop of the rows the gather writes, asked of
the CPU at hand for a promise and for a fill (jax_gather._cpu.gather_lowering reads it).

A promise's indices are clamped where that pays (jax_gather._traced_bounds.clamp_pays): LLVM then
drops the gather's own clamp. But the clamped and the unclamped program are two loops to LLVM's
vectoriser, and for an element gather (each index writes one element) with short rows, the row
lengths it vectorises differ. Where it vectorises the unclamped loop, reading its indices in
vector loads and clamping them in vector registers, and leaves the clamped one scalar, the clamp
costs: a promise of GatherElements along axis 0 of 2 MiB of uint8, rows of 22-24, took 1.38-1.51x
the unclamped time (AVX-512, AMD EPYC Zen 4, JAX 0.10.2); along the last axis rows of 23-27,
1.28-1.52x; a Gather of 1-D data by 2-D indices, rows of 23-27, 1.29-1.48x (bfloat16 and float32
alike: 1.08-1.42x). Those are exactly the row lengths where the programs' LLVM IR says so; at
the other lengths from 16 to 36 the clamp took 0.64-1.04 of the unclamped time (one cell 1.13 in
one sweep, uint8 rows of 32, and 0.87 of jnp's time in the next). A loop vectorised without vector
loads of its indices is another matter: the unclamped loop XLA compiles with AVX2 for rows of
22-27 stores its bytes in vectors and computes each index alone, and there the clamp took
0.73-0.95 (so did bfloat16 rows of 16-21 where AVX-512 lacks AVX512_BF16: vectorised across rows,
indices loaded one by one).

So the site's two programs are compiled once (about 0.13 s each, cached) and their IR read, for
element gathers of one index component with rows of up to PROBED_MAX_ROW elements: past that
both loops were vectorised (AVX-512, AVX2; the clamp 0.91-1.06).

A fill (a gather of clamped indices, then a select of the fill where they were out of bounds)
has the same band one row length lower, but its indices cannot go unclamped: JAX's checkify
index check would flag the reads past the end that "fill" makes on purpose. Its alternative
reads each index out of bounds as index 0 (jax_gather._traced_bounds.zeroed_vectors): every read
in bounds, and a loop LLVM vectorises where it leaves the clamped one scalar. With AVX-512,
GatherElements along axis 0 with rows of 16-21, along the last axis and Gather of 1-D data with
rows of 17-22 (uint8, bfloat16, float32; 2 MiB), clamped, took 1.24-1.96x the zeroed time and up
to 1.9x jnp's fill (zeroed: 0.38-1.10 of jnp's); at the other lengths of 16-32 zeroed took
0.86-1.18x the clamped time, mostly more (as XLA compiles for AVX2, the probe reads no length
zeroed). Those are the row lengths where the two programs' IR says so.
"""

from __future__ import annotations

import functools
import math
import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jax_gather._cpu_client import kernel_irs, lowered_for_cpu
from jax_gather._cpu_site import static
from jax_gather._lowering import Lowering, gather, gather_or_fill
from jax_gather._traced_bounds import in_bounds_mask
from jax_gather.plans import GatherPlan, trailing_slice

PROBED_MAX_ROW = 64
# The least output elements of a fill whose programs are probed. Measured (AMD EPYC Zen 5, JAX
# 0.10.2, rows of 19-20 the probe reads zeroed, 15 paired rounds): clamped against jnp's fill,
# 1.00-1.03 up to 500 elements, 1.03-1.13 at 760-1020 (0.2-0.7 us), 1.07-6.5 at 2040-3060 (the
# clamped scalar loop, on a worker thread, outlasts the calling thread's wait before it sleeps:
# 9-32 us against 5); zeroed 0.96-1.05 throughout. The probe's two compiles are paid once a site.
FILL_PROBED_MIN_ELEMENTS = 512

_ANY_VECTOR = re.compile(r"<\d+ x ")
# A vector load of 32- or 64-bit integers: the indices, read a vector at a time.
VECTOR_INDEX_LOAD = re.compile(r"= load <\d+ x i(32|64)>")


def writes_short_element_rows(plan: GatherPlan) -> bool:
    """Whether each index (of one component) writes one element, and the output's rows (its last
    dim) are at most PROBED_MAX_ROW long."""
    out = plan.output_shape
    return (
        len(plan.index_sizes) == 1
        and trailing_slice(plan) == ()
        and len(out) > 0
        and isinstance(out[-1], int)
        and out[-1] <= PROBED_MAX_ROW
    )


def vector_loop_only_unclamped(clamped: list[str], unclamped: list[str]) -> bool:
    """Whether, by the LLVM IR of each program's kernels, the unclamped program reads its indices
    in vector loads and the clamped one has no vector at all."""
    return not _vectorised(clamped) and _loads_index_vectors(unclamped)


def _vectorised(irs: list[str]) -> bool:
    return any(_ANY_VECTOR.search(ir) for ir in irs)


def _loads_index_vectors(irs: list[str]) -> bool:
    return any(VECTOR_INDEX_LOAD.search(ir) for ir in irs)


def clamp_stops_the_vector_loop(
    plan: GatherPlan, shape: tuple, dtype: Any, indices: Any, clamped: Lowering, unclamped: Lowering
) -> bool:
    """Whether, on this process's CPU, the site's clamped gather (data of ``shape`` and ``dtype``,
    these ``indices``; each program in its lowering) leaves scalar the loop that the unclamped one
    vectorises. False where the default backend is not the CPU, or the shapes are symbolic."""
    return _asked(plan, shape, dtype, indices) and _probed(
        plan, *_site(shape, dtype, indices), clamped, unclamped
    )


def clamp_stops_the_fill_loop(
    plan: GatherPlan, shape: tuple, dtype: Any, indices: Any, low: Lowering
) -> bool:
    """The same question of a fill ("fill", and "checked" under a trace): whether its gather would
    read its indices in vector loads zeroed (see the module's docstring) where clamped it has no
    vector. Asked from FILL_PROBED_MIN_ELEMENTS of output."""
    if low.forward is not None or low.fill is not None:  # the probe's program is the select's
        return False
    elements = math.prod(plan.output_shape) if static(plan.output_shape) else 0
    if elements < FILL_PROBED_MIN_ELEMENTS or not _asked(plan, shape, dtype, indices):
        return False
    return _probed(plan, *_site(shape, dtype, indices), low, low, fills=True)


def _asked(plan: GatherPlan, shape: tuple, dtype: Any, indices: Any) -> bool:
    if not static(shape, plan.output_shape) or not writes_short_element_rows(plan):
        return False
    return jax.default_backend() == "cpu"


def _site(shape: tuple, dtype: Any, indices: Any) -> tuple:
    return tuple(shape), np.dtype(dtype), tuple(indices.shape), np.dtype(indices.dtype)


@functools.lru_cache(maxsize=256)
def _probed(
    plan: GatherPlan,
    shape: tuple[int, ...],
    dtype: np.dtype,
    index_shape: tuple[int, ...],
    index_dtype: np.dtype,
    clamped: Lowering,
    unclamped: Lowering,
    fills: bool = False,
) -> bool:
    def program(low: Lowering, free: bool) -> Any:
        if fills:
            zero = lambda d: jnp.zeros((), d.dtype)
            return lambda d, i: gather_or_fill(d, i, in_bounds_mask(plan, i), zero(d), plan, low, zeroed=free)
        return lambda d, i: gather(d, i, plan, low, clip=False, unclamped=free)

    def irs(low: Lowering, free: bool) -> list[str]:
        return kernel_irs(lowered_for_cpu(program(low, free), (shape, dtype), (index_shape, index_dtype)))

    clamped_irs = irs(clamped, False)
    if not clamped_irs or _vectorised(clamped_irs):  # the other program is compiled only if not
        return False
    return vector_loop_only_unclamped(clamped_irs, irs(unclamped, True))
