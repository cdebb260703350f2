"""The planner, on demand: its speed (candidates per second), and its choices beside the
configurations practitioners published (never fitted to them).

    .venv/bin/python benchmarks/bench_planner.py            # all parts
    .venv/bin/python benchmarks/bench_planner.py --speed    # only the timing
    .venv/bin/python benchmarks/bench_planner.py --json results/planner-vs-published.json

1. Speed (target: at least 1,000 candidates ranked in under 10 s on this 2-core machine):
   ``plan`` for Llama 3 8B at 128K tokens, 64 sequences per step, on 8 DGX H100 nodes (64 GPUs):
   every tensor x context x data-parallel split, strategy, placement, layout and recompute choice
   enumerated, sized, and the ones that fit timed and ranked (``keep=None``: all of them).
   It prints candidates per second, and the same plan again (its attention timings cached in
   the process: what a second question about the same cluster costs).
2. YunChang (USP) best Ulysses degree per configuration (``ringsim validate --experiment
   yunchang``): predicted and published iterations per second at every degree.
3. The published training configurations (``ringsim validate``'s step rows): NeMo's Llama 2
   7B FP8 table and the Llama 3 405B rows, each with the planner's choice on the same cluster.
"""

from __future__ import annotations

import argparse
import json
import time

from ringsim.timer.machine.topology import get_cluster
from ringsim.timer.studies.planner import plan
from ringsim.timer.studies.published import DATASET
from ringsim.timer.studies.validate import (
    published_configuration,
    validate,
    yunchang_implementation,
    yunchang_its,
)


def speed() -> dict:
    cluster = get_cluster("dgx-h100").with_nodes(8)
    out = {}
    for run in ("cold", "again"):
        t0, cpu0 = time.perf_counter(), time.process_time()
        result = plan("llama3-8b", 128 * 1024, cluster, global_batch=64, implementation="ideal")
        seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        n = len(result.candidates) + len(result.dropped)
        print(
            f"speed ({run}): llama3-8b, 128K x 64 sequences, 8 x 8 H100: {n} candidates "
            f"({len(result.candidates)} fit and were timed, {len(result.dropped)} do not fit; "
            f"{result.timed_attention} distinct attention configurations) in {seconds:.2f} s = "
            f"{n / seconds:.0f} candidates/s (target >= 1,000 in < 10 s); {cpu:.2f} s of CPU "
            f"time ({n / cpu:.0f} candidates per CPU second: the rate on an idle core)"
        )
        out[run] = {
            "candidates": n,
            "timed": len(result.candidates),
            "seconds": seconds,
            "candidates_per_s": n / seconds,
        }
    best = result.candidates[0]
    print(f"  best: {best.label}: {best.why()}\n")
    return out


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
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args()
    out = {"speed": speed()}
    if not args.speed:
        out["yunchang"] = yunchang()
        out["training"] = training()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1, default=str)


if __name__ == "__main__":
    main()
