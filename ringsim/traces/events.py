"""What every trace reader produces: the events of each rank, on that rank's own clock.

A recorded run is a ``Recording``: one ``RankRecord`` per process of the run (its events, and
what the file says about it: its rank, the world size, the process groups, the device), read
from PyTorch profiler (Kineto) Chrome-trace JSON (``ringsim.traces.kineto``) or from Nsight
Systems' SQLite export (``ringsim.traces.nsys``). An ``Event`` is one interval: a host op
(a PyTorch operator, a ``gloo:send`` annotation, a CUDA runtime call, an NVTX range) or a
device activity (a kernel, a copy), with its arguments as the file records them. Times are
seconds on the rank's clock; ``ringsim.traces.clocks`` aligns the ranks.

Everything here is the standard library: reading a trace needs neither NumPy nor a profiler.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


class TraceError(ValueError):
    """A trace that cannot be read or is not a ring: its message is one line naming the file
    (or the rank) and what is wrong or missing."""


@dataclass(frozen=True)
class Event:
    """One interval of a rank's run.

    ``name`` as recorded; ``start``/``end`` seconds on the rank's clock; ``lane`` the thread or
    stream it ran on (``"thread 123"``, ``"stream 7"``); ``device`` True for work on the
    accelerator (kernels, copies); ``category`` the format's own kind (Kineto's ``cat``:
    ``cpu_op``, ``kernel``, ``user_annotation``, ``cuda_runtime``; ``nvtx`` for an Nsight
    range); ``link`` the id that ties a kernel to the host op or runtime call that launched it
    (Kineto's ``External id`` / CUPTI's correlation id), ``None`` when the file has none."""

    name: str
    start: float
    end: float
    lane: str
    device: bool = False
    category: str = ""
    args: Mapping[str, object] = field(default_factory=dict)
    link: int | None = None

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclass
class RankRecord:
    """One process of the run: its ``events`` (sorted by start) and what its file states.

    ``rank``: the rank the file names (``None``: it names none); ``world_size``, ``backend``:
    the default process group's; ``groups``: process group name -> its global ranks;
    ``device_name``: the accelerator's name, if any; ``source``: the file (and process) it came
    from, for messages."""

    events: list[Event]
    source: str
    rank: int | None = None
    world_size: int | None = None
    backend: str | None = None
    groups: dict[str, tuple[int, ...]] = field(default_factory=dict)
    device_name: str | None = None

    def __post_init__(self) -> None:
        self.events.sort(key=lambda e: (e.start, -e.end))


@dataclass
class Recording:
    """A recorded run: its ranks, the format it was read from, and notes on what the reader
    skipped (events without times, unknown record kinds)."""

    ranks: list[RankRecord]
    format: str
    notes: list[str] = field(default_factory=list)

    @property
    def on_device(self) -> bool:
        """Whether any rank recorded device (accelerator) activity."""
        return any(e.device for r in self.ranks for e in r.events)
