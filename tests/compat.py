"""Differences between the JAX releases the project supports (jax >= 0.4.35)."""

import re

import jax

JAX_VERSION = tuple(int(part) for part in re.findall(r"\d+", jax.__version__)[:3])

if hasattr(jax, "enable_x64"):
    enable_x64 = jax.enable_x64
else:  # before jax 0.7
    from jax.experimental import enable_x64  # noqa: F401
