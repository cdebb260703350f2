"""Bytes on one GPU for a training step spread as ``Parallel`` says, by component, and whether
they fit in what the framework leaves of the device.

On the GPU that holds the most (the first pipeline stage holds the most activations, the last
one the logits; the larger of the two is reported), with ``P_s`` the parameters of a stage
(``ringsim.timer.step.training.stage_params``), ``n = dp x cp`` the ranks that share weights:

* ``weights``: bf16, ``2 P_s / tp``; ``zero3`` keeps only two layers gathered (the one running
  and the one prefetched): its sharded copy is the optimizer's fp32 master (PyTorch FSDP2 shards
  the fp32 parameters and casts each gathered layer to bf16, ``MixedPrecisionPolicy
  (param_dtype=bfloat16)`` as TorchTitan sets it), so ``zero3`` holds 12 + 4 = 16 bytes per
  parameter sharded, the count of the Ring Attention paper's FSDP runs.
* ``fp8_weight_cache``: with fp8 GEMMs, each linear weight's fp8 copy and its transpose, kept
  across the micro-batches of a step (Transformer Engine's ``is_first_microbatch`` caching):
  2 bytes per linear parameter.
* ``gradients``: ``g P_s / tp`` with ``g`` bytes per gradient (``Parallel.grad_bytes``: bf16
  as NeMo's ``distributed_fused_adam`` with ``grad_sync_dtype=bf16``, fp32 where the framework
  accumulates in fp32); ``zero3``: sharded, plus one layer's gradients before their
  reduce-scatter.
* ``optimizer``: fp32 weights and two Adam moments, 12 bytes per parameter, sharded over ``n``
  (10 where the master copy is a 16-bit remainder, ``Parallel.master_bytes``).
* ``activations``: what a layer's backward reads, per token (``activation_bytes_per_token``:
  each piece of ``activation_pieces`` times the share the recompute flavour keeps),
  times the GPU's tokens, the stage's layers and the micro-batches in flight (``in_flight``:
  ``min(m, pp)`` on the first stage of a plain 1F1B pipeline; with ``v`` interleaved chunks up
  to ``pp (1 + (pp - 1) / (pp v))``).
* ``layer_working_set``: the transient of the one layer being run: the attention strategy's
  working set (``Strategy.working_set_bytes``, backward), and what recomputation rebuilds of
  the layer's activations for its backward.
* ``gathered`` (``zero3``): the two layers gathered and one layer's gradients before their
  reduce-scatter.
* ``logits``: the last stage's logits in the model's dtype and the fp32 softmax the loss keeps
  for its backward (Megatron-LM's vocab-parallel cross entropy; the gradient overwrites it in
  place), ``(e + 4) T V / tp``; a blockwise run's loss holds one chunk's
  (``BLOCKWISE_CHUNK``).

The device's usable bytes are what its framework leaves (``ringsim.timer.step.frameworks``:
CUDA context, NCCL buffers, BLAS workspaces, the allocator's fragmentation).
"""

from __future__ import annotations

from ringsim.timer.step.frameworks import default_framework, get_framework
from ringsim.timer.step.models import ModelSpec
from ringsim.timer.step.parallel import Parallel
from ringsim.timer.step.recompute import get_recompute
from ringsim.timer.step.training import heads_per_gpu, stage_layers, stage_params

OPTIMIZER_BYTES = 12
"""fp32 master weights and Adam's two fp32 moments, per parameter."""

SOFTMAX_BYTES = 4
"""Per logit on the last stage, beside the logits in the model's dtype: the loss's fp32
softmax (Megatron-LM's vocab-parallel cross entropy; the gradient overwrites it in place)."""

BLOCKWISE_CHUNK = 1024
"""Tokens a blockwise run computes its FFN and loss on at once: the BPT code computes both per
query chunk, ``q_chunk_size=1024`` by default (haoliuhl/ringattention @ 00cc946 bpt/model.py
GPTConfig; bpt/train.py ``blockwise_cross_entropy(..., chunk_size=q_chunk_size)``)."""


def activation_pieces(model: ModelSpec, par: Parallel) -> dict[str, float]:
    """Bytes per token of the GPU of each piece of activations one layer's backward reads
    (``ringsim.timer.step.recompute``), in the model's dtype with an fp32 lse; the ``d``-wide
    ones split ``par.sp_split`` ways (sequence parallelism):

    * ``input``: the layer's input (the first norm's), ``d``;
    * ``norms``: the first norm's output, the second's input and output, ``3 d``;
    * ``qkv``: q, k, v after RoPE (flash attention stores no scores);
    * ``attention_out``: the attention output and its lse;
    * ``mlp``: the gate and up outputs and their SwiGLU product, ``3 f / tp``.

    With fp8 GEMMs (Transformer Engine), each GEMM keeps its input in fp8 for the weight
    gradient, not in bf16: the norms' outputs and the SwiGLU product are 1 byte an element,
    and the output projection keeps an fp8 copy of the attention output (``norms``)
    (TransformerEngine @ v1.4 transformer_engine/pytorch/module/linear.py l.267-278: under fp8
    ``saved_inputmat`` is the fp8 input; layernorm_linear.py l.119-131: ``ln_out`` is uint8
    under fp8; layernorm_mlp.py l.302-312: the activation's output is cast to fp8 for fc2).
    """
    e, h, f, d_h = par.element_bytes, model.d_model, model.ffn_hidden, model.head_dim
    heads, kv = heads_per_gpu(model, par.tp)
    split = par.sp_split
    if par.gemm_dtype == "fp8":
        norms = (1 + e + 1) * h / split + heads * d_h
        mlp = (2 * e + 1) * f / par.tp
    else:
        norms = 3 * e * h / split
        mlp = 3 * e * f / par.tp
    return {
        "input": e * h / split,
        "norms": norms,
        "qkv": e * (heads + 2 * kv) * d_h,
        "attention_out": e * heads * d_h + 4 * heads,
        "mlp": mlp,
    }


def activation_bytes_per_token(model: ModelSpec, par: Parallel) -> float:
    """Bytes one layer stores per token of the GPU for its backward: each piece
    (``activation_pieces``) times the share ``par.recompute`` keeps."""
    flavour = get_recompute(par.recompute)
    pieces = activation_pieces(model, par)
    return float(sum(flavour.stored_share(k) * v for k, v in pieces.items()))


def rebuilt_bytes_per_token(model: ModelSpec, par: Parallel) -> float:
    """Bytes per token one layer's recomputation rebuilds beside the stored ones while its
    backward runs."""
    flavour = get_recompute(par.recompute)
    pieces = activation_pieces(model, par)
    return float(sum(flavour.rebuilt_share(k) * v for k, v in pieces.items()))


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


def first_stage_layer_batches(model: ModelSpec, par: Parallel, micro_batches: int) -> float:
    """Layers times micro-batches whose activations the first pipeline stage holds at its peak
    (``in_flight`` stages' worth of its ``L / pp`` layers). With balanced stages
    (``Parallel.balanced_stages``) the first stage's first chunk gives one layer up to the
    embedding (Llama 3 Sec. 3.3.2: 'the first model chunk on the first stage has only the
    embedding'): the warm-up runs each chunk on ``pp`` micro-batches in turn (Megatron-LM's
    interleaved order, ``in_flight``), and every one of those the first chunk runs holds a
    layer fewer."""
    first, middle, _ = stage_layers(model, par)
    if par.pp == 1 or not par.balanced_stages:
        return first * in_flight(par, micro_batches)
    pp, v = par.pp, par.virtual_stages
    if v == 1:
        return first * min(micro_batches, pp)
    chunks = min(2 * (pp - 1) + (v - 1) * pp + 1, micro_batches * v)
    firsts = sum(1 for k in range(chunks) if (k // pp) % v == 0)
    return chunks * middle / v - firsts


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
    params = stage_params(model, par)
    linear = stage_layers(model, par)[1] * (model.layer_params - 2 * model.d_model)
    tokens = par.micro_batch * seq_len / par.cp
    e, grad = par.element_bytes, par.grad_bytes
    gathered = 2 * e * model.layer_params / tp
    out = {
        "weights": e * params / tp,
        "fp8_weight_cache": 2.0 * linear / tp if par.gemm_dtype == "fp8" else 0.0,
        "gradients": grad * params / tp,
        "optimizer": (OPTIMIZER_BYTES - 4 + par.master_bytes) * params / (tp * n),
    }
    out["gathered"] = 0.0
    if par.sharding == "zero3":  # the sharded master is the optimizer's fp32 copy
        out["weights"] = 0.0
        out["gradients"] = grad * params / (tp * n)
        out["gathered"] = gathered + grad * model.layer_params / tp
    per_layer = activation_bytes_per_token(model, par) * tokens
    first = per_layer * first_stage_layer_batches(model, par, micro_batches)
    logit_tokens = min(tokens, BLOCKWISE_CHUNK) if par.blockwise else tokens
    logits = (e + SOFTMAX_BYTES) * logit_tokens * model.vocab / tp
    last_layers = stage_layers(model, par)[2]
    last = per_layer * last_layers + logits
    out["activations"] = first if par.pp > 1 and first >= last else per_layer * last_layers
    out["logits"] = 0.0 if par.pp > 1 and first >= last else logits
    rebuilt = rebuilt_bytes_per_token(model, par) * tokens
    if par.blockwise:  # the MLP intermediate is rebuilt one chunk at a time
        mlp = activation_pieces(model, par)["mlp"] * get_recompute(par.recompute).rebuilt_share(
            "mlp"
        )
        rebuilt -= mlp * max(0.0, tokens - min(tokens, BLOCKWISE_CHUNK))
    out["layer_working_set"] = float(attention_bytes + rebuilt)
    return {k: float(v) for k, v in out.items()}


def prefill_bytes(model: ModelSpec, par: Parallel, seq_len: int, attention_bytes: float) -> dict:
    """One forward (inference prefill): bf16 weights of a stage, the key/value cache of the
    GPU's tokens in every layer of the stage, and the attention's forward working set."""
    _, kv = heads_per_gpu(model, par.tp)
    tokens = par.micro_batch * seq_len / par.cp
    layers = model.layers / par.pp
    e = par.element_bytes
    return {
        "weights": e * stage_params(model, par) / par.tp,
        "kv_cache": 2.0 * layers * tokens * kv * model.head_dim * e,
        "layer_working_set": float(attention_bytes),
    }


def usable_bytes(hardware) -> float:
    """What the hardware's default framework leaves of its memory for tensors."""
    return get_framework(default_framework(hardware)).usable_bytes(hardware.memory_bytes)
