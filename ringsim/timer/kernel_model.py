"""The time of one attention call on a real kernel, by shape, mask, tile and kernel family.

The ideal timer charges ``FLOPs / peak``. A real kernel pays more, in four ways this module
models (``attention_call_seconds``):

* a **fixed cost per call** (``KernelFamily.call_overhead_s``: launch, allocation);
* an **achieved rate** below peak that falls for **short rows** and **small head dims**. A flash
  kernel gives each (query tile, head) to one thread block that loops over the key tiles;
  loading ``Q``, the final rescale and writing ``O`` are a fixed cost per query tile, worth
  ``keys_half`` keys of work. With ``n`` visible keys per row the rate is
  ``fraction * peak * head_dim_factor * n / (n + keys_half)`` (a saturating curve: half the
  asymptote at ``n = keys_half``). Few thread blocks (a short call on few heads) leave SMs idle:
  the rate is scaled by the wave occupancy ``ctas / (ceil(ctas / SMs) SMs)`` relative to the
  benchmark's own;
* **masked tiles** are slower than full ones (``masked_speed``: the mask is built and applied
  per element), and a causal call loses ``causal_factor`` to the uneven work of its rows;
* a **memory floor**: the call takes at least its bytes (``Q, K, V, O``, and in backward
  ``dO, dQ, dK, dV`` and the fp32 ``dQ`` accumulator) over the achieved HBM bandwidth.

The parameters of each family come from **single-GPU kernel benchmarks** (the FlashAttention-2
and -3 papers' figures; each ``Curve.source`` names its figure), fitted to their sequence-length
sweeps at ``batch x seqlen = 16K`` tokens: the non-causal sweep gives ``fraction`` and
``keys_half``, the causal sweep ``masked_speed`` and ``causal_factor``. Never to a ring
measurement: those are what ``ringsim validate`` tests. ``ideal`` is today's timer: peak rate,
no overhead (``attention_flops / rate`` exactly).

Mask names (``MASKS``), for a call of ``q`` query rows against ``k`` keys:

* ``"full"``: every pair (a ring's off-diagonal block);
* ``"causal-diagonal"``: row ``r`` sees keys ``<= r + (k - q)`` (bottom-right aligned, as
  flash-attn; ``q == k`` is the ring's diagonal block);
* ``"offset-causal"``: row ``r`` sees keys ``< r + (k - q)``, the diagonal excluded (a striped
  ring's blocks from later hosts);
* ``"zigzag-half"``: a zigzag ring's off-diagonal step, which real implementations run as one
  *unmasked* half-block call (``c x c/2`` or ``c/2 x c``): the tiles of ``"full"``;
* ``"documents"``: packed documents; pass ``visible`` (the fraction of pairs computed): the
  kernel visits ``ceil(visible x tiles)`` tiles, all of them masked (the boundary is unknown).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np

from ringsim._checks import check_positive_int
from ringsim.timer.cost import attention_flops
from ringsim.timer.hardware import Hardware, check_dtype

MASKS = ("full", "causal-diagonal", "offset-causal", "zigzag-half", "documents")
CALL_PASSES = ("forward", "backward")
MERGES = ("none", "torch", "fused")

#: GPU architecture of a hardware preset, by the preset's name prefix.
ARCH_OF_PREFIX = {"a100": "ampere", "h100": "hopper", "h800": "hopper", "h200": "hopper"}
#: Streaming multiprocessors: A100 108, H100/H800/H200 SXM 132 (NVIDIA A100 and H100 whitepapers).
SMS = {"ampere": 108, "hopper": 132}
#: Achieved fraction of peak HBM bandwidth for streaming kernels (estimate: STREAM-like copies
#: reach ~90% of the datasheet rate on A100/H100; not fitted to any ring measurement).
HBM_FRACTION = 0.9
#: The FA benchmarks' thread blocks: 16K tokens x 16 heads (head dim 128) / 128-row tiles.
BENCHMARK_CTAS = 16384 // 128 * 16

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
    "this project's Triton block kernel (kernels/triton_block.py). UNCALIBRATED on GPUs: its "
    "curves are the published Triton flash-attention tutorial kernel's until `ringsim "
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
    """The CPU torch fallback (``kernels/torch_block.py``): its rate is the hardware's
    (calibrated) FLOP rate, its curve the calibration's fit (``kernels.profile``)."""
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
    if implementation not in KERNELS:
        raise ValueError(
            f"implementation must be one of {', '.join(KERNELS)}, got {implementation!r}"
        )
    return KERNELS[implementation]


@dataclass(frozen=True)
class TileWork:
    """The tiles one call visits: ``full`` and ``masked`` ones, over ``rows`` query tiles."""

    full: float
    masked: float
    rows: int


def tile_work(q: int, k: int, mask: str, tile: tuple[int, int], visible: float | None) -> TileWork:
    """Tiles of an ``(M, N)``-tiled call of ``q`` queries on ``k`` keys under ``mask``."""
    M, N = tile
    nq, nk = -(-q // M), -(-k // N)
    if mask in ("full", "zigzag-half"):
        return TileWork(float(nq * nk), 0.0, nq)
    if mask == "documents":
        if visible is None or not 0.0 <= visible <= 1.0:
            raise ValueError(f"visible must be a fraction in [0, 1] for documents, got {visible!r}")
        return TileWork(0.0, float(math.ceil(visible * nq * nk)), nq)
    shift = k - q - (1 if mask == "offset-causal" else 0)  # row r sees keys <= r + shift
    first = np.arange(nq, dtype=np.int64) * M
    last = np.minimum(first + M, q) - 1
    seen_by_all = np.clip((first + shift + 1) // N, 0, nk)
    seen_by_last = np.clip(-(-(last + shift + 1) // N), 0, nk)
    full = int(seen_by_all.sum())
    return TileWork(float(full), float(seen_by_last.sum() - full), nq)


def _check_call(family, q_tokens, k_tokens, heads, kv_heads, head_dim, batch, dtype, pass_, mask):
    for name, value in (
        ("q_tokens", q_tokens), ("k_tokens", k_tokens), ("heads", heads),
        ("kv_heads", kv_heads), ("head_dim", head_dim), ("batch", batch),
    ):  # fmt: skip
        check_positive_int(name, value)
    check_dtype(dtype)
    if pass_ not in CALL_PASSES:
        raise ValueError(f"pass must be one of {', '.join(CALL_PASSES)}, got {pass_!r}")
    if mask not in MASKS:
        raise ValueError(f"mask must be one of {', '.join(MASKS)}, got {mask!r}")
    if dtype not in family.dtypes:
        raise ValueError(
            f"dtype {dtype!r} is not run by implementation {family.name!r} "
            f"(it runs: {', '.join(family.dtypes)})"
        )


def call_bytes(q: int, k: int, heads: int, kv_heads: int, head_dim: int, dtype: str,
               pass_: str, batch: int = 1) -> float:  # fmt: skip
    """HBM bytes one call moves at least: forward reads ``Q, K, V`` and writes ``O`` and the
    fp32 ``lse``; backward reads ``Q, K, V, O, dO, lse``, writes ``dQ, dK, dV`` and round-trips
    the fp32 ``dQ`` accumulator."""
    b = 2 if dtype in ("bf16", "fp16") else 4
    q_el, kv_el = batch * q * heads * head_dim, batch * k * kv_heads * head_dim
    lse = 4.0 * batch * q * heads
    if pass_ == "forward":
        return b * (2 * q_el + 2 * kv_el) + lse
    return b * (4 * q_el + 4 * kv_el) + lse + 8.0 * q_el


def attention_call_seconds(
    family: str | KernelFamily,
    hardware: Hardware,
    *,
    q_tokens: int,
    k_tokens: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    dtype: str,
    pass_: str,
    mask: str,
    tile: tuple[int, int] | None = None,
    batch: int = 1,
    visible: float | None = None,
    peak: float | None = None,
) -> float:
    """Seconds of one attention call (see the module docstring for the terms and masks).

    ``tile=(M, N)`` overrides the family's tile; ``visible`` is the fraction of pairs computed
    (``"documents"`` needs it; for ``"ideal"`` it replaces the mask's own fraction); ``peak``
    overrides the hardware's FLOP/s for ``dtype`` (a per-kind rate, e.g. TF32 attention).
    ``"ideal"`` returns ``attention_flops(q, k, heads, head_dim, work=visible) / peak``."""
    family = for_hardware(get_family(family), hardware)
    _check_call(family, q_tokens, k_tokens, heads, kv_heads, head_dim, batch, dtype, pass_, mask)
    rate = hardware.flops_for(dtype) if peak is None else float(peak)
    if family.ideal:
        if visible is None:
            visible = _visible_fraction(q_tokens, k_tokens, mask)
        flops = attention_flops(q_tokens, k_tokens, heads, head_dim, work=visible, pass_=pass_,
                                batch=batch)  # fmt: skip
        return flops / rate
    tile = family.tile if tile is None else _check_tile(tile)
    curve = family.curve(hardware, pass_)
    if "cpu" in {arch for arch, _ in family.curves}:  # HostClock.block's calibrated rule
        if visible is None:
            visible = _visible_fraction(q_tokens, k_tokens, mask)
        flops = attention_flops(q_tokens, k_tokens, heads, head_dim, work=visible, pass_=pass_,
                                batch=batch)  # fmt: skip
        masked = curve.masked_speed if mask != "full" and mask != "zigzag-half" else 1.0
        return family.call_overhead_s + flops / (rate * masked)
    work = tile_work(q_tokens, k_tokens, mask, tile, visible)
    M, N = tile
    tile_flops = attention_flops(M, N, heads, head_dim, pass_=pass_, batch=batch)
    tile_rate = rate * curve.fraction * curve.head_dim_factor(head_dim)
    if mask in ("causal-diagonal", "offset-causal", "documents"):
        tile_rate *= curve.causal_factor
    tiles = work.full + work.masked / curve.masked_speed + work.rows * curve.keys_half / N
    arch = arch_of(hardware)
    if arch is not None:  # wave quantisation, relative to the benchmarks' own
        ctas = (work.rows if pass_ == "forward" else -(-k_tokens // N)) * heads * batch
        tile_rate *= _occupancy(ctas, SMS[arch]) / _occupancy(BENCHMARK_CTAS, SMS[arch])
    compute = tiles * tile_flops / tile_rate if work.full + work.masked else 0.0
    floor = 0.0
    if hardware.memory_bandwidth > 0:
        moved = call_bytes(q_tokens, k_tokens, heads, kv_heads, head_dim, dtype, pass_, batch)
        floor = moved / (hardware.memory_bandwidth * HBM_FRACTION)
    return family.call_overhead_s + max(compute, floor)


def _occupancy(ctas: int, sms: int) -> float:
    return min(1.0, ctas / (math.ceil(ctas / sms) * sms))


def _check_tile(tile: object) -> tuple[int, int]:
    if not isinstance(tile, tuple) or len(tile) != 2:
        raise ValueError(f"tile must be a pair (M, N) of positive integers, got {tile!r}")
    return check_positive_int("tile M", tile[0]), check_positive_int("tile N", tile[1])


def _visible_fraction(q: int, k: int, mask: str) -> float:
    """Exact fraction of the ``q x k`` pairs a mask leaves visible."""
    if mask in ("full", "zigzag-half"):
        return 1.0
    if mask == "documents":
        raise ValueError("visible must be given for mask 'documents'")
    shift = k - q - (1 if mask == "offset-causal" else 0)
    seen = np.clip(np.arange(q, dtype=np.int64) + shift + 1, 0, k).sum()
    return float(seen) / (q * k)


def kind_rate(hardware: Hardware, value: str | float, dtype: str = "bf16") -> float:
    """A per-kind FLOP rate: a number (FLOP/s) or a precision name relative to the hardware's
    ``dtype`` rate: ``"tf32"`` half of it (A100/H100 datasheets: dense TF32 = bf16 / 2),
    ``"fp8"`` twice it (H100 datasheet; refused on Ampere, which has no fp8 tensor cores),
    ``"bf16"``/``"fp16"``/``"fp32"`` the hardware's own rate for that dtype."""
    if isinstance(value, str):
        if value in ("bf16", "fp16", "fp32"):
            return hardware.flops_for(value)
        if value == "tf32":
            return hardware.flops_for(dtype) / 2.0
        if value == "fp8":
            if arch_of(hardware) == "ampere":
                raise ValueError(f"rate 'fp8' needs fp8 tensor cores; {hardware.name} has none")
            return hardware.flops_for(dtype) * 2.0
        known = "bf16, fp16, fp32, tf32, fp8"
        raise ValueError(f"rate must be FLOP/s or one of {known}, got {value!r}")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"rate must be a positive number of FLOP/s, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"rate must be finite, got {value!r}")
    return float(value)


WATERFALL_TERMS = (
    "ideal ring",
    "+ kernel efficiency",
    "+ per-step merge",
    "+ collective contention",
    "+ launch overhead",
)


def waterfall(config) -> list[tuple[str, float]]:
    """The makespan of ``config`` (a ``RingConfig`` with a real ``implementation``) going from
    the ideal ring to the real one term by term (``WATERFALL_TERMS``), each by running the
    timer: see ``ringsim.timer.ring_steps.waterfall``."""
    from ringsim.timer.ring_steps import waterfall as run_waterfall  # it imports this module

    return run_waterfall(config)
