"""Transfers that behave like NCCL: time against message size, duplex links, and the compute
they slow down while they run beside it.

The ideal ring moves ``bytes`` in ``latency + bytes / bandwidth`` and overlaps it with compute
for free. NCCL does neither:

* **protocol**: a point-to-point message below ``ll_threshold`` bytes goes by the LL protocol,
  whose 8-byte stores carry 4 bytes of data and a 4-byte flag (half the link); larger ones by
  the Simple protocol, which reaches ``efficiency`` of the line rate (NVLink: ~80%, the
  "~20% protocol overhead" an NCCL maintainer quotes for H100, and DeepSeek's 160 of 200 GB/s
  measured on H800);
* **duplex**: a link carries its rated bandwidth in each direction at once, so a host that
  sends one block and receives another pays ``max``, not the sum (``exchange_seconds``);
* **SMs**: the NCCL kernel runs on ``channels`` thread blocks, one SM each, taken from the
  compute kernels beside it. While a transfer runs, compute goes at ``1 - channels / SMs`` of
  its rate: in the timer's overlap rule (``HostClock.overlapped``: both stretched by
  ``(1 - f) min(compute, transfer)``) that is ``f = 1 - channels / SMs``
  (``overlap_efficiency``).

* **achieved point-to-point bandwidth**: what NCCL's send/recv between two GPUs reaches is well
  below the line rate and below the collectives' bus bandwidth, and differs from machine to
  machine (message size, NCCL version, channels): a machine property known only as a range
  (``achieved_p2p``, a ``ringsim.timer.machine.ranges.Range`` per preset), which a ring's hop
  transfers use in place of ``efficiency x`` the line rate.

Every function takes plain numbers (bytes, bytes/s, seconds), so a topology
(``ringsim.timer.machine.topology``) can hand in each hop's own link.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ringsim.timer.machine.hardware import Hardware
from ringsim.timer.machine.ranges import Range, middle


@dataclass(frozen=True)
class LinkModel:
    """How NCCL uses one kind of link: ``efficiency`` of the line rate for large messages,
    ``ll_efficiency`` below ``ll_threshold`` bytes, ``channels`` SMs its kernel occupies."""

    name: str
    efficiency: float
    ll_threshold: float = 16384.0
    ll_efficiency: float = 0.5
    channels: int = 4
    source: str = ""

    def __post_init__(self) -> None:
        for attr in ("efficiency", "ll_efficiency"):
            value = getattr(self, attr)
            if not 0.0 < value <= 1.0:
                raise ValueError(f"{attr} must be in (0, 1], got {value!r}")
        if self.ll_threshold < 0:
            raise ValueError(f"ll_threshold must be >= 0, got {self.ll_threshold!r}")
        if isinstance(self.channels, bool) or not isinstance(self.channels, int):
            raise ValueError(f"channels must be a non-negative integer, got {self.channels!r}")
        if self.channels < 0:
            raise ValueError(f"channels must be a non-negative integer, got {self.channels!r}")


_CHANNELS = (
    "channels: estimate, NCCL splits its p2p channels (32) over the peers of an 8-GPU "
    "communicator, ~4 thread blocks per peer; not measured here"
)
NVLINK = LinkModel(
    "nvlink",
    0.8,
    source="NCCL over NVLink reaches ~80% of line rate: H100 ~370 of 450 GB/s "
    "(NVIDIA/nccl-tests#212, maintainer), A100 ~230 of 300 (NVIDIA/nccl-tests#149), H800 160 of "
    "200 GB/s (deepseek-ai/DeepSeek-V3#28); LL below NCCL_P2P_LL_THRESHOLD = 16 KiB (NCCL "
    f"environment docs) at half the link; {_CHANNELS}",
)
INFINIBAND = LinkModel(
    "infiniband",
    0.9,
    channels=2,
    source="estimate: NCCL over one NIC per GPU reaches ~90% of the port's rate; 2 thread "
    "blocks per net peer (NCCL_NCHANNELS_PER_NET_PEER default 2, NCCL environment docs)",
)
IDEAL = LinkModel(
    "ideal",
    1.0,
    ll_threshold=0.0,
    ll_efficiency=1.0,
    channels=0,
    source="the ideal link: line rate, no SMs taken",
)


_HOPPER_P2P = (
    "NVIDIA/nccl-tests#268: sendrecv_perf between 2 NVLink H100s reaches ~80 GB/s at the "
    "default sizes, rising to a ~180 GB/s plateau for messages up to 4 GB (nvbandwidth on "
    "the same pair: 260 GB/s)"
)
ACHIEVED_P2P: dict[str, Range] = {
    "h100-nvlink": Range(80e9, middle(80e9, 180e9), 180e9, "low", _HOPPER_P2P),
    "h200-nvlink": Range(
        80e9, middle(80e9, 180e9), 180e9, "low", f"{_HOPPER_P2P}; NVLink4 as the H100's"
    ),
    "h800-nvlink": Range(
        80e9,
        middle(80e9, 160e9),
        160e9,
        "low",
        f"{_HOPPER_P2P}; the high end capped by the H800's link: ~160 of 200 GB/s one-way "
        "measured by DeepSeek (deepseek-ai/DeepSeek-V3#28)",
    ),
    "a100-nvlink": Range(
        72e9,
        middle(72e9, 230e9),
        230e9,
        "low",
        "NVIDIA/nccl-tests#331: sendrecv_perf between 2 A100s over NVLink3 tops at 72 GB/s; "
        "high end the collective bus bandwidth of an 8xA100 NVSwitch box, ~230 GB/s "
        "(all_reduce_perf busbw, NVIDIA/nccl-tests#149), which point-to-point does not exceed",
    ),
}
"""Achieved NCCL send/recv bytes/s on one ring hop, by hardware preset (NVLink presets; the
others keep ``efficiency x`` the line rate)."""

ACHIEVED = LinkModel(
    "achieved p2p",
    1.0,
    source="NCCL send/recv at a measured achieved bandwidth (ACHIEVED_P2P): no further "
    "protocol efficiency on large messages; LL below 16 KiB at half of it; channels as NVLink",
)


def achieved_p2p(hardware: Hardware) -> Range | None:
    """The achieved send/recv bandwidth range of ``hardware`` (``None``: not known; its hops
    move at ``link_model(hardware).efficiency`` of the line rate)."""
    return ACHIEVED_P2P.get(hardware.name)


def link_model(hardware: Hardware) -> LinkModel:
    """The NCCL link model of a preset: InfiniBand for ``*-ib``, else NVLink."""
    return INFINIBAND if hardware.name.endswith("-ib") else NVLINK


def p2p_seconds(
    nbytes: float | np.ndarray,
    bandwidth: float | np.ndarray,
    latency: float | np.ndarray,
    *,
    link: LinkModel = NVLINK,
    messages: int = 1,
) -> np.ndarray:
    """Seconds to send ``nbytes`` in ``messages`` equal messages over a link of ``bandwidth``
    bytes/s (one direction) and ``latency`` seconds per message: each message pays the latency
    and its bytes over ``bandwidth x`` the protocol's efficiency (LL below the threshold)."""
    nbytes = np.asarray(nbytes, dtype=float)
    if np.any(nbytes < 0) or not np.all(np.isfinite(nbytes)):
        raise ValueError(f"nbytes must be finite and >= 0, got {nbytes!r}")
    if messages < 0:
        raise ValueError(f"messages must be >= 0, got {messages!r}")
    if messages == 0:
        return np.zeros_like(nbytes)
    size = nbytes / messages
    eff = np.where(size < link.ll_threshold, link.ll_efficiency, link.efficiency)
    return messages * np.asarray(latency, dtype=float) + nbytes / (bandwidth * eff)


def exchange_seconds(
    send_seconds: float | np.ndarray, recv_seconds: float | np.ndarray, *, duplex: bool = True
) -> np.ndarray:
    """A host sending one message while receiving another: a duplex link runs both at once
    (``max``), a half-duplex one in turn (sum)."""
    send, recv = np.asarray(send_seconds, float), np.asarray(recv_seconds, float)
    return np.maximum(send, recv) if duplex else send + recv


def sm_share(sms: int, link: LinkModel = NVLINK) -> float:
    """Fraction of a GPU's ``sms`` SMs the NCCL kernel occupies while it runs."""
    if isinstance(sms, bool) or not isinstance(sms, int) or sms <= 0:
        raise ValueError(f"sms must be a positive integer, got {sms!r}")
    return min(1.0, link.channels / sms)


def overlap_efficiency(sms: int, link: LinkModel = NVLINK) -> float:
    """The timer's ``f`` for compute beside an NCCL transfer: ``1 - channels / SMs`` (compute
    loses those SMs' share of its rate while the transfer runs)."""
    return 1.0 - sm_share(sms, link)


def achieved_bandwidth(
    nbytes: float, bandwidth: float, latency: float, link: LinkModel = NVLINK
) -> float:
    """Bytes/s a message of ``nbytes`` actually moves at (nccl-tests' ``algbw`` for one p2p)."""
    if not nbytes > 0 or not math.isfinite(nbytes):
        raise ValueError(f"nbytes must be positive, got {nbytes!r}")
    return nbytes / float(p2p_seconds(nbytes, bandwidth, latency, link=link))
