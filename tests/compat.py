"""Differences between the JAX releases the project supports (jax >= 0.4.35)."""

import functools

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

if hasattr(jax, "enable_x64"):
    enable_x64 = jax.enable_x64
else:  # before jax 0.7
    from jax.experimental import enable_x64  # noqa: F401

if hasattr(jax.monitoring, "unregister_event_duration_listener"):
    unregister_event_duration_listener = jax.monitoring.unregister_event_duration_listener
else:  # jax 0.4.35 has only the private one, "for testing only"
    from jax._src.monitoring import (  # noqa: F401
        _unregister_event_duration_listener_by_callback as unregister_event_duration_listener,
    )


@functools.cache
def jax_gathers(dtype) -> bool:
    """Whether this JAX gathers values of ``dtype`` at all: jax 0.4.35's XLA:CPU refuses a gather
    of the sub-byte integers (int4, int2...), and float4_e2m1fn is no JAX dtype there. Asked of
    the unsigned type as wide: ``jnp.take`` of float4_e2m1fn itself also fails where XLA:CPU
    cannot compile the float16 conversions it gathers it through (a CPU without F16C), where
    the library gathers its bit patterns."""
    try:
        jnp.zeros(2, dtype)  # a TypeError where it is no JAX dtype
        bits = (ml_dtypes.finfo if jnp.issubdtype(dtype, jnp.floating) else ml_dtypes.iinfo)(dtype).bits
        unsigned = {2: ml_dtypes.uint2, 4: ml_dtypes.uint4}.get(bits, dtype)
        jax.block_until_ready(jnp.take(np.zeros(2, unsigned), np.array([1])))
    except (TypeError, RuntimeError):  # XlaRuntimeError is a RuntimeError
        return False
    return True
