"""The real ring recorded by ``torch.profiler``, one Chrome trace per rank: what a user of any
ring would record, made by this project's own ring, so that ``ringsim compare`` can be
checked on real traces (the tests, lesson 16) and on the first GPU run (``kernels.gpu``).

``record_ring(config, hosts, folder)`` launches ``hosts`` ranks (gloo on CPU, NCCL on GPUs),
each running ``run_ring`` under ``torch.profiler.profile(record_shapes=True)`` with the CPU
activity (and CUDA's on a GPU), and writes ``rank<r>.json`` (``.json.gz`` with ``gz``).
It returns the paths and each rank's ``run_ring`` answer: the forward timelines the ring
measured itself (``RankTimeline``), to hold the trace's reading against.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from kernels.distributed.launch import RunConfig, launch, run_ring

KINETO_LOG_LEVEL, QUIET = "KINETO_LOG_LEVEL", "6"  # libkineto/src/init.cpp reads the level


def profiled_rank(rank: int, hosts: int, config: RunConfig, folder: str, gz: bool) -> dict:
    """One rank: ``run_ring(config)`` under the profiler, its trace exported to ``folder``;
    returns the ring's answer (timelines and times, no tensors) and the trace's path."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available() and torch.distributed.get_backend() == "nccl":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities, record_shapes=True) as prof:
        result = run_ring(rank, hosts, config)
    path = os.path.join(folder, f"rank{rank}.json" + (".gz" if gz else ""))
    prof.export_chrome_trace(path)  # torch writes gzip when the name ends in .gz
    keep = ("forward_timelines", "forward_timeline", "forward_s", "backward_s")
    return {"trace": path, **{k: result[k] for k in keep if k in result}}


def record_ring(
    config: RunConfig,
    hosts: int,
    folder: str | os.PathLike,
    *,
    backend: str = "gloo",
    gz: bool = False,
    timeout_s: float = 120.0,
) -> tuple[list[Path], Sequence[dict]]:
    """Run ``config`` on ``hosts`` ranks under the profiler; returns the trace paths (by rank)
    and every rank's answer (``profiled_rank``)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    # Kineto prints a line at every profiler start and stop (its USDT level, 5:
    # libkineto/src/ILoggerObserver.cpp); the ranks inherit a level above it, unless set
    saved = os.environ.get(KINETO_LOG_LEVEL)
    os.environ.setdefault(KINETO_LOG_LEVEL, QUIET)
    try:
        answers = launch(
            profiled_rank,
            hosts,
            args=(config, str(folder), gz),
            backend=backend,
            timeout_s=timeout_s,
        )
    finally:
        if saved is None:
            os.environ.pop(KINETO_LOG_LEVEL, None)
    return [Path(a["trace"]) for a in answers], answers
