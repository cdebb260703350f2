"""``ringsim plan``: how to spread a training step of a model over a cluster (tensor x context x
pipeline x data parallelism, strategy, layout, recompute), ranked by predicted step time among
the configurations that fit in memory."""

from __future__ import annotations

import argparse

from ringsim.cli.args import (
    DTYPES,
    add_cluster_flags,
    add_hardware_flags,
    document_lengths,
    resolve_cluster,
    resolve_hardware,
)
from ringsim.cli.checks import times_out_of_range
from ringsim.cli.output import (
    Ticker,
    format_bytes,
    format_seconds,
    note,
    print_json,
    print_table,
)
from ringsim.cli.values import parse_implementation
from ringsim.timer.step.frameworks import FRAMEWORKS
from ringsim.values import (
    arg_type,
    parse_length,
    parse_positive_int,
    parse_positive_ints,
    parse_seq_len,
)

HELP = "rank ways to spread a training step (TP x CP x PP x DP) for a model, a length, a cluster"
EXAMPLES = """examples:
  ringsim plan --model 7b --seq-len 1M --cluster dgx-h100 --hosts 64
  ringsim plan --model llama3-8b --seq-len 128K --cluster dgx-h100 --nodes 16 \\
      --global-batch 64 --implementation fa3 --json
  ringsim plan --model llama3-405b --seq-len 128K --cluster dgx-h100 --nodes 2048 \\
      --global-batch 128 --pp 16 --virtual-stages 8 --framework llama3
  ringsim plan --model 7b --seq-len 128K --cluster dgx-h100 --hosts 128 --global-batch 32 \\
      --gemm-dtype fp8 --framework nemo-24.03 --recompute none --recompute full
  ringsim plan --model 7b --seq-len 128K --cluster pcie-8x-l20 --hosts 8 --prefill --plot plan.png
"""

FRAMEWORK_NAMES = tuple(FRAMEWORKS)
CHOICES = {
    "recompute": ("none", "selective", "full", "every-other-layer", "per-op"),
    "sharding": ("zero1", "zero3"),
    "gemm_dtype": ("bf16", "fp8"),
    "flops_convention": ("megatron", "causal"),
}


def _parse_tokens(name: str, text: str) -> int:
    try:
        return parse_length(text)
    except ValueError as err:
        raise ValueError(f"{name}: {err}") from None


def _parse_keep(name: str, text: str) -> int | str:
    """``--keep``: a positive integer, or ``all``."""
    return "all" if text.strip() == "all" else parse_positive_int(name, text)


def keep_for(args: argparse.Namespace) -> int | None:
    """How many of the best ``plan`` must know exactly (``None``: time every one that fits):
    ``--keep``, else every one for a ``--plot`` (it draws them all), else the ``--top`` rows
    shown, each with its layout twins (``Plan.groups``: up to one per layout)."""
    from ringsim.layouts import layout_names

    if args.keep == "all" or (args.keep is None and args.plot):
        return None
    return args.keep if args.keep is not None else args.top * len(layout_names())


def add_arguments(p: argparse.ArgumentParser) -> None:
    positive = lambda name: arg_type(parse_positive_int, name)
    p.add_argument("--model", required=True, help="a model of `ringsim memory` (e.g. 7b)")
    p.add_argument("--seq-len", required=True, help="tokens, K/M suffixes (powers of two)")
    p.add_argument("--hosts", type=positive("hosts"), help="devices (default: all --nodes)")
    p.add_argument(
        "--documents",
        metavar="LENGTHS",
        help="packed documents of every sequence: their lengths, comma-separated (K/M), "
        "summing to it (adds Llama 3's all-gather per document and the per-document layout)",
    )
    p.add_argument(
        "--dtype", choices=DTYPES, help="attention's element type (bf16; a profile's own)"
    )
    batch = p.add_mutually_exclusive_group()
    batch.add_argument(
        "--global-batch",
        type=positive("global_batch"),
        metavar="B",
        help="sequences per step; data parallelism must divide it (default: 4M tokens per "
        "step, NVIDIA's long-sequence runs)",
    )
    batch.add_argument(
        "--tokens-per-step",
        type=arg_type(_parse_tokens, "tokens_per_step"),
        metavar="T",
        help="tokens per step, K/M suffixes (a multiple of --seq-len)",
    )
    p.add_argument("--batch", type=positive("batch"), help=argparse.SUPPRESS)  # the old name
    p.add_argument(
        "--causal",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="causal mask (default on: a language model)",
    )
    p.add_argument("--prefill", action="store_true", help="rank by one forward (inference prefill)")
    p.add_argument(
        "--implementation",
        type=arg_type(parse_implementation, "implementation"),
        metavar="NAME",
        help="attention kernel family (fa2, fa3, cudnn, triton) at published GEMM, attention "
        "and NCCL rates; default: the framework's, else the hardware's (fa2 on A100 and H100, "
        "PyTorch's SDPA default); ideal = the paper's peak-rate model, only when named",
    )
    p.add_argument(
        "--framework",
        choices=FRAMEWORK_NAMES,
        metavar="NAME",
        help="search only what this framework runs, with its attention code and overheads: "
        + ", ".join(FRAMEWORK_NAMES),
    )
    p.add_argument("--tp", type=positive("tp"), help="only this tensor-parallel degree")
    p.add_argument(
        "--pp",
        type=arg_type(parse_positive_ints, "pp"),
        metavar="P[,P...]",
        help="only these pipeline degrees (default: every one the layers allow)",
    )
    p.add_argument(
        "--virtual-stages",
        type=arg_type(parse_positive_ints, "virtual_stages"),
        metavar="V[,V...]",
        help="only these model chunks per pipeline rank, interleaved 1F1B (default: every "
        "count Megatron-LM cuts the layers into)",
    )
    p.add_argument(
        "--recompute",
        action="append",
        choices=CHOICES["recompute"],
        help="only these activation recompute flavours (repeatable; default: the framework's, "
        "else none, selective, full)",
    )
    p.add_argument(
        "--sharding",
        choices=CHOICES["sharding"],
        help="optimizer sharding (default: the framework's, else zero1)",
    )
    p.add_argument(
        "--gemm-dtype", choices=CHOICES["gemm_dtype"], default="bf16", help="GEMM precision"
    )
    p.add_argument(
        "--flops-convention",
        choices=CHOICES["flops_convention"],
        help="model FLOPs: megatron (attention without the causal mask) or causal (default: "
        "the framework's, else megatron)",
    )
    p.add_argument("--top", type=positive("top"), default=10, help="candidates shown (10)")
    p.add_argument(
        "--keep",
        type=arg_type(_parse_keep, "keep"),
        metavar="K|all",
        help="time only what it takes to know the best K exactly; the rest are shown to be "
        "slower by a lower bound (default: enough for the --top rows shown, all with --plot; "
        "all: time every configuration that fits)",
    )
    add_hardware_flags(p)
    add_cluster_flags(p, strategy=False)
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("--plot", metavar="FILE", help="write time against memory, every candidate")
    p.set_defaults(run=run)


def global_batch(args: argparse.Namespace, seq_len: int) -> int:
    """Sequences per step from --global-batch, --tokens-per-step or the old --batch (default:
    ``DEFAULT_TOKENS_PER_STEP`` tokens, ``ringsim.timer.studies.planner``)."""
    from ringsim.timer.studies.planner import default_global_batch

    if args.batch is not None and (args.global_batch or args.tokens_per_step):
        raise ValueError("batch: give --global-batch or --tokens-per-step, not --batch too")
    if args.tokens_per_step is not None:
        if args.tokens_per_step % seq_len:
            raise ValueError(
                f"tokens_per_step must be a multiple of seq_len={seq_len}, got "
                f"--tokens-per-step {args.tokens_per_step}"
            )
        return args.tokens_per_step // seq_len
    return args.global_batch or args.batch or default_global_batch(seq_len)


def check_plan_flags(args: argparse.Namespace) -> None:
    """Refuse a flag that would change nothing: ``--recompute`` in a prefill (a forward keeps
    nothing for a backward), ``--virtual-stages`` without pipeline stages to interleave."""
    if args.prefill and args.recompute:
        raise ValueError(
            "--recompute chooses what a training step's backward recomputes; --prefill runs one "
            "forward pass and recomputes nothing: drop --recompute"
        )
    if args.virtual_stages and min(args.virtual_stages) > 1 and args.pp == (1,):
        shown = ",".join(map(str, args.virtual_stages))
        raise ValueError(
            f"--virtual-stages {shown} interleaves pipeline stages: it needs --pp 2 or more, "
            f"got --pp 1"
        )


def run(args: argparse.Namespace) -> int:
    from ringsim.timer.engine.result import TimesOutOfRange
    from ringsim.timer.machine.families import get_family
    from ringsim.timer.machine.topology import Cluster
    from ringsim.timer.step.models import get_model
    from ringsim.timer.studies.planner import DEFAULT_TOKENS_SOURCE, plan

    check_plan_flags(args)
    model = get_model(args.model)
    seq_len = parse_seq_len(args.seq_len)
    batch = global_batch(args, seq_len)
    hardware = resolve_hardware(args)
    cluster = resolve_cluster(args, hardware)
    if cluster is None:  # one node holding every host, on the hardware's link
        if args.hosts is None:
            raise ValueError("hosts: give --hosts P (or --cluster with --nodes)")
        cluster = Cluster.switch(hardware, args.hosts)
    if args.hosts is None and cluster.nodes is None:
        raise ValueError("hosts: give --hosts P or --nodes N")
    if args.implementation is not None:  # else the framework's or the hardware's default
        family = get_family(args.implementation)
        family.check_runs_on(cluster.hardware, label=f"--implementation {family.name}")
    documents = document_lengths(args.documents, seq_len)
    try:
        with Ticker("ringsim plan") as ticker:
            result = plan(
                model,
                seq_len,
                cluster,
                args.hosts,
                mode="prefill" if args.prefill else "train",
                causal=args.causal,
                dtype=args.dtype,
                global_batch=batch,
                implementation=args.implementation,
                framework=args.framework,
                tp=args.tp,
                pp=args.pp,
                virtual_stages=args.virtual_stages,
                recompute=tuple(args.recompute) if args.recompute else None,
                sharding=args.sharding,
                gemm_dtype=args.gemm_dtype,
                flops_convention=args.flops_convention,
                keep=keep_for(args),
                intervals=args.top,
                progress=ticker,
                documents=documents,
            )
    except TimesOutOfRange as err:
        raise times_out_of_range(str(err), args) from None
    if args.plot:
        from ringsim.views.planning import plot_plan

        plot_plan(result, args.plot)
        note(f"wrote {args.plot}")
    defaulted = not (args.global_batch or args.tokens_per_step or args.batch)
    if args.json:
        out = result.as_dict()
        out["global_batch_source"] = DEFAULT_TOKENS_SOURCE if defaulted else "given"
        print_json(out)
        return 0
    print_plan(result, args.top, batch_source=DEFAULT_TOKENS_SOURCE if defaulted else None)
    return 0


def print_plan(result, top: int, *, batch_source: str | None = None) -> None:
    unit = "step" if result.mode == "train" else "forward"
    train = result.mode == "train"
    ideal = result.ideal
    title = (
        f"{result.model}, {result.seq_len:,} tokens x {result.global_batch} per {unit}, "
        f"{result.hosts} devices: {result.cluster.describe()}; framework {result.framework}, "
        f"attention {result.implementation} ({_fit(result)}, {len(result.dropped):,} do not; "
        f"{result.seconds:.1f} s)"
    )
    groups = result.groups(top)
    header = ["#", "configuration", f"time/{unit}", "interval", "exposed comm", "memory"]
    if train:
        header += ["TFLOPS/GPU", "MFU"]
    rows = []
    for i, (c, layouts) in enumerate(groups):
        label = c.label
        if len(layouts) > 1:
            label = label.replace(c.layout, "|".join(layouts), 1)
        row = [
            str(i + 1),
            label,
            format_seconds(c.step_time_s),
            _interval(c),
            format_seconds(c.exposed_comm_s),
            format_bytes(c.bytes_per_host),
        ]
        if train:
            row += [f"{c.model_tflops_per_gpu:.0f}", f"{c.mfu:.0%}" + ("*" if c.mfu > 1 else "")]
        rows.append(tuple(row))
    print_table(title, tuple(header), rows)
    print()
    for i, (c, _) in enumerate(groups):
        print(f"{i + 1}. {c.label}: {c.why()}")
    print(f"attention kernel: {result.implementation} ({result.implementation_source})")
    if ideal:
        print(
            "ideal: the Ring Attention paper's peak-rate model (every kernel at the datasheet "
            "peak, perfect overlap), a bound, not a prediction of a real run; no interval"
        )
    else:
        families = ", ".join(result.interval_families)
        print(
            f"interval: over the kernel families {families}, the sustained clock, the GEMM "
            "library, the achieved send/recv bandwidth and host time per call, and never "
            "narrower than validate's whole-step misses"
        )
    if batch_source:
        print(f"batch: {batch_source}")
    windows = result.as_dict()
    if result.documents:
        lengths = ", ".join(f"{n:,}" for n in result.documents)
        print(
            f"documents: {len(result.documents)} packed in every sequence ({lengths} tokens); "
            "Ulysses and its hybrids take none, so only rings, all-gathers and Llama 3's "
            "all-gather per document run"
        )
    if "window_layers" in windows:
        print(
            f"sliding window: {windows['window_layers']} of {len(result.layer_windows)} layers "
            f"attend the {windows['sliding_window']:,} latest tokens, timed with the windowed "
            "attention (the others with full attention); memory as without the window (every "
            "strategy still holds the blocks it holds without one)"
        )
    if train:
        counted = {"megatron": "attention without the causal mask", "causal": "causal attention"}
        note_ = (
            f"model TFLOPS per GPU in the {result.flops_convention} convention "
            f"({counted[result.flops_convention]}); MFU over the bf16 dense peak"
        )
        if any(c.mfu > 1 for c, _ in groups):
            note_ += (
                "; * over 100%: no GPU runs above its peak; the count includes the masked half "
                "of the scores" + (" and the ideal model runs at peak" if ideal else "")
            )
        print(note_)
    print(
        f"time/{unit} counts the whole {unit} on one GPU's critical path: every layer's GEMMs, "
        "attention, elementwise kernels and collectives, the bubble, the optimizer; `ringsim "
        "simulate` times one attention layer's pass, which the JSON gives per candidate "
        "(attention_layer_s: one layer, one micro-batch, the strategy's heads per GPU)"
    )
    worst = result.candidates[-1]
    slowest = "slowest timed" if result.bounded else "slowest that fits"
    print(f"{slowest}: {worst.label}, {format_seconds(worst.step_time_s)}")
    if result.bounded:
        print(
            f"{len(result.bounded):,} more fit but were not timed: a lower bound of each step "
            f"exceeds the best {len(result.candidates):,} timed (--keep all times every one)"
        )
    if result.dropped:
        lean = min(result.dropped, key=lambda c: c.bytes_per_host)
        print(
            f"{len(result.dropped):,} do not fit (not ranked); the leanest of them, {lean.label}, "
            f"needs {format_bytes(lean.bytes_per_host)} of {format_bytes(lean.usable_bytes)} usable"
        )


def _fit(result) -> str:
    """``N fit``, and how many of them were timed when a bound spared the rest."""
    if not result.bounded:
        return f"{len(result.candidates)} fit"
    fit = len(result.candidates) + len(result.bounded)
    return f"{fit:,} fit, {len(result.candidates):,} timed"


def _interval(c) -> str:
    if c.interval is None or c.interval[0] == c.interval[1]:
        return "-"
    low, high = c.interval
    return f"{format_seconds(low)}-{format_seconds(high)}"
