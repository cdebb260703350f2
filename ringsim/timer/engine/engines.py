"""The two engines of the event timer: the rules of one ring pass, executed twice.

The timer never re-derives the ring: it reads ``kv_owner``/``work_at`` (what each host computes
at each step), ``payload`` (what it sends after the step) and ``send_to``/``recv_from`` from the
schedule, and turns them into seconds with the cost model (``ringsim.timer.cost``). A ring pass over
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

  ``HostClock.block`` is that one formula; both engines read it through ``Costs.ring_rows``.
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

* **sliding window**: the ring runs its live steps only (``Schedule.ring_steps``); after one
  the block jumps ``hops_after(s)`` hosts ahead in one message (``HostClock.transfer`` with
  ``hops``: the slowest hop it spans), so a "previous step" or "neighbour" in the rules above
  is the previous ring step and the host the jump comes from or goes to; a skipped step costs
  nothing, and nothing moves after the last ring step but, backward, ``dk, dv`` going home.
  Without a window every step is a ring step and every jump one hop.

Per-host ``speed`` factors divide compute times (a straggler has ``speed < 1``); ``jitter``
multiplies every compute and every transfer by its own ``1 + jitter * u``, ``u ~ U[0, 1)``
from a generator seeded with ``seed`` (noise only ever slows an event down). ``HostClock``
holds both rules; the strategies of ``ringsim.timer.strategies`` use it too.

The ``Timeline`` has one row per ring step (none for a step a window skips), local phase or
decode round, and one column per host, in seconds; NaN where a host does nothing. In a ring
pass ``recv[s, h]`` is ``send[s, h - 1]`` (``h - hops`` after a jump): the same transfer seen
from the other end. For a backward pass with
overlap the ``send``/``recv`` arrays hold the ``dk, dv`` messages (the payload sent after the
step), and the meta the early ``k, v`` ones: ``kv_send_start``, ``kv_send_end``,
``kv_recv_start``, ``kv_recv_end`` (read them with ``kv_messages``), and ``grad_rows``, the
rows whose ``send``/``recv`` carry ``dk, dv`` (``grad_rows()``; in a training step the forward
ring's rows carry blocks).

Two engines execute the same rules: ``vectorized`` loops over steps and does NumPy vector ops
over hosts, holding only the previous step's row (``O(P)`` memory: 16,384 hosts in seconds);
``heap`` is a plain discrete-event loop with a priority queue, one event at a time, checking the
rules operationally. They agree exactly; the heap engine is the oracle the tests hold the fast
one to. Both hand every finished row to a ``Recorder``, which sums what a summary needs
(``O(P)``) and keeps the ``(rows, P)`` timeline arrays only when asked to.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

import numpy as np

from ringsim.schedule import Pass

Emit = Callable[..., None]
"""``emit(cs, ce, ss, se, ks, ke)``: one finished row, ``(P,)`` each; ``ss``/``se`` (``ks``/``ke``)
are ``None`` in a row whose hosts send nothing (no early ``k, v``). The arrays are the engine's
buffers: read them at once, they are reused two steps later."""


def _pad(buf: np.ndarray) -> None:
    """Padded ``(P + 2,)`` row: index ``h + 1`` holds host ``h``, index 0 repeats host ``P - 1``
    and index ``P + 1`` host 0, so both neighbours are views."""
    buf[0], buf[-1] = buf[-2], buf[1]


# --------------------------------------------------------------------------------------------
# The vectorised engine: a loop over steps, vector operations over hosts.
# --------------------------------------------------------------------------------------------
def _block_leaves(start, arrived, link_free, prev_end, prev_sent, hops: int = 1) -> None:
    """Write into ``start`` when the step-``s`` block leaves each host (overlap): once it is here
    (``arrived``), the link is free, and the receiver (``hops`` hosts ahead) has room, i.e. it
    has computed its previous ring step (``prev_end``) and sent that block on (``prev_sent``;
    both padded, ``None`` at step 0)."""
    P = start.shape[0]
    np.maximum(arrived, link_free, out=start)
    if prev_end is not None:
        np.maximum(start, _at(prev_end, hops, P), out=start)
        np.maximum(start, _at(prev_sent, hops, P), out=start)


def _at(padded: np.ndarray, offset: int, P: int) -> np.ndarray:
    """Host ``h + offset``'s value for every host ``h``, from a padded row: a view for a
    neighbour or the host itself, a gather for a jump of several hosts."""
    if -1 <= offset <= 1:
        return padded[1 + offset : P + 1 + offset]
    return padded[1 : P + 1][(np.arange(P) + offset) % P]


def _ring_vectorized(schedule, row, overlap, ready, link_free, emit: Emit) -> None:
    """The rules of the module docstring as recurrences from one ring step to the next, over
    two padded rows per quantity (``O(P)`` memory whatever the number of steps). The block of
    a ring step comes from ``hops`` hosts back, where the previous ring step sent it
    (``Schedule.hops_after``: one without a window)."""
    P, steps = schedule.hosts, schedule.ring_steps
    me = slice(1, P + 1)
    backward = schedule.pass_ == Pass.BACKWARD
    early_kv = backward and overlap
    mx = np.maximum
    rows = [{k: np.full(P + 2, np.nan) for k in ("ce", "ss", "se", "ke")} for _ in range(2)]
    hops_in = 1
    for n, s in enumerate(steps):
        cur, prev = rows[n % 2], rows[(n - 1) % 2] if n else None
        compute, kv_time, msg_time = row(s)
        sends = bool(schedule.payload(s))
        hops = schedule.hops_after(s) or 1  # to the receiver (when something is sent)
        cs = np.empty(P)
        ce, ss, se = cur["ce"][me], cur["ss"][me], cur["se"][me]
        if prev is None:
            arrived = ready
            cs[...] = ready
        else:
            arrived = _at(prev["ke"] if early_kv else prev["se"], -hops_in, P)
            mx(prev["ce"][me], arrived, out=cs)
            if not overlap:  # no computing while its own last send is on the wire
                mx(cs, prev["se"][me], out=cs)
        np.add(cs, compute, out=ce)
        _pad(cur["ce"])
        ks = ke = None
        if early_kv and n < len(steps) - 1 and sends:  # k, v leave like a forward block
            ks, ke = np.empty(P), cur["ke"][me]
            prev_ce, prev_ke = (None, None) if prev is None else (prev["ce"], prev["ke"])
            _block_leaves(ks, arrived, link_free, prev_ce, prev_ke, hops)
            np.add(ks, kv_time, out=ke)
            _pad(cur["ke"])
            link_free = ke
        else:
            cur["ke"][...] = np.nan
        if not sends:
            cur["ss"][...] = cur["se"][...] = np.nan
            emit(cs, ce, None, None, ks, ke)
        else:
            if not overlap:  # blocking send/receive once both neighbours finished the step
                mx(ce, _at(cur["ce"], hops, P), out=ss)
                mx(ss, link_free, out=ss)
            elif backward:  # dk, dv: after the compute, with the incoming sum added
                mx(ce, ready if prev is None else _at(prev["se"], -hops_in, P), out=ss)
                mx(ss, link_free, out=ss)
                if prev is not None:  # the receiver has taken in the previous sum
                    mx(ss, _at(prev["ss"], hops, P), out=ss)
            else:  # forward
                prev_ce, prev_se = (None, None) if prev is None else (prev["ce"], prev["se"])
                _block_leaves(ss, arrived, link_free, prev_ce, prev_se, hops)
            np.add(ss, msg_time, out=se)
            link_free = se
            _pad(cur["ss"])
            _pad(cur["se"])
            emit(cs, ce, ss, se, ks, ke)
        hops_in = hops


# --------------------------------------------------------------------------------------------
# The heap engine: one event at a time, rules checked against the state (the oracle).
# --------------------------------------------------------------------------------------------
class _HeapRing:
    """Discrete-event simulation of one ring pass with a priority queue of end events. Arrays
    are indexed by ring step (``n``: the ``n``-th of ``schedule.ring_steps``) and host; the
    block of ring step ``n`` goes ``hops[n]`` hosts ahead after it."""

    def __init__(self, schedule, row, overlap, ready, link_free, out: dict[str, np.ndarray]):
        self.sched, self.overlap, self.out = schedule, overlap, out
        self.steps = schedule.ring_steps
        self.P, self.S = schedule.hosts, len(self.steps)
        self.sends = [bool(schedule.payload(s)) for s in self.steps]
        self.hops = [schedule.hops_after(s) or 1 for s in self.steps]
        # how far apart two hosts that talk are: 0 and the neighbours, and every jump
        self.near = {0, 1, -1} | set(self.hops) | {-d for d in self.hops}
        self.backward = schedule.pass_ == Pass.BACKWARD
        self.early_kv = self.backward and overlap
        rows = [row(s) for s in self.steps]
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
        self.kv_in = np.zeros(shape, bool)  # block of ring step n present at h
        self.grads_in = np.zeros(shape, bool)  # dk, dv of ring step n present at h (backward)
        self.done = {"kv": np.zeros(shape, bool), "msg": np.zeros(shape, bool)}
        self.begun = {"kv": np.zeros(shape, bool), "msg": np.zeros(shape, bool)}
        self.pieces = [self._pieces() for _ in range(self.P)]
        self.next_piece = np.zeros(self.P, int)
        self.link_busy = np.zeros(self.P, bool)
        self.queue: list = []
        self.order = 0

    def _pieces(self) -> list[tuple[str, int]]:
        pieces = []
        for n in range(self.S):
            if self.early_kv and self.sends[n] and n < self.S - 1:
                pieces.append(("kv", n))
            if self.sends[n]:
                pieces.append(("msg", n))
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
            self._settle(now, {h + d for d in self.near})

    def _apply(self, kind: str, h: int, s: int) -> None:
        receiver = (h + self.hops[s]) % self.P if s >= 0 else h
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
                pending.extend({(h + d) % self.P for d in self.near})

    def _try_compute(self, now: float, h: int) -> bool:
        s = self.next_step[h]
        if self.computing[h] or s >= self.S or not self.started[h] or not self.kv_in[s, h]:
            return False
        if not self.overlap and s > 0 and not self.done["msg"][s - 1, h]:
            return False
        self.computing[h] = True
        self.out["cs"][s, h] = now
        self.out["ce"][s, h] = end = now + self.compute[s, h]
        self._push(end, "compute", h, s)
        return True

    def _ready_to_send(self, kind: str, s: int, h: int) -> bool:
        r = (h + self.hops[s]) % self.P
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
        names = ("ks", "ke") if kind == "kv" else ("ss", "se")
        start, end = self.out[names[0]], self.out[names[1]]
        start[s, h], end[s, h] = now, now + duration
        self._push(end[s, h], kind, h, s)
        return True


def _ring_heap(schedule, row, overlap, ready, link_free, emit: Emit) -> None:
    P, S = schedule.hosts, len(schedule.ring_steps)
    out = {name: np.full((S, P), np.nan) for name in ("cs", "ce", "ss", "se", "ks", "ke")}
    _HeapRing(schedule, row, overlap, ready, link_free, out).run()
    early_kv = schedule.pass_ == Pass.BACKWARD and overlap
    for n, s in enumerate(schedule.ring_steps):
        sends = bool(schedule.payload(s))
        kv = early_kv and sends and n < S - 1
        row = {name: out[name][n] for name in out}
        if not sends:
            row["ss"] = row["se"] = None
        if not kv:
            row["ks"] = row["ke"] = None
        emit(*(row[name] for name in ("cs", "ce", "ss", "se", "ks", "ke")))


RING_ENGINES = {"vectorized": _ring_vectorized, "heap": _ring_heap}
