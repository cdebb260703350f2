"""Durations: one clock per run, shared by both engines (and the peers), so they see the very
same floats. ``HostClock`` holds the speed, jitter, kernel and overlap rules of the timer
(``ringsim.timer.engine.engines`` states them); ``Costs`` draws a run's per-step durations in a
fixed order and counts its FLOPs.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ringsim.schedule import BlockKind, Pass, Schedule
from ringsim.timer.engine.config import Noise, RingConfig
from ringsim.timer.engine.ring_steps import (
    StepModel,
    gqa_backward_seconds,
    grad_seconds,
    merge_seconds,
)
from ringsim.timer.machine.collectives import overlap_efficiency, p2p_seconds
from ringsim.timer.machine.kernel_model import decode_call_seconds
from ringsim.timer.machine.links import ACHIEVED


class HostClock:
    """How long things take on each of a run's ``P`` hosts: the timer's speed and jitter rules.

    * compute: host ``h`` runs at ``flops_rate * speed[h]`` FLOP/s (``speed`` defaults to 1);
    * transfer: ``messages * link_latency + bytes / link_bandwidth`` on the host's link;
    * jitter: every duration is multiplied by its own ``1 + jitter * u``, ``u ~ U[0, 1)``, from
      one generator seeded with ``config.seed``. Each call that returns durations draws ``P``
      numbers (none without jitter, or for an empty transfer), so two runs that make the same
      calls in the same order (the heap and the vectorised engine) get the very same floats.
    """

    def __init__(self, config: RingConfig):
        self.config = config
        self.hosts = config.run.hosts
        self.hardware = hw = config.machine.hardware
        self.amount, speed = config.noise.jitter, config.noise.speed
        self.speed = np.ones(self.hosts) if speed is None else np.asarray(speed)
        self.seconds_per_flop = 1.0 / (config.attention_rate * self.speed)  # (P,)
        self.linear_seconds_per_flop = 1.0 / (config.linear_rate * self.speed)
        self.family = config.family
        self.link = hw.link if self.family.collectives else None
        f = config.kernel.overlap_efficiency
        if f is None and self.link is not None and hw.arch is not None and hw.arch.sms:
            f = overlap_efficiency(hw.arch.sms, self.link)
        self.overlap_f = hw.overlap_efficiency if f is None else f
        self.rng = np.random.default_rng(config.noise.seed)
        self._steps = None  # the run's StepModel (its calls), made on first use
        self._hop_seconds: dict[tuple, np.ndarray] = {}  # transfer() on the ring's hops
        # the hop of each host to h + 1: one hardware link, or per host on a cluster
        bw, lat = config.machine.hop_bandwidth, config.machine.hop_latency
        self.link_bandwidth = hw.link_bandwidth if bw is None else np.asarray(bw)
        self.link_latency = hw.link_latency if lat is None else np.asarray(lat)
        self.hop_link = self.link
        self._own_hops = None  # hosts whose hop is the machine's own link, when only some are
        achieved = hw.p2p_bandwidth if self.link is not None else None
        # a hop at the hardware's line rate is the machine's own link (as ``with_hops`` reads
        # it: a double ring's inner ring, a ring inside one node); a shared or NIC hop is not
        own = np.ones(1, bool) if bw is None else np.asarray(bw) == hw.link_bandwidth
        if achieved is not None and own.any():  # NCCL send/recv at its achieved rate here
            # never above what NCCL gets of the line (a link replaced without its range)
            line = self.link.efficiency * hw.link_bandwidth
            rate = min(achieved.at(config.kernel.end("p2p_bandwidth")), line)
            self.hop_link = ACHIEVED
            if own.all():
                self.link_bandwidth = rate if bw is None else np.full(self.hosts, rate)
            else:
                self._own_hops = own
                self.link_bandwidth = np.where(own, rate, self.link_bandwidth)

    def jitter(self, seconds: np.ndarray) -> np.ndarray:
        """``(P,)`` durations times a fresh ``1 + jitter * u`` each (unchanged without jitter)."""
        if self.amount == 0:
            return seconds
        return seconds * (1.0 + self.amount * self.rng.random(self.hosts))

    def compute(self, flops: float | np.ndarray, *, linear: bool = False) -> np.ndarray:
        """``(P,)`` seconds for each host to compute ``flops`` (a scalar or ``(P,)``) FLOPs of
        attention (or, ``linear=True``, of projections and MLP at the linear rate)."""
        per_flop = self.linear_seconds_per_flop if linear else self.seconds_per_flop
        return self.jitter(flops * per_flop)

    def attention(self, plan) -> np.ndarray:
        """``(P,)`` seconds for each host to compute a strategy's attention ``plan``
        (``ringsim.timer.engine.attention``: ``BlockSteps``, ``FullSequence``): under the ideal
        family its FLOPs at the attention rate (``compute``), under a real one its kernel
        calls (``kernel``). Every strategy's attention goes through here."""
        if self.family.ideal:
            return self.compute(plan.flops(self.config))
        if self._steps is None:
            self._steps = StepModel(self.config, self.family)
        return self.kernel(plan.seconds(self.config, self._steps))

    def kernel(self, seconds: np.ndarray) -> np.ndarray:
        """``(P,)`` seconds of a step under a kernel family (``ringsim.timer.engine.ring_steps``):
        the model's seconds at full speed, over each host's ``speed``, jittered."""
        return self.jitter(seconds / self.speed)

    def block(self, full_seconds: np.ndarray, work: np.ndarray, kind: np.ndarray) -> np.ndarray:
        """``(P,)`` seconds for each host to compute its block of one ring step (the module
        docstring's formula): ``work`` ``(P,)`` of a full block that takes ``full_seconds``
        ``(P,)`` (its FLOPs over the host's rate, ``speed`` included), ``kind`` ``(P,)`` the
        ``BlockKind`` of each host's block. With neutral kernel terms this is exactly
        ``full_seconds * work``."""
        hw = self.hardware
        seconds = full_seconds * work
        if hw.masked_speed != 1.0:
            seconds = np.where(kind == BlockKind.PARTIAL, seconds / hw.masked_speed, seconds)
        busy = kind != BlockKind.SKIP
        if hw.block_overhead_s:
            seconds = seconds + np.where(busy, hw.block_overhead_s, 0.0) / self.speed
        if hw.solo_speed != 1.0 and self.hosts > 1:
            idle = self.hosts - int(busy.sum())
            seconds = seconds / (1.0 + (hw.solo_speed - 1.0) * idle / (self.hosts - 1))
        return self.jitter(seconds)

    def overlapped(
        self, compute: np.ndarray, transfer: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(compute, transfer)`` ``(P,)`` seconds of a step's compute and the message each
        host sends while it computes, both stretched by ``(1 - f) min(compute, transfer)``
        (``f = hardware.overlap_efficiency``; unchanged, the very same arrays, for ``f = 1``)."""
        f = self.overlap_f
        if f == 1.0:
            return compute, transfer
        extra = (1.0 - f) * np.minimum(compute, transfer)
        return compute + extra, transfer + extra

    def transfer(
        self, nbytes: float, messages: int = 1, links: tuple | None = None, *, hops: int = 1
    ) -> np.ndarray:
        """``(P,)`` seconds for each host to send ``messages`` messages of ``nbytes`` in all, on
        its ring hop, or on ``links = (bandwidth, latency)`` (scalars or ``(P,)``: a collective
        on a topology). Equal hops give the very floats of one hardware link. ``hops``: the
        message jumps that many hosts ahead in one message (a windowed ring skipping dead
        steps, ``Schedule.hops_after``), on the slowest ring hop it spans: it leaves a node
        by its NIC if any of those hops does."""
        if nbytes == 0 and messages == 0:
            return np.zeros(self.hosts)
        key = (nbytes, messages, hops)
        if links is None and key in self._hop_seconds:  # a ring's every step
            return self.jitter(self._hop_seconds[key].copy())
        bandwidth, latency = (self.link_bandwidth, self.link_latency) if links is None else links
        link = self.hop_link if links is None else self.link
        own = self._own_hops
        if links is None and hops > 1:
            bandwidth, latency = _span(bandwidth, hops, np.min), _span(latency, hops, np.max)
            own = None if own is None else _span(own, hops, np.min)
        if link is None:
            seconds = messages * latency + nbytes / bandwidth
        else:  # NCCL-like: protocol by message size, achieved fraction of the line rate
            seconds = p2p_seconds(nbytes, bandwidth, latency, link=link, messages=messages)
            if links is None and own is not None:  # the other hops: the line rate
                line = p2p_seconds(nbytes, bandwidth, latency, link=self.link, messages=messages)
                seconds = np.where(own, seconds, line)
        seconds = np.broadcast_to(seconds, (self.hosts,)).astype(float)
        if links is None:
            self._hop_seconds[key] = seconds.copy()
        return self.jitter(seconds)


def _span(values, hops: int, reduce) -> np.ndarray:
    """``reduce`` (``np.min``/``np.max``) of ``values[h], ..., values[h + hops - 1]`` (mod
    ``P``) for each host ``h`` of a ``(P,)`` array (a scalar is every host's): a jump's hops.
    By doubling, ``O(P log hops)``."""
    values = np.asarray(values)
    if values.ndim == 0:
        return values
    pair = np.minimum if reduce is np.min else np.maximum
    out, power, covered, span, left = None, values, 0, 1, hops
    while left:
        if left & 1:  # the next span hosts, from covered on
            shifted = np.roll(power, -covered)
            out = shifted if out is None else pair(out, shifted)
            covered += span
        left >>= 1
        if left:  # power: the reduce over 2 span hosts from each host
            power = pair(power, np.roll(power, -span))
            span *= 2
    return out


class Costs:
    """Per-step durations of a run, drawn in a fixed order (phase by phase, step by step), and
    the FLOPs spent on them."""

    def __init__(self, config: RingConfig):
        self.config = config
        self.clock = HostClock(config)
        self.flops_total = 0.0
        shape, c = config.shape, config.block_tokens
        self.kv_bytes = shape.kv_bytes(c)
        grad_dtype = shape.grad_dtype  # as given, else the ring code's (fp32 accumulators)
        if shape.grad_dtype is None and self.clock.family.grad_wire_dtype is not None:
            grad_dtype = self.clock.family.grad_wire_dtype
        self.grad_bytes = shape.grad_bytes(c, grad_dtype)
        family = self.clock.family
        # ideal, and the calibrated CPU torch family, whose terms are the hardware profile's
        # (HostClock.block applies them, lone-host speed included)
        self.steps = None if family.ideal or family.calibrated else StepModel(config, family)

    def local(self, flops: float) -> np.ndarray:
        """``(P,)`` durations of a local computation of ``flops`` FLOPs (projections, MLP: the
        linear rate) on every host."""
        self.flops_total += flops * self.config.run.hosts
        return self.clock.compute(flops, linear=True)

    def ring_rows(self, schedule: Schedule) -> Callable[[int], tuple]:
        """``row(s) -> (compute, kv message, main message)``, ``(P,)`` seconds each, for ring step
        ``s`` of one ring pass (the engines ask its ``ring_steps`` only, in order). The main
        message is the block itself (forward) or ``dk, dv`` (backward; without overlap one
        blocking message carries ``k, v, dk, dv``, and the last only ``dk, dv``); under a
        sliding window a message jumps ``hops_after(s)`` hosts at once."""
        cfg, clock = self.config, self.clock
        c = cfg.block_tokens
        full = cfg.shape.flops(c, c, pass_=schedule.pass_)
        full_time = full * clock.seconds_per_flop
        backward = schedule.pass_ == Pass.BACKWARD
        last = schedule.ring_steps[-1]

        def row(s: int) -> tuple:
            work = schedule.work_at(s)
            self.flops_total += full * float(work.sum())
            if not backward:
                main = self.kv_bytes
            elif cfg.run.overlap or s == last:
                main = self.grad_bytes
            else:
                main = self.kv_bytes + self.grad_bytes
            # full_time * work rounds like the closed forms (full * work * seconds_per_flop can
            # differ in the last bit)
            if self.steps is None:
                compute = clock.block(full_time, work, schedule.kind_at(s))
            else:  # a real implementation: its calls and the work between them
                compute = clock.kernel(self.steps.seconds(schedule, s))
            hops = schedule.hops_after(s) or 1  # one message, however far it jumps
            kv, msg = clock.transfer(self.kv_bytes, hops=hops), clock.transfer(main, hops=hops)
            if cfg.run.overlap and schedule.payload(s):  # its message travels while it computes
                if backward:  # the early k, v (the last step sends only dk, dv)
                    if s < last:
                        compute, kv = clock.overlapped(compute, kv)
                else:
                    compute, msg = clock.overlapped(compute, msg)
            return compute, kv, msg

        return row


def decode_seconds(config: RingConfig, tokens: int) -> float:
    """Seconds to attend one query to ``tokens`` cached tokens on one host: the larger of the
    FLOP time and the time to stream the cache from memory (decode is memory bound). Under a
    real kernel family: its call of one query on ``tokens`` keys (``decode_call_seconds``:
    its fixed cost, its rate, its memory floor), not the peak rate."""
    shape, hw = config.shape, config.machine.hardware
    if not config.family.ideal and not config.family.calibrated:
        return decode_call_seconds(
            config.family, hw, shape, tokens=tokens, peak=config.attention_rate
        )
    time = shape.flops(1, tokens, pass_="decode") / config.flops_rate
    if hw.memory_bandwidth > 0:
        time = max(time, shape.kv_bytes(tokens) / hw.memory_bandwidth)
    return time


_OVERLAP_CACHE: dict[tuple, float] = {}


def family_overlap_block(config: RingConfig, pass_: str) -> float:
    """Under a real kernel family: the smallest block ``c`` (tokens) above which a step on a
    full ``c x c`` block takes at least as long as the block's transfer on the ring's hop (the
    clock's NCCL-like send; backward: ``k, v`` and then ``dk, dv``), every range at the run's
    assumed end. The step: the call at the family's long-row rate (its curve's ``fraction``
    and head-dim factor, its fixed cost; no tile or wave terms, so the answer moves smoothly
    with ``c``) and the merge or gradient sums after it, as ``StepModel`` times them. 1 when
    every block hides (e.g. a GQA forward, whose fp32 merge over the query heads outweighs
    sending the fewer key/value heads). Bisection below the largest power of two that fails.
    Remembered per (kernel, shape, machine with its hops, hosts, pass): everything it reads;
    the run's noise is left out (a threshold is no random draw)."""
    key = (config.kernel, config.shape, config.machine, config.run.hosts, pass_)
    if key not in _OVERLAP_CACHE:
        config = config.replace(noise=Noise())
        steps, clock = StepModel(config, config.family), HostClock(config)
        fam, hbm, shape = steps.family, config.machine.hardware.memory_bandwidth, config.shape
        costs_grad = Costs(config).grad_bytes / config.block_tokens  # bytes per token of dk, dv
        curve = fam.curve(config.machine.hardware, pass_)
        rate = config.attention_rate
        if not fam.calibrated:
            rate *= curve.fraction * curve.head_dim_factor(shape.head_dim)

        def hides(c: int) -> bool:
            compute = fam.call_overhead_s + shape.flops(c, c, pass_=pass_) / rate
            kv = shape.kv_bytes(c)
            if pass_ == Pass.FORWARD:
                compute += merge_seconds(fam, hbm, shape, op="merge", rows=c)
                transfer = clock.transfer(kv).max()  # the slowest hop, as the run waits
            else:
                compute += grad_seconds(fam, hbm, shape, op="accumulate", q_rows=c, kv_rows=c)
                compute += gqa_backward_seconds(fam, hbm, shape, kv_rows=c)
                transfer = (clock.transfer(kv) + clock.transfer(costs_grad * c)).max()
            return compute >= transfer

        c = 2**24
        while c > 1 and hides(c // 2):
            c //= 2
        lo, hi = c // 2, c
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if hides(mid) else (mid, hi)
        _OVERLAP_CACHE[key] = float(hi)
    return _OVERLAP_CACHE[key]
