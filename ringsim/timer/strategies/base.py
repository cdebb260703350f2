"""What a strategy is, and the registry of them.

A strategy is a way for ``P`` hosts to share one sequence's attention: the ring, Ulysses,
all-gather context parallelism, Ulysses x ring (USP) and the double ring. Each is a
``Strategy`` object in ``STRATEGIES``: it resolves its Ulysses degree ``U`` (``P = U x R``),
times a run as a plan of kernel calls (``HostClock.attention``, or the ring engine's steps)
and collectives (``HostClock.transfer`` on the cluster's links), and counts its attention
working set on one host. Adding a strategy is one class and its tests; nothing else compares
strategy names.
"""

from __future__ import annotations

from ringsim.checks import check_choice, check_instance, check_positive_int
from ringsim.grid import PLACEMENTS, Grid, check_ulysses_degree
from ringsim.schedule import RING_PASSES
from ringsim.sharing import Sharing
from ringsim.timer.engine.config import RingConfig
from ringsim.timer.engine.result import StrategyResult
from ringsim.timer.machine.topology import Cluster


class Strategy:
    """One way to share a sequence's attention. Subclasses set ``record`` (its
    ``ringsim.sharing.Sharing``: name, description, drawing, ``windowed``), ``flat`` (at its
    default degree every host is in one group) and implement ``run`` and
    ``working_set_bytes``."""

    record: Sharing
    flat: bool = False
    passes: tuple[str, ...] = RING_PASSES
    uses_layout: bool = True
    """Whether the token layout changes this strategy's run (Ulysses attends whole sequences)."""
    documents_only: bool = False
    """Whether it differs from another strategy only on packed documents (a planner offers it
    where documents are given)."""

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def description(self) -> str:
        return self.record.description

    @property
    def windowed(self) -> bool:
        """Whether a ``window`` (inner ring size) means anything to this strategy."""
        return self.record.windowed

    def runs(self, ulysses: int, ring: int) -> bool:
        """Whether this strategy is one way to run a ``U x R`` group (``ulysses`` x ``ring``
        hosts): by default any group with a sequence-parallel part (``R > 1``)."""
        return ring > 1

    def rounds(self, ring: int, per_node: int) -> int:
        """Sequential rounds a pass of ``ring`` ranks takes, ``per_node`` of them on one node
        (what a planner's timing of it costs grows with): one, but for the double ring."""
        return 1

    def distinct(self, ring: int, per_node: int) -> bool:
        """Whether running ``ring`` ranks with ``per_node`` of them on one node differs from
        a strategy already counted (the double ring of one node is the flat ring)."""
        return True

    def degree(self, config: RingConfig, ulysses_degree: int | None) -> int:
        """The Ulysses degree ``U`` this run uses (default 1), checked against the hosts and
        heads (``ValueError`` naming it; above the key/value heads it replicates them:
        ``ringsim.grid.check_ulysses_degree``)."""
        u = 1 if ulysses_degree is None else ulysses_degree
        shape = config.shape
        return check_ulysses_degree(config.run.hosts, shape.kv_heads, u, heads=shape.heads)

    def simulate(
        self,
        config: RingConfig,
        *,
        ulysses_degree: int | None = None,
        cluster: Cluster | None = None,
        placement: str = "ulysses-inner",
        window: int | None = None,
        engine: str = "vectorized",
    ) -> StrategyResult:
        """Time ``config`` under this strategy on ``cluster`` (default: one node with an ideal
        switch at the hardware's link), Ulysses groups placed by ``placement``; ``window``
        sizes the double ring's inner rings."""
        check_instance("config", config, RingConfig, "a RingConfig")
        U = self.degree(config, ulysses_degree)
        check_choice("pass", config.run.pass_, self.passes, also=f" for strategy {self.name}")
        check_choice("placement", placement, PLACEMENTS)
        check_instance("cluster", cluster, Cluster | type(None), "a Cluster (get_cluster) or None")
        if window is not None and not self.windowed:
            raise ValueError(f"window is for the double ring only, got window={window!r}")
        P = config.run.hosts
        cluster = Cluster.switch(config.machine.hardware, P) if cluster is None else cluster
        cluster.check_hosts(P)
        if U > 1 and config.run.segment_ids is not None:
            raise ValueError("segment_ids are not supported with ulysses_degree > 1")
        grid = Grid(U, P // U, placement)
        self.check_fits(config, grid, cluster, window)
        return self.run(config, grid, cluster, window, engine)

    def check_fits(
        self, config: RingConfig, grid: Grid, cluster: Cluster, window: int | None
    ) -> None:
        """Refuse (``ValueError``, ``ringsim.timer.strategies.sizes``) a run too big for this
        strategy's timer or this machine's memory, before any work. The plain ring's is
        ``simulate``'s own check."""

    def can_run(self, config: RingConfig) -> bool:
        """Whether this strategy can run ``config`` at all (every one can but Ulysses where
        its heads do not deal out)."""
        return True

    def run(
        self, config: RingConfig, grid: Grid, cluster: Cluster, window: int | None, engine: str
    ) -> StrategyResult:
        raise NotImplementedError

    def working_set_bytes(self, config: RingConfig, ulysses_degree: int = 1) -> float:
        """The attention layer's working set on one host (bytes)."""
        raise NotImplementedError

    def label(self, ulysses_degree: int, ring_degree: int, placement: str) -> str:
        """How a planner names one of this strategy's configurations (the placement only
        where both degrees exceed one, where it matters)."""
        label = f"{self.name} U{ulysses_degree}xR{ring_degree}"
        return label + (f" {placement}" if ulysses_degree > 1 and ring_degree > 1 else "")


STRATEGIES: dict[str, Strategy] = {}
"""Every strategy, by name, in the order they were registered."""


def register(strategy: Strategy) -> Strategy:
    """Add ``strategy`` to ``STRATEGIES`` (its ``name`` must be new)."""
    if not strategy.name or strategy.name in STRATEGIES:
        raise ValueError(f"a strategy needs a new name, got {strategy.name!r}")
    STRATEGIES[strategy.name] = strategy
    return strategy


def get_strategy(strategy: str | Strategy) -> Strategy:
    """The strategy called ``strategy`` (a ``Strategy`` is returned as is)."""
    if isinstance(strategy, Strategy):
        return strategy
    if not isinstance(strategy, str) or strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    return STRATEGIES[strategy]


def check_peer_args(seq_len: int, hosts: int, pass_: str) -> None:
    """The arguments of a peer's working-set count beside its ``AttentionShape`` (which checks
    itself): positive sizes, a forward or backward."""
    for name, value in (("seq_len", seq_len), ("hosts", hosts)):
        check_positive_int(name, value)
    if pass_ not in RING_PASSES:
        raise ValueError(f"pass must be forward or backward for the peers, got {pass_!r}")
