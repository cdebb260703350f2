"""Chrome trace (Perfetto, chrome://tracing) JSON of a ``Timeline``, simulated or measured.

One process per host (``pid = h``, named ``host h``), three threads in it: ``compute`` (tid 0),
``send`` (tid 1, the outgoing link) and ``recv`` (tid 2, the incoming link). Every activity is a
complete event (``"ph": "X"``) with ``ts`` and ``dur`` in microseconds and the step in ``args``.
A backward timeline's early ``k, v`` messages (``meta["kv_send_*"]``) appear on the link tracks
too, named ``k,v``.

Traces are for looking at small runs: a timeline with more than ``max_events`` events is refused
(pass ``hosts=[...]`` to trace a few hosts of a big ring).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ringsim.timeline import Timeline

TRACKS = {"compute": 0, "send": 1, "recv": 2}
MAX_EVENTS = 2_000_000


def _events_of(timeline: Timeline, host: int) -> list[tuple[str, str, int, float, float]]:
    """``(track, name, step, start, end)`` of one host, including backward ``k, v`` messages."""
    labels = timeline.step_labels
    found = []
    for activity, step, start, end in timeline.intervals(host):
        label = labels[step] if step < len(labels) else str(step)
        if activity != "compute" and _two_part(timeline):
            label = f"{label} dk,dv"
        found.append((activity, label, step, start, end))
    if _two_part(timeline):
        ks, ke = timeline.meta["kv_send_start"], timeline.meta["kv_send_end"]
        sender = (host - 1) % timeline.hosts
        for track, h in (("send", host), ("recv", sender)):
            for step in np.flatnonzero(np.isfinite(ks[:, h])):
                label = labels[step] if step < len(labels) else str(step)
                start, end = float(ks[step, h]), float(ke[step, h])
                found.append((track, f"{label} k,v", int(step), start, end))
    return found


def _two_part(timeline: Timeline) -> bool:
    return "kv_send_start" in timeline.meta


def count_trace_events(timeline: Timeline, hosts: Sequence[int] | None = None) -> int:
    """How many complete events ``chrome_trace`` would write."""
    cols = list(range(timeline.hosts)) if hosts is None else list(hosts)
    arrays = [timeline.compute_start, timeline.send_start, timeline.recv_start]
    if _two_part(timeline):
        arrays += [timeline.meta["kv_send_start"]] * 2
    return int(sum(np.isfinite(a[:, cols]).sum() for a in arrays))


def chrome_trace(
    timeline: Timeline,
    *,
    name: str = "ringsim",
    hosts: Sequence[int] | None = None,
    max_events: int = MAX_EVENTS,
) -> dict:
    """The trace as a dict (``json.dump`` it, or use ``write_chrome_trace``)."""
    chosen = list(range(timeline.hosts)) if hosts is None else [int(h) for h in hosts]
    bad = [h for h in chosen if not 0 <= h < timeline.hosts]
    if bad:
        raise ValueError(f"hosts must be in [0, {timeline.hosts}), got {bad}")
    count = count_trace_events(timeline, chosen)
    if count > max_events:
        raise ValueError(
            f"the timeline has {count} events (more than max_events={max_events}); a trace "
            f"this big will not open in a viewer: pass hosts=[...] to trace a few hosts"
        )
    events: list[dict] = []
    for h in chosen:
        meta = {"ph": "M", "pid": h}
        events.append({"name": "process_name", **meta, "args": {"name": f"host {h}"}})
        events.append({"name": "process_sort_index", **meta, "args": {"sort_index": h}})
        for track, tid in TRACKS.items():
            events.append(
                {"name": "thread_name", "ph": "M", "pid": h, "tid": tid, "args": {"name": track}}
            )
        for track, label, step, start, end in _events_of(timeline, h):
            events.append(
                {
                    "name": label,
                    "cat": track,
                    "ph": "X",
                    "pid": h,
                    "tid": TRACKS[track],
                    "ts": start * 1e6,
                    "dur": (end - start) * 1e6,
                    "args": {"step": step},
                }
            )
    other = {"name": name}
    other.update({k: v for k, v in timeline.meta.items() if isinstance(v, str | int | float)})
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}


def write_chrome_trace(timeline: Timeline, path: str | Path, **kwargs) -> None:
    """Write ``chrome_trace(timeline, **kwargs)`` to ``path`` as JSON."""
    trace = chrome_trace(timeline, **kwargs)
    with open(path, "w") as f:
        json.dump(trace, f, separators=(",", ":"))
