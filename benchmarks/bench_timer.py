"""Speed of the event timer, and the overlap thresholds of every preset beside the paper's.

    .venv/bin/python benchmarks/bench_timer.py [--quick]

1. events/s of the heap oracle and the vectorised engine, side by side on the same rings, and of
   the vectorised engine on big rings (an event: one compute interval or one link transfer);
2. wall time of a whole process (import included) simulating 4096 hosts, 16M tokens, zigzag,
   causal: 16.7M block computations, as `ringsim simulate` would; and `ringsim simulate
   --hosts 16384 --seq-len 16M --layout zigzag --causal` under `ideal` beside each real family
   (target: every family within 2x of `ideal`, under 5 s);
3. the minimal block for overlap of every preset, closed form and found by the timer.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from ringsim.timer import RingConfig, simulate
from ringsim.timer.cost import overlap_threshold
from ringsim.timer.machine.hardware import PRESETS

BIG_RUN = (
    "from ringsim.timer import RingConfig, simulate; from ringsim.values import parse_length;"
    "from ringsim.timer.machine.hardware import get_hardware;"
    "cfg = RingConfig(hosts=4096, seq_len=parse_length('16M'),"
    " hardware=get_hardware('a100-nvlink'), layout='zigzag', causal=True);"
    "s = simulate(cfg).summary(); print(s['total_time_s'], s['idle_fraction'], s['events'])"
)
PAPER = {"a100-nvlink": "1.0K", "a100-ib": "24.5K", "tpu-v4": "1.0K"}
FAMILY_RUN = [
    "-m",
    "ringsim",
    "simulate",
    "--hosts",
    "16384",
    "--seq-len",
    "16M",
    "--layout",
    "zigzag",
    "--causal",
    "--hardware",
    "h100-nvlink",
    "--implementation",
]
FAMILIES = ("ideal", "fa2", "fa3", "cudnn", "triton")


def events_per_second(hosts: int, engine: str, repeat: int = 1) -> tuple[float, int]:
    cfg = RingConfig(
        hosts=hosts,
        seq_len=hosts * 4096,
        hardware=PRESETS["a100-nvlink"],
        layout="zigzag",
        causal=True,
    )
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        result = simulate(cfg, engine=engine)
        best = min(best, time.perf_counter() - start)
    events = result.summary()["events"]
    return events / best, events


def timer_threshold(hw, heads=32, kv_heads=32, head_dim=128, hosts=4) -> int:
    """Smallest block (tokens) whose forward run has no exposed communication."""

    def exposed(block: int) -> bool:
        cfg = RingConfig(
            hosts=hosts,
            seq_len=hosts * block,
            hardware=hw,
            heads=heads,
            kv_heads=kv_heads,
            head_dim=head_dim,
        )
        s = simulate(cfg).summary()
        return s["exposed_comm_s"] > 1e-12 * s["total_time_s"]

    lo, hi = 1, 2
    while exposed(hi):
        lo, hi = hi, 2 * hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if exposed(mid) else (lo, mid)
    return hi


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller rings, one repeat")
    args = parser.parse_args()
    repeat = 1 if args.quick else 3

    print("== events/s (zigzag, causal, forward, a100-nvlink) ==")
    print(f"{'hosts':>6} {'events':>10} {'heap ev/s':>12} {'vectorized ev/s':>16} {'ratio':>7}")
    for hosts in (8, 32, 64) if args.quick else (8, 32, 64, 128):
        heap, events = events_per_second(hosts, "heap", 1)
        fast, _ = events_per_second(hosts, "vectorized", repeat)
        print(f"{hosts:>6} {events:>10} {heap:>12.3g} {fast:>16.3g} {fast / heap:>7.0f}x")
    for hosts in (1024,) if args.quick else (1024, 4096):
        fast, events = events_per_second(hosts, "vectorized", 1)
        print(f"{hosts:>6} {events:>10} {'-':>12} {fast:>16.3g}")

    print("\n== whole process: 4096 hosts, 16M tokens, zigzag, causal (16.7M blocks) ==")
    walls = []
    for _ in range(repeat):
        start = time.perf_counter()
        out = subprocess.run(
            [sys.executable, "-c", BIG_RUN], capture_output=True, text=True, check=True
        )
        walls.append(time.perf_counter() - start)
    print(
        f"wall s: min {min(walls):.2f}, median {statistics.median(walls):.2f} "
        f"({len(walls)} runs); makespan, idle, events = {out.stdout.strip()}"
    )

    print("\n== whole process: `simulate --hosts 16384 --seq-len 16M --layout zigzag --causal` ==")
    base = None
    for family in FAMILIES:
        walls = []
        for _ in range(repeat):
            start = time.perf_counter()
            subprocess.run([sys.executable, *FAMILY_RUN, family], capture_output=True, check=True)
            walls.append(time.perf_counter() - start)
        wall = statistics.median(walls)
        base = wall if base is None else base
        runs = f"({len(walls)} runs), {wall / base:.2f}x ideal"
        print(f"{family:<7} wall s: median {wall:.2f} {runs}")

    print("\n== minimal block for overlap (forward, 32 heads x 128, bf16) ==")
    head = (
        f"{'preset':<15} {'TFLOP/s':>8} {'GB/s':>7} {'F/B':>8} {'+latency':>9} "
        f"{'timer':>7} {'GQA 8':>7} {'bwd':>7} {'paper':>6}"
    )
    print(head)
    print("-" * len(head))
    for name, hw in PRESETS.items():
        kw = dict(heads=32, kv_heads=32, head_dim=128, dtype="bf16")
        plain = overlap_threshold(hw, **kw, include_latency=False)
        with_latency = overlap_threshold(hw, **kw)
        gqa = overlap_threshold(hw, heads=32, kv_heads=8, head_dim=128, dtype="bf16")
        bwd = overlap_threshold(hw, **kw, pass_="backward")
        found = timer_threshold(hw)
        print(
            f"{name:<15} {hw.flops['bf16'] / 1e12:>8.0f} {hw.link_bandwidth / 1e9:>7.1f} "
            f"{plain:>8.0f} {with_latency:>9.0f} {found:>7d} {gqa:>7.0f} {bwd:>7.0f} "
            f"{PAPER.get(name, '-'):>6}"
        )
    print("F/B: closed form without latency (the paper's c >= F/B); +latency: with the preset's")
    print("per-message latency; timer: smallest block with no exposed communication in a")
    print("4-host simulated ring (= ceil of +latency); GQA 8: 8 kv heads; bwd: backward pass.")


if __name__ == "__main__":
    main()
