# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 8. The backward pass on the ring
#
# Training needs gradients. The backward pass runs the same ring again: each host keeps its
# queries and its query gradient $dQ$ at home, and every key/value block travels *with its
# gradient accumulators* $dK, dV$; each host adds its contribution as the block passes, and
# one extra hop after the last step brings the finished $dK, dV$ home to the block's owner.
#
# **You will be able to**
#
# - say what travels in the backward ring (and what never moves), and why one extra hop is
#   needed;
# - explain how the backward recomputes the probabilities from the saved log-sum-exp instead of
#   storing the $N \times N$ matrix;
# - compare the backward's overlap threshold and timeline with the forward's.

# %%
import matplotlib.pyplot as plt
import numpy as np

import ringsim
from ringsim import RingConfig, get_hardware, simulate
from ringsim.teach import (
    BACKWARD_FACTOR,
    Exercise,
    caption,
    check_delta,
    exercises,
    grad_block_bytes,
    notation,
    plot_timelines,
    references,
    relative_error,
    scaled,
    try_it,
    use_lesson_style,
)

use_lesson_style()
rng = np.random.default_rng(8)
TERMS = ("bf16", "fp32, fp16", "NIC, InfiniBand", "Ulysses", "all-gather")
TERMS += ("prefill, decode",)
notation(
    *("P", "c", "d", "o, O", "dO", "\\delta", "\\mathrm{lse}"),
    terms=TERMS,
)

# %% [markdown]
# ## The schedule
#
# **Predict first.** In the forward ring each host sends $P-1$ blocks. In the backward ring,
# how many messages does a host send, and what is in the last one?
#
# <details><summary>Answer</summary>
#
# $P$: after each of the first $P-1$ steps it passes on $(K, V, dK, dV)$; after the last step
# the block's $K, V$ are no longer needed, but its $dK, dV$ are on the wrong host (one before
# the owner), so a final message carries only $dK, dV$ one hop home.
#
# </details>

# %%
backward = ringsim.build_schedule(
    4, "zigzag", causal=True, pass_="backward", seq_len=32
)
print(backward.describe())

# %% [markdown]
# ## Exact gradients
#
# Notation (in this lesson $P$ stays the host count). For one query row $i$: scores
# $s_{ij} = q_i \cdot k_j / \sqrt{d}$, attention weights $A_{ij} = e^{s_{ij} - \mathrm{lse}_i}$
# (the softmax, lesson 2's log-sum-exp form), output $O_i = \sum_j A_{ij} v_j$, and $dO$ the
# gradient arriving from the layer above. Backpropagating through $O = AV$ gives
#
# $$dV = A^\top dO, \qquad dA = dO\, V^\top \quad (dA_{ij} = dO_i \cdot v_j),$$
#
# and through the softmax of each row (its Jacobian is $\mathrm{diag}(A_i) - A_i A_i^\top$)
#
# $$dS_{ij} = A_{ij}\Big(dA_{ij} - \sum_k A_{ik}\, dA_{ik}\Big) = A_{ij}\,(dA_{ij} - \delta_i).$$
#
# The row sum $\delta_i$ looks as if it needs the whole row of $A$, which no host has. It
# does not:
#
# $$\delta_i = \sum_k A_{ik}\, (dO_i \cdot v_k) = dO_i \cdot \sum_k A_{ik} v_k
#   = dO_i \cdot O_i = \mathrm{rowsum}(dO \circ O)_i ,$$
#
# one number per query row, computed at home from the forward's output before the ring
# starts. Then $dQ = dS\,K/\sqrt{d}$ and $dK = dS^\top Q/\sqrt{d}$. So each host rebuilds
# its block of $A$ exactly from the saved $\mathrm{lse}$ (one number per row) and never
# stores the $N \times N$ matrix. We compare with the float64 reference that builds it:

# %%
n, d = scaled(256, multiple=32), 32
q, k, v, dout = (rng.standard_normal((2, n, d)) for _ in range(4))
exact = ringsim.reference_attention_grad(q, k, v, dout, causal=True)
for layout in ringsim.layout_names():
    ring = ringsim.ring_attention_backward(
        q, k, v, dout, hosts=8, layout=layout, causal=True
    )
    errors = [relative_error(g, e).max() for g, e in zip(ring, exact, strict=True)]
    print(f"{layout:>10}: dq {errors[0]:.1e}  dk {errors[1]:.1e}  dv {errors[2]:.1e}")

# %% [markdown]
# ## Write it yourself: $\delta$
#
# Write `my_delta(out, dout)`: one number per query row (and head), $\delta_i = dO_i \cdot O_i$.
# The check after the folded solution feeds it to `ringsim`'s block backward
# (`block_attention_backward`, which takes $\delta$ as an argument) and compares the
# resulting $dQ, dK, dV$ with the float64 reference that builds the whole matrix.


# %%
def my_delta(out: np.ndarray, dout: np.ndarray) -> np.ndarray:
    """rowsum(dO * O): shape (..., rows), one number per query row."""
    raise NotImplementedError("multiply elementwise, sum over the head dimension")


# %% tags=["hide-input"]
# The reference solution: open it after you have tried.
def reference_delta(out: np.ndarray, dout: np.ndarray) -> np.ndarray:
    return (dout * out).sum(axis=-1)


# %%
try_it(my_delta, reference_delta, check_delta)

# %% [markdown]
# ## Timing
#
# Per step the backward computes about $2.5\times$ the forward's FLOPs (it recomputes the
# scores, then four more matmuls: `BACKWARD_FACTOR`), and its link carries $K, V$ and
# $dK, dV$: twice the bytes.
#
# **Predict first.** So is the backward's overlap threshold higher or lower than the forward's?
#
# <details><summary>Answer</summary>
#
# Lower: compute grows $2.5\times$, traffic $2\times$, so the threshold is $2/2.5 = 0.8$ of the
# forward's, when the gradients travel in the same dtype as $K, V$. (Sending $dK, dV$ in fp32
# doubles their bytes and raises it to $1.2\times$.)
#
# </details>

# %%
a100_ib = get_hardware("a100-ib")
kw = dict(heads=32, kv_heads=32, head_dim=128, dtype="bf16", include_latency=False)
fwd = ringsim.overlap_threshold(a100_ib, **kw)
bwd = ringsim.overlap_threshold(a100_ib, pass_="backward", **kw)
bwd32 = ringsim.overlap_threshold(a100_ib, pass_="backward", grad_dtype="fp32", **kw)
print(f"backward FLOPs per step: {BACKWARD_FACTOR}x the forward's")
print(
    f"A100 InfiniBand: forward {fwd:,.0f}, backward {bwd:,.0f} ({bwd / fwd:.2f}x),\n"
    f"backward with fp32 gradients {bwd32:,.0f} ({bwd32 / fwd:.2f}x)"
)

# %%
runs = {}
for pass_ in ("forward", "backward"):
    config = RingConfig(hosts=4, seq_len=4 * 16384, hardware=a100_ib, pass_=pass_)
    runs[f"{pass_}, 16K tokens per host"] = simulate(config).timeline
fig = plot_timelines(list(runs.items()), max_hosts=4, width=8)
plt.show()

# %% tags=["remove-input"]
idle = {name: timeline.idle_fraction for name, timeline in runs.items()}
caption(
    "Figure 8.1",
    "at 16K tokens per host, below InfiniBand's threshold, the forward waits on the link at "
    f"every step ({idle['forward, 16K tokens per host']:.0%} idle). The backward's bars are "
    f"{BACKWARD_FACTOR}x wider and its messages twice as large, so it waits relatively "
    f"less ({idle['backward, 16K tokens per host']:.0%} idle); its last message, the "
    "$dK, dV$ homecoming, no compute can hide.",
)

# %% [markdown]
# ## Takeaways
#
# - $dQ$ stays home; $dK, dV$ travel with their block and come home with one extra hop.
# - The saved log-sum-exp makes the probabilities exact without the matrix.
# - Backward: 2.5× the FLOPs, 2× the bytes, so its threshold is 0.8× the forward's.
#
# Next: [ring, Ulysses and all-gather; prefill and decode](09_strategies_decode.py).

# %% tags=["remove-input"]
h200_ib = get_hardware("h200-ib")
kw_h = dict(heads=32, kv_heads=32, head_dim=128, dtype="bf16", include_latency=False)
fwd_h, bwd_h = (
    ringsim.overlap_threshold(h200_ib, pass_=p_, **kw_h)
    for p_ in ("forward", "backward")
)
kv_mb = ringsim.kv_block_bytes(8192, 32, 128, "bf16") / 1e6
grad_mb = grad_block_bytes(8192, 32, 128, "fp32") / 1e6
exercises(
    Exercise(
        "On the `h200-ib` preset (32 heads of 128, bf16 gradients), what are the forward and "
        "backward thresholds? Which pass needs the bigger block to hide its transfers?",
        f"Forward {fwd_h:,.0f} tokens, backward {bwd_h:,.0f} "
        f"({bwd_h / fwd_h:.2f}x): the forward needs the bigger block, since the backward "
        "does 2.5x the FLOPs for 2x the bytes.",
    ),
    Exercise(
        "A backward message for $c = 8192$ tokens, 32 heads of 128: K and V in bf16, dK and "
        "dV accumulated in fp32. How many megabytes, against the forward's message?",
        f"K, V: {kv_mb:.1f} MB; dK, dV in fp32: {grad_mb:.1f} MB; together "
        f"{kv_mb + grad_mb:.1f} MB, {(kv_mb + grad_mb) / kv_mb:.0f}x the forward's "
        "(`ringsim.kv_block_bytes`, `grad_block_bytes`).",
    ),
    Exercise(
        "Find the bug: a ring backward computes $\\delta_i$ on each host from the block "
        "it holds, $\\delta_i = \\sum_{j \\in \\text{block}} A_{ij} dA_{ij}$. Why is "
        "that wrong, and what is the fix?",
        "$\\delta_i$ is a sum over the *whole* row of $A$; a block's share of it is not "
        "the same number, so $dS$ comes out wrong on every block (the errors do not cancel "
        "when summed). The fix is the identity above: $\\delta_i = dO_i \\cdot O_i$, "
        "computed once at home from the forward's full output.",
    ),
)

# %% tags=["remove-input"]
references(
    "flash",
    "flash2",
    "ring",
    notes={
        "flash": "The backward from the saved statistics (its Appendix B).",
        "flash2": "The backward with the log-sum-exp and $D = \\mathrm{rowsum}(dO \\circ O)$.",
    },
)
