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
# # 4. The ring, step by step
#
# Now the sequence is split over $P$ hosts. Host $r$ keeps its query block for the whole run;
# the key/value blocks travel. At step $s$ host $r$ holds the block that host $(r - s) \bmod P$
# owns, folds it into its running partial (lesson 2), and passes it on to host $r + 1$ while
# receiving the next one from host $r - 1$. After $P$ steps every query block has met every
# key/value block, and every host's output is exact.
#
# **You will be able to**
#
# - read a ring schedule: which block each host holds, what it computes with it (all of it,
#   part of it under a causal mask, or nothing) and what it sends;
# - follow one host's running output from wrong to exact;
# - say why each host only ever holds its own block plus one or two travelling ones.

# %%
import matplotlib.pyplot as plt
import numpy as np
from IPython.display import HTML, display

import ringsim
from ringsim.teach import (
    Exercise,
    animation_html,
    caption,
    draw_ring_step,
    exercises,
    notation,
    references,
    relative_error,
    ring_animation,
    ring_story,
    static_book,
    use_lesson_style,
)

use_lesson_style()
rng = np.random.default_rng(4)
TERMS = ("causal mask", "bf16", "1M, 1K (tokens)", "striped, zigzag, contiguous")
notation(
    *("P", "c", "r", "s", "b", "d", "d_{model}", "H_{kv}", "m, \\ell, a"),
    terms=TERMS,
)

# %% [markdown]
# ## The schedule as a table
#
# `ringsim.build_schedule` returns the whole plan as data; every executor in ringsim (the
# NumPy numerics, the event timer, the real torch ring) reads this same object.
# `describe()` prints it: `kv3 full ->1` means "holds host 3's block, computes all of it,
# then sends it to host 1".
#
# **Predict first.** With 4 hosts and a causal mask (a query sees only keys at or before it),
# contiguous blocks: which host has *nothing* to do at step 1? Which host finishes its useful
# work first?
#
# <details><summary>Answer</summary>
#
# At step 1 host 0 holds block 3, whose keys all come after its queries: `skip` (and host 1
# holds nothing useful from step 2 on, and so on). Host 0 is done after step 0: its queries
# only see its own block. It still forwards the blocks that pass through it. Host 3 computes
# at every step. That imbalance is lesson 6.
#
# </details>

# %%
print(ringsim.build_schedule(4, "contiguous", causal=False).describe())
print()
print(ringsim.build_schedule(4, "contiguous", causal=True).describe())

# %% [markdown]
# ## Watching it run
#
# `ringsim.teach.ring_story` runs `ringsim.ring_attention` with a `RingRecord`,
# which logs what every host held at every step and its running output after the step. Each
# frame below shows one step:
#
# - **the ring** (top left): every host outlined in its own colour, holding a kv block drawn
#   in the colour of that block's owner, solid if the host computes all of it, hatched if
#   the mask cuts through it, faded if it skips it; the arrows are the blocks being passed on
#   after the step;
# - **the pairs grid** (top right): one cell per (query block, kv block) pair, filled in as
#   the ring reaches it, coloured by what the host did with it (key under the figure); the
#   red outlines are the pairs of the step on show;
# - **the errors** (bottom): each host's running output against the exact float64 answer.
#
# Here: 6 hosts, contiguous blocks, a causal mask. [The ring explorer](explorer.md) in the
# book draws the same pictures for 2 to 16 hosts, every layout, causal or not, forward or
# backward.
#
# **Predict first.** In what order do the hosts' errors fall to rounding level?
#
# <details><summary>Answer</summary>
#
# Host 0 after step 0, host 1 after step 1, and so on, host 5 after the last step: host $r$
# needs the blocks $0 \ldots r$, and the last of them (block 0) reaches it at step $r$.
# Blocks that arrive later are masked out (grey cells) and change nothing.
#
# </details>

# %%
hosts, c, d = 6, 8, 16
q, k, v = (rng.standard_normal((hosts * c, d)) for _ in range(3))
story = ring_story(q, k, v, hosts=hosts, causal=True)
anim = ring_animation(story)
HTML(animation_html(anim))

# %% tags=["remove-input"]
caption(
    "Animation 4.1",
    "use the buttons under the frame to step. The red outlines always form one wrapped "
    "diagonal: each host works on a different pair at every step. Grey cells are pairs the "
    "causal mask removes (skipped, but the block is still forwarded); after $P$ steps the "
    "blue and teal cells are the causal lower triangle. Each host's error falls to "
    f"{story.errors[-1].max():.0e} or less exactly when its last needed block arrives.",
)

# %% [markdown]
# With a live kernel (JupyterLab), the slider below redraws any step. In the static book the
# animation above plays the same frames.


# %%
def show_step(step: int) -> None:
    fig = draw_ring_step(story, step)
    plt.show()
    plt.close(fig)


if not static_book():  # a static page has no kernel to answer the slider
    import ipywidgets as widgets

    slider = widgets.IntSlider(value=0, min=0, max=story.steps - 1, description="step")
    display(widgets.interactive(show_step, step=slider))

# %% [markdown]
# And the last step as a still picture, to look at closely:

# %%
fig = draw_ring_step(story, story.steps - 1)
plt.show()

# %% [markdown]
# *Figure 4.2. What to notice:* the last step sends nothing (every host has now seen every
# block). The coloured cells of the finished grid are the causal lower triangle: blue blocks
# wholly visible, teal diagonal blocks cut by the mask; grey cells were skipped. Every host's
# error is at rounding level.

# %% [markdown]
# ## Exact, in every layout
#
# The ring does not change *what* is computed, only where. Whatever the layout (how tokens
# are dealt to hosts, lesson 6), the output equals dense attention to rounding.

# %%
for layout in ringsim.layout_names():
    for causal in (False, True):
        out = ringsim.ring_attention(q, k, v, hosts=hosts, layout=layout, causal=causal)
        exact = ringsim.reference_attention(q, k, v, causal=causal)
        err = relative_error(out, exact).max()
        print(f"{layout:>10}, {'causal' if causal else 'full  '}: error {err:.1e}")

# %% [markdown]
# ## What a host holds: six blocks
#
# The paper counts the memory of a host as $6 b c \, d_{model}$ values (it writes the hidden
# size as h): six blocks of $c$ tokens by $d_{model}$ hidden values, for a batch of $b$. One by
# one, for host 2
# at step 1 of the ring above:
#
# 1. its **query block** $Q_2$, which never moves;
# 2. its **output block**, the running accumulator $a$ (plus two numbers per row, $m$ and
#    $\ell$), which never moves either;
# 3. and 4. the **key and value blocks** it computes with at this step, $K_1, V_1$;
# 5. and 6. the **key and value blocks arriving** from host 1 during the step, $K_0, V_0$,
#    which it will use at the next step (double buffering: receiving while computing).
#
# The record lists these holdings per host and step:

# %%
held = story.record.steps[1][2]
print(
    f"host 2, step 1: query block of host {held['q']}, "
    f"output block of host {held['q']},"
)
print(
    f"  K and V of host {held['kv']} (computing), "
    f"K and V of host {held['incoming']} (arriving)"
)
for p in (2, 4, 8):
    record = ringsim.RingRecord()
    qq, kk, vv = (rng.standard_normal((p * c, d)) for _ in range(3))
    ringsim.ring_attention(qq, kk, vv, hosts=p, record=record)
    most = max(cell["nbytes"] for step in record.steps for cell in step)
    six = 6 * c * d * 8  # six float64 blocks of c x d
    print(f"P = {p}: {p * c} tokens, most bytes on any host = {most} (6 blocks: {six})")

# %% [markdown]
# The count never depends on how many hosts there are, only on the block size; the few bytes
# above six blocks are the two numbers per row, $m$ and $\ell$.

# %% [markdown]
# ## Takeaways
#
# - The ring schedule is data: `kv_owner(step)`, `kind_at(step)`, `payload(step)`; the
#   executors only follow it.
# - A host's output is wrong until its last needed block arrives, then exact.
# - Memory per host is set by the block, not the sequence: double the hosts, double the
#   context.
#
# Next: [overlap](05_overlap.py), when passing blocks costs no time at all.

# %% tags=["remove-input"]
sched_8 = ringsim.build_schedule(8, "contiguous", causal=True)
kinds_8 = sched_8.kind
exact_at = [max(s for s in range(8) if kinds_8[s, h] != 0) for h in range(8)]
block_bytes = ringsim.kv_block_bytes(4096, 32, 128, "bf16")
six_bytes = 6 * 32 * 1024 * 32 * 128 * 2
exercises(
    Exercise(
        "A causal ring of 8 hosts with contiguous blocks. After which step is host 5's output "
        "exact? How many of its 8 steps does it spend computing?",
        f"After step {exact_at[5]}: it needs blocks 0 to 5, and block 0 arrives at step 5. "
        f"It computes at {int((kinds_8[:, 5] != 0).sum())} steps (steps 0 to 5) and skips "
        "the last 2, whose blocks (6 and 7) lie entirely in its future. Read off "
        "`build_schedule(8, 'contiguous', causal=True).kind`.",
    ),
    Exercise(
        "In the forward pass of a ring of 8 hosts, how many blocks does each host send, and "
        "how many bytes is that for $c = 4096$ tokens, 32 heads of 128, bf16?",
        f"$P - 1 = 7$ blocks of K and V, each $2 c H_{{kv}} d \\cdot 2$ B = "
        f"{block_bytes / 1e6:.1f} MB (`ringsim.kv_block_bytes`): {7 * block_bytes / 1e6:.0f} MB "
        "per host per layer. The last step sends nothing.",
    ),
    Exercise(
        "Size the six blocks of one host for $c = 32\\text{K}$ tokens and a hidden size of "
        "$d_{model} = 4096$ (32 heads of 128) in bf16, batch 1. What happens to it when you "
        "double the number of hosts at a fixed context?",
        f"$6 \\cdot c \\cdot d_{{model}} \\cdot 2$ B = {six_bytes / 1e9:.2f} GB per layer being "
        "computed. Doubling the hosts at a fixed context halves $c$, so it halves; doubling "
        "both the hosts and the context leaves it unchanged.",
    ),
)

# %% tags=["remove-input"]
references(
    "ring",
    "bpt",
    "playbook",
    notes={
        "ring": "Algorithm 1 and Section 3: the ring and the six blocks a host holds.",
        "playbook": "The context-parallelism section draws the same ring.",
    },
)
