"""USP (Ulysses x ring) over gloo process groups against ringsim's float64 reference, per rank
and per token, forward and backward; its all-to-alls and their autograd.

Starting processes dominates the cost (each imports torch), so one launch of four ranks runs
every problem.
"""

import numpy as np
import pytest
import torch
import torch.distributed as dist

import ringsim
from kernels.distributed.hybrid import (
    HeadsToSeq,
    SeqToHeads,
    heads_to_seq,
    hybrid_groups,
    run_hybrid_configs,
    seq_to_heads,
)
from kernels.distributed.launch import RunConfig, launch
from ringsim.grid import Grid

pytestmark = pytest.mark.torch
TOL = dict(atol=2e-5, rtol=2e-5)

# packed documents of 5, 11, 3 and 13 tokens: boundaries fall inside every rank's piece
DOCUMENTS = tuple(int(i) for i in np.repeat(np.arange(4), [5, 11, 3, 13]))

RUNS = [  # (config, U, placement) on 4 ranks
    (
        RunConfig(32, heads=4, kv_heads=2, head_dim=8, layout="contiguous", seed=1),
        2,
        "ulysses-inner",
    ),
    (
        RunConfig(32, heads=4, kv_heads=2, head_dim=8, layout="zigzag", causal=True, seed=2),
        2,
        "ring-inner",
    ),
    (
        RunConfig(
            32,
            heads=2,
            head_dim=8,
            layout="striped",
            causal=True,
            seed=3,
            batch=2,
            segment_ids=DOCUMENTS,
        ),
        2,
        "ulysses-inner",
    ),
    (RunConfig(16, heads=8, kv_heads=4, head_dim=4, causal=True, seed=4), 4, "ulysses-inner"),
    (
        RunConfig(32, heads=2, kv_heads=1, head_dim=8, layout="zigzag", causal=True, seed=5),
        1,
        "ulysses-inner",
    ),
    (RunConfig(16, heads=3, kv_heads=3, head_dim=4, seed=6), 2, "ulysses-inner"),  # U !| kv heads
    (RunConfig(16, heads=2, kv_heads=2, head_dim=4, seed=7), 3, "ulysses-inner"),  # U !| P
    # KV replication (verl's rule): U past the kv heads, a multiple of them dividing Hq
    (RunConfig(16, heads=4, kv_heads=2, head_dim=8, causal=True, seed=8), 4, "ulysses-inner"),
    (
        RunConfig(32, heads=4, kv_heads=1, head_dim=8, layout="zigzag", causal=True, seed=9),
        2,
        "ring-inner",
    ),
    (RunConfig(16, heads=2, kv_heads=1, head_dim=4, seed=10), 4, "ulysses-inner"),  # U !| Hq
]
REPLICATED = (7, 8)  # the runs above that replicate kv heads


def _all_to_all_checks(rank: int, hosts: int) -> dict:
    """The all-to-alls on a 2 x 2 grid: what each rank receives, the round trip, and that
    autograd's backward of each is the other."""
    groups = hybrid_groups(2, "ulysses-inner")
    heads = [slice(0, 1), slice(1, 3)]  # uneven head groups
    c = 2
    x = torch.arange(3 * c, dtype=torch.float64).reshape(3, c, 1) + 100 * rank
    moved = seq_to_heads(x, groups.ulysses_group, heads)
    back = heads_to_seq(moved, groups.ulysses_group, heads)
    xr = x.clone().requires_grad_()
    weight = torch.randn(
        moved.shape, generator=torch.Generator().manual_seed(rank), dtype=torch.float64
    )
    (SeqToHeads.apply(xr, groups.ulysses_group, heads) * weight).sum().backward()
    yr = moved.clone().requires_grad_()
    (HeadsToSeq.apply(yr, groups.ulysses_group, heads) * x).sum().backward()
    return dict(
        u=groups.u,
        j=groups.j,
        moved=moved.numpy(),
        roundtrip=bool(torch.equal(back, x)),
        x_grad=bool(torch.equal(xr.grad, heads_to_seq(weight, groups.ulysses_group, heads))),
        y_grad=bool(torch.equal(yr.grad, moved)),
        ring_size=dist.get_world_size(groups.ring_group),
    )


def _everything(rank: int, hosts: int, runs) -> tuple:
    return _all_to_all_checks(rank, hosts), run_hybrid_configs(rank, hosts, runs)


def _check_against_reference(results, config, ulysses: int, placement: str) -> None:
    """Rank r must hold exactly the reference rows at its own positions, for the output and
    every gradient (a dk/dv sent to the wrong owner, or a head group to the wrong rank,
    fails here)."""
    q, k, v, dout = (x.double().numpy() for x in config.inputs(torch.device("cpu")))
    seg = config.segments()
    out = ringsim.reference_attention(q, k, v, causal=config.causal, segment_ids=seg)
    grads = ringsim.reference_attention_grad(q, k, v, dout, causal=config.causal, segment_ids=seg)
    pos = Grid(ulysses, len(results) // ulysses, placement).positions(config.layout, config.seq_len)
    for rank, res in enumerate(results):
        np.testing.assert_array_equal(res["positions"], pos[rank])
        np.testing.assert_allclose(res["out"], out[..., pos[rank], :], **TOL)
        for name, want in zip(("dq", "dk", "dv"), grads, strict=True):
            np.testing.assert_allclose(res[name], want[..., pos[rank], :], **TOL, err_msg=name)


def test_four_ranks_against_float64_and_the_all_to_alls():
    per_rank = launch(_everything, 4, args=(RUNS,), timeout_s=30)
    results = [r[1] for r in per_rank]
    for i, (config, ulysses, placement) in enumerate(RUNS[:5]):
        _check_against_reference([r[i] for r in results], config, ulysses, placement)
    for r in results:
        assert "ulysses_degree=2 must divide kv_heads=3" in r[5], r[5]
        assert "ulysses_degree must divide the world size 4" in r[6], r[6]
        assert "ulysses_degree=4 exceeds kv_heads=1 (heads=2)" in r[9], r[9]
    for i in REPLICATED:  # the replicas' dk, dv summed back: exact per token and head
        config, ulysses, placement = RUNS[i]
        _check_against_reference([r[i] for r in results], config, ulysses, placement)
    checks = [r[0] for r in per_rank]
    for rank, got in enumerate(checks):
        assert (got["u"], got["j"]) == (rank % 2, rank // 2)
        assert got["roundtrip"] and got["x_grad"] and got["y_grad"] and got["ring_size"] == 2
        # member u of Ulysses group j holds head group u of both members' tokens, in order
        heads = [slice(0, 1), slice(1, 3)][got["u"]]
        want = np.concatenate(
            [100 * (2 * got["j"] + m) + np.arange(6.0).reshape(3, 2, 1)[heads] for m in range(2)],
            axis=-2,
        )
        np.testing.assert_array_equal(got["moved"], want)


def test_predicted_hybrid_with_ulysses_degree_one_is_the_rings_prediction():
    """``predict_hybrid`` (what ``measure_hybrid`` compares with) at ``U = 1`` is the ring's own
    measured-vs-predicted model (``kernels.calibration.measure.predict``) on the same
    calibration."""
    import json
    from pathlib import Path

    from kernels.calibration.measure import predict
    from kernels.calibration.profile import Calibration
    from kernels.calibration.report import RingShape
    from kernels.distributed.hybrid import predict_hybrid

    path = Path(__file__).parent.parent / "results" / "cpu-calibration-2026-11-29.json"
    cal = Calibration.from_json(json.loads(path.read_text()))
    shape = dict(
        hosts=4, seq_len=4096, heads=4, kv_heads=None, head_dim=64, layout="zigzag", causal=True
    )
    ring = predict(cal, RingShape(**shape))[0].summary()["total_time_s"]
    assert predict_hybrid(cal, ulysses_degree=1, **shape)["total_time_s"] == ring
    hybrid = predict_hybrid(cal, ulysses_degree=2, **shape)
    assert hybrid["ulysses_degree"] == 2 and hybrid["ring_degree"] == 2
    assert 0 < hybrid["compute_time_s"] <= hybrid["total_time_s"]
