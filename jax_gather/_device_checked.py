"""The checked mode's eager call for indices on an accelerator: judged where they are.

Indices that are not on the host (a GPU's, a TPU's) are judged by one reduction on their device,
in the same program that gathers them; one scalar comes back, and only out of bounds are the
indices copied to the host, to word the error (:mod:`jax_gather._eager` makes the call).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jax_gather._arguments import Mode, under_a_trace
from jax_gather._cpu_client import Call, single_device_sharding
from jax_gather._host_bounds import Verdict, raise_if_out_of_bounds
from jax_gather._traced_bounds import in_bounds_mask, in_range_mask
from jax_gather.plans import GatherPlan


def checked_on_device(
    plan: GatherPlan, programs: Callable[[Mode], Call], where: jax.sharding.Sharding | None = None
) -> Call:
    """The checked mode's eager call for indices that are not on the host (an accelerator's):
    one program that gathers them as a promise would (negative ones normalised) and judges them
    (:class:`Verdict`, by one reduction), then the one scalar back; out of bounds, the result
    is dropped and the indices come to the host, to name the first bad one. One dispatch, as
    ``jnp.take``'s eager call: on an H200, judging first and gathering after took two and cost
    4.2-4.3x ``jnp.take``'s 80 µs.

    ``where`` is the indices' sharding: on one device that has host memory of its own for
    programs to write into (``pinned_host``), the verdict is written there, so reading it is
    no copy of its own. On an H200 (JAX 0.11.2) this call took 87-99 µs, ``jnp.take``'s 63-67,
    and with the verdict copied from the device's memory 191-193
    (``benchmarks/checked_eager_breakdown.py``)."""
    gathered_and_judged = gather_and_judge_program(plan, programs(Mode.PROMISE_IN_BOUNDS), where)

    def call(data: Any, indices: Any) -> Any:
        result = None
        if under_a_trace():  # concrete indices in a trace open around: judged now all the same
            with jax.ensure_compile_time_eval():
                verdict = Verdict(int(_verdict_on_device(indices, plan=plan)))
        else:
            result, judged = gathered_and_judged(data, indices)
            verdict = Verdict(judged.item())
        if verdict is Verdict.OUT_OF_BOUNDS:
            raise_if_out_of_bounds(plan, np.asarray(indices))
        if result is None:  # the gather staged into the trace around
            return programs(Mode.IN_RANGE if verdict is Verdict.IN_RANGE else Mode.PROMISE_IN_BOUNDS)(
                data, indices
            )
        return result

    return call


def gather_and_judge_program(plan: GatherPlan, promise: Call, where: jax.sharding.Sharding | None) -> Call:
    """``(promise(d, i), verdict)`` in one program, the verdict in host memory where ``where``'s
    one device has some for programs to write into."""
    gather_and_judge = lambda d, i: (promise(d, i), _verdict_on_device(i, plan=plan))
    host = _host_memory_of(where)
    if host is None:
        return jax.jit(gather_and_judge)
    return jax.jit(gather_and_judge, out_shardings=(None, host))


def _host_memory_of(where: jax.sharding.Sharding | None) -> jax.sharding.Sharding | None:
    """Host memory that the one device of ``where`` can write into, or None."""
    if where is None or len(where.device_set) != 1:
        return None
    (device,) = where.device_set
    if "pinned_host" not in {memory.kind for memory in device.addressable_memories()}:  # type: ignore[attr-defined]
        return None
    return single_device_sharding(device, memory_kind="pinned_host")


@functools.partial(jax.jit, static_argnames="plan")
def _verdict_on_device(indices: jax.Array, plan: GatherPlan) -> jax.Array:
    """The :class:`Verdict` on indices where they are, by one reduction: one int8 for the host
    to read."""
    if indices.size == 0:
        return jnp.int8(Verdict.IN_RANGE)
    in_bounds = jnp.all(in_bounds_mask(plan, indices))
    in_range = jnp.all(in_range_mask(plan, indices))
    verdict = jnp.where(
        in_bounds, jnp.where(in_range, Verdict.IN_RANGE, Verdict.IN_BOUNDS), Verdict.OUT_OF_BOUNDS
    )
    return verdict.astype(jnp.int8)
