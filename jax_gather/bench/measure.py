"""One benchmark case measured against its peers: the row of results (:func:`run_case`).

Each round times every contender (:mod:`jax_gather.bench.peers`) by paired rounds
(:mod:`jax_gather.bench.timing`); the figure reported per shape is the median over rounds of the
per-round ratio jax_gather / best peer (the peer with the lowest median time; each round
compares with its time in that round), with a distribution-free interval for that median, and
an A/A ratio: the default mode against the same program compiled a second time, timed as one
more contender, which shows how far apart this run puts two identical programs. Also reported:
achieved bandwidth against a memory copy of the same size timed in the same run, the backward
pass (gradient w.r.t. data) against jnp's, and the page faults per call.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from jax_gather.bench.cases import CASES, Case, make_inputs, output_shape
from jax_gather.bench.peers import PEERS, SAME_PROGRAM, backward_contenders, contenders
from jax_gather.bench.report import progress
from jax_gather.bench.timing import (
    SETTLE_S,
    median_ratio,
    memcpy_bandwidth,
    page_faults_per_call,
    paired,
    paired_rounds,
    verdict,
)


def run_case(
    case: Case, rounds: int, reps: int, backward: bool = True, seed: int = 0, settle: float = SETTLE_S
) -> dict[str, Any]:
    """Measures one case; returns its row of results."""
    rng = np.random.default_rng(seed)
    data, indices = make_inputs(case, rng)
    calls = contenders(case, data, indices)
    times = paired_rounds(calls, rounds, reps, settle)
    peers = [p for p in PEERS if p in times]
    medians = {k: float(np.median(v)) for k, v in times.items()}
    # The best peer is the one with the lowest median time, and each round is compared with its
    # time in that round. Not the fastest peer of each round: where two peers tie, the smaller
    # of two noisy times is biased low (up to 1.18x on this machine's tied shapes).
    best_peer = min(peers, key=lambda p: medians[p])
    best = np.asarray(times[best_peer])
    out_bytes = int(np.prod(output_shape(case, data, indices))) * data.dtype.itemsize
    moved = 2 * out_bytes + indices.size * 4  # gathered reads + output writes + int32 indices
    row: dict[str, Any] = {
        "case": case.name,
        "dtype": case.dtype,
        "median_s": medians,
        "rounds_s": {k: [float(t) for t in v] for k, v in times.items()},
        "best_peer": best_peer,
        "ratio_vs_round_min": median_ratio(times["jax_gather"], np.min([times[p] for p in peers], axis=0)),
        "ratio_promise": median_ratio(times["jax_gather[promise]"], best),
        "ratio_vs_jnp": median_ratio(times["jax_gather"], times["jnp"]),
        "ratio_vs_openvino": (
            median_ratio(times["jax_gather"], times["openvino"]) if "openvino" in times else None
        ),
        "checked_over_fill": median_ratio(times["jax_gather"], times["jax_gather[fill]"]),
        "bandwidth_GBps": moved / medians["jax_gather"] / 1e9,
        "memcpy_GBps": memcpy_bandwidth(out_bytes, reps) / 1e9,
        "page_faults_per_call": page_faults_per_call(calls["jax_gather"], max(reps, 5)),
    }
    row["ratio"], row["ratio_interval"] = paired(times["jax_gather"], best)
    row["verdict"] = verdict(row["ratio_interval"])
    if SAME_PROGRAM in times:
        row["same_program_ratio"], row["same_program_interval"] = paired(
            times["jax_gather"], times[SAME_PROGRAM]
        )
    if backward:
        grads = backward_contenders(case, data, indices)
        if grads:
            gtimes = paired_rounds(grads, rounds, reps, settle)
            row["backward_ratio_vs_jnp"], row["backward_interval"] = paired(
                gtimes["jax_gather"], gtimes["jnp"]
            )
            row["backward_median_s"] = {k: float(np.median(v)) for k, v in gtimes.items()}
    return row


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
        progress(k, len(cases), case.name)
        rows.append(run_case(case, rounds, reps, backward=backward, settle=settle))
    progress(len(cases), len(cases), "done")
    return rows
