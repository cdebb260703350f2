"""What one host of the ring can do: FLOP rate, link bandwidth and latency, memory.

Rates are **peak dense** numbers by default (``efficiency=1.0``), as in the Ring Attention
paper's Table 2, so the overlap thresholds here can be set beside the paper's. Multiply by an
achieved fraction (``efficiency``) to model a real kernel. Link bandwidth is **per direction**:
in a unidirectional ring each host only sends to one neighbour and receives from the other, so
the one-way rate is what bounds a transfer.

A calibrated profile (FLOP/s and bandwidth measured on this machine by the real backend) is
saved with ``save_profile`` as JSON under ``results/``; any ``results/cpu-profile*.json`` found
there becomes the profile ``cpu-calibrated``. Calibrated profiles live in ``CALIBRATED``, not
``PRESETS``: a preset states peak rates for every dtype of the paper's comparison, while a
calibrated profile knows only the dtype it was measured at. ``get_hardware`` finds both.
"""

from __future__ import annotations

import json
import math
import numbers
from dataclasses import asdict, dataclass, replace
from pathlib import Path

DTYPES = ("bf16", "fp16", "fp32")


def _check_rate(name: str, value: object, *, allow_zero: bool = False) -> float:
    """A finite, positive (or non-negative) real number; bools and NaN are refused."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    value = float(value)
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        kind = "non-negative" if allow_zero else "positive"
        raise ValueError(f"{name} must be a finite {kind} number, got {value!r}")
    return value


def check_dtype(dtype: object) -> str:
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    return str(dtype)


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

    ``ringsim.timer.simulate`` applies the first, ``ringsim.timer.HostClock.block`` the
    next three and ``ringsim.timer.HostClock.overlapped`` the last (which only a run with
    ``overlap`` reads; ``ringsim.timer.cost.overlap_threshold`` assumes ``f = 1``)."""

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

    def __post_init__(self) -> None:
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

    def flops_for(self, dtype: str) -> float:
        """Effective FLOP/s for ``dtype``: peak times ``efficiency``."""
        dtype = check_dtype(dtype)
        if dtype not in self.flops:
            raise ValueError(
                f"dtype {dtype!r} has no FLOP rate on hardware {self.name!r} "
                f"(it has: {', '.join(self.flops)})"
            )
        return self.flops[dtype] * self.efficiency


def _preset(name, bf16, fp32, bandwidth, latency, memory, hbm, source) -> Hardware:
    flops = {"bf16": bf16, "fp16": bf16, "fp32": fp32}
    return Hardware(name, flops, bandwidth, latency, memory, 1.0, source, hbm)


_BUILTIN = [
    _preset(
        "a100-nvlink",
        312e12,
        19.5e12,
        300e9,
        5e-6,
        80e9,
        2.039e12,
        "A100 SXM 80GB: 312 TFLOP/s dense bf16, 19.5 fp32 (NVIDIA datasheet); NVLink3 600 GB/s "
        "total = 300 GB/s per direction (Ring Attention paper, Table 2); ~5 us p2p latency",
    ),
    _preset(
        "a100-ib",
        312e12,
        19.5e12,
        12.5e9,
        5e-6,
        80e9,
        2.039e12,
        "A100 SXM 80GB: 312 TFLOP/s dense bf16 (datasheet); InfiniBand 100 Gb/s = 12.5 GB/s per "
        "GPU per direction (Ring Attention paper, Table 2); ~5 us latency",
    ),
    _preset(
        "h100-nvlink",
        989e12,
        67e12,
        450e9,
        5e-6,
        80e9,
        3.35e12,
        "H100 SXM 80GB: 989 TFLOP/s dense bf16, 67 fp32 (NVIDIA datasheet); NVLink4 900 GB/s "
        "total = 450 GB/s per direction; ~5 us p2p latency",
    ),
    _preset(
        "h200-nvlink",
        989e12,
        67e12,
        450e9,
        5e-6,
        141e9,
        4.8e12,
        "H200 SXM 141GB: 989 TFLOP/s dense bf16 (same GH100 die as H100), HBM3e 4.8 TB/s "
        "(datasheet); NVLink4 450 GB/s per direction; ~5 us p2p latency",
    ),
    _preset(
        "h200-ib",
        989e12,
        67e12,
        50e9,
        5e-6,
        141e9,
        4.8e12,
        "H200 SXM 141GB: 989 TFLOP/s dense bf16 (datasheet); one ConnectX-7 NDR 400 Gb/s = "
        "50 GB/s per GPU per direction; ~5 us latency",
    ),
    _preset(
        "h800-nvlink",
        989e12,
        67e12,
        200e9,
        5e-6,
        80e9,
        3.35e12,
        "H800 SXM 80GB: the H100 SXM die, 989 TFLOP/s dense bf16, HBM3 3.35 TB/s; NVLink cut to "
        "400 GB/s total = 200 GB/s per direction (DeepEP issue #16 and DeepSeek-V3 issue #28, "
        "maintainers; DeepSeek measures ~160 GB/s one-way); ~5 us p2p latency",
    ),
    _preset(
        "tpu-v3",
        123e12,
        123e12 / 6,
        112e9,
        2e-6,
        32e9,
        900e9,
        "TPU v3: 123 TFLOP/s bf16 per chip, 32 GiB HBM2 at 900 GB/s (Google Cloud docs; the Ring "
        "Attention paper's Table 2 lists 16 GB, one TensorCore's half); ICI 112 GB/s one-way as "
        "in that Table 2; fp32 ~ bf16/6 (estimate, as tpu-v4)",
    ),
    _preset(
        "tpu-v4",
        275e12,
        275e12 / 6,
        268e9,
        2e-6,
        32e9,
        1.2e12,
        "TPU v4: 275 TFLOP/s bf16, 32 GB HBM 1.2 TB/s (Google Cloud docs); ICI 268 GB/s one-way "
        "as in the Ring Attention paper, Table 2; fp32 ~ bf16/6 (6-pass bf16 matmul, estimate)",
    ),
    _preset(
        "tpu-v5e",
        197e12,
        197e12 / 6,
        186e9,
        2e-6,
        16e9,
        819e9,
        "TPU v5e: 197 TFLOP/s bf16, 16 GB HBM 819 GB/s (Google Cloud docs); ICI ~186 GB/s "
        "one-way (paper-style estimate); fp32 ~ bf16/6 (estimate)",
    ),
]

RESULTS_DIR = Path(__file__).resolve().parents[2] / "results"


def save_profile(hw: Hardware, path: str | Path) -> None:
    """Write ``hw`` as JSON (the fields of ``Hardware``) to ``path``."""
    data = asdict(hw)
    Path(path).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def load_profile(path: str | Path) -> Hardware:
    """Read a profile written by ``save_profile``; a bad file is a ``ValueError`` naming it.
    Fields added to ``Hardware`` later (with defaults) may be missing: older profiles load."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"profile {str(path)!r} could not be read as JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"profile {str(path)!r} must hold a JSON object, got {type(data)}")
    known = set(Hardware.__dataclass_fields__)
    unknown = set(data) - known
    if unknown:
        raise ValueError(f"profile {str(path)!r} has unknown keys {sorted(unknown)}")
    try:
        return Hardware(**data)
    except TypeError as exc:
        raise ValueError(f"profile {str(path)!r} is incomplete: {exc}") from None


def _calibrated_presets() -> dict[str, Hardware]:
    """``cpu-calibrated`` from the newest ``results/cpu-profile*.json``, if there is one."""
    found = sorted(RESULTS_DIR.glob("cpu-profile*.json")) if RESULTS_DIR.is_dir() else []
    for path in reversed(found):
        try:
            hw = load_profile(path)
        except ValueError:
            continue  # a half-written or foreign file must not break `import ringsim`
        return {"cpu-calibrated": replace(hw, name="cpu-calibrated")}
    return {}


PRESETS: dict[str, Hardware] = {hw.name: hw for hw in _BUILTIN}
CALIBRATED: dict[str, Hardware] = _calibrated_presets()


def all_hardware() -> dict[str, Hardware]:
    """The presets, then the calibrated profiles."""
    return PRESETS | CALIBRATED


def get_hardware(name: str) -> Hardware:
    """The preset (or calibrated profile) called ``name``."""
    known = all_hardware()
    if name not in known:
        raise ValueError(f"unknown hardware preset {name!r}; known: {', '.join(known)}")
    return known[name]


def custom_hardware(
    flops: float,
    bandwidth: float,
    latency: float = 0.0,
    memory: float = 80e9,
    dtype: str = "bf16",
) -> Hardware:
    """Hardware from raw numbers: ``flops`` FLOP/s at ``dtype``, ``bandwidth`` bytes/s per
    direction, ``latency`` seconds per message, ``memory`` bytes."""
    dtype = check_dtype(dtype)
    flops = _check_rate("flops", flops)
    bandwidth = _check_rate("bandwidth", bandwidth)
    latency = _check_rate("latency", latency, allow_zero=True)
    memory = _check_rate("memory", memory)
    source = f"custom: {flops:.3g} FLOP/s ({dtype}), {bandwidth:.3g} B/s, {latency:.3g} s latency"
    return Hardware("custom", {dtype: flops}, bandwidth, latency, memory, 1.0, source)
