"""Llama 3's all-gather per document (zhuzilin's ``llama3_flash_attn_varlen``), exact.

* What each host reads (``llama3_cu_seqlens``): its queries of each document, in order, and a
  run of that document's keys from its start that holds every key the rule lets those queries
  see, ending (causal) at the piece's last query, which aligns flash-attn's bottom-right causal
  mask with the global one, or (not causal) at the document's end. Checked by brute force on
  random documents.
* The strategy equals float64 attention from the definition, forward and backward, per token
  and head: random documents, 1 to 6 hosts, causal or not, sliding windows, GQA, kv heads
  gathered a few at a time, float32/float64.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import (
    Case,
    assert_backward_exact,
    assert_close_to,
    assert_forward_exact,
    brute_mask,
    dense_grads,
    random_segments,
    seeds,
)

import ringsim.numerics.varlen as varlen
from ringsim import llama3_cu_seqlens, llama3_varlen_attention, llama3_varlen_attention_backward
from ringsim.numerics.varlen import cu_seqlens_of


@st.composite
def packed(draw: st.DrawFn):
    hosts = draw(st.integers(1, 6))
    n = hosts * draw(st.integers(1, 6))
    rng = np.random.default_rng(draw(seeds))
    seg = random_segments(rng, n)
    return hosts, seg, draw(st.booleans()), draw(st.sampled_from([None, 1, 2, 4, 9])), rng


@given(packed())
def test_each_host_reads_its_documents_keys_and_no_more_than_their_start(drawn) -> None:
    hosts, seg, causal, window, _ = drawn
    n = seg.size
    per = n // hosts
    mask = brute_mask(n, causal, seg, window)
    for rank in range(hosts):
        sl = llama3_cu_seqlens(cu_seqlens_of(seg), hosts, rank, causal)
        mine = np.arange(rank * per, (rank + 1) * per)
        pieces = [
            mine[sl.cu_seqlens_q[d] : sl.cu_seqlens_q[d + 1]]
            for d in range(len(sl.cu_seqlens_q) - 1)
        ]
        np.testing.assert_array_equal(np.concatenate(pieces), mine)  # every query, in order
        assert sl.max_seqlen_q == max(len(p) for p in pieces)
        for d, rows in enumerate(pieces):
            keys = np.arange(sl.cu_seqlens_k[d], sl.cu_seqlens_k[d + 1]) + sl.k_slice.start
            assert keys.size and np.all(seg[rows] == seg[rows[0]])  # one document each
            doc = np.flatnonzero(seg == seg[rows[0]])
            assert keys[0] == doc[0] and np.all(seg[keys] == seg[rows[0]])
            assert keys[-1] == (rows[-1] if causal else doc[-1])  # bottom-right aligned
            seen = np.flatnonzero(mask[rows].any(axis=0))
            assert set(seen) <= set(keys)  # every key the rule shows is read
        assert sl.k_slice.start == np.flatnonzero(seg == seg[mine[0]])[0]
        assert sl.max_seqlen_k == max(np.diff(sl.cu_seqlens_k))


@st.composite
def varlen_cases(draw: st.DrawFn) -> tuple[Case, int | None]:
    hosts, seg, causal, window, rng = draw(packed())
    n = seg.size
    kv_heads = draw(st.integers(1, 2))
    heads = kv_heads * draw(st.integers(1, 2))
    dtype = np.dtype(draw(st.sampled_from([np.float32, np.float64])))
    bare = kv_heads == heads == 1 and draw(st.booleans())
    shape, kv_shape = ((), ()) if bare else ((heads,), (kv_heads,))
    q, dout = (rng.standard_normal((*shape, n, 3)).astype(dtype) for _ in range(2))
    k, v = (rng.standard_normal((*kv_shape, n, 3)).astype(dtype) for _ in range(2))
    scale = draw(st.sampled_from([None, 0.5, -1.0]))
    stride = draw(st.sampled_from([None, 1])) if kv_heads > 1 else None
    case = Case(q, k, v, dout, hosts, "contiguous", causal, scale, seg, "none", window)
    return case, stride


def _kw(case: Case, stride: int | None) -> dict:
    return dict(
        hosts=case.hosts,
        segment_ids=case.segment_ids,
        causal=case.causal,
        scale=case.scale,
        sliding_window=case.sliding_window,
        heads_k_stride=stride,
    )


@given(varlen_cases())
def test_forward_matches_the_definition(drawn) -> None:
    case, stride = drawn
    out, lse = llama3_varlen_attention(case.q, case.k, case.v, return_lse=True, **_kw(case, stride))
    assert_forward_exact(case, out, lse)


@given(varlen_cases())
def test_backward_matches_the_definition(drawn) -> None:
    case, stride = drawn
    grads = llama3_varlen_attention_backward(case.q, case.k, case.v, case.dout, **_kw(case, stride))
    assert_backward_exact(case, grads)


def test_a_reduce_scatter_onto_the_wrong_owner_is_caught(monkeypatch) -> None:
    """Plant the bug: the reduce-scatter hands owner ``r`` the sum of owner ``r + 1``'s tokens.
    Nothing in the strategy checks where a gradient lands; the per-token comparison does."""
    rng = np.random.default_rng(2)
    seg = np.repeat([0, 1, 2], [5, 7, 4])
    q, dout = (rng.standard_normal((2, 16, 3)) for _ in range(2))
    k, v = (rng.standard_normal((1, 16, 3)) for _ in range(2))
    case = Case(q, k, v, dout, 4, "contiguous", True, None, seg, "none")
    kw = dict(hosts=4, segment_ids=seg, causal=True)
    want = dense_grads(q, k, v, dout, case.used_scale, case.mask)
    assert_close_to(llama3_varlen_attention_backward(q, k, v, dout, **kw)[1], want[1], 1e-12, "dk")
    real = varlen._reduce_scatter

    def rolled(buffers, hosts):
        return np.roll(real(buffers, hosts), 16 // hosts, axis=-2)

    monkeypatch.setattr(varlen, "_reduce_scatter", rolled)
    with pytest.raises(AssertionError, match="dk"):
        got = llama3_varlen_attention_backward(q, k, v, dout, **kw)[1]
        assert_close_to(got, want[1], 1e-6, "dk")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(hosts=3), "seq_len must be divisible by hosts = 3"),
        (dict(hosts=2, segment_ids=np.array([0, 1, 0, 1, 0, 1, 0, 1])), "one run"),
        (dict(hosts=2, heads_k_stride=3), "heads_k_stride must divide"),
        (dict(hosts=2, sliding_window=0), "sliding_window must be None or a positive"),
        (dict(hosts=2, causal="yes"), "causal must be True or False"),
    ],
)
def test_bad_arguments_are_refused_by_name(kwargs, match) -> None:
    x = np.zeros((2, 8, 2))
    with pytest.raises(ValueError, match=match):
        llama3_varlen_attention(x, x, x, **kwargs)


@pytest.mark.parametrize(
    ("cu", "rank", "match"),
    [
        (np.array([0, 3, 3, 8]), 0, "strictly increasing"),
        (np.array([1, 8]), 0, "from 0"),
        (np.array([0, 8]), 2, "rank must be in"),
        (np.array([0, 7]), 0, "divisible by hosts=2"),
    ],
)
def test_bad_cu_seqlens_are_refused_by_name(cu, rank, match) -> None:
    with pytest.raises(ValueError, match=match):
        llama3_cu_seqlens(cu, 2, rank, True)
