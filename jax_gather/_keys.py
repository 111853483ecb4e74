"""Arrays of typed PRNG keys (``jax.random.key``), which XLA has no type for: gathered a word
of the keys at a time.

``jax.random.key_data`` gives the keys' words, the keys' shape and then the words of one key
(two for threefry2x32, four for rbg). Each word, taken across every key, is an unsigned array
of the keys' own shape, which the op gathers as any array: its attributes, rules, errors and
error positions are those of the keys, its eager calls are remembered as any other, and a fill
fills every word (as ``jnp.take`` does, with the default of the words' dtype). The words taken
are wrapped back as keys of the same implementation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp


def is_key_array(data: Any) -> bool:
    """Whether ``data`` is an array of typed PRNG keys, or a tracer of one."""
    return isinstance(data, jax.Array) and jax.dtypes.issubdtype(data.dtype, jax.dtypes.prng_key)


def gather_keys(
    run: Callable[..., Any],
    plan_fn: Callable[..., Any],
    op_name: str,
    keys: jax.Array,
    indices: Any,
    attribute: Any,
    mode: Any,
    fill_value: Any,
) -> jax.Array:
    """``run(plan_fn, op_name, word, indices, attribute, mode, fill_value)`` (the op's body) on
    each word of ``keys``, wrapped back as keys."""
    words = jax.random.key_data(keys)
    per_key = words.shape[keys.ndim :]
    flat = words.reshape(keys.shape + (-1,))  # one trailing axis of words, whatever the key's shape
    taken = [
        run(plan_fn, op_name, flat[..., j], indices, attribute, mode, fill_value)
        for j in range(flat.shape[-1])
    ]
    gathered = jnp.stack(taken, axis=-1)
    gathered = gathered.reshape(gathered.shape[:-1] + per_key)
    return jax.random.wrap_key_data(gathered, impl=jax.random.key_impl(keys))
