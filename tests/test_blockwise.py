"""A whole transformer block run on the ring (blockwise feed-forward) equals the dense block."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ringsim import get_layout, layout_names
from ringsim.numerics.blockwise import (
    dense_block,
    ffn_peak_bytes,
    init_params,
    ring_block,
)


def tolerance(dtype):
    return {"rtol": 1e-9, "atol": 1e-10} if dtype == np.float64 else {"rtol": 1e-4, "atol": 2e-5}


@st.composite
def block_case(draw):
    hosts = draw(st.integers(1, 8))
    layout = draw(st.sampled_from(layout_names()))
    parts = get_layout(layout).divisor(hosts)
    seq_len = parts * draw(st.integers(1, 3))
    kv_heads = draw(st.integers(1, 2))
    heads = kv_heads * draw(st.integers(1, 3))
    d_model = heads * draw(st.integers(1, 3))
    d_ff = draw(st.integers(1, 12))
    batch = draw(st.sampled_from([(), (2,), (2, 1)]))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    block = seq_len // hosts
    ffn_chunk = draw(st.one_of(st.none(), st.integers(1, block + 2)))
    seed = draw(st.integers(0, 2**16))
    params = init_params(d_model, heads, kv_heads, d_ff, seed=seed)
    x = np.random.default_rng(seed + 1).standard_normal((*batch, seq_len, d_model)).astype(dtype)
    return {
        "x": x,
        "params": params,
        "hosts": hosts,
        "layout": layout,
        "causal": draw(st.booleans()),
        "ffn_chunk": ffn_chunk,
    }


@given(block_case())
def test_ring_block_equals_dense_block(case):
    x, params, causal = case["x"], case["params"], case["causal"]
    stats = {}
    out = ring_block(
        x,
        params,
        hosts=case["hosts"],
        layout=case["layout"],
        causal=causal,
        ffn_chunk=case["ffn_chunk"],
        stats=stats,
    )
    assert out.shape == x.shape and out.dtype == x.dtype
    np.testing.assert_allclose(out, dense_block(x, params, causal=causal), **tolerance(x.dtype))
    # the hidden activation each host built is the chunk's, never the whole sequence's
    peak = ffn_peak_bytes(
        x.shape[-2],
        params.d_ff,
        hosts=case["hosts"],
        ffn_chunk=case["ffn_chunk"],
        batch=int(np.prod(x.shape[:-2])),
        itemsize=4 if x.dtype == np.float32 else 8,
    )
    assert stats["ffn_hidden_peak_bytes"] == peak["blockwise"]


@pytest.mark.parametrize("causal", [False, True])
def test_block_output_does_not_depend_on_layout_hosts_or_chunk(causal):
    params = init_params(12, 4, 2, 48, seed=3)
    x = np.random.default_rng(4).standard_normal((2, 48, 12))
    first = ring_block(x, params, hosts=1, causal=causal)
    for hosts, layout, chunk in [(2, "contiguous", 5), (4, "striped", 1), (6, "zigzag", None)]:
        out = ring_block(x, params, hosts=hosts, layout=layout, causal=causal, ffn_chunk=chunk)
        np.testing.assert_allclose(out, first, rtol=1e-12, atol=1e-12)


def test_causal_block_sees_no_future_token():
    params = init_params(8, 2, 1, 16, seed=5)
    x = np.random.default_rng(6).standard_normal((16, 8))
    changed = x.copy()
    changed[10:] += 1.0
    out, out_changed = (
        ring_block(a, params, hosts=4, layout="zigzag", causal=True) for a in (x, changed)
    )
    np.testing.assert_allclose(out[:10], out_changed[:10], rtol=1e-12, atol=1e-12)
    assert not np.allclose(out[10:], out_changed[10:])


def test_blockwise_ffn_peak_is_chunk_by_d_ff():
    # one host, N = 4096, d_ff = 256: dense builds 4096 x 256, blockwise 64 x 256
    peak = ffn_peak_bytes(4096, 256, hosts=1, ffn_chunk=64, itemsize=4)
    assert peak == {"dense": 4096 * 256 * 4, "per_host": 4096 * 256 * 4, "blockwise": 64 * 256 * 4}
    peak = ffn_peak_bytes(4096, 256, hosts=8, ffn_chunk=1000, itemsize=2, batch=3)
    assert peak["per_host"] == peak["blockwise"] == 3 * 512 * 256 * 2
    # measured: the largest hidden ring_block actually builds
    params = init_params(8, 2, 2, 32, seed=0)
    stats = {}
    ring_block(np.ones((64, 8), np.float32), params, hosts=2, ffn_chunk=4, stats=stats)
    assert (
        stats["ffn_hidden_peak_bytes"]
        == 4 * 32 * 4
        == ffn_peak_bytes(64, 32, hosts=2, ffn_chunk=4)["blockwise"]
    )


def test_init_params_shapes():
    p = init_params(12, 6, 2, 40, seed=0)
    assert (p.d_model, p.head_dim, p.d_ff, p.heads, p.kv_heads) == (12, 2, 40, 6, 2)
    assert p.w_q.shape == (12, 12) and p.w_k.shape == p.w_v.shape == (12, 4)
    assert p.w_o.shape == (12, 12) and p.w_1.shape == (12, 40) and p.w_2.shape == (40, 12)
    assert p.attn_gain.shape == p.ffn_gain.shape == (12,)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((12, 5, 5, 8), "d_model"),
        ((12, 6, 4, 8), "kv_heads"),
        ((12, 6, 2, 0), "d_ff"),
        ((0, 1, 1, 8), "d_model"),
    ],
)
def test_init_params_rejects_bad_sizes(args, match):
    with pytest.raises(ValueError, match=match):
        init_params(*args)


@pytest.mark.parametrize(
    ("x", "kwargs", "match"),
    [
        (np.zeros((8, 5)), {}, "d_model=4"),
        (np.zeros((6, 4)), {"hosts": 4}, "divisible"),
        (np.zeros((12, 4)), {"hosts": 4, "layout": "zigzag"}, r"2\*hosts"),
        (np.zeros((8, 4)), {"hosts": 0}, "hosts"),
        (np.zeros((8, 4)), {"layout": "diagonal"}, "layout"),
        (np.zeros((8, 4)), {"ffn_chunk": 0}, "ffn_chunk"),
        (np.full((8, 4), np.inf), {}, "inf"),
        (np.zeros((8, 4), np.int64), {}, "dtype"),
    ],
)
def test_ring_block_rejects_bad_input(x, kwargs, match):
    params = init_params(4, 2, 1, 8)
    with pytest.raises(ValueError, match=match):
        ring_block(x, params, **{"hosts": 2, **kwargs})
