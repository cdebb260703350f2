"""Block attention in plain torch: the CPU path and the reference for the Triton kernels.

One (query block, key/value block) pair in fp32 (float64 stays float64).

On CPU tensors the block runs in torch's fused flash-attention kernel
(``aten::_scaled_dot_product_flash_attention_for_cpu`` and its backward): it tiles queries and
keys, keeps the online softmax (running max and sum, one ``exp`` per score) in cache and returns
the log-sum-exp, so memory grows as ``c``, not ``c^2`` (and it runs several times faster than
materialising the scores: results/notes-kernels.md). That kernel masks only one way, causal from
position 0 (query row ``i`` sees keys ``j <= i``), or with a dense additive mask. So the block
is cut into *pieces* by the one mask rule of ``ringsim.masks`` on global positions: with sorted
key positions each query row sees a prefix of ``n_i`` keys, and runs of rows whose ``n_i`` is
constant (a full rectangle) or grows by one from 1 (a causal triangle from position 0) are one
fused call each; rows that see nothing are skipped (``out = 0``, ``lse = -inf``). A causal
block of sorted positions is usually one or two runs (a diagonal block: one triangle; a
striped ring's later keys: a triangle shifted by a row; a zigzag ring's off-diagonal: one
rectangle); up to ``MAX_RUNS`` runs are fused. Anything else (document ids, unsorted
positions, more runs) falls back to query tiles of ``TILE`` rows, each against its live key
range (``kernels.blocks.tiles``) with an additive mask of that tile only.

Elsewhere (a CUDA tensor with ``backend="torch"``), and for a backward given only ``delta``
(the fused backward needs the output), the scores of each query tile are materialised with
matmuls (``q`` viewed as ``(B, Hkv, g, cq, d)``, ``k``/``v`` as ``(B, Hkv, 1, ck, d)``), tile by
tile like a real kernel. Either way the work is the tile-granular work of
``ringsim.masks.count_visible(tile=TILE)`` that ``kernels.calibration.measure`` tells the simulator.

The log-sum-exp is fp32 for fp32 work, as in FlashAttention: where scores are huge and tied
(``|s| ~ 1e7`` in fp32) ``lse = max + log(sum)`` loses ``log(sum)`` to rounding, and a
backward that rebuilds ``p = exp(s - lse)`` is off by that factor. FlashAttention's kernels
share the limit; ``ringsim``'s NumPy executor keeps ``row_max`` and ``row_sum`` and is exact
there (``tests/test_torch_block.py`` asserts both).
"""

from __future__ import annotations

import torch

from kernels.blocks.args import BlockArgs
from kernels.blocks.tiles import live_tiles, tile_ranges
from ringsim.masks import visible_mask

TILE = 128
MAX_RUNS = 8  # more row runs than this: the masked-tile fallback (one call per query tile)
_FLASH = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
_FLASH_BACKWARD = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward


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


# --------------------------------------------------------------------------------------------
# The fused path (CPU tensors)
# --------------------------------------------------------------------------------------------
def prefix_runs(visible: list[int]) -> list[tuple[int, int, bool]] | None:
    """``(first row, end row, causal)`` runs of the rows' visible-prefix lengths ``visible``:
    a constant length (a full rectangle) or one growing by one from 1 (a causal triangle);
    rows seeing nothing belong to no run. ``None`` past ``MAX_RUNS`` runs."""
    runs, i, n = [], 0, len(visible)
    while i < n:
        if visible[i] == 0:
            i += 1
            continue
        j = i + 1
        causal = visible[i] == 1 and j < n and visible[j] == 2
        step = 1 if causal else 0
        while j < n and visible[j] == visible[j - 1] + step:
            j += 1
        runs.append((i, j, causal))
        if len(runs) > MAX_RUNS:
            return None
        i = j
    return runs


def _pieces(args: BlockArgs, tile: int):
    """``(query rows, key columns, causal, additive mask or None, empty rows or None)`` pieces
    that cover every visible pair of the block once, each one fused call."""
    cq, ck = args.q.shape[2], args.k.shape[2]
    if not args.causal and args.q_seg is None:
        return [(slice(0, cq), slice(0, ck), False, None, None)]
    k_pos = args.k_pos
    if args.q_seg is None and bool((k_pos[1:] >= k_pos[:-1]).all()):
        visible = torch.searchsorted(k_pos, args.q_pos, right=True).tolist()
        runs = prefix_runs(visible)
        if runs is not None:
            return [
                (slice(a, b), slice(0, visible[b - 1]), causal, None, None) for a, b, causal in runs
            ]
    pieces = []
    for rows, cols, mask in _row_tiles(args, tile):
        additive = torch.zeros(mask.shape, dtype=_work(args.q).dtype)
        additive.masked_fill_(~mask, float("-inf"))
        empty = ~mask.any(dim=1)
        pieces.append((rows, cols, False, additive, empty if bool(empty.any()) else None))
    return pieces


def _heads(args: BlockArgs, x: torch.Tensor) -> torch.Tensor:
    """``(B, Hkv, c, d)`` -> ``(B, Hq, c, d)``: each kv head repeated for its query group."""
    x = _work(x)
    return x if args.group == 1 else x.repeat_interleave(args.group, dim=1)


def _fused(args: BlockArgs) -> bool:
    return args.q.device.type == "cpu"


def _fused_forward(args: BlockArgs, tile: int) -> tuple[torch.Tensor, torch.Tensor]:
    q = _work(args.q).contiguous()
    k, v = _heads(args, args.k), _heads(args, args.v)
    pieces = _pieces(args, tile)
    if len(pieces) == 1 and pieces[0][0] == slice(0, q.shape[2]) and pieces[0][3] is None:
        # one call covers every row (a full block, a contiguous diagonal): its own outputs,
        # not filled and copied into fresh ones; its lse comes laid out (B, c, H), made
        # contiguous as callers (and transfers) expect
        _, cols, causal, _, _ = pieces[0]
        out, lse = _FLASH(q, k[:, :, cols], v[:, :, cols], 0.0, causal, scale=args.scale)
        return out.contiguous(), lse.contiguous()
    out = q.new_zeros(q.shape)
    lse = q.new_full(q.shape[:-1], float("-inf"))
    for rows, cols, causal, mask, empty in pieces:
        out_p, lse_p = _FLASH(
            q[:, :, rows],
            k[:, :, cols],
            v[:, :, cols],
            0.0,
            causal,
            attn_mask=mask,
            scale=args.scale,
        )
        if empty is not None:  # the kernel gives a row without keys lse = 0: make it -inf
            lse_p = lse_p.masked_fill(empty, float("-inf"))
        out[:, :, rows], lse[:, :, rows] = out_p, lse_p
    return out, lse


def _fused_backward(args, dout, lse, out, tile: int):
    q = _work(args.q).contiguous()
    k, v = _heads(args, args.k), _heads(args, args.v)
    do, out = _work(dout).contiguous(), _work(out).contiguous()
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for rows, cols, causal, mask, _ in _pieces(args, tile):
        dq_p, dk_p, dv_p = _FLASH_BACKWARD(
            do[:, :, rows],
            q[:, :, rows],
            k[:, :, cols],
            v[:, :, cols],
            out[:, :, rows],
            lse[:, :, rows],
            0.0,
            causal,
            attn_mask=mask,
            scale=args.scale,
        )
        dq[:, :, rows] = dq_p
        dk[:, :, cols] += dk_p
        dv[:, :, cols] += dv_p
    if args.group > 1:  # sum over the query heads sharing a kv head
        dk, dv = (x.unflatten(1, (args.k.shape[1], args.group)).sum(2) for x in (dk, dv))
    return dq, dk, dv


# --------------------------------------------------------------------------------------------
# The entry points
# --------------------------------------------------------------------------------------------
def forward(args: BlockArgs, tile: int = TILE) -> tuple[torch.Tensor, torch.Tensor]:
    """``(out, lse)``: ``out = softmax(s) v`` ``(B, Hq, cq, d)`` and ``lse = logsumexp(s)``
    ``(B, Hq, cq)``. Fully masked rows: ``lse = -inf``, ``p = 0``, ``out = 0``."""
    if _fused(args):
        return _fused_forward(args, tile)
    return materialised_forward(args, tile)


def backward(
    args: BlockArgs,
    dout: torch.Tensor,
    lse: torch.Tensor,
    delta: torch.Tensor,
    tile: int = TILE,
    out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dq, dk, dv)`` of one block from the saved (final) ``lse`` and
    ``delta = rowsum(dout * out)`` (both ``(B, Hq, cq)``); ``dk``/``dv`` summed over each query
    group. From ``p = exp(s - lse)``: ``dv = p^T dout``, ``ds = p (dout v^T - delta)``,
    ``dq = scale ds k``, ``dk = scale ds^T q``. With the (final) ``out`` ``(B, Hq, cq, d)`` on
    a CPU tensor the fused kernel runs (it forms ``delta`` from ``out`` itself)."""
    if out is not None and _fused(args):
        return _fused_backward(args, dout, _work(lse).contiguous(), out, tile)
    return materialised_backward(args, dout, lse, delta, tile)


# --------------------------------------------------------------------------------------------
# The materialised path: one query tile's scores at a time
# --------------------------------------------------------------------------------------------
def materialised_forward(args: BlockArgs, tile: int = TILE) -> tuple[torch.Tensor, torch.Tensor]:
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


def materialised_backward(args, dout, lse, delta, tile: int = TILE):
    """``(dq, dk, dv)`` of ``backward`` from the scores of one query tile at a time."""
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
