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
The families and their curves are defined in ``ringsim.timer.machine.families`` (and importable
from here).

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

import math
from dataclasses import dataclass

import numpy as np

from ringsim.checks import check_choice, check_instance, check_positive_int, check_real
from ringsim.timer.cost import attention_flops
from ringsim.timer.machine.families import (  # the families, importable from here too
    ARCH_OF_PREFIX,
    CUDNN,
    FA2,
    FA3,
    IDEAL,
    KERNELS,
    MERGES,
    SMS,
    TRITON,
    Curve,
    KernelFamily,
    arch_of,
    for_hardware,
    get_family,
    torch_family,
)
from ringsim.timer.machine.hardware import Hardware, check_dtype

__all__ = [  # the kernel families live in ringsim.timer.machine.families
    "ARCH_OF_PREFIX",
    "BENCHMARK_CTAS",
    "CALL_PASSES",
    "CUDNN",
    "FA2",
    "FA3",
    "HBM_FRACTION",
    "IDEAL",
    "KERNELS",
    "MASKS",
    "MERGES",
    "SMS",
    "TRITON",
    "Curve",
    "KernelFamily",
    "TileWork",
    "arch_of",
    "attention_call_seconds",
    "call_bytes",
    "for_hardware",
    "get_family",
    "kind_rate",
    "tile_work",
    "torch_family",
]

MASKS = ("full", "causal-diagonal", "offset-causal", "zigzag-half", "documents")
CALL_PASSES = ("forward", "backward")

#: Achieved fraction of peak HBM bandwidth for streaming kernels (estimate: STREAM-like copies
#: reach ~90% of the datasheet rate on A100/H100; not fitted to any ring measurement).
HBM_FRACTION = 0.9
#: The FA benchmarks' thread blocks: 16K tokens x 16 heads (head dim 128) / 128-row tiles.
BENCHMARK_CTAS = 16384 // 128 * 16


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
    check_choice("pass", pass_, CALL_PASSES)
    check_choice("mask", mask, MASKS)
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
    check_instance("hardware", hardware, Hardware, "a Hardware (ringsim.get_hardware(name))")
    family = for_hardware(get_family(family), hardware)
    _check_call(family, q_tokens, k_tokens, heads, kv_heads, head_dim, batch, dtype, pass_, mask)
    rate = hardware.flops_for(dtype) if peak is None else check_real("peak", peak, positive=True)
    if visible is not None and not 0.0 <= check_real("visible", visible) <= 1.0:
        raise ValueError(f"visible must be a fraction in [0, 1], got {visible!r}")
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
