"""Named attention kernel families and their throughput curves
(``ringsim.timer.machine.kernel_model`` times a call with them).

A ``KernelFamily`` is a kernel and the ring code around it: its ``Curve`` per (architecture,
pass), tile shape, per-call overhead, how the ring merges ``(out, lse)`` between calls, and
whether its transfers behave like NCCL. The GPU curves come from **single-GPU kernel
benchmarks** (the FlashAttention-2 and -3 papers' figures; each ``Curve.source`` names its
figure), never from a ring measurement; ``ideal`` is the Ring Attention paper's model and
``torch`` the CPU fallback, calibrated by ``ringsim calibrate``.

A family says where it runs and what it models, and the rest of the code asks it: it runs on a
device whose chip (``Hardware.arch``) it has a curve for (``runs_on``, ``check_runs_on``: the
ideal model runs anywhere, the CPU torch block only on a CPU), and it is the paper's model
(``ideal``), a kernel timed from its published curves, or a block calibrated on the machine
itself whose terms are the hardware profile's (``calibrated``).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

from ringsim.checks import check_choice
from ringsim.timer.machine.arch import CPU
from ringsim.timer.machine.hardware import Hardware
from ringsim.timer.machine.ranges import Range, middle

MERGES = ("none", "torch", "fused")
LOOPS = ("keys", "queries")

_FA2_A100 = "FlashAttention-2 paper (arXiv 2307.08691) Fig. 4, A100 80GB SXM4, fwd+bwd"
_FA3_FIG5 = "FlashAttention-3 paper (arXiv 2407.08608) Fig. 5, H100 80GB SXM5, bf16 forward"
_FA3_FIG6 = "FlashAttention-3 paper Fig. 6, H100 80GB SXM5, bf16 backward (non-causal only)"
_FA2_ADA = (
    "apache/tvm @ bd6f957 tl_doc/flash_perf.md: Dao-AILab flash_attn on an RTX 4090 (AD102, "
    "sm_89), CUDA 12.2, seq 2K, fp16 inputs with fp32 accumulation (the 'Flash_attn' column), "
    "over the 4090's fp32-accumulate dense peak, 165.2 TFLOP/s (NVIDIA Ada GPU architecture "
    "whitepaper); the L20 (the same AD102 SMs, 119.5 TFLOP/s) runs one kernel at the 4090's "
    "share of peak: FFPA L1 (fp32 accumulation) 99 vs 136 TFLOP/s, 0.73 against peaks 0.72 "
    "(xlite-dev/ffpa-attn @ 0080933 README, D = 320). One length only: no short-row term "
    "(keys_half 0: the 2K rate as the asymptote), the causal call's whole loss in causal_factor; "
    "the 4090 ran above its rated 2.52 GHz boost, hence fractions above 1"
)
_ADA_PEAK = 165.2e12


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
class Launch:
    """How a kernel runs one pass on one architecture: ``tile = (M, N)`` the queries x keys a
    thread block (CTA) handles per iteration; ``loop`` what a CTA loops over (``"keys"``: one
    CTA per query tile, as FA2's forward; ``"queries"``: one per key tile, as FA2's backward);
    ``ctas_per_sm`` how many CTAs an SM holds at once (its shared memory, registers and warps
    allow); ``longest_first``: the kernel hands out the longest CTAs first (a persistent
    scheduler), else the hardware dispatches them in grid order (the looped index fastest,
    then batch, then head); ``split_kv``: a call with too few CTAs to fill the GPU splits its
    keys among more CTAs (FA2's ``num_splits_heuristic``, ``split_count``); ``source`` where
    the numbers come from."""

    tile: tuple[int, int]
    loop: str = "keys"
    ctas_per_sm: int = 1
    longest_first: bool = False
    split_kv: bool = False
    source: str = ""

    def __post_init__(self) -> None:
        if self.loop not in LOOPS:
            raise ValueError(f"loop must be one of {', '.join(LOOPS)}, got {self.loop!r}")
        if isinstance(self.ctas_per_sm, bool) or not isinstance(self.ctas_per_sm, int):
            raise ValueError(f"ctas_per_sm must be a positive integer, got {self.ctas_per_sm!r}")
        if self.ctas_per_sm < 1:
            raise ValueError(f"ctas_per_sm must be a positive integer, got {self.ctas_per_sm!r}")


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
    curves were measured on the machine itself (else they are published figures).

    How the calls run on the GPU: ``launches[(arch, pass)]`` the kernel's ``Launch`` (tile,
    CTAs per SM, dispatch order; without one, the family's ``tile``, one CTA per SM, grid
    order; ``wave_tail=False`` leaves occupancy and the tail out, as the waterfall's first
    steps do; ``wave_tail_bound`` runs every grid at the best efficiency a schedule can reach,
    ``max(1, lone_cta_speed)``, against the benchmark's own: no call is faster, so a run timed
    so is a lower bound of the run, which a planner uses to skip the schedule, never a
    prediction); ``lone_cta_speed`` the rate of a CTA alone on an SM that could hold
    ``ctas_per_sm`` of them, relative to the SM's rate when full (a ``Range``). The host's side
    of a Python ring loop: ``host_call_s`` seconds per PyTorch call (a ``Range``; ``None``: no
    host model), the calls per step counted in ``ringsim.timer.engine.ring_steps``.
    ``window_masks_every_tile``: the passes whose sliding-window calls mask every tile they
    visit, not only those the window's edges cut (``kernel_model``'s ``"window"`` mask)."""

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
    launches: dict[tuple[str, str], Launch] = field(default_factory=dict)
    wave_tail: bool = True
    wave_tail_bound: bool = False
    lone_cta_speed: Range | None = None
    host_call_s: Range | None = None
    grad_wire_dtype: str | None = None
    window_masks_every_tile: tuple[str, ...] = ()

    def __hash__(self) -> int:  # the generated hash would hash the curves dict
        return hash((self.name, self.tile, self.call_overhead_s, self.merge))

    @property
    def ideal(self) -> bool:
        """The Ring Attention paper's model: FLOPs at the peak rate, nothing else."""
        return self.name == "ideal"

    @property
    def archs(self) -> tuple[str, ...]:
        """The architectures this family has curves for (``Arch.name``)."""
        return tuple(sorted({arch for arch, _ in self.curves}))

    def runs_on(self, hardware: Hardware) -> bool:
        """Whether this family can time a call on ``hardware``: the ideal model anywhere, a
        real one where it has a curve for the device's chip (``hardware.arch``)."""
        if self.ideal:
            return True
        return hardware.arch is not None and hardware.arch.name in self.archs

    def check_runs_on(self, hardware: Hardware, *, label: str = "") -> None:
        """``ValueError`` naming this family (as ``label``, e.g. a flag), the device's chip and
        the families that do run there, unless ``runs_on(hardware)``."""
        if self.runs_on(hardware):
            return
        arch = "unknown" if hardware.arch is None else hardware.arch.name
        there = [name for name, f in KERNELS.items() if f.runs_on(hardware)]
        what = "calibrated block" if self.calibrated else "published curve"
        label = label or f"implementation {self.name!r}"
        raise ValueError(
            f"{label} does not run on hardware {hardware.name!r}: it has no {what} for its "
            f"architecture ({arch}; it has: {', '.join(self.archs)}); implementations that run "
            f"there: {', '.join(there)}"
        )

    def launch(self, hardware: Hardware, pass_: str) -> Launch:
        """The ``Launch`` of this family's kernel for ``pass_`` on ``hardware``."""
        arch = None if hardware.arch is None else hardware.arch.name
        own = self.launches.get((arch, pass_))
        return own if own is not None else Launch(self.tile)

    def curve(self, hardware: Hardware, pass_: str) -> Curve:
        """The curve of this family on ``hardware`` (by its chip) for ``pass_``."""
        self.check_runs_on(hardware)
        return self.curves[(hardware.arch.name, pass_)]


def split_count(ctas: int, sms: int, key_tiles: int, max_splits: int = 128) -> int:
    """How many parts FA2 splits a forward call's keys into (``flash_api.cpp``
    ``num_splits_heuristic``): none (1) when its ``ctas`` (64-row query tiles x heads x batch)
    fill 80% of ``2 x sms`` slots; else the fewest splits whose wave efficiency
    ``n / ceil(n)`` (``n = ctas x splits / (2 sms)`` waves) is within 85% of the best. Only an
    *eligible* count competes, one that changes the key tiles per split (12 splits of 64 tiles
    are 11 of 6): FA2 scores the others 0, so the best is among the eligible ones (Dao-AILab/
    flash-attention ``csrc/flash_attn/flash_api.cpp`` @ 0251105, ``num_splits_heuristic``)."""
    slots = 2 * sms
    if ctas >= 0.8 * slots:
        return 1
    top = min(max_splits, slots, key_tiles)
    eligible = [
        n for n in range(1, top + 1) if n == 1 or -(-key_tiles // n) != -(-key_tiles // (n - 1))
    ]
    eff = {n: (ctas * n / slots) / math.ceil(ctas * n / slots) for n in eligible}
    best = max(eff.values())
    return next((n for n in eligible if eff[n] >= 0.85 * best), 1)


def _hd(**factors: float) -> dict[int, float]:
    return {int(k[1:]): v for k, v in factors.items()}


_HOPPER, _AMPERE = 989e12, 312e12  # dense bf16 peaks the benchmark figures divide by
_LAUNCH = 5e-6  # CUDA kernel launch to start, a few microseconds (estimate, not fitted)
_ELEMENTWISE = 3e-6  # one small PyTorch elementwise kernel's fixed cost (estimate)

_FA2_REPO = "Dao-AILab/flash-attention csrc/flash_attn/src"
#: FA2 hdim 128 on sm80/sm90 (A100, H100/H800), the traits every head dim is timed with
FA2_FORWARD = Launch(
    (128, 64),
    "keys",
    2,
    source=f"{_FA2_REPO}/flash_fwd_launch_template.h run_mha_fwd_hdim128 (not sm86/89): "
    "Flash_fwd_kernel_traits<128, 128, 64, 4 warps>; kernel_traits.h kSmemSize = Q 128x128 + "
    "K, V 2 x 64x128 bf16 = 64 KiB; 255 registers a thread (ptxas, flash-attention#1630) x "
    "128 threads = 32K of an SM's 64K registers: 2 CTAs per SM; grid (m blocks, batch, heads); "
    "flash_api.cpp set_params_splitkv: a call of fewer than 0.8 x 2 x SMs CTAs (64-row "
    "tiles) splits its keys",
    split_kv=True,
)
FA2_BACKWARD = Launch(
    (64, 128),
    "queries",
    1,
    source=f"{_FA2_REPO}/flash_bwd_launch_template.h run_mha_bwd_hdim128 with >= 144 KiB of "
    "shared memory per block (A100, H100): Flash_bwd_kernel_traits<128, 64, 128, 8 warps>; "
    "kSmemSize1colblock = 3 Q/dO tiles 64x128 + K, V 128x128 + dS, P 64x128 bf16 = 144 KiB: "
    "1 CTA per SM; grid (n blocks, batch, heads), each CTA loops over the query tiles",
)
LONE_CTA_SPEED = Range(
    0.5,
    middle(0.5, 1.0),
    1.0,
    "low",
    "estimate, bounds: a CTA alone on an SM built to hold 2 runs at least at its share of a "
    "full SM (0.5: nothing gained from the idle half) and at most at the whole SM's rate "
    "(1.0); FA2 picks its tiles for 2 CTAs per SM (flash_fwd_launch_template.h comments), so "
    "one alone hides less latency",
)
HOST_CALL_S = Range(
    5e-6,
    middle(5e-6, 25e-6),
    25e-6,
    "high",
    "host time per PyTorch call, from Python through the dispatcher to cudaLaunchKernel: "
    "~5-25 us (J. Lin, 'From PyTorch op to kernel launch', jiahuanglin.xyz GPU-kernel lesson "
    "18); this project's torch ring on tiny tensors spends ~350 us per forward step of ~17 "
    "calls on a loaded 2-core VM, ~20 us a call (benchmarks/bench_host_overhead.py)",
)

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
        ("ada", "forward"): Curve(
            169.28e12 / _ADA_PEAK,
            0.0,
            1.0,
            151.19 / 169.28,
            _hd(d32=159.79 / 169.28, d64=168.91 / 169.28, d256=156.15 / 169.28),
            f"{_FA2_ADA}: forward hd128 169.28 non-causal, 151.19 causal",
        ),
        ("ada", "backward"): Curve(
            124.57e12 / _ADA_PEAK,
            0.0,
            1.0,
            99.23 / 124.57,
            _hd(d32=115.12 / 124.57, d64=124.81 / 124.57),
            f"{_FA2_ADA}: backward hd128 124.57 non-causal, 99.23 causal",
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
    launches={
        (arch, pass_): launch
        for arch in ("ampere", "hopper")
        for pass_, launch in (("forward", FA2_FORWARD), ("backward", FA2_BACKWARD))
    },
    lone_cta_speed=LONE_CTA_SPEED,
    host_call_s=HOST_CALL_S,
    # zhuzilin/ring-flash-attention @8996282: dk, dv accumulate in fp32 and travel so
    # (zigzag/stripe/ring backward: dk = dk_buffer.to(float32); d_kv_comm.send_recv_kv(dk, dv))
    grad_wire_dtype="fp32",
    # Dao-AILab/flash-attention @0251105a: the forward's unmasked loop still applies the mask
    # under a window (csrc/flash_attn/src/mask.h: Need_masking = ... || Is_local); the
    # backward masks only the tiles the window's edges cut (flash_bwd_kernel.h, Is_local)
    window_masks_every_tile=("forward",),
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
    host_call_s=HOST_CALL_S,
    grad_wire_dtype="fp32",
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
    host_call_s=HOST_CALL_S,
    grad_wire_dtype="fp32",
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
    host_call_s=HOST_CALL_S,
    grad_wire_dtype="fp32",  # kernels/distributed/ring.py: fp32 dk/dv accumulators travel
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
        {(CPU.name, "forward"): curve, (CPU.name, "backward"): curve},
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
