"""The sliding window: one mask rule, a schedule that knows which blocks it leaves, and every
executor exact against float64 attention under it.

Grouped by what they prove:

* the rule: ``visible_mask`` is ``i - W < j <= i`` (causal) or ``|i - j| < W``, as explicit
  loops write it, and FlashAttention's ``window_size`` from ``flash_window_size`` keeps the same
  keys; the counts (exact, tiled, closed form for runs) are the mask's;
* the schedule: work, kinds and liveness of every cell are the mask's, for every layout, with
  documents and tiles; the closed forms of the live steps and pairs (contiguous, striped) are
  the enumeration; the windowed ring's jumps bring every block to every host that needs it and
  its gradients home, and without a window nothing changed;
* the numerics: the ring, the hybrid (every method, U x R), the all-gather and the double ring
  equal float64 attention under the window forward and backward, per token and head, on random
  inputs, and a gradient sent to the wrong host is caught by those comparisons even where the
  ring's own check passes.

The reference is ``strategies.dense_attention``/``dense_grads`` on ``brute_mask``: written from
the definition, independent of ``ringsim``.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import (
    Case,
    assert_backward_exact,
    assert_forward_exact,
    brute_mask,
    hybrid_cases,
    random_segments,
    ring_cases,
    seeds,
)

import ringsim.numerics.ring as ring_module
from ringsim import (
    BlockKind,
    RingRecord,
    block_attention,
    build_schedule,
    flash_window_size,
    get_layout,
    host_positions,
    hybrid_attention,
    hybrid_attention_backward,
    layout_names,
    reference_attention,
    reference_attention_grad,
    ring_attention,
    ring_attention_backward,
)
from ringsim.masks import count_visible, offset_bounds, pairs_within, visible_mask
from ringsim.schedule import Schedule

windows = st.integers(1, 40)


# ---------------------------------------------------------------------------------------------
# the rule
# ---------------------------------------------------------------------------------------------


@st.composite
def position_pairs(draw: st.DrawFn, n_max: int = 40):
    """Sorted distinct query and key positions of one sequence, its documents, a window."""
    rng = np.random.default_rng(draw(seeds))
    n = draw(st.integers(1, n_max))
    q = np.sort(rng.choice(n, draw(st.integers(1, n)), replace=False))
    k = np.sort(rng.choice(n, draw(st.integers(1, n)), replace=False))
    seg = random_segments(rng, n) if draw(st.booleans()) else None
    return q, k, seg, draw(st.booleans()), draw(st.integers(1, n + 3))


@given(position_pairs())
def test_the_rule_is_the_window_written_out(drawn) -> None:
    q, k, seg, causal, w = drawn
    want = np.array(
        [
            [
                (not causal or j <= i)
                and (i - w < j <= i if causal else abs(i - j) < w)
                and (seg is None or seg[i] == seg[j])
                for j in k
            ]
            for i in q
        ]
    )
    docs = {} if seg is None else dict(q_seg=seg[q], k_seg=seg[k])
    got = visible_mask(q, k, causal=causal, sliding_window=w, **docs)
    np.testing.assert_array_equal(got, want)


@given(st.integers(1, 12), st.booleans(), st.integers(1, 30))
def test_flash_attn_window_size_keeps_the_same_keys(w, causal, n) -> None:
    """flash-attn lets query ``i`` see keys ``[i - left, i + right]`` inclusive (and with
    ``causal=True`` none after ``i``); the pair ``flash_window_size`` gives keeps exactly the
    rule's keys."""
    left, right = flash_window_size(w, causal)
    pos = np.arange(n)
    flash = (pos[None, :] >= pos[:, None] - left) & (pos[None, :] <= pos[:, None] + right)
    if causal:
        flash &= pos[None, :] <= pos[:, None]
    np.testing.assert_array_equal(flash, visible_mask(pos, pos, causal=causal, sliding_window=w))
    assert flash_window_size(None, causal) == (-1, -1)


def _tiles_by_hand(mask: np.ndarray, m: int, n: int) -> int:
    return sum(
        mask[a : a + m, b : b + n].size
        for a in range(0, mask.shape[0], m)
        for b in range(0, mask.shape[1], n)
        if mask[a : a + m, b : b + n].any()
    )


@given(position_pairs(), st.integers(1, 6), st.integers(1, 6))
def test_counts_under_a_window_are_the_masks(drawn, m, n) -> None:
    q, k, seg, causal, w = drawn
    docs = {} if seg is None else dict(q_seg=seg[q], k_seg=seg[k])
    mask = brute_mask(int(max(q.max(), k.max())) + 1, causal, seg, w)[np.ix_(q, k)]
    kw = dict(causal=causal, sliding_window=w, **docs)
    assert count_visible(q, k, **kw) == mask.sum()
    assert count_visible(q, k, tile=m, tile_n=n, **kw) == _tiles_by_hand(mask, m, n)


@given(
    st.integers(-30, 30),
    st.integers(1, 8),
    st.integers(1, 8),
    st.integers(1, 4),
    st.booleans(),
    st.integers(1, 20),
)
def test_pairs_of_two_runs_in_closed_form(offset, n, m, stride, causal, w) -> None:
    """Queries ``q0 + s a`` against keys ``k0 + s b``, ``q0 - k0 = offset``: the closed form is
    the count of the rule's pairs, enumerated."""
    low, high = offset_bounds(causal, w)
    want = sum(1 for a in range(n) for b in range(m) if low <= offset + stride * (a - b) <= high)
    assert int(pairs_within(offset, n, m, stride, low, high)) == want


# ---------------------------------------------------------------------------------------------
# the schedule
# ---------------------------------------------------------------------------------------------


@st.composite
def window_schedules(draw: st.DrawFn, pass_: str | None = None, documents: bool = True):
    layout = draw(st.sampled_from(layout_names()))
    hosts = draw(st.integers(1, 12))
    n = get_layout(layout).divisor(hosts) * draw(st.integers(1, 3))
    seg = None
    if documents and draw(st.booleans()):
        seg = random_segments(np.random.default_rng(draw(seeds)), n)
    tile = draw(st.sampled_from([None, 1, 2, 3]))
    return build_schedule(
        hosts,
        layout,
        draw(st.booleans()),
        pass_ or draw(st.sampled_from(["forward", "backward"])),
        seq_len=n,
        segment_ids=seg,
        tile=tile,
        tile_n=None if tile is None else draw(st.integers(1, 3)),
        sliding_window=draw(st.integers(1, n + 2)),
    )


def _cell_masks(sched: Schedule) -> np.ndarray:
    """``(P, P, c, c)`` the rule's mask of query host ``i`` against kv host ``j``, by loops."""
    pos = host_positions(sched.layout, sched.hosts, sched.seq_len, sched.segment_ids)
    full = brute_mask(sched.seq_len, sched.causal, sched.segment_ids, sched.sliding_window)
    return np.array([[full[np.ix_(qs, ks)] for ks in pos] for qs in pos])


@given(window_schedules())
def test_work_kinds_and_liveness_are_the_masks(sched) -> None:
    masks = _cell_masks(sched)
    P, c = sched.hosts, sched.block_tokens
    hosts = np.arange(P)
    tile = sched.tile or 1
    tile_n = sched.tile_n or tile
    for s in range(P):
        cell = masks[hosts, sched.kv_owner(s)]
        exact = cell.mean(axis=(1, 2))
        tiled = [_tiles_by_hand(m, tile, tile_n) / c**2 for m in cell]
        np.testing.assert_allclose(sched.exact_work_at(s), exact, rtol=0, atol=1e-12)
        np.testing.assert_allclose(sched.work_at(s), tiled, rtol=0, atol=1e-12)
        np.testing.assert_array_equal(sched.live_at(s), exact > 0)
        np.testing.assert_array_equal(sched.kind_at(s) == BlockKind.SKIP, exact == 0)
        np.testing.assert_array_equal(sched.kind_at(s) == BlockKind.FULL, exact == 1)
    live = masks.any(axis=(2, 3))  # (query host, kv host)
    steps = [s for s in range(P) if live[hosts, sched.kv_owner(s)].any()]
    assert sched.live_steps == tuple(steps)
    np.testing.assert_array_equal(sched.live_pairs, live.sum(axis=1))
    np.testing.assert_array_equal(sched.live, [live[hosts, sched.kv_owner(s)] for s in range(P)])
    assert sched.live_steps[0] == 0  # every token sees itself


@given(
    st.sampled_from(["contiguous", "striped"]),
    st.integers(1, 16),
    st.integers(1, 6),
    st.integers(1, 60),
    st.booleans(),
)
def test_closed_forms_of_the_live_steps_and_pairs(layout, hosts, c, w, causal) -> None:
    """Contiguous: the window reaches ``ceil((W - 1) / c)`` blocks back (causal: the ring runs
    that many steps and one, host ``h`` computes ``min(h, reach) + 1`` blocks); striped: every
    host computes ``min(P, W)`` blocks (not causal ``min(P, 2W - 1)``). Held against the
    schedule's enumeration."""
    sched = build_schedule(hosts, layout, causal, seq_len=hosts * c, sliding_window=w)
    lay = get_layout(layout)
    assert lay.window_live_steps(hosts, c, w, causal) == len(sched.live_steps)
    np.testing.assert_array_equal(lay.window_live_pairs(hosts, c, w, causal), sched.live_pairs)
    if layout == "contiguous" and causal:
        reach = min(-(-(w - 1) // c), hosts - 1)
        assert sched.ring_steps == tuple(range(reach + 1))  # the ring stops early


def _walk(sched: Schedule) -> list[np.ndarray]:
    """Follow the messages: ``holders[n][h]`` the block host ``h`` holds at ring step ``n``,
    then (backward) after the homecoming. Blocks move only by ``recv_from_at`` and only when
    the step has a payload."""
    held = np.arange(sched.hosts)
    out = []
    for s in sched.ring_steps:
        out.append(held)
        if sched.payload(s):
            held = held[sched.recv_from_at(s)]
    out.append(held)
    return out


@given(window_schedules(documents=False))
def test_the_windowed_ring_brings_every_block_where_it_is_needed(sched) -> None:
    """At every ring step each host holds the block the schedule says; no live cell falls on a
    skipped step; the ring ends at the last live step; backward, every block's gradients end
    on its owner, in one message after the last step."""
    walk = _walk(sched)
    for held, s in zip(walk, sched.ring_steps, strict=False):
        np.testing.assert_array_equal(held, sched.kv_owner(s))
    skipped = [s for s in range(sched.steps) if s not in sched.ring_steps]
    assert not sched.live[skipped].any()
    last = sched.ring_steps[-1]
    assert last == max(s for s in range(sched.steps) if sched.live_at(s).any())
    if sched.pass_ == "backward":
        np.testing.assert_array_equal(walk[-1], np.arange(sched.hosts))
        assert sched.payload(last) == (("dk", "dv") if last > 0 else ())
        assert sched.sends_per_host("dk") == len(sched.ring_steps) - (last == 0)
    else:
        assert sched.payload(last) == ()
        assert sched.sends_per_host("k") == len(sched.ring_steps) - 1
    hops = [sched.hops_after(s) for s in sched.ring_steps[:-1]]
    assert sum(hops) == last  # the jumps add up to the ring's turn, no hop wasted


@given(st.sampled_from(layout_names()), st.integers(1, 12), st.booleans(), st.booleans(), seeds)
def test_without_a_window_the_schedule_is_the_full_ring(layout, hosts, causal, backward, seed):
    """No window: every step is a ring step, every message one hop to the neighbour, the payloads
    as before (the last forward step sends nothing, the last backward one sends dk, dv home).
    A window as long as the sequence keeps every pair: its work and kinds are the same."""
    n = get_layout(layout).divisor(hosts) * 2
    seg = random_segments(np.random.default_rng(seed), n) if layout == "per-document" else None
    pass_ = "backward" if backward else "forward"
    kw = dict(seq_len=n, segment_ids=seg)
    sched = build_schedule(hosts, layout, causal, pass_, **kw)
    assert tuple(sched.ring_steps) == tuple(range(hosts))
    for s in range(hosts):
        last = s == hosts - 1
        np.testing.assert_array_equal(sched.send_to_at(s), sched.send_to)
        np.testing.assert_array_equal(sched.recv_from_at(s), sched.recv_from)
        if hosts == 1:
            want = ()
        elif backward:
            want = ("dk", "dv") if last else ("k", "v", "dk", "dv")
        else:
            want = () if last else ("k", "v")
        assert sched.payload(s) == want
    whole = build_schedule(hosts, layout, causal, pass_, sliding_window=n, **kw)
    np.testing.assert_array_equal(whole.work, sched.work)
    np.testing.assert_array_equal(whole.kind, sched.kind)


def test_describe_shows_the_steps_the_window_skips() -> None:
    text = build_schedule(4, "zigzag", True, "backward", seq_len=16, sliding_window=2).describe()
    assert "window 2" in text
    assert "2 | (skipped" in text
    assert "kv1 part =>1" in text  # step 3: host 0 holds host 1's block, sends dk, dv home


def test_window_of_one_token_computes_only_the_diagonal() -> None:
    for layout in layout_names():
        seg = np.zeros(8, dtype=np.int64)
        sched = build_schedule(
            2, layout, True, "backward", seq_len=8, segment_ids=seg, sliding_window=1
        )
        assert sched.ring_steps == (0,)
        assert sched.payload(0) == ()  # nothing ever leaves its host


# ---------------------------------------------------------------------------------------------
# the numerics: every executor exact under the window
# ---------------------------------------------------------------------------------------------


@st.composite
def window_cases(draw: st.DrawFn, **kw) -> Case:
    case = draw(ring_cases(**kw))
    n = case.q.shape[-2]
    return dataclasses.replace(case, sliding_window=draw(st.integers(1, n + 2)))


@given(window_cases())
def test_ring_forward_under_a_window(case: Case) -> None:
    record = RingRecord()
    out, lse = ring_attention(case.q, case.k, case.v, return_lse=True, record=record, **case.kwargs)
    assert_forward_exact(case, out, lse)
    sched = build_schedule(
        case.hosts,
        case.layout,
        case.causal,
        seq_len=case.q.shape[-2],
        segment_ids=case.segment_ids,
        sliding_window=case.sliding_window,
    )
    assert len(record.steps) == len(sched.ring_steps)  # the ring ran its live steps only


@given(window_cases())
def test_ring_backward_under_a_window(case: Case) -> None:
    assert_backward_exact(
        case, ring_attention_backward(case.q, case.k, case.v, case.dout, **case.kwargs)
    )


@given(window_cases(max_hosts=6))
def test_the_reference_and_the_block_primitive_take_the_window(case: Case) -> None:
    """``reference_attention(_grad)`` under the window is the definition; one block call over
    the whole sequence (all positions, one host) is too."""
    kw = dict(
        causal=case.causal,
        scale=case.scale,
        segment_ids=case.segment_ids,
        sliding_window=case.sliding_window,
    )
    assert_forward_exact(
        case, reference_attention(case.q, case.k, case.v, **kw).astype(case.q.dtype)
    )
    grads = reference_attention_grad(case.q, case.k, case.v, case.dout, **kw)
    assert_backward_exact(case, tuple(g.astype(case.q.dtype) for g in grads))
    pos = np.arange(case.q.shape[-2])
    seg = case.segment_ids
    part = block_attention(
        case.q,
        case.k,
        case.v,
        scale=case.used_scale,
        q_pos=pos,
        k_pos=pos,
        causal=case.causal,
        q_seg=seg,
        k_seg=seg,
        sliding_window=case.sliding_window,
    )
    assert_forward_exact(case, part.out.astype(case.q.dtype), part.lse)


@st.composite
def hybrid_window_cases(draw: st.DrawFn) -> tuple[Case, dict]:
    case, extra = draw(hybrid_cases())
    n = case.q.shape[-2]
    return dataclasses.replace(case, sliding_window=draw(st.integers(1, n + 2))), extra


@given(hybrid_window_cases())
def test_every_strategy_forward_under_a_window(drawn) -> None:
    """Ulysses x ring, the double ring (several rounds), the all-gather, Ulysses alone."""
    case, extra = drawn
    out, lse = hybrid_attention(case.q, case.k, case.v, return_lse=True, **case.kwargs, **extra)
    assert_forward_exact(case, out, lse)


@given(hybrid_window_cases())
def test_every_strategy_backward_under_a_window(drawn) -> None:
    case, extra = drawn
    grads = hybrid_attention_backward(case.q, case.k, case.v, case.dout, **case.kwargs, **extra)
    assert_backward_exact(case, grads)


@pytest.mark.parametrize("layout", ["contiguous", "zigzag", "striped"])
def test_jumps_of_many_hops_are_exact_on_a_long_ring(layout) -> None:
    """16 hosts, a short window: the contiguous ring stops after two steps, zigzag jumps from
    step 1 to step 15 (its late chunks need the later hosts' blocks), striped runs all; all
    exact, forward and backward."""
    rng = np.random.default_rng(7)
    n, w = 64, 3
    q, dout = (rng.standard_normal((2, n, 4)) for _ in range(2))
    k, v = (rng.standard_normal((1, n, 4)) for _ in range(2))
    case = Case(q, k, v, dout, 16, layout, True, None, None, "none", w)
    sched = build_schedule(16, layout, True, seq_len=n, sliding_window=w)
    expected = {"contiguous": (0, 1), "zigzag": (0, 1, 15), "striped": (0, 1, 2)}
    assert sched.ring_steps == expected[layout]
    assert_forward_exact(case, ring_attention(q, k, v, **case.kwargs))
    assert_backward_exact(case, ring_attention_backward(q, k, v, dout, **case.kwargs))


# ---------------------------------------------------------------------------------------------
# a gradient on the wrong host must not pass
# ---------------------------------------------------------------------------------------------


def _zigzag_case() -> Case:
    rng = np.random.default_rng(5)
    q, dout = (rng.standard_normal((2, 32, 3)) for _ in range(2))
    k, v = (rng.standard_normal((1, 32, 3)) for _ in range(2))
    return Case(q, k, v, dout, 8, "zigzag", True, None, None, "none", 2)


def test_a_jump_one_hop_short_is_refused_by_the_ring(monkeypatch) -> None:
    """Plant the bug: the homecoming jump falls one host short. The ring's own check (each
    block's gradients end on its owner) refuses it."""
    case = _zigzag_case()
    assert_backward_exact(
        case, ring_attention_backward(case.q, case.k, case.v, case.dout, **case.kwargs)
    )
    real = Schedule.hops_after

    def short(self, step):
        hops = real(self, step)
        return hops - 1 if self.pass_ == "backward" and step == self.ring_steps[-1] else hops

    monkeypatch.setattr(Schedule, "hops_after", short)
    with pytest.raises(AssertionError, match="ended on host"):
        ring_attention_backward(case.q, case.k, case.v, case.dout, **case.kwargs)


def test_gradients_scattered_to_the_wrong_owner_are_caught_where_the_ring_check_passes(
    monkeypatch,
) -> None:
    """Plant the bug after the ring's check: the blocks of dk are written one host off (each
    block's owner label is right, its tokens wrong). Only the per-token comparison sees it."""
    case = _zigzag_case()
    out, lse = ring_attention(case.q, case.k, case.v, return_lse=True, **case.kwargs)
    real = ring_module._assemble
    calls = []

    def rolled(blocks, positions, like):
        calls.append(1)
        if len(calls) == 2:  # (dq, dk, dv): the second is dk
            blocks = blocks[1:] + blocks[:1]
        return real(blocks, positions, like)

    monkeypatch.setattr(ring_module, "_assemble", rolled)
    grads = ring_attention_backward(
        case.q, case.k, case.v, case.dout, out=out, lse=lse, **case.kwargs
    )
    with pytest.raises(AssertionError, match="dk"):
        assert_backward_exact(case, grads)


# ---------------------------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [0, -3, 1.5, True, "4", [4]])
def test_a_bad_window_is_refused_by_name(bad) -> None:
    x = np.zeros((8, 2))
    for call in (
        lambda: ring_attention(x, x, x, hosts=2, sliding_window=bad),
        lambda: hybrid_attention(x, x, x, hosts=2, ulysses_degree=1, sliding_window=bad),
        lambda: build_schedule(2, sliding_window=bad),
        lambda: reference_attention(x, x, x, sliding_window=bad),
    ):
        with pytest.raises(ValueError, match="sliding_window must be None or a positive"):
            call()


def test_a_window_longer_than_any_sequence_is_no_window() -> None:
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((16, 3)) for _ in range(3))
    for causal in (False, True):
        kw = dict(hosts=4, layout="zigzag", causal=causal)
        np.testing.assert_array_equal(
            ring_attention(q, k, v, sliding_window=2**70, **kw), ring_attention(q, k, v, **kw)
        )
