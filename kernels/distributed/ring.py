"""Ring Attention over ``torch.distributed``: the schedule of ``ringsim.schedule``, for real.

Every rank holds one query block and, at each step, one key/value block, exactly as the NumPy
executor ``ringsim.numerics.ring`` does with virtual hosts; both read the same ``Schedule``
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

Each rank records a per-step timeline (compute, send, receive, time blocked in waits; see
``kernels.distributed.rank_timeline``).

Launching ranks and complete runs on random inputs live in ``kernels.distributed.launch``; per-rank
timelines in ``kernels.distributed.rank_timeline``.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist

from kernels.blocks.dispatch import block_attention, block_attention_backward
from kernels.distributed.exchange import all_gather_json
from kernels.distributed.rank_timeline import RankClock, RankTimeline
from ringsim.checks import check_bool, check_segment_ids
from ringsim.layouts import check_layout, check_seq_len, host_positions, positions_of_host
from ringsim.schedule import BlockKind, Schedule, build_schedule

DEFAULT_TIMEOUT_S = 60.0


class RingError(RuntimeError):
    """A rank could not complete the ring: a peer died, never joined, or timed out."""


@contextlib.contextmanager
def ring_failure_as_os_error():
    """A ring that failed (``RingError``) ends a command as an ``OSError``: one line on stderr
    and exit code 1 (``ringsim.cli.output.guarded``) instead of a traceback, each rank's cause
    in the message."""
    try:
        yield
    except RingError as err:
        raise OSError(f"the ring failed: {err}") from None


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
    clock: RankClock | None = None

    @property
    def hosts(self) -> int:
        return dist.get_world_size(self.group)

    @property
    def rank(self) -> int:
        return dist.get_rank(self.group)

    def schedule(self, pass_: str) -> Schedule:
        return build_schedule(
            self.hosts,
            self.layout,
            self.causal,
            pass_,
            seq_len=self.seq_len,
            segment_ids=self.segment_ids,
        )

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


def agreement_header(
    ring: Ring, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
) -> dict:
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
    """All ranks exchange ``header`` and raise ``ValueError`` (on every rank) if any differs,
    or if any rank's header is ``{"error": message}`` (its local checks failed: every rank
    raises that rank's message, instead of its peers waiting for a transfer that never comes):
    before any block moves, so a mismatch cannot hang or corrupt a transfer. A peer that
    died during the exchange is a ``RingError``."""
    headers = _exchange_headers(ring.group, ring.hosts, header)
    errors = [(r, h["error"]) for r, h in enumerate(headers) if "error" in h]
    if errors:
        raise ValueError("; ".join(f"rank {r}: {message}" for r, message in errors))
    for rank, other in enumerate(headers):
        diff = {key: (headers[0][key], other.get(key)) for key in headers[0]}
        diff = {key: pair for key, pair in diff.items() if pair[0] != pair[1]}
        if diff:
            details = ", ".join(
                f"{key}: rank 0 has {a!r}, rank {rank} has {b!r}" for key, (a, b) in diff.items()
            )
            raise ValueError(f"ring ranks disagree before the first transfer: {details}")


def _exchange_headers(group, hosts: int, header: dict) -> list:
    try:
        headers = all_gather_json(header, group=group)
    except RuntimeError as err:  # gloo/NCCL: a peer left (crashed, killed) mid-exchange
        raise RingError(
            f"rank {dist.get_rank(group)}: the header exchange before the first transfer "
            f"failed; a peer probably died: {err}"
        ) from err
    return headers


def _check_finite(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """Refuse NaN or inf in this rank's shard, as the NumPy ``ring_attention`` does: attention
    of non-finite inputs is undefined (and a NaN would spread to every rank's output)."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not bool(torch.isfinite(x).all()):
            raise ValueError(
                f"{name} contains NaN or inf on rank {dist.get_rank()}; attention of non-finite "
                "inputs is undefined"
            )


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
    pos = host_positions(ring.layout, ring.hosts, ring.seq_len, ring.segment_ids)
    return torch.as_tensor(pos, device=device)


def ring_documents(ring: Ring, pos: torch.Tensor) -> torch.Tensor | None:
    """``(P, c)`` document ids of every rank's tokens (``None`` without packed documents)."""
    if ring.segment_ids is None:
        return None
    return torch.as_tensor(ring.segment_ids, device=pos.device)[pos]


def _start_record(ring: Ring, steps: int, device: torch.device) -> RankTimeline | None:
    if not ring.record:
        return None
    if ring.clock is None:
        ring.clock = RankClock(device)
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
                q,
                kv[0],
                kv[1],
                **ring.mask_args(pos, docs, owner, kind),
                scale=scale,
                backend=ring.block_backend,
                out_dtype=torch.float32,
            )
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
                q,
                kv[0],
                kv[1],
                dout,
                out,
                lse,
                **ring.mask_args(pos, docs, owner, kind),
                scale=scale,
                delta=delta,
                backend=ring.block_backend,
                out_dtype=torch.float32,
            )
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
    try:  # local checks; with ``check`` every rank hears of a failure in the header exchange
        if ring is None:
            ring = Ring(
                check_layout(layout),
                check_bool("causal", causal),
                seq_len,
                group,
                block_backend,
                timeout_s,
            )
        if ring.seq_len != seq_len:
            raise ValueError(f"ring.seq_len must be {seq_len} (hosts * block), got {ring.seq_len}")
        if segment_ids is not None:
            ring.segment_ids = check_segment_ids(segment_ids, seq_len)
        check_seq_len(seq_len, hosts, ring.layout, ring.segment_ids)  # the layout's divisor
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
        if check:
            _check_finite(q, k, v)
    except ValueError as err:
        if not check:
            raise
        _exchange_headers(group, hosts, {"error": str(err)})
        raise
    if check:
        check_agreement(ring, agreement_header(ring, q, k, v, scale))
    return RingAttention.apply(q, k, v, ring, scale)


# ------------------------------------------------------------------------------------------
# Sharding helpers
# ------------------------------------------------------------------------------------------


def shard(
    x: torch.Tensor, layout: str, hosts: int, rank: int, segment_ids: np.ndarray | None = None
) -> torch.Tensor:
    """The tokens of ``x`` ``(..., N, d)`` that ``rank`` holds, in its (sorted) order
    (``segment_ids``: the documents, for a layout that deals by them)."""
    pos = positions_of_host(layout, hosts, x.shape[-2], rank, segment_ids)
    return x.index_select(-2, torch.as_tensor(pos, device=x.device)).contiguous()


def unshard(
    blocks: Sequence[torch.Tensor], layout: str, segment_ids: np.ndarray | None = None
) -> torch.Tensor:
    """Inverse of ``shard``: per-rank blocks back to the original token order."""
    hosts = len(blocks)
    seq_len = blocks[0].shape[-2] * hosts
    pos = torch.as_tensor(host_positions(layout, hosts, seq_len, segment_ids).reshape(-1))
    stacked = torch.cat(list(blocks), dim=-2)
    out = torch.empty_like(stacked)
    out[..., pos.to(stacked.device), :] = stacked
    return out
