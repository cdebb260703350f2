"""Attention, exactly and blockwise.

Shapes follow real models: ``q`` is ``(..., Hq, Nq, d)`` and ``k``, ``v`` are
``(..., Hkv, Nk, d)`` with ``Hq`` a multiple of ``Hkv`` (grouped-query attention shares each
key/value head among ``Hq / Hkv`` query heads). Two-dimensional ``(N, d)`` arrays are a single
head.

Two things live here:

* ``reference_attention`` and ``reference_attention_grad``: float64, written from the
  definition ``softmax(q k^T * scale + mask) v``, materialising the whole score matrix. They are
  the ground truth every test compares against.
* The **block primitive** of Ring Attention: ``block_attention`` scores one query block against
  one key/value block and returns a ``Partial`` — the unnormalised output ``acc``, the
  ``row_max`` of the scores and the ``row_sum`` of their exponentials. ``merge`` folds two
  partials together with the online-softmax rescale. ``block_attention_backward`` is the
  flash-style backward of one block from the saved softmax statistics.

Both block functions work one *query tile* at a time: a tile of rows meets the block's keys
(under a causal mask only the prefix of keys at or before its last position, under a sliding
window only the run of keys inside its rows' windows: positions are sorted), so a host holds
its ``O(c d)`` blocks plus one tile of scores of at most ``TILE_BYTES``, never the ``c x c``
matrix. Each row's arithmetic is the untiled one.

The backward rebuilds the probabilities ``p = exp(s - lse)``. From
``lse = row_max + log(row_sum)`` alone that loses ``log(row_sum)`` when ``|row_max|`` dwarfs it
(tied scores of ~1e7 in float32, ~1e16 in float64: ``dv`` 16x too large in a 16-token case),
the limit every kernel with a float32 ``lse`` shares, FlashAttention's and ``kernels/``
included. Given the forward's ``row_max`` and ``row_sum`` too (the ring keeps them), rows
whose ``lse`` lost more than ``LSE_LOSS`` use ``p = exp(s - row_max) / row_sum`` instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import numpy as np

from ringsim.checks import (
    as_float_array,
    check_bool,
    check_finite_array,
    check_instance,
    check_overflow,
    check_qkv,
    check_scale,
    check_segment_ids,
)
from ringsim.masks import check_sliding_window, offset_bounds, visible_mask


class Partial(NamedTuple):
    """Online-softmax state of a set of query rows against the keys seen so far.

    ``acc``: ``(..., Hq, c, d)`` sum of ``exp(score - row_max) * v`` (unnormalised output).
    ``row_max``: ``(..., Hq, c)`` the largest score seen (``-inf`` if no key was visible).
    ``row_sum``: ``(..., Hq, c)`` sum of ``exp(score - row_max)``.
    """

    acc: np.ndarray
    row_max: np.ndarray
    row_sum: np.ndarray

    @property
    def out(self) -> np.ndarray:
        """Normalised output ``acc / row_sum``; rows that saw no key are 0."""
        denom = np.where(self.row_sum > 0, self.row_sum, 1)
        return self.acc / denom[..., None]

    @property
    def lse(self) -> np.ndarray:
        """Log-sum-exp of the scores, ``row_max + log(row_sum)``; ``-inf`` for empty rows."""
        with np.errstate(divide="ignore"):
            return self.row_max + np.log(self.row_sum)

    @classmethod
    def from_out_lse(cls, out: np.ndarray, lse: np.ndarray) -> Partial:
        """An ``(out, lse)`` pair, as kernels return it, is a partial with ``row_sum = 1``."""
        empty = np.isneginf(lse)
        return cls(np.where(empty[..., None], 0, out), lse, np.where(empty, 0, 1).astype(out.dtype))


def empty_partial(q_shape: tuple[int, ...], dtype: np.dtype) -> Partial:
    """The identity of ``merge``: no key seen yet."""
    return Partial(
        np.zeros(q_shape, dtype),
        np.full(q_shape[:-1], -np.inf, dtype),
        np.zeros(q_shape[:-1], dtype),
    )


def merge(a: Partial, b: Partial) -> Partial:
    """Combine two partials over disjoint key sets: the online-softmax rescale.

    Both are rescaled to the common ``row_max``; a row with ``row_max = -inf`` contributes
    ``exp(-inf) = 0`` (the subtraction is shifted so that ``-inf - -inf`` never happens).
    """
    for name, part in (("a", a), ("b", b)):
        check_instance(name, part, Partial, "a Partial (from block_attention)")
    if a.acc.shape != b.acc.shape or a.row_max.shape != b.row_max.shape:
        raise ValueError(
            f"a and b must be partials of the same query rows, got acc shapes {a.acc.shape} "
            f"and {b.acc.shape}"
        )
    return _merge(a, b)


def _merge(a: Partial, b: Partial) -> Partial:
    """``merge`` without the checks (the executors' inner loop)."""
    row_max = np.maximum(a.row_max, b.row_max)
    shift = np.where(np.isneginf(row_max), 0, row_max)
    alpha = np.exp(a.row_max - shift)
    beta = np.exp(b.row_max - shift)
    return Partial(
        a.acc * alpha[..., None] + b.acc * beta[..., None],
        row_max,
        a.row_sum * alpha + b.row_sum * beta,
    )


def work_dtype(dtype: np.dtype) -> type:
    """Accumulate in float64 for float64 inputs, float32 otherwise (fp16 included)."""
    return np.float64 if np.dtype(dtype) == np.float64 else np.float32


def group_heads(q: np.ndarray, kv_heads: int) -> np.ndarray:
    """``(..., Hq, c, d)`` -> ``(..., Hkv, g, c, d)`` so each group meets its shared kv head."""
    if q.ndim == 2:
        return q[None, None]
    return q.reshape(*q.shape[:-3], kv_heads, q.shape[-3] // kv_heads, *q.shape[-2:])


TILE_BYTES = 4 * 2**20
"""The most bytes of scores a block function holds at once (one query tile, all heads)."""


def _query_tiles(
    lead: int,
    cq: int,
    ck: int,
    itemsize: int,
    q_pos: np.ndarray | None,
    k_pos: np.ndarray | None,
    causal: bool,
    q_seg: np.ndarray | None,
    k_seg: np.ndarray | None,
    sliding_window: int | None = None,
) -> Iterator[tuple[slice, slice, np.ndarray | None]]:
    """``(rows, cols, mask)`` per query tile: the tile's rows, the run of keys it may see (empty:
    none, the tile is skipped) and its ``(rows, cols)`` mask (``None``: all visible).
    ``lead`` heads (and batch) share each tile, so a tile of scores holds ``TILE_BYTES``. With
    sorted keys a causal tile sees a prefix of them, and under a sliding window a run: the keys
    from its first row's window start to its last row's window end."""
    size = max(1, TILE_BYTES // max(1, lead * ck * itemsize))
    bounded = causal or sliding_window is not None
    sorted_keys = bounded and bool(np.all(k_pos[1:] >= k_pos[:-1]))
    low, high = offset_bounds(causal, sliding_window)
    for a in range(0, cq, size):
        rows = slice(a, min(a + size, cq))
        start, stop = 0, ck
        if sorted_keys:
            last, first = q_pos[rows].max(), q_pos[rows].min()
            stop = int(np.searchsorted(k_pos, last - low, side="right"))
            if high is not None:
                start = int(np.searchsorted(k_pos, first - high, side="left"))
        if stop <= start:
            yield rows, slice(0, 0), None
            continue
        cols = slice(start, stop)
        segs = (None, None) if q_seg is None else (q_seg[rows], k_seg[cols])
        whole = (
            sorted_keys
            and q_seg is None
            and k_pos[stop - 1] - first <= -low
            and (high is None or last - k_pos[start] <= high)
        )
        mask = (
            None
            if whole
            else visible_mask(
                None if q_pos is None else q_pos[rows],
                None if k_pos is None else k_pos[cols],
                causal=causal,
                q_seg=segs[0],
                k_seg=segs[1],
                sliding_window=sliding_window,
            )
        )
        yield rows, cols, mask


def kv_heads_of(k: np.ndarray) -> int:
    return 1 if k.ndim == 2 else k.shape[-3]


def _as_kv(k: np.ndarray) -> np.ndarray:
    """``(..., Hkv, c, d)`` -> ``(..., Hkv, 1, c, d)``, broadcasting over the query group."""
    return k[None, None] if k.ndim == 2 else k[..., None, :, :]


def _ungroup(x: np.ndarray, like_ndim: int, head_shape: tuple[int, ...]) -> np.ndarray:
    """Inverse of ``group_heads`` for an array whose trailing dims follow the group axis."""
    if like_ndim == 2:
        return x[0, 0]
    return x.reshape(*head_shape, *x.shape[len(head_shape) + 1 :])


def block_attention(
    q_block: np.ndarray,
    k_block: np.ndarray,
    v_block: np.ndarray,
    *,
    scale: float,
    q_pos: np.ndarray | None = None,
    k_pos: np.ndarray | None = None,
    causal: bool = False,
    q_seg: np.ndarray | None = None,
    k_seg: np.ndarray | None = None,
    sliding_window: int | None = None,
) -> Partial:
    """Attention of one query block against one key/value block, unnormalised.

    ``q_block``: ``(..., Hq, cq, d)``; ``k_block``, ``v_block``: ``(..., Hkv, ck, d)``.
    ``q_pos``/``k_pos``: global token positions ``(cq,)``/``(ck,)`` for the causal mask and the
    ``sliding_window`` (``ringsim.masks``); ``q_seg``/``k_seg``: document ids for packed
    sequences. Rows with no visible key get
    ``row_max = -inf``, ``row_sum = 0``, ``acc = 0`` (never NaN).
    Computes in float32 (float64 for float64 inputs).
    """
    q_block, k_block, v_block = check_qkv(q_block, k_block, v_block, names=BLOCK_NAMES)
    scale = check_scale(scale, q_block.shape[-1], default=False)
    mask = _check_mask(q_block, k_block, q_pos, k_pos, causal, q_seg, k_seg, sliding_window)
    return _block_attention(q_block, k_block, v_block, scale=scale, **mask)


BLOCK_NAMES = ("q_block", "k_block", "v_block")


def _check_positions(name: str, pos: object, length: int) -> np.ndarray | None:
    """Token positions (or document ids) of a block: ``None`` or ``length`` integers."""
    if pos is None:
        return None
    try:
        arr = np.asarray(pos)
    except (TypeError, ValueError):
        arr = np.asarray(None)
    if arr.dtype.kind not in "iu" or arr.shape != (length,):
        raise ValueError(
            f"{name} must be {length} integers (one per token of the block), got {pos!r}"[:200]
        )
    return arr


def _check_mask(q, k, q_pos, k_pos, causal, q_seg, k_seg, sliding_window=None) -> dict:
    """The mask keywords of a block call, checked against the blocks' lengths."""
    cq, ck = q.shape[-2], k.shape[-2]
    causal = check_bool("causal", causal)
    sliding_window = check_sliding_window(sliding_window)
    q_pos, k_pos = _check_positions("q_pos", q_pos, cq), _check_positions("k_pos", k_pos, ck)
    if causal and (q_pos is None or k_pos is None):
        raise ValueError("causal block attention needs q_pos and k_pos (global positions)")
    if sliding_window is not None and (q_pos is None or k_pos is None):
        raise ValueError("sliding_window needs q_pos and k_pos (global positions)")
    q_seg, k_seg = _check_positions("q_seg", q_seg, cq), _check_positions("k_seg", k_seg, ck)
    if (q_seg is None) != (k_seg is None):
        raise ValueError("q_seg and k_seg (document ids) must be given together, got one of them")
    mask = dict(q_pos=q_pos, k_pos=k_pos, causal=causal, q_seg=q_seg, k_seg=k_seg)
    return mask if sliding_window is None else {**mask, "sliding_window": sliding_window}


def _block_attention(
    q_block,
    k_block,
    v_block,
    *,
    scale,
    q_pos=None,
    k_pos=None,
    causal=False,
    q_seg=None,
    k_seg=None,
    sliding_window=None,
) -> Partial:
    """``block_attention`` without the checks (the executors' inner loop)."""
    dtype = work_dtype(q_block.dtype)
    q_g = group_heads(q_block.astype(dtype, copy=False) * dtype(scale), kv_heads_of(k_block))
    k_g = _as_kv(k_block.astype(dtype, copy=False))
    v_g = _as_kv(v_block.astype(dtype, copy=False))
    acc = np.zeros((*q_g.shape[:-1], v_g.shape[-1]), dtype)
    row_max = np.full(q_g.shape[:-1], -np.inf, dtype)
    row_sum = np.zeros(q_g.shape[:-1], dtype)
    lead = int(np.prod(q_g.shape[:-2]))
    cq, ck = q_g.shape[-2], k_g.shape[-2]
    tiles = _query_tiles(
        lead, cq, ck, dtype().itemsize, q_pos, k_pos, causal, q_seg, k_seg, sliding_window
    )
    for rows, cols, mask in tiles:
        if cols.stop == 0:
            continue  # no visible key: acc = 0, row_max = -inf, row_sum = 0
        scores = q_g[..., rows, :] @ k_g[..., cols, :].swapaxes(-1, -2)  # (..., g, rows, keys)
        if mask is not None:
            np.copyto(scores, -np.inf, where=~mask)
        tile_max = scores.max(axis=-1)
        shift = tile_max if mask is None else np.where(np.isneginf(tile_max), 0, tile_max)
        scores -= shift[..., None]
        np.exp(scores, out=scores)  # scores now hold p = exp(s - row_max); masked entries are 0
        row_max[..., rows] = tile_max
        row_sum[..., rows] = scores.sum(axis=-1)
        acc[..., rows, :] = scores @ v_g[..., cols, :]

    head_shape = q_block.shape[:-2]
    return Partial(
        _ungroup(acc, q_block.ndim, head_shape),
        _ungroup(row_max, q_block.ndim, head_shape),
        _ungroup(row_sum, q_block.ndim, head_shape),
    )


LSE_LOSS = 2.0**-10
"""A saved ``lse`` that lost more than this of ``log(row_sum)`` to rounding is not used."""


def _softmax_shift(lse, row_max, row_sum, grouped):
    """``(shift, norm)`` with ``p = exp(s - shift) / norm`` (``norm`` ``None``: 1). From ``lse``
    alone, ``shift = lse``. With ``row_max`` and ``row_sum``: rows whose ``lse`` kept
    ``log(row_sum)`` to within ``LSE_LOSS`` still use it (bit for bit what a backward from a
    saved ``lse`` computes); rows where rounding lost more (``|row_max|`` dwarfing
    ``log(row_sum)``, e.g. tied scores of 1e7 in float32) use ``row_max`` and ``row_sum``."""
    if row_max is None or row_sum is None:
        shift = grouped(lse)
        return np.where(np.isneginf(shift), 0, shift), None
    m, total = grouped(row_max), grouped(row_sum)
    m = np.where(np.isneginf(m), 0, m)
    total = np.where(total > 0, total, 1)
    if lse is None:
        return m, total
    with np.errstate(invalid="ignore"):
        saved = grouped(lse)
        lost = ~(np.abs((saved - m) - np.log(total)) <= LSE_LOSS) & np.isfinite(saved)
    return np.where(lost, m, np.where(np.isneginf(saved), 0, saved)), np.where(lost, total, 1)


def block_attention_backward(
    q_block: np.ndarray,
    k_block: np.ndarray,
    v_block: np.ndarray,
    dout_block: np.ndarray,
    lse: np.ndarray,
    delta: np.ndarray,
    *,
    scale: float,
    q_pos: np.ndarray | None = None,
    k_pos: np.ndarray | None = None,
    causal: bool = False,
    q_seg: np.ndarray | None = None,
    k_seg: np.ndarray | None = None,
    row_max: np.ndarray | None = None,
    row_sum: np.ndarray | None = None,
    sliding_window: int | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gradient contributions of one (query block, key/value block) pair.

    ``lse``: ``(..., Hq, cq)`` the *final* log-sum-exp of each query row (saved by the forward),
    so the probabilities ``p = exp(s - lse)`` are rebuilt without the full matrix; or, exact
    even for huge tied scores, the final ``row_max`` and ``row_sum`` (then ``lse`` may be
    ``None``) and ``p = exp(s - row_max) / row_sum``.
    ``delta``: ``(..., Hq, cq)`` = ``rowsum(dout * out)``, which equals ``rowsum(p * dp)``.
    Masks as ``block_attention`` (``sliding_window`` included).
    Returns ``(dq_block, dk_block, dv_block)`` shaped like their inputs; ``dk``/``dv`` are
    summed over the query heads that share each kv head.
    """
    q_block, k_block, v_block = check_qkv(q_block, k_block, v_block, names=BLOCK_NAMES)
    dout_block = as_float_array("dout_block", dout_block)
    if dout_block.shape != q_block.shape:
        raise ValueError(
            f"dout_block must have the shape of q_block {q_block.shape}, got {dout_block.shape}"
        )
    check_finite_array("dout_block", dout_block)
    rows = q_block.shape[:-1]
    given = {"lse": lse, "delta": delta, "row_max": row_max, "row_sum": row_sum}
    stats = {name: _check_rows(name, value, rows) for name, value in given.items()}
    if stats["delta"] is None:
        raise ValueError(f"delta must be a float array of shape {rows}, got None")
    if (stats["row_max"] is None) != (stats["row_sum"] is None):
        raise ValueError("row_max and row_sum must be given together, got one of them")
    if stats["lse"] is None and stats["row_max"] is None:
        raise ValueError("lse must be given (or row_max and row_sum), got None")
    scale = check_scale(scale, q_block.shape[-1], default=False)
    mask = _check_mask(q_block, k_block, q_pos, k_pos, causal, q_seg, k_seg, sliding_window)
    return _block_attention_backward(
        q_block, k_block, v_block, dout_block, scale=scale, **stats, **mask
    )


def _check_rows(name: str, value: object, rows: tuple[int, ...]) -> np.ndarray | None:
    """A per-query-row statistic (``lse``, ``delta``, ...): ``None`` or floats of ``rows``."""
    if value is None:
        return None
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError):
        arr = np.asarray(None)
    if arr.dtype.kind != "f" or arr.shape != rows:
        raise ValueError(
            f"{name} must be a float array of shape {rows} (one number per query row), got "
            f"{value!r}"[:200]
        )
    return arr


def _block_attention_backward(
    q_block,
    k_block,
    v_block,
    dout_block,
    lse,
    delta,
    *,
    scale,
    q_pos=None,
    k_pos=None,
    causal=False,
    q_seg=None,
    k_seg=None,
    row_max=None,
    row_sum=None,
    sliding_window=None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``block_attention_backward`` without the checks (the executors' inner loop)."""
    dtype = work_dtype(q_block.dtype)
    hkv = kv_heads_of(k_block)
    grouped = lambda x: group_heads(x[..., None].astype(dtype, copy=False), hkv)[..., 0]
    q_g = group_heads(q_block.astype(dtype, copy=False), hkv)
    do_g = group_heads(dout_block.astype(dtype, copy=False), hkv)
    delta_g = grouped(delta)
    shift, norm = _softmax_shift(lse, row_max, row_sum, grouped)
    k_g = _as_kv(k_block.astype(dtype, copy=False))
    v_g = _as_kv(v_block.astype(dtype, copy=False))
    dq = np.zeros(q_g.shape, dtype)
    dk = np.zeros((*k_g.shape[:-3], k_g.shape[-2], k_g.shape[-1]), dtype)
    dv = np.zeros((*v_g.shape[:-3], v_g.shape[-2], v_g.shape[-1]), dtype)
    lead = int(np.prod(q_g.shape[:-2]))
    cq, ck = q_g.shape[-2], k_g.shape[-2]
    tiles = _query_tiles(
        lead, cq, ck, dtype().itemsize, q_pos, k_pos, causal, q_seg, k_seg, sliding_window
    )
    for rows, cols, mask in tiles:
        if cols.stop == 0:
            continue
        k_t, v_t, q_t, do_t = (
            k_g[..., cols, :],
            v_g[..., cols, :],
            q_g[..., rows, :],
            do_g[..., rows, :],
        )
        p = (q_t * dtype(scale)) @ k_t.swapaxes(-1, -2)
        if mask is not None:  # mask before exp: a hidden key's score may exceed lse and overflow
            np.copyto(p, -np.inf, where=~mask)
        p -= shift[..., rows, None]
        np.exp(p, out=p)
        if norm is not None:  # 1 where the saved lse is used: p unchanged, bit for bit
            p /= norm[..., rows, None]
        dv[..., cols, :] += (p.swapaxes(-1, -2) @ do_t).sum(axis=-3)
        ds = do_t @ v_t.swapaxes(-1, -2)  # dp
        ds -= delta_g[..., rows, None]
        ds *= p
        dq[..., rows, :] = (ds @ k_t) * dtype(scale)
        dk[..., cols, :] += (ds.swapaxes(-1, -2) @ q_t).sum(axis=-3)
    dk *= dtype(scale)

    if q_block.ndim == 2:
        return dq[0, 0], dk[0], dv[0]
    return dq.reshape(q_block.shape), dk, dv


# --------------------------------------------------------------------------------------------
# The exact reference (float64, the whole score matrix)
# --------------------------------------------------------------------------------------------


def _reference_probs(
    q: np.ndarray,
    k: np.ndarray,
    causal: bool,
    scale: float,
    segment_ids: np.ndarray | None,
    sliding_window: int | None = None,
) -> np.ndarray:
    """Softmax probabilities ``(..., Hq, N, N)`` in float64, kv heads repeated for GQA."""
    q64 = q.astype(np.float64)
    k64 = k.astype(np.float64)
    if q.ndim >= 3:
        k64 = np.repeat(k64, q.shape[-3] // k.shape[-3], axis=-3)
    scores = (q64 @ k64.swapaxes(-1, -2)) * scale
    n_q, n_k = q.shape[-2], k.shape[-2]
    mask = visible_mask(
        np.arange(n_q),
        np.arange(n_k),
        causal=causal,
        q_seg=segment_ids,
        k_seg=segment_ids,
        sliding_window=sliding_window,
    )
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    row_max = scores.max(axis=-1, keepdims=True)
    row_max = np.where(np.isneginf(row_max), 0, row_max)
    weights = np.exp(scores - row_max)
    total = weights.sum(axis=-1, keepdims=True)
    return weights / np.where(total > 0, total, 1)


def _repeat_kv(x: np.ndarray, q: np.ndarray) -> np.ndarray:
    if q.ndim < 3:
        return x.astype(np.float64)
    return np.repeat(x.astype(np.float64), q.shape[-3] // x.shape[-3], axis=-3)


def _sum_groups(dx: np.ndarray, like: np.ndarray) -> np.ndarray:
    if like.ndim < 3 or dx.shape == like.shape:
        return dx
    hkv = like.shape[-3]
    return dx.reshape(*like.shape[:-3], hkv, dx.shape[-3] // hkv, *like.shape[-2:]).sum(-3)


def _check_self_attention(q: np.ndarray, k: np.ndarray, segment_ids: object) -> np.ndarray | None:
    if segment_ids is not None and q.shape[-2] != k.shape[-2]:
        raise ValueError(
            f"segment_ids need q and k of the same length, got {q.shape[-2]} and {k.shape[-2]}"
        )
    return check_segment_ids(segment_ids, q.shape[-2])


def reference_attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    causal: bool = False,
    scale: float | None = None,
    segment_ids: np.ndarray | None = None,
    sliding_window: int | None = None,
) -> np.ndarray:
    """Exact attention in float64: ``softmax(q k^T * scale + mask) v``.

    ``q``: ``(..., Hq, N, d)``; ``k``, ``v``: ``(..., Hkv, N, d)``. The causal mask lets query
    ``i`` see keys ``j <= i``; ``segment_ids`` ``(N,)`` keep attention inside each document;
    ``sliding_window`` ``W`` keeps ``i - W < j`` (and, not causal, ``j < i + W``): the rule of
    ``ringsim.masks``. Returns float64 ``(..., Hq, N, d)``.
    """
    q, k, v = check_qkv(q, k, v)
    causal = check_bool("causal", causal)
    scale = check_scale(scale, q.shape[-1])
    segment_ids = _check_self_attention(q, k, segment_ids)
    window = check_sliding_window(sliding_window)
    with np.errstate(over="ignore", invalid="ignore"):  # refused below, as ring_attention does
        out = _reference_probs(q, k, causal, scale, segment_ids, window) @ _repeat_kv(v, q)
    check_overflow("attention", out)
    return out


def reference_attention_grad(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    dout: np.ndarray,
    causal: bool = False,
    scale: float | None = None,
    segment_ids: np.ndarray | None = None,
    sliding_window: int | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Exact float64 gradients ``(dq, dk, dv)`` of ``sum(dout * reference_attention(...))``
    (same arguments, ``sliding_window`` included).

    From the definition, with ``P`` the probabilities and ``S`` the scaled scores:
    ``dV = P^T dO``; ``dP = dO V^T``; the softmax Jacobian gives
    ``dS_ij = P_ij (dP_ij - sum_k P_ik dP_ik)``; then ``dQ = scale dS K`` and
    ``dK = scale dS^T Q``. GQA sums ``dK``, ``dV`` over the query heads sharing a kv head.
    """
    q, k, v = check_qkv(q, k, v)
    dout = np.asarray(dout)
    if dout.shape != q.shape:
        raise ValueError(f"dout must have the shape of q {q.shape}, got {dout.shape}")
    causal = check_bool("causal", causal)
    scale = check_scale(scale, q.shape[-1])
    segment_ids = _check_self_attention(q, k, segment_ids)
    window = check_sliding_window(sliding_window)
    with np.errstate(over="ignore", invalid="ignore"):
        probs = _reference_probs(q, k, causal, scale, segment_ids, window)
    check_overflow("attention", probs)
    k64, v64, do64 = _repeat_kv(k, q), _repeat_kv(v, q), dout.astype(np.float64)
    dv = probs.swapaxes(-1, -2) @ do64
    dp = do64 @ v64.swapaxes(-1, -2)
    ds = probs * (dp - (probs * dp).sum(axis=-1, keepdims=True))
    dq = scale * ds @ k64
    dk = scale * ds.swapaxes(-1, -2) @ q.astype(np.float64)
    return dq, _sum_groups(dk, k), _sum_groups(dv, v)
