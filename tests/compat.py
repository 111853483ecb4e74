"""Differences between the JAX releases the project supports (jax >= 0.4.35)."""

import jax

if hasattr(jax, "enable_x64"):
    enable_x64 = jax.enable_x64
else:  # before jax 0.7
    pass
