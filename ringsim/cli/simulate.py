"""``ringsim simulate``: time one run and print its summary (table or JSON), timeline and trace."""

from __future__ import annotations

import argparse

import numpy as np

from ringsim.cli.args import (
    DEFAULT_STRATEGY,
    STRATEGIES,
    add_cluster_flags,
    add_hardware_flags,
    add_implementation_flags,
    add_model_flags,
    add_noise_flags,
    add_window_flag,
    document_lengths,
    ring_config,
    run_config,
)
from ringsim.cli.output import describe, human, note, print_json, print_table
from ringsim.layouts import LAYOUTS, get_layout, pad_documents, segment_ids_of
from ringsim.masks import offset_bounds, pairs_within
from ringsim.values import arg_type, parse_positive_int, parse_seq_len

HELP = "time one ring run: makespan, idle, exposed communication"
EXAMPLES = """examples:
  ringsim simulate --hosts 8 --seq-len 64K --causal --layout zigzag
  ringsim simulate --hosts 8 --seq-len 64K --causal --layout contiguous --plot timeline.png
  ringsim simulate --hosts 32 --seq-len 1M --hardware a100-ib --pass backward --json
  ringsim simulate --hosts 8 --seq-len 8K --flops 312T --bandwidth 25G --latency 5e-6
  ringsim simulate --hosts 8 --seq-len 64K --straggler 3:1.5 --trace ring.json
  ringsim simulate --hosts 8 --seq-len 64K --strategy ulysses --heads 32 --kv-heads 8
  ringsim simulate --hosts 32 --seq-len 256K --causal --layout zigzag --kv-heads 8 \
      --cluster dgx-h100 --strategy hybrid --ulysses-degree 8
  ringsim simulate --hosts 16 --seq-len 128K --strategy double-ring --gpus-per-node 8 \
      --inter-bandwidth 25G --inter-latency 5e-6
  ringsim simulate --hosts 8 --seq-len 64K --causal --layout zigzag --kv-heads 8 \
      --hardware h100-nvlink --implementation fa2 --tile 128x64
  ringsim simulate --hosts 4 --seq-len 64K --causal --layout per-document \
      --documents 32K,16K,8K,8K
  ringsim simulate --hosts 8 --seq-len 64K --causal --sliding-window 4K --schedule
  ringsim simulate --hosts 8 --seq-len 64K --causal --hardware a100-nvlink --pass train-step \
      --attention-rate tf32 --recompute
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    positive = lambda name: arg_type(parse_positive_int, name)
    p.add_argument("--hosts", type=positive("hosts"), required=True, help="hosts in the ring")
    p.add_argument("--seq-len", required=True, help="tokens, K/M suffixes (powers of two)")
    p.add_argument("--layout", choices=LAYOUTS, default="contiguous", help="token split")
    p.add_argument(
        "--documents",
        metavar="LENGTHS",
        help="packed documents: their lengths, comma-separated (K/M), summing to the sequence",
    )
    p.add_argument(
        "--pad-documents",
        action="store_true",
        help="per-document layout: pad each document at its end to a multiple of 2 x hosts "
        "(as Megatron-style trainers do) and report what the padding costs",
    )
    p.add_argument("--causal", action="store_true", help="causal mask")
    add_window_flag(p)
    p.add_argument("--no-overlap", action="store_true", help="compute and transfer alternate")
    p.add_argument(
        "--strategy", choices=STRATEGIES, default=DEFAULT_STRATEGY, help="how hosts share work"
    )
    add_model_flags(p)
    add_implementation_flags(p)
    add_hardware_flags(p)
    add_cluster_flags(p)
    add_noise_flags(p)
    p.add_argument(
        "--interval",
        action="store_true",
        help="also time the run with every parameter known only as a range (achieved send/recv "
        "bandwidth, host time per call, a lone thread block's speed) at its fast and its slow "
        "end: the makespan's interval (a real --implementation; three runs)",
    )
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--trace", metavar="FILE", help="write a Chrome trace (Perfetto) JSON")
    p.add_argument("--plot", metavar="FILE", help="write the timeline figure (PNG/SVG/PDF)")
    p.add_argument("--schedule", action="store_true", help="also print the ring schedule")
    p.set_defaults(run=run)


SUMMARY_NAMES = {
    "total_time_s": "makespan",
    "total_time_interval_s": "makespan over the ranges",
    "ranges": "parameters known as ranges",
    "compute_time_s": "compute (busiest host)",
    "exposed_comm_s": "exposed communication",
    "comm_time_s": "link busy time",
    "idle_fraction": "idle fraction",
    "min_block_for_overlap": "overlap threshold c",
    "min_seq_per_host_tokens": "minimum sequence / host 6c (paper)",
    "memory_per_host_bytes": "attention memory / host",
    "flops_total": "FLOPs (all hosts)",
    "block_tokens": "block",
    "seq_len": "sequence",
    "sliding_window": "sliding window (tokens)",
    "padding_tokens": "padding (tokens)",
    "unpadded_seq_len": "sequence before padding",
    "padding_time_s": "padding's share of the makespan",
    "ring_steps": "ring steps run (of hosts)",
}


def run(args: argparse.Namespace) -> int:
    seq_len = parse_seq_len(args.seq_len)
    if get_layout(args.layout).needs_documents and args.documents is None:
        raise ValueError(f"--layout {args.layout} needs --documents (the documents' lengths)")
    lengths = document_lengths(args.documents, seq_len)
    documents = None if lengths is None else segment_ids_of(lengths)
    padding = None
    if args.pad_documents:
        padding, documents, seq_len = _padded(args, documents)
    config = ring_config(args, hosts=args.hosts, seq_len=seq_len, segment_ids=documents)
    if args.interval:
        _check_interval(config)
    # the (steps, hosts) timeline only for a figure or a trace: a summary needs O(hosts)
    keep = bool(args.plot or args.trace)
    result = run_config(config, args.strategy, keep_timeline=keep, args=args)
    summary = result.summary()
    _add_paper_minimum(summary)
    if padding is not None:
        summary.update(padding_cost(padding, config, summary["total_time_s"]))
    if not config.family.ideal:
        summary["implementation"] = config.family.name
    if args.interval:
        _add_interval(summary, config, args)
    if args.trace:
        from ringsim.views.trace import write_chrome_trace

        write_chrome_trace(result.timeline, args.trace)
        note(f"wrote Chrome trace {args.trace} (open in https://ui.perfetto.dev)")
    if args.plot:
        from ringsim.views.plots import plot_timeline

        plot_timeline(result.timeline, args.plot, title=describe(config, args.strategy))
        note(f"wrote timeline {args.plot}")
    if args.json:
        print_json(summary)
        return 0
    shown = {k: v for k, v in summary.items() if k not in CONFIG_KEYS}
    rows = [(SUMMARY_NAMES.get(k, k), _human(k, v), k) for k, v in shown.items()]
    print_table(describe(config, args.strategy), ("quantity", "value", "JSON key"), rows)
    if args.schedule and result.schedule is not None:
        print()
        print(result.schedule.describe())
    return 0


def _human(key: str, value) -> str:
    if key == "total_time_interval_s":
        return " - ".join(human("total_time_s", v) for v in value)
    if key == "ranges":
        return ", ".join(value) or "none"
    if key in ("min_block_for_overlap", "min_seq_per_host_tokens") and value is not None:
        if value <= (1 if key == "min_block_for_overlap" else 6):  # see min_block_for_overlap
            return "none: every block hides its transfer"
    return human(key, value)


def _check_interval(config) -> None:
    """Refuse ``--interval`` where it would change nothing: a run with no parameter known only
    as a range (``live_ranges``: none under ``ideal``) has an interval of one point."""
    from ringsim.timer.engine.interval import live_ranges

    if not live_ranges(config):
        raise ValueError(
            f"--interval spans the parameters a run knows only as ranges, and this one has none "
            f"(--implementation {config.family.name}: both ends would be the makespan); give a "
            f"real kernel family (--implementation fa2, fa3, cudnn, triton) or drop --interval"
        )


def _add_interval(summary: dict, config, args: argparse.Namespace) -> None:
    """``total_time_interval_s`` ``[fast, slow]`` and the ``ranges`` it spans (none under
    ``ideal``: both ends are the makespan)."""
    from ringsim.timer.engine.interval import config_interval

    span = config_interval(
        lambda c: run_config(c, args.strategy, args=args).summary()["total_time_s"], config
    )
    summary["total_time_interval_s"] = [span.low, span.high]
    summary["ranges"] = list(span.ranges)


def _padded(args: argparse.Namespace, documents):
    """``(DocumentPadding, padded segment ids, padded length)`` of ``--pad-documents``."""
    if documents is None or not get_layout(args.layout).needs_documents:
        raise ValueError(
            "--pad-documents pads each document to a multiple of 2 x hosts, the per-document "
            "layout's rule: it needs --documents and --layout per-document"
        )
    padding = pad_documents(documents, args.hosts)
    return padding, padding.segment_ids, padding.segment_ids.size


def padding_cost(padding, config, makespan: float) -> dict:
    """What the padding costs: the tokens it adds, and the makespan's share of the pairs the
    mask leaves that involve a padding token (each document's pairs: a padding token is
    stored, sent and computed with as a real one; ``masks.pairs_within``)."""
    run = config.run
    bounds = offset_bounds(run.causal, run.sliding_window)
    real = np.bincount(padding.segment_ids[padding.real])
    padded = np.bincount(padding.segment_ids)
    pairs = lambda n: pairs_within(0, n, n, 1, *bounds).astype(float).sum()
    share = 1.0 - pairs(real) / pairs(padded)
    return {
        "padding_tokens": padding.added,
        "unpadded_seq_len": int(padding.real.size),
        "padding_time_s": makespan * share,
    }


def _add_paper_minimum(summary: dict) -> None:
    """The Ring Attention paper's Table 2 sets a minimum sequence per host of ``6 c`` (six
    blocks resident) beside the threshold ``c``; place it right after the threshold."""
    threshold = summary.get("min_block_for_overlap")
    if threshold is None:
        return
    items = list(summary.items())
    at = [k for k, _ in items].index("min_block_for_overlap") + 1
    items.insert(at, ("min_seq_per_host_tokens", 6 * threshold))
    summary.clear()
    summary.update(items)


CONFIG_KEYS = {  # echoed in the table's title rather than as rows
    *("hosts", "seq_len", "layout", "causal", "overlap", "pass", "hardware", "dtype"),
    *("heads", "kv_heads", "head_dim", "batch", "engine", "strategy"),
}
