"""A two-minute tour: the causal ring under three layouts, and when communication hides.

    python -m ringsim.cli.demo                      (or: ringsim demo --out results/demo.png)

1. Causal attention on a contiguous split leaves the early hosts idle while the last one
   works through every block; striped and zigzag splits give every host the same work.
2. With overlap, a block's transfer hides behind its compute once the block is at least the
   overlap threshold ``c*`` tokens; below it the link sets the pace.

It prints two small tables and writes one figure: the three timelines on one time axis.
"""

from __future__ import annotations

import argparse
import math
import sys

from ringsim.cli.args import DTYPES
from ringsim.cli.output import (
    format_length,
    format_seconds,
    guarded,
    note,
    percent,
    print_json,
    print_table,
)
from ringsim.layouts import layout_names
from ringsim.values import Parser, arg_type, parse_positive_int, parse_seq_len


def layout_rows(
    hosts: int, seq_len: int, hardware, pass_: str = "forward", dtype: str = "bf16"
) -> tuple[list, dict]:
    """Simulate the causal ring under each layout; rows with makespan, idle and speedup."""
    from ringsim.cli.checks import check_finite_times
    from ringsim.timer import RingConfig, simulate

    results = {}
    for layout in layout_names():
        config = RingConfig(
            hosts=hosts,
            seq_len=seq_len,
            hardware=hardware,
            layout=layout,
            causal=True,
            pass_=pass_,
            dtype=dtype,
        )
        results[layout] = simulate(config)
        check_finite_times(results[layout].summary())
    base = results["contiguous"].summary()["total_time_s"]
    rows = []
    for layout, result in results.items():
        s = result.summary()
        rows.append(
            {
                "layout": layout,
                "total_time_s": s["total_time_s"],
                "idle_fraction": s["idle_fraction"],
                "speedup": base / s["total_time_s"],
            }
        )
    return rows, {layout: r.timeline for layout, r in results.items()}


def overlap_rows(hosts: int, seq_len: int, hardware, dtype: str = "bf16") -> tuple[float, list]:
    """The run's own block and one well below the threshold: is communication hidden?"""
    from ringsim.timer import RingConfig, simulate
    from ringsim.timer.cost import overlap_threshold

    threshold = overlap_threshold(hardware, heads=32, kv_heads=32, head_dim=128, dtype=dtype)
    own = seq_len // hosts
    small = 2 ** max(1, math.floor(math.log2(max(threshold / 8, 2))))  # ~c*/8, a power of two
    rows = []
    for block in sorted({small, own}):
        config = RingConfig(
            hosts=hosts,
            seq_len=block * hosts,
            hardware=hardware,
            layout="zigzag",
            causal=True,
            dtype=dtype,
        )
        s = simulate(config).summary()
        rows.append(
            {
                "block_tokens": block,
                "total_time_s": s["total_time_s"],
                "exposed_comm_s": s["exposed_comm_s"],
                "exposed_fraction": s["exposed_comm_s"] / s["total_time_s"],
                "hidden": s["exposed_comm_s"] <= 1e-6 * s["total_time_s"],
            }
        )
    return threshold, rows


DEFAULT_FIGURE = "results/demo.png"


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="ringsim demo",
        description="Causal ring attention under three layouts, and when overlap hides the "
        "communication. Prints two tables and writes a timeline figure.",
        epilog="""examples:
  ringsim demo
  ringsim demo --out results/demo.png --hosts 8 --seq-len 64K --hardware h100-nvlink
  python -m ringsim.cli.demo --json --no-plot""",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--out", "--plot", dest="out", default=None, help=f"figure ({DEFAULT_FIGURE})")
    p.add_argument(
        "--hosts", type=arg_type(parse_positive_int, "hosts"), default=8, help="hosts (8)"
    )
    p.add_argument("--seq-len", default="64K", help="tokens, K/M suffixes (64K)")
    p.add_argument("--hardware", default="h100-nvlink", help="preset (h100-nvlink)")
    p.add_argument(
        "--dtype",
        choices=DTYPES,
        help="element type (bf16; a calibrated profile's own, e.g. fp32 for cpu-calibrated)",
    )
    p.add_argument("--no-plot", action="store_true", help="skip the figure")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    return p


def run(args: argparse.Namespace) -> int:
    from ringsim.timer.machine.hardware import default_dtype, get_hardware

    if args.no_plot and args.out is not None:
        raise ValueError(f"--out {args.out} names the figure that --no-plot skips: drop one")
    args.out = DEFAULT_FIGURE if args.out is None else args.out
    if not args.no_plot:  # before the work: a bad path must not cost the run
        from ringsim.views.plots import check_figure_path

        check_figure_path("--out", args.out)
    hardware = get_hardware(args.hardware)
    dtype = args.dtype or default_dtype(hardware)
    seq_len = parse_seq_len(args.seq_len)
    rows, timelines = layout_rows(args.hosts, seq_len, hardware, dtype=dtype)
    threshold, overlap = overlap_rows(args.hosts, seq_len, hardware, dtype)
    figure = None
    if not args.no_plot:
        from ringsim.views.plots import plot_timelines

        title = (
            f"causal ring attention, {format_length(seq_len)} tokens on {args.hosts} hosts of "
            f"{hardware.name}: the same work, three layouts"
        )
        plot_timelines(list(timelines.items()), args.out, title=title)
        figure = args.out
    if args.json:
        print_json(
            {
                "hosts": args.hosts,
                "seq_len": seq_len,
                "hardware": hardware.name,
                "dtype": dtype,
                "layouts": rows,
                "overlap_threshold_tokens": threshold,
                "overlap": overlap,
                "figure": figure,
            }
        )
        return 0
    p = args.hosts
    print_table(
        f"1. causal attention, {format_length(seq_len)} tokens on {p} hosts, {hardware.name}, "
        f"{dtype}",
        ("layout", "makespan", "idle", "speedup"),
        [
            (
                r["layout"],
                format_seconds(r["total_time_s"]),
                percent(r["idle_fraction"]),
                f"{r['speedup']:.2f}x",
            )
            for r in rows
        ],
    )
    print(
        f"   contiguous idles (P-1)/(2P-1) = {100 * (p - 1) / (2 * p - 1):.1f}% in closed form: "
        "host h has h + 1/2 blocks of work, the last host P - 1/2."
    )
    print()
    print_table(
        f"2. overlap (zigzag): threshold c* = {format_length(threshold)} tokens per block",
        ("block", "makespan", "exposed comm", "hidden?"),
        [
            (
                format_length(r["block_tokens"]),
                format_seconds(r["total_time_s"]),
                f"{format_seconds(r['exposed_comm_s'])} ({100 * r['exposed_fraction']:.0f}%)",
                "yes" if r["hidden"] else "no: the link sets the pace",
            )
            for r in overlap
        ],
    )
    if figure:
        note(f"wrote {figure}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    return guarded("ringsim demo", lambda: run(args), as_json=args.json)


if __name__ == "__main__":
    sys.exit(main())
