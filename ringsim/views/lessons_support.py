"""Small helpers the lessons share: the size knob, figure style, and the ring step-through view.

Nothing here computes attention: ``ring_story`` runs ``ringsim.ring_attention`` with a
``RingRecord`` and keeps what it recorded, and the drawing functions only look at that record
and at the ``Schedule``. Matplotlib is imported when a figure is drawn.

* ``lesson_scale()`` reads ``RINGSIM_LESSON_SCALE`` (default 1): lessons multiply their sizes
  by it, so ``RINGSIM_LESSON_SCALE=8`` gives bigger, slower and smoother runs.
* ``static_book()`` is true while the book is built: cells still create their widgets, but a
  static page has no kernel to drive them, so they show an animation instead.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import numpy as np

from ringsim.numerics.ring import RingRecord, ring_attention
from ringsim.numerics.rounding import relative_error
from ringsim.schedule import BlockKind, Schedule, build_schedule

SCALE_ENV = "RINGSIM_LESSON_SCALE"
STATIC_ENV = "RINGSIM_STATIC_BOOK"
ERROR_FLOOR = 1e-17  # plotted instead of an error of exactly zero (log axes)


def lesson_scale() -> float:
    """The size multiplier from ``RINGSIM_LESSON_SCALE`` (a positive number, default 1)."""
    text = os.environ.get(SCALE_ENV, "1")
    try:
        scale = float(text)
    except ValueError:
        scale = float("nan")
    if not np.isfinite(scale) or scale <= 0:
        raise ValueError(f"{SCALE_ENV} must be a positive number, got {text!r}")
    return scale


def scaled(n: int, *, multiple: int = 1) -> int:
    """``n`` times ``lesson_scale()``, rounded to a multiple of ``multiple`` (at least one)."""
    if n <= 0 or multiple <= 0:
        raise ValueError(f"n and multiple must be positive, got n={n}, multiple={multiple}")
    return max(multiple, round(n * lesson_scale() / multiple) * multiple)


def static_book() -> bool:
    """True while ``book/build.py`` executes the lessons for the static website."""
    return os.environ.get(STATIC_ENV, "") == "1"


def use_lesson_style() -> None:
    """One look for every lesson figure: page-width, readable fonts, light grid."""
    import matplotlib as mpl

    mpl.rcParams.update(
        {
            "figure.figsize": (8.0, 3.6),
            "figure.dpi": 110,
            "savefig.dpi": 110,
            "font.size": 10,
            "axes.titlesize": 11,
            "axes.grid": True,
            "grid.alpha": 0.3,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "legend.frameon": False,
            "animation.embed_limit": 40.0,  # MB; the ring animation is a few hundred kB
        }
    )


# ---------------------------------------------------------------------------------------------
# The ring, step by step
# ---------------------------------------------------------------------------------------------


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


KIND_COLOURS = {"full": "#2c7fb8", "partial": "#7fcdbb", "skip": "#eeeeee"}


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
    ax.set_xlim(-1.6, 1.6)
    ax.set_ylim(-1.6, 1.6)
    ax.set_aspect("equal")
    ax.axis("off")
    radius = 0.3 if p <= 6 else 0.22
    for h in range(p):
        x, y = xy[h]
        ax.add_patch(Circle((x, y), radius, fc="white", ec=colours[h], lw=2.5))
        owner = held[h]["kv"]
        kind = held[h]["kind"]
        box = radius * 0.9
        ax.add_patch(
            Rectangle(
                (x - box / 2, y - box / 2 - 0.03),
                box,
                box,
                fc=colours[owner],
                alpha=1.0 if kind != "skip" else 0.25,
                ec="black" if kind != "skip" else "grey",
                hatch="//" if kind == "partial" else None,
            )
        )
        ax.text(x, y + radius + 0.11, f"host {h}", ha="center", va="center", fontsize=8)
        ax.text(x, y - 0.03, f"kv{owner}", ha="center", va="center", fontsize=8, color="white")
        ax.text(x, y - radius - 0.1, kind, ha="center", va="center", fontsize=7, color="dimgrey")
        if sends:
            dst = xy[story.schedule.send_to[h]]
            arrow = FancyArrowPatch(
                (x, y),
                tuple(dst),
                shrinkA=radius * 75,
                shrinkB=radius * 75,
                connectionstyle="arc3,rad=-0.25",
                arrowstyle="-|>",
                mutation_scale=10,
                color=colours[owner],
                lw=1.5,
            )
            ax.add_patch(arrow)
    what = f"send {', '.join(sends)}" if sends else "last step, no send"
    ax.set_title(f"step {step}: compute; {what}", fontsize=10)


def _draw_coverage(ax, story: RingStory, step: int) -> None:
    """The (query host, kv block) pairs computed so far, coloured by what kind of work."""
    from matplotlib.colors import to_rgb

    p = story.hosts
    image = np.ones((p, p, 3))
    for s in range(step + 1):
        for h, cell in enumerate(story.record.steps[s]):
            colour = KIND_COLOURS[cell["kind"]] if s < step else "#f03b20"
            if s == step and cell["kind"] == "skip":
                colour = "#fcbba1"
            image[h, cell["kv"]] = to_rgb(colour)
    ax.imshow(image, origin="upper")
    ax.set_xticks(range(p))
    ax.set_yticks(range(p))
    ax.set_xlabel("kv block (owner)")
    ax.set_ylabel("query block (host)")
    ax.grid(False)
    ax.set_title("pairs done: full / partial / now", fontsize=10)


def _draw_errors(ax, story: RingStory, step: int) -> None:
    colours = host_colours(story.hosts)
    errors = np.maximum(story.errors, ERROR_FLOOR)
    steps = np.arange(story.steps)
    for h in range(story.hosts):
        ax.plot(steps[: step + 1], errors[: step + 1, h], "o-", color=colours[h], ms=3, lw=1.2)
    ax.set_yscale("log")
    ax.set_xlim(-0.3, story.steps - 0.7)
    ax.set_ylim(ERROR_FLOOR / 3, 30)
    ax.set_xticks(steps)
    ax.set_xlabel("step")
    ax.set_ylabel("error of running output")
    ax.set_title("each host's output vs exact", fontsize=10)


def draw_ring_step(story: RingStory, step: int, fig=None):
    """Draw one step: the ring, the pairs done, and the running error. Returns the figure."""
    if not 0 <= step < story.steps:
        raise ValueError(f"step must be in [0, {story.steps - 1}], got {step}")
    import matplotlib.pyplot as plt

    if fig is None:
        fig = plt.figure(figsize=(10.0, 3.4))
    fig.clear()
    fig.set_layout_engine("constrained")
    axes = fig.subplots(1, 3, gridspec_kw={"width_ratios": [1.1, 0.9, 1.2]})
    _draw_ring(axes[0], story, step)
    _draw_coverage(axes[1], story, step)
    _draw_errors(axes[2], story, step)
    return fig


def ring_animation(story: RingStory, *, interval_ms: int = 1200):
    """A matplotlib animation with one frame per step (``.to_jshtml()`` plays in a page)."""
    import matplotlib.pyplot as plt
    from matplotlib.animation import FuncAnimation

    fig = plt.figure(figsize=(10.0, 3.4))
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
    return re.sub(r"<link[^>]*font-awesome[^>]*>", "", html)


def kind_name(kind: int) -> str:
    """``BlockKind`` value -> ``"full"`` / ``"partial"`` / ``"skip"``."""
    return BlockKind(kind).name.lower()
