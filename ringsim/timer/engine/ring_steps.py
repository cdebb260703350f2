"""What a real ring runs at each step: the kernel call its layout makes, and the work between
calls (merging ``(out, lse)``, accumulating ``dq, dk, dv``, casts), as real implementations do.

The call a host makes at each step is its layout's answer (``ringsim.layouts``,
``Layout.step_call``: the shapes zhuzilin/ring-flash-attention's contiguous, zigzag and
striped rings run, and TransformerEngine's for packed documents), by the block's kind and
relation (the kv block's owner before, at or after the host).

Between calls (``merge="torch"``: each PyTorch op reads its inputs from HBM and writes its
output; zhuzilin/ring-flash-attention PR #87 and vllm-project/vllm-omni PR #5187 both describe
this merge as several elementwise kernels plus bf16 <-> fp32 casts). Bytes per element of the
rows merged (``rows x heads x head_dim``):

* forward, first step: ``out = block_out.to(fp32)``: 2 read + 4 written = 6;
* forward, each later step: cast (6), ``out - block_out`` (8 + 4), ``sigmoid(..) * (..)``
  (4 + 4), ``out - (..)`` (8 + 4): 38; a sliced merge copies the rows back (+8);
* forward, end: ``out.to(bf16)`` over all ``c`` rows: 6;
* backward: first step casts ``dq, dk, dv`` to fp32 (6 each); each later step
  ``dq += dq_block``, ``dk += dk_block``, ``dv += dv_block`` (fp32 += bf16: 10 each, over the
  rows the call touched); end: three casts back (6 each);
* ``merge="fused"``: one kernel reading the fp32 accumulator and the block, writing the
  accumulator: 10 per element (and no slice copy).

Each op also costs ``family.elementwise_overhead_s``.

The host's side (``family.host_call_s``: seconds per PyTorch call, a range): a Python ring loop
issues every step's calls from the host, which runs ahead of the GPU while the GPU's step is
longer and holds it back when it is shorter, so a step takes ``max(GPU seconds, calls x
host_call_s)``. The calls per step (``HOST_CALLS``), counted in zhuzilin/ring-flash-attention
@8996282 (``ring_flash_attn.py``, ``zigzag_ring_flash_attn.py``, ``stripe_flash_attn.py``,
``utils.py``):

* a transfer: ``send_recv_kv`` (two ``empty_like``, one ``batch_isend_irecv``) and the
  ``wait`` on its four works: 7; the backward's ``dk, dv`` transfer: ``batch_isend_irecv`` and
  four waits: 5;
* the call: 1, and 3 views of ``q, k, v`` when it runs on part of the block (``q[:, 1:]``,
  ``k[:, :block_seq_len]``, ...);
* forward: the first merge 3 (cast, transpose, unsqueeze), each later one 11 (the scripted
  ``_update_out_and_lse``), a sliced one 4 more (two reads and two writes of the slice), the
  end 3; backward: the first step's 3 casts, each later step's ``dq``/``dk``/``dv`` sums 3 (4
  more sliced), the end 3 casts and the last 4 waits.
"""

from __future__ import annotations

import numpy as np

from ringsim.layouts import KernelCall, get_layout
from ringsim.masks import BlockKind
from ringsim.schedule import Pass, Schedule
from ringsim.timer.cost import AttentionShape
from ringsim.timer.engine.attention import CallTimer
from ringsim.timer.machine.families import KernelFamily, for_hardware
from ringsim.timer.machine.kernel_model import HBM_FRACTION

FORWARD_BYTES = {"first": 6, "merge": 38, "slice": 8, "final": 6}
FUSED_FORWARD_BYTES = {"first": 6, "merge": 10, "slice": 0, "final": 6}
MERGE_BYTES = {"torch": FORWARD_BYTES, "fused": FUSED_FORWARD_BYTES}
"""Bytes per element of each forward op, by ``KernelFamily.merge``."""
FORWARD_KERNELS = {"first": 2, "merge": 9, "slice": 2, "final": 2}
GRAD_BYTES = {"first": 6, "accumulate": 10, "final": 6}
HOST_CALLS = {
    "transfer": 7,
    "grad_transfer": 5,
    "call": 1,
    "views": 3,
    "first": 3,
    "merge": 11,
    "slice": 4,
    "final": 3,
    "accumulate": 3,
    "final_wait": 4,
}


def host_calls(
    pass_: str,
    call: KernelCall | tuple[KernelCall, ...] | None,
    c: int,
    *,
    first: bool,
    last: bool,
) -> int:
    """PyTorch calls the host makes in one ring step (``HOST_CALLS``, module docstring):
    ``call`` the step's kernel call (``None``: skipped; a tuple: the calls of a windowed
    block, each merged in turn) on blocks of ``c`` tokens; ``last``: no ``k, v`` travel
    after it."""
    n = HOST_CALLS
    calls = 0 if last else n["transfer"]
    if pass_ == Pass.BACKWARD:
        calls += n["grad_transfer"] + (n["final"] + n["final_wait"] if last else 0)
    elif last:
        calls += n["final"]
    for i, one in enumerate(_calls(call)):
        calls += n["call"] + (n["views"] if (one.q_tokens, one.k_tokens) != (c, c) else 0)
        if first and i == 0:
            calls += n["first"]
        else:
            calls += n["merge" if pass_ == Pass.FORWARD else "accumulate"]
            calls += n["slice"] if one.sliced else 0
    return calls


def _calls(call: KernelCall | tuple[KernelCall, ...] | None) -> tuple[KernelCall, ...]:
    """One call (a ``KernelCall`` or its plain tuple), several, or none, as a tuple of calls."""
    if call is None:
        return ()
    if isinstance(call, KernelCall) or (call and not isinstance(call[0], tuple)):
        return (KernelCall(*call),)
    return tuple(KernelCall(*one) for one in call)


def merge_seconds(
    family: KernelFamily, memory_bandwidth: float, shape: AttentionShape, *, op: str, rows: int
) -> float:
    """Seconds of one forward merge op (``"first"``, ``"merge"``, ``"slice"`` (a sliced merge:
    the merge and its copy back) or ``"final"``) over ``rows`` query rows of ``shape``'s query
    heads, on one host whose HBM streams ``memory_bandwidth`` bytes/s (0: not modelled, only
    the launch costs count)."""
    if family.merge == "none":
        return 0.0
    table = MERGE_BYTES[family.merge]
    if op not in table:
        raise ValueError(f"op must be one of {', '.join(table)}, got {op!r}")
    per_element = table[op] + (table["merge"] if op == "slice" else 0)
    kernels = FORWARD_KERNELS[op] + (FORWARD_KERNELS["merge"] if op == "slice" else 0)
    if family.merge == "fused":
        kernels = 1
    elements = float(shape.batch) * rows * shape.heads * shape.head_dim
    launches = kernels * family.elementwise_overhead_s
    return _stream(per_element * elements, memory_bandwidth) + launches


def grad_seconds(
    family: KernelFamily,
    memory_bandwidth: float,
    shape: AttentionShape,
    *,
    op: str,
    q_rows: int,
    kv_rows: int,
) -> float:
    """Seconds of one backward op (``"first"``, ``"accumulate"``, ``"final"``) on ``dq``
    (``q_rows`` x the query heads) and ``dk, dv`` (``kv_rows`` x the key/value heads each)."""
    if family.merge == "none":
        return 0.0
    if op not in GRAD_BYTES:
        raise ValueError(f"op must be one of {', '.join(GRAD_BYTES)}, got {op!r}")
    heads = q_rows * shape.heads + 2 * kv_rows * shape.kv_heads
    elements = float(shape.batch) * shape.head_dim * heads
    return _stream(GRAD_BYTES[op] * elements, memory_bandwidth) + 3 * family.elementwise_overhead_s


def gqa_backward_seconds(
    family: KernelFamily, memory_bandwidth: float, shape: AttentionShape, *, kv_rows: int
) -> float:
    """flash-attn 2's GQA backward writes ``dk, dv`` for all query heads (bf16) and sums them
    per kv head afterwards: the extra read and write of ``2 x kv_rows x heads x head_dim``."""
    if not family.gqa_expand_backward or shape.heads == shape.kv_heads:
        return 0.0
    extra = 2 * 2 * 2.0 * shape.batch * kv_rows * shape.heads * shape.head_dim
    return _stream(extra, memory_bandwidth) + 2 * family.elementwise_overhead_s


def _stream(nbytes: float, memory_bandwidth: float) -> float:
    return nbytes / (memory_bandwidth * HBM_FRACTION) if memory_bandwidth > 0 else 0.0


class StepModel:
    """Per-host seconds of each ring step of one run under a kernel family: the call its
    layout makes (``kernel_model.call_seconds``) plus the work between calls. Durations are
    computed once per distinct (kind, relation, work, first, last) and shared."""

    def __init__(self, config, family: KernelFamily):
        self.config, self.family = config, for_hardware(family, config.machine.hardware)
        self.cache: dict[tuple, float] = {}
        self.calls = CallTimer(config)
        host = self.family.host_call_s
        self.host_call_s = 0.0 if host is None else host.at(config.kernel.end("host_call_s"))

    def seconds(self, schedule: Schedule, s: int) -> np.ndarray:
        """``(P,)`` seconds of step ``s`` (before the host's speed and jitter)."""
        first, last = s == 0, s == schedule.ring_steps[-1]
        cell = lambda calls: self._calls_cell(schedule.pass_, calls, first, last)
        return self._per_cell(schedule, s, cell, (first, last))

    def attention_seconds(self, schedule: Schedule, s: int) -> np.ndarray:
        """``(P,)`` seconds of the kernel calls each host makes at step ``s``, without the
        merges around them."""

        def cell(calls) -> float:
            return sum(self.call_seconds(schedule.pass_, call) for call in calls)

        return self._per_cell(schedule, s, cell, ("call",))

    def call_seconds(self, pass_: str, call: KernelCall) -> float:
        """Seconds of one kernel call of this run (``CallTimer``)."""
        q, k, mask, visible, _, band = call
        return self.calls.seconds(pass_, q, k, mask, visible, band=band)

    def _per_cell(self, schedule: Schedule, s: int, cell, tag: tuple) -> np.ndarray:
        """``cell(calls)`` for each host at step ``s`` (its kernel calls, ``()`` when it skips
        its block), computed once per distinct cell of the run and shared. A schedule whose
        cells depend on the relation alone (``Schedule.by_relation``) is laid out in ``O(P)``
        array operations, no per-host Python (the timer asks ``P`` steps of ``P`` hosts);
        under a sliding window each distinct cell (``Schedule.cell_key``) gets its calls."""
        if getattr(schedule, "sliding_window", None) is not None:
            return self._window_cells(schedule, s, cell, tag)
        if getattr(schedule, "by_relation", False):  # (a double ring's rounds are not)
            values = [0.0, 0.0, 0.0]
            for relation in schedule.relations_at(s):
                kind, work = schedule.relation_cell(relation)
                key = (kind, relation, work)
                values[relation + 1] = self._value(schedule.pass_, key, tag, cell)
            return schedule.spread(values, s)
        relation = schedule.relation_at(s)
        kind, work = schedule.kind_at(s), np.round(schedule.work_at(s), 12)
        keys, inverse = np.unique(
            np.column_stack([kind, relation, work]), axis=0, return_inverse=True
        )
        values = [
            self._value(schedule.pass_, (int(k), int(r), float(w)), tag, cell) for k, r, w in keys
        ]
        return np.asarray(values, dtype=float)[inverse.reshape(-1)]

    def _window_cells(self, schedule, s: int, cell, tag: tuple) -> np.ndarray:
        """``_per_cell`` under a sliding window: a live cell's calls are the layout's
        windowed calls of its pair of hosts (``Schedule.cell_calls``), or, where it has none
        (no runs, packed documents), the masked call over the tiles the window leaves."""
        q_hosts, kv_hosts = schedule.pairs_at(s)
        kind, work = schedule.kind_at(s), np.round(schedule.work_at(s), 12)
        relation = np.sign(kv_hosts - q_hosts)
        keys = schedule.cell_key(q_hosts, kv_hosts)
        out = np.zeros(len(q_hosts))
        live = np.flatnonzero(kind != BlockKind.SKIP)
        _, first, inverse = np.unique(keys[live], return_index=True, return_inverse=True)
        values = []
        for i in live[first]:
            calls = schedule.cell_calls(q_hosts[i], kv_hosts[i])
            if calls is None:
                calls = _calls(self.call(int(kind[i]), int(relation[i]), float(work[i])))
            values.append(self._value(schedule.pass_, ("window", calls), tag, cell))
        out[live] = np.asarray(values, dtype=float)[inverse.reshape(-1)]
        skipped = kind == BlockKind.SKIP
        if skipped.any():
            out[skipped] = self._value(schedule.pass_, ("window", ()), tag, cell)
        return out

    def _value(self, pass_: str, key: tuple, tag: tuple, cell) -> float:
        full_key = (pass_, *key, *tag)
        if full_key not in self.cache:
            if key and key[0] == "window":
                self.cache[full_key] = cell(key[1])
            else:
                self.cache[full_key] = cell(_calls(self.call(*key)))
        return self.cache[full_key]

    def call(self, kind: int, relation: int, work: float) -> KernelCall | None:
        """``(q, k, mask, visible, sliced, band)`` of the call a host makes, or ``None``
        (skipped): the layout's answer (``Layout.step_call``)."""
        cfg = self.config
        documents = cfg.run.segment_ids is not None or cfg.run.sliding_window is not None
        layout = get_layout(cfg.run.layout)
        return layout.step_call(
            kind, relation, work, cfg.block_tokens, causal=cfg.run.causal, documents=documents
        )

    def _cell(self, pass_: str, kind, relation, work, first: bool, last: bool) -> float:
        """Seconds of one host's step on a block of ``kind``, ``relation``, ``work``."""
        return self._calls_cell(pass_, _calls(self.call(kind, relation, work)), first, last)

    def _calls_cell(
        self, pass_: str, calls: tuple[KernelCall, ...], first: bool, last: bool
    ) -> float:
        """Seconds of one host's step that makes ``calls`` (none: it skips its block), each
        merged (forward) or accumulated (backward) in turn."""
        cfg, fam = self.config, self.family
        hbm, shape = cfg.machine.hardware.memory_bandwidth, cfg.shape
        total = 0.0
        for i, call in enumerate(calls):
            q, k, sliced = call.q_tokens, call.k_tokens, call.sliced
            total += self.call_seconds(pass_, call)
            opening = first and i == 0
            if pass_ == Pass.FORWARD:
                op = "first" if opening else ("slice" if sliced else "merge")
                total += merge_seconds(fam, hbm, shape, op=op, rows=q)
            else:
                op = "first" if opening else "accumulate"
                total += grad_seconds(fam, hbm, shape, op=op, q_rows=q, kv_rows=k)
                total += gqa_backward_seconds(fam, hbm, shape, kv_rows=k)
        c = cfg.block_tokens
        if last:
            if pass_ == Pass.FORWARD:
                total += merge_seconds(fam, hbm, shape, op="final", rows=c)
            else:
                total += grad_seconds(fam, hbm, shape, op="final", q_rows=c, kv_rows=c)
        if self.host_call_s and cfg.run.hosts > 1:  # the host issues the step's calls
            count = host_calls(pass_, calls, c, first=first, last=last)
            total = max(total, count * self.host_call_s)
        return total
