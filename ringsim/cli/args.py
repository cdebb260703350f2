"""The flags the subcommands share (``add_*_flags``), turned into the library's objects:
``Hardware`` (``resolve_hardware``), ``RingConfig`` (``ring_config``), a cluster
(``resolve_cluster``) and a run (``run_config``). The values themselves are parsed in
``ringsim.values``."""

from __future__ import annotations

import argparse
import dataclasses

from ringsim.cli.values import parse_implementation, parse_model
from ringsim.grid import PLACEMENTS
from ringsim.schedule import PASSES, Pass
from ringsim.timer.cost import DTYPES
from ringsim.timer.strategies import STRATEGIES as STRATEGY_REGISTRY
from ringsim.values import (
    arg_type,
    parse_fraction,
    parse_non_negative_int,
    parse_positive_int,
    parse_quantity,
    parse_rate,
    parse_straggler,
    parse_tile,
)

STRATEGIES = tuple(STRATEGY_REGISTRY)
DEFAULT_STRATEGY = "ring"
"""``--strategy``'s default: the ring engine itself (its summary names no strategy)."""


DEFAULT_HARDWARE = "a100-nvlink"


# -- building a configuration from flags ----------------------------------------------------
def add_hardware_flags(p: argparse.ArgumentParser, *, rates: bool = True) -> None:
    p.add_argument(
        "--hardware",
        metavar="PRESET|FILE",
        help=f"hardware preset (see `ringsim presets`; default {DEFAULT_HARDWARE}), or a JSON "
        "file of a preset's fields (a profile from `ringsim calibrate` or the GPU check)",
    )
    quantity = lambda name: arg_type(parse_quantity, name)
    p.add_argument(
        "--memory-bytes", type=quantity("memory"), metavar="M", help="device memory, e.g. 80G"
    )
    if not rates:
        return
    p.add_argument("--flops", type=quantity("flops"), metavar="F", help="FLOP/s, e.g. 312T")
    p.add_argument(
        "--bandwidth", type=quantity("bandwidth"), metavar="B", help="link bytes/s, e.g. 50G"
    )
    p.add_argument(
        "--latency",
        type=arg_type(lambda n, t: parse_quantity(n, t, allow_zero=True), "latency"),
        metavar="L",
        help="seconds per message, e.g. 5e-6",
    )


class _StoreGiven(argparse.Action):
    """Store the value and remember that the flag was given (``args.given``), so that
    ``--model`` can refuse a shape flag it would override."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        namespace.given = {*getattr(namespace, "given", ()), self.dest}


MODEL_SETS = {"heads": "--heads", "kv_heads": "--kv-heads", "head_dim": "--head-dim"}


def apply_model(args: argparse.Namespace) -> None:
    """With ``--model``, set heads, kv heads, head dim, d_model and ffn from the model;
    ``ValueError`` if ``--heads``/``--kv-heads``/``--head-dim`` were given too (the model
    would silently override them)."""
    if getattr(args, "model", None) is None:
        return
    from ringsim.timer.step.models import model_fields

    fields = model_fields(args.model)
    given = [flag for dest, flag in MODEL_SETS.items() if dest in getattr(args, "given", ())]
    if given:
        mine = ", ".join(f"{flag} {fields[dest]}" for dest, flag in MODEL_SETS.items())
        raise ValueError(
            f"--model {args.model} sets {mine}; drop {' and '.join(given)} or drop --model"
        )
    for key, value in fields.items():
        setattr(args, key, value)


def add_model_flags(p: argparse.ArgumentParser) -> None:
    positive = lambda name: arg_type(parse_positive_int, name)
    p.add_argument(
        "--model",
        type=arg_type(parse_model, "model"),
        metavar="NAME",
        help="set heads, kv heads, head dim, d_model, ffn from a model (llama3-8b, llama3-70b, "
        "llama3-405b, 3b, 7b, ...; not together with --heads/--kv-heads/--head-dim)",
    )
    given = dict(action=_StoreGiven)
    p.add_argument("--heads", type=positive("heads"), default=32, help="query heads (32)", **given)
    p.add_argument(
        "--kv-heads",
        type=positive("kv_heads"),
        help="key/value heads, GQA (default: --heads)",
        **given,
    )
    p.add_argument(
        "--head-dim", type=positive("head_dim"), default=128, help="head dim (128)", **given
    )
    p.add_argument(
        "--dtype",
        choices=DTYPES,
        help="element type (bf16; a calibrated profile's own, e.g. fp32 for cpu-calibrated)",
    )
    p.add_argument("--batch", type=positive("batch"), default=1, help="sequences (1)")
    p.add_argument(
        "--pass", dest="pass_", choices=PASSES, default="forward", help="what runs (forward)"
    )
    p.add_argument(
        "--tile",
        type=arg_type(parse_tile, "tile"),
        metavar="M[xN]",
        help="kernel tile, query x key rows (e.g. 128x64; M alone: square): partial tiles "
        "cost whole",
    )


def add_implementation_flags(p: argparse.ArgumentParser) -> None:
    """A real implementation instead of the ideal ring (``ringsim.timer.machine.kernel_model``)."""
    p.add_argument(
        "--implementation",
        type=arg_type(parse_implementation, "implementation"),
        default="ideal",
        metavar="NAME",
        help="kernel family: ideal (default: the paper's model), fa2, fa3, cudnn, triton "
        "(uncalibrated on GPUs), torch (calibrated CPU profile)",
    )
    p.add_argument(
        "--overlap-efficiency",
        type=arg_type(parse_fraction, "overlap_efficiency"),
        metavar="F",
        help="how well compute and transfer overlap, in [-1, 1] (default: the hardware's, or "
        "NCCL's SM share under a real implementation)",
    )
    p.add_argument(
        "--attention-rate",
        type=arg_type(parse_rate, "attention_rate"),
        metavar="RATE",
        help="FLOP/s of attention, e.g. 156T or tf32 (default: the dtype's peak)",
    )
    p.add_argument(
        "--linear-rate",
        type=arg_type(parse_rate, "linear_rate"),
        metavar="RATE",
        help="FLOP/s of projections and MLP (train-step), e.g. fp8 or 1979T",
    )
    p.add_argument(
        "--recompute",
        action="store_true",
        help="train-step with full activation checkpointing (the forward runs again)",
    )


def add_noise_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--straggler",
        type=arg_type(lambda text: parse_straggler(text)),
        action="append",
        metavar="HOST:SLOWDOWN",
        help="host HOST is SLOWDOWN times slower (repeatable), e.g. 3:1.5",
    )
    p.add_argument(
        "--jitter",
        type=arg_type(lambda n, t: parse_quantity(n, t, allow_zero=True), "jitter"),
        default=0.0,
        help="random relative spread of each block's compute time (0)",
    )
    p.add_argument(
        "--seed",
        type=arg_type(parse_non_negative_int, "seed"),
        default=0,
        help="seed of the jitter (0)",
    )


def resolve_hardware(args: argparse.Namespace):
    """The preset, with any of --flops/--bandwidth/--latency/--memory-bytes replacing its own.
    Without --dtype, ``args.dtype`` becomes the hardware's default (``default_dtype``: bf16, or
    the only dtype a calibrated profile was measured at)."""
    from ringsim.timer.machine.hardware import default_dtype

    hw = _resolve_hardware(args)
    if getattr(args, "dtype", "") is None:
        args.dtype = default_dtype(hw)
    return hw


def _resolve_hardware(args: argparse.Namespace):
    from ringsim.timer.machine.hardware import custom_hardware, default_dtype, get_hardware

    flops = getattr(args, "flops", None)
    bandwidth = getattr(args, "bandwidth", None)
    latency = getattr(args, "latency", None)
    memory = getattr(args, "memory_bytes", None)
    cluster = getattr(args, "cluster", None)
    if cluster is not None:
        _check_cluster_links(cluster, bandwidth, latency)
    if args.hardware is None and cluster is None and (flops is not None or bandwidth is not None):
        if flops is None or bandwidth is None:
            raise ValueError(
                "a custom machine needs both --flops and --bandwidth "
                "(or --hardware PRESET to start from), got only "
                + ("--flops" if flops is not None else "--bandwidth")
            )
        extra = {} if memory is None else {"memory": memory}
        dtype = getattr(args, "dtype", None) or "bf16"
        return custom_hardware(flops, bandwidth, latency or 0.0, dtype=dtype, **extra)
    if args.hardware is None and cluster is not None:  # the preset's own device
        from ringsim.timer.machine.topology import get_cluster

        hw = get_cluster(cluster).hardware
    else:
        hw = get_hardware(args.hardware or DEFAULT_HARDWARE)
    if hw.saved:  # a profile from a file: say which device and when, before any output
        from ringsim.cli.output import note

        device = f" on {hw.device}" if hw.device else ""
        note(f"hardware {hw.name}: a profile measured{device}, saved {hw.saved}")
    changes = {}
    if flops is not None:  # the given rate is what the kernel achieves
        dtype = getattr(args, "dtype", None) or default_dtype(hw)
        changes.update(flops={**hw.flops, dtype: flops}, efficiency=1.0)
    if memory is not None:
        changes["memory_bytes"] = memory
    if bandwidth is not None or latency is not None:  # its measured p2p range no longer holds
        hw = hw.with_link(bandwidth, latency)
    if changes or bandwidth is not None or latency is not None:
        hw = dataclasses.replace(hw, name=f"{hw.name} (modified)", **changes)
    return hw


def _check_cluster_links(cluster: str, bandwidth, latency) -> None:
    """Refuse ``--bandwidth``/``--latency`` beside ``--cluster``: they set the hardware's own
    link, and a cluster preset's links (inside a node and between nodes) replace it, so they
    would change nothing."""
    given = [f for f, v in (("--bandwidth", bandwidth), ("--latency", latency)) if v is not None]
    if given:
        raise ValueError(
            f"{' and '.join(given)} {'set' if len(given) > 1 else 'sets'} the hardware's own "
            f"link, which --cluster {cluster}'s "
            f"links replace: use --inter-latency for the links between nodes, or --hardware "
            f"with --gpus-per-node and --inter-bandwidth to build the cluster on that link"
        )


def ring_config(args: argparse.Namespace, *, hosts: int, seq_len: int, **overrides):
    """A ``RingConfig`` from the parsed flags (``overrides`` win)."""
    from ringsim.timer import RingConfig

    apply_model(args)
    speed = None
    stragglers = getattr(args, "straggler", None) or []
    if stragglers:
        factors = [1.0] * hosts
        for host, slowdown in stragglers:
            if host >= hosts:
                raise ValueError(f"straggler host must be below hosts={hosts}, got host {host}")
            factors[host] = 1.0 / slowdown
        speed = tuple(factors)
    hardware = resolve_hardware(args)  # first: it fills in args.dtype when not given
    check_flags_apply(args, hardware, hosts)
    window = getattr(args, "sliding_window", None)
    if window is not None and "sliding_window" not in overrides:
        check_window_applies(window, seq_len)
    fields = dict(
        hosts=hosts,
        seq_len=seq_len,
        hardware=hardware,
        heads=args.heads,
        kv_heads=args.kv_heads,
        head_dim=args.head_dim,
        d_model=getattr(args, "d_model", None),
        ffn=getattr(args, "ffn", None),
        dtype=args.dtype,
        batch=args.batch,
        layout=getattr(args, "layout", "contiguous"),
        causal=bool(getattr(args, "causal", False)),
        overlap=not getattr(args, "no_overlap", False),
        pass_=args.pass_,
        tile=None if args.tile is None else args.tile[0],
        tile_n=None if args.tile is None else args.tile[1],
        speed=speed,
        jitter=getattr(args, "jitter", 0.0),
        seed=getattr(args, "seed", 0),
    )
    if window is not None:
        fields["sliding_window"] = window
    fields.update(_implementation_fields(args, fields["hardware"], fields["dtype"]))
    fields.update(overrides)
    return RingConfig(**fields)


def document_lengths(text: str | None, seq_len: int) -> list[int] | None:
    """The lengths of ``--documents`` (comma-separated, K/M; ``None`` without the flag),
    summing to the sequence."""
    if text is None:
        return None
    from ringsim.values import parse_length

    try:
        lengths = [parse_length(part) for part in text.split(",")]
    except ValueError as err:
        raise ValueError(f"--documents: {err}") from None
    if sum(lengths) != seq_len:
        raise ValueError(
            f"--documents must sum to the sequence length {seq_len}, got {sum(lengths)} ({text})"
        )
    return lengths


def add_window_flag(p: argparse.ArgumentParser) -> None:
    """``--sliding-window W``: the model's local attention (``ringsim.masks``), K/M suffixes."""
    p.add_argument(
        "--sliding-window",
        type=arg_type(parse_length_arg, "sliding_window"),
        metavar="W",
        help="sliding-window attention: each query sees the W latest tokens, itself included "
        "(K/M suffixes; not the double ring's --window)",
    )


def parse_length_arg(name: str, text: str) -> int:
    """A length flag's value (``64K``), its error naming the flag."""
    from ringsim.values import parse_length

    try:
        return parse_length(text)
    except ValueError as err:
        raise ValueError(f"{name}: {err}") from None


def check_window_applies(window: int, seq_len: int) -> None:
    """Refuse ``--sliding-window`` where it masks nothing: a window of the whole sequence."""
    if window >= seq_len:
        raise ValueError(
            f"--sliding-window {window} covers the whole sequence ({seq_len} tokens): it masks "
            f"nothing; give a window shorter than --seq-len, or drop the flag"
        )


def check_flags_apply(args: argparse.Namespace, hardware, hosts: int) -> None:
    """Refuse a flag that would change nothing in this run (``ValueError`` naming it and what
    it needs): ``--window`` beside another strategy than the double ring, ``--recompute``
    outside a training step, ``--placement`` without a Ulysses x ring grid, and
    an ``--implementation`` that does not run on the hardware (torch's CPU kernels on a GPU,
    a GPU family on a TPU)."""
    from ringsim.timer.machine.families import get_family
    from ringsim.timer.strategies import STRATEGIES, get_strategy

    strategy = getattr(args, "strategy", "ring")
    kind = get_strategy(strategy)
    if getattr(args, "window", None) is not None and not kind.windowed:
        windowed = " or ".join(n for n, s in STRATEGIES.items() if s.windowed)
        raise ValueError(
            f"--window sets the double ring's inner ring: it needs --strategy {windowed}, "
            f"got --strategy {strategy}"
        )
    if getattr(args, "sliding_window", None) is not None and args.pass_ == Pass.DECODE:
        raise ValueError(
            "--sliding-window masks a ring's attention: it needs --pass forward, backward or "
            "train-step, got --pass decode (one token against whole cache shards)"
        )
    if getattr(args, "recompute", False) and args.pass_ != Pass.TRAIN_STEP:
        raise ValueError(
            f"--recompute runs a training step's forward again: it needs --pass train-step, "
            f"got --pass {args.pass_}"
        )
    degree = getattr(args, "ulysses_degree", None)
    grid = degree and 1 < degree < hosts and kind.runs(degree, hosts // degree)
    if getattr(args, "placement", None) is not None and not grid:
        grids = ", ".join(n for n, s in STRATEGIES.items() if s.runs(2, 2))
        raise ValueError(
            f"--placement orders a grid of Ulysses groups and rings: it needs --strategy {grids} "
            f"with 1 < --ulysses-degree < --hosts, got --strategy "
            f"{strategy}" + (f" --ulysses-degree {degree}" if degree else "")
        )
    family = get_family(getattr(args, "implementation", "ideal"))
    family.check_runs_on(hardware, label=f"--implementation {family.name}")


def _implementation_fields(args: argparse.Namespace, hardware, dtype: str) -> dict:
    """The kernel-model fields of ``RingConfig`` from ``add_implementation_flags``' flags."""
    from ringsim.timer.machine.kernel_model import kind_rate

    fields = {}
    for flag, key in (("attention_rate", "attention_flops"), ("linear_rate", "linear_flops")):
        value = getattr(args, flag, None)
        if value is not None:
            try:
                fields[key] = kind_rate(hardware, value, dtype)
            except ValueError as err:
                raise ValueError(f"--{flag.replace('_', '-')}: {err}") from None
    for key in ("implementation", "overlap_efficiency", "recompute"):
        if getattr(args, key, None) is not None:
            fields[key] = getattr(args, key)
    return fields


def add_cluster_flags(p: argparse.ArgumentParser, *, strategy: bool = True) -> None:
    """--cluster PRESET, or --gpus-per-node/--inter-bandwidth/--inter-latency on top of
    --hardware; with ``strategy``, also --ulysses-degree, --placement and --window."""
    positive = lambda name: arg_type(parse_positive_int, name)
    quantity = lambda name, zero=False: arg_type(
        lambda n, t: parse_quantity(n, t, allow_zero=zero), name
    )
    p.add_argument("--cluster", metavar="PRESET", help="cluster preset (see `ringsim presets`)")
    p.add_argument("--nodes", type=positive("nodes"), help="nodes in the cluster (as needed)")
    p.add_argument(
        "--gpus-per-node",
        type=positive("gpus_per_node"),
        metavar="G",
        help="devices per node, joined by the hardware's link",
    )
    p.add_argument(
        "--inter-bandwidth",
        type=quantity("inter_bandwidth"),
        metavar="B",
        help="bytes/s per device between nodes (its NIC), e.g. 50G",
    )
    p.add_argument(
        "--inter-latency",
        type=quantity("inter_latency", True),
        metavar="L",
        help="seconds per message between nodes (5e-6)",
    )
    if not strategy:
        return
    p.add_argument(
        "--ulysses-degree",
        type=positive("ulysses_degree"),
        metavar="U",
        help="hybrid, double-ring, allgather: Ulysses group size (ring degree = hosts / U)",
    )
    p.add_argument(
        "--placement",
        choices=PLACEMENTS,
        help="with --ulysses-degree U (1 < U < hosts): which groups are consecutive ranks "
        "(share a node); default ulysses-inner",
    )
    p.add_argument(
        "--window",
        type=positive("window"),
        help="double-ring: inner ring size (default: the ring's members per node)",
    )


def resolve_cluster(args: argparse.Namespace, hardware):
    """The ``Cluster`` the flags ask for (its device ``hardware``), or None for one node with an
    ideal switch (the flat model)."""
    from ringsim.timer.machine.topology import Cluster, get_cluster

    g, bw = getattr(args, "gpus_per_node", None), getattr(args, "inter_bandwidth", None)
    lat, nodes = getattr(args, "inter_latency", None), getattr(args, "nodes", None)
    name = getattr(args, "cluster", None)
    if name is not None:
        if g is not None or bw is not None:
            raise ValueError(
                "cluster: give --cluster PRESET or --gpus-per-node and --inter-bandwidth, not both"
            )
        cluster = dataclasses.replace(get_cluster(name), hardware=hardware)
        changes = {} if lat is None else {"inter_latency": lat}
        cluster = dataclasses.replace(cluster, **changes)
    elif g is not None or bw is not None:
        if g is None or bw is None:
            given = "--gpus-per-node" if g else "--inter-bandwidth"
            raise ValueError(
                "a custom cluster needs both --gpus-per-node and --inter-bandwidth, "
                f"got only {given}"
            )
        cluster = Cluster.from_links(hardware, g, bw, 5e-6 if lat is None else lat)
    else:
        if nodes is not None or lat is not None:
            raise ValueError("--nodes and --inter-latency need --cluster or --gpus-per-node")
        return None
    return cluster if nodes is None else cluster.with_nodes(nodes)


def run_config(config, strategy: str = "ring", *, keep_timeline: bool | None = None, args=None):
    """Time ``config`` with ``strategy``; a result whose times overflowed is a ``ValueError``
    naming the extreme flags (``check_finite_times``)."""
    from ringsim.cli.checks import check_finite_times, times_out_of_range
    from ringsim.timer.engine.result import TimesOutOfRange

    try:
        result = _run_config(config, strategy, keep_timeline=keep_timeline, args=args)
    except TimesOutOfRange:  # the library names fields; the user gave flags
        raise times_out_of_range("a time overflowed", args) from None
    check_finite_times(result.summary(), args)
    return result


def _run_config(config, strategy: str, *, keep_timeline: bool | None, args):
    cluster = None if args is None else resolve_cluster(args, config.hardware)
    degree = getattr(args, "ulysses_degree", None)
    if strategy == DEFAULT_STRATEGY and cluster is None and degree is None:
        from ringsim.timer import simulate

        return simulate(config, keep_timeline=keep_timeline)
    from ringsim.timer.strategies import simulate_strategy

    return simulate_strategy(
        config,
        strategy,
        ulysses_degree=degree,
        cluster=cluster,
        placement=getattr(args, "placement", None) or "ulysses-inner",
        window=getattr(args, "window", None),
    )
