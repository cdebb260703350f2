"""The torch.distributed ring (gloo, local processes) against ringsim's exact reference, and
its behaviour when ranks die, never join, or disagree.

Starting processes dominates the cost (each imports torch), so each launch runs several
problems in one process group.
"""

import os
import time

import numpy as np
import pytest
import torch
import torch.distributed as dist

import ringsim
from kernels.distributed.launch import RunConfig, assemble, launch, rank_cores, run_configs
from kernels.distributed.repeats import SETTLE_S, start_line
from kernels.distributed.ring import RingError, merge_out_lse, ring_attention, shard, unshard

pytestmark = pytest.mark.torch
TOL = dict(atol=2e-5, rtol=2e-5)


def _check_against_reference(results, config):
    """Output and gradients, per rank and per token: rank r must hold exactly the reference
    rows at its own positions (a dk/dv accumulator sent home to the wrong owner fails here)."""
    q, k, v, dout = (x.double().numpy() for x in config.inputs(torch.device("cpu")))
    seg = config.segments()
    out = ringsim.reference_attention(q, k, v, causal=config.causal, segment_ids=seg)
    grads = dict(
        zip(
            ("dq", "dk", "dv"),
            ringsim.reference_attention_grad(q, k, v, dout, causal=config.causal, segment_ids=seg),
            strict=True,
        )
    )
    hosts = len(results)
    pos = ringsim.host_positions(config.layout, hosts, config.seq_len)
    for rank, res in enumerate(results):
        np.testing.assert_allclose(res["out"], out[..., pos[rank], :], **TOL)
        for name, want in grads.items():
            np.testing.assert_allclose(res[name], want[..., pos[rank], :], **TOL, err_msg=name)
    np.testing.assert_allclose(assemble(results, "dk", config.layout), grads["dk"], **TOL)


def _configs_then_mismatch(rank, hosts, configs):
    """The configs, then a call where rank 1's block is longer and one where its documents
    differ: every rank must refuse both."""
    results = run_configs(rank, hosts, configs)
    c = 4 + 2 * rank
    x = torch.zeros(1, 2, c, 8)
    try:
        ring_attention(x, x, x, layout="contiguous", timeout_s=10)
        results.append("no error")
    except ValueError as err:
        results.append(str(err))
    x = torch.zeros(1, 2, 4, 8)  # same shapes, but rank 1 packs the documents differently
    try:
        ring_attention(x, x, x, segment_ids=np.arange(8) // (2 + 2 * rank), timeout_s=10)
        results.append("no error")
    except ValueError as err:
        results.append(str(err))
    return results


def test_two_ranks_every_layout_causal_or_not_gqa():
    configs = [
        RunConfig(24, heads=4, kv_heads=2, head_dim=8, layout=layout, causal=causal, seed=i)
        for i, (layout, causal) in enumerate(
            (layout, causal) for layout in ringsim.layout_names() for causal in (False, True)
        )
    ]
    per_rank = launch(_configs_then_mismatch, 2, args=(configs,), timeout_s=30)
    for i, config in enumerate(configs):
        _check_against_reference([r[i] for r in per_rank], config)
    for r in per_rank:
        assert "disagree" in r[-2] and "q_shape" in r[-2], r[-2]
        assert "disagree" in r[-1] and "segment_ids" in r[-1], r[-1]


# packed documents of 5, 11, 3 and 13 tokens: boundaries fall inside blocks of every layout
DOCUMENTS = tuple(int(i) for i in np.repeat(np.arange(4), [5, 11, 3, 13]))


def test_four_ranks_causal_layouts_and_timelines():
    configs = [
        RunConfig(32, heads=2, kv_heads=1, head_dim=8, layout="zigzag", causal=True, seed=7),
        RunConfig(16, heads=3, head_dim=4, layout="striped", causal=False, seed=8, batch=2),
        RunConfig(16, heads=2, head_dim=8, layout="contiguous", causal=True, seed=9),
        RunConfig(
            32, heads=2, head_dim=8, layout="zigzag", causal=True, seed=10, segment_ids=DOCUMENTS
        ),
        RunConfig(
            32,
            heads=2,
            kv_heads=1,
            head_dim=8,
            layout="contiguous",
            causal=False,
            seed=11,
            segment_ids=DOCUMENTS,
        ),
    ]
    per_rank = launch(run_configs, 4, args=(configs,), timeout_s=30)
    for i, config in enumerate(configs):
        _check_against_reference([r[i] for r in per_rank], config)
    # contiguous causal: rank 0 skips every block but its own, rank 3 computes all four
    timelines = [r[2]["forward_timeline"] for r in per_rank]
    computed = [int(np.isfinite(t["compute_start"]).sum()) for t in timelines]
    assert computed == [1, 2, 3, 4]
    for t in timelines:
        assert np.all(t["compute_end"][np.isfinite(t["compute_end"])] >= 0)
        assert np.isnan(t["send_start"][-1])  # the last forward step sends nothing
        assert np.all(t["recv_end"][:-1] >= t["recv_start"][:-1])
    backward = per_rank[0][2]["backward_timeline"]
    assert backward["compute_start"].shape == (5,)  # 4 steps + the homecoming hop
    assert np.isfinite(backward["recv_end"][4])


def _lonely(rank, hosts):
    return "unreachable"


def test_rank_that_never_joins_fails_fast():
    """The joined ranks give up at the rendezvous' own 4 s timeout (each says so), not at the
    launcher's far later limits (start-up allowance, then the deadline)."""
    with pytest.raises(RingError) as info:
        launch(_lonely, 3, ranks=[0, 1], timeout_s=4)
    message = str(info.value)
    for rank in (0, 1):
        assert f"rank {rank}: RingError: rank {rank}: rendezvous of 3 ranks failed within 4 s" in (
            message
        ), message
    assert "did not answer" not in message, message


def _dies_mid_ring(rank, hosts):
    """Rank 1 passes the header check, then dies before its first transfer."""
    x = torch.ones(1, 1, 4, 8)
    from kernels.distributed.ring import Ring, agreement_header, check_agreement

    ring = Ring("contiguous", False, 4 * hosts, timeout_s=5)
    check_agreement(ring, agreement_header(ring, x, x, x, 1.0))
    if rank == 1:
        os._exit(3)
    return ring_attention(x, x, x, ring=ring, check=False)


def test_rank_that_dies_mid_ring_fails_fast():
    """Rank 0's first transfer with the dead rank 1 fails at the ring's 5 s timeout (rank 0
    says which step), and the launcher stops at once, as both ranks are then done."""
    with pytest.raises(RingError) as info:
        launch(_dies_mid_ring, 2, timeout_s=5)
    message = str(info.value)
    assert "rank 0" in message and "step 0" in message, message
    assert "[1] did not answer" in message, message
    assert "last sign of life" not in message, message  # not given up by a launcher limit


def test_merge_out_lse_is_the_online_softmax():
    rng = np.random.default_rng(0)
    scores = rng.standard_normal((3, 10))
    values = rng.standard_normal((10, 4))
    parts = []
    for cols in (slice(0, 4), slice(4, 10)):
        s = scores[:, cols]
        lse = np.log(np.exp(s).sum(1))
        parts.append((torch.tensor(np.exp(s - lse[:, None]) @ values[cols]), torch.tensor(lse)))
    empty = (torch.zeros(3, 4, dtype=torch.float64), torch.full((3,), -np.inf, dtype=torch.float64))
    out, lse = merge_out_lse(*merge_out_lse(*empty, *parts[0]), *parts[1])
    probs = np.exp(scores) / np.exp(scores).sum(1, keepdims=True)
    np.testing.assert_allclose(out.numpy(), probs @ values, atol=1e-12)
    out, lse = merge_out_lse(*empty, *empty)
    assert torch.isneginf(lse).all() and (out == 0).all()


@pytest.mark.parametrize("layout", ringsim.layout_names())
def test_shard_unshard_roundtrip(layout):
    x = torch.arange(2 * 24 * 3, dtype=torch.float32).reshape(2, 24, 3)
    blocks = [shard(x, layout, 4, r) for r in range(4)]
    pos = ringsim.host_positions(layout, 4, 24)
    assert torch.equal(blocks[1], x[:, pos[1], :])
    assert torch.equal(unshard(blocks, layout), x)


def test_each_gloo_rank_gets_cores_of_its_own_when_there_are_enough(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    assert rank_cores(2, 1, "gloo") == [{0}, {1}]
    assert rank_cores(2, 2, "gloo") == [{0, 1}, {2, 3}]
    assert rank_cores(4, 1, "gloo") == [{0}, {1}, {2}, {3}]
    assert rank_cores(3, 2, "gloo") is None  # oversubscribed: the ranks share every core
    assert rank_cores(2, 1, "nccl") is None  # GPU ranks own their device


def _affinity(rank, hosts):
    t0 = time.perf_counter()
    start_line()
    return sorted(os.sched_getaffinity(0)), torch.get_num_threads(), time.perf_counter() - t0


def test_launched_ranks_run_on_the_cores_planned_for_them_and_line_up_settled():
    planned = rank_cores(2, 1, "gloo")
    everything = sorted(os.sched_getaffinity(0))
    got = launch(_affinity, 2, timeout_s=30)
    for rank, (cores, threads, lined_up) in enumerate(got):
        assert cores == (everything if planned is None else sorted(planned[rank]))
        assert threads == 1
        assert lined_up >= SETTLE_S  # the barrier, then the pause that lets gloo wind down


def test_ring_attention_needs_an_initialised_group():
    assert not dist.is_initialized()
    x = torch.zeros(1, 4, 8)
    with pytest.raises(ValueError, match=r"torch\.distributed"):
        ring_attention(x, x, x)
