"""Ring Attention over ``torch.distributed``: the schedule of ``ringsim.schedule``, for real.

Every rank holds one query block and, at each step, one key/value block, exactly as the NumPy
executor ``ringsim.ring`` does with virtual hosts; both read the same ``Schedule``
(``kv_owner``, ``kind_at``, ``payload``, ``send_to``/``recv_from``). Per forward step::

    post isend(kv -> send_to) and irecv(next kv <- recv_from)    # the transfer starts ...
    out_b, lse_b = block_attention(q, kv, positions)             # ... while this block computes
    out, lse = merge(out, lse, out_b, lse_b)                     # fp32, in (out, lse) form
    wait for the transfer; kv = next kv

Backward (``RingAttention.backward``): ``dq`` stays home; each kv block travels with fp32
``dk``/``dv`` accumulators. The ``(k, v)`` of the next step is posted before the compute, like the
forward; the accumulator of the block a rank just finished goes out right after its compute,
together with the next posting, and one extra hop after the last step brings every accumulator
home to its owner.

Sharding follows ``ringsim.layouts.host_positions``: rank ``r`` holds the tokens at
``positions[r]`` (global positions, so the block kernel masks correctly for any layout);
packed documents (``segment_ids``, one id per token of the whole sequence) mask the same way.
Ranks first exchange a small header (shapes, layout, dtype, documents) and refuse to start if
they disagree; every wait has a timeout, so a rank that dies or never joins produces a ``RingError``
on the others instead of a hang.

Each rank records a per-step timeline (compute, send, receive, time blocked in waits) with
``perf_counter`` on CPU and CUDA events on GPU; ``gather_timeline`` assembles the ranks'
records into a ``ringsim.timeline.Timeline``, the type the simulator produces.

Run on GPUs with ``torchrun --nproc-per-node P -m kernels.ring --seq-len N ...``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import queue
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist

from kernels.block import block_attention, block_attention_backward
from ringsim._checks import check_segment_ids
from ringsim.layouts import check_layout, host_positions
from ringsim.schedule import BlockKind, Schedule, build_schedule
from ringsim.timeline import Timeline

DEFAULT_TIMEOUT_S = 60.0


class RingError(RuntimeError):
    """A rank could not complete the ring: a peer died, never joined, or timed out."""


# ------------------------------------------------------------------------------------------
# Merging partials in (out, lse) form
# ------------------------------------------------------------------------------------------


def merge_out_lse(
    out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor, lse_b: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Combine two normalised partials over disjoint keys (fp32):
    ``lse = logaddexp(lse_a, lse_b)``, ``out = out_a e^(lse_a - lse) + out_b e^(lse_b - lse)``.
    Rows with ``lse = -inf`` on both sides stay ``(0, -inf)``."""
    lse = torch.logaddexp(lse_a, lse_b)
    shift = torch.where(torch.isneginf(lse), 0.0, lse)
    weight_a = torch.exp(lse_a - shift)[..., None]
    weight_b = torch.exp(lse_b - shift)[..., None]
    return out_a * weight_a + out_b * weight_b, lse


# ------------------------------------------------------------------------------------------
# Timing: per-rank marks, CPU or CUDA
# ------------------------------------------------------------------------------------------


class _Clock:
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

    def resolve(self, clock: _Clock) -> dict[str, np.ndarray]:
        arrays = {k: np.array([clock.seconds(m) for m in v]) for k, v in self.marks.items()}
        arrays["wait"] = np.nan_to_num(arrays["recv_end"] - arrays.pop("wait_start"))
        return arrays


def gather_timeline(
    local: dict[str, np.ndarray], *, group=None, meta: dict | None = None
) -> Timeline:
    """All-gather every rank's resolved record into a ``(steps, hosts)`` ``Timeline``."""
    records: list = [None] * dist.get_world_size(group)
    dist.all_gather_object(records, local, group=group)
    return timeline_from_records(records, meta=meta)


def timeline_from_records(records: Sequence[dict], *, meta: dict | None = None) -> Timeline:
    """Stack per-rank records (as ``RankTimeline.resolve`` returns) into a ``Timeline``."""
    cols = {k: np.stack([np.asarray(r[k], float) for r in records], axis=1) for k in records[0]}
    wait = cols.pop("wait")
    info = {"measured": True, "wait": wait, **(meta or {})}
    return Timeline(**cols, meta=info)


# ------------------------------------------------------------------------------------------
# The ring
# ------------------------------------------------------------------------------------------


@dataclass
class Ring:
    """Where this rank sits and what it needs: schedules, positions, process group, timeouts.

    ``block_backend`` picks the block kernel (``auto``: Triton on CUDA, torch on CPU).
    ``record``: keep per-step timelines in ``forward_timeline``/``backward_timeline``."""

    layout: str
    causal: bool
    seq_len: int
    group: object = None
    block_backend: str = "auto"
    timeout_s: float = DEFAULT_TIMEOUT_S
    record: bool = False
    segment_ids: np.ndarray | None = None
    forward_timeline: RankTimeline | None = None
    backward_timeline: RankTimeline | None = None
    clock: _Clock | None = None

    @property
    def hosts(self) -> int:
        return dist.get_world_size(self.group)

    @property
    def rank(self) -> int:
        return dist.get_rank(self.group)

    def schedule(self, pass_: str) -> Schedule:
        return build_schedule(
            self.hosts, self.layout, self.causal, pass_, seq_len=self.seq_len,
            segment_ids=self.segment_ids,
        )  # fmt: skip

    def mask_args(
        self, pos: torch.Tensor, docs: torch.Tensor | None, owner: int, kind: int
    ) -> dict:
        """``block_attention`` keywords for this rank's queries against ``owner``'s keys, from
        ``ring_positions`` and ``ring_documents``: the mask (causal and/or same document) only
        where the schedule says the block is partial (a full block needs none; a skipped one
        is never computed)."""
        partial = kind == BlockKind.PARTIAL
        args = dict(q_pos=pos[self.rank], k_pos=pos[owner], causal=self.causal and partial)
        if docs is not None and partial:
            args.update(q_seg=docs[self.rank], k_seg=docs[owner])
        return args

    def peer(self, rank: int) -> int:
        """Global rank of ``rank`` in our group (P2P calls take global ranks)."""
        return rank if self.group is None else dist.get_global_rank(self.group, rank)


def _header(ring: Ring, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> dict:
    return {
        "hosts": ring.hosts,
        "seq_len": ring.seq_len,
        "layout": ring.layout,
        "causal": ring.causal,
        "q_shape": tuple(q.shape),
        "k_shape": tuple(k.shape),
        "v_shape": tuple(v.shape),
        "dtype": str(q.dtype),
        "scale": scale,
        "segment_ids": _digest(ring.segment_ids),
    }


def _digest(segment_ids: np.ndarray | None) -> str | None:
    """A short fingerprint of the document ids (the same bytes give the same one on every rank;
    Python's ``hash`` of bytes differs between processes)."""
    if segment_ids is None:
        return None
    return hashlib.sha1(np.ascontiguousarray(segment_ids, np.int64).tobytes()).hexdigest()[:16]


def check_agreement(ring: Ring, header: dict) -> None:
    """All ranks exchange ``header`` and raise ``ValueError`` (on every rank) if any differs:
    before any block moves, so a mismatch cannot hang or corrupt a transfer."""
    headers: list = [None] * ring.hosts
    dist.all_gather_object(headers, header, group=ring.group)
    for rank, other in enumerate(headers):
        diff = {key: (headers[0][key], other.get(key)) for key in headers[0]}
        diff = {key: pair for key, pair in diff.items() if pair[0] != pair[1]}
        if diff:
            details = ", ".join(
                f"{key}: rank 0 has {a!r}, rank {rank} has {b!r}" for key, (a, b) in diff.items()
            )
            raise ValueError(f"ring ranks disagree before the first transfer: {details}")


class _Transfer:
    """The P2P operations of one step, posted together (``batch_isend_irecv``): sends go to
    the schedule's ``send_to``, receives come from its ``recv_from``."""

    def __init__(
        self,
        ring: Ring,
        sched: Schedule,
        step: int,
        sends: list[torch.Tensor],
        recvs: list[torch.Tensor],
    ):
        self.ring, self.step = ring, step
        self.dst = ring.peer(int(sched.send_to[ring.rank]))
        self.src = ring.peer(int(sched.recv_from[ring.rank]))
        ops = [dist.P2POp(dist.isend, t, self.dst, ring.group) for t in sends]
        ops += [dist.P2POp(dist.irecv, t, self.src, ring.group) for t in recvs]
        self.works = dist.batch_isend_irecv(ops) if ops else []

    def wait(self) -> None:
        timeout = timedelta(seconds=self.ring.timeout_s)
        for work in self.works:
            try:
                if self.ring.clock is not None and self.ring.clock.cuda:
                    work.wait()  # the compute stream waits; the host does not block
                else:
                    work.wait(timeout)
            except Exception as err:  # gloo/NCCL raise RuntimeError subclasses
                raise RingError(
                    f"rank {self.ring.rank}: step {self.step}: transfer with ranks {self.src} "
                    f"(recv) / {self.dst} (send) failed or timed out after "
                    f"{self.ring.timeout_s:g} s; a peer probably died: {err}"
                ) from err


def ring_positions(ring: Ring, device: torch.device) -> torch.Tensor:
    return torch.as_tensor(host_positions(ring.layout, ring.hosts, ring.seq_len), device=device)


def ring_documents(ring: Ring, pos: torch.Tensor) -> torch.Tensor | None:
    """``(P, c)`` document ids of every rank's tokens (``None`` without packed documents)."""
    if ring.segment_ids is None:
        return None
    return torch.as_tensor(ring.segment_ids, device=pos.device)[pos]


def _start_record(ring: Ring, steps: int, device: torch.device) -> RankTimeline | None:
    if not ring.record:
        return None
    if ring.clock is None:
        ring.clock = _Clock(device)
        ring.clock.start()
    return RankTimeline(ring.rank, steps)


def _mark(rec: RankTimeline | None, ring: Ring, name: str, step: int) -> None:
    if rec is not None:
        rec.marks[name][step] = ring.clock.mark()


def _wait(transfer: _Transfer, rec: RankTimeline | None, ring: Ring, step: int) -> None:
    _mark(rec, ring, "wait_start", step)
    transfer.wait()
    _mark(rec, ring, "send_end", step)
    _mark(rec, ring, "recv_end", step)


def _kv_pair(k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The block that travels, as two messages posted together: ``k, v`` themselves (no copy
    into one buffer, which on a CPU cost a memory pass over the block per ring call)."""
    return k.contiguous(), v.contiguous()


def ring_forward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ring: Ring, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's ``(out, lse)`` (fp32) for its query block, over the forward schedule."""
    sched = ring.schedule("forward")
    rank = ring.rank
    pos = ring_positions(ring, q.device)
    docs = ring_documents(ring, pos)
    out = lse = None  # the first block computed (always step 0: the rank's own) starts them
    owners, kinds = sched.kv_owners[:, rank], sched.kind[:, rank]
    kv = _kv_pair(k, v)
    rec = _start_record(ring, sched.steps, q.device)
    for step in range(sched.steps):
        moving = bool(sched.payload(step))
        incoming = tuple(torch.empty_like(x) for x in kv) if moving else None
        if moving:
            _mark(rec, ring, "send_start", step)
            _mark(rec, ring, "recv_start", step)
            transfer = _Transfer(ring, sched, step, list(kv), list(incoming))
        owner, kind = int(owners[step]), int(kinds[step])
        if kind != BlockKind.SKIP:
            _mark(rec, ring, "compute_start", step)
            out_b, lse_b = block_attention(
                q, kv[0], kv[1], **ring.mask_args(pos, docs, owner, kind), scale=scale,
                backend=ring.block_backend, out_dtype=torch.float32,
            )  # fmt: skip
            if out is None:  # no zero-filled accumulator to merge into: a memory pass saved
                out, lse = out_b, lse_b
            else:
                out, lse = merge_out_lse(out, lse, out_b, lse_b)
            _mark(rec, ring, "compute_end", step)
        if moving:
            _wait(transfer, rec, ring, step)
            kv = incoming
    ring.forward_timeline = rec
    if out is None:  # a rank's own block (step 0) always has visible keys: a schedule bug
        raise RuntimeError(f"rank {rank}: the forward schedule computed no block")
    return out, lse


def ring_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    dout: torch.Tensor,
    ring: Ring,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """This rank's fp32 ``(dq, dk, dv)`` over the backward schedule (dk/dv arrive home)."""
    sched = ring.schedule("backward")
    rank = ring.rank
    pos = ring_positions(ring, q.device)
    docs = ring_documents(ring, pos)
    delta = (dout.float() * out.float()).sum(dim=-1)  # rowsum(dout * out), once for all blocks
    dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    owners, kinds = sched.kv_owners[:, rank], sched.kind[:, rank]
    kv = _kv_pair(k, v)
    outgoing_grads = None  # the accumulator of the block finished last step, to pass on
    rec = _start_record(ring, sched.steps + 1, q.device)
    for step in range(sched.steps):
        payload = sched.payload(step)
        sends, recvs = [], []
        incoming_grads = incoming_kv = None
        if outgoing_grads is not None:  # payload(step - 1) carried dk, dv
            incoming_grads = torch.empty_like(outgoing_grads)
            sends.append(outgoing_grads)
            recvs.append(incoming_grads)
        if "k" in payload:
            incoming_kv = tuple(torch.empty_like(x) for x in kv)
            sends.extend(kv)
            recvs.extend(incoming_kv)
        if sends:
            _mark(rec, ring, "send_start", step)
            _mark(rec, ring, "recv_start", step)
            transfer = _Transfer(ring, sched, step, sends, recvs)
        owner, kind = int(owners[step]), int(kinds[step])
        grads = torch.zeros((2, *k.shape), dtype=torch.float32, device=q.device)
        if kind != BlockKind.SKIP:
            _mark(rec, ring, "compute_start", step)
            dq_b, dk_b, dv_b = block_attention_backward(
                q, kv[0], kv[1], dout, None, lse, **ring.mask_args(pos, docs, owner, kind),
                scale=scale, delta=delta, backend=ring.block_backend, out_dtype=torch.float32,
            )  # fmt: skip
            dq += dq_b
            grads[0] += dk_b
            grads[1] += dv_b
            _mark(rec, ring, "compute_end", step)
        if sends:
            _wait(transfer, rec, ring, step)
        if incoming_grads is not None:
            grads += incoming_grads
        if incoming_kv is not None:
            kv = incoming_kv
        outgoing_grads = grads if "dk" in payload else None
    home = grads  # one host: the accumulator never left
    if outgoing_grads is not None:  # the extra hop: every accumulator goes home to its owner
        step = sched.steps
        home = torch.empty_like(outgoing_grads)
        _mark(rec, ring, "send_start", step)
        _mark(rec, ring, "recv_start", step)
        _wait(_Transfer(ring, sched, step, [outgoing_grads], [home]), rec, ring, step)
    ring.backward_timeline = rec
    return dq, home[0], home[1]


class RingAttention(torch.autograd.Function):
    """``out = attention(q, k, v)`` over the ring; ``backward`` runs the backward ring."""

    @staticmethod
    def forward(ctx, q, k, v, ring: Ring, scale: float):
        out, lse = ring_forward(q, k, v, ring, scale)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.ring, ctx.scale = ring, scale
        return out.to(q.dtype)

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = ring_backward(q, k, v, out, lse, dout, ctx.ring, ctx.scale)
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None


def ring_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    layout: str = "contiguous",
    causal: bool = False,
    scale: float | None = None,
    group=None,
    block_backend: str = "auto",
    timeout_s: float = DEFAULT_TIMEOUT_S,
    ring: Ring | None = None,
    check: bool = True,
    segment_ids: np.ndarray | None = None,
) -> torch.Tensor:
    """Ring attention of this rank's shard; differentiable (the backward runs on the ring).

    ``q``: ``(..., Hq, c, d)``, ``k``/``v``: ``(..., Hkv, c, d)``: the tokens at
    ``host_positions(layout, P, P * c)[rank]`` (see ``shard``). Returns this rank's output
    ``(..., Hq, c, d)`` in ``q.dtype``. Every rank of ``group`` must call it with matching
    shapes, layout and dtype (checked before any transfer; ``ValueError`` otherwise).
    Pass a ``Ring(record=True, ...)`` as ``ring`` to keep per-step timelines; ``check=False``
    skips the header exchange (when the caller already ran ``check_agreement``).
    ``segment_ids`` ``(P * c,)``: the document id of every token of the *whole* sequence (the
    same on every rank): attention stays inside each document, as in ``ringsim``.
    """
    if not dist.is_initialized():
        raise ValueError("ring_attention needs torch.distributed initialised (see launch)")
    hosts = dist.get_world_size(group)
    seq_len = q.shape[-2] * hosts
    if ring is None:
        ring = Ring(check_layout(layout), bool(causal), seq_len, group, block_backend, timeout_s)
    if ring.seq_len != seq_len:
        raise ValueError(f"ring.seq_len must be {seq_len} (hosts * block), got {ring.seq_len}")
    if segment_ids is not None:
        ring.segment_ids = check_segment_ids(segment_ids, seq_len)
    host_positions(ring.layout, hosts, seq_len)  # validates divisibility (zigzag needs 2P)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    if check:
        check_agreement(ring, _header(ring, q, k, v, scale))
    return RingAttention.apply(q, k, v, ring, scale)


# ------------------------------------------------------------------------------------------
# Sharding helpers
# ------------------------------------------------------------------------------------------


def shard(x: torch.Tensor, layout: str, hosts: int, rank: int) -> torch.Tensor:
    """The tokens of ``x`` ``(..., N, d)`` that ``rank`` holds, in its (sorted) order."""
    pos = torch.as_tensor(host_positions(layout, hosts, x.shape[-2])[rank], device=x.device)
    return x.index_select(-2, pos).contiguous()


def unshard(blocks: Sequence[torch.Tensor], layout: str) -> torch.Tensor:
    """Inverse of ``shard``: per-rank blocks back to the original token order."""
    hosts = len(blocks)
    seq_len = blocks[0].shape[-2] * hosts
    pos = torch.as_tensor(host_positions(layout, hosts, seq_len).reshape(-1))
    stacked = torch.cat(list(blocks), dim=-2)
    out = torch.empty_like(stacked)
    out[..., pos.to(stacked.device), :] = stacked
    return out


# ------------------------------------------------------------------------------------------
# Launching P local processes (gloo on CPU)
# ------------------------------------------------------------------------------------------


def rank_cores(hosts: int, threads: int, backend: str) -> list[set[int]] | None:
    """The CPU cores each rank is pinned to: ``threads`` cores of its own, when the machine
    has enough (else ``None``: the ranks share all cores, as an oversubscribed test must).

    A host of the simulated ring owns its hardware. Unpinned, the OS migrates the ranks and
    gloo's transport threads between cores, and a wake-up after a migration costs milliseconds
    (measured here on 2 cores: posting a 1 MB ``isend`` took 0.38 ms median but 3.4 ms at the
    90th percentile unpinned, 0.86 ms pinned). GPU ranks own their device; they are not pinned.
    """
    if backend != "gloo" or not hasattr(os, "sched_getaffinity"):
        return None
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < hosts * threads:
        return None
    return [set(cores[r * threads : (r + 1) * threads]) for r in range(hosts)]


def _worker_main(rank, hosts, init_file, backend, timeout_s, threads, cores, fn, args, results):
    try:
        if cores is not None:
            os.sched_setaffinity(0, cores)  # before torch starts its threads
        torch.set_num_threads(threads)
        if backend == "nccl":
            torch.cuda.set_device(rank % torch.cuda.device_count())
        try:
            dist.init_process_group(
                backend,
                init_method=f"file://{init_file}",
                rank=rank,
                world_size=hosts,
                timeout=timedelta(seconds=timeout_s),
            )
        except Exception as err:
            raise RingError(
                f"rank {rank}: rendezvous of {hosts} ranks failed within {timeout_s:g} s "
                f"(a rank never joined?): {err}"
            ) from err
        try:
            results.put((rank, "ok", fn(rank, hosts, *args)))
        finally:
            dist.destroy_process_group()
    except BaseException as err:  # report every failure to the parent, then exit
        results.put((rank, "error", f"{type(err).__name__}: {err}\n{traceback.format_exc()}"))


def launch(
    fn: Callable,
    hosts: int,
    *,
    args: tuple = (),
    backend: str = "gloo",
    timeout_s: float = DEFAULT_TIMEOUT_S,
    threads: int = 1,
    ranks: Sequence[int] | None = None,
    deadline_s: float | None = None,
    pin: bool = True,
) -> list:
    """Run ``fn(rank, hosts, *args)`` in ``hosts`` fresh processes joined by ``backend``.

    ``fn`` must be importable (a module-level function). Each process gets ``threads`` torch
    threads and ``timeout_s`` for the rendezvous and every collective/transfer. ``ranks``
    starts only some ranks (to test a rank that never joins). Returns the results by rank;
    raises ``RingError`` naming every rank that failed, or that did not answer within
    ``deadline_s`` (default: ``2 * timeout_s + 30``). ``pin``: give each gloo rank cores of
    its own when there are enough (``rank_cores``).
    """
    ctx = torch.multiprocessing.get_context("spawn")
    results = ctx.Queue()
    ranks = list(range(hosts)) if ranks is None else list(ranks)
    deadline = time.monotonic() + (2 * timeout_s + 30 if deadline_s is None else deadline_s)
    cores = rank_cores(hosts, threads, backend) if pin else None
    with tempfile.TemporaryDirectory(prefix="ringsim-") as tmp:
        init_file = os.path.join(tmp, "rendezvous")
        procs = [
            ctx.Process(
                target=_worker_main,
                args=(
                    r,
                    hosts,
                    init_file,
                    backend,
                    timeout_s,
                    threads,
                    None if cores is None else cores[r],
                    fn,
                    args,
                    results,
                ),
                daemon=True,
            )
            for r in ranks
        ]
        for p in procs:
            p.start()
        answers: dict[int, tuple[str, object]] = {}
        try:
            while len(answers) < len(ranks):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    rank, status, value = results.get(timeout=min(remaining, 1.0))
                except queue.Empty:
                    if all(not p.is_alive() for p in procs) and results.empty():
                        break
                    continue
                answers[rank] = (status, value)
        finally:
            for p in procs:
                p.join(timeout=max(0.0, min(5.0, deadline - time.monotonic())))
                if p.is_alive():
                    p.kill()
                    p.join()
    failures = [
        f"rank {r}: {answers[r][1]}" for r in ranks if r in answers and answers[r][0] != "ok"
    ]
    missing = [r for r in ranks if r not in answers]
    if missing:
        failures.append(f"ranks {missing} did not answer (died or hung) before the deadline")
    if failures:
        raise RingError("ring run failed:\n" + "\n".join(failures))
    return [answers[r][1] for r in ranks]


# ------------------------------------------------------------------------------------------
# A complete run on random inputs: used by the tests, ``kernels.measure`` and torchrun
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunConfig:
    """One ring attention problem with inputs drawn from ``seed`` (identical on every rank)."""

    seq_len: int
    heads: int = 2
    kv_heads: int | None = None
    head_dim: int = 16
    batch: int = 1
    layout: str = "contiguous"
    causal: bool = False
    dtype: str = "float32"
    seed: int = 0
    backward: bool = True
    repeats: int = 1
    warmup: int = 0
    block_backend: str = "auto"
    timeout_s: float = DEFAULT_TIMEOUT_S
    return_tensors: bool = True
    segment_ids: tuple[int, ...] | None = None  # packed documents: one id per token

    def segments(self) -> np.ndarray | None:
        return None if self.segment_ids is None else np.asarray(self.segment_ids, np.int64)

    def inputs(self, device: torch.device) -> tuple[torch.Tensor, ...]:
        """Full ``q, k, v, dout`` ``(batch, heads, N, d)``, same on every rank."""
        gen = torch.Generator().manual_seed(self.seed)
        kv_heads = self.kv_heads or self.heads
        dtype = getattr(torch, self.dtype)

        def draw(h):
            x = torch.randn(self.batch, h, self.seq_len, self.head_dim, generator=gen)
            return x.to(device=device, dtype=dtype)

        return draw(self.heads), draw(kv_heads), draw(kv_heads), draw(self.heads)


def run_ring(rank: int, hosts: int, config: RunConfig, group=None) -> dict:
    """One rank's part of ``config``: forward (and backward) ``repeats`` times, timelines of
    the last repeat. Returns this rank's output/gradients (numpy) and resolved timelines."""
    device = _device()
    q_full, k_full, v_full, dout_full = config.inputs(device)
    q, k, v, dout = (
        shard(x, config.layout, hosts, rank) for x in (q_full, k_full, v_full, dout_full)
    )
    result: dict = {"rank": rank, "forward_s": [], "backward_s": []}
    scale = 1.0 / math.sqrt(config.head_dim)
    for i in range(config.warmup + config.repeats):
        ring = Ring(
            config.layout, config.causal, config.seq_len, group, config.block_backend,
            config.timeout_s, record=True,
            segment_ids=check_segment_ids(config.segments(), config.seq_len),
        )  # fmt: skip
        if i == 0:
            check_agreement(ring, _header(ring, q, k, v, scale))
        qr, kr, vr = (x.detach().clone().requires_grad_(config.backward) for x in (q, k, v))
        start_line(group)
        _sync(device)
        t0 = time.perf_counter()
        out = ring_attention(qr, kr, vr, scale=scale, ring=ring, check=False)
        _sync(device)
        t1 = time.perf_counter()
        if config.backward:
            out.backward(dout)
            _sync(device)
        t2 = time.perf_counter()
        if i >= config.warmup:
            result["forward_s"].append(t1 - t0)
            result["backward_s"].append(t2 - t1)
    result["forward_timeline"] = ring.forward_timeline.resolve(ring.clock)
    if config.backward:
        result["backward_timeline"] = ring.backward_timeline.resolve(ring.clock)
    if config.return_tensors:
        result["out"] = out.detach().cpu().double().numpy()
        if config.backward:
            result.update(
                dq=qr.grad.cpu().double().numpy(),
                dk=kr.grad.cpu().double().numpy(),
                dv=vr.grad.cpu().double().numpy(),
            )
    return result


def run_configs(rank: int, hosts: int, configs: Sequence[RunConfig]) -> list[dict | str]:
    """Several problems in one process group (process start-up is the slow part on CPU).
    A ``ValueError`` (e.g. ranks that disagree) is returned as its message, not raised."""
    results = []
    for config in configs:
        try:
            results.append(run_ring(rank, hosts, config))
        except ValueError as err:
            results.append(f"ValueError: {err}")
    return results


# Seconds the ranks pause after the barrier that starts a timed region on CPU (see start_line)
SETTLE_S = 0.02


def start_line(group=None) -> None:
    """Line every rank up for a timed region: a barrier, then (gloo) a pause of ``SETTLE_S``.

    Measured here (c=8, 64 heads x 256, 90 passes per setting): straight after a gloo barrier,
    50-78% of ring passes took the slow one of two modes (~7 ms instead of ~3.5 ms: one rank's
    first ``isend`` blocked for ~4 ms); after a 20 ms pause, 3-11%. The barrier's own messages
    and threads are still winding down as it returns; a timed pass must not pay for the
    harness that lines it up."""
    dist.barrier(group)
    if dist.get_backend(group) == "gloo":
        time.sleep(SETTLE_S)


def _device() -> torch.device:
    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def assemble(results: Sequence[dict], key: str, layout: str) -> np.ndarray:
    """Per-rank arrays ``results[r][key]`` back in the original token order."""
    return unshard([torch.from_numpy(r[key]) for r in results], layout).numpy()


# ------------------------------------------------------------------------------------------
# torchrun entry point (GPUs: NCCL)
# ------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """``torchrun --nproc-per-node P -m kernels.ring --seq-len N [...]``: one ring run on NCCL
    (gloo without GPUs); rank 0 prints a JSON line with timings and the error vs reference."""
    parser = argparse.ArgumentParser(prog="python -m kernels.ring")
    parser.add_argument("--seq-len", type=int, required=True)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--kv-heads", type=int, default=None)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument(
        "--layout", default="contiguous", choices=["contiguous", "striped", "zigzag"]
    )
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--out", default=None, help="write rank 0's JSON here")
    args = parser.parse_args(argv)
    use_cuda = torch.cuda.is_available()
    if use_cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group("nccl" if use_cuda else "gloo", timeout=timedelta(seconds=args.timeout))
    try:
        rank, hosts = dist.get_rank(), dist.get_world_size()
        config = RunConfig(
            args.seq_len, args.heads, args.kv_heads, args.head_dim, 1, args.layout, args.causal,
            args.dtype, repeats=args.repeats, warmup=1, timeout_s=args.timeout,
        )  # fmt: skip
        res = run_ring(rank, hosts, config)
        outs: list = [None] * hosts
        dist.all_gather_object(outs, res)
        if rank == 0:
            summary = summarize_run(outs, config)
            print(json.dumps(summary))
            if args.out:
                with open(args.out, "w") as fh:
                    json.dump(summary, fh, indent=2)
    finally:
        dist.destroy_process_group()
    return 0


def summarize_run(results: Sequence[dict], config: RunConfig) -> dict:
    """Timings of a run (median over repeats of the slowest rank) and the error vs the float64
    reference (computed on CPU; fine up to a few thousand tokens)."""
    forward = float(np.median(np.max([r["forward_s"] for r in results], axis=0)))
    backward = float(np.median(np.max([r["backward_s"] for r in results], axis=0)))
    summary = {
        "hosts": len(results), "seq_len": config.seq_len, "layout": config.layout,
        "causal": config.causal, "dtype": config.dtype, "heads": config.heads,
        "head_dim": config.head_dim, "forward_s": forward, "backward_s": backward,
    }  # fmt: skip
    if config.return_tensors and config.seq_len <= 8192:
        import ringsim

        q, k, v, _ = (x.double().numpy() for x in config.inputs(torch.device("cpu")))
        ref = ringsim.reference_attention(
            q, k, v, causal=config.causal, segment_ids=config.segments()
        )
        summary["max_abs_error"] = float(
            np.abs(assemble(results, "out", config.layout) - ref).max()
        )
    return summary


if __name__ == "__main__":
    sys.exit(main())
