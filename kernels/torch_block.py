"""Block attention in plain torch: the CPU path and the reference for the Triton kernels.

One (query block, key/value block) pair in fp32 (float64 stays float64), scores materialised
with matmuls. ``q`` is viewed as ``(B, Hkv, g, cq, d)`` (each group of ``g`` query heads shares
one kv head) and ``k``/``v`` as ``(B, Hkv, 1, ck, d)``.

Masked blocks are computed tile by tile like a real kernel: the query rows are cut into tiles
of ``TILE`` and each tile meets only the keys between its first and last live key tile
(``kernels.tiles``), so the upper triangle of a causal diagonal block costs nothing. Its cost is
therefore the tile-granular work of ``ringsim.masks.count_visible(tile=TILE)``, which is what
``kernels.measure`` tells the simulator. Unmasked blocks are one pair of matmuls.
"""

from __future__ import annotations

import torch

from kernels.block_args import BlockArgs
from kernels.tiles import live_tiles, tile_ranges
from ringsim.masks import visible_mask

TILE = 128


def _work(x: torch.Tensor) -> torch.Tensor:
    """fp32 for every input dtype except float64, which stays float64."""
    return x if x.dtype == torch.float64 else x.float()


def _scores(q: torch.Tensor, k: torch.Tensor, scale: float, mask: torch.Tensor | None):
    scores = (q * scale) @ k.transpose(-1, -2)  # (B, Hkv, g, cq, ck)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores


def _probs(scores: torch.Tensor, lse: torch.Tensor) -> torch.Tensor:
    """``p = exp(s - lse)``; a row whose ``lse`` is ``-inf`` saw no key and gets ``p = 0``."""
    safe_lse = torch.where(torch.isneginf(lse), torch.inf, lse)
    return torch.exp(scores - safe_lse[..., None])


def _row_tiles(args: BlockArgs, tile: int):
    """``(query rows, key columns, mask)`` of every query tile with a live key range; one
    untiled pair when nothing is masked."""
    cq, ck = args.q.shape[2], args.k.shape[2]
    if not args.causal and args.q_seg is None:
        yield slice(0, cq), slice(0, ck), None
        return
    lo, hi = tile_ranges(live_tiles(args, tile, tile))
    for i, (a, b) in enumerate(zip(lo.tolist(), hi.tolist(), strict=True)):
        if a == b:
            continue  # nothing visible: the rows keep out = 0, lse = -inf
        rows, cols = slice(i * tile, min((i + 1) * tile, cq)), slice(a * tile, min(b * tile, ck))
        segs = (None, None) if args.q_seg is None else (args.q_seg[rows], args.k_seg[cols])
        mask = visible_mask(
            args.q_pos[rows], args.k_pos[cols], causal=args.causal, q_seg=segs[0], k_seg=segs[1]
        )
        yield rows, cols, mask


def _grouped(args: BlockArgs, x: torch.Tensor) -> torch.Tensor:
    return _work(args.grouped(x))


def forward(args: BlockArgs, tile: int = TILE) -> tuple[torch.Tensor, torch.Tensor]:
    """``(out, lse)``: ``out = softmax(s) v`` ``(B, Hq, cq, d)`` and ``lse = logsumexp(s)``
    ``(B, Hq, cq)``. Fully masked rows: ``lse = -inf``, ``p = 0``, ``out = 0``."""
    q = _grouped(args, args.q)
    k, v = _work(args.k[:, :, None]), _work(args.v[:, :, None])
    out = q.new_zeros(q.shape)
    lse = q.new_full(q.shape[:-1], float("-inf"))
    for rows, cols, mask in _row_tiles(args, tile):
        scores = _scores(q[..., rows, :], k[..., cols, :], args.scale, mask)
        lse_t = torch.logsumexp(scores, dim=-1)
        out[..., rows, :] = _probs(scores, lse_t) @ v[..., cols, :]
        lse[..., rows] = lse_t
    return out.flatten(1, 2), lse.flatten(1, 2)


def backward(
    args: BlockArgs,
    dout: torch.Tensor,
    lse: torch.Tensor,
    delta: torch.Tensor,
    tile: int = TILE,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dq, dk, dv)`` of one block from the saved (final) ``lse`` and
    ``delta = rowsum(dout * out)`` (both ``(B, Hq, cq)``); ``dk``/``dv`` summed over each query
    group. From ``p = exp(s - lse)``: ``dv = p^T dout``, ``ds = p (dout v^T - delta)``,
    ``dq = scale ds k``, ``dk = scale ds^T q``."""
    q, do = _grouped(args, args.q), _grouped(args, dout)
    lse, delta = _grouped(args, lse[..., None])[..., 0], _grouped(args, delta[..., None])[..., 0]
    k, v = _work(args.k[:, :, None]), _work(args.v[:, :, None])
    dq = torch.zeros_like(q)
    dk = torch.zeros_like(k)
    dv = torch.zeros_like(v)
    for rows, cols, mask in _row_tiles(args, tile):
        p = _probs(_scores(q[..., rows, :], k[..., cols, :], args.scale, mask), lse[..., rows])
        dv[..., cols, :] += (p.transpose(-1, -2) @ do[..., rows, :]).sum(dim=2, keepdim=True)
        dp = do[..., rows, :] @ v[..., cols, :].transpose(-1, -2)
        ds = p * (dp - delta[..., rows, None])
        dq[..., rows, :] = (ds @ k[..., cols, :]) * args.scale
        dk[..., cols, :] += (ds.transpose(-1, -2) @ q[..., rows, :]).sum(
            2, keepdim=True
        ) * args.scale
    return dq.flatten(1, 2), dk[:, :, 0], dv[:, :, 0]
