"""``checked``: a function run under checkify, compiled once per signature, whose failed
library check raises the error an eager call raises."""

from __future__ import annotations

import functools
import re
import warnings
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

import jax
import numpy as np
from jax.experimental import checkify

from jax_gather import _index_check

try:
    from jax._src.checkify import OOBError as _JAX_INDEX_ERROR
except ImportError:  # pragma: no cover - depends on the JAX release
    _JAX_INDEX_ERROR = None  # type: ignore[assignment,misc]

F = TypeVar("F", bound=Callable[..., Any])

# The library's failures where its check primitive is unavailable (checkify.debug_check then
# records them): known by their words, an op's name first.
_LIBRARY_WORDS = re.compile(r"^(Gather|GatherElements|GatherND)(-\d+)?: ")
_FILL_FAILURE = re.compile(r"^[\w-]+: fill_value .* cannot be represented in the data dtype ")
_SUFFIX = " (`check` failed)"
# What a call passes to the program as an argument; anything else is static (see checked).
_ARRAYS = (jax.Array, np.ndarray, np.generic)


def _under_a_trace(fn: Any) -> TypeError:
    name = getattr(fn, "__name__", "fn")
    return TypeError(
        f"jax_gather.checked({name}) was called inside a JAX transformation (its arguments, or "
        "the values it reads, are tracers), where no error can be raised; jax_gather.checked "
        "goes outside jit and vmap: jax_gather.checked(jax.jit(f)), "
        "jax_gather.checked(jax.jit(jax.vmap(f)))"
    )


def checked(fn: F, *, errors: frozenset[Any] = checkify.user_checks) -> F:
    """Wraps ``fn`` so that an out-of-bounds index of the library's ops inside it raises
    ``IndexError``, as an eager call does.

    Under ``jax.jit`` (or ``vmap``, ``grad``) indices are traced and cannot be checked on the
    host; the "checked" mode then records a checkify check, and so does "promise_in_bounds"
    (a broken promise is reported in the same words). ``checked(fn)`` compiles
    ``jax.jit(checkify.checkify(fn))`` once per signature of its arguments and, on each call,
    raises the first failure: a library check as the ``IndexError`` an eager call raises (with
    the same message; under ``vmap`` the position leads with the batch element,
    ``indices[2, 1]``), a traced ``fill_value`` the data dtype cannot hold (int8 data, 300) as
    the eager ``ValueError``, and any other check as checkify raises it (``err.throw()``): a
    user's own ``checkify.check`` keeps its message and type. Otherwise it returns ``fn``'s
    result. Without it, a jitted call returns the "fill" result for out-of-bounds positions in
    the "checked" mode, and converts a bad traced ``fill_value`` as ``astype`` does.

    Only the library's checks (and the user's own, which checkify calls user checks too) are
    on by default: JAX's own checks also flag well-defined code, such as ``jnp.take`` with
    ``mode="fill"`` or ``x.at[i].set(v, mode="drop")``. Ask for them with ``errors``, a set of
    checkify's errors added to the user checks: ``errors=checkify.index_checks`` (JAX's
    out-of-bounds indexing then raises ``IndexError`` too), or ``checkify.all_checks``. Where
    JAX cannot trace its own index checks for ``fn`` (its checkify rules fail for batched
    scatters, as in the gradient of GatherElements, and inside ``shard_map``), the wrapper
    warns once and keeps only the other checks for that function.

    Arrays (``jax.Array``, NumPy arrays and scalars) anywhere in the arguments are arguments
    of the compiled program; every other leaf (a Python number, a string, ``None``) is static,
    as under ``jax.jit`` with ``static_argnums``: each new value traces ``fn`` again. The
    wrapper goes outside ``jit`` and ``vmap``: called under a trace, it raises ``TypeError``.

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
    enabled = frozenset(errors) | checkify.user_checks
    programs: dict[Hashable, Callable[..., Any]] = {}

    def program(treedef: Any, static: tuple[tuple[int, type, Any], ...], errors: frozenset[Any]) -> Any:
        """``fn`` under checkify with ``errors`` and ``jit``, taking the array leaves of a call
        of this structure and these static leaves."""

        def flat(*arrays: Any) -> Any:
            leaves: list[Any] = list(arrays)
            for k, _, value in static:
                leaves.insert(k, value)
            args, kwargs = jax.tree.unflatten(treedef, leaves)
            return fn(*args, **kwargs)

        flat.__name__ = flat.__qualname__ = getattr(fn, "__name__", "fn")  # JAX's names for it
        return jax.jit(checkify.checkify(flat, errors=errors))

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        nonlocal enabled
        leaves, treedef = jax.tree.flatten((args, kwargs))
        arrays, static = [], []
        for k, leaf in enumerate(leaves):
            if isinstance(leaf, jax.core.Tracer):
                raise _under_a_trace(fn)
            if isinstance(leaf, _ARRAYS):
                arrays.append(leaf)
            else:  # with its type: 1, 1.0 and True are equal keys, not equal programs
                static.append((k, type(leaf), leaf))
        key: Hashable = (treedef, tuple(static))
        try:
            call = programs.get(key)
        except TypeError:  # an unhashable static leaf: traced for this call alone
            key, call = None, None
        if call is None:
            call = program(treedef, tuple(static), enabled)
            if key is not None:
                programs[key] = call
        try:
            error, out = call(*arrays)
        except Exception:
            if checkify.index_checks.isdisjoint(enabled):
                raise
            # Retrying without JAX's index checks tells their failure from one of fn itself,
            # which recurs here and propagates.
            fewer = enabled - checkify.index_checks
            call = program(treedef, tuple(static), fewer)
            error, out = call(*arrays)
            enabled = fewer
            programs.clear()
            if key is not None:
                programs[key] = call
            warnings.warn(
                f"jax_gather.checked({getattr(fn, '__name__', 'fn')}): JAX cannot trace "
                "its own index checks for this function; only jax_gather's checks and the "
                "user's own apply.",
                RuntimeWarning,
                stacklevel=2,
            )
        _raise_if_failed(fn, error)
        return out

    return run  # type: ignore[return-value]


def _raise_if_failed(fn: Any, error: checkify.Error) -> None:
    """Raises the first failure recorded in ``error`` (see :func:`checked`)."""
    try:
        failure = error.get_exception()
    except jax.errors.ConcretizationTypeError:  # fn closed over a tracer of a trace around
        raise _under_a_trace(fn) from None
    if failure is None:
        return
    library = getattr(_index_check, "LibraryCheckError", None)
    if library is not None and isinstance(failure, library):
        raise failure.raises(str(failure)) from None
    # Inside shard_map each device checks its own block: one failure per device that failed.
    per_device = list(getattr(failure, "error_mapping", {}).values())
    if library is not None and per_device and all(isinstance(f, library) for f in per_device):
        raise per_device[0].raises(str(failure)) from None
    if _JAX_INDEX_ERROR is not None and isinstance(failure, _JAX_INDEX_ERROR):  # JAX's own, if asked
        raise IndexError(str(failure)) from None
    message = str(failure).removesuffix(_SUFFIX)
    if library is None and _LIBRARY_WORDS.match(message):  # pragma: no cover - older JAX
        raise (ValueError if _FILL_FAILURE.match(message) else IndexError)(message) from None
    error.throw()
