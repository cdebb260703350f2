"""Clusters: presets, where a ring's hops cross nodes, and collectives limited by their
bottleneck edges (ringsim.timer.machine.topology)."""

from dataclasses import replace

import numpy as np
import pytest

from ringsim.timer import RingConfig, simulate
from ringsim.timer.machine.hardware import get_hardware
from ringsim.timer.machine.topology import CLUSTERS, Cluster, get_cluster
from ringsim.timer.strategies import simulate_strategy

H100 = get_hardware("h100-nvlink")
DGX = get_cluster("dgx-h100")


# -- presets -----------------------------------------------------------------------------------
def test_presets_have_sources_and_a_slower_network_than_their_node():
    assert {"dgx-a100", "dgx-h100", "dgx-h200", "pcie-8x-l20"} <= set(CLUSTERS)
    for cluster in CLUSTERS.values():
        assert cluster.source and cluster.hardware.source
        assert cluster.inter_bandwidth <= cluster.intra_bandwidth
    assert get_cluster("dgx-a100").inter_bandwidth == 25e9  # 200 Gb/s HDR per GPU
    assert DGX.inter_bandwidth == 50e9 and DGX.intra_bandwidth == 450e9  # NDR, NVLink4
    with pytest.raises(ValueError, match="unknown cluster preset 'nope'"):
        get_cluster("nope")


def test_bad_clusters_and_hosts_name_the_value():
    with pytest.raises(ValueError, match="gpus_per_node"):
        replace(DGX, gpus_per_node=0)
    with pytest.raises(ValueError, match="inter_bandwidth"):
        replace(DGX, inter_bandwidth=-1.0)
    with pytest.raises(ValueError, match="switch_group must divide gpus_per_node=8"):
        replace(DGX, switch_group=3, switch_uplink=1e9)
    with pytest.raises(ValueError, match=r"hosts=24 does not fit cluster 'dgx-h100': 2 nodes x 8"):
        DGX.with_nodes(2).check_hosts(24)


# -- the ring's hops -----------------------------------------------------------------------------
def test_one_node_switch_gives_every_hop_the_hardware_link_exactly():
    bw, lat = Cluster.switch(H100, 8).ring_links([list(range(8))], 8)
    assert np.all(bw == H100.link_bandwidth) and np.all(lat == H100.link_latency)


def test_a_ring_over_two_nodes_crosses_them_twice_at_nic_speed():
    bw, _ = DGX.with_nodes(2).ring_links([list(range(16))], 16)
    crossing = {7, 15}  # 7 -> 8 and 15 -> 0
    assert all(bw[h] == (50e9 if h in crossing else 450e9) for h in range(16))


def test_rings_that_share_one_nic_share_its_bandwidth():
    box = get_cluster("pcie-8x-l20").with_nodes(2)  # one NIC per node
    rings = [[u, u + 8] for u in range(8)]  # eight rings, every hop crosses nodes
    bw, lat = box.ring_links(rings, 16)
    assert np.allclose(bw, 25e9 / 8) and np.all(lat == box.inter_latency)


def test_per_hop_links_equal_to_the_hardware_change_no_float():
    cfg = RingConfig(hosts=8, seq_len=8 * 2048, hardware=H100, causal=True, layout="zigzag")
    hops = cfg.replace(hop_bandwidth=(H100.link_bandwidth,) * 8, hop_latency=(5e-6,) * 8)
    for pass_ in ("forward", "backward"):
        a = simulate(cfg.replace(pass_=pass_)).summary()
        b = simulate(hops.replace(pass_=pass_)).summary()
        assert a == b


def test_the_slowest_hop_paces_the_ring():
    """A link-bound forward ring on two nodes runs as if every hop were the NIC."""
    cfg = RingConfig(hosts=16, seq_len=16 * 1024, hardware=H100, heads=32, kv_heads=32)
    on_cluster = simulate_strategy(cfg, "ring", cluster=DGX.with_nodes(2)).summary()
    all_nic = simulate(cfg.replace(hardware=replace(H100, link_bandwidth=50e9))).summary()
    fast = simulate(cfg).summary()
    assert on_cluster["total_time_s"] == pytest.approx(all_nic["total_time_s"], rel=0.02)
    assert on_cluster["total_time_s"] > 2 * fast["total_time_s"]


# -- collectives -----------------------------------------------------------------------------------
def test_all_to_all_on_a_switch_is_the_flat_model():
    bw, lat = Cluster.switch(H100, 8).alltoall_links([list(range(8))], 8)
    assert np.all(bw == H100.link_bandwidth)
    assert np.all(lat == 7 * H100.link_latency)


def test_all_to_all_across_nodes_is_bound_by_the_nic():
    """16 ranks on two nodes: 7 peers over NVLink, 8 over the rank's own 50 GB/s NIC."""
    bw, lat = DGX.with_nodes(2).alltoall_links([list(range(16))], 16)
    assert bw == pytest.approx(np.full(16, 15 / (8 / 50e9)))
    assert lat == pytest.approx(np.full(16, 15 * 5e-6))


def test_all_to_all_on_pcie_is_bound_by_the_shared_switch_uplink():
    """Two GPUs per switch each send 6 of their 7 shares out of it: 12 shares on one x16."""
    box = get_cluster("pcie-8x-l20")
    bw, _ = box.alltoall_links([list(range(8))], 8)
    assert bw == pytest.approx(np.full(8, 7 / (12 / box.switch_uplink)))
    pairs, _ = box.alltoall_links([[0, 1], [2, 3], [4, 5], [6, 7]], 8)  # inside each switch
    assert np.all(pairs == box.intra_bandwidth)


def test_all_gather_across_nodes_uses_every_nic():
    bw, _ = DGX.with_nodes(2).allgather_links([list(range(16))], 16)
    assert np.all(bw == 8 * 50e9)  # 8 channels, one per NIC, under NVLink's 450
    one_nic = replace(DGX, nics_per_node=1).with_nodes(2)
    bw1, _ = one_nic.allgather_links([list(range(16))], 16)
    assert np.all(bw1 == 50e9)
