"""The timed executor: the ring schedule turned into seconds on modelled hardware.

What lives here: hardware presets and calibrated profiles (``hardware``), FLOP and byte counts
and the overlap threshold (``cost``), a run's configuration (``config``), the clock that turns
work into durations (``clock``), the two engines that execute one ring pass (``engines``: the
vectorised one and the heap oracle), the driver that chains passes into a ``Timeline``
(``run``) and its result (``result``), the memory model (``memory``) and the other strategies
timed beside the ring (``strategies``: Ulysses, all-gather). It may import the core
(``ringsim.schedule``, ``layouts``, ``masks``, ``_checks``) and NumPy, never the numerics, the
views or the command line.
"""

from ringsim.timer.clock import HostClock
from ringsim.timer.config import ENGINES, PASSES, RingConfig, parse_length
from ringsim.timer.result import (
    SimResult,
    count_events,
    grad_rows,
    kv_messages,
    memory_per_host_bytes,
    min_block_for_overlap,
)
from ringsim.timer.run import simulate

__all__ = [
    "ENGINES",
    "PASSES",
    "HostClock",
    "RingConfig",
    "SimResult",
    "count_events",
    "grad_rows",
    "kv_messages",
    "memory_per_host_bytes",
    "min_block_for_overlap",
    "parse_length",
    "simulate",
]
