"""A new layout is one class: a toy (host ``h`` holds block ``P - 1 - h``, the contiguous split
backwards) registered here runs through the numerics, the schedule and the timer, and no
other module knows of it. It is unregistered after this module's tests."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import seeds

import ringsim
from ringsim import (
    LAYOUTS,
    BlockKind,
    Layout,
    RingConfig,
    build_schedule,
    get_hardware,
    get_layout,
    layout_names,
    reference_attention,
    reference_attention_grad,
    register_layout,
    ring_attention,
    ring_attention_backward,
    simulate,
    unregister_layout,
)
from ringsim.masks import count_visible
from ringsim.timer.cost import attention_flops
from ringsim.timer.engine.ring_steps import StepModel
from ringsim.timer.machine.families import KERNELS
from ringsim.timer.machine.hardware import custom_hardware


class Reversed(Layout):
    name = "reversed-toy"
    description = "host h holds block P - 1 - h: the contiguous split, backwards"

    def deal(self, hosts, seq_len, segment_ids):
        return np.arange(seq_len, dtype=np.int64).reshape(hosts, -1)[::-1].copy()


TOY = Reversed.name


@pytest.fixture(scope="module", autouse=True)
def toy():
    register_layout(Reversed())
    try:
        yield
    finally:
        unregister_layout(TOY)
    assert TOY not in LAYOUTS


def test_the_toy_is_in_the_registry_and_refuses_what_it_cannot_deal():
    assert TOY in LAYOUTS and TOY in ", ".join(LAYOUTS) and TOY in layout_names()
    assert get_layout(TOY) is LAYOUTS[TOY] and get_layout(LAYOUTS[TOY]) is LAYOUTS[TOY]
    with pytest.raises(ValueError, match="already registered"):
        register_layout(Reversed())
    with pytest.raises(ValueError, match=r"divisible by hosts = 4 for the reversed-toy layout"):
        ringsim.host_positions(TOY, 4, 30)
    pos = ringsim.host_positions(TOY, 4, 32)
    for h in range(4):
        np.testing.assert_array_equal(pos[h], np.arange(8) + 8 * (3 - h))
        np.testing.assert_array_equal(get_layout(TOY).positions_of_host(4, 32, h), pos[h])
    x = np.random.default_rng(0).standard_normal((2, 32, 3))
    np.testing.assert_array_equal(ringsim.from_layout(ringsim.to_layout(x, TOY, 4), TOY, 4), x)


# -- numerics ------------------------------------------------------------------------------------
@settings(max_examples=25, deadline=None)
@given(st.integers(1, 6), st.integers(1, 4), st.booleans(), seeds)
def test_numerics_equal_float64_attention(hosts, per_host, causal, seed):
    rng = np.random.default_rng(seed)
    n = hosts * per_host
    q, k, v, dout = (rng.standard_normal((2, n, 5)) for _ in range(4))
    for layout in (TOY, Reversed()):  # by name, or an object (registered or not)
        out = ring_attention(q, k, v, hosts=hosts, layout=layout, causal=causal)
        np.testing.assert_allclose(out, reference_attention(q, k, v, causal=causal), atol=1e-10)
    grads = ring_attention_backward(q, k, v, dout, hosts=hosts, layout=TOY, causal=causal)
    exact = reference_attention_grad(q, k, v, dout, causal=causal)
    for name, got, want in zip("dq dk dv".split(), grads, exact, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-9, err_msg=name)


# -- the schedule --------------------------------------------------------------------------------
@settings(max_examples=25, deadline=None)
@given(st.integers(1, 8), st.integers(1, 6), st.booleans(), st.sampled_from([None, 2, 3]))
def test_schedule_work_is_the_brute_force_count(hosts, per_host, causal, tile):
    n = hosts * per_host
    sched = build_schedule(hosts, TOY, causal, seq_len=n, tile=tile)
    pos = ringsim.host_positions(TOY, hosts, n)
    for s in range(hosts):
        owners = sched.kv_owner(s)
        for h in range(hosts):
            exact = count_visible(pos[h], pos[owners[h]], causal=causal) / per_host**2
            tiled = count_visible(pos[h], pos[owners[h]], causal=causal, tile=tile) / per_host**2
            assert sched.exact_work_at(s)[h] == pytest.approx(exact, abs=1e-15)
            assert sched.work_at(s)[h] == pytest.approx(tiled, abs=1e-15)


def test_describe_shows_later_blocks_computed_and_earlier_ones_skipped():
    sched = build_schedule(4, TOY, causal=True, seq_len=16)
    text = sched.describe()
    assert "4 hosts, reversed-toy, causal" in text
    # host 0 holds the last block: every other host's block comes earlier in the sequence
    assert [BlockKind(k) for k in sched.kind[:, 0]] == [BlockKind.PARTIAL] + [BlockKind.FULL] * 3
    assert [BlockKind(k) for k in sched.kind[:, 3]] == [BlockKind.PARTIAL] + [BlockKind.SKIP] * 3
    assert text.splitlines()[3].startswith("   0 | kv0 part ->1")
    assert "kv3 full" in text.splitlines()[4] and "kv2 skip" in text.splitlines()[4]


# -- the timer -----------------------------------------------------------------------------------
@pytest.mark.parametrize("hosts, block", [(2, 16), (5, 32), (8, 64)])
def test_ideal_timer_runs_the_contiguous_closed_form_mirrored(hosts, block):
    hw = custom_hardware(1e12, 1e15, 0.0)
    shape = dict(hosts=hosts, seq_len=hosts * block, heads=2, head_dim=16)
    cfg = RingConfig(hardware=hw, layout=TOY, causal=True, **shape)
    run = simulate(cfg)
    t = attention_flops(block, block, 2, 16) / 1e12
    w = (block + 1) / (2 * block)  # the diagonal block's share
    # host 0 holds the last block: P - 1 full blocks and the diagonal, as contiguous's last host
    assert run.makespan == pytest.approx((hosts - 1 + w) * t, rel=1e-12)
    idle = 1 - (hosts * (hosts - 1) / 2 + hosts * w) / (hosts * (hosts - 1 + w))
    assert run.idle_fraction == pytest.approx(idle, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("implementation", ["ideal", "fa2"])
def test_timer_under_a_real_family_makes_the_calls_of_the_mirrored_contiguous_ring(implementation):
    hw = get_hardware("h100-nvlink")
    base = dict(hosts=4, seq_len=32768, hardware=hw, causal=True, implementation=implementation)
    toy = simulate(RingConfig(layout=TOY, **base)).summary()
    contiguous = simulate(RingConfig(layout="contiguous", **base)).summary()
    assert toy["layout"] == TOY
    # the busiest host makes the same calls in both: a causal diagonal, then full blocks
    assert toy["compute_time_s"] == pytest.approx(contiguous["compute_time_s"], rel=1e-12)
    assert toy["flops_total"] == pytest.approx(contiguous["flops_total"], rel=1e-12)
    assert toy["total_time_s"] >= toy["compute_time_s"] > 0
    if implementation == "fa2":
        ideal = simulate(RingConfig(layout=TOY, **{**base, "implementation": "ideal"}))
        assert toy["compute_time_s"] > ideal.summary()["compute_time_s"]
        steps = StepModel(RingConfig(layout=TOY, **base), KERNELS["fa2"])
        assert steps.call(BlockKind.PARTIAL, 0, 0.5)[:3] == (8192, 8192, "causal-diagonal")
        assert steps.call(BlockKind.FULL, 1, 1.0)[:3] == (8192, 8192, "full")
        assert steps.call(BlockKind.SKIP, -1, 0.0) is None


def test_a_layout_that_deals_unsorted_rows_is_refused():
    class Shuffled(Reversed):
        name = "shuffled-toy"

        def deal(self, hosts, seq_len, segment_ids):
            return super().deal(hosts, seq_len, segment_ids)[:, ::-1]

    with pytest.raises(ValueError, match="must deal each host an increasing row of 4 positions"):
        ringsim.host_positions(Shuffled(), 2, 8)
