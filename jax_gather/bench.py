"""``python -m jax_gather bench``: jax_gather against its peers on the same machine, same run.

Contenders per shape: jax_gather jitted in the default mode and in ``promise_in_bounds``, the
jnp equivalent (jitted), onnxruntime's and OpenVINO's CPU kernels (when installed and the shape
and dtype are ones they take) and numpy. Each round times every contender (a median over a few calls, with
``block_until_ready``, after 60 ms of untimed calls of the same contender, so that none is timed
while the previous one's idle threads still spin: ``--settle-ms``), the order alternating
between rounds; the figure reported per shape is the median over rounds of the per-round ratio
jax_gather / best peer (the peer with the lowest median time; each round compares with its
time in that round), because absolute times on a shared machine drift several-fold between
minutes while paired ratios do not. Each ratio comes with a distribution-free interval for that
median (order statistics of the per-round ratios, :func:`median_interval`), and each shape with
an A/A ratio: the default mode against the same program compiled a second time, timed as one
more contender, which shows how far apart this run puts two identical programs. Also reported:
achieved bandwidth against a memory copy of the same size timed in the same run, the
backward pass (gradient w.r.t. data) against jnp's, and the page faults per call.

The command applies :func:`jax_gather.tune_cpu_allocator` first (``--no-tune-allocator`` does
not); ``--compare-allocator`` measures every case a second time in a fresh child process with
glibc's defaults and prints both side by side. JAX's dispatch is left at its default
(asynchronous) unless ``--sync-dispatch`` is given. What small calls cost around the gather
(eager calls, small jitted programs, a prepared ONNX model's run) is the overhead section that
follows the table, by the same method (:mod:`jax_gather.bench_overhead`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

PEERS = ("jnp", "onnxruntime", "openvino", "numpy")
SAME_PROGRAM = "jax_gather[again]"
# The confidence asked of each interval; with 11 rounds the order statistics give 93.5%.
CONFIDENCE = 0.9


@dataclasses.dataclass(frozen=True)
class Case:
    """One benchmark shape; indices are drawn uniformly from each indexed axis."""

    name: str
    op: str  # "gather", "gather_elements" or "gather_nd"
    attribute: int
    data_shape: tuple[int, ...]
    indices_shape: tuple[int, ...]
    negative: bool = False  # draw from [-s, s-1] rather than [0, s-1]
    dtype: str = "float32"
    vmapped: bool = False  # the op is vmapped over the leading dim of data and indices
    quick: bool = False
    batch_dims: int = 0  # Gather's (OpenVINO Gather-7/8, tf.gather)

    def scaled(self, divisor: int) -> Case:
        """The same case with every dim divided by ``divisor`` (at least 1): for tests."""
        shrink = lambda shape: tuple(max(1, d // divisor) for d in shape)
        tail = self.indices_shape[-1:] if self.op == "gather_nd" else ()
        head = self.indices_shape[: len(self.indices_shape) - len(tail)]
        if self.op == "gather_nd":
            # Batch dims must stay equal to data's.
            b = self.attribute + self.vmapped
            data = shrink(self.data_shape)
            return dataclasses.replace(
                self, data_shape=data, indices_shape=data[:b] + shrink(head[b:]) + tail
            )
        if self.op == "gather_elements":
            data = shrink(self.data_shape)
            return dataclasses.replace(self, data_shape=data, indices_shape=data)
        data, b = shrink(self.data_shape), self.batch_dims
        return dataclasses.replace(self, data_shape=data, indices_shape=data[:b] + shrink(head[b:]))


def _cases() -> list[Case]:
    base = [
        Case("gather axis 0 (embedding)", "gather", 0, (50000, 512), (8192,), quick=True),
        Case("gather axis 1", "gather", 1, (512, 4096), (2048,), negative=True, quick=True),
        Case("gather batch_dims=1 rows", "gather", 1, (64, 1024, 64), (64, 2048), batch_dims=1, quick=True),
        Case("gather_elements axis -1", "gather_elements", -1, (2048, 2048), (2048, 2048), quick=True),
        Case("gather_elements axis 0", "gather_elements", 0, (2048, 2048), (2048, 2048), quick=True),
        Case("gather_nd rows", "gather_nd", 0, (256, 256, 64), (100000, 2), quick=True),
        Case("gather_nd scalars", "gather_nd", 0, (1024, 1024), (1000000, 2), quick=True),
        Case("gather_nd batch_dims=1 rows", "gather_nd", 1, (64, 1024, 64), (64, 2048, 1)),
        Case("gather_nd batch_dims=1 scalars", "gather_nd", 1, (64, 256, 256), (64, 16384, 2)),
        Case("vmap gather axis 0", "gather", 0, (16, 4096, 128), (16, 2048), vmapped=True),
        Case(
            "vmap gather_elements axis -1",
            "gather_elements",
            -1,
            (16, 512, 512),
            (16, 512, 512),
            vmapped=True,
        ),
    ]
    variants = [
        dataclasses.replace(c, dtype=dt, name=f"{c.name} {dt}", quick=False)
        for c in base[:7]
        if not c.batch_dims
        for dt in ("bfloat16", "int8")
    ]
    return base + variants


CASES = _cases()


# ---- the contenders -----------------------------------------------------------------------------


def _jnp_equivalent(case: Case) -> Callable[[Any, Any], Any]:
    import jax
    import jax.numpy as jnp

    a = case.attribute
    if case.op == "gather":
        b = case.batch_dims
        fn = lambda d, i: jnp.take(d, i, axis=a - b)
        for _ in range(b):  # Gather's batch dims are a vmap of the unbatched take
            fn = jax.vmap(fn)
    elif case.op == "gather_elements":
        fn = lambda d, i: jnp.take_along_axis(d, i, axis=a)
    else:

        def nd(d, i):
            return d[tuple(i[..., c] for c in range(i.shape[-1]))]

        fn = nd
        for _ in range(a):  # GatherND batch dims are a vmap of the unbatched gather
            fn = jax.vmap(fn)
    return jax.vmap(fn) if case.vmapped else fn


def _numpy_equivalent(case: Case) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    a = case.attribute
    one: Callable[[Any, Any], Any]
    if case.op == "gather" and case.batch_dims:
        one = functools.partial(_take_per_example, axis=a, batch_dims=case.batch_dims)
    elif case.op == "gather":
        one = lambda d, i: np.take(d, i, axis=a)
    elif case.op == "gather_elements":
        one = lambda d, i: np.take_along_axis(d, i, axis=a)
    else:

        def nd(d, i):
            b = a
            lead = tuple(
                np.arange(n).reshape((-1,) + (1,) * (i.ndim - 2 - k)) for k, n in enumerate(i.shape[:b])
            )
            return d[lead + tuple(i[..., c] for c in range(i.shape[-1]))]

        one = nd

    if case.vmapped:
        return lambda d, i: np.stack([one(x, y) for x, y in zip(d, i)])
    return one


def _take_per_example(d: np.ndarray, i: np.ndarray, axis: int, batch_dims: int) -> np.ndarray:
    if batch_dims == 0:
        return np.take(d, i, axis=axis)
    return np.stack([_take_per_example(x, y, axis - 1, batch_dims - 1) for x, y in zip(d, i)])


def _onnxruntime_session(case: Case, data: np.ndarray, indices: np.ndarray):
    """A one-node model in onnxruntime, or None where it cannot run this case."""
    if case.vmapped or case.dtype == "bfloat16" or case.batch_dims:  # ONNX Gather has no batch dims
        return None
    try:
        import onnx
        import onnxruntime
        from onnx import helper
    except ImportError:
        return None
    op_type = {"gather": "Gather", "gather_elements": "GatherElements", "gather_nd": "GatherND"}[case.op]
    attr: dict[str, Any] = {"batch_dims" if case.op == "gather_nd" else "axis": case.attribute}
    node = helper.make_node(op_type, ["data", "indices"], ["out"], **attr)
    graph = helper.make_graph(
        [node],
        "bench",
        [
            helper.make_tensor_value_info("data", helper.np_dtype_to_tensor_dtype(data.dtype), data.shape),
            helper.make_tensor_value_info("indices", onnx.TensorProto.INT64, indices.shape),
        ],
        [helper.make_tensor_value_info("out", helper.np_dtype_to_tensor_dtype(data.dtype), None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = {"data": data, "indices": indices}
    return lambda: session.run(None, feed)[0]


def import_openvino() -> Any:
    """The ``openvino`` package, with the opsets of its gathers imported (``ov.opset8``, ...).

    Imported the first time with OpenVINO's telemetry declined: otherwise its import sends an
    event from a forked process, and a fork in a multithreaded JAX process may deadlock (JAX
    warns of it). The variable it reads to stay quiet in CI is set for the import alone.
    """
    import importlib
    import os
    import sys

    if "openvino" not in sys.modules:
        before = os.environ.get("CI")
        os.environ["CI"] = "true"
        try:
            importlib.import_module("openvino")
        finally:
            if before is None:
                del os.environ["CI"]
            else:
                os.environ["CI"] = before
    for version in (1, 5, 6, 7, 8):
        importlib.import_module(f"openvino.opset{version}")
    return sys.modules["openvino"]


def _openvino_call(case: Case, data: np.ndarray, indices: np.ndarray):
    """A one-node model (Gather-8, GatherElements-6, GatherND-8) compiled by OpenVINO's CPU
    plugin, reading the NumPy inputs in place, or None where it cannot run this case."""
    if case.vmapped or case.dtype == "bfloat16":
        return None
    try:
        ov = import_openvino()
    except ImportError:
        return None
    opset6, opset8 = ov.opset6, ov.opset8
    data_in = opset8.parameter(data.shape, ov.Type(data.dtype), name="data")
    indices_in = opset8.parameter(indices.shape, ov.Type.i32, name="indices")
    if case.op == "gather":
        axis = opset8.constant(np.int64(case.attribute))
        node = opset8.gather(data_in, indices_in, axis, case.batch_dims)
    elif case.op == "gather_elements":
        node = opset6.gather_elements(data_in, indices_in, case.attribute)
    else:
        node = opset8.gather_nd(data_in, indices_in, case.attribute)
    compiled = ov.Core().compile_model(ov.Model([node], [data_in, indices_in]), "CPU")
    request = compiled.create_infer_request()
    inputs = [data, indices.astype(np.int32)]  # the index type JAX's programs get
    return lambda: request.infer(inputs, share_inputs=True)[0]


def _make_inputs(case: Case, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    import ml_dtypes

    dtype = ml_dtypes.bfloat16 if case.dtype == "bfloat16" else np.dtype(case.dtype)
    if np.dtype(dtype).kind == "i":
        data = rng.integers(-100, 100, case.data_shape).astype(dtype)
    else:
        data = rng.standard_normal(case.data_shape, dtype=np.float32).astype(dtype)
    lead = 1 if case.vmapped else 0
    plan = _plan(case, case.data_shape[lead:], case.indices_shape[lead:])
    sizes = np.asarray(plan.index_sizes)
    if not plan.tuple_indices:
        sizes = sizes[0]
    low = -sizes if case.negative else 0
    indices = np.floor(low + rng.random(case.indices_shape) * (sizes - low)).astype(np.int64)
    return data, indices


def _plan(case: Case, data_shape: tuple[int, ...], indices_shape: tuple[int, ...]):
    from jax_gather import plans

    if case.op == "gather":
        return plans.gather_plan(data_shape, indices_shape, case.attribute, case.batch_dims)
    plan_fn = {"gather_elements": plans.gather_elements_plan, "gather_nd": plans.gather_nd_plan}[case.op]
    return plan_fn(data_shape, indices_shape, case.attribute)


def _contenders(case: Case, data: np.ndarray, indices: np.ndarray) -> dict[str, Callable[[], Any]]:
    """Zero-argument calls, one per contender, each returning its output."""
    import jax
    import jax.numpy as jnp

    import jax_gather

    op = getattr(jax_gather, case.op)
    d, i = jnp.asarray(data), jnp.asarray(indices)

    def ours(mode: str) -> Callable[[Any, Any], Any]:
        fn = lambda d, i: op(d, i, case.attribute, mode=mode, **_batch_dims(case))
        return jax.vmap(fn) if case.vmapped else fn

    fns = {
        "jax_gather": jax.jit(ours("checked")),
        "jax_gather[promise]": jax.jit(ours("promise_in_bounds")),
        "jax_gather[fill]": jax.jit(ours("fill")),
        "jnp": jax.jit(_jnp_equivalent(case)),
    }
    # The default mode compiled a second time: the same machine code at other addresses,
    # timed as a contender, measures how far apart this run puts two identical programs.
    fns[SAME_PROGRAM] = jax.jit(ours("checked"))
    calls: dict[str, Callable[[], Any]] = {
        name: functools.partial(_ready, f, d, i) for name, f in fns.items()
    }
    ort = _onnxruntime_session(case, data, indices)
    if ort is not None:
        calls["onnxruntime"] = ort
    openvino = _openvino_call(case, data, indices)
    if openvino is not None:
        calls["openvino"] = openvino
    numpy_fn = _numpy_equivalent(case)
    calls["numpy"] = lambda: numpy_fn(data, indices)
    return calls


def _batch_dims(case: Case) -> dict[str, int]:
    return {"batch_dims": case.batch_dims} if case.batch_dims else {}


def _ready(fn: Callable[..., Any], *args: Any) -> Any:
    return fn(*args).block_until_ready()


def _backward_contenders(case: Case, data: np.ndarray, indices: np.ndarray) -> dict[str, Callable[[], Any]]:
    import jax
    import jax.numpy as jnp

    import jax_gather

    if not np.issubdtype(np.dtype(data.dtype), np.floating) and data.dtype.name != "bfloat16":
        return {}
    op = getattr(jax_gather, case.op)
    ours = lambda d, i: op(d, i, case.attribute, **_batch_dims(case))
    if case.vmapped:
        ours = jax.vmap(ours)
    theirs = _jnp_equivalent(case)
    d, i = jnp.asarray(data), jnp.asarray(indices)
    grads = {
        "jax_gather": jax.jit(jax.grad(lambda d, i: ours(d, i).astype(jnp.float32).sum())),
        "jnp": jax.jit(jax.grad(lambda d, i: theirs(d, i).astype(jnp.float32).sum())),
    }
    return {name: functools.partial(_ready, g, d, i) for name, g in grads.items()}


# ---- timing -----------------------------------------------------------------------------------------


def _time(call: Callable[[], Any], reps: int) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


# onnxruntime's worker threads spin for about 45 ms after each run (measured with
# /proc/<tid>/schedstat); on a 2-core machine a contender timed in that window loses a core
# (the int8 embedding lookup measured 0.30-0.35 ms there against 0.14-0.17 ms otherwise).
SETTLE_S = 0.06


def _settle(call: Callable[[], Any], seconds: float) -> None:
    """Untimed calls for ``seconds`` (one at least), so the previous contender's idle threads
    have parked and this one's are awake when its timing starts."""
    start = time.perf_counter()
    call()
    while time.perf_counter() - start < seconds:
        call()


def _paired_rounds(
    calls: dict[str, Callable[[], Any]], rounds: int, reps: int, settle: float = SETTLE_S
) -> dict[str, list[float]]:
    for call in calls.values():  # compile and warm up
        call()
        call()
    names = list(calls)
    per_round: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            _settle(calls[name], settle)
            per_round[name].append(_time(calls[name], reps))
    return per_round


def _median_ratio(a: Any, b: Any) -> float:
    return float(np.median(np.asarray(a) / np.asarray(b)))


def _paired(a: Any, b: Any) -> tuple[float, tuple[float, float, float]]:
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


def _verdict(interval: Sequence[float]) -> str:
    """Where a ratio's interval lies against 1.0, the ratio of two equally fast contenders."""
    low, high = interval[0], interval[1]
    return "ahead" if high < 1.0 else "behind" if low > 1.0 else "level"


def _page_faults_per_call(call: Callable[[], Any], reps: int) -> float | None:
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


def _memcpy_bandwidth(nbytes: int, reps: int) -> float:
    """Bytes per second of a same-size copy (read + write), measured now."""
    src = np.ones(max(nbytes // 4, 1), np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    return 2 * src.nbytes / _time(lambda: np.copyto(dst, src), reps)


def run_case(
    case: Case, rounds: int, reps: int, backward: bool = True, seed: int = 0, settle: float = SETTLE_S
) -> dict[str, Any]:
    """Measures one case; returns its row of results."""
    rng = np.random.default_rng(seed)
    data, indices = _make_inputs(case, rng)
    calls = _contenders(case, data, indices)
    times = _paired_rounds(calls, rounds, reps, settle)
    peers = [p for p in PEERS if p in times]
    medians = {k: float(np.median(v)) for k, v in times.items()}
    # The best peer is the one with the lowest median time, and each round is compared with its
    # time in that round. Not the fastest peer of each round: where two peers tie, the smaller
    # of two noisy times is biased low (up to 1.18x on this machine's tied shapes).
    best_peer = min(peers, key=lambda p: medians[p])
    best = np.asarray(times[best_peer])
    out_bytes = int(np.prod(_output_shape(case, data, indices))) * data.dtype.itemsize
    moved = 2 * out_bytes + indices.size * 4  # gathered reads + output writes + int32 indices
    row: dict[str, Any] = {
        "case": case.name,
        "dtype": case.dtype,
        "median_s": medians,
        "rounds_s": {k: [float(t) for t in v] for k, v in times.items()},
        "best_peer": best_peer,
        "ratio_vs_round_min": _median_ratio(times["jax_gather"], np.min([times[p] for p in peers], axis=0)),
        "ratio_promise": _median_ratio(times["jax_gather[promise]"], best),
        "ratio_vs_jnp": _median_ratio(times["jax_gather"], times["jnp"]),
        "ratio_vs_openvino": (
            _median_ratio(times["jax_gather"], times["openvino"]) if "openvino" in times else None
        ),
        "checked_over_fill": _median_ratio(times["jax_gather"], times["jax_gather[fill]"]),
        "bandwidth_GBps": moved / medians["jax_gather"] / 1e9,
        "memcpy_GBps": _memcpy_bandwidth(out_bytes, reps) / 1e9,
        "page_faults_per_call": _page_faults_per_call(calls["jax_gather"], max(reps, 5)),
    }
    row["ratio"], row["ratio_interval"] = _paired(times["jax_gather"], best)
    row["verdict"] = _verdict(row["ratio_interval"])
    if SAME_PROGRAM in times:
        row["same_program_ratio"], row["same_program_interval"] = _paired(
            times["jax_gather"], times[SAME_PROGRAM]
        )
    if backward:
        grads = _backward_contenders(case, data, indices)
        if grads:
            gtimes = _paired_rounds(grads, rounds, reps, settle)
            row["backward_ratio_vs_jnp"], row["backward_interval"] = _paired(
                gtimes["jax_gather"], gtimes["jnp"]
            )
            row["backward_median_s"] = {k: float(np.median(v)) for k, v in gtimes.items()}
    return row


def _output_shape(case: Case, data: np.ndarray, indices: np.ndarray) -> tuple[int, ...]:
    lead = 1 if case.vmapped else 0
    return data.shape[:lead] + _plan(case, data.shape[lead:], indices.shape[lead:]).output_shape


# ---- reporting --------------------------------------------------------------------------------------


def _faults(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _geomean(values: Sequence[float]) -> float:
    return math.exp(np.mean(np.log(values)))


def _interval(r: dict[str, Any], key: str) -> str:
    return f"{r[key][0]:.2f}-{r[key][1]:.2f}" if key in r else "-"


def _format_row(r: dict[str, Any], untuned: bool) -> str:
    peer = f"{r['best_peer']} {r['median_s'][r['best_peer']] * 1e3:.3f}"
    bwd = f"{r['backward_ratio_vs_jnp']:.2f}" if "backward_ratio_vs_jnp" in r else "-"
    same = f"{r['same_program_ratio']:.2f}" if "same_program_ratio" in r else "-"
    openvino = f"{r['ratio_vs_openvino']:.2f}" if r.get("ratio_vs_openvino") else "-"
    line = (
        f"{r['case']:40s} {r['median_s']['jax_gather'] * 1e3:8.3f} {peer:>17s} {r['ratio']:6.2f} "
        f"{_interval(r, 'ratio_interval'):>11s} {openvino:>5s} {r['ratio_promise']:7.2f} "
        f"{r['checked_over_fill']:8.2f} "
        f"{same:>5s} {r['bandwidth_GBps']:6.1f} "
        f"{r['memcpy_GBps']:6.1f} {bwd:>7s} {_faults(r.get('page_faults_per_call')):>6s}"
    )
    if untuned and "glibc_default" in r:
        g = r["glibc_default"]
        line += (
            f" | {g['median_s']['jax_gather'] * 1e3:8.2f} {g['ratio']:6.2f} "
            f"{_faults(g.get('page_faults_per_call')):>6s}"
        )
    return line


def _format_table(rows: list[dict[str, Any]]) -> str:
    untuned = any("glibc_default" in r for r in rows)
    head = (
        f"{'case':40s} {'ours ms':>8s} {'best peer':>17s} {'ratio':>6s} {'interval':>11s} {'/ov':>5s} "
        f"{'promise':>7s} {'chk/fill':>8s} {'A/A':>5s} {'GB/s':>6s} {'memcpy':>6s} {'bwd/jnp':>7s} "
        f"{'faults':>6s}"
    )
    if untuned:
        head += f" | {'glibc ms':>8s} {'ratio':>6s} {'faults':>6s}"
    lines = [head, "-" * len(head)] + [_format_row(r, untuned) for r in rows]
    lines.append("-" * len(head))
    if rows:
        ratios = [r["ratio"] for r in rows]
        lines.append(
            f"geometric mean of ratios (jax_gather / best peer): {_geomean(ratios):.2f}; "
            f"worst {max(ratios):.2f}"
        )
        lines += _verdict_lines(rows)
        other = [r["glibc_default"]["ratio"] for r in rows if "glibc_default" in r]
        if other:
            lines.append(
                f"the same in a fresh process with glibc's default allocator: "
                f"{_geomean(other):.2f}; worst {max(other):.2f}"
            )
    lines.append(
        "interval: where the median ratio lies, with the confidence printed above (order "
        "statistics of the per-round ratios); A/A: jax_gather / the same program compiled again"
    )
    lines.append("/ov: jax_gather / OpenVINO's CPU plugin (Gather-8, GatherElements-6, GatherND-8), paired")
    lines.append("faults: minor page faults per call of jax_gather (fresh pages zeroed by the kernel)")
    return "\n".join(lines)


def _verdict_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Which shapes are ahead of the best peer, level with it, or behind it, by their intervals,
    forward and backward; and how far apart the run put two compiles of one program (its floor
    for calling two contenders different)."""
    rows = [r for r in rows if "ratio_interval" in r]
    if not rows:
        return []
    coverage = min(r["ratio_interval"][2] for r in rows)
    lines = [f"at {coverage:.0%} confidence: " + _count_verdicts(rows, "ratio_interval", "of the best peer")]
    backward = [r for r in rows if "backward_interval" in r]
    if backward:
        lines.append("backward against jnp's: " + _count_verdicts(backward, "backward_interval"))
    same = [r for r in rows if "same_program_interval" in r]
    if same:
        ratios = [r["same_program_ratio"] for r in same]
        apart = [r["case"] for r in same if _verdict(r["same_program_interval"]) != "level"]
        lines.append(
            f"A/A, one program against its second compile: {min(ratios):.2f}-{max(ratios):.2f}; "
            f"told apart on {len(apart)} of {len(same)} shapes" + _names(apart)
        )
    return lines


def _count_verdicts(rows: list[dict[str, Any]], key: str, of: str = "") -> str:
    by = {v: [r["case"] for r in rows if _verdict(r[key]) == v] for v in ("ahead", "level", "behind")}
    ahead = f"ahead {of} on" if of else "ahead on"
    return f"{ahead} {len(by['ahead'])}, level on {len(by['level'])}, behind on {len(by['behind'])}" + _names(
        by["behind"]
    )


def _names(cases: list[str]) -> str:
    return f" ({', '.join(cases)})" if cases else ""


def _progress(done: int, total: int, label: str) -> None:
    if sys.stderr.isatty():
        width = 24
        filled = int(width * done / total)
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {label[:48]:48s}")
        if done == total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def run(
    quick: bool = False,
    rounds: int | None = None,
    reps: int | None = None,
    only: str | None = None,
    backward: bool = True,
    settle: float = SETTLE_S,
) -> list[dict[str, Any]]:
    """Runs the benchmark and returns one row of results per case."""
    cases = [c for c in CASES if (c.quick or not quick) and (only is None or only in c.name)]
    rounds = rounds or (5 if quick else 11)
    reps = reps or (3 if quick else 5)
    rows = []
    for k, case in enumerate(cases):
        _progress(k, len(cases), case.name)
        rows.append(run_case(case, rounds, reps, backward=backward, settle=settle))
    _progress(len(cases), len(cases), "done")
    return rows


def describe_machine() -> dict[str, Any]:
    """The machine a run measured: versions, devices, and the CPU's model and the vector
    extensions XLA:CPU compiles for (the CPU lowerings' gains depend on them)."""
    import os
    import platform

    import jax

    return {
        "python": platform.python_version(),
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()],
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "processor": _cpu_model() or platform.processor() or platform.machine(),
        "vector_extensions": _vector_extensions(),
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


def _vector_extensions() -> list[str]:
    flags = next(
        (line.split(":", 1)[1].split() for line in _cpuinfo().splitlines() if line.startswith("flags")), []
    )
    return [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "asimd", "sve") if f in flags]


def main(args: Any) -> int:
    """The ``bench`` command; ``args`` as parsed by :mod:`jax_gather.cli`."""
    from jax_gather.allocator import tune_cpu_allocator

    if args.tune_allocator:
        tuning = tune_cpu_allocator()
        said = ", ".join(f"{k}={v}" for k, v in tuning.settings) if tuning.applied else tuning.reason
        print(
            f"allocator: tuned ({said}); --no-tune-allocator measures glibc's defaults, "
            "--compare-allocator both"
        )
    else:
        print("allocator: glibc defaults (tune_cpu_allocator not applied)")
        if getattr(args, "compare_allocator", False):
            print("--compare-allocator compares with the tuned allocator: drop --no-tune-allocator")
    sync = bool(getattr(args, "sync_dispatch", False))
    if sync:
        import jax

        # Before the first computation: the CPU client reads it when it is created.
        jax.config.update("jax_cpu_enable_async_dispatch", False)
    print(
        "dispatch: "
        + (
            "synchronous (--sync-dispatch: CPU programs run on the calling thread)"
            if sync
            else "JAX's default (asynchronous: CPU programs of 1000 flops or more run on a "
            "worker thread); --sync-dispatch runs them on the calling thread"
        )
    )
    machine = describe_machine()
    print(
        f"machine: {machine['processor']}, {machine['cpu_count']} cores; JAX {machine['jax']} "
        f"on {machine['backend']}"
    )
    if getattr(args, "grid", False):
        return _main_grid(args, machine, sync)
    settle = SETTLE_S if getattr(args, "settle_ms", None) is None else args.settle_ms / 1e3
    rows = run(
        quick=args.quick, rounds=args.rounds, only=args.only, backward=not args.no_backward, settle=settle
    )
    if getattr(args, "compare_allocator", False) and args.tune_allocator:
        _add_glibc_default_rows(rows, args)
    if rows:
        print(_format_table(rows))
    from jax_gather import bench_overhead

    overhead = []
    if not getattr(args, "no_overhead", False):
        overhead = bench_overhead.run(quick=args.quick, rounds=args.rounds, only=args.only, settle=settle)
    if overhead:
        print(bench_overhead.format_table(overhead))
    result = {
        "machine": machine,
        "allocator_tuned": args.tune_allocator,
        "sync_dispatch": sync,
        "rows": rows,
        "overhead": overhead,
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    if args.plot:
        plot(rows, args.plot)
    return 0


def _main_grid(args: Any, machine: dict[str, Any], sync: bool) -> int:
    from jax_gather import bench_grid

    settle = bench_grid.SETTLE_S if getattr(args, "settle_ms", None) is None else args.settle_ms / 1e3
    rows = bench_grid.run(quick=args.quick, rounds=args.rounds, only=args.only, settle=settle)
    print(bench_grid.format_summary(rows))
    if args.json:
        result = {"machine": machine, "allocator_tuned": args.tune_allocator, "sync_dispatch": sync}
        with open(args.json, "w") as f:
            json.dump(result | {"grid": rows}, f, indent=1)
    if args.plot:
        prefix = args.plot[:-4] if args.plot.endswith(".png") else args.plot
        for path in bench_grid.plot(rows, prefix):
            print(f"heatmap: {path}")
    return 0


def _add_glibc_default_rows(rows: list[dict[str, Any]], args: Any) -> None:
    """Measures the same cases in a fresh child process with glibc's default allocator (the
    tuning is process-wide and cannot be undone) and attaches its rows as ``glibc_default``."""
    import os
    import subprocess
    import tempfile

    _progress(0, 1, "the same cases, glibc's default allocator, in a child process")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "glibc_default.json")
        argv = [sys.executable, "-m", "jax_gather", "bench", "--no-tune-allocator", "--no-overhead"]
        argv += ["--json", out]
        argv += ["--quick"] * bool(args.quick) + ["--no-backward"] * bool(args.no_backward)
        argv += ["--sync-dispatch"] * bool(getattr(args, "sync_dispatch", False))
        argv += ["--rounds", str(args.rounds)] * bool(args.rounds) + ["--only", args.only] * bool(args.only)
        if getattr(args, "settle_ms", None) is not None:
            argv += ["--settle-ms", str(args.settle_ms)]
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        with open(out) as f:
            theirs = {r["case"]: r for r in json.load(f)["rows"]}
    for row in rows:
        if row["case"] in theirs:
            row["glibc_default"] = theirs[row["case"]]
    _progress(1, 1, "done")


def plot(rows: list[dict[str, Any]], path: str) -> None:
    """A bar chart of jax_gather / best peer per case (1.0 = as fast as the best peer)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["case"] for r in rows]
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(rows) + 1.2))
    y = np.arange(len(rows))
    ratios = np.array([r["ratio"] for r in rows])
    if all("ratio_interval" in r for r in rows):
        low, high = np.array([r["ratio_interval"][:2] for r in rows]).T
        err = np.stack([ratios - low, high - ratios])
    else:
        err = None
    ax.barh(y - 0.2, ratios, height=0.4, xerr=err, capsize=2, label="default mode (interval)")
    ax.barh(y + 0.2, [r["ratio_promise"] for r in rows], height=0.4, label="promise_in_bounds")
    if all("glibc_default" in r for r in rows):
        ax.scatter(
            [r["glibc_default"]["ratio"] for r in rows],
            y - 0.2,
            color="k",
            marker="|",
            s=120,
            zorder=3,
            label="default mode, glibc's default allocator",
        )
    ax.axvline(1.0, color="k", lw=1)
    ax.set_yticks(y, names)
    ax.invert_yaxis()
    ax.set_xlabel("time / best peer's time (lower is better)")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
