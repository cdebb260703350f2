"""Ways to split one sequence's attention over many devices, each a ``Strategy`` object in
the registry ``STRATEGIES``, timed on the engine and the machine.

* ``ring``: one ring of all hosts (``ring``);
* ``ulysses``: DeepSpeed-Ulysses, all-to-alls re-shard by heads (``ulysses``);
* ``allgather``: all-gather context parallelism, as Llama 3 (``allgather``);
* ``hybrid``: Ulysses x ring, USP (``ring``);
* ``double-ring``: inner rings in a node, an outer ring across nodes, LoongTrain
  (``double_ring``);
* ``llama3``: all-gather, then each host's slice of each packed document (``llama3``).

``base`` says what a strategy is (and holds the registry), ``frame`` the Ulysses all-to-alls
every two-level strategy sits in, ``pieces`` how their timelines are stitched, ``sizes`` what
a run would cost the timer (each strategy's ``check_fits`` refuses one too big up front).
Every strategy times its attention through ``HostClock.attention`` (or the ring engine's
steps, which use the same kernel model) and its transfers through ``HostClock.transfer``, so
``--implementation`` means the same thing everywhere. ``simulate_strategy`` is the front door.
"""

from __future__ import annotations

from ringsim.timer.engine.config import RingConfig
from ringsim.timer.engine.result import StrategyResult
from ringsim.timer.machine.topology import Cluster
from ringsim.timer.strategies.allgather import AllGather
from ringsim.timer.strategies.base import STRATEGIES, Strategy, get_strategy, register
from ringsim.timer.strategies.double_ring import DoubleRing
from ringsim.timer.strategies.llama3 import Llama3Varlen
from ringsim.timer.strategies.ring import Hybrid, Ring
from ringsim.timer.strategies.ulysses import Ulysses

for _strategy in (Ring(), Ulysses(), AllGather(), Hybrid(), DoubleRing(), Llama3Varlen()):
    register(_strategy)

FLAT_STRATEGIES = tuple(name for name, s in STRATEGIES.items() if s.flat)
"""The strategies whose default run puts every host in one group: the ring, Ulysses and
all-gather (``U = 1``)."""


def simulate_strategy(
    config: RingConfig,
    strategy: str | Strategy,
    *,
    ulysses_degree: int | None = None,
    cluster: Cluster | None = None,
    placement: str = "ulysses-inner",
    window: int | None = None,
    engine: str = "vectorized",
) -> StrategyResult:
    """Time ``config`` under ``strategy`` (a name of ``STRATEGIES`` or a ``Strategy``) on
    ``cluster`` (a ``ringsim.timer.machine.topology.Cluster``; default one node with an ideal
    switch at the hardware's link).

    ``ulysses_degree`` ``U`` (hybrid, double-ring, allgather; default 1) makes ``U``-host
    Ulysses groups and runs the strategy on ``hosts / U`` ranks per head group
    (``ringsim.timer.strategies.frame``); ``ring`` takes none, ``ulysses`` is ``U = hosts``.
    Every strategy runs forward and backward, the ring also a training step and decode;
    per-host ``speed`` and ``jitter`` act as in the ring's timer."""
    return get_strategy(strategy).simulate(
        config,
        ulysses_degree=ulysses_degree,
        cluster=cluster,
        placement=placement,
        window=window,
        engine=engine,
    )


def compare_strategies(config: RingConfig, strategies=FLAT_STRATEGIES) -> dict[str, dict]:
    """``{strategy: summary}`` for the strategies that can run ``config`` (Ulysses is skipped
    past its head cap rather than raising)."""
    return {
        name: simulate_strategy(config, name).summary()
        for name in strategies
        if get_strategy(name).can_run(config)
    }


def with_bandwidth(config: RingConfig, bandwidth: float) -> RingConfig:
    """``config`` on the same device with another link bandwidth (for sweeps;
    ``Hardware.with_link``: the achieved point-to-point range of its own link no longer
    applies)."""
    return config.replace(hardware=config.machine.hardware.with_link(bandwidth))


__all__ = [
    "FLAT_STRATEGIES",
    "STRATEGIES",
    "Strategy",
    "compare_strategies",
    "get_strategy",
    "simulate_strategy",
    "with_bandwidth",
]
