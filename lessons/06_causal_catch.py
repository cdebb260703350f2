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
# # 6. The causal catch
#
# A decoder's causal mask lets a query see only the keys at or before it. With the paper's
# contiguous split, host 0 holds the first tokens and has almost nothing to compute, while the
# last host attends to everything. The ring advances in lockstep, so every step waits for the
# busiest host.
#
# **You will be able to**
#
# - predict the idle fraction of a contiguous causal ring from the host count;
# - explain how the striped (round-robin) and zigzag layouts balance the work;
# - explain why a kernel that computes in tiles makes the striped layout *worse* at small
#   blocks, and zigzag not;
# - size the block a *causal* ring needs to hide its transfers: about $2F/B$, twice lesson 5's
#   threshold;
# - say which layout a sliding window favours, and how far its ring turns.

# %%
import matplotlib.pyplot as plt
import numpy as np
from IPython.display import display

import ringsim
from ringsim import RingConfig, get_hardware, simulate
from ringsim.teach import (
    Exercise,
    caption,
    check_zigzag,
    compared,
    exercises,
    near_zero,
    notation,
    pair_owners,
    plot_layout_masks,
    plot_sweep,
    plot_timelines,
    references,
    table,
    try_it,
    use_lesson_style,
)

use_lesson_style()
a100 = get_hardware("a100-nvlink")
TERMS = ("causal mask", "striped, zigzag, contiguous", "context parallelism (CP)")
TERMS += ("1M, 1K (tokens)", "NIC, InfiniBand")
notation(*("P", "N", "c", "r", "T", "F", "B", "c^*"), terms=TERMS)

# %% [markdown]
# ## Who holds which tokens
#
# `ringsim.host_positions` deals the tokens; the mask rule then decides the work of every
# (query block, key/value block) pair. Sixteen tokens on 4 hosts, four tokens per host:

# %%
for layout in ringsim.layout_names():
    print(f"{layout:>10}: {ringsim.host_positions(layout, 4, 16).tolist()}")

# %% [markdown]
# The picture that explains the rest of the lesson: the whole tokens × tokens causal mask,
# every visible (query, key) pair coloured by the host that computes it (the host holding
# the query). The top row keeps the tokens in order; the bottom row sorts queries and keys
# by host, so each square of the $P \times P$ grid is one (query block, kv block) pair of
# the ring, and the label counts each host's visible pairs.

# %%
fig = plot_layout_masks(4, 32, causal=True)
plt.show()

# %% tags=["remove-input"]
pairs = {
    layout: [
        int((pair_owners(layout, 4, 32, causal=True) == r).sum()) for r in range(4)
    ]
    for layout in ringsim.layout_names()
}
span = {
    layout: f"{min(n)}" if min(n) == max(n) else f"{min(n)} to {max(n)}"
    for layout, n in pairs.items()
}
caption(
    "Figure 6.0",
    "contiguous gives host 0 a small triangle and host 3 a whole trapezoid "
    f"({pairs['contiguous'][0]} against {pairs['contiguous'][-1]} pairs); striped "
    "interleaves the rows so every host gets a thin slice of every part of the triangle "
    f"({span['striped']} pairs); zigzag pairs each early chunk with its mirror late chunk, "
    f"so every host gets the same count ({span['zigzag']}). Sorted by host, contiguous has "
    "whole empty squares (skipped blocks); striped and zigzag have none.",
)

# %% [markdown]
# ## Write it yourself: the zigzag layout
#
# Zigzag cuts the $N$ tokens into $2P$ chunks of $c/2$ and gives host $r$ chunk $r$ and its
# mirror, chunk $2P - 1 - r$. Write `my_zigzag(hosts, seq_len)`: an array of shape
# `(hosts, seq_len // hosts)`, row $r$ the global positions of host $r$'s tokens. The
# positions are what a real implementation must also give its rotary embedding (lesson 10
# shows where). The cell after the folded solution checks your function against
# `ringsim.host_positions("zigzag", ...)` for several ring sizes.


# %%
def my_zigzag(hosts: int, seq_len: int) -> np.ndarray:
    """Global token positions of each host under the zigzag layout."""
    raise NotImplementedError("cut into 2P chunks; host r takes chunks r and 2P-1-r")


# %% tags=["hide-input"]
# The reference solution: open it after you have tried.
def reference_zigzag(hosts: int, seq_len: int) -> np.ndarray:
    chunks = np.arange(seq_len).reshape(2 * hosts, -1)
    mirror = chunks[::-1]  # mirror[r] is chunk 2P - 1 - r
    return np.stack([np.concatenate([chunks[r], mirror[r]]) for r in range(hosts)])


# %%
try_it(my_zigzag, reference_zigzag, check_zigzag)

# %% [markdown]
# **Predict first.** With $P$ hosts, contiguous blocks and a causal mask, the ring takes $P$
# steps and the last host computes at every step. What fraction of all compute slots is idle
# (for large $P$)?
#
# <details><summary>Answer</summary>
#
# The useful work is the lower triangle, about $P^2/2$ of the $P^2$ block pairs (the diagonal
# blocks count half). The run lasts as long as the last host needs, $P$ steps (its diagonal
# block is half work, so $P - 1/2$ blocks of work). So about half the slots are idle:
# $1 - \tfrac{P^2/2}{P (P - 1/2)} = 1 - \tfrac{P}{2P - 1} \to \tfrac12$; at $P = 8$, 47%.
#
# </details>

# %%
runs = {}
for layout in ringsim.layout_names():
    config = RingConfig(
        hosts=8, seq_len=8 * 16384, hardware=a100, layout=layout, causal=True
    )
    runs[f"{layout}, causal"] = simulate(config).timeline
fig = plot_timelines(list(runs.items()), max_hosts=8, width=8)
plt.show()

# %% tags=["remove-input"]
makespan = {name: timeline.makespan for name, timeline in runs.items()}
caption(
    "Figure 6.1",
    "in the contiguous ring, host 0 computes one short bar and then waits, while host 7 "
    "computes all the way; striped and zigzag give every host a bar of the same length at "
    "every step, and finish in "
    f"{makespan['zigzag, causal'] / makespan['contiguous, causal']:.0%} of the contiguous "
    "ring's time.",
)

# %%
host_counts = [2, 4, 8, 16, 32, 64]
idle = {layout: [] for layout in ringsim.layout_names()}
for p in host_counts:
    for layout in ringsim.layout_names():
        config = RingConfig(
            hosts=p, seq_len=p * 8192, hardware=a100, layout=layout, causal=True
        )
        idle[layout].append(simulate(config).summary()["idle_fraction"])
closed_form = [(p - 1) / (2 * p - 1) for p in host_counts]
fig = plot_sweep(
    host_counts,
    idle,
    xlabel="hosts",
    ylabel="idle fraction",
    title="Causal ring, 8K tokens per host, exact (untiled) work",
    plain_x=True,
    references={"(P-1)/(2P-1)": closed_form},
    ylim=(-0.05, 0.6),
    legend_loc="center right",
)
plt.show()
rows = [
    {"P": p, **{lay: idle[lay][i] for lay in idle}, "(P-1)/(2P-1)": closed_form[i]}
    for i, p in enumerate(host_counts)
]
display(
    table(
        rows, {"P": "{:d}", **{lay: "{:.3f}" for lay in idle}, "(P-1)/(2P-1)": "{:.3f}"}
    )
)

# %% tags=["remove-input"]
balanced = max(max(idle["striped"]), max(idle["zigzag"]))
caption(
    "Figure 6.2",
    "the contiguous ring's idle share follows the closed form $(P-1)/(2P-1)$ (dashed) "
    "towards one half as hosts are added; the striped and zigzag lines lie on top of each "
    f"other at {near_zero(balanced, digits=2)} idle at every size (the largest of them "
    f"{balanced:.1e}; the table rounds them to 0.000).",
)

# %% [markdown]
# ## Tiles spoil the stripes
#
# Real kernels compute in tiles (say $128 \times 128$) and skip a tile only if it is *entirely*
# masked. With striped tokens, host $r$'s query $i$ and key $j$ sit at positions $iP + r$ and
# $jP + r'$: the causal boundary runs along the diagonal of *every* block, so each block's
# diagonal tiles are half wasted. Zigzag keeps contiguous chunks, so most of its tiles are
# fully visible or fully masked.
#
# **Predict first.** With 128-token tiles, which layout suffers more as the block shrinks
# towards 128 tokens, striped or zigzag?
#
# <details><summary>Answer</summary>
#
# Striped. At $c = 128$ a block is one tile, the striped diagonal block is a whole tile of
# which only about half is visible, and *every* block on a host is like that, so the host
# computes nearly the whole square instead of half: almost twice the useful work. Zigzag pays
# the same only on its few diagonal tiles (except at a single-tile block, where its one tile
# straddles both of its chunks).
#
# </details>

# %%
blocks = [128, 256, 512, 1024, 2048, 4096, 8192]
wasted = {}
for layout in ("striped", "zigzag"):
    extra = []
    for c in blocks:
        base = dict(hosts=8, seq_len=8 * c, hardware=a100, layout=layout, causal=True)
        tiled = simulate(RingConfig(tile=128, **base)).summary()["compute_time_s"]
        exact = simulate(RingConfig(**base)).summary()["compute_time_s"]
        extra.append(tiled / exact)
    wasted[f"{layout}, 128-token tiles"] = extra
fig = plot_sweep(
    blocks,
    wasted,
    xlabel="block size c (tokens per host)",
    ylabel="compute with tiles / exact-mask compute",
    title="What tile granularity costs each balanced layout (8 hosts, causal)",
)
plt.show()

# %% tags=["remove-input"]
striped_waste = dict(zip(blocks, wasted["striped, 128-token tiles"], strict=True))
zigzag_waste = dict(zip(blocks, wasted["zigzag, 128-token tiles"], strict=True))
caption(
    "Figure 6.3",
    f"at 128-token blocks a block is a single tile and both layouts compute "
    f"{striped_waste[128]:.2f}x the useful work. From 256 tokens on they part: striped still "
    f"wastes about $T/c$ ({striped_waste[256] - 1:.0%} at 256, {striped_waste[1024] - 1:.0%} "
    "at 1K), because the causal boundary runs through every one of its blocks, while zigzag "
    f"drops to {zigzag_waste[256] - 1:.0%} at 256. That is one reason context-parallel "
    "training (e.g. for Llama 3) deals tokens in zigzag chunks rather than stripes.",
)

# %% [markdown]
# ## The causal threshold: about $2F/B$
#
# Lesson 5's threshold $c^* = F/B$ assumed every step computes a whole block. Under a causal
# mask a balanced ring computes *half* a block at most steps: with zigzag, every step after
# the first computes either the host's late chunk against the whole arriving block, or both
# its chunks against the arriving block's early chunk (half the $c \times c$ pairs either
# way), and with striped every step is a causal block, again about half the pairs. The message is still the whole block of $c$ tokens. So the compute
# per step halves while the transfer does not, and the block must be about **twice** as
# large to hide it: $c \geq 2F/B$ (`ringsim.overlap_threshold` says so in its docstring).
#
# **Predict first.** 8 A100s on InfiniBand ($F/B$ = 24,960 tokens), 32K tokens per host,
# forward. Without the mask the ring hides its transfers ($c > F/B$). With a causal mask and
# the balanced zigzag layout, how much of the run is exposed communication?
#
# <details><summary>Answer</summary>
#
# Every step after the first computes half a block: $2c^2dH$ FLOPs instead of $4c^2dH$,
# against the same $4cdH$ bytes. Compute over transfer per step is then $c / (2F/B)$ =
# 32,768 / 49,920, about two thirds: a third of every such step waits on the link. The cell
# prints the exposed share of both runs, and sweeps the block size: the causal ring hides its
# transfers only from about $2F/B$ on.
#
# </details>

# %%
ib = get_hardware("a100-ib")
kw = dict(heads=32, kv_heads=32, head_dim=128, dtype="bf16", include_latency=False)
c_star = ringsim.overlap_threshold(ib, **kw)
exposed = {}
for name, layout, causal in (
    ("full", "contiguous", False),
    ("causal zigzag", "zigzag", True),
):
    s = simulate(
        RingConfig(
            hosts=8, seq_len=8 * 32 * 1024, hardware=ib, layout=layout, causal=causal
        )
    ).summary()
    exposed[name] = s["exposed_comm_s"] / s["total_time_s"]
print(f"A100 InfiniBand: F/B = {c_star:,.0f} tokens, 2F/B = {2 * c_star:,.0f}")
print(
    f"c = 32K: compute / transfer per half-block step = c / (2F/B) = "
    f"{32 * 1024 / (2 * c_star):.2f}"
)
for name, share in exposed.items():
    print(f"  {name:>13}: exposed communication {share:.0%} of the run")

sweep_blocks = sorted([2**p for p in range(12, 18)] + [5 * 2**13, 3 * 2**14])
sweep = {"full (no mask)": [], "causal zigzag": [], "causal striped": []}
for c in sweep_blocks:
    for name, layout, causal in (
        ("full (no mask)", "contiguous", False),
        ("causal zigzag", "zigzag", True),
        ("causal striped", "striped", True),
    ):
        s = simulate(
            RingConfig(
                hosts=8, seq_len=8 * c, hardware=ib, layout=layout, causal=causal
            )
        ).summary()
        sweep[name].append(s["exposed_comm_s"] / s["total_time_s"])
striped = sweep.pop("causal striped")  # it lies on zigzag's curve: printed, not drawn
gap = max(abs(a - b) for a, b in zip(striped, sweep["causal zigzag"], strict=True))
print(f"causal striped vs zigzag: exposed shares differ by at most {gap:.1%}")
fig = plot_sweep(
    sweep_blocks,
    sweep,
    xlabel="block size c (tokens per host)",
    ylabel="share of time waiting on the link",
    title="8 A100s on InfiniBand, 32 heads of 128, bf16",
    threshold=2 * c_star,
    threshold_label="2F/B",
    legend_loc="lower left",
)
fig.axes[0].axvline(c_star, color="grey", lw=1.2, ls=":")
fig.axes[0].annotate(
    "F/B",
    (c_star, 1.0),
    xycoords=("data", "axes fraction"),
    xytext=(-4, -6),
    textcoords="offset points",
    ha="right",
    va="top",
    fontsize=9,
    color="dimgrey",
)
plt.show()

# %% tags=["remove-input"]
at_2fb = {name: values[sweep_blocks.index(5 * 2**13)] for name, values in sweep.items()}
caption(
    "Figure 6.4",
    "the full ring stops waiting at $F/B$ (dotted), the causal layouts only near $2F/B$ "
    f"(dashed): at 40K tokens, between the two, the full ring exposes "
    f"{at_2fb['full (no mask)']:.0%} and causal zigzag {at_2fb['causal zigzag']:.0%}. "
    f"Striped gives the same curve (within {gap:.1%}): it too computes half a block per "
    "step. A causal ring needs twice lesson 5's block, or a faster link.",
)

# %% [markdown]
# ## Balancing beyond zigzag: packed documents
#
# Training batches are often *packed*: several documents share one sequence, and a token
# attends only to earlier tokens of its own document (`segment_ids` in ringsim, the
# document-causal mask used to train Llama 3). The work of a block then depends on where the
# documents fall, and no fixed layout is balanced for every packing: zigzag assumes one
# long causal document.
#
# **Predict first.** One long document of 3/4 of the sequence followed by short ones: which
# host of a zigzag ring does most work now?
#
# <details><summary>Answer</summary>
#
# The hosts whose two chunks both fall in the long document's later rows: with 4 hosts (8
# chunks), hosts 2 and 3 hold chunks 2, 5 and 3, 4, all inside the long document, and tie as
# the busiest (2.03 blocks each in the cell below). Host 0's mirror chunk is the short
# documents, whose rows see only a few keys each. Zigzag's mirror trick balances one long
# document, not a packing.
#
# </details>

# %%
P_doc, n_doc = 4, 64
segment_ids = np.repeat(
    [0, 1, 2, 3, 4], [48, 4, 4, 4, 4]
)  # one long document, four short
fig = plot_layout_masks(P_doc, n_doc, causal=True, segment_ids=segment_ids)
plt.show()
for layout in ringsim.layout_names():
    sched = ringsim.build_schedule(
        P_doc, layout, causal=True, seq_len=n_doc, segment_ids=segment_ids
    )
    per_host = sum(sched.exact_work_at(s) for s in range(sched.steps))
    busiest = per_host.max() * sched.steps / per_host.sum()
    work = ", ".join(f"{w:.2f}" for w in per_host)
    print(f"{layout:>10}: blocks of work per host [{work}]; busiest/mean {busiest:.2f}")

# %% tags=["remove-input"]
chunk = n_doc // (2 * P_doc)
docs_of = {  # the documents each zigzag host's two chunks hold
    r: {
        int(d)
        for i in (r, 2 * P_doc - 1 - r)
        for d in np.unique(segment_ids[i * chunk : (i + 1) * chunk])
    }
    for r in range(P_doc)
}
zz = ringsim.build_schedule(
    P_doc, "zigzag", causal=True, seq_len=n_doc, segment_ids=segment_ids
)
zz_work = sum(zz.exact_work_at(s) for s in range(zz.steps))
st = ringsim.build_schedule(
    P_doc, "striped", causal=True, seq_len=n_doc, segment_ids=segment_ids
)
st_work = sum(st.exact_work_at(s) for s in range(st.steps))
heavy = [r for r in range(P_doc) if np.isclose(zz_work[r], zz_work.max())]
light = [r for r in range(P_doc) if len(docs_of[r]) > 1]
caption(
    "Figure 6.5",
    "with documents, the mask is a staircase of triangles along the diagonal and most of "
    f"the square is empty. Zigzag's busiest hosts, {' and '.join(map(str, heavy))}, hold two "
    "chunks that both lie in the long document: its mirror pairing gives them no light "
    f"rows, and they do {zz_work.max():.2f} blocks each, "
    f"{zz_work.max() * P_doc / zz_work.sum():.2f} times the mean. The short documents all "
    f"land on host{'s' if len(light) > 1 else ''} {' and '.join(map(str, light))}. Striped "
    f"stays nearly balanced ({st_work.max() * P_doc / st_work.sum():.2f}) because it deals "
    "*every* document round robin.",
)

# %% [markdown]
# Systems balance packed batches the same way: deal each document across the hosts (striped
# or zigzag within the document), or assign documents by their cost, which grows with the
# square of their length, rather than by token count. Llama 3 splits each sequence into $2P$
# zigzag chunks and all-gathers keys and values, which handles document masks without a ring
# (lesson 10 shows what real ring code needs for packed documents).

# %% [markdown]
# ## A sliding window: which layout balances it, and how far the ring turns
#
# Some models attend only the $W$ latest tokens in some of their layers (a *sliding window*:
# Mistral 7B in all of them, Gemma 2 in every other one, Gemma 3 in most). A query then
# sees the keys at most $W - 1$ tokens back, so a host needs only the blocks that hold its
# queries' windows. A ring can skip the rest: it runs only the steps at which some host
# computes, and after each one sends every block straight to the next host that needs it.
#
# **Predict first.** A causal window shorter than a block, on InfiniBand: which layout is
# balanced now, and which is fastest? How many steps must each ring turn?
#
# <details><summary>Answer</summary>
#
# Every query (but the first $W$ of the sequence) now sees the same number of keys, so the
# causal mask's imbalance is gone: contiguous, the layout the causal mask unbalanced, is
# balanced again, and so are the others. What tells them apart is how far each ring turns.
# A contiguous host needs only its own block and the one before: the ring turns
# $1 + \lceil (W - 1)/c \rceil$ steps and stops. Zigzag's second chunk needs the chunk
# before it, the next host's mirror chunk, at the far end of the ring, so its blocks make
# one more trip; striped spreads every host's window over every block, so its ring turns all
# the way. On a slow link each trip is exposed, and the contiguous ring is the fastest. The
# cell below counts and times all three.
#
# </details>

# %%
P_w, n_w = 8, 65536
c_w = n_w // P_w
window_rows, window_time, window_balance = [], {}, {}
for W in (1024, 4096, 16384, None):
    for layout in ringsim.layout_names():
        config = RingConfig(
            hosts=P_w,
            seq_len=n_w,
            hardware=ib,
            layout=layout,
            causal=True,
            sliding_window=W,
        )
        result = simulate(config)
        busy = result.compute_busy()
        window_time[W, layout] = result.summary()["total_time_s"]
        window_balance[W, layout] = busy.max() / busy.mean()
        window_rows.append(
            {
                "window W": W,
                "layout": layout,
                "ring steps": len(result.schedule.ring_steps),
                "busiest/mean": window_balance[W, layout],
                "time (ms)": window_time[W, layout] * 1e3,
            }
        )
display(
    table(
        window_rows,
        {
            "window W": "{:,}",
            "layout": "{}",
            "ring steps": "{}",
            "busiest/mean": "{:.3f}",
            "time (ms)": "{:.2f}",
        },
    )
)
reach = {W: 1 + -(-(W - 1) // c_w) for W in (1024, 4096, 16384)}
print(f"contiguous turns 1 + ceil((W - 1)/c) steps, c = {c_w:,}: {reach}")

# %% tags=["remove-input"]
slower = dict(more="slower", less="faster")
ct, zz, st = (window_time[4096, lay] for lay in ("contiguous", "zigzag", "striped"))
caption(
    "Table 6.1",
    f"{P_w} A100s on InfiniBand, {n_w:,} tokens, causal, ideal kernels ('-' is no window). "
    "Under a window every layout's busiest host does about the mean work (contiguous "
    f"{window_balance[4096, 'contiguous']:.3f} at a 4,096-token window, against "
    f"{window_balance[None, 'contiguous']:.3f} without one): the causal imbalance is gone. "
    "The rings differ in how far they turn: contiguous stops after "
    f"{reach[4096]} steps, and at that window zigzag is {compared(zz, ct, **slower)} and "
    f"striped {compared(st, ct, **slower)} than contiguous, their blocks making more trips "
    "over a link that cannot hide them.",
)

# %% [markdown]
# ## Takeaways
#
# - Contiguous + causal idles about half the ring: $(P-1)/(2P-1)$.
# - Striped and zigzag give every host equal work at every step.
# - With tiled kernels, striped pays on every block; zigzag only on the diagonal.
# - Packed documents change the mask; balance by the cost of each document, not its tokens.
# - Under a sliding window every layout is balanced; the contiguous ring is the fastest, as it
#   stops after $1 + \lceil (W - 1)/c \rceil$ steps.
#
# Next: [memory and the longest context](07_memory_context.py).

# %% tags=["remove-input"]
idle_16 = simulate(
    RingConfig(
        hosts=16, seq_len=16 * 8192, hardware=a100, layout="contiguous", causal=True
    )
).summary()["idle_fraction"]


def tile_waste(c: int) -> float:
    base = dict(hosts=8, seq_len=8 * c, hardware=a100, layout="striped", causal=True)
    tiled = simulate(RingConfig(tile=128, **base)).summary()["compute_time_s"]
    return tiled / simulate(RingConfig(**base)).summary()["compute_time_s"] - 1


waste_512 = tile_waste(512)
h200_ib = get_hardware("h200-ib")
c_h200 = ringsim.overlap_threshold(h200_ib, **kw)
block_h200 = 2 ** int(np.ceil(np.log2(2 * c_h200)))  # a power of two above 2F/B


def exposed_share(c: int, causal: bool) -> float:
    layout = "zigzag" if causal else "contiguous"
    config = RingConfig(
        hosts=8, seq_len=8 * c, hardware=h200_ib, layout=layout, causal=causal
    )
    s = simulate(config).summary()
    return s["exposed_comm_s"] / s["total_time_s"]


exercises(
    Exercise(
        "Predict the idle fraction of a causal contiguous ring of 16 hosts, then check it "
        "with the timer.",
        f"$(P-1)/(2P-1) = 15/31 = {15 / 31:.3f}$; the timer gives {idle_16:.3f} "
        "(`simulate(RingConfig(hosts=16, ..., causal=True)).summary()['idle_fraction']`).",
    ),
    Exercise(
        "A striped ring with 128-token kernel tiles and $c = 512$ tokens per host: how much "
        "more compute than the exact mask does it pay, roughly, and why?",
        "Each of the host's blocks has the causal boundary running along its diagonal, so "
        "in each of its $c/T = 4$ rows of tiles the diagonal tile is computed whole though "
        "only about half of it is visible: half a tile of waste per row of $c/T$ tiles "
        "against about $c/(2T)$ useful tiles, roughly $T/c$ = 25% extra. The timer says "
        f"{waste_512:.0%}.",
    ),
    Exercise(
        "Why is zigzag perfectly balanced for one causal document? Count the pairs of host "
        "$r$ with $2P$ chunks of $c/2$ tokens.",
        "Chunk $i$ (of $2P$) sees $i$ full earlier chunks and half of itself: "
        "$(i + 1/2)(c/2)^2$ pairs. Host $r$ holds chunks $r$ and $2P - 1 - r$: "
        "$(r + 1/2 + 2P - 1 - r + 1/2)(c/2)^2 = 2P (c/2)^2$, the same for every $r$. "
        "Figure 6.0 counts 132 pairs on every host.",
    ),
    Exercise(
        "Eight H200s, one per node, on 50 GB/s NICs (the `h200-ib` preset), 32 heads of 128, "
        "bf16: what is the smallest power-of-two block for which a causal zigzag ring hides "
        "its transfers? Check it with the timer at that block and at half of it.",
        f"$F/B$ = {c_h200:,.0f} tokens, so the causal ring needs about $2F/B$ = "
        f"{2 * c_h200:,.0f}: {block_h200 // 1024}K tokens per host. The timer: exposed "
        f"communication {exposed_share(block_h200, True):.0%} at {block_h200 // 1024}K "
        f"and {exposed_share(block_h200 // 2, True):.0%} at {block_h200 // 2048}K, where "
        f"the same ring without the mask exposes {exposed_share(block_h200 // 2, False):.0%}.",
    ),
)

# %% tags=["remove-input"]
references(
    "striped",
    "llama3",
    "ring",
    "playbook",
    notes={
        "striped": "The striped layout and the token-level mask picture (its Figure 2).",
        "llama3": "Context parallelism with zigzag chunks and document masks (Section 3.3.2).",
        "playbook": "Zigzag load balancing, drawn on the same mask.",
    },
)
