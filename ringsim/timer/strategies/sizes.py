"""What a strategy's timer would need, checked before it starts: ``check_strategy_fits``.

The ring refuses up front what it cannot run (``ringsim.timer.engine.result.check_fits``: at
most ``MAX_BLOCK_EVENTS`` block events, and the memory the run would take). The other
strategies do other work, so they have their own sizes, with ``P`` hosts, ``U`` the Ulysses
degree, ``R = P / U`` the ring degree and ``w`` the double ring's inner ring:

* ``ulysses`` (``R = 1``): the ``P``-host contiguous schedule's work, step by step: ``P^2``
  cells (``P`` is at most the key/value heads, so this only bites with huge head counts);
* ``allgather``: each ring group sums the ``R``-host schedule's work over its ``R`` steps:
  ``U R^2 = P R`` cells;
* ``hybrid`` (Ulysses x ring, ``U > 1``): ``U`` ring timers of ``R`` hosts, ``P (R + 1)``
  cells, and their timelines (kept to place them side by side) and the placed one;
* ``double-ring``: per ring group dense ``R x R`` tables (work, kind, owners: 17 bytes a
  pair), ``R^2`` timeline cells and ``R^2 / w`` inner-ring steps, each a round trip through
  Python; ``U`` groups.

Cells count against ``MAX_BLOCK_EVENTS`` like the ring's block events, except the double ring's,
which cost about a hundred times more each (measured on this 2-core machine, two other jobs
beside it: ``ringsim simulate --strategy double-ring``, 512 hosts, ``w = 8``: 6.8 s, ~26 us
per cell and ~200 us per inner-ring step; 2,048 hosts, ``w = 2048``: 6.3 s, ~1.5 us per cell),
so it has limits of its own: ``DOUBLE_RING_MAX_CELLS`` and ``DOUBLE_RING_MAX_STEPS``, each
about ten minutes there. Bytes count against the machine's memory (``memory_budget``). A
refusal is a ``ValueError`` naming the hosts (and the ring degree and window that decide the
size) and what the run would need, as the ring's.
"""

from __future__ import annotations

from ringsim.grid import Grid
from ringsim.timer.engine.config import RingConfig
from ringsim.timer.engine.result import MAX_BLOCK_EVENTS, memory_budget
from ringsim.timer.machine.topology import Cluster
from ringsim.timer.strategies.double_ring import default_window

DOUBLE_RING_MAX_CELLS = 2**28
"""The most ``(step, host)`` cells a double-ring run may fill (``U R^2``): ~7 min at 1.5 us."""
DOUBLE_RING_MAX_STEPS = 2**21
"""The most inner-ring steps a double-ring run may take (``U R^2 / w``): ~7 min at 200 us."""
TABLE_BYTES = 17
"""Bytes per ``(query slot, key slot)`` pair of the double ring's tables: float64 work, int8
kind, int64 owners."""
PIECE_BYTES = 8 * 10
"""Bytes per ``(row, host)`` cell of a strategy's timeline piece: ten float64 arrays (compute,
send, receive start and end; the early ``k, v`` messages' four)."""


def check_strategy_fits(
    config: RingConfig,
    strategy: str,
    *,
    ulysses_degree: int | None = None,
    window: int | None = None,
    cluster: Cluster | None = None,
    placement: str = "ulysses-inner",
) -> None:
    """Refuse (``ValueError``) a ``strategy`` run of ``config`` too big for its timer or for
    this machine's memory, saying what it would need (see the module docstring). Arguments as
    ``simulate_strategy``'s; sizes it cannot read yet (a ``U`` that does not divide the hosts)
    are left to the strategy's own checks. The plain ring is ``simulate``'s to check."""
    P = config.hosts
    U = P if strategy == "ulysses" else (1 if ulysses_degree is None else ulysses_degree)
    if isinstance(U, bool) or not isinstance(U, int) or U <= 0 or P % U:
        return
    R = P // U
    method = {"hybrid": "ring", "double-ring": "double-ring", "allgather": "allgather"}.get(
        strategy, "ring"
    )
    if R > 1 and method == "ring" and strategy != "ulysses" and U == 1:
        return  # the ring itself: simulate's check_fits
    where = f"hosts={P}" + (f" (ring degree {R} x Ulysses degree {U})" if U > 1 else "")
    if R == 1:
        _check(where, "Ulysses", cells=P * P, nbytes=PIECE_BYTES * 3 * P)
    elif method == "allgather":
        _check(where, "all-gather", cells=P * R, nbytes=PIECE_BYTES * 3 * P)
    elif method == "ring":
        rows = R + 1
        _check(where, "Ulysses x ring", cells=P * rows, nbytes=3 * PIECE_BYTES * rows * P)
    else:
        _check_double_ring(config, where, U, R, window, cluster, placement)


def _check(where: str, timer: str, *, cells: int, nbytes: float, limit: int = MAX_BLOCK_EVENTS):
    if cells > limit:
        raise ValueError(
            f"{where} is too many for the {timer} timer: {cells:.3g} (step, host) cells, more "
            f"than its limit of 2^{limit.bit_length() - 1}; it would need {_gib(nbytes)}"
        )
    budget = memory_budget()
    if nbytes > budget:
        raise ValueError(
            f"{where}: the {timer} timer would need {_gib(nbytes)}, more than this machine's "
            f"{_gib(budget)} of memory"
        )


def _check_double_ring(config, where, U, R, window, cluster, placement) -> None:
    rows = 3 * R  # rounds x (w inner steps + the outer hops), at most
    nbytes = TABLE_BYTES * R * R + 3 * PIECE_BYTES * rows * config.hosts
    _check(where, "double ring", cells=U * R * R, nbytes=nbytes, limit=DOUBLE_RING_MAX_CELLS)
    if isinstance(window, int) and not isinstance(window, bool) and window > 0:
        w = window
    elif window is None:
        cluster = Cluster.switch(config.hardware, config.hosts) if cluster is None else cluster
        w = default_window(cluster, Grid(U, R, placement).ring_group(0))
    else:
        return  # a bad window: double_ring's own check names it
    steps = U * R * R // w
    if steps > DOUBLE_RING_MAX_STEPS:
        raise ValueError(
            f"{where}, window={w}: the double ring's timer would take {steps:.3g} inner-ring "
            f"steps (R^2 / window per ring group), more than its limit of "
            f"2^{DOUBLE_RING_MAX_STEPS.bit_length() - 1}; a larger window takes fewer"
        )


def _gib(nbytes: float) -> str:
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)):
        if nbytes >= scale:
            return f"{nbytes / scale:,.1f} {unit}"
    return f"{nbytes / 2**10:.1f} KiB"
