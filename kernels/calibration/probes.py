"""The probes of a calibration: short measurements run inside the ranks (or in-process for one
GPU), each with the code the ring itself runs.

* ``measure_compute``: ``block_attention`` of one ``c x c`` block for several ``c``, every rank
  computing at once (``measure_solo``: one rank at a time);
* ``measure_masked``: the masked blocks of a causal ring, with the fraction they compute;
* ``measure_overlap``: compute with and without a transfer in flight beside it;
* ``measure_ring_pass``: the fixed cost of a real ring pass of tiny blocks;
* ``measure_link_p2p`` / ``measure_link_h2d``: the link, ping-pong and exchange (gloo or
  NCCL), or pinned host-to-device copies (one GPU).

Every timed row keeps its ``samples`` (seconds), ``seconds`` (their median) and ``spread``
(their relative interquartile range, ``probe_spread``): the probe's quality. ``reprobe`` runs a
probe again (at most ``REPROBES`` more times, every rank alike) while the widest spread on any
rank is above ``SPREAD_LIMIT``, and keeps the narrowest attempt: a burst of load from another
process shows as a wide spread, and a prediction must not be made from it.

``kernels.calibration.profile`` fits these rows into a ``Hardware``;
``kernels.calibration.calibrate`` runs them.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence

import numpy as np

from kernels.calibration.profile import TORCH_DTYPES
from ringsim.timer.cost import attention_flops

# A probe whose samples spread wider than this (interquartile range over median) is run again:
# on a quiet machine the probes' spreads are a few percent; a burst of load from another process
# widens them to tens of percent, and a median from such a sample can be off by as much
SPREAD_LIMIT = 0.25
REPROBES = 2  # at most this many more attempts per probe (bounded: a loaded machine stays so)


def probe_spread(samples: Sequence[float]) -> float:
    """Relative interquartile range of ``samples``: ``(q75 - q25) / median`` (0 for one)."""
    q25, q50, q75 = np.percentile(np.asarray(samples, float), [25, 50, 75])
    return float((q75 - q25) / q50) if q50 > 0 else 0.0


def timed(samples: Sequence[float]) -> dict:
    """A probe row's timing fields: ``seconds`` (the median), ``spread`` and ``samples``."""
    samples = [float(t) for t in samples]
    return {
        "seconds": float(np.median(samples)),
        "spread": probe_spread(samples),
        "samples": samples,
    }


def _sample_times(
    fn, repeats: int, sync=lambda: None, min_time_s: float = 0.0, before=lambda: None
) -> list[float]:
    """Seconds of ``fn()`` over ``repeats`` runs after one warm-up, more while under
    ``min_time_s`` (only for local work: a transfer must run the same count on every rank);
    ``before()`` runs untimed before each."""
    fn()
    sync()
    times = []
    start = time.perf_counter()
    while len(times) < repeats or (time.perf_counter() - start < min_time_s and len(times) < 200):
        before()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return times


def _widest_spread(result) -> float:
    """The largest ``spread`` in a probe's result (rows, a row, or a dict of row lists)."""
    if isinstance(result, dict):
        own = result.get("spread", 0.0)
        return max([own] + [_widest_spread(v) for v in result.values() if isinstance(v, list)])
    if isinstance(result, list):
        return max((_widest_spread(r) for r in result if isinstance(r, dict)), default=0.0)
    return 0.0


def _max_over_ranks(value: float) -> float:
    """The largest ``value`` over the ranks of the world group (``value`` without one)."""
    import torch.distributed as dist

    from kernels.distributed.exchange import all_gather_json

    if not dist.is_initialized():
        return value
    return max(all_gather_json(value))


def reprobe(probe, *, limit: float = SPREAD_LIMIT, retries: int = REPROBES, agree=None):
    """``probe()`` again while the widest spread of its rows, over every rank (``agree``,
    default ``_max_over_ranks``: a collective, so every rank decides alike and none waits
    alone), is above ``limit``; at most ``retries`` more attempts. Returns the attempt with
    the narrowest spread, each of its rows (dicts) marked with ``attempts``."""
    agree = agree or _max_over_ranks
    best, best_spread, attempts, spread = None, math.inf, 0, math.inf
    while spread > limit and attempts <= retries:
        attempts += 1
        result = probe()
        spread = agree(_widest_spread(result))
        if best is None or spread < best_spread:
            best, best_spread = result, spread
    _mark(best, attempts)
    return best


def _mark(result, attempts: int) -> None:
    if isinstance(result, dict):
        if "seconds" in result or "step_s" in result:
            result["attempts"] = attempts
        for value in result.values():
            if isinstance(value, list):
                _mark(value, attempts)
    elif isinstance(result, list):
        for row in result:
            _mark(row, attempts)


def measure_compute(
    sizes: Sequence[int],
    *,
    heads: int,
    head_dim: int,
    dtype: str,
    device: str = "cpu",
    repeats: int = 5,
    barrier=lambda: None,
    received: bool = False,
) -> list[dict]:
    """One forward ring step's compute on a full ``c x c`` block: ``block_attention`` (fp32
    output) and the merge into the running ``(out, lse)``, exactly the ring's calls.
    ``received``: on a ``k, v`` block that has just arrived from the previous rank, as the
    ring computes it (see ``_received_samples``; every rank must call it alike)."""
    import torch

    from kernels.blocks.dispatch import block_attention
    from kernels.distributed.ring import merge_out_lse

    rows = []
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    torch_dtype = getattr(torch, TORCH_DTYPES[dtype])
    for c in sizes:
        q, k, v = (
            torch.randn(1, heads, c, head_dim, device=device, dtype=torch_dtype) for _ in "qkv"
        )
        kv, state = torch.stack([k, v]), block_attention(q, k, v, out_dtype=torch.float32)

        def step(block, q=q, state=state):
            return merge_out_lse(*state, *block_attention(q, *block, out_dtype=torch.float32))

        if received:
            samples = _received_samples(step, kv, repeats)
        else:
            barrier()  # every rank computes at the same time, as in the ring
            samples = _sample_times(lambda kv=kv: step(kv), repeats, sync, min_time_s=0.05)
        flops = attention_flops(c, c, heads, head_dim)
        rows.append({"block_tokens": c, "flops": flops, **timed(samples)})
    return rows


def _received_samples(step, kv, repeats: int, active: bool = True) -> list[float]:
    """Seconds of ``step(block)`` on a block that has just arrived: each sample first
    exchanges ``kv`` with the neighbours into a fresh buffer (``rank + 1`` / ``rank - 1``, the
    ring's transfer, untimed), then times the step on what came in. On local gloo ranks such a
    block is slower to compute than one computed over and over (its pages were just written
    by gloo's thread, on whichever core that ran), and a ring step computes exactly such
    blocks. Runs ``repeats + 1`` exchanges on every rank; ``active=False`` ranks only
    exchange (they wait in the next exchange while the others compute)."""
    import torch

    times = []
    for _ in range(max(repeats, 3) + 1):
        block = torch.empty_like(kv)
        post_p2p([("send", kv, _neighbour(1)), ("recv", block, _neighbour(-1))])
        t0 = time.perf_counter()
        if active:
            step(block)
        times.append(time.perf_counter() - t0)
    return times[1:]


def _neighbour(offset: int) -> int:
    import torch.distributed as dist

    return (dist.get_rank() + offset) % dist.get_world_size()


#: The masked blocks probed: name -> (layout, relation of the kv block's owner to the query
#: host: 0 its own block, -1 an earlier host's keys, +1 a later host's).
MASKED_BLOCKS = {
    "contiguous-diagonal": ("contiguous", 0),
    "zigzag-diagonal": ("zigzag", 0),
    "zigzag-early-keys": ("zigzag", -1),
    "zigzag-late-keys": ("zigzag", 1),
}
_HOSTS_OF_RELATION = {0: (0, 0), -1: (1, 0), 1: (0, 1)}  # (query host, kv host), 2-host ring


def _masked_block(name: str, block_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """``(q_pos, k_pos)`` of a masked block of a 2-host causal ring, as its layout deals it."""
    from ringsim.layouts import get_layout

    layout, relation = MASKED_BLOCKS[name]
    q_host, kv_host = _HOSTS_OF_RELATION[relation]
    pos = get_layout(layout).positions(2, 2 * block_tokens)
    return pos[q_host], pos[kv_host]


def measure_masked(
    block_tokens: int,
    *,
    heads: int,
    head_dim: int,
    dtype: str,
    device: str = "cpu",
    repeats: int = 5,
    barrier=lambda: None,
    received: bool = False,
) -> list[dict]:
    """The ring step of each of ``MASKED_BLOCKS`` at block size ``c`` (the ring's calls, with
    the block's global positions and the causal mask), with the tile-granular fraction of the
    block the kernel computes (``ringsim.masks.count_visible``, the simulator's count).
    ``received``: as in ``measure_compute``."""
    import torch

    from kernels.blocks.dispatch import block_attention
    from kernels.blocks.torch_block import TILE
    from kernels.distributed.ring import merge_out_lse
    from ringsim.masks import count_visible

    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    torch_dtype = getattr(torch, TORCH_DTYPES[dtype])
    c = block_tokens
    q, k, v = (torch.randn(1, heads, c, head_dim, device=device, dtype=torch_dtype) for _ in "qkv")
    kv, state = torch.stack([k, v]), block_attention(q, k, v, out_dtype=torch.float32)
    rows = []
    for name in MASKED_BLOCKS:
        q_pos, k_pos = _masked_block(name, c)
        work = count_visible(q_pos, k_pos, causal=True, tile=TILE if device == "cpu" else 64)
        q_t, k_t = (torch.as_tensor(p, device=device) for p in (q_pos, k_pos))

        def step(block, q_t=q_t, k_t=k_t):
            out_b, lse_b = block_attention(
                q, *block, q_pos=q_t, k_pos=k_t, causal=True, out_dtype=torch.float32
            )
            return merge_out_lse(*state, out_b, lse_b)

        if received:
            samples = _received_samples(step, kv, repeats)
        else:
            barrier()
            samples = _sample_times(lambda step=step: step(kv), repeats, sync, min_time_s=0.05)
        full = attention_flops(c, c, heads, head_dim)
        rows.append(
            {
                "block_tokens": c,
                "block": name,
                "work": work / c**2,
                "flops": full * work / c**2,
                **timed(samples),
            }
        )
    return rows


def measure_solo(
    sizes: Sequence[int],
    *,
    heads: int,
    head_dim: int,
    dtype: str,
    repeats: int = 5,
    received: bool = False,
) -> list[dict]:
    """The full-block ring step of ``measure_compute`` on one rank at a time while the others
    wait (each rank returns its own turns' rows). ``received``: on a block just received, as
    in ``measure_compute`` (the others exchange with it, then wait in the next exchange)."""
    import torch
    import torch.distributed as dist

    if received:
        from kernels.blocks.dispatch import block_attention
        from kernels.distributed.ring import merge_out_lse

        torch_dtype = getattr(torch, TORCH_DTYPES[dtype])
        rows = []
        for c in sizes:
            q, k, v = (torch.randn(1, heads, c, head_dim, dtype=torch_dtype) for _ in "qkv")
            state = block_attention(q, k, v, out_dtype=torch.float32)

            def step(kv, q=q, state=state):
                return merge_out_lse(*state, *block_attention(q, *kv, out_dtype=torch.float32))

            for turn in range(dist.get_world_size()):
                mine = dist.get_rank() == turn
                samples = _received_samples(step, torch.stack([k, v]), repeats, active=mine)
                if mine:
                    flops = attention_flops(c, c, heads, head_dim)
                    rows.append({"block_tokens": c, "flops": flops, **timed(samples)})
        return rows
    rows = []
    for turn in range(dist.get_world_size()):
        dist.barrier()
        if dist.get_rank() == turn:
            rows = measure_compute(
                sizes, heads=heads, head_dim=head_dim, dtype=dtype, repeats=repeats
            )
        dist.barrier()
    return rows


def measure_overlap(
    block_tokens: int,
    *,
    heads: int,
    head_dim: int,
    dtype: str,
    repeats: int = 5,
    kv_heads: int | None = None,
) -> dict:
    """Does a transfer progress while the rank computes? Median seconds of the full-block step
    alone (``compute_s``), of the exchange of its ``k, v`` alone (``transfer_s``) and of a
    ring step (``step_s``: post the exchange, compute, wait), every rank at once. Perfect
    overlap makes ``step = max``, none ``step = compute + transfer``;
    ``Calibration.overlap_efficiency`` reads which (and contention, ``step > compute +
    transfer``). ``kv_heads``: for a GQA run, so the message is the run's (default ``heads``)."""
    import torch
    import torch.distributed as dist

    from kernels.blocks.dispatch import block_attention
    from kernels.distributed.repeats import start_line
    from kernels.distributed.ring import merge_out_lse

    rank, hosts = dist.get_rank(), dist.get_world_size()
    nxt, prv = (rank + 1) % hosts, (rank - 1) % hosts
    torch_dtype = getattr(torch, TORCH_DTYPES[dtype])
    c = block_tokens
    q = torch.randn(1, heads, c, head_dim, dtype=torch_dtype)
    k, v = (torch.randn(1, kv_heads or heads, c, head_dim, dtype=torch_dtype) for _ in "kv")
    incoming = [torch.empty_like(k), torch.empty_like(v)]
    state = block_attention(q, k, v, out_dtype=torch.float32)

    def compute():
        merge_out_lse(*state, *block_attention(q, k, v, out_dtype=torch.float32))

    def post():  # as a ring step posts its block: k and v, two messages at once
        ops = [dist.P2POp(dist.isend, t, nxt) for t in (k, v)]
        ops += [dist.P2POp(dist.irecv, t, prv) for t in incoming]
        return dist.batch_isend_irecv(ops)

    def transfer():
        for work in post():
            work.wait()

    def step():
        works = post()
        compute()
        for work in works:
            work.wait()

    times = {"compute_s": [], "transfer_s": [], "step_s": []}
    compute(), transfer(), step()
    for _ in range(max(repeats, 3)):  # interleaved: a drifting load hits all three alike
        for key, fn in (("compute_s", compute), ("transfer_s", transfer), ("step_s", step)):
            start_line()  # as a timed ring pass starts
            t0 = time.perf_counter()
            fn()
            times[key].append(time.perf_counter() - t0)
    row = {key: statistics.median(values) for key, values in times.items()}
    spread = max(probe_spread(values) for values in times.values())
    return {
        "block_tokens": c,
        "bytes": 2 * k.numel() * k.element_size(),
        **row,
        "spread": spread,
        "samples": times,
    }


# (tokens per host, heads, head_dim) of the near-empty ring pass that measures a ring call's
# fixed cost: its blocks take a call's overhead and its messages a latency, nothing more
PASS_PROBE = (2, 1, 1)


def measure_ring_pass(*, layout: str, dtype: str, repeats: int = 5) -> dict:
    """A ring call's fixed cost, paid the way the comparison pays it: ``run_ring`` (timed as
    every measured ring is, ``kernels.distributed.repeats``) on every rank of the world group
    at once, with ``PASS_PROBE`` blocks (near-zero compute, 8-byte messages).
    The probe pass is never causal, even for a causal run: a tiny masked block costs about
    twice a full one on the torch path (it builds its mask), which the simulation of the
    probe's steps (each block at ``block_s``) would wrongly book as fixed cost; masked blocks
    are priced at the run's own block size instead (``Calibration.masked_speed_at``).
    Returns ``{layout, causal, hosts, block_tokens, heads, head_dim, seconds}``, ``seconds``
    the median over repeats of the slowest rank's wall time (gathered: every rank returns the
    same row), and ``block_s``: the slowest rank's step on one such block.
    ``Calibration.pass_overhead`` takes from it the simulated time of its steps."""
    import torch.distributed as dist

    from kernels.distributed.exchange import all_gather_json
    from kernels.distributed.launch import RunConfig, run_ring
    from kernels.distributed.repeats import slowest_per_pass

    c, heads, head_dim = PASS_PROBE
    hosts = dist.get_world_size()
    config = RunConfig(
        seq_len=c * hosts,
        heads=heads,
        head_dim=head_dim,
        layout=layout,
        causal=False,
        dtype=TORCH_DTYPES[dtype],
        backward=False,
        repeats=max(repeats, 3),
        warmup=1,
        return_tensors=False,
    )
    times = run_ring(dist.get_rank(), hosts, config)["forward_s"]
    # its blocks' cost (the ring's step on a just-received block of this shape): the per-call
    # overhead of the profile is fitted at the run's shape, where it also holds per-head work
    (block,) = measure_compute(
        [c], heads=heads, head_dim=head_dim, dtype=dtype, repeats=max(repeats, 3), received=True
    )
    every = all_gather_json((times, block["seconds"]))
    slowest = slowest_per_pass([t for t, _ in every])
    return {
        "layout": layout,
        "causal": False,
        "hosts": hosts,
        "block_tokens": c,
        "heads": heads,
        "head_dim": head_dim,
        **timed(slowest),
        "block_s": max(b for _, b in every),
    }


# Messages one ring step posts: k and v, separately. The exchange probe posts the same, so its
# fixed cost is a step's: each gloo message pays a fixed cost, and a one-message probe prices
# every step one message short (results/notes-calibration.md).
KV_MESSAGES = 2


def measure_link_p2p(
    sizes: Sequence[int], *, repeats: int = 5, device: str = "cpu", parts: int = KV_MESSAGES
) -> dict:
    """Ping-pong (rank 0 <-> 1, one message at a time) and ring exchange (every rank sends to
    ``rank + 1`` and receives from ``rank - 1`` at once; ``parts`` messages of ``size /
    parts`` bytes each way, as a ring step sends ``k`` and ``v``) with ``batch_isend_irecv``, each
    sample from ``start_line`` as a timed ring pass starts: back to back on a loaded machine,
    about half the exchanges wait a scheduler tick, and a probe that does not start as the
    ring does measures the scheduler, not the link (results/notes-calibration.md)."""
    import torch
    import torch.distributed as dist

    from kernels.distributed.repeats import start_line

    rank, hosts = dist.get_rank(), dist.get_world_size()
    nxt, prv = (rank + 1) % hosts, (rank - 1) % hosts
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    result = {"pingpong": [], "exchange": []}
    for n in sizes:
        buf = torch.zeros(max(parts, n // 4), dtype=torch.float32, device=device)
        other = torch.empty_like(buf)
        sends, recvs = buf.chunk(parts), other.chunk(parts)

        def pingpong(buf=buf, other=other):
            if rank == 0:
                post_p2p([("send", buf, 1)])
                post_p2p([("recv", other, 1)])
            elif rank == 1:
                post_p2p([("recv", other, 0)])
                post_p2p([("send", buf, 0)])

        def exchange(sends=sends, recvs=recvs):
            post_p2p([("send", t, nxt) for t in sends] + [("recv", t, prv) for t in recvs])

        count = repeats * (2 if n <= 2**22 else 1)  # the same on every rank
        t_pp = [t / 2 for t in _sample_times(pingpong, count, sync, before=start_line)]  # one way
        t_ex = _sample_times(exchange, count, sync, before=start_line)
        result["pingpong"].append({"bytes": buf.numel() * 4, **timed(t_pp)})
        result["exchange"].append({"bytes": buf.numel() * 4, **timed(t_ex)})
    return result


def post_p2p(ops: list[tuple]) -> None:
    """Post ``(kind, tensor, peer)`` sends and receives together (``batch_isend_irecv``, as a
    ring step does) and wait for all of them."""
    import torch.distributed as dist

    p2p = [
        dist.P2POp(dist.isend if kind == "send" else dist.irecv, tensor, peer)
        for kind, tensor, peer in ops
    ]
    for work in dist.batch_isend_irecv(p2p):
        work.wait()


def measure_link_h2d(sizes: Sequence[int], *, repeats: int = 5) -> list[dict]:
    """Host-to-device copies from pinned memory (the emulated link of one GPU ring member)."""
    import torch

    rows = []
    for n in sizes:
        host = torch.empty(max(1, n // 4), dtype=torch.float32).pin_memory()
        dev = torch.empty(host.shape, dtype=torch.float32, device="cuda")
        samples = _sample_times(
            lambda host=host, dev=dev: dev.copy_(host, non_blocking=True),
            repeats,
            torch.cuda.synchronize,
        )
        rows.append({"bytes": host.numel() * 4, **timed(samples)})
    return rows
