"""The ring schedule as data: sends, ownership, block kinds and work fractions."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import random_segments, seeds

from ringsim import BlockKind, build_schedule, get_layout, host_positions, layout_names

hosts_st = st.integers(1, 16)


@st.composite
def schedules(draw: st.DrawFn, pass_: str | None = None):
    layout = draw(st.sampled_from(layout_names()))
    hosts = draw(hosts_st)
    unit = get_layout(layout).divisor(hosts)
    seq_len = unit * draw(st.integers(1, 3))
    causal = draw(st.booleans())
    pass_ = pass_ or draw(st.sampled_from(["forward", "backward"]))
    return build_schedule(hosts, layout, causal, pass_, seq_len=seq_len)


def sends(sched, item: str) -> int:
    """Count, step by step, how often each host sends ``item``."""
    return sum(item in sched.payload(s) for s in range(sched.steps))


@given(schedules(pass_="forward"))
def test_forward_sends_p_minus_one_kv_blocks(sched) -> None:
    p = sched.hosts
    assert sends(sched, "k") == sends(sched, "v") == p - 1
    assert sends(sched, "dk") == 0
    assert sched.sends_per_host("k") == p - 1
    assert sched.payload(sched.steps - 1) == ()


@given(schedules(pass_="backward"))
def test_backward_sends_and_homecoming(sched) -> None:
    p = sched.hosts
    assert sends(sched, "k") == sends(sched, "v") == p - 1
    assert sends(sched, "dk") == sends(sched, "dv") == (p if p > 1 else 0)
    if p > 1:
        last = sched.steps - 1
        assert set(sched.payload(last)) == {"dk", "dv"}
        # the block each host holds at the last step belongs to the host it sends to
        np.testing.assert_array_equal(sched.kv_owner(last), sched.send_to)


@given(schedules())
def test_ownership_is_a_ring(sched) -> None:
    p = sched.hosts
    owners = sched.kv_owners
    assert owners.shape == (p, p)
    np.testing.assert_array_equal(owners[0], np.arange(p))  # step 0: own block
    for s in range(p):
        np.testing.assert_array_equal(np.sort(owners[s]), np.arange(p))  # permutation
    for h in range(p):
        np.testing.assert_array_equal(np.sort(owners[:, h]), np.arange(p))  # sees each once
    for s in range(p - 1):  # what h holds next is what its left neighbour holds now
        np.testing.assert_array_equal(owners[s + 1], owners[s][sched.recv_from])
    np.testing.assert_array_equal(sched.send_to[sched.recv_from], np.arange(p))


def brute_work(layout: str, hosts: int, n: int, causal: bool, seg=None) -> np.ndarray:
    """``(P, P)`` visible fraction of (query host i, kv host j), from explicit comparisons."""
    pos = host_positions(layout, hosts, n)
    c = n // hosts
    work = np.zeros((hosts, hosts))
    for i in range(hosts):
        for j in range(hosts):
            vis = np.ones((c, c), dtype=bool)
            if causal:
                vis &= pos[j][None, :] <= pos[i][:, None]
            if seg is not None:
                vis &= seg[pos[i]][:, None] == seg[pos[j]][None, :]
            work[i, j] = vis.mean()
    return work


@given(schedules(), st.booleans(), seeds)
def test_work_and_kinds_match_the_mask(sched, packed, seed) -> None:
    p, n = sched.hosts, sched.seq_len
    seg = random_segments(np.random.default_rng(seed), n) if packed else None
    if packed:
        sched = build_schedule(
            p, sched.layout, sched.causal, sched.pass_, seq_len=n, segment_ids=seg
        )
    want = brute_work(sched.layout, p, n, sched.causal, seg)
    for s in range(p):
        owners = sched.kv_owner(s)
        expected = want[np.arange(p), owners]
        np.testing.assert_allclose(sched.exact_work_at(s), expected, rtol=1e-12)
        np.testing.assert_allclose(sched.work_at(s), expected, rtol=1e-12)  # no tile: exact
        kind = sched.kind_at(s)
        np.testing.assert_array_equal(kind == BlockKind.SKIP, expected == 0)
        np.testing.assert_array_equal(kind == BlockKind.FULL, expected == 1)
    # total visible pairs over all blocks
    c = n // p
    total = sched.work.sum() * c * c
    if seg is None:
        assert round(total) == (n * (n + 1) // 2 if sched.causal else n * n)
    else:
        lengths = np.bincount(seg)
        assert round(total) == int(
            (lengths * (lengths + 1) // 2).sum() if sched.causal else (lengths**2).sum()
        )


@given(hosts_st, st.sampled_from(layout_names()))
def test_non_causal_is_all_full(hosts, layout) -> None:
    sched = build_schedule(hosts, layout, causal=False)
    assert np.all(sched.kind == BlockKind.FULL)
    assert np.all(sched.work == 1)


@given(hosts_st, st.integers(1, 3))
def test_causal_contiguous_skips_above_the_diagonal(hosts, per_host) -> None:
    sched = build_schedule(hosts, "contiguous", causal=True, seq_len=hosts * per_host)
    c = per_host
    for s in range(hosts):
        owners, kind, work = sched.kv_owner(s), sched.kind_at(s), sched.work_at(s)
        for h in range(hosts):
            if owners[h] < h:
                assert kind[h] == BlockKind.FULL and work[h] == 1
            elif owners[h] > h:
                assert kind[h] == BlockKind.SKIP and work[h] == 0
            else:  # the diagonal block: a triangle
                assert work[h] == pytest.approx((c + 1) / (2 * c))
                assert kind[h] == (BlockKind.FULL if c == 1 else BlockKind.PARTIAL)


@given(st.integers(2, 16), st.integers(1, 3))
def test_causal_zigzag_does_half_of_every_off_diagonal_block(hosts, per_half) -> None:
    sched = build_schedule(hosts, "zigzag", causal=True, seq_len=2 * hosts * per_half)
    for s in range(1, hosts):
        np.testing.assert_array_equal(sched.work_at(s), 0.5)
        assert np.all(sched.kind_at(s) == BlockKind.PARTIAL)


@given(st.integers(1, 12), st.sampled_from(layout_names()), st.integers(1, 3))
def test_causal_striped_and_zigzag_balance_every_step(hosts, layout, per_host) -> None:
    """Under balanced layouts the busiest host does at most one diagonal's extra work."""
    unit = get_layout(layout).divisor(hosts)
    sched = build_schedule(hosts, layout, causal=True, seq_len=unit * per_host)
    spread = sched.work.max(axis=1) - sched.work.min(axis=1)
    if layout == "contiguous":
        if hosts > 1:
            assert spread.max() == 1  # some host skips while another computes a full block
    else:
        c = unit * per_host // hosts
        assert spread.max() <= 1 / c + 1e-12


@given(schedules(), st.integers(1, 8))
def test_tiled_work_covers_exact_work(sched, tile) -> None:
    tiled = build_schedule(
        sched.hosts, sched.layout, sched.causal, sched.pass_, seq_len=sched.seq_len, tile=tile
    )
    assert np.all(tiled.work >= np.stack([tiled.exact_work_at(s) for s in range(sched.steps)]))
    assert np.all(tiled.work <= 1)
    np.testing.assert_array_equal(tiled.work == 0, sched.work == 0)  # empty blocks stay empty


def _tiles_by_hand(q_pos, k_pos, m: int, n: int, seg=None) -> int:
    """Cut the causal (and same-document) mask into ``m x n`` tiles; count the non-empty ones'
    pairs, one tile at a time."""
    mask = k_pos[None, :] <= q_pos[:, None]
    if seg is not None:
        mask &= seg[q_pos][:, None] == seg[k_pos][None, :]
    return sum(
        mask[a : a + m, b : b + n].size
        for a in range(0, len(q_pos), m)
        for b in range(0, len(k_pos), n)
        if mask[a : a + m, b : b + n].any()
    )


@given(schedules(), st.integers(1, 6), st.integers(1, 6), st.booleans(), seeds)
def test_rectangular_tiles_count_what_a_tiled_kernel_runs(sched, m, n, packed, seed) -> None:
    """``tile`` queries x ``tile_n`` keys: the closed form (and the packed-document mask) give
    the pairs of every non-empty ``m x n`` tile, counted by hand."""
    seg = random_segments(np.random.default_rng(seed), sched.seq_len) if packed else None
    tiled = build_schedule(
        sched.hosts,
        sched.layout,
        True,
        sched.pass_,
        seq_len=sched.seq_len,
        tile=m,
        tile_n=n,
        segment_ids=seg,
    )
    pos, c = tiled.positions, tiled.block_tokens
    for s in range(tiled.steps):
        owners = tiled.kv_owner(s)
        want = [
            _tiles_by_hand(pos[h], pos[owners[h]], m, n, seg) / c**2 for h in range(tiled.hosts)
        ]
        np.testing.assert_allclose(tiled.work_at(s), want, rtol=0, atol=1e-12)


@given(schedules(), st.integers(1, 8))
def test_a_square_tile_n_is_the_square_tile(sched, tile) -> None:
    """``tile_n == tile`` (or unset) is the square schedule bit for bit."""
    kw = dict(seq_len=sched.seq_len, tile=tile)
    square = build_schedule(sched.hosts, sched.layout, sched.causal, sched.pass_, **kw)
    same = build_schedule(sched.hosts, sched.layout, sched.causal, sched.pass_, tile_n=tile, **kw)
    np.testing.assert_array_equal(square.work, same.work)


def test_a_striped_block_of_one_key_tile_computes_every_tile() -> None:
    """Striped Attention's A100 tile (2048 queries x 4096 keys) on 4096-token blocks: one key
    tile per block, every query tile sees some key of it, so nothing is skipped (the paper:
    striped saves nothing there); square 2048 tiles skip a quarter of the later hosts' blocks."""
    rect = build_schedule(4, "striped", True, seq_len=4 * 4096, tile=2048, tile_n=4096)
    square = build_schedule(4, "striped", True, seq_len=4 * 4096, tile=2048)
    np.testing.assert_array_equal(rect.work, 1.0)
    assert square.work.min() == 0.75


def test_tile_n_needs_a_positive_tile() -> None:
    with pytest.raises(ValueError, match="tile_n"):
        build_schedule(2, tile_n=4)
    with pytest.raises(ValueError, match="tile_n"):
        build_schedule(2, tile=2, tile_n=0)


def test_describe_lists_every_step() -> None:
    text = build_schedule(4, "contiguous", causal=True, pass_="backward").describe()
    assert "kv3" in text and "skip" in text and "=>" in text
    assert len([line for line in text.splitlines() if "|" in line]) == 1 + 4
