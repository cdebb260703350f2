"""GPU-shaped PyTorch profiler traces of a simulated ring: what ``torch.profiler`` would record
on each rank of a GPU ring running ring-flash-attention's forward loop with a given kernel
family, written from a simulated run's timeline. They are what ``ringsim compare`` reads
from a real GPU run, made where there is no GPU: the tests check that the reader recovers
the configuration and the steps from them, and a lesson compares one.

The layout follows the sources:

* the loop (zhuzilin/ring-flash-attention @8996282, ``ring_flash_attn.py``): per step, two
  ``empty_like`` for the next block, ``batch_isend_irecv`` of ``k, v`` to rank ``r + 1`` and
  from ``r - 1`` (two ``c10d::send`` and two ``c10d::recv_`` ops, each with its
  ``record_param_comms``), the attention call, the merge (``update_out_and_lse``: elementwise
  kernels), then ``comm.wait()`` (``cudaStreamWaitEvent``); the last step sends nothing; the
  whole pass under the autograd function's op ``RingFlashAttnFunc``;
* the events and fields (pytorch/kineto @114171df ``libkineto/src/output_json.cpp`` and
  ``libkineto/include/MetadataFieldCatalog.h``): host ops ``cat: cpu_op`` with ``External
  id``, ``Input Dims``, ``Input type``, ``Concrete Inputs``; ``cuda_runtime`` launches with
  ``correlation``; kernels ``cat: kernel`` on ``pid`` = device, ``tid`` = stream, with
  ``External id``, ``correlation``, ``device``, ``stream``, ``grid``, ``block``; NCCL
  kernels also carry the collective fields of their ``record_param_comms`` (``Collective
  name``, ``In msg nelems``, ``Out msg nelems``, ``Group size``, ``dtype``, ``Process Group
  Name``, ``Process Group Ranks``); ``distributedInfo`` and ``deviceProperties`` at the top;
* the kernel names (``ringsim.traces.kinds``: each family's ``example`` and host op; NCCL's
  ``ncclDevKernel_SendRecv``), NCCL on a stream of its own, the compute on the default one.

The host issues each step just ahead of the device (``LAG_S``), so every launch precedes its
kernel and the host's program order is the ring's. The NCCL kernel of a step spans its send
and its receive (it ends when both are done, as a grouped send/recv does).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np

from ringsim.files import check_output_path, write_text_atomic
from ringsim.layouts import get_layout
from ringsim.schedule import Pass
from ringsim.traces.kinds import FAMILIES, NCCL_P2P_KERNEL, PARAM_COMMS, TRACE_TYPES

LAG_S = 20e-6  # the host issues a step this long before the device starts it
OP_S = 1e-6  # how long one host op takes
COMPUTE_STREAM, NCCL_STREAM = 7, 20
MERGE_KERNEL = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, "
    "float, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul> >(int, "
    "at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor"
    "<float> >, std::array<char*, 3ul>)"
)
MERGE_OPS = ("aten::sub", "aten::sigmoid", "aten::mul", "aten::sub")  # update_out_and_lse
DEVICE = "NVIDIA H100 80GB HBM3"
BASE_US = 1_000_000.0


class _Rank:
    """The events of one rank, with its id counters (``External id``, ``correlation``)."""

    def __init__(self, rank: int, host_pid: int, offset_s: float):
        self.rank, self.pid, self.offset = rank, host_pid, offset_s
        self.events: list[dict] = []
        self.next_id = 1
        self.container = 0  # the External id of the op the pass runs under

    def ts(self, seconds: float) -> float:
        return BASE_US + (seconds + self.offset) * 1e6

    def op(self, name: str, start: float, end: float, args: dict | None = None, cat="cpu_op"):
        ident = self.next_id
        self.next_id += 1
        event = {
            "ph": "X",
            "cat": cat,
            "name": name,
            "pid": self.pid,
            "tid": self.pid,
            "ts": self.ts(start),
            "dur": (end - start) * 1e6,
            "args": {"External id": ident, **(args or {})},
        }
        self.events.append(event)
        return ident

    def kernel(
        self, name: str, at: float, start: float, end: float, op_id: int, stream: int, **extra
    ):
        """A kernel on ``stream`` run ``[start, end]``, launched at ``at`` by host op
        ``op_id`` (its ``cudaLaunchKernel`` and the kernel share a ``correlation``)."""
        corr = self.next_id
        self.next_id += 1
        runtime = {"External id": op_id, "correlation": corr, "cbid": 211}
        api, category = extra.pop("api", ("cudaLaunchKernel", "cuda_runtime"))
        self.events.append(
            {
                "ph": "X",
                "cat": category,
                "name": api,
                "pid": self.pid,
                "tid": self.pid,
                "ts": self.ts(at),
                "dur": OP_S * 0.5e6,
                "args": runtime,
            }
        )
        args = {
            "External id": op_id,
            "device": self.rank,
            "stream": stream,
            "correlation": corr,
            "grid": [1, 1, 1],
            "block": [128, 1, 1],
            **extra,
        }
        self.events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": name,
                "pid": self.rank,
                "tid": stream,
                "ts": self.ts(start),
                "dur": (end - start) * 1e6,
                "args": args,
            }
        )


def gpu_traces(
    result,
    family: str = "flash-attn 2",
    *,
    device: str = DEVICE,
    clock_offsets_s: list[float] | None = None,
    container: str = "RingFlashAttnFunc",
) -> list[dict]:
    """One Kineto document per rank of ``result`` (a forward ``SimResult`` with its timeline)
    as if it ran ring-flash-attention's loop with ``family``'s kernels (a name of
    ``ringsim.traces.FAMILIES`` with a device kernel; a family without a host op, Triton,
    launches through the driver from the ring's own op). ``clock_offsets_s``: seconds added
    to each rank's clock (ranks on machines whose clocks disagree); ``container``: the op
    the pass runs under (``RingAttention`` for this project's ring)."""
    from ringsim.timer.studies.compare import predicted_parts

    kind = FAMILIES.get(family)
    if kind is None or not kind.device:
        usable = [n for n, f in FAMILIES.items() if f.device]
        raise ValueError(f"family must be one of {', '.join(usable)}, got {family!r}")
    cfg, tl = result.config, result.timeline
    if cfg.pass_ != Pass.FORWARD:
        raise ValueError(f"result must be a forward pass, got {cfg.pass_!r}")
    attention, busy, _ = predicted_parts(result)
    offsets = clock_offsets_s or [0.0] * cfg.hosts
    if len(offsets) != cfg.hosts:
        raise ValueError(f"clock_offsets_s needs one offset per host ({cfg.hosts}), got {offsets}")
    parts = (attention, busy)
    return [
        _rank_trace(cfg, tl, parts, h, kind, device, offsets[h], container)
        for h in range(cfg.hosts)
    ]


def _dims(order: str, b: int, h: int, c: int, d: int) -> list[int]:
    return [b, c, h, d] if order == "bshd" else [b, h, c, d]


def _rank_trace(cfg, tl, parts, h: int, kind, device: str, offset: float, container) -> dict:
    P, c, d, b = cfg.hosts, cfg.block_tokens, cfg.head_dim, cfg.batch
    dtype = TRACE_TYPES[cfg.dtype]
    rank = _Rank(h, 3000 + h, offset)
    schedule = cfg.schedule("forward")
    kv = _dims(kind.dims, b, cfg.kv_heads, c, d)
    group = {
        "Group size": P,
        "Process Group Name": "0",
        "Process Group Description": "default_pg",
        "Process Group Ranks": json.dumps(list(range(P))),
        "dtype": dtype.replace("c10::", "").replace("float", "Float"),
    }
    nelems = int(np.prod(kv))
    starts = np.fmin(tl.compute_start[:, h], tl.send_start[:, h])
    end = float(np.nanmax(np.fmax(tl.compute_end[:, h], tl.send_end[:, h])))
    rank.container = rank.op(container, -LAG_S * 2, end + LAG_S)
    for s in range(tl.steps):
        step_start = float(starts[s]) if np.isfinite(starts[s]) else float(tl.compute_end[s - 1, h])
        t = step_start - LAG_S
        moving = np.isfinite(tl.send_start[s, h])
        if moving:
            for _ in range(2):  # next_k, next_v = torch.empty_like(k), torch.empty_like(v)
                rank.op("aten::empty_like", t, t + OP_S, {"Input Dims": [kv]})
                t += OP_S
            last = None
            posts = [("c10d::send", (h + 1) % P)] * 2 + [("c10d::recv_", (h - 1) % P)] * 2
            for name, peer in posts:  # batch_isend_irecv([send k, send v, recv k, recv v])
                args = {
                    "Input Dims": [[kv], [], [], []],
                    "Input type": ["TensorList", "", "Scalar", "Scalar"],
                    "Concrete Inputs": ["", "", str(peer), "0"],
                }
                last = rank.op(name, t, t + OP_S, args)
                comms = {
                    "Collective name": "send" if name == "c10d::send" else "recv",
                    "In msg nelems": nelems,
                    "Out msg nelems": nelems,
                    "Rank": h,
                    **group,
                }
                rank.op(PARAM_COMMS, t + 0.1 * OP_S, t + 0.9 * OP_S, comms)
                t += OP_S
            span = (
                min(tl.send_start[s, h], tl.recv_start[s, h]),
                max(tl.send_end[s, h], tl.recv_end[s, h]),
            )
            collective = {"Collective name": "recv", "In msg nelems": nelems, **group}
            collective["Out msg nelems"] = nelems
            rank.kernel(
                NCCL_P2P_KERNEL, t - 0.5 * OP_S, *map(float, span), last, NCCL_STREAM, **collective
            )
        if parts[1][s, h] > 0:
            _compute(rank, kind, _call(cfg, schedule, s, h), (s, h), t, tl, parts, dtype, cfg)
            t += 6 * OP_S
        if moving:
            rank.op("cudaStreamWaitEvent", t, t + 0.5 * OP_S, cat="cuda_runtime")
    top = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": h, "name": device, "computeMajor": 9, "computeMinor": 0}],
        "distributedInfo": {
            "backend": "nccl",
            "rank": h,
            "world_size": P,
            "pg_count": 1,
            "pg_config": [
                {
                    "pg_name": "0",
                    "pg_desc": "default_pg",
                    "backend_config": "cuda:nccl",
                    "pg_size": P,
                    "ranks": list(range(P)),
                }
            ],
            "nccl_version": "2.27.3",
        },
        "displayTimeUnit": "ms",
        "traceEvents": _metadata(rank) + rank.events,
    }
    return top


def _call(cfg, schedule, s: int, h: int):
    """The kernel call host ``h`` makes at step ``s``, as ring-flash-attention's layout makes
    it (``Layout.step_call``: a zigzag ring's half-block calls), ``None`` when it skips."""
    layout = get_layout(cfg.layout)
    kind, relation = int(schedule.kind_at(s)[h]), int(schedule.relation_at(s)[h])
    work = float(schedule.work_at(s)[h])
    return layout.step_call(
        kind, relation, work, cfg.block_tokens, causal=cfg.causal, documents=False
    )


def _compute(rank: _Rank, kind, call, cell, t, tl, parts, dtype, cfg) -> None:
    """The step's device work (``parts``: its attention and device seconds): the attention
    call (its host op, launch and kernel; none when the block is skipped) and the merge
    kernels after it."""
    s, h = cell
    start = float(tl.compute_start[s, h])
    call_end, stop = start + float(parts[0][s, h]), start + float(parts[1][s, h])
    q = _dims(kind.dims, cfg.batch, cfg.heads, cfg.block_tokens, cfg.head_dim)
    if call is not None and call_end > start:
        q = _dims(kind.dims, cfg.batch, cfg.heads, call.q_tokens, cfg.head_dim)
        kv = _dims(kind.dims, cfg.batch, cfg.kv_heads, call.k_tokens, cfg.head_dim)
        concrete = [""] * 3 + ["0.0", f"{cfg.head_dim**-0.5:.6g}"]
        index = kind.causal_index(kind.host_op)
        if index is not None:  # ring-flash-attention: causal only on the diagonal block
            concrete += [""] * max(0, index + 1 - len(concrete))
            concrete[index] = str(call.mask == "causal-diagonal")
        args = {
            "Input Dims": [q, kv, kv, [], [], [], [], []],
            "Input type": [dtype, dtype, dtype, "Scalar", "Scalar", "Scalar", "", ""],
            "Concrete Inputs": concrete,
        }
        if kind.host_op is not None:
            op = rank.op(kind.host_op, t, t + OP_S, args)
            rank.kernel(kind.example, t + 0.5 * OP_S, start, call_end, op, COMPUTE_STREAM)
        else:  # a Triton kernel: launched through the driver, from the ring's own op
            api = ("cuLaunchKernelEx", "cuda_driver")
            at = t + 0.5 * OP_S
            rank.kernel(kind.example, at, start, call_end, rank.container, COMPUTE_STREAM, api=api)
    gap = stop - call_end
    if gap <= 0:
        return
    width = gap / len(MERGE_OPS)
    for i, name in enumerate(MERGE_OPS):
        at = t + (1.5 + i) * OP_S
        merge = rank.op(name, at, at + 0.5 * OP_S, {"Input Dims": [q, q]})
        a = call_end + i * width
        rank.kernel(MERGE_KERNEL, at + 0.2 * OP_S, a, a + width, merge, COMPUTE_STREAM)


def _metadata(rank: _Rank) -> list[dict]:
    meta = lambda name, pid, tid, value: {
        "ph": "M",
        "name": name,
        "pid": pid,
        "tid": tid,
        "args": {"name": value},
    }
    return [
        meta("process_name", rank.pid, 0, "python"),
        meta("thread_name", rank.pid, rank.pid, f"thread {rank.pid} (python)"),
        meta("process_name", rank.rank, 0, f"GPU {rank.rank}"),
        meta("thread_name", rank.rank, COMPUTE_STREAM, f"stream {COMPUTE_STREAM}"),
        meta("thread_name", rank.rank, NCCL_STREAM, f"stream {NCCL_STREAM}"),
    ]


def write_gpu_traces(result, folder: str | Path, *, gz: bool = False, **kwargs) -> list[Path]:
    """``gpu_traces(result, **kwargs)`` as ``rank<r>.json`` (``.json.gz`` with ``gz``) in
    ``folder``; returns the paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for h, doc in enumerate(gpu_traces(result, **kwargs)):
        path = folder / (f"rank{h}.json" + (".gz" if gz else ""))
        check_output_path("path", path)
        text = json.dumps(doc)
        if gz:
            path.write_bytes(gzip.compress(text.encode()))
        else:
            write_text_atomic(path, text)
        paths.append(path)
    return paths


# -- the same run as Nsight Systems' SQLite export ----------------------------------------------
NSYS_SCHEMA = """
CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL,
    deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, streamId INTEGER NOT NULL,
    correlationId INTEGER, globalPid INTEGER, demangledName INTEGER NOT NULL,
    shortName INTEGER NOT NULL, mangledName INTEGER, gridX INTEGER NOT NULL,
    gridY INTEGER NOT NULL, gridZ INTEGER NOT NULL, blockX INTEGER NOT NULL,
    blockY INTEGER NOT NULL, blockZ INTEGER NOT NULL);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL,
    eventClass INTEGER NOT NULL, globalTid INTEGER, correlationId INTEGER,
    nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL, callchainId INTEGER);
CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL,
    rangeId INTEGER, category INTEGER, color INTEGER, text TEXT, globalTid INTEGER,
    endGlobalTid INTEGER, textId INTEGER, domainId INTEGER);
CREATE TABLE TARGET_INFO_GPU (id INTEGER NOT NULL, name TEXT NOT NULL);
"""
NVTX_PUSH_POP = 59  # ENUM_NSYS_EVENT_TYPE: NvtxPushPopRange


def write_nsys_export(docs: list[dict], path: str | Path) -> Path:
    """The ranks' Kineto documents (``gpu_traces``) as one Nsight Systems SQLite export, in
    NVIDIA's documented schema (``ringsim.traces.nsys``): kernels, runtime launches, and the
    host ops as the NVTX ranges ``torch.autograd.profiler.emit_nvtx(record_shapes=True)``
    names them (``"aten::mm, seq = 3, sizes = [[4, 8], [8, 2]]"``). Each rank is a process
    (``globalTid = pid << 24 | tid``)."""
    import sqlite3

    path = Path(path)
    check_output_path("path", path)
    if path.exists():
        path.unlink()
    db = sqlite3.connect(path)
    strings: dict[str, int] = {}

    def sid(text: str) -> int:
        if text not in strings:
            strings[text] = len(strings) + 1
        return strings[text]

    ns = lambda us: round(us * 1e3)
    try:
        db.executescript(NSYS_SCHEMA)
        for doc in docs:
            for device in doc.get("deviceProperties", []):
                db.execute(
                    "INSERT INTO TARGET_INFO_GPU VALUES (?, ?)", (device["id"], device["name"])
                )
            host_pid = next(e["pid"] for e in doc["traceEvents"] if e.get("cat") == "cpu_op")
            tid = (host_pid << 24) | host_pid
            for seq, e in enumerate(x for x in doc["traceEvents"] if x.get("ph") == "X"):
                start, end = ns(e["ts"]), ns(e["ts"] + e["dur"])
                args = e.get("args", {})
                if e["cat"] == "kernel":
                    short = e["name"].split("(")[0].split("<")[0].split()[-1]
                    db.execute(
                        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES "
                        "(?, ?, ?, 1, ?, ?, ?, ?, ?, NULL, 1, 1, 1, 128, 1, 1)",
                        (
                            start,
                            end,
                            args["device"],
                            args["stream"],
                            args["correlation"],
                            host_pid << 24,
                            sid(e["name"]),
                            sid(short),
                        ),
                    )
                elif e["cat"] == "cuda_runtime":
                    db.execute(
                        "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME "
                        "VALUES (?, ?, 0, ?, ?, ?, 0, NULL)",
                        (start, end, tid, args.get("correlation"), sid(e["name"])),
                    )
                elif e["cat"] == "cpu_op":
                    text = e["name"] + f", seq = {seq}"
                    if "Input Dims" in args:
                        text += f", sizes = {json.dumps(args['Input Dims'])}"
                    db.execute(
                        "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) "
                        "VALUES (?, ?, ?, ?, ?)",
                        (start, end, NVTX_PUSH_POP, text, tid),
                    )
        db.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, t) for t, i in strings.items()])
        db.commit()
    finally:
        db.close()
    return path
