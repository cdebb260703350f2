"""What a whole-step prediction does not know, as ranges, and how wide its interval must be.

A step's parts are timed at published rates (``ringsim.timer.step.training``). Three things
those rates leave open are carried as ``Range``s (``ringsim.timer.machine.ranges``), each
with its source, and a step is timed at their ends (``StepScale``):

* ``sustained_clock``: the clock a GPU holds through a training step under its power cap,
  over the clock the GEMM and attention benchmarks ran at. Compute-bound kernels scale with
  it; memory-bound ones (elementwise, the optimizer) barely do.
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

from dataclasses import dataclass

from ringsim.timer.machine.ranges import Range

H100_TENSOR_CLOCK_GHZ = 1.83
"""The clock the H100 SXM's dense tensor peaks are quoted at (989.4 TFLOP/s bf16 = 528 tensor
cores x 1,024 FLOP x 1.83 GHz; NVIDIA H100 datasheet peaks; G. Lockwood's H100 notes,
glennklockwood.com/garden/processors/h100: '1.83 GHz (low precision)')."""

H100_BASE_CLOCK_GHZ = 1.59
"""The H100 SXM5's base clock, the lowest the card runs under load within its 700 W cap
(TechPowerUp GPU database, H100 SXM5 80 GB: base 1,590 MHz, boost 1,980 MHz)."""

STEP_RANGES: dict[str, Range] = {
    "sustained_clock": Range(
        H100_BASE_CLOCK_GHZ / H100_TENSOR_CLOCK_GHZ,
        1.0,
        1.0,
        "low",
        "estimate: a training step's sustained clock over the benchmarks' clock. High end and "
        "point: the clock the published GEMM and attention benchmarks ran at (no source gives "
        "a lower sustained clock for a training step on these presets); low end: the base clock "
        "(1.59 GHz, the floor under the 700 W cap) over the 1.83 GHz the tensor peaks assume",
    ),
    "gemm_library": Range(
        1.0,
        1.0,
        792.1 / 766.0,
        "low",
        "the GEMM sweep (TileLang, autotuned; 766 TFLOP/s at its top) against cuBLAS's best bf16 "
        "shape on H100 SXM (792.1 TFLOP/s, stas00/ml-engineering 'Maximum Achievable Matmul "
        "FLOPS'): the library a framework calls may run up to 3% faster",
    ),
}
"""The ranges of a whole step (module docstring)."""

STEP_MISS = 0.30
"""The largest |error| of ``ringsim validate``'s whole-step point predictions (nemo-long,
llama3-t4: +28.7% on Llama 3's 8K rows), rounded up to the next 5%: a printed step interval
spans at least this share of its point on either side. ``tests/test_step_settings.py``
recomputes the misses and fails if any exceeds it."""


@dataclass(frozen=True)
class StepScale:
    """Rates of a step's parts relative to their published benchmarks: ``clock`` (compute-bound
    kernels), ``gemm`` (the GEMM library)."""

    clock: float = 1.0
    gemm: float = 1.0

    @property
    def gemm_rate(self) -> float:
        return self.clock * self.gemm


POINT = StepScale()


def step_scale(assume: dict[str, str] | None = None) -> StepScale:
    """The ``StepScale`` at the ends ``assume`` names (``{"sustained_clock": "low"}``; every
    other range at its point); ``"slow"``/``"fast"`` pick the end that makes a step slower or
    faster."""
    assume = assume or {}
    for name in assume:
        if name not in STEP_RANGES:
            raise ValueError(
                f"assume: step range must be one of {', '.join(STEP_RANGES)}, got {name!r}"
            )
    at = {name: r.at(assume.get(name, "point")) for name, r in STEP_RANGES.items()}
    return StepScale(clock=at["sustained_clock"], gemm=at["gemm_library"])


def at_least_the_misses(point: float, low: float, high: float, miss: float = STEP_MISS):
    """``(low, high)`` seconds widened to at least ``point (1 - miss)`` .. ``point (1 +
    miss)``: a step time's interval no narrower than validate's whole-step misses show (a
    throughput error ``e`` is a time ``(1 + e)`` times the predicted one)."""
    return min(low, point * (1.0 - miss)), max(high, point * (1.0 + miss))
