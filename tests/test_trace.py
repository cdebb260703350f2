"""Chrome trace JSON of a timeline: one process per host, compute and link tracks, microseconds."""

import json

import numpy as np
import pytest

from ringsim.timer import RingConfig, simulate
from ringsim.timer.machine.hardware import custom_hardware
from ringsim.views.trace import TRACKS, chrome_trace, count_trace_events, write_chrome_trace


def run(hosts=4, pass_="forward", **kw):
    hw = custom_hardware(1e12, 1e9, 1e-6)
    cfg = RingConfig(
        hosts=hosts, seq_len=hosts * 64, hardware=hw, heads=2, head_dim=16, pass_=pass_, **kw
    )
    return simulate(cfg).timeline


def complete(trace):
    return [e for e in trace["traceEvents"] if e["ph"] == "X"]


def test_one_named_process_per_host_with_three_tracks():
    trace = chrome_trace(run(4))
    names = {
        e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"
    }
    assert names == {h: f"host {h}" for h in range(4)}
    threads = {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in trace["traceEvents"]
        if e["name"] == "thread_name"
    }
    assert threads == {(h, tid): track for h in range(4) for track, tid in TRACKS.items()}


def test_complete_events_match_the_timeline_in_microseconds():
    tl = run(4, layout="zigzag", causal=True)
    events = complete(chrome_trace(tl))
    computes = [e for e in events if e["cat"] == "compute"]
    assert len(computes) == 16  # 4 steps x 4 hosts
    assert len([e for e in events if e["cat"] == "send"]) == 12  # the last step sends nothing
    for e in computes:
        h, s = e["pid"], e["args"]["step"]
        assert e["tid"] == TRACKS["compute"]
        assert e["ts"] == pytest.approx(tl.compute_start[s, h] * 1e6, rel=1e-12)
        assert e["dur"] == pytest.approx((tl.compute_end[s, h] - tl.compute_start[s, h]) * 1e6)
        assert e["name"] == tl.step_labels[s]
    recvs = [e for e in events if e["cat"] == "recv"]
    for e in recvs:
        assert e["ts"] == pytest.approx(tl.send_start[e["args"]["step"], e["pid"] - 1] * 1e6)


def test_backward_traces_both_messages_per_step():
    tl = run(3, pass_="backward")
    events = complete(chrome_trace(tl))
    sends = [e["name"] for e in events if e["cat"] == "send" and e["pid"] == 0]
    assert sorted(sends) == sorted(["0 k,v", "1 k,v", "0 dk,dv", "1 dk,dv", "2 dk,dv"])
    assert len(events) == count_trace_events(tl)
    # host 1 receives k, v from host 0: the very transfer host 0 sends
    sent = {e["name"]: e["ts"] for e in events if e["cat"] == "send" and e["pid"] == 0}
    got = {e["name"]: e["ts"] for e in events if e["cat"] == "recv" and e["pid"] == 1}
    assert got == sent
    assert len(complete(chrome_trace(tl, hosts=[1]))) == count_trace_events(tl, hosts=[1])


def test_refuses_big_timelines_and_traces_a_subset(tmp_path):
    tl = run(8)
    with pytest.raises(ValueError, match="max_events"):
        chrome_trace(tl, max_events=100)
    small = chrome_trace(tl, hosts=[0, 7], max_events=100)
    assert {e["pid"] for e in complete(small)} == {0, 7}
    with pytest.raises(ValueError, match="hosts"):
        chrome_trace(tl, hosts=[8])
    path = tmp_path / "t.json"
    write_chrome_trace(tl, path, name="demo")
    loaded = json.loads(path.read_text())
    assert loaded["otherData"]["name"] == "demo"
    assert len(complete(loaded)) == int(np.isfinite(tl.compute_start).sum()) + 2 * 56
