"""Simulated vs measured: run the real ring, run the event timer on the calibrated profile of
the same machine, and compare step by step.

The prediction uses no fudge factor: ``ringsim.timer.simulate`` with a ``RingConfig`` that
describes the run exactly (hosts, tokens, heads, dtype, layout, causal mask) on the
``Hardware`` that ``kernels.calibration.calibrate`` measured: the block compute rate *at this run's
block size* with the fixed cost per block call beside it, the rate on masked blocks (the torch path
builds and applies the mask tile by tile), how much faster a rank computes while the others
are idle (local ranks share the machine), and the link as a ring step uses it (both
directions at once). The torch block path skips masked tiles of ``kernels.blocks.torch_block.TILE``
tokens, so the simulation is told ``tile=TILE``: a partially visible tile costs whole, as in
the real kernel.

``measured_time_s`` is the median over repeats of the slowest rank's forward time (from
``kernels.distributed.ring.start_line``, a barrier and a short settling pause, to its last merge).
``ratio``
is, for a paired comparison (below), the median over repeats of each repeat's measured time over
its own prediction (``ratios``): the comparison the pairing is made for; with a given
calibration, and as ``ratio_of_medians`` always, ``measured / predicted``. Every figure comes
with its 95% bootstrap interval (``kernels.calibration.uncertainty``): ``measured_ci95`` (the
repeats
redrawn), ``predicted_ci95`` (the probes redrawn), ``ratio_ci95`` (both, draw by draw; paired:
the repeats' ratios) and ``overlap_threshold_ci95``; ``intervals_overlap`` says whether
prediction and measurement agree within them, and ``regime`` is ``near the threshold`` while the
block lies inside the threshold's interval. ``probe_quality`` gives each probe's spread and
re-probes, ``parameter_ci95`` each profile parameter's interval.

Without a given calibration the comparison is *paired*: before every repeat of the ring, the
same ranks measure the block compute (a tiny block, half this block size and this one; for a
causal run also its masked blocks and, if some ranks skip steps, a lone rank; on gloo each on a
block that has just arrived over the link, as a ring step computes it) and the link (a small
message, this run's and one of at least 2 MB, so that the line's slope is not noise) and, on
gloo, whether a transfer progresses while a rank computes
(``kernels.calibration.calibrate.measure_overlap``, at this run's block and message) and the fixed
cost of a
ring call (``measure_ring_pass``: the real ring, on every rank, with near-empty blocks), and
that repeat is predicted from those numbers (``predicted_times_s``). The ring is timed after
every probe (one untimed pass, three timed, run again while they spread too wide, as a probe is;
``kernels.calibration.paired.ring_between_probes``), so its passes are spread through the repeat as
the probes' samples are; a repeat's time is the median of them (the slowest rank per pass). The
prediction (``predicted_time_s``) pools the probes of every repeat row by row (medians,
``Calibration.pooled``): one repeat's slow probe cannot flip it. Each probe runs again while its
samples spread too wide (``kernels.calibration.probes.reprobe``). The machine's load from other
processes
drifts over seconds; pairing keeps the drift out of the comparison without ever feeding the
ring's own timings into its prediction.

``steps`` compares one pass step by step: the timed pass of the ring closest to the median
(``typical_pass``; its per-rank timelines, each step the slowest rank) against the simulated
pass. ``outside_steps`` is what each pass took beyond its steps (measured: the call's setup, the
ranks' start skew, the final sync; simulated: the calibrated ``pass_overhead_s``), and ``pass``
their sum, so the rows add up; ``measured_time_s`` is the median over repeats, which one pass
need not equal.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import numpy as np

from kernels.calibration.paired import (
    paired_calibration,
    paired_stall_s,
    paired_steps,
    paired_worker,
    repeat_time,
)
from kernels.calibration.profile import TORCH_DTYPES, Calibration
from kernels.calibration.uncertainty import (
    BOOTSTRAP_DRAWS,
    bootstrap_intervals,
    interval_lines,
    overlaps,
    regime,
)
from kernels.distributed.progress import Progress, stall_window

MEASURE_BACKENDS = ("gloo", "nccl")


def predict(
    calibration: Calibration,
    *,
    hosts: int,
    seq_len: int,
    heads: int,
    kv_heads: int | None,
    head_dim: int,
    layout: str,
    causal: bool,
    pass_: str = "forward",
):
    """``ringsim.timer.simulate`` of this run on the calibrated profile: with overlap (the ring
    posts the next block before it computes) at the measured ``overlap_efficiency`` (how much
    a transfer and a compute beside it really overlap, or slow each other) and its measured
    fixed cost per ring call (``Calibration.pass_overhead``); returns the ``SimResult`` and the
    ``Hardware`` used."""
    from kernels.blocks.torch_block import TILE
    from ringsim.timer import RingConfig, simulate

    hw = calibration.hardware(block_tokens=seq_len // hosts, heads=heads, head_dim=head_dim)
    config = RingConfig(
        hosts=hosts, seq_len=seq_len, hardware=hw, heads=heads, kv_heads=kv_heads,
        head_dim=head_dim, dtype=calibration.dtype, layout=layout, causal=causal,
        pass_=pass_, tile=TILE if calibration.backend == "gloo" else 64, grad_dtype="fp32",
    )  # fmt: skip
    return simulate(config), hw


def measure(
    *,
    hosts: int = 2,
    seq_len: int = 2048,
    heads: int = 4,
    kv_heads: int | None = None,
    head_dim: int = 64,
    layout: str = "contiguous",
    causal: bool = False,
    repeats: int = 5,
    backend: str = "gloo",
    calibration: Calibration | None = None,
    threads: int = 1,
    timeout_s: float = 120.0,
    trace: str | Path | None = None,
    progress: bool = False,
    draws: int = BOOTSTRAP_DRAWS,
) -> dict:
    """Run the real ring (``hosts`` local processes) and the simulator; see the module doc.

    Returns a JSON-ready dict with at least ``hosts``, ``backend``, ``measured_time_s``,
    ``predicted_time_s``, ``ratio`` and ``max_abs_error`` (against the float64 reference), plus
    per-step ``steps`` and the profile used. ``calibration``: reuse one (else measured now, on
    the same ranks' configuration). ``trace``: write ``<trace>-measured.json`` and
    ``<trace>-predicted.json`` Chrome traces. ``progress``: say on stderr what runs (rank
    start, probe, repeat i of n; ``kernels.distributed.progress``). ``draws``: bootstrap draws of
    the intervals (``predicted_ci95``, ``measured_ci95``, ``ratio_ci95``,
    ``overlap_threshold_ci95``, ``parameter_ci95``).
    """
    from kernels.distributed.launch import RunConfig, launch, run_configs, summarize_run
    from kernels.distributed.rank_timeline import step_durations, timeline_from_records

    if backend not in MEASURE_BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(MEASURE_BACKENDS)}, got {backend!r}")
    dtype = "fp32" if backend == "gloo" else "bf16"
    dtype = calibration.dtype if calibration is not None else dtype
    config = RunConfig(
        seq_len, heads, kv_heads, head_dim, 1, layout, causal, TORCH_DTYPES[dtype],
        backward=False, repeats=repeats, warmup=1, timeout_s=timeout_s,
        return_tensors=seq_len <= 8192,
    )  # fmt: skip
    shape = dict(hosts=hosts, seq_len=seq_len, heads=heads, kv_heads=kv_heads,
                 head_dim=head_dim, layout=layout, causal=causal)  # fmt: skip
    launch_kw = dict(backend=backend, timeout_s=timeout_s, threads=threads)
    paired = calibration is None
    steps = paired_steps(config, hosts, cpu=backend == "gloo") if paired else ["ring"]
    total = (config.warmup + repeats) * len(steps) if paired else 1
    with Progress(total, "measure", enabled=progress) as bar:
        bar.advance(f"starting {hosts} {backend} ranks", 0)
        if paired:  # calibrate right before every repeat, in the same ranks
            # no fixed deadline: the probes take minutes at c = 8192; a rank is given up
            # when it goes silent for longer than one probe could take
            # (kernels.distributed.progress)
            per_rank = launch(paired_worker, hosts, args=(config, dtype, bar.channel),
                              stall_s=paired_stall_s(config, hosts), **launch_kw)  # fmt: skip
            own = [
                paired_calibration(per_rank, i, config, dtype, hosts, threads, backend)
                for i in range(repeats)
            ]
            # each repeat's own prediction, its overlap efficiency and pass overhead the
            # medians over every repeat's probes (one noisy probe must not swing them)
            shared = dict(overlap=[r for c in own for r in c.overlap],
                          ring_pass=[r for c in own for r in c.ring_pass])  # fmt: skip
            predicted_all = [
                predict(dataclasses.replace(c, **shared), **shape)[0].summary()["total_time_s"]
                for c in own
            ]
            measured_all = [repeat_time([r["rings"][i] for r in per_rank]) for i in range(repeats)]
            # the prediction: every repeat's probes pooled row by row (medians), so that one
            # repeat's slow link or compute sample cannot move it
            calibration = Calibration.pooled(own)
            results = [r["rings"][-1][-1] for r in per_rank]
        else:
            stall_s = stall_window(
                timeout_s,
                block_tokens=seq_len // hosts,
                heads=heads,
                head_dim=head_dim,
                blocks=hosts + 1,
            )  # a ring pass
            per_rank = launch(run_configs, hosts, args=([config],), stall_s=stall_s,
                              **launch_kw)  # fmt: skip
            results = [r[0] for r in per_rank]
            measured_all = [max(t) for t in zip(*(r["forward_s"] for r in results), strict=True)]
            predicted_all = None
        bar.advance("predicting; bootstrap of the probes for the intervals", 1 - paired)
        sim, hw = predict(calibration, **shape)
        # paired: each repeat against its own prediction (the probes taken around it)
        pairs = zip(measured_all, predicted_all or [], strict=True)
        paired_ratios = [_ratio(m, p) for m, p in pairs] if paired else None
        spread = _bootstrap(own if paired else calibration, measured_all, shape, draws,
                            ratios=paired_ratios)  # fmt: skip
    run = summarize_run(results, config)
    passes = [[r["rings"][i][j] for r in per_rank] for i in range(repeats)
              for j in range(len(per_rank[0]["rings"][i]))] if paired else [results]  # fmt: skip
    measured_pass, records = typical_pass(passes, float(np.median(measured_all)))
    measured_tl = timeline_from_records(records)
    predicted_tl = sim.timeline
    measured_steps, predicted_steps = step_durations(measured_tl), step_durations(predicted_tl)
    measured = float(np.median(measured_all))
    predicted = float(sim.summary()["total_time_s"])
    medians_ratio = _ratio(measured, predicted)
    # the timer starts every host ``pass_overhead_s`` late (setup, start skew), while a rank's
    # own clock starts at its first step: both tables count that time outside the steps
    predicted_steps[0] -= hw.pass_overhead_s
    threshold = _threshold(hw, shape, calibration.dtype)
    block = seq_len // hosts
    threshold_ci = [min(spread["threshold"][0], threshold), max(spread["threshold"][1], threshold)]
    predicted_ci = [min(spread["predicted"][0], predicted), max(spread["predicted"][1], predicted)]
    measured_ci = spread["measured"]
    report = {
        "hosts": hosts,
        "backend": backend,
        "seq_len": seq_len,
        "block_tokens": block,
        "layout": layout,
        "causal": causal,
        "heads": heads,
        "kv_heads": kv_heads or heads,
        "head_dim": head_dim,
        "dtype": calibration.dtype,
        "repeats": repeats,
        "threads_per_rank": threads,
        "measured_time_s": measured,
        "measured_ci95": measured_ci,
        "measured_times_s": measured_all,
        "predicted_times_s": predicted_all or [predicted],
        "calibration": "paired (before every repeat), pooled" if paired else "given",
        "measured_makespan_s": measured_tl.makespan,
        "measured_wait_s": float(np.max(measured_tl.meta["wait"].sum(axis=0))),
        "predicted_time_s": predicted,
        "predicted_ci95": predicted_ci,
        "intervals_overlap": overlaps(predicted_ci, measured_ci),
        "ratio": float(np.median(paired_ratios)) if paired else medians_ratio,
        "ratio_ci95": spread["ratio"],
        "ratio_of_medians": medians_ratio,
        "ratios": paired_ratios or [medians_ratio],
        "max_abs_error": run.get("max_abs_error"),
        "overlap_threshold_tokens": threshold,
        "overlap_threshold_ci95": threshold_ci,
        "regime": regime(block, threshold_ci),
        "overlap_fraction": calibration.overlap_fraction(),
        "overlap_efficiency": hw.overlap_efficiency,
        "simulated_overlap": sim.config.overlap,
        "predicted_compute_s": float(sim.summary()["compute_time_s"]),
        "predicted_exposed_comm_s": float(sim.summary()["exposed_comm_s"]),
        "probe_quality": calibration.quality(),
        "parameter_ci95": spread["parameters"],
        "steps": [
            {"step": s, "measured_s": float(m), "predicted_s": float(p), "ratio": float(m / p)}
            for s, (m, p) in enumerate(zip(measured_steps, predicted_steps, strict=True))
        ],
        "outside_steps": _row(
            measured_pass - measured_steps.sum(), predicted - predicted_steps.sum()
        ),
        "pass": _row(measured_pass, predicted),
        "profile": asdict(hw),
    }
    if trace is not None:
        from ringsim.views.trace import write_chrome_trace

        write_chrome_trace(measured_tl, f"{trace}-measured.json")
        write_chrome_trace(predicted_tl, f"{trace}-predicted.json")
        report["traces"] = [f"{trace}-measured.json", f"{trace}-predicted.json"]
    return report


def typical_pass(rings: Sequence[Sequence[dict]], median: float) -> tuple[float, list[dict]]:
    """The timed pass closest to ``median``: ``(its time, every rank's forward timeline)``.
    ``rings``: per ``run_ring`` call, every rank's result (with ``forward_s`` and
    ``forward_timelines``, one per timed pass); a pass's time is its slowest rank's."""
    best = None
    for ranks in rings:
        for p, seconds in enumerate(np.max([r["forward_s"] for r in ranks], axis=0)):
            if best is None or abs(seconds - median) < abs(best[0] - median):
                best = (float(seconds), [r["forward_timelines"][p] for r in ranks])
    if best is None:
        raise ValueError("no timed pass to show")
    return best


def _ratio(measured: float, predicted: float) -> float:
    return measured / predicted if predicted > 0 else math.inf


def _row(measured: float, predicted: float) -> dict:
    return {"measured_s": float(measured), "predicted_s": float(predicted),
            "ratio": _ratio(measured, predicted)}  # fmt: skip


def _bootstrap(probes, measured: Sequence[float], shape: dict, draws: int,
               ratios: Sequence[float] | None = None) -> dict:  # fmt: skip
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
        sim, hw = predict(cal, **shape)
        out = {"time": float(sim.summary()["total_time_s"]), "hardware": hw,
               "threshold": _threshold(hw, shape, cal.dtype)}  # fmt: skip
        cache[tuple(idx)] = out
        return out

    return bootstrap_intervals(measured, predict_of, draws=draws, ratios=ratios)


def _threshold(hw, shape: dict, dtype: str) -> float:
    """The calibrated overlap threshold (tokens per host) of this run's shape."""
    from ringsim.timer.cost import overlap_threshold

    heads = shape["heads"]
    return float(overlap_threshold(hw, heads=heads, kv_heads=shape["kv_heads"] or heads,
                                   head_dim=shape["head_dim"], dtype=dtype))  # fmt: skip


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
  torchrun --nproc-per-node 8 -m kernels.distributed.ring --seq-len 65536   (NCCL, on GPUs)""",
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
        "--progress", action=argparse.BooleanOptionalAction, default=None,
        help="say on stderr what runs (default: on, off with --json)",
    )  # fmt: skip
    return parser


def check_measure_args(args: argparse.Namespace) -> tuple[int, Calibration | None]:
    """Every flag of ``ringsim measure`` checked before any rank starts (``ValueError`` naming
    the flag): the ring's shape as ``simulate`` checks it (``check_ring_shape``), at least two
    ranks, the backend's device, how many ranks this machine holds, the ``--trace`` files and
    the ``--calibration`` file. Returns the sequence length and the calibration (or None)."""
    from kernels.distributed.admission import check_backend, check_local_ranks
    from ringsim.files import check_outputs
    from ringsim.timer.engine.config import check_ring_shape
    from ringsim.values import parse_seq_len

    seq_len = parse_seq_len(args.seq_len)
    if args.hosts < 2:
        raise ValueError(
            f"--hosts must be at least 2 for a real ring (ranks exchange blocks), got {args.hosts}"
        )
    check_ring_shape(
        hosts=args.hosts, seq_len=seq_len, heads=args.heads, kv_heads=args.kv_heads,
        head_dim=args.head_dim, layout=args.layout, causal=args.causal,
    )  # fmt: skip
    check_backend(args.backend, args.hosts)
    check_local_ranks(args.hosts, problem_bytes=_rank_tensor_bytes(args, seq_len))
    if args.trace is not None:
        if not args.trace.strip() or args.trace.endswith(("/", os.sep)):
            raise ValueError(f"--trace must be a path prefix such as /tmp/ring, got {args.trace!r}")
        args.trace_measured = f"{args.trace}-measured.json"
        args.trace_predicted = f"{args.trace}-predicted.json"
        check_outputs(args, {"trace_measured": ("--trace", None),
                             "trace_predicted": ("--trace", None)})  # fmt: skip
    calibration = None
    if args.calibration is not None:
        calibration = load_calibration(args.calibration, args.backend, args, seq_len)
    return seq_len, calibration


def _rank_tensor_bytes(args: argparse.Namespace, seq_len: int) -> float:
    """Bytes of one rank's tensors, roughly: ``RunConfig.inputs`` draws the whole q, k, v and
    dout in float32 on every rank (twice: drawn, then cast), and the block kernel holds fp32
    scores of a ``TILE`` of queries against the block's keys per head."""
    from kernels.blocks.torch_block import TILE

    kv_heads = args.kv_heads or args.heads
    whole = (2 * args.heads + 2 * kv_heads) * seq_len * args.head_dim * 4
    block = seq_len // args.hosts
    return 2.0 * whole + args.heads * min(block, TILE) * block * 4


def load_calibration(
    path: str, backend: str, args: argparse.Namespace, seq_len: int
) -> Calibration:
    """The ``--calibration`` data (``<stem>-calibration.json`` beside a profile), checked by
    building this run's profile from it; every failure a ``ValueError`` naming the file."""
    flag = f"--calibration {path!r}"
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"{flag} could not be read: {err}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{flag} is not valid JSON (empty or truncated?): {err}") from None
    if not isinstance(data, dict):
        raise ValueError(
            f"{flag} must hold a JSON object (the calibration data that `ringsim calibrate` "
            f"writes beside its profile), got a {type(data).__name__}"
        )
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
        calibration.hardware(block_tokens=seq_len // args.hosts, heads=args.heads,
                             head_dim=args.head_dim)  # fmt: skip
    except (ArithmeticError, LookupError, TypeError, ValueError, AttributeError) as err:
        raise ValueError(
            f"{flag} does not give a profile for this run: {type(err).__name__}: {err}"
        ) from None
    return calibration


def measure_main(argv: Sequence[str] | None = None) -> int:
    """``ringsim measure --backend gloo --hosts P --seq-len N [...] [--json]``."""
    from ringsim.files import json_text

    args = build_parser().parse_args(argv)
    seq_len, calibration = check_measure_args(args)  # every flag, before any rank starts
    report = measure(
        hosts=args.hosts, seq_len=seq_len, heads=args.heads,
        kv_heads=args.kv_heads, head_dim=args.head_dim, layout=args.layout, causal=args.causal,
        repeats=args.repeats, backend=args.backend, calibration=calibration,
        threads=args.threads, trace=args.trace,
        progress=not args.json if args.progress is None else args.progress,
    )  # fmt: skip
    if args.json:
        print(json_text(report, indent=2))
        return 0
    t_lo, t_hi = report["overlap_threshold_ci95"]
    print(
        f"{report['hosts']} hosts, {report['seq_len']} tokens ({report['block_tokens']}/host), "
        f"{report['layout']}, {'causal' if report['causal'] else 'full'}, {report['backend']}: "
        f"{report['regime']} (overlap threshold {report['overlap_threshold_tokens']:.0f} tokens, "
        f"95% {t_lo:.0f} to {t_hi:.0f})"
    )
    print(f"{'step':>6} {'measured ms':>12} {'predicted ms':>13} {'ratio':>6}")
    rows = [(row["step"], row) for row in report["steps"]]
    for name, row in [*rows, ("other", report["outside_steps"]), ("pass", report["pass"])]:
        print(
            f"{name:>6} {row['measured_s'] * 1e3:>12.3f} {row['predicted_s'] * 1e3:>13.3f} "
            f"{row['ratio']:>6.2f}"
        )
    print(
        "the timed pass nearest the median (other: its time outside the steps: setup, the "
        f"ranks' start skew, the final sync); below, the median of {report['repeats']} repeats"
    )
    for line in interval_lines(report):
        print(line)
    if report["max_abs_error"] is not None:
        print(f"max |error| vs float64 reference: {report['max_abs_error']:.2e}")
    return 0
