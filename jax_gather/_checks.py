"""Argument checks shared by every op.

Each helper takes the op's name and the argument's name, so every message reads
``"<Op>: <argument> <rule>, got <value>"`` and names what was wrong and what was expected.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

# Raised by a comparison of symbolic dims (jax.export) that their constraints leave open.
_INCONCLUSIVE: type[Exception]
if hasattr(jax.errors, "InconclusiveDimensionOperation"):
    _INCONCLUSIVE = jax.errors.InconclusiveDimensionOperation
else:  # where older JAX (0.4.35) keeps it
    _INCONCLUSIVE = jax.core.InconclusiveDimensionOperation

MODES = ("checked", "clip", "fill", "promise_in_bounds")


def fail(exc_type: type[Exception], op_name: str, message: str) -> Exception:
    """Builds the exception every check raises: the op's name, then the message."""
    return exc_type(f"{op_name}: {message}")


def static_int(op_name: str, arg_name: str, value: Any) -> int:
    """An attribute that must be a Python integer known at trace time (never a traced value)."""
    if isinstance(value, (bool, np.bool_)):
        raise fail(TypeError, op_name, f"{arg_name} must be an integer, got the bool {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        pass
    kind = "a traced value" if _is_tracer(value) else f"{type(value).__name__} {value!r}"
    raise fail(
        TypeError,
        op_name,
        f"{arg_name} must be a static Python integer (attributes are static under jit), got {kind}",
    )


def canonical_axis(op_name: str, arg_name: str, axis: Any, rank: int) -> int:
    """Validates an ONNX axis attribute against rank ``rank`` and makes it non-negative."""
    axis = static_int(op_name, arg_name, axis)
    if not -rank <= axis < rank:
        raise fail(
            ValueError,
            op_name,
            f"{arg_name} must be in [{-rank}, {rank - 1}] for data of rank {rank}, got {axis}",
        )
    return axis % rank


def rank_at_least(op_name: str, arg_name: str, shape: Sequence[int], minimum: int) -> None:
    if len(shape) < minimum:
        raise fail(
            ValueError,
            op_name,
            f"{arg_name} must have rank >= {minimum}, got rank {len(shape)} (shape {tuple(shape)})",
        )


def dim_greater(a: Any, b: Any) -> bool | None:
    """``a > b`` for dims that may be symbolic (jax.export); None where the symbols and their
    constraints leave it open."""
    try:
        return bool(a > b)
    except _INCONCLUSIVE:
        return None


def check_mode(op_name: str, mode: Any) -> str:
    if mode not in MODES:
        valid = ", ".join(repr(m) for m in MODES)
        raise fail(ValueError, op_name, f"mode must be one of {valid}, got {mode!r}")
    return mode


def _is_tracer(value: Any) -> bool:
    return isinstance(value, jax.core.Tracer)


try:
    from jax._src.core import trace_state_clean as _trace_state_clean
except ImportError:  # pragma: no cover - depends on the JAX release
    _trace_state_clean = None  # type: ignore[assignment]


def under_a_trace() -> bool:
    """Whether a JAX trace is open (``jit``, ``vmap``, a branch of ``lax.cond``...): an op on
    constants there is staged into a program that may never run, so it judges them in the
    program rather than raising now."""
    return _trace_state_clean is not None and not _trace_state_clean()
