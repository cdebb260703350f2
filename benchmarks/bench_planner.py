"""The planner, on demand: its speed on the 1M-token, 64-GPU question, and its rankings against
the published configurations it was never fitted to.

    .venv/bin/python benchmarks/bench_planner.py            # both parts
    .venv/bin/python benchmarks/bench_planner.py --speed    # only the timing
    .venv/bin/python benchmarks/bench_planner.py --json results/planner-vs-published.json

1. Speed: ``plan`` for a Llama-3-8B-shaped model at 1M tokens on 8 DGX H100 nodes (64 GPUs):
   every candidate enumerated, sized and timed; the target is under 10 s on this machine.
2. Published rankings. YunChang (USP's library, github.com/feifeibear/long-context-attention,
   README "Benchmark", snapshot 56118e0; benchmark/benchmark_longctx.py: causal, bf16, forward
   only with --fwd_only, Ulysses groups on consecutive ranks) timed the attention forward at
   each Ulysses degree U (ring degree 8 / U) on three machines; the published figure is the best
   ring implementation (basic / zigzag / stripe) per U, ours the best layout (contiguous /
   zigzag / striped). Every row prints predicted and published iterations per second, their
   ratio, and both rankings of U. Then the planner beside three training setups whose
   authors chose degrees (Llama 3 405B, NeMo Llama 2 7B and Llama 3 8B), as analogues: they
   split heads with tensor parallelism where ringsim has Ulysses (the same all-to-all-free
   head split is not modelled), so only where the analogue ranks is reported.

Nothing here is tuned: presets and the ideal timer as they are (``implementation="ideal"``,
peak FLOP/s, no kernel efficiency, no collective efficiency).
"""

from __future__ import annotations

import argparse
import json
import time

from ringsim.timer import RingConfig
from ringsim.timer.machine.topology import get_cluster
from ringsim.timer.step.models import ModelSpec, get_model
from ringsim.timer.strategies import simulate_strategy
from ringsim.timer.studies.planner import plan

# Llama 3 shapes (Llama Team, arXiv 2407.21783, Table 3), if ringsim.timer.step.memory lacks them
LLAMA3 = {
    "llama3-8b": ModelSpec("llama3-8b", 32, 4096, 32, 14336, vocab=128256, kv_heads=8),
    "llama3-70b": ModelSpec("llama3-70b", 80, 8192, 64, 28672, vocab=128256, kv_heads=8),
    "llama3-405b": ModelSpec("llama3-405b", 126, 16384, 128, 53248, vocab=128256, kv_heads=8),
}


def model(name: str) -> ModelSpec:
    try:
        return get_model(name)
    except ValueError:
        return LLAMA3[name]


# (machine, cluster preset, batch, seq_len, heads, kv_heads, head_dim, {U: published it/s})
YUNCHANG = [
    ("8xA100 NVLink", "dgx-a100", 2, 8192, 32, 32, 32, {8: 237.9, 4: 581.3, 2: 417.3, 1: 245.8}),
    ("8xA100 NVLink", "dgx-a100", 2, 32768, 32, 32, 32, {8: 91.4, 4: 89.3, 2: 78.7, 1: 59.8}),
    ("8xA100 NVLink", "dgx-a100", 2, 131072, 32, 32, 32, {8: 15.9, 4: 16.0, 2: 15.3, 1: 13.2}),
    ("8xA100 NVLink", "dgx-a100", 2, 131072, 8, 8, 32, {8: 58.6, 4: 59.5, 2: 58.3, 1: 51.8}),
    ("8xA100 NVLink", "dgx-a100", 2, 131072, 8, 8, 128, {8: 21.0, 4: 21.9, 2: 21.4, 1: 18.2}),
    ("8xL20 PCIe", "pcie-8x-l20", 2, 131072, 32, 32, 32, {8: 3.95, 4: 6.67, 2: 8.47, 1: 7.41}),
    ("8xL20 PCIe", "pcie-8x-l20", 1, 8192, 32, 8, 128, {8: 57.1, 4: 152.19, 2: 454.93, 1: 361.97}),
    ("8xL20 PCIe", "pcie-8x-l20", 1, 32768, 32, 8, 128, {8: 14.26, 4: 32.82, 2: 62.75, 1: 58.38}),
    ("8xL20 PCIe", "pcie-8x-l20", 1, 131072, 32, 8, 128, {8: 2.59, 4: 4.24, 2: 5.48, 1: 5.19}),
    ("4xA100 PCIe", "pcie-4x-a100", 2, 4096, 32, 32, 32, {4: 262.5, 2: 243.5, 1: 189.2}),
    ("4xA100 PCIe", "pcie-4x-a100", 2, 16384, 32, 32, 32, {4: 41.44, 2: 53.55, 1: 56.75}),
    ("4xA100 PCIe", "pcie-4x-a100", 2, 65536, 32, 32, 32, {4: 8.56, 2: 8.29, 1: 9.74}),
]


def predicted_its(cluster_name, batch, seq_len, heads, kv_heads, head_dim, u) -> float:
    """Best layout's forward iterations per second at Ulysses degree ``u``."""
    cluster = get_cluster(cluster_name).with_nodes(1)
    hosts = cluster.gpus_per_node
    base = RingConfig(
        hosts=hosts,
        seq_len=seq_len,
        hardware=cluster.hardware,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        batch=batch,
        causal=True,
    )
    best = float("inf")
    for layout in ("contiguous", "zigzag", "striped"):
        cfg = base.replace(layout=layout)
        if u == 1:
            s = simulate_strategy(cfg, "ring", cluster=cluster)
        elif u == hosts:
            s = simulate_strategy(cfg, "ulysses", cluster=cluster)
        else:
            s = simulate_strategy(cfg, "hybrid", ulysses_degree=u, cluster=cluster)
        best = min(best, s.summary()["total_time_s"])
    return 1.0 / best


def ranking(values: dict[int, float]) -> list[int]:
    """Degrees U, fastest first."""
    return sorted(values, key=lambda u: -values[u])


def yunchang() -> list[dict]:
    rows = []
    print("YunChang (USP) attention forward, causal: iterations/s, predicted vs published")
    print(
        f"{'machine':14s} {'b':>2s} {'seq':>7s} {'H/Hkv/d':>9s} {'U':>2s} "
        f"{'predicted':>10s} {'published':>10s} {'ratio':>6s}"
    )
    for machine, preset, b, n, h, hkv, d, published in YUNCHANG:
        predicted = {u: predicted_its(preset, b, n, h, hkv, d, u) for u in published}
        for u in published:
            ratio = predicted[u] / published[u]
            print(
                f"{machine:14s} {b:2d} {n:7d} {h:>3d}/{hkv}/{d:<3d} {u:2d} "
                f"{predicted[u]:10.2f} {published[u]:10.2f} {ratio:6.2f}"
            )
        ours, theirs = ranking(predicted), ranking(published)
        agree = ours[0] == theirs[0]
        print(
            f"  ranking of U, fastest first: predicted {ours}  published {theirs}  "
            f"best {'agrees' if agree else 'DIFFERS'}"
        )
        rows.append(
            dict(
                machine=machine,
                preset=preset,
                batch=b,
                seq_len=n,
                heads=h,
                kv_heads=hkv,
                head_dim=d,
                predicted_its=predicted,
                published_its=published,
                predicted_ranking=ours,
                published_ranking=theirs,
                best_agrees=agree,
            )
        )
    hits = sum(r["best_agrees"] for r in rows)
    print(f"best U predicted right in {hits} of {len(rows)} configurations\n")
    return rows


# (what, model, seq_len, preset, nodes, published choice as (strategy, U), source)
TRAINING = [
    (
        "Llama 3 405B, 128K: TP8 (in node) x CP16 all-gather (across nodes)",
        "llama3-405b",
        131072,
        "dgx-h100",
        16,
        ("allgather", 8),
        "Llama 3 Herd, arXiv 2407.21783, Table 4 and Sec. 3.3.2",
    ),
    (
        "NeMo Llama 2 7B, 128K, DGX-H100: TP4 x CP4 per sequence",
        "7b",
        131072,
        "dgx-h100",
        2,
        ("hybrid", 4),
        "NVIDIA NeMo docs, performance_long_sequence.md (24.03.01)",
    ),
    (
        "NeMo Llama 3 8B, 1M: TP4 x CP16 per sequence (on B200; here H100)",
        "llama3-8b",
        1048576,
        "dgx-h100",
        8,
        ("hybrid", 4),
        "NVIDIA NeMo docs (25.04.rc2), DGX-B200",
    ),
]


def training() -> list[dict]:
    rows = []
    print("Published training setups beside the planner (analogues: TP there, Ulysses here)")
    for what, name, n, preset, nodes, (strategy, u), source in TRAINING:
        cluster = get_cluster(preset).with_nodes(nodes)
        try:
            result = plan(model(name), n, cluster)
        except ValueError as err:
            print(f"- {what}: planner: {err}\n")
            rows.append(dict(what=what, error=str(err), source=source))
            continue
        matches = [
            i
            for i, c in enumerate(result.candidates)
            if c.strategy == strategy and c.ulysses_degree == u and c.placement == "ulysses-inner"
        ]
        best = result.candidates[0]
        rank = matches[0] + 1 if matches else None
        analogue = result.candidates[matches[0]] if matches else None
        print(f"- {what} [{source}]")
        print(f"  planner's best: {best.label}, {best.step_time_s:.3g} s/step")
        if analogue is not None:
            slower = analogue.step_time_s / best.step_time_s - 1
            print(
                f"  analogue {analogue.label}: rank {rank} of {len(result.candidates)}, "
                f"{slower:+.1%} vs best\n"
            )
        else:
            print("  analogue does not fit in memory\n")
        rows.append(
            dict(
                what=what,
                source=source,
                best=best.label,
                analogue_rank=rank,
                candidates=len(result.candidates),
            )
        )
    return rows


def speed() -> dict:
    cluster = get_cluster("dgx-h100").with_nodes(8)
    t0 = time.perf_counter()
    result = plan(model("llama3-8b"), 2**20, cluster)
    seconds = time.perf_counter() - t0
    n = len(result.candidates) + len(result.dropped)
    print(
        f"speed: llama3-8b, 1M tokens, 8 x 8 H100: {n} candidates "
        f"({len(result.candidates)} timed) in {seconds:.2f} s (target < 10 s)"
    )
    print(f"  best: {result.candidates[0].label}: {result.candidates[0].why()}\n")
    return {"candidates": n, "timed": len(result.candidates), "seconds": seconds}


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
