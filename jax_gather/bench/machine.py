"""The machine a run measured, as the benchmark's JSON records it (:func:`describe_machine`)."""

from __future__ import annotations

from typing import Any


def describe_machine() -> dict[str, Any]:
    """The machine a run measured: versions, devices, and the CPU's model and the vector
    extensions XLA:CPU compiles for (the CPU lowerings' gains depend on them)."""
    import os
    import platform

    import jax

    from jax_gather._cpu_client import usable_cores

    return {
        "python": platform.python_version(),
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()],
        "cpu_count": os.cpu_count(),
        "usable_cores": usable_cores(),  # taskset, a container's cpuset: XLA's tasks per loop
        "machine": platform.machine(),
        "processor": _cpu_model() or platform.processor() or platform.machine(),
        # a virtual machine's model name may be the bare brand ("AMD EPYC"); the family and model
        # tell its generation (AMD family 25 holds Zen 3 and Zen 4, whose vector units differ)
        "cpu_id": _cpu_id(),
        "vector_extensions": _vector_extensions(),
        # --xla_cpu_max_isa=AVX2 makes XLA compile for fewer extensions than the CPU has
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
    }


def _cpuinfo() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return f.read()
    except OSError:  # not Linux
        return ""


def _cpu_model() -> str:
    for line in _cpuinfo().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return ""


def _cpu_id() -> str:
    """The CPU's vendor, family, model and stepping as /proc/cpuinfo gives them
    ("AuthenticAMD family 25 model 17 stepping 1"), or "" where it does not."""
    fields = {}
    for line in _cpuinfo().splitlines():
        if not line.strip():
            break  # the first processor's block
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    keys = ("vendor_id", "cpu family", "model", "stepping")
    if not all(fields.get(k) for k in keys):
        return ""
    vendor, family, model, stepping = (fields[k] for k in keys)
    return f"{vendor} family {family} model {model} stepping {stepping}"


def _vector_extensions() -> list[str]:
    flags = next(
        (line.split(":", 1)[1].split() for line in _cpuinfo().splitlines() if line.startswith("flags")), []
    )
    return [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "asimd", "sve") if f in flags]
