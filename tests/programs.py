"""Helpers for tests that look at the programs the ops lower to, or at the bits they return."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax import export


def module_for(fn: Callable[..., Any], args: tuple, platform: str) -> str:
    """The StableHLO text of ``jax.jit(fn)`` exported for one platform (no device needed)."""
    return export.export(jax.jit(fn), platforms=(platform,))(*args).mlir_module()


def bits(x: Any) -> np.ndarray:
    """The bit patterns of ``x``, as unsigned integers of its width (NaN payloads, -0.0 kept)."""
    x = np.asarray(x)
    return x.view(f"u{x.dtype.itemsize}")


def random_bits(rng: np.random.Generator, dtype: Any, shape: tuple) -> np.ndarray:
    """An array of ``dtype`` from random bytes: for floats every bit pattern, so a conversion on
    the way (NaN payloads, -0.0, subnormals) would show; 0 or 1 for bool."""
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    size = int(np.prod(shape)) * np.dtype(dtype).itemsize
    return np.frombuffer(rng.bytes(size), dtype).reshape(shape)


def run_with_cpu_devices(code: str, devices: int = 8) -> str:
    """The stdout of ``code`` run by a fresh Python whose JAX has ``devices`` CPU devices."""
    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}", JAX_PLATFORMS="cpu")
    return subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=pathlib.Path(__file__).resolve().parents[1],
    ).stdout
