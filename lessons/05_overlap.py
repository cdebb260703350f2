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
# # 5. Overlap: when the ring costs no time
#
# Each ring step a host computes with one key/value block while its link carries that block
# to the neighbour. If the compute takes longer than the transfer, the transfer is hidden and
# the ring runs as fast as one host computing alone; if not, every step waits for the link.
# This lesson derives the condition and watches it in the event timer.
#
# **You will be able to**
#
# - derive $c \geq F/B$ from the FLOPs and bytes of one step, and say which of the published
#   FLOP counts is right (lesson 6 shows why a causal mask needs about twice that);
# - read a simulated timeline: compute, send, receive and idle time per host;
# - find the block size at which communication stops showing, for real hardware.

# %%
import matplotlib.pyplot as plt
import numpy as np
from IPython.display import display

import ringsim
from ringsim import RingConfig, get_hardware, simulate
from ringsim.teach import (
    Exercise,
    caption,
    exercises,
    notation,
    plot_sweep,
    plot_timelines,
    references,
    scaled,
    table,
    use_lesson_style,
)

use_lesson_style()
TERMS = ("FLOP, GFLOP, TFLOP", "NVLink, NVSwitch", "NIC, InfiniBand", "bf16")
TERMS += ("GQA, MHA", "1M, 1K (tokens)")
notation(*("c", "d", "H", "H_{kv}", "F", "B", "c^*"), terms=TERMS)

# %% [markdown]
# ## The condition
#
# Per step a host scores its $c$ queries against $c$ keys: for each of $H$ heads two matrix
# products, $QK^\top$ and $PV$, each $(c \times d)(d \times c)$, so $2c^2d$ FLOPs each and
# $4c^2dH$ in all. It sends $K$ and $V$: $2cdH$ numbers of 2 bytes (bf16), $4cdH$ bytes
# (no grouped-query attention here: $H_{kv} = H$). With $F$ FLOP/s and $B$ bytes/s, the
# transfer hides when
#
# $$\frac{4 c^2 d H}{F} \;\geq\; \frac{4 c d H}{B} \quad\Longleftrightarrow\quad
#   c \;\geq\; \frac{F}{B}.$$
#
# Compute grows like $c^2$ and traffic like $c$, so a big enough block always wins.
#
# **Predict first.** One explainer counts the step as $2c^2dH$ FLOPs against $2cdH \times 2$
# bytes and concludes the ratio is $c/2$ FLOPs per byte. Another (and the paper) uses $4dc^2$
# FLOPs against $4cd$ bytes. Which is right, and what does the wrong one do to the threshold
# of an A100 on NVLink (312 TFLOP/s, 300 GB/s)?
#
# <details><summary>Answer</summary>
#
# $4c^2dH$: attention is *two* matmuls of that shape; $2c^2dH$ counts only $QK^\top$. The
# true ratio is $c$ FLOPs per byte, so $c^* = F/B = 1040$ tokens, as the paper's Table 2 says
# (1.0K). Halving the FLOPs doubles the threshold to about 2,100 tokens.
#
# </details>

# %%
a100 = get_hardware("a100-nvlink")
flops, bandwidth = a100.flops_for("bf16"), a100.link_bandwidth
right = ringsim.overlap_threshold(
    a100, heads=32, kv_heads=32, head_dim=128, dtype="bf16", include_latency=False
)
print(f"F/B = {flops / bandwidth:,.0f} tokens; ringsim.overlap_threshold: {right:,.0f}")
print(
    f"with the one-matmul count (c/2 FLOP per byte): "
    f"{2 * flops / bandwidth:,.0f} tokens"
)
step = ringsim.attention_flops(1024, 1024, 32, 128)
moved = ringsim.kv_block_bytes(1024, 32, 128, "bf16")
print(f"c = 1024: {step / 1e9:.1f} GFLOP per step, {moved / 1e6:.1f} MB per step")

# %% [markdown]
# ## The roofline view
#
# The same condition, drawn the way kernel engineers draw it. A ring step does $4c^2dH$
# FLOPs for every $4cdH$ bytes it moves over the link, an **arithmetic intensity** of $c$
# FLOPs per byte (bf16). A host can go no faster than its compute, $F$, nor than its link
# can feed it, $c \cdot B$; so the FLOP rate it can sustain is $\min(F,\ c B)$, a roof with a
# slanted part (link-bound) and a flat part (compute-bound) that meet at the **ridge**
# $c^* = F/B$. The faster the link, the further left the ridge.

# %%
intensity = np.array([2.0**p for p in range(6, 18)])  # c, FLOPs per byte moved
fig, ax = plt.subplots(layout="constrained", figsize=(7.5, 3.6))
for i, name in enumerate(("a100-nvlink", "a100-ib", "h100-nvlink")):
    hw = get_hardware(name)
    roof = np.minimum(hw.flops_for("bf16"), intensity * hw.link_bandwidth) / 1e12
    ax.loglog(intensity, roof, label=name, color=f"C{i}")
    ridge = hw.flops_for("bf16") / hw.link_bandwidth
    peak = hw.flops_for("bf16") / 1e12
    ax.plot([ridge], [peak], "o", ms=9, color=f"C{i}", mec="black", mew=1.2, zorder=5)
    ax.annotate(
        f"c* = {ridge:,.0f}",
        (ridge, peak),
        xytext=(0, -16 - 12 * (i % 2)),
        textcoords="offset points",
        ha="center",
        fontsize=9,
        color=f"C{i}",
    )
ax.set_xscale("log", base=2)
ax.set_xticks(
    intensity[::2],
    [f"{int(x) // 1024}K" if x >= 1024 else f"{int(x)}" for x in intensity[::2]],
)
ax.set_xlabel("block size c = FLOPs per byte on the link (bf16)")
ax.set_ylabel("sustainable TFLOP/s")
ax.set_title("Ring step roofline: min(F, c B); the dots are the ridges c* = F/B")
ax.legend(fontsize=9, loc="lower right")
plt.show()

# %% [markdown]
# *Figure 5.0. What to notice:* left of its ridge a host runs at $cB$, a fraction $c/c^*$ of
# its peak, whatever its FLOP/s; right of it, at peak. The three presets share the A100's or
# H100's flat roof but their ridges sit far apart: the interconnect, not the chip, decides
# how big a block has to be.

# %% [markdown]
# ## Timelines
#
# `ringsim.simulate` runs the same schedule as the numerics, but with clocks: each
# host computes when it has a block and the previous compute is done, and each link carries
# one message at a time. Below, 8 A100s on InfiniBand (12.5 GB/s), whose threshold is
# 24,960 tokens (24.4K, counting K = 1,024), with blocks well below and well above it.
#
# **Predict first.** With blocks of 4K tokens (far below the threshold), what fraction of the
# time do the hosts compute? And at 64K?
#
# <details><summary>Answer</summary>
#
# A step's compute and transfer scale as $c^2/F$ and $c/B$, so their ratio is $c / c^*$. At
# 4K that is $4096/24960$: the link takes about 6 times as long as the compute, so the hosts
# compute about one sixth of the time and idle the rest. At 64K the compute takes $c/c^*$
# times as long as the transfer, more than twice, so the transfer hides completely: idle only
# during the first block's wait. The cell below prints both runs' numbers.
#
# </details>

# %%
ib = get_hardware("a100-ib")
c_star = ringsim.overlap_threshold(
    ib, heads=32, kv_heads=32, head_dim=128, dtype="bf16", include_latency=False
)
small = simulate(RingConfig(hosts=8, seq_len=8 * 4096, hardware=ib))
fig = plot_timelines(
    [("4K tokens per block, overlapped", small.timeline)], max_hosts=4, width=8
)
plt.show()

# %%
runs, summaries = {}, {}
for overlap in (True, False):
    config = RingConfig(hosts=8, seq_len=8 * 65536, hardware=ib, overlap=overlap)
    name = f"64K tokens per block, {'overlapped' if overlap else 'no overlap'}"
    result = simulate(config)
    runs[name], summaries[overlap] = result.timeline, result.summary()
fig = plot_timelines(list(runs.items()), max_hosts=4, width=8)
plt.show()
for c, s in ((4096, small.summary()), (65536, summaries[True])):
    print(
        f"c = {c // 1024}K: compute / transfer per step = c / c* = {c / c_star:.2f}; "
        f"idle {s['idle_fraction']:.0%} of the run"
    )

# %% tags=["remove-input"]
caption(
    "Figures 5.1 and 5.2",
    "with 4K blocks the compute bars are thin and separated by idle gaps while the link "
    "(send/receive bars) is never idle: the ring runs at link speed. With 64K blocks (both "
    "panels on one time axis) each transfer finishes early inside its compute bar and the "
    "hosts never wait. Turning overlap off puts every transfer after its compute, adding "
    f"the whole communication back: {summaries[False]['idle_fraction']:.0%} of the run idle.",
)

# %% [markdown]
# ## Sweeping the block size
#
# The share of a run spent waiting on the network, `exposed_comm_s / total_time_s`, against the
# block size, for two interconnects:

# %%
blocks = [2**p for p in range(9, 18)]
series = {}
for name in ("a100-nvlink", "a100-ib"):
    hw = get_hardware(name)
    exposed = []
    for c in blocks:
        s = simulate(RingConfig(hosts=8, seq_len=8 * c, hardware=hw)).summary()
        exposed.append(s["exposed_comm_s"] / s["total_time_s"])
    series[name] = exposed
threshold = ringsim.overlap_threshold(
    ib, heads=32, kv_heads=32, head_dim=128, dtype="bf16"
)
fig = plot_sweep(
    blocks,
    series,
    xlabel="block size c (tokens per host)",
    ylabel="share of time waiting on the link",
    title="8 hosts, 32 heads of 128, bf16",
    threshold=threshold,
    threshold_label="A100 InfiniBand threshold",
    legend_loc="center right",
)
plt.show()

# %% tags=["remove-input"]
nvlink_star = ringsim.overlap_threshold(
    a100, heads=32, kv_heads=32, head_dim=128, dtype="bf16", include_latency=False
)
caption(
    "Figure 5.3",
    "on InfiniBand the exposed share falls as the block grows and reaches (almost) zero at "
    "the marked threshold, as $c \\geq F/B$ predicts; NVLink's curve does the same "
    f"{c_star / nvlink_star:.0f} times earlier, near {nvlink_star / 1024:.0f}K tokens. What "
    "remains just past the threshold is the first block's latency, which nothing hides. (The "
    "marked threshold includes the latency: "
    f"{threshold:,.0f} tokens, {threshold / 1024:.1f}K on the axis, where K is 1,024.)",
)

# %% [markdown]
# ## The thresholds of the presets
#
# Beside the paper's Table 2 where it gives a number (it ignores latency; so does the middle
# column here):

# %%
# the paper's Table 2: (minimal block c, minimal sequence per device 6c), x 1e3 tokens
paper = {
    "a100-nvlink": (1.0, 6.2),
    "a100-ib": (24.5, 149.5),
    "tpu-v3": (1.1, 6.6),
    "tpu-v4": (1.0, 6.2),
    "tpu-v5e": (1.1, 6.3),
}
rows = []
for name, hw in ringsim.PRESETS.items():
    kw = dict(heads=32, kv_heads=32, head_dim=128, dtype="bf16")
    bare = ringsim.overlap_threshold(hw, include_latency=False, **kw)
    block_k, seq_k = paper.get(name, (None, None))
    rows.append(
        {
            "preset": name,
            "TFLOP/s": hw.flops_for("bf16") / 1e12,
            "GB/s": hw.link_bandwidth / 1e9,
            "F/B": bare,
            "+latency": ringsim.overlap_threshold(hw, **kw),
            "6 F/B": 6 * bare,
            "paper c (K)": block_k,
            "paper 6c (K)": seq_k,
        }
    )
formats = {"preset": "{}", "TFLOP/s": "{:.0f}", "GB/s": "{:.1f}", "F/B": "{:,.0f}"}
formats |= {"+latency": "{:,.0f}", "6 F/B": "{:,.0f}", "paper c (K)": "{:.1f}"}
display(table(rows, formats | {"paper 6c (K)": "{:.1f}"}))
ib_row = next(r for r in rows if r["preset"] == "a100-ib")
print(
    f"a100-ib: the paper's 6c = 149.5K is 6 x {149.5 / 6:.2f}K; 6 F/B = "
    f"{ib_row['6 F/B'] / 1e3:.1f}K, 6 x 24.5K = {6 * 24.5:.1f}K"
)

# %% [markdown]
# The paper's Table 2 gives, per interconnect, the minimal block $c = F/B$ and the "minimal
# sequence length needed on each device", $s = 6c$: per device, not for six hosts (its
# Section 3 counts six blocks resident on a host: the query, the key and value being used,
# the key and value arriving, the output). For InfiniBand it prints 24.5K, where $F/B$ is
# 24,960; its own minimal-sequence column, 149.5K, is six times 24.9K (the line under the
# table), so 24.5K looks like a rounding slip. Grouped-query attention lowers every threshold
# by $H / H_{kv}$: fewer key/value heads travel for the same compute. Try `kv_heads=8` above (`RINGSIM_LESSON_SCALE` does not matter here:
# the timer is closed-form per event and runs thousands of hosts in milliseconds).

# %%
big = simulate(RingConfig(hosts=scaled(1024, multiple=8), seq_len=2**24, hardware=a100))
print(
    f"{big.config.hosts} hosts, 16M tokens: simulated in one call, "
    f"total {big.summary()['total_time_s']:.3f} s"
)

# %% [markdown]
# ## Takeaways
#
# - One step: $4c^2dH$ FLOPs against $4cdH$ bytes (bf16), so the transfer hides when
#   $c \geq F/B$; counting one matmul instead of two doubles the threshold, wrongly.
# - Below the threshold the ring runs at link speed; above it, at compute speed.
# - NVLink needs about 1K tokens per host, InfiniBand about 25K. A causal mask halves the
#   work of most steps and so needs about twice as much: lesson 6.
#
# Next: [the causal catch](06_causal_catch.py).

# %% tags=["remove-input"]
kw = dict(heads=32, head_dim=128, dtype="bf16", include_latency=False)
h100 = get_hardware("h100-nvlink")
h200_ib = get_hardware("h200-ib")
c_h100 = ringsim.overlap_threshold(h100, kv_heads=32, **kw)
c_h200_ib = ringsim.overlap_threshold(h200_ib, kv_heads=32, **kw)
c_gqa = ringsim.overlap_threshold(ib, kv_heads=8, **kw)
exercises(
    Exercise(
        f"An H100 node: {h100.flops_for('bf16') / 1e12:.0f} TFLOP/s (bf16) per GPU and "
        f"{h100.link_bandwidth / 1e9:.0f} GB/s per direction of NVLink (the `h100-nvlink` "
        "preset). What is the smallest block that hides the ring's transfers? And across "
        f"nodes, on the `h200-ib` preset ({h200_ib.link_bandwidth / 1e9:.0f} GB/s)?",
        f"$c^* = F/B$ = {c_h100:,.0f} tokens inside the node, {c_h200_ib:,.0f} across "
        "nodes (`ringsim.overlap_threshold(..., include_latency=False)`). A ring that spans "
        "nodes needs blocks of tens of thousands of tokens per GPU.",
    ),
    Exercise(
        "The same A100 InfiniBand ring, but with grouped-query attention: 32 query heads "
        "share 8 key/value heads. What is the threshold now?",
        f"Compute is unchanged ($4c^2dH$, with $H$ the query heads) while the message "
        f"shrinks to $4cdH_{{kv}}$ bytes, so $c^* = F H_{{kv}} / (B H)$ = {c_gqa:,.0f} "
        f"tokens, a quarter of the {ringsim.overlap_threshold(ib, kv_heads=32, **kw):,.0f} "
        "without GQA.",
    ),
    Exercise(
        "Find the bug: a blog post computes a step's FLOPs as $2c^2dH$ and its bytes as "
        "$2cdH \\cdot 2$, and concludes that InfiniBand needs about 50K-token blocks. What "
        "did it forget, and what is the right number?",
        "Attention is two matmuls per step, $QK^\\top$ and the weights times $V$, each "
        "$2c^2dH$ FLOPs: $4c^2dH$ in all. With one matmul the intensity halves to $c/2$ and "
        f"the threshold doubles, to {2 * ringsim.overlap_threshold(ib, kv_heads=32, **kw):,.0f}"
        " tokens. The right threshold is "
        f"{ringsim.overlap_threshold(ib, kv_heads=32, **kw):,.0f} tokens.",
    ),
)

# %% tags=["remove-input"]
references(
    "ring",
    "flash2",
    "scaling_book",
    notes={
        "ring": "Table 2: the minimal block size per interconnect.",
        "scaling_book": "Rooflines and arithmetic intensity, in its first chapters.",
    },
)
