"""Named attention kernel families and their throughput curves
(``ringsim.timer.machine.kernel_model`` times a call with them).

A ``KernelFamily`` is a kernel and the ring code around it: its ``Curve`` per (architecture,
pass), tile shape, per-call overhead, how the ring merges ``(out, lse)`` between calls, and
whether its transfers behave like NCCL. The GPU curves come from **single-GPU kernel
benchmarks** (the FlashAttention-2 and -3 papers' figures; each ``Curve.source`` names its
figure), never from a ring measurement; ``ideal`` is the Ring Attention paper's model and
``torch`` the CPU fallback, calibrated by ``ringsim calibrate``.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

from ringsim.checks import check_choice
from ringsim.timer.machine.hardware import Hardware

MERGES = ("none", "torch", "fused")

#: GPU architecture of a hardware preset, by the preset's name prefix.
ARCH_OF_PREFIX = {"a100": "ampere", "h100": "hopper", "h800": "hopper", "h200": "hopper"}
#: Streaming multiprocessors: A100 108, H100/H800/H200 SXM 132 (NVIDIA A100 and H100 whitepapers).
SMS = {"ampere": 108, "hopper": 132}

_FA2_A100 = "FlashAttention-2 paper (arXiv 2307.08691) Fig. 4, A100 80GB SXM4, fwd+bwd"
_FA3_FIG5 = "FlashAttention-3 paper (arXiv 2407.08608) Fig. 5, H100 80GB SXM5, bf16 forward"
_FA3_FIG6 = "FlashAttention-3 paper Fig. 6, H100 80GB SXM5, bf16 backward (non-causal only)"


@dataclass(frozen=True)
class Curve:
    """One family's throughput curve on one architecture and pass (see the module docstring):
    ``fraction`` of the dtype's peak at head dim 128 on long rows, ``keys_half`` keys per row at
    half that, ``masked_speed`` a masked tile's rate over a full one's, ``causal_factor`` the
    rate of a causal call's tiles, ``head_dim`` rate factors by head dim (128 -> 1; log-linear
    in between, clamped outside), ``source`` where the numbers come from."""

    fraction: float
    keys_half: float
    masked_speed: float = 1.0
    causal_factor: float = 1.0
    head_dim: dict[int, float] = field(default_factory=dict)
    source: str = ""

    def head_dim_factor(self, head_dim: int) -> float:
        if not self.head_dim:  # no published head-dim sweep: no head-dim term
            return 1.0
        points = sorted({128: 1.0, **self.head_dim}.items())
        x = math.log2(head_dim)
        if x <= math.log2(points[0][0]):
            return points[0][1] * min(1.0, head_dim / points[0][0])
        for (d0, f0), (d1, f1) in itertools.pairwise(points):
            x0, x1 = math.log2(d0), math.log2(d1)
            if x <= x1:
                return f0 + (f1 - f0) * (x - x0) / (x1 - x0)
        return points[-1][1]


@dataclass(frozen=True)
class KernelFamily:
    """A named kernel and the ring code around it.

    ``curves[(arch, pass)]``; ``tile = (M, N)`` query x key rows of a thread block's tile;
    ``call_overhead_s`` fixed seconds per attention call; ``merge`` how the ring merges each
    step's ``(out, lse)`` and accumulates ``dq, dk, dv`` (``"torch"``: separate PyTorch
    elementwise kernels in fp32, as zhuzilin/ring-flash-attention; ``"fused"``: one pass;
    ``"none"``: free, the ideal model), each elementwise kernel costing ``elementwise_overhead_s``;
    ``gqa_expand_backward``: the backward writes ``dk, dv`` for every query head and sums them
    per kv head afterwards; ``collectives``: transfers behave like NCCL (``collectives.py``:
    protocol efficiency, SMs taken from compute) instead of the ideal link; ``calibrated``: the
    curves were measured on the machine itself (else they are published figures)."""

    name: str
    description: str
    curves: dict[tuple[str, str], Curve]
    tile: tuple[int, int] = (128, 128)
    call_overhead_s: float = 0.0
    merge: str = "none"
    elementwise_overhead_s: float = 0.0
    gqa_expand_backward: bool = False
    collectives: bool = False
    dtypes: tuple[str, ...] = ("bf16", "fp16")
    calibrated: bool = False

    @property
    def ideal(self) -> bool:
        return self.name == "ideal"

    def curve(self, hardware: Hardware, pass_: str) -> Curve:
        """The curve of this family on ``hardware`` (by its architecture) for ``pass_``."""
        if "cpu" in {arch for arch, _ in self.curves}:
            return self.curves[("cpu", pass_)]
        arch = arch_of(hardware)
        if (arch, pass_) not in self.curves:
            known = sorted({a for a, _ in self.curves})
            raise ValueError(
                f"implementation {self.name!r} has no published curve for hardware "
                f"{hardware.name!r} (architecture {arch}); it has: {', '.join(known)}"
            )
        return self.curves[(arch, pass_)]


def arch_of(hardware: Hardware) -> str | None:
    """``"ampere"``/``"hopper"`` for a GPU preset (by name prefix), else ``None``."""
    return ARCH_OF_PREFIX.get(hardware.name.split("-")[0].lower())


def _hd(**factors: float) -> dict[int, float]:
    return {int(k[1:]): v for k, v in factors.items()}


_HOPPER, _AMPERE = 989e12, 312e12  # dense bf16 peaks the benchmark figures divide by
_LAUNCH = 5e-6  # CUDA kernel launch to start, a few microseconds (estimate, not fitted)
_ELEMENTWISE = 3e-6  # one small PyTorch elementwise kernel's fixed cost (estimate)

FA2 = KernelFamily(
    "fa2",
    "FlashAttention-2 (Dao-AILab flash-attn 2.x) called per block from PyTorch, fp32 merges as "
    "zhuzilin/ring-flash-attention; NCCL transfers",
    {
        ("hopper", "forward"): Curve(
            376.5e12 / _HOPPER,
            102,
            0.78,
            0.93,
            _hd(d64=0.869, d256=0.880),
            f"{_FA3_FIG5}, FA2 series: non-causal hd128 309..370 TFLOP/s, causal 191..335",
        ),
        ("hopper", "backward"): Curve(
            329.0e12 / _HOPPER,
            274,
            0.92,
            0.97,
            _hd(d64=0.899, d256=0.880),
            f"{_FA3_FIG6}, FA2 series: hd128 214..322 TFLOP/s; masked terms from the FA2 "
            "repository's H100 fwd+bwd figure (causal hd128 163..328)",
        ),
        ("ampere", "forward"): Curve(
            230e12 / _AMPERE,
            186,
            1.05,
            0.945,
            _hd(d64=0.868),
            "FA2 paper Sec. 4.1: forward 'up to 230 TFLOPs/s' on A100; row curve and masked "
            f"terms from {_FA2_A100} (non-causal hd128 151..203, causal 99..189)",
        ),
        ("ampere", "backward"): Curve(
            196.5e12 / _AMPERE,
            186,
            1.05,
            0.945,
            _hd(d64=0.868),
            f"{_FA2_A100}: fwd+bwd asymptote 205 TFLOP/s with the forward at 230 gives the "
            "backward 196.5 (3.5 / 205 = 1 / 230 + 2.5 / R)",
        ),
    },
    tile=(128, 64),  # flash-attn csrc flash_fwd_launch_template.h, hdim 128 on sm80/sm90
    call_overhead_s=_LAUNCH,
    merge="torch",
    elementwise_overhead_s=_ELEMENTWISE,
    gqa_expand_backward=True,  # flash_api.cpp mha_bwd: dk_expanded, then at::sum_out per kv head
    collectives=True,
)

FA3 = KernelFamily(
    "fa3",
    "FlashAttention-3 (Hopper only), per block from PyTorch, fp32 merges; NCCL transfers",
    {
        ("hopper", "forward"): Curve(
            669.9e12 / _HOPPER,
            211,
            0.84,
            0.975,
            _hd(d64=0.761, d256=1.174),
            f"{_FA3_FIG5}, FA3 series: non-causal hd128 467..648, causal 292..616",
        ),
        ("hopper", "backward"): Curve(
            591.3e12 / _HOPPER,
            428,
            0.84,
            0.975,
            _hd(d64=0.845),
            f"{_FA3_FIG6}, FA3 series: hd128 316..561; masked terms as the forward's "
            "(no causal backward panel)",
        ),
    },
    tile=(128, 128),
    call_overhead_s=_LAUNCH,
    merge="torch",
    elementwise_overhead_s=_ELEMENTWISE,
    collectives=True,
)

CUDNN = KernelFamily(
    "cudnn",
    "cuDNN 9 fused attention (SDPA) on Hopper, per block from PyTorch, fp32 merges; NCCL",
    {
        ("hopper", "forward"): Curve(
            619.6e12 / _HOPPER,
            109,
            0.86,
            0.905,
            _hd(d64=0.694, d256=0.976),
            f"{_FA3_FIG5}, cuDNN series: non-causal hd128 497..595, causal 315..539",
        ),
        ("hopper", "backward"): Curve(
            541.8e12 / _HOPPER,
            376,
            0.86,
            0.905,
            _hd(d64=0.839),
            f"{_FA3_FIG6}, cuDNN series: hd128 305..516; masked terms as the forward's",
        ),
    },
    tile=(128, 128),
    call_overhead_s=_LAUNCH,
    merge="torch",
    elementwise_overhead_s=_ELEMENTWISE,
    collectives=True,
)

TRITON = KernelFamily(
    "triton",
    "this project's Triton block kernel (kernels/blocks/triton_block.py). UNCALIBRATED on GPUs: "
    "its curves are the published Triton flash-attention tutorial kernel's until `ringsim "
    "calibrate` runs on a GPU",
    {
        ("hopper", "forward"): Curve(
            402.3e12 / _HOPPER,
            115,
            0.395,
            1.0,
            _hd(d64=1.02),
            f"{_FA3_FIG5}, Triton series (FA2 Triton tutorial with H100 instructions): "
            "non-causal hd128 323..395, causal 146..378",
        ),
        ("hopper", "backward"): Curve(
            0.874 * 402.3e12 / _HOPPER,
            274,
            0.395,
            1.0,
            _hd(d64=1.02),
            "estimate: no published Triton backward on H100; the forward's rate times FA2's "
            "backward/forward ratio on H100 (329 / 376.5)",
        ),
        ("ampere", "forward"): Curve(
            95.7e12 / _AMPERE,
            120,
            0.53,
            1.0,
            {},
            f"{_FA2_A100}, 'FA Triton' series (non-causal hd128 78..95, causal 50..80); "
            "fwd+bwd only, used for both passes",
        ),
        ("ampere", "backward"): Curve(
            95.7e12 / _AMPERE, 120, 0.53, 1.0, {}, f"{_FA2_A100}, 'FA Triton' series"
        ),
    },
    tile=(128, 64),
    call_overhead_s=_LAUNCH,
    merge="fused",  # the project's ring merges in the kernel's own (out, lse) update
    elementwise_overhead_s=_ELEMENTWISE,
    collectives=True,
)


def torch_family(
    *,
    call_overhead_s: float = 0.0,
    masked_speed: float = 1.0,
    keys_half: float = 0.0,
    source: str = "the hardware profile's own terms",
) -> KernelFamily:
    """The CPU torch fallback (``kernels/blocks/torch_block.py``): its rate is the hardware's
    (calibrated) FLOP rate, its curve the calibration's fit (``kernels.calibration.profile``)."""
    curve = Curve(1.0, keys_half, masked_speed, 1.0, {}, source)
    return KernelFamily(
        "torch",
        "the CPU torch block (calibrated by `ringsim calibrate`)",
        {("cpu", "forward"): curve, ("cpu", "backward"): curve},
        tile=(128, 128),
        call_overhead_s=call_overhead_s,
        dtypes=("bf16", "fp16", "fp32"),
        calibrated=True,
    )


IDEAL = KernelFamily(
    "ideal",
    "the Ring Attention paper's model: peak FLOP/s, no overhead, perfect overlap",
    {},
    dtypes=("bf16", "fp16", "fp32"),
)

KERNELS: dict[str, KernelFamily] = {
    f.name: f for f in (IDEAL, FA2, FA3, CUDNN, TRITON, torch_family())
}


def for_hardware(family: KernelFamily, hardware: Hardware) -> KernelFamily:
    """The registry's ``"torch"`` family takes its terms from the hardware profile that
    ``ringsim calibrate`` wrote (``block_overhead_s``, ``masked_speed``); others are unchanged."""
    if family is not KERNELS["torch"]:
        return family
    return torch_family(
        call_overhead_s=hardware.block_overhead_s,
        masked_speed=hardware.masked_speed,
        source=f"calibrated profile {hardware.name!r}: its rate, block overhead, masked speed",
    )


def get_family(implementation: str | KernelFamily) -> KernelFamily:
    """The family called ``implementation`` (a ``KernelFamily`` is returned as is)."""
    if isinstance(implementation, KernelFamily):
        return implementation
    return KERNELS[check_choice("implementation", implementation, tuple(KERNELS))]
