"""Argument checks shared by every public entry point.

Every failure is a ``ValueError`` whose message names the argument and the value, so a user
who passes ``hosts=0`` reads ``hosts must be a positive integer, got 0`` and not a traceback
from deep inside NumPy.
"""

from __future__ import annotations

import numbers

import numpy as np

FLOAT_DTYPES = (np.float16, np.float32, np.float64)


def check_positive_int(name: str, value: object) -> int:
    """Return ``value`` as an int if it is a positive integer (bools and floats are refused)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def check_bool(name: str, value: object) -> bool:
    """Return ``value`` if it is a bool (or a NumPy bool); ``"false"``, ``0`` or ``None`` are
    refused: ``bool("false")`` is ``True``, so a string flag would silently mean its opposite."""
    if not isinstance(value, bool | np.bool_):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def check_overflow(name: str, x: np.ndarray, dtype: object = np.float64) -> None:
    """Refuse a non-finite result computed from finite inputs: the arithmetic overflowed."""
    if not np.all(np.isfinite(x)):
        raise ValueError(
            f"{name} overflowed in {np.dtype(dtype).name}: the scores q.k*scale (or the values) "
            "are too large to represent; rescale them"
        )


def check_finite_array(name: str, x: np.ndarray) -> None:
    """Refuse NaN or inf up front: attention would silently turn them into NaN outputs."""
    if not np.all(np.isfinite(x)):
        bad = np.argwhere(~np.isfinite(x))[0]
        raise ValueError(
            f"{name} contains NaN or inf (first at index {tuple(int(i) for i in bad)}: "
            f"{x[tuple(bad)]!r}); attention of non-finite inputs is undefined"
        )


def as_float_array(name: str, x: object) -> np.ndarray:
    """Convert to a floating ndarray of at least two dimensions ``(..., seq, dim)``."""
    arr = np.asarray(x)
    if arr.dtype.kind not in "f" or arr.dtype.type not in FLOAT_DTYPES:
        raise ValueError(
            f"{name} must be a float16, float32 or float64 array, got dtype {arr.dtype}"
        )
    if arr.ndim < 2:
        raise ValueError(f"{name} must have shape (..., seq, dim), got shape {arr.shape}")
    if 0 in arr.shape:  # zero heads (or batch) would divide by zero in the GQA grouping
        raise ValueError(
            f"{name} must have no empty axis (batch, heads, seq, dim), got shape {arr.shape}"
        )
    return arr


def check_qkv(
    q: object, k: object, v: object, *, finite: bool = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validate the shapes of an attention call.

    ``q``: ``(..., Hq, Nq, d)``; ``k``, ``v``: ``(..., Hkv, Nk, d)`` with ``Hq`` a multiple of
    ``Hkv`` (grouped-query attention). Leading batch dims must match exactly. Two-dimensional
    arrays ``(N, d)`` have no head axis.
    """
    q = as_float_array("q", q)
    k = as_float_array("k", k)
    v = as_float_array("v", v)
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(
            f"q, k and v must share a dtype, got q={q.dtype}, k={k.dtype}, v={v.dtype}"
        )
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape, got k={k.shape}, v={v.shape}")
    if q.ndim != k.ndim:
        raise ValueError(f"q and k must have the same number of dims, got q={q.shape}, k={k.shape}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share the head dim, got q={q.shape}, k={k.shape}")
    if q.shape[:-3] != k.shape[:-3]:
        raise ValueError(f"q and k must share leading batch dims, got q={q.shape}, k={k.shape}")
    if q.ndim >= 3:
        hq, hkv = q.shape[-3], k.shape[-3]
        if hq % hkv != 0:
            raise ValueError(
                f"query heads must be a multiple of key/value heads (GQA), got q heads={hq}, "
                f"kv heads={hkv}"
            )
    if finite:
        for name, arr in (("q", q), ("k", k), ("v", v)):
            check_finite_array(name, arr)
    return q, k, v


def check_scale(scale: float | None, head_dim: int) -> float:
    """Default to 1/sqrt(d); refuse non-finite or zero scales."""
    if scale is None:
        return 1.0 / float(np.sqrt(head_dim))
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise ValueError(f"scale must be a real number, got {scale!r}")
    if not np.isfinite(scale) or scale == 0:
        raise ValueError(f"scale must be finite and non-zero, got {scale!r}")
    return float(scale)


def check_segment_ids(segment_ids: object, seq_len: int) -> np.ndarray | None:
    """Segment (document) ids: one integer per token, shape ``(seq,)``."""
    if segment_ids is None:
        return None
    seg = np.asarray(segment_ids)
    if seg.dtype.kind not in "iu":
        raise ValueError(f"segment_ids must be integers, got dtype {seg.dtype}")
    if seg.shape != (seq_len,):
        raise ValueError(
            f"segment_ids must have shape ({seq_len},) (one id per token), got {seg.shape}"
        )
    return seg.astype(np.int64)
