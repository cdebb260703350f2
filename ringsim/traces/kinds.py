"""What a recorded event is to a ring: an attention call of some kernel family, a send or a
receive, a collective that is not the ring's, or none of these (the rest of a step's compute:
merges, casts, copies).

Each kernel family is an ``AttentionFamily`` in the registry ``FAMILIES``, with the names its
kernels (or host ops) carry and where those names come from, one forward kernel name as a
trace shows it (``example``: ``ringsim.views.gpu_trace`` writes it, the tests check that the
patterns match it), the host op that launches it with the order of its ``q, k, v`` dims and
the place of its causal flag, and the ``--implementation`` it maps to
(``ringsim.timer.machine.families``). ``classify`` asks the registry; no event name is
compared anywhere else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ringsim.traces.events import Event


@dataclass(frozen=True)
class AttentionFamily:
    """A kind of attention kernel.

    ``forward``/``backward``: regular expressions searched in event names, on the ``device``
    (kernels), the host (operators) or both (``None``); ``implementation``: the ringsim
    kernel family that times it (``None``: none, the ideal model); ``host_op``: the host op
    that launches its forward kernel, ``dims`` the order of ``q``'s dims in it (``"bhsd"``:
    batch, heads, tokens, head dim; ``"bshd"``: batch, tokens, heads, head dim),
    ``causal_args`` ``(host op, index of its causal flag among Concrete Inputs)`` for the ops
    whose signature is known; ``example``: a forward kernel's (or op's) full name as a trace
    shows it; ``source``: where the names come from."""

    name: str
    implementation: str | None
    forward: str
    backward: str
    device: bool | None
    dims: str
    source: str
    host_op: str | None = None
    example: str = ""
    causal_args: tuple[tuple[str, int], ...] = ()

    def causal_index(self, op_name: str) -> int | None:
        """Where among a host op's ``Concrete Inputs`` its causal flag sits (``None``: the op
        is not one whose signature this family knows)."""
        return dict(self.causal_args).get(op_name)

    def pass_of(self, name: str) -> str | None:
        """``"forward"``, ``"backward"`` or ``None`` (not this family's)."""
        if self.backward and re.search(self.backward, name):
            return "backward"
        if self.forward and re.search(self.forward, name):
            return "forward"
        return None


FAMILIES: dict[str, AttentionFamily] = {}


def register_family(family: AttentionFamily) -> AttentionFamily:
    """Add ``family`` to ``FAMILIES`` (checked in registration order: the unfused one last)."""
    FAMILIES[family.name] = family
    return family


FA2_TRAITS = "Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t"
register_family(
    AttentionFamily(
        "flash-attn 2",
        "fa2",
        forward=r"\bflash_fwd_(splitkv_)?(combine_)?kernel",
        backward=r"\bflash_bwd_",
        device=True,
        dims="bshd",
        source="Dao-AILab/flash-attention csrc/flash_attn/src/flash_fwd_launch_template.h "
        "(flash_fwd_kernel<Kernel_traits, Is_dropout, Is_causal, ...>(Flash_fwd_params), "
        "flash_fwd_splitkv_kernel, ..._combine_kernel; grid (m blocks, batch, heads)) and "
        "flash_bwd_launch_template.h (flash_bwd_*); torch's SDPA flash backend builds the "
        "same kernels as pytorch_flash::flash_fwd_kernel. flash_attn/flash_attn_interface.py: "
        "_flash_attn_forward(q, k, v, dropout_p, softmax_scale, causal, ...), q as (batch, "
        "seqlen, heads, head_dim); native_functions.yaml: _flash_attention_forward(query, key, "
        "value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, ...)",
        host_op="flash_attn::_flash_attn_forward",
        example=f"void flash_fwd_kernel<{FA2_TRAITS}, Flash_kernel_traits<128, 128, 64, 4, "
        "cutlass::bfloat16_t> >, false, true, false, false, true, true, false, false>"
        "(Flash_fwd_params)",
        causal_args=(("flash_attn::_flash_attn_forward", 5), ("aten::_flash_attention_forward", 8)),
    )
)
register_family(
    AttentionFamily(
        "flash-attn 3",
        "fa3",
        forward=r"FlashAttnFwdSm90",
        backward=r"FlashAttnBwd(Sm90|Preprocess|Postprocess)",
        device=True,
        dims="bshd",
        source="Dao-AILab/flash-attention hopper/flash_fwd_kernel_sm90.h (class "
        "FlashAttnFwdSm90) and hopper/flash_bwd_kernel_sm90.h, launched as "
        "cutlass::device_kernel<...>; hopper/flash_attn_interface.py takes q as (batch, "
        "seqlen, heads, head_dim)",
        host_op="flash_attn_3::fwd",
        example="void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90"
        "<flash::CollectiveMainloopFwdSm90<2, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, "
        "cute::tuple<cute::C<128>, cute::C<128>, cute::C<128> >, 128, cutlass::bfloat16_t, "
        "float, cutlass::arch::Sm90, true, false, false, false, false, false, false, false, "
        "false>, flash::CollectiveEpilogueFwd<cute::tuple<cute::C<128>, cute::C<128>, "
        "cute::C<128> >, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, cutlass::"
        "bfloat16_t, cutlass::arch::Sm90, 256, false, false, false>, flash::"
        "StaticPersistentTileScheduler<false> > > >(...)",
    )
)
register_family(
    AttentionFamily(
        "cuDNN SDPA",
        "cudnn",
        forward=r"cudnn_generated_fort_native_sdpa\w*fprop",
        backward=r"cudnn_generated_fort_native_sdpa\w*bprop",
        device=True,
        dims="bhsd",
        source="the kernels cuDNN compiles for torch's aten::_scaled_dot_product_cudnn_attention "
        "(cudnn_generated_fort_native_sdpa_sm90_flash_fprop_..., ..._bprop_... in profiler "
        "traces); native_functions.yaml: _scaled_dot_product_cudnn_attention(query, key, value, "
        "attn_bias, compute_log_sumexp, dropout_p, is_causal, ...), q as (batch, heads, "
        "seqlen, head_dim)",
        host_op="aten::_scaled_dot_product_cudnn_attention",
        example="cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128"
        "_4x1x1_cga1x1x1_kernel0_0",
        causal_args=(("aten::_scaled_dot_product_cudnn_attention", 6),),
    )
)
register_family(
    AttentionFamily(
        "Triton",
        "triton",
        forward=r"^_attn_fwd\b",
        backward=r"^_attn_bwd",
        device=True,
        dims="bhsd",
        source="kernels/blocks/triton_block.py (_attn_fwd, _attn_bwd_dkdv, _attn_bwd_dq, "
        "_attn_bwd_delta; the names of Triton's own fused-attention tutorial); a Triton "
        "kernel's trace name is its function's",
        example="_attn_fwd",
    )
)
register_family(
    AttentionFamily(
        "memory-efficient SDPA",
        None,
        forward=r"fmha_cutlassF",
        backward=r"fmha_cutlassB",
        device=True,
        dims="bshd",
        source="torch's SDPA efficient backend (xFormers' cutlass kernels fmha_cutlassF_*, "
        "fmha_cutlassB_*)",
        host_op="aten::_efficient_attention_forward",
        example="fmha_cutlassF_bf16_aligned_64x128_rf_sm80(PyTorchMemEffAttention::"
        "AttentionKernel<cutlass::bfloat16_t, cutlass::arch::Sm80, true, 64, 128, 128, true, "
        "true>::Params)",
    )
)
register_family(
    AttentionFamily(
        "torch CPU flash",
        "torch",
        forward=r"^aten::_scaled_dot_product_flash_attention_for_cpu$",
        backward=r"^aten::_scaled_dot_product_flash_attention_for_cpu_backward$",
        device=False,
        dims="bhsd",
        source="pytorch/pytorch aten/src/ATen/native/native_functions.yaml "
        "(_scaled_dot_product_flash_attention_for_cpu(query, key, value, dropout_p, is_causal, "
        "...) and its _backward); the op is its own kernel on a CPU",
        host_op="aten::_scaled_dot_product_flash_attention_for_cpu",
        example="aten::_scaled_dot_product_flash_attention_for_cpu",
        causal_args=(("aten::_scaled_dot_product_flash_attention_for_cpu", 4),),
    )
)
register_family(
    AttentionFamily(
        "matmul + softmax",
        None,
        forward=r"^aten::(_softmax|bmm|baddbmm|matmul)$|softmax_warp_forward|SoftMaxForward"
        r"|gemm",
        backward=r"^aten::_softmax_backward_data$|softmax_warp_backward|SoftMaxBackward",
        device=None,
        dims="bhsd",
        source="a ring whose attention is unfused: aten matmuls and softmax on a host, GEMM and "
        "softmax kernels on a GPU (cuBLAS's *gemm* kernels, ATen's softmax_warp_forward)",
        example="aten::_softmax",
    )
)


@dataclass(frozen=True)
class Transfer:
    """A send or receive as a trace shows it: ``direction`` ``"send"``, ``"recv"`` or
    ``"sendrecv"`` (an NCCL kernel that runs a group of both); ``peer_arg``: the index in
    ``Concrete Inputs`` of the peer rank (a host op's), ``None`` when it has none."""

    direction: str
    peer_arg: int | None = None


# The transfers, by name: c10d's dispatcher ops (pytorch/pytorch torch/csrc/distributed/c10d/
# Ops.cpp: send(Tensor[] tensors, ProcessGroup, int dst, int tag), recv_(..., int src, ...))
# and ProcessGroupGloo's profiling titles (ProcessGroupGloo.cpp: "gloo:send", "gloo:recv",
# spans from the post to the work's completion); NCCL's kernel names (NVIDIA/nccl
# src/device/generate.py @b6475625: ncclDevKernel_SendRecv, ncclDevKernel_AllGather_RING_LL,
# ...; ncclKernel_SendRecv_* before NCCL 2.19). NCCL runs an all-to-all as grouped send/recv:
# its host op (c10d::alltoall_) tells it from a ring's.
HOST_TRANSFERS = {
    "c10d::send": Transfer("send", peer_arg=2),
    "c10d::recv_": Transfer("recv", peer_arg=2),
    "gloo:send": Transfer("send"),
    "gloo:recv": Transfer("recv"),
}
# Host ops of the transfer machinery and the profiler, never a step's compute or a ring pass:
# c10d's ops, ProcessGroupNCCL's and ProcessGroupGloo's profiling titles, the op that carries a
# collective's metadata (pytorch/kineto libkineto/src/output_json.cpp, kParamCommsCallName),
# torch.profiler's step ranges, and the CUDA API's calls
PARAM_COMMS = "record_param_comms"
MACHINERY = ("c10d::", "nccl:", "gloo:", PARAM_COMMS, "ProfilerStep", "cuda")

# element types a kernel's template arguments name (cutlass::bfloat16_t, cutlass::half_t):
# an Nsight export records no input types, a kernel's name may
KERNEL_TYPES = (("bf16", re.compile(r"bfloat16")), ("fp16", re.compile(r"half_t|__half\b")))

# Where a GPU ring's host waits for a transfer: torch's Work.wait() on NCCL makes the compute
# stream wait on the work's end event (pytorch/pytorch ProcessGroupNCCL.cpp,
# WorkNCCL::synchronizeStream: cudaStreamWaitEvent); a blocking wait synchronises
WAIT_CALLS = ("cudaStreamWaitEvent", "cudaEventSynchronize", "cudaStreamSynchronize")
NCCL_P2P_KERNEL = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
P2P_KERNEL = re.compile(r"^nccl(Dev)?Kernel_SendRecv")
COLLECTIVE_KERNEL = re.compile(r"^nccl(Dev)?Kernel_(AllGather|AllReduce|ReduceScatter|Broadcast)")
COLLECTIVE_OPS = re.compile(
    r"^c10d::(allgather|_allgather_base|alltoall|all_to_all|reduce_scatter)"
)


@dataclass(frozen=True)
class Role:
    """What an event is to the ring: ``"attention"`` (with its ``family`` and ``pass_``),
    ``"transfer"`` (with its ``transfer``), ``"collective"`` (a collective that is not a
    ring's send/recv), or ``"other"``."""

    kind: str
    family: AttentionFamily | None = None
    pass_: str | None = None
    transfer: Transfer | None = None


OTHER = Role("other")


def classify(event: Event) -> Role:
    """The role of ``event`` (asked of ``FAMILIES`` and the transfer tables)."""
    name = event.name
    if event.device:
        if P2P_KERNEL.search(name):
            return Role("transfer", transfer=Transfer("sendrecv"))
        if COLLECTIVE_KERNEL.search(name):
            return Role("collective")
    elif name in HOST_TRANSFERS:
        return Role("transfer", transfer=HOST_TRANSFERS[name])
    elif COLLECTIVE_OPS.search(name):
        return Role("collective")
    for family in FAMILIES.values():
        if family.device is not None and family.device != event.device:
            continue
        pass_ = family.pass_of(name)
        if pass_ is not None:
            return Role("attention", family=family, pass_=pass_)
    return OTHER


# element types as traces name them (Kineto's Input type, record_param_comms' dtype)
DTYPES = {
    "float": "fp32",
    "Float": "fp32",
    "c10::BFloat16": "bf16",
    "BFloat16": "bf16",
    "c10::Half": "fp16",
    "Half": "fp16",
}
TRACE_TYPES = {"fp32": "float", "bf16": "c10::BFloat16", "fp16": "c10::Half"}
