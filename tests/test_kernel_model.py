"""The kernel model: families reproduce the single-GPU figures they cite, the terms do what
they say, the ring steps are the calls real implementations make, and the timer runs them."""

import itertools
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import examples

from ringsim.layouts import layout_names
from ringsim.timer import RingConfig, simulate
from ringsim.timer.cost import AttentionShape, attention_flops
from ringsim.timer.engine.ring_steps import StepModel, grad_seconds, merge_seconds
from ringsim.timer.machine.families import KERNELS, get_family
from ringsim.timer.machine.hardware import PRESETS, custom_hardware
from ringsim.timer.machine.kernel_model import MASKS, attention_call_seconds, kind_rate, tile_work
from ringsim.timer.studies.waterfall import WATERFALL_TERMS, waterfall

H100, A100 = PRESETS["h100-nvlink"], PRESETS["a100-nvlink"]
SEQS = (512, 1024, 2048, 4096, 8192, 16384)


def bench_tflops(family, hw, seq, head_dim=128, causal=False, pass_="forward"):
    """TFLOP/s as the FA papers count it: batch x seqlen = 16K tokens, hidden 2048."""
    heads, batch = 2048 // head_dim, 16384 // seq
    mask = "causal-diagonal" if causal else "full"
    shape = dict(q_tokens=seq, k_tokens=seq, heads=heads, kv_heads=heads, head_dim=head_dim)
    t = attention_call_seconds(
        family, hw, **shape, dtype="bf16", pass_=pass_, mask=mask, batch=batch
    )
    flops = attention_flops(seq, seq, heads, head_dim, pass_=pass_, batch=batch)
    return flops * (0.5 if causal else 1.0) / t / 1e12


# -- each family reproduces the figure it cites (within 6%: a 2-4 parameter curve) -----------------
FIGURES = [  # (family, hardware, head_dim, causal, pass, TFLOP/s at 512..16K)
    ("fa2", H100, 128, False, "forward", (309, 350, 362, 368, 370, 370)),  # FA3 paper Fig. 5
    ("fa2", H100, 128, True, "forward", (191, 260, 298, 319, 333, 335)),
    ("fa2", H100, 64, False, "forward", (282, 306, 318, 321, 322, 324)),
    ("fa2", H100, 128, False, "backward", (214, 260, 291, 310, 318, 322)),  # FA3 paper Fig. 6
    ("fa3", H100, 128, False, "forward", (467, 565, 625, 638, 646, 648)),
    ("fa3", H100, 128, True, "forward", (292, 423, 521, 579, 602, 616)),
    ("fa3", H100, 128, False, "backward", (316, 424, 501, 542, 559, 561)),
    ("cudnn", H100, 128, False, "forward", (497, 574, 617, 609, 600, 595)),
    ("cudnn", H100, 128, True, "forward", (315, 410, 484, 518, 529, 539)),
]


@pytest.mark.parametrize("family, hw, head_dim, causal, pass_, published", FIGURES)
def test_family_reproduces_its_source_figure(family, hw, head_dim, causal, pass_, published):
    for seq, value in zip(SEQS, published, strict=True):
        got = bench_tflops(family, hw, seq, head_dim, causal, pass_)
        assert got == pytest.approx(value, rel=0.06), (seq, got, value)


def test_fa2_on_a100_reproduces_the_fwd_bwd_figure():
    """FA2 paper Fig. 4 reports fwd+bwd: 3.5 x forward FLOPs over the two calls' time."""
    published = {False: (151, 173, 187, 196, 201, 203), True: (99, 133, 155, 173, 182, 189)}
    for causal, values in published.items():
        for seq, value in zip(SEQS, values, strict=True):
            f = 1 / bench_tflops("fa2", A100, seq, causal=causal)
            b = 2.5 / bench_tflops("fa2", A100, seq, causal=causal, pass_="backward")
            assert 3.5 / (f + b) == pytest.approx(value, rel=0.06), (causal, seq)


# -- the terms ----------------------------------------------------------------------------------
CALL = dict(heads=32, kv_heads=8, head_dim=128, dtype="bf16")


@pytest.mark.parametrize("mask", ["full", "causal-diagonal", "offset-causal", "zigzag-half"])
@pytest.mark.parametrize("pass_", ["forward", "backward"])
def test_ideal_is_flops_over_peak_exactly(mask, pass_):
    q, k = 96, 160
    t = attention_call_seconds(
        "ideal", H100, q_tokens=q, k_tokens=k, pass_=pass_, mask=mask, **CALL
    )
    rows = np.arange(q)
    shift = k - q - (1 if mask == "offset-causal" else 0)
    visible = (
        1.0 if mask in ("full", "zigzag-half") else np.clip(rows + shift + 1, 0, k).sum() / (q * k)
    )
    flops = attention_flops(q, k, 32, 128, work=visible, pass_=pass_)
    assert t == flops / H100.flops_for("bf16")


def rate(family, q, k, mask="full", pass_="forward", hw=H100, **kw):
    t = attention_call_seconds(
        family, hw, q_tokens=q, k_tokens=k, pass_=pass_, mask=mask, **{**CALL, **kw}
    )
    return attention_flops(q, k, kw.get("heads", 32), kw.get("head_dim", 128), pass_=pass_) / t


def test_rate_falls_for_short_rows_and_small_head_dims():
    assert rate("fa2", 8192, 512) < 0.85 * rate("fa2", 8192, 8192)
    assert rate("fa3", 8192, 8192, head_dim=64) < 0.85 * rate("fa3", 8192, 8192)
    assert rate("fa2", 8192, 8192) < 0.4 * H100.flops_for("bf16")


def test_masked_tiles_are_slower_than_full_ones():
    full = rate("fa2", 4096, 4096)
    causal = rate("fa2", 4096, 4096, "causal-diagonal") / 2  # its FLOPs are half the block's
    assert causal < 0.92 * full


def test_short_calls_pay_the_fixed_overhead_and_the_memory_floor():
    fa2 = get_family("fa2")
    tiny = attention_call_seconds(
        "fa2",
        H100,
        q_tokens=1,
        k_tokens=64,
        pass_="forward",
        mask="full",
        heads=1,
        kv_heads=1,
        head_dim=64,
        dtype="bf16",
    )
    assert tiny >= fa2.call_overhead_s
    decode = attention_call_seconds(
        "fa2", H100, q_tokens=1, k_tokens=1 << 20, pass_="forward", mask="full", **CALL
    )
    cache = 2 * (1 << 20) * 8 * 128 * 2  # k and v, bf16
    assert decode >= cache / H100.memory_bandwidth


def test_tile_work_counts_the_tiles_a_mask_touches():
    q = k = 256
    for M, N in ((64, 64), (128, 64), (64, 128), (32, 96)):
        work = tile_work(q, k, "causal-diagonal", (M, N), None)
        visible = np.tril(np.ones((q, k), bool))
        full = masked = 0
        for i in range(0, q, M):
            for j in range(0, k, N):
                block = visible[i : i + M, j : j + N]
                full += bool(block.all())
                masked += bool(block.any() and not block.all())
        assert (work.full, work.masked) == (full, masked), (M, N)
    assert tile_work(256, 128, "zigzag-half", (128, 64), None).masked == 0


def test_kind_rate_names():
    assert kind_rate(A100, "tf32") == 156e12
    assert kind_rate(H100, "fp8") == 2 * 989e12
    assert kind_rate(H100, 1e12) == 1e12
    for bad in ("int4", -1.0, True, float("inf")):
        with pytest.raises(ValueError, match="rate"):
            kind_rate(H100, bad)
    with pytest.raises(ValueError, match="fp8"):
        kind_rate(A100, "fp8")


@pytest.mark.parametrize(
    "kw, word",
    [
        (dict(mask="diagonal"), "mask"),
        (dict(pass_="train-step"), "pass"),
        (dict(dtype="fp32"), "dtype"),
        (dict(tile=(0, 64)), "tile"),
        (dict(tile=128), "tile"),
        (dict(mask="documents"), "visible"),
        (dict(q_tokens=0), "q_tokens"),
    ],
)
def test_bad_call_arguments_name_themselves(kw, word):
    args = dict(q_tokens=64, k_tokens=64, pass_="forward", mask="full", **CALL) | kw
    with pytest.raises(ValueError, match=word):
        attention_call_seconds("fa2", H100, **args)


def test_a_call_whose_heads_are_no_multiple_of_its_kv_heads_is_refused():
    """``heads=32, kv_heads=3`` returned a time (issue 34)."""
    call = dict(q_tokens=128, k_tokens=128, head_dim=128, dtype="bf16", pass_="forward")
    for family in ("ideal", "fa2"):
        with pytest.raises(ValueError, match="kv_heads"):
            attention_call_seconds(family, H100, heads=32, kv_heads=3, mask="full", **call)


def test_families_refuse_what_they_have_no_source_for():
    with pytest.raises(ValueError, match="implementation"):
        get_family("fa4")
    with pytest.raises(ValueError, match="no published curve"):
        attention_call_seconds(
            "fa3", A100, q_tokens=64, k_tokens=64, pass_="forward", mask="full", **CALL
        )
    with pytest.raises(ValueError, match="no published curve"):
        RingConfig(hosts=2, seq_len=64, hardware=A100, implementation="cudnn")
    with pytest.raises(ValueError, match="dtype"):
        RingConfig(hosts=2, seq_len=64, hardware=H100, dtype="fp32", implementation="fa2")


# -- the ring steps are the calls zhuzilin/ring-flash-attention makes -----------------------------
def ring(layout, **kw):
    return RingConfig(
        hosts=4,
        seq_len=4 * 1024,
        hardware=H100,
        heads=32,
        kv_heads=8,
        causal=True,
        layout=layout,
        implementation="fa2",
        **kw,
    )


def test_zigzag_off_diagonal_steps_are_unmasked_half_block_calls():
    steps = StepModel(ring("zigzag"), KERNELS["fa2"])
    assert steps.call(1, 0, 0.5)[:3] == (1024, 1024, "causal-diagonal")
    assert steps.call(1, -1, 0.5)[:5] == (1024, 512, "zigzag-half", None, False)
    assert steps.call(1, 1, 0.5)[:5] == (512, 1024, "zigzag-half", None, True)  # sliced merge


def test_striped_later_blocks_exclude_the_diagonal_and_contiguous_skips():
    striped = StepModel(ring("striped"), KERNELS["fa2"])
    assert striped.call(1, -1, 0.5)[2] == "causal-diagonal"
    # q[1:] against k[:-1], causal: a (c - 1) x (c - 1) call (zhuzilin's stripe_flash_attn)
    assert striped.call(1, 1, 0.5)[:5] == (1023, 1023, "causal-diagonal", None, True)
    contiguous = StepModel(ring("contiguous"), KERNELS["fa2"])
    assert contiguous.call(2, -1, 1.0)[2] == "full"
    assert contiguous.call(0, 1, 0.0) is None


def test_merge_bytes_follow_the_op_list():
    hbm = 1e12
    fa2 = replace(KERNELS["fa2"], elementwise_overhead_s=0.0)
    shape = AttentionShape(heads=4, kv_heads=2, head_dim=8)
    per_byte = 1000 * 4 * 8 / (0.9 * hbm)
    assert merge_seconds(fa2, hbm, shape, op="merge", rows=1000) == pytest.approx(38 * per_byte)
    assert merge_seconds(fa2, hbm, shape, op="slice", rows=1000) == pytest.approx(46 * per_byte)
    fused = replace(fa2, merge="fused")
    assert merge_seconds(fused, hbm, shape, op="merge", rows=1000) == pytest.approx(10 * per_byte)
    assert merge_seconds(KERNELS["ideal"], hbm, shape, op="merge", rows=1000) == 0.0
    grads = grad_seconds(fa2, hbm, shape, op="accumulate", q_rows=10, kv_rows=20)
    assert grads == pytest.approx(10 * 8 * (10 * 4 + 2 * 20 * 2) / (0.9 * hbm))
    with pytest.raises(ValueError, match="op"):
        merge_seconds(fa2, hbm, shape, op="rescale", rows=1000)


# -- the timer runs the model ---------------------------------------------------------------------
def test_defaults_are_the_ideal_timer_bit_for_bit():
    base = dict(hosts=4, seq_len=4096, hardware=H100, causal=True, layout="zigzag")
    for pass_ in ("forward", "backward", "train-step"):
        plain = simulate(RingConfig(**base, pass_=pass_))
        named = simulate(
            RingConfig(
                **base,
                pass_=pass_,
                implementation="ideal",
                attention_flops=None,
                overlap_efficiency=None,
            )
        )
        np.testing.assert_array_equal(plain.timeline.compute_end, named.timeline.compute_end)
        np.testing.assert_array_equal(plain.timeline.send_end, named.timeline.send_end)


def test_real_implementation_is_slower_than_ideal_and_term_by_term():
    cfg = ring("zigzag", pass_="forward")
    terms = waterfall(cfg)
    assert [t for t, _ in terms] == list(WATERFALL_TERMS)
    times = [s for _, s in terms]
    assert times[0] == simulate(cfg.replace(implementation="ideal")).makespan
    assert times[-1] == simulate(cfg).makespan
    assert all(b >= a for a, b in itertools.pairwise(times))
    assert times[-1] > 2 * times[0]


def test_per_kind_rates_and_recompute():
    base = dict(hosts=2, seq_len=2048, hardware=A100, pass_="train-step", causal=True)
    plain = simulate(RingConfig(**base))
    tf32 = simulate(RingConfig(**base, attention_flops=kind_rate(A100, "tf32")))
    slow_linear = simulate(RingConfig(**base, linear_flops=A100.flops_for("bf16") / 4))
    assert tf32.makespan > plain.makespan and slow_linear.makespan > plain.makespan
    labels = list(simulate(RingConfig(**base, recompute=True)).timeline.step_labels)
    assert "re qkv-proj" in labels and labels.index("re o-proj+mlp") < labels.index("bwd 0")
    forward = simulate(RingConfig(**{**base, "pass_": "forward"})).makespan
    recomputed = simulate(RingConfig(**base, recompute=True)).makespan
    assert recomputed > plain.makespan + forward


@pytest.mark.parametrize(
    "field, value",
    [
        ("implementation", "flash"),
        ("tile_n", 0),
        ("overlap_efficiency", 1.5),
        ("attention_flops", -1.0),
        ("linear_flops", 0.0),
        ("recompute", "yes"),
    ],
)
def test_bad_config_fields_name_themselves(field, value):
    with pytest.raises(ValueError, match=field if field != "implementation" else "implementation"):
        RingConfig(hosts=2, seq_len=64, hardware=H100, **{field: value})


@settings(max_examples=examples(40), deadline=None)
@given(
    implementation=st.sampled_from(["fa2", "fa3", "cudnn", "triton"]),
    hosts=st.integers(1, 7),
    layout=st.sampled_from(layout_names()),
    causal=st.booleans(),
    overlap=st.booleans(),
    pass_=st.sampled_from(["forward", "backward", "train-step"]),
    block=st.sampled_from([2, 64, 512]),
    documents=st.booleans(),
    jitter=st.sampled_from([0.0, 0.3]),
    recompute=st.booleans(),
    overlap_eff=st.sampled_from([None, 0.5]),
)
def test_engines_agree_with_a_real_implementation(
    implementation,
    hosts,
    layout,
    causal,
    overlap,
    pass_,
    block,
    documents,
    jitter,
    recompute,
    overlap_eff,
):
    seq = hosts * block
    segments = np.repeat(np.arange(seq // 2 + 1), 2)[:seq] if documents else None
    cfg = RingConfig(
        hosts=hosts,
        seq_len=seq,
        hardware=H100,
        heads=4,
        kv_heads=2,
        head_dim=64,
        layout=layout,
        causal=causal,
        overlap=overlap,
        pass_=pass_,
        jitter=jitter,
        implementation=implementation,
        recompute=recompute,
        overlap_efficiency=overlap_eff,
        speed=tuple(0.5 if h == 0 else 1.0 for h in range(hosts)),
        segment_ids=segments,
    )
    fast, slow = simulate(cfg), simulate(cfg, engine="heap")
    for name in ("compute_start", "compute_end", "send_start", "send_end"):
        np.testing.assert_array_equal(getattr(fast.timeline, name), getattr(slow.timeline, name))


def test_torch_family_takes_the_calibrated_terms():
    hw = replace(custom_hardware(1e11, 1e9, dtype="fp32", arch="cpu"), block_overhead_s=1e-4)
    t = attention_call_seconds(
        "torch",
        hw,
        q_tokens=128,
        k_tokens=128,
        heads=1,
        kv_heads=1,
        head_dim=64,
        dtype="fp32",
        pass_="forward",
        mask="full",
    )
    assert t == pytest.approx(1e-4 + attention_flops(128, 128, 1, 64) / 1e11)


def test_masks_listed():
    assert set(MASKS) == {
        *("full", "causal-diagonal", "offset-causal", "zigzag-half", "documents", "window")
    }


# -- the command line -----------------------------------------------------------------------------
def cli_json(capsys, *argv):
    import json

    from ringsim import cli

    assert cli.main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_cli_runs_a_real_implementation_and_shows_the_paper_minimum(capsys):
    args = (
        "simulate",
        "--hosts",
        "8",
        "--seq-len",
        "64K",
        "--causal",
        "--layout",
        "zigzag",
        "--kv-heads",
        "8",
        "--hardware",
        "h100-nvlink",
    )
    ideal = cli_json(capsys, *args)
    real = cli_json(capsys, *args, "--implementation", "fa2", "--tile", "128x64")
    assert "implementation" not in ideal and real["implementation"] == "fa2"
    assert real["total_time_s"] > 2 * ideal["total_time_s"]
    assert ideal["min_seq_per_host_tokens"] == 6 * ideal["min_block_for_overlap"]
    cfg = RingConfig(
        hosts=8,
        seq_len=65536,
        hardware=H100,
        kv_heads=8,
        causal=True,
        layout="zigzag",
        implementation="fa2",
        tile=128,
        tile_n=64,
    )
    assert real["total_time_s"] == simulate(cfg).makespan
    step = cli_json(
        capsys,
        "simulate",
        "--hosts",
        "2",
        "--seq-len",
        "4K",
        "--pass",
        "train-step",
        "--hardware",
        "a100-nvlink",
        "--attention-rate",
        "tf32",
        "--linear-rate",
        "624T",
        "--recompute",
        "--overlap-efficiency",
        "0.5",
    )
    assert step["total_time_s"] > 0
    sweep = cli_json(
        capsys,
        "sweep",
        "--vary",
        "block",
        "--values",
        "1K,4K",
        "--hardware",
        "h100-nvlink",
        "--implementation",
        "fa3",
    )
    assert sweep["implementation"] == "fa3"
    assert sweep["min_seq_per_host_tokens"] == 6 * sweep["overlap_threshold_tokens"]


@pytest.mark.parametrize(
    "flags, word",
    [
        (("--implementation", "fa9"), "--implementation"),
        (("--tile", "12x"), "--tile"),
        (("--tile", "0"), "--tile"),
        (("--overlap-efficiency", "2"), "--overlap-efficiency"),
        (("--attention-rate", "fast"), "--attention-rate"),
        (("--linear-rate", "fp8", "--hardware", "a100-nvlink"), "--linear-rate"),
        (("--implementation", "fa3", "--hardware", "a100-nvlink"), "implementation"),
    ],
)
def test_cli_bad_values_exit_2_naming_the_flag(capsys, flags, word):
    from ringsim import cli

    with pytest.raises(SystemExit) as exit_:
        code = cli.main(["simulate", "--hosts", "8", "--seq-len", "64K", *flags])
        raise SystemExit(code)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert word in err and len(err.splitlines()) == 1


def test_calibration_gives_the_torch_family():
    pytest.importorskip("torch")
    from kernels.calibration.profile import Calibration

    cal = Calibration("gloo", "fp32", heads=2, head_dim=32, threads=1, hosts=2, when="today")
    for c in (64, 128, 256, 512):
        flops = attention_flops(c, c, 2, 32)
        cal.compute.append({"block_tokens": c, "flops": flops, "seconds": 1e-4 + flops / 2e10})
    for n in (1024, 65536, 1 << 20):
        cal.exchange.append({"bytes": n, "seconds": 5e-4 + n / 1e9})
        cal.pingpong.append({"bytes": n, "seconds": 5e-4 + n / 1e9})
    family, hw = cal.kernel_family(), cal.hardware()
    assert family.name == "torch" and family.calibrated
    assert family.call_overhead_s == pytest.approx(1e-4, rel=1e-3)
    t = attention_call_seconds(
        family,
        hw,
        q_tokens=512,
        k_tokens=512,
        heads=2,
        kv_heads=2,
        head_dim=32,
        dtype="fp32",
        pass_="forward",
        mask="full",
    )
    assert t == pytest.approx(1e-4 + attention_flops(512, 512, 2, 32) / 2e10, rel=0.01)


def test_torch_on_a_calibrated_profile_is_the_calibrated_timer():
    hw = replace(
        custom_hardware(1e11, 1e9, dtype="fp32", arch="cpu"),
        block_overhead_s=1e-4,
        masked_speed=0.7,
        solo_speed=1.5,
    )
    base = dict(hosts=4, seq_len=1024, hardware=hw, dtype="fp32", causal=True)
    calibrated = simulate(RingConfig(**base)).timeline
    torch_ = simulate(RingConfig(**base, implementation="torch")).timeline
    np.testing.assert_array_equal(calibrated.compute_end, torch_.compute_end)
