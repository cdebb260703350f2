"""Which tiles of a block can hold a visible (query, key) pair: the skipping rule of the kernels.

A block is cut into tiles of ``block_m`` query rows by ``block_n`` keys along the hosts' local
(sorted) order. A tile is *live* when some pair in it may be visible under the rule of
``ringsim.masks``; the test uses only each tile's smallest and largest position (and document
id), so it never misses a visible pair and, for the sorted positions of every layout, never
keeps an empty tile either: the live tiles are exactly those ``ringsim.masks.count_visible``
charges with ``tile=T``. Both kernels (Triton and the tiled torch path) loop, per query tile,
over the range ``[lo, hi)`` of key tiles between its first and last live one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from kernels.block_args import BlockArgs


def _tile_min_max(values: torch.Tensor, tile: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Smallest and largest value of each tile of ``tile`` consecutive entries."""
    pad = (-values.numel()) % tile
    padded = torch.cat([values, values[-1:].expand(pad)]).reshape(-1, tile)
    return padded.amin(dim=1), padded.amax(dim=1)


def live_tiles(args: BlockArgs, block_m: int, block_n: int) -> torch.Tensor:
    """Boolean ``(query tiles, key tiles)`` of a block: False only where no pair can be visible."""
    n_q = -(-args.q.shape[2] // block_m)
    n_k = -(-args.k.shape[2] // block_n)
    live = torch.ones(n_q, n_k, dtype=torch.bool, device=args.q.device)
    if args.causal:
        _, q_max = _tile_min_max(args.q_pos, block_m)
        k_min, _ = _tile_min_max(args.k_pos, block_n)
        live &= k_min[None, :] <= q_max[:, None]  # some key not after some query
    if args.q_seg is not None:
        qs_min, qs_max = _tile_min_max(args.q_seg, block_m)
        ks_min, ks_max = _tile_min_max(args.k_seg, block_n)
        live &= (ks_min[None, :] <= qs_max[:, None]) & (qs_min[:, None] <= ks_max[None, :])
    return live


def tile_ranges(live: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row of ``live``: ``[lo, hi)`` from its first to its last live column (0, 0 if none)."""
    n = live.shape[1]
    as_int = live.to(torch.int32)
    first = as_int.argmax(dim=1)
    last = n - 1 - as_int.flip(1).argmax(dim=1)
    any_live = live.any(dim=1)
    lo = torch.where(any_live, first, 0).to(torch.int32).contiguous()
    hi = torch.where(any_live, last + 1, 0).to(torch.int32).contiguous()
    return lo, hi
