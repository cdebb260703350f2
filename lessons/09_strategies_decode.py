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
from IPython.display import display

import ringsim
from ringsim import ModelSpec, RingConfig, get_hardware, ring_decode, simulate
from ringsim.teach import (
    DTYPE_BYTES,
    FLAT_STRATEGIES,
    Exercise,
    Markdown,
    compare_strategies,
    crossover_bandwidth,
    exercises,
    notation,
    plain_log_ticks,
    references,
    relative_error,
    table,
    use_lesson_style,
    with_bandwidth,
)

use_lesson_style()
a100 = get_hardware("a100-nvlink")
TERMS = ("Ulysses", "all-to-all", "all-gather", "GQA, MHA", "prefill, decode")
TERMS += ("KV cache (KV)", "HBM", "NVLink, NVSwitch", "bf16", "1M, 1K (tokens)")
notation(*("P", "N", "c", "H", "H_{kv}", "d", "e", "B", "\\alpha", "o, O"), terms=TERMS)

# %% [markdown]
# ## What Ulysses' all-to-all does
#
# Before attention every host holds its $c = N/P$ tokens for *all* heads (the layout the rest
# of the layer wants). Attention itself needs *all* tokens of a head, so Ulysses transposes
# the split: one all-to-all in which host $r$ sends, to every other host $g$, its tokens'
# slice of head group $g$. Afterwards host $g$ holds every token of its $H/P$ heads, computes
# ordinary (FlashAttention) attention on them with no further communication, and a second
# all-to-all puts the outputs back.

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
                ax.text(
                    head + 0.5,
                    blk + 0.5,
                    str(sender),
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white",
                )
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
# *Figure 9.1. What to notice:* each cell is one token block of one head, coloured by the
# host that holds it. Before: rows (token blocks) belong to hosts. After: columns (head
# groups) do, and every host received one cell from each other host (the number in a cell
# is the host that sent it).
#
# **Where Ulysses stops.** After the all-to-all a host holds whole heads, and a key/value
# head is shared by $H/H_{kv}$ query heads, so plain Ulysses stops at $P = H_{kv}$. That is
# not a law: verl and InternEvo repeat each key/value head until there are as many as the
# Ulysses degree, so they can go up to the $H$ query heads, and pay for the copies in
# all-to-all bytes and memory. This model does the same past $H_{kv}$ (verl's rule: the
# degree a multiple of $H_{kv}$ that divides $H$) and counts those bytes.
#
# ## Bytes per host
#
# What each host sends for one attention layer, forward, with $e$ bytes per element:
#
# - **ring**: $P-1$ blocks of $K$ and $V$, $2(P-1)\,c H_{kv} d e$, one per step, each hidden
#   behind a step's compute when $c \geq c^*$;
# - **Ulysses**: $q, k, v$ in and the output back, each all-to-all sending $(P-1)/P$ of the
#   host's shard: $\tfrac{P-1}{P}\, 2 c d e (H + H_{kv})$, and nothing overlaps it;
# - **all-gather**: the host's $K, V$ to every other host, $2(P-1)\,c H_{kv} d e$ like the
#   ring, but all before attention, and every host then holds all $N$ tokens' keys and values.
#
# So Ulysses sends $(H + H_{kv}) / (P H_{kv})$ of the ring's bytes: $2/P$ without grouped-query
# attention. On a switch (NVSwitch) that lets each host drive its port at $B$ to any peer,
# that is Ulysses' whole advantage: fewer bytes, not more links (a host still has one port).
# With GQA the ring's messages shrink by $H/H_{kv}$ and Ulysses' do not (it also moves $q$ and
# the output): when $H + H_{kv} \geq P H_{kv}$ for every degree Ulysses can take, the ring
# sends less *and* hides it, and wins at every bandwidth.


# %%
def bytes_per_host(
    strategy: str, P: int, c: int, H: int, H_kv: int, d: int = 128
) -> float:
    """Bytes one host sends for one attention layer, forward, bf16 (formulas above)."""
    kv_block = ringsim.kv_block_bytes(
        c, H_kv, d, "bf16"
    )  # K and V of c tokens: 2 c H_kv d e
    if strategy in ("ring", "allgather"):
        return (P - 1) * kv_block
    e = DTYPE_BYTES["bf16"]
    return (P - 1) / P * 2 * c * d * e * (H + H_kv)  # Ulysses: q, k, v in, output out


shapes = {
    "32 heads, MHA": (32, 32),
    "32 / 8 (Llama 3 8B)": (32, 8),
    "64 / 8 (70B)": (64, 8),
}
rows = []
for name, (H, H_kv) in shapes.items():
    sent = {s: bytes_per_host(s, 8, 4096, H, H_kv) / 1e6 for s in FLAT_STRATEGIES}
    config = RingConfig(
        hosts=8, seq_len=8 * 4096, hardware=a100, heads=H, kv_heads=H_kv
    )
    crossover = crossover_bandwidth(config)
    rows.append(
        {
            "heads H / H_kv": name,
            "ring MB": sent["ring"],
            "Ulysses MB": sent["ulysses"],
            "all-gather MB": sent["allgather"],
            "Ulysses/ring": sent["ulysses"] / sent["ring"],
            "crossover GB/s": None if crossover is None else crossover / 1e9,
        }
    )
print("P = 8 hosts, c = 4K tokens per host, head dim 128, bf16, forward, one layer:")
formats = {"heads H / H_kv": "{}", "ring MB": "{:.0f}", "Ulysses MB": "{:.0f}"}
formats |= {
    "all-gather MB": "{:.0f}",
    "Ulysses/ring": "{:.2f}",
    "crossover GB/s": "{:.0f}",
}
display(table(rows, formats))
print("crossover: the link bandwidth below which Ulysses beats the ring")
print("(crossover_bandwidth; '-': the ring wins at every bandwidth)")

# %% [markdown]
# One notation for every collective in these lessons (the timer's strategies): a
# host injects into the network at $B$ bytes/s and pays the latency $\alpha$ once per
# message, so a collective in which a host sends $m$ messages of $M$ bytes in all takes
# $m\alpha + M/B$.

# %% tags=["remove-input"]
P_t, c_t, H_t, d_t, e_t = 8, 4096, 32, 128, 2
kv_mb = ringsim.kv_block_bytes(c_t, H_t, d_t, "bf16") / 1e6
q_mb = c_t * H_t * d_t * e_t / 1e6
Markdown(
    "| what moves | messages $m$ | bytes $M$ per host | overlapped? | "
    f"$M$ at $P = {P_t}$, $c$ = 4K, {H_t} heads |\n"
    "| --- | --- | --- | --- | --- |\n"
    "| ring, one step | 1 | $2 c H_{kv} d e$ | with that step's compute | "
    f"{kv_mb:.0f} MB |\n"
    "| ring, whole pass | $P - 1$ | $2 (P-1) c H_{kv} d e$ | step by step | "
    f"{(P_t - 1) * kv_mb:.0f} MB |\n"
    "| all-to-all of one tensor of $c H d$ | $P - 1$ | $\\tfrac{P-1}{P} c H d e$ | no | "
    f"{(P_t - 1) / P_t * q_mb:.0f} MB |\n"
    "| Ulysses, q, k, v in and output out | $4(P-1)$ | "
    "$\\tfrac{P-1}{P} 2 c d e (H + H_{kv})$ | no | "
    f"{bytes_per_host('ulysses', P_t, c_t, H_t, H_t) / 1e6:.0f} MB |\n"
    "| all-gather of K, V (ring algorithm) | $P - 1$ | $2 (P-1) c H_{kv} d e$ | "
    f"only the own block | {(P_t - 1) * kv_mb:.0f} MB |\n"
    "| decode: merge partials $(o, \\mathrm{lse})$ | $\\log_2 P$ rounds | "
    "$H (d + 1) \\cdot 4$ per round | no | "
    f"{H_t * (d_t + 1) * 4 / 1e3:.0f} kB |\n"
)

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
# the ring is fastest. On the slow link the ring pushes $P-1$ whole blocks through its link,
# four times Ulysses' bytes (the table above): Ulysses wins, below the crossover bandwidth.
#
# </details>

# %%
config = RingConfig(hosts=8, seq_len=8 * 4096, hardware=a100)
bandwidths = np.geomspace(2e9, 600e9, 12)
times = {name: [] for name in FLAT_STRATEGIES}
for bw in bandwidths:
    for name, summary in compare_strategies(with_bandwidth(config, bw)).items():
        times[name].append(summary["total_time_s"] * 1e3)
crossover = crossover_bandwidth(config)

fig, ax = plt.subplots(layout="constrained", figsize=(7.5, 3.8))
for name, values in times.items():
    ax.loglog(bandwidths / 1e9, values, "o-", label=name, ms=4)
ax.axvline(crossover / 1e9, color="grey", ls="--", lw=1)
ax.annotate(
    "crossover",
    (crossover / 1e9, 1.0),
    xycoords=("data", "axes fraction"),
    xytext=(4, -12),
    textcoords="offset points",
    fontsize=9,
)
ax.axvline(300, color="grey", ls=":", lw=1)
ax.annotate(
    "NVLink",
    (300, 1.0),
    xycoords=("data", "axes fraction"),
    xytext=(-4, -12),
    textcoords="offset points",
    fontsize=9,
    ha="right",
)
plain_log_ticks(ax, "x")
ax.set_xlabel("link bandwidth (GB/s per direction)")
ax.set_ylabel("forward time (ms)")
ax.set_title("8 hosts, 32K tokens, 32 heads: the same attention, three ways")
ax.legend(fontsize=9, loc="lower left")
plt.show()

# %% [markdown]
# *Figure 9.2. What to notice:* on fast links the ring flattens at pure compute time, the
# lowest of the three; Ulysses and all-gather keep paying for their collectives. Below the
# dashed crossover bandwidth the ring becomes link-bound and Ulysses overtakes it.

# %%
summaries = compare_strategies(config)
rows = [
    {
        "strategy": name,
        "forward (ms)": s["total_time_s"] * 1e3,
        "working set per host (MB)": s["memory_per_host_bytes"] / 1e6,
    }
    for name, s in summaries.items()
]
display(
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
    ringsim.simulate_strategy(big, "ulysses")
except ValueError as err:
    print(textwrap.fill(f"Ulysses on 64 hosts: {err}", width=88))

# %% [markdown]
# All-gather holds the keys and values of the *whole* sequence on every host, so its memory
# grows with $N$ rather than $N/P$; Ulysses, in this model, stops at the key/value heads.
#
# And the case where the ring always wins: a 70B-shaped layer, 64 query heads sharing 8
# key/value heads. The ring's messages are 8 times smaller than without GQA, while Ulysses
# still moves $q$ and the output in full:

# %%
gqa = RingConfig(hosts=8, seq_len=8 * 4096, hardware=a100, heads=64, kv_heads=8)
no_crossover = crossover_bandwidth(gqa) is None
print(f"64 query / 8 kv heads: the ring wins at every bandwidth: {no_crossover}")
for bw in (300e9, 10e9, 2e9):
    run = compare_strategies(with_bandwidth(gqa, bw))
    ms = ", ".join(f"{name} {s['total_time_s'] * 1e3:.1f}" for name, s in run.items())
    print(f"  {bw / 1e9:5.0f} GB/s: {ms} ms")


# %% [markdown]
# ## Prefill and decode
#
# Serving a long-context model has two phases. **Prefill** reads the prompt: all $N$ tokens
# at once, every token attending to every earlier one, $O(N^2)$ FLOPs on large blocks. It is
# compute-bound, exactly the forward pass of lessons 4 to 6, and the ring (or Ulysses)
# splits it the same way. **Decode** then generates one token at a time: one query row per
# layer attends to the whole KV cache. It does $4 N d H$ FLOPs while *reading* the cache's
# $2 N d H_{kv}$ bf16 numbers ($4 N d H_{kv}$ bytes) from memory: $H / H_{kv}$ FLOPs per
# byte, 1 without grouped-query attention and 8 for the model below. An H100 does about 300
# bf16 FLOPs in the time it reads one byte, 37 times more (the cell below prints both), so
# most of its arithmetic units wait on the memory. So
# decode is bound by memory bandwidth: its time per token is the cache's bytes divided by the HBM
# bandwidth, and splitting the cache over $P$ hosts divides that by $P$.

# %%
gqa_70b = ModelSpec(
    "70b-gqa", layers=80, d_model=8192, heads=64, ffn_hidden=28672, kv_heads=8
)
h100 = get_hardware("h100-nvlink")
cache = 2**20 * gqa_70b.layers * gqa_70b.n_kv_heads * gqa_70b.head_dim * 2 * 2  # bf16
flops = 4 * 2**20 * gqa_70b.head_dim * gqa_70b.heads * gqa_70b.layers
print(f"70B GQA, 2^20-token cache: {cache / 1e9:.0f} GB to read per generated token")
print(
    f"attention FLOPs per token: {flops / 1e9:.0f} GFLOP, "
    f"{flops / cache:.1f} FLOP per byte"
)
hbm_ratio = h100.flops_for("bf16") / h100.memory_bandwidth
print(
    f"H100: {hbm_ratio:.0f} FLOP per byte of HBM, "
    f"{hbm_ratio / (flops / cache):.0f} times what decode asks"
)
for p in (1, 8, 64):
    ms = cache / p / h100.memory_bandwidth * 1e3
    print(f"  {p:2d} H100s: at least {ms:7.2f} ms per token to read the cache")

# %% [markdown]
# ## Decode: the cache stays put
#
# Generating one token means one query row against a cache of $N$ keys. Moving the cache
# around a ring would send every key and value over the links to compute a single query row.
# Instead each host attends the new
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
# *Figure 9.3. What to notice:* splitting the cache speeds a decoded token up almost in
# proportion to the hosts at first (each host reads $1/P$ of the cache), then the fixed cost
# of combining partials across hosts starts to dominate, and the curve bends away from ideal.
#
# ## Takeaways
#
# - Fast links: the ring (its transfers hide). Slow links: Ulysses, which sends
#   $(H + H_{kv})/(P H_{kv})$ of the ring's bytes; with enough GQA the ring wins everywhere.
# - This model stops Ulysses at the key/value heads (real code repeats them to go further);
#   all-gather's memory grows with $N$.
# - Prefill is compute-bound (the ring's home ground); decode is memory-bandwidth-bound.
# - Decode never moves the cache: only $(o, \mathrm{lse})$ partials travel.
#
# Next: [simulated vs measured](10_simulated_vs_measured.py).

# %% tags=["remove-input"]
slow = with_bandwidth(config, 10e9)
slow_times = {n: r["total_time_s"] * 1e3 for n, r in compare_strategies(slow).items()}
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
        "With whole key/value heads 8, one per host. Repeating key/value heads (verl's rule, "
        "which this model follows past 8) goes to 64, the query heads, sending every "
        "key/value head 8 times in the all-to-all. For 64 GPUs combine "
        "instead: Ulysses over 8 inside a node and a ring over 8 nodes (2D or hybrid context "
        "parallelism), so the ring's blocks are 8 times larger and easier to overlap.",
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
