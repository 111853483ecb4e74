"""The benchmark's bar chart (``bench --plot FILE.png``); matplotlib is imported only here."""

from __future__ import annotations

from typing import Any

import numpy as np


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
