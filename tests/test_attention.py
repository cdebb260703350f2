"""The exact reference and the block primitive (block_attention, merge, backward).

The reference is checked against a per-row softmax written here with Python loops and its
gradients against central finite differences in float64. The block primitive is then checked
against the reference over arbitrary splits of the keys.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import (
    brute_mask,
    dense_lse,
    examples,
    expand_kv,
    random_segments,
    seeds,
    sum_groups,
)

from ringsim import (
    Partial,
    block_attention,
    block_attention_backward,
    merge,
    reference_attention,
    reference_attention_grad,
)
from ringsim.numerics.attention import empty_partial

# ---------------------------------------------------------------------------------------------
# the reference, from first principles
# ---------------------------------------------------------------------------------------------


def loop_attention(q, k, v, causal, scale, segment_ids) -> np.ndarray:
    """One head ``(N, d)``: every row's softmax by hand, with math.fsum for the sums."""
    n = q.shape[0]
    out = np.zeros_like(q, dtype=np.float64)
    for i in range(n):
        keys = [
            j
            for j in range(n)
            if (not causal or j <= i) and (segment_ids is None or segment_ids[i] == segment_ids[j])
        ]
        scores = [scale * math.fsum(q[i, c] * k[j, c] for c in range(q.shape[1])) for j in keys]
        top = max(scores)
        weights = [math.exp(s - top) for s in scores]
        total = math.fsum(weights)
        for c in range(v.shape[1]):
            out[i, c] = math.fsum(w * v[j, c] for w, j in zip(weights, keys, strict=True)) / total
    return out


@st.composite
def tiny_problems(draw: st.DrawFn, max_n: int = 6):
    """GQA heads ``(Hq, N, d)``/``(Hkv, N, d)`` in float64, causal or not, maybe packed."""
    n = draw(st.integers(1, max_n))
    d = draw(st.integers(1, 4))
    kv_heads = draw(st.integers(1, 2))
    q_heads = kv_heads * draw(st.integers(1, 2))
    rng = np.random.default_rng(draw(seeds))
    q = rng.standard_normal((q_heads, n, d)) * draw(st.sampled_from([0.1, 1.0, 3.0]))
    k, v = (rng.standard_normal((kv_heads, n, d)) for _ in range(2))
    segment_ids = random_segments(rng, n) if draw(st.booleans()) else None
    scale = draw(st.sampled_from([None, 0.7, -1.3]))
    return q, k, v, draw(st.booleans()), scale, segment_ids


@given(tiny_problems())
def test_reference_equals_per_row_softmax(problem) -> None:
    q, k, v, causal, scale, segment_ids = problem
    out = reference_attention(q, k, v, causal=causal, scale=scale, segment_ids=segment_ids)
    used = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    k_rep, v_rep = expand_kv(k, q.shape[0]), expand_kv(v, q.shape[0])
    for h in range(q.shape[0]):
        want = loop_attention(q[h], k_rep[h], v_rep[h], causal, used, segment_ids)
        np.testing.assert_allclose(out[h], want, rtol=1e-12, atol=1e-12 * np.abs(v).max())


@settings(max_examples=examples(15))
@given(tiny_problems(max_n=4))
def test_reference_grad_equals_finite_differences(problem) -> None:
    """Central differences of ``L = sum(dout * out)``; error ``O(h^2) + O(eps / h)`` ~ 1e-10."""
    q, k, v, causal, scale, segment_ids = problem
    dout = np.random.default_rng(q.size).standard_normal(q.shape)
    kw = dict(causal=causal, scale=scale, segment_ids=segment_ids)
    grads = reference_attention_grad(q, k, v, dout, **kw)

    def loss(qq, kk, vv) -> float:
        return float((dout * reference_attention(qq, kk, vv, **kw)).sum())

    step = 1e-5
    inputs = [q, k, v]
    for which, grad in enumerate(grads):
        numeric = np.zeros_like(grad)
        for idx in np.ndindex(grad.shape):
            plus = [x.copy() for x in inputs]
            minus = [x.copy() for x in inputs]
            plus[which][idx] += step
            minus[which][idx] -= step
            numeric[idx] = (loss(*plus) - loss(*minus)) / (2 * step)
        np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-7)


# ---------------------------------------------------------------------------------------------
# block_attention + merge over any split of the keys
# ---------------------------------------------------------------------------------------------


@st.composite
def split_problems(draw: st.DrawFn):
    """Queries at random global positions, keys cut into random (non-contiguous) groups."""
    n = draw(st.integers(2, 12))
    d = draw(st.integers(1, 5))
    kv_heads = draw(st.integers(1, 2))
    q_heads = kv_heads * draw(st.integers(1, 3))
    batch = tuple(draw(st.lists(st.integers(1, 2), max_size=2)))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    rng = np.random.default_rng(draw(seeds))
    q = rng.standard_normal((*batch, q_heads, n, d)).astype(dtype)
    k, v, dout = (rng.standard_normal((*batch, kv_heads, n, d)).astype(dtype) for _ in range(3))
    dout = rng.standard_normal(q.shape).astype(dtype)
    groups = draw(st.integers(1, n))
    labels = rng.permutation(np.arange(n) % groups)  # every group non-empty
    split = [np.flatnonzero(labels == g) for g in range(groups)]
    segment_ids = random_segments(rng, n) if draw(st.booleans()) else None
    return q, k, v, dout, draw(st.booleans()), segment_ids, split


def block_partials(q, k, v, causal, segment_ids, split, scale) -> list[Partial]:
    pos = np.arange(q.shape[-2])
    seg = (lambda idx: None) if segment_ids is None else (lambda idx: segment_ids[idx])
    return [
        block_attention(
            q,
            k[..., idx, :],
            v[..., idx, :],
            scale=scale,
            q_pos=pos,
            k_pos=idx,
            causal=causal,
            q_seg=seg(pos),
            k_seg=seg(idx),
        )
        for idx in split
    ]


def tol_for(x: np.ndarray) -> float:
    return 1e-4 if x.dtype == np.float32 else 1e-11


@given(split_problems(), st.randoms(use_true_random=False))
def test_merged_blocks_equal_reference(problem, random) -> None:
    q, k, v, _, causal, segment_ids, split = problem
    scale = 0.5
    parts = block_partials(q, k, v, causal, segment_ids, split, scale)
    random.shuffle(parts)
    state = empty_partial(q.shape, np.float64 if q.dtype == np.float64 else np.float32)
    for part in parts:
        state = merge(state, part)
    ref = reference_attention(q, k, v, causal=causal, scale=scale, segment_ids=segment_ids)
    tol = tol_for(q)
    np.testing.assert_allclose(state.out, ref, atol=tol * np.abs(v).max(), rtol=0)
    mask = brute_mask(q.shape[-2], causal, segment_ids)
    np.testing.assert_allclose(state.lse, dense_lse(q, k, scale, mask), atol=tol * 10, rtol=tol)


@given(split_problems())
def test_merge_is_commutative_and_associative(problem) -> None:
    q, k, v, _, causal, segment_ids, split = problem
    parts = block_partials(q, k, v, causal, segment_ids, split, 1.0)
    while len(parts) < 3:
        parts.append(parts[0])  # merging a block twice is still a valid partial algebraically
    a, b, c = parts[:3]
    # IEEE addition and max are commutative, so swapping operands is bit-exact
    for x, y in zip(merge(a, b), merge(b, a), strict=True):
        np.testing.assert_array_equal(x, y)
    left, right = merge(merge(a, b), c), merge(a, merge(b, c))
    tol = tol_for(q)
    np.testing.assert_allclose(left.out, right.out, atol=tol * np.abs(v).max(), rtol=0)
    np.testing.assert_allclose(left.lse, right.lse, atol=tol, rtol=tol)


@given(split_problems())
def test_empty_partial_is_identity(problem) -> None:
    q, k, v, _, causal, segment_ids, split = problem
    part = block_partials(q, k, v, causal, segment_ids, split, 1.0)[0]
    empty = empty_partial(part.acc.shape, part.acc.dtype)
    for merged in (merge(empty, part), merge(part, empty)):
        for x, y in zip(merged, part, strict=True):
            np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("how", ["causal", "segments"])
def test_fully_masked_rows_are_clean(dtype, how: str) -> None:
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 4, 3)).astype(dtype) * 1e3
    k, v = (rng.standard_normal((2, 5, 3)).astype(dtype) for _ in range(2))
    if how == "causal":  # every key comes after every query
        kw = dict(q_pos=np.arange(4), k_pos=np.arange(10, 15), causal=True)
    else:  # queries and keys in different documents
        kw = dict(
            q_pos=np.arange(4), k_pos=np.arange(4, 9), q_seg=np.zeros(4, int), k_seg=np.ones(5, int)
        )
    with np.errstate(all="raise"):
        empty = block_attention(q, k, v, scale=1.0, **kw)
    assert np.all(np.isneginf(empty.row_max))
    assert np.all(empty.row_sum == 0) and np.all(empty.acc == 0)
    assert np.all(empty.out == 0) and np.all(np.isneginf(empty.lse))
    full = block_attention(q, k, v, scale=1.0)
    for merged in (merge(empty, full), merge(full, empty)):
        for x, y in zip(merged, full, strict=True):
            np.testing.assert_array_equal(x, y)
    both_empty = merge(empty, empty)
    assert not any(np.isnan(x).any() for x in both_empty)
    assert np.all(both_empty.row_sum == 0)
    round_trip = Partial.from_out_lse(empty.out, empty.lse)
    assert np.all(round_trip.row_sum == 0) and np.all(round_trip.acc == 0)


@given(split_problems())
def test_from_out_lse_round_trips(problem) -> None:
    q, k, v, _, causal, segment_ids, split = problem
    parts = block_partials(q, k, v, causal, segment_ids, split, 1.0)
    tol = tol_for(q)
    for part in parts:
        again = Partial.from_out_lse(part.out, part.lse)
        np.testing.assert_allclose(again.out, part.out, atol=tol * np.abs(v).max(), rtol=0)
        np.testing.assert_allclose(again.lse, part.lse, rtol=tol, atol=tol)
        a, b = merge(again, parts[0]), merge(part, parts[0])
        np.testing.assert_allclose(a.out, b.out, atol=tol * np.abs(v).max(), rtol=0)


@given(split_problems(), st.integers(1, 4))
def test_block_backward_summed_over_blocks_equals_reference(problem, q_groups) -> None:
    """Cut queries and keys into blocks; summing each block's dq/dk/dv gives the gradients."""
    q, k, v, dout, causal, segment_ids, key_split = problem
    scale = 0.8
    n = q.shape[-2]
    kw = dict(causal=causal, scale=scale, segment_ids=segment_ids)
    out = reference_attention(q, k, v, **kw)
    mask = brute_mask(n, causal, segment_ids)
    lse = dense_lse(q, k, scale, mask)
    delta = (dout.astype(np.float64) * out).sum(axis=-1)
    query_split = np.array_split(np.arange(n), min(q_groups, n))
    dq, dk, dv = np.zeros(q.shape), np.zeros(k.shape), np.zeros(v.shape)
    seg = (lambda idx: None) if segment_ids is None else (lambda idx: segment_ids[idx])
    for qi in query_split:
        for ki in key_split:
            bq, bk, bv = block_attention_backward(
                q[..., qi, :],
                k[..., ki, :],
                v[..., ki, :],
                dout[..., qi, :],
                lse[..., qi],
                delta[..., qi],
                scale=scale,
                q_pos=qi,
                k_pos=ki,
                causal=causal,
                q_seg=seg(qi),
                k_seg=seg(ki),
            )
            dq[..., qi, :] += bq
            dk[..., ki, :] += bk
            dv[..., ki, :] += bv
    want = reference_attention_grad(q, k, v, dout, **kw)
    tol = tol_for(q)
    for name, got, ref in zip(("dq", "dk", "dv"), (dq, dk, dv), want, strict=True):
        scale_of = max(1.0, np.abs(ref).max())
        np.testing.assert_allclose(got, ref, atol=tol * scale_of * n, rtol=0, err_msg=name)


def test_gqa_gradients_sum_over_shared_heads() -> None:
    """A kv head shared by g query heads collects the gradient of all g (vs explicit repeat)."""
    rng = np.random.default_rng(5)
    q, dout = (rng.standard_normal((4, 6, 3)) for _ in range(2))
    k, v = (rng.standard_normal((2, 6, 3)) for _ in range(2))
    dq, dk, dv = reference_attention_grad(q, k, v, dout, causal=True)
    dq_r, dk_r, dv_r = reference_attention_grad(
        q, expand_kv(k, 4), expand_kv(v, 4), dout, causal=True
    )
    np.testing.assert_allclose(dq, dq_r, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(dk, sum_groups(dk_r, 2), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(dv, sum_groups(dv_r, 2), rtol=1e-13, atol=1e-13)
