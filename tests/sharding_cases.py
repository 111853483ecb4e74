"""Sharded gathers on a simulated 8-device CPU mesh: the measurements behind test_sharding.py.

JAX fixes the number of devices when it starts, so ``tests/test_sharding.py`` runs this module
in a child process::

    XLA_FLAGS=--xla_force_host_platform_device_count=8 python -m tests.sharding_cases

It prints one JSON report: per case what was measured (results equal to the NumPy reference,
which collectives the compiled programs hold, error text), never a verdict; the parent judges.
Importing the module only defines the cases (JAX counts its devices when first used, not on
import), so the parent can parametrize over them.
``--table`` prints the README's tables instead: collectives per placement, and a coarse timing.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
import time
import traceback
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import checkify
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import jax_gather
from jax_gather._cpu_client import JAX_RELEASE
from tests import ops_table, reference
from tests.strategies import make_indices, make_wild_indices

DEVICES = 8
MODES = ("checked", "fill", "clip", "promise_in_bounds")
# An HLO instruction is "<name> = <shape> <opcode>(<operands>)"; async forms end in "-start".
_COLLECTIVE = re.compile(
    r"\b(all-gather|all-reduce|all-to-all|collective-permute|collective-broadcast|reduce-scatter)"
    r"(?:-start)?\("
)


@dataclasses.dataclass(frozen=True)
class Placement:
    """One op with data and indices placed by ``NamedSharding`` on a 1-D or 2-D mesh.

    ``local_forward`` / ``local_backward``: True when the compiled program must hold no
    collective; False when one is inherent (the result needs data held by other devices), so the
    program must hold one; None when it is only recorded.
    """

    name: str
    op: str
    data_shape: tuple[int, ...]
    indices_shape: tuple[int, ...]
    attr: int
    mesh: tuple[int, ...]
    data_spec: tuple
    indices_spec: tuple
    local_forward: bool | None
    local_backward: bool | None
    why: str = ""
    batch_dims: int = 0  # Gather's (OpenVINO Gather-7/8, tf.gather)


X, Y = "x", "y"
# fmt: off
PLACEMENTS = [
    # Gather: an embedding table (vocabulary x features) looked up by token ids, and axis 1.
    Placement("gather/table-by-columns", "gather", (64, 16), (12,), 0, (8,), (None, X), (), True, True),
    Placement("gather/data-on-other-dim", "gather", (16, 24), (5, 2), 1, (8,), (X, None), (), True, True),
    Placement("gather/indices-sharded", "gather", (64, 16), (16, 3), 0, (8,), (), (X, None), True, False,
              "grad: each device holds partial sums for the whole replicated table"),
    Placement("gather/2d-ids-x-table-columns-y", "gather", (64, 16), (16, 3), 0, (4, 2), (None, Y), (X, None),
              True, False, "grad: partial sums over the ids sharded on x"),
    Placement("gather/2d-data-on-other-dims", "gather", (8, 24, 6), (5,), 1, (4, 2), (X, None, Y), (),
              True, True),
    Placement("gather/table-by-rows", "gather", (64, 16), (12,), 0, (8,), (X, None), (), False, True,
              "forward: a looked-up row lives on one device; the others add zeros"),
    Placement("gather/batch-dims", "gather", (8, 20, 6), (8, 5), 1, (8,), (X,), (X,), True, True,
              "each example's rows from its own slice of data", batch_dims=1),
    # GatherElements: every dim but the axis is a batching dim of data and indices alike.
    Placement("gather_elements/rows-axis-1", "gather_elements", (16, 12), (16, 20), 1, (8,), (X, None),
              (X, None), True, True),
    Placement("gather_elements/columns-axis-0", "gather_elements", (12, 16), (20, 16), 0, (8,), (None, X),
              (None, X), True, True),
    Placement("gather_elements/2d", "gather_elements", (8, 12, 6), (8, 10, 6), 1, (4, 2), (X, None, Y),
              (X, None, Y), True, True),
    Placement("gather_elements/on-the-axis", "gather_elements", (16, 12), (16, 12), 0, (8,), (X, None),
              (X, None), False, False, "any output element may read any row"),
    Placement("gather_elements/smaller-indices", "gather_elements", (16, 12), (8, 10), 1, (8,), (X, None),
              (X, None), None, None, "the leading block of data is not laid out as the indices are"),
    # GatherND: batch dims of data and indices alike, then index tuples into the next dims.
    Placement("gather_nd/batch", "gather_nd", (8, 10, 12), (8, 5, 1), 1, (8,), (X,), (X,), True, True),
    Placement("gather_nd/2d-batch-x-trailing-y", "gather_nd", (8, 10, 6, 4), (8, 5, 1), 1, (4, 2),
              (X, None, None, Y), (X,), True, True),
    Placement("gather_nd/2d-two-batch-dims", "gather_nd", (4, 2, 10, 6), (4, 2, 3, 1), 2, (4, 2), (X, Y),
              (X, Y), True, True),
    Placement("gather_nd/rows-trailing-sharded", "gather_nd", (10, 12, 16), (6, 2), 0, (8,), (None, None, X),
              (), True, True),
    Placement("gather_nd/tuples-sharded", "gather_nd", (10, 12), (16, 2), 0, (8,), (), (X,), True, False,
              "grad: partial sums for the whole replicated data"),
    Placement("gather_nd/indexed-dim-sharded", "gather_nd", (16, 12, 4), (6, 2), 0, (8,), (X,), (),
              False, None, "forward: a looked-up slice lives on one device"),
]
BY_NAME = {p.name: p for p in PLACEMENTS}

# shard_map: each op on the local blocks, sharded on dims it does not gather across, so the
# blocks' results put together equal the op on the whole arrays.
SHARD_MAP_CASES = [
    Placement("gather", "gather", (16, 6), (5,), 1, (8,), (X,), (), None, None),
    Placement("gather_elements", "gather_elements", (16, 6), (16, 4), 1, (8,), (X,), (X,), None, None),
    Placement("gather_nd", "gather_nd", (16, 6, 3), (16, 4, 1), 1, (8,), (X,), (X,), None, None),
]

# Explicit-axis sharding: placements whose output sharding JAX's gather rule infers.
EXPLICIT_CASES = [
    Placement("gather", "gather", (8, 24, 6), (5,), 1, (4, 2), (X, None, Y), (), None, None),
    Placement("gather_elements", "gather_elements", (8, 12, 6), (8, 10, 6), 1, (4, 2), (X, None, Y),
              (X, None, Y), None, None),
    Placement("gather_nd", "gather_nd", (8, 10, 6, 4), (8, 5, 1), 1, (4, 2), (X, None, None, Y), (X,),
              None, None),
]
# fmt: on


def case_ids() -> dict[str, list[str]]:
    """The ids of the records a full run reports, by kind."""
    return {
        "placement": [f"{p.name}:{m}" for p in PLACEMENTS for m in MODES],
        "shard_map": [f"shard_map/{c.name}:{m}" for c in SHARD_MAP_CASES for m in MODES],
        "explicit": [f"explicit/{c.name}:{m}" for c in EXPLICIT_CASES for m in MODES],
        "other": [
            "sharded:checked()",
            "shard_map:checked()",
            "cpu_lowerings",
            "explicit:checked()",
            "explicit:vmap",
            "explicit:auto_axes",
        ],
        "pinned": [f"pinned/{name}:{where}" for name in PINNED_CASES for where in ("jit", "shard_map")],
    }


def collectives(hlo_text: str) -> list[str]:
    return sorted({m.group(1) for m in _COLLECTIVE.finditer(hlo_text)})


def _indices(p: Placement, out_of_bounds: bool, seed: int = 0) -> np.ndarray:
    """Indices with negatives; with ``out_of_bounds``, of every out-of-bounds kind too."""
    sizes = (
        p.data_shape[p.attr : p.attr + p.indices_shape[-1]] if p.op == "gather_nd" else p.data_shape[p.attr]
    )
    make = make_wild_indices if out_of_bounds else make_indices
    return make(p.indices_shape, sizes, np.int32, seed)


def _expected(p: Placement, mode: str, data: np.ndarray, idx: np.ndarray, ct: np.ndarray):
    """The NumPy reference's result, and the gradient: the cotangent scatter-added onto the
    positions that were read (none for filled positions)."""
    ref = ops_table.OPS[p.op].reference
    ref_mode = {"checked": "fill", "fill": "fill", "clip": "clip", "promise_in_bounds": "raise"}[mode]
    batch = {"batch_dims": p.batch_dims} if p.batch_dims else {}
    out = ref(data, idx, p.attr, mode=ref_mode, fill=np.nan, **batch)
    positions = ref(np.arange(data.size).reshape(data.shape), idx, p.attr, mode=ref_mode, fill=-1, **batch)
    read = positions >= 0
    grad = np.zeros(data.size, data.dtype)
    np.add.at(grad, positions[read], ct[read])
    return out, grad.reshape(data.shape)


def _equal(a, b) -> bool:
    a = np.asarray(a)
    return a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=True))


def _inputs(p: Placement, mode: str):
    rng = np.random.default_rng(1)
    # Integer values: sums of cotangents are exact in any order, so equality is exact.
    data = rng.integers(-50, 50, p.data_shape).astype(np.float32)
    idx = _indices(p, out_of_bounds=mode != "promise_in_bounds")
    return data, idx


def _mesh(shape):
    names = (X, Y)[: len(shape)]
    return Mesh(np.array(jax.devices()[: int(np.prod(shape))]).reshape(shape), names)


def _op(p: Placement, mode: str):
    op = ops_table.OPS[p.op].fn
    if p.batch_dims:
        return lambda d, i: op(d, i, p.attr, batch_dims=p.batch_dims, mode=mode)
    return lambda d, i: op(d, i, p.attr, mode=mode)


def run_placement(p: Placement, mode: str) -> dict:
    mesh = _mesh(p.mesh)
    data, idx = _inputs(p, mode)
    f = _op(p, mode)
    d = jax.device_put(data, NamedSharding(mesh, P(*p.data_spec)))
    i = jax.device_put(idx, NamedSharding(mesh, P(*p.indices_spec)))
    forward = jax.jit(f).lower(d, i).compile()
    out = forward(d, i)
    ct_host = np.random.default_rng(2).integers(-9, 9, out.shape).astype(np.float32)
    ct = jax.device_put(ct_host, out.sharding)  # the cotangent arrives laid out as the output
    backward = jax.jit(lambda d, i, ct: jax.vjp(lambda d: f(d, i), d)[1](ct)[0]).lower(d, i, ct).compile()
    grad = backward(d, i, ct)
    want_out, want_grad = _expected(p, mode, data, idx, ct_host)
    return {
        "equal": _equal(out, want_out),
        "grad_equal": _equal(grad, want_grad),
        "forward": collectives(forward.as_text()),
        "backward": collectives(backward.as_text()),
        "output_sharded": not out.sharding.is_fully_replicated,
    }


def _shard_map(f, mesh, in_specs, out_specs, check_rep=True):
    if hasattr(jax, "shard_map"):
        return jax.shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs)
    from jax.experimental.shard_map import shard_map  # older JAX (0.4.35 among them)

    return shard_map(f, mesh, in_specs, out_specs, check_rep=check_rep)


# shard_map of JAX 0.4.35 has no replication rule for cond, which lax.platform_dependent is (the
# pinned select's); JAX 0.5 has one. There the body is traced without the check.
OLD_SHARD_MAP_TAKES_COND = JAX_RELEASE >= (0, 5)


def run_shard_map(c: Placement, mode: str) -> dict:
    mesh = _mesh(c.mesh)
    data, idx = _inputs(c, mode)
    f = jax.jit(_shard_map(_op(c, mode), mesh, (P(*c.data_spec), P(*c.indices_spec)), P(X)))
    forward = f.lower(data, idx).compile()
    out = forward(data, idx)
    ct = np.random.default_rng(2).integers(-9, 9, out.shape).astype(np.float32)
    backward = (
        jax.jit(lambda d, i, ct: jax.vjp(lambda d: f(d, i), d)[1](ct)[0]).lower(data, idx, ct).compile()
    )
    grad = backward(data, idx, ct)
    want_out, want_grad = _expected(c, mode, data, idx, ct)
    return {
        "equal": _equal(out, want_out),
        "grad_equal": _equal(grad, want_grad),
        "forward": collectives(forward.as_text()),
        "backward": collectives(backward.as_text()),
    }


def run_checked_sharded() -> dict:
    """``jax_gather.checked`` around a jitted GatherND whose inputs are sharded on the batch dim:
    the check sees the whole indices, so the position is global."""
    p = BY_NAME["gather_nd/batch"]
    mesh = _mesh(p.mesh)
    data, idx = _inputs(p, "promise_in_bounds")
    bad = idx.copy()
    bad[5, 2, 0] = 10
    put = lambda a, spec: jax.device_put(a, NamedSharding(mesh, P(*spec)))
    f = jax_gather.checked(jax.jit(_op(p, "checked")))
    out = f(put(data, p.data_spec), put(idx, p.indices_spec))
    return {
        "equal": _equal(out, reference.gather_nd(data, idx, p.attr)),
        "error": _raised(lambda: f(put(data, p.data_spec), put(bad, p.indices_spec))),
    }


def run_checked_shard_map() -> dict:
    """``jax_gather.checked`` around a jitted shard_map: in bounds, then one bad index."""
    c = SHARD_MAP_CASES[1]
    mesh = _mesh(c.mesh)
    data, idx = _inputs(c, "promise_in_bounds")
    fn = jax.jit(_shard_map(_op(c, "checked"), mesh, (P(X), P(X)), P(X)))
    f = jax_gather.checked(fn, errors=checkify.index_checks)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = f(data, idx)
    bad = idx.copy()
    bad[5, 2] = 9  # row 5 is row 1 of the third device's block of two rows
    return {
        "equal": _equal(out, reference.gather_elements(data, idx, c.attr)),
        "warnings": [str(w.message) for w in caught],
        "error": _raised(lambda: f(data, bad)),
    }


def _raised(call) -> str | None:
    try:
        call()
    except IndexError as e:
        return str(e)
    return None


def _explicit_mesh(shape):
    from jax.sharding import AxisType

    return jax.make_mesh(shape, (X, Y)[: len(shape)], axis_types=(AxisType.Explicit,) * len(shape))


def _use_mesh(mesh):
    return jax.set_mesh(mesh) if hasattr(jax, "set_mesh") else jax.sharding.use_mesh(mesh)


def run_explicit(c: Placement, mode: str) -> dict:
    mesh = _explicit_mesh(c.mesh)
    data, idx = _inputs(c, mode)
    f = _op(c, mode)
    with _use_mesh(mesh):
        d = jax.device_put(data, NamedSharding(mesh, P(*c.data_spec)))
        i = jax.device_put(idx, NamedSharding(mesh, P(*c.indices_spec)))
        forward = jax.jit(f).lower(d, i).compile()
        out = forward(d, i)
        grad = jax.jit(jax.grad(lambda d, i: f(d, i).sum()))(d, i)
    want_out, want_grad = _expected(c, mode, data, idx, np.ones(out.shape, np.float32))
    return {
        "equal": _equal(out, want_out),
        "grad_equal": _equal(grad, want_grad),
        "output_spec": str(tuple(out.sharding.spec)),
        "forward": collectives(forward.as_text()),
    }


def run_checked_explicit() -> dict:
    """``jax_gather.checked`` with explicitly sharded inputs: its traced check must trace."""
    c = EXPLICIT_CASES[2]
    mesh = _explicit_mesh(c.mesh)
    data, idx = _inputs(c, "promise_in_bounds")
    bad = idx.copy()
    bad[6, 3, 0] = -11
    f = jax_gather.checked(jax.jit(_op(c, "checked")))
    with _use_mesh(mesh), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # JAX's own index checks may not trace
        put = lambda a, spec: jax.device_put(a, NamedSharding(mesh, P(*spec)))
        out = f(put(data, c.data_spec), put(idx, c.indices_spec))
        error = _raised(lambda: f(put(data, c.data_spec), put(bad, c.indices_spec)))
    return {"equal": _equal(out, reference.gather_nd(data, idx, c.attr)), "error": error}


def run_vmap_explicit() -> dict:
    """vmap over a batch dim sharded with an explicit axis, default mode and ``checked``."""
    mesh = _explicit_mesh((8,))
    data = np.arange(8 * 5 * 3, dtype=np.float32).reshape(8, 5, 3)
    idx = np.random.default_rng(0).integers(-5, 5, (8, 4))
    bad = idx.copy()
    bad[3, 2], bad[6, 1] = 7, 9  # the first failing example is reported
    f = jax.jit(jax.vmap(lambda d, i: jax_gather.gather(d, i, 0)))
    with _use_mesh(mesh), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # JAX's own index checks may not trace
        put = lambda a: jax.device_put(a, NamedSharding(mesh, P(X)))
        out = f(put(data), put(idx))
        error = _raised(lambda: jax_gather.checked(f)(put(data), put(bad)))
    expected = np.stack([reference.gather(d, i, 0) for d, i in zip(data, idx)])
    return {"equal": _equal(out, expected), "error": error}


def run_auto_axes() -> dict:
    """A placement JAX's explicit gather rule cannot resolve (ids sharded on x, the table's
    columns on y), made to trace by ``jax.sharding.auto_axes`` with the output's sharding."""
    mesh = _explicit_mesh((4, 2))
    p = BY_NAME["gather/2d-ids-x-table-columns-y"]
    data, idx = _inputs(p, "checked")
    lookup = jax.sharding.auto_axes(lambda t, i: jax_gather.gather(t, i), out_sharding=P(X, None, Y))
    with _use_mesh(mesh):
        t = jax.device_put(data, NamedSharding(mesh, P(*p.data_spec)))
        i = jax.device_put(idx, NamedSharding(mesh, P(*p.indices_spec)))
        compiled = jax.jit(lookup).lower(t, i).compile()
        out = compiled(t, i)
    return {
        "equal": _equal(out, reference.gather(data, idx, 0, mode="fill", fill=np.nan)),
        "output_spec": str(tuple(out.sharding.spec)),
        "forward": collectives(compiled.as_text()),
    }


# Selects of "fill" whose bits are pinned by run-time integers from the indices (bfloat16, which
# XLA:CPU may move through float32): a table's rows (JAX 0.11 and later pin the fill, before
# each element), a table of one row (XLA's broadcast: each element pinned under INLINE_FLOPS
# elements), and pairs of GatherND. Each from ids sharded on x, a signalling NaN as the fill.
PINNED_CASES = {
    "rows": ("gather", (64, 2), (64,)),
    "one row": ("gather", (1, 8), (64,)),
    "pairs": ("gather_nd", (8, 8, 4), (64, 2)),
}


def run_pinned(name: str, where: str) -> dict:
    """A pinned select from sharded ids, under ``jit`` over the mesh or inside ``shard_map``:
    whether every bit is the NumPy reference's, the collectives of the compiled program, and
    those of the same program with one pin for all indices lowered as on one device. Pinned as
    where XLA:CPU changes bfloat16's bits (JAX 0.10 to 0.12.1; the probe made to say so on any JAX)."""
    from jax_gather import _cpu, _fill

    keeps = _fill._xla_cpu_keeps_bits
    _fill._xla_cpu_keeps_bits = lambda dtype: False
    _cpu._choose.cache_clear()
    jax.clear_caches()
    try:
        return _run_pinned(name, where)
    finally:
        _fill._xla_cpu_keeps_bits = keeps
        _cpu._choose.cache_clear()
        jax.clear_caches()


def _run_pinned(name: str, where: str) -> dict:
    from jax_gather import _fill, _fill_pin

    op, data_shape, indices_shape = PINNED_CASES[name]
    mesh = _mesh((8,))
    bits = np.concatenate(_fill.changed_by_float32(np.dtype(jnp.bfloat16))[:2])  # sNaNs, subnormals
    table = np.resize(bits, data_shape)
    sizes = data_shape[: indices_shape[-1]] if op == "gather_nd" else data_shape[0]
    idx = make_wild_indices(indices_shape, sizes, np.int32, 3)
    fill = bits[:1].view(jnp.bfloat16)[0]
    f = lambda d, i: ops_table.OPS[op].fn(d, i, 0, mode="fill", fill_value=fill)
    if where == "shard_map":
        f = _shard_map(f, mesh, (P(), P(X)), P(X), check_rep=OLD_SHARD_MAP_TAKES_COND)
    d = jax.device_put(table.view(jnp.bfloat16), NamedSharding(mesh, P()))
    i = jax.device_put(idx, NamedSharding(mesh, P(X)))
    compiled = jax.jit(f).lower(d, i).compile()
    out = np.asarray(compiled(d, i)).view(np.uint16)
    first = compiled.as_text()  # inside shard_map's manual axes the first id is each block's own
    if where == "jit":
        as_on_one_device = _fill_pin._partitioned
        _fill_pin._partitioned = lambda context: False
        jax.clear_caches()  # lowered anew
        try:
            first = jax.jit(f).lower(d, i).compile().as_text()
        finally:
            _fill_pin._partitioned = as_on_one_device
            jax.clear_caches()
    ref = ops_table.OPS[op].reference
    return {
        "equal": _equal(out, ref(table, idx, 0, mode="fill", fill=bits[0])),
        "forward": collectives(compiled.as_text()),
        "one pin for all": collectives(first),
    }


def _record(case: str, run, *args) -> dict:
    try:
        return {"case": case, "error_text": None, **run(*args)}
    except Exception:  # reported to the parent, which fails the case with this text
        return {"case": case, "error_text": traceback.format_exc()}


def run_cpu_lowerings_on_a_mesh() -> dict:
    """With several CPU devices, no lowering pads or flattens data: padding or flattening a
    sharded dim would make the partitioner move data between devices."""
    from jax_gather import _cpu, plans

    mesh = _mesh((8,))
    put = lambda x, *spec: jax.device_put(x, NamedSharding(mesh, P(*spec)))
    nd = lambda d, i: jax_gather.gather_nd(d, i, 1, mode="fill")
    data, tuples = put(np.zeros((4, 64, 48), np.float32), None, X), put(np.zeros((4, 40, 2), np.int32))
    lookup = lambda d, i: jax_gather.gather(d, i, mode="fill")
    table, ids = put(np.zeros((64, 512), np.float32), None, X), put(np.zeros((64,), np.int32))
    names = {
        "gather_nd batch_dims=1": (plans.gather_nd_plan((4, 64, 48), (4, 40, 2), 1), (4, 64, 48)),
        "gather_elements": (plans.gather_elements_plan((64, 48), (64, 48), 1), (64, 48)),
        "short lookup": (plans.gather_plan((64, 512), (64,)), (64, 512)),
    }
    grad = lambda f: jax.grad(lambda d, i: f(d, i).sum())
    hlo = lambda f, *args: jax.jit(f).lower(*args).compile().as_text()
    return {
        "names": {
            k: sorted(_cpu.lowering(plan, shape, np.float32).names) for k, (plan, shape) in names.items()
        },
        "gather_nd batch_dims=1": collectives(hlo(nd, data, tuples)),
        "gather_nd batch_dims=1 backward": collectives(hlo(grad(nd), data, tuples)),
        "short lookup": collectives(hlo(lookup, table, ids)),
    }


def report() -> dict:
    records = []
    for p in PLACEMENTS:
        for mode in MODES:
            records.append(_record(f"{p.name}:{mode}", run_placement, p, mode))
    for c in SHARD_MAP_CASES:
        for mode in MODES:
            records.append(_record(f"shard_map/{c.name}:{mode}", run_shard_map, c, mode))
    records.append(_record("sharded:checked()", run_checked_sharded))
    records.append(_record("shard_map:checked()", run_checked_shard_map))
    records.append(_record("cpu_lowerings", run_cpu_lowerings_on_a_mesh))
    has_explicit = hasattr(getattr(jax.sharding, "AxisType", None), "Explicit")
    if has_explicit:
        for c in EXPLICIT_CASES:
            for mode in MODES:
                records.append(_record(f"explicit/{c.name}:{mode}", run_explicit, c, mode))
        records.append(_record("explicit:checked()", run_checked_explicit))
        records.append(_record("explicit:vmap", run_vmap_explicit))
        records.append(_record("explicit:auto_axes", run_auto_axes))
    for name in PINNED_CASES:  # last: each clears JAX's caches
        for where in ("jit", "shard_map"):
            records.append(_record(f"pinned/{name}:{where}", run_pinned, name, where))
    return {
        "jax": jax.__version__,
        "devices": jax.device_count(),
        "explicit_axes": has_explicit,
        "records": records,
    }


def _median_ms(fn, *args, reps: int = 7) -> float:
    fn(*args).block_until_ready()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn(*args).block_until_ready()
        times.append(time.perf_counter() - start)
    return 1e3 * float(np.median(times))


def table() -> str:
    """The README's tables: collectives per placement (default mode), and a coarse timing of an
    embedding lookup and a batched GatherND, sharded against unsharded."""
    spec = lambda entries: "P(" + ", ".join(map(repr, entries)) + ")"
    show = lambda found: ", ".join(found) or "none"
    lines = [
        "| placement | mesh | data | indices | forward | backward (grad w.r.t. data) |",
        "|---|---|---|---|---|---|",
    ]
    for p in PLACEMENTS:
        r = run_placement(p, "checked")
        mesh = ", ".join(f"{a}={n}" for n, a in zip(p.mesh, (X, Y)))
        attr = f"batch_dims={p.attr}" if p.op == "gather_nd" else f"axis {p.attr}"
        lines.append(
            f"| `{p.name}` ({attr}) | {mesh} | `{spec(p.data_spec)}` | `{spec(p.indices_spec)}` | "
            f"{show(r['forward'])} | {show(r['backward'])} |"
        )
    lines += ["", "| workload | placement | ms (median of 7) |", "|---|---|---|"]
    rng = np.random.default_rng(0)
    mesh = _mesh((8,))
    table_, ids = rng.standard_normal((32768, 256), np.float32), rng.integers(0, 32768, 8192)
    data, tuples = rng.standard_normal((64, 512, 128), np.float32), rng.integers(0, 512, (64, 256, 1))
    workloads = [
        (
            "embedding 32768x256, 8192 ids",
            lambda t, i: jax_gather.gather(t, i),
            table_,
            ids,
            [
                ("unsharded", None, None),
                ("table by columns", (None, X), ()),
                ("table by rows", (X, None), ()),
                ("ids sharded", (), (X,)),
            ],
        ),
        (
            "GatherND batch_dims=1, 64x512x128, 64x256 tuples",
            lambda d, i: jax_gather.gather_nd(d, i, 1),
            data,
            tuples,
            [("unsharded", None, None), ("batch dim sharded", (X,), (X,))],
        ),
    ]
    for name, f, a, b, placements in workloads:
        for label, a_spec, b_spec in placements:
            if a_spec is None:
                args = (jax.device_put(a, jax.devices()[0]), jax.device_put(b, jax.devices()[0]))
            else:
                args = (
                    jax.device_put(a, NamedSharding(mesh, P(*a_spec))),
                    jax.device_put(b, NamedSharding(mesh, P(*b_spec))),
                )
            lines.append(f"| {name} | {label} | {_median_ms(jax.jit(f), *args):.2f} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if jax.device_count() < DEVICES:
        print(
            json.dumps(
                {
                    "error": f"need {DEVICES} devices, got {jax.device_count()}: set "
                    f"XLA_FLAGS=--xla_force_host_platform_device_count={DEVICES}"
                }
            )
        )
        return 2
    print(table() if "--table" in argv else json.dumps(report()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
