"""Run a function under checkify and turn a failed bounds check into an IndexError (a failed
fill_value check into a ValueError)."""

from __future__ import annotations

import functools
import re
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

from jax.experimental import checkify

F = TypeVar("F", bound=Callable[..., Any])

_SUFFIX = " (`check` failed)"
_FILL_FAILURE = re.compile(r"^[\w-]+: fill_value .* cannot be represented in the data dtype ")
_ALL_CHECKS = checkify.user_checks | checkify.index_checks


def checked(fn: F) -> F:
    """Wraps ``fn`` so that an out-of-bounds index inside it raises ``IndexError``.

    Under ``jax.jit`` (or ``vmap``, ``grad``) indices are traced and cannot be checked on the
    host; the "checked" mode then records a checkify check, and so does "promise_in_bounds"
    (a broken promise is reported in the same words). ``checked(fn)`` runs ``fn`` under
    ``jax.experimental.checkify`` with those checks and JAX's own index checks (which catch
    out-of-bounds indexing elsewhere in ``fn``), and raises ``IndexError`` with the message of
    the first failure; otherwise it returns ``fn``'s result. Without it, a jitted call returns
    the "fill" result for out-of-bounds positions in the "checked" mode. A traced
    ``fill_value`` that the data dtype cannot hold (int8 data, 300) fails the same way, as the
    ``ValueError`` an eager call raises; without it, the value is converted as ``astype``
    converts it (300 wraps to 44, 1e6 becomes inf in float16).

    Where JAX cannot trace its own index checks for ``fn`` (its checkify rules fail for
    batched scatters, as in the gradient of GatherElements, and inside ``shard_map``), the
    wrapper warns once and keeps only the library's checks for that function.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> import jax_gather
      >>> lookup = jax_gather.checked(jax.jit(lambda table, ids: jax_gather.gather(table, ids)))
      >>> lookup(jnp.arange(6.0).reshape(3, 2), jnp.array([2, -1]))
      Array([[4., 5.],
             [4., 5.]], dtype=float32)
      >>> lookup(jnp.arange(6.0).reshape(3, 2), jnp.array([0, 3]))
      Traceback (most recent call last):
      ...
      IndexError: Gather: indices[1] = 3 is out of bounds for axis 0 of size 3 (valid range [-3, 2])
    """
    with_index_checks = checkify.checkify(fn, errors=_ALL_CHECKS)
    library_checks_only = checkify.checkify(fn, errors=checkify.user_checks)
    use_index_checks = True

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        nonlocal use_index_checks
        result = None
        if use_index_checks:
            try:
                result = with_index_checks(*args, **kwargs)
            except Exception:
                pass
        if result is None:
            # Retrying without JAX's index checks tells their failure from one of fn itself,
            # which recurs here and propagates.
            result = library_checks_only(*args, **kwargs)
            if use_index_checks:
                use_index_checks = False
                warnings.warn(
                    f"jax_gather.checked({getattr(fn, '__name__', 'fn')}): JAX cannot trace "
                    "its own index checks for this function; only jax_gather's bounds checks "
                    "apply.",
                    RuntimeWarning,
                    stacklevel=2,
                )
        error, out = result
        message = error.get()
        if message is not None:
            lines = [line.removesuffix(_SUFFIX) for line in message.splitlines()]
            # A traced fill_value the data dtype cannot hold is a bad value, as it is eagerly.
            error_type = ValueError if _FILL_FAILURE.match(lines[0]) else IndexError
            raise error_type("\n".join(lines))
        return out

    return run  # type: ignore[return-value]
