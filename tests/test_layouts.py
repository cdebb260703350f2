"""Layouts are permutations with inverses, laid out as documented; the visible-pair counts
(``count_visible``) agree with the mask for every pair of hosts under every layout."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import random_segments, seeds

from ringsim import from_layout, get_layout, host_positions, layout_names, permutation, to_layout
from ringsim.layouts import inverse_permutation, positions_of_host
from ringsim.masks import count_visible, visible_mask


@st.composite
def layout_shapes(draw: st.DrawFn, max_hosts: int = 16) -> tuple[str, int, int]:
    layout = draw(st.sampled_from(layout_names()))
    hosts = draw(st.integers(1, max_hosts))
    unit = get_layout(layout).divisor(hosts)
    return layout, hosts, unit * draw(st.integers(1, 4))


@given(layout_shapes())
def test_permutation_and_inverse_round_trip(shape) -> None:
    layout, hosts, n = shape
    perm = permutation(layout, hosts, n)
    inv = inverse_permutation(layout, hosts, n)
    np.testing.assert_array_equal(np.sort(perm), np.arange(n))  # a permutation
    np.testing.assert_array_equal(perm[inv], np.arange(n))
    np.testing.assert_array_equal(inv[perm], np.arange(n))


@given(layout_shapes())
def test_each_host_holds_sorted_equal_blocks(shape) -> None:
    layout, hosts, n = shape
    pos = host_positions(layout, hosts, n)
    assert pos.shape == (hosts, n // hosts)
    assert np.all(np.diff(pos, axis=1) > 0)
    for h in range(hosts):
        np.testing.assert_array_equal(positions_of_host(layout, hosts, n, h), pos[h])


@given(layout_shapes())
def test_layouts_deal_tokens_as_documented(shape) -> None:
    layout, hosts, n = shape
    pos = host_positions(layout, hosts, n)
    c = n // hosts
    owner = np.empty(n, dtype=int)  # who holds each token
    for h in range(hosts):
        owner[pos[h]] = h
    tokens = np.arange(n)
    if layout == "contiguous":
        np.testing.assert_array_equal(owner, tokens // c)
    elif layout == "striped":  # round robin
        np.testing.assert_array_equal(owner, tokens % hosts)
    else:  # 2P chunks; host i holds chunk i and chunk 2P-1-i
        chunk = tokens // (c // 2)
        np.testing.assert_array_equal(owner, np.minimum(chunk, 2 * hosts - 1 - chunk))


@given(layout_shapes(), st.lists(st.integers(1, 3), max_size=2), seeds)
def test_to_and_from_layout_are_inverse(shape, batch, seed) -> None:
    layout, hosts, n = shape
    x = np.random.default_rng(seed).standard_normal((*batch, n, 3))
    laid = to_layout(x, layout, hosts)
    np.testing.assert_array_equal(from_layout(laid, layout, hosts), x)
    np.testing.assert_array_equal(to_layout(from_layout(x, layout, hosts), layout, hosts), x)
    pos = host_positions(layout, hosts, n)
    c = n // hosts
    for h in range(hosts):  # host-major order: host h's rows are its positions, in order
        np.testing.assert_array_equal(laid[..., h * c : (h + 1) * c, :], x[..., pos[h], :])


# ---------------------------------------------------------------------------------------------
# count_visible against the mask
# ---------------------------------------------------------------------------------------------


def tiles_by_hand(mask: np.ndarray, tile: int) -> int:
    """Pairs a tiled kernel computes: a tile with any visible pair costs its full size."""
    rows = [mask[a : a + tile] for a in range(0, mask.shape[0], tile)]
    total = 0
    for band in rows:
        for b in range(0, mask.shape[1], tile):
            sub = band[:, b : b + tile]
            total += sub.size if sub.any() else 0
    return total


@given(layout_shapes(max_hosts=8), st.booleans(), st.booleans(), st.integers(1, 9), seeds)
def test_count_visible_matches_mask_for_all_host_pairs(shape, causal, packed, tile, seed) -> None:
    layout, hosts, n = shape
    pos = host_positions(layout, hosts, n)
    seg = random_segments(np.random.default_rng(seed), n) if packed else None
    for i in range(hosts):
        for j in range(hosts):
            segs = {} if seg is None else dict(q_seg=seg[pos[i]], k_seg=seg[pos[j]])
            # explicit rule, written here: key j visible to query i if j <= i and same doc
            mask = np.ones((len(pos[i]), len(pos[j])), dtype=bool)
            if causal:
                mask &= pos[j][None, :] <= pos[i][:, None]
            if seg is not None:
                mask &= seg[pos[i]][:, None] == seg[pos[j]][None, :]
            lib_mask = visible_mask(pos[i], pos[j], causal=causal, **segs)
            exact = count_visible(pos[i], pos[j], causal=causal, **segs)
            assert exact == mask.sum()
            if lib_mask is not None:
                np.testing.assert_array_equal(lib_mask, mask)
                assert exact == lib_mask.sum()
            assert count_visible(pos[i], pos[j], causal=causal, tile=tile, **segs) == tiles_by_hand(
                mask, tile
            )


@pytest.mark.parametrize("layout", layout_names())
def test_count_visible_on_huge_blocks_is_cheap_and_right(layout: str) -> None:
    """The searchsorted path on a million-token block equals the closed form."""
    hosts, n = 4, 1 << 22
    q_pos = positions_of_host(layout, hosts, n, 1)
    c = len(q_pos)
    diag = count_visible(q_pos, q_pos, causal=True)
    if layout == "contiguous":
        assert diag == c * (c + 1) // 2
    elif layout == "striped":  # positions differ by multiples of P: the same triangle
        assert diag == c * (c + 1) // 2
    else:  # two chunks of c/2: two triangles plus chunk-vs-mirror fully visible
        half = c // 2
        assert diag == 2 * (half * (half + 1) // 2) + half * half
