"""The planner (ringsim.timer.studies.planner) and `ringsim plan`: candidates enumerated within the
head and memory limits, timed by the strategies' own timer, ranked, and explained."""

import json

import pytest

from ringsim.cli import main
from ringsim.timer.machine.topology import get_cluster
from ringsim.timer.step.models import ModelSpec
from ringsim.timer.strategies import simulate_strategy
from ringsim.timer.studies.planner import candidate_bytes, enumerate_candidates, plan

GQA = ModelSpec("gqa-8b", layers=32, d_model=4096, heads=32, ffn_hidden=14336, kv_heads=8)
DGX2 = get_cluster("dgx-h100").with_nodes(2)


@pytest.fixture(scope="module")
def two_nodes():
    return plan(GQA, 128 * 1024, DGX2)


def test_candidates_respect_the_kv_head_cap_and_the_hosts():
    cands = enumerate_candidates(GQA, 16, 128 * 1024, causal=True)
    assert {u for _, u, _, _ in cands} == {1, 2, 4, 8}  # 16 hosts, but only 8 kv heads
    assert not any(s == "ulysses" for s, *_ in cands)  # 16 > 8 kv heads
    eight = enumerate_candidates(GQA, 8, 128 * 1024, causal=True)
    assert ("ulysses", 8, "ulysses-inner", "contiguous") in eight
    assert {lay for *_, lay in enumerate_candidates(GQA, 8, 8192, causal=False)} == {"contiguous"}


def test_plan_ranks_fitting_candidates_best_first(two_nodes):
    times = [c.step_time_s for c in two_nodes.candidates]
    assert times == sorted(times) and len(times) > 10
    for c in two_nodes.candidates:
        assert c.bytes_per_host <= c.memory_bytes
        assert c.step_time_s == pytest.approx(c.attention_s + c.local_s, rel=1e-12)
        assert c.compute_s <= c.attention_s * (1 + 1e-12)
    assert two_nodes.hosts == 16 and two_nodes.seconds > 0


def test_a_candidates_time_is_its_strategys_simulated_time(two_nodes):
    best = two_nodes.candidates[0]

    from ringsim.timer.studies.planner import _base_config, local_seconds

    base = _base_config(GQA, 128 * 1024, 16, DGX2, True, "bf16", 1, "ideal")
    total = 0.0
    for pass_ in ("forward", "backward"):
        cfg = base.replace(pass_=pass_, layout=best.layout)
        u = None if best.strategy in ("ring", "ulysses") else best.ulysses_degree
        s = simulate_strategy(
            cfg, best.strategy, ulysses_degree=u, cluster=DGX2, placement=best.placement
        )
        total += s.summary()["total_time_s"]
    layer, head = local_seconds(GQA, base, "train")
    assert best.step_time_s == pytest.approx(GQA.layers * (total + layer) + head, rel=1e-12)


def test_prefill_ranks_by_one_forward(two_nodes):
    prefill = plan(GQA, 128 * 1024, DGX2, mode="prefill")
    assert prefill.candidates[0].step_time_s < 0.5 * two_nodes.candidates[0].step_time_s


def test_candidates_that_do_not_fit_are_dropped_and_nothing_fitting_says_what_would():
    small = get_cluster("pcie-8x-l20")  # 48 GB devices
    result = plan("7b", 384 * 1024, small, hosts=8)  # multi-head: all-gather's k, v are big
    assert {c.strategy for c in result.dropped} == {"allgather"}
    for c in result.dropped:
        assert c.bytes_per_host > c.memory_bytes
    assert any(c.strategy == "allgather" for c in result.candidates)  # with U > 1 it fits
    with pytest.raises(ValueError, match=r"fits no strategy on 8 x l20.*fit at seq_len <= 327680"):
        plan(GQA, 640 * 1024, small, hosts=8)


def test_memory_grows_with_what_the_strategy_keeps(two_nodes):
    by = {(c.strategy, c.ulysses_degree, c.layout): c.bytes_per_host for c in two_nodes.candidates}
    assert by[("allgather", 1, "zigzag")] > by[("ring", 1, "zigzag")]
    from ringsim.timer.studies.planner import Candidate, _base_config

    base = _base_config(GQA, 128 * 1024, 16, DGX2, True, "bf16", 1, "ideal")
    ring = Candidate("ring", 1, 16, "ulysses-inner", "zigzag", 8192)
    assert candidate_bytes(GQA, base, ring, "train") == by[("ring", 1, "zigzag")]


# -- the command line ----------------------------------------------------------------------------
def test_plan_json_has_the_contract_keys(capsys):
    code = main(["plan", "--model", "7b", "--seq-len", "64K", "--cluster", "dgx-h100",
                 "--hosts", "16", "--json"])  # fmt: skip
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    first = data["candidates"][0]
    for key in ("strategy", "ulysses_degree", "layout", "step_time_s", "bytes_per_host", "why"):
        assert key in first
    steps = [c["step_time_s"] for c in data["candidates"]]
    assert steps == sorted(steps)


def test_plan_table_explains_the_top_candidates(capsys):
    assert main(["plan", "--model", "7b", "--seq-len", "64K", "--hosts", "8", "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert "1. " in out and "exposed communication" in out and "memory headroom" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--cluster", "dgx-h100", "--nodes", "1", "--hosts", "16"], "hosts=16 does not fit"),
        (["--hosts", "8", "--gpus-per-node", "8"], "needs both --gpus-per-node and"),
        (["--hosts", "8", "--cluster", "nope"], "unknown cluster preset 'nope'"),
        (["--hosts", "8", "--seq-len", "64M"], "fits no strategy"),
    ],
)
def test_bad_plan_input_is_one_line_and_exit_2(capsys, argv, message):
    args = ["plan", "--model", "7b"] + (["--seq-len", "64K"] if "--seq-len" not in argv else [])
    assert main(args + argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_simulate_takes_the_cluster_and_strategy_flags(capsys):
    code = main(["simulate", "--hosts", "16", "--seq-len", "128K", "--kv-heads", "8",
                 "--causal", "--layout", "zigzag", "--cluster", "dgx-h100",
                 "--strategy", "hybrid", "--ulysses-degree", "8", "--json"])  # fmt: skip
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["strategy"] == "hybrid" and data["ulysses_degree"] == 8 and data["ring_degree"] == 2
    code = main(["simulate", "--hosts", "8", "--seq-len", "64K", "--strategy", "hybrid",
                 "--ulysses-degree", "3"])  # fmt: skip
    assert code == 2
    assert "ulysses_degree must divide hosts=8" in capsys.readouterr().err
