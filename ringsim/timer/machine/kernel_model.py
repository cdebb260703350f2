"""The time of one attention call on a real kernel, by shape, mask, tile and kernel family.

The ideal timer charges ``FLOPs / peak``. A real kernel pays more, in four ways this module
models (``attention_call_seconds``):

* a **fixed cost per call** (``KernelFamily.call_overhead_s``: launch, allocation);
* an **achieved rate** below peak that falls for **short rows** and **small head dims**. A flash
  kernel gives each (query tile, head) to one thread block (CTA) that loops over the key tiles
  (FA2's forward; its backward gives each key tile to a CTA that loops over the query tiles:
  the family's ``Launch``); loading the CTA's own tile, the final rescale and writing the
  result are a fixed cost per CTA, worth ``keys_half`` rows of the looped dimension. With
  ``n`` visible keys per row the rate is ``fraction * peak * head_dim_factor * n / (n +
  keys_half)`` (a saturating curve: half the asymptote at ``n = keys_half``);
* **occupancy and the wave tail**: the CTAs run ``ctas_per_sm`` at a time on each SM
  (``Launch``: from the kernel's tile, warps, shared memory and registers), handed out in grid
  order as slots free up (``cta_makespan``: an SM shares its rate among its resident CTAs; one
  alone runs at ``lone_cta_speed`` of the full SM's rate). A causal call's CTAs carry 1..n
  tiles and the longest ones of the last head start last; a short call on few heads fills
  part of one wave. The efficiency ``work / (slots x makespan)`` scales the rate relative to
  the same efficiency of the benchmark the curve was fitted to (16K tokens, 16 heads, at the
  call's query length), so a call shaped like the benchmark keeps the benchmark's rate;
* **masked tiles** are slower than full ones (``masked_speed``: the mask is built and applied
  per element), and a causal call loses ``causal_factor`` to the uneven work of its rows. A
  causal forward call whose lengths are not multiples of the tile leaves FA2's even-M/N path:
  it masks one more key tile per query tile (``flash_fwd_kernel.h``: ``n_masking_steps =
  ceil(M / N) + 1``);
* a **memory floor**: the call takes at least its bytes (``Q, K, V, O``, and in backward
  ``dO, dQ, dK, dV`` and the fp32 ``dQ`` accumulator) over the achieved HBM bandwidth.

The parameters of each family come from **single-GPU kernel benchmarks** (the FlashAttention-2
and -3 papers' figures; each ``Curve.source`` names its figure), fitted to their sequence-length
sweeps at ``batch x seqlen = 16K`` tokens: the non-causal sweep gives ``fraction`` and
``keys_half``, the causal sweep ``masked_speed`` and ``causal_factor``. Never to a ring
measurement: those are what ``ringsim validate`` tests. ``ideal`` is today's timer: peak rate,
no overhead (``attention_flops / rate`` exactly).
The families and their curves are defined in ``ringsim.timer.machine.families``.

Mask names (``MASKS``), for a call of ``q`` query rows against ``k`` keys:

* ``"full"``: every pair (a ring's off-diagonal block);
* ``"causal-diagonal"``: row ``r`` sees keys ``<= r + (k - q)`` (bottom-right aligned, as
  flash-attn; ``q == k`` is the ring's diagonal block);
* ``"offset-causal"``: row ``r`` sees keys ``< r + (k - q)``, the diagonal excluded (a striped
  ring's blocks from later hosts);
* ``"zigzag-half"``: a zigzag ring's off-diagonal step, which real implementations run as one
  *unmasked* half-block call (``c x c/2`` or ``c/2 x c``): the tiles of ``"full"``;
* ``"documents"``: packed documents; pass ``visible`` (the fraction of pairs computed): the
  kernel visits ``ceil(visible x tiles)`` tiles, all of them masked (the boundary is unknown);
* ``"window"``: a sliding window's band; pass ``band = (lo, hi)``: row ``r`` sees keys
  ``r + lo`` to ``r + hi`` (``ringsim.layouts.band_call``). A flash kernel visits only the
  key tiles the band reaches: FA2's forward loops ``n_block`` from ``n_block_max - 1`` down to
  ``n_block_min``, ``n_block_min = max(0, (m_block M + seqlen_k - seqlen_q - left) / N)``,
  ``n_block_max = min(ceil(seqlen_k / N), ceil(((m_block + 1) M + seqlen_k - seqlen_q +
  right) / N))`` (Dao-AILab/flash-attention ``csrc/flash_attn/src/flash_fwd_kernel.h`` at
  0251105a; ``lo = seqlen_k - seqlen_q - left``, ``hi = seqlen_k - seqlen_q + right``); its
  backward loops ``m_block`` the same way over a key tile's query tiles
  (``flash_bwd_kernel.h``), and FA3 computes both bounds alike (``hopper/block.h``,
  ``get_n_block_min_max``, ``get_m_block_min_max``). Which visited tiles pay the mask is the
  family's (``KernelFamily.window_masks_every_tile``): FA2's forward applies the local mask
  to every tile it visits (``mask.h``: ``Need_masking`` holds whenever ``Is_local``), its
  backward and FA3 only to the tiles the band's edges cut. A window call is not a causal one
  (no ``causal_factor``: its rows carry about equal work).
"""

from __future__ import annotations

import functools
import heapq
import math
from dataclasses import dataclass

import numpy as np

from ringsim.checks import check_choice, check_instance, check_positive_int, check_real
from ringsim.schedule import RING_PASSES, Pass
from ringsim.timer.cost import DTYPE_BYTES, AttentionShape, attention_flops
from ringsim.timer.machine.families import (
    Curve,
    KernelFamily,
    Launch,
    for_hardware,
    get_family,
    split_count,
)
from ringsim.timer.machine.hardware import Hardware
from ringsim.timer.machine.ranges import ENDS

__all__ = [
    "BENCHMARK_TOKENS",
    "HBM_FRACTION",
    "MASKS",
    "TileWork",
    "attention_call_seconds",
    "call_bytes",
    "call_rate_bound",
    "call_seconds",
    "cta_efficiency",
    "cta_lengths",
    "cta_makespan",
    "decode_call_seconds",
    "kind_rate",
    "tile_work",
    "visible_fraction",
]

MASKS = ("full", "causal-diagonal", "offset-causal", "zigzag-half", "documents", "window")

#: Achieved fraction of peak HBM bandwidth for streaming kernels (estimate: STREAM-like copies
#: reach ~90% of the datasheet rate on A100/H100; not fitted to any ring measurement).
HBM_FRACTION = 0.9
#: The FA papers' benchmarks: batch x seqlen = 16K tokens, hidden 2048 (16 heads of 128).
BENCHMARK_TOKENS, BENCHMARK_HIDDEN = 16384, 2048
#: Above this many CTAs a call's tail is under 1/100 of it: its efficiency is taken as 1.
CTA_LIMIT = 2**15
EXACT_WAVES = 16
"""Waves of CTAs ``cta_efficiency`` schedules one by one (the earlier ones fill every slot)."""
CAUSAL_MASKS = ("causal-diagonal", "offset-causal", "documents")


@dataclass(frozen=True)
class TileWork:
    """The tiles one call visits: ``full`` and ``masked`` ones, over ``rows`` query tiles."""

    full: float
    masked: float
    rows: int


def tile_work(
    q: int,
    k: int,
    mask: str,
    tile: tuple[int, int],
    visible: float | None,
    *,
    uneven_mask: bool = False,
    band: tuple[int, int] | None = None,
    mask_every_tile: bool = False,
) -> TileWork:
    """Tiles of an ``(M, N)``-tiled call of ``q`` queries on ``k`` keys under ``mask``;
    ``uneven_mask``: a causal query tile masks one more key tile when ``q`` or ``k`` is not a
    multiple of the tile (FA2's forward off its even-M/N path); ``band`` a ``"window"`` call's,
    ``mask_every_tile``: every tile it visits is masked (FA2's forward)."""
    full, masked = _row_tiles(q, k, mask, tile, visible, uneven_mask, band, mask_every_tile)
    return TileWork(float(full.sum()), float(masked.sum()), int(full.size))


def _band_tiles(
    n_loop: int, n_in: int, loop_tile: int, in_tile: int, lo: int, hi: int, every: bool
) -> tuple[np.ndarray, np.ndarray]:
    """``(full, masked)`` ``(ceil(n_loop / loop_tile),)``: for each tile of the looped-over
    side (its indices ``[first, first + loop_tile)``), the tiles of the other side (``n_in``
    indices, ``in_tile`` each) whose index ``t`` some row ``r`` of it reaches with
    ``r + lo <= t <= r + hi``: flash-attn's ``n_block_min``/``n_block_max`` (the module
    docstring), and of those the tiles every row sees whole. ``every``: all are masked."""
    first = np.arange(-(-n_loop // loop_tile), dtype=np.int64) * loop_tile
    last = np.minimum(first + loop_tile, n_loop) - 1
    n_in_tiles = -(-n_in // in_tile)
    low = np.maximum(0, (first + lo) // in_tile)
    high = np.minimum(n_in_tiles, -(-(first + loop_tile + hi) // in_tile))
    visited = np.maximum(high - low, 0)
    if every:
        return np.zeros(len(first)), visited.astype(float)
    whole_low = np.maximum(low, -(-(last + lo) // in_tile))  # starts at or after every row's
    ends = first + hi + 1  # one past the last index every row sees
    whole_high = np.minimum(high, ends // in_tile)  # tiles ending by then
    whole_high = np.where(ends >= n_in, high, whole_high)  # the short last tile, if reached
    whole = np.clip(whole_high - whole_low, 0, visited)
    return whole.astype(float), (visited - whole).astype(float)


def _row_tiles(
    q, k, mask, tile, visible, uneven_mask=False, band=None, every=False
) -> tuple[np.ndarray, np.ndarray]:
    """``(full, masked)`` ``(ceil(q / M),)`` key tiles each query tile visits."""
    M, N = tile
    nq, nk = -(-q // M), -(-k // N)
    if mask == "window":
        lo, hi = _check_band(band)
        return _band_tiles(q, k, M, N, lo, hi, every)
    if mask in ("full", "zigzag-half"):
        return np.full(nq, float(nk)), np.zeros(nq)
    if mask == "documents":
        if visible is None or not 0.0 <= visible <= 1.0:
            raise ValueError(f"visible must be a fraction in [0, 1] for documents, got {visible!r}")
        masked = np.full(nq, math.ceil(visible * nq * nk) / nq)
        return np.zeros(nq), masked
    shift = k - q - (1 if mask == "offset-causal" else 0)  # row r sees keys <= r + shift
    first = np.arange(nq, dtype=np.int64) * M
    last = np.minimum(first + M, q) - 1
    seen_by_all = np.clip((first + shift + 1) // N, 0, nk)
    seen_by_last = np.clip(-(-(last + shift + 1) // N), 0, nk)
    full, masked = seen_by_all.astype(float), (seen_by_last - seen_by_all).astype(float)
    if uneven_mask and (q % M or k % N):
        extra = np.minimum(full, 1.0)
        full, masked = full - extra, masked + extra
    return full, masked


def _column_tiles(
    q, k, mask, tile, visible, band=None, every=False
) -> tuple[np.ndarray, np.ndarray]:
    """``(full, masked)`` ``(ceil(k / N),)`` query tiles each key tile visits (a backward CTA's
    loop): query row ``r`` sees key ``j`` iff ``j <= r + shift``."""
    M, N = tile
    nq, nk = -(-q // M), -(-k // N)
    if mask == "window":  # key t is seen by rows t - hi to t - lo
        lo, hi = _check_band(band)
        return _band_tiles(k, q, N, M, -hi, -lo, every)
    if mask in ("full", "zigzag-half"):
        return np.full(nk, float(nq)), np.zeros(nk)
    if mask == "documents":
        masked = _row_tiles(q, k, mask, tile, visible)[1]
        return np.zeros(nk), np.full(nk, masked.sum() / nk)
    shift = k - q - (1 if mask == "offset-causal" else 0)
    first = np.arange(nk, dtype=np.int64) * N
    last = np.minimum(first + N, k) - 1
    # query tiles whose last row sees the column's first key, and whose first row its last
    seen_by_some = nq - np.clip((first - shift) // M, 0, nq)
    seen_by_all = nq - np.clip(-(-(last - shift) // M), 0, nq)
    seen_by_some = np.clip(seen_by_some, 0, nq)
    seen_by_all = np.clip(seen_by_all, 0, nq)
    return seen_by_all.astype(float), (seen_by_some - seen_by_all).astype(float)


def cta_lengths(
    q: int,
    k: int,
    mask: str,
    launch: Launch,
    visible: float | None,
    curve: Curve | _Terms,
    *,
    pass_: str = "forward",
    band: tuple[int, int] | None = None,
    mask_every_tile: bool = False,
) -> np.ndarray:
    """Work of each CTA of one (batch, head) of a call, in full tiles of ``launch.tile``: its
    visible tiles (a masked one ``1 / masked_speed``) and its fixed cost, ``keys_half`` rows of
    the looped dimension. ``band``, ``mask_every_tile``: a ``"window"`` call's
    (``tile_work``)."""
    M, N = launch.tile
    every = mask_every_tile
    if launch.loop == "keys":
        uneven = pass_ == Pass.FORWARD and mask in ("causal-diagonal", "offset-causal")
        full, masked = _row_tiles(q, k, mask, launch.tile, visible, uneven, band, every)
        fixed = curve.keys_half / N
    else:
        full, masked = _column_tiles(q, k, mask, launch.tile, visible, band, every)
        fixed = curve.keys_half / M
    busy = (full + masked) > 0
    return np.where(busy, full + masked / curve.masked_speed + fixed, 0.0)


@dataclass(frozen=True)
class _Terms:
    """The two curve terms a CTA's length needs (hashable, unlike a ``Curve``)."""

    keys_half: float
    masked_speed: float


def cta_makespan(lengths: np.ndarray, sms: int, per_sm: int, lone_speed: float) -> float:
    """When the last of the CTAs ``lengths`` (in dispatch order) finishes on ``sms`` SMs that
    hold ``per_sm`` CTAs each, in units where a CTA on a full SM does one tile a unit.

    Free slots take the next CTAs breadth-first: one per SM in turn (the first wave fills the
    SMs so, and SMs whose CTAs end at the same moment get one new CTA each before any gets a
    second). An SM shares its rate among its residents: with ``n`` of them it runs ``per_sm x
    (lone + (1 - lone)(n - 1)/(per_sm - 1))`` tiles a unit (``per_sm`` when full, ``per_sm x
    lone`` for one alone). Ends within ``1e-12`` of the earliest count as one moment.

    An event loop over the SMs' next ends (a heap); with one CTA per SM each SM runs its CTA
    alone at rate 1, and ``_one_per_sm`` does the same arithmetic without the residents'
    lists (a planner schedules thousands of such grids)."""
    pending = [float(x) for x in lengths if x > 0][::-1]  # pop() takes the next CTA
    if not pending:
        return 0.0
    if per_sm == 1:
        return _one_per_sm(pending, sms)
    # rates[n]: one resident's rate with n on its SM
    rates = [1.0] + [
        per_sm * (lone_speed + (1.0 - lone_speed) * (n - 1) / (per_sm - 1)) / n
        for n in range(1, per_sm + 1)
    ]
    residents: list[list[float]] = [[] for _ in range(sms)]
    since = [0.0] * sms
    heap: list[tuple[float, int]] = []
    push = heapq.heappush

    def refill(freed: list[int], now: float) -> None:
        """Give the SMs ``freed`` (their CTAs advanced to ``now``) one new CTA each in turn
        while they have room, then schedule their next end."""
        open_ = freed
        while pending and open_:
            open_ = [sm for sm in open_ if len(residents[sm]) < per_sm]
            for sm in open_[: len(pending)]:
                residents[sm].append(pending.pop())
        for sm in freed:
            left = residents[sm]
            if left:
                push(heap, (now + min(left) / rates[len(left)], sm))

    refill(list(range(sms)), 0.0)
    now = 0.0
    while heap:
        now, ended = _next_moment(heap)
        for sm in ended:
            left = residents[sm]
            done = rates[len(left)] * (now - since[sm])
            left[:] = [x - done for x in left if x - done > 1e-9 * (1.0 + done)]
            since[sm] = now
        refill(ended, now)
    return now


def _next_moment(heap: list[tuple[float, int]]) -> tuple[float, list[int]]:
    """The next moment of ``cta_makespan``'s event loop: the earliest end and the SMs whose
    CTAs end then (within ``1e-12`` of it), taken off ``heap`` in order."""
    now, sm = heapq.heappop(heap)
    ended = [sm]
    while heap and heap[0][0] <= now * (1.0 + 1e-12):
        ended.append(heapq.heappop(heap)[1])
    return now, ended


def _one_per_sm(pending: list[float], sms: int) -> float:
    """``cta_makespan`` with one CTA per SM (each runs alone at rate 1), ``pending`` the CTAs'
    lengths last first: the same events and the same floating-point operations, on one
    number per SM (its CTA's work left, ``None`` when it is free)."""
    left: list[float | None] = [None] * sms
    since = [0.0] * sms
    heap: list[tuple[float, int]] = []
    push = heapq.heappush
    for sm in range(min(sms, len(pending))):
        left[sm] = x = pending.pop()
        push(heap, (0.0 + x / 1.0, sm))
    now = 0.0
    while heap:
        now, ended = _next_moment(heap)
        for sm in ended:
            done = 1.0 * (now - since[sm])
            x = left[sm] - done
            left[sm] = x if x > 1e-9 * (1.0 + done) else None
            since[sm] = now
            if left[sm] is None and pending:
                left[sm] = pending.pop()
            if left[sm] is not None:
                push(heap, (now + left[sm] / 1.0, sm))
    return now


def cta_efficiency(lengths: np.ndarray, sms: int, per_sm: int, lone_speed: float) -> float:
    """``work / (slots x makespan)`` of one call's CTAs (1: every slot busy to the end).

    Past ``EXACT_WAVES`` waves only the last ones are scheduled CTA by CTA: the earlier CTAs
    keep every slot busy, so they add their work over the slots (within 0.6% of the full
    schedule on FA2's grids; it keeps a planner's thousands of calls fast)."""
    lengths = np.asarray(lengths, dtype=float)
    work = float(np.sum(lengths))
    if work == 0 or len(lengths) > CTA_LIMIT:
        return 1.0
    slots = sms * per_sm
    head = max(0, len(lengths) - EXACT_WAVES * slots)
    makespan = float(np.sum(lengths[:head])) / slots
    makespan += cta_makespan(lengths[head:], sms, per_sm, lone_speed)
    return work / (slots * makespan)


@functools.lru_cache(maxsize=4096)
def _grid_efficiency(
    one: bytes, repeats: int, sms: int, per_sm: int, lone: float, longest_first: bool
) -> float:
    """``cta_efficiency`` of a grid that repeats one head's CTA lengths (``one``, float64
    bytes) ``repeats`` times, remembered: a planner times the same call shape many times."""
    ctas = np.tile(np.frombuffer(one), repeats)
    if longest_first:
        ctas = np.sort(ctas)[::-1]
    return cta_efficiency(ctas, sms, per_sm, lone)


@functools.lru_cache(maxsize=256)
def _benchmark_efficiency(
    launch: Launch, curve: _Terms, sms: int, lone_speed: float, seq: int, causal: bool, pass_: str
) -> float:
    """``cta_efficiency`` of the curve's own benchmark call at sequence length ``seq``."""
    heads, batch = BENCHMARK_HIDDEN // 128, BENCHMARK_TOKENS // seq
    mask = "causal-diagonal" if causal else "full"
    one = cta_lengths(seq, seq, mask, launch, None, curve, pass_=pass_)
    return cta_efficiency(np.tile(one, heads * batch), sms, launch.ctas_per_sm, lone_speed)


MAX_CALL_SIZE = 2**31 - 1
"""The largest token count, head count, head dim or batch of one call: kernels index their
grid and offsets in 32-bit integers (CUDA's grid x limit is 2^31 - 1)."""


def _check_call(family, q_tokens, k_tokens, shape: AttentionShape, pass_, mask) -> None:
    for name, value in (
        ("q_tokens", q_tokens),
        ("k_tokens", k_tokens),
        ("heads", shape.heads),
        ("kv_heads", shape.kv_heads),
        ("head_dim", shape.head_dim),
        ("batch", shape.batch),
    ):
        check_positive_int(name, value, at_most=MAX_CALL_SIZE)
    check_choice("pass", pass_, RING_PASSES)
    check_choice("mask", mask, MASKS)
    if shape.dtype not in family.dtypes:
        raise ValueError(
            f"dtype {shape.dtype!r} is not run by implementation {family.name!r} "
            f"(it runs: {', '.join(family.dtypes)})"
        )


def call_bytes(q: int, k: int, shape: AttentionShape, pass_: str) -> float:
    """HBM bytes one call of ``q`` queries on ``k`` keys of ``shape`` moves at least: forward
    reads ``Q, K, V`` and writes ``O`` and the fp32 ``lse``; backward reads ``Q, K, V, O, dO,
    lse``, writes ``dQ, dK, dV`` and round-trips the fp32 ``dQ`` accumulator."""
    b, batch, d = DTYPE_BYTES[shape.dtype], shape.batch, shape.head_dim
    q_el, kv_el = batch * q * shape.heads * d, batch * k * shape.kv_heads * d
    lse = 4.0 * batch * q * shape.heads
    if pass_ == Pass.FORWARD:
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
    lone_cta_speed: str | float = "point",
    band: tuple[int, int] | None = None,
) -> float:
    """Seconds of one attention call (see the module docstring for the terms and masks): the
    API's edge, its shape given field by field (``call_seconds`` takes an ``AttentionShape``;
    ``band``: a ``"window"`` call's).

    ``tile=(M, N)`` overrides the family's tile (of both passes); ``visible`` is the fraction
    of pairs computed (``"documents"`` needs it; for ``"ideal"`` it replaces the mask's own
    fraction); ``peak`` overrides the hardware's FLOP/s for ``dtype`` (a per-kind rate, e.g.
    TF32 attention); ``lone_cta_speed`` the end of the family's range to assume
    (``"low"``/``"point"``/``"high"``, ``ringsim.timer.machine.ranges``) or a value.
    ``"ideal"`` returns ``attention_flops(q, k, heads, head_dim, work=visible) / peak``."""
    check_positive_int("kv_heads", kv_heads, at_most=MAX_CALL_SIZE)  # None is no default here
    shape = AttentionShape(
        heads=heads, kv_heads=kv_heads, head_dim=head_dim, dtype=dtype, batch=batch
    )
    return call_seconds(
        family,
        hardware,
        shape,
        q_tokens=q_tokens,
        k_tokens=k_tokens,
        pass_=pass_,
        mask=mask,
        tile=tile,
        visible=visible,
        peak=peak,
        lone_cta_speed=lone_cta_speed,
        band=band,
    )


def call_seconds(
    family: str | KernelFamily,
    hardware: Hardware,
    shape: AttentionShape,
    *,
    q_tokens: int,
    k_tokens: int,
    pass_: str,
    mask: str,
    tile: tuple[int, int] | None = None,
    visible: float | None = None,
    peak: float | None = None,
    lone_cta_speed: str | float = "point",
    band: tuple[int, int] | None = None,
) -> float:
    """Seconds of one call of ``q_tokens`` queries on ``k_tokens`` keys of the layer ``shape``
    (``attention_call_seconds`` says the rest; ``band``: a ``"window"`` call's)."""
    check_instance("hardware", hardware, Hardware, "a Hardware (ringsim.get_hardware(name))")
    family = for_hardware(get_family(family), hardware)
    _check_call(family, q_tokens, k_tokens, shape, pass_, mask)
    if mask == "window":
        band = _check_band(band)
    elif band is not None:
        raise ValueError(f"band is for mask 'window' only, got band={band!r} with mask {mask!r}")
    if peak is None:
        rate = hardware.flops_for(shape.dtype)
    else:
        rate = check_real("peak", peak, positive=True)
    if visible is not None and not 0.0 <= check_real("visible", visible) <= 1.0:
        raise ValueError(f"visible must be a fraction in [0, 1], got {visible!r}")
    tile = None if tile is None or family.ideal else _check_tile(tile)  # ideal has no tiles
    if not isinstance(lone_cta_speed, str):  # an end's name, or a fraction
        check_real("lone_cta_speed", lone_cta_speed, positive=True)
    return _call_seconds(
        family,
        hardware,
        shape,
        q_tokens,
        k_tokens,
        pass_,
        mask,
        tile,
        visible,
        rate,
        lone_cta_speed,
        band,
    )


@functools.lru_cache(maxsize=2**16)
def _call_seconds(
    family,
    hardware,
    shape,
    q_tokens,
    k_tokens,
    pass_,
    mask,
    tile,
    visible,
    rate,
    lone_cta_speed,
    band,
) -> float:
    """``call_seconds`` of checked arguments, remembered: a planner's configurations run many
    of the same calls (the same heads per GPU, block and mask under another strategy or
    degree)."""
    head_dim = shape.head_dim
    if family.ideal:
        if visible is None:
            visible = visible_fraction(q_tokens, k_tokens, mask, band)
        return shape.flops(q_tokens, k_tokens, work=visible, pass_=pass_) / rate
    curve = family.curve(hardware, pass_)
    if family.calibrated:  # HostClock.block's calibrated rule
        if visible is None:
            visible = visible_fraction(q_tokens, k_tokens, mask, band)
        flops = shape.flops(q_tokens, k_tokens, work=visible, pass_=pass_)
        masked = curve.masked_speed if mask != "full" and mask != "zigzag-half" else 1.0
        return family.call_overhead_s + flops / (rate * masked)
    launch = family.launch(hardware, pass_)
    if tile is not None:
        launch = Launch(tile, launch.loop, launch.ctas_per_sm, launch.longest_first)
    every = pass_ in family.window_masks_every_tile
    one = cta_lengths(
        q_tokens,
        k_tokens,
        mask,
        launch,
        visible,
        curve,
        pass_=pass_,
        band=band,
        mask_every_tile=every,
    )
    M, N = launch.tile
    tile_flops = attention_flops(M, N, 1, head_dim, pass_=pass_)
    tile_rate = rate * curve.fraction * curve.head_dim_factor(head_dim)
    if mask in CAUSAL_MASKS:
        tile_rate *= curve.causal_factor
    grids = shape.heads * shape.batch  # one grid of CTAs per (head, sequence)
    work = float(one.sum()) * grids
    sms = hardware.arch.sms
    if sms and work > 0 and family.wave_tail:  # relative to the benchmark's
        lone = _lone_speed(family, lone_cta_speed)
        if launch.split_kv:  # few CTAs: each query tile's keys shared among more CTAs
            split = split_count(-(-q_tokens // 64) * grids, sms, -(-k_tokens // 128))
            one = np.repeat(one / split, split) if split > 1 else one
        seq = int(min(max(2 ** round(math.log2(q_tokens)), 512), BENCHMARK_TOKENS))
        terms = _Terms(curve.keys_half, curve.masked_speed)
        bench = _benchmark_efficiency(launch, terms, sms, lone, seq, mask in CAUSAL_MASKS, pass_)
        if family.wave_tail_bound:  # no schedule beats every slot busy (call_rate_bound)
            efficiency = max(1.0, lone)
        else:
            key = (one.tobytes(), grids, sms, launch.ctas_per_sm, lone)
            efficiency = _grid_efficiency(*key, launch.longest_first)
        tile_rate *= efficiency / bench
    compute = work * tile_flops / tile_rate
    floor = 0.0
    if hardware.memory_bandwidth > 0:
        moved = call_bytes(q_tokens, k_tokens, shape, pass_)
        floor = moved / (hardware.memory_bandwidth * HBM_FRACTION)
    return family.call_overhead_s + max(compute, floor)


def call_rate_bound(
    family: str | KernelFamily,
    hardware: Hardware,
    *,
    head_dim: int,
    dtype: str,
    pass_: str,
    tile: tuple[int, int] | None = None,
    peak: float | None = None,
    lone_cta_speed: str | float = "point",
) -> float:
    """FLOP/s (on the pairs a mask leaves) that no call of ``family`` on ``hardware`` exceeds in
    ``pass_``, whatever its shape or mask (``call_seconds``' terms at their best): ``compute =
    work x tile FLOPs / tile rate``, where the visible pairs never exceed ``max(1,
    masked_speed)`` times the work's tiles, the tile rate is ``fraction x head_dim_factor``
    (times ``causal_factor`` where it helps) of the peak, and the wave-tail factor is a grid
    efficiency (at most ``max(1, lone_cta_speed)``: no SM runs faster than full) over the
    benchmark's at the call's length (at least its lowest over the lengths a call may round
    to). So ``visible FLOPs / call_rate_bound <= call_seconds``: a planner's lower bound."""
    family = for_hardware(get_family(family), hardware)
    rate = hardware.flops_for(dtype) if peak is None else check_real("peak", peak, positive=True)
    if family.ideal:
        return rate
    curve = family.curve(hardware, pass_)
    masked = max(1.0, curve.masked_speed)
    if family.calibrated:  # call_seconds: flops / (rate x masked_speed) for a masked call
        return rate * masked
    tile_rate = rate * curve.fraction * curve.head_dim_factor(head_dim)
    tile_rate *= max(1.0, curve.causal_factor)
    sms = hardware.arch.sms
    if sms and family.wave_tail:
        launch = family.launch(hardware, pass_)
        if tile is not None:
            tile = _check_tile(tile)
            launch = Launch(tile, launch.loop, launch.ctas_per_sm, launch.longest_first)
        lone = _lone_speed(family, lone_cta_speed)
        terms = _Terms(curve.keys_half, curve.masked_speed)
        lengths = [2**e for e in range(9, BENCHMARK_TOKENS.bit_length())]  # 512 .. 16K
        bench = min(
            _benchmark_efficiency(launch, terms, sms, lone, seq, causal, pass_)
            for seq in lengths
            for causal in (False, True)
        )
        tile_rate *= max(1.0, lone) / bench
    return tile_rate * masked


def decode_call_seconds(
    family: str | KernelFamily,
    hardware: Hardware,
    shape: AttentionShape,
    *,
    tokens: int,
    peak: float | None = None,
) -> float:
    """Seconds for one query of ``shape`` to attend ``tokens`` cached keys under a real family:
    its fixed cost per call plus the larger of the FLOPs at the family's long-row rate (its
    curve's ``fraction`` and head-dim factor, no short-row or tile terms: a decode kernel splits
    the keys over the SMs) and the cache streamed at the achieved HBM rate."""
    family = for_hardware(get_family(family), hardware)
    _check_call(family, 1, tokens, shape, "forward", "full")
    rate = hardware.flops_for(shape.dtype) if peak is None else float(peak)
    if family.ideal:
        raise ValueError("decode_call_seconds times a real family; 'ideal' is timer.decode_seconds")
    flops = shape.flops(1, tokens)
    if not family.calibrated:
        curve = family.curve(hardware, "forward")
        rate *= curve.fraction * curve.head_dim_factor(shape.head_dim)
    compute = flops / rate
    floor = 0.0
    if hardware.memory_bandwidth > 0:
        moved = call_bytes(1, tokens, shape, "forward")
        floor = moved / (hardware.memory_bandwidth * HBM_FRACTION)
    return family.call_overhead_s + max(compute, floor)


def _lone_speed(family: KernelFamily, end: str | float) -> float:
    """``lone_cta_speed`` at ``end`` of the family's range (1 where it has none), or the
    fraction given."""
    if isinstance(end, str):
        check_choice("lone_cta_speed", end, (*ENDS, "slow", "fast"), also=", or a fraction")
        return 1.0 if family.lone_cta_speed is None else family.lone_cta_speed.at(end)
    speed = check_real("lone_cta_speed", end, positive=True)
    if speed > 1.0:  # a lone CTA runs at most at the whole SM's rate (LONE_CTA_SPEED)
        raise ValueError(f"lone_cta_speed must be a fraction in (0, 1], got {end!r}")
    return speed


def _check_tile(tile: object) -> tuple[int, int]:
    if not isinstance(tile, tuple) or len(tile) != 2:
        raise ValueError(f"tile must be a pair (M, N) of positive integers, got {tile!r}")
    return check_positive_int("tile M", tile[0]), check_positive_int("tile N", tile[1])


def _check_band(band: object) -> tuple[int, int]:
    """A ``"window"`` call's ``band``: integers ``(lo, hi)`` with ``lo <= hi``."""
    ok = isinstance(band, tuple) and len(band) == 2
    ok = ok and all(isinstance(x, int | np.integer) and not isinstance(x, bool) for x in band)
    if not ok or band[0] > band[1]:
        raise ValueError(
            f"band must be (lo, hi), integers with lo <= hi, for mask 'window', got {band!r}"
        )
    return int(band[0]), int(band[1])


def visible_fraction(q: int, k: int, mask: str, band: tuple[int, int] | None = None) -> float:
    """Exact fraction of the ``q x k`` pairs a mask leaves visible."""
    if mask == "window":
        lo, hi = _check_band(band)
        rows = np.arange(q, dtype=np.int64)
        seen = np.clip(np.minimum(rows + hi, k - 1) - np.maximum(rows + lo, 0) + 1, 0, k).sum()
        return float(seen) / (q * k)
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
    ``"fp8"`` twice it (H100 datasheet; only on a chip with fp8 tensor cores, ``Arch.fp8``),
    ``"bf16"``/``"fp16"``/``"fp32"`` the hardware's own rate for that dtype."""
    if isinstance(value, str):
        if value in ("bf16", "fp16", "fp32"):
            return hardware.flops_for(value)
        if value == "tf32":
            return hardware.flops_for(dtype) / 2.0
        if value == "fp8":
            hardware.check_fp8("rate 'fp8'")
            return hardware.flops_for(dtype) * 2.0
        known = "bf16, fp16, fp32, tf32, fp8"
        raise ValueError(f"rate must be FLOP/s or one of {known}, got {value!r}")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"rate must be a positive number of FLOP/s, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"rate must be finite, got {value!r}")
    return float(value)
