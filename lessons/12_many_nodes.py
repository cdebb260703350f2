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
# # 12. Many nodes: topology and hybrid sequence parallelism
#
# Lessons 4 to 9 ran every host on one link of one speed. Real long-context runs use nodes
# of 8 GPUs: inside a node NVLink (300-450 GB/s each way per GPU), between nodes one
# InfiniBand NIC per GPU (25-50 GB/s), ten times slower. A ring laid over several nodes has
# a few slow hops, and one slow hop paces the whole ring. Two answers from the literature:
# split the heads inside the node with Ulysses and run the ring only across nodes (USP's
# *hybrid*, Fang & Zhao 2024), or give the ring two levels, an inner ring in the node and an
# outer one across (LoongTrain's *double ring*, Gu et al. 2024). One idea runs through the
# lesson: **a ring is as fast as its slowest hop, so put the collectives that cannot hide on
# the fast links**.
#
# **You will be able to**
#
# - say which hops of a ring cross nodes, and why the slowest one paces every step;
# - read an all-to-all as a traffic matrix and find its bottleneck (NVLink port, NIC,
#   PCIe switch);
# - choose a Ulysses degree $U$ and a ring degree $R = P / U$ for a cluster, and say what
#   each costs in time and memory.

# %%
from dataclasses import replace

import matplotlib.pyplot as plt
import numpy as np
from IPython.display import display
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch

import ringsim
from ringsim import CLUSTERS, RingConfig, get_cluster, simulate_strategy
from ringsim.teach import (
    Exercise,
    caption,
    compared,
    exercises,
    notation,
    plain_log_ticks,
    references,
    table,
    use_lesson_style,
)

use_lesson_style()
TERMS = ("NVLink, NVSwitch", "NIC, InfiniBand", "PCIe", "all-to-all", "Ulysses")
TERMS += ("hybrid, double ring", "striped, zigzag, contiguous", "1M, 1K (tokens)")
notation(*("P", "N", "c", "H", "H_{kv}", "F", "B", "U, R"), terms=TERMS)

# %%
display(
    table(
        [
            {
                "preset": c.name,
                "device": c.hardware.name,
                "per node": c.gpus_per_node,
                "inside (GB/s)": f"{c.fabric} {c.intra_bandwidth / 1e9:.4g}",
                "NICs x GB/s": f"{c.nics_per_node} x {c.inter_bandwidth / 1e9:.4g}",
            }
            for c in CLUSTERS.values()
        ],
        {
            k: "{}"
            for k in ("preset", "device", "per node", "inside (GB/s)", "NICs x GB/s")
        },
    )
)

# %% [markdown]
# The cluster presets (`ringsim presets` prints their sources). Bandwidths are per GPU and
# per direction. The PCIe boxes have no NVLink: two GPUs share one PCIe switch and its
# single x16 uplink to the CPU.
#
# ## The ring across a slow hop
#
# Ranks are placed in order, 8 per node, so a ring of 16 ranks on two nodes has two hops
# that leave a node: 7 → 8 and 15 → 0. They run at the NIC's 50 GB/s, the other fourteen at
# NVLink's 450 GB/s.
#
# **A worked example.** 16 H100s on two DGX nodes, 8K tokens per GPU, a model with 32 query
# and 8 key/value heads, causal, zigzag. Lesson 6 says a causal block hides its transfer
# when $c \geq 2F/B$, and lesson 9 that grouped-query attention lowers that by $H/H_{kv}$:
# check both links.

# %%
dgx = get_cluster("dgx-h100")
gqa = dict(heads=32, kv_heads=8, head_dim=128, dtype="bf16", include_latency=False)
c_ring = 8192
for link, bandwidth in (("NVLink", dgx.intra_bandwidth), ("NIC", dgx.inter_bandwidth)):
    hw = dgx.hardware.with_link(bandwidth)
    need = 2 * ringsim.overlap_threshold(hw, **gqa)
    hides = "hides" if c_ring >= need else "does not hide"
    print(
        f"{link:>6}, {bandwidth / 1e9:.0f} GB/s: 2F/B with GQA = {need:,.0f} tokens; "
        f"c = {c_ring:,} {hides}"
    )

# %% [markdown]
# **Predict first.** The flat ring on one NVLink switch hides every transfer. On two nodes,
# only two of its sixteen hops use a NIC. Is it slower by about 2/16 of the transfers, or by
# more?
#
# <details><summary>Answer</summary>
#
# By more, whenever the slow hop cannot hide behind a step's compute. Every block passes
# through *every* hop of the ring, the slow ones included: at every step some host waits for
# a block that just crossed a NIC, and its successors wait for it, so the ring runs at the
# pace of its slowest hop. Here the block is just short of the NIC's threshold (the cell
# above), so the wait is small; on slower NICs it grows. The lines under the figure print by
# how much, at the DGX's own NICs and at slower ones.
#
# </details>

# %%
base = RingConfig(
    hosts=16,
    seq_len=16 * 8192,
    hardware=dgx.hardware,
    heads=32,
    kv_heads=8,
    causal=True,
    layout="zigzag",
)
nics = np.geomspace(5e9, 400e9, 10)
curves = {"ring": [], "double ring": [], "hybrid U8 x R2": []}
for bw in nics:
    cluster = replace(get_cluster("dgx-h100").with_nodes(2), inter_bandwidth=bw)

    def run(strategy, cluster=cluster, **kw):
        return simulate_strategy(base, strategy, cluster=cluster, **kw).summary()

    curves["ring"].append(run("ring")["total_time_s"])
    curves["double ring"].append(run("double-ring")["total_time_s"])
    curves["hybrid U8 x R2"].append(run("hybrid", ulysses_degree=8)["total_time_s"])
one_node = simulate_strategy(base, "ring").summary()["total_time_s"]

fig, ax = plt.subplots(layout="constrained", figsize=(7.5, 3.8))
styles = {  # the double ring sits on the NVLink line once the NIC hides: draw it on top
    "ring": dict(marker="o", zorder=3),
    "double ring": dict(
        marker="s", ms=7, mfc="none", mew=1.6, lw=2.2, ls="--", zorder=5
    ),
    "hybrid U8 x R2": dict(marker="^", zorder=4),
}
for name, values in curves.items():
    ax.loglog(
        nics / 1e9, np.array(values) * 1e3, label=name, **{"ms": 5, **styles[name]}
    )
ax.axhline(one_node * 1e3, color="grey", lw=2.5, alpha=0.5, label="ring, all on NVLink")
ax.axvline(50, color="black", lw=0.8, ls=":")
ax.annotate(" NDR 400 Gb/s", (50, ax.get_ylim()[1]), va="top", fontsize=9)
plain_log_ticks(ax, "x")
ax.set_xlabel("NIC bandwidth per GPU (GB/s)")
ax.set_ylabel("forward attention (ms, log)")
ax.set_title("16 H100s on two nodes: 128K tokens, 32/8 heads, causal zigzag")
ax.legend(fontsize=9, loc="upper right")
plt.show()
dgx_nic = dgx.inter_bandwidth
slowdown = {}
for bw in (dgx_nic, dgx_nic / 4):
    cluster = replace(get_cluster("dgx-h100").with_nodes(2), inter_bandwidth=bw)
    two = simulate_strategy(base, "ring", cluster=cluster).summary()["total_time_s"]
    slowdown[bw] = two / one_node
    print(
        f"NIC {bw / 1e9:4.1f} GB/s: flat ring {two * 1e3:.2f} ms, "
        f"{two / one_node:.2f}x its all-NVLink {one_node * 1e3:.2f} ms"
    )

# %% tags=["remove-input"]


def levels_off(values: list[float]) -> float:
    """The slowest NIC of the sweep from which a strategy is within 1% of its best time."""
    best = min(values)
    return min(bw for bw, t in zip(nics, values, strict=True) if t <= 1.01 * best)


flat_at, double_at = levels_off(curves["ring"]), levels_off(curves["double ring"])
hybrid_at, hybrid_floor = (
    levels_off(curves["hybrid U8 x R2"]),
    min(curves["hybrid U8 x R2"]),
)
caption(
    "Figure 12.1",
    "the flat ring slows as the NIC shrinks, though only 2 of its 16 hops use it: "
    + compared(slowdown[dgx_nic] * one_node, one_node, more="slower", less="faster")
    + " than one NVLink switch on the DGX's NICs, "
    + compared(slowdown[dgx_nic / 4] * one_node, one_node, more="slower", less="faster")
    + " on NICs four times slower. The double ring (inner rings of 8, one outer hop per "
    f"round) reaches the NVLink line (grey band) from {double_at / 1e9:.0f} GB/s on, the flat "
    f"ring only from {flat_at / 1e9:.0f} GB/s. The hybrid (Ulysses over a node's 8 GPUs, a "
    f"ring of 2 across) levels off at {hybrid_floor / one_node:.3f}x the NVLink ring from "
    f"{hybrid_at / 1e9:.0f} GB/s on: its all-to-all is the cost nothing hides.",
)

# %% [markdown]
#
# ## An all-to-all, drawn
#
# Ulysses re-shards with an all-to-all: every rank sends an equal share to every other rank
# of its group. On a switch that is $P - 1$ messages through the rank's own port. On a
# cluster, shares that leave the node go through NICs, and on a PCIe box shares that leave a
# PCIe switch share its uplink. ringsim counts how many shares use each link and times a
# rank by its most loaded one (`Cluster.alltoall_links`).

# %%
cluster = get_cluster("dgx-h100").with_nodes(2)
ranks = 16
share = np.zeros((ranks, ranks))
for src in range(ranks):
    for dst in range(ranks):
        if src != dst:
            crosses = cluster.node(src) != cluster.node(dst)
            share[src, dst] = (
                cluster.inter_bandwidth if crosses else cluster.intra_bandwidth
            )
placements = {
    "8 GPUs of one node": (dgx.with_nodes(1), [list(range(8))], 8),
    "1 GPU on each of 8 nodes": (dgx.with_nodes(8), [list(range(0, 64, 8))], 64),
    "16 GPUs on 2 nodes": (dgx.with_nodes(2), [list(range(16))], 16),
    "8 GPUs of the PCIe box": (get_cluster("pcie-8x-l20"), [list(range(8))], 8),
}
effective = {
    name: float(c.alltoall_links(groups, hosts)[0][groups[0][0]]) / 1e9
    for name, (c, groups, hosts) in placements.items()
}

fig, (left, right) = plt.subplots(1, 2, layout="constrained", figsize=(9, 3.8))
kinds = np.where(share == 0, 0, np.where(share == cluster.intra_bandwidth, 1, 2))
colours = ["white", "#56B4E9", "#D55E00"]
left.imshow(kinds, cmap=ListedColormap(colours), vmin=-0.5, vmax=2.5)
left.set_title("all-to-all over 16 ranks on 2 nodes")
left.set_xlabel("receiving rank")
left.set_ylabel("sending rank")
left.grid(False)
nv_gbs, nic_gbs = cluster.intra_bandwidth / 1e9, cluster.inter_bandwidth / 1e9
links = [
    Patch(color=colours[1], label=f"NVLink, {nv_gbs:.0f} GB/s"),
    Patch(color=colours[2], label=f"NIC, {nic_gbs:.0f} GB/s"),
]
left.legend(handles=links, loc="upper center", bbox_to_anchor=(0.5, -0.2), fontsize=9)
right.barh(list(effective), list(effective.values()), color="#0072B2")
right.set_xlabel("all-to-all GB/s per GPU")
right.set_title("where the group sits")
plt.show()

# %% tags=["remove-input"]
box = get_cluster("pcie-8x-l20")
peers = range(1, 8)
leave = sum(any(e[0] == "up-out" for e in box.edges(0, d)) for d in peers)
cross = sum(cluster.node(0) != cluster.node(d) for d in range(1, ranks))
caption(
    "Figure 12.2",
    "left, the two blue 8 x 8 blocks are the pairs inside a node (NVLink), the orange ones "
    f"the pairs that cross (NIC): {cross} of every rank's {ranks - 1} shares cross. Right, "
    "the all-to-all is fast only when its group sits in one NVLink node; spread over nodes "
    "it runs at about the NIC's speed, and on the PCIe box slower still: "
    f"{leave} of each GPU's {len(peers)} shares leave its PCIe switch, and the switch's two "
    "GPUs push them through one shared x16 uplink.",
)

# %% [markdown]
#
# ## Ulysses times ring: choosing $U$
#
# With $P = U \times R$ hosts, the Ulysses groups re-shard heads ($U \leq$ the key/value
# heads in this model), and $U$ rings of $R$ hosts each run on $H/U$ heads, with blocks of
# $N/R$ tokens. Larger $U$ means fewer, larger ring blocks (easier to hide) but bigger
# all-to-alls that nothing overlaps; and any $U > 1$ costs memory for the all-to-all's
# buffers (the table below says how much).
#
# **Predict first.** 32 H100s in 4 nodes, 256K tokens, 8 key/value heads, forward. Which
# $U$ and which placement (Ulysses groups inside a node, or across nodes) is fastest?
#
# <details><summary>Answer</summary>
#
# Ulysses groups belong inside the node: their all-to-all then runs on NVLink and only the
# ring crosses nodes, with blocks $U$ times larger. Placed across nodes, the all-to-all runs
# on the NICs and exposes its whole duration. Among inside placements the differences are a
# few percent (here $U = 2$ is best): the run is compute-bound once the cross-node traffic
# hides, and what is left is the all-to-all, which grows with $U$.
#
# </details>

# %%
config = RingConfig(
    hosts=32,
    seq_len=32 * 8192,
    hardware=dgx.hardware,
    heads=32,
    kv_heads=8,
    causal=True,
    layout="zigzag",
)
four = dgx.with_nodes(4)
rows = []
for u in (1, 2, 4, 8):
    for placement in ("ulysses-inner", "ring-inner") if u > 1 else ("ulysses-inner",):
        s = simulate_strategy(
            config, "hybrid", ulysses_degree=u, cluster=four, placement=placement
        ).summary()
        rows.append(
            {
                "U x R": f"{u} x {32 // u}",
                "placement": placement if u > 1 else "-",
                "time (ms)": s["total_time_s"] * 1e3,
                "compute (ms)": s["compute_time_s"] * 1e3,
                "exposed (ms)": s["exposed_comm_s"] * 1e3,
                "memory (MB)": s["memory_per_host_bytes"] / 1e6,
            }
        )
formats = {"U x R": "{}", "placement": "{}"} | {
    k: "{:.2f}" for k in ("time (ms)", "compute (ms)", "exposed (ms)")
}
display(table(rows, formats | {"memory (MB)": "{:.0f}"}))

labels = [f"{r['U x R']}\n{r['placement'][:7]}" for r in rows]
fig, ax = plt.subplots(layout="constrained", figsize=(8, 3.6))
compute = [r["compute (ms)"] for r in rows]
exposed = [r["exposed (ms)"] for r in rows]
ax.bar(labels, compute, color="#0072B2", label="compute (busiest host)")
ax.bar(labels, exposed, bottom=compute, color="#E69F00", label="exposed communication")
ax.set_ylabel("forward attention (ms)")
ax.set_title("32 H100s, 4 nodes, 256K tokens: U x R and placement")
ax.set_ylim(0, max(r["time (ms)"] for r in rows) * 1.3)
ax.legend(fontsize=9, loc="upper center", ncol=2)
plt.show()

# %% tags=["remove-input"]
memory = sorted({round(r["memory (MB)"]) for r in rows if r["U x R"] != "1 x 32"})
same = len(memory) == 1
caption(
    "Figure 12.3",
    "every bar has the same compute (the same attention, split differently); what differs "
    "is the communication left exposed. The pure ring ($U = 1$) pays for its NIC hops at "
    "every step; Ulysses groups inside the nodes hide almost all of it, groups across nodes "
    '("ring-in") give most of the gain back: their all-to-alls run on the NICs. Memory: '
    f"{rows[0]['memory (MB)']:.0f} MB for the ring, "
    + (
        f"{memory[0]} MB for every $U > 1$"
        if same
        else f"{memory[0]}-{memory[-1]} MB for $U > 1$"
    )
    + " (the host keeps its own q, k, v shard beside the all-to-all's).",
)

# %% [markdown]
#
# ## Takeaways
#
# - Ranks are placed in order; a ring over nodes has slow hops, and the slowest paces it.
# - A collective is as fast as its most loaded link: NVLink port, NIC, or PCIe uplink.
# - Put the all-to-all (Ulysses) inside the node and the ring across nodes, or give the ring
#   two levels (double ring) so every NIC works at once and has a round to hide in.
# - $U$ is capped by the key/value heads in this model (real code can repeat them); any
#   $U > 1$ costs the all-to-all's buffers, here the same for every $U$.
#
# Next: [planning a whole training step](13_planning.py), where the attention layer is one
# part of a step among GEMMs, recompute and collectives.

# %% tags=["remove-input"]
inside = [r for r in rows if r["placement"] in ("ulysses-inner", "-")]
best = min(inside, key=lambda r: r["time (ms)"])
ring_row = rows[0]
box = get_cluster("pcie-8x-l20")
bw_box = box.alltoall_links([list(range(8))], 8)[0][0]
exercises(
    Exercise(
        "In Figure 12.3, how much of the pure ring's forward is exposed communication, and "
        "how much does the best inside placement leave?",
        f"The ring exposes {ring_row['exposed (ms)']:.2f} ms of "
        f"{ring_row['time (ms)']:.2f} ms; {best['U x R']} inside the nodes exposes "
        f"{best['exposed (ms)']:.2f} ms of {best['time (ms)']:.2f} ms, at "
        f"{best['memory (MB)'] / ring_row['memory (MB)']:.1f}x the ring's memory.",
    ),
    Exercise(
        "On the 8-GPU PCIe box (4 switches of 2 GPUs, one x16 uplink each), what is the "
        "effective all-to-all bandwidth of 8 ranks? Derive it by hand.",
        "Each GPU sends 7 equal shares; 6 leave its switch. The uplink carries the 6 of "
        "both its GPUs, 12 shares, at 31.5 GB/s, while a GPU's own x16 carries 7. "
        f"So a rank needs 12 / 31.5 GB/s per share: 7 shares at {bw_box / 1e9:.1f} GB/s "
        "effective (`Cluster.alltoall_links`), well below the 31.5 of one link.",
    ),
    Exercise(
        "A ring of 64 GPUs over 8 DGX H100 nodes: how many hops cross nodes, and at what "
        "bandwidth do they run compared with the others?",
        "8 hops (7 -> 8, 15 -> 16, ..., 63 -> 0), each on one 50 GB/s NIC, against "
        "450 GB/s NVLink for the other 56. Every block crosses all of them, so the ring "
        "runs at the NIC's pace once a block's compute no longer hides 50 GB/s.",
    ),
)

# %% tags=["remove-input"]
references(
    "usp",
    "loongtrain",
    "ulysses",
    "ml_engineering",
    "fire_flyer",
    notes={
        "usp": "Ulysses x ring on a 2D mesh: all-to-all on fast links, ring P2P on slow ones.",
        "loongtrain": "2D attention and the double ring.",
        "ulysses": "The all-to-all re-sharding by heads.",
        "ml_engineering": "NVLink, PCIe and InfiniBand rates, measured and specified.",
        "fire_flyer": "A PCIe A100 cluster, its topology and measured PCIe limits.",
    },
)
