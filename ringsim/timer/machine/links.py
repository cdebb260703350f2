"""What kind of link a device talks over, and how NCCL uses it: one ``LinkModel`` per kind.

A ``Hardware`` carries its ``link`` (NVLink, InfiniBand, PCIe, a TPU's ICI, or the ideal link
of the paper's model); ``ringsim.timer.machine.collectives`` times a transfer with it (the
protocol's efficiency by message size, the SMs its kernel takes from compute). ``LINKS`` holds
the kinds by name, for hardware files that name one.
"""

from __future__ import annotations

from dataclasses import dataclass

from ringsim.checks import check_entry


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
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"link name must be a non-empty string, got {self.name!r}")
        for attr in ("efficiency", "ll_efficiency"):
            value = getattr(self, attr)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"{attr} must be in (0, 1], got {value!r}")
            if not 0.0 < value <= 1.0:
                raise ValueError(f"{attr} must be in (0, 1], got {value!r}")
        threshold = self.ll_threshold
        if isinstance(threshold, bool) or not isinstance(threshold, int | float) or threshold < 0:
            raise ValueError(f"ll_threshold must be >= 0, got {threshold!r}")
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
PCIE = LinkModel(
    "pcie",
    0.8,
    source="estimate: NCCL's p2p over PCIe taken at NVLink's terms (~80% of the line rate, LL "
    f"below 16 KiB at half of it; no PCIe send/recv measurement in our sources); {_CHANNELS}",
)
ICI = LinkModel(
    "ici",
    1.0,
    ll_threshold=0.0,
    ll_efficiency=1.0,
    channels=0,
    source="a TPU's inter-chip interconnect: no NCCL; transfers at the line rate, as in the "
    "Ring Attention paper's model",
)
IDEAL = LinkModel(
    "ideal",
    1.0,
    ll_threshold=0.0,
    ll_efficiency=1.0,
    channels=0,
    source="the ideal link: line rate, no SMs taken",
)
ACHIEVED = LinkModel(
    "achieved p2p",
    1.0,
    source="NCCL send/recv at a measured achieved bandwidth (Hardware.p2p_bandwidth): no "
    "further protocol efficiency on large messages; LL below 16 KiB at half of it; channels as "
    "NVLink",
)

LINKS: dict[str, LinkModel] = {k.name: k for k in (NVLINK, INFINIBAND, PCIE, ICI, IDEAL)}
"""The link kinds a device can have, by name (a hardware file may name one of these)."""


def get_link(link: str | LinkModel | dict) -> LinkModel:
    """``link`` as a ``LinkModel``: one as is, a name of ``LINKS``, or a dict of its fields."""
    return check_entry("link", link, LinkModel, LINKS)
