"""The double ring (LoongTrain, Gu et al., arXiv 2406.18485; InternEvo's ``window_size``):
inner rings inside a node, an outer ring across nodes.

The ring group is cut into inner rings of ``window`` consecutive members (one node's worth by
default). The pass runs ``R / window`` **rounds**; in each, every inner ring runs a ring pass
of ``window`` steps (the ring engines, rules unchanged) over the blocks it holds, while every
host sends the block it started the round with to the same slot of the next inner ring (the
**outer ring**), so all NICs work at once and each outer hop has a whole round of compute to
hide behind. A round starts on a host when it finished the previous round and the outer block
has arrived. Backward: the outer ring also carries each round's ``dk, dv`` (home from the
inner ring) to the next inner ring, where they accumulate, and the last round's sum goes
home; a host is done when it has arrived. ``window = R`` is the flat ring, bit for bit.

One ring group of ``R`` ranks (``members``, in ring order) is cut into ``R / w`` inner rings of
``w`` consecutive members. Ring slot ``k w + i`` is slot ``i`` of inner ring ``k``. In round
``o`` that host starts with the block of slot ``(k - o) w + i`` (mod ``R``) and its inner ring
runs a ring pass of ``w`` steps (the ring engines, unchanged: at inner step ``j`` it holds the
block of slot ``(k - o) w + (i - j) mod w``). What each block costs comes from the flat
``R``-host schedule of the same layout (which query slot sees how much of which key slot), so
the work is the ring's, only visited in another order. Meanwhile the outer ring (slot ``i``
of inner ring ``k`` to slot ``i`` of ring ``k + 1``) carries the round's first block on, for
the next round; backward, after the round it also carries that block's ``dk, dv``
(accumulated by the inner ring and returned to the host) to where they are summed next, and
after the last round home.
"""

from __future__ import annotations

import numbers
from collections import Counter

import numpy as np

from ringsim.schedule import Pass
from ringsim.sharing import DOUBLE_RING
from ringsim.timer.engine.clock import Costs, HostClock
from ringsim.timer.engine.config import RingConfig
from ringsim.timer.engine.engines import RING_ENGINES
from ringsim.timer.engine.result import StrategyResult
from ringsim.timer.machine.topology import Cluster
from ringsim.timer.strategies.base import Strategy
from ringsim.timer.strategies.frame import run_distinct, run_two_level, two_level_memory
from ringsim.timer.strategies.pieces import Piece
from ringsim.timer.strategies.ring import ring_working_set
from ringsim.timer.strategies.sizes import (
    DOUBLE_RING_MAX_CELLS,
    DOUBLE_RING_MAX_STEPS,
    PIECE_BYTES,
    TABLE_BYTES,
    check_cells,
    where,
)


class _RoundSchedule:
    """What the ring engines read of a ``Schedule`` (hosts, steps, pass, payload, work, kind,
    relation),
    for one inner ring in one round: the inner ring's payloads, the flat ring's work."""

    def __init__(
        self, inner, work: np.ndarray, kind: np.ndarray, pairs: tuple[np.ndarray, np.ndarray], flat
    ):
        self.inner, self._work, self._kind = inner, work, kind  # (w, w): step x host
        self._q, self._kv = pairs  # (w, w): query slot and key slot in the flat ring
        self._relation = np.sign(self._kv - self._q)
        self.flat = flat  # the flat ring's schedule: what a (query, key) slot pair computes
        self.sliding_window = flat.sliding_window
        self.hosts = self.steps = inner.hosts
        self.pass_ = inner.pass_
        self.recv_from = inner.recv_from
        self.ring_steps = inner.ring_steps  # every step: the inner ring never skips one

    def payload(self, step: int):
        return self.inner.payload(step)

    def hops_after(self, step: int) -> int:
        return self.inner.hops_after(step)

    def work_at(self, step: int) -> np.ndarray:
        return self._work[step]

    def kind_at(self, step: int) -> np.ndarray:
        return self._kind[step]

    def relation_at(self, step: int) -> np.ndarray:
        return self._relation[step]

    def pairs_at(self, step: int) -> tuple[np.ndarray, np.ndarray]:
        return self._q[step], self._kv[step]

    def cell_key(self, q_hosts: np.ndarray, kv_hosts: np.ndarray) -> np.ndarray:
        return self.flat.cell_key(q_hosts, kv_hosts)

    def cell_calls(self, q_host: int, kv_host: int):
        return self.flat.cell_calls(q_host, kv_host)


def default_window(cluster: Cluster, members: list[int]) -> int:
    """Members of the ring group on the first member's node (the inner ring: one node)."""
    return Counter(cluster.node(r) for r in members)[cluster.node(members[0])]


def inner_window(cluster: Cluster, members: list[int], window: object) -> int:
    """The inner ring's size: ``window``, or one node's members of the ring group when it is
    ``None``; ``ValueError`` unless it divides the ring degree (naming where a default came
    from: a window the caller never gave must not be blamed on them)."""
    R = len(members)
    w = default_window(cluster, members) if window is None else window
    if isinstance(w, bool) or not isinstance(w, numbers.Integral) or w <= 0 or R % w:
        if window is None:
            raise ValueError(
                f"window must divide the ring degree {R}: the default window is the {w} ring "
                f"members on one node of {cluster.gpus_per_node} devices; give a window that "
                f"divides {R}"
            )
        raise ValueError(f"window must divide the ring degree {R}, got window={w!r}")
    return int(w)


def double_ring(
    config: RingConfig,
    members: list[int],
    all_groups: list[list[int]],
    cluster: Cluster,
    window: int | None,
    engine: str,
):
    """Time one ring group's double-ring pass; returns ``(Piece, flops)`` with one column per
    member. ``all_groups`` are every ring group running at once (they share links)."""
    R = config.run.hosts
    w = inner_window(cluster, members, window)
    rounds = R // w
    flat = config.schedule()
    owners = flat.kv_owners  # (R, R): step x host
    work, kind = np.empty((R, R)), np.empty((R, R), dtype=np.int8)
    rows = np.arange(R)
    for s in range(R):  # work[q, k]: query slot q against key slot k
        work[rows, owners[s]] = flat.work_at(s)
        kind[rows, owners[s]] = flat.kind_at(s)
    inner_rings = [g[k * w : (k + 1) * w] for g in all_groups for k in range(rounds)]
    outer_rings = [g[i::w] for g in all_groups for i in range(w)]
    in_bw, in_lat = cluster.ring_links(inner_rings, cluster_hosts(all_groups))
    out_bw, out_lat = cluster.ring_links(outer_rings, cluster_hosts(all_groups))
    members_arr = np.asarray(members)
    # the inner ring's own schedule gives only its payloads (the flat schedule gives the work);
    # with documents, one document spans it, so a layout that needs documents has some
    inner_len = w * config.block_tokens
    documents = None if config.run.segment_ids is None else np.zeros(inner_len, dtype=np.int64)
    sub = config.replace(
        hosts=w, seq_len=inner_len, speed=None, segment_ids=documents, sliding_window=None
    )
    inner = sub.schedule()
    backward = config.run.pass_ == Pass.BACKWARD
    early_kv = backward and config.run.overlap
    labels = []
    for o in range(rounds):
        labels += [f"round {o} step {j}" for j in range(w)]
        labels.append(f"outer k, v {o}")
        if backward:
            labels.append(f"outer dk, dv {o}")
    part = Piece(labels, R, kv=early_kv)
    per_round = w + 1 + backward
    kv_bytes = Costs(sub).kv_bytes
    grad_bytes = Costs(sub).grad_bytes
    flops = 0.0
    ready = np.zeros(R)
    if config.machine.hardware.pass_overhead_s:
        ready = ready + config.machine.hardware.pass_overhead_s / _speed(config)
    outer_free = np.zeros(R)
    inner_free = np.zeros(R)
    dkv_in = np.zeros(R)  # when the incoming dk, dv sum of this round's block has arrived
    slot = np.arange(R)
    succ = (slot + w) % R  # outer successor
    # without jitter or per-host speeds a seed draws nothing: rings on the same links take the
    # same durations in every round, so their configs and costs are made once
    quiet = config.noise.jitter == 0 and config.noise.speed is None
    inner_costs: dict[tuple, Costs] = {}
    clock = None
    for o in range(rounds):
        base = o * per_round
        round_end = np.empty(R)
        home = np.empty(R)
        for k in range(rounds):
            hosts = slice(k * w, (k + 1) * w)
            i = np.arange(w)
            q = k * w + i
            step_work = np.empty((w, w))
            step_kind = np.empty((w, w), dtype=np.int8)
            step_key = np.empty((w, w), dtype=np.int64)
            for j in range(w):
                key = ((k - o) % rounds) * w + (i - j) % w
                step_work[j], step_kind[j] = work[q, key], kind[q, key]
                step_key[j] = key
            links = (tuple(in_bw[members_arr[hosts]]), tuple(in_lat[members_arr[hosts]]))
            if quiet and links in inner_costs:  # the same ring again: its durations, no draws
                costs = inner_costs[links]
                costs.flops_total = 0.0
            else:
                cfg = sub.replace(
                    hop_bandwidth=links[0],
                    hop_latency=links[1],
                    speed=None if config.noise.speed is None else tuple(config.noise.speed[hosts]),
                    seed=config.noise.seed + 7919 * o + k,
                )
                costs = inner_costs[links] = Costs(cfg)
            view = {n: np.full((w, w), np.nan) for n in ("cs", "ce", "ss", "se", "ks", "ke")}
            step = iter(range(w))

            def emit(*arrays, view=view, step=step):
                j = next(step)
                for name, arr in zip(("cs", "ce", "ss", "se", "ks", "ke"), arrays, strict=True):
                    if arr is not None:
                        view[name][j] = arr

            pairs = (np.broadcast_to(q, (w, w)), step_key)
            schedule = _RoundSchedule(inner, step_work, step_kind, pairs, flat)
            RING_ENGINES[engine](
                schedule,
                costs.ring_rows(schedule),
                config.run.overlap,
                ready[hosts].copy(),
                inner_free[hosts].copy(),
                emit,
            )
            flops += costs.flops_total
            rs = slice(base, base + w)
            a = part.a
            for name in ("cs", "ce", "ss", "se"):
                a[name][rs, hosts] = view[name]
            a["rs"][rs, hosts] = np.roll(view["ss"], 1, axis=1)
            a["re"][rs, hosts] = np.roll(view["se"], 1, axis=1)
            if early_kv:
                a["ks"][rs, hosts], a["ke"][rs, hosts] = view["ks"], view["ke"]
                a["krs"][rs, hosts] = np.roll(view["ks"], 1, axis=1)
                a["kre"][rs, hosts] = np.roll(view["ke"], 1, axis=1)
            for name in ("se", "ke"):
                ends = np.fmax.reduce(view[name], axis=0)
                inner_free[hosts] = np.fmax(inner_free[hosts], ends)
            round_end[hosts] = view["ce"][-1]
            # backward: dk, dv of the round's first block come home on the last inner hop
            home[hosts] = np.roll(view["se"][-1], 1) if backward and w > 1 else view["ce"][-1]
        if backward:
            part.grad_rows[base : base + w] = True
        if not quiet or clock is None:
            outer = config.replace(
                hop_bandwidth=tuple(out_bw[members]),
                hop_latency=tuple(out_lat[members]),
                seed=config.noise.seed + 104729 + o,
            )
            clock = HostClock(outer)
        nxt = round_end.copy()
        a = part.a
        if o < rounds - 1:  # the next round's block, sent while this round computes
            start = np.maximum(ready, outer_free)
            end = start + clock.transfer(kv_bytes)
            r = base + w
            a["ss"][r], a["se"][r] = start, end
            a["rs"][r, succ], a["re"][r, succ] = start, end
            outer_free = end
            arrival = np.empty(R)
            arrival[succ] = end
            nxt = np.maximum(nxt, arrival)
        if backward and rounds > 1:
            if w > 1:
                nxt = np.maximum(nxt, home)
            start = np.maximum(np.maximum(home, outer_free), dkv_in)
            end = start + clock.transfer(grad_bytes)
            r = base + w + 1
            a["ss"][r], a["se"][r] = start, end
            a["rs"][r, succ], a["re"][r, succ] = start, end
            outer_free = end
            dkv_in = np.empty(R)
            dkv_in[succ] = end
            part.grad_rows[r] = True
            if o == rounds - 1:  # the sum arrives home
                nxt = np.maximum(nxt, dkv_in)
        ready = nxt
    return part, flops


def _links_of(groups: list[list[int]], cluster: Cluster, window: int | None) -> list[tuple]:
    """What of the cluster each group's double ring reads (``double_ring``): its window and
    its members' inner- and outer-ring links, as bytes (``run_distinct``'s keys)."""
    hosts = cluster_hosts(groups)
    windows = [inner_window(cluster, g, window) for g in groups]
    if len(set(windows)) > 1:  # no two groups alike: keys that never repeat
        return [(i,) for i in range(len(groups))]
    w = windows[0]
    rounds = len(groups[0]) // w
    inner = [g[k * w : (k + 1) * w] for g in groups for k in range(rounds)]
    outer = [g[i::w] for g in groups for i in range(w)]
    links = (*cluster.ring_links(inner, hosts), *cluster.ring_links(outer, hosts))
    return [(w, *(np.asarray(a)[g].tobytes() for a in links)) for g in groups]


def cluster_hosts(groups: list[list[int]]) -> int:
    return max(max(g) for g in groups) + 1


def _speed(config: RingConfig):
    return 1.0 if config.noise.speed is None else np.asarray(config.noise.speed)


class DoubleRing(Strategy):
    record = DOUBLE_RING

    def rounds(self, ring: int, per_node: int) -> int:
        return -(-ring // max(per_node, 1))

    def check_fits(self, config, grid, cluster, window) -> None:
        U, R = grid.ulysses, grid.ring
        nbytes = TABLE_BYTES * R * R + 3 * PIECE_BYTES * 3 * R * config.run.hosts  # rows <= 3R
        timer = "double ring"
        check_cells(grid, timer, cells=U * R * R, nbytes=nbytes, limit=DOUBLE_RING_MAX_CELLS)
        w = inner_window(cluster, grid.ring_group(0), window)
        steps = U * R * R // w
        if steps > DOUBLE_RING_MAX_STEPS:
            raise ValueError(
                f"{where(grid)}, window={w}: the double ring's timer would take {steps:.3g} "
                f"inner-ring steps (R^2 / window per ring group), more than its limit of "
                f"2^{DOUBLE_RING_MAX_STEPS.bit_length() - 1}; a larger window takes fewer"
            )

    def distinct(self, ring: int, per_node: int) -> bool:
        """Inner rings of ``per_node`` members: the flat ring when one node holds the whole
        ring (``window = R``), no inner ring with one member per node, and none at all where
        one node's members do not divide the ring (the default window must)."""
        return 2 <= per_node < ring and ring % per_node == 0

    def run(self, config, grid, cluster, window, engine) -> StrategyResult:
        def double_rings(configs: list[RingConfig], groups: list[list[int]], cluster: Cluster):
            done = run_distinct(
                configs,
                _links_of(groups, cluster, window),
                lambda i: double_ring(configs[i], groups[i], groups, cluster, window, engine),
                tag=("double-ring", engine, window),
            )
            return [p for p, _ in done], sum(f for _, f in done)

        memory = self.working_set_bytes(config, grid.ulysses)
        return run_two_level(
            config,
            grid,
            cluster,
            double_rings,
            strategy=self.name,
            memory_bytes=memory,
            engine=engine,
        )

    def working_set_bytes(self, config: RingConfig, ulysses_degree: int = 1) -> float:
        """A ring host's, plus one more block: the one the outer ring carries."""
        U, run = ulysses_degree, config.run
        block = run.seq_len // (run.hosts // U)
        outer = config.shape.split(U).kv_bytes(block, pass_=run.pass_)
        return two_level_memory(config, U, lambda: ring_working_set(config, U) + outer)
