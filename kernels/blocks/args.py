"""The arguments of one block call, checked once for every backend.

``check_block_args`` validates shapes (GQA on axis -3), dtypes, devices, positions and document
ids and returns ``BlockArgs``: 4-d views ``(B, H, c, d)`` and the mask inputs.
``kernels.blocks.dispatch``
(the dispatcher) and the backends (``torch_block``, ``triton_block``, ``tiles``) import it from
here, so no backend imports the dispatcher.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

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
    q_pos: object = None,
    k_pos: object = None,
    causal: bool = False,
    scale: float | None = None,
    q_seg: object = None,
    k_seg: object = None,
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
