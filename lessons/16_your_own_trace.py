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
# # 16. Your own trace
#
# "My ring took this long per layer: is that expected?" Lesson 10 and lesson 11 answered it for
# rings whose every term this project set up itself. This lesson answers it for a ring you
# ran: record it with PyTorch's profiler, hand the trace to `ringsim compare`, and read
# where the time went, step by step, against the same ring simulated. We record this
# project's own ring on this CPU (a real trace, real timings), then read a trace shaped like
# a GPU ring's, with flash-attention's and NCCL's kernels, in which one GPU is slow.
#
# **You will be able to**
#
# - record a ring with `torch.profiler` so that its trace carries what a comparison needs
#   (the shapes, the transfers, the passes);
# - read what `ringsim compare` inferred from a trace, and where each value came from;
# - read a step-by-step comparison: each step's attention calls, merges, exposed transfer
#   and idle time, measured beside predicted, and the term that differs most;
# - check a gap against the trace itself before blaming the model.

# %%
import tempfile
import textwrap
from collections import Counter
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from IPython.display import display

from ringsim import RingConfig, attention_flops, get_hardware, simulate
from ringsim.teach import (
    Exercise,
    Markdown,
    caption,
    compare_ring,
    compared,
    exercises,
    notation,
    plot_comparison,
    read_ring,
    read_traces,
    record_real_ring,
    references,
    scaled,
    table,
    use_lesson_style,
    write_gpu_traces,
)

use_lesson_style()


def say(text: str) -> None:
    """Print ``text`` wrapped to the book's code column."""
    print(textwrap.fill(text, 88))


TERMS = ("gloo", "NCCL", "striped, zigzag, contiguous", "fp32, fp16")
TERMS += ("FA2, FA3 (FA)", "FLOP, GFLOP, TFLOP", "causal mask", "1M, 1K (tokens)")
notation(*("P", "c", "H", "d", "s", "F", "B"), terms=TERMS)

# %% [markdown]
# ## Recording a ring
#
# `record_real_ring` (the real backend's `kernels.distributed.profiled.record_ring`) runs
# the ring of lesson 10 (separate processes over gloo, a causal zigzag ring) with every rank
# inside `torch.profiler.profile(record_shapes=True)`, and each rank exports its own Chrome
# trace, as you would:
#
# ```python
# from torch.profiler import ProfilerActivity, profile
#
# with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
#              record_shapes=True) as prof:
#     for _ in range(4):                    # a few passes: the first one warms up
#         out = ring_attention(q, k, v)
# prof.export_chrome_trace(f"rank{dist.get_rank()}.json.gz")
# ```
#
# `record_shapes` keeps every op's input shapes, from which the reader infers the block and
# the heads; without it, the flags of `ringsim compare` must say them.

# %%
folder = Path(tempfile.mkdtemp(prefix="ringsim-lesson16-"))
paths = record_real_ring(
    folder,
    hosts=2,
    seq_len=scaled(2048, multiple=64),
    heads=2,
    head_dim=32,
    layout="zigzag",
    causal=True,
    backward=False,
    warmup=1,
    repeats=3,
)
for path in paths:
    print(f"{path.name}: {path.stat().st_size / 1024:.0f} KiB")
names = Counter(e.name for e in read_traces(paths).ranks[0].events)
wanted = ("c10d::send", "c10d::recv_", "gloo:send", "gloo:recv", "RingAttention")
wanted += ("aten::_scaled_dot_product_flash_attention_for_cpu", "aten::logaddexp")
display(
    table(
        [{"event on rank 0": n, "count": names[n]} for n in wanted],
        {"event on rank 0": "{}", "count": "{}"},
    )
)

# %% [markdown]
# Those are the events the reader uses. `c10d::send` and `c10d::recv_` are the posts (their
# arguments name the peer, their shapes the block); `gloo:send` and `gloo:recv` span each
# message from its post to its completion; `RingAttention`, the ring's own autograd
# function, encloses one pass; the flash-attention op is each step's attention call, and
# `logaddexp` one of the merge's ops. On a GPU the same roles fall to NCCL's `SendRecv`
# kernel and to the attention kernels of its family (flash-attention 2 or 3, cuDNN,
# Triton), each linked to the host op that launched it.
#
# **Predict first.** The trace never states "zigzag" or "causal". What in it could give the
# layout and the mask away?
#
# <details><summary>Answer</summary>
#
# The calls. Under a causal mask a ring computes fewer key-query pairs than without, and each
# layout shows it differently: a contiguous causal ring has rank $r$ compute only $r + 1$ of
# its $P$ blocks (it skips the rest), while a zigzag ring computes at every step, and after
# its own block with half blocks (half of the queries against a whole block, or all of them
# against half of it). The reader counts the calls per rank and reads their shapes.
#
# </details>

# %%
recorded = read_ring(paths)
values = recorded.shape.values
rows = [
    {
        "field": key.rstrip("_"),
        "value": str(values[key]),
        "from": recorded.shape.sources[key],
    }
    for key in (
        "hosts",
        "block_tokens",
        "heads",
        "head_dim",
        "dtype",
        "causal",
        "layout",
    )
]
display(table(rows, {"field": "{}", "value": "{}", "from": "{}"}))
passes = ", ".join(f"{t * 1e3:.2f}" for t in recorded.pass_times)
print(f"{len(recorded.pass_times)} passes: {passes} ms")
print(f"compared step by step: pass {recorded.typical}, the median")

# %% [markdown]
# ## Measured against predicted
#
# `ringsim compare rank0.json.gz rank1.json.gz` simulates the same ring (this machine's
# calibrated profile, `cpu-calibrated`, is the default for a trace with no GPU in it) and
# sets the two side by side. Each step $s$ is timed on its slowest host, from the end of that
# host's previous step to the end of this one, and split into its attention calls, the rest
# of its compute (the merges), the time it waited for a block already on its way (exposed
# transfer) and the rest (idle: a neighbour that posted late, the host's own gaps).
#
# **Predict first.** The profile was calibrated on this machine days ago, with nothing else
# running; this trace was recorded now, under the profiler. Which term do you expect to
# differ most?
#
# <details><summary>Answer</summary>
#
# Most likely the compute: the profile's rate is the machine of its calibration, the trace
# the machine of now, with whatever else runs on it and the profiler timing every op. The
# transfers, a few hundred kilobytes over loopback, should matter less. The cells below
# print what this run found, and the next section checks the compute term against the
# trace itself.
#
# </details>

# %%
cpu = RingConfig(
    hosts=values["hosts"],
    seq_len=values["hosts"] * values["block_tokens"],
    hardware=get_hardware("cpu-calibrated"),
    heads=values["heads"],
    head_dim=values["head_dim"],
    dtype=values["dtype"],
    layout=values["layout"],
    causal=values["causal"],
    implementation="torch",
)
comparison = compare_ring(recorded, cpu)
say(comparison.verdict_reason())
step_rows = []
for s, (m, p) in enumerate(
    zip(comparison.measured_steps, comparison.predicted_steps, strict=True)
):
    step_rows.append(
        {
            "step": s,
            "measured ms": m.duration * 1e3,
            "predicted ms": p.duration * 1e3,
            "attention": m.attention * 1e3,
            "merges": m.merge * 1e3,
            "exposed": m.exposed_transfer * 1e3,
            "idle": m.idle * 1e3,
        }
    )
number = "{:.2f}"
display(
    table(step_rows, {"step": "{}", **dict.fromkeys(list(step_rows[0])[1:], number)})
)
most = comparison.differs_most()
say(f"differs most: {most['what']}, {most['difference_s'] * 1e3:+.2f} ms")

# %%
fig = plot_comparison(comparison, width=8)
plt.show()

# %% tags=["remove-input"]
slowest = max(comparison.measured_steps, key=lambda s: s.duration)
caption(
    "Figure 16.1",
    f"the measured pass (top) took {comparison.measured_s * 1e3:.2f} ms against "
    f"{comparison.predicted.point * 1e3:.2f} ms simulated (middle), each host timed from the "
    "start of its own pass. In the bars, each step's slowest host: measured (left) and "
    "predicted (hatched). The calibrated CPU profile folds the merges into each call's "
    "fixed cost, so only the measured bars split them out. The longest measured step took "
    f"{slowest.duration * 1e3:.2f} ms, {slowest.attention * 1e3:.2f} ms of it in the "
    "attention call.",
)

# %% [markdown]
# ## Checking a gap against the trace
#
# A comparison names a term; the trace can often tell whether the term is the model's error
# or the run's. The attention calls are a clean case: each call's FLOPs are known from the
# shapes ($4c^2dH$ for a full block of $c$ tokens, lesson 5; a causal step computes the
# share of it its mask leaves), and the trace times the call, so the trace measures the rate
# $F$ this machine achieved, to be set beside the rate the profile assumes.

# %%
c = values["block_tokens"]
full = attention_flops(c, c, values["heads"], values["head_dim"], pass_="forward")
schedule = cpu.schedule("forward")
work = np.array([schedule.work_at(s) for s in range(schedule.steps)])  # pairs computed
achieved = full * work.sum() / recorded.attention.sum()
assumed = cpu.hardware.flops_for(values["dtype"])
per_call = cpu.hardware.block_overhead_s
say(
    f"the attention calls ran at {achieved / 1e9:.1f} GFLOP/s over the pass; the "
    f"profile assumes {assumed / 1e9:.1f} GFLOP/s plus {per_call * 1e3:.2f} ms per call"
)

# %% tags=["remove-input"]
Markdown(
    "The calls ran "
    + compared(assumed, achieved, more="slower", less="faster")
    + " than the profile's rate (its fixed cost per call aside). On a CPU shared with other "
    "work, and "
    "under a profiler that times every op, that is the machine of this moment, not the "
    "model: to separate the two, recalibrate (`ringsim calibrate`) just before recording, "
    "as lesson 10 does before every repeat. The other "
    "terms read the same way: exposed transfer is the link's rate $B$ and latency, idle the "
    "ranks' start skew and the host's own gaps."
)

# %% [markdown]
# ## A GPU trace, with a slow GPU
#
# No GPU was at hand, so the next trace is written from a simulated run, in the shape a
# GPU ring's trace has: ring-flash-attention's loop on 8 H100s, flash-attention 2 kernels
# on the compute stream, NCCL's `SendRecv` kernel on a stream of its own, the fields Kineto
# writes (`ringsim.views.gpu_trace` cites where each comes from). One GPU of the simulated
# run computes slower than the others, as a GPU that throttles or shares its node would;
# the prediction knows nothing of it.
#
# **Predict first.** The slow GPU runs every attention call slower. Which term will the
# comparison name, and on which host?
#
# <details><summary>Answer</summary>
#
# Each step's slowest host is the slow GPU: its attention calls take longer, and the other
# hosts wait for the block it forwards. On that host the extra time is attention, so the
# kernel rate term grows; beside it, the stragglers term (the slowest host beyond the
# median one) says that the slowness is one host's, not every host's.
#
# </details>

# %%
nominal = RingConfig(
    hosts=8,
    seq_len=8 * 8192,
    hardware=get_hardware("h100-nvlink"),
    heads=32,
    kv_heads=8,
    head_dim=128,
    layout="zigzag",
    causal=True,
    implementation="fa2",
)
slow_host, speed = 5, 0.8
straggling = simulate(
    nominal.replace(speed=tuple(speed if h == slow_host else 1.0 for h in range(8))),
    keep_timeline=True,
)
gpu_folder = Path(tempfile.mkdtemp(prefix="ringsim-lesson16-gpu-"))
gpu_paths = write_gpu_traces(straggling, gpu_folder, family="flash-attn 2")
gpu = compare_ring(read_ring(gpu_paths), nominal)
say(gpu.verdict_reason())
gpu_most = gpu.differs_most()
hosts = Counter(s.host for s in gpu.measured_steps)
say(f"differs most: {gpu_most['what']}, {gpu_most['difference_s'] * 1e3:+.3f} ms")
print(f"the slowest host of each step, counted: {dict(hosts)}")
terms = gpu.terms()
rows = [
    {"term": k, "measured": t["measured_s"] * 1e3, "predicted": t["predicted_s"] * 1e3}
    for k, t in terms.items()
]
ms = "{:.3f} ms"
display(table(rows, {"term": "{}", "measured": ms, "predicted": ms}))

# %%
plot_comparison(gpu, width=8)
plt.show()

# %% tags=["remove-input"]
top_host, top_count = hosts.most_common(1)[0]
caption(
    "Figure 16.2",
    f"host {top_host} is the slowest host in {top_count} of the {len(gpu.measured_steps)} "
    "steps: its compute bars are the longest in the measured chart, and the other hosts "
    "wait for its block (grey). The bars below show the slowest host's steps, longer in "
    f"attention than predicted; the run took {gpu.ratio:.2f} times the prediction.",
)

# %% tags=["remove-input"]
Markdown(
    f"The term that differs most is {gpu_most['what']}: "
    f"{gpu_most['difference_s'] * 1e3:+.3f} ms over the pass; and the steps name the host, "
    f"{top_host}, the one the simulated run slowed. A whole ring runs at its slowest "
    "member's pace, so one slow GPU costs every host its share: this is what "
    "`ringsim compare` is for, telling a kernel that is slow everywhere (the kernel "
    "rate) from one device that is slow (a straggler)."
)

# %% [markdown]
# ## Takeaways
#
# - Record with `record_shapes=True` and a few passes; one trace per rank, plain or gzipped,
#   or an Nsight Systems export (`nsys export --type sqlite`).
# - The reader infers the ring (members, block, heads, element type, mask, layout) and says
#   where each value came from; a flag supplies what a trace lacks and wins over it.
# - Each step splits into attention, merges, exposed transfer and idle; the term that
#   differs most says where to look, and the trace itself can often tell whether it is the
#   model's error or the run's.
#
# Back to [the start](01_memory_wall.py), or open [the notation page](notation.md).

# %% tags=["remove-input"]
cudnn = compare_ring(read_ring(gpu_paths), nominal.replace(implementation="cudnn"))
attention_fa2 = terms["attention"]["predicted_s"]
attention_cudnn = cudnn.terms()["attention"]["predicted_s"]
per_host = read_ring(gpu_paths).attention.sum(axis=0)
others = np.delete(per_host, slow_host).mean()
exercises(
    Exercise(
        "Compare the GPU-shaped trace again, assuming cuDNN's kernels instead of "
        "flash-attention 2's (`ringsim compare ... --implementation cudnn`). Which predicted "
        "term moves, and which does not?",
        f"The predicted attention goes from {attention_fa2 * 1e3:.3f} ms to "
        f"{attention_cudnn * 1e3:.3f} ms over the pass: each family has its own rate by "
        "call shape. The measured terms do not move (they are the trace's), and the "
        f"verdict becomes: {cudnn.verdict}.",
    ),
    Exercise(
        "From the GPU-shaped trace alone, how much slower is the slow GPU's attention than "
        "the others'?",
        f"Its calls add up to {per_host[slow_host] * 1e3:.3f} ms against "
        f"{others * 1e3:.3f} ms on the other hosts (the mean): "
        f"{per_host[slow_host] / others:.2f} times, 1/{speed} as simulated "
        "(`read_ring(...).attention`, summed over the steps).",
    ),
)

# %% tags=["remove-input"]
references(
    "ring",
    "flash2",
    "ring_flash_attention",
    "torch_cp",
    notes={
        "ring_flash_attention": "The loop the GPU-shaped trace follows (`ring_flash_attn.py`).",
        "torch_cp": "PyTorch's own ring, which `torch.profiler` records the same way.",
    },
)
