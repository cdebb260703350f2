"""The hostile sweeps of issues 14, 26 and 34, repeatable: every case they found, one verdict
each.

    python benchmarks/hostile_sweep.py            (all cases; a few minutes on 2 loaded cores)
    python benchmarks/hostile_sweep.py --only measure,profile     (cases whose name has these)
    python benchmarks/hostile_sweep.py --list

A command-line case runs ``python -m ringsim ...`` and expects its exit code and, for bad
input, one line on stderr naming the flag (a JSON object under ``--json``; before it only
progress lines, ``[ringsim ...``), no traceback, within a time limit (a ``measure`` or
``calibrate`` refused before any rank starts takes a few seconds: the interpreter and torch)
and, for the in-process commands, within ``MEMORY_CAP`` bytes of address space. A Python
case runs one function of this file in a fresh process (``--case NAME``), which prints
``OK ...`` or ``FAIL ...`` as its last line. Each verdict says what happened:

    OK    measure --hosts 0         exit 2 in 2.1 s: ringsim measure: error: argument --hosts...
    FAIL  launcher SIGTERM          ranks [1234] alive 5 s after the launcher died

Exit code: the number of FAIL verdicts (0 when everything held).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hostile_cases import (  # beside this file (one table, two users)
    CALIBRATE_BAD,
    ISSUE34_BAD,
    MEASURE_BAD,
    OUTPUT_BAD,
    PLAN_BAD,
    STRATEGY_BAD,
    api_cases,
    api_issue34_cases,
    object_collective_calls,
)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


Ran = subprocess.CompletedProcess  # what a command-line case's run gave: exit, stdout, stderr


@dataclass
class Cli:
    """``ringsim argv``: ``exit`` expected; with exit 2, one stderr line naming ``named``."""

    name: str
    argv: list[str]
    exit: int | tuple[int, ...] = 2
    named: str = ""
    limit_s: float = 30.0
    setup: Callable[[Path], None] | None = None  # prepares files in the case's folder
    check: Callable[[Path, Ran], str | None] | None = None  # after: None or what failed
    preexec: Callable[[], None] | None = None


@dataclass
class Py:
    """A function of this file run in its own process; its last line is the verdict."""

    name: str
    function: str
    limit_s: float = 120.0


# -- the command-line cases ----------------------------------------------------------------------
def _keep(tmp: Path) -> None:
    (tmp / "keep.json").write_text(json.dumps({"traceEvents": [{"name": "x" * 50_000}]}))


def _keep_unchanged(tmp: Path, run: Ran) -> str | None:
    text = (tmp / "keep.json").read_text()
    ok = text == json.dumps({"traceEvents": [{"name": "x" * 50_000}]})
    left = sorted(p.name for p in tmp.iterdir() if p.name != "keep.json")
    if not ok:
        return "keep.json was changed"
    return f"left files behind: {left}" if left else None


def _no_file(name: str) -> Callable[[Path], str | None]:
    return lambda tmp, run: f"{name} was written" if (tmp / name).exists() else None


def _strict_json(name: str) -> Callable[[Path, Ran], str | None]:
    def check(tmp: Path, run: Ran) -> str | None:
        path = tmp / name
        if not path.exists():
            return None
        from ringsim.files import read_json_object

        try:
            read_json_object(path, what=name)
        except ValueError as err:
            return str(err)
        return None

    return check


def _disk_full(*args) -> None:
    raise OSError(28, "No space left on device")


def _calibration(kind: str) -> Callable[[Path], None]:
    def setup(tmp: Path) -> None:
        real = (ROOT / "results" / "cpu-calibration-2026-11-29.json").read_text()
        text = {
            "wrong fields": json.dumps({"backend": "gloo", "colour": 1}),
            "a list": "[1, 2]",
            "truncated": real[: len(real) // 3],
        }[kind]
        (tmp / "cal.json").write_text(text)

    return setup


def _small_files() -> None:  # a write past 20 KB fails half-way (EFBIG), as on a full disk
    resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))


MEMORY_CAP = 6 * 2**30
"""Address space of an in-process command (simulate, sweep, plan, ...): a case that would
build gigabytes before refusing ends in a MemoryError here, not in a machine out of memory.
``measure``/``calibrate`` start torch ranks, whose address space is not their use: no cap."""
IN_PROCESS = ("simulate", "sweep", "plan", "validate", "memory", "demo", "presets")


def _capped(preexec: Callable[[], None] | None) -> Callable[[], None]:
    def run() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))
        if preexec:
            preexec()

    return run


def _loop(tmp: Path) -> None:
    (tmp / "loop.json").symlink_to("loop.json")


LONGEST = "a" * 250 + ".json"  # 255 bytes: NAME_MAX on Linux file systems


def _wrote_only(name: str) -> Callable[[Path, Ran], str | None]:
    def check(tmp: Path, run: Ran) -> str | None:
        left = sorted(p.name for p in tmp.iterdir())
        if left != [name]:
            return f"left {[n[:20] for n in left]} instead of the one file"
        from ringsim.files import read_json_object

        try:
            read_json_object(tmp / name)
        except ValueError as err:
            return str(err)[:120]
        return None

    return check


def _json_rows_unique(tmp: Path, run: Ran) -> str | None:
    data = json.loads(run.stdout)
    labels = [c["label"] for key in ("candidates", "dropped", "bounded") for c in data[key]]
    twice = len(labels) - len(set(labels))
    return f"{twice} configurations ranked twice" if twice else None


def _stdout_json_and_progress(prog: str, *, required: bool):
    """stdout one JSON document, stderr nothing but ``prog``'s progress lines: at least one
    when ``required`` (a command that runs past the ticker's first 5 s), else any number (a
    quick one prints none)."""

    def check(tmp: Path, run: Ran) -> str | None:
        try:
            json.loads(run.stdout)  # stdout: one JSON document, nothing else
        except ValueError as err:
            return f"stdout is not one JSON document: {err}"
        lines = [x for x in run.stderr.replace("\r", "\n").splitlines() if x.strip()]
        if any(not x.startswith(f"[ringsim {prog} ") for x in lines):
            return f"stderr holds more than progress: {run.stderr[:200]!r}"
        if required and not lines:
            return "no progress line on stderr"
        return None

    return check


XELATEX = shutil.which("xelatex")
PLAN7B = ["plan", "--model", "7b", "--seq-len", "64K", "--hosts", "8"]


SIM = ["simulate", "--hosts", "4", "--seq-len", "4K"]
CLI_CASES = [
    # issue 26 cases 1, 2, 5-10 and the planner's flags: refused in one line, quickly
    *(
        Cli(f"plan {' '.join(a)}", ["plan", "--model", "7b", *a], named=n, limit_s=30)
        for a, n in PLAN_BAD
    ),
    # item 2: measure and calibrate, refused before any rank starts
    *(
        Cli(f"{cmd} {' '.join(a)}", [cmd, *a], named=n, limit_s=20)
        for cmd, cases in (
            ("measure", [*MEASURE_BAD, (["--backend", "nccl"], "--backend nccl")]),
            (
                "calibrate",
                [
                    *CALIBRATE_BAD,
                    (["--backend", "nccl"], "--backend nccl"),
                    (["--backend", "cuda"], "--backend cuda"),
                ],
            ),
        )
        for a, n in cases
    ),
    *(
        Cli(
            f"measure --calibration ({kind})",
            ["measure", "--calibration", "{tmp}/cal.json"],
            named="cal.json",
            limit_s=20,
            setup=_calibration(kind),
        )
        for kind in ("wrong fields", "a list", "truncated")
    ),
    # item 3: configurations that cannot fit (helper E's issue 15 makes the timer lean)
    Cli(
        "simulate 1M hosts x 1G",
        ["simulate", "--hosts", "1048576", "--seq-len", "1G"],
        exit=(0, 2),
        limit_s=120,
    ),
    Cli(
        "demo 1M hosts x 1G",
        ["demo", "--hosts", "1048576", "--seq-len", "1G", "--no-plot"],
        exit=(0, 2),
        limit_s=120,
    ),
    Cli(
        "sweep 1M hosts",
        ["sweep", "--vary", "block", "--hosts", "1048576"],
        exit=(0, 2),
        limit_s=120,
    ),
    Cli(
        "simulate 8 hosts x 4G",
        ["simulate", "--hosts", "8", "--seq-len", "4G"],
        exit=(0, 2),
        limit_s=120,
    ),
    Cli(
        "simulate 1 host x 1G causal",
        ["simulate", "--hosts", "1", "--seq-len", "1G", "--causal"],
        exit=(0, 2),
        limit_s=120,
    ),
    # item 6: the follow-up calibrate suggests
    Cli(
        "simulate --hardware cpu-calibrated",
        ["simulate", "--hardware", "cpu-calibrated", "--hosts", "2", "--seq-len", "4K"],
        exit=0,
    ),
    Cli("demo --dtype fp32", ["demo", "--dtype", "fp32", "--no-plot"], exit=0),
    # item 7: output files
    Cli(
        "trace write fails half-way",
        [*SIM, "--hosts", "16", "--trace", "{tmp}/keep.json"],
        exit=1,
        named="keep.json",
        setup=_keep,
        check=_keep_unchanged,
        preexec=_small_files,
    ),
    Cli(
        "--trace keep --plot t.badext",
        [*SIM, "--trace", "{tmp}/keep.json", "--plot", "{tmp}/t.badext"],
        named="--plot",
        setup=_keep,
        check=_keep_unchanged,
    ),
    Cli(
        "--latency 1e308 --trace f.json",
        [*SIM, "--latency", "1e308", "--trace", "{tmp}/f.json"],
        named="--latency",
        check=_strict_json("f.json"),
    ),
    Cli("--flops 1e-320", [*SIM, "--flops", "1e-320", "--bandwidth", "1G"], named="flops"),
    Cli("--flops 1e-300", [*SIM, "--flops", "1e-300", "--bandwidth", "1G"], named="--flops"),
    Cli("--latency 1e308", [*SIM, "--latency", "1e308"], named="--latency"),
    Cli("--jitter 1e308", [*SIM, "--jitter", "1e308"], named="--jitter"),
    # item 8: messages that name the flag or file
    Cli("--seed -1", [*SIM, "--seed", "-1", "--jitter", "0.1"], named="--seed"),
    Cli(
        "huge --seq-len",
        ["simulate", "--hosts", "4", "--seq-len", "99999999999999999999999"],
        named="seq_len",
    ),
    Cli("--trace /dev/full", [*SIM, "--trace", "/dev/full"], named="/dev/full"),
    Cli("--plot <folder>", [*SIM, "--plot", "{tmp}"], named="folder"),
    Cli("--trace ''", [*SIM, "--trace", ""], named="--trace"),
    # issue 26: sizes a strategy cannot run, flags that change nothing, unwritable outputs
    *(
        Cli(" ".join(a), a, exit=2 if n else 0, named=n, limit_s=30)
        for a, n in (*STRATEGY_BAD, *OUTPUT_BAD)
    ),
    # issue 34: sizes refused before work, flags that change nothing, errors as JSON
    *(Cli(" ".join(a), a, named=n, limit_s=30) for a, n in ISSUE34_BAD),
    Cli(
        "--plot p.pgf (needs xelatex)",
        [*SIM, "--plot", "{tmp}/p.pgf"],
        exit=0 if XELATEX else 2,
        named="xelatex",
        check=None if XELATEX else _no_file("p.pgf"),
    ),
    Cli(
        "--trace loop.json (a symlink loop)",
        [*SIM, "--trace", "{tmp}/loop.json"],
        named="loops",
        setup=_loop,
    ),
    Cli(
        "--trace <255-byte name>",
        [*SIM, "--trace", "{tmp}/" + LONGEST],
        exit=0,
        check=_wrote_only(LONGEST),
    ),
    Cli("--trace <256-byte name>", [*SIM, "--trace", "{tmp}/b" + LONGEST], named="256 bytes"),
    *(
        Cli(
            f"plan --gpus-per-node {g} (no window given)",
            [*PLAN7B, "--gpus-per-node", str(g), "--inter-bandwidth", "25G", "--keep", "3"],
            exit=0,
            limit_s=120,
        )
        for g in (3, 6, 12)
    ),
    Cli(
        "plan --recompute full --recompute full",
        [*PLAN7B, "--json", "--recompute", "full", "--recompute", "full"],
        exit=0,
        limit_s=120,
        check=_json_rows_unique,
    ),
    Cli(
        "validate --json (stdout JSON, stderr progress only)",
        ["validate", "--json"],
        exit=0,
        limit_s=600,
        check=_stdout_json_and_progress("validate", required=False),
    ),
    Cli(  # the documented maximum: past the ticker's first 5 s on any machine here
        "plan --json at 65,536 hosts (progress on stderr)",
        [
            "plan",
            "--model",
            "llama3-8b",
            "--seq-len",
            "1M",
            "--cluster",
            "dgx-h100",
            "--nodes",
            "8192",
            "--global-batch",
            "64",
            "--json",
        ],
        exit=0,
        limit_s=600,
        check=_stdout_json_and_progress("plan", required=True),
    ),
]


# -- the Python cases (each runs in its own process: --case NAME) --------------------------------
def sleeping_rank(rank: int, hosts: int, pid_dir: str) -> int:
    Path(pid_dir, f"rank{rank}.tmp").write_text(str(os.getpid()))
    os.replace(Path(pid_dir, f"rank{rank}.tmp"), Path(pid_dir, f"rank{rank}"))
    time.sleep(120)
    return rank


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def _launcher_killed_by(sig: int) -> str:
    """The launcher (its own temporary directory) gets ``sig`` while its two ranks compute:
    no rank may outlive it, and no rendezvous folder either (after a SIGKILL, which leaves no
    chance to clean up, the next launcher's ``clean_stale_rendezvous`` must remove it)."""
    from kernels.distributed.launch import clean_stale_rendezvous

    with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryDirectory() as temp:
        code = (  # SIGHUP at its default, as a terminal starts it (under nohup it is ignored,
            # and the launcher rightly leaves an ignored signal alone)
            "import signal; signal.signal(signal.SIGHUP, signal.SIG_DFL)\n"
            f"import sys; sys.path[:0] = [{str(ROOT)!r}, {str(ROOT / 'benchmarks')!r}]\n"
            "from kernels.distributed.launch import launch\n"
            "from hostile_sweep import sleeping_rank\n"
            f"launch(sleeping_rank, 2, args=({tmp!r},), timeout_s=300)\n"
        )
        env = {**os.environ, "TMPDIR": temp}
        cmd = [sys.executable, "-c", code]
        launcher = subprocess.Popen(cmd, stderr=subprocess.DEVNULL, env=env)
        pids: list[int] = []
        try:
            deadline = time.monotonic() + 300  # start-up only bounds a failure
            while len(pids) < 2 and time.monotonic() < deadline and launcher.poll() is None:
                pids = [int(p.read_text()) for p in sorted(Path(tmp).glob("rank[0-9]"))]
                time.sleep(0.1)
            if len(pids) < 2:
                return f"FAIL the ranks did not start (launcher exit {launcher.poll()})"
            launcher.send_signal(sig)
            launcher.wait(timeout=120)
            gone_by = time.monotonic() + 60
            while any(_alive(pid) for pid in pids) and time.monotonic() < gone_by:
                time.sleep(0.1)
            alive = [pid for pid in pids if _alive(pid)]
            if alive:
                return f"FAIL ranks {alive} alive 60 s after the launcher died"
            left = sorted(p.name for p in Path(temp).glob("ringsim-*"))
            name = signal.Signals(sig).name
            if sig == signal.SIGKILL:
                removed = clean_stale_rendezvous(temp)
                after = sorted(p.name for p in Path(temp).glob("ringsim-*"))
                if len(left) != 1 or len(removed) != 1 or after:
                    return f"FAIL after SIGKILL: left {left}, the next start removed {removed}"
                return f"OK no rank alive after {name}; its {left[0]} removed by the next start"
            if left:
                return f"FAIL {name} left {left} in the temporary directory"
            return f"OK no rank alive and no rendezvous folder left after {name}"
        finally:
            if launcher.poll() is None:
                launcher.kill()
            for pid in pids:
                if _alive(pid):
                    os.kill(pid, signal.SIGKILL)


def case_launcher_sigterm() -> str:
    return _launcher_killed_by(signal.SIGTERM)


def case_launcher_sighup() -> str:
    return _launcher_killed_by(signal.SIGHUP)


def case_launcher_sigkill() -> str:
    return _launcher_killed_by(signal.SIGKILL)


def rank_sockets(rank: int, hosts: int) -> list[str]:
    """This rank's TCP endpoints' local addresses (hex, as /proc/net/tcp writes them)."""
    import torch
    import torch.distributed as dist

    dist.all_reduce(torch.ones(1))
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    local = []
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[9] in inodes:
                local.append(fields[1].split(":")[0])
    return local


def case_gloo_loopback() -> str:
    """Issue 26 hygiene: local gloo ranks listen and connect on loopback only."""
    from kernels.distributed.launch import launch

    loopback = {"0100007F", "00000000000000000000000001000000"}
    per_rank = launch(rank_sockets, 2, timeout_s=60)
    found = sorted({a for addresses in per_rank for a in addresses})
    if not found or not set(found) <= loopback:
        return f"FAIL rank sockets on {found} (hex, /proc/net/tcp), not loopback only"
    return f"OK {sum(map(len, per_rank))} rank sockets, all on loopback ({', '.join(found)})"


def _api_verdict(cases: list, what: str) -> str:
    """Each ``(label, function, args, kwargs, said)`` must raise a one-line ``ValueError``
    saying ``said``, within 10 s (before any work)."""
    import warnings

    warnings.simplefilter("ignore")
    for label, function, args, kwargs, said in cases:
        start = time.monotonic()
        try:
            function(*args, **kwargs)
            return f"FAIL {label}: no error"
        except ValueError as err:
            if said not in str(err) or "\n" in str(err):
                return f"FAIL {label}: {err}"
        except Exception as err:
            return f"FAIL {label}: {type(err).__name__}: {str(err)[:200]}"
        if time.monotonic() - start > 10:
            return f"FAIL {label}: refused only after {time.monotonic() - start:.0f} s"
    return f"OK {len(cases)} {what}, each a one-line ValueError naming the argument"


def case_api_issue26() -> str:
    """Issue 26's cases 11-16: the new strategies' Python API refuses what the ring refuses."""
    return _api_verdict(api_cases(), "calls")


def rank_interface(rank: int, hosts: int) -> str:
    """The interface gloo was told to use in this rank (GLOO_SOCKET_IFNAME)."""
    return os.environ.get("GLOO_SOCKET_IFNAME", "(unset)")


def case_gloo_loopback_empty_ifname() -> str:
    """Issue 34: an empty GLOO_SOCKET_IFNAME (gloo reads it as unset, and binds where the host
    name resolves) keeps the ranks pinned to the loopback interface, and their sockets on it
    (on a machine whose host name resolves to loopback anyway, only the pin tells)."""
    from kernels.distributed.launch import launch, loopback_interface

    os.environ["GLOO_SOCKET_IFNAME"] = ""
    told = launch(rank_interface, 2, timeout_s=60)
    if told != [loopback_interface()] * 2:
        return f"FAIL ranks told GLOO_SOCKET_IFNAME={told}, not {loopback_interface()!r}"
    verdict = case_gloo_loopback()
    return verdict if verdict.startswith("FAIL") else f"{verdict}; pinned to {told[0]!r}"


def case_api_issue34() -> str:
    """Issue 34's Python API cases (plan, ModelSpec, a 2^40-host ring, /dev/zero)."""
    return _api_verdict(api_issue34_cases(), "calls of issue 34")


def case_numpy_integers() -> str:
    """Issue 34: a NumPy integer is an integer (the double ring's window, ModelSpec, plan)."""
    import numpy as np

    import ringsim
    from ringsim.timer import RingConfig
    from ringsim.timer.step.models import ModelSpec
    from ringsim.timer.strategies import simulate_strategy

    config = RingConfig(hosts=8, seq_len=8 * 512, hardware=ringsim.get_hardware("a100-nvlink"))
    a = simulate_strategy(config, "double-ring", window=np.int64(2)).summary()["total_time_s"]
    b = simulate_strategy(config, "double-ring", window=2).summary()["total_time_s"]
    if a != b:
        return f"FAIL window=np.int64(2) gives {a}, window=2 gives {b}"
    spec = ModelSpec("m", np.int64(2), 256, np.int32(4), 512)
    return f"OK window=np.int64(2) times {a:.3g} s as window=2; ModelSpec of NumPy ints {spec.name}"


def case_exchange_without_pickle() -> str:
    """Issue 34: ranks exchange JSON data; a pickle (or an object dtype) from a peer is refused,
    and no *_object collective (which unpickles) is left in kernels/."""
    import pickle

    from kernels.distributed.exchange import decode

    for data in (pickle.dumps({"a": 1}), b'{"__ndarray__": "object", "shape": [1], "data": ""}'):
        try:
            decode(data)
            return f"FAIL a peer's {data[:30]!r} was decoded"
        except ValueError:
            pass
    calls = object_collective_calls(ROOT)
    if calls:
        return f"FAIL {len(calls)} calls unpickle what peers send: {', '.join(calls)}"
    return "OK no *_object collective in kernels/; a pickle or object array from a peer refused"


def case_summary_lines() -> str:
    """Issue 34: the sweep's "hidden from" and simulate's threshold on a cluster are read off
    the same runs as their tables."""
    import contextlib
    import io

    from ringsim import cli

    def run(*argv: str) -> dict:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            if cli.main([*argv, "--json"]) != 0:
                raise ValueError(f"ringsim {' '.join(argv)} failed")
        return json.loads(out.getvalue())

    sweep = run("sweep", "--vary", "block", "--hardware", "h100-nvlink", "--implementation", "fa2")
    start = sweep["hidden_from_block_tokens"]
    exposed = [
        r["block_tokens"] for r in sweep["rows"] if r["exposed_comm_s"] > 1e-6 * r["total_time_s"]
    ]
    if start is None or any(b >= start for b in exposed):
        return f"FAIL hidden from {start}, yet exposed at {exposed}"
    cluster = run("simulate", "--hosts", "16", "--seq-len", "64K", "--cluster", "dgx-h100")
    c = cluster["min_block_for_overlap"]
    if cluster["exposed_comm_s"] > 0 and c <= cluster["block_tokens"]:
        return f"FAIL threshold {c:.0f} tokens below the exposed {cluster['block_tokens']} block"
    return (
        f"OK sweep hidden from {start} (exposed at {exposed}); on dgx-h100 x2 the threshold "
        f"{c:.0f} tokens exceeds the exposed {cluster['block_tokens']}-token block"
    )


def case_tied_large_scores_dv() -> str:
    """Item 4: dv of the NumPy ring backward at tied large scores (q = k = a constant)."""
    import numpy as np

    import ringsim

    worst = []
    for dtype, score in ((np.float32, 1e7), (np.float32, 1e8), (np.float64, 1e16)):
        n, d = 16, 4
        value = np.sqrt(score * np.sqrt(d) / d)  # q.k * scale = score
        q = np.full((n, d), value, dtype)
        v = np.random.default_rng(0).standard_normal((n, d)).astype(dtype)
        dout = np.ones((n, d), dtype)
        _, _, dv = ringsim.ring_attention_backward(q, q, v, dout, hosts=4, causal=True)
        _, _, ref = ringsim.reference_attention_grad(q, q, v, dout, causal=True)
        err = float(np.abs(dv - ref).max() / np.abs(ref).max())
        worst.append(f"{np.dtype(dtype).name} {score:g}: {err:.1e}")
        if err > (1e-3 if dtype == np.float32 else 1e-9):
            return f"FAIL dv relative error {', '.join(worst)}"
    return f"OK dv relative error {', '.join(worst)}"


def case_corrupt_profiles() -> str:
    """Item 5: every corrupt profile named with its cause; none silently skipped."""
    from dataclasses import asdict, replace

    from ringsim.timer.machine import hardware

    good = replace(
        hardware.custom_hardware(2e10, 1e9, 2e-4, dtype="fp32"), source="calibrated 2026-01-01"
    )
    text = json.dumps(asdict(good))
    corrupt = {
        "truncated": text[: len(text) // 2],
        "empty": "",
        "unknown key": json.dumps({**asdict(good), "colour": 1}),
        "missing field": json.dumps({k: v for k, v in asdict(good).items() if k != "flops"}),
        "negative bandwidth": json.dumps({**asdict(good), "link_bandwidth": -1}),
        "a list": "[]",
        "true as a rate": json.dumps({**asdict(good), "link_latency": True}),
        "denormal rate": json.dumps({**asdict(good), "flops": {"fp32": 1e-320}}),
    }
    said = []
    for kind, content in corrupt.items():
        with tempfile.TemporaryDirectory() as tmp:
            hardware.save_profile(good, Path(tmp, "cpu-profile-2026-01-01.json"))
            bad = Path(tmp, "cpu-profile-2026-01-02.json")
            bad.write_text(content)
            found, errors = hardware.scan_profiles(tmp)
            message = errors.get("cpu-calibrated", "")
            if found or str(bad) not in message:
                return f"FAIL {kind}: found={list(found)}, message={message!r}"
            said.append(f"{kind}: {message.split(str(bad), 1)[1][2:50]!r}")
    return "OK each named with its file; " + "; ".join(said[:3]) + " ..."


def case_profile_newest_by_content() -> str:
    from dataclasses import asdict, replace

    from ringsim.timer.machine import hardware

    with tempfile.TemporaryDirectory() as tmp:
        hardware.save_profile(
            hardware.custom_hardware(1e10, 1e9, dtype="fp32"), Path(tmp, "cpu-profile-test.json")
        )  # saved now
        old = replace(
            hardware.custom_hardware(3e10, 1e9, dtype="fp32"), source="calibrated 2020-01-01"
        )
        Path(tmp, "cpu-profile-2099-12-31.json").write_text(json.dumps(asdict(old)))
        found = hardware.scan_profiles(tmp)[0]["cpu-calibrated"]
    if found.flops["fp32"] != 1e10:
        return "FAIL the file name decided: the 2020 profile named 2099 was used"
    return "OK the profile saved today beats cpu-profile-2099-12-31.json (dated 2020 inside)"


def case_save_profile_atomic() -> str:
    from ringsim.timer.machine import hardware

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "cpu-profile.json")
        hardware.save_profile(hardware.custom_hardware(1e10, 1e9, dtype="fp32"), path)
        before = path.read_text()
        real = os.replace
        os.replace = _disk_full
        try:
            hardware.save_profile(hardware.custom_hardware(5e10, 1e9, dtype="fp32"), path)
            return "FAIL a failed save raised nothing"
        except OSError:
            pass
        finally:
            os.replace = real
        if path.read_text() != before or len(os.listdir(tmp)) != 1:
            return "FAIL a failed save changed the profile or left a temporary file"
    return "OK a save that fails leaves the old profile whole and no temporary file"


def case_small_api_holes() -> str:
    """Item 8: zero heads, float64 overflow in the reference, causal='false', get_hardware."""
    import warnings

    import numpy as np

    import ringsim
    from ringsim.timer.machine.hardware import get_hardware

    warnings.simplefilter("ignore")
    x = np.random.default_rng(0).random((8, 4))
    big = np.full((8, 4), 1e200)
    empty = np.zeros((0, 8, 4))
    checks = [
        ("zero heads", lambda: ringsim.ring_attention(empty, empty, empty, hosts=2), "empty"),
        ("reference overflow", lambda: ringsim.reference_attention(big, big, big), "overflow"),
        (
            "causal='false'",
            lambda: ringsim.ring_attention(x, x, x, hosts=2, causal="false"),
            "causal",
        ),
        (
            "causal='false' ref",
            lambda: ringsim.reference_attention(x, x, x, causal="false"),
            "causal",
        ),
        ("get_hardware(['a'])", lambda: get_hardware(["a"]), "hardware"),
    ]
    for name, call, named in checks:
        try:
            call()
            return f"FAIL {name}: no error"
        except ValueError as err:
            if named not in str(err):
                return f"FAIL {name}: ValueError without {named!r}: {err}"
        except Exception as err:
            return f"FAIL {name}: {type(err).__name__}: {err}"
    return "OK " + ", ".join(name for name, _, _ in checks) + ": ValueError naming it"


def one_rank_misbehaves(rank: int, hosts: int) -> list[str]:
    import torch

    from kernels.distributed.ring import RingError, ring_attention

    x = torch.randn(1, 2, 4, 8, generator=torch.Generator().manual_seed(rank))
    nan_q = x.clone()
    if rank == 1:
        nan_q[0, 0, 1, 2] = float("nan")
    answers = []
    for q, layout in ((nan_q, "contiguous"), (x, "diagonal" if rank == 1 else "contiguous")):
        try:
            ring_attention(q, x, x, layout=layout, timeout_s=20)
            answers.append("no error")
        except (ValueError, RingError) as err:
            answers.append(f"{type(err).__name__}: {err}")
    return answers


def case_real_ring_nan_and_local_check() -> str:
    """Item 8: a NaN in one rank's q, and one rank's failed local check, on the real ring."""
    from kernels.distributed.launch import launch

    per_rank = launch(one_rank_misbehaves, 2, timeout_s=30)
    for rank, (nan, local) in enumerate(per_rank):
        if not nan.startswith("ValueError") or "NaN" not in nan:
            return f"FAIL rank {rank}, NaN in rank 1's q: {nan[:150]}"
        if not local.startswith("ValueError") or "diagonal" not in local:
            return f"FAIL rank {rank}, rank 1's bad layout: {local[:150]}"
    return f"OK every rank: {per_rank[0][0][:60]!r}; {per_rank[0][1][:60]!r}"


def case_compare_traces() -> str:
    """``ringsim compare`` on every hostile trace of ``benchmarks/hostile_traces.py``."""
    from hostile_traces import sweep

    return sweep()


PY_CASES = [
    Py("launcher SIGTERM", "case_launcher_sigterm"),
    Py("launcher SIGHUP", "case_launcher_sighup"),
    Py("launcher SIGKILL", "case_launcher_sigkill"),
    Py("gloo ranks on loopback", "case_gloo_loopback"),
    Py("API cases 11-16", "case_api_issue26"),
    Py("tied large scores dv", "case_tied_large_scores_dv"),
    Py("corrupt profiles", "case_corrupt_profiles"),
    Py("profile newest by content", "case_profile_newest_by_content"),
    Py("save_profile atomic", "case_save_profile_atomic"),
    Py("small API holes", "case_small_api_holes"),
    Py("real ring NaN / local check", "case_real_ring_nan_and_local_check"),
    Py("gloo ranks on loopback, GLOO_SOCKET_IFNAME=''", "case_gloo_loopback_empty_ifname"),
    Py("API cases of issue 34", "case_api_issue34"),
    Py("NumPy integers", "case_numpy_integers"),
    Py("rank exchange without pickle", "case_exchange_without_pickle"),
    Py("summary lines match their tables", "case_summary_lines", limit_s=300),
    Py("compare: hostile traces", "case_compare_traces", limit_s=300),
]


# -- running -------------------------------------------------------------------------------------
def _run(cmd: list[str], cwd: Path, limit_s: float, preexec=None):
    """``subprocess.run`` in a session of its own: past ``limit_s`` the whole session (the
    command and any rank it started) is killed and ``None`` returned."""
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=preexec,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=limit_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return None
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def run_cli(case: Cli) -> tuple[bool, str]:
    with tempfile.TemporaryDirectory(prefix="hostile-") as tmp:
        tmp = Path(tmp)
        if case.setup:
            case.setup(tmp)
        argv = [a.replace("{tmp}", str(tmp)) for a in case.argv]
        preexec = _capped(case.preexec) if case.argv[0] in IN_PROCESS else case.preexec
        start = time.monotonic()
        run = _run([sys.executable, "-m", "ringsim", *argv], tmp, case.limit_s, preexec)
        if run is None:
            return False, f"still running after {case.limit_s:g} s (killed with its children)"
        took = time.monotonic() - start
        lines = [line for line in run.stderr.splitlines() if not line.startswith("[ringsim ")]
        err = "\n".join(lines).strip()
        last = err.splitlines()[-1] if err else "(no stderr)"
        said = f"exit {run.returncode} in {took:.1f} s: {last[:160]}"
        expected = case.exit if isinstance(case.exit, tuple) else (case.exit,)
        if run.returncode not in expected:
            return False, said
        if "Traceback" in run.stderr or "MemoryError" in run.stderr:
            return False, f"traceback: {said}"
        if run.returncode != 0 and case.named and case.named not in err:
            return False, f"does not name {case.named!r}: {said}"
        if run.returncode == 2 and err.count("\n") != 0:
            return False, f"{err.count(chr(10)) + 1} lines on stderr: {said}"
        if run.returncode != 0 and "--json" in argv:
            try:
                json.loads(err)
            except ValueError:
                return False, f"an error under --json that is not JSON: {said}"
        problem = case.check(tmp, run) if case.check else None
        if problem:
            return False, f"{problem}; {said}"
        return True, said


def run_py(case: Py) -> tuple[bool, str]:
    start = time.monotonic()
    run = _run([sys.executable, __file__, "--case", case.function], ROOT, case.limit_s)
    if run is None:
        return False, f"still running after {case.limit_s:g} s (killed with its children)"
    lines = run.stdout.strip().splitlines()
    last = lines[-1] if lines else f"(no verdict; exit {run.returncode}: {run.stderr[-300:]})"
    took = time.monotonic() - start
    return last.startswith("OK"), f"{last.removeprefix('OK ').removeprefix('FAIL ')} ({took:.1f} s)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="comma-separated parts of case names to run")
    parser.add_argument("--list", action="store_true", help="list the cases")
    parser.add_argument("--case", help=argparse.SUPPRESS)  # one Python case, in this process
    args = parser.parse_args(argv)
    if args.case:
        try:
            print(globals()[args.case]())
        except Exception as err:
            print(f"FAIL {type(err).__name__}: {str(err)[:300]}")
        return 0
    cases = [*CLI_CASES, *PY_CASES]
    if args.only:
        parts = [p.strip() for p in args.only.split(",")]
        cases = [c for c in cases if any(p in c.name for p in parts)]
    if args.list:
        print("\n".join(c.name for c in cases))
        return 0
    failed = 0
    width = max(len(c.name) for c in cases)
    for case in cases:
        ok, said = run_cli(case) if isinstance(case, Cli) else run_py(case)
        failed += not ok
        print(f"{'OK  ' if ok else 'FAIL'}  {case.name:<{width}}  {said}", flush=True)
    print(f"{len(cases) - failed} of {len(cases)} cases held")
    return failed


if __name__ == "__main__":
    sys.exit(main())
