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
# # 2. The online softmax
#
# A softmax seems to need every score before it can normalise any of them. It does not: three
# running numbers per query row are enough to take the keys a block at a time, in any order,
# and still get the exact answer. This is the idea FlashAttention and Ring Attention share.
#
# **You will be able to**
#
# - state the partial of a block of keys: the unnormalised output `acc`, the `row_max` and the
#   `row_sum`, and merge two partials by rescaling both to the larger maximum;
# - write the same partial as a normalised output and a log-sum-exp, $(o, \mathrm{lse})$, the
#   form real kernels return, and merge two of them in that form;
# - explain why the merged result is exact (up to rounding) and why it cannot overflow even
#   when the scores are in the thousands;
# - read the precision lab: where a bf16 rounding enters a ring, and why one placement makes
#   the error grow with the number of hosts while another does not.

# %%
import matplotlib.pyplot as plt
import numpy as np
from IPython.display import display

import ringsim
from ringsim import Partial, error_growth, round_to
from ringsim.teach import (
    Exercise,
    check_merge,
    empty_partial,
    exercises,
    notation,
    references,
    relative_error,
    scaled,
    table,
    try_it,
    use_lesson_style,
)

use_lesson_style()
rng = np.random.default_rng(0)
TERMS = ("bf16", "fp32, fp16", "FA2, FA3 (FA)")
notation(*("m, \\ell, a", "\\mathrm{lse}", "o, O", "q, k, v", "P"), terms=TERMS)

# %% [markdown]
# ## Three numbers per row
#
# For one query row with scores $s_j$ against a set of keys with values $v_j$, a **partial**
# keeps
#
# $$m = \max_j s_j, \qquad \ell = \sum_j e^{s_j - m}, \qquad a = \sum_j e^{s_j - m} v_j ,$$
#
# and the attention output over those keys is $a / \ell$. Two partials over disjoint key sets
# merge by moving both to the common maximum $m' = \max(m_1, m_2)$:
#
# $$\ell' = \ell_1 e^{m_1 - m'} + \ell_2 e^{m_2 - m'}, \qquad
#   a' = a_1 e^{m_1 - m'} + a_2 e^{m_2 - m'} .$$
#
# Every factor $e^{m_i - m'}$ is at most 1, so nothing overflows; and the merged sums are the
# same sums, regrouped, so the result is exact up to the order of floating-point additions.
#
# **Predict first.** We split 4,096 keys into 8 blocks, score one query block against each
# with `ringsim.block_attention`, and merge the partials left to right. After merging only
# the first 3 blocks, is the running output $a/\ell$ *close* to the final answer? And after
# all 8, how far is it from the float64 reference?
#
# <details><summary>Answer</summary>
#
# After 3 of 8 blocks it is the exact attention over the keys of those 3 blocks only: a
# different weighted average, so it is far from the final answer (errors of order 1). After
# the last block it equals the reference to about $10^{-15}$ in float64, rounding level: the
# same terms, summed in a different order.
#
# </details>

# %%
n_keys, d, blocks = scaled(4096, multiple=64), 64, 8
q = rng.standard_normal((16, d))
k = rng.standard_normal((n_keys, d))
v = rng.standard_normal((n_keys, d))
scale = 1 / np.sqrt(d)
exact = ringsim.reference_attention(q, k, v)  # float64, the whole score matrix

state = empty_partial(q.shape, np.float64)
history = []
for k_block, v_block in zip(np.split(k, blocks), np.split(v, blocks), strict=True):
    part = ringsim.block_attention(q, k_block, v_block, scale=scale)
    state = ringsim.merge(state, part)
    history.append(
        (state.row_max[0], state.row_sum[0], relative_error(state.out, exact).max())
    )
for i, (m, ell, err) in enumerate(history):
    print(
        f"after block {i}: row_max = {m:5.2f}  row_sum = {ell:8.1f}  error = {err:.1e}"
    )

# %%
row_max, row_sum, error = map(np.array, zip(*history, strict=True))
fig, axes = plt.subplots(1, 3, layout="constrained", figsize=(9, 3))
steps = np.arange(1, blocks + 1)
axes[0].step(steps, row_max, where="mid", color="C0")
axes[0].set_title("running max $m$ (row 0)")
axes[1].plot(steps, row_sum, "o-", color="C1", ms=4)
axes[1].set_title(r"running sum $\ell$ (row 0)")
axes[2].semilogy(steps, np.maximum(error, 1e-17), "o-", color="C3", ms=4)
axes[2].set_title("error of $a/\\ell$ vs exact")
for ax in axes:
    ax.set_xlabel("blocks merged")
plt.show()

# %% [markdown]
# *Figure 2.1. What to notice:* the running maximum only ever steps up, and when it does the
# running sum is rescaled (it can dip) rather than restarted. The error stays of order one
# until the last block arrives, then drops to rounding level: a partial answer is not an
# approximation of the final one, it is the exact answer for fewer keys.

# %% [markdown]
# ## The log-sum-exp form
#
# Kernels do not hand back $(a, m, \ell)$. They return the **normalised** output and one
# number per row, the **log-sum-exp** of the scores:
#
# $$o = \frac{a}{\ell}, \qquad
#   \mathrm{lse} = \log \sum_j e^{s_j} = m + \log \ell .$$
#
# The pair $(o, \mathrm{lse})$ carries the same information: $e^{\mathrm{lse}}$ is the row's
# whole softmax denominator, so $o \, e^{\mathrm{lse}} = \sum_j e^{s_j} v_j$. Two partials
# over disjoint key sets merge by weighting each output by its share of the denominator:
#
# $$\mathrm{lse}' = \log\left(e^{\mathrm{lse}_1} + e^{\mathrm{lse}_2}\right), \qquad
#   o' = e^{\mathrm{lse}_1 - \mathrm{lse}'}\, o_1 + e^{\mathrm{lse}_2 - \mathrm{lse}'}\, o_2 .$$
#
# The weights are in $(0, 1)$ and add up to one, and $\mathrm{lse}'$ is computed stably as
# $\max(\mathrm{lse}_1, \mathrm{lse}_2) + \log(1 + e^{-|\mathrm{lse}_1 - \mathrm{lse}_2|})$
# (`np.logaddexp`). This is the merge a ring does with what a FlashAttention kernel returns,
# and the backward pass (lesson 8) needs only the final $\mathrm{lse}$ to rebuild every
# probability $e^{s_{ij} - \mathrm{lse}_i}$. `Partial.lse` and `Partial.from_out_lse` convert
# between the two forms.
#
# **Predict first.** Why do real kernels return $\mathrm{lse}$ in fp32 even when the output is
# bf16? At $\mathrm{lse} \approx 100$, how far apart are neighbouring bf16 numbers, and what
# does that do to a weight $e^{\mathrm{lse}_1 - \mathrm{lse}'}$?
#
# <details><summary>Answer</summary>
#
# bf16 keeps 8 significant bits, so between 64 and 128 its numbers are $2^{6-7} = 0.5$ apart:
# an lse rounded to bf16 can be off by up to $0.25$, and a weight $e^{\Delta}$ then by a
# factor up to $e^{0.25}$, a 28% error in the share of a whole block (exercise 3 computes
# it), where one bf16 rounding of $o$ moves it by at most 0.39%. The lse is *added* to
# scores before exponentiating, so its error is absolute, not relative: it must keep many
# more bits than the output.
#
# </details>

# %%
half = n_keys // 2
part_1 = ringsim.block_attention(q, k[:half], v[:half], scale=scale)
part_2 = ringsim.block_attention(q, k[half:], v[half:], scale=scale)
lse = np.logaddexp(part_1.lse, part_2.lse)
o_merged = (
    np.exp(part_1.lse - lse)[:, None] * part_1.out
    + np.exp(part_2.lse - lse)[:, None] * part_2.out
)
print(
    f"lse form vs ringsim.merge: "
    f"{np.abs(o_merged - ringsim.merge(part_1, part_2).out).max():.1e}"
)
print(f"lse form vs exact:         {relative_error(o_merged, exact).max():.1e}")
for name, dtype in (("fp32", "fp32"), ("bf16", "bf16")):
    shift = 100.0  # scores around 100, as in a layer with large activations
    lse_1, lse_2 = (round_to(p.lse + shift, dtype) - shift for p in (part_1, part_2))
    merged = ringsim.merge(
        Partial.from_out_lse(part_1.out, lse_1), Partial.from_out_lse(part_2.out, lse_2)
    )
    print(
        f"lse stored in {name} (scores near 100): "
        f"error {relative_error(merged.out, exact).max():.1e}"
    )

# %% [markdown]
# ## Any order, any grouping
#
# `merge` is associative and commutative (up to rounding), which is what lets a ring deliver
# the blocks to each host in a different order, and lets decoding combine partials in a tree.

# %%
parts = [
    ringsim.block_attention(q, kb, vb, scale=scale)
    for kb, vb in zip(np.split(k, blocks), np.split(v, blocks), strict=True)
]
reverse = empty_partial(q.shape, np.float64)
for part in reversed(parts):
    reverse = ringsim.merge(reverse, part)
pairs = [ringsim.merge(parts[i], parts[i + 1]) for i in range(0, blocks, 2)]
while len(pairs) > 1:
    pairs = [ringsim.merge(pairs[i], pairs[i + 1]) for i in range(0, len(pairs), 2)]
print(f"reverse order: {relative_error(reverse.out, exact).max():.1e}")
print(f"as a tree:     {relative_error(pairs[0].out, exact).max():.1e}")

# %% [markdown]
# ## Write it yourself: the merge
#
# Fill in `my_merge` with the formulas of the first section: the merged `row_max` is the
# larger of the two, each side's `acc` and `row_sum` are multiplied by $e^{m_i - m'}$, then
# added. (A row that has seen no key yet has `row_max = -inf`; `ringsim.merge` shifts by 0
# there so that `-inf - -inf` never happens. The test below always has keys on both sides.)
# The next cell checks your function against `ringsim.merge` and against the exact attention
# over both key sets; until you write it, it checks the folded reference solution instead.


# %%
def my_merge(a: Partial, b: Partial) -> Partial:
    """Merge two partials of the same query rows over disjoint key sets."""
    raise NotImplementedError("rescale both partials to the larger row_max, then add")


# %% tags=["hide-input"]
# The reference solution: open it after you have tried.
def reference_merge(a: Partial, b: Partial) -> Partial:
    row_max = np.maximum(a.row_max, b.row_max)
    alpha, beta = np.exp(a.row_max - row_max), np.exp(b.row_max - row_max)
    return Partial(
        a.acc * alpha[..., None] + b.acc * beta[..., None],
        row_max,
        a.row_sum * alpha + b.row_sum * beta,
    )


# %%
try_it(my_merge, reference_merge, check_merge)

# %% [markdown]
# ## Huge scores
#
# **Predict first.** Multiply the queries by 500, so some scores are in the thousands. A
# textbook softmax computes $e^{s_j}$ first. What does it return in float32? And the online
# softmax?
#
# <details><summary>Answer</summary>
#
# $e^{89}$ already overflows float32, so the textbook version produces `inf / inf = nan`. The
# online softmax only ever exponentiates $s_j - m \le 0$, so its terms are in $(0, 1]$ and it
# returns the right answer, up to float32 rounding of scores that large: a score in the
# thousands is stored to within about $10^{-4}$ (fp32 keeps 24 bits), and the cell below
# prints how far the output lands from float64.
#
# </details>

# %%
q_hot = (q * 500).astype(np.float32)
k32, v32 = k.astype(np.float32), v.astype(np.float32)
scores = q_hot @ k32.T * np.float32(scale)
with np.errstate(over="ignore", invalid="ignore"):
    textbook = np.exp(scores) / np.exp(scores).sum(axis=1, keepdims=True) @ v32
online = empty_partial(q_hot.shape, np.float32)
for k_block, v_block in zip(np.split(k32, blocks), np.split(v32, blocks), strict=True):
    online = ringsim.merge(
        online, ringsim.block_attention(q_hot, k_block, v_block, scale=scale)
    )
exact_hot = ringsim.reference_attention(q_hot, k32, v32)
stored = scores.max() * 2.0**-24  # fp32 keeps 24 significant bits
print(f"largest score: {scores.max():.0f}, stored in fp32 to within {stored:.1e}")
print(f"textbook softmax: {np.isnan(textbook).mean():.0%} of the outputs are nan")
print(f"online softmax:   error {relative_error(online.out, exact_hot).max():.1e}")

# %% [markdown]
# ## The precision lab: bf16 on the ring
#
# Real kernels compute a block in fp32 but often *return* its output in bf16 (8 significant
# bits: one rounding changes a number by at most $2^{-8} \approx 0.39\%$, by about
# $0.14\%$ on average; the cell below measures both with `round_to`). A ring then merges $P$
# such partials per query row. Where the rounding happens matters:
#
# - `partial_dtype="bf16"`: each block's output is rounded once, then merged in fp32;
# - `accum_dtype="bf16"`: the *running* output is kept in bf16 and rounded after every merge.
#
# `ringsim.numerics.precision.error_growth` runs the ring with a fixed block per host and more
# and more hosts, and measures each query row against the float64 reference.
#
# **Predict first.** Going from 1 to 64 hosts, which of the two errors grows, and roughly how?
#
# <details><summary>Answer</summary>
#
# Rounding the partials rounds each key block's contribution once (the block's log-sum-exp
# stays in fp32, as real kernels return it); the merge then averages $P$ independently
# rounded numbers in fp32, so the error stays at about one bf16 rounding whatever $P$ is.
# Rounding the accumulator rounds the *running* output at every one of the $P$ steps, and
# those errors add up, growing with $P$ (the last line under the table says by how much).
# Keep accumulators in fp32.
#
# </details>

# %%
samples = rng.standard_normal(10**6)
rounding = np.abs(round_to(samples, "bf16") - samples) / np.abs(samples)
print(f"one bf16 rounding of a million normal numbers: largest {rounding.max():.3%}")
print(f"  (2^-8 = {2.0**-8:.3%}), mean {rounding.mean():.3%}")
host_counts = [1, 2, 4, 8, 16, 32, scaled(64, multiple=64)]
lab = {
    "exact merges (fp32)": error_growth(host_counts),
    "partials rounded to bf16": error_growth(host_counts, partial_dtype="bf16"),
    "accumulator kept in bf16": error_growth(host_counts, accum_dtype="bf16"),
}
fig, ax = plt.subplots(layout="constrained", figsize=(7, 3.6))
for (label, rows), marker in zip(lab.items(), "osD", strict=True):
    hosts = [r["hosts"] for r in rows]
    ax.loglog(
        hosts, [r["mean_rel_error"] for r in rows], marker + "-", label=label, ms=5
    )
ax.axhline(
    2.0**-8, color="grey", ls=":", lw=1, label="largest bf16 rounding ($2^{-8}$)"
)
ax.set_xscale("log", base=2)
ax.set_xticks(host_counts, [str(h) for h in host_counts])
ax.set_xlabel("hosts in the ring (32 tokens per host)")
ax.set_ylabel("mean relative error per row")
ax.set_title("Where the bf16 rounding happens decides whether error grows")
ax.legend(fontsize=9, loc="upper left", bbox_to_anchor=(1.01, 1.0))
plt.show()

# %% [markdown]
# *Figure 2.2. What to notice:* with exact merges the ring is as accurate as dense fp32
# attention at any size. Rounded partials sit level, below the largest error of one bf16
# rounding. Only the bf16 accumulator climbs with the host count, because every ring step
# rounds the running output again.

# %%
columns = {"hosts": "{:d}", **{label: "{:.1e}" for label in lab}}
rows = [
    {"hosts": h, **{label: lab[label][i]["mean_rel_error"] for label in lab}}
    for i, h in enumerate(host_counts)
]
display(table(rows, columns))
acc = lab["accumulator kept in bf16"]
print(
    f"accumulator in bf16: {acc[-1]['mean_rel_error'] / acc[0]['mean_rel_error']:.1f}x "
    f"the error at {host_counts[-1]} hosts than at 1"
)

# %% [markdown]
# ## Takeaways
#
# - A partial is `(acc, row_max, row_sum)`; `merge` rescales both sides to the larger maximum.
#   The result does not depend on the order or grouping, so the ring may deliver blocks in
#   any order.
# - The same partial is $(o, \mathrm{lse})$ with $\mathrm{lse} = m + \log \ell$: merge by
#   weights $e^{\mathrm{lse}_i - \mathrm{lse}'}$. Keep the lse in fp32.
# - Exponentials of $s - m \le 0$ never overflow: the online softmax is *more* robust than the
#   textbook formula, not an approximation of it.
# - Round partials if you must; keep the running accumulator in fp32.
#
# Next: [blockwise attention and the blockwise feed-forward](03_blockwise.py).

# %% tags=["remove-input"]
two = [
    Partial(np.array([[3.0]]), np.array([2.0]), np.array([3.0])),
    Partial(np.array([[1.0]]), np.array([5.0]), np.array([1.0])),
]
both = ringsim.merge(*two)


def buggy_merge(a: Partial, b: Partial) -> Partial:
    """Rescales the accumulators but forgets to rescale the row sums."""
    row_max = np.maximum(a.row_max, b.row_max)
    alpha, beta = np.exp(a.row_max - row_max), np.exp(b.row_max - row_max)
    return Partial(
        a.acc * alpha[..., None] + b.acc * beta[..., None],
        row_max,
        a.row_sum + b.row_sum,
    )


buggy = empty_partial(q.shape, np.float64)
for part in parts:
    buggy = buggy_merge(buggy, part)
bf16_gap = 2.0 ** (np.floor(np.log2(100.0)) - 7)  # bf16 keeps 8 significant bits
exercises(
    Exercise(
        "Two partials of one row: $(m_1, \\ell_1) = (2, 3)$ and $(m_2, \\ell_2) = (5, 1)$. "
        "What are the merged $m$, $\\ell$ and $\\mathrm{lse}$? Which partial's keys carry more "
        "of the softmax weight?",
        f"$m = 5$, $\\ell = 3e^{{2-5}} + 1 = {both.row_sum[0]:.4f}$, $\\mathrm{{lse}} = 5 + "
        f"\\log {both.row_sum[0]:.4f} = {both.lse[0]:.4f}$ (`ringsim.merge`). The second: its "
        f"share is $1/{both.row_sum[0]:.4f}$ = {1 / both.row_sum[0]:.0%}, the first's "
        f"$3e^{{-3}}/{both.row_sum[0]:.4f}$ = {3 * np.exp(-3) / both.row_sum[0]:.0%}.",
    ),
    Exercise(
        "Find the bug: a merge rescales both accumulators to the larger maximum but adds the "
        "row sums as they are, `row_sum = a.row_sum + b.row_sum`. Is the output still right "
        "when every block happens to have the same maximum? How wrong is it on the 8 blocks "
        "of this lesson?",
        "With equal maxima every rescale factor is 1 and the bug is invisible, which is why "
        "it survives small tests. Otherwise the denominator keeps the sums of the earlier, "
        "smaller maxima unscaled (too large), so every output is shrunk: on this lesson's "
        f"8 blocks the worst row is off by {relative_error(buggy.out, exact).max():.0%}.",
    ),
    Exercise(
        "A kernel stores the lse in bf16. Scores are near 100. What is the spacing of bf16 "
        "numbers there, and what is the largest error it causes in a merge weight?",
        f"Between 64 and 128 bf16 numbers are {bf16_gap:g} apart, so the lse is off by up to "
        f"{bf16_gap / 2:g} and a weight $e^{{\\Delta}}$ by up to "
        f"$e^{{{bf16_gap / 2:g}}} - 1$ = {np.expm1(bf16_gap / 2):.0%}. Keep it in fp32.",
    ),
)

# %% tags=["remove-input"]
references(
    "online_softmax",
    "flash",
    "flash2",
    "flash3",
    "ring",
    notes={
        "online_softmax": "The running maximum and rescaled sum.",
        "flash2": "Returns the output and the log-sum-exp per row; merges in that form.",
        "flash3": "Low-precision (fp8) attention with fp32 statistics.",
    },
)
