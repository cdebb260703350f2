"""The event timer: both engines agree, closed forms hold, causal imbalance as derived."""

import math
from dataclasses import replace

import numpy as np
import pytest
from contract import DESIGN_KEYS
from hypothesis import given
from hypothesis import strategies as st

from ringsim.layouts import layout_names
from ringsim.schedule import build_schedule, visible_pairs
from ringsim.timer import RingConfig, simulate
from ringsim.timer.cost import (
    attention_flops,
    ffn_flops,
    grad_block_bytes,
    kv_block_bytes,
    overlap_threshold,
    projection_flops,
)
from ringsim.timer.engine.clock import HostClock
from ringsim.timer.machine.families import get_family
from ringsim.timer.machine.hardware import custom_hardware, get_hardware
from ringsim.values import parse_length

ARRAYS = ("compute_start", "compute_end", "send_start", "send_end", "recv_start", "recv_end")
SMALL = dict(heads=2, head_dim=16)  # tiny blocks: fast, and easy to make comm-bound


def config(hosts=4, block=64, flops=1e12, bandwidth=1e9, latency=0.0, **kw):
    hw = custom_hardware(flops, bandwidth, latency)
    return RingConfig(hosts=hosts, seq_len=hosts * block, hardware=hw, **SMALL, **kw)


def block_time(cfg, pass_="forward", work=1.0):
    c = cfg.block_tokens
    return attention_flops(c, c, cfg.heads, cfg.head_dim, pass_=pass_, work=work) / 1e12


def link_time(cfg, nbytes):
    return cfg.hardware.link_latency + nbytes / cfg.hardware.link_bandwidth


def kv_bytes(cfg):
    return kv_block_bytes(cfg.block_tokens, cfg.kv_heads, cfg.head_dim, cfg.dtype)


def g_bytes(cfg):
    return grad_block_bytes(cfg.block_tokens, cfg.kv_heads, cfg.head_dim, cfg.dtype)


# -- parsing and validation -------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, value", [("64K", 65536), ("16M", 16777216), ("1000", 1000), ("2g", 2**31)]
)
def test_parse_length(text, value):
    assert parse_length(text) == value


@pytest.mark.parametrize("text", ["", "1.5K", "-3", "0", "12Q", "K"])
def test_parse_length_refuses(text):
    with pytest.raises(ValueError, match="length"):
        parse_length(text)


@pytest.mark.parametrize(
    "kw, word",
    [
        (dict(hosts=0), "hosts"),
        (dict(seq_len=102), "seq_len"),
        (dict(layout="spiral"), "layout"),
        (dict(pass_="sideways"), "pass"),
        (dict(kv_heads=3), "kv_heads"),
        (dict(speed=(1.0, 2.0)), "speed"),
        (dict(speed=(1.0, 0.0, 1.0, 1.0)), "speed"),
        (dict(jitter=-0.1), "jitter"),
        (dict(jitter=float("nan")), "jitter"),
        (dict(jitter=0.1, seed=-1), "seed"),
        (dict(tile=0), "tile"),
    ],
)
def test_config_refuses_bad_input(kw, word):
    base = dict(hosts=4, seq_len=256, hardware=custom_hardware(1e12, 1e9), heads=4, head_dim=8)
    with pytest.raises(ValueError, match=word):
        RingConfig(**(base | kw))


def test_a_time_past_float64_is_refused_naming_the_field():
    """``hop_latency=(1e308,) * 4`` returned inf seconds (issue 34)."""
    cfg = config().replace(hop_latency=(1e308,) * 4)
    with pytest.raises(ValueError, match="hop_latency"):
        simulate(cfg)


def test_configs_are_hashable_and_equal_only_with_the_same_documents():
    """Documented hashable: ``hash`` raised TypeError (the hardware's flops dict); ``==``
    ignored ``segment_ids`` (issue 34)."""
    hw = get_hardware("h100-nvlink")
    docs = lambda *cuts: np.repeat(np.arange(len(cuts)), cuts)
    a = RingConfig(hosts=2, seq_len=8, hardware=hw, causal=True, segment_ids=docs(4, 4))
    b = RingConfig(hosts=2, seq_len=8, hardware=hw, causal=True, segment_ids=docs(2, 6))
    same = RingConfig(hosts=2, seq_len=8, hardware=hw, causal=True, segment_ids=docs(4, 4))
    assert a != b and a == same and hash(a) == hash(same) and len({a, b, same}) == 2
    assert a.replace(segment_ids=None) != a and a.replace(segment_ids=None) == a.replace(
        segment_ids=None
    )
    family = RingConfig(hosts=2, seq_len=8, hardware=hw, implementation=get_family("fa2"))
    assert hash(family) == hash(family.replace(heads=32))


def test_the_overlap_block_is_not_another_runs():
    """Its cache was keyed by the hardware's name alone: a run with slow hops, then the plain
    one, gave the slow hops' block (469438 tokens instead of 1552; issue 34)."""
    base = RingConfig(hosts=8, seq_len=65536, hardware=get_hardware("h100-nvlink"))
    fa2 = base.replace(implementation="fa2")
    slow = simulate(fa2.replace(hop_bandwidth=(1e9,) * 8)).summary()["min_block_for_overlap"]
    plain = simulate(fa2).summary()["min_block_for_overlap"]
    assert plain == 1552 and slow > 100 * plain
    jittered = simulate(fa2.replace(jitter=0.5, seed=3)).summary()["min_block_for_overlap"]
    assert jittered == plain  # a threshold is no random draw
    renamed = replace(fa2.hardware, memory_bytes=1e9, link_bandwidth=50e9)
    other = simulate(fa2.replace(hardware=renamed)).summary()["min_block_for_overlap"]
    assert other != plain


def test_unknown_engine():
    with pytest.raises(ValueError, match="engine"):
        simulate(config(), engine="quantum")


def test_schedule_fast_lookup_equals_the_relation_rule():
    for hosts in (1, 2, 5, 8):
        for layout in layout_names():
            sched = build_schedule(hosts, layout, True, seq_len=4 * hosts, tile=2)
            c = sched.block_tokens
            for s in range(hosts):
                pairs = [
                    visible_pairs(layout, hosts, c, h, j, True, 2)
                    for h, j in enumerate(sched.kv_owner(s))
                ]
                assert np.array_equal(sched.work_at(s), np.array(pairs) / c**2)


# -- the two engines agree ----------------------------------------------------------------------
@given(
    hosts=st.integers(1, 12),
    layout=st.sampled_from(layout_names()),
    causal=st.booleans(),
    overlap=st.booleans(),
    pass_=st.sampled_from(["forward", "backward", "train-step", "decode"]),
    block=st.sampled_from([2, 8, 32, 128]),
    bandwidth=st.floats(1e6, 1e12),
    latency=st.sampled_from([0.0, 1e-7, 1e-5]),
    jitter=st.sampled_from([0.0, 0.3]),
    slow=st.floats(0.2, 1.0),
    tile=st.sampled_from([None, 4]),
    seed=st.integers(0, 10),
)
def test_heap_and_vectorized_engines_agree_exactly(
    hosts, layout, causal, overlap, pass_, block, bandwidth, latency, jitter, slow, tile, seed
):
    speed = tuple(slow if h == hosts // 2 else 1.0 for h in range(hosts))
    cfg = config(
        hosts,
        block,
        1e12,
        bandwidth,
        latency,
        layout=layout,
        causal=causal,
        overlap=overlap,
        pass_=pass_,
        speed=speed,
        jitter=jitter,
        seed=seed,
        tile=tile,
    )
    fast, slow_ = simulate(cfg), simulate(cfg, engine="heap")
    for name in ARRAYS:
        np.testing.assert_array_equal(getattr(fast.timeline, name), getattr(slow_.timeline, name))
    for key in ("kv_send_start", "kv_send_end", "kv_recv_start", "kv_recv_end"):
        assert (key in fast.timeline.meta) == (key in slow_.timeline.meta)
        if key in fast.timeline.meta:
            np.testing.assert_array_equal(fast.timeline.meta[key], slow_.timeline.meta[key])
    meta = fast.timeline.meta
    assert ("kv_send_start" in meta) == (overlap and pass_ in ("backward", "train-step"))
    for side in ("start", "end"):  # host h receives k, v from h - 1: the same transfer
        if f"kv_send_{side}" in meta:
            sent = np.roll(meta[f"kv_send_{side}"], 1, axis=1)
            np.testing.assert_array_equal(meta[f"kv_recv_{side}"], sent)
    assert fast.flops_total == slow_.flops_total
    assert fast.summary()["total_time_s"] == slow_.timeline.makespan
    # one block at a time per host, and a block is used only after it has arrived
    tl = fast.timeline
    if pass_ != "decode":
        assert np.all(tl.compute_start[1:] >= tl.compute_end[:-1])
    if pass_ in ("forward", "backward"):
        arrival = tl.meta.get("kv_send_end", tl.send_end)
        later = tl.compute_start[1:hosts][:, 1:], arrival[: hosts - 1][:, :-1]
        assert np.all(later[0] >= later[1])
    done = np.isfinite(tl.compute_start)
    assert np.all(tl.compute_end[done] >= tl.compute_start[done])


@given(
    hosts=st.integers(1, 9),
    layout=st.sampled_from(layout_names()),
    pass_=st.sampled_from(["forward", "backward", "train-step"]),
    block=st.sampled_from([8, 32, 128]),
    tile=st.sampled_from([2, 4, 16]),
    tile_n=st.sampled_from([1, 4, 8, 64]),
    jitter=st.sampled_from([0.0, 0.3]),
    overlap=st.booleans(),
)
def test_engines_agree_on_rectangular_tiles(
    hosts, layout, pass_, block, tile, tile_n, jitter, overlap
):
    """The ideal timer on ``tile x tile_n`` tiles: both engines agree exactly, and a lone
    host's forward lasts the schedule's tiled work times a full block."""
    kw = dict(layout=layout, causal=True, pass_=pass_, tile=tile, tile_n=tile_n)
    cfg = config(hosts, block, 1e12, 1e9, 1e-6, overlap=overlap, jitter=jitter, **kw)
    fast, slow = simulate(cfg), simulate(cfg, engine="heap")
    for name in ARRAYS:
        np.testing.assert_array_equal(getattr(fast.timeline, name), getattr(slow.timeline, name))
    one = config(1, block, 1e12, 1e9, 0.0, layout=layout, causal=True, tile=tile, tile_n=tile_n)
    work = one.schedule().work_at(0)[0]
    assert simulate(one).makespan == pytest.approx(block_time(one, work=work), rel=1e-12)


# -- closed forms (uniform ring, dense attention) ---------------------------------------------
@pytest.mark.parametrize("hosts", [1, 2, 5, 8])
@pytest.mark.parametrize("latency", [0.0, 3e-6])
def test_forward_closed_forms(hosts, latency):
    compute_bound = config(hosts, 256, bandwidth=1e12, latency=latency)
    t_c, t_l = block_time(compute_bound), link_time(compute_bound, kv_bytes(compute_bound))
    assert t_c >= t_l
    assert simulate(compute_bound).makespan == pytest.approx(hosts * t_c, rel=1e-12)

    comm_bound = config(hosts, 256, bandwidth=1e8, latency=latency)
    t_c, t_l = block_time(comm_bound), link_time(comm_bound, kv_bytes(comm_bound))
    assert t_l > t_c
    expect = t_c + (hosts - 1) * t_l
    assert simulate(comm_bound).makespan == pytest.approx(expect, rel=1e-12)

    no_overlap = config(hosts, 256, bandwidth=1e10, latency=latency, overlap=False)
    t_c, t_l = block_time(no_overlap), link_time(no_overlap, kv_bytes(no_overlap))
    expect = hosts * t_c + (hosts - 1) * t_l
    assert simulate(no_overlap).makespan == pytest.approx(expect, rel=1e-12)


@pytest.mark.parametrize("hosts", [2, 3, 8])
def test_backward_closed_forms(hosts):
    cfg = config(hosts, 256, bandwidth=1e12, latency=1e-6, pass_="backward")
    t_c = block_time(cfg, "backward")
    t_kv, t_g = link_time(cfg, kv_bytes(cfg)), link_time(cfg, g_bytes(cfg))
    assert t_kv + t_g <= t_c
    # dk, dv of the last step must still travel home: one hop that never hides
    assert simulate(cfg).makespan == pytest.approx(hosts * t_c + t_g, rel=1e-12)

    cfg = config(hosts, 256, bandwidth=1e10, latency=1e-6, pass_="backward", overlap=False)
    t_c = block_time(cfg, "backward")
    t_all = link_time(cfg, kv_bytes(cfg) + g_bytes(cfg))
    expect = hosts * t_c + (hosts - 1) * t_all + link_time(cfg, g_bytes(cfg))
    assert simulate(cfg).makespan == pytest.approx(expect, rel=1e-12)


def test_train_step_is_the_sum_of_its_phases_when_compute_bound():
    cfg = config(4, 256, bandwidth=1e13, pass_="train-step")
    t = cfg.block_tokens
    dims = (cfg.d_model, cfg.heads, cfg.kv_heads, cfg.head_dim)
    qkv_f, out_f = projection_flops(t, *dims)
    qkv_b, out_b = projection_flops(t, *dims, pass_="backward")
    local = (qkv_f + out_f + qkv_b + out_b + ffn_flops(t, cfg.d_model, cfg.ffn) * 3) / 1e12
    ring = 4 * block_time(cfg) + 4 * block_time(cfg, "backward")
    expect = local + ring + link_time(cfg, g_bytes(cfg))
    result = simulate(cfg)
    assert result.makespan == pytest.approx(expect, rel=1e-12)
    assert result.flops_total == pytest.approx(4 * (local + ring) * 1e12, rel=1e-12)
    assert result.timeline.step_labels[0] == "qkv-proj" and len(result.timeline.step_labels) == 12


# -- the threshold found by the timer equals the closed form --------------------------------
def exposed(hosts, block, hw, pass_):
    cfg = RingConfig(hosts=hosts, seq_len=hosts * block, hardware=hw, pass_=pass_, **SMALL)
    result = simulate(cfg)
    hidden = hosts * (hw.block_overhead_s + block_time_hw(cfg, hw, pass_))
    if pass_ == "backward":  # the homecoming hop is exposed at any block size
        hidden += hw.link_latency + g_bytes(cfg) / hw.link_bandwidth
    return result.makespan - hidden


def block_time_hw(cfg, hw, pass_):
    c = cfg.block_tokens
    return attention_flops(c, c, cfg.heads, cfg.head_dim, pass_=pass_) / hw.flops_for("bf16")


def bisect_threshold(hw, pass_, hosts=3):
    lo, hi = 1, 1
    while exposed(hosts, hi, hw, pass_) > 1e-15:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if exposed(hosts, mid, hw, pass_) > 1e-15 else (lo, mid)
    return hi


@pytest.mark.parametrize("pass_", ["forward", "backward"])
@pytest.mark.parametrize(
    "flops, bandwidth, latency",
    [(1e12, 2e9, 0.0), (2e12, 2e9, 0.0), (1e12, 4e9, 0.0), (1e12, 2e9, 2e-7)],
)
def test_timer_finds_the_closed_form_threshold(pass_, flops, bandwidth, latency):
    hw = custom_hardware(flops, bandwidth, latency)
    closed = overlap_threshold(hw, heads=2, kv_heads=2, head_dim=16, dtype="bf16", pass_=pass_)
    found = bisect_threshold(hw, pass_)
    assert found - 1 < closed <= found + 1e-9


def test_timer_thresholds_scale_with_flops_and_inverse_bandwidth():
    base = bisect_threshold(custom_hardware(1e12, 4e9), "forward")
    assert abs(bisect_threshold(custom_hardware(2e12, 4e9), "forward") - 2 * base) <= 2
    assert abs(bisect_threshold(custom_hardware(1e12, 8e9), "forward") - base / 2) <= 1


# -- causal load balance ------------------------------------------------------------------------
@pytest.mark.parametrize("hosts, block", [(2, 16), (5, 32), (8, 64), (16, 128)])
def test_causal_idle_fractions_match_their_closed_forms(hosts, block):
    runs = {
        layout: simulate(config(hosts, block, bandwidth=1e15, layout=layout, causal=True))
        for layout in layout_names()
    }
    t, w = block_time(runs["zigzag"].config), (block + 1) / (2 * block)  # w: the diagonal block
    # contiguous: the last host works every step (P - 1 full blocks + the diagonal), the
    # others wait; sum of work P (P - 1) / 2 + P w. Tends to (P - 1) / (2P - 1) for big blocks.
    contiguous = runs["contiguous"]
    assert contiguous.makespan == pytest.approx((hosts - 1 + w) * t, rel=1e-12)
    idle = 1 - (hosts * (hosts - 1) / 2 + hosts * w) / (hosts * (hosts - 1 + w))
    assert contiguous.idle_fraction == pytest.approx(idle, rel=1e-9, abs=1e-12)
    assert abs(idle - (hosts - 1) / (2 * hosts - 1)) < 1.0 / block
    # striped: the last host sees w every step, the others (c - 1) / 2c at some steps
    assert runs["striped"].makespan == pytest.approx(hosts * w * t, rel=1e-12)
    striped_idle = (hosts - 1) / (hosts * (block + 1))
    assert runs["striped"].idle_fraction == pytest.approx(striped_idle, rel=1e-9, abs=1e-12)
    # zigzag: every host does exactly w, then 1/2 per step: no idle at all
    assert runs["zigzag"].makespan == pytest.approx(((hosts - 1) / 2 + w) * t, rel=1e-12)
    assert runs["zigzag"].idle_fraction == pytest.approx(0.0, abs=1e-12)
    speedup = contiguous.makespan / runs["zigzag"].makespan
    assert speedup == pytest.approx((hosts - 1 + w) / ((hosts - 1) / 2 + w), rel=1e-12)


def test_tiles_make_striped_pay_for_partial_tiles():
    exact = simulate(config(4, 64, bandwidth=1e15, layout="striped", causal=True))
    tiled = simulate(config(4, 64, bandwidth=1e15, layout="striped", causal=True, tile=16))
    zig = simulate(config(4, 64, bandwidth=1e15, layout="zigzag", causal=True, tile=16))
    t = block_time(exact.config)
    # 4 x 4 tiles; under the striped causal mask every diagonal tile is partial, so each block
    # costs 10 of 16 tiles (0.625) where an exact kernel pays 65/128 (about 0.508)
    assert exact.makespan == pytest.approx(4 * 65 / 128 * t, rel=1e-12)
    assert tiled.makespan == pytest.approx(4 * 10 / 16 * t, rel=1e-12)
    # zigzag blocks are tile-aligned halves: 1/2 exactly, only the diagonal pays 10/16
    assert zig.makespan == pytest.approx((10 / 16 + 3 / 2) * t, rel=1e-12)


# -- stragglers, jitter -------------------------------------------------------------------------
def test_a_straggler_sets_the_pace_of_the_whole_ring():
    speed = (1.0, 1.0, 0.5, 1.0)
    cfg = config(4, 128, bandwidth=1e15, speed=speed)
    assert simulate(cfg).makespan == pytest.approx(4 * block_time(cfg) / 0.5, rel=1e-12)


def test_host_clock_holds_the_speed_and_jitter_rules():
    cfg = config(4, 64, flops=1e12, bandwidth=1e9, latency=1e-6, speed=(1, 0.5, 1, 2), jitter=0.3)
    clock, again = HostClock(cfg), HostClock(cfg)
    ideal = 1e9 / (1e12 * np.array([1, 0.5, 1, 2]))
    compute = clock.compute(1e9)
    assert np.all((ideal <= compute) & (compute < 1.3 * ideal)) and np.any(compute > ideal)
    link = 3 * 1e-6 + 5e6 / 1e9
    transfer = clock.transfer(5e6, messages=3)
    assert np.all((link <= transfer) & (transfer < 1.3 * link)) and np.any(transfer > link)
    # the same seed and calls give the same floats; an empty transfer takes no time, no draw
    np.testing.assert_array_equal(again.compute(1e9), compute)
    assert np.all(again.transfer(0.0, messages=0) == 0)
    np.testing.assert_array_equal(again.transfer(5e6, messages=3), transfer)
    quiet = HostClock(config(4, 64, flops=1e12, speed=(1, 0.5, 1, 2)))
    np.testing.assert_allclose(quiet.compute(1e9), ideal, rtol=1e-15)


def test_config_schedule_is_the_ring_the_timer_runs():
    cfg = config(4, 64, layout="zigzag", causal=True, pass_="train-step", tile=8)
    forward = cfg.schedule("forward")
    reference = build_schedule(4, "zigzag", True, "forward", seq_len=256, tile=8)
    for s in range(4):
        np.testing.assert_array_equal(forward.work_at(s), reference.work_at(s))
        np.testing.assert_array_equal(forward.kv_owner(s), reference.kv_owner(s))
    assert cfg.schedule("backward", layout="striped").pass_ == "backward"
    assert simulate(cfg).schedule.pass_ == "backward"


@pytest.mark.parametrize("layout", ["zigzag", "striped"])
def test_balanced_causal_layouts_need_twice_the_threshold(layout):
    hw = custom_hardware(1e12, 1e9)  # no latency: c* = F / B = 1000 tokens
    c_star = overlap_threshold(hw, heads=2, kv_heads=2, head_dim=16, dtype="bf16")

    def exposed(block: int) -> float:
        summary = simulate(config(4, block, layout=layout, causal=True)).summary()
        return summary["exposed_comm_s"] / summary["total_time_s"]

    assert exposed(int(1.8 * c_star) // 8 * 8) > 0.02  # half-block steps cannot hide c*
    assert exposed(int(2.2 * c_star) // 8 * 8) == pytest.approx(0.0, abs=1e-12)


def test_jitter_is_seeded_and_only_slows_down():
    plain = simulate(config(6, 64, bandwidth=1e9)).makespan
    a = simulate(config(6, 64, bandwidth=1e9, jitter=0.2, seed=1)).makespan
    b = simulate(config(6, 64, bandwidth=1e9, jitter=0.2, seed=1)).makespan
    c = simulate(config(6, 64, bandwidth=1e9, jitter=0.2, seed=2)).makespan
    assert a == b and a != c
    assert plain < a <= 1.2 * plain + 1e-15


# -- decode ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("hosts", [1, 2, 4, 8])
def test_decode_is_a_shard_scan_plus_a_merge_tree(hosts):
    hw = get_hardware("h200-nvlink")
    cfg = RingConfig(hosts=hosts, seq_len=hosts * 4096, hardware=hw, pass_="decode")
    result = simulate(cfg)
    shard = kv_block_bytes(4096, 32, 128, "bf16") / hw.memory_bandwidth
    rounds = math.ceil(math.log2(hosts)) if hosts > 1 else 0
    link = hw.link_latency + 4 * 32 * 130 / hw.link_bandwidth
    merge = 5 * 32 * 130 / hw.flops_for("bf16")
    assert result.makespan == pytest.approx(shard + rounds * (link + merge), rel=1e-12)
    summary = result.summary()
    single = kv_block_bytes(hosts * 4096, 32, 128, "bf16") / hw.memory_bandwidth
    assert summary["single_device_time_s"] == pytest.approx(single, rel=1e-12)
    assert summary["min_block_for_overlap"] is None


def test_decode_jitter_slows_the_merge_transfers_too():
    hw = custom_hardware(1e12, 1e9, latency=1e-6)
    cfg = RingConfig(8, 8 * 64, hw, heads=4, head_dim=16, pass_="decode", jitter=0.5, seed=3)
    tl = simulate(cfg).timeline
    link = 1e-6 + 4 * 4 * 18 / 1e9  # one fp32 Partial: acc, row_max, row_sum per head
    spans = (tl.send_end - tl.send_start)[np.isfinite(tl.send_start)]
    assert spans.size == 7  # 4 + 2 + 1 merges
    assert np.all((spans >= link) & (spans < 1.5 * link)) and np.any(spans > link * 1.01)
    np.testing.assert_array_equal(tl.recv_end[1, 0::2], tl.send_end[1, 1::2])


def test_decode_ring_helps_memory_more_than_latency():
    hw = get_hardware("a100-ib")
    short = RingConfig(hosts=8, seq_len=8 * 64, hardware=hw, pass_="decode")
    assert simulate(short).summary()["speedup_vs_single_device"] < 1  # 3 hops > a 512-token scan
    long = RingConfig(hosts=8, seq_len=2**20, hardware=hw, pass_="decode")
    summary = simulate(long).summary()
    assert 1 < summary["speedup_vs_single_device"] < 8
    assert not summary["cache_fits_one_device"] or summary["cache_bytes_total"] > 8 * 2**30


# -- the summary --------------------------------------------------------------------------------
def test_summary_keys_and_consistency():
    cfg = config(6, 64, bandwidth=2e9, latency=1e-6, layout="zigzag", causal=True, pass_="backward")
    result = simulate(cfg)
    s = result.summary()
    assert DESIGN_KEYS <= set(s)
    tl = result.timeline
    assert s["total_time_s"] == tl.makespan
    assert s["compute_time_s"] == pytest.approx(tl.busy("compute").max(), rel=1e-12)
    assert s["exposed_comm_s"] == pytest.approx(s["total_time_s"] - s["compute_time_s"])
    assert s["idle_fraction"] == pytest.approx(tl.idle_fraction, rel=1e-12, abs=1e-15)
    both = tl.busy("send") + np.nansum(tl.meta["kv_send_end"] - tl.meta["kv_send_start"], axis=0)
    assert s["comm_time_s"] == pytest.approx(both.max(), rel=1e-12)
    per_step = link_time(cfg, kv_bytes(cfg)) + link_time(cfg, g_bytes(cfg))
    assert s["comm_time_s"] == pytest.approx(5 * per_step + link_time(cfg, g_bytes(cfg)))
    flops = sum(
        attention_flops(64, 64, 2, 16, pass_="backward", work=w)
        for w in result.schedule.work.ravel()
    )
    assert s["flops_total"] == pytest.approx(flops, rel=1e-12)
    assert np.array_equal(tl.recv_end[:, 1:], tl.send_end[:, :-1], equal_nan=True)


def test_memory_per_host_halves_when_hosts_double():
    hw = get_hardware("a100-nvlink")
    one = RingConfig(hosts=4, seq_len=2**16, hardware=hw)
    two = RingConfig(hosts=8, seq_len=2**16, hardware=hw)
    m1 = simulate(one).summary()["memory_per_host_bytes"]
    m2 = simulate(two).summary()["memory_per_host_bytes"]
    assert m2 == pytest.approx(m1 / 2, rel=1e-12)


def test_a_thousand_hosts_is_quick():
    cfg = RingConfig(
        hosts=1024,
        seq_len=2**22,
        hardware=get_hardware("a100-nvlink"),
        layout="zigzag",
        causal=True,
    )
    result = simulate(cfg)
    assert result.summary()["events"] == 1024 * 1024 + 1024 * 1023
    assert result.idle_fraction == pytest.approx(0.0, abs=1e-12)


# -- kernel terms of a calibrated profile: pass and block overheads, masked and lone speeds -----
def kernel_config(
    hosts=4,
    block=64,
    *,
    pass_overhead=0.0,
    overhead=0.0,
    masked=1.0,
    solo=1.0,
    overlap_eff=1.0,
    bandwidth=1e15,
    latency=0.0,
    **kw,
):
    hw = replace(
        custom_hardware(1e12, bandwidth, latency),
        pass_overhead_s=pass_overhead,
        block_overhead_s=overhead,
        masked_speed=masked,
        solo_speed=solo,
        overlap_efficiency=overlap_eff,
    )
    return RingConfig(hosts=hosts, seq_len=hosts * block, hardware=hw, **SMALL, **kw)


@given(
    hosts=st.integers(1, 9),
    layout=st.sampled_from(layout_names()),
    causal=st.booleans(),
    overlap=st.booleans(),
    pass_=st.sampled_from(["forward", "backward", "train-step"]),
    bandwidth=st.floats(1e6, 1e12),
    pass_overhead=st.sampled_from([0.0, 2e-6]),
    overhead=st.sampled_from([0.0, 1e-6]),
    masked=st.sampled_from([0.5, 1.0, 1.7]),
    solo=st.sampled_from([1.0, 1.4]),
    overlap_eff=st.sampled_from([1.0, 0.3, 0.0, -0.6]),
    jitter=st.sampled_from([0.0, 0.3]),
)
def test_engines_agree_with_the_kernel_terms(
    hosts,
    layout,
    causal,
    overlap,
    pass_,
    bandwidth,
    pass_overhead,
    overhead,
    masked,
    solo,
    overlap_eff,
    jitter,
):
    speed = tuple(0.5 if h == 0 else 1.0 for h in range(hosts))
    cfg = kernel_config(
        hosts,
        32,
        pass_overhead=pass_overhead,
        overhead=overhead,
        masked=masked,
        solo=solo,
        overlap_eff=overlap_eff,
        bandwidth=bandwidth,
        layout=layout,
        causal=causal,
        overlap=overlap,
        pass_=pass_,
        speed=speed,
        jitter=jitter,
        tile=8,
    )
    fast, slow = simulate(cfg), simulate(cfg, engine="heap")
    for name in ARRAYS:
        np.testing.assert_array_equal(getattr(fast.timeline, name), getattr(slow.timeline, name))


def test_neutral_kernel_terms_change_nothing():
    for kw in (dict(layout="zigzag", causal=True, tile=16), dict(pass_="backward")):
        plain = simulate(config(4, 64, bandwidth=1e9, **kw))
        neutral = simulate(kernel_config(4, 64, bandwidth=1e9, **kw))
        for name in ARRAYS:
            np.testing.assert_array_equal(
                getattr(plain.timeline, name), getattr(neutral.timeline, name)
            )


@pytest.mark.parametrize("hosts", [2, 4])
def test_kernel_terms_closed_forms(hosts):
    setup, o, m = 3e-5, 2e-5, 0.8
    full = kernel_config(hosts, 64, pass_overhead=setup, overhead=o, masked=m)
    t = block_time(full)
    # unmasked, compute bound: the pass setup once, every block pays the overhead
    assert simulate(full).makespan == pytest.approx(setup + hosts * (o + t), rel=1e-12)
    # zigzag with tile-aligned halves: every block is masked (the diagonal 10/16 of its tiles)
    zig = kernel_config(
        hosts, 64, pass_overhead=setup, overhead=o, masked=m, layout="zigzag", causal=True, tile=16
    )
    if hosts == 4:
        expect = setup + hosts * o + (10 / 16 + 3 / 2) * t / m
        assert simulate(zig).makespan == pytest.approx(expect, rel=1e-12)
    # contiguous causal on 2 hosts: host 1 computes the last block alone (host 0 skips it)
    if hosts == 2:
        solo = 1.5
        cont = kernel_config(2, 64, overhead=o, masked=m, solo=solo, causal=True, tile=16)
        expect = o + 10 / 16 * t / m + (o + t) / solo
        assert simulate(cont).makespan == pytest.approx(expect, rel=1e-12)
        # a straggler's overhead is slowed like its FLOPs
        slow = kernel_config(2, 64, overhead=o, speed=(1.0, 0.5))
        assert simulate(slow).makespan == pytest.approx(2 * (o + t) / 0.5, rel=1e-12)
    # without overlap: every step's block and transfer add up, the overhead included
    no = kernel_config(hosts, 64, overhead=o, bandwidth=1e9, latency=1e-6, overlap=False)
    t_l = link_time(no, kv_bytes(no))
    assert simulate(no).makespan == pytest.approx(hosts * (o + t) + (hosts - 1) * t_l, rel=1e-12)


def test_solo_speed_grows_with_the_idle_hosts():
    """Contiguous causal: at step s, s of the P hosts skip; a computing host's share is
    1 + (solo - 1) s / (P - 1), so the last step (one host busy) runs at the full solo speed."""
    cfg = kernel_config(4, 64, solo=2.0, causal=True, tile=16)
    clock = HostClock(cfg)
    sched = cfg.schedule()
    t_full = np.full(4, block_time(cfg))
    for s in range(1, 4):
        busy = sched.kind_at(s) != 0
        share = 1 + (2.0 - 1) * s / 3
        times = clock.block(t_full, sched.work_at(s), sched.kind_at(s))
        np.testing.assert_allclose(times[busy], t_full[busy] / share, rtol=1e-12)
        assert np.all(times[~busy] == 0)


def test_block_overhead_offsets_latency_in_the_threshold():
    kw = dict(heads=2, kv_heads=2, head_dim=16, dtype="bf16")
    base = custom_hardware(1e12, 2e9, 2e-7)
    with_overhead = replace(base, block_overhead_s=1e-7)
    less_latency = custom_hardware(1e12, 2e9, 1e-7)
    assert overlap_threshold(with_overhead, **kw) == pytest.approx(
        overlap_threshold(less_latency, **kw), rel=1e-12
    )
    found = bisect_threshold(with_overhead, "forward")
    assert found - 1 < overlap_threshold(with_overhead, **kw) <= found + 1e-9
    # an overhead beyond latency plus the whole transfer: every block hides
    assert overlap_threshold(replace(base, block_overhead_s=1.0), **kw) == 0.0


# -- overlap efficiency: compute and the transfer beside it slow each other --------------------
@pytest.mark.parametrize("bandwidth", [1e7, 1e9])  # transfer longer, then shorter, than compute
@pytest.mark.parametrize("f", [1.0, 0.5, 0.0, -0.5])
def test_overlap_efficiency_closed_forms(bandwidth, f):
    """Forward on 2 hosts, no latency: step 0 runs the compute ``t`` beside the transfer ``l``,
    step 1 only computes. Step 0 costs ``max(t, l) + (1 - f) min(t, l)`` (f = 1: max, f = 0:
    the sum, f < 0: more than the sum), step 1 ``t``."""
    cfg = kernel_config(2, 64, overlap_eff=f, bandwidth=bandwidth)
    t, t_l = block_time(cfg), link_time(cfg, kv_bytes(cfg))
    expect = max(t, t_l) + (1 - f) * min(t, t_l) + t
    assert simulate(cfg).makespan == pytest.approx(expect, rel=1e-12)
    # without overlap the term is not read: the blocking exchange is already serial
    off = simulate(kernel_config(2, 64, overlap_eff=f, bandwidth=bandwidth, overlap=False))
    assert off.makespan == pytest.approx(2 * t + t_l, rel=1e-12)


def test_overlap_efficiency_spares_steps_without_a_transfer_or_compute():
    """Contiguous causal, 2 hosts: host 0 skips step 1 (no compute, nothing stretched), and the
    last step sends nothing; with f = 1 the timeline is bit-identical to the neutral one."""
    kw = dict(causal=True, tile=16, bandwidth=1e9)
    neutral = simulate(kernel_config(2, 64, **kw))
    same = simulate(kernel_config(2, 64, overlap_eff=1.0, **kw))
    for name in ARRAYS:
        np.testing.assert_array_equal(getattr(neutral.timeline, name), getattr(same.timeline, name))
    tl = simulate(kernel_config(2, 64, overlap_eff=0.0, **kw)).timeline
    cfg = kernel_config(2, 64, **kw)
    t, t_l = block_time(cfg, work=10 / 16), link_time(cfg, kv_bytes(cfg))
    assert tl.compute_end[0, 0] - tl.compute_start[0, 0] == pytest.approx(t + min(t, t_l))
    assert tl.compute_end[1, 0] == tl.compute_start[1, 0]  # the skipped block stays empty
    assert tl.compute_end[1, 1] - tl.compute_start[1, 1] == pytest.approx(block_time(cfg))


@given(
    implementation=st.sampled_from(["fa2", "fa3", "cudnn", "triton"]),
    hosts=st.integers(1, 9),
    layout=st.sampled_from(layout_names()),
    causal=st.booleans(),
    overlap=st.booleans(),
    pass_=st.sampled_from(["forward", "backward", "train-step"]),
    block=st.sampled_from([8, 64, 256]),
    tile=st.sampled_from([None, 16]),
    tile_n=st.sampled_from([None, 32]),
    jitter=st.sampled_from([0.0, 0.3]),
    recompute=st.booleans(),
    attention_flops=st.sampled_from([None, 1e14]),
)
def test_engines_agree_with_every_kernel_model_term(
    implementation,
    hosts,
    layout,
    causal,
    overlap,
    pass_,
    block,
    tile,
    tile_n,
    jitter,
    recompute,
    attention_flops,
):
    """The kernel family's calls, merges, NCCL-like links and SM contention are durations read
    through the one clock: the heap oracle and the vectorised engine still agree exactly."""
    hw = get_hardware("h100-nvlink")
    cfg = RingConfig(
        hosts=hosts,
        seq_len=hosts * block,
        hardware=hw,
        heads=4,
        kv_heads=2,
        head_dim=64,
        layout=layout,
        causal=causal,
        overlap=overlap,
        pass_=pass_,
        jitter=jitter,
        implementation=implementation,
        tile=tile,
        tile_n=tile_n,
        recompute=recompute,
        attention_flops=attention_flops,
        speed=tuple(0.5 if h == 1 else 1.0 for h in range(hosts)),
    )
    fast, slow = simulate(cfg), simulate(cfg, engine="heap")
    for name in ARRAYS:
        np.testing.assert_array_equal(getattr(fast.timeline, name), getattr(slow.timeline, name))
