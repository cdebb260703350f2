"""Measure this machine and save a hardware profile the simulator can load.

Two things decide a ring's timing, and both are measured here with the code the ring runs:

* **block compute**: ``block_attention`` of one ``c x c`` block (the ring's kernel, its
  backend, its thread count) for several ``c``. Small blocks are dominated by a fixed cost per
  call (dispatch, allocation), large ones by the FLOP rate, so the times are fitted as
  ``t(c) = overhead + flops(c) / rate``.
* **the link**: the same transport and the same calls as the ring (``batch_isend_irecv`` over
  gloo or NCCL). *Ping-pong* (one message at a time, one way) gives the textbook latency and
  bandwidth; *exchange* (both ranks send and receive at once, as every ring step does) gives
  what a ring step actually gets when both directions and both processes share the machine.
  Each is fitted as ``t(n) = latency + n / bandwidth``.

On the gloo backend all measurements run inside ``hosts`` local processes started like the
ring's (one torch thread each, computing at the same time), so contention for the cores is
part of what is measured. ``backend="cuda"`` measures one GPU: the Triton kernel and, as its
"link", host-to-device copies from pinned memory (the emulated ring member of
``kernels.gpu_check``).

Two more measurements feed the two kernel terms of ``ringsim.hardware.Hardware``:

* **masked blocks** (``masked``): the blocks a causal ring computes with a mask (the diagonal
  block of the contiguous and the zigzag layout, zigzag's off-diagonal halves from both sides),
  each timed with the tile-granular fraction of the block it computes. On the torch path a
  masked block runs a loop over query tiles that builds and applies the mask tile by tile: a
  different kernel, with its own rate. ``masked_speed`` is that rate over the full block's.
* **a lone host** (``solo``): the full block while the other ranks wait. Local ranks share the
  machine's cores, caches, memory bandwidth and clock boost, so a rank computing alone (a
  contiguous causal ring's last steps, where the others skip) is faster than one computing
  beside the others, as the ``compute`` rows measure. ``solo_speed`` is that factor.

``Calibration.hardware(block_tokens=c)`` builds the profile for blocks of ``c`` tokens:
``block_overhead_s`` is the fixed cost per call (the time of the smallest block measured, less
its FLOPs at the large-block rate), and the FLOP rate is the one that, with that overhead,
reproduces the measured full block at ``c``; ``masked_speed`` and ``solo_speed`` come from the
rows at (or nearest to) ``c``. The saved default profile uses the largest block measured. The
raw data goes beside it as JSON (``Calibration.to_json``).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import date
from pathlib import Path

import numpy as np

from ringsim.cost import attention_flops

BACKENDS = ("gloo", "nccl", "cuda")
DEFAULT_SIZES = (64, 128, 256, 512, 1024, 2048)
DEFAULT_BYTES = tuple(2**p for p in range(10, 25, 2))  # 1 KiB .. 16 MiB
TORCH_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


@dataclass
class Fit:
    """``t = intercept + x / rate`` (x in FLOPs or bytes)."""

    intercept: float
    rate: float

    def time(self, x: float) -> float:
        return self.intercept + x / self.rate


def fit_line(x: Sequence[float], t: Sequence[float]) -> Fit:
    """Least-squares ``t = a + x / rate`` with ``a >= 0``; the rate from the slope. A negative
    intercept (noise) is clamped to 0 and the rate refitted through the origin."""
    x, t = np.asarray(x, float), np.asarray(t, float)
    if len(x) < 2 or np.ptp(x) == 0:
        raise ValueError(f"fit needs at least two distinct sizes, got {list(x)}")
    slope, intercept = np.polyfit(x, t, 1)
    if intercept < 0 or slope <= 0:
        slope, intercept = float(np.dot(x, t) / np.dot(x, x)), 0.0
    if slope <= 0:
        raise ValueError(f"times do not grow with size: {list(t)}")
    return Fit(float(intercept), float(1.0 / slope))


@dataclass
class Calibration:
    """Raw measurements and their fits. ``compute``: rows ``{block_tokens, flops, seconds}``
    (every rank computing); ``solo``: the same, one rank at a time; ``masked``: rows
    ``{block_tokens, block, work, flops, seconds}`` (``work`` the tile-granular fraction of the
    block computed, ``flops`` its FLOPs); ``pingpong``/``exchange``: rows ``{bytes, seconds}``
    (one-way / per exchange); ``overlap``: rows of ``measure_overlap``; ``ring_pass``: rows of
    ``measure_ring_pass``. Calibrations saved before the last four existed (or with the
    one-rank ``pass_setup`` rows of an earlier version) load with them empty (neutral terms)."""

    backend: str
    dtype: str
    heads: int
    head_dim: int
    threads: int
    hosts: int
    compute: list[dict] = field(default_factory=list)
    pingpong: list[dict] = field(default_factory=list)
    exchange: list[dict] = field(default_factory=list)
    masked: list[dict] = field(default_factory=list)
    solo: list[dict] = field(default_factory=list)
    overlap: list[dict] = field(default_factory=list)
    ring_pass: list[dict] = field(default_factory=list)
    machine: str = field(default_factory=platform.node)
    when: str = field(default_factory=lambda: date.today().isoformat())

    @property
    def compute_fit(self) -> Fit:
        return fit_line([r["flops"] for r in self.compute], [r["seconds"] for r in self.compute])

    def link_fit(self, kind: str = "exchange") -> Fit:
        rows = getattr(self, kind) or self.pingpong
        return fit_line([r["bytes"] for r in rows], [r["seconds"] for r in rows])

    def block_seconds(
        self, block_tokens: int, heads: int | None = None, head_dim: int | None = None
    ) -> float:
        """Seconds of one full ring step's compute at block size ``c``: interpolated (log-log)
        between the measured sizes around ``c``, from the fit outside them (or for another
        ``heads``/``head_dim`` than calibrated). Interpolation keeps what a line cannot: a rate
        that falls for blocks whose scores leave the cache."""
        heads, head_dim = heads or self.heads, head_dim or self.head_dim
        rows = sorted(self.compute, key=lambda r: r["block_tokens"])
        sizes = np.array([r["block_tokens"] for r in rows], float)
        same_shape = (heads, head_dim) == (self.heads, self.head_dim)
        if same_shape and sizes[0] <= block_tokens <= sizes[-1]:
            times = np.log([r["seconds"] for r in rows])
            return float(np.exp(np.interp(np.log(block_tokens), np.log(sizes), times)))
        return self.compute_fit.time(attention_flops(block_tokens, block_tokens, heads, head_dim))

    def rate_at(
        self, block_tokens: int, heads: int | None = None, head_dim: int | None = None
    ) -> float:
        """Effective FLOP/s of a full ``c x c`` block: its FLOPs over its measured time."""
        heads, head_dim = heads or self.heads, head_dim or self.head_dim
        flops = attention_flops(block_tokens, block_tokens, heads, head_dim)
        return flops / self.block_seconds(block_tokens, heads, head_dim)

    def block_overhead(self) -> float:
        """Seconds per block call that do not shrink with the block: the smallest block's
        measured time less its FLOPs at the fitted (large-block) rate, in ``[0, that time]``."""
        small = min(self.compute, key=lambda r: r["block_tokens"])
        flop_time = small["flops"] / self.compute_fit.rate
        return float(min(max(small["seconds"] - flop_time, 0.0), small["seconds"]))

    def flop_rate_at(
        self, block_tokens: int, heads: int | None = None, head_dim: int | None = None
    ) -> float:
        """FLOP/s of the FLOP part of a full block of ``c``: with ``block_overhead()`` added,
        a full block takes exactly ``block_seconds(c)`` (the overhead is capped at 90% of it,
        so that blocks no larger than the smallest measured keep a finite rate)."""
        heads, head_dim = heads or self.heads, head_dim or self.head_dim
        seconds = self.block_seconds(block_tokens, heads, head_dim)
        flops = attention_flops(block_tokens, block_tokens, heads, head_dim)
        return flops / (seconds - min(self.block_overhead(), 0.9 * seconds))

    def _rows_near(self, rows: list[dict], block_tokens: int) -> list[dict]:
        """The rows measured at the block size nearest (in log) to ``block_tokens``."""
        if not rows:
            return []
        near = min({r["block_tokens"] for r in rows}, key=lambda c: abs(math.log(c / block_tokens)))
        return [r for r in rows if r["block_tokens"] == near]

    def masked_speed_at(self, block_tokens: int) -> float:
        """Rate on masked blocks over the rate on full blocks, at (or near) ``c``: the full
        block's FLOP time scaled by each masked row's ``work``, summed, over the masked rows'
        measured times less the per-call overhead, summed (1 without masked rows)."""
        rows = self._rows_near(self.masked, block_tokens)
        if not rows:
            return 1.0
        c = rows[0]["block_tokens"]
        overhead = self.block_overhead()
        full_flop_time = self.block_seconds(c) - min(overhead, 0.9 * self.block_seconds(c))
        expected = sum(r["work"] * full_flop_time for r in rows)
        measured = sum(max(r["seconds"] - overhead, 0.1 * r["seconds"]) for r in rows)
        return expected / measured

    def overlap_efficiency(self, block_tokens: int | None = None) -> float:
        """``Hardware.overlap_efficiency`` at (or near) ``block_tokens`` (default: the largest
        probed): per ``overlap`` row ``(compute + transfer - step) / min(compute, transfer)``,
        the median over the rows (one noisy probe cannot move it), not clipped at 0: a step
        slower than its compute and transfer in turn is contention, and the timer models it
        (only kept within the term's range ``[-1, 1]``). 1 without rows: the double buffering
        works as designed. It is read at the block size it is used for, as the compute rate
        and the link are: how a transfer and a compute share a rank's core may depend on the
        message and the block (measured here, 2 pinned gloo ranks: about 0 for 1 MB messages
        beside a 1.5 ms block, +0.1 for 8 MB beside 8 ms; the transport needs the core)."""
        if not self.overlap:
            return 1.0
        c = block_tokens or max(r["block_tokens"] for r in self.overlap)
        fractions = [
            (r["compute_s"] + r["transfer_s"] - r["step_s"]) / min(r["compute_s"], r["transfer_s"])
            for r in self._rows_near(self.overlap, c)
        ]
        return float(np.clip(np.median(fractions), -1.0, 1.0))

    def overlap_fraction(self, block_tokens: int | None = None) -> float:
        """How much of the shorter of compute and transfer a ring step hides:
        ``overlap_efficiency()`` clipped to ``[0, 1]`` (a report; the timer reads the former)."""
        return float(np.clip(self.overlap_efficiency(block_tokens), 0.0, 1.0))

    def pass_overhead(self) -> float:
        """Seconds a ring call costs beyond its simulated steps: per ``ring_pass`` row (a real
        near-empty pass), its measured time less the simulated time of its steps (their
        per-call overheads and message latencies, from this calibration, with no pass
        overhead); the median over rows, at least 0 (0 without rows). What it holds on local
        gloo ranks: the ranks leaving the barrier at different moments (the first to leave
        waits for the other in its first transfer), gloo's threads waking up for the first
        message, the schedule, positions and buffers built per call and the autograd
        ``Function`` around the pass."""
        if not self.ring_pass:
            return 0.0
        extra = [r["seconds"] - self.simulated_pass_time(r) for r in self.ring_pass]
        return float(max(np.median(extra), 0.0))

    def simulated_pass_time(self, row: dict) -> float:
        """The simulated time of a ``ring_pass`` row's ring without a pass overhead: this
        calibration's link and overlap efficiency, each block taking the row's measured
        ``block_s``."""
        from kernels.torch_block import TILE
        from ringsim.timing import RingConfig, simulate

        hw = self.hardware(pass_overhead=False)
        hw = replace(hw, block_overhead_s=row["block_s"], masked_speed=1.0, solo_speed=1.0)
        config = RingConfig(
            hosts=row["hosts"], seq_len=row["block_tokens"] * row["hosts"], hardware=hw,
            heads=row["heads"], head_dim=row["head_dim"], dtype=self.dtype,
            layout=row["layout"], causal=row["causal"],
            tile=TILE if self.backend == "gloo" else 64,
        )  # fmt: skip
        return float(simulate(config).summary()["total_time_s"])

    def solo_speed_at(self, block_tokens: int) -> float:
        """How much faster a full block of (about) ``c`` runs while the other ranks wait than
        while all compute (1 without solo rows)."""
        rows = self._rows_near(self.solo, block_tokens)
        if not rows:
            return 1.0
        busy = {r["block_tokens"]: r["seconds"] for r in self.compute}
        c = rows[0]["block_tokens"]
        return (busy[c] if c in busy else self.block_seconds(c)) / rows[0]["seconds"]

    def hardware(
        self,
        block_tokens: int | None = None,
        *,
        heads: int | None = None,
        head_dim: int | None = None,
        link: str = "exchange",
        name: str | None = None,
        pass_overhead: bool = True,
    ):
        """A ``ringsim.hardware.Hardware`` for blocks of ``block_tokens`` (default: the largest
        block measured) with ``heads``/``head_dim`` (default: as calibrated): the FLOP rate and
        per-call overhead that reproduce the full block at ``c``, the masked-block and lone-host
        speeds at ``c``, the ``link`` fit (``exchange`` or ``pingpong``) and, with
        ``pass_overhead``, the measured ``pass_overhead()`` (else 0)."""
        from ringsim.hardware import Hardware

        c = block_tokens or max(r["block_tokens"] for r in self.compute)
        link_fit = self.link_fit(link)
        rate = self.flop_rate_at(c, heads, head_dim)
        overhead = self.block_overhead()
        masked, solo = self.masked_speed_at(c), self.solo_speed_at(c)
        overlap = self.overlap_efficiency(c)
        setup = self.pass_overhead() if pass_overhead else 0.0
        source = (
            f"calibrated {self.when} on {self.machine or self.backend} ({self.backend}, "
            f"{self.threads} thread(s)/rank, {self.hosts} ranks): block compute "
            f"{rate / 1e9:.3g} GFLOP/s at c={c} + {overhead * 1e6:.0f} us/call, masked blocks "
            f"x{masked:.2f}, a lone rank x{solo:.2f}, {setup * 1e6:.0f} us/pass; {link} link "
            f"{link_fit.rate / 1e9:.3g} GB/s + {link_fit.intercept * 1e6:.0f} us/message; "
            f"overlap efficiency {overlap:+.2f} (1: a transfer hides behind "
            f"compute, 0: they add up, < 0: they slow each other)"
        )
        return Hardware(
            name=name or f"{self.backend}-calibrated",
            flops={self.dtype: rate},
            link_bandwidth=link_fit.rate,
            link_latency=link_fit.intercept,
            memory_bytes=_memory_bytes(self.backend),
            efficiency=1.0,
            source=source,
            pass_overhead_s=setup,
            block_overhead_s=overhead,
            masked_speed=masked,
            solo_speed=solo,
            overlap_efficiency=overlap,
        )

    def summary(self) -> dict:
        comp, ex, pp = self.compute_fit, self.link_fit("exchange"), self.link_fit("pingpong")
        largest = max(r["block_tokens"] for r in self.compute)
        return {
            "compute_rate_flops": comp.rate,
            "compute_overhead_s": comp.intercept,
            "block_overhead_s": self.block_overhead(),
            "masked_speed": self.masked_speed_at(largest),
            "solo_speed": self.solo_speed_at(largest),
            "pass_overhead_s": self.pass_overhead(),
            "overlap_fraction": self.overlap_fraction(),
            "overlap_efficiency": self.overlap_efficiency(),
            "exchange_bandwidth": ex.rate,
            "exchange_latency_s": ex.intercept,
            "pingpong_bandwidth": pp.rate,
            "pingpong_latency_s": pp.intercept,
        }

    def to_json(self) -> dict:
        return {**asdict(self), "fits": self.summary()}

    @classmethod
    def from_json(cls, data: dict) -> Calibration:
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**fields)


def _memory_bytes(backend: str) -> float:
    if backend in ("cuda", "nccl"):
        import torch

        return float(torch.cuda.get_device_properties(0).total_memory)
    try:
        import os

        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 16e9


# ------------------------------------------------------------------------------------------
# Measurements (run inside the ranks, or in-process for one GPU)
# ------------------------------------------------------------------------------------------


def _median_time(fn, repeats: int, sync=lambda: None, min_time_s: float = 0.0) -> float:
    """Median seconds of ``fn()`` over ``repeats`` runs, more while under ``min_time_s`` (only
    for local work: a transfer must run the same count on every rank)."""
    fn()
    sync()
    times = []
    start = time.perf_counter()
    while len(times) < repeats or (time.perf_counter() - start < min_time_s and len(times) < 200):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure_compute(
    sizes: Sequence[int],
    *,
    heads: int,
    head_dim: int,
    dtype: str,
    device: str = "cpu",
    repeats: int = 5,
    barrier=lambda: None,
    received: bool = False,
) -> list[dict]:
    """One forward ring step's compute on a full ``c x c`` block: ``block_attention`` (fp32
    output) and the merge into the running ``(out, lse)``, exactly the ring's calls.
    ``received``: on a ``k, v`` block that has just arrived from the previous rank, as the
    ring computes it (see ``_received_time``; every rank must call it alike)."""
    import torch

    from kernels.block import block_attention
    from kernels.ring import merge_out_lse

    rows = []
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    torch_dtype = getattr(torch, TORCH_DTYPES[dtype])
    for c in sizes:
        q, k, v = (
            torch.randn(1, heads, c, head_dim, device=device, dtype=torch_dtype) for _ in "qkv"
        )
        kv, state = torch.stack([k, v]), block_attention(q, k, v, out_dtype=torch.float32)

        def step(block, q=q, state=state):
            return merge_out_lse(*state, *block_attention(q, *block, out_dtype=torch.float32))

        if received:
            seconds = _received_time(step, kv, repeats)
        else:
            barrier()  # every rank computes at the same time, as in the ring
            seconds = _median_time(lambda kv=kv: step(kv), repeats, sync, min_time_s=0.05)
        flops = attention_flops(c, c, heads, head_dim)
        rows.append({"block_tokens": c, "flops": flops, "seconds": seconds})
    return rows


def _received_time(step, kv, repeats: int, active: bool = True) -> float:
    """Median seconds of ``step(block)`` on a block that has just arrived: each sample first
    exchanges ``kv`` with the neighbours into a fresh buffer (``rank + 1`` / ``rank - 1``, the
    ring's transfer, untimed), then times the step on what came in. On local gloo ranks such a
    block is slower to compute than one computed over and over (its pages were just written
    by gloo's thread, on whichever core that ran), and a ring step computes exactly such
    blocks. Runs ``repeats + 1`` exchanges on every rank; ``active=False`` ranks only
    exchange (they wait in the next exchange while the others compute)."""
    import torch

    times = []
    for _ in range(max(repeats, 3) + 1):
        block = torch.empty_like(kv)
        _batch([("send", kv, _neighbour(1)), ("recv", block, _neighbour(-1))])
        t0 = time.perf_counter()
        if active:
            step(block)
        times.append(time.perf_counter() - t0)
    return statistics.median(times[1:])


def _neighbour(offset: int) -> int:
    import torch.distributed as dist

    return (dist.get_rank() + offset) % dist.get_world_size()


MASKED_BLOCKS = ("contiguous-diagonal", "zigzag-diagonal", "zigzag-early-keys", "zigzag-late-keys")


def _masked_block(name: str, block_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """``(q_pos, k_pos)`` of a masked block of a 2-host causal ring: a host's own block
    (contiguous or zigzag), or a zigzag host's queries against the other host's keys."""
    from ringsim.layouts import host_positions

    layout, which = name.split("-", 1)
    pos = host_positions(layout, 2, 2 * block_tokens)
    if which == "diagonal":
        return pos[0], pos[0]
    return (pos[1], pos[0]) if which == "early-keys" else (pos[0], pos[1])


def measure_masked(
    block_tokens: int,
    *,
    heads: int,
    head_dim: int,
    dtype: str,
    device: str = "cpu",
    repeats: int = 5,
    barrier=lambda: None,
    received: bool = False,
) -> list[dict]:
    """The ring step of each of ``MASKED_BLOCKS`` at block size ``c`` (the ring's calls, with
    the block's global positions and the causal mask), with the tile-granular fraction of the
    block the kernel computes (``ringsim.masks.count_visible``, the simulator's count).
    ``received``: as in ``measure_compute``."""
    import torch

    from kernels.block import block_attention
    from kernels.ring import merge_out_lse
    from kernels.torch_block import TILE
    from ringsim.masks import count_visible

    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    torch_dtype = getattr(torch, TORCH_DTYPES[dtype])
    c = block_tokens
    q, k, v = (torch.randn(1, heads, c, head_dim, device=device, dtype=torch_dtype) for _ in "qkv")
    kv, state = torch.stack([k, v]), block_attention(q, k, v, out_dtype=torch.float32)
    rows = []
    for name in MASKED_BLOCKS:
        q_pos, k_pos = _masked_block(name, c)
        work = count_visible(q_pos, k_pos, causal=True, tile=TILE if device == "cpu" else 64)
        q_t, k_t = (torch.as_tensor(p, device=device) for p in (q_pos, k_pos))

        def step(block, q_t=q_t, k_t=k_t):
            out_b, lse_b = block_attention(
                q, *block, q_pos=q_t, k_pos=k_t, causal=True, out_dtype=torch.float32
            )
            return merge_out_lse(*state, out_b, lse_b)

        if received:
            seconds = _received_time(step, kv, repeats)
        else:
            barrier()
            seconds = _median_time(lambda step=step: step(kv), repeats, sync, min_time_s=0.05)
        full = attention_flops(c, c, heads, head_dim)
        rows.append({"block_tokens": c, "block": name, "work": work / c**2,
                     "flops": full * work / c**2, "seconds": seconds})  # fmt: skip
    return rows


def measure_solo(
    sizes: Sequence[int],
    *,
    heads: int,
    head_dim: int,
    dtype: str,
    repeats: int = 5,
    received: bool = False,
) -> list[dict]:
    """The full-block ring step of ``measure_compute`` on one rank at a time while the others
    wait (each rank returns its own turns' rows). ``received``: on a block just received, as
    in ``measure_compute`` (the others exchange with it, then wait in the next exchange)."""
    import torch
    import torch.distributed as dist

    if received:
        from kernels.block import block_attention
        from kernels.ring import merge_out_lse

        torch_dtype = getattr(torch, TORCH_DTYPES[dtype])
        rows = []
        for c in sizes:
            q, k, v = (torch.randn(1, heads, c, head_dim, dtype=torch_dtype) for _ in "qkv")
            state = block_attention(q, k, v, out_dtype=torch.float32)

            def step(kv, q=q, state=state):
                return merge_out_lse(*state, *block_attention(q, *kv, out_dtype=torch.float32))

            for turn in range(dist.get_world_size()):
                mine = dist.get_rank() == turn
                seconds = _received_time(step, torch.stack([k, v]), repeats, active=mine)
                if mine:
                    flops = attention_flops(c, c, heads, head_dim)
                    rows.append({"block_tokens": c, "flops": flops, "seconds": seconds})
        return rows
    rows = []
    for turn in range(dist.get_world_size()):
        dist.barrier()
        if dist.get_rank() == turn:
            rows = measure_compute(sizes, heads=heads, head_dim=head_dim, dtype=dtype,
                                   repeats=repeats)  # fmt: skip
        dist.barrier()
    return rows


def measure_overlap(
    block_tokens: int,
    *,
    heads: int,
    head_dim: int,
    dtype: str,
    repeats: int = 5,
    kv_heads: int | None = None,
) -> dict:
    """Does a transfer progress while the rank computes? Median seconds of the full-block step
    alone (``compute_s``), of the exchange of its ``k, v`` alone (``transfer_s``) and of a
    ring step (``step_s``: post the exchange, compute, wait), every rank at once. Perfect
    overlap makes ``step = max``, none ``step = compute + transfer``;
    ``Calibration.overlap_efficiency`` reads which (and contention, ``step > compute +
    transfer``). ``kv_heads``: for a GQA run, so the message is the run's (default ``heads``)."""
    import torch
    import torch.distributed as dist

    from kernels.block import block_attention
    from kernels.ring import merge_out_lse, start_line

    rank, hosts = dist.get_rank(), dist.get_world_size()
    nxt, prv = (rank + 1) % hosts, (rank - 1) % hosts
    torch_dtype = getattr(torch, TORCH_DTYPES[dtype])
    c = block_tokens
    q = torch.randn(1, heads, c, head_dim, dtype=torch_dtype)
    k, v = (torch.randn(1, kv_heads or heads, c, head_dim, dtype=torch_dtype) for _ in "kv")
    incoming = [torch.empty_like(k), torch.empty_like(v)]
    state = block_attention(q, k, v, out_dtype=torch.float32)

    def compute():
        merge_out_lse(*state, *block_attention(q, k, v, out_dtype=torch.float32))

    def post():  # as a ring step posts its block: k and v, two messages at once
        ops = [dist.P2POp(dist.isend, t, nxt) for t in (k, v)]
        ops += [dist.P2POp(dist.irecv, t, prv) for t in incoming]
        return dist.batch_isend_irecv(ops)

    def transfer():
        for work in post():
            work.wait()

    def step():
        works = post()
        compute()
        for work in works:
            work.wait()

    times = {"compute_s": [], "transfer_s": [], "step_s": []}
    compute(), transfer(), step()
    for _ in range(max(repeats, 3)):  # interleaved: a drifting load hits all three alike
        for key, fn in (("compute_s", compute), ("transfer_s", transfer), ("step_s", step)):
            start_line()  # as a timed ring pass starts
            t0 = time.perf_counter()
            fn()
            times[key].append(time.perf_counter() - t0)
    row = {key: statistics.median(values) for key, values in times.items()}
    return {"block_tokens": c, "bytes": 2 * k.numel() * k.element_size(), **row}


# (tokens per host, heads, head_dim) of the near-empty ring pass that measures a ring call's
# fixed cost: its blocks take a call's overhead and its messages a latency, nothing more
PASS_PROBE = (2, 1, 1)


def measure_ring_pass(*, layout: str, dtype: str, repeats: int = 5) -> dict:
    """A ring call's fixed cost, paid the way the comparison pays it: ``kernels.ring.run_ring``
    (``start_line``, then ``ring_attention``, timed as every measured ring is) on every rank of the
    world group at once, with ``PASS_PROBE`` blocks (near-zero compute, 8-byte messages).
    The probe pass is never causal, even for a causal run: a tiny masked block costs about
    twice a full one on the torch path (it builds its mask), which the simulation of the
    probe's steps (each block at ``block_s``) would wrongly book as fixed cost; masked blocks
    are priced at the run's own block size instead (``Calibration.masked_speed_at``).
    Returns ``{layout, causal, hosts, block_tokens, heads, head_dim, seconds}``, ``seconds``
    the median over repeats of the slowest rank's wall time (gathered: every rank returns the
    same row), and ``block_s``: the slowest rank's step on one such block.
    ``Calibration.pass_overhead`` takes from it the simulated time of its steps."""
    import torch.distributed as dist

    from kernels.ring import RunConfig, run_ring

    c, heads, head_dim = PASS_PROBE
    hosts = dist.get_world_size()
    config = RunConfig(
        seq_len=c * hosts, heads=heads, head_dim=head_dim, layout=layout, causal=False,
        dtype=TORCH_DTYPES[dtype], backward=False, repeats=max(repeats, 3), warmup=1,
        return_tensors=False,
    )  # fmt: skip
    times = run_ring(dist.get_rank(), hosts, config)["forward_s"]
    # its blocks' cost (the ring's step on a just-received block of this shape): the per-call
    # overhead of the profile is fitted at the run's shape, where it also holds per-head work
    (block,) = measure_compute([c], heads=heads, head_dim=head_dim, dtype=dtype,
                               repeats=max(repeats, 3), received=True)  # fmt: skip
    every: list = [None] * hosts
    dist.all_gather_object(every, (times, block["seconds"]))
    slowest = np.max(np.array([t for t, _ in every], float), axis=0)
    return {"layout": layout, "causal": False, "hosts": hosts, "block_tokens": c,
            "heads": heads, "head_dim": head_dim, "seconds": float(np.median(slowest)),
            "block_s": max(b for _, b in every)}  # fmt: skip


def measure_link_p2p(sizes: Sequence[int], *, repeats: int = 5, device: str = "cpu") -> dict:
    """Ping-pong (rank 0 <-> 1, one message at a time) and ring exchange (every rank sends to
    ``rank + 1`` and receives from ``rank - 1`` at once) with ``batch_isend_irecv``."""
    import torch
    import torch.distributed as dist

    from kernels.ring import start_line

    rank, hosts = dist.get_rank(), dist.get_world_size()
    nxt, prv = (rank + 1) % hosts, (rank - 1) % hosts
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    result = {"pingpong": [], "exchange": []}
    for n in sizes:
        buf = torch.zeros(max(1, n // 4), dtype=torch.float32, device=device)
        other = torch.empty_like(buf)

        def pingpong(buf=buf, other=other):
            if rank == 0:
                _batch([("send", buf, 1)])
                _batch([("recv", other, 1)])
            elif rank == 1:
                _batch([("recv", other, 0)])
                _batch([("send", buf, 0)])

        def exchange(buf=buf, other=other):
            _batch([("send", buf, nxt), ("recv", other, prv)])

        count = repeats * (4 if n <= 2**22 else 1)  # the same on every rank
        start_line()
        t_pp = _median_time(pingpong, count, sync) / 2  # one way
        start_line()
        t_ex = _median_time(exchange, count, sync)
        result["pingpong"].append({"bytes": buf.numel() * 4, "seconds": t_pp})
        result["exchange"].append({"bytes": buf.numel() * 4, "seconds": t_ex})
    return result


def _batch(ops: list[tuple]) -> None:
    import torch.distributed as dist

    p2p = [
        dist.P2POp(dist.isend if kind == "send" else dist.irecv, tensor, peer)
        for kind, tensor, peer in ops
    ]
    for work in dist.batch_isend_irecv(p2p):
        work.wait()


def measure_link_h2d(sizes: Sequence[int], *, repeats: int = 5) -> list[dict]:
    """Host-to-device copies from pinned memory (the emulated link of one GPU ring member)."""
    import torch

    rows = []
    for n in sizes:
        host = torch.empty(max(1, n // 4), dtype=torch.float32).pin_memory()
        dev = torch.empty(host.shape, dtype=torch.float32, device="cuda")
        seconds = _median_time(
            lambda host=host, dev=dev: dev.copy_(host, non_blocking=True),
            repeats,
            torch.cuda.synchronize,
        )
        rows.append({"bytes": host.numel() * 4, "seconds": seconds})
    return rows


def _rank_worker(rank: int, hosts: int, spec: dict) -> dict:
    """Inside a launched rank: compute curve (all ranks at once) and the link."""
    import torch
    import torch.distributed as dist

    device = "cuda" if spec["backend"] == "nccl" else "cpu"
    received = device == "cpu"  # local ranks: blocks computed as they arrive (_received_time)
    compute = measure_compute(
        spec["sizes"], heads=spec["heads"], head_dim=spec["head_dim"], dtype=spec["dtype"],
        device=device, repeats=spec["repeats"], barrier=dist.barrier, received=received,
    )  # fmt: skip
    link = measure_link_p2p(spec["bytes"], repeats=spec["repeats"], device=device)
    shape = dict(heads=spec["heads"], head_dim=spec["head_dim"], dtype=spec["dtype"])
    masked = [
        row
        for c in spec.get("masked_sizes", ())
        for row in measure_masked(
            c,
            **shape,
            device=device,
            repeats=spec["repeats"],
            barrier=dist.barrier,
            received=received,
        )
    ]
    solo, overlap, setup = [], [], []
    if device == "cpu":
        reps = spec["repeats"]
        solo = measure_solo(spec.get("solo_sizes", ()), **shape, repeats=reps, received=True)
        overlap = [
            measure_overlap(c, **shape, repeats=3 * reps) for c in spec.get("step_sizes", ())
        ]
        setup = [measure_ring_pass(layout="contiguous", dtype=spec["dtype"],
                                   repeats=3 * reps)] if spec.get("step_sizes") else []  # fmt: skip
    return {"compute": compute, **link, "masked": masked, "solo": solo, "overlap": overlap,
            "ring_pass": setup, "threads": torch.get_num_threads()}  # fmt: skip


def _combine(per_rank: list[dict], key: str, value: str) -> list[dict]:
    """Rows of every rank merged: the slowest rank's time (the ring waits for it)."""
    rows = []
    for i, row in enumerate(per_rank[0][key]):
        rows.append({**row, value: max(r[key][i][value] for r in per_rank)})
    return rows


def calibrate_data(
    backend: str = "gloo",
    *,
    hosts: int = 2,
    heads: int = 4,
    head_dim: int = 64,
    dtype: str | None = None,
    sizes: Sequence[int] = DEFAULT_SIZES,
    link_bytes: Sequence[int] = DEFAULT_BYTES,
    repeats: int = 5,
    threads: int = 1,
    timeout_s: float = 120.0,
    masked_sizes: Sequence[int] = (),
    solo_sizes: Sequence[int] = (),
    step_sizes: Sequence[int] = (),
) -> Calibration:
    """Run the measurements for ``backend`` and return them with their fits; ``masked_sizes``,
    ``solo_sizes`` and ``step_sizes``: the block sizes at which to time masked blocks, a lone
    rank, and a ring step's overlap and a ring call's fixed cost (the last three on local
    gloo ranks only; by default none: neutral terms)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    dtype = dtype or ("fp32" if backend == "gloo" else "bf16")
    if dtype not in TORCH_DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(TORCH_DTYPES)}, got {dtype!r}")
    if len(sizes) < 2 or len(link_bytes) < 2:
        raise ValueError("sizes and link_bytes need at least two values each to fit a line")
    cal = Calibration(backend, dtype, heads, head_dim, threads, hosts, machine=platform.node())
    cal.when = date.today().isoformat()
    if backend == "cuda":
        import torch

        cal.machine = torch.cuda.get_device_name(0)
        cal.hosts = 1
        shape = dict(heads=heads, head_dim=head_dim, dtype=dtype, device="cuda", repeats=repeats)
        cal.compute = measure_compute(sizes, **shape)
        cal.masked = [row for c in masked_sizes for row in measure_masked(c, **shape)]
        cal.pingpong = cal.exchange = measure_link_h2d(link_bytes, repeats=repeats)
        return cal
    from kernels.ring import launch

    spec = dict(
        backend=backend, sizes=list(sizes), bytes=list(link_bytes), heads=heads,
        head_dim=head_dim, dtype=dtype, repeats=repeats, masked_sizes=list(masked_sizes),
        solo_sizes=list(solo_sizes), step_sizes=list(step_sizes),
    )  # fmt: skip
    per_rank = launch(
        _rank_worker, hosts, args=(spec,), backend=backend, timeout_s=timeout_s, threads=threads
    )
    for key in ("compute", "pingpong", "exchange", "masked", "solo", "ring_pass"):
        setattr(cal, key, _combine(per_rank, key, "seconds"))
    cal.overlap = [
        {**row, **{k: max(r["overlap"][i][k] for r in per_rank) for k in row if k.endswith("_s")}}
        for i, row in enumerate(per_rank[0]["overlap"])
    ]
    return cal


def calibrate(backend: str = "gloo", *, path: str | Path | None = None, **kwargs):
    """Measure this machine (see ``calibrate_data``) and return its ``Hardware`` profile;
    with ``path``, save it there (``ringsim.hardware.save_profile``) and the raw data beside
    it (``<stem>-data.json``)."""
    cal = calibrate_data(backend, **kwargs)
    hw = cal.hardware()
    if path is not None:
        save_calibration(cal, path)
    return hw


def save_calibration(cal: Calibration, path: str | Path) -> tuple[Path, Path]:
    """The profile at ``path`` and the raw measurements at ``<stem>-data.json`` (a name the
    ``cpu-profile*.json`` preset glob also matches, so it is written as ``calibration``)."""
    from ringsim.hardware import save_profile

    path = Path(path)
    save_profile(cal.hardware(), path)
    data_path = path.with_name(path.stem.replace("profile", "calibration") + ".json")
    if data_path == path:
        data_path = path.with_name(path.stem + "-calibration.json")
    data_path.write_text(json.dumps(cal.to_json(), indent=2) + "\n")
    return path, data_path


def default_profile_path(backend: str) -> Path:
    from ringsim.hardware import RESULTS_DIR

    kind = "cpu" if backend == "gloo" else "gpu"
    return RESULTS_DIR / f"{kind}-profile-{date.today().isoformat()}.json"


def _int_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(
        prog="ringsim calibrate",
        description="Measure block compute and link; save a profile.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="""examples:
  ringsim calibrate                   2 gloo ranks; writes results/cpu-profile-<date>.json
  ringsim calibrate --no-save --json  print the fitted profile, write nothing
  ringsim calibrate --backend cuda --dtype bf16   (on a GPU: results/gpu-profile-<date>.json)
then: ringsim simulate --hardware cpu-calibrated --hosts 2 --seq-len 4K""",
    )
    parser.add_argument("--backend", choices=BACKENDS, default="gloo")
    parser.add_argument("--hosts", type=int, default=2, help="local ranks (gloo/nccl)")
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--dtype", choices=sorted(TORCH_DTYPES), default=None)
    parser.add_argument("--sizes", type=_int_list, default=list(DEFAULT_SIZES))
    parser.add_argument("--bytes", type=_int_list, default=list(DEFAULT_BYTES))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--masked-sizes", type=_int_list, default=None,
        help="block sizes at which to time masked blocks (default: the largest of --sizes)",
    )  # fmt: skip
    parser.add_argument(
        "--solo-sizes", type=_int_list, default=None,
        help="block sizes at which to time a lone rank (default: the largest of --sizes)",
    )  # fmt: skip
    parser.add_argument(
        "--step-sizes", type=_int_list, default=None,
        help="block sizes at which to time a ring call's fixed cost (and, once, whether a "
        "transfer overlaps a step's compute; default: the largest of --sizes)",
    )  # fmt: skip
    parser.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    parser.add_argument("--out", default=None, help="profile path (default results/...)")
    parser.add_argument("--no-save", action="store_true")
    parser.add_argument("--json", action="store_true")
    return parser


def calibrate_main(argv: Sequence[str] | None = None) -> int:
    """``ringsim calibrate [--backend gloo|nccl|cuda] [...] [--json]``."""
    args = build_parser().parse_args(argv)
    cal = calibrate_data(
        args.backend, hosts=args.hosts, heads=args.heads, head_dim=args.head_dim,
        dtype=args.dtype, sizes=args.sizes, link_bytes=args.bytes, repeats=args.repeats,
        threads=args.threads, masked_sizes=args.masked_sizes or [max(args.sizes)],
        solo_sizes=args.solo_sizes or [max(args.sizes)],
        step_sizes=args.step_sizes or [max(args.sizes)],
    )  # fmt: skip
    paths = None
    if not args.no_save:
        paths = save_calibration(cal, args.out or default_profile_path(args.backend))
    hw = cal.hardware()
    report = {
        "backend": cal.backend,
        "profile": {**asdict(hw)},
        **cal.summary(),
        "compute": cal.compute,
        "exchange": cal.exchange,
        "pingpong": cal.pingpong,
        "masked": cal.masked,
        "solo": cal.solo,
        "overlap": cal.overlap,
        "ring_pass": cal.ring_pass,
        "saved": [str(p) for p in paths] if paths else None,
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(hw.source)
        for row in cal.compute:
            rate = row["flops"] / row["seconds"]
            print(f"  block {row['block_tokens']:6d}: {row['seconds'] * 1e3:8.3f} ms  "
                  f"{rate / 1e9:7.2f} GFLOP/s")  # fmt: skip
        for row in cal.exchange:
            print(f"  exchange {row['bytes']:9d} B: {row['seconds'] * 1e6:9.1f} us  "
                  f"{row['bytes'] / row['seconds'] / 1e9:6.2f} GB/s")  # fmt: skip
        if paths:
            print("saved", *paths)
    return 0 if all(math.isfinite(v) for v in cal.summary().values()) else 1
