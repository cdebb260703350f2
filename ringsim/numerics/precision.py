"""Low-precision rounding, and the precision lab built on it.

Why the error of a ring can grow with the number of hosts
---------------------------------------------------------
A ring host merges one partial per step. FlashAttention-style kernels compute each block in
fp32 internally but *return* the block's output in the input dtype (bf16), with the
log-sum-exp in fp32. Ring implementations built on such kernels therefore

* merge bf16 block outputs into an fp32 running output (rounding once per block, the
  "partial" case, ``partial_dtype="bf16"``); users reported errors that grow with the ring
  size even so (zhuzilin/ring-flash-attention, issue 42), or, in the simplest versions,
* keep the running output itself in bf16 between steps (``out = a * out + b * block_out`` in
  the input dtype, the "accumulator" case, ``accum_dtype="bf16"``).

Each rounding adds a relative error of up to ``2**-9`` (bf16 keeps 8 significant bits). In
the accumulator case the rounding hits the *running* sum once per ring step, so the errors
pile up like a random walk: with ``P`` hosts a row is rounded ``P`` times. Rounding only the
partials rounds each block's contribution once before an fp32 merge; that error grows far
more slowly. Keeping the accumulator (and ``row_sum``) in fp32 keeps the ring as accurate as
one dense fp32 attention at any host count. Measured with ``error_growth`` (16 tokens per host,
``head_dim=32``, seed 0, not causal), mean row-wise relative error at ``P = 2, 8, 64``:

* ``accum_dtype="bf16"``:   2.5e-3, 4.4e-3, 1.2e-2
* ``partial_dtype="bf16"``: 1.6e-3, 1.6e-3, 1.8e-3 (``lse`` kept in fp32, as kernels do)
* fp32 throughout:          1.2e-7, 1.5e-7, 2.4e-7

``round_to`` emulates the roundings on float32/float64 arrays (no bf16 dtype needed in NumPy);
``ring_forward`` applies them where a real kernel would (see ``ringsim.numerics.ring``):
``partial_dtype`` rounds each block's output and keeps its log-sum-exp in fp32;
``accum_dtype`` leaves ``row_max`` exact and rounds ``acc`` and ``row_sum``.
``error_growth`` runs the ring at a fixed block size for several host counts and measures the
error against the float64 reference, which is what the precision lesson plots.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ringsim.checks import (
    check_choice,
    check_memory,
    check_non_negative_int,
    check_positive_int,
)
from ringsim.numerics.attention import reference_attention
from ringsim.numerics.ring import ring_attention
from ringsim.numerics.rounding import relative_error


def error_growth(
    hosts_list: Sequence[int],
    *,
    seq_per_host: int = 32,
    head_dim: int = 32,
    heads: int = 1,
    partial_dtype: str | None = None,
    accum_dtype: str | None = None,
    seed: int = 0,
    causal: bool = False,
    layout: str = "contiguous",
    dtype: str = "float32",
) -> list[dict]:
    """Error of ``ring_attention`` against the float64 reference as the ring grows.

    For each ``P`` in ``hosts_list`` the sequence has ``N = P * seq_per_host`` tokens, so every
    host keeps the same block size and only the number of ring steps (merges) changes. ``q``,
    ``k``, ``v`` ``(heads, N, head_dim)`` are standard normal from ``seed`` (cast to
    ``dtype``); the reference sees the same cast values in float64. Returns one dict per host
    count: ``hosts``, ``seq_len``, ``max_rel_error`` and ``mean_rel_error`` (row-wise
    ``relative_error`` over all query rows).
    """

    seq_per_host = check_positive_int("seq_per_host", seq_per_host)
    head_dim = check_positive_int("head_dim", head_dim)
    heads = check_positive_int("heads", heads)
    dtype = check_choice("dtype", dtype, ("float32", "float64"))
    seed = check_non_negative_int("seed", seed)
    if not isinstance(hosts_list, Sequence | np.ndarray) or isinstance(hosts_list, str):
        raise ValueError(f"hosts_list must be a list of host counts, got {hosts_list!r}"[:200])
    if len(hosts_list) == 0:
        raise ValueError(f"hosts_list must name at least one host count, got {hosts_list!r}")
    counts = [check_positive_int("hosts_list", hosts) for hosts in hosts_list]
    for hosts in counts:  # q, k, v and the float64 reference's score matrix, at most
        tokens = hosts * seq_per_host
        need = 8 * heads * tokens * (4 * head_dim + tokens)
        sizes = f"heads={heads}, head_dim={head_dim}, hosts={hosts}, seq_per_host"
        check_memory(sizes, seq_per_host, need, "the inputs and the float64 reference")
    rows = []
    for hosts in counts:
        seq_len = hosts * seq_per_host
        rng = np.random.default_rng(seed)
        q, k, v = (rng.standard_normal((heads, seq_len, head_dim)).astype(dtype) for _ in "qkv")
        out = ring_attention(
            q,
            k,
            v,
            hosts=hosts,
            layout=layout,
            causal=causal,
            partial_dtype=partial_dtype,
            accum_dtype=accum_dtype,
        )
        rel = relative_error(out, reference_attention(q, k, v, causal=causal))
        rows.append(
            {
                "hosts": hosts,
                "seq_len": seq_len,
                "max_rel_error": float(rel.max()),
                "mean_rel_error": float(rel.mean()),
            }
        )
    return rows
