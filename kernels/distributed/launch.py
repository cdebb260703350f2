"""Running the real ring: P local processes (gloo on CPU) or torchrun ranks (NCCL on GPUs).

``launch(fn, hosts, ...)`` starts ``hosts`` rank processes joined by a process group, runs
``fn(rank, hosts, *args)`` in each and returns their answers; a rank that fails or hangs ends
the whole run with a ``RingError`` in bounded time (a long run's ranks say they are alive,
``kernels.distributed.progress.alive``, and only a rank silent for ``stall_s`` counts as hung).
``RunConfig`` is one complete problem on random inputs (identical on every rank) and
``run_ring`` one rank's part of it, with timelines; the tests, ``kernels.calibration.measure``,
``kernels.calibration.calibrate`` and torchrun all run rings this way.

On GPUs: ``torchrun --nproc-per-node P -m kernels.distributed.launch --seq-len N ...``.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import math
import os
import queue
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist

from kernels.distributed.exchange import all_gather_json
from kernels.distributed.progress import STARTUP_S, Limits, Pulses, joined
from kernels.distributed.repeats import TimedRepeats, rank_device
from kernels.distributed.ring import (
    DEFAULT_TIMEOUT_S,
    Ring,
    RingError,
    agreement_header,
    check_agreement,
    ring_attention,
    shard,
    unshard,
)
from ringsim.checks import check_segment_ids
from ringsim.files import write_json
from ringsim.layouts import layout_names


def rank_cores(hosts: int, threads: int, backend: str) -> list[set[int]] | None:
    """The CPU cores each rank is pinned to: ``threads`` cores of its own, when the machine
    has enough (else ``None``: the ranks share all cores, as an oversubscribed test must).

    A host of the simulated ring owns its hardware. Unpinned, the OS migrates the ranks and
    gloo's transport threads between cores, and a wake-up after a migration costs milliseconds
    (measured here on 2 cores: posting a 1 MB ``isend`` took 0.38 ms median but 3.4 ms at the
    90th percentile unpinned, 0.86 ms pinned). GPU ranks own their device; they are not pinned.
    """
    if backend != "gloo" or not hasattr(os, "sched_getaffinity"):
        return None
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < hosts * threads:
        return None
    return [set(cores[r * threads : (r + 1) * threads]) for r in range(hosts)]


# Seconds between a rank's checks that its launcher is alive (where prctl is not available)
PARENT_POLL_S = 1.0
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(parent_pid: int) -> None:
    """Make this process (a rank) end when its launcher ``parent_pid`` ends, whatever ends it.

    ``daemon=True`` and the launcher's ``finally`` only run when the launcher exits through
    Python; a SIGKILL (or a SIGTERM with Python's default handler) skips both, and the ranks,
    re-parented to PID 1, would compute (or hang) forever. On Linux ``prctl(PR_SET_PDEATHSIG,
    SIGKILL)`` has the kernel kill the rank the moment the launcher dies; a launcher that died
    before the call is caught by comparing ``getppid``. Elsewhere a daemon thread polls the
    parent every ``PARENT_POLL_S``."""
    armed = False
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            armed = libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
        except (OSError, AttributeError):
            armed = False
    if os.getppid() != parent_pid:  # the launcher is already gone
        os._exit(1)
    if not armed:

        def watch() -> None:
            while os.getppid() == parent_pid:
                time.sleep(PARENT_POLL_S)
            os._exit(1)

        threading.Thread(target=watch, name="ringsim-parent-watch", daemon=True).start()


# Signals that end the launcher through Python (``SystemExit``), so its ``finally`` runs:
# ``kill`` (SIGTERM) and a closed terminal (SIGHUP); Ctrl-C is Python's KeyboardInterrupt
CLEAN_EXIT_SIGNALS = (signal.SIGTERM, *((signal.SIGHUP,) if hasattr(signal, "SIGHUP") else ()))


@contextlib.contextmanager
def _terminate_cleanly():
    """While the ranks run, SIGTERM and SIGHUP end the launcher through Python
    (``SystemExit``), so its ``finally`` kills the ranks and removes the rendezvous folder.
    Only from the main thread and only over a signal's default handler: a handler the caller
    installed is left alone."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise SystemExit(128 + signum)

    mine = [s for s in CLEAN_EXIT_SIGNALS if signal.getsignal(s) is signal.SIG_DFL]
    for sig in mine:
        signal.signal(sig, stop)
    try:
        yield
    finally:
        for sig in mine:
            signal.signal(sig, signal.SIG_DFL)


# The launcher's rendezvous folders in the temporary directory: ``ringsim-rdv-*``, each locked
# (``flock``) by its launcher for as long as it lives
RENDEZVOUS_PREFIX = "ringsim-rdv-"


def clean_stale_rendezvous(folder: str | None = None) -> list[str]:
    """Remove the rendezvous folders of launchers that are gone from ``folder`` (default: the
    temporary directory); returns the paths removed.

    A launcher holds an exclusive ``flock`` on its folder while it lives, and the kernel drops
    it however the launcher ends; a folder nobody holds belongs to a launcher that could not
    clean up (SIGKILL, a power cut) and is removed by the next one. Live launchers' folders,
    and anything else in the temporary directory, are left alone."""
    import fcntl

    removed = []
    base = tempfile.gettempdir() if folder is None else folder
    try:
        names = sorted(n for n in os.listdir(base) if n.startswith(RENDEZVOUS_PREFIX))
    except OSError:
        return removed
    for name in names:
        path = os.path.join(base, name)
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held: its launcher is alive
            os.close(fd)
            continue
        try:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        finally:
            os.close(fd)
    return removed


@contextlib.contextmanager
def rendezvous_folder():
    """A fresh folder for the ranks' file rendezvous, removed when the ``with`` block ends
    (an exception, Ctrl-C, SIGTERM and SIGHUP included: ``_terminate_cleanly``). It is made
    under a hidden name, locked, then renamed to ``ringsim-rdv-*``, so no other launcher ever
    sees it unlocked; stale ones (a SIGKILLed launcher's) are removed first
    (``clean_stale_rendezvous``). Without ``fcntl`` (not POSIX): a plain temporary folder."""
    try:
        import fcntl
    except ImportError:
        with tempfile.TemporaryDirectory(prefix=RENDEZVOUS_PREFIX) as tmp:
            yield tmp
        return
    clean_stale_rendezvous()
    staging = tempfile.mkdtemp(prefix="." + RENDEZVOUS_PREFIX)
    fd = os.open(staging, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        path = os.path.join(os.path.dirname(staging), os.path.basename(staging)[1:])
        os.rename(staging, path)
        staging = path
        yield path
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        os.close(fd)


def loopback_interface() -> str | None:
    """The name of the loopback network interface (``lo`` on Linux, ``lo0`` on macOS), or
    None when there is none to name."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except (OSError, AttributeError):
        return None
    return next((n for n in names if n in ("lo", "lo0")), None)


def _worker_main(
    rank,
    hosts,
    init_file,
    backend,
    timeout_s,
    threads,
    cores,
    fn,
    args,
    results,
    parent_pid,
    pulses,
    slot,
):
    die_with_parent(parent_pid)
    pulses.attach(slot)
    try:
        if cores is not None:
            os.sched_setaffinity(0, cores)  # before torch starts its threads
        torch.set_num_threads(threads)
        if backend == "nccl":
            torch.cuda.set_device(rank % torch.cuda.device_count())
        if backend == "gloo" and not os.environ.get("GLOO_SOCKET_IFNAME", "").strip():
            # local ranks talk over loopback only: gloo would otherwise bind to the address the
            # host name resolves to, which may face a network (or not resolve at all); an empty
            # GLOO_SOCKET_IFNAME is no choice of interface (gloo reads it as unset)
            lo = loopback_interface()
            if lo is not None:
                os.environ["GLOO_SOCKET_IFNAME"] = lo
        try:
            dist.init_process_group(
                backend,
                init_method=f"file://{init_file}",
                rank=rank,
                world_size=hosts,
                timeout=timedelta(seconds=timeout_s),
            )
        except Exception as err:
            raise RingError(
                f"rank {rank}: rendezvous of {hosts} ranks failed within {timeout_s:g} s "
                f"(a rank never joined?): {err}"
            ) from err
        joined()  # the deadline and the allowed silence count from here
        try:
            results.put((rank, "ok", fn(rank, hosts, *args)))
        finally:
            dist.destroy_process_group()
    except BaseException as err:  # report every failure to the parent, then exit
        results.put((rank, "error", f"{type(err).__name__}: {err}\n{traceback.format_exc()}"))


def launch(
    fn: Callable,
    hosts: int,
    *,
    args: tuple = (),
    backend: str = "gloo",
    timeout_s: float = DEFAULT_TIMEOUT_S,
    threads: int = 1,
    ranks: Sequence[int] | None = None,
    deadline_s: float | None = None,
    stall_s: float | None = None,
    pin: bool = True,
) -> list:
    """Run ``fn(rank, hosts, *args)`` in ``hosts`` fresh processes joined by ``backend``.

    ``fn`` must be importable (a module-level function). Each process gets ``threads`` torch
    threads and ``timeout_s`` for the rendezvous and every collective/transfer. ``ranks``
    starts only some ranks (to test a rank that never joins). Returns the results by rank;
    raises ``RingError`` naming every rank that failed, or that did not answer within
    ``deadline_s`` (default: ``2 * timeout_s + 30``) of joining the process group (a rank's
    start-up is not its work: ``STARTUP_S`` plus the rendezvous' ``timeout_s`` are allowed
    for it). ``stall_s``: a rank that says it is alive (``kernels.distributed.progress.alive``,
    e.g. once per probe or repeat) keeps running past ``deadline_s`` until it falls silent for
    ``stall_s`` (``stall_window`` sizes it from the work). Once a rank failed, the others get
    ``timeout_s + 30`` more (their transfers with it time out). ``pin``: give each gloo rank
    cores of its own when there are enough. Local gloo ranks bind to the loopback interface.
    """
    ctx = torch.multiprocessing.get_context("spawn")
    results = ctx.Queue()
    ranks = list(range(hosts)) if ranks is None else list(ranks)
    deadline_s = 2 * timeout_s + 30 if deadline_s is None else deadline_s
    pulses = Pulses(ctx, len(ranks))
    limits = Limits(deadline_s, stall_s, timeout_s + 30, pulses, startup_s=STARTUP_S + timeout_s)
    cores = rank_cores(hosts, threads, backend) if pin else None
    with rendezvous_folder() as tmp:
        init_file = os.path.join(tmp, "rendezvous")
        procs = [
            ctx.Process(
                target=_worker_main,
                args=(
                    r,
                    hosts,
                    init_file,
                    backend,
                    timeout_s,
                    threads,
                    None if cores is None else cores[r],
                    fn,
                    args,
                    results,
                    os.getpid(),
                    limits.pulses,
                    slot,
                ),
                daemon=True,
            )
            for slot, r in enumerate(ranks)
        ]
        answers: dict[int, tuple[str, object]] = {}
        with _terminate_cleanly():
            ended = _run_ranks(procs, ranks, results, answers, limits)
    failures = [
        f"rank {r}: {answers[r][1]}" for r in ranks if r in answers and answers[r][0] != "ok"
    ]
    missing = [r for r in ranks if r not in answers]
    if missing:
        failures.append(f"ranks {missing} did not answer (died or hung) before the deadline")
        for i, r in enumerate(ranks):
            if r in missing:  # ended by itself (its exit code), or given up by the launcher
                code = ended[r]
                failures.append(
                    f"rank {r}: exited ({code})" if code is not None else _silence(limits, i, r)
                )
    if failures:
        raise RingError("ring run failed:\n" + "\n".join(failures))
    return [answers[r][1] for r in ranks]


def _silence(limits: Limits, slot: int, rank: int) -> str:
    """Why rank ``rank`` (slot ``slot``) was given up: it never joined, or how long it was
    silent."""
    now, pulses = time.monotonic(), limits.pulses
    if math.isnan(pulses.joined_at(slot)):
        return (
            f"rank {rank}: never joined the process group ({now - pulses.created:.0f} s after "
            f"it was started; allowed: {limits.startup_s:g} s)"
        )
    said = f"rank {rank}: last sign of life {now - pulses.last(slot):.0f} s ago"
    if limits.stall_s is None:
        return f"{said} (deadline: {limits.deadline_s:g} s after joining)"
    return f"{said} (allowed silence: {limits.stall_s:g} s)"


def _run_ranks(procs, ranks, results, answers: dict, limits: Limits) -> dict[int, int | None]:
    """Start the ranks and collect their answers into ``answers`` until every rank answered,
    all died, or one was given up (``Limits``); on every way out (an exception, Ctrl-C,
    SIGTERM's ``SystemExit``) no rank is left running: the finished ones are joined, the rest
    killed. Returns each rank's exit code, ``None`` for those the launcher had to kill."""
    finished = False
    ended: dict[int, int | None] = {}
    try:
        for p in procs:
            p.start()
        while len(answers) < len(ranks):
            waiting = [i for i, r in enumerate(ranks) if r not in answers]
            remaining = min(limits.give_up_at(i) for i in waiting) - time.monotonic()
            if remaining <= 0:
                break
            try:
                rank, status, value = results.get(timeout=min(remaining, 1.0))
            except queue.Empty:
                if all(not p.is_alive() for p in procs) and results.empty():
                    break
                continue
            answers[rank] = (status, value)
            if status != "ok" and limits.failed_at is None:
                limits.failed_at = time.monotonic()
        finished = True
    finally:
        for r, p in zip(ranks, procs, strict=True):
            if finished and r in answers:  # answered: give it time to leave the process group
                p.join(timeout=5.0)
            ended[r] = p.exitcode
            if p.is_alive():
                p.kill()
                p.join()
    return ended


@dataclass(frozen=True)
class RunConfig:
    """One ring attention problem with inputs drawn from ``seed`` (identical on every rank)."""

    seq_len: int
    heads: int = 2
    kv_heads: int | None = None
    head_dim: int = 16
    batch: int = 1
    layout: str = "contiguous"
    causal: bool = False
    dtype: str = "float32"
    seed: int = 0
    backward: bool = True
    repeats: int = 1
    warmup: int = 0
    block_backend: str = "auto"
    timeout_s: float = DEFAULT_TIMEOUT_S
    return_tensors: bool = True
    segment_ids: tuple[int, ...] | None = None  # packed documents: one id per token

    def segments(self) -> np.ndarray | None:
        return None if self.segment_ids is None else np.asarray(self.segment_ids, np.int64)

    def inputs(self, device: torch.device) -> tuple[torch.Tensor, ...]:
        """Full ``q, k, v, dout`` ``(batch, heads, N, d)``, same on every rank."""
        gen = torch.Generator().manual_seed(self.seed)
        kv_heads = self.kv_heads or self.heads
        dtype = getattr(torch, self.dtype)

        def draw(h):
            x = torch.randn(self.batch, h, self.seq_len, self.head_dim, generator=gen)
            return x.to(device=device, dtype=dtype)

        return draw(self.heads), draw(kv_heads), draw(kv_heads), draw(self.heads)


def run_ring(rank: int, hosts: int, config: RunConfig, group=None) -> dict:
    """One rank's part of ``config``: forward (and backward) ``repeats`` times, timelines of
    the last repeat (and ``forward_timelines``: the forward's of every timed repeat). Returns
    this rank's output/gradients (numpy) and resolved timelines."""
    device = rank_device()
    q_full, k_full, v_full, dout_full = config.inputs(device)
    q, k, v, dout = (
        shard(x, config.layout, hosts, rank, config.segments())
        for x in (q_full, k_full, v_full, dout_full)
    )
    timing = TimedRepeats(config.warmup, config.repeats, device=device, group=group)
    result: dict = {"rank": rank, "forward_timelines": []}
    scale = 1.0 / math.sqrt(config.head_dim)
    for i in timing:
        ring = Ring(
            config.layout,
            config.causal,
            config.seq_len,
            group,
            config.block_backend,
            config.timeout_s,
            record=True,
            segment_ids=check_segment_ids(config.segments(), config.seq_len),
        )
        if i == 0:
            check_agreement(ring, agreement_header(ring, q, k, v, scale))
        qr, kr, vr = (x.detach().clone().requires_grad_(config.backward) for x in (q, k, v))
        with timing.forward():
            out = ring_attention(qr, kr, vr, scale=scale, ring=ring, check=False)
        if config.backward:
            with timing.backward():
                out.backward(dout)
        if timing.timed:
            result["forward_timelines"].append(ring.forward_timeline.resolve(ring.clock))
    result.update(forward_s=timing.forward_s, backward_s=timing.backward_s)
    timed = result["forward_timelines"]  # the last pass's, already resolved if it was timed
    result["forward_timeline"] = timed[-1] if timed else ring.forward_timeline.resolve(ring.clock)
    if config.backward:
        result["backward_timeline"] = ring.backward_timeline.resolve(ring.clock)
    if config.return_tensors:
        result["out"] = out.detach().cpu().double().numpy()
        if config.backward:
            result.update(
                dq=qr.grad.cpu().double().numpy(),
                dk=kr.grad.cpu().double().numpy(),
                dv=vr.grad.cpu().double().numpy(),
            )
    return result


def run_configs(rank: int, hosts: int, configs: Sequence[RunConfig]) -> list[dict | str]:
    """Several problems in one process group (process start-up is the slow part on CPU).
    A ``ValueError`` (e.g. ranks that disagree) is returned as its message, not raised."""
    results = []
    for config in configs:
        try:
            results.append(run_ring(rank, hosts, config))
        except ValueError as err:
            results.append(f"ValueError: {err}")
    return results


def assemble(
    results: Sequence[dict], key: str, layout: str, segment_ids: np.ndarray | None = None
) -> np.ndarray:
    """Per-rank arrays ``results[r][key]`` back in the original token order."""
    return unshard([torch.from_numpy(r[key]) for r in results], layout, segment_ids).numpy()


def main(argv: Sequence[str] | None = None) -> int:
    """``torchrun --nproc-per-node P -m kernels.distributed.launch --seq-len N [...]``: one ring
    run on NCCL
    (gloo without GPUs); rank 0 prints a JSON line with timings and the error vs reference."""
    parser = argparse.ArgumentParser(prog="python -m kernels.distributed.launch")
    parser.add_argument("--seq-len", type=int, required=True)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--kv-heads", type=int, default=None)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--layout", default="contiguous", choices=layout_names())
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--out", default=None, help="write rank 0's JSON here")
    args = parser.parse_args(argv)
    use_cuda = torch.cuda.is_available()
    if use_cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group("nccl" if use_cuda else "gloo", timeout=timedelta(seconds=args.timeout))
    try:
        rank, hosts = dist.get_rank(), dist.get_world_size()
        config = RunConfig(
            args.seq_len,
            args.heads,
            args.kv_heads,
            args.head_dim,
            1,
            args.layout,
            args.causal,
            args.dtype,
            repeats=args.repeats,
            warmup=1,
            timeout_s=args.timeout,
        )
        res = run_ring(rank, hosts, config)
        outs = all_gather_json(res)
        if rank == 0:
            summary = summarize_run(outs, config)
            print(json.dumps(summary))
            if args.out:
                write_json(args.out, summary)
    finally:
        dist.destroy_process_group()
    return 0


def summarize_run(results: Sequence[dict], config: RunConfig) -> dict:
    """Timings of a run (median over repeats of the slowest rank) and the error vs the float64
    reference (computed on CPU; fine up to a few thousand tokens)."""
    forward = float(np.median(np.max([r["forward_s"] for r in results], axis=0)))
    backward = float(np.median(np.max([r["backward_s"] for r in results], axis=0)))
    summary = {
        "hosts": len(results),
        "seq_len": config.seq_len,
        "layout": config.layout,
        "causal": config.causal,
        "dtype": config.dtype,
        "heads": config.heads,
        "head_dim": config.head_dim,
        "forward_s": forward,
        "backward_s": backward,
    }
    if config.return_tensors and config.seq_len <= 8192:
        import ringsim

        q, k, v, _ = (x.double().numpy() for x in config.inputs(torch.device("cpu")))
        ref = ringsim.reference_attention(
            q, k, v, causal=config.causal, segment_ids=config.segments()
        )
        summary["max_abs_error"] = float(
            np.abs(assemble(results, "out", config.layout, config.segments()) - ref).max()
        )
    return summary


if __name__ == "__main__":
    sys.exit(main())
