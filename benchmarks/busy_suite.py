"""The whole test suite on a busy machine: ``runs`` times, beside CPU-bound processes.

    python benchmarks/busy_suite.py --runs 5                     (make test-busy RUNS=5)
    python benchmarks/busy_suite.py --runs 2 --hogs 2 -- -n 2 --dist loadgroup
    python benchmarks/busy_suite.py --out results/busy-<date>.json

A user's laptop is a busy machine: a test that waits on a wall-clock deadline passes alone and
fails beside other work. This starts ``hogs`` processes that spin on a core each (two on this
2-core machine: the suite gets a third of it, or less), then runs ``python -m pytest -q`` with
the arguments after ``--`` (``make test-busy`` passes the parallel options of ``make test``)
``runs`` times in a row, and reports per run: pass/fail, the pytest summary line, wall time,
the 1-minute load average (mean and peak, sampled every 5 s) and any ``ringsim-*`` folder the
run left in its temporary directory (each run gets a fresh one). The hogs are ended however
this ends. Exit code: the number of failed runs (0: every run green).

Each run's full output goes to ``--logs`` (default: a temporary folder, printed).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_S = 5.0
# spins until its parent (this script) is gone, however this script ends
HOG = "import os\np = os.getppid()\nwhile os.getppid() == p:\n    for _ in range(10**6): pass"


class LoadSampler:
    """The 1-minute load average every ``SAMPLE_S`` seconds, on a thread, while in ``with``."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            self.samples.append(os.getloadavg()[0])
            if self._stop.wait(SAMPLE_S):
                return

    def __enter__(self) -> LoadSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def start_hogs(count: int) -> list[subprocess.Popen]:
    """``count`` processes that each keep one core busy (niceness unchanged: they compete)."""
    return [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(count)]


def stop_hogs(hogs: list[subprocess.Popen]) -> None:
    for hog in hogs:
        if hog.poll() is None:
            hog.kill()
        hog.wait()


def run_suite(pytest_args: list[str], log: Path) -> dict:
    """One run of the suite in a fresh temporary directory: its verdict, times and load."""
    with tempfile.TemporaryDirectory(prefix="busy-tmp-") as tmp:
        env = {**os.environ, "TMPDIR": tmp, "PYTHONDONTWRITEBYTECODE": "1"}
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *pytest_args]
        start = time.monotonic()
        with LoadSampler() as load, log.open("w") as out:
            done = subprocess.run(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        wall = time.monotonic() - start
        left = sorted(p.name for p in Path(tmp).glob("ringsim-*"))
    text = log.read_text(errors="replace")
    summaries = re.findall(r"^=*\s*(\d+ (?:passed|failed).*?) in [\d.]+s.*$", text, re.M)
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", text, re.M)
    return {
        "exit": done.returncode,
        "ok": done.returncode == 0 and not left,
        "summary": summaries[-1] if summaries else (text.strip().splitlines() or [""])[-1],
        "failed": failed,
        "wall_s": round(wall, 1),
        "load_mean": round(sum(load.samples) / len(load.samples), 2),
        "load_max": round(max(load.samples), 2),
        "left_in_tmp": left,
        "log": str(log),
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    pytest_args: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, pytest_args = argv[:at], argv[at + 1 :]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="runs of the suite (5)")
    parser.add_argument("--hogs", type=int, default=2, help="CPU-bound processes beside it (2)")
    parser.add_argument("--logs", type=Path, default=None, help="folder for each run's output")
    parser.add_argument("--out", type=Path, default=None, help="also write the report as JSON")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.hogs < 0:
        parser.error(f"--runs must be >= 1 and --hogs >= 0, got {args.runs} and {args.hogs}")
    logs = args.logs or Path(tempfile.mkdtemp(prefix="busy-suite-"))
    logs.mkdir(parents=True, exist_ok=True)
    print(
        f"{args.runs} runs of `pytest -q {' '.join(pytest_args)}` beside {args.hogs} CPU-bound "
        f"processes on {os.cpu_count()} cores; logs in {logs}",
        flush=True,
    )
    hogs = start_hogs(args.hogs)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # through finally: the hogs end
    runs = []
    try:
        for i in range(args.runs):
            run = run_suite(pytest_args, logs / f"run-{i + 1}.log")
            runs.append(run)
            verdict = "PASS" if run["ok"] else "FAIL"
            extra = f"; left {run['left_in_tmp']}" if run["left_in_tmp"] else ""
            print(
                f"run {i + 1}: {verdict}  {run['wall_s']:7.1f} s  load {run['load_mean']:.1f} "
                f"(max {run['load_max']:.1f})  {run['summary']}{extra}",
                flush=True,
            )
            for name in run["failed"]:
                print(f"    {name}", flush=True)
    finally:
        stop_hogs(hogs)
    failed = sum(not r["ok"] for r in runs)
    walls = [r["wall_s"] for r in runs]
    print(
        f"{len(runs) - failed} of {len(runs)} runs green; wall {min(walls):.0f}-{max(walls):.0f} "
        f"s; load {min(r['load_mean'] for r in runs):.1f}-{max(r['load_max'] for r in runs):.1f}"
    )
    if args.out:
        report = {"hogs": args.hogs, "cores": os.cpu_count(), "pytest_args": pytest_args}
        args.out.write_text(json.dumps({**report, "runs": runs}, indent=1) + "\n")
    return failed


if __name__ == "__main__":
    sys.exit(main())
