"""Timed repeats: every measured pass (the ring's, the hybrid's) is timed the same way.

A rank runs ``warmup`` untimed repeats, then ``repeats`` timed ones (``TimedRepeats``). Each
timed pass starts at ``start_line`` (every rank lined up: a barrier and, on gloo, a short
settling pause) and is read between device syncs (CUDA runs asynchronously). Across ranks a
pass lasts as long as its slowest rank (``slowest_per_pass``), and a run is its median pass.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence

import numpy as np
import torch
import torch.distributed as dist

from kernels.distributed.progress import alive

# Seconds the ranks pause after the barrier that starts a timed region on gloo (start_line)
SETTLE_S = 0.02


def start_line(group=None) -> None:
    """Line every rank up for a timed region: a barrier, then (gloo) a pause of ``SETTLE_S``.
    As a gloo barrier returns, its own messages and threads are still winding down, and a pass
    started at once often pays for them in its first transfer (results/notes-calibration.md):
    a timed pass must not pay for the harness that lines it up."""
    dist.barrier(group)
    if dist.get_backend(group) == "gloo":
        time.sleep(SETTLE_S)


def rank_device() -> torch.device:
    """This rank's device: its CUDA device under NCCL, else the CPU."""
    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def sync_device(device: torch.device) -> None:
    """Wait for ``device``'s queued work (CUDA kernels run asynchronously), before a clock read."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class TimedRepeats:
    """``warmup + repeats`` repeats of one pass on this rank, timed alike::

        timing = TimedRepeats(config.warmup, config.repeats, device=device)
        for i in timing:                   # says alive() before each repeat
            ...                            # untimed set-up
            with timing.forward():         # start_line, then timed between device syncs
                out = attention(q, k, v)
            with timing.backward():        # optional: timed from the forward's end
                out.backward(dout)

    After the loop ``forward_s`` and ``backward_s`` hold the timed repeats' seconds (a
    backward that did not run counts 0); ``timed`` says whether the current repeat is one."""

    def __init__(self, warmup: int, repeats: int, *, device: torch.device, group=None):
        self.warmup, self.repeats = warmup, repeats
        self.device, self.group = device, group
        self.forward_s: list[float] = []
        self.backward_s: list[float] = []
        self.timed = False
        self._seconds = {"forward": 0.0, "backward": 0.0}

    def __iter__(self) -> Iterator[int]:
        for i in range(self.warmup + self.repeats):
            alive()
            self.timed = i >= self.warmup
            self._seconds = {"forward": 0.0, "backward": 0.0}
            yield i
            if self.timed:
                self.forward_s.append(self._seconds["forward"])
                self.backward_s.append(self._seconds["backward"])

    @contextlib.contextmanager
    def forward(self) -> Iterator[None]:
        start_line(self.group)
        sync_device(self.device)
        t0 = time.perf_counter()
        yield
        sync_device(self.device)
        self._seconds["forward"] = time.perf_counter() - t0

    @contextlib.contextmanager
    def backward(self) -> Iterator[None]:
        t0 = time.perf_counter()
        yield
        sync_device(self.device)
        self._seconds["backward"] = time.perf_counter() - t0


def slowest_per_pass(per_rank: Sequence[Sequence[float]]) -> list[float]:
    """Per timed pass, the slowest rank's seconds (a pass ends when its last rank is done):
    ``per_rank[r][p]`` is rank ``r``'s pass ``p``."""
    return [float(t) for t in np.max(np.asarray(per_rank, float), axis=0)]


def median_pass(per_rank: Sequence[Sequence[float]]) -> float:
    """A run's time: the median over its passes of the slowest rank (``slowest_per_pass``)."""
    return float(np.median(slowest_per_pass(per_rank)))
