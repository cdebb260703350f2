"""The ``ringsim`` command: simulate a ring, sweep it, size its memory, list the hardware.

Every subcommand prints a table for people (rich when installed, plain text otherwise) and,
with ``--json``, one JSON document for scripts. Bad input ends in one line on stderr naming the
value, and exit code 2. Only what a command needs is imported: matplotlib when it plots, rich
when it prints a table to a terminal, torch only for ``calibrate`` and ``measure``.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import math
import os
import sys
from collections.abc import Callable, Iterable, Sequence

from ringsim.layouts import LAYOUTS
from ringsim.plots import format_tokens as format_length
from ringsim.plots import percent

DTYPES = ("bf16", "fp16", "fp32")
PASSES = ("forward", "backward", "train-step", "decode")
STRATEGIES = ("ring", "ulysses", "allgather")  # ringsim.strategies.STRATEGIES, without importing it
DEFAULT_HARDWARE = "a100-nvlink"

# Subcommands that another module implements: name -> (module, function, what it needs).
FORWARDED = {
    "demo": ("ringsim.demo", "main", "matplotlib (pip install matplotlib)"),
    "calibrate": (
        "kernels.calibrate",
        "calibrate_main",
        "the real backend and torch (pip install -e '.[torch]')",
    ),
    "measure": (
        "kernels.measure",
        "measure_main",
        "the real backend and torch (pip install -e '.[torch]')",
    ),
}

SI = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}


# -- parsing values: each returns the value or raises ValueError naming it ------------------
def parse_positive_int(name: str, text: str) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        raise ValueError(f"{name} must be a positive integer, got {text!r}") from None
    if value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {text!r}")
    return value


def parse_quantity(name: str, text: str, *, allow_zero: bool = False) -> float:
    """A finite positive number, optionally with an SI suffix: ``312e12``, ``312T``, ``50G``."""
    body = text.strip()
    suffix = body[-1:] if body[-1:] in SI else ""
    try:
        value = float(body[: len(body) - len(suffix)]) * SI[suffix]
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        kind = "non-negative" if allow_zero else "positive"
        raise ValueError(f"{name} must be a finite {kind} number (e.g. 50e9 or 50G), got {text!r}")
    return value


def parse_seq_len(text: str) -> int:
    from ringsim.timing import parse_length

    try:
        return parse_length(text)
    except ValueError as err:
        raise ValueError(f"seq_len: {err}") from None


def parse_straggler(text: str) -> tuple[int, float]:
    """``HOST:SLOWDOWN``: ``3:2`` makes host 3 take twice as long for the same work."""
    host, sep, factor = text.partition(":")
    if not sep:
        raise ValueError(f"straggler must look like HOST:SLOWDOWN (e.g. 3:2), got {text!r}")
    try:
        index = int(host)
    except ValueError:
        raise ValueError(f"straggler host must be an integer, got {text!r}") from None
    if index < 0:
        raise ValueError(f"straggler host must be >= 0, got {text!r}")
    try:
        return index, parse_quantity("straggler slowdown", factor)
    except ValueError:
        raise ValueError(f"straggler slowdown must be a positive number, got {text!r}") from None


def _arg(parse: Callable, *names) -> Callable[[str], object]:
    """An argparse ``type`` that keeps our message (argparse would print a generic one)."""

    def convert(text: str):
        try:
            return parse(*names, text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    convert.__name__ = parse.__name__
    return convert


class Parser(argparse.ArgumentParser):
    """Errors in one line: ``ringsim simulate: error: ...`` (usage only with --help)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


# -- output helpers -------------------------------------------------------------------------
def to_jsonable(value: object) -> object:
    """Plain JSON types: numpy scalars become numbers, NaN/inf become null, tuples lists."""
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if hasattr(value, "tolist"):  # numpy scalar or array
        return to_jsonable(value.tolist())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_jsonable(dataclasses.asdict(value))
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def print_json(data: object) -> None:
    print(json.dumps(to_jsonable(data), indent=2))


def human(key: str, value: object) -> str:
    """A readable value, chosen by the JSON key's unit suffix."""
    if isinstance(value, bool) or value is None:
        return {True: "yes", False: "no", None: "-"}[value]
    if isinstance(value, str) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if key.endswith("_s"):
        return format_seconds(value)
    if "bytes" in key:
        return format_bytes(value)
    if "fraction" in key:
        return percent(value)
    if key.startswith("flops"):
        return f"{value:.3e} FLOP"
    if "tokens" in key or key in ("seq_len", "min_block_for_overlap") or "context" in key:
        return f"{format_length(value)} tokens"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def format_seconds(seconds: float) -> str:
    if seconds == 0:
        return "0 s"
    for unit, scale in (("s", 1.0), ("ms", 1e3), ("µs", 1e6)):
        if abs(seconds) * scale >= 1:
            return f"{seconds * scale:.4g} {unit}"
    return f"{seconds * 1e9:.4g} ns"


def format_bytes(n: float) -> str:
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= scale:
            return f"{n / scale:.4g} {unit}"
    return f"{n:.0f} B"


def print_table(title: str, header: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    """A terminal table: rich when stdout is a terminal and rich is installed, else plain."""
    rows = [[str(c) for c in row] for row in rows]
    if sys.stdout.isatty():
        try:
            from rich.console import Console
            from rich.table import Table
        except ImportError:
            pass
        else:
            table = Table(title=title, title_justify="left", header_style="bold")
            for i, name in enumerate(header):
                table.add_column(name, justify="left" if i == 0 else "right")
            for row in rows:
                table.add_row(*row)
            Console().print(table)
            return
    widths = [max(len(str(h)), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    print(title)
    line = _plain_row(header, widths)
    print(line)
    print("-" * len(line))
    for row in rows:
        print(_plain_row(row, widths))


def _plain_row(cells: Sequence[str], widths: Sequence[int]) -> str:
    """First column left-aligned (names), the others right-aligned (numbers)."""
    pairs = zip(cells, widths, strict=True)
    return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(pairs))


def progress(items: Sequence, description: str, *, enabled: bool) -> Iterable:
    """Iterate with a rich progress bar on stderr, when it is a terminal and rich is there."""
    if enabled and sys.stderr.isatty():
        try:
            from rich.console import Console
            from rich.progress import track
        except ImportError:
            return items
        return track(items, description=description, console=Console(stderr=True), transient=True)
    return items


def note(text: str) -> None:
    """Side remarks (files written) go to stderr so ``--json`` output stays one document."""
    print(text, file=sys.stderr)


# -- building a configuration from flags ----------------------------------------------------
def add_hardware_flags(p: argparse.ArgumentParser, *, rates: bool = True) -> None:
    p.add_argument(
        "--hardware",
        metavar="PRESET",
        help=f"hardware preset (see `ringsim presets`; default {DEFAULT_HARDWARE})",
    )
    quantity = lambda name: _arg(parse_quantity, name)
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
        type=_arg(lambda n, t: parse_quantity(n, t, allow_zero=True), "latency"),
        metavar="L",
        help="seconds per message, e.g. 5e-6",
    )


def add_model_flags(p: argparse.ArgumentParser) -> None:
    positive = lambda name: _arg(parse_positive_int, name)
    p.add_argument("--heads", type=positive("heads"), default=32, help="query heads (32)")
    p.add_argument(
        "--kv-heads", type=positive("kv_heads"), help="key/value heads, GQA (default: --heads)"
    )
    p.add_argument("--head-dim", type=positive("head_dim"), default=128, help="head dim (128)")
    p.add_argument("--dtype", choices=DTYPES, default="bf16", help="element type (bf16)")
    p.add_argument("--batch", type=positive("batch"), default=1, help="sequences (1)")
    p.add_argument(
        "--pass", dest="pass_", choices=PASSES, default="forward", help="what runs (forward)"
    )
    p.add_argument("--tile", type=positive("tile"), help="kernel tile: partial tiles cost whole")


def resolve_hardware(args: argparse.Namespace):
    """The preset, with any of --flops/--bandwidth/--latency/--memory-bytes replacing its own."""
    from ringsim.hardware import custom_hardware, get_hardware

    flops = getattr(args, "flops", None)
    bandwidth = getattr(args, "bandwidth", None)
    latency = getattr(args, "latency", None)
    memory = getattr(args, "memory_bytes", None)
    if args.hardware is None and (flops is not None or bandwidth is not None):
        if flops is None or bandwidth is None:
            raise ValueError(
                "a custom machine needs both --flops and --bandwidth "
                "(or --hardware PRESET to start from), got only "
                + ("--flops" if flops is not None else "--bandwidth")
            )
        extra = {} if memory is None else {"memory": memory}
        return custom_hardware(flops, bandwidth, latency or 0.0, dtype=args.dtype, **extra)
    hw = get_hardware(args.hardware or DEFAULT_HARDWARE)
    changes = {}
    if flops is not None:  # the given rate is what the kernel achieves
        changes.update(flops={**hw.flops, args.dtype: flops}, efficiency=1.0)
    if bandwidth is not None:
        changes["link_bandwidth"] = bandwidth
    if latency is not None:
        changes["link_latency"] = latency
    if memory is not None:
        changes["memory_bytes"] = memory
    if changes:
        hw = dataclasses.replace(hw, name=f"{hw.name} (modified)", **changes)
    return hw


def ring_config(args: argparse.Namespace, *, hosts: int, seq_len: int, **overrides):
    """A ``RingConfig`` from the parsed flags (``overrides`` win)."""
    from ringsim.timing import RingConfig

    speed = None
    stragglers = getattr(args, "straggler", None) or []
    if stragglers:
        factors = [1.0] * hosts
        for host, slowdown in stragglers:
            if host >= hosts:
                raise ValueError(f"straggler host must be below hosts={hosts}, got host {host}")
            factors[host] = 1.0 / slowdown
        speed = tuple(factors)
    fields = dict(
        hosts=hosts,
        seq_len=seq_len,
        hardware=resolve_hardware(args),
        heads=args.heads,
        kv_heads=args.kv_heads,
        head_dim=args.head_dim,
        dtype=args.dtype,
        batch=args.batch,
        layout=getattr(args, "layout", "contiguous"),
        causal=bool(getattr(args, "causal", False)),
        overlap=not getattr(args, "no_overlap", False),
        pass_=args.pass_,
        tile=args.tile,
        speed=speed,
        jitter=getattr(args, "jitter", 0.0),
        seed=getattr(args, "seed", 0),
    )
    fields.update(overrides)
    return RingConfig(**fields)


def run_config(config, strategy: str = "ring"):
    if strategy == "ring":
        from ringsim.timing import simulate

        return simulate(config)
    from ringsim.strategies import simulate_strategy

    return simulate_strategy(config, strategy)


# -- ringsim simulate -----------------------------------------------------------------------
SUMMARY_NAMES = {
    "total_time_s": "makespan",
    "compute_time_s": "compute (busiest host)",
    "exposed_comm_s": "exposed communication",
    "comm_time_s": "link busy time",
    "idle_fraction": "idle fraction",
    "min_block_for_overlap": "overlap threshold",
    "memory_per_host_bytes": "attention memory / host",
    "flops_total": "FLOPs (all hosts)",
    "block_tokens": "block",
    "seq_len": "sequence",
}


def cmd_simulate(args: argparse.Namespace) -> int:
    config = ring_config(args, hosts=args.hosts, seq_len=parse_seq_len(args.seq_len))
    result = run_config(config, args.strategy)
    summary = result.summary()
    if args.strategy != "ring":
        summary.setdefault("strategy", args.strategy)
    if args.trace:
        from ringsim.trace import write_chrome_trace

        write_chrome_trace(result.timeline, args.trace)
        note(f"wrote Chrome trace {args.trace} (open in https://ui.perfetto.dev)")
    if args.plot:
        from ringsim.plots import plot_timeline

        plot_timeline(result.timeline, args.plot, title=describe(config, args.strategy))
        note(f"wrote timeline {args.plot}")
    if args.json:
        print_json(summary)
        return 0
    shown = {k: v for k, v in summary.items() if k not in CONFIG_KEYS}
    rows = [(SUMMARY_NAMES.get(k, k), human(k, v), k) for k, v in shown.items()]
    print_table(describe(config, args.strategy), ("quantity", "value", "JSON key"), rows)
    if args.schedule and result.schedule is not None:
        print()
        print(result.schedule.describe())
    return 0


CONFIG_KEYS = {  # echoed in the table's title rather than as rows
    *("hosts", "seq_len", "layout", "causal", "overlap", "pass", "hardware", "dtype"),
    *("heads", "kv_heads", "head_dim", "batch", "engine", "strategy"),
}


def describe(config, strategy: str = "ring") -> str:
    """One line naming the run: ``ring forward, 64K tokens on 8 hosts (8K each), zigzag, ...``
    (decode leaves out layout, mask and overlap: one token attends to the whole cache)."""
    split = f"{format_length(config.seq_len)} tokens on {config.hosts} hosts"
    split += f" ({format_length(config.block_tokens)} each)"
    if config.pass_ != "decode":
        mask = "causal" if config.causal else "full"
        overlap = "overlap" if config.overlap else "no overlap"
        split += f", {config.layout}, {mask}, {overlap}"
    heads = f"{config.heads} heads" + (
        f" ({config.kv_heads} kv)" if config.kv_heads != config.heads else ""
    )
    batch = f", batch {config.batch}" if config.batch > 1 else ""
    return (
        f"{strategy} {config.pass_}, {split}, {config.hardware.name}, {config.dtype}, "
        f"{heads} x {config.head_dim}{batch}"
    )


# -- ringsim presets ------------------------------------------------------------------------
def cmd_presets(args: argparse.Namespace) -> int:
    from ringsim.cost import overlap_threshold
    from ringsim.hardware import all_hardware

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


# -- ringsim memory -------------------------------------------------------------------------
def cmd_memory(args: argparse.Namespace) -> int:
    from ringsim.memory import memory_report

    hardware = resolve_hardware(args)
    report = memory_report(args.model, hardware, args.hosts, dtype=args.dtype, batch=args.batch)
    if args.json:
        print_json(report)
        return 0
    title = (
        f"longest context per method: {report['model']} on {args.hosts} x {report['hardware']} "
        f"({format_bytes(report['memory_bytes'])} each), {args.dtype}"
    )
    contexts = report["max_context"]
    print_table(
        title,
        ("method", "max context (tokens)", "exact"),
        [(m, format_length(n), f"{n:,}") for m, n in contexts.items()],
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


# -- ringsim sweep --------------------------------------------------------------------------
DEFAULT_BLOCKS = [2**k for k in range(7, 18)]  # 128 .. 128K tokens per host
DEFAULT_HOSTS = [2**k for k in range(1, 11)]  # 2 .. 1024 hosts


def cmd_sweep(args: argparse.Namespace) -> int:
    if args.vary == "block":
        data = sweep_block(args)
    else:
        data = sweep_hosts(args)
    if args.json:
        print_json(data)
    if args.plot:
        plot_sweep_data(data, args.plot)
        note(f"wrote sweep figure {args.plot}")
    return 0


def _values(args: argparse.Namespace, default: list[int], name: str) -> list[int]:
    if not args.values:
        return default
    from ringsim.timing import parse_length

    try:
        values = [parse_length(v) for v in args.values.split(",")]
    except ValueError:
        values = []
    if not values:
        raise ValueError(
            f"values must be positive {name} counts like 1K,2K,4K, got {args.values!r}"
        )
    return sorted(set(values))


def sweep_block(args: argparse.Namespace) -> dict:
    """Time against block size at fixed hosts, with and without overlap, and the threshold."""
    from ringsim.cost import overlap_threshold

    hosts = args.hosts or 8
    blocks = _values(args, DEFAULT_BLOCKS, "block")
    hw = resolve_hardware(args)
    kv_heads = args.kv_heads or args.heads
    pass_ = "backward" if args.pass_ in ("backward", "train-step") else "forward"
    threshold = overlap_threshold(
        hw,
        heads=args.heads,
        kv_heads=kv_heads,
        head_dim=args.head_dim,
        dtype=args.dtype,
        pass_=pass_,
    )
    rows = []
    for block in progress(blocks, "sweeping block size", enabled=not args.json):
        row = {"block_tokens": block, "seq_len": block * hosts}
        for overlap in (True, False):
            config = ring_config(
                args, hosts=hosts, seq_len=block * hosts, overlap=overlap, layout=args.layout
            )
            s = run_config(config, args.strategy).summary()
            key = "" if overlap else "no_overlap_"
            row[f"{key}total_time_s"] = s["total_time_s"]
            if overlap:
                row["compute_time_s"] = s["compute_time_s"]
                row["exposed_comm_s"] = s["exposed_comm_s"]
        row["slowdown"] = row["total_time_s"] / row["compute_time_s"]
        row["compute_share"] = row["compute_time_s"] / row["total_time_s"]
        row["no_overlap_compute_share"] = row["compute_time_s"] / row["no_overlap_total_time_s"]
        rows.append(row)
    hidden = [r["block_tokens"] for r in rows if r["exposed_comm_s"] <= 1e-6 * r["total_time_s"]]
    data = {
        "vary": "block",
        "hosts": hosts,
        "layout": args.layout,
        "causal": bool(args.causal),
        "pass": args.pass_,
        "hardware": hw.name,
        "overlap_threshold_tokens": threshold,
        "first_hidden_block_tokens": min(hidden) if hidden else None,
        "rows": rows,
    }
    if not args.json:
        print_table(
            f"time against block size: {hosts} hosts, {args.layout}, {hw.name} "
            f"(overlap threshold c* = {format_length(threshold)} tokens)",
            ("block", "makespan", "compute", "exposed comm", "compute share", "without overlap"),
            [
                (
                    format_length(r["block_tokens"]),
                    format_seconds(r["total_time_s"]),
                    format_seconds(r["compute_time_s"]),
                    format_seconds(r["exposed_comm_s"]),
                    percent(r["compute_share"]),
                    percent(r["no_overlap_compute_share"]),
                )
                for r in rows
            ],
        )
        first = data["first_hidden_block_tokens"]
        print(
            "compute share = compute time / makespan of the busiest host; "
            "without overlap, compute and transfers alternate"
        )
        print(
            f"communication fully hidden from block {format_length(first)} on"
            if first
            else "communication never fully hidden in this range",
            f"(closed form: c* = {format_length(threshold)} tokens)",
        )
    return data


def sweep_hosts(args: argparse.Namespace) -> dict:
    """Idle fraction against hosts, per layout, at a fixed block size per host."""
    hosts_list = _values(args, DEFAULT_HOSTS, "host")
    block = parse_seq_len(args.block) if args.block else 4096
    causal = True if args.causal is None else args.causal
    layouts = args.layouts.split(",") if args.layouts else list(LAYOUTS)
    for layout in layouts:
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    cases = [(p, layout) for p in hosts_list for layout in layouts]
    rows = []
    for p, layout in progress(cases, "sweeping hosts", enabled=not args.json):
        config = ring_config(
            args,
            hosts=p,
            seq_len=block * p,
            layout=layout,
            causal=causal,
            overlap=not args.no_overlap,
        )
        s = run_config(config, args.strategy).summary()
        rows.append(
            {
                "hosts": p,
                "layout": layout,
                "idle_fraction": s["idle_fraction"],
                "total_time_s": s["total_time_s"],
            }
        )
    data = {
        "vary": "hosts",
        "block_tokens": block,
        "causal": causal,
        "layouts": layouts,
        "contiguous_closed_form": {p: (p - 1) / (2 * p - 1) for p in hosts_list},
        "rows": rows,
    }
    if not args.json:
        table = []
        for p in hosts_list:
            by_layout = {r["layout"]: r for r in rows if r["hosts"] == p}
            base = by_layout.get("contiguous")
            cells = [str(p)]
            for layout in layouts:
                r = by_layout[layout]
                speedup = f" ({base['total_time_s'] / r['total_time_s']:.2f}x)" if base else ""
                cells.append(f"{percent(r['idle_fraction'])}{speedup}")
            cells.append(percent((p - 1) / (2 * p - 1)))
            table.append(cells)
        print_table(
            f"idle fraction against hosts ({'causal' if causal else 'full'}, "
            f"{format_length(block)} tokens per host; speedup over contiguous in brackets)",
            ("hosts", *layouts, "(P-1)/(2P-1)"),
            table,
        )
    return data


def plot_sweep_data(data: dict, path: str) -> None:
    from ringsim.plots import plot_sweep

    rows = data["rows"]
    if data["vary"] == "block":
        plot_sweep(
            [r["block_tokens"] for r in rows],
            {
                "with overlap": [r["compute_share"] for r in rows],
                "without overlap": [r["no_overlap_compute_share"] for r in rows],
            },
            path,
            xlabel="block size per host (tokens)",
            ylabel="compute time / makespan (busiest host)",
            title=f"{data['pass']}, {data['hosts']} hosts, {data['layout']}, "
            f"{'causal' if data['causal'] else 'full'}, {data['hardware']}: "
            "is the transfer hidden?",
            ylim=(0, 1.05),
            legend_loc="lower right",
            threshold=data["overlap_threshold_tokens"],
            threshold_label="overlap threshold c*",
        )
        return
    hosts = sorted({r["hosts"] for r in rows})
    series = {
        layout: [
            next(r for r in rows if r["hosts"] == p and r["layout"] == layout)["idle_fraction"]
            for p in hosts
        ]
        for layout in data["layouts"]
    }
    references = {}
    if data["causal"] and "contiguous" in data["layouts"]:
        references["contiguous closed form (P-1)/(2P-1)"] = [(p - 1) / (2 * p - 1) for p in hosts]
    plot_sweep(
        hosts,
        series,
        path,
        xlabel="hosts",
        ylabel="idle fraction",
        title=f"idle fraction against hosts ({'causal' if data['causal'] else 'full'} "
        f"attention, {format_length(data['block_tokens'])} tokens per host)",
        references=references,
        plain_x=True,
    )


# -- forwarded subcommands ------------------------------------------------------------------
def run_forwarded(command: str, argv: list[str]) -> int:
    module_name, function, needs = FORWARDED[command]
    try:
        module = importlib.import_module(module_name)
        entry = getattr(module, function)
    except (ImportError, AttributeError) as err:
        print(
            f"ringsim {command}: error: {module_name}.{function} is not available ({err}); "
            f"it needs {needs}",
            file=sys.stderr,
        )
        return 2
    return guarded(f"ringsim {command}", lambda: entry(argv))


def guarded(prog: str, run: Callable[[], int | None]) -> int:
    """Run a command; bad values (ValueError) end in one line on stderr and exit code 2."""
    try:
        return int(run() or 0)
    except ValueError as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `ringsim ... | head`: the reader left; say nothing more
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 1
    except OSError as err:  # a plot or trace path that cannot be written
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


# -- the parser -----------------------------------------------------------------------------
EXAMPLES = {
    "simulate": """examples:
  ringsim simulate --hosts 8 --seq-len 64K --causal --layout zigzag
  ringsim simulate --hosts 8 --seq-len 64K --causal --layout contiguous --plot timeline.png
  ringsim simulate --hosts 32 --seq-len 1M --hardware a100-ib --pass backward --json
  ringsim simulate --hosts 8 --seq-len 8K --flops 312T --bandwidth 25G --latency 5e-6
  ringsim simulate --hosts 8 --seq-len 64K --straggler 3:1.5 --trace ring.json
  ringsim simulate --hosts 8 --seq-len 64K --strategy ulysses --heads 32 --kv-heads 8
""",
    "presets": """examples:
  ringsim presets
  ringsim presets --json
""",
    "sweep": """examples:
  ringsim sweep --vary block --hosts 8 --hardware a100-ib --plot block.png
  ringsim sweep --vary block --values 512,1K,2K,4K,8K --pass backward
  ringsim sweep --vary hosts --plot idle.png            (causal by default)
  ringsim sweep --vary hosts --values 4,16,64 --layouts contiguous,zigzag --json
""",
    "memory": """examples:
  ringsim memory --model 7b --hardware a100-nvlink --hosts 8
  ringsim memory --model 13b --hardware tpu-v4 --hosts 1024 --json
""",
}


def build_parser() -> argparse.ArgumentParser:
    from ringsim import __version__

    parser = Parser(
        prog="ringsim",
        description="An exact, event-timed simulator of Ring Attention.",
        epilog="""examples:
  ringsim demo                                   three layouts side by side, and a figure
  ringsim simulate --hosts 8 --seq-len 64K --causal --layout zigzag
  ringsim sweep --vary block --plot block.png
  ringsim memory --model 7b --hardware a100-nvlink --hosts 8
  ringsim <command> --help                       flags and examples of one command""",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"ringsim {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

    def command(name: str, help_: str) -> argparse.ArgumentParser:
        return sub.add_parser(
            name,
            help=help_,
            description=help_,
            epilog=EXAMPLES.get(name),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )

    positive = lambda name: _arg(parse_positive_int, name)

    p = command("simulate", "time one ring run: makespan, idle, exposed communication")
    p.add_argument("--hosts", type=positive("hosts"), required=True, help="hosts in the ring")
    p.add_argument("--seq-len", required=True, help="tokens, K/M suffixes (powers of two)")
    p.add_argument("--layout", choices=LAYOUTS, default="contiguous", help="token split")
    p.add_argument("--causal", action="store_true", help="causal mask")
    p.add_argument("--no-overlap", action="store_true", help="compute and transfer alternate")
    p.add_argument("--strategy", choices=STRATEGIES, default="ring", help="how hosts share work")
    add_model_flags(p)
    add_hardware_flags(p)
    add_noise_flags(p)
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--trace", metavar="FILE", help="write a Chrome trace (Perfetto) JSON")
    p.add_argument("--plot", metavar="FILE", help="write the timeline figure (PNG/SVG/PDF)")
    p.add_argument("--schedule", action="store_true", help="also print the ring schedule")
    p.set_defaults(run=cmd_simulate)

    p = command("presets", "list the hardware presets and where their numbers come from")
    p.add_argument("--json", action="store_true", help="print the presets as JSON")
    p.set_defaults(run=cmd_presets)

    p = command("sweep", "sweep block size or hosts and tabulate (and plot) the result")
    p.add_argument(
        "--vary",
        choices=("block", "hosts"),
        required=True,
        help="block: time vs block size at fixed hosts; hosts: idle fraction vs hosts per layout",
    )
    p.add_argument("--values", help="comma-separated values (lengths accept K/M)")
    p.add_argument("--hosts", type=positive("hosts"), help="hosts for --vary block (8)")
    p.add_argument("--block", help="tokens per host for --vary hosts (4K)")
    p.add_argument("--layout", choices=LAYOUTS, default="contiguous", help="for --vary block")
    p.add_argument("--layouts", help="comma-separated layouts for --vary hosts (all)")
    p.add_argument(
        "--causal",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="causal mask (default: on for --vary hosts, off for --vary block)",
    )
    p.add_argument("--no-overlap", action="store_true", help="for --vary hosts")
    p.add_argument("--strategy", choices=STRATEGIES, default="ring", help="how hosts share work")
    add_model_flags(p)
    add_hardware_flags(p)
    p.add_argument("--json", action="store_true", help="print the sweep as JSON")
    p.add_argument("--plot", metavar="FILE", help="write the sweep figure")
    p.set_defaults(run=cmd_sweep)

    p = command("memory", "bytes per host and the longest context that fits, per method")
    p.add_argument("--model", required=True, help="3b, 7b, 13b, 30b or 65b (LLaMA shapes)")
    p.add_argument("--hosts", type=positive("hosts"), required=True, help="hosts")
    p.add_argument("--dtype", choices=DTYPES, default="bf16", help="element type (bf16)")
    p.add_argument("--batch", type=positive("batch"), default=1, help="sequences (1)")
    add_hardware_flags(p, rates=False)
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(run=cmd_memory)

    for name, help_ in (
        ("demo", "a short tour: three layouts side by side, a table and a figure"),
        ("calibrate", "measure this machine into a hardware profile (torch)"),
        ("measure", "run the real backend; measured vs predicted (torch)"),
    ):
        sub.add_parser(name, help=help_, add_help=False)
    return parser


def add_noise_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--straggler",
        type=_arg(lambda text: parse_straggler(text)),
        action="append",
        metavar="HOST:SLOWDOWN",
        help="host HOST is SLOWDOWN times slower (repeatable), e.g. 3:1.5",
    )
    p.add_argument(
        "--jitter",
        type=_arg(lambda n, t: parse_quantity(n, t, allow_zero=True), "jitter"),
        default=0.0,
        help="random relative spread of each block's compute time (0)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the jitter (0)")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``ringsim`` console script; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in FORWARDED:
        return run_forwarded(argv[0], argv[1:])
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    if getattr(args, "run", None) is None:
        parser.print_help()
        return 2
    return guarded(f"ringsim {args.command}", lambda: args.run(args))


if __name__ == "__main__":
    sys.exit(main())
