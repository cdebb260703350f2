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
import numpy as np

import ringsim
from ringsim.timer import RingConfig, simulate
from ringsim.timer.machine.hardware import get_hardware
from ringsim.views import plots
from ringsim.views.lessons_support import (
    Exercise,
    exercises,
    references,
    table,
    use_lesson_style,
)

use_lesson_style()
a100 = get_hardware("a100-nvlink")

# %% [markdown]
# ## Who holds which tokens
#
# `ringsim.host_positions` deals the tokens; the mask rule then decides the work of every
# (query block, key/value block) pair. Sixteen tokens on 4 hosts, four tokens per host:

# %%
for layout in ringsim.layout_names():
    print(f"{layout:>10}: {ringsim.host_positions(layout, 4, 16).tolist()}")

# %% [markdown]
# The picture that explains the rest of the lesson: the whole tokens × tokens causal mask,
# every visible (query, key) pair coloured by the host that computes it (the host holding
# the query). The top row keeps the tokens in order; the bottom row sorts queries and keys
# by host, so each square of the $P \times P$ grid is one (query block, kv block) pair of
# the ring, and the label counts each host's visible pairs.

# %%
fig = plots.plot_layout_masks(4, 32, causal=True)
plt.show()

# %% [markdown]
# *Figure 6.0. What to notice:* contiguous gives host 0 a small triangle and host 3 a
# whole trapezoid (36 against 228 pairs); striped interleaves the rows so every host gets a
# thin slice of every part of the triangle (120 to 144 pairs); zigzag pairs each early chunk
# with its mirror late chunk, so every host gets exactly the same count (132). In the
# sorted view, contiguous has whole empty squares (skipped blocks), striped and zigzag have
# none: every host works at every step.

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
for layout in ringsim.layout_names():
    config = RingConfig(
        hosts=8, seq_len=8 * 16384, hardware=a100, layout=layout, causal=True
    )
    runs[f"{layout}, causal"] = simulate(config).timeline
fig = plots.plot_timelines(list(runs.items()), max_hosts=8)
plt.show()

# %% [markdown]
# *Figure 6.1. What to notice:* in the contiguous ring, host 0 computes one short bar and then
# waits, while host 7 computes all the way; striped and zigzag give every host a bar of the
# same length at every step, and finish in about half the time.

# %%
host_counts = [2, 4, 8, 16, 32, 64]
idle = {layout: [] for layout in ringsim.layout_names()}
for p in host_counts:
    for layout in ringsim.layout_names():
        config = RingConfig(
            hosts=p, seq_len=p * 8192, hardware=a100, layout=layout, causal=True
        )
        idle[layout].append(simulate(config).summary()["idle_fraction"])
closed_form = [(p - 1) / (2 * p - 1) for p in host_counts]
fig = plots.plot_sweep(
    host_counts,
    idle,
    xlabel="hosts",
    ylabel="idle fraction",
    title="Causal ring, 8K tokens per host, exact (untiled) work",
    plain_x=True,
    references={"(P-1)/(2P-1)": closed_form},
    ylim=(-0.05, 0.6),
    legend_loc="center right",
)
plt.show()
rows = [
    {"P": p, **{lay: idle[lay][i] for lay in idle}, "(P-1)/(2P-1)": closed_form[i]}
    for i, p in enumerate(host_counts)
]
print(
    table(
        rows, {"P": "{:d}", **{lay: "{:.3f}" for lay in idle}, "(P-1)/(2P-1)": "{:.3f}"}
    )
)

# %% [markdown]
# *Figure 6.2. What to notice:* the contiguous ring's idle share follows the closed form
# $(P-1)/(2P-1)$ (dashed) towards one half as hosts are added; the striped and zigzag lines
# lie on top of each other just above zero at every size (the table has the numbers).

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
# ## Balancing beyond zigzag: packed documents
#
# Training batches are often *packed*: several documents share one sequence, and a token
# attends only to earlier tokens of its own document (`segment_ids` in ringsim, the
# document-causal mask used to train Llama 3). The work of a block then depends on where the
# documents fall, and no fixed layout is balanced for every packing: zigzag assumes one
# long causal document.
#
# **Predict first.** One long document of 3/4 of the sequence followed by short ones: which
# host of a zigzag ring does most work now?

# %%
P_doc, n_doc = 4, 64
segment_ids = np.repeat(
    [0, 1, 2, 3, 4], [48, 4, 4, 4, 4]
)  # one long document, four short
fig = plots.plot_layout_masks(P_doc, n_doc, causal=True, segment_ids=segment_ids)
plt.show()
for layout in ringsim.layout_names():
    sched = ringsim.build_schedule(
        P_doc, layout, causal=True, seq_len=n_doc, segment_ids=segment_ids
    )
    per_host = sum(sched.exact_work_at(s) for s in range(sched.steps))
    busiest = per_host.max() * sched.steps / per_host.sum()
    work = ", ".join(f"{w:.2f}" for w in per_host)
    print(f"{layout:>10}: blocks of work per host [{work}]; busiest/mean {busiest:.2f}")

# %% [markdown]
# *Figure 6.4. What to notice:* with documents, the mask is a staircase of triangles along
# the diagonal and most of the square is empty. Zigzag's mirror trick assumed one long
# document; here it pairs the long document's heavy rows with the short documents' nearly
# empty ones, and its busiest host does 1.7 times the mean work. Striped stays nearly
# balanced (1.08) because it deals *every* document round robin. Systems balance packed
# batches the same way: deal each document across the hosts (striped or zigzag within the
# document), or assign documents by their cost, which grows with the square of their
# length, rather than by token count. Llama 3 splits each sequence into $2P$ zigzag chunks
# and all-gathers keys and values, which handles document masks without a ring.
#
# ## Takeaways
#
# - Contiguous + causal idles about half the ring: $(P-1)/(2P-1)$.
# - Striped and zigzag give every host equal work at every step.
# - With tiled kernels, striped pays on every block; zigzag only on the diagonal.
# - Packed documents change the mask; balance by the cost of each document, not its tokens.
#
# Next: [memory and the longest context](07_memory_context.py).

# %% tags=["remove-input"]
idle_16 = simulate(
    RingConfig(
        hosts=16, seq_len=16 * 8192, hardware=a100, layout="contiguous", causal=True
    )
).summary()["idle_fraction"]


def tile_waste(c: int) -> float:
    base = dict(hosts=8, seq_len=8 * c, hardware=a100, layout="striped", causal=True)
    tiled = simulate(RingConfig(tile=128, **base)).summary()["compute_time_s"]
    return tiled / simulate(RingConfig(**base)).summary()["compute_time_s"] - 1


waste_512 = tile_waste(512)
exercises(
    Exercise(
        "Predict the idle fraction of a causal contiguous ring of 16 hosts, then check it "
        "with the timer.",
        f"$(P-1)/(2P-1) = 15/31 = {15 / 31:.3f}$; the timer gives {idle_16:.3f} "
        "(`simulate(RingConfig(hosts=16, ..., causal=True)).summary()['idle_fraction']`).",
    ),
    Exercise(
        "A striped ring with 128-token kernel tiles and $c = 512$ tokens per host: how much "
        "more compute than the exact mask does it pay, roughly, and why?",
        "Each of the host's blocks has the causal boundary running along its diagonal, so "
        "in each of its $c/T = 4$ rows of tiles the diagonal tile is computed whole though "
        "only about half of it is visible: half a tile of waste per row of $c/T$ tiles "
        "against about $c/(2T)$ useful tiles, roughly $T/c$ = 25% extra. The timer says "
        f"{waste_512:.0%}.",
    ),
    Exercise(
        "Why is zigzag perfectly balanced for one causal document? Count the pairs of host "
        "$h$ with $2P$ chunks of $c/2$ tokens.",
        "Chunk $i$ (of $2P$) sees $i$ full earlier chunks and half of itself: "
        "$(i + 1/2)(c/2)^2$ pairs. Host $h$ holds chunks $h$ and $2P - 1 - h$: "
        "$(h + 1/2 + 2P - 1 - h + 1/2)(c/2)^2 = 2P (c/2)^2$, the same for every $h$. "
        "Figure 6.0 counts 132 pairs on every host.",
    ),
)

# %% tags=["remove-input"]
references(
    "striped",
    "llama3",
    "ring",
    "playbook",
    notes={
        "striped": "The striped layout and the token-level mask picture (its Figure 2).",
        "llama3": "Context parallelism with zigzag chunks and document masks (Section 3.3.2).",
        "playbook": "Zigzag load balancing, drawn on the same mask.",
    },
)
