"""Run a function under checkify and turn a failed bounds check into an IndexError."""

from __future__ import annotations

import functools
import warnings
from typing import Any, Callable, TypeVar

from jax.experimental import checkify

F = TypeVar("F", bound=Callable[..., Any])

_SUFFIX = " (`check` failed)"
# JAX's checkify rule for scatter ignores `operand_batching_dims` and fails while tracing with
# exactly this error; the backward pass of a batched gather (GatherElements, GatherND with
# batch_dims, any vmapped gather) contains such a scatter.
_JAX_SCATTER_CHECK_BUG = "tuple index out of range"


def checked(fn: F) -> F:
    """Wraps ``fn`` so that an out-of-bounds index inside it raises ``IndexError``.

    Under ``jax.jit`` (or ``vmap``, ``grad``) indices are traced and cannot be checked on the
    host; the "checked" mode then records a checkify check. ``checked(fn)`` runs ``fn`` under
    ``jax.experimental.checkify`` with those checks and JAX's own index checks (which also
    catch a broken ``"promise_in_bounds"`` and out-of-bounds indexing elsewhere in ``fn``), and
    raises ``IndexError`` with the message of the first failure; otherwise it returns ``fn``'s
    result. Without it, a jitted call returns the "fill" result for out-of-bounds positions.

    Where JAX cannot trace its own index checks (its checkify rule for batched scatters, which
    appear in the gradient of GatherElements and batched GatherND, fails), the wrapper warns
    once and keeps only the library's checks for that function.

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
    with_index_checks = checkify.checkify(fn, errors=checkify.user_checks | checkify.index_checks)
    library_checks_only = checkify.checkify(fn, errors=checkify.user_checks)
    use_index_checks = True

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        nonlocal use_index_checks
        if use_index_checks:
            try:
                error, out = with_index_checks(*args, **kwargs)
            except IndexError as e:
                if str(e).splitlines()[0] != _JAX_SCATTER_CHECK_BUG:
                    raise
                warnings.warn(
                    f"jax_gather.checked({getattr(fn, '__name__', 'fn')}): JAX cannot trace its "
                    "own index checks for this function (its checkify rule for batched scatters "
                    "fails); only jax_gather's bounds checks are applied.",
                    RuntimeWarning,
                    stacklevel=2,
                )
                use_index_checks = False
        if not use_index_checks:
            error, out = library_checks_only(*args, **kwargs)
        message = error.get()
        if message is not None:
            raise IndexError(message.removesuffix(_SUFFIX))
        return out

    return run  # type: ignore[return-value]
