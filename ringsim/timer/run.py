"""The timer's driver: a pass as a list of phases (ring passes, local computations, decode's
merge tree), each run by an engine on a shared clock, stitched into one ``Timeline``.

Passes: ``forward`` and ``backward`` are one ring pass each. ``train-step`` is a transformer
block's step per host: q/k/v projections, the forward ring, output projection and MLP, their
backward, the backward ring, the projections' backward (local phases take their FLOPs over the
host's rate; a phase starts on a host when that host has finished the previous one). ``decode``
is no ring at all: each host attends the one new token to its cache shard (the larger of the
FLOP time and the time to stream the shard from memory), then the partials are merged in a
tree: in each of ``ceil(log2 P)`` rounds a host receives at most one partial and merges it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ringsim.schedule import Schedule
from ringsim.timer.clock import Costs, decode_seconds
from ringsim.timer.config import ENGINES, RingConfig
from ringsim.timer.cost import attention_flops, ffn_flops, partial_bytes, projection_flops
from ringsim.timer.engines import RING_ENGINES, Out
from ringsim.timer.result import SimResult
from ringsim.timer.timeline import Timeline


@dataclass
class _Phase:
    kind: str  # "ring" | "local" | "decode"
    labels: list[str]
    schedule: Schedule | None = None
    flops: float = 0.0

    @property
    def rows(self) -> int:
        return len(self.labels)


def _ring_phase(schedule: Schedule, prefix: str) -> _Phase:
    return _Phase("ring", [f"{prefix}{s}" for s in range(schedule.steps)], schedule)


def _phases(config: RingConfig) -> list[_Phase]:
    if config.pass_ == "decode":
        rounds = math.ceil(math.log2(config.hosts)) if config.hosts > 1 else 0
        return [_Phase("decode", ["partial"] + [f"merge {r}" for r in range(rounds)])]
    if config.pass_ in ("forward", "backward"):
        return [_ring_phase(config.schedule(), "")]
    # A transformer block's training step, per host on its c tokens:
    #   fwd: q/k/v projections -> ring attention -> output projection + MLP
    #   bwd: MLP + output projection -> ring attention backward -> q/k/v projections
    tokens = config.block_tokens * config.batch
    dims = (config.d_model, config.heads, config.kv_heads, config.head_dim)
    qkv_f, out_f = projection_flops(tokens, *dims)
    qkv_b, out_b = projection_flops(tokens, *dims, pass_="backward")
    mlp_f = ffn_flops(tokens, config.d_model, config.ffn)
    mlp_b = ffn_flops(tokens, config.d_model, config.ffn, pass_="backward")
    return [
        _Phase("local", ["qkv-proj"], flops=qkv_f),
        _ring_phase(config.schedule("forward"), "fwd "),
        _Phase("local", ["o-proj+mlp"], flops=out_f + mlp_f),
        _Phase("local", ["mlp+o-proj bwd"], flops=mlp_b + out_b),
        _ring_phase(config.schedule("backward"), "bwd "),
        _Phase("local", ["qkv-proj bwd"], flops=qkv_b),
    ]


def _decode(config: RingConfig, costs: Costs, ready, out: Out, recv: tuple) -> None:
    """Row 0: every host attends to its shard. Row ``r + 1``: merge round ``r``; host
    ``k 2^(r+1)`` receives the partial of ``k 2^(r+1) + 2^r`` and merges it into its own (the
    same tree as ``ringsim.numerics.decode.tree_merge``). One code path serves both engines:
    the rounds are a handful of independent transfers."""
    P, clock = config.hosts, costs.clock
    # memory bound, so not clock.compute(flops): the speed factor scales the whole scan
    partial = clock.jitter(decode_seconds(config, config.block_tokens) / clock.speed)
    costs.flops_total += P * attention_flops(
        1, config.block_tokens, config.heads, config.head_dim, batch=config.batch
    )
    merge_flops = 5.0 * config.batch * config.heads * (config.head_dim + 2)
    message = partial_bytes(config.heads, config.head_dim, batch=config.batch)
    out.cs[0], out.ce[0] = ready, ready + partial
    out.ss[0] = out.se[0] = recv[0][0] = recv[1][0] = np.nan
    done = out.ce[0].copy()
    for r in range(out.cs.shape[0] - 1):
        step = 2**r
        receivers = np.arange(0, P - step, 2 * step)
        senders = receivers + step
        link = clock.transfer(message)[senders]
        merge = clock.compute(merge_flops)[receivers]
        costs.flops_total += merge_flops * len(receivers)
        row = r + 1
        for arr in (out.cs, out.ce, out.ss, out.se, recv[0], recv[1]):
            arr[row] = np.nan
        out.ss[row, senders] = done[senders]
        out.se[row, senders] = done[senders] + link
        recv[0][row, receivers] = out.ss[row, senders]
        recv[1][row, receivers] = out.se[row, senders]
        out.cs[row, receivers] = np.maximum(done[receivers], out.se[row, senders])
        out.ce[row, receivers] = out.cs[row, receivers] + merge
        done[receivers] = out.ce[row, receivers]


def _local(costs: Costs, phase: _Phase, ready, out: Out) -> None:
    out.cs[0] = ready
    out.ce[0] = ready + costs.local(phase.flops)
    out.ss[0] = out.se[0] = np.nan
    if out.ks is not None:
        out.ks[0] = out.ke[0] = np.nan


def simulate(config: RingConfig, *, engine: str = "vectorized") -> SimResult:
    """Run ``config`` through the event timer. ``engine="heap"`` is the slow, one-event-at-a-time
    oracle (use it for small rings); ``"vectorized"`` handles thousands of hosts."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if not isinstance(config, RingConfig):
        raise ValueError(f"config must be a RingConfig, got {config!r}")
    phases = _phases(config)
    rows, P = sum(p.rows for p in phases), config.hosts
    early_kv = config.overlap and config.pass_ in ("backward", "train-step")
    # Padded (rows, P + 2) buffers (see Out): the timeline gets views, so recv[:, h] =
    # send[:, h - 1] costs nothing even for 4096 hosts (134 MB per array).
    names = ("cs", "ce", "ss", "se") + (("ks", "ke") if early_kv else ())
    bufs = {name: np.empty((rows, P + 2)) for name in names}
    costs = Costs(config)
    ready, link_free = np.zeros(P), np.zeros(P)
    row0, schedule = 0, None
    recv = None
    for phase in phases:
        sl = slice(row0, row0 + phase.rows)
        row0 += phase.rows
        out = Out(
            *(bufs[n][sl] if n in bufs else None for n in ("cs", "ce", "ss", "se", "ks", "ke"))
        )
        view = out.inner()
        if phase.kind == "local":
            _local(costs, phase, ready, view)
            ready = view.ce[-1]
        elif phase.kind == "decode":
            recv = (np.empty((rows, P)), np.empty((rows, P)))
            _decode(config, costs, ready, view, recv)
        else:
            schedule = phase.schedule
            if config.hardware.pass_overhead_s:
                ready = ready + config.hardware.pass_overhead_s / costs.clock.speed
            row = costs.ring_rows(schedule)
            RING_ENGINES[engine](schedule, row, config.overlap, ready, link_free, out)
            for ends in (view.se, view.ke):
                if ends is not None:
                    link_free = np.fmax(link_free, np.fmax.reduce(ends, axis=0))
            ready = view.ce[-1]
            if schedule.pass_ == "backward" and P > 1:  # dk, dv must be home before use
                ready = np.maximum(ready, view.se[-1][schedule.recv_from])
    for name in names:
        bufs[name][:, 0] = bufs[name][:, P]
    inner = {name: buf[:, 1:-1] for name, buf in bufs.items()}
    if recv is None:
        recv = (bufs["ss"][:, :P], bufs["se"][:, :P])
    meta = {"pass": config.pass_, "engine": engine, "hardware": config.hardware.name}
    if early_kv:  # the receive of host h is the send of h - 1: views, like recv above
        meta["kv_send_start"], meta["kv_send_end"] = inner["ks"], inner["ke"]
        meta["kv_recv_start"], meta["kv_recv_end"] = bufs["ks"][:, :P], bufs["ke"][:, :P]
        backward = [p.kind == "ring" and p.schedule.pass_ == "backward" for p in phases]
        meta["grad_rows"] = np.repeat(backward, [p.rows for p in phases])
    labels = [label for p in phases for label in p.labels]
    timeline = Timeline(
        inner["cs"], inner["ce"], inner["ss"], inner["se"], recv[0], recv[1], labels, meta
    )
    return SimResult(config, timeline, schedule, costs.flops_total, engine)
