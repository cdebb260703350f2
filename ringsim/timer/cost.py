"""The counts: an attention layer's shape (``AttentionShape``), the FLOPs and bytes of one ring
step, and the block size above which communication hides.

The bottom of the timer: it imports no other room of it (a device enters ``overlap_threshold``
only as an argument, by its rates).

Counting convention: a matmul of ``(m, k) @ (k, n)`` costs ``2 m k n`` FLOPs (one multiply and
one add per term). Work under a mask is the fraction ``work`` of the ``c x c`` block a kernel
computes, as given by ``Schedule.work_at`` (exact, or at a tile granularity): the cost model
never re-derives the mask.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ringsim.checks import check_bool, check_choice, check_positive_int, check_real
from ringsim.schedule import PASSES, RING_PASSES, Pass

DTYPES = ("bf16", "fp16", "fp32")
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


def check_dtype(dtype: object) -> str:
    return check_choice("dtype", dtype, DTYPES)


@dataclass(frozen=True)
class AttentionShape:
    """The layer's shape: ``heads`` query heads, ``kv_heads`` key/value heads (``None``: the
    same, no GQA), ``head_dim``, the element ``dtype``, ``batch`` sequences; ``grad_dtype`` is
    the dtype of ``dk, dv`` on the wire (default ``dtype``); ``d_model`` and ``ffn`` (defaults
    ``heads * head_dim`` and ``4 * d_model``) size the projections and MLP of a training step."""

    heads: int = 32
    kv_heads: int | None = None
    head_dim: int = 128
    dtype: str = "bf16"
    batch: int = 1
    grad_dtype: str | None = None
    d_model: int | None = None
    ffn: int | None = None

    def __post_init__(self) -> None:
        for name in ("heads", "head_dim", "batch"):
            check_positive_int(name, getattr(self, name))
        kv_heads = self.heads if self.kv_heads is None else self.kv_heads
        check_positive_int("kv_heads", kv_heads)
        if self.heads % kv_heads:
            raise ValueError(
                f"heads must be a multiple of kv_heads, got heads={self.heads}, kv_heads={kv_heads}"
            )
        object.__setattr__(self, "kv_heads", kv_heads)
        check_dtype(self.dtype)
        if self.grad_dtype is not None:
            check_dtype(self.grad_dtype)
        d_model = self.heads * self.head_dim if self.d_model is None else self.d_model
        object.__setattr__(self, "d_model", check_positive_int("d_model", d_model))
        object.__setattr__(
            self, "ffn", check_positive_int("ffn", 4 * d_model if self.ffn is None else self.ffn)
        )

    def split(self, ulysses: int) -> AttentionShape:
        """One of ``ulysses`` head groups of this layer (``H / U`` query heads and ``H_kv / U``
        key/value heads: the ring groups of a Ulysses x ring grid, ``U`` dividing ``H_kv``;
        ``U`` above ``H_kv`` replicates the key/value heads, one per group:
        ``ringsim.grid.kv_replicas``)."""
        kv_heads = max(1, self.kv_heads // ulysses)
        return replace(self, heads=self.heads // ulysses, kv_heads=kv_heads)

    def alltoall_kv_heads(self, ulysses: int) -> int:
        """Key/value heads a ``U``-way all-to-all carries: ``H_kv``, or ``U`` when ``U``
        exceeds them (each replicated ``U / H_kv`` times before it, as verl's ``repeat_kv``:
        ``ringsim.grid.kv_replicas``)."""
        return max(self.kv_heads, ulysses)

    # -- the counts below, for this shape ------------------------------------------------------
    def flops(
        self, q_tokens: int, k_tokens: int, *, work: float = 1.0, pass_: str = "forward"
    ) -> float:
        """``attention_flops`` of ``q_tokens`` queries on ``k_tokens`` keys of this layer."""
        h, d, b = self.heads, self.head_dim, self.batch
        return attention_flops(q_tokens, k_tokens, h, d, work=work, pass_=pass_, batch=b)

    def kv_bytes(self, tokens: int, *, pass_: str = "forward", grad_dtype: str | None = None):
        """``kv_block_bytes`` of ``tokens`` tokens of this layer's ``k, v`` (backward: and
        ``dk, dv`` in ``grad_dtype``)."""
        h, d, e, b = self.kv_heads, self.head_dim, self.dtype, self.batch
        return kv_block_bytes(tokens, h, d, e, pass_=pass_, batch=b, grad_dtype=grad_dtype)

    def grad_bytes(self, tokens: int, grad_dtype: str | None = None) -> float:
        """``grad_block_bytes``: ``dk, dv`` of ``tokens`` tokens of this layer."""
        h, d, e, b = self.kv_heads, self.head_dim, self.dtype, self.batch
        return grad_block_bytes(tokens, h, d, e, batch=b, grad_dtype=grad_dtype)

    def partial_bytes(self, tokens: int = 1) -> float:
        """``partial_bytes`` of ``tokens`` query rows of this layer."""
        return partial_bytes(self.heads, self.head_dim, tokens=tokens, batch=self.batch)

    def projection_flops(self, tokens: int, pass_: str = "forward") -> tuple[float, float]:
        """``projection_flops`` (q/k/v, output) of ``tokens`` tokens through this layer."""
        h, kv, d = self.heads, self.kv_heads, self.head_dim
        return projection_flops(tokens, self.d_model, h, kv, d, pass_=pass_)

    def ffn_flops(self, tokens: int, pass_: str = "forward") -> float:
        """``ffn_flops`` of ``tokens`` tokens through this layer's MLP."""
        return ffn_flops(tokens, self.d_model, self.ffn, pass_=pass_)

    def overlap_threshold(self, hw, *, pass_: str = "forward", include_latency: bool = True):
        """``overlap_threshold`` of this layer on the device ``hw`` (its own ``grad_dtype``)."""
        h, kv, d, e, b = self.heads, self.kv_heads, self.head_dim, self.dtype, self.batch
        return overlap_threshold(
            hw,
            heads=h,
            kv_heads=kv,
            head_dim=d,
            dtype=e,
            pass_=pass_,
            batch=b,
            grad_dtype=self.grad_dtype,
            include_latency=include_latency,
        )

    def working_set_bytes(self, block_tokens: int, pass_: str = "forward") -> float:
        """``attention_working_set_bytes`` of a ring host's block of ``block_tokens``."""
        h, kv, d, e, b = self.heads, self.kv_heads, self.head_dim, self.dtype, self.batch
        return attention_working_set_bytes(block_tokens, h, kv, d, e, pass_=pass_, batch=b)


#: Flash-style backward: recompute S = Q K^T, then dV = P^T dO, dP = dO V^T, dQ = dS K,
#: dK = dS^T Q: five matmuls against the forward's two, i.e. 2.5 x the forward FLOPs.
BACKWARD_FACTOR = 2.5
#: Weight matmuls (projections, FFN) cost 2 x their forward in backward: dX and dW.
LINEAR_BACKWARD_FACTOR = 2.0


def _check_pass(pass_: object, allowed: tuple[str, ...]) -> str:
    return check_choice("pass", pass_, allowed)


def _check_work(work: float) -> float:
    work = check_real("work", work)
    if not (0.0 <= work <= 1.0):
        raise ValueError(f"work must be a fraction in [0, 1], got {work!r}")
    return work


def attention_flops(
    q_tokens: int,
    k_tokens: int,
    heads: int,
    head_dim: int,
    *,
    work: float = 1.0,
    pass_: str = "forward",
    batch: int = 1,
) -> float:
    """FLOPs of attention between ``q_tokens`` queries and ``k_tokens`` keys.

    forward: ``Q K^T`` and ``P V`` are two matmuls of ``2 q k d`` each, so ``4 q k d`` per
    query head; backward ``2.5 x`` that (see ``BACKWARD_FACTOR``); ``train-step`` both (3.5 x);
    ``decode`` is the forward formula (call it with ``q_tokens=1``). ``work`` scales for masks.
    The softmax's exponentials are not counted (a few per pair, against ``4 d``).
    """
    for name, value in (("q_tokens", q_tokens), ("k_tokens", k_tokens), ("heads", heads)):
        check_positive_int(name, value)
    check_positive_int("head_dim", head_dim)
    check_positive_int("batch", batch)
    pass_ = _check_pass(pass_, PASSES)
    factor = {"forward": 1.0, "decode": 1.0, "backward": BACKWARD_FACTOR}
    factor["train-step"] = 1.0 + BACKWARD_FACTOR
    base = 4.0 * q_tokens * k_tokens * head_dim * heads * batch
    return base * _check_work(work) * factor[pass_]


def kv_block_bytes(
    block_tokens: int,
    kv_heads: int,
    head_dim: int,
    dtype: str,
    *,
    pass_: str = "forward",
    batch: int = 1,
    grad_dtype: str | None = None,
) -> float:
    """Bytes one host sends per ring step (``batch`` sequences at once).

    forward: ``k`` and ``v``: ``2 c h_kv d`` elements of ``dtype``. Only the key/value heads
    travel, so grouped-query attention (``kv_heads < heads``) shrinks the transfer by
    ``heads / kv_heads``.
    backward: ``k, v`` plus their gradient accumulators ``dk, dv`` (the timer sends them as two
    messages, see ``grad_block_bytes``; the last step sends only ``dk, dv``). By default the
    gradients travel in the same dtype as ``k`` and ``v`` (a bf16 ring that accumulates in
    place); pass ``grad_dtype="fp32"`` for implementations that keep fp32 accumulators on the
    wire (no bf16 rounding at each of the ``P`` hops, at twice the gradient bytes).
    """
    check_positive_int("block_tokens", block_tokens)
    check_positive_int("kv_heads", kv_heads)
    check_positive_int("head_dim", head_dim)
    check_positive_int("batch", batch)
    dtype = check_dtype(dtype)
    pass_ = _check_pass(pass_, RING_PASSES)
    elements = 2.0 * block_tokens * kv_heads * head_dim * batch
    total = elements * DTYPE_BYTES[dtype]
    if pass_ == Pass.BACKWARD:
        total += elements * DTYPE_BYTES[check_dtype(grad_dtype or dtype)]
    return total


def grad_block_bytes(
    block_tokens: int,
    kv_heads: int,
    head_dim: int,
    dtype: str,
    *,
    batch: int = 1,
    grad_dtype: str | None = None,
) -> float:
    """Bytes of ``dk, dv`` for one block (the part of a backward message sent after compute)."""
    both = kv_block_bytes(
        block_tokens,
        kv_heads,
        head_dim,
        dtype,
        pass_="backward",
        batch=batch,
        grad_dtype=grad_dtype,
    )
    return both - kv_block_bytes(block_tokens, kv_heads, head_dim, dtype, batch=batch)


def _check_device(hw: object) -> None:
    """``hw`` must be a ``Hardware``, asked here by what it offers (its rates), not imported:
    the counts sit below the machine."""
    if not callable(getattr(hw, "flops_for", None)) or not hasattr(hw, "link_bandwidth"):
        raise ValueError(f"hw must be a Hardware (ringsim.get_hardware(name)), got {hw!r}"[:200])


def overlap_threshold(
    hw,
    *,
    heads: int,
    kv_heads: int,
    head_dim: int,
    dtype: str,
    pass_: str = "forward",
    batch: int = 1,
    grad_dtype: str | None = None,
    include_latency: bool = True,
) -> float:
    """Smallest block ``c*`` (tokens per host) for which one step's compute hides its transfer.

    For a full (unmasked) block. Under a causal mask a step computes only the visible part:
    with ``zigzag`` or ``striped`` every step but the first computes half a block, so those
    layouts need about ``2 c*`` to hide their transfers (the timer shows it).

    Derivation (forward). Per query head, the block's attention is two matmuls, ``Q K^T`` and
    ``P V``, each ``(c x d) @ (d x c)``-shaped: ``2 c^2 d`` FLOPs each, ``4 c^2 d`` together;
    ``h`` heads make ``4 c^2 d h``. The host passes on ``k`` and ``v`` of its ``h_kv`` key/value
    heads: ``2 c d h_kv`` elements of ``b`` bytes. With ``F`` FLOP/s (``hw.flops_for(dtype)``:
    peak times efficiency), ``B`` bytes/s one way and latency ``L``, communication hides when::

        4 c^2 d h / F  >=  L + 2 c d h_kv b / B

    Without latency and at 16 bit (``b = 2``): ``c >= (F / B) (h_kv / h)``; with ``h_kv = h``
    simply ``c >= F / B``: an arithmetic-intensity condition, compute grows with ``c^2`` and
    traffic with ``c``. Grouped-query attention lowers the threshold by ``h / h_kv``; fp32
    (``b = 4``) doubles it at equal ``F``. With latency the condition is the quadratic
    ``a c^2 - beta c - L >= 0``, ``a = 4 d h / F``, ``beta = 2 d h_kv b / B``, whose positive
    root (``hiding_block``) is returned; ``include_latency=False`` drops ``L``. A kernel's fixed
    cost per block (``hw.block_overhead_s``, ``o``) adds to the compute side:
    ``a c^2 + o >= beta c + L`` (dropped with ``L``); when ``o > L`` the returned ``c`` is the
    larger root, above which every block hides (0 if every block does).

    Check against the paper (Table 2, ``include_latency=False``, ``h_kv = h``): A100
    312 TFLOP/s over NVLink 300 GB/s gives ``F/B = 1040`` tokens (paper: 1.0K); over
    InfiniBand 12.5 GB/s, ``24,960`` (paper prints 24.5K; its own minimal-sequence column,
    149.5K = 6 x 24.9K, agrees with ``F/B``, not with 24.5K); TPU v4 275 TFLOP/s over
    268 GB/s, 1026 (paper: 1.0K).

    The two source texts disagree. The one counting ``4 d c^2`` FLOPs against ``4 c d`` bytes
    (``d`` the model width ``h x head_dim``) is right and gives ``c >= F/B``. The one counting
    ``2 c^2 d`` FLOPs per head against ``2 c d x 2`` bytes counts only one of the two matmuls:
    its FLOP/byte ratio ``c / 2`` is half the true ``c``, which would double every threshold
    (A100 NVLink 2.1K instead of 1.0K) and contradicts the paper's table.

    Backward: each step the host computes ``2.5 x`` the forward FLOPs (``BACKWARD_FACTOR``) and
    its link carries ``k, v`` *and* ``dk, dv``, as two messages (``k, v`` can leave during the
    compute, ``dk, dv`` only after it: they are being updated), so two latencies and
    ``2 c d h_kv (b + b_grad)`` bytes: at equal dtypes ``c >= 0.8 (F / B) (h_kv / h)``.
    ``batch`` scales both sides alike and only matters through the latency term.
    """
    _check_device(hw)
    pass_ = _check_pass(pass_, RING_PASSES)
    check_positive_int("heads", heads)
    check_positive_int("kv_heads", kv_heads)
    include_latency = check_bool("include_latency", include_latency)
    flops = hw.flops_for(dtype)
    a = attention_flops(1, 1, heads, head_dim, pass_=pass_, batch=batch) / flops
    beta = (
        kv_block_bytes(
            1, kv_heads, head_dim, dtype, pass_=pass_, batch=batch, grad_dtype=grad_dtype
        )
        / hw.link_bandwidth
    )
    messages = 2 if pass_ == Pass.BACKWARD else 1
    latency = messages * hw.link_latency if include_latency else 0.0
    # a fixed cost per block call (hw.block_overhead_s) is compute time too: it offsets latency
    fixed = latency - (hw.block_overhead_s if include_latency else 0.0)
    if fixed >= 0:
        return hiding_block(a, beta, fixed)
    # a c^2 - beta c + |fixed| >= 0 fails only between the roots (if any); hidden beyond them
    disc = beta * beta + 4.0 * a * fixed
    return 0.0 if disc < 0 else (beta + math.sqrt(disc)) / (2.0 * a)


def hiding_block(a: float, beta: float, latency: float) -> float:
    """Smallest block ``c`` for which ``a c^2 >= beta c + latency``: the positive root
    ``(beta + sqrt(beta^2 + 4 a latency)) / (2 a)``.

    The shape of every "compute hides communication" condition here: compute grows with
    ``c^2`` (``a`` seconds per query-key pair), the transfer with ``c`` (``beta`` seconds per
    token) plus a fixed ``latency`` (seconds). ``a > 0``; ``beta, latency >= 0``.
    """
    if not a > 0 or not beta >= 0 or not latency >= 0:
        raise ValueError(
            f"hiding_block needs a > 0 and beta, latency >= 0, got a={a!r}, beta={beta!r}, "
            f"latency={latency!r}"
        )
    return (beta + math.sqrt(beta * beta + 4.0 * a * latency)) / (2.0 * a)


def partial_bytes(heads: int, head_dim: int, *, tokens: int = 1, batch: int = 1) -> float:
    """Bytes of a ``Partial`` for ``tokens`` query rows in fp32: ``acc`` (``heads x head_dim``
    per row) and ``row_max``, ``row_sum`` (one each per row and head): ``4 t h (d + 2)``."""
    for name, value in (("heads", heads), ("head_dim", head_dim), ("tokens", tokens)):
        check_positive_int(name, value)
    check_positive_int("batch", batch)
    return 4.0 * batch * tokens * heads * (head_dim + 2)


def projection_flops(
    tokens: int, d_model: int, heads: int, kv_heads: int, head_dim: int, *, pass_: str = "forward"
) -> tuple[float, float]:
    """``(qkv, out)`` projection FLOPs for ``tokens`` tokens: ``x W_q``, ``x W_k``, ``x W_v``
    (``2 t d_model (h + 2 h_kv) d``) and the output projection ``2 t (h d) d_model``. Backward
    costs ``2 x`` (the input gradient and the weight gradient)."""
    pass_ = _check_pass(pass_, RING_PASSES)
    factor = LINEAR_BACKWARD_FACTOR if pass_ == Pass.BACKWARD else 1.0
    qkv = 2.0 * tokens * d_model * (heads + 2 * kv_heads) * head_dim
    out = 2.0 * tokens * heads * head_dim * d_model
    return qkv * factor, out * factor


def ffn_flops(tokens: int, d_model: int, ffn: int, *, pass_: str = "forward") -> float:
    """A two-matrix MLP ``d_model -> ffn -> d_model``: ``2 t d_model ffn`` per matrix; backward
    ``2 x``. (A SwiGLU MLP has three matrices: pass ``ffn = 1.5 x`` its hidden size.)"""
    pass_ = _check_pass(pass_, RING_PASSES)
    factor = LINEAR_BACKWARD_FACTOR if pass_ == Pass.BACKWARD else 1.0
    return 2.0 * 2.0 * tokens * d_model * ffn * factor


def attention_working_set_bytes(
    block_tokens: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    dtype: str,
    *,
    pass_: str = "forward",
    batch: int = 1,
) -> float:
    """Bytes the attention layer holds on one ring host with a block of ``c = block_tokens``.

    With ``H`` heads, ``H_kv`` key/value heads, head dim ``d``, element size ``e``:

    * forward: q block ``cHde`` + output ``cHde`` + fp32 accumulators (acc ``4cHd``, row_max
      and row_sum ``4cH`` each) + the current and the incoming key/value block
      (``2 * kv_block_bytes``: ``2 c H_kv d e`` each).
    * backward (and a training step, whose peak is the backward): q, out, dout (``3cHde``),
      lse (``4cH``), the fp32 dq accumulator (``4cHd``), and the current and incoming block,
      each carrying k, v, dk, dv (``2 * kv_block_bytes(pass_="backward")``).
    * decode (``ringsim.numerics.decode``: the cache stays put, partials are tree-merged): the
      host's
      cache shard of ``c`` tokens (``2 c H_kv d e``), the one query token and its output
      (``2Hde``), and two partials (its own and the one it merges in: acc ``4Hd``, row_max and
      row_sum ``4H`` each).

    Everything is proportional to ``c``: doubling the hosts at a fixed sequence halves it.
    """
    c = check_positive_int("block_tokens", block_tokens)
    heads = check_positive_int("heads", heads)
    kv_heads = check_positive_int("kv_heads", kv_heads)
    head_dim = check_positive_int("head_dim", head_dim)
    batch = check_positive_int("batch", batch)
    e = DTYPE_BYTES[check_dtype(dtype)]
    _check_pass(pass_, PASSES)
    q_like = c * heads * head_dim * e  # q, out or dout block
    row_stat = c * heads * 4  # one fp32 number per query row and head
    acc = c * heads * head_dim * 4
    if pass_ == Pass.FORWARD:  # the accumulators are a Partial of c rows
        kv = kv_block_bytes(c, kv_heads, head_dim, dtype, pass_="forward", batch=1)
        per_seq = 2 * q_like + partial_bytes(heads, head_dim, tokens=c) + 2 * kv
    elif pass_ in (Pass.BACKWARD, Pass.TRAIN_STEP):
        kv = kv_block_bytes(c, kv_heads, head_dim, dtype, pass_="backward", batch=1)
        per_seq = 3 * q_like + row_stat + acc + 2 * kv
    else:
        cache = kv_block_bytes(c, kv_heads, head_dim, dtype, pass_="forward", batch=1)
        per_seq = cache + 2 * heads * head_dim * e + 2 * partial_bytes(heads, head_dim)
    return float(batch * per_seq)
