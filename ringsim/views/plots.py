"""Figures of a ring run: the timeline (a Gantt chart per host) and sweep curves.

matplotlib is imported inside the functions (Agg backend when no backend is chosen yet), so
``import ringsim`` and every command that draws nothing stay free of it.

Gantt rows, one per host (host 0 on top). Inside a row, three lanes::

    receive  (top)     the incoming link delivers the step-s block
    compute  (middle)  the host works on the block it holds; grey where it waits (idle)
    send     (bottom)  the outgoing link carries the block to the next host

so a transfer appears twice, as host h's send right above host h+1's receive.

A backward ring moves two messages per step on each link (``ringsim.timer``): ``k, v``, which
may leave during the compute, and the ``dk, dv`` accumulators, which leave after it. Both share
the link lanes (a link carries one message at a time): ``k, v`` in the colours of a forward
block, ``dk, dv`` in darker shades, with the legend naming each.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from ringsim.timer.engine.result import grad_rows, kv_messages
from ringsim.timer.engine.timeline import Timeline

COLOURS = {  # Okabe-Ito: distinguishable with the common colour-vision deficiencies
    "compute": "#0072B2",
    "send": "#E69F00",
    "recv": "#009E73",
    "idle": "#E4E4E4",
    "send_grad": "#D55E00",  # backward: the dk, dv message (k, v keep "send" and "recv")
    "recv_grad": "#00553D",
}
LABELS = {
    "compute": "compute",
    "send": "send",
    "recv": "receive",
    "idle": "idle",
    "send_grad": "send dk,dv",
    "recv_grad": "receive dk,dv",
}
KV_LABELS = {"send": "send k,v", "recv": "receive k,v"}  # names of the block in a backward run
LABELLED_STEPS = 32  # above this, bars are too thin for step numbers
LANES = {"recv": (0.08, 0.16), "compute": (0.28, 0.44), "send": (0.76, 0.16)}  # (offset, height)


def pyplot():
    import matplotlib

    if "matplotlib.pyplot" not in __import__("sys").modules:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def time_unit(seconds: float) -> tuple[str, float]:
    """A readable unit for a span: ``("ms", 1e3)`` for 0.012 s."""
    for name, scale in (("s", 1.0), ("ms", 1e3), ("µs", 1e6)):
        if seconds * scale >= 1.0:
            return name, scale
    return "ns", 1e9


def shown_hosts(hosts: int, max_hosts: int) -> list[int]:
    """All hosts, or the first and last ``max_hosts // 2`` of a big ring (the ends differ most:
    under a causal contiguous split the first host idles most and the last works most)."""
    if hosts <= max_hosts:
        return list(range(hosts))
    head = max_hosts // 2
    return list(range(head)) + list(range(hosts - (max_hosts - head), hosts))


def _merged(start: np.ndarray, end: np.ndarray, tolerance: float) -> list[tuple[float, float]]:
    """``(start, width)`` bars, merging neighbours closer than ``tolerance`` (below a pixel)."""
    keep = np.isfinite(start) & np.isfinite(end) & (end > start)
    start, end = start[keep], end[keep]
    if start.size == 0:
        return []
    order = np.argsort(start)
    start, end = start[order], end[order]
    run_end = np.maximum.accumulate(end)
    breaks = np.flatnonzero(start[1:] - run_end[:-1] > tolerance) + 1
    firsts = np.concatenate([[0], breaks])
    lasts = np.concatenate([breaks - 1, [start.size - 1]])  # same length as firsts
    return [
        (float(start[a]), float(run_end[b] - start[a])) for a, b in zip(firsts, lasts, strict=True)
    ]


def _label_steps(
    ax, timeline: Timeline, host: int, row: int, scale: float, min_width: float, size: float
):
    """Write the step label inside each compute bar that is wide enough to hold it."""
    start, end = timeline.interval("compute")
    offset, height = LANES["compute"]
    for s in range(timeline.steps):
        a, b = start[s, host], end[s, host]
        if not (np.isfinite(a) and b > a):
            continue
        text = timeline.step_labels[s] if s < len(timeline.step_labels) else str(s)
        if (b - a) >= min_width * max(len(text), 1):
            ax.text(
                (a + b) / 2 * scale,
                row + offset + height / 2,
                text,
                ha="center",
                va="center",
                fontsize=size,
                color="white",
            )


def link_layers(timeline: Timeline) -> list[tuple[str, str, np.ndarray, np.ndarray, object]]:
    """``(lane, colour key, start, end, rows)`` of every message a timeline holds: ``start`` and
    ``end`` are ``(steps, hosts)``, ``rows`` selects the steps that layer draws.

    The ``send`` and ``recv`` arrays, and for a backward timeline also its early ``k, v``
    messages, coloured as blocks, while ``dk, dv`` messages take the ``*_grad`` colours (in a
    training step the forward ring's rows still carry blocks).
    """
    every, grads, kv = slice(None), grad_rows(timeline), kv_messages(timeline)
    if not grads.any():
        return [(lane, lane, *timeline.interval(lane), every) for lane in ("send", "recv")]
    layers = []
    for lane in ("send", "recv"):
        if lane in kv:
            layers.append((lane, lane, *kv[lane], every))
        layers.append((lane, lane, *timeline.interval(lane), ~grads))
        layers.append((lane, f"{lane}_grad", *timeline.interval(lane), grads))
    return layers


def _draw_gantt(
    ax,
    timeline: Timeline,
    *,
    max_hosts: int,
    span: float,
    unit: tuple[str, float],
    width: float = 11.0,
):
    """Draw one timeline on ``ax`` (a figure ``width`` inches wide); returns the hosts shown."""
    name, scale = unit
    hosts = shown_hosts(timeline.hosts, max_hosts)
    many = timeline.steps > 64  # then merge touching bars; else keep step boundaries visible
    tolerance = span / 4000 if many else -np.inf
    edge = {"lw": 0} if many else {"lw": 0.6, "edgecolor": "white"}
    # Step numbers: 7 pt on an 11-inch figure, 8 pt on a narrower one (a page shows it less
    # shrunk, but a small font would be small there). A character is ~0.6 em wide and the
    # axis ~85% of the figure: at 7 pt on 11 inches, 1/160 of the span.
    label_size = 7 if width >= 10 else 8
    char_width = span * (label_size * 0.6 / 72) / (0.85 * width)
    label_steps = timeline.steps <= LABELLED_STEPS
    for row, host in enumerate(hosts):
        c_off, c_h = LANES["compute"]
        own = timeline.makespan * scale  # idle only within this run; blank after it ends
        ax.broken_barh([(0, own)], (row + c_off, c_h), color=COLOURS["idle"], lw=0)
        compute = ("compute", "compute", *timeline.interval("compute"), slice(None))
        for lane, colour, start, end, rows in [compute, *link_layers(timeline)]:
            bars = _merged(start[rows, host], end[rows, host], tolerance)
            if bars:
                offset, height = LANES[lane]
                scaled = [(a * scale, w * scale) for a, w in bars]
                ax.broken_barh(scaled, (row + offset, height), facecolor=COLOURS[colour], **edge)
        if label_steps:
            _label_steps(ax, timeline, host, row, scale, char_width, label_size)
    if len(hosts) < timeline.hosts:
        gap = max_hosts // 2
        ax.axhline(gap, color="black", lw=0.8, ls=(0, (4, 3)))
    ax.set_ylim(len(hosts), 0)
    ax.set_yticks([r + 0.5 for r in range(len(hosts))])
    ax.set_yticklabels([f"host {h}" for h in hosts], fontsize=8 if len(hosts) > 10 else 9)
    ax.set_xlim(0, span * scale * 1.01)
    ax.set_xlabel(f"time ({name})")
    ax.grid(axis="x", color="#BBBBBB", lw=0.5, alpha=0.6)
    ax.set_axisbelow(True)
    return hosts


def _legend_handles(grads: bool = False):
    """Patches for the legend; ``grads``: a backward panel is shown, name both messages."""
    from matplotlib.patches import Patch

    if not grads:
        keys, labels = ("compute", "send", "recv", "idle"), LABELS
    else:
        keys = ("compute", "send", "send_grad", "recv", "recv_grad", "idle")
        labels = {**LABELS, **KV_LABELS}
    return [Patch(color=COLOURS[k], label=labels[k]) for k in keys]


def plot_timelines(
    panels: Sequence[tuple[str, Timeline]] | Mapping[str, Timeline],
    path: str | os.PathLike | None = None,
    *,
    max_hosts: int = 16,
    title: str | None = None,
    width: float = 11.0,
):
    """Gantt charts of several runs, stacked on one time axis so their makespans compare.

    ``panels``: ``[(label, timeline), ...]``; each panel title adds the makespan and idle
    fraction. Rings wider than ``max_hosts`` show their first and last hosts, with a note.
    ``width``: inches (a page column is about 8; under 10 the legend wraps to two rows and
    the step numbers grow to 8 pt). Saves to ``path`` (PNG/SVG/PDF by extension) when given;
    returns the matplotlib Figure.
    """
    items = list(panels.items()) if isinstance(panels, Mapping) else list(panels)
    if not items:
        raise ValueError("panels must hold at least one (label, timeline) pair, got none")
    if max_hosts < 2:
        raise ValueError(f"max_hosts must be at least 2, got {max_hosts}")
    if not (math.isfinite(width) and width >= 4):
        raise ValueError(f"width must be at least 4 inches, got {width}")
    plt = pyplot()
    span = max(t.makespan for _, t in items) or 1.0
    unit = time_unit(span)
    rows = [min(t.hosts, max_hosts) for _, t in items]
    heights = [0.34 * r + 0.9 for r in rows]
    handles = _legend_handles(any(grad_rows(t).any() for _, t in items))
    legend_rows = 1 if width >= 10 or len(handles) <= 4 else 2
    strip = 0.35 + 0.25 * (legend_rows - 1)  # inches under the axes for the legend
    fig, axes = plt.subplots(
        len(items),
        1,
        figsize=(width, sum(heights) + 0.55 + strip),  # + title and legend strips
        sharex=True,
        squeeze=False,
        gridspec_kw={"height_ratios": heights},
    )
    for ax, (label, timeline) in zip(axes[:, 0], items, strict=True):
        hosts = _draw_gantt(ax, timeline, max_hosts=max_hosts, span=span, unit=unit, width=width)
        note = f"makespan {timeline.makespan * unit[1]:.3g} {unit[0]}, "
        note += f"idle {percent(timeline.idle_fraction)}"
        if len(hosts) < timeline.hosts:
            note += f"; showing {len(hosts)} of {timeline.hosts} hosts (first and last)"
        text = f"{label}: {note}" if label else note
        if len(text) > 11 * width:  # keep long run descriptions inside the figure
            text = f"{label}\n{note}"
        ax.set_title(text, fontsize=10, loc="left")
    for ax in axes[:-1, 0]:
        ax.set_xlabel("")
    labelled = [t for _, t in items if t.steps <= LABELLED_STEPS]
    if labelled and all(label.isdigit() for t in labelled for label in t.step_labels):
        axes[-1, 0].set_xlabel(f"time ({unit[0]});  numbers in the compute bars: ring step")
    height = sum(heights) + 0.55 + strip
    fig.legend(
        handles=handles,
        loc="lower center",
        ncol=-(-len(handles) // legend_rows),
        frameon=False,
        fontsize=9,
        bbox_to_anchor=(0.5, 0.0),
    )
    if title:
        fig.suptitle(title, x=0.01, ha="left", fontsize=11, fontweight="bold")
    # Fixed strips in inches: the legend at the bottom, the title at the top.
    fig.tight_layout(rect=(0, strip / height, 1, 1 - (0.4 / height if title else 0)))
    return save_figure(plt, fig, path)


def plot_timeline(
    timeline: Timeline,
    path: str | os.PathLike | None = None,
    *,
    title: str = "",
    max_hosts: int = 16,
):
    """One run's Gantt chart (see ``plot_timelines``)."""
    return plot_timelines([(title, timeline)], path, max_hosts=max_hosts)


def plot_sweep(
    x: Sequence[float],
    series: Mapping[str, Sequence[float]],
    path: str | os.PathLike | None = None,
    *,
    xlabel: str,
    ylabel: str,
    title: str = "",
    threshold: float | None = None,
    threshold_label: str = "overlap threshold",
    references: Mapping[str, Sequence[float]] | None = None,
    logx: bool = True,
    logy: bool = False,
    plain_x: bool = False,
    ylim: tuple[float, float] | None = None,
    legend_loc: str = "best",
):
    """Curves of a sweep: one line with markers per series, dashed reference curves (closed
    forms), and an optional vertical line at ``threshold`` with its label. A log ``x`` axis has
    base 2 with token suffixes (``4K``), or plain integers with ``plain_x`` (host counts)."""
    if not series:
        raise ValueError("series must hold at least one curve, got none")
    x = np.asarray(x, dtype=float)
    for label, y in {**series, **(references or {})}.items():
        if len(y) != len(x):
            raise ValueError(f"series {label!r} has {len(y)} values for {len(x)} x values")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.8))
    markers = "osD^vP"
    for i, (label, y) in enumerate(series.items()):
        ax.plot(x, np.asarray(y, dtype=float), marker=markers[i % len(markers)], ms=5, label=label)
    for label, y in (references or {}).items():
        y = np.asarray(y, dtype=float)
        ax.plot(x, y, ls=(0, (3, 2)), color="black", lw=1.1, label=label, zorder=5)
    if logx:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(_token_formatter(plain_x))
        if len(x) <= 12:
            ax.set_xticks(x)
            ax.xaxis.set_minor_locator(_null_locator())
    if logy:
        ax.set_yscale("log")
    if threshold is not None and math.isfinite(threshold) and threshold > 0:
        ax.axvline(threshold, color="#CC3311", lw=1.5, ls="--")
        ax.annotate(
            f"{threshold_label}\n{format_tokens(threshold)} tokens",
            xy=(threshold, 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(-6, -6),  # left of the line: curves reach their plateau on the right
            textcoords="offset points",
            va="top",
            ha="right",
            fontsize=9,
            color="#CC3311",
            bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1.5},
        )
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=11)
    ax.grid(True, which="major", color="#CCCCCC", lw=0.6)
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.legend(fontsize=9, frameon=False, loc=legend_loc)
    fig.tight_layout()
    return save_figure(plt, fig, path)


def pair_owners(
    layout: str,
    hosts: int,
    seq_len: int,
    *,
    causal: bool,
    segment_ids: np.ndarray | None = None,
    order: str = "tokens",
) -> np.ndarray:
    """``(N, N)`` int: the host that computes each (query, key) pair, ``-1`` where masked.

    A pair is computed by the host holding its query (``ringsim.host_positions``), visible by
    ``ringsim.masks.visible_mask``. ``order="tokens"``: rows and columns in token order (the
    picture of the Striped Attention paper); ``"hosts"``: in the hosts' order, so the ``c x c``
    block of (host ``i``'s queries, host ``j``'s keys) is one square of a ``P x P`` grid.
    """
    from ringsim.layouts import host_positions
    from ringsim.masks import visible_mask

    if order not in ("tokens", "hosts"):
        raise ValueError(f"order must be 'tokens' or 'hosts', got {order!r}")
    seg = None if segment_ids is None else np.asarray(segment_ids)
    positions = host_positions(layout, hosts, seq_len, seg)
    tokens = np.arange(seq_len)
    mask = visible_mask(
        tokens, tokens, causal=causal, q_seg=seg, k_seg=seg
    )  # None: everything visible
    owner_of_token = np.empty(seq_len, dtype=np.int64)
    for h, row in enumerate(positions):
        owner_of_token[row] = h
    owners = np.repeat(owner_of_token[:, None], seq_len, axis=1)
    if mask is not None:
        owners[~mask] = -1
    if order == "hosts":
        perm = positions.reshape(-1)
        owners = owners[np.ix_(perm, perm)]
    return owners


def plot_layout_masks(
    hosts: int,
    seq_len: int,
    path: str | os.PathLike | None = None,
    *,
    layouts: Sequence[str] = ("contiguous", "striped", "zigzag"),
    causal: bool = True,
    segment_ids: np.ndarray | None = None,
    orders: Sequence[str] = ("tokens", "hosts"),
    title: str | None = None,
):
    """The tokens x tokens attention mask of each layout, every visible pair coloured by the
    host that computes it (white: masked). One column per layout, one row per ``order`` (see
    ``pair_owners``); the hosts-order row draws the ``P x P`` block grid and counts each
    host's visible pairs. Returns the Figure (saved to ``path`` when given)."""
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    if not layouts or not orders:
        raise ValueError(f"layouts and orders must be non-empty, got {layouts!r}, {orders!r}")
    plt = pyplot()
    cmap = plt.get_cmap("tab10" if hosts <= 10 else "viridis")
    colours = [cmap(h if hosts <= 10 else h / max(hosts - 1, 1)) for h in range(hosts)]
    palette = ListedColormap(["white", *colours])
    fig, axes = plt.subplots(
        len(orders),
        len(layouts),
        figsize=(2.6 * len(layouts) + 1.4, 2.75 * len(orders)),
        squeeze=False,
        layout="constrained",
    )
    c = seq_len // hosts
    for col, layout in enumerate(layouts):
        for row, order in enumerate(orders):
            ax = axes[row, col]
            owners = pair_owners(
                layout, hosts, seq_len, causal=causal, segment_ids=segment_ids, order=order
            )
            ax.imshow(owners + 1, cmap=palette, vmin=0, vmax=hosts, interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            ax.grid(False)
            if order == "hosts":
                for edge in range(1, hosts):
                    ax.axhline(edge * c - 0.5, color="black", lw=0.6)
                    ax.axvline(edge * c - 0.5, color="black", lw=0.6)
                per_host = [(owners == h).sum() for h in range(hosts)]
                ax.set_xlabel(f"keys by host; pairs per host {min(per_host)}-{max(per_host)}")
                ax.set_ylabel("queries by host")
            else:
                ax.set_xlabel("keys (token order)")
                ax.set_ylabel("queries (token order)")
            if row == 0:
                ax.set_title(layout, fontsize=11)
    handles = [Patch(color=colours[h], label=f"host {h}") for h in range(hosts)]
    handles.append(Patch(fc="white", ec="grey", label="masked"))
    fig.legend(handles=handles, loc="outside right center", fontsize=9)
    if title:
        fig.suptitle(title, fontsize=11)
    return save_figure(plt, fig, path)


def percent(fraction: float) -> str:
    """``0.4667 -> "46.7%"``; rounding noise below zero prints as 0.0%, not -0.0%."""
    return f"{100 * fraction:.1f}%".replace("-0.0%", "0.0%")


def format_tokens(n: float) -> str:
    """``4096 -> "4K"``, ``1536 -> "1.5K"``, ``2**24 -> "16M"`` (powers of two, like the CLI)."""
    for suffix, size in (("M", 2**20), ("K", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.3g}{suffix}"
    return f"{round(n)}" if abs(n) >= 1 else f"{n:.3g}"


def _null_locator():
    from matplotlib.ticker import NullLocator

    return NullLocator()


def _token_formatter(plain: bool = False):
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _: f"{v:g}" if plain else format_tokens(v))


def check_figure_path(name: str, path: str | os.PathLike) -> None:
    """Refuse (``ValueError`` naming ``name``) a figure path that cannot be written or whose
    suffix is no format matplotlib writes; call it before the work that makes the figure."""
    from ringsim.files import check_output_path, figure_formats

    check_output_path(name, path, suffixes=figure_formats())


def save_figure(plt, fig, path, dpi: int = 130):
    """Save ``fig`` to ``path`` (format by suffix) atomically: the old file stays if it fails."""
    if path is not None:
        from ringsim.files import atomic_open

        try:
            check_figure_path("path", path)
            with atomic_open(path, "wb") as fh:
                fig.savefig(fh, format=Path(path).suffix.lower().lstrip("."), dpi=dpi)
        finally:
            plt.close(fig)
    return fig
