"""Calibration fits, the profile it saves, the prediction it feeds, and one real (tiny) gloo
calibrate + measure round trip; plus the pure-Python parts of the GPU check script."""

import json
from types import SimpleNamespace

import numpy as np
import pytest

from kernels.calibration.calibrate import calibrate_data, save_calibration
from kernels.calibration.measure import measure, predict
from kernels.calibration.paired import compute_sizes
from kernels.calibration.probes import MASKED_BLOCKS
from kernels.calibration.profile import Calibration, fit_line
from kernels.distributed.rank_timeline import step_durations
from ringsim.timer.cost import attention_flops
from ringsim.timer.machine.hardware import load_profile

pytestmark = pytest.mark.torch


def _synthetic(rate=2e10, overhead=1e-4, bandwidth=1e9, latency=5e-4) -> Calibration:
    cal = Calibration("gloo", "fp32", heads=2, head_dim=32, threads=1, hosts=2, when="today")
    for c in (64, 128, 256, 512):
        flops = attention_flops(c, c, 2, 32)
        cal.compute.append({"block_tokens": c, "flops": flops, "seconds": overhead + flops / rate})
    for n in (1024, 65536, 1 << 20):
        row = {"bytes": n, "seconds": latency + n / bandwidth}
        cal.exchange.append(row)
        cal.pingpong.append(dict(row))
    return cal


def test_fit_line_recovers_rate_and_intercept():
    x = np.array([1e6, 4e6, 1.6e7, 6.4e7])
    fit = fit_line(x, 2e-4 + x / 5e9)
    assert fit.rate == pytest.approx(5e9, rel=1e-9)
    assert fit.intercept == pytest.approx(2e-4, rel=1e-6)
    # noise that would give a negative intercept is clamped to a line through the origin
    fit = fit_line([1.0, 2.0], [1.0, 2.5])
    assert fit.intercept == 0 and fit.rate > 0
    with pytest.raises(ValueError, match="two distinct"):
        fit_line([1.0, 1.0], [1.0, 2.0])


def test_effective_rate_includes_the_per_call_overhead():
    cal = _synthetic()
    flops = attention_flops(256, 256, 2, 32)
    assert cal.rate_at(256) == pytest.approx(flops / (1e-4 + flops / 2e10), rel=1e-9)
    assert cal.rate_at(181) < cal.rate_at(256) < 2e10  # interpolated, overhead shrinks with c
    big = attention_flops(4096, 4096, 2, 32)  # outside the measured range: the fit
    assert cal.rate_at(4096) == pytest.approx(big / (1e-4 + big / 2e10), rel=1e-6)
    hw = cal.hardware(block_tokens=256)
    # the profile splits the block's time into the per-call overhead and the FLOPs at a rate
    assert hw.block_overhead_s == pytest.approx(1e-4, rel=1e-6)
    assert hw.flops_for("fp32") == pytest.approx(2e10, rel=1e-6)
    assert hw.block_overhead_s + flops / hw.flops_for("fp32") == pytest.approx(
        cal.block_seconds(256), rel=1e-9
    )
    assert hw.link_bandwidth == pytest.approx(1e9) and hw.link_latency == pytest.approx(5e-4)
    # without masked, solo, overlap or setup rows the other terms are neutral
    assert (hw.masked_speed, hw.solo_speed, hw.pass_overhead_s) == (1.0, 1.0, 0.0)
    assert cal.overlap_efficiency() == hw.overlap_efficiency == 1.0


def _with_kernel_rows(cal: Calibration, *, masked=0.8, solo=1.25, setup=2e-3, hidden=0.1):
    """Rows as a machine with these kernel terms would measure them at c = 256."""
    c, overhead = 256, cal.block_overhead()
    flop_time = cal.block_seconds(c) - overhead
    for name, work in (("contiguous-diagonal", 0.625), ("zigzag-early-keys", 0.5)):
        seconds = overhead + work * flop_time / masked
        cal.masked.append({"block_tokens": c, "block": name, "work": work, "seconds": seconds})
    cal.solo.append({"block_tokens": c, "flops": 0, "seconds": cal.block_seconds(c) / solo})
    compute, transfer = 1e-3, 2e-3
    step = compute + transfer - hidden * compute
    cal.overlap.append({"block_tokens": 8, "bytes": 1 << 20, "compute_s": compute,
                        "transfer_s": transfer, "step_s": step})  # fmt: skip
    row = {"layout": "contiguous", "causal": False, "hosts": 2, "block_tokens": 2, "heads": 1,
           "head_dim": 1, "block_s": 3e-4}  # fmt: skip
    row["seconds"] = cal.simulated_pass_time(row) + setup
    cal.ring_pass.append(row)
    return cal


def test_kernel_terms_are_read_from_their_rows():
    cal = _with_kernel_rows(_synthetic())
    assert cal.masked_speed_at(256) == pytest.approx(0.8, rel=1e-9)
    assert cal.solo_speed_at(256) == pytest.approx(1.25, rel=1e-9)
    assert cal.pass_overhead() == pytest.approx(2e-3)
    # the near-empty pass's steps: its two blocks (their measured cost and their 16 FLOPs), the
    # first beside the exchange of k, v (16 bytes), 10% of the shorter of the two hidden
    hw = cal.hardware(block_tokens=256)
    block = 3e-4 + attention_flops(2, 2, 1, 1) / hw.flops_for("fp32")
    link = hw.link_latency + 16 / hw.link_bandwidth
    tiny = max(block, link) + 0.9 * min(block, link) + block
    assert cal.simulated_pass_time(cal.ring_pass[0]) == pytest.approx(tiny, rel=1e-6)
    assert cal.overlap_efficiency() == pytest.approx(0.1)
    hw = cal.hardware(block_tokens=256)
    terms = (hw.masked_speed, hw.solo_speed, hw.overlap_efficiency)
    assert terms == pytest.approx((0.8, 1.25, 0.1))
    # the terms survive the JSON round trip; data saved before they existed loads neutral
    again = Calibration.from_json(json.loads(json.dumps(cal.to_json())))
    assert again.hardware(block_tokens=256) == hw
    old = {k: v for k, v in cal.to_json().items()
           if k not in ("masked", "solo", "overlap", "ring_pass")}  # fmt: skip
    neutral = Calibration.from_json(old).hardware(block_tokens=256)
    assert (neutral.masked_speed, neutral.solo_speed, neutral.pass_overhead_s) == (1.0, 1.0, 0.0)


def test_overlap_efficiency_is_the_median_probe_contention_included():
    cal = _synthetic()
    for hidden in (0.1, 1.0, 0.2):  # one probe that saw full overlap must not swing it
        compute, transfer = 1e-3, 2e-3
        cal.overlap.append({"block_tokens": 8, "bytes": 1 << 20, "compute_s": compute,
                            "transfer_s": transfer,
                            "step_s": compute + transfer - hidden * compute})  # fmt: skip
    assert cal.overlap_efficiency() == pytest.approx(0.2) == cal.overlap_fraction()
    cal.overlap[0]["step_s"] = cal.overlap[2]["step_s"] = 2e-3  # two of three hide it all
    assert cal.overlap_efficiency() == pytest.approx(1.0)
    # steps slower than compute + transfer: contention, kept (not clipped to 0) for the timer
    for row, slower in zip(cal.overlap, (0.3e-3, 0.5e-3, 0.1e-3), strict=True):
        row["step_s"] = 3e-3 + slower
    assert cal.overlap_efficiency() == pytest.approx(-0.3)
    assert cal.overlap_fraction() == 0.0
    assert cal.hardware().overlap_efficiency == pytest.approx(-0.3)
    cal.overlap = [{**row, "step_s": 9e-3} for row in cal.overlap]  # beyond the term's range
    assert cal.overlap_efficiency() == -1.0


def test_overlap_efficiency_is_read_at_the_block_size_it_is_used_for():
    cal = _synthetic()
    for c, hidden in ((8, 0.9), (8, 0.7), (1024, 0.0)):  # small messages hide, large ones not
        compute = transfer = 1e-3 * c / 8
        cal.overlap.append({"block_tokens": c, "bytes": c << 10, "compute_s": compute,
                            "transfer_s": transfer,
                            "step_s": compute + transfer - hidden * transfer})  # fmt: skip
    assert cal.overlap_efficiency(8) == pytest.approx(0.8)
    assert cal.overlap_efficiency(16) == pytest.approx(0.8)  # nearest in log
    assert cal.overlap_efficiency(512) == pytest.approx(0.0)
    assert cal.overlap_efficiency() == pytest.approx(0.0)  # the largest probed
    assert cal.hardware(block_tokens=8).overlap_efficiency == pytest.approx(0.8)
    assert cal.hardware(block_tokens=1024).overlap_efficiency == pytest.approx(0.0)


def test_ratio_interval_brackets_the_ratio_and_narrows_with_repeats():
    from kernels.calibration.uncertainty import bootstrap_intervals

    rng = np.random.default_rng(1)
    fixed = lambda idx, rng: {"time": 1.0}
    few = bootstrap_intervals(1.0 + 0.2 * rng.random(5), fixed)["ratio"]
    many = bootstrap_intervals(1.0 + 0.2 * rng.random(200), fixed)["ratio"]
    assert 1.0 <= few[0] <= few[1] <= 1.2 and 1.0 <= many[0] <= many[1] <= 1.2
    assert many[1] - many[0] < few[1] - few[0]
    assert bootstrap_intervals([2.0, 2.0, 2.0], fixed)["ratio"] == [2.0, 2.0]


def test_paired_ratio_interval_is_drawn_from_the_repeats_own_ratios():
    """With one ratio per repeat the interval is of their median, drawn with the repeats: a
    drift that slows a repeat and its own prediction alike leaves the ratios, and their
    interval, tight, where the medians' ratio would scatter with the drift."""
    from kernels.calibration.uncertainty import bootstrap_intervals

    drift = np.array([1.0, 1.3, 0.8, 1.1, 1.5])  # the machine, repeat by repeat
    pooled = lambda idx, rng: {"time": 1.0}
    paired = bootstrap_intervals(drift * 1.02, pooled, ratios=[1.02] * 5)["ratio"]
    assert paired == pytest.approx([1.02, 1.02])
    loose = bootstrap_intervals(drift * 1.02, pooled)["ratio"]
    assert loose[1] - loose[0] > 0.2
    with pytest.raises(ValueError, match="one value per repeat"):
        bootstrap_intervals([1.0, 2.0], pooled, ratios=[1.0])


def testpaired_calibration_times_at_least_two_block_sizes():
    for c in (1, 2, 8, 16, 17, 32, 1024):
        sizes = compute_sizes(c)
        assert c in sizes and len(set(sizes)) >= 2 and sizes == sorted(sizes)
        fit_line([float(x) for x in sizes], [1e-4 + x * 1e-6 for x in sizes])  # fits


def test_prediction_uses_the_measured_overlap_and_setup():
    cal = _with_kernel_rows(_synthetic(latency=1e-4, bandwidth=1e9), masked=1.0, solo=1.0)
    sim, hw = predict(
        cal, hosts=2, seq_len=512, heads=2, kv_heads=None, head_dim=32, layout="contiguous",
        causal=False,
    )  # fmt: skip
    # 10% hidden: the step that sends costs max + 0.9 min of its compute and transfer
    assert sim.config.overlap and hw.overlap_efficiency == pytest.approx(0.1)
    transfer = hw.link_latency + 2 * 256 * 2 * 32 * 4 / hw.link_bandwidth
    block = cal.block_seconds(256)
    expect = 2e-3 + max(block, transfer) + 0.9 * min(block, transfer) + block
    assert sim.summary()["total_time_s"] == pytest.approx(expect, rel=1e-6)


def test_profile_saves_loadable_and_data_stays_out_of_the_preset_glob(tmp_path):
    cal = _synthetic()
    profile, data = save_calibration(cal, tmp_path / "cpu-profile-2099-01-01.json")
    hw = load_profile(profile)
    assert hw.link_bandwidth == pytest.approx(1e9)
    assert not data.name.startswith("cpu-profile")
    again = Calibration.from_json(json.loads(data.read_text()))
    assert again.rate_at(128) == pytest.approx(cal.rate_at(128))


def test_prediction_of_a_compute_bound_ring_is_steps_times_block_time():
    cal = _synthetic(latency=1e-6, bandwidth=1e12)
    sim, _hw = predict(
        cal, hosts=2, seq_len=512, heads=2, kv_heads=None, head_dim=32, layout="contiguous",
        causal=False,
    )  # fmt: skip
    block = cal.block_seconds(256)
    assert sim.summary()["total_time_s"] == pytest.approx(2 * block, rel=1e-3)
    steps = step_durations(sim.timeline)
    np.testing.assert_allclose(steps, [block, block], rtol=1e-3)


def test_step_durations_take_the_slowest_host_and_the_arrival():
    nan = np.nan
    compute_end = np.array([[1.0, 2.0], [3.0, 3.5]])
    recv_end = np.array([[2.5, 1.0], [nan, nan]])
    steps = step_durations(SimpleNamespace(compute_end=compute_end, recv_end=recv_end))
    np.testing.assert_allclose(steps, [2.5, 1.5])  # host 0 waits for its block until 2.5


def test_real_calibration_and_measurement_on_gloo():
    """Tiny sizes, two local ranks: the pipeline runs, the profile is valid, the ring is exact
    and the prediction is in the right range (not the 10% target: this runs beside other CI
    jobs on shared cores)."""
    cal = calibrate_data(
        "gloo", heads=2, head_dim=16, sizes=[32, 64, 128], link_bytes=[1024, 65536], repeats=3,
        masked_sizes=[128], solo_sizes=[128], step_sizes=[128],
    )  # fmt: skip
    assert cal.rate_at(64) > 0 and cal.link_fit().rate > 0
    assert {r["block"] for r in cal.masked} == set(MASKED_BLOCKS) and len(cal.solo) == 1
    assert len(cal.overlap) == 1 and len(cal.ring_pass) == 1
    assert cal.ring_pass[0]["seconds"] > 0 and cal.ring_pass[0]["block_s"] > 0
    hw = cal.hardware(block_tokens=128)
    assert hw.masked_speed > 0 and hw.solo_speed > 0 and hw.pass_overhead_s >= 0
    assert 0 <= cal.overlap_fraction() <= 1 and -1 <= cal.overlap_efficiency() <= 1
    assert hw.overlap_efficiency == cal.overlap_efficiency()
    report = measure(seq_len=256, heads=2, head_dim=16, causal=True, layout="zigzag",
                     calibration=cal, repeats=3)  # fmt: skip
    paired = measure(seq_len=128, heads=2, kv_heads=1, head_dim=16, causal=False, repeats=2)
    assert paired["calibration"].startswith("paired") and len(paired["predicted_times_s"]) == 2
    assert paired["max_abs_error"] < 1e-5 and 0.1 < paired["ratio"] < 10
    assert paired["kv_heads"] == 1  # GQA: the probes and the ring move one kv head
    # paired: each repeat against its own prediction, the median of those; and both medians'
    times = zip(paired["measured_times_s"], paired["predicted_times_s"], strict=True)
    own = [m / p for m, p in times]
    assert paired["ratios"] == pytest.approx(own) and paired["ratio"] == np.median(own)
    assert paired["ratio_of_medians"] == pytest.approx(
        paired["measured_time_s"] / paired["predicted_time_s"]
    )
    assert report["ratio"] == report["ratio_of_medians"]  # a given calibration: no pairs
    for key in ("hosts", "backend", "measured_time_s", "predicted_time_s", "ratio"):
        assert key in report
    assert report["hosts"] == 2 and report["backend"] == "gloo"
    assert report["max_abs_error"] < 1e-5
    assert 0.1 < report["ratio"] < 10
    assert len(report["steps"]) == 2
    for r in (report, paired):  # the step rows and the time outside them add up to one pass
        for col in ("measured_s", "predicted_s"):
            rows = sum(s[col] for s in r["steps"]) + r["outside_steps"][col]
            assert rows == pytest.approx(r["pass"][col], rel=1e-9)
        assert r["pass"]["predicted_s"] == r["predicted_time_s"]
        assert r["outside_steps"]["predicted_s"] == pytest.approx(
            r["profile"]["pass_overhead_s"], rel=1e-6, abs=1e-9
        )
    for r in (report, paired):
        lo, hi = r["ratio_ci95"]
        assert 0 < lo <= hi
    assert cal.overlap[0]["block_tokens"] == 128  # probed at the step size asked for


def _overlap_rows(rank, hosts):
    from kernels.calibration.probes import measure_overlap

    shape = dict(heads=4, head_dim=8, dtype="fp32", repeats=3)
    return measure_overlap(16, **shape), measure_overlap(16, **shape, kv_heads=1)


def test_overlap_probe_moves_the_runs_message():
    from kernels.distributed.launch import launch

    mha, gqa = launch(_overlap_rows, 2, timeout_s=30)[0]
    assert mha["bytes"] == 2 * 16 * 4 * 8 * 4 and gqa["bytes"] == 2 * 16 * 1 * 8 * 4
    for row in (mha, gqa):
        assert row["compute_s"] > 0 and row["transfer_s"] > 0 and row["step_s"] > 0


def test_bad_arguments():
    with pytest.raises(ValueError, match="backend"):
        calibrate_data("mpi")
    with pytest.raises(ValueError, match="backend"):
        measure(backend="cuda", calibration=_synthetic())
    from kernels.calibration.calibrate import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["--sizes", "12,x"])


# ---- the GPU check's pure-Python parts (the GPU sections cannot run here) -----------------


def test_gpu_check_budget_skips_sections_that_do_not_fit(tmp_path):
    from kernels.gpu.check import Budget, Report

    now = [0.0]
    budget = Budget(100, clock=lambda: now[0])
    report = Report(tmp_path / "gpu.json", {"device": "test"})
    report.run("fits", lambda: {"value": 1}, budget, estimate_s=50)
    now[0] = 80.0
    report.run("too_long", lambda: {"value": 2}, budget, estimate_s=50)
    report.run("broken", lambda: 1 / 0, budget, estimate_s=10)
    data = json.loads((tmp_path / "gpu.json").read_text())
    assert data["sections"]["fits"]["value"] == 1
    assert "too_long" in data["skipped"] and "20 s left" in data["skipped"]["too_long"]
    assert "ZeroDivisionError" in data["errors"]["broken"]
    with pytest.raises(ValueError, match="budget"):
        Budget(0)


def test_gpu_check_names_args_and_flops(monkeypatch, tmp_path):
    from kernels.gpu.check import default_out, device_slug, parse_args
    from kernels.gpu.plan import attention_tflops

    assert device_slug("NVIDIA H200") == "h200"
    assert device_slug("NVIDIA A100-SXM4-80GB") == "a100"
    monkeypatch.setenv("OUT", str(tmp_path))
    assert default_out("NVIDIA H200", "2030-01-02") == tmp_path / "gpu-h200-2030-01-02.json"
    # 4 b h c^2 d FLOPs in one second; causal halves them, backward is 2.5x
    assert attention_tflops(1, 1, 10_000, 2_500, 1.0, causal=False) == pytest.approx(1.0)
    assert attention_tflops(1, 1, 10_000, 2_500, 1.0, causal=True, backward=True) == pytest.approx(
        1.25
    )
    assert parse_args(["--quick"]).budget_s == 420
    with pytest.raises(SystemExit):
        parse_args(["--sections", "speed,warp"])
    with pytest.raises(SystemExit):
        parse_args(["--budget-s", "-3"])


def test_gpu_check_without_a_gpu_writes_why(tmp_path):
    import torch

    from kernels.gpu.check import main

    if torch.cuda.is_available():
        pytest.skip("this test is about machines without a GPU")
    out = tmp_path / "gpu.json"
    assert main(["--out", str(out), "--budget-s", "5"]) == 1
    data = json.loads(out.read_text())
    assert "no CUDA device" in data["errors"]["device"] and data["sections"] == {}


def test_the_step_table_shows_the_pass_nearest_the_median():
    """``typical_pass`` picks, over every ring call and timed pass, the one whose slowest rank
    is nearest the median, and returns that pass's timelines (not the last pass's)."""
    from kernels.calibration.measure import typical_pass

    def rank(times, tag):
        return {"forward_s": times, "forward_timelines": [f"{tag}{p}" for p in range(len(times))]}

    calls = [[rank([1.0, 5.0], "a"), rank([2.0, 1.0], "b")],  # passes: 2.0, 5.0
             [rank([3.1, 9.0], "c"), rank([0.5, 1.0], "d")]]  # passes: 3.1, 9.0  # fmt: skip
    seconds, records = typical_pass(calls, median=3.0)
    assert seconds == 3.1 and records == ["c0", "d0"]
    with pytest.raises(ValueError, match="no timed pass"):
        typical_pass([], median=1.0)
