"""The sliding window, timed: the windowed ring runs its live steps only, its blocks jump
straight to the next host that needs them, and a kernel visits only the tiles the window
reaches.

Grouped by what they prove:

* the engines: the vectorised engine equals the heap oracle under any window, layout, pass,
  overlap, kernel family and cluster; without a window (or with one as long as the sequence)
  nothing changed;
* the ideal ring in closed form: each host's compute is its live pairs times the cost of a
  pair, a contiguous causal window's makespan is its two steps' (the block's transfer hidden
  or not), and the ring sends one message per jump, none after its last live step;
* the jumps: a jump is one message on the slowest hop it spans;
* the kernel model: a window call visits flash-attn's ``n_block_min..n_block_max`` tiles,
  counted against tiles enumerated by hand; FA2's forward masks each, FA3 only the edges; a
  ring's windowed calls cover exactly the visible pairs;
* every strategy runs under a window, forward and backward, and computes fewer FLOPs.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringsim import build_schedule, get_hardware, get_layout
from ringsim.layouts import KernelCall
from ringsim.masks import visible_mask
from ringsim.timer import RingConfig, simulate
from ringsim.timer.cost import attention_flops
from ringsim.timer.engine.clock import HostClock
from ringsim.timer.engine.config import Run
from ringsim.timer.machine.hardware import custom_hardware
from ringsim.timer.machine.kernel_model import _band_tiles, call_seconds, tile_work
from ringsim.timer.machine.topology import get_cluster
from ringsim.timer.strategies import STRATEGIES, simulate_strategy

H100 = get_hardware("h100-nvlink")
SLOW_LINK = custom_hardware(100e12, 20e9, latency=1e-5)


def config(**kw) -> RingConfig:
    base = dict(hosts=8, seq_len=8 * 1024, hardware=H100, heads=8, kv_heads=2, head_dim=64)
    return RingConfig(**(base | kw))


def same_timelines(a, b) -> None:
    ta, tb = a.timeline, b.timeline
    for name in ("compute_start", "compute_end", "send_start", "send_end", "recv_start"):
        np.testing.assert_array_equal(getattr(ta, name), getattr(tb, name), err_msg=name)
    assert a.makespan == b.makespan


# -- the engines ----------------------------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(
    layout=st.sampled_from(["contiguous", "striped", "zigzag"]),
    hosts=st.integers(1, 9),
    window=st.integers(1, 40),
    causal=st.booleans(),
    pass_=st.sampled_from(["forward", "backward", "train-step"]),
    overlap=st.booleans(),
    family=st.sampled_from(["ideal", "fa2", "fa3"]),
    jitter=st.sampled_from([0.0, 0.3]),
)
def test_the_engines_agree_under_a_window(
    layout, hosts, window, causal, pass_, overlap, family, jitter
) -> None:
    c = 2 * 16
    cfg = config(
        hosts=hosts,
        seq_len=hosts * c,
        layout=layout,
        causal=causal,
        pass_=pass_,
        overlap=overlap,
        implementation=family,
        sliding_window=window,
        jitter=jitter,
        seed=5,
    )
    same_timelines(
        simulate(cfg, engine="vectorized", keep_timeline=True),
        simulate(cfg, engine="heap", keep_timeline=True),
    )


@pytest.mark.parametrize("layout", ["contiguous", "zigzag"])
@pytest.mark.parametrize("pass_", ["forward", "backward"])
def test_the_engines_agree_on_a_cluster_where_jumps_cross_nodes(layout, pass_) -> None:
    """16 ranks on two nodes (8 each): a zigzag jump from step 1 to step 15 crosses the NIC."""
    cluster = get_cluster("dgx-h100")
    cfg = config(hosts=16, seq_len=16 * 2048, layout=layout, causal=True, pass_=pass_)
    cfg = cfg.replace(sliding_window=1024, hardware=cluster.hardware)
    runs = [
        simulate_strategy(cfg, "ring", cluster=cluster, engine=e) for e in ("vectorized", "heap")
    ]
    same_timelines(*runs)


def test_without_a_window_nothing_changed() -> None:
    """``sliding_window=None`` and a window of the whole sequence are the same run, the very
    floats of the full ring."""
    for layout in ("contiguous", "zigzag"):
        plain = config(layout=layout, causal=True, pass_="train-step")
        whole = plain.replace(sliding_window=plain.run.seq_len)
        assert whole.run.sliding_window is None and whole == plain
        assert Run(8, 8192, sliding_window=8191).sliding_window == 8191


# -- the ideal ring in closed form ----------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(
    layout=st.sampled_from(["contiguous", "striped", "zigzag"]),
    hosts=st.integers(1, 8),
    window=st.integers(1, 300),
    causal=st.booleans(),
    pass_=st.sampled_from(["forward", "backward"]),
)
def test_each_hosts_compute_is_its_live_pairs_times_a_pairs_cost(
    layout, hosts, window, causal, pass_
) -> None:
    """Under ``ideal`` a host computes for exactly its visible pairs (every block, every step
    it runs) times one pair's FLOPs over the rate: the skipped steps cost nothing."""
    c = 32
    cfg = config(hosts=hosts, seq_len=hosts * c, layout=layout, causal=causal, pass_=pass_).replace(
        sliding_window=window
    )
    busy = simulate(cfg).compute_busy()
    pos = get_layout(layout).positions(hosts, hosts * c)
    w = cfg.run.sliding_window
    pairs = np.array(
        [
            sum(
                int(visible_mask(pos[h], pos[g], causal=causal, sliding_window=w).sum())
                if w is not None
                else int(visible_mask(pos[h], pos[g], causal=causal).sum())
                if causal
                else c * c
                for g in range(hosts)
            )
            for h in range(hosts)
        ]
    )
    shape = cfg.shape
    pair = attention_flops(1, 1, shape.heads, shape.head_dim, pass_=pass_) / cfg.attention_rate
    np.testing.assert_allclose(busy, pairs * pair, rtol=1e-9)


@pytest.mark.parametrize("hardware", [H100, SLOW_LINK], ids=["hidden", "exposed"])
@pytest.mark.parametrize("window", [1, 300, 1024, 1025])
def test_a_contiguous_causal_window_runs_two_steps_in_closed_form(hardware, window) -> None:
    """``W <= c + 1``: contiguous runs steps 0 and 1 only (``1 + ceil((W-1)/c)``). Step 0 is
    the band of the host's own block, ``W (W + 1) / 2 + (c - W) W`` pairs; step 1 the corner
    of the previous block, ``W (W - 1) / 2``; the block travels during step 0, so the
    makespan is ``max(T0, X) + T1`` (``X`` the block's transfer), and host 0 stops after
    step 0. One message per host, none after the last step."""
    P, c = 8, 1024
    cfg = config(hosts=P, seq_len=P * c, causal=True, hardware=hardware)
    cfg = cfg.replace(sliding_window=window)
    result = simulate(cfg, keep_timeline=True)
    shape, w = cfg.shape, min(window, c)
    pair = attention_flops(1, 1, shape.heads, shape.head_dim) / cfg.attention_rate
    t0 = (w * (w + 1) // 2 + (c - w) * w) * pair
    t1 = window * (window - 1) // 2 * pair
    transfer = HostClock(cfg).transfer(shape.kv_bytes(c))[0]
    assert result.schedule.ring_steps == ((0,) if window == 1 else (0, 1))
    expected = t0 if window == 1 else max(t0, transfer) + t1
    assert result.makespan == pytest.approx(expected, rel=1e-12)
    sent = np.isfinite(result.timeline.send_start)
    assert sent.sum() == (0 if window == 1 else P) and not sent[-1].any()


@settings(max_examples=30, deadline=None)
@given(
    layout=st.sampled_from(["contiguous", "striped", "zigzag"]),
    hosts=st.integers(2, 10),
    window=st.integers(1, 200),
    pass_=st.sampled_from(["forward", "backward"]),
)
def test_the_ring_sends_one_message_per_jump(layout, hosts, window, pass_) -> None:
    """Each host sends once after every ring step but the last (forward), and once more home
    (backward, when the ring left its own block); the schedule's jumps say where."""
    c = 32
    cfg = config(hosts=hosts, seq_len=hosts * c, layout=layout, causal=True, pass_=pass_)
    cfg = cfg.replace(sliding_window=window, overlap=False)
    result = simulate(cfg, keep_timeline=True)
    sched = result.schedule
    steps = sched.ring_steps
    messages = sum(bool(sched.payload(s)) for s in steps)
    home = pass_ == "backward" and steps[-1] != 0
    assert messages == len(steps) - 1 + home
    tl = result.timeline
    assert np.isfinite(tl.send_start).sum() == hosts * messages
    for row, s in enumerate(steps):  # the receiver got it from hops_after(s) hosts back
        if sched.payload(s):
            back = sched.recv_from_at(s)
            np.testing.assert_array_equal(tl.recv_end[row], tl.send_end[row][back])


def test_a_jump_is_one_message_on_the_slowest_hop_it_spans() -> None:
    """On two nodes, a jump that stays inside a node runs at its link; one that leaves it, at
    the NIC's; latency is paid once, however many hops it spans."""
    hw = custom_hardware(100e12, 100e9, latency=1e-6)
    hops = (100e9,) * 3 + (10e9,) + (100e9,) * 3 + (10e9,)
    cfg = config(hosts=8, seq_len=8 * 64, hardware=hw)
    cfg = cfg.replace(hop_bandwidth=hops, hop_latency=(1e-6,) * 3 + (5e-6,) + (1e-6,) * 3 + (5e-6,))
    clock = HostClock(cfg)
    one = clock.transfer(1e6)
    three = clock.transfer(1e6, hops=3)
    assert one[0] == pytest.approx(1e-6 + 1e6 / 100e9)
    assert three[0] == pytest.approx(1e-6 + 1e6 / 100e9)  # hosts 0 -> 3, inside the node
    assert three[1] == pytest.approx(5e-6 + 1e6 / 10e9)  # hosts 1 -> 4 cross to the next
    assert three[4] == pytest.approx(1e-6 + 1e6 / 100e9)


# -- the kernel model -----------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 50),
    st.integers(1, 50),
    st.integers(1, 8),
    st.integers(1, 8),
    st.integers(-60, 40),
    st.integers(0, 50),
)
def test_window_tiles_are_flash_attns_block_range(n_loop, n_in, lt, it, lo, width) -> None:
    """Each looped tile visits flash-attn's ``n_block_min..n_block_max`` (the band's first
    tile to the one holding its last row's last key); of those, the whole ones are the tiles
    every row sees entirely (the rest are masked)."""
    hi = lo + width
    whole, masked = _band_tiles(n_loop, n_in, lt, it, lo, hi, False)
    _, every = _band_tiles(n_loop, n_in, lt, it, lo, hi, True)
    for m in range(len(whole)):
        first, last = m * lt, min(m * lt + lt, n_loop) - 1
        low = max(0, (first + lo) // it)
        high = min(-(-n_in // it), -(-(first + lt + hi) // it))
        tiles = range(low, high)
        full = sum(
            all(r + lo <= t <= r + hi for r in range(first, last + 1) for t in keys)
            for keys in (range(b * it, min(b * it + it, n_in)) for b in tiles)
        )
        assert (whole[m], masked[m]) == (full, len(tiles) - full)
        assert every[m] == len(tiles)


def test_fa2_forward_masks_every_window_tile_fa3_only_the_edges() -> None:
    band = (-4095, 0)  # a 4K causal window on a 16K call
    fa2 = tile_work(16384, 16384, "window", (128, 128), None, band=band, mask_every_tile=True)
    fa3 = tile_work(16384, 16384, "window", (128, 128), None, band=band)
    assert fa2.full == 0 and fa2.masked == fa3.full + fa3.masked
    # the diagonal tile of each of the 128 query tiles, and the left edge's once it starts
    # past the first key (query tile 32 on: 4095 keys back is tile m - 32, cut by one key)
    assert fa3.masked == 128 + (128 - 32)
    kw = dict(heads=8, kv_heads=8, head_dim=128, dtype="bf16")
    from ringsim.timer.cost import AttentionShape

    shape = AttentionShape(**kw)
    window = call_seconds(
        "fa2",
        H100,
        shape,
        q_tokens=16384,
        k_tokens=16384,
        pass_="forward",
        mask="window",
        band=band,
    )
    causal = call_seconds(
        "fa2",
        H100,
        shape,
        q_tokens=16384,
        k_tokens=16384,
        pass_="forward",
        mask="causal-diagonal",
    )
    assert window < causal / 1.5  # a quarter of the keys per query, not half the matrix


@settings(max_examples=60, deadline=None)
@given(
    layout=st.sampled_from(["contiguous", "striped", "zigzag"]),
    hosts=st.integers(1, 6),
    half=st.integers(1, 12),
    window=st.integers(1, 60),
    causal=st.booleans(),
    data=st.data(),
)
def test_a_rings_window_calls_hold_exactly_the_visible_pairs(
    layout, hosts, half, window, causal, data
) -> None:
    lay = get_layout(layout)
    c = 2 * half
    q_host = data.draw(st.integers(0, hosts - 1))
    kv_host = data.draw(st.integers(0, hosts - 1))
    pos = lay.positions(hosts, hosts * c)
    expected = visible_mask(pos[q_host], pos[kv_host], causal=causal, sliding_window=window)
    calls = lay.window_calls(hosts, c, q_host, kv_host, window, causal)
    assert sum(_pairs(call) for call in calls) == int(expected.sum())
    assert all(call.q_tokens <= c and call.k_tokens <= c for call in calls)


def _pairs(call: KernelCall) -> int:
    r = np.arange(call.q_tokens)[:, None]
    t = np.arange(call.k_tokens)[None, :]
    shift = call.k_tokens - call.q_tokens
    rule = {
        "full": np.ones_like(r * t, bool),
        "causal-diagonal": t <= r + shift,
        "offset-causal": t < r + shift,
    }
    if call.mask == "window":
        lo, hi = call.band
        return int(((t >= r + lo) & (t <= r + hi)).sum())
    return int(rule[call.mask].sum())


# -- every strategy -------------------------------------------------------------------------
@pytest.mark.parametrize("strategy", list(STRATEGIES))
@pytest.mark.parametrize("family", ["ideal", "fa2"])
@pytest.mark.parametrize("pass_", ["forward", "backward"])
def test_every_strategy_runs_under_a_window_and_computes_less(strategy, family, pass_) -> None:
    cluster = get_cluster("dgx-h100")
    cfg = RingConfig(
        hosts=16,
        seq_len=16 * 4096,
        hardware=cluster.hardware,
        heads=16,
        kv_heads=8,
        layout="zigzag",
        causal=True,
        pass_=pass_,
        implementation=family,
    )
    degree = 2 if strategy == "hybrid" else None
    runs = {}
    for w in (None, 2048):
        c = cfg.replace(sliding_window=w)
        pair = [
            simulate_strategy(c, strategy, ulysses_degree=degree, cluster=cluster, engine=e)
            for e in ("vectorized", "heap")
        ]
        assert pair[0].makespan == pair[1].makespan
        runs[w] = pair[0].summary()
    assert runs[2048]["flops_total"] < runs[None]["flops_total"] / 4
    assert runs[2048]["total_time_s"] < runs[None]["total_time_s"]


def test_the_windowed_schedule_is_the_configs() -> None:
    cfg = config(layout="zigzag", causal=True).replace(sliding_window=500)
    direct = build_schedule(8, "zigzag", True, seq_len=8192, sliding_window=500)
    assert cfg.schedule().ring_steps == direct.ring_steps == (0, 1, 7)


# -- the command line -----------------------------------------------------------------------
def _cli_json(capsys, *argv: str) -> dict:
    import json

    from ringsim import cli

    assert cli.main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_simulate_takes_a_window_and_says_what_it_ran(capsys) -> None:
    base = ("simulate", "--hosts", "8", "--seq-len", "64K", "--causal")
    plain = _cli_json(capsys, *base)
    windowed = _cli_json(capsys, *base, "--sliding-window", "4K")
    assert "sliding_window" not in plain
    assert (windowed["sliding_window"], windowed["ring_steps"]) == (4096, 2)
    assert windowed["total_time_s"] < plain["total_time_s"] / 4
    # memory: a ring host holds its blocks whatever the window (the ring passes whole blocks)
    assert windowed["memory_per_host_bytes"] == plain["memory_per_host_bytes"]
    cfg = RingConfig(hosts=8, seq_len=65536, hardware=get_hardware("a100-nvlink"), causal=True)
    expected = simulate(cfg.replace(sliding_window=4096)).summary()["total_time_s"]
    assert windowed["total_time_s"] == expected


@pytest.mark.parametrize(
    "extra, message",
    [
        (("--sliding-window", "64K"), "--sliding-window 65536 covers the whole sequence"),
        (("--sliding-window", "4K", "--pass", "decode"), "--sliding-window masks a ring"),
        (("--sliding-window", "0"), "--sliding-window"),
        (("--sliding-window", "4Q"), "--sliding-window"),
    ],
)
def test_simulate_refuses_a_window_that_means_nothing(capsys, extra, message) -> None:
    from ringsim import cli

    argv = ["simulate", "--hosts", "8", "--seq-len", "64K", "--causal", *extra]
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err


def test_sweep_times_each_layout_against_the_window(capsys) -> None:
    data = _cli_json(
        capsys,
        "sweep",
        "--vary",
        "sliding-window",
        "--hosts",
        "4",
        "--block",
        "2K",
        "--values",
        "none,1K,512",
    )
    rows = {(r["layout"], r["sliding_window"]): r for r in data["rows"]}
    assert [w for layout, w in rows if layout == "contiguous"] == [512, 1024, None]
    # contiguous under a window of at most a block runs two steps, striped all four
    assert rows["contiguous", 512]["ring_steps"] == 2 and rows["striped", 512]["ring_steps"] == 4
    for layout in data["layouts"]:
        assert rows[layout, 512]["total_time_s"] < rows[layout, None]["total_time_s"]
    cfg = RingConfig(hosts=4, seq_len=8192, hardware=get_hardware("a100-nvlink"), causal=True)
    cfg = cfg.replace(layout="zigzag", sliding_window=1024)
    assert rows["zigzag", 1024]["total_time_s"] == simulate(cfg).summary()["total_time_s"]


# -- models with windowed layers, planned ---------------------------------------------------
def test_model_presets_window_the_layers_their_configs_say() -> None:
    from ringsim.timer.step.models import MODELS, ModelSpec

    gemma2, gemma3, mistral = MODELS["gemma2-9b"], MODELS["gemma3-27b"], MODELS["mistral-7b"]
    assert gemma2.layer_windows()[:4] == (4096, None, 4096, None)  # even layers local
    assert sum(w is None for w in gemma2.layer_windows()) == 21
    g3 = gemma3.layer_windows()
    assert [i for i, w in enumerate(g3) if w is None] == list(range(5, 62, 6))  # 10 global
    assert set(mistral.layer_windows()) == {4096}
    assert gemma2.head_dim == 256 and gemma2.heads * gemma2.head_dim != gemma2.d_model
    assert round(gemma2.params / 1e9, 2) == 9.24 and round(mistral.params / 1e9, 2) == 7.24
    with pytest.raises(ValueError, match="global_every"):
        ModelSpec("x", 4, 512, 8, 1024, global_every=2)
    with pytest.raises(ValueError, match="sliding_window"):
        ModelSpec("x", 4, 512, 8, 1024, sliding_window=0)


def test_the_plan_times_each_kind_of_layer_with_its_own_attention() -> None:
    """A plan's attention per layer is the mean over the model's layers: Gemma 2's half
    windowed, half full, each timed by the strategy with or without the window."""
    from ringsim.timer.step.models import MODELS
    from ringsim.timer.step.parallel import Parallel
    from ringsim.timer.studies.planner import AttentionTimer

    cluster = get_cluster("dgx-h100")
    model = MODELS["gemma2-9b"]
    timer = AttentionTimer(model, 65536, cluster, causal=True, dtype="bf16", implementation="fa2")
    par = Parallel(tp=1, cp=8, strategy="ring", layout="zigzag")
    mean, _ = timer.time(par)
    seconds = {}
    for w in (None, 4096):
        cfg = timer.config(par, "forward", w)
        seconds[w] = simulate_strategy(cfg, "ring", cluster=cluster).makespan
    assert mean.forward_s == pytest.approx((seconds[None] + seconds[4096]) / 2, rel=1e-12)
    assert seconds[4096] < seconds[None] / 2


def test_a_windowed_models_lower_bound_stays_below_its_step() -> None:
    from ringsim.timer.step.models import MODELS
    from ringsim.timer.studies.planner import AttentionTimer, plan

    model, cluster = MODELS["mistral-7b"], get_cluster("dgx-h100")
    timer = AttentionTimer(model, 65536, cluster, causal=True, dtype="bf16", implementation="ideal")
    result = plan("mistral-7b", 65536, get_cluster("dgx-h100"), 8, global_batch=8, keep=10**6)
    one = next(c.parallel for c in result.candidates if c.parallel.cp == 1)
    assert timer.busiest_work(one) < 0.07  # 4K of 64K keys per query
    for cand in result.candidates:
        assert cand.lower_bound_s <= cand.step_time_s
    assert result.as_dict()["window_layers"] == 32
    assert (
        "window_layers"
        not in plan("llama3-8b", 65536, get_cluster("dgx-h100"), 8, global_batch=8).as_dict()
    )


def test_model_flops_count_the_window() -> None:
    import dataclasses

    from ringsim.timer.step.flops import model_flops_per_sequence
    from ringsim.timer.step.models import MODELS

    llama = MODELS["llama3-8b"]
    same = dataclasses.replace(llama, attention_head_dim=128)  # the general formula
    for convention in ("megatron", "causal"):
        assert model_flops_per_sequence(same, 65536, convention) == pytest.approx(
            model_flops_per_sequence(llama, 65536, convention), rel=1e-12
        )
    windowed = dataclasses.replace(llama, sliding_window=4096)
    full, local = (model_flops_per_sequence(m, 65536) for m in (llama, windowed))
    s, q = 65536, llama.heads * llama.head_dim
    assert full - local == pytest.approx(llama.layers * 12 * s * s * q * (1 - 4096 / s))
