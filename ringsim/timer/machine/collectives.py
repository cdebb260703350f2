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
  (``overlap_efficiency``);
* **achieved point-to-point bandwidth**: what NCCL's send/recv between two GPUs reaches is well
  below the line rate and below the collectives' bus bandwidth, and differs from machine to
  machine (message size, NCCL version, channels): a machine property known only as a range
  (``Hardware.p2p_bandwidth``, a ``ringsim.timer.machine.ranges.Range``), which a ring's hop
  transfers use in place of ``efficiency x`` the line rate.

The link kinds and their terms (``LinkModel``: NVLink, InfiniBand, PCIe, ...) are in
``ringsim.timer.machine.links``; a ``Hardware`` names its own (``Hardware.link``). Every
function here takes plain numbers (bytes, bytes/s, seconds) and a ``LinkModel``, so a topology
(``ringsim.timer.machine.topology``) can hand in each hop's own link.
"""

from __future__ import annotations

import math

import numpy as np

from ringsim.timer.machine.links import NVLINK, LinkModel


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
