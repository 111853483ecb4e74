"""Helpers for tests that look at the programs the ops lower to, or at the bits they return."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pathlib
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import jax
import numpy as np
from jax import export

from tests.compat import unregister_event_duration_listener

ROOT = pathlib.Path(__file__).resolve().parents[1]


def benchmark_script(name: str) -> Any:
    """``benchmarks/<name>.py`` imported as a module named ``name``."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def module_for(fn: Callable[..., Any], args: tuple, platform: str) -> str:
    """The StableHLO text of ``jax.jit(fn)`` exported for one platform (no device needed)."""
    return export.export(jax.jit(fn), platforms=(platform,))(*args).mlir_module()


@contextlib.contextmanager
def counting_compiles() -> Iterator[list[int]]:
    """Counts the XLA compilations inside the block, in the one element of the list it yields."""
    count = [0]

    def listener(event: str, duration: float, **kwargs: Any) -> None:
        count[0] += event == "/jax/core/compile/backend_compile_duration"

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        yield count
    finally:
        unregister_event_duration_listener(listener)


def check_linear_to_second_order(
    fn: Callable[..., Any], args: tuple, seed: int = 0, tol: float = 1e-5
) -> None:
    """What ``check_grads(fn, args, order=2, modes=("fwd", "rev"))`` checks, for ``fn`` linear in
    ``args``, in one compiled program rather than one per derivative and finite difference.

    For a linear function the finite difference of ``check_grads`` is the function of the
    tangent itself, and every derivative of its JVP and VJP with respect to the primals is zero:
    the JVP is asserted equal to ``fn(tangents)``, the VJP its transpose (the dot-product test
    ``check_grads`` makes), and the four second derivatives (forward and reverse over forward
    and reverse) zero; a rule that cannot be differentiated again fails as it would there.
    """
    rng = np.random.default_rng(seed)
    draw = lambda shape, dtype: rng.standard_normal(shape).astype(dtype)
    tangents = tuple(draw(np.shape(a), np.asarray(a).dtype) for a in args)
    others = tuple(draw(np.shape(a), np.asarray(a).dtype) for a in args)
    out = jax.eval_shape(fn, *args)
    cotangent = draw(out.shape, out.dtype)

    def derivatives(primals: tuple, tangents: tuple, others: tuple, cotangent: Any) -> dict[str, Any]:
        forward = lambda *p: jax.jvp(fn, p, tangents)[1]
        reverse = lambda *p: jax.vjp(fn, *p)[1](cotangent)
        return {
            "fn(tangents)": fn(*tangents),
            "forward": forward(*primals),
            "reverse": reverse(*primals),
            "forward over forward": jax.jvp(forward, primals, others)[1],
            "forward over reverse": jax.jvp(reverse, primals, others)[1],
            "reverse over forward": jax.vjp(forward, *primals)[1](cotangent),
            "reverse over reverse": jax.vjp(reverse, *primals)[1](others),
        }

    got = jax.jit(derivatives)(args, tangents, others, cotangent)
    np.testing.assert_allclose(got["forward"], got["fn(tangents)"], rtol=tol, atol=tol)
    transposed = sum(np.vdot(r, t) for r, t in zip(got["reverse"], tangents))
    np.testing.assert_allclose(transposed, np.vdot(cotangent, got["forward"]), rtol=tol, atol=tol)
    second = ("forward over forward", "forward over reverse", "reverse over forward", "reverse over reverse")
    for name in second:
        for value in jax.tree_util.tree_leaves(got[name]):
            assert not np.any(np.asarray(value)), f"{name} of a linear function is not zero: {value}"


def bits(x: Any) -> np.ndarray:
    """The bit patterns of ``x``, as unsigned integers of its width (NaN payloads, -0.0 kept)."""
    x = np.asarray(x)
    return x.view(f"u{x.dtype.itemsize}")


def random_bits(rng: np.random.Generator, dtype: Any, shape: tuple) -> np.ndarray:
    """An array of ``dtype`` from random bytes: for floats every bit pattern, so a conversion on
    the way (NaN payloads, -0.0, subnormals) would show; 0 or 1 for bool."""
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    size = int(np.prod(shape)) * np.dtype(dtype).itemsize
    return np.frombuffer(rng.bytes(size), dtype).reshape(shape)


def run_with_cpu_devices(*args: str, devices: int = 8, timeout: float = 900) -> subprocess.CompletedProcess:
    """A fresh Python (``python *args``, from the repository root) whose JAX has ``devices`` CPU
    devices and no other platform: the one way the tests get a multi-device mesh, since JAX fixes
    its device count when it starts. Returns the finished process; its output is text."""
    flags = os.environ.get("XLA_FLAGS", "")
    env = dict(
        os.environ,
        XLA_FLAGS=f"{flags} --xla_force_host_platform_device_count={devices}".strip(),
        JAX_PLATFORMS="cpu",
    )
    return subprocess.run(
        [sys.executable, *args], env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


def stdout_with_cpu_devices(code: str, devices: int = 8) -> str:
    """The standard output of ``code`` run by :func:`run_with_cpu_devices`; fails the test with
    the child's traceback if it raised."""
    child = run_with_cpu_devices("-c", code, devices=devices)
    assert child.returncode == 0, f"the child process failed:\n{child.stdout}\n{child.stderr}"
    return child.stdout
