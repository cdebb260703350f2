"""ringsim beside the two public Ring Attention packages, on this machine, on the same inputs.

    .venv/bin/python benchmarks/bench_peers.py                # every case (~20 min, quiet machine)
    .venv/bin/python benchmarks/bench_peers.py --quick        # N/4, one round (a smoke run)
    .venv/bin/python benchmarks/bench_peers.py --skip-peers   # ringsim only, no install

The peers are ``ringattention`` 0.1.2 (the paper authors' JAX package: ``shard_map`` over two
virtual CPU devices in one process) and ``ring-attention-pytorch`` 0.5.20 (``ring_flash_attn``,
two gloo ranks). They are installed into a virtualenv of their own, outside the repository
(``--peers-venv``, default ``~/.cache/ringsim-peers/venv``): ``ringattention`` 0.1.2 does not
import on jax >= 0.8, so jax/jaxlib are pinned to 0.7.2; torch is pinned to the CPU build this
project uses (an unpinned ``torch`` would fetch a CUDA build). If that install fails, the peers
are skipped with the reason and ringsim runs alone.

Every case (P = 2, fp32, batch 1, 8 heads, head dim 64) runs each implementation in fresh
processes, one after the other, and repeats the round with the order rotated, so the load of
this shared machine hits all of them alike: ringsim's gloo ring (``kernels.distributed.launch``,
one pinned
torch thread per rank; zigzag for causal), ringsim's NumPy executor (one process holding both
virtual hosts; forward cases up to ``--numpy-max-seq-len``: it is an exact reference, ~20x
slower than the torch ring here), the two peers, and the compute floor (torch's fused SDPA on
one thread, one core per rank, the two full blocks each rank computes). It prints median
times, ringsim ÷ JAX, ringsim's fraction of the floor, peak memory per process
(``VmHWM``; the JAX process holds both devices) and, up to N = 8192, the error of every
output and gradient against float64, per rank and per token. ring-attention-pytorch's dK/dV
are wrong with two ranks or more: its backward ends with ``dk, dv = ring_pass(..., dkv)``,
which returns the pair (received, sent) of ``(dk, dv)`` stacks, and autograd sums each stack
to the input's shape, so a rank gets ``dK + dV`` of its own block as dK and ``dK + dV`` of
its left neighbour's block as dV (checked here to 2e-7 at P = 2).
Results go to ``results/peers-<date>.json``.

The peers' call conventions, from their sources: ``ringattention(q, k, v, attn_bias,
segment_ids, cache_idx, axis_name, float32_logits, blockwise_kwargs)`` with ``q`` of shape
``(B, N/P, H, d)`` inside ``shard_map``; ``ring_flash_attn(q, k, v, causal=..., bucket_size=...,
ring_reduce_col=True)`` with each rank's ``(B, N/P, H, d)`` block in rank order. Both run
from ``peer_workers.py`` under the peers' python.

Memory is printed as ``peak(+above the process's start)`` in MiB per process: the start is after
imports (torch, or jax), before the inputs are loaded.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import date
from pathlib import Path

import numpy as np
from peer_workers import HEAD_DIM, HEADS, HOSTS, maxrss_bytes

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results"
PEERS = ("jax", "ring-attention-pytorch")
IMPLS = ("ringsim-gloo", "ringsim-numpy", *PEERS, "floor")
PEER_REQUIREMENTS = (
    "ringattention==0.1.2",
    "jax==0.7.2",  # ringattention 0.1.2 calls jax.lib.xla_bridge, gone in jax 0.8
    "jaxlib==0.7.2",
    "flax>=0.12,<0.13",
    "ring-attention-pytorch==0.5.20",
    "torch==2.13.0",  # this project's CPU torch; unpinned, pip would pick a CUDA build
)
TOL = 1e-4  # error / max|reference| above which an output or gradient is wrong (fp32: ~1e-6)
MIB = 2.0**20


@dataclass(frozen=True)
class Case:
    name: str
    seq_len: int
    causal: bool = False
    backward: bool = False
    rounds: int = 3
    repeats: int = 2  # timed runs per process, after one warm-up


def cases(quick: bool, rounds: int | None) -> list[Case]:
    """The cases of issue 15; ``quick`` divides N by 4 and runs one round of one repeat."""
    div = 4 if quick else 1
    full = [
        Case("forward", 4096 // div),
        Case("forward+backward", 4096 // div, backward=True),
        Case("causal forward", 4096 // div, causal=True),
        Case("forward, N=16K", 16384 // div, rounds=2, repeats=1),
    ]
    pick = lambda c: rounds or (1 if quick else c.rounds)
    return [
        Case(c.name, c.seq_len, c.causal, c.backward, pick(c), 1 if quick else c.repeats)
        for c in full
    ]


# ------------------------------------------------------------------------------------------
# The peers' virtualenv
# ------------------------------------------------------------------------------------------


def default_venv() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return cache / "ringsim-peers" / "venv"


def ensure_peers(venv: Path, run=subprocess.run) -> tuple[Path | None, str]:
    """The peers' python (installing them into ``venv`` if needed), or ``None`` and why not."""
    python = venv / "bin" / "python"
    probe = [str(python), "-c", "import ringattention, ring_attention_pytorch"]
    if python.exists() and run(probe, capture_output=True).returncode == 0:
        return python, f"peers found in {venv}"
    if venv.resolve().is_relative_to(ROOT):
        return None, f"--peers-venv {venv} is inside the repository; give a scratch folder"
    steps = [
        [getattr(sys, "_base_executable", sys.executable), "-m", "venv", str(venv)],
        [str(python), "-m", "pip", "install", "-q", *PEER_REQUIREMENTS],
        probe,
    ]
    print(f"installing the peers into {venv} (a few minutes) ...", flush=True)
    for step in steps:
        try:
            done = run(step, capture_output=True, text=True)
        except OSError as err:
            return None, f"{step[0]}: {err}"
        if done.returncode != 0:
            tail = (done.stderr or done.stdout or "").strip().splitlines()[-3:]
            return None, f"`{' '.join(step[:4])} ...` failed: {' | '.join(tail)}"
    return python, f"peers installed in {venv}"


def run_peer(python: Path, impl: str, spec: dict) -> dict:
    """One peer in a fresh process under the peers' python; its answer is the last line."""
    cmd = [
        str(python),
        str(Path(__file__).resolve().parent / "peer_workers.py"),
        impl,
        json.dumps(spec),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{impl} failed: {done.stderr.strip()[-2000:]}")
    return json.loads(lines[-1])


# ------------------------------------------------------------------------------------------
# ringsim's runs and the floor (this project's venv)
# ------------------------------------------------------------------------------------------


def ringsim_rank(rank: int, hosts: int, config) -> dict:
    """One rank of ``kernels.distributed.launch.run_ring``, with its peak memory."""
    from kernels.distributed.launch import run_ring

    rss0 = maxrss_bytes()
    result = run_ring(rank, hosts, config)
    for key in ("forward_timeline", "backward_timeline"):
        result.pop(key, None)
    return {**result, "rss": maxrss_bytes(), "rss_start": rss0}


def run_ringsim_gloo(case: Case, spec: dict) -> dict:
    from kernels.distributed.launch import RunConfig, assemble, launch

    layout = "zigzag" if case.causal else "contiguous"
    config = RunConfig(
        case.seq_len,
        heads=HEADS,
        head_dim=HEAD_DIM,
        layout=layout,
        causal=case.causal,
        backward=case.backward,
        repeats=case.repeats,
        warmup=1,
        return_tensors=spec["save"],
        timeout_s=1800,
    )
    ranks = launch(ringsim_rank, HOSTS, args=(config,), threads=1, timeout_s=1800)
    per_repeat = zip(*(np.add(r["forward_s"], r["backward_s"]) for r in ranks), strict=True)
    if spec["save"]:
        for key in ("out", "dq", "dk", "dv")[: 4 if case.backward else 1]:
            np.save(Path(spec["outputs"]) / f"ringsim-gloo-{key}.npy", assemble(ranks, key, layout))
    return {
        "times": [max(t) for t in per_repeat],
        "rss": [r["rss"] for r in ranks],
        "rss_start": [r["rss_start"] for r in ranks],
    }


def numpy_worker(case: Case, spec: dict) -> dict:
    from ringsim import ring_attention, ring_attention_backward

    rss0 = maxrss_bytes()
    layout = "zigzag" if case.causal else "contiguous"
    q, k, v, dout = (np.load(Path(spec["inputs"]) / f"{x}.npy") for x in "qkvg")
    times = []
    for _ in range(case.repeats):  # no warm-up: nothing to compile or cache
        t0 = time.perf_counter()
        out, lse = ring_attention(
            q, k, v, hosts=HOSTS, layout=layout, causal=case.causal, return_lse=True
        )
        arrays = {"out": out}
        if case.backward:
            grads = ring_attention_backward(
                q, k, v, dout, hosts=HOSTS, layout=layout, causal=case.causal, out=out, lse=lse
            )
            arrays.update(zip(("dq", "dk", "dv"), grads, strict=True))
        times.append(time.perf_counter() - t0)
    if spec["save"]:
        for key, x in arrays.items():
            np.save(Path(spec["outputs"]) / f"ringsim-numpy-{key}.npy", x)
    return {"times": times, "rss": [maxrss_bytes()], "rss_start": [rss0]}


def floor_worker(case: Case, spec: dict) -> dict:
    """The fewest seconds a P = 2 ring can take here: each rank, on a core of its own, computes
    ``P`` full ``c x c`` blocks; one block is torch's fused SDPA on one thread."""
    import torch
    import torch.nn.functional as F

    rss0 = maxrss_bytes()
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    torch.set_num_threads(1)
    c = case.seq_len // HOSTS
    q, k, v, dout = (
        torch.from_numpy(np.load(Path(spec["inputs"]) / f"{x}.npy")[..., :c, :]) for x in "qkvg"
    )
    times = []
    for i in range(1 + case.repeats):
        qr, kr, vr = (x.clone().requires_grad_(case.backward) for x in (q, k, v))
        t0 = time.perf_counter()
        out = F.scaled_dot_product_attention(qr, kr, vr)
        if case.backward:
            out.backward(dout)
        if i:
            times.append(HOSTS * (time.perf_counter() - t0))
    flops = 4 * c * c * HEAD_DIM * HEADS * (3.5 if case.backward else 1)  # backward: 2.5x
    return {
        "times": times,
        "rss": [maxrss_bytes()],
        "rss_start": [rss0],
        "gflops_per_core": flops * HOSTS / min(times) / 1e9,
    }


def in_fresh_process(fn, *args) -> dict:
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
        return pool.submit(fn, *args).result()


# ------------------------------------------------------------------------------------------
# Inputs, float64 references, errors
# ------------------------------------------------------------------------------------------


def write_inputs(case: Case, folder: Path) -> None:
    """``q, k, v, dout`` ``(1, H, N, d)`` fp32 as ``kernels.distributed.launch.RunConfig`` draws
    them (the gloo ring draws its own, identical ones)."""
    import torch

    from kernels.distributed.launch import RunConfig

    config = RunConfig(case.seq_len, HEADS, None, HEAD_DIM)
    for name, x in zip("qkvg", config.inputs(torch.device("cpu")), strict=True):
        np.save(folder / f"{name}.npy", x.numpy())


def reference(case: Case, folder: Path) -> dict:
    """float64 ``out`` (and ``dq, dk, dv``), one head at a time."""
    import torch
    import torch.nn.functional as F

    q, k, v, dout = (torch.from_numpy(np.load(folder / f"{x}.npy")).double() for x in "qkvg")
    keys = ("out", "dq", "dk", "dv") if case.backward else ("out",)
    ref = {key: np.empty(q.shape) for key in keys}
    for h in range(HEADS):
        qh, kh, vh = (x[:, h].clone().requires_grad_(case.backward) for x in (q, k, v))
        with torch.set_grad_enabled(case.backward):
            out = F.scaled_dot_product_attention(qh, kh, vh, is_causal=case.causal)
        ref["out"][:, h] = out.detach().numpy()
        if case.backward:
            out.backward(dout[:, h])
            for key, x in zip(("dq", "dk", "dv"), (qh, kh, vh), strict=True):
                ref[key][:, h] = x.grad.numpy()
    return ref


def token_errors(got: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Per token: max over batch, heads and features of ``|got - ref|``, over ``max|ref|``."""
    return np.abs(got - ref).max(axis=(0, 1, 3)) / np.abs(ref).max()


def rank_errors(got: np.ndarray, ref: np.ndarray, positions: np.ndarray) -> list[dict]:
    """``token_errors`` for the tokens each rank holds (``positions[r]``)."""
    err = token_errors(got, ref)
    return [
        {"max": float(err[p].max()), "tokens_wrong": int((err[p] > TOL).sum()), "tokens": len(p)}
        for p in positions
    ]


def errors_of(impl: str, case: Case, outputs: Path, ref: dict) -> dict:
    from ringsim.layouts import host_positions

    layout = "zigzag" if case.causal and impl.startswith("ringsim") else "contiguous"
    positions = host_positions(layout, HOSTS, case.seq_len)
    errors = {}
    for key, r in ref.items():
        path = outputs / f"{impl}-{key}.npy"
        if path.exists():
            errors[key] = rank_errors(np.load(path).astype(np.float64), r, positions)
    return errors


# ------------------------------------------------------------------------------------------
# The benchmark
# ------------------------------------------------------------------------------------------


def summarize(runs: list[dict]) -> dict:
    times = [t for r in runs for t in r["times"]]
    return {
        "median_s": statistics.median(times),
        "min_s": min(times),
        "times_s": times,
        "peak_rss_mib": max(max(r["rss"]) for r in runs) / MIB,
        "peak_rss_per_process_mib": [x / MIB for x in runs[-1]["rss"]],
        "rss_at_start_mib": [x / MIB for x in runs[-1]["rss_start"]],
    }


def run_case(case: Case, impls: list[str], python: Path | None, args, work: Path) -> dict:
    numpy_max = args.numpy_max_seq_len
    inputs, outputs = work / "inputs", work / "outputs"
    inputs.mkdir(exist_ok=True)
    outputs.mkdir(exist_ok=True)
    write_inputs(case, inputs)
    impls = [
        i
        for i in impls
        if not (i == "floor" and case.causal)  # the floor: full blocks
        and not (i == "ringsim-numpy" and (case.backward or case.seq_len > numpy_max))
    ]
    runs: dict[str, list[dict]] = {i: [] for i in impls}
    load = [os.getloadavg()]
    for rnd in range(case.rounds):
        spec = {
            "inputs": str(inputs),
            "outputs": str(outputs),
            "save": rnd == 0,
            "causal": case.causal,
            "backward": case.backward,
            "repeats": case.repeats,
            "jax_chunk": args.jax_chunk,
            "rap_bucket": args.rap_bucket,
        }
        for impl in impls[rnd % len(impls) :] + impls[: rnd % len(impls)]:
            if impl in PEERS:
                res = run_peer(python, impl, spec)
            elif impl == "ringsim-gloo":
                res = run_ringsim_gloo(case, spec)
            else:
                res = in_fresh_process(
                    {"ringsim-numpy": numpy_worker, "floor": floor_worker}[impl], case, spec
                )
            runs[impl].append(res)
            print(
                f"  round {rnd}: {impl:<24} " + " ".join(f"{t:7.3f}s" for t in res["times"]),
                flush=True,
            )
        load.append(os.getloadavg())
    result = {
        "case": asdict(case),
        "load_average": load,
        "impls": {i: summarize(r) for i, r in runs.items()},
    }
    if "floor" in runs:
        result["floor_gflops_per_core"] = max(r["gflops_per_core"] for r in runs["floor"])
    if case.seq_len <= 8192:
        ref = reference(case, inputs)
        result["errors"] = {i: errors_of(i, case, outputs, ref) for i in impls if i != "floor"}
    return result


def verdicts(result: dict) -> dict:
    """Ratios, fraction of the floor, and which outputs are wrong (per rank)."""
    impls = result["impls"]
    out = {}
    if "jax" in impls:
        out["ringsim_over_jax"] = impls["ringsim-gloo"]["median_s"] / impls["jax"]["median_s"]
    if "floor" in impls:
        out["floor_fraction"] = impls["floor"]["median_s"] / impls["ringsim-gloo"]["median_s"]
    wrong = {}
    for impl, errors in result.get("errors", {}).items():
        bad = [
            f"{key} rank {r}: {e['tokens_wrong']}/{e['tokens']} tokens, max {e['max']:.2g}"
            for key, per_rank in errors.items()
            for r, e in enumerate(per_rank)
            if e["max"] > TOL
        ]
        if bad:
            wrong[impl] = bad
    out["wrong"] = wrong
    return out


def print_case(result: dict) -> None:
    case = result["case"]
    print(
        f"{case['name']} (N={case['seq_len']}), load {result['load_average'][0][0]:.1f} -> "
        f"{result['load_average'][-1][0]:.1f}"
    )
    for impl, s in result["impls"].items():
        errs = result.get("errors", {}).get(impl, {})
        worst = max((e["max"] for per in errs.values() for e in per), default=float("nan"))
        peaks = zip(s["peak_rss_per_process_mib"], s["rss_at_start_mib"], strict=True)
        print(
            f"  {impl:<24} median {s['median_s']:8.3f} s  min {s['min_s']:8.3f} s  peak "
            + " ".join(f"{m:.0f}({m - m0:+.0f})" for m, m0 in peaks)
            + f" MiB  worst error {worst:.1e}"
        )
    for key, value in result["verdicts"].items():
        if key == "wrong":
            for impl, lines in value.items():
                print(f"  WRONG {impl}: " + "; ".join(lines))
        else:
            print(f"  {key}: {value:.2f}")


def write_json(data: dict, path: Path) -> None:
    """Atomically: a temporary file beside ``path``, then ``os.replace``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh, indent=2)
        fh.write("\n")
    os.replace(tmp, path)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N / 4, one round, one repeat")
    parser.add_argument("--skip-peers", action="store_true", help="ringsim only (no install)")
    parser.add_argument(
        "--peers-venv",
        type=Path,
        default=None,
        help="the peers' virtualenv (default ~/.cache/ringsim-peers/venv)",
    )
    parser.add_argument("--rounds", type=int, default=None, help="per case (default 3, 16K: 2)")
    parser.add_argument("--cases", default=None, help="comma-separated case numbers, from 1")
    parser.add_argument("--jax-chunk", type=int, default=512, help="ringattention's chunk size")
    parser.add_argument(
        "--rap-bucket",
        type=int,
        default=1024,
        help="ring-attention-pytorch's bucket size (its default)",
    )
    parser.add_argument(
        "--numpy-max-seq-len",
        type=int,
        default=4096,
        help="the NumPy executor runs forward cases up to this N (it is slow)",
    )
    parser.add_argument("--out", type=Path, default=None, help="default results/peers-<date>.json")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    todo = cases(args.quick, args.rounds)
    if args.cases:
        todo = [todo[int(i) - 1] for i in args.cases.split(",")]
    python, why = (
        (None, "--skip-peers")
        if args.skip_peers
        else ensure_peers(args.peers_venv or default_venv())
    )
    impls = [i for i in IMPLS if python is not None or i not in PEERS]
    print(f"peers: {why}" if python else f"peers SKIPPED ({why}); ringsim runs alone")
    data = {
        "date": date.today().isoformat(),
        "machine": {
            "cpus": os.cpu_count(),
            "load_average_at_start": os.getloadavg(),
            "uname": " ".join(os.uname()),
        },
        "hosts": HOSTS,
        "heads": HEADS,
        "head_dim": HEAD_DIM,
        "dtype": "float32",
        "batch": 1,
        "peers": why if python else f"skipped: {why}",
        "peer_requirements": PEER_REQUIREMENTS if python else None,
        "cases": [],
    }
    out = args.out or RESULTS / f"peers-{data['date']}.json"
    with tempfile.TemporaryDirectory(prefix="ringsim-peers-") as work:
        for case in todo:
            print(
                f"{case.name}: N={case.seq_len}, {case.rounds} round(s) of {case.repeats}",
                flush=True,
            )
            result = run_case(case, impls, python, args, Path(work))
            result["verdicts"] = verdicts(result)
            print_case(result)
            data["cases"].append(result)
            write_json(data, out)  # after every case: a long run keeps what it measured
            own = {i: w for i, w in result["verdicts"]["wrong"].items() if i.startswith("ringsim")}
            if own:  # written down first, then refused
                raise AssertionError(f"ringsim is wrong on {case.name}: {own}")
    data["machine"]["load_average_at_end"] = os.getloadavg()
    write_json(data, out)
    print("wrote", out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
