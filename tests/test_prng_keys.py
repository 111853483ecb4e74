"""Arrays of typed PRNG keys (``jax.random.key``), which XLA has no type for: each op gathers
whole keys, as the NumPy reference does on every word of them, in every mode, eagerly, under
``jit`` and under ``vmap``, with the rules and errors of an array of the keys' own shape."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_gather
from tests import reference

pytestmark = pytest.mark.core  # the fast tier: pytest -m core

# (op, its reference, the attribute's keyword, indices, attribute), on keys of shape (5, 3)
CASES = [
    (jax_gather.gather, reference.gather, "axis", [[4, -1], [0, 2]], 0),
    (jax_gather.gather, reference.gather, "axis", [2, -3], -1),
    (jax_gather.gather_elements, reference.gather_elements, "axis", [[0, 2, 1], [4, -1, 3]], 0),
    (jax_gather.gather_elements, reference.gather_elements, "axis", [[2], [-3], [0], [1], [1]], 1),
    (jax_gather.gather_nd, reference.gather_nd, "batch_dims", [[0, 2], [4, -1]], 0),
    (jax_gather.gather_nd, reference.gather_nd, "batch_dims", [[1], [2], [0], [0], [2]], 1),
]
IDS = [f"{op.__name__} {kw}={attr}" for op, _, kw, _, attr in CASES]


def _keys(impl: str, shape=(5, 3)):
    return jax.random.split(jax.random.key(7, impl=impl), int(np.prod(shape))).reshape(shape)


def _words(keys) -> np.ndarray:
    return np.asarray(jax.random.key_data(keys))


def _per_word(ref, words: np.ndarray, indices, attr, **kwargs) -> np.ndarray:
    """The reference on each word of the keys (their trailing axis), stacked back."""
    return np.stack([ref(words[..., j], indices, attr, **kwargs) for j in range(words.shape[-1])], axis=-1)


@pytest.mark.parametrize("how", ["eager", "jit", "vmap"])
@pytest.mark.parametrize("mode", ["checked", "clip", "fill", "promise_in_bounds"])
@pytest.mark.parametrize("impl", ["threefry2x32", "rbg"])
@pytest.mark.parametrize("op, ref, kw, indices, attr", CASES, ids=IDS)
def test_keys_are_gathered_whole(op, ref, kw, indices, attr, impl, mode, how):
    keys, indices = _keys(impl), np.asarray(indices)
    call = lambda k, i: op(k, i, **{kw: attr}, mode=mode)
    expected = _per_word(ref, _words(keys), indices, attr)
    if how == "eager":
        got = call(keys, indices)
    elif how == "jit":
        got = jax.jit(call)(keys, jnp.asarray(indices))
    else:  # two batches of keys, the second a permutation of the first
        both = jnp.stack([keys, keys[::-1]])
        got = jax.vmap(call, in_axes=(0, None))(both, jnp.asarray(indices))
        expected = np.stack([expected, _per_word(ref, _words(keys[::-1]), indices, attr)])
    assert got.dtype == keys.dtype  # keys of the same implementation
    np.testing.assert_array_equal(_words(got), expected)


@pytest.mark.parametrize("op, ref, kw, indices, attr", CASES, ids=IDS)
def test_out_of_bounds_keys_raise_as_any_array_of_their_shape_and_fill_every_word(op, ref, kw, indices, attr):
    keys = _keys("threefry2x32")
    bad = np.asarray(indices).copy()
    bad.flat[-1] = 9  # out of bounds for every axis of (5, 3)
    call = lambda d, i, mode="checked", **more: op(d, i, **{kw: attr}, mode=mode, **more)
    with pytest.raises(IndexError) as plain:
        call(np.zeros(keys.shape, np.uint32), bad)
    message = re.escape(str(plain.value))
    with pytest.raises(IndexError, match=message):
        call(keys, bad)
    with pytest.raises(IndexError, match=message):
        jax_gather.checked(jax.jit(call))(keys, jnp.asarray(bad))
    # "fill" fills each word: jnp.take's default for uint32, or the value given.
    words = _words(keys)
    for fill_value, fill in ((None, np.iinfo(np.uint32).max), (0, 0)):
        got = call(keys, bad, mode="fill", fill_value=fill_value)
        expected = _per_word(ref, words, bad, attr, mode="fill", fill=fill)
        np.testing.assert_array_equal(_words(got), expected)


def test_an_attribute_is_judged_against_the_keys_rank():
    keys = _keys("threefry2x32")
    with pytest.raises(
        ValueError, match=re.escape("Gather: axis must be in [-2, 1] for data of rank 2, got 2")
    ):
        jax_gather.gather(keys, [0], axis=2)
    with pytest.raises(TypeError, match="indices must have an integer dtype"):
        jax_gather.gather(keys, [0.5])
