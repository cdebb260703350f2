"""A whole transformer block on the ring: attention plus a blockwise feed-forward network.

Ring Attention runs every layer of a transformer over a sequence split across hosts, not just
the attention. The block here is pre-norm (LLaMA style, the models the paper trained)::

    h   = x + attention(rms_norm(x) * attn_gain) @ w_o
    out = h + gelu(rms_norm(h) * ffn_gain @ w_1) @ w_2

Everything except attention is *position-wise*: each token's projections, norms and
feed-forward network depend on that token alone. So on the ring each host projects its own
tokens, only attention communicates (through ``ringsim.ring_attention``), and each host then
runs the feed-forward network on its own tokens with no communication at all.

The Blockwise Parallel Transformer adds one more idea: the feed-forward hidden activation
``(tokens, d_ff)`` is usually the largest activation of the layer (``d_ff = 4 d_model``), so
it is computed ``ffn_chunk`` tokens at a time and each chunk's hidden is dropped as soon as
its output is added. The peak hidden activation is then ``ffn_chunk x d_ff``, not
``N x d_ff`` (dense) or even ``c x d_ff`` (one host's block): see ``ffn_peak_bytes``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ringsim.checks import (
    as_float_array,
    check_finite_array,
    check_instance,
    check_memory,
    check_non_negative_int,
    check_positive_int,
)
from ringsim.layouts import Layout, get_layout
from ringsim.numerics.attention import reference_attention, work_dtype
from ringsim.numerics.ring import ring_attention

RMS_EPS = 1e-6


@dataclass(frozen=True)
class TransformerParams:
    """Weights of one pre-norm block (float64; cast to the working dtype when used).

    ``w_q``: ``(d_model, heads * head_dim)``; ``w_k``, ``w_v``: ``(d_model, kv_heads *
    head_dim)``; ``w_o``: ``(heads * head_dim, d_model)``; ``w_1``: ``(d_model, d_ff)``;
    ``w_2``: ``(d_ff, d_model)``; ``attn_gain``, ``ffn_gain``: ``(d_model,)`` RMS-norm gains.
    """

    w_q: np.ndarray
    w_k: np.ndarray
    w_v: np.ndarray
    w_o: np.ndarray
    w_1: np.ndarray
    w_2: np.ndarray
    attn_gain: np.ndarray
    ffn_gain: np.ndarray
    heads: int
    kv_heads: int

    @property
    def d_model(self) -> int:
        return self.w_q.shape[0]

    @property
    def head_dim(self) -> int:
        return self.w_q.shape[1] // self.heads

    @property
    def d_ff(self) -> int:
        return self.w_1.shape[1]

    def cast(self, dtype: type) -> TransformerParams:
        """The same weights in ``dtype`` (heads unchanged)."""
        arrays = {
            name: getattr(self, name).astype(dtype, copy=False)
            for name in ("w_q", "w_k", "w_v", "w_o", "w_1", "w_2", "attn_gain", "ffn_gain")
        }
        return TransformerParams(**arrays, heads=self.heads, kv_heads=self.kv_heads)


def init_params(
    d_model: int, heads: int, kv_heads: int, d_ff: int, seed: int = 0
) -> TransformerParams:
    """Random weights with variance ``1 / fan_in`` and gains near 1 (float64)."""
    d_model = check_positive_int("d_model", d_model)
    heads = check_positive_int("heads", heads)
    kv_heads = check_positive_int("kv_heads", kv_heads)
    d_ff = check_positive_int("d_ff", d_ff)
    if d_model % heads:
        raise ValueError(f"d_model must be divisible by heads={heads}, got d_model={d_model}")
    if heads % kv_heads:
        raise ValueError(
            f"heads must be a multiple of kv_heads (GQA), got heads={heads}, kv_heads={kv_heads}"
        )
    weights = 8 * (4 * d_model * d_model + 3 * d_model * d_ff)  # float64, at most
    check_memory("d_model", d_model, weights, f"the weights (d_ff={d_ff:,})")
    head_dim = d_model // heads
    rng = np.random.default_rng(check_non_negative_int("seed", seed))

    def dense(fan_in: int, fan_out: int) -> np.ndarray:
        return rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in)

    return TransformerParams(
        w_q=dense(d_model, heads * head_dim),
        w_k=dense(d_model, kv_heads * head_dim),
        w_v=dense(d_model, kv_heads * head_dim),
        w_o=dense(heads * head_dim, d_model),
        w_1=dense(d_model, d_ff),
        w_2=dense(d_ff, d_model),
        attn_gain=1 + 0.1 * rng.standard_normal(d_model),
        ffn_gain=1 + 0.1 * rng.standard_normal(d_model),
        heads=heads,
        kv_heads=kv_heads,
    )


# --------------------------------------------------------------------------------------------
# Position-wise pieces (shared by the dense and the ring block)
# --------------------------------------------------------------------------------------------


def rms_norm(x: np.ndarray, gain: np.ndarray) -> np.ndarray:
    """``x / rms(x) * gain`` over the last axis."""
    rms = np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + x.dtype.type(RMS_EPS))
    return x / rms * gain


def gelu(x: np.ndarray) -> np.ndarray:
    """GELU, tanh form."""
    c = x.dtype.type(np.sqrt(2 / np.pi))
    return 0.5 * x * (1 + np.tanh(c * (x + x.dtype.type(0.044715) * x**3)))


def split_heads(x: np.ndarray, heads: int) -> np.ndarray:
    """``(..., n, heads * hd)`` -> ``(..., heads, n, hd)``."""
    return np.moveaxis(x.reshape(*x.shape[:-1], heads, -1), -2, -3)


def merge_heads(x: np.ndarray) -> np.ndarray:
    """``(..., heads, n, hd)`` -> ``(..., n, heads * hd)``."""
    x = np.moveaxis(x, -3, -2)
    return x.reshape(*x.shape[:-2], -1)


def project_qkv(x: np.ndarray, p: TransformerParams) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pre-norm and project tokens ``(..., n, d_model)`` to ``q`` ``(..., heads, n, hd)`` and
    ``k``, ``v`` ``(..., kv_heads, n, hd)``."""
    xn = rms_norm(x, p.attn_gain)
    return (
        split_heads(xn @ p.w_q, p.heads),
        split_heads(xn @ p.w_k, p.kv_heads),
        split_heads(xn @ p.w_v, p.kv_heads),
    )


def ffn(h: np.ndarray, p: TransformerParams) -> np.ndarray:
    """Residual feed-forward of tokens ``(..., n, d_model)``; materialises ``(..., n, d_ff)``."""
    return h + gelu(rms_norm(h, p.ffn_gain) @ p.w_1) @ p.w_2


def blockwise_ffn(
    h: np.ndarray, p: TransformerParams, chunk: int, stats: dict | None = None
) -> np.ndarray:
    """``ffn`` ``chunk`` tokens at a time: the hidden is at most ``(..., chunk, d_ff)``.

    (NumPy's temporaries inside ``gelu`` have the hidden's shape too, so the true peak is a
    small constant times it; what matters is that it scales with ``chunk``, not ``N``.)

    ``stats``, if given, gets ``ffn_hidden_peak_bytes``: the largest hidden actually built.
    """
    out = np.empty_like(h)
    for start in range(0, h.shape[-2], chunk):
        rows = slice(start, start + chunk)
        hidden = gelu(rms_norm(h[..., rows, :], p.ffn_gain) @ p.w_1)
        out[..., rows, :] = h[..., rows, :] + hidden @ p.w_2
        if stats is not None:
            peak = stats.get("ffn_hidden_peak_bytes", 0)
            stats["ffn_hidden_peak_bytes"] = max(peak, hidden.nbytes)
    return out


# --------------------------------------------------------------------------------------------
# The block, dense and on the ring
# --------------------------------------------------------------------------------------------


def _check_x(x: object, p: TransformerParams) -> np.ndarray:
    check_instance("params", p, TransformerParams, "a TransformerParams (ringsim.init_params)")
    x = as_float_array("x", x)
    if x.shape[-1] != p.d_model:
        raise ValueError(f"x must have d_model={p.d_model} features, got shape {x.shape}")
    check_finite_array("x", x)
    return x


def dense_block(x: np.ndarray, params: TransformerParams, *, causal: bool = False) -> np.ndarray:
    """The exact block in float64 on the whole sequence: ``x`` ``(..., N, d_model)``."""
    x = _check_x(x, params).astype(np.float64)
    q, k, v = project_qkv(x, params)
    h = x + merge_heads(reference_attention(q, k, v, causal=causal)) @ params.w_o
    return ffn(h, params)


def ring_block(
    x: np.ndarray,
    params: TransformerParams,
    *,
    hosts: int,
    layout: str | Layout = "contiguous",
    causal: bool = False,
    ffn_chunk: int | None = None,
    stats: dict | None = None,
) -> np.ndarray:
    """The block on ``hosts`` virtual hosts; equals ``dense_block`` up to rounding.

    ``x``: ``(..., N, d_model)`` with ``N`` split by ``layout`` as in ``ring_attention``.
    Host ``h`` projects its tokens ``host_positions(layout, hosts, N)[h]``; attention runs on
    the ring; host ``h`` then applies ``w_o``, the residual and the feed-forward network to its
    own tokens, ``ffn_chunk`` tokens at a time (default: the host's whole block). Computes in
    float32 (float64 for float64 ``x``) and returns ``x``'s dtype. ``stats``, if given, gets
    ``ffn_hidden_peak_bytes`` (the largest feed-forward hidden any host built).
    """
    x = _check_x(x, params)
    check_instance("stats", stats, dict | type(None), "a dict to fill, or None")
    hosts = check_positive_int("hosts", hosts)
    layout = get_layout(layout)
    seq_len = layout.check_seq_len(x.shape[-2], hosts)
    chunk = seq_len // hosts if ffn_chunk is None else check_positive_int("ffn_chunk", ffn_chunk)
    dtype = work_dtype(x.dtype)
    p = params.cast(dtype)
    positions = layout.positions(hosts, seq_len)
    x_hosts = [np.take(x, pos, axis=-2).astype(dtype) for pos in positions]

    # Each host projects its own tokens; ring_attention takes the sequence in token order and
    # deals it out by the same layout, so host h gets back exactly the rows it projected.
    projected = [project_qkv(x_h, p) for x_h in x_hosts]
    q, k, v = (_gather(parts, positions) for parts in zip(*projected, strict=True))
    attn = ring_attention(q, k, v, hosts=hosts, layout=layout, causal=causal)

    out = np.empty(x.shape, dtype)
    for pos, x_h in zip(positions, x_hosts, strict=True):
        h = x_h + merge_heads(np.take(attn, pos, axis=-2)) @ p.w_o
        out[..., pos, :] = blockwise_ffn(h, p, chunk, stats)
    return out.astype(x.dtype)


def _gather(blocks: tuple[np.ndarray, ...], positions: np.ndarray) -> np.ndarray:
    """Per-host ``(..., heads, c, hd)`` blocks -> ``(..., heads, N, hd)`` in token order."""
    full = np.empty((*blocks[0].shape[:-2], positions.size, blocks[0].shape[-1]), blocks[0].dtype)
    for pos, blk in zip(positions, blocks, strict=True):
        full[..., pos, :] = blk
    return full


def ffn_peak_bytes(
    seq_len: int,
    d_ff: int,
    *,
    hosts: int = 1,
    ffn_chunk: int | None = None,
    batch: int = 1,
    itemsize: int = 4,
) -> dict[str, int]:
    """Bytes of the largest feed-forward hidden activation, dense vs blockwise on one host.

    ``dense``: ``batch x N x d_ff`` (the whole sequence at once); ``per_host``: ``batch x c x
    d_ff`` with ``c = N / hosts`` (the ring without chunking); ``blockwise``: ``batch x
    min(ffn_chunk, c) x d_ff`` (what ``ring_block`` builds, per host).
    """
    seq_len = check_positive_int("seq_len", seq_len)
    d_ff = check_positive_int("d_ff", d_ff)
    hosts = check_positive_int("hosts", hosts)
    batch = check_positive_int("batch", batch)
    itemsize = check_positive_int("itemsize", itemsize)
    if seq_len % hosts:
        raise ValueError(f"seq_len must be divisible by hosts={hosts}, got seq_len={seq_len}")
    block = seq_len // hosts
    chunk = block if ffn_chunk is None else min(check_positive_int("ffn_chunk", ffn_chunk), block)
    row = batch * d_ff * itemsize
    return {"dense": seq_len * row, "per_host": block * row, "blockwise": chunk * row}
