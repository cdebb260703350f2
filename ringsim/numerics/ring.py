"""Ring Attention on ``P`` virtual hosts in one process: the numerics executor.

Each ``Host`` holds its own query block forever and, at any moment, one key/value block it is
computing with plus the one arriving from its neighbour (double buffering). The loop below
follows ``Schedule`` step by step; messages are passed by handing a block object to the
neighbour, so the accounting of what each host holds is exact even though nothing is copied.

Forward, per host and step (the online softmax)::

    part = block_attention(q_block, kv_block)        # acc, row_max, row_sum of this block
    state = merge(state, part)                       # rescale both to the larger row_max

and at the end ``out = acc / row_sum``, ``lse = row_max + log(row_sum)``.

Backward: the same ring again. ``dq`` stays home; each kv block travels with its ``dk``/``dv``
accumulators, every host adds its contribution, and one extra hop after the last step brings
them home to the owner. It rebuilds the probabilities from the forward's ``row_max`` and
``row_sum`` (exact wherever the forward is); from a given ``lse`` alone it shares the float32
``lse`` limit of flash kernels (``ringsim.numerics.attention``).

Every block call works a query tile at a time (``attention.TILE_BYTES`` of scores), so a
virtual host holds its ``O(c d)`` blocks and accumulators plus one tile of scores.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ringsim.checks import (
    as_float_array,
    check_bool,
    check_finite_array,
    check_instance,
    check_overflow,
    check_positive_int,
    check_qkv,
    check_scale,
    checked_result,
)
from ringsim.layouts import Layout, get_layout
from ringsim.numerics.attention import (
    Partial,
    _block_attention,
    _block_attention_backward,
    _merge,
    _softmax_shift,
    empty_partial,
    work_dtype,
)
from ringsim.numerics.rounding import check_precision, round_to
from ringsim.schedule import BlockKind, Schedule, build_schedule


@dataclass
class KVBlock:
    """A key/value block in flight, and (backward) its gradient accumulators."""

    owner: int
    k: np.ndarray | None
    v: np.ndarray | None
    dk: np.ndarray | None = None
    dv: np.ndarray | None = None


@dataclass
class Host:
    """One virtual host: a query block that stays, a kv block in use and one arriving."""

    rank: int
    positions: np.ndarray
    q_block: np.ndarray
    kv_block: KVBlock | None = None
    incoming: KVBlock | None = None
    state: Partial | None = None
    extra: dict[str, np.ndarray] = field(default_factory=dict)

    def holdings(self) -> dict[str, int | None]:
        """Which blocks this host holds right now (owner ranks), for memory accounting."""
        return {
            "q": self.rank,
            "kv": None if self.kv_block is None else self.kv_block.owner,
            "incoming": None if self.incoming is None else self.incoming.owner,
        }

    def nbytes(self) -> int:
        arrays = [self.q_block, *self.extra.values()]
        for blk in (self.kv_block, self.incoming):
            if blk is not None:
                arrays += [a for a in (blk.k, blk.v, blk.dk, blk.dv) if a is not None]
        if self.state is not None:
            arrays += list(self.state)
        return sum(a.nbytes for a in arrays)


@dataclass
class RingRecord:
    """What every host held and computed at every step (filled when passed to an executor).

    ``steps[s][h]``: host ``h``'s holdings at step ``s``. ``outputs[s][h]``: its running
    normalised output ``acc / row_sum`` after merging step ``s`` (forward), or its running
    ``dq`` after step ``s`` (backward), for lessons that watch the ring converge to the exact
    answer. ``states[s][h]`` (forward only): its running ``Partial`` after step ``s``, whose
    ``row_max`` and ``row_sum`` ``(..., Hq, c)`` show the online softmax at work.
    """

    steps: list[list[dict]] = field(default_factory=list)
    outputs: list[list[np.ndarray]] = field(default_factory=list)
    states: list[list[Partial]] = field(default_factory=list)


def _shard(x: np.ndarray, positions: np.ndarray, host: int) -> np.ndarray:
    return np.ascontiguousarray(np.take(x, positions[host], axis=-2))


def _post_receives(hosts: list[Host], sched: Schedule, step: int) -> None:
    """Each host starts receiving the block it computes with next (the transfer overlaps the
    compute of ``step``): its neighbour's, or under a sliding window the block of the host
    ``hops_after(step)`` behind. The arrays are shared, not copied: ``dk``/``dv`` are updated
    in place during the step, so what arrives is the accumulator *after* the sender's compute,
    as in a real ring where gradients are sent once the step's compute is done."""
    payload = sched.payload(step)
    if not payload:
        return
    recv_from = sched.recv_from_at(step)
    for h in hosts:
        sender = hosts[recv_from[h.rank]].kv_block
        fields = {
            name: getattr(sender, name) if name in payload else None
            for name in ("k", "v", "dk", "dv")
        }
        h.incoming = KVBlock(sender.owner, **fields)


def _complete_receives(hosts: list[Host]) -> None:
    for h in hosts:
        if h.incoming is not None:
            h.kv_block, h.incoming = h.incoming, None


def _record(record: RingRecord | None, hosts: list[Host], sched: Schedule, step: int) -> None:
    if record is None:
        return
    kinds, to = sched.kind_at(step), sched.send_to_at(step)
    record.steps.append(
        [
            {
                **h.holdings(),
                "kind": BlockKind(kinds[h.rank]).name.lower(),
                "nbytes": h.nbytes(),
                "sends": sched.payload(step),
                "to": int(to[h.rank]),
            }
            for h in hosts
        ]
    )


def _check_ring_args(
    q: object,
    k: object,
    v: object,
    hosts: object,
    layout: object,
    scale: float | None,
    segment_ids: object = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, Layout, float]:
    q, k, v = check_qkv(q, k, v)
    hosts = check_positive_int("hosts", hosts)
    layout = get_layout(layout)
    if q.shape[-2] != k.shape[-2]:
        raise ValueError(
            f"ring attention is self-attention: q and k need the same length, got "
            f"{q.shape[-2]} and {k.shape[-2]}"
        )
    layout.check_seq_len(q.shape[-2], hosts, segment_ids)
    return q, k, v, hosts, layout, check_scale(scale, q.shape[-1])


def _assemble(blocks: list[np.ndarray], positions: np.ndarray, like: np.ndarray) -> np.ndarray:
    """Scatter per-host blocks ``(..., c, x)`` back to the original token order."""
    out = np.empty((*like.shape[:-2], positions.size, *blocks[0].shape[-1:]), blocks[0].dtype)
    for h, blk in enumerate(blocks):
        out[..., positions[h], :] = blk
    return out


def check_record(record: object) -> RingRecord | None:
    return check_instance("record", record, RingRecord | type(None), "a RingRecord or None")


def check_dout(dout: object, q: np.ndarray) -> np.ndarray:
    """``dout``: like ``q``, same shape and dtype, finite."""
    dout = as_float_array("dout", dout)
    if dout.shape != q.shape:
        raise ValueError(f"dout must have the shape of q {q.shape}, got {dout.shape}")
    if dout.dtype != q.dtype:
        raise ValueError(f"dout must have the dtype of q ({q.dtype}), got {dout.dtype}")
    check_finite_array("dout", dout)
    return dout


def _check_out_lse(out: object, lse: object, q: np.ndarray) -> tuple:
    """The forward's ``out`` (like ``q``) and ``lse`` (``q``'s shape without ``d``), both or
    neither; ``(None, None)`` when not given."""
    if out is None and lse is None:
        return None, None
    if out is None or lse is None:
        given, missing = ("out", "lse") if lse is None else ("lse", "out")
        raise ValueError(f"{given} needs {missing} too (the forward's pair), got {missing}=None")
    out = as_float_array("out", out)
    if out.shape != q.shape:
        raise ValueError(f"out must have the shape of q {q.shape}, got {out.shape}")
    lse = np.asarray(lse)
    if lse.dtype.kind != "f" or lse.shape != q.shape[:-1]:
        raise ValueError(
            f"lse must be a float array of shape {q.shape[:-1]} (q's without the head dim), "
            f"got dtype {lse.dtype} and shape {lse.shape}"
        )
    check_finite_array("out", out)
    check_finite_array("lse", lse)
    return out, lse


def ring_forward(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    sched: Schedule,
    scale: float,
    *,
    partial_dtype: str | None = None,
    accum_dtype: str | None = None,
    record: RingRecord | None = None,
    stats: dict | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Run the forward schedule; returns ``(out, lse)`` in the original token order.
    ``stats``: a dict to receive the final ``row_max`` and ``row_sum`` ``(..., Hq, N)`` (what an
    exact backward needs).

    ``q``: ``(..., Hq, N, d)``, ``k``/``v``: ``(..., Hkv, N, d)`` already validated.
    ``partial_dtype`` rounds each block's output before it is merged and keeps its ``lse`` in
    the working precision: what a flash kernel returning ``out`` in bf16 and ``lse`` in fp32
    does. ``accum_dtype`` rounds the running ``acc``/``row_sum`` after every merge (an
    accumulator kept in bf16). Both default to exact (the working dtype).
    """
    pos = sched.positions
    dtype = work_dtype(q.dtype)
    hosts = [
        Host(h, pos[h], _shard(q, pos, h), KVBlock(h, _shard(k, pos, h), _shard(v, pos, h)))
        for h in range(sched.hosts)
    ]
    for h in hosts:
        h.state = empty_partial(h.q_block.shape, dtype)
    for step in sched.ring_steps:
        _post_receives(hosts, sched, step)
        _record(record, hosts, sched, step)
        kinds = sched.kind_at(step)
        for h in hosts:
            if kinds[h.rank] == BlockKind.SKIP:
                continue
            blk = h.kv_block
            part = _block_attention(
                h.q_block,
                blk.k,
                blk.v,
                scale=scale,
                **sched.mask_args(h.rank, blk.owner, kinds[h.rank]),
            )
            if partial_dtype is not None:
                part = Partial.from_out_lse(round_to(part.out, partial_dtype), part.lse)
            h.state = _merge(h.state, part)
            if accum_dtype is not None:
                h.state = Partial(
                    round_to(h.state.acc, accum_dtype),
                    h.state.row_max,
                    round_to(h.state.row_sum, accum_dtype),
                )
        if record is not None:
            record.outputs.append([h.state.out for h in hosts])
            record.states.append([h.state for h in hosts])
        _complete_receives(hosts)
    out = _assemble([h.state.out for h in hosts], pos, q)
    row = lambda x: _assemble([x(h.state)[..., None] for h in hosts], pos, q[..., :1])[..., 0]
    if stats is not None:
        stats["row_max"], stats["row_sum"] = row(lambda st: st.row_max), row(lambda st: st.row_sum)
    return out, row(lambda st: st.lse)


def ring_attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    hosts: int,
    layout: str | Layout = "contiguous",
    causal: bool = False,
    scale: float | None = None,
    segment_ids: np.ndarray | None = None,
    partial_dtype: str | None = None,
    accum_dtype: str | None = None,
    return_lse: bool = False,
    record: RingRecord | None = None,
    sliding_window: int | None = None,
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Exact attention computed by ``hosts`` virtual hosts passing kv blocks around a ring.

    ``q``: ``(..., Hq, N, d)``; ``k``, ``v``: ``(..., Hkv, N, d)`` (GQA when ``Hkv < Hq``).
    ``layout``: a name of ``ringsim.LAYOUTS`` or a ``Layout`` (``N`` must meet its divisor:
    ``hosts``, or ``2 * hosts`` for zigzag); results come back in the original token order.
    ``segment_ids`` ``(N,)``: packed documents, attention stays inside each (the
    ``per-document`` layout deals them out, and needs them).
    ``partial_dtype``/``accum_dtype``: the precision lab (``"bf16"``, ``"fp16"``, ...).
    ``record``: a ``RingRecord`` to fill with what each host held at each step.
    ``sliding_window``: ``W`` tokens (``ringsim.masks``): the ring runs only the steps where
    some host sees a key of the block it holds (``Schedule.ring_steps``).
    Returns ``out`` shaped like ``q`` in its dtype, plus the float ``lse`` ``(..., Hq, N)``
    when ``return_lse``.
    """
    q, k, v, hosts, layout, scale = _check_ring_args(q, k, v, hosts, layout, scale, segment_ids)
    return_lse = check_bool("return_lse", return_lse)
    sched = build_schedule(
        hosts,
        layout,
        causal,
        "forward",
        seq_len=q.shape[-2],
        segment_ids=segment_ids,
        sliding_window=sliding_window,
    )
    out, lse = ring_forward(
        q,
        k,
        v,
        sched,
        scale,
        partial_dtype=check_precision("partial_dtype", partial_dtype),
        accum_dtype=check_precision("accum_dtype", accum_dtype),
        record=check_record(record),
    )
    out = checked_result("attention", out, q.dtype, lse=lse)
    return (out, lse) if return_lse else out


def _softmax_rows(lse, row_max, row_sum, rows: np.ndarray) -> dict[str, np.ndarray]:
    """A host's softmax statistics for the backward: its ``lse``, or (only where rounding lost
    ``log(row_sum)`` from it) ``row_max`` and ``row_sum``, one number per query row each."""
    take = lambda x: np.take(x, rows, axis=-1)
    if row_max is None or row_sum is None:
        return {"lse": take(lse)}
    shift, norm = _softmax_shift(take(lse), take(row_max), take(row_sum), lambda x: x)
    if norm is None or np.all(norm == 1):
        return {"lse": take(lse)}
    return {"row_max": shift, "row_sum": norm}


def ring_backward(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    dout: np.ndarray,
    out: np.ndarray,
    lse: np.ndarray,
    sched: Schedule,
    scale: float,
    *,
    record: RingRecord | None = None,
    row_max: np.ndarray | None = None,
    row_sum: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Run the backward schedule from the forward's ``out`` and ``lse``; returns
    ``(dq, dk, dv)`` in the original token order. With the forward's ``row_max`` and
    ``row_sum`` (``(..., Hq, N)``) the probabilities come from them instead of ``lse``."""
    pos = sched.positions
    dtype = work_dtype(q.dtype)
    hosts = []
    for h in range(sched.hosts):
        kv = KVBlock(h, _shard(k, pos, h), _shard(v, pos, h))
        kv.dk, kv.dv = np.zeros(kv.k.shape, dtype), np.zeros(kv.v.shape, dtype)
        host = Host(h, pos[h], _shard(q, pos, h), kv)
        do = _shard(dout, pos, h).astype(dtype)
        host.extra = {
            "dout": do,
            **_softmax_rows(lse, row_max, row_sum, pos[h]),
            # delta = rowsum(dout * out) = rowsum(p * dp): one number per query row
            "delta": (do * _shard(out, pos, h).astype(dtype)).sum(axis=-1),
            "dq": np.zeros(host.q_block.shape, dtype),
        }
        hosts.append(host)
    for step in sched.ring_steps:
        _post_receives(hosts, sched, step)
        _record(record, hosts, sched, step)
        kinds = sched.kind_at(step)
        for h in hosts:
            if kinds[h.rank] == BlockKind.SKIP:
                continue
            blk = h.kv_block
            dq, dk, dv = _block_attention_backward(
                h.q_block,
                blk.k,
                blk.v,
                h.extra["dout"],
                h.extra.get("lse"),
                h.extra["delta"],
                scale=scale,
                row_max=h.extra.get("row_max"),
                row_sum=h.extra.get("row_sum"),
                **sched.mask_args(h.rank, blk.owner, kinds[h.rank]),
            )
            h.extra["dq"] += dq
            blk.dk += dk
            blk.dv += dv
        if record is not None:
            record.outputs.append([h.extra["dq"].copy() for h in hosts])
        # after the last step the payload is (dk, dv) only: it brings them home to their owner
        _complete_receives(hosts)
    for h in hosts:
        if h.kv_block.owner != h.rank:
            raise AssertionError(f"dk/dv of block {h.kv_block.owner} ended on host {h.rank}")
    dq = _assemble([h.extra["dq"] for h in hosts], pos, q)
    dk = _assemble([h.kv_block.dk for h in hosts], pos, k)
    dv = _assemble([h.kv_block.dv for h in hosts], pos, v)
    return dq, dk, dv


def ring_attention_backward(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    dout: np.ndarray,
    *,
    hosts: int,
    layout: str | Layout = "contiguous",
    causal: bool = False,
    scale: float | None = None,
    segment_ids: np.ndarray | None = None,
    out: np.ndarray | None = None,
    lse: np.ndarray | None = None,
    record: RingRecord | None = None,
    sliding_window: int | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gradients ``(dq, dk, dv)`` of ``sum(dout * ring_attention(q, k, v))`` on the ring.

    Uses the forward's ``out`` and log-sum-exp ``lse``, never the full attention matrix. If
    they are not given the forward runs on the ring and the backward uses its ``row_max`` and
    ``row_sum``: exact wherever the forward is, even for huge tied scores where a float32
    ``lse = row_max + log(row_sum)`` rounds ``log(row_sum)`` away (a given ``lse`` has that
    limit, as flash kernels do). Shapes as ``ring_attention``; ``dout`` like ``q``.
    Gradients come back in the input dtype, in the original token order.
    """
    q, k, v, hosts, layout, scale = _check_ring_args(q, k, v, hosts, layout, scale, segment_ids)
    dout = check_dout(dout, q)
    out, lse = _check_out_lse(out, lse, q)
    record = check_record(record)
    kw = dict(seq_len=q.shape[-2], segment_ids=segment_ids, sliding_window=sliding_window)
    fwd = build_schedule(hosts, layout, causal, "forward", **kw)
    stats: dict = {}
    if out is None:
        out, lse = ring_forward(q, k, v, fwd, scale, stats=stats)
    check_overflow("attention", out, work_dtype(q.dtype), lse=lse)
    bwd = build_schedule(hosts, layout, causal, "backward", **kw)
    grads = ring_backward(q, k, v, dout, out, lse, bwd, scale, record=record, **stats)
    return tuple(checked_result(name, g, q.dtype) for name, g in zip(GRADS, grads, strict=True))


GRADS = ("dq", "dk", "dv")
