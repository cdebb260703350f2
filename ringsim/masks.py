"""The one mask rule, and how much of a block it leaves to compute.

A query at global position ``i`` may see a key at global position ``j`` when

* ``j <= i`` if the attention is causal,
* ``i - j < W`` if a sliding window ``W`` is set (``sliding_window=W``): the key is one of the
  ``W`` latest tokens up to the query, itself included; without a causal mask the window is
  symmetric, ``|i - j| < W`` (``W - 1`` tokens either side and the query itself), and
* both tokens belong to the same document if ``segment_ids`` are given (packed sequences).

So a causal window keeps ``i - W < j <= i``. It is FlashAttention's ``window_size=(W - 1, 0)``
with ``causal=True``, and the non-causal window its ``window_size=(W - 1, W - 1)``: flash-attn
lets query ``i`` see keys ``[i - left, i + right]`` inclusive (``flash_attn_func``'s docstring,
Dao-AILab/flash-attention ``flash_attn/flash_attn_interface.py`` at 88c4e5db), and vLLM maps a
model's ``sliding_window`` to ``(W - 1, 0)`` for decoders and ``(W - 1, W - 1)`` for encoders
(vllm-project/vllm ``vllm/v1/attention/backends/flash_attn.py``); ``flash_window_size`` gives
the pair, so a real kernel takes the same window 1:1. ``W = 1`` leaves each token only itself;
``W >= N`` is no window at all. (``sliding_window`` is the model's local attention; the double
ring's ``window`` is a number of ring slots, unrelated.)

Because the rule reads *global token positions*, the same code serves every layout: a host that
holds positions ``[3, 7, 11]`` (striped) masks exactly as one holding ``[3, 4, 5]`` would, by
comparing positions, never local indices. Inside a packed document the global distance ``i - j``
is the distance within the document, so the window is the document's own window too.

``visible_mask`` is used by the numerics; ``count_visible`` by the cost model, which needs the
same number without building a ``c x c`` mask (the timer runs blocks of a million tokens);
``pairs_within`` counts it in closed form for runs of positions (the schedule's window tables).
``BlockKind`` names what the mask leaves of a block: all of it, part of it, or nothing.
"""

from __future__ import annotations

import enum

import numpy as np

from ringsim.checks import check_bool


class BlockKind(enum.IntEnum):
    """A block's pairs under the mask: none visible (``SKIP``: no compute), some (``PARTIAL``:
    the mask cuts through it) or all (``FULL``)."""

    SKIP = 0
    PARTIAL = 1
    FULL = 2


def check_sliding_window(sliding_window: object) -> int | None:
    """``sliding_window``: ``None`` (no window) or a positive integer ``W`` of tokens. A window
    beyond ``2**62`` tokens (longer than any sequence, so no window at all) is kept at
    ``2**62``, inside the int64 positions it is compared with."""
    if sliding_window is None:
        return None
    integer = isinstance(sliding_window, int | np.integer) and not isinstance(sliding_window, bool)
    if not integer or sliding_window <= 0:
        raise ValueError(
            f"sliding_window must be None or a positive integer (tokens), got {sliding_window!r}"
        )
    return min(int(sliding_window), WINDOW_MAX)


WINDOW_MAX = 2**62


def flash_window_size(sliding_window: int | None, causal: bool) -> tuple[int, int]:
    """FlashAttention's ``window_size=(left, right)`` for this rule: ``(-1, -1)`` without a
    window, ``(W - 1, 0)`` causal, ``(W - 1, W - 1)`` not (a query sees keys
    ``[i - left, i + right]``)."""
    w = check_sliding_window(sliding_window)
    causal = check_bool("causal", causal)
    if w is None:
        return (-1, -1)
    return (w - 1, 0) if causal else (w - 1, w - 1)


def offset_bounds(causal: bool, sliding_window: int | None) -> tuple[int | None, int | None]:
    """``(low, high)``: the rule keeps a pair when ``low <= i - j <= high`` (``None``: no bound),
    before documents. Causal: ``low = 0``; a window: ``high = W - 1`` and, without a causal
    mask, ``low = -(W - 1)``."""
    if sliding_window is None:
        return (0 if causal else None), None
    return (0 if causal else 1 - sliding_window), sliding_window - 1


def visible_mask(
    q_pos: np.ndarray,
    k_pos: np.ndarray,
    *,
    causal: bool,
    q_seg: np.ndarray | None = None,
    k_seg: np.ndarray | None = None,
    sliding_window: int | None = None,
) -> np.ndarray | None:
    """Boolean ``(cq, ck)`` mask of visible (query, key) pairs, or ``None`` if all are visible.

    ``q_pos``/``k_pos``: global positions ``(cq,)``/``(ck,)``; ``q_seg``/``k_seg``: their
    document ids; ``sliding_window``: ``W`` tokens (the module's rule)."""
    mask = None
    if causal:
        mask = k_pos[None, :] <= q_pos[:, None]
    if sliding_window is not None:
        dist = q_pos[:, None].astype(np.int64) - k_pos[None, :]
        near = dist < sliding_window if causal else np.abs(dist) < sliding_window
        mask = near if mask is None else mask & near
    if q_seg is not None and k_seg is not None:
        same_doc = q_seg[:, None] == k_seg[None, :]
        mask = same_doc if mask is None else mask & same_doc
    return mask


def count_visible(
    q_pos: np.ndarray,
    k_pos: np.ndarray,
    *,
    causal: bool,
    tile: int | None = None,
    q_seg: np.ndarray | None = None,
    k_seg: np.ndarray | None = None,
    tile_n: int | None = None,
    sliding_window: int | None = None,
) -> int:
    """Number of (query, key) pairs a kernel computes for one block.

    ``tile=None`` (or 1) counts visible pairs exactly: an ideal kernel. With ``tile=T`` the block
    is cut into ``T x T`` tiles along the hosts' *local* order, a tile with at least one visible
    pair costs the whole tile and an empty tile is skipped: what a real tiled kernel pays.
    ``tile_n`` makes the tiles rectangular, ``tile`` queries x ``tile_n`` keys (default
    ``tile``; it needs ``tile``).

    Causal counts are ``O(c log c)`` with ``searchsorted`` (positions must be sorted, as every
    layout stores them). With segment ids, where each document's keys are one run of the key
    order (packed documents), every query sees one run of keys and the count is ``O(c log c)``
    too (``_document_ranges``); otherwise it falls back to the explicit mask.

    ``sliding_window``: with sorted keys each query sees one run of them (its window, cut to its
    document), so the count is ``O(c log c)`` as well (``_window_count``).
    """
    cq, ck = len(q_pos), len(k_pos)
    tile, tile_n = tile_shape(tile, tile_n)
    if sliding_window is not None:
        return _window_count(q_pos, k_pos, causal, sliding_window, q_seg, k_seg, tile, tile_n)
    if q_seg is not None and k_seg is not None:
        ranges = _document_ranges(q_pos, k_pos, np.asarray(q_seg), np.asarray(k_seg), causal)
        if ranges is not None:
            lo, hi = ranges
            if tile is None:
                return int((hi - lo).sum())
            return _tiled_count_from_ranges(lo, hi, ck, tile, tile_n)
        mask = visible_mask(q_pos, k_pos, causal=causal, q_seg=q_seg, k_seg=k_seg)
        if tile is None:
            return int(mask.sum())
        return _tiled_count_from_mask(mask, tile, tile_n)
    if not causal:
        return cq * ck
    if tile is None:
        # keys at or before each query; k_pos sorted
        return int(np.searchsorted(k_pos, q_pos, side="right").sum())
    q_edges = np.arange(0, cq, tile)
    k_edges = np.arange(0, ck, tile_n)
    q_sizes = np.minimum(q_edges + tile, cq) - q_edges
    k_sizes = np.minimum(k_edges + tile_n, ck) - k_edges
    q_tile_max = q_pos[q_edges + q_sizes - 1]
    k_tile_min = k_pos[k_edges]
    # a tile is non-empty iff its earliest key is at or before its latest query
    live = np.searchsorted(k_tile_min, q_tile_max, side="right")
    k_cum = np.concatenate([[0], np.cumsum(k_sizes)])
    return int((q_sizes * k_cum[live]).sum())


def tile_shape(tile: int | None, tile_n: int | None = None) -> tuple[int | None, int | None]:
    """``(M, N)`` of a kernel tile (``tile`` queries x ``tile_n`` keys, ``tile_n`` default
    ``tile``), or ``(None, None)`` for an exact count (no tile, or a 1 x 1 one)."""
    if tile_n is not None and tile is None:
        raise ValueError(f"tile_n needs tile (the query side), got tile=None, tile_n={tile_n!r}")
    tile_n = tile if tile_n is None else int(tile_n)
    if tile is None or (tile == 1 and tile_n == 1):
        return None, None
    return int(tile), tile_n


def documents_are_runs(segment_ids: np.ndarray) -> bool:
    """Whether every document is one run of tokens (packed documents): then any host's keys
    of a document are one run of its (sorted) key order, and ``count_visible`` needs no mask."""
    seg = np.asarray(segment_ids)
    run_ids = seg[np.flatnonzero(np.concatenate([[True], seg[1:] != seg[:-1]]))]
    return np.unique(run_ids).size == run_ids.size


def _document_ranges(
    q_pos: np.ndarray, k_pos: np.ndarray, q_seg: np.ndarray, k_seg: np.ndarray, causal: bool
) -> tuple[np.ndarray, np.ndarray] | None:
    """``(lo, hi)``: query ``i`` sees the keys ``lo[i]:hi[i]`` (local indices), or ``None`` if a
    document's keys are not one run of the key order (or, causal, the keys are not sorted).

    A query sees the run of its document's keys, and under a causal mask the prefix of that
    run at or before its position (the keys are sorted)."""
    if causal and np.any(k_pos[1:] < k_pos[:-1]):
        return None
    starts = np.flatnonzero(np.concatenate([[True], k_seg[1:] != k_seg[:-1]]))
    run_ids = k_seg[starts]
    order = np.argsort(run_ids, kind="stable")
    ids = run_ids[order]
    if np.any(ids[1:] == ids[:-1]):
        return None  # a document's keys in two runs
    ends = np.append(starts[1:], len(k_seg))
    at = np.minimum(np.searchsorted(ids, q_seg), len(ids) - 1)
    found = ids[at] == q_seg
    run = order[at]
    lo = np.where(found, starts[run], 0)
    hi = np.where(found, ends[run], 0)
    if causal:
        hi = np.minimum(hi, np.searchsorted(k_pos, q_pos, side="right"))
    return lo, np.maximum(hi, lo)


def _tiled_count_from_ranges(
    lo: np.ndarray, hi: np.ndarray, ck: int, tile: int, tile_n: int
) -> int:
    """``count_visible``'s tiled count when query ``i`` sees keys ``lo[i]:hi[i]``, each range
    inside one document's run of keys. Within a query tile the rows of one run see
    ``run start : max hi``; the runs are disjoint and in key order, so their key-tile ranges
    overlap at most in a shared boundary tile, counted once."""
    cq = len(lo)
    q_sizes = np.minimum(np.arange(0, cq, tile) + tile, cq) - np.arange(0, cq, tile)
    k_sizes = np.minimum(np.arange(0, ck, tile_n) + tile_n, ck) - np.arange(0, ck, tile_n)
    k_cum = np.concatenate([[0], np.cumsum(k_sizes)])
    live = hi > lo
    q_tile = np.flatnonzero(live) // tile
    group = q_tile.astype(np.int64) * (ck + 1) + lo[live]  # (query tile, run start), sorted
    keys, inverse = np.unique(group, return_inverse=True)
    run_hi = np.zeros(len(keys), dtype=np.int64)
    np.maximum.at(run_hi, inverse, hi[live])
    t, first = keys // (ck + 1), (keys % (ck + 1)) // tile_n
    last = (run_hi - 1) // tile_n
    keys_live = k_cum[last + 1] - k_cum[first]
    shared = (t[1:] == t[:-1]) & (first[1:] == last[:-1])  # a boundary tile counted twice
    keys_live[1:] -= np.where(shared, k_sizes[first[1:]], 0)
    return int((q_sizes[t] * keys_live).sum())


def _tiled_count_from_mask(mask: np.ndarray, tile: int, tile_n: int) -> int:
    cq, ck = mask.shape
    total = 0
    for a in range(0, cq, tile):
        for b in range(0, ck, tile_n):
            sub = mask[a : a + tile, b : b + tile_n]
            if sub.any():
                total += sub.size
    return total


# -- the sliding window: each query sees one run of the (sorted) keys ------------------------------
def _window_count(q_pos, k_pos, causal, sliding_window, q_seg, k_seg, tile, tile_n) -> int:
    """``count_visible`` under a sliding window: exact from each query's run of keys, tiled from
    those runs where their starts grow with the queries; else from the explicit mask."""
    q_pos, k_pos = np.asarray(q_pos, np.int64), np.asarray(k_pos, np.int64)
    ranges = _window_ranges(q_pos, k_pos, causal, sliding_window, q_seg, k_seg)
    if ranges is not None:
        lo, hi = ranges
        if tile is None:
            return int((hi - lo).sum())
        tiled = _tiled_count_from_sorted_ranges(lo, hi, len(k_pos), tile, tile_n)
        if tiled is not None:
            return tiled
    kw = dict(causal=causal, q_seg=q_seg, k_seg=k_seg, sliding_window=sliding_window)
    mask = visible_mask(q_pos, k_pos, **kw)
    if tile is None:
        return int(mask.sum())
    return _tiled_count_from_mask(mask, tile, tile_n)


def _window_ranges(q_pos, k_pos, causal, sliding_window, q_seg, k_seg):
    """``(lo, hi)``: query ``i`` sees keys ``lo[i]:hi[i]`` (local indices) under the window, cut to
    its document's run of keys; ``None`` if the keys are not sorted or a document's keys are not
    one run."""
    if np.any(k_pos[1:] < k_pos[:-1]):
        return None
    low, high = offset_bounds(causal, sliding_window)
    lo = np.searchsorted(k_pos, q_pos - high, side="left")  # first key with i - j <= high
    hi = np.searchsorted(k_pos, q_pos - low, side="right")  # past the last with i - j >= low
    if q_seg is not None and k_seg is not None:
        docs = _document_ranges(q_pos, k_pos, np.asarray(q_seg), np.asarray(k_seg), False)
        if docs is None:
            return None
        lo, hi = np.maximum(lo, docs[0]), np.minimum(hi, docs[1])
    return lo, np.maximum(hi, lo)


def _tiled_count_from_sorted_ranges(
    lo: np.ndarray, hi: np.ndarray, ck: int, tile: int, tile_n: int
) -> int | None:
    """Tiled count when query ``i`` sees keys ``lo[i]:hi[i]`` and ``lo`` never decreases over the
    rows that see any key (``None`` if it does). Within a query tile, a row's key tiles
    ``[a, b]`` add those past the largest ``b`` of the tile's earlier rows: every key tile from
    ``a`` up to that ``b`` is already covered, by the row that reached it (its ``a`` is no
    larger)."""
    live = np.flatnonzero(hi > lo)
    if live.size == 0:
        return 0
    if np.any(np.diff(lo[live]) < 0):
        return None
    cq = len(lo)
    q_sizes = np.minimum(np.arange(0, cq, tile) + tile, cq) - np.arange(0, cq, tile)
    k_sizes = np.minimum(np.arange(0, ck, tile_n) + tile_n, ck) - np.arange(0, ck, tile_n)
    k_cum = np.concatenate([[0], np.cumsum(k_sizes)])
    t = live // tile
    first, last = lo[live] // tile_n, (hi[live] - 1) // tile_n
    span = len(k_sizes) + 1
    reached = np.maximum.accumulate(t * span + last) - t * span  # per tile, rows so far
    before = np.full(live.size, -1, dtype=np.int64)
    before[1:] = np.where(t[1:] == t[:-1], reached[:-1], -1)
    start = np.maximum(first, before + 1)
    new = np.where(last >= start, k_cum[last + 1] - k_cum[np.minimum(start, last)], 0)
    return int((q_sizes[t] * new).sum())


def pairs_within(
    offset: np.ndarray | int,
    n: np.ndarray | int,
    m: np.ndarray | int,
    stride: int,
    low: int | None,
    high: int | None,
) -> np.ndarray:
    """Closed-form pair count of two arithmetic runs of positions: queries ``q0 + stride a``
    (``0 <= a < n``), keys ``k0 + stride b`` (``0 <= b < m``), ``offset = q0 - k0``; how many
    pairs have ``low <= q - k <= high`` (``None``: unbounded; ``offset_bounds`` gives the
    rule's bounds). Vectorised over ``offset``, ``n``, ``m`` (broadcast); ``O(1)`` each.

    ``q - k = offset + stride e`` with ``e = a - b``, so the pairs are those with ``e`` in
    ``[e1, e2]``; ``F(E)``, the pairs with ``a - b <= E``, is ``n m`` minus the sum over ``a``
    of the keys ``b < a - E``, a sum of ``clip(x, 0, m)`` over a run of ``x`` (``_clip_sum``)."""
    offset, n, m = (np.asarray(x, dtype=np.int64) for x in (offset, n, m))
    e1 = -(m - 1) if low is None else np.maximum(-((offset - low) // stride), -(m - 1))
    e2 = n - 1 if high is None else np.minimum((high - offset) // stride, n - 1)

    def below(e):  # pairs with a - b <= e, for -m <= e <= n - 1
        return n * m - (_clip_sum(n - 1 - e, m) - _clip_sum(-e - 1, m))

    return np.where(e2 >= e1, below(e2) - below(np.minimum(e1, e2 + 1) - 1), 0)


def _clip_sum(x: np.ndarray, m: np.ndarray) -> np.ndarray:
    """``sum(clip(t, 0, m) for t in 0..x)`` (0 for ``x < 0``)."""
    x = np.maximum(x, -1)
    inside = np.minimum(x, m)
    return inside * (inside + 1) // 2 + np.maximum(x - m, 0) * m
