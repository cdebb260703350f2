"""PyTorch profiler (Kineto) Chrome-trace JSON: what ``torch.profiler.profile(...)
.export_chrome_trace(path)`` writes, plain or gzipped, one file per rank or several ranks'
processes merged in one file.

The fields read, as Kineto writes them (pytorch/kineto @114171df,
``libkineto/src/output_json.cpp``, ``ChromeTraceLogger``; ``libkineto/include/
ActivityType.h`` for the categories; ``libkineto/include/MetadataFieldCatalog.h`` for the
kernel fields):

* the top level: ``traceEvents`` (the events), ``distributedInfo`` (``backend``, ``rank``,
  ``world_size``, ``pg_config``: each group's ``pg_name``, ``pg_desc`` and ``ranks``),
  ``deviceProperties`` (each device's ``id`` and ``name``);
* an event: ``ph`` (``"X"``: a complete event; ``"M"``: metadata such as ``thread_name``),
  ``cat`` (``cpu_op``, ``user_annotation``, ``cuda_runtime``, ``kernel``, ``gpu_memcpy``,
  ...), ``name``, ``pid`` (a host event's process, a device event's device index), ``tid`` (a
  host event's thread, a device event's stream), ``ts`` and ``dur`` in microseconds, and
  ``args``: ``External id`` (a host op's own id; a kernel's or a runtime call's is the host op
  that launched it), for a kernel
  ``stream``, ``device``, ``correlation``, ``grid``, ``block``, and the collective fields of
  the ``record_param_comms`` op that launched it (``Collective name``, ``In msg nelems``,
  ``Out msg nelems``, ``Group size``, ``dtype``, ``Process Group Name``, ``Process Group
  Ranks``, ``Src Rank``, ``Dst Rank``); for a host op recorded with ``record_shapes=True``,
  ``Input Dims``, ``Input type`` and ``Concrete Inputs``.

A merged file holds several host processes (distinct ``pid``): each is a rank; a device's
events belong to the process whose CUDA runtime calls carry the same correlation ids.
"""

from __future__ import annotations

import gzip
import json
import math
import zlib
from collections import Counter, defaultdict
from pathlib import Path

from ringsim.traces.events import Event, RankRecord, TraceError

US = 1e-6  # Kineto's ts and dur are microseconds
DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
GZIP_MAGIC = b"\x1f\x8b"


def load_json(path: Path, data: bytes) -> object:
    """The JSON document in ``data`` (gunzipped first when it is gzip); ``TraceError`` for a
    ``.gz`` that is not gzip, a truncated gzip stream, or text that is not JSON."""
    if data.startswith(GZIP_MAGIC):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as err:
            raise TraceError(f"{path}: a damaged or truncated gzip file ({err})") from None
    elif path.suffix == ".gz":
        raise TraceError(f"{path}: named .gz but not gzip (no gzip header)")
    text = data.strip()
    if not text:
        raise TraceError(f"{path}: empty trace")
    if text[:1] not in (b"{", b"["):
        raise TraceError(f"{path}: neither JSON nor an Nsight SQLite export")
    try:
        return json.loads(data)
    except UnicodeDecodeError:
        raise TraceError(f"{path}: neither JSON nor an Nsight SQLite export") from None
    except json.JSONDecodeError as err:
        truncated = " (truncated?)" if text[-1:] not in (b"}", b"]") else ""
        raise TraceError(
            f"{path}: not valid JSON{truncated}: {err.msg} at line {err.lineno}, column {err.colno}"
        ) from None


def read_kineto(path: Path, document: object) -> tuple[list[RankRecord], list[str]]:
    """The ranks of one Kineto document (``{"traceEvents": [...]}`` or a bare event list) and
    notes on what was skipped."""
    top = document if isinstance(document, dict) else {}
    events = document if isinstance(document, list) else top.get("traceEvents")
    if not isinstance(events, list):
        raise TraceError(f"{path}: no traceEvents list: not a Chrome trace")
    names, skipped = _metadata(events), Counter()
    host: dict[object, list[Event]] = defaultdict(list)
    device: dict[object, list[Event]] = defaultdict(list)
    for raw in events:
        event = _event(raw, names, skipped)
        if event is not None:
            (device if event.device else host)[raw.get("pid")].append(event)
    if not host and not device:
        raise TraceError(f"{path}: no timed events (every event lacks ph X, ts or dur)")
    notes = [f"{path}: {n} events {why} skipped" for why, n in sorted(skipped.items())]
    ranks = _ranks(path, top, host, device, notes)
    return ranks, notes


def _metadata(events: list) -> dict[tuple, str]:
    """``(pid, tid) -> thread name`` and ``(pid, None) -> process name`` from ``ph: M``."""
    names = {}
    for raw in events:
        if not isinstance(raw, dict) or raw.get("ph") != "M":
            continue
        args = raw.get("args") if isinstance(raw.get("args"), dict) else {}
        if raw.get("name") == "thread_name":
            names[(raw.get("pid"), raw.get("tid"))] = str(args.get("name", ""))
        elif raw.get("name") in ("process_name", "process_labels"):
            label = str(args.get("name", args.get("labels", "")))
            key = (raw.get("pid"), None)
            names[key] = f"{names.get(key, '')} {label}".strip()
    return names


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _event(raw: object, names: dict, skipped: Counter) -> Event | None:
    """One complete event, or ``None`` (counted in ``skipped`` when it should have been one)."""
    if not isinstance(raw, dict) or raw.get("ph") != "X":
        return None
    ts, dur = _number(raw.get("ts")), _number(raw.get("dur"))
    if ts is None or dur is None or dur < 0 or not math.isfinite(ts + dur):
        skipped["without a valid ts and dur"] += 1
        return None
    if not isinstance(raw.get("pid"), int | str) or isinstance(raw.get("pid"), bool):
        skipped["without a pid"] += 1
        return None
    cat = str(raw.get("cat", ""))
    if cat == "Trace":  # the profiler's own span
        return None
    args = raw.get("args") if isinstance(raw.get("args"), dict) else {}
    on_device = cat in DEVICE_CATEGORIES
    if on_device:
        lane = f"stream {args.get('stream', raw.get('tid'))}"
    else:
        lane = f"thread {raw.get('tid')}"
    link = args.get("External id")  # a kernel's and a runtime call's: the host op's own
    return Event(
        name=str(raw.get("name", "")),
        start=ts * US,
        end=(ts + dur) * US,
        lane=lane,
        device=on_device,
        category=cat,
        args=args,
        link=link if isinstance(link, int) and not isinstance(link, bool) else None,
    )


def _ranks(path: Path, top: dict, host: dict, device: dict, notes: list) -> list[RankRecord]:
    """One ``RankRecord`` per host process, each with the device events it launched."""
    info = top.get("distributedInfo") if isinstance(top.get("distributedInfo"), dict) else {}
    devices = {
        d.get("id"): str(d.get("name"))
        for d in top.get("deviceProperties") or []
        if isinstance(d, dict) and d.get("name")
    }
    processes = sorted(host, key=lambda pid: (str(type(pid)), pid))
    if not processes:  # device events only: one rank
        processes = [None]
    owner = _device_owners(path, processes, host, device, notes)
    records = []
    for pid in processes:
        events = list(host.get(pid, []))
        mine = [d for d, p in owner.items() if p == pid]
        for d in mine:
            events.extend(device[d])
        name = next((devices[d] for d in mine if d in devices), None)
        source = str(path) if len(processes) == 1 else f"{path} (process {pid})"
        records.append(RankRecord(events, source, device_name=name))
    if len(records) == 1:
        _apply_distributed_info(records[0], info, path)
    return records


def _device_owners(path: Path, processes: list, host: dict, device: dict, notes: list) -> dict:
    """``device pid -> host pid``: the process whose CUDA runtime calls carry the device's
    correlation ids, when that pairs devices and processes one to one; else (each process
    counts its ids from 1, so a merged file's ids collide) the devices in order with the
    processes in order, as one rank per device runs on one node."""
    if len(processes) == 1:
        return dict.fromkeys(device, processes[0])
    launched = {
        pid: {e.args.get("correlation") for e in host[pid] if e.category == "cuda_runtime"}
        for pid in processes
    }
    owners, unique = {}, True
    for d, events in device.items():
        ids = {e.args.get("correlation") for e in events} - {None}
        score = sorted(((len(ids & launched[p]), p) for p in processes), reverse=True)
        owners[d] = score[0][1]
        unique &= score[0][0] > 0 and (len(score) < 2 or score[0][0] > score[1][0])
    if unique and len(set(owners.values())) == len(owners):
        return owners
    if len(device) != len(processes):
        raise TraceError(
            f"{path}: {len(device)} devices and {len(processes)} processes whose launches do "
            f"not tell which device is whose: give one file per rank"
        )
    notes.append(f"{path}: devices paired with processes in order (their ids collide)")
    return dict(zip(sorted(device, key=str), processes, strict=True))


def _apply_distributed_info(record: RankRecord, info: dict, path: Path) -> None:
    """The rank, world size, backend and process groups of ``distributedInfo``."""
    for key, attr in (("rank", "rank"), ("world_size", "world_size")):
        value = info.get(key)
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            value = int(value)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            setattr(record, attr, value)
    if isinstance(info.get("backend"), str):
        record.backend = info["backend"]
    for group in info.get("pg_config") or []:
        if not isinstance(group, dict):
            continue
        ranks = group.get("ranks")
        if isinstance(ranks, str):
            ranks = parse_rank_list(ranks)
        if isinstance(ranks, list) and all(isinstance(r, int) for r in ranks):
            record.groups[str(group.get("pg_name", len(record.groups)))] = tuple(ranks)


def parse_rank_list(text: str) -> list[int] | None:
    """``"[0, 1, 2]"`` (how Kineto quotes ``Process Group Ranks``) as a list, else ``None``."""
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, TypeError):
        return None
    if isinstance(value, list) and all(isinstance(r, int) for r in value):
        return value
    return None
