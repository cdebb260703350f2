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

**Under a sliding window** (``sliding_window=W``, the rule of ``ringsim.masks``) most blocks
are ``SKIP``: a query sees only the ``W`` tokens before it, so a host needs only the blocks near
its own. A cell is *live* (``live_at``, ``live``) when its block holds a visible pair; a step is
live (``live_steps``) when some host's cell is. The windowed ring runs only the live steps
(``ring_steps``): after live step ``s`` each block jumps ``hops_after(s)`` hosts ahead, straight
to the host that next computes with it (one message, ``send_to_at``/``recv_from_at``), so the
dead steps between cost nothing and the ring stops after the last live step; backward, the
gradients then go home in one message of ``P - s`` hops. Contiguous under a causal window runs
steps ``0..ceil((W-1)/c)`` and stops; zigzag's two chunks need blocks from both sides, so its
ring jumps from the first steps to the last. Without a window every step is a ring step and
every hop is one neighbour: the schedule of the full ring, unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property

import numpy as np

from ringsim.checks import check_bool, check_choice, check_positive_int, check_segment_ids
from ringsim.layouts import Layout, get_layout
from ringsim.masks import (
    BlockKind,
    check_sliding_window,
    count_visible,
    offset_bounds,
    pairs_within,
    tile_shape,
)


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
    ``sliding_window``: ``W`` tokens (``ringsim.masks``); then ``ring_steps``, ``hops_after``
    and ``payload`` describe the windowed ring, which runs the live steps only.
    """

    hosts: int
    layout: Layout
    causal: bool
    pass_: Pass
    seq_len: int
    tile: int | None = None
    segment_ids: np.ndarray | None = field(default=None, repr=False, compare=False)
    tile_n: int | None = None
    sliding_window: int | None = None

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
        """What every host sends to ``send_to_at(step)`` after computing ``step`` (empty:
        nothing; a step the windowed ring skips sends nothing)."""
        if self.hosts == 1 or self.hops_after(step) == 0:
            return ()
        last = step == self.ring_steps[-1]
        if self.pass_ == Pass.FORWARD:
            return KV_PAYLOAD
        return HOMECOMING_PAYLOAD if last else BACKWARD_PAYLOAD

    def mask_args(self, q_host: int, kv_host: int, kind: int) -> dict:
        """The block primitive's mask keywords for ``q_host``'s queries against ``kv_host``'s
        block, classified ``kind``: global positions and documents, and the causal mask and the
        window only where the block is ``PARTIAL`` (a ``FULL`` block needs no mask)."""
        pos, seg = self.positions, self.segment_ids
        partial = kind == BlockKind.PARTIAL
        args = dict(
            q_pos=pos[q_host],
            k_pos=pos[kv_host],
            causal=self.causal and partial,
            q_seg=None if seg is None else seg[pos[q_host]],
            k_seg=None if seg is None else seg[pos[kv_host]],
        )
        if self.sliding_window is not None and partial:
            args["sliding_window"] = self.sliding_window
        return args

    # -- the ring that runs: every step, or under a window the live ones --------------------
    @cached_property
    def ring_steps(self) -> Sequence[int]:
        """The steps the ring runs, in order: all ``P`` without a window (a ``range``, no
        list of ``P`` steps); under one the live steps (``live_steps``: step 0 always, every
        host sees itself)."""
        if self.sliding_window is None:
            return range(self.steps)
        return self.live_steps

    def hops_after(self, step: int) -> int:
        """How many hosts ahead each block travels after ``step``: to the next ring step's
        holder (forward after the last: 0, nothing moves), backward after the last ring step
        ``s`` home to its owner, ``P - s`` hops (0 if it never left). 1 without a window."""
        if self.sliding_window is None:  # every step, one hop (O(1): rings of 2^40 hosts)
            if not 0 <= step < self.steps:
                return 0
            last = step == self.steps - 1
            return 0 if last and self.pass_ == Pass.FORWARD else 1 % self.steps
        steps, at = self.ring_steps, self._ring_index.get(step)
        if at is None:
            return 0
        if at + 1 < len(steps):
            return steps[at + 1] - step
        return 0 if self.pass_ == Pass.FORWARD else (self.steps - step) % self.steps

    @cached_property
    def _ring_index(self) -> dict[int, int]:
        return {s: n for n, s in enumerate(self.ring_steps)}

    def send_to_at(self, step: int) -> np.ndarray:
        """``(P,)`` the host each host sends to after ``step``: ``hops_after(step)`` ahead
        (``send_to``, the neighbour, where that is one hop or nothing is sent)."""
        return (np.arange(self.hosts) + (self.hops_after(step) or 1)) % self.hosts

    def recv_from_at(self, step: int) -> np.ndarray:
        """``(P,)`` the host each host receives from after ``step`` (mirror of ``send_to_at``)."""
        return (np.arange(self.hosts) - (self.hops_after(step) or 1)) % self.hosts

    # -- the calls of a windowed cell ------------------------------------------------------
    def pairs_at(self, step: int) -> tuple[np.ndarray, np.ndarray]:
        """``(query hosts, kv hosts)`` ``(P,)`` each: whose queries meet whose block at
        ``step`` (every host, and the owner of the block it holds)."""
        return np.arange(self.hosts), self.kv_owner(step)

    def cell_key(self, q_hosts: np.ndarray, kv_hosts: np.ndarray) -> np.ndarray:
        """A key per cell that equal cells share: the owners' distance where the layout's
        masks depend on it alone (``_table_mode`` ``"offset"``), else the pair."""
        if self._table_mode == "offset":
            return np.asarray(kv_hosts) - np.asarray(q_hosts)
        return np.asarray(q_hosts) * self.hosts + np.asarray(kv_hosts)

    def cell_calls(self, q_host: int, kv_host: int):
        """The kernel calls of ``q_host``'s queries against ``kv_host``'s block under the
        sliding window (``Layout.window_calls``: one per pair of runs the window reaches, cut
        to what it needs), ``None`` where the layout has no runs or documents are packed."""
        if self.sliding_window is None or self.segment_ids is not None:
            return None
        return self.layout.window_calls(
            self.hosts,
            self.block_tokens,
            int(q_host),
            int(kv_host),
            self.sliding_window,
            self.causal,
        )

    # -- liveness: which cells hold a visible pair ------------------------------------------
    def live_at(self, step: int) -> np.ndarray:
        """``(P,)`` bool: host ``h`` computes some pair of its block at ``step`` (not ``SKIP``)."""
        return self.exact_work_at(step) > 0

    @property
    def live(self) -> np.ndarray:
        """``(P, P)`` bool, steps x hosts: ``live_at`` of every step."""
        return np.stack([self.live_at(s) for s in range(self.steps)])

    @cached_property
    def live_steps(self) -> tuple[int, ...]:
        """The steps at which some host computes (``O(P)`` where the cells depend on the
        relation or the owners' distance alone)."""
        return tuple(int(s) for s in np.flatnonzero(self._live_step_mask))

    @property
    def live_pairs(self) -> np.ndarray:
        """``(P,)`` how many of the ``P`` kv blocks each host computes any pair of."""
        exact, mode, P = self._work_tables[0], self._table_mode, self.hosts
        if mode == "pair":
            return (exact > 0).sum(axis=1)
        h = np.arange(P)
        if mode == "relation":
            live = exact > 0
            return live[1] + live[0] * h + live[2] * (P - 1 - h)
        live = np.concatenate([[0], np.cumsum(exact > 0)])  # offset o at index o + P - 1
        earlier = live[P] - live[P - 1 - h]  # owners h - s, s = 0..h: offsets -h..0
        later = live[2 * P - 1 - h] - live[P]  # owners h - s + P, s > h: offsets 1..P-1-h
        return earlier + later

    @cached_property
    def _live_step_mask(self) -> np.ndarray:
        exact, mode, P = self._work_tables[0], self._table_mode, self.hosts
        if mode == "pair":
            rows = np.arange(P)
            return np.array([np.any(exact[rows, self.kv_owner(s)] > 0) for s in range(P)])
        if mode == "relation":
            later = exact[0] > 0 or exact[2] > 0
            return np.array([exact[1] > 0] + [later] * (P - 1))
        s = np.arange(P)
        earlier = exact[P - 1 - s] > 0  # hosts h >= s hold owner h - s (always some)
        later = (s > 0) & (exact[(2 * P - 1 - s) % (2 * P - 1)] > 0)  # hosts h < s: owner h-s+P
        return earlier | later

    # -- work per block ---------------------------------------------------------------------
    @cached_property
    def _table_mode(self) -> str:
        """How the work tables are indexed: ``"relation"`` (3,) where the layout's masks depend
        only on the relation (``Layout.by_relation``, no documents, no window); under a window
        ``"offset"`` (2P - 1,) by the owners' distance ``kv host - query host`` where the
        layout's masks depend only on it (``Layout.by_offset``, no documents); else
        ``"pair"`` (P, P)."""
        plain = self.segment_ids is None
        if self.sliding_window is not None:
            return "offset" if plain and self.layout.by_offset else "pair"
        return "relation" if plain and self.layout.by_relation else "pair"

    @cached_property
    def _work_tables(self) -> tuple[np.ndarray, np.ndarray]:
        """Exact and tile-granular work fractions, indexed as ``_table_mode`` says."""
        if self.sliding_window is not None:
            return self._window_tables()
        c = self.block_tokens
        if self._table_mode == "pair":
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

    def _window_tables(self) -> tuple[np.ndarray, np.ndarray]:
        """The work tables under a sliding window: exact counts in closed form from the
        layout's runs (``masks.pairs_within``) where it has them, else from the positions;
        tiled counts from the positions of the live pairs only (a dead pair is 0 either way)."""
        P, c = self.hosts, self.block_tokens
        if self._table_mode == "offset":
            offsets = np.arange(1 - P, P)  # kv host - query host
            q_hosts = np.maximum(0, -offsets)
            pairs = np.column_stack([q_hosts, q_hosts + offsets])
        else:
            pairs = np.indices((P, P)).reshape(2, -1).T
        exact = self._window_exact(pairs) / c**2
        tiled = exact.copy()
        if self.tile is not None:
            for n in np.flatnonzero(exact > 0):
                tiled[n] = self._window_count(*pairs[n], **self._tile_kw) / c**2
        shape = (2 * P - 1,) if self._table_mode == "offset" else (P, P)
        return exact.reshape(shape), tiled.reshape(shape)

    def _window_exact(self, pairs: np.ndarray) -> np.ndarray:
        """Visible pairs of each ``(query host, kv host)`` row of ``pairs`` under the window."""
        c = self.block_tokens
        runs = None if self.segment_ids is not None else self.layout.runs(self.hosts, c, 0)
        if runs is None:
            return np.array([self._window_count(i, j) for i, j in pairs], dtype=float)
        starts = np.stack([self.layout.runs(self.hosts, c, h)[0] for h in range(self.hosts)])
        _, length, stride = runs
        low, high = offset_bounds(self.causal, self.sliding_window)
        out = np.empty(len(pairs))
        chunk = max(1, 2**22 // starts.shape[1] ** 2)  # bounded memory for huge rings
        for a in range(0, len(pairs), chunk):
            i, j = pairs[a : a + chunk].T
            offset = starts[i][:, :, None] - starts[j][:, None, :]
            out[a : a + chunk] = pairs_within(offset, length, length, stride, low, high).sum((1, 2))
        return out

    def _window_count(self, i: int, j: int, **tile_kw) -> int:
        """``count_visible`` of query host ``i`` against kv host ``j`` under the window."""
        deal = self.layout.positions_of_host
        q_pos = deal(self.hosts, self.seq_len, int(i), self.segment_ids)
        k_pos = deal(self.hosts, self.seq_len, int(j), self.segment_ids)
        seg = self.segment_ids
        kw = {} if seg is None else dict(q_seg=seg[q_pos], k_seg=seg[k_pos])
        return count_visible(
            q_pos, k_pos, causal=self.causal, sliding_window=self.sliding_window, **kw, **tile_kw
        )

    @property
    def _tile_kw(self) -> dict:
        return dict(tile=self.tile, tile_n=self.tile_n)

    @property
    def by_relation(self) -> bool:
        """Whether every (step, host) cell is determined by its relation alone (the layout's
        masks depend only on it, no documents, no window): ``spread`` then lays per-relation
        values over the hosts."""
        return self._table_mode == "relation"

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
        mode, hosts = self._table_mode, np.arange(self.hosts)
        if mode == "pair":
            return table[hosts, self.kv_owner(step)]
        if mode == "offset":
            return table[self.kv_owner(step) - hosts + self.hosts - 1]
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
        window = "" if self.sliding_window is None else f", window {self.sliding_window}"
        lines = [
            f"{self.pass_} ring, {self.hosts} hosts, {self.layout}, "
            f"{'causal' if self.causal else 'full'} attention{window}, "
            f"{self.block_tokens} tokens/block",
            head,
            "-" * len(head),
        ]
        for s in range(self.steps):
            if s not in self.ring_steps:
                lines.append(f"{s:4d} | (skipped: no host computes, no block stops here)")
                continue
            owners, kinds, sends = self.kv_owner(s), self.kind_at(s), self.payload(s)
            arrow = "->" if sends == KV_PAYLOAD or sends == BACKWARD_PAYLOAD else "=>"
            to = self.send_to_at(s)
            cells = []
            for h in range(hosts):
                tail = f"{arrow}{to[h]}" if sends else ""
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
    sliding_window: int | None = None,
) -> Schedule:
    """Build the ring schedule for ``hosts`` hosts.

    ``seq_len`` defaults to ``2 * hosts`` tokens (enough to classify blocks, which is all a
    schedule needs without timing); ``tile`` sets the kernel tile for ``work_at`` (``tile``
    queries x ``tile_n`` keys; ``tile_n`` default ``tile``, and it needs ``tile``);
    ``segment_ids`` ``(seq_len,)`` make the work per block data dependent (packed documents);
    ``sliding_window`` ``W`` masks all but the ``W`` latest tokens (``ringsim.masks``) and makes
    the ring run its live steps only (``Schedule.ring_steps``).
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
    sliding_window = check_sliding_window(sliding_window)
    return Schedule(
        hosts, layout, causal, pass_, seq_len, tile, segment_ids, tile_n, sliding_window
    )
