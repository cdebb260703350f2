"""Hybrid sequence parallelism on P virtual hosts (Ulysses x ring, double ring, Ulysses,
all-gather) equals the float64 reference, forward and backward.

Hypothesis draws the grid (Ulysses degree U and ring degree R, 2 to 8 hosts), the method, the
double ring's window, the placement, every layout, causal or not, packed documents, GQA, batch
dims, scales, float32/float64 and hostile values; tolerances are the ring's (``strategies.py``).
Also: U = 1 is the ring and R = 1 is Ulysses bit for bit, the double ring with one window or
windows of one slot is the ring bit for bit, placement changes nothing, a gradient sent to the
wrong owner is caught, and bad arguments are refused naming the argument.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import (
    Case,
    assert_close_to,
    dense_lse,
    grad_magnitudes,
    hybrid_cases,
    random_segments,
    rel_tol,
    seeds,
)

import ringsim.numerics.hybrid as hybrid
from ringsim import (
    allgather_attention,
    allgather_attention_backward,
    double_ring_attention,
    double_ring_attention_backward,
    hybrid_attention,
    hybrid_attention_backward,
    layout_names,
    reference_attention,
    reference_attention_grad,
    ring_attention,
    ring_attention_backward,
    ulysses_attention,
    ulysses_attention_backward,
)
from ringsim.grid import PLACEMENTS, Grid, head_groups
from ringsim.layouts import host_positions


def reference_grads(case: Case) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return reference_attention_grad(
        case.q,
        case.k,
        case.v,
        case.dout,
        causal=case.causal,
        scale=case.scale,
        segment_ids=case.segment_ids,
    )


def assert_grads_close(case: Case, grads: tuple, expected: tuple) -> None:
    """Per token and head, as the ring's tests: a block of dk sent to the wrong owner fails."""
    tol = rel_tol(case.q, case.k, case.used_scale)
    magnitudes = grad_magnitudes(case.q, case.k, case.v, case.dout, case.used_scale, case.mask)
    for name, got, want, mag in zip(("dq", "dk", "dv"), grads, expected, magnitudes, strict=True):
        assert got.dtype == case.q.dtype
        assert_close_to(got, want, tol * mag, name)


# ---------------------------------------------------------------------------------------------
# exact against float64, every strategy
# ---------------------------------------------------------------------------------------------


@given(hybrid_cases())
def test_forward_matches_reference(drawn) -> None:
    case, extra = drawn
    out, lse = hybrid_attention(case.q, case.k, case.v, return_lse=True, **case.kwargs, **extra)
    ref = reference_attention(
        case.q, case.k, case.v, causal=case.causal, scale=case.scale, segment_ids=case.segment_ids
    )
    assert out.dtype == case.q.dtype
    tol = rel_tol(case.q, case.k, case.used_scale)
    assert_close_to(out, ref, tol * np.abs(case.v.astype(np.float64)).max(), "out")
    want_lse = dense_lse(case.q, case.k, case.used_scale, case.mask)
    assert_close_to(lse, want_lse, tol * max(1.0, np.abs(want_lse).max()), "lse")


@given(hybrid_cases())
def test_backward_matches_reference(drawn) -> None:
    case, extra = drawn
    grads = hybrid_attention_backward(case.q, case.k, case.v, case.dout, **case.kwargs, **extra)
    assert_grads_close(case, grads, reference_grads(case))


ROUNDS = [(1, 4, 2), (1, 6, 2), (1, 6, 3), (2, 4, 2)]  # (U, R, window): 2 or 3 rounds


@pytest.mark.parametrize(("ulysses", "ring", "window"), ROUNDS)
@pytest.mark.parametrize("layout", layout_names())
@pytest.mark.parametrize("causal", [False, True])
def test_double_ring_over_several_rounds(ulysses, ring, window, layout, causal) -> None:
    """Inner rings that do not cover the ring group: blocks cross the outer ring every round
    and their dk, dv must still end on their owners, token for token."""
    rng = np.random.default_rng(ring * window)
    n = 4 * ring * ulysses
    q, dout = (rng.standard_normal((1, 4, n, 3)) for _ in range(2))
    k, v = (rng.standard_normal((1, 2, n, 3)) for _ in range(2))
    case = Case(q, k, v, dout, ring * ulysses, layout, causal, None, None, "none")
    kw = dict(case.kwargs, ulysses_degree=ulysses, window=window)
    out = double_ring_attention(q, k, v, **kw)
    ref = reference_attention(q, k, v, causal=causal)
    assert_close_to(out, ref, 1e-12, "out")
    assert_grads_close(
        case, double_ring_attention_backward(q, k, v, dout, **kw), reference_grads(case)
    )


def test_double_ring_schedule_is_loongtrains() -> None:
    """Slot ``k w + i`` holds, at step ``j`` of round ``o``, the block of slot
    ``((k - o) mod R/w) w + (i - j) mod w`` (the timer's rule), so each slot sees every block
    once, and after the last round every block is home."""
    from ringsim.numerics.context_parallel import _DoubleRing
    from ringsim.numerics.ring import KVBlock

    R, w = 6, 2
    sched = hybrid.build_schedule(R, "contiguous", True, "forward", seq_len=2 * R)
    ring = _DoubleRing(sched, w, [KVBlock(h, None, None) for h in range(R)])
    seen = []
    for n, (held, kinds) in enumerate(ring.steps()):
        o, j = divmod(n, w)
        want = [((h // w - o) % (R // w)) * w + (h % w - j) % w for h in range(R)]
        assert [b.owner for b in held] == want
        assert list(kinds) == [1 if q == k else 2 * (k < q) for q, k in enumerate(want)]
        seen.append(want)
    assert np.array_equal(np.sort(np.array(seen), axis=0), np.tile(np.arange(R)[:, None], R))
    assert [b.owner for b in ring.blocks] == list(range(R))


# ---------------------------------------------------------------------------------------------
# the degenerate grids are the flat strategies, bit for bit
# ---------------------------------------------------------------------------------------------


def _same(a, b) -> None:
    for x, y in zip(
        a if isinstance(a, tuple) else (a,), b if isinstance(b, tuple) else (b,), strict=True
    ):
        np.testing.assert_array_equal(x, y)


@given(hybrid_cases(methods=("ring",)))
def test_ulysses_degree_one_is_the_ring(drawn) -> None:
    case, _ = drawn
    args, kw = (case.q, case.k, case.v), case.kwargs
    _same(
        hybrid_attention(*args, ulysses_degree=1, return_lse=True, **kw),
        ring_attention(*args, return_lse=True, **kw),
    )
    _same(
        hybrid_attention_backward(*args, case.dout, ulysses_degree=1, **kw),
        ring_attention_backward(*args, case.dout, **kw),
    )


@given(st.integers(2, 4), st.integers(1, 3), st.booleans(), st.booleans(), seeds)
def test_ring_degree_one_is_ulysses(hosts, extra_kv, causal, packed, seed) -> None:
    """``U = P``: the hybrid's ring of one slot, the double ring and the all-gather all reduce
    to Ulysses (one local attention per host between the all-to-alls)."""
    rng = np.random.default_rng(seed)
    kv_heads, n = hosts + extra_kv - 1, 2 * hosts
    q, dout = (rng.standard_normal((2 * kv_heads, n, 3)) for _ in range(2))
    k, v = (rng.standard_normal((kv_heads, n, 3)) for _ in range(2))
    seg = random_segments(rng, n) if packed else None
    kw = dict(hosts=hosts, causal=causal, segment_ids=seg)
    want = ulysses_attention(q, k, v, return_lse=True, **kw)
    want_grads = ulysses_attention_backward(q, k, v, dout, **kw)
    for method, window in (("ring", None), ("double-ring", 1), ("allgather", None)):
        got = hybrid_attention(
            q, k, v, ulysses_degree=hosts, method=method, window=window, return_lse=True, **kw
        )
        _same(got, want)
        grads = hybrid_attention_backward(
            q, k, v, dout, ulysses_degree=hosts, method=method, window=window, **kw
        )
        _same(grads, want_grads)
    case = Case(q, k, v, dout, hosts, "contiguous", causal, None, seg, "none")
    assert_grads_close(case, want_grads, reference_grads(case))


@given(hybrid_cases(methods=("double-ring",)), st.booleans())
def test_double_ring_of_one_window_or_unit_windows_is_the_ring(drawn, whole) -> None:
    """Windows of the whole ring group, or of one slot, visit the blocks in the flat ring's
    order, so they are the hybrid ring bit for bit, forward and backward."""
    case, extra = drawn
    ring_degree = case.hosts // extra["ulysses_degree"]
    extra = dict(extra, window=ring_degree if whole else 1)
    args, kw = (case.q, case.k, case.v), {**case.kwargs, **extra}
    flat = dict(kw, method="ring", window=None)
    _same(
        hybrid_attention(*args, return_lse=True, **kw),
        hybrid_attention(*args, return_lse=True, **flat),
    )
    _same(
        hybrid_attention_backward(*args, case.dout, **kw),
        hybrid_attention_backward(*args, case.dout, **flat),
    )


@given(hybrid_cases())
def test_placement_changes_only_the_rank_numbers(drawn) -> None:
    case, extra = drawn
    args, kw = (case.q, case.k, case.v), {**case.kwargs, **extra}
    other = dict(kw, placement=next(p for p in PLACEMENTS if p != extra["placement"]))
    _same(hybrid_attention(*args, **kw), hybrid_attention(*args, **other))
    _same(
        hybrid_attention_backward(*args, case.dout, **kw),
        hybrid_attention_backward(*args, case.dout, **other),
    )


def test_named_strategies_are_the_hybrid_with_their_method() -> None:
    rng = np.random.default_rng(3)
    q, k, v, dout = (rng.standard_normal((4, 24, 5)) for _ in range(4))
    kw = dict(hosts=4, causal=True)
    _same(
        double_ring_attention(q, k, v, window=2, ulysses_degree=2, **kw),
        hybrid_attention(q, k, v, ulysses_degree=2, method="double-ring", window=2, **kw),
    )
    _same(
        double_ring_attention_backward(q, k, v, dout, window=2, **kw),
        hybrid_attention_backward(
            q, k, v, dout, ulysses_degree=1, method="double-ring", window=2, **kw
        ),
    )
    _same(
        allgather_attention(q, k, v, **kw),
        hybrid_attention(q, k, v, ulysses_degree=1, method="allgather", layout="zigzag", **kw),
    )
    _same(
        allgather_attention_backward(q, k, v, dout, layout="striped", **kw),
        hybrid_attention_backward(
            q, k, v, dout, ulysses_degree=1, method="allgather", layout="striped", **kw
        ),
    )


# ---------------------------------------------------------------------------------------------
# the grid and the all-to-all
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize(("ulysses", "ring"), [(1, 4), (2, 2), (2, 3), (4, 1), (3, 2)])
def test_grid_groups_partition_the_hosts(placement, ulysses, ring) -> None:
    grid = Grid(ulysses, ring, placement)
    assert grid.ulysses_groups == [grid.ulysses_group(j) for j in range(ring)]
    assert grid.ring_groups == [grid.ring_group(u) for u in range(ulysses)]
    assert sorted(r for g in grid.ring_groups for r in g) == list(range(ulysses * ring))
    for u, ring_members in enumerate(grid.ring_groups):
        for j, ulysses_members in enumerate(grid.ulysses_groups):
            assert set(ring_members) & set(ulysses_members) == {grid.rank(u, j)}


@pytest.mark.parametrize("layout", layout_names())
def test_all_to_all_hands_each_host_its_heads_of_its_slot(layout) -> None:
    grid = Grid(2, 3, "ring-inner")
    n, heads = 24, 4
    x = np.arange(heads * n, dtype=float).reshape(heads, n, 1)  # value = head * n + token
    pos = grid.positions(layout, n)
    assert sorted(pos.reshape(-1)) == list(range(n))
    slots = host_positions(layout, grid.ring, n)
    groups = head_groups(heads, heads, grid.ulysses)
    moved = hybrid.scatter_heads(
        {r: x[:, p] for r, p in enumerate(pos)}, grid, [h for h, _ in groups]
    )
    for u in range(grid.ulysses):
        for j in range(grid.ring):
            np.testing.assert_array_equal(moved[grid.rank(u, j)], x[groups[u][0]][:, slots[j]])
    back = hybrid.gather_heads(moved, grid)
    for r, p in enumerate(pos):
        np.testing.assert_array_equal(back[r], x[:, p])


def test_uneven_ulysses_head_groups_keep_gqa_groups_whole() -> None:
    groups = head_groups(heads=10, kv_heads=5, ulysses=3)
    assert [(g.start, g.stop, kv.start, kv.stop) for g, kv in groups] == [
        (0, 4, 0, 2),
        (4, 8, 2, 4),
        (8, 10, 4, 5),
    ]


# ---------------------------------------------------------------------------------------------
# a gradient sent to the wrong owner must not pass
# ---------------------------------------------------------------------------------------------


def test_gradients_returned_to_the_wrong_owner_are_caught(monkeypatch) -> None:
    """Plant the bug: the inverse all-to-all sends member ``b``'s piece to member ``b + 1``.
    The per-token comparison used by the property tests must reject the result."""
    real = hybrid.gather_heads
    rng = np.random.default_rng(11)
    q, dout = (rng.standard_normal((4, 16, 3)) for _ in range(2))
    k, v = (rng.standard_normal((2, 16, 3)) for _ in range(2))
    case = Case(q, k, v, dout, 4, "zigzag", True, None, None, "none")
    kw = dict(case.kwargs, ulysses_degree=2)
    expected = reference_grads(case)
    assert_grads_close(case, hybrid_attention_backward(q, k, v, dout, **kw), expected)

    def rotated(blocks, grid):
        out = real(blocks, grid)
        groups = [grid.ulysses_group(j) for j in range(grid.ring)]
        return {g[(i + 1) % len(g)]: out[r] for g in groups for i, r in enumerate(g)}

    monkeypatch.setattr(hybrid, "gather_heads", rotated)
    with pytest.raises(AssertionError, match="dq"):
        assert_grads_close(case, hybrid_attention_backward(q, k, v, dout, **kw), expected)


# ---------------------------------------------------------------------------------------------
# bad input: ValueError naming the argument
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(hosts=4, ulysses_degree=3), "ulysses_degree must divide hosts=4"),
        (dict(hosts=4, ulysses_degree=0), "ulysses_degree must divide"),
        (dict(hosts=4, ulysses_degree=True), "ulysses_degree must be a positive integer"),
        (dict(hosts=8, ulysses_degree=8), "ulysses_degree=8 exceeds kv_heads=6"),
        (dict(hosts=8, ulysses_degree=4), "ulysses_degree=4 must divide kv_heads=6"),
        (dict(hosts=4, ulysses_degree=2, method="tree"), "method must be one of"),
        (dict(hosts=4, ulysses_degree=2, placement="x"), "placement must be one of"),
        (dict(hosts=4, ulysses_degree=1, method="double-ring"), "window must divide"),
        (dict(hosts=4, ulysses_degree=1, method="double-ring", window=3), "window=3"),
        (dict(hosts=4, ulysses_degree=1, window=2), "window is for method double-ring"),
        (dict(hosts=5, ulysses_degree=1), "seq_len must be divisible by hosts = 5"),
        (dict(hosts=6, ulysses_degree=3), "seq_len must be divisible by hosts = 6"),
        (dict(hosts=4, ulysses_degree=2, layout="diagonal"), "layout must be one of"),
    ],
)
def test_bad_arguments_are_refused_by_name(kwargs, match) -> None:
    q = np.zeros((6, 16, 2))
    with pytest.raises(ValueError, match=match):
        hybrid_attention(q, q, q, **kwargs)


def test_named_strategies_refuse_bad_arguments() -> None:
    q = np.zeros((2, 8, 2))
    with pytest.raises(ValueError, match="method is fixed"):
        double_ring_attention(q, q, q, hosts=2, window=1, method="ring")
    with pytest.raises(ValueError, match="ulysses_degree=4 exceeds kv_heads=2"):
        ulysses_attention(q, q, q, hosts=4)
    odd = np.zeros((2, 12, 2))
    with pytest.raises(ValueError, match=r"divisible by 2\*hosts = 8 for the zigzag"):
        hybrid_attention(odd, odd, odd, hosts=4, ulysses_degree=1, layout="zigzag")
    with pytest.raises(ValueError, match="dout must have the shape"):
        ulysses_attention_backward(q, q, q, q[:1], hosts=2)
