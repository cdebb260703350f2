"""Hybrid sequence parallelism timed on a cluster: Ulysses x ring (USP), the double ring
(LoongTrain), all-gather (ringsim.timer.strategies)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import examples

from ringsim.grid import Grid, check_ulysses_degree
from ringsim.timer import RingConfig, simulate
from ringsim.timer.machine.hardware import custom_hardware, get_hardware
from ringsim.timer.machine.topology import get_cluster
from ringsim.timer.strategies import STRATEGIES, simulate_strategy

H100 = get_hardware("h100-nvlink")
DGX = get_cluster("dgx-h100")
LAYOUTS = [("contiguous", False), ("contiguous", True), ("zigzag", True), ("striped", True)]


def config(**kw) -> RingConfig:
    base = dict(hosts=8, seq_len=8 * 2048, hardware=H100, heads=32, kv_heads=8)
    return RingConfig(**(base | kw))


def summary(cfg, strategy, **kw) -> dict:
    return simulate_strategy(cfg, strategy, **kw).summary()


# -- the special cases are the flat strategies, bit for bit ---------------------------------------
@settings(max_examples=examples(20), deadline=None)
@given(
    hosts=st.sampled_from([2, 4, 8]),
    layout=st.sampled_from(LAYOUTS),
    pass_=st.sampled_from(["forward", "backward"]),
    overlap=st.booleans(),
    latency=st.sampled_from([0.0, 5e-6]),
)
def test_one_node_switch_special_cases_are_bit_identical(hosts, layout, pass_, overlap, latency):
    hw = custom_hardware(989e12, 60e9, latency=latency)
    cfg = config(
        hosts=hosts, layout=layout[0], causal=layout[1], pass_=pass_, overlap=overlap, hardware=hw
    )
    ring = simulate(cfg).summary()
    timed = ("total_time_s", "compute_time_s", "exposed_comm_s", "comm_time_s", "idle_fraction")
    for strategy, kw in (("hybrid", {"ulysses_degree": 1}), ("double-ring", {"window": hosts})):
        ours = summary(cfg, strategy, **kw)
        assert {k: ours[k] for k in (*timed, "flops_total")} == {
            k: ring[k] for k in (*timed, "flops_total")
        }
    ulysses = summary(cfg, "ulysses")
    hybrid = summary(cfg, "hybrid", ulysses_degree=hosts)
    assert {k: v for k, v in hybrid.items() if k != "strategy"} == {
        k: v for k, v in ulysses.items() if k != "strategy"
    }


def test_allgather_with_one_head_group_is_the_flat_all_gather_model():
    cfg = config(layout="zigzag", causal=True, pass_="backward")
    flat = summary(cfg, "allgather")
    on_switch = summary(cfg, "allgather", ulysses_degree=1, cluster=None)
    assert flat == on_switch


# -- the heap oracle agrees with the vectorised engine on every strategy --------------------------
@pytest.mark.parametrize("pass_", ["forward", "backward"])
@pytest.mark.parametrize("overlap", [True, False])
def test_heap_and_vectorized_agree_on_every_strategy(pass_, overlap):
    cluster = DGX.with_nodes(2)
    cfg = config(
        hosts=16,
        seq_len=16 * 1024,
        layout="zigzag",
        causal=True,
        pass_=pass_,
        overlap=overlap,
        jitter=0.1,
    )
    cases = [
        ("ring", None),
        ("ulysses", None),
        ("allgather", 1),
        ("allgather", 4),
        ("hybrid", 2),
        ("hybrid", 8),
        ("double-ring", 1),
        ("double-ring", 2),
    ]
    for strategy, u in cases:
        if strategy == "ulysses":
            cfg_u = cfg.replace(hosts=8, seq_len=8 * 1024)
            a = summary(cfg_u, strategy, cluster=DGX.with_nodes(1))
            b = summary(cfg_u, strategy, cluster=DGX.with_nodes(1), engine="heap")
        else:
            kw = dict(ulysses_degree=u, cluster=cluster)
            a, b = summary(cfg, strategy, **kw), summary(cfg, strategy, engine="heap", **kw)
        a.pop("engine"), b.pop("engine")
        assert a == b, strategy


# -- degrees and placement ------------------------------------------------------------------------
def test_grid_places_ulysses_groups_on_consecutive_ranks_or_across():
    inner = Grid(4, 2, "ulysses-inner")
    assert inner.ulysses_groups == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert inner.ring_groups == [[0, 4], [1, 5], [2, 6], [3, 7]]
    across = Grid(4, 2, "ring-inner")
    assert across.ulysses_groups == [[0, 2, 4, 6], [1, 3, 5, 7]]


def test_bad_degrees_name_the_argument():
    with pytest.raises(ValueError, match="must divide hosts=8, got ulysses_degree=3"):
        check_ulysses_degree(8, 8, 3)
    with pytest.raises(ValueError, match="ulysses_degree=16 exceeds kv_heads=8"):
        check_ulysses_degree(16, 8, 16)
    with pytest.raises(ValueError, match="ulysses_degree=4 must divide kv_heads=6"):
        check_ulysses_degree(8, 6, 4)
    with pytest.raises(ValueError, match=r"hosts=24 does not fit cluster"):
        summary(
            config(hosts=24, seq_len=24 * 1024),
            "hybrid",
            ulysses_degree=2,
            cluster=DGX.with_nodes(2),
        )
    with pytest.raises(ValueError, match="window must divide the ring degree 8, got window=3"):
        summary(config(), "double-ring", window=3)
    with pytest.raises(ValueError, match="ulysses_degree must be 1 for the ring"):
        summary(config(), "ring", ulysses_degree=2)


# -- what the topology changes --------------------------------------------------------------------
@pytest.mark.parametrize("u", [1, 2, 4, 8])
@pytest.mark.parametrize("strategy", ["hybrid", "double-ring", "allgather"])
def test_every_strategy_does_the_same_exact_work(strategy, u):
    cfg = config(hosts=16, seq_len=16 * 1024, layout="zigzag", causal=True)
    ring = summary(cfg, "ring")
    ours = summary(cfg, strategy, ulysses_degree=u, cluster=DGX.with_nodes(2))
    assert ours["flops_total"] == pytest.approx(ring["flops_total"], rel=1e-12)


def test_double_ring_hides_the_network_that_paces_the_flat_ring():
    """4 DGX H100 nodes, 8K tokens per GPU, GQA: each flat-ring step waits for a 50 GB/s hop;
    the double ring sends across nodes once per round, with the round's compute to hide it."""
    cfg = config(hosts=32, seq_len=32 * 8192, layout="zigzag", causal=True)
    cluster = DGX.with_nodes(4)
    flat = summary(cfg, "ring", cluster=cluster)
    double = summary(cfg, "double-ring", cluster=cluster)
    assert flat["exposed_comm_s"] > 0.1 * flat["total_time_s"]
    assert double["exposed_comm_s"] < 0.01 * double["total_time_s"]
    assert double["total_time_s"] < flat["total_time_s"]


def test_all_to_all_inside_the_node_beats_it_across_nodes():
    cfg = config(hosts=32, seq_len=32 * 8192, layout="zigzag", causal=True)
    cluster = DGX.with_nodes(4)
    inside = summary(cfg, "hybrid", ulysses_degree=8, cluster=cluster, placement="ulysses-inner")
    across = summary(cfg, "hybrid", ulysses_degree=8, cluster=cluster, placement="ring-inner")
    assert inside["total_time_s"] < across["total_time_s"]
    assert inside["placement"] == "ulysses-inner" and inside["ring_degree"] == 4


def test_memory_of_the_special_cases_is_the_flat_strategies():
    cfg = config(layout="zigzag", causal=True)
    assert (
        summary(cfg, "hybrid", ulysses_degree=1)["memory_per_host_bytes"]
        == summary(cfg, "ring")["memory_per_host_bytes"]
    )
    assert (
        summary(cfg, "hybrid", ulysses_degree=8)["memory_per_host_bytes"]
        == summary(cfg, "ulysses")["memory_per_host_bytes"]
    )
    two = summary(cfg, "hybrid", ulysses_degree=2)["memory_per_host_bytes"]
    assert summary(cfg, "ring")["memory_per_host_bytes"] < two


def test_every_strategy_name_runs():
    for strategy in STRATEGIES:
        assert summary(config(), strategy)["total_time_s"] > 0


@pytest.mark.parametrize("strategy", ["double-ring", "hybrid", "allgather", "ring"])
def test_every_strategy_runs_under_a_real_kernel_family(strategy) -> None:
    """The kernel model reads each step's relation (own, earlier or later block) from the
    schedule; the double ring's rounds must supply it too (a missing one was a traceback)."""
    cluster = get_cluster("dgx-h100").with_nodes(2)
    config = RingConfig(
        hosts=16,
        seq_len=16 * 1024,
        hardware=cluster.hardware,
        heads=32,
        kv_heads=8,
        causal=True,
        layout="zigzag",
        implementation="fa2",
    )
    kw = {} if strategy == "ring" else {"ulysses_degree": 2 if strategy != "double-ring" else 1}
    real = simulate_strategy(config, strategy, cluster=cluster, **kw).summary()["total_time_s"]
    ideal = simulate_strategy(
        config.replace(implementation="ideal"), strategy, cluster=cluster, **kw
    ).summary()["total_time_s"]
    assert real > ideal > 0  # a real kernel never beats the ideal one
