"""What one host of the ring can do: FLOP rate, link bandwidth and latency, memory.

Rates are **peak dense** numbers by default (``efficiency=1.0``), as in the Ring Attention
paper's Table 2, so the overlap thresholds here can be set beside the paper's. Multiply by an
achieved fraction (``efficiency``) to model a real kernel. Link bandwidth is **per direction**:
in a unidirectional ring each host only sends to one neighbour and receives from the other, so
the one-way rate is what bounds a transfer.

A calibrated profile (FLOP/s and bandwidth measured on this machine by the real backend) is
saved with ``save_profile`` as JSON under ``results/``; the newest ``results/cpu-profile*.json``
becomes the profile ``cpu-calibrated``. Calibrated profiles are read on first use
(``calibrated_profiles``: ``import ringsim`` scans nothing) and are not ``PRESETS``: a preset
states peak rates for every dtype of the paper's comparison, while a calibrated profile knows
only the dtype it was measured at. ``get_hardware`` finds both.
"""

from __future__ import annotations

import functools
import math
import numbers
import re
import sys
from dataclasses import MISSING, asdict, dataclass, replace
from pathlib import Path

from ringsim.checks import check_choice
from ringsim.files import read_json_object, write_json

DTYPES = ("bf16", "fp16", "fp32")


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


def check_dtype(dtype: object) -> str:
    return check_choice("dtype", dtype, DTYPES)


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

RESULTS_DIR = Path(__file__).resolve().parents[3] / "results"


PROFILE_GLOB = "cpu-profile*.json"  # the files that become ``cpu-calibrated``
SAVED_KEY = "saved"  # when the profile was written (ISO date-time); not a ``Hardware`` field


def save_profile(hw: Hardware, path: str | Path) -> None:
    """Write ``hw`` as JSON (the fields of ``Hardware`` and the ``saved`` date-time) to
    ``path``, atomically: a temporary file renamed over ``path``, so a reader (or a crash
    half-way) never leaves half a profile."""
    from datetime import datetime

    data = {**asdict(hw), SAVED_KEY: datetime.now().isoformat(timespec="seconds")}
    write_json(path, data, sort_keys=True)


def load_profile(path: str | Path) -> Hardware:
    """Read a profile written by ``save_profile``; a bad file (unreadable, empty, truncated, not
    an object, unknown or missing fields, a bad value) is a ``ValueError`` naming it and the
    cause. Fields added to ``Hardware`` later (with defaults) may be missing: older profiles
    load."""
    path = Path(path)
    data = read_json_object(path, what="profile")
    data.pop(SAVED_KEY, None)
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
    for text in (data.get(SAVED_KEY), data.get("source")):
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


def get_hardware(name: str) -> Hardware:
    """The preset (or calibrated profile) called ``name``."""
    if not isinstance(name, str):
        raise ValueError(f"hardware must be a preset name (a string), got {name!r}")
    known = all_hardware()
    if name in known:
        return known[name]
    errors = calibrated_profiles()[1]
    if name in errors:
        raise ValueError(f"hardware {name!r}: {errors[name]}")
    raise ValueError(f"unknown hardware preset {name!r}; known: {', '.join(known)}")


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
