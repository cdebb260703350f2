"""The one mask rule, and how much of a block it leaves to compute.

A query at global position ``i`` may see a key at global position ``j`` when

* ``j <= i`` if the attention is causal, and
* both tokens belong to the same document if ``segment_ids`` are given (packed sequences).

Because the rule reads *global token positions*, the same code serves every layout: a host that
holds positions ``[3, 7, 11]`` (striped) masks exactly as one holding ``[3, 4, 5]`` would, by
comparing positions, never local indices.

``visible_mask`` is used by the numerics; ``count_visible`` by the cost model, which needs the
same number without building a ``c x c`` mask (the timer runs blocks of a million tokens).
``BlockKind`` names what the mask leaves of a block: all of it, part of it, or nothing.
"""

from __future__ import annotations

import enum

import numpy as np


class BlockKind(enum.IntEnum):
    """A block's pairs under the mask: none visible (``SKIP``: no compute), some (``PARTIAL``:
    the mask cuts through it) or all (``FULL``)."""

    SKIP = 0
    PARTIAL = 1
    FULL = 2


def visible_mask(
    q_pos: np.ndarray,
    k_pos: np.ndarray,
    *,
    causal: bool,
    q_seg: np.ndarray | None = None,
    k_seg: np.ndarray | None = None,
) -> np.ndarray | None:
    """Boolean ``(cq, ck)`` mask of visible (query, key) pairs, or ``None`` if all are visible."""
    mask = None
    if causal:
        mask = k_pos[None, :] <= q_pos[:, None]
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
    """
    cq, ck = len(q_pos), len(k_pos)
    tile, tile_n = tile_shape(tile, tile_n)
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
