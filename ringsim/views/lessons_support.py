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
        ax.text(x, y, f"kv{owner}", ha="center", va="center", fontsize=9, color="black",
                bbox={"fc": "white", "ec": "none", "alpha": 0.7, "pad": 0.5})  # fmt: skip
        out = 1 + radius + 0.28  # label outside the circle, along its radius
        ax.text(out * np.cos(angle[h]), out * np.sin(angle[h]), f"host {h}\n{kind}",
                ha="center", va="center", fontsize=9, linespacing=1.1)  # fmt: skip
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
        ax.plot(steps[: step + 1], errors[: step + 1, h], "o-", color=colours[h], ms=4, lw=1.4,
                label=f"host {h}")  # fmt: skip
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
    return re.sub(r"<link[^>]*font-awesome[^>]*>", "", html)


def kind_name(kind: int) -> str:
    """``BlockKind`` value -> ``"full"`` / ``"partial"`` / ``"skip"``."""
    return BlockKind(kind).name.lower()


# ---------------------------------------------------------------------------------------------
# Exercises, references and narrow tables (shared by every lesson)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Exercise:
    """One exercise: the ``question`` and its worked ``solution`` (MyST markdown, ``$...$``
    math allowed). Write numeric answers as f-strings over library calls, never by hand."""

    question: str
    solution: str


class Markdown:
    """Markdown that JupyterLab and the book both render as text (``_repr_markdown_``)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def _repr_markdown_(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return self.text


def exercises(*items: Exercise, title: str = "Exercises") -> Markdown:
    """Numbered exercises, each solution folded in ``<details>`` (open it after trying)."""
    if not items:
        raise ValueError("exercises needs at least one Exercise, got none")
    parts = [f"## {title}\n"]
    for i, ex in enumerate(items, 1):
        parts.append(f"**{i}.** {ex.question.strip()}\n")
        parts.append(
            f"<details><summary>Solution</summary>\n\n{ex.solution.strip()}\n\n</details>\n"
        )
    return Markdown("\n".join(parts))


# One place for the papers the lessons cite: key -> (authors, title, venue/year, link).
REFERENCES = {
    "ring": (
        "Liu, Zaharia, Abbeel",
        "Ring Attention with Blockwise Transformers for Near-Infinite Context",
        "2023",
        "https://arxiv.org/abs/2310.01889",
    ),
    "bpt": (
        "Liu, Abbeel",
        "Blockwise Parallel Transformer for Large Context Models",
        "2023",
        "https://arxiv.org/abs/2305.19370",
    ),
    "flash": (
        "Dao, Fu, Ermon, Rudra, Ré",
        "FlashAttention: Fast and Memory-Efficient Exact Attention with IO-Awareness",
        "2022",
        "https://arxiv.org/abs/2205.14135",
    ),
    "flash2": (
        "Dao",
        "FlashAttention-2: Faster Attention with Better Parallelism and Work Partitioning",
        "2023",
        "https://arxiv.org/abs/2307.08691",
    ),
    "flash3": (
        "Shah, Bikshandi, Zhang, Thakkar, Ramani, Dao",
        "FlashAttention-3: Fast and Accurate Attention with Asynchrony and Low-precision",
        "2024",
        "https://arxiv.org/abs/2407.08608",
    ),
    "online_softmax": (
        "Milakov, Gimelshein",
        "Online normalizer calculation for softmax",
        "2018",
        "https://arxiv.org/abs/1805.02867",
    ),
    "striped": (
        "Brandon, Nrusimha, Qian, Ankner, Jin, Song, Ragan-Kelley",
        "Striped Attention: Faster Ring Attention for Causal Transformers",
        "2023",
        "https://arxiv.org/abs/2311.09431",
    ),
    "ulysses": (
        "Jacobs, Tanaka, Zhang, Zhang, Song, Rajbhandari, He",
        "DeepSpeed Ulysses: System Optimizations for Enabling Training of Extreme Long "
        "Sequence Transformer Models",
        "2023",
        "https://arxiv.org/abs/2309.14509",
    ),
    "llama3": (
        "Llama Team, AI @ Meta",
        "The Llama 3 Herd of Models",
        "2024",
        "https://arxiv.org/abs/2407.21783",
    ),
    "memory_efficient": (
        "Rabe, Staats",
        "Self-attention Does Not Need O(n²) Memory",
        "2021",
        "https://arxiv.org/abs/2112.05682",
    ),
    "playbook": (
        "Tazi, Mom, Zhao, Nguyen, Mekkouri, Werra, Wolf",
        "The Ultra-Scale Playbook: Training LLMs on GPU Clusters (context parallelism)",
        "Hugging Face, 2025",
        "https://huggingface.co/spaces/nanotron/ultrascale-playbook",
    ),
    "scaling_book": (
        "Austin et al.",
        "How to Scale Your Model (the jax-ml scaling book)",
        "2025",
        "https://jax-ml.github.io/scaling-book/",
    ),
}


def references(*keys: str, notes: dict[str, str] | None = None) -> Markdown:
    """A "References" section: linked titles from ``REFERENCES``, each with an optional note
    on what the lesson took from it. Links only: nothing is fetched, the book reads offline."""
    unknown = [k for k in keys if k not in REFERENCES]
    if unknown or not keys:
        raise ValueError(f"references: unknown keys {unknown}; known: {', '.join(REFERENCES)}")
    lines = ["## References\n"]
    for key in keys:
        authors, title, year, url = REFERENCES[key]
        note = (notes or {}).get(key)
        lines.append(f"- {authors}. [{title}]({url}). {year}." + (f" {note}" if note else ""))
    return Markdown("\n".join(lines) + "\n")


def table(rows: list[dict], columns: dict[str, str], *, width: int = 88) -> str:
    """A plain-text table of ``rows`` (dicts) for ``print``: ``columns`` maps a key to its
    format spec (``"{:.2f}"``) with the header being the key (``None`` prints ``-``). Refuses
    to exceed ``width`` characters, the book's code column, so nothing is cut off at the right
    edge."""
    cells = [
        ["-" if row[key] is None else fmt.format(row[key]) for key, fmt in columns.items()]
        for row in rows
    ]
    heads = list(columns)
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(heads)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(heads, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.rjust(w) for c, w in zip(cell, widths, strict=True)) for cell in cells]
    too_wide = max(len(line) for line in lines)
    if too_wide > width:
        raise ValueError(f"table is {too_wide} characters wide, more than width={width}")
    return "\n".join(lines)
