"""Training frameworks as profiles: what each runs (attention backend, context-parallel code,
sharding, precision, recompute flavours, pipeline schedule, FLOP count) and what it takes from
device memory before the model's tensors get any; each fact cited to the framework's code.

A profile restricts the planner to what the framework can run (``Framework.allows``) and
gives the attention kernel family its code calls, with the per-step costs its context-parallel
code adds (``Framework.kernel_family``). Profiles without a training stack (``none``,
``pytorch``, ``jax``) only take their memory overheads and leave every choice open.

The memory model (``ringsim.timer.step.memory``) counts tensors: states, checkpoints, logits, one
layer's working set. A real run OOMs earlier, for three reasons a framework adds:

* **fixed bytes** outside the tensor allocator: the CUDA context and loaded kernels, the
  communication library's buffers (NCCL allocates FIFOs per channel and peer), the BLAS
  workspaces;
* a **pool cap**: an allocator that preallocates a share of the device (JAX/XLA on GPU) can
  never hand out the rest;
* **fragmentation**: a caching allocator that splits cached blocks (PyTorch's, TensorFlow's
  BFC, which XLA's GPU client uses) leaves free bytes that no request fits; recomputation
  (activation checkpointing) and sharded training make it worse.

``usable = min(pool_fraction * M, M - fixed_bytes) * (1 - fragmentation)`` of a device with
``M`` bytes. Every number below is a published measurement or a documented default, with its
source; none is fitted to the contexts of any paper (``ringsim validate`` reports how the
Ring Attention paper's Table 3 comes out with them).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from ringsim.checks import check_choice
from ringsim.timer.machine.families import KernelFamily, get_family
from ringsim.timer.strategies import get_strategy

CUDA_CONTEXT_BYTES = 287_047_680
"""CUDA context with lazy module loading (PyTorch >= 1.13 sets CUDA_MODULE_LOADING=LAZY):
measured in pytorch/pytorch PR #86509 (666,632,192 bytes without lazy loading)."""

NCCL_BYTES = 1.6e9
"""One NCCL communicator after its first all-reduce, 8 GPUs: ~1.6 GB per GPU (NVIDIA/nccl issue
#864; the maintainer adds that memory grows linearly with the channel count, and that every
further communicator costs as much again unless split with shared resources, issue #986)."""

CUBLAS_WORKSPACE_BYTES = 32 * 2**20
"""cuBLAS(Lt) workspace per handle and stream: 32 MiB, the size the cuBLAS API reference
recommends for Hopper (cublasSetWorkspace) and PyTorch allocates since PR #120925 (4 MiB
before Hopper)."""

ALLOCATOR_FRAGMENTATION = 0.15
"""Share of a splitting caching allocator's pool lost to fragmentation in LLM training with
recomputation and sharding: 15% on average (up to 33%) over eight LLMs on A100-80GB (Guo et al.,
'GMLake', ASPLOS 2024, arXiv:2401.08156, abstract; PyTorch's allocator, whose design the paper
names together with TensorFlow's)."""

JAX_BPT_POOL_FRACTION = 0.95
"""JAX preallocates 75% of GPU memory by default (docs.jax.dev 'GPU memory allocation');
the Ring Attention / BPT authors' training script raises it with
XLA_PYTHON_CLIENT_MEM_FRACTION=.95 (github.com/haoliuhl/ringattention README @ 00cc946)."""


def _fraction(name: str, value: object, *, low_open: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    value = float(value)
    ok = (0.0 < value <= 1.0) if low_open else (0.0 <= value < 1.0)
    if not math.isfinite(value) or not ok:
        bounds = "(0, 1]" if low_open else "[0, 1)"
        raise ValueError(f"{name} must be in {bounds}, got {value!r}")
    return value


ANY = None
"""A profile field left open: the framework runs every value the simulator has."""

RUN_FIELDS = (
    "attention",
    "family_changes",
    "strategies",
    "hierarchical",
    "layouts",
    "max_tp",
    "shardings",
    "grad_dtype",
    "master_bytes",
    "gemm_dtypes",
    "recomputes",
    "sequence_parallel",
    "interleaved",
    "balanced_stages",
    "flops_convention",
    "kv_replication",
)
"""The fields that say what a framework runs; each one a profile sets names its source in
``Framework.sources``."""


@dataclass(frozen=True)
class Framework:
    """A framework: its memory overheads (``pool_fraction`` of device memory the allocator may
    hold, ``fixed_bytes`` taken outside the tensors, ``fragmentation`` the share of the pool no
    request can use; ``source``) and what it runs (``RUN_FIELDS``; ``ANY`` leaves a choice
    open), each with its citation in ``sources``:

    ``attention`` the kernel family its attention calls on a GPU (``None``: the hardware's
    default, ``default_kernel``); ``family_changes`` what its context-parallel code changes in
    that family (``merge``, ``grad_wire_dtype``); ``strategies`` and ``layouts`` the
    context-parallel code it has, ``hierarchical`` the strategies it runs inside Ulysses groups
    (a ``U x R`` group with both above 1); ``max_tp`` the largest tensor-parallel degree;
    ``shardings`` and ``grad_dtype`` its data-parallel sharding and gradient type,
    ``master_bytes`` its optimizer's master copy of a weight (``Parallel.master_bytes``);
    ``gemm_dtypes`` whether its linears run fp8; ``recomputes`` its recompute flavours
    (``ringsim.timer.step.recompute``); ``sequence_parallel`` the choices it offers;
    ``interleaved`` whether its pipeline schedule takes virtual stages; ``balanced_stages``
    whether it moves a layer off the first and the last stage (``Parallel.balanced_stages``);
    ``flops_convention`` how its own logs count model FLOPs; ``kv_replication`` whether its
    Ulysses all-to-all replicates key/value heads past their count
    (``ringsim.grid.check_ulysses_degree``)."""

    name: str
    pool_fraction: float = 1.0
    fixed_bytes: float = 0.0
    fragmentation: float = 0.0
    source: str = ""
    description: str = ""
    attention: str | None = None
    family_changes: Mapping[str, object] = field(default_factory=dict)
    strategies: tuple[str, ...] | None = ANY
    hierarchical: tuple[str, ...] | None = ANY
    layouts: tuple[str, ...] | None = ANY
    max_tp: int | None = ANY
    shardings: tuple[str, ...] | None = ANY
    grad_dtype: str | None = None
    master_bytes: int = 4
    gemm_dtypes: tuple[str, ...] | None = ANY
    recomputes: tuple[str, ...] | None = ANY
    sequence_parallel: tuple[bool, ...] | None = ANY
    interleaved: bool = True
    balanced_stages: bool = False
    flops_convention: str | None = None
    kv_replication: tuple[bool, ...] | None = ANY
    sources: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _fraction("pool_fraction", self.pool_fraction, low_open=True)
        _fraction("fragmentation", self.fragmentation, low_open=False)
        fixed = self.fixed_bytes
        if isinstance(fixed, bool) or not isinstance(fixed, numbers.Real) or not fixed >= 0:
            raise ValueError(f"fixed_bytes must be a non-negative number, got {fixed!r}")

    @property
    def runs(self) -> dict[str, object]:
        """The run facts this profile sets (``RUN_FIELDS`` not left open)."""
        defaults = {f: getattr(OPEN, f) for f in RUN_FIELDS}
        return {f: getattr(self, f) for f in RUN_FIELDS if getattr(self, f) != defaults[f]}

    def usable_bytes(self, memory_bytes: float) -> float:
        """Bytes of a device with ``memory_bytes`` that the model's tensors can use."""
        pool = min(self.pool_fraction * memory_bytes, memory_bytes - self.fixed_bytes)
        return max(0.0, pool * (1.0 - self.fragmentation))

    def kernel_family(self, hardware, implementation: str | KernelFamily | None = None):
        """The attention kernel family this framework runs on ``hardware``: ``implementation``
        if given (else its own ``attention``, else ``default_kernel``), with the changes its
        context-parallel code makes (``family_changes``; not to ``ideal``)."""
        if implementation is None:
            implementation = self.attention or default_kernel(hardware)
        family = get_family(implementation)
        if family.ideal or not self.family_changes:
            return family
        return replace(family, name=f"{family.name}+{self.name}", **self.family_changes)

    def allows(self, field_name: str, value: object) -> bool:
        """Whether this framework runs ``value`` for ``field_name`` (``strategies``,
        ``layouts``, ``shardings``, ``gemm_dtypes``, ``recomputes``, ``sequence_parallel``;
        ``max_tp``: a degree; ``interleaved``: a virtual-stage count; ``cp_variant``: a
        context-parallel variant, strategy, layout and Ulysses degree)."""
        if field_name == "max_tp":
            return self.max_tp is None or value <= self.max_tp
        if field_name == "interleaved":
            return self.interleaved or value == 1
        if field_name == "cp_variant":  # a dict of the planner's cp_variants
            strategy = value["strategy"]
            if not (
                self.allows("strategies", strategy) and self.allows("layouts", value["layout"])
            ):
                return False
            u = value["ulysses"]
            inside = u > 1 and not get_strategy(strategy).runs(u, 1)  # a ring part inside
            return not inside or self.hierarchical is None or strategy in self.hierarchical
        options = getattr(self, field_name)
        return options is None or value in options


OPEN = Framework("open")
"""Every run choice left open (the defaults ``Framework.runs`` compares against)."""


PYTORCH_OVERHEADS = dict(
    fixed_bytes=CUDA_CONTEXT_BYTES + NCCL_BYTES + CUBLAS_WORKSPACE_BYTES,
    fragmentation=ALLOCATOR_FRAGMENTATION,
    source="PyTorch + NCCL on a GPU: CUDA context 0.29 GB (pytorch PR #86509), one NCCL "
    "communicator 1.6 GB (NVIDIA/nccl #864), cuBLAS workspace 32 MiB (PR #120925); caching "
    "allocator fragmentation 15% (GMLake, ASPLOS 2024, mean of eight LLMs on A100-80GB)",
)

TE_14 = "NVIDIA/TransformerEngine @ v1.4 transformer_engine/pytorch/attention.py"
MEGATRON_06 = "NVIDIA/Megatron-LM @ core_v0.6.0"
MEGATRON_012 = "NVIDIA/Megatron-LM @ core_v0.12.0"
TORCHTITAN = "pytorch/torchtitan @ 9dec370 (its Dec 2024 benchmarks' commit)"
VERL = "volcengine/verl @ b178a3cd"

_TE_CP = {
    "merge": "fused",
    "grad_wire_dtype": None,
}
_TE_CP_SOURCE = (
    f"{TE_14}: AttnFuncWithCP (l.491) runs one attention call per ring step and corrects out "
    "and lse with two jit-fused kernels (flash_attn_fwd_out_correction, l.475-488: lse in "
    "fp64, out in the input dtype), not PyTorch's separate fp32 ops; its backward passes dkv "
    "around the ring in q's dtype (bf16), not fp32"
)
_MEGATRON_RUN = {
    "strategies": ("ring",),
    "hierarchical": (),
    "layouts": ("zigzag",),
    "shardings": ("zero1",),
    "gemm_dtypes": ("bf16", "fp8"),
    "recomputes": ("none", "selective", "full"),
    "sequence_parallel": (False, True),
    "flops_convention": "megatron",
}
_MEGATRON_SOURCES = {
    "family_changes": _TE_CP_SOURCE,
    "strategies": f"{TE_14}: context parallelism is AttnFuncWithCP's p2p ring only (cp_comm_type "
    "all_gather arrives in TE v1.10, a2a in v1.11, a2a+p2p in v1.12)",
    "hierarchical": f"{TE_14}: one p2p ring over the whole CP group, no all-to-all (a2a arrives "
    "in TE v1.11, a2a+p2p in v1.12)",
    "layouts": f"{TE_14} AttnFuncWithCP: the sequence in 2 x CP chunks, rank i holding chunks i "
    "and 2CP - 1 - i",
    "shardings": f"{MEGATRON_06} megatron/training/arguments.py l.1307 "
    "(--use-distributed-optimizer: fp32 optimizer state sharded over data parallelism)",
    "gemm_dtypes": f"{MEGATRON_06} arguments.py l.582 (--fp8-format: Transformer Engine's fp8 "
    "linears; attention stays bf16 before TE v1.6)",
    "recomputes": f"{MEGATRON_06} arguments.py l.915-922 (--recompute-granularity full|selective)",
    "sequence_parallel": f"{MEGATRON_06} arguments.py l.1056 (--sequence-parallel, store_true)",
    "flops_convention": f"{MEGATRON_06} megatron/training/training.py l.65-87 "
    "(num_floating_point_operations: attention term s / h, no causal mask)",
}

FRAMEWORKS: dict[str, Framework] = {
    f.name: f
    for f in (
        Framework("none", source="pure tensor bound: every byte of the device holds tensors"),
        Framework("pytorch", **PYTORCH_OVERHEADS),
        Framework(
            "jax",
            pool_fraction=JAX_BPT_POOL_FRACTION,
            fixed_bytes=CUDA_CONTEXT_BYTES + NCCL_BYTES + CUBLAS_WORKSPACE_BYTES,
            fragmentation=ALLOCATOR_FRAGMENTATION,
            source="JAX/XLA on a GPU as the Ring Attention authors ran it: a preallocated BFC "
            "pool of 95% of the device (XLA_PYTHON_CLIENT_MEM_FRACTION=.95, "
            "haoliuhl/ringattention README; JAX's default is 75%), context and NCCL outside it; "
            "fragmentation 15% as for PyTorch (GMLake's figure for splitting caching "
            "allocators; no XLA-specific figure was found)",
        ),
        Framework(
            "megatron-0.6",
            **PYTORCH_OVERHEADS,
            description="Megatron-LM core 0.6 with Transformer Engine 1.4: TE's attention "
            "(cuDNN fused on Hopper), its p2p context-parallel ring, the distributed optimizer",
            attention="cudnn",
            family_changes=_TE_CP,
            **_MEGATRON_RUN,
            sources={
                **_MEGATRON_SOURCES,
                "attention": f"{TE_14} l.2426-2431 and l.2834-2838: NVTE_FUSED_ATTN defaults to "
                "1 and 'Select FusedAttention on sm90 and FlashAttention on others'",
            },
        ),
        Framework(
            "nemo-24.03",
            **PYTORCH_OVERHEADS,
            description="NeMo 24.03 as NVIDIA's launcher ran it (launcher 24.01-24.07): "
            "Megatron core with TE 1.4, cuDNN attention switched off, so flash-attn 2 per ring "
            "step",
            attention="fa2",
            family_changes=_TE_CP,
            master_bytes=2,
            **_MEGATRON_RUN,
            sources={
                **_MEGATRON_SOURCES,
                "shardings": "NeMo-Framework-Launcher launcher_scripts/conf/training/llama/"
                "llama2_7b.yaml @ 24.03.01 l.143: optim distributed_fused_adam (Apex "
                "DistributedFusedAdam through NVIDIA/NeMo @ v1.23.0 nemo/core/optim/"
                "distributed_adam.py: fp32 optimizer state sharded over data x context "
                "parallelism)",
                "master_bytes": "NVIDIA/NeMo @ v1.23.0 nemo/collections/nlp/models/"
                "language_modeling/megatron_base_model.py l.748-750: an fp32 optimizer with a "
                "bf16 model sets store_params=False, store_param_remainders=True (the master "
                "weight kept as the 16 bits bf16 lacks)",
                "attention": "NVIDIA/NeMo-Framework-Launcher launcher_scripts/conf/config.yaml "
                "@ 24.01-24.07 (l.68 @ 24.03.01, l.70 @ 24.05, whose container is "
                "nemo:24.03.01.framework): env_vars NVTE_FUSED_ATTN: 0 ('Disable cudnn FA until "
                "we've tested it more'), exported into every job (nemo_launcher/core/stages.py "
                f"l.323-325); {TE_14} l.2426-2431 honours it, and under context parallelism "
                "FlashAttention.forward calls AttnFuncWithCP with use_fused_attention=False "
                "(l.1022-1036, 1786-1797): flash-attn 2 per ring step",
            },
        ),
        Framework(
            "megatron-0.12",
            **PYTORCH_OVERHEADS,
            description="Megatron-LM core 0.12 with TE >= 1.12: attention backend auto (cuDNN "
            "on Hopper), context parallelism by p2p ring, all-gather, all-to-all or both",
            attention="cudnn",
            family_changes=_TE_CP,
            **{
                **_MEGATRON_RUN,
                "strategies": ("ring", "allgather", "ulysses", "hybrid"),
                "hierarchical": ("hybrid",),
                "flops_convention": "causal",
                "kv_replication": (False,),
            },
            sources={
                **_MEGATRON_SOURCES,
                "kv_replication": "NVIDIA/TransformerEngine @ d0067d0d transformer_engine/"
                "pytorch/attention/dot_product_attention/context_parallel.py l.4246: "
                "\"cp_comm_type='a2a' requires num_heads % cp_size == 0 for Q, K, V\"",
                "attention": f"{MEGATRON_012} megatron/training/arguments.py l.1237 "
                "(--attention-backend default auto: TE picks cuDNN fused attention on sm90)",
                "strategies": f"{MEGATRON_012} arguments.py (--cp-comm-type p2p | all_gather | a2a "
                "| a2a+p2p, default p2p; from core_r0.10.0 l.1755); TE v1.12 attention.py "
                "docstring: 'a2a: Like DeepSpeed Ulysses', 'a2a+p2p: hierarchical'",
                "recomputes": f"{MEGATRON_012} arguments.py l.1568-1579 (--recompute-modules, "
                "default core_attn)",
                "hierarchical": "TE v1.12 attention.py docstring of cp_comm_type: 'a2a+p2p: "
                "hierarchical CP implementation', all-to-all inside and p2p across (our hybrid)",
                "flops_convention": "NVIDIA/Megatron-LM 8873b55d6a (2025-03-06, first in "
                "core_v0.12.0): num_floating_point_operations counts 'Only half of the "
                "attention matrix' (seq_length / hidden_size / 2)",
            },
        ),
        Framework(
            "llama3",
            **PYTORCH_OVERHEADS,
            description="Meta's Llama 3 training stack as the paper describes it: all-gather "
            "context parallelism over 2 x CP chunks, interleaved pipeline, FSDP that keeps "
            "weights gathered, fp32 gradient accumulation, bf16",
            strategies=("allgather",),
            hierarchical=(),
            layouts=("zigzag",),
            max_tp=8,
            shardings=("zero1",),
            grad_dtype="fp32",
            gemm_dtypes=("bf16",),
            recomputes=("none", "selective", "full"),
            balanced_stages=True,
            sources={
                "strategies": "Llama 3 paper (arXiv:2407.21783) Sec. 3.3.2: 'our CP "
                "implementation adopts an all-gather based method where we first all-gather "
                "the key (K) and value (V) tensors'",
                "hierarchical": "ibid.: K and V all-gathered over the CP group; no head "
                "re-sharding (all-to-all) is described",
                "layouts": "ibid.: 'we partition the input sequence into 2 x CP chunks ... The "
                "i-th CP rank received both the i-th and the (2 x CP - 1 - i)-th chunks'",
                "max_tp": "ibid. Sec. 3.3.1-3.3.2: 8 GPUs per server on NVLink, tensor "
                "parallelism inside it (order [TP, CP, PP, DP])",
                "shardings": "ibid. Sec. 3.3.2: 'Our use of FSDP for Llama 3 shards optimizer "
                "states and gradients, but for model shards we do not reshard after forward "
                "computation' (weights gathered through the step: our zero1 with sharded "
                "optimizer state)",
                "grad_dtype": "ibid.: 'we use FP32 gradient accumulation during backward "
                "computation over multiple micro-batches and also reduce-scatter gradients in "
                "FP32 across data parallel workers in FSDP'",
                "gemm_dtypes": "ibid. Table 4: 'BF16 MFU'; no fp8 in pre-training",
                "recomputes": "ibid.: 'we could pre-train Llama 3 on sequences of 8K tokens "
                "without activation checkpointing'; nothing said at 128K, so every flavour",
                "balanced_stages": "ibid.: 'After the last layer of the model, we need to "
                "calculate output and loss, making this stage the execution latency "
                "bottleneck' ... 'we reduce one Transformer layer each from the first and the "
                "last stages'",
            },
        ),
        Framework(
            "torchtitan-2024.12",
            **PYTORCH_OVERHEADS,
            description="TorchTitan (Dec 2024): SDPA flash under context parallelism, PyTorch's "
            "templated ring attention, FSDP2, torchao fp8, its own recompute flavours",
            attention="fa2",
            strategies=("allgather", "ring"),
            hierarchical=(),
            layouts=("zigzag",),
            shardings=("zero3",),
            grad_dtype="fp32",
            gemm_dtypes=("bf16", "fp8"),
            recomputes=("none", "full", "every-other-layer", "per-op"),
            sequence_parallel=(True,),
            interleaved=True,
            flops_convention="megatron",
            sources={
                "attention": f"{TORCHTITAN} torchtitan/utils.py l.208-217: under context "
                "parallelism SDPA is restricted to sdpa_kernel([FLASH_ATTENTION, "
                "EFFICIENT_ATTENTION]) ('TODO: support cuDNN backend'); PyTorch's flash SDPA is "
                "FlashAttention-2",
                "strategies": f"{TORCHTITAN} torchtitan/config_manager.py l.365-373 "
                "(--experimental.context_parallel_rotate_method, default 'allgather': one "
                "all-gather of k, v, then slices; 'alltoall': the ring); PyTorch "
                "torch/distributed/tensor/experimental/_attention.py",
                "hierarchical": "PyTorch _attention.py: k, v rotate over the whole CP mesh "
                "dimension (all-gather or all-to-all rotater), no head re-sharding",
                "layouts": "PyTorch _attention.py _ContextParallelOptions.enable_load_balance = "
                "True: rank r holds chunks r and 2W - 1 - r (read at pytorch 0123248a)",
                "shardings": f"{TORCHTITAN} torchtitan/parallelisms/parallelize_llama.py "
                "l.320-339: FSDP2 fully_shard per block",
                "grad_dtype": f"{TORCHTITAN} config_manager.py l.389-397 "
                "(--training.mixed_precision_reduce: only float32)",
                "gemm_dtypes": f"{TORCHTITAN} torchtitan/float8.py l.44-61 (torchao Float8Linear)",
                "recomputes": f"{TORCHTITAN} config_manager.py l.516-529 (--activation_checkpoint"
                ".mode none|full|selective, selective_ac_option '2' (default: every second "
                "block) or 'op'); ringsim.timer.step.recompute",
                "sequence_parallel": f"{TORCHTITAN} parallelize_llama.py: tensor parallelism with "
                "SequenceParallel on the norms",
                "interleaved": f"{TORCHTITAN} config_manager.py l.318-324 "
                "(--experimental.pipeline_parallel_schedule: 1F1B default, Interleaved1F1B)",
                "flops_convention": f"{TORCHTITAN} torchtitan/utils.py l.268-281 (6 N + 12 l h q "
                "t: 'we follow the convention and do not account for sparsity in causal "
                "attention')",
            },
        ),
        Framework(
            "deepspeed-ulysses",
            **PYTORCH_OVERHEADS,
            description="DeepSpeed-Ulysses as Megatron-DeepSpeed's sequence-parallel examples "
            "run it: all-to-all over heads, no tensor parallelism, ZeRO-3, flash-attn 2",
            attention="fa2",
            strategies=("ulysses",),
            hierarchical=(),
            layouts=("contiguous",),
            max_tp=1,
            shardings=("zero3",),
            gemm_dtypes=("bf16",),
            recomputes=("none", "full"),
            sequence_parallel=(True,),
            flops_convention="megatron",
            kv_replication=(False,),
            sources={
                "kv_replication": "deepspeedai/DeepSpeed @ edaa7221 deepspeed/sequence/layer.py "
                "l.246-250: uneven heads are split, and 'Number of heads must be larger than "
                "sequence parallel size' (no repeat of key/value heads)",
                "attention": "microsoft/Megatron-DeepSpeed @ 79b8e22 examples_deepspeed/"
                "sequence_parallel/ds_pretrain_gpt_6.7B_fpdt_32k.sh (--use-flash-attn-v2)",
                "strategies": "deepspeedai/DeepSpeed @ 25493c74 deepspeed/sequence/layer.py "
                "(_SeqAllToAll: all_to_all_single of q, k, v and the output over the heads)",
                "hierarchical": "the same: the all-to-all over the whole sequence-parallel group, "
                "no ring inside it",
                "layouts": "the same: Ulysses re-shards by heads, each rank attends over the "
                "whole sequence, so no causal load balancing is needed",
                "max_tp": "Megatron-DeepSpeed examples_deepspeed/sequence_parallel: 'Currently "
                "we only support MP=1 with SP>1'",
                "shardings": "ibid. ds_config_gbs16_mbs1_log1_zero3.json ('zero_optimization': "
                "{'stage': 3})",
                "gemm_dtypes": "ibid.: fp16 configs, no fp8",
                "recomputes": "ibid.: --checkpoint-activations (full) or none",
                "sequence_parallel": "no tensor parallelism (max_tp 1)",
                "flops_convention": "Megatron-DeepSpeed's throughput log: Megatron's count",
            },
        ),
        Framework(
            "usp-0.6",
            **PYTORCH_OVERHEADS,
            description="YunChang (USP) 0.6: Ulysses all-to-all around a ring "
            "(basic/zigzag/stripe, from zhuzilin/ring-flash-attention), flash-attn 2",
            attention="fa2",
            strategies=("ring", "ulysses", "hybrid"),
            hierarchical=("hybrid",),
            layouts=("contiguous", "zigzag", "striped"),
            kv_replication=(False,),
            sources={
                "kv_replication": "feifeibear/long-context-attention @ 56118e0: the all-to-alls "
                "split the heads they are given; nothing repeats key/value heads",
                "attention": "feifeibear/long-context-attention @ 0.6.0 yunchang/hybrid/"
                "attn_layer.py (LongContextAttention attn_type=AttnType.FA: flash-attn 2)",
                "strategies": "ibid.: SeqAllToAll4D on q, k, v, then the ring (RING_IMPL_DICT), "
                "then SeqAllToAll4D back; Ulysses degree x ring degree = the group",
                "hierarchical": "ibid.: the ring runs inside each Ulysses group (our hybrid)",
                "layouts": "ibid. RING_IMPL_DICT: basic, zigzag, stripe",
            },
        ),
        Framework(
            "verl",
            **PYTORCH_OVERHEADS,
            description="verl's FSDP workers: Ulysses sequence parallelism with key/value "
            "heads replicated past their count, FSDP full sharding, flash-attn 2",
            attention="fa2",
            strategies=("ulysses",),
            hierarchical=(),
            layouts=("contiguous",),
            max_tp=1,
            shardings=("zero3",),
            recomputes=("none", "full"),
            sequence_parallel=(True,),
            flops_convention="causal",
            kv_replication=(True,),
            sources={
                "attention": f"{VERL} verl/workers/fsdp_workers.py l.331 (attn_implementation "
                "default flash_attention_2)",
                "strategies": f"{VERL} fsdp_workers.py l.170-172 (ulysses_sequence_parallel_size; "
                "dp = world_size / sp) and verl/models/transformers/monkey_patch.py "
                "(_ulysses_flash_attention_forward: all-to-all over the heads)",
                "hierarchical": "the same: one all-to-all over the sequence-parallel group",
                "layouts": "the same: Ulysses re-shards by heads; each rank attends the whole "
                "sequence",
                "max_tp": "the same: the FSDP workers shard by FSDP and Ulysses, no tensor "
                "parallelism",
                "shardings": f"{VERL} fsdp_workers.py l.108-115 (get_sharding_strategy: "
                "FULL_SHARD, ZeRO-3's sharding)",
                "recomputes": f"{VERL} fsdp_workers.py l.283, l.439 "
                "(enable_gradient_checkpointing, off by default)",
                "sequence_parallel": "no tensor parallelism (max_tp 1)",
                "flops_convention": f"{VERL} verl/utils/flops_counter.py l.115 (attention "
                "6 s^2 d H per layer: half the score matrix)",
                "kv_replication": f"{VERL} monkey_patch.py l.120-128: key/value heads repeated "
                "sp / nheads_k times before the all-to-all",
            },
        ),
    )
}
"""The profiles, by name."""


def get_framework(framework: str | Framework) -> Framework:
    """The framework called ``framework`` (or ``framework`` itself)."""
    if isinstance(framework, Framework):
        return framework
    check_choice("framework", framework, tuple(FRAMEWORKS))
    return FRAMEWORKS[framework]


def default_framework(hardware) -> str:
    """``pytorch`` on a CUDA GPU (a ``Hardware`` whose chip has a compute capability, or whose
    chip is unknown: the framework's share is the careful side); ``none`` on TPUs and CPUs, for
    which no overhead measurement is sourced here."""
    arch = hardware.arch
    return "pytorch" if arch is None or arch.cuda else "none"


def default_kernel(hardware) -> str:
    """The kernel family a run on ``hardware`` gets when nothing names one: the first its chip's
    frameworks call (``Arch.attention_kernels``); ``ideal`` where none is sourced."""
    return kernel_alternatives(hardware)[0]


def kernel_alternatives(hardware) -> tuple[str, ...]:
    """The kernel families frameworks run on ``hardware`` (``Arch.attention_kernels``): the
    range of a prediction whose backend is unknown; ``("ideal",)`` where none is sourced."""
    arch = hardware.arch
    return (arch.attention_kernels if arch is not None else ()) or ("ideal",)
