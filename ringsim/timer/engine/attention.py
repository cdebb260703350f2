"""Attention work turned into seconds, the same way for every strategy.

A strategy says *what* each host computes as a plan: the blocks of some ring steps
(``BlockSteps``: the all-gather's own block and the rest), or one call over a whole sequence
(``FullSequence``: Ulysses' heads). ``HostClock.attention`` turns a plan into ``(P,)``
seconds: under the ``ideal`` family, the plan's FLOPs at the attention rate (the paper's
model); under a real family, each kernel call the plan makes (``plan.seconds(config,
steps)``, with the run's ``StepModel``: the layout's call per block), timed by ``CallTimer``,
this run's one door to ``ringsim.timer.machine.kernel_model.attention_call_seconds``; the
ring's own steps go through the same door with their merges (``StepModel.seconds``). So
``--implementation`` means the same thing for the ring, Ulysses and all-gather, and no
strategy divides FLOPs by a peak rate itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from ringsim.grid import head_groups
from ringsim.layouts import KernelCall, get_layout
from ringsim.schedule import Schedule
from ringsim.timer.cost import DTYPE_BYTES, attention_flops
from ringsim.timer.machine.kernel_model import HBM_FRACTION, attention_call_seconds


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
        heads: int | None = None,
        kv_heads: int | None = None,
    ) -> float:
        """One call of ``q_tokens`` queries on ``k_tokens`` keys under ``mask`` (``visible``: the
        fraction computed, for ``"documents"``), on ``heads``/``kv_heads`` (default the
        run's)."""
        cfg = self.config
        heads = cfg.heads if heads is None else heads
        kv_heads = cfg.kv_heads if kv_heads is None else kv_heads
        key = (pass_, q_tokens, k_tokens, mask, visible, heads, kv_heads)
        if key not in self.cache:
            self.cache[key] = attention_call_seconds(
                cfg.family,
                cfg.hardware,
                q_tokens=q_tokens,
                k_tokens=k_tokens,
                heads=heads,
                kv_heads=kv_heads,
                head_dim=cfg.head_dim,
                dtype=cfg.dtype,
                pass_=pass_,
                mask=mask,
                tile=self.tile,
                batch=cfg.batch,
                visible=visible if mask == "documents" else None,
                peak=cfg.attention_rate,
                lone_cta_speed=self.lone_cta_speed,
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
        block = attention_flops(
            c, c, config.heads, config.head_dim, pass_=self.schedule.pass_, batch=config.batch
        )
        return block * sum((self.schedule.work_at(s) for s in self.steps), np.zeros(config.hosts))

    def seconds(self, config, steps) -> np.ndarray:
        total = np.zeros(config.hosts)
        for s in self.steps:
            total += steps.attention_seconds(self.schedule, s)
        return total


def ulysses_heads(heads: int, kv_heads: int, hosts: int) -> list[tuple[int, int]]:
    """``(query heads, kv heads)`` of each Ulysses host after the all-to-all: its head group
    (``ringsim.grid.head_groups``: whole GQA groups, as the exact executor deals them)."""
    return [(q.stop - q.start, kv.stop - kv.start) for q, kv in head_groups(heads, kv_heads, hosts)]


@dataclass(frozen=True)
class FullSequence:
    """Every host attends all ``seq_len`` tokens of its own head group (Ulysses after its
    all-to-all, ``ulysses_heads``): one ``seq_len x seq_len`` call per host. ``visible`` is
    the fraction of pairs the mask leaves (the ideal model's count: the contiguous schedule's
    mean block work)."""

    seq_len: int
    causal: bool
    visible: float
    pass_: str

    def flops(self, config) -> np.ndarray:
        return np.array(
            [
                attention_flops(
                    self.seq_len,
                    self.seq_len,
                    h,
                    config.head_dim,
                    work=self.visible,
                    pass_=self.pass_,
                    batch=config.batch,
                )
                for h, _ in ulysses_heads(config.heads, config.kv_heads, config.hosts)
            ]
        )

    def seconds(self, config, steps) -> np.ndarray:
        calls, N = steps.calls, self.seq_len
        mask = "causal-diagonal" if self.causal else "full"
        return np.array(
            [
                calls.seconds(self.pass_, N, N, mask, heads=h, kv_heads=kv)
                for h, kv in ulysses_heads(config.heads, config.kv_heads, config.hosts)
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
        pass_, calls = schedule.pass_, steps.calls
        total = np.zeros(P)
        per_block = None
        for host in range(P):
            if not schedule.causal:
                shapes = (KernelCall(c, N, "full"),)
            elif schedule.segment_ids is None:
                shapes = layout.gathered_calls(P, c, host)
            else:
                shapes = None
            if shapes is None:  # the ring's calls, one per block
                if per_block is None:
                    per_block = sum(steps.attention_seconds(schedule, s) for s in range(P))
                total[host] = per_block[host]
                keys, ops = N, P
            else:
                total[host] = sum(calls.seconds(pass_, q, k, mask) for q, k, mask, *_ in shapes)
                keys, ops = sum(call.k_tokens for call in shapes), len(shapes)
            total[host] += copy_seconds(config, N, keys, ops, backward=pass_ == "backward")
        return total


def copy_seconds(config, gathered: int, keys: int, calls: int, *, backward: bool) -> float:
    """Seconds of the copies around an all-gather's calls on one host (``GatheredCalls``):
    k and v of ``gathered`` tokens into sequence order and of ``keys`` tokens into each of
    ``calls`` calls' inputs (read + write), plus per call a query chunk and its output; backward
    also zeroes ``gathered`` tokens of ``dk, dv`` and adds ``keys`` tokens into them."""
    e = DTYPE_BYTES[config.dtype]
    kv_token = 2 * config.kv_heads * config.head_dim * e * config.batch  # k and v, one token
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
    family, hbm = config.family, config.hardware.memory_bandwidth
    if family.merge == "none":
        return 0.0
    streamed = nbytes / (hbm * HBM_FRACTION) if hbm > 0 else 0.0
    return streamed + ops * family.elementwise_overhead_s
