"""Chrome trace (Perfetto, chrome://tracing) JSON of a ``Timeline``, simulated or measured.

One process per host (``pid = h``, named ``host h``), three threads in it: ``compute`` (tid 0),
``send`` (tid 1, the outgoing link) and ``recv`` (tid 2, the incoming link). Every activity is a
complete event (``"ph": "X"``) with ``ts`` and ``dur`` in microseconds and the step in ``args``.
A backward timeline's early ``k, v`` messages (``meta["kv_send_*"]`` and ``meta["kv_recv_*"]``,
see ``ringsim.timer``) appear on the link tracks too, named ``k,v``; the ``dk, dv`` ones are
named ``dk,dv``.

Traces are for looking at small runs: a timeline with more than ``max_events`` events is refused
(pass ``hosts=[...]`` to trace a few hosts of a big ring).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ringsim.checks import check_instance, check_positive_int
from ringsim.files import check_output_path, write_json
from ringsim.timer.engine.result import grad_rows, kv_messages
from ringsim.timer.engine.timeline import Timeline

TRACKS = {"compute": 0, "send": 1, "recv": 2}
MAX_EVENTS = 2_000_000


def _events_of(timeline: Timeline, host: int) -> list[tuple[str, str, int, float, float]]:
    """``(track, name, step, start, end)`` of one host, including backward ``k, v`` messages."""
    labels = timeline.step_labels
    grads = grad_rows(timeline)
    found = []
    for activity, step, start, end in timeline.intervals(host):
        label = labels[step] if step < len(labels) else str(step)
        if activity != "compute" and grads[step]:
            label = f"{label} dk,dv"
        found.append((activity, label, step, start, end))
    for track, (start, end) in kv_messages(timeline).items():
        for step in np.flatnonzero(np.isfinite(start[:, host])):
            label = labels[step] if step < len(labels) else str(step)
            span = float(start[step, host]), float(end[step, host])
            found.append((track, f"{label} k,v", int(step), *span))
    return found


def count_trace_events(timeline: Timeline, hosts: Sequence[int] | None = None) -> int:
    """How many complete events ``chrome_trace`` would write."""
    cols = list(range(timeline.hosts)) if hosts is None else list(hosts)
    arrays = [timeline.compute_start, timeline.send_start, timeline.recv_start]
    arrays += [start for start, _ in kv_messages(timeline).values()]
    return int(sum(np.isfinite(a[:, cols]).sum() for a in arrays))


def _check_hosts(hosts: object, timeline: Timeline) -> list[int]:
    """``hosts``: host numbers of the timeline (a list, a range, an array)."""
    ok = isinstance(hosts, Sequence | np.ndarray) and not isinstance(hosts, str)
    chosen = list(hosts) if ok else []
    numbers = all(isinstance(h, int | np.integer) and not isinstance(h, bool) for h in chosen)
    if not ok or not numbers:
        raise ValueError(f"hosts must be a list of host numbers, got {hosts!r}"[:200])
    bad = [int(h) for h in chosen if not 0 <= h < timeline.hosts]
    if bad:
        raise ValueError(f"hosts must be in [0, {timeline.hosts}), got {bad}")
    return [int(h) for h in chosen]


def chrome_trace(
    timeline: Timeline,
    *,
    name: str = "ringsim",
    hosts: Sequence[int] | None = None,
    max_events: int = MAX_EVENTS,
) -> dict:
    """The trace as a dict (``json.dump`` it, or use ``write_chrome_trace``)."""
    check_instance("timeline", timeline, Timeline, "a Timeline (a SimResult's .timeline)")
    chosen = list(range(timeline.hosts)) if hosts is None else _check_hosts(hosts, timeline)
    max_events = check_positive_int("max_events", max_events)
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
    """Write ``chrome_trace(timeline, **kwargs)`` to ``path`` as strict JSON, atomically: a
    bad path is a ``ValueError`` before any work, a failed write leaves the old file, and a
    non-finite time (an overflowed run) is refused rather than written as ``Infinity``."""
    check_instance("timeline", timeline, Timeline, "a Timeline (a SimResult's .timeline)")
    check_output_path("path", path)
    trace = chrome_trace(timeline, **kwargs)
    write_json(path, trace, indent=None, separators=(",", ":"))
