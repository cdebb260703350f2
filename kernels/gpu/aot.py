"""Compile every Triton kernel variant the GPU paths launch, for sm_80 and sm_90, without a GPU.

    python -m kernels.gpu.aot [--arch 80 --arch 90] [--jobs 2] [--out results/aot-....json]

No GPU is needed: a stand-in driver reports ``GPUTarget("cuda", arch, 32)`` and every kernel
launch becomes a compile-only ``warmup``. The host code is the real one
(``kernels.blocks.triton_block.forward``/``backward`` on CPU tensors of the GPU paths' dtypes, head
dims, head counts and sequence-length classes), so Triton specialises each kernel exactly as it
would at a GPU launch (dtypes, constexprs, integer arguments equal to 1 or divisible by 16)
and compiles it all the way to a cubin with its bundled ``ptxas``. Per compiled kernel this
records shared memory (``metadata.shared``), registers and spill bytes (``ptxas -v``), and it
fails on

* a compile error,
* shared memory above the architecture's per-block limit (the launch would raise
  ``OutOfResources``): 163 KB on sm_80, 227 KB on sm_90 (CUDA C++ Programming Guide,
  "Technical Specifications per Compute Capability": maximum shared memory per thread block),
* any register spill in a bf16/fp16 variant, and more than ``FP32_SPILL_BYTES`` of spill
  traffic per thread in an fp32 one (its ``tf32x3`` dots at ``d = 128`` leave a few bytes in
  some variants: results/notes-kernels.md).

Which launches: ``launches()`` lists them from the plans ``kernels.gpu.check`` runs
(correctness cases, the speed rows with every tile the tile search may pick on that
architecture, the ring member and calibration probes) and the ring's launches (bf16, causal,
document ids, GQA). Every launch uses the real ``triton_block`` host code, so a new kernel
argument or a new default tile shows up here.

One worker process per (architecture, shard): the interpreter switch (``TRITON_INTERPRET``, set
by the test session) must be off before Triton's ``jit`` decorates the kernels, and each worker
compiles into a fresh cache directory so ``ptxas`` runs (and logs) for every kernel. Each
distinct kernel is compiled once per architecture (a later launch that specialises to the
same kernel finds it in the worker's cache and adds no record).

``run_all(..., cache=True)`` (the test's way; ``--cache`` here) keeps the whole report in
``ringsim.files.cache_dir("aot")`` beside the SHA-256 of every source file of this repository
the workers imported (kernels, tiles, plans, this file) and the Triton, torch and Python
versions, and returns it while all of them are unchanged; any change compiles everything
again. Compiling takes minutes of CPU; a report whose inputs are byte-identical would be too.

Triton versions: written against Triton 3.9 (pinned for CI). The GPU machine has Triton 3.6;
the APIs used here (``triton.backends.driver.DriverBase``, ``triton.runtime.driver.set_active``,
``JITFunction.run(..., warmup=...)``, ``device_caches``, ``knobs.nvidia.dump_ptxas_log``) exist
in both. CI runs it with 3.9 (``results/aot-triton-3.9.json``); it also ran with a Triton
3.6 wheel for sm_90 (``results/aot-triton-3.6-sm90.json``), whose bundled ``ptxas`` counts
registers slightly differently. The stand-in driver is not
registered with Triton: ``compile_only`` swaps it in and restores the previous one (a private
attribute, ``driver._active``, in both versions), so nothing else in the process sees it.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from ringsim.schedule import RING_PASSES, Pass

# max dynamic shared memory per thread block, bytes (CUDA C++ Programming Guide, Technical
# Specifications per Compute Capability: 163 KB on 8.0, 227 KB on 9.0)
SHARED_LIMIT = {80: 163 * 1024, 90: 227 * 1024}
ARCHS = tuple(SHARED_LIMIT)
FP32_SPILL_BYTES = 64
REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Launch:
    """One host call of ``triton_block.forward`` or ``backward`` (which launch 1 or 2 kernels).

    ``tile``: ``(block_m, block_n, num_warps, num_stages)`` or None for ``default_config``.
    """

    pass_: str  # "forward" | "backward"
    dtype: str  # input dtype: "bfloat16" | "float16" | "float32"
    out_dtype: str  # forward output / backward gradient dtype
    head_dim: int
    heads: int
    kv_heads: int
    seq: int  # tokens of the host call (only its class matters: see _aot_seq)
    causal: bool
    segments: bool
    tile: tuple[int, int, int, int] | None
    used_by: str


def _aot_seq(seq: int) -> int:
    """A short sequence Triton specialises like ``seq``: the same divisibility by 16 (a 16K
    block and a 64-token block compile to the same kernel), so the host side stays cheap."""
    return seq if seq <= 320 else 64 + seq % 16


def launches(arch: int) -> list[Launch]:
    """Every (pass, dtype, head dim, heads, mask, tile) the GPU paths launch on ``arch``."""
    from kernels.blocks.tiles import tile_candidates
    from kernels.gpu import plan as plan

    out: list[Launch] = []
    # correctness: block_attention / block_attention_backward (fp32 results, default tiles)
    for c, d, hq, hkv in plan.CORRECTNESS_CASES:
        for dtype in plan.CORRECTNESS_DTYPES:
            for causal in (False, True):
                for pass_ in RING_PASSES:
                    shape = (pass_, dtype, "float32", d, hq, hkv, c, causal)
                    out.append(Launch(*shape, False, None, "gpu_check.correctness"))
    c, d, h = plan.ZIGZAG_CASE
    out.append(Launch("forward", "float32", "float32", d, h, h, c, True, False, None, "zigzag"))
    # speed: bf16 in and out; the forward with every tile the search may pick on this arch
    for d in plan.SPEED_HEAD_DIMS:
        heads = plan.MODEL_WIDTH // d
        for causal in (False, True):
            for c in sorted({_aot_seq(c) for c in plan.SPEED_SIZES}):
                shape = ("bfloat16", "bfloat16", d, heads, heads, c, causal, False)
                tiles = [None] + [tuple(vars(t).values()) for t in tile_candidates(d, arch)]
                for tile in tiles:
                    out.append(Launch("forward", *shape, tile, "gpu_check.speed"))
                out.append(Launch("backward", *shape, None, "gpu_check.speed"))
    # ring member, calibration probes and the ring itself: bf16 in, fp32 results; the ring
    # with causal layouts, document ids and GQA
    h, d = plan.RING_HEADS, plan.RING_HEAD_DIM
    for kv_heads in (h, h // 4):
        for causal in (False, True):
            for segments in (False, True):
                for pass_ in RING_PASSES:
                    shape = (pass_, "bfloat16", "float32", d, h, kv_heads, 2048, causal)
                    out.append(Launch(*shape, segments, None, "ring member, calibration, ring"))
    return out


# ------------------------------------------------------------------------------------------
# Compile without a GPU
# ------------------------------------------------------------------------------------------


def stand_in_driver(arch: int):
    """A Triton driver that only reports a target: enough for the JIT to specialise and
    compile. The "device" is the arch number, so each arch keeps its own kernel cache."""
    import torch
    from triton.backends.compiler import GPUTarget
    from triton.backends.driver import DriverBase

    class StandInDriver(DriverBase):
        @staticmethod
        def is_active() -> bool:
            return False

        def get_current_target(self):
            return GPUTarget("cuda", arch, 32)

        def get_current_device(self):
            return arch

        def get_current_stream(self, device=None):
            return 0

        def get_active_torch_device(self):
            return torch.device("cpu")

        def map_python_to_cpp_type(self, ty: str) -> str:
            return ty

        def get_benchmarker(self):
            raise RuntimeError("compile-only driver: nothing runs")

        def get_device_interface(self):
            raise RuntimeError("compile-only driver: nothing runs")

        def get_empty_cache_for_benchmark(self):
            raise RuntimeError("compile-only driver: nothing runs")

        def clear_cache(self, cache) -> None:
            pass

    return StandInDriver()


@contextlib.contextmanager
def compile_only(arch: int) -> Iterator[io.StringIO]:
    """Within: kernel launches compile for ``arch`` and return without running; yields the
    captured ``ptxas -v`` log."""
    from triton import knobs
    from triton.runtime.driver import driver
    from triton.runtime.jit import JITFunction

    run = JITFunction.run

    def warmup_only(self, *args, grid, warmup, **kwargs):
        return run(self, *args, grid=grid, warmup=True, **kwargs)

    log = io.StringIO()
    previous = driver._active  # None on a machine without a GPU (reset_active would raise)
    driver.set_active(stand_in_driver(arch))
    JITFunction.run = warmup_only
    dump = knobs.nvidia.dump_ptxas_log
    knobs.nvidia.dump_ptxas_log = True
    try:
        with contextlib.redirect_stdout(log):
            yield log
    finally:
        knobs.nvidia.dump_ptxas_log = dump
        JITFunction.run = run
        driver._active = previous


# the lines of ``ptxas -v`` that name a kernel, its spills and its registers
_ENTRY = re.compile(r"Compiling entry function '(\w+)'")
_SPILLS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_REGISTERS = re.compile(r"Used (\d+) registers")


def parse_ptxas(log: str) -> dict[str, dict]:
    """``ptxas -v`` output -> per entry function: registers, spill bytes, stack frame."""
    found: dict[str, dict] = {}
    name = None
    for line in log.splitlines():
        if m := _ENTRY.search(line):
            name = m.group(1)
            found[name] = {}
        elif name and (m := _SPILLS.search(line)):
            found[name].update(stack=int(m[1]), spill_stores=int(m[2]), spill_loads=int(m[3]))
        elif name and (m := _REGISTERS.search(line)):
            found[name]["registers"] = int(m[1])
    return found


def _launch_tensors(launch: Launch):
    import torch

    from kernels.blocks.args import check_block_args

    dtype = getattr(torch, launch.dtype)
    seq = _aot_seq(launch.seq)
    q = torch.zeros(1, launch.heads, seq, launch.head_dim, dtype=dtype)
    k = torch.zeros(1, launch.kv_heads, seq, launch.head_dim, dtype=dtype)
    seg = torch.zeros(seq, dtype=torch.int64) if launch.segments else None
    args = check_block_args(q, k, k.clone(), causal=launch.causal, q_seg=seg, k_seg=seg)
    return args, q


def compile_launch(launch: Launch, arch: int) -> list[dict]:
    """Compile the kernels of one launch for ``arch``: one record per newly compiled kernel
    (a kernel an earlier launch already compiled is not compiled again)."""
    import torch

    from kernels.blocks import triton_block as tb
    from kernels.blocks.tiles import gpu_config

    kernels = tb.KERNELS

    def cache(fn) -> dict:
        return fn.device_caches[arch][0] if arch in fn.device_caches else {}

    before = {name: set(cache(fn)) for name, fn in kernels.items()}
    args, q = _launch_tensors(launch)
    out_dtype = getattr(torch, launch.out_dtype)
    # the tensors are on the CPU, so name the GPU's default tiles (not the interpreter's)
    cfg = (
        tb.TileConfig(*launch.tile)
        if launch.tile
        else gpu_config(launch.head_dim, launch.pass_, q.dtype, arch)
    )
    start = time.perf_counter()
    with compile_only(arch) as log:
        if launch.pass_ == Pass.FORWARD:
            tb.forward(args, out_dtype, cfg)
        else:
            lse = torch.zeros(q.shape[:-1])
            tb.row_delta(q, q, block_m=64)  # the backward's delta, as gpu_check times it
            tb.backward(args, torch.zeros_like(q), lse, lse, out_dtype, cfg)
    seconds = time.perf_counter() - start
    ptxas = parse_ptxas(log.getvalue())
    records = []
    for name, fn in kernels.items():
        for key in set(cache(fn)) - before[name]:
            kernel = cache(fn)[key]
            meta = kernel.metadata
            records.append(
                {
                    "arch": arch,
                    "kernel": name,
                    **asdict(launch),
                    "tile_used": [meta.num_warps, meta.num_stages],
                    "shared_bytes": meta.shared,
                    "shared_limit": SHARED_LIMIT[arch],
                    **ptxas.get(name, {}),
                    "compile_s": round(seconds, 2),
                }
            )
    return records


def problems(record: dict) -> list[str]:
    """Why a compiled kernel would fail or run badly on its architecture (empty: fine)."""
    found = []
    if "error" in record:
        found.append(f"compile error: {record['error']}")
        return found
    if record["shared_bytes"] > record["shared_limit"]:
        found.append(f"shared memory {record['shared_bytes']} B > {record['shared_limit']} B")
    if record.get("registers") is None:
        found.append("no ptxas report (was the kernel taken from a cache?)")
    else:
        spilled = record["spill_stores"] + record["spill_loads"]
        allowed = FP32_SPILL_BYTES if record["dtype"] == "float32" else 0
        if spilled > allowed:
            found.append(
                f"spills {record['spill_stores']} B stored, {record['spill_loads']} B loaded "
                f"(allowed: {allowed} B for {record['dtype']})"
            )
    return found


# ------------------------------------------------------------------------------------------
# Workers and the command line
# ------------------------------------------------------------------------------------------


def repo_sources() -> list[str]:
    """The Python files of this repository that this process has imported, relative to it:
    what a worker's compiles depend on besides Triton and torch (a virtual environment inside
    the repository is not the repository's)."""
    env = Path(sys.prefix).resolve()
    found = set()
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if not path or not os.path.isabs(path) or not path.endswith(".py"):
            continue
        path = Path(path).resolve()
        if path.is_relative_to(REPO) and not path.is_relative_to(env):
            found.add(path.relative_to(REPO).as_posix())
    return sorted(found)


def run_worker(arch: int, shard: int, shards: int) -> list[dict]:
    """Compile this shard's launches (every ``shards``-th one) in this process."""
    records = []
    for i, launch in enumerate(launches(arch)):
        if i % shards != shard:
            continue
        try:
            records += compile_launch(launch, arch)
        except Exception as err:  # recorded, and the check fails on it
            records.append(
                {"arch": arch, **asdict(launch), "error": f"{type(err).__name__}: {err}"}
            )
    return records


def _worker_env(cache_dir: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    # Triton 3.9 warns when this is unset; 1 keeps the fusion Triton 3.6 uses by default
    env.update(TRITON_CACHE_DIR=cache_dir, TRITON_DEFAULT_FP_FUSION="1")
    return env


def _versions() -> dict:
    """What else a compile depends on: the compiler, the host code's torch, the interpreter,
    and the one environment switch the workers set."""
    import torch
    import triton

    fusion = _worker_env("")["TRITON_DEFAULT_FP_FUSION"]
    python = sys.version.split()[0]
    return {
        "triton": triton.__version__,
        "torch": torch.__version__,
        "python": python,
        "fp_fusion": fusion,
    }


def _digests(sources: Sequence[str]) -> dict[str, str | None]:
    """SHA-256 of each source file (relative to the repository), None for a missing one."""
    out: dict[str, str | None] = {}
    for name in sources:
        path = REPO / name
        out[name] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
    return out


def _cache_file(archs: Sequence[int]) -> Path:
    from ringsim.files import cache_dir

    return cache_dir("aot") / f"aot-{'-'.join(map(str, archs))}.json"


def _cached_report(archs: Sequence[int]) -> dict | None:
    """The stored report for ``archs`` if every input it was compiled from is unchanged."""
    try:
        entry = json.loads(_cache_file(archs).read_text())
        same = entry["versions"] == _versions() and entry["sources"] == _digests(entry["sources"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return {**entry["report"], "cached": True} if same else None


def run_all(archs: Sequence[int] = ARCHS, jobs: int = 2, *, cache: bool = False) -> dict:
    """Compile everything in ``jobs`` worker processes (split by arch, then by launch).
    ``cache``: return the stored report while its inputs are unchanged, and store a new one
    (see the module docstring); the report says ``"cached": true`` when it was reused."""
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    archs = list(archs)
    for arch in archs:
        if arch not in SHARED_LIMIT:
            raise ValueError(f"arch must be one of {sorted(SHARED_LIMIT)}, got {arch}")
    if cache and (report := _cached_report(archs)) is not None:
        return report
    report, sources = _compile_all(archs, jobs)
    if cache:
        from ringsim.files import write_json

        entry = {"versions": _versions(), "sources": _digests(sources), "report": report}
        with contextlib.suppress(OSError):  # a cache that cannot be written is no cache
            write_json(_cache_file(archs), entry, indent=None)
    return {**report, "cached": False}


def _compile_all(archs: list[int], jobs: int) -> tuple[dict, list[str]]:
    shards = max(1, -(-jobs // len(archs)))
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ringsim-aot-") as tmp:
        procs = []
        for arch in archs:
            for shard in range(shards):
                cmd = [
                    sys.executable,
                    "-m",
                    "kernels.gpu.aot",
                    "--worker",
                    f"{arch}:{shard}:{shards}",
                ]
                cache = os.path.join(tmp, f"{arch}-{shard}")
                procs.append(
                    subprocess.Popen(
                        cmd,
                        cwd=REPO,
                        env=_worker_env(cache),
                        text=True,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE,
                    )
                )
        records, sources = [], set()
        for proc in procs:
            stdout, stderr = proc.communicate()
            if proc.returncode != 0:
                raise RuntimeError(f"AOT worker {proc.args[-1]} failed:\n{stderr[-3000:]}")
            said = json.loads(stdout.strip().splitlines()[-1])
            records += said["records"]
            sources.update(said["sources"])
    import triton

    for record in records:
        record["problems"] = problems(record)
    report = {
        "triton": triton.__version__,
        "archs": archs,
        "shared_limit_bytes": {str(a): SHARED_LIMIT[a] for a in archs},
        "wall_s": round(time.perf_counter() - start, 1),
        "jobs": len(procs),
        "kernels": len(records),
        "failures": [r for r in records if r["problems"]],
        "records": sorted(records, key=_record_key),
    }
    return report, sorted(sources)


def _record_key(r: dict):
    fields = ("arch", "kernel", "dtype", "out_dtype", "head_dim", "heads", "kv_heads", "seq")
    return (*(str(r.get(f, "")) for f in fields), r["causal"], r["segments"], str(r["tile"]))


def summary_table(report: dict) -> str:
    """One line per compiled kernel: what, shared memory, registers, spills, problems."""
    lines = [
        f"{'arch':>4} {'kernel':15} {'dtype':9} {'d':>3} {'grp':>3} {'mask':7} "
        f"{'tile':14} {'smem KB':>7} {'regs':>4} {'spill B':>7}  problems"
    ]
    for r in report["records"]:
        if "error" in r:
            lines.append(f"{r['arch']:>4} {r['pass_']:15} {r['dtype']:9} ERROR {r['error'][:80]}")
            continue
        mask = ("causal" if r["causal"] else "full") + ("+seg" if r["segments"] else "")
        tile = (
            "default"
            if r["tile"] is None
            else "x".join(map(str, r["tile"][:2])) + (f" w{r['tile'][2]}s{r['tile'][3]}")
        )
        spill = r.get("spill_stores", 0) + r.get("spill_loads", 0)
        lines.append(
            f"{r['arch']:>4} {r['kernel']:15} {r['dtype']:9} {r['head_dim']:>3} "
            f"{r['heads'] // r['kv_heads']:>3} {mask:7} {tile:14} "
            f"{r['shared_bytes'] / 1024:7.1f} {r.get('registers', -1):>4} {spill:>7}  "
            f"{'; '.join(r['problems'])}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kernels.gpu.aot",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--arch",
        type=int,
        action="append",
        choices=ARCHS,
        help="compute capability x10 (repeatable; default: 80 and 90)",
    )
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--out", default=None, help="write the JSON report here")
    parser.add_argument(
        "--cache",
        action="store_true",
        help="reuse the stored report while its inputs are unchanged",
    )
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        arch, shard, shards = (int(x) for x in args.worker.split(":"))
        records = run_worker(arch, shard, shards)
        print(json.dumps({"records": records, "sources": repo_sources()}))
        return 0
    if args.jobs < 1:
        parser.error(f"--jobs must be >= 1, got {args.jobs}")
    report = run_all(args.arch or ARCHS, args.jobs, cache=args.cache)
    print(summary_table(report))
    print(
        f"{report['kernels']} kernels compiled in {report['wall_s']} s with {report['jobs']} "
        f"workers; {len(report['failures'])} with problems"
    )
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    return 1 if report["failures"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
