"""Calibration on a noisy machine: a robust fit, probes re-run when they spread too wide,
predictions with intervals, a regime label with a margin, and progress on stderr."""

import io
import json

import numpy as np
import pytest

from kernels.calibration.measure import _bootstrap, measure, predict
from kernels.calibration.probes import REPROBES, SPREAD_LIMIT, probe_spread, reprobe, timed
from kernels.calibration.profile import (
    Calibration,
    bootstrap,
    combine_ranks,
    fit_line,
    parameter_intervals,
)
from kernels.calibration.uncertainty import overlaps, regime
from kernels.distributed.progress import Progress, report
from ringsim.timer.cost import attention_flops

pytestmark = pytest.mark.torch

SHAPE = dict(hosts=2, seq_len=512, heads=2, kv_heads=None, head_dim=32, layout="contiguous",
             causal=False)  # fmt: skip


# ---- the robust fit -----------------------------------------------------------------------


def test_fit_recovers_the_line_from_noisy_samples_with_outliers():
    rng = np.random.default_rng(3)
    sizes = np.repeat([1e4, 1e5, 3e5, 1e6], 15)
    true = 2e-4 + sizes / 1e9
    t = true * (1 + 0.05 * rng.standard_normal(len(sizes)))
    slow = rng.random(len(sizes)) < 0.2  # a fifth of the samples waited a scheduler tick
    t[slow] += 4e-3
    fit = fit_line(sizes, t)
    assert fit.rate == pytest.approx(1e9, rel=0.1)
    assert fit.intercept == pytest.approx(2e-4, abs=1e-4)
    # least squares on the same samples is pulled far off by the slow ones
    _slope, intercept = np.polyfit(sizes, t, 1)
    assert abs(intercept - 2e-4) > 3 * abs(fit.intercept - 2e-4)


def test_fit_shrugs_off_one_bad_size_among_several():
    x = np.array([1e3, 1e4, 1e5, 1e6, 1e7])
    t = 1e-4 + x / 5e9
    t[2] *= 10  # one size measured in a burst of load
    fit = fit_line(x, t)
    assert fit.rate == pytest.approx(5e9, rel=0.05) and fit.intercept == pytest.approx(
        1e-4, rel=0.3
    )


# ---- probe quality and re-probing ---------------------------------------------------------


def test_probe_rows_carry_median_spread_and_samples():
    row = timed([1.0, 1.1, 0.9, 1.0, 5.0])
    assert row["seconds"] == 1.0 and row["samples"][-1] == 5.0
    assert row["spread"] == pytest.approx(probe_spread([1.0, 1.1, 0.9, 1.0, 5.0]))
    assert probe_spread([2.0] * 7) == 0.0
    assert probe_spread([1, 2, 3, 4, 5]) == pytest.approx((4 - 2) / 3)


def test_reprobe_runs_again_on_a_planted_wide_spread_and_is_bounded():
    spreads = iter([0.9, 0.05, 0.9])
    calls = []

    def probe():
        calls.append(1)
        return [{"seconds": 1.0, "spread": next(spreads)}]

    rows = reprobe(probe, agree=lambda s: s)
    assert len(calls) == 2 and rows[0]["spread"] == 0.05 and rows[0]["attempts"] == 2
    # a probe that stays wide: at most REPROBES more tries, the narrowest kept
    widths = iter([0.8, 0.6, 0.9, 0.1])
    always = lambda: {"exchange": [{"seconds": 1.0, "spread": next(widths)}]}
    result = reprobe(always, agree=lambda s: s)
    assert result["exchange"][0]["spread"] == 0.6 and result["exchange"][0]["attempts"] == 3
    assert REPROBES == 2 and 0 < SPREAD_LIMIT < 1
    # a narrow first attempt is kept as it is
    once = reprobe(lambda: [{"seconds": 1.0, "spread": 0.01}], agree=lambda s: s)
    assert once[0]["attempts"] == 1


def test_reprobe_follows_the_widest_rank():
    """Every rank must decide alike: the spread that counts is the widest over the ranks."""
    calls = []
    rows = reprobe(lambda: calls.append(1) or [{"seconds": 1.0, "spread": 0.01}],
                   agree=lambda s: max(s, 0.9))  # another rank saw a wide spread  # fmt: skip
    assert len(calls) == 1 + REPROBES and rows[0]["attempts"] == 1 + REPROBES


def test_ranks_combine_to_the_slowest_with_its_samples():
    fast = {"bytes": 8, **timed([1.0, 1.0, 1.2])}
    slow = {"bytes": 8, **timed([2.0, 2.5, 3.0])}
    row = combine_ranks([fast, slow])
    assert row["seconds"] == 2.5 and row["samples"] == slow["samples"]
    assert row["spread"] == max(fast["spread"], slow["spread"])


# ---- pooled calibrations, intervals, regime -----------------------------------------------


def _noisy_calibration(rng, *, link_scale=1.0, n=9) -> Calibration:
    """A calibration whose rows carry samples: 2e10 FLOP/s + 100 us/call, 1 GB/s + 300 us."""
    cal = Calibration("gloo", "fp32", heads=2, head_dim=32, threads=1, hosts=2, when="today")
    noise = lambda t: t * (1 + 0.1 * rng.random(n))
    for c in (16, 128, 256):
        flops = attention_flops(c, c, 2, 32)
        cal.compute.append({"block_tokens": c, "flops": flops,
                            **timed(noise(1e-4 + flops / 2e10))})  # fmt: skip
    for b in (1024, 131072):
        cal.exchange.append({"bytes": b, **timed(noise(link_scale * (3e-4 + b / 1e9)))})
        cal.pingpong.append({"bytes": b, **timed(noise(3e-4 + b / 1e9))})
    return cal


def test_pooling_repeats_keeps_one_slow_link_probe_from_moving_the_prediction():
    rng = np.random.default_rng(0)
    repeats = [_noisy_calibration(rng) for _ in range(4)]
    repeats.append(_noisy_calibration(rng, link_scale=8.0))  # one repeat's link came out slow
    alone = predict(repeats[-1], **SHAPE)[0].summary()["total_time_s"]
    typical = predict(repeats[0], **SHAPE)[0].summary()["total_time_s"]
    pooled = predict(Calibration.pooled(repeats), **SHAPE)[0].summary()["total_time_s"]
    assert alone > 1.5 * typical
    assert pooled == pytest.approx(typical, rel=0.1)
    assert len(Calibration.pooled(repeats).exchange[0]["samples"]) == 5 * 9


def test_prediction_interval_contains_the_point_and_widens_with_the_spread():
    rng = np.random.default_rng(1)
    repeats = [_noisy_calibration(rng) for _ in range(5)]
    point = predict(Calibration.pooled(repeats), **SHAPE)[0].summary()["total_time_s"]
    measured = [point * f for f in (0.95, 1.0, 1.02, 1.05, 0.98)]
    paired = _bootstrap(repeats, measured, SHAPE, draws=100)
    lo, hi = paired["predicted"]
    assert lo <= point <= hi and hi > lo
    m_lo, m_hi = paired["measured"]
    assert m_lo <= np.median(measured) <= m_hi and overlaps([lo, hi], [m_lo, m_hi])
    assert paired["threshold"][0] <= paired["threshold"][1]
    assert set(paired["parameters"]) >= {"link_latency_s", "link_bandwidth", "flop_rate"}
    # a given calibration: its rows' samples redrawn
    given = _bootstrap(repeats[0], measured, SHAPE, draws=100)
    one = predict(repeats[0], **SHAPE)[0].summary()["total_time_s"]
    assert given["predicted"][0] <= one * 1.02 and one * 0.98 <= given["predicted"][1]
    # rows without samples (saved before they existed): no spread, a zero-width interval
    bare = Calibration.from_json(json.loads(json.dumps(repeats[0].to_json())))
    for row in bare.compute + bare.exchange + bare.pingpong:
        row.pop("samples")
    flat = _bootstrap(bare, measured, SHAPE, draws=20)["predicted"]
    assert flat[0] == pytest.approx(flat[1])
    wide = [_noisy_calibration(rng, n=9) for _ in range(5)]
    for cal in wide:  # ten times the noise on the link
        for row in cal.exchange:
            row.update(timed(np.array(row["samples"]) * (1 + 1.0 * rng.random(9))))
    w_lo, w_hi = _bootstrap(wide, measured, SHAPE, draws=100)["predicted"]
    assert w_hi - w_lo > hi - lo


def test_parameter_intervals_bracket_the_calibrated_values():
    cal = _noisy_calibration(np.random.default_rng(2))
    ci = parameter_intervals([c.hardware() for c in bootstrap(cal, draws=50)])
    hw = cal.hardware()
    lo, hi = ci["link_bandwidth"]
    assert lo <= hw.link_bandwidth * 1.05 and hw.link_bandwidth * 0.95 <= hi
    assert cal.quality()["exchange"]["samples"] == 18


def test_regime_says_near_the_threshold_inside_the_margin():
    assert regime(256, [100, 200]) == "compute-bound"
    assert regime(256, [300, 900]) == "communication-bound"
    assert regime(256, [200, 300]) == "near the threshold"
    assert regime(256, [256, 256]) == "near the threshold"  # on the line: no side
    assert regime(256, [0.0, 0.0]) == "compute-bound"  # every block hides


# ---- progress -----------------------------------------------------------------------------


def test_progress_prints_plain_lines_off_a_terminal_and_nothing_when_disabled():
    out = io.StringIO()
    with Progress(3, "measure", stream=out) as bar:
        bar.advance("rank 0 started", 0)
        report(bar.channel, "repeat 1/2: link", 0)  # as a rank reports it
        report(bar.channel, "repeat 1/2: link done", 1)
        report(None, "ignored", 1)  # a rank without a channel: no-op
        report(bar.channel, "repeat 1/2: ring", 0)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("[measure 0/3") and "rank 0 started" in lines[0]
    assert "0/3" in lines[1] and "repeat 1/2: link" in lines[1]
    assert "1/3" in lines[2] and "repeat 1/2: ring" in lines[2] and len(lines) == 3
    quiet = io.StringIO()
    with Progress(3, "measure", enabled=False, stream=quiet) as bar:
        bar.advance("nothing")
        assert bar.channel is None
    assert quiet.getvalue() == ""


def test_measure_main_is_quiet_under_json_unless_asked(monkeypatch, capsys):
    import kernels.calibration.measure as m

    seen = []
    fake = {"steps": [], "overlap_threshold_ci95": [0, 0]}
    monkeypatch.setattr(m, "measure", lambda **kw: seen.append(kw["progress"]) or fake)
    args = ["--seq-len", "128", "--heads", "2", "--head-dim", "16"]
    m.measure_main([*args, "--json"])
    m.measure_main([*args, "--json", "--progress"])
    assert seen == [False, True]


def test_a_real_measurement_reports_progress_on_stderr(capsys):
    """Two gloo ranks, one repeat: the ranks' progress reaches stderr through the queue;
    the report carries the intervals and the probe quality."""
    report_ = measure(seq_len=128, heads=2, head_dim=16, repeats=1, progress=True, draws=20)
    err = capsys.readouterr().err
    assert "rank 0 of 2 started" in err and "rank 1 of 2 started" in err
    assert "repeat 2/2: link" in err and "repeat 2/2: ring" in err
    lo, hi = report_["predicted_ci95"]
    assert lo <= report_["predicted_time_s"] <= hi
    assert report_["regime"] in ("compute-bound", "communication-bound", "near the threshold")
    assert {"compute", "exchange", "overlap"} <= set(report_["probe_quality"])
    assert isinstance(report_["intervals_overlap"], bool)


# ---- the ring measured as the probes are ----------------------------------------------------


def _config(seq_len: int, heads: int = 2, head_dim: int = 32):
    from kernels.distributed.launch import RunConfig

    return RunConfig(seq_len, heads, None, head_dim, backward=False, repeats=3, warmup=1)


def test_short_rings_are_timed_after_every_probe_and_long_ones_once():
    from kernels.calibration.paired import paired_ring_config, paired_steps

    short, long = _config(512), _config(16384, heads=8, head_dim=64)
    steps = paired_steps(short, 2)
    probes = [s for s in steps if s != "ring"]
    assert steps == [name for p in probes for name in (p, "ring")] and len(probes) >= 4
    assert paired_ring_config(short, 2).repeats == 3 and paired_ring_config(short, 2).warmup == 1
    steps = paired_steps(long, 2)
    assert steps.count("ring") == 1 and steps[-1] == "ring"
    assert paired_ring_config(long, 2).repeats == 2


def test_a_repeats_ring_time_is_the_median_pass_of_the_slowest_rank():
    from kernels.calibration.paired import repeat_time

    # rank 0's third pass ran in a slow episode; rank 1's first: the median pass is unmoved
    rank0 = [{"forward_s": [1.0]}, {"forward_s": [1.1]}, {"forward_s": [3.0]}]
    rank1 = [{"forward_s": [2.5]}, {"forward_s": [1.2]}, {"forward_s": [0.9]}]
    assert repeat_time([rank0, rank1]) == pytest.approx(2.5)  # slowest per pass: 2.5, 1.2, 3.0
    rank0 = [{"forward_s": [1.0, 1.0]}, {"forward_s": [1.0, 5.0]}]
    rank1 = [{"forward_s": [1.1, 0.9]}, {"forward_s": [0.9, 1.0]}]
    assert repeat_time([rank0, rank1]) == pytest.approx(1.05)  # passes 1.1, 1.0, 1.0, 5.0


def _exchange_rows(rank, hosts):
    import kernels.calibration.probes as probes

    batches, post = [], probes._batch
    probes._batch = lambda ops: (batches.append([(kind, t.numel()) for kind, t, _ in ops]),
                                 post(ops))  # fmt: skip
    pair = probes.measure_link_p2p([1024, 4096], repeats=2)
    single = probes.measure_link_p2p([4096], repeats=2, parts=1)
    return pair, single, batches


def test_the_link_probe_sends_k_and_v_as_the_ring_does():
    """The exchange moves the size in two messages each way (a step's k and v), and its bytes
    are the whole size; one message when asked."""
    from kernels.distributed.launch import launch

    (pair, single, batches), _ = launch(_exchange_rows, 2, timeout_s=30)
    exchanges = [b for b in batches if len(b) > 1]  # the ping-pong posts one op at a time
    patterns = [b for i, b in enumerate(exchanges) if i == 0 or b != exchanges[i - 1]]
    assert patterns == [  # 1024 and 4096 bytes as two float32 messages each way, then one
        [("send", 128), ("send", 128), ("recv", 128), ("recv", 128)],
        [("send", 512), ("send", 512), ("recv", 512), ("recv", 512)],
        [("send", 1024), ("recv", 1024)],
    ]
    assert [r["bytes"] for r in pair["exchange"]] == [1024, 4096]
    assert single["exchange"][0]["bytes"] == 4096
    for row in pair["exchange"] + single["exchange"] + pair["pingpong"]:
        assert row["seconds"] > 0 and len(row["samples"]) == 4


def test_the_link_probe_reaches_a_message_whose_time_stands_out_of_the_noise():
    """The paired link probe measures a small message, this run's kv message (per host, not
    per two hosts) and one of at least ``LINK_FAR_BYTES``: through 1 KB and a 128 KB message
    alone, gloo's ~0.4 ms per exchange hid the slope and the fit went through the origin."""
    from kernels.calibration.paired import LINK_FAR_BYTES, _link_sizes
    from kernels.distributed.launch import RunConfig

    small = RunConfig(512, 2, None, 32, 1, "contiguous", False, "float32")
    assert _link_sizes(small, hosts=2) == [1024, 2 * 256 * 2 * 32 * 4, LINK_FAR_BYTES]
    four = _link_sizes(small, hosts=4)  # 128-token blocks: half the message of two hosts
    assert four[1] == 2 * 128 * 2 * 32 * 4
    big = RunConfig(16384, 4, None, 64, 1, "contiguous", False, "float32")
    message = 2 * 8192 * 4 * 64 * 4
    assert _link_sizes(big, hosts=2) == [1024, message, 4 * message]
