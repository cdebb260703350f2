"""``ringsim plan``: which strategy, degrees, placement and layout for a model, a sequence
length and a cluster, ranked by predicted step time among those that fit in memory."""

from __future__ import annotations

import argparse

from ringsim.cli.args import (
    DTYPES,
    add_cluster_flags,
    add_hardware_flags,
    resolve_cluster,
    resolve_hardware,
)
from ringsim.cli.output import format_bytes, format_seconds, note, print_json, print_table
from ringsim.values import arg_type, parse_positive_int, parse_seq_len

HELP = "rank sequence-parallel strategies for a model, a length and a cluster"
EXAMPLES = """examples:
  ringsim plan --model 7b --seq-len 1M --cluster dgx-h100 --hosts 64
  ringsim plan --model 13b --seq-len 256K --hosts 16 --hardware a100-nvlink \\
      --gpus-per-node 8 --inter-bandwidth 25G --inter-latency 5e-6 --json
  ringsim plan --model 7b --seq-len 128K --cluster pcie-8x-l20 --hosts 8 --prefill --plot plan.png
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    positive = lambda name: arg_type(parse_positive_int, name)
    p.add_argument("--model", required=True, help="a model of `ringsim memory` (e.g. 7b)")
    p.add_argument("--seq-len", required=True, help="tokens, K/M suffixes (powers of two)")
    p.add_argument("--hosts", type=positive("hosts"), help="devices (default: all --nodes)")
    p.add_argument(
        "--dtype", choices=DTYPES, help="element type (bf16; a calibrated profile's own)"
    )
    p.add_argument("--batch", type=positive("batch"), default=1, help="sequences (1)")
    p.add_argument(
        "--causal",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="causal mask (default on: a language model)",
    )
    p.add_argument("--prefill", action="store_true", help="rank by one forward (inference prefill)")
    p.add_argument(
        "--implementation", default="ideal", help="timer model: ideal (default) or a named one"
    )
    p.add_argument("--top", type=positive("top"), default=5, help="candidates shown (5)")
    add_hardware_flags(p)
    add_cluster_flags(p, strategy=False)
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("--plot", metavar="FILE", help="write time against memory, every candidate")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ringsim.timer.machine.topology import Cluster
    from ringsim.timer.step.models import get_model
    from ringsim.timer.studies.planner import plan

    model = get_model(args.model)
    seq_len = parse_seq_len(args.seq_len)
    hardware = resolve_hardware(args)
    cluster = resolve_cluster(args, hardware)
    if cluster is None:  # one node holding every host, on the hardware's link
        if args.hosts is None:
            raise ValueError("hosts: give --hosts P (or --cluster with --nodes)")
        cluster = Cluster.switch(hardware, args.hosts)
    if args.hosts is None and cluster.nodes is None:
        raise ValueError("hosts: give --hosts P or --nodes N")
    result = plan(
        model,
        seq_len,
        cluster,
        args.hosts,
        mode="prefill" if args.prefill else "train",
        causal=args.causal,
        dtype=args.dtype,
        batch=args.batch,
        implementation=args.implementation,
    )
    if args.plot:
        from ringsim.views.planning import plot_plan

        plot_plan(result, args.plot)
        note(f"wrote {args.plot}")
    if args.json:
        print_json(result.as_dict())
        return 0
    unit = "step" if result.mode == "train" else "forward"
    title = (
        f"{model.name}, {seq_len:,} tokens, {result.hosts} devices: "
        f"{result.cluster.describe()} ({len(result.candidates)} fit, "
        f"{len(result.dropped)} do not; {result.seconds:.1f} s)"
    )
    rows = [
        (
            str(i + 1),
            c.label,
            format_seconds(c.step_time_s),
            format_seconds(c.exposed_comm_s),
            format_bytes(c.bytes_per_host),
        )
        for i, c in enumerate(result.candidates[: args.top])
    ]
    print_table(title, ("#", "candidate", f"time/{unit}", "exposed comm", "memory"), rows)
    print()
    for i, c in enumerate(result.candidates[: args.top]):
        print(f"{i + 1}. {c.label}: {c.why()}")
    worst = result.candidates[-1]
    print(f"slowest that fits: {worst.label}, {format_seconds(worst.step_time_s)}")
    return 0
