"""The paired calibration of ``ringsim measure``: before every timed repeat, the ranks probe the
machine with the run's own block and message sizes (``kernels.probes``), so that the
prediction and the measurement see the same machine state; the probes of all repeats are then
pooled row by row (``kernels.profile``)."""

from __future__ import annotations

import dataclasses

from kernels.profile import Calibration, combine_ranks


def _link_sizes(config) -> list[int]:
    """A small message and this run's kv message: the two points of the link's line."""
    dtype_bytes = {"float32": 4, "bfloat16": 2, "float16": 2}[config.dtype]
    kv_heads = config.kv_heads or config.heads
    message = 2 * (config.seq_len // 2) * kv_heads * config.head_dim * config.batch * dtype_bytes
    return [1024, max(4096, message)]


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


def attempt_blocks(repeats: int, hosts: int, overlap_repeats: int = 0) -> int:
    """Full blocks one attempt of the longest probe may take a rank (computing them, or waiting
    while others do), for ``kernels.progress.stall_window``. A received-block probe runs
    ``max(repeats, 3) + 1`` samples (``kernels.probes``): of the 4 masked blocks (at most a
    full block each; the block compute's sizes ``c``, ``c/2``, 16 are less), or of each rank's
    turn (the lone rank); the overlap probe runs 2 blocks ``overlap_repeats`` times and 3
    more. Each probe also computes one block to start from."""
    samples = max(repeats, 3) + 1
    return max(4 * samples + 1, hosts * samples + 1, 2 * overlap_repeats + 3)


def paired_stall_s(config, hosts: int) -> float:
    """How long a rank of the paired calibration may be silent: one attempt of its longest
    probe (each attempt says ``alive``), or one ring pass of ``hosts`` blocks."""
    from kernels.progress import stall_window

    blocks = max(attempt_blocks(PROBE_REPEATS, hosts, OVERLAP_REPEATS), hosts + 1)
    return stall_window(config.timeout_s, block_tokens=config.seq_len // hosts,
                        heads=config.heads, head_dim=config.head_dim, blocks=blocks)  # fmt: skip


def paired_steps(config, hosts: int, cpu: bool = True) -> list[str]:
    """The probes of one repeat of a paired calibration, in order (the ring last); the lone
    rank, overlap and ring-pass probes run on local gloo ranks only (``cpu``)."""
    from ringsim.schedule import BlockKind, build_schedule

    kinds = build_schedule(hosts, config.layout, config.causal, seq_len=config.seq_len).kind
    steps = ["block compute"]
    if (kinds == BlockKind.PARTIAL).any():
        steps.append("masked blocks")
    if cpu and (kinds == BlockKind.SKIP).any():
        steps.append("lone rank")
    steps += ["overlap", "ring pass"] if cpu else []
    return [*steps, "link", "ring"]


def paired_worker(rank: int, hosts: int, config, dtype: str, channel=None) -> dict:
    """In each rank: ``warmup + repeats`` times, calibrate (block compute at this run's block
    size and half of it, then the link at a small and at this run's message size) and run the
    ring once. Pairing in time keeps a drifting machine load out of the comparison. Every
    probe is re-run while its samples spread too wide (``kernels.probes.reprobe``); rank 0
    reports each probe to ``channel`` (``kernels.progress``)."""

    import torch.distributed as dist

    from kernels.launch import run_ring
    from kernels.probes import (
        measure_compute,
        measure_link_p2p,
        measure_masked,
        measure_overlap,
        measure_ring_pass,
        measure_solo,
        reprobe,
    )
    from kernels.progress import pulsing, report

    c = config.seq_len // hosts
    # one warm-up pass before the timed one: every calibration probe is timed warm too
    once = dataclasses.replace(config, repeats=1, warmup=1)
    device = "cpu" if dist.get_backend() == "gloo" else "cuda"
    steps = paired_steps(config, hosts, cpu=device == "cpu")
    shape = dict(heads=config.heads, head_dim=config.head_dim, dtype=dtype,
                 repeats=PROBE_REPEATS)  # fmt: skip
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
        "link": lambda: measure_link_p2p(_link_sizes(config), repeats=PROBE_REPEATS),
        "ring": lambda: run_ring(rank, hosts, dataclasses.replace(once, seed=config.seed)),
    }
    keys = {"block compute": "compute", "masked blocks": "masked", "lone rank": "solo",
            "overlap": "overlap", "ring pass": "setup", "link": "link",
            "ring": "rings"}  # fmt: skip
    out = {key: [] for key in keys.values()}
    report(channel, f"rank {rank} of {hosts} started")
    total = config.warmup + config.repeats
    for i in range(total):
        done = {key: [] for key in keys.values()}
        for name in steps:
            if rank == 0:
                report(channel, f"repeat {i + 1}/{total}{' (warm-up)' * (i < config.warmup)}: "
                                f"{name}")  # fmt: skip
            # every attempt says the rank is alive (the ring: every pass, in run_ring)
            probe = pulsing(probes[name])
            done[keys[name]] = probe() if name == "ring" else reprobe(probe)
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
