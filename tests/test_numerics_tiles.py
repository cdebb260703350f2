"""The NumPy executor a query tile at a time: the same answers as one untiled block, memory
that grows as c rather than c^2, and a backward exact wherever the forward is (huge tied
scores included)."""

import tracemalloc

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import ringsim
from ringsim.numerics import attention
from ringsim.numerics.attention import block_attention, block_attention_backward


def _blocks(rng, heads=4, kv_heads=2, c=24, d=8):
    draw = lambda h: rng.standard_normal((h, c, d)).astype(np.float32)
    return draw(heads), draw(kv_heads), draw(kv_heads), draw(heads)


@pytest.mark.parametrize("layout", ringsim.layout_names())
@pytest.mark.parametrize("segments", [False, True])
def test_one_row_tiles_equal_one_tile(monkeypatch, layout, segments):
    rng = np.random.default_rng(0)
    q, k, v, dout = _blocks(rng)
    pos = ringsim.host_positions(layout, 2, 48)
    seg = np.repeat(np.arange(4), 12)
    for i in range(2):
        for j in range(2):
            kw = dict(scale=0.3, q_pos=pos[i], k_pos=pos[j], causal=True)
            if segments:
                kw.update(q_seg=seg[pos[i]], k_seg=seg[pos[j]])
            results = []
            for tile_bytes in (1, 2**30):  # one row per tile; the whole block in one tile
                monkeypatch.setattr(attention, "TILE_BYTES", tile_bytes)
                part = block_attention(q, k, v, **kw)
                grads = block_attention_backward(
                    q, k, v, dout, part.lse, (dout * part.out).sum(-1), **kw
                )
                results.append((*part, *grads))
            for got, want in zip(*results, strict=True):
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_block_holds_one_tile_of_scores_not_c_squared():
    rng = np.random.default_rng(1)
    c, d = 4096, 64
    q, k, v = (rng.standard_normal((c, d)).astype(np.float32) for _ in range(3))
    pos = np.arange(c)
    tracemalloc.start()
    block_attention(q, k, v, scale=0.125, q_pos=pos, k_pos=pos, causal=True)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    blocks = 4 * c * d * 4  # q copy and the partial's acc, with room to spare
    assert peak < blocks + 3 * attention.TILE_BYTES  # scores of c x c would be 64 MiB
    assert peak < c * c * 4 / 4


# -- huge tied scores: the backward is exact where the forward is ------------------------------
@given(
    exponent=st.integers(0, 9),
    hosts=st.sampled_from([1, 2, 4]),
    layout=st.sampled_from(ringsim.layout_names()),
    float64=st.booleans(),
)
def test_backward_is_exact_for_huge_tied_scores(exponent, hosts, layout, float64):
    """q = k = a constant: every score is ``s``, tied. ``lse = s + log(count)`` rounds the log
    away once ``s`` dwarfs it; the ring keeps ``row_max`` and ``row_sum`` and stays exact."""
    dtype = np.float64 if float64 else np.float32
    score = 10.0 ** (exponent * (3 if float64 else 1))  # up to 1e27 in float64, 1e9 in float32
    n, d = 16, 4
    rng = np.random.default_rng(exponent)
    x = np.full((n, d), np.sqrt(score * np.sqrt(d) / d), dtype)
    v, dout = rng.standard_normal((2, n, d)).astype(dtype)
    got = ringsim.ring_attention_backward(x, x, v, dout, hosts=hosts, layout=layout, causal=True)
    want = ringsim.reference_attention_grad(x, x, v, dout, causal=True)
    eps = np.finfo(dtype).eps
    # a saved lse is kept where it lost at most LSE_LOSS of log(row_sum): p is then off by at
    # most its rounding, eps |s|, or LSE_LOSS; the old lse-only backward was off by O(1) here
    tol = 64 * eps + min(attention.LSE_LOSS, 2 * eps * score)
    for g, w in zip(got[1:], want[1:], strict=True):  # dk, dv: relative to their size
        np.testing.assert_allclose(g, w, atol=tol * np.abs(w).max(), rtol=tol)
    # dq cancels (every key is the same): compare on its natural scale, scale |k| |v| |dout| d
    natural = np.abs(x).max() * np.abs(v).max() * np.abs(dout).max() * np.sqrt(d)
    assert np.abs(got[0] - want[0]).max() <= (256 * eps + tol) * natural
