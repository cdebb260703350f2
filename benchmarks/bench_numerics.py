"""Ring forward on P virtual hosts against one dense NumPy attention of the same shape.

    .venv/bin/python benchmarks/bench_numerics.py            # P=8, N=8192, d=64, float32
    .venv/bin/python benchmarks/bench_numerics.py --quick    # N=2048, fewer repeats
    .venv/bin/python benchmarks/bench_numerics.py --seq-len 65536 --no-dense --repeats 1

``--no-dense`` (for an N whose N x N scores do not fit: 16 GiB at N = 65536) times the ring
alone (its first run traced and recorded for memory) and checks 64 random query rows against
float64; compare with dense at the largest N where it fits (e.g. ``--seq-len 16384``).
``--mask full`` or ``causal`` runs one mask only.

Both run in the same process on the same inputs, interleaved (dense, ring, dense, ring, ...) so
that machine noise hits both alike; we report median times and their ratio (target: ring at most
1.25x dense), then the peak traced memory (``tracemalloc``) of one ring run divided by P (the
P virtual hosts share this process) against the peak of the dense run, which holds the whole
N x N score matrix.
"""

from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc
from collections.abc import Callable

import numpy as np

from ringsim import RingRecord, block_attention, ring_attention
from ringsim.numerics.attention import empty_partial, merge

TARGET_RATIO = 1.25


def dense_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool) -> np.ndarray:
    """Plain ``softmax(q k^T * scale) v`` in the input dtype, the whole ``(N, N)`` matrix."""
    scores = q @ k.T
    scores *= q.dtype.type(1 / np.sqrt(q.shape[-1]))
    if causal:
        above_diagonal = np.tri(scores.shape[0], k=-1, dtype=bool).T  # a view, no copy
        np.copyto(scores, q.dtype.type(-np.inf), where=above_diagonal)
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    scores /= scores.sum(axis=-1, keepdims=True)
    return scores @ v


def interleaved_seconds(runs: list[Callable[[], object]], repeats: int) -> list[list[float]]:
    """Time every callable ``repeats`` times, interleaved; one warm-up each first."""
    for run in runs:
        run()
    times: list[list[float]] = [[] for _ in runs]
    for _ in range(repeats):
        for run, sink in zip(runs, times, strict=True):
            start = time.perf_counter()
            run()
            sink.append(time.perf_counter() - start)
    return times


def peak_bytes(run: Callable[[], object]) -> int:
    tracemalloc.start()
    tracemalloc.reset_peak()
    run()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


def host_working_set(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, hosts: int, causal: bool, record=None
) -> int:
    """Bytes one real host needs: its held blocks at the fullest step, plus one step's temps.
    ``record``: the ``RingRecord`` of a run already made (else one is made here)."""
    if record is None:
        record = RingRecord()
        ring_attention(q, k, v, hosts=hosts, causal=causal, record=record)
    held = max(cell["nbytes"] for step in record.steps for cell in step)
    c = q.shape[-2] // hosts
    q_block, k_block, v_block = q[:c], k[:c], v[:c]
    state = empty_partial(q_block.shape, np.float32)
    pos = np.arange(c)
    step = lambda: merge(
        state,
        block_attention(
            q_block, k_block, v_block, scale=0.125, q_pos=pos, k_pos=pos, causal=causal
        ),
    )
    return held + peak_bytes(step)


def sampled_rows_error(out: np.ndarray, q, k, v, causal: bool, rows: int = 64) -> float:
    """Max error of ``rows`` random query rows of ``out`` against float64 attention."""
    pick = np.random.default_rng(1).choice(q.shape[0], rows, replace=False)
    scores = q[pick].astype(np.float64) @ k.T.astype(np.float64) / np.sqrt(q.shape[-1])
    if causal:
        scores[np.arange(k.shape[0]) > pick[:, None]] = -np.inf
    p = np.exp(scores - scores.max(axis=-1, keepdims=True))
    ref = (p / p.sum(axis=-1, keepdims=True)) @ v.astype(np.float64)
    return float(np.abs(out[pick] - ref).max())


def bench(hosts: int, seq_len: int, dim: int, causal: bool, repeats: int, dense_too=True) -> dict:
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((seq_len, dim)).astype(np.float32) for _ in range(3))
    dense = lambda: dense_attention(q, k, v, causal)
    ring = lambda: ring_attention(q, k, v, hosts=hosts, causal=causal)
    if not dense_too:  # one traced, recorded run gives time, peak, held blocks and the error
        record = RingRecord()
        tracemalloc.start()
        start = time.perf_counter()
        out = ring_attention(q, k, v, hosts=hosts, causal=causal, record=record)
        t_ring = [time.perf_counter() - start]
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        err = sampled_rows_error(out, q, k, v, causal)
        assert err < 1e-4 * np.abs(v).max(), f"ring and float64 disagree by {err}"
        for _ in range(repeats - 1):
            start = time.perf_counter()
            ring()
            t_ring.append(time.perf_counter() - start)
        return dict(
            ring_s=statistics.median(t_ring),
            ring_min_s=min(t_ring),
            ring_peak_per_host=peak / hosts,
            error=err,
            host_set=host_working_set(q, k, v, hosts, causal, record),
        )
    err = np.abs(ring().astype(np.float64) - dense()).max()  # same answer, or the timing is moot
    assert err < 1e-4 * np.abs(v).max(), f"ring and dense disagree by {err}"
    t_dense, t_ring = interleaved_seconds([dense, ring], repeats)
    return dict(
        median_ratio=statistics.median(t_ring) / statistics.median(t_dense),
        best_ratio=min(t_ring) / min(t_dense),
        dense_s=statistics.median(t_dense),
        ring_s=statistics.median(t_ring),
        dense_peak=peak_bytes(dense),
        ring_peak_per_host=peak_bytes(ring) / hosts,
        host_set=host_working_set(q, k, v, hosts, causal),
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N=2048 and 3 repeats")
    parser.add_argument("--hosts", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=None, help="default 8192 (quick: 2048)")
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=None, help="default 9 (quick: 3)")
    parser.add_argument("--no-dense", action="store_true", help="the ring alone (N x N too big)")
    parser.add_argument("--mask", choices=["both", "full", "causal"], default="both")
    args = parser.parse_args(argv)
    seq_len = args.seq_len or (2048 if args.quick else 8192)
    repeats = args.repeats or (3 if args.quick else 9)
    masks = {"both": (False, True), "full": (False,), "causal": (True,)}[args.mask]

    print(
        f"ring forward vs dense NumPy attention: P={args.hosts}, N={seq_len}, d={args.dim}, "
        f"float32, one head, median of {repeats} interleaved runs"
    )
    mib = 2.0**20
    if args.no_dense:
        print(
            f"{'mask':<7} {'ring s':>8} {'min s':>8} {'ring peak/P':>12} {'one host':>9} "
            f"{'max error (64 rows vs float64)':>31}"
        )
        for causal in masks:
            r = bench(args.hosts, seq_len, args.dim, causal, repeats, dense_too=False)
            print(
                f"{'causal' if causal else 'full':<7} {r['ring_s']:8.3f} {r['ring_min_s']:8.3f} "
                f"{r['ring_peak_per_host'] / mib:8.2f} MiB {r['host_set'] / mib:5.2f} MiB "
                f"{r['error']:31.1e}"
            )
        return
    print(
        f"{'mask':<7} {'dense s':>8} {'ring s':>8} {'ratio':>6} {'best':>6} {'target':>6} "
        f"{'dense peak':>11} {'ring peak/P':>12} {'ratio':>7} {'one host':>9}"
    )
    for causal in masks:
        r = bench(args.hosts, seq_len, args.dim, causal, repeats)
        verdict = "ok" if r["median_ratio"] <= TARGET_RATIO else "MISS"
        print(
            f"{'causal' if causal else 'full':<7} {r['dense_s']:8.3f} {r['ring_s']:8.3f} "
            f"{r['median_ratio']:6.2f} {r['best_ratio']:6.2f} {verdict:>6} "
            f"{r['dense_peak'] / mib:7.1f} MiB {r['ring_peak_per_host'] / mib:8.2f} MiB "
            f"{r['ring_peak_per_host'] / r['dense_peak']:7.4f} {r['host_set'] / mib:5.2f} MiB"
        )
    print(
        "ratio: median ring / median dense (target <= 1.25); best: fastest ring / fastest dense; "
        "one host: held blocks + one block step's temporaries"
    )


if __name__ == "__main__":
    main()
