"""The paired calibration of ``ringsim measure``: before every timed repeat, the ranks probe the
machine with the run's own block and message sizes (``kernels.calibration.probes``), so that the
prediction and the measurement see the same machine state; the probes of all repeats are then
pooled row by row (``kernels.calibration.profile``)."""

from __future__ import annotations

import dataclasses

from kernels.calibration.profile import Calibration, combine_ranks

# The link line's far point: at least this many bytes, so that a transfer's time stands out of
# the per-message cost; through small messages alone the slope is noise, and a slope at or
# below 0 sends the fit through the origin (results/notes-calibration.md)
LINK_FAR_BYTES = 2**21

RING_SAMPLE = "ring sample"
"""The paired step that times the real ring (the other steps are probes)."""


def link_sizes(config, hosts: int) -> list[int]:
    """The link's line through a small message, this run's kv message (where it is used) and
    a message at least ``LINK_FAR_BYTES`` (so that the slope is measured, not noise)."""
    dtype_bytes = {"float32": 4, "bfloat16": 2, "float16": 2}[config.dtype]
    kv_heads = config.kv_heads or config.heads
    block = config.seq_len // hosts
    message = 2 * block * kv_heads * config.head_dim * config.batch * dtype_bytes
    message = max(4096, message)
    return sorted({1024, message, max(4 * message, LINK_FAR_BYTES)})


def compute_sizes(block_tokens: int) -> list[int]:
    """Block sizes the paired calibration times: a tiny block (its time is the fixed cost per
    call), half this run's block and this block; at least two distinct sizes, so the rate and
    the fixed cost can both be fitted even when the run's block is tiny itself."""
    c = block_tokens
    sizes = {16, max(1, c // 2), c}
    if c <= 16:  # all of them are mostly fixed cost: one block large enough to show the rate
        sizes.add(32)
    return sorted(sizes)


PROBE_REPEATS = 5  # samples per probe and size in a paired calibration (the link: 2x)
OVERLAP_REPEATS = 9  # the overlap probe's samples (one probe scatters on shared cores)
# Where the ring is timed in a repeat: after each probe, one untimed pass (the first after a
# probe runs slow) and a few timed ones, re-run like a probe while they spread too wide
# (``kernels.calibration.probes.reprobe``); the repeat's time is their median. A loaded machine
# slows a rank in episodes shorter than a repeat: the probes' medians step over them, so the
# ring is sampled the same way, not in one stretch (results/notes-calibration.md).
RING_WARMUP = 1
LONG_PASS_FLOPS = 20e9  # a pass over this (~0.25 s on a CPU core) is timed once, at the end


def ring_between_probes(config, hosts: int) -> bool:
    """Whether a repeat times the ring after every probe (short passes) or only once at the
    end, two passes (a pass over ``LONG_PASS_FLOPS``: c = 8192 stays within minutes)."""
    from ringsim.timer.cost import attention_flops

    c = config.seq_len // hosts
    block = attention_flops(c, c, config.heads, config.head_dim, batch=config.batch)
    return hosts * block <= LONG_PASS_FLOPS


def repeat_time(rings: list[list[dict]]) -> float:
    """One repeat's measured ring time from every rank's ``run_ring`` results (per rank, one
    per point where the ring was timed): per pass the slowest rank, then the median."""
    from kernels.distributed.repeats import median_pass

    return median_pass([[t for result in mine for t in result["forward_s"]] for mine in rings])


def attempt_blocks(repeats: int, hosts: int, overlap_repeats: int = 0) -> int:
    """Full blocks one attempt of the longest probe may take a rank (computing them, or waiting
    while others do), for ``kernels.distributed.progress.stall_window``. A received-block probe
    runs ``max(repeats, 3) + 1`` samples (``kernels.calibration.probes``) of each of the 4
    masked blocks (at most a full block each; the block compute's sizes are smaller) or of each
    rank's turn (the lone rank); the overlap probe runs 2 blocks ``overlap_repeats`` times and 3
    more. Each probe also computes one block to start from."""
    samples = max(repeats, 3) + 1
    return max(4 * samples + 1, hosts * samples + 1, 2 * overlap_repeats + 3)


def paired_ring_config(config, hosts: int):
    """The ring run at each point where a repeat times it: ``RING_WARMUP`` untimed passes and
    three timed (two where the ring is timed once per repeat, at the end)."""
    passes = 3 if ring_between_probes(config, hosts) else 2
    return dataclasses.replace(config, repeats=passes, warmup=RING_WARMUP)


def ring_sample(rank: int, hosts: int, config) -> dict:
    """``run_ring`` of ``config`` with its passes' ``spread`` (``probes.probe_spread``), so
    that ``reprobe`` judges it as it judges a probe."""
    from kernels.calibration.probes import probe_spread
    from kernels.distributed.launch import run_ring

    result = run_ring(rank, hosts, config)
    result["spread"] = probe_spread(result["forward_s"])
    return result


def paired_stall_s(config, hosts: int) -> float:
    """How long a rank of the paired calibration may be silent: one attempt of its longest
    probe (each attempt says ``alive``), or one ring pass of ``hosts`` blocks."""
    from kernels.distributed.progress import stall_window

    blocks = max(attempt_blocks(PROBE_REPEATS, hosts, OVERLAP_REPEATS), hosts + 1)
    return stall_window(
        config.timeout_s,
        block_tokens=config.seq_len // hosts,
        heads=config.heads,
        head_dim=config.head_dim,
        blocks=blocks,
    )


def paired_steps(config, hosts: int, cpu: bool = True) -> list[str]:
    """The steps of one repeat of a paired calibration, in order: the probes, each followed by
    a timed ring where passes are short (``ring_between_probes``), else the ring once, last.
    The lone rank, overlap and ring-pass probes run on local gloo ranks only (``cpu``)."""
    from ringsim.schedule import BlockKind, build_schedule

    kinds = build_schedule(hosts, config.layout, config.causal, seq_len=config.seq_len).kind
    steps = ["block compute"]
    if (kinds == BlockKind.PARTIAL).any():
        steps.append("masked blocks")
    if cpu and (kinds == BlockKind.SKIP).any():
        steps.append("lone rank")
    steps += ["overlap", "ring pass"] if cpu else []
    steps.append("link")
    if ring_between_probes(config, hosts):
        return [name for probe in steps for name in (probe, RING_SAMPLE)]
    return [*steps, RING_SAMPLE]


def paired_worker(rank: int, hosts: int, config, dtype: str, channel=None) -> dict:
    """In each rank: ``warmup + repeats`` times, calibrate (block compute at this run's block
    size and half of it, then the link at a small, this run's and a large message, ``link_sizes``)
    and time the ring after each probe (``paired_steps``). Pairing in time keeps a drifting machine
    load out of the comparison. Every probe is re-run while its samples spread too wide
    (``kernels.calibration.probes.reprobe``); rank 0 reports each probe to ``channel``
    (``kernels.distributed.progress``)."""

    import torch.distributed as dist

    from kernels.calibration.probes import (
        measure_compute,
        measure_link_p2p,
        measure_masked,
        measure_overlap,
        measure_ring_pass,
        measure_solo,
        reprobe,
    )
    from kernels.distributed.progress import pulsing, report

    c = config.seq_len // hosts
    ring_config = paired_ring_config(config, hosts)
    device = "cpu" if dist.get_backend() == "gloo" else "cuda"
    steps = paired_steps(config, hosts, cpu=device == "cpu")
    shape = dict(heads=config.heads, head_dim=config.head_dim, dtype=dtype, repeats=PROBE_REPEATS)
    received = device == "cpu"
    probes = {
        "block compute": lambda: measure_compute(
            compute_sizes(c), **shape, device=device, barrier=dist.barrier, received=received
        ),
        "masked blocks": lambda: measure_masked(
            c, **shape, device=device, barrier=dist.barrier, received=received
        ),
        "lone rank": lambda: measure_solo([c], **shape, received=True),
        # at this run's block and message, where it is used; one probe scatters on shared
        # cores, so 9 samples each and the median over the repeats' probes
        "overlap": lambda: [
            measure_overlap(c, **{**shape, "repeats": OVERLAP_REPEATS}, kv_heads=config.kv_heads)
        ],
        "ring pass": lambda: [measure_ring_pass(layout=config.layout, dtype=dtype)],
        "link": lambda: measure_link_p2p(link_sizes(config, hosts), repeats=PROBE_REPEATS),
        RING_SAMPLE: lambda: ring_sample(rank, hosts, ring_config),
    }
    keys = {
        "block compute": "compute",
        "masked blocks": "masked",
        "lone rank": "solo",
        "overlap": "overlap",
        "ring pass": "setup",
        "link": "link",
        RING_SAMPLE: "rings",
    }
    out = {key: [] for key in keys.values()}
    report(channel, f"rank {rank} of {hosts} started")
    total = config.warmup + config.repeats
    for i in range(total):
        done = {key: [] for key in keys.values()}
        for name in steps:
            if rank == 0:
                report(
                    channel, f"repeat {i + 1}/{total}{' (warm-up)' * (i < config.warmup)}: {name}"
                )
            # every attempt says the rank is alive (the ring: every pass, in run_ring)
            probe = pulsing(probes[name])
            result = reprobe(probe)  # the ring too: measured by the probes' own rule
            if name == RING_SAMPLE:
                done["rings"].append(result)
            else:
                done[keys[name]] = result
            if rank == 0:
                report(channel, f"repeat {i + 1}/{total}: {name} done", 1)
        if i >= config.warmup:
            for key, value in done.items():
                out[key].append(value)
    return out


def paired_calibration(per_rank, i, config, dtype, hosts, threads, backend) -> Calibration:
    """Repeat ``i``'s calibration, the slowest rank's time for every measurement."""
    cal = Calibration(backend, dtype, config.heads, config.head_dim, threads, hosts)

    def slowest(rows_of):
        rows = [rows_of(r) for r in per_rank]
        return [combine_ranks(same) for same in zip(*rows, strict=True)]

    cal.compute = slowest(lambda r: r["compute"][i])
    cal.masked = slowest(lambda r: r["masked"][i])
    cal.solo = slowest(lambda r: r["solo"][i])
    cal.ring_pass = slowest(lambda r: r["setup"][i])
    cal.overlap = slowest(lambda r: r["overlap"][i])
    cal.exchange = slowest(lambda r: r["link"][i]["exchange"])
    cal.pingpong = slowest(lambda r: r["link"][i]["pingpong"])
    return cal
