"""Ring attention on P virtual hosts equals the float64 reference, forward and backward.

Hypothesis draws hosts 1..16, every layout, causal or not, packed documents, GQA, batch dims,
head dims from 1, scales, float32/float64 and hostile values; tolerances are derived in
``strategies.py``. Also: the result does not depend on layout or host count, a gradient
returned to the wrong host is caught, and no host ever holds more than its blocks.
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
    rel_tol,
    ring_cases,
    seeds,
)

from ringsim import (
    RingRecord,
    build_schedule,
    get_layout,
    host_positions,
    layout_names,
    reference_attention,
    reference_attention_grad,
    ring_attention,
    ring_attention_backward,
)


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


def assert_grads_close(case: Case, grads: tuple[np.ndarray, ...], expected: tuple) -> None:
    """Per-token comparison of ``(dq, dk, dv)`` against ``expected``, tolerance from the terms."""
    tol = rel_tol(case.q, case.k, case.used_scale)
    magnitudes = grad_magnitudes(case.q, case.k, case.v, case.dout, case.used_scale, case.mask)
    for name, got, want, mag in zip(("dq", "dk", "dv"), grads, expected, magnitudes, strict=True):
        assert got.dtype == case.q.dtype
        assert_close_to(got, want, tol * mag, name)


@given(ring_cases())
def test_forward_matches_reference(case: Case) -> None:
    out, lse = ring_attention(case.q, case.k, case.v, return_lse=True, **case.kwargs)
    ref = reference_attention(
        case.q, case.k, case.v, causal=case.causal, scale=case.scale, segment_ids=case.segment_ids
    )
    assert out.dtype == case.q.dtype
    tol = rel_tol(case.q, case.k, case.used_scale)
    assert_close_to(out, ref, tol * np.abs(case.v.astype(np.float64)).max(), "out")
    want_lse = dense_lse(case.q, case.k, case.used_scale, case.mask)
    assert_close_to(lse, want_lse, tol * max(1.0, np.abs(want_lse).max()), "lse")


@given(ring_cases())
def test_backward_matches_reference(case: Case) -> None:
    grads = ring_attention_backward(case.q, case.k, case.v, case.dout, **case.kwargs)
    assert_grads_close(case, grads, reference_grads(case))


@given(ring_cases(max_hosts=6))
def test_backward_from_saved_lse_equals_recomputed(case: Case) -> None:
    out, lse = ring_attention(case.q, case.k, case.v, return_lse=True, **case.kwargs)
    saved = ring_attention_backward(
        case.q, case.k, case.v, case.dout, out=out, lse=lse, **case.kwargs
    )
    fresh = ring_attention_backward(case.q, case.k, case.v, case.dout, **case.kwargs)
    for a, b in zip(saved, fresh, strict=True):
        np.testing.assert_array_equal(a, b)


# ---------------------------------------------------------------------------------------------
# the answer does not depend on how the sequence is dealt out
# ---------------------------------------------------------------------------------------------

SEQ = 24  # divisible by every host count below (and by 2P for zigzag when P divides 12)


@st.composite
def two_rings(draw: st.DrawFn) -> tuple[dict, dict]:
    def ring() -> dict:
        layout = draw(st.sampled_from(layout_names()))
        divisors = [p for p in range(1, SEQ + 1) if SEQ % get_layout(layout).divisor(p) == 0]
        return dict(hosts=draw(st.sampled_from(divisors)), layout=layout)

    return ring(), ring()


@given(two_rings(), st.booleans(), st.booleans(), st.sampled_from([np.float32, np.float64]), seeds)
def test_independent_of_layout_and_host_count(rings, causal, packed, dtype, seed) -> None:
    rng = np.random.default_rng(seed)
    q, k, v, dout = (rng.standard_normal((2, SEQ, 4)).astype(dtype) for _ in range(4))
    segment_ids = np.sort(rng.integers(0, 4, SEQ)) if packed else None
    common = dict(causal=causal, segment_ids=segment_ids)
    (a, b) = rings
    tol = rel_tol(q, k, 0.5)
    out_a = ring_attention(q, k, v, **a, **common)
    out_b = ring_attention(q, k, v, **b, **common)
    assert_close_to(out_a, out_b.astype(np.float64), 2 * tol * np.abs(v).max(), "out")
    grads_a = ring_attention_backward(q, k, v, dout, **a, **common)
    grads_b = ring_attention_backward(q, k, v, dout, **b, **common)
    case = Case(q, k, v, dout, 1, "contiguous", causal, None, segment_ids, "none")
    magnitudes = grad_magnitudes(q, k, v, dout, case.used_scale, case.mask)
    for name, ga, gb, mag in zip(("dq", "dk", "dv"), grads_a, grads_b, magnitudes, strict=True):
        assert_close_to(ga, gb.astype(np.float64), 2 * tol * mag, name)


# ---------------------------------------------------------------------------------------------
# a dk/dv returned to the wrong host must not pass
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", layout_names())
@pytest.mark.parametrize("causal", [False, True])
def test_wrong_owner_would_be_caught(layout: str, causal: bool) -> None:
    """If the homecoming hop were missing, host h would end with the dk of block h+1.

    We build exactly that wrong answer from the correct one and check that the per-token
    comparison used by the property tests rejects it, while a norm comparison would not."""
    hosts, n = 4, 16
    rng = np.random.default_rng(7)
    q, k, v, dout = (rng.standard_normal((2, n, 3)) for _ in range(4))
    case = Case(q, k, v, dout, hosts, layout, causal, None, None, "none")
    dq, dk, dv = ring_attention_backward(q, k, v, dout, **case.kwargs)
    expected = reference_grads(case)
    assert_grads_close(case, (dq, dk, dv), expected)

    pos = host_positions(layout, hosts, n)
    wrong_dk = np.empty_like(dk)
    for h in range(hosts):
        wrong_dk[..., pos[h], :] = dk[..., pos[(h + 1) % hosts], :]
    np.testing.assert_allclose(np.linalg.norm(wrong_dk), np.linalg.norm(expected[1]))
    with pytest.raises(AssertionError, match="dk"):
        assert_grads_close(case, (dq, wrong_dk, dv), expected)


def test_executor_refuses_a_ring_that_does_not_bring_gradients_home(monkeypatch) -> None:
    """Drop the homecoming hop from the backward schedule: the executor must notice."""
    from ringsim.schedule import Schedule

    real_payload = Schedule.payload

    def no_homecoming(self, step):
        return (
            () if self.pass_ == "backward" and step == self.steps - 1 else real_payload(self, step)
        )

    monkeypatch.setattr(Schedule, "payload", no_homecoming)
    q = np.random.default_rng(0).standard_normal((8, 2))
    with pytest.raises(AssertionError, match="ended on host"):
        ring_attention_backward(q, q, q, q, hosts=4)


# ---------------------------------------------------------------------------------------------
# memory: a host holds its q block, one kv block, the one arriving, and accumulators
# ---------------------------------------------------------------------------------------------


def block_bytes(x: np.ndarray, hosts: int, dtype=None) -> int:
    """Bytes of one host's ``(..., c, d)`` block of ``x`` (in ``dtype`` if given)."""
    itemsize = np.dtype(dtype or x.dtype).itemsize
    return x.size // hosts * itemsize


@pytest.mark.parametrize("layout", layout_names())
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_forward_memory_bound(layout: str, causal: bool, dtype) -> None:
    hosts, n = 8, 32
    rng = np.random.default_rng(1)
    q = rng.standard_normal((4, n, 8)).astype(dtype)
    k, v = (rng.standard_normal((2, n, 8)).astype(dtype) for _ in range(2))
    record = RingRecord()
    ring_attention(q, k, v, hosts=hosts, layout=layout, causal=causal, record=record)
    sched = build_schedule(hosts, layout, causal, seq_len=n)
    row_bytes = block_bytes(q[..., 0], hosts, dtype)  # row_max and row_sum: one per query row
    bound = (
        block_bytes(q, hosts)  # own q block
        + 2 * (block_bytes(k, hosts) + block_bytes(v, hosts))  # current + incoming kv
        + block_bytes(q, hosts, dtype)
        + 2 * row_bytes  # acc, row_max, row_sum
    )
    assert bound < q.nbytes + k.nbytes + v.nbytes  # the bound is a real restriction
    assert_record_follows_schedule(record, sched, bound)


@pytest.mark.parametrize("layout", layout_names())
@pytest.mark.parametrize("causal", [False, True])
def test_backward_memory_bound(layout: str, causal: bool) -> None:
    hosts, n = 8, 32
    rng = np.random.default_rng(2)
    q, dout = (rng.standard_normal((4, n, 8)) for _ in range(2))
    k, v = (rng.standard_normal((2, n, 8)) for _ in range(2))
    record = RingRecord()
    ring_attention_backward(q, k, v, dout, hosts=hosts, layout=layout, causal=causal, record=record)
    sched = build_schedule(hosts, layout, causal, "backward", seq_len=n)
    kv = block_bytes(k, hosts) + block_bytes(v, hosts)
    rows = block_bytes(q[..., 0], hosts)
    bound = (
        3 * block_bytes(q, hosts)  # q, dout, dq stay home
        + 2 * rows  # lse and delta
        + 2 * 2 * kv  # current and incoming block, each with its dk, dv
    )
    assert bound < q.nbytes + dout.nbytes + 2 * (k.nbytes + v.nbytes)
    assert_record_follows_schedule(record, sched, bound)


def assert_record_follows_schedule(record: RingRecord, sched, bound: int) -> None:
    """Every step: q is home, the kv block is the scheduled one, the incoming block is the
    neighbour's, nothing else is held, and the bytes stay under ``bound``."""
    hosts = sched.hosts
    assert len(record.steps) == sched.steps
    for step, cells in enumerate(record.steps):
        owners = sched.kv_owner(step)
        for h, cell in enumerate(cells):
            assert cell["q"] == h, "q left its host"
            assert cell["kv"] == owners[h]
            incoming = owners[sched.recv_from[h]] if sched.payload(step) else None
            assert cell["incoming"] == incoming
            assert cell["to"] == (h + 1) % hosts
            assert cell["nbytes"] <= bound, f"host {h} holds {cell['nbytes']} > {bound} bytes"


# ---------------------------------------------------------------------------------------------
# hostile but representable inputs stay finite; unrepresentable ones are refused
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype, big", [(np.float32, 1e30), (np.float64, 1e200)])
@pytest.mark.parametrize("causal", [False, True])
def test_huge_values_and_scores_together(dtype, big: float, causal: bool) -> None:
    """Scores of +-1e4 (one-hot softmax) and values near the top of the range at once."""
    rng = np.random.default_rng(3)
    n, d = 16, 4
    q = rng.standard_normal((n, d))
    k, v, dout = (rng.standard_normal((n, d)) for _ in range(3))
    q *= 1e4 / np.abs(q @ k.T / 2).max()
    q, k, v, dout = (x.astype(dtype) for x in (q, k, v * big, dout))
    case = Case(q, k, v, dout, 4, "zigzag", causal, None, None, "both")
    out = ring_attention(q, k, v, **case.kwargs)
    tol = rel_tol(q, k, case.used_scale)
    ref = reference_attention(q, k, v, causal=causal)
    assert_close_to(out, ref, tol * np.abs(v.astype(np.float64)).max(), "out")
    grads = ring_attention_backward(q, k, v, dout, **case.kwargs)
    assert_grads_close(case, grads, reference_grads(case))


@given(ring_cases(max_hosts=8, hostile=("none",)))
def test_float16_inputs_compute_in_float32(case: Case) -> None:
    """float16 inputs are computed in float32 and rounded once at the end: the error is the
    float16 rounding of the result (2**-11 relative) plus the float32 tolerance."""
    q, k, v, dout = (x.astype(np.float16) for x in (case.q, case.k, case.v, case.dout))
    half = Case(
        q, k, v, dout, case.hosts, case.layout, case.causal, case.scale, case.segment_ids, "none"
    )
    tol = rel_tol(q, k, half.used_scale)
    out = ring_attention(q, k, v, **half.kwargs)
    ref = reference_attention(
        q, k, v, causal=half.causal, scale=half.scale, segment_ids=half.segment_ids
    )
    assert out.dtype == np.float16
    assert_close_to(out, ref, 2.0**-11 * np.abs(ref).max() + tol * np.abs(v).max(), "out")
    grads = ring_attention_backward(q, k, v, dout, **half.kwargs)
    magnitudes = grad_magnitudes(q, k, v, dout, half.used_scale, half.mask)
    for name, got, want, mag in zip(
        ("dq", "dk", "dv"), grads, reference_grads(half), magnitudes, strict=True
    ):
        assert got.dtype == np.float16
        assert_close_to(got, want, 2.0**-11 * np.abs(want).max() + tol * mag, name)
