"""Hardware presets and the cost model: FLOPs, bytes, and the overlap threshold."""

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from ringsim.numerics.attention import block_attention
from ringsim.timer.cost import (
    attention_flops,
    grad_block_bytes,
    hiding_block,
    kv_block_bytes,
    overlap_threshold,
    partial_bytes,
)
from ringsim.timer.machine.hardware import (
    PRESETS,
    Hardware,
    custom_hardware,
    get_hardware,
    load_profile,
    save_profile,
)

PAPER_TABLE_2 = {"a100-nvlink": 1.0e3, "a100-ib": 24.5e3, "tpu-v4": 1.0e3}
MHA = dict(heads=32, kv_heads=32, head_dim=128, dtype="bf16")


# -- hardware ---------------------------------------------------------------------------------
def test_presets_have_sources_and_the_required_names():
    required = {"a100-nvlink", "a100-ib", "h100-nvlink", "h200-nvlink", "h200-ib"}
    assert required | {"tpu-v4", "tpu-v5e"} <= set(PRESETS)
    for hw in PRESETS.values():
        assert hw.source and "\n" not in hw.source
        assert hw.flops_for("bf16") > 0


def test_unknown_preset_names_it_and_lists_the_known():
    with pytest.raises(ValueError, match=r"'a100-pcie'.*a100-nvlink"):
        get_hardware("a100-pcie")


@pytest.mark.parametrize(
    "kwargs, word",
    [
        (dict(flops=0, bandwidth=1e9), "flops"),
        (dict(flops=float("nan"), bandwidth=1e9), "flops"),
        (dict(flops=1e12, bandwidth=-1), "bandwidth"),
        (dict(flops=1e12, bandwidth=1e9, latency=float("inf")), "latency"),
        (dict(flops=1e12, bandwidth=1e9, dtype="int8"), "dtype"),
    ],
)
def test_custom_hardware_refuses_bad_numbers(kwargs, word):
    with pytest.raises(ValueError, match=word):
        custom_hardware(**kwargs)


def test_flops_for_applies_efficiency_and_refuses_missing_dtype():
    hw = Hardware("x", {"bf16": 100.0}, 1.0, 0.0, 1.0, efficiency=0.5)
    assert hw.flops_for("bf16") == 50.0
    with pytest.raises(ValueError, match="fp32"):
        hw.flops_for("fp32")
    with pytest.raises(ValueError, match="efficiency"):
        Hardware("x", {"bf16": 1.0}, 1.0, 0.0, 1.0, efficiency=1.5)


def test_profile_round_trip(tmp_path):
    hw = get_hardware("h200-ib")
    save_profile(hw, tmp_path / "p.json")
    assert load_profile(tmp_path / "p.json") == hw
    (tmp_path / "bad.json").write_text(json.dumps({"name": "x", "flops": {"bf16": 1.0}}))
    with pytest.raises(ValueError, match=r"bad\.json"):
        load_profile(tmp_path / "bad.json")
    (tmp_path / "junk.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"junk\.json"):
        load_profile(tmp_path / "junk.json")


# -- FLOPs and bytes --------------------------------------------------------------------------
def test_attention_flops_counts_two_matmuls_and_a_2_5x_backward():
    fwd = attention_flops(100, 60, 4, 16)
    assert fwd == 4 * 100 * 60 * 16 * 4  # QK^T and PV: 2 * q * k * d each, per head
    assert attention_flops(100, 60, 4, 16, pass_="backward") == 2.5 * fwd
    assert attention_flops(100, 60, 4, 16, pass_="train-step") == 3.5 * fwd
    assert attention_flops(100, 60, 4, 16, work=0.25, batch=3) == 0.75 * fwd
    with pytest.raises(ValueError, match="work"):
        attention_flops(1, 1, 1, 1, work=1.5)
    with pytest.raises(ValueError, match="pass"):
        attention_flops(1, 1, 1, 1, pass_="sideways")


def test_kv_bytes_follow_kv_heads_dtype_and_pass():
    assert kv_block_bytes(1000, 8, 128, "bf16") == 2 * 1000 * 8 * 128 * 2
    assert kv_block_bytes(1000, 32, 128, "bf16") == 4 * kv_block_bytes(1000, 8, 128, "bf16")
    assert kv_block_bytes(1000, 8, 128, "fp32") == 2 * kv_block_bytes(1000, 8, 128, "bf16")
    fwd = kv_block_bytes(1000, 8, 128, "bf16")
    assert kv_block_bytes(1000, 8, 128, "bf16", pass_="backward") == 2 * fwd
    assert kv_block_bytes(1000, 8, 128, "bf16", pass_="backward", grad_dtype="fp32") == 3 * fwd
    assert grad_block_bytes(1000, 8, 128, "bf16", grad_dtype="fp32") == 2 * fwd
    with pytest.raises(ValueError, match="block_tokens"):
        kv_block_bytes(0, 8, 128, "bf16")


# -- the overlap threshold --------------------------------------------------------------------
@pytest.mark.parametrize("name, paper", PAPER_TABLE_2.items())
def test_threshold_matches_the_paper_table(name, paper):
    hw = get_hardware(name)
    c = overlap_threshold(hw, **MHA, include_latency=False)
    assert c == pytest.approx(hw.flops["bf16"] / hw.link_bandwidth, rel=1e-12)  # c* = F / B
    assert abs(c - paper) / paper < 0.05  # 1.0K, 24.96K vs the printed 24.5K, 1.03K


def test_the_one_matmul_count_would_double_the_threshold_and_miss_the_table():
    hw = get_hardware("a100-nvlink")
    c = overlap_threshold(hw, **MHA, include_latency=False)
    one_matmul = 2 * c  # FLOPs 2 c^2 d per head against the same bytes
    assert abs(c - 1.0e3) < 0.05e3 and abs(one_matmul - 1.0e3) > 1.0e3


def test_threshold_scales_with_flops_and_inverse_bandwidth():
    base = overlap_threshold(custom_hardware(1e14, 1e11), **MHA)
    assert overlap_threshold(custom_hardware(2e14, 1e11), **MHA) == pytest.approx(2 * base)
    assert overlap_threshold(custom_hardware(1e14, 4e11), **MHA) == pytest.approx(base / 4)


def test_gqa_fp32_and_backward_move_the_threshold():
    hw = custom_hardware(1e14, 1e11, dtype="bf16")
    base = overlap_threshold(hw, **MHA)
    gqa = overlap_threshold(hw, heads=32, kv_heads=8, head_dim=128, dtype="bf16")
    assert gqa == pytest.approx(base / 4)
    assert overlap_threshold(hw, **MHA, pass_="backward") == pytest.approx(0.8 * base)
    hw32 = custom_hardware(1e14, 1e11, dtype="fp32")
    fp32 = overlap_threshold(hw32, heads=32, kv_heads=32, head_dim=128, dtype="fp32")
    assert fp32 == pytest.approx(2 * base)


def test_threshold_with_latency_balances_compute_and_transfer():
    hw = custom_hardware(3e14, 3e11, latency=20e-6)
    for pass_, messages in (("forward", 1), ("backward", 2)):
        c = overlap_threshold(hw, **MHA, pass_=pass_)
        compute = attention_flops(1, 1, 32, 128, pass_=pass_) * c * c / 3e14
        transfer = messages * 20e-6 + kv_block_bytes(1, 32, 128, "bf16", pass_=pass_) * c / 3e11
        assert compute == pytest.approx(transfer, rel=1e-9)
        assert c > overlap_threshold(hw, **MHA, pass_=pass_, include_latency=False)
    assert math.isfinite(c)


@pytest.mark.parametrize(
    "a, beta, latency", [(2.0, 3.0, 0.0), (1e-12, 1e-9, 2e-5), (5.0, 0.0, 4.0)]
)
def test_hiding_block_is_where_compute_meets_transfer(a, beta, latency):
    c = hiding_block(a, beta, latency)
    assert a * c * c == pytest.approx(beta * c + latency, rel=1e-9)
    assert a * (0.99 * c) ** 2 < beta * 0.99 * c + latency  # a smaller block does not hide
    with pytest.raises(ValueError, match="a > 0"):
        hiding_block(0.0, 1.0, 0.0)
    with pytest.raises(ValueError, match="latency"):
        hiding_block(1.0, 1.0, float("nan"))


def test_partial_bytes_are_the_bytes_of_a_real_fp32_partial():
    rng = np.random.default_rng(0)
    q = rng.standard_normal((5, 3, 16)).astype(np.float32)  # (heads, tokens, head_dim)
    k = v = rng.standard_normal((5, 7, 16)).astype(np.float32)
    partial = block_attention(q, k, v, scale=0.25)
    assert partial.acc.dtype == np.float32
    real = sum(x.nbytes for x in partial)
    assert partial_bytes(5, 16, tokens=3) == real
    assert partial_bytes(5, 16, tokens=3, batch=2) == 2 * real
    with pytest.raises(ValueError, match="heads"):
        partial_bytes(0, 16)


def test_calibrated_profiles_are_found_by_name_but_kept_out_of_the_presets(tmp_path, monkeypatch):
    from ringsim.timer.machine import hardware

    profile = hardware.custom_hardware(2e10, 1e9, 2e-4, dtype="fp32")
    path = tmp_path / "cpu-profile-test.json"
    hardware.save_profile(profile, path)
    monkeypatch.setattr(hardware, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(hardware, "calibrated_profiles", lambda: hardware.scan_profiles(tmp_path))
    assert "cpu-calibrated" not in hardware.PRESETS
    found = hardware.get_hardware("cpu-calibrated")
    assert found.flops_for("fp32") == 2e10 and found.link_latency == 2e-4
    assert list(hardware.all_hardware())[-1] == "cpu-calibrated"


def test_kernel_terms_validate_round_trip_and_older_profiles_load(tmp_path):
    hw = replace(
        get_hardware("a100-ib"),
        pass_overhead_s=1e-3,
        block_overhead_s=2e-4,
        masked_speed=0.7,
        solo_speed=1.3,
        overlap_efficiency=-0.4,
    )
    save_profile(hw, tmp_path / "p.json")
    assert load_profile(tmp_path / "p.json") == hw
    new_keys = (
        "pass_overhead_s",
        "block_overhead_s",
        "masked_speed",
        "solo_speed",
        "overlap_efficiency",
    )
    saved = json.loads((tmp_path / "p.json").read_text())
    older = {k: v for k, v in saved.items() if k not in new_keys}
    (tmp_path / "old.json").write_text(json.dumps(older))
    old = load_profile(tmp_path / "old.json")
    assert (
        old.pass_overhead_s,
        old.block_overhead_s,
        old.masked_speed,
        old.solo_speed,
        old.overlap_efficiency,
    ) == (0.0, 0.0, 1.0, 1.0, 1.0)
    for name, value in [
        ("block_overhead_s", -1.0),
        ("pass_overhead_s", float("nan")),
        ("masked_speed", 0.0),
        ("solo_speed", -2.0),
        ("overlap_efficiency", 1.5),
        ("overlap_efficiency", -1.01),
        ("overlap_efficiency", float("nan")),
        ("overlap_efficiency", True),
    ]:
        with pytest.raises(ValueError, match=name):
            replace(hw, **{name: value})
