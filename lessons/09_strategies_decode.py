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
import textwrap

import matplotlib.pyplot as plt
import numpy as np

import ringsim
from ringsim.numerics.decode import ring_decode
from ringsim.numerics.rounding import relative_error
from ringsim.timer import RingConfig, simulate, strategies
from ringsim.timer.machine.hardware import get_hardware
from ringsim.timer.step.models import ModelSpec
from ringsim.timer.strategies.ulysses import crossover_bandwidth
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
# bandwidth in `ringsim.timer.strategies.ulysses`).
#
# </details>

# %%
config = RingConfig(hosts=8, seq_len=8 * 4096, hardware=a100)
bandwidths = np.geomspace(2e9, 600e9, 12)
times = {name: [] for name in strategies.FLAT_STRATEGIES}
for bw in bandwidths:
    for name, summary in strategies.compare_strategies(
        strategies.with_bandwidth(config, bw)
    ).items():
        times[name].append(summary["total_time_s"] * 1e3)
crossover = crossover_bandwidth(config)

fig, ax = plt.subplots(layout="constrained", figsize=(7.5, 3.8))
for name, values in times.items():
    ax.loglog(bandwidths / 1e9, values, "o-", label=name, ms=4)
ax.axvline(crossover / 1e9, color="grey", ls="--", lw=1)
ax.annotate("crossover", (crossover / 1e9, 1.0), xycoords=("data", "axes fraction"),
            xytext=(4, -12), textcoords="offset points", fontsize=8)  # fmt: skip
ax.axvline(300, color="grey", ls=":", lw=1)
ax.annotate("NVLink", (300, 1.0), xycoords=("data", "axes fraction"),
            xytext=(-4, -12), textcoords="offset points", fontsize=8,
            ha="right")  # fmt: skip
ax.set_xlabel("link bandwidth (GB/s per direction)")
ax.set_ylabel("forward time (ms)")
ax.set_title("8 hosts, 32K tokens, 32 heads: the same attention, three ways")
ax.legend(fontsize=8, loc="lower left")
plt.show()

# %% [markdown]
# *Figure 9.1. What to notice:* on fast links the ring flattens at pure compute time, the
# lowest of the three; Ulysses and all-gather keep paying for their collectives. Below the
# dashed crossover bandwidth the ring becomes link-bound and Ulysses overtakes it.

# %%
summaries = strategies.compare_strategies(config)
rows = [
    {
        "strategy": name,
        "forward (ms)": s["total_time_s"] * 1e3,
        "working set per host (MB)": s["memory_per_host_bytes"] / 1e6,
    }
    for name, s in summaries.items()
]
print(
    table(
        rows,
        {
            "strategy": "{}",
            "forward (ms)": "{:.2f}",
            "working set per host (MB)": "{:.0f}",
        },
    )
)
try:
    big = RingConfig(hosts=64, seq_len=64 * 1024, hardware=a100)
    strategies.simulate_strategy(big, "ulysses")
except ValueError as err:
    print(textwrap.fill(f"Ulysses on 64 hosts: {err}", width=88))

# %% [markdown]
# All-gather holds the keys and values of the *whole* sequence on every host, so its memory
# grows with $N$ rather than $N/P$; Ulysses cannot split a key/value head, so it stops at the
# number of key/value heads.

# %% [markdown]
# ## What Ulysses' all-to-all does
#
# Before attention every host holds its $N/P$ tokens for *all* heads (the layout the rest of
# the layer wants). Attention itself needs *all* tokens of a head, so Ulysses transposes the
# split: one all-to-all in which host $h$ sends, to every other host $g$, its tokens' slice
# of head group $g$. Afterwards host $g$ holds every token of its $H/P$ heads, computes
# ordinary (FlashAttention) attention on them with no further communication, and a second
# all-to-all puts the outputs back. Each host sends $(P-1)/P$ of its block per all-to-all,
# spread over all its links at once, instead of $P-1$ whole blocks through one link.

# %%
P_a2a, heads_a2a = 4, 8
colours = plt.get_cmap("tab10")
fig, axes = plt.subplots(1, 2, figsize=(8, 3.2), layout="constrained")
for ax, (title, owner) in zip(
    axes,
    [
        ("before: split by tokens", lambda blk, head: blk),
        (
            "after the all-to-all: split by heads",
            lambda blk, head: head // (heads_a2a // P_a2a),
        ),
    ],
    strict=True,
):
    for blk in range(P_a2a):
        for head in range(heads_a2a):
            home = owner(blk, head)
            sender = blk  # the tokens' original host, which sent this cell
            ax.add_patch(
                plt.Rectangle((head, blk), 1, 1, fc=colours(home), ec="white", lw=2)
            )
            if title.startswith("after"):
                ax.text(head + 0.5, blk + 0.5, str(sender), ha="center",
                        va="center", fontsize=8, color="white")  # fmt: skip
    ax.set_xlim(0, heads_a2a)
    ax.set_ylim(P_a2a, 0)
    ax.set_xticks([h + 0.5 for h in range(heads_a2a)], range(heads_a2a))
    ax.set_yticks(
        [b + 0.5 for b in range(P_a2a)], [f"tokens {b}" for b in range(P_a2a)]
    )
    ax.set_xlabel("attention head")
    ax.set_title(title, fontsize=10)
    ax.grid(False)
handles = [plt.Rectangle((0, 0), 1, 1, fc=colours(h)) for h in range(P_a2a)]
fig.legend(handles, [f"host {h}" for h in range(P_a2a)], loc="outside right center")
plt.show()

# %% [markdown]
# *Figure 9.0. What to notice:* each cell is one token block of one head, coloured by the
# host that holds it. Before: rows (token blocks) belong to hosts. After: columns (head
# groups) do, and every host received one cell from each other host (the number in a cell
# is the host that sent it). That is
# also why Ulysses stops at $P = H_{kv}$: a key/value head cannot be split across hosts.

# %% [markdown]
# ## Prefill and decode
#
# Serving a long-context model has two phases. **Prefill** reads the prompt: all $N$ tokens
# at once, every token attending to every earlier one, $O(N^2)$ FLOPs on large blocks. It is
# compute-bound, exactly the forward pass of lessons 4 to 6, and the ring (or Ulysses)
# splits it the same way. **Decode** then generates one token at a time: one query row per
# layer attends to the whole KV cache. It does $4 N d h$ FLOPs while *reading* the cache's
# $2 N d h_{kv}$ bf16 numbers ($4 N d h_{kv}$ bytes) from memory: $h / h_{kv}$ FLOPs per
# byte, 1 without grouped-query attention and 8 for the model below, far below what a GPU
# needs to be busy (an H100 does about 300 bf16 FLOPs in the time it reads one byte). So decode is
# bound by memory bandwidth: its time per token is the cache's bytes divided by the HBM
# bandwidth, and splitting the cache over $P$ hosts divides that by $P$.

# %%
gqa_70b = ModelSpec(
    "70b-gqa", layers=80, d_model=8192, heads=64, ffn_hidden=28672, kv_heads=8
)
h100 = get_hardware("h100-nvlink")
cache = 2**20 * gqa_70b.layers * gqa_70b.n_kv_heads * gqa_70b.head_dim * 2 * 2  # bf16
flops = 4 * 2**20 * gqa_70b.head_dim * gqa_70b.heads * gqa_70b.layers
print(f"70B GQA, 1M-token cache: {cache / 1e9:.0f} GB to read per generated token")
print(
    f"attention FLOPs per token: {flops / 1e9:.0f} GFLOP, "
    f"{flops / cache:.1f} FLOP per byte"
)
print(
    f"H100: {h100.flops_for('bf16') / h100.memory_bandwidth:.0f} FLOP per byte of HBM"
)
for p in (1, 8, 64):
    ms = cache / p / h100.memory_bandwidth * 1e3
    print(f"  {p:2d} H100s: at least {ms:7.2f} ms per token to read the cache")

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
k_cache, v_cache = rng.standard_normal(
    (2, 2, 4096, 64)
)  # 8 query heads share 2 kv heads
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
# - Prefill is compute-bound (the ring's home ground); decode is memory-bandwidth-bound.
# - Decode never moves the cache: only $(o, \mathrm{lse})$ partials travel.
#
# Next: [simulated vs measured](10_simulated_vs_measured.py).

# %% tags=["remove-input"]
slow = strategies.with_bandwidth(config, 10e9)
slow_times = {
    n: r["total_time_s"] * 1e3 for n, r in strategies.compare_strategies(slow).items()
}
fastest_slow = min(slow_times, key=slow_times.get)
h200 = get_hardware("h200-nvlink")
cache_8 = cache / 8
exercises(
    Exercise(
        "At what link bandwidth does Ulysses overtake the ring for this lesson's 8 hosts, "
        "32K tokens, 32 heads? Which strategy is fastest at 10 GB/s?",
        f"The crossover is {crossover / 1e9:.0f} GB/s "
        f"(`crossover_bandwidth(config)`). At 10 GB/s: {fastest_slow} "
        f"({', '.join(f'{n} {t:.1f} ms' for n, t in slow_times.items())}).",
    ),
    Exercise(
        "The 70B GQA model above decodes against a 1M-token cache split over 8 H200s. "
        "Bound the attention time per generated token from below.",
        f"Each H200 reads its eighth of the cache, {cache_8 / 1e9:.1f} GB, at "
        f"{h200.memory_bandwidth / 1e12:.1f} TB/s: at least "
        f"{cache_8 / h200.memory_bandwidth * 1e3:.2f} ms per token, plus merging the "
        "partials. The FLOPs hardly matter: decode is memory-bandwidth-bound.",
    ),
    Exercise(
        "A model has 64 query heads and 8 key/value heads. What is the largest Ulysses "
        "degree, and how would you use 64 GPUs for one long sequence?",
        "8, one key/value head per host (`ringsim.timer.strategies.ulysses.check_ulysses_hosts` refuses more). "
        "For 64 GPUs combine: Ulysses over 8 inside a node and a ring over 8 nodes "
        "(2D or hybrid context parallelism), so the ring's blocks are 8 times larger and "
        "easier to overlap.",
    ),
)

# %% tags=["remove-input"]
references(
    "ulysses",
    "ring",
    "llama3",
    "flash",
    notes={
        "ulysses": "The all-to-all re-sharding by heads.",
        "llama3": "All-gather context parallelism (Section 3.3.2).",
    },
)
