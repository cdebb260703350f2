"""The ring, step by step: ``ring_story`` runs ``ringsim.ring_attention`` with a
``RingRecord`` and keeps what it recorded; the drawing functions only look at that record and
at the ``Schedule`` (nothing here computes attention)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import numpy as np

from ringsim.numerics.ring import RingRecord, ring_attention
from ringsim.numerics.rounding import relative_error
from ringsim.schedule import BlockKind, Schedule, build_schedule
from ringsim.views.lessons.figures import PNG_KEY, figure_report

ERROR_FLOOR = 1e-17  # plotted instead of an error of exactly zero (log axes)


@dataclass
class RingStory:
    """A recorded forward ring run, ready to be drawn one step at a time.

    ``schedule``: the ring's ``Schedule``; ``record``: what each host held (``record.steps``)
    and its running output after each step (``record.outputs``); ``errors``: ``(steps, hosts)``
    worst row-wise relative error of each host's running output against the exact answer.
    """

    schedule: Schedule
    record: RingRecord
    exact: np.ndarray
    errors: np.ndarray

    @property
    def steps(self) -> int:
        return self.schedule.steps

    @property
    def hosts(self) -> int:
        return self.schedule.hosts


def ring_story(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    hosts: int,
    layout: str = "contiguous",
    causal: bool = False,
) -> RingStory:
    """Run ``ring_attention`` with a record and measure each host's running error per step.

    ``q``, ``k``, ``v``: ``(N, d)`` or ``(..., H, N, d)``; the exact answer is the float64
    ``reference_attention``.
    """
    from ringsim.numerics.attention import reference_attention

    record = RingRecord()
    ring_attention(q, k, v, hosts=hosts, layout=layout, causal=causal, record=record)
    schedule = build_schedule(hosts, layout, causal, "forward", seq_len=q.shape[-2])
    exact = reference_attention(q, k, v, causal=causal)
    errors = np.zeros((schedule.steps, hosts))
    for s, outputs in enumerate(record.outputs):
        for h, out in enumerate(outputs):
            rows = np.take(exact, schedule.positions[h], axis=-2)
            errors[s, h] = relative_error(out, rows).max()
    return RingStory(schedule, record, exact, errors)


KIND_COLOURS = {"full": "#2c7fb8", "partial": "#7fcdbb", "skip": "#d9d9d9"}
KIND_KEY = {  # what each colour of the pairs grid means
    "full": "computed: every pair visible",
    "partial": "computed: mask cuts through it",
    "skip": "skipped: every pair masked",
}
NOW_EDGE = "#d7301f"  # outline of the pairs computed at the step on show


def host_colours(hosts: int) -> list:
    """One colour per host (and per the kv block it owns)."""
    import matplotlib as mpl

    cmap = mpl.colormaps["tab10" if hosts <= 10 else "viridis"]
    return [cmap(h if hosts <= 10 else h / max(hosts - 1, 1)) for h in range(hosts)]


def _draw_ring(ax, story: RingStory, step: int) -> None:
    """Hosts on a circle: each shows its query block (outline) and the kv block it holds."""
    from matplotlib.patches import Circle, FancyArrowPatch, Rectangle

    p = story.hosts
    colours = host_colours(p)
    angle = np.pi / 2 - 2 * np.pi * np.arange(p) / p
    xy = np.stack([np.cos(angle), np.sin(angle)], axis=1)
    held = story.record.steps[step]
    sends = story.schedule.payload(step)
    ax.set_xlim(-1.9, 1.9)
    ax.set_ylim(-1.9, 1.9)
    ax.set_aspect("equal")
    ax.axis("off")
    radius = 0.3 if p <= 6 else 0.22
    for h in range(p):
        x, y = xy[h]
        ax.add_patch(Circle((x, y), radius, fc="white", ec=colours[h], lw=2.5))
        owner = held[h]["kv"]
        kind = held[h]["kind"]
        box = radius * 1.1
        ax.add_patch(
            Rectangle(
                (x - box / 2, y - box / 2),
                box,
                box,
                fc=colours[owner],
                alpha=1.0 if kind != "skip" else 0.25,
                ec="black" if kind != "skip" else "grey",
                hatch="//" if kind == "partial" else None,
            )
        )
        ax.text(
            x,
            y,
            f"kv{owner}",
            ha="center",
            va="center",
            fontsize=9,
            color="black",
            bbox={"fc": "white", "ec": "none", "alpha": 0.7, "pad": 0.5},
        )
        out = 1 + radius + 0.28  # label outside the circle, along its radius
        ax.text(
            out * np.cos(angle[h]),
            out * np.sin(angle[h]),
            f"host {h}\n{kind}",
            ha="center",
            va="center",
            fontsize=9,
            linespacing=1.1,
        )
        if sends:
            dst = xy[story.schedule.send_to[h]]
            arrow = FancyArrowPatch(
                (x, y),
                tuple(dst),
                shrinkA=16,
                shrinkB=16,
                connectionstyle="arc3,rad=-0.25",
                arrowstyle="-|>",
                mutation_scale=12,
                color=colours[owner],
                lw=1.8,
            )
            ax.add_patch(arrow)
    what = f"then send {', '.join(sends)}" if sends else "last step: nothing to send"
    ax.set_title(f"step {step}: compute,\n{what}", fontsize=11)


def _draw_coverage(ax, story: RingStory, step: int) -> None:
    """The (query host, kv block) pairs done so far, coloured by kind; this step outlined."""
    from matplotlib.colors import to_rgb
    from matplotlib.patches import Rectangle

    p = story.hosts
    image = np.ones((p, p, 3))
    for s in range(step + 1):
        for h, cell in enumerate(story.record.steps[s]):
            image[h, cell["kv"]] = to_rgb(KIND_COLOURS[cell["kind"]])
    ax.imshow(image, origin="upper")
    for h, cell in enumerate(story.record.steps[step]):
        ax.add_patch(Rectangle((cell["kv"] - 0.5, h - 0.5), 1, 1, fill=False, ec=NOW_EDGE, lw=2.5))
    ax.set_xticks(range(p))
    ax.set_yticks(range(p))
    ax.set_xlabel("kv block (owner)")
    ax.set_ylabel("query block (host)")
    ax.grid(False)
    ax.set_title("(query, kv) block pairs so far", fontsize=11)


def _draw_errors(ax, story: RingStory, step: int) -> None:
    colours = host_colours(story.hosts)
    errors = np.maximum(story.errors, ERROR_FLOOR)
    steps = np.arange(story.steps)
    for h in range(story.hosts):
        ax.plot(
            steps[: step + 1],
            errors[: step + 1, h],
            "o-",
            color=colours[h],
            ms=4,
            lw=1.4,
            label=f"host {h}",
        )
    ax.set_yscale("log")
    ax.set_xlim(-0.3, story.steps - 0.7)
    ax.set_ylim(ERROR_FLOOR / 3, 30)
    ax.set_xticks(steps)
    ax.set_xlabel("step")
    ax.set_ylabel("worst relative error")
    ax.set_title("each host's running output against the exact answer", fontsize=11)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9, ncol=1 + story.hosts // 9)


STEP_FIGSIZE = (8.0, 7.0)  # inches: as wide as the book's text column at 110 dpi


def draw_ring_step(story: RingStory, step: int, fig=None):
    """Draw one step: the ring and the pairs done (top), the running errors (bottom)."""
    if not 0 <= step < story.steps:
        raise ValueError(f"step must be in [0, {story.steps - 1}], got {step}")
    import matplotlib.pyplot as plt

    if fig is None:
        fig = plt.figure(figsize=STEP_FIGSIZE)
    fig.clear()
    fig.set_layout_engine("constrained")
    grid = fig.add_gridspec(2, 2, height_ratios=[1.35, 1], width_ratios=[1.15, 1])
    ring_ax, pairs_ax = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1])
    errors_ax = fig.add_subplot(grid[1, :])
    _draw_ring(ring_ax, story, step)
    _draw_coverage(pairs_ax, story, step)
    _draw_errors(errors_ax, story, step)
    fig.legend(handles=_coverage_key(), loc="outside lower center", ncol=3, fontsize=9)
    return fig


def _coverage_key() -> list:
    """Legend of the pairs grid: the kind of each block, this step's outline, not yet."""
    from matplotlib.patches import Patch

    handles = [Patch(fc=KIND_COLOURS[k], ec="grey", label=KIND_KEY[k]) for k in KIND_KEY]
    handles += [Patch(fc="white", ec=NOW_EDGE, lw=2, label="held at this step")]
    handles += [Patch(fc="white", ec="grey", label="not reached yet")]
    return handles


def ring_animation(story: RingStory, *, interval_ms: int = 1200):
    """A matplotlib animation with one frame per step (``.to_jshtml()`` plays in a page)."""
    import matplotlib.pyplot as plt
    from matplotlib.animation import FuncAnimation

    fig = plt.figure(figsize=STEP_FIGSIZE)
    anim = FuncAnimation(
        fig,
        lambda s: draw_ring_step(story, s, fig).axes,
        frames=story.steps,
        interval=interval_ms,
        blit=False,
    )
    plt.close(fig)  # the animation owns it; don't also show a static copy below the cell
    return anim


def animation_html(anim) -> str:
    """``anim.to_jshtml()`` without its CDN stylesheet link, so a page never reaches the network.

    Matplotlib's player links Font Awesome 4 from a CDN for its button icons; JupyterLab and the
    book's theme already ship Font Awesome, so the link only costs an offline page a hang.
    """
    html = anim.to_jshtml(default_mode="once")
    html = re.sub(r"<link[^>]*font-awesome[^>]*>", "", html)
    # the frames are data URIs without PNG text chunks: the player's <img> carries the report
    fig = getattr(anim, "_fig", None)  # matplotlib keeps the animated figure there
    if fig is None:
        return html
    report = json.dumps(figure_report(fig)).replace('"', "&quot;")
    return re.sub(r"<img id=", f'<img data-{PNG_KEY}="{report}" id=', html, count=1)


def kind_name(kind: int) -> str:
    """``BlockKind`` value -> ``"full"`` / ``"partial"`` / ``"skip"``."""
    return BlockKind(kind).name.lower()
