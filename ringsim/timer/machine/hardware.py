"""What one host of the ring is and can do: its chip, FLOP rate, link and its kind, memory.

Rates are **peak dense** numbers by default (``efficiency=1.0``), as in the Ring Attention
paper's Table 2, so the overlap thresholds here can be set beside the paper's. Multiply by an
achieved fraction (``efficiency``) to model a real kernel. Link bandwidth is **per direction**:
in a unidirectional ring each host only sends to one neighbour and receives from the other, so
the one-way rate is what bounds a transfer.

What a device *is* is a field, never read from its name: its chip (``arch``: SM count, compute
capability, fp8; ``ringsim.timer.machine.arch``), the kind of its link (``link``: NVLink,
InfiniBand, PCIe, ICI; ``ringsim.timer.machine.links``) and the point-to-point bandwidth NCCL
achieves on it (``p2p_bandwidth``, a range). So ``dataclasses.replace(hw, memory_bytes=...)``
keeps every prediction, and a new device is one ``Hardware`` entry below, or one JSON file of
the same fields (``load_profile``; ``--hardware my-gpu.json`` on the command line).

A calibrated profile (FLOP/s and bandwidth measured on this machine by the real backend) is
saved with ``save_profile`` as JSON of the same schema under ``results/``; the newest
``results/cpu-profile*.json`` becomes the profile ``cpu-calibrated``. Calibrated profiles are
read on first use (``calibrated_profiles``: ``import ringsim`` scans nothing) and are not
``PRESETS``: a preset states peak rates for every dtype of the paper's comparison, while a
calibrated profile knows only the dtype it was measured at. ``get_hardware`` finds both, and a
hardware file by its path.
"""

from __future__ import annotations

import functools
import math
import numbers
import re
import sys
from dataclasses import MISSING, asdict, dataclass, field, replace
from pathlib import Path

from ringsim.files import read_json_object, write_json
from ringsim.timer.cost import check_dtype
from ringsim.timer.machine.arch import AMPERE, BLACKWELL, HOPPER, TPU, Arch, get_arch
from ringsim.timer.machine.links import ICI, IDEAL, INFINIBAND, NVLINK, LinkModel, get_link
from ringsim.timer.machine.ranges import Range, middle


def _check_rate(name: str, value: object, *, allow_zero: bool = False) -> float:
    """A finite, positive (or non-negative) real number; bools, NaN and subnormal numbers (below
    ``sys.float_info.min``, ~2.2e-308: every time computed from such a rate is inf) are refused."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    value = float(value)
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        kind = "non-negative" if allow_zero else "positive"
        raise ValueError(f"{name} must be a finite {kind} number, got {value!r}")
    if 0 < value < sys.float_info.min:
        raise ValueError(
            f"{name} must be zero or at least {sys.float_info.min:.3g} (a normal float), got "
            f"{value!r}: a subnormal rate makes every time computed from it infinite"
        )
    return value


@dataclass(frozen=True)
class Hardware:
    """One host: ``flops`` peak dense FLOP/s per dtype, ``link_bandwidth`` bytes/s per direction,
    ``link_latency`` seconds per message, ``memory_bytes`` device memory, ``efficiency`` the
    achieved fraction of peak FLOP/s, ``memory_bandwidth`` HBM bytes/s (0 = not modelled; only
    decode, which streams the KV cache, uses it).

    Five terms describe a real implementation on a real machine rather than a datasheet
    (calibrated profiles set them; presets leave them neutral):

    * ``pass_overhead_s``: fixed seconds each host spends at the start of a ring pass before
      its first block (building the schedule, positions and buffers);

    * ``block_overhead_s``: fixed seconds per block computed (launch or dispatch, allocation,
      the merge into the running output): what a small block pays however few FLOPs it has;
    * ``masked_speed``: the FLOP rate on a block that needs a mask (a causal diagonal block, a
      zigzag/striped block) over the rate on a full one. A kernel that builds and applies the
      mask per tile is slower (< 1); one whose tiles stay in cache while a full block's scores
      do not can be faster (> 1);
    * ``solo_speed``: for hosts that share one machine (local processes on a CPU): how much
      faster a host computes while the ring's other hosts are idle than while all compute (the
      rate above is the all-busy one); 1 for hosts with a machine each;
    * ``overlap_efficiency`` ``f`` in ``[-1, 1]``: how well a block's compute ``c`` and the
      transfer ``t`` that runs beside it (double buffering) actually overlap, in the probe's
      terms ``c + t - step = f min(c, t)``: 1 (the default) is perfect overlap (``step =
      max(c, t)``), 0 no overlap at all (``step = c + t``), and a negative ``f`` contention
      (``step > c + t``): on a CPU whose cores both the compute and the transport's threads
      need, each slows the other. The timer stretches both by ``(1 - f) min(c, t)``.

    ``ringsim.timer.simulate`` applies the first, ``HostClock.block`` the
    next three and ``HostClock.overlapped`` the last (which only a run with
    ``overlap`` reads; ``ringsim.timer.cost.overlap_threshold`` assumes ``f = 1``).

    What the device is: ``arch`` its chip (an ``Arch``, a name of ``ARCHS`` or a dict of its
    fields; ``None``: unknown, so no real kernel family runs on it), ``link`` the kind of its
    link (a ``LinkModel`` or a name of ``LINKS``; how NCCL uses it), ``p2p_bandwidth`` the
    bytes/s NCCL's send/recv achieves between two of them (a ``Range``, or ``None``: not
    measured, the link kind's efficiency applies), ``sustained_clock`` the clock a training step
    holds under its power cap over the clock its peaks are quoted at (a ``Range``, or ``None``:
    not sourced for it; ``ringsim.timer.step.uncertainty`` says what a step assumes then),
    ``saturated_matmul`` per GEMM dtype (``bf16``, ``fp8``; fp16 reads bf16's) the rate a dense
    matmul holds once it has pulled the device to its power limit over its rate in a short
    burst, the regime single-kernel GEMM benchmarks run in (a ``Range``; none: not measured,
    a step's GEMMs run at their benchmarks' rates).
    ``device`` names the product a profile was measured on, ``saved`` when it was written (both
    empty for a preset)."""

    name: str
    flops: dict[str, float]
    link_bandwidth: float
    link_latency: float
    memory_bytes: float
    efficiency: float = 1.0
    source: str = ""
    memory_bandwidth: float = 0.0
    pass_overhead_s: float = 0.0
    block_overhead_s: float = 0.0
    masked_speed: float = 1.0
    solo_speed: float = 1.0
    overlap_efficiency: float = 1.0
    arch: Arch | None = None
    link: LinkModel = IDEAL
    p2p_bandwidth: Range | None = None
    sustained_clock: Range | None = None
    saturated_matmul: dict[str, Range] = field(default_factory=dict)
    device: str = ""
    saved: str = field(default="", compare=False)  # when, not what: two saves are one device

    def __post_init__(self) -> None:
        object.__setattr__(self, "arch", get_arch(self.arch))
        object.__setattr__(self, "link", get_link(self.link))
        for name in ("p2p_bandwidth", "sustained_clock"):
            object.__setattr__(self, name, _range_or_none(name, getattr(self, name)))
        object.__setattr__(self, "saturated_matmul", _matmul_ranges(self.saturated_matmul))
        for text in ("name", "source", "device", "saved"):
            if not isinstance(getattr(self, text), str):
                raise ValueError(f"{text} must be a string, got {getattr(self, text)!r}")
        if not isinstance(self.flops, dict) or not self.flops:
            raise ValueError(f"flops must be a non-empty dict dtype -> FLOP/s, got {self.flops!r}")
        for key, rate in self.flops.items():
            check_dtype(key)
            _check_rate(f"flops[{key!r}]", rate)
        _check_rate("link_bandwidth", self.link_bandwidth)
        _check_rate("link_latency", self.link_latency, allow_zero=True)
        _check_rate("memory_bytes", self.memory_bytes)
        _check_rate("memory_bandwidth", self.memory_bandwidth, allow_zero=True)
        _check_rate("pass_overhead_s", self.pass_overhead_s, allow_zero=True)
        _check_rate("block_overhead_s", self.block_overhead_s, allow_zero=True)
        _check_rate("masked_speed", self.masked_speed)
        _check_rate("solo_speed", self.solo_speed)
        f = self.overlap_efficiency
        if isinstance(f, bool) or not isinstance(f, numbers.Real) or not -1.0 <= f <= 1.0:
            raise ValueError(f"overlap_efficiency must be a real number in [-1, 1], got {f!r}")
        object.__setattr__(self, "overlap_efficiency", float(f))
        eff = _check_rate("efficiency", self.efficiency)
        if eff > 1:
            raise ValueError(f"efficiency must be in (0, 1], got {eff!r}")

    def __hash__(self) -> int:  # the generated hash would hash the flops dict
        return hash((self.name, tuple(sorted(self.flops.items())), self.link_bandwidth))

    def flops_for(self, dtype: str) -> float:
        """Effective FLOP/s for ``dtype``: peak times ``efficiency``."""
        dtype = check_dtype(dtype)
        if dtype not in self.flops:
            raise ValueError(
                f"dtype {dtype!r} has no FLOP rate on hardware {self.name!r} "
                f"(it has: {', '.join(self.flops)})"
            )
        return self.flops[dtype] * self.efficiency

    def check_fp8(self, what: str) -> None:
        """``ValueError`` (``what`` needs fp8 tensor cores) unless this device's chip has them
        (``Arch.fp8``): the one place fp8 is allowed or refused."""
        if self.arch is None or not self.arch.fp8:
            chip = "unknown" if self.arch is None else self.arch.name
            raise ValueError(f"{what} needs fp8 tensor cores; {self.name} (chip: {chip}) has none")

    def with_link(self, bandwidth: float | None = None, latency: float | None = None) -> Hardware:
        """This device on another link (``bandwidth`` bytes/s, ``latency`` s; ``None`` keeps
        its own): the achieved point-to-point range, measured on its own link, no longer
        applies (``p2p_bandwidth=None``: the link kind's efficiency times the new rate)."""
        changes: dict[str, object] = {"p2p_bandwidth": None}
        if bandwidth is not None:
            changes["link_bandwidth"] = bandwidth
        if latency is not None:
            changes["link_latency"] = latency
        return replace(self, **changes)


def _range_or_none(name: str, value: object) -> Range | None:
    """``value`` as a ``Range`` (one as is, or a dict of its fields, as a file writes it), or
    ``None``; else a ``ValueError`` naming ``name``."""
    if isinstance(value, dict):
        try:
            value = Range(**value)
        except TypeError as err:
            raise ValueError(f"{name}: {err}") from None
    if value is not None and not isinstance(value, Range):
        raise ValueError(f"{name} must be a Range or None, got {value!r}")
    return value


SATURATED_MATMUL_DTYPES = ("bf16", "fp8")


def _matmul_ranges(value: object) -> dict[str, Range]:
    """``saturated_matmul`` as ``{dtype: Range}`` (a file writes each range as a dict)."""
    if not isinstance(value, dict):
        raise ValueError(f"saturated_matmul must be a dict dtype -> Range, got {value!r}")
    out = {}
    for dtype, r in value.items():
        if dtype not in SATURATED_MATMUL_DTYPES:
            raise ValueError(
                f"saturated_matmul: dtype must be one of {', '.join(SATURATED_MATMUL_DTYPES)}, "
                f"got {dtype!r}"
            )
        out[dtype] = _range_or_none(f"saturated_matmul[{dtype!r}]", r)
        if out[dtype] is None:
            raise ValueError(f"saturated_matmul[{dtype!r}] must be a Range, got None")
    return out


def dense(bf16: float, fp32: float) -> dict[str, float]:
    """Peak dense FLOP/s per dtype of a GPU whose fp16 tensor-core rate equals its bf16 one."""
    return {"bf16": bf16, "fp16": bf16, "fp32": fp32}


MIB = 2.0**20  # bytes (a float: memory sizes are rates' peers in every formula)
A100_80GB_BYTES = 81920 * MIB
"""A100 80GB (SXM and PCIe): 81920 MiB = 85.9e9 bytes, not the marketed 80e9 (nvidia-smi's
memory.total, what the driver exposes; modal-labs/modal-client PR #2797 lists it per GPU)."""
H100_80GB_BYTES = 81559 * MIB
"""H100 SXM 80GB HBM3: 81559 MiB = 85.5e9 bytes (nvidia-smi in NVIDIA/nccl issue #1264 and
modal-labs/modal-client PR #2797); the H800 SXM carries the same HBM3 stack."""
H200_BYTES = 143771 * MIB
"""H200 SXM 141GB HBM3e: 143771 MiB = 150.8e9 bytes (nvidia-smi of 8 x H200 SXM nodes in
public logs); the marketed 141 GB is the rounded GiB figure (140.4 GiB)."""
B200_BYTES = 183359 * MIB
"""B200 SXM: 183359 MiB = 192.3e9 bytes (nvidia-smi of a B200 in a public log); DGX B200 lists
180 GB per GPU (1,440 GB for 8)."""

_HOPPER_P2P = (
    "NVIDIA/nccl-tests#268: sendrecv_perf between 2 NVLink H100s reaches ~80 GB/s at the "
    "default sizes, rising to a ~180 GB/s plateau for messages up to 4 GB (nvbandwidth on "
    "the same pair: 260 GB/s)"
)
HOPPER_P2P = Range(80e9, middle(80e9, 180e9), 180e9, "low", _HOPPER_P2P)
"""Achieved NCCL send/recv bytes/s between two NVLink4 Hoppers (H100, H200)."""

MSMF_SOURCE = (
    "stas00/ml-engineering compute/accelerator/README.md @ 082816f (branch fast-mamf, 'faster "
    "mamf, plus msmf', 2026-08-10), MAMF and MSMF tables of mamf-finder.py: MAMF a short burst "
    "at the boost clock, MSMF the rate once the GPU draws its TDP and the clock has settled, "
    "'the number that matches sustained training throughput'"
)
_BURST = (
    "high end: the benchmark's own rate, had it already run saturated (a GEMM sweep prints no "
    "clock); the Hopper sweeps ran in the burst regime: their tops (bf16 766, fp8 1,523 "
    "TFLOP/s) reach cuBLAS's burst MAMF on H100 SXM (794.5, 1,402.6), which a saturated H100 "
    "(0.842 x 794.5 = 669) cannot, so the point is the measured burst-to-saturated ratio"
)


def _saturated(msmf: float, mamf: float, what: str) -> Range:
    return Range(msmf / mamf, msmf / mamf, 1.0, "low", f"{MSMF_SOURCE}: {what}; {_BURST}")


GH100_SATURATED = {
    "bf16": _saturated(
        708.5,
        841.9,
        "H200 SXM, the H100 SXM's GH100 die at the same 700 W: bf16 MAMF 841.9 TFLOP/s (~176 W "
        "at 1980 MHz), MSMF 708.5 (~693 W at 1465 MHz)",
    ),
    "fp8": _saturated(
        1288.7,
        1491.9,
        "H200 SXM, the H100 SXM's GH100 die at the same 700 W: fp8 MAMF 1,491.9 TFLOP/s (~172 W "
        "at 1980 MHz), MSMF 1,288.7 (~693 W at 1374 MHz)",
    ),
}
"""A dense matmul's saturated over burst rate on a 700 W GH100 (H100, H800, H200 SXM)."""

H100_SXM_CLOCK = Range(
    GH100_SATURATED["bf16"].low,
    1.0,
    1.0,
    "low",
    "the clock a training step's attention kernels hold over the clock their benchmarks ran at "
    "(the H100 SXM's dense peaks are quoted at 1.83 GHz: 528 tensor cores x 1,024 FLOP; "
    "G. Lockwood's H100 notes, glennklockwood.com/garden/processors/h100). High end and point: "
    "the benchmarks' own clock (no source measures an attention kernel's power draw in a "
    "step); low end: a kernel that draws the full 700 W, as a dense matmul does, holds 0.842 "
    f"of its burst rate ({MSMF_SOURCE}: H200 SXM bf16 MSMF 708.5 / MAMF 841.9 TFLOP/s, the "
    "clock settled at 1465 MHz, below the 1,590 MHz base clock once taken as the floor)",
)
"""The H100 SXM's sustained clock over its quoted one (``Hardware.sustained_clock``)."""

_BUILTIN = [
    Hardware(
        name="a100-nvlink",
        arch=AMPERE,
        flops=dense(bf16=312e12, fp32=19.5e12),
        memory_bytes=A100_80GB_BYTES,
        memory_bandwidth=2.039e12,
        link=NVLINK,
        link_bandwidth=300e9,
        link_latency=5e-6,
        p2p_bandwidth=Range(
            72e9,
            middle(72e9, 230e9),
            230e9,
            "low",
            "NVIDIA/nccl-tests#331: sendrecv_perf between 2 A100s over NVLink3 tops at 72 GB/s; "
            "high end the collective bus bandwidth of an 8xA100 NVSwitch box, ~230 GB/s "
            "(all_reduce_perf busbw, NVIDIA/nccl-tests#149), which point-to-point does not "
            "exceed",
        ),
        source="A100 SXM 80GB: 312 TFLOP/s dense bf16, 19.5 fp32 (NVIDIA datasheet); NVLink3 "
        "600 GB/s total = 300 GB/s per direction (Ring Attention paper, Table 2); ~5 us p2p "
        "latency"
        "; memory 81920 MiB, as nvidia-smi reports it",
    ),
    Hardware(
        name="a100-ib",
        arch=AMPERE,
        flops=dense(bf16=312e12, fp32=19.5e12),
        memory_bytes=A100_80GB_BYTES,
        memory_bandwidth=2.039e12,
        link=INFINIBAND,
        link_bandwidth=12.5e9,
        link_latency=5e-6,
        source="A100 SXM 80GB: 312 TFLOP/s dense bf16 (datasheet); InfiniBand 100 Gb/s = 12.5 "
        "GB/s per GPU per direction (Ring Attention paper, Table 2); ~5 us latency"
        "; memory 81920 MiB, as nvidia-smi reports it",
    ),
    Hardware(
        name="h100-nvlink",
        arch=HOPPER,
        flops=dense(bf16=989e12, fp32=67e12),
        memory_bytes=H100_80GB_BYTES,
        memory_bandwidth=3.35e12,
        link=NVLINK,
        link_bandwidth=450e9,
        link_latency=5e-6,
        p2p_bandwidth=HOPPER_P2P,
        sustained_clock=H100_SXM_CLOCK,
        saturated_matmul=GH100_SATURATED,
        source="H100 SXM 80GB: 989 TFLOP/s dense bf16, 67 fp32 (NVIDIA datasheet); NVLink4 900 "
        "GB/s total = 450 GB/s per direction; ~5 us p2p latency"
        "; memory 81559 MiB, as nvidia-smi reports it",
    ),
    Hardware(
        name="h200-nvlink",
        arch=HOPPER,
        flops=dense(bf16=989e12, fp32=67e12),
        memory_bytes=H200_BYTES,
        memory_bandwidth=4.8e12,
        link=NVLINK,
        link_bandwidth=450e9,
        link_latency=5e-6,
        p2p_bandwidth=replace(HOPPER_P2P, source=f"{_HOPPER_P2P}; NVLink4 as the H100's"),
        saturated_matmul=GH100_SATURATED,
        source="H200 SXM 141GB: 989 TFLOP/s dense bf16 (same GH100 die as H100), HBM3e 4.8 TB/s "
        "(datasheet); NVLink4 450 GB/s per direction; ~5 us p2p latency"
        "; memory 143771 MiB, as nvidia-smi reports it",
    ),
    Hardware(
        name="h200-ib",
        arch=HOPPER,
        flops=dense(bf16=989e12, fp32=67e12),
        memory_bytes=H200_BYTES,
        memory_bandwidth=4.8e12,
        link=INFINIBAND,
        link_bandwidth=50e9,
        link_latency=5e-6,
        saturated_matmul=GH100_SATURATED,
        source="H200 SXM 141GB: 989 TFLOP/s dense bf16 (datasheet); one ConnectX-7 NDR 400 Gb/s "
        "= 50 GB/s per GPU per direction; ~5 us latency"
        "; memory 143771 MiB, as nvidia-smi reports it",
    ),
    Hardware(
        name="h800-nvlink",
        arch=HOPPER,
        flops=dense(bf16=989e12, fp32=67e12),
        memory_bytes=H100_80GB_BYTES,
        memory_bandwidth=3.35e12,
        link=NVLINK,
        link_bandwidth=200e9,
        link_latency=5e-6,
        p2p_bandwidth=Range(
            80e9,
            middle(80e9, 160e9),
            160e9,
            "low",
            f"{_HOPPER_P2P}; the high end capped by the H800's link: ~160 of 200 GB/s one-way "
            "measured by DeepSeek (deepseek-ai/DeepSeek-V3#28)",
        ),
        saturated_matmul=GH100_SATURATED,
        source="H800 SXM 80GB: the H100 SXM die, 989 TFLOP/s dense bf16, HBM3 3.35 TB/s; NVLink "
        "cut to 400 GB/s total = 200 GB/s per direction (DeepEP issue #16 and DeepSeek-V3 issue "
        "#28, maintainers; DeepSeek measures ~160 GB/s one-way); ~5 us p2p latency"
        "; memory 81559 MiB, as nvidia-smi reports it",
    ),
    Hardware(
        name="b200-nvlink",
        arch=BLACKWELL,
        flops=dense(bf16=2.25e15, fp32=80e12),
        memory_bytes=B200_BYTES,
        memory_bandwidth=8e12,
        link=NVLINK,
        link_bandwidth=900e9,
        link_latency=5e-6,
        saturated_matmul={
            "bf16": _saturated(
                1456.3,
                1770.9,
                "B200 SXM at 1000 W: bf16 MAMF 1,770.9 TFLOP/s (~295 W at 1965 MHz), MSMF "
                "1,456.3 (~994 W at 1339 MHz)",
            ),
            "fp8": _saturated(
                2795.7,
                3435.2,
                "B200 SXM at 1000 W: fp8 MAMF 3,435.2 TFLOP/s (~287 W at 1965 MHz), MSMF "
                "2,795.7 (~990 W at 1331 MHz)",
            ),
        },
        source="B200 SXM (HGX, 1000 W): 2.25 PFLOP/s dense bf16/fp16, 80 TFLOP/s fp32 (NVIDIA "
        "HGX B200 specifications, as tabulated at glennklockwood.com/garden/processors/B200); "
        "DGX B200: 1,440 GB HBM3e at 64 TB/s for 8 GPUs = 180 GB and 8 TB/s each (NVIDIA DGX B200 "
        "datasheet); NVLink5 1.8 TB/s total = 900 GB/s per direction; ~5 us p2p latency (as "
        "NVLink4); no published FlashAttention "
        "curve on Blackwell yet: the ideal model only",
    ),
    Hardware(
        name="tpu-v3",
        arch=TPU,
        flops={"bf16": 123e12, "fp16": 123e12, "fp32": 123e12 / 6},
        memory_bytes=32e9,
        memory_bandwidth=900e9,
        link=ICI,
        link_bandwidth=112e9,
        link_latency=2e-6,
        source="TPU v3: 123 TFLOP/s bf16 per chip, 32 GiB HBM2 at 900 GB/s (Google Cloud docs; "
        "the Ring Attention paper's Table 2 lists 16 GB, one TensorCore's half); ICI 112 GB/s "
        "one-way as in that Table 2; fp32 ~ bf16/6 (estimate, as tpu-v4)",
    ),
    Hardware(
        name="tpu-v4",
        arch=TPU,
        flops={"bf16": 275e12, "fp16": 275e12, "fp32": 275e12 / 6},
        memory_bytes=32e9,
        memory_bandwidth=1.2e12,
        link=ICI,
        link_bandwidth=268e9,
        link_latency=2e-6,
        source="TPU v4: 275 TFLOP/s bf16, 32 GB HBM 1.2 TB/s (Google Cloud docs); ICI 268 GB/s "
        "one-way as in the Ring Attention paper, Table 2; fp32 ~ bf16/6 (6-pass bf16 matmul, "
        "estimate)",
    ),
    Hardware(
        name="tpu-v5e",
        arch=TPU,
        flops={"bf16": 197e12, "fp16": 197e12, "fp32": 197e12 / 6},
        memory_bytes=16e9,
        memory_bandwidth=819e9,
        link=ICI,
        link_bandwidth=186e9,
        link_latency=2e-6,
        source="TPU v5e: 197 TFLOP/s bf16, 16 GB HBM 819 GB/s (Google Cloud docs); ICI ~186 GB/s "
        "one-way (paper-style estimate); fp32 ~ bf16/6 (estimate)",
    ),
]
"""The presets, one keyword entry each: a new device is one more entry (or one JSON file of
the same fields, ``load_profile``)."""

RESULTS_DIR = Path(__file__).resolve().parents[3] / "results"


PROFILE_GLOB = "cpu-profile*.json"  # the files that become ``cpu-calibrated``


def save_profile(hw: Hardware, path: str | Path) -> None:
    """Write ``hw`` as JSON (the fields of ``Hardware``, ``saved`` set to now) to ``path``,
    atomically: a temporary file renamed over ``path``, so a reader (or a crash half-way)
    never leaves half a profile. A preset written so is a hardware file too."""
    from datetime import datetime

    saved = replace(hw, saved=datetime.now().isoformat(timespec="seconds"))
    write_json(path, asdict(saved), sort_keys=True)


def load_profile(path: str | Path) -> Hardware:
    """Read a hardware file: a profile written by ``save_profile`` (``ringsim calibrate``, the
    GPU check) or a device written by hand with the same fields (``arch`` and ``link`` may
    name an entry of ``ARCHS``/``LINKS`` or give its fields). A bad file (unreadable, empty,
    truncated, not an object, unknown or missing fields, a bad value) is a ``ValueError``
    naming it and the cause. Fields added to ``Hardware`` later (with defaults) may be
    missing: older profiles load."""
    path = Path(path)
    data = read_json_object(path, what="profile")
    fields = Hardware.__dataclass_fields__
    unknown = set(data) - set(fields)
    if unknown:
        raise ValueError(f"profile {str(path)!r} has unknown keys {sorted(unknown)}")
    missing = [
        name
        for name, f in fields.items()
        if name not in data and f.default is MISSING and f.default_factory is MISSING
    ]
    if missing:
        raise ValueError(f"profile {str(path)!r} is missing the fields {missing}")
    try:
        return Hardware(**data)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"profile {str(path)!r} has a bad value: {exc}") from None


_DATE = re.compile(r"\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}(:\d{2})?)?")


def profile_date(path: str | Path) -> str:
    """When the profile at ``path`` was made, from its content: its ``saved`` date-time, else
    the date in its ``source`` (``calibrated 2026-11-29 on ...``); ``""`` when it names none
    (such a profile is older than any dated one). Not the file name: ``cpu-profile-test.json``
    must not beat a dated profile by sorting after it."""
    data = read_json_object(path, what="profile")
    for text in (data.get("saved"), data.get("source")):
        found = _DATE.search(text) if isinstance(text, str) else None
        if found:
            return found.group(0)
    return ""


def scan_profiles(directory: str | Path | None = None) -> tuple[dict[str, Hardware], dict]:
    """``({"cpu-calibrated": Hardware}, {})`` from the newest ``cpu-profile*.json`` in
    ``directory`` (default ``RESULTS_DIR``), newest by the date inside each file
    (``profile_date``); ``({}, {"cpu-calibrated": message})`` when any of those files is
    corrupt (it might be the newest: using an older one instead would be silently wrong), the
    message naming the file and the cause; ``({}, {})`` when there is none."""
    directory = Path(RESULTS_DIR if directory is None else directory)
    paths = sorted(directory.glob(PROFILE_GLOB)) if directory.is_dir() else []
    dated = []
    for path in paths:
        try:
            dated.append((profile_date(path), path.name, load_profile(path)))
        except ValueError as exc:
            return {}, {"cpu-calibrated": f"{exc}; fix or remove it to use cpu-calibrated"}
    if not dated:
        return {}, {}
    newest = max(dated, key=lambda row: row[:2])[2]
    return {"cpu-calibrated": replace(newest, name="cpu-calibrated")}, {}


@functools.cache
def calibrated_profiles() -> tuple[dict[str, Hardware], dict[str, str]]:
    """``scan_profiles`` of ``RESULTS_DIR``, read once, on first use: ``cpu-calibrated`` from
    the newest ``results/cpu-profile*.json`` if there is one and none of them is corrupt, else
    why not (a corrupt profile must not break ``import ringsim``: its error waits for
    ``get_hardware``)."""
    return scan_profiles(RESULTS_DIR)


PRESETS: dict[str, Hardware] = {hw.name: hw for hw in _BUILTIN}


def all_hardware() -> dict[str, Hardware]:
    """The presets, then the calibrated profiles."""
    return PRESETS | calibrated_profiles()[0]


def get_hardware(name: str | Path) -> Hardware:
    """The preset (or calibrated profile) called ``name``, else the hardware file at the path
    ``name`` (``load_profile``: the same fields as a preset)."""
    if not isinstance(name, str | Path):
        raise ValueError(f"hardware must be a preset name or a file (a string), got {name!r}")
    known = all_hardware()
    if str(name) in known:
        return known[str(name)]
    errors = calibrated_profiles()[1]
    if str(name) in errors:
        raise ValueError(f"hardware {str(name)!r}: {errors[str(name)]}")
    if Path(name).is_file():
        return load_profile(name)
    raise ValueError(
        f"unknown hardware preset {str(name)!r} (and no such file); known: {', '.join(known)}, "
        "or a JSON file of a Hardware's fields"
    )


def default_dtype(hw: Hardware) -> str:
    """The dtype to time ``hw`` at when none is asked for: bf16 (the paper's convention) if it
    has a rate for it, else its first (a calibrated CPU profile knows only its own, fp32)."""
    return "bf16" if "bf16" in hw.flops else next(iter(hw.flops))


def custom_hardware(
    flops: float,
    bandwidth: float,
    latency: float = 0.0,
    memory: float = 80e9,
    dtype: str = "bf16",
    arch: Arch | str | None = None,
) -> Hardware:
    """Hardware from raw numbers: ``flops`` FLOP/s at ``dtype``, ``bandwidth`` bytes/s per
    direction, ``latency`` seconds per message, ``memory`` bytes; ``arch`` its chip (default
    unknown: only the ideal model runs on it)."""
    dtype = check_dtype(dtype)
    flops = _check_rate("flops", flops)
    bandwidth = _check_rate("bandwidth", bandwidth)
    latency = _check_rate("latency", latency, allow_zero=True)
    memory = _check_rate("memory", memory)
    source = f"custom: {flops:.3g} FLOP/s ({dtype}), {bandwidth:.3g} B/s, {latency:.3g} s latency"
    return Hardware("custom", {dtype: flops}, bandwidth, latency, memory, 1.0, source, arch=arch)
