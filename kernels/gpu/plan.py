"""What the GPU check runs: its sections' cases, sizes and tolerances (``kernels.gpu.aot``
compiles exactly these launches ahead of time), and the FLOP count its speed rows use. Plain
data, so ``kernels.gpu.check`` (the driver and report) and ``kernels.gpu.sections`` (the CUDA
work) both read it without importing each other."""

from __future__ import annotations

CORRECTNESS_CASES = ((256, 64, 4, 4), (512, 128, 8, 2), (300, 128, 4, 1))  # c, d, Hq, Hkv
CORRECTNESS_DTYPES = ("bfloat16", "float16", "float32")
# max |err| / max |float64| per tensor (out, dq, dk, dv); on the CPU interpreter at GPU tiles
# bf16 reached 5.0e-3, fp16 3.9e-4 (tests/test_kernels_block.py); fp32 uses tf32x3 dots
CORRECTNESS_TOL = {"bfloat16": 2e-2, "float16": 2e-3, "float32": 2e-4}
ZIGZAG_CASE = (256, 64, 4)  # c, d, heads; fp32
MODEL_WIDTH = 2048  # heads x d: 32 heads of 64 or 16 of 128
SPEED_HEAD_DIMS = (64, 128)
SPEED_SIZES = (1024, 2048, 4096, 8192, 16384)
SPEED_SIZES_QUICK = (1024, 8192)
SPEED_TOKENS = 16384  # batch = SPEED_TOKENS // c
TILE_SEARCH_C = 8192
RING_HEADS, RING_HEAD_DIM, RING_HOSTS = 8, 128, 4
RING_BLOCKS = (1024, 4096, 16384, 32768)
RING_BLOCKS_QUICK = (1024, 16384)


def attention_tflops(batch, heads, c, d, seconds, *, causal: bool, backward: bool = False):
    """Achieved TFLOP/s with the usual convention: ``4 b h c^2 d`` for the forward, halved
    under a causal mask, 2.5x for the backward (``ringsim.timer.cost``)."""
    flops = 4.0 * batch * heads * c * c * d * (0.5 if causal else 1.0)
    return flops * (2.5 if backward else 1.0) / seconds / 1e12
