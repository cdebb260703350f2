"""What a strategy's timer would need, checked before it starts (``Strategy.check_fits``).

The ring refuses up front what it cannot run (``ringsim.timer.engine.result.check_fits``: at
most ``MAX_BLOCK_EVENTS`` block events, and the memory the run would take). The other
strategies do other work, so each counts its own size, with ``P`` hosts, ``U`` the Ulysses
degree, ``R = P / U`` the ring degree and ``w`` the double ring's inner ring:

* Ulysses (``R = 1``): the ``P``-host contiguous schedule's work, step by step: ``P^2``
  cells (``P`` is at most the key/value heads, so this only bites with huge head counts);
* all-gather: each ring group sums the ``R``-host schedule's work over its ``R`` steps:
  ``U R^2 = P R`` cells;
* Ulysses x ring (``U > 1``): ``U`` ring timers of ``R`` hosts, ``P (R + 1)`` cells, and their
  timelines (kept to place them side by side) and the placed one;
* double ring: per ring group dense ``R x R`` tables (work, kind, owners: 17 bytes a pair),
  ``R^2`` timeline cells and ``R^2 / w`` inner-ring steps, each a round trip through Python;
  ``U`` groups.

Cells count against ``MAX_BLOCK_EVENTS`` like the ring's block events, except the double ring's,
which cost about a hundred times more each (``results/notes-sizes.md``), so it has limits of its
own: ``DOUBLE_RING_MAX_CELLS`` and ``DOUBLE_RING_MAX_STEPS``. Bytes count against the machine's
memory (``memory_budget``). A refusal is a ``ValueError`` naming the hosts (and the degrees and
window that decide the size) and what the run would need, as the ring's.
"""

from __future__ import annotations

from ringsim.grid import Grid
from ringsim.timer.engine.result import MAX_BLOCK_EVENTS, memory_budget

DOUBLE_RING_MAX_CELLS = 2**28
"""The most ``(step, host)`` cells a double-ring run may fill (``U R^2``): minutes at ~1.5 us."""
DOUBLE_RING_MAX_STEPS = 2**21
"""The most inner-ring steps a double-ring run may take (``U R^2 / w``): minutes at ~200 us."""
TABLE_BYTES = 17
"""Bytes per ``(query slot, key slot)`` pair of the double ring's tables: float64 work, int8
kind, int64 owners."""
PIECE_BYTES = 8 * 10
"""Bytes per ``(row, host)`` cell of a strategy's timeline piece: ten float64 arrays (compute,
send, receive start and end; the early ``k, v`` messages' four)."""


def where(grid: Grid) -> str:
    """How a refusal names the run's size: the hosts, and the degrees when both matter."""
    P = grid.ulysses * grid.ring
    if grid.ulysses == 1 or grid.ring == 1:
        return f"hosts={P}"
    return f"hosts={P} (ring degree {grid.ring} x Ulysses degree {grid.ulysses})"


def check_cells(
    grid: Grid, timer: str, *, cells: int, nbytes: float, limit: int = MAX_BLOCK_EVENTS
) -> None:
    """Refuse a run of ``timer`` that fills more than ``limit`` ``(step, host)`` cells or needs
    more than this machine's memory (``nbytes``)."""
    if cells > limit:
        raise ValueError(
            f"{where(grid)} is too many for the {timer} timer: {cells:.3g} (step, host) cells, "
            f"more than its limit of 2^{limit.bit_length() - 1}; it would need {gib(nbytes)}"
        )
    budget = memory_budget()
    if nbytes > budget:
        raise ValueError(
            f"{where(grid)}: the {timer} timer would need {gib(nbytes)}, more than this "
            f"machine's {gib(budget)} of memory"
        )


def gib(nbytes: float) -> str:
    """Bytes in the largest binary unit that keeps a number >= 1."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)):
        if nbytes >= scale:
            return f"{nbytes / scale:,.1f} {unit}"
    return f"{nbytes / 2**10:.1f} KiB"
