"""A whole training step of a LLaMA-shaped decoder on ``tp x cp x pp x dp`` GPUs: what each part
costs on one GPU, and the step it adds up to (``step_time``).

Per micro-batch of ``b`` sequences, a GPU holds ``T = b N / cp`` tokens of each sequence and a
``1 / tp`` shard of every weight (``ringsim.timer.step.parallel``). One layer costs:

* **GEMMs** (``ringsim.timer.step.gemm``): the q/k/v projection ``d -> (H + 2 H_kv) d_h / tp``,
  the output projection ``H d_h / tp -> d``, the gate and up projections ``d -> 2 f / tp`` (one
  fused GEMM) and the down projection ``f / tp -> d``; forward ``Y = X W``, backward the input
  and the weight gradient, each at the achieved rate of its own shape and dtype.
* **attention**: the context-parallel strategy's forward and backward pass on the group's
  ``H / tp`` heads, timed by ``ringsim.timer.strategies.simulate_strategy`` on the
  cluster (its communication, hidden or exposed, included).
* **elementwise kernels** as bytes over HBM (``elementwise_bytes``): two RMSNorms, two
  residual adds, RoPE on q and k, SwiGLU, and with fp8 GEMMs the cast of every GEMM input to
  fp8 with its transpose; the backward moves twice the forward's bytes plus, with fp8, the
  cast and transpose of every output gradient. Each kernel also pays a launch cost.
* **tensor parallelism with sequence parallelism** (Korthikanti et al., arXiv 2205.05198,
  Sec. 4.2.2): an all-gather of the ``T x d`` activations before the q/k/v and the gate/up
  GEMMs and a reduce-scatter after the output and the down projections, forward; the same four
  in the backward; on the node's links, exposed (no communication/GEMM overlap is modelled).
* **recompute**: ``selective`` runs the attention's forward again before its backward,
  ``full`` the whole layer's forward (GEMMs, elementwise, collectives, attention).

Per step: the LM head and the loss on the last pipeline stage; **pipeline parallelism** as the
interleaved 1F1B schedule, ``m`` micro-batches each taking ``t_mb``, the slowest stage's time
(``stage_layers``: a middle stage's layers, or the last stage's with the LM head and the loss;
Llama 3 takes a layer off the first and the last stage to balance them), and a bubble of
``(p - 1) / v`` micro-batch times (``(p - 1) / (v m + p - 1)`` of the step; Narayanan et al.,
SC'21; the Llama 3 paper writes the same ratio as ``(PP - 1) / (V M)`` of the compute);
**data-parallel sharding** (``zero1``: a reduce-scatter of the gradients and an all-gather of
the weights per step, over the ``dp x cp`` ranks that share weights, hidden behind the last
micro-batch's backward and the first one's forward as far as they last; ``zero3``: each
layer's weights gathered for its forward and its backward and its gradients reduce-scattered,
every micro-batch, each hidden behind the layer's compute); the **optimizer step** (Adam on the
GPU's shard: fp32 weights and two moments read and written, the gradient read, the bf16
weights written: 28 bytes per parameter over HBM).

Rates: ``implementation="ideal"`` is the paper's machine: GEMMs at the datasheet peak,
collectives at the link's line rate, elementwise kernels at the HBM's datasheet rate without a
launch cost, attention at peak (``KernelFamily`` ``ideal``). A named implementation (``fa2``,
``fa3``, ``cudnn``, ...) uses the published rates: GEMMs from the GEMM benchmarks of
``ringsim.timer.step.gemm``, attention from its kernel family, collectives at NCCL's share of
the line rate (``ringsim.timer.machine.collectives``), elementwise kernels at
``HBM_FRACTION`` of the HBM's rate. The GEMM benchmarks ran in short bursts; a step's GEMMs
run at the rate a power-saturated GPU holds (``Hardware.saturated_matmul``, the point of the
step's ranges: ``ringsim.timer.step.uncertainty``), and the weight-gradient GEMMs add the
gradient buffer's read and write (``grad_accumulation_seconds``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from ringsim.timer.machine.kernel_model import HBM_FRACTION
from ringsim.timer.machine.links import INFINIBAND, NVLINK
from ringsim.timer.machine.topology import Cluster
from ringsim.timer.step.gemm import linear_seconds
from ringsim.timer.step.models import ModelSpec
from ringsim.timer.step.parallel import Parallel
from ringsim.timer.step.recompute import get_recompute
from ringsim.timer.step.uncertainty import StepScale, point_scale

LAUNCH_S = 3e-6
"""Fixed cost of one small elementwise kernel launched from PyTorch (estimate, as the
``torch`` merges of ``ringsim.timer.machine.families``; not fitted)."""

ELEMENTWISE_KERNELS = (7, 14)
"""Elementwise kernels per layer, forward and backward: two norms, two residual adds, RoPE,
SwiGLU and one more (casts or a bias-free add); the backward runs about two per forward one."""

ADAM_BYTES_PER_PARAM = 28
"""Adam's update of one parameter: read fp32 weight, m, v (12) and the bf16 gradient (2),
write fp32 weight, m, v (12) and the bf16 weight (2)."""

LOSS_BYTES_PER_LOGIT = 16
"""The cross-entropy on fp32 logits: written by the LM head's epilogue (4), read and written by
the softmax (8), its gradient written (4)."""


@dataclass(frozen=True)
class AttentionTime:
    """One layer's attention on one GPU for one micro-batch: ``forward_s``, ``backward_s``
    (makespans of the strategy's passes) and how much of them is exposed communication and
    compute (``exposed_comm_s``, ``compute_s``: forward + backward)."""

    forward_s: float
    backward_s: float
    exposed_comm_s: float = 0.0
    compute_s: float = 0.0


@dataclass(frozen=True)
class StepBreakdown:
    """Seconds of one training step on the critical path of one GPU; ``step_time_s`` is the sum
    of the exposed parts (every field but the ``*_hidden_s`` ones and
    ``cp_exposed_comm_s``, which is part of ``attention_s``)."""

    attention_s: float
    gemm_s: float
    elementwise_s: float
    tp_comm_s: float
    recompute_s: float
    lm_head_s: float
    pp_bubble_s: float
    dp_comm_exposed_s: float
    optimizer_s: float
    cp_exposed_comm_s: float
    dp_comm_hidden_s: float
    pp_p2p_hidden_s: float
    micro_batches: int
    micro_batch_s: float

    EXPOSED = (
        "attention_s",
        "gemm_s",
        "elementwise_s",
        "tp_comm_s",
        "recompute_s",
        "lm_head_s",
        "pp_bubble_s",
        "dp_comm_exposed_s",
        "optimizer_s",
    )

    @property
    def step_time_s(self) -> float:
        return math.fsum(getattr(self, name) for name in self.EXPOSED)

    def as_dict(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["step_time_s"] = self.step_time_s
        return out


# -- shapes ------------------------------------------------------------------------------------
def heads_per_gpu(model: ModelSpec, tp: int) -> tuple[int, int]:
    """``(query heads, key/value heads)`` of a tensor-parallel shard; key/value heads are
    replicated when ``tp`` exceeds them (Megatron's GQA with ``tp > num_query_groups``)."""
    if model.heads % tp:
        raise ValueError(f"tp must divide heads={model.heads}, got tp={tp}")
    kv = model.n_kv_heads
    if tp > kv and tp % kv:
        raise ValueError(f"tp must divide or be a multiple of kv_heads={kv}, got tp={tp}")
    return model.heads // tp, max(1, kv // tp)


def stage_layers(model: ModelSpec, par: Parallel) -> tuple[float, float, float]:
    """Layers of the ``(first, middle, last)`` pipeline stage (``Parallel.balanced_stages``):
    balanced, ``(L + 2) / pp`` slots each (the largest stage's, rounded up), the first and the
    last one layer fewer; else ``L / pp`` each (an even split). ``pp = 1``: all ``L``."""
    if par.pp == 1:
        return (float(model.layers),) * 3
    if par.balanced_stages:
        slots = float(math.ceil((model.layers + 2) / par.pp))
        return slots - 1, slots, slots - 1
    return (model.layers / par.pp,) * 3


def stage_params(model: ModelSpec, par: Parallel) -> float:
    """Parameters of the largest pipeline stage: its layers (``stage_layers``) and one
    embedding (the input's on the first stage, the LM head's on the last, a copy of the one
    matrix when they are tied; both when ``pp = 1``)."""
    embed = model.vocab * model.d_model
    if par.pp == 1:
        return float(model.params)
    first, middle, last = stage_layers(model, par)
    layer = (model.params - model.embeddings * embed) / model.layers
    return max(middle * layer, max(first, last) * layer + embed)


def tokens_per_gpu(seq_len: int, par: Parallel) -> int:
    """Tokens of one micro-batch on one GPU: ``micro_batch x seq_len / cp``."""
    return par.micro_batch * seq_len // par.cp


# -- the parts of one layer --------------------------------------------------------------------
def layer_gemm_seconds(
    model: ModelSpec, par: Parallel, tokens: int, hardware, *, ideal: bool, scale=None
):
    """``(forward, backward)`` seconds of one layer's four GEMMs on ``tokens`` rows, at
    ``scale``'s GEMM rate (``ringsim.timer.step.uncertainty``; default: the device's point),
    the backward with its gradient accumulation (``grad_accumulation_seconds``)."""
    scale = point_scale(hardware) if scale is None else scale
    h, f, d_h = model.d_model, model.ffn_hidden, model.head_dim
    heads, kv = heads_per_gpu(model, par.tp)
    shapes = (
        (h, (heads + 2 * kv) * d_h),  # q, k, v
        (heads * d_h, h),  # output projection
        (h, 2 * f // par.tp),  # gate and up, fused
        (f // par.tp, h),  # down
    )
    fwd = bwd = 0.0
    for d_in, d_out in shapes:
        a, b = linear_seconds(hardware, tokens, d_in, d_out, par.gemm_dtype, ideal=ideal)
        fwd, bwd = fwd + a, bwd + b
    rate = 1.0 if ideal else scale.gemm_rate(par.gemm_dtype)
    weights = sum(d_in * d_out for d_in, d_out in shapes)
    return fwd / rate, bwd / rate + grad_accumulation_seconds(par, weights, hardware, ideal=ideal)


def grad_accumulation_seconds(par: Parallel, weights: float, hardware, *, ideal: bool) -> float:
    """What a micro-batch's weight-gradient GEMMs over ``weights`` parameters add by
    accumulating into the gradient buffer: each reads the buffer and writes it back in the
    gradient dtype (``Parallel.grad_bytes``: ``g`` bytes each way) where the benchmarked GEMM
    wrote its output once in the model's dtype (``e``): ``2 g - e`` bytes per parameter over
    HBM, the wgrad GEMM with the accumulation fused in (Megatron-LM @ core_v0.6.0
    megatron/core/tensor_parallel/layers.py l.437-446: ``wgrad_gemm_accum_fp32`` into an fp32
    ``main_grad``, ``wgrad_gemm_accum_fp16`` into a 16-bit one). ``ideal``: GEMMs at peak
    FLOP/s move no bytes."""
    if ideal or hardware.memory_bandwidth <= 0:
        return 0.0
    extra = 2 * par.grad_bytes - par.element_bytes
    return weights * extra / (hardware.memory_bandwidth * HBM_FRACTION)


def elementwise_bytes(model: ModelSpec, par: Parallel, tokens: int) -> float:
    """HBM bytes of one layer's forward elementwise kernels on ``tokens`` rows (each reads its
    inputs and writes its outputs once): with sequence parallelism the ``d``-wide ones (norms,
    residual adds) run on ``T / tp`` rows (without it on all ``T``), the head- and ``f``-wide
    ones on their shards."""
    e, h, f, d_h = par.element_bytes, model.d_model, model.ffn_hidden, model.head_dim
    heads, kv = heads_per_gpu(model, par.tp)
    rows = tokens / par.sp_split
    norms = 2 * rows * 2 * h * e  # read x, write its normalised copy
    adds = 2 * rows * 3 * h * e  # read two, write one
    rope = tokens * 2 * (heads + kv) * d_h * e  # q and k, read and written
    swiglu = tokens * 3 * (f / par.tp) * e  # read gate and up, write their product
    total = norms + adds + rope + swiglu
    if par.gemm_dtype == "fp8":  # each GEMM input cast to fp8 and transposed (two fp8 copies)
        inputs = 2 * h + heads * d_h + f / par.tp  # q/k/v and gate/up read d, o and down theirs
        total += tokens * inputs * (e + 2)
    return float(total)


def elementwise_backward_bytes(model: ModelSpec, par: Parallel, tokens: int) -> float:
    """HBM bytes of one layer's backward elementwise kernels: twice the forward's (each reads
    its saved inputs and the output gradient and writes the input gradient), and with fp8 GEMMs
    the cast and transpose of every output gradient (Transformer Engine's ``cast_transpose``:
    fp8 GEMMs take both orientations)."""
    total = 2.0 * elementwise_bytes(model, par.with_(gemm_dtype="bf16"), tokens)
    if par.gemm_dtype == "fp8":
        heads, kv = heads_per_gpu(model, par.tp)
        h, f, d_h = model.d_model, model.ffn_hidden, model.head_dim
        grads = (heads + 2 * kv) * d_h + h + 2 * f / par.tp + h  # dY of the four GEMMs
        total += tokens * grads * (par.element_bytes + 2)
    return float(total)


def elementwise_seconds(model, par, tokens, hardware, *, ideal: bool) -> tuple[float, float]:
    """``(forward, backward)`` seconds of one layer's elementwise kernels (``0`` on hardware
    whose HBM bandwidth is not known)."""
    if hardware.memory_bandwidth <= 0:
        return 0.0, 0.0
    rate = hardware.memory_bandwidth * (1.0 if ideal else HBM_FRACTION)
    forward = elementwise_bytes(model, par, tokens)
    backward = elementwise_backward_bytes(model, par, tokens)
    launch = (0.0, 0.0) if ideal else tuple(n * LAUNCH_S for n in ELEMENTWISE_KERNELS)
    return forward / rate + launch[0], backward / rate + launch[1]


def ring_collective_seconds(nbytes: float, ranks: int, bandwidth: float, latency: float) -> float:
    """An all-gather or reduce-scatter of a ``nbytes`` tensor over ``ranks`` ranks by a ring:
    ``ranks - 1`` steps, each moving ``nbytes / ranks`` and paying the latency."""
    if ranks <= 1 or nbytes <= 0:
        return 0.0
    return (ranks - 1) * (latency + nbytes / ranks / bandwidth)


def group_link(cluster: Cluster, span: int, *, ideal: bool) -> tuple[float, float]:
    """``(bytes/s, latency)`` a ring collective gets on a group whose ranks span ``span``
    consecutive GPUs: the node's links if they fit in a node, else each GPU's NIC share, at
    NCCL's efficiency on that link (``ideal``: the line rate)."""
    if span <= cluster.gpus_per_node:
        eff = 1.0 if ideal else NVLINK.efficiency
        return cluster.intra_bandwidth * eff, cluster.intra_latency
    eff = 1.0 if ideal else INFINIBAND.efficiency
    nic_share = min(1.0, cluster.nics_per_node / cluster.gpus_per_node)
    return cluster.inter_bandwidth * nic_share * eff, cluster.inter_latency


def tp_comm_seconds(model, par, tokens, cluster, *, ideal: bool) -> float:
    """One pass's (forward or backward) tensor-parallel collectives: two all-gathers and two
    reduce-scatters of the ``T x d`` activations over the ``tp`` ranks of a node (with
    sequence parallelism), or two all-reduces of them (without: an all-reduce is a
    reduce-scatter and an all-gather, the same time)."""
    if par.tp == 1:
        return 0.0
    bandwidth, latency = group_link(cluster, par.tp, ideal=ideal)
    size = tokens * model.d_model * par.element_bytes
    return 4 * ring_collective_seconds(size, par.tp, bandwidth, latency)


def lm_head_seconds(model, par, tokens, hardware, *, ideal: bool, scale=None) -> float:
    """The vocabulary-parallel LM head (``d -> V / tp``, in the model's dtype) forward and
    backward, and the cross-entropy over its fp32 logits."""
    scale = point_scale(hardware) if scale is None else scale
    fwd, bwd = linear_seconds(
        hardware, tokens, model.d_model, model.vocab // par.tp, par.dtype, ideal=ideal
    )
    rate = 1.0 if ideal else scale.gemm_rate(par.dtype)
    fwd, bwd = fwd / rate, bwd / rate
    loss = 0.0
    if hardware.memory_bandwidth > 0:
        rate = hardware.memory_bandwidth * (1.0 if ideal else HBM_FRACTION)
        loss = tokens * (model.vocab / par.tp) * LOSS_BYTES_PER_LOGIT / rate
    return fwd + bwd + loss


@dataclass(frozen=True)
class LayerTime:
    """One layer on one GPU, one micro-batch: forward and backward seconds of each part, and
    what recomputation adds."""

    gemm: tuple[float, float]
    elementwise: tuple[float, float]
    tp_comm: tuple[float, float]
    attention: AttentionTime
    recompute_s: float

    @property
    def forward_s(self) -> float:
        return self.gemm[0] + self.elementwise[0] + self.tp_comm[0] + self.attention.forward_s

    @property
    def backward_s(self) -> float:
        parts = self.gemm[1] + self.elementwise[1] + self.tp_comm[1]
        return parts + self.attention.backward_s + self.recompute_s

    @property
    def total_s(self) -> float:
        return self.forward_s + self.backward_s


def layer_time(model, par, seq_len, cluster, attention: AttentionTime, *, ideal: bool, scale=None):
    """The parts of one layer (module docstring) for ``par`` on ``cluster``'s GPUs; what the
    recompute flavour runs again (``ringsim.timer.step.recompute``) is its share of each
    forward part."""
    hw = cluster.hardware
    tokens = tokens_per_gpu(seq_len, par)
    gemm = layer_gemm_seconds(model, par, tokens, hw, ideal=ideal, scale=scale)
    elementwise = elementwise_seconds(model, par, tokens, hw, ideal=ideal)
    comm = tp_comm_seconds(model, par, tokens, cluster, ideal=ideal)
    flavour = get_recompute(par.recompute)
    forward = {
        "gemm": gemm[0],
        "elementwise": elementwise[0],
        "tp_comm": comm,
        "attention": attention.forward_s,
    }
    recompute = math.fsum(flavour.rerun_share(k) * v for k, v in forward.items())
    return LayerTime(gemm, elementwise, (comm, comm), attention, recompute)


def scaled_attention(attention: AttentionTime, clock: float) -> AttentionTime:
    """``attention`` with its compute (``compute_s`` of its makespans) at ``clock`` times the
    benchmarks' rate; its exposed communication unchanged."""
    total = attention.forward_s + attention.backward_s
    if clock == 1.0 or total <= 0:
        return attention
    stretch = 1.0 + (1.0 / clock - 1.0) * min(1.0, attention.compute_s / total)
    return AttentionTime(
        attention.forward_s * stretch,
        attention.backward_s * stretch,
        attention.exposed_comm_s,
        attention.compute_s / clock,
    )


# -- the step ----------------------------------------------------------------------------------
def micro_batches(global_batch: int, par: Parallel) -> int:
    """Micro-batches each pipeline runs per step: ``global_batch / (dp x micro_batch)``;
    ``ValueError`` unless it divides."""
    per_rank = par.dp * par.micro_batch
    if global_batch % per_rank:
        raise ValueError(
            f"global_batch={global_batch} must be a multiple of dp x micro_batch = {per_rank}"
        )
    return global_batch // per_rank


def dp_comm_seconds(model, par, cluster, *, ideal: bool) -> tuple[float, float]:
    """``(reduce-scatter, all-gather)`` seconds of the data-parallel sharding's collectives
    per step (``zero1``) or per layer and pass (``zero3``: one layer's weights)."""
    n = par.shard_group
    if n == 1:
        return 0.0, 0.0
    span = par.tp * par.cp * (par.pp * par.dp if par.dp > 1 else 1)
    bandwidth, latency = group_link(cluster, span, ideal=ideal)
    e, g = par.element_bytes, par.grad_bytes
    if par.sharding == "zero1":
        params = stage_params(model, par) / par.tp
        grads = ring_collective_seconds(params * g, n, bandwidth, latency)
        return grads, ring_collective_seconds(params * e, n, bandwidth, latency)
    layer = model.layer_params / par.tp
    grads = ring_collective_seconds(layer * g, n, bandwidth, latency)
    return grads, ring_collective_seconds(layer * e, n, bandwidth, latency)


def optimizer_seconds(model, par, hardware, *, ideal: bool) -> float:
    """Adam on this GPU's shard of its stage's parameters, over HBM."""
    if hardware.memory_bandwidth <= 0:
        return 0.0
    shard = stage_params(model, par) / par.tp / par.shard_group
    rate = hardware.memory_bandwidth * (1.0 if ideal else HBM_FRACTION)
    return shard * ADAM_BYTES_PER_PARAM / rate


def step_time(
    model: ModelSpec,
    par: Parallel,
    seq_len: int,
    global_batch: int,
    cluster: Cluster,
    attention: AttentionTime,
    *,
    ideal: bool,
    scale: StepScale | None = None,
) -> StepBreakdown:
    """One training step of ``global_batch`` sequences of ``seq_len`` tokens (module
    docstring); ``attention`` is one layer's attention for one micro-batch on one GPU;
    ``scale`` the ends of the step's ranges (``ringsim.timer.step.uncertainty``; default: the
    device's point)."""
    m = micro_batches(global_batch, par)
    hw = cluster.hardware
    scale = point_scale(hw) if scale is None else scale
    if not ideal:
        attention = scaled_attention(attention, scale.clock)
    layer = layer_time(model, par, seq_len, cluster, attention, ideal=ideal, scale=scale)
    tokens = tokens_per_gpu(seq_len, par)
    head = lm_head_seconds(model, par, tokens, hw, ideal=ideal, scale=scale)
    # the pipeline runs at its slowest stage's pace: a middle one, or the last with the head
    _, middle, last = stage_layers(model, par)
    head_on_path = par.pp == 1 or last * layer.total_s + head >= middle * layer.total_s
    per_stage = last if head_on_path else middle  # layers of the slowest stage
    micro = per_stage * layer.total_s + (head if head_on_path else 0.0)
    scale = m * per_stage
    bubble = (par.pp - 1) / par.virtual_stages * micro
    rs, ag = dp_comm_seconds(model, par, cluster, ideal=ideal)
    if par.sharding == "zero1":  # once per step, behind the last backward / first forward
        hide_bwd = per_stage * layer.backward_s
        hide_fwd = per_stage * layer.forward_s
        exposed = _exposed(rs, hide_bwd, per_stage) + _exposed(ag, hide_fwd, per_stage)
        hidden = rs + ag - exposed
    else:  # every layer, every micro-batch: gather for forward and backward, scatter grads;
        # the next layer's gather runs beside this layer's compute, the first one's beside none
        per_layer = max(0.0, ag - layer.forward_s) + max(0.0, ag + rs - layer.backward_s)
        exposed = scale * per_layer + m * ag
        hidden = scale * (2 * ag + rs) - exposed
    p2p = 0.0
    if par.pp > 1:  # activations to the next stage and gradients back, asynchronous (hidden)
        bandwidth, latency = group_link(cluster, par.tp * par.cp * 2, ideal=ideal)
        size = tokens * model.d_model * par.element_bytes / par.tp
        p2p = 2 * m * par.virtual_stages * (latency + size / bandwidth)
    gemm = layer.gemm[0] + layer.gemm[1]
    elementwise = layer.elementwise[0] + layer.elementwise[1]
    return StepBreakdown(
        attention_s=scale * (attention.forward_s + attention.backward_s),
        gemm_s=scale * gemm,
        elementwise_s=scale * elementwise,
        tp_comm_s=scale * (layer.tp_comm[0] + layer.tp_comm[1]),
        recompute_s=scale * layer.recompute_s,
        lm_head_s=m * head if head_on_path else 0.0,
        pp_bubble_s=bubble,
        dp_comm_exposed_s=exposed,
        optimizer_s=optimizer_seconds(model, par, hw, ideal=ideal),
        cp_exposed_comm_s=scale * attention.exposed_comm_s,
        dp_comm_hidden_s=max(0.0, hidden),
        pp_p2p_hidden_s=p2p,
        micro_batches=m,
        micro_batch_s=micro,
    )


def _exposed(comm: float, compute: float, chunks: float) -> float:
    """The part of a bucketed collective of ``comm`` seconds that ``compute`` seconds beside it
    cannot hide: the overflow, and at least its last ``1 / chunks`` (the last bucket)."""
    if comm <= 0:
        return 0.0
    return max(comm / max(chunks, 1.0), comm - compute)


def prefill_time(
    model, par, seq_len, cluster, attention: AttentionTime, *, ideal: bool, scale=None
) -> float:
    """One forward pass (inference prefill) of one sequence: every layer's forward parts and
    the LM head's forward on the last token block, stages one after the other."""
    hw = cluster.hardware
    scale = point_scale(hw) if scale is None else scale
    if not ideal:
        attention = scaled_attention(attention, scale.clock)
    layer = layer_time(model, par, seq_len, cluster, attention, ideal=ideal, scale=scale)
    tokens = tokens_per_gpu(seq_len, par)
    head, _ = linear_seconds(
        hw, tokens, model.d_model, model.vocab // par.tp, par.dtype, ideal=ideal
    )
    rate = 1.0 if ideal else scale.gemm_rate(par.dtype)
    return model.layers * layer.forward_s + head / rate
