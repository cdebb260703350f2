"""A simulated run's result: ``SimResult`` (its summary figures and, kept or rebuilt on demand,
its timeline), the ``Recorder`` that sums a run's rows as the engines finish them, and the
readers of a timeline that views share (``kv_messages``, ``grad_rows``, ``count_events``).

A summary needs ``O(P)`` numbers (makespan, busy seconds per host and per link, events); the
timeline needs ``(rows, P)`` arrays, ``P^2`` for a ring pass: 2 GiB per array at 16,384 hosts.
So the recorder keeps the arrays only when asked (a plot, a trace, the API), and a
``SimResult`` without them rebuilds them on first use of ``.timeline`` by running again (the
same seed draws the same floats). ``check_fits`` refuses, up front, a run that could not
finish: more block events than the timer handles, or more memory than the machine has.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ringsim.checks import physical_memory
from ringsim.masks import documents_are_runs
from ringsim.schedule import Pass, Schedule
from ringsim.timer.engine.clock import decode_seconds, family_overlap_block
from ringsim.timer.engine.config import RingConfig
from ringsim.timer.engine.timeline import Timeline

_CHUNK = 256  # rows per partial sum: the order of additions of the former chunked reductions


@dataclass
class RunStats:
    """What a summary needs from a run, ``O(P)``: ``makespan`` (s), ``compute_busy`` and
    ``link_busy`` ``(P,)`` seconds each host computes and its outgoing link carries data,
    ``events`` (compute intervals plus messages)."""

    makespan: float
    compute_busy: np.ndarray
    link_busy: np.ndarray
    events: int

    @classmethod
    def of(cls, timeline: Timeline) -> RunStats:
        """The stats of a finished timeline (the peers of ``strategies`` build theirs whole):
        ``Recorder``'s sums, every row at once, in its order of additions (row by row within
        a chunk of ``_CHUNK`` rows, a cumulative sum: ``sum`` may add them in another order;
        the chunks one after the other)."""
        tl, P = timeline, timeline.hosts
        pairs = [(tl.compute_start, tl.compute_end), (tl.send_start, tl.send_end)]
        kv = kv_messages(tl).get("send")
        if kv is not None:
            pairs.append(kv)
        busy, events = [], 0
        for start, end in pairs:
            span = np.asarray(end, dtype=float) - start
            done = np.isfinite(start)
            events += int(done.sum())
            span[~done] = 0.0
            total = np.zeros(P)
            for chunk in range(0, tl.steps, _CHUNK):
                total += np.cumsum(span[chunk : chunk + _CHUNK], axis=0)[-1]
            busy.append(total)
        zero = np.zeros(P)
        compute_end = np.fmax.reduce(tl.compute_end, axis=0, initial=0.0) if tl.steps else zero
        link_free = zero
        for _, end in pairs[1:]:
            if tl.steps:
                link_free = np.fmax(link_free, np.fmax.reduce(end, axis=0))
        span = max(float(compute_end.max(initial=0.0)), float(link_free.max(initial=0.0)))
        return cls(span, busy[0], busy[1] + (busy[2] if kv is not None else zero), events)


class Recorder:
    """Takes a run's rows in order as the engines finish them (``row``): sums the ``RunStats``
    in ``O(P)`` and, with ``keep``, stores the ``(rows, P)`` timeline arrays.

    ``link_free`` ``(P,)`` is when each link has finished everything sent so far (the next ring
    pass may not use it earlier). Rows are ``dense`` (a ring or local row: every host computes,
    all or none send) or not (decode's merge rounds, NaN where a host does nothing)."""

    def __init__(self, hosts: int, rows: int, *, keep: bool, early_kv: bool = False):
        P = hosts
        self.P, self.rows, self.next_row = P, rows, 0
        self.compute_end = np.zeros(P)
        self.link_free = np.zeros(P)
        self.sums = {name: [np.zeros(P), np.zeros(P), 0] for name in ("compute", "send", "kv")}
        self.events = 0
        self.bufs = self.recv = None
        self.hops = np.ones(rows, np.int64)  # how far back each row's receiver's sender is
        if keep:  # column h + 1 holds host h, column 0 host P - 1: recv = send[:, h - 1], a view
            names = ("cs", "ce", "ss", "se") + (("ks", "ke") if early_kv else ())
            self.bufs = {name: np.empty((rows, P + 1)) for name in names}

    def _add(self, name: str, r: int, start: np.ndarray, end: np.ndarray, dense: bool) -> None:
        total, part, chunk = self.sums[name]
        if r // _CHUNK != chunk:
            total += part
            part[...] = 0.0
            self.sums[name][2] = r // _CHUNK
        span = end - start
        if dense:
            self.events += self.P
        else:
            done = np.isfinite(start)
            self.events += int(done.sum())
            span[~done] = 0.0
        part += span

    def row(
        self, cs, ce, ss=None, se=None, ks=None, ke=None, *, dense=True, recv=None, hops=1
    ) -> None:
        """Record the next row (``(P,)`` arrays; ``None``: nothing sent). ``recv``: a decode
        row's ``(start, end)`` of what each host receives (a ring's is the send of the host
        ``hops`` back: its neighbour, or under a sliding window the start of a jump)."""
        r = self.next_row
        self.next_row += 1
        self.hops[r] = hops
        self._add("compute", r, cs, ce, dense)
        np.fmax(self.compute_end, ce, out=self.compute_end)
        for name, start, end in (("send", ss, se), ("kv", ks, ke)):
            if start is not None:
                self._add(name, r, start, end, dense)
                np.fmax(self.link_free, end, out=self.link_free)
        if self.bufs is not None:
            values = dict(cs=cs, ce=ce, ss=ss, se=se, ks=ks, ke=ke)
            for name, value in values.items():
                if name in self.bufs:
                    self.bufs[name][r, 1:] = np.nan if value is None else value
            if recv is not None:
                if self.recv is None:
                    self.recv = tuple(np.full((self.rows, self.P), np.nan) for _ in range(2))
                self.recv[0][r], self.recv[1][r] = recv

    def stats(self) -> RunStats:
        busy = {}
        for name, (total, part, _) in self.sums.items():
            busy[name] = total + part
        # every k, v message ends before its receiver computes with it, so the links' last
        # use (link_free) is a send or before some compute end: the makespan is exact
        span = max(float(self.compute_end.max(initial=0.0)), float(self.link_free.max(initial=0.0)))
        return RunStats(span, busy["compute"], busy["send"] + busy["kv"], self.events)

    def timeline(self, labels: list[str], meta: dict) -> Timeline:
        """The kept arrays as a ``Timeline`` (``meta`` gets the early ``k, v`` messages)."""
        bufs, P = self.bufs, self.P
        for buf in bufs.values():
            buf[:, 0] = buf[:, P]
        inner = {name: buf[:, 1:] for name, buf in bufs.items()}
        received = lambda name: bufs[name][:, :P]  # the neighbour's send, a view
        if np.any(self.hops != 1):  # a jump's receiver got it from hops back
            received = lambda name: np.stack(
                [np.roll(inner[name][r], self.hops[r]) for r in range(self.rows)]
            )
        recv = self.recv or (received("ss"), received("se"))
        if "ks" in bufs:
            meta["kv_send_start"], meta["kv_send_end"] = inner["ks"], inner["ke"]
            meta["kv_recv_start"], meta["kv_recv_end"] = received("ks"), received("ke")
        return Timeline(
            inner["cs"], inner["ce"], inner["ss"], inner["se"], recv[0], recv[1], labels, meta
        )


class _TimelineField:
    """``SimResult.timeline``: the stored ``Timeline``, or, for a run that did not keep it,
    rebuilt on first use by ``rebuild`` (the same run again, keeping it) and then stored."""

    def __get__(self, obj, owner=None):
        if obj is None:
            raise AttributeError("timeline")  # no default: the dataclass field stays required
        timeline = obj.__dict__.get("timeline")
        if timeline is None and obj.rebuild is not None:
            timeline = obj.__dict__["timeline"] = obj.rebuild()
        return timeline

    def __set__(self, obj, value) -> None:
        obj.__dict__["timeline"] = value


@dataclass
class SimResult:
    """A simulated run: its config, its ``Timeline`` and the schedule it executed (``None`` for
    decode, whose cache never moves; for a ``train-step`` the backward ring's schedule).

    ``stats`` holds the summary's figures (computed from the timeline when not given);
    ``timeline`` is ``None`` in the constructor when the run did not keep it, and ``rebuild``
    then makes it on first use."""

    config: RingConfig
    timeline: Timeline | None = _TimelineField()
    schedule: Schedule | None = None
    flops_total: float = 0.0
    engine: str = "vectorized"
    stats: RunStats | None = field(default=None, repr=False, compare=False)
    rebuild: Callable[[], Timeline] | None = field(default=None, repr=False, compare=False)

    def _stats(self) -> RunStats:
        if self.stats is None:
            self.stats = RunStats.of(self.timeline)
        return self.stats

    @property
    def makespan(self) -> float:
        """``timeline.makespan``, from the run's ``O(P)`` stats."""
        return self._stats().makespan

    def compute_busy(self) -> np.ndarray:
        """``(hosts,)`` seconds each host computes (``timeline.busy("compute")``)."""
        return self._stats().compute_busy.copy()

    def link_busy(self) -> np.ndarray:
        """``(hosts,)`` seconds each outgoing link carries data (both backward messages)."""
        return self._stats().link_busy.copy()

    @property
    def idle_fraction(self) -> float:
        """``timeline.idle_fraction``: ``1 - sum of compute / (hosts * makespan)``."""
        span = self.makespan
        if span == 0:
            return 0.0
        return float(1.0 - self._stats().compute_busy.sum() / (self.config.run.hosts * span))

    def summary(self) -> dict:
        """The JSON figures of ``ringsim simulate`` (keys fixed by DESIGN.md, plus a few)."""
        cfg = self.config
        total = self.makespan
        compute = float(self._stats().compute_busy.max())
        result = {
            "hosts": cfg.run.hosts,
            "seq_len": cfg.run.seq_len,
            "block_tokens": cfg.block_tokens,
            "layout": cfg.run.layout,
            "causal": cfg.run.causal,
            "overlap": cfg.run.overlap,
            "pass": cfg.run.pass_,
            "hardware": cfg.machine.hardware.name,
            "dtype": cfg.shape.dtype,
            "heads": cfg.shape.heads,
            "kv_heads": cfg.shape.kv_heads,
            "head_dim": cfg.shape.head_dim,
            "batch": cfg.shape.batch,
            "total_time_s": total,
            "compute_time_s": compute,
            "exposed_comm_s": total - compute,
            "comm_time_s": float(self.link_busy().max()),
            "idle_fraction": self.idle_fraction,
            "min_block_for_overlap": min_block_for_overlap(cfg),
            "memory_per_host_bytes": memory_per_host_bytes(cfg),
            "flops_total": self.flops_total,
            "engine": self.engine,
            "events": self._stats().events,
        }
        if cfg.run.sliding_window is not None:  # a window does not shrink what a host holds
            result["sliding_window"] = cfg.run.sliding_window
            if self.schedule is not None:
                result["ring_steps"] = len(self.schedule.ring_steps)
        if cfg.run.pass_ == Pass.DECODE:
            single = decode_seconds(cfg, cfg.run.seq_len)
            cache = cfg.shape.kv_bytes(cfg.run.seq_len)
            result["single_device_time_s"] = single
            result["speedup_vs_single_device"] = single / total if total > 0 else math.inf
            result["cache_bytes_total"] = cache
            result["cache_fits_one_device"] = bool(cache <= cfg.machine.hardware.memory_bytes)
        return result


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
    and backward; ``None`` for decode, where no block moves. Under a real kernel family the
    family's own step against its own transfer (``family_overlap_block``), not peak rates. On
    a cluster (per-host hops) the slowest hop decides, as in the run: a ring step waits for it."""
    if config.run.pass_ == Pass.DECODE:
        return None
    passes = config.run.pass_.rings
    if not config.family.ideal and not config.family.calibrated:
        return max(family_overlap_block(config, p) for p in passes)
    hw = config.machine.slowest_hop()
    return max(config.shape.overlap_threshold(hw, pass_=p) for p in passes)


def memory_per_host_bytes(config: RingConfig) -> float:
    """The attention layer's working set on one ring host (``cost.attention_working_set_bytes``)."""
    return float(config.shape.working_set_bytes(config.block_tokens, config.run.pass_))


MAX_BLOCK_EVENTS = 2**33
"""The most (row, host) cells a run may have: 65,536 hosts run a training step (two ring passes)
in ~2^33 block events; a million hosts (2^40 per pass) would take days, so they are refused."""


def timeline_bytes(config: RingConfig, rows: int) -> int:
    """Bytes of a run's kept timeline: ``rows x (P + 1)`` float64 per kept array."""
    P = config.run.hosts
    arrays = 6 if config.run.overlap and config.run.pass_.has_backward else 4
    extra = 2 * rows * P * 8 if config.run.pass_ == Pass.DECODE else 0  # decode's own receive rows
    return rows * (P + 1) * 8 * arrays + extra


def run_bytes(config: RingConfig, rows: int, *, keep: bool, engine: str) -> int:
    """Peak bytes a run needs beyond the interpreter: ``O(P)`` engine state (a few dozen
    ``(P,)`` vectors), the kept timeline, the heap oracle's per-event state, and for packed
    documents the ``(P, P)`` work tables and one ``c x c`` mask at a time (a few ``(c,)``
    vectors where each document is one run of tokens: ``masks.documents_are_runs``)."""
    P, c = config.run.hosts, config.block_tokens
    need = 64 * 8 * P
    if keep:
        need += timeline_bytes(config, rows)
    if engine == "heap":
        need += rows * P * 256  # 9 float and 8 bool arrays, two queued tuples per cell
    if config.run.segment_ids is not None:
        runs = documents_are_runs(config.run.segment_ids)
        need += 16 * P * P + (128 * c if runs else 3 * c * c)
    return need


def memory_budget() -> int:
    """The memory this process may use (``ringsim.checks.physical_memory``: the machine's, or
    its address-space cap), what ``check_fits`` compares with."""
    return physical_memory()


def _gib(nbytes: float) -> str:
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes / 2**10:.1f} KiB"


def check_fits(config: RingConfig, rows: int, *, keep: bool, engine: str) -> None:
    """Refuse (``ValueError``) a run with more than ``MAX_BLOCK_EVENTS`` block events, or that
    needs more memory than ``memory_budget()``, saying what it would need."""
    P, cells = config.run.hosts, rows * config.run.hosts
    timeline = timeline_bytes(config, rows)
    if cells > MAX_BLOCK_EVENTS:
        raise ValueError(
            f"hosts={P} is too many for the event timer: {rows} steps x {P} hosts = {cells:.3g} "
            f"block events, more than its limit of 2^33 (65,536 hosts); its timeline would "
            f"need {_gib(timeline)}"
        )
    need, budget = run_bytes(config, rows, keep=keep, engine=engine), memory_budget()
    if need > budget:
        what = "with its timeline (kept for a plot or a trace) " if keep else ""
        raise ValueError(
            f"hosts={P}, seq_len={config.run.seq_len}: the {engine} timer {what}would need "
            f"{_gib(need)}, more than this machine's {_gib(budget)} of memory"
            + (f"; without the timeline it needs {_gib(need - timeline)}" if keep else "")
        )


class TimesOutOfRange(ValueError):
    """A run's time left float64's range: the rates or latencies it was given are extreme."""


def check_finite_makespan(config: RingConfig, makespan: float) -> None:
    """Refuse (``TimesOutOfRange``, a ``ValueError``) a run whose time left float64's range:
    finite inputs so extreme (``hop_latency=(1e308,) * P``, a subnormal bandwidth) that a sum
    overflowed. The message names the run's fields that can do that."""
    if np.isfinite(makespan):
        return
    machine, noise, hw = config.machine, config.noise, config.machine.hardware
    fields = {
        "hop_latency": machine.hop_latency,
        "hop_bandwidth": machine.hop_bandwidth,
        "speed": noise.speed,
        "jitter": noise.jitter or None,
    }
    given = [f"{name}={value!r}" for name, value in fields.items() if value is not None]
    given.append(f"hardware {hw.name!r}: link {hw.link_bandwidth:.3g} B/s, {hw.link_latency:.3g} s")
    raise TimesOutOfRange(
        f"the run's times overflow float64 (makespan {makespan}): check {'; '.join(given)}"[:400]
    )


@dataclass
class StrategyResult(SimResult):
    """A ``SimResult`` that knows its strategy; ``summary()`` has the ring's keys plus
    ``strategy`` and, for the peers, their own memory per host and overlap block, and the
    ``ulysses_degree``, ``ring_degree`` and ``placement`` they ran with."""

    strategy: str = "ring"
    memory_bytes: float | None = None  # None: the ring's attention working set
    overlap_block: float | None = None
    peer: bool = False

    def summary(self) -> dict:
        result = super().summary()
        result["strategy"] = self.strategy
        meta = self.timeline.meta if self.peer else {}
        for key in ("ulysses_degree", "ring_degree", "placement"):
            if key in meta:
                result[key] = meta[key]
        if self.peer:
            result["memory_per_host_bytes"] = self.memory_bytes
            result["min_block_for_overlap"] = self.overlap_block
        return result
