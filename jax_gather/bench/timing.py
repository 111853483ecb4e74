"""How the benchmark times contenders, and what it concludes from the times.

Timing: paired rounds (:func:`paired_rounds`), each timing every contender (a median over a few
calls, after :data:`SETTLE_S` of untimed calls of the same contender), the order alternating
between rounds. Statistics: the median of the per-round ratios (:func:`paired`), with a
distribution-free interval for it (:func:`median_interval`) and its verdict against 1.0.
Ratios of the same round, because absolute times on a shared machine drift several-fold
between minutes while paired ratios do not.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

# The confidence asked of each interval; with 11 rounds the order statistics give 93.5%.
CONFIDENCE = 0.9
# onnxruntime's worker threads spin for about 45 ms after each run (measured with
# /proc/<tid>/schedstat); on a 2-core machine a contender timed in that window loses a core
# (the int8 embedding lookup measured 0.30-0.35 ms there against 0.14-0.17 ms otherwise).
SETTLE_S = 0.06


def ready(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, waited for: a timed JAX call includes its work, not only its dispatch."""
    return fn(*args).block_until_ready()


def time_call(call: Callable[[], Any], reps: int) -> float:
    """The median of ``reps`` timed calls, in seconds."""
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def _settle(call: Callable[[], Any], seconds: float) -> None:
    """Untimed calls for ``seconds`` (one at least), so the previous contender's idle threads
    have parked and this one's are awake when its timing starts."""
    start = time.perf_counter()
    call()
    while time.perf_counter() - start < seconds:
        call()


def paired_rounds(
    calls: dict[str, Callable[[], Any]], rounds: int, reps: int, settle: float = SETTLE_S
) -> dict[str, list[float]]:
    """Each contender's time in each round (after two untimed calls to compile and warm up)."""
    for call in calls.values():  # compile and warm up
        call()
        call()
    names = list(calls)
    per_round: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            _settle(calls[name], settle)
            per_round[name].append(time_call(calls[name], reps))
    return per_round


def page_faults_per_call(call: Callable[[], Any], reps: int) -> float | None:
    """Minor page faults of the whole process per call (fresh pages the kernel had to zero);
    None where ``getrusage`` does not exist (Windows)."""
    try:
        import resource
    except ImportError:
        return None
    call()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(reps):
        call()
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / reps


def memcpy_bandwidth(nbytes: int, reps: int) -> float:
    """Bytes per second of a same-size copy (read + write), measured now."""
    src = np.ones(max(nbytes // 4, 1), np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    return 2 * src.nbytes / time_call(lambda: np.copyto(dst, src), reps)


# ---- statistics -----------------------------------------------------------------------------------


def median_ratio(a: Any, b: Any) -> float:
    """The median of the per-round ratios a / b."""
    return float(np.median(np.asarray(a) / np.asarray(b)))


def paired(a: Any, b: Any) -> tuple[float, tuple[float, float, float]]:
    """The median of the per-round ratios a / b, and its interval."""
    ratios = np.asarray(a) / np.asarray(b)
    return float(np.median(ratios)), median_interval(ratios)


def median_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """A distribution-free confidence interval for the median of what ``values`` sample.

    The k-th smallest and the k-th largest of n values bracket the population's median with
    probability 1 - 2 P(B <= k - 1), B ~ Binomial(n, 1/2), whatever the distribution; k is the
    largest that keeps that at least ``confidence``. Returns (low, high, coverage); with too few
    values for ``confidence`` it is (min, max) and the smaller coverage they have.

    Example:
      >>> median_interval([0.9, 1.1, 1.0, 0.95, 1.05, 0.97, 1.02, 0.99, 1.3, 0.8, 1.01])
      (0.95, 1.05, 0.93...)
    """
    ordered = np.sort(np.asarray(values, dtype=float))
    n = len(ordered)
    if n == 0:
        raise ValueError("median_interval: values must not be empty")
    tail = lambda k: sum(math.comb(n, j) for j in range(k)) / 2**n  # P(B <= k - 1)
    k = 1
    while k + 1 <= (n + 1) // 2 and 1 - 2 * tail(k + 1) >= confidence:
        k += 1
    return float(ordered[k - 1]), float(ordered[n - k]), 1 - 2 * tail(k)


def verdict(interval: Sequence[float]) -> str:
    """Where a ratio's interval lies against 1.0, the ratio of two equally fast contenders."""
    low, high = interval[0], interval[1]
    return "ahead" if high < 1.0 else "behind" if low > 1.0 else "level"


def geomean(values: Sequence[float]) -> float:
    """The geometric mean: the mean of ratios that treats 2x and 0.5x alike."""
    return math.exp(np.mean(np.log(values)))
