"""From a recorded run to a ring: its members in ring order, its passes, its configuration,
and the measured ``Timeline`` of a typical pass, step by step, the type the simulator
produces (``ringsim.timer.engine.timeline``), so the two are compared like with like.

``read_ring(paths, hints)`` reads the traces (``ringsim.traces.read_traces``), finds each
rank's passes and steps (``ringsim.traces.steps``), puts the members in ring order (the ranks
the files name, else the peers their messages name), checks that each sends to one
neighbour and receives from the other, infers the configuration (``ringsim.traces.shape``;
flags in ``hints`` win), splits each rank's pass into the schedule's steps, aligns the clocks
on the matched messages (``ringsim.traces.clocks``) and builds, for the pass whose time is
the median, the timeline each host saw from the start of its own pass (as ``measure`` and
the timer count), with every step's attention seconds and compute seconds beside it.

Step by step the comparison reads forward passes (a step: post the block, compute, wait for
it); a backward pass is compared in total.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ringsim.schedule import BlockKind, Pass, build_schedule
from ringsim.timer.engine.timeline import Timeline
from ringsim.traces.clocks import Alignment, align
from ringsim.traces.events import Recording, TraceError
from ringsim.traces.read import read_traces
from ringsim.traces.shape import RunShape, infer_shape
from ringsim.traces.steps import RankRing, Work, assign_steps, rank_ring


@dataclass
class RecordedRing:
    """A recorded ring: ``members`` (the ranks traced, in ring order: column ``i`` of the
    arrays), the ring's ``hosts``, its ``shape``; for a forward pass the typical pass's
    ``timeline`` and ``(steps, members)`` arrays ``attention`` and ``busy`` (seconds of the
    attention calls, of all compute); ``pass_times`` of every pass of the kind compared (the
    slowest member's own time), ``typical`` the index shown; the clock ``alignment``; the
    ``device_name``, trace ``format``, the ``sources`` read and ``notes`` on what is partial."""

    members: list[int]
    hosts: int
    shape: RunShape
    pass_times: list[float]
    typical: int
    alignment: Alignment
    timeline: Timeline | None = None
    attention: np.ndarray | None = None
    busy: np.ndarray | None = None
    device_name: str | None = None
    format: str = ""
    sources: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def measured_s(self) -> float:
        return self.pass_times[self.typical]


def read_ring(
    paths: Sequence[str], hints: Mapping[str, object] | None = None, *, which: int | None = None
) -> RecordedRing:
    """The ring recorded in ``paths`` (one trace per rank, or merged); ``hints``: flag values
    that win over what the trace says (keys of ``ringsim.traces.shape.FLAGS``); ``which``:
    the pass shown step by step, counted among the passes of the kind compared (default: the
    one whose time is the median)."""
    hints = dict(hints or {})
    recording = read_traces(paths)
    hosts = hints.get("hosts") or _hosts(recording)
    per_pass = hosts - 1 if hosts and hosts > 1 else None
    rings = [rank_ring(record, per_pass) for record in recording.ranks]
    members, rings, notes = _order(rings, hosts)
    hosts = hosts or len(members)
    chosen = _chosen_passes(rings, hints.get("pass_"))
    first = [ring.passes[chosen[0]] for ring in rings]
    shape = infer_shape(rings, first, hosts, hints)
    if shape.missing():
        raise TraceError(shape.missing_message())
    notes += shape.notes + recording.notes
    if len(members) < hosts:
        notes.append(f"traces of {len(members)} of the ring's {hosts} ranks: compared on those")
    alignment = _align(rings, members, hosts, chosen)
    if alignment.shifted:
        spread = max(alignment.offsets) - min(alignment.offsets)
        notes.append(
            f"the ranks' clocks disagreed by up to {spread:.3g} s: aligned on the matched "
            f"messages (loop residual {alignment.residual:.2g} s)"
        )
    times = [_pass_time(rings, i) for i in chosen]
    typical = sorted(range(len(times)), key=lambda i: times[i])[(len(times) - 1) // 2]
    if which is not None:
        if not -len(times) <= which < len(times):
            raise TraceError(f"which must be below the {len(times)} passes found, got {which}")
        typical = which % len(times)
    recorded = RecordedRing(
        members,
        hosts,
        shape,
        times,
        typical,
        alignment,
        device_name=next((r.record.device_name for r in rings if r.record.device_name), None),
        format=recording.format,
        sources=[r.record.source for r in rings],
        notes=notes,
    )
    if shape.values["pass_"] == Pass.FORWARD:
        _steps(recorded, rings, chosen[typical])
    else:
        recorded.notes.append(
            f"{shape.values['pass_']} passes: compared in total (step by step the comparison "
            f"reads forward passes)"
        )
    return recorded


def _hosts(recording: Recording) -> int | None:
    """The ring's size as the files state it: several ranks' files, else the world size."""
    if len(recording.ranks) > 1:
        return len(recording.ranks)
    return recording.ranks[0].world_size


# -- the members in ring order ----------------------------------------------------------------
def _order(rings: list[RankRing], hosts: int | None) -> tuple[list[int], list[RankRing], list]:
    """The members' ranks in the ring's group and their rings in ring order; each sends to
    the next rank and receives from the previous one (``TraceError`` otherwise). The ranks
    come from the peers the messages name (ranks in the ring's process group, as c10d's ops
    take them), else from the files (``distributedInfo``: ranks in the whole job, the same
    when the ring is the job's default group), else from the files' order."""
    notes = []
    ranks = [_rank_from_peers(r, hosts) for r in rings]
    if any(rank is None for rank in ranks) or len(set(ranks)) < len(ranks):
        ranks = [r.record.rank for r in rings]
    if any(rank is None for rank in ranks) or len(set(ranks)) < len(ranks):
        ranks = list(range(len(rings)))
        notes.append("the files name no ranks and their messages no peers: ranks in file order")
    order = sorted(range(len(rings)), key=lambda i: ranks[i])
    members, rings = [ranks[i] for i in order], [rings[i] for i in order]
    size = hosts or len(members)
    for rank, ring in zip(members, rings, strict=True):
        _check_neighbours(ring, rank, size)
    return members, rings, notes


def _peers(ring: RankRing, direction: str) -> set[int]:
    return {
        m.peer
        for p in ring.passes
        for b in p.batches
        for m in b.messages
        if m.direction == direction and m.peer is not None
    }


def _rank_from_peers(ring: RankRing, hosts: int | None) -> int | None:
    """A rank that receives from ``r - 1`` is rank ``r``."""
    sources, targets = _peers(ring, "recv"), _peers(ring, "send")
    if hosts and len(sources) == 1:
        return (next(iter(sources)) + 1) % hosts
    if hosts and len(targets) == 1:
        return (next(iter(targets)) - 1) % hosts
    return None


def _check_neighbours(ring: RankRing, rank: int, hosts: int) -> None:
    for direction, expected in (("send", (rank + 1) % hosts), ("recv", (rank - 1) % hosts)):
        peers = _peers(ring, direction)
        if len(peers) > 1:
            raise TraceError(
                f"{ring.record.source}: rank {rank} {direction}s "
                f"{'to' if direction == 'send' else 'from'} ranks {sorted(peers)}: more than "
                f"one ring (or another pattern than a ring) in one trace; give one ring's files"
            )
        if peers and peers != {expected}:
            raise TraceError(
                f"{ring.record.source}: rank {rank} {direction}s "
                f"{'to' if direction == 'send' else 'from'} rank {next(iter(peers))}, not "
                f"rank {expected}: not a ring of {hosts} in rank order"
            )


# -- passes ------------------------------------------------------------------------------------
def _chosen_passes(rings: list[RankRing], wanted: object) -> list[int]:
    """The indices of the passes of the kind compared (``wanted``, else forward if any)."""
    counts = {len(r.passes) for r in rings}
    if len(counts) > 1:
        per_rank = ", ".join(f"{r.record.source}: {len(r.passes)}" for r in rings)
        raise TraceError(f"the ranks recorded different numbers of ring passes ({per_rank})")
    n = counts.pop()
    kinds = []
    for i in range(n):
        votes = Counter(r.passes[i].pass_ for r in rings if r.passes[i].pass_)
        kinds.append(votes.most_common(1)[0][0] if votes else "forward")
    kind = wanted or ("forward" if "forward" in kinds else kinds[0])
    chosen = [i for i in range(n) if kinds[i] == kind]
    if not chosen:
        raise TraceError(f"no {kind} pass in the trace (found: {', '.join(sorted(set(kinds)))})")
    return chosen


def _pass_time(rings: list[RankRing], index: int) -> float:
    """A pass's time: the slowest member's, each from the start of its own pass."""
    return max(r.passes[index].end - r.passes[index].start for r in rings)


# -- clocks ------------------------------------------------------------------------------------
def _done(messages) -> float:
    return max(m.done for m in messages)


def _align(rings: list[RankRing], members: list[int], hosts: int, chosen: list[int]) -> Alignment:
    """Offsets from the matched messages of every pass compared: member ``i``'s sends of
    step ``k`` against the next member's receives of step ``k``."""
    closed = len(members) == hosts and hosts > 1
    hops: list[list[tuple[float, float, float]]] = []
    for i in range(len(members) if closed else len(members) - 1):
        j = (i + 1) % len(members)
        hop = []
        if closed or members[j] == (members[i] + 1) % hosts:
            for p in chosen:
                sends, recvs = rings[i].passes[p].batches, rings[j].passes[p].batches
                for a, b in zip(sends, recvs, strict=False):
                    if a.side("send") and b.side("recv"):
                        hop.append((a.post, _done(a.side("send")), _done(b.side("recv"))))
        hops.append(hop)
    if not hops:
        return Alignment((0.0,) * len(members))
    return align(hops, closed)


# -- steps -------------------------------------------------------------------------------------
def _steps(recorded: RecordedRing, rings: list[RankRing], index: int) -> None:
    """The typical pass as a ``Timeline`` plus its attention and compute seconds."""
    values, hosts = recorded.shape.values, recorded.hosts
    schedule = build_schedule(
        hosts,
        values["layout"],
        values["causal"],
        "forward",
        seq_len=hosts * values["block_tokens"],
    )
    passes = [ring.passes[index] for ring in rings]
    for rank, ring_pass, ring in zip(recorded.members, passes, rings, strict=True):
        if len(ring_pass.batches) != schedule.steps - 1:
            raise TraceError(
                f"{ring.record.source}: rank {rank}'s pass posts {len(ring_pass.batches)} "
                f"transfers; a forward ring of {hosts} hosts posts {schedule.steps - 1} (is "
                f"--hosts right? a ring that sends at its last step is not one the simulator "
                f"runs)"
            )
        kinds = schedule.kind[-2:, rank]
        assign_steps(ring_pass, (kinds[0] != BlockKind.SKIP, kinds[1] != BlockKind.SKIP))
    shape = (schedule.steps, len(passes))
    arrays = {k: np.full(shape, np.nan) for k in ("cs", "ce", "ss", "se", "rs", "re")}
    attention, busy = np.zeros(shape), np.zeros(shape)
    offsets = recorded.alignment.offsets
    known = recorded.shape.family is not None  # else the whole compute stands for the calls
    for h, ring_pass in enumerate(passes):
        origin = ring_pass.start
        sender = h - 1 if h > 0 else (len(passes) - 1 if len(passes) == hosts else None)
        for k, work in enumerate(ring_pass.steps):
            if work:
                arrays["cs"][k, h] = min(w.start for w in work) - origin
                arrays["ce"][k, h] = max(w.end for w in work) - origin
                busy[k, h] = _union(work)
                calls = [w for w in work if w.role.kind == "attention"]
                attention[k, h] = _union(calls) if known else busy[k, h]
            if k >= len(ring_pass.batches):
                continue
            batch = ring_pass.batches[k]
            sends, recvs = batch.side("send") or batch.messages, batch.side("recv")
            arrays["ss"][k, h] = min(m.post for m in sends) - origin
            arrays["se"][k, h] = _done(sends) - origin
            if recvs:
                posted = min(m.post for m in recvs)
                if sender is not None:  # the block leaves when its sender posts it
                    theirs = passes[sender].batches[k].post + offsets[sender] - offsets[h]
                    posted = max(posted, theirs)
                arrays["rs"][k, h] = posted - origin
                arrays["re"][k, h] = _done(recvs) - origin
    recorded.timeline = Timeline(
        arrays["cs"],
        arrays["ce"],
        arrays["ss"],
        arrays["se"],
        arrays["rs"],
        arrays["re"],
        [str(s) for s in range(schedule.steps)],
        {"measured": True, "pass": "forward", "members": list(recorded.members)},
    )
    recorded.attention, recorded.busy = attention, busy


def _union(work: list[Work]) -> float:
    """Seconds covered by the intervals of ``work`` (nested or overlapping ones once)."""
    total, end = 0.0, -np.inf
    for w in sorted(work, key=lambda w: w.start):
        if w.end > end:
            total += w.end - max(w.start, end)
            end = w.end
    return total
