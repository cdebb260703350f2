"""``ringsim memory``: bytes per host and the longest context that fits, per method."""

from __future__ import annotations

import argparse

from ringsim.cli.args import DTYPES, add_hardware_flags, resolve_hardware
from ringsim.cli.output import format_bytes, format_length, print_json, print_table
from ringsim.timer.step.frameworks import FRAMEWORKS
from ringsim.values import arg_type, parse_positive_int

FRAMEWORK_NAMES = tuple(FRAMEWORKS)

HELP = "bytes per host and the longest context that fits, per method"
EXAMPLES = """examples:
  ringsim memory --model 7b --hardware a100-nvlink --hosts 8
  ringsim memory --model 13b --hardware tpu-v4 --hosts 1024 --json
  ringsim memory --model llama3-70b --hardware h100-nvlink --hosts 64 --framework none
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    positive = lambda name: arg_type(parse_positive_int, name)
    p.add_argument(
        "--model",
        required=True,
        help="3b, 7b, 13b, 30b, 65b (LLaMA), llama3-8b, llama3-70b, llama3-405b (GQA)",
    )
    p.add_argument(
        "--framework",
        choices=FRAMEWORK_NAMES,
        metavar="NAME",
        help="what the framework takes first (default: pytorch on a GPU, none on TPU/CPU; "
        f"none = the pure tensor bound): {', '.join(FRAMEWORK_NAMES)}",
    )
    p.add_argument("--hosts", type=positive("hosts"), required=True, help="hosts")
    p.add_argument("--dtype", choices=DTYPES, default="bf16", help="element type (bf16)")
    p.add_argument("--batch", type=positive("batch"), default=1, help="sequences (1)")
    add_hardware_flags(p, rates=False)
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ringsim.timer.step.memory import memory_report

    hardware = resolve_hardware(args)
    report = memory_report(
        args.model,
        hardware,
        args.hosts,
        dtype=args.dtype,
        batch=args.batch,
        framework=args.framework,
    )
    if args.json:
        print_json(report)
        return 0
    title = (
        f"longest context per method: {report['model']} on {args.hosts} x {report['hardware']} "
        f"({format_bytes(report['device_bytes'])} each), {args.dtype}"
    )
    contexts, tensors = report["max_context"], report["max_context_tensors"]
    print_table(
        title,
        ("method", f"max context ({report['framework']})", "exact", "pure tensor bound"),
        [(m, format_length(n), f"{n:,}", format_length(tensors[m])) for m, n in contexts.items()],
    )
    print(
        f"framework {report['framework']}: {format_bytes(report['usable_bytes'])} of "
        f"{format_bytes(report['device_bytes'])} usable ({report['framework_source']})"
    )
    print(
        "each method is a run of the planner's memory model (`ringsim plan` counts the same "
        "bytes for the same run): FSDP over all hosts (16 bytes per parameter sharded), full "
        "recompute, no tensor parallelism; BPT and the ring compute the FFN and the loss in "
        "chunks"
    )
    print()
    parts = report["bytes_per_host"]
    block = report.get("block_tokens", 0)
    print_table(
        f"ring at its longest context ({format_length(block)} tokens per host): bytes per host",
        ("component", "bytes"),
        [(k, format_bytes(v)) for k, v in parts.items()]
        + [("total", format_bytes(sum(parts.values())))],
    )
    return 0
