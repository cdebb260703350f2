"""The planner, on demand: its speed at the scale of the largest runs, where its time goes, and
its choices beside the configurations practitioners published (never fitted to them).

    .venv/bin/python benchmarks/bench_planner.py                  # all parts
    .venv/bin/python benchmarks/bench_planner.py --speed          # only the timing
    .venv/bin/python benchmarks/bench_planner.py --speed --baseline /tmp/main   # before -> after
    .venv/bin/python benchmarks/bench_planner.py --profile 405b   # cProfile of one case
    .venv/bin/python benchmarks/bench_planner.py --json results/planner-vs-published.json

1. Speed (issue 35's targets; each case in a fresh process, wall and CPU seconds):
   * ``8b``: Llama 3 8B at 128K tokens x 64 sequences on 8 DGX H100 nodes (64 GPUs), ideal
     kernels, PP 1: every tensor x context x data-parallel split, strategy, placement, layout
     and recompute choice sized, and every one that fits timed and ranked (``keep=None``).
     Target: 5x faster than before issue 35 (3.0 s here then). ``8b-cli``: the same question
     as ``ringsim plan`` asks it now (the best 30 exact, ``--top 10`` intervals) against the
     command line before (every fitting one timed, the same intervals). ``8b-pp``: the first
     with the pipeline degree and virtual stages searched.
   * ``405b``: Llama 3 405B at 128K x 128 on 2,048 DGX H100 nodes (16,384 GPUs), FA2, PP and
     virtual stages searched, the best 30 exact as ``ringsim plan`` keeps them for its ten rows
     (``--top 10``): target >= 10,000 configurations considered in < 10 s. ``405b-pp16v2``:
     issue 35's first measurement (PP16 v2 fixed, every fitting one timed: 35-42 s then).
   * ``65536``: the documented maximum (``MAX_PLAN_HOSTS``): Llama 3 8B at 1M x 64 on 8,192
     nodes, FA2, PP searched, as ``ringsim plan`` keeps it: target < 20 s.
   With ``--baseline DIR`` (a checkout of the code before, e.g. ``git worktree add /tmp/main
   main``) each case its code can ask runs there too, side by side, and the ratio is printed.
2. ``--profile CASE``: cProfile of one case, the functions by their own time and by their
   cumulative time (what ``results/notes-planner-speed.md`` records).
3. YunChang (USP) best Ulysses degree per configuration (``ringsim validate --experiment
   yunchang``): predicted and published iterations per second at every degree.
4. The published training configurations (``ringsim validate``'s step rows): NeMo's Llama 2
   7B FP8 table and the Llama 3 405B rows, each with the planner's choice on the same cluster.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import subprocess
import sys
import time
from pathlib import Path

from ringsim.timer.machine.topology import get_cluster
from ringsim.timer.studies.planner import plan
from ringsim.timer.studies.published import DATASET
from ringsim.timer.studies.validate import (
    published_configuration,
    validate,
    yunchang_implementation,
    yunchang_its,
)

CASES = {
    "8b": dict(
        model="llama3-8b",
        seq_len=2**17,
        nodes=8,
        global_batch=64,
        implementation="ideal",
        pp=1,
        virtual_stages=1,
    ),
    "8b-cli": dict(
        model="llama3-8b",
        seq_len=2**17,
        nodes=8,
        global_batch=64,
        implementation="ideal",
        pp=1,
        virtual_stages=1,
        keep=30,
        intervals=10,
    ),
    "8b-pp": dict(
        model="llama3-8b", seq_len=2**17, nodes=8, global_batch=64, implementation="ideal"
    ),
    "405b": dict(
        model="llama3-405b",
        seq_len=2**17,
        nodes=2048,
        global_batch=128,
        implementation="fa2",
        keep=30,
        intervals=10,
    ),
    "405b-pp16v2": dict(
        model="llama3-405b",
        seq_len=2**17,
        nodes=2048,
        global_batch=128,
        implementation="fa2",
        pp=16,
        virtual_stages=2,
        intervals=10,
    ),
    "65536": dict(
        model="llama3-8b",
        seq_len=2**20,
        nodes=8192,
        global_batch=64,
        implementation="fa2",
        keep=30,
        intervals=10,
    ),
}
"""Each case as ``plan``'s arguments (``nodes`` of the DGX H100 cluster)."""

COMMANDS = {
    "8b": "ringsim plan --model llama3-8b --seq-len 128K --cluster dgx-h100 --nodes 8 "
    "--global-batch 64 --implementation ideal --pp 1 --virtual-stages 1 --keep all",
    "8b-cli": "ringsim plan --model llama3-8b --seq-len 128K --cluster dgx-h100 --nodes 8 "
    "--global-batch 64 --implementation ideal --pp 1 --virtual-stages 1",
    "8b-pp": "ringsim plan --model llama3-8b --seq-len 128K --cluster dgx-h100 --nodes 8 "
    "--global-batch 64 --implementation ideal --keep all",
    "405b": "ringsim plan --model llama3-405b --seq-len 128K --cluster dgx-h100 --nodes 2048 "
    "--global-batch 128 --implementation fa2",
    "405b-pp16v2": "ringsim plan --model llama3-405b --seq-len 128K --cluster dgx-h100 "
    "--nodes 2048 --global-batch 128 --pp 16 --virtual-stages 2 --implementation fa2 --keep all",
    "65536": "ringsim plan --model llama3-8b --seq-len 1M --cluster dgx-h100 --nodes 8192 "
    "--global-batch 64 --implementation fa2",
}
"""The command line that asks each case's question (``--keep`` as ``ringsim plan`` keeps it)."""

NEEDS_SEARCH = {"8b-pp", "405b", "65536"}
"""Cases only a planner that searches the pipeline can plan (no baseline before issue 35)."""

BEFORE = {"8b-cli": dict(keep=None)}
"""What the command line asked of the planner before issue 35, where it differs (it timed
every configuration that fits: ``--keep`` did not exist)."""


def run_case(name: str, before: bool = False) -> dict:
    """Plan one case in this process: wall and CPU seconds, what was considered and timed
    (``before``: as the command line asked it before issue 35, ``BEFORE``)."""
    kw = {**CASES[name], **(BEFORE.get(name, {}) if before else {})}
    model, seq_len = kw.pop("model"), kw.pop("seq_len")
    cluster = get_cluster("dgx-h100").with_nodes(kw.pop("nodes"))
    t0, cpu0 = time.perf_counter(), time.process_time()
    result = plan(model, seq_len, cluster, **kw)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    best = result.candidates[0]
    return {
        "case": name,
        "seconds": seconds,
        "cpu_seconds": cpu,
        "considered": len(result.candidates) + len(result.dropped) + len(result.bounded),
        "fit": len(result.candidates) + len(result.bounded),
        "timed": len(result.candidates),
        "attention_timed": result.timed_attention,
        "best": best.label,
        "best_step_s": best.step_time_s,
        "code": str(Path(sys.modules["ringsim"].__file__).parents[1]),
    }


def _in_process(name: str, code: str | None) -> dict:
    """``run_case(name)`` in a fresh process, on the code in ``code`` (a checkout) or here."""
    env = dict(os.environ)
    if code is not None:
        env["PYTHONPATH"] = os.pathsep.join([code, env.get("PYTHONPATH", "")])
    script = Path(__file__).resolve()
    out = subprocess.run(
        [sys.executable, str(script), "--case", name, *(["--before"] if code else [])],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=code or script.parents[1],
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def speed(baseline: str | None = None) -> dict:
    out = {}
    for name in CASES:
        after = _in_process(name, None)
        line = (
            f"{name:12s} {after['considered']:>7,} considered, {after['fit']:>6,} fit, "
            f"{after['timed']:>5,} timed ({after['attention_timed']} attention timings): "
            f"{after['seconds']:6.2f} s wall, {after['cpu_seconds']:6.2f} s CPU; best "
            f"{after['best']} {after['best_step_s']:.4g} s"
        )
        print(line)
        print(f"{'':12s} {COMMANDS[name]}")
        row = {"after": after, "command": COMMANDS[name]}
        if baseline is not None and name not in NEEDS_SEARCH:
            before = _in_process(name, baseline)
            ratio = before["cpu_seconds"] / after["cpu_seconds"]
            print(
                f"{'':12s} before: {before['considered']:,} considered, {before['timed']:,} "
                f"timed, {before['seconds']:.2f} s wall, {before['cpu_seconds']:.2f} s CPU; "
                f"{ratio:.1f}x less CPU now; best {before['best']} {before['best_step_s']:.4g} s"
            )
            row.update(before=before, cpu_ratio=ratio)
        out[name] = row
    print()
    return out


def profile(name: str, top: int = 25) -> str:
    """The cProfile of one case: the functions by their own time, then by cumulative time."""
    profiler = cProfile.Profile()
    profiler.enable()
    run_case(name)
    profiler.disable()
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text).strip_dirs()
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    print(text.getvalue())
    return text.getvalue()


def yunchang() -> list[dict]:
    print("YunChang (USP) attention forward, causal: iterations/s, predicted vs published")
    rows = []
    for row in DATASET:
        if row.experiment != "yunchang":
            continue
        c = row.config
        impl = yunchang_implementation(c, None)
        published = {int(u): v for u, v in c["its"].items()}
        predicted = {u: yunchang_its(c, u, impl) for u in published}
        ours = sorted(predicted, key=lambda u: -predicted[u])
        theirs = sorted(published, key=lambda u: -published[u])
        ratios = " ".join(f"U{u} {predicted[u] / published[u]:.2f}" for u in sorted(published))
        agree = ours[0] == theirs[0]
        print(
            f"  {row.key:48s} [{impl}] predicted/published: {ratios}; best U predicted "
            f"{ours[0]}, published {theirs[0]} ({'agrees' if agree else 'DIFFERS'})"
        )
        rows.append(
            dict(
                key=row.key,
                implementation=impl,
                predicted_its=predicted,
                published_its=published,
                best_agrees=agree,
            )
        )
    hits = sum(r["best_agrees"] for r in rows)
    print(f"best U predicted right in {hits} of {len(rows)} configurations\n")
    return rows


def training() -> list[dict]:
    print("Published training configurations: predicted TFLOPS/GPU, and the planner's choice")
    rows = []
    for r in validate(experiments=["nemo-long", "llama3-t4", "llama3-choice"]):
        print(
            f"  {r['key']:50s} published {r['published']:8.4g}  predicted {r['predicted']:8.4g}"
            f"  error {r['error']:+.1%}  [{r['implementation']}]"
        )
        rows.append({k: r[k] for k in ("key", "published", "predicted", "error", "in_band")})
    for row in DATASET:
        if row.experiment != "nemo-long" or row.config["seq_len"] not in (2**17, 2**20):
            continue
        c = row.config
        run = published_configuration(c)
        chosen = plan(
            run["model"],
            c["seq_len"],
            run["cluster"],
            c["gpus"],
            global_batch=c["global_batch"],
            implementation=c["implementation"],
            framework=c["framework"],
            gemm_dtype=c["gemm_dtype"],
            keep=3,
        )
        published = run["candidate"]
        print(
            f"  planner on {row.key}: best {chosen.candidates[0].label} "
            f"{chosen.candidates[0].step_time_s:.2f} s; published {published.label} "
            f"{published.step_time_s:.2f} s"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--speed", action="store_true", help="only the timing")
    parser.add_argument("--baseline", metavar="DIR", help="also time the cases on this checkout")
    parser.add_argument("--profile", metavar="CASE", choices=CASES, help="cProfile one case")
    parser.add_argument("--case", choices=CASES, help=argparse.SUPPRESS)  # one, as JSON
    parser.add_argument("--before", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args()
    if args.case:
        print(json.dumps(run_case(args.case, args.before)))
        return
    if args.profile:
        profile(args.profile)
        return
    out = {"speed": speed(args.baseline)}
    if not args.speed:
        out["yunchang"] = yunchang()
        out["training"] = training()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1, default=str)


if __name__ == "__main__":
    main()
