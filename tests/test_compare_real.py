"""Real traces: ``torch.profiler`` around this project's own gloo ring on this CPU (real Kineto
files, real timings), read back by ``ringsim compare``'s reader and held against the timeline
the ring measured itself in the same passes (``kernels.distributed.rank_timeline``)."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.torch

RINGS = {  # name -> (layout, causal, gzipped)
    "full": ("contiguous", False, False),
    "zigzag": ("zigzag", True, True),
}
WARMUP, REPEATS = 1, 2
# how far the trace's reading and the ring's own marks may differ: they time the same
# passes, but the marks sit around block_attention + merge while the trace counts every op
# the ring thread issued in the step (casts, buffers), and the profiler adds its own cost
STEP_TOLERANCE_S = 5e-4


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, ranks_lock) -> dict:
    from kernels.distributed.launch import RunConfig
    from kernels.distributed.profiled import record_ring

    out = {}
    with ranks_lock():
        for name, (layout, causal, gz) in RINGS.items():
            config = RunConfig(
                seq_len=2048,
                heads=2,
                head_dim=32,
                layout=layout,
                causal=causal,
                backward=False,
                warmup=WARMUP,
                repeats=REPEATS,
                return_tensors=False,
            )
            folder = tmp_path_factory.mktemp(name)
            paths, answers = record_ring(config, 2, folder, gz=gz)
            out[name] = (config, [str(p) for p in paths], answers)
    return out


@pytest.mark.parametrize("name", RINGS)
def test_the_trace_names_the_ring_it_recorded(recorded, name):
    from ringsim.traces import FAMILIES, read_ring

    config, paths, _ = recorded[name]
    ring = read_ring(paths)
    values = ring.shape.values
    assert ring.members == [0, 1] and len(ring.pass_times) == WARMUP + REPEATS
    assert (values["hosts"], values["block_tokens"]) == (2, config.seq_len // 2)
    assert (values["heads"], values["kv_heads"], values["head_dim"]) == (2, 2, 32)
    assert (values["dtype"], values["pass_"], values["causal"]) == (
        "fp32",
        "forward",
        config.causal,
    )
    if config.causal:
        assert values["layout"] == config.layout
    assert ring.shape.family is FAMILIES["torch CPU flash"]
    assert not ring.alignment.shifted  # one machine, one clock


@pytest.mark.parametrize("name", RINGS)
def test_the_trace_times_each_step_as_the_ring_timed_it(recorded, name):
    """Each pass read from the trace against the marks the ring made in the same pass, within
    ``STEP_TOLERANCE_S`` plus the machine's noise of the moment: how much the same step of the
    same rank moved between the repeats, in either record (a rank descheduled inside its marks
    on a loaded machine stretches one record of one pass, not the other: the signal)."""
    from kernels.distributed.rank_timeline import step_durations, timeline_from_records
    from ringsim.traces import read_ring

    _, paths, answers = recorded[name]
    passes = []
    for i in range(REPEATS):
        ring = read_ring(paths, which=WARMUP + i)
        own = timeline_from_records([a["forward_timelines"][i] for a in answers])
        passes.append((ring, own, ring.timeline))
    span = lambda tl: tl.compute_end - tl.compute_start
    noise = max(
        float(np.nanmax(np.abs(np.diff([span(tl) for tl in tls], axis=0))))
        for tls in ([own for _, own, _ in passes], [trace for _, _, trace in passes])
    )
    tol = STEP_TOLERANCE_S + noise
    for i, (ring, own, trace) in enumerate(passes):
        for tl in (own, trace):  # compute spans, each from the rank's first compute
            assert np.isfinite(tl.compute_start).sum() == np.isfinite(own.compute_start).sum()
        assert np.allclose(span(trace), span(own), atol=tol, equal_nan=True)
        since = lambda tl: tl.compute_start - tl.compute_start[0]
        assert np.allclose(since(trace), since(own), atol=tol, equal_nan=True)
        arrived = lambda tl: tl.recv_end - tl.compute_start[0]
        assert np.allclose(arrived(trace), arrived(own), atol=tol, equal_nan=True)
        # after step 0 (which each counts from a different origin) the steps agree
        assert np.allclose(step_durations(trace)[1:], step_durations(own)[1:], atol=tol)
        # the traced pass lies inside the window each rank timed around it, and holds every
        # compute span it read; the window also holds the barrier's wake-up and the sync,
        # which a loaded machine stretches, so the two are not compared for equality
        passed = ring.pass_times[WARMUP + i]
        assert passed <= max(a["forward_s"][i] for a in answers) + STEP_TOLERANCE_S
        assert passed >= np.nansum(span(trace), axis=0).max() - STEP_TOLERANCE_S


def test_compare_answers_on_the_real_trace(recorded, capsys):
    from ringsim import cli

    _, paths, _ = recorded["zigzag"]
    assert cli.main(["compare", *paths, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["hosts"], data["block_tokens"], data["layout"]) == (2, 1024, "zigzag")
    assert (data["hardware"], data["implementation"]) == ("cpu-calibrated", "torch")
    assert len(data["steps"]) == 2 and data["measured_s"] > 0 and data["predicted_s"] > 0
    for step in data["steps"]:
        m = step["measured"]
        parts = m["attention_s"] + m["merge_s"] + m["exposed_transfer_s"] + m["idle_s"]
        assert parts == pytest.approx(m["duration_s"], rel=1e-6, abs=1e-9)
        assert m["attention_s"] > 0 and m["merge_s"] >= 0
    assert data["verdict"] in ("expected", "slower than expected", "faster than expected")
