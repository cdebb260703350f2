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
# # 7. Memory and the longest context
#
# The ring's promise is that the longest context grows in proportion to the number of hosts.
# This lesson counts the bytes on one host during a training step, component by component,
# finds the longest context that fits, and sets the model's predictions beside the maximum
# contexts the paper measured.
#
# **You will be able to**
#
# - list what a host holds in a training step (model states, checkpoints, logits, the working
#   set of one layer) and which of those shrink when hosts are added;
# - explain why only the ring's (and Ulysses') longest context grows with the host count;
# - judge a model-versus-paper comparison: what agrees, what does not, and why.

# %%
import matplotlib.pyplot as plt
import numpy as np

from ringsim.timer import memory
from ringsim.views.lessons_support import use_lesson_style

use_lesson_style()
GB = 1e9

# %% [markdown]
# ## What one host holds
#
# `ringsim.timer.memory.bytes_per_host` follows the paper's accounting (its Table 1, with the slips
# noted in `ringsim/memory.py`): model states sharded over all hosts (FSDP), one layer's
# weights gathered, a checkpoint per token and layer, the logits of the host's tokens, and the
# largest activation of the layer being recomputed.
#
# **Predict first.** A 7B model trains on 1M tokens with the ring on 8, then 32 A100s. Which
# components of a host's memory shrink by $4\times$, and which do not?
#
# <details><summary>Answer</summary>
#
# Everything that counts the host's tokens shrinks by 4: checkpoints, logits and the layer's
# working set (the host's block is $N/P$). Model states are sharded over all hosts, so they
# shrink by 4 too. Only the FSDP working copy of one layer stays: it is the same layer
# whatever $P$ is.
#
# </details>

# %%
host_counts = [8, 16, 32, 64]
parts = [memory.bytes_per_host("ring", "7b", 2**20, p) for p in host_counts]
fig, ax = plt.subplots(layout="constrained", figsize=(7.5, 3.6))
bottom = np.zeros(len(host_counts))
for component in parts[0]:
    values = np.array([part[component] for part in parts]) / GB
    ax.bar([str(p) for p in host_counts], values, bottom=bottom, label=component)
    bottom += values
ax.axhline(80, color="grey", ls="--", lw=1)
ax.text(3.4, 82, "A100 80 GB", fontsize=8, ha="right", color="dimgrey")
ax.set_xlabel("hosts")
ax.set_ylabel("GB per host")
ax.set_title("7B model, 1M-token sequence, ring attention: bytes on one host")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# *Figure 7.1. What to notice:* at 8 hosts a 1M-token step just fits an 80 GB A100 (72 GB),
# mostly checkpoints and logits, the parts that count the host's own tokens. Every doubling of
# hosts halves the bar; only the thin FSDP layer copy stays the same.

# %% [markdown]
# ## The longest context, by method
#
# `memory.max_context` searches the longest context that fits. The paper's baselines run one
# whole sequence per host (data parallel over sequences), so more hosts only shard their model
# states; the ring splits the sequence itself; Ulysses splits it too, but only up to the number
# of key/value heads.

# %%
host_counts = [2, 4, 8, 16, 32, 64, 128]
curves = {
    method: [memory.max_context(method, "7b", "a100-nvlink", p) for p in host_counts]
    for method in memory.METHODS
}
fig, ax = plt.subplots(layout="constrained", figsize=(7.5, 3.8))
for method, values in curves.items():
    ax.loglog(host_counts, values, "o-", label=method, ms=4)
ax.set_xscale("log", base=2)
ax.set_xticks(host_counts, [str(p) for p in host_counts])
ax.set_xlabel("hosts (A100 80 GB)")
ax.set_ylabel("longest context (tokens)")
ax.set_title("7B model: the longest training context per method")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# *Figure 7.2. What to notice:* (one A100 cannot even hold the 7B model's training states,
# 108 GB, so every curve starts at 2 hosts.) The single-sequence methods flatten once the
# states are sharded: more hosts, no more context. The ring doubles its context with every
# doubling of hosts, from 1.2M tokens on 8 A100s to 23M on 128. Ulysses follows the ring until
# the host count reaches the model's 32 key/value heads, then stops.

# %% [markdown]
# ## Beside the paper
#
# **Predict first.** Our model counts bytes only: no allocator fragmentation, no framework
# buffers, no temporary copies. Should its contexts be above or below what the paper measured?
#
# <details><summary>Answer</summary>
#
# Above: a byte count is a lower bound on real memory use, so the longest context it predicts
# is an upper bound. Expect ratios above 1, and larger ones for the baselines, whose real
# peaks include big temporaries the count leaves out.
#
# </details>

# %%
print(f"{'hardware':>22} {'model':>5} {'method':>17} {'paper':>7} {'model':>8} {'ratio':>6}")
for row in memory.paper_comparison():
    for method, paper_k in row["paper_k"].items():
        ours = row["ours_k"][method]
        print(
            f"{row['hardware']:>22} {row['model']:>5} {method:>17} {paper_k:>6}K"
            f" {ours:>7.0f}K {ours / paper_k:6.1f}"
        )
print()
print(memory.PAPER_TABLE_SOURCE)

# %% [markdown]
# The ring's predictions are 2 to 3 times the paper's on 8 A100s and close to them (0.8 to
# 1.0) on 32; the baselines are over-predicted by 1 to 12 times, most for vanilla attention,
# whose real peak holds large temporaries that a byte count leaves out. What the model gets
# right is the *shape*: baselines flat, the ring proportional to the host count.
#
# ## Takeaways
#
# - Everything per token shrinks as $1/P$ on the ring, so its longest context grows $\propto P$.
# - Baselines that keep a whole sequence per host stop growing after the states are sharded.
# - A byte count is an upper bound on the context: compare shapes first, then ratios.
#
# Next: [the backward pass](08_backward.py).
