"""Snapshot every CLI command's output, to prove a refactor changed nothing a user sees.

    python benchmarks/cli_snapshot.py OUT_DIR            # write one file per command
    python benchmarks/cli_snapshot.py OUT_DIR --compare REF_DIR

Each command's stdout, stderr and exit code go to ``OUT_DIR/NN.txt``; ``--compare`` diffs two
snapshot folders and exits 1 on any difference (timings that depend on the machine, such as the
planner's own wall time, are masked). The commands cover every subcommand under the ``ideal``
family with and without ``--json``, and the ring under the real families.
"""

from __future__ import annotations

import argparse
import difflib
import re
import subprocess
import sys
from pathlib import Path

COMMANDS = [
    "simulate --hosts 8 --seq-len 64K --causal --layout zigzag",
    "simulate --hosts 8 --seq-len 64K --causal --layout zigzag --json",
    "simulate --hosts 8 --seq-len 64K --causal --layout striped --json",
    "simulate --hosts 8 --seq-len 64K --causal --json",
    "simulate --hosts 4 --seq-len 16K --pass backward --json",
    "simulate --hosts 4 --seq-len 16K --pass train-step --causal --layout zigzag --json",
    "simulate --hosts 4 --seq-len 16K --pass train-step --recompute --json",
    "simulate --hosts 4 --seq-len 16K --pass decode --json",
    "simulate --hosts 8 --seq-len 64K --strategy ulysses --json",
    "simulate --hosts 8 --seq-len 64K --strategy allgather --causal --layout zigzag --json",
    "simulate --hosts 8 --seq-len 64K --strategy allgather --pass backward --json",
    "simulate --hosts 16 --seq-len 256K --strategy hybrid --ulysses-degree 4 --causal "
    "--layout zigzag --cluster dgx-h100 --json",
    "simulate --hosts 16 --seq-len 256K --strategy double-ring --causal --layout zigzag "
    "--cluster dgx-h100 --json",
    "simulate --hosts 16 --seq-len 256K --strategy double-ring --pass backward "
    "--cluster dgx-h100 --window 4 --json",
    "simulate --hosts 64 --seq-len 1M --model llama3-8b --strategy hybrid --ulysses-degree 8 "
    "--cluster dgx-h100",
    "simulate --hosts 8 --seq-len 64K --pass backward --tile 128 --straggler 3:2 --json",
    "simulate --hosts 8 --seq-len 64K --jitter 0.1 --seed 3 --json",
    "simulate --hosts 8 --seq-len 64K --no-overlap --hardware a100-ib --json",
    "simulate --hosts 8 --seq-len 64K --flops 100T --bandwidth 10G --latency 1e-5 --json",
    "simulate --hosts 4 --seq-len 4K --causal --schedule",
    "simulate --hosts 8 --seq-len 64K --causal --layout zigzag --implementation fa2 "
    "--hardware h800-nvlink --json",
    "simulate --hosts 8 --seq-len 64K --causal --layout striped --implementation fa2 "
    "--hardware a100-nvlink --pass backward --json",
    "simulate --hosts 8 --seq-len 64K --causal --implementation fa3 --hardware h100-nvlink",
    "simulate --hosts 8 --seq-len 64K --causal --layout zigzag --implementation cudnn "
    "--hardware h100-nvlink --json",
    "simulate --hosts 4 --seq-len 16K --pass train-step --implementation fa2 "
    "--hardware h100-nvlink --json",
    "sweep --vary block",
    "sweep --vary block --json",
    "sweep --vary hosts --json",
    "sweep --vary hosts --values 2,4,8 --layouts zigzag,contiguous",
    "sweep --vary block --strategy ulysses --hosts 8 --json",
    "memory --model 7b --hardware a100-nvlink --hosts 8",
    "memory --model 13b --hardware tpu-v4 --hosts 1024 --json",
    "memory --model llama3-70b --hardware h100-nvlink --hosts 64 --framework none --json",
    "presets",
    "presets --json",
    "plan --model 7b --seq-len 1M --cluster dgx-h100 --hosts 64",
    "plan --model 7b --seq-len 1M --cluster dgx-h100 --hosts 64 --json",
    "plan --model llama3-8b --seq-len 256K --cluster dgx-h100 --nodes 2 --json",
    "plan --model 7b --seq-len 128K --cluster pcie-8x-l20 --hosts 8 --prefill --json",
    "validate",
    "validate --json",
    "validate --experiment zhuzilin --implementation ideal --json",
    "simulate --hosts 0 --seq-len 64K",
    "simulate --hosts 8 --seq-len 1000 --layout zigzag",
    "plan --model nope --seq-len 1M --hosts 8",
    "simulate --hosts 8 --seq-len 64K --strategy ulysses --causal --pass backward --json",
    "simulate --hosts 8 --seq-len 64K --strategy allgather --causal --layout zigzag "
    "--pass backward --json",
    "simulate --hosts 8 --seq-len 48K --strategy ulysses --causal --json",
    "simulate --hosts 6 --seq-len 60000 --strategy allgather --causal --layout striped "
    "--pass backward --json",
    "simulate --hosts 6 --seq-len 60000 --strategy ulysses --causal --pass backward --heads 12 "
    "--json",
    "simulate --hosts 16 --seq-len 256K --strategy allgather --ulysses-degree 4 --cluster dgx-h100 "
    "--json",
    "simulate --hosts 8 --seq-len 64K --strategy ulysses --causal --implementation fa2 "
    "--hardware h800-nvlink --json",
    "simulate --hosts 8 --seq-len 64K --strategy allgather --causal --layout zigzag "
    "--implementation fa2 --hardware h800-nvlink --json",
    "sweep --vary hosts --strategy allgather --json",
    "simulate --hosts 8 --seq-len 64K --strategy ring --json",
    "compare --measured 12ms --hosts 8 --seq-len 64K --causal --layout zigzag --hardware "
    "h100-nvlink --implementation fa2 --json",
    "compare results/traces/cpu-gloo-zigzag-2026-12-02/rank0.json.gz "
    "results/traces/cpu-gloo-zigzag-2026-12-02/rank1.json.gz --json",
    # the device as an object (issue 32): a preset's facts survive an override, files load
    "simulate --hosts 8 --seq-len 64K --causal --layout zigzag --hardware h200-ib "
    "--implementation fa2 --json",
    "simulate --hosts 8 --seq-len 64K --causal --layout zigzag --hardware h200-ib "
    "--implementation fa2 --memory-bytes 141G --json",
    "simulate --hosts 8 --seq-len 64K --causal --layout zigzag --hardware h100-nvlink "
    "--implementation fa2 --json",
    "simulate --hosts 8 --seq-len 64K --causal --layout zigzag --hardware h100-nvlink "
    "--implementation fa2 --memory-bytes 80G --json",
    "simulate --hosts 8 --seq-len 64K --causal --layout zigzag --hardware a100-ib "
    "--implementation fa2 --json",
    "simulate --hosts 8 --seq-len 64K --causal --layout zigzag --hardware h100-nvlink "
    "--implementation fa2 --bandwidth 100G --json",
    "simulate --hosts 8 --seq-len 64K --causal --layout zigzag --hardware h800-nvlink "
    "--implementation fa2 --interval --json",
    "simulate --hosts 4 --seq-len 16K --pass decode --implementation fa2 --hardware h100-nvlink "
    "--json",
    "simulate --hosts 4 --seq-len 16K --pass train-step --implementation fa2 "
    "--hardware h100-nvlink --linear-rate fp8 --json",
    "simulate --hosts 4 --seq-len 16K --pass train-step --implementation fa2 "
    "--hardware a100-nvlink --linear-rate fp8 --json",
    "simulate --hosts 16 --seq-len 256K --strategy double-ring --causal --layout zigzag "
    "--cluster hgx-h800 --implementation fa2 --json",
    "simulate --hosts 16 --seq-len 256K --strategy hybrid --ulysses-degree 4 --causal "
    "--layout zigzag --cluster dgx-a100 --implementation fa2 --json",
    "simulate --hosts 8 --seq-len 64K --hardware tpu-v4 --implementation torch --json",
    "simulate --hosts 8 --seq-len 64K --hardware h100-nvlink --implementation torch --json",
    "simulate --hosts 2 --seq-len 4K --hardware cpu-calibrated --implementation torch --json",
    "plan --model 7b --seq-len 128K --cluster dgx-h100 --hosts 8 --implementation torch --json",
    "plan --model 7b --seq-len 128K --cluster dgx-h100 --nodes 4 --tp 8 --implementation cudnn "
    "--json",
    "plan --model 7b --seq-len 128K --cluster pcie-8x-l20 --hosts 8 --prefill "
    "--implementation fa2 --json",
    "memory --model 7b --hardware h100-nvlink --hosts 8 --json",
    "memory --model 7b --hardware h200-nvlink --hosts 8 --json",
    "memory --model 7b --hardware h800-nvlink --hosts 8 --memory-bytes 80G --json",
    "sweep --vary block --hardware h100-nvlink --implementation fa2 --causal --layout zigzag "
    "--json",
]

#: Values that depend on the machine, not the model: masked before comparing.
MASKS = [
    (re.compile(r'"planner_seconds": [0-9.e+-]+'), '"planner_seconds": X'),
    (re.compile(r"in [0-9.]+ s\b"), "in X s"),
    (re.compile(r"do not; [0-9.]+ s\)"), "do not; X s)"),
]


def snapshot(out: Path, ringsim: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for i, command in enumerate(COMMANDS):
        proc = subprocess.run(
            [ringsim, *command.split()], capture_output=True, text=True, timeout=600
        )
        text = f"$ ringsim {command}\nexit {proc.returncode}\n{proc.stdout}\n--stderr--\n"
        text += proc.stderr
        for pattern, repl in MASKS:
            text = pattern.sub(repl, text)
        (out / f"{i:02d}.txt").write_text(text)
        print(f"{i:02d} exit {proc.returncode}  ringsim {command}", flush=True)


def compare(out: Path, ref: Path) -> int:
    bad = 0
    for i in range(len(COMMANDS)):
        a, b = (ref / f"{i:02d}.txt"), (out / f"{i:02d}.txt")
        if not a.exists():
            print(f"{i:02d}: no reference")
            continue
        old, new = a.read_text().splitlines(), b.read_text().splitlines()
        if old != new:
            bad += 1
            print(f"{i:02d} differs: ringsim {COMMANDS[i]}")
            for line in list(difflib.unified_diff(old, new, lineterm="", n=1))[:40]:
                print("   ", line)
    print(f"{len(COMMANDS) - bad} of {len(COMMANDS)} identical")
    return 1 if bad else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--compare", type=Path, metavar="REF_DIR")
    parser.add_argument("--ringsim", default=str(Path(sys.executable).parent / "ringsim"))
    args = parser.parse_args()
    snapshot(args.out, args.ringsim)
    return compare(args.out, args.compare) if args.compare else 0


if __name__ == "__main__":
    sys.exit(main())
