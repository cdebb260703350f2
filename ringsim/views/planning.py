"""The planner's figure: predicted step time against memory per host, one point per candidate
(``ringsim.timer.studies.planner``), the device's memory as a wall and the best candidate ringed."""

from __future__ import annotations

import os

MARKERS = {"ring": "o", "ulysses": "s", "hybrid": "^", "double-ring": "D", "allgather": "v"}
COLOURS = {  # Okabe-Ito
    "ring": "#0072B2",
    "ulysses": "#E69F00",
    "hybrid": "#009E73",
    "double-ring": "#CC79A7",
    "allgather": "#D55E00",
}


def plot_plan(plan, path: str | os.PathLike | None = None, *, ax=None, title: str | None = None):
    """Draw ``plan`` (a ``Plan``): x = GB per host, y = step time; candidates that do not fit
    sit right of the memory wall at the bottom (they were never timed). Returns the figure;
    writes it to ``path`` if given."""
    from ringsim.views.plots import pyplot, save_figure

    plt = pyplot()
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(7.5, 4.5))
    else:
        fig = ax.figure
    unit = "step" if plan.mode == "train" else "forward"
    for strategy, marker in MARKERS.items():
        points = [c for c in plan.candidates if c.strategy == strategy]
        if points:
            ax.scatter(
                [c.bytes_per_host / 1e9 for c in points],
                [c.step_time_s for c in points],
                marker=marker,
                color=COLOURS[strategy],
                label=strategy,
                alpha=0.8,
            )
    best = plan.candidates[0]
    ax.scatter(
        [best.bytes_per_host / 1e9],
        [best.step_time_s],
        s=220,
        facecolors="none",
        edgecolors="black",
        label=f"best: {best.label}",
    )
    budget = best.memory_bytes / 1e9
    ax.axvline(budget, color="black", linestyle="--", linewidth=1)
    ax.annotate(" device memory", (budget, ax.get_ylim()[1]), va="top", fontsize=8)
    if plan.dropped:
        low = ax.get_ylim()[0]
        ax.scatter(
            [c.bytes_per_host / 1e9 for c in plan.dropped],
            [low] * len(plan.dropped),
            marker="x",
            color="grey",
            label=f"does not fit ({len(plan.dropped)})",
        )
    ax.set_xlabel("memory per device (GB)")
    ax.set_ylabel(f"predicted time per {unit} (s)")
    ax.set_title(
        title
        or f"{plan.model}, {plan.seq_len:,} tokens on {plan.hosts} x {plan.cluster.hardware.name}"
    )
    ax.legend(fontsize=8, loc="best")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return save_figure(plt, fig, path, dpi=120)  # atomic; the figure stays open without a path
