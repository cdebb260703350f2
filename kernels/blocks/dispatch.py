"""The block primitive of Ring Attention on torch tensors, with a Triton and a torch backend.

``block_attention(q, k, v, ...) -> (out, lse)`` scores one query block against one key/value
block; ``block_attention_backward(q, k, v, dout, out, lse, ...) -> (dq, dk, dv)`` is its
flash-style backward from the saved log-sum-exp. Shapes follow ``ringsim.numerics.attention``:
``q`` is ``(..., Hq, cq, d)``, ``k``/``v`` are ``(..., Hkv, ck, d)`` with ``Hq`` a multiple of
``Hkv`` (grouped-query attention on axis -3); ``(c, d)`` arrays are one head.

The mask comes from *global token positions* (``q_pos`` ``(cq,)``, ``k_pos`` ``(ck,)``) and
optional document ids (``q_seg``, ``k_seg``), with the one rule of ``ringsim.masks``: a query
sees a key when ``k_pos <= q_pos`` (if causal) and both share a document. So one kernel serves
every layout. Rows that see no key get ``lse = -inf`` and ``out = 0``, never NaN.

Backends: ``"triton"`` (``kernels.blocks.triton_block``; CUDA tensors, or CPU tensors when
``TRITON_INTERPRET=1`` was set before that module was imported), ``"torch"`` (matmul +
logsumexp, ``kernels.blocks.torch_block``) and ``"auto"`` (Triton on CUDA, torch elsewhere).
Everything accumulates in fp32.
"""

from __future__ import annotations

import os

import torch

from kernels.blocks.args import BlockArgs, check_block_args

__all__ = [
    "BACKENDS",
    "BlockArgs",
    "block_attention",
    "block_attention_backward",
    "check_block_args",
]

BACKENDS = ("auto", "torch", "triton")


def resolve_backend(backend: str, device: torch.device) -> str:
    """``auto`` -> ``triton`` on CUDA, ``torch`` elsewhere; ``triton`` on CPU needs the
    interpreter (``TRITON_INTERPRET=1``)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if backend == "auto":
        return "triton" if device.type == "cuda" else "torch"
    if backend == "triton" and device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        raise ValueError(
            f"backend='triton' on {device.type} tensors needs TRITON_INTERPRET=1 (set before "
            "kernels.blocks.triton_block is imported), or CUDA tensors"
        )
    return backend


def block_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    q_pos: object = None,
    k_pos: object = None,
    causal: bool = False,
    scale: float | None = None,
    q_seg: object = None,
    k_seg: object = None,
    backend: str = "auto",
    out_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of a query block against a key/value block: ``(out, lse)``.

    ``out``: ``(..., Hq, cq, d)`` in ``out_dtype`` (default ``q.dtype``); ``lse``:
    ``(..., Hq, cq)`` fp32, ``-inf`` for rows with no visible key (their ``out`` is 0).
    Positions default to ``arange``; ``causal`` uses ``k_pos <= q_pos``.
    """
    args = check_block_args(
        q, k, v, q_pos=q_pos, k_pos=k_pos, causal=causal, scale=scale, q_seg=q_seg, k_seg=k_seg
    )
    if resolve_backend(backend, q.device) == "triton":
        import kernels.blocks.triton_block as triton_block

        out, lse = triton_block.forward(args)
    else:
        import kernels.blocks.torch_block as torch_block

        out, lse = torch_block.forward(args)
    out_dtype = q.dtype if out_dtype is None else out_dtype
    return out.reshape(q.shape).to(out_dtype), lse.reshape(q.shape[:-1])


def block_attention_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    dout: torch.Tensor,
    out: torch.Tensor | None,
    lse: torch.Tensor,
    *,
    q_pos: object = None,
    k_pos: object = None,
    causal: bool = False,
    scale: float | None = None,
    q_seg: object = None,
    k_seg: object = None,
    delta: torch.Tensor | None = None,
    backend: str = "auto",
    out_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients ``(dq, dk, dv)`` of one block pair from the saved log-sum-exp.

    ``lse``: ``(..., Hq, cq)`` the *final* log-sum-exp of each query row (in a ring, over all
    blocks), so ``p = exp(s - lse)`` is rebuilt exactly. ``delta = rowsum(dout * out)`` is
    computed from ``out`` unless given (a ring computes it once for all its blocks). ``dk``/``dv``
    are summed over the query heads sharing each kv head. Gradients come back in ``out_dtype``
    (default: the input dtype); they are accumulated in fp32.
    """
    args = check_block_args(
        q, k, v, q_pos=q_pos, k_pos=k_pos, causal=causal, scale=scale, q_seg=q_seg, k_seg=k_seg
    )
    if dout.shape != q.shape:
        raise ValueError(f"dout must have the shape of q {tuple(q.shape)}, got {tuple(dout.shape)}")
    if lse.shape != q.shape[:-1]:
        raise ValueError(f"lse must have shape {tuple(q.shape[:-1])}, got {tuple(lse.shape)}")
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    if delta is None:
        if out is None:
            raise ValueError("block_attention_backward needs out (or delta = rowsum(dout * out))")
        delta = (dout.to(work) * out.to(work)).sum(dim=-1)
    dout4 = dout.reshape(args.q.shape)
    lse3 = lse.to(work).reshape(args.q.shape[:-1])
    delta3 = delta.to(work).reshape(args.q.shape[:-1])
    if resolve_backend(backend, q.device) == "triton":
        import kernels.blocks.triton_block as triton_block

        dq, dk, dv = triton_block.backward(args, dout4, lse3, delta3)
    else:
        import kernels.blocks.torch_block as torch_block

        out4 = None if out is None else out.reshape(args.q.shape)  # the fused CPU kernel's input
        dq, dk, dv = torch_block.backward(args, dout4, lse3, delta3, out=out4)
    out_dtype = q.dtype if out_dtype is None else out_dtype
    return tuple(
        g.reshape(shape).to(out_dtype) for g, shape in ((dq, q.shape), (dk, k.shape), (dv, v.shape))
    )
