"""``ringsim presets``: the hardware presets (chip, link kind, rates), their overlap thresholds
and their sources, then the cluster presets (nodes of devices, their links;
``ringsim.timer.machine.topology``)."""

from __future__ import annotations

import argparse
import dataclasses

from ringsim.cli.output import format_length, note, print_json, print_table

HELP = "list the hardware and cluster presets and where their numbers come from"
EXAMPLES = """examples:
  ringsim presets
  ringsim presets --json        (hardware rows, then cluster rows: "kind": "cluster")
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the presets as JSON")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ringsim.timer.cost import overlap_threshold
    from ringsim.timer.machine.hardware import all_hardware

    rows = []
    for name, hw in all_hardware().items():
        # the paper's convention is bf16; a calibrated CPU profile only knows its own dtype
        dtype = "bf16" if "bf16" in hw.flops else next(iter(hw.flops))
        threshold = overlap_threshold(hw, heads=32, kv_heads=32, head_dim=128, dtype=dtype)
        rows.append({**dataclasses.asdict(hw), "overlap_threshold_tokens": threshold})
        rows[-1].update(name=name, threshold_dtype=dtype)
    for row in rows:
        row["kind"] = "hardware"
    from ringsim.timer.machine.hardware import calibrated_profiles

    for name, problem in calibrated_profiles()[1].items():  # a corrupt profile is said, not hidden
        note(f"{name} is not available: {problem}")
    clusters = _cluster_rows()
    if args.json:
        print_json(rows + clusters)
        return 0
    table = [
        (
            r["name"],
            "?" if r["arch"] is None else r["arch"]["name"],
            f"{r['flops'][r['threshold_dtype']] * r['efficiency'] / 1e12:.4g} "
            f"{r['threshold_dtype']}",
            r["link"]["name"],
            f"{r['link_bandwidth'] / 1e9:.4g}",
            f"{r['link_latency'] * 1e6:.3g}",
            f"{r['memory_bytes'] / 1e9:.4g}",
            format_length(r["overlap_threshold_tokens"]),
        )
        for r in rows
    ]
    header = ("preset", "chip", "TFLOP/s", "link", "GB/s", "latency µs", "memory GB", "c* tokens")
    print_table("hardware presets (c*: overlap threshold, forward, 32 heads x 128)", header, table)
    print()
    for r in rows:
        print(f"{r['name']}: {r['source']}")
    print()
    table = [
        (
            c["name"],
            c["hardware"],
            f"{c['gpus_per_node']}",
            f"{c['fabric']} {c['intra_bandwidth'] / 1e9:.4g}",
            f"{c['nics_per_node']} x {c['inter_bandwidth'] / 1e9:.4g}",
        )
        for c in clusters
    ]
    header = ("cluster", "device", "per node", "intra GB/s", "NICs x GB/s")
    print_table("cluster presets (bandwidths per direction)", header, table)
    print()
    for c in clusters:
        print(f"{c['name']}: {c['source']}")
    return 0


def _cluster_rows() -> list[dict]:
    from ringsim.timer.machine.topology import CLUSTERS

    rows = []
    for name, cluster in CLUSTERS.items():
        row = {f.name: getattr(cluster, f.name) for f in dataclasses.fields(cluster)}
        row.update(kind="cluster", name=name, hardware=cluster.hardware.name)
        rows.append(row)
    return rows
