"""What the benchmark prints: the table of its rows, the verdicts under it, and its progress."""

from __future__ import annotations

import sys
from typing import Any

from jax_gather.bench.timing import geomean, verdict


def _faults(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


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


def format_table(rows: list[dict[str, Any]]) -> str:
    """The rows of :func:`jax_gather.bench.run` as a table, with the geometric mean and the
    verdicts under it (and the glibc-allocator columns where the rows have them)."""
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
            f"geometric mean of ratios (jax_gather / best peer): {geomean(ratios):.2f}; "
            f"worst {max(ratios):.2f}"
        )
        lines += _verdict_lines(rows)
        other = [r["glibc_default"]["ratio"] for r in rows if "glibc_default" in r]
        if other:
            lines.append(
                f"the same in a fresh process with glibc's default allocator: "
                f"{geomean(other):.2f}; worst {max(other):.2f}"
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
        apart = [r["case"] for r in same if verdict(r["same_program_interval"]) != "level"]
        lines.append(
            f"A/A, one program against its second compile: {min(ratios):.2f}-{max(ratios):.2f}; "
            f"told apart on {len(apart)} of {len(same)} shapes" + _names(apart)
        )
    return lines


def _count_verdicts(rows: list[dict[str, Any]], key: str, of: str = "") -> str:
    by = {v: [r["case"] for r in rows if verdict(r[key]) == v] for v in ("ahead", "level", "behind")}
    ahead = f"ahead {of} on" if of else "ahead on"
    return f"{ahead} {len(by['ahead'])}, level on {len(by['level'])}, behind on {len(by['behind'])}" + _names(
        by["behind"]
    )


def _names(cases: list[str]) -> str:
    return f" ({', '.join(cases)})" if cases else ""


def progress(done: int, total: int, label: str) -> None:
    """A progress bar on stderr, where stderr is a terminal (not in a log file)."""
    if sys.stderr.isatty():
        width = 24
        filled = int(width * done / total)
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {label[:48]:48s}")
        if done == total:
            sys.stderr.write("\n")
        sys.stderr.flush()
