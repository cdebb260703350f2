"""Per-rank timelines of the real ring: what each rank did at each step, and when.

Each rank records compute, send, receive and time blocked in waits with ``perf_counter`` on CPU
and CUDA events on GPU (``RankTimeline``); ``gather_timeline`` assembles the ranks' records into
a ``ringsim.timer.engine.timeline.Timeline``, the type the simulator produces, so measured and
simulated runs are read, plotted and traced alike.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from kernels.distributed.exchange import all_gather_json
from ringsim.timer.engine.timeline import Timeline


class RankClock:
    """Timestamps relative to ``start()``: ``perf_counter`` on CPU, CUDA events on GPU.

    CUDA marks are recorded on the current stream, so they time when the *device* reaches that
    point (a wait on a NCCL transfer shows as the gap before the next compute starts)."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self._origin = None

    def start(self) -> None:
        self._origin = self.mark()

    def mark(self):
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def seconds(self, mark) -> float:
        """Resolve a mark to seconds since ``start()`` (synchronises on GPU)."""
        if mark is None:
            return math.nan
        if self.cuda:
            mark.synchronize()
            return self._origin.elapsed_time(mark) / 1e3
        return mark - self._origin


@dataclass
class RankTimeline:
    """One rank's record of one pass: per step, seconds from the rank's start.

    ``compute``: the block computation (NaN for a skipped block); ``send``/``recv``: from
    posting the transfer to seeing it complete; ``wait``: time blocked waiting for transfers
    (the exposed communication)."""

    rank: int
    steps: int
    marks: dict[str, list] = field(default_factory=dict)

    def __post_init__(self):
        for name in ("compute", "send", "recv"):
            self.marks.setdefault(f"{name}_start", [None] * self.steps)
            self.marks.setdefault(f"{name}_end", [None] * self.steps)
        self.marks.setdefault("wait_start", [None] * self.steps)

    def resolve(self, clock: RankClock) -> dict[str, np.ndarray]:
        arrays = {k: np.array([clock.seconds(m) for m in v]) for k, v in self.marks.items()}
        arrays["wait"] = np.nan_to_num(arrays["recv_end"] - arrays.pop("wait_start"))
        return arrays


def gather_timeline(
    local: dict[str, np.ndarray], *, group=None, meta: dict | None = None
) -> Timeline:
    """All-gather every rank's resolved record into a ``(steps, hosts)`` ``Timeline``."""
    records = all_gather_json(local, group=group)
    return timeline_from_records(records, meta=meta)


def timeline_from_records(records: Sequence[dict], *, meta: dict | None = None) -> Timeline:
    """Stack per-rank records (as ``RankTimeline.resolve`` returns) into a ``Timeline``."""
    cols = {k: np.stack([np.asarray(r[k], float) for r in records], axis=1) for k in records[0]}
    wait = cols.pop("wait")
    info = {"measured": True, "wait": wait, **(meta or {})}
    return Timeline(**cols, meta=info)


def step_durations(timeline: Timeline) -> np.ndarray:
    """``(steps,)`` per step, the slowest host's time from the end of its previous step to the
    end of this one (its compute done and the next block arrived); measured and simulated
    timelines alike."""
    ends = np.fmax(
        np.nan_to_num(timeline.compute_end, nan=-np.inf),
        np.nan_to_num(timeline.recv_end, nan=-np.inf),
    )
    ends = np.maximum.accumulate(np.where(np.isfinite(ends), ends, 0.0), axis=0)
    starts = np.vstack([np.zeros((1, ends.shape[1])), ends[:-1]])
    return (ends - starts).max(axis=1)
