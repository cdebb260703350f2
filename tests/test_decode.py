"""Decoding against a KV cache sharded over P hosts equals dense attention."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ringsim import merge, reference_attention
from ringsim.numerics.decode import cache_shards, ring_decode, tree_merge


def tolerance(dtype):
    return {"rtol": 1e-10, "atol": 1e-12} if dtype == np.float64 else {"rtol": 1e-4, "atol": 1e-5}


@st.composite
def decode_case(draw):
    hosts = draw(st.integers(1, 8))
    cache_len = draw(st.integers(hosts, hosts + 30))
    kv_heads = draw(st.integers(1, 3))
    group = draw(st.integers(1, 3))
    batch = draw(st.sampled_from([(), (2,), (1, 2)]))
    head_dim = draw(st.integers(1, 8))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    scale = draw(st.one_of(st.none(), st.floats(0.05, 2.0)))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((*batch, kv_heads * group, 1, head_dim)).astype(dtype)
    k = rng.standard_normal((*batch, kv_heads, cache_len, head_dim)).astype(dtype)
    v = rng.standard_normal((*batch, kv_heads, cache_len, head_dim)).astype(dtype)
    return q, k, v, hosts, scale


@given(decode_case())
def test_ring_decode_equals_dense_attention(case):
    q, k, v, hosts, scale = case
    out = ring_decode(q, k, v, hosts=hosts, scale=scale)
    assert out.shape == q.shape
    assert out.dtype == q.dtype
    np.testing.assert_allclose(out, reference_attention(q, k, v, scale=scale), **tolerance(q.dtype))


@given(decode_case())
def test_each_partial_is_attention_over_its_shard(case):
    q, k, v, hosts, scale = case
    out, partials = ring_decode(q, k, v, hosts=hosts, scale=scale, return_partials=True)
    shards = cache_shards(k.shape[-2], hosts)
    assert len(partials) == hosts
    for part, (start, stop) in zip(partials, shards, strict=True):
        local = reference_attention(q, k[..., start:stop, :], v[..., start:stop, :], scale=scale)
        np.testing.assert_allclose(part.out, local, **tolerance(q.dtype))
        assert part.row_max.shape == q.shape[:-1]
    # a sequential left fold gives the same result as the tree
    state = partials[0]
    for part in partials[1:]:
        state = merge(state, part)
    np.testing.assert_allclose(state.out.astype(q.dtype), out, **tolerance(q.dtype))


def test_decode_without_head_axis():
    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((1, 4)), rng.standard_normal((9, 4)), rng.standard_normal((9, 4))
    np.testing.assert_allclose(ring_decode(q, k, v, hosts=4), reference_attention(q, k, v))


def test_decode_with_hostile_scores():
    # scores up to about +-1e4: the per-shard row_max and the merge keep exp() finite
    rng = np.random.default_rng(1)
    q = rng.standard_normal((2, 1, 8)) * 30
    k = rng.standard_normal((2, 64, 8)) * 30
    v = rng.standard_normal((2, 64, 8))
    out = ring_decode(q, k, v, hosts=7, scale=1.0)
    np.testing.assert_allclose(out, reference_attention(q, k, v, scale=1.0), rtol=1e-9, atol=1e-9)


@given(st.integers(1, 200), st.integers(1, 64))
def test_cache_shards_are_contiguous_near_equal_and_cover_the_cache(cache_len, hosts):
    if hosts > cache_len:
        with pytest.raises(ValueError, match=f"hosts={hosts}.*{cache_len}"):
            cache_shards(cache_len, hosts)
        return
    shards = cache_shards(cache_len, hosts)
    sizes = [stop - start for start, stop in shards]
    assert shards[0][0] == 0 and shards[-1][1] == cache_len
    assert all(a[1] == b[0] for a, b in itertools.pairwise(shards))
    assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("count", [1, 2, 3, 5, 8, 9, 16, 17])
def test_tree_merge_depth_is_log2(count):
    rng = np.random.default_rng(count)
    q = rng.standard_normal((1, 1, 4))
    k, v = rng.standard_normal((1, count, 4)), rng.standard_normal((1, count, 4))
    _, partials = ring_decode(q, k, v, hosts=count, return_partials=True)
    merged, depth = tree_merge(partials)
    assert depth == math.ceil(math.log2(count))
    np.testing.assert_allclose(merged.out, reference_attention(q, k, v), rtol=1e-12)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"hosts": 0}, "hosts"),
        ({"hosts": 2.0}, "hosts"),
        ({"hosts": 6}, "hosts=6.*length=5"),
        ({"q": np.zeros((4, 2, 8))}, "one token"),
        ({"q": np.zeros((3, 1, 8))}, "multiple of key/value heads"),
        ({"k": np.full((2, 5, 8), np.nan)}, "NaN"),
        ({"v": np.zeros((2, 5, 8), np.float32)}, "dtype"),
        ({"scale": 0.0}, "scale"),
    ],
)
def test_bad_input_raises_value_error(change, match):
    args = {"q": np.zeros((4, 1, 8)), "k": np.zeros((2, 5, 8)), "v": np.zeros((2, 5, 8))}
    args.update({"hosts": 2, "scale": None}, **change)
    with pytest.raises(ValueError, match=match):
        ring_decode(args["q"], args["k"], args["v"], hosts=args["hosts"], scale=args["scale"])


def test_float32_overflow_is_reported_not_returned():
    q = np.full((1, 4), 1e20, np.float32)
    k, v = np.full((5, 4), -1e20, np.float32), np.ones((5, 4), np.float32)
    with pytest.raises(ValueError, match="overflowed in float32"):
        ring_decode(q, k, v, hosts=2)
    # the same values in float64 are fine: every key scores the same
    out = ring_decode(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64), hosts=2)
    np.testing.assert_allclose(out, 1.0)


def test_tree_merge_of_nothing_is_refused():
    with pytest.raises(ValueError, match="partials"):
        tree_merge([])
