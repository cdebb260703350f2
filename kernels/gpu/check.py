"""One prepared GPU check (under 8 minutes): correctness, speed, the device's profile, and
simulated vs measured. The one command a session with a GPU runs first:

    python -m kernels.gpu.check --out results/gpu-<device>-<date>.json

(``--out`` defaults to ``$OUT/gpu-<device>-<date>.json``, else ``results/``; ``--quick`` for a
smoke run; ``--sections`` to choose.) It writes that JSON, rewritten after every section so a
timeout still leaves what was done, a figure beside it (same name, ``.png``) and the device's
profile as a hardware file (``<name>-profile.json``: ``ringsim simulate --hardware FILE``).
Sections, each guarded (an exception is recorded in the JSON and the next section runs; inside a
section one failing case or row is recorded in its row) and skipped when the time budget left
is below its estimate:

1. ``correctness``: Triton forward/backward in fp32, bf16 and fp16 (causal or not, GQA, a
   ragged length) against float64 SDPA (math backend) on the same inputs, beside SDPA's own
   error in that dtype; zigzag block pairs against the torch path.
2. ``speed``: TFLOP/s of the Triton forward and backward against SDPA's flash and cuDNN
   backends, bf16, ``d`` in {64, 128}, blocks 1K-16K, causal or not (16K tokens per call).
   First a tile search (``kernels.blocks.tiles.tile_candidates`` for this GPU's arch) per ``d``.
3. ``calibration``: this GPU's profile: the block kernel's curve (bf16 forward vs block size)
   and the host link (pinned host-to-device copies), ``kernels.calibration.calibrate`` backend
   ``cuda``.
4. ``ring_member``: one ring member emulated on one GPU (block ``s`` computes on one stream
   while block ``s + 1`` arrives on another as a pinned host-to-device copy, a real
   bandwidth-limited link), against ``ringsim.timer.simulate`` on that profile, for blocks
   below and above the overlap threshold.
5. ``nccl_ring``: the full ring over NCCL when two or more GPUs are visible; its zigzag run
   is also recorded by ``torch.profiler`` (``<out>-traces/rank<r>.json.gz``) and compared,
   step by step, with the same ring simulated on the calibrated profile (``ringsim
   compare``'s reader and study; the traces can be compared again with ``ringsim compare``).

It needs only what the GPU machine has: Python 3.12, torch 2.11 (CUDA 13), Triton 3.6, numpy
and matplotlib. Triton 3.6 and 3.9 differ in nothing used here (``triton.testing.do_bench``
takes ``return_mode`` in both; see ``kernels.blocks.triton_block`` for the kernels). The plans below
(cases, sizes, shapes) are also what ``kernels.gpu.aot`` compiles for sm_80 and sm_90.

It is written without a GPU at hand (``kernels.gpu.aot`` compiles every launch for sm_80 and
sm_90; ``tests/test_gpu_check.py`` runs the rest on the CPU): it must work the first time, and
it records, rather than hides, whatever does not.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import time
import traceback
from collections.abc import Callable, Sequence
from datetime import date
from pathlib import Path

SECTIONS = ("correctness", "speed", "calibration", "ring_member", "nccl_ring")
ESTIMATES_S = {
    "correctness": 45,
    "speed": 170,
    "calibration": 50,
    "ring_member": 60,
    "nccl_ring": 90,  # the timed runs, then one more under the profiler
}

# ------------------------------------------------------------------------------------------
# Pure-Python scaffolding (tested on CPU: tests/test_gpu_check.py)
# ------------------------------------------------------------------------------------------


class Budget:
    """Wall-clock budget: ``allows(estimate)`` is False once less than ``estimate`` is left."""

    def __init__(self, total_s: float, clock: Callable[[], float] = time.monotonic):
        if not (total_s > 0 and math.isfinite(total_s)):
            raise ValueError(f"budget must be a positive number of seconds, got {total_s!r}")
        self.total_s, self.clock = float(total_s), clock
        self.start = clock()

    def elapsed(self) -> float:
        return self.clock() - self.start

    def left(self) -> float:
        return self.total_s - self.elapsed()

    def allows(self, estimate_s: float) -> bool:
        return self.left() >= estimate_s


class Report:
    """The JSON document, written atomically to ``path`` after every change."""

    def __init__(self, path: Path, header: dict):
        self.path = Path(path)
        self.data = {**header, "sections": {}, "errors": {}, "skipped": {}}
        self.write()

    def write(self) -> None:
        from ringsim.files import to_jsonable, write_json

        write_json(self.path, to_jsonable(self.data))  # atomic, strict (a NaN is null)

    def run(self, name: str, fn: Callable[[], dict], budget: Budget, estimate_s: float) -> None:
        """Run one section: its result, or its error, or why it was skipped."""
        if not budget.allows(estimate_s):
            self.data["skipped"][name] = (
                f"{budget.left():.0f} s left, section needs about {estimate_s:.0f} s"
            )
            self.write()
            return
        start = time.monotonic()
        try:
            result = fn()
            result["section_s"] = time.monotonic() - start
            self.data["sections"][name] = result
        except Exception as err:  # record and go on: one broken section must not lose the rest
            self.data["errors"][name] = f"{type(err).__name__}: {err}\n{traceback.format_exc()}"
        self.data["elapsed_s"] = budget.elapsed()
        self.write()


def _jsonable(x):
    if hasattr(x, "tolist"):
        return x.tolist()
    return str(x)


def device_slug(name: str) -> str:
    """``"NVIDIA H200"`` -> ``"h200"``: short, lower case, safe in a file name."""
    name = re.sub(r"^(nvidia|amd)\s+", "", name.strip(), flags=re.IGNORECASE)
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return slug.split("-")[0] if slug else "gpu"


def default_out(device: str, today: str | None = None) -> Path:
    today = today or date.today().isoformat()
    base = os.environ.get("OUT")
    folder = Path(base) if base else Path(__file__).resolve().parents[2] / "results"
    return folder / f"gpu-{device_slug(device)}-{today}.json"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m kernels.gpu.check", description=__doc__)
    parser.add_argument("--out", default=None, help="JSON path (default $OUT/gpu-<dev>-<date>)")
    parser.add_argument("--budget-s", type=float, default=420.0, help="stop starting sections")
    parser.add_argument("--sections", default=",".join(SECTIONS))
    parser.add_argument("--quick", action="store_true", help="fewer sizes (a smoke run)")
    args = parser.parse_args(argv)
    unknown = set(args.sections.split(",")) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections {sorted(unknown)}; known: {', '.join(SECTIONS)}")
    if not (args.budget_s > 0):
        parser.error(f"--budget-s must be positive, got {args.budget_s}")
    return args


# ------------------------------------------------------------------------------------------
# The figure (from the JSON alone: tests/test_gpu_check.py draws one from made-up data)
# ------------------------------------------------------------------------------------------

IMPL_STYLE = {"triton": "C0", "sdpa_flash": "C1", "sdpa_cudnn": "C2"}


def _speed_panel(ax, rows: list[dict], pass_: str) -> None:
    drawn = False
    for impl, color in IMPL_STYLE.items():
        for d, marker in ((64, "o"), (128, "s")):
            for causal, style in ((False, "-"), (True, ":")):
                pts = sorted(
                    (r["c"], r[f"{impl}_{pass_}_tflops"])
                    for r in rows
                    if r.get("d") == d
                    and r.get("causal") == causal
                    and isinstance(r.get(f"{impl}_{pass_}_tflops"), (int, float))
                )
                if pts:
                    label = f"{impl} d={d}" + (" causal" if causal else "")
                    ax.plot(
                        *zip(*pts, strict=True),
                        style,
                        marker=marker,
                        color=color,
                        label=label,
                        ms=4,
                    )
                    drawn = True
    ax.set_xscale("log", base=2)
    ax.set_xlabel("block tokens c")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"{'forward' if pass_ == 'fwd' else 'backward'} (bf16)")
    if drawn:
        ax.legend(fontsize=5, ncol=2)
    else:
        ax.text(0.5, 0.5, "no speed rows", ha="center", transform=ax.transAxes)


def _correctness_panel(ax, cases: list[dict]) -> None:
    cases = [c for c in cases if "triton_max_rel_err" in c]
    if not cases:
        ax.text(0.5, 0.5, "no correctness cases", ha="center", transform=ax.transAxes)
        return
    xs = range(len(cases))
    for key, marker, label in (
        ("triton_max_rel_err", "o", "Triton"),
        ("sdpa_max_rel_err", "x", "SDPA (same dtype)"),
    ):
        ax.scatter(xs, [max(c[key].values()) for c in cases], marker=marker, label=label, s=14)
    ax.step(xs, [c["tolerance"] for c in cases], where="mid", color="k", lw=0.8, label="tol")
    ax.set_yscale("log")
    ax.set_xticks(list(xs))
    ax.set_xticklabels(
        [f"{c['dtype'][:4]} d{c['d']} {'C' if c['causal'] else 'F'}" for c in cases],
        rotation=90,
        fontsize=5,
    )
    ax.set_ylabel("max rel. error vs float64")
    ax.set_title("correctness")
    ax.legend(fontsize=6)


def _ring_panel(ax, runs: list[dict]) -> None:
    runs = [r for r in runs if "ratio" in r]
    if not runs:
        ax.text(0.5, 0.5, "no ring-member runs", ha="center", transform=ax.transAxes)
        return
    xs = range(len(runs))
    ax.bar([x - 0.2 for x in xs], [r["measured_time_s"] * 1e3 for r in runs], 0.4, label="measured")
    ax.bar(
        [x + 0.2 for x in xs], [r["predicted_time_s"] * 1e3 for r in runs], 0.4, label="simulated"
    )
    for x, r in zip(xs, runs, strict=True):
        ax.annotate(
            f"{r['ratio']:.2f}",
            (x, r["measured_time_s"] * 1e3),
            ha="center",
            fontsize=6,
            xytext=(0, 2),
            textcoords="offset points",
        )
    ax.set_xticks(list(xs))
    ax.set_xticklabels([f"{r['block_tokens']}" for r in runs])
    ax.set_yscale("log")
    ax.set_xlabel("block tokens (4-host ring member)")
    ax.set_ylabel("ms")
    ax.set_title("ring member: measured / simulated")
    ax.legend(fontsize=6)


def plot_report(data: dict, path: str | Path) -> Path:
    """The figure of one report: speed (forward, backward), correctness, ring member."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sections = data.get("sections", {})
    fig, axes = plt.subplots(2, 2, figsize=(10, 7.5))
    rows = sections.get("speed", {}).get("rows", [])
    _speed_panel(axes[0, 0], rows, "fwd")
    _speed_panel(axes[0, 1], rows, "bwd")
    _correctness_panel(axes[1, 0], sections.get("correctness", {}).get("cases", []))
    _ring_panel(axes[1, 1], sections.get("ring_member", {}).get("runs", []))
    fig.suptitle(
        f"{data.get('device', 'no GPU')}  torch {data.get('torch', '?')}  "
        f"Triton {data.get('triton', '?')}  {data.get('date', '')}"
    )
    fig.tight_layout()
    path = Path(path)
    from ringsim.views.plots import save_figure

    save_figure(plt, fig, path)  # atomic, the format from the suffix
    return path


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    budget = Budget(args.budget_s)
    header = {
        "script": "kernels.gpu.check",
        "date": date.today().isoformat(),
        "host": platform.node(),
        "budget_s": args.budget_s,
        "quick": args.quick,
    }
    device = "none"
    try:
        import torch
        import triton

        header.update(torch=torch.__version__, triton=triton.__version__)
        if torch.cuda.is_available():
            device = torch.cuda.get_device_name(0)
            header.update(
                device=device,
                gpus=torch.cuda.device_count(),
                capability=list(torch.cuda.get_device_capability(0)),
            )
    except Exception as err:
        header["import_error"] = f"{type(err).__name__}: {err}"
    report = Report(Path(args.out) if args.out else default_out(device), header)
    if device == "none":
        report.data["errors"]["device"] = "no CUDA device visible: nothing measured"
        report.write()
        print(json.dumps(report.data, indent=2, default=_jsonable))
        return 1
    from kernels.gpu import sections as gs

    def calibration():
        return report.data["sections"].get("calibration", {}).get("calibration")

    sections = {
        "correctness": lambda: gs.section_correctness(args.quick),
        "speed": lambda: gs.section_speed(args.quick, budget),
        "calibration": lambda: gs.section_calibration(args.quick),
        "ring_member": lambda: gs.section_ring_member(args.quick, calibration()),
        "nccl_ring": lambda: gs.section_nccl_ring(
            args.quick, calibration(), traces=report.path.with_name(report.path.stem + "-traces")
        ),
    }
    chosen = args.sections.split(",")
    for name in SECTIONS:
        if name in chosen:
            print(f"[{budget.elapsed():6.1f} s] {name}", flush=True)
            report.run(name, sections[name], budget, ESTIMATES_S[name])
    profile = report.data["sections"].get("calibration", {}).get("profile")
    if profile:  # the device as a hardware file: `ringsim simulate --hardware FILE`
        report.data["profile_file"] = str(save_device_profile(profile, report.path))
    try:
        report.data["figure"] = str(plot_report(report.data, report.path.with_suffix(".png")))
    except Exception as err:  # the JSON is what matters; say why there is no figure
        report.data["errors"]["figure"] = f"{type(err).__name__}: {err}"
    report.write()
    print(f"wrote {report.path} after {budget.elapsed():.0f} s", flush=True)
    return 0 if not report.data["errors"] else 2


def save_device_profile(profile: dict, report_path: Path) -> Path:
    """Write the calibration section's ``profile`` (a ``Hardware``'s fields) beside the report
    as ``<report>-profile.json`` (``ringsim.timer.machine.hardware.save_profile``), the file
    ``--hardware`` loads; returns its path."""
    from ringsim.timer.machine.hardware import Hardware, save_profile

    path = report_path.with_name(f"{report_path.stem}-profile.json")
    save_profile(Hardware(**profile), path)
    return path


if __name__ == "__main__":
    raise SystemExit(main())
