"""Make ``tl.dot`` on bfloat16 exact in Triton's CPU interpreter (a test-harness fix only).

The interpreter stores bfloat16 tensors as their raw ``uint16`` bit patterns (NumPy has no
bfloat16). Its ``InterpreterBuilder.create_dot`` (``triton/runtime/interpreter.py``, Triton
3.9) decodes only 8-bit float operands before ``np.matmul``; bfloat16 operands are multiplied
as integers, so a bf16 ``tl.dot`` returns sums of bit patterns (errors around 1e9). float16 is
a real NumPy dtype and needs nothing.

``install()`` wraps ``create_dot`` so bfloat16 operands are widened to float32 first. The
widening is exact (a bfloat16 is the top half of a float32) and matches what a GPU tensor core
does: bf16 products accumulated in fp32. Nothing else in the interpreter changes, and no
kernel source changes; on a GPU this module is never imported.
"""

from __future__ import annotations

import numpy as np

_MARK = "_ringsim_bf16_dot_shim"


def bf16_bits_to_float32(bits: np.ndarray) -> np.ndarray:
    """``uint16`` bfloat16 bit patterns -> the float32 values they encode (exact)."""
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def _widen(handle):
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    if handle.dtype.scalar != tl.bfloat16:
        return handle
    return TensorHandle(bf16_bits_to_float32(handle.data), tl.float32)


def original_create_dot():
    """The interpreter's own ``create_dot`` (unwrapped if the shim is installed)."""
    from triton.runtime.interpreter import InterpreterBuilder

    dot = InterpreterBuilder.create_dot
    return getattr(dot, "__wrapped__", dot)


def installed() -> bool:
    from triton.runtime.interpreter import InterpreterBuilder

    return getattr(InterpreterBuilder.create_dot, _MARK, False)


def install() -> None:
    """Wrap ``InterpreterBuilder.create_dot`` once (idempotent)."""
    from triton.runtime.interpreter import InterpreterBuilder

    if installed():
        return
    upstream = InterpreterBuilder.create_dot

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        return upstream(self, _widen(a), _widen(b), d, input_precision, max_num_imprecise_acc)

    create_dot.__wrapped__ = upstream
    setattr(create_dot, _MARK, True)
    InterpreterBuilder.create_dot = create_dot
