"""An opt-in remedy for fresh-page faults on large CPU outputs (glibc only).

XLA's CPU runtime allocates each output buffer with ``malloc`` from its worker threads. With
glibc's defaults a large block is served by ``mmap`` (or trimmed back to the OS when freed), so
every call gets fresh pages that the kernel must zero on first touch: a 16 MiB output costs
4096 page faults per call, which can be most of the time of a gather. Keeping freed blocks in
the process makes the next call reuse warm pages.

Nothing here runs on import: changing a process-wide allocator policy is the user's decision.
"""

from __future__ import annotations

import ctypes
import dataclasses
import sys
import warnings

# glibc <malloc.h>
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4

_state: "AllocatorTuning | None" = None


@dataclasses.dataclass(frozen=True)
class AllocatorTuning:
    """What :func:`tune_cpu_allocator` did.

    Attributes:
      applied: whether the allocator's settings were changed.
      settings: the ``mallopt`` parameters set, by name.
      reason: why nothing was done, when ``applied`` is False.
    """

    applied: bool
    settings: tuple[tuple[str, int], ...] = ()
    reason: str = ""


def _glibc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        version = libc.gnu_get_libc_version
    except (OSError, AttributeError):  # musl and other C libraries have no such symbol
        return None
    version.restype = ctypes.c_char_p
    return libc


def tune_cpu_allocator(trim_threshold: int = 1 << 30) -> AllocatorTuning:
    """Makes glibc keep freed memory so large outputs reuse warm pages instead of faulting.

    Sets ``mallopt(M_MMAP_MAX, 0)`` (large blocks come from the heap, not fresh ``mmap``s) and
    ``mallopt(M_TRIM_THRESHOLD, trim_threshold)`` (freed memory is not handed back to the OS
    until that much is free at the top of the heap). Call it once, early, before the large
    arrays of your program exist; calling it again does nothing and returns the first result.

    The trade-off: memory a program frees stays in the process, up to ``trim_threshold`` per
    heap, instead of returning to the OS, so the resident size stays near its peak; memory is
    not leaked and is reused by later allocations. Where it cannot act (not Linux with glibc:
    macOS, Windows, musl) it does nothing and warns.

    Returns:
      An :class:`AllocatorTuning` describing what was done.

    Example:
      >>> import jax_gather
      >>> tuning = jax_gather.tune_cpu_allocator()
      >>> tuning.applied in (True, False)
      True
      >>> jax_gather.tune_cpu_allocator() is tuning  # idempotent
      True
    """
    global _state
    if _state is not None:
        return _state
    libc = _glibc()
    if libc is None:
        _state = AllocatorTuning(False, reason="not Linux with glibc: there is no mallopt to call")
        warnings.warn(f"tune_cpu_allocator: nothing done ({_state.reason})", RuntimeWarning, stacklevel=2)
        return _state
    settings = (("M_MMAP_MAX", _M_MMAP_MAX, 0), ("M_TRIM_THRESHOLD", _M_TRIM_THRESHOLD, int(trim_threshold)))
    done = []
    for name, param, value in settings:
        if libc.mallopt(param, value) != 1:
            warnings.warn(f"tune_cpu_allocator: mallopt({name}, {value}) failed", RuntimeWarning, stacklevel=2)
            continue
        done.append((name, value))
    _state = AllocatorTuning(bool(done), tuple(done), "" if done else "mallopt refused every setting")
    return _state
