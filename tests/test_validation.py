"""Bad input raises ValueError whose message names the argument and shows the bad value."""

from __future__ import annotations

import numpy as np
import pytest

from ringsim import (
    build_schedule,
    host_positions,
    reference_attention,
    reference_attention_grad,
    ring_attention,
    ring_attention_backward,
)

RNG = np.random.default_rng(0)
Q = RNG.standard_normal((2, 8, 4))  # (heads, seq, dim)
KV = RNG.standard_normal((2, 8, 4))


def forward(q=Q, k=KV, v=KV, **kw):
    kw.setdefault("hosts", 2)
    return ring_attention(q, k, v, **kw)


def backward(q=Q, k=KV, v=KV, dout=Q, **kw):
    kw.setdefault("hosts", 2)
    return ring_attention_backward(q, k, v, dout, **kw)


def assert_refused(call, *fragments: str) -> None:
    with pytest.raises(ValueError) as info:
        call()
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"


@pytest.mark.parametrize("hosts", [0, -1, 2.5, True, "4", None, 4.0])
@pytest.mark.parametrize("entry", [forward, backward])
def test_hosts_must_be_a_positive_integer(entry, hosts) -> None:
    assert_refused(lambda: entry(hosts=hosts), "hosts", repr(hosts))


@pytest.mark.parametrize("hosts", [0, -1, 2.5, True, "4"])
def test_schedule_and_layout_refuse_bad_hosts(hosts) -> None:
    assert_refused(lambda: build_schedule(hosts), "hosts", repr(hosts))
    assert_refused(lambda: host_positions("striped", hosts, 8), "hosts", repr(hosts))


def test_numpy_integers_are_fine_hosts() -> None:
    np.testing.assert_allclose(forward(hosts=np.int64(4)), forward(hosts=4))


@pytest.mark.parametrize("entry", [forward, backward])
@pytest.mark.parametrize(
    "n, hosts, layout, needs",
    [
        (10, 4, "contiguous", "hosts = 4"),
        (9, 2, "striped", "hosts = 2"),
        (12, 4, "zigzag", "2*hosts = 8"),
        (6, 2, "zigzag", "2*hosts = 4"),
    ],
)
def test_seq_len_must_split_evenly(entry, n, hosts, layout, needs) -> None:
    x = RNG.standard_normal((n, 4))
    call = lambda: entry(
        x, x, x, **({"dout": x} if entry is backward else {}), hosts=hosts, layout=layout
    )
    assert_refused(call, "seq_len", str(n), needs)


@pytest.mark.parametrize("layout", ["diagonal", "Striped", None, 3])
@pytest.mark.parametrize("entry", [forward, backward])
def test_unknown_layout(entry, layout) -> None:
    assert_refused(lambda: entry(layout=layout), "layout", repr(layout))


def test_schedule_refuses_unknown_pass_and_tile() -> None:
    assert_refused(lambda: build_schedule(2, pass_="sideways"), "pass", "'sideways'")
    assert_refused(lambda: build_schedule(2, tile=0), "tile", "0")
    assert_refused(lambda: build_schedule(2, seq_len=3), "seq_len", "3")


SHAPE_CASES = [
    # (q shape, k shape, v shape, words that must appear)
    ((8, 4), (8, 3), (8, 3), ["head dim", "(8, 4)", "(8, 3)"]),
    ((8, 4), (8, 4), (8, 5), ["k and v", "(8, 4)", "(8, 5)"]),
    ((2, 1, 8, 4), (3, 1, 8, 4), (3, 1, 8, 4), ["batch", "(2, 1, 8, 4)", "(3, 1, 8, 4)"]),
    ((1, 8, 4), (8, 4), (8, 4), ["dims", "(1, 8, 4)", "(8, 4)"]),
    ((8, 4), (16, 4), (16, 4), ["same length", "8", "16"]),
    ((3, 8, 4), (2, 8, 4), (2, 8, 4), ["heads", "3", "2"]),  # GQA: 2 does not divide 3
    ((1, 8, 4), (2, 8, 4), (2, 8, 4), ["heads", "1", "2"]),  # more kv heads than q heads
    ((4,), (4,), (4,), ["q", "(4,)"]),
    ((0, 4), (0, 4), (0, 4), ["q", "(0, 4)"]),
    ((8, 0), (8, 0), (8, 0), ["q", "(8, 0)"]),
]


@pytest.mark.parametrize("q_shape, k_shape, v_shape, words", SHAPE_CASES)
def test_mismatched_shapes(q_shape, k_shape, v_shape, words) -> None:
    q, k, v = (np.ones(s) for s in (q_shape, k_shape, v_shape))
    assert_refused(lambda: forward(q, k, v), *words)
    assert_refused(lambda: backward(q, k, v, q), *words)


def test_reference_refuses_mismatched_shapes() -> None:
    q = np.ones((3, 8, 4))
    kv = np.ones((2, 8, 4))
    assert_refused(lambda: reference_attention(q, kv, kv), "heads", "3", "2")
    assert_refused(lambda: reference_attention_grad(q, kv, kv, q), "heads", "3", "2")
    assert_refused(
        lambda: reference_attention_grad(Q, KV, KV, Q[..., :2]), "dout", "(2, 8, 4)", "(2, 8, 2)"
    )


@pytest.mark.parametrize("entry", [forward, backward])
def test_mismatched_dtypes(entry) -> None:
    assert_refused(lambda: entry(q=Q.astype(np.float32)), "dtype", "float32", "float64")
    assert_refused(lambda: entry(v=KV.astype(np.float16)), "dtype", "float16", "float64")


def test_dout_must_match_q() -> None:
    assert_refused(lambda: backward(dout=Q[..., :4, :]), "dout", "(2, 8, 4)", "(2, 4, 4)")
    assert_refused(lambda: backward(dout=Q.astype(np.float32)), "dout", "float64", "float32")


@pytest.mark.parametrize("bad", [np.int64, np.int32, np.bool_, np.complex128, object])
@pytest.mark.parametrize("name", ["q", "k", "v"])
def test_non_float_dtypes(name, bad) -> None:
    arrays = {"q": Q, "k": KV, "v": KV}
    arrays[name] = arrays[name].astype(bad)
    assert_refused(lambda: forward(**arrays), name, str(np.dtype(bad)))


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("name", ["q", "k", "v", "dout"])
def test_non_finite_inputs(name, value) -> None:
    arrays = {"q": Q.copy(), "k": KV.copy(), "v": KV.copy(), "dout": Q.copy()}
    arrays[name][1, 5, 2] = value
    assert_refused(lambda: backward(**arrays), name, repr(value), "(1, 5, 2)")
    if name != "dout":
        del arrays["dout"]
        assert_refused(lambda: forward(**arrays), name, repr(value))
        assert_refused(lambda: reference_attention(**arrays), name, repr(value))


@pytest.mark.parametrize("scale", [float("nan"), 0, 0.0, float("inf"), "1", True])
@pytest.mark.parametrize("entry", [forward, backward])
def test_bad_scale(entry, scale) -> None:
    assert_refused(lambda: entry(scale=scale), "scale", repr(scale))


@pytest.mark.parametrize(
    "segment_ids, words",
    [
        (np.zeros(7, dtype=int), ["segment_ids", "(7,)"]),
        (np.zeros((2, 8), dtype=int), ["segment_ids", "(2, 8)"]),
        (np.zeros(8), ["segment_ids", "float64"]),
        (np.zeros(8, dtype=bool), ["segment_ids", "bool"]),
    ],
)
@pytest.mark.parametrize("entry", [forward, backward])
def test_bad_segment_ids(entry, segment_ids, words) -> None:
    assert_refused(lambda: entry(segment_ids=segment_ids), *words)


def test_bad_precision_option() -> None:
    assert_refused(lambda: forward(partial_dtype="bf8"), "partial_dtype", "'bf8'")
    assert_refused(lambda: forward(accum_dtype="int8"), "accum_dtype", "'int8'")


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("layout", ["contiguous", "zigzag"])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_float32_score_overflow_is_refused_not_nan(causal, layout, sign) -> None:
    """Scores beyond float32's range become +-inf; the ring must say so, not return NaN or a
    silently zeroed row (a row whose every score is -inf looks like a fully masked row)."""
    q = Q.astype(np.float32)
    k = KV.astype(np.float32)
    q[0, 5] = 1e20
    k[0] = sign * np.abs(k[0]) * 1e20 * np.sign(q[0, 5])
    with np.errstate(all="ignore"):
        assert_refused(lambda: forward(q, k, k, causal=causal, layout=layout), "overflow")
        assert_refused(lambda: backward(q, k, k, q, causal=causal, layout=layout), "overflow")


def test_the_same_scores_are_fine_in_float64() -> None:
    q, k = Q.copy(), KV.copy()
    q[0, 5] = 1e20
    k[0] = -np.abs(k[0]) * 1e20 * np.sign(q[0, 5])
    out = forward(q, k, k, causal=True)
    np.testing.assert_allclose(out, reference_attention(q, k, k, causal=True), atol=1e-10 * 1e20)
