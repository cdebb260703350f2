"""Triton kernels for one (query block, key/value block) pair: forward and backward.

How the forward works (FlashAttention-2 style)
----------------------------------------------
One program owns a tile of ``BLOCK_M`` query rows of one head and walks over the key/value
block in tiles of ``BLOCK_N`` keys. It never materialises the ``cq x ck`` score matrix: for each
key tile it computes the ``BLOCK_M x BLOCK_N`` scores in registers and folds them into three
running quantities per row, the *online softmax*:

* ``m_i``: the largest score seen so far (the ``row_max`` of
  ``ringsim.numerics.attention.Partial``),
* ``l_i``: the sum of ``exp(score - m_i)`` (``row_sum``),
* ``acc``: the sum of ``exp(score - m_i) * v`` (the unnormalised output).

When a new tile raises the maximum from ``m_i`` to ``m_new``, everything accumulated so far is
multiplied by ``alpha = exp(m_i - m_new)``: the same rescale as
``ringsim.numerics.attention.merge``.
At the end ``out = acc / l_i`` and ``lse = m_i + log(l_i)``. Scores are kept in base 2
(``exp2`` is one instruction; ``log2(e)`` is folded into the scale) and converted back to a
natural-log ``lse`` on the way out.

The mask, from global positions
-------------------------------
Each program loads the *global* positions of its query rows and of each key tile, and applies
the rule of ``ringsim.masks.visible_mask``: causal keeps ``k_pos <= q_pos``, segments keep equal
document ids. A row whose every score is masked keeps ``m_i = -inf``; the subtraction is shifted
by 0 instead of ``-inf`` so no ``-inf - -inf`` NaN appears, and such a row ends with
``lse = -inf`` and ``out = 0``.

Skipping fully masked tiles
---------------------------
Before the launch, ``plan`` decides on the host (``kernels.blocks.tiles.live_tiles``, torch ops on
the tensors' device, no synchronisation) which (query tile, key tile) pairs can contain a visible
pair, from each tile's smallest/largest position and document id. A caller that times the
kernels (``kernels.gpu.check``) makes the plan once, outside the timed region. Every program
then loops only over the range ``[lo, hi)`` of key tiles spanning its live ones. For the sorted
positions of every layout the live key tiles of a query tile are contiguous, so the range skips
exactly the empty tiles (the upper triangle of a causal diagonal block, or a whole block that
lies in the future); for arbitrary positions the range is still correct, only less tight.

Backward
--------
From the saved ``lse`` the probabilities are rebuilt exactly, ``p = exp(s - lse)``, with
``delta = rowsum(dout * out)`` (computed once by the caller, e.g. with ``row_delta``):
``dv = p^T dout``, ``dp = dout v^T``, ``ds = p * (dp - delta)``, ``dq = scale ds k``,
``dk = scale ds^T q``. Two kernels avoid atomics: ``_attn_bwd_dkdv`` owns a key tile and loops
over the query tiles of *every* query head sharing its kv head (so GQA sums stay in registers);
``_attn_bwd_dq`` owns a query tile and loops over key tiles like the forward.

Sizes
-----
Batch and heads are folded into the one grid axis with the tiles (a 2-d grid's second axis
stops at 65,535); a head's base offset is 64-bit (a tensor may hold 2^31 elements or more),
offsets inside one head are 32-bit, so one head's ``c x d`` must stay below 2^31 elements
(``ValueError`` otherwise). Positions and document ids are loaded as int64, as given.

Triton versions
---------------
Written for Triton 3.9 (pinned for CI) and 3.6 (the GPU machine): everything used here
(``tl.dot(..., input_precision=...)`` with ``"tf32"``/``"tf32x3"``/``"ieee"``, ``tl.cdiv``,
``tensor.to(tl.int64)``, launches with ``num_warps``/``num_stages``) is the same in both.
Neither interpreter multiplies bfloat16 ``tl.dot`` operands correctly (the tests install
``tests/triton_shim.py``).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from kernels.blocks.args import BlockArgs
from kernels.blocks.tiles import (  # TileConfig, TilePlan, plan: part of this API too
    TileConfig,
    TilePlan,
    grid,
    plan,
)

LOG2E = math.log2(math.e)


# ------------------------------------------------------------------------------------------
# Kernels
# ------------------------------------------------------------------------------------------


@triton.jit
def _visible(q_pos, q_seg, offs_n, KPos, KSeg, ck, CAUSAL: tl.constexpr, HAS_SEG: tl.constexpr):
    """``(BLOCK_M, BLOCK_N)`` mask: in bounds, and the rule of ``ringsim.masks``."""
    in_bounds = offs_n < ck
    visible = in_bounds[None, :]  # (1, BLOCK_N), broadcasts against the scores
    if CAUSAL:
        k_pos = tl.load(KPos + offs_n, mask=in_bounds, other=0)
        visible = visible & (k_pos[None, :] <= q_pos[:, None])
    if HAS_SEG:
        k_seg = tl.load(KSeg + offs_n, mask=in_bounds, other=-1)
        visible = visible & (k_seg[None, :] == q_seg[:, None])
    return visible


@triton.jit
def _attn_fwd(
    Q,
    K,
    V,
    Out,
    Lse,
    QPos,
    KPos,
    QSeg,
    KSeg,
    KvLo,
    KvHi,
    qk_scale_log2,
    s_qb,
    s_qh,
    s_qm,
    s_qd,
    s_kb,
    s_kh,
    s_kn,
    s_kd,
    s_vb,
    s_vh,
    s_vn,
    s_vd,
    s_ob,
    s_oh,
    s_om,
    s_od,
    heads,
    group,
    cq,
    ck,
    head_dim,
    CAUSAL: tl.constexpr,
    HAS_SEG: tl.constexpr,
    PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    n_m = tl.cdiv(cq, BLOCK_M)
    pid_m = tl.program_id(0) % n_m
    pid_bh = tl.program_id(0) // n_m  # (batch, query head), folded into the one grid axis
    b = (pid_bh // heads).to(tl.int64)  # 64-bit head bases: a tensor may exceed 2^31 elements
    h = (pid_bh % heads).to(tl.int64)
    h_kv = h // group  # GQA: this query head reads the kv head of its group

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    row_ok = offs_m < cq
    d_ok = offs_d < head_dim
    q = tl.load(
        Q + b * s_qb + h * s_qh + offs_m[:, None] * s_qm + offs_d[None, :] * s_qd,
        mask=row_ok[:, None] & d_ok[None, :],
        other=0.0,
    )
    q_pos = tl.load(QPos + offs_m, mask=row_ok, other=0)
    q_seg = q_pos
    if HAS_SEG:
        q_seg = tl.load(QSeg + offs_m, mask=row_ok, other=-2)
    k_base = K + b * s_kb + h_kv * s_kh
    v_base = V + b * s_vb + h_kv * s_vh

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)

    lo = tl.load(KvLo + pid_m)
    hi = tl.load(KvHi + pid_m)
    for j in range(lo, hi):  # only the key tiles that can hold a visible pair
        offs_n = j * BLOCK_N + tl.arange(0, BLOCK_N)
        kv_mask = (offs_n < ck)[:, None] & d_ok[None, :]
        k = tl.load(
            k_base + offs_n[:, None] * s_kn + offs_d[None, :] * s_kd, mask=kv_mask, other=0.0
        )
        v = tl.load(
            v_base + offs_n[:, None] * s_vn + offs_d[None, :] * s_vd, mask=kv_mask, other=0.0
        )

        scores = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale_log2
        visible = _visible(q_pos, q_seg, offs_n, KPos, KSeg, ck, CAUSAL, HAS_SEG)
        scores = tl.where(visible, scores, float("-inf"))

        # online softmax: rescale what we have to the new row maximum, add this tile
        m_new = tl.maximum(m_i, tl.max(scores, 1))
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with nothing visible yet
        p = tl.exp2(scores - shift[:, None])
        alpha = tl.exp2(m_i - shift)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m_i = m_new

    seen = l_i > 0
    l_safe = tl.where(seen, l_i, 1.0)
    out = acc / l_safe[:, None]
    lse = tl.where(seen, (m_i + tl.log2(l_safe)) * 0.6931471805599453, float("-inf"))  # * ln 2
    tl.store(
        Out + b * s_ob + h * s_oh + offs_m[:, None] * s_om + offs_d[None, :] * s_od,
        out.to(Out.dtype.element_ty),
        mask=row_ok[:, None] & d_ok[None, :],
    )
    tl.store(Lse + (b * heads + h) * cq + offs_m, lse, mask=row_ok)


@triton.jit
def _attn_bwd_dkdv(
    Q,
    K,
    V,
    DO,
    Lse,
    Delta,
    DK,
    DV,
    QPos,
    KPos,
    QSeg,
    KSeg,
    QLo,
    QHi,
    scale,
    qk_scale_log2,
    s_qb,
    s_qh,
    s_qm,
    s_qd,
    s_kb,
    s_kh,
    s_kn,
    s_kd,
    s_vb,
    s_vh,
    s_vn,
    s_vd,
    s_ob,
    s_oh,
    s_om,
    s_od,
    s_gb,
    s_gh,
    s_gn,
    s_gd,
    heads,
    kv_heads,
    group,
    cq,
    ck,
    head_dim,
    CAUSAL: tl.constexpr,
    HAS_SEG: tl.constexpr,
    PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """One program: a tile of keys of one kv head; ``dk``/``dv`` summed over its query group."""
    n_n = tl.cdiv(ck, BLOCK_N)
    pid_n = tl.program_id(0) % n_n
    pid_bh = tl.program_id(0) // n_n  # (batch, kv head)
    b = (pid_bh // kv_heads).to(tl.int64)
    h_kv = (pid_bh % kv_heads).to(tl.int64)

    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < head_dim
    kv_mask = (offs_n < ck)[:, None] & d_ok[None, :]
    k = tl.load(
        K + b * s_kb + h_kv * s_kh + offs_n[:, None] * s_kn + offs_d[None, :] * s_kd,
        mask=kv_mask,
        other=0.0,
    )
    v = tl.load(
        V + b * s_vb + h_kv * s_vh + offs_n[:, None] * s_vn + offs_d[None, :] * s_vd,
        mask=kv_mask,
        other=0.0,
    )
    dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)

    lo = tl.load(QLo + pid_n)
    hi = tl.load(QHi + pid_n)
    for g in range(group):
        h = h_kv * group + g
        for i in range(lo, hi):  # query tiles that can see this key tile
            offs_m = i * BLOCK_M + tl.arange(0, BLOCK_M)
            row_ok = offs_m < cq
            q_mask = row_ok[:, None] & d_ok[None, :]
            q = tl.load(
                Q + b * s_qb + h * s_qh + offs_m[:, None] * s_qm + offs_d[None, :] * s_qd,
                mask=q_mask,
                other=0.0,
            )
            do = tl.load(
                DO + b * s_ob + h * s_oh + offs_m[:, None] * s_om + offs_d[None, :] * s_od,
                mask=q_mask,
                other=0.0,
            )
            row = (b * heads + h) * cq + offs_m
            lse = tl.load(Lse + row, mask=row_ok, other=float("-inf"))
            delta = tl.load(Delta + row, mask=row_ok, other=0.0)
            q_pos = tl.load(QPos + offs_m, mask=row_ok, other=0)
            q_seg = q_pos
            if HAS_SEG:
                q_seg = tl.load(QSeg + offs_m, mask=row_ok, other=-2)

            # p = exp(s - lse); a row with lse = -inf saw nothing: shift by +inf gives p = 0
            lse_log2 = tl.where(lse == float("-inf"), float("inf"), lse * 1.4426950408889634)
            scores = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale_log2
            p = tl.exp2(scores - lse_log2[:, None])
            visible = _visible(q_pos, q_seg, offs_n, KPos, KSeg, ck, CAUSAL, HAS_SEG)
            p = tl.where(visible & row_ok[:, None], p, 0.0)

            dv += tl.dot(tl.trans(p).to(do.dtype), do, input_precision=PRECISION)
            dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
            ds = p * (dp - delta[:, None])
            dk += tl.dot(tl.trans(ds).to(q.dtype), q, input_precision=PRECISION)

    grad_ptr = b * s_gb + h_kv * s_gh + offs_n[:, None] * s_gn + offs_d[None, :] * s_gd
    tl.store(DK + grad_ptr, (dk * scale).to(DK.dtype.element_ty), mask=kv_mask)
    tl.store(DV + grad_ptr, dv.to(DV.dtype.element_ty), mask=kv_mask)


@triton.jit
def _attn_bwd_dq(
    Q,
    K,
    V,
    DO,
    Lse,
    Delta,
    DQ,
    QPos,
    KPos,
    QSeg,
    KSeg,
    KvLo,
    KvHi,
    scale,
    qk_scale_log2,
    s_qb,
    s_qh,
    s_qm,
    s_qd,
    s_kb,
    s_kh,
    s_kn,
    s_kd,
    s_vb,
    s_vh,
    s_vn,
    s_vd,
    s_ob,
    s_oh,
    s_om,
    s_od,
    heads,
    group,
    cq,
    ck,
    head_dim,
    CAUSAL: tl.constexpr,
    HAS_SEG: tl.constexpr,
    PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """One program: a tile of query rows of one head; ``dq`` over the live key tiles."""
    n_m = tl.cdiv(cq, BLOCK_M)
    pid_m = tl.program_id(0) % n_m
    pid_bh = tl.program_id(0) // n_m
    b = (pid_bh // heads).to(tl.int64)
    h = (pid_bh % heads).to(tl.int64)
    h_kv = h // group

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    row_ok = offs_m < cq
    d_ok = offs_d < head_dim
    q_mask = row_ok[:, None] & d_ok[None, :]
    q = tl.load(
        Q + b * s_qb + h * s_qh + offs_m[:, None] * s_qm + offs_d[None, :] * s_qd,
        mask=q_mask,
        other=0.0,
    )
    do = tl.load(
        DO + b * s_ob + h * s_oh + offs_m[:, None] * s_om + offs_d[None, :] * s_od,
        mask=q_mask,
        other=0.0,
    )
    row = (b * heads + h) * cq + offs_m
    lse = tl.load(Lse + row, mask=row_ok, other=float("-inf"))
    delta = tl.load(Delta + row, mask=row_ok, other=0.0)
    lse_log2 = tl.where(lse == float("-inf"), float("inf"), lse * 1.4426950408889634)
    q_pos = tl.load(QPos + offs_m, mask=row_ok, other=0)
    q_seg = q_pos
    if HAS_SEG:
        q_seg = tl.load(QSeg + offs_m, mask=row_ok, other=-2)
    k_base = K + b * s_kb + h_kv * s_kh
    v_base = V + b * s_vb + h_kv * s_vh
    dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)

    lo = tl.load(KvLo + pid_m)
    hi = tl.load(KvHi + pid_m)
    for j in range(lo, hi):
        offs_n = j * BLOCK_N + tl.arange(0, BLOCK_N)
        kv_mask = (offs_n < ck)[:, None] & d_ok[None, :]
        k = tl.load(
            k_base + offs_n[:, None] * s_kn + offs_d[None, :] * s_kd, mask=kv_mask, other=0.0
        )
        v = tl.load(
            v_base + offs_n[:, None] * s_vn + offs_d[None, :] * s_vd, mask=kv_mask, other=0.0
        )
        scores = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale_log2
        p = tl.exp2(scores - lse_log2[:, None])
        visible = _visible(q_pos, q_seg, offs_n, KPos, KSeg, ck, CAUSAL, HAS_SEG)
        p = tl.where(visible, p, 0.0)
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k, input_precision=PRECISION)

    tl.store(
        DQ + b * s_qb + h * s_qh + offs_m[:, None] * s_qm + offs_d[None, :] * s_qd,
        (dq * scale).to(DQ.dtype.element_ty),
        mask=q_mask,
    )


@triton.jit
def _attn_bwd_delta(
    Out,
    DO,
    Delta,
    s_ob,
    s_oh,
    s_om,
    s_od,
    s_gb,
    s_gh,
    s_gm,
    s_gd,
    heads,
    cq,
    head_dim,
    BLOCK_M: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """``delta = rowsum(dout * out)`` in fp32 for a tile of rows of one head."""
    n_m = tl.cdiv(cq, BLOCK_M)
    pid_m = tl.program_id(0) % n_m
    pid_bh = tl.program_id(0) // n_m
    b = (pid_bh // heads).to(tl.int64)
    h = (pid_bh % heads).to(tl.int64)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    row_ok = offs_m < cq
    mask = row_ok[:, None] & (offs_d < head_dim)[None, :]
    rows = offs_m[:, None]
    out = tl.load(Out + b * s_ob + h * s_oh + rows * s_om + offs_d[None, :] * s_od, mask=mask)
    do = tl.load(DO + b * s_gb + h * s_gh + rows * s_gm + offs_d[None, :] * s_gd, mask=mask)
    delta = tl.sum(out.to(tl.float32) * do.to(tl.float32), 1)
    tl.store(Delta + (b * heads + h) * cq + offs_m, delta, mask=row_ok)


# The jitted kernels by name (``kernels.gpu.aot`` compiles each launch of them ahead of time)
KERNELS = {
    "_attn_fwd": _attn_fwd,
    "_attn_bwd_dkdv": _attn_bwd_dkdv,
    "_attn_bwd_dq": _attn_bwd_dq,
    "_attn_bwd_delta": _attn_bwd_delta,
}


# ------------------------------------------------------------------------------------------
# Host side: which tiles are live, and the launches
# ------------------------------------------------------------------------------------------


def _precision(dtype: torch.dtype) -> str:
    # bf16/fp16: tensor cores ("tf32" is ignored for 16-bit inputs). fp32: "tf32x3", three tf32
    # products with about fp32 accuracy and no register spills ("ieee" FMA dots spilled, see
    # kernels.blocks.tiles.gpu_config). fp64: exact.
    if dtype == torch.float64:
        return "ieee"
    return "tf32x3" if dtype == torch.float32 else "tf32"


def _block_d(head_dim: int) -> int:
    return max(16, triton.next_power_of_2(head_dim))


def forward(
    args: BlockArgs,
    out_dtype: torch.dtype | None = None,
    config: TileConfig | None = None,
    tile_plan: TilePlan | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Launch ``_attn_fwd``: ``out`` ``(B, Hq, cq, d)`` in ``out_dtype`` (default fp32) and
    ``lse`` ``(B, Hq, cq)`` fp32. ``tile_plan``: from ``plan(args, "forward", config)``."""
    tp = tile_plan or plan(args, "forward", config)
    cfg = tp.config
    q, k, v = args.q.contiguous(), args.k.contiguous(), args.v.contiguous()
    batch, heads, cq, head_dim = q.shape
    ck = k.shape[2]
    out = torch.empty(q.shape, dtype=out_dtype or torch.float32, device=q.device)
    lse = torch.empty((batch, heads, cq), dtype=torch.float32, device=q.device)
    _attn_fwd[grid(triton.cdiv(cq, cfg.block_m), batch * heads)](
        q,
        k,
        v,
        out,
        lse,
        args.q_pos,
        args.k_pos,
        tp.q_seg,
        tp.k_seg,
        tp.kv_lo,
        tp.kv_hi,
        args.scale * LOG2E,
        *q.stride(),
        *k.stride(),
        *v.stride(),
        *out.stride(),
        heads,
        args.group,
        cq,
        ck,
        head_dim,
        CAUSAL=args.causal,
        HAS_SEG=tp.has_seg,
        PRECISION=_precision(q.dtype),
        BLOCK_M=cfg.block_m,
        BLOCK_N=cfg.block_n,
        BLOCK_D=_block_d(head_dim),
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )
    return out, lse


def row_delta(out: torch.Tensor, dout: torch.Tensor, block_m: int | None = None) -> torch.Tensor:
    """``delta = rowsum(dout * out)``, ``(B, H, c)`` fp32, in one launch; ``out``/``dout``
    ``(B, H, c, d)`` in any float dtype. ``block_m``: rows per program (64 on a GPU)."""
    if out.shape != dout.shape or out.ndim != 4:
        raise ValueError(
            f"out and dout must share a (B, H, c, d) shape, got {tuple(out.shape)}, "
            f"{tuple(dout.shape)}"
        )
    batch, heads, c, head_dim = out.shape
    delta = torch.empty((batch, heads, c), dtype=torch.float32, device=out.device)
    block_m = block_m or (64 if out.device.type == "cuda" else 16)
    _attn_bwd_delta[grid(triton.cdiv(c, block_m), batch * heads)](
        out,
        dout,
        delta,
        *out.stride(),
        *dout.stride(),
        heads,
        c,
        head_dim,
        BLOCK_M=block_m,
        BLOCK_D=_block_d(head_dim),
    )
    return delta


def backward(
    args: BlockArgs,
    dout: torch.Tensor,
    lse: torch.Tensor,
    delta: torch.Tensor,
    grad_dtype: torch.dtype | None = None,
    config: TileConfig | None = None,
    tile_plan: TilePlan | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Launch ``_attn_bwd_dkdv`` and ``_attn_bwd_dq``; gradients in ``grad_dtype``
    (default fp32). ``lse``, ``delta``: ``(B, Hq, cq)`` fp32. ``tile_plan``: from
    ``plan(args, "backward", config)``."""
    tp = tile_plan or plan(args, "backward", config)
    cfg = tp.config
    q, k, v = args.q.contiguous(), args.k.contiguous(), args.v.contiguous()
    batch, heads, cq, head_dim = q.shape
    kv_heads, ck = k.shape[1], k.shape[2]
    grad_dtype = grad_dtype or torch.float32
    dout = dout.contiguous()
    lse = lse.float().contiguous()
    delta = delta.float().contiguous()
    dq = torch.empty(q.shape, dtype=grad_dtype, device=q.device)
    dk = torch.empty(k.shape, dtype=grad_dtype, device=q.device)
    dv = torch.empty(k.shape, dtype=grad_dtype, device=q.device)
    flags = dict(
        CAUSAL=args.causal,
        HAS_SEG=tp.has_seg,
        PRECISION=_precision(q.dtype),
        BLOCK_M=cfg.block_m,
        BLOCK_N=cfg.block_n,
        BLOCK_D=_block_d(head_dim),
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )
    masks = (args.q_pos, args.k_pos, tp.q_seg, tp.k_seg)
    _attn_bwd_dkdv[grid(triton.cdiv(ck, cfg.block_n), batch * kv_heads)](
        q,
        k,
        v,
        dout,
        lse,
        delta,
        dk,
        dv,
        *masks,
        tp.q_lo,
        tp.q_hi,
        args.scale,
        args.scale * LOG2E,
        *q.stride(),
        *k.stride(),
        *v.stride(),
        *dout.stride(),
        *dk.stride(),
        heads,
        kv_heads,
        args.group,
        cq,
        ck,
        head_dim,
        **flags,
    )
    _attn_bwd_dq[grid(triton.cdiv(cq, cfg.block_m), batch * heads)](
        q,
        k,
        v,
        dout,
        lse,
        delta,
        dq,
        *masks,
        tp.kv_lo,
        tp.kv_hi,
        args.scale,
        args.scale * LOG2E,
        *q.stride(),
        *k.stride(),
        *v.stride(),
        *dout.stride(),
        heads,
        args.group,
        cq,
        ck,
        head_dim,
        **flags,
    )
    return dq, dk, dv
