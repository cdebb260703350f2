"""NCCL-like transfers: protocol by message size, duplex links, SMs taken from compute, and the
timer using them for a real implementation."""

import dataclasses

import numpy as np
import pytest

from ringsim.timer import RingConfig, simulate
from ringsim.timer.cost import kv_block_bytes
from ringsim.timer.machine.collectives import (
    achieved_bandwidth,
    exchange_seconds,
    overlap_efficiency,
    p2p_seconds,
    sm_share,
)
from ringsim.timer.machine.hardware import PRESETS
from ringsim.timer.machine.links import ACHIEVED, IDEAL, INFINIBAND, NVLINK, LinkModel

H100 = PRESETS["h100-nvlink"]


def test_large_messages_reach_the_simple_protocol_fraction():
    bw, lat = 450e9, 5e-6
    t = float(p2p_seconds(1e9, bw, lat))
    assert t == pytest.approx(lat + 1e9 / (0.8 * bw))
    assert achieved_bandwidth(1e9, bw, lat) == pytest.approx(0.8 * bw, rel=0.01)


def test_small_messages_go_by_ll_at_half_the_link_and_pay_latency():
    bw, lat = 450e9, 5e-6
    assert float(p2p_seconds(8192, bw, lat)) == pytest.approx(lat + 8192 / (0.5 * bw))
    assert achieved_bandwidth(8192, bw, lat) < 0.01 * bw  # latency bound
    split = float(p2p_seconds(1e6, bw, lat, messages=100))  # 10 KB each: LL
    assert split == pytest.approx(100 * lat + 1e6 / (0.5 * bw))


def test_ideal_link_is_the_ideal_formula_and_per_hop_arrays_work():
    assert float(p2p_seconds(1e6, 1e9, 1e-6, link=IDEAL)) == 1e-6 + 1e6 / 1e9
    hops = p2p_seconds(1e8, np.array([450e9, 50e9]), np.array([5e-6, 1e-5]))
    assert hops.shape == (2,) and hops[1] > hops[0]
    assert float(p2p_seconds(0.0, 1e9, 1e-6, messages=0)) == 0.0


def test_duplex_links_send_and_receive_at_once():
    assert float(exchange_seconds(2.0, 3.0)) == 3.0
    assert float(exchange_seconds(2.0, 3.0, duplex=False)) == 5.0


def test_sm_share_gives_the_overlap_efficiency():
    assert sm_share(132) == pytest.approx(4 / 132)
    assert overlap_efficiency(108) == pytest.approx(1 - 4 / 108)
    assert overlap_efficiency(132, IDEAL) == 1.0
    assert PRESETS["a100-ib"].link is INFINIBAND and H100.link is NVLINK


@pytest.mark.parametrize(
    "kw, word",
    [
        (dict(efficiency=0.0), "efficiency"),
        (dict(efficiency=1.2), "efficiency"),
        (dict(ll_threshold=-1.0), "ll_threshold"),
        (dict(channels=-1), "channels"),
        (dict(channels=1.5), "channels"),
    ],
)
def test_bad_link_parameters_name_themselves(kw, word):
    with pytest.raises(ValueError, match=word):
        LinkModel("x", **{"efficiency": 0.8, **kw})


def test_bad_message_arguments():
    with pytest.raises(ValueError, match="nbytes"):
        p2p_seconds(-1.0, 1e9, 0.0)
    with pytest.raises(ValueError, match="sms"):
        sm_share(0)


BLOCK_BYTES = kv_block_bytes(4096, 8, 128, "bf16")  # one k, v block of the ring below


def first_sends(**fields) -> np.ndarray:
    """``(hosts,)`` seconds each host takes to send its first block: 4 hosts of 4096 tokens,
    32/8 heads under fa2 with ``overlap_efficiency=1`` (no message stretched by contention)."""
    cfg = RingConfig(
        **{
            "hosts": 4,
            "seq_len": 4 * 4096,
            "hardware": H100,
            "heads": 32,
            "kv_heads": 8,
            "implementation": "fa2",
            "overlap_efficiency": 1.0,
            **fields,
        }
    )
    timeline = simulate(cfg).timeline
    return timeline.send_end[0] - timeline.send_start[0]


@pytest.mark.parametrize("end", ["low", "point", "high"])
def test_the_timer_sends_at_the_achieved_p2p_bandwidth_under_a_real_implementation(end):
    sent = first_sends(assume={"p2p_bandwidth": end})
    achieved = H100.p2p_bandwidth.at(end)
    expected = float(p2p_seconds(BLOCK_BYTES, achieved, H100.link_latency, link=ACHIEVED))
    assert sent[0] == pytest.approx(expected)
    ideal = first_sends(assume={"p2p_bandwidth": end}, implementation="ideal")
    assert sent[0] > ideal[0]


def test_achieved_p2p_is_well_below_the_line_rate_and_sourced():
    measured = {name: hw for name, hw in PRESETS.items() if hw.p2p_bandwidth is not None}
    assert set(measured) == {"a100-nvlink", "h100-nvlink", "h200-nvlink", "h800-nvlink"}
    for hw in measured.values():
        r = hw.p2p_bandwidth
        assert r.low < r.point < r.high <= hw.link.efficiency * hw.link_bandwidth
        assert r.slow == "low" and "nccl-tests" in r.source and hw.link is NVLINK
    assert PRESETS["a100-ib"].p2p_bandwidth is None  # off NVLink: efficiency x line rate


def test_a_renamed_device_keeps_its_link_and_its_achieved_range():
    """What a device is does not hang on its name (issue 32): renamed or with another memory
    size, the H100 sends as the H100; on another link its measured range no longer holds."""
    renamed = dataclasses.replace(H100, name="my h100 (modified)", memory_bytes=1e9)
    assert first_sends(hardware=renamed)[0] == first_sends()[0]
    hw = H100.with_link(H100.link_bandwidth)  # the same line, its p2p range dropped
    sent = first_sends(hardware=hw)
    assert sent[0] == pytest.approx(float(p2p_seconds(BLOCK_BYTES, hw.link_bandwidth, 5e-6)))


def test_overlap_efficiency_override_beats_the_nccl_default():
    base = dict(hosts=4, seq_len=4 * 256, hardware=H100, implementation="fa2")
    nccl = simulate(RingConfig(**base)).makespan
    perfect = simulate(RingConfig(**base, overlap_efficiency=1.0)).makespan
    none = simulate(RingConfig(**base, overlap_efficiency=0.0)).makespan
    assert perfect <= nccl <= none


def test_only_hops_on_the_machines_own_link_send_at_the_achieved_rate():
    """A ring given per-host hops (a cluster, a double ring's inner ring) sends at the achieved
    rate on the hops at the machine's line rate and like NCCL on the others (a NIC, a shared
    link)."""
    nic = 25e9
    sent = first_sends(
        hop_bandwidth=(H100.link_bandwidth, nic, H100.link_bandwidth, nic),
        hop_latency=(H100.link_latency,) * 4,
    )
    achieved = H100.p2p_bandwidth.at("point")
    own = float(p2p_seconds(BLOCK_BYTES, achieved, H100.link_latency, link=ACHIEVED))
    line = float(p2p_seconds(BLOCK_BYTES, nic, H100.link_latency, link=NVLINK))
    assert sent == pytest.approx([own, line, own, line])
