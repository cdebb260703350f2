"""Ulysses past the key/value heads, timed: each kv head replicated ``U / H_kv`` times before
the all-to-all (verl's rule), so the all-to-alls carry ``U`` kv heads; backward the replicas'
``dk, dv`` come back and are summed; the memory counts the replicated send buffer; the planner
searches it where a framework runs it.

Grouped by what they prove: the all-to-all bytes in closed form (forward and backward) and
the replicas' copies and sums under a real family; the hybrid's ring groups run one kv head
each; the working set; the planner's search and the frameworks that refuse replication.
"""

from __future__ import annotations

import numpy as np
import pytest

from ringsim.grid import kv_replicas
from ringsim.timer import RingConfig
from ringsim.timer.cost import attention_flops
from ringsim.timer.machine.hardware import custom_hardware, get_hardware
from ringsim.timer.machine.topology import get_cluster
from ringsim.timer.step.frameworks import FRAMEWORKS
from ringsim.timer.step.models import get_model
from ringsim.timer.strategies import simulate_strategy
from ringsim.timer.strategies.frame import group_configs, ulysses_working_set_bytes
from ringsim.timer.studies.planner import cp_variants, enumerate_parallel

F, B, LAT = 100e12, 50e9, 3e-6


def config(**kw) -> RingConfig:
    hw = custom_hardware(F, B, latency=LAT)
    base = dict(hosts=16, seq_len=16 * 2048, hardware=hw, heads=32, kv_heads=8, head_dim=128)
    return RingConfig(**(base | kw))


@pytest.mark.parametrize("hosts", [16, 32])
def test_the_forward_all_to_all_carries_the_replicated_heads(hosts) -> None:
    """``U = P`` hosts, ``H_kv = 8``: q and ``U`` replicated k, v heads go in, the output
    comes back; in between each host attends ``H / U`` query heads over the sequence."""
    P, c, H, d = hosts, 2048, 32, 128
    cfg = config(hosts=P, seq_len=P * c)
    shard = (P - 1) / P * c * d * 2
    a2a_in = (P - 1) * LAT + shard * (H + 2 * P) / B
    a2a_out = (P - 1) * LAT + shard * H / B
    attend = attention_flops(P * c, P * c, H // P, d) / F
    result = simulate_strategy(cfg, "ulysses")
    assert kv_replicas(8, P) == P // 8
    assert result.makespan == pytest.approx(a2a_in + attend + a2a_out, rel=1e-12)


def test_the_backward_sends_replicated_grads_back() -> None:
    """Backward: q, k, v, dout in (``2H + 2U`` heads), dq, dk, dv out (``H + 2U``)."""
    P, c, H, d = 16, 2048, 32, 128
    cfg = config(pass_="backward")
    shard = (P - 1) / P * c * d * 2
    a2a_in = (P - 1) * LAT + shard * (2 * H + 2 * P) / B
    a2a_out = (P - 1) * LAT + shard * (H + 2 * P) / B
    attend = attention_flops(P * c, P * c, H // P, d, pass_="backward") / F
    result = simulate_strategy(cfg, "ulysses")
    assert result.makespan == pytest.approx(a2a_in + attend + a2a_out, rel=1e-12)


def test_a_real_family_pays_the_copies_and_the_replicas_sum() -> None:
    """Under fa2 a replicated all-to-all also copies k, v into ``U`` heads (forward, before
    it) and sums the replicas' ``dk, dv`` (backward, after it): against a layer with ``U``
    kv heads of its own (the very same bytes on the wire, no replicas) each costs exactly
    those bytes over HBM (``elementwise_seconds``: read ``H_kv``, write ``U`` heads)."""
    from ringsim.timer.engine.attention import elementwise_seconds

    hw = get_hardware("h100-nvlink")
    P, c, d = 16, 8192, 128
    base = dict(hosts=P, seq_len=P * c, hardware=hw, heads=32, implementation="fa2")
    token = c * d * 2  # one head of the host's tokens
    for pass_, row in (("forward", 0), ("backward", -1)):
        seconds = {}
        for kv in (8, 16):  # 8: replicated twice to 16; 16: its own
            tl = simulate_strategy(RingConfig(pass_=pass_, kv_heads=kv, **base), "ulysses")
            tl = tl.timeline
            seconds[kv] = float(np.max(tl.send_end[row] - tl.send_start[row]))
        cfg = RingConfig(pass_=pass_, kv_heads=8, **base)
        replicas = elementwise_seconds(cfg, 2 * token * (16 + 8), 2)
        assert replicas > 0
        assert seconds[8] == pytest.approx(seconds[16] + replicas, rel=1e-9)


def test_hybrid_ring_groups_run_one_replicated_kv_head() -> None:
    cfg = config(hosts=32, seq_len=32 * 2048)
    from ringsim.grid import Grid

    groups = group_configs(cfg, Grid(16, 2))
    assert {(g.shape.heads, g.shape.kv_heads, g.run.hosts) for g in groups} == {(2, 1, 2)}
    plain = simulate_strategy(cfg, "hybrid", ulysses_degree=16)
    assert plain.makespan > 0
    heap = simulate_strategy(cfg, "hybrid", ulysses_degree=16, engine="heap")
    assert heap.makespan == plain.makespan


def test_the_working_set_counts_the_replicated_send_buffer() -> None:
    """The send buffer holds ``c (H + 2U) d e`` (forward) once ``U`` exceeds ``H_kv``; the
    received head shard one replica: ``N (H/U + 2) d e``."""
    cfg = config()
    shape, P, N, d, e = cfg.shape, 16, 16 * 2048, 128, 2
    c = N // P
    own = c * (32 + 2 * P) * d * e
    gathered = N * (32 // P + 2) * d * e
    out = N * (32 // P) * d * e + 4 * N * (32 // P)
    assert ulysses_working_set_bytes(shape, N, P) == pytest.approx(own + gathered + out)
    summary = simulate_strategy(cfg, "ulysses").summary()
    assert summary["memory_per_host_bytes"] == pytest.approx(own + gathered + out)


def test_the_planner_searches_replication_where_the_framework_runs_it() -> None:
    """cp_variants offers Ulysses degrees past the kv heads given the query heads; the open
    profile and verl keep them, Megatron (TE's a2a), USP and DeepSpeed do not run them."""
    variants = cp_variants(16, 8, 16 * 4096, True, 8, heads=32)
    assert {v["ulysses"] for v in variants if v["strategy"] == "ulysses"} == {16}
    assert not [v for v in cp_variants(16, 8, 16 * 4096, True, 8) if v["ulysses"] > 8]
    model = get_model("llama3-8b")

    def degrees(framework: str) -> set[int]:
        found = enumerate_parallel(
            model, 16, 65536, global_batch=16, framework=FRAMEWORKS[framework], tp=1
        )
        return {p.ulysses for p in found}

    assert 16 in degrees("pytorch") and 16 in degrees("verl")
    for name in ("megatron-0.12", "usp-0.6", "deepspeed-ulysses"):
        assert max(degrees(name)) <= 8, name


def test_verl_plans_replication_where_nothing_else_fits() -> None:
    """llama3-8b at 512K tokens on 16 H100s under verl (Ulysses only): degree 8 (whole kv
    heads) does not fit in memory, degree 16 (two replicas of each kv head) does."""
    from ringsim.timer.studies.planner import plan

    cluster = get_cluster("dgx-h100")
    result = plan("llama3-8b", 512 * 1024, cluster, 16, framework="verl", global_batch=8)
    best = result.candidates[0].parallel
    assert (best.strategy, best.ulysses, best.cp) == ("ulysses", 16, 16)
    assert {c.parallel.ulysses for c in result.dropped} >= {8}
