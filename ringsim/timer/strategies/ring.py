"""The ring (Liu, Zaharia & Abbeel, 2023) and Ulysses x ring (USP: Fang & Zhao, arXiv
2405.07719): both run the ring engine (``ringsim.timer.simulate``) on each ring group's hops.

* ``ring``: all ``P`` hosts in one ring, ``P - 1`` hops of one key/value block each,
  overlapped with the compute of the previous block; memory per host ``~ c = N / P``. It runs
  every pass the timer has (forward, backward, a training step, decode).
* ``hybrid``: ``U``-host Ulysses groups around ``R = P / U``-host rings
  (``ringsim.timer.strategies.frame``); ``U = 1`` is the ring itself, bit for bit.
"""

from __future__ import annotations

from ringsim.grid import Grid
from ringsim.schedule import PASSES
from ringsim.sharing import HYBRID, RING
from ringsim.timer.engine.config import RingConfig
from ringsim.timer.engine.result import StrategyResult
from ringsim.timer.engine.run import simulate
from ringsim.timer.machine.topology import Cluster
from ringsim.timer.strategies.base import Strategy
from ringsim.timer.strategies.frame import (
    run_distinct,
    run_two_level,
    two_level_memory,
    with_hops,
)
from ringsim.timer.strategies.pieces import Piece
from ringsim.timer.strategies.sizes import PIECE_BYTES, check_cells


def ring_on_cluster(config: RingConfig, grid: Grid, cluster: Cluster, engine: str, name: str):
    """The plain ring of all ``P`` hosts, each hop timed on the cluster."""
    bw, lat = cluster.ring_links(grid.ring_groups, config.run.hosts)
    ring = simulate(with_hops(config, bw, lat), engine=engine)
    return StrategyResult(**vars(ring), strategy=name)


def ring_working_set(config: RingConfig, ulysses_degree: int) -> float:
    """One ring group's working set: a ring host's, on ``H / U`` heads of ``N / R`` blocks."""
    U, run = ulysses_degree, config.run
    block = run.seq_len // (run.hosts // U)
    return config.shape.split(U).working_set_bytes(block, run.pass_)


class Ring(Strategy):
    record = RING
    flat = True
    passes = PASSES

    def degree(self, config: RingConfig, ulysses_degree: int | None) -> int:
        if ulysses_degree not in (None, 1):
            raise ValueError(
                f"ulysses_degree must be 1 for the ring (use strategy hybrid), got {ulysses_degree}"
            )
        return 1

    def runs(self, ulysses: int, ring: int) -> bool:
        return ulysses == 1

    def run(self, config, grid, cluster, window, engine) -> StrategyResult:
        return ring_on_cluster(config, grid, cluster, engine, self.name)

    def working_set_bytes(self, config: RingConfig, ulysses_degree: int = 1) -> float:
        return ring_working_set(config, 1)

    def label(self, ulysses_degree: int, ring_degree: int, placement: str) -> str:
        return self.name


class Hybrid(Strategy):
    record = HYBRID

    def runs(self, ulysses: int, ring: int) -> bool:
        return ulysses > 1 and ring > 1  # U = 1 is the ring, R = 1 Ulysses

    def check_fits(self, config, grid, cluster, window) -> None:
        if grid.ulysses == 1:
            return  # the ring itself: simulate's check
        P, rows = config.run.hosts, grid.ring + 1
        check_cells(grid, "Ulysses x ring", cells=P * rows, nbytes=3 * PIECE_BYTES * rows * P)

    def run(self, config, grid, cluster, window, engine) -> StrategyResult:
        if grid.ulysses == 1:
            return ring_on_cluster(config, grid, cluster, engine, self.name)

        def rings(configs: list[RingConfig], groups: list[list[int]], cluster: Cluster):
            bw, lat = cluster.ring_links(groups, config.run.hosts)
            links = [(bw[g].tobytes(), lat[g].tobytes()) for g in groups]

            def ring(i: int):
                g = groups[i]
                run = simulate(with_hops(configs[i], bw[g], lat[g]), engine=engine)
                return Piece.of(run.timeline), run.flops_total

            runs = run_distinct(configs, links, ring, tag=("ring", engine))
            return [p for p, _ in runs], sum(f for _, f in runs)

        memory = self.working_set_bytes(config, grid.ulysses)
        return run_two_level(
            config, grid, cluster, rings, strategy=self.name, memory_bytes=memory, engine=engine
        )

    def working_set_bytes(self, config: RingConfig, ulysses_degree: int = 1) -> float:
        U = ulysses_degree
        return two_level_memory(config, U, lambda: ring_working_set(config, U))
