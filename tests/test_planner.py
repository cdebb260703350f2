"""The planner (ringsim.timer.studies.planner) and `ringsim plan`: configurations enumerated
within the head, node, batch and memory limits, each part of a step timed from its source,
memory counted per GPU, ranked by step time, explained, and bad input refused in one line."""

import json
import math

import pytest

from ringsim.cli import main
from ringsim.timer.machine.hardware import get_hardware
from ringsim.timer.machine.topology import get_cluster
from ringsim.timer.step import gemm
from ringsim.timer.step.flops import model_flops_per_sequence, model_tflops_per_gpu
from ringsim.timer.step.footprint import in_flight, step_bytes, usable_bytes
from ringsim.timer.step.models import ModelSpec, get_model
from ringsim.timer.step.parallel import Parallel
from ringsim.timer.step.training import (
    AttentionTime,
    elementwise_bytes,
    layer_time,
    step_time,
    tp_comm_seconds,
)
from ringsim.timer.studies.planner import (
    MAX_CP,
    cp_variants,
    enumerate_parallel,
    plan,
    tp_degrees,
)

GQA = ModelSpec("gqa-8b", layers=32, d_model=4096, heads=32, ffn_hidden=14336, kv_heads=8)
DGX2 = get_cluster("dgx-h100").with_nodes(2)
H100 = get_hardware("h100-nvlink")


@pytest.fixture(scope="module")
def two_nodes():
    return plan(GQA, 128 * 1024, DGX2, global_batch=2)


# -- enumeration ---------------------------------------------------------------------------------
def test_tensor_parallel_stays_in_a_node_and_divides_the_heads():
    assert tp_degrees(GQA, 16, 8) == [1, 2, 4, 8]
    assert tp_degrees(get_model("30b"), 16, 8) == [1, 2, 4]  # 52 heads: 8 does not divide
    assert tp_degrees(GQA, 6, 8) == [1, 2]


def test_context_parallel_variants_respect_the_kv_head_cap_and_the_node():
    variants = cp_variants(16, 8, 128 * 1024, True, per_node=8)
    assert {v["ulysses"] for v in variants} == {1, 2, 4, 8}  # 16 ranks, but 8 kv heads
    assert not any(v["strategy"] == "ulysses" for v in variants)
    eight = cp_variants(8, 8, 128 * 1024, True, per_node=8)
    assert (
        dict(strategy="ulysses", ulysses=8, placement="ulysses-inner", layout="contiguous") in eight
    )
    assert not any(v["strategy"] == "double-ring" for v in eight)  # one node: the flat ring
    assert {v["layout"] for v in cp_variants(8, 8, 8192, False)} == {"contiguous"}
    assert cp_variants(1, 8, 4096, True) == [
        dict(strategy="ring", ulysses=1, placement="ulysses-inner", layout="contiguous")
    ]


def test_data_parallelism_divides_the_global_batch():
    pars = enumerate_parallel(GQA, 16, 128 * 1024, global_batch=4)
    assert {p.dp for p in pars} == {1, 2, 4}
    assert all(p.gpus == 16 and p.cp <= MAX_CP for p in pars)
    assert {p.recompute for p in pars} == {"none", "selective", "full"}


# -- the parts of a step -------------------------------------------------------------------------
def test_gemm_rates_are_the_published_sweep_at_its_own_shape():
    for k, tflops in zip(gemm.HOPPER_BF16.k, gemm.HOPPER_BF16.flops, strict=True):
        assert gemm.gemm_rate(H100, 8192, 8192, k, "bf16", ideal=False) == pytest.approx(tflops)
    fp8 = gemm.gemm_rate(H100, 8192, 8192, 16384, "fp8", ideal=False)
    assert fp8 == pytest.approx(1523e12) and fp8 < 2 * gemm.peak_flops(H100, "bf16")
    short = gemm.gemm_rate(H100, 8192, 8192, 512, "bf16", ideal=False)
    assert short < 0.7 * gemm.gemm_rate(H100, 8192, 8192, 8192, "bf16", ideal=False)
    assert gemm.gemm_rate(H100, 64, 64, 64, "bf16", ideal=True) == 989e12
    with pytest.raises(ValueError, match=r"fp8.*a100"):
        gemm.check_gemm_dtype("fp8", get_hardware("a100-nvlink"))


def test_a_step_is_the_sum_of_its_parts_and_the_bubble_follows_1f1b():
    attention = AttentionTime(0.01, 0.025, 0.001, 0.03)
    base = Parallel(tp=2, cp=4, pp=4, dp=2, virtual_stages=2, recompute="full")
    b = step_time(
        GQA, base, 32768, 32, get_cluster("dgx-h100").with_nodes(8), attention, ideal=False
    )
    parts = sum(getattr(b, k) for k in b.EXPOSED)
    assert b.step_time_s == pytest.approx(parts, rel=1e-12)
    m, p, v = 16, 4, 2
    assert b.micro_batches == m
    # (p - 1) / (v m + p - 1) of the step without the data-parallel tail and optimizer
    body = b.step_time_s - b.dp_comm_exposed_s - b.optimizer_s
    assert b.pp_bubble_s / body == pytest.approx((p - 1) / (v * m + p - 1), rel=1e-9)
    layer = layer_time(GQA, base, 32768, DGX2, attention, ideal=False)
    assert layer.recompute_s == pytest.approx(
        layer.gemm[0] + layer.elementwise[0] + layer.tp_comm[0] + attention.forward_s
    )


def test_tensor_parallel_traffic_and_elementwise_bytes_scale_as_derived():
    par = Parallel(tp=1)
    assert tp_comm_seconds(GQA, par, 8192, DGX2, ideal=True) == 0.0
    four = Parallel(tp=4)
    ideal = tp_comm_seconds(GQA, four, 8192, DGX2, ideal=True)
    size = 8192 * 4096 * 2  # T x d bf16
    assert ideal == pytest.approx(4 * 3 * (5e-6 + size / 4 / 450e9))
    assert elementwise_bytes(GQA, four, 8192) < elementwise_bytes(GQA, par, 8192)


def test_model_flops_follow_the_two_conventions():
    m = get_model("7b")
    s = 4096
    megatron = model_flops_per_sequence(m, s)
    causal = model_flops_per_sequence(m, s, "causal")
    attention = 12 * m.layers * s * s * m.d_model
    assert megatron - causal == pytest.approx(attention / 2)
    assert model_tflops_per_gpu(m, s, 8, 4, 2.0) == pytest.approx(8 * megatron / 4 / 2 / 1e12)


# -- memory --------------------------------------------------------------------------------------
def test_what_does_not_fit_exceeds_the_device_by_its_own_count(two_nodes):
    assert two_nodes.dropped, "expected some configurations not to fit"
    for c in two_nodes.dropped:
        assert c.bytes_per_host == pytest.approx(sum(c.memory.values()))
        assert c.bytes_per_host > c.usable_bytes
    for c in two_nodes.candidates:
        assert c.bytes_per_host <= c.usable_bytes < c.device_bytes


def megatron_peak_chunks(pp: int, v: int, m: int) -> int:
    """Model chunks rank 0 holds at its peak under Megatron-LM's schedules (schedules.py @
    core_v0.6.0): the warmup forwards (l.1151-1156 plain, l.516-518 interleaved; every chunk
    when m == pp under interleaving) and the steady state's one more, never more than exist."""
    if v == 1:
        return min(pp - 1, m) + (1 if m > pp - 1 else 0)
    total = m * v
    warmup = total if m == pp else min(2 * (pp - 1) + (v - 1) * pp, total)
    return min(warmup + 1, total)


@pytest.mark.parametrize("pp", [2, 3, 4, 8, 16])
def test_the_first_stage_holds_what_megatron_s_schedule_warms_up(pp):
    """Issue 29's defect: plain 1F1B holds min(m, pp) micro-batches of the stage (factor 1,
    not the interleaved 1 + (pp - 1) / (pp v)); interleaved holds its warmup chunks plus one
    (Megatron's interleaved schedule needs m divisible by pp)."""
    for v in (1, 2, 4, 8):
        for m in (1, 2, 5, 16, 64) if v == 1 else (pp, 2 * pp, 4 * pp, 16 * pp):
            par = Parallel(pp=pp, virtual_stages=v)
            expected = megatron_peak_chunks(pp, v, m) / v
            assert in_flight(par, m) == pytest.approx(expected, rel=1e-12), (v, m)
            if v > 1:
                assert in_flight(par, m) <= pp * (1 + (pp - 1) / (pp * v)) + 1e-12


def test_plain_1f1b_at_two_stages_counts_two_micro_batches_not_three():
    """At pp = 2, v = 1 the old factor (1 + 1/2) counted 3 micro-batches' worth on the first
    stage; Megatron holds 2. A run that fits by the true count is no longer refused."""
    model = get_model("7b")
    plain = Parallel(pp=2, dp=4, gemm_dtype="fp8")
    parts = step_bytes(model, plain, 8192, 128, attention_bytes=0.0)
    per_stage = step_bytes(model, plain.with_(pp=1), 8192, 1, 0.0)["activations"] / 2
    assert parts["activations"] == pytest.approx(2 * per_stage, rel=1e-12)


def test_the_nemo_1m_configuration_fits():
    """Llama 2 7B at 1M tokens, TP8 x CP32 x DP4 on 1,024 H100s, fp8 (NeMo's table)."""
    par = Parallel(tp=8, cp=32, dp=4, strategy="ring", layout="zigzag", gemm_dtype="fp8")
    parts = step_bytes(get_model("7b"), par, 2**20, 1, attention_bytes=1e9)
    assert sum(parts.values()) < usable_bytes(H100)
    full_batch = Parallel(tp=1, dp=4, gemm_dtype="fp8")  # the 4K row without recompute
    parts = step_bytes(get_model("7b"), full_batch, 4096, 256, attention_bytes=0.0)
    assert sum(parts.values()) > usable_bytes(H100)
    lean = step_bytes(get_model("7b"), full_batch.with_(recompute="full"), 4096, 256, 0.0)
    assert sum(lean.values()) < usable_bytes(H100)


# -- ranking -------------------------------------------------------------------------------------
def test_plan_ranks_what_fits_best_first_and_times_attention_once_per_configuration(two_nodes):
    times = [c.step_time_s for c in two_nodes.candidates]
    assert times == sorted(times) and len(times) > 100
    keys = {
        (c.parallel.tp, c.parallel.cp, c.ulysses_degree, c.strategy, c.placement, c.layout)
        for c in two_nodes.candidates
    }
    assert two_nodes.timed_attention == len(keys) < len(two_nodes.candidates)
    for c in two_nodes.candidates[:20]:
        b = c.breakdown
        assert c.step_time_s == pytest.approx(b["step_time_s"], rel=1e-12)
        assert b["cp_exposed_comm_s"] <= b["attention_s"] * (1 + 1e-12)
        assert 0 < c.model_tflops_per_gpu and math.isfinite(c.mfu)
    assert {c.parallel.dp for c in two_nodes.candidates} == {1, 2}


def test_prefill_ranks_by_one_forward(two_nodes):
    prefill = plan(GQA, 128 * 1024, DGX2, mode="prefill")
    assert prefill.candidates[0].step_time_s < 0.5 * two_nodes.candidates[0].step_time_s


def test_nothing_fitting_says_what_the_leanest_needs():
    small = get_cluster("pcie-8x-l20")  # 48 GB devices
    with pytest.raises(ValueError, match=r"fits no strategy on 8 x l20.*the leanest"):
        plan(GQA, 4 * 2**20, small, hosts=8)


def test_plans_too_large_to_time_are_refused_before_any_work():
    with pytest.raises(ValueError, match="65,536"):
        plan("7b", 2**30, DGX2.with_nodes(2**27), hosts=2**30)
    with pytest.raises(ValueError, match="context-parallel group of at least 4,096"):
        plan("7b", 128 * 1024, get_cluster("dgx-h100").with_nodes(4096), pp=1)
    with pytest.raises(ValueError, match=r"at least 2,048 ranks .*pp=1,2"):  # the PP searched
        plan("7b", 128 * 1024, get_cluster("dgx-h100").with_nodes(4096), pp=[1, 2])


# -- the command line ----------------------------------------------------------------------------
def test_plan_json_has_the_contract_keys(capsys):
    code = main(
        [
            "plan",
            "--model",
            "7b",
            "--seq-len",
            "64K",
            "--cluster",
            "dgx-h100",
            "--hosts",
            "16",
            "--global-batch",
            "2",
            "--json",
        ]
    )
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    first = data["candidates"][0]
    for key in (
        "strategy",
        "ulysses_degree",
        "layout",
        "step_time_s",
        "bytes_per_host",
        "why",
        "tp",
        "cp",
        "pp",
        "dp",
        "recompute",
        "breakdown",
        "memory",
        "model_tflops_per_gpu",
        "mfu",
    ):
        assert key in first
    steps = [c["step_time_s"] for c in data["candidates"]]
    assert steps == sorted(steps)
    assert data["flops_convention"] == "megatron" and data["global_batch"] == 2
    text = json.dumps(data)
    assert "NaN" not in text and "Infinity" not in text and "null" not in text


def test_plan_table_explains_the_top_candidates(capsys):
    assert main(["plan", "--model", "7b", "--seq-len", "64K", "--hosts", "8", "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert "1. " in out and "exposed communication" in out and "memory headroom" in out
    assert "megatron convention" in out and "4. " not in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--cluster", "dgx-h100", "--nodes", "1", "--hosts", "16"], "hosts=16 does not fit"),
        (["--hosts", "8", "--gpus-per-node", "8"], "needs both --gpus-per-node and"),
        (["--hosts", "8", "--cluster", "nope"], "unknown cluster preset 'nope'"),
        (["--hosts", "8", "--seq-len", "64M"], "fits no strategy"),
        (["--hosts", "8", "--global-batch", "0"], "global_batch"),
        (["--hosts", "8", "--tokens-per-step", "3K"], "--tokens-per-step"),
        (["--hosts", "8", "--tp", "3"], "tp=3"),
        (["--hosts", "8", "--pp", "0"], "pp"),
        (["--hosts", "8", "--pp", "1000"], "pp=1000"),
        (["--hosts", "8", "--virtual-stages", "x"], "virtual_stages"),
        (["--hosts", "8", "--recompute", "some"], "--recompute"),
        (["--hosts", "8", "--sharding", "zero9"], "--sharding"),
        (["--hosts", "8", "--hardware", "a100-nvlink", "--gemm-dtype", "fp8"], "fp8"),
        (["--hosts", "8", "--flops-convention", "x"], "--flops-convention"),
        (["--hosts", "8", "--implementation", "fa9"], "implementation"),
        (["--hosts", "8", "--global-batch", "2", "--tokens-per-step", "128K"], "not allowed"),
    ],
)
def test_bad_plan_input_is_one_line_and_exit_2(capsys, argv, message):
    args = ["plan", "--model", "7b"] + (["--seq-len", "64K"] if "--seq-len" not in argv else [])
    assert main(args + argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


def test_simulate_takes_the_cluster_and_strategy_flags(capsys):
    code = main(
        [
            "simulate",
            "--hosts",
            "16",
            "--seq-len",
            "128K",
            "--kv-heads",
            "8",
            "--causal",
            "--layout",
            "zigzag",
            "--cluster",
            "dgx-h100",
            "--strategy",
            "hybrid",
            "--ulysses-degree",
            "8",
            "--json",
        ]
    )
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["strategy"] == "hybrid" and data["ulysses_degree"] == 8 and data["ring_degree"] == 2
    code = main(
        [
            "simulate",
            "--hosts",
            "8",
            "--seq-len",
            "64K",
            "--strategy",
            "hybrid",
            "--ulysses-degree",
            "3",
        ]
    )
    assert code == 2
    assert "ulysses_degree must divide hosts=8" in capsys.readouterr().err


# -- issue 34: only what runs is ranked, each once; names say what they count ------------------
def test_interleaving_runs_only_where_megatron_runs_it():
    """Megatron-LM cuts the layers (the embedding and the loss may count as one each) into
    pp x v equal chunks and interleaves only a multiple of pp micro-batches."""
    from ringsim.timer.step.parallel import check_interleaving, interleaving_runs

    check_interleaving(32, 4, 2)  # 8 layers a stage, 2 chunks of 4
    check_interleaving(126, 16, 2)  # Llama 3 405B: 126 + embedding + loss = 128 = 16 x 8
    check_interleaving(32, 5, 1)  # plain 1F1B: uneven stages are Megatron's first/last option
    for layers, pp, v, said in [
        (32, 4, 3, "virtual_stages=3 does not split"),
        (32, 2, 1000, "virtual_stages=1000 does not split"),
        (32, 1, 2, "needs pipeline parallelism"),
    ]:
        with pytest.raises(ValueError, match=said):
            check_interleaving(layers, pp, v)
    assert interleaving_runs(8, 4, 2) and interleaving_runs(3, 4, 1)
    assert not interleaving_runs(6, 4, 2) and not interleaving_runs(1, 4, 2)
    best = plan("7b", 16 * 1024, DGX2, 8, pp=2, virtual_stages=2, global_batch=4, keep=2)
    every = best.candidates + best.dropped + best.bounded
    assert every and all(c.micro_batches % 2 == 0 for c in every)
    assert {c.parallel.dp for c in every} == {1, 2}  # dp = 4 leaves one micro-batch of 4
    with pytest.raises(ValueError, match="multiple of pp=4"):
        plan("7b", 16 * 1024, DGX2, 8, pp=4, virtual_stages=2, global_batch=1)


def test_a_choice_named_twice_is_ranked_once():
    twice = plan("7b", 16 * 1024, DGX2, 8, recompute=("full", "full", "none"), keep=50)
    labels = [c.label for c in twice.candidates + twice.dropped + twice.bounded]
    assert len(labels) == len(set(labels))
    assert {c.parallel.recompute for c in twice.candidates + twice.dropped} <= {"full", "none"}
    with pytest.raises(ValueError, match="prefill"):
        plan("7b", 16 * 1024, DGX2, 8, mode="prefill", recompute="full")


def test_nodes_whose_members_do_not_divide_the_ring_plan_without_the_double_ring():
    """3 GPUs a node under a ring of 8: the double ring's inner ring (one node) cannot divide
    it, so it is not a candidate (the plan used to abort on a window never given)."""
    from ringsim.timer.machine.topology import Cluster

    three = Cluster.from_links(H100, 3, 25e9)
    for per_node in (3, 6):
        assert not any(
            v["strategy"] == "double-ring" for v in cp_variants(8, 8, 8192, True, per_node)
        )
    assert any(v["strategy"] == "double-ring" for v in cp_variants(8, 8, 8192, True, 4))
    result = plan("7b", 16 * 1024, three, 8, keep=3)
    assert result.candidates[0].step_time_s > 0


def test_plan_accepts_a_cluster_name_and_refuses_what_it_cannot_use():
    by_name = plan("7b", 16 * 1024, "dgx-h100", 8, keep=1)
    by_object = plan("7b", 16 * 1024, get_cluster("dgx-h100"), 8, keep=1)
    assert by_name.candidates[0].label == by_object.candidates[0].label
    assert by_name.candidates[0].step_time_s == by_object.candidates[0].step_time_s


def test_plan_json_says_what_each_number_of_bytes_is(capsys):
    assert main(["plan", "--model", "7b", "--seq-len", "16K", "--hosts", "8", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    for c in data["candidates"] + data["dropped"]:
        assert "memory_bytes" not in c  # it was the budget, read as what the run uses
        assert c["bytes_per_host"] > 0 and 0 < c["usable_bytes"] < c["device_bytes"]
        assert c["headroom_bytes"] == pytest.approx(c["usable_bytes"] - c["bytes_per_host"])
        assert c["fits"] == (c["bytes_per_host"] <= c["usable_bytes"])


def test_plan_plot_draws_what_does_not_fit_apart_from_the_times(tmp_path):
    """Candidates that do not fit were never timed: they sit in a strip of their own, not at
    0 s on the time axis where they would read as the fastest."""
    from ringsim.views.planning import plot_plan

    result = plan("7b", 64 * 1024, get_cluster("dgx-h100"), 8, keep=3)
    assert result.dropped
    fig = plot_plan(result)
    ax = fig.axes[0]
    times = [y for col in ax.collections for _, y in col.get_offsets()]
    assert times and min(times) >= min(c.step_time_s for c in result.candidates) > 0
    (strip,) = ax.child_axes
    (marks,) = strip.collections
    assert len(marks.get_offsets()) == len(result.dropped)
    assert "does not fit" in " ".join(t.get_text() for t in strip.texts)


def test_plan_reports_progress_to_its_caller():
    seen = []
    plan("7b", 16 * 1024, DGX2, 8, keep=2, progress=lambda *a: seen.append(a))
    assert seen and all(0 <= done < total for done, total, _ in seen)
    assert {what for *_, what in seen} >= {"configurations sized"}
