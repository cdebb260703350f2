"""Clusters: nodes of devices, the links inside a node and the network between nodes.

A ``Cluster`` is ``nodes x gpus_per_node`` devices of one ``Hardware`` (FLOP/s, memory). Inside
a node the devices talk over an **intra-node fabric**: an NVLink switch (every device drives
``intra_bandwidth`` bytes/s each way to any peer at once) or PCIe, where devices hang in groups
of ``switch_group`` under one PCIe switch whose uplink (``switch_uplink`` bytes/s each way) all
their traffic out of the group shares. Between nodes every device reaches the **network**
through a NIC of ``inter_bandwidth`` bytes/s each way; ``nics_per_node`` of them (one per
device, "rail style", unless fewer), device ``d`` using NIC ``d * nics // gpus_per_node``.

Ranks are placed in order: rank ``r`` is device ``r % G`` of node ``r // G``.

**The link model: bottleneck edges.** A transfer between two ranks crosses *edges*: the
sender's device port and the receiver's (the intra-node fabric; on PCIe also for traffic that
leaves the node), the uplinks of the PCIe switches it leaves or enters, and the NICs of both
nodes when it crosses nodes. When several transfers run at once (the hops of a ring step, the
pairs of an all-to-all), an edge's capacity is shared by the transfers that use it, and a
transfer runs at its most loaded edge's pace. That is the bisection and NIC limit of a
collective, without simulating packets:

* ``ring_links``: for every rank, the bandwidth and latency of its hop to the next rank of its
  ring, with every ring given running at once (the slowest hop paces a ring; the timer sees it);
* ``alltoall_links``: each rank sends an equal share to every other rank of its group, all
  groups at once; a rank finishes when its most loaded edge has carried its load;
* ``allgather_links``: a ring all-gather (or reduce-scatter) over each group; where the ring
  crosses nodes, NCCL runs one ring per NIC ("channels") so the crossing is
  ``min(nics, members per node)`` NICs wide (ml-engineering, network/README.md: inter-node
  collectives use all NICs at once).

Each returns per-rank ``(bandwidth, latency)`` arrays; time is then ``latency + bytes /
bandwidth`` (``HostClock.transfer``). A rank whose own port is its bottleneck gets exactly the
port's bandwidth, so a one-node cluster with a switch (``Cluster.switch``) times every
transfer bit for bit as the flat ring of ``Hardware.link_bandwidth`` and ``link_latency``.

Not modelled: switch-hop latency per tier, network oversubscription, adaptive routing, SHARP
(in-switch reduction), the socket link (UPI/xGMI) of a two-socket PCIe box.
"""

from __future__ import annotations

import functools
import math
from collections import Counter, OrderedDict
from dataclasses import dataclass, replace

import numpy as np

from ringsim.checks import check_positive_int
from ringsim.timer.machine.arch import ADA, AMPERE
from ringsim.timer.machine.hardware import A100_80GB_BYTES, Hardware, dense, get_hardware
from ringsim.timer.machine.links import PCIE

LINKS_REMEMBERED = 256
"""Link patterns each of ``Cluster``'s three pattern methods remembers (a planner asks for
the same groups of the same cluster once per strategy, layout and pass)."""


def _remembered(method):
    """``method(cluster, groups, hosts)`` computed once per distinct arguments (the cluster,
    its groups as tuples, the hosts; the ``LINKS_REMEMBERED`` latest kept), its arrays copied
    out so that a caller may write to them."""
    memo: OrderedDict = OrderedDict()

    @functools.wraps(method)
    def remembered(self, groups, hosts):
        key = (self, tuple(map(tuple, groups)), hosts)
        if key in memo:
            memo.move_to_end(key)
        else:
            memo[key] = method(self, groups, hosts)
            if len(memo) > LINKS_REMEMBERED:
                memo.popitem(last=False)
        return tuple(a.copy() for a in memo[key])

    return remembered


@dataclass(frozen=True)
class Cluster:
    """``nodes`` (None: as many as a run needs) nodes of ``gpus_per_node`` devices; bandwidths in
    bytes/s per direction, latencies in seconds per message (see the module docstring)."""

    name: str
    hardware: Hardware
    gpus_per_node: int
    intra_bandwidth: float
    intra_latency: float
    inter_bandwidth: float
    inter_latency: float
    nodes: int | None = None
    nics_per_node: int | None = None
    switch_group: int = 0
    switch_uplink: float = 0.0
    fabric: str = "nvswitch"
    source: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.hardware, Hardware):
            raise ValueError(f"hardware must be a Hardware, got {self.hardware!r}")
        g = check_positive_int("gpus_per_node", self.gpus_per_node)
        if self.nodes is not None:
            check_positive_int("nodes", self.nodes)
        nics = g if self.nics_per_node is None else self.nics_per_node
        object.__setattr__(self, "nics_per_node", check_positive_int("nics_per_node", nics))
        for name in ("intra_bandwidth", "inter_bandwidth"):
            _check_rate(name, getattr(self, name), positive=True)
        for name in ("intra_latency", "inter_latency"):
            _check_rate(name, getattr(self, name))
        if self.fabric not in ("nvswitch", "pcie"):
            raise ValueError(f"fabric must be nvswitch or pcie, got {self.fabric!r}")
        if self.switch_group:
            group = check_positive_int("switch_group", self.switch_group)
            if g % group:
                raise ValueError(
                    f"switch_group must divide gpus_per_node={g}, got switch_group={group}"
                )
            _check_rate("switch_uplink", self.switch_uplink, positive=True)

    # -- construction --------------------------------------------------------------------
    @classmethod
    def switch(cls, hardware: Hardware, hosts: int) -> Cluster:
        """One node of ``hosts`` devices on an ideal switch at the hardware's link: the flat
        ring's world (every hop ``link_bandwidth``, ``link_latency``)."""
        return cls(
            "switch",
            hardware,
            check_positive_int("hosts", hosts),
            hardware.link_bandwidth,
            hardware.link_latency,
            hardware.link_bandwidth,
            hardware.link_latency,
            nodes=1,
            source="one node, ideal switch at the hardware's link",
        )

    @classmethod
    def from_links(
        cls,
        hardware: Hardware,
        gpus_per_node: int,
        inter_bandwidth: float,
        inter_latency: float = 5e-6,
        nodes: int | None = None,
    ) -> Cluster:
        """Nodes of ``gpus_per_node`` devices joined inside by the hardware's link (a switch)
        and between nodes by one NIC per device of ``inter_bandwidth`` bytes/s."""
        return cls(
            "custom",
            hardware,
            gpus_per_node,
            hardware.link_bandwidth,
            hardware.link_latency,
            inter_bandwidth,
            inter_latency,
            nodes=nodes,
            source=f"{gpus_per_node} x {hardware.name} per node; {inter_bandwidth:.3g} B/s NIC",
        )

    def with_nodes(self, nodes: int) -> Cluster:
        return replace(self, nodes=check_positive_int("nodes", nodes))

    # -- placement -----------------------------------------------------------------------
    def check_hosts(self, hosts: int) -> int:
        """``hosts`` if the cluster holds that many devices (``ValueError`` naming it else)."""
        hosts = check_positive_int("hosts", hosts)
        if self.nodes is not None and hosts > self.nodes * self.gpus_per_node:
            raise ValueError(
                f"hosts={hosts} does not fit cluster {self.name!r}: {self.nodes} nodes x "
                f"{self.gpus_per_node} devices = {self.nodes * self.gpus_per_node}"
            )
        return hosts

    def nodes_for(self, hosts: int) -> int:
        return math.ceil(self.check_hosts(hosts) / self.gpus_per_node)

    def node(self, rank: int) -> int:
        return rank // self.gpus_per_node

    def _nic(self, rank: int) -> tuple:
        device = rank % self.gpus_per_node
        return (self.node(rank), device * self.nics_per_node // self.gpus_per_node)

    def _group(self, rank: int) -> tuple | None:
        if not self.switch_group:
            return None
        return (self.node(rank), (rank % self.gpus_per_node) // self.switch_group)

    # -- edges -----------------------------------------------------------------------------
    def edges(self, src: int, dst: int) -> list[tuple]:
        """The edges a transfer ``src -> dst`` crosses (keys of ``capacity``)."""
        crosses = self.node(src) != self.node(dst)
        out: list[tuple] = []
        if not crosses or self.fabric == "pcie":  # NVLink carries no NIC traffic
            out += [("port-out", src), ("port-in", dst)]
        g_src, g_dst = self._group(src), self._group(dst)
        if g_src is not None and (crosses or g_src != g_dst):
            out += [("up-out", g_src), ("up-in", g_dst)]
        if crosses:
            out += [("nic-out", self._nic(src)), ("nic-in", self._nic(dst))]
        return out

    def capacity(self, edge: tuple) -> float:
        kind = edge[0]
        if kind.startswith("port"):
            return self.intra_bandwidth
        if kind.startswith("up"):
            return self.switch_uplink
        return self.inter_bandwidth

    def latency(self, src: int, dst: int) -> float:
        return self.inter_latency if self.node(src) != self.node(dst) else self.intra_latency

    # -- the three patterns ------------------------------------------------------------------
    @_remembered
    def ring_links(self, rings: list[list[int]], hosts: int) -> tuple[np.ndarray, np.ndarray]:
        """``(bandwidth, latency)`` ``(hosts,)`` of each rank's hop to the next rank of its ring
        (``rings``: lists of ranks in ring order, all running at once; a rank in no ring gets
        its port's bandwidth). A one-rank ring has no hop."""
        flows = [(r[i], r[(i + 1) % len(r)]) for r in rings if len(r) > 1 for i in range(len(r))]
        load = Counter(e for f in flows for e in self.edges(*f))
        bandwidth = np.full(hosts, self.intra_bandwidth)
        latency = np.full(hosts, self.intra_latency)
        for src, dst in flows:
            bandwidth[src] = min(self.capacity(e) / load[e] for e in self.edges(src, dst))
            latency[src] = self.latency(src, dst)
        return bandwidth, latency

    @_remembered
    def alltoall_links(self, groups: list[list[int]], hosts: int) -> tuple[np.ndarray, np.ndarray]:
        """``(bandwidth, latency)`` ``(hosts,)`` of an all-to-all in each group (all at once):
        a rank sending ``M`` bytes in all (``M / (n - 1)`` to each peer) takes
        ``latency + M / bandwidth``; ``latency`` sums its ``n - 1`` messages' latencies."""
        flows = [(s, d) for g in groups for s in g for d in g if s != d]
        load = Counter(e for f in flows for e in self.edges(*f))
        bandwidth = np.full(hosts, self.intra_bandwidth)
        latency = np.zeros(hosts)
        for group in groups:
            n = len(group)
            for src in group:
                peers = [d for d in group if d != src]
                intra = sum(self.node(d) == self.node(src) for d in peers)
                latency[src] = intra * self.intra_latency + (n - 1 - intra) * self.inter_latency
                if not peers:
                    continue
                # seconds per byte-per-peer on the most loaded edge, against the free port's
                slowest = max(load[e] / self.capacity(e) for d in peers for e in self.edges(src, d))
                if slowest > (n - 1) / self.intra_bandwidth:
                    bandwidth[src] = (n - 1) / slowest
        return bandwidth, latency

    @_remembered
    def allgather_links(self, groups: list[list[int]], hosts: int) -> tuple[np.ndarray, np.ndarray]:
        """``(bandwidth, latency per message)`` ``(hosts,)`` of a ring all-gather (or
        reduce-scatter) in each group, all at once: ``n - 1`` steps, each paced by the group's
        slowest hop, its node crossings spread over ``min(nics, members per node)`` NICs."""
        bandwidth, latency = self.ring_links(groups, hosts)
        out_bw, out_lat = bandwidth.copy(), latency.copy()
        for group in groups:
            if len(group) < 2:
                continue
            per_node = Counter(self.node(r) for r in group)
            channels = min(self.nics_per_node, min(per_node.values()))
            hops = bandwidth[group]
            following = group[1:] + group[:1]
            pairs = zip(group, following, strict=True)
            crossing = np.array([self.node(a) != self.node(b) for a, b in pairs])
            hops = np.where(crossing, np.minimum(hops * channels, self.intra_bandwidth), hops)
            out_bw[group] = hops.min()
            out_lat[group] = latency[group].max()
        return out_bw, out_lat

    def describe(self) -> str:
        nodes = "N" if self.nodes is None else str(self.nodes)
        intra = f"{self.fabric} {self.intra_bandwidth / 1e9:.4g} GB/s"
        if self.switch_group:
            intra += f" ({self.switch_group} per switch, uplink {self.switch_uplink / 1e9:.4g})"
        return (
            f"{nodes} x {self.gpus_per_node} {self.hardware.name}; {intra}; "
            f"{self.nics_per_node} NICs x {self.inter_bandwidth / 1e9:.4g} GB/s per node"
        )


def _check_rate(name: str, value: object, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise ValueError(
            f"{name} must be a finite {'positive' if positive else 'non-negative'} "
            f"number, got {value!r}"
        )
    return float(value)


# -- devices the hardware presets do not have ------------------------------------------------
_L20 = Hardware(
    name="l20",
    arch=ADA,
    flops=dense(bf16=119.5e12, fp32=59.8e12),
    memory_bytes=48e9,
    memory_bandwidth=864e9,
    link=PCIE,
    link_bandwidth=31.5e9,
    link_latency=5e-6,
    source="NVIDIA L20 48GB (AD102, PCIe 4.0 x16): 119.5 TFLOP/s dense bf16/fp16 and 59.8 fp32 "
    "as vendors list it (no NVIDIA datasheet in our sources), GDDR6 864 GB/s (technical.city, "
    "topcpu.net spec pages); link: PCIe 4.0 x16 ~31.5 GB/s per direction",
)
_A100_PCIE = Hardware(
    name="a100-pcie",
    arch=AMPERE,
    flops=dense(bf16=312e12, fp32=19.5e12),
    memory_bytes=A100_80GB_BYTES,
    memory_bandwidth=1.935e12,
    link=PCIE,
    link_bandwidth=31.5e9,
    link_latency=5e-6,
    source="A100 PCIe 80GB: 312 TFLOP/s dense bf16 (NVIDIA A100 datasheet; DeepSeek Fire-Flyer, "
    "arXiv 2408.14158 Table II measures 83% of SXM's GEMM rate); PCIe 4.0 x16 ~31.5 GB/s per "
    "direction; memory 81920 MiB, as nvidia-smi reports it",
)
PCIE4_X16 = 31.5e9
"""PCIe 4.0 x16: ~31.5 GB/s per direction (ml-engineering network/README.md, PCIe table)."""

CLUSTERS: dict[str, Cluster] = {
    c.name: c
    for c in [
        Cluster(
            "dgx-a100",
            get_hardware("a100-nvlink"),
            8,
            300e9,
            5e-6,
            25e9,
            5e-6,
            source="DGX A100: 8 x A100 SXM4 80GB on 6 NVSwitch gen2, 300 GB/s per GPU per "
            "direction (NVIDIA DGX A100 blog); 8 compute ConnectX-6 HDR 200 Gb/s = 25 GB/s per "
            "GPU (Fire-Flyer, arXiv 2408.14158 Table I); ~5 us NCCL p2p latency",
        ),
        Cluster(
            "dgx-h100",
            get_hardware("h100-nvlink"),
            8,
            450e9,
            5e-6,
            50e9,
            5e-6,
            source="DGX H100: 8 x H100 SXM5 on 4 NVSwitch gen3, 900 GB/s bidirectional = 450 GB/s "
            "per direction per GPU; 8 ConnectX-7 NDR 400 Gb/s = 50 GB/s, one per GPU (NVIDIA "
            "DGX H100/H200 user guide, as cited by ml-engineering network/README.md)",
        ),
        Cluster(
            "dgx-h200",
            get_hardware("h200-nvlink"),
            8,
            450e9,
            5e-6,
            50e9,
            5e-6,
            source="DGX H200: the DGX H100 topology (NVLink4 450 GB/s per direction, 8 x CX-7 "
            "400 Gb/s) with 141 GB HBM3e GPUs (DGX H100/H200 user guide; MLPerf v4.1 system "
            "description H200-SXM-141GBx8)",
        ),
        Cluster(
            "hgx-h800",
            get_hardware("h800-nvlink"),
            8,
            200e9,
            5e-6,
            50e9,
            5e-6,
            source="H800 nodes as DeepSeek-V3 describes its cluster (arXiv 2412.19437 Sec. 3.1, "
            "3.2.2): 8 GPUs per node on NVLink+NVSwitch (400 GB/s bidirectional spec, "
            "~160 GB/s achieved), one 400 Gb/s IB NIC (50 GB/s) per GPU",
        ),
        Cluster(
            "pcie-8x-l20",
            _L20,
            8,
            PCIE4_X16,
            5e-6,
            25e9,
            5e-6,
            nics_per_node=1,
            switch_group=2,
            switch_uplink=PCIE4_X16,
            fabric="pcie",
            source="8 x L20 PCIe box (the USP/YunChang benchmark machine): PCIe 4.0 x16 per GPU, "
            "no NVLink; 4 PCIe switches of 2 GPUs, each on one x16 uplink (the layout of the USP "
            "paper's Fig. 4, arXiv 2405.07719, assumed: the benchmark does not state its "
            "topology); one 200 Gb/s NIC per node (Fire-Flyer, arXiv 2408.14158)",
        ),
        Cluster(
            "pcie-4x-a100",
            _A100_PCIE,
            4,
            PCIE4_X16,
            5e-6,
            25e9,
            5e-6,
            nics_per_node=1,
            switch_group=2,
            switch_uplink=PCIE4_X16,
            fabric="pcie",
            source="4 x A100 PCIe box (the YunChang 4-GPU benchmark machine): PCIe 4.0 x16 per "
            "GPU; 2 GPUs per PCIe switch or root port on one x16 uplink (assumed, as USP "
            "Fig. 4); one 200 Gb/s NIC per node (Fire-Flyer, arXiv 2408.14158)",
        ),
    ]
}


def get_cluster(name: str) -> Cluster:
    if not isinstance(name, str):
        raise ValueError(f"cluster must be a preset name (a string), got {name!r}"[:200])
    if name not in CLUSTERS:
        raise ValueError(f"unknown cluster preset {name!r}; known: {', '.join(CLUSTERS)}")
    return CLUSTERS[name]
