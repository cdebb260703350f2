"""The CPU comparison table: the real gloo ring against the simulator on this machine.

Calibrates once (block compute at the ring's block sizes, the link as a ring step uses it),
then for two local ranks runs block sizes at and well above the overlap threshold, contiguous and
zigzag, causal and not, and writes ``results/cpu-<date>.json`` (plus the profile
``results/cpu-profile-<date>.json`` and its raw data ``results/cpu-calibration-<date>.json``).

    .venv/bin/python benchmarks/bench_cpu_ring.py [--quick] [--out FILE]

Targets (issue 4): ratio measured/predicted within 0.9-1.1 per run; measured zigzag/contiguous
causal speedup within 10% of the predicted one.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from datetime import date
from pathlib import Path

import torch

from kernels.calibration.calibrate import calibrate_data, save_calibration
from kernels.calibration.measure import measure
from kernels.calibration.report import MeasureOptions, RingShape

RESULTS = Path(__file__).resolve().parent.parent / "results"
SMALL_BLOCK, SMALL_HEADS, SMALL_HEAD_DIM = 16, 64, 256


def run(
    block_sizes, *, heads, head_dim, repeats, out: Path, save_profile: bool, fresh: bool
) -> dict:
    """``fresh``: calibrate again right before every run (the cores are shared with whatever
    else runs on the machine, and its load drifts); else reuse the first calibration."""
    today = date.today().isoformat()
    load_at_start = os.getloadavg()
    sizes = sorted({16, 32, *block_sizes, *(2 * c for c in block_sizes)})
    large = [c for c in block_sizes if c > SMALL_BLOCK] or list(block_sizes)
    cal = calibrate_data(
        "gloo",
        heads=heads,
        head_dim=head_dim,
        sizes=sizes,
        repeats=repeats,
        masked_sizes=large,
        solo_sizes=large,
        step_sizes=large,
    )
    if save_profile:
        save_calibration(cal, RESULTS / f"cpu-profile-{today}.json")
    runs = []
    for c in block_sizes:
        # a few tokens per host with many wide heads: the message is as large as it gets next
        # to the block's work, which puts the run at this machine's overlap threshold. No shape
        # tried here is clearly below it: a torch block's passes over k, v in memory take
        # about as long as sending them over loopback (8 x 64 x 256: 1.5 ms compute, 0.9 ms
        # for the 1 MB message; 16 x 256 x 256: 8.4 and 5.3 ms; 8 x 256 x 1024: 12 and 11 ms)
        shape = (SMALL_HEADS, SMALL_HEAD_DIM) if c <= SMALL_BLOCK else (heads, head_dim)
        for layout in ("contiguous", "zigzag"):
            for causal in (False, True):
                t0 = time.perf_counter()
                # a pass of a few ms scatters more, relative to its length, than a long one:
                # more repeats, so the median and its interval settle
                reps = 2 * repeats if c <= SMALL_BLOCK else repeats
                run_shape = RingShape(
                    hosts=2,
                    seq_len=2 * c,
                    heads=shape[0],
                    head_dim=shape[1],
                    layout=layout,
                    causal=causal,
                )
                given = None if fresh else cal
                report = measure(run_shape, MeasureOptions(repeats=reps), given).to_json()
                report["calibration"] = "paired" if fresh else "shared"
                report["profile"] = report["profile"]["source"]
                report["wall_s"] = time.perf_counter() - t0
                runs.append(report)
                print(
                    f"c={c:5d} {layout:10s} causal={causal!s:5s} measured "
                    f"{report['measured_time_s'] * 1e3:8.2f} ms predicted "
                    f"{report['predicted_time_s'] * 1e3:8.2f} ms ratio {report['ratio']:.2f} "
                    f"[{report['ratio_ci95'][0]:.2f}, {report['ratio_ci95'][1]:.2f}] "
                    f"({report['regime']})",
                    flush=True,
                )
    speedups = []
    for c in block_sizes:
        pick = {r["layout"]: r for r in runs if r["block_tokens"] == c and r["causal"] is True}
        measured = pick["contiguous"]["measured_time_s"] / pick["zigzag"]["measured_time_s"]
        predicted = pick["contiguous"]["predicted_time_s"] / pick["zigzag"]["predicted_time_s"]
        speedups.append(
            {
                "block_tokens": c,
                "measured": measured,
                "predicted": predicted,
                "ratio": measured / predicted,
            }
        )
        print(
            f"c={c:5d} zigzag/contiguous causal speedup: measured {measured:.2f}, "
            f"predicted {predicted:.2f}"
        )
    table = {
        "date": today,
        "machine": {
            "node": platform.node(),
            "processor": platform.processor(),
            "cpus": os.cpu_count(),
            "torch": torch.__version__,
            "load_average_at_start": load_at_start,
        },
        "ranks": 2,
        "backend": "gloo",
        "threads_per_rank": 1,
        "heads": heads,
        "head_dim": head_dim,
        "dtype": "fp32",
        "calibration": {
            **cal.summary(),
            "compute": cal.compute,
            "exchange": cal.exchange,
            "masked": cal.masked,
            "solo": cal.solo,
            "overlap": cal.overlap,
            "ring_pass": cal.ring_pass,
        },
        "profile": cal.hardware().source,
        "runs": runs,
        "speedups": speedups,
        "targets": {
            "ratio_within_0.9_1.1": sum(0.9 <= r["ratio"] <= 1.1 for r in runs),
            "interval_overlaps_0.9_1.1": sum(
                r["ratio_ci95"][0] <= 1.1 and r["ratio_ci95"][1] >= 0.9 for r in runs
            ),
            "runs": len(runs),
            "speedup_within_10pct": sum(abs(s["ratio"] - 1) <= 0.1 for s in speedups),
            "speedups": len(speedups),
        },
        "load_average_at_end": os.getloadavg(),
    }
    out.write_text(json.dumps(table, indent=2) + "\n")
    print("wrote", out)
    return table


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small blocks, few repeats")
    parser.add_argument(
        "--blocks", default="8,1024", help=f"tokens per host (<= {SMALL_BLOCK}: 64 heads of 256)"
    )
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=12)
    parser.add_argument("--out", default=None)
    parser.add_argument("--no-profile", action="store_true", help="do not write the profile")
    parser.add_argument(
        "--shared-calibration", action="store_true", help="calibrate once, not before each run"
    )
    args = parser.parse_args(argv)
    blocks = [int(x) for x in args.blocks.split(",")]
    repeats = args.repeats
    if args.quick:
        blocks, repeats = [8, 256], 3
    out = Path(args.out) if args.out else RESULTS / f"cpu-{date.today().isoformat()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    run(
        blocks,
        heads=args.heads,
        head_dim=args.head_dim,
        repeats=repeats,
        out=out,
        save_profile=not args.no_profile,
        fresh=not args.shared_calibration,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
