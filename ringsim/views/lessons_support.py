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

import json
import math
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


FIGURE_DPI = 110  # the lessons' figures: 8 inches wide are 880 px, the book shows them at ~724
FIGURE_WIDTH = 8.0  # inches: wider figures shrink in the book and their text with them
PNG_KEY = "ringsim"  # the PNG text chunk where a lesson figure records its smallest text


def use_lesson_style() -> None:
    """One look for every lesson figure: page-width, readable fonts, light grid.

    In a notebook it also makes every figure's PNG carry, in a text chunk (``PNG_KEY``), the
    size of its smallest text in PNG pixels and the legends that cover data
    (``figure_report``), so the book's browser test can compute how large each figure's
    text is as shown on the page."""
    import matplotlib as mpl

    mpl.rcParams.update(
        {
            "figure.figsize": (FIGURE_WIDTH, 3.6),
            "figure.dpi": FIGURE_DPI,
            "savefig.dpi": FIGURE_DPI,
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
    _report_figures_in_png()


def _report_figures_in_png() -> None:
    """Make IPython's PNG of a figure carry ``figure_report`` (no-op outside IPython)."""
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - the lessons always run in IPython
        return
    shell = get_ipython()
    if shell is None:
        return
    import matplotlib as mpl
    import matplotlib.pyplot as plt
    from IPython.core.pylabtools import print_figure
    from matplotlib.figure import Figure

    # Load the backend now: the inline backend registers its own PNG formatter when its
    # module is imported (at the first figure), which would replace ours.
    plt.switch_backend(mpl.get_backend())

    def png(fig):
        report = json.dumps(figure_report(fig))
        return print_figure(fig, "png", base64=True, metadata={PNG_KEY: report})

    shell.display_formatter.formatters["image/png"].for_type(Figure, png)


def _visible_texts(fig, renderer) -> list:
    """Every text the figure draws: titles, labels, tick labels, legends, annotations."""
    from matplotlib.text import Text

    box = fig.bbox
    texts = []
    for text in fig.findobj(Text):
        if not text.get_visible() or not text.get_text().strip():
            continue
        if text.axes is not None and not text.axes.get_visible():
            continue
        extent = text.get_window_extent(renderer)
        if extent.width <= 0 or not extent.overlaps(box):
            continue
        texts.append(text)
    return texts


def _renderer(fig):
    """Draw ``fig`` and return its renderer (a closed figure gets an Agg canvas first)."""
    if not hasattr(fig.canvas, "get_renderer"):
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        FigureCanvasAgg(fig)
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def figure_text_px(fig) -> float:
    """The smallest font size among the figure's visible texts, in pixels of its PNG (the
    size in points times ``dpi / 72``); ``inf`` for a figure without text."""
    renderer = _renderer(fig)
    sizes = [t.get_fontsize() for t in _visible_texts(fig, renderer)]
    return min(sizes) * fig.dpi / 72 if sizes else math.inf


def legends_over_data(fig) -> list[str]:
    """Legends that cover data: a point or a segment of a line, a marker, a bar or an image
    of the axes they describe (a figure legend: of any axes). Returns each offending legend's
    first label; empty when every legend sits on empty space or outside the axes."""
    renderer = _renderer(fig)
    legends = [(ax.get_legend(), [ax]) for ax in fig.axes if ax.get_legend() is not None]
    legends += [(legend, fig.axes) for legend in fig.legends]
    covered = []
    for legend, axes in legends:
        box = legend.get_window_extent(renderer).padded(-2)  # touching the edge is fine
        if any(_covers(box, ax, renderer) for ax in axes):
            texts = legend.get_texts()
            covered.append(texts[0].get_text() if texts else "legend")
    return covered


def _inside(box, xy: np.ndarray) -> bool:
    """Whether any finite point of ``xy`` (``(n, 2)`` display pixels) lies inside ``box``."""
    xy = xy[np.isfinite(xy).all(axis=1)]
    x, y = xy[:, 0], xy[:, 1]
    return bool(((x > box.x0) & (x < box.x1) & (y > box.y0) & (y < box.y1)).any())


def _covers(box, ax, renderer) -> bool:
    """Whether ``box`` (display pixels) holds any of ``ax``'s data."""
    from matplotlib.collections import Collection
    from matplotlib.image import AxesImage
    from matplotlib.patches import Rectangle

    for line in ax.get_lines():
        if not line.get_visible() or len(line.get_xdata()) == 0:
            continue
        xy = line.get_transform().transform(np.asarray(line.get_xydata(), float))
        xy = xy[np.isfinite(xy).all(axis=1)]
        if len(xy) > 1 and line.get_linestyle() not in ("None", "", " "):
            t = np.linspace(0, 1, 24)[:, None, None]  # points along every segment
            xy = (xy[:-1] * (1 - t) + xy[1:] * t).reshape(-1, 2)
        if len(xy) and _inside(box, xy):
            return True
    for patch in ax.patches:
        if isinstance(patch, Rectangle) and patch.get_visible() and patch.get_alpha() != 0:
            if patch.get_alpha() is not None and patch.get_alpha() < 0.5:
                continue  # a shaded band behind the data (axhspan), not data
            if patch.get_window_extent(renderer).overlaps(box):
                return True
    for coll in ax.collections:
        if not isinstance(coll, Collection) or not coll.get_visible():
            continue
        offsets = coll.get_offsets()
        if len(offsets) and coll.get_offset_transform() is not None:
            xy = coll.get_offset_transform().transform(offsets)
            if _inside(box, xy):
                return True
        for path in coll.get_paths()[:200]:
            xy = coll.get_transform().transform(path.vertices)
            if len(xy) and _inside(box, xy):
                return True
    for image in ax.images:
        if isinstance(image, AxesImage) and image.get_window_extent(renderer).overlaps(box):
            return True
    return False


def figure_report(fig) -> dict:
    """What the book's browser test needs to judge a figure: its smallest text in PNG
    pixels (``min_text_px``) and the legends over data (``legends_over_data``)."""
    return {
        "min_text_px": round(figure_text_px(fig), 2),
        "legends_over_data": legends_over_data(fig),
    }


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


# ---------------------------------------------------------------------------------------------
# One notation and one glossary for every lesson
# ---------------------------------------------------------------------------------------------

# symbol (TeX, as the lessons write it between $...$) -> what it means, in every lesson
NOTATION = {
    "P": "hosts (devices) the sequence is split over",
    "N": "sequence length in tokens",
    "c": "tokens per host, the block a host owns: $c = N/P$",
    "r": "a host's index (its rank), $0 \\ldots P-1$",
    "s": "a ring step, $0 \\ldots P-1$ (the backward adds one more hop)",
    "H": "query (attention) heads",
    "H_{kv}": "key/value heads; $H_{kv} < H$ is grouped-query attention",
    "d": "head dimension (128 in most models here)",
    "d_{model}": "hidden size, $H d$",
    "d_{ff}": "the feed-forward network's hidden width (about $4 d_{model}$ or more)",
    "L": "layers",
    "b": "batch: sequences processed together",
    "e": "bytes per element: 2 in bf16, 4 in fp32",
    "F": "FLOP/s one device sustains",
    "B": "link bandwidth, bytes/s in one direction",
    "\\alpha": "latency of one message (seconds)",
    "c^*": "overlap threshold: the smallest block whose compute hides its transfer, "
    "$F/B$ for full blocks, about $2F/B$ for balanced causal layouts",
    "T": "kernel tile (tokens), e.g. 128",
    "U, R": "Ulysses degree and ring degree of a hybrid, $P = U R$",
    "q, k, v": "one token's query, key and value vectors (rows of $Q, K, V$)",
    "m, \\ell, a": "a partial's running max, running sum and unnormalised output",
    "\\mathrm{lse}": "log-sum-exp of a row's scores, $m + \\log \\ell$",
    "o, O": "attention output (normalised), one row and the whole block",
    "dO": "gradient of the loss with respect to the output",
    "\\delta": "the backward's per-row constant $\\mathrm{rowsum}(dO \\circ O)$",
}

# term -> its definition (plain words; a term is written as the lessons write it)
GLOSSARY = {
    "1M, 1K (tokens)": "token counts use powers of two, as the `ringsim` command line does: "
    "1K = 1,024 and 1M = $2^{20}$ = 1,048,576 tokens. A lesson that means $10^6$ says so "
    "(lesson 1 checks quotes that use $10^6$). Bytes use decimal units: 1 GB = $10^9$ bytes, "
    "1 GiB = $2^{30}$.",
    "all-gather": "a collective in which every host ends with every host's block; all-gather "
    "context parallelism (Llama 3) gathers all keys and values before attention.",
    "all-to-all": "a collective in which every host sends a different share to every other "
    "host; Ulysses uses two to turn a split by tokens into a split by heads and back.",
    "bf16": "bfloat16: 16-bit floats with fp32's exponent range and 8 significant bits, so "
    "one rounding changes a number by at most $2^{-8}$ = 0.39%.",
    "fp32, fp16": "32-bit floats (24 significant bits) and 16-bit IEEE floats.",
    "causal mask": "a query sees only the keys at or before its own position (decoders).",
    "checkpointing": "gradient checkpointing: the forward keeps only each layer's input per "
    "token, and the backward recomputes the rest.",
    "context parallelism (CP)": "splitting one sequence over devices; the ring, Ulysses and "
    "all-gather are three ways to do it.",
    "DP, TP, PP": "data parallelism (whole sequences per device), tensor parallelism (a "
    "layer's matrices split over devices), pipeline parallelism (layers split).",
    "FA2, FA3 (FA)": "the FlashAttention-2 and FlashAttention-3 kernels (FA: FlashAttention).",
    "FFN": "the feed-forward network of a transformer layer, position-wise.",
    "GEMM": "general matrix multiply: the matmuls of a layer's projections and "
    "feed-forward network and of the output head; its rate depends on its shape.",
    "FLOP, GFLOP, TFLOP": "floating-point operations; GFLOP = $10^9$ and TFLOP = $10^{12}$ "
    "of them, and per second (GFLOP/s, TFLOP/s) the rate a device sustains.",
    "FSDP": "Fully Sharded Data Parallel: weights, gradients and optimizer state are "
    "sharded over all devices; each layer's weights are gathered just before they are used.",
    "gloo": "PyTorch's collective backend for CPUs (over TCP); the lessons' real ring uses it "
    "when there is no GPU.",
    "GQA, MHA": "grouped-query attention ($H$ query heads share $H_{kv} < H$ key/value heads) "
    "and multi-head attention ($H_{kv} = H$).",
    "HBM": "high-bandwidth memory: a GPU's device memory (80 GB on an A100 or H100), read at "
    "2-5 TB/s.",
    "it/s": "iterations per second, a benchmark's throughput.",
    "KV cache (KV)": "the keys and values (KV) of every past token, kept by a decoder for "
    "each layer.",
    "NCCL": "NVIDIA's collective communication library: all-reduce, all-to-all, send and "
    "receive between GPUs.",
    "NIC, InfiniBand": "the network card of a GPU (one per GPU on DGX nodes) and the network "
    "between nodes, 12.5-50 GB/s each way.",
    "NVLink, NVSwitch": "the links between the GPUs of one node (200-450 GB/s each way per "
    "GPU) and the switch that connects them all.",
    "PCIe": "the bus between a GPU and its host CPU; GPUs without NVLink exchange data over "
    "it (31.5 GB/s for a Gen 4 x16 link).",
    "prefill, decode": "serving reads the whole prompt at once (prefill, compute-bound), then "
    "generates one token at a time (decode, bound by reading the KV cache).",
    "SM": "streaming multiprocessor, one of a GPU's ~100 compute units; NCCL's kernels "
    "occupy some of them while attention runs.",
    "striped, zigzag, contiguous": "how tokens are dealt to hosts: contiguous chunks; round "
    "robin; or $2P$ chunks with host $r$ taking chunks $r$ and $2P-1-r$ (lesson 6).",
    "SDPA": "PyTorch's `scaled_dot_product_attention`, which dispatches to a fused (flash or "
    "memory-efficient) attention kernel.",
    "TransformerEngine (TE)": "NVIDIA's library of fused transformer layers, whose attention "
    "implements the context parallelism Megatron-LM uses.",
    "Ulysses": "DeepSpeed-Ulysses: an all-to-all re-shards from tokens to heads, each host "
    "computes whole heads, a second all-to-all shards back.",
    "hybrid, double ring": "Ulysses over $U$ hosts times a ring over $R$ (USP), and a ring "
    "of rings, one inside each node and one across (LoongTrain).",
}


def _anchor(term: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", term.lower()).strip("-")


def notation(*symbols: str, terms: tuple[str, ...] = ()) -> Markdown:
    """A folded box with the symbols (keys of ``NOTATION``) and terms (keys of ``GLOSSARY``)
    a lesson uses, each defined as on the book's notation page, which it links."""
    unknown = [x for x in symbols if x not in NOTATION] + [t for t in terms if t not in GLOSSARY]
    if unknown:
        raise ValueError(f"notation: unknown symbols or terms {unknown}; see NOTATION, GLOSSARY")
    lines = ["<details><summary>Notation and terms used in this lesson</summary>\n"]
    if symbols:
        lines += ["| symbol | meaning |", "| --- | --- |"]
        lines += [f"| ${x}$ | {NOTATION[x]} |" for x in symbols]
        lines.append("")
    if terms:
        lines += ["| term | meaning |", "| --- | --- |"]
        lines += [f"| {t} | {GLOSSARY[t]} |" for t in terms]
        lines.append("")
    lines.append("Every lesson uses the same symbols: [the notation page](notation.md).\n")
    lines.append("</details>\n")
    return Markdown("\n".join(lines))


def notation_page() -> str:
    """The book's notation page (``lessons/notation.md``): every symbol and term."""
    lines = [
        "# Notation and glossary",
        "",
        "One meaning per symbol, in every lesson. Each lesson opens with a folded box of the "
        "symbols and terms it uses, taken from this table (`ringsim.views.lessons_support`"
        ".`NOTATION` and `GLOSSARY`).",
        "",
        "## Symbols",
        "",
        "| symbol | meaning |",
        "| --- | --- |",
        *(f"| ${x}$ | {meaning} |" for x, meaning in NOTATION.items()),
        "",
        "## Terms",
        "",
        "| term | meaning |",
        "| --- | --- |",
        *(f"| {t} | {meaning} |" for t, meaning in GLOSSARY.items()),
        "",
    ]
    return "\n".join(lines)


def caption(label: str, text: str) -> Markdown:
    """A figure caption, "*Figure 5.1. What to notice:* ...", printed by a cell so that its
    numbers can be f-string fields over the values the figure shows."""
    return Markdown(f"*{label}. What to notice:* {text.strip()}")


# ---------------------------------------------------------------------------------------------
# Implement-and-test exercises: the learner writes a piece, a provided check compares it with
# the library
# ---------------------------------------------------------------------------------------------


def try_it(yours, reference, check) -> None:
    """Run ``check`` on the learner's function ``yours``; while it still raises
    ``NotImplementedError``, run it on the folded ``reference`` solution instead, so the
    lesson executes top to bottom either way. ``check`` raises ``AssertionError`` on a wrong
    answer and returns a one-line summary of what it compared."""
    import textwrap

    name = getattr(yours, "__name__", "your function")
    try:
        summary = check(yours)
    except NotImplementedError:
        summary = check(reference)
        message = f"{name} is not written yet; the reference solution passes: {summary}"
    else:
        message = f"{name} passes: {summary}"
    print(textwrap.fill(message, width=88))  # the book's code column


def _partials(rng, rows: int = 5, d: int = 4, keys: int = 7, spread: float = 6.0):
    """Two partials of the same query rows over disjoint random key sets, with far apart
    maxima (so a merge that forgets a rescale is visibly wrong), and the exact answer."""
    from ringsim.numerics.attention import block_attention, reference_attention

    q = rng.standard_normal((rows, d)) * spread
    k = rng.standard_normal((2 * keys, d))
    v = rng.standard_normal((2 * keys, d))
    k[keys:] += 2.0  # the second key set scores higher: different row maxima
    scale = 1 / np.sqrt(d)
    a = block_attention(q, k[:keys], v[:keys], scale=scale)
    b = block_attention(q, k[keys:], v[keys:], scale=scale)
    return a, b, reference_attention(q, k, v)


def check_merge(merge_fn) -> str:
    """``merge_fn(a, b) -> Partial`` against ``ringsim.merge`` and the exact attention over
    both key sets, on random partials whose maxima differ, in both orders."""
    from ringsim.numerics.attention import merge

    rng = np.random.default_rng(2)
    worst = 0.0
    for _ in range(20):
        a, b, exact = _partials(rng)
        for x, y in ((a, b), (b, a)):
            got, want = merge_fn(x, y), merge(x, y)
            np.testing.assert_allclose(got.row_max, want.row_max, rtol=1e-12)
            np.testing.assert_allclose(got.lse, want.lse, rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(got.out, exact, rtol=1e-9, atol=1e-12)
            worst = max(worst, float(np.abs(got.out - exact).max()))
    return f"40 merges equal ringsim.merge; largest error against exact {worst:.1e}"


def check_zigzag(positions_fn) -> str:
    """``positions_fn(hosts, seq_len) -> (hosts, seq_len // hosts)`` global positions per host,
    against ``ringsim.host_positions("zigzag", ...)`` for several ring sizes."""
    from ringsim.layouts import host_positions

    cases = [(2, 8), (4, 16), (4, 64), (8, 32), (3, 12)]
    for hosts, seq_len in cases:
        got = np.asarray(positions_fn(hosts, seq_len))
        want = host_positions("zigzag", hosts, seq_len)
        assert got.shape == want.shape, (
            f"P={hosts}, N={seq_len}: shape {got.shape}, not {want.shape}"
        )
        assert (np.sort(got, axis=1) == want).all(), (
            f"P={hosts}, N={seq_len}: host 0 got {np.sort(got[0]).tolist()}, "
            f"the zigzag layout gives {want[0].tolist()}"
        )
    return f"{len(cases)} rings (P = 2 to 8) deal the same tokens as ringsim.host_positions"


def check_delta(delta_fn) -> str:
    """``delta_fn(out, dout) -> (..., rows)`` used in ``block_attention_backward``: the
    gradients must equal the float64 reference (which builds the whole matrix)."""
    from ringsim.numerics.attention import (
        block_attention,
        block_attention_backward,
        reference_attention_grad,
    )

    rng = np.random.default_rng(3)
    q, k, v, dout = (rng.standard_normal((2, 24, 8)) for _ in range(4))
    scale = 1 / np.sqrt(8)
    part = block_attention(q, k, v, scale=scale)
    delta = np.asarray(delta_fn(part.out, dout))
    assert delta.shape == part.lse.shape, f"delta has shape {delta.shape}, not {part.lse.shape}"
    grads = block_attention_backward(q, k, v, dout, part.lse, delta, scale=scale)
    exact = reference_attention_grad(q, k, v, dout)
    for name, got, want in zip(("dq", "dk", "dv"), grads, exact, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12, err_msg=name)
    return "dq, dk, dv from your delta equal the float64 reference"


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
    "ring_flash_attention": (
        "Zhu",
        "ring-flash-attention: ring attention on top of flash-attention (RingComm, zigzag "
        "and llama3 varlen variants)",
        "GitHub, 2024",
        "https://github.com/zhuzilin/ring-flash-attention",
    ),
    "torch_cp": (
        "PyTorch",
        "Introduction to Context Parallel (torch.distributed.tensor.experimental)",
        "tutorial, 2025",
        "https://docs.pytorch.org/tutorials/prototype/context_parallel.html",
    ),
    "megatron_cp": (
        "NVIDIA",
        "Megatron Core: context parallelism (with TransformerEngine's attention)",
        "developer guide",
        "https://docs.nvidia.com/megatron-core/developer-guide/latest/api-guide/context_parallel.html",
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
        # "Austin et al." already ends its sentence: no second full stop
        lines.append(
            f"- {authors.rstrip('.')}. [{title}]({url}). {year}." + (f" {note}" if note else "")
        )
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
