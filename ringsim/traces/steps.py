"""One rank's ring passes, found in its events: the messages it posted, grouped into the
transfers of its steps, and the compute between them.

A ring step posts its transfer (sends and receives, together), computes, and waits for the
transfer; the next step posts the next. So on each rank:

* a ``Message`` is one send or receive: ``post`` when the host posted it (the ``c10d::send``
  or ``c10d::recv_`` op), ``done`` when it completed (the end of the ``gloo:send`` or
  ``gloo:recv`` span that follows the op on a CPU, or of the first NCCL ``SendRecv`` kernel
  launched after it on a GPU);
* a ``Batch`` is the messages of one step: posts with no other host activity between them;
* a step's compute (``Work``) is what the host issued between its post and the next: kernels
  on the streams that are not NCCL's, or, on a rank without a device, the ring thread's host
  ops. It may hold an attention call of a known family and the merges after it, or plain
  matmuls and a softmax: whatever it is, it is the step's compute;
* a pass is the batches under one host op that encloses them (the ring's autograd function:
  ``RingAttention``, ``RingFlashAttnFunc``; a ``record_function`` range), or, with no such op,
  ``per_pass`` batches at a time.

The last step of a forward pass posts nothing: its compute follows the last transfer's, and
``split_last`` divides the work after the last post between the two last steps.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from dataclasses import dataclass, field

from ringsim.traces.events import Event, RankRecord, TraceError
from ringsim.traces.kinds import (
    DTYPES,
    MACHINERY,
    OTHER,
    PARAM_COMMS,
    WAIT_CALLS,
    Role,
    classify,
)

HOST_OPS = ("cpu_op", "nvtx", "user_annotation")
API_CALLS = ("cuda_runtime", "cuda_driver")  # Kineto's CUDA API calls (Triton launches: driver)


@dataclass
class Message:
    """One send or receive: ``direction`` (``send``, ``recv``, or ``sendrecv`` for an NCCL
    kernel that runs both), ``post``/``done`` seconds, the ``peer`` rank, the tensor's
    ``dims``, ``dtype`` and element count ``nelems`` when recorded."""

    direction: str
    post: float
    done: float
    peer: int | None = None
    dims: tuple[int, ...] | None = None
    dtype: str | None = None
    nelems: int | None = None

    @property
    def elements(self) -> int | None:
        return math.prod(self.dims) if self.dims is not None else self.nelems


@dataclass
class Batch:
    """The messages one step posts together; ``post`` the first post, ``done`` the last
    completion."""

    messages: list[Message]

    @property
    def post(self) -> float:
        return min(m.post for m in self.messages)

    @property
    def done(self) -> float:
        return max(m.done for m in self.messages)

    def side(self, direction: str) -> list[Message]:
        """Its sends (``"send"``) or receives (``"recv"``); an NCCL group kernel is both."""
        return [m for m in self.messages if m.direction in (direction, "sendrecv")]


@dataclass
class Work:
    """One compute interval (``start``/``end`` where it ran; ``launch`` when the host issued
    it: a kernel's runtime call, a host op's own start) and its ``role``."""

    start: float
    end: float
    launch: float
    role: Role
    event: Event


@dataclass
class RankPass:
    """One pass of the ring on one rank: its ``batches``, its ``work``, when it ran
    (``start``/``end``: its enclosing op's, else its first post to the next pass's), the name
    of that ``container`` op (``None``: found by counting), ``waits``: when its host waited
    for a transfer (a GPU ring's ``cudaStreamWaitEvent``; none recorded on a CPU), and, once
    ``assign_steps`` ran, each step's work."""

    batches: list[Batch]
    work: list[Work]
    start: float
    end: float
    container: str | None = None
    steps: list[list[Work]] = field(default_factory=list)
    waits: list[float] = field(default_factory=list)

    @property
    def calls(self) -> list[Work]:
        return [w for w in self.work if w.role.kind == "attention"]

    @property
    def pass_(self) -> str | None:
        """``"forward"`` or ``"backward"`` by its attention calls (``None``: none known)."""
        votes = Counter(w.role.pass_ for w in self.calls if w.role.pass_)
        return votes.most_common(1)[0][0] if votes else None


@dataclass
class RankRing:
    """What one rank did: its ``passes`` and the ``record`` it came from; ``host_ops`` maps a
    host op's id (Kineto's ``External id``) to the op, where kernels find their shapes."""

    record: RankRecord
    passes: list[RankPass]
    host_ops: dict[int, Event]


def rank_ring(record: RankRecord, per_pass: int | None = None) -> RankRing:
    """The passes of one rank (``per_pass``: batches per pass when no op encloses them);
    ``TraceError`` for a rank that sends nothing."""
    roles = [classify(e) for e in record.events]
    messages = _messages(record, roles)
    if not messages:
        collectives = sorted(
            {e.name for e, r in zip(record.events, roles, strict=True) if r.kind == "collective"}
        )
        if collectives:
            raise TraceError(
                f"{record.source}: its communication is {', '.join(collectives[:3])}, not a "
                f"ring's send and receive: ringsim compare reads rings"
            )
        raise TraceError(f"{record.source}: no send or receive: not a ring's trace")
    lane = _ring_lane(record, roles)
    work = _work(record, roles, messages, lane)
    machinery = _merged(
        (e.start, e.end) for e in record.events if e.lane == lane and e.name.startswith(MACHINERY)
    )
    batches = _batches(messages, _boundaries(record, messages, lane, machinery))
    passes = _passes(record, batches, work, lane, per_pass)
    waits = sorted(
        e.start
        for e in record.events
        if e.category in API_CALLS
        and e.name in WAIT_CALLS
        and e.lane == lane
        and not _inside(machinery, e.start)
    )
    for p in passes:
        p.waits = waits[bisect.bisect_left(waits, p.start) : bisect.bisect_right(waits, p.end)]
    host_ops = {e.link: e for e in record.events if e.category in HOST_OPS and e.link is not None}
    return RankRing(record, passes, host_ops)


# -- messages ------------------------------------------------------------------------------
def _messages(record: RankRecord, roles: list[Role]) -> list[Message]:
    """The rank's sends and receives: host ops paired with what completed them."""
    found = [(e, r) for e, r in zip(record.events, roles, strict=True) if r.kind == "transfer"]
    ops = [(e, r) for e, r in found if not e.device and r.transfer.peer_arg is not None]
    spans = [(e, r) for e, r in found if not e.device and r.transfer.peer_arg is None]
    kernels = [e for e, _ in found if e.device]
    if kernels and not ops and any(r.kind == "collective" for r in roles):
        kernels = []  # NCCL's SendRecv kernels of an all-to-all (c10d::alltoall_), no ring's
    comms = sorted(
        (e.start, DTYPES.get(str(e.args.get("dtype")), ""))
        for e in record.events
        if e.name == PARAM_COMMS
    )
    messages = []
    queues = _span_queues(spans)
    for op, role in ops:
        span = _span_after(op, role.transfer.direction, queues)
        dims, dtype = _tensor(span if span is not None else op)
        messages.append(
            Message(
                role.transfer.direction,
                post=op.start,
                done=op.end if span is None else span.end,
                peer=_peer(op, role),
                dims=dims,
                dtype=dtype or _comms_dtype(comms, op),
            )
        )
    if not ops:  # gloo spans with no c10d op recorded
        for span, role in spans:
            dims, dtype = _tensor(span)
            messages.append(
                Message(role.transfer.direction, span.start, span.end, None, dims, dtype)
            )
    if kernels:
        _complete_on_device(messages, kernels, record)
    return sorted(messages, key=lambda m: m.post)


def _span_queues(spans: list) -> dict[tuple[str, str], list[Event]]:
    """The ``gloo:send``/``gloo:recv`` spans by (thread, direction), in time order."""
    queues: dict[tuple[str, str], list[Event]] = {}
    for span, role in spans:
        queues.setdefault((span.lane, role.transfer.direction), []).append(span)
    for queue in queues.values():
        queue.reverse()  # popped from the end: earliest first
    return queues


def _span_after(op: Event, direction: str, queues: dict) -> Event | None:
    """The ``gloo:send``/``gloo:recv`` span the op started: the first unused one of the same
    direction on its thread that starts at or after it (ops come in time order)."""
    queue = queues.get((op.lane, direction), [])
    while queue and queue[-1].start < op.start:
        queue.pop()  # a span no op of ours started
    return queue.pop() if queue else None


def _peer(op: Event, role: Role) -> int | None:
    """The peer rank among the op's ``Concrete Inputs`` (``c10d::send(tensors, group, dst,
    tag)``)."""
    concrete = op.args.get("Concrete Inputs")
    index = role.transfer.peer_arg
    if isinstance(concrete, list) and index is not None and index < len(concrete):
        text = str(concrete[index])
        return int(text) if text.lstrip("-").isdigit() else None
    return None


def _tensor(event: Event) -> tuple[tuple[int, ...] | None, str | None]:
    """The first input tensor's dims and dtype of a host op recorded with shapes."""
    dims, types = event.args.get("Input Dims"), event.args.get("Input type")
    first = dims[0] if isinstance(dims, list) and dims else None
    while isinstance(first, list) and first and isinstance(first[0], list):  # a TensorList
        first = first[0]
    shape = None
    if isinstance(first, list) and first and all(type(x) is int for x in first):
        shape = tuple(first)
    dtype = None
    if isinstance(types, list) and types and isinstance(types[0], str):
        dtype = DTYPES.get(types[0])
    return shape, dtype


def _comms_dtype(comms: list[tuple[float, str]], op: Event) -> str | None:
    """The ``dtype`` of the ``record_param_comms`` op nested in ``op`` (NCCL's ops);
    ``comms``: ``(start, dtype)`` of the rank's ``record_param_comms`` ops, sorted."""
    i = bisect.bisect_left(comms, (op.start, ""))
    if i < len(comms) and comms[i][0] <= op.end:
        return comms[i][1] or None
    return None


def _complete_on_device(messages: list[Message], kernels: list[Event], record) -> None:
    """On a GPU the host op only enqueues: a message completes when the NCCL kernel carrying
    it ends, the first one launched at or after its post. With no host op recorded, each
    kernel is a message of its own (sizes from the kernel's collective fields)."""
    launches = launch_times(record)
    when = lambda k: launches.get(k.args.get("correlation"), k.start)
    kernels = sorted(kernels, key=when)
    if not messages:
        for k in kernels:
            nelems = k.args.get("In msg nelems")
            dtype = DTYPES.get(str(k.args.get("dtype")))
            count = nelems if type(nelems) is int else None
            messages.append(Message("sendrecv", when(k), k.end, dtype=dtype, nelems=count))
        return
    at = [when(k) for k in kernels]
    for m in messages:
        i = bisect.bisect_left(at, m.post)
        if i < len(kernels):
            m.done = kernels[i].end


def launch_times(record: RankRecord) -> dict[object, float]:
    """``correlation id -> start`` of the rank's CUDA API calls (a kernel's launch: the
    runtime's ``cudaLaunchKernel``, or the driver's ``cuLaunchKernelEx`` for Triton)."""
    return {e.args.get("correlation"): e.start for e in record.events if e.category in API_CALLS}


# -- compute ---------------------------------------------------------------------------------
def _ring_lane(record: RankRecord, roles: list[Role]) -> str | None:
    """The host thread that posts the ring's transfers."""
    lanes = Counter(
        e.lane for e, r in zip(record.events, roles, strict=True) if r.kind == "transfer"
    )
    host = [lane for lane, _ in lanes.most_common() if lane.startswith("thread")]
    return host[0] if host else None


def _machinery(event: Event) -> bool:
    return event.name.startswith(MACHINERY) or event.category in API_CALLS


def _work(record: RankRecord, roles, messages: list[Message], lane: str | None) -> list[Work]:
    """The compute of the rank: kernels (and copies) on the streams that are not NCCL's, or,
    on a rank without device activity, the ring thread's host ops that enclose no post."""
    pairs = list(zip(record.events, roles, strict=True))
    device = [(e, r) for e, r in pairs if e.device and r.kind not in ("transfer", "collective")]
    if device:
        launches = launch_times(record)
        return [
            Work(e.start, e.end, launches.get(e.args.get("correlation"), e.start), r, e)
            for e, r in device
        ]
    posts = sorted(m.post for m in messages)
    work = []
    for e, r in pairs:
        if e.device or e.lane != lane or e.category not in ("cpu_op", "nvtx"):
            continue
        if r.kind in ("transfer", "collective") or _machinery(e) or _encloses(e, posts):
            continue
        work.append(Work(e.start, e.end, e.start, r if r.kind == "attention" else OTHER, e))
    return work


def _encloses(event: Event, posts: list[float]) -> bool:
    i = bisect.bisect_left(posts, event.start)
    return i < len(posts) and posts[i] <= event.end


def _inside(spans: list[tuple[float, float]], t: float) -> bool:
    """Whether ``t`` falls in one of ``spans`` (sorted, disjoint)."""
    i = bisect.bisect_left(spans, (t, -math.inf)) - 1
    return i >= 0 and spans[i][0] < t <= spans[i][1]


def _boundaries(record: RankRecord, messages: list[Message], lane, machinery) -> list[float]:
    """Starts of the ring thread's host activity that is not posting a transfer (outside the
    ``machinery`` spans, enclosing no post): between two posts, such activity means they
    belong to different steps."""
    posts = sorted(m.post for m in messages)
    return sorted(
        e.start
        for e in record.events
        if e.lane == lane
        and not e.device
        and not e.name.startswith(MACHINERY)
        and not _encloses(e, posts)
        and not _inside(machinery, e.start)
    )


def _merged(intervals) -> list[tuple[float, float]]:
    """The union of ``(start, end)`` intervals as sorted disjoint ones."""
    out: list[tuple[float, float]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


# -- batches and passes ------------------------------------------------------------------------
def _batches(messages: list[Message], boundaries: list[float]) -> list[Batch]:
    """Posts with no other host activity between them, each before the previous ones
    completed, are one step's batch."""
    batches: list[Batch] = []
    for m in messages:
        if batches:
            last = batches[-1]
            i = bisect.bisect_right(boundaries, last.messages[-1].post)
            between = i < len(boundaries) and boundaries[i] < m.post
            if not between and m.post < last.done:
                last.messages.append(m)
                continue
        batches.append(Batch([m]))
    return batches


def _passes(record, batches: list[Batch], work: list[Work], lane, per_pass) -> list[RankPass]:
    """The rank's passes: the batches under one enclosing host op each (the innermost one
    around a batch), else ``per_pass`` batches at a time."""
    containers = _containers(record, batches, lane)
    if all(c is not None for c in containers):
        groups: list[list[int]] = []
        for i, c in enumerate(containers):
            if groups and containers[groups[-1][0]] is c:
                groups[-1].append(i)
            else:
                groups.append([i])
    elif per_pass:
        groups = [
            list(range(i, min(i + per_pass, len(batches))))
            for i in range(0, len(batches), per_pass)
        ]
    else:
        raise TraceError(
            f"{record.source}: no op encloses the ring's passes (record the ring inside a "
            f"function or a record_function range) and the number of hosts is unknown: pass "
            f"--hosts"
        )
    work = sorted(work, key=lambda w: w.launch)
    launches = [w.launch for w in work]
    passes = []
    for n, group in enumerate(groups):
        container = containers[group[0]]
        if container is not None:
            start, end = container.start, container.end
        else:  # from this pass's first post to the next pass's
            start = batches[group[0]].post
            nxt = [batches[groups[n + 1][0]].post] if n + 1 < len(groups) else []
            later = work[bisect.bisect_left(launches, start) :]
            tail = [w.end for w in later] + [batches[group[-1]].done]
            end = nxt[0] if nxt else max(tail)
        mine = work[bisect.bisect_left(launches, start) : bisect.bisect_left(launches, end)]
        name = None if container is None else container.name
        passes.append(RankPass([batches[i] for i in group], mine, start, end, name))
    return passes


def _containers(record: RankRecord, batches: list[Batch], lane) -> list[Event | None]:
    """For each batch, the innermost host op of the ring thread that encloses all its posts
    (not a transfer op, not a profiler step)."""
    firsts = [b.post for b in batches]
    best: list[Event | None] = [None] * len(batches)
    for e in record.events:
        if e.device or e.lane != lane or e.category not in HOST_OPS or _machinery(e):
            continue
        lo = bisect.bisect_left(firsts, e.start)
        hi = bisect.bisect_right(firsts, e.end)
        for i in range(lo, hi):
            inside = batches[i].messages[-1].post <= e.end
            if inside and (best[i] is None or e.duration < best[i].duration):
                best[i] = e
    return best


# -- steps -------------------------------------------------------------------------------------
def assign_steps(ring_pass: RankPass, expected_last: tuple[bool, bool] | None = None) -> None:
    """Fill ``ring_pass.steps``: step ``k`` gets the work issued between post ``k`` and post
    ``k + 1``, less what the host issued after it waited for transfer ``k`` (``waited``: that
    is the next step's, issued before the next post); the work after the last post is split
    between the last two steps (``split_last``); work issued before the first post is the
    pass's setup, no step's. ``expected_last``: whether the schedule has this rank compute at
    each of the last two steps, when known."""
    batches = ring_pass.batches
    posts = [b.post for b in batches]
    steps: list[list[Work]] = [[] for _ in range(len(posts) + 1)]
    for w in ring_pass.work:
        k = bisect.bisect_right(posts, w.launch) - 1
        if k >= 0:
            steps[min(k, len(posts) - 1)].append(w)
    for k in range(len(posts) - 1):
        i = waited(steps[k], batches[k], ring_pass.waits)
        steps[k], steps[k + 1] = steps[k][:i], steps[k][i:] + steps[k + 1]
    steps[-2], steps[-1] = split_last(steps[-2], batches[-1], ring_pass.waits, expected_last)
    ring_pass.steps = steps


def waited(work: list[Work], batch: Batch, waits: list[float]) -> int:
    """The index in ``work`` (a step's, in launch order) where the host waited for ``batch``:
    after the first wait call it made once the batch was posted, when it recorded one (a
    GPU's ``cudaStreamWaitEvent``), else where a gap in the work ends at the batch's
    completion (``after_wait``)."""
    posted = batch.messages[-1].post
    i = bisect.bisect_right(waits, posted)
    if i < len(waits):
        return bisect.bisect_right([w.launch for w in work], waits[i])
    return after_wait(work, batch.done)


def after_wait(work: list[Work], done: float) -> int:
    """Where the host waited for a transfer that completed at ``done``: the index of the
    first item that started at or after ``done`` when everything before it had ended before
    ``done`` (a gap that the wait explains); ``len(work)`` when there is none (the transfer
    completed while the step still computed: what follows is the step's own)."""
    ended = -math.inf
    for i, w in enumerate(work):
        if i and ended < done <= w.start:
            return i
        ended = max(ended, w.end)
    return len(work)


def call_groups(work: list[Work]) -> list[list[Work]]:
    """The attention calls of ``work``: runs of consecutive attention intervals (a family
    that launches several kernels per call, FA2's split-KV and combine, is one call)."""
    groups: list[list[Work]] = []
    previous = False
    for w in work:
        attention = w.role.kind == "attention"
        if attention and previous:
            groups[-1].append(w)
        elif attention:
            groups.append([w])
        previous = attention
    return groups


def split_last(
    tail: list[Work], batch: Batch, waits: list[float], expected: tuple[bool, bool] | None
) -> tuple[list[Work], list[Work]]:
    """The work after the last post, split between the second-to-last and the last step:
    where the host waited for the last transfer (``waited``), and at the latest at the
    second attention call. When the schedule says the second-to-last step computes nothing
    (``expected``), all of it is the last step's (its call, or the pass's final casts)."""
    if expected is not None and not expected[0]:
        return [], tail
    i = waited(tail, batch, waits)
    groups = call_groups(tail)
    if len(groups) >= 2:
        i = min(i, tail.index(groups[1][0]))
    return tail[:i], tail[i:]
