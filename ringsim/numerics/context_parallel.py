"""Context-parallel methods inside one ring group, beside the ring of ``ringsim.numerics.ring``
and with its signature (token-order ``q, k, v`` of the group, sharded by ``sched.positions``):

* the **double ring** (LoongTrain, Gu et al., arXiv 2406.18485; InternEvo's ``window_size``):
  the group's ``R`` slots are cut into ``R / w`` inner rings of ``w`` consecutive slots (one
  node each); slot ``k w + i`` is member ``i`` of inner ring ``k``. The pass runs ``R / w``
  rounds; in round ``o`` that slot starts with the block of slot ``(k - o) w + i`` and its inner
  ring passes the round's blocks ``w`` steps round, while the outer ring (member ``i`` of ring
  ``k`` to member ``i`` of ring ``k + 1``) carries the round's first block on to the next inner
  ring, for the next round. Backward, each block carries its ``dk``, ``dv``: the inner ring's
  extra hop brings them back to the host that started the round with the block, the outer ring
  carries them on, summed over rounds, and after the last round home. ``w = R`` and ``w = 1``
  visit the blocks in the flat ring's order (bit for bit the ring).
* the **all-gather** (Llama 3 context parallelism, Dubey et al. 2024): every slot all-gathers
  the group's ``k``, ``v`` and attends to them at once, masked by global position; backward, a
  reduce-scatter sums each slot's ``dk``, ``dv`` onto their owners.

Blocks are ``KVBlock`` objects of the ring handed between slots, so who holds what is exact;
the arithmetic is the block primitive and ``merge``; which pairs are skipped, partial or full
comes from the flat ring's ``Schedule`` (under a sliding window the double ring skips the dead
pairs' compute but still passes every block; the all-gather masks by the window).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ringsim.numerics.attention import (
    _block_attention,
    _block_attention_backward,
    _merge,
    empty_partial,
    work_dtype,
)
from ringsim.numerics.ring import KVBlock, _softmax_rows, ring_backward, ring_forward
from ringsim.schedule import BlockKind, Schedule
from ringsim.sharing import ALLGATHER, DOUBLE_RING, RING, Sharing


def _shard(x: np.ndarray, pos: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.take(x, pos, axis=-2))


def _place(blocks: list[np.ndarray], positions: np.ndarray) -> np.ndarray:
    """Slot blocks ``(..., c, x)`` at their token positions ``(R, c)``: how the ring executors
    take their input (they read slot ``j``'s block back from ``positions[j]``)."""
    out = np.empty((*blocks[0].shape[:-2], positions.size, blocks[0].shape[-1]), blocks[0].dtype)
    for blk, pos in zip(blocks, positions, strict=True):
        out[..., pos, :] = blk
    return out


def _pair_kinds(sched: Schedule) -> np.ndarray:
    """``(R, R)`` ``BlockKind`` of query slot ``q`` against key slot ``k``, from the schedule."""
    kind = np.empty((sched.hosts, sched.hosts), np.int8)
    rows = np.arange(sched.hosts)
    for s in range(sched.steps):
        kind[rows, sched.kv_owner(s)] = sched.kind_at(s)
    return kind


class _DoubleRing:
    """The double ring's message passing over one ``KVBlock`` per slot (``blocks``, moved in
    place): ``steps()`` yields ``(held, kinds)`` per inner step of every round, ``held[h]`` the
    block slot ``h`` computes with and ``kinds[h]`` its ``BlockKind``."""

    def __init__(self, sched: Schedule, window: int, blocks: list[KVBlock]):
        self.sched, self.window, self.blocks = sched, window, blocks

    def steps(self):
        R, w = self.sched.hosts, self.window
        kinds = _pair_kinds(self.sched)
        inner_prev = [(h // w) * w + (h % w - 1) % w for h in range(R)]
        slots = np.arange(R)
        for _ in range(R // w):
            start = held = list(self.blocks)
            for _step in range(w):
                yield held, kinds[slots, [b.owner for b in held]]
                held = [held[inner_prev[h]] for h in range(R)]  # inner ring; last: homecoming
            if any(b is not s for b, s in zip(held, start, strict=True)):
                raise AssertionError("the inner ring did not bring every round's block back")
            self.blocks = [start[(h - w) % R] for h in range(R)]  # the outer ring


def _check_home(blocks: list[KVBlock]) -> None:
    for h, blk in enumerate(blocks):
        if blk.owner != h:
            raise AssertionError(f"dk/dv of block {blk.owner} ended on slot {h}")


def _stats_out(states, sched: Schedule, stats: dict | None):
    """``(out, lse)`` of the slots' final partials in token order; ``row_max``, ``row_sum`` into
    ``stats``."""
    pos = sched.positions
    row = lambda f: _place([f(st)[..., None] for st in states], pos)[..., 0]
    if stats is not None:
        stats["row_max"], stats["row_sum"] = row(lambda st: st.row_max), row(lambda st: st.row_sum)
    return _place([st.out for st in states], pos), row(lambda st: st.lse)


def double_ring_forward(q, k, v, sched: Schedule, scale: float, *, window: int, stats=None):
    """``ring_forward`` of the double ring with inner rings of ``window`` slots; returns
    ``(out, lse)`` in token order (``stats``: receives ``row_max``, ``row_sum``)."""
    pos = sched.positions
    qs = [_shard(q, p) for p in pos]
    states = [empty_partial(x.shape, work_dtype(q.dtype)) for x in qs]
    blocks = [KVBlock(h, _shard(k, p), _shard(v, p)) for h, p in enumerate(pos)]
    ring = _DoubleRing(sched, window, blocks)
    for held, kinds in ring.steps():
        for h, blk in enumerate(held):
            if kinds[h] != BlockKind.SKIP:
                args = sched.mask_args(h, blk.owner, kinds[h])
                part = _block_attention(qs[h], blk.k, blk.v, scale=scale, **args)
                states[h] = _merge(states[h], part)
    return _stats_out(states, sched, stats)


def double_ring_backward(
    q,
    k,
    v,
    dout,
    out,
    lse,
    sched: Schedule,
    scale: float,
    *,
    window: int,
    row_max=None,
    row_sum=None,
):
    """``ring_backward`` of the double ring: ``(dq, dk, dv)`` in token order."""
    pos = sched.positions
    dtype = work_dtype(q.dtype)
    qs = [_shard(q, p) for p in pos]
    dos = [_shard(dout, p).astype(dtype) for p in pos]
    # delta = rowsum(dout * out): one number per query row
    deltas = [(dos[h] * _shard(out, p).astype(dtype)).sum(axis=-1) for h, p in enumerate(pos)]
    softmax = [_softmax_rows(lse, row_max, row_sum, p) for p in pos]
    dqs = [np.zeros(x.shape, dtype) for x in qs]
    blocks = [KVBlock(h, _shard(k, p), _shard(v, p)) for h, p in enumerate(pos)]
    for blk in blocks:
        blk.dk, blk.dv = np.zeros(blk.k.shape, dtype), np.zeros(blk.v.shape, dtype)
    ring = _DoubleRing(sched, window, blocks)
    for held, kinds in ring.steps():
        for h, blk in enumerate(held):
            if kinds[h] == BlockKind.SKIP:
                continue
            dq, dk, dv = _block_attention_backward(
                qs[h],
                blk.k,
                blk.v,
                dos[h],
                softmax[h].get("lse"),
                deltas[h],
                scale=scale,
                row_max=softmax[h].get("row_max"),
                row_sum=softmax[h].get("row_sum"),
                **sched.mask_args(h, blk.owner, kinds[h]),
            )
            dqs[h] += dq
            blk.dk += dk
            blk.dv += dv
    _check_home(ring.blocks)
    return (
        _place(dqs, pos),
        _place([b.dk for b in ring.blocks], pos),
        _place([b.dv for b in ring.blocks], pos),
    )


def allgather_forward(q, k, v, sched: Schedule, scale: float, *, stats=None):
    """Llama 3's context parallelism: every slot all-gathers the group's k, v (back in token
    order) and attends to all of it at once, its own queries masked by global position.
    Returns ``(out, lse)`` in token order (``stats``: receives ``row_max``, ``row_sum``)."""
    pos = sched.positions
    k_all, v_all, keys = _all_gather(k, v, pos)
    states = [
        _block_attention(_shard(q, p), k_all, v_all, scale=scale, **_gathered_mask(sched, p, keys))
        for p in pos
    ]
    return _stats_out(states, sched, stats)


def _gathered_mask(sched: Schedule, q_pos: np.ndarray, keys: np.ndarray) -> dict:
    """``block_attention`` mask keywords of queries ``q_pos`` against every key, gathered."""
    seg = sched.segment_ids
    args = dict(q_pos=q_pos, k_pos=keys, causal=sched.causal)
    if seg is not None:
        args.update(q_seg=seg[q_pos], k_seg=seg[keys])
    if sched.sliding_window is not None:
        args["sliding_window"] = sched.sliding_window
    return args


def _all_gather(k: np.ndarray, v: np.ndarray, pos: np.ndarray):
    """Every slot's ``k``, ``v`` blocks, concatenated and sorted by position: ``(k, v, keys)``."""
    keys = pos.reshape(-1)
    order = np.argsort(keys, kind="stable")
    gather = lambda x: np.concatenate([_shard(x, p) for p in pos], axis=-2)[..., order, :]
    return gather(k), gather(v), keys[order]


def allgather_backward(
    q, k, v, dout, out, lse, sched: Schedule, scale: float, *, row_max=None, row_sum=None
):
    """Backward of ``allgather_forward``: each slot's gradients for the whole gathered k, v,
    then a reduce-scatter sums them (in slot order) onto each block's owner."""
    pos = sched.positions
    dtype = work_dtype(q.dtype)
    k_all, v_all, keys = _all_gather(k, v, pos)
    slot_of = np.argsort(np.argsort(keys))  # gathered index of every position
    dqs, dk_parts, dv_parts = [], [], []
    for p in pos:
        do = _shard(dout, p).astype(dtype)
        softmax = _softmax_rows(lse, row_max, row_sum, p)
        dq, dk_all, dv_all = _block_attention_backward(
            _shard(q, p),
            k_all,
            v_all,
            do,
            softmax.get("lse"),
            (do * _shard(out, p).astype(dtype)).sum(axis=-1),
            scale=scale,
            row_max=softmax.get("row_max"),
            row_sum=softmax.get("row_sum"),
            **_gathered_mask(sched, p, keys),
        )
        dqs.append(dq)
        dk_parts.append(dk_all)
        dv_parts.append(dv_all)
    # reduce-scatter: owner j receives every slot's gradient of its own tokens, summed
    scatter = lambda parts, p: sum(np.take(x, slot_of[p], axis=-2) for x in parts)
    dks = [scatter(dk_parts, p) for p in pos]
    dvs = [scatter(dv_parts, p) for p in pos]
    return _place(dqs, pos), _place(dks, pos), _place(dvs, pos)


@dataclass(frozen=True)
class Method:
    """A sequence-parallel method of a ring group, the strategy ``record``'s exact executor:
    ``forward(q, k, v, sched, scale, *, stats, [window]) -> (out, lse)``, ``backward(q, k, v,
    dout, out, lse, sched, scale, *, row_max, row_sum, [window]) -> (dq, dk, dv)``."""

    record: Sharing
    forward: Callable
    backward: Callable

    @property
    def windowed(self) -> bool:
        """It takes the inner ring's size (the record says)."""
        return self.record.windowed


METHODS: dict[str, Method] = {
    m.record.name: m
    for m in (
        Method(RING, ring_forward, ring_backward),
        Method(DOUBLE_RING, double_ring_forward, double_ring_backward),
        Method(ALLGATHER, allgather_forward, allgather_backward),
    )
}
"""The group methods of the exact executor, keyed by their strategies' records
(``ringsim.sharing``)."""
