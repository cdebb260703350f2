"""Nsight Systems' SQLite export (``nsys export --type sqlite report.nsys-rep``), read with the
standard library's ``sqlite3``.

The tables and columns read, as NVIDIA documents them ("SQLite Export Schema Reference",
https://docs.nvidia.com/nsight-systems/2021.5/nsys-exporter/exported_data.html, and the
current User Guide's exporter chapter; timestamps in nanoseconds):

* ``CUPTI_ACTIVITY_KIND_KERNEL``: ``start``, ``end``, ``deviceId``, ``streamId``,
  ``correlationId`` (the runtime call that launched it), ``globalPid``, ``shortName`` and
  ``demangledName`` (ids into ``StringIds``), ``gridX/Y/Z``, ``blockX/Y/Z``;
* ``CUPTI_ACTIVITY_KIND_RUNTIME`` (and ``..._DRIVER``, the driver API's, where Triton
  launches): ``start``, ``end``, ``globalTid``, ``correlationId``, ``nameId`` (into
  ``StringIds``);
* ``CUPTI_ACTIVITY_KIND_MEMCPY`` (optional): ``start``, ``end``, ``deviceId``, ``streamId``,
  ``correlationId``, ``globalPid``, ``bytes``;
* ``NVTX_EVENTS`` (optional): ``start``, ``end``, ``globalTid``, ``text`` or ``textId`` (into
  ``StringIds``); a range PyTorch emits under ``torch.autograd.profiler.emit_nvtx(
  record_shapes=True)`` names the operator and its input ``sizes = [[...], ...]``;
* ``StringIds``: ``id``, ``value``.

``globalTid`` and ``globalPid`` are serialized ids whose bits 24-47 hold the process id (the
schema reference's "Serialized process and thread identifiers"): each process is a rank. A
kernel's host op is the innermost NVTX range open on the launching thread when the runtime
call was made (``Event.link`` points to it, as Kineto's ``External id`` does).
"""

from __future__ import annotations

import json
import sqlite3
from collections import defaultdict
from pathlib import Path

from ringsim.traces.events import Event, RankRecord, TraceError

NS = 1e-9
SQLITE_MAGIC = b"SQLite format 3\x00"
REQUIRED = ("CUPTI_ACTIVITY_KIND_KERNEL", "StringIds")


def _process(global_id: int) -> int:
    """The process id in a serialized ``globalTid``/``globalPid``."""
    return (int(global_id) >> 24) & 0xFFFFFF


def read_nsys(path: Path) -> tuple[list[RankRecord], list[str]]:
    """The ranks (one per process with kernels) of one Nsight Systems SQLite export."""
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error as err:
        raise TraceError(f"{path}: cannot open the SQLite export: {err}") from None
    try:
        return _read(path, db)
    except sqlite3.Error as err:
        raise TraceError(f"{path}: not a readable Nsight Systems export: {err}") from None
    finally:
        db.close()


def _tables(db: sqlite3.Connection) -> dict[str, set[str]]:
    names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    return {n: {c[1] for c in db.execute(f'PRAGMA table_info("{n}")')} for n in names}


def _read(path: Path, db: sqlite3.Connection) -> tuple[list[RankRecord], list[str]]:
    tables = _tables(db)
    missing = [t for t in REQUIRED if t not in tables]
    if missing:
        raise TraceError(
            f"{path}: no {' and no '.join(missing)} table: not an Nsight Systems export with "
            f"CUDA kernels (record with nsys profile --trace cuda,nvtx)"
        )
    strings = dict(db.execute("SELECT id, value FROM StringIds"))
    by_process: dict[int, list[Event]] = defaultdict(list)
    runtime = _runtime(db, tables, strings, by_process)
    nvtx = _nvtx(db, tables, strings, by_process)
    host_op = _host_ops(runtime, nvtx)
    devices = _device_names(db, tables)
    kernel_cols = tables["CUPTI_ACTIVITY_KIND_KERNEL"]
    # the full name (FA3's short one is cutlass's "device_kernel"), else the short one
    name_col = "demangledName" if "demangledName" in kernel_cols else "shortName"
    grid = [c for c in ("gridX", "gridY", "gridZ") if c in kernel_cols]
    rows = db.execute(
        f"SELECT start, end, deviceId, streamId, correlationId, globalPid, {name_col}"
        + "".join(f", {c}" for c in grid)
        + " FROM CUPTI_ACTIVITY_KIND_KERNEL"
    )
    device_of: dict[int, int] = {}
    for start, end, device, stream, corr, gpid, name_id, *dims in rows:
        if start is None or end is None or end < start:
            continue
        args = {"device": device, "stream": stream, "correlation": corr}
        if dims:
            args["grid"] = list(dims)
        pid = _process(gpid)
        device_of[pid] = device
        by_process[pid].append(
            Event(
                name=str(strings.get(name_id, name_id)),
                start=start * NS,
                end=end * NS,
                lane=f"stream {stream}",
                device=True,
                category="kernel",
                args=args,
                link=host_op.get(corr),
            )
        )
    _memcpy(db, tables, by_process)
    ranks = [
        RankRecord(events, f"{path} (process {pid})", device_name=devices.get(device_of.get(pid)))
        for pid, events in sorted(by_process.items())
        if any(e.device for e in events)
    ]
    if not ranks:
        raise TraceError(f"{path}: the export has no kernels")
    if len(ranks) == 1:
        ranks[0].source = str(path)
    return ranks, []


API_TABLES = {
    "CUPTI_ACTIVITY_KIND_RUNTIME": "cuda_runtime",
    "CUPTI_ACTIVITY_KIND_DRIVER": "cuda_driver",
}


def _runtime(db, tables, strings, by_process) -> dict[int, tuple[int, float]]:
    """``correlationId -> (globalTid, start)`` of every CUDA runtime and driver call (Triton
    launches through the driver), and the calls as host events of their process."""
    calls = {}
    for table, category in API_TABLES.items():
        if table in tables:
            _api_calls(db, table, category, strings, by_process, calls)
    return calls


def _api_calls(db, table, category, strings, by_process, calls) -> None:
    rows = db.execute(f"SELECT start, end, globalTid, correlationId, nameId FROM {table}")
    for start, end, tid, corr, name_id in rows:
        if start is None or end is None:
            continue
        calls[corr] = (tid, start * NS)
        by_process[_process(tid)].append(
            Event(
                name=str(strings.get(name_id, name_id)),
                start=start * NS,
                end=end * NS,
                lane=f"thread {tid & 0xFFFFFF}",
                category=category,
                args={"correlation": corr},
            )
        )


def _nvtx(db, tables, strings, by_process) -> dict[int, list[Event]]:
    """NVTX ranges by ``globalTid`` (and as host events of their process), each with the
    input sizes PyTorch's ``emit_nvtx(record_shapes=True)`` puts in its text."""
    if "NVTX_EVENTS" not in tables:
        return {}
    cols = tables["NVTX_EVENTS"]
    text = "COALESCE(text, '')" if "text" in cols else "''"
    text_id = "textId" if "textId" in cols else "NULL"
    ranges: dict[int, list[Event]] = defaultdict(list)
    rows = db.execute(f"SELECT start, end, globalTid, {text}, {text_id} FROM NVTX_EVENTS")
    for number, (start, end, tid, label, label_id) in enumerate(rows):
        if start is None or end is None or end < start or tid is None:
            continue
        label = label or str(strings.get(label_id, ""))
        name, sizes = split_nvtx(label)
        args = {"Input Dims": sizes} if sizes is not None else {}
        event = Event(
            name=name,
            start=start * NS,
            end=end * NS,
            lane=f"thread {tid & 0xFFFFFF}",
            category="nvtx",
            args={"External id": number, **args},
            link=number,
        )
        ranges[tid].append(event)
        by_process[_process(tid)].append(event)
    return ranges


def split_nvtx(text: str) -> tuple[str, list | None]:
    """``("aten::mm", [[4, 8], [8, 2]])`` from PyTorch's range text ``"aten::mm, seq = 3,
    sizes = [[4, 8], [8, 2]]"``; ``(text, None)`` for any other range."""
    name = text.split(",", 1)[0].strip()
    at = text.find("sizes = [")
    if at < 0:
        return name, None
    start, depth = at + len("sizes = "), 0
    for i in range(start, len(text)):
        depth += {"[": 1, "]": -1}.get(text[i], 0)
        if depth == 0:
            try:
                sizes = json.loads(text[start : i + 1])
            except json.JSONDecodeError:
                return name, None
            return name, sizes if isinstance(sizes, list) else None
    return name, None


def _host_ops(runtime: dict, nvtx: dict) -> dict[int, int]:
    """``correlationId -> id of the innermost NVTX range`` open on the launching thread."""
    linked = {}
    for corr, (tid, at) in runtime.items():
        open_ = [r for r in nvtx.get(tid, ()) if r.start <= at <= r.end]
        if open_:
            linked[corr] = min(open_, key=lambda r: r.duration).link
    return linked


def _memcpy(db, tables, by_process) -> None:
    if "CUPTI_ACTIVITY_KIND_MEMCPY" not in tables:
        return
    rows = db.execute(
        "SELECT start, end, deviceId, streamId, globalPid, bytes FROM CUPTI_ACTIVITY_KIND_MEMCPY"
    )
    for start, end, device, stream, gpid, nbytes in rows:
        if start is None or end is None or end < start:
            continue
        by_process[_process(gpid)].append(
            Event(
                name="Memcpy",
                start=start * NS,
                end=end * NS,
                lane=f"stream {stream}",
                device=True,
                category="gpu_memcpy",
                args={"device": device, "stream": stream, "bytes": nbytes},
            )
        )


def _device_names(db, tables) -> dict[int, str]:
    """``deviceId -> name`` from ``TARGET_INFO_GPU`` when the export has it."""
    cols = tables.get("TARGET_INFO_GPU", set())
    if not {"id", "name"} <= cols:
        return {}
    return {int(i): str(n) for i, n in db.execute("SELECT id, name FROM TARGET_INFO_GPU")}
