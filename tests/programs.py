"""Helpers for tests that look at the programs the ops lower to, or at the bits they return."""

from __future__ import annotations

from typing import Any, Callable

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
