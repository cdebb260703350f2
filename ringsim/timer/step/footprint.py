"""Bytes on one GPU for a training step spread as ``Parallel`` says, by component, and whether
they fit in what the framework leaves of the device.

On the GPU that holds the most (the first pipeline stage holds the most activations, the last
one the logits; the larger of the two is reported), with ``P_s`` the parameters of a stage
(``ringsim.timer.step.training.stage_params``), ``n = dp x cp`` the ranks that share weights:

* ``weights``: bf16, ``2 P_s / tp``; ``zero3`` shards them, ``2 P_s / (tp n)``, plus two layers
  gathered (the one running and the one prefetched).
* ``fp8_weight_cache``: with fp8 GEMMs, each linear weight's fp8 copy and its transpose, kept
  across the micro-batches of a step (Transformer Engine's ``is_first_microbatch`` caching):
  2 bytes per linear parameter.
* ``gradients``: bf16 (NeMo's ``distributed_fused_adam`` reduces in the weights' dtype),
  ``2 P_s / tp``; ``zero3``: sharded, plus one layer's fp32 gradients before their
  reduce-scatter.
* ``optimizer``: fp32 weights and two Adam moments, 12 bytes per parameter, sharded over ``n``.
* ``activations``: what a layer's backward reads, per token (``activation_bytes_per_token``),
  times the GPU's tokens, the stage's layers and the micro-batches in flight (``in_flight``:
  ``min(m, pp)`` on the first stage of a plain 1F1B pipeline; with ``v`` interleaved chunks up
  to ``pp (1 + (pp - 1) / (pp v))``).
* ``layer_working_set``: the transient of the one layer being run: the attention strategy's
  working set (``Strategy.working_set_bytes``, backward), and with
  ``full`` recompute the layer's activations, rebuilt for its backward.
* ``logits``: the last stage's bf16 logits and the fp32 softmax the loss keeps for its
  backward (Megatron-LM's vocab-parallel cross entropy; the gradient overwrites it in place),
  ``6 T V / tp``.

The device's usable bytes are what its framework leaves (``ringsim.timer.step.frameworks``:
CUDA context, NCCL buffers, BLAS workspaces, the allocator's fragmentation).
"""

from __future__ import annotations

from ringsim.timer.step.frameworks import default_framework, get_framework
from ringsim.timer.step.models import ModelSpec
from ringsim.timer.step.parallel import Parallel
from ringsim.timer.step.training import ACTIVATION_BYTES, heads_per_gpu, stage_params

OPTIMIZER_BYTES = 12
"""fp32 master weights and Adam's two fp32 moments, per parameter."""

LOGIT_BYTES = 6
"""Per logit on the last stage: the bf16 logits and the loss's fp32 softmax."""


def activation_bytes_per_token(model: ModelSpec, par: Parallel) -> float:
    """Bytes one layer stores per token of the GPU for its backward, under ``par.recompute``
    (bf16 tensors, fp32 lse; with sequence parallelism the ``d``-wide ones are sharded):

    * ``none``: the two norms' inputs and outputs (``4 d / tp``), q, k, v after RoPE, the
      attention output and its lse (flash attention stores no scores), the gate and up
      outputs and their SwiGLU product (``3 f / tp``);
    * ``selective``: the same without the attention output and lse (recomputed);
    * ``full``: the layer's input (``d / tp``).
    """
    e, h, f, d_h = ACTIVATION_BYTES, model.d_model, model.ffn_hidden, model.head_dim
    heads, kv = heads_per_gpu(model, par.tp)
    if par.recompute == "full":
        return e * h / par.tp
    attention_out = e * heads * d_h + 4 * heads
    stored = e * (4 * h / par.tp + (heads + 2 * kv) * d_h + 3 * f / par.tp) + attention_out
    return stored - (attention_out if par.recompute == "selective" else 0.0)


def in_flight(par: Parallel, micro_batches: int) -> float:
    """Micro-batches' worth of the stage's activations the first pipeline stage holds at its
    peak, counted in whole stages (``L / pp`` layers each).

    Megatron-LM's schedules (``megatron/core/pipeline_parallel/schedules.py`` @ core_v0.6.0):
    plain 1F1B (``v = 1``) warms up ``pp - rank - 1`` micro-batches (l.1151-1156) and holds one
    more in its steady state, so rank 0 holds ``min(m, pp)`` micro-batches of its layers; the
    interleaved schedule warms up ``(pp - rank - 1) 2 + (v - 1) pp`` model chunks of ``L / (pp
    v)`` layers (l.516-518; all ``m v`` of them when there are no more), plus one: ``pp (1 + (pp
    - 1) / (pp v))`` stages' worth at most (Korthikanti et al., arXiv 2205.05198, Sec. 4.2.3),
    a factor that holds for ``v >= 2`` only."""
    pp, v, m = par.pp, par.virtual_stages, micro_batches
    if pp == 1:
        return 1.0
    if v == 1:
        return float(min(m, pp))
    chunks = min(2 * (pp - 1) + (v - 1) * pp + 1, m * v)
    return chunks / v


def step_bytes(
    model: ModelSpec,
    par: Parallel,
    seq_len: int,
    micro_batches: int,
    attention_bytes: float,
) -> dict[str, float]:
    """Bytes on the fullest GPU by component (module docstring); ``attention_bytes`` is the
    strategy's working set on one GPU (backward pass)."""
    tp, n = par.tp, par.shard_group
    params = stage_params(model, par.pp)
    layers = model.layers / par.pp
    linear = layers * (model.layer_params - 2 * model.d_model)
    tokens = par.micro_batch * seq_len / par.cp
    gathered = 2 * ACTIVATION_BYTES * model.layer_params / tp
    out = {
        "weights": ACTIVATION_BYTES * params / tp,
        "fp8_weight_cache": 2.0 * linear / tp if par.gemm_dtype == "fp8" else 0.0,
        "gradients": ACTIVATION_BYTES * params / tp,
        "optimizer": OPTIMIZER_BYTES * params / (tp * n),
    }
    if par.sharding == "zero3":
        out["weights"] = ACTIVATION_BYTES * params / (tp * n) + gathered
        out["gradients"] = ACTIVATION_BYTES * params / (tp * n) + 4 * model.layer_params / tp
    per_layer = activation_bytes_per_token(model, par) * tokens
    first = per_layer * layers * in_flight(par, micro_batches)
    logits = LOGIT_BYTES * tokens * model.vocab / tp
    last = per_layer * layers + logits
    out["activations"] = first if par.pp > 1 and first >= last else per_layer * layers
    out["logits"] = 0.0 if par.pp > 1 and first >= last else logits
    rebuilt = 0.0
    if par.recompute == "full":
        rebuilt = activation_bytes_per_token(model, par.with_(recompute="none")) * tokens
    out["layer_working_set"] = float(attention_bytes + rebuilt)
    return {k: float(v) for k, v in out.items()}


def prefill_bytes(model: ModelSpec, par: Parallel, seq_len: int, attention_bytes: float) -> dict:
    """One forward (inference prefill): bf16 weights of a stage, the key/value cache of the
    GPU's tokens in every layer of the stage, and the attention's forward working set."""
    _, kv = heads_per_gpu(model, par.tp)
    tokens = par.micro_batch * seq_len / par.cp
    layers = model.layers / par.pp
    return {
        "weights": ACTIVATION_BYTES * stage_params(model, par.pp) / par.tp,
        "kv_cache": 2.0 * layers * tokens * kv * model.head_dim * ACTIVATION_BYTES,
        "layer_working_set": float(attention_bytes),
    }


def usable_bytes(hardware) -> float:
    """What the hardware's default framework leaves of its memory for tensors."""
    return get_framework(default_framework(hardware.name)).usable_bytes(hardware.memory_bytes)
