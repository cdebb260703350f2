"""Packed documents under context parallelism: the 2·CP padding rule and RoPE position ids.

* ``pad_documents`` pads each document at its end to the next multiple of ``2P`` (the fewest
  tokens that do), says how many it added, and keeps every real token in order; the padded
  batch is one the per-document layout (and zigzag, for one document) can deal.
* Under a causal mask (with or without a sliding window) the padded ring equals the unpadded
  float64 attention at every real token, forward and backward: no real query sees a pad.
* ``host_position_ids``: what each host feeds its rotary embedding, for every layout, gathered
  back equals ``0..len - 1`` within every document; rotating each host's shard with its ids is
  rotating the unsharded sequence.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from strategies import (
    Case,
    assert_backward_exact,
    assert_forward_exact,
    random_segments,
    seeds,
)

from ringsim import (
    from_layout,
    get_layout,
    host_position_ids,
    host_positions,
    layout_names,
    pad_documents,
    ring_attention,
    ring_attention_backward,
)
from ringsim.layouts import document_runs


@st.composite
def documents(draw: st.DrawFn):
    rng = np.random.default_rng(draw(seeds))
    return random_segments(rng, draw(st.integers(1, 30))), draw(st.integers(1, 6)), rng


@given(documents())
def test_padding_makes_each_document_a_multiple_of_2p_with_the_fewest_tokens(drawn) -> None:
    seg, hosts, _ = drawn
    pad = pad_documents(seg, hosts)
    _, lengths = document_runs(seg)
    starts, padded = document_runs(pad.segment_ids)
    assert np.all(padded % (2 * hosts) == 0)
    assert np.all((padded >= lengths) & (padded - lengths < 2 * hosts))
    assert pad.added == int((padded - lengths).sum()) == pad.segment_ids.size - seg.size
    np.testing.assert_array_equal(pad.segment_ids[pad.real], seg)  # tokens keep their document
    assert np.all(np.diff(pad.real) > 0)  # and their order
    np.testing.assert_array_equal(pad.real[np.r_[0, np.cumsum(lengths)[:-1]]], starts)
    x = np.arange(seg.size, dtype=float)[:, None]
    np.testing.assert_array_equal(pad.unpad(pad.pad(x, fill=-1.0)), x)
    assert np.count_nonzero(pad.pad(x, fill=-1.0) == -1.0) == pad.added
    get_layout("per-document").check_seq_len(pad.segment_ids.size, hosts, pad.segment_ids)


@given(documents(), st.booleans(), st.sampled_from([None, 1, 3, 8]))
def test_a_padded_causal_ring_is_exact_at_every_real_token(drawn, one_document, window) -> None:
    """Per-document layout on the padded batch (zigzag when it is one document); pads carry
    random values, their ``dout`` is 0, their outputs dropped."""
    seg, hosts, rng = drawn
    if one_document:
        seg = np.zeros_like(seg)
    layout = "zigzag" if one_document else "per-document"
    pad = pad_documents(seg, hosts)
    n = seg.size
    q, k, v, dout = (rng.standard_normal((2, n, 3)) for _ in range(4))

    def padded(x: np.ndarray) -> np.ndarray:  # random values at the padding
        out = rng.standard_normal((*x.shape[:-2], pad.segment_ids.size, x.shape[-1]))
        out[..., pad.real, :] = x
        return out

    qp, kp, vp = padded(q), padded(k), padded(v)
    dp = pad.pad(dout, fill=0.0)
    kw = dict(hosts=hosts, layout=layout, causal=True, sliding_window=window)
    kw["segment_ids"] = None if one_document else pad.segment_ids
    case = Case(q, k, v, dout, hosts, layout, True, None, seg, "none", window)
    assert_forward_exact(case, pad.unpad(ring_attention(qp, kp, vp, **kw)))
    grads = ring_attention_backward(qp, kp, vp, dp, **kw)
    assert_backward_exact(case, tuple(pad.unpad(g) for g in grads))


def _ids_by_hand(seg: np.ndarray | None, n: int) -> np.ndarray:
    """Each token's position within its document, counted by a loop."""
    if seg is None:
        return np.arange(n)
    out, seen = np.empty(n, dtype=np.int64), {}
    for i, d in enumerate(seg.tolist()):
        out[i] = seen.get(d, 0)
        seen[d] = out[i] + 1
    return out


def _rope(x: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Rotary embedding of ``x`` ``(n, 2m)`` at position ids ``ids`` (pairs of channels)."""
    m = x.shape[-1] // 2
    angle = ids[:, None] * 10000.0 ** (-np.arange(m) / m)
    cos, sin = np.cos(angle), np.sin(angle)
    a, b = x[:, :m], x[:, m:]
    return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)


@given(st.sampled_from(layout_names(documents=True)), st.integers(1, 5), st.booleans(), seeds)
def test_position_ids_follow_the_layout_and_gather_back(layout, hosts, packed, seed) -> None:
    rng = np.random.default_rng(seed)
    unit = get_layout(layout).divisor(hosts)
    if layout == "per-document":  # documents of whole 2P chunks
        seg = np.repeat(np.arange(3), unit * rng.integers(1, 3, 3))
        n = seg.size
    else:
        n = unit * int(rng.integers(1, 4))
        seg = random_segments(rng, n) if packed else None
    ids = host_position_ids(layout, hosts, n, seg)
    want = _ids_by_hand(seg, n)
    gathered = from_layout(ids.reshape(-1, 1), layout, hosts, seg)[:, 0]
    np.testing.assert_array_equal(gathered, want)
    x = rng.standard_normal((n, 4))
    rotated = _rope(x, want)
    pos = host_positions(layout, hosts, n, seg)
    for h in range(hosts):
        np.testing.assert_allclose(_rope(x[pos[h]], ids[h]), rotated[pos[h]], rtol=0, atol=0)


def test_padded_position_ids_of_real_tokens_are_unpadded_ones() -> None:
    seg = np.repeat([0, 1, 2], [3, 6, 1])
    pad = pad_documents(seg, 2)
    ids = host_position_ids("per-document", 2, pad.segment_ids.size, pad.segment_ids)
    gathered = from_layout(ids.reshape(-1, 1), "per-document", 2, pad.segment_ids)[:, 0]
    np.testing.assert_array_equal(gathered[pad.real], [0, 1, 2, 0, 1, 2, 3, 4, 5, 0])
    assert pad.added == 1 + 2 + 3
