"""All-gather context parallelism (the context parallelism used to train Llama 3, arXiv
2407.21783 Sec. 3.3.2): every host gathers the keys and values of all ``N`` tokens, then
attends its own ``c`` queries to them.

Each ring group (``U = 1``: all hosts) all-gathers k, v and attends its queries to them
(layout ``zigzag`` balances the causal work): under the ideal family computing its own block
while the gather runs, under a real one as TransformerEngine's implementation does, the
gather first (``allgather_group``). Backward gathers k, v again, computes, and
reduce-scatters ``dk, dv``. Memory per host ``~ N``: all keys and values.

The all-gather and reduce-scatter are rings of ``P - 1`` hops of one ``c``-token block each
(``m alpha + M / B``, as every collective here), on the cluster's links.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ringsim.schedule import Pass
from ringsim.sharing import ALLGATHER
from ringsim.timer.cost import (
    DTYPE_BYTES,
    AttentionShape,
    hiding_block,
)
from ringsim.timer.engine.attention import BlockSteps, GatheredCalls
from ringsim.timer.engine.clock import HostClock
from ringsim.timer.engine.config import RingConfig
from ringsim.timer.engine.result import StrategyResult
from ringsim.timer.machine.topology import Cluster
from ringsim.timer.strategies.base import Strategy, check_peer_args
from ringsim.timer.strategies.frame import (
    Inner,
    collective,
    run_distinct,
    run_two_level,
    two_level_memory,
)
from ringsim.timer.strategies.pieces import Piece
from ringsim.timer.strategies.sizes import PIECE_BYTES, check_cells


class AllGather(Strategy):
    record = ALLGATHER
    flat = True  # at its default U = 1, every host gathers from every other

    def check_fits(self, config, grid, cluster, window) -> None:
        P = config.run.hosts
        check_cells(grid, "all-gather", cells=P * grid.ring, nbytes=PIECE_BYTES * 3 * P)

    def run(self, config, grid, cluster, window, engine) -> StrategyResult:
        gathers = on_gather_links(config, allgather_group)
        memory = self.working_set_bytes(config, grid.ulysses)
        result = run_two_level(
            config, grid, cluster, gathers, strategy=self.name, memory_bytes=memory, engine=engine
        )
        if grid.ulysses == 1 and config.run.overlap:
            result.overlap_block = allgather_overlap_block(config)
        return result

    def working_set_bytes(self, config: RingConfig, ulysses_degree: int = 1) -> float:
        U, run = ulysses_degree, config.run
        group = lambda: allgather_working_set_bytes(
            config.shape.split(U), run.seq_len, run.hosts // U, pass_=run.pass_
        )
        return two_level_memory(config, U, group)


def on_gather_links(config: RingConfig, group) -> Inner:
    """The ``Inner`` part that runs ``group(config, links)`` (a ``(Piece, FLOPs)`` per ring
    group) on each group's all-gather links of the cluster (they share them); groups that
    nothing tells apart run once (``run_distinct``, tagged with ``group``'s name)."""

    def gathers(configs: list[RingConfig], groups: list[list[int]], cluster: Cluster):
        bw, lat = cluster.allgather_links(groups, config.run.hosts)
        keys = [(bw[g].tobytes(), lat[g].tobytes()) for g in groups]
        run = lambda i: group(configs[i], (bw[groups[i]], lat[groups[i]]))
        done = run_distinct(configs, keys, run, tag=(group.__qualname__,))
        return [p for p, _ in done], sum(f for _, f in done)

    return gathers


def allgather_group(config: RingConfig, links: tuple) -> tuple[Piece, float]:
    """All-gather context parallelism on one group (``config.hosts`` ranks); backward
    reduce-scatters dk, dv.

    Under the ideal family (the paper-style best case) each host computes its own block while
    the gather runs, then the rest, one ``BlockSteps`` plan each. A real implementation runs
    as TransformerEngine's ``AttnFuncWithCPAndKVAllGather`` and Llama 3 (Sec. 3.3.2, "the
    all-gather communication latency is exposed in the critical path"): the gather first,
    then the host's calls on the gathered keys (``GatheredCalls``)."""
    P, c = config.run.hosts, config.block_tokens
    schedule = config.schedule()
    kv = config.shape.kv_bytes(c)
    clock = HostClock(config)
    labels = ["all-gather k, v + own block", "attention to the gathered k, v"]
    if config.run.pass_ == Pass.BACKWARD:
        labels.append("reduce-scatter dk, dv")
    part = Piece(labels, P)
    gather = clock.transfer((P - 1) * kv, P - 1, links)
    gathered = np.full(P, collective(part, 0, np.zeros(P), gather))
    a = part.a
    if config.family.ideal:
        own, rest = BlockSteps(schedule, (0,)), BlockSteps(schedule, tuple(range(1, P)))
        own_start = np.zeros(P) if config.run.overlap else gathered
        a["cs"][0], a["ce"][0] = own_start, own_start + clock.attention(own)
        a["cs"][1] = np.maximum(a["ce"][0], gathered)
        flops = own.flops(config).sum() + rest.flops(config).sum()
    else:
        rest = GatheredCalls(schedule)
        a["cs"][1] = gathered
        flops = rest.flops(config).sum()
    a["ce"][1] = a["cs"][1] + clock.attention(rest)
    if config.run.pass_ == Pass.BACKWARD:
        grads = config.shape.grad_bytes(c, config.shape.grad_dtype)
        ready = np.full(P, a["ce"][1].max())
        collective(part, 2, ready, clock.transfer((P - 1) * grads, P - 1, links))
    return part, float(flops)


def allgather_overlap_block(config: RingConfig) -> float:
    """Smallest ``c`` for which the host's own block (no mask) hides the whole all-gather.

    ``4 c^2 H d / F >= (P - 1) (alpha + 2 c H_kv d e / B)`` (forward; a backward block computes
    2.5 x that against the same gather): the ring's condition with ``P - 1`` blocks to hide
    instead of one, so about ``(P - 1)`` times the ring's threshold. (The ideal model's rates.)
    """
    if config.run.hosts == 1:
        return 0.0
    hw, hops, batch = config.machine.hardware, config.run.hosts - 1, config.shape.batch
    one = replace(config.shape, batch=1)  # one sequence's pairs and bytes; latency per sequence
    a = one.flops(1, 1, pass_=config.run.pass_) / config.flops_rate
    beta = hops * one.kv_bytes(1) / hw.link_bandwidth
    latency = hops * hw.link_latency / batch
    return hiding_block(a, beta, latency)


def allgather_working_set_bytes(
    shape: AttentionShape, seq_len: int, hosts: int, *, pass_: str = "forward"
) -> float:
    """Bytes the attention layer ``shape`` holds on one all-gather (Llama 3 context-parallel)
    host of ``hosts`` sharing ``seq_len`` tokens.

    The host keeps its ``c = N / P`` queries and gathers the keys and values of **all** ``N``
    tokens, so the dominant term grows with ``N``, not ``N / P``:

    * forward: q and out (``2 c H d e``), lse (``4cH``), all keys and values
      (``kv_block_bytes(N)`` = ``2 N H_kv d e``).
    * backward: q, out, dout (``3 c H d e``), lse, the fp32 dq accumulator (``4 c H d``), and all
      keys and values with their dk, dv partial sums before the reduce-scatter
      (``kv_block_bytes(N, pass_="backward")``).
    """
    check_peer_args(seq_len, hosts, pass_)
    heads, head_dim, e = shape.heads, shape.head_dim, DTYPE_BYTES[shape.dtype]
    c = seq_len / hosts
    q_like = c * heads * head_dim * e
    lse = 4 * c * heads
    everything = replace(shape, batch=1).kv_bytes(seq_len, pass_=pass_)
    if pass_ == Pass.FORWARD:
        per_seq = 2 * q_like + lse + everything
    else:
        per_seq = 3 * q_like + lse + 4 * c * heads * head_dim + everything
    return float(shape.batch * per_seq)
