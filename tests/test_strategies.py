"""The ring beside Ulysses and all-gather context parallelism (ringsim.timer.strategies)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ringsim.grid import head_groups
from ringsim.timer import RingConfig, simulate
from ringsim.timer.cost import attention_flops, overlap_threshold
from ringsim.timer.machine.hardware import custom_hardware, get_hardware
from ringsim.timer.strategies import (
    FLAT_STRATEGIES,
    compare_strategies,
    simulate_strategy,
    with_bandwidth,
)
from ringsim.timer.strategies.allgather import allgather_overlap_block
from ringsim.timer.strategies.ulysses import crossover_bandwidth

F = 312e12
NO_LATENCY = custom_hardware(F, 300e9, latency=0.0)


def config(**kw) -> RingConfig:
    base = dict(hosts=8, seq_len=8 * 4096, hardware=NO_LATENCY, heads=32, head_dim=128)
    return RingConfig(**(base | kw))


def makespan(cfg: RingConfig, strategy: str) -> float:
    return simulate_strategy(cfg, strategy).summary()["total_time_s"]


# -- the head cap -----------------------------------------------------------------------------
def test_ulysses_past_the_kv_heads_replicates_them_and_refuses_what_does_not_deal():
    """Past the key/value heads Ulysses replicates them (verl's rule): 16 hosts of 8 kv heads
    run; 12 (not a multiple of 8) and 64 (more than the 32 query heads) are refused."""
    simulate_strategy(config(hosts=16, seq_len=16 * 4096, kv_heads=8), "ulysses")
    assert "ulysses" in compare_strategies(config(hosts=16, seq_len=16 * 4096, kv_heads=8))
    with pytest.raises(ValueError, match=r"ulysses_degree=12 exceeds kv_heads=8"):
        simulate_strategy(config(hosts=12, seq_len=12 * 4096, kv_heads=8), "ulysses")
    with pytest.raises(ValueError, match=r"ulysses_degree=64 exceeds kv_heads=32"):
        simulate_strategy(config(hosts=64, seq_len=64 * 512), "ulysses")
    assert "ulysses" not in compare_strategies(config(hosts=64, seq_len=64 * 512))
    simulate_strategy(config(hosts=8, kv_heads=8), "ulysses")  # at the kv heads: fine


def test_ulysses_hosts_attend_whole_gqa_groups_as_the_exact_executor_deals_them():
    """5 hosts, 32 query heads in 8 GQA groups of 4: the executor (``ringsim.grid.head_groups``)
    gives hosts 2, 2, 2, 1, 1 groups, so the busiest attends 8 query heads (the timer split the
    query heads evenly before, 7 on the busiest, a split no executor runs)."""
    cfg = config(hosts=5, seq_len=5 * 4096, kv_heads=8)
    groups = head_groups(32, 8, 5)
    assert [(q.stop - q.start, kv.stop - kv.start) for q, kv in groups] == [
        (8, 2),
        (8, 2),
        (8, 2),
        (4, 1),
        (4, 1),
    ]
    N = cfg.run.seq_len
    busiest = attention_flops(N, N, 8, 128) / F
    assert simulate_strategy(cfg, "ulysses").summary()["compute_time_s"] == pytest.approx(busiest)


def test_uneven_heads_load_the_busiest_host():
    groups = head_groups(12, 12, 8)
    assert [q.stop - q.start for q, _ in groups] == [2, 2, 2, 2, 1, 1, 1, 1]
    even = makespan(config(hosts=8, heads=8, seq_len=8 * 1024), "ulysses")
    uneven = makespan(config(hosts=8, heads=12, kv_heads=12, seq_len=8 * 1024), "ulysses")
    assert uneven == pytest.approx(2 * even, rel=0.05)  # 2 heads on the busiest, as 16 heads


# -- agreement where compute dominates -------------------------------------------------------
@given(
    hosts=st.sampled_from([1, 2, 4, 8]),
    causal=st.booleans(),
    pass_=st.sampled_from(["forward", "backward"]),
    kv_heads=st.sampled_from([8, 32]),
)
def test_compute_bound_strategies_take_the_same_time(hosts, causal, pass_, kv_heads):
    fast = custom_hardware(F, 1e18, latency=0.0)  # transfers take no time
    cfg = config(
        hosts=hosts,
        seq_len=hosts * 2048,
        hardware=fast,
        causal=causal,
        layout="zigzag",
        pass_=pass_,
        kv_heads=kv_heads,
    )
    results = {s: simulate_strategy(cfg, s).summary() for s in FLAT_STRATEGIES}
    flops = {r["flops_total"] for r in results.values()}
    assert max(flops) == pytest.approx(min(flops), rel=1e-12)  # the same exact work
    ideal = results["ring"]["flops_total"] / (hosts * F)
    for summary in results.values():
        assert summary["total_time_s"] == pytest.approx(ideal, rel=1e-3)


def test_summary_has_the_ring_keys_and_the_strategy():
    cfg = config(causal=True, layout="zigzag")
    ring_keys = set(simulate(cfg).summary())
    for strategy in FLAT_STRATEGIES:
        summary = simulate_strategy(cfg, strategy).summary()
        assert ring_keys <= set(summary)
        assert summary["strategy"] == strategy
        assert summary["total_time_s"] == pytest.approx(
            summary["compute_time_s"] + summary["exposed_comm_s"]
        )
        assert 0.0 <= summary["idle_fraction"] < 1.0


def test_ring_strategy_is_the_timer():
    cfg = config(causal=True, layout="striped", pass_="backward")
    ours = simulate_strategy(cfg, "ring").summary()
    theirs = simulate(cfg).summary()
    assert {k: v for k, v in ours.items() if k != "strategy"} == theirs


# -- closed forms of the peers ---------------------------------------------------------------
def test_ulysses_forward_is_all_to_all_compute_all_to_all():
    hw = custom_hardware(F, 50e9, latency=3e-6)
    P, c, H, kv, d = 8, 4096, 32, 8, 128
    cfg = config(hardware=hw, hosts=P, seq_len=P * c, kv_heads=kv)
    shard = (P - 1) / P * c * d * 2
    a2a_in = (P - 1) * 3e-6 + shard * (H + 2 * kv) / 50e9
    a2a_out = (P - 1) * 3e-6 + shard * H / 50e9
    attend = attention_flops(P * c, P * c, H // P, d) / F
    result = simulate_strategy(cfg, "ulysses")
    assert result.makespan == pytest.approx(a2a_in + attend + a2a_out, rel=1e-12)
    assert result.summary()["exposed_comm_s"] == pytest.approx(a2a_in + a2a_out, rel=1e-9)
    tl = result.timeline
    assert np.isnan(tl.compute_start[[0, 2]]).all() and np.isnan(tl.send_start[1]).all()
    assert np.isfinite(tl.send_start[[0, 2]]).all() and np.isfinite(tl.compute_start[1]).all()


def test_allgather_overlaps_only_its_own_block():
    hw = custom_hardware(F, 25e9, latency=0.0)
    cfg = config(hardware=hw)
    P, c = cfg.hosts, cfg.block_tokens
    block = attention_flops(c, c, 32, 128) / F
    gather = (P - 1) * 2 * c * 32 * 128 * 2 / 25e9
    assert gather > block  # the gather is longer than the one block it can hide behind
    assert makespan(cfg, "allgather") == pytest.approx(gather + (P - 1) * block, rel=1e-12)
    serial = makespan(cfg.replace(overlap=False), "allgather")
    assert serial == pytest.approx(gather + P * block, rel=1e-12)


def test_allgather_overlap_block_hides_the_gather():
    cfg = config(hardware=custom_hardware(F, 300e9, latency=2e-6))
    c_star = allgather_overlap_block(cfg)
    ring_star = overlap_threshold(cfg.hardware, heads=32, kv_heads=32, head_dim=128, dtype="bf16")
    assert 6.5 * ring_star < c_star < 7.5 * ring_star  # ~ (P - 1) ring thresholds
    for c, hidden in ((int(c_star * 1.05), True), (int(c_star * 0.95), False)):
        run = simulate_strategy(config(hardware=cfg.hardware, seq_len=8 * c), "allgather")
        assert (run.summary()["exposed_comm_s"] < 1e-12) == hidden


def test_allgather_backward_reduce_scatters_the_gradients():
    cfg = config(pass_="backward", hardware=custom_hardware(F, 10e9))
    result = simulate_strategy(cfg, "allgather")
    assert result.timeline.steps == 3 and "reduce-scatter" in result.timeline.step_labels[2]
    c = cfg.block_tokens
    scatter = (cfg.hosts - 1) * 2 * c * 32 * 128 * 2 / 10e9
    assert result.summary()["exposed_comm_s"] >= scatter


def test_a_straggler_slows_ulysses_by_its_factor():
    cfg = config(seq_len=8 * 2048)
    slow = cfg.replace(speed=(0.5,) + (1.0,) * 7)
    base, straggler = simulate_strategy(cfg, "ulysses"), simulate_strategy(slow, "ulysses")
    attend = np.nanmax(base.timeline.compute_end - base.timeline.compute_start)
    assert straggler.makespan == pytest.approx(base.makespan + attend, rel=1e-9)


def test_jitter_is_seeded_and_only_slows():
    cfg = config(jitter=0.2, seed=3)
    for strategy in ("ulysses", "allgather"):
        one, two = makespan(cfg, strategy), makespan(cfg, strategy)
        assert one == two
        assert one >= makespan(cfg.replace(jitter=0.0), strategy)


# -- memory per host -------------------------------------------------------------------------
def test_allgather_memory_grows_with_n_not_n_over_p():
    n = 2**17
    memory = {
        s: [
            simulate_strategy(config(hosts=p, seq_len=n), s).summary()["memory_per_host_bytes"]
            for p in (4, 8, 16)
        ]
        for s in FLAT_STRATEGIES
    }
    for s in ("ring", "ulysses"):  # ~ N / P
        assert memory[s][1] == pytest.approx(memory[s][0] / 2, rel=1e-6)
        assert memory[s][2] == pytest.approx(memory[s][1] / 2, rel=1e-6)
    assert memory["allgather"][2] > 0.8 * memory["allgather"][0]  # ~ N: barely moves
    fixed_block = [
        simulate_strategy(config(hosts=p, seq_len=p * 4096), "allgather").summary() for p in (4, 16)
    ]
    grow = fixed_block[1]["memory_per_host_bytes"] / fixed_block[0]["memory_per_host_bytes"]
    assert 3.0 < grow < 4.0  # four times the tokens: all of k, v grows 4x, q and out do not


# -- the crossover --------------------------------------------------------------------------
def test_crossover_sits_below_the_rings_overlap_bandwidth():
    cfg = config(hosts=8)
    c, P = cfg.block_tokens, cfg.hosts
    c_star = overlap_threshold(
        cfg.hardware, heads=32, kv_heads=32, head_dim=128, dtype="bf16", include_latency=False
    )
    overlap_bandwidth = cfg.hardware.link_bandwidth * c_star / c  # c* scales as 1/B
    assert crossover_bandwidth(cfg) == pytest.approx((P - 2) / P * overlap_bandwidth, rel=1e-9)


@pytest.mark.parametrize("hosts, kv_heads", [(8, 32), (4, 32), (8, 8), (16, 16)])
def test_ring_and_ulysses_cross_where_derived(hosts, kv_heads):
    cfg = config(hosts=hosts, kv_heads=kv_heads, seq_len=hosts * 4096)
    b_star = crossover_bandwidth(cfg)
    faster = lambda b: (
        makespan(with_bandwidth(cfg, b), "ring") - makespan(with_bandwidth(cfg, b), "ulysses")
    )
    assert faster(0.9 * b_star) > 0  # slow links: Ulysses wins
    assert faster(1.1 * b_star) < 0  # fast links: the ring hides its transfers and wins
    low, high = 0.5 * b_star, 2 * b_star
    for _ in range(40):
        mid = (low * high) ** 0.5
        low, high = (mid, high) if faster(mid) > 0 else (low, mid)
    assert low == pytest.approx(b_star, rel=1e-6)


@pytest.mark.parametrize("bandwidth", [1e8, 1e9, 1e10, 1e11, 1e12])
def test_with_few_hosts_and_gqa_the_ring_always_wins(bandwidth):
    cfg = config(hosts=4, kv_heads=8, seq_len=4 * 4096)  # P <= 1 + H / H_kv = 5
    assert crossover_bandwidth(cfg) is None
    assert makespan(with_bandwidth(cfg, bandwidth), "ring") < makespan(
        with_bandwidth(cfg, bandwidth), "ulysses"
    )


# -- bad input -------------------------------------------------------------------------------
def test_bad_strategy_and_pass_name_the_value():
    with pytest.raises(ValueError, match="mesh"):
        simulate_strategy(config(), "mesh")
    with pytest.raises(ValueError, match="train-step"):
        simulate_strategy(config(pass_="train-step"), "ulysses")
    with pytest.raises(ValueError, match="config"):
        simulate_strategy({"hosts": 8}, "allgather")


def test_presets_run_every_strategy():
    cfg = config(hardware=get_hardware("h200-ib"), causal=True, layout="zigzag")
    assert set(compare_strategies(cfg)) == set(FLAT_STRATEGIES)
