"""The planner's figures (``ringsim.timer.studies.planner``): predicted step time against memory
per GPU, one point per candidate, the usable memory as a wall and the best candidate ringed
(``plot_plan``: each strategy drawn as its record says, ``ringsim.sharing.drawing``, an
unknown one with the default marker); and where the time of the best candidates' steps goes
(``plot_breakdown``)."""

from __future__ import annotations

import os

from ringsim.sharing import SHARINGS, drawing

PARTS = (  # breakdown key, label, colour (Okabe-Ito and greys)
    ("attention_s", "attention (CP comm. inside)", "#0072B2"),
    ("gemm_s", "GEMMs", "#E69F00"),
    ("lm_head_s", "output head + loss", "#F0E442"),
    ("elementwise_s", "elementwise", "#009E73"),
    ("recompute_s", "recompute", "#CC79A7"),
    ("tp_comm_s", "TP collectives", "#D55E00"),
    ("dp_comm_exposed_s", "DP collectives", "#56B4E9"),
    ("pp_bubble_s", "pipeline bubble", "#999999"),
    ("optimizer_s", "optimizer", "#000000"),
)


def plot_plan(plan, path: str | os.PathLike | None = None, *, ax=None, title: str | None = None):
    """Draw ``plan`` (a ``Plan``): x = GB per GPU, y = step time; candidates that do not fit
    (never timed, so they have no time) sit right of the memory wall in a strip of their own
    above the axes, never on the time axis, where 0 s would read as the fastest. The legend
    sits below the axes, never over the points. Returns the figure; writes it to ``path`` if
    given."""
    from ringsim.views.plots import pyplot, save_figure

    plt = pyplot()
    if ax is None:
        fig, ax = plt.subplots(figsize=(7.0, 4.6))
    else:
        fig = ax.figure
    unit = "step" if plan.mode == "train" else "forward"
    shown = list(SHARINGS) + sorted({c.strategy for c in plan.candidates} - set(SHARINGS))
    for strategy in shown:  # the known ones in their order, then any other: every one shows
        points = [c for c in plan.candidates if c.strategy == strategy]
        if points:
            marker, colour = drawing(strategy)
            ax.scatter(
                [c.bytes_per_host / 1e9 for c in points],
                [c.step_time_s for c in points],
                marker=marker,
                s=14,
                color=colour,
                label=f"{strategy} ({len(points)})",
                alpha=0.45,
                linewidths=0,
            )
    best = plan.candidates[0]
    ax.scatter(
        [best.bytes_per_host / 1e9],
        [best.step_time_s],
        s=160,
        facecolors="none",
        edgecolors="black",
        linewidths=1.5,
        label="best",
    )
    budget = best.usable_bytes / 1e9
    ax.axvline(budget, color="black", linestyle="--", linewidth=1)
    ax.set_ylim(0, 1.05 * max(c.step_time_s for c in plan.candidates))
    pad = 6.0
    if plan.dropped:
        widest = max(c.bytes_per_host for c in plan.dropped) / 1e9
        ax.set_xlim(0, max(ax.get_xlim()[1], min(1.05 * widest, 2 * budget)))
        strip = ax.inset_axes((0.0, 1.02, 1.0, 0.1), sharex=ax)
        strip.scatter(
            [c.bytes_per_host / 1e9 for c in plan.dropped],
            [0.5] * len(plan.dropped),
            marker="x",
            s=12,
            color="grey",
            alpha=0.5,
        )
        strip.axvline(budget, color="black", linestyle="--", linewidth=1)
        strip.set_ylim(0, 1)
        strip.set_yticks([])
        strip.tick_params(labelbottom=False, bottom=False)
        strip.text(
            0.01,
            0.5,
            f"does not fit ({len(plan.dropped)}): not timed",
            transform=strip.transAxes,
            va="center",
            fontsize=8,
            color="dimgrey",
        )
        pad = 6.0 + 0.12 * fig.get_figheight() * 72 * ax.get_position().height
        ax.scatter(
            [],
            [],
            marker="x",
            s=12,
            color="grey",
            label=f"does not fit ({len(plan.dropped)}, strip above)",
        )
    ax.text(
        budget, 0.98, " usable memory", transform=ax.get_xaxis_transform(), va="top", fontsize=9
    )
    ax.set_xlabel("memory per GPU (GB)")
    ax.set_ylabel(f"predicted time per {unit} (s)")
    ax.set_title(
        title
        or f"{plan.model}, {plan.seq_len:,} tokens on {plan.hosts} x {plan.cluster.hardware.name}",
        fontsize=11,
        pad=pad,
    )
    ax.legend(fontsize=9, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=4, frameon=False)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return save_figure(plt, fig, path, dpi=120)  # atomic; the figure stays open without a path


def plot_breakdown(
    plan,
    path: str | os.PathLike | None = None,
    *,
    top: int = 5,
    candidates=None,
    ax=None,
    title: str | None = None,
):
    """Horizontal stacked bars: where the step time of the ``top`` best candidates goes
    (``Candidate.breakdown``), best at the top, or of ``candidates`` if given; the legend
    below the axes."""
    from ringsim.views.plots import pyplot, save_figure

    plt = pyplot()
    shown = list(candidates) if candidates is not None else plan.candidates[:top]
    if ax is None:
        fig, ax = plt.subplots(figsize=(7.5, 1.8 + 0.6 * len(shown)))
    else:
        fig = ax.figure
    y = list(range(len(shown)))[::-1]
    left = [0.0] * len(shown)
    for key, label, colour in PARTS:
        widths = [c.breakdown.get(key, 0.0) for c in shown]
        if not any(widths):
            continue
        ax.barh(y, widths, left=left, color=colour, label=label, height=0.6)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    ax.set_yticks(y, [c.label.replace(") ", ")\n", 1) for c in shown], fontsize=9)
    ax.set_xlabel("seconds per step, one GPU's critical path")
    ax.set_title(
        title or f"where the step goes: {plan.model}, {plan.seq_len:,} tokens", fontsize=11
    )
    ax.legend(fontsize=9, loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=3, frameon=False)
    ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    return save_figure(plt, fig, path, dpi=120)
