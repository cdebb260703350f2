"""What a training framework takes from device memory before the model's tensors get any.

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
from dataclasses import dataclass

from ringsim.checks import check_choice

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


@dataclass(frozen=True)
class Framework:
    """``pool_fraction`` of device memory the allocator may hold, ``fixed_bytes`` taken outside
    the tensors (context, communication buffers, workspaces), ``fragmentation`` the share of
    the pool that no request can use."""

    name: str
    pool_fraction: float = 1.0
    fixed_bytes: float = 0.0
    fragmentation: float = 0.0
    source: str = ""

    def __post_init__(self) -> None:
        _fraction("pool_fraction", self.pool_fraction, low_open=True)
        _fraction("fragmentation", self.fragmentation, low_open=False)
        fixed = self.fixed_bytes
        if isinstance(fixed, bool) or not isinstance(fixed, numbers.Real) or not fixed >= 0:
            raise ValueError(f"fixed_bytes must be a non-negative number, got {fixed!r}")

    def usable_bytes(self, memory_bytes: float) -> float:
        """Bytes of a device with ``memory_bytes`` that the model's tensors can use."""
        pool = min(self.pool_fraction * memory_bytes, memory_bytes - self.fixed_bytes)
        return max(0.0, pool * (1.0 - self.fragmentation))


FRAMEWORKS: dict[str, Framework] = {
    "none": Framework("none", source="pure tensor bound: every byte of the device holds tensors"),
    "pytorch": Framework(
        "pytorch",
        fixed_bytes=CUDA_CONTEXT_BYTES + NCCL_BYTES + CUBLAS_WORKSPACE_BYTES,
        fragmentation=ALLOCATOR_FRAGMENTATION,
        source="PyTorch + NCCL on a GPU: CUDA context 0.29 GB (pytorch PR #86509), one NCCL "
        "communicator 1.6 GB (NVIDIA/nccl #864), cuBLAS workspace 32 MiB (PR #120925); caching "
        "allocator fragmentation 15% (GMLake, ASPLOS 2024, mean of eight LLMs on A100-80GB)",
    ),
    "jax": Framework(
        "jax",
        pool_fraction=JAX_BPT_POOL_FRACTION,
        fixed_bytes=CUDA_CONTEXT_BYTES + NCCL_BYTES + CUBLAS_WORKSPACE_BYTES,
        fragmentation=ALLOCATOR_FRAGMENTATION,
        source="JAX/XLA on a GPU as the Ring Attention authors ran it: a preallocated BFC pool "
        "of 95% of the device (XLA_PYTHON_CLIENT_MEM_FRACTION=.95, haoliuhl/ringattention "
        "README; JAX's default is 75%), context and NCCL outside it; fragmentation 15% as for "
        "PyTorch (GMLake's figure for splitting caching allocators; no XLA-specific figure "
        "was found)",
    ),
}


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
