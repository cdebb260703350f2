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
# Now the sequence is split over $P$ hosts. Host $h$ keeps its query block for the whole run;
# the key/value blocks travel. At step $s$ host $h$ holds the block that host $(h - s) \bmod P$
# owns, folds it into its running partial (lesson 2), and passes it on to host $h + 1$ while
# receiving the next one from host $h - 1$. After $P$ steps every query block has met every
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
from ringsim.numerics.rounding import relative_error
from ringsim.views.lessons_support import (
    animation_html,
    draw_ring_step,
    ring_animation,
    ring_story,
    static_book,
    use_lesson_style,
)

use_lesson_style()
rng = np.random.default_rng(4)

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
# `ringsim.views.lessons_support.ring_story` runs `ringsim.ring_attention` with a `RingRecord`,
# which logs what every host held at every step and its running output after the step. The
# drawing shows, per step: the ring (each host outlined in its colour, holding a block in the
# colour of that block's owner; hatched = partly masked, faded = skipped; arrows = the block
# being passed on), the grid of (query block, key/value block) pairs done so far, and each
# host's error against the exact float64 answer.
#
# **Predict first.** In the causal ring below, in what order do the hosts' errors fall to
# rounding level?
#
# <details><summary>Answer</summary>
#
# Host 0 after step 0, host 1 after step 1, host 2 after step 2, host 3 after the last step:
# host $h$ needs the blocks $0 \ldots h$, and the last of them (block 0) reaches it at step
# $h$. Blocks that arrive later are masked out and change nothing.
#
# </details>

# %%
hosts, c, d = 4, 8, 16
q, k, v = (rng.standard_normal((hosts * c, d)) for _ in range(3))
story = ring_story(q, k, v, hosts=hosts, causal=True)
anim = ring_animation(story)
HTML(animation_html(anim))

# %% [markdown]
# *Animation 4.1. What to notice:* use the buttons under the frame to step. The red cells of
# the middle grid always form one diagonal: at every step each host works on a different
# pair, and after $P$ steps the lower triangle (what a causal mask keeps) is complete. In the
# right panel each host's error falls to about $10^{-16}$ exactly when its last needed block
# arrives.

# %% [markdown]
# With a live kernel (JupyterLab), the slider below redraws any step. In the static book the
# animation above plays the same frames.

# %%
import ipywidgets as widgets


def show_step(step: int) -> None:
    fig = draw_ring_step(story, step)
    plt.show()
    plt.close(fig)


slider = widgets.IntSlider(value=0, min=0, max=story.steps - 1, description="step")
if not static_book():  # a static page has no kernel to answer the slider
    display(widgets.interactive(show_step, step=slider))

# %% [markdown]
# And the last step as a still picture, to look at closely:

# %%
fig = draw_ring_step(story, story.steps - 1)
plt.show()

# %% [markdown]
# *Figure 4.2. What to notice:* the last step sends nothing (every host has now seen every
# block), the finished grid is exactly the causal lower triangle, and every host's error is at
# rounding level.

# %% [markdown]
# ## Exact, in every layout
#
# The ring does not change *what* is computed, only where. Whatever the layout (how tokens
# are dealt to hosts, lesson 6), the output equals dense attention to rounding.

# %%
for layout in ringsim.LAYOUTS:
    for causal in (False, True):
        out = ringsim.ring_attention(q, k, v, hosts=hosts, layout=layout, causal=causal)
        exact = ringsim.reference_attention(q, k, v, causal=causal)
        err = relative_error(out, exact).max()
        print(f"{layout:>10}, {'causal' if causal else 'full  '}: error {err:.1e}")

# %% [markdown]
# ## What a host holds
#
# The record also counts the bytes each host holds at each step: its query block and state,
# the block in use, and the block arriving. It never depends on how many hosts there are, only
# on the block size.

# %%
for p in (2, 4, 8):
    record = ringsim.RingRecord()
    qq, kk, vv = (rng.standard_normal((p * c, d)) for _ in range(3))
    ringsim.ring_attention(qq, kk, vv, hosts=p, record=record)
    most = max(cell["nbytes"] for step in record.steps for cell in step)
    print(f"P = {p}: sequence {p * c} tokens, most bytes on any host = {most}")

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
