"""The benchmark's overhead section: the cost around one small gather, against its peers.

Where the gather itself takes a microsecond, what a call costs is everything around it: the
checks, the dispatch, the thread that runs it. Each row pairs one jax_gather call with the call a
user would otherwise write, on the same inputs and in the same out-of-bounds mode: eager calls
against ``jnp.take`` / ``jnp.take_along_axis`` / jnp indexing, small jitted programs against the
jitted jnp program, and a prepared ONNX model's ``run`` against onnxruntime's ``session.run``.
The method is the main benchmark's (:mod:`jax_gather.bench.timing`): paired rounds, the order
alternating, a settle between contenders, the median of per-round ratios with its interval,
and an A/A control (the same jax_gather call timed as a second contender). Each row has the
goal it is held to; none of these is in the main table's geometric mean.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from jax_gather.bench.timing import SETTLE_S, paired, paired_rounds

# Data of the issue that set these goals: a 1000 x 64 float32 table, 64 ids.
ROWS, COLS, IDS = 1000, 64, 64


Calls = tuple[Callable[[], Any], Callable[[], Any]]


@dataclasses.dataclass(frozen=True)
class OverheadCase:
    """One row: ``make()`` returns (ours, peer), zero-argument calls that return their output,
    built fresh for each run (compiled, warmed, each its own program cache)."""

    name: str
    peer: str
    goal: float  # the most jax_gather / peer may be
    make: Callable[[], Calls]
    quick: bool = True


def numpy_aligned_16(array: np.ndarray) -> np.ndarray:
    """A copy of ``array`` whose data starts 16 bytes past a 64-byte boundary: where NumPy's
    allocations usually start, fixed so that runs do not differ by where they happen to land
    (JAX's CPU client aliases 64-byte aligned arrays and copies others)."""
    buffer = np.empty(array.nbytes + 128, np.uint8)
    start = -buffer.ctypes.data % 64 + 16
    copy = buffer[start : start + array.nbytes].view(array.dtype).reshape(array.shape)
    np.copyto(copy, array)
    return copy


def _ready(fn: Callable[..., Any], *args: Any) -> Callable[[], Any]:
    return lambda: fn(*args).block_until_ready()


def _table(rng: np.random.Generator) -> np.ndarray:
    return rng.standard_normal((ROWS, COLS), dtype=np.float32)


def _eager_gather(mode: str, on_host: bool = False, negative: bool = True) -> Callable[[], Calls]:
    def make() -> Calls:
        import jax.numpy as jnp

        import jax_gather

        rng = np.random.default_rng(0)
        table, ids = _table(rng), rng.integers(-ROWS if negative else 0, ROWS, IDS)
        d: Any
        i: Any
        if on_host:
            d, i = numpy_aligned_16(table), numpy_aligned_16(ids)
        else:
            d, i = jnp.asarray(table), jnp.asarray(ids)
        ours = jax_gather.gather if mode == "checked" else functools.partial(jax_gather.gather, mode=mode)
        theirs: Callable[..., Any]
        if mode == "promise_in_bounds":  # a mode jnp.take does not take
            theirs = lambda d, i: d.at[i].get(mode="promise_in_bounds")
        else:
            theirs = functools.partial(jnp.take, axis=0, mode=mode if mode != "checked" else None)
        return _ready(ours, d, i), _ready(theirs, d, i)

    return make


def _eager_elements(negative: bool) -> Callable[[], Calls]:
    def make() -> Calls:
        import jax.numpy as jnp

        import jax_gather

        rng = np.random.default_rng(1)
        d = jnp.asarray(rng.standard_normal((100, COLS), dtype=np.float32))
        i = jnp.asarray(rng.integers(-COLS if negative else 0, COLS, (100, 16)))
        return _ready(jax_gather.gather_elements, d, i, 1), _ready(jnp.take_along_axis, d, i, 1)

    return make


def _eager_nd() -> Calls:
    import jax.numpy as jnp

    import jax_gather

    rng = np.random.default_rng(2)
    d = jnp.asarray(_table(rng))
    i = jnp.asarray(np.stack([rng.integers(0, ROWS, IDS), rng.integers(0, COLS, IDS)], axis=-1))
    return _ready(jax_gather.gather_nd, d, i), _ready(lambda d, i: d[i[:, 0], i[:, 1]], d, i)


def _jitted(mode: str | None) -> Callable[[], Calls]:
    def make() -> Calls:
        import jax
        import jax.numpy as jnp

        import jax_gather

        rng = np.random.default_rng(3)
        d, i = jnp.asarray(_table(rng)), jnp.asarray(rng.integers(0 if mode == "clip" else -ROWS, ROWS, IDS))
        ours = jax.jit(lambda d, i: jax_gather.gather(d, i, mode=mode or "checked"))
        theirs = jax.jit(lambda d, i: jnp.take(d, i, axis=0, mode=mode))
        return _ready(ours, d, i), _ready(theirs, d, i)

    return make


def _checked_wrapper() -> Calls:
    """``jax_gather.checked(jax.jit(f))`` against checkify's own: ``jax.jit(checkify.checkify(f))``
    and ``err.throw()``, for a lookup in the checked mode (in bounds, so both return)."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import checkify

    import jax_gather

    rng = np.random.default_rng(6)
    d, i = jnp.asarray(_table(rng)), jnp.asarray(rng.integers(-ROWS, ROWS, IDS))
    f = lambda d, i: jax_gather.gather(d, i)
    ours = jax_gather.checked(jax.jit(f))
    checkified = jax.jit(checkify.checkify(f))

    def theirs(d: Any, i: Any) -> Any:
        err, out = checkified(d, i)
        err.throw()
        return out

    return _ready(ours, d, i), _ready(theirs, d, i)


def lookup_model(rows: int, cols: int, ids: int) -> Any:
    """An ONNX model of two nodes: ``rows = Gather(x, ids)``, then ``GatherElements(rows,
    cols, axis=1)``; x is float32 (rows, cols), ids int64 (ids,), cols int64 (ids, cols)."""
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("Gather", ["x", "ids"], ["picked"], axis=0),
        helper.make_node("GatherElements", ["picked", "cols"], ["out"], axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "lookup",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, cols]),
            helper.make_tensor_value_info("ids", TensorProto.INT64, [ids]),
            helper.make_tensor_value_info("cols", TensorProto.INT64, [ids, cols]),
        ],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [ids, cols])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _backend(rows: int, cols: int, ids: int) -> Callable[[], Calls]:
    def make() -> Calls:
        import onnxruntime

        from jax_gather import backend

        model = lookup_model(rows, cols, ids)
        rng = np.random.default_rng(4)
        made: dict[str, np.ndarray] = {
            "x": rng.standard_normal((rows, cols), dtype=np.float32),
            "ids": rng.integers(-rows, rows, ids),
            "cols": rng.integers(-cols, cols, (ids, cols)),
        }
        feeds = {name: numpy_aligned_16(value) for name, value in made.items()}
        rep = backend.prepare(model)
        session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        return (lambda: rep.run(feeds)), (lambda: session.run(None, feeds))

    return make


def _backend_against_jit(rows: int, cols: int, ids: int) -> Callable[[], Calls]:
    """A prepared model's run against the same model as one jitted function (``to_jax``) called
    with the same NumPy inputs and giving NumPy outputs: JAX's own floor for the model."""

    def make() -> Calls:
        import jax

        from jax_gather import backend

        model = lookup_model(rows, cols, ids)
        rng = np.random.default_rng(5)
        x = numpy_aligned_16(rng.standard_normal((rows, cols), dtype=np.float32))
        picked = numpy_aligned_16(rng.integers(0, rows, ids))
        within = numpy_aligned_16(rng.integers(0, cols, (ids, cols)))
        rep = backend.prepare(model)
        jitted = jax.jit(backend.to_jax(model))
        feeds = {"x": x, "ids": picked, "cols": within}
        return (lambda: rep.run(feeds)), (lambda: [np.asarray(o) for o in jitted(x, picked, within)])

    return make


def _has_onnxruntime() -> bool:
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


EAGER, JITTED, BACKEND, BACKEND_JIT = 1.25, 1.10, 1.0, 1.3

CASES = (
    OverheadCase("eager gather, checked", "jnp.take", EAGER, _eager_gather("checked", negative=False)),
    OverheadCase("eager gather, checked, ids < 0", "jnp.take", EAGER, _eager_gather("checked")),
    OverheadCase("eager gather, fill", "jnp.take fill", EAGER, _eager_gather("fill")),
    # jnp.take's clip clamps negative indices to 0 (NumPy's rule), ONNX's counts them from the end.
    OverheadCase("eager gather, clip", "jnp.take clip", EAGER, _eager_gather("clip", negative=False)),
    OverheadCase("eager gather, promise", "jnp .at[].get promise", EAGER, _eager_gather("promise_in_bounds")),
    OverheadCase(
        "eager gather, NumPy inputs",
        "jnp.take",
        EAGER,
        _eager_gather("checked", on_host=True, negative=False),
    ),
    OverheadCase("eager gather_elements", "take_along_axis", EAGER, _eager_elements(False)),
    OverheadCase("eager gather_elements, ids < 0", "take_along_axis", EAGER, _eager_elements(True)),
    OverheadCase("eager gather_nd", "jnp indexing", EAGER, _eager_nd),
    OverheadCase("jitted gather, checked", "jit jnp.take", JITTED, _jitted(None)),
    OverheadCase("jitted gather, clip", "jit jnp.take clip", JITTED, _jitted("clip")),
    OverheadCase("backend run, 100x16", "onnxruntime", BACKEND, _backend(100, 16, 32)),
    OverheadCase("backend run, 4096x256", "onnxruntime", BACKEND, _backend(4096, 256, 4096), quick=False),
    OverheadCase(
        "backend run vs jit, 100x16", "jit(to_jax(model))", BACKEND_JIT, _backend_against_jit(100, 16, 32)
    ),
    OverheadCase(
        "backend run vs jit, 4096x256",
        "jit(to_jax(model))",
        BACKEND_JIT,
        _backend_against_jit(4096, 256, 4096),
        quick=False,
    ),
    OverheadCase("checked(jit(f)) per call", "jit(checkify(f)) + throw", 1.3, _checked_wrapper),
)


def run(
    quick: bool = False,
    rounds: int | None = None,
    reps: int | None = None,
    only: str | None = None,
    settle: float = SETTLE_S,
) -> list[dict[str, Any]]:
    """Measures every overhead case; one row of results each."""
    cases = [c for c in CASES if (c.quick or not quick) and (only is None or only in c.name)]
    if not _has_onnxruntime():
        cases = [c for c in cases if c.peer != "onnxruntime" and not c.name.startswith("backend")]
    rounds = rounds or (7 if quick else 11)
    reps = reps or 25
    rows = []
    for case in cases:
        ours, peer = case.make()
        calls = {"jax_gather": ours, "jax_gather[again]": ours, case.peer: peer}
        times = paired_rounds(calls, rounds, reps, settle)
        ratio, interval = paired(times["jax_gather"], times[case.peer])
        same, same_interval = paired(times["jax_gather"], times["jax_gather[again]"])
        rows.append(
            {
                "case": case.name,
                "peer": case.peer,
                "goal": case.goal,
                "median_s": {k: float(np.median(v)) for k, v in times.items()},
                "rounds_s": {k: [float(t) for t in v] for k, v in times.items()},
                "ratio": ratio,
                "ratio_interval": interval,
                "same_program_ratio": same,
                "same_program_interval": same_interval,
                "meets_goal": ratio <= case.goal,
            }
        )
    return rows


def format_table(rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'overhead: call':30s} {'ours us':>8s} {'peer':>18s} {'peer us':>8s} {'ratio':>6s} "
        f"{'interval':>11s} {'A/A':>5s} {'goal':>5s}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['case']:30s} {r['median_s']['jax_gather'] * 1e6:8.1f} {r['peer']:>18s} "
            f"{r['median_s'][r['peer']] * 1e6:8.1f} {r['ratio']:6.2f} "
            f"{r['ratio_interval'][0]:.2f}-{r['ratio_interval'][1]:.2f} "
            f"{r['same_program_ratio']:5.2f} {'<=' if r['meets_goal'] else '>'}{r['goal']:.2f}"
        )
    lines.append("-" * len(head))
    met = sum(r["meets_goal"] for r in rows)
    lines.append(
        f"overhead: {met} of {len(rows)} calls within their goal (jax_gather / peer, the median "
        "of paired rounds); A/A: the same call timed as a second contender"
    )
    return "\n".join(lines)
