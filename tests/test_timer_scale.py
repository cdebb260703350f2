"""The timer at cluster scale: O(P) summaries, the timeline only on demand, closed-form work,
and runs that cannot finish refused up front."""

import itertools
import tracemalloc

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ringsim import cli
from ringsim.layouts import layout_names, positions_of_host
from ringsim.masks import count_visible
from ringsim.schedule import visible_pairs
from ringsim.timer import RingConfig, simulate
from ringsim.timer.engine import result as result_module
from ringsim.timer.engine.result import RunStats
from ringsim.timer.machine.hardware import custom_hardware

ARRAYS = ("compute_start", "compute_end", "send_start", "send_end", "recv_start", "recv_end")
HW = custom_hardware(1e12, 1e9, 1e-6)


def config(hosts, block=32, **kw):
    return RingConfig(hosts=hosts, seq_len=hosts * block, hardware=HW, heads=2, head_dim=16, **kw)


# -- work fractions in closed form ----------------------------------------------------------
@given(
    layout=st.sampled_from(layout_names()),
    hosts=st.integers(1, 6),
    half=st.integers(1, 12),
    tile=st.sampled_from([None, 1, 2, 3, 4, 5, 8, 64]),
    causal=st.booleans(),
    data=st.data(),
)
def test_visible_pairs_equal_the_mask_count(layout, hosts, half, tile, causal, data):
    c = 2 * half
    i = data.draw(st.integers(0, hosts - 1))
    j = data.draw(st.integers(0, hosts - 1))
    pos = lambda h: positions_of_host(layout, hosts, hosts * c, h)
    expect = count_visible(pos(i), pos(j), causal=causal, tile=tile)
    assert visible_pairs(layout, hosts, c, i, j, causal, tile) == expect


def test_huge_blocks_need_no_per_token_arrays():
    """A 512M-token block (8 hosts x 4G tokens) in closed form: no 4 GB position array."""
    tracemalloc.start()
    for layout, tile in itertools.product(layout_names(), (None, 4096)):
        sched = config(8, 2**29, layout=layout, causal=True, tile=tile).schedule()
        work = sched.work_at(3)
        assert 0 < work.max() <= 1
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 64 * 2**20


# -- summaries in O(P), the timeline on demand ----------------------------------------------
@pytest.mark.parametrize("pass_", ["forward", "backward", "train-step", "decode"])
@pytest.mark.parametrize("overlap", [True, False])
def test_summary_does_not_depend_on_keeping_the_timeline(pass_, overlap):
    """300 hosts: more rows than one partial sum (256), so the chunked order is exercised."""
    cfg = config(300, layout="zigzag", causal=True, pass_=pass_, overlap=overlap, jitter=0.3)
    kept, lean = simulate(cfg, keep_timeline=True), simulate(cfg, keep_timeline=False)
    assert kept.summary() == lean.summary()
    tl = kept.timeline
    stats = RunStats.of(tl)  # the summary of a finished timeline, summed the same way
    assert stats.makespan == kept.makespan == tl.makespan
    np.testing.assert_array_equal(stats.compute_busy, kept.compute_busy())
    np.testing.assert_array_equal(stats.link_busy, kept.link_busy())
    np.testing.assert_allclose(kept.compute_busy(), tl.busy("compute"), rtol=1e-12)
    assert stats.events == kept.summary()["events"]


def test_a_lean_result_rebuilds_its_timeline_on_first_use():
    cfg = config(6, layout="striped", causal=True, pass_="backward", jitter=0.2, seed=3)
    kept, lean = simulate(cfg, keep_timeline=True), simulate(cfg, keep_timeline=False)
    assert lean.__dict__["timeline"] is None  # nothing held until asked
    for name in ARRAYS:
        np.testing.assert_array_equal(getattr(lean.timeline, name), getattr(kept.timeline, name))
    assert lean.timeline is lean.timeline  # built once
    meta = lean.timeline.meta, kept.timeline.meta
    np.testing.assert_array_equal(meta[0]["kv_send_end"], meta[1]["kv_send_end"])


def test_default_keeps_small_timelines_only():
    small = simulate(config(8))
    assert small.__dict__["timeline"] is not None
    big = simulate(config(2048, block=2))  # 2048 x 2049 x 4 float64 = 134 MB
    assert big.__dict__["timeline"] is None


def test_memory_grows_as_hosts_not_hosts_squared():
    cfg = config(2048, block=2, layout="zigzag", causal=True)
    tracemalloc.start()
    simulate(cfg, keep_timeline=False)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 4 * 2**20  # its timeline would be 134 MB


def test_keep_timeline_is_checked():
    with pytest.raises(ValueError, match="keep_timeline"):
        simulate(config(2), keep_timeline="yes")


# -- what cannot finish is refused up front ---------------------------------------------------
def test_a_million_hosts_is_refused_with_what_it_would_need():
    cfg = RingConfig(hosts=2**20, seq_len=2**30, hardware=HW)
    with pytest.raises(ValueError, match=r"hosts=1048576.*block events.*TiB"):
        simulate(cfg, keep_timeline=False)


def test_a_timeline_larger_than_memory_is_refused(monkeypatch):
    monkeypatch.setattr(result_module, "memory_budget", lambda: 2**20)
    with pytest.raises(ValueError, match=r"would need .* more than this machine's 1.0 MiB"):
        simulate(config(512), keep_timeline=True)
    simulate(config(512), keep_timeline=False)  # the summary alone fits


@pytest.mark.parametrize(
    "argv",
    [
        ["simulate", "--hosts", "1048576", "--seq-len", "1G"],
        ["demo", "--hosts", "1048576", "--seq-len", "1G", "--no-plot"],
        ["sweep", "--vary", "hosts", "--values", "1M"],
    ],
)
def test_the_cli_refuses_too_many_hosts_in_one_line(capsys, argv):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "block events" in err and "TiB" in err


@pytest.mark.parametrize(
    "flags", [["--hosts", "8", "--seq-len", "4G"], ["--hosts", "1", "--seq-len", "1G", "--causal"]]
)
def test_huge_sequences_run_in_closed_form(capsys, flags):
    assert cli.main(["simulate", *flags, "--json"]) == 0
    assert '"total_time_s"' in capsys.readouterr().out
