"""The ring schedule: who holds which key/value block at each step, and what it does with it.

This object is the heart of ringsim. Three executors read it and nothing else about the ring:
the NumPy numerics (``ringsim.numerics.ring``), the event timer (``ringsim.timer``) and the
torch.distributed backend (``kernels.distributed.ring``).

The ring is unidirectional: host ``h`` sends to ``h + 1`` and receives from ``h - 1`` (mod P).
At step ``s`` host ``h`` holds the key/value block that host ``(h - s) mod P`` owns.

* **forward** (``P`` steps): after each of the first ``P - 1`` steps every host passes on its
  ``(k, v)`` block; so each host sends exactly ``P - 1`` blocks.
* **backward** (``P`` steps): the block travels with its gradient accumulators
  ``(k, v, dk, dv)``; after the last step only ``(dk, dv)`` move, one more hop, which brings
  them home to the block's owner. ``dq`` never leaves its host.

Each (step, host) cell is classified by the mask of the pair (query block of ``h``, kv block of
its owner): ``FULL`` (every pair visible), ``PARTIAL`` (the mask cuts through the block, e.g.
the diagonal) or ``SKIP`` (nothing visible: no compute, but the block still passes through).
``work_at(step)`` gives the fraction of the block's pairs a kernel computes, exactly or at a
tile granularity; the timer turns it into time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property

import numpy as np

from ringsim.checks import check_bool, check_choice, check_positive_int, check_segment_ids
from ringsim.layouts import Layout, get_layout
from ringsim.masks import BlockKind, count_visible, tile_shape


class Pass(StrEnum):
    """What runs: a ring's ``forward`` or ``backward`` pass, a transformer block's
    ``train-step`` (a forward ring, then a backward one) or ``decode`` (one new token against
    a sharded cache, no ring). A member is its name as a string (``Pass.FORWARD`` is the string
    ``"forward"``), so flags, JSON and configs keep their text; code asks the member, never
    spells the name."""

    FORWARD = "forward"
    BACKWARD = "backward"
    TRAIN_STEP = "train-step"
    DECODE = "decode"

    @property
    def rings(self) -> tuple[Pass, ...]:
        """The ring passes it runs, in order (none for decode)."""
        return {
            Pass.FORWARD: (Pass.FORWARD,),
            Pass.BACKWARD: (Pass.BACKWARD,),
            Pass.TRAIN_STEP: (Pass.FORWARD, Pass.BACKWARD),
            Pass.DECODE: (),
        }[self]

    @property
    def has_backward(self) -> bool:
        """Whether a backward ring runs (its ``k, v`` may travel early; its peak memory is the
        backward's)."""
        return Pass.BACKWARD in self.rings


PASSES = tuple(Pass)
"""Every pass, the one declaration (the command line's ``--pass`` choices, ``RingConfig``)."""
RING_PASSES = (Pass.FORWARD, Pass.BACKWARD)
"""The passes a ring schedule runs (``build_schedule``), and one kernel call."""

KV_PAYLOAD = ("k", "v")
BACKWARD_PAYLOAD = ("k", "v", "dk", "dv")
HOMECOMING_PAYLOAD = ("dk", "dv")


@dataclass(frozen=True)
class Schedule:
    """The ring schedule as data. Build it with ``build_schedule``.

    ``work_at(s)[h]`` and ``kind_at(s)[h]`` describe host ``h`` at step ``s``; the ``(P, P)``
    matrices ``kv_owners``, ``work`` and ``kind`` hold all steps (rows) and hosts (columns).
    """

    hosts: int
    layout: Layout
    causal: bool
    pass_: Pass
    seq_len: int
    tile: int | None = None
    segment_ids: np.ndarray | None = field(default=None, repr=False, compare=False)
    tile_n: int | None = None

    # -- geometry ---------------------------------------------------------------------------
    @property
    def steps(self) -> int:
        return self.hosts

    @property
    def block_tokens(self) -> int:
        return self.seq_len // self.hosts

    @cached_property
    def positions(self) -> np.ndarray:
        """``(P, c)`` global positions held by each host (materialised on first use)."""
        return self.layout.positions(self.hosts, self.seq_len, self.segment_ids)

    @cached_property
    def send_to(self) -> np.ndarray:
        """``(P,)`` the neighbour each host sends to."""
        return (np.arange(self.hosts) + 1) % self.hosts

    @cached_property
    def recv_from(self) -> np.ndarray:
        """``(P,)`` the neighbour each host receives from."""
        return (np.arange(self.hosts) - 1) % self.hosts

    def kv_owner(self, step: int) -> np.ndarray:
        """``(P,)`` owner of the kv block each host holds at ``step``."""
        return (np.arange(self.hosts) - step) % self.hosts

    def relation_at(self, step: int) -> np.ndarray:
        """``(P,)`` sign of (the kv block's owner - the host) at ``step``: 0 for the host's own
        block, -1 for one from an earlier host, +1 from a later one (what a causal layout's
        kernel call depends on)."""
        return np.sign(self.kv_owner(step) - np.arange(self.hosts))

    def payload(self, step: int) -> tuple[str, ...]:
        """What every host sends to ``send_to`` after computing ``step`` (empty: nothing)."""
        if self.hosts == 1:
            return ()
        last = step == self.steps - 1
        if self.pass_ == Pass.FORWARD:
            return () if last else KV_PAYLOAD
        return HOMECOMING_PAYLOAD if last else BACKWARD_PAYLOAD

    # -- work per block ---------------------------------------------------------------------
    @cached_property
    def _work_tables(self) -> tuple[np.ndarray, np.ndarray]:
        """Exact and tile-granular work fractions, per relation (3,) where the layout's masks
        depend only on it (``Layout.by_relation``, no documents), else per pair (P, P)."""
        c = self.block_tokens
        if self.segment_ids is not None or not self.layout.by_relation:
            pos, seg = self.positions, self.segment_ids
            shape = (self.hosts, self.hosts)
            exact, tiled = np.empty(shape), np.empty(shape)
            for i in range(self.hosts):
                for j in range(self.hosts):
                    kw = dict(causal=self.causal)
                    if seg is not None:
                        kw.update(q_seg=seg[pos[i]], k_seg=seg[pos[j]])
                    exact[i, j] = count_visible(pos[i], pos[j], **kw) / c**2
                    tiled[i, j] = count_visible(pos[i], pos[j], **kw, **self._tile_kw) / c**2
            return exact, tiled
        exact, tiled = np.zeros(3), np.zeros(3)
        for rel, (i, j) in enumerate([(1, 0), (0, 0), (0, 1)]):
            if max(i, j) >= self.hosts:
                continue  # a one-host ring has only the diagonal relation
            args = (self.layout, self.hosts, c, i, j, self.causal)
            exact[rel] = visible_pairs(*args) / c**2
            tiled[rel] = visible_pairs(*args, **self._tile_kw) / c**2
        return exact, tiled

    @property
    def _tile_kw(self) -> dict:
        return dict(tile=self.tile, tile_n=self.tile_n)

    @property
    def by_relation(self) -> bool:
        """Whether every (step, host) cell is determined by its relation alone (the layout's
        masks depend only on it and there are no documents): ``spread`` then lays per-relation
        values over the hosts."""
        return self._work_tables[1].ndim == 1

    def relations_at(self, step: int) -> tuple[int, ...]:
        """The relations (-1: an earlier host's block, 0: its own, +1: a later host's) some
        host has at ``step``."""
        return (0,) if step == 0 else (-1, 1)

    def relation_cell(self, relation: int) -> tuple[int, float]:
        """``(kind, work)`` of every cell of ``relation`` (a ``by_relation`` schedule): its
        ``BlockKind`` and the fraction of the block computed (as ``kind_at``, ``work_at``)."""
        exact, tiled = self._work_tables
        frac = float(exact[relation + 1])
        kind = BlockKind.SKIP if frac == 0 else BlockKind.FULL if frac == 1 else BlockKind.PARTIAL
        return int(kind), float(tiled[relation + 1])

    def spread(self, values, step: int, dtype=float) -> np.ndarray:
        """``(P,)`` the per-relation ``values`` ``[earlier, own, later]`` (indexable by
        ``relation + 1``) laid over the hosts at ``step``, without per-host arithmetic (the
        timer calls this ``P`` times for ``P`` hosts): owner ``(h - step) mod P`` is ``h``
        itself at step 0, comes after ``h`` for ``h < step`` and before ``h`` for
        ``h >= step > 0``."""
        row = np.empty(self.hosts, dtype=dtype)
        row[:step] = values[2]
        row[step:] = values[1] if step == 0 else values[0]
        return row

    def _lookup(self, table: np.ndarray, step: int) -> np.ndarray:
        if table.ndim == 2:
            return table[np.arange(self.hosts), self.kv_owner(step)]
        return self.spread(table, step)

    def work_at(self, step: int) -> np.ndarray:
        """``(P,)`` fraction of the ``c x c`` block each host computes at ``step``.

        Exact (an ideal kernel) unless the schedule was built with ``tile`` (queries) and
        ``tile_n`` (keys, default ``tile``), in which case a partially visible tile counts whole.
        """
        return self._lookup(self._work_tables[1], step)

    def exact_work_at(self, step: int) -> np.ndarray:
        """``(P,)`` fraction of visible pairs, ignoring tiles."""
        return self._lookup(self._work_tables[0], step)

    def kind_at(self, step: int) -> np.ndarray:
        """``(P,)`` ``BlockKind`` of each host's block at ``step``."""
        frac = self.exact_work_at(step)
        kind = np.full(self.hosts, BlockKind.PARTIAL, dtype=np.int8)
        kind[frac == 0] = BlockKind.SKIP
        kind[frac == 1] = BlockKind.FULL
        return kind

    @property
    def kv_owners(self) -> np.ndarray:
        return np.stack([self.kv_owner(s) for s in range(self.steps)])

    @property
    def work(self) -> np.ndarray:
        return np.stack([self.work_at(s) for s in range(self.steps)])

    @property
    def kind(self) -> np.ndarray:
        return np.stack([self.kind_at(s) for s in range(self.steps)])

    def sends_per_host(self, item: str = "k") -> int:
        """How many times each host sends ``item`` (every host sends the same number)."""
        return sum(item in self.payload(s) for s in range(self.steps))

    # -- a view for people ------------------------------------------------------------------
    def describe(self, max_hosts: int = 8) -> str:
        """A step x host table: ``kv3 full ->1`` = holds host 3's block, computes all of it,
        then sends it to host 1."""
        names = {BlockKind.SKIP: "skip", BlockKind.PARTIAL: "part", BlockKind.FULL: "full"}
        hosts = min(self.hosts, max_hosts)
        head = "step | " + " | ".join(f"host {h:<8d}" for h in range(hosts))
        lines = [
            f"{self.pass_} ring, {self.hosts} hosts, {self.layout}, "
            f"{'causal' if self.causal else 'full'} attention, {self.block_tokens} tokens/block",
            head,
            "-" * len(head),
        ]
        for s in range(self.steps):
            owners, kinds, sends = self.kv_owner(s), self.kind_at(s), self.payload(s)
            arrow = "->" if sends == KV_PAYLOAD or sends == BACKWARD_PAYLOAD else "=>"
            cells = []
            for h in range(hosts):
                tail = f"{arrow}{self.send_to[h]}" if sends else ""
                cells.append(f"kv{owners[h]} {names[BlockKind(kinds[h])]} {tail}".ljust(13))
            lines.append(f"{s:4d} | " + " | ".join(cells))
        if self.pass_ == Pass.BACKWARD and self.hosts > 1:
            lines.append("-> sends k, v, dk, dv;  => sends only dk, dv home to their owner")
        if hosts < self.hosts:
            lines.append(f"({self.hosts - hosts} more hosts not shown)")
        return "\n".join(lines)


# -- visible pairs of a block in closed form ------------------------------------------------------
_TILE_CHUNK = 1 << 20  # query tiles per vector pass: bounded memory whatever the block


def visible_pairs(
    layout: str | Layout,
    hosts: int,
    c: int,
    q_host: int,
    kv_host: int,
    causal: bool,
    tile: int | None = None,
    tile_n: int | None = None,
) -> int:
    """``count_visible`` for the blocks of two hosts of a ``layout`` with ``c`` tokens each,
    without building their ``c`` positions where the layout has formulas (the timer runs
    blocks of half a billion tokens).

    Exact counts (``tile`` ``None`` or 1) are the layout's closed forms
    (``Layout.causal_pairs``). A tiled count sums, over query tiles, the query tile's size
    times the keys of the key tiles that start at or before its last position; the key tiles
    that do are a prefix (positions are sorted), counted from the layout's position formula
    (``Layout.position``, ``Layout.key_tiles_starting_by``), one vector over query tiles at a
    time. Tiles are ``tile`` queries x ``tile_n`` keys (``tile_n`` default ``tile``)."""
    if not causal:
        return c * c
    layout = get_layout(layout)
    tile, tile_n = tile_shape(tile, tile_n)
    if tile is None:
        exact = layout.causal_pairs(c, int(np.sign(kv_host - q_host)))
        if exact is not None:
            return exact
        local = np.arange(c, dtype=np.int64)
        q_pos = layout.position(hosts, c, q_host, local)
        return count_visible(q_pos, layout.position(hosts, c, kv_host, local), causal=True)
    n_q, n_k = -(-c // tile), -(-c // tile_n)  # query and key tiles
    total = 0
    for first in range(0, n_q, _TILE_CHUNK):
        a = np.arange(first, min(first + _TILE_CHUNK, n_q), dtype=np.int64)
        ends = np.minimum((a + 1) * tile, c)  # one past each query tile's last local index
        last_q = layout.position(hosts, c, q_host, ends - 1)
        live = layout.key_tiles_starting_by(hosts, c, kv_host, tile_n, n_k, last_q)
        total += int(((ends - a * tile) * np.minimum(live * tile_n, c)).sum())
    return total


def build_schedule(
    hosts: int,
    layout: str | Layout = "contiguous",
    causal: bool = False,
    pass_: str = "forward",
    *,
    seq_len: int | None = None,
    tile: int | None = None,
    segment_ids: np.ndarray | None = None,
    tile_n: int | None = None,
) -> Schedule:
    """Build the ring schedule for ``hosts`` hosts.

    ``seq_len`` defaults to ``2 * hosts`` tokens (enough to classify blocks, which is all a
    schedule needs without timing); ``tile`` sets the kernel tile for ``work_at`` (``tile``
    queries x ``tile_n`` keys; ``tile_n`` default ``tile``, and it needs ``tile``);
    ``segment_ids`` ``(seq_len,)`` make the work per block data dependent (packed documents).
    """
    hosts = check_positive_int("hosts", hosts)
    layout = get_layout(layout)
    pass_ = Pass(check_choice("pass", pass_, RING_PASSES))
    seq_len = layout.check_seq_len(2 * hosts if seq_len is None else seq_len, hosts, segment_ids)
    if tile is not None:
        tile = check_positive_int("tile", tile)
    if tile_n is not None:
        tile_n = check_positive_int("tile_n", tile_n)
        tile_shape(tile, tile_n)  # refuses tile_n without tile
    segment_ids = check_segment_ids(segment_ids, seq_len)
    causal = check_bool("causal", causal)
    return Schedule(hosts, layout, causal, pass_, seq_len, tile, segment_ids, tile_n)
