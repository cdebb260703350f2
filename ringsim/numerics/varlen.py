"""Packed documents under context parallelism as Llama 3 trains them: all-gather per document.

zhuzilin/ring-flash-attention's ``llama3_flash_attn_varlen_func``
(``ring_flash_attn/llama3_flash_attn_varlen.py`` at 22f0e1db) runs Llama 3's all-gather
context parallelism on packed documents (``cu_seqlens``), and this module is that algorithm
in NumPy, exact. The packed sequence of ``N`` tokens is cut into ``P`` contiguous slices,
host ``r`` holding tokens ``[r L, (r + 1) L)`` (``L = N / P``). Forward, per host::

    all-gather k, v (heads_k_stride kv heads at a time)       every host: (..., s, N, d)
    its k slice: from the start of its first document to its last query (causal), or to the
        end of its last document (not causal)                  llama3_cu_seqlens: k_slice
    one varlen call over its documents: each document's queries on this host against that
        document's keys in the slice (cu_seqlens_q, cu_seqlens_k), the causal mask aligned
        bottom right, which is the global-position rule of ringsim.masks

Backward, per head chunk: the same all-gather, the varlen backward writes ``dk``, ``dv`` for the
slice into a buffer of all ``N`` tokens (zero elsewhere), and a reduce-scatter sums every
host's buffer onto the owners of the tokens. ``dq`` stays home.

Nothing travels around a ring and nothing is masked but inside documents: a host reads only the
documents it holds queries of. A document's queries sit on one host or on consecutive hosts;
a long document makes its later hosts read long key slices (the contiguous split's load
imbalance under a causal mask, which zigzag would fix).
"""

from __future__ import annotations

import numpy as np

from ringsim.checks import (
    check_bool,
    check_overflow,
    check_positive_int,
    check_qkv,
    check_scale,
    check_segment_ids,
    checked_result,
)
from ringsim.layouts import cu_seqlens_of, llama3_cu_seqlens
from ringsim.masks import check_sliding_window, documents_are_runs
from ringsim.numerics.attention import (
    _block_attention,
    _block_attention_backward,
    work_dtype,
)
from ringsim.numerics.ring import GRADS, _softmax_rows, check_dout


def _check(q, k, v, hosts, segment_ids, causal, scale, sliding_window, heads_k_stride):
    q, k, v = check_qkv(q, k, v)
    flat = q.ndim == 2
    if flat:
        q, k, v = q[None], k[None], v[None]
    hosts = check_positive_int("hosts", hosts)
    n = q.shape[-2]
    if k.shape[-2] != n:
        raise ValueError(f"q and k need the same length, got {n} and {k.shape[-2]}")
    if n % hosts:
        raise ValueError(f"seq_len must be divisible by hosts = {hosts}, got seq_len={n}")
    seg = check_segment_ids(segment_ids, n)
    if seg is None:
        seg = np.zeros(n, dtype=np.int64)
    elif not documents_are_runs(seg):
        raise ValueError(
            "segment_ids must give each document one run of tokens (packed documents), "
            "got a document id in two runs"
        )
    kv_heads = k.shape[-3]
    stride = (
        kv_heads if heads_k_stride is None else check_positive_int("heads_k_stride", heads_k_stride)
    )
    if kv_heads % stride:
        raise ValueError(
            f"heads_k_stride must divide the kv heads ({kv_heads}), got heads_k_stride={stride}"
        )
    return dict(
        q=q,
        k=k,
        v=v,
        flat=flat,
        hosts=hosts,
        cu=cu_seqlens_of(seg),
        causal=check_bool("causal", causal),
        scale=check_scale(scale, q.shape[-1]),
        sliding_window=check_sliding_window(sliding_window),
        stride=stride,
    )


def _all_gather(x: np.ndarray, hosts: int) -> np.ndarray:
    """Every host's contiguous slice of ``x`` ``(..., N, d)``, concatenated: the gathered
    buffer, in token order."""
    return np.concatenate(np.split(x, hosts, axis=-2), axis=-2)


def _reduce_scatter(buffers: list[np.ndarray], hosts: int) -> np.ndarray:
    """Every host's buffer ``(..., N, d)`` summed, each owner keeping the sum over its own
    slice of tokens; returned in token order (the owners' slices, concatenated)."""
    slices = [np.split(buf, hosts, axis=-2) for buf in buffers]
    return np.concatenate([sum(parts[owner] for parts in slices) for owner in range(hosts)], -2)


def _calls(p: dict, rank: int):
    """``(q rows, k rows, mask keywords)`` of each document call of host ``rank``: global
    token ranges, which give the queries and keys their positions."""
    per = p["q"].shape[-2] // p["hosts"]
    sl = llama3_cu_seqlens(p["cu"], p["hosts"], rank, p["causal"])
    for d in range(len(sl.cu_seqlens_q) - 1):
        rows = np.arange(sl.cu_seqlens_q[d], sl.cu_seqlens_q[d + 1]) + rank * per
        keys = np.arange(sl.cu_seqlens_k[d], sl.cu_seqlens_k[d + 1]) + sl.k_slice.start
        mask = dict(q_pos=rows, k_pos=keys, causal=p["causal"])
        if p["sliding_window"] is not None:
            mask["sliding_window"] = p["sliding_window"]
        yield rows, keys, mask


def _head_chunks(p: dict):
    """``(query heads, kv heads)`` of each all-gather: ``heads_k_stride`` kv heads at a time."""
    hq, hkv = p["q"].shape[-3], p["k"].shape[-3]
    group = hq // hkv
    for a in range(0, hkv, p["stride"]):
        yield slice(a * group, (a + p["stride"]) * group), slice(a, a + p["stride"])


def _forward(p: dict):
    """``(out, lse, row_max, row_sum)`` in token order, every host's document calls."""
    q, k, v = p["q"], p["k"], p["v"]
    dtype = work_dtype(q.dtype)
    out = np.zeros(q.shape, dtype)
    stats = {name: np.zeros(q.shape[:-1], dtype) for name in ("row_max", "row_sum")}
    for qh, kh in _head_chunks(p):
        k_all = _all_gather(k[..., kh, :, :], p["hosts"])
        v_all = _all_gather(v[..., kh, :, :], p["hosts"])
        for rank in range(p["hosts"]):
            for rows, keys, mask in _calls(p, rank):
                part = _block_attention(
                    q[..., qh, rows, :],
                    k_all[..., keys, :],
                    v_all[..., keys, :],
                    scale=p["scale"],
                    **mask,
                )
                out[..., qh, rows, :] = part.out
                stats["row_max"][..., qh, rows] = part.row_max
                stats["row_sum"][..., qh, rows] = part.row_sum
    with np.errstate(divide="ignore"):
        lse = stats["row_max"] + np.log(stats["row_sum"])
    return out, lse, stats


_SHAPES = """``q``: ``(..., Hq, N, d)``; ``k``, ``v``: ``(..., Hkv, N, d)`` (GQA), or bare
    ``(N, d)``; ``N`` divisible by ``hosts``. ``segment_ids`` ``(N,)``: the packed documents,
    each one run of tokens (``None``: one document); ``causal``, ``scale``,
    ``sliding_window`` as ``ringsim.masks``; ``heads_k_stride``: kv heads per all-gather
    (dividing ``Hkv``; default all), which bounds the gathered buffer."""


def llama3_varlen_attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    *,
    hosts: int,
    segment_ids: np.ndarray | None = None,
    causal: bool = False,
    scale: float | None = None,
    sliding_window: int | None = None,
    heads_k_stride: int | None = None,
    return_lse: bool = False,
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Exact attention of packed documents on ``hosts`` hosts, all-gather per document
    (Llama 3 / zhuzilin's ``llama3_flash_attn_varlen_func``; the module docstring). {shapes}
    Returns ``out`` like ``q`` in its dtype, in token order, plus the float ``lse``
    ``(..., Hq, N)`` when ``return_lse``."""
    p = _check(q, k, v, hosts, segment_ids, causal, scale, sliding_window, heads_k_stride)
    return_lse = check_bool("return_lse", return_lse)
    out, lse, _ = _forward(p)
    out = checked_result("attention", out, p["q"].dtype, lse=lse)
    if p["flat"]:
        out, lse = out[0], lse[0]
    return (out, lse) if return_lse else out


def llama3_varlen_attention_backward(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    dout: np.ndarray,
    *,
    hosts: int,
    segment_ids: np.ndarray | None = None,
    causal: bool = False,
    scale: float | None = None,
    sliding_window: int | None = None,
    heads_k_stride: int | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gradients ``(dq, dk, dv)`` of ``sum(dout * llama3_varlen_attention(...))``: the forward,
    then per head chunk the all-gather, each host's document calls backward into a buffer of
    all ``N`` tokens, and the reduce-scatter of the buffers onto the tokens' owners. Arguments
    as ``llama3_varlen_attention``; ``dout`` like ``q``. Gradients in the input dtype."""
    p = _check(q, k, v, hosts, segment_ids, causal, scale, sliding_window, heads_k_stride)
    dout = check_dout(dout, p["q"][0] if p["flat"] else p["q"])
    if p["flat"]:
        dout = dout[None]
    out, lse, stats = _forward(p)
    q, k, v = p["q"], p["k"], p["v"]
    dtype = work_dtype(q.dtype)
    check_overflow("attention", out, dtype, lse=lse)
    dq, dk, dv = np.zeros(q.shape, dtype), np.zeros(k.shape, dtype), np.zeros(v.shape, dtype)
    delta = (dout.astype(dtype) * out).sum(axis=-1)  # rowsum(dout * out), one per query row
    P = p["hosts"]
    for qh, kh in _head_chunks(p):
        k_all = _all_gather(k[..., kh, :, :], P)
        v_all = _all_gather(v[..., kh, :, :], P)
        chunk_stats = [x[..., qh, :] for x in (lse, stats["row_max"], stats["row_sum"])]
        buffers = []  # each host's dk, dv for all N tokens of this chunk's heads
        for rank in range(P):
            dk_buf, dv_buf = np.zeros(k_all.shape, dtype), np.zeros(v_all.shape, dtype)
            for rows, keys, mask in _calls(p, rank):
                softmax = _softmax_rows(*chunk_stats, rows)
                g_q, g_k, g_v = _block_attention_backward(
                    q[..., qh, rows, :],
                    k_all[..., keys, :],
                    v_all[..., keys, :],
                    dout[..., qh, rows, :].astype(dtype),
                    softmax.get("lse"),
                    delta[..., qh, rows],
                    scale=p["scale"],
                    row_max=softmax.get("row_max"),
                    row_sum=softmax.get("row_sum"),
                    **mask,
                )
                dq[..., qh, rows, :] = g_q
                dk_buf[..., keys, :] += g_k
                dv_buf[..., keys, :] += g_v
            buffers.append((dk_buf, dv_buf))
        dk[..., kh, :, :] = _reduce_scatter([b[0] for b in buffers], P)
        dv[..., kh, :, :] = _reduce_scatter([b[1] for b in buffers], P)
    return tuple(
        checked_result(name, x[0] if p["flat"] else x, q.dtype)
        for name, x in zip(GRADS, (dq, dk, dv), strict=True)
    )


llama3_varlen_attention.__doc__ = llama3_varlen_attention.__doc__.replace("{shapes}", _SHAPES)
