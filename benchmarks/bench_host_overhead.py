"""Host time per ring step of a Python ring loop: this project's torch ring on tiny tensors.

    .venv/bin/python benchmarks/bench_host_overhead.py [--hosts 2] [--repeats 40] [--out F]

Runs ``kernels.distributed.ring`` (gloo, local processes) on blocks of a few tokens, so the
attention itself costs nothing and what a step takes is the Python loop around it: posting
the transfers, the block call and the merge (each a handful of PyTorch ops), the bookkeeping.
Per step and rank: the time from one step's start to the next one's, minus the time blocked
in waits. Prints the median and the 10th/90th percentiles over every forward and backward
step of the timed repeats.

Why it transfers to a GPU ring: the same loop (PyTorch dispatch of ~10 ops a step, a
``batch_isend_irecv``, Python around them) runs on the host whatever device holds the
tensors; on a GPU each op adds its asynchronous kernel launch (``KernelFamily.launch_s``),
so this is the floor of a GPU ring's host time per step, not its ceiling.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from kernels.distributed.launch import RunConfig, launch, run_ring


def host_seconds(timeline: dict) -> np.ndarray:
    """One rank's host time of each step that has a next one: from its block call's start to
    the next step's, minus the time blocked in its wait (steps without a call are left out)."""
    starts = np.asarray(timeline["compute_start"], float)
    wait = np.nan_to_num(np.asarray(timeline["wait"], float))
    return np.diff(starts) - wait[:-1]


def measure(hosts: int, repeats: int) -> dict:
    config = RunConfig(
        seq_len=8 * hosts,
        heads=1,
        head_dim=8,
        layout="zigzag",
        causal=True,
        repeats=repeats,
        warmup=5,
        return_tensors=False,
        block_backend="torch",
    )
    results = launch(run_ring, hosts, args=(config,))
    forward = np.concatenate([host_seconds(t) for r in results for t in r["forward_timelines"]])
    backward = np.concatenate([host_seconds(r["backward_timeline"]) for r in results])
    out = {}
    for name, values in (("forward", forward), ("backward", backward)):
        values = values[np.isfinite(values)]
        p10, p50, p90 = np.percentile(values, [10, 50, 90])
        out[name] = {"median_s": p50, "p10_s": p10, "p90_s": p90, "steps": int(values.size)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--out", help="write the numbers as JSON here")
    args = parser.parse_args()
    result = measure(args.hosts, args.repeats)
    for name, r in result.items():
        print(
            f"{name:8s} host time per step: median {r['median_s'] * 1e6:.0f} us "
            f"(p10 {r['p10_s'] * 1e6:.0f}, p90 {r['p90_s'] * 1e6:.0f}; {r['steps']} steps)"
        )
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(result, fh, indent=2)


if __name__ == "__main__":
    main()
