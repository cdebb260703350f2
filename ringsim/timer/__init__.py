"""The timed executor: the ring schedule turned into seconds on modelled hardware.

What lives here, bottom up:

* the machine: hardware presets and calibrated profiles (``hardware``), clusters of nodes and
  their links (``topology``), kernel families and their achieved-rate curves
  (``kernel_families``, read through ``kernel_model``: the time of one attention call by
  shape, mask and tile), the work between kernel calls as real rings run it (``ring_steps``:
  merges, accumulation, casts) and NCCL-like point-to-point transfers (``collectives``);
* the counts: FLOPs, bytes and the overlap threshold (``cost``), model shapes (``models``),
  memory per host (``memory``, with the frameworks' overhead in ``frameworks``);
* the run: its configuration (``config``), the clock that turns work into durations
  (``clock``), the two engines that execute one ring pass (``engines``: the vectorised one and
  the heap oracle), the driver that chains passes into a ``Timeline`` (``run``) and its result
  (``result``);
* beyond one ring: Ulysses and all-gather (``strategies``), Ulysses x ring and the double ring
  placed on a cluster (``hybrid``, ``double_ring``, stitched from ``pieces``), and the
  planner that ranks them (``planner``);
* checking the model: the waterfall from the ideal ring to a real one (``waterfall``), the
  published measurements (``published``) and their prediction (``validate``).

It may import the core (``ringsim.schedule``, ``layouts``, ``masks``, ``grid``, ``_checks``)
and NumPy, never the numerics, the views or the command line.
"""

from ringsim.timer.engine.clock import HostClock
from ringsim.timer.engine.config import ENGINES, PASSES, RingConfig, parse_length
from ringsim.timer.engine.result import (
    SimResult,
    count_events,
    grad_rows,
    kv_messages,
    memory_per_host_bytes,
    min_block_for_overlap,
)
from ringsim.timer.engine.run import simulate

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
