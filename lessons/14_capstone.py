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
# # 14. Capstone: a million tokens of Llama 3 8B on 64 H100s
#
# One question, answered with everything the lessons built: can we train Llama 3 8B on one
# sequence of 1M ($2^{20}$) tokens with 64 H100s (8 DGX nodes), and how long does a training
# step take? Each section is one earlier lesson's tool, applied to this run.
#
# **You will be able to**
#
# - check that a long-context run fits, component by component (lesson 7);
# - decide whether the ring's transfers hide, inside a node and across nodes, with the causal
#   threshold $2F/B$ and grouped-query attention (lessons 5, 6 and 9);
# - choose a layout and a strategy from simulated timelines (lessons 6 and 12), and read the
#   planner's predicted step time (lesson 13) as the sum of its parts.

# %%
from dataclasses import replace

import matplotlib.pyplot as plt

from ringsim.timer import RingConfig, cost
from ringsim.timer.machine.topology import get_cluster
from ringsim.timer.step import memory
from ringsim.timer.step.models import get_model
from ringsim.timer.strategies import simulate_strategy
from ringsim.timer.studies.planner import plan
from ringsim.views.lessons_support import (
    Exercise,
    caption,
    exercises,
    notation,
    references,
    table,
    use_lesson_style,
)

use_lesson_style()
GB = 1e9
TERMS = ("1M, 1K (tokens)", "GQA, MHA", "FSDP", "checkpointing")
TERMS += ("NIC, InfiniBand", "NVLink, NVSwitch", "striped, zigzag, contiguous")
TERMS += ("hybrid, double ring", "all-gather", "fp32, fp16")
notation(*("P", "N", "c", "H", "H_{kv}", "d", "F", "B", "c^*", "L"), terms=TERMS)

# %%
model = get_model("llama3-8b")
cluster = get_cluster("dgx-h100").with_nodes(8)
P, N = cluster.nodes * cluster.gpus_per_node, 2**20
c = N // P
print(
    f"{model.name}: {model.layers} layers, {model.heads} query heads sharing "
    f"{model.n_kv_heads} key/value heads"
)
print(f"of {model.head_dim}, vocabulary {model.vocab:,}")
print(f"{cluster.describe()}")
print(f"P = {P} GPUs, N = {N:,} tokens: c = N/P = {c:,} tokens per GPU")

# %% [markdown]
# ## 1. Does it fit? (lesson 7)
#
# **Predict first.** Lesson 7's 7B model needed 8 A100s for a 1M-token step. With 64 H100s
# of 80 GB, how much of each device does the step take, and which part is largest?
#
# <details><summary>Answer</summary>
#
# Every per-token part is divided by 64: a small fraction of the device. The largest part
# is not the checkpoints this time but the logits: Llama 3's vocabulary of 128,256 tokens
# makes the fp32 logits of a host's tokens bigger than its checkpoints (the cell prints both).
#
# </details>

# %%
parts = memory.bytes_per_host("ring", model, N, P)
longest = memory.max_context("ring", model, cluster.hardware.name, P)
for name, size in sorted(parts.items(), key=lambda kv: -kv[1]):
    print(f"{name:>18}: {size / GB:6.2f} GB")
device = cluster.hardware.memory_bytes
print(f"{'total':>18}: {sum(parts.values()) / GB:6.2f} GB of {device / GB:.0f}")
print(f"longest context on {P} GPUs: {longest / 2**20:.1f}M tokens")

# %% [markdown]
# ## 2. Do the transfers hide? (lessons 5, 6 and 9)
#
# A ring step moves $K$ and $V$ of the $H_{kv} = 8$ key/value heads while it computes all
# $H = 32$ query heads: grouped-query attention divides the threshold by $H / H_{kv}$. The
# mask is causal, so a balanced layout computes half a block at most steps and needs
# $2 F / B$ (lesson 6). Inside a node the link is NVLink; the ring also crosses nodes, where
# the link is one NIC.

# %%
kw = dict(heads=model.heads, kv_heads=model.n_kv_heads, head_dim=model.head_dim)
kw |= dict(dtype="bf16", include_latency=False)
links = {
    "NVLink": cluster.intra_bandwidth,
    "NIC": cluster.inter_bandwidth,
}
rows = []
for name, bandwidth in links.items():
    hw = replace(cluster.hardware, link_bandwidth=bandwidth)
    threshold = cost.overlap_threshold(hw, **kw)
    rows.append(
        {
            "link": name,
            "GB/s": bandwidth / 1e9,
            "F/B (GQA)": threshold,
            "2F/B causal": 2 * threshold,
            "c / (2F/B)": c / (2 * threshold),
        }
    )
formats = {
    "link": "{}",
    "GB/s": "{:.0f}",
    "F/B (GQA)": "{:,.0f}",
    "2F/B causal": "{:,.0f}",
}
print(table(rows, formats | {"c / (2F/B)": "{:.1f}"}))

# %% [markdown]
# ## 3. Which layout and strategy? (lessons 6, 9 and 12)
#
# One attention layer, forward, simulated on the cluster (8 GPUs per node, NICs between
# nodes): the flat ring in each layout, then the two-level strategies and all-gather with
# the zigzag layout.

# %%
base = RingConfig(
    hosts=P,
    seq_len=N,
    hardware=cluster.hardware,
    heads=model.heads,
    kv_heads=model.n_kv_heads,
    head_dim=model.head_dim,
    causal=True,
)
runs = {}
for layout in ("contiguous", "striped", "zigzag"):
    runs[f"ring, {layout}"] = simulate_strategy(
        base.replace(layout=layout), "ring", cluster=cluster
    )
zigzag = base.replace(layout="zigzag")
runs["hybrid U8 x R8, zigzag"] = simulate_strategy(
    zigzag, "hybrid", cluster=cluster, ulysses_degree=8
)
runs["double ring, zigzag"] = simulate_strategy(zigzag, "double-ring", cluster=cluster)
runs["all-gather, zigzag"] = simulate_strategy(zigzag, "allgather", cluster=cluster)
summary = {name: run.summary() for name, run in runs.items()}
rows = [
    {
        "candidate": name,
        "ms": s["total_time_s"] * 1e3,
        "compute": s["compute_time_s"] * 1e3,
        "exposed": s["exposed_comm_s"] * 1e3,
        "idle": s["idle_fraction"],
        "MB": s["memory_per_host_bytes"] / 1e6,
    }
    for name, s in summary.items()
]
formats = {"candidate": "{}", "ms": "{:.1f}", "compute": "{:.1f}", "exposed": "{:.2f}"}
print(table(rows, formats | {"idle": "{:.0%}", "MB": "{:,.0f}"}))

# %%
fig, (left, right) = plt.subplots(
    1, 2, figsize=(8, 3.8), layout="constrained", width_ratios=[1, 2.3]
)
bottom = 0.0
for name, size in parts.items():
    left.bar(["one H100"], [size / GB], bottom=bottom, label=name.replace("_", " "))
    bottom += size / GB
left.axhline(cluster.hardware.memory_bytes / GB, color="grey", ls="--", lw=1)
left.set_ylim(0, 90)
left.set_ylabel("GB per GPU")
left.set_title("memory at 1M tokens", fontsize=10)
left.legend(fontsize=9, loc="center")  # between the bar (16 GB) and the line (80)
names = [n.replace(", ", "\n") for n in summary]
compute = [s["compute_time_s"] * 1e3 for s in summary.values()]
rest = [(s["total_time_s"] - s["compute_time_s"]) * 1e3 for s in summary.values()]
right.barh(names, compute, color="#0072B2", label="compute (busiest GPU)")
right.barh(names, rest, left=compute, color="#E69F00", label="idle or waiting")
right.invert_yaxis()
right.set_xlim(0, max(s["total_time_s"] for s in summary.values()) * 1e3 * 1.05)
right.set_xlabel("one attention layer, forward (ms)")
right.set_title("layouts and strategies", fontsize=10)
right.tick_params(axis="y", labelsize=9)
right.legend(fontsize=9, loc="lower right")
plt.show()

# %% tags=["remove-input"]
ring_z, ring_c = summary["ring, zigzag"], summary["ring, contiguous"]
caption(
    "Figure 14.1",
    f"left, the step takes {sum(parts.values()) / GB:.0f} GB of the 80 (dashed): it fits "
    f"with room to spare. Right, the contiguous ring idles {ring_c['idle_fraction']:.0%} of "
    f"its GPUs and takes {ring_c['total_time_s'] / ring_z['total_time_s']:.1f}x the zigzag "
    "ring's time; every balanced candidate runs at compute time, because even the NIC hop "
    "hides at this block size; all-gather alone waits, for the part of its gather the own "
    "block cannot hide.",
)

# %% [markdown]
# ## 4. The step time (lesson 13)
#
# The planner puts it together: every strategy, degree, placement and layout that fits,
# timed for a whole training step (forward and backward of attention on every layer, plus
# the other matmuls: projections, feed-forward, the output head), best first. Like every
# timing of this lesson it uses the ideal model, peak FLOP/s; it leaves out FSDP's own
# gathers and reductions.

# %%
best = plan(model, N, cluster)
top = best.candidates[0]
print(f"{len(best.candidates)} candidates fit; the best five:")
print(
    table(
        [
            {
                "candidate": c_.label,
                "s/step": c_.step_time_s,
                "GB": c_.bytes_per_host / GB,
            }
            for c_ in best.candidates[:5]
        ],
        {"candidate": "{}", "s/step": "{:.2f}", "GB": "{:.1f}"},
    )
)
rate = N / top.step_time_s
print(f"best: {top.label}: {top.step_time_s:.2f} s per step, {rate:,.0f} tokens/s")
print(
    f"  attention {top.attention_s:.2f} s ({top.attention_s / top.step_time_s:.0%}), "
    f"other matmuls {top.local_s:.2f} s"
)
per_layer = ring_z["total_time_s"] * model.layers * (1 + cost.BACKWARD_FACTOR)
layer_ms = ring_z["total_time_s"] * 1e3
print(
    f"check: {layer_ms:.0f} ms per layer forward x {model.layers} layers "
    f"x (1 + {cost.BACKWARD_FACTOR} backward) = {per_layer:.2f} s of attention"
)

# %% [markdown]
# At a million tokens attention is almost the whole step: its FLOPs grow with $N^2$, the
# other matmuls with $N$. The ring hides its transfers, the balanced layout keeps every GPU
# busy, and the step is as fast as the arithmetic allows on this model; what would make it
# faster is a faster kernel (lesson 11: real kernels reach a fraction of peak, and the ideal
# model used here assumes the peak).
#
# ## Takeaways
#
# - Memory: divide every per-token part by $P$; at $P = 64$ a 1M-token step is a small part
#   of an H100, and the logits, not the checkpoints, are the largest part with a big
#   vocabulary.
# - Overlap: with GQA and a causal mask the threshold is $2 F H_{kv} / (B H)$; a 16K block
#   hides even behind a 50 GB/s NIC.
# - Layout before strategy: contiguous doubles the time; among balanced layouts the ring,
#   the hybrids and the double ring tie once their transfers hide.
#
# Back to [the start](01_memory_wall.py), or open [the notation page](notation.md).

# %% tags=["remove-input"]
two_m = plan(model, 2 * N, cluster)
a100 = get_cluster("dgx-a100").with_nodes(8)
a100_nic = replace(a100.hardware, link_bandwidth=a100.inter_bandwidth)
a100_threshold = 2 * cost.overlap_threshold(a100_nic, **kw)
contiguous = min(
    (c_ for c_ in best.candidates if c_.layout == "contiguous"),
    key=lambda c_: c_.step_time_s,
)
exercises(
    Exercise(
        f"Double the sequence to $2^{{21}}$ = {2 * N:,} tokens on the same {P} H100s. Does it "
        "fit, and how does the step time change? Predict the factor before you run `plan`.",
        f"It fits ({two_m.candidates[0].bytes_per_host / GB:.1f} GB per GPU) and the best "
        f"step takes {two_m.candidates[0].step_time_s:.1f} s, "
        f"{two_m.candidates[0].step_time_s / top.step_time_s:.1f}x the 1M step: attention, "
        "almost all of it, grows with $N^2$ (four times), the rest with $N$.",
    ),
    Exercise(
        "The same run on 8 DGX A100 nodes, whose NICs carry 25 GB/s. Does the cross-node hop "
        "still hide behind a 16K-token causal block?",
        f"$2F/B$ with GQA is {a100_threshold:,.0f} tokens on the A100's NIC against "
        f"$c$ = {c:,}: {'yes' if c >= a100_threshold else 'no'}, "
        f"{'with' if c >= a100_threshold else 'short by'} a factor "
        f"{max(c, a100_threshold) / min(c, a100_threshold):.1f} "
        f"{'to spare' if c >= a100_threshold else ''}. "
        "(`cost.overlap_threshold` on the `dgx-a100` NIC, doubled for the causal mask.)",
    ),
    Exercise(
        "How much does the layout alone cost? Find the best `contiguous` candidate in the "
        "plan and compare it with the best one.",
        f"`{contiguous.label}`: {contiguous.step_time_s:.1f} s against "
        f"{top.step_time_s:.1f} s, {contiguous.step_time_s / top.step_time_s:.2f}x: half "
        "the GPUs idle at every causal step (lesson 6), in every layer, forward and backward.",
    ),
)

# %% tags=["remove-input"]
references(
    "llama3",
    "ring",
    "striped",
    "ulysses",
    notes={
        "llama3": "The model's shape (Table 3) and context parallelism with zigzag chunks.",
        "ring": "The ring and its overlap condition.",
    },
)
