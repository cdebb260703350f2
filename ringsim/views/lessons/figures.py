"""The lessons' figure style, and the report each figure carries: its smallest text in
pixels as the book shows it, and any legend over data (the book's browser test reads it).
Matplotlib is imported when a figure is drawn. ``caption`` prints a figure's caption from a
cell, so its numbers are the values the figure shows.

Figures reach the book as SVG (``FIGURE_FORMAT``): sharp at any zoom, and on a phone the book
shows them at their own size in a box that scrolls sideways (``book/_static/lessons.css``),
so their text never shrinks below what it is here; a tap opens one alone
(``book/_static/lessons.js``). Each SVG carries ``figure_report`` in its ``<dc:description>``
(``SVG_KEY``), a PNG (the ring animation's frames) in a text chunk (``PNG_KEY``)."""

from __future__ import annotations

import json
import math

import numpy as np

from ringsim.views.lessons.text import Markdown

FIGURE_DPI = 110  # PNG frames (the ring animation): 8 inches wide are 880 px
FIGURE_WIDTH = 8.0  # inches: wider figures shrink in the book and their text with them
FIGURE_FORMAT = "svg"
PNG_KEY = "ringsim"  # the PNG text chunk where a lesson figure records its report
SVG_KEY = "Description"  # the SVG metadata field (Dublin Core) that holds it
SVG_PX_PER_PT = 96 / 72  # an SVG's natural size: matplotlib writes points, a browser shows px


def use_lesson_style() -> None:
    """One look for every lesson figure: page-width, readable fonts, light grid.

    In a notebook it also makes every figure an SVG that carries, in its metadata
    (``SVG_KEY``), the size of its smallest text in pixels at its natural size and the legends
    that cover data (``figure_report``), so the book's browser test can compute how large each
    figure's text is as shown on the page."""
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
            "svg.hashsalt": "ringsim",  # the same figure gives the same SVG (stable ids)
            "animation.embed_limit": 40.0,  # MB; the ring animation is a few hundred kB
        }
    )
    _report_figures()


def _report_figures() -> None:
    """Make IPython show a figure as an SVG carrying ``figure_report`` (no-op outside
    IPython)."""
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
    from matplotlib_inline.backend_inline import set_matplotlib_formats

    # Load the backend now: the inline backend registers its own formatters when its module
    # is imported (at the first figure), which would replace ours.
    plt.switch_backend(mpl.get_backend())
    set_matplotlib_formats(FIGURE_FORMAT)

    def svg(fig):
        report = json.dumps(figure_report(fig, FIGURE_FORMAT))
        return print_figure(fig, "svg", metadata={SVG_KEY: report})

    shell.display_formatter.formatters["image/svg+xml"].for_type(Figure, svg)


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


def figure_text_px(fig, fmt: str = "png") -> float:
    """The smallest font size among the figure's visible texts, in pixels of the image at
    its natural size: points times ``dpi / 72`` in a PNG, times 96/72 in an SVG (a browser's
    px per pt); ``inf`` for a figure without text."""
    renderer = _renderer(fig)
    sizes = [t.get_fontsize() for t in _visible_texts(fig, renderer)]
    per_pt = SVG_PX_PER_PT if fmt == "svg" else fig.dpi / 72
    return min(sizes) * per_pt if sizes else math.inf


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


def _along(xy: np.ndarray) -> np.ndarray:
    """Points along every segment of a polyline ``xy`` (``(n, 2)``), so that a segment that
    crosses a box with both ends outside it still has points inside."""
    xy = xy[np.isfinite(xy).all(axis=1)]
    if len(xy) < 2:
        return xy
    t = np.linspace(0, 1, 24)[:, None, None]
    return (xy[:-1] * (1 - t) + xy[1:] * t).reshape(-1, 2)


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
        if line.get_linestyle() not in ("None", "", " "):
            xy = _along(xy)
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
        for path in coll.get_paths()[:200]:  # an error bar's whiskers are segments
            xy = _along(coll.get_transform().transform(path.vertices))
            if len(xy) and _inside(box, xy):
                return True
    for image in ax.images:
        if isinstance(image, AxesImage) and image.get_window_extent(renderer).overlaps(box):
            return True
    return False


def panels(fig) -> dict:
    """The figure's panels (axes that draw data, colour bars left out) as a grid: ``rows``,
    ``cols`` and ``count``, so that prose naming "the middle panel" can be checked."""
    axes = [ax for ax in fig.axes if ax.get_visible() and ax.get_label() != "<colorbar>"]
    specs = [ax.get_subplotspec() for ax in axes]
    if axes and all(spec is not None for spec in specs):
        rows = len({spec.rowspan.start for spec in specs})
        cols = len({spec.colspan.start for spec in specs})
    else:
        rows, cols = (1, 1) if axes else (0, 0)
    return {"count": len(axes), "rows": rows, "cols": cols}


def figure_report(fig, fmt: str = "png") -> dict:
    """What the book's browser test needs to judge a figure: its smallest text in pixels of
    the image at its natural size (``min_text_px``, ``fmt`` "png" or "svg"), the legends over
    data (``legends_over_data``) and its panels (``panels``)."""
    return {
        "min_text_px": round(figure_text_px(fig, fmt), 2),
        "legends_over_data": legends_over_data(fig),
        "panels": panels(fig),
    }


def plain_log_ticks(ax, axis: str = "x", values=None) -> None:
    """Label a log axis with plain numbers (``2, 5, 10, 20 ...``, or ``values``) instead of
    ``10^k`` and unlabelled minor ticks, so neighbouring labels never run together."""
    from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator

    target = ax.xaxis if axis == "x" else ax.yaxis
    low, high = sorted(ax.get_xlim() if axis == "x" else ax.get_ylim())
    if values is None:
        decades = range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)
        values = [m * 10.0**k for k in decades for m in (1, 2, 5)]
    shown = [v for v in values if low <= v <= high]
    target.set_major_locator(FixedLocator(shown))
    target.set_major_formatter(lambda v, _pos: f"{v:g}")
    target.set_minor_locator(NullLocator())
    target.set_minor_formatter(NullFormatter())


def caption(label: str, text: str) -> Markdown:
    """A figure caption, "*Figure 5.1. What to notice:* ...", printed by a cell so that its
    numbers can be f-string fields over the values the figure shows."""
    return Markdown(f"*{label}. What to notice:* {text.strip()}")
