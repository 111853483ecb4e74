"""``python -m jax_gather`` / ``jax-gather``: a tour of the ops through the specs' examples."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import jax
import numpy as np

import jax_gather
from jax_gather.spec_examples import SPEC_EXAMPLES

_OPS = {
    "gather": (jax_gather.gather, jax_gather.gather_plan),
    "gather_elements": (jax_gather.gather_elements, jax_gather.gather_elements_plan),
    "gather_nd": (jax_gather.gather_nd, jax_gather.gather_nd_plan),
}


def _inline(x: object) -> str:
    return " ".join(np.array2string(np.asarray(x), separator=", ").split())


def tour(out=sys.stdout) -> int:
    """Runs every spec example through its op, jitted, and prints the plan it used."""
    devices = ", ".join(str(d) for d in jax.devices())
    print(
        f"jax_gather {jax_gather.__version__} on JAX {jax.__version__}, "
        f"backend {jax.default_backend()} ({devices})\n",
        file=out,
    )
    failures = 0
    for ex in SPEC_EXAMPLES:
        op, plan_fn = _OPS[ex.op]
        data, indices = np.asarray(ex.data), np.asarray(ex.indices)
        result = jax.jit(op, static_argnums=2)(data, indices, ex.value)
        plan = plan_fn(data.shape, indices.shape, ex.value)
        ok = np.allclose(np.asarray(result), np.asarray(ex.expected))
        failures += not ok
        dn = plan.dimension_numbers
        print(f"{ex.name}  [{ex.source}]", file=out)
        print(f"  jax_gather.{ex.op}(data, indices, {ex.attribute}={ex.value})", file=out)
        print(f"  data    {_inline(data)}", file=out)
        print(f"  indices {_inline(indices)}", file=out)
        print(
            f"  output  {_inline(result)}  {'matches the spec' if ok else 'DIFFERS from the spec'}", file=out
        )
        print(
            f"  lax.gather: offset_dims={dn.offset_dims} collapsed_slice_dims="
            f"{dn.collapsed_slice_dims} start_index_map={dn.start_index_map} "
            f"operand_batching_dims={dn.operand_batching_dims} start_indices_batching_dims="
            f"{dn.start_indices_batching_dims} slice_sizes={plan.slice_sizes}\n",
            file=out,
        )
    print(f"{len(SPEC_EXAMPLES) - failures} of {len(SPEC_EXAMPLES)} spec examples match.", file=out)
    return 1 if failures else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="jax-gather",
        description="ONNX Gather, GatherElements and GatherND for JAX. "
        "With no command: a tour of the spec examples.",
    )
    commands = parser.add_subparsers(dest="command", title="commands")
    bench = commands.add_parser(
        "bench",
        help="time jax_gather against jnp, onnxruntime and numpy on this machine",
        description="Paired-ratio benchmark of jax_gather against its peers (see jax_gather.bench).",
    )
    bench.add_argument(
        "--quick",
        action="store_true",
        help="the seven float32 shapes and the small calls, fewer rounds (< 1 min)",
    )
    bench.add_argument(
        "--grid",
        action="store_true",
        help="every op x dtype x row width x index count x mode against jnp's same call, with "
        "heatmaps (--plot PREFIX) and JSON (--json); with --quick a smaller grid (< 2 min)",
    )
    bench.add_argument(
        "--remeasure",
        metavar="FILE",
        help="with --grid: time again, alone over 15 rounds, the cells of FILE (a grid's JSON, "
        "written by --grid --json) that were slower past their A/A band, every median above "
        "1.25 and at least the 15 highest; the results are added to FILE",
    )
    bench.add_argument(
        "--random",
        metavar="N",
        type=int,
        default=0,
        help="with --grid: N cells drawn off the grid's axes instead (widths and counts between its "
        "points, more dtypes), the same for the same --seed",
    )
    bench.add_argument("--seed", type=int, default=0, help="with --grid --random: which cells are drawn")
    bench.add_argument(
        "--tables",
        action="store_true",
        help="with --grid --random: draw the indexed axis's length too (1 to 2**18 entries; "
        "else the grid's 4096)",
    )
    bench.add_argument(
        "--table",
        metavar="N",
        type=int,
        help="with --grid (not --random): an indexed axis of N entries instead of the grid's 4096 "
        "(1: every index reads one slice)",
    )
    bench.add_argument(
        "--eager",
        action="store_true",
        help="with --grid: eager calls of both (no jax.jit), the checked mode judged on the host",
    )
    bench.add_argument(
        "--numpy",
        action="store_true",
        help="with --grid --eager: NumPy inputs (data 16 bytes past a 64-byte boundary, as NumPy's "
        "large arrays start; int64 indices), given to jnp.take and take_along_axis as they are, to "
        "indexing through jnp.asarray",
    )
    bench.add_argument(
        "--backward",
        action="store_true",
        help="with --grid: the gradients w.r.t. data of both, jitted (float32, bfloat16, float16)",
    )
    bench.add_argument(
        "--host-work-us",
        type=float,
        metavar="US",
        help="with --grid: US microseconds of other work on the calling thread after each timed "
        "call, not counted in its time (a program's loop: JAX's worker threads then fall asleep "
        "between calls, as they do not between calls issued back to back, the default)",
    )
    bench.add_argument(
        "--in-range",
        action="store_true",
        help="with --grid: indices in [0, s-1], a user's common case (else a tenth are negative)",
    )
    bench.add_argument("--rounds", type=int, help="paired rounds per case (default 5 quick, 11 full)")
    bench.add_argument("--only", metavar="TEXT", help="only the cases whose name contains TEXT")
    bench.add_argument("--json", metavar="FILE", help="write the results as JSON")
    bench.add_argument("--plot", metavar="FILE.png", help="write a bar chart of the ratios (matplotlib)")
    bench.add_argument("--no-backward", action="store_true", help="skip the gradient timings")
    bench.add_argument(
        "--no-overhead",
        action="store_true",
        help="skip the overhead section (eager calls, small jitted programs, a prepared model's run)",
    )
    bench.add_argument(
        "--settle-ms",
        type=float,
        metavar="MS",
        help="untimed calls before each timed block, so no contender is timed while the previous "
        "one's threads still spin (default 60; 0 times right after the previous contender)",
    )
    bench.add_argument(
        "--no-tune-allocator",
        dest="tune_allocator",
        action="store_false",
        help="measure with glibc's default allocator settings (see tune_cpu_allocator)",
    )
    bench.add_argument(
        "--compare-allocator",
        action="store_true",
        help="also measure every case in a fresh process with glibc's default allocator",
    )
    bench.add_argument(
        "--sync-dispatch",
        action="store_true",
        help="run CPU programs on the calling thread (jax_cpu_enable_async_dispatch=False): "
        "short calls skip the hand-over to JAX's worker thread",
    )
    args = parser.parse_args(argv)
    if args.command == "bench":
        from jax_gather.bench import command

        return command.main(args)
    return tour()


if __name__ == "__main__":
    raise SystemExit(main())
