"""``ringsim sweep``: time against block size (is the transfer hidden?) or idle fraction against
hosts per layout, as a table, JSON and a figure."""

from __future__ import annotations

import argparse

from ringsim.cli.args import (
    DEFAULT_STRATEGY,
    STRATEGIES,
    add_cluster_flags,
    add_hardware_flags,
    add_implementation_flags,
    add_model_flags,
    add_window_flag,
    apply_model,
    resolve_hardware,
    ring_config,
    run_config,
)
from ringsim.cli.output import (
    Ticker,
    format_length,
    format_seconds,
    note,
    percent,
    print_json,
    print_table,
)
from ringsim.layouts import layout_names
from ringsim.values import arg_type, parse_positive_int, parse_seq_len

HELP = "sweep block size, hosts or sliding window and tabulate (and plot) the result"
EXAMPLES = """examples:
  ringsim sweep --vary block --hosts 8 --hardware a100-ib --plot block.png
  ringsim sweep --vary block --values 512,1K,2K,4K,8K --pass backward
  ringsim sweep --vary hosts --plot idle.png            (causal by default)
  ringsim sweep --vary hosts --values 4,16,64 --layouts contiguous,zigzag --json
  ringsim sweep --vary block --causal --layout zigzag --hardware h100-nvlink --kv-heads 8 \
      --implementation fa2
  ringsim sweep --vary sliding-window --hosts 8 --block 8K --values 1K,4K,8K,16K,32K,none \
      --hardware h100-nvlink --implementation fa2
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    positive = lambda name: arg_type(parse_positive_int, name)
    p.add_argument(
        "--vary",
        choices=("block", "hosts", "sliding-window"),
        required=True,
        help="block: time vs block size at fixed hosts; hosts: idle fraction vs hosts per "
        "layout; sliding-window: time vs the window per layout",
    )
    p.add_argument(
        "--values",
        help="comma-separated values (lengths accept K/M; a window may be 'none')",
    )
    p.add_argument(
        "--hosts", type=positive("hosts"), help="hosts for --vary block and sliding-window (8)"
    )
    p.add_argument("--block", help="tokens per host for --vary hosts (4K) and sliding-window (8K)")
    p.add_argument(
        "--layout", choices=layout_names(), default="contiguous", help="for --vary block"
    )
    p.add_argument(
        "--layouts", help="comma-separated layouts for --vary hosts and sliding-window (all)"
    )
    p.add_argument(
        "--causal",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="causal mask (default: on for --vary hosts and sliding-window, off for block)",
    )
    add_window_flag(p)
    p.add_argument("--no-overlap", action="store_true", help="for --vary hosts")
    p.add_argument(
        "--strategy", choices=STRATEGIES, default=DEFAULT_STRATEGY, help="how hosts share work"
    )
    add_model_flags(p)
    add_implementation_flags(p)
    add_hardware_flags(p)
    add_cluster_flags(p)
    p.add_argument("--json", action="store_true", help="print the sweep as JSON")
    p.add_argument("--plot", metavar="FILE", help="write the sweep figure")
    p.set_defaults(run=run)


DEFAULT_BLOCKS = [2**k for k in range(7, 18)]  # 128 .. 128K tokens per host


DEFAULT_HOSTS = [2**k for k in range(1, 11)]  # 2 .. 1024 hosts


def run(args: argparse.Namespace) -> int:
    apply_model(args)  # --model sets the heads the sweep reads before any RingConfig
    if args.vary == "sliding-window" and args.sliding_window is not None:
        raise ValueError(
            "--sliding-window sets one window; --vary sliding-window sweeps them: give the "
            "windows with --values"
        )
    sweeps = {"block": sweep_block, "hosts": sweep_hosts, "sliding-window": sweep_window}
    data = sweeps[args.vary](args)
    if args.json:
        print_json(data)
    if args.plot:
        plot_sweep_data(data, args.plot)
        note(f"wrote sweep figure {args.plot}")
    return 0


DEFAULT_WINDOWS = [1024, 4096, 8192, 16384, 32768, None]  # None: no window


def _windows(args: argparse.Namespace) -> list[int | None]:
    """The windows of ``--values`` (``none``: no window), in increasing order, none last."""
    if not args.values:
        return DEFAULT_WINDOWS
    from ringsim.values import parse_length

    windows = set()
    for text in args.values.split(","):
        if text.strip().lower() == "none":
            windows.add(None)
            continue
        try:
            windows.add(parse_length(text.strip()))
        except ValueError:
            raise ValueError(
                f"values must be windows like 1K,4K,none for --vary sliding-window, got "
                f"{args.values!r}"
            ) from None
    return sorted(windows, key=lambda w: (w is None, w or 0))


def _layouts(args: argparse.Namespace) -> list[str]:
    """``--layouts`` (default every layout that needs no documents), checked."""
    names = layout_names()
    layouts = args.layouts.split(",") if args.layouts else list(names)
    for layout in layouts:
        if layout not in names:
            raise ValueError(f"layout must be one of {', '.join(names)}, got {layout!r}")
    return layouts


def sweep_window(args: argparse.Namespace) -> dict:
    """Time against the sliding window, per layout, at fixed hosts and block: which layout
    balances a window, and how many ring steps it runs. A window as long as the sequence is no
    window (``none``)."""
    hosts = args.hosts or 8
    block = parse_seq_len(args.block) if args.block else 8192
    seq_len = hosts * block
    causal = True if args.causal is None else args.causal
    windows, layouts = _windows(args), _layouts(args)
    hw = resolve_hardware(args)
    cases = [(w, layout) for w in windows for layout in layouts]
    rows = []
    for w, layout in Ticker("ringsim sweep").over(cases, "windows timed"):
        config = ring_config(
            args,
            hosts=hosts,
            seq_len=seq_len,
            layout=layout,
            causal=causal,
            sliding_window=None if w is None or w >= seq_len else w,
        )
        result = run_config(config, args.strategy, args=args)
        s = result.summary()
        sched = result.schedule
        rows.append(
            {
                "sliding_window": w,
                "layout": layout,
                "total_time_s": s["total_time_s"],
                "compute_time_s": s["compute_time_s"],
                "exposed_comm_s": s["exposed_comm_s"],
                "idle_fraction": s["idle_fraction"],
                "ring_steps": None if sched is None else len(sched.ring_steps),
            }
        )
    data = {
        "vary": "sliding-window",
        "hosts": hosts,
        "seq_len": seq_len,
        "block_tokens": block,
        "causal": causal,
        "pass": args.pass_,
        "hardware": hw.name,
        "implementation": getattr(args, "implementation", "ideal"),
        "strategy": args.strategy,
        "layouts": layouts,
        "rows": rows,
    }
    if not args.json:
        table = []
        for w in windows:
            by_layout = {r["layout"]: r for r in rows if r["sliding_window"] == w}
            best = min(by_layout.values(), key=lambda r: r["total_time_s"])
            cells = ["none" if w is None else format_length(w)]
            for layout in layouts:
                r = by_layout[layout]
                steps = "" if r["ring_steps"] is None else f" ({r['ring_steps']})"
                mark = " *" if r is best else ""
                cells.append(f"{format_seconds(r['total_time_s'])}{steps}{mark}")
            table.append(cells)
        print_table(
            f"time against the sliding window: {args.strategy} {args.pass_}, "
            f"{format_length(seq_len)} tokens on {hosts} hosts, "
            f"{'causal' if causal else 'full'}, {hw.name} (ring steps run in brackets; * "
            "the fastest layout)",
            ("window", *layouts),
            table,
        )
    return data


def _values(args: argparse.Namespace, default: list[int], name: str) -> list[int]:
    if not args.values:
        return default
    from ringsim.values import parse_length

    try:
        values = [parse_length(v) for v in args.values.split(",")]
    except ValueError:
        values = []
    if not values:
        raise ValueError(
            f"values must be positive {name} counts like 1K,2K,4K, got {args.values!r}"
        )
    return sorted(set(values))


def sweep_block(args: argparse.Namespace) -> dict:
    """Time against block size at fixed hosts, with and without overlap, and the threshold:
    every figure, the threshold too, from the runs themselves (their ``summary``), so the
    closing line says what the table shows."""
    hosts = args.hosts or 8
    blocks = _values(args, DEFAULT_BLOCKS, "block")
    hw = resolve_hardware(args)
    rows, threshold = [], None
    for block in Ticker("ringsim sweep").over(blocks, "block sizes timed"):
        row = {"block_tokens": block, "seq_len": block * hosts}
        for overlap in (True, False):
            config = ring_config(
                args, hosts=hosts, seq_len=block * hosts, overlap=overlap, layout=args.layout
            )
            s = run_config(config, args.strategy, args=args).summary()
            key = "" if overlap else "no_overlap_"
            row[f"{key}total_time_s"] = s["total_time_s"]
            if overlap:
                row["compute_time_s"] = s["compute_time_s"]
                row["exposed_comm_s"] = s["exposed_comm_s"]
                threshold = s.get("min_block_for_overlap") if threshold is None else threshold
        row["slowdown"] = row["total_time_s"] / row["compute_time_s"]
        row["compute_share"] = row["compute_time_s"] / row["total_time_s"]
        row["no_overlap_compute_share"] = row["compute_time_s"] / row["no_overlap_total_time_s"]
        rows.append(row)
    hidden = [r["block_tokens"] for r in rows if r["exposed_comm_s"] <= 1e-6 * r["total_time_s"]]
    hidden_from = hidden_from_block(rows, hidden)
    data = {
        "vary": "block",
        "hosts": hosts,
        "layout": args.layout,
        "causal": bool(args.causal),
        "pass": args.pass_,
        "hardware": hw.name,
        "implementation": getattr(args, "implementation", "ideal"),
        "overlap_threshold_tokens": threshold,
        "min_seq_per_host_tokens": None if threshold is None else 6 * threshold,  # Table 2: 6 c
        "first_hidden_block_tokens": min(hidden) if hidden else None,
        "hidden_from_block_tokens": hidden_from,
        "rows": rows,
    }
    if not args.json:
        print_table(
            f"time against block size: {hosts} hosts, {args.layout}, {hw.name} "
            f"({_threshold_words(threshold)})",
            ("block", "makespan", "compute", "exposed comm", "compute share", "without overlap"),
            [
                (
                    format_length(r["block_tokens"]),
                    format_seconds(r["total_time_s"]),
                    format_seconds(r["compute_time_s"]),
                    format_seconds(r["exposed_comm_s"]),
                    percent(r["compute_share"]),
                    percent(r["no_overlap_compute_share"]),
                )
                for r in rows
            ],
        )
        print(
            "compute share = compute time / makespan of the busiest host; "
            "without overlap, compute and transfers alternate"
        )
        print(hidden_words(hidden, hidden_from))
    return data


def hidden_from_block(rows: list[dict], hidden: list[int]) -> int | None:
    """The smallest block from which every larger block of the sweep hides its transfer (a
    smaller block may hide too, where a call's fixed cost outlasts its transfer, with exposed
    blocks between: "hidden from" must not start there)."""
    first = None
    for row in reversed(rows):
        if row["block_tokens"] not in hidden:
            break
        first = row["block_tokens"]
    return first


def hidden_words(hidden: list[int], hidden_from: int | None) -> str:
    """The sweep's closing line, read off the table's rows."""
    if hidden_from is None:
        also = f" (hidden only at {', '.join(map(format_length, hidden))})" if hidden else ""
        return f"communication not fully hidden at the largest block{also}"
    line = f"communication fully hidden from block {format_length(hidden_from)} on"
    below = [b for b in hidden if b < hidden_from]
    if below:
        line += f"; also at {', '.join(map(format_length, below))}, below exposed blocks"
    return line


def _threshold_words(threshold: float | None) -> str:
    """The runs' own overlap threshold (``min_block_for_overlap``) for the table's title."""
    if threshold is None:
        return "no overlap threshold for this strategy"
    if threshold <= 1:
        return "overlap threshold: every block hides its transfer"
    return (
        f"overlap threshold c* = {format_length(threshold)} tokens, the paper's minimum "
        f"sequence per host 6c* = {format_length(6 * threshold)}"
    )


def sweep_hosts(args: argparse.Namespace) -> dict:
    """Idle fraction against hosts, per layout, at a fixed block size per host."""
    hosts_list = _values(args, DEFAULT_HOSTS, "host")
    block = parse_seq_len(args.block) if args.block else 4096
    causal = True if args.causal is None else args.causal
    layouts = _layouts(args)
    cases = [(p, layout) for p in hosts_list for layout in layouts]
    rows = []
    for p, layout in Ticker("ringsim sweep").over(cases, "rings timed"):
        config = ring_config(
            args,
            hosts=p,
            seq_len=block * p,
            layout=layout,
            causal=causal,
            overlap=not args.no_overlap,
        )
        s = run_config(config, args.strategy, args=args).summary()
        rows.append(
            {
                "hosts": p,
                "layout": layout,
                "idle_fraction": s["idle_fraction"],
                "total_time_s": s["total_time_s"],
            }
        )
    data = {
        "vary": "hosts",
        "block_tokens": block,
        "causal": causal,
        "layouts": layouts,
        "contiguous_closed_form": {p: (p - 1) / (2 * p - 1) for p in hosts_list},
        "rows": rows,
    }
    if not args.json:
        table = []
        for p in hosts_list:
            by_layout = {r["layout"]: r for r in rows if r["hosts"] == p}
            base = by_layout.get("contiguous")
            cells = [str(p)]
            for layout in layouts:
                r = by_layout[layout]
                speedup = f" ({base['total_time_s'] / r['total_time_s']:.2f}x)" if base else ""
                cells.append(f"{percent(r['idle_fraction'])}{speedup}")
            cells.append(percent((p - 1) / (2 * p - 1)))
            table.append(cells)
        print_table(
            f"idle fraction against hosts ({'causal' if causal else 'full'}, "
            f"{format_length(block)} tokens per host; speedup over contiguous in brackets)",
            ("hosts", *layouts, "(P-1)/(2P-1)"),
            table,
        )
    return data


def plot_sweep_data(data: dict, path: str) -> None:
    from ringsim.views.plots import plot_sweep

    rows = data["rows"]
    if data["vary"] == "sliding-window":  # no window is a window of the whole sequence
        n = data["seq_len"]
        time_ms = {(r["layout"], r["sliding_window"] or n): r["total_time_s"] * 1e3 for r in rows}
        windows = sorted({w for _, w in time_ms})
        plot_sweep(
            windows,
            {layout: [time_ms[layout, w] for w in windows] for layout in data["layouts"]},
            path,
            xlabel=f"sliding window (tokens; {format_length(n)}: the whole sequence, no window)",
            ylabel="makespan (ms)",
            title=f"{data['strategy']} {data['pass']}, {format_length(n)} tokens on "
            f"{data['hosts']} hosts, {'causal' if data['causal'] else 'full'}, "
            f"{data['hardware']}: time against the window",
        )
        return
    if data["vary"] == "block":
        plot_sweep(
            [r["block_tokens"] for r in rows],
            {
                "with overlap": [r["compute_share"] for r in rows],
                "without overlap": [r["no_overlap_compute_share"] for r in rows],
            },
            path,
            xlabel="block size per host (tokens)",
            ylabel="compute time / makespan (busiest host)",
            title=f"{data['pass']}, {data['hosts']} hosts, {data['layout']}, "
            f"{'causal' if data['causal'] else 'full'}, {data['hardware']}: "
            "is the transfer hidden?",
            ylim=(0, 1.05),
            legend_loc="lower right",
            threshold=data["overlap_threshold_tokens"],
            threshold_label="overlap threshold c*",
        )
        return
    hosts = sorted({r["hosts"] for r in rows})
    series = {
        layout: [
            next(r for r in rows if r["hosts"] == p and r["layout"] == layout)["idle_fraction"]
            for p in hosts
        ]
        for layout in data["layouts"]
    }
    references = {}
    if data["causal"] and "contiguous" in data["layouts"]:
        references["contiguous closed form (P-1)/(2P-1)"] = [(p - 1) / (2 * p - 1) for p in hosts]
    plot_sweep(
        hosts,
        series,
        path,
        xlabel="hosts",
        ylabel="idle fraction",
        title=f"idle fraction against hosts ({'causal' if data['causal'] else 'full'} "
        f"attention, {format_length(data['block_tokens'])} tokens per host)",
        references=references,
        plain_x=True,
    )
