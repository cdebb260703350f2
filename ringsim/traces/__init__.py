"""Recorded runs: the readers of the traces people record and the ring found in them.

* ``read_traces(paths)``: a ``Recording`` (every rank's events on its own clock) from PyTorch
  profiler / Kineto Chrome-trace JSON (``.json`` or ``.json.gz``, one file per rank or
  merged; ``kineto``) or Nsight Systems' SQLite export (``nsys``), told apart by their
  content, not their names;
* ``read_ring(paths, hints)``: the ring in them (``ring``): its members, configuration
  (``shape``), passes and, step by step, the measured timeline of a typical pass.

Reading needs the standard library only (the ring's arrays, NumPy); nothing here imports a
profiler or a trace processor.
"""

from __future__ import annotations

from ringsim.traces.events import Event, RankRecord, Recording, TraceError
from ringsim.traces.kinds import FAMILIES, AttentionFamily, classify, register_family
from ringsim.traces.read import read_trace, read_traces
from ringsim.traces.ring import RecordedRing, read_ring

__all__ = [
    "FAMILIES",
    "AttentionFamily",
    "Event",
    "RankRecord",
    "RecordedRing",
    "Recording",
    "TraceError",
    "classify",
    "read_ring",
    "read_trace",
    "read_traces",
    "register_family",
]
