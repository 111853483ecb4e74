"""64-bit types for one block of code, leaving the caller's global ``jax_enable_x64`` alone.

ONNX's int64, uint64 and float64 tensors must keep their dtype; JAX narrows them unless x64 is
on. The context managers below are thread-local, so turning x64 on for a block never changes
what the rest of the program sees.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager as ContextManager
from typing import Any, TypeVar

import jax


def x64_enabled() -> ContextManager[None]:
    """A context in which ``jax_enable_x64`` is on."""
    if hasattr(jax, "enable_x64"):  # jax >= 0.7
        return jax.enable_x64(True)
    from jax.experimental import enable_x64  # type: ignore[attr-defined]  # jax 0.4.35 .. 0.6

    return enable_x64(True)


class _PublicX64State:
    @property
    def value(self) -> bool:
        return bool(jax.config.jax_enable_x64)  # type: ignore[attr-defined]


# ``X64_STATE.value``: whether ``jax_enable_x64`` is on in this thread's context. JAX's own
# state object where it has one (JAX 0.4.35 to 0.12 do), which every eager call's signature
# reads: 0.03 µs, where ``jax.config``'s attribute takes 0.09.
X64_STATE: Any = getattr(getattr(getattr(jax, "_src", None), "config", None), "enable_x64", None)
if not isinstance(getattr(X64_STATE, "value", None), bool):
    X64_STATE = _PublicX64State()


def x64_on() -> bool:
    """Whether ``jax_enable_x64`` is on here (in this thread's context)."""
    return X64_STATE.value


def x64_enabled_if(needed: bool) -> ContextManager[None]:
    """``x64_enabled()`` where ``needed``, else no change at all (never turns x64 off)."""
    return x64_enabled() if needed else contextlib.nullcontext()


_T = TypeVar("_T")


def _swappable(state: Any) -> bool:
    """Whether a config state can be set and restored by its thread-local value alone: what its
    context manager does where the state has no thread-local hook (JAX 0.10's states have none;
    where a JAX lacks these methods, the context managers are used)."""
    has = all(hasattr(state, m) for m in ("swap_local", "set_local"))
    return has and getattr(state, "_update_thread_local_hook", True) is None


_STATES: tuple[Any, Any] = (getattr(jax, "enable_x64", None), getattr(jax, "default_device", None))
_SWAP = all(_swappable(s) for s in _STATES)


def call_with_x64_on(device: Any, fn: Callable[..., _T], *args: Any) -> _T:
    """``fn(*args)`` with x64 on and ``device`` JAX's default device, in this thread: what
    ``with x64_enabled(), jax.default_device(device)`` does, for a fifth of its cost (0.25
    against 1.3 µs on the AMD EPYC; a prepared model's whole remembered run is about 16 µs)."""
    if not _SWAP:
        with x64_enabled(), jax.default_device(device):
            return fn(*args)
    x64, default = _STATES
    x64_before, device_before = x64.swap_local(True), default.swap_local(device)
    try:
        return fn(*args)
    finally:
        default.set_local(device_before)
        x64.set_local(x64_before)
