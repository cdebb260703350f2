"""A simulated run's result: ``SimResult`` (the timeline and its summary) and the readers of a
timeline that views share (``kv_messages``, ``grad_rows``, ``count_events``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ringsim.schedule import Schedule
from ringsim.timer.clock import decode_seconds
from ringsim.timer.config import RingConfig
from ringsim.timer.cost import kv_block_bytes, overlap_threshold
from ringsim.timer.memory import attention_working_set_bytes
from ringsim.timer.timeline import Timeline


@dataclass
class SimResult:
    """A simulated run: its config, its ``Timeline`` and the schedule it executed (``None`` for
    decode, whose cache never moves; for a ``train-step`` the backward ring's schedule)."""

    config: RingConfig
    timeline: Timeline
    schedule: Schedule | None
    flops_total: float = 0.0
    engine: str = "vectorized"

    @cached_property
    def makespan(self) -> float:
        """``timeline.makespan`` without copying the big arrays (every receive ends when its
        send does, so the receive arrays need no scan)."""
        tl = self.timeline
        return float(max(_fmax_all(tl.compute_end), _fmax_all(tl.send_end)))

    @cached_property
    def _compute_busy(self) -> np.ndarray:
        return _column_busy(self.timeline.compute_start, self.timeline.compute_end)

    def compute_busy(self) -> np.ndarray:
        """``(hosts,)`` seconds each host computes (``timeline.busy("compute")``)."""
        return self._compute_busy.copy()

    def link_busy(self) -> np.ndarray:
        """``(hosts,)`` seconds each outgoing link carries data (both backward messages)."""
        tl = self.timeline
        busy = _column_busy(tl.send_start, tl.send_end)
        if "send" in kv_messages(tl):
            busy = busy + _column_busy(*kv_messages(tl)["send"])
        return busy

    @property
    def idle_fraction(self) -> float:
        """``timeline.idle_fraction``: ``1 - sum of compute / (hosts * makespan)``."""
        span = self.makespan
        if span == 0:
            return 0.0
        return float(1.0 - self._compute_busy.sum() / (self.config.hosts * span))

    def summary(self) -> dict:
        """The JSON figures of ``ringsim simulate`` (keys fixed by DESIGN.md, plus a few)."""
        cfg = self.config
        total = self.makespan
        compute = float(self._compute_busy.max())
        result = {
            "hosts": cfg.hosts,
            "seq_len": cfg.seq_len,
            "block_tokens": cfg.block_tokens,
            "layout": cfg.layout,
            "causal": cfg.causal,
            "overlap": cfg.overlap,
            "pass": cfg.pass_,
            "hardware": cfg.hardware.name,
            "dtype": cfg.dtype,
            "heads": cfg.heads,
            "kv_heads": cfg.kv_heads,
            "head_dim": cfg.head_dim,
            "batch": cfg.batch,
            "total_time_s": total,
            "compute_time_s": compute,
            "exposed_comm_s": total - compute,
            "comm_time_s": float(self.link_busy().max()),
            "idle_fraction": self.idle_fraction,
            "min_block_for_overlap": min_block_for_overlap(cfg),
            "memory_per_host_bytes": memory_per_host_bytes(cfg),
            "flops_total": self.flops_total,
            "engine": self.engine,
            "events": count_events(self.timeline),
        }
        if cfg.pass_ == "decode":
            single = decode_seconds(cfg, cfg.seq_len)
            cache = kv_block_bytes(
                cfg.seq_len, cfg.kv_heads, cfg.head_dim, cfg.dtype, batch=cfg.batch
            )
            result["single_device_time_s"] = single
            result["speedup_vs_single_device"] = single / total if total > 0 else math.inf
            result["cache_bytes_total"] = cache
            result["cache_fits_one_device"] = bool(cache <= cfg.hardware.memory_bytes)
        return result


_CHUNK = 256  # rows per chunk: reductions over (4096, 4096) arrays without 134 MB temporaries


def _fmax_all(x: np.ndarray) -> float:
    """Largest finite entry (NaN ignored), 0 if there is none."""
    best = 0.0
    for r in range(0, x.shape[0], _CHUNK):
        part = np.fmax.reduce(x[r : r + _CHUNK], axis=None)
        if part > best:
            best = float(part)
    return best


def _column_busy(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """``(hosts,)`` sum over steps of ``end - start``, NaN (no activity) counting zero."""
    total = np.zeros(start.shape[1])
    for r in range(0, start.shape[0], _CHUNK):
        span = end[r : r + _CHUNK] - start[r : r + _CHUNK]
        span[np.isnan(span)] = 0.0
        total += span.sum(axis=0)
    return total


def count_events(timeline: Timeline) -> int:
    """Compute intervals plus link transfers (each backward step's two messages count two)."""
    events = int(np.isfinite(timeline.compute_start).sum() + np.isfinite(timeline.send_start).sum())
    if "send" in kv_messages(timeline):
        events += int(np.isfinite(kv_messages(timeline)["send"][0]).sum())
    return events


def kv_messages(timeline: Timeline) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The early ``k, v`` messages of a backward timeline (with overlap), read from its meta:
    ``{"send": (start, end), "recv": (start, end)}``, ``(steps, hosts)`` each, NaN where none
    moves; ``{}`` for a timeline without them."""
    meta = timeline.meta
    return {
        side: (meta[f"kv_{side}_start"], meta[f"kv_{side}_end"])
        for side in ("send", "recv")
        if f"kv_{side}_start" in meta
    }


def grad_rows(timeline: Timeline) -> np.ndarray:
    """``(steps,)`` bool: the rows whose ``send``/``recv`` arrays carry ``dk, dv`` rather than a
    block (the backward ring's rows of a timeline that has ``kv_messages``; none otherwise)."""
    if "kv_send_start" not in timeline.meta:
        return np.zeros(timeline.steps, bool)
    return np.asarray(timeline.meta.get("grad_rows", np.ones(timeline.steps, bool)), bool)


def min_block_for_overlap(config: RingConfig) -> float | None:
    """``overlap_threshold`` for the config's pass, latency included, for a full block (a causal
    zigzag or striped ring needs about twice it); a training step takes the larger of forward
    and backward; ``None`` for decode, where no block moves."""
    if config.pass_ == "decode":
        return None
    kw = dict(
        heads=config.heads,
        kv_heads=config.kv_heads,
        head_dim=config.head_dim,
        dtype=config.dtype,
        batch=config.batch,
        grad_dtype=config.grad_dtype,
    )
    passes = ("forward", "backward") if config.pass_ == "train-step" else (config.pass_,)
    return max(overlap_threshold(config.hardware, pass_=p, **kw) for p in passes)


def memory_per_host_bytes(config: RingConfig) -> float:
    """The attention layer's working set on one host (``ringsim.timer.memory`` owns the
    accounting)."""
    args = (config.block_tokens, config.heads, config.kv_heads, config.head_dim, config.dtype)
    return float(attention_working_set_bytes(*args, pass_=config.pass_, batch=config.batch))
