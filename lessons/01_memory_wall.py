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
# # 1. The memory wall
#
# Attention compares every token with every other token. Long before the arithmetic becomes
# too slow, the *bytes* stop fitting on one accelerator. This lesson puts numbers on that wall
# at 128K to 1M tokens, and checks the numbers that explainers of Ring Attention quote.
#
# **You will be able to**
#
# - compute the size of the attention score matrix, the key/value (KV) cache and the
#   checkpointed activations for a given model and context length;
# - tell which of them grows with $N^2$ and which with $N$, and why the linear ones are the
#   real wall once a FlashAttention-style kernel removes the quadratic one;
# - spot the two usual slips in published figures: forgetting the layer count, and mixing
#   per-head with per-model sizes.

# %%
import matplotlib.pyplot as plt
import numpy as np

import ringsim
from ringsim.teach import (
    Exercise,
    caption,
    exercises,
    notation,
    references,
    use_lesson_style,
)

use_lesson_style()
GB = 1e9  # decimal gigabytes, as device datasheets count them
MILLION, ONE_M = 10**6, 2**20  # a quote's "1M" (10^6) and the lessons' 1M tokens (2^20)


def show_bytes(x: float) -> str:
    """Bytes in the largest decimal unit that keeps the number readable."""
    for unit, size in (("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if x >= size:
            return f"{x / size:,.1f} {unit}"
    return f"{x:,.0f} B"


TERMS = ("1M, 1K (tokens)", "GQA, MHA", "KV cache (KV)", "checkpointing", "bf16")
TERMS += ("fp32, fp16",)
notation(*("N", "L", "H_{kv}", "d", "d_{model}", "e", "P"), terms=TERMS)

# %% [markdown]
# ## The score matrix
#
# For one head, attention forms the scores $S = QK^\top / \sqrt{d}$: an $N \times N$ matrix,
# whatever the head dimension $d$ is. At one million tokens that is $10^{12}$ numbers.
#
# **Predict first.** One source says that "for a 1M-token context with hidden dimension 4096,
# the attention matrix alone would consume ~4 TB in FP32". Is 4 TB right? Does the hidden
# dimension matter? How big is it for *all* the heads of one layer of a 7B LLaMA (32 heads)?
# (The quote's million is $10^6$; the lessons otherwise count 1M tokens as $2^{20}$, as the
# `ringsim` command line does: the notation box above says so.)
#
# <details><summary>Answer</summary>
#
# $10^{12}$ scores $\times$ 4 bytes $= 4 \times 10^{12}$ bytes $= 4$ TB, so the figure is right,
# but it is the matrix of **one head** (of one layer, for one sequence). The hidden dimension
# 4096 plays no part in it: it only sets how many heads there are ($4096 / 128 = 32$), and all
# 32 heads of a layer hold 128 TB. With $2^{20}$ tokens ("1M" in powers of two) one head is
# 4.4 TB.
#
# </details>

# %%
N = MILLION
one_head = N * N * 4
print(f"one head, fp32, N = 1,000,000: {show_bytes(one_head)}")
print(f"one head, fp32, N = 2**20:     {show_bytes(ONE_M**2 * 4)}")
heads_7b = ringsim.MODELS["7b"].heads
print(f"all {heads_7b} heads of one 7B layer:  {show_bytes(one_head * heads_7b)}")

# %% [markdown]
# ## The KV cache
#
# A decoder keeps, for every layer and every past token, one key and one value vector per
# key/value head: $N \cdot L \cdot H_{kv} \cdot d \cdot 2 \cdot e$ bytes, with $L$ layers,
# $H_{kv}$ key/value heads of dimension $d$, the factor 2 for K and V, and $e$ bytes per
# element (2 for bf16).
#
# **Predict first.** A widely shared figure reads "With GQA and 128 KV-heads at dimension 128,
# a 1M-token KV-cache is 1,000,000 × 128 × 128 × 2 × 2 bytes ≈ 64 GB". Multiply it out. What
# is missing from the formula? And is "128 KV heads" what grouped-query attention (GQA) means?
#
# <details><summary>Answer</summary>
#
# The product is $65{,}536{,}000{,}000$ bytes: 65.5 GB, or 61.0 GiB, so "≈ 64 GB" mixes the
# two units but is the right size for **one layer**. The formula has no layer count: a model
# keeps that much per layer, so 80 such layers hold 5.2 TB. And GQA exists to *shrink* the
# number of key/value heads (Llama-2/3 70B share 8 KV heads among 64 query heads); with 8 KV
# heads the same 80 layers need 328 GB at $10^6$ tokens (344 GB at $2^{20}$), still more than
# any single accelerator.
#
# </details>


# %%
def kv_cache_bytes(
    model: ringsim.ModelSpec, tokens: int, bytes_per_element: int = 2
) -> float:
    """K and V for every layer, key/value head and token."""
    return (
        tokens
        * model.layers
        * model.n_kv_heads
        * model.head_dim
        * 2
        * bytes_per_element
    )


quoted = 1_000_000 * 128 * 128 * 2 * 2
print(
    f"the quoted product: {quoted:,} bytes = {quoted / GB:.1f} GB = "
    f"{quoted / 2**30:.1f} GiB  (one layer)"
)

# a 70B-style GQA model: 80 layers, 64 query heads sharing 8 key/value heads of 128
gqa_70b = ringsim.ModelSpec(
    "70b-gqa", layers=80, d_model=8192, heads=64, ffn_hidden=28672, kv_heads=8
)
mha_128 = ringsim.ModelSpec(
    "80 layers x 128 kv heads", layers=80, d_model=16384, heads=128, ffn_hidden=1
)
print(f"{'KV cache at':>26}  {'10^6 tokens':>11}  {'2^20 tokens':>11}")
for model in (ringsim.MODELS["7b"], gqa_70b, mha_128):
    sizes = [show_bytes(kv_cache_bytes(model, n)) for n in (MILLION, ONE_M)]
    print(f"{model.name:>26}  {sizes[0]:>11}  {sizes[1]:>11}")

# %% [markdown]
# ## What grows with $N^2$ and what with $N$
#
# FlashAttention never stores the score matrix: it streams over key blocks with an online
# softmax (lesson 2), so the quadratic term disappears from memory. What remains grows
# linearly: the KV cache and, for training, the activations kept for the backward pass. With
# full gradient checkpointing that is one $d_{model}$-vector per token per layer,
# $N \cdot L \cdot d_{model} \cdot e$. Linear still means "does not fit" at a million tokens,
# which is the wall Ring Attention removes by splitting the sequence across hosts.

# %%
contexts = np.array([2**k for k in range(14, 21)])  # 16K ... 1M (2^20) tokens
model = ringsim.MODELS["7b"]
curves = {
    "score matrix, one head (fp32)": contexts.astype(float) ** 2 * 4,
    "KV cache, whole 7B model (bf16)": kv_cache_bytes(model, contexts),
    "checkpointed activations, 7B (bf16)": contexts
    * model.layers
    * model.d_model
    * 2.0,
}
fig, ax = plt.subplots(layout="constrained", figsize=(8, 4))
for label, values in curves.items():
    ax.plot(contexts, values / GB, "o-", label=label, ms=4)
for capacity, name in ((80, "A100/H100 80 GB"), (141, "H200 141 GB")):
    ax.axhline(capacity, color="grey", ls="--", lw=1)
    ax.text(contexts[0], capacity * 1.15, name, fontsize=8, color="dimgrey")
ax.set_xscale("log", base=2)
ax.set_yscale("log")
ax.set_xticks(contexts, [f"{c // 1024}K" for c in contexts])
ax.set_xlabel("context length (tokens)")
ax.set_ylabel("bytes (GB)")
ax.set_title("What has to fit on one device, per sequence")
ax.legend(loc="upper left", fontsize=9)
plt.show()

# %% tags=["remove-input"]
kv_80 = 80 * GB / kv_cache_bytes(model, 1)  # tokens at which the 7B cache fills 80 GB
kv_1m = show_bytes(curves["KV cache, whole 7B model (bf16)"][-1])
act_at_1m = show_bytes(curves["checkpointed activations, 7B (bf16)"][-1])
caption(
    "Figure 1.1",
    f"the score matrix (steepest line) passes a whole device at about "
    f"{np.sqrt(80 * GB / 4) / 1e3:.0f}K tokens for a single head, but a fused kernel never "
    f"stores it. The linear lines are the ones that stay: the 7B KV cache passes 80 GB at "
    f"about {kv_80 / 1e3:.0f}K tokens and is {kv_1m} at 1M; its checkpoints are "
    f"{act_at_1m}. "
    "Splitting the sequence over $P$ hosts divides every linear line by $P$.",
)

# %%
print(f"{'at 1M (2^20) tokens':>36}  {'one device':>10}  {'per host, 8 hosts':>17}")
for label, values in curves.items():
    at_1m = values[-1]
    print(f"{label:>36}  {show_bytes(at_1m):>10}  {show_bytes(at_1m / 8):>17}")

# %% [markdown]
# ## Takeaways
#
# - The score matrix of **one head** at $10^6$ tokens is 4 TB in fp32 (4.4 TB at $2^{20}$);
#   the hidden size does not enter. Fused kernels never store it.
# - The KV cache is $N L H_{kv} d \cdot 2e$ bytes; quoted figures that leave out $L$ are per
#   layer. The "≈ 64 GB" figure is one layer of a 128-KV-head model (65.5 GB).
# - What stays after FlashAttention grows linearly with $N$, and that is the wall the ring
#   breaks: each of $P$ hosts holds $N/P$ tokens' worth.
#
# Next: [the online softmax](02_online_softmax.py), the trick that lets attention stream.

# %% tags=["remove-input"]
llama70 = gqa_70b
kv_128k = kv_cache_bytes(llama70, 128 * 1024)
weights_70b = 70e9 * 2  # 70 billion parameters in bf16
n_80gb = int(np.sqrt(80e9 / 4))
act_1m = ONE_M * model.layers * model.d_model * 2.0
hosts_half = int(np.ceil(act_1m / 40e9))
exercises(
    Exercise(
        "A 70B model with grouped-query attention (80 layers, 8 key/value heads of dimension "
        "128) serves a 128K-token prompt in bf16. How big is its KV cache, and how many "
        "80 GB devices does the cache alone fill?",
        f"$N L H_{{kv}} d \\cdot 2 \\cdot 2 = 131072 \\cdot 80 \\cdot 8 \\cdot 128 \\cdot 4$ bytes "
        f"$=$ {show_bytes(kv_128k)}: {kv_128k / 80e9:.2f} of one 80 GB device, before the "
        f"weights ({show_bytes(weights_70b)} in bf16). Computed with `kv_cache_bytes` above.",
    ),
    Exercise(
        "At what context length does the fp32 score matrix of a single head stop fitting in "
        "80 GB? Does a bigger head dimension change the answer?",
        f"$4N^2 = 80 \\times 10^9$ gives $N = \\sqrt{{2 \\times 10^{{10}}}} \\approx$ {n_80gb:,} "
        "tokens. The head dimension does not enter: the matrix is $N \\times N$ whatever $d$ "
        "is (it changes the cost of computing each score, not how many there are).",
    ),
    Exercise(
        "Full gradient checkpointing keeps one $d_{model}$ vector per token per layer. For "
        "the 7B model at $2^{20}$ tokens in bf16, how many hosts of 80 GB does a ring need "
        "before the checkpoints alone take at most half of each device?",
        f"$N L d_{{model}} \\cdot 2 = 2^{{20}} \\cdot {model.layers} \\cdot {model.d_model} "
        f"\\cdot 2$ = {show_bytes(act_1m)}. Half a device is 40 GB, so "
        f"$P \\geq$ {act_1m / 40e9:.1f}: {hosts_half} hosts "
        f"({2 ** int(np.ceil(np.log2(hosts_half)))} for a power of two). Lesson 7 adds the "
        "other parts of a host's memory.",
    ),
)

# %% tags=["remove-input"]
references(
    "flash",
    "memory_efficient",
    "ring",
    "llama3",
    notes={
        "flash": "Why the score matrix is never stored.",
        "ring": "Section 3 and Table 1: the memory a host holds.",
        "llama3": "Grouped-query attention with 8 key/value heads (Table 3).",
    },
)
