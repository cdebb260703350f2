"""``ringsim validate``: every published measurement in the package's dataset, predicted, side
by side with its source, ratio, error and target band (``ringsim.timer.studies.validate``)."""

from __future__ import annotations

import argparse

from ringsim.cli.output import Ticker, note, print_json, print_table
from ringsim.timer.studies.published import EXPERIMENTS

HELP = "predict every published measurement in the dataset; ratios and target bands"
EXAMPLES = """examples:
  ringsim validate
  ringsim validate --experiment zhuzilin --json
  ringsim validate --plot validation.png
  ringsim validate --experiment zhuzilin --implementation ideal
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--experiment",
        action="append",
        metavar="NAME",
        help=f"only these experiments (repeatable): {', '.join(EXPERIMENTS)}",
    )
    p.add_argument(
        "--implementation",
        metavar="NAME",
        help="kernel family for the ring rows instead of each row's own (e.g. ideal)",
    )
    p.add_argument("--json", action="store_true", help="print every row as JSON")
    p.add_argument("--plot", metavar="FILE", help="write predicted against published, y = x")
    p.set_defaults(run=run)


def format_error(r: dict) -> str:
    """A result's error as printed: points for a share of ideal, a percentage otherwise."""
    from ringsim.timer.studies.published import SHARE_EXPERIMENTS

    share = r["experiment"] in SHARE_EXPERIMENTS
    return f"{r['error']:+.1f} pt" if share else f"{r['error']:+.1%}"


def _value(v: float) -> str:
    return f"{v:.3g}" if abs(v) < 1e3 else f"{v:,.0f}"


def run(args: argparse.Namespace) -> int:
    from ringsim.timer.studies.validate import summarize, validate

    with Ticker("ringsim validate") as ticker:
        results = validate(
            experiments=args.experiment, implementation=args.implementation, progress=ticker
        )
    if args.plot:
        from ringsim.views.validation import plot_validation

        plot_validation(results, args.plot)
        note(f"wrote validation figure {args.plot}")
    if args.json:
        print_json({"rows": results, "summary": summarize(results)})
        return 0
    rows = [
        (
            r["key"],
            _value(r["published"]),
            _value(r["predicted"]),
            format_interval(r),
            f"{r['ratio']:.3f}",
            format_error(r),
            "yes" if r["in_band"] else "NO",
            "yes" if r["holds"] else "NO",
            r.get("widest") or "-",
            r["implementation"],
        )
        for r in results
    ]
    header = (
        "row",
        "published",
        "predicted",
        "interval",
        "ratio",
        "error",
        "in band",
        "holds",
        "widest",
        "model",
    )
    print_table("published measurements, predicted (nothing fitted)", header, rows)
    print(
        "predicted: every parameter known only as a range at its point, every run setting as "
        "its source gives it; interval: over the ranges' ends (achieved send/recv bandwidth, "
        "host time per call, a lone thread block's speed; a step's sustained clock and GEMM "
        "library) and every setting the sources leave open; in band: the interval meets the "
        "target band; holds: the interval holds the published value (what its rounding stands "
        "for); widest: the open setting "
        "or range that widens a whole-step interval most; error: of the point"
    )
    print()
    for r in results:
        if "spans" in r:
            print(_step_line(r))
    print()
    for name, s in summarize(results).items():
        print(
            f"{name}: {s['in_band']}/{s['rows']} in band ({s['point_in_band']} by the point), "
            f"{s['holds']} hold the published value, largest |error| {s['max_abs_error']:.3g}"
        )
    return 0


def _step_line(r: dict) -> str:
    """One whole-step row: what each open setting or range spans, and the memory verdict."""
    spans = "; ".join(
        f"{name} {_value(low)}-{_value(high)}" for name, (low, high) in r["spans"].items()
    )
    fits = "fits" if r["fits"] else "does NOT fit (a memory-model miss: it ran)"
    memory = f"{r['bytes_per_host'] / 1e9:.1f} of {r['usable_bytes'] / 1e9:.1f} GB, {fits}"
    return f"{r['key']}: {spans}; memory {memory}"


def format_interval(r: dict) -> str:
    """``low-high`` of a result's interval, ``-`` for a point prediction."""
    low, high = r["interval"]
    if low == high:
        return "-"
    return f"{_value(low)}-{_value(high)}"
