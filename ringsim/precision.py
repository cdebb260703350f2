"""Low-precision rounding for the precision lab.

Real ring kernels return each block's partial output in the input dtype (bf16) and some
implementations keep the running output in bf16 between steps. Every such rounding adds a
relative error of about 2**-9, once per ring step, so the error grows with the host count. These
helpers reproduce that rounding on float32/float64 arrays so a learner can watch it happen.
"""

from __future__ import annotations

import numpy as np

PRECISIONS = ("bf16", "fp16", "fp32", "fp64")


def check_precision(name: str, value: str | None) -> str | None:
    if value is None:
        return None
    if value not in PRECISIONS:
        raise ValueError(f"{name} must be one of {', '.join(PRECISIONS)} or None, got {value!r}")
    return value


def round_to(x: np.ndarray, precision: str | None) -> np.ndarray:
    """Round ``x`` to ``precision`` and return it in its original dtype.

    bf16 is float32 with the low 16 mantissa bits dropped; we round to nearest, ties to even,
    on the bit pattern (what hardware does), without needing a bf16 dtype in NumPy.
    ``-inf`` (the log-sum-exp of an empty row) survives every rounding.
    """
    if precision is None or precision == "fp64":
        return x
    if precision == "fp32":
        return x.astype(np.float32).astype(x.dtype)
    if precision == "fp16":
        with np.errstate(over="ignore"):
            return x.astype(np.float16).astype(x.dtype)
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    lsb = (bits >> 16) & 1
    rounded = ((bits + np.uint32(0x7FFF) + lsb) & np.uint32(0xFFFF0000)).view(np.float32)
    rounded = np.where(np.isinf(x), x.astype(np.float32), rounded)
    return rounded.astype(x.dtype)
