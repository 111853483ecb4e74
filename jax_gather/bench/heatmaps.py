"""The grid's heatmaps: one per op and dtype, a figure per mode (matplotlib), red where
jax_gather is slower than jnp; cells off the grid's axes (``--random``) as scatter plots."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from jax_gather.bench.grid import COUNTS, DTYPES, MODES, OPS, RANDOM_DTYPES, WIDTHS, slower, timed


def plot(rows: Sequence[dict[str, Any]], prefix: str) -> list[str]:
    """One heatmap per op and dtype (a figure per mode): red where jax_gather is slower than
    jnp, blue where faster; a cell past the A/A band and SLOWER is boxed. Returns the paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import TwoSlopeNorm

    rows = timed(rows)
    ops = [op for op in OPS if any(r["op"] == op for r in rows)]
    dtypes = [dt for dt in DTYPES + RANDOM_DTYPES if any(r["dtype"] == dt for r in rows)]
    widths = sorted({r["width"] for r in rows})
    counts = sorted({r["count"] for r in rows})
    norm = TwoSlopeNorm(vmin=0.25, vcenter=1.0, vmax=2.0)
    if not (set(widths) <= set(WIDTHS) and set(counts) <= set(COUNTS)):
        return _scatter(rows, prefix, ops, norm, plt)  # random cells: no axes to tabulate on
    paths = []
    for mode in MODES:
        fig, axes = plt.subplots(
            len(ops), len(dtypes), figsize=(3.6 * len(dtypes), 2.7 * len(ops)), squeeze=False
        )
        for (a, op), (b, dt) in ((x, y) for x in enumerate(ops) for y in enumerate(dtypes)):
            ax = axes[a][b]
            grid = np.full((len(widths), len(counts)), np.nan)
            for r in rows:
                if r["op"] == op and r["dtype"] == dt:
                    y, x = widths.index(r["width"]), counts.index(r["count"])
                    grid[y, x] = r[mode]
                    if slower(r, mode):
                        ax.add_patch(plt.Rectangle((x - 0.5, y - 0.5), 1, 1, fill=False, lw=1.5))
            ax.imshow(grid, cmap="RdBu_r", norm=norm, aspect="auto")
            for (y, x), v in np.ndenumerate(grid):
                if not np.isnan(v):
                    ax.text(x, y, f"{v:.2f}", ha="center", va="center", fontsize=5.5)
            ax.set_xticks(range(len(counts)), [_short(n) for n in counts], fontsize=6)
            ax.set_yticks(range(len(widths)), widths, fontsize=6)
            ax.set_title(f"{op}, {dt}", fontsize=8)
            if b == 0:
                ax.set_ylabel("row width", fontsize=7)
            if a == len(ops) - 1:
                ax.set_xlabel("index count", fontsize=7)
        fig.suptitle(f"jax_gather / jnp, jitted, mode {mode} (red: slower; boxed: past the A/A band)")
        paths.append(_saved(fig, plt, f"{prefix}-{mode}.png", top=0.98))
    return paths


def _scatter(rows: Sequence[dict[str, Any]], prefix: str, ops: list[str], norm: Any, plt: Any) -> list[str]:
    """Cells off the grid's axes (--random): per mode, a panel per op, each cell a point at its
    index count and row width (log scales) coloured by its ratio, ringed where it is slower."""
    paths = []
    for mode in MODES:
        fig, axes = plt.subplots(1, len(ops), figsize=(3.2 * len(ops), 3.2), squeeze=False)
        for ax, op in zip(axes[0], ops):
            mine = [r for r in rows if r["op"] == op]
            ax.scatter(
                [r["count"] for r in mine],
                [r["width"] for r in mine],
                c=[r[mode] for r in mine],
                cmap="RdBu_r",
                norm=norm,
                s=18,
                edgecolors=["black" if slower(r, mode) else "none" for r in mine],
            )
            ax.set(xscale="log", yscale="log", title=op, xlabel="index count")
            ax.title.set_fontsize(8)
        axes[0][0].set_ylabel("row width")
        fig.suptitle(
            f"jax_gather / jnp at random sizes, mode {mode} (red: slower; ringed: past the A/A band)"
        )
        paths.append(_saved(fig, plt, f"{prefix}-{mode}.png", top=0.94))
    return paths


def _saved(fig: Any, plt: Any, path: str, top: float) -> str:
    """``fig`` laid out under its title (which ends at ``top``), written to ``path`` and closed."""
    fig.tight_layout(rect=(0, 0, 1, top))
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _short(n: int) -> str:
    return f"{n >> 20}M" if n >= 1 << 20 else f"{n >> 10}k" if n >= 8192 else str(n)
