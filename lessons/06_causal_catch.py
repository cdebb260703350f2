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
# # 6. The causal catch
#
# A decoder's causal mask lets a query see only the keys at or before it. With the paper's
# contiguous split, host 0 holds the first tokens and has almost nothing to compute, while the
# last host attends to everything. The ring advances in lockstep, so every step waits for the
# busiest host.
#
# **You will be able to**
#
# - predict the idle fraction of a contiguous causal ring from the host count;
# - explain how the striped (round-robin) and zigzag layouts balance the work;
# - explain why a kernel that computes in tiles makes the striped layout *worse* at small
#   blocks, and zigzag not.

# %%
import matplotlib.pyplot as plt

import ringsim
from ringsim.timer import RingConfig, simulate
from ringsim.timer.hardware import get_hardware
from ringsim.views import plots
from ringsim.views.lessons_support import use_lesson_style

use_lesson_style()
a100 = get_hardware("a100-nvlink")

# %% [markdown]
# ## Who holds which tokens
#
# `ringsim.host_positions` deals the tokens; the mask rule then decides the work of every
# (query block, key/value block) pair. Eight tokens per host on 4 hosts:

# %%
for layout in ringsim.LAYOUTS:
    print(f"{layout:>10}: {ringsim.host_positions(layout, 4, 16).tolist()}")

# %% [markdown]
# **Predict first.** With $P$ hosts, contiguous blocks and a causal mask, the ring takes $P$
# steps and the last host computes at every step. What fraction of all compute slots is idle
# (for large $P$)?
#
# <details><summary>Answer</summary>
#
# The useful work is the lower triangle, about $P^2/2$ of the $P^2$ block pairs (the diagonal
# blocks count half). The run lasts as long as the last host needs, $P$ steps (its diagonal
# block is only half work, a little less). So about half the slots are idle:
# $1 - \tfrac{P^2/2}{P (P - 1/2)} = 1 - \tfrac{P}{2P - 1} \to \tfrac12$; at $P = 8$, 47%.
#
# </details>

# %%
runs = {}
for layout in ringsim.LAYOUTS:
    config = RingConfig(hosts=8, seq_len=8 * 16384, hardware=a100, layout=layout, causal=True)
    runs[f"{layout}, causal"] = simulate(config).timeline
fig = plots.plot_timelines(list(runs.items()), max_hosts=8)
plt.show()

# %% [markdown]
# *Figure 6.1. What to notice:* in the contiguous ring, host 0 computes one short bar and then
# waits, while host 7 computes all the way; striped and zigzag give every host a bar of the
# same length at every step, and finish in about half the time.

# %%
host_counts = [2, 4, 8, 16, 32, 64]
idle = {layout: [] for layout in ringsim.LAYOUTS}
for p in host_counts:
    for layout in ringsim.LAYOUTS:
        config = RingConfig(hosts=p, seq_len=p * 8192, hardware=a100, layout=layout, causal=True)
        idle[layout].append(simulate(config).summary()["idle_fraction"])
fig = plots.plot_sweep(
    host_counts,
    idle,
    xlabel="hosts",
    ylabel="idle fraction",
    title="Causal ring, 8K tokens per host, exact (untiled) work",
    plain_x=True,
    references={"1/2": [0.5] * len(host_counts)},
    ylim=(0, 0.6),
)
plt.show()

# %% [markdown]
# *Figure 6.2. What to notice:* the contiguous ring's idle share climbs towards one half as
# hosts are added; the balanced layouts stay near zero at every size.

# %% [markdown]
# ## Tiles spoil the stripes
#
# Real kernels compute in tiles (say $128 \times 128$) and skip a tile only if it is *entirely*
# masked. With striped tokens, host $h$'s query $i$ and key $j$ sit at positions $iP + h$ and
# $jP + h'$: the causal boundary runs along the diagonal of *every* block, so each block's
# diagonal tiles are half wasted. Zigzag keeps contiguous chunks, so most of its tiles are
# fully visible or fully masked.
#
# **Predict first.** With 128-token tiles, which layout suffers more as the block shrinks
# towards 128 tokens, striped or zigzag?
#
# <details><summary>Answer</summary>
#
# Striped. At $c = 128$ a block is one tile, the striped diagonal block is a whole tile of
# which only about half is visible, and *every* block on a host is like that, so the host
# computes nearly the whole square instead of half: almost twice the useful work. Zigzag pays
# the same only on its few diagonal tiles (except at a single-tile block, where its one tile
# straddles both of its chunks).
#
# </details>

# %%
blocks = [128, 256, 512, 1024, 2048, 4096, 8192]
wasted = {}
for layout in ("striped", "zigzag"):
    extra = []
    for c in blocks:
        base = dict(hosts=8, seq_len=8 * c, hardware=a100, layout=layout, causal=True)
        tiled = simulate(RingConfig(tile=128, **base)).summary()["compute_time_s"]
        exact = simulate(RingConfig(**base)).summary()["compute_time_s"]
        extra.append(tiled / exact)
    wasted[f"{layout}, 128-token tiles"] = extra
fig = plots.plot_sweep(
    blocks,
    wasted,
    xlabel="block size c (tokens per host)",
    ylabel="compute with tiles / exact-mask compute",
    title="What tile granularity costs each balanced layout (8 hosts, causal)",
)
plt.show()

# %% [markdown]
# *Figure 6.3. What to notice:* at 128-token blocks a block is a single tile and both layouts
# compute almost twice the useful work. From 256 tokens on they part: the striped ring still
# wastes about $T/c$ (50% at 256, 12% at 1K), because every one of its blocks has the causal
# boundary running through it, while zigzag drops to a few percent at once. That is one reason
# context-parallel training (e.g. for Llama 3) deals tokens in zigzag chunks rather than
# stripes.
#
# ## Takeaways
#
# - Contiguous + causal idles about half the ring: $1 - P/(2P-1)$.
# - Striped and zigzag give every host equal work at every step.
# - With tiled kernels, striped pays on every block; zigzag only on the diagonal.
#
# Next: [memory and the longest context](07_memory_context.py).
