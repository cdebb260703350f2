"""May these ranks start here? Checks made before any rank process exists: the backend has its
device (NCCL and CUDA need a GPU torch can see), and the local ranks fit this machine's memory
and cores (each gloo rank is a full torch process, ~263 MB resident measured at measure's
default shape, plus its share of the problem). ``ValueError`` naming the flag otherwise."""

from __future__ import annotations

import os

import torch

# One local gloo rank's own memory, before its problem's tensors: 263 MB peak RSS (VmHWM)
# measured here for each of 2 ranks of `ringsim measure`'s default run (2K tokens, 4 heads x 64,
# torch 2.13 CPU: the interpreter, torch and gloo), rounded up.
RANK_BYTES = 280e6


# Local ranks beyond this many per core time-share it so heavily that a measurement says little
# and the ring's timeouts (every transfer waits for a descheduled peer) start to fire.
RANKS_PER_CORE = 4


def available_memory() -> float:
    """Bytes of memory available to new processes (``MemAvailable``; total without /proc)."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024
    except OSError:
        pass
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def check_local_ranks(
    hosts: int, *, problem_bytes: float = 0.0, flag: str = "--hosts", threads: int = 1
) -> None:
    """Refuse (``ValueError`` naming ``flag`` and saying why) more local rank processes than
    this machine can hold: each needs ``RANK_BYTES`` plus ``problem_bytes`` (its tensors) of
    the available memory, and at most ``RANKS_PER_CORE`` share a core; and more torch
    ``threads`` per rank than the machine has cores (``--threads``: each thread is an OS
    thread, and 100,000 of them exhaust the process's threads before the ring can start)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if threads > (cores or 1):
        raise ValueError(
            f"--threads {threads} is more torch threads per rank than this machine's "
            f"{cores or 1} cores: at most {cores or 1}"
        )
    memory = available_memory()
    per_rank = RANK_BYTES + problem_bytes
    by_memory, by_cores = int(memory // per_rank), RANKS_PER_CORE * (cores or 1)
    if hosts <= min(by_memory, by_cores):
        return
    if by_memory < by_cores:
        why = (
            f"each rank is a process of ~{per_rank / 1e9:.3g} GB ({RANK_BYTES / 1e6:.0f} MB of "
            f"interpreter, torch and gloo + {problem_bytes / 1e9:.3g} GB of this run's tensors) "
            f"and {memory / 1e9:.3g} GB is available: at most {by_memory}"
        )
    else:
        why = (
            f"this machine has {cores} cores and more than {RANKS_PER_CORE} ranks per core "
            f"time-share it too much to measure (or to meet the ring's timeouts): at most "
            f"{by_cores}"
        )
    raise ValueError(f"{flag} {hosts} is more local ranks than this machine can run: {why}")


def check_backend(backend: str, hosts: int, *, flag: str = "--backend") -> None:
    """Refuse (``ValueError`` naming ``flag``) a backend this machine cannot run: ``nccl`` and
    ``cuda`` need a CUDA GPU (``nccl`` one per rank: NCCL refuses two ranks on one device)."""
    if backend == "gloo":
        return
    if not torch.cuda.is_available():
        raise ValueError(
            f"{flag} {backend} needs a CUDA GPU and torch sees none here "
            f"(torch {torch.__version__}); use --backend gloo for CPU ranks"
        )
    if backend == "nccl" and torch.cuda.device_count() < hosts:
        raise ValueError(
            f"{flag} nccl runs one rank per GPU: --hosts {hosts} needs {hosts} GPUs, this "
            f"machine has {torch.cuda.device_count()}"
        )
