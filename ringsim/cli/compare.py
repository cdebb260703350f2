"""``ringsim compare``: a recorded run (a profiler trace, or a measured time) against the same
ring simulated: "is it what the schedule allows?"."""

from __future__ import annotations

import argparse
import math
import re

from ringsim.cli.args import (
    add_hardware_flags,
    add_implementation_flags,
    add_model_flags,
    ring_config,
)
from ringsim.cli.output import format_seconds, note, print_json, print_table
from ringsim.layouts import LAYOUTS
from ringsim.values import arg_type, parse_positive_int, parse_seq_len

HELP = "a recorded ring (profiler trace or a time) against the same ring simulated"
EXAMPLES = """examples:
  ringsim compare rank0.json rank1.json                 # torch.profiler traces, one per rank
  ringsim compare trace.json.gz --hardware h100-nvlink --plot compare.png --trace both.json
  ringsim compare report.sqlite --hardware h100-nvlink  # nsys export --type sqlite
  ringsim compare --measured 12.3ms --hosts 8 --seq-len 128K --causal --layout zigzag \\
      --hardware h100-nvlink --implementation fa2
  ringsim compare rank*.json --json                     # steps, totals, interval, verdict

Record a trace of your ring with torch.profiler.profile(activities=[CPU, CUDA],
record_shapes=True) around a few passes and prof.export_chrome_trace(f"rank{rank}.json")
on every rank; flags supply what the trace lacks and win over what it says."""

UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
CPU_HARDWARE = "cpu-calibrated"  # a trace with no device ran on CPUs: this machine's profile


def parse_duration(name: str, text: str) -> float:
    """``"12.3ms"``, ``"850 us"``, ``"0.0123"`` (seconds) -> seconds; positive and finite."""
    match = re.fullmatch(r"\s*([0-9.eE+-]+)\s*(s|ms|us|µs|ns)?\s*", text)
    value = math.nan
    if match:
        try:
            value = float(match.group(1)) * UNITS[match.group(2) or "s"]
        except ValueError:
            value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive time such as 12.3ms or 0.0123, got {text!r}")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    positive = lambda name: arg_type(parse_positive_int, name)
    p.add_argument(
        "traces",
        nargs="*",
        metavar="TRACE",
        help="torch.profiler / Kineto JSON (.json or .json.gz; one per rank, or merged) or an "
        "Nsight Systems SQLite export",
    )
    p.add_argument(
        "--measured",
        type=arg_type(parse_duration, "measured"),
        metavar="TIME",
        help="instead of traces: the run's time (e.g. 12.3ms), with the run's flags",
    )
    p.add_argument("--hosts", type=positive("hosts"), help="hosts in the ring (a trace's ranks)")
    p.add_argument("--seq-len", help="tokens, K/M suffixes (a trace: its block x hosts)")
    p.add_argument("--layout", choices=LAYOUTS, help="token split (a trace: from its calls)")
    p.add_argument("--causal", action="store_true", help="causal mask (a trace: from its calls)")
    add_model_flags(p)
    add_implementation_flags(p)
    add_hardware_flags(p)
    p.set_defaults(heads=None, head_dim=None, batch=None, pass_=None, implementation=None)
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.add_argument("--plot", metavar="FILE", help="write the side-by-side figure (PNG/SVG/PDF)")
    p.add_argument("--trace", metavar="FILE", help="write one Perfetto trace of both runs")
    p.set_defaults(run=run)


def _hints(args: argparse.Namespace) -> dict:
    """The flags given, as the trace reader's hints (they win over the trace)."""
    hints = {}
    for key in ("hosts", "heads", "kv_heads", "head_dim", "batch", "dtype", "pass_", "layout"):
        if getattr(args, key, None) is not None:
            hints[key] = getattr(args, key)
    if args.causal:
        hints["causal"] = True
    if args.seq_len is not None:
        if args.hosts is None:
            raise ValueError("--seq-len with traces needs --hosts (the block is seq-len / hosts)")
        hints["block_tokens"] = parse_seq_len(args.seq_len) // args.hosts
    return hints


def _defaults(args: argparse.Namespace) -> None:
    """The run flags' defaults (``simulate``'s), for what neither the flags nor a trace set."""
    for key, value in (("heads", 32), ("head_dim", 128), ("batch", 1), ("pass_", "forward")):
        if getattr(args, key) is None:
            setattr(args, key, value)


def run(args: argparse.Namespace) -> int:
    from ringsim.timer.studies.compare import compare_ring, compare_time

    if args.measured is not None and args.traces:
        raise ValueError("give TRACE files or --measured TIME, not both")
    if args.measured is None and not args.traces:
        raise ValueError("give TRACE files (torch.profiler or nsys) or --measured TIME")
    if args.traces:
        recorded = _read(args)
        config = _trace_config(args, recorded)
        comparison = compare_ring(recorded, config)
    else:
        if args.hosts is None or args.seq_len is None:
            raise ValueError("--measured needs the run's --hosts and --seq-len (and its flags)")
        _defaults(args)
        args.implementation = args.implementation or "ideal"
        args.layout = args.layout or "contiguous"
        config = ring_config(args, hosts=args.hosts, seq_len=parse_seq_len(args.seq_len))
        comparison = compare_time(args.measured, config)
    _outputs(args, comparison)
    return 0


def _read(args: argparse.Namespace):
    """The recorded ring; a trace the reader cannot follow is one line, never a traceback."""
    from ringsim.traces import TraceError, read_ring

    try:
        return read_ring(args.traces, _hints(args))
    except TraceError:
        raise
    except (KeyError, TypeError, AttributeError, IndexError, ZeroDivisionError) as err:
        raise TraceError(
            f"the trace has a shape this reader does not follow ({type(err).__name__}: {err})"
        ) from None


def _trace_config(args: argparse.Namespace, recorded):
    """The ``RingConfig`` of the recorded ring: its shape from the trace (and the flags), the
    kernel family it ran (unless --implementation), the hardware from --hardware (a CPU
    trace: this machine's calibrated profile)."""
    values = recorded.shape.values
    if args.hardware is None and args.flops is None:
        if recorded.device_name is not None or _on_device(recorded):
            device = recorded.device_name or "a GPU"
            raise ValueError(
                f"the trace ran on {device}: pass --hardware PRESET for it (`ringsim presets` "
                f"lists them) or --flops and --bandwidth"
            )
        args.hardware = CPU_HARDWARE
    if args.implementation is None:
        family = recorded.shape.family
        args.implementation = (family.implementation if family else None) or "ideal"
    _defaults(args)
    shape = {k: values[k] for k in ("heads", "kv_heads", "head_dim", "batch", "pass_", "causal")}
    shape["dtype"] = values["dtype"]
    hosts = recorded.hosts
    return ring_config(
        args,
        hosts=hosts,
        seq_len=hosts * values["block_tokens"],
        layout=values["layout"],
        **shape,
    )


def _on_device(recorded) -> bool:
    family = recorded.shape.family
    return recorded.format == "nsys" or (family is not None and bool(family.device))


# -- output ------------------------------------------------------------------------------------
def _outputs(args: argparse.Namespace, comparison) -> None:
    if args.plot:
        from ringsim.views.compare import plot_comparison

        plot_comparison(comparison, args.plot)
        note(f"wrote the figure {args.plot}")
    if args.trace:
        from ringsim.views.compare import write_comparison_trace

        write_comparison_trace(comparison, args.trace)
        note(f"wrote the Perfetto trace {args.trace} (open in https://ui.perfetto.dev)")
    if args.json:
        print_json(comparison.to_json())
        return
    _print(comparison)


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return format_seconds(0.0 if abs(value) < 1e-9 else value)  # float dust reads as 0


def _print(comparison) -> None:
    data = comparison.to_json()
    p = comparison.predicted
    print(
        f"{comparison.verdict}: measured {_ms(comparison.measured_s)}, predicted "
        f"{_ms(p.point)} [{_ms(p.low)} - {_ms(p.high)}], ratio {comparison.ratio:.3g} "
        f"(within ±{data['tolerance']:.0%} of the interval is expected)"
    )
    rows = []
    for step in data["steps"]:
        m, q = step["measured"] or {}, step["predicted"]
        parts = lambda d: " / ".join(
            _ms(d.get(k)) for k in ("attention_s", "merge_s", "exposed_transfer_s", "idle_s")
        )
        ratio = "-" if step["ratio"] is None else f"{step['ratio']:.3g}"
        rows.append(
            (
                step["step"],
                _ms(m.get("duration_s")),
                _ms(q["duration_s"]),
                ratio,
                parts(m) if m else "-",
                parts(q),
            )
        )
    print()
    print_table(
        "per step (its slowest host; parts: attention / merge / exposed transfer / idle)",
        ("step", "measured", "predicted", "ratio", "measured parts", "predicted parts"),
        rows,
    )
    if data["terms"]:
        print()
        print_table(
            "summed over the steps",
            ("term", "measured", "predicted", "difference"),
            [
                (t["what"], _ms(t["measured_s"]), _ms(t["predicted_s"]), _ms(t["difference_s"]))
                for t in data["terms"].values()
            ],
        )
        most = data["differs_most"]
        print(f"\ndiffers most: {most['what']} ({_ms(most['difference_s'])})")
    trace = data.get("trace")
    if trace:
        print()
        print_table(
            f"read from {trace['format']} ({len(trace['files'])} files), family "
            f"{trace['family'] or 'none known'}",
            ("field", "value", "from"),
            [(k, str(v["value"]), v["from"]) for k, v in trace["inferred"].items()],
        )
    for line in data["notes"]:
        print(f"note: {line}")
