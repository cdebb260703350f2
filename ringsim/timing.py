"""The event timer: runs a ring ``Schedule`` against a ``Hardware`` and returns a ``Timeline``.

The timer never re-derives the ring: it reads ``kv_owner``/``work_at`` (what each host computes
at each step), ``payload`` (what it sends after the step) and ``send_to``/``recv_from`` from the
schedule, and turns them into seconds with the cost model (``ringsim.cost``). A ring pass over
``P`` hosts has ``P`` steps; the block host ``h`` computes at step ``s`` is the one it passes to
``h + 1``, which computes it at step ``s + 1``.

Semantics (one host = one compute engine + one outgoing link to ``h + 1``; every rule below is
a ``max`` of the times at which its conditions become true):

* **compute** step ``s`` on host ``h`` starts when ``h`` has finished step ``s - 1`` and the
  key/value block of step ``s`` has arrived (step 0: its own block, at the phase start). It
  lasts ``work_at(s)[h]`` (the visible fraction of the block) times a full block's FLOPs over
  the host's FLOP rate. Three kernel terms of the ``Hardware`` refine it (all neutral by
  default): a block that needs a mask (``kind_at(s)[h]`` partial) runs at ``masked_speed``
  times the rate; every block computed (not a skipped one) adds ``block_overhead_s``, the
  kernel's fixed cost per call; and hosts sharing one machine run ``solo_speed`` times faster
  when the others are idle: with ``n`` of the ``P`` hosts computing at step ``s``, a
  computing host's ``share = 1 + (solo_speed - 1) (P - n) / (P - 1)`` (the machine's spare
  capacity grows linearly as hosts fall idle; a step-synchronous approximation: hosts in
  different steps at the same moment are not seen). With ``m = masked_speed`` for a partial
  block and 1 otherwise::

      t = (block_overhead_s + work * full_flops / (rate * m)) / (speed * share)
      t = 0 for a skipped block

  ``HostClock.block`` is that one formula; both engines read it through ``_Costs.ring_rows``.
* **pass start**: a ring pass starts on a host ``hardware.pass_overhead_s / speed`` after the
  host is ready for it (building its schedule and buffers; 0 by default).
* **link** ``h -> h + 1`` carries one message at a time, in step order, each for
  ``latency + bytes / bandwidth``.
* **overlap** (double buffering). The step-``s`` block leaves ``h`` as soon as it is there,
  while ``h`` computes on it. The receiver takes it into its spare buffer, which is free once
  the receiver has finished computing step ``s - 1`` and has sent that block on, so at most one
  block is in flight per link. ``hardware.overlap_efficiency`` ``f`` says how well the two
  really overlap (1 by default: perfectly). A host's compute of step ``s`` and the message it
  sends during it (the block, or in a backward pass its ``k, v``) each last
  ``(1 - f) min(compute, transfer)`` longer, so that a step that runs both costs
  ``max + (1 - f) min``: ``f = 0`` is ``compute + transfer``, a negative ``f`` more (on shared
  CPU cores the transport's threads and the compute slow each other). ``HostClock.overlapped``
  is that rule; a step that sends nothing, or computes nothing (a skipped block), is not
  stretched. It is a duration rule, fixed before the step runs (both engines read the same
  floats): it assumes the message does travel during the compute, as it does in a steady ring.
* **no overlap**: compute and communication alternate. After computing step ``s`` both
  neighbours meet in a blocking send/receive (it starts when sender and receiver have finished
  step ``s``), and nobody computes step ``s + 1`` before its own send is done and its block
  has arrived. In a backward pass that one message carries ``k, v, dk, dv`` (the last one only
  ``dk, dv``).
* **backward** (overlap): the block carries ``k, v`` (read-only) and the accumulators ``dk, dv``
  (updated by the step), as two messages. ``k, v`` leave early, like a forward block. The
  receiver computes its contribution into a fresh buffer without waiting for the incoming
  ``dk, dv`` and adds them just before it sends the sum on (the accumulator trails the block by
  one step, as real ring backward kernels do), so it only needs ``k, v`` to start computing.
  ``dk, dv`` of step ``s`` leave after the compute of step ``s``, once the incoming sum has
  arrived and the receiver has begun passing on its previous sum (its accumulator is free).
  Per link and step: ``k, v`` then ``dk, dv``. The last step sends only ``dk, dv``, home to
  the block's owner: that one hop can never hide behind compute, and the owner waits for it
  before its next phase.

Passes: ``forward`` and ``backward`` are one ring pass each. ``train-step`` is a transformer
block's step per host: q/k/v projections, the forward ring, output projection and MLP, their
backward, the backward ring, the projections' backward (local phases take their FLOPs over the
host's rate; a phase starts on a host when that host has finished the previous one). ``decode``
is no ring at all: each host attends the one new token to its cache shard (the larger of the
FLOP time and the time to stream the shard from memory), then the partials are merged in a
tree: in each of ``ceil(log2 P)`` rounds a host receives at most one partial and merges it.

Per-host ``speed`` factors divide compute times (a straggler has ``speed < 1``); ``jitter``
multiplies every compute and every transfer by its own ``1 + jitter * u``, ``u ~ U[0, 1)``
from a generator seeded with ``seed`` (noise only ever slows an event down). ``HostClock``
holds both rules; the peers of ``ringsim.strategies`` use it too.

The ``Timeline`` has one row per ring step (or local phase, or decode round) and one column per
host, in seconds; NaN where a host does nothing. In a ring pass ``recv[s, h]`` is
``send[s, h - 1]``: the same transfer seen from the other end. For a backward pass with
overlap the ``send``/``recv`` arrays hold the ``dk, dv`` messages (the payload sent after the
step), and the meta the early ``k, v`` ones: ``kv_send_start``, ``kv_send_end``,
``kv_recv_start``, ``kv_recv_end`` (read them with ``kv_messages``), and ``grad_rows``, the
rows whose ``send``/``recv`` carry ``dk, dv`` (``grad_rows()``; in a training step the forward
ring's rows carry blocks).

Two engines execute the same rules: ``vectorized`` loops over steps and does NumPy vector ops
over hosts (thousands of hosts in a second); ``heap`` is a plain discrete-event loop with a
priority queue, one event at a time, checking the rules operationally. They agree exactly; the
heap engine is the oracle the tests hold the fast one to.
"""

from __future__ import annotations

import heapq
import math
import numbers
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from ringsim._checks import check_positive_int, check_segment_ids
from ringsim.cost import (
    attention_flops,
    ffn_flops,
    grad_block_bytes,
    kv_block_bytes,
    overlap_threshold,
    partial_bytes,
    projection_flops,
)
from ringsim.hardware import Hardware, check_dtype
from ringsim.layouts import check_layout, check_seq_len
from ringsim.memory import attention_working_set_bytes
from ringsim.schedule import BlockKind, Schedule, build_schedule
from ringsim.timeline import Timeline

PASSES = ("forward", "backward", "train-step", "decode")
ENGINES = ("vectorized", "heap")

_LENGTH = re.compile(r"^\s*(\d+)\s*([kKmMgG]?)\s*$")
_SUFFIX = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30}


def parse_length(text: str) -> int:
    """``"64K"`` -> 65536, ``"16M"`` -> 16777216, ``"1000"`` -> 1000 (suffixes are powers of 2)."""
    match = _LENGTH.match(str(text))
    if not match:
        raise ValueError(
            f"length must be a positive integer with an optional K, M or G suffix, got {text!r}"
        )
    value = int(match.group(1)) * _SUFFIX[match.group(2).lower()]
    if value <= 0:
        raise ValueError(f"length must be positive, got {text!r}")
    return value


def _check_real(name: str, value: object, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    value = float(value)
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise ValueError(
            f"{name} must be a finite {'positive' if positive else 'non-negative'} "
            f"number, got {value!r}"
        )
    return value


@dataclass(frozen=True)
class RingConfig:
    """One simulated run. ``kv_heads=None`` means ``heads`` (no GQA); ``speed`` holds one factor
    per host; ``d_model`` and ``ffn`` (defaults ``heads * head_dim`` and ``4 * d_model``) size the
    projections and MLP of a ``train-step``; ``grad_dtype`` is the dtype of ``dk, dv`` on the
    wire (default ``dtype``); ``segment_ids`` ``(seq_len,)`` make the work data dependent."""

    hosts: int
    seq_len: int
    hardware: Hardware
    heads: int = 32
    kv_heads: int | None = None
    head_dim: int = 128
    dtype: str = "bf16"
    batch: int = 1
    layout: str = "contiguous"
    causal: bool = False
    overlap: bool = True
    pass_: str = "forward"
    tile: int | None = None
    speed: tuple[float, ...] | None = None
    jitter: float = 0.0
    seed: int = 0
    grad_dtype: str | None = None
    d_model: int | None = None
    ffn: int | None = None
    segment_ids: np.ndarray | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        put = lambda name, value: object.__setattr__(self, name, value)
        hosts = check_positive_int("hosts", self.hosts)
        if not isinstance(self.hardware, Hardware):
            raise ValueError(f"hardware must be a Hardware, got {self.hardware!r}")
        if self.pass_ not in PASSES:
            raise ValueError(f"pass must be one of {', '.join(PASSES)}, got {self.pass_!r}")
        put("layout", check_layout(self.layout))
        if self.pass_ == "decode":
            check_positive_int("seq_len", self.seq_len)
            if self.seq_len % hosts:
                raise ValueError(
                    f"seq_len must be divisible by hosts = {hosts} (each host holds an equal "
                    f"cache shard), got seq_len={self.seq_len}"
                )
        else:
            check_seq_len(self.seq_len, hosts, self.layout)
        for name in ("heads", "head_dim", "batch"):
            check_positive_int(name, getattr(self, name))
        kv_heads = self.heads if self.kv_heads is None else self.kv_heads
        check_positive_int("kv_heads", kv_heads)
        if self.heads % kv_heads:
            raise ValueError(
                f"heads must be a multiple of kv_heads, got heads={self.heads}, kv_heads={kv_heads}"
            )
        put("kv_heads", kv_heads)
        check_dtype(self.dtype)
        self.hardware.flops_for(self.dtype)  # refuses a dtype the hardware has no rate for
        if self.grad_dtype is not None:
            check_dtype(self.grad_dtype)
        if self.tile is not None:
            check_positive_int("tile", self.tile)
        if self.speed is not None:
            speed = tuple(_check_real("speed", s, positive=True) for s in self.speed)
            if len(speed) != hosts:
                raise ValueError(f"speed must have one factor per host ({hosts}), got {len(speed)}")
            put("speed", speed)
        put("jitter", _check_real("jitter", self.jitter))
        if isinstance(self.seed, bool) or not isinstance(self.seed, numbers.Integral):
            raise ValueError(f"seed must be an integer, got {self.seed!r}")
        d_model = self.heads * self.head_dim if self.d_model is None else self.d_model
        put("d_model", check_positive_int("d_model", d_model))
        put("ffn", check_positive_int("ffn", 4 * d_model if self.ffn is None else self.ffn))
        put("segment_ids", check_segment_ids(self.segment_ids, self.seq_len))

    @property
    def block_tokens(self) -> int:
        return self.seq_len // self.hosts

    @property
    def flops_rate(self) -> float:
        return self.hardware.flops_for(self.dtype)

    def schedule(self, pass_: str | None = None, layout: str | None = None) -> Schedule:
        """The ring schedule of this run; ``pass_``/``layout`` ask for another pass or layout of
        the same sequence (a ``train-step`` runs a ``"forward"`` and a ``"backward"`` ring)."""
        return build_schedule(
            self.hosts,
            self.layout if layout is None else layout,
            self.causal,
            self.pass_ if pass_ is None else pass_,
            seq_len=self.seq_len,
            tile=self.tile,
            segment_ids=self.segment_ids,
        )


# --------------------------------------------------------------------------------------------
# Durations: one clock per run, shared by both engines (and the peers), so they see the very
# same floats.
# --------------------------------------------------------------------------------------------
class HostClock:
    """How long things take on each of a run's ``P`` hosts: the timer's speed and jitter rules.

    * compute: host ``h`` runs at ``flops_rate * speed[h]`` FLOP/s (``speed`` defaults to 1);
    * transfer: ``messages * link_latency + bytes / link_bandwidth`` on the host's link;
    * jitter: every duration is multiplied by its own ``1 + jitter * u``, ``u ~ U[0, 1)``, from
      one generator seeded with ``config.seed``. Each call that returns durations draws ``P``
      numbers (none without jitter, or for an empty transfer), so two runs that make the same
      calls in the same order (the heap and the vectorised engine) get the very same floats.
    """

    def __init__(self, config: RingConfig):
        self.hosts = config.hosts
        self.hardware = config.hardware
        self.amount = config.jitter
        self.speed = np.ones(self.hosts) if config.speed is None else np.asarray(config.speed)
        self.seconds_per_flop = 1.0 / (config.flops_rate * self.speed)  # (P,)
        self.rng = np.random.default_rng(config.seed)

    def jitter(self, seconds: np.ndarray) -> np.ndarray:
        """``(P,)`` durations times a fresh ``1 + jitter * u`` each (unchanged without jitter)."""
        if self.amount == 0:
            return seconds
        return seconds * (1.0 + self.amount * self.rng.random(self.hosts))

    def compute(self, flops: float | np.ndarray) -> np.ndarray:
        """``(P,)`` seconds for each host to compute ``flops`` (a scalar or ``(P,)``) FLOPs."""
        return self.jitter(flops * self.seconds_per_flop)

    def block(self, full_seconds: np.ndarray, work: np.ndarray, kind: np.ndarray) -> np.ndarray:
        """``(P,)`` seconds for each host to compute its block of one ring step (the module
        docstring's formula): ``work`` ``(P,)`` of a full block that takes ``full_seconds``
        ``(P,)`` (its FLOPs over the host's rate, ``speed`` included), ``kind`` ``(P,)`` the
        ``BlockKind`` of each host's block. With neutral kernel terms this is exactly
        ``full_seconds * work``."""
        hw = self.hardware
        seconds = full_seconds * work
        if hw.masked_speed != 1.0:
            seconds = np.where(kind == BlockKind.PARTIAL, seconds / hw.masked_speed, seconds)
        busy = kind != BlockKind.SKIP
        if hw.block_overhead_s:
            seconds = seconds + np.where(busy, hw.block_overhead_s, 0.0) / self.speed
        if hw.solo_speed != 1.0 and self.hosts > 1:
            idle = self.hosts - int(busy.sum())
            seconds = seconds / (1.0 + (hw.solo_speed - 1.0) * idle / (self.hosts - 1))
        return self.jitter(seconds)

    def overlapped(
        self, compute: np.ndarray, transfer: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(compute, transfer)`` ``(P,)`` seconds of a step's compute and the message each
        host sends while it computes, both stretched by ``(1 - f) min(compute, transfer)``
        (``f = hardware.overlap_efficiency``; unchanged, the very same arrays, for ``f = 1``)."""
        f = self.hardware.overlap_efficiency
        if f == 1.0:
            return compute, transfer
        extra = (1.0 - f) * np.minimum(compute, transfer)
        return compute + extra, transfer + extra

    def transfer(self, nbytes: float, messages: int = 1) -> np.ndarray:
        """``(P,)`` seconds for each host to send ``messages`` messages of ``nbytes`` in all."""
        if nbytes == 0 and messages == 0:
            return np.zeros(self.hosts)
        seconds = messages * self.hardware.link_latency + nbytes / self.hardware.link_bandwidth
        return self.jitter(np.full(self.hosts, seconds))


class _Costs:
    """Per-step durations of a run, drawn in a fixed order (phase by phase, step by step), and
    the FLOPs spent on them."""

    def __init__(self, config: RingConfig):
        self.config = config
        self.clock = HostClock(config)
        self.flops_total = 0.0
        shape = (config.block_tokens, config.kv_heads, config.head_dim, config.dtype)
        self.kv_bytes = kv_block_bytes(*shape, batch=config.batch)
        self.grad_bytes = grad_block_bytes(*shape, batch=config.batch, grad_dtype=config.grad_dtype)

    def local(self, flops: float) -> np.ndarray:
        """``(P,)`` durations of a local computation of ``flops`` FLOPs on every host."""
        self.flops_total += flops * self.config.hosts
        return self.clock.compute(flops)

    def ring_rows(self, schedule: Schedule) -> Callable[[int], tuple]:
        """``row(s) -> (compute, kv message, main message)``, ``(P,)`` seconds each, for one ring
        pass. The main message is the block itself (forward) or ``dk, dv`` (backward; without
        overlap one blocking message carries ``k, v, dk, dv``, and the last only ``dk, dv``)."""
        cfg, clock = self.config, self.clock
        c = cfg.block_tokens
        full = attention_flops(c, c, cfg.heads, cfg.head_dim, pass_=schedule.pass_, batch=cfg.batch)
        full_time = full * clock.seconds_per_flop
        backward = schedule.pass_ == "backward"
        last = schedule.steps - 1

        def row(s: int) -> tuple:
            work = schedule.work_at(s)
            self.flops_total += full * float(work.sum())
            if not backward:
                main = self.kv_bytes
            elif cfg.overlap or s == last:
                main = self.grad_bytes
            else:
                main = self.kv_bytes + self.grad_bytes
            # full_time * work rounds like the closed forms (full * work * seconds_per_flop can
            # differ in the last bit)
            compute = clock.block(full_time, work, schedule.kind_at(s))
            kv, msg = clock.transfer(self.kv_bytes), clock.transfer(main)
            if cfg.overlap and schedule.payload(s):  # its message travels while it computes
                if backward:  # the early k, v (the last step sends only dk, dv)
                    if s < last:
                        compute, kv = clock.overlapped(compute, kv)
                else:
                    compute, msg = clock.overlapped(compute, msg)
            return compute, kv, msg

        return row


# --------------------------------------------------------------------------------------------
# Phases: a pass is a list of ring passes and local computations, run one after the other.
# --------------------------------------------------------------------------------------------
@dataclass
class _Phase:
    kind: str  # "ring" | "local" | "decode"
    labels: list[str]
    schedule: Schedule | None = None
    flops: float = 0.0

    @property
    def rows(self) -> int:
        return len(self.labels)


def _ring_phase(schedule: Schedule, prefix: str) -> _Phase:
    return _Phase("ring", [f"{prefix}{s}" for s in range(schedule.steps)], schedule)


def _phases(config: RingConfig) -> list[_Phase]:
    if config.pass_ == "decode":
        rounds = math.ceil(math.log2(config.hosts)) if config.hosts > 1 else 0
        return [_Phase("decode", ["partial"] + [f"merge {r}" for r in range(rounds)])]
    if config.pass_ in ("forward", "backward"):
        return [_ring_phase(config.schedule(), "")]
    # A transformer block's training step, per host on its c tokens:
    #   fwd: q/k/v projections -> ring attention -> output projection + MLP
    #   bwd: MLP + output projection -> ring attention backward -> q/k/v projections
    tokens = config.block_tokens * config.batch
    dims = (config.d_model, config.heads, config.kv_heads, config.head_dim)
    qkv_f, out_f = projection_flops(tokens, *dims)
    qkv_b, out_b = projection_flops(tokens, *dims, pass_="backward")
    mlp_f = ffn_flops(tokens, config.d_model, config.ffn)
    mlp_b = ffn_flops(tokens, config.d_model, config.ffn, pass_="backward")
    return [
        _Phase("local", ["qkv-proj"], flops=qkv_f),
        _ring_phase(config.schedule("forward"), "fwd "),
        _Phase("local", ["o-proj+mlp"], flops=out_f + mlp_f),
        _Phase("local", ["mlp+o-proj bwd"], flops=mlp_b + out_b),
        _ring_phase(config.schedule("backward"), "bwd "),
        _Phase("local", ["qkv-proj bwd"], flops=qkv_b),
    ]


@dataclass
class _Out:
    """One phase's rows of the timeline arrays, ``(S, P)`` each; or, for the vectorised engine,
    the padded buffers ``(S, P + 2)`` behind them (column ``h + 1`` holds host ``h``, column 0
    repeats host ``P - 1`` and column ``P + 1`` host 0, so both neighbours are views)."""

    cs: np.ndarray
    ce: np.ndarray
    ss: np.ndarray
    se: np.ndarray
    ks: np.ndarray | None
    ke: np.ndarray | None

    def inner(self) -> _Out:
        cut = lambda a: None if a is None else a[:, 1:-1]
        return _Out(*(cut(a) for a in (self.cs, self.ce, self.ss, self.se, self.ks, self.ke)))


def _pad(buf: np.ndarray, s: int) -> None:
    buf[s, 0], buf[s, -1] = buf[s, -2], buf[s, 1]


# --------------------------------------------------------------------------------------------
# The vectorised engine: a loop over steps, vector operations over hosts.
# --------------------------------------------------------------------------------------------
def _block_leaves(start, s, arrived, link_free, compute_end, block_sent) -> None:
    """Write into ``start`` when the step-``s`` block leaves each host (overlap): once it is here
    (``arrived``), the link is free, and the receiver has room, i.e. it has computed step
    ``s - 1`` (``compute_end``) and sent that block on (``block_sent``, padded ``(S, P + 2)``)."""
    nxt = slice(2, start.shape[0] + 2)  # the receiver, h + 1, in the padded columns
    np.maximum(arrived, link_free, out=start)
    if s > 0:
        np.maximum(start, compute_end[s - 1, nxt], out=start)
        np.maximum(start, block_sent[s - 1, nxt], out=start)


def _ring_vectorized(schedule, row, overlap, ready, link_free, out: _Out) -> None:
    """The rules of the module docstring as recurrences from step ``s - 1`` to step ``s``,
    written straight into the padded timeline buffers (``out=``: no temporaries)."""
    P, steps = schedule.hosts, schedule.steps
    me, nxt, prv = slice(1, P + 1), slice(2, P + 2), slice(0, P)  # host h, h + 1, h - 1
    backward = schedule.pass_ == "backward"
    early_kv = backward and overlap
    if out.ks is not None and not early_kv:
        out.ks[...] = out.ke[...] = np.nan
    mx = np.maximum
    for s in range(steps):
        compute, kv_time, msg_time = row(s)
        sends = bool(schedule.payload(s))
        cs, ce, ss, se = out.cs[s, me], out.ce[s, me], out.ss[s, me], out.se[s, me]
        if s == 0:
            arrived = ready
            cs[...] = ready
        else:
            arrived = (out.ke if early_kv else out.se)[s - 1, prv]
            mx(out.ce[s - 1, me], arrived, out=cs)
            if not overlap:  # no computing while its own last send is on the wire
                mx(cs, out.se[s - 1, me], out=cs)
        np.add(cs, compute, out=ce)
        _pad(out.ce, s)
        if early_kv:  # k, v leave like a forward block
            if s < steps - 1 and sends:
                ks, ke = out.ks[s, me], out.ke[s, me]
                _block_leaves(ks, s, arrived, link_free, out.ce, out.ke)
                np.add(ks, kv_time, out=ke)
                link_free = ke
            else:
                out.ks[s] = out.ke[s] = np.nan
            _pad(out.ke, s)
        if not sends:
            out.ss[s] = out.se[s] = np.nan
            continue
        if not overlap:  # blocking send/receive once both neighbours finished the step
            mx(ce, out.ce[s, nxt], out=ss)
            mx(ss, link_free, out=ss)
        elif backward:  # dk, dv: after the compute, with the incoming sum added
            mx(ce, ready if s == 0 else out.se[s - 1, prv], out=ss)
            mx(ss, link_free, out=ss)
            if s > 0:  # the receiver has taken in the previous sum
                mx(ss, out.ss[s - 1, nxt], out=ss)
        else:  # forward
            _block_leaves(ss, s, arrived, link_free, out.ce, out.se)
        np.add(ss, msg_time, out=se)
        link_free = se
        _pad(out.ss, s)
        _pad(out.se, s)


# --------------------------------------------------------------------------------------------
# The heap engine: one event at a time, rules checked against the state (the oracle).
# --------------------------------------------------------------------------------------------
class _HeapRing:
    """Discrete-event simulation of one ring pass with a priority queue of end events."""

    def __init__(self, schedule, row, overlap, ready, link_free, out: _Out):
        self.sched, self.overlap, self.out = schedule, overlap, out
        self.P, self.S = schedule.hosts, schedule.steps
        self.backward = schedule.pass_ == "backward"
        self.early_kv = self.backward and overlap
        rows = [row(s) for s in range(self.S)]
        shape = (self.S, self.P)
        self.compute = np.array([np.broadcast_to(r[0], (self.P,)) for r in rows]).reshape(shape)
        self.kv_time = np.array([np.broadcast_to(r[1], (self.P,)) for r in rows]).reshape(shape)
        self.msg_time = np.array([np.broadcast_to(r[2], (self.P,)) for r in rows]).reshape(shape)
        self.ready, self.link_ready = ready, link_free
        # state
        self.started = np.zeros(self.P, bool)  # phase start reached (own block present)
        self.link_open = np.zeros(self.P, bool)
        self.next_step = np.zeros(self.P, int)
        self.computing = np.zeros(self.P, bool)
        self.c_done = np.zeros(shape, bool)
        self.kv_in = np.zeros(shape, bool)  # block of step s present at h
        self.grads_in = np.zeros(shape, bool)  # dk, dv of step s present at h (backward)
        self.done = {"kv": np.zeros(shape, bool), "msg": np.zeros(shape, bool)}
        self.begun = {"kv": np.zeros(shape, bool), "msg": np.zeros(shape, bool)}
        self.pieces = [self._pieces() for _ in range(self.P)]
        self.next_piece = np.zeros(self.P, int)
        self.link_busy = np.zeros(self.P, bool)
        self.queue: list = []
        self.order = 0

    def _pieces(self) -> list[tuple[str, int]]:
        pieces = []
        for s in range(self.S):
            sends = bool(self.sched.payload(s))
            if self.early_kv and sends and s < self.S - 1:
                pieces.append(("kv", s))
            if sends:
                pieces.append(("msg", s))
        return pieces

    def _push(self, time: float, kind: str, h: int, s: int = -1) -> None:
        heapq.heappush(self.queue, (time, self.order, kind, h, s))
        self.order += 1

    def run(self) -> None:
        for h in range(self.P):
            self._push(float(self.ready[h]), "start", h)
            self._push(float(self.link_ready[h]), "link", h)
        while self.queue:
            now, _, kind, h, s = heapq.heappop(self.queue)
            self._apply(kind, h, s)
            self._settle(now, {h - 1, h, h + 1})

    def _apply(self, kind: str, h: int, s: int) -> None:
        receiver = (h + 1) % self.P
        if kind == "start":
            self.started[h] = self.kv_in[0, h] = self.grads_in[0, h] = True
        elif kind == "link":
            self.link_open[h] = True
        elif kind == "compute":
            self.computing[h] = False
            self.c_done[s, h] = True
            self.next_step[h] = s + 1
        else:  # a message piece "kv" or "msg" ends
            self.link_busy[h] = False
            self.done[kind][s, h] = True
            if s + 1 < self.S:
                if kind == "kv" or not self.early_kv:
                    self.kv_in[s + 1, receiver] = True
                if kind == "msg":
                    self.grads_in[s + 1, receiver] = True

    def _settle(self, now: float, hosts: set[int]) -> None:
        pending = [h % self.P for h in hosts]
        while pending:
            h = pending.pop()
            if self._try_compute(now, h) or self._try_send(now, h):
                pending.extend({(h - 1) % self.P, h, (h + 1) % self.P})

    def _try_compute(self, now: float, h: int) -> bool:
        s = self.next_step[h]
        if self.computing[h] or s >= self.S or not self.started[h] or not self.kv_in[s, h]:
            return False
        if not self.overlap and s > 0 and not self.done["msg"][s - 1, h]:
            return False
        self.computing[h] = True
        self.out.cs[s, h] = now
        self.out.ce[s, h] = end = now + self.compute[s, h]
        self._push(end, "compute", h, s)
        return True

    def _ready_to_send(self, kind: str, s: int, h: int) -> bool:
        r = (h + 1) % self.P
        if not self.overlap:
            return self.c_done[s, h] and self.c_done[s, r]
        if kind == "kv" or not self.backward:  # the block itself: held here, room at r
            spare = s == 0 or (self.c_done[s - 1, r] and self.done[kind][s - 1, r])
            return self.kv_in[s, h] and spare
        consumed = s == 0 or self.begun["msg"][s - 1, r]
        return self.c_done[s, h] and self.grads_in[s, h] and consumed

    def _try_send(self, now: float, h: int) -> bool:
        i = self.next_piece[h]
        if self.link_busy[h] or not self.link_open[h] or i >= len(self.pieces[h]):
            return False
        kind, s = self.pieces[h][i]
        if not self._ready_to_send(kind, s, h):
            return False
        self.link_busy[h] = True
        self.begun[kind][s, h] = True
        self.next_piece[h] = i + 1
        duration = (self.kv_time if kind == "kv" else self.msg_time)[s, h]
        start, end = (self.out.ks, self.out.ke) if kind == "kv" else (self.out.ss, self.out.se)
        start[s, h], end[s, h] = now, now + duration
        self._push(end[s, h], kind, h, s)
        return True


def _ring_heap(schedule, row, overlap, ready, link_free, out: _Out) -> None:
    out = out.inner()
    for arr in (out.cs, out.ce, out.ss, out.se, out.ks, out.ke):
        if arr is not None:
            arr[...] = np.nan
    _HeapRing(schedule, row, overlap, ready, link_free, out).run()


_RING_ENGINES = {"vectorized": _ring_vectorized, "heap": _ring_heap}


# --------------------------------------------------------------------------------------------
# Decode: one token against a cache sharded over the hosts, partials merged in a tree.
# --------------------------------------------------------------------------------------------
def _decode_costs(config: RingConfig, tokens: int) -> float:
    """Seconds to attend one query to ``tokens`` cached tokens on one host: the larger of the
    FLOP time and the time to stream the cache from memory (decode is memory bound)."""
    hw = config.hardware
    flops = attention_flops(
        1, tokens, config.heads, config.head_dim, pass_="decode", batch=config.batch
    )
    time = flops / config.flops_rate
    if hw.memory_bandwidth > 0:
        cache = kv_block_bytes(
            tokens, config.kv_heads, config.head_dim, config.dtype, batch=config.batch
        )
        time = max(time, cache / hw.memory_bandwidth)
    return time


def _decode(config: RingConfig, costs: _Costs, ready, out: _Out, recv: tuple) -> None:
    """Row 0: every host attends to its shard. Row ``r + 1``: merge round ``r``; host
    ``k 2^(r+1)`` receives the partial of ``k 2^(r+1) + 2^r`` and merges it into its own (the
    same tree as ``ringsim.decode.tree_merge``). One code path serves both engines: the rounds
    are a handful of independent transfers."""
    P, clock = config.hosts, costs.clock
    # memory bound, so not clock.compute(flops): the speed factor scales the whole scan
    partial = clock.jitter(_decode_costs(config, config.block_tokens) / clock.speed)
    costs.flops_total += P * attention_flops(
        1, config.block_tokens, config.heads, config.head_dim, batch=config.batch
    )
    merge_flops = 5.0 * config.batch * config.heads * (config.head_dim + 2)
    message = partial_bytes(config.heads, config.head_dim, batch=config.batch)
    out.cs[0], out.ce[0] = ready, ready + partial
    out.ss[0] = out.se[0] = recv[0][0] = recv[1][0] = np.nan
    done = out.ce[0].copy()
    for r in range(out.cs.shape[0] - 1):
        step = 2**r
        receivers = np.arange(0, P - step, 2 * step)
        senders = receivers + step
        link = clock.transfer(message)[senders]
        merge = clock.compute(merge_flops)[receivers]
        costs.flops_total += merge_flops * len(receivers)
        row = r + 1
        for arr in (out.cs, out.ce, out.ss, out.se, recv[0], recv[1]):
            arr[row] = np.nan
        out.ss[row, senders] = done[senders]
        out.se[row, senders] = done[senders] + link
        recv[0][row, receivers] = out.ss[row, senders]
        recv[1][row, receivers] = out.se[row, senders]
        out.cs[row, receivers] = np.maximum(done[receivers], out.se[row, senders])
        out.ce[row, receivers] = out.cs[row, receivers] + merge
        done[receivers] = out.ce[row, receivers]


# --------------------------------------------------------------------------------------------
# The driver and the result.
# --------------------------------------------------------------------------------------------
def _local(costs: _Costs, phase: _Phase, ready, out: _Out) -> None:
    out.cs[0] = ready
    out.ce[0] = ready + costs.local(phase.flops)
    out.ss[0] = out.se[0] = np.nan
    if out.ks is not None:
        out.ks[0] = out.ke[0] = np.nan


@dataclass
class SimResult:
    """A simulated run: its config, its ``Timeline`` and the schedule it executed (``None`` for
    decode, whose cache never moves; for a ``train-step`` the backward ring's schedule)."""

    config: RingConfig
    timeline: Timeline
    schedule: Schedule | None
    flops_total: float = 0.0
    engine: str = "vectorized"

    @cached_property
    def makespan(self) -> float:
        """``timeline.makespan`` without copying the big arrays (every receive ends when its
        send does, so the receive arrays need no scan)."""
        tl = self.timeline
        return float(max(_fmax_all(tl.compute_end), _fmax_all(tl.send_end)))

    @cached_property
    def _compute_busy(self) -> np.ndarray:
        return _column_busy(self.timeline.compute_start, self.timeline.compute_end)

    def compute_busy(self) -> np.ndarray:
        """``(hosts,)`` seconds each host computes (``timeline.busy("compute")``)."""
        return self._compute_busy.copy()

    def link_busy(self) -> np.ndarray:
        """``(hosts,)`` seconds each outgoing link carries data (both backward messages)."""
        tl = self.timeline
        busy = _column_busy(tl.send_start, tl.send_end)
        if "send" in kv_messages(tl):
            busy = busy + _column_busy(*kv_messages(tl)["send"])
        return busy

    @property
    def idle_fraction(self) -> float:
        """``timeline.idle_fraction``: ``1 - sum of compute / (hosts * makespan)``."""
        span = self.makespan
        if span == 0:
            return 0.0
        return float(1.0 - self._compute_busy.sum() / (self.config.hosts * span))

    def summary(self) -> dict:
        """The JSON figures of ``ringsim simulate`` (keys fixed by DESIGN.md, plus a few)."""
        cfg = self.config
        total = self.makespan
        compute = float(self._compute_busy.max())
        result = {
            "hosts": cfg.hosts,
            "seq_len": cfg.seq_len,
            "block_tokens": cfg.block_tokens,
            "layout": cfg.layout,
            "causal": cfg.causal,
            "overlap": cfg.overlap,
            "pass": cfg.pass_,
            "hardware": cfg.hardware.name,
            "dtype": cfg.dtype,
            "heads": cfg.heads,
            "kv_heads": cfg.kv_heads,
            "head_dim": cfg.head_dim,
            "batch": cfg.batch,
            "total_time_s": total,
            "compute_time_s": compute,
            "exposed_comm_s": total - compute,
            "comm_time_s": float(self.link_busy().max()),
            "idle_fraction": self.idle_fraction,
            "min_block_for_overlap": min_block_for_overlap(cfg),
            "memory_per_host_bytes": memory_per_host_bytes(cfg),
            "flops_total": self.flops_total,
            "engine": self.engine,
            "events": count_events(self.timeline),
        }
        if cfg.pass_ == "decode":
            single = _decode_costs(cfg, cfg.seq_len)
            cache = kv_block_bytes(
                cfg.seq_len, cfg.kv_heads, cfg.head_dim, cfg.dtype, batch=cfg.batch
            )
            result["single_device_time_s"] = single
            result["speedup_vs_single_device"] = single / total if total > 0 else math.inf
            result["cache_bytes_total"] = cache
            result["cache_fits_one_device"] = bool(cache <= cfg.hardware.memory_bytes)
        return result


_CHUNK = 256  # rows per chunk: reductions over (4096, 4096) arrays without 134 MB temporaries


def _fmax_all(x: np.ndarray) -> float:
    """Largest finite entry (NaN ignored), 0 if there is none."""
    best = 0.0
    for r in range(0, x.shape[0], _CHUNK):
        part = np.fmax.reduce(x[r : r + _CHUNK], axis=None)
        if part > best:
            best = float(part)
    return best


def _column_busy(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """``(hosts,)`` sum over steps of ``end - start``, NaN (no activity) counting zero."""
    total = np.zeros(start.shape[1])
    for r in range(0, start.shape[0], _CHUNK):
        span = end[r : r + _CHUNK] - start[r : r + _CHUNK]
        span[np.isnan(span)] = 0.0
        total += span.sum(axis=0)
    return total


def count_events(timeline: Timeline) -> int:
    """Compute intervals plus link transfers (each backward step's two messages count two)."""
    events = int(np.isfinite(timeline.compute_start).sum() + np.isfinite(timeline.send_start).sum())
    if "send" in kv_messages(timeline):
        events += int(np.isfinite(kv_messages(timeline)["send"][0]).sum())
    return events


def kv_messages(timeline: Timeline) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The early ``k, v`` messages of a backward timeline (with overlap), read from its meta:
    ``{"send": (start, end), "recv": (start, end)}``, ``(steps, hosts)`` each, NaN where none
    moves; ``{}`` for a timeline without them."""
    meta = timeline.meta
    return {
        side: (meta[f"kv_{side}_start"], meta[f"kv_{side}_end"])
        for side in ("send", "recv")
        if f"kv_{side}_start" in meta
    }


def grad_rows(timeline: Timeline) -> np.ndarray:
    """``(steps,)`` bool: the rows whose ``send``/``recv`` arrays carry ``dk, dv`` rather than a
    block (the backward ring's rows of a timeline that has ``kv_messages``; none otherwise)."""
    if "kv_send_start" not in timeline.meta:
        return np.zeros(timeline.steps, bool)
    return np.asarray(timeline.meta.get("grad_rows", np.ones(timeline.steps, bool)), bool)


def min_block_for_overlap(config: RingConfig) -> float | None:
    """``overlap_threshold`` for the config's pass, latency included, for a full block (a causal
    zigzag or striped ring needs about twice it); a training step takes the larger of forward
    and backward; ``None`` for decode, where no block moves."""
    if config.pass_ == "decode":
        return None
    kw = dict(
        heads=config.heads,
        kv_heads=config.kv_heads,
        head_dim=config.head_dim,
        dtype=config.dtype,
        batch=config.batch,
        grad_dtype=config.grad_dtype,
    )
    passes = ("forward", "backward") if config.pass_ == "train-step" else (config.pass_,)
    return max(overlap_threshold(config.hardware, pass_=p, **kw) for p in passes)


def memory_per_host_bytes(config: RingConfig) -> float:
    """The attention layer's working set on one host (``ringsim.memory`` owns the accounting)."""
    args = (config.block_tokens, config.heads, config.kv_heads, config.head_dim, config.dtype)
    return float(attention_working_set_bytes(*args, pass_=config.pass_, batch=config.batch))


def simulate(config: RingConfig, *, engine: str = "vectorized") -> SimResult:
    """Run ``config`` through the event timer. ``engine="heap"`` is the slow, one-event-at-a-time
    oracle (use it for small rings); ``"vectorized"`` handles thousands of hosts."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if not isinstance(config, RingConfig):
        raise ValueError(f"config must be a RingConfig, got {config!r}")
    phases = _phases(config)
    rows, P = sum(p.rows for p in phases), config.hosts
    early_kv = config.overlap and config.pass_ in ("backward", "train-step")
    # Padded (rows, P + 2) buffers (see _Out): the timeline gets views, so recv[:, h] =
    # send[:, h - 1] costs nothing even for 4096 hosts (134 MB per array).
    names = ("cs", "ce", "ss", "se") + (("ks", "ke") if early_kv else ())
    bufs = {name: np.empty((rows, P + 2)) for name in names}
    costs = _Costs(config)
    ready, link_free = np.zeros(P), np.zeros(P)
    row0, schedule = 0, None
    recv = None
    for phase in phases:
        sl = slice(row0, row0 + phase.rows)
        row0 += phase.rows
        out = _Out(
            *(bufs[n][sl] if n in bufs else None for n in ("cs", "ce", "ss", "se", "ks", "ke"))
        )
        view = out.inner()
        if phase.kind == "local":
            _local(costs, phase, ready, view)
            ready = view.ce[-1]
        elif phase.kind == "decode":
            recv = (np.empty((rows, P)), np.empty((rows, P)))
            _decode(config, costs, ready, view, recv)
        else:
            schedule = phase.schedule
            if config.hardware.pass_overhead_s:
                ready = ready + config.hardware.pass_overhead_s / costs.clock.speed
            row = costs.ring_rows(schedule)
            _RING_ENGINES[engine](schedule, row, config.overlap, ready, link_free, out)
            for ends in (view.se, view.ke):
                if ends is not None:
                    link_free = np.fmax(link_free, np.fmax.reduce(ends, axis=0))
            ready = view.ce[-1]
            if schedule.pass_ == "backward" and P > 1:  # dk, dv must be home before use
                ready = np.maximum(ready, view.se[-1][schedule.recv_from])
    for name in names:
        bufs[name][:, 0] = bufs[name][:, P]
    inner = {name: buf[:, 1:-1] for name, buf in bufs.items()}
    if recv is None:
        recv = (bufs["ss"][:, :P], bufs["se"][:, :P])
    meta = {"pass": config.pass_, "engine": engine, "hardware": config.hardware.name}
    if early_kv:  # the receive of host h is the send of h - 1: views, like recv above
        meta["kv_send_start"], meta["kv_send_end"] = inner["ks"], inner["ke"]
        meta["kv_recv_start"], meta["kv_recv_end"] = bufs["ks"][:, :P], bufs["ke"][:, :P]
        backward = [p.kind == "ring" and p.schedule.pass_ == "backward" for p in phases]
        meta["grad_rows"] = np.repeat(backward, [p.rows for p in phases])
    labels = [label for p in phases for label in p.labels]
    timeline = Timeline(
        inner["cs"], inner["ce"], inner["ss"], inner["se"], recv[0], recv[1], labels, meta
    )
    return SimResult(config, timeline, schedule, costs.flops_total, engine)
