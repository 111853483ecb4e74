"""A bounds check that is free outside checkify.

``checkify.debug_check`` puts an effect in every program that contains it, and an effect makes
``jax.jit`` take its slow, token-passing dispatch path (measured: +55 us per call, +0.4 ms on
a 16 MiB gather) and makes ``jax.export`` unable to serialize the program. This module instead
defines a primitive that passes the indices through unchanged and carries the check as
operands: lowered, it is the identity (XLA drops the unused check operands), and under
``checkify`` its error rule records a ``FailedCheckError`` exactly as ``debug_check`` would.

The error rule plugs into checkify's private rule table. Should a JAX release move it, this
falls back to ``checkify.debug_check``: still correct, only slower (and ``jax_gather.checked``
then tells the library's failures from the user's own checks by their words alone).

A failure is recorded as a :class:`LibraryCheckError`, a ``FailedCheckError`` of its own class:
``jax_gather.checked`` raises it as the error an eager call raises, and passes every other
failure (a user's own ``checkify.check``) on as checkify raises it. Under ``vmap`` the message
gains the batch element: ``indices[2, 1]`` for position 1 of example 2.
"""

from __future__ import annotations

import re
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import checkify
from jax.interpreters import ad, batching, mlir

try:
    import inspect

    from jax._src import checkify as _checkify_internals
    from jax.extend.core import Primitive

    _ERROR_RULES: dict[Any, Any] | None = _checkify_internals.error_checks
    _assert_func = _checkify_internals.assert_func
    _FailedCheckError = _checkify_internals.FailedCheckError
    _get_traceback = _checkify_internals.get_traceback
    # JAX 0.11 threads a CheckifyContext through every error rule and into assert_func.
    _TAKES_CONTEXT = next(iter(inspect.signature(_assert_func).parameters)) == "ctx"
except (ImportError, AttributeError, TypeError, ValueError):  # pragma: no cover - depends on the JAX release
    _ERROR_RULES = None


def check_indices(
    indices: jax.Array, ok: jax.Array, message: str, *fmt_args: jax.Array, error: str = "IndexError"
) -> jax.Array:
    """Returns ``indices``; under checkify, also fails with ``message.format(*fmt_args)``
    unless the scalar ``ok`` is True. ``error`` names the exception ``jax_gather.checked``
    raises for it ("IndexError" or "ValueError"), as an eager call would."""
    if _ERROR_RULES is None:  # pragma: no cover
        checkify.debug_check(ok, message, *fmt_args)
        return indices
    return _check_p.bind(indices, ok, *fmt_args, message=message, error=error)


# Where a batch rule puts the batch element: before the position of an index ("indices[1]"
# becomes "indices[{}, 1]", "indices = 7" becomes "indices[{}] = 7"), or, in a message with no
# position (a fill_value's), at its end.
_POSITIONS = re.compile(r"(\{\}|indices\[|indices = )")


def batched_message(message: str, fmt: list[Any], element: Any) -> tuple[str, list[Any]]:
    """``message`` and its format arguments ``fmt`` with the batch element ``element`` added
    where each position is named (see ``_POSITIONS``)."""
    parts, args, k = [], [], 0
    for part in _POSITIONS.split(message):
        if part == "{}":
            args.append(fmt[k])
            k += 1
        elif part == "indices[":
            part = "indices[{}, "
            args.append(element)
        elif part == "indices = ":
            part = "indices[{}] = "
            args.append(element)
        parts.append(part)
    if len(args) == len(fmt):
        parts.append(" (batch element {})")
        args.append(element)
    return "".join(parts), args


if _ERROR_RULES is not None:

    class LibraryCheckError(_FailedCheckError):
        """A failed check of the library's (its own class, so that no user's check is taken
        for one); its message is the eager error's, without checkify's suffix, and ``raises``
        the type an eager call raises. Each subclass is a pytree of its own (checkify keeps the
        class in the error's metadata)."""

        raises: type[Exception] = IndexError

        def __str__(self) -> str:
            return self.fmt_string.format(*self.args, **self.kwargs)

    class _IndexFailure(LibraryCheckError):
        raises = IndexError

    class _ValueFailure(LibraryCheckError):
        raises = ValueError

    _FAILURES = {"IndexError": _IndexFailure, "ValueError": _ValueFailure}

    _check_p = Primitive("jax_gather_check_indices")

    def _abstract_eval(indices: Any, *_: Any, message: str, error: str) -> Any:
        return indices

    def _lowering(ctx: Any, indices: Any, *_: Any, message: str, error: str) -> list[Any]:
        return [indices]

    def _jvp(primals: Any, tangents: Any, *, message: str, error: str) -> tuple[Any, Any]:
        return _check_p.bind(*primals, message=message, error=error), tangents[0]

    def _batch(args: Any, dims: Any, *, message: str, error: str) -> tuple[Any, Any]:
        indices, ok, *fmt = args
        indices_dim, ok_dim, *fmt_dims = dims
        if ok_dim is not None:
            # Report the first failing example, as checkify does for a batched check, and name it.
            ok = jnp.moveaxis(ok, ok_dim, 0)
            fmt = [
                f if d is None else _at_first_false(ok, jnp.moveaxis(f, d, 0)) for f, d in zip(fmt, fmt_dims)
            ]
            message, fmt = batched_message(message, fmt, jnp.argmin(ok).astype(jnp.int32))
            ok = jnp.all(ok)
        return _check_p.bind(indices, ok, *fmt, message=message, error=error), indices_dim

    def _at_first_false(ok: Any, values: Any) -> Any:
        """``values[argmin(ok)]`` (integer values, batched on dim 0), by a masked reduction
        rather than a dynamic index: that traces however the batch dim is sharded."""
        at = lax.broadcasted_iota(jnp.int32, ok.shape, 0) == jnp.argmin(ok)
        at = at.reshape(at.shape + (1,) * (values.ndim - 1))
        return jnp.max(jnp.where(at, values, jnp.iinfo(values.dtype).min), axis=0)

    def _error_rule(*args: Any, message: str, error: str) -> Any:
        context = args[:1] if _TAKES_CONTEXT else ()
        errors, enabled_errors, indices, ok, *fmt = args[len(context) :]
        if _FailedCheckError in enabled_errors:
            # Older checkify (jax 0.4.35) needs arrays in the payload, not Python scalars.
            failure = _FAILURES[error](_get_traceback(), message, *map(jnp.asarray, fmt))
            errors = _assert_func(*context, errors, jnp.logical_not(ok), failure)  # type: ignore[call-arg]
        return errors, indices

    _check_p.def_impl(lambda indices, *_, message, error: indices)
    _check_p.def_abstract_eval(_abstract_eval)
    mlir.register_lowering(_check_p, _lowering)
    ad.primitive_jvps[_check_p] = _jvp
    batching.primitive_batchers[_check_p] = _batch
    _ERROR_RULES[_check_p] = _error_rule

    # Older shard_map (jax 0.4.35 among them) checks replication with a rule per primitive and
    # refuses primitives without one. The check returns its first operand, so the
    # result is replicated as the indices are.
    from jax.experimental import shard_map as _shard_map

    if getattr(_shard_map, "register_check", None) is not None:  # pragma: no cover
        _shard_map.register_check(_check_p)(lambda mesh, indices_rep, *_, **__: indices_rep)  # type: ignore[attr-defined]
        _shard_map.register_norewrite(_check_p)  # type: ignore[attr-defined]
