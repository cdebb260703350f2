"""The two-level frame: Ulysses all-to-alls around a sequence-parallel part (USP, arXiv
2405.07719, Sec. 3), on a cluster.

``P = U x R`` hosts form a grid (``ringsim.grid.Grid``). A **Ulysses group** of ``U`` hosts
re-shards q, k, v by heads with an all-to-all (each host then holds ``H / U`` heads of the
group's ``U c = N / R`` tokens), the ``R`` hosts holding the same heads form a **ring group**
and run the strategy's sequence-parallel part on those heads (``inner``: a ring, an all-gather,
a double ring), and a second all-to-all returns the output. ``placement`` says which groups
are consecutive ranks (and so share a node): ``"ulysses-inner"`` puts rank ``j U + u`` at
Ulysses slot ``u`` of ring slot ``j`` (the all-to-all inside a node, the ring across nodes:
LoongTrain's ``head_first``), ``"ring-inner"`` the other way round. With ``R = 1`` the part is
Ulysses' own: every host attends the whole sequence on its heads.

Collectives and hops are timed on the cluster (``ringsim.timer.machine.topology``); without
one, on one node with an ideal switch at the hardware's link. Every ring group starts its part
when the slowest host has finished the first all-to-all, and the second all-to-all starts when
the slowest ring group has finished (the all-to-alls synchronise).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable
from typing import TypeVar

import numpy as np

from ringsim.grid import Grid
from ringsim.schedule import Pass
from ringsim.timer.cost import DTYPE_BYTES, AttentionShape
from ringsim.timer.engine.attention import FullSequence, elementwise_seconds
from ringsim.timer.engine.clock import HostClock
from ringsim.timer.engine.config import RingConfig
from ringsim.timer.engine.result import StrategyResult
from ringsim.timer.engine.timeline import Timeline
from ringsim.timer.machine.topology import Cluster
from ringsim.timer.strategies.base import check_peer_args
from ringsim.timer.strategies.pieces import Piece, place

T = TypeVar("T")

Inner = Callable[[list[RingConfig], list[list[int]], Cluster], tuple[list[Piece], float]]
"""``inner(group_configs, ring_groups, cluster) -> (one Piece per group, FLOPs)``: a strategy's
sequence-parallel part on every ring group at once (they share the cluster's links)."""


def with_hops(config: RingConfig, bw: np.ndarray, lat: np.ndarray) -> RingConfig:
    """``config`` with per-host hop links (unchanged when every hop is the hardware's link)."""
    hardware = config.machine.hardware
    if np.all(bw == hardware.link_bandwidth) and np.all(lat == hardware.link_latency):
        return config
    return config.replace(hop_bandwidth=tuple(bw), hop_latency=tuple(lat))


def group_configs(config: RingConfig, grid: Grid) -> list[RingConfig]:
    """One ``R``-host config per ring group: its ``H / U`` heads (``AttentionShape.split``),
    its hosts' speeds and a seed of its own. Without jitter or per-host speeds nothing tells
    the groups apart (the seed draws only jitter), so every group gets the one config
    (``run_distinct``)."""
    U = grid.ulysses
    speeds = lambda group: (
        None if config.noise.speed is None else tuple(config.noise.speed[r] for r in group)
    )
    split = config.shape.split(U)
    one = lambda u, group: config.replace(
        hosts=grid.ring,
        heads=split.heads,
        kv_heads=split.kv_heads,  # past H_kv: one replica each
        speed=speeds(group),
        d_model=None,
        ffn=None,
        seed=config.noise.seed + u,
    )
    if config.noise.speed is None and config.noise.jitter == 0:
        return [one(0, grid.ring_groups[0])] * len(grid.ring_groups)
    return [one(u, group) for u, group in enumerate(grid.ring_groups)]


def run_distinct(
    configs: list[RingConfig], keys: list, run: Callable[[int], T], *, tag: tuple | None = None
) -> list[T]:
    """``[run(i) for i in range(len(configs))]``, run once per distinct ``(config, key)``:
    ring groups with the one config (``group_configs``) and the same links (``keys``: their
    bytes) run the same pass, so each result is shared by them (read, never written). With a
    ``tag`` (the strategy's part and whatever else ``run`` reads), a run without noise is also
    shared with every later run of the process that makes the same one (``SHARED_GROUPS``):
    a planner's configurations run the same ring groups under other degrees."""
    memo: dict = {}
    out = []
    for i, (config, key) in enumerate(zip(configs, keys, strict=True)):
        local = (id(config), key)
        if local not in memo:
            quiet = config.noise.jitter == 0 and config.noise.speed is None
            shared = (tag, config, key) if tag is not None and quiet else None
            memo[local] = _shared(shared, lambda i=i: run(i))
        out.append(memo[local])
    return out


SHARED_GROUPS: OrderedDict = OrderedDict()
"""Ring groups' runs (``run_distinct``), by tag, config and links: the latest
``SHARED_GROUPS_SIZE``, each of at most ``SHARED_GROUP_CELLS`` timeline cells."""
SHARED_GROUPS_SIZE = 1024
SHARED_GROUP_CELLS = 2**16


def _shared(key: tuple | None, compute: Callable[[], T]) -> T:
    if key is None:
        return compute()
    if key in SHARED_GROUPS:
        SHARED_GROUPS.move_to_end(key)
        return SHARED_GROUPS[key]
    value = compute()
    pieces = [v for v in value if isinstance(v, Piece)] if isinstance(value, tuple) else []
    if pieces and sum(a.size for p in pieces for a in p.a.values()) <= SHARED_GROUP_CELLS:
        SHARED_GROUPS[key] = value
        if len(SHARED_GROUPS) > SHARED_GROUPS_SIZE:
            SHARED_GROUPS.popitem(last=False)
    return value


def collective(part: Piece, row: int, start: np.ndarray, seconds: np.ndarray) -> float:
    """Every host sends for ``seconds`` from ``start``; the collective ends for all at the
    latest end (each host needs every other host's data). Returns that end."""
    end = start + seconds
    a = part.a
    a["ss"][row], a["se"][row], a["rs"][row] = start, end, start
    a["re"][row] = end.max()
    return float(end.max())


def run_two_level(
    config: RingConfig,
    grid: Grid,
    cluster: Cluster,
    inner: Inner,
    *,
    strategy: str,
    memory_bytes: float,
    engine: str,
) -> StrategyResult:
    """Time ``config`` as ``U``-way Ulysses by ``R``-way ``inner`` (the module docstring);
    the result's timeline has one column per rank."""
    P, U, R = config.run.hosts, grid.ulysses, grid.ring
    H, d = config.shape.heads, config.shape.head_dim
    H_kv = config.shape.alltoall_kv_heads(U)  # replicated past the kv heads
    e, backward = DTYPE_BYTES[config.shape.dtype], config.run.pass_ == Pass.BACKWARD
    clock = HostClock(config)
    parts, start = [], 0.0
    if U > 1:
        links = cluster.alltoall_links(grid.ulysses_groups, P)
        token = config.block_tokens * d * e * config.shape.batch  # one head of the host's tokens
        name_in, width_in = (
            ("q, k, v, dout", 2 * H + 2 * H_kv) if backward else ("q, k, v", H + 2 * H_kv)
        )
        first = Piece([f"all-to-all {name_in}"], P)
        tensors_in = len(name_in.split(", "))
        seconds = _alltoall(clock, config, token, width_in, tensors_in, U, links, "in")
        seconds = seconds + _replicas(clock, config, token, U, backward=False)
        start = collective(first, 0, np.zeros(P), seconds)
        parts.append(first)
    if R == 1:
        middle, flops = ulysses_attention(config, clock, start)
    else:
        group_parts, flops = inner(group_configs(config, grid), grid.ring_groups, cluster)
        middle = place(group_parts, grid.ring_groups, P, start)
    parts.append(middle)
    if U > 1:
        name_out, width_out = ("dq, dk, dv", H + 2 * H_kv) if backward else ("out", H)
        last = Piece([f"all-to-all {name_out}"], P)
        ready = np.full(P, max(middle.end(), start))
        tensors = len(name_out.split(", "))
        seconds = _alltoall(clock, config, token, width_out, tensors, U, links, "out")
        if backward:
            seconds = seconds + _replicas(clock, config, token, U, backward=True)
        collective(last, 0, ready, seconds)
        parts.append(last)
    return _result(config, grid, Piece.stack(parts), flops, strategy, memory_bytes, engine)


ALLTOALL_HOST_CALLS = {"in": 11, "out": 14}
"""PyTorch calls the host makes per tensor of an all-to-all, counted in YunChang's
``LongContextAttention`` (feifeibear/long-context-attention @ b93c30e, the benchmark's code:
yunchang/hybrid/attn_layer.py l.93-127 calls ``SeqAllToAll4D.apply`` on q, k and v and on the
output; yunchang/comm/all_to_all.py ``all_to_all_4D``): going in (l.36-61) the ``apply``,
``get_world_size``, ``reshape``, ``transpose``, ``contiguous``, ``empty_like``,
``all_to_all_single``, ``reshape``, ``transpose``, ``contiguous``, ``reshape``: 11; coming out
(l.63-91) the ``apply``, two ``get_world_size``, ``reshape``, two ``transpose``, ``contiguous``,
``reshape``, ``empty_like``, ``all_to_all_single``, ``reshape``, ``transpose``, ``contiguous``,
``reshape``: 14."""


def _alltoall(
    clock, config, token: float, width: int, tensors: int, U: int, links, way: str
) -> np.ndarray:
    """``(P,)`` seconds of one all-to-all of ``tensors`` tensors, ``width`` heads in all, of
    ``token`` bytes per head: the ``(U - 1) / U`` share that leaves the host over the links,
    and (under a real family) each tensor permuted into a contiguous send buffer before it
    and back after it, as DeepSpeed-Ulysses' ``_SeqAllToAll`` and YunChang's ``all_to_all_4d``
    do (``reshape``, ``transpose``, ``contiguous``: two copies, read and write); no shorter
    than the host takes to issue its calls (``ALLTOALL_HOST_CALLS`` per tensor, ``way`` in or
    out, at the family's ``host_call_s``: the host runs ahead of the GPU only while the GPU's
    work is longer)."""
    seconds = clock.transfer((U - 1) / U * token * width, 1, links)
    copies = elementwise_seconds(config, 2 * 2 * token * width, 2 * tensors)
    if copies:
        seconds = seconds + clock.kernel(np.full(config.run.hosts, copies))
    host = config.family.host_call_s
    if host is None or config.family.ideal:
        return seconds
    issue = ALLTOALL_HOST_CALLS[way] * tensors * host.at(config.kernel.end("host_call_s"))
    return np.maximum(seconds, issue)


def _replicas(clock, config, token: float, U: int, *, backward: bool) -> np.ndarray:
    """``(P,)`` seconds a host spends on key/value replicas around an all-to-all of degree
    ``U`` above the key/value heads (``ringsim.grid.kv_replicas``; none otherwise): forward,
    ``repeat_kv`` copies its ``k, v`` into ``U`` heads before sending (read ``H_kv``, write
    ``U`` heads); backward, the ``dk, dv`` of the ``U / H_kv`` replicas of each head come back
    and are summed onto it (read ``U``, write ``H_kv`` heads), as ``repeat_kv``'s backward
    does. Bytes over HBM at the family's elementwise rule (free under ``ideal``)."""
    H_kv = config.shape.kv_heads
    if U <= H_kv:
        return np.zeros(config.run.hosts)
    nbytes = 2 * token * (U + H_kv)  # k and v (or dk and dv): read one side, write the other
    seconds = elementwise_seconds(config, nbytes, 2)
    return (
        clock.kernel(np.full(config.run.hosts, seconds)) if seconds else np.zeros(config.run.hosts)
    )


def ulysses_attention(config: RingConfig, clock: HostClock, start: float) -> tuple[Piece, float]:
    """Every host attends all ``N`` tokens of its head group (``ulysses_shapes``): the Ulysses
    compute, one ``FullSequence`` plan. The ideal model counts the causal work as the
    ``P``-host contiguous ring's mean block work."""
    P = config.run.hosts
    schedule = config.schedule(layout="contiguous")
    work = float(sum(schedule.work_at(s).sum() for s in range(P))) / P**2
    run = config.run
    plan = FullSequence(run.seq_len, run.causal, work, run.pass_, run.sliding_window)
    part = Piece([f"attention, {config.shape.heads}/{P} heads"], P)
    begin = np.full(P, start)
    part.a["cs"][0], part.a["ce"][0] = begin, begin + clock.attention(plan)
    return part, float(plan.flops(config).sum())


def _result(config, grid, part, flops, strategy, memory_bytes, engine) -> StrategyResult:
    meta = {
        "pass": config.run.pass_,
        "engine": engine,
        "hardware": config.machine.hardware.name,
        "strategy": "ulysses" if grid.ring == 1 else strategy,
        "ulysses_degree": grid.ulysses,
        "ring_degree": grid.ring,
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
    return StrategyResult(
        config,
        timeline,
        None,
        float(flops),
        engine=engine,
        strategy=strategy,
        memory_bytes=memory_bytes,
        overlap_block=None,
        peer=True,
    )


def two_level_memory(
    config: RingConfig, ulysses_degree: int, group_bytes: Callable[[], float]
) -> float:
    """A ``U x R`` host's working set: Ulysses' own with ``R = 1``; else its ring group's part
    (``group_bytes()``, on ``H / U`` heads of ``N / R``-token blocks) plus, with ``U > 1``, the
    host's own q, k, v (or q, k, v, dout) shard, the all-to-all's send buffer."""
    run, shape = config.run, config.shape
    if ulysses_degree == run.hosts:
        return ulysses_working_set_bytes(shape, run.seq_len, run.hosts, pass_=run.pass_)
    total = group_bytes()
    if ulysses_degree > 1:
        H, H_kv = shape.heads, shape.alltoall_kv_heads(ulysses_degree)
        width = 2 * H + 2 * H_kv if run.pass_ == Pass.BACKWARD else H + 2 * H_kv
        e = DTYPE_BYTES[shape.dtype]
        total += config.block_tokens * width * shape.head_dim * e * shape.batch
    return float(total)


def ulysses_working_set_bytes(
    shape: AttentionShape, seq_len: int, hosts: int, *, pass_: str = "forward"
) -> float:
    """Bytes the attention layer ``shape`` holds on one Ulysses host of ``hosts`` sharing
    ``seq_len`` tokens (``ringsim.timer.strategies.ulysses``).

    The host owns ``c = N / P`` tokens of every head; after the all-to-all it holds all ``N``
    tokens of ``ceil(H / P)`` query heads and ``ceil(H_kv / P)`` key/value heads (one replica
    when ``P`` exceeds ``H_kv``, whose send buffer then holds ``P`` key/value heads: ``H_kv``
    below reads ``max(H_kv, P)`` there). Peak:

    * forward: its own q/k/v shard (``c (H + 2H_kv) d e``, the send buffer) plus the received
      head shard (``N (H' + 2H'_kv) d e``), the head-sharded output and lse
      (``N H' d e + 4 N H'``).
    * backward: the head-sharded q, k, v, out, dout (``N (3H' + 2H'_kv) d e``), lse, the fp32 dq
      accumulator (``4 N H' d``) and dk, dv (``2 N H'_kv d e``), plus the own-shard buffer of
      q, k, v, dout (``c (2H + 2H_kv) d e``).

    Every term is proportional to ``N / P`` while ``P`` divides the heads.
    """
    check_peer_args(seq_len, hosts, pass_)
    heads, head_dim = shape.heads, shape.head_dim
    kv_heads = shape.alltoall_kv_heads(hosts)  # the send buffer's, replicas included
    e = DTYPE_BYTES[shape.dtype]
    n, c = seq_len, seq_len / hosts
    h_here, kv_here = math.ceil(heads / hosts), math.ceil(shape.kv_heads / hosts)
    if pass_ == Pass.FORWARD:
        own = c * (heads + 2 * kv_heads) * head_dim * e
        gathered = n * (h_here + 2 * kv_here) * head_dim * e
        out = n * h_here * head_dim * e + 4 * n * h_here
        per_seq = own + gathered + out
    else:
        own = c * (2 * heads + 2 * kv_heads) * head_dim * e
        sharded = n * (3 * h_here + 2 * kv_here) * head_dim * e + 4 * n * h_here
        grads = 4 * n * h_here * head_dim + 2 * n * kv_here * head_dim * e
        per_seq = own + sharded + grads
    return float(shape.batch * per_seq)
