"""Shared Hypothesis strategies and independent float64 helpers for the numerics tests.

Random arrays come from a NumPy generator seeded by Hypothesis (fast, and shrinkable through the
seed); the *shapes and options* are drawn by Hypothesis so failures shrink to small cases.

The helpers here are written from the definition of attention, independently of ``ringsim``,
so a test that compares the two is a real check and not the library against itself.

Tolerances (see ``rel_tol``)
----------------------------
Let ``eps`` be the unit roundoff of the dtype the ring computes in (float32 or float64).

* A score ``s = scale * q.k`` computed in floating point has an absolute error of at most about
  ``(d + 4) * eps * scale * sum_c |q_c k_c|`` (the dot product, the scaling and the shift by
  ``row_max``/``lse``). An error ``delta`` in the scores changes the softmax weights by a
  relative ``exp(2 delta) - 1 ~ 2 delta``, so the output moves by at most ``~2 delta max|v|``.
  This term is what grows with hostile scores (``|s| ~ 1e4`` in float32 gives ``delta ~ 1e-3``):
  it is the float32 input format's limit, not the ring's.
* Accumulating ``N <= 64`` keys over ``P <= 16`` merges adds ``O(N eps)`` relative to the
  magnitudes summed: ``4e-6`` in float32, ``1e-14`` in float64. We allow ``1e-4`` and
  ``1e-10`` (25x and 10^4x margin), which is what the project promises.

So ``|ring - reference| <= (base + 4 delta) * magnitude`` where ``magnitude`` is ``max|v|`` for
the output and the matching sum of absolute terms for each gradient (``grad_magnitudes``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from hypothesis import settings
from hypothesis import strategies as st

from ringsim.grid import PLACEMENTS
from ringsim.layouts import get_layout, layout_names
from ringsim.numerics.context_parallel import METHODS as METHOD_TABLE


def examples(ci: int) -> int:
    """Examples for a property that runs ``ci`` of them under the fast ``ci`` profile, scaled
    by the profile loaded (``conftest.py``): ``thorough`` runs 1000 where ``ci`` runs 40, so
    25 x ``ci`` here. A slow property asks for fewer than the profile's default this way and
    still deepens with it."""
    ratio = settings.default.max_examples / settings.get_profile("ci").max_examples
    return max(1, round(ci * ratio))


BASE_TOL = {np.dtype(np.float32): 1e-4, np.dtype(np.float64): 1e-10}
HOSTILE = ("none", "big_scores", "huge_v")
HUGE_V = {np.dtype(np.float32): 1e30, np.dtype(np.float64): 1e200}


# ---------------------------------------------------------------------------------------------
# independent float64 attention (written from the definition, per row)
# ---------------------------------------------------------------------------------------------


def expand_kv(x: np.ndarray, q_heads: int) -> np.ndarray:
    """Repeat kv heads ``(..., Hkv, N, d)`` to ``(..., Hq, N, d)`` (GQA: head h uses h // g)."""
    if x.ndim < 3:
        return x
    return np.repeat(x, q_heads // x.shape[-3], axis=-3)


def sum_groups(dx: np.ndarray, kv_heads: int) -> np.ndarray:
    """Sum ``(..., Hq, N, d)`` over the query heads sharing each kv head -> ``(..., Hkv, N, d)``."""
    if dx.ndim < 3:
        return dx
    hq = dx.shape[-3]
    return dx.reshape(*dx.shape[:-3], kv_heads, hq // kv_heads, *dx.shape[-2:]).sum(axis=-3)


def brute_mask(
    n: int, causal: bool, segment_ids: np.ndarray | None, sliding_window: int | None = None
) -> np.ndarray:
    """``(n, n)`` visible pairs by explicit loops: ``j <= i`` (causal), same document, and with a
    sliding window ``W`` the ``W`` latest keys ``i - W < j`` (not causal: ``|i - j| < W``)."""
    mask = np.ones((n, n), dtype=bool)
    for i in range(n):
        for j in range(n):
            if causal and j > i:
                mask[i, j] = False
            if segment_ids is not None and segment_ids[i] != segment_ids[j]:
                mask[i, j] = False
            if sliding_window is not None and not (i - sliding_window < j < i + sliding_window):
                mask[i, j] = False
    return mask


def dense_probs(q: np.ndarray, k: np.ndarray, scale: float, mask: np.ndarray) -> np.ndarray:
    """float64 softmax weights ``(..., Hq, N, N)``; kv heads expanded for GQA."""
    q64 = q.astype(np.float64)
    k64 = expand_kv(k.astype(np.float64), q.shape[-3] if q.ndim >= 3 else 1)
    scores = np.einsum("...id,...jd->...ij", q64, k64) * scale
    scores = np.where(mask, scores, -np.inf)
    top = scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores - top)
    return weights / weights.sum(axis=-1, keepdims=True)


def dense_lse(q: np.ndarray, k: np.ndarray, scale: float, mask: np.ndarray) -> np.ndarray:
    """float64 log-sum-exp of the visible scores ``(..., Hq, N)``."""
    q64 = q.astype(np.float64)
    k64 = expand_kv(k.astype(np.float64), q.shape[-3] if q.ndim >= 3 else 1)
    scores = np.where(mask, np.einsum("...id,...jd->...ij", q64, k64) * scale, -np.inf)
    top = scores.max(axis=-1)
    return top + np.log(np.exp(scores - top[..., None]).sum(axis=-1))


def dense_attention(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float, mask: np.ndarray
) -> np.ndarray:
    """float64 ``softmax(q k^T scale + mask) v`` ``(..., Hq, N, d)``; kv heads expanded."""
    hq = q.shape[-3] if q.ndim >= 3 else 1
    return dense_probs(q, k, scale, mask) @ expand_kv(v.astype(np.float64), hq)


def dense_grads(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, dout: np.ndarray, scale: float, mask: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """float64 ``(dq, dk, dv)`` from the definition: ``dv = P^T dO``, ``dS = P (dP - delta)``
    with ``dP = dO V^T`` and ``delta = rowsum(P dP)``, ``dq = scale dS K``, ``dk = scale dS^T Q``;
    ``dk``, ``dv`` summed over the query heads sharing a kv head."""
    hq = q.shape[-3] if q.ndim >= 3 else 1
    kv_heads = k.shape[-3] if k.ndim >= 3 else 1
    p = dense_probs(q, k, scale, mask)
    q64, do64 = q.astype(np.float64), dout.astype(np.float64)
    k64, v64 = (expand_kv(x.astype(np.float64), hq) for x in (k, v))
    dp = do64 @ v64.swapaxes(-1, -2)
    ds = p * (dp - (p * dp).sum(axis=-1, keepdims=True))
    dq = scale * ds @ k64
    dk = sum_groups(scale * ds.swapaxes(-1, -2) @ q64, kv_heads)
    dv = sum_groups(p.swapaxes(-1, -2) @ do64, kv_heads)
    return dq, dk, dv


def grad_magnitudes(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, dout: np.ndarray, scale: float, mask: np.ndarray
) -> tuple[float, float, float]:
    """Size of the terms each gradient sums, ``(M_dq, M_dk, M_dv)``: the scale of its rounding.

    ``dv = P^T dO``; ``dS = P (dP - delta)`` with ``dP = dO V^T`` and ``delta = rowsum(dO out)``;
    ``dq = scale dS K``; ``dk = scale dS^T Q``. The magnitudes replace every factor by its
    absolute value, so they bound what the float sums can lose even when the gradient itself
    cancels to nearly zero (one-hot softmax under hostile scores).
    """
    hq = q.shape[-3] if q.ndim >= 3 else 1
    p = dense_probs(q, k, scale, mask)
    aq, ado = np.abs(q.astype(np.float64)), np.abs(dout.astype(np.float64))
    ak = expand_kv(np.abs(k.astype(np.float64)), hq)
    av = expand_kv(np.abs(v.astype(np.float64)), hq)
    out_mag = p @ av
    delta_mag = (ado * out_mag).sum(axis=-1, keepdims=True)
    ds_mag = p * (ado @ av.swapaxes(-1, -2) + delta_mag)
    m_dq = abs(scale) * ds_mag @ ak
    m_dk = abs(scale) * ds_mag.swapaxes(-1, -2) @ aq
    m_dv = p.swapaxes(-1, -2) @ ado
    return float(m_dq.max()), float(m_dk.max()), float(m_dv.max())


def score_error(q: np.ndarray, k: np.ndarray, scale: float, dtype: np.dtype) -> float:
    """Bound ``delta`` on the absolute error of one score computed in ``dtype`` (see above)."""
    hq = q.shape[-3] if q.ndim >= 3 else 1
    aq = np.abs(q.astype(np.float64))
    ak = expand_kv(np.abs(k.astype(np.float64)), hq)
    eps = np.finfo(dtype).eps / 2
    return float((q.shape[-1] + 4) * eps * abs(scale) * (aq @ ak.swapaxes(-1, -2)).max())


def rel_tol(q: np.ndarray, k: np.ndarray, scale: float) -> float:
    """Relative tolerance for a ring result computed from inputs of ``q``'s dtype."""
    dtype = np.dtype(np.float64 if q.dtype == np.float64 else np.float32)
    return BASE_TOL[dtype] + 4 * score_error(q, k, scale, dtype)


def assert_close_to(actual: np.ndarray, expected: np.ndarray, atol: float, what: str) -> None:
    """Element-wise (per token, per head) comparison; a misplaced block cannot hide here."""
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    assert np.all(np.isfinite(actual)), f"{what}: non-finite values"
    err = np.abs(actual.astype(np.float64) - expected)
    worst = np.unravel_index(np.argmax(err), err.shape)
    assert err[worst] <= atol, (
        f"{what}: max error {err[worst]:.3e} at {worst} exceeds tolerance {atol:.3e}"
    )


# ---------------------------------------------------------------------------------------------
# Hypothesis strategies
# ---------------------------------------------------------------------------------------------


@dataclass
class Case:
    """One random ring-attention problem: inputs and the ring's keyword arguments."""

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    dout: np.ndarray
    hosts: int
    layout: str
    causal: bool
    scale: float | None
    segment_ids: np.ndarray | None
    hostile: str
    sliding_window: int | None = None
    kwargs: dict = field(init=False)

    def __post_init__(self) -> None:
        self.kwargs = dict(
            hosts=self.hosts,
            layout=self.layout,
            causal=self.causal,
            scale=self.scale,
            segment_ids=self.segment_ids,
        )
        if self.sliding_window is not None:
            self.kwargs["sliding_window"] = self.sliding_window

    @property
    def used_scale(self) -> float:
        return 1 / np.sqrt(self.q.shape[-1]) if self.scale is None else self.scale

    @property
    def mask(self) -> np.ndarray:
        return brute_mask(self.q.shape[-2], self.causal, self.segment_ids, self.sliding_window)


def assert_forward_exact(case: Case, out: np.ndarray, lse: np.ndarray | None = None) -> None:
    """``out`` (and ``lse``) against float64 attention from the definition on ``case.mask``,
    per token and head, in ``case.q``'s dtype."""
    tol = rel_tol(case.q, case.k, case.used_scale)
    ref = dense_attention(case.q, case.k, case.v, case.used_scale, case.mask)
    assert out.dtype == case.q.dtype
    assert_close_to(out, ref, tol * np.abs(case.v.astype(np.float64)).max(), "out")
    if lse is not None:
        want = dense_lse(case.q, case.k, case.used_scale, case.mask)
        assert_close_to(lse, want, tol * max(1.0, np.abs(want).max()), "lse")


def assert_backward_exact(case: Case, grads: tuple) -> None:
    """``(dq, dk, dv)`` against the definition's gradients on ``case.mask``, per token and
    head: a block of ``dk`` on the wrong host fails."""
    want = dense_grads(case.q, case.k, case.v, case.dout, case.used_scale, case.mask)
    tol = rel_tol(case.q, case.k, case.used_scale)
    magnitudes = grad_magnitudes(case.q, case.k, case.v, case.dout, case.used_scale, case.mask)
    for name, got, exp, mag in zip(("dq", "dk", "dv"), grads, want, magnitudes, strict=True):
        assert got.shape == exp.shape and got.dtype == case.q.dtype
        assert_close_to(got, exp, tol * mag, name)


def random_segments(rng: np.random.Generator, n: int) -> np.ndarray:
    """Document ids for ``n`` tokens with random boundaries (documents may be one token)."""
    starts = rng.random(n) < rng.uniform(0.05, 0.5)
    starts[0] = False
    return np.cumsum(starts).astype(np.int64)


@st.composite
def ring_cases(
    draw: st.DrawFn,
    max_hosts: int = 16,
    dtypes: tuple = (np.float32, np.float64),
    hostile: tuple = HOSTILE,
) -> Case:
    """Hosts 1..16, every layout, causal or not, segment ids, GQA, 0-2 batch dims, head dims
    from 1, scales, float32/float64 and hostile values. Sizes stay small: seq_len <= 4 * hosts."""
    hosts = draw(st.integers(1, max_hosts))
    layout = draw(st.sampled_from(layout_names()))
    causal = draw(st.booleans())
    dtype = np.dtype(draw(st.sampled_from(dtypes)))
    chunks = get_layout(layout).chunks_per_host
    per_host = chunks * draw(st.sampled_from([1, 2])) if chunks > 1 else draw(st.integers(1, 3))
    n = hosts * per_host
    d = draw(st.integers(1, 8))
    if draw(st.booleans()):
        head_shape: tuple[int, ...] = ()  # a bare (N, d) array: one head
        kv_heads = q_heads = 1
    else:
        batch = tuple(draw(st.lists(st.integers(1, 2), max_size=2)))
        kv_heads = draw(st.integers(1, 2))
        q_heads = kv_heads * draw(st.integers(1, 3))
        head_shape = (*batch, q_heads)
    kv_shape = (*head_shape[:-1], kv_heads) if head_shape else ()
    scale = draw(st.sampled_from([None, 1.0, 0.3, -0.5, 2.0]))
    mode = draw(st.sampled_from(hostile))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))

    q = rng.standard_normal((*head_shape, n, d))
    k = rng.standard_normal((*kv_shape, n, d))
    v = rng.standard_normal((*kv_shape, n, d))
    dout = rng.standard_normal((*head_shape, n, d))
    used = 1 / np.sqrt(d) if scale is None else scale
    if mode == "big_scores":
        target = draw(st.sampled_from([1e2, 1e3, 1e4]))
        scores = np.einsum("...id,...jd->...ij", q, expand_kv(k, q_heads)) * used
        largest = np.abs(scores).max()
        q = q * (target / largest)
    elif mode == "huge_v":
        v = v * HUGE_V[dtype]
    segment_ids = random_segments(rng, n) if draw(st.booleans()) else None
    q, k, v, dout = (x.astype(dtype) for x in (q, k, v, dout))
    return Case(q, k, v, dout, hosts, layout, causal, scale, segment_ids, mode)


seeds = st.integers(0, 2**32 - 1)


METHODS = tuple(METHOD_TABLE)


@st.composite
def hybrid_cases(draw: st.DrawFn, methods: tuple = METHODS) -> tuple[Case, dict]:
    """A random problem and hybrid keywords: ``U`` in 1..4, ``P = U R`` in 2..8 (double ring:
    ``R`` with a window strictly between 1 and ``R`` where one exists, so it runs several
    rounds); kv heads a multiple of ``U`` beside a ring, any number ``>= U`` for Ulysses."""
    method = draw(st.sampled_from(methods))
    ulysses = draw(st.integers(1, 4))
    if method == "double-ring":  # ring degrees with windows strictly between 1 and R
        ring = draw(st.sampled_from([r for r in (2, 3, 4, 6, 8) if r * ulysses <= 8]))
    else:
        ring = draw(st.integers(1 if ulysses > 1 else 2, 8 // ulysses))
    hosts = ulysses * ring
    window = None
    if method == "double-ring":
        divisors = [w for w in range(1, ring + 1) if ring % w == 0]
        window = draw(st.sampled_from([w for w in divisors if 1 < w < ring] or divisors))
    layout = draw(st.sampled_from(layout_names()))
    causal = draw(st.booleans())
    dtype = np.dtype(draw(st.sampled_from([np.float32, np.float64])))
    n = draw(st.integers(1, 2)) * get_layout(layout).divisor(hosts)
    d = draw(st.integers(1, 6))
    if ring == 1:
        kv_heads = draw(st.integers(ulysses, ulysses + 2))  # Ulysses: uneven head groups too
    else:
        kv_heads = ulysses * draw(st.integers(1, 2))
    q_heads = kv_heads * draw(st.integers(1, 2))
    batch = tuple(draw(st.lists(st.integers(1, 2), max_size=1)))
    bare = ulysses == 1 and kv_heads == q_heads == 1 and not batch and draw(st.booleans())
    head_shape = () if bare else (*batch, q_heads)
    kv_shape = () if bare else (*batch, kv_heads)
    scale = draw(st.sampled_from([None, 1.0, -0.5, 2.0]))
    mode = draw(st.sampled_from(["none", "none", "big_scores", "huge_v"]))
    rng = np.random.default_rng(draw(seeds))
    q = rng.standard_normal((*head_shape, n, d))
    k, v = (rng.standard_normal((*kv_shape, n, d)) for _ in range(2))
    dout = rng.standard_normal(q.shape)
    used = 1 / np.sqrt(d) if scale is None else scale
    if mode == "big_scores":
        scores = np.einsum("...id,...jd->...ij", q, expand_kv(k, q_heads if head_shape else 1))
        q = q * (draw(st.sampled_from([1e2, 1e3])) / np.abs(scores * used).max())
    elif mode == "huge_v":
        v = v * HUGE_V[dtype]
    segment_ids = random_segments(rng, n) if draw(st.booleans()) else None
    q, k, v, dout = (x.astype(dtype) for x in (q, k, v, dout))
    case = Case(q, k, v, dout, hosts, layout, causal, scale, segment_ids, mode)
    placement = draw(st.sampled_from(PLACEMENTS))
    extra = dict(ulysses_degree=ulysses, method=method, window=window, placement=placement)
    return case, extra
