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
# # 14. Capstone: plan a million tokens of Llama 3 8B on 64 H100s
#
# This lesson is yours to drive. The job: train **Llama 3 8B on one sequence of 1M ($2^{20}$)
# tokens per step on 64 H100s** (8 DGX nodes). You choose four things, and a checker sets
# your choice beside the planner's best and says where the difference is:
#
# - the **layout** of the tokens: contiguous, striped or zigzag (lesson 6);
# - the **Ulysses degree** $U$: how many GPUs of the context-parallel group split the heads
#   with an all-to-all, the rest forming the ring ($R = P/U$, lesson 12);
# - the **tensor-parallel degree**: how many GPUs split each layer's matrices (lesson 13);
# - **recompute**: none, selective, or full (the forward keeps only each layer's input and
#   the backward recomputes the rest, lesson 7).
#
# **You will be able to**
#
# - decide, with the library, whether a long-context step fits and what recompute buys;
# - decide whether the ring's transfers hide across a node's NVLink and across its NICs;
# - choose a layout, a Ulysses degree and a tensor-parallel degree, and explain the gap between
#   your choice and the planner's best part by part.

# %%
import matplotlib.pyplot as plt
from IPython.display import display

import ringsim
from ringsim import RingConfig, get_cluster, get_model, plan, simulate_strategy
from ringsim.teach import (
    BACKWARD_FACTOR,
    Choice,
    Exercise,
    Markdown,
    caption,
    check_choice,
    compared,
    exercises,
    notation,
    plot_breakdown,
    references,
    table,
    use_lesson_style,
)

use_lesson_style()
GB = 1e9
TERMS = (
    "1M, 1K (tokens)",
    "GQA, MHA",
    "checkpointing",
    "DP, TP, PP",
    "NVLink, NVSwitch",
)
TERMS += ("context parallelism (CP)", "NIC, InfiniBand", "striped, zigzag, contiguous")
TERMS += ("hybrid, double ring", "all-gather", "all-to-all", "Ulysses")
TERMS += ("FLOP, GFLOP, TFLOP",)
notation(*("P", "N", "c", "H", "H_{kv}", "F", "B", "U, R"), terms=TERMS)

# %% [markdown]
# ## The job

# %%
model = get_model("llama3-8b")
cluster = get_cluster("dgx-h100").with_nodes(8)
P, N = cluster.nodes * cluster.gpus_per_node, 2**20
c = N // P
print(f"{model.name}: {model.layers} layers, {model.heads} query heads sharing")
print(
    f"  {model.n_kv_heads} key/value heads of {model.head_dim}, vocab {model.vocab:,}"
)
print(cluster.describe())
print(f"P = {P} GPUs, N = {N:,} tokens: c = N/P = {c:,} tokens per GPU")
step = plan(model, N, cluster, implementation="cudnn")  # every configuration, timed
print(f"the planner sized {len(step.candidates) + len(step.dropped)} configurations")
kernels = cluster.hardware.arch.attention_kernels
print(
    f"attention at {step.implementation}'s rates; without implementation= the planner\n"
    f"  takes {kernels[0]}, the first of the families frameworks run on "
    f"{cluster.hardware.arch.name} ({', '.join(kernels)})"
)

# %% [markdown]
# ## Your choice
#
# Edit the four fields and run the cell: `check_choice` finds your configuration among
# everything the planner sized, says whether it fits, how it ranks, and where its time goes
# against the best. The values below are a first guess with nothing thought through; the
# four questions after it help you do better, and the end of the lesson checks your choice
# again.

# %%
my_choice = Choice(layout="contiguous", ulysses=1, tp=1, recompute="none")
check_choice(step, my_choice)

# %% [markdown]
# ## 1. Does it fit? (lessons 7 and 13)
#
# The planner counts a step's memory part by part (weights, gradients, optimizer state,
# activations, logits, the working set of the layer running) and holds it against what
# PyTorch leaves of the device. Here: the plain ring over all 64 GPUs, zigzag, no tensor
# parallelism, under each recompute choice.
#
# **Predict first.** Lesson 7's 7B model needed 8 A100s for a 1M-token step with every layer
# checkpointed. On 64 H100s, does the step fit *without* recomputing anything?
#
# <details><summary>Answer</summary>
#
# No. Without recompute, a layer's backward reads the activations its forward stored, for
# every token of the GPU's block and every layer: that part alone is more than PyTorch leaves
# of the device. Full recompute (the forward keeps only each layer's input) shrinks it to a
# small part and the step fits. The table says what selective recompute does.
#
# </details>

# %%
ring = {
    cand.parallel.recompute: cand
    for cand in step.candidates + step.dropped
    if cand.strategy == "ring" and cand.layout == "zigzag" and cand.parallel.tp == 1
}
choices = ("none", "selective", "full")
parts = [k for k in ring["none"].memory if any(ring[r].memory[k] for r in choices)]
rows = [{"part": k, **{r: ring[r].memory[k] / GB for r in choices}} for k in parts]
rows.append({"part": "total", **{r: ring[r].bytes_per_host / GB for r in choices}})
usable = ring["full"].usable_bytes
print(f"ring over {P} GPUs (TP1, CP{P}, zigzag), GB per GPU by recompute choice:")
display(table(rows, {"part": "{}"} | {r: "{:.2f}" for r in choices}))
fits = [r for r in choices if ring[r].fits]
device = cluster.hardware.memory_bytes
print(f"usable: {usable / GB:.1f} GB of {device / GB:.0f}; fits: {', '.join(fits)}")

# %%
fig, ax = plt.subplots(figsize=(8, 3.9), layout="constrained")
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
plt.show()

# %% tags=["remove-input"]
none, full = ring["none"], ring["full"]
caption(
    "Figure 14.1",
    f"without recompute the step needs {none.bytes_per_host / GB:.0f} GB per GPU, "
    f"{none.memory['activations'] / GB:.0f} GB of it activations, against the "
    f"{usable / GB:.0f} GB usable (dashed). Full recompute keeps "
    f"{full.memory['activations'] / GB:.1f} GB of activations and the step fits in "
    f"{full.bytes_per_host / GB:.0f} GB; the weights, the gradients and the logits are then "
    "the largest parts.",
)

# %% [markdown]
# ## 2. Do the transfers hide? (lessons 5, 6 and 9)
#
# A ring step moves $K$ and $V$ of the $H_{kv}$ key/value heads while it computes all $H$
# query heads, so grouped-query attention divides the threshold by $H/H_{kv}$; the mask is
# causal, so a balanced layout needs $2F/B$ (lesson 6). Inside a node the link is NVLink;
# a ring of 64 also crosses nodes, one NIC per GPU.
#
# **Predict first.** Does a block of $c$ = 16K tokens hide its transfer across the NIC?
#
# <details><summary>Answer</summary>
#
# Work it out: $F/B$ for the H100 and a 50 GB/s NIC is about 20K tokens, a quarter of that
# with 32 query heads sharing 8 key/value heads, twice that for the causal mask:
# so about 10K tokens, below $c$. The cell computes it for both links.
#
# </details>

# %%
kw = dict(heads=model.heads, kv_heads=model.n_kv_heads, head_dim=model.head_dim)
kw |= dict(dtype="bf16", include_latency=False)
rows = []
for name, bandwidth in (
    ("NVLink", cluster.intra_bandwidth),
    ("NIC", cluster.inter_bandwidth),
):
    threshold = ringsim.overlap_threshold(cluster.hardware.with_link(bandwidth), **kw)
    rows.append(
        {"link": name, "GB/s": bandwidth / 1e9, "F/B (GQA)": threshold}
        | {"2F/B causal": 2 * threshold, "c / (2F/B)": c / (2 * threshold)}
    )
fmt = {"link": "{}", "GB/s": "{:.0f}", "F/B (GQA)": "{:,.0f}", "2F/B causal": "{:,.0f}"}
display(table(rows, fmt | {"c / (2F/B)": "{:.1f}"}))
nic = rows[-1]

# %% [markdown]
# ## 3. Which layout? (lessons 6, 9 and 12)
#
# One attention layer, forward, simulated on the cluster at the H100's peak rate (the
# ideal model of lessons 5 to 9): the ring in each layout, then the two-level strategies
# and all-gather with the zigzag layout.
#
# **Predict first.** How much longer does the contiguous ring take than the zigzag one?
#
# <details><summary>Answer</summary>
#
# Lesson 6's closed form: a contiguous causal ring of $P$ hosts idles $(P-1)/(2P-1)$ of its
# compute slots, nearly half at $P = 64$, so it takes nearly twice as long as a balanced
# ring. The cell prints both.
#
# </details>

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
runs = {
    f"ring, {layout}": simulate_strategy(
        base.replace(layout=layout), "ring", cluster=cluster
    )
    for layout in ringsim.layout_names()
}
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
        "waiting": (s["total_time_s"] - s["compute_time_s"]) * 1e3,
        "idle": s["idle_fraction"],
    }
    for name, s in summary.items()
]
formats = {"candidate": "{}", "ms": "{:.1f}", "compute": "{:.1f}", "waiting": "{:.2f}"}
display(table(rows, formats | {"idle": "{:.0%}"}))

# %%
fig, ax = plt.subplots(figsize=(8, 3.9), layout="constrained")
names = [n.replace(", ", "\n") for n in summary]
busy = [s["compute_time_s"] * 1e3 for s in summary.values()]
rest = [(s["total_time_s"] - s["compute_time_s"]) * 1e3 for s in summary.values()]
ax.barh(names, busy, color="#0072B2", label="compute of the busiest GPU")
ax.barh(
    names, rest, left=busy, color="#E69F00", label="the rest of the layer (waiting)"
)
for i, s in enumerate(summary.values()):
    ax.text(
        s["total_time_s"] * 1e3,
        i,
        f" idle {s['idle_fraction']:.0%}",
        va="center",
        fontsize=9,
    )
ax.invert_yaxis()
ax.set_xlim(0, max(s["total_time_s"] for s in summary.values()) * 1e3 * 1.2)
ax.set_xlabel("one attention layer, forward (ms)")
ax.set_title("layouts and strategies at 1M tokens, 64 H100s", fontsize=11)
ax.tick_params(axis="y", labelsize=9)
ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, fontsize=9)
plt.show()

# %% tags=["remove-input"]
ring_z, ring_c = summary["ring, zigzag"], summary["ring, contiguous"]
balanced = [s for name, s in summary.items() if "contiguous" not in name]
caption(
    "Figure 14.2",
    "each bar is one layer's time: the busiest GPU's compute (blue) and the rest of the "
    "layer (orange), with the share of all GPUs' compute slots left idle written beside "
    f"it. The contiguous ring takes {ring_c['total_time_s'] * 1e3:.0f} ms, "
    + compared(
        ring_c["total_time_s"], ring_z["total_time_s"], more="longer", less="shorter"
    )
    + " than the zigzag ring: its busiest GPU computes "
    f"{ring_c['compute_time_s'] * 1e3:.0f} ms, "
    + compared(ring_c["compute_time_s"], ring_z["compute_time_s"])
    + f" than a zigzag GPU, while the others wait for it ({ring_c['idle_fraction']:.0%} of "
    "the slots idle). The balanced "
    f"candidates idle at most {max(s['idle_fraction'] for s in balanced):.0%}.",
)

# %% [markdown]
# ## 4. Which $U$ and which tensor parallelism? (lessons 12 and 13)
#
# At the peak rate the balanced candidates tie. At cuDNN's rates they do not: a kernel
# runs a long call closer to its peak than a short one, and the ring's calls are as long as
# its key/value block, $N/R$ tokens. Tensor parallelism splits the heads instead, shrinking
# the weights and the logits, and adds collectives of its own.
#
# **Predict first.** Which gives longer attention calls: $U = 8$ (a ring of 8) or $U = 1$ (a
# ring of 64)? What does a tensor-parallel degree of 2 do to the calls?
#
# <details><summary>Answer</summary>
#
# $U = 8$: its ring passes blocks of $N/8$ tokens against $N/64$, each GPU makes fewer, longer
# calls. Tensor parallelism halves the heads a GPU computes and halves the context-parallel
# group for the same 64 GPUs, so the ring's blocks grow again: the planner weighs that
# against the collectives it adds. The cell shows the best of a few kinds, part by part.
#
# </details>

# %%
top = step.candidates[0]
best_ring = min(
    (x for x in step.candidates if x.strategy == "ring"), key=lambda x: x.step_time_s
)
tp2 = min(
    (x for x in step.candidates if x.parallel.tp == 2), key=lambda x: x.step_time_s
)
display(
    table(
        [
            {
                "s/step": x.step_time_s,
                "GB": x.bytes_per_host / GB,
                "block": x.block_tokens,
            }
            | {"configuration": x.label}
            for x in (top, tp2, best_ring)
        ],
        {"s/step": "{:.2f}", "GB": "{:.1f}", "block": "{:,}", "configuration": "{}"},
    )
)
plot_breakdown(
    step, candidates=[top, tp2, best_ring], title="where a 1M-token step goes"
)
plt.show()

# %% tags=["remove-input"]
caption(
    "Figure 14.3",
    f"attention is {top.attention_s / top.step_time_s:.0%} of the best step and recompute, "
    f"a second forward of every layer, {top.breakdown['recompute_s'] / top.step_time_s:.0%}. "
    f"The best plain ring takes {best_ring.step_time_s:.2f} s, "
    + compared(best_ring.step_time_s, top.step_time_s, more="longer", less="shorter")
    + f" than the best: its blocks of {best_ring.block_tokens:,} tokens against "
    f"{top.block_tokens:,} make shorter attention calls.",
)

# %% [markdown]
# ## Your choice, checked again
#
# Put what the four questions told you into `my_choice` above and run it again, or edit the
# cell below. Open the planner's answer only after you have tried.

# %%
second_choice = Choice(layout="zigzag", ulysses=1, tp=1, recompute="full")
check_choice(step, second_choice)

# %% [markdown]
# <details><summary>The planner's answer</summary>
#
# The cell below asks the checker about the planner's own best; its verdict names the
# configuration and its step time. Any choice whose verdict says "about the same" is as good
# an answer: the model cannot tell them apart.
#
# </details>

# %% tags=["hide-input"]
answer = Choice(
    layout=top.layout,
    ulysses=top.ulysses_degree,
    tp=top.parallel.tp,
    recompute=top.parallel.recompute,
)
check_choice(step, answer)

# %% [markdown]
# ### How far to trust it
#
# Lesson 13 set the same step model beside NeMo's published runs; its longest row is the
# nearest to this one: Llama 2 7B at 1M tokens with context parallelism.

# %%
nemo = [
    r
    for r in ringsim.validate(experiments=["nemo-long"])
    if r["config"]["seq_len"] == N
]
row = nemo[0]
print(f"NeMo, Llama 2 7B fp8, {N // 2**20}M tokens on {row['config']['gpus']:,} GPUs,")
print(
    f"model TFLOP/s per GPU: published {row['published']:.0f}, predicted "
    f"{row['predicted']:.0f} ({row['error']:+.0%})"
)
print(
    f"this step, if it is missed alike: {top.step_time_s * (1 + row['error']):.0f} s "
    f"instead of {top.step_time_s:.0f} s"
)

# %% tags=["remove-input"]
Markdown(
    f"The model predicted that run {row['error']:+.0%} too fast, so read "
    f"{top.step_time_s:.0f} s as an optimistic estimate: missed the same way, a step takes "
    f"about {top.step_time_s * (1 + row['error']):.0f} s. What is solid is the structure: the "
    "step fits only with full recompute, attention is most of it, and the transfers hide."
)

# %% [markdown]
# ## Takeaways
#
# - Memory first: at $P = 64$ a GPU holds only $c$ tokens, yet every layer's activations do
#   not fit; full recompute does.
# - Overlap: with GQA and a causal mask the threshold is $2 F H_{kv} / (B H)$; a 16K-token
#   block hides even behind a 50 GB/s NIC.
# - Layout before strategy: contiguous wastes nearly half the slots; among balanced layouts
#   the kernel's rate on the calls each makes picks the winner.
# - A predicted step is a model: hold it against the nearest published run before you trust
#   its level.
#
# Next: [from the simulator to real code](15_from_simulator_to_real_code.py), where each line
# of the schedule lives in the libraries people train with.

# %% tags=["remove-input"]
two_m = plan(model, 2 * N, cluster, implementation="cudnn")
double = two_m.candidates[0]
a100 = get_cluster("dgx-a100").with_nodes(8)
a100_threshold = 2 * ringsim.overlap_threshold(
    a100.hardware.with_link(a100.inter_bandwidth), **kw
)
zero3 = plan(model, N, cluster, implementation="cudnn", sharding="zero3")
peak = plan(model, N, cluster, implementation="ideal")
peak_ring = next(
    x
    for x in peak.candidates
    if (x.strategy, x.layout, x.parallel.tp) == ("ring", "zigzag", 1)
)
lean_none = min(
    (x for x in zero3.dropped if x.parallel.recompute == "none"),
    key=lambda x: x.bytes_per_host,
)
per_layer = ring_z["total_time_s"] * model.layers * (1 + BACKWARD_FACTOR)
exercises(
    Exercise(
        f"Double the sequence to $2^{{21}}$ = {2 * N:,} tokens on the same {P} H100s. "
        "Predict the factor on the step time before you run `plan`.",
        f"It fits, as `{double.label}` ({double.bytes_per_host / GB:.1f} GB per GPU), and "
        f"takes {double.step_time_s:.0f} s, {double.step_time_s / top.step_time_s:.1f}x the "
        "1M step: attention, most of the step, grows with $N^2$ (four times), the rest with "
        "$N$ (twice).",
    ),
    Exercise(
        "The same run on 8 DGX A100 nodes, whose NICs carry 25 GB/s. Does the cross-node hop "
        "still hide behind a 16K-token causal block?",
        f"$2F/B$ with GQA is {a100_threshold:,.0f} tokens on the A100's NIC against $c$ = "
        f"{c:,}: {'yes' if c >= a100_threshold else 'no'}. On the H100's NIC it is "
        f"{nic['2F/B causal']:,.0f}: the A100's peak rate is lower by "
        f"{cluster.hardware.flops_for('bf16') / a100.hardware.flops_for('bf16'):.1f}x and its "
        f"NIC slower by {cluster.inter_bandwidth / a100.inter_bandwidth:.1f}x, and $F/B$ "
        "moves with their ratio.",
    ),
    Exercise(
        "Shard the weights and gradients too, FSDP's way (`plan(..., sharding='zero3')`). "
        "How much memory does the best step save, and can it now skip recompute?",
        f"The best step needs {zero3.candidates[0].bytes_per_host / GB:.1f} GB instead of "
        f"{top.bytes_per_host / GB:.1f}. It still cannot skip recompute: the leanest "
        f"configuration without it, `{lean_none.label}`, needs "
        f"{lean_none.bytes_per_host / GB:.0f} GB. The activations, not the model states, "
        "force the recompute.",
    ),
    Exercise(
        "Check section 3's layer time against the planner at the peak rate "
        "(`implementation='ideal'`): multiply the zigzag ring's forward layer time by the "
        f"layers and by $1 + {BACKWARD_FACTOR}$ for the backward, and set it beside the "
        "attention of the planner's plain zigzag ring.",
        f"{ring_z['total_time_s'] * 1e3:.0f} ms x {model.layers} x "
        f"{1 + BACKWARD_FACTOR} = {per_layer:.2f} s of attention per step at the peak rate. "
        f"The planner at the peak rate gives `{peak_ring.label}` "
        f"{peak_ring.attention_s:.2f} s of attention, "
        + compared(peak_ring.attention_s, per_layer, more="more", less="less")
        + f". Its best at cuDNN's rates spends {top.attention_s:.2f} s on attention, "
        + compared(top.attention_s, per_layer, more="more", less="less")
        + ": a real kernel runs below the peak.",
    ),
)

# %% tags=["remove-input"]
references(
    "llama3",
    "ring",
    "striped",
    "usp",
    notes={
        "llama3": "The model's shape (Table 3) and context parallelism with zigzag chunks.",
        "ring": "The ring and its overlap condition.",
        "usp": "Ulysses inside the node, the ring across: the hybrid the planner picks.",
    },
)
