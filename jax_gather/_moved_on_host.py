"""A CPU JAX array's negative indices normalised on the host, where that pays.

An eager call's program that normalises negative indices counts flops for it (3 an index
component), and from INLINE_FLOPS JAX's CPU client runs it on a worker thread. A worker asleep,
as it is after some 10-30 µs of other work on the calling thread, takes ~45 µs to wake. Where
the indices are a JAX array on the CPU, readable on the host without a copy, NumPy normalises
them instead and they go, as a new array, to the program that gathers indices in [0, s-1],
which counts none and runs on the calling thread: under a promise (:func:`promised_on_host`)
and in the checked mode (``jax_gather._eager.make_call``), within the sizes where that was
measured to pay (:func:`normalised_here`), where they may move (:func:`may_move`), and where
that program does run on the calling thread (:func:`inline_once`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from jax_gather._cpu_client import (
    Call,
    aligned_for_cpu,
    implicit_transfers_allowed,
    on_host,
    runs_on_a_worker_thread,
)
from jax_gather._host_bounds import NORMALISED_ON_HOST, moved_in_range
from jax_gather._traced_bounds import normalising_is_inline
from jax_gather.plans import GatherPlan


# The type of a JAX array's sharding onto one device, read from where it is defined (JAX 0.12.1
# deprecates jax.sharding's name); without it, signatures hold the sharding itself
# (jax_gather._eager.signature), and no array is normalised here.
def _single_device_type() -> type | None:
    try:
        from jax._src.sharding_impls import SingleDeviceSharding
    except ImportError:  # pragma: no cover - another JAX's layout
        return None
    return SingleDeviceSharding


SINGLE_DEVICE: Any = _single_device_type()


# From this many, a checked call's CPU JAX array with negatives is normalised on the host
# (normalised_here); fewer go to the program that normalises them (a promise's, from 334).
# Called back to back, that program's worker thread stays awake and its call is the faster
# below it: Gather of 400 and 1024 float32 rows of 16, a tenth negative, 1.49 and 0.82 of
# ``jnp.take``'s "fill" by that program, 2.12 and 1.30 normalised here; GatherElements along the
# last axis 1.46-1.89 against 2.24-2.34; from 2048 ids both 0.23-0.99. With 30 µs of other work
# after each call (the worker asleep: ~45 µs to wake), 0.99-1.05 against 0.22-0.50 at every
# size (AMD EPYC, JAX 0.10.2, 9 paired rounds).
CHECKED_MOVED_FROM = 2048
# Up to this many, a CPU JAX array's indices with negatives are normalised on the host, where
# NumPy's are up to NORMALISED_ON_HOST (past it, judged while their program runs). Of
# GatherElements along the last axis, float32 rows of 16, a tenth negative, normalised by the
# program and here, promises: with 30 µs of other work after each call 4608 ids 1.09-1.18 and
# 0.33 of jnp's, 8192 0.94-1.09 and 0.25, 16384 0.80 and 0.28, 32768 0.68 and 0.47; back to back
# 1.73 and 0.54, 0.74 and 0.56, 0.55 and 0.45, 0.69 and 0.53; 65536 0.36-0.43 and 0.51-0.54 back
# to back, 262144 0.43-0.48 and 0.68-0.79. Checked, with that work 4608-32768 ids 0.93-1.05 and
# 0.27-0.60 (Gather of 8192 rows of 16 and 32768 of 1: 1.06-1.10 and 0.57-0.61); back to back
# 0.38-1.08 and 0.35-0.62; 131072 0.72 and 1.34 (AMD EPYC, JAX 0.10.2, 9 paired rounds).
MOVED_UP_TO = 32768


def normalised_here(indices: Any, checked: bool) -> bool:
    """Whether a CPU JAX array's indices with negatives are normalised on the host, by NumPy, and
    handed to the program that gathers indices in [0, s-1] (as NumPy's up to NORMALISED_ON_HOST
    are), rather than to the one that normalises them: on one device, where that program would
    run on JAX's worker thread (``normalising_is_inline``), up to MOVED_UP_TO (in the checked
    mode from CHECKED_MOVED_FROM). A worker
    thread asleep, as it is after some 10-30 µs of other work on the calling thread, takes ~45 µs
    to wake: a promise of GatherElements along the last axis of 400-4096 float32 ids took
    0.26-0.48 of ``jnp``'s so with 30 µs of other work after each call, 1.16-2.35 by that
    program (back to back 0.48-0.51 and 0.26-1.13). At the call, only where the indices
    :func:`may_move`."""
    if normalising_is_inline(indices.size) or indices.size > MOVED_UP_TO:
        return False
    if checked and indices.size < CHECKED_MOVED_FROM:
        return False
    return on_one_cpu(indices)


def on_one_cpu(indices: Any) -> bool:
    """Whether a JAX array lies on one device whose memory the host reads."""
    return type(indices.sharding) is SINGLE_DEVICE and on_host(indices)


def may_move(indices: Any) -> bool:
    """Whether a CPU JAX array's indices, normalised on the host, may go to JAX as a new NumPy
    array: not where the array is committed to its device (NumPy's would go to the default
    one), nor where JAX's transfer guard stops or logs a transfer the caller did not make."""
    return not indices.committed and implicit_transfers_allowed()


def inline_once(program: Any, size: int) -> Callable[[Any, Any], bool]:
    """Whether ``size`` indices with negatives are normalised on the host, for
    ``program``, the jitted one that gathers indices in [0, s-1]: up to NORMALISED_ON_HOST
    always, past it where ``program`` runs on the calling thread for arguments like these, read
    off its compiled program at the first ask (its call then finds it compiled) and kept. XLA
    counts flops in some gathers of their own (of bfloat16 data: 2 an element, with JAX 0.10),
    which send them to a worker thread: GatherElements along the last axis of 20000 bfloat16
    ids normalised here took 1.26-1.87 of ``jnp``'s promise, by the program that normalises them
    0.72-0.90; of 3000, normalised here 0.65-0.89 back to back, by that program 1.44-1.62 (level,
    1.3-1.8, with 30 µs of other work after each call; AMD EPYC, JAX 0.10.2, 9 paired rounds)."""
    found: list[bool] = [] if size > NORMALISED_ON_HOST else [True]

    def inline(data: Any, indices: Any) -> bool:
        if not found:
            found.append(not runs_on_a_worker_thread(program, data, indices))
        return found[0]

    return inline


def worker_bound(promise: Any, in_range: Any, data: Any, indices: Any) -> bool:
    """Whether, for arguments like these, the jitted ``promise``, which normalises negative
    indices, runs on a worker thread and ``in_range``, which gathers indices in [0, s-1], on the
    calling thread: read off their compiled programs (their calls then find them compiled).
    Asked of a promise's indices too few for their normalisation to count INLINE_FLOPS
    (``normalising_is_inline``), where XLA counts flops in some gathers of their own (of
    bfloat16 and float8 data: 2 an element, with JAX 0.10): GatherElements of 264 float8_e4m3fn
    ids counts 1320 flops by ``promise``, 528 by ``in_range``, and took 2.33 of ``jnp``'s
    promise with 30 µs of other work after each call, 0.49 normalised on the host (back to back
    too; checked calls keep that program: CHECKED_MOVED_FROM)."""
    return runs_on_a_worker_thread(promise, data, indices) and not runs_on_a_worker_thread(
        in_range, data, indices
    )


def promised_on_host(
    plan: GatherPlan,
    test: Callable[[np.ndarray], bool],
    inline: Callable[[Any, Any], bool],
    in_range: Call,
    promise: Call,
) -> Call:
    """A promise's call for a CPU JAX array's indices normalised on the host
    (:func:`normalised_here`): in [0, s-1] they go to ``in_range`` as they are, with
    negatives normalised here (a broken promise's indices land outside [0, s-1], where the
    gather's clamp reads some element of the axis), where they :func:`may_move` and ``in_range``
    runs on the calling thread (``inline``, :func:`inline_once`); else they go to ``promise``."""

    def call(data: Any, indices: Any) -> Any:
        host = np.asarray(indices)  # no copy: on the host
        if test(host):
            return in_range(data, indices)
        if not (may_move(indices) and inline(data, indices)):
            return promise(data, indices)
        return in_range(data, aligned_for_cpu(moved_in_range(plan, host)))

    return call
