"""64-bit types for one block of code, leaving the caller's global ``jax_enable_x64`` alone.

ONNX's int64, uint64 and float64 tensors must keep their dtype; JAX narrows them unless x64 is
on. The context managers below are thread-local, so turning x64 on for a block never changes
what the rest of the program sees.
"""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager as ContextManager

import jax


def x64_enabled() -> ContextManager[None]:
    """A context in which ``jax_enable_x64`` is on."""
    if hasattr(jax, "enable_x64"):  # jax >= 0.7
        return jax.enable_x64(True)
    from jax.experimental import enable_x64  # type: ignore[attr-defined]  # jax 0.4.35 .. 0.6

    return enable_x64(True)


def x64_on() -> bool:
    """Whether ``jax_enable_x64`` is on here (in this thread's context)."""
    return bool(jax.config.read("jax_enable_x64"))


def x64_enabled_if(needed: bool) -> ContextManager[None]:
    """``x64_enabled()`` where ``needed``, else no change at all (never turns x64 off)."""
    return x64_enabled() if needed else contextlib.nullcontext()
