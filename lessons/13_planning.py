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
# # 13. Planning a long-context run
#
# "Which layout, which degrees, for my model, my length and my cluster?" Lesson 12 gave the
# pieces: where hops cross nodes, what an all-to-all costs, the $U \times R$ trade. The
# planner (`ringsim plan`, `ringsim.timer.studies.planner.plan`) puts them together: it enumerates
# every strategy (ring, Ulysses, hybrid, double ring, all-gather), every Ulysses degree the
# key/value heads allow, both placements and every layout; drops what does not fit in
# memory; and ranks the rest by the timer's predicted time per training step.
#
# **You will be able to**
#
# - run the planner on a cluster and read its answer: the ranking and *why* (compute,
#   exposed communication, idle, memory headroom);
# - say what changes the answer: the interconnect, the sequence length, the heads;
# - judge how far to trust it, by setting its ranking beside published measurements.

# %%
import matplotlib.pyplot as plt
import numpy as np

from ringsim.timer import RingConfig
from ringsim.timer.machine.topology import get_cluster
from ringsim.timer.step.models import ModelSpec, get_model
from ringsim.timer.strategies import simulate_strategy
from ringsim.timer.studies.planner import plan
from ringsim.views.lessons_support import (
    Exercise,
    Markdown,
    exercises,
    table,
    use_lesson_style,
)
from ringsim.views.planning import plot_plan

use_lesson_style()
try:
    llama3_8b = get_model("llama3-8b")
except ValueError:  # Llama 3 8B's shape (arXiv 2407.21783, Table 3)
    llama3_8b = ModelSpec("llama3-8b", 32, 4096, 32, 14336, vocab=128256, kv_heads=8)


def top(result, n=5):
    rows = [
        {
            "#": i + 1,
            "candidate": c.label,
            "s/step": c.step_time_s,
            "exposed": c.exposed_comm_s / c.step_time_s,
            "GB": c.bytes_per_host / 1e9,
        }
        for i, c in enumerate(result.candidates[:n])
    ]
    formats = {"#": "{}", "candidate": "{}", "s/step": "{:.2f}", "exposed": "{:.1%}"}
    return table(rows, formats | {"GB": "{:.1f}"})


# %% [markdown]
# ## A million tokens on 64 H100s
#
# **Predict first.** Llama 3 8B (32 query heads, 8 key/value heads), one 1M-token sequence,
# 8 DGX H100 nodes. The block per GPU is 16K tokens, far above the ring's overlap threshold
# on NVLink (about 1K tokens) and above it even on a 50 GB/s NIC (about 9K). Does the
# planner prefer the ring, Ulysses x ring, or all-gather?
#
# <details><summary>Answer</summary>
#
# With 16K-token blocks every ring hop hides, even the NIC ones, so the ring, the hybrids and
# the double ring all sit within about 1% of one another at pure compute time. All-gather
# is slower: it can overlap the gather only with the host's own block, and its memory grows
# with the whole sequence. Pure Ulysses is not a candidate: 64 GPUs > 8 key/value heads.
#
# </details>

# %%
h100 = get_cluster("dgx-h100").with_nodes(8)
million = plan(llama3_8b, 2**20, h100)
print(f"{len(million.candidates)} candidates timed in {million.seconds:.1f} s")
print(top(million))
print("why the first:")
for part in million.candidates[0].why().split("; "):
    print("  ", part)
plot_plan(million)
plt.show()

# %% [markdown]
# *Figure 13.1. What to notice:* the candidates form two clouds. The fast one, at pure
# compute time, holds the ring, the hybrids and the double rings in the balanced layouts
# (zigzag, striped); the slow one, about 1.8 times slower, holds the `contiguous` layouts,
# whose causal mask leaves half the hosts idle (lesson 6). All-gather (triangles pointing
# down) spreads to the right: its memory grows with the sequence, and with $U = 1$ it holds
# every key and value of all 1M tokens.
#
# ## A PCIe box, inference prefill
#
# Eight L20 GPUs on PCIe (no NVLink; two GPUs per PCIe switch, one x16 uplink each), a 128K
# prompt for the same model, one forward (`mode="prefill"`, `ringsim plan --prefill`).
#
# **Predict first.** Does the ring still win, or Ulysses, whose all-to-all lesson 12 showed
# is slowest on exactly this box?
#
# <details><summary>Answer</summary>
#
# The ring: at 16K tokens per GPU its blocks hide even behind PCIe, while the all-to-all of
# Ulysses or a hybrid is never overlapped, and on this box it runs at about 18 GB/s. The
# published YunChang measurements on an 8 x L20 box found $U = 2$ best and pure Ulysses worst
# (below): the planner gets the worst right, not the best.
#
# </details>

# %%
l20 = get_cluster("pcie-8x-l20")
prefill = plan(llama3_8b, 128 * 1024, l20, hosts=8, mode="prefill")
print(top(prefill))
plot_plan(prefill)
plt.show()

# %% [markdown]
# *Figure 13.2. What to notice:* on PCIe the balanced candidates spread out more than on
# NVLink: every candidate that needs an all-to-all pays for it in full, the more so the
# larger $U$ and when the groups straddle PCIe switches, and pure Ulysses ($U = 8$) is the
# slowest of them (only the `contiguous` layouts, which idle half the hosts, are slower).
# Memory hardly differs: the weights and the key/value cache dominate a prefill.
#
# ## How far to trust it: published rankings
#
# YunChang, the library behind USP, published the attention forward (causal) at every
# Ulysses degree on an 8 x A100 NVLink node and an 8 x L20 PCIe box. Their iterations per
# second, and ours for the same shapes (best layout per degree), side by side; nothing was
# tuned to them.

# %%
PUBLISHED = [  # (machine, preset, batch, seq, heads, kv, d, {U: it/s}); YunChang README
    (
        "A100 32K",
        "dgx-a100",
        2,
        32768,
        32,
        32,
        32,
        {8: 91.4, 4: 89.3, 2: 78.7, 1: 59.8},
    ),
    (
        "A100 128K",
        "dgx-a100",
        2,
        131072,
        8,
        8,
        128,
        {8: 21.0, 4: 21.9, 2: 21.4, 1: 18.2},
    ),
    (
        "L20 32K",
        "pcie-8x-l20",
        1,
        32768,
        32,
        8,
        128,
        {8: 14.26, 4: 32.82, 2: 62.75, 1: 58.38},
    ),
    (
        "L20 128K",
        "pcie-8x-l20",
        1,
        131072,
        32,
        8,
        128,
        {8: 2.59, 4: 4.24, 2: 5.48, 1: 5.19},
    ),
]


def predicted(preset, b, n, h, kv, d, u):
    cluster = get_cluster(preset).with_nodes(1)
    cfg = RingConfig(
        hosts=8,
        seq_len=n,
        hardware=cluster.hardware,
        heads=h,
        kv_heads=kv,
        head_dim=d,
        batch=b,
        causal=True,
        layout="zigzag",
    )
    name = {1: "ring", 8: "ulysses"}.get(u, "hybrid")
    degree = None if u in (1, 8) else u
    s = simulate_strategy(cfg, name, ulysses_degree=degree, cluster=cluster)
    return 1.0 / s.summary()["total_time_s"]


fig, axes = plt.subplots(1, 4, layout="constrained", figsize=(10, 3.2), sharey=True)
rows = []
for ax, (name, preset, b, n, h, kv, d, published) in zip(axes, PUBLISHED, strict=True):
    degrees = sorted(published)
    ours = {u: predicted(preset, b, n, h, kv, d, u) for u in degrees}
    x = np.arange(len(degrees))
    ax.bar(
        x - 0.2, [ours[u] / max(ours.values()) for u in degrees], 0.4, label="ringsim"
    )
    ax.bar(x + 0.2, [published[u] / max(published.values()) for u in degrees], 0.4,
           label="published")  # fmt: skip
    ax.set_xticks(x, [f"U{u}" for u in degrees])
    ax.set_title(name)
    rank = lambda v: max(v, key=v.get)
    rows.append({"case": name, "best (ringsim)": f"U{rank(ours)}",
                 "best (published)": f"U{rank(published)}"})  # fmt: skip
axes[0].set_ylabel("throughput / best")
axes[0].legend(fontsize=8)
plt.show()
print(table(rows, {k: "{}" for k in rows[0]}))

# %% [markdown]
# *Figure 13.3. What to notice:* ringsim's bars are nearly flat on NVLink, with the pure
# ring ($U = 1$) a little ahead; the published ones rise with $U$, and the pure ring is the
# slowest. On PCIe both agree that pure Ulysses is worst by far, but the measurements put
# $U = 2$ first and ringsim the ring. The ideal timer runs every kernel at peak FLOP/s and
# every transfer at its link's rate. A real ring splits attention into smaller kernel calls,
# each below peak, and its point-to-point sends use the links less well than collectives;
# the USP authors name both. The planner's ranking is only as good as those two models.
# This figure uses the ideal timer, which gets exposed communication right and knows no
# kernel efficiency; lesson 11's kernel models add it (`ringsim plan --implementation fa2`
# on an A100 or H100 cluster), and with them the planner prefers fewer, larger kernel calls.
#
# ## Takeaways
#
# - `ringsim plan` ranks every strategy, degree, placement and layout that fits, in seconds.
# - The layout matters most under a causal mask; then whether communication hides.
# - On fast links with large blocks, the candidates tie at compute time; slow links and
#   small blocks separate them.
# - Check the plan against measurements: the ideal timer favours the ring, because it knows
#   no kernel efficiency; plan again with `--implementation` to see what real kernels do.

# %% tags=["remove-input"]
fast = million.candidates[0]
contiguous = min(
    (c for c in million.candidates if c.layout == "contiguous"),
    key=lambda c: c.step_time_s,
)
ag = [
    c for c in million.candidates if c.strategy == "allgather" and c.ulysses_degree == 1
]
half = plan(llama3_8b, 2**19, h100)
exercises(
    Exercise(
        "In Figure 13.1, how much slower is the best contiguous candidate than the best one, "
        "and why?",
        f"{contiguous.step_time_s / fast.step_time_s:.2f}x ({contiguous.label}: "
        f"{contiguous.step_time_s:.1f} s against {fast.step_time_s:.1f} s). Under a causal "
        "mask a contiguous split leaves the early hosts idle while the late ones compute "
        f"(idle {contiguous.idle_fraction:.0%} of the attention); zigzag and striped "
        "balance the work (lesson 6).",
    ),
    Exercise(
        "How much memory does all-gather with U = 1 need per GPU at 1M tokens, against the "
        "best candidate? What would you do if it did not fit?",
        f"{ag[0].bytes_per_host / 1e9:.1f} GB against {fast.bytes_per_host / 1e9:.1f} GB: it "
        "keeps every key and value of the sequence. Raise U: with U = 8 each host gathers "
        "only its key/value heads, an eighth (Llama 3 combined all-gather with tensor "
        "parallelism inside the node for the same reason).",
    ),
    Exercise(
        "Halve the sequence to 512K on the same 64 GPUs. What happens to the step time "
        "of the best candidate, and why not exactly a quarter?",
        f"{fast.step_time_s:.1f} s -> {half.candidates[0].step_time_s:.1f} s "
        f"({half.candidates[0].label}). Attention is quadratic in the length, so it drops "
        "about 4x; the projections and the MLP are linear and drop 2x, so the step drops "
        "by a bit less than 4x.",
    ),
)

# %% tags=["remove-input"]
Markdown(
    """## References

- Fang, J. and Zhao, S. (2024). [USP: A Unified Sequence Parallelism Approach for Long
  Context Generative AI](https://arxiv.org/abs/2405.07719); its library YunChang and
  [benchmark tables](https://github.com/feifeibear/long-context-attention).
- Llama Team (2024). [The Llama 3 Herd of Models](https://arxiv.org/abs/2407.21783),
  Section 3.3: 4D parallelism, all-gather context parallelism at 128K.
- NVIDIA. [NeMo long-sequence performance](https://github.com/NVIDIA/NeMo/blob/main/docs/source/performance/performance_long_sequence.md):
  the tensor x context parallel degrees NVIDIA chose per length.
- Gu, D. et al. (2024). [LoongTrain](https://arxiv.org/abs/2406.18485). Head x context
  parallelism and the double ring.
"""
)
