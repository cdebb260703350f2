"""What the lessons take from the real backend (``kernels``, torch): a measured ring, a ring
recorded by ``torch.profiler`` and the source of the loop it ran.

``ringsim`` never imports ``kernels`` (the backend sits above it and imports it); like the
``calibrate`` and ``measure`` subcommands, these helpers load it by module name when they run.
A lesson that calls them needs torch; ``import ringsim.teach`` does not.
"""

from __future__ import annotations

import importlib
import inspect
import os
from pathlib import Path

# the real backend's modules these helpers read, by name (loaded at call time)
MEASURE_MODULE = "kernels.calibration.measure"
REPORT_MODULE = "kernels.calibration.report"
RING_MODULE = "kernels.distributed.ring"
LAUNCH_MODULE = "kernels.distributed.launch"
PROFILED_MODULE = "kernels.distributed.profiled"
LOOP_FIRST, LOOP_LAST = "for step in range", "kv = incoming"


def measure_real_ring(
    *,
    hosts: int = 2,
    seq_len: int = 2048,
    heads: int = 4,
    head_dim: int = 64,
    layout: str = "contiguous",
    causal: bool = False,
    repeats: int = 3,
) -> dict:
    """Run the real ring (``hosts`` gloo processes) against the simulator on a profile
    calibrated around every repeat, and return the report as a dict (``MeasureReport.to_json``:
    measured and predicted seconds with their 95% intervals, their ratio, the regime, the
    calibrated overlap threshold, per-step times and the error against float64)."""
    report = importlib.import_module(REPORT_MODULE)
    measure = importlib.import_module(MEASURE_MODULE).measure
    shape = report.RingShape(
        hosts=hosts, seq_len=seq_len, heads=heads, head_dim=head_dim, layout=layout, causal=causal
    )
    return measure(shape, report.MeasureOptions(repeats=repeats)).to_json()


def record_real_ring(
    folder: str | os.PathLike, *, hosts: int = 2, gz: bool = True, **run
) -> list[Path]:
    """Run the real ring (``hosts`` gloo processes) with every rank inside
    ``torch.profiler.profile(record_shapes=True)`` and return its trace files, one per rank, in
    ``folder`` (``kernels.distributed.profiled.record_ring``). ``run``: the problem's fields
    (``kernels.distributed.launch.RunConfig``: ``seq_len``, ``heads``, ``head_dim``,
    ``layout``, ``causal``, ``backward``, ``warmup``, ``repeats``, ...); no tensors come back."""
    config = importlib.import_module(LAUNCH_MODULE).RunConfig(**run, return_tensors=False)
    record = importlib.import_module(PROFILED_MODULE).record_ring
    paths, _ = record(config, hosts, folder, gz=gz)
    return paths


def real_ring_loop() -> str:
    """The step loop of the real ring's forward (``kernels.distributed.ring.ring_forward``), as
    its source says it today: from ``for step in range`` to ``kv = incoming``, dedented."""
    source = inspect.getsource(importlib.import_module(RING_MODULE).ring_forward).splitlines()
    first = next(i for i, line in enumerate(source) if LOOP_FIRST in line)
    last = next(i for i, line in enumerate(source) if LOOP_LAST in line)
    lines = source[first : last + 1]
    indent = len(lines[0]) - len(lines[0].lstrip())
    return "\n".join(line[indent:] for line in lines)
