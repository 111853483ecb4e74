"""What keeping bfloat16's bits costs: the library against itself without the pin.

    python benchmarks/pinned_bits.py [--rounds N] [--only TEXT]

Where XLA:CPU moves single bfloat16 elements through float32 (``_fill.xla_cpu_keeps_bits``),
the select of "fill" works on bit patterns pinned by ``_fill.pinned_bits`` (or, from JAX 0.11
where it pays, against a pinned fill: ``_fill_pin``). Each row times,
under ``jit`` in "fill", the library's program ("with"), the program it compiles where the probe
is made to answer that XLA keeps the bits ("without": no pin, and the gather as XLA:CPU makes
it), and "with" compiled again (A/A), in interleaved paired rounds (``bench.paired_rounds``),
beside jnp's "fill" of the same gather. Printed: the median over rounds of with / without, of
A/A ("with" compiled again / "with") and of with / jnp, each with its distribution-free
interval. docs/design.md quotes a run.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import jax
import ml_dtypes
import numpy as np

import jax_gather
from jax_gather import _fill, bench

Fn = Callable[[jax.Array, jax.Array], jax.Array]


class Case(NamedTuple):
    name: str
    shape: tuple[int, ...]
    index_shape: tuple[int, ...]
    axis: int  # the axis the indices read
    op: Fn  # the library's "fill"
    peer: Fn  # the same gather written with jnp, in "fill" (NaN, the library's default fill)


def _gather(name: str, shape: tuple[int, ...], n: int, axis: int) -> Case:
    op = lambda d, i: jax_gather.gather(d, i, axis, mode="fill")
    peer = lambda d, i: jax.numpy.take(d, i, axis, mode="fill", fill_value=jax.numpy.nan)
    return Case(name, shape, (n,), axis, op, peer)


def _rows_nd(name: str, shape: tuple[int, ...], n: int) -> Case:
    op = lambda d, i: jax_gather.gather_nd(d, i, mode="fill")
    peer = lambda d, i: d.at[i[:, 0]].get(mode="fill", fill_value=jax.numpy.nan)
    return Case(name, shape, (n, 1), 0, op, peer)


def cases() -> list[Case]:
    """Rows of 4 to 1024 from 16 to 8192 ids, columns, GatherND rows, and a table of one row.
    (A gather of one element an index is not pinned.)"""
    out = [
        _gather(f"gather rows of {w}, {n} ids", (4096, w), n, 0)
        for w in (4, 16, 64, 1024)
        for n in (16, 128, 512, 2048, 8192)
    ]
    out += [_gather(f"gather {n} of 1024 columns", (512, 1024), n, 1) for n in (16, 256, 2048)]
    out += [_rows_nd(f"gather_nd {n} rows of 64", (4096, 64), n) for n in (16, 512, 4096)]
    out += [_gather("gather from one row of 64, 512 ids", (1, 64), 512, 0)]
    return out


@contextmanager
def _unpinned() -> Iterator[None]:
    """Programs traced inside compile as if XLA:CPU kept bfloat16's bits."""
    probe = _fill._xla_cpu_keeps_bits
    _fill._xla_cpu_keeps_bits = lambda dtype: True  # type: ignore[assignment]
    jax.clear_caches()  # the op's inner programs, traced with the pin
    try:
        yield
    finally:
        _fill._xla_cpu_keeps_bits = probe  # type: ignore[assignment]
        jax.clear_caches()


def _compiled(fn: Fn, d: jax.Array, i: jax.Array) -> Callable[[], Any]:
    lowered = jax.jit(fn).lower(d, i)
    compiled = lowered.compile()
    call = lambda: compiled(d, i).block_until_ready()
    call.text = lowered.as_text()  # type: ignore[attr-defined]  # StableHLO, without source locations
    return call


def run_case(case: Case, rounds: int) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    op, size = case.op, case.shape[case.axis]
    d = jax.numpy.asarray(rng.standard_normal(case.shape).astype(ml_dtypes.bfloat16))
    i = jax.numpy.asarray(rng.integers(-size, size, case.index_shape).astype(np.int32))
    with_, again = _compiled(op, d, i), _compiled(lambda a, b: op(a, b), d, i)
    with _unpinned():
        without = _compiled(lambda a, b: op(a, b), d, i)
    peer = _compiled(case.peer, d, i)
    # The pin of the rows (an exclusive or) or of the fill (JAX 0.11 and later, where it pays).
    if again.text == without.text:  # type: ignore[attr-defined]
        raise ValueError("the pin does not apply here: both programs are the same")
    calls = {"with": with_, "A/A": again, "without": without, "jnp": peer}
    values = [np.asarray(calls[name]()).astype(np.float32) for name in ("with", "without", "jnp")]
    for other in values[1:]:  # the same values; bit patterns aside (what the pin keeps)
        np.testing.assert_array_equal(np.nan_to_num(values[0]), np.nan_to_num(other))
    reps = max(5, int(0.01 / bench.timing.time_call(with_, 20)))
    times = bench.paired_rounds(calls, rounds, reps)
    ratio, interval = bench.paired(times["with"], times["without"])
    aa, aa_interval = bench.paired(times["A/A"], times["with"])
    over_jnp, jnp_interval = bench.paired(times["with"], times["jnp"])
    return {
        "over_jnp": over_jnp,
        "jnp_interval": jnp_interval,
        "without_us": float(np.median(times["without"])) * 1e6,
        "ratio": ratio,
        "interval": interval,
        "aa": aa,
        "aa_interval": aa_interval,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--only", default="", help="only the cases whose name holds this text")
    args = parser.parse_args(argv)
    print(f"XLA:CPU keeps bfloat16's bits: {_fill.xla_cpu_keeps_bits(np.dtype(ml_dtypes.bfloat16))}")
    for case in cases():
        if args.only not in case.name:
            continue
        r = run_case(case, args.rounds)
        lo, hi, _ = r["interval"]
        alo, ahi, _ = r["aa_interval"]
        print(
            f"{case.name:40s} without {r['without_us']:8.1f} us   with / without {r['ratio']:.2f} "
            f"({lo:.2f}-{hi:.2f})   A/A {r['aa']:.2f} ({alo:.2f}-{ahi:.2f})   "
            f"with / jnp {r['over_jnp']:.2f} ({r['jnp_interval'][0]:.2f}-{r['jnp_interval'][1]:.2f})",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
