"""Model FLOPs of a training step as practitioners count them, and model TFLOPS per GPU and MFU.

A step's *model* FLOPs count the math of the model once (no recompute) at a fixed convention,
so throughputs can be compared across runs; they are not the FLOPs the GPUs execute.
Per sequence of ``s`` tokens, a LLaMA-shaped decoder with ``L`` layers, width ``h``, ``H``
query and ``H_kv`` key/value heads, SwiGLU width ``f`` and vocabulary ``V`` (forward x 3 for
forward + backward):

    L s h^2 (12 + 12 H_kv / H + 18 f / h + a s / h + 6 V / (L h))

with ``a = 12`` (**megatron**: attention counted as if every query saw every key, as Megatron-
LM's ``num_floating_point_operations`` and NeMo's ``flops_formulas.llama2``/``llama3`` count it,
and PyTorch torchtitan's ``12 l h q t``) or ``a = 6`` (**causal**: the half of the score matrix
a causal mask computes). The two differ little at 4K tokens and by almost 2x at 1M, where
attention dominates.

MFU is model TFLOPS over the dense bf16 peak (the Llama 3 paper's "BF16 MFU").
"""

from __future__ import annotations

from ringsim.timer.step.models import ModelSpec

CONVENTIONS = {"megatron": 12.0, "causal": 6.0}
"""Attention's coefficient ``a`` per convention (module docstring)."""


def check_convention(convention: object) -> str:
    if convention not in CONVENTIONS:
        raise ValueError(
            f"flops convention must be one of {', '.join(CONVENTIONS)}, got {convention!r}"
        )
    return str(convention)


def model_flops_per_sequence(model: ModelSpec, seq_len: int, convention: str = "megatron") -> float:
    """Model FLOPs of one sequence's forward and backward (module docstring)."""
    a = CONVENTIONS[check_convention(convention)]
    L, s, h, f, V = model.layers, seq_len, model.d_model, model.ffn_hidden, model.vocab
    ratio = model.n_kv_heads / model.heads
    return L * s * h * h * (12 + 12 * ratio + 18 * f / h + a * s / h + 6 * V / (L * h))


def model_tflops_per_gpu(
    model: ModelSpec,
    seq_len: int,
    global_batch: int,
    gpus: int,
    step_time_s: float,
    convention: str = "megatron",
) -> float:
    """Model TFLOP/s per GPU of a step of ``global_batch`` sequences on ``gpus`` GPUs."""
    flops = global_batch * model_flops_per_sequence(model, seq_len, convention)
    return flops / (gpus * step_time_s) / 1e12
