"""Measure this machine and save a hardware profile the simulator can load.

Two things decide a ring's timing, and both are measured here with the code the ring runs:

* **block compute**: ``block_attention`` of one ``c x c`` block (the ring's kernel, its
  backend, its thread count) for several ``c``. Small blocks are dominated by a fixed cost per
  call (dispatch, allocation), large ones by the FLOP rate, so the times are fitted as
  ``t(c) = overhead + flops(c) / rate``.
* **the link**: the same transport and the same calls as the ring (``batch_isend_irecv`` over
  gloo or NCCL). *Ping-pong* (one message at a time, one way) gives the textbook latency and
  bandwidth; *exchange* (both ranks send and receive at once, as every ring step does) gives
  what a ring step actually gets when both directions and both processes share the machine.
  Each is fitted as ``t(n) = latency + n / bandwidth``.

On the gloo backend all measurements run inside ``hosts`` local processes started like the
ring's (one torch thread each, computing at the same time), so contention for the cores is
part of what is measured. ``backend="cuda"`` measures one GPU: the Triton kernel and, as its
"link", host-to-device copies from pinned memory (the emulated ring member of
``kernels.gpu.check``).

Two more measurements feed the two kernel terms of ``ringsim.timer.machine.hardware.Hardware``:

* **masked blocks** (``masked``): the blocks a causal ring computes with a mask (the diagonal
  block of the contiguous and the zigzag layout, zigzag's off-diagonal halves from both sides),
  each timed with the tile-granular fraction of the block it computes. On the torch path a
  masked block runs a loop over query tiles that builds and applies the mask tile by tile: a
  different kernel, with its own rate. ``masked_speed`` is that rate over the full block's.
* **a lone host** (``solo``): the full block while the other ranks wait. Local ranks share the
  machine's cores, caches, memory bandwidth and clock boost, so a rank computing alone (a
  contiguous causal ring's last steps, where the others skip) is faster than one computing
  beside the others, as the ``compute`` rows measure. ``solo_speed`` is that factor.

``Calibration.hardware(block_tokens=c)`` builds the profile for blocks of ``c`` tokens:
``block_overhead_s`` is the fixed cost per call (the time of the smallest block measured, less
its FLOPs at the large-block rate), and the FLOP rate is the one that, with that overhead,
reproduces the measured full block at ``c``; ``masked_speed`` and ``solo_speed`` come from the
rows at (or nearest to) ``c``. The saved default profile uses the largest block measured. The
raw data goes beside it as JSON (``Calibration.to_json``).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
from collections.abc import Sequence
from dataclasses import asdict
from datetime import date
from pathlib import Path

from kernels.calibration.paired import attempt_blocks
from kernels.calibration.probes import (
    measure_compute,
    measure_link_h2d,
    measure_link_p2p,
    measure_masked,
    measure_overlap,
    measure_ring_pass,
    measure_solo,
    reprobe,
)
from kernels.calibration.profile import (
    TORCH_DTYPES,
    Calibration,
    bootstrap,
    combine_ranks,
    parameter_intervals,
)
from kernels.distributed.progress import Progress, stall_window
from kernels.distributed.ring import ring_failure_as_os_error

BACKENDS = ("gloo", "nccl", "cuda")
DEFAULT_SIZES = (64, 128, 256, 512, 1024, 2048)
DEFAULT_BYTES = tuple(2**p for p in range(10, 25, 2))  # 1 KiB .. 16 MiB


def _probe_names(spec: dict) -> list[str]:
    """The probes ``_rank_worker`` runs for ``spec``, in order (one progress step each)."""
    names = ["block compute", "link"]
    names += [f"masked blocks at {c}" for c in spec.get("masked_sizes", ())]
    if spec["backend"] == "gloo":
        names += ["lone rank"] if spec.get("solo_sizes") else []
        names += [f"overlap at {c}" for c in spec.get("step_sizes", ())]
        names += ["ring pass"] if spec.get("step_sizes") else []
    return names


def _rank_worker(rank: int, hosts: int, spec: dict, channel=None) -> dict:
    """Inside a launched rank: compute curve (all ranks at once) and the link; every probe
    re-run while its samples spread too wide (``reprobe``); rank 0 reports each probe to
    ``channel`` (``kernels.distributed.progress``)."""
    import torch
    import torch.distributed as dist

    from kernels.distributed.progress import pulsing, report

    device = "cuda" if spec["backend"] == "nccl" else "cpu"
    received = device == "cpu"  # local ranks: blocks computed as they arrive (_received_samples)
    reps = spec["repeats"]
    shape = dict(heads=spec["heads"], head_dim=spec["head_dim"], dtype=spec["dtype"])
    masked_at = lambda c: (
        lambda: measure_masked(
            c, **shape, device=device, repeats=reps, barrier=dist.barrier, received=received
        )
    )
    overlap_at = lambda c: lambda: [measure_overlap(c, **shape, repeats=3 * reps)]
    probes = {
        "block compute": lambda: measure_compute(
            spec["sizes"],
            **shape,
            device=device,
            repeats=reps,
            barrier=dist.barrier,
            received=received,
        ),
        "link": lambda: measure_link_p2p(spec["bytes"], repeats=reps, device=device),
        **{f"masked blocks at {c}": masked_at(c) for c in spec.get("masked_sizes", ())},
        "lone rank": lambda: measure_solo(
            spec.get("solo_sizes", ()), **shape, repeats=reps, received=True
        ),
        **{f"overlap at {c}": overlap_at(c) for c in spec.get("step_sizes", ())},
        "ring pass": lambda: [
            measure_ring_pass(layout="contiguous", dtype=spec["dtype"], repeats=3 * reps)
        ],
    }
    report(channel, f"rank {rank} of {hosts} started")
    done = {}
    for name in _probe_names(spec):
        if rank == 0:
            report(channel, name)
        done[name] = reprobe(pulsing(probes[name]))  # every attempt: a sign of life
        if rank == 0:
            report(channel, f"{name} done", 1)
    by_kind = lambda prefix: [
        row for name, rows in done.items() if name.startswith(prefix) for row in rows
    ]
    return {
        "compute": done["block compute"],
        **done["link"],
        "masked": by_kind("masked"),
        "solo": done.get("lone rank", []),
        "overlap": by_kind("overlap"),
        "ring_pass": done.get("ring pass", []),
        "threads": torch.get_num_threads(),
    }


def _stall_s(spec: dict, hosts: int, timeout_s: float) -> float:
    """How long a calibrating rank may be silent: one attempt of its longest probe at the
    largest block it times (each attempt says ``alive``;
    ``kernels.calibration.paired.attempt_blocks``)
    or, the block compute, every size's samples (counted as the largest)."""
    sizes = [*spec["sizes"], *spec["masked_sizes"], *spec["solo_sizes"], *spec["step_sizes"]]
    samples = max(spec["repeats"], 3) + 1
    blocks = max(
        attempt_blocks(spec["repeats"], hosts, 3 * spec["repeats"]),
        len(spec["sizes"]) * (samples + 1),
    )
    return stall_window(
        timeout_s,
        block_tokens=max(sizes),
        heads=spec["heads"],
        head_dim=spec["head_dim"],
        blocks=blocks,
    )


def _combine(per_rank: list[dict], key: str) -> list[dict]:
    """Rows of every rank merged: the slowest rank's time (the ring waits for it)."""
    return [combine_ranks(same) for same in zip(*(r[key] for r in per_rank), strict=True)]


def calibrate_data(
    backend: str = "gloo",
    *,
    hosts: int = 2,
    heads: int = 4,
    head_dim: int = 64,
    dtype: str | None = None,
    sizes: Sequence[int] = DEFAULT_SIZES,
    link_bytes: Sequence[int] = DEFAULT_BYTES,
    repeats: int = 5,
    threads: int = 1,
    timeout_s: float = 120.0,
    masked_sizes: Sequence[int] = (),
    solo_sizes: Sequence[int] = (),
    step_sizes: Sequence[int] = (),
    progress: bool = False,
) -> Calibration:
    """Run the measurements for ``backend`` and return them with their fits; ``masked_sizes``,
    ``solo_sizes`` and ``step_sizes``: the block sizes at which to time masked blocks, a lone
    rank, and a ring step's overlap and a ring call's fixed cost (the last three on local
    gloo ranks only; by default none: neutral terms). ``progress``: say on stderr which probe
    runs (``kernels.distributed.progress``)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    dtype = dtype or ("fp32" if backend == "gloo" else "bf16")
    if dtype not in TORCH_DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(TORCH_DTYPES)}, got {dtype!r}")
    if len(sizes) < 2 or len(link_bytes) < 2:
        raise ValueError("sizes and link_bytes need at least two values each to fit a line")
    cal = Calibration(backend, dtype, heads, head_dim, threads, hosts, machine=platform.node())
    cal.when = date.today().isoformat()
    if backend == "cuda":
        import torch

        cal.machine = torch.cuda.get_device_name(0)
        props = torch.cuda.get_device_properties(0)
        cal.chip = {
            "compute_capability": (props.major, props.minor),
            "sms": props.multi_processor_count,
        }
        cal.hosts = 1
        shape = dict(heads=heads, head_dim=head_dim, dtype=dtype, device="cuda", repeats=repeats)
        cal.compute = reprobe(lambda: measure_compute(sizes, **shape))
        cal.masked = [
            row for c in masked_sizes for row in reprobe(lambda c=c: measure_masked(c, **shape))
        ]
        h2d = reprobe(lambda: measure_link_h2d(link_bytes, repeats=repeats))
        cal.pingpong = cal.exchange = h2d
        return cal
    from kernels.distributed.launch import launch

    spec = dict(
        backend=backend,
        sizes=list(sizes),
        bytes=list(link_bytes),
        heads=heads,
        head_dim=head_dim,
        dtype=dtype,
        repeats=repeats,
        masked_sizes=list(masked_sizes),
        solo_sizes=list(solo_sizes),
        step_sizes=list(step_sizes),
    )
    with Progress(len(_probe_names(spec)), "calibrate", enabled=progress) as bar:
        bar.advance(f"starting {hosts} {backend} ranks", 0)
        per_rank = launch(
            _rank_worker,
            hosts,
            args=(spec, bar.channel),
            backend=backend,
            timeout_s=timeout_s,
            threads=threads,
            stall_s=_stall_s(spec, hosts, timeout_s),
        )
    for key in ("compute", "pingpong", "exchange", "masked", "solo", "overlap", "ring_pass"):
        setattr(cal, key, _combine(per_rank, key))
    return cal


def calibrate(backend: str = "gloo", *, path: str | Path | None = None, **kwargs):
    """Measure this machine (see ``calibrate_data``) and return its ``Hardware`` profile;
    with ``path``, save it there (``ringsim.timer.machine.hardware.save_profile``) and the raw data
    beside it (``<stem>-data.json``)."""
    cal = calibrate_data(backend, **kwargs)
    hw = cal.hardware()
    if path is not None:
        save_calibration(cal, path)
    return hw


def save_calibration(cal: Calibration, path: str | Path) -> tuple[Path, Path]:
    """The profile at ``path`` and the raw measurements at ``<stem>-data.json`` (a name the
    ``cpu-profile*.json`` preset glob also matches, so it is written as ``calibration``)."""
    from ringsim.files import write_json
    from ringsim.timer.machine.hardware import save_profile

    path = Path(path)
    save_profile(cal.hardware(), path)
    data_path = calibration_data_path(path)
    write_json(data_path, cal.to_json())
    return path, data_path


def calibration_data_path(path: Path) -> Path:
    """Where the raw data of the profile at ``path`` goes: ``profile`` in its name becomes
    ``calibration`` (else ``-calibration`` is appended)."""
    data_path = path.with_name(path.stem.replace("profile", "calibration") + ".json")
    if data_path == path:
        data_path = path.with_name(path.stem + "-calibration.json")
    return data_path


def default_profile_path(backend: str) -> Path:
    from ringsim.timer.machine.hardware import RESULTS_DIR

    kind = "cpu" if backend == "gloo" else "gpu"
    return RESULTS_DIR / f"{kind}-profile-{date.today().isoformat()}.json"


def _int_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    from ringsim.values import Parser, arg_type, parse_positive_int

    positive = lambda name: arg_type(parse_positive_int, name)
    parser = parser or Parser(
        prog="ringsim calibrate",
        description="Measure block compute and link; save a profile.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="""examples:
  ringsim calibrate                   2 gloo ranks; writes results/cpu-profile-<date>.json
  ringsim calibrate --no-save --json  print the fitted profile, write nothing
  ringsim calibrate --backend cuda --dtype bf16   (on a GPU: results/gpu-profile-<date>.json)
then: ringsim simulate --hardware cpu-calibrated --hosts 2 --seq-len 4K""",
    )
    parser.add_argument("--backend", choices=BACKENDS, default="gloo")
    parser.add_argument(
        "--hosts", type=positive("hosts"), default=2, help="local ranks (gloo/nccl)"
    )
    parser.add_argument("--heads", type=positive("heads"), default=4)
    parser.add_argument("--head-dim", type=positive("head_dim"), default=64)
    parser.add_argument("--dtype", choices=sorted(TORCH_DTYPES), default=None)
    parser.add_argument("--sizes", type=_int_list, default=list(DEFAULT_SIZES))
    parser.add_argument("--bytes", type=_int_list, default=list(DEFAULT_BYTES))
    parser.add_argument("--repeats", type=positive("repeats"), default=5)
    parser.add_argument(
        "--masked-sizes",
        type=_int_list,
        default=None,
        help="block sizes at which to time masked blocks (default: the largest of --sizes)",
    )
    parser.add_argument(
        "--solo-sizes",
        type=_int_list,
        default=None,
        help="block sizes at which to time a lone rank (default: the largest of --sizes)",
    )
    parser.add_argument(
        "--step-sizes",
        type=_int_list,
        default=None,
        help="block sizes at which to time a ring call's fixed cost (and, once, whether a "
        "transfer overlaps a step's compute; default: the largest of --sizes)",
    )
    parser.add_argument(
        "--threads", type=positive("threads"), default=1, help="torch threads per rank"
    )
    parser.add_argument("--out", default=None, help="profile path (default results/...)")
    parser.add_argument("--no-save", action="store_true")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="say on stderr what runs (default: on, off with --json)",
    )
    return parser


def check_calibrate_args(args: argparse.Namespace) -> Path | None:
    """Every flag of ``ringsim calibrate`` checked before any rank starts (``ValueError``
    naming the flag): at least two ranks for gloo/nccl, the backend's device, how many ranks
    this machine holds, and the profile and data files it will write. Returns the profile path
    (None with ``--no-save``)."""
    from kernels.distributed.admission import check_backend, check_local_ranks
    from ringsim.files import check_outputs

    if args.backend != "cuda":
        if args.hosts < 2:
            raise ValueError(
                f"--hosts must be at least 2 for {args.backend} (the link is timed between "
                f"ranks), got {args.hosts}"
            )
        largest = max(
            [
                *args.sizes,
                *(args.masked_sizes or ()),
                *(args.solo_sizes or ()),
                *(args.step_sizes or ()),
            ]
        )
        # a block's q, k, v, out and its fp32 scores per head, and the largest link message
        tensors = args.heads * (4 * largest * args.head_dim + largest * largest) * 4
        check_local_ranks(
            args.hosts, problem_bytes=tensors + 2 * max(args.bytes), threads=args.threads
        )
    check_backend(args.backend, args.hosts)
    if args.no_save:
        if args.out is not None:
            raise ValueError(f"--out {args.out} names the profile that --no-save does not write")
        return None
    args.out = str(default_profile_path(args.backend) if args.out is None else args.out)
    check_outputs(args, {"out": ("--out", ("json",))})
    args.data_out = str(calibration_data_path(Path(args.out)))
    check_outputs(args, {"out": ("--out", ("json",)), "data_out": ("--out", None)})
    return Path(args.out)


def calibrate_main(argv: Sequence[str] | None = None) -> int:
    """``ringsim calibrate [--backend gloo|nccl|cuda] [...] [--json]``."""
    args = build_parser().parse_args(argv)
    out = check_calibrate_args(args)  # every flag, before any rank starts
    with ring_failure_as_os_error():
        cal = calibrate_data(
            args.backend,
            hosts=args.hosts,
            heads=args.heads,
            head_dim=args.head_dim,
            dtype=args.dtype,
            sizes=args.sizes,
            link_bytes=args.bytes,
            repeats=args.repeats,
            threads=args.threads,
            masked_sizes=args.masked_sizes or [max(args.sizes)],
            solo_sizes=args.solo_sizes or [max(args.sizes)],
            step_sizes=args.step_sizes or [max(args.sizes)],
            progress=not args.json if args.progress is None else args.progress,
        )
    paths = None
    if not args.no_save:
        paths = save_calibration(cal, out)
    hw = cal.hardware()
    report = {
        "backend": cal.backend,
        "profile": {**asdict(hw)},
        **cal.summary(),
        "compute": cal.compute,
        "exchange": cal.exchange,
        "pingpong": cal.pingpong,
        "masked": cal.masked,
        "solo": cal.solo,
        "overlap": cal.overlap,
        "ring_pass": cal.ring_pass,
        "probe_quality": cal.quality(),
        "parameter_ci95": parameter_intervals([c.hardware() for c in bootstrap(cal)]),
        "saved": [str(p) for p in paths] if paths else None,
    }
    if args.json:
        from ringsim.files import to_jsonable

        print(json.dumps(to_jsonable(report), indent=2))  # a failed fit's NaN prints as null
    else:
        print(hw.source)
        for row in cal.compute:
            rate = row["flops"] / row["seconds"]
            print(
                f"  block {row['block_tokens']:6d}: {row['seconds'] * 1e3:8.3f} ms  "
                f"{rate / 1e9:7.2f} GFLOP/s"
            )
        for row in cal.exchange:
            print(
                f"  exchange {row['bytes']:9d} B: {row['seconds'] * 1e6:9.1f} us  "
                f"{row['bytes'] / row['seconds'] / 1e9:6.2f} GB/s"
            )
        quality = ", ".join(
            f"{name} {q['spread']:.0%} ({q['attempts']})"
            for name, q in report["probe_quality"].items()
        )
        print(f"  probe spread (relative IQR, tries): {quality}")
        for name, (lo, hi) in report["parameter_ci95"].items():
            print(f"  {name:>18} 95%: {lo:.4g} to {hi:.4g}")
        if paths:
            print("saved", *paths)
    return 0 if all(math.isfinite(v) for v in cal.summary().values()) else 1
