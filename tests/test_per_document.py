"""The per-document layout (TransformerEngine's THD split): every document cut into ``2P``
chunks, host ``h`` holding chunks ``h`` and ``2P - 1 - h`` of each. It deals as documented,
refuses documents it cannot split, equals float64 attention (forward and gradients), balances
the causal work of every step, and the timer runs it under ideal and real kernel families."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import seeds

from ringsim import (
    RingConfig,
    build_schedule,
    cli,
    get_hardware,
    get_layout,
    host_positions,
    layout_names,
    reference_attention,
    reference_attention_grad,
    ring_attention,
    ring_attention_backward,
    simulate,
)
from ringsim.layouts import LAYOUTS, document_runs, positions_of_host, segment_ids_of
from ringsim.masks import count_visible
from ringsim.timer.cost import attention_flops
from ringsim.timer.engine.ring_steps import StepModel
from ringsim.timer.machine.families import KERNELS
from ringsim.timer.machine.hardware import custom_hardware

LAYOUT = "per-document"


@st.composite
def documents(draw: st.DrawFn, max_hosts: int = 4, max_docs: int = 4, max_chunk: int = 3):
    """``(hosts, segment_ids)``: random document lengths, each a multiple of ``2P``."""
    hosts = draw(st.integers(1, max_hosts))
    chunks = draw(st.lists(st.integers(1, max_chunk), min_size=1, max_size=max_docs))
    return hosts, segment_ids_of([2 * hosts * m for m in chunks])


# -- the split -----------------------------------------------------------------------------------
@given(documents(max_hosts=8, max_docs=6))
def test_every_host_holds_its_two_chunks_of_every_document(case):
    hosts, seg = case
    n = seg.size
    pos = host_positions(LAYOUT, hosts, n, seg)
    assert pos.shape == (hosts, n // hosts) and np.all(np.diff(pos, axis=1) > 0)
    np.testing.assert_array_equal(np.sort(pos.reshape(-1)), np.arange(n))
    owner = np.empty(n, dtype=int)
    for h in range(hosts):
        owner[pos[h]] = h
        np.testing.assert_array_equal(positions_of_host(LAYOUT, hosts, n, h, seg), pos[h])
    for start, length in zip(*document_runs(seg), strict=True):  # written from the definition
        chunk = np.arange(length) // (length // (2 * hosts))
        want = np.where(chunk < hosts, chunk, 2 * hosts - 1 - chunk)
        np.testing.assert_array_equal(owner[start : start + length], want)


@given(st.integers(1, 8), st.integers(1, 4))
def test_one_document_is_the_zigzag_split(hosts, per_chunk):
    n = 2 * hosts * per_chunk
    seg = np.zeros(n, dtype=np.int64)
    np.testing.assert_array_equal(
        host_positions(LAYOUT, hosts, n, seg), host_positions("zigzag", hosts, n)
    )


def test_it_needs_documents_and_refuses_one_it_cannot_split():
    layout = get_layout(LAYOUT)
    assert layout.needs_documents and LAYOUT in LAYOUTS and LAYOUT not in layout_names()
    assert LAYOUT in layout_names(documents=True)
    with pytest.raises(ValueError, match=r"per-document layout needs the documents"):
        host_positions(LAYOUT, 2, 16)
    with pytest.raises(ValueError, match=r"needs the documents"):
        ring_attention(*np.ones((3, 16, 2)), hosts=2, layout=LAYOUT)
    seg = segment_ids_of([8, 6, 2])
    message = r"document 1 \(tokens 8 to 13\) has length 6, not divisible by 2\*hosts = 4"
    with pytest.raises(ValueError, match=message):
        host_positions(LAYOUT, 2, 16, seg)
    with pytest.raises(ValueError, match=message):
        build_schedule(2, LAYOUT, True, seq_len=16, segment_ids=seg)
    with pytest.raises(ValueError, match="segment_ids must have shape"):
        host_positions(LAYOUT, 2, 16, np.zeros(8, dtype=int))


# -- numerics against float64 attention -----------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(documents(), st.booleans(), st.integers(1, 2), seeds)
def test_numerics_equal_float64_attention(case, causal, heads, seed):
    hosts, seg = case
    rng = np.random.default_rng(seed)
    q, k, v, dout = (rng.standard_normal((heads, seg.size, 4)) for _ in range(4))
    kw = dict(causal=causal, segment_ids=seg)
    out = ring_attention(q, k, v, hosts=hosts, layout=LAYOUT, **kw)
    np.testing.assert_allclose(out, reference_attention(q, k, v, **kw), rtol=0, atol=1e-10)
    grads = ring_attention_backward(q, k, v, dout, hosts=hosts, layout=LAYOUT, **kw)
    exact = reference_attention_grad(q, k, v, dout, **kw)
    for name, got, want in zip(("dq", "dk", "dv"), grads, exact, strict=True):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-9, err_msg=name)


# -- the schedule: brute-force work, balanced at every step ---------------------------------------
@settings(max_examples=40, deadline=None)
@given(documents(max_hosts=6), st.booleans(), st.sampled_from([None, 2, 3]))
def test_work_is_the_brute_force_count_and_equal_on_every_host(case, causal, tile):
    hosts, seg = case
    n, c = seg.size, seg.size // hosts
    sched = build_schedule(hosts, LAYOUT, causal, seq_len=n, segment_ids=seg, tile=tile)
    pos = host_positions(LAYOUT, hosts, n, seg)
    for s in range(hosts):
        owners = sched.kv_owner(s)
        for h in range(hosts):
            segs = dict(q_seg=seg[pos[h]], k_seg=seg[pos[owners[h]]])
            exact = count_visible(pos[h], pos[owners[h]], causal=causal, **segs) / c**2
            tiled = count_visible(pos[h], pos[owners[h]], causal=causal, tile=tile, **segs)
            assert sched.exact_work_at(s)[h] == pytest.approx(exact, abs=1e-15)
            assert sched.work_at(s)[h] == pytest.approx(tiled / c**2, abs=1e-15)
        if causal:  # each document is a zigzag ring of its own: the same work on every host
            np.testing.assert_allclose(sched.exact_work_at(s), sched.exact_work_at(s)[0], rtol=0)


# -- the timer ------------------------------------------------------------------------------------
@settings(max_examples=20, deadline=None)
@given(documents(max_hosts=6, max_chunk=8))
def test_ideal_timer_has_no_idle_and_the_closed_form_makespan(case):
    hosts, seg = case
    c = seg.size // hosts
    hw = custom_hardware(1e12, 1e15, 0.0)
    shape = dict(hosts=hosts, seq_len=seg.size, heads=2, head_dim=16)
    cfg = RingConfig(hardware=hw, layout=LAYOUT, causal=True, segment_ids=seg, **shape)
    run = simulate(cfg)
    # per document of c_d = L_d / P tokens per host: the diagonal c_d (c_d + 1) / 2 pairs,
    # then c_d^2 / 2 pairs at each of the P - 1 other steps
    c_d = document_runs(seg)[1] // hosts
    pairs = (c_d * (c_d + 1) // 2).sum() + (hosts - 1) * (c_d * c_d // 2).sum()
    t = attention_flops(c, c, 2, 16) / 1e12
    assert run.makespan == pytest.approx(pairs / c**2 * t, rel=1e-12)
    assert run.idle_fraction == pytest.approx(0.0, abs=1e-12)


def test_timer_under_fa2_runs_per_document_calls():
    hw, n = get_hardware("h100-nvlink"), 65536
    seg = segment_ids_of([32768, 16384, 8192, 8192])
    base = dict(hosts=4, seq_len=n, hardware=hw, causal=True, segment_ids=seg)
    ideal = simulate(RingConfig(layout=LAYOUT, **base)).summary()
    fa2_cfg = RingConfig(layout=LAYOUT, implementation="fa2", **base)
    fa2 = simulate(fa2_cfg).summary()
    assert ideal["idle_fraction"] == pytest.approx(0.0, abs=1e-12)
    assert fa2["compute_time_s"] > ideal["compute_time_s"] > 0
    assert fa2["flops_total"] == pytest.approx(ideal["flops_total"], rel=1e-12)
    # fewer pairs than one 64K document dealt by zigzag
    zigzag = simulate(RingConfig(layout="zigzag", **{**base, "segment_ids": None})).summary()
    assert ideal["flops_total"] < zigzag["flops_total"]
    steps, c = StepModel(fa2_cfg, KERNELS["fa2"]), n // 4
    assert steps.call(1, 0, 0.2)[:5] == (c, c, "documents", 0.2, False)
    assert steps.call(1, -1, 0.2)[:5] == (c, c // 2, "documents", 0.4, False)
    assert steps.call(1, 1, 0.2)[:5] == (c // 2, c, "documents", 0.4, True)  # sliced merge
    assert steps.call(1, 1, 0.5)[:5] == (c // 2, c, "full", None, True)  # one document: all pairs
    assert steps.call(0, 1, 0.0) is None


# -- the command line -----------------------------------------------------------------------------
def test_simulate_needs_documents_for_the_per_document_layout(capsys):
    base = ["simulate", "--hosts", "4", "--seq-len", "64K", "--causal", "--layout", LAYOUT]
    assert cli.main(base) == 2
    err = capsys.readouterr().err.strip().splitlines()
    want = f"--layout {LAYOUT} needs --documents (the documents' lengths)"
    assert err == [f"ringsim simulate: error: {want}"]
    assert cli.main([*base, "--documents", "32K,16K,8K,7K"]) == 2
    assert "must sum to the sequence length 65536, got 64512" in capsys.readouterr().err
    assert cli.main([*base, "--documents", "32K,16K,8K,8188,4"]) == 2
    assert "document 3 (tokens 57344 to 65531) has length 8188" in capsys.readouterr().err
    assert cli.main([*base, "--documents", "32K,16K,8K,8K", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["layout"] == LAYOUT and summary["idle_fraction"] == pytest.approx(0, abs=1e-12)


@pytest.mark.parametrize("implementation", ["ideal", "fa2"])
def test_the_double_ring_runs_the_per_document_layout(implementation):
    """A double ring of one window is the flat ring, bit for bit, with documents too (its inner
    rings used to be built without them, which this layout refuses)."""
    from ringsim.timer.machine.hardware import get_hardware
    from ringsim.timer.strategies import simulate_strategy

    cfg = RingConfig(
        hosts=8,
        seq_len=65536,
        hardware=get_hardware("h100-nvlink"),
        causal=True,
        layout="per-document",
        segment_ids=segment_ids_of([32768, 16384, 16384]),
        implementation=implementation,
    )
    flat = simulate_strategy(cfg, "ring").summary()["total_time_s"]
    assert simulate_strategy(cfg, "double-ring", window=8).summary()["total_time_s"] == flat
    assert simulate_strategy(cfg, "double-ring", window=4).summary()["total_time_s"] > 0
