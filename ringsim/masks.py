"""The one mask rule, and how much of a block it leaves to compute.

A query at global position ``i`` may see a key at global position ``j`` when

* ``j <= i`` if the attention is causal, and
* both tokens belong to the same document if ``segment_ids`` are given (packed sequences).

Because the rule reads *global token positions*, the same code serves every layout: a host that
holds positions ``[3, 7, 11]`` (striped) masks exactly as one holding ``[3, 4, 5]`` would, by
comparing positions, never local indices.

``visible_mask`` is used by the numerics; ``count_visible`` by the cost model, which needs the
same number without building a ``c x c`` mask (the timer runs blocks of a million tokens).
"""

from __future__ import annotations

import numpy as np


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
    layout stores them); segment ids fall back to the explicit mask.
    """
    cq, ck = len(q_pos), len(k_pos)
    tile, tile_n = tile_shape(tile, tile_n)
    if q_seg is not None and k_seg is not None:
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


def _tiled_count_from_mask(mask: np.ndarray, tile: int, tile_n: int) -> int:
    cq, ck = mask.shape
    total = 0
    for a in range(0, cq, tile):
        for b in range(0, ck, tile_n):
            sub = mask[a : a + tile, b : b + tile_n]
            if sub.any():
                total += sub.size
    return total
