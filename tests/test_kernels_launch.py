"""Rank processes die with their launcher, whatever kills it, and its rendezvous folder goes
too (or, after a SIGKILL, at the next launch); a rank that works past the deadline while saying
it is alive runs on, a silent one is given up in bounded time, both counted from when the rank
joined (never from its start-up); local gloo ranks talk over loopback only; ranks exchange
data as JSON, never as pickles a peer could make run code; real ranks are refused up front
when the machine cannot hold them or has no device for the backend.

Every wait here ends on an event (a pid file, a process gone, an answer); the time limits
around them only bound a failure, with margins for a machine ten times slower than this one."""

from __future__ import annotations

import contextlib
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

# The launcher as a terminal starts it: SIGHUP at its default (a suite run under nohup passes
# SIGHUP on ignored, and the launcher rightly leaves an ignored signal alone)
LAUNCHER = """
import signal, sys
signal.signal(signal.SIGHUP, signal.SIG_DFL)
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


def _wait_for(condition, limit_s: float, poll_s: float = 0.05) -> bool:
    """Poll until ``condition()`` holds (True) or ``limit_s`` passed (False): the limit only
    bounds a failure."""
    give_up = time.monotonic() + limit_s
    while not condition():
        if time.monotonic() > give_up:
            return False
        time.sleep(poll_s)
    return True


def _rendezvous(folder: Path) -> list[Path]:
    return sorted(folder.glob("ringsim-rdv-*"))


@pytest.mark.parametrize(
    "sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL], ids=["SIGTERM", "SIGHUP", "SIGKILL"]
)
def test_no_rank_survives_its_launcher_nor_its_rendezvous_folder(tmp_path, sig):
    from kernels.distributed.launch import clean_stale_rendezvous

    pid_dir, temp = tmp_path / "pids", tmp_path / "tmp"  # the launcher's own temp directory
    pid_dir.mkdir()
    temp.mkdir()
    script = LAUNCHER.format(root=str(ROOT), tests=str(ROOT / "tests"), pid_dir=str(pid_dir))
    env = {**os.environ, "TMPDIR": str(temp)}
    launcher = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.DEVNULL, env=env)
    pids: list[int] = []

    def both_started() -> bool:
        pids[:] = [int(p.read_text()) for p in sorted(pid_dir.glob("rank[0-9]"))]
        return len(pids) == 2 or launcher.poll() is not None

    try:
        # two spawned ranks import torch: seconds, more on a loaded machine
        assert _wait_for(both_started, 300) and len(pids) == 2, (
            f"the ranks did not start (launcher exit {launcher.poll()})"
        )
        assert all(_alive(pid) for pid in pids)
        assert len(_rendezvous(temp)) == 1
        assert clean_stale_rendezvous(str(temp)) == []  # a live launcher's folder stays
        launcher.send_signal(sig)
        launcher.wait(timeout=120)
        gone = _wait_for(lambda: not any(_alive(pid) for pid in pids), 60)
        survivors = [pid for pid in pids if _alive(pid)]
        assert gone and not survivors, f"ranks {survivors} outlived their launcher ({sig.name})"
        if sig == signal.SIGKILL:  # no chance to clean up: the next launcher does it
            left = _rendezvous(temp)
            assert len(left) == 1
            assert clean_stale_rendezvous(str(temp)) == [str(left[0])]
        assert _rendezvous(temp) == [] and list(temp.iterdir()) == []
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
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
    """Works (sleeps) ``work_s[rank]`` seconds in 0.1 s units, saying ``alive`` after each;
    a rank listed with ``then_hang`` then hangs, silent, after writing when it last said it."""
    from kernels.distributed.progress import alive

    seconds, then_hang = work_s[rank]
    end = time.monotonic() + seconds
    last = alive()
    while last < end:
        time.sleep(0.1)
        last = alive()
    if then_hang:
        Path(stamp_dir, f"silent{rank}").write_text(repr(last))  # the stamp the launcher has
        time.sleep(600)
    return rank


def test_a_rank_alive_past_the_deadline_runs_on_and_a_silent_one_is_given_up(tmp_path):
    """Deadline 2 s, silence allowed 3 s, both from when a rank joined (start-up takes 2-5 s
    here and is not counted): rank 0 works 5 s and answers; rank 1 works 5.5 s, then hangs and
    is given up once it has been silent for 3 s. A 0.1 s beat against 3 s of allowed silence
    holds on a machine many times slower; the bound on giving up (3 s + 30 s for killing and
    joining the ranks) only catches a launcher that never would."""
    from kernels.distributed.launch import launch
    from kernels.distributed.ring import RingError

    stall_s = 3.0
    work = {0: (5.0, False), 1: (5.5, True)}
    limits = dict(timeout_s=30, deadline_s=2.0, stall_s=stall_s)
    with pytest.raises(RingError) as err:
        launch(working_rank, 2, args=(work, str(tmp_path)), **limits)
    given_up = time.monotonic()
    message = str(err.value)
    assert "ranks [1] did not answer" in message, message
    assert "rank 0:" not in message, message  # rank 0 answered although the deadline had passed
    assert re.search(r"rank 1: last sign of life \d+ s ago \(allowed silence: 3 s\)", message)
    silent_since = float(Path(tmp_path, "silent1").read_text())
    assert stall_s <= given_up - silent_since < stall_s + 30.0


def _joins_and_returns(rank: int, hosts: int) -> int:
    """A rank that joins, lines up with the other (so neither leaves while the other is still
    connecting) and answers."""
    import torch.distributed as dist

    dist.barrier()
    return rank


def test_start_up_does_not_count_against_the_deadline(monkeypatch):
    """Slots made long before the ranks join (here: 1000 s before, as if start-up took that
    long; the start-up allowance is raised to match) do not eat into a 30 s deadline: it counts
    from each rank's own join. Counted from the slots, the ranks would be given up at once."""
    from kernels.distributed import launch as launcher
    from kernels.distributed import progress

    real = progress.Pulses.__init__

    def made_early(self, ctx, n):
        real(self, ctx, n)
        self.created -= 1000.0

    monkeypatch.setattr(progress.Pulses, "__init__", made_early)
    monkeypatch.setattr(launcher, "STARTUP_S", 2000.0)
    assert launcher.launch(_joins_and_returns, 2, timeout_s=30, deadline_s=30.0) == [0, 1]


def test_limits_count_from_the_join_and_bound_a_rank_that_never_joins():
    import multiprocessing

    from kernels.distributed.progress import Limits, Pulses

    pulses = Pulses(multiprocessing.get_context("spawn"), 2)
    pulses.created = 100.0
    limits = Limits(5.0, 3.0, 40.0, pulses, startup_s=60.0)
    assert limits.give_up_at(0) == 160.0  # not joined: start-up allowance from the slots
    pulses.joined[0] = pulses.stamps[0] = 130.0
    assert limits.give_up_at(0) == 135.0  # the deadline, from the join
    pulses.stamps[0] = 140.0
    assert limits.give_up_at(0) == 143.0  # alive past it: the allowed silence
    limits.failed_at = 141.0
    assert limits.give_up_at(0) == 143.0 and limits.give_up_at(1) == 160.0
    limits.failed_at = 101.0
    assert limits.give_up_at(1) == 141.0  # another rank failed: the after-failure bound


def _sockets(rank: int, hosts: int) -> list[str]:
    """This rank's TCP endpoints (local addresses of its sockets, from /proc), after a
    collective so that gloo has connected."""
    import torch
    import torch.distributed as dist

    dist.all_reduce(torch.ones(1))
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            link = os.readlink(f"/proc/self/fd/{fd}")
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    local = []
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[9] in inodes:
                    local.append(fields[1].split(":")[0])
    return [os.environ.get("GLOO_SOCKET_IFNAME", ""), *local]


LOOPBACK = {"0100007F", "00000000000000000000000001000000"}  # 127.0.0.1, ::1 as /proc writes them


@pytest.mark.skipif(not Path("/proc/self/net/tcp").exists(), reason="needs Linux /proc")
@pytest.mark.parametrize("given", [None, "", " "], ids=["unset", "empty", "blank"])
def test_local_gloo_ranks_bind_to_loopback(monkeypatch, given):
    """Unset or empty (gloo reads an empty name as unset), the ranks are pinned to loopback."""
    from kernels.distributed.launch import launch, loopback_interface

    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    if given is not None:
        monkeypatch.setenv("GLOO_SOCKET_IFNAME", given)
    for interface, *addresses in launch(_sockets, 2, timeout_s=30):
        assert interface == loopback_interface() == "lo"
        assert addresses and set(addresses) <= LOOPBACK, addresses


# -- what ranks send each other: data, never code -------------------------------------------------
def test_exchange_round_trips_plain_data_and_arrays():
    import numpy as np

    from kernels.distributed.exchange import decode, encode

    sent = {
        "rank": 1,
        "forward_s": [0.25, 0.5],
        "timeline": {"compute_start": np.array([[0.0, np.nan], [1.5, -np.inf]])},
        "shape": (1, 2, 3),
        "ok": True,
        "nothing": None,
        "count": np.int64(3),
        "mask": np.array([True, False]),
    }
    got = decode(encode(sent))
    assert got["rank"] == 1 and got["forward_s"] == [0.25, 0.5] and got["shape"] == [1, 2, 3]
    assert got["ok"] is True and got["nothing"] is None and got["count"] == 3
    np.testing.assert_array_equal(
        got["timeline"]["compute_start"], sent["timeline"]["compute_start"]
    )
    assert got["timeline"]["compute_start"].dtype == np.float64
    np.testing.assert_array_equal(got["mask"], sent["mask"])


def test_exchange_refuses_what_only_pickle_could_carry():
    import pickle

    import numpy as np

    from kernels.distributed.exchange import decode, encode

    for value in (object(), {"f": len}, np.array([object()], dtype=object), {(1, 2): 3}):
        with pytest.raises(ValueError, match="cannot exchange"):
            encode(value)
    for data, said in [
        (pickle.dumps({"a": 1}), "not JSON"),
        (b'{"__ndarray__": "object", "shape": [1], "data": ""}', "not exchanged"),
        (b'{"__ndarray__": "float64", "shape": [4], "data": "AAAAAAAAAAA="}', "bytes for"),
        (b'{"__ndarray__": "float64", "shape": [-1], "data": ""}', "shape"),
    ]:
        with pytest.raises(ValueError, match=said):
            decode(data)


def _gather_json(rank: int, hosts: int) -> list:
    import numpy as np

    from kernels.distributed.exchange import all_gather_json

    return all_gather_json({"rank": rank, "values": np.arange(rank + 1.0)})


def test_ranks_gather_json_in_rank_order():
    from kernels.distributed.launch import launch

    for gathered in launch(_gather_json, 2, timeout_s=60):
        assert [g["rank"] for g in gathered] == [0, 1]
        assert [g["values"].tolist() for g in gathered] == [[0.0], [0.0, 1.0]]


def test_no_rank_unpickles_what_a_peer_sends():
    """torch.distributed's *_object collectives unpickle what peers send: none is called."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from hostile_cases import object_collective_calls

    assert object_collective_calls(ROOT) == []
