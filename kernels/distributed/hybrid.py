"""Ulysses x ring (USP) over ``torch.distributed``: the hybrid of ``ringsim.numerics.hybrid``,
for real.

``P = U x R`` ranks form the same grid as the NumPy executor and the timer
(``ringsim.numerics.hybrid.Grid``; ``placement`` ``ulysses-inner`` makes rank ``j U + u``,
``ring-inner`` rank ``u R + j``). Each rank joins two process groups: its **Ulysses group**
(the ``U`` ranks of ring slot ``j``) and its **ring group** (the ``R`` ranks of head group
``u``). Forward, on rank ``(u, j)`` holding ``(..., H, N/P, d)`` (its piece of slot ``j``'s
tokens, ``Grid.positions``)::

    q, k, v <- all_to_all in the Ulysses group   # heads scattered, slot j's tokens gathered
    out     <- ring_attention(q, k, v, group=ring group)   # the ring, unchanged
    out     <- all_to_all back                   # tokens scattered home, heads gathered

The all-to-alls are ``torch.autograd.Function``s whose backward is the other all-to-all (each
is a permutation of the data, so its adjoint is its inverse), and the ring's own autograd
runs its backward ring in between: ``out.backward(dout)`` returns ``dq``, ``dk``, ``dv`` to
the ranks that own the tokens. gloo implements ``all_to_all`` here (torch 2.13, CPU); each
call names its group, and kv heads are dealt as in the numerics (``ringsim.grid.head_groups``:
whole GQA groups, ``U`` dividing the kv heads beside a ring). Past the kv heads (``U`` a
multiple of them dividing the query heads: ``ringsim.grid.check_ulysses_degree``) each kv
head is repeated ``U / Hkv`` times before the all-to-all, as verl does, one replica per head
group; ``repeat_interleave``'s backward sums the replicas' ``dk, dv`` back onto their head.

``run_hybrid`` is one rank's part of a ``kernels.distributed.launch.RunConfig`` problem, timed
as ``run_ring`` is (``kernels.distributed.repeats``); ``measure_hybrid`` times the forward and
sets it beside ``ringsim.timer``'s prediction (``simulate_strategy(config, "hybrid")``) on a
calibrated profile of this machine.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from kernels.distributed.launch import RunConfig, launch
from kernels.distributed.repeats import TimedRepeats, median_pass, rank_device, slowest_per_pass
from kernels.distributed.ring import DEFAULT_TIMEOUT_S, ring_attention
from ringsim.checks import check_segment_ids
from ringsim.grid import Grid, check_ulysses_degree, head_groups, kv_replicas


@dataclass
class HybridGroups:
    """This rank's place in the ``U x R`` grid and its two process groups."""

    grid: Grid
    u: int
    j: int
    ulysses_group: object
    ring_group: object


def hybrid_groups(ulysses_degree: int, placement: str = "ulysses-inner") -> HybridGroups:
    """Build every Ulysses and ring group (``new_group`` is collective: every rank calls this,
    in the same order) and return this rank's. Group ranks follow slot/head order."""
    world, rank = dist.get_world_size(), dist.get_rank()
    U = int(ulysses_degree)
    if U <= 0 or world % U:
        raise ValueError(f"ulysses_degree must divide the world size {world}, got {U}")
    grid = Grid(U, world // U, placement)
    coords = {grid.rank(u, j): (u, j) for u in range(U) for j in range(grid.ring)}
    u, j = coords[rank]
    mine = {}
    for kind, members in [("ulysses", grid.ulysses_group(jj)) for jj in range(grid.ring)] + [
        ("ring", grid.ring_group(uu)) for uu in range(U)
    ]:
        group = dist.new_group(members)  # every rank creates every group
        if rank in members:
            if dist.get_rank(group) != members.index(rank):  # torch numbers by sorted rank
                raise RuntimeError(
                    f"{kind} group {members}: rank {rank} is not member {members.index(rank)}"
                )
            mine[kind] = group
    return HybridGroups(grid, u, j, mine["ulysses"], mine["ring"])


# ------------------------------------------------------------------------------------------
# The two all-to-alls, each the other's backward
# ------------------------------------------------------------------------------------------


def all_to_all(recvs: list[torch.Tensor], sends: list[torch.Tensor], group) -> None:
    """``recvs[a]`` <- member ``a``'s ``sends[me]``. Equal pieces use the collective; gloo's
    ``all_to_all`` refuses unequal ones (uneven head groups), which go as P2P pairs posted
    together (``batch_isend_irecv``), as NCCL runs an all-to-all anyway."""
    if len({tuple(t.shape) for t in sends + recvs}) == 1:
        dist.all_to_all(recvs, sends, group=group)
        return
    me = dist.get_rank(group)
    peer = lambda a: dist.get_global_rank(group, a)
    ops = [dist.P2POp(dist.isend, t, peer(a), group) for a, t in enumerate(sends) if a != me]
    ops += [dist.P2POp(dist.irecv, t, peer(a), group) for a, t in enumerate(recvs) if a != me]
    works = dist.batch_isend_irecv(ops) if ops else []
    recvs[me].copy_(sends[me])
    for work in works:
        work.wait()


def seq_to_heads(x: torch.Tensor, group, heads: Sequence[slice]) -> torch.Tensor:
    """``(..., H, c, d)`` -> ``(..., |heads[me]|, U c, d)``: member ``b`` gets head group ``b``
    of every member's tokens, in member order."""
    me = dist.get_rank(group)
    sends = [x[..., h, :, :].contiguous() for h in heads]
    recvs = [torch.empty_like(sends[me]) for _ in heads]
    all_to_all(recvs, sends, group)
    return torch.cat(recvs, dim=-2)


def heads_to_seq(y: torch.Tensor, group, heads: Sequence[slice]) -> torch.Tensor:
    """Inverse of ``seq_to_heads``: ``(..., H_me, U c, d)`` -> ``(..., H, c, d)``."""
    c = y.shape[-2] // len(heads)
    sends = [y[..., b * c : (b + 1) * c, :].contiguous() for b in range(len(heads))]
    shape = lambda h: (*y.shape[:-3], h.stop - h.start, c, y.shape[-1])
    recvs = [torch.empty(shape(h), dtype=y.dtype, device=y.device) for h in heads]
    all_to_all(recvs, sends, group)
    return torch.cat(recvs, dim=-3)


class SeqToHeads(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group, heads):
        ctx.group, ctx.heads = group, heads
        return seq_to_heads(x, group, heads)

    @staticmethod
    def backward(ctx, grad):
        return heads_to_seq(grad.contiguous(), ctx.group, ctx.heads), None, None


class HeadsToSeq(torch.autograd.Function):
    @staticmethod
    def forward(ctx, y, group, heads):
        ctx.group, ctx.heads = group, heads
        return heads_to_seq(y, group, heads)

    @staticmethod
    def backward(ctx, grad):
        return seq_to_heads(grad.contiguous(), ctx.group, ctx.heads), None, None


def hybrid_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    groups: HybridGroups,
    layout: str = "contiguous",
    causal: bool = False,
    scale: float | None = None,
    segment_ids: np.ndarray | None = None,
    block_backend: str = "auto",
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> torch.Tensor:
    """USP attention of this rank's tokens; differentiable (the backward runs the inverse
    all-to-alls around the backward ring).

    ``q``: ``(..., Hq, c, d)``, ``k``/``v``: ``(..., Hkv, c, d)``: the tokens at
    ``groups.grid.positions(layout, P c)[rank]``. ``U = groups.grid.ulysses`` either deals
    whole kv heads (at most ``Hkv``, dividing it beside a ring) or replicates them (a multiple
    of ``Hkv`` dividing ``Hq``: each head group gets one replica). Returns this rank's output
    ``(..., Hq, c, d)`` in ``q.dtype``. ``segment_ids`` ``(P c,)``: packed documents of the
    whole sequence.
    """
    grid = groups.grid
    hq, hkv = q.shape[-3], k.shape[-3]
    check_ulysses_degree(grid.ulysses * grid.ring, hkv, grid.ulysses, heads=hq)
    split = head_groups(hq, hkv, grid.ulysses)
    q_heads, kv_heads = [h for h, _ in split], [h for _, h in split]
    replicas = kv_replicas(hkv, grid.ulysses)
    if replicas > 1:  # head group u takes replica u of kv head u // replicas
        k, v = (x.repeat_interleave(replicas, dim=-3) for x in (k, v))
        kv_heads = [slice(u, u + 1) for u in range(grid.ulysses)]
    qh = SeqToHeads.apply(q, groups.ulysses_group, q_heads)
    kh = SeqToHeads.apply(k, groups.ulysses_group, kv_heads)
    vh = SeqToHeads.apply(v, groups.ulysses_group, kv_heads)
    out = ring_attention(
        qh,
        kh,
        vh,
        layout=layout,
        causal=causal,
        scale=scale,
        group=groups.ring_group,
        block_backend=block_backend,
        timeout_s=timeout_s,
        segment_ids=segment_ids,
    )
    return HeadsToSeq.apply(out, groups.ulysses_group, q_heads)


# ------------------------------------------------------------------------------------------
# Runs on random inputs (as kernels.distributed.launch.run_ring)
# ------------------------------------------------------------------------------------------


def run_hybrid(
    rank: int, hosts: int, config: RunConfig, ulysses_degree: int, placement: str = "ulysses-inner"
) -> dict:
    """One rank's part of ``config`` as ``U x R`` USP: forward (and backward) ``repeats``
    times after ``warmup``; returns this rank's ``out``/``dq``/``dk``/``dv`` (numpy, its
    tokens ``positions``) and the forward/backward seconds of each repeat."""
    groups = hybrid_groups(ulysses_degree, placement)
    device = rank_device()
    pos = groups.grid.positions(config.layout, config.seq_len, config.segments())[rank]
    index = torch.as_tensor(pos, device=device)
    q, k, v, dout = (x.index_select(-2, index).contiguous() for x in config.inputs(device))
    scale = 1.0 / math.sqrt(config.head_dim)
    segments = check_segment_ids(config.segments(), config.seq_len)
    timing = TimedRepeats(config.warmup, config.repeats, device=device)
    for _ in timing:
        qr, kr, vr = (x.detach().clone().requires_grad_(config.backward) for x in (q, k, v))
        with timing.forward():
            out = hybrid_attention(
                qr,
                kr,
                vr,
                groups=groups,
                layout=config.layout,
                causal=config.causal,
                scale=scale,
                segment_ids=segments,
                block_backend=config.block_backend,
                timeout_s=config.timeout_s,
            )
        if config.backward:
            with timing.backward():
                out.backward(dout)
    result = {
        "rank": rank,
        "positions": pos,
        "forward_s": timing.forward_s,
        "backward_s": timing.backward_s,
    }
    if config.return_tensors:
        result["out"] = out.detach().cpu().double().numpy()
        if config.backward:
            for name, x in (("dq", qr), ("dk", kr), ("dv", vr)):
                result[name] = x.grad.cpu().double().numpy()
    return result


def run_hybrid_configs(rank: int, hosts: int, runs: Sequence[tuple]) -> list[dict | str]:
    """Several ``(config, ulysses_degree, placement)`` runs in one process group; a
    ``ValueError`` comes back as its message (every rank raises it alike)."""
    results = []
    for config, ulysses_degree, placement in runs:
        try:
            results.append(run_hybrid(rank, hosts, config, ulysses_degree, placement))
        except ValueError as err:
            results.append(f"ValueError: {err}")
    return results


# ------------------------------------------------------------------------------------------
# Measured vs predicted
# ------------------------------------------------------------------------------------------


def predict_hybrid(
    calibration,
    *,
    hosts: int,
    ulysses_degree: int,
    seq_len: int,
    heads: int,
    kv_heads: int | None,
    head_dim: int,
    layout: str,
    causal: bool,
) -> dict:
    """``ringsim.timer``'s forward time for this run on ``calibration``'s profile: the ring's
    blocks are ``N / R`` tokens of ``H / U`` heads (the rate is taken at that block), the
    all-to-alls on one node with an ideal switch at the calibrated link."""
    from kernels.blocks.torch_block import TILE
    from ringsim.timer import RingConfig
    from ringsim.timer.strategies import simulate_strategy

    ring = hosts // ulysses_degree
    hw = calibration.hardware(
        block_tokens=seq_len // ring, heads=max(1, heads // ulysses_degree), head_dim=head_dim
    )
    config = RingConfig(
        hosts=hosts,
        seq_len=seq_len,
        hardware=hw,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        dtype=calibration.dtype,
        layout=layout,
        causal=causal,
        pass_="forward",
        tile=TILE if calibration.backend == "gloo" else 64,
    )
    return simulate_strategy(config, "hybrid", ulysses_degree=ulysses_degree).summary()


def measure_hybrid(
    calibration,
    *,
    hosts: int = 4,
    ulysses_degree: int = 2,
    seq_len: int = 1024,
    heads: int = 4,
    kv_heads: int | None = None,
    head_dim: int = 32,
    layout: str = "contiguous",
    causal: bool = False,
    repeats: int = 5,
    timeout_s: float = 60.0,
) -> dict:
    """Run the real hybrid forward on ``hosts`` local gloo ranks and the timer on a saved
    ``kernels.calibration.profile.Calibration``; ``measured_time_s`` is the median over repeats of
    the slowest rank's forward, ``ratio = measured / predicted``. No pairing, no fit to this run:
    a given calibration, as ``kernels.calibration.measure.measure(calibration=...)`` does for the
    ring."""
    config = RunConfig(
        seq_len,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        layout=layout,
        causal=causal,
        backward=False,
        repeats=repeats,
        warmup=1,
        timeout_s=timeout_s,
        return_tensors=False,
    )
    per_rank = launch(
        run_hybrid, hosts, args=(config, ulysses_degree), timeout_s=timeout_s, threads=1
    )
    passes = [r["forward_s"] for r in per_rank]
    measured = median_pass(passes)
    shape = dict(
        hosts=hosts,
        ulysses_degree=ulysses_degree,
        seq_len=seq_len,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        layout=layout,
        causal=causal,
    )
    predicted = predict_hybrid(calibration, **shape)
    total = predicted["total_time_s"]
    return {
        **shape,
        "ring_degree": hosts // ulysses_degree,
        "cores": len(os.sched_getaffinity(0)),
        "measured_time_s": measured,
        "measured_times_s": slowest_per_pass(passes),
        "predicted_time_s": total,
        "predicted_compute_s": predicted["compute_time_s"],
        "predicted_exposed_comm_s": predicted["exposed_comm_s"],
        "ratio": measured / total if total > 0 else math.inf,
        "calibration": f"{calibration.machine} {calibration.when}",
    }
