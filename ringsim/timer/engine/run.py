"""The timer's driver: a pass as a list of phases (ring passes, local computations, decode's
merge tree), each run by an engine on a shared clock, stitched into one ``Timeline``.

Passes: ``forward`` and ``backward`` are one ring pass each. ``train-step`` is a transformer
block's step per host: q/k/v projections, the forward ring, output projection and MLP, their
backward, the backward ring, the projections' backward (local phases take their FLOPs over the
host's linear rate; a phase starts on a host when that host has finished the previous one); with
``recompute`` (full activation checkpointing) the forward phases run again before the
backward. ``decode`` is no ring at all: each host attends the one new token to its cache
shard (the larger of the FLOP time and the time to stream the shard from memory), then the
partials are merged in a tree: in each of ``ceil(log2 P)`` rounds a host receives at most one
partial and merges it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ringsim.checks import check_choice
from ringsim.schedule import RING_PASSES, Pass, Schedule
from ringsim.timer.engine.clock import Costs, decode_seconds
from ringsim.timer.engine.config import ENGINES, RingConfig
from ringsim.timer.engine.engines import RING_ENGINES
from ringsim.timer.engine.result import (
    Recorder,
    SimResult,
    check_finite_makespan,
    check_fits,
    timeline_bytes,
)


@dataclass
class _Phase:
    """One phase of a pass: its timeline rows, counted up front and labelled only when a
    timeline is kept (a label per ring step of a huge ring would cost gigabytes before the
    size check could refuse it)."""

    kind: str  # "ring" | "local" | "decode"
    names: list[str]  # the labels; a ring phase (one with a schedule): a prefix per step
    schedule: Schedule | None = None
    flops: float = 0.0

    @property
    def rows(self) -> int:
        return len(self.names) if self.schedule is None else len(self.schedule.ring_steps)

    @property
    def labels(self) -> list[str]:
        if self.schedule is None:
            return self.names
        return [f"{self.names[0]}{s}" for s in self.schedule.ring_steps]


def _ring_phase(schedule: Schedule, prefix: str) -> _Phase:
    return _Phase("ring", [prefix], schedule)


def _phases(config: RingConfig) -> list[_Phase]:
    if config.run.pass_ == Pass.DECODE:  # ceil(log2 P) rounds: a few dozen labels at most
        rounds = math.ceil(math.log2(config.run.hosts)) if config.run.hosts > 1 else 0
        return [_Phase("decode", ["partial"] + [f"merge {r}" for r in range(rounds)])]
    if config.run.pass_ in RING_PASSES:
        return [_ring_phase(config.schedule(), "")]
    # A transformer block's training step, per host on its c tokens:
    #   fwd: q/k/v projections -> ring attention -> output projection + MLP
    #   bwd: MLP + output projection -> ring attention backward -> q/k/v projections
    shape, tokens = config.shape, config.block_tokens * config.shape.batch
    qkv_f, out_f = shape.projection_flops(tokens)
    qkv_b, out_b = shape.projection_flops(tokens, "backward")
    mlp_f, mlp_b = shape.ffn_flops(tokens), shape.ffn_flops(tokens, "backward")
    forward = [
        _Phase("local", ["qkv-proj"], flops=qkv_f),
        _ring_phase(config.schedule("forward"), "fwd "),
        _Phase("local", ["o-proj+mlp"], flops=out_f + mlp_f),
    ]
    # full activation checkpointing: the block's forward runs again before its backward
    recompute = [
        _Phase("local", ["re qkv-proj"], flops=qkv_f),
        _ring_phase(config.schedule("forward"), "re fwd "),
        _Phase("local", ["re o-proj+mlp"], flops=out_f + mlp_f),
    ]
    return (
        forward
        + (recompute if config.run.recompute else [])
        + [
            _Phase("local", ["mlp+o-proj bwd"], flops=mlp_b + out_b),
            _ring_phase(config.schedule("backward"), "bwd "),
            _Phase("local", ["qkv-proj bwd"], flops=qkv_b),
        ]
    )


def _decode(config: RingConfig, costs: Costs, ready, rec: Recorder, rows: int) -> None:
    """Row 0: every host attends to its shard. Row ``r + 1``: merge round ``r``; host
    ``k 2^(r+1)`` receives the partial of ``k 2^(r+1) + 2^r`` and merges it into its own (the
    same tree as ``ringsim.numerics.decode.tree_merge``). One code path serves both engines:
    the rounds are a handful of independent transfers."""
    P, clock, shape = config.run.hosts, costs.clock, config.shape
    # memory bound, so not clock.compute(flops): the speed factor scales the whole scan
    partial = clock.jitter(decode_seconds(config, config.block_tokens) / clock.speed)
    costs.flops_total += P * shape.flops(1, config.block_tokens)
    merge_flops = 5.0 * shape.batch * shape.heads * (shape.head_dim + 2)
    message = shape.partial_bytes()
    done = ready + partial
    rec.row(ready, done.copy(), dense=False)
    for r in range(rows - 1):
        step = 2**r
        receivers = np.arange(0, P - step, 2 * step)
        senders = receivers + step
        link = clock.transfer(message)[senders]
        merge = clock.compute(merge_flops)[receivers]
        costs.flops_total += merge_flops * len(receivers)
        cs, ce, ss, se, rs, re = (np.full(P, np.nan) for _ in range(6))
        ss[senders] = done[senders]
        se[senders] = done[senders] + link
        rs[receivers], re[receivers] = ss[senders], se[senders]
        cs[receivers] = np.maximum(done[receivers], se[senders])
        ce[receivers] = cs[receivers] + merge
        done[receivers] = ce[receivers]
        rec.row(cs, ce, ss, se, dense=False, recv=(rs, re))


def _local(costs: Costs, phase: _Phase, ready, rec: Recorder) -> np.ndarray:
    end = ready + costs.local(phase.flops)
    rec.row(ready, end)
    return end


def simulate(
    config: RingConfig, *, engine: str = "vectorized", keep_timeline: bool | None = None
) -> SimResult:
    """Run ``config`` through the event timer. ``engine="heap"`` is the slow, one-event-at-a-time
    oracle (use it for small rings); ``"vectorized"`` handles thousands of hosts in ``O(P)``
    memory. ``keep_timeline``: keep the ``(rows, P)`` timeline arrays (plots, traces); ``False``
    keeps only the summary's ``O(P)`` figures, and ``result.timeline`` then runs the simulation
    again on first use; ``None`` (default) keeps them when they take at most
    ``KEEP_TIMELINE_BYTES``. A run that cannot fit is refused up front (``ValueError`` saying
    what it would need)."""
    check_choice("engine", engine, ENGINES)
    if not isinstance(config, RingConfig):
        raise ValueError(f"config must be a RingConfig, got {config!r}")
    if keep_timeline is not None and not isinstance(keep_timeline, bool | np.bool_):
        raise ValueError(f"keep_timeline must be True, False or None, got {keep_timeline!r}")
    phases = _phases(config)
    rows, P = sum(p.rows for p in phases), config.run.hosts
    if keep_timeline is None:
        keep_timeline = timeline_bytes(config, rows) <= KEEP_TIMELINE_BYTES
    check_fits(config, rows, keep=keep_timeline, engine=engine)
    early_kv = config.run.overlap and config.run.pass_.has_backward
    rec = Recorder(P, rows, keep=keep_timeline, early_kv=early_kv)
    costs = Costs(config)
    ready = np.zeros(P)
    schedule = None
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is refused below, by name
        for phase in phases:
            if phase.kind == "local":
                ready = _local(costs, phase, ready, rec)
            elif phase.kind == "decode":
                _decode(config, costs, ready, rec, phase.rows)
            else:
                schedule = phase.schedule
                if config.machine.hardware.pass_overhead_s:
                    ready = ready + config.machine.hardware.pass_overhead_s / costs.clock.speed
                ready, sent = _ring(engine, schedule, costs, config.run.overlap, ready, rec)
                if schedule.pass_ == Pass.BACKWARD and sent is not None:  # dk, dv home first
                    ready = np.maximum(ready, sent[schedule.recv_from_at(schedule.ring_steps[-1])])
        stats = rec.stats()
    check_finite_makespan(config, stats.makespan)
    result = SimResult(config, None, schedule, costs.flops_total, engine, stats)
    if keep_timeline:
        meta = {
            "pass": config.run.pass_,
            "engine": engine,
            "hardware": config.machine.hardware.name,
        }
        if early_kv:
            backward = [
                p.schedule is not None and p.schedule.pass_ == Pass.BACKWARD for p in phases
            ]
            meta["grad_rows"] = np.repeat(backward, [p.rows for p in phases])
        result.timeline = rec.timeline([label for p in phases for label in p.labels], meta)
    else:
        result.rebuild = lambda: simulate(config, engine=engine, keep_timeline=True).timeline
    return result


def _ring(engine: str, schedule: Schedule, costs: Costs, overlap: bool, ready, rec: Recorder):
    """One ring pass from ``ready`` ``(P,)``, its rows into ``rec``; returns when each host
    finished computing its last step, and when its last message arrived (``None``: none)."""
    last = {}
    hops = iter([schedule.hops_after(s) or 1 for s in schedule.ring_steps])

    def emit(cs, ce, ss=None, se=None, ks=None, ke=None):
        rec.row(cs, ce, ss, se, ks, ke, hops=next(hops))
        last["ce"], last["se"] = ce, se

    link_free = rec.link_free.copy()  # the links finish earlier phases' messages first
    RING_ENGINES[engine](schedule, costs.ring_rows(schedule), overlap, ready, link_free, emit)
    return last["ce"].copy(), None if last["se"] is None else last["se"].copy()


KEEP_TIMELINE_BYTES = 128 * 2**20
"""``simulate(keep_timeline=None)`` keeps a timeline up to this size (1,024 hosts: 34 MB)."""
