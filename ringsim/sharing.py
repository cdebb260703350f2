"""The ways ``P`` hosts share one sequence's attention: one record per strategy.

Every table that knows a strategy is keyed from its record here, so a new strategy is one
record (and its executors), never a name to add to four dictionaries: the exact executor's
group methods (``ringsim.numerics.context_parallel.METHODS``), the timer's strategies
(``ringsim.timer.strategies``, each holding its record), the memory model's methods
(``ringsim.timer.step.memory.METHODS``), the planner (which enumerates the timer's registry)
and the figures (``ringsim.views.planning``: ``drawing`` gives every strategy a marker and a
colour, an unknown one the default pair). This module is the core: it imports nothing.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sharing:
    """One strategy: ``name`` (the key of every table that knows it), ``description``; how a
    figure draws it (``marker``: a Matplotlib marker, ``colour``: Okabe-Ito); ``windowed``:
    its ring groups take an inner-ring size (the double ring)."""

    name: str
    description: str
    marker: str
    colour: str
    windowed: bool = False


RING = Sharing(
    "ring",
    "one ring of all hosts; each passes its key/value block on, P - 1 hops",
    "o",
    "#0072B2",
)
ULYSSES = Sharing(
    "ulysses",
    "all-to-alls re-shard by heads; each host attends the whole sequence",
    "s",
    "#E69F00",
)
ALLGATHER = Sharing(
    "allgather",
    "all-gather every key and value, then attend the host's own queries",
    "v",
    "#D55E00",
)
HYBRID = Sharing(
    "hybrid",
    "Ulysses x ring (USP): U-host all-to-alls around R-host rings",
    "^",
    "#009E73",
)
DOUBLE_RING = Sharing(
    "double-ring",
    "inner rings inside a node, an outer ring across nodes (LoongTrain)",
    "D",
    "#CC79A7",
    windowed=True,
)

LLAMA3 = Sharing(
    "llama3",
    "all-gather every key and value, then each host attends its slice of each packed "
    "document: one variable-length call (Llama 3's packed documents)",
    "X",
    "#56B4E9",
)

SHARINGS: dict[str, Sharing] = {
    s.name: s for s in (RING, ULYSSES, ALLGATHER, HYBRID, DOUBLE_RING, LLAMA3)
}
"""Every strategy's record, by name, in the order figures list them."""

DEFAULT_DRAWING = ("P", "#999999")
"""The marker and colour of a strategy no record draws (a plus, grey): it still shows."""


def drawing(name: str) -> tuple[str, str]:
    """``(marker, colour)`` a figure draws strategy ``name`` with (``DEFAULT_DRAWING`` for a
    name without a record)."""
    record = SHARINGS.get(name)
    return DEFAULT_DRAWING if record is None else (record.marker, record.colour)
