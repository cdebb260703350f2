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
# - check that a long-context step fits, part by part, and what recomputing activations
#   buys (lessons 7 and 13);
# - decide whether the ring's transfers hide, inside a node and across nodes, with the causal
#   threshold $2F/B$ and grouped-query attention (lessons 5, 6 and 9);
# - choose a layout and a strategy from simulated timelines (lessons 6 and 12);
# - read the planner's predicted step time part by part, and say how far to trust it
#   (lesson 13).

# %%
from dataclasses import replace

import matplotlib.pyplot as plt

from ringsim.layouts import layout_names
from ringsim.timer import RingConfig, cost
from ringsim.timer.machine.topology import get_cluster
from ringsim.timer.step.models import get_model
from ringsim.timer.strategies import simulate_strategy
from ringsim.timer.studies.planner import plan
from ringsim.timer.studies.validate import validate
from ringsim.views.lessons import (
    Exercise,
    Markdown,
    caption,
    exercises,
    notation,
    references,
    table,
    use_lesson_style,
)
from ringsim.views.planning import plot_breakdown

use_lesson_style()
GB = 1e9
TERMS = ("1M, 1K (tokens)", "GQA, MHA", "FSDP", "checkpointing", "DP, TP, PP")
TERMS += ("context parallelism (CP)", "NIC, InfiniBand", "NVLink, NVSwitch", "GEMM")
TERMS += ("striped, zigzag, contiguous", "hybrid, double ring", "all-gather", "Ulysses")
TERMS += ("fp32, fp16", "bf16", "FLOP, GFLOP, TFLOP")
notation(
    *("P", "N", "c", "H", "H_{kv}", "d", "F", "B", "c^*", "L", "U, R"), terms=TERMS
)

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
# ## 1. Does it fit? (lessons 7 and 13)
#
# Lesson 7 counted a step's memory part by part; the planner of lesson 13 counts the same
# parts for a whole training step (weights, gradients, optimizer state, activations,
# logits, the working set of the layer running) and holds them against what PyTorch leaves
# of the device. Here it plans every configuration of the 64 GPUs, with attention at
# cuDNN's rates as in lesson 13; this section reads the memory of one: the plain ring over
# all 64 GPUs, zigzag layout, without tensor parallelism.
#
# **Predict first.** Lesson 7's 7B model needed 8 A100s for a 1M-token step, with every
# layer checkpointed. Spread over 64 H100s, does the step fit *without* recomputing
# anything? Which part is largest?
#
# <details><summary>Answer</summary>
#
# No. Without recompute, a layer's backward reads the activations its forward stored, for
# every token of the GPU's block and every layer: that part alone is more than PyTorch
# leaves of the device. Recomputing every layer (lesson 7's checkpointing: the forward
# keeps only each layer's input) shrinks it to a small part, and the step fits. The
# largest parts are then the weights and the gradients, which the planner's default
# sharding keeps whole on every GPU (only the optimizer state is sharded), and the logits
# of a 128,256-token vocabulary.
#
# </details>

# %%
step = plan(model, N, cluster, implementation="cudnn")
ring = {
    cand.parallel.recompute: cand
    for cand in step.candidates + step.dropped
    if cand.strategy == "ring" and cand.layout == "zigzag" and cand.parallel.tp == 1
}
choices = ("none", "selective", "full")
parts = [k for k in ring["none"].memory if any(ring[r].memory[k] for r in choices)]
rows = [{"part": k, **{r: ring[r].memory[k] / GB for r in choices}} for k in parts]
rows.append({"part": "total", **{r: ring[r].bytes_per_host / GB for r in choices}})
usable = ring["full"].memory_bytes
print(f"ring over {P} GPUs (TP1, CP{P}, zigzag), GB per GPU by recompute choice:")
print(table(rows, {"part": "{}"} | {r: "{:.2f}" for r in choices}))
print(
    f"usable: {usable / GB:.1f} GB of {cluster.hardware.memory_bytes / GB:.0f}; "
    f"fits: {', '.join(r for r in choices if ring[r].fits)}"
)

# %%
fig, ax = plt.subplots(figsize=(7.0, 3.6))
colours = ["#0072B2", "#56B4E9", "#E69F00", "#009E73", "#CC79A7", "#D55E00", "#999999"]
bars = [f"{r} recompute" if r != "none" else "no recompute" for r in choices]
bottom = [0.0] * len(choices)
for part, colour in zip(parts, colours, strict=False):
    sizes = [ring[r].memory[part] / GB for r in choices]
    ax.bar(bars, sizes, bottom=bottom, color=colour, label=part.replace("_", " "))
    bottom = [b + s for b, s in zip(bottom, sizes, strict=True)]
ax.axhline(usable / GB, color="black", ls="--", lw=1)
ax.text(2.45, usable / GB, " usable", va="bottom", ha="right", fontsize=9)
ax.set_ylabel("GB per GPU")
ax.set_title("ring over 64 GPUs at 1M tokens: memory per GPU", fontsize=11)
ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=3, fontsize=9)
fig.tight_layout()
plt.show()

# %% tags=["remove-input"]
none, full = ring["none"], ring["full"]
caption(
    "Figure 14.1",
    f"without recompute the step needs {none.bytes_per_host / GB:.0f} GB per GPU, "
    f"{none.memory['activations'] / GB:.0f} GB of it activations, against the "
    f"{usable / GB:.0f} GB usable (dashed); selective recompute saves "
    f"{(none.bytes_per_host - ring['selective'].bytes_per_host) / GB:.1f} GB. Full "
    f"recompute keeps {full.memory['activations'] / GB:.1f} GB of activations and the "
    f"step fits in {full.bytes_per_host / GB:.0f} GB; the weights, the gradients and the "
    "logits are then the largest parts.",
)

# %% [markdown]
# ## 2. Do the transfers hide? (lessons 5, 6 and 9)
#
# A ring step moves $K$ and $V$ of the $H_{kv}$ key/value heads while it computes all $H$
# query heads: grouped-query attention divides the threshold by $H / H_{kv}$. The mask is
# causal, so a balanced layout computes half a block at most steps and needs $2 F / B$
# (lesson 6). Inside a node the link is NVLink; the ring also crosses nodes, where the link
# is one NIC per GPU.

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

# %% tags=["remove-input"]
nic = rows[-1]
Markdown(
    f"A GPU's block of $c$ = {c:,} tokens is {nic['c / (2F/B)']:.1f} times the "
    f"{nic['2F/B causal']:,.0f} tokens a causal block needs to hide its transfer across "
    "the NIC (lesson 13 found the same threshold: the same GPU, NIC and model), and "
    f"{rows[0]['c / (2F/B)']:.0f} times the NVLink one: the ring's transfers hide on every "
    "hop."
)

# %% [markdown]
# ## 3. Which layout and strategy? (lessons 6, 9 and 12)
#
# One attention layer, forward, simulated on the cluster at the H100's peak rate (the ideal
# model of lessons 5 to 9): the flat ring in each layout, then the two-level strategies
# and all-gather with the zigzag layout.

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
for layout in layout_names():
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
fig, ax = plt.subplots(figsize=(7.0, 3.4))
names = [n.replace(", ", "\n") for n in summary]
compute = [s["compute_time_s"] * 1e3 for s in summary.values()]
rest = [(s["total_time_s"] - s["compute_time_s"]) * 1e3 for s in summary.values()]
ax.barh(names, compute, color="#0072B2", label="compute (busiest GPU)")
ax.barh(names, rest, left=compute, color="#E69F00", label="idle or waiting")
ax.invert_yaxis()
ax.set_xlim(0, max(s["total_time_s"] for s in summary.values()) * 1e3 * 1.05)
ax.set_xlabel("one attention layer, forward (ms)")
ax.set_title("layouts and strategies at 1M tokens, 64 H100s", fontsize=11)
ax.tick_params(axis="y", labelsize=9)
ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, fontsize=9)
fig.tight_layout()
plt.show()

# %% tags=["remove-input"]
ring_z, ring_c = summary["ring, zigzag"], summary["ring, contiguous"]
balanced = [s for name, s in summary.items() if "zigzag" in name or "striped" in name]
gather = summary["all-gather, zigzag"]
caption(
    "Figure 14.2",
    f"the contiguous ring idles {ring_c['idle_fraction']:.0%} of its GPUs and takes "
    f"{ring_c['total_time_s'] / ring_z['total_time_s']:.1f}x the zigzag ring's time. The "
    f"balanced ring, hybrid and double ring idle at most "
    f"{max(s['idle_fraction'] for s in balanced if s is not gather):.0%}: their transfers "
    f"hide. All-gather waits {gather['exposed_comm_s'] * 1e3:.1f} ms for the part of its "
    "gather that its own block cannot hide.",
)

# %% [markdown]
# ## 4. The step time (lesson 13)
#
# The planner of section 1 put the rest of the step around attention: the GEMMs, the
# output head and the loss, the elementwise kernels, recompute, the collectives and the
# optimizer, for every tensor-parallel degree, strategy, Ulysses degree and layout that
# fits, best first.

# %%
top = step.candidates[0]
wide = max(len(cand.label) for cand in step.candidates[:5])
print(f"{len(step.candidates)} configurations fit; the best five:")
print(
    table(
        [
            {
                "s/step": cand.step_time_s,
                "GB": cand.bytes_per_host / GB,
                "configuration": cand.label,
            }
            for cand in step.candidates[:5]
        ],
        {"s/step": "{:.2f}", "GB": "{:.1f}", "configuration": f"{{:<{wide}}}"},
    )
)
print(f"best: {top.step_time_s:.2f} s per step, {N / top.step_time_s:,.0f} tokens/s")
for key in ("attention_s", "recompute_s", "gemm_s"):
    share = top.breakdown[key] / top.step_time_s
    print(f"  {key[:-2]:>9}: {top.breakdown[key]:5.2f} s ({share:.0%})")
best_ring = min(
    (cand for cand in step.candidates if cand.strategy == "ring"),
    key=lambda x: x.step_time_s,
)
contiguous = min(
    (cand for cand in step.candidates if cand.layout == "contiguous"),
    key=lambda x: x.step_time_s,
)
plot_breakdown(
    step,
    candidates=[top, best_ring, contiguous],
    title="where a 1M-token step goes, one GPU",
)
plt.show()

# %% tags=["remove-input"]
caption(
    "Figure 14.3",
    f"attention is {top.attention_s / top.step_time_s:.0%} of the best step and "
    f"recompute, a second forward of every layer, "
    f"{top.breakdown['recompute_s'] / top.step_time_s:.0%}; everything else together is "
    f"{1 - (top.attention_s + top.breakdown['recompute_s']) / top.step_time_s:.0%}. The "
    f"contiguous layout costs {contiguous.step_time_s / top.step_time_s:.1f}x, in "
    "attention and in its recompute.",
)

# %% [markdown]
# At the peak rate, section 3 found the balanced candidates tied. At cuDNN's rates they
# are not: the planner at the peak (`implementation="ideal"`) and at cuDNN's rates, side
# by side, with section 3's layer time as a check on the first.

# %%
peak = plan(model, N, cluster, implementation="ideal")
peak_ring = next(
    cand
    for cand in peak.candidates
    if (cand.strategy, cand.layout, cand.parallel.tp) == ("ring", "zigzag", 1)
)
per_layer = ring_z["total_time_s"] * model.layers * (1 + cost.BACKWARD_FACTOR)
fastest = peak.candidates[0]
print(f"at the peak:\n  best: {fastest.label}: {fastest.step_time_s:.2f} s")
print(f"  attention of TP1 CP64(ring, zigzag): {peak_ring.attention_s:.2f} s")
layer_ms = ring_z["total_time_s"] * 1e3
print(
    f"  check: {layer_ms:.0f} ms per layer forward x {model.layers} layers "
    f"x (1 + {cost.BACKWARD_FACTOR} backward) = {per_layer:.2f} s"
)
print(f"at cuDNN's rates:\n  best: {top.label}: {top.step_time_s:.2f} s")
print(f"  best ring: {best_ring.label}: {best_ring.step_time_s:.2f} s")

# %% tags=["remove-input"]
Markdown(
    f"At the peak the {peak.candidates[0].strategy} is best, and the next four are within "
    f"{peak.candidates[4].step_time_s / peak.candidates[0].step_time_s - 1:.1%} of it. "
    f"At cuDNN's rates the step takes "
    f"{top.step_time_s / peak.candidates[0].step_time_s:.1f} times as long, and the "
    f"{top.strategy} with $U$ = {top.ulysses_degree} beats the best ring by "
    f"{1 - top.step_time_s / best_ring.step_time_s:.0%}: its ring passes blocks of "
    f"{top.block_tokens:,} tokens against the ring's {best_ring.block_tokens:,}, "
    "so each GPU makes fewer, longer attention calls, which cuDNN runs closer to its "
    "peak (lesson 13 found the same at 128K)."
)

# %% [markdown]
# ### How far to trust it
#
# Lesson 13 set the same step model beside NeMo's published runs. Its longest row is the
# nearest to this one: Llama 2 7B at 1M tokens with context parallelism.

# %%
nemo = [r for r in validate(experiments=["nemo-long"]) if r["config"]["seq_len"] == N]
row = nemo[0]
print(
    f"NeMo, Llama 2 7B fp8, {N // 2**20}M tokens on {row['config']['gpus']:,} GPUs, "
    "model TFLOP/s per GPU:"
)
print(
    f"  published {row['published']:.0f}, predicted {row['predicted']:.0f} "
    f"({row['error']:+.0%})"
)
print(
    f"this step, if it is missed alike: {top.step_time_s * (1 + row['error']):.0f} s "
    f"instead of {top.step_time_s:.0f} s"
)

# %% tags=["remove-input"]
Markdown(
    f"The model predicted that run {row['error']:+.0%} too fast, so read "
    f"{top.step_time_s:.0f} s as an optimistic estimate: if this run is missed the same "
    f"way, a step takes about {top.step_time_s * (1 + row['error']):.0f} s. What is "
    "solid is the structure: the step fits only with full recompute, attention is most "
    "of it, and the transfers hide."
)

# %% [markdown]
# ## Takeaways
#
# - Memory: at $P = 64$ a GPU holds only $c$ tokens of the sequence, yet the activations
#   of every layer still do not fit; recomputing every layer does, and the weights,
#   gradients and logits become the largest parts.
# - Overlap: with GQA and a causal mask the threshold is $2 F H_{kv} / (B H)$; a 16K-token
#   block hides even behind a 50 GB/s NIC.
# - Layout before strategy: contiguous nearly doubles the time; among balanced layouts the
#   strategies tie at the peak, and the kernel's rate on the calls each makes picks the
#   winner.
# - A predicted step is a model: hold it against the nearest published run before you
#   trust its level.
#
# Back to [the start](01_memory_wall.py), or open [the notation page](notation.md).

# %% tags=["remove-input"]
two_m = plan(model, 2 * N, cluster, implementation="cudnn")
double = two_m.candidates[0]
lean_tp1 = min(
    (cand for cand in two_m.dropped if cand.parallel.tp == 1),
    key=lambda x: x.bytes_per_host,
)
a100 = get_cluster("dgx-a100").with_nodes(8)
a100_nic = replace(a100.hardware, link_bandwidth=a100.inter_bandwidth)
a100_threshold = 2 * cost.overlap_threshold(a100_nic, **kw)
zero3 = plan(model, N, cluster, implementation="cudnn", sharding="zero3")
lean_none = min(
    (cand for cand in zero3.dropped if cand.parallel.recompute == "none"),
    key=lambda x: x.bytes_per_host,
)
exercises(
    Exercise(
        f"Double the sequence to $2^{{21}}$ = {2 * N:,} tokens on the same {P} H100s. Does it "
        "fit, and how does the step time change? Predict the factor before you run `plan`.",
        f"It fits, as `{double.label}` ({double.bytes_per_host / GB:.1f} GB per GPU), "
        "but no longer without tensor parallelism: the leanest configuration without it "
        f"needs {lean_tp1.bytes_per_host / GB:.0f} GB, its logits alone "
        f"{lean_tp1.memory['logits'] / GB:.0f} GB, and tensor parallelism splits the "
        "weights, the gradients and the logits. The step takes "
        f"{double.step_time_s:.0f} s, {double.step_time_s / top.step_time_s:.1f}x the 1M "
        "step: attention, most of it, grows with $N^2$ (four times), the rest with $N$.",
    ),
    Exercise(
        "The same run on 8 DGX A100 nodes, whose NICs carry 25 GB/s. Does the cross-node hop "
        "still hide behind a 16K-token causal block?",
        f"$2F/B$ with GQA is {a100_threshold:,.0f} tokens on the A100's NIC against "
        f"$c$ = {c:,}: {'yes' if c >= a100_threshold else 'no'}, "
        f"{'with' if c >= a100_threshold else 'short by'} a factor "
        f"{max(c, a100_threshold) / min(c, a100_threshold):.1f} "
        f"{'to spare' if c >= a100_threshold else ''}. "
        "(`cost.overlap_threshold` on the `dgx-a100` NIC, doubled for the causal mask: "
        "the A100's lower peak rate lowers the threshold more than its slower NIC raises "
        "it.)",
    ),
    Exercise(
        "Shard the weights and gradients too, FSDP's way (`plan(..., sharding='zero3')`). "
        "How much memory does the best step save, and can it now skip recompute?",
        f"The best step needs {zero3.candidates[0].bytes_per_host / GB:.1f} GB instead of "
        f"{top.bytes_per_host / GB:.1f} and takes {zero3.candidates[0].step_time_s:.2f} s "
        f"against {top.step_time_s:.2f}. It still cannot skip recompute: the leanest "
        f"configuration without it, `{lean_none.label}`, needs "
        f"{lean_none.bytes_per_host / GB:.0f} GB. The activations, not the model states, "
        "force the recompute.",
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
