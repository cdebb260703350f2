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
# # 9. Ring, Ulysses and all-gather; prefill and decode
#
# The ring is one of three common ways to split a sequence over hosts. DeepSpeed-Ulysses
# re-shards by attention head with two all-to-alls; all-gather context parallelism (used to
# train Llama 3) gives every host all the keys and values. All three compute the same exact
# attention; they differ in what moves, when, and how much memory it takes. And generating
# tokens one at a time (decode) is a different problem again.
#
# **You will be able to**
#
# - predict which strategy is fastest on a fast and on a slow interconnect, and why;
# - state each one's limit: Ulysses' head cap, all-gather's memory, the ring's threshold;
# - explain why decoding needs no ring at all: the cache stays put and only partials move.

# %%
import matplotlib.pyplot as plt
import numpy as np

import ringsim
from ringsim.numerics.decode import ring_decode
from ringsim.numerics.rounding import relative_error
from ringsim.timer import RingConfig, simulate, strategies
from ringsim.timer.hardware import get_hardware
from ringsim.views.lessons_support import use_lesson_style

use_lesson_style()
a100 = get_hardware("a100-nvlink")

# %% [markdown]
# ## Side by side
#
# **Predict first.** 8 hosts, 32 heads (no GQA), 4K tokens per host. On NVLink (300 GB/s) and
# on a slow 10 GB/s link, which of ring, Ulysses and all-gather is fastest?
#
# <details><summary>Answer</summary>
#
# On NVLink the ring hides all its transfers (4K is above the 1K threshold) and runs at
# compute speed; Ulysses and all-gather pay collectives that nothing (or little) overlaps, so
# the ring is fastest. On the slow link the ring pushes $P-1$ whole blocks through one link
# while Ulysses' all-to-all moves each token about once: Ulysses wins (see the crossover
# bandwidth in `ringsim.timer.strategies`).
#
# </details>

# %%
config = RingConfig(hosts=8, seq_len=8 * 4096, hardware=a100)
bandwidths = np.geomspace(2e9, 600e9, 12)
times = {name: [] for name in strategies.STRATEGIES}
for bw in bandwidths:
    for name, summary in strategies.compare_strategies(
        strategies.with_bandwidth(config, bw)
    ).items():
        times[name].append(summary["total_time_s"] * 1e3)
crossover = strategies.crossover_bandwidth(config)

fig, ax = plt.subplots(layout="constrained", figsize=(7.5, 3.8))
for name, values in times.items():
    ax.loglog(bandwidths / 1e9, values, "o-", label=name, ms=4)
ax.axvline(crossover / 1e9, color="grey", ls="--", lw=1)
ax.text(crossover / 1e9 * 1.1, max(times["allgather"]) * 0.8, "crossover", fontsize=8)
ax.axvline(300, color="C2", ls=":", lw=1)
ax.text(300 * 0.95, min(times["ring"]) * 1.05, "NVLink", fontsize=8, ha="right")
ax.set_xlabel("link bandwidth (GB/s per direction)")
ax.set_ylabel("forward time (ms)")
ax.set_title("8 hosts, 32K tokens, 32 heads: the same attention, three ways")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# *Figure 9.1. What to notice:* on fast links the ring flattens at pure compute time, the
# lowest of the three; Ulysses and all-gather keep paying for their collectives. Below the
# dashed crossover bandwidth the ring becomes link-bound and Ulysses overtakes it.

# %%
summaries = strategies.compare_strategies(config)
for name, s in summaries.items():
    print(
        f"{name:>10}: {s['total_time_s'] * 1e3:6.2f} ms, "
        f"{s['memory_per_host_bytes'] / 1e6:6.0f} MB attention working set per host"
    )
try:
    strategies.simulate_strategy(RingConfig(hosts=64, seq_len=64 * 1024, hardware=a100), "ulysses")
except ValueError as err:
    print(f"Ulysses on 64 hosts: {err}")

# %% [markdown]
# All-gather holds the keys and values of the *whole* sequence on every host, so its memory
# grows with $N$ rather than $N/P$; Ulysses cannot split a key/value head, so it stops at the
# number of key/value heads.

# %% [markdown]
# ## Decode: the cache stays put
#
# Generating one token means one query row against a cache of $L$ keys. Moving the cache
# around a ring would cost far more than the tiny compute. Instead each host attends the new
# token to its own cache shard and returns a partial $(o, \mathrm{lse})$; the partials merge as
# in lesson 2 (in a tree of $\log_2 P$ rounds).
#
# **Predict first.** How many bytes travel per host and head for one decoded token?
#
# <details><summary>Answer</summary>
#
# One output row of $d$ numbers and one log-sum-exp per head and host, a few hundred bytes,
# whatever the cache length. The cache itself never moves.
#
# </details>

# %%
rng = np.random.default_rng(9)
q_token = rng.standard_normal((8, 1, 64))
k_cache, v_cache = rng.standard_normal((2, 2, 4096, 64))  # 8 query heads share 2 kv heads
out = ring_decode(q_token, k_cache, v_cache, hosts=8)
exact = ringsim.reference_attention(q_token, k_cache, v_cache)
print(f"ring decode vs exact: {relative_error(out, exact).max():.1e}")

host_counts = [1, 2, 4, 8, 16, 32, 64]
speedup = []
for p in host_counts:
    cfg = RingConfig(hosts=p, seq_len=2**20, hardware=a100, pass_="decode", kv_heads=8)
    speedup.append(simulate(cfg).summary()["speedup_vs_single_device"])
fig, ax = plt.subplots(layout="constrained", figsize=(6.5, 3.4))
ax.loglog(host_counts, speedup, "o-", label="simulated")
ax.loglog(host_counts, host_counts, "--", color="grey", label="ideal")
ax.set_xscale("log", base=2)
ax.set_xticks(host_counts, [str(p) for p in host_counts])
ax.set_xlabel("hosts sharing the cache")
ax.set_ylabel("speed-up per token")
ax.set_title("Decoding one token against a 1M-token cache")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# *Figure 9.2. What to notice:* splitting the cache speeds a decoded token up almost in
# proportion to the hosts at first (each host reads $1/P$ of the cache), then the fixed cost
# of combining partials across hosts starts to dominate, and the curve bends away from ideal.
#
# ## Takeaways
#
# - Fast links: the ring (its transfers hide). Slow links: Ulysses (each token moves once).
# - Ulysses stops at the number of key/value heads; all-gather's memory grows with $N$.
# - Decode never moves the cache: only $(o, \mathrm{lse})$ partials travel.
#
# Next: [simulated vs measured](10_simulated_vs_measured.py).
