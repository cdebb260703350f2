"""Hybrid sequence parallelism on ``P`` virtual hosts: Ulysses x ring (USP), the double ring
(LoongTrain), Ulysses alone and the all-gather of Llama 3, forward and backward, exact.

The hosts form a ``U x R`` grid (``ulysses_degree`` ``U``, ring degree ``R = P / U``; Fang &
Zhao, USP, arXiv 2405.07719). The ring's layout deals the sequence to ``R`` ring slots; host
``(u, j)`` starts with the ``u``-th of ``U`` equal pieces of slot ``j``'s tokens, all heads.
``placement`` numbers the hosts as the timer does (``ringsim.grid.Grid``):
``"ulysses-inner"`` makes rank ``j U + u``, ``"ring-inner"`` rank ``u R + j``. Forward::

    all-to-all in each Ulysses group j:  heads scattered, slot j's tokens gathered
        host (u, j): (..., H/U, N/R, d), the heads of head group u
    each ring group u (the R hosts holding head group u) runs the sequence-parallel method:
        "ring"         the ring of ringsim.numerics.ring (its Schedule, unchanged)
        "double-ring"  inner rings of `window` slots, an outer ring between them
        "allgather"    every slot gathers all k, v of its group and attends once (Llama 3)
    all-to-all back: the tokens scattered home, the heads gathered: (..., H, N/P, d)

Backward runs the same three stages on ``dout``: the all-to-all, the method's backward from
the forward's head-sharded ``out`` and softmax statistics (``dq`` home; each kv block's ``dk``,
``dv`` accumulated where it is used and sent home to its ring slot; all-gather: reduce-scatter),
and the inverse all-to-all, which returns ``dq``, ``dk``, ``dv`` to the hosts that own the
tokens. ``U = 1`` is the ring bit for bit, ``R = 1`` is Ulysses (``ulysses_attention``).

**KV replication** (``U > Hkv``, e.g. 8 kv heads on 32 Ulysses ranks): the first all-to-all
sends each kv head to the ``U / Hkv`` hosts whose query heads share it
(``ringsim.grid.head_groups``), so every host holds ``H / U`` query heads and one replica of
their kv head; the all-to-all moves ``U / Hkv`` times the kv bytes. Backward, the inverse
all-to-all brings each replica's ``dk``, ``dv`` to the host that owns the tokens, which sums
them (``sum_replicas``): one head's gradient is the sum over every query head that read it,
wherever it was computed.

The double ring and the all-gather live in ``ringsim.numerics.context_parallel``. An
all-to-all hands each host's pieces to the others (``all_to_all``); a ring group's executor
takes its hosts' blocks placed at their token positions and shards them back the same way.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from ringsim.checks import (
    check_bool,
    check_choice,
    check_overflow,
    check_positive_int,
    check_qkv,
    check_scale,
    check_segment_ids,
    checked_result,
)
from ringsim.grid import PLACEMENTS, Grid, check_ulysses_degree, head_groups, kv_replicas
from ringsim.layouts import Layout, get_layout
from ringsim.masks import check_sliding_window
from ringsim.numerics.attention import work_dtype
from ringsim.numerics.context_parallel import METHODS, _place, _shard
from ringsim.numerics.ring import GRADS, check_dout
from ringsim.schedule import Schedule, build_schedule

# --------------------------------------------------------------------------------------------
# The grid and its two all-to-alls
# --------------------------------------------------------------------------------------------


def sum_replicas(x: np.ndarray, replicas: int) -> np.ndarray:
    """``(..., Hkv r, c, d)`` gradients of the replicated kv heads (``r`` replicas of each, in
    head order) -> ``(..., Hkv, c, d)``: each head's replicas summed, on the host that owns
    the tokens (repeat_kv's backward)."""
    if replicas == 1:
        return x
    return x.reshape(*x.shape[:-3], x.shape[-3] // replicas, replicas, *x.shape[-2:]).sum(-3)


def all_to_all(sends: list[list[np.ndarray]]) -> list[list[np.ndarray]]:
    """``sends[a][b]``: what member ``a`` sends to member ``b``; returns ``recv[b][a]``."""
    return [[row[b] for row in sends] for b in range(len(sends))]


def scatter_heads(blocks: dict[int, np.ndarray], grid: Grid, heads: list[slice]):
    """The first all-to-all: rank ``(u, j)`` ``(..., H, c, x)`` -> ``(..., |heads[u]|, U c, x)``,
    head group ``u`` of slot ``j``'s tokens (pieces in member order, so sorted)."""
    out = {}
    for j in range(grid.ring):
        members = grid.ulysses_group(j)
        sends = [[blocks[a][..., h, :, :] for h in heads] for a in members]
        for b, got in zip(members, all_to_all(sends), strict=True):
            out[b] = np.concatenate(got, axis=-2)
    return out


def gather_heads(blocks: dict[int, np.ndarray], grid: Grid):
    """The inverse all-to-all: rank ``(u, j)`` ``(..., H_u, U c, x)`` -> ``(..., H, c, x)``, its
    own piece of slot ``j``'s tokens with every head group."""
    out = {}
    for j in range(grid.ring):
        members = grid.ulysses_group(j)
        c = blocks[members[0]].shape[-2] // grid.ulysses
        sends = [
            [blocks[a][..., b * c : (b + 1) * c, :] for b in range(grid.ulysses)] for a in members
        ]
        for b, got in zip(members, all_to_all(sends), strict=True):
            out[b] = np.concatenate(got, axis=-3)
    return out


# --------------------------------------------------------------------------------------------
# The hybrid: all-to-all, ring groups, all-to-all back
# --------------------------------------------------------------------------------------------


@dataclass
class _Problem:
    """A validated hybrid call; ``q``, ``k``, ``v`` have a head axis (a bare ``(N, d)`` gets
    one, ``flat`` remembers to drop it)."""

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    flat: bool
    grid: Grid
    layout: Layout
    causal: bool
    scale: float
    segment_ids: np.ndarray | None
    method: str
    window: int | None
    sliding_window: int | None = None

    def schedule(self, pass_: str) -> Schedule:
        return build_schedule(
            self.grid.ring,
            self.layout,
            self.causal,
            pass_,
            seq_len=self.q.shape[-2],
            segment_ids=self.segment_ids,
            sliding_window=self.sliding_window,
        )

    def method_kw(self) -> dict:
        return {"window": self.window} if METHODS[self.method].windowed else {}


def _problem(
    q,
    k,
    v,
    hosts,
    ulysses_degree,
    layout,
    causal,
    scale,
    segment_ids,
    method,
    window,
    placement,
    sliding_window=None,
) -> _Problem:
    q, k, v = check_qkv(q, k, v)
    flat = q.ndim == 2
    if flat:
        q, k, v = q[None], k[None], v[None]
    hosts = check_positive_int("hosts", hosts)
    layout = get_layout(layout)
    causal = check_bool("causal", causal)
    method = check_choice("method", method, tuple(METHODS))
    placement = check_choice("placement", placement, PLACEMENTS)
    U = check_ulysses_degree(hosts, k.shape[-3], ulysses_degree, heads=q.shape[-3])
    R = hosts // U
    if q.shape[-2] != k.shape[-2]:
        raise ValueError(
            f"hybrid attention is self-attention: q and k need the same length, got "
            f"{q.shape[-2]} and {k.shape[-2]}"
        )
    seq_len = layout.check_seq_len(q.shape[-2], R, segment_ids)
    if seq_len % hosts:
        raise ValueError(f"seq_len must be divisible by hosts = {hosts}, got seq_len={seq_len}")
    if METHODS[method].windowed:
        whole = isinstance(window, numbers.Integral) and not isinstance(window, bool)
        if not whole or window <= 0 or R % window:
            raise ValueError(f"window must divide the ring degree {R}, got window={window!r}")
        window = int(window)
    elif window is not None:
        windowed = ", ".join(name for name, m in METHODS.items() if m.windowed)
        raise ValueError(f"window is for method {windowed} only, got window={window!r}")
    return _Problem(
        q,
        k,
        v,
        flat,
        Grid(U, R, placement),
        layout,
        causal,
        check_scale(scale, q.shape[-1]),
        check_segment_ids(segment_ids, seq_len),
        method,
        window,
        check_sliding_window(sliding_window),
    )


def _by_rank(x: np.ndarray, pos: np.ndarray) -> dict[int, np.ndarray]:
    return {r: _shard(x, p) for r, p in enumerate(pos)}


def _to_ring_group(blocks: dict, members: list[int], slots: np.ndarray) -> np.ndarray:
    return _place([blocks[r] for r in members], slots)


def _from_ring_groups(groups: list[np.ndarray], grid: Grid, slots: np.ndarray) -> dict:
    """Per-group token-order arrays -> each host's head-sharded block."""
    out = {}
    for u, x in enumerate(groups):
        for j, r in enumerate(grid.ring_group(u)):
            out[r] = _shard(x, slots[j])
    return out


def _home(blocks: dict, prob: _Problem, pos: np.ndarray, replicas: int = 1) -> np.ndarray:
    """The inverse all-to-all, then every host's block at its token positions; ``replicas``:
    the kv heads were replicated, and each host sums its heads' replicas."""
    seq = gather_heads(blocks, prob.grid)
    return _place([sum_replicas(seq[r], replicas) for r in range(len(pos))], pos)


def _forward(prob: _Problem):
    """The first all-to-all and the ring groups: ``(positions, head groups, saved)``, with
    ``positions`` ``(P, N/P)`` each host's tokens and ``saved[u]`` ring group ``u``'s
    token-order ``(q, k, v, out, lse, stats)`` (its hosts' head-sharded blocks)."""
    grid, N = prob.grid, prob.q.shape[-2]
    pos = grid.positions(prob.layout, N, prob.segment_ids)
    heads = head_groups(prob.q.shape[-3], prob.k.shape[-3], grid.ulysses)
    qh = scatter_heads(_by_rank(prob.q, pos), grid, [h for h, _ in heads])
    kh = scatter_heads(_by_rank(prob.k, pos), grid, [h for _, h in heads])
    vh = scatter_heads(_by_rank(prob.v, pos), grid, [h for _, h in heads])
    sched = prob.schedule("forward")
    saved = []
    for u in range(grid.ulysses):
        members = grid.ring_group(u)
        qg, kg, vg = (_to_ring_group(x, members, sched.positions) for x in (qh, kh, vh))
        stats: dict = {}
        out, lse = METHODS[prob.method].forward(
            qg, kg, vg, sched, prob.scale, stats=stats, **prob.method_kw()
        )
        saved.append((qg, kg, vg, out, lse, stats))
    return pos, heads, saved


def _attention(prob: _Problem, return_lse: object):
    return_lse = check_bool("return_lse", return_lse)
    pos, _, saved = _forward(prob)
    slots = prob.schedule("forward").positions
    out = _home(_from_ring_groups([s[3] for s in saved], prob.grid, slots), prob, pos)
    lse_h = _from_ring_groups([s[4][..., None] for s in saved], prob.grid, slots)
    lse = _home(lse_h, prob, pos)[..., 0]
    out = checked_result("attention", out, prob.q.dtype, lse=lse)
    if prob.flat:
        out, lse = out[0], lse[0]
    return (out, lse) if return_lse else out


def _gradients(prob: _Problem, dout: object):
    dout = check_dout(dout, prob.q[0] if prob.flat else prob.q)
    if prob.flat:
        dout = dout[None]
    pos, heads, saved = _forward(prob)
    for s in saved:
        check_overflow("attention", s[3], work_dtype(prob.q.dtype), lse=s[4])
    grid = prob.grid
    doh = scatter_heads(_by_rank(dout, pos), grid, [h for h, _ in heads])
    sched = prob.schedule("backward")
    grads: list[list[np.ndarray]] = [[], [], []]
    for u, (qg, kg, vg, out, lse, stats) in enumerate(saved):
        dog = _to_ring_group(doh, grid.ring_group(u), sched.positions)
        group = METHODS[prob.method].backward(
            qg, kg, vg, dog, out, lse, sched, prob.scale, **stats, **prob.method_kw()
        )
        for g, x in zip(grads, group, strict=True):
            g.append(x)
    result = []
    replicas = kv_replicas(prob.k.shape[-3], grid.ulysses)
    for name, g in zip(GRADS, grads, strict=True):
        fold = 1 if name == "dq" else replicas
        x = _home(_from_ring_groups(g, grid, sched.positions), prob, pos, fold)
        result.append(checked_result(name, x[0] if prob.flat else x, prob.q.dtype))
    return tuple(result)


# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------

_SHAPES = """``q``: ``(..., Hq, N, d)``; ``k``, ``v``: ``(..., Hkv, N, d)`` (GQA when ``Hkv < Hq``),
    or bare ``(N, d)`` arrays (one head). ``hosts`` ``P``; ``layout`` deals the ``N`` tokens to
    the ``R`` ring slots (``N`` divisible by ``P`` and by the layout's divisor for ``R``:
    ``R``, ``2 R`` for zigzag); ``segment_ids`` ``(N,)``: packed documents."""


def hybrid_attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    hosts: int,
    ulysses_degree: int,
    layout: str = "contiguous",
    causal: bool = False,
    scale: float | None = None,
    segment_ids: np.ndarray | None = None,
    method: str = "ring",
    window: int | None = None,
    placement: str = "ulysses-inner",
    return_lse: bool = False,
    sliding_window: int | None = None,
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Exact attention on ``hosts`` virtual hosts as ``U``-way Ulysses x ``R``-way ``method``
    (USP; see the module docstring). {shapes}
    ``ulysses_degree`` ``U`` divides ``hosts``; at most ``Hkv`` it must, beside a ring, divide
    ``Hkv``; above ``Hkv`` the kv heads are replicated, which needs ``U`` a multiple of ``Hkv``
    dividing ``Hq`` (``ringsim.grid.check_ulysses_degree``). ``method``: ``ring``,
    ``double-ring`` (needs ``window``, the inner ring size, dividing ``R``) or ``allgather``.
    ``placement``: ``ulysses-inner`` or ``ring-inner``. ``sliding_window``: ``W`` tokens, the
    model's local attention (``ringsim.masks``; not the double ring's ``window``).
    Returns ``out`` like ``q`` in its dtype, in token order, plus the float ``lse``
    ``(..., Hq, N)`` when ``return_lse``.
    """
    prob = _problem(
        q,
        k,
        v,
        hosts,
        ulysses_degree,
        layout,
        causal,
        scale,
        segment_ids,
        method,
        window,
        placement,
        sliding_window,
    )
    return _attention(prob, return_lse)


def hybrid_attention_backward(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    dout: np.ndarray,
    *,
    hosts: int,
    ulysses_degree: int,
    layout: str = "contiguous",
    causal: bool = False,
    scale: float | None = None,
    segment_ids: np.ndarray | None = None,
    method: str = "ring",
    window: int | None = None,
    placement: str = "ulysses-inner",
    sliding_window: int | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gradients ``(dq, dk, dv)`` of ``sum(dout * hybrid_attention(q, k, v, ...))``: the forward
    on the hosts, then the backward stages (all-to-all of ``dout``, the method's backward from
    the saved ``out``, ``row_max``, ``row_sum``, all-to-all of the gradients home). Arguments as
    ``hybrid_attention``; ``dout`` like ``q``. Gradients in the input dtype, token order."""
    prob = _problem(
        q,
        k,
        v,
        hosts,
        ulysses_degree,
        layout,
        causal,
        scale,
        segment_ids,
        method,
        window,
        placement,
        sliding_window,
    )
    return _gradients(prob, dout)


def double_ring_attention(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, *, hosts: int, window: int, **options
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """LoongTrain's double ring: inner rings of ``window`` slots (one node each), an outer ring
    across them; with ``ulysses_degree`` ``U > 1`` beside it, LoongTrain's 2D-attention.
    ``options``: the keywords of ``hybrid_attention`` but ``method``; returns as it does."""
    return hybrid_attention(q, k, v, hosts=hosts, window=window, **_defaults(options, 1))


def double_ring_attention_backward(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    dout: np.ndarray,
    *,
    hosts: int,
    window: int,
    **options,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(dq, dk, dv)`` of ``double_ring_attention``: each kv block's ``dk``, ``dv`` ride the
    inner ring back to the host that started the round with it, the outer ring on, then home."""
    options = _defaults(options, 1)
    return hybrid_attention_backward(q, k, v, dout, hosts=hosts, window=window, **options)


def ulysses_attention(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, *, hosts: int, **options
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """DeepSpeed-Ulysses (Jacobs et al. 2023), ``U = hosts``: host ``h`` holds tokens
    ``[h N/P, (h+1) N/P)``; an all-to-all gives it ``Hkv / P`` kv heads (the first ``Hkv % P``
    hosts one more) with their query heads for all ``N`` tokens, it attends to them at once, and
    the inverse all-to-all brings the output home. ``hosts <= Hkv``, or beyond it a multiple of
    ``Hkv`` dividing ``Hq``: each kv head is then replicated on ``hosts / Hkv`` hosts, and
    backward each host sums its tokens' replicated ``dk``, ``dv`` (verl's KV replication);
    ``N`` divisible by ``hosts``. ``options``: ``causal``, ``scale``, ``segment_ids``,
    ``sliding_window``, ``return_lse``."""
    options = _defaults(options, hosts, method="allgather")
    return hybrid_attention(q, k, v, hosts=hosts, **options)


def ulysses_attention_backward(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, dout: np.ndarray, *, hosts: int, **options
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(dq, dk, dv)`` of ``ulysses_attention``: ``dout`` all-to-all'd as the inputs were, one
    local backward per host, the gradients all-to-all'd home."""
    options = _defaults(options, hosts, method="allgather")
    return hybrid_attention_backward(q, k, v, dout, hosts=hosts, **options)


def allgather_attention(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, *, hosts: int, **options
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """All-gather context parallelism (Llama 3): every host gathers all ``k``, ``v`` of its
    ring group and attends with its own queries; ``layout`` defaults to zigzag, as Llama 3
    trained. ``options``: the keywords of ``hybrid_attention`` but ``method``, ``window``."""
    options = _defaults({"layout": "zigzag", **options}, 1, method="allgather")
    return hybrid_attention(q, k, v, hosts=hosts, **options)


def allgather_attention_backward(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, dout: np.ndarray, *, hosts: int, **options
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(dq, dk, dv)`` of ``allgather_attention``: each host's gradients for all of ``k``,
    ``v``, reduce-scattered onto their owners."""
    options = _defaults({"layout": "zigzag", **options}, 1, method="allgather")
    return hybrid_attention_backward(q, k, v, dout, hosts=hosts, **options)


def _defaults(options: dict, ulysses_degree: int, method: str = "double-ring") -> dict:
    """A named strategy's keywords: its ``method`` fixed (a ``method`` keyword is refused)."""
    if "method" in options:
        raise ValueError(f"method is fixed to {method!r} here, got method={options['method']!r}")
    return {"ulysses_degree": ulysses_degree, **options, "method": method}


hybrid_attention.__doc__ = hybrid_attention.__doc__.replace("{shapes}", _SHAPES)
