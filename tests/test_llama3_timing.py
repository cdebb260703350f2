"""Llama 3's all-gather per packed document, timed as a strategy (``llama3``), and the padding
the per-document ring needs (every document a multiple of ``2P``), costed.

Grouped by what they prove: the strategy's attention is each host's visible pairs (counted
from the mask rule, not from ``llama3_cu_seqlens``) after the same gather as ``allgather``,
backward with its reduce-scatter; under a real family one fixed cost per host and each
document's tiles; a window shrinks it; it is in the registry and the planner offers it
where documents are given; the padding's tokens and share of the makespan.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from ringsim import cli
from ringsim.layouts import segment_ids_of
from ringsim.masks import visible_mask
from ringsim.sharing import SHARINGS
from ringsim.timer import RingConfig
from ringsim.timer.cost import attention_flops
from ringsim.timer.machine.hardware import custom_hardware, get_hardware
from ringsim.timer.machine.topology import get_cluster
from ringsim.timer.step.models import get_model
from ringsim.timer.strategies import STRATEGIES, simulate_strategy
from ringsim.timer.strategies.llama3 import document_calls
from ringsim.timer.studies.planner import cp_variants, plan

F = 100e12
HW = custom_hardware(F, 50e9, latency=0.0)
LENGTHS = [5000, 1500, 900, 700]  # 8100 tokens: 4 hosts of 2025


def config(**kw) -> RingConfig:
    base = dict(
        hosts=4,
        seq_len=sum(LENGTHS),
        hardware=HW,
        heads=8,
        kv_heads=2,
        head_dim=64,
        causal=True,
        segment_ids=segment_ids_of(LENGTHS),
    )
    return RingConfig(**(base | kw))


def visible_pairs(cfg: RingConfig) -> np.ndarray:
    """Each host's pairs, from the mask rule on its contiguous slice against every key."""
    run = cfg.run
    P, N = run.hosts, run.seq_len
    seg, pos = run.segment_ids, np.arange(N)
    c = N // P
    kw = dict(causal=run.causal, sliding_window=run.sliding_window)
    return np.array(
        [
            int(
                visible_mask(
                    pos[r * c : (r + 1) * c], pos, q_seg=seg[r * c : (r + 1) * c], k_seg=seg, **kw
                ).sum()
            )
            for r in range(P)
        ]
    )


@pytest.mark.parametrize("pass_", ["forward", "backward"])
@pytest.mark.parametrize("window", [None, 300])
def test_each_host_attends_its_visible_pairs_after_the_gather(pass_, window) -> None:
    cfg = config(pass_=pass_, sliding_window=window)
    result = simulate_strategy(cfg, "llama3", engine="heap")
    tl = result.timeline
    gather = simulate_strategy(cfg.replace(segment_ids=None), "allgather").timeline
    # the same all-gather as the all-gather strategy's (P - 1 blocks on the group's links)
    np.testing.assert_allclose(tl.send_end[0], gather.send_end[0], rtol=1e-12)
    pair = attention_flops(1, 1, 8, 64, pass_=pass_) / F
    np.testing.assert_allclose(
        tl.compute_end[1] - tl.compute_start[1], visible_pairs(cfg) * pair, rtol=1e-9
    )
    assert result.flops_total == pytest.approx(visible_pairs(cfg).sum() * pair * F, rel=1e-9)
    if pass_ == "backward":  # dk, dv of all N tokens reduce-scattered after the slowest host
        assert np.all(tl.send_start[2] >= np.nanmax(tl.compute_end[1]))
    assert result.makespan == simulate_strategy(cfg, "llama3").makespan


def test_a_real_family_pays_one_fixed_cost_per_host() -> None:
    """One varlen call per host: its documents' tiles, each as its own call would cost, and
    the family's fixed cost once."""
    cfg = config(hardware=get_hardware("h100-nvlink"), implementation="fa2")
    calls = document_calls(cfg)
    assert [len(c) for c in calls] == [1, 1, 2, 3]  # slices of 2025 tokens: host 3 holds 3
    from ringsim.timer.engine.ring_steps import StepModel

    steps = StepModel(cfg, cfg.family)
    fixed = cfg.family.call_overhead_s
    tl = simulate_strategy(cfg, "llama3").timeline
    for host, host_calls in enumerate(calls):
        expected = fixed + sum(steps.call_seconds("forward", c) - fixed for c in host_calls)
        assert tl.compute_end[1, host] - tl.compute_start[1, host] == pytest.approx(expected)


def test_llama3_is_a_registered_strategy_the_planner_offers_with_documents() -> None:
    assert "llama3" in STRATEGIES and STRATEGIES["llama3"].record is SHARINGS["llama3"]
    plain = {v["strategy"] for v in cp_variants(8, 8, 65536, True, 8, heads=32)}
    assert "llama3" not in plain
    docs = segment_ids_of([32768, 16384, 16384])
    packed = cp_variants(8, 8, 65536, True, 8, heads=32, segment_ids=docs)
    assert "llama3" in {v["strategy"] for v in packed}
    assert {v["ulysses"] for v in packed} == {1}  # the all-to-alls take no documents
    assert "per-document" in {v["layout"] for v in packed}
    with pytest.raises(ValueError, match="ulysses_degree must be 1 for llama3"):
        simulate_strategy(config(), "llama3", ulysses_degree=2)


def test_a_plan_with_documents_times_them() -> None:
    cluster = get_cluster("dgx-h100")
    result = plan(
        get_model("llama3-8b"), 131072, cluster, 16, global_batch=16, documents=[65536] * 2
    )
    strategies = {c.parallel.strategy for c in result.candidates}
    assert "llama3" in strategies and "ulysses" not in strategies
    with pytest.raises(ValueError, match="documents must sum to seq_len"):
        plan("llama3-8b", 131072, cluster, 16, documents=[1000, 2000])


def test_the_padding_costs_its_share_of_the_pairs(capsys) -> None:
    argv = [
        "simulate", "--hosts", "4", "--seq-len", "60000", "--causal", "--layout",
        "per-document", "--documents", "30003,19997,10000", "--pad-documents", "--json",
    ]  # fmt: off
    assert cli.main(argv) == 0
    s = json.loads(capsys.readouterr().out)
    padded = [30008, 20000, 10000]  # each to a multiple of 2 x 4
    assert (s["seq_len"], s["padding_tokens"], s["unpadded_seq_len"]) == (60008, 8, 60000)
    pairs = lambda lengths: sum(n * (n + 1) // 2 for n in lengths)
    share = 1 - pairs([30003, 19997, 10000]) / pairs(padded)
    assert s["padding_time_s"] == pytest.approx(s["total_time_s"] * share, rel=1e-9)
    assert cli.main(["simulate", "--hosts", "4", "--seq-len", "64K", "--pad-documents"]) == 2
    assert "--pad-documents" in capsys.readouterr().err
