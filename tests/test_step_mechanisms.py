"""The mechanisms found for the whole-step rows' one-way misses (issue 29's follow-up), each
from its source, and what each moves: a GEMM's rate once the GPU is power-saturated, the
pipeline's slowest stage, the gradient accumulation's bytes, the balanced first stage's
activations, FlashAttention-2 on Ada, the all-to-all's host calls, the vanilla block's
score matrices (results/notes-validation.md, issue 29 section, lists every row's move)."""

from __future__ import annotations

import dataclasses

import pytest

from ringsim.timer.machine.families import get_family
from ringsim.timer.machine.hardware import get_hardware
from ringsim.timer.machine.topology import get_cluster
from ringsim.timer.step.footprint import first_stage_layer_batches, in_flight
from ringsim.timer.step.memory import METHODS, method_run
from ringsim.timer.step.models import get_model
from ringsim.timer.step.parallel import Parallel
from ringsim.timer.step.training import (
    AttentionTime,
    grad_accumulation_seconds,
    layer_time,
    lm_head_seconds,
    stage_layers,
    stage_params,
    step_time,
    tokens_per_gpu,
)
from ringsim.timer.step.uncertainty import POINT, point_scale, step_scale
from ringsim.timer.studies.published import DATASET
from ringsim.timer.studies.validate import published_configuration, yunchang_its

H100 = get_hardware("h100-nvlink")
LLAMA3 = Parallel(tp=8, pp=16, dp=64, virtual_stages=8, grad_dtype="fp32", balanced_stages=True)
ATTENTION = AttentionTime(1e-3, 2e-3, 0.0, 3e-3)


# -- a GEMM's rate in a step: the GPU at its power limit -------------------------------------
def test_a_step_s_gemms_run_at_the_saturated_rate_of_their_dtype():
    """On a 700 W GH100 a dense matmul settles at MSMF / MAMF of its burst rate (bf16 708.5 /
    841.9, fp8 1288.7 / 1491.9: stas00/ml-engineering @ 082816f); the point is that ratio, the
    fast end the benchmark's own rate; a device with no measurement runs its benchmarks'."""
    point = point_scale(H100)
    assert point.gemm_rate("bf16") == pytest.approx(708.5 / 841.9)
    assert point.gemm_rate("fp16") == point.gemm_rate("bf16")
    assert point.gemm_rate("fp8") == pytest.approx(1288.7 / 1491.9)
    assert step_scale(H100, {"saturated_matmul": "fast"}).gemm_rate("bf16") == 1.0
    assert step_scale(H100, {"saturated_matmul": "slow"}).gemm_rate("bf16") < 0.85
    assert point.clock == 1.0  # the attention kernels' point: their benchmarks' clock
    for name in ("h200-nvlink", "h800-nvlink"):  # the same die at the same 700 W
        assert get_hardware(name).saturated_matmul == H100.saturated_matmul
    a100 = get_hardware("a100-nvlink")
    assert a100.saturated_matmul == {} and point_scale(a100).gemm_rate("bf16") == 1.0
    with pytest.raises(ValueError, match="saturated_matmul: dtype"):
        dataclasses.replace(a100, saturated_matmul={"fp32": H100.saturated_matmul["bf16"]})


def test_saturation_slows_the_gemms_by_its_ratio_and_nothing_else():
    model, cluster = get_model("llama3-405b"), get_cluster("dgx-h100").with_nodes(1024)
    par = LLAMA3
    tokens = tokens_per_gpu(8192, par)
    sat = layer_time(model, par, 8192, cluster, ATTENTION, ideal=False)
    burst = layer_time(model, par, 8192, cluster, ATTENTION, ideal=False, scale=POINT)
    accumulate = grad_accumulation_seconds(par, 1.0, H100, ideal=False) * sum(
        d_in * d_out for d_in, d_out in _layer_shapes(model, par)
    )
    ratio = 708.5 / 841.9
    assert sat.gemm[0] == pytest.approx(burst.gemm[0] / ratio, rel=1e-12)
    assert sat.gemm[1] - accumulate == pytest.approx((burst.gemm[1] - accumulate) / ratio)
    assert sat.elementwise == burst.elementwise and sat.tp_comm == burst.tp_comm
    head = lm_head_seconds(model, par, tokens, H100, ideal=False)
    assert head > lm_head_seconds(model, par, tokens, H100, ideal=False, scale=POINT)
    ideal = layer_time(model, par, 8192, cluster, ATTENTION, ideal=True)
    assert (
        ideal.gemm == layer_time(model, par, 8192, cluster, ATTENTION, ideal=True, scale=POINT).gemm
    )


def _layer_shapes(model, par):
    heads, kv = model.heads // par.tp, max(1, model.n_kv_heads // par.tp)
    h, f, d = model.d_model, model.ffn_hidden, model.head_dim
    return ((h, (heads + 2 * kv) * d), (heads * d, h), (h, 2 * f // par.tp), (f // par.tp, h))


# -- the pipeline's pace: its slowest stage ----------------------------------------------------
def test_llama3_s_balanced_stages_hold_7_8_and_7_layers():
    """126 layers over 16 stages with a layer taken off the first and the last (Llama 3 Sec.
    3.3.2): (126 + 2) / 16 = 8 slots; the first holds 7 and the embedding, the last 7, the
    LM head and the loss; the largest stage is a middle one's 8 layers, not 7.875."""
    model = get_model("llama3-405b")
    assert stage_layers(model, LLAMA3) == (7, 8, 7)
    even = LLAMA3.with_(balanced_stages=False)
    assert stage_layers(model, even) == (126 / 16,) * 3
    assert stage_layers(model, even.with_(pp=1)) == (126,) * 3
    layer = (model.params - 2 * model.vocab * model.d_model) / model.layers
    assert stage_params(model, LLAMA3) == pytest.approx(8 * layer)
    assert stage_params(model, even) == pytest.approx(
        126 / 16 * layer + model.vocab * model.d_model
    )


@pytest.mark.parametrize("balanced", [True, False])
def test_the_pipeline_runs_at_its_slowest_stage(balanced):
    """A micro-batch takes the slowest stage's time: with Llama 3's balancing a middle
    stage's 8 layers (its last stage, 7 layers and the head, is faster); with Megatron's even
    split the last stage, its L / pp layers and the LM head with the loss."""
    model, cluster = get_model("llama3-405b"), get_cluster("dgx-h100").with_nodes(1024)
    par = LLAMA3.with_(balanced_stages=balanced)
    b = step_time(model, par, 8192, 2048, cluster, ATTENTION, ideal=False)
    layer = layer_time(model, par, 8192, cluster, ATTENTION, ideal=False).total_s
    head = lm_head_seconds(model, par, tokens_per_gpu(8192, par), H100, ideal=False)
    if balanced:
        assert b.micro_batch_s == pytest.approx(8 * layer) and b.lm_head_s == 0.0
        assert 7 * layer + head < 8 * layer
    else:
        assert b.micro_batch_s == pytest.approx(126 / 16 * layer + head)
        assert b.lm_head_s == pytest.approx(b.micro_batches * head)
    assert b.pp_bubble_s == pytest.approx(15 / 8 * b.micro_batch_s)


# -- the gradient buffer, read and written by every micro-batch's weight gradients -------------
@pytest.mark.parametrize(("grad", "extra"), [("fp32", 6), ("bf16", 2)])
def test_gradient_accumulation_moves_2g_minus_e_bytes_a_parameter(grad, extra):
    """Megatron's fused wgrad GEMM reads the gradient buffer and writes it back (g bytes each
    way) where the benchmarked GEMM wrote its bf16 output once (e = 2): fp32 gradients (Llama
    3's) add 6 bytes a parameter every micro-batch, bf16 ones 2; ideal GEMMs move none."""
    par = LLAMA3.with_(grad_dtype=grad)
    seconds = grad_accumulation_seconds(par, 1e9, H100, ideal=False)
    assert seconds == pytest.approx(extra * 1e9 / (0.9 * H100.memory_bandwidth))
    assert grad_accumulation_seconds(par, 1e9, H100, ideal=True) == 0.0


# -- the balanced first stage's activations --------------------------------------------------
def test_the_balanced_first_stage_holds_a_layer_fewer_in_every_chunk_it_starts_with():
    """Megatron's interleaved warm-up at pp 16, v 8 holds 143 chunk-micro-batches on the first
    stage (all 128 at m = 16); with one layer a chunk and the first chunk only the embedding,
    the 18 (16) of them in the first chunk hold none: 125 (112) layers' worth where the even
    split counted 17.9 (16) stages of 7.875 layers = 141 (126)."""
    model = get_model("llama3-405b")
    assert first_stage_layer_batches(model, LLAMA3, 32) == 143 - 31 == 112
    assert first_stage_layer_batches(model, LLAMA3, 16) == 128 - 16 == 112
    even = LLAMA3.with_(balanced_stages=False)
    assert first_stage_layer_batches(model, even, 32) == pytest.approx(
        126 / 16 * in_flight(even, 32)
    )
    plain = LLAMA3.with_(virtual_stages=1)
    assert first_stage_layer_batches(model, plain, 32) == 7 * 16


# -- what the Llama 3 rows now run at, and the residual ---------------------------------------
def test_llama3_rows_hold_and_their_points_stay_a_one_way_ten_percent_above():
    """Every Table 4 row's interval now holds the printed value; the points stay above it
    (+10.5%, +11.8%, +18%: the 8K rows' residual is the micro-batch, test_step_settings)."""
    from ringsim.timer.studies.validate import validate

    for r in validate(experiments=["llama3-t4"]):
        assert r["holds"], r["key"]
        assert 0.08 < r["error"] < (0.20 if "128K" in r["key"] else 0.13), r["key"]


# -- FlashAttention-2 on Ada, and YunChang's all-to-all host calls ---------------------------
def test_fa2_runs_on_ada_from_a_single_kernel_benchmark():
    """The L20 (AD102) times FA2 from the RTX 4090's single-kernel figures (the same SMs):
    d128 non-causal forward at 169.28 of the 4090's 165.2 TFLOP/s, backward 124.57; causal
    151.19 and 99.23."""
    fa2, l20 = get_family("fa2"), get_cluster("pcie-8x-l20").hardware
    assert fa2.runs_on(l20) and l20.arch.name == "ada"
    forward, backward = fa2.curve(l20, "forward"), fa2.curve(l20, "backward")
    assert forward.fraction * 165.2e12 == pytest.approx(169.28e12)
    assert backward.fraction * 165.2e12 == pytest.approx(124.57e12)
    assert forward.causal_factor == pytest.approx(151.19 / 169.28)
    assert "RTX 4090" in forward.source and "tvm" in forward.source


@pytest.mark.slow
def test_the_l20_rows_pick_u2_where_the_pcie_all_to_all_is_not_the_bottleneck():
    """With FA2's Ada curve the L20 GQA rows at 32K and 128K put U = 2 first, as measured."""
    from ringsim.timer.studies.validate import predict_yunchang

    rows = {r.key: r for r in DATASET if r.experiment == "yunchang" and "L20" in r.key}
    for key in ("yunchang/8xL20-PCIe/b1/32K/h32kv8d128", "yunchang/8xL20-PCIe/b1/128K/h32kv8d128"):
        assert predict_yunchang(rows[key]) == (2.0, "fa2")


def test_the_all_to_all_s_host_calls_floor_its_time_and_favour_pure_ulysses():
    """YunChang's all-to-all issues 11 calls per tensor going in and 14 coming out; at 8K on
    eight A100s the GPU's all-to-all is shorter than that, so the host sets its time: both U = 8
    and U = 4 slow down, U = 8 (no ring, fewest calls) stays first where the benchmark measured
    U = 4 at 2.4x its U = 8 (the mechanism that misses)."""
    from ringsim.timer.strategies import frame

    assert frame.ALLTOALL_HOST_CALLS == {"in": 11, "out": 14}
    row = next(r for r in DATASET if r.key == "yunchang/8xA100-NVLink/b2/8K/h32kv32d32")
    with_calls = {u: yunchang_its(row.config, u, "fa2") for u in (8, 4)}
    saved = frame.ALLTOALL_HOST_CALLS
    try:
        frame.ALLTOALL_HOST_CALLS = {"in": 0, "out": 0}
        without = {u: yunchang_its(row.config, u, "fa2") for u in (8, 4)}
    finally:
        frame.ALLTOALL_HOST_CALLS = saved
    assert with_calls[8] < 0.8 * without[8] and with_calls[4] < 0.8 * without[4]
    assert with_calls[8] > with_calls[4]
    assert row.config["its"][4] / row.config["its"][8] > 2.4


# -- Ring Attention Table 3: what the authors' vanilla block materialises ----------------------
def test_vanilla_holds_three_fp32_score_matrices_whatever_the_dtype():
    """The authors' 'standard' attention computes its weights in fp32 (promote_types(dtype,
    float32)); its softmax backward reads p and dp and writes ds: three (b, n, s, s) fp32
    matrices, plus the (b, 1, s, s) fp32 bias and the (1, 1, s, s) boolean mask."""
    m, s = get_model("7b"), 4096
    for e in (2, 4):
        par = method_run("vanilla", "7b", 8)
        assert METHODS["vanilla"].attention(m, s, 1, e, par) == 3 * 32 * s * s * 4 + 5 * s * s


def test_the_vanilla_count_moves_the_8_gpu_rows_but_not_to_the_paper_s():
    """7B vanilla on 8 A100s: one bf16 matrix (the paper's Table 1) gave 16.6K; the code's
    count gives ~10K, still 5x the printed 2K (KNOWN_MISSES)."""
    row = next(r for r in DATASET if r.key == "ring-t3/a100-nvlinkx8/7b/vanilla")
    from ringsim.timer.studies.validate import predict_ring_t3

    value, _ = predict_ring_t3(row)
    assert 8000 < value < 12000 and value / row.value > 4


def test_published_llama3_run_is_configured_with_balanced_stages():
    row = next(r for r in DATASET if r.experiment == "llama3-t4")
    par = published_configuration(row.config)["candidate"].parallel
    assert par.balanced_stages and par.grad_dtype == "fp32"
