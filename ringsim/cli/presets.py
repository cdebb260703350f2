"""``ringsim presets``: the hardware presets, their overlap thresholds and their sources."""

from __future__ import annotations

import argparse
import dataclasses

from ringsim.cli.output import format_length, print_json, print_table

HELP = "list the hardware presets and where their numbers come from"
EXAMPLES = """examples:
  ringsim presets
  ringsim presets --json
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the presets as JSON")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ringsim.timer.cost import overlap_threshold
    from ringsim.timer.hardware import all_hardware

    rows = []
    for name, hw in all_hardware().items():
        # the paper's convention is bf16; a calibrated CPU profile only knows its own dtype
        dtype = "bf16" if "bf16" in hw.flops else next(iter(hw.flops))
        threshold = overlap_threshold(hw, heads=32, kv_heads=32, head_dim=128, dtype=dtype)
        rows.append({**dataclasses.asdict(hw), "overlap_threshold_tokens": threshold})
        rows[-1].update(name=name, threshold_dtype=dtype)
    if args.json:
        print_json(rows)
        return 0
    table = [
        (
            r["name"],
            f"{r['flops'][r['threshold_dtype']] * r['efficiency'] / 1e12:.4g} "
            f"{r['threshold_dtype']}",
            f"{r['link_bandwidth'] / 1e9:.4g}",
            f"{r['link_latency'] * 1e6:.3g}",
            f"{r['memory_bytes'] / 1e9:.4g}",
            format_length(r["overlap_threshold_tokens"]),
        )
        for r in rows
    ]
    header = ("preset", "TFLOP/s", "link GB/s", "latency µs", "memory GB", "c* tokens")
    print_table("hardware presets (c*: overlap threshold, forward, 32 heads x 128)", header, table)
    print()
    for r in rows:
        print(f"{r['name']}: {r['source']}")
    return 0
