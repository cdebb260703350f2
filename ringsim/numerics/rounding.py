"""Rounding to low precision without a bf16 dtype in NumPy, and the error measure of the lab.

``round_to`` emulates bf16/fp16/fp32 roundings on float32/float64 arrays; the ring executor
(``ringsim.numerics.ring``) applies it where a real kernel would round, and the precision lab
(``ringsim.numerics.precision``) measures what that does with ``relative_error``.
"""

from __future__ import annotations

import numpy as np

from ringsim.checks import check_choice

PRECISIONS = ("bf16", "fp16", "fp32", "fp64")


def check_precision(name: str, value: str | None) -> str | None:
    if value is None:
        return None
    return check_choice(name, value, PRECISIONS, also=" or None")


def round_to(x: np.ndarray, precision: str | None) -> np.ndarray:
    """Round ``x`` to ``precision`` and return it in its original dtype.

    bf16 is float32 with the low 16 mantissa bits dropped; we round to nearest, ties to even,
    on the bit pattern (what hardware does), without needing a bf16 dtype in NumPy. Like
    ``ml_dtypes.bfloat16``, float64 inputs go through float32 first. Values past the largest
    bf16/fp16 round to ``±inf``; ``±inf`` (the log-sum-exp of an empty row) and NaN survive.
    """
    if not isinstance(x, np.ndarray | np.floating) or x.dtype.kind != "f":
        raise ValueError(f"x must be a float array, got {x!r}"[:200])
    precision = check_precision("precision", precision)
    if precision is None or precision == "fp64":
        return x
    with np.errstate(over="ignore"):
        if precision == "fp32":
            return x.astype(np.float32).astype(x.dtype)
        if precision == "fp16":
            return x.astype(np.float16).astype(x.dtype)
        x32 = np.ascontiguousarray(x, dtype=np.float32)
    bits = x32.view(np.uint32)
    lsb = (bits >> 16) & 1
    rounded = ((bits + np.uint32(0x7FFF) + lsb) & np.uint32(0xFFFF0000)).view(np.float32)
    # the bit trick would carry a NaN payload into the exponent (NaN -> inf); keep NaN and inf
    rounded = np.where(np.isfinite(x32), rounded, x32)
    return rounded.astype(x.dtype)


def relative_error(out: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Per-row relative error ``||out - ref|| / ||ref||`` over the last axis.

    Rows are query tokens; a row-wise norm avoids dividing by entries that happen to be near
    zero. Rows whose reference is exactly zero are measured absolutely.
    """
    ref = np.asarray(ref, dtype=np.float64)
    err = np.linalg.norm(np.asarray(out, dtype=np.float64) - ref, axis=-1)
    norm = np.linalg.norm(ref, axis=-1)
    return err / np.where(norm > 0, norm, 1)
