"""What each host did, and when: the output of the event timer and of the real backend.

A ``Timeline`` stores one array per activity, shaped ``(steps, hosts)``, in seconds from the start
of the run; ``NaN`` marks "no such activity at that step" (the last forward step sends nothing).
Arrays rather than objects, so a 4096-host ring (16.7M block events) stays cheap. Simulated and
measured runs produce the same type, so every view (Gantt plot, Chrome trace, summary) works on
both.

* ``compute``: the host computes its block of step ``s``.
* ``send``: the host's outgoing link carries its step-``s`` message to ``send_to[h]``.
* ``recv``: the host's incoming link delivers the step-``s`` message (the same transfer, seen
  from the receiving side: ``recv[s, h] == send[s, h - 1]`` in a simulated ring).

Idle time is whatever is left: ``makespan - busy compute`` per host.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

ACTIVITIES = ("compute", "send", "recv")


@dataclass
class Timeline:
    """Per-host activity intervals of one run; every array is ``(steps, hosts)``, seconds."""

    compute_start: np.ndarray
    compute_end: np.ndarray
    send_start: np.ndarray
    send_end: np.ndarray
    recv_start: np.ndarray
    recv_end: np.ndarray
    step_labels: list[str] = field(default_factory=list)
    meta: dict = field(default_factory=dict)

    @property
    def steps(self) -> int:
        return self.compute_start.shape[0]

    @property
    def hosts(self) -> int:
        return self.compute_start.shape[1]

    def interval(self, activity: str) -> tuple[np.ndarray, np.ndarray]:
        if activity not in ACTIVITIES:
            raise ValueError(f"activity must be one of {', '.join(ACTIVITIES)}, got {activity!r}")
        return getattr(self, f"{activity}_start"), getattr(self, f"{activity}_end")

    def busy(self, activity: str) -> np.ndarray:
        """``(hosts,)`` total seconds each host spends on ``activity``."""
        start, end = self.interval(activity)
        return np.nansum(end - start, axis=0)

    @property
    def makespan(self) -> float:
        """Time from the start until the last host finishes its last compute or transfer."""
        ends = [np.nanmax(getattr(self, f"{a}_end"), initial=0.0) for a in ACTIVITIES]
        return float(max(ends))

    @property
    def idle_fraction(self) -> float:
        """``1 - sum of compute / (hosts * makespan)``: the share of compute slots left idle."""
        span = self.makespan
        if span == 0:
            return 0.0
        return float(1.0 - self.busy("compute").sum() / (self.hosts * span))

    def intervals(self, host: int) -> Iterator[tuple[str, int, float, float]]:
        """``(activity, step, start, end)`` for one host, for plots and traces (small runs)."""
        for activity in ACTIVITIES:
            start, end = self.interval(activity)
            for s in range(self.steps):
                if np.isfinite(start[s, host]) and end[s, host] > start[s, host]:
                    yield activity, s, float(start[s, host]), float(end[s, host])
