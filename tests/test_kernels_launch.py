"""Rank processes die with their launcher, whatever kills it; a rank that works past the
deadline while saying it is alive runs on, a silent one is given up in bounded time; real ranks
are refused up front when the machine cannot hold them or has no device for the backend."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]

LAUNCHER = """
import sys
sys.path[:0] = [{root!r}, {tests!r}]
from kernels.distributed.launch import launch
from test_kernels_launch import sleeping_rank
launch(sleeping_rank, 2, args=({pid_dir!r},), timeout_s=300)
"""


def sleeping_rank(rank: int, hosts: int, pid_dir: str) -> int:
    """A rank that says its pid, then computes (sleeps) far longer than the test runs."""
    Path(pid_dir, f"rank{rank}.tmp").write_text(str(os.getpid()))
    os.replace(Path(pid_dir, f"rank{rank}.tmp"), Path(pid_dir, f"rank{rank}"))
    time.sleep(120)
    return rank


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for a reaper has ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return state not in ("Z", "X")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_no_rank_survives_its_launcher(tmp_path, sig):
    script = LAUNCHER.format(root=str(ROOT), tests=str(ROOT / "tests"), pid_dir=str(tmp_path))
    launcher = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.DEVNULL)
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 90  # two spawned ranks import torch on a loaded machine
        while len(pids) < 2 and time.monotonic() < deadline and launcher.poll() is None:
            pids = [int(p.read_text()) for p in sorted(tmp_path.glob("rank[0-9]"))]
            time.sleep(0.1)
        assert len(pids) == 2, f"the ranks did not start (launcher exit {launcher.poll()})"
        assert all(_alive(pid) for pid in pids)
        launcher.send_signal(sig)
        launcher.wait(timeout=10)
        gone_by = time.monotonic() + 5
        while any(_alive(pid) for pid in pids) and time.monotonic() < gone_by:
            time.sleep(0.1)
        survivors = [pid for pid in pids if _alive(pid)]
        assert not survivors, f"ranks {survivors} outlived their launcher by 5 s ({sig.name})"
    finally:
        if launcher.poll() is None:
            launcher.kill()
        for pid in pids:  # never leave one behind, even when the test fails
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_rank_dies_when_its_launcher_is_already_gone():
    code = (
        "from kernels.distributed.launch import die_with_parent as d; import os; d({}); "
        "print('ran')"
    )
    for parent, code_, says in ((1, 1, ""), ("os.getppid()", 0, "ran\n")):  # gone / alive
        child = subprocess.run(
            [sys.executable, "-c", code.format(parent)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert (child.returncode, child.stdout) == (code_, says), child.stderr


def test_local_ranks_are_capped_by_memory_and_cores_with_the_reason(monkeypatch):
    from kernels.distributed import admission

    monkeypatch.setattr(admission, "available_memory", lambda: 2.8e9)  # ten 280 MB ranks
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    admission.check_local_ranks(10)
    with pytest.raises(ValueError, match=r"--hosts 11 .*280 MB.*at most 10"):
        admission.check_local_ranks(11)
    with pytest.raises(ValueError, match=r"--hosts 3 .*at most 2"):
        admission.check_local_ranks(3, problem_bytes=1e9)
    monkeypatch.setattr(admission, "available_memory", lambda: 1e12)
    admission.check_local_ranks(16)
    with pytest.raises(ValueError, match=r"--hosts 17 .*4 cores.*at most 16"):
        admission.check_local_ranks(17)


def test_gpu_backends_without_a_gpu_are_refused_naming_the_flag(monkeypatch):
    import torch

    from kernels.distributed.admission import check_backend

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    check_backend("gloo", 2)
    for backend in ("nccl", "cuda"):
        with pytest.raises(ValueError, match=rf"--backend {backend} needs a CUDA GPU"):
            check_backend(backend, 2)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ValueError, match="needs 2 GPUs"):
        check_backend("nccl", 2)


def working_rank(rank: int, hosts: int, work_s: dict, stamp_dir: str) -> int:
    """Works (sleeps) ``work_s[rank]`` seconds in 0.2 s units, saying ``alive`` after each;
    a rank listed with ``then_hang`` then hangs, silent, after writing when it fell silent."""
    from kernels.distributed.progress import alive

    seconds, then_hang = work_s[rank]
    end = time.monotonic() + seconds
    last = time.monotonic()
    while last < end:
        alive()
        last = time.monotonic()
        time.sleep(0.2)
    if then_hang:
        Path(stamp_dir, f"silent{rank}").write_text(repr(last))
        time.sleep(600)
    return rank


def test_a_rank_alive_past_the_deadline_runs_on_and_a_silent_one_is_given_up(tmp_path):
    """Deadline 3 s, silence allowed 2 s: rank 0 works 6 s (plus start-up) and answers; rank 1
    works 7 s, then hangs and is given up within the 2 s (+ polling and killing)."""
    from kernels.distributed.launch import launch
    from kernels.distributed.ring import RingError

    stall_s = 2.0
    with pytest.raises(RingError) as err:
        launch(working_rank, 2, args=({0: (6.0, False), 1: (7.0, True)}, str(tmp_path)),
               timeout_s=30, deadline_s=3.0, stall_s=stall_s)  # fmt: skip
    given_up = time.monotonic()
    message = str(err.value)
    assert "ranks [1] did not answer" in message
    assert "rank 0:" not in message  # rank 0 answered although the deadline had passed
    assert re.search(r"rank 1: last sign of life \d+ s ago \(allowed silence: 2 s\)", message)
    silent_since = float(Path(tmp_path, "silent1").read_text())
    assert stall_s <= given_up - silent_since < stall_s + 3.0
