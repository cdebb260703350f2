"""The validation figure: every published number against our prediction, on log axes with the
y = x line, one panel per kind of metric (shares and speedups; iterations per second; token
counts), a marker per experiment, filled when the prediction is inside its target band."""

from __future__ import annotations

import os

STYLE = {  # experiment: (marker, colour), Okabe-Ito
    "zhuzilin": ("o", "#0072B2"),
    "zhuzilin-its": ("X", "#000000"),
    "zhuzilin-mha": ("h", "#56B4E9"),
    "zhuzilin-mha-its": ("*", "#999999"),
    "zhuzilin-issue55": ("p", "#F0E442"),
    "zhuzilin-issue55-its": ("d", "#F0E442"),
    "striped-t3": ("s", "#E69F00"),
    "striped-t4": ("^", "#009E73"),
    "striped-t5": ("D", "#CC79A7"),
    "ring-t2": ("v", "#D55E00"),
    "ring-t3": ("P", "#56B4E9"),
    "nemo-long": ("o", "#009E73"),
    "llama3-t4": ("s", "#D55E00"),
}
SHARES = ("zhuzilin", "zhuzilin-mha", "zhuzilin-issue55")
PANELS = (
    ("share of ideal and speedup", (*SHARES, "striped-t3", "striped-t4", "striped-t5")),
    (
        "iterations per second (ring-flash-attention)",
        ("zhuzilin-its", "zhuzilin-mha-its", "zhuzilin-issue55-its"),
    ),
    ("tokens (Ring Attention Tables 2 and 3)", ("ring-t2", "ring-t3")),
    ("TFLOPS per GPU, whole training steps", ("nemo-long", "llama3-t4")),
)


def plot_validation(
    results: list[dict],
    path: str | os.PathLike | None = None,
    *,
    title=None,
    columns: int = 2,
):
    """Draw ``results`` (``ringsim.timer.studies.validate.validate()``): x = published, y =
    predicted. Hollow markers are outside their band. ``columns``: panels two by two (2, a
    wide figure for a file) or stacked (1: a page column, each legend right of its panel).
    Returns the figure; writes it to ``path`` if given."""
    from ringsim.views.plots import pyplot, save_figure

    if columns not in (1, 2):
        raise ValueError(f"columns must be 1 or 2, got {columns!r}")
    plt = pyplot()
    stacked = columns == 1
    rows = len(PANELS) if stacked else -(-len(PANELS) // 2)
    fig, axes = plt.subplots(
        rows,
        1 if stacked else 2,
        figsize=(8, 3.3 * len(PANELS)) if stacked else (11, 4.8 * rows),
        squeeze=False,
        layout="constrained" if stacked else None,
    )
    for ax, (label, experiments) in zip(axes.flat, PANELS, strict=True):
        values = []
        for name in experiments:
            rows = [r for r in results if r["experiment"] == name]
            if not rows:
                continue
            marker, colour = STYLE[name]
            for inside in (True, False):
                part = [r for r in rows if r["in_band"] is inside]
                if not part:
                    continue
                ax.scatter(
                    [r["published"] for r in part],
                    [r["predicted"] for r in part],
                    marker=marker,
                    s=36,
                    facecolors=colour if inside else "none",
                    edgecolors=colour,
                    label=f"{name} ({sum(r['in_band'] for r in rows)}/{len(rows)} in band)"
                    if inside or not any(r["in_band"] for r in rows)
                    else None,
                )
            values += [r["published"] for r in rows] + [r["predicted"] for r in rows]
        if values:
            low, high = min(values) / 1.3, max(values) * 1.3
            ax.plot([low, high], [low, high], color="0.3", lw=1, ls="--", label="y = x")
            ax.set_xlim(low, high)
            ax.set_ylim(low, high)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("published")
        ax.set_ylabel("predicted")
        ax.set_title(label, fontsize=10)
        if ax.get_legend_handles_labels()[0]:
            if stacked:
                ax.legend(fontsize=9, loc="center left", bbox_to_anchor=(1.02, 0.5))
            else:
                ax.legend(fontsize=8, loc="upper left")
        ax.grid(True, which="both", alpha=0.3)
    fig.suptitle(title or "ringsim validate: predicted against published (filled = in band)")
    if not stacked:
        fig.tight_layout()
    return save_figure(plt, fig, path)
