"""The run's configuration, from what its trace carries: hosts, block size, heads, head dim,
batch, element type, pass, mask and layout, each with where it came from.

* shapes: the attention calls' host ops recorded with shapes (``record_shapes=True``): ``q``
  and ``k``'s dims, read in the order the call's kernel family takes them; else the messages'
  element counts with the heads and head dim given as flags;
* the element type: the calls' ``Input type``, else the messages';
* the pass: the calls' kernels or ops (forward or backward);
* mask and layout: how many calls each rank makes per pass (a contiguous causal ring has rank
  ``r`` compute ``r + 1`` blocks), half-block calls (zigzag), a causal flag among a call's
  ``Concrete Inputs``.

A flag always wins over the trace (``hints``); what neither gives is reported as missing,
with the flag that supplies it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from ringsim.schedule import Pass
from ringsim.traces.events import Event
from ringsim.traces.kinds import DTYPES, KERNEL_TYPES, AttentionFamily
from ringsim.traces.steps import RankPass, RankRing, Work, call_groups

FLAGS = {
    "hosts": "--hosts",
    "block_tokens": "--seq-len",
    "heads": "--heads",
    "kv_heads": "--kv-heads",
    "head_dim": "--head-dim",
    "batch": "--batch",
    "dtype": "--dtype",
    "pass_": "--pass",
    "causal": "--causal",
    "layout": "--layout",
}
NEEDED = ("hosts", "block_tokens", "heads", "head_dim", "dtype")
BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}


@dataclass
class RunShape:
    """The inferred configuration: ``values`` (keys of ``FLAGS``), ``sources`` (each value's
    origin: ``trace: ...``, ``flag``, or ``assumed: ...``), the attention ``family`` found (or
    ``None``), and ``notes`` for the report."""

    values: dict[str, object] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    family: AttentionFamily | None = None
    notes: list[str] = field(default_factory=list)

    def set(self, key: str, value: object, source: str) -> None:
        if key not in self.values and value is not None:
            self.values[key] = value
            self.sources[key] = source

    def missing(self) -> list[str]:
        return [key for key in NEEDED if key not in self.values]

    def missing_message(self) -> str:
        """One line: what the trace lacks and the flags that supply it."""
        flags = ", ".join(FLAGS[k] for k in self.missing())
        return (
            f"the trace does not say {', '.join(k.replace('_', ' ') for k in self.missing())}: "
            f"pass {flags} (record with torch.profiler.profile(record_shapes=True) to keep the "
            f"shapes)"
        )


def call_op(ring: RankRing, work: Work) -> Event:
    """The host op that carries a call's shapes: the call itself on a host, else the op that
    launched its kernel."""
    if not work.event.device:
        return work.event
    return ring.host_ops.get(work.event.link, work.event)


def _dims(op: Event, index: int) -> tuple[int, ...] | None:
    dims = op.args.get("Input Dims")
    if isinstance(dims, list) and index < len(dims):
        d = dims[index]
        if isinstance(d, list) and d and all(type(x) is int for x in d):
            return tuple(d)
    return None


def bhsd(dims: tuple[int, ...], order: str) -> tuple[int, int, int, int] | None:
    """``(batch, heads, tokens, head_dim)`` from a tensor's dims in ``order`` (``"bhsd"`` or
    ``"bshd"``; a 3-d tensor has no batch)."""
    if len(dims) == 3:
        dims = (1, *dims)
    if len(dims) != 4:
        return None
    if order == "bshd":
        b, s, h, d = dims
    else:
        b, h, s, d = dims
    return b, h, s, d


@dataclass(frozen=True)
class CallShape:
    q: tuple[int, int, int, int]
    k: tuple[int, int, int, int]
    dtype: str | None
    causal: bool | None


def call_shape(ring: RankRing, group: list[Work]) -> CallShape | None:
    """The shape of one call (its first kernel's host op), or ``None`` if not recorded."""
    work = group[0]
    family = work.role.family
    op = call_op(ring, work)
    q, k = _dims(op, 0), _dims(op, 1)
    if family is None or q is None or k is None:
        return None
    q4, k4 = bhsd(q, family.dims), bhsd(k, family.dims)
    if q4 is None or k4 is None:
        return None
    types = op.args.get("Input type")
    dtype = DTYPES.get(types[0]) if isinstance(types, list) and types else None
    causal = None
    concrete, index = op.args.get("Concrete Inputs"), family.causal_index(op.name)
    if index is not None and isinstance(concrete, list) and index < len(concrete):
        causal = {"True": True, "False": False}.get(str(concrete[index]))
    return CallShape(q4, k4, dtype, causal)


def infer_shape(
    rings: list[RankRing], passes: list[RankPass], hosts: int, hints: Mapping[str, object]
) -> RunShape:
    """The configuration of ``passes`` (one per ring member, in ring order, all of one kind)
    of a ring of ``hosts``, hints first."""
    shape = RunShape()
    for key, value in hints.items():
        shape.set(key, value, "flag")
    shape.set("hosts", hosts, "trace: ranks in the ring")
    calls = [(ring, g) for ring, p in zip(rings, passes, strict=True) for g in call_groups(p.work)]
    families = Counter(g[0].role.family for _, g in calls if g[0].role.family)
    if families:
        shape.family = families.most_common(1)[0][0]
    kinds = Counter(p.pass_ for p in passes if p.pass_)
    if kinds:
        shape.set("pass_", kinds.most_common(1)[0][0], "trace: the attention kernels")
    shape.set("pass_", "forward", "assumed: no attention call to tell (pass --pass if not)")
    shapes = [s for s in (call_shape(r, g) for r, g in calls) if s is not None]
    if shapes:
        _from_calls(shape, shapes)
    _from_messages(shape, passes)
    _from_kernel_names(shape, [g[0] for _, g in calls])
    _mask_and_layout(shape, rings, passes, shapes)
    shape.set("batch", 1, "assumed: one sequence")
    shape.set("kv_heads", shape.values.get("heads"), "assumed: as many as query heads")
    return shape


def _from_calls(shape: RunShape, shapes: list[CallShape]) -> None:
    where = "trace: the attention calls' input shapes"
    full = max(shapes, key=lambda s: s.q[2])
    b, h, c, d = full.q
    shape.set("block_tokens", c, where)
    shape.set("heads", h, where)
    shape.set("kv_heads", full.k[1], where)
    shape.set("head_dim", d, where)
    shape.set("batch", b, where)
    dtypes = Counter(s.dtype for s in shapes if s.dtype)
    if dtypes:
        shape.set("dtype", dtypes.most_common(1)[0][0], "trace: the attention calls' inputs")


def _from_messages(shape: RunShape, passes: list[RankPass]) -> None:
    """The element type, and the block size from the kv messages when the heads and head
    dim are known (a forward step sends ``k`` and ``v``: ``2 b h_kv c d`` elements)."""
    messages = [m for p in passes for b in p.batches for m in b.side("send")]
    dtypes = Counter(m.dtype for m in messages if m.dtype)
    if dtypes:
        shape.set("dtype", dtypes.most_common(1)[0][0], "trace: the messages")
    v = shape.values
    if "block_tokens" in v or shape.values.get("pass_", Pass.FORWARD) != Pass.FORWARD:
        return
    dims = [m.dims for m in messages if m.dims is not None and len(m.dims) == 4]
    if dims and shape.family is not None:  # the kv block as the family's calls take it
        b, kv_heads, c, d = bhsd(Counter(dims).most_common(1)[0][0], shape.family.dims)
        where = "trace: the kv messages' shapes"
        for key, value in (("block_tokens", c), ("kv_heads", kv_heads), ("head_dim", d)):
            shape.set(key, value, where)
        shape.set("batch", b, where)
        shape.set("heads", kv_heads, "assumed: as many as kv heads (no call shape recorded)")
        return
    per_step = [sum(m.elements or 0 for m in b.side("send")) for p in passes for b in p.batches]
    per_step = [n for n in per_step if n > 0]
    kv_heads = v.get("kv_heads", v.get("heads"))
    if per_step and kv_heads and v.get("head_dim"):
        elements = Counter(per_step).most_common(1)[0][0]
        c, rest = divmod(elements, 2 * v.get("batch", 1) * kv_heads * v["head_dim"])
        if c > 0 and rest == 0:
            shape.set("block_tokens", c, "trace: the kv messages' sizes")


def _from_kernel_names(shape: RunShape, calls: list[Work]) -> None:
    """The element type from the attention kernels' template arguments (an Nsight export
    records no input types)."""
    for dtype, pattern in KERNEL_TYPES:
        if any(w.event.device and pattern.search(w.event.name) for w in calls):
            shape.set("dtype", dtype, "trace: the attention kernels' template arguments")
            return


def _mask_and_layout(shape, rings, passes: list[RankPass], shapes: list[CallShape]) -> None:
    """Causal and layout from the calls per rank, half-block calls and causal flags."""
    P = len(passes)
    counts = [len(call_groups(p.work)) for p in passes]
    c = shape.values.get("block_tokens")
    half = c is not None and any(s.q[2] * 2 == c or s.k[2] * 2 == c for s in shapes)
    flagged = any(s.causal for s in shapes)
    if not any(counts):
        shape.notes.append(
            "no attention call of a known family: each step's compute is timed whole "
            "(attention and merges not apart), the mask taken from the flags"
        )
        shape.set("causal", False, "assumed: no call to tell (pass --causal if it was)")
        shape.set("layout", "contiguous", "assumed: no call to tell")
        return
    where = f"trace: attention calls per rank {counts}"
    if P > 1 and counts == [r + 1 for r in range(P)]:
        shape.set("causal", True, where)
        shape.set("layout", "contiguous", where)
    elif all(n == P for n in counts) and half:
        shape.set("causal", True, where + " with half-block calls")
        shape.set("layout", "zigzag", where + " with half-block calls")
    elif all(n == P for n in counts) and flagged:
        shape.set("causal", True, where + " with causal calls")
        shape.set("layout", "striped", where + ", every block computed, causal calls")
    elif all(n == P for n in counts) and shapes:
        shape.set("causal", False, where + ": every block computed, none causal")
        shape.set("layout", "contiguous", "assumed: a full mask computes alike in any layout")
    elif all(n == P for n in counts):
        unknown = "assumed: every block computed and no call records its shape or mask"
        shape.set("causal", False, unknown + " (pass --causal --layout if it was)")
        shape.set("layout", "contiguous", unknown)
    else:
        shape.notes.append(
            f"attention calls per rank {counts} match no layout of {P} hosts: mask and "
            f"layout from the flags (default full, contiguous)"
        )
        shape.set("causal", False, "assumed: the calls match no layout")
        shape.set("layout", "contiguous", "assumed: the calls match no layout")
