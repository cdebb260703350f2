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
# # 3. Blockwise attention and the blockwise feed-forward
#
# Before spreading a sequence over many hosts, look at one host doing it one block at a time.
# Blockwise attention (the memory-efficient / FlashAttention idea) never holds more than one
# $c \times c$ tile of scores; the Blockwise Parallel Transformer applies the same trick to
# the feed-forward network, whose hidden layer is the largest activation of a layer.
#
# **You will be able to**
#
# - write blockwise attention as two loops over query and key blocks with the partials of
#   lesson 2, and say how much memory the score tiles take;
# - explain why the feed-forward network needs no communication at all when a sequence is
#   split (it is position-wise), and what chunking its hidden layer saves;
# - check that a whole transformer block on a ring of hosts equals the dense block.

# %%
import time

import matplotlib.pyplot as plt
import numpy as np

import ringsim
from ringsim.teach import (
    Exercise,
    caption,
    empty_partial,
    exercises,
    notation,
    references,
    relative_error,
    scaled,
    use_lesson_style,
)

use_lesson_style()
rng = np.random.default_rng(1)
TERMS = ("FFN", "bf16", "fp32, fp16", "FA2, FA3 (FA)", "1M, 1K (tokens)")
notation(*("N", "c", "d_{model}", "d_{ff}"), terms=TERMS)

# %% [markdown]
# ## Two loops over blocks
#
# Cut $N$ tokens into blocks of $c$. For each query block, walk over the key/value blocks,
# merging partials; only one $c \times c$ tile of scores exists at a time. (The ring of the
# next lesson is the same double loop with the inner loop spread over hosts.)
#
# **Predict first.** At $N = 4096$ and $c = 512$, how many score tiles are computed, and how
# many bytes does the largest score array take, compared with the whole $N \times N$ matrix in
# float64?
#
# <details><summary>Answer</summary>
#
# $(N/c)^2 = 64$ tiles, each $512 \times 512 \times 8$ bytes = 2 MiB, against 128 MiB for the
# whole matrix: $(N/c)^2 = 64$ times less at any moment. The arithmetic is the same: every
# tile is still computed, once.
#
# </details>

# %%
n, d, c = scaled(4096, multiple=512), 64, 512
q, k, v = (rng.standard_normal((n, d)) for _ in range(3))
scale = 1 / np.sqrt(d)


def blockwise_attention(q, k, v, c):
    """Query blocks outside, key/value blocks inside, partials merged as they come."""
    out = np.empty_like(q)
    for start in range(0, len(q), c):
        q_block = q[start : start + c]
        state = empty_partial(q_block.shape, q.dtype)
        for kv_start in range(0, len(k), c):
            kv = slice(kv_start, kv_start + c)
            state = ringsim.merge(
                state, ringsim.block_attention(q_block, k[kv], v[kv], scale=scale)
            )
        out[start : start + c] = state.out
    return out


t0 = time.perf_counter()
out = blockwise_attention(q, k, v, c)
t_block = time.perf_counter() - t0
t0 = time.perf_counter()
exact = ringsim.reference_attention(q, k, v)
t_dense = time.perf_counter() - t0
print(f"{(n // c) ** 2} tiles; error vs dense: {relative_error(out, exact).max():.1e}")
tile_mib, dense_mib = c * c * 8 / 2**20, n * n * 8 / 2**20
print(f"largest score array: blockwise {tile_mib:.0f} MiB, dense {dense_mib:.0f} MiB")
print(f"time here: blockwise {t_block:.2f} s, dense {t_dense:.2f} s (same arithmetic)")

# %%
contexts = np.array([2**p for p in range(12, 21)])
fig, ax = plt.subplots(layout="constrained", figsize=(7.5, 3.6))
ax.loglog(
    contexts,
    contexts.astype(float) ** 2 * 2,
    "o-",
    label="dense scores, one head (bf16)",
)
for tile in (128, 512, 2048):
    tile_bytes = np.full(len(contexts), tile * tile * 2.0)
    ax.loglog(contexts, tile_bytes, "--", label=f"one {tile}² tile")
ax.loglog(
    contexts, contexts * 128 * 2 * 2.0, "s-", label="K and V of one head (d = 128)"
)
ax.set_xscale("log", base=2)
ax.set_xticks(contexts, [f"{x // 1024}K" for x in contexts])
ax.set_xlabel("context length (tokens)")
ax.set_ylabel("bytes")
ax.set_title("Blockwise attention: the score memory stops depending on $N$")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# *Figure 3.1. What to notice:* the dense score matrix grows with $N^2$ and passes the size of
# the keys and values it was computed from almost immediately. A tile does not grow at all,
# so what is left is linear: the K and V themselves. That linear line is what the ring splits.

# %% [markdown]
# ## The feed-forward network, block by block
#
# The feed-forward network acts on each token separately: token $i$'s output depends on token
# $i$ alone. So when a sequence is split over hosts, each host runs it on its own tokens with
# **no communication**. Its hidden layer, $d_{ff}$ wide, is the largest activation of the
# layer (the cell below prints $d_{ff}/d_{model}$ for the models here); the blockwise version
# builds it `ffn_chunk` tokens at a time.
#
# **Predict first.** For a 7B-sized layer ($d_{ff} = 11008$) and 32K tokens on 8 hosts, how big
# is the hidden activation dense, per host, and in chunks of 1,024 tokens (fp32)?
#
# <details><summary>Answer</summary>
#
# Dense: $32768 \times 11008 \times 4$ B = 1.44 GB. Per host: one eighth, 180 MB. In 1,024-token
# chunks: 45 MB, whatever the context length.
#
# </details>

# %%
for name in ("7b", "llama3-8b", "llama3-70b"):
    m = ringsim.get_model(name)
    print(f"{name}: d_ff = {m.ffn_hidden:,} = {m.ffn_hidden / m.d_model:.2f} d_model")
peak = ringsim.ffn_peak_bytes(32 * 1024, 11008, hosts=8, ffn_chunk=1024)
for what, size in peak.items():
    print(f"{what:>10}: {size / 1e6:8.1f} MB = {size / 1e9:.2f} GB")

# %% [markdown]
# Now a whole pre-norm transformer block, small enough to check: projections, attention on a
# ring of 4 hosts, output projection, residuals, and the chunked feed-forward on each host.

# %%
params = ringsim.init_params(d_model=64, heads=4, kv_heads=2, d_ff=256, seed=0)
x = rng.standard_normal((scaled(256, multiple=32), 64))
dense = ringsim.dense_block(x, params, causal=True)
stats = {}
chunks = [8, 16, 32, 64]
errors = []
for chunk in chunks:
    ring_out = ringsim.ring_block(
        x, params, hosts=4, causal=True, ffn_chunk=chunk, stats=stats
    )
    errors.append(relative_error(ring_out, dense).max())
    print(f"ffn_chunk={chunk:3d}: error vs dense {errors[-1]:.1e}")

sizes = [ringsim.ffn_peak_bytes(len(x), 256, hosts=4, ffn_chunk=ch) for ch in chunks]
fig, ax = plt.subplots(layout="constrained", figsize=(7, 3.2))
labels = ["dense", "per host", *[f"chunk {ch}" for ch in chunks]]
values = [sizes[0]["dense"], sizes[0]["per_host"], *[s["blockwise"] for s in sizes]]
ax.bar(labels, np.array(values) / 1e3, color=["C3", "C1", *["C0"] * len(chunks)])
ax.set_ylabel("largest FFN hidden (kB)")
ax.set_title("Feed-forward hidden activation of the toy block (4 hosts)")
plt.show()

# %% tags=["remove-input"]
per_host_tokens = len(x) // 4
caption(
    "Figure 3.2",
    f"splitting the {len(x)} tokens over 4 hosts already divides the hidden by 4: each host "
    f"holds {per_host_tokens} tokens, so a chunk of {per_host_tokens} is the whole host and "
    "its bar equals the per-host bar. Smaller chunks divide it further, down to the chunk "
    "size, while the block's output stays equal to the dense block to about $10^{-15}$ "
    f"(float64; worst {max(errors):.0e}) at every chunk size.",
)

# %% [markdown]
# ## Takeaways
#
# - Blockwise attention computes every tile but holds one: score memory is $c^2$, not $N^2$.
# - The feed-forward network is position-wise, so a split sequence needs no communication for
#   it, and chunking bounds its hidden activation by the chunk.
# - What still grows with $N$ on one host is K, V and the activations.
#
# Next: [the ring](04_ring_step_by_step.py), which spreads them over hosts.

# %% tags=["remove-input"]
n_ex, c_ex = 128 * 1024, 1024
ffn_70b = ringsim.ffn_peak_bytes(n_ex, 28672, hosts=16, ffn_chunk=2048, itemsize=2)
exercises(
    Exercise(
        "Blockwise attention at $N = 128\\text{K}$ tokens with $c = 1024$: how many score "
        "tiles does one head compute, and how many bytes does a bf16 tile take against the "
        "whole bf16 score matrix?",
        f"$(N/c)^2$ = {(n_ex // c_ex) ** 2:,} tiles of $1024^2 \\cdot 2$ B = "
        f"{c_ex * c_ex * 2 / 2**20:.0f} MiB, against $N^2 \\cdot 2$ B = "
        f"{n_ex * n_ex * 2 / 2**30:.0f} GiB for the whole matrix. (A GPU kernel keeps its "
        "tile in on-chip memory, so it is smaller still: 128 x 128 in FlashAttention-2.)",
    ),
    Exercise(
        "A 70B-sized feed-forward layer ($d_{ff} = 28672$) runs on $2^{17}$ tokens split over "
        "16 hosts, in bf16. How big is its hidden activation dense, per host, and in chunks "
        "of 2,048 tokens?",
        f"Dense {ffn_70b['dense'] / 1e9:.1f} GB, per host {ffn_70b['per_host'] / 1e9:.2f} "
        f"GB, chunked {ffn_70b['blockwise'] / 1e6:.0f} MB "
        "(`ringsim.ffn_peak_bytes(..., itemsize=2)`). No communication is needed for any "
        "of them: the feed-forward network is position-wise.",
    ),
)

# %% tags=["remove-input"]
references(
    "memory_efficient",
    "flash",
    "flash2",
    "bpt",
    notes={"bpt": "The blockwise feed-forward network (its Section 3)."},
)
