"""Where the checked mode's eager call spends its time on the device at hand, against its floor.

    python benchmarks/checked_eager_breakdown.py [--rounds 11]

On an accelerator the checked mode's eager call (:func:`jax_gather._device_checked.checked_on_device`) is
one program that gathers and judges the indices, and one int8 verdict read on the host. This
times, round by round in one process, the overhead section's eager shapes (a 1000x64 float32
table, 64 ids; GatherElements of 100x64 by 100x16) for:

- ``jnp.take`` and ``take_along_axis``, waited for (the peers);
- one program that gathers and judges, waited for with nothing read (the floor of any call that
  computes a verdict), then its verdict read from the device's memory or from host memory that
  the program wrote into (``pinned_host``), in the ways JAX offers;
- ``jax.jit(checkify(f))`` and ``err.throw()``, JAX's own checked gather;
- the library's call as it is, and with its verdict left in the device's memory.

Each row prints its median time and its ratio to ``jnp.take``'s in the same round. On a CPU the
library judges the indices on the host instead, so its rows there are its host path.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import checkify

import jax_gather
from jax_gather import _device_checked, _eager
from jax_gather._cpu_client import single_device_sharding
from jax_gather.bench.overhead import COLS, IDS, ROWS
from jax_gather.bench.timing import time_call


def _median_call(call: Callable[[], Any], reps: int = 50) -> float:
    for _ in range(10):
        call()
    return time_call(call, reps)


def _library_call(call: Callable[[], Any], verdict_in_device_memory: bool) -> Callable[[], Any]:
    """``call``, its signature's eager call made anew with the verdict where asked."""
    real = _device_checked._host_memory_of
    if verdict_in_device_memory:
        _device_checked._host_memory_of = lambda where: None  # type: ignore[assignment]
    try:
        _eager.clear()
        call()  # makes and remembers the signature's call
    finally:
        _device_checked._host_memory_of = real  # type: ignore[assignment]
    return call


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rounds", type=int, default=11)
    args = parser.parse_args(argv)

    rng = np.random.default_rng(0)
    d = jnp.asarray(rng.standard_normal((ROWS, COLS), dtype=np.float32))
    i = jnp.asarray(rng.integers(0, ROWS, IDS))
    e = jnp.asarray(rng.standard_normal((100, COLS), dtype=np.float32))
    k = jnp.asarray(rng.integers(0, COLS, (100, 16)))
    (device,) = i.devices()
    print(f"JAX {jax.__version__} on {device} ({device.device_kind}); memories:", end=" ")
    print(", ".join(m.kind for m in device.addressable_memories()), flush=True)

    def gather_and_judge(d: Any, i: Any) -> Any:
        return d.at[i].get(mode="promise_in_bounds"), jnp.all((i >= 0) & (i < ROWS)).astype(jnp.int8)

    both = jax.jit(gather_and_judge)
    pinned = single_device_sharding(device, memory_kind="pinned_host")
    both_pinned = jax.jit(gather_and_judge, out_shardings=(single_device_sharding(device), pinned))

    def checked_by_jax(d: Any, i: Any) -> Any:
        checkify.check(jnp.all((i >= 0) & (i < ROWS)), "an index out of bounds")
        return d.at[i].get(mode="promise_in_bounds")

    checkified = jax.jit(checkify.checkify(checked_by_jax))

    def checkify_and_throw() -> Any:
        error, out = checkified(d, i)
        error.throw()
        return out.block_until_ready()

    ours = lambda: jax_gather.gather(d, i).block_until_ready()
    ours_elements = lambda: jax_gather.gather_elements(e, k, 1).block_until_ready()
    calls: dict[str, Callable[[], Any]] = {
        "jnp.take": lambda: jnp.take(d, i, axis=0).block_until_ready(),
        "take_along_axis": lambda: jnp.take_along_axis(e, k, 1).block_until_ready(),
        "one program, waited for": lambda: jax.block_until_ready(both(d, i)),
        "  verdict read: int()": lambda: int(both(d, i)[1]),
        "  verdict read: .item()": lambda: both(d, i)[1].item(),
        "  verdict read: device_get": lambda: jax.device_get(both(d, i)[1]),
        "  pinned host verdict: int()": lambda: int(both_pinned(d, i)[1]),
        "  pinned host verdict: .item()": lambda: both_pinned(d, i)[1].item(),
        "  pinned host verdict: np.asarray": lambda: np.asarray(both_pinned(d, i)[1]),
        "checkify + err.throw()": checkify_and_throw,
    }
    library = {
        "jax_gather.gather": (ours, False),
        "  verdict in device memory": (ours, True),
        "jax_gather.gather_elements": (ours_elements, False),
        "  verdict in device memory ": (ours_elements, True),
    }
    times: dict[str, list[float]] = {name: [] for name in [*calls, *library]}
    for _ in range(args.rounds):
        for name, call in calls.items():
            times[name].append(_median_call(call))
        for name, (call, in_device_memory) in library.items():
            times[name].append(_median_call(_library_call(call, in_device_memory)))
    base = np.array(times["jnp.take"])
    for name, values in times.items():
        ratios = np.array(values) / base
        print(
            f"{name:36s} {np.median(values) * 1e6:8.1f} µs   / jnp.take {np.median(ratios):5.2f} "
            f"({ratios.min():.2f}-{ratios.max():.2f})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
