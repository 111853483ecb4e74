"""Argument checks shared by every op.

Each helper takes the op's name and the argument's name, so every message reads
``"<Op>: <argument> <rule>, got <value>"`` and names what was wrong and what was expected.
"""

from __future__ import annotations

import enum
import functools
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


class Mode(enum.Enum):
    """What the gather does with indices out of bounds: the four public modes, by their names,
    and the one the library picks for itself."""

    CHECKED = "checked"
    CLIP = "clip"
    FILL = "fill"
    PROMISE_IN_BOUNDS = "promise_in_bounds"
    # Indices proven in [0, s-1] (on the host, or by a device's reduction): gathered as they
    # are, with no index arithmetic. Never a user's.
    IN_RANGE = "in_range"

    @property
    def fills(self) -> bool:
        """Whether an out-of-bounds position reads the fill value (traced "checked" does)."""
        return self in (Mode.FILL, Mode.CHECKED)


MODES = tuple(m.value for m in Mode if m is not Mode.IN_RANGE)

# The attribute under which an exception built by ``fail`` keeps its op's name and its message.
_WORDS = "jax_gather_words"


def fail(exc_type: type[Exception], op_name: str, message: str) -> Exception:
    """Builds the exception every check raises: the op's name, then the message."""
    error = exc_type(f"{op_name}: {message}")
    setattr(error, _WORDS, (op_name, message))
    return error


# The memory space of arrays in a device's host memory (``pinned_host``): JAX from 0.5 or so types
# it on avals, and refuses ops that mix it with the device's own, which the ops' constants are in.
_HOST_SPACE = getattr(getattr(getattr(jax, "memory", None), "Space", None), "Host", None)


def check_placement(op_name: str, data: Any, indices: Any) -> None:
    """Refuses data and indices placed where the op cannot take them together, with an error
    naming the op and the argument, where JAX's own names the op's internal program: an array
    (or tracer) in a device's host memory, and two committed arrays on different devices."""
    check_device_memory(op_name, data=data, indices=indices)
    data_devices, indices_devices = _committed_devices(data), _committed_devices(indices)
    if data_devices is None or indices_devices is None or data_devices == indices_devices:
        return
    raise fail(
        ValueError,
        op_name,
        f"data and indices must be on the same devices, got data on {_named(data_devices)} and "
        f"indices on {_named(indices_devices)}; move one to the other's with "
        "jax.device_put(indices, data.sharding)",
    )


def _committed_devices(array: Any) -> frozenset | None:
    """The devices of a concrete JAX array committed to them (``jax.device_put`` to a device or
    sharding, or a result of such), else None: JAX moves an uncommitted one where needed."""
    if not isinstance(array, jax.Array) or isinstance(array, jax.core.Tracer):
        return None
    if not getattr(array, "committed", False):
        return None
    return frozenset(array.sharding.device_set)


def _named(devices: frozenset) -> str:
    ordered = sorted(devices, key=lambda d: (d.platform, d.id))
    return repr(ordered[0]) if len(ordered) == 1 else f"{len(ordered)} devices {ordered}"


def check_device_memory(op_name: str, **arrays: Any) -> None:
    """Refuses JAX arrays (and tracers) in a device's host memory: the ops' programs compute in
    the device's memory, and JAX refuses to mix the two (``jnp.take`` of such arrays fails as
    well), so a clear error here rather than one from inside the op's trace."""
    if _HOST_SPACE is None:
        return
    for name, array in arrays.items():
        if getattr(getattr(array, "aval", None), "memory_space", None) == _HOST_SPACE:
            kind = getattr(getattr(array, "sharding", None), "memory_kind", None)
            where = f"host memory ({kind!r})" if isinstance(kind, str) else "host memory"
            raise fail(
                ValueError,
                op_name,
                f"{name} must be in the device's memory, got {where}; move it there with "
                f"jax.device_put({name}, jax.memory.Space.Device)",
            )


def named_for(error: Exception, op_name: str, subject: str) -> Exception | None:
    """The error ``fail`` built for ``op_name`` (an IndexError, TypeError or ValueError), worded
    for ``subject`` instead: a versioned op ("Gather-8: ...") or a model's node ("Gather node
    'g1': ..."). None for any other error, which goes on as it is."""
    words = getattr(error, _WORDS, None)
    if words is None or words[0] != op_name or type(error) not in (IndexError, TypeError, ValueError):
        return None
    return fail(type(error), subject, words[1])


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


def check_mode(op_name: str, mode: Any) -> Mode:
    """A user's mode, one of ``MODES``, as a :class:`Mode`."""
    if isinstance(mode, Mode) and mode is not Mode.IN_RANGE:
        return mode
    if type(mode) is not str or mode not in MODES:
        valid = ", ".join(repr(m) for m in MODES)
        raise fail(ValueError, op_name, f"mode must be one of {valid}, got {mode!r}")
    return Mode(mode)


def _is_tracer(value: Any) -> bool:
    return isinstance(value, jax.core.Tracer)


try:  # JAX from 0.4.36: the context's trace, read directly (0.07 µs, where is_top_level takes 0.2)
    from jax._src.core import (
        eval_trace as _eval_trace,
        top_axis_env as _top_axis_env,
        trace_ctx as _trace_ctx,
    )
except ImportError:  # pragma: no cover - depends on the JAX release
    _trace_ctx = None  # type: ignore[assignment]
try:
    from jax._src.core import trace_state_clean as _trace_state_clean
except ImportError:  # pragma: no cover - depends on the JAX release
    _trace_state_clean = None  # type: ignore[assignment]


def under_a_trace() -> bool:
    """Whether a JAX trace is open (``jit``, ``vmap``, a branch of ``lax.cond``...): an op on
    constants there is staged into a program that may never run, so it judges them in the
    program rather than raising now."""
    if _trace_ctx is not None:
        return _trace_ctx.trace is not _eval_trace or _trace_ctx.axis_env is not _top_axis_env
    return _trace_state_clean is not None and not _trace_state_clean()


@functools.lru_cache(maxsize=64)
def backend_holds(dtype: np.dtype) -> bool:
    """Whether JAX's default backend can hold an array of ``dtype``: asked once a process and type
    by placing one element (about 30 µs). Fact: JAX 0.12.1 names float8_e5m3fnu, which XLA:CPU
    has no type for; placing, copying or gathering it fails inside XLA, ``jnp.take`` included."""
    with jax.ensure_compile_time_eval():  # placed now, also while a trace is open
        try:
            jax.device_put(np.zeros(1, dtype))
        except jax.errors.JaxRuntimeError:
            return False
    return True
