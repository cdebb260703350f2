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

With query and key/value widths ``q = H d`` and ``kv = H_kv d`` other than ``h`` (Gemma's head
dim) the projections count ``6 h (2 q + 2 kv)`` and attention ``a s q``; a sliding-window
layer's attention counts its window: ``megatron`` every query seeing ``min(W, s)`` keys,
``causal`` the pairs the window leaves (``ringsim.masks.pairs_within``) against ``s^2 / 2``.

MFU is model TFLOPS over the dense bf16 peak (the Llama 3 paper's "BF16 MFU").
"""

from __future__ import annotations

from ringsim.masks import offset_bounds, pairs_within
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
    convention = check_convention(convention)
    a = CONVENTIONS[convention]
    L, s, h, f, V = model.layers, seq_len, model.d_model, model.ffn_hidden, model.vocab
    if model.sliding_window is None and model.attention_head_dim is None:  # h = H d
        ratio = model.n_kv_heads / model.heads
        return L * s * h * h * (12 + 12 * ratio + 18 * f / h + a * s / h + 6 * V / (L * h))
    q, kv = model.heads * model.head_dim, model.n_kv_heads * model.head_dim
    scores = sum(_attention_share(w, s, convention) for w in model.layer_windows())
    return L * s * (6 * h * (2 * q + 2 * kv) + 18 * h * f) + scores * a * s * s * q + 6 * s * V * h


def _attention_share(window: int | None, s: int, convention: str) -> float:
    """A layer's attention against a full one's under ``convention`` (module docstring)."""
    if window is None or window >= s:
        return 1.0
    return WINDOW_SHARE[convention](window, s)


WINDOW_SHARE = {
    "megatron": lambda w, s: w / s,  # every query sees its w keys
    "causal": lambda w, s: float(pairs_within(0, s, s, 1, *offset_bounds(True, w))) / (s * s / 2),
}
"""A sliding-window layer's attention over a full layer's, per convention."""


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
