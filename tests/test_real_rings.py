"""Ring steps as the code runs them (issue 23): occupancy and the wave tail of a call, the
backward's own tile, the uneven-length masking step, the host's calls per step, the achieved
send/recv bandwidth, parameters known only as ranges and the intervals they give, and the
timer's O(P) step path."""

import json

import numpy as np
import pytest

from ringsim.cli import main
from ringsim.timer import RingConfig, simulate
from ringsim.timer.engine.interval import config_interval, corners, live_ranges
from ringsim.timer.engine.ring_steps import HOST_CALLS, StepModel, host_calls
from ringsim.timer.machine.families import FA2_BACKWARD, KERNELS, split_count
from ringsim.timer.machine.hardware import PRESETS
from ringsim.timer.machine.kernel_model import (
    attention_call_seconds,
    cta_efficiency,
    cta_lengths,
    cta_makespan,
    tile_work,
)
from ringsim.timer.machine.ranges import Range, check_assume
from ringsim.timer.studies.published import DATASET
from ringsim.timer.studies.validate import validate

H100, A100, H800 = PRESETS["h100-nvlink"], PRESETS["a100-nvlink"], PRESETS["h800-nvlink"]
CALL = dict(kv_heads=5, head_dim=128, dtype="bf16")


# -- occupancy and the wave tail ----------------------------------------------------------------
@pytest.mark.parametrize("ctas", [1, 100, 264, 265, 320, 2048])
def test_equal_ctas_on_half_speed_slots_are_whole_waves(ctas):
    """A lone CTA at half the SM's rate runs as fast as in a full SM: the classic wave count."""
    lengths = np.full(ctas, 10.0)
    waves = -(-ctas // 264)
    assert cta_efficiency(lengths, 132, 2, 0.5) == pytest.approx(ctas / (264 * waves))


def test_a_lone_cta_running_faster_shortens_the_tail_and_work_is_conserved():
    rng = np.random.default_rng(0)
    lengths = rng.uniform(1, 100, 500)
    spans = [cta_makespan(lengths, 16, 2, g) for g in (0.5, 0.75, 1.0)]
    assert spans[0] >= spans[1] >= spans[2]
    assert spans[2] >= lengths.sum() / 32 - 1e-9  # never faster than every slot busy
    assert spans[0] >= lengths.max() - 1e-9


def test_few_heads_leave_the_gpu_part_empty():
    """5 heads of an 8K causal call: 320 CTAs on 264 slots, the longest dispatched last."""
    five = attention_call_seconds(
        "fa2",
        H100,
        q_tokens=8192,
        k_tokens=8192,
        heads=5,
        pass_="forward",
        mask="causal-diagonal",
        **CALL,
    )
    many = attention_call_seconds(
        "fa2",
        H100,
        q_tokens=8192,
        k_tokens=8192,
        heads=40,
        pass_="forward",
        mask="causal-diagonal",
        **CALL,
    )
    assert five > 1.3 * many / 8  # 8x fewer heads, far more than 1/8 of the time


def test_lone_cta_speed_is_a_range_the_call_runs_at():
    kw = dict(q_tokens=8192, k_tokens=4096, heads=5, pass_="forward", mask="full", **CALL)
    low = attention_call_seconds("fa2", H100, **kw, lone_cta_speed="low")
    point = attention_call_seconds("fa2", H100, **kw)
    high = attention_call_seconds("fa2", H100, **kw, lone_cta_speed="high")
    assert low > point > high


def test_the_backward_runs_its_own_tile_one_cta_per_key_tile():
    assert FA2_BACKWARD.tile == (64, 128) and FA2_BACKWARD.loop == "queries"
    assert FA2_BACKWARD.ctas_per_sm == 1
    curve = KERNELS["fa2"].curve(H100, "backward")
    lengths = cta_lengths(8192, 4096, "full", FA2_BACKWARD, None, curve, pass_="backward")
    assert len(lengths) == 4096 // 128  # one per key tile
    assert lengths[0] == pytest.approx(8192 / 64 + curve.keys_half / 64)
    causal = cta_lengths(1024, 1024, "causal-diagonal", FA2_BACKWARD, None, curve)
    assert causal[0] > causal[-1]  # the first key tile is seen by every query tile


def test_uneven_lengths_mask_one_more_key_tile_per_query_tile():
    even = tile_work(8192, 8192, "causal-diagonal", (128, 64), None, uneven_mask=True)
    odd = tile_work(8191, 8191, "causal-diagonal", (128, 64), None, uneven_mask=True)
    plain = tile_work(8191, 8191, "causal-diagonal", (128, 64), None)
    assert odd.masked == plain.masked + 63  # every query tile with a full key tile
    assert odd.full + odd.masked == plain.full + plain.masked
    assert even.masked == tile_work(8192, 8192, "causal-diagonal", (128, 64), None).masked


def test_split_kv_only_when_the_ctas_do_not_fill_the_gpu():
    assert split_count(640, 132, 64) == 1
    assert split_count(32, 132, 8192) > 1
    assert split_count(1, 132, 1) == 1


# -- the host's calls ---------------------------------------------------------------------------
def test_host_calls_follow_the_code():
    full = (8192, 8192, "full", None, False)
    half = (4096, 8192, "zigzag-half", None, True)
    n = HOST_CALLS
    assert host_calls("forward", full, 8192, first=True, last=False) == n["transfer"] + 1 + 3
    assert host_calls("forward", half, 8192, first=False, last=True) == (
        n["final"] + n["call"] + n["views"] + n["merge"] + n["slice"]
    )
    assert host_calls("backward", None, 8192, first=False, last=False) == 7 + 5


def test_a_step_is_the_longer_of_the_gpu_and_the_host():
    cfg = RingConfig(
        hosts=4,
        seq_len=4 * 256,
        hardware=H100,
        heads=2,
        kv_heads=2,
        causal=True,
        layout="zigzag",
        implementation="fa2",
    )
    slow = cfg.replace(assume={"host_call_s": "high"})
    sched = cfg.schedule()
    fast_steps = StepModel(cfg, cfg.family).seconds(sched, 1)
    slow_steps = StepModel(slow, slow.family).seconds(sched, 1)
    model = StepModel(cfg, cfg.family)
    calls = [
        host_calls("forward", model.call(1, rel, 0.5), 256, first=False, last=False)
        for rel in (-1, 1)  # an earlier host's block; a later one's (sliced merge)
    ]
    # step 1: host 0 holds a later host's block, hosts 1-3 earlier ones'
    expected = np.array([calls[1]] + 3 * [calls[0]]) * 25e-6
    assert slow_steps == pytest.approx(expected)  # tiny blocks: host-bound
    assert np.all(fast_steps <= slow_steps)


# -- ranges and intervals -----------------------------------------------------------------------
def test_ranges_check_their_ends():
    r = Range(1.0, 2.0, 3.0, "low", "x")
    assert (r.at("fast"), r.at("slow")) == (3.0, 1.0)
    with pytest.raises(ValueError, match="low <= point <= high"):
        Range(3.0, 2.0, 1.0, "low")
    with pytest.raises(ValueError, match="range name"):
        check_assume({"bandwidth": "low"})
    with pytest.raises(ValueError, match="end of p2p_bandwidth"):
        check_assume({"p2p_bandwidth": "middle"})
    with pytest.raises(ValueError, match="assume"):
        RingConfig(hosts=2, seq_len=64, hardware=H100, assume={"nope": "low"})


def test_ideal_runs_have_no_ranges_and_real_ones_an_interval():
    cfg = RingConfig(
        hosts=8, seq_len=8 * 8192, hardware=H800, heads=5, kv_heads=5, causal=True, layout="zigzag"
    )
    assert live_ranges(cfg) == () and corners(()) == []
    real = cfg.replace(implementation="fa2")
    assert live_ranges(real) == ("p2p_bandwidth", "host_call_s", "lone_cta_speed")
    span = config_interval(lambda c: simulate(c).makespan, real)
    assert span.low < span.point < span.high
    full = config_interval(lambda c: simulate(c).makespan, real, monotone=False)
    assert (full.low, full.high) == pytest.approx((span.low, span.high))


def test_validate_judges_a_row_by_its_interval():
    rows = [r for r in DATASET if r.experiment == "zhuzilin-mha"]
    for r in validate(rows):
        low, high = r["interval"]
        assert low <= r["predicted"] <= high
        band_low, band_high = r["band"]
        assert r["in_band"] == (low <= band_high and high >= band_low)
        assert r["ranges"] == ["p2p_bandwidth", "host_call_s", "lone_cta_speed"]
    assert all(r.below is None for r in DATASET if r.experiment.startswith("striped"))


def test_simulate_interval_flag(capsys):
    main(
        [
            "simulate",
            "--hosts",
            "8",
            "--seq-len",
            "64K",
            "--causal",
            "--layout",
            "zigzag",
            "--heads",
            "5",
            "--hardware",
            "h800-nvlink",
            "--implementation",
            "fa2",
            "--interval",
            "--json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    low, high = out["total_time_interval_s"]
    assert low <= out["total_time_s"] <= high and low < high
    assert out["ranges"] == ["p2p_bandwidth", "host_call_s", "lone_cta_speed"]


# -- overlap threshold and decode under the family ---------------------------------------------
def test_overlap_threshold_and_decode_follow_the_family():
    base = dict(hosts=8, seq_len=8 * 8192, hardware=H100, heads=32, causal=True, layout="zigzag")
    ideal = simulate(RingConfig(**base)).summary()["min_block_for_overlap"]
    fa3 = simulate(RingConfig(**base, implementation="fa3")).summary()["min_block_for_overlap"]
    assert fa3 != ideal and fa3 > 1  # its own rate and transfers, not the peak's
    gqa = RingConfig(**{**base, "implementation": "fa2"}, kv_heads=8)
    assert simulate(gqa).summary()["min_block_for_overlap"] == 1.0  # the fp32 merge hides it
    dec = dict(hosts=4, seq_len=2**20, pass_="decode", hardware=H100, heads=32, kv_heads=8)
    t_ideal = simulate(RingConfig(**dec)).makespan
    t_fa2 = simulate(RingConfig(**dec, implementation="fa2")).makespan
    assert t_ideal < t_fa2 < 2 * t_ideal  # memory bound either way, plus the family's cost


# -- the O(P) step path --------------------------------------------------------------------------
@pytest.mark.parametrize("layout", ["contiguous", "zigzag", "striped"])
def test_by_relation_steps_equal_the_per_host_path(layout):
    cfg = RingConfig(
        hosts=6,
        seq_len=6 * 512,
        hardware=H100,
        heads=4,
        kv_heads=2,
        causal=True,
        layout=layout,
        implementation="fa2",
    )
    sched = cfg.schedule()
    assert sched.by_relation
    model = StepModel(cfg, cfg.family)
    for s in range(sched.steps):
        fast = model.seconds(sched, s)
        slow = np.array(
            [
                model._cell(sched.pass_, int(k), int(r), float(w), s == 0, s == sched.steps - 1)
                for k, r, w in zip(
                    sched.kind_at(s), sched.relation_at(s), sched.work_at(s), strict=True
                )
            ]
        )
        assert np.array_equal(fast, slow)
