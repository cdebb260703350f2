"""The views of a comparison (``ringsim.timer.studies.compare``): one figure with the measured
and the predicted timelines on one time axis and each step's parts side by side, and one
Perfetto trace holding both runs (measured hosts first, predicted hosts after them).

matplotlib is imported only when a figure is drawn.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ringsim.files import check_output_path, write_json
from ringsim.views.plots import (
    _draw_gantt,
    _legend_handles,
    percent,
    pyplot,
    save_figure,
    time_unit,
)
from ringsim.views.trace import chrome_trace

PART_COLOURS = {  # Okabe-Ito, as the Gantt charts
    "attention": "#0072B2",
    "merge": "#56B4E9",
    "exposed_transfer": "#E69F00",
    "idle": "#BBBBBB",
}
PART_LABELS = {
    "attention": "attention calls",
    "merge": "merges and other compute",
    "exposed_transfer": "exposed transfer",
    "idle": "idle (late neighbour, host gaps)",
}
PREDICTED_PID = 1000  # the predicted run's hosts in the combined trace: 1000 + h


def plot_comparison(
    comparison,
    path: str | os.PathLike | None = None,
    *,
    max_hosts: int = 8,
    width: float = 11.0,
):
    """The figure of ``comparison``: measured and predicted Gantt charts (each host from the
    start of its own pass) and, per step, the slowest host's parts, measured beside
    predicted. A time alone (no measured steps) shows the prediction and the two totals.
    ``width``: inches (a page column is about 8: the text grows to stay readable). Saves to
    ``path`` when given; returns the matplotlib Figure."""
    plt = pyplot()
    predicted = comparison.result.timeline
    measured = None
    if comparison.recorded is not None and comparison.recorded.timeline is not None:
        measured = comparison.recorded.timeline
    panels = [("measured", measured)] if measured is not None else []
    panels.append(("predicted", predicted))
    span = max(comparison.measured_s, max(t.makespan for _, t in panels)) or 1.0
    unit = time_unit(span)
    rows = [min(t.hosts, max_hosts) for _, t in panels]
    heights = [0.34 * r + 0.9 for r in rows] + [2.4]
    fig, axes = plt.subplots(
        len(heights),
        1,
        figsize=(width, sum(heights) + 1.2),
        gridspec_kw={"height_ratios": heights},
    )
    for ax, (label, timeline) in zip(axes[:-1], panels, strict=True):
        _draw_gantt(ax, timeline, max_hosts=max_hosts, span=span, unit=unit, width=width)
        total = comparison.measured_s if label == "measured" else comparison.predicted.point
        ax.set_title(
            f"{label}: {total * unit[1]:.4g} {unit[0]}, idle {percent(timeline.idle_fraction)}",
            fontsize=10,
            loc="left",
        )
    _step_bars(axes[-1], comparison, unit, small=9 if width < 10 else 8)
    handles = _legend_handles()
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), frameon=False, fontsize=9)
    cfg = comparison.config
    run = (
        f"{cfg.hosts} hosts, {cfg.block_tokens} tokens each, {cfg.layout}"
        f"{', causal' if cfg.causal else ''}, {cfg.dtype}, {cfg.hardware.name}, "
        f"{cfg.implementation}"
    )
    verdict = f"{comparison.verdict} (measured / predicted {comparison.ratio:.2f})"
    joint = ":\n" if len(run) + len(verdict) > 9 * width else ": "  # keep it inside the figure
    fig.suptitle(run + joint + verdict, x=0.01, ha="left", fontsize=11, fontweight="bold")
    fig.tight_layout(rect=(0, 0.04, 1, 0.97))
    return save_figure(plt, fig, path)


def _step_bars(ax, comparison, unit: tuple[str, float], small: int = 8) -> None:
    """Per step, the slowest host's parts: measured (left bar) and predicted (right bar)."""
    name, scale = unit
    pairs = [("predicted", comparison.predicted_steps)]
    if comparison.measured_steps is not None:
        pairs.insert(0, ("measured", comparison.measured_steps))
    steps = np.arange(len(comparison.predicted_steps))
    width = 0.8 / len(pairs)
    for i, (label, splits) in enumerate(pairs):
        x = steps - 0.4 + width * (i + 0.5)
        bottom = np.zeros(len(splits))
        for part, colour in PART_COLOURS.items():
            values = np.array([getattr(s, part) or 0.0 for s in splits]) * scale
            ax.bar(
                x,
                values,
                width * 0.92,
                bottom=bottom,
                color=colour,
                lw=0,
                label=PART_LABELS[part] if i == 0 else None,
                hatch=None if label == "measured" else "//",
                edgecolor="white",
            )
            bottom += values
        for xi, top in zip(x, bottom, strict=True):
            ax.text(xi, top, label[0], ha="center", va="bottom", fontsize=small)
    ax.set_xticks(steps)
    ax.set_xticklabels([str(s) for s in steps])
    ax.set_xlabel("ring step (m: measured, p: predicted, hatched; each the step's slowest host)")
    ax.set_ylabel(f"{name}")
    top = max(ax.get_ylim()[1], 1e-12)
    ax.set_ylim(0, top * (1.45 if small <= 8 else 1.7))  # room for the legend above the bars
    ax.legend(fontsize=small, ncol=2 if small > 8 else 4, frameon=False, loc="upper center")
    ax.grid(axis="y", color="#BBBBBB", lw=0.5, alpha=0.6)
    ax.set_axisbelow(True)


def comparison_trace(comparison) -> dict:
    """One Chrome/Perfetto trace of both runs: the measured hosts as processes ``0..P-1``
    (named ``measured host h``), the predicted ones as ``1000 + h``; each host from the start
    of its own pass."""
    events: list[dict] = []
    runs = []
    if comparison.recorded is not None and comparison.recorded.timeline is not None:
        runs.append(("measured", comparison.recorded.timeline, 0, comparison.recorded.members))
    predicted = comparison.result.timeline
    runs.append(("predicted", predicted, PREDICTED_PID, list(range(predicted.hosts))))
    for label, timeline, base, ranks in runs:
        for event in chrome_trace(timeline, name=label)["traceEvents"]:
            event = dict(event, pid=base + event["pid"])
            if event.get("name") == "process_name":
                host = ranks[event["pid"] - base]
                event["args"] = {"name": f"{label} host {host}"}
            if event.get("name") == "process_sort_index":
                event["args"] = {"sort_index": event["pid"]}
            events.append(event)
    other = {"name": "ringsim compare", "verdict": comparison.verdict}
    other["measured_s"], other["predicted_s"] = comparison.measured_s, comparison.predicted.point
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}


def write_comparison_trace(comparison, path: str | Path) -> None:
    """``comparison_trace`` to ``path`` (strict JSON, atomically)."""
    check_output_path("path", path)
    write_json(path, comparison_trace(comparison), indent=None, separators=(",", ":"))
