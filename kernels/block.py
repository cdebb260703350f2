"""The block primitive of Ring Attention on torch tensors, with a Triton and a torch backend.

``block_attention(q, k, v, ...) -> (out, lse)`` scores one query block against one key/value
block; ``block_attention_backward(q, k, v, dout, out, lse, ...) -> (dq, dk, dv)`` is its
flash-style backward from the saved log-sum-exp. Shapes follow ``ringsim.attention``:
``q`` is ``(..., Hq, cq, d)``, ``k``/``v`` are ``(..., Hkv, ck, d)`` with ``Hq`` a multiple of
``Hkv`` (grouped-query attention on axis -3); ``(c, d)`` arrays are one head.

The mask comes from *global token positions* (``q_pos`` ``(cq,)``, ``k_pos`` ``(ck,)``) and
optional document ids (``q_seg``, ``k_seg``), with the one rule of ``ringsim.masks``: a query
sees a key when ``k_pos <= q_pos`` (if causal) and both share a document. So one kernel serves
every layout. Rows that see no key get ``lse = -inf`` and ``out = 0``, never NaN.

Backends: ``"triton"`` (``kernels.triton_block``; CUDA tensors, or CPU tensors when
``TRITON_INTERPRET=1`` was set before that module was imported), ``"torch"`` (matmul +
logsumexp, ``kernels.torch_block``) and ``"auto"`` (Triton on CUDA, torch elsewhere).
Everything accumulates in fp32.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import torch

BACKENDS = ("auto", "torch", "triton")
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


@dataclass(frozen=True)
class BlockArgs:
    """Validated, normalised arguments: 4-d views ``(B, H, c, d)`` and the mask inputs."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    q_pos: torch.Tensor
    k_pos: torch.Tensor
    q_seg: torch.Tensor | None
    k_seg: torch.Tensor | None
    causal: bool
    scale: float
    q_shape: torch.Size
    k_shape: torch.Size

    @property
    def group(self) -> int:
        return self.q.shape[1] // self.k.shape[1]

    def grouped(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, Hq, c, x)`` -> ``(B, Hkv, g, c, x)``."""
        return x.reshape(x.shape[0], self.k.shape[1], self.group, *x.shape[2:])


def _as_4d(name: str, x: object) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in FLOAT_DTYPES:
        raise ValueError(f"{name} must be a float16/bfloat16/float32/float64 tensor, got {x.dtype}")
    if x.ndim < 2 or x.shape[-1] == 0 or x.shape[-2] == 0:
        raise ValueError(f"{name} must have shape (..., seq, dim), got {tuple(x.shape)}")
    if x.ndim == 2:
        return x[None, None]
    return x.reshape(-1, *x.shape[-3:])


def _positions(name: str, pos: object, length: int, device: torch.device) -> torch.Tensor:
    if pos is None:
        return torch.arange(length, device=device)
    pos = torch.as_tensor(pos, device=device)
    if pos.dtype.is_floating_point or pos.dtype == torch.bool or pos.shape != (length,):
        raise ValueError(
            f"{name} must be integer positions of shape ({length},), got "
            f"{pos.dtype} {tuple(pos.shape)}"
        )
    return pos.long()


def check_block_args(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    q_pos: object,
    k_pos: object,
    causal: bool,
    scale: float | None,
    q_seg: object,
    k_seg: object,
) -> BlockArgs:
    """Validate shapes (GQA on axis -3), positions and segments; default ``scale = d**-0.5``."""
    q4, k4, v4 = _as_4d("q", q), _as_4d("k", k), _as_4d("v", v)
    if k.shape != v.shape:
        raise ValueError(
            f"k and v must have the same shape, got {tuple(k.shape)}, {tuple(v.shape)}"
        )
    if q.ndim != k.ndim or q.shape[:-3] != k.shape[:-3] or q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k must share batch dims and head dim, got {tuple(q.shape)}, {tuple(k.shape)}"
        )
    if q4.shape[1] % k4.shape[1]:
        raise ValueError(
            f"query heads must be a multiple of kv heads (GQA), got {q4.shape[1]} and {k4.shape[1]}"
        )
    if not (q.dtype == k.dtype == v.dtype) or not (q.device == k.device == v.device):
        raise ValueError(
            f"q, k, v must share dtype and device, got {q.dtype}/{q.device}, "
            f"{k.dtype}/{k.device}, {v.dtype}/{v.device}"
        )
    if (q_seg is None) != (k_seg is None):
        raise ValueError("q_seg and k_seg must be given together (document ids of both blocks)")
    cq, ck = q4.shape[2], k4.shape[2]
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    if not math.isfinite(scale) or scale == 0:
        raise ValueError(f"scale must be finite and non-zero, got {scale!r}")
    return BlockArgs(
        q4,
        k4,
        v4,
        _positions("q_pos", q_pos, cq, q.device),
        _positions("k_pos", k_pos, ck, q.device),
        None if q_seg is None else _positions("q_seg", q_seg, cq, q.device),
        None if k_seg is None else _positions("k_seg", k_seg, ck, q.device),
        bool(causal),
        float(scale),
        q.shape,
        k.shape,
    )


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
            "kernels.triton_block is imported), or CUDA tensors"
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
        from kernels import triton_block

        out, lse = triton_block.forward(args)
    else:
        from kernels import torch_block

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
        from kernels import triton_block

        dq, dk, dv = triton_block.backward(args, dout4, lse3, delta3)
    else:
        from kernels import torch_block

        dq, dk, dv = torch_block.backward(args, dout4, lse3, delta3)
    out_dtype = q.dtype if out_dtype is None else out_dtype
    return tuple(
        g.reshape(shape).to(out_dtype) for g, shape in ((dq, q.shape), (dk, k.shape), (dv, v.shape))
    )
