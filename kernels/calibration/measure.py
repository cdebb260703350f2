"""Simulated vs measured: run the real ring, run the event timer on the calibrated profile of
the same machine, and compare step by step (``ringsim measure``).

The prediction has no fudge factor: ``ringsim.timer.simulate`` of exactly this run (``predict``)
on the ``Hardware`` that ``kernels.calibration.profile`` fits to probes taken with the ring's own
code: the compute rate at this run's block with its fixed cost per call, the rate on masked
blocks, a lone rank's speed-up, the link as a ring step uses it, the overlap of a transfer with
compute and the fixed cost of a ring call. The torch block skips masked tiles of
``kernels.blocks.torch_block.TILE`` tokens, so the simulation is told that tile.

Without a given calibration the comparison is *paired* (``kernels.calibration.paired``): before
every repeat the same ranks probe the machine at this run's sizes and the ring is timed between
the probes, so prediction and measurement see the same machine state; a machine's load drifts
over seconds, and pairing keeps the drift out of the ratio without ever feeding the ring's own
times into its prediction. The prediction pools every repeat's probes row by row (medians), so
that one slow probe cannot move it; each repeat is also predicted from its own probes, and the
ratio is the median of those per-repeat ratios. Every figure comes with a 95% bootstrap interval
(``kernels.calibration.uncertainty``). The result is a typed ``MeasureReport``
(``kernels.calibration.report``).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kernels.calibration.paired import (
    paired_calibration,
    paired_stall_s,
    paired_steps,
    paired_worker,
    repeat_time,
)
from kernels.calibration.profile import TORCH_DTYPES, Calibration
from kernels.calibration.report import (
    Measured,
    MeasureOptions,
    MeasureReport,
    Predicted,
    ProfileUsed,
    Ratio,
    RingShape,
    StepRow,
    StepTable,
    Threshold,
    ratio_of,
)
from kernels.calibration.uncertainty import bootstrap_intervals, overlaps, regime
from kernels.distributed.progress import Progress, stall_window
from kernels.distributed.repeats import slowest_per_pass
from kernels.distributed.ring import ring_failure_as_os_error
from ringsim.files import read_json_object

MEASURE_BACKENDS = ("gloo", "nccl")


def predict(calibration: Calibration, shape: RingShape, *, pass_: str = "forward"):
    """``ringsim.timer.simulate`` of ``shape`` on the calibrated profile at its block size:
    with overlap (the ring posts the next block before it computes) at the measured overlap
    efficiency and the measured fixed cost per ring call. Returns the ``SimResult`` and the
    ``Hardware`` used."""
    from kernels.blocks.torch_block import TILE
    from ringsim.timer import RingConfig, simulate

    hw = calibration.hardware(
        block_tokens=shape.block_tokens, heads=shape.heads, head_dim=shape.head_dim
    )
    config = RingConfig(
        hosts=shape.hosts,
        seq_len=shape.seq_len,
        hardware=hw,
        heads=shape.heads,
        kv_heads=shape.kv_heads,
        head_dim=shape.head_dim,
        dtype=calibration.dtype,
        layout=shape.layout,
        causal=shape.causal,
        pass_=pass_,
        tile=TILE if calibration.backend == "gloo" else 64,
        grad_dtype="fp32",
    )
    return simulate(config), hw


@dataclass(frozen=True)
class RingTimes:
    """What the ranks measured, before any prediction: ``measured_s`` per repeat; ``passes``:
    every timed ``run_ring`` call, each as every rank's result; ``results``: every rank's last
    one (its output); ``calibration``: the profile's data (the repeats' probes pooled, or the
    given one); ``repeats``: paired, each repeat's own probes."""

    measured_s: list[float]
    passes: list[list[dict]]
    results: list[dict]
    calibration: Calibration
    repeats: list[Calibration] | None = None


def measure(
    shape: RingShape,
    options: MeasureOptions | None = None,
    calibration: Calibration | None = None,
) -> MeasureReport:
    """Run the real ring (``shape.hosts`` local processes) and the simulator; see the module
    doc. ``options``: default ``MeasureOptions()``. ``calibration``: reuse one (else the run is
    paired: probed before every repeat, in the same ranks). With ``options.trace``, writes
    ``<trace>-measured.json`` and ``<trace>-predicted.json`` Chrome traces."""
    from kernels.distributed.launch import RunConfig
    from kernels.distributed.rank_timeline import timeline_from_records

    options = MeasureOptions() if options is None else options
    if options.backend not in MEASURE_BACKENDS:
        raise ValueError(
            f"backend must be one of {', '.join(MEASURE_BACKENDS)}, got {options.backend!r}"
        )
    dtype = calibration.dtype if calibration is not None else _default_dtype(options.backend)
    config = RunConfig(
        seq_len=shape.seq_len,
        heads=shape.heads,
        kv_heads=shape.kv_heads,
        head_dim=shape.head_dim,
        layout=shape.layout,
        causal=shape.causal,
        dtype=TORCH_DTYPES[dtype],
        backward=False,
        repeats=options.repeats,
        warmup=1,
        timeout_s=options.timeout_s,
        return_tensors=shape.seq_len <= 8192,
    )
    paired = calibration is None
    steps = paired_steps(config, shape.hosts, cpu=options.backend == "gloo") if paired else []
    total = (config.warmup + options.repeats) * len(steps) if paired else 1
    with Progress(total, "measure", enabled=options.progress) as bar:
        bar.advance(f"starting {shape.hosts} {options.backend} ranks", 0)
        if paired:
            times, predicted_s = _run_paired(shape, options, config, dtype, bar.channel)
        else:
            times, predicted_s = _run_given(shape, options, config, calibration), None
        bar.advance("predicting; bootstrap of the probes for the intervals", 1 - paired)
        sim, hw = predict(times.calibration, shape)
        ratios = None
        if predicted_s is not None:  # each repeat against the probes taken around it
            ratios = [ratio_of(m, p) for m, p in zip(times.measured_s, predicted_s, strict=True)]
        spread = bootstrap_measurement(
            times.repeats or times.calibration, times.measured_s, shape, options.draws, ratios
        )
    measured_pass, records = typical_pass(times.passes, float(np.median(times.measured_s)))
    measured_tl = timeline_from_records(records)
    measured = _measured(times, config, spread, measured_tl)
    predicted = _predicted(sim, spread, predicted_s, paired)
    traces = None if options.trace is None else write_traces(options.trace, measured_tl, sim)
    return MeasureReport(
        shape=shape,
        backend=options.backend,
        dtype=times.calibration.dtype,
        repeats=options.repeats,
        threads=options.threads,
        measured=measured,
        predicted=predicted,
        ratio=_ratio(measured, predicted, spread, ratios),
        threshold=_threshold(hw, shape, times.calibration, spread),
        table=step_table(measured_tl, measured_pass, sim, hw),
        profile=ProfileUsed(hw, times.calibration.quality(), spread["parameters"]),
        traces=traces,
    )


def _default_dtype(backend: str) -> str:
    return "fp32" if backend == "gloo" else "bf16"


def _run_paired(shape, options, config, dtype, channel) -> tuple[RingTimes, list[float]]:
    """The paired run: every repeat probed, then timed, in the same ranks. Returns the times
    and each repeat's own prediction."""
    from kernels.distributed.launch import launch

    # no fixed deadline: the probes take minutes at c = 8192; a rank is given up when it goes
    # silent for longer than one probe could take (kernels.distributed.progress)
    per_rank = launch(
        paired_worker,
        shape.hosts,
        args=(config, dtype, channel),
        stall_s=paired_stall_s(config, shape.hosts),
        backend=options.backend,
        timeout_s=options.timeout_s,
        threads=options.threads,
    )
    repeats = range(options.repeats)
    own = [
        paired_calibration(
            per_rank, i, config, dtype, shape.hosts, options.threads, options.backend
        )
        for i in repeats
    ]
    # each repeat's own prediction takes its overlap efficiency and pass overhead from every
    # repeat's probes (medians over rows): one noisy probe must not swing them
    shared = {
        "overlap": [row for c in own for row in c.overlap],
        "ring_pass": [row for c in own for row in c.ring_pass],
    }
    predicted_s = [
        predict(dataclasses.replace(c, **shared), shape)[0].summary()["total_time_s"] for c in own
    ]
    passes = [
        [r["rings"][i][j] for r in per_rank]
        for i in repeats
        for j in range(len(per_rank[0]["rings"][i]))
    ]
    times = RingTimes(
        measured_s=[repeat_time([r["rings"][i] for r in per_rank]) for i in repeats],
        passes=passes,
        results=[r["rings"][-1][-1] for r in per_rank],
        calibration=Calibration.pooled(own),
        repeats=own,
    )
    return times, predicted_s


def _run_given(shape, options, config, calibration: Calibration) -> RingTimes:
    """The ring alone, ``options.repeats`` timed passes, predicted from ``calibration``."""
    from kernels.distributed.launch import launch, run_configs

    stall_s = stall_window(
        options.timeout_s,
        block_tokens=shape.block_tokens,
        heads=shape.heads,
        head_dim=shape.head_dim,
        blocks=shape.hosts + 1,  # a ring pass
    )
    per_rank = launch(
        run_configs,
        shape.hosts,
        args=([config],),
        stall_s=stall_s,
        backend=options.backend,
        timeout_s=options.timeout_s,
        threads=options.threads,
    )
    results = [r[0] for r in per_rank]
    measured_s = slowest_per_pass([r["forward_s"] for r in results])
    return RingTimes(measured_s, [results], results, calibration)


def _measured(times: RingTimes, config, spread: dict, measured_tl) -> Measured:
    from kernels.distributed.launch import summarize_run

    return Measured(
        time_s=float(np.median(times.measured_s)),
        ci95=tuple(spread["measured"]),
        times_s=list(times.measured_s),
        makespan_s=measured_tl.makespan,
        wait_s=float(np.max(measured_tl.meta["wait"].sum(axis=0))),
        max_abs_error=summarize_run(times.results, config).get("max_abs_error"),
    )


def _predicted(sim, spread: dict, predicted_s: list[float] | None, paired: bool) -> Predicted:
    summary = sim.summary()
    time_s = float(summary["total_time_s"])
    return Predicted(
        time_s=time_s,
        ci95=_widened(spread["predicted"], time_s),
        times_s=predicted_s or [time_s],
        compute_s=float(summary["compute_time_s"]),
        exposed_comm_s=float(summary["exposed_comm_s"]),
        simulated_overlap=sim.config.overlap,
        calibration="paired (before every repeat), pooled" if paired else "given",
    )


def _ratio(measured: Measured, predicted: Predicted, spread: dict, ratios) -> Ratio:
    of_medians = ratio_of(measured.time_s, predicted.time_s)
    return Ratio(
        value=float(np.median(ratios)) if ratios else of_medians,
        ci95=tuple(spread["ratio"]),
        of_medians=of_medians,
        per_repeat=ratios or [of_medians],
        intervals_overlap=overlaps(predicted.ci95, measured.ci95),
    )


def _threshold(hw, shape: RingShape, calibration: Calibration, spread: dict) -> Threshold:
    tokens = threshold_tokens(hw, shape, calibration.dtype)
    ci95 = _widened(spread["threshold"], tokens)
    return Threshold(
        tokens=tokens,
        ci95=ci95,
        regime=regime(shape.block_tokens, ci95),
        overlap_fraction=calibration.overlap_fraction(),
        overlap_efficiency=hw.overlap_efficiency,
    )


def _widened(interval: Sequence[float], point: float) -> tuple[float, float]:
    """``interval`` stretched to hold ``point`` (the bootstrap's medians may all miss it)."""
    return min(interval[0], point), max(interval[1], point)


def step_table(measured_tl, measured_pass: float, sim, hw) -> StepTable:
    """The typical pass's steps (``measured_tl``, lasting ``measured_pass``) against the
    simulated pass's. The timer starts every host ``pass_overhead_s`` late (setup, start
    skew) while a rank's clock starts at its first step: both count that time outside the
    steps."""
    from kernels.distributed.rank_timeline import step_durations

    measured_steps = step_durations(measured_tl)
    predicted_steps = step_durations(sim.timeline)
    predicted_steps[0] -= hw.pass_overhead_s
    predicted = float(sim.summary()["total_time_s"])
    rows = [
        StepRow(float(m), float(p)) for m, p in zip(measured_steps, predicted_steps, strict=True)
    ]
    outside = StepRow(
        float(measured_pass - measured_steps.sum()), float(predicted - predicted_steps.sum())
    )
    return StepTable(rows, outside, StepRow(float(measured_pass), predicted))


def write_traces(prefix: str | os.PathLike, measured_tl, sim) -> list[str]:
    """Chrome traces of the measured and the simulated pass: ``<prefix>-measured.json`` and
    ``<prefix>-predicted.json``; returns their paths."""
    from ringsim.views.trace import write_chrome_trace

    paths = [f"{prefix}-measured.json", f"{prefix}-predicted.json"]
    write_chrome_trace(measured_tl, paths[0])
    write_chrome_trace(sim.timeline, paths[1])
    return paths


def typical_pass(rings: Sequence[Sequence[dict]], median: float) -> tuple[float, list[dict]]:
    """The timed pass closest to ``median``: ``(its time, every rank's forward timeline)``.
    ``rings``: per ``run_ring`` call, every rank's result (with ``forward_s`` and
    ``forward_timelines``, one per timed pass); a pass's time is its slowest rank's."""
    best = None
    for ranks in rings:
        for p, seconds in enumerate(slowest_per_pass([r["forward_s"] for r in ranks])):
            if best is None or abs(seconds - median) < abs(best[0] - median):
                best = (seconds, [r["forward_timelines"][p] for r in ranks])
    if best is None:
        raise ValueError("no timed pass to show")
    return best


def bootstrap_measurement(
    probes: Calibration | Sequence[Calibration],
    measured: Sequence[float],
    shape: RingShape,
    draws: int,
    ratios: Sequence[float] | None = None,
) -> dict:
    """``bootstrap_intervals`` of a measurement. ``probes``: the repeats' own calibrations of a
    paired measurement (a draw pools the same repeats' probes as it draws measured times:
    the load that slowed a repeat's ring slowed its probes too), or one given
    ``Calibration`` (a draw redraws every row's samples, ``Calibration.resampled``).
    ``ratios``: the repeats' paired ratios, whose median the ratio's interval is drawn from."""
    cache: dict = {}

    def predict_of(idx, rng):
        if isinstance(probes, Calibration):
            cal = probes.resampled(rng)
        elif tuple(idx) in cache:
            return cache[tuple(idx)]
        else:
            cal = Calibration.pooled([probes[i] for i in idx])
        sim, hw = predict(cal, shape)
        out = {
            "time": float(sim.summary()["total_time_s"]),
            "hardware": hw,
            "threshold": threshold_tokens(hw, shape, cal.dtype),
        }
        cache[tuple(idx)] = out
        return out

    return bootstrap_intervals(measured, predict_of, draws=draws, ratios=ratios)


def threshold_tokens(hw, shape: RingShape, dtype: str) -> float:
    """The calibrated overlap threshold (tokens per host) of this run's shape."""
    from ringsim.timer.cost import overlap_threshold

    kv_heads = shape.kv_heads or shape.heads
    return float(
        overlap_threshold(
            hw, heads=shape.heads, kv_heads=kv_heads, head_dim=shape.head_dim, dtype=dtype
        )
    )


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    from ringsim.layouts import layout_names
    from ringsim.values import Parser, arg_type, parse_positive_int

    positive = lambda name: arg_type(parse_positive_int, name)
    parser = parser or Parser(
        prog="ringsim measure",
        description="Run the real ring; compare with the simulator.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="""examples:
  ringsim measure --hosts 2 --seq-len 4K --causal --layout zigzag
  ringsim measure --hosts 2 --seq-len 2K --repeats 9 --json --trace /tmp/ring
  torchrun --nproc-per-node 8 -m kernels.distributed.launch --seq-len 65536   (NCCL, on GPUs)""",
    )
    parser.add_argument("--backend", choices=MEASURE_BACKENDS, default="gloo")
    parser.add_argument("--hosts", type=positive("hosts"), default=2, help="local ranks (2)")
    parser.add_argument("--seq-len", default="2K", help="tokens (K/M suffixes)")
    parser.add_argument("--heads", type=positive("heads"), default=4)
    parser.add_argument("--kv-heads", type=positive("kv_heads"), default=None)
    parser.add_argument("--head-dim", type=positive("head_dim"), default=64)
    parser.add_argument("--layout", choices=layout_names(), default="contiguous")
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--repeats", type=positive("repeats"), default=5)
    parser.add_argument(
        "--threads", type=positive("threads"), default=1, help="torch threads per rank"
    )
    parser.add_argument("--calibration", default=None, help="calibration data JSON to reuse")
    parser.add_argument("--trace", default=None, help="prefix for Chrome traces")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="say on stderr what runs (default: on, off with --json)",
    )
    return parser


def check_measure_args(args: argparse.Namespace) -> tuple[RingShape, Calibration | None]:
    """Every flag of ``ringsim measure`` checked before any rank starts (``ValueError`` naming
    the flag): the ring's shape as ``simulate`` checks it (``check_ring_shape``), at least two
    ranks, the backend's device, how many ranks this machine holds, the ``--trace`` files and
    the ``--calibration`` file. Returns the run's shape and the calibration (or None)."""
    from kernels.distributed.admission import check_backend, check_local_ranks
    from ringsim.files import check_outputs
    from ringsim.timer.engine.config import check_ring_shape
    from ringsim.values import parse_seq_len

    shape = RingShape(
        hosts=args.hosts,
        seq_len=parse_seq_len(args.seq_len),
        heads=args.heads,
        kv_heads=args.kv_heads,
        head_dim=args.head_dim,
        layout=args.layout,
        causal=args.causal,
    )
    if shape.hosts < 2:
        raise ValueError(
            f"--hosts must be at least 2 for a real ring (ranks exchange blocks), got {args.hosts}"
        )
    check_ring_shape(**dataclasses.asdict(shape))
    check_backend(args.backend, shape.hosts)
    check_local_ranks(shape.hosts, problem_bytes=_rank_tensor_bytes(shape), threads=args.threads)
    if args.trace is not None:
        if not args.trace.strip() or args.trace.endswith(("/", os.sep)):
            raise ValueError(f"--trace must be a path prefix such as /tmp/ring, got {args.trace!r}")
        args.trace_measured = f"{args.trace}-measured.json"
        args.trace_predicted = f"{args.trace}-predicted.json"
        traces = {"trace_measured": ("--trace", None), "trace_predicted": ("--trace", None)}
        check_outputs(args, traces)
    calibration = None
    if args.calibration is not None:
        calibration = load_calibration(args.calibration, args.backend, shape)
    return shape, calibration


def _rank_tensor_bytes(shape: RingShape) -> float:
    """Bytes of one rank's tensors, roughly: ``RunConfig.inputs`` draws the whole q, k, v and
    dout in float32 on every rank (twice: drawn, then cast), and the block kernel holds fp32
    scores of a ``TILE`` of queries against the block's keys per head."""
    from kernels.blocks.torch_block import TILE

    kv_heads = shape.kv_heads or shape.heads
    whole = (2 * shape.heads + 2 * kv_heads) * shape.seq_len * shape.head_dim * 4
    block = shape.block_tokens
    return 2.0 * whole + shape.heads * min(block, TILE) * block * 4


def load_calibration(path: str, backend: str, shape: RingShape) -> Calibration:
    """The ``--calibration`` data (``<stem>-calibration.json`` beside a profile), checked by
    building ``shape``'s profile from it; every failure a ``ValueError`` naming the file."""
    flag = f"--calibration {path!r}"
    data = read_json_object(path, what="--calibration")
    try:
        calibration = Calibration.from_json(data)
    except TypeError as err:
        raise ValueError(
            f"{flag} is not calibration data (a profile? pass the -calibration.json written "
            f"beside it): {err}"
        ) from None
    if calibration.backend != backend:
        raise ValueError(
            f"{flag} was measured on backend {calibration.backend!r}; this run uses {backend!r}"
        )
    try:
        calibration.hardware(
            block_tokens=shape.block_tokens, heads=shape.heads, head_dim=shape.head_dim
        )
    except (ArithmeticError, LookupError, TypeError, ValueError, AttributeError) as err:
        raise ValueError(
            f"{flag} does not give a profile for this run: {type(err).__name__}: {err}"
        ) from None
    return calibration


def measure_main(argv: Sequence[str] | None = None) -> int:
    """``ringsim measure --backend gloo --hosts P --seq-len N [...] [--json]``."""
    from ringsim.files import json_text

    args = build_parser().parse_args(argv)
    shape, calibration = check_measure_args(args)  # every flag, before any rank starts
    options = MeasureOptions(
        repeats=args.repeats,
        backend=args.backend,
        threads=args.threads,
        trace=args.trace,
        progress=not args.json if args.progress is None else args.progress,
    )
    with ring_failure_as_os_error():
        report = measure(shape, options, calibration)
    if args.json:
        print(json_text(report.to_json(), indent=2))
    else:
        print("\n".join(report.lines()))
    return 0
