"""Attention work turned into seconds, the same way for every strategy.

A strategy says *what* each host computes as a plan: the blocks of some ring steps
(``BlockSteps``: the all-gather's own block and the rest), or one call over a whole sequence
(``FullSequence``: Ulysses' heads). ``HostClock.attention`` turns a plan into ``(P,)``
seconds: under the ``ideal`` family, the plan's FLOPs at the attention rate (the paper's
model); under a real family, each kernel call the plan makes (``plan.seconds(config,
steps)``, with the run's ``StepModel``: the layout's call per block), timed by ``CallTimer``,
this run's one door to ``ringsim.timer.machine.kernel_model.call_seconds``; the
ring's own steps go through the same door with their merges (``StepModel.seconds``). So
``--implementation`` means the same thing for the ring, Ulysses and all-gather, and no
strategy divides FLOPs by a peak rate itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

import numpy as np

from ringsim.grid import head_groups
from ringsim.layouts import KernelCall, get_layout, run_window_call
from ringsim.schedule import Pass, Schedule
from ringsim.timer.cost import AttentionShape
from ringsim.timer.machine.kernel_model import HBM_FRACTION, call_seconds, visible_fraction


class CallTimer:
    """Seconds of one attention call of this run (its family, hardware, tile, dtype, head dim,
    batch and attention rate), cached by the call's shape: a run makes few distinct calls."""

    def __init__(self, config):
        self.config = config
        family, kernel = config.family, config.kernel
        self.tile = None  # the family's own tile for each pass (``Launch``), unless set
        if kernel.tile is not None or kernel.tile_n is not None:
            M = kernel.tile if kernel.tile is not None else family.tile[0]
            N = kernel.tile_n if kernel.tile_n is not None else (kernel.tile or family.tile[1])
            self.tile = (M, N)
        self.lone_cta_speed = kernel.end("lone_cta_speed")
        self.cache: dict[tuple, float] = {}

    def seconds(
        self,
        pass_: str,
        q_tokens: int,
        k_tokens: int,
        mask: str,
        visible: float | None = None,
        *,
        shape: AttentionShape | None = None,
        band: tuple[int, int] | None = None,
    ) -> float:
        """One call of ``q_tokens`` queries on ``k_tokens`` keys under ``mask`` (``visible``: the
        fraction computed, for ``"documents"``; ``band``: a ``"window"`` call's), of ``shape``
        (default the run's; a Ulysses host's head group is its own)."""
        cfg = self.config
        shape = cfg.shape if shape is None else shape
        key = (pass_, q_tokens, k_tokens, mask, visible, shape, band)
        if key not in self.cache:
            self.cache[key] = call_seconds(
                cfg.family,
                cfg.machine.hardware,
                shape,
                q_tokens=q_tokens,
                k_tokens=k_tokens,
                pass_=pass_,
                mask=mask,
                tile=self.tile,
                visible=visible if mask == "documents" else None,
                peak=cfg.attention_rate,
                lone_cta_speed=self.lone_cta_speed,
                band=band,
            )
        return self.cache[key]


@dataclass(frozen=True)
class BlockSteps:
    """The blocks a ring schedule gives each host at ``steps``, computed one kernel call per
    block (the call its layout makes: ``ringsim.timer.engine.ring_steps.StepModel.call``),
    without the merges between them."""

    schedule: Schedule
    steps: Iterable[int]

    def flops(self, config) -> np.ndarray:
        c = self.schedule.block_tokens
        block = config.shape.flops(c, c, pass_=self.schedule.pass_)
        work = sum((self.schedule.work_at(s) for s in self.steps), np.zeros(config.run.hosts))
        return block * work

    def seconds(self, config, steps) -> np.ndarray:
        total = np.zeros(config.run.hosts)
        for s in self.steps:
            total += steps.attention_seconds(self.schedule, s)
        return total


def ulysses_shapes(shape: AttentionShape, hosts: int) -> list[AttentionShape]:
    """Each Ulysses host's share of the layer after the all-to-all: its head group
    (``ringsim.grid.head_groups``: whole GQA groups, as the exact executor deals them)."""
    return [
        replace(shape, heads=q.stop - q.start, kv_heads=kv.stop - kv.start)
        for q, kv in head_groups(shape.heads, shape.kv_heads, hosts)
    ]


@dataclass(frozen=True)
class FullSequence:
    """Every host attends all ``seq_len`` tokens of its own head group (Ulysses after its
    all-to-all, ``ulysses_shapes``): one ``seq_len x seq_len`` call per host. ``visible`` is
    the fraction of pairs the mask leaves (the ideal model's count: the contiguous schedule's
    mean block work); ``sliding_window``: the call's window (a band call: the kernel visits
    only the tiles it reaches)."""

    seq_len: int
    causal: bool
    visible: float
    pass_: str
    sliding_window: int | None = None

    def flops(self, config) -> np.ndarray:
        N = self.seq_len
        return np.array(
            [
                shape.flops(N, N, work=self.visible, pass_=self.pass_)
                for shape in ulysses_shapes(config.shape, config.run.hosts)
            ]
        )

    def seconds(self, config, steps) -> np.ndarray:
        calls, N = steps.calls, self.seq_len
        if self.sliding_window is None:
            call = KernelCall(N, N, "causal-diagonal" if self.causal else "full")
        else:
            call = run_window_call(0, N, 0, N, 1, self.sliding_window, self.causal)
        q, k, mask, _, _, band = call
        return np.array(
            [
                calls.seconds(self.pass_, q, k, mask, shape=shape, band=band)
                for shape in ulysses_shapes(config.shape, config.run.hosts)
            ]
        )


@dataclass(frozen=True)
class GatheredCalls:
    """Every host attends its queries to all the keys, gathered first: all-gather context
    parallelism as TransformerEngine's ``AttnFuncWithCPAndKVAllGather`` runs it (Llama 3,
    arXiv 2407.21783 Sec. 3.3.2). Causal: one call per run of the host's positions against
    the keys up to the run's end (``Layout.gathered_calls``: zigzag's two chunks), or, for a
    layout without such runs (striped, packed documents), the ring's per-block calls; without
    a mask one full ``c x N`` call. Around the calls, TE copies the gathered k, v into sequence
    order (``index_select``) and each call's key range once more (``.contiguous()``); backward
    also zeroes full-length ``dk, dv`` and adds each call's into them: bytes over HBM at the
    family's elementwise rule (``copy_seconds``)."""

    schedule: Schedule

    def flops(self, config) -> np.ndarray:
        return BlockSteps(self.schedule, range(self.schedule.steps)).flops(config)

    def seconds(self, config, steps) -> np.ndarray:
        schedule, P = self.schedule, self.schedule.hosts
        c, N = schedule.block_tokens, schedule.seq_len
        layout = get_layout(schedule.layout)
        pass_ = schedule.pass_
        total = np.zeros(P)
        per_block = None
        window = schedule.sliding_window
        for host in range(P):
            if schedule.segment_ids is not None:
                shapes = None
            elif window is not None:
                shapes = layout.gathered_window_calls(P, c, host, window, schedule.causal)
            elif not schedule.causal:
                shapes = (KernelCall(c, N, "full"),)
            else:
                shapes = layout.gathered_calls(P, c, host)
            if shapes is None:  # the ring's calls, one per block
                if per_block is None:
                    per_block = sum(steps.attention_seconds(schedule, s) for s in range(P))
                total[host] = per_block[host]
                keys, ops = N, P
            else:
                total[host] = sum(steps.call_seconds(pass_, call) for call in shapes)
                keys, ops = sum(call.k_tokens for call in shapes), len(shapes)
            total[host] += copy_seconds(config, N, keys, ops, backward=pass_ == Pass.BACKWARD)
        return total


@dataclass(frozen=True)
class DocumentCalls:
    """Each host's variable-length call over packed documents (Llama 3's all-gather per
    document, ``ringsim.timer.strategies.llama3``): ``calls[h]`` one ``KernelCall`` per
    document. One launch runs every document's thread blocks in one grid, so the call pays
    the family's fixed cost once and each document's tiles as its own call would."""

    calls: tuple[tuple[KernelCall, ...], ...]
    pass_: str

    def flops(self, config) -> np.ndarray:
        shape = config.shape
        return np.array(
            [
                sum(
                    shape.flops(q, k, work=visible_fraction(q, k, mask, band), pass_=self.pass_)
                    for q, k, mask, _, _, band in host
                )
                for host in self.calls
            ]
        )

    def seconds(self, config, steps) -> np.ndarray:
        fixed = config.family.call_overhead_s
        return np.array(
            [
                fixed + sum(steps.call_seconds(self.pass_, call) - fixed for call in host)
                if host
                else 0.0
                for host in self.calls
            ]
        )


def copy_seconds(config, gathered: int, keys: int, calls: int, *, backward: bool) -> float:
    """Seconds of the copies around an all-gather's calls on one host (``GatheredCalls``):
    k and v of ``gathered`` tokens into sequence order and of ``keys`` tokens into each of
    ``calls`` calls' inputs (read + write), plus per call a query chunk and its output; backward
    also zeroes ``gathered`` tokens of ``dk, dv`` and adds ``keys`` tokens into them."""
    kv_token = config.shape.kv_bytes(1)  # k and v of one token
    nbytes = 2 * kv_token * (gathered + keys)
    ops = 2 + 3 * calls
    if backward:
        nbytes += kv_token * gathered + 3 * kv_token * keys
        ops += 2 + 2 * calls
    return elementwise_seconds(config, nbytes, ops)


def elementwise_seconds(config, nbytes: float, ops: int) -> float:
    """Seconds of ``ops`` elementwise kernels (copies, casts, adds) moving ``nbytes`` over
    one host's HBM, at the family's rule (``ring_steps``: the achieved HBM fraction, a fixed
    cost per kernel); free for a family whose ring merges for free (ideal, the CPU torch)."""
    family, hbm = config.family, config.machine.hardware.memory_bandwidth
    if family.merge == "none":
        return 0.0
    streamed = nbytes / (hbm * HBM_FRACTION) if hbm > 0 else 0.0
    return streamed + ops * family.elementwise_overhead_s
