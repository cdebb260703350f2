"""What a whole-step prediction does not know, as ranges, and how wide its interval must be.

A step's parts are timed at published rates (``ringsim.timer.step.training``). What those
rates leave open is carried as ``Range``s (``ringsim.timer.machine.ranges``), each with its
source, and a step is timed at their ends (``StepScale``):

* ``saturated_matmul``: a GEMM benchmark runs in short bursts at the boost clock; a training
  step's back-to-back GEMMs pull the GPU to its power limit, where the clock settles lower. The
  ratio of the two rates, measured per dtype on the same GPU, is a fact of the device
  (``Hardware.saturated_matmul``); the point is the measured ratio (a step's GEMMs run
  saturated), the high end the benchmark's own rate. A device without one: the benchmark's.
* ``sustained_clock``: the clock a GPU holds through a training step under its power cap,
  over the clock the attention benchmarks ran at, a fact of the device
  (``Hardware.sustained_clock``; where none is sourced, the H100 SXM's stands in). The
  attention kernels scale with it (their power draw in a step is not measured, so the point is
  the benchmarks' clock); memory-bound ones (elementwise, the optimizer) barely do.
* ``gemm_library``: the GEMM rates are one autotuned sweep's (``ringsim.timer.step.gemm``);
  a framework calls cuBLAS, whose best shape on the same GPU is 3% faster than the sweep's
  top (stas00/ml-engineering's MAMF table, cited in ``gemm.py``).

The attention's own ranges (achieved send/recv bandwidth, host time per call, a lone thread
block's speed: ``ringsim.timer.machine.ranges``) and the kernel family where the backend is
unknown come on top (``ringsim.timer.studies.planner``). Where a run setting is unknown (a
recompute flavour, sequence parallelism, the attention backend), the published rows carry it
as a range of settings (``ringsim.timer.studies.published.Setting``).

What no range can show is what the model leaves out. ``STEP_MISS`` is the largest error
``ringsim validate`` finds on its whole-step rows (point prediction against the published
TFLOPS); a step interval the planner prints is never narrower than that
(``at_least_the_misses``), and a test recomputes the misses so the constant cannot fall behind
them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from ringsim.timer.machine.hardware import Hardware, get_hardware
from ringsim.timer.machine.ranges import Range

GEMM_LIBRARY = Range(
    1.0,
    1.0,
    792.1 / 766.0,
    "low",
    "the GEMM sweep (TileLang, autotuned; 766 TFLOP/s at its top) against cuBLAS's best bf16 "
    "shape on H100 SXM (792.1 TFLOP/s, stas00/ml-engineering 'Maximum Achievable Matmul "
    "FLOPS'): the library a framework calls may run up to 3% faster",
)
"""The GEMM library's range (module docstring): a fact of the GEMM sweep, not of a device."""

STEP_RANGES = ("sustained_clock", "saturated_matmul", "gemm_library")
"""The names of a whole step's ranges (module docstring), as ``assume`` names them."""

UNSOURCED_CLOCK_FROM = "h100-nvlink"
"""The preset whose sustained clock a device without its own stands in for: the one device
whose base and quoted clocks are sourced here (an estimate that a GPU under its power cap falls
as far below its quoted clock)."""


def step_ranges(hardware: Hardware) -> dict[str, Range]:
    """The ranges of a whole step on ``hardware``: its own ``sustained_clock``
    (``Hardware.sustained_clock``; a device without one takes ``UNSOURCED_CLOCK_FROM``'s, its
    source saying so), the GEMM library's, and its ``saturated_matmul`` per GEMM dtype (named
    ``saturated_matmul:bf16``, ...; none where the device has none)."""
    clock = hardware.sustained_clock
    if clock is None:
        clock = get_hardware(UNSOURCED_CLOCK_FROM).sustained_clock
        clock = replace(
            clock, source=f"{hardware.name} has no sourced clock; as the H100 SXM's: {clock.source}"
        )
    matmul = {f"saturated_matmul:{d}": r for d, r in hardware.saturated_matmul.items()}
    return {"sustained_clock": clock, "gemm_library": GEMM_LIBRARY, **matmul}


STEP_MISS = 0.20
"""The largest |error| of ``ringsim validate``'s whole-step point predictions (nemo-long,
llama3-t4: +18.4% on Llama 3's 128K row), rounded up to the next 5%: a printed step interval
spans at least this share of its point on either side. ``tests/test_step_settings.py``
recomputes the misses and fails if any exceeds it."""


@dataclass(frozen=True)
class StepScale:
    """Rates of a step's parts relative to their published benchmarks: ``clock`` (the
    attention kernels), ``gemm`` (the GEMM library), ``matmul`` (a saturated GEMM's rate per
    dtype, as ``(dtype, ratio)`` pairs; a dtype not named: 1)."""

    clock: float = 1.0
    gemm: float = 1.0
    matmul: tuple[tuple[str, float], ...] = ()

    def gemm_rate(self, dtype: str) -> float:
        """A ``dtype`` GEMM's rate over its benchmark's (fp16 runs at bf16's)."""
        key = "bf16" if dtype == "fp16" else dtype
        return dict(self.matmul).get(key, 1.0) * self.gemm


POINT = StepScale()
"""The benchmarks' own rates (every factor 1)."""


def step_scale(hardware: Hardware, assume: dict[str, str] | None = None) -> StepScale:
    """The ``StepScale`` on ``hardware`` at the ends ``assume`` names (``{"sustained_clock":
    "low"}``; every other range at its point); ``"slow"``/``"fast"`` pick the end that makes a
    step slower or faster."""
    assume = assume or {}
    for name in assume:
        if name not in STEP_RANGES:
            raise ValueError(
                f"assume: step range must be one of {', '.join(STEP_RANGES)}, got {name!r}"
            )
    ranges = step_ranges(hardware)
    at = {name: r.at(assume.get(name.split(":")[0], "point")) for name, r in ranges.items()}
    matmul = tuple(
        (name.split(":")[1], value)
        for name, value in at.items()
        if name.startswith("saturated_matmul:")
    )
    return StepScale(clock=at["sustained_clock"], gemm=at["gemm_library"], matmul=matmul)


@functools.lru_cache(maxsize=64)
def point_scale(hardware: Hardware) -> StepScale:
    """``hardware``'s ``StepScale`` with every range at its point: what a step is timed at
    unless told otherwise (its GEMMs saturated where the device says so)."""
    return step_scale(hardware)


def at_least_the_misses(point: float, low: float, high: float, miss: float = STEP_MISS):
    """``(low, high)`` seconds widened to at least ``point (1 - miss)`` .. ``point (1 +
    miss)``: a step time's interval no narrower than validate's whole-step misses show (a
    throughput error ``e`` is a time ``(1 + e)`` times the predicted one)."""
    return min(low, point * (1.0 - miss)), max(high, point * (1.0 + miss))
