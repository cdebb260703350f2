"""The profile fit: a calibration's raw rows turned into a
``ringsim.timer.machine.hardware.Hardware``.

Block times are fitted as ``t(c) = overhead + flops(c) / rate`` and link times as
``t(n) = latency + n / bandwidth`` (``fit_line``: Theil-Sen through the sizes' medians, so a
few slow samples cannot tilt the line). ``Calibration`` holds the rows of every probe
(``kernels.calibration.probes``) and builds the profile for a given block size
(``Calibration.hardware``): ``block_overhead_s`` is the fixed cost per call (the time of the
smallest block measured, less its FLOPs at the large-block rate), the FLOP rate the one that,
with that overhead, reproduces the measured full block at ``c``; ``masked_speed``,
``solo_speed`` and the overlap efficiency come from the rows at (or nearest to) ``c``.

How sure the fit is: ``Calibration.resampled`` redraws every row's samples (a bootstrap),
``pooled`` merges the calibrations of several repeats row by row (medians), and
``parameter_intervals`` reads the 95% range of each profile parameter over such draws.
"""

from __future__ import annotations

import math
import platform
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import date

import numpy as np

from ringsim.timer.cost import attention_flops

TORCH_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


@dataclass
class Fit:
    """``t = intercept + x / rate`` (x in FLOPs or bytes)."""

    intercept: float
    rate: float

    def time(self, x: float) -> float:
        return self.intercept + x / self.rate


def fit_line(x: Sequence[float], t: Sequence[float]) -> Fit:
    """Robust ``t = a + x / rate`` with ``a >= 0``: samples at the same ``x`` are taken as
    their median, then Theil-Sen through those points (the slope is the median of the slopes
    between every two of them, the intercept the median of ``t - slope x``). A negative
    intercept (noise) is clamped to 0 and the rate refitted through the origin (least
    squares, led by the largest sizes). Slow samples at a size move its median little, and
    one bad size among three or more moves the line little; least squares follows every
    outlier."""
    x, t = np.asarray(x, float), np.asarray(t, float)
    if len(x) < 2 or np.ptp(x) == 0:
        raise ValueError(f"fit needs at least two distinct sizes, got {sorted(set(x.tolist()))}")
    sizes, which = np.unique(x, return_inverse=True)
    if len(sizes) < len(x):
        t = np.array([np.median(t[which == k]) for k in range(len(sizes))])
        x = sizes
    i, j = np.triu_indices(len(x), k=1)
    slope = float(np.median((t[j] - t[i]) / (x[j] - x[i])))
    intercept = float(np.median(t - slope * x))
    if intercept < 0 or slope <= 0:  # least squares through the origin: the large sizes lead
        slope, intercept = float(np.dot(x, t) / np.dot(x, x)), 0.0
    if slope <= 0:
        raise ValueError(f"times do not grow with size: {list(t)}")
    return Fit(intercept, 1.0 / slope)


def _points(rows: list[dict], key: str) -> tuple[list[float], list[float]]:
    """``(x, t)`` of rows for ``fit_line``: each row's ``key`` and median ``seconds``."""
    return [r[key] for r in rows], [r["seconds"] for r in rows]


TIMED = ("seconds", "compute_s", "transfer_s", "step_s")  # the timed fields of a probe row
ROWS = ("compute", "pingpong", "exchange", "masked", "solo", "overlap", "ring_pass")


def combine_ranks(rows: Sequence[dict]) -> dict:
    """One probe row measured on every rank, as the ring sees it: each timed field from the
    slowest rank (the ring waits for it), with that rank's samples; the widest spread."""
    out = dict(rows[0])
    for key in (k for k in TIMED if k in out):
        slowest = max(rows, key=lambda r: r[key])
        out[key] = slowest[key]
        samples = slowest.get("samples")
        if isinstance(samples, dict):
            out["samples"] = {**out.get("samples", {}), key: samples[key]}
        elif samples is not None:
            out["samples"] = samples
    if any("spread" in r for r in rows):
        out["spread"] = max(r.get("spread", 0.0) for r in rows)
    return out


def _resample_row(row: dict, rng: np.random.Generator) -> dict:
    """``row`` with its samples redrawn with replacement and its timed fields their medians."""
    samples = row.get("samples")
    if not samples:
        return row
    if isinstance(samples, dict):
        n = min(len(v) for v in samples.values())
        idx = rng.integers(0, n, n)  # the fields' samples were taken interleaved: draw jointly
        drawn = {k: [v[i] for i in idx] for k, v in samples.items()}
        return {**row, "samples": drawn, **{k: float(np.median(v)) for k, v in drawn.items()}}
    drawn = [samples[i] for i in rng.integers(0, len(samples), len(samples))]
    return {**row, "samples": drawn, "seconds": float(np.median(drawn))}


def _pool_rows(rows: Sequence[dict]) -> dict:
    """The same probe row from several calibrations: timed fields their median, samples
    together, the median spread and the most attempts."""
    out = dict(rows[0])
    for key in (k for k in TIMED if k in out):
        out[key] = float(np.median([r[key] for r in rows]))
    first = rows[0].get("samples")
    if isinstance(first, dict):
        out["samples"] = {k: [t for r in rows for t in r["samples"][k]] for k in first}
    elif first is not None:
        out["samples"] = [t for r in rows for t in r["samples"]]
    if "spread" in out:
        out["spread"] = float(np.median([r.get("spread", 0.0) for r in rows]))
    if "attempts" in out:
        out["attempts"] = max(r.get("attempts", 1) for r in rows)
    return out


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
    chip: dict | None = None
    """A GPU's ``compute_capability`` and ``sms`` as its runtime reported them (``None``: the
    host CPU, as a gloo calibration measures)."""

    @property
    def compute_fit(self) -> Fit:
        return fit_line(*_points(self.compute, "flops"))

    def link_fit(self, kind: str = "exchange") -> Fit:
        return fit_line(*_points(getattr(self, kind) or self.pingpong, "bytes"))

    def resampled(self, rng: np.random.Generator) -> Calibration:
        """A bootstrap draw: every row's samples redrawn with replacement (rows without
        samples as they are)."""
        rows = {key: [_resample_row(r, rng) for r in getattr(self, key)] for key in ROWS}
        return replace(self, **rows)

    @classmethod
    def pooled(cls, calibrations: Sequence[Calibration]) -> Calibration:
        """Several calibrations of the same probes (the repeats of a paired measurement) as
        one: each row's timed fields the median over them, their samples together; the
        ``overlap`` and ``ring_pass`` rows all kept (their terms are medians over rows)."""
        first = calibrations[0]
        rows = {}
        for key in ROWS:
            lists = [getattr(c, key) for c in calibrations]
            if key in ("overlap", "ring_pass") or len({len(r) for r in lists}) > 1:
                rows[key] = [row for rows_ in lists for row in rows_]
            else:
                rows[key] = [_pool_rows(same) for same in zip(*lists, strict=True)]
        return replace(first, **rows)

    def quality(self) -> dict:
        """The probe-quality figure per probe: ``spread`` (the widest relative interquartile
        range of its rows' samples), ``attempts`` (the most tries a row took, ``re-probe``)
        and ``samples`` (their count); probes without rows or saved without spreads left
        out."""
        out = {}
        for key in ROWS:
            rows = [r for r in getattr(self, key) if "spread" in r]
            if rows:
                out[key] = {
                    "spread": max(r["spread"] for r in rows),
                    "attempts": max(r.get("attempts", 1) for r in rows),
                    "samples": sum(_count(r.get("samples")) for r in rows),
                }
        return out

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
        and the link are: on gloo the transport needs the core the rank computes on, and how
        they share it depends on the message and the block (results/notes-calibration.md)."""
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
        from kernels.blocks.torch_block import TILE
        from ringsim.timer import RingConfig, simulate

        hw = self.hardware(pass_overhead=False)
        hw = replace(hw, block_overhead_s=row["block_s"], masked_speed=1.0, solo_speed=1.0)
        config = RingConfig(
            hosts=row["hosts"],
            seq_len=row["block_tokens"] * row["hosts"],
            hardware=hw,
            heads=row["heads"],
            head_dim=row["head_dim"],
            dtype=self.dtype,
            layout=row["layout"],
            causal=row["causal"],
            tile=TILE if self.backend == "gloo" else 64,
        )
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
        """A ``ringsim.timer.machine.hardware.Hardware`` for blocks of ``block_tokens`` (default:
        the largest block measured) with ``heads``/``head_dim`` (default: as calibrated): the FLOP
        rate and per-call overhead that reproduce the full block at ``c``, the masked-block and
        lone-host speeds at ``c``, the ``link`` fit (``exchange`` or ``pingpong``) and, with
        ``pass_overhead``, the measured ``pass_overhead()`` (else 0)."""
        from ringsim.timer.machine.arch import CPU, device_arch
        from ringsim.timer.machine.hardware import Hardware

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
            arch=CPU if self.chip is None else device_arch(**self.chip),
            device=self.machine,
        )

    def kernel_family(self, block_tokens: int | None = None):
        """The ``"torch"`` kernel family of ``ringsim.timer.machine.kernel_model`` from this fit:
        the fixed cost per call (``block_overhead()``) and the masked-tile speed at ``block_tokens``
        (default: the largest block measured); its rate is ``hardware()``'s."""
        from ringsim.timer.machine.families import torch_family

        c = block_tokens or max(r["block_tokens"] for r in self.compute)
        return torch_family(
            call_overhead_s=self.block_overhead(),
            masked_speed=self.masked_speed_at(c),
            source=f"calibrated {self.when} on {self.machine or self.backend} at c={c}",
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


def _count(samples) -> int:
    if isinstance(samples, dict):
        return min((len(v) for v in samples.values()), default=0)
    return len(samples or [])


def bootstrap(calibration: Calibration, draws: int = 100, seed: int = 0) -> list[Calibration]:
    """``draws`` bootstrap draws of ``calibration`` (``Calibration.resampled``), seeded."""
    rng = np.random.default_rng(seed)
    return [calibration.resampled(rng) for _ in range(draws)]


def hardware_parameters(hw) -> dict[str, float]:
    """The calibrated parameters of a ``Hardware`` (its one dtype's FLOP rate and the terms)."""
    return {
        "flop_rate": float(next(iter(hw.flops.values()))),
        "block_overhead_s": hw.block_overhead_s,
        "link_bandwidth": hw.link_bandwidth,
        "link_latency_s": hw.link_latency,
        "masked_speed": hw.masked_speed,
        "solo_speed": hw.solo_speed,
        "overlap_efficiency": hw.overlap_efficiency,
        "pass_overhead_s": hw.pass_overhead_s,
    }


def parameter_intervals(hardwares: Sequence) -> dict[str, list[float]]:
    """95% range (2.5th to 97.5th percentile) of each ``hardware_parameters`` value over
    ``hardwares`` (the profiles of bootstrap draws)."""
    values = [hardware_parameters(hw) for hw in hardwares]
    return {
        key: [float(x) for x in np.percentile([v[key] for v in values], [2.5, 97.5])]
        for key in values[0]
    }


def _memory_bytes(backend: str) -> float:
    if backend in ("cuda", "nccl"):
        import torch

        return float(torch.cuda.get_device_properties(0).total_memory)
    try:
        import os

        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 16e9
