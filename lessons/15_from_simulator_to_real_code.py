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
# # 15. From the simulator to real code
#
# Every lesson so far read one object, the ring's schedule: which block each host holds at
# each step, what it computes with it (a full block, a causal one, or nothing), what it sends
# on. One idea carries it into practice: **each line of the schedule is a line of the code
# people train with, and you can find it**. This lesson reads the real ring of this
# repository (the one lesson 10 measured), then the same loop in three libraries:
# zhuzilin's ring-flash-attention, PyTorch's context parallelism, and Megatron-LM with
# TransformerEngine. Then the two things a real run must get right that the schedule
# does not show: the position ids after the tokens are reordered, and packed sequences.
#
# **You will be able to**
#
# - map each part of a ring step (the transfer, the skip, full or causal block, the merge, the
#   wait) to the lines that do it in each library;
# - give a zigzag ring the right position ids, labels and loss mask;
# - say what a packed batch asks of a ring: document boundaries, and chunks that divide.
#
# The sources were read at these versions (every path below is relative to the repository):
# zhuzilin/ring-flash-attention at `8996282`, pytorch/pytorch at `0123248`, Megatron-LM at
# `d98e8a6`, TransformerEngine at `9c61cd7`. Names move between versions; the shape of the
# loop does not.

# %%
import matplotlib.pyplot as plt
import numpy as np

import ringsim
from ringsim.teach import (
    Exercise,
    caption,
    exercises,
    notation,
    plot_layout_masks,
    real_ring_loop,
    references,
    relative_error,
    use_lesson_style,
)

use_lesson_style()
TERMS = ("striped, zigzag, contiguous", "causal mask", "SDPA", "TransformerEngine (TE)")
TERMS += ("all-gather", "all-to-all", "1M, 1K (tokens)", "Ulysses")
TERMS += ("fp32, fp16", "gloo", "hybrid, double ring")
notation(*("P", "c", "r", "s", "o, O", "\\mathrm{lse}"), terms=TERMS)

# %% [markdown]
# ## The schedule, and the loop that runs it
#
# The schedule of a causal zigzag ring of 4 hosts (lesson 4's notation: `kv3 full ->1` means
# "holds host 3's block, computes all of it, then sends it to host 1"):

# %%
schedule = ringsim.build_schedule(4, "zigzag", causal=True, seq_len=32)
print(schedule.describe())

# %% [markdown]
# And the loop of the real ring, `ring_forward` in the real backend's
# `kernels/distributed/ring.py`, printed from its source so it cannot drift from what lesson
# 10 ran:

# %%
print(real_ring_loop())

# %% [markdown]
# Read it one step $s$ at a time, on rank $r$:
#
# 1. `sched.payload(step)`: is a block moving after this step? Every step but the last.
# 2. `_Transfer(...)` posts, in one `dist.batch_isend_irecv`, an `isend` of the current `k`,
#    `v` to the next rank and an `irecv` into two fresh buffers from the previous one. It
#    returns at once: the transfer is in flight while the rank computes.
# 3. `block_attention` computes this rank's queries against the block it holds, unless the
#    schedule says `SKIP`; `ring.mask_args` gives the kernel the *global* positions of both
#    blocks and applies the causal mask only on a `PARTIAL` block.
# 4. `merge_out_lse` folds the block's $(o, \mathrm{lse})$ into the running pair in fp32,
#    lesson 2's merge.
# 5. `_wait` blocks until the send and the receive are done; `kv = incoming` swaps the
#    buffers: the block in use and the block arriving, four of lesson 4's six blocks.
#
# **Predict first.** On a step the schedule marks `skip`, which of the five parts still run?
#
# <details><summary>Answer</summary>
#
# The transfer (parts 1, 2 and 5): the block must still travel on, since the next rank may
# need it. Only the compute and the merge (parts 3 and 4) are skipped. In a contiguous
# causal ring that is what makes the early ranks idle: they forward blocks they never use.
#
# </details>

# %% [markdown]
# ## The same loop in three libraries
#
# **zhuzilin/ring-flash-attention**, `ring_flash_attn/ring_flash_attn.py`,
# `ring_flash_attn_forward` (the contiguous ring):
#
# - `comm.send_recv_kv(k, v)` (`RingComm` in `ring_flash_attn/utils.py`: two `P2POp`s per
#   tensor, then `commit()`, which calls `dist.batch_isend_irecv`): parts 1 and 2;
# - `if not causal or step <= comm.rank`: the contiguous layout's skip (a later rank's block
#   lies in the future); `"causal": causal and step == 0`: only the diagonal block is
#   masked, every other computed block is full (part 3);
# - `update_out_and_lse(out, lse, block_out, block_lse)`: the merge, written with
#   `sigmoid` and `logsigmoid` of the lse difference, which is lesson 2's merge rearranged
#   (part 4);
# - `comm.wait()`, then `k, v = next_k, next_v` (part 5).
#
# Its zigzag ring, `ring_flash_attn/zigzag_ring_flash_attn.py`, has lesson 6's three cases
# by name: at step 0 both halves against the own block with the causal mask; while
# `step <= comm.rank`, all queries against the front half of the arriving block (`k0 =
# k[:, :block_seq_len]`); after that, only the back half of the queries (`q1`) against the
# whole block, merged into the back half of the output (`slice_`).
#
# **PyTorch context parallelism**, `torch/distributed/tensor/experimental/_attention.py`:
#
# - `_is_causal_behavior` returns `SKIP`, `NOT_IS_CAUSAL` or `IS_CAUSAL`: our `skip`,
#   `full` and `partial`;
# - `_templated_ring_attention` loops over the ranks with a *rotater*:
#   `_AllToAllRotater` passes the block to the next rank (a ring), while the default,
#   `_AllGatherRotater`, gathers every block once and hands them out one per step: lesson 9's
#   all-gather inside a ring-shaped loop (`set_rotate_method("alltoall")` switches);
# - `_SDPAMerger._merge_one` is the same merge, on SDPA's `(out, logsumexp)`;
# - `_generate_round_robin_indices` gives rank $r$ chunks $r$ and $2P - 1 - r$: zigzag,
#   which `context_parallel(mesh, buffers=..., buffer_seq_dims=...)` applies to every buffer
#   you name.
#
# **Megatron-LM with TransformerEngine.** Megatron shards the batch; TE runs the ring:
#
# - `get_batch_on_this_cp_rank` (`megatron/core/utils.py`; per sequence:
#   `_get_batch_on_this_cp_rank_per_sequence_balancing`) cuts every tensor of the batch into
#   $2P$ chunks and keeps $r$ and $2P - 1 - r$;
# - `--cp-comm-type` (`megatron/training/arguments.py`: `p2p`, `all_gather`, `a2a`,
#   `a2a+p2p`), passed on by `TEDotProductAttention` in
#   `megatron/core/extensions/transformer_engine.py`, picks the ring (`p2p`), all-gather,
#   Ulysses' all-to-all, or Ulysses inside a node times a ring across (lesson 12's hybrid);
# - in TE's `transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py`,
#   `AttnFuncWithCPAndKVP2P.forward` loops `for i in range(cp_size + 1)`: step $i$ posts
#   `flash_attn_p2p_communicate` (even ranks send first, odd ranks receive first) and
#   computes on one of two GPU streams in turn, and the correction of step $i$ runs one
#   iteration later; `flash_attn_fwd_out_correction` and
#   `flash_attn_fwd_softmax_lse_correction` are the merge.
#
# **Predict first.** PyTorch's default rotate method all-gathers the blocks. Which of lesson
# 9's costs does that change, compared with a ring?
#
# <details><summary>Answer</summary>
#
# Memory, and what overlaps. After the all-gather every rank holds all $P$ blocks of keys
# and values, $P$ times the ring's two in-flight blocks; and its one collective overlaps only
# with the first step's compute, where a ring hides every transfer behind a step once
# $c \geq 2F/B$. The bytes sent per rank are the same, $P - 1$ blocks (lesson 9's table).
#
# </details>
#
# ## Position ids after the reorder
#
# Under zigzag, rank $r$ holds chunks $r$ and $2P-1-r$: its tokens are not positions
# $rc \ldots rc + c - 1$. Everything that depends on a token's position must be sharded with
# the same permutation as the tokens, or it is silently wrong: the rotary embedding's position
# ids (or its cos/sin tables), the labels and the loss mask. ringsim's ring passes each
# block's global positions to the mask (`ringsim.host_positions` is the permutation); in the
# libraries, it is the batch sharding that must carry them (Megatron's batch dict, PyTorch's
# `buffers`), and ring-flash-attention leaves it to the caller (its README's example chunks
# `input_ids` and `position_ids` alike).
#
# **A worked example.** 32 tokens on 4 ranks, zigzag: the positions each rank really holds,
# and the naive ones. Then attention computed with each, against the exact answer.

# %%
P_demo, N_demo = 4, 32
c_demo = N_demo // P_demo
rng = np.random.default_rng(15)
q, k, v = (rng.standard_normal((N_demo, 16)) for _ in range(3))
exact = ringsim.reference_attention(q, k, v, causal=True)
right = ringsim.host_positions("zigzag", P_demo, N_demo)
order = right.ravel()  # the tokens in the order the ranks hold them
naive_all = np.arange(N_demo)  # what a rank would assume without the permutation
for r in range(P_demo):
    naive = np.arange(r * c_demo, (r + 1) * c_demo)
    errors = []
    for q_pos, k_pos in ((right[r], order), (naive, naive_all)):
        part = ringsim.block_attention(
            q[right[r]],
            k[order],
            v[order],
            scale=16**-0.5,
            q_pos=q_pos,
            k_pos=k_pos,
            causal=True,
        )
        errors.append(relative_error(part.out, exact[right[r]]).max())
    same = int((naive == right[r]).sum())
    print(
        f"rank {r}: holds {right[r].tolist()}\n"
        f"   naive {naive.tolist()} ({same} of {c_demo} right)\n"
        f"   error: right positions {errors[0]:.0e}, naive positions {errors[1]:.1e}"
    )

# %% [markdown]
# With the right positions every rank's rows are exact; with the naive ones most rows attend
# to the wrong keys. Nothing crashes: a wrong position is a number like any other.
#
# ## Packed sequences
#
# Training batches are often *packed*: several documents in one sequence, each attending only
# to itself (lesson 6). Flash-attention kernels take them as `cu_seqlens`, the offsets where
# documents start, and a ring must mask by document on every block it computes. A zigzag ring
# adds a condition: each document is itself cut into $2P$ chunks, so its length must divide
# by $2P$. ring-flash-attention's zigzag varlen test shards each document that way
# (`extract_local` in `test/test_zigzag_ring_flash_attn_varlen_func.py`), and TE pads every
# document to a multiple of $2P$ (`cu_seqlens_padded`; `get_cu_seqlens_on_cp_rank` computes
# a rank's share). ringsim's ring takes one document id per token instead (`segment_ids`),
# shards it with the tokens and masks each block with the documents of both sides, in the
# NumPy ring and in the real one (whose tests run packed zigzag rings of gloo processes).
#
# **Predict first.** Three documents of 40, 12 and 12 tokens on a zigzag ring of 4: which
# must TE pad, and to what length?
#
# <details><summary>Answer</summary>
#
# $2P$ = 8 here: 40 divides by 8, both documents of 12 must grow to the next multiple of 8.
# The cell computes the padding, then runs the packed batch through ringsim's ring unpadded,
# against the exact answer.
#
# </details>

# %%
lengths = [40, 12, 12]
multiple = 2 * P_demo
padded = [-(-n // multiple) * multiple for n in lengths]
print(f"documents {lengths} tokens; padded to multiples of 2P = {multiple}: {padded}")
segments = np.repeat(np.arange(len(lengths)), lengths)
q, k, v = (rng.standard_normal((2, segments.size, 16)) for _ in range(3))
packed = ringsim.ring_attention(
    q, k, v, hosts=P_demo, layout="zigzag", causal=True, segment_ids=segments
)
exact = ringsim.reference_attention(q, k, v, causal=True, segment_ids=segments)
print(f"{P_demo} hosts, zigzag, causal, documents of {lengths} tokens, unpadded:")
print(f"error vs the reference {relative_error(packed, exact).max():.1e}")
fig = plot_layout_masks(P_demo, segments.size, causal=True, segment_ids=segments)
plt.show()

# %% tags=["remove-input"]
caption(
    "Figure 15.1",
    "the packed batch's mask, every visible (query, key) pair coloured by the rank that "
    "computes it: three triangles along the diagonal, one per document, and nothing between "
    "documents. Sorted by rank (bottom row), each square is one (query block, key block) "
    "pair of the ring; the squares a document boundary empties are blocks a ring could "
    "skip.",
)

# %% [markdown]
# ## Takeaways
#
# - A ring step is five lines in every implementation: post the transfer, skip or compute
#   (full or causal), merge by the lse, wait, swap the buffers.
# - Ring-flash-attention, PyTorch and TE differ in how they move blocks (point to point,
#   all-gather, all-to-all, two levels) and in how they cut the causal work, not in the loop.
# - Reordered tokens need reordered positions, labels and loss masks; packed documents need
#   their boundaries in every block, and a zigzag ring needs each to divide by $2P$.
#
# Next: [your own trace](16_your_own_trace.py), a ring you ran, recorded with PyTorch's
# profiler and set step by step against the same ring simulated.

# %% tags=["remove-input"]
P_ex, N_ex = 8, 64
zig = ringsim.host_positions("zigzag", P_ex, N_ex)
doc_lengths = [100, 28]
exercises(
    Exercise(
        f"A zigzag ring of {P_ex} ranks, {N_ex} tokens. Which positions does rank 3 hold? "
        "(Check with `ringsim.host_positions`.)",
        f"Chunks 3 and $2P - 1 - 3$ = {2 * P_ex - 4} of {N_ex // (2 * P_ex)} tokens: "
        f"{zig[3].tolist()}.",
    ),
    Exercise(
        "In ring-flash-attention's zigzag forward, on a step after the rank's own index "
        "(`step > comm.rank`), which queries and which keys does the kernel see, and why?",
        "The back half of the queries (`q1`) against the whole arriving block. The block "
        "comes from a later rank, whose front chunk lies after this rank's front chunk but "
        "before its back chunk (the mirror), so only the back half of the queries sees it, "
        "and sees all of it: no mask needed.",
    ),
    Exercise(
        f"Documents of {doc_lengths[0]} and {doc_lengths[1]} tokens are packed for a zigzag "
        f"ring of {P_ex} ranks under TE. How many padding tokens does the batch carry?",
        f"Each pads to a multiple of $2P$ = {2 * P_ex}: "
        f"{[-(-n // (2 * P_ex)) * 2 * P_ex for n in doc_lengths]}, so "
        f"{sum(-(-n // (2 * P_ex)) * 2 * P_ex - n for n in doc_lengths)} tokens of padding.",
    ),
)

# %% tags=["remove-input"]
references(
    "ring_flash_attention",
    "torch_cp",
    "megatron_cp",
    "transformer_engine",
    "llama3",
    notes={
        "ring_flash_attention": "`ring_flash_attn/ring_flash_attn.py`, "
        "`zigzag_ring_flash_attn.py`, `utils.py` (RingComm, update_out_and_lse).",
        "torch_cp": "`torch/distributed/tensor/experimental/_attention.py`.",
        "megatron_cp": "`get_batch_on_this_cp_rank` deals chunks $r$ and $2P-1-r$.",
        "transformer_engine": "`AttnFuncWithCPAndKVP2P` in `context_parallel.py`.",
        "llama3": "All-gather context parallelism with document masks (Section 3.3.2).",
    },
)
