"""Ulysses beyond the key/value heads: each kv head replicated across the all-to-all.

* The rule (verl's): ``U > Hkv`` is accepted exactly when ``U`` is a multiple of ``Hkv`` and
  divides the query heads; every other degree keeps its old answer.
* The head groups: every host gets ``H / U`` query heads and the one kv head they read; each kv
  head goes to ``U / Hkv`` hosts.
* Exact, forward and backward, against float64 attention from the definition (Ulysses alone and
  beside a ring, every layout and method, causal or not, documents, a sliding window), and a
  replica's gradient that is not summed back is caught by the per-token comparison.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import (
    METHODS,
    Case,
    assert_backward_exact,
    assert_forward_exact,
    random_segments,
    seeds,
)

import ringsim.numerics.hybrid as hybrid
from ringsim import (
    get_layout,
    hybrid_attention,
    hybrid_attention_backward,
    layout_names,
    ulysses_attention,
    ulysses_attention_backward,
)
from ringsim.grid import PLACEMENTS, check_ulysses_degree, head_groups


def verl_accepts(hosts: int, kv_heads: int, heads: int, u: int) -> bool:
    """The rule, written from its sources: ``U`` divides the hosts; up to ``Hkv`` whole heads
    (beside a ring ``U`` divides ``Hkv``); beyond, verl's asserts: ``heads % U == 0`` and
    ``U % Hkv == 0``."""
    if hosts % u:
        return False
    if u <= kv_heads:
        return not (1 < u < hosts and kv_heads % u)
    return heads % u == 0 and u % kv_heads == 0


@given(st.integers(1, 16), st.integers(1, 8), st.integers(1, 4), st.integers(1, 16))
def test_the_degree_rule_is_verls(hosts, kv_heads, group, u) -> None:
    heads = kv_heads * group
    if verl_accepts(hosts, kv_heads, heads, u):
        assert check_ulysses_degree(hosts, kv_heads, u, heads=heads) == u
    else:
        with pytest.raises(ValueError, match="ulysses_degree"):
            check_ulysses_degree(hosts, kv_heads, u, heads=heads)
    if u > kv_heads and hosts % u == 0:  # without the query heads: refused beyond the kv heads
        with pytest.raises(ValueError, match=f"ulysses_degree={u} exceeds kv_heads={kv_heads}"):
            check_ulysses_degree(hosts, kv_heads, u)


@given(st.integers(1, 4), st.integers(2, 4), st.integers(1, 3))
def test_each_host_gets_its_query_heads_and_the_kv_head_they_read(kv_heads, replicas, per):
    u = kv_heads * replicas
    heads = u * per
    groups = head_groups(heads, kv_heads, u)
    assert len(groups) == u
    seen = np.zeros(kv_heads, dtype=int)
    covered = []
    for q_heads, kv in groups:
        assert kv.stop - kv.start == 1 and q_heads.stop - q_heads.start == per
        for h in range(q_heads.start, q_heads.stop):
            assert h // (heads // kv_heads) == kv.start  # GQA: query head h reads kv h // g
        seen[kv.start] += 1
        covered += range(q_heads.start, q_heads.stop)
    assert covered == list(range(heads))
    np.testing.assert_array_equal(seen, replicas)


@st.composite
def replicated_cases(draw: st.DrawFn) -> tuple[Case, dict]:
    """``U = r Hkv`` (r >= 2) Ulysses hosts, alone (R = 1) or beside a ring of R <= 3, every
    layout and method, causal or not, documents, a sliding window, float32/float64."""
    kv_heads = draw(st.integers(1, 2))
    u = kv_heads * draw(st.integers(2, 4 // kv_heads))
    heads = u * draw(st.integers(1, 2))
    ring = draw(st.integers(1, 3))
    hosts = u * ring
    method = draw(st.sampled_from(METHODS))
    window = 1 if method == "double-ring" else None
    layout = draw(st.sampled_from(layout_names()))
    n = int(np.lcm(get_layout(layout).divisor(ring), hosts)) * draw(st.integers(1, 2))
    dtype = np.dtype(draw(st.sampled_from([np.float32, np.float64])))
    rng = np.random.default_rng(draw(seeds))
    q, dout = (rng.standard_normal((heads, n, 3)) for _ in range(2))
    k, v = (rng.standard_normal((kv_heads, n, 3)) for _ in range(2))
    seg = random_segments(rng, n) if draw(st.booleans()) else None
    if layout == "per-document":  # documents of 2R tokens, each cut into 2R chunks
        seg = np.repeat(np.arange(n // (2 * ring)), 2 * ring)
    q, k, v, dout = (x.astype(dtype) for x in (q, k, v, dout))
    causal = draw(st.booleans())
    sliding = draw(st.sampled_from([None, 1, 2, 5]))
    case = Case(q, k, v, dout, hosts, layout, causal, None, seg, "none", sliding)
    extra = dict(
        ulysses_degree=u,
        method=method,
        window=window,
        placement=draw(st.sampled_from(PLACEMENTS)),
    )
    return case, extra


def assert_exact(case: Case, out: np.ndarray, grads: tuple) -> None:
    assert_forward_exact(case, out)
    assert_backward_exact(case, grads)


@given(replicated_cases())
def test_replicated_kv_heads_are_exact_forward_and_backward(drawn) -> None:
    case, extra = drawn
    out = hybrid_attention(case.q, case.k, case.v, **case.kwargs, **extra)
    grads = hybrid_attention_backward(case.q, case.k, case.v, case.dout, **case.kwargs, **extra)
    assert_exact(case, out, grads)


def test_ulysses_on_more_hosts_than_kv_heads() -> None:
    """8 query heads and 2 kv heads on 8 Ulysses hosts: each kv head on 4 of them."""
    rng = np.random.default_rng(3)
    q, dout = (rng.standard_normal((8, 16, 4)) for _ in range(2))
    k, v = (rng.standard_normal((2, 16, 4)) for _ in range(2))
    case = Case(q, k, v, dout, 8, "contiguous", True, None, None, "none")
    kw = dict(hosts=8, causal=True)
    assert_exact(
        case, ulysses_attention(q, k, v, **kw), ulysses_attention_backward(q, k, v, dout, **kw)
    )


def test_a_replica_not_summed_back_is_caught(monkeypatch) -> None:
    """Plant the bug: each host keeps one replica's dk, dv instead of their sum (every
    replica's gradient covers only its own query heads)."""
    rng = np.random.default_rng(4)
    q, dout = (rng.standard_normal((4, 8, 3)) for _ in range(2))
    k, v = (rng.standard_normal((1, 8, 3)) for _ in range(2))
    case = Case(q, k, v, dout, 4, "contiguous", False, None, None, "none")
    kw = dict(hosts=4, ulysses_degree=4)
    out = hybrid_attention(q, k, v, **kw)
    assert_exact(case, out, hybrid_attention_backward(q, k, v, dout, **kw))

    def first_only(x, replicas):
        return x[..., ::replicas, :, :] if replicas > 1 else x

    monkeypatch.setattr(hybrid, "sum_replicas", first_only)
    with pytest.raises(AssertionError, match="dk"):
        assert_exact(case, out, hybrid_attention_backward(q, k, v, dout, **kw))


@pytest.mark.parametrize(
    ("kv_heads", "heads", "u", "match"),
    [
        (2, 6, 4, "exceeds kv_heads=2 \\(heads=6\\)"),  # 6 query heads on 4 hosts
        (3, 12, 4, "exceeds kv_heads=3"),  # 4 is not a multiple of 3
    ],
)
def test_replication_that_cannot_deal_whole_heads_is_refused(kv_heads, heads, u, match) -> None:
    q = np.zeros((heads, 8, 2))
    kv = np.zeros((kv_heads, 8, 2))
    with pytest.raises(ValueError, match=match):
        hybrid_attention(q, kv, kv, hosts=u, ulysses_degree=u)


def test_replication_beside_a_ring_sends_each_kv_head_to_its_group(monkeypatch) -> None:
    """U = 4 over 2 kv heads beside a ring of 2: the first all-to-all hands the kv block of
    head ``u // 2`` to head group ``u`` of every slot (watched on the way)."""
    sent = []
    real = hybrid.scatter_heads

    def watch(blocks, grid, heads):
        sent.append([(h.start, h.stop) for h in heads])
        return real(blocks, grid, heads)

    monkeypatch.setattr(hybrid, "scatter_heads", watch)
    rng = np.random.default_rng(0)
    q = rng.standard_normal((4, 16, 2))
    k = rng.standard_normal((2, 16, 2))
    hybrid_attention(q, k, k, hosts=8, ulysses_degree=4)
    assert sent[0] == [(0, 1), (1, 2), (2, 3), (3, 4)]  # query heads, one per host
    assert sent[1] == sent[2] == [(0, 1), (0, 1), (1, 2), (1, 2)]  # k, v: each head twice
