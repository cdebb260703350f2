"""The achieved rate of a GEMM on a real GPU, by shape and dtype, from published GEMM benchmarks.

A datasheet's dense peak is what the tensor cores could do at the clock the datasheet assumes
(H100 SXM: 528 tensor cores x 1,024 FLOP per clock x 1.83 GHz = 989 TFLOP/s bf16). A GEMM
reaches less, in two ways this module models (``gemm_seconds``):

* the **reduction length** ``K``: each output tile loads its operands, runs ``K / k_tile``
  MMA steps and writes its result; the prologue and epilogue are a fixed cost per tile, so a
  short ``K`` (a tensor-parallel shard of the attention output, ``d / t``) runs far below a
  long one. The rate at ``K`` is read off a published sweep of ``K`` at ``M = N = 8192``
  (``GemmCurve.rate_at``: log-linear between the points, the last point beyond them, in
  proportion below the first);
* **wave quantisation**: ``ceil(M / 128) x ceil(N / 256)`` output tiles run on the SMs in
  waves; a last, partial wave leaves SMs idle. The rate is scaled by the occupancy
  ``tiles / (ceil(tiles / SMs) SMs)`` relative to the benchmark's own shape.

The published sweeps measure the kernel in short bursts, at the clock it held then; a
training step's GEMMs run at a power-saturated GPU's lower rate, which the step applies
(``Hardware.saturated_matmul``, ``ringsim.timer.step.uncertainty``), not this module. Every
curve names its source. Hardware without a sweep falls back to its datasheet peak times the
fraction a benchmark of the nearest architecture reached, and says so (``GemmCurve.estimate``).

``ideal`` (``implementation="ideal"``): every GEMM at the hardware's peak FLOP/s, the
Ring Attention paper's model.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from ringsim.timer.machine.hardware import Hardware

GEMM_DTYPES = ("bf16", "fp16", "fp8", "fp32")
"""Element types of a GEMM's inputs. ``fp8``: e4m3/e5m2 inputs with a bf16 output and fp32
accumulation (Transformer Engine's recipe), on Hopper tensor cores only."""

TILE = (128, 256)
"""Output tile of a large Hopper GEMM (CUTLASS/cuBLAS sm90 warp-specialised kernels:
128 x 256 x 64 for bf16 and fp8 at large shapes), for the wave count."""

TILELANG_H800 = (
    "TileLang's GEMM benchmark READMEs: M = N = 8192, K swept 256..16384 on an NVIDIA H800 SXM "
    "(the H100 SXM die and clocks; only NVLink is cut), driver 560.35, autotuned kernels"
)
MAMF_SOURCE = (
    "stas00/ml-engineering compute/accelerator/README.md, 'Maximum Achievable Matmul FLOPS' "
    "table (mamf-finder.py, brute-force shape search with cuBLAS)"
)


@dataclass(frozen=True)
class GemmCurve:
    """Achieved FLOP/s of one architecture and dtype against ``K`` at ``M = N = m_n``:
    ``k`` and ``flops`` the published points; ``estimate`` True when the curve is not a
    measurement of that architecture (see the module docstring); ``peak`` the dense peak of
    the device it was measured on, so a device of the same chip at another peak scales it
    (``None``: used as is)."""

    k: tuple[int, ...]
    flops: tuple[float, ...]
    m_n: int
    source: str
    estimate: bool = False
    peak: float | None = None

    def rate_at(self, k: int) -> float:
        """FLOP/s at reduction length ``k`` (log-linear interpolation of the sweep)."""
        ks, rates = np.log2(np.asarray(self.k, float)), np.asarray(self.flops, float)
        x = math.log2(max(k, 1))
        if x <= ks[0]:
            return float(rates[0] * k / self.k[0])  # the fixed per-tile cost dominates
        return float(np.interp(x, ks, rates))

    def scaled(self, factor: float, source: str) -> GemmCurve:
        return GemmCurve(self.k, tuple(f * factor for f in self.flops), self.m_n, source, True)


_K = (256, 512, 1024, 2048, 4096, 8192, 16384)
HOPPER_BF16 = GemmCurve(
    _K,
    tuple(t * 1e12 for t in (386, 520, 628, 705, 736, 758, 766)),
    8192,
    f"{TILELANG_H800}: benchmark/matmul/README.md (github.com/xwhzz/tilelang @ b2acfc3, "
    "kernels @ 17bd0a6), FP16 (bf16 runs the same tensor-core rate). Cross-check: cuBLAS's "
    f"best bf16 shape on H100 SXM reaches 792.1 TFLOP/s ({MAMF_SOURCE}), 3% above this sweep's top",
    peak=989e12,  # H800 SXM: the H100 SXM's dense bf16 peak
)
HOPPER_FP8 = GemmCurve(
    _K,
    tuple(t * 1e12 for t in (376, 622, 927, 1174, 1378, 1461, 1523)),
    8192,
    f"{TILELANG_H800}: benchmark/matmul_fp8/README.md (github.com/tile-ai/tilelang @ 128a796, "
    "kernels @ 6b1faf7; printed in PFLOP/s)",
)
AMPERE_BF16 = HOPPER_BF16.scaled(
    267.9 / 766,
    f"estimate: the Hopper sweep's shape scaled to cuBLAS's best bf16 rate on A100 SXM, 267.9 "
    f"TFLOP/s at 6912x16384x2048 ({MAMF_SOURCE}); no published K sweep on A100",
)
CURVES: dict[tuple[str, str], GemmCurve] = {
    ("hopper", "bf16"): HOPPER_BF16,
    ("hopper", "fp16"): HOPPER_BF16,
    ("hopper", "fp8"): HOPPER_FP8,
    ("ampere", "bf16"): AMPERE_BF16,
    ("ampere", "fp16"): AMPERE_BF16,
}
HOPPER_PEAK = HOPPER_BF16.peak  # the dense bf16 peak the sweeps are read against


def check_gemm_dtype(dtype: object, hardware: Hardware) -> str:
    """``dtype`` if ``hardware`` runs GEMMs in it; fp8 needs fp8 tensor cores (``Arch.fp8``)."""
    if dtype not in GEMM_DTYPES:
        raise ValueError(f"gemm dtype must be one of {', '.join(GEMM_DTYPES)}, got {dtype!r}")
    if dtype == "fp8":
        hardware.check_fp8("gemm dtype 'fp8'")
    return str(dtype)


def peak_flops(hardware: Hardware, dtype: str) -> float:
    """Dense datasheet peak of ``dtype`` GEMMs: fp8 twice the bf16 rate (H100 datasheet)."""
    if dtype == "fp8":
        return 2.0 * hardware.flops_for("bf16")
    return hardware.flops_for(dtype)


def curve_for(hardware: Hardware, dtype: str) -> GemmCurve:
    """The published curve of ``hardware``'s architecture, or the datasheet-scaled estimate."""
    arch = None if hardware.arch is None else hardware.arch.name
    if (arch, dtype) in CURVES:
        curve = CURVES[(arch, dtype)]
        if curve.peak is not None and dtype != "fp8":  # the curve's die at another peak
            ratio = hardware.flops_for(dtype) / curve.peak
            return curve if ratio == 1.0 else curve.scaled(ratio, f"{curve.source} x {ratio:.3g}")
        return curve
    fraction = HOPPER_BF16.flops[-1] / HOPPER_PEAK
    peak = peak_flops(hardware, dtype)
    curve = HOPPER_BF16.scaled(
        peak / HOPPER_PEAK,
        f"estimate: {hardware.name} has no published GEMM sweep; the Hopper bf16 sweep's "
        f"fractions of peak ({fraction:.0%} at the top) times its datasheet peak",
    )
    return curve


def _occupancy(tiles: int, sms: int) -> float:
    return tiles / (math.ceil(tiles / sms) * sms)


def gemm_rate(hardware: Hardware, m: int, n: int, k: int, dtype: str, *, ideal: bool) -> float:
    """Achieved FLOP/s of an ``(m x k) @ (k x n)`` GEMM in ``dtype`` (see the module docstring);
    ``ideal``: the datasheet peak."""
    if ideal:
        return peak_flops(hardware, dtype)
    curve = curve_for(hardware, dtype)
    rate = curve.rate_at(k)
    sms = 0 if hardware.arch is None else hardware.arch.sms
    if sms:
        tiles = -(-m // TILE[0]) * -(-n // TILE[1])
        bench = (curve.m_n // TILE[0]) * (curve.m_n // TILE[1])
        rate *= _occupancy(tiles, sms) / _occupancy(bench, sms)
    return rate


def gemm_seconds(
    hardware: Hardware, m: int, n: int, k: int, dtype: str, *, ideal: bool = False
) -> float:
    """Seconds of one ``(m x k) @ (k x n)`` GEMM: ``2 m n k`` FLOPs at ``gemm_rate``."""
    if m <= 0 or n <= 0 or k <= 0:
        return 0.0
    return 2.0 * m * n * k / gemm_rate(hardware, m, n, k, dtype, ideal=ideal)


@functools.lru_cache(maxsize=2**14)
def linear_seconds(
    hardware: Hardware, tokens: int, d_in: int, d_out: int, dtype: str, *, ideal: bool = False
) -> tuple[float, float]:
    """``(forward, backward)`` seconds of a linear layer ``d_in -> d_out`` on ``tokens`` rows:
    forward ``Y = X W`` (``K = d_in``); backward the input gradient ``dX = dY W^T``
    (``K = d_out``) and the weight gradient ``dW = X^T dY`` (``K = tokens``). Remembered: a
    planner's configurations run the same layers on the same rows many times."""
    fwd = gemm_seconds(hardware, tokens, d_out, d_in, dtype, ideal=ideal)
    dgrad = gemm_seconds(hardware, tokens, d_in, d_out, dtype, ideal=ideal)
    wgrad = gemm_seconds(hardware, d_in, d_out, tokens, dtype, ideal=ideal)
    return fwd, dgrad + wgrad
