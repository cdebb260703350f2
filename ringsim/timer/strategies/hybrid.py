"""Hybrid sequence parallelism on a cluster: Ulysses x ring (USP), the double ring (LoongTrain),
all-gather, each placed on a ``Cluster`` and timed forward or backward.

``P = U x R`` hosts form a grid. A **Ulysses group** of ``U`` hosts re-shards q, k, v by heads
with an all-to-all (each host then holds ``H / U`` heads of the group's ``U c = N / R`` tokens),
the ``R`` hosts holding the same heads form a **ring group** and run the sequence-parallel
part on those heads, and a second all-to-all returns the output (Fang & Zhao, USP, arXiv
2405.07719, Sec. 3). ``placement`` says which groups are consecutive ranks (and so share a
node): ``"ulysses-inner"`` puts rank ``j U + u`` at Ulysses slot ``u`` of ring slot ``j`` (the
all-to-all inside a node, the ring across nodes: LoongTrain's ``head_first``), and
``"ring-inner"`` the other way round. ``U = 1`` is the ring, ``R = 1`` Ulysses. The
sequence-parallel part (``method``) is

* ``"ring"``: the ring timer (``ringsim.timer.simulate``) on the group's hops;
* ``"double-ring"`` (LoongTrain, Gu et al., arXiv 2406.18485; InternEvo's
  ``window_size``): the ring group is cut into inner rings of ``window`` consecutive members
  (one node's worth by default). The pass runs ``R / window`` **rounds**; in each, every inner
  ring runs a ring pass of ``window`` steps (both ring engines, rules unchanged) over the
  blocks it holds, while every host sends the block it started the round with to the same
  slot of the next inner ring (the **outer ring**), so all NICs work at once and each outer
  hop has a whole round of compute to hide behind. A round starts on a host when it finished
  the previous round and the outer block has arrived. Backward: the outer ring also carries
  each round's ``dk, dv`` (home from the inner ring) to the next inner ring, where they
  accumulate, and the last round's sum goes home; a host is done when it has arrived.
  ``window = R`` is the flat ring, bit for bit.
* ``"allgather"`` (Llama 3 context parallelism): each ring group all-gathers k, v (computing
  its own block meanwhile) and attends to them; backward reduce-scatters dk, dv.

Collectives and hops are timed on the cluster (``ringsim.timer.machine.topology``); without one, on
one node with an ideal switch at the hardware's link, where the hybrid with ``U = 1`` is the ring
timer bit for bit and with ``R = 1`` the Ulysses timer (which is this code). Every ring group
starts its part when the slowest host has finished the first all-to-all, and the second
all-to-all starts when the slowest ring group has finished (the all-to-alls synchronise).
"""

from __future__ import annotations

import numpy as np

from ringsim.checks import check_choice, check_instance
from ringsim.grid import PLACEMENTS, Grid, check_ulysses_degree, heads_per_host
from ringsim.timer.cost import DTYPE_BYTES, attention_flops, grad_block_bytes, kv_block_bytes
from ringsim.timer.engine.clock import HostClock
from ringsim.timer.engine.config import RingConfig
from ringsim.timer.engine.result import StrategyResult
from ringsim.timer.engine.run import simulate
from ringsim.timer.engine.timeline import Timeline
from ringsim.timer.machine.topology import Cluster
from ringsim.timer.step.memory import (
    allgather_working_set_bytes,
    attention_working_set_bytes,
    ulysses_working_set_bytes,
)
from ringsim.timer.strategies.double_ring import double_ring
from ringsim.timer.strategies.pieces import Piece, place

METHODS = ("ring", "double-ring", "allgather")


def simulate_hybrid(
    config: RingConfig,
    ulysses_degree: int = 1,
    *,
    method: str = "ring",
    cluster: Cluster | None = None,
    placement: str = "ulysses-inner",
    window: int | None = None,
    engine: str = "vectorized",
):
    """Time ``config`` (``hosts = U x R``, ``pass_`` forward or backward) as ``U``-way Ulysses
    by ``R``-way ``method`` placed on ``cluster`` (see the module docstring); returns a
    ``StrategyResult`` whose timeline has one column per rank."""
    check_choice("method", method, METHODS)
    check_choice("placement", placement, PLACEMENTS)
    check_instance("cluster", cluster, Cluster | type(None), "a Cluster (get_cluster) or None")
    if method != "double-ring" and window is not None:
        raise ValueError(f"window is for the double ring only, got window={window!r}")
    P = config.hosts
    U = check_ulysses_degree(P, config.kv_heads, ulysses_degree)
    cluster = Cluster.switch(config.hardware, P) if cluster is None else cluster
    cluster.check_hosts(P)
    if U > 1 and config.segment_ids is not None:
        raise ValueError("segment_ids are not supported with ulysses_degree > 1")
    grid = Grid(U, P // U, placement)
    if U == 1 and method == "ring":  # the ring itself, on the cluster's hops
        bw, lat = cluster.ring_links(grid.ring_groups, P)
        ring = simulate(_with_hops(config, bw, lat), engine=engine)
        return StrategyResult(**vars(ring), strategy="ring")
    if config.pass_ not in ("forward", "backward"):
        raise ValueError(f"pass must be forward or backward for {method}, got {config.pass_!r}")
    return _run(config, grid, method, cluster, window, engine)


def _with_hops(config: RingConfig, bw: np.ndarray, lat: np.ndarray) -> RingConfig:
    hardware = config.hardware
    if np.all(bw == hardware.link_bandwidth) and np.all(lat == hardware.link_latency):
        return config
    return config.replace(hop_bandwidth=tuple(bw), hop_latency=tuple(lat))


# -- a part of the timeline: (rows, hosts) arrays ----------------------------------------------
# -- the run -----------------------------------------------------------------------------------
def _run(config, grid: Grid, method, cluster, window, engine):
    P, U, R = config.hosts, grid.ulysses, grid.ring
    H, H_kv, d = config.heads, config.kv_heads, config.head_dim
    e, backward = DTYPE_BYTES[config.dtype], config.pass_ == "backward"
    clock = HostClock(config)
    parts, start, flops = [], 0.0, 0.0
    if U > 1:
        links = cluster.alltoall_links(grid.ulysses_groups, P)
        share = (U - 1) / U * config.block_tokens * d * e * config.batch
        name_in, width_in = (
            ("q, k, v, dout", 2 * H + 2 * H_kv) if backward else ("q, k, v", H + 2 * H_kv)
        )
        first = Piece([f"all-to-all {name_in}"], P)
        start = _collective(first, 0, np.zeros(P), clock.transfer(share * width_in, 1, links))
        parts.append(first)
    if R == 1:
        inner, flops = _ulysses_attention(config, clock, start)
    else:
        groups = grid.ring_groups
        heads = H // U
        sub = [
            config.replace(
                hosts=R,
                heads=heads,
                kv_heads=H_kv // U,
                speed=_speeds(config, g),
                d_model=None,
                ffn=None,
                seed=config.seed + u,
            )
            for u, g in enumerate(groups)
        ]
        if method == "ring":
            bw, lat = cluster.ring_links(groups, P)
            runs = [
                simulate(_with_hops(s, bw[g], lat[g]), engine=engine)
                for s, g in zip(sub, groups, strict=True)
            ]
            group_parts = [Piece.of(r.timeline) for r in runs]
            flops = sum(r.flops_total for r in runs)
        elif method == "allgather":
            links = cluster.allgather_links(groups, P)
            done = [
                _allgather(s, (links[0][g], links[1][g])) for s, g in zip(sub, groups, strict=True)
            ]
            group_parts, flops = [p for p, _ in done], sum(f for _, f in done)
        else:
            done = [
                double_ring(s, g, groups, cluster, window, engine)
                for s, g in zip(sub, groups, strict=True)
            ]
            group_parts, flops = [p for p, _ in done], sum(f for _, f in done)
        inner = place(group_parts, groups, P, start)
    parts.append(inner)
    if U > 1:
        name_out, width_out = ("dq, dk, dv", H + 2 * H_kv) if backward else ("out", H)
        last = Piece([f"all-to-all {name_out}"], P)
        ready = np.full(P, max(inner.end(), start))
        _collective(last, 0, ready, clock.transfer(share * width_out, 1, links))
        parts.append(last)
    part = Piece.stack(parts)
    strategy = {"ring": "hybrid", "double-ring": "double-ring", "allgather": "allgather"}[method]
    if R == 1:
        strategy = "ulysses"
    meta = {
        "pass": config.pass_,
        "engine": engine,
        "hardware": config.hardware.name,
        "strategy": strategy,
        "ulysses_degree": U,
        "ring_degree": R,
        "placement": grid.placement,
    }
    a = part.a
    if "ks" in a:
        meta.update(
            kv_send_start=a["ks"],
            kv_send_end=a["ke"],
            kv_recv_start=a["krs"],
            kv_recv_end=a["kre"],
            grad_rows=part.grad_rows,
        )
    timeline = Timeline(a["cs"], a["ce"], a["ss"], a["se"], a["rs"], a["re"], part.labels, meta)
    memory = hybrid_memory_bytes(config, U, method)
    return StrategyResult(
        config,
        timeline,
        None,
        float(flops),
        engine=engine,
        strategy=strategy,
        memory_bytes=memory,
        overlap_block=None,
        peer=True,
    )


def _speeds(config: RingConfig, group: list[int]):
    return None if config.speed is None else tuple(config.speed[r] for r in group)


def _collective(part: Piece, row: int, start: np.ndarray, seconds: np.ndarray) -> float:
    """Every host sends for ``seconds`` from ``start``; the collective ends for all at the
    latest end (each host needs every other host's data). Returns that end."""
    end = start + seconds
    a = part.a
    a["ss"][row], a["se"][row], a["rs"][row] = start, end, start
    a["re"][row] = end.max()
    return float(end.max())


def _ulysses_attention(config: RingConfig, clock: HostClock, start: float):
    """Every host attends all ``N`` tokens of its heads (``heads_per_host``): the Ulysses
    compute. The causal work is the ``P``-host contiguous ring's mean block work."""
    P, N = config.hosts, config.seq_len
    schedule = config.schedule(layout="contiguous")
    work = float(sum(schedule.work_at(s).sum() for s in range(P))) / P**2
    flops = np.array(
        [
            attention_flops(
                N, N, int(h), config.head_dim, work=work, pass_=config.pass_, batch=config.batch
            )
            for h in heads_per_host(config.heads, P)
        ]
    )
    part = Piece([f"attention, {config.heads}/{P} heads"], P)
    begin = np.full(P, start)
    part.a["cs"][0], part.a["ce"][0] = begin, begin + clock.compute(flops)
    return part, float(flops.sum())


def _allgather(config: RingConfig, links: tuple) -> tuple[Piece, float]:
    """All-gather context parallelism on one group (``config.hosts`` ranks): gather k, v while
    computing the own block, attend to the rest; backward reduce-scatters dk, dv."""
    P, c = config.hosts, config.block_tokens
    H, H_kv, d = config.heads, config.kv_heads, config.head_dim
    schedule = config.schedule()
    block = attention_flops(c, c, H, d, pass_=config.pass_, batch=config.batch)
    own = block * schedule.work_at(0)  # step 0 of the ring: the host's own kv block
    rest = block * sum((schedule.work_at(s) for s in range(1, P)), np.zeros(P))
    kv = kv_block_bytes(c, H_kv, d, config.dtype, batch=config.batch)
    clock = HostClock(config)
    labels = ["all-gather k, v + own block", "attention to the gathered k, v"]
    if config.pass_ == "backward":
        labels.append("reduce-scatter dk, dv")
    part = Piece(labels, P)
    gathered = np.full(
        P, _collective(part, 0, np.zeros(P), clock.transfer((P - 1) * kv, P - 1, links))
    )
    a = part.a
    own_start = np.zeros(P) if config.overlap else gathered
    a["cs"][0], a["ce"][0] = own_start, own_start + clock.compute(own)
    a["cs"][1] = np.maximum(a["ce"][0], gathered)
    a["ce"][1] = a["cs"][1] + clock.compute(rest)
    if config.pass_ == "backward":
        grads = grad_block_bytes(
            c, H_kv, d, config.dtype, batch=config.batch, grad_dtype=config.grad_dtype
        )
        ready = np.full(P, a["ce"][1].max())
        _collective(part, 2, ready, clock.transfer((P - 1) * grads, P - 1, links))
    return part, float(own.sum() + rest.sum())


# -- memory ------------------------------------------------------------------------------------
def hybrid_memory_bytes(config: RingConfig, ulysses_degree: int, method: str = "ring") -> float:
    """The attention layer's working set on one host of a ``U x R`` run: Ulysses' (``R = 1``);
    else the ``method``'s on ``H / U`` heads of the ring group's ``N / R``-token blocks (the
    ring's, or all-gather's) plus, with ``U > 1``, the host's own q, k, v (or q, k, v, dout)
    shard, the all-to-all's send buffer. A double ring holds one more block (the outer one)."""
    P, U = config.hosts, ulysses_degree
    R = P // U
    H, H_kv, d, N = config.heads, config.kv_heads, config.head_dim, config.seq_len
    kw = dict(pass_=config.pass_, batch=config.batch)
    if R == 1:
        return ulysses_working_set_bytes(N, P, H, H_kv, d, config.dtype, **kw)
    heads, kv_heads = H // U, H_kv // U
    if method == "allgather":
        total = allgather_working_set_bytes(N, R, heads, kv_heads, d, config.dtype, **kw)
    else:
        total = attention_working_set_bytes(N // R, heads, kv_heads, d, config.dtype, **kw)
    if method == "double-ring":
        total += kv_block_bytes(
            N // R, kv_heads, d, config.dtype, pass_=config.pass_, batch=config.batch
        )
    if U > 1:
        width = 2 * H + 2 * H_kv if config.pass_ == "backward" else H + 2 * H_kv
        total += config.block_tokens * width * d * DTYPE_BYTES[config.dtype] * config.batch
    return float(total)
